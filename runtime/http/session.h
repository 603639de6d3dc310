/* The session of a connection: what speaks HTTP on the plaintext byte
   stream.  One table of operations for both roles.  The client's two
   implementations: HTTP/2 (session.c, nghttp2) and HTTP/1.1 (h1.c),
   which conn.c calls through the table only.  The server's three
   (server.c): the sniffer, which picks HTTP/1.1 or HTTP/2 from ALPN or
   the first bytes and puts that table in its place, HTTP/1.1 (server_h1.c)
   and HTTP/2 (nghttp2's server session, server_h2.c).  A session has no
   descriptors and reads no clock: bytes come in through |feed|, go out through
   the filter (filter.h), and the time is passed in.  Private to the runtime. */
#ifndef CONCH_SESSION_H
#define CONCH_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include <conch/call.h>

struct conch_conn; /* conn_int.h */

/* What the keepalive timer should do (conch_session_ops.keepalive). */
typedef enum conch_keepalive {
  CONCH_KA_OFF = 0, /* no keepalive on this session: do not re-arm */
  CONCH_KA_WAIT,    /* nothing to do now: come back at |*next| */
  CONCH_KA_PING,    /* send a PING now (ping), then come back at |*next| */
  CONCH_KA_DEAD     /* the PING went unanswered: the connection is dead */
} conch_keepalive;

/* One table, not a role-neutral one plus a client part: conn.c runs the
   client-only entries (submit, keepalive) on every ready connection, so a
   split table would put a role test or one more indirection on the
   client's path for each of them.  The server's sessions give those
   entries trivial implementations (server.c: a server starts no stream,
   pings no one, forgets nothing); the entries only the server uses
   (|room|, |goaway|) are NULL in the client's. */
typedef struct conch_session_ops {
  const char *name; /* "HTTP/2", "HTTP/1.1" */
  /* Creates the session of a connected (and handshaken) connection and
     queues its preface.  Returns 0, CONCH_ERR_NOMEM or CONCH_ERR_SESSION. */
  int (*start)(struct conch_conn *conn);
  /* Frees the session; also of a connection never started. */
  void (*free)(struct conch_conn *conn);
  /* Submits queued calls while the session has room. */
  void (*submit)(struct conch_conn *conn, int64_t now); /* |now|: the client's clock */
  /* The call's stream has new data to send. */
  void (*resume)(struct conch_conn *conn, conch_call *call);
  /* Returns |n| bytes of window credit for the call's stream. */
  void (*consume)(struct conch_conn *conn, conch_call *call, size_t n);
  /* The call ended (cancel, deadline, an error, or a complete response
     while its request was still going): resets its stream with |err|
     (CONCH_STREAM_*).  HTTP/1.1 closes the connection unless the exchange
     was complete. */
  void (*reset)(struct conch_conn *conn, conch_call *call, uint32_t err);
  /* Plaintext received.  Returns 0, or non-zero when the connection
     failed. */
  int (*feed)(struct conch_conn *conn, const uint8_t *p, size_t n);
  /* Whether the session takes more input now (back-pressure). */
  int (*want_read)(const struct conch_conn *conn);
  /* The transport reached EOF (|err| 0) or failed with errno |err|,
     |writing| or reading.  Settles or fails the connection. */
  void (*on_close)(struct conch_conn *conn, int err, int writing);
  /* Moves pending output into the filter, up to the role's bound
     (CONCH_OUT_HIGH_WATER the client's sessions, 64 KiB the server's);
     conn.c's write-out (conch__conn_write) calls it again once that went
     out, while |want_write|.  Returns 0, or non-zero when the connection
     failed. */
  int (*send)(struct conch_conn *conn);
  /* Whether output is still waiting in the session (the server's: and
     may be produced now). */
  int (*want_write)(const struct conch_conn *conn);
  /* Whether the session is over (neither side wants anything more). */
  int (*over)(const struct conch_conn *conn);
  /* The keepalive decision at |now| (ms), a pure function of the
     connection's state; |*next| is when to ask again (WAIT, PING). */
  conch_keepalive (*keepalive)(const struct conch_conn *conn, int64_t now,
                               int64_t *next);
  /* Queues a PING.  Returns 0 or CONCH_ERR_NOMEM. */
  int (*ping)(struct conch_conn *conn);
  /* How many calls the started session takes at once: the peer's limit,
     or -1 while it is not known. */
  long (*capacity)(const struct conch_conn *conn);
  /* Whether the request half of the call's stream is closed (all of it
     went out). */
  int (*sent_all)(const struct conch_conn *conn, const conch_call *call);
  /* Forgets the call's stream without calling the call back again (the
     client is being freed). */
  void (*forget)(struct conch_conn *conn, conch_call *call);
  /* (Server) How many plaintext bytes the session takes now; 0: do not
     read.  NULL: no bound but |want_read| (the client's). */
  size_t (*room)(const struct conch_conn *conn);
  /* (Server) No new stream or request: GOAWAY, or "Connection: close"
     after the exchange in progress; NULL in the client's. */
  void (*goaway)(struct conch_conn *conn);
} conch_session_ops;

/* What |over| answers besides 0 and 1 (over: close once the output is
   out): the session is over and the connection closes the lingering
   way (the server's HTTP/1.1: the write side shut, what still comes read
   and dropped for a while). */
#define CONCH_SESSION_LINGER 2

/* HTTP/2 (session.c). */
extern const conch_session_ops conch__h2_ops;

/* How a stream ends: HTTP/2's error codes (RFC 9113 section 7), the
   vocabulary of both sessions and of call.c (conch__call_on_stream_close,
   conch__conn_stream_closed). */
enum {
  CONCH_STREAM_NO_ERROR = 0x0,
  CONCH_STREAM_REFUSED = 0x7, /* not processed: may be sent again */
  CONCH_STREAM_CANCEL = 0x8
};

#endif
