/* HTTP/1.1 for the server core.  Rather than teach server_rpc.c a second
   transport, each HTTP/1.1 connection drives an in-memory nghttp2 *client*
   session wired to the connection's ordinary server session (conn->h2):
   an HTTP/1.1 request becomes an HTTP/2 request on it, and the HTTP/2
   response comes back out as HTTP/1.1.  Bytes pass between the two
   sessions with mem_send/mem_recv; no socket sits in between, and this
   file reads neither descriptors nor the clock (server.c moves the bytes,
   through TLS when the connection has it, and writes the Date).

   - Requests are read with libhttp-parser, one at a time: once a request
     is complete the parser pauses until its response is done, so a
     pipelined request waits its turn in a bounded read-ahead buffer
     (H1_IN_MAX) and the connection is not read further.
   - A request body is the data source of its HTTP/2 request, fed as it
     arrives (Content-Length or chunked), and the parser stops while
     H1_BODY_MAX bytes of it wait for the server's flow-control window: a
     handler that pauses its call stalls an HTTP/1.1 client just as it
     stalls an HTTP/2 one.
   - The response head is held until the end of a pump: a response that
     ended by then (unary calls, errors) goes out with Content-Length,
     anything else (streams) with Transfer-Encoding: chunked, each DATA
     frame a chunk, HTTP/2 trailers (gRPC's) as chunked trailers.
   - The client session does not update its windows by itself: DATA is
     given back (nghttp2_session_consume) only once the bytes went to the
     connection's output, which server.c fills only while the transport
     takes them, so a slow reader slows the call exactly as over HTTP/2,
     and a connection holds at most H1_WINDOW bytes of response.
   - Errors the HTTP/1.1 layer finds (malformed 400, method 405, URL 414,
     headers 431, version 505, expectation 417) are answered here, and
     the connection closes: the write side is shut, and what the client
     still sends is read and dropped for a moment (a "lingering close",
     server.c, so that the client reads the answer instead of a reset). */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "mem_int.h"
#include "server_int.h"
#include "wire.h"

#define H1_IN_MAX (16 * 1024)   /* bytes read ahead of the parser */
#define H1_BODY_MAX (64 * 1024) /* request body waiting for the window */
#define H1_HEAD_MAX (32 * 1024) /* request line and headers */
#define H1_URL_MAX (8 * 1024)
#define H1_MAX_FIELDS 100
#define H1_WINDOW (256 * 1024)       /* response bytes in flight */
#define H1_DISCARD_MAX (1024 * 1024) /* body read after an early answer */
#define H1_DISCARD_CHUNK (16 * 1024) /* read while closing */
#define H1_OUT_HIGH (64 * 1024)      /* connection output before we stop */
#define H1_PUMP_MAX 256              /* rounds per loop turn */
#define H1_BUF_KEEP (64 * 1024)      /* bigger buffers are freed */

typedef struct h1_field {
  size_t noff; /* in |hb| */
  size_t nlen;
  size_t voff;
  size_t vlen;
} h1_field;

struct srv_h1 {
  srv_conn *c;
  http_parser p;
  nghttp2_session *cli; /* the client side of the in-memory HTTP/2 link */
  conch_buf in;         /* read, not yet parsed */
  conch_buf out;        /* for the socket */
  size_t credit_prev;   /* DATA bytes in |out| of finished responses */
  size_t credit_cur;    /* ... of the current one */
  int fatal;            /* out of memory in a callback */
  int stopping;         /* server shutdown: no new requests */
  int closing;          /* no more requests: close once |out| is written */
  int paused;           /* the parser waits for the response to finish */
  int eof;              /* the client shut its write side */

  /* The current exchange: one request and its response. */
  int active;    /* a request began */
  int head_done; /* its headers were parsed (and submitted) */
  int req_done;  /* its last byte was parsed */
  int resp_done; /* the last byte of the response is in |out| */
  int32_t sid;   /* its HTTP/2 stream, 0 before the submit */
  int method;    /* enum http_method */
  int http10;    /* HTTP/1.0 request */
  int keep;      /* the connection stays open after it */
  int chunked_req;
  int has_body;
  int err_status; /* what a failing parser callback answers */
  int want_continue;
  int discard; /* the response ended first: the rest of the body goes */
  size_t discarded;
  int body_deferred; /* the data source waits for body bytes */
  conch_buf url;
  conch_buf hb; /* header names and values, back to back */
  h1_field fields[H1_MAX_FIELDS];
  size_t nfields;
  int in_value;
  size_t head_bytes;
  conch_buf body; /* request body not yet taken by the client session */
  /* The response. */
  int status;
  int got_head;  /* HEADERS arrived */
  int committed; /* status line and headers are in |out| */
  int chunked;
  long long resp_len; /* the response's content-length, or -1 */
  conch_buf rhead;  /* "Name: value\r\n" lines */
  conch_buf rtrail; /* trailers, likewise */
  conch_buf hold;   /* DATA before the head is committed */
  size_t hold_credit;
};

/* The reason phrase (wire.h), or "Status" for one it does not name. */
static const char *reason_of(int status) {
  const char *r = conch__http_reason(status);

  return r != NULL ? r : "Status";
}

/* ---- Small helpers ------------------------------------------------------- */

static const conch_mem *mem_of(const srv_h1 *h) { return h->c->s->mem; }

static void put(srv_h1 *h, const void *p, size_t n) {
  if (n > 0 && conch__buf_append(&h->out, mem_of(h), p, n) != 0) {
    h->fatal = 1;
  }
}

static void puts_out(srv_h1 *h, const char *s) { put(h, s, strlen(s)); }

static void buf_trim(srv_h1 *h, conch_buf *b) {
  if (b->cap > H1_BUF_KEEP) {
    conch__buf_free(b, mem_of(h));
  } else {
    conch__buf_reset(b);
  }
}

static int name_eq(const uint8_t *name, size_t n, const char *want) {
  return strlen(want) == n && strncasecmp((const char *)name, want, n) == 0;
}

static int has_ctl(const uint8_t *p, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (p[i] == '\r' || p[i] == '\n' || p[i] == '\0') {
      return 1;
    }
  }
  return 0;
}

/* Is |name| one of the comma-separated tokens of |list|? */
static int list_has(const uint8_t *list, size_t n, const uint8_t *name,
                    size_t namelen) {
  size_t i = 0;

  while (i < n) {
    size_t s;
    size_t e;

    while (i < n && (list[i] == ' ' || list[i] == '\t' || list[i] == ',')) {
      i++;
    }
    s = i;
    while (i < n && list[i] != ',') {
      i++;
    }
    e = i;
    while (e > s && (list[e - 1] == ' ' || list[e - 1] == '\t')) {
      e--;
    }
    if (e - s == namelen && namelen > 0 &&
        strncasecmp((const char *)list + s, (const char *)name, namelen) == 0) {
      return 1;
    }
  }
  return 0;
}

/* Go-style "Content-Type" for an HTTP/2 "content-type". */
static void put_canonical(conch_buf *b, const conch_mem *mem, const uint8_t *p,
                          size_t n, int *fatal) {
  size_t i;

  if (conch__buf_reserve(b, mem, n) != 0) {
    *fatal = 1;
    return;
  }
  for (i = 0; i < n; i++) {
    uint8_t ch = p[i];

    if ((i == 0 || p[i - 1] == '-') && ch >= 'a' && ch <= 'z') {
      ch = (uint8_t)(ch - 'a' + 'A');
    }
    b->data[b->len++] = ch;
  }
}

/* ---- The exchange -------------------------------------------------------- */

static void ex_reset(srv_h1 *h) {
  h->active = h->head_done = h->req_done = h->resp_done = 0;
  h->sid = 0;
  h->method = 0;
  h->http10 = h->keep = h->chunked_req = h->has_body = 0;
  h->err_status = 0;
  h->want_continue = 0;
  h->discard = 0;
  h->discarded = 0;
  h->body_deferred = 0;
  buf_trim(h, &h->url);
  buf_trim(h, &h->hb);
  h->nfields = 0;
  h->in_value = 0;
  h->head_bytes = 0;
  buf_trim(h, &h->body);
  h->status = 0;
  h->got_head = h->committed = h->chunked = 0;
  h->resp_len = -1;
  buf_trim(h, &h->rhead);
  buf_trim(h, &h->rtrail);
  buf_trim(h, &h->hold);
  h->hold_credit = 0;
}

/* The response is over (well or not): its DATA only awaits the socket. */
static void resp_over(srv_h1 *h) {
  h->resp_done = 1;
  h->credit_prev += h->credit_cur + h->hold_credit;
  h->credit_cur = 0;
  h->hold_credit = 0;
  buf_trim(h, &h->hold);
}

/* Both halves done: the next request may be read. */
static void ex_try_complete(srv_h1 *h) {
  if (!h->active || !h->req_done || !h->resp_done) {
    return;
  }
  if (!h->keep || h->stopping) {
    h->closing = 1;
  }
  ex_reset(h);
  if (h->closing) {
    return;
  }
  if (h->paused) {
    h->paused = 0;
    http_parser_pause(&h->p, 0);
  }
}

/* "Date: <IMF-fixdate>\r\n" (RFC 9110 6.6.1: an origin server with a
   clock sends it) into |out|; its length. */
static int date_header(char *out, size_t cap) {
  return (int)conch__srv_date(out, cap);
}

/* An answer made here; the connection closes after it. */
static void put_simple(srv_h1 *h, int status) {
  char head[320];
  char body[64];
  char date[64];
  int bn = snprintf(body, sizeof(body), "%d %s\n", status, reason_of(status));
  int n;

  date_header(date, sizeof(date));
  n = snprintf(head, sizeof(head),
               "HTTP/1.1 %d %s\r\n"
               "%s"
               "Content-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: %d\r\n%s"
               "Connection: close\r\n\r\n",
               status, reason_of(status), date, bn,
               status == 405 ? "Allow: GET, HEAD, POST\r\n" : "");

  put(h, head, (size_t)n);
  put(h, body, (size_t)bn);
}

/* The exchange failed with |status|: answer it if nothing of the response
   went out yet, else cut the response short (no last chunk).  Either way
   the connection closes after. */
static void ex_fail(srv_h1 *h, int status, int reset) {
  if (reset && h->sid > 0 && !h->resp_done &&
      nghttp2_session_find_stream(h->cli, h->sid) != NULL) {
    nghttp2_submit_rst_stream(h->cli, NGHTTP2_FLAG_NONE, h->sid,
                              NGHTTP2_CANCEL);
  }
  if (!h->resp_done) {
    if (!h->committed && status > 0) {
      put_simple(h, status);
    }
    resp_over(h);
  }
  h->closing = 1;
}

/* ---- The request: parser callbacks --------------------------------------- */

static int cb_fail(srv_h1 *h, int status) {
  h->err_status = status;
  return -1;
}

static int on_message_begin(http_parser *p) {
  srv_h1 *h = p->data;

  h->active = 1;
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
  srv_h1 *h = p->data;

  if (conch__buf_size(&h->url) + n > H1_URL_MAX) {
    return cb_fail(h, 414);
  }
  if (conch__buf_append(&h->url, mem_of(h), at, n) != 0) {
    h->fatal = 1;
    return -1;
  }
  return 0;
}

static int head_add(srv_h1 *h, const char *at, size_t n) {
  h->head_bytes += n;
  if (h->head_bytes > H1_HEAD_MAX) {
    return cb_fail(h, 431);
  }
  if (conch__buf_append(&h->hb, mem_of(h), at, n) != 0) {
    h->fatal = 1;
    return -1;
  }
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
  srv_h1 *h = p->data;
  h1_field *f;

  /* Trailers of a chunked body: counted, not forwarded (the Connect
     protocol has no use for request trailers). */
  if (h->head_done) {
    h->head_bytes += n + 4;
    return h->head_bytes > H1_HEAD_MAX ? cb_fail(h, 431) : 0;
  }
  if (h->nfields == 0 || h->in_value) {
    if (h->nfields == H1_MAX_FIELDS) {
      return cb_fail(h, 431);
    }
    f = &h->fields[h->nfields++];
    f->noff = conch__buf_size(&h->hb);
    f->nlen = f->vlen = 0;
    f->voff = f->noff;
    h->in_value = 0;
    h->head_bytes += 4; /* ": " and CRLF */
  }
  f = &h->fields[h->nfields - 1];
  f->nlen += n;
  f->voff = f->noff + f->nlen;
  return head_add(h, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
  srv_h1 *h = p->data;

  if (h->head_done) {
    h->head_bytes += n;
    return h->head_bytes > H1_HEAD_MAX ? cb_fail(h, 431) : 0;
  }
  if (h->nfields == 0) {
    return cb_fail(h, 400);
  }
  h->in_value = 1;
  h->fields[h->nfields - 1].vlen += n;
  return head_add(h, at, n);
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *user_data) {
  srv_h1 *h = src->ptr;
  size_t n;

  (void)s;
  (void)user_data;
  if (id != h->sid || h->discard) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  n = conch__buf_size(&h->body);
  if (n > len) {
    n = len;
  }
  if (n > 0) {
    memcpy(buf, conch__buf_head(&h->body), n);
    conch__buf_consume(&h->body, n);
  }
  if (conch__buf_size(&h->body) == 0) {
    if (h->req_done) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
      h->body_deferred = 1;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  return (ssize_t)n;
}

static void body_wake(srv_h1 *h) {
  if (h->body_deferred && h->sid > 0) {
    h->body_deferred = 0;
    nghttp2_session_resume_data(h->cli, h->sid);
  }
}

/* The origin-form path, or absolute-form "http://authority/path" (whose
   authority wins over Host, RFC 9112 3.2.2).  The path is left in |url|.
   Returns 0 or -1 (not a request target we serve). */
static int split_target(srv_h1 *h, const uint8_t **auth, size_t *authlen) {
  const uint8_t *u = conch__buf_head(&h->url);
  size_t n = conch__buf_size(&h->url);
  const uint8_t *sep;
  size_t a;
  size_t e;
  conch_buf path = CONCH_BUF_INIT;

  if (n > 0 && u[0] == '/') {
    return 0;
  }
  sep = n > 3 ? memmem(u, n, "://", 3) : NULL;
  if (sep == NULL || !(name_eq(u, (size_t)(sep - u), "http") ||
                       name_eq(u, (size_t)(sep - u), "https"))) {
    return -1;
  }
  a = (size_t)(sep - u) + 3;
  for (e = a; e < n && u[e] != '/' && u[e] != '?' && u[e] != '#'; e++) {
  }
  if (e == a) {
    return -1;
  }
  if (conch__buf_append(&path, mem_of(h), "/", e < n && u[e] == '/' ? 0 : 1) !=
          0 ||
      conch__buf_append(&path, mem_of(h), u + e, n - e) != 0 ||
      conch__buf_append(&path, mem_of(h), u + a, e - a) != 0) {
    conch__buf_free(&path, mem_of(h));
    h->fatal = 1;
    return -1;
  }
  /* |path| holds the path, then the authority. */
  conch__buf_free(&h->url, mem_of(h));
  h->url = path;
  h->url.len -= e - a;
  *auth = h->url.data + h->url.len;
  *authlen = e - a;
  return 0;
}

static int in_connection_list(srv_h1 *h, const uint8_t *name, size_t n) {
  const uint8_t *hb = conch__buf_head(&h->hb);
  size_t i;

  for (i = 0; i < h->nfields; i++) {
    const h1_field *f = &h->fields[i];

    if (name_eq(hb + f->noff, f->nlen, "connection") &&
        list_has(hb + f->voff, f->vlen, name, n)) {
      return 1;
    }
  }
  return 0;
}

/* Checks the fields: names lowercased, values trimmed; Host and Expect.
   Returns 0, or the status to answer. */
static int scan_fields(srv_h1 *h, const uint8_t **host, size_t *hostlen) {
  uint8_t *hb = conch__buf_head(&h->hb);
  int nhost = 0;
  size_t i;

  for (i = 0; i < h->nfields; i++) {
    h1_field *f = &h->fields[i];
    uint8_t *name = hb + f->noff;
    size_t k;

    for (k = 0; k < f->nlen; k++) {
      if (name[k] >= 'A' && name[k] <= 'Z') {
        name[k] = (uint8_t)(name[k] - 'A' + 'a');
      }
    }
    while (f->vlen > 0 && (hb[f->voff] == ' ' || hb[f->voff] == '\t')) {
      f->voff++;
      f->vlen--;
    }
    while (f->vlen > 0 && (hb[f->voff + f->vlen - 1] == ' ' ||
                           hb[f->voff + f->vlen - 1] == '\t')) {
      f->vlen--;
    }
    if (f->nlen == 0 || has_ctl(name, f->nlen) ||
        has_ctl(hb + f->voff, f->vlen)) {
      return 400;
    }
    if (name_eq(name, f->nlen, "host")) {
      nhost++;
      *host = hb + f->voff;
      *hostlen = f->vlen;
    } else if (name_eq(name, f->nlen, "expect") && !h->http10) {
      if (!name_eq(hb + f->voff, f->vlen, "100-continue")) {
        return 417;
      }
      h->want_continue = h->has_body;
    }
  }
  /* RFC 9112 3.2: exactly one Host in HTTP/1.1. */
  if (nhost > 1 || (nhost == 0 && !h->http10)) {
    return 400;
  }
  return 0;
}

static int forwarded(srv_h1 *h, const uint8_t *name, size_t n) {
  return !conch__h1_hop_by_hop(name, n) && !name_eq(name, n, "host") &&
         !name_eq(name, n, "expect") && !name_eq(name, n, "content-length") &&
         !in_connection_list(h, name, n);
}

#define NV(k, kl, v, vl)                                                       \
  do {                                                                         \
    nva[nv].name = (uint8_t *)(k);                                             \
    nva[nv].namelen = (kl);                                                    \
    nva[nv].value = (uint8_t *)(v);                                            \
    nva[nv].valuelen = (vl);                                                   \
    nva[nv].flags = NGHTTP2_NV_FLAG_NONE;                                      \
    nv++;                                                                      \
  } while (0)

/* The request as HTTP/2 HEADERS, its body (if any) a deferred source. */
static int submit(srv_h1 *h) {
  nghttp2_nv nva[4 + H1_MAX_FIELDS];
  size_t nv = 0;
  const uint8_t *auth = NULL;
  size_t authlen = 0;
  const char *method = http_method_str((enum http_method)h->method);
  const char *scheme = h->c->tls != NULL ? "https" : "http";
  nghttp2_data_provider prd;
  const uint8_t *hb;
  int status;
  int32_t id;
  size_t i;

  status = scan_fields(h, &auth, &authlen);
  if (status != 0) {
    return cb_fail(h, status);
  }
  if (split_target(h, &auth, &authlen) != 0) {
    return h->fatal ? -1 : cb_fail(h, 400);
  }
  if (auth == NULL || authlen == 0) {
    auth = (const uint8_t *)"localhost";
    authlen = 9;
  }
  hb = conch__buf_head(&h->hb);
  NV(":method", 7, method, strlen(method));
  NV(":scheme", 7, scheme, strlen(scheme));
  NV(":authority", 10, auth, authlen);
  NV(":path", 5, conch__buf_head(&h->url), conch__buf_size(&h->url));
  for (i = 0; i < h->nfields; i++) {
    const h1_field *f = &h->fields[i];

    if (forwarded(h, hb + f->noff, f->nlen)) {
      NV(hb + f->noff, f->nlen, hb + f->voff, f->vlen);
    }
  }
  prd.source.ptr = h;
  prd.read_callback = body_read;
  id = nghttp2_submit_request(h->cli, NULL, nva, nv, h->has_body ? &prd : NULL,
                              NULL);
  if (id < 0) {
    if (id == NGHTTP2_ERR_NOMEM) {
      h->fatal = 1;
      return -1;
    }
    return cb_fail(h, 503); /* stream ids used up */
  }
  h->sid = id;
  return 0;
}

#undef NV

static int on_headers_complete(http_parser *p) {
  srv_h1 *h = p->data;

  h->head_done = 1;
  if (p->http_major != 1) {
    return cb_fail(h, 505);
  }
  h->http10 = p->http_minor == 0;
  h->method = (int)p->method;
  h->keep = http_should_keep_alive(p) && !p->upgrade;
  if (p->method != HTTP_GET && p->method != HTTP_HEAD &&
      p->method != HTTP_POST) {
    return cb_fail(h, 405);
  }
  h->chunked_req = (p->flags & F_CHUNKED) != 0;
  h->has_body = h->chunked_req ||
                ((p->flags & F_CONTENTLENGTH) != 0 && p->content_length > 0);
  return submit(h);
}

static int on_body(http_parser *p, const char *at, size_t n) {
  srv_h1 *h = p->data;

  h->want_continue = 0; /* it did not wait */
  if (h->resp_done) {
    h->discarded += n;
    return h->discarded > H1_DISCARD_MAX ? cb_fail(h, -1) : 0;
  }
  if (conch__buf_append(&h->body, mem_of(h), at, n) != 0) {
    h->fatal = 1;
    return -1;
  }
  body_wake(h);
  return 0;
}

static int on_message_complete(http_parser *p) {
  srv_h1 *h = p->data;

  h->req_done = 1;
  h->want_continue = 0;
  if (!h->resp_done) {
    body_wake(h);
  }
  /* The next request waits until this one is answered. */
  h->paused = 1;
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* "FOO / HTTP/1.1" is a method we do not know (405), "\x01..." is not
   HTTP (400). */
static int looks_like_method(const uint8_t *p, size_t n) {
  size_t i = 0;

  while (i < n && (p[i] == '\r' || p[i] == '\n')) {
    i++;
  }
  if (i == n || p[i] == ' ') {
    return 0;
  }
  for (; i < n && p[i] != ' '; i++) {
    if (p[i] <= ' ' || p[i] >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", p[i])) {
      return 0;
    }
  }
  return i < n;
}

static void parse_error(srv_h1 *h, enum http_errno e, const uint8_t *start,
                        size_t n, int at_start) {
  int status = h->err_status;

  if (status == 0) {
    if (e == HPE_HEADER_OVERFLOW) {
      status = 431;
    } else if (e == HPE_INVALID_METHOD && at_start &&
               looks_like_method(start, n)) {
      status = 405;
    } else {
      status = 400;
    }
  }
  ex_fail(h, status, 1);
}

/* Runs the parser over what was read, as far as the exchange allows.
   Returns 1 if it moved. */
static int h1_parse(srv_h1 *h) {
  int moved = 0;

  while (!h->closing && !h->fatal && !h->paused &&
         conch__buf_size(&h->in) > 0) {
    const uint8_t *data = conch__buf_head(&h->in);
    size_t n = conch__buf_size(&h->in);
    int at_start = !h->active;
    enum http_errno e;
    size_t done;

    if (h->stopping && !h->head_done) {
      h->closing = 1;
      break;
    }
    if (h->head_done && !h->req_done && !h->resp_done) {
      size_t used = conch__buf_size(&h->body);

      if (used >= H1_BODY_MAX) {
        break;
      }
      if (n > H1_BODY_MAX - used) {
        n = H1_BODY_MAX - used;
      }
    }
    done = http_parser_execute(&h->p, &parser_settings, (const char *)data, n);
    conch__buf_consume(&h->in, done);
    moved = 1;
    if (h->fatal) {
      break;
    }
    e = HTTP_PARSER_ERRNO(&h->p);
    if (e == HPE_PAUSED) {
      ex_try_complete(h);
      continue;
    }
    if (e != HPE_OK) {
      parse_error(h, e, data, n, at_start);
      break;
    }
  }
  if (conch__buf_size(&h->in) == 0) {
    buf_trim(h, &h->in);
  }
  return moved;
}

/* ---- The response: client session callbacks ------------------------------ */

static int no_body(const srv_h1 *h) {
  return h->method == HTTP_HEAD || h->status < 200 || h->status == 204 ||
         h->status == 304;
}

static void put_body(srv_h1 *h, const uint8_t *p, size_t n) {
  if (!h->chunked) {
    put(h, p, n);
  } else if (conch__h1_chunk_append(&h->out, mem_of(h), p, n) != 0) {
    h->fatal = 1;
  }
}

/* Status line and headers.  |ended|: the whole body is in |hold|. */
static void commit(srv_h1 *h, int ended) {
  char line[128];
  int nobody = no_body(h);
  int n;

  /* An answer before the request body ended: the rest of the body is
     read and dropped if it is short, else the connection closes. */
  if (!h->req_done &&
      (h->chunked_req || h->p.content_length > H1_DISCARD_MAX)) {
    h->keep = 0;
  }
  if (h->stopping || (!nobody && !ended && h->http10)) {
    h->keep = 0; /* HTTP/1.0: the body ends with the connection */
  }
  n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", h->status,
               reason_of(h->status));
  put(h, line, (size_t)n);
  n = date_header(line, sizeof(line));
  put(h, line, (size_t)n);
  put(h, conch__buf_head(&h->rhead), conch__buf_size(&h->rhead));
  if (h->method == HTTP_HEAD && h->resp_len >= 0 && h->status >= 200 &&
      h->status != 204 && h->status != 304) {
    /* HEAD: the length a GET would have (RFC 9110 8.6). */
    n = snprintf(line, sizeof(line), "Content-Length: %lld\r\n", h->resp_len);
    put(h, line, (size_t)n);
  }
  if (!nobody) {
    if (ended) {
      n = snprintf(line, sizeof(line), "Content-Length: %zu\r\n",
                   conch__buf_size(&h->hold));
      put(h, line, (size_t)n);
    } else if (h->resp_len >= 0) {
      /* The handler's promise (a plain HTTP handler holds it to it: a
         shorter body resets the stream, and the connection closes). */
      n = snprintf(line, sizeof(line), "Content-Length: %lld\r\n",
                   h->resp_len);
      put(h, line, (size_t)n);
    } else if (!h->http10) {
      puts_out(h, "Transfer-Encoding: chunked\r\n");
      h->chunked = 1;
    }
  }
  if (!h->keep) {
    puts_out(h, "Connection: close\r\n");
  } else if (h->http10) {
    puts_out(h, "Connection: keep-alive\r\n");
  }
  put(h, "\r\n", 2);
  h->committed = 1;
  if (!nobody) {
    put_body(h, conch__buf_head(&h->hold), conch__buf_size(&h->hold));
  }
  h->credit_cur += h->hold_credit;
  h->hold_credit = 0;
  buf_trim(h, &h->hold);
}

static void resp_end(srv_h1 *h) {
  if (!h->committed) {
    commit(h, conch__buf_size(&h->rtrail) == 0 || h->http10);
  }
  if (h->chunked) {
    put(h, "0\r\n", 3);
    put(h, conch__buf_head(&h->rtrail), conch__buf_size(&h->rtrail));
    put(h, "\r\n", 2);
  }
  resp_over(h);
  if (!h->req_done) {
    /* The rest of the body is dropped as it comes (up to
       H1_DISCARD_MAX). */
    h->discard = 1;
    buf_trim(h, &h->body);
  }
  ex_try_complete(h);
}

static int cli_on_header(nghttp2_session *s, const nghttp2_frame *f,
                         const uint8_t *name, size_t namelen,
                         const uint8_t *value, size_t valuelen, uint8_t flags,
                         void *user_data) {
  srv_h1 *h = user_data;
  conch_buf *dst = h->got_head ? &h->rtrail : &h->rhead;

  (void)s;
  (void)flags;
  if (f->hd.type != NGHTTP2_HEADERS || h->sid == 0 ||
      f->hd.stream_id != h->sid || h->resp_done) {
    return 0;
  }
  if (!h->got_head && name_eq(name, namelen, ":status")) {
    h->status = 0;
    if (valuelen == 3 && value[0] >= '1' && value[0] <= '9' &&
        value[1] >= '0' && value[1] <= '9' && value[2] >= '0' &&
        value[2] <= '9') {
      h->status =
          (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    }
    return 0;
  }
  if (!h->got_head && name_eq(name, namelen, "content-length")) {
    long long v = 0;
    size_t i;
    for (i = 0; i < valuelen && i < 18 && value[i] >= '0' && value[i] <= '9';
         i++) {
      v = v * 10 + (value[i] - '0');
    }
    h->resp_len = i > 0 && i == valuelen ? v : -1;
    return 0;
  }
  if (namelen == 0 || name[0] == ':' || conch__h1_hop_by_hop(name, namelen) ||
      name_eq(name, namelen, "content-length") || has_ctl(name, namelen) ||
      has_ctl(value, valuelen)) {
    return 0;
  }
  put_canonical(dst, mem_of(h), name, namelen, &h->fatal);
  if (conch__buf_append(dst, mem_of(h), ": ", 2) != 0 ||
      conch__buf_append(dst, mem_of(h), value, valuelen) != 0 ||
      conch__buf_append(dst, mem_of(h), "\r\n", 2) != 0) {
    h->fatal = 1;
  }
  return 0;
}

static int cli_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f,
                             void *user_data) {
  srv_h1 *h = user_data;

  (void)s;
  if (h->sid == 0 || f->hd.stream_id != h->sid || h->resp_done) {
    return 0;
  }
  if (f->hd.type == NGHTTP2_HEADERS && !h->got_head) {
    h->got_head = 1;
    h->want_continue = 0;
    if (h->status < 200) {
      ex_fail(h, 502, 1);
      return 0;
    }
  }
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    resp_end(h);
  }
  return 0;
}

static int cli_on_data(nghttp2_session *s, uint8_t flags, int32_t id,
                       const uint8_t *data, size_t len, void *user_data) {
  srv_h1 *h = user_data;

  (void)flags;
  if (h->sid == 0 || id != h->sid || h->resp_done || !h->got_head ||
      no_body(h)) {
    nghttp2_session_consume(s, id, len);
    return 0;
  }
  if (!h->committed) {
    if (conch__buf_append(&h->hold, mem_of(h), data, len) != 0) {
      h->fatal = 1;
    }
    h->hold_credit += len;
    return 0;
  }
  put_body(h, data, len);
  h->credit_cur += len;
  return 0;
}

static int cli_on_stream_close(nghttp2_session *s, int32_t id, uint32_t code,
                               void *user_data) {
  srv_h1 *h = user_data;

  (void)s;
  if (h->sid == 0 || id != h->sid || h->resp_done) {
    return 0;
  }
  /* Reset before the response ended: nghttp2 refused the request (400),
     the server went away (503), or the RPC layer gave up (500). */
  ex_fail(h,
          code == NGHTTP2_PROTOCOL_ERROR   ? 400
          : code == NGHTTP2_REFUSED_STREAM ? 503
                                           : 500,
          0);
  return 0;
}

/* ---- Lifecycle ----------------------------------------------------------- */

static int cli_new(srv_h1 *h) {
  conch_h2_setup s;

  memset(&s, 0, sizeof(s));
  s.header = cli_on_header;
  s.frame_recv = cli_on_frame_recv;
  s.data_chunk = cli_on_data;
  s.stream_close = cli_on_stream_close;
  /* Window credit goes back as the socket takes the bytes. */
  s.manual_window = 1;
  /* The peer is our own server; HEAD and 204 are handled above. */
  s.no_http_messaging = 1;
  s.mem = mem_of(h);
  s.stream_window = H1_WINDOW;
  s.conn_window = H1_WINDOW;
  return conch__h2_session_new(&h->cli, &s, h) != 0 ? -1 : 0;
}

int conch__srv_h1_start(srv_conn *c) {
  srv_h1 *h = conch__calloc(c->s->mem, 1, sizeof(*h));

  if (h == NULL) {
    return CONCH_ERR_NOMEM;
  }
  h->c = c;
  h->resp_len = -1;
  c->h1 = h;
  http_parser_init(&h->p, HTTP_REQUEST);
  h->p.data = h;
  return cli_new(h) != 0 ? CONCH_ERR_NOMEM : 0;
}

void conch__srv_h1_free(srv_conn *c) {
  srv_h1 *h = c->h1;
  const conch_mem *mem = c->s->mem;

  if (h == NULL) {
    return;
  }
  nghttp2_session_del(h->cli);
  conch__buf_free(&h->in, mem);
  conch__buf_free(&h->out, mem);
  conch__buf_free(&h->url, mem);
  conch__buf_free(&h->hb, mem);
  conch__buf_free(&h->body, mem);
  conch__buf_free(&h->rhead, mem);
  conch__buf_free(&h->rtrail, mem);
  conch__buf_free(&h->hold, mem);
  conch__free(mem, h);
  c->h1 = NULL;
}

void conch__srv_h1_goaway(srv_conn *c) {
  c->h1->stopping = 1;
  c->s->pending = 1;
}

void conch__srv_h1_eof(srv_conn *c) {
  c->h1->eof = 1;
  c->s->pending = 1;
}

/* The client sends no more: once what it sent is parsed, an unfinished
   request is a truncated one (400), one being answered is canceled, and
   with none in progress the connection closes (after the answers are
   out). */
static void h1_check_eof(srv_h1 *h) {
  if (!h->eof || h->closing) {
    return;
  }
  /* A client that leaves while its answer is made is gone (as Go's
     net/http takes it): the call is canceled. */
  if (h->active && h->req_done && !h->resp_done) {
    ex_fail(h, 0, 1);
    return;
  }
  if (conch__buf_size(&h->in) > 0 || h->paused) {
    return;
  }
  if (!h->active) {
    h->closing = 1;
  } else if (!h->req_done) {
    ex_fail(h, 400, 1);
  }
}

size_t conch__srv_h1_room(const srv_conn *c) {
  const srv_h1 *h = c->h1;
  size_t used = conch__buf_size(&h->in);

  /* Closing: what still comes is read and dropped, so that a client
     blocked on sending gets to read the answer. */
  if (h->closing || c->lingering) {
    return H1_DISCARD_CHUNK;
  }
  if (h->fatal || h->eof || used >= H1_IN_MAX) {
    return 0;
  }
  return H1_IN_MAX - used;
}

int conch__srv_h1_feed(srv_conn *c, const uint8_t *p, size_t n) {
  srv_h1 *h = c->h1;

  if (h->closing || c->lingering) {
    return 0;
  }
  if (conch__buf_append(&h->in, c->s->mem, p, n) != 0) {
    return CONCH_ERR_NOMEM;
  }
  c->s->pending = 1;
  return 0;
}

int conch__srv_h1_done(const srv_conn *c) {
  const srv_h1 *h = c->h1;

  return h->closing && conch__buf_size(&h->out) == 0;
}

/* ---- Pumping ------------------------------------------------------------- */

/* Frames from each session into the other.  Returns 1 if any moved, 0,
   or -1 when the connection must close. */
static int xfer(srv_h1 *h) {
  srv_conn *c = h->c;
  int moved = 0;

  for (;;) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(c->h2, &data);

    if (n < 0) {
      return -1;
    }
    if (n == 0) {
      break;
    }
    moved = 1;
    if (nghttp2_session_mem_recv(h->cli, data, (size_t)n) < 0) {
      return -1;
    }
  }
  for (;;) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(h->cli, &data);

    if (n < 0) {
      return -1;
    }
    if (n == 0) {
      break;
    }
    moved = 1;
    if (nghttp2_session_mem_recv(c->h2, data, (size_t)n) < 0 || c->dead) {
      return -1;
    }
  }
  /* The server session ended itself (too much buffered, say). */
  if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)) {
    if (h->head_done) {
      ex_fail(h, 503, 0);
    }
    h->closing = 1;
  }
  return moved;
}

/* Gives |n| written bytes back to the client session's windows: first
   those of finished responses, then the current one's. */
static void credit(srv_h1 *h, size_t n) {
  size_t k = n < h->credit_prev ? n : h->credit_prev;

  if (k > 0) {
    nghttp2_session_consume_connection(h->cli, k);
    h->credit_prev -= k;
    n -= k;
  }
  k = n < h->credit_cur ? n : h->credit_cur;
  if (k > 0) {
    nghttp2_session_consume(h->cli, h->sid, k);
    h->credit_cur -= k;
  }
}

/* Moves output to the connection while its buffer has room.  Returns 1
   if bytes moved, 0, or -1 on failure. */
static int write_out(srv_h1 *h) {
  size_t total = 0;

  while (conch__buf_size(&h->out) > 0) {
    size_t room;
    size_t n = conch__buf_size(&h->out);
    size_t have = conch__srv_conn_out_size(h->c);

    if (have >= H1_OUT_HIGH) {
      break;
    }
    room = H1_OUT_HIGH - have;
    if (n > room) {
      n = room;
    }
    if (conch__srv_conn_out(h->c, conch__buf_head(&h->out), n) != 0) {
      return -1;
    }
    conch__buf_consume(&h->out, n);
    credit(h, n);
    total += n;
  }
  if (conch__buf_size(&h->out) == 0) {
    buf_trim(h, &h->out);
  }
  return total > 0;
}

/* Nothing moves any more this turn: a head still held goes out now
   (chunked: the body is not complete), and a client waiting on
   Expect: 100-continue is told to go on. */
static void settle(srv_h1 *h) {
  if (h->head_done && h->got_head && !h->committed && !h->resp_done) {
    commit(h, 0);
  }
  if (h->want_continue && !h->got_head && !h->resp_done && !h->closing) {
    puts_out(h, "HTTP/1.1 100 Continue\r\n\r\n");
    h->want_continue = 0;
  }
}

int conch__srv_h1_produce(srv_conn *c) {
  srv_h1 *h = c->h1;
  int any = 0;
  int i;

  if (c->lingering) {
    return 0;
  }
  if (h->stopping && !h->head_done) {
    h->closing = 1;
  }
  for (i = 0; i < H1_PUMP_MAX; i++) {
    int moved = h1_parse(h);
    int rv = xfer(h);
    int wrote;

    if (rv < 0 || h->fatal) {
      return -1;
    }
    moved |= rv;
    if (!moved) {
      settle(h);
    }
    wrote = write_out(h);
    if (wrote < 0 || h->fatal) {
      return -1;
    }
    if (!moved && !wrote) {
      break;
    }
    any = 1;
  }
  if (i == H1_PUMP_MAX) {
    c->s->pending = 1; /* let the other connections have their turn */
  }
  h1_check_eof(h);
  return any;
}
