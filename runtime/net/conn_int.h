/* A connection (conn.c): the transport's descriptor, the filter (TLS),
   the session (through its table, session.h) and the batching of reads
   and writes.  Private to the runtime. */
#ifndef CONCH_CONN_INT_H
#define CONCH_CONN_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <conch/client.h>
#include <conch/export.h>
#include <conch/mem.h>
#include <conch/status.h>
#include <conch/transport.h>

#include "buf.h"
#include "filter.h"
#include "list.h"
#include "timer.h"

struct conch_call;        /* call_int.h */
struct conch_h1;          /* h1.c */
struct conch_resolve_req; /* resolve.c */
struct conch_session_ops; /* session.h */
struct conch_tls;         /* tls.h */
struct conch_tls_ctx;     /* tls.h */
struct nghttp2_session;   /* nghttp2 */

/* What a connection needs of whoever owns it: its allocator, clock,
   timers, event loop, transport and TLS.  conch_client embeds one
   (client.c), and so does conch_server (server.c); conn.c below the
   session reads nothing else of its owner. */
typedef struct conch_endpoint conch_endpoint;

/* The owner's loop. */
typedef struct conch_endpoint_ops {
  /* The owner's clock (injectable), in ms. */
  int64_t (*now)(const conch_endpoint *ep);
  /* Asks for a turn soon (wakes the loop when outside one). */
  void (*kick)(conch_endpoint *ep);
  /* Tells the loop what to watch on |fd| when it changed (|*watched|);
     may fail the connection of |fd| when the loop refuses. */
  void (*watch)(conch_endpoint *ep, int fd, unsigned *watched,
                unsigned want);
  /* Timers on the owner's heap, at |when| by its clock.  Arming returns
     0, or CONCH_ERR_NOMEM when |t| could not be armed (the client
     reserves room, the server decides what an unarmed timer means). */
  int (*timer_arm)(conch_endpoint *ep, conch_timer *t, int64_t when);
  void (*timer_disarm)(conch_endpoint *ep, conch_timer *t);
  /* The filter of |conn| is secure (TLS's handshake done): its session
     starts (the client's picks HTTP/1.1 or HTTP/2, the server's by ALPN or
     leaves it to the sniffer) and the connection is READY.  0, or
     non-zero when the connection failed. */
  int (*secure)(struct conch_conn *conn);
  /* TLS failed on |conn| (conch__tls_error says why): the client fails
     the connection, the server closes it (after the alert, in the
     handshake). */
  void (*tls_fail)(struct conch_conn *conn);
  /* The bytes just fed to a session are about to go (the read buffer is
     reused): what the owner borrowed from them it copies now (the client's
     lent bodies, conch__proto_settle()).  NULL: nothing is borrowed. */
  void (*fed)(conch_endpoint *ep);
} conch_endpoint_ops;

struct conch_endpoint {
  const conch_endpoint_ops *ops;
  const conch_mem *mem;
  const conch_transport *transport; /* the caller's or conch__sock_transport */
  struct conch_tls_ctx *tls_ctx;    /* every connection speaks TLS; or NULL */
  const char *tls_name; /* the name TLS sends and checks; NULL: none */
  const char *target;   /* the peer or the endpoint, for messages */
  conch_link dirty;     /* connections with output to flush this turn */
  size_t read_budget;   /* bytes one connection reads in one turn */
  int stamp_reads;      /* keep conch_conn.last_read (the client's keepalive) */
  int drain_reads;      /* read until -EAGAIN, not only until a short read (the
                           server's: a caller's transport may hand out little
                           at a time) */
  int retry_short;      /* a short write is tried again at once, not left for
                           POLLOUT (the server's: an adopted transport may
                           take little at a time) */
};

/* A client connection's read buffer (and TLS plaintext buffer).  One read
   that holds a whole DATA frame hands its messages on without a copy
   (session.c advertises frames of up to 1 MiB); a message cut by the end of
   a read is copied once, so a bigger buffer means fewer copies.  Pages are
   only touched as reads fill them. */
#define CONCH_CONN_READ_BUF (1024u << 10)

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
  CONCH_CONN_READY,          /* the session is up */
  CONCH_CONN_DEAD            /* failed or closed; calls detached */
} conch_conn_state;

typedef struct conch_conn {
  conch_endpoint *ep; /* its owner's (conch__conn_client: the client) */
  conch_link link;    /* in client->conns */
  conch_conn_state state;
  int fd;
  const conch_transport *transport; /* the endpoint's, or the handle's own */
  unsigned watched;  /* CONCH_IO_* last reported to the hooks */
  conch_addr *addrs; /* where the host is, in the order to try */
  size_t naddrs;
  size_t next_addr;                    /* the one being tried */
  struct conch_resolve_req *resolving; /* the lookup under way */
  int resolve_started;
  const struct conch_session_ops *ops; /* HTTP/2's until the session starts */
  conch_filter filter;                 /* TLS or nothing; the output */
  struct nghttp2_session *h2;          /* the client session (session.c) */
  int32_t h2_last_id;                  /* the stream last looked up (0: none) */
  struct conch_call *h2_last_call;     /* and its call */
  void *h2_spare[4];       /* its freed small blocks, by size (session.c) */
  unsigned h2_nspare[4];
  struct conch_h1 *h1; /* the HTTP/1.1 session (h1.c); NULL for HTTP/2 */
  uint8_t *rbuf;       /* socket reads */
  size_t rcap;
  uint8_t *pbuf; /* TLS plaintext */
  size_t pcap;
  int tls_held; /* TLS holds plaintext the session had no room for */
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
  conch_link dirty;     /* in ep->dirty while flush_pending */
  char errmsg[256];     /* why the connection failed */
  int errcode;          /* CONCH_ERR_* for errmsg */
  conch_code fail_code; /* code for calls failed by this connection */
  /* Load balancing (balance.c); NULL and 0 without a policy. */
  struct conch_lb_addr *lba; /* the address it is tied to */
  const char *peer_name;     /* that address, for messages (else ep->target) */
  int lb_resolver;           /* it only holds the balancer's lookup */
} conch_conn;

/* Transports: sock.c (sock.h) is the one file that calls socket
   functions.  The transport |c|'s connections use: the caller's, or
   conch__sock_transport. */
const conch_transport *conch__transport(const conch_client *c);
/* 1 when |c| uses its own sockets (no transport set by the caller). */
int conch__transport_is_own(const conch_client *c);

/* A new connection of |c|, connecting or looking its host up; NULL and
   |st| when it cannot be made. */
conch_conn *conch__conn_new(conch_client *c, conch_status *st);
/* A new connection of |c| to |addr| alone, tied to the balancer's address
   |a| (balance.c); connecting, or DEAD when that failed at once; NULL and
   |st| when out of memory. */
conch_conn *conch__conn_new_at(conch_client *c, struct conch_lb_addr *a,
                               const conch_addr *addr, conch_status *st);
/* Starts connecting to the first of |conn->addrs| (after a lookup). */
void conch__conn_connect(conch_conn *conn);
/* Marks |conn| as having output to flush at the end of this turn (or soon,
   when called outside one). */
void conch__conn_mark_dirty(conch_conn *conn);
/* Flushes pending output; may fail the connection. */
void conch__conn_flush(conch_conn *conn);
/* conch__conn_write's answers besides 0 and the negative errno of a failed
   write. */
/* The transport took nothing and said no error. */
#define CONCH_WRITE_ZERO CONCH_FILTER_ZERO
/* The session's |send| failed. */
#define CONCH_WRITE_SESSION 4
/* Both roles' write-out: writes what the filter holds through the
   connection's transport until all of it went out, a write came short
   (tried again at once when the endpoint retries short writes) or the
   transport has no room now (-EAGAIN, -EINTR: POLLOUT says when); then,
   when all of it went out, |refill| is set and the session wants to write,
   has the session produce more (|send|, each role's sessions to their own
   bound: CONCH_OUT_HIGH_WATER the client's, 64 KiB the server's) and writes
   again.  Returns 0 (all of it out, or waiting for the transport),
   CONCH_WRITE_ZERO, CONCH_WRITE_SESSION or the negative errno of a failed
   write; each role decides what those mean for the connection. */
long conch__conn_write(conch_conn *conn, int refill);
/* Handles readiness of the connection's fd. */
void conch__conn_on_io(conch_conn *conn, unsigned events);
/* Reads what the transport has into the session, through the filter:
   while the session wants it, at most |rcap| bytes a read (in cleartext
   at most the session's |room|, when it has one), until a read comes
   short (unless the endpoint drains), the transport has nothing now (-EAGAIN,
   -EINTR), the transport ends (ops->on_close) or the endpoint's read budget is
   spent (then a turn is asked for, for the rest).  Both roles' read loop. */
void conch__conn_on_readable(conch_conn *conn);
/* (TLS) Hands the session what TLS holds (its room may have opened), the
   handshake first if it is still under way. */
void conch__conn_pull(conch_conn *conn);
/* What the loop should watch for |conn| (CONCH_IO_*). */
unsigned conch__conn_events(const conch_conn *conn);
/* The client's endpoint's |secure|: starts the session picked. */
int conch__conn_start_session(conch_conn *conn);
/* The connect timer fired. */
void conch__conn_on_timeout(conch_conn *conn);
/* The keepalive timer fired. */
void conch__conn_on_keepalive(conch_conn *conn);
/* Fails the connection: every call on it ends with |code|. */
void conch__conn_fail(conch_conn *conn, conch_code code, int err,
                      const char *fmt, ...) CONCH_PRINTF(4, 5);
void conch__conn_free(conch_conn *conn);
/* Updates what the loop watches for |conn|. */
void conch__conn_update_watch(conch_conn *conn);
/* The stream operations of calls (call.c), passed to the session. */
/* The call's stream has new data to send. */
void conch__conn_resume(conch_conn *conn, struct conch_call *call);
/* Returns |n| bytes of window credit for the call's stream. */
void conch__conn_consume(conch_conn *conn, struct conch_call *call, size_t n);
/* Resets the stream of the call with |h2err|. */
void conch__conn_reset(conch_conn *conn, struct conch_call *call,
                       uint32_t h2err);
/* The session let go of |call|'s stream, which ended with |err|
   (CONCH_STREAM_*, session.h): the call is unbound and told
   (conch__call_on_stream_close), and released if nothing else holds it. */
void conch__conn_stream_closed(conch_conn *conn, struct conch_call *call,
                               uint32_t err);
/* Stops watching and closes the socket; the connection stays until its
   session is over (HTTP/1.1). */
void conch__conn_close_fd(conch_conn *conn);

#endif
