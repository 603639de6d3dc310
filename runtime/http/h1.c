/* HTTP/1.1 for client connections (conch__h1_ops, session.h).  The real
   sandbox daemon (envd) is a plain HTTP/1.1 server; Connect and gRPC-Web
   run over HTTP/1.1 as well as over HTTP/2.  This session speaks HTTP/1.1
   itself: calls go out as requests written from the protocol layer's
   header list (protocol.c) and their request bytes (call.c), responses
   are read by the HTTP/1.1 front end (h1parse.c) and handed to the call
   as they arrive, the body without a copy.  No nghttp2 session, no
   descriptors, no clock.

   - One exchange at a time (capacity 1; the pool opens up to
     CONCH_H1_POOL connections), no pipelining.
   - The request: "METHOD path HTTP/1.1", Host from :authority, then the
     other headers.  A request whose whole body is at hand when it is
     submitted (unary and server-streaming calls, client streams closed
     by then) goes out with Content-Length, anything else with
     Transfer-Encoding: chunked, each piece of the call's output a chunk.
   - The response: the status and fields become the call's response
     headers, the body its data, chunked trailers its trailers; a response
     without a body (204, 304, Content-Length: 0) ends on its head, as an
     HTTP/2 trailers-only response does.
   - Back-pressure: body bytes handed to the call and not yet consumed by
     the application (call.c's window credit) are counted; while they
     reach the client's stream window the socket is not read.
   - Keep-alive: once both halves of an exchange are done and neither side
     said "Connection: close" the connection takes the next call.
     Otherwise it is retired: no new calls, queued ones go elsewhere, and
     conn.c closes it once its exchange is over.
   - When the server closes a reused connection before any byte of the
     response (the keep-alive race), the call is refused
     (CONCH_STREAM_REFUSED): call.c sends it again, once, on another
     connection, as for HTTP/2's REFUSED_STREAM.
   - A call that ends (cancel, deadline, an error) while its exchange is
     unfinished closes the connection: HTTP/1.1 cannot abandon a request
     any other way.
   - Liveness: HTTP/1.1 has no PING; a dead peer is found by the call's
     deadline, or by the transport's error. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <nghttp2/nghttp2.h> /* nghttp2_nv: the protocol layer's header list */

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "filter.h"
#include "h1.h"
#include "h1parse.h"
#include "list.h"
#include "mem_int.h"
#include "pool.h"
#include "protocol.h"
#include "session.h"
#include "wire.h"

#define H1_HEAD_SLACK (16u << 10) /* response head beyond max_header_list */
#define H1_NVA 64                 /* request header entries */

typedef struct conch_h1 {
  conch_conn *conn;
  conch_h1p parser;
  conch_buf head;     /* the request head being written */
  conch_buf store;    /* strings of the request header list */
  unsigned exchanges; /* completed on this connection */
  int32_t next_id;    /* stream ids handed to calls, as HTTP/2 numbers them */
  unsigned retired : 1;
  unsigned closed : 1; /* socket gone: no more bytes either way */

  /* The current exchange (call NULL: none). */
  conch_call *call;
  size_t unconsumed; /* body bytes the call has not credited back */
  unsigned head_sent : 1;
  unsigned chunked : 1;
  unsigned req_ended : 1;
  unsigned resp_done : 1;
  unsigned keep_alive : 1;
} conch_h1;

static conch_h1 *h1_of(const conch_conn *conn) { return conn->h1; }

static const conch_mem *h1_mem(const conch_h1 *h) {
  return conch__conn_client(h->conn)->mem;
}

static int dead(const conch_h1 *h) { return h->conn->state == CONCH_CONN_DEAD; }

/* ---- Closing ----------------------------------------------------------- */

/* No new calls on this connection: queued ones go to another, and conn.c
   closes this one once its exchange is over (h1_over). */
static void retire(conch_h1 *h) {
  conch_conn *conn = h->conn;
  if (h->retired) {
    return;
  }
  h->retired = 1;
  conn->goaway = 1;
  while (!conch__list_empty(&conn->queue)) {
    conch__pool_requeue(
        CONCH_CONTAINER(conn->queue.next, conch_call, queue_link));
  }
  conch__conn_mark_dirty(conn);
}

static void close_socket(conch_h1 *h) {
  conch_conn *conn = h->conn;
  if (h->closed) {
    return;
  }
  retire(h);
  h->closed = 1;
  conch__conn_close_fd(conn);
  /* What was not written will never be. */
  conch__filter_out_consume(conn, conch__filter_out_size(conn));
}

static void exchange_reset(conch_h1 *h) {
  h->call = NULL;
  h->unconsumed = 0;
  h->head_sent = h->chunked = h->req_ended = h->resp_done = 0;
  h->keep_alive = 1;
}

/* The exchange is over: the call's stream closes with |err|
   (CONCH_STREAM_*).  The connection closes unless it may carry another. */
static void exchange_end(conch_h1 *h, uint32_t err) {
  conch_call *call = h->call;
  int reusable = err == CONCH_STREAM_NO_ERROR && h->keep_alive &&
                 h->resp_done && h->req_ended && !h->retired && !h->closed;
  if (call == NULL) {
    return;
  }
  if (reusable) {
    h->exchanges++;
  } else {
    close_socket(h);
  }
  exchange_reset(h);
  conch__conn_stream_closed(h->conn, call, err);
  conch__conn_mark_dirty(h->conn); /* the next call; reading resumes */
}

/* The exchange cannot finish well: its call ends with |code| and the
   connection closes. */
static void fail_exchange(conch_h1 *h, conch_code code, int err,
                          const char *fmt, ...) CONCH_PRINTF(4, 5);
static void fail_exchange(conch_h1 *h, conch_code code, int err,
                          const char *fmt, ...) {
  conch_call *call = h->call;
  char msg[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  close_socket(h);
  if (call != NULL) {
    conch__call_fail(call, code, err, "%s", msg);
    if (!dead(h) && h->call == call) {
      exchange_end(h, CONCH_STREAM_CANCEL);
    }
  }
}

/* When both halves are done. */
static void check_done(conch_h1 *h) {
  if (h->call != NULL && h->resp_done && h->req_ended && !dead(h)) {
    exchange_end(h, CONCH_STREAM_NO_ERROR);
  }
}

/* ---- Request ----------------------------------------------------------- */

static int out(conch_h1 *h, const void *p, size_t n) {
  if (conch__filter_write(h->conn, p, n) != 0) {
    conch__conn_fail(h->conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory writing to the connection");
    return -1;
  }
  return 0;
}

static int is(const nghttp2_nv *nv, const char *name, size_t len) {
  return nv->namelen == len && memcmp(nv->name, name, len) == 0;
}

/* Writes the head of |call|'s request from the protocol layer's header
   list.  Returns 0, or -1 when the call failed (its headers could not be
   built) or the connection did (out of memory). */
static int write_head(conch_h1 *h, conch_call *call) {
  const conch_mem *mem = h1_mem(h);
  nghttp2_nv nva[H1_NVA];
  const nghttp2_nv *method = NULL, *path = NULL, *authority = NULL;
  conch_buf *b = &h->head;
  size_t body = conch__call_send_pending(call);
  long n, i;
  int rv = 0;

  conch__buf_reset(&h->store);
  n = conch__proto_request_headers(call, nva, H1_NVA, &h->store);
  if (n < 0) {
    return -1; /* the call failed, saying why */
  }
  for (i = 0; i < n; i++) {
    if (nva[i].namelen > 0 && nva[i].name[0] == ':') {
      if (is(&nva[i], ":method", 7)) {
        method = &nva[i];
      } else if (is(&nva[i], ":path", 5)) {
        path = &nva[i];
      } else if (is(&nva[i], ":authority", 10)) {
        authority = &nva[i];
      }
    }
  }
  if (method == NULL || path == NULL || authority == NULL) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_SESSION,
                     "request headers without :method, :path or :authority");
    return -1;
  }
  conch__buf_reset(b);
  rv |= conch__buf_append(b, mem, method->value, method->valuelen);
  rv |= conch__buf_append(b, mem, " ", 1);
  rv |= conch__buf_append(b, mem, path->value, path->valuelen);
  rv |= conch__buf_append(b, mem, " HTTP/1.1\r\nhost: ", 17);
  rv |= conch__buf_append(b, mem, authority->value, authority->valuelen);
  rv |= conch__buf_append(b, mem, "\r\n", 2);
  for (i = 0; i < n; i++) {
    const nghttp2_nv *nv = &nva[i];
    /* Pseudo-headers are in the request line; Host, TE and the framing
       are HTTP/1.1's own. */
    if ((nv->namelen > 0 && nv->name[0] == ':') || is(nv, "host", 4) ||
        is(nv, "te", 2) || is(nv, "content-length", 14)) {
      continue;
    }
    rv |= conch__buf_append(b, mem, nv->name, nv->namelen);
    rv |= conch__buf_append(b, mem, ": ", 2);
    rv |= conch__buf_append(b, mem, nv->value, nv->valuelen);
    rv |= conch__buf_append(b, mem, "\r\n", 2);
  }
  if (call->get) {
    h->req_ended = 1; /* the request is in the URL */
  } else if (call->send_closed) {
    /* The whole body is here. */
    char line[48];
    int k = snprintf(line, sizeof(line), "content-length: %zu\r\n", body);
    rv |= conch__buf_append(b, mem, line, (size_t)k);
  } else {
    h->chunked = 1;
    rv |= conch__buf_append(b, mem, "transfer-encoding: chunked\r\n", 28);
  }
  rv |= conch__buf_append(b, mem, "\r\n", 2);
  if (rv != 0) {
    conch__conn_fail(h->conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory building an HTTP/1.1 request head");
    return -1;
  }
  h->head_sent = 1;
  return out(h, conch__buf_head(b), conch__buf_size(b));
}

/* Writes what the call has to send, as the output buffer takes it. */
static int write_body(conch_h1 *h) {
  conch_call *call = h->call;
  while (!h->req_ended &&
         conch__filter_out_size(h->conn) < CONCH_OUT_HIGH_WATER) {
    size_t n = conch__call_send_pending(call);
    if (n == 0) {
      if (!call->send_closed) {
        break;
      }
      h->req_ended = 1;
      if (h->chunked && out(h, CONCH_CHUNK_LAST, 5) != 0) {
        return -1;
      }
      break;
    }
    if (h->chunked) {
      char size[CONCH_CHUNK_HEAD];
      size_t len = conch__h1_chunk_head(n, size);
      if (out(h, size, len) != 0 ||
          out(h, conch__call_send_head(call), n) != 0 ||
          out(h, "\r\n", 2) != 0) {
        return -1;
      }
    } else if (out(h, conch__call_send_head(call), n) != 0) {
      return -1;
    }
    conch__call_sent(call, n);
  }
  return 0;
}

/* ---- Response: the front end's callbacks ------------------------------- */

static const char *target(const conch_h1 *h) { return conch__conn_client(h->conn)->target; }

static int on_head(void *ud, const conch_h1_head *head) {
  conch_h1 *h = ud;
  conch_call *call = h->call;
  char status[4];
  size_t i;

  if (call == NULL || h->resp_done) {
    return -1; /* a response nobody asked for: out of step */
  }
  if (call->finished) {
    return 0;
  }
  status[0] = (char)('0' + head->status / 100);
  status[1] = (char)('0' + head->status / 10 % 10);
  status[2] = (char)('0' + head->status % 10);
  status[3] = '\0';
  conch__call_on_header(call, NULL, 0, NULL, 0, -1);
  if (conch__call_on_header(call, (const uint8_t *)":status", 7,
                            (const uint8_t *)status, 3, 0) != 0) {
    return dead(h) ? -1 : 0;
  }
  for (i = 0; i < head->nfields; i++) {
    const conch_h1_field *f = &head->fields[i];
    if (conch__call_on_header(call, f->name, f->nlen, f->value, f->vlen, 0) !=
        0) {
      return dead(h) ? -1 : 0; /* the call failed (too large) */
    }
  }
  /* No body: the response ends on its head (trailers-only in HTTP/2). */
  conch__call_on_headers_done(call, !head->body);
  return dead(h) ? -1 : 0;
}

static int on_body(void *ud, const uint8_t *p, size_t n) {
  conch_h1 *h = ud;
  conch_call *call = h->call;
  if (call == NULL || call->finished) {
    return h->closed ? -1 : 0;
  }
  h->unconsumed += n;
  conch__call_on_data(call, p, n);
  return dead(h) ? -1 : 0;
}

static int on_end(void *ud, const conch_h1_field *trailers, size_t nt,
                  int keep_alive) {
  conch_h1 *h = ud;
  conch_call *call = h->call;
  size_t i;

  if (call == NULL) {
    return -1;
  }
  h->resp_done = 1;
  h->keep_alive = keep_alive != 0;
  if (!h->keep_alive) {
    retire(h); /* the server closes after this response */
  }
  if (call->finished) {
    return 0;
  }
  if (nt > 0) {
    conch__call_on_header(call, NULL, 0, NULL, 0, -1);
    for (i = 0; i < nt; i++) {
      if (conch__call_on_header(call, trailers[i].name, trailers[i].nlen,
                                trailers[i].value, trailers[i].vlen, 1) != 0) {
        return dead(h) ? -1 : 0;
      }
    }
    conch__call_on_headers_done(call, 1);
  } else {
    conch__call_on_remote_end(call);
  }
  return dead(h) ? -1 : 0;
}

static const conch_h1p_cbs parser_cbs = {on_head, on_body, on_end};

/* ---- The session table -------------------------------------------------- */

static int h1_start(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_h1 *h = conch__calloc(c->mem, 1, sizeof(*h));
  if (h == NULL) {
    return CONCH_ERR_NOMEM;
  }
  h->conn = conn;
  h->next_id = 1;
  exchange_reset(h);
  conch__h1p_init(&h->parser, 0, c->mem,
                  (size_t)c->o.max_header_list + H1_HEAD_SLACK, &parser_cbs, h);
  conn->h1 = h;
  if (!c->h1) {
    c->h1 = 1;
    conch__pool_rehome_queued(conn);
  }
  return 0;
}

static void h1_free(conch_conn *conn) {
  conch_h1 *h = h1_of(conn);
  if (h == NULL) {
    return;
  }
  conch__h1p_free(&h->parser);
  conch__buf_free(&h->head, h1_mem(h));
  conch__buf_free(&h->store, h1_mem(h));
  conch__free(h1_mem(h), h);
  conn->h1 = NULL;
}

static void h1_submit(conch_conn *conn, int64_t now) {
  conch_h1 *h = h1_of(conn);
  conch_link *l, *next;

  if (conn->state != CONCH_CONN_READY || conn->goaway || h->retired ||
      h->closed || h->call != NULL) {
    return;
  }
  for (l = conn->queue.next; l != &conn->queue; l = next) {
    conch_call *call = CONCH_CONTAINER(l, conch_call, queue_link);
    next = l->next;
    if (!conch__call_ready_to_submit(call)) {
      continue; /* a Connect unary call waits for its message */
    }
    conch__list_remove(&call->queue_link);
    exchange_reset(h);
    if (write_head(h, call) != 0) {
      exchange_reset(h);
      if (dead(h)) {
        return;
      }
      continue; /* that call failed; the next may go */
    }
    h->call = call;
    call->stream_id = h->next_id;
    h->next_id = h->next_id < 0x7ffffffd ? h->next_id + 2 : 1;
    call->submitted = 1;
    call->submitted_at = now;
    call->stream_live = 1;
    conn->active++;
    conch__conn_mark_dirty(conn);
    return;
  }
}

static void h1_resume(conch_conn *conn, conch_call *call) {
  (void)call;
  conch__conn_mark_dirty(conn);
}

static void h1_consume(conch_conn *conn, conch_call *call, size_t n) {
  conch_h1 *h = h1_of(conn);
  size_t win = conch__conn_client(conn)->o.stream_window;
  int was_full;
  if (h == NULL || call != h->call) {
    return;
  }
  was_full = h->unconsumed >= win;
  h->unconsumed -= n < h->unconsumed ? n : h->unconsumed;
  if (was_full && h->unconsumed < win) {
    conch__conn_mark_dirty(conn); /* the socket may be read again */
  }
}

/* The call ended while its exchange may be unfinished. */
static void h1_reset(conch_conn *conn, conch_call *call, uint32_t err) {
  conch_h1 *h = h1_of(conn);
  if (h == NULL || call != h->call) {
    return;
  }
  if (h->resp_done && h->req_ended) {
    check_done(h);
    return;
  }
  exchange_end(h, err); /* closes the connection */
}

static int h1_feed(conch_conn *conn, const uint8_t *p, size_t n) {
  conch_h1 *h = h1_of(conn);
  size_t used;
  conch_h1p_result r;

  if (n > 0) {
    conn->seen_bytes = 1;
  }
  while (n > 0 && !h->closed && !dead(h)) {
    r = conch__h1p_feed(&h->parser, p, n, &used);
    if (dead(h)) {
      break;
    }
    p += used;
    n -= used;
    switch (r) {
    case CONCH_H1P_MORE:
      n = 0;
      break;
    case CONCH_H1P_DONE:
      check_done(h);
      if (n > 0) {
        /* Bytes beyond the response: nothing was asked for them. */
        close_socket(h);
      }
      break;
    case CONCH_H1P_STOP:
      if (h->call == NULL || h->resp_done) {
        close_socket(h); /* a response out of step */
      }
      n = 0;
      break;
    case CONCH_H1P_LIMIT:
      fail_exchange(h, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_LIMIT,
                    "HTTP/1.1 response headers from %s over the %u-byte limit",
                    target(h), (unsigned)conch__conn_client(conn)->o.max_header_list);
      break;
    case CONCH_H1P_NOMEM:
      conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                       "out of memory reading an HTTP/1.1 response");
      break;
    case CONCH_H1P_BAD:
      if (h->call != NULL && !h->resp_done) {
        fail_exchange(h, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                      "malformed HTTP/1.1 response from %s: %s", target(h),
                      conch__h1p_error(&h->parser));
      } else {
        close_socket(h); /* undecodable bytes between exchanges */
      }
      break;
    }
  }
  if (dead(h)) {
    return CONCH_ERR_CONNECT;
  }
  conch__conn_mark_dirty(conn);
  return 0;
}

static int h1_want_read(const conch_conn *conn) {
  const conch_h1 *h = h1_of(conn);
  return !h->closed && h->unconsumed < conch__conn_client(conn)->o.stream_window;
}

static void h1_on_close(conch_conn *conn, int err, int writing) {
  conch_h1 *h = h1_of(conn);
  const char *why = err != 0 ? strerror(err) : "closed by the server";
  size_t used;
  (void)writing;

  if (h->closed) {
    return;
  }
  if (h->call == NULL || !h->head_sent) {
    close_socket(h); /* idle: the server let the connection go */
  } else if (!conch__h1p_in_message(&h->parser) && !h->resp_done) {
    if (h->exchanges > 0) {
      /* The keep-alive race: the server closed the connection as we
         reused it.  Refused: call.c sends it again, once, elsewhere. */
      close_socket(h);
      exchange_end(h, CONCH_STREAM_REFUSED);
    } else {
      fail_exchange(h, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                    "connection to %s closed before any response (%s)",
                    target(h), why);
    }
  } else if (!h->resp_done) {
    if (!conch__h1p_head_done(&h->parser)) {
      fail_exchange(h, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                    "connection to %s closed in the response headers (%s)",
                    target(h), why);
    } else {
      /* A body that runs to the end of the connection ends here. */
      if (conch__h1p_feed(&h->parser, NULL, 0, &used) != CONCH_H1P_DONE &&
          !dead(h) && h->call != NULL) {
        fail_exchange(h, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                      "HTTP/1.1 response from %s truncated: connection %s "
                      "inside the body",
                      target(h), why);
      }
    }
  }
  if (dead(h)) {
    return;
  }
  check_done(h);
  close_socket(h);
  if (h->call != NULL) {
    /* The response is complete but the request was not sent whole. */
    exchange_end(h, CONCH_STREAM_CANCEL);
  }
  conch__conn_mark_dirty(conn);
}

static int h1_send(conch_conn *conn) {
  conch_h1 *h = h1_of(conn);
  if (h->call != NULL && h->head_sent && !h->closed && write_body(h) != 0) {
    return -1;
  }
  if (dead(h)) {
    return -1;
  }
  check_done(h);
  return dead(h) ? -1 : 0;
}

static int h1_want_write(const conch_conn *conn) {
  const conch_h1 *h = h1_of(conn);
  return h != NULL && h->call != NULL && !h->closed && !h->req_ended &&
         (conch__call_send_pending(h->call) > 0 || h->call->send_closed);
}

static int h1_over(const conch_conn *conn) {
  const conch_h1 *h = h1_of(conn);
  return h != NULL && (h->retired || h->closed) && h->call == NULL;
}

static conch_keepalive h1_keepalive(const conch_conn *conn, int64_t now,
                                    int64_t *next) {
  (void)conn;
  (void)now;
  (void)next;
  return CONCH_KA_OFF; /* HTTP/1.1 has no PING */
}

static int h1_ping(conch_conn *conn) {
  (void)conn;
  return CONCH_ERR_STATE;
}

static long h1_capacity(const conch_conn *conn) {
  (void)conn;
  return 1; /* one exchange at a time */
}

static int h1_sent_all(const conch_conn *conn, const conch_call *call) {
  const conch_h1 *h = h1_of(conn);
  return h == NULL || call != h->call || h->req_ended;
}

static void h1_forget(conch_conn *conn, conch_call *call) {
  conch_h1 *h = h1_of(conn);
  if (h != NULL && h->call == call) {
    h->call = NULL; /* the client is being freed */
  }
}

const conch_session_ops conch__h1_ops = {
    .name = "HTTP/1.1",
    .start = h1_start,
    .free = h1_free,
    .submit = h1_submit,
    .resume = h1_resume,
    .consume = h1_consume,
    .reset = h1_reset,
    .feed = h1_feed,
    .want_read = h1_want_read,
    .on_close = h1_on_close,
    .send = h1_send,
    .want_write = h1_want_write,
    .over = h1_over,
    .keepalive = h1_keepalive,
    .ping = h1_ping,
    .capacity = h1_capacity,
    .sent_all = h1_sent_all,
    .forget = h1_forget,
};
