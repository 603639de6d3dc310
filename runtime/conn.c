/* One HTTP/2 connection: a transport's byte stream (sock.c: TCP or Unix,
   non-blocking; or the caller's), optional TLS, the nghttp2 session, and
   the batching of reads and writes.  Calls are multiplexed on
   it; calls beyond the peer's MAX_CONCURRENT_STREAMS wait in |queue| with
   their deadlines running. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "h1.h"
#include "list.h"
#include "mem_int.h"
#include "pool.h"
#include "resolve_int.h"
#include "session.h"
#include "sock.h"
#include "status_int.h"
#include "timer.h"
#include "tls.h"
#include "unix_int.h"

#define READ_BUF (256u << 10)
/* Stop asking nghttp2 for frames once this much waits for the socket;
   resume when it drains.  Bounds memory with big messages and windows. */
#define OUT_HIGH_WATER (1u << 20)

/* nghttp2 1.52 has only the ssize_t API (mem_send2/mem_recv2 came in
   1.60); keep the casts in one place. */
static long h2_mem_send(nghttp2_session *s, const uint8_t **data) {
  return (long)nghttp2_session_mem_send(s, data);
}
static long h2_mem_recv(nghttp2_session *s, const uint8_t *in, size_t n) {
  return (long)nghttp2_session_mem_recv(s, in, n);
}

/* ---- Transport --------------------------------------------------------- */

const conch_transport *conch__transport(const conch_client *c) {
  return c->o.transport.open != NULL ? &c->o.transport : &conch__sock_transport;
}

int conch__transport_is_own(const conch_client *c) {
  return c->o.transport.open == NULL;
}

/* ---- Failure ----------------------------------------------------------- */

static void close_fd(conch_conn *conn) {
  const conch_transport *t = conch__transport(conn->client);
  if (conn->fd < 0) {
    return;
  }
  /* The loop stops watching before the fd is closed. */
  conch__client_watch(conn->client, conn->fd, &conn->watched, 0);
  t->close(t->user_data, conn->fd);
  conn->fd = -1;
}

void conch__conn_close_fd(conch_conn *conn) { close_fd(conn); }

static void detach_calls(conch_conn *conn, conch_code code, int err,
                         const char *msg) {
  while (!conch__list_empty(&conn->queue)) {
    conch_call *call =
        CONCH_CONTAINER(conn->queue.next, conch_call, queue_link);
    conch__list_remove(&call->queue_link);
    conch__call_fail(call, code, err, "%s", msg);
  }
  while (!conch__list_empty(&conn->calls)) {
    conch_call *call = CONCH_CONTAINER(conn->calls.next, conch_call, conn_link);
    conch__conn_unbind(call);
    call->stream_live = 0;
    conch__call_fail(call, code, err, "%s", msg);
    conch__call_maybe_release(call);
  }
  conn->active = 0;
}

void conch__conn_fail(conch_conn *conn, conch_code code, int err,
                      const char *fmt, ...) {
  va_list ap;
  char msg[sizeof(conn->errmsg)];

  if (conn->state == CONCH_CONN_DEAD) {
    return;
  }
  /* Formatted apart: the arguments may quote the previous errmsg. */
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  memcpy(conn->errmsg, msg, sizeof(msg));
  conn->state = CONCH_CONN_DEAD;
  conch__resolve_abandon(conn);
  conn->errcode = err;
  conn->fail_code = code;
  conch__timer_disarm(conn->client, &conn->connect_timer);
  conch__timer_disarm(conn->client, &conn->keepalive_timer);
  close_fd(conn);
  detach_calls(conn, code, err, conn->errmsg);
  /* The session may be inside a callback now; it is deleted when the dead
     connection is flushed at the end of the turn. */
  conch__conn_mark_dirty(conn);
}

void conch__conn_free(conch_conn *conn) {
  conch_client *c = conn->client;

  conch__timer_disarm(c, &conn->connect_timer);
  conch__timer_disarm(c, &conn->keepalive_timer);
  close_fd(conn);
  if (conn->state == CONCH_CONN_DEAD && conn->errmsg[0] != '\0') {
    /* Calls bound after it failed (it failed while being opened, inside
       conch__conn_get): they end with its failure. */
    detach_calls(conn, conn->fail_code, conn->errcode, conn->errmsg);
  } else {
    detach_calls(conn, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                 "connection closed");
  }
  conch__list_remove(&conn->link);
  conch__list_remove(&conn->dirty);
  if (conn->h2 != NULL) {
    nghttp2_session_del(conn->h2);
  }
  conch__h1_free(conn->h1);
  conch__tls_free(conn->tls);
  conch__resolve_abandon(conn);
  conch__free(c->mem, conn->addrs);
  conch__buf_free(&conn->out, c->mem);
  conch__free(c->mem, conn->rbuf);
  conch__free(c->mem, conn->pbuf);
  conch__free(c->mem, conn);
}

void conch__conn_mark_dirty(conch_conn *conn) {
  if (conn->flush_pending) {
    return;
  }
  conn->flush_pending = 1;
  conch__list_push(&conn->client->dirty, &conn->dirty);
  conch__client_kick(conn->client);
}

/* ---- Watching ---------------------------------------------------------- */

static int tls_out_pending(conch_conn *conn) {
  const uint8_t *p;
  return conn->tls != NULL && conch__tls_pending(conn->tls, &p) > 0;
}

void conch__conn_update_watch(conch_conn *conn) {
  unsigned want = 0;
  if (conn->fd >= 0 && conn->state != CONCH_CONN_DEAD) {
    want = conn->h1 == NULL || conch__h1_want_read(conn) ? CONCH_IO_READ : 0;
    if (conn->state == CONCH_CONN_CONNECTING ||
        conch__buf_size(&conn->out) > 0 || tls_out_pending(conn)) {
      want |= CONCH_IO_WRITE;
    }
    if (conn->state == CONCH_CONN_CONNECTING) {
      want = CONCH_IO_WRITE;
    }
  }
  conch__client_watch(conn->client, conn->fd, &conn->watched, want);
}

/* ---- Writing ----------------------------------------------------------- */

/* Bytes for the socket, in order: TLS records (already encrypted) or the
   plain buffer. */
static size_t out_peek(conch_conn *conn, const uint8_t **p) {
  if (conn->tls != NULL) {
    return conch__tls_pending(conn->tls, p);
  }
  *p = conch__buf_head(&conn->out);
  return conch__buf_size(&conn->out);
}

static void out_consume(conch_conn *conn, size_t n) {
  if (conn->tls != NULL) {
    conch__tls_consume(conn->tls, n);
  } else {
    conch__buf_consume(&conn->out, n);
  }
}

/* Plaintext from nghttp2 goes to TLS or straight into the out buffer. */
static int out_append(conch_conn *conn, const uint8_t *p, size_t n) {
  if (conn->tls != NULL) {
    return conch__tls_write(conn->tls, p, n);
  }
  return conch__buf_append(&conn->out, conn->client->mem, p, n);
}

static size_t out_size(conch_conn *conn) {
  const uint8_t *p;
  return out_peek(conn, &p);
}

int conch__conn_write(conch_conn *conn, const uint8_t *p, size_t n) {
  return out_append(conn, p, n);
}

size_t conch__conn_out_size(conch_conn *conn) { return out_size(conn); }

/* Writes what is pending.  Returns 0 (written or would block) or fails the
   connection and returns CONCH_ERR_CONNECT. */
static int write_out(conch_conn *conn) {
  const conch_transport *t = conch__transport(conn->client);
  for (;;) {
    const uint8_t *p;
    size_t n = out_peek(conn, &p);
    long w;
    if (n == 0 || conn->fd < 0) {
      return 0;
    }
    w = t->write(t->user_data, conn->fd, p, n);
    if (w < 0) {
      if (w == -EAGAIN) {
        return 0;
      }
      if (conn->h1 != NULL) {
        /* Often the server closing an idle connection: the bridge knows
           whether the request may go again. */
        conch__h1_on_close(conn, strerror((int)-w));
        return conn->state == CONCH_CONN_DEAD ? CONCH_ERR_CONNECT : 0;
      }
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "write to %s failed: %s", conn->client->target,
                       strerror((int)-w));
      return CONCH_ERR_CONNECT;
    }
    out_consume(conn, (size_t)w);
    if ((size_t)w < n) {
      return 0; /* the socket buffer is full: wait for POLLOUT */
    }
  }
}

static void release_dead(conch_conn *conn) { conch__conn_free(conn); }

void conch__conn_flush(conch_conn *conn) {
  if (conn->state == CONCH_CONN_RESOLVING) {
    if (!conn->resolve_started) {
      conch__resolve_start(conn);
    }
    conch__resolve_apply(conn);
    if (conn->state == CONCH_CONN_RESOLVING) {
      return; /* nothing to say before the answer */
    }
  }
  if (conn->state == CONCH_CONN_DEAD) {
    release_dead(conn);
    return;
  }
  if (conn->state == CONCH_CONN_READY && conn->h1 != NULL) {
    conch__conn_submit_queued(conn);
    if (conch__h1_pump(conn) != 0) {
      release_dead(conn);
      return;
    }
  } else if (conn->state == CONCH_CONN_READY) {
    conch__conn_submit_queued(conn);
    while (out_size(conn) < OUT_HIGH_WATER) {
      const uint8_t *data;
      long n = h2_mem_send(conn->h2, &data);
      if (n < 0) {
        conch__conn_fail(conn, CONCH_CODE_INTERNAL, CONCH_ERR_SESSION,
                         "HTTP/2 session error: %s", nghttp2_strerror((int)n));
        release_dead(conn);
        return;
      }
      if (n == 0) {
        break;
      }
      if (out_append(conn, data, (size_t)n) != 0) {
        conch__conn_fail(conn, CONCH_CODE_INTERNAL, CONCH_ERR_NOMEM,
                         "out of memory writing to the connection");
        release_dead(conn);
        return;
      }
    }
  }
  if (write_out(conn) != 0) {
    release_dead(conn);
    return;
  }
  if (conn->state == CONCH_CONN_READY && out_size(conn) == 0 &&
      !nghttp2_session_want_read(conn->h2) &&
      !nghttp2_session_want_write(conn->h2)) {
    /* The session is over (GOAWAY exchanged, or a fatal error sent). */
    conch__conn_fail(conn,
                     conn->fail_code != CONCH_CODE_OK ? conn->fail_code
                                                      : CONCH_CODE_UNAVAILABLE,
                     CONCH_ERR_CONNECT, "%s",
                     conn->errmsg[0] ? conn->errmsg : "connection closed");
    release_dead(conn);
    return;
  }
  if (conn->state == CONCH_CONN_READY && out_size(conn) < OUT_HIGH_WATER &&
      nghttp2_session_want_write(conn->h2)) {
    /* More frames are waiting: come back this turn, after the socket took
       what it could. */
    if (out_size(conn) == 0) {
      conch__conn_mark_dirty(conn);
    }
  }
  conch__conn_update_watch(conn);
}

/* ---- Session setup ----------------------------------------------------- */

/* The session (session.c), then HTTP/1.1's bridge when the server does not
   speak HTTP/2, the keepalive timer, and the connection is ready. */
static int start_session(conch_conn *conn) {
  conch_client *c = conn->client;
  int rv = conch__session_start(conn);
  if (rv != 0) {
    return rv;
  }
  if (conn->tls != NULL ? !conch__tls_is_h2(conn->tls)
                        : c->o.http_version == CONCH_HTTP_1_1 || c->h1) {
    rv = conch__h1_new(conn);
    if (rv != 0) {
      return rv;
    }
    if (!c->h1) {
      c->h1 = 1;
      conch__pool_rehome_queued(conn);
    }
  }
  conn->state = CONCH_CONN_READY;
  conch__timer_disarm(c, &conn->connect_timer);
  conn->last_read = conch__client_now(conn->client);
  if (c->o.keepalive_ms > 0 && conn->h1 == NULL) {
    conch__timer_arm(c, &conn->keepalive_timer,
                     conn->last_read + c->o.keepalive_ms);
  }
  conch__conn_mark_dirty(conn);
  return 0;
}

/* ---- Connecting -------------------------------------------------------- */

/* Starts connecting to |conn->addrs[next_addr]| or the next address that
   works.  Returns 0 (in progress or connected) or fails the connection. */
static int try_connect(conch_conn *conn, int last_errno) {
  conch_client *c = conn->client;
  const conch_transport *t = conch__transport(c);
  for (; conn->next_addr < conn->naddrs; conn->next_addr++) {
    const conch_addr *a = &conn->addrs[conn->next_addr];
    int fd = t->open(t->user_data, (const struct sockaddr *)&a->sa, a->len);
    if (fd >= 0) {
      conn->fd = fd;
      conn->state = CONCH_CONN_CONNECTING;
      conch__conn_update_watch(conn);
      return 0;
    }
    last_errno = -fd;
  }
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                   "cannot connect to %s: %s", c->target,
                   strerror(last_errno ? last_errno : ECONNREFUSED));
  return CONCH_ERR_CONNECT;
}

void conch__conn_connect(conch_conn *conn) {
  conn->next_addr = 0;
  try_connect(conn, 0);
}

static void tls_fail(conch_conn *conn) {
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TLS,
                   "TLS with %s: %s", conn->client->target,
                   conch__tls_error(conn->tls));
}

/* Drives the TLS handshake after new input; starts HTTP/2 when done. */
static void handshake(conch_conn *conn) {
  int rv = conch__tls_handshake(conn->tls);
  if (rv == 0) {
    rv = start_session(conn);
    if (rv != 0) {
      conch__conn_fail(conn, CONCH_CODE_INTERNAL, rv, "cannot start HTTP/2: %s",
                       conch_strerror(rv));
    }
  } else if (rv != CONCH_ERR_AGAIN) {
    tls_fail(conn);
    return;
  }
  if (write_out(conn) == 0) {
    conch__conn_update_watch(conn);
  }
}

static void on_connected(conch_conn *conn) {
  conch_client *c = conn->client;
  int rv;
  if (c->tls) {
    rv = conch__tls_new(&conn->tls, c->tls_ctx, c->host);
    if (rv != 0) {
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, rv,
                       "TLS setup for %s failed: %s", c->host,
                       conch_strerror(rv));
      return;
    }
    conn->state = CONCH_CONN_HANDSHAKE;
    handshake(conn);
    return;
  }
  rv = start_session(conn);
  if (rv != 0) {
    conch__conn_fail(conn, CONCH_CODE_INTERNAL, rv, "cannot start HTTP/2: %s",
                     conch_strerror(rv));
    return;
  }
  conch__conn_update_watch(conn);
}

static void check_connect(conch_conn *conn) {
  const conch_transport *t = conch__transport(conn->client);
  int err = t->connect_result(t->user_data, conn->fd);
  if (err == EINPROGRESS || err == EALREADY) {
    return;
  }
  if (err != 0) {
    close_fd(conn);
    if (conn->client->unix_path != NULL) { /* one address only */
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "cannot connect to %s: %s", conn->client->unix_path,
                       strerror(err));
      return;
    }
    conn->next_addr++;
    try_connect(conn, err);
    return;
  }
  if (conn->client->unix_path != NULL && conch__unix_peer_check(conn) != 0) {
    return;
  }
  on_connected(conn);
}

conch_conn *conch__conn_new(conch_client *c, conch_status *st) {
  conch_conn *conn;
  int rv;

  conn = conch__calloc(c->mem, 1, sizeof(*conn));
  if (conn == NULL) {
    conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                      CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
    return NULL;
  }
  conn->client = c;
  conn->fd = -1;
  conn->connect_timer.idx = SIZE_MAX;
  conn->connect_timer.kind = CONCH_TIMER_CONN_CONNECT;
  conn->keepalive_timer.idx = SIZE_MAX;
  conn->keepalive_timer.kind = CONCH_TIMER_CONN_KEEPALIVE;
  conch__list_init(&conn->calls);
  conch__list_init(&conn->queue);
  conn->rcap = READ_BUF;
  conn->rbuf = conch__malloc(c->mem, conn->rcap);
  if (conn->rbuf == NULL) {
    conch__free(c->mem, conn);
    conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                      CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
    return NULL;
  }
  if (c->tls) {
    conn->pcap = READ_BUF;
    conn->pbuf = conch__malloc(c->mem, conn->pcap);
    if (conn->pbuf == NULL) {
      conch__free(c->mem, conn->rbuf);
      conch__free(c->mem, conn);
      conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                        CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
      return NULL;
    }
  }
  if (c->unix_path != NULL) {
    conch__list_push(&c->conns, &conn->link);
    conch__timer_arm(c, &conn->connect_timer,
                     conch__client_now(c) + c->o.connect_timeout_ms);
    conch__unix_connect(conn);
    return conn;
  }
  rv = conch__resolve_numeric(conn, st);
  if (rv < 0) {
    conch__free(c->mem, conn->pbuf);
    conch__free(c->mem, conn->rbuf);
    conch__free(c->mem, conn);
    return NULL;
  }
  conch__list_push(&c->conns, &conn->link);
  /* The connect timeout covers the lookup too. */
  conch__timer_arm(c, &conn->connect_timer,
                   conch__client_now(c) + c->o.connect_timeout_ms);
  if (rv == 1) {
    /* A name: looked up at the end of the turn (resolve.c). */
    conn->state = CONCH_CONN_RESOLVING;
    conch__conn_mark_dirty(conn);
    return conn;
  }
  /* A failure here leaves a dead connection that fails the calls bound to
     it at the end of the turn, with its message. */
  conch__conn_connect(conn);
  return conn;
}

void conch__conn_on_keepalive(conch_conn *conn) {
  conch_client *c = conn->client;
  int64_t now = conch__client_now(c);
  long interval = c->o.keepalive_ms;

  if (conn->state != CONCH_CONN_READY || interval <= 0 || conn->h1 != NULL) {
    return; /* HTTP/1.1 has no PING */
  }
  if (conn->ping_sent != 0) {
    if (conn->last_read > conn->ping_sent) {
      conn->ping_sent = 0; /* something came back meanwhile */
    } else if (now - conn->ping_sent >= c->o.keepalive_timeout_ms) {
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "keepalive: %s did not answer a PING within %ld ms",
                       c->target, c->o.keepalive_timeout_ms);
      return;
    } else {
      conch__timer_arm(c, &conn->keepalive_timer,
                       conn->ping_sent + c->o.keepalive_timeout_ms);
      return;
    }
  }
  if (now - conn->last_read < interval) {
    conch__timer_arm(c, &conn->keepalive_timer, conn->last_read + interval);
    return; /* recent traffic */
  }
  if (conch__list_empty(&conn->calls)) {
    /* Nothing to keep alive: no pings without calls, as gRPC clients
       default to. */
    conch__timer_arm(c, &conn->keepalive_timer, now + interval);
    return;
  }
  if (nghttp2_submit_ping(conn->h2, NGHTTP2_FLAG_NONE, NULL) != 0) {
    conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory sending a keepalive PING");
    return;
  }
  conn->ping_sent = now;
  conch__conn_mark_dirty(conn);
  conch__timer_arm(c, &conn->keepalive_timer, now + c->o.keepalive_timeout_ms);
}

void conch__conn_on_timeout(conch_conn *conn) {
  if (conn->state == CONCH_CONN_RESOLVING) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TIMEOUT,
                     "looking up %s timed out after %ld ms (the connect "
                     "timeout)",
                     conn->client->host, conn->client->o.connect_timeout_ms);
    return;
  }
  if (conn->state == CONCH_CONN_CONNECTING ||
      conn->state == CONCH_CONN_HANDSHAKE) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TIMEOUT,
                     "connecting to %s timed out after %ld ms",
                     conn->client->target, conn->client->o.connect_timeout_ms);
  }
}

/* ---- Reading ----------------------------------------------------------- */

/* An http:// target with CONCH_HTTP_AUTO is tried with HTTP/2 (prior
   knowledge) first.  No request goes out before the server's SETTINGS
   (conch__conn_submit_queued), so when the first byte back is the 'H' of
   an HTTP/1.x status line instead (no HTTP/2 frame can start with 0x48:
   its length would exceed any SETTINGS_MAX_FRAME_SIZE the server could
   have announced before saying anything), nothing was sent but the
   preface: the client switches to HTTP/1.1 for good, and the calls
   waiting here move to new connections.  The cost is the round trip of
   the first connection, once per client.  gRPC cannot do that: its calls
   fail, saying why. */
static int h1_fallback(conch_conn *conn) {
  conch_client *c = conn->client;
  conch_link *l;

  if (c->o.protocol == CONCH_PROTOCOL_GRPC) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_PROTO,
                     "%s speaks HTTP/1.x, not HTTP/2, and gRPC needs "
                     "HTTP/2 (Connect and gRPC-Web work over HTTP/1.1)",
                     c->target);
    return CONCH_ERR_PROTO;
  }
  c->h1 = 1;
  conn->goaway = 1; /* the pool must not pick this one again */
  while ((l = conn->calls.next) != &conn->calls) {
    conch__pool_requeue(CONCH_CONTAINER(l, conch_call, conn_link));
  }
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                   "%s speaks HTTP/1.x: retried over HTTP/1.1", c->target);
  return CONCH_ERR_CONNECT;
}

/* Hands plaintext to nghttp2.  Returns 0 or fails the connection. */
static int feed_h2(conch_conn *conn, const uint8_t *p, size_t n) {
  long rv;
  if (!conn->seen_bytes && n > 0) {
    conn->seen_bytes = 1;
    if (p[0] == 'H' && conn->tls == NULL && conn->h1 == NULL &&
        !conn->peer_settings &&
        conn->client->o.http_version == CONCH_HTTP_AUTO) {
      return h1_fallback(conn);
    }
  }
  if (conn->h1 != NULL) {
    conch__h1_recv(conn, p, n);
    return conn->state == CONCH_CONN_DEAD ? CONCH_ERR_CONNECT : 0;
  }
  rv = h2_mem_recv(conn->h2, p, n);
  if (conn->state == CONCH_CONN_DEAD) {
    return CONCH_ERR_CONNECT;
  }
  if (rv < 0) {
    conch__conn_fail(conn, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "HTTP/2 protocol error from %s: %s", conn->client->target,
                     nghttp2_strerror((int)rv));
    return CONCH_ERR_PROTO;
  }
  return 0;
}

static int feed_tls(conch_conn *conn, const uint8_t *p, size_t n) {
  int rv = conch__tls_feed(conn->tls, p, n);
  if (rv != 0) {
    tls_fail(conn);
    return rv;
  }
  if (conn->state == CONCH_CONN_HANDSHAKE) {
    handshake(conn);
    if (conn->state != CONCH_CONN_READY) {
      return conn->state == CONCH_CONN_DEAD ? CONCH_ERR_TLS : 0;
    }
  }
  for (;;) {
    long got = conch__tls_read(conn->tls, conn->pbuf, conn->pcap);
    if (got == CONCH_ERR_AGAIN) {
      return 0;
    }
    if (got == CONCH_ERR_EOF && conn->h1 != NULL) {
      conch__h1_on_close(conn, "closed by the server");
      return conn->state == CONCH_CONN_DEAD ? CONCH_ERR_CONNECT : 0;
    }
    if (got == CONCH_ERR_EOF) {
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "connection closed by %s", conn->client->target);
      return CONCH_ERR_CONNECT;
    }
    if (got < 0) {
      tls_fail(conn);
      return (int)got;
    }
    rv = feed_h2(conn, conn->pbuf, (size_t)got);
    if (rv != 0) {
      return rv;
    }
  }
}

static void on_readable(conch_conn *conn) {
  const conch_transport *t = conch__transport(conn->client);
  int i;
  /* Any byte read shows the peer alive; the keepalive timer reads this
     lazily instead of being re-armed per read. */
  conn->last_read = conch__client_now(conn->client);
  /* Bounded so one busy connection cannot starve the rest of the loop. */
  for (i = 0; i < 16 && conn->state != CONCH_CONN_DEAD && conn->fd >= 0 &&
              (conn->h1 == NULL || conch__h1_want_read(conn));
       i++) {
    long n = t->read(t->user_data, conn->fd, conn->rbuf, conn->rcap);
    int rv;
    if (n < 0) {
      if (n == -EAGAIN) {
        return;
      }
      if (conn->h1 != NULL) {
        conch__h1_on_close(conn, strerror((int)-n));
        return;
      }
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "read from %s failed: %s", conn->client->target,
                       strerror((int)-n));
      return;
    }
    if (n == 0 && conn->h1 != NULL) {
      conch__h1_on_close(conn, "closed by the server");
      return;
    }
    if (n == 0) {
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "connection closed by %s%s%s", conn->client->target,
                       conn->errmsg[0] ? " after " : "", conn->errmsg);
      return;
    }
    if (conn->tls != NULL) {
      rv = feed_tls(conn, conn->rbuf, (size_t)n);
    } else {
      rv = feed_h2(conn, conn->rbuf, (size_t)n);
    }
    if (rv != 0) {
      return;
    }
    if ((size_t)n < conn->rcap) {
      return;
    }
  }
  /* More may be waiting; poll will say so again. */
}

void conch__conn_on_io(conch_conn *conn, unsigned events) {
  if (conn->state == CONCH_CONN_DEAD) {
    return;
  }
  if (conn->state == CONCH_CONN_CONNECTING) {
    check_connect(conn);
    return;
  }
  if (events & CONCH_IO_READ) {
    on_readable(conn);
  }
  if (conn->state != CONCH_CONN_DEAD) {
    /* Reading may have produced frames (SETTINGS ACK, WINDOW_UPDATE) and
       writability means the socket takes more. */
    conch__conn_mark_dirty(conn);
  }
}
