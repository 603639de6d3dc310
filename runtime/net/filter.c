/* The connection filter: TLS (tls.c, memory BIOs) between the transport's
   bytes and the session's plaintext, or nothing.  See filter.h.  The
   first half is role-free (the server's connections use it too); the
   second is a client connection's. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <conch/conch.h>

#include "buf.h"
#include "client_int.h"
#include "conn_int.h"
#include "filter.h"
#include "session.h"
#include "tls.h"

/* ---- Role-free ---------------------------------------------------------- */

int conch__filter_queue(conch_filter *f, const uint8_t *p, size_t n) {
  if (f->tls != NULL) {
    return conch__tls_write(f->tls, p, n);
  }
  return conch__buf_append(&f->out, f->mem, p, n);
}

size_t conch__filter_pending(conch_filter *f, const uint8_t **p) {
  if (f->tls != NULL) {
    return conch__tls_pending(f->tls, p);
  }
  *p = conch__buf_head(&f->out);
  return conch__buf_size(&f->out);
}

void conch__filter_taken(conch_filter *f, size_t n) {
  if (f->tls != NULL) {
    conch__tls_consume(f->tls, n);
  } else {
    conch__buf_consume(&f->out, n);
  }
}

long conch__filter_send(conch_filter *f,
                        long (*put)(void *, int, const void *, size_t),
                        void *user_data, int fd) {
  for (;;) {
    const uint8_t *p;
    size_t n = conch__filter_pending(f, &p);
    long w;
    if (n == 0) {
      return 0;
    }
    w = put(user_data, fd, p, n);
    if (w < 0) {
      return w == -EAGAIN || w == -EWOULDBLOCK ? CONCH_FILTER_BLOCKED : w;
    }
    if (w == 0) {
      return CONCH_FILTER_ZERO;
    }
    conch__filter_taken(f, (size_t)w);
    if ((size_t)w < n) {
      return CONCH_FILTER_SHORT; /* the socket buffer is full */
    }
  }
}

int conch__filter_pump(conch_filter *f, uint8_t *buf, size_t cap,
                       size_t (*room)(void *ud),
                       int (*feed)(void *ud, const uint8_t *p, size_t n),
                       void *ud) {
  for (;;) {
    size_t want = cap;
    long got;
    int rv;
    if (room != NULL) {
      size_t r = room(ud);
      if (r == 0) {
        /* What TLS holds waits for room. */
        return conch__tls_buffered(f->tls) > 0 ? CONCH_FILTER_HELD : 0;
      }
      want = r < want ? r : want;
    }
    got = conch__tls_read(f->tls, buf, want);
    if (got == CONCH_ERR_AGAIN) {
      return 0;
    }
    if (got < 0) {
      return (int)got; /* CONCH_ERR_EOF: close_notify; else TLS failed */
    }
    rv = feed(ud, buf, (size_t)got);
    if (rv != 0) {
      return rv;
    }
  }
}

void conch__filter_clear(conch_filter *f) {
  conch__tls_free(f->tls);
  f->tls = NULL;
  conch__buf_free(&f->out, f->mem);
}

/* ---- A client connection's ---------------------------------------------- */

void conch__filter_tls_fail(conch_conn *conn) {
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TLS,
                   "TLS with %s: %s", conn->ep->target,
                   conch__tls_error(conn->filter.tls));
}

/* The endpoint's reading of a TLS failure. */
static void tls_fail(conch_conn *conn) { conn->ep->ops->tls_fail(conn); }

/* Drives the TLS handshake after new input. */
static int handshake(conch_conn *conn) {
  int rv = conch__tls_handshake(conn->filter.tls);
  if (rv == 0) {
    return CONCH_FILTER_SECURE;
  }
  if (rv == CONCH_ERR_AGAIN) {
    return 0;
  }
  tls_fail(conn);
  return CONCH_ERR_TLS;
}

int conch__filter_open(conch_conn *conn) {
  const conch_endpoint *ep = conn->ep;
  int rv;
  if (ep->tls_ctx == NULL) {
    return CONCH_FILTER_SECURE;
  }
  rv = conch__tls_new(&conn->filter.tls, ep->tls_ctx, ep->tls_name);
  if (rv != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, rv,
                     "TLS setup for %s failed: %s", ep->tls_name,
                     conch_strerror(rv));
    return rv;
  }
  conn->state = CONCH_CONN_HANDSHAKE;
  return handshake(conn);
}

/* The pump's feed for a client connection: its session's, whose verdict
   is kept apart from TLS's. */
typedef struct feed_ctx {
  conch_conn *conn;
  int rv;
} feed_ctx;

/* Feeds |p| to the session; what its owner borrowed from |p| is copied
   before |p| goes (the endpoint's fed). */
static int feed(conch_conn *conn, const uint8_t *p, size_t n) {
  int rv = conn->ops->feed(conn, p, n);
  if (conn->ep->ops->fed != NULL) {
    conn->ep->ops->fed(conn->ep);
  }
  return rv;
}

static int session_feed(void *ud, const uint8_t *p, size_t n) {
  feed_ctx *fc = ud;
  fc->rv = feed(fc->conn, p, n);
  return fc->rv;
}

static size_t session_room(void *ud) {
  const feed_ctx *fc = ud;
  return fc->conn->ops->room(fc->conn);
}

int conch__filter_recv(conch_conn *conn, const uint8_t *p, size_t n) {
  feed_ctx fc;
  int rv;
  if (conn->filter.tls == NULL) {
    return feed(conn, p, n);
  }
  if (n > 0) {
    rv = conch__tls_feed(conn->filter.tls, p, n);
    if (rv != 0) {
      tls_fail(conn);
      return rv;
    }
  }
  if (conn->state == CONCH_CONN_HANDSHAKE) {
    return handshake(conn);
  }
  fc.conn = conn;
  fc.rv = 0;
  rv = conch__filter_pump(&conn->filter, conn->pbuf, conn->pcap,
                          conn->ops->room != NULL ? session_room : NULL,
                          session_feed, &fc);
  conn->tls_held = rv == CONCH_FILTER_HELD && fc.rv == 0;
  if (rv == 0 || fc.rv != 0 || conn->tls_held) {
    /* TLS wants more, the session said stop, or it has no room for what
       TLS holds (the owner feeds it later: conch__conn_pull) */
    return fc.rv != 0 ? rv : 0;
  }
  if (rv == CONCH_ERR_EOF) {
    conn->ops->on_close(conn, 0, 0);
    return rv;
  }
  tls_fail(conn);
  return rv;
}

int conch__filter_alpn_h2(const conch_conn *conn) {
  return conn->filter.tls != NULL ? conch__tls_is_h2(conn->filter.tls) : -1;
}

int conch__filter_write(conch_conn *conn, const uint8_t *p, size_t n) {
  return conch__filter_queue(&conn->filter, p, n);
}

size_t conch__filter_out_peek(conch_conn *conn, const uint8_t **p) {
  return conch__filter_pending(&conn->filter, p);
}

void conch__filter_out_consume(conch_conn *conn, size_t n) {
  conch__filter_taken(&conn->filter, n);
}

size_t conch__filter_out_size(conch_conn *conn) {
  const uint8_t *p;
  return conch__filter_pending(&conn->filter, &p);
}

void conch__filter_free(conch_conn *conn) {
  conch__filter_clear(&conn->filter);
}
