/* One connection: a transport's byte stream (sock.c: TCP or Unix,
   non-blocking; or the caller's), the filter (filter.c: TLS or nothing),
   a session (session.h: HTTP/2 or HTTP/1.1, called through its table of
   operations only), the keepalive timer and the batching of reads and
   writes.  Calls are multiplexed on it; calls beyond the session's stream
   limit wait in |queue| with their deadlines running. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "balance.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "filter.h"
#include "h1.h"
#include "list.h"
#include "mem_int.h"
#include "pool.h"
#include "resolve_int.h"
#include "session.h"
#include "sock.h"
#include "status_int.h"
#include "timer.h"
#include "unix_int.h"

/* ---- Transport --------------------------------------------------------- */

const conch_transport *conch__transport(const conch_client *c) {
  return c->ep.transport;
}

int conch__transport_is_own(const conch_client *c) {
  return c->o.transport.open == NULL;
}

/* ---- Failure ----------------------------------------------------------- */

static void close_fd(conch_conn *conn) {
  const conch_transport *t = conn->transport;
  if (conn->fd < 0) {
    return;
  }
  /* The loop stops watching before the fd is closed. */
  conn->ep->ops->watch(conn->ep, conn->fd, &conn->watched, 0);
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
  conn->ep->ops->timer_disarm(conn->ep, &conn->connect_timer);
  conn->ep->ops->timer_disarm(conn->ep, &conn->keepalive_timer);
  close_fd(conn);
  if (conn->lba != NULL || conn->lb_resolver) {
    conch__lb_conn_failed(conn); /* moves the calls never sent */
  }
  detach_calls(conn, code, err, conn->errmsg);
  /* The session may be inside a callback now; it is deleted when the dead
     connection is flushed at the end of the turn. */
  conch__conn_mark_dirty(conn);
}

void conch__conn_free(conch_conn *conn) {
  conch_endpoint *ep = conn->ep;

  ep->ops->timer_disarm(ep, &conn->connect_timer);
  ep->ops->timer_disarm(ep, &conn->keepalive_timer);
  close_fd(conn);
  if (conn->state == CONCH_CONN_DEAD && conn->errmsg[0] != '\0') {
    /* Calls bound after it failed (it failed while being opened, inside
       conch__conn_get): they end with its failure. */
    detach_calls(conn, conn->fail_code, conn->errcode, conn->errmsg);
  } else {
    detach_calls(conn, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                 "connection closed");
  }
  if (conn->lba != NULL || conn->lb_resolver) {
    conch__lb_conn_gone(conn);
  }
  conch__list_remove(&conn->link);
  conch__list_remove(&conn->dirty);
  conn->ops->free(conn);
  conch__filter_free(conn);
  conch__resolve_abandon(conn);
  conch__free(ep->mem, conn->addrs);
  conch__free(ep->mem, conn->rbuf);
  conch__free(ep->mem, conn->pbuf);
  conch__free(ep->mem, conn);
}

void conch__conn_mark_dirty(conch_conn *conn) {
  if (conn->flush_pending) {
    return;
  }
  conn->flush_pending = 1;
  conch__list_push(&conn->ep->dirty, &conn->dirty);
  conn->ep->ops->kick(conn->ep);
}

/* ---- Watching ---------------------------------------------------------- */

unsigned conch__conn_events(const conch_conn *conn) {
  unsigned want = 0;
  if (conn->fd >= 0 && conn->state != CONCH_CONN_DEAD) {
    want = conn->ops->want_read(conn) ? CONCH_IO_READ : 0;
    if (conn->state == CONCH_CONN_CONNECTING ||
        conch__filter_out_size((conch_conn *)conn) > 0) {
      want |= CONCH_IO_WRITE;
    }
    if (conn->state == CONCH_CONN_CONNECTING) {
      want = CONCH_IO_WRITE;
    }
  }
  return want;
}

void conch__conn_update_watch(conch_conn *conn) {
  conn->ep->ops->watch(conn->ep, conn->fd, &conn->watched,
                       conch__conn_events(conn));
}

/* ---- Stream operations (call.c), through the session ------------------ */

void conch__conn_resume(conch_conn *conn, conch_call *call) {
  conn->ops->resume(conn, call);
}

void conch__conn_consume(conch_conn *conn, conch_call *call, size_t n) {
  conn->ops->consume(conn, call, n);
}

void conch__conn_reset(conch_conn *conn, conch_call *call, uint32_t h2err) {
  conn->ops->reset(conn, call, h2err);
}

void conch__conn_stream_closed(conch_conn *conn, conch_call *call,
                               uint32_t err) {
  if (conn->active > 0) {
    conn->active--;
  }
  call->stream_live = 0;
  conch__conn_unbind(call);
  conch__call_on_stream_close(call, err);
  conch__call_maybe_release(call);
  /* A slot is free: queued calls may go. */
  if (!conch__list_empty(&conn->queue)) {
    conch__conn_mark_dirty(conn);
  }
  if (conn->lba != NULL && conn->ncalls == 0) {
    conch__lb_conn_idle(conn); /* closes it when its address left */
  }
}

/* ---- Writing ----------------------------------------------------------- */

long conch__conn_write(conch_conn *conn, int refill) {
  const conch_transport *t = conn->transport;
  const int retry = conn->ep->retry_short;
  if (conn->fd < 0) {
    return 0;
  }
  for (;;) {
    const uint8_t *p;
    long w;
    do {
      w = conch__filter_send(&conn->filter, t->write, t->user_data, conn->fd);
    } while (w == CONCH_FILTER_SHORT && retry);
    if (w != 0) {
      if (w == CONCH_FILTER_SHORT || w == CONCH_FILTER_BLOCKED || w == -EINTR) {
        return 0; /* the transport is full: wait for POLLOUT */
      }
      return w; /* CONCH_WRITE_ZERO, or the write failed */
    }
    if (!refill || !conn->ops->want_write(conn)) {
      return 0;
    }
    if (conn->ops->send(conn) != 0) {
      return CONCH_WRITE_SESSION;
    }
    if (conch__filter_pending(&conn->filter, &p) == 0) {
      return 0;
    }
  }
}

/* The client's reading of the write-out: a write that took nothing waits
   for POLLOUT; a failed one goes to the session (often the server closing
   an idle connection: HTTP/1.1 knows whether the request may go again).
   Returns 0, or CONCH_ERR_CONNECT with the connection failed. */
static int write_out(conch_conn *conn, int refill) {
  long w = conch__conn_write(conn, refill);
  if (w == 0 || w == CONCH_WRITE_ZERO) {
    return 0;
  }
  if (w == CONCH_WRITE_SESSION) {
    return CONCH_ERR_CONNECT; /* the session failed the connection */
  }
  conn->ops->on_close(conn, (int)-w, 1);
  return conn->state == CONCH_CONN_DEAD ? CONCH_ERR_CONNECT : 0;
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
  if (conn->state == CONCH_CONN_READY) {
    conn->ops->submit(conn, conn->ep->ops->now(conn->ep));
    if (conn->ops->send(conn) != 0) {
      release_dead(conn);
      return;
    }
  }
  /* What the session has more after everything went out is produced and
     written at once (the write-out's refill). */
  if (write_out(conn, conn->state == CONCH_CONN_READY) != 0) {
    release_dead(conn);
    return;
  }
  if (conn->state == CONCH_CONN_READY && conch__filter_out_size(conn) == 0 &&
      conn->ops->over(conn)) {
    /* The session is over (GOAWAY exchanged, or a fatal error sent). */
    conch__conn_fail(conn,
                     conn->fail_code != CONCH_CODE_OK ? conn->fail_code
                                                      : CONCH_CODE_UNAVAILABLE,
                     CONCH_ERR_CONNECT, "%s",
                     conn->errmsg[0] ? conn->errmsg : "connection closed");
    release_dead(conn);
    return;
  }
  conch__conn_update_watch(conn);
}

/* ---- Session setup ----------------------------------------------------- */

/* Asks the session what the keepalive timer should do at |now|. */
static void keepalive_step(conch_conn *conn, int64_t now) {
  conch_endpoint *ep = conn->ep;
  int64_t next = now;

  switch (conn->ops->keepalive(conn, now, &next)) {
  case CONCH_KA_OFF:
    return;
  case CONCH_KA_DEAD:
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "keepalive: %s did not answer a PING within %ld ms",
                     ep->target, conch__conn_client(conn)->o.keepalive_timeout_ms);
    return;
  case CONCH_KA_PING:
    if (conn->ops->ping(conn) != 0) {
      conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                       "out of memory sending a keepalive PING");
      return;
    }
    conn->ping_sent = now;
    conch__conn_mark_dirty(conn);
    break;
  case CONCH_KA_WAIT:
    break;
  }
  ep->ops->timer_arm(ep, &conn->keepalive_timer, next);
}

/* The session: HTTP/1.1 when TLS negotiated it, when asked for, or when
   the client found out the server speaks nothing else; else HTTP/2. */
static const conch_session_ops *pick_session(const conch_conn *conn) {
  const conch_client *c = conch__conn_client(conn);
  int alpn_h2 = conch__filter_alpn_h2(conn);
  int h1 =
      alpn_h2 >= 0 ? !alpn_h2 : c->o.http_version == CONCH_HTTP_1_1 || c->h1;
  return h1 ? &conch__h1_ops : &conch__h2_ops;
}

/* Starts the session once the filter is secure; the connection is then
   ready.  Returns 0 or fails the connection. */
int conch__conn_start_session(conch_conn *conn) {
  conch_endpoint *ep = conn->ep;
  int rv;

  conn->ops = pick_session(conn);
  rv = conn->ops->start(conn);
  if (rv != 0) {
    conch__conn_fail(conn, CONCH_CODE_INTERNAL, rv, "cannot start %s: %s",
                     conn->ops->name, conch_strerror(rv));
    return rv;
  }
  conn->state = CONCH_CONN_READY;
  if (conn->lba != NULL) {
    conch__lb_conn_ready(conn);
  }
  ep->ops->timer_disarm(ep, &conn->connect_timer);
  conn->last_read = ep->ops->now(ep);
  keepalive_step(conn, conn->last_read);
  conch__conn_mark_dirty(conn);
  return 0;
}

/* ---- Connecting -------------------------------------------------------- */

/* Starts connecting to |conn->addrs[next_addr]| or the next address that
   works.  Returns 0 (in progress or connected) or fails the connection. */
static int try_connect(conch_conn *conn, int last_errno) {
  const conch_transport *t = conn->transport;
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
                   "cannot connect to %s: %s",
                   conn->peer_name != NULL ? conn->peer_name : conn->ep->target,
                   strerror(last_errno ? last_errno : ECONNREFUSED));
  return CONCH_ERR_CONNECT;
}

void conch__conn_connect(conch_conn *conn) {
  conn->next_addr = 0;
  try_connect(conn, 0);
}

static void on_connected(conch_conn *conn) {
  if (conch__filter_open(conn) == CONCH_FILTER_SECURE) {
    conch__conn_start_session(conn);
  }
  if (conn->state != CONCH_CONN_DEAD && write_out(conn, 0) == 0) {
    conch__conn_update_watch(conn);
  }
}

/* A Unix socket: the client's (no addresses), or a balancer's target. */
static int conn_is_unix(const conch_conn *conn) {
  return conn->naddrs > 0 ? conn->addrs[0].family == AF_UNIX
                          : conch__conn_client(conn)->unix_path != NULL;
}

static void check_connect(conch_conn *conn) {
  const conch_client *c = conch__conn_client(conn);
  const conch_transport *t = conn->transport;
  int err = t->connect_result(t->user_data, conn->fd);
  if (err == EINPROGRESS || err == EALREADY) {
    return;
  }
  if (err != 0) {
    close_fd(conn);
    if (c->unix_path != NULL && conn->lba == NULL) { /* one address only */
      conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "cannot connect to %s: %s", c->unix_path,
                       strerror(err));
      return;
    }
    conn->next_addr++;
    try_connect(conn, err);
    return;
  }
  if (conn_is_unix(conn) && conch__unix_peer_check(conn) != 0) {
    return;
  }
  on_connected(conn);
}

/* A connection of |c| not connecting yet, in no list; NULL and |st| when
   out of memory. */
static conch_conn *conn_alloc(conch_client *c, conch_status *st) {
  conch_conn *conn;

  conn = conch__calloc(c->mem, 1, sizeof(*conn));
  if (conn == NULL) {
    conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                      CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
    return NULL;
  }
  conn->ep = &c->ep;
  conn->transport = c->ep.transport;
  conn->filter.mem = c->mem;
  conn->ops = &conch__h2_ops; /* until the session starts (pick_session) */
  conn->fd = -1;
  conn->connect_timer.idx = SIZE_MAX;
  conn->connect_timer.kind = CONCH_TIMER_CONN_CONNECT;
  conn->keepalive_timer.idx = SIZE_MAX;
  conn->keepalive_timer.kind = CONCH_TIMER_CONN_KEEPALIVE;
  conch__list_init(&conn->calls);
  conch__list_init(&conn->queue);
  conn->rcap = CONCH_CONN_READ_BUF;
  conn->rbuf = conch__malloc(c->mem, conn->rcap);
  if (conn->rbuf == NULL) {
    conch__free(c->mem, conn);
    conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                      CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
    return NULL;
  }
  if (c->ep.tls_ctx != NULL) {
    conn->pcap = CONCH_CONN_READ_BUF;
    conn->pbuf = conch__malloc(c->mem, conn->pcap);
    if (conn->pbuf == NULL) {
      conch__free(c->mem, conn->rbuf);
      conch__free(c->mem, conn);
      conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                        CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
      return NULL;
    }
  }
  return conn;
}

static void conn_unalloc(conch_client *c, conch_conn *conn) {
  conch__free(c->mem, conn->addrs);
  conch__free(c->mem, conn->pbuf);
  conch__free(c->mem, conn->rbuf);
  conch__free(c->mem, conn);
}

conch_conn *conch__conn_new_at(conch_client *c, struct conch_lb_addr *a,
                               const conch_addr *addr, conch_status *st) {
  conch_conn *conn = conn_alloc(c, st);

  if (conn == NULL) {
    return NULL;
  }
  conn->addrs = conch__malloc(c->mem, sizeof(*conn->addrs));
  if (conn->addrs == NULL) {
    conn_unalloc(c, conn);
    conch__status_set(st, c->mem, CONCH_CODE_RESOURCE_EXHAUSTED,
                      CONCH_ORIGIN_LOCAL, CONCH_ERR_NOMEM, "out of memory");
    return NULL;
  }
  conn->addrs[0] = *addr;
  conn->naddrs = 1;
  conch__lb_attach(conn, a);
  conch__list_push(&c->conns, &conn->link);
  conch__timer_arm(c, &conn->connect_timer,
                   conch__client_now(c) + c->o.connect_timeout_ms);
  conch__conn_connect(conn);
  return conn;
}

conch_conn *conch__conn_new(conch_client *c, conch_status *st) {
  conch_conn *conn;
  int rv;

  conn = conn_alloc(c, st);
  if (conn == NULL) {
    return NULL;
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
    conn_unalloc(c, conn);
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
  if (conn->state != CONCH_CONN_READY) {
    return;
  }
  keepalive_step(conn, conn->ep->ops->now(conn->ep));
}

void conch__conn_on_timeout(conch_conn *conn) {
  if (conn->state == CONCH_CONN_RESOLVING) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TIMEOUT,
                     "looking up %s timed out after %ld ms (the connect "
                     "timeout)",
                     conch__conn_client(conn)->host,
                     conch__conn_client(conn)->o.connect_timeout_ms);
    return;
  }
  if (conn->state == CONCH_CONN_CONNECTING ||
      conn->state == CONCH_CONN_HANDSHAKE) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TIMEOUT,
                     "connecting to %s timed out after %ld ms",
                     conn->peer_name != NULL ? conn->peer_name
                                             : conn->ep->target,
                     conch__conn_client(conn)->o.connect_timeout_ms);
  }
}

/* ---- Reading ----------------------------------------------------------- */

void conch__conn_on_readable(conch_conn *conn) {
  conch_endpoint *ep = conn->ep;
  const conch_transport *t = conn->transport;
  size_t total = 0;
  /* Any byte read shows the peer alive; the keepalive timer reads this
     lazily instead of being re-armed per read. */
  if (ep->stamp_reads) {
    conn->last_read = ep->ops->now(ep);
  }
  /* Bounded so one busy connection cannot starve the rest of the loop. */
  while (conn->state != CONCH_CONN_DEAD && conn->fd >= 0 &&
         conn->ops->want_read(conn)) {
    size_t want = conn->rcap;
    long n;
    int rv;
    if (conn->ops->room != NULL && conn->filter.tls == NULL) {
      /* Cleartext is read as far as the session takes it (under TLS,
         its want_read bounds what TLS holds). */
      size_t room = conn->ops->room(conn);
      want = room < want ? room : want;
    }
    n = t->read(t->user_data, conn->fd, conn->rbuf, want);
    if (n < 0) {
      if (n == -EAGAIN || n == -EINTR) {
        return; /* poll says when there is more */
      }
      conn->ops->on_close(conn, (int)-n, 0);
      return;
    }
    if (n == 0) {
      conn->ops->on_close(conn, 0, 0);
      return;
    }
    rv = conch__filter_recv(conn, conn->rbuf, (size_t)n);
    if (rv == CONCH_FILTER_SECURE) {
      /* The handshake is done: the session starts, then takes the
         plaintext that came with its last flight. */
      if (ep->ops->secure(conn) != 0) {
        return;
      }
      rv = conch__filter_recv(conn, NULL, 0);
    }
    if (rv != 0) {
      return;
    }
    if ((size_t)n < want && !ep->drain_reads) {
      return; /* the transport had no more */
    }
    total += (size_t)n;
    if (total >= ep->read_budget) {
      ep->ops->kick(ep); /* the rest on the next turn */
      return;
    }
  }
}

void conch__conn_pull(conch_conn *conn) {
  int rv;
  if (conn->filter.tls == NULL || conn->state == CONCH_CONN_DEAD) {
    return;
  }
  rv = conch__filter_recv(conn, NULL, 0);
  if (rv == CONCH_FILTER_SECURE && conn->ep->ops->secure(conn) == 0) {
    (void)conch__filter_recv(conn, NULL, 0);
  }
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
    conch__conn_on_readable(conn);
  }
  if (conn->state != CONCH_CONN_DEAD) {
    /* Reading may have produced frames (SETTINGS ACK, WINDOW_UPDATE) and
       writability means the socket takes more. */
    conch__conn_mark_dirty(conn);
  }
}
