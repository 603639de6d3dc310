/* HTTP/1.1 for client connections.  The real sandbox daemon (envd) is a
   plain HTTP/1.1 server; Connect and gRPC-Web run over HTTP/1.1 as well as
   over HTTP/2.  Rather than teach call.c and protocol.c a second
   transport, a connection in HTTP/1.1 mode keeps its ordinary nghttp2
   client session (conn->h2, session.c) and wires it, in memory, to a
   private nghttp2 *server* session whose SETTINGS allow one stream at a
   time.  This is the mirror of tools/conch/serve_h1.c.  To conn.c it is a
   session like HTTP/2 (conch__h1_ops): the stream operations are the
   client session's, input, output, the transport's end and keepalive
   (none: HTTP/1.1 has no PING) are the bridge's.  No descriptors and no
   clock here either.

   - Each request stream becomes one HTTP/1.1 request on the socket: the
     request line from :method and :path, Host from :authority, then the
     other headers.  The head is held until the end of a pump: a request
     whose END_STREAM came by then (unary and server-streaming calls, up
     to the output high-water mark) goes out with Content-Length, anything
     else with Transfer-Encoding: chunked, each DATA frame a chunk.
   - The response is parsed with libhttp-parser and comes back as HTTP/2
     on the server session: HEADERS (END_STREAM on them when the response
     has no body, as an HTTP/2 server does for trailers-only responses),
     DATA as it arrives, chunked trailers as trailing HEADERS.
   - Back-pressure: the server session sends DATA only as the client
     session's stream window allows, and that window follows the
     application (call.c).  Body bytes the window does not take wait in
     |rbody|; while it holds H1_BODY_HIGH bytes the socket is not read.
   - Keep-alive: once both halves of an exchange are done and neither side
     said "Connection: close" the connection takes the next stream.
     Otherwise the server session sends GOAWAY (no new streams; the client
     session closes the connection once its stream is done).
   - When the server closes the connection before any byte of the
     response of a request on a reused connection (the keep-alive race),
     the GOAWAY names the previous stream as the last one processed: the
     client session reports the stream as refused, and call.c retries it
     once on another connection, as for HTTP/2's REFUSED_STREAM.
   - A stream reset by the client (cancel, deadline) while its exchange is
     unfinished closes the connection: HTTP/1.1 cannot abandon a request
     any other way. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <http_parser.h>

#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "filter.h"
#include "h1.h"
#include "mem_int.h"
#include "pool.h"
#include "session.h"
#include "wire.h"

#define H1_BODY_HIGH (256u << 10) /* response bytes waiting for the window */
#define H1_REQ_HIGH (1u << 20)    /* request bytes held or unsent */
#define H1_WINDOW (1 << 20)       /* the server session's receive windows */
#define H1_HEAD_SLACK (16u << 10) /* response head beyond max_header_list */
#define H1_MAX_FIELDS 1000

typedef struct h1_field {
  size_t noff, nlen, voff, vlen; /* in |hb| */
} h1_field;

typedef struct conch_h1 {
  conch_conn *conn;
  nghttp2_session *srv;
  http_parser p;
  unsigned exchanges; /* completed on this connection */
  int32_t last_id;    /* stream of the last completed exchange */
  unsigned retired : 1;
  unsigned closed : 1; /* socket gone: no more bytes either way */
  unsigned fatal : 1;  /* out of memory inside a callback */

  /* The current exchange (id 0: none). */
  int32_t id;
  /* Request. */
  char method[16];
  conch_buf path;
  conch_buf authority;
  conch_buf reqhdr; /* "name: value\r\n"... */
  conch_buf held;   /* body held with the head */
  unsigned head_pending : 1;
  unsigned head_sent : 1;
  unsigned chunked : 1;
  unsigned req_ended : 1;
  /* Response. */
  unsigned resp_started : 1; /* a byte of it arrived */
  unsigned headers_done : 1;
  unsigned skip_1xx : 1; /* an interim response is being parsed */
  unsigned resp_submitted : 1;
  unsigned resp_done : 1;
  unsigned keep_alive : 1;
  unsigned deferred : 1;
  unsigned in_value : 1; /* the last header callback was a value */
  unsigned has_trailers : 1;
  unsigned fail_pending : 1; /* fail the call once |rbody| is delivered */
  conch_code fail_code;
  char failmsg[200];
  conch_buf hb; /* header names and values */
  h1_field *fields;
  size_t nfields, fcap;
  conch_buf rbody;
} conch_h1;

static const conch_mem *h1_mem(const conch_h1 *h) {
  return h->conn->client->mem;
}

static long mem_send(nghttp2_session *s, const uint8_t **data) {
  return (long)nghttp2_session_mem_send(s, data);
}
static long mem_recv(nghttp2_session *s, const uint8_t *in, size_t n) {
  return (long)nghttp2_session_mem_recv(s, in, n);
}

/* ---- Closing ----------------------------------------------------------- */

/* No new streams on this connection: the GOAWAY says the last one the
   "server" processed, and the client session closes the connection once
   no stream is left (conn.c). */
static void retire(conch_h1 *h, int32_t last_id) {
  if (h->retired) {
    return;
  }
  h->retired = 1;
  h->conn->goaway = 1;
  if (nghttp2_submit_goaway(h->srv, NGHTTP2_FLAG_NONE, last_id,
                            NGHTTP2_NO_ERROR, NULL, 0) != 0) {
    h->fatal = 1;
  }
  conch__conn_mark_dirty(h->conn);
}

static void close_socket(conch_h1 *h) {
  h->closed = 1;
  conch__conn_close_fd(h->conn);
  conch__buf_free(&h->held, h1_mem(h));
}

/* The exchange cannot finish well: the call gets |code| once what arrived
   of the body reached it. */
static void fail_exchange(conch_h1 *h, conch_code code, const char *fmt, ...)
    CONCH_PRINTF(3, 4);
static void fail_exchange(conch_h1 *h, conch_code code, const char *fmt, ...) {
  va_list ap;
  if (h->fail_pending || h->id == 0) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(h->failmsg, sizeof(h->failmsg), fmt, ap);
  va_end(ap);
  h->fail_pending = 1;
  h->fail_code = code;
  retire(h, h->id);
  close_socket(h);
}

static void deliver_failure(conch_h1 *h) {
  conch_call *call;
  if (!h->fail_pending || h->id == 0 || conch__buf_size(&h->rbody) > 0) {
    return;
  }
  h->fail_pending = 0;
  call = nghttp2_session_get_stream_user_data(h->conn->h2, h->id);
  if (call != NULL) {
    conch__call_fail(call, h->fail_code,
                     h->fail_code == CONCH_CODE_UNAVAILABLE ? CONCH_ERR_CONNECT
                                                            : CONCH_ERR_PROTO,
                     "%s", h->failmsg);
  }
}

static void reset_exchange(conch_h1 *h) {
  h->id = 0;
  h->method[0] = '\0';
  conch__buf_reset(&h->path);
  conch__buf_reset(&h->authority);
  conch__buf_reset(&h->reqhdr);
  conch__buf_reset(&h->held);
  conch__buf_reset(&h->hb);
  conch__buf_reset(&h->rbody);
  h->nfields = 0;
  h->head_pending = h->head_sent = h->chunked = h->req_ended = 0;
  h->resp_started = h->headers_done = h->skip_1xx = h->resp_submitted = 0;
  h->resp_done = h->deferred = h->in_value = h->has_trailers = 0;
  h->fail_pending = 0;
  h->keep_alive = 1;
}

/* ---- Request: server-session callbacks --------------------------------- */

static int append(conch_h1 *h, conch_buf *b, const void *p, size_t n) {
  if (conch__buf_append(b, h1_mem(h), p, n) != 0) {
    h->fatal = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

static int write_out(conch_h1 *h, const void *p, size_t n) {
  if (h->closed) {
    return 0; /* the exchange is failing; nothing goes out any more */
  }
  if (conch__filter_write(h->conn, p, n) != 0) {
    h->fatal = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

static int write_chunk(conch_h1 *h, const uint8_t *p, size_t n) {
  char size[CONCH_CHUNK_HEAD];
  size_t len;
  if (n == 0) {
    return 0; /* an empty chunk would end the body */
  }
  len = conch__h1_chunk_head(n, size);
  if (write_out(h, size, len) != 0 || write_out(h, p, n) != 0 ||
      write_out(h, "\r\n", 2) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

static int srv_begin_headers(nghttp2_session *s, const nghttp2_frame *frame,
                             void *ud) {
  conch_h1 *h = ud;
  (void)s;
  if (frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  reset_exchange(h);
  h->id = frame->hd.stream_id;
  return 0;
}

static int srv_header(nghttp2_session *s, const nghttp2_frame *frame,
                      const uint8_t *name, size_t nlen, const uint8_t *value,
                      size_t vlen, uint8_t flags, void *ud) {
  conch_h1 *h = ud;
  (void)s;
  (void)flags;
  if (frame->hd.stream_id != h->id) {
    return 0;
  }
  if (nlen > 0 && name[0] == ':') {
    if (nlen == 7 && memcmp(name, ":method", 7) == 0) {
      if (vlen >= sizeof(h->method)) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      }
      memcpy(h->method, value, vlen);
      h->method[vlen] = '\0';
    } else if (nlen == 5 && memcmp(name, ":path", 5) == 0) {
      return append(h, &h->path, value, vlen);
    } else if (nlen == 10 && memcmp(name, ":authority", 10) == 0) {
      return append(h, &h->authority, value, vlen);
    }
    return 0;
  }
  /* Hop-by-hop fields are HTTP/1.1's own; nghttp2 refuses them in HTTP/2
     anyway.  te (gRPC's "trailers") never reaches here: gRPC is refused. */
  if ((nlen == 4 && memcmp(name, "host", 4) == 0) ||
      (nlen == 2 && memcmp(name, "te", 2) == 0) ||
      (nlen == 14 && memcmp(name, "content-length", 14) == 0)) {
    return 0;
  }
  if (append(h, &h->reqhdr, name, nlen) != 0 ||
      append(h, &h->reqhdr, ": ", 2) != 0 ||
      append(h, &h->reqhdr, value, vlen) != 0 ||
      append(h, &h->reqhdr, "\r\n", 2) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

/* Writes the request head, with the body held so far. */
static int commit_head(conch_h1 *h) {
  const conch_mem *mem = h1_mem(h);
  conch_buf head = CONCH_BUF_INIT;
  char line[64];
  size_t body = conch__buf_size(&h->held);
  int rv = 0;

  if (!h->head_pending) {
    return 0;
  }
  h->head_pending = 0;
  h->head_sent = 1;
  rv |= conch__buf_append(&head, mem, h->method, strlen(h->method));
  rv |= conch__buf_append(&head, mem, " ", 1);
  rv |= conch__buf_append(&head, mem, conch__buf_head(&h->path),
                          conch__buf_size(&h->path));
  rv |= conch__buf_append(&head, mem, " HTTP/1.1\r\nhost: ", 17);
  rv |= conch__buf_append(&head, mem, conch__buf_head(&h->authority),
                          conch__buf_size(&h->authority));
  rv |= conch__buf_append(&head, mem, "\r\n", 2);
  rv |= conch__buf_append(&head, mem, conch__buf_head(&h->reqhdr),
                          conch__buf_size(&h->reqhdr));
  if (h->req_ended) {
    /* The whole request is here. */
    if (body > 0 ||
        (strcmp(h->method, "GET") != 0 && strcmp(h->method, "HEAD") != 0)) {
      int n = snprintf(line, sizeof(line), "content-length: %zu\r\n", body);
      rv |= conch__buf_append(&head, mem, line, (size_t)n);
    }
  } else {
    h->chunked = 1;
    rv |= conch__buf_append(&head, mem, "transfer-encoding: chunked\r\n", 28);
  }
  rv |= conch__buf_append(&head, mem, "\r\n", 2);
  if (rv != 0) {
    conch__buf_free(&head, mem);
    h->fatal = 1;
    return CONCH_ERR_NOMEM;
  }
  rv = write_out(h, conch__buf_head(&head), conch__buf_size(&head));
  conch__buf_free(&head, mem);
  if (rv == 0) {
    rv = h->chunked ? write_chunk(h, conch__buf_head(&h->held), body)
                    : write_out(h, conch__buf_head(&h->held), body);
  }
  if (rv == 0 && h->chunked && h->req_ended) {
    rv = write_out(h, "0\r\n\r\n", 5);
  }
  conch__buf_reset(&h->held);
  return rv;
}

static int request_ended(conch_h1 *h) {
  h->req_ended = 1;
  if (h->head_sent && h->chunked) {
    return write_out(h, "0\r\n\r\n", 5);
  }
  return 0;
}

static int srv_frame_recv(nghttp2_session *s, const nghttp2_frame *frame,
                          void *ud) {
  conch_h1 *h = ud;
  (void)s;
  if (frame->hd.stream_id == 0 || frame->hd.stream_id != h->id) {
    return 0;
  }
  if (frame->hd.type == NGHTTP2_HEADERS &&
      frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    h->head_pending = 1;
  }
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    return request_ended(h);
  }
  return 0;
}

static int srv_data(nghttp2_session *s, uint8_t flags, int32_t id,
                    const uint8_t *data, size_t len, void *ud) {
  conch_h1 *h = ud;
  (void)s;
  (void)flags;
  if (id != h->id) {
    return 0;
  }
  if (h->head_pending) {
    return append(h, &h->held, data, len);
  }
  return h->chunked ? write_chunk(h, data, len) : write_out(h, data, len);
}

static int srv_stream_close(nghttp2_session *s, int32_t id, uint32_t err,
                            void *ud) {
  conch_h1 *h = ud;
  (void)s;
  if (id != h->id) {
    return 0;
  }
  if (err == NGHTTP2_NO_ERROR && h->req_ended && h->resp_done && h->head_sent &&
      !h->closed) {
    h->exchanges++;
    h->last_id = id;
    reset_exchange(h);
    conch__conn_mark_dirty(h->conn); /* reading may resume */
    return 0;
  }
  /* Canceled, timed out, answered before the request was sent whole, or
     failed: the connection cannot carry another exchange. */
  h->id = 0;
  retire(h, id);
  if (!h->closed) {
    close_socket(h);
  }
  return 0;
}

/* ---- Response: parser callbacks ---------------------------------------- */

static ssize_t resp_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *ud);

static int field_add(conch_h1 *h) {
  if (h->nfields == h->fcap) {
    size_t cap = h->fcap ? h->fcap * 2 : 16;
    h1_field *f;
    if (cap > H1_MAX_FIELDS) {
      return -1;
    }
    f = conch__realloc(h1_mem(h), h->fields, cap * sizeof(*f));
    if (f == NULL) {
      h->fatal = 1;
      return -1;
    }
    h->fields = f;
    h->fcap = cap;
  }
  memset(&h->fields[h->nfields], 0, sizeof(h->fields[0]));
  h->fields[h->nfields].noff = conch__buf_size(&h->hb);
  h->nfields++;
  return 0;
}

static int hb_append(conch_h1 *h, const char *at, size_t len) {
  if (conch__buf_size(&h->hb) + len >
      h->conn->client->o.max_header_list + H1_HEAD_SLACK) {
    return -1;
  }
  if (conch__buf_append(&h->hb, h1_mem(h), at, len) != 0) {
    h->fatal = 1;
    return -1;
  }
  return 0;
}

static int p_message_begin(http_parser *p) {
  conch_h1 *h = p->data;
  /* A response nobody asked for (after a complete one, or between
     requests): the connection is out of step. */
  if (h->id == 0 || !h->head_sent || h->resp_done) {
    return -1;
  }
  h->resp_started = 1;
  h->headers_done = 0;
  h->skip_1xx = 0;
  h->nfields = 0;
  h->in_value = 0;
  conch__buf_reset(&h->hb);
  return 0;
}

static int p_header_field(http_parser *p, const char *at, size_t len) {
  conch_h1 *h = p->data;
  if ((h->nfields == 0 || h->in_value) && field_add(h) != 0) {
    return -1;
  }
  h->in_value = 0;
  h->fields[h->nfields - 1].nlen += len;
  return hb_append(h, at, len);
}

static int p_header_value(http_parser *p, const char *at, size_t len) {
  conch_h1 *h = p->data;
  h1_field *f;
  if (h->nfields == 0) {
    return -1;
  }
  f = &h->fields[h->nfields - 1];
  if (!h->in_value) {
    h->in_value = 1;
    f->voff = conch__buf_size(&h->hb);
    f->vlen = 0;
  }
  f->vlen += len;
  return hb_append(h, at, len);
}

/* The fields parsed so far as an nghttp2 list after |pre| leading
   entries; names lowercased in place, values trimmed, fields HTTP/2 does
   not carry dropped.  Returns the count, or -1 (out of memory). */
static long build_nva(conch_h1 *h, nghttp2_nv **out, size_t pre) {
  uint8_t *base = conch__buf_head(&h->hb);
  nghttp2_nv *nva;
  size_t i, j, n = pre;

  nva = conch__calloc(h1_mem(h), h->nfields + pre + 1, sizeof(*nva));
  if (nva == NULL) {
    h->fatal = 1;
    return -1;
  }
  for (i = 0; i < h->nfields; i++) {
    h1_field *f = &h->fields[i];
    uint8_t *name = base + f->noff;
    uint8_t *v = base + f->voff;
    size_t vlen = f->vlen;
    for (j = 0; j < f->nlen; j++) {
      if (name[j] >= 'A' && name[j] <= 'Z') {
        name[j] = (uint8_t)(name[j] - 'A' + 'a');
      }
    }
    while (vlen > 0 && (v[0] == ' ' || v[0] == '\t')) {
      v++;
      vlen--;
    }
    while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t')) {
      vlen--;
    }
    if (f->nlen == 0 || conch__h1_hop_by_hop(name, f->nlen) ||
        !nghttp2_check_header_name(name, f->nlen) ||
        !nghttp2_check_header_value(v, vlen)) {
      continue;
    }
    if (f->nlen == 14 && memcmp(name, "content-length", 14) == 0 &&
        (h->p.flags & F_CHUNKED)) {
      continue;
    }
    nva[n].name = name;
    nva[n].namelen = f->nlen;
    nva[n].value = vlen > 0 ? v : (uint8_t *)"";
    nva[n].valuelen = vlen;
    nva[n].flags = NGHTTP2_NV_FLAG_NONE;
    n++;
  }
  *out = nva;
  return (long)n;
}

static int p_headers_complete(http_parser *p) {
  conch_h1 *h = p->data;
  nghttp2_data_provider prd;
  nghttp2_nv *nva;
  char status[8]; /* 3 digits (200-999 checked below) */
  long n;
  int rv, nobody;

  if (h->headers_done) {
    return 0; /* chunked trailers end here in some versions */
  }
  h->headers_done = 1;
  h->in_value = 0;
  if (p->status_code / 100 == 1) {
    if (p->status_code == 101) {
      return -1; /* we asked for no upgrade */
    }
    h->skip_1xx = 1; /* 100 Continue & co: the final response follows */
    return 0;
  }
  if (p->status_code < 200 || p->status_code > 999) {
    return -1;
  }
  snprintf(status, sizeof(status), "%03u", p->status_code);
  n = build_nva(h, &nva, 1);
  if (n < 0) {
    return -1;
  }
  nva[0].name = (uint8_t *)":status";
  nva[0].namelen = 7;
  nva[0].value = (uint8_t *)status;
  nva[0].valuelen = 3;
  nva[0].flags = NGHTTP2_NV_FLAG_NONE;
  /* No body at all: END_STREAM on the HEADERS, as an HTTP/2 server sends
     a trailers-only response. */
  nobody = p->status_code == 204 || p->status_code == 304 ||
           (!(p->flags & F_CHUNKED) && p->content_length == 0);
  prd.source.ptr = h;
  prd.read_callback = resp_read;
  rv = nghttp2_submit_response(h->srv, h->id, nva, (size_t)n,
                               nobody ? NULL : &prd);
  conch__free(h1_mem(h), nva);
  conch__buf_reset(&h->hb);
  h->nfields = 0;
  if (rv != 0) {
    if (nghttp2_is_fatal(rv)) {
      h->fatal = 1;
    }
    return -1;
  }
  h->resp_submitted = 1;
  return 0;
}

static int p_body(http_parser *p, const char *at, size_t len) {
  conch_h1 *h = p->data;
  if (h->skip_1xx || !h->resp_submitted) {
    return 0;
  }
  if (conch__buf_append(&h->rbody, h1_mem(h), at, len) != 0) {
    h->fatal = 1;
    return -1;
  }
  if (h->deferred) {
    h->deferred = 0;
    if (nghttp2_session_resume_data(h->srv, h->id) != 0) {
      h->fatal = 1;
      return -1;
    }
  }
  return 0;
}

static int p_message_complete(http_parser *p) {
  conch_h1 *h = p->data;
  if (h->skip_1xx) {
    h->skip_1xx = 0;
    h->headers_done = 0;
    h->resp_started = 0;
    return 0;
  }
  h->resp_done = 1;
  h->has_trailers = h->nfields > 0;
  h->keep_alive = http_should_keep_alive(p) != 0;
  if (h->deferred) {
    h->deferred = 0;
    if (nghttp2_session_resume_data(h->srv, h->id) != 0) {
      h->fatal = 1;
      return -1;
    }
  }
  if (!h->keep_alive) {
    /* The server closes after this response: no more requests here. */
    retire(h, h->id);
    if (h->req_ended) {
      close_socket(h);
    }
  }
  /* Anything after the response is a protocol error: stop here. */
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = p_message_begin,
    .on_header_field = p_header_field,
    .on_header_value = p_header_value,
    .on_headers_complete = p_headers_complete,
    .on_body = p_body,
    .on_message_complete = p_message_complete,
};

/* The response body, as the client session's window allows. */
static ssize_t resp_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *ud) {
  conch_h1 *h = ud;
  size_t n = conch__buf_size(&h->rbody);
  (void)source;

  if (id != h->id) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (n == 0) {
    if (!h->resp_done || h->fail_pending) {
      h->deferred = 1;
      return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (h->has_trailers) {
      nghttp2_nv *nva;
      long nt = build_nva(h, &nva, 0);
      int rv;
      if (nt < 0) {
        return NGHTTP2_ERR_CALLBACK_FAILURE;
      }
      if (nt > 0) {
        rv = nghttp2_submit_trailer(s, id, nva, (size_t)nt);
        if (rv == 0) {
          *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        }
      }
      conch__free(h1_mem(h), nva);
    }
    return 0;
  }
  if (n > length) {
    n = length;
  }
  memcpy(buf, conch__buf_head(&h->rbody), n);
  if (conch__buf_size(&h->rbody) >= H1_BODY_HIGH &&
      conch__buf_size(&h->rbody) - n < H1_BODY_HIGH) {
    conch__conn_mark_dirty(h->conn); /* the socket may be read again */
  }
  conch__buf_consume(&h->rbody, n);
  return (ssize_t)n;
}

/* ---- Socket input ------------------------------------------------------ */

static const char *peer(const conch_h1 *h, char *buf, size_t len) {
  snprintf(buf, len, "%s", h->conn->client->target);
  return buf;
}

static void parse(conch_h1 *h, const uint8_t *p, size_t n) {
  char who[128];
  size_t done;
  enum http_errno e;

  if (h->closed) {
    return;
  }
  done = http_parser_execute(&h->p, &parser_settings, (const char *)p, n);
  e = HTTP_PARSER_ERRNO(&h->p);
  if (h->fatal) {
    return;
  }
  if (e == HPE_PAUSED) {
    /* After a complete response: bytes beyond it were not asked for. */
    http_parser_pause(&h->p, 0);
    if (done < n || n == 0) {
      if (done < n) {
        retire(h, h->id != 0 ? h->id : h->last_id);
        close_socket(h);
      }
    }
    return;
  }
  if (e == HPE_OK && done == n) {
    return;
  }
  if (h->id != 0 && h->resp_started && !h->resp_done) {
    fail_exchange(h, CONCH_CODE_INTERNAL,
                  "malformed HTTP/1.1 response from %s: %s",
                  peer(h, who, sizeof(who)), http_errno_description(e));
    if (e == HPE_CB_header_field || e == HPE_CB_header_value) {
      h->fail_code = CONCH_CODE_RESOURCE_EXHAUSTED;
      snprintf(h->failmsg, sizeof(h->failmsg),
               "HTTP/1.1 response headers from %s over the %u-byte limit", who,
               (unsigned)h->conn->client->o.max_header_list);
    }
    return;
  }
  /* Unsolicited or undecodable bytes between exchanges. */
  retire(h, h->id != 0 && h->resp_done ? h->id : h->last_id);
  close_socket(h);
}

static void h1_recv(conch_conn *conn, const uint8_t *p, size_t n) {
  conch_h1 *h = conn->h1;
  if (n == 0) {
    return;
  }
  parse(h, p, n);
  if (h->fatal) {
    conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory in the HTTP/1.1 bridge");
    return;
  }
  conch__conn_mark_dirty(conn);
}

static void h1_on_close(conch_conn *conn, const char *why) {
  conch_h1 *h = conn->h1;
  char who[128];

  if (h->closed) {
    return;
  }
  peer(h, who, sizeof(who));
  if (h->id == 0 || !h->head_sent) {
    /* Idle: the server let the connection go. */
    retire(h, h->last_id);
    close_socket(h);
  } else if (!h->resp_started) {
    if (h->exchanges > 0) {
      /* The keep-alive race: the server closed the connection as we
         reused it.  Refused: call.c sends it again, once, elsewhere. */
      retire(h, h->last_id);
      close_socket(h);
    } else {
      fail_exchange(h, CONCH_CODE_UNAVAILABLE,
                    "connection to %s closed before any response (%s)", who,
                    why);
    }
  } else if (!h->resp_done) {
    /* A body that runs to the end of the connection ends here. */
    if (!h->headers_done || h->p.http_errno != HPE_OK) {
      fail_exchange(h, CONCH_CODE_UNAVAILABLE,
                    "connection to %s closed in the response headers (%s)", who,
                    why);
    } else {
      http_parser_execute(&h->p, &parser_settings, NULL, 0);
      if (!h->resp_done) {
        fail_exchange(h, CONCH_CODE_INTERNAL,
                      "HTTP/1.1 response from %s truncated: connection %s "
                      "inside the body",
                      who, why);
      }
    }
  }
  if (!h->closed) {
    retire(h, h->id != 0 ? h->id : h->last_id);
    close_socket(h);
  }
  if (h->fatal) {
    conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory in the HTTP/1.1 bridge");
    return;
  }
  conch__conn_mark_dirty(conn);
}

static int h1_want_read(const conch_conn *conn) {
  const conch_h1 *h = conn->h1;
  return !h->closed && conch__buf_size(&h->rbody) < H1_BODY_HIGH;
}

/* ---- Pump -------------------------------------------------------------- */

static int h1_frame(conch_conn *conn, const uint8_t *hd, const uint8_t *data,
                    size_t len) {
  conch_h1 *h = conn->h1;
  if (mem_recv(h->srv, hd, 9) != 9 ||
      (len > 0 && mem_recv(h->srv, data, len) != (long)len) || h->fatal) {
    return -1;
  }
  return 0;
}

static int session_fail(conch_conn *conn, long rv, const char *what) {
  if (conn->state != CONCH_CONN_DEAD) {
    conch__conn_fail(
        conn,
        rv == NGHTTP2_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                : CONCH_CODE_INTERNAL,
        rv == NGHTTP2_ERR_NOMEM ? CONCH_ERR_NOMEM : CONCH_ERR_SESSION,
        "HTTP/1.1 bridge: %s: %s", what, nghttp2_strerror((int)rv));
  }
  return -1;
}

static int h1_pump(conch_conn *conn) {
  conch_h1 *h = conn->h1;
  int round;

  for (round = 0; round < 64; round++) {
    int moved = 0;
    /* Requests: client session -> server session -> socket. */
    while (conch__filter_out_size(conn) + conch__buf_size(&h->held) <
           H1_REQ_HIGH) {
      const uint8_t *data;
      long n = mem_send(conn->h2, &data), rv;
      if (n < 0) {
        return session_fail(conn, n, "client session");
      }
      if (n == 0) {
        break;
      }
      moved = 1;
      rv = mem_recv(h->srv, data, (size_t)n);
      if (h->fatal) {
        return session_fail(conn, NGHTTP2_ERR_NOMEM, "request");
      }
      if (rv < 0) {
        return session_fail(conn, rv, "request");
      }
    }
    if (commit_head(h) != 0 || h->fatal) {
      return session_fail(conn, NGHTTP2_ERR_NOMEM, "request head");
    }
    /* Responses and control frames: server session -> client session. */
    for (;;) {
      const uint8_t *data;
      long n = mem_send(h->srv, &data), rv;
      if (h->fatal) {
        return session_fail(conn, NGHTTP2_ERR_NOMEM, "response");
      }
      if (n < 0) {
        return session_fail(conn, n, "server session");
      }
      if (n == 0) {
        break;
      }
      moved = 1;
      rv = mem_recv(conn->h2, data, (size_t)n);
      if (conn->state == CONCH_CONN_DEAD) {
        return -1;
      }
      if (rv < 0) {
        return session_fail(conn, rv, "response");
      }
    }
    deliver_failure(h);
    if (conn->state == CONCH_CONN_DEAD) {
      return -1;
    }
    if (!moved) {
      break;
    }
  }
  return 0;
}

/* ---- Setup ------------------------------------------------------------- */

static int h1_new(conch_conn *conn) {
  const conch_mem *cm = conn->client->mem;
  nghttp2_session_callbacks *cbs;
  nghttp2_option *opt;
  nghttp2_mem mem;
  nghttp2_settings_entry iv[2];
  conch_h1 *h;
  int rv;

  h = conch__calloc(cm, 1, sizeof(*h));
  if (h == NULL) {
    return CONCH_ERR_NOMEM;
  }
  h->conn = conn;
  reset_exchange(h);
  http_parser_init(&h->p, HTTP_RESPONSE);
  h->p.data = h;

  mem.mem_user_data = cm->user_data;
  mem.malloc = cm->malloc;
  mem.free = cm->free;
  mem.calloc = cm->calloc;
  mem.realloc = cm->realloc;
  if (nghttp2_session_callbacks_new(&cbs) != 0) {
    conch__free(cm, h);
    return CONCH_ERR_NOMEM;
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs,
                                                          srv_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, srv_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, srv_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, srv_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, srv_stream_close);
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cbs);
    conch__free(cm, h);
    return CONCH_ERR_NOMEM;
  }
  /* Response heads are as large as the client accepts. */
  nghttp2_option_set_max_send_header_block_length(
      opt, (size_t)conn->client->o.max_header_list + H1_HEAD_SLACK);
  rv = nghttp2_session_server_new3(&h->srv, cbs, h, opt, &mem);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) {
    conch__free(cm, h);
    return CONCH_ERR_NOMEM;
  }
  iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
  iv[0].value = 1;
  iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
  iv[1].value = H1_WINDOW;
  rv = nghttp2_submit_settings(h->srv, NGHTTP2_FLAG_NONE, iv, 2);
  if (rv == 0) {
    rv = nghttp2_session_set_local_window_size(h->srv, NGHTTP2_FLAG_NONE, 0,
                                               H1_WINDOW);
  }
  if (rv != 0) {
    nghttp2_session_del(h->srv);
    conch__free(cm, h);
    return CONCH_ERR_NOMEM;
  }
  conn->h1 = h;
  return 0;
}

static void h1_free(conch_h1 *h) {
  const conch_mem *mem;
  if (h == NULL) {
    return;
  }
  mem = h1_mem(h);
  nghttp2_session_del(h->srv);
  conch__buf_free(&h->path, mem);
  conch__buf_free(&h->authority, mem);
  conch__buf_free(&h->reqhdr, mem);
  conch__buf_free(&h->held, mem);
  conch__buf_free(&h->hb, mem);
  conch__buf_free(&h->rbody, mem);
  conch__free(mem, h->fields);
  conch__free(mem, h);
}

/* ---- The session table -------------------------------------------------- */

static int h1_start(conch_conn *conn) {
  conch_client *c = conn->client;
  int rv = conch__h2_start(conn);
  if (rv == 0) {
    rv = h1_new(conn);
  }
  if (rv != 0) {
    return rv;
  }
  if (!c->h1) {
    c->h1 = 1;
    conch__pool_rehome_queued(conn);
  }
  return 0;
}

static void h1_session_free(conch_conn *conn) {
  h1_free(conn->h1);
  conn->h1 = NULL;
  conch__h2_free(conn);
}

static int h1_feed(conch_conn *conn, const uint8_t *p, size_t n) {
  if (n > 0) {
    conn->seen_bytes = 1;
  }
  h1_recv(conn, p, n);
  return conn->state == CONCH_CONN_DEAD ? CONCH_ERR_CONNECT : 0;
}

static void h1_on_end(conch_conn *conn, int err, int writing) {
  (void)writing;
  h1_on_close(conn, err != 0 ? strerror(err) : "closed by the server");
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

const conch_session_ops conch__h1_ops = {
    .name = "HTTP/1.1",
    .start = h1_start,
    .free = h1_session_free,
    .submit = conch__h2_submit,
    .resume = conch__h2_resume,
    .consume = conch__h2_consume,
    .reset = conch__h2_reset,
    .feed = h1_feed,
    .want_read = h1_want_read,
    .on_close = h1_on_end,
    .send = h1_pump,
    .want_write = conch__h2_want_write,
    .over = conch__h2_over,
    .keepalive = h1_keepalive,
    .ping = h1_ping,
    .data_frame = h1_frame,
};
