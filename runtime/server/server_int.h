/* Internals of the server core (server.c: the server, its listeners,
   connections and driving; server_opts.c: its options; server_table.c:
   its method table; server_rpc.c: calls and the three protocols;
   server_h2.c: nghttp2's server session; server_h1.c: HTTP/1.1).  Private to the runtime. */
#ifndef CONCH_SERVER_INT_H
#define CONCH_SERVER_INT_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>

#include <conch/interceptor.h>
#include <conch/server.h>

#include "buf.h"
#include "compress.h"
#include "conn_int.h"
#include "envelope.h"
#include "filter.h"
#include "list.h"
#include "metadata_int.h"
#include "session.h"
#include "timer.h"
#include "tls.h"

#define SRV_MAX_LISTENERS 8
/* The bytes one read takes, and the plaintext a connection takes at once
   (HTTP/2, sniffing). */
#define SRV_READ_CHUNK 16384

struct conch_server_opts {
  conch_mem mem;
  size_t recv_limit;
  size_t send_buffer;
  long drain_ms;
  long idle_ms;
  uint32_t max_header_list;
  uint32_t max_streams;
  conch_comp_opts comp; /* accept[]: the compressions the server takes */
  /* TLS (conch_server_opts_set_tls*()): copies owned by the options; the
     server's copy of the struct holds them only until conch_server_new()
     returns. */
  int tls;
  /* The certificate and key (conch_server_opts_set_tls*()), and the
     client CAs (conch_server_opts_set_tls_client_ca*(), kept by
     conch_server_opts_set_tls*()), made with libc's allocator. */
  conch_tls_material tls_mat;
  char tls_err[256];
  int tls_client_optional;
  conch_server_gate_fn gate;
  void *gate_ud;
  conch_server_accept_fn accept_fn;
  void *accept_ud;
  size_t max_conns;     /* 0: no limit */
  long header_ms;       /* 0: none */
  long body_ms;         /* 0: none */
  size_t conn_buffered; /* request bytes one connection may hold; 0: any */
  size_t max_buffered;  /* ... all connections; 0: any */
  size_t compress_min;  /* smaller response messages are not compressed */
  conch_json_resolver json_resolve; /* JSON codec: Any types; may be NULL */
  void *json_resolve_ud;
  int64_t (*clock)(void *user_data); /* NULL: CLOCK_MONOTONIC */
  void *clock_ud;
};

typedef struct srv_route {
  char *path;
  conch_server_route_fn fn;
  void *user_data;
} srv_route;

/* A plain HTTP handler (conch_server_add_http()). */
typedef struct srv_http_route {
  char *path;
  conch_http_handler h;
  void *user_data;
} srv_http_route;

typedef struct srv_method {
  conch_method m; /* m.path points at |path| */
  char *path;
  conch_server_handler h;
  void *user_data;
} srv_method;

typedef struct srv_h1 srv_h1; /* server_h1.c */

/* A connection of the server.  |base| is a connection as the client's
   (conn_int.h): its descriptor, its filter, what the hooks were told and
   its session, called through the table of session.h (|base.ops|: the
   sniffer's until the first bytes or ALPN say which, then HTTP/1.1's or
   HTTP/2's; |base.h2| is nghttp2's server session).  Embedded rather than
   conch_conn made role-neutral: the client's fields (addresses, calls,
   keepalive) cost a server connection some bytes and nothing else, and
   the client's code keeps reading them where they are.  The rest is the
   server's: its calls, timers, budgets and the ways it closes. */
typedef struct srv_conn {
  conch_conn base;
  conch_link link; /* in conch_server.conns */
  conch_server *s;
  int has_t;          /* adopted with a transport of the caller's: |tr| */
  conch_transport tr; /* base.transport then */
  conch_tls *tls;     /* base.filter.tls, read by server_call.c (peer certs) */
  uint8_t sniff[4]; /* first bytes of a cleartext connection */
  size_t nsniff;
  srv_h1 *h1;       /* HTTP/1.1's session */
  /* base.state CONCH_CONN_DEAD: to be closed when it is settled (at the
     end of the turn: conch__srv_conn_close); base.closing: close once the
     bytes for the transport are out (conch__srv_conn_finish). */
  int goaway;       /* GOAWAY submitted (HTTP/1.1: no new request) */
  int lingering;    /* HTTP/1.1: write side done, reading until EOF */
  int shut_wr;      /* the socket's write side was shut */
  int kicking;      /* inside conch__srv_conn_kick (HTTP/1.1 waits) */
  conch_link rpcs;
  conch_timer idle; /* kind SRV_TIMER_IDLE: armed while there is no call */
  conch_timer linger; /* kind SRV_TIMER_LINGER */
  long peer_uid;    /* Unix socket peer, else -1 */
  int passed;       /* a request passed the gate */
  int rd_eof;       /* the client shut its write side */
  size_t buffered;  /* request bytes its calls hold */
} srv_conn;

/* The connection of |c|, a server's (its sessions' tables take the
   conch_conn). */
static inline srv_conn *conch__srv_conn_of(const conch_conn *c) {
  return CONCH_CONTAINER(c, srv_conn, base);
}

/* The turn settles only the connections on the endpoint's dirty list
   (conch__conn_mark_dirty): whatever gives one work (a read, a timer, a
   handler's send, room, a close) puts it there. */
static inline void conch__srv_conn_dirty(srv_conn *conn) {
  conch__conn_mark_dirty(&conn->base);
}
/* 1 when |conn| is closed (and freed when it is next settled). */
static inline int conch__srv_conn_dead(const srv_conn *conn) {
  return conn->base.state == CONCH_CONN_DEAD;
}
/* Closes |conn| when it is next settled (this turn's end, or the next
   turn when it is being settled now). */
void conch__srv_conn_close(srv_conn *conn);
/* Closes |conn| once the bytes for the transport are out. */
static inline void conch__srv_conn_finish(srv_conn *conn) {
  conn->base.closing = 1;
  conch__srv_conn_dirty(conn);
}

/* A header block being built: nghttp2_nv whose strings live in |store|
   (offsets until done, server_rpc.c). */
typedef struct srv_hb {
  nghttp2_nv *nv;
  size_t n, cap;
  conch_buf store;
  int failed;
} srv_hb;

/* What a call's wire looks like. */
enum {
  SRV_CONNECT_UNARY = 1,
  SRV_CONNECT_STREAM,
  SRV_GRPC,
  SRV_GRPC_WEB
};

/* Who holds a call. */
enum {
  SRV_RPC_HEADERS = 0, /* request headers still arriving */
  SRV_RPC_USER,        /* the handler holds it */
  SRV_RPC_DONE         /* the server answers or answered; nobody holds it */
};

/* Where a call's response goes and what its request bytes owe: the
   connection's session.  HTTP/2 (server_h2.c): nghttp2's stream, the
   body pulled by its data source; HTTP/1.1 (server_h1.c): the one
   exchange in progress, the body written by the exchange as the
   transport takes it.  Every call of a connection has the same. */
typedef struct srv_sink {
  /* The response head |h| (pointers made), its body from rpc->out when
     |with_data| (else the response is the head alone).  0 or a
     CONCH_ERR_*. */
  int (*head)(conch_rpc *rpc, srv_hb *h, int with_data);
  /* rpc->out grew, or out_end was set (with rpc->trl, gRPC's trailers). */
  void (*more)(conch_rpc *rpc);
  /* The response cannot go on: the stream ends with HTTP/2 error |code|
     (HTTP/1.1: an answer if the head did not go out, else a cut). */
  void (*reset)(conch_rpc *rpc, uint32_t code);
  /* |n| request bytes that were held went to the handler. */
  void (*consumed)(conch_rpc *rpc, size_t n);
  /* The connection holds more request bytes than it may: it ends. */
  void (*overflow)(conch_rpc *rpc);
} srv_sink;

/* server_h2.c's: HTTP/2. */
extern const srv_sink conch__srv_h2_sink;

struct conch_rpc {
  conch_link link; /* in srv_conn.rpcs */
  srv_conn *conn;
  const srv_sink *sink;
  int32_t id;
  int state;
  srv_method *method;
  int wire;    /* SRV_CONNECT_UNARY... */
  int json;    /* the JSON codec */
  int utf8;    /* the content type said charset=utf-8 (echoed back) */
  int req_enc; /* compression ids */
  int resp_enc;
  /* Request headers, gathered until they end. */
  int bad_method; /* :method was neither POST nor GET */
  int get;        /* :method was GET (Connect unary GET) */
  uint32_t discarded; /* of an answered request, see |discarding| */
  char *query;    /* after '?' in :path, or NULL */
  int hdr_too_big;
  /* In the hole before |hdr_bytes|. */
  unsigned refused : 1;  /* a send was refused and none succeeded since: an
                            OK finish would hide a lost response */
  unsigned src_wait : 1; /* |src| had none: until conch_rpc_wake() */
  unsigned discarding : 1; /* answered before the request ended: its rest
                              is read and dropped, within bounds, before
                              the reset */
  size_t hdr_bytes;
  char *path;
  char *authority;         /* :authority, or NULL */
  char mname[16];          /* :method (truncated) */
  conch_metadata proto_md; /* the protocol's own request headers */
  conch_metadata req_md;
  conch_metadata resp_md;
  conch_metadata trl_md;
  conch_timer timer; /* deadline */
  int64_t deadline;  /* ms by the server's clock; -1: none */
  conch_env_reader env;
  conch_buf body;    /* Connect unary request body */
  conch_buf out;     /* response bytes nghttp2 has not read yet */
  int submitted;     /* response HEADERS submitted */
  int out_end;       /* no bytes after |out| */
  int deferred;      /* the data source is deferred */
  srv_hb trl;       /* gRPC trailers, for when |out| drained */
  int want_ready;  /* a send was refused: on_send_ready is owed */
  int want_low;    /* conch_rpc_notify_drained(): on_send_ready at |low| */
  /* conch_rpc_send_from(): responses come from here (allocated then: an
     idle call pays only this pointer). */
  conch_rpc_source *src;
  size_t low;
  int paused;      /* conch_rpc_pause(): request bytes wait in |held| */
  int resumed;     /* conch_rpc_resume(): |held| is fed on the next turn */
  int eos_held;    /* the request ended while bytes were held */
  conch_buf held;  /* request bytes not delivered (their window kept) */
  int half_closed; /* the client ended its requests */
  int pull;        /* pull mode (on_recv_ready): messages wait in |pq| */
  int want_recv;   /* conch_rpc_recv() said AGAIN: on_recv_ready is owed */
  conch_buf pq;    /* checked messages as received: [u32 len][u8 comp][..] */
  size_t pq_n;     /* how many */
  conch_buf pmsg;  /* the raw message conch_rpc_recv_raw() lent */
  int nrecv;
  int nsent;
  void *data;
  conch_timer recv; /* kind SRV_TIMER_RECV: headers, then the body */
  int headers_in;   /* the header block ended */
  size_t counted;   /* request bytes held, as counted in conn and server */
  /* A plain HTTP exchange (conch_server_add_http()), or NULL: an RPC. */
  struct conch_http *http;
  /* Its run through the interceptors (server_intercept.c), NULL when
     none applies. */
  struct srv_icept_run *ir;
  /* Unary and server-streaming calls: the request message, decoded (or
     raw), held until the request ends, as connect-go reads it. */
  ProtobufCMessage *first;
  conch_buf first_raw;
  int has_first;
};

struct conch_server {
  /* What its connections see of it (conn_int.h): the allocator (ep.mem,
     &o.mem: the server's only pointer to it), the clock, the hooks, the
     timers on |heap| and the TLS context. */
  conch_endpoint ep;
  /* Every connection's reads and TLS plaintext (conn.c's read loop): one
     connection at a time is read, and none keeps bytes here past its
     session's feed. */
  uint8_t rbuf[SRV_READ_CHUNK];
  uint8_t pbuf[SRV_READ_CHUNK];
  struct conch_server_opts o;
  conch_comps comps;
  char accept[CONCH__COMP_ACCEPT_MAX]; /* the compressions, as advertised */
  size_t accept_len;
  ProtobufCAllocator pb_alloc;
  srv_method *methods;
  size_t nmethods, cap_methods;
  srv_route *routes;
  size_t nroutes;
  srv_http_route *https;
  size_t nhttps;
  uint32_t *slots;  /* hash of the paths: index + 1 into methods, 0 free */
  size_t cap_slots; /* a power of two, at least twice nmethods; 0: none */
  int lfd[SRV_MAX_LISTENERS];
  int lunix[SRV_MAX_LISTENERS];
  size_t nlisten;
  int port;
  conch_link conns;
  size_t nconns;
  size_t ndead; /* of |nconns|, closed and not yet freed */
  struct srv_conn **byfd; /* |conns| by descriptor: open addressing */
  size_t byfd_cap;        /* a power of two above twice |nconns|; or 0 */
  size_t ncalls;
  conch_heap heap;
  int has_hooks;
  conch_io_hooks hooks;
  long hook_timer; /* what the timer hook was last told (-2: nothing) */
  int in_cb;       /* inside a turn: handlers may run */
  int pending;     /* work to do on the next turn */
  int shutting;
  conch_timer drain; /* kind SRV_TIMER_DRAIN */
  int drain_stage;   /* 1: calls were ended; 2: connections closed */
  size_t buffered;   /* request bytes all calls hold */
  size_t buffered_peak; /* the most |buffered| was */
  uint64_t shed_calls;  /* calls ended to make room for smaller ones */
  uint64_t shed_conns;  /* connections closed to make room for new ones */
  int spare_fd;      /* held in reserve for shedding, or -1 */
  int resting;       /* out of descriptors: listeners not watched */
  conch_timer rest;  /* kind SRV_TIMER_ACCEPT: ... until this */
  /* server_svc.c: the descriptors registered, reflection and health. */
  conch_descpool *files;   /* NULL until the first file */
  struct srv_health *health; /* NULL until health is asked for */
  int reflection;          /* reflection's methods are registered */
  int health_served;       /* health's methods are registered */
  /* server_intercept.c: the interceptors, the first outermost, each for
     every call or ("pkg.Service") for one service's. */
  conch_rpc_interceptor icept[CONCH_INTERCEPTORS_MAX];
  char icept_svc[CONCH_INTERCEPTORS_MAX][CONCH_INTERCEPTOR_SERVICE_MAX + 1];
  unsigned nicept;
};

/* ---- Interceptors (server_intercept.c) ---------------------------------- */

/* The request headers ended and the call is the handler's (state USER):
   runs the chain's on_call hooks, then the handler's on_call. */
void conch__srv_icept_call(conch_rpc *rpc);
/* Whether the handler has had on_call (no interceptor holds the call). */
int conch__srv_icept_passed(const conch_rpc *rpc);
/* A request message before the handler: may point |*p|, |*n| elsewhere.
   Returns 0, or non-zero when the call ended. */
int conch__srv_icept_recv(conch_rpc *rpc, const uint8_t **p, size_t *n);
/* A response message before framing: as conch__srv_icept_recv(), but
   returns an error (CONCH_ERR_STATE) when the call ended. */
int conch__srv_icept_send(conch_rpc *rpc, const uint8_t **p, size_t *n);
/* Whether a hook wants each response's bytes (no packing in place). */
int conch__srv_icept_sends(const conch_rpc *rpc);
/* The end: the close hooks on |st|.  Returns |st|, or |mine| (set, to be
   cleared by the caller) when a hook may have changed it. */
const conch_status *conch__srv_icept_end(conch_rpc *rpc,
                                         const conch_status *st,
                                         conch_status *mine);
/* The call goes away (rpc_free): close hooks not run yet run with
   canceled; the run is freed. */
void conch__srv_icept_free(conch_rpc *rpc);

/* server_svc.c: health tells every watcher NOT_SERVING and ends their
   streams (conch_server_shutdown()). */
void conch__srv_svc_shutdown(conch_server *s);
/* Frees what server_svc.c holds (after every call ended). */
void conch__srv_svc_free(conch_server *s);

enum {
  SRV_TIMER_DEADLINE = 0,
  SRV_TIMER_DRAIN = 1,
  SRV_TIMER_IDLE = 2,
  SRV_TIMER_LINGER = 3,
  SRV_TIMER_RECV = 4,
  SRV_TIMER_ACCEPT = 5
};

/* The server's clock (conch_server_opts_set_clock), in ms, and its
   timers: the endpoint's.  Arming returns 0, or CONCH_ERR_NOMEM when |t|
   could not be armed. */
static inline int64_t conch__srv_now(const conch_server *s) {
  return s->ep.ops->now(&s->ep);
}
static inline int conch__srv_timer_arm(conch_server *s, conch_timer *t,
                                       int64_t when) {
  return s->ep.ops->timer_arm(&s->ep, t, when);
}
static inline void conch__srv_timer_disarm(conch_server *s, conch_timer *t) {
  s->ep.ops->timer_disarm(&s->ep, t);
}
/* The TLS configuration of options |o| (server_opts.c), for the server's
   context. */
void conch__srv_tls_config(const conch_server_opts *o, conch_tls_config *cfg);
/* Makes the nghttp2 server session of |conn| (server_h2.c).  Returns 0,
   CONCH_ERR_NOMEM or CONCH_ERR_SESSION. */
int conch__srv_session_new(srv_conn *conn);

/* ---- The server's sessions (session.h's table) ----------------------------

   server.c has the sniffer's and HTTP/1.1's (wrapping server_h1.c),
   server_h2.c HTTP/2's.  Their |feed| returns non-zero when the
   connection is dead; |on_close| (the client's EOF, |err| 0, or a failed
   transport) settles or kills it; |send| moves output into the filter
   (0, or -1: the connection failed); |over| answers 1 (close once the
   output is out) or CONCH_SESSION_LINGER (the lingering close, server.c);
   |goaway| asks the client to go. */

extern const conch_session_ops conch__srv_h2_ops;
/* The client-only entries, trivial (server.c). */
void conch__srv_sess_submit(conch_conn *c, int64_t now);
void conch__srv_sess_call(conch_conn *c, conch_call *call);
void conch__srv_sess_consume(conch_conn *c, conch_call *call, size_t n);
void conch__srv_sess_reset(conch_conn *c, conch_call *call, uint32_t err);
conch_keepalive conch__srv_sess_keepalive(const conch_conn *c, int64_t now,
                                          int64_t *next);
int conch__srv_sess_ping(conch_conn *c);
long conch__srv_sess_capacity(const conch_conn *c);
int conch__srv_sess_sent_all(const conch_conn *c, const conch_call *call);
/* room() > 0. */
int conch__srv_sess_want_read(const conch_conn *c);
/* Ends every call of |conn| (handlers get on_cancel) and frees them. */
void conch__srv_conn_drop_rpcs(srv_conn *conn);
/* A call's deadline passed. */
void conch__srv_rpc_deadline(conch_rpc *rpc);
/* A call's header or body timeout passed. */
void conch__srv_rpc_recv_expired(conch_rpc *rpc);
srv_method *conch__srv_find_method(conch_server *s, const char *path);
srv_route *conch__srv_find_route(conch_server *s, const char *path);
srv_http_route *conch__srv_find_http(conch_server *s, const char *path);
/* Arms the idle timer of |conn| when it has no call (and a timeout is
   set), disarms it otherwise. */
void conch__srv_conn_idle(srv_conn *conn);
/* Ends the calls of |conn| that a handler holds: on_cancel, and
   unavailable to the client. */
void conch__srv_conn_fail_held(srv_conn *conn);
/* Delivers the request bytes held for resumed calls of |conn|. */
void conch__srv_conn_resume(srv_conn *conn);
/* Runs on_send_ready for the calls of |conn| that have room again.
   Returns how many ran. */
int conch__srv_conn_ready(srv_conn *conn);
/* Sends what nghttp2 has for |conn| and, outside a turn, what that
   caused; marks the connection dead on failure. */
void conch__srv_conn_kick(srv_conn *conn);

/* ---- Between the files of a call (server_rpc.c, server_admit.c,
   server_call.c) ---------------------------------------------------------- */

static inline const conch_mem *conch__srv_rpc_mem(const conch_rpc *rpc) {
  return rpc->conn->s->ep.mem;
}
/* More of the response of |rpc| is in rpc->out (or its end is). */
static inline void conch__srv_rpc_resume(conch_rpc *rpc) {
  rpc->sink->more(rpc);
}
/* The request side of a call, for a session (server_rpc.c).  A call is
   made for a stream (|id|; HTTP/1.1: 1 for every exchange) and is the
   session's to close: conch__srv_rpc_close() runs the handler's
   on_cancel if it still holds the call, and frees it.  NULL: out of
   memory. */
conch_rpc *conch__srv_rpc_open(srv_conn *conn, int32_t id,
                               const srv_sink *sink);
void conch__srv_rpc_close(conch_rpc *rpc, uint32_t code);
/* One request header (pseudo-headers :method, :path, :authority as
   HTTP/2 names them).  0 or CONCH_ERR_NOMEM. */
int conch__srv_rpc_header(conch_rpc *rpc, const uint8_t *name, size_t namelen,
                          const uint8_t *value, size_t valuelen);
/* The header block ended: the gate, the dispatch, the handler. */
void conch__srv_rpc_headers_end(conch_rpc *rpc);
/* Request body bytes.  Returns 1 when they were held for a paused
   handler (the session credits them when sink->consumed says so), 0
   when they were taken. */
int conch__srv_rpc_data(conch_rpc *rpc, const uint8_t *p, size_t n);
/* The request ended. */
void conch__srv_rpc_data_end(conch_rpc *rpc);
/* Header blocks (server_rpc.c): a header |name| with |value| ("-bin"
   ones in base64); one taken as it is; frees the block. */
void conch__srv_hb_str(srv_hb *h, const conch_mem *mem, const char *name,
                       const char *value);
void conch__srv_hb_raw(srv_hb *h, const conch_mem *mem, const char *name,
                       const char *value);
void conch__srv_hb_clear(srv_hb *h, const conch_mem *mem);
/* Submits the response head |h| of |rpc|, with its body when |with_data|
   (from rpc->out).  Returns 0 or a CONCH_ERR_*. */
int conch__srv_rpc_submit(conch_rpc *rpc, srv_hb *h, int with_data);
/* The head of a streaming response, if not yet submitted.  Returns 0 or a
   CONCH_ERR_*. */
int conch__srv_stream_head(conch_rpc *rpc);
/* A request header the protocol consumed (content-type, te, ...). */
const char *conch__srv_proto_hdr(conch_rpc *rpc, const char *name);
/* The server's side of the end: the response for |st| goes out. */
void conch__srv_rpc_end(conch_rpc *rpc, const conch_status *st);
/* The call fails on the server's side: on_cancel, and |code| to the
   client. */
void conch__srv_rpc_fail(conch_rpc *rpc, conch_code code, const char *fmt,
                         ...) CONCH_PRINTF(3, 4);
/* server_call.c: decodes one request message (0, CONCH_ERR_CODEC,
   CONCH_ERR_LIMIT or CONCH_ERR_NOMEM, the reason in |err|); decompresses
   one into |plain|; pull mode's news for the handler and its queue. */
int conch__srv_decode_msg(conch_rpc *rpc, const uint8_t *p, size_t n,
                          ProtobufCMessage **out, char *err, size_t errlen);
int conch__srv_inflate_msg(conch_rpc *rpc, const uint8_t *p, size_t n,
                           conch_buf *plain);
void conch__srv_pull_notify(conch_rpc *rpc);
int conch__srv_pull_queue(conch_rpc *rpc, int compressed, const uint8_t *p,
                          size_t n);
/* server_admit.c: the gate and plain routes (0: the request goes on to
   its method); counts what |rpc| holds against the budgets. */
int conch__srv_rpc_gate(conch_rpc *rpc);
void conch__srv_rpc_count(conch_rpc *rpc);

/* ---- Plain HTTP exchanges (server_http.c) ---------------------------------

   An exchange is a conch_rpc without a method (rpc->http set): the same
   stream, timers, held bytes and budget; server_rpc.c hands it to these
   functions where it would run the RPC protocols. */

/* One exchange, the handler's handle. */
struct conch_http {
  conch_rpc *rpc;
  conch_http_handler h; /* copied: the route table may move */
  void *user_data;
  void *data;      /* conch_http_set_data() */
  int responded;   /* the head was submitted */
  int head;        /* a HEAD request: no body goes out */
  int body;        /* the response has a body (a data source) */
  int want_ready;  /* a write was refused: on_send_ready is owed */
  int64_t clen;    /* the content-length the handler declared, or -1 */
  uint64_t sent;   /* body bytes the handler wrote */
};

/* The header block of a request to |route| ended: the handler's
   on_request runs.  Returns 0, or CONCH_ERR_NOMEM (nothing was started:
   the caller answers). */
int conch__srv_http_start(conch_rpc *rpc, const srv_http_route *route);
/* Request body bytes for a started exchange. */
void conch__srv_http_body(conch_rpc *rpc, const uint8_t *p, size_t n);
/* The request ended. */
void conch__srv_http_eof(conch_rpc *rpc);
/* The exchange is gone (stream closed, connection dropped): on_cancel if
   the handler still holds it. */
void conch__srv_http_cancel(conch_rpc *rpc);
/* The server ends it (timeout, budget, shutdown: |code| says which):
   on_cancel, then a plain status if no head went out, else a reset. */
void conch__srv_http_fail(conch_rpc *rpc, conch_code code);
/* on_send_ready if owed and there is room.  Returns 1 when it ran. */
int conch__srv_http_ready(conch_rpc *rpc);
void conch__srv_http_free(conch_rpc *rpc);
/* server_admit.c's body timer update, for pause and resume. */
void conch__srv_rpc_recv_update(conch_rpc *rpc);

/* ---- The connection layer for server_h1.c (server.c) ---------------------- */

/* Queues |n| plaintext bytes for the transport (encrypted under TLS).
   Returns 0 or a CONCH_ERR_*. */
int conch__srv_conn_out(srv_conn *conn, const uint8_t *p, size_t n);
/* How many bytes wait for the transport. */
size_t conch__srv_conn_out_size(srv_conn *conn);
/* "Date: <IMF-fixdate>\r\n" into |out|; its length (0 without a clock). */
size_t conch__srv_date(char *out, size_t cap);

/* ---- HTTP/1.1 (server_h1.c): the connection's session when it does not
   speak HTTP/2 (h1parse.c's requests into server_rpc.c's entry points,
   the response through its srv_sink).  Every function but start takes a
   connection that has one. */

/* Makes the session of |conn| (conn->h1).  Returns 0 or CONCH_ERR_NOMEM. */
int conch__srv_h1_start(srv_conn *conn);
/* Frees it (NULL conn->h1 is accepted). */
void conch__srv_h1_free(srv_conn *conn);
/* How many bytes the session takes now (0: do not read). */
size_t conch__srv_h1_room(const srv_conn *conn);
/* Bytes from the client.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__srv_h1_feed(srv_conn *conn, const uint8_t *p, size_t n);
/* The client shut its write side. */
void conch__srv_h1_eof(srv_conn *conn);
/* No new request (shutdown, idle): the connection closes after the
   current exchange. */
void conch__srv_h1_goaway(srv_conn *conn);
/* Parses what was read ahead and writes the response into the
   connection's output while it has room.  Returns 1 when it queued bytes
   or moved anything, 0, or -1 when the connection must close. */
int conch__srv_h1_produce(srv_conn *conn);
/* 1 when the session is done: the connection closes once its output is
   written (after a lingering read). */
int conch__srv_h1_done(const srv_conn *conn);

#endif
