/* The connection filter: TLS (tls.c, memory BIOs) between the transport's
   bytes and the session's plaintext, or nothing.  See filter.h. */
#include <stddef.h>
#include <stdint.h>

#include <conch/conch.h>

#include "buf.h"
#include "client_int.h"
#include "conn_int.h"
#include "filter.h"
#include "session.h"
#include "tls.h"

static void tls_fail(conch_conn *conn) {
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TLS,
                   "TLS with %s: %s", conn->ep->target,
                   conch__tls_error(conn->tls));
}

/* Drives the TLS handshake after new input. */
static int handshake(conch_conn *conn) {
  int rv = conch__tls_handshake(conn->tls);
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
  rv = conch__tls_new(&conn->tls, ep->tls_ctx, ep->tls_name);
  if (rv != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, rv,
                     "TLS setup for %s failed: %s", ep->tls_name,
                     conch_strerror(rv));
    return rv;
  }
  conn->state = CONCH_CONN_HANDSHAKE;
  return handshake(conn);
}

int conch__filter_recv(conch_conn *conn, const uint8_t *p, size_t n) {
  int rv;
  if (conn->tls == NULL) {
    return conn->ops->feed(conn, p, n);
  }
  if (n > 0) {
    rv = conch__tls_feed(conn->tls, p, n);
    if (rv != 0) {
      tls_fail(conn);
      return rv;
    }
  }
  if (conn->state == CONCH_CONN_HANDSHAKE) {
    return handshake(conn);
  }
  for (;;) {
    long got = conch__tls_read(conn->tls, conn->pbuf, conn->pcap);
    if (got == CONCH_ERR_AGAIN) {
      return 0;
    }
    if (got == CONCH_ERR_EOF) {
      conn->ops->on_close(conn, 0, 0);
      return CONCH_ERR_EOF;
    }
    if (got < 0) {
      tls_fail(conn);
      return (int)got;
    }
    rv = conn->ops->feed(conn, conn->pbuf, (size_t)got);
    if (rv != 0) {
      return rv;
    }
  }
}

int conch__filter_alpn_h2(const conch_conn *conn) {
  return conn->tls != NULL ? conch__tls_is_h2(conn->tls) : -1;
}

int conch__filter_write(conch_conn *conn, const uint8_t *p, size_t n) {
  if (conn->tls != NULL) {
    return conch__tls_write(conn->tls, p, n);
  }
  return conch__buf_append(&conn->out, conn->ep->mem, p, n);
}

size_t conch__filter_out_peek(conch_conn *conn, const uint8_t **p) {
  if (conn->tls != NULL) {
    return conch__tls_pending(conn->tls, p);
  }
  *p = conch__buf_head(&conn->out);
  return conch__buf_size(&conn->out);
}

void conch__filter_out_consume(conch_conn *conn, size_t n) {
  if (conn->tls != NULL) {
    conch__tls_consume(conn->tls, n);
  } else {
    conch__buf_consume(&conn->out, n);
  }
}

size_t conch__filter_out_size(conch_conn *conn) {
  const uint8_t *p;
  return conch__filter_out_peek(conn, &p);
}

void conch__filter_free(conch_conn *conn) {
  conch__tls_free(conn->tls);
  conn->tls = NULL;
  conch__buf_free(&conn->out, conn->ep->mem);
}
