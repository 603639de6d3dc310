/* The client's core structures, shared by client.c, conn.c, call.c,
   protocol.c and blocking.c.  Nothing here is part of the ABI. */
#ifndef CONCH_INTERNAL_H
#define CONCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>

#include <conch/conch.h>

#include "buf.h"
#include "list.h"
#include "timer.h"
#include "envelope.h"
#include "compress.h"
#include "gzip.h"
#include "metadata_int.h"
#include "mem_int.h"
#include "status_int.h"
#include "tls.h"

int64_t conch__now_ms(void);
/* The client's clock (conch_client_opts_set_clock), in ms. */
int64_t conch__client_now(const struct conch_client *c);

/* ---- Options ----------------------------------------------------------- */

struct conch_client_opts {
  conch_mem mem;
  conch_protocol protocol;
  conch_codec codec;
  conch_json_resolver json_resolve; /* JSON codec: Any types; may be NULL */
  void *json_resolve_ud;
  conch_comp_opts comp; /* send, accepted list, levels, registered */
  size_t compress_min_bytes;
  size_t get_max_url; /* 0: no limit */
  size_t recv_limit;
  size_t send_limit;
  uint32_t stream_window;
  uint32_t conn_window;
  uint32_t max_header_list;
  long connect_timeout_ms;
  long keepalive_ms; /* 0: off; doubled after "too_many_pings" */
  int max_conns;     /* connections in the pool, >= 1 */
  int max_conns_set; /* set by the user (else HTTP/1.1 uses H1_POOL) */
  conch_http_version http_version;
  long keepalive_timeout_ms;
  int keepalive_set; /* conch_client_opts_set_keepalive() was called */
  char *user_agent;
  char *ca_file;
  char *ca_pem;
  size_t ca_pem_len;
  char *cert_file;
  char *key_file;
  char *cert_pem;
  size_t cert_pem_len;
  char *key_pem;
  size_t key_pem_len;
  int tls_verify;
  conch_resolver resolver;           /* start NULL: the default (resolve.c) */
  int64_t (*clock)(void *user_data); /* NULL: CLOCK_MONOTONIC */
  void *clock_ud;
  char *unix_path;   /* connect to this Unix socket instead of host:port */
  int unix_peer_any; /* 0: the socket's server must be our euid or root */
  conch_transport transport; /* open NULL: the client's own (sock.c) */
};

/* Copies |src| into |dst|, duplicating strings with |mem|. */
int conch__opts_copy(conch_client_opts *dst, const conch_client_opts *src,
                     const conch_mem *mem);
/* Frees the strings of |o|, allocated with |mem|. */
void conch__opts_clear(conch_client_opts *o, const conch_mem *mem);
void conch__opts_defaults(conch_client_opts *o);

/* Transports: sock.c (sock.h) is the one file that calls socket
   functions.  The transport |c|'s connections use: the caller's, or
   conch__sock_transport (conn.c). */
const conch_transport *conch__transport(const struct conch_client *c);
/* 1 when |c| uses its own sockets (no transport set by the caller). */
int conch__transport_is_own(const struct conch_client *c);

/* Unix domain sockets (unix.c). */
struct conch_conn;
/* Starts connecting |conn| to the client's socket path; like TCP, a
   failure leaves the connection dead with its message. */
void conch__unix_connect(struct conch_conn *conn);
/* Once connected: 0 when the peer is acceptable (our euid or root, unless
   the options allow any), else the connection is failed and -1. */
int conch__unix_peer_check(struct conch_conn *conn);

/* ---- Connections ------------------------------------------------------- */

/* An address to connect to. */
typedef struct conch_addr {
  int family;
  socklen_t len;
  struct sockaddr_storage sa;
} conch_addr;

typedef enum conch_conn_state {
  CONCH_CONN_CONNECTING = 0, /* TCP connect in progress */
  CONCH_CONN_RESOLVING,      /* looking the host name up (resolve.c) */
  CONCH_CONN_HANDSHAKE,      /* TLS handshake */
  CONCH_CONN_READY,          /* HTTP/2 up */
  CONCH_CONN_DEAD            /* failed or closed; calls detached */
} conch_conn_state;

typedef struct conch_conn {
  struct conch_client *client;
  conch_link link; /* in client->conns */
  conch_conn_state state;
  int fd;
  unsigned watched;  /* CONCH_IO_* last reported to the hooks */
  conch_addr *addrs; /* where the host is, in the order to try */
  size_t naddrs;
  size_t next_addr;                    /* the one being tried */
  struct conch_resolve_req *resolving; /* the lookup under way */
  int resolve_started;
  conch_tls *tls;
  nghttp2_session *h2;
  struct conch_h1 *h1; /* HTTP/1.1 bridge (h1.c); NULL for HTTP/2 */
  conch_buf out;       /* bytes for the socket (ciphertext under TLS) */
  uint8_t *rbuf;       /* socket reads */
  size_t rcap;
  uint8_t *pbuf; /* TLS plaintext */
  size_t pcap;
  conch_timer connect_timer;
  conch_timer keepalive_timer;
  int64_t last_read;    /* when bytes last arrived (ms) */
  int64_t ping_sent;    /* 0: no keepalive PING outstanding */
  conch_link calls;     /* calls bound to this connection */
  conch_link queue;     /* calls waiting for a stream slot or for READY */
  size_t active;        /* streams submitted to nghttp2 and not closed */
  size_t ncalls;        /* calls bound (in |calls|): its load */
  int goaway;           /* GOAWAY received: no new streams */
  int peer_settings;    /* the server's first SETTINGS arrived */
  int seen_bytes;       /* the server said something (HTTP/2 or not) */
  int closing;          /* we decided to close once flushed */
  int flush_pending;    /* output may be waiting: flush this turn */
  conch_link dirty;     /* in client->dirty while flush_pending */
  char errmsg[256];     /* why the connection failed */
  int errcode;          /* CONCH_ERR_* for errmsg */
  conch_code fail_code; /* code for calls failed by this connection */
} conch_conn;

/* ---- Calls ------------------------------------------------------------- */

/* A response's compression: a compression id (conch_comp_opts), or: */
#define CONCH_ENC_IDENTITY CONCH_COMPRESSION_IDENTITY
#define CONCH_ENC_UNSUPPORTED (-1)

/* A received message waiting in pull mode: decoded, or (when it came
   compressed) kept as received and decoded when taken, so that what waits
   is bounded by the flow-control window and not by its inflated size. */
typedef struct conch_qmsg {
  ProtobufCMessage *msg; /* NULL: see |gz| */
  uint8_t *gz;           /* compressed payload, validated on arrival */
  size_t gzlen;
  size_t wire; /* bytes of stream window it holds */
} conch_qmsg;

struct conch_call {
  struct conch_client *client;
  conch_conn *conn;
  const conch_method *method;
  conch_call_handler h;
  void *user_data;
  int32_t stream_id; /* 0 until submitted */

  conch_link client_link; /* client->calls */
  conch_link conn_link;   /* conn->calls */
  conch_link queue_link;  /* conn->queue */
  conch_link done_link;   /* client->done: on_close to deliver */
  conch_link ready_link;  /* client->ready: on_send_ready to deliver */

  conch_timer deadline;
  int64_t deadline_at; /* 0 = none */

  conch_metadata req_headers;
  int send_comp; /* compression id */

  /* Sending. */
  conch_buf sendbuf; /* wire bytes not yet given to nghttp2 */
  /* Of one-message calls (unary, server streaming) the request stays in
     |sendbuf| until the response begins, with |sent| bytes of it given to
     nghttp2: a stream the server refused unprocessed can then be sent
     again.  Streaming requests drop bytes as they go. */
  size_t sent;
  size_t stream_sent;       /* streaming requests: bytes given to nghttp2 */
  unsigned retried : 1;     /* the one transparent retry was used */
  unsigned nsent;           /* messages queued */
  unsigned send_closed : 1; /* close_send called */
  unsigned submitted : 1;   /* HEADERS given to nghttp2 */
  unsigned deferred : 1;    /* data source returned DEFERRED */
  unsigned want_send_ready : 1;
  unsigned unary_compressed : 1; /* Connect unary body is send_comp */
  unsigned get : 1;              /* Connect unary as GET: no body */

  /* Receiving. */
  int http_status;
  int blk;                        /* kind of the header block being received */
  size_t blk_bytes;               /* its size so far, as HTTP/2 counts it */
  unsigned headers_done : 1;      /* final response headers seen */
  unsigned remote_ended : 1;      /* END_STREAM received */
  unsigned got_end : 1;           /* end-stream / trailers seen */
  unsigned got_trailers_only : 1; /* END_STREAM on the response headers */
  unsigned got_http_trailers : 1; /* a trailing HEADERS block arrived */
  unsigned body_over : 1;         /* unary body beyond the limit */
  unsigned moved_headers : 1;     /* trailers-only: headers became trailers */
  size_t body_bytes;              /* response body bytes seen */
  int resp_enc;                   /* compression id or CONCH_ENC_UNSUPPORTED */
  conch_metadata headers;
  conch_metadata trailers;
  conch_metadata gfields[2]; /* gRPC status fields: [0] headers, [1] trailers */
  conch_env_reader reader;
  conch_buf body;    /* Connect unary body, error bodies */
  unsigned nrecv;    /* messages received */
  size_t unconsumed; /* stream-window bytes not yet credited back */

  /* Pull mode. */
  unsigned pull : 1;
  conch_qmsg *q;
  size_t qhead, qlen, qcap;
  size_t held;      /* stream-window bytes held by queued messages */
  conch_buf rawq;   /* raw pull: [u32 len][u32 hold][bytes]... */
  conch_buf rawcur; /* the raw message last returned */

  /* End. */
  unsigned finished : 1;    /* status final */
  unsigned closed_cb : 1;   /* on_close delivered */
  unsigned user_freed : 1;  /* conch_call_free called */
  unsigned in_handler;      /* depth of handlers of this call running */
  unsigned stream_live : 1; /* nghttp2 still knows the stream */
  conch_status status;
};

/* ---- The client -------------------------------------------------------- */

struct conch_client {
  conch_client_opts o;            /* o.mem is the allocator */
  const conch_mem *mem;           /* &o.mem */
  ProtobufCAllocator pb_alloc;    /* over mem: messages handed to users */
  ProtobufCAllocator arena_alloc; /* over |arena|: borrowed messages */
  int tls;                        /* https */
  char *host;                     /* without brackets */
  char *port;
  char *authority; /* host[:port] as in the URL */
  char *target;    /* for messages: "host:port", "[v6]:port" or the socket */
  char *prefix;    /* path prefix, "" or "/x" */
  char *unix_path; /* a Unix socket to connect to (opts or "unix:" URL) */
  char *user_agent;
  conch_tls_ctx *tls_ctx;

  conch_link conns;
  conch_link calls;
  conch_link done;  /* finished calls whose on_close is pending */
  conch_link dirty; /* connections with output to flush */
  conch_link ready; /* calls whose on_send_ready is due */
  conch_link alarms;
  size_t peer_max_streams; /* the server's stream limit, once one said it */
  int h1; /* connections speak HTTP/1.1 (forced, ALPN, or found out) */

  conch_heap timers;

  conch_comps comps;
  struct conch_hdr_tmpl *hdr_tmpls; /* constant request headers (protocol.c) */
  conch_buf scratch; /* request serialization */
  conch_buf inflbuf; /* decompressed responses */

  /* Arena for borrowed messages in push mode: reset after each handler. */
  uint8_t *arena;
  size_t arena_cap;
  size_t arena_used;
  size_t arena_over;  /* bytes that did not fit, to size the next block */
  void **arena_extra; /* overflow blocks */
  size_t arena_nextra;
  size_t arena_extracap;

  /* I/O driving. */
  conch_io_hooks hooks;
  int hooked;
  long hook_timer; /* last value reported, -2 none */
  int wake_fd;
  unsigned wake_watched;
  void (*wake_cb)(conch_client *, void *);
  void *wake_ud;
  unsigned depth;                      /* > 0 while the client is dispatching */
  struct resolver_pool *resolver_pool; /* the default resolver's threads */
};

struct conch_alarm {
  conch_timer t;
  conch_link link; /* client->alarms */
  conch_client *client;
  void (*cb)(conch_client *, void *);
  void *user_data;
  int firing;
};

/* ---- Internal entry points -------------------------------------------- */

/* Timers (client.c). */
void conch__timer_arm(conch_client *c, conch_timer *t, int64_t when);
void conch__timer_disarm(conch_client *c, conch_timer *t);

/* Marks |conn| as having output to flush at the end of this turn (or soon,
   when called outside one). */
void conch__conn_mark_dirty(conch_conn *conn);
/* Binds |call| to |conn| (conn->calls) and unbinds it, keeping the count
   the pool balances on (pool.c). */
void conch__conn_bind(conch_conn *conn, struct conch_call *call);
void conch__conn_unbind(struct conch_call *call);
/* Gets the connection for a new call (pool.c): one that takes new streams and has
   room, else a new one while the pool may grow, else the least loaded.
   Returns NULL and sets |st| when none can be made. */
conch_conn *conch__conn_get(conch_client *c, conch_status *st);
/* The pool (pool.c): moves |call|, waiting in a connection's queue, to the
   connection the pool picks now (failing it when none can be made). */
void conch__pool_requeue(struct conch_call *call);
/* The first connection found to speak HTTP/1.1 keeps one waiting call and
   gives the others back to the pool. */
void conch__pool_rehome_queued(conch_conn *conn);
/* A new connection of |c|, connecting or looking its host up (conn.c);
   NULL and |st| when it cannot be made. */
conch_conn *conch__conn_new(conch_client *c, conch_status *st);
/* Creates |conn|'s nghttp2 session and queues its SETTINGS (session.c).
   Returns 0, CONCH_ERR_NOMEM or CONCH_ERR_SESSION. */
int conch__session_start(conch_conn *conn);
/* Flushes pending output; may fail the connection. */
void conch__conn_flush(conch_conn *conn);
/* Handles readiness of the connection's fd. */
void conch__conn_on_io(conch_conn *conn, unsigned events);
/* The connect timer fired. */
void conch__conn_on_timeout(conch_conn *conn);
/* Starts connecting to the first of |conn->addrs| (after a lookup). */
void conch__conn_connect(conch_conn *conn);

/* Name resolution (resolve.c). */
/* Fills |conn->addrs| when the host is an address: 0; 1 when it is a name
   to look up; -1 with |st| set on an error. */
int conch__resolve_numeric(conch_conn *conn, conch_status *st);
/* Starts the lookup of a RESOLVING connection (end of turn only). */
void conch__resolve_start(conch_conn *conn);
/* Applies an answer that arrived: connects, or fails the connection. */
void conch__resolve_apply(conch_conn *conn);
/* The connection no longer wants its lookup (failed, freed). */
void conch__resolve_abandon(conch_conn *conn);
/* Hands the default resolver's answers to their connections. */
void conch__resolve_drain(conch_client *c);
/* Detaches the default resolver's threads from a client being freed. */
void conch__resolve_client_free(conch_client *c);
/* Ends a turn now when outside one (answers from the caller's loop). */
void conch__client_turn(conch_client *c);
/* The keepalive timer fired. */
void conch__conn_on_keepalive(conch_conn *conn);
/* Fails the connection: every call on it ends with |code|. */
void conch__conn_fail(conch_conn *conn, conch_code code, int err,
                      const char *fmt, ...) CONCH_PRINTF(4, 5);
void conch__conn_free(conch_conn *conn);
/* Submits queued calls while slots are free. */
void conch__conn_submit_queued(conch_conn *conn);
/* Sets up and submits the request HEADERS (+ data source) of |call|.
   Returns 0 or fails the call. */
int conch__conn_submit(conch_conn *conn, struct conch_call *call);
/* The call's stream has new data to send. */
void conch__conn_resume(conch_conn *conn, struct conch_call *call);
/* Returns |n| bytes of window credit for |call|'s stream. */
void conch__conn_consume(conch_conn *conn, struct conch_call *call, size_t n);
/* Resets the stream of |call| with |h2err| and detaches the call. */
void conch__conn_reset(conch_conn *conn, struct conch_call *call,
                       uint32_t h2err);
/* Updates what the loop watches for |conn|. */
void conch__conn_update_watch(conch_conn *conn);
/* Queues |n| plaintext bytes for the socket (through TLS when on). */
int conch__conn_write(conch_conn *conn, const uint8_t *p, size_t n);
/* Bytes waiting for the socket. */
size_t conch__conn_out_size(conch_conn *conn);
/* Stops watching and closes the socket; the connection stays until its
   sessions are done (HTTP/1.1 bridge). */
void conch__conn_close_fd(conch_conn *conn);

/* HTTP/1.1 (h1.c).  A connection in HTTP/1.1 mode keeps its nghttp2
   client session; the bridge is an in-memory nghttp2 server session that
   turns each stream into an HTTP/1.1 exchange on the socket. */
/* The pool size for HTTP/1.1 when the user did not set one. */
#define CONCH_H1_POOL 16
int conch__h1_new(conch_conn *conn);
void conch__h1_free(struct conch_h1 *h);
/* Moves frames between the two sessions and request bytes to the socket.
   Returns 0, or non-zero when the connection failed. */
int conch__h1_pump(conch_conn *conn);
/* A DATA frame the client session hands out without copying (its send
   callback): header and payload go to the bridge.  Returns 0 or -1. */
int conch__h1_frame(conch_conn *conn, const uint8_t *hd, const uint8_t *data,
                    size_t len);
/* Plaintext read from the socket. */
void conch__h1_recv(conch_conn *conn, const uint8_t *p, size_t n);
/* The socket reached EOF or failed (|why|): settles the exchange. */
void conch__h1_on_close(conch_conn *conn, const char *why);
/* Whether the bridge takes more input from the socket now. */
int conch__h1_want_read(const conch_conn *conn);

/* Calls (call.c). */
/* Starts a call bound to no connection, as if its request had gone out:
   tests and fuzz targets drive its response side with
   conch__call_on_header() & co.  Returns as conch_call_start(). */
int conch__call_new_detached(conch_client *c, const conch_method *method,
                             const conch_call_opts *opts,
                             const conch_call_handler *handler, void *user_data,
                             conch_call **out);
/* Ends |call| with |code| unless it already ended (first error wins). */
void conch__call_fail(conch_call *call, conch_code code, int local_err,
                      const char *fmt, ...) CONCH_PRINTF(4, 5);
/* Ends |call| with its current status (OK unless set). */
void conch__call_finish(conch_call *call);
/* Runs on_close handlers of finished calls and releases freed ones. */
void conch__client_run_done(conch_client *c);
/* The deadline timer of |call| fired. */
void conch__call_on_deadline(conch_call *call);
/* Releases |call|'s memory once the user freed it, on_close ran and
   nghttp2 let go.  Returns non-zero when released. */
int conch__call_maybe_release(conch_call *call);
/* Frees a call's memory unconditionally. */
void conch__call_destroy(conch_call *call);

/* Received response parts (call.c, from the nghttp2 callbacks). */
int conch__call_on_header(conch_call *call, const uint8_t *name, size_t nlen,
                          const uint8_t *value, size_t vlen, int trailer);
void conch__call_on_headers_done(conch_call *call, int end_stream);
void conch__call_on_data(conch_call *call, const uint8_t *data, size_t len);
void conch__call_on_remote_end(conch_call *call);
void conch__call_on_stream_close(conch_call *call, uint32_t h2err);
/* The data source of |call| is asked for up to |len| bytes. */
size_t conch__call_send_pending(const conch_call *call);
const uint8_t *conch__call_send_head(const conch_call *call);

/* Client internals (client.c). */
void conch__client_kick(conch_client *c);
void conch__client_watch(conch_client *c, int fd, unsigned *watched,
                         unsigned want);
void conch__arena_reset(conch_client *c);
int conch__timer_reserve(conch_client *c, size_t extra);

/* call.c, for conn.c */
void conch__call_sent(conch_call *call, size_t n);
int conch__call_ready_to_submit(const conch_call *call);
/* Delivers one response message: |p| is its payload as received,
   compressed with the response's compression (resp_enc) when
   |compressed|.  Returns 0, or non-zero when the call ended. */
int conch__call_deliver(conch_call *call, const uint8_t *p, size_t len,
                        int compressed);
/* Inflates into the client's inflate buffer, capped by the receive limit;
   ends the call on failure (naming |what|) and returns non-zero. */
int conch__call_inflate(conch_call *call, const uint8_t *p, size_t n,
                        const char *what);
/* Lets go of an inflate buffer grown large by one message. */
void conch__client_shrink_inflbuf(conch_client *c);
/* Sets the call's status from |st| (moved: |st| is left OK) and ends it. */
void conch__call_end_with(conch_call *call, conch_status *st);

/* Protocol (protocol.c). */
/* Validates the response headers; may end the call. */
void conch__proto_on_headers(conch_call *call);
/* Response body bytes. */
void conch__proto_on_data(conch_call *call, const uint8_t *data, size_t len);
/* END_STREAM from the server: settles the status. */
void conch__proto_on_end(conch_call *call);
/* Serializes |msg| bytes (|n|) for the wire into |call->sendbuf|. */
int conch__proto_frame_message(conch_call *call, const uint8_t *p, size_t n);
/* Non-zero for grpc-status, grpc-message and grpc-status-details-bin. */
int conch__grpc_status_field(const char *name, size_t len);
/* Whether a call of this shape must have its one message before HEADERS. */
int conch__proto_headers_wait_message(const conch_call *call);
typedef struct conch_hdr_tmpl conch_hdr_tmpl;
/* Frees the request header templates of |c| (after its sessions). */
void conch__proto_client_free(conch_client *c);
/* Builds the request header list for |call| into |nva| (room for |cap|
   entries), with strings stored in |store|.  Returns the count or a
   negative CONCH_ERR_*. */
long conch__proto_request_headers(conch_call *call, nghttp2_nv *nva, size_t cap,
                                  conch_buf *store);

/* Handlers run with the client's recursion guard (call.c). */
void conch__call_emit_headers(conch_call *call);

#endif
