/* HTTP/1.1 for the server core: the connection's session when it does
   not speak HTTP/2.  A request is read with the role-neutral front end
   (h1parse.c) and handed to the calls of server_rpc.c through the same
   entry points nghttp2's callbacks use (conch__srv_rpc_open, _header,
   _headers_end, _data, _data_end, _close); the response comes back
   through the call's sink (srv_sink, server_int.h), whose HTTP/1.1 side
   this file is, and is written from the call's output straight into the
   connection's (conch__srv_conn_out: the one copy, or TLS's encryption).
   No HTTP/2 state machine is involved, and this file reads neither
   descriptors nor the clock (server.c moves the bytes, through TLS when
   the connection has it, and gives the Date).

   - One exchange at a time: the front end stops at the end of each
     request, and a pipelined request waits its turn in a bounded
     read-ahead buffer (H1_IN_MAX), so the connection is not read further.
     The first bytes of a read are parsed where they lie (only what the
     parser cannot take yet is kept).
   - The request body goes to the call as it arrives (Content-Length or
     chunked, without copying); while H1_BODY_MAX bytes of it are held
     for a handler that paused its call, the parser stops, the read-ahead
     buffer fills and the connection is not read: a handler that pauses
     stalls an HTTP/1.1 client as it stalls an HTTP/2 one.
   - The response head waits until the end of a pump: a response whose
     whole body is at hand by then (unary calls, errors) goes out with
     Content-Length, anything else (streams) with Transfer-Encoding:
     chunked, as much of the call's output as there is a chunk; gRPC's
     trailers go out as chunked trailers (gRPC-Web's and Connect's are in
     the body, as server_rpc.c makes them).  The call's output moves only
     while the connection's holds less than H1_OUT_HIGH, so a slow reader
     fills the call's send buffer and the handler is refused
     (CONCH_ERR_AGAIN) exactly as over HTTP/2.
   - Errors the HTTP/1.1 layer finds (malformed 400, method 405, URL 414,
     headers 431, version 505, expectation 417) are answered here, and
     the connection closes: the write side is shut, and what the client
     still sends is read and dropped for a moment (a "lingering close",
     server.c, so that the client reads the answer instead of a reset).
     A reset of the call (sink->reset) becomes such an answer when its
     head has not gone out, else the response is cut (no last chunk). */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "h1parse.h"
#include "mem_int.h"
#include "server_int.h"
#include "wire.h"

#define H1_IN_MAX (16 * 1024)   /* bytes read ahead of the parser */
#define H1_BODY_MAX (64 * 1024) /* request body held for a paused call */
#define H1_HEAD_MAX (32 * 1024) /* request line and headers */
#define H1_URL_MAX (8 * 1024)
#define H1_MAX_FIELDS 100
#define H1_DISCARD_MAX (1024 * 1024) /* body read after an early answer */
#define H1_DISCARD_CHUNK (16 * 1024) /* read while closing */
#define H1_OUT_HIGH (64 * 1024)      /* connection output before we stop */
#define H1_PUMP_MAX 256              /* rounds per loop turn */
#define H1_BUF_KEEP (64 * 1024)      /* bigger buffers are freed */

struct srv_h1 {
  srv_conn *c;
  conch_h1p p;
  conch_buf in; /* read, not yet parsed */
  int fatal;    /* out of memory */
  int stopping; /* server shutdown: no new requests */
  int closing;  /* no more requests: close once the output is written */
  int eof;      /* the client shut its write side */

  /* The current exchange: one request and its response. */
  conch_rpc *rpc; /* its call, NULL once closed */
  int active;     /* its head arrived */
  int req_done;   /* its last byte was parsed */
  int resp_done;  /* the last byte of the response went to the connection */
  int head_req;   /* a HEAD request */
  int http10;     /* HTTP/1.0 request */
  int keep;       /* the connection stays open after it */
  int chunked_req;
  uint64_t req_len; /* Content-Length, or UINT64_MAX */
  int err_status;   /* what a failing parser callback answers (-1: none) */
  int want_continue;
  int discard; /* the response ended first: the rest of the body goes */
  size_t discarded;
  int reset;       /* sink->reset: the call cannot go on */
  uint32_t reset_code;
  /* The response. */
  int status;
  int has_head;  /* sink->head ran */
  int head_only; /* ... and the response is the head alone */
  int committed; /* status line and headers are out */
  int chunked;
  long long resp_len; /* the response's content-length, or -1 */
  conch_buf rhead;    /* "Name: value\r\n" lines */
  /* The Date field as last made, and when (the server's clock, ms): made
     again once a second passed, not for every response. */
  char date[64];
  size_t date_len;
  int64_t date_at;
};

/* "Date: ...\r\n" (RFC 9110 6.6.1: an origin server with a clock sends
   it), at most a second old. */
static const char *date_field(struct srv_h1 *h, size_t *len) {
  int64_t now = conch__srv_now(h->c->s);

  if (h->date_len == 0 || now - h->date_at >= 1000 || now < h->date_at) {
    h->date_len = conch__srv_date(h->date, sizeof(h->date));
    h->date_at = now;
  }
  *len = h->date_len;
  return h->date;
}

/* The reason phrase (wire.h), or "Status" for one it does not name. */
static const char *reason_of(int status) {
  const char *r = conch__http_reason(status);

  return r != NULL ? r : "Status";
}

/* ---- Small helpers ------------------------------------------------------- */

static const conch_mem *mem_of(const srv_h1 *h) { return h->c->s->ep.mem; }

/* To the connection (the one copy, or TLS's encryption). */
static void put(srv_h1 *h, const void *p, size_t n) {
  if (n > 0 && conch__srv_conn_out(h->c, p, n) != 0) {
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

/* Whether the name |p| (|n| bytes, lowercase: h1parse.c's) is |lit|. */
#define NAME_IS(p, n, lit)                                                     \
  ((n) == sizeof(lit) - 1 && memcmp((p), (lit), sizeof(lit) - 1) == 0)

/* "Name: value\r\n" at the end of |b|, with a Go-style "Content-Type"
   for an HTTP/2 "content-type".  Returns 0 or CONCH_ERR_NOMEM. */
static int put_field(conch_buf *b, const conch_mem *mem, const uint8_t *p,
                     size_t n, const uint8_t *v, size_t vlen) {
  uint8_t *o;
  size_t i;

  if (conch__buf_reserve(b, mem, n + vlen + 4) != 0) {
    return CONCH_ERR_NOMEM;
  }
  o = b->data + b->len;
  for (i = 0; i < n; i++) {
    uint8_t ch = p[i];

    if ((i == 0 || p[i - 1] == '-') && ch >= 'a' && ch <= 'z') {
      ch = (uint8_t)(ch - 'a' + 'A');
    }
    o[i] = ch;
  }
  o[n] = ':';
  o[n + 1] = ' ';
  if (vlen > 0) {
    memcpy(o + n + 2, v, vlen);
  }
  o[n + 2 + vlen] = '\r';
  o[n + 3 + vlen] = '\n';
  b->len += n + vlen + 4;
  return 0;
}

/* ---- The exchange -------------------------------------------------------- */

static void ex_reset(srv_h1 *h) {
  h->rpc = NULL;
  h->active = h->req_done = h->resp_done = 0;
  h->head_req = h->http10 = h->keep = h->chunked_req = 0;
  h->req_len = UINT64_MAX;
  h->err_status = 0;
  h->want_continue = 0;
  h->discard = 0;
  h->discarded = 0;
  h->reset = 0;
  h->reset_code = 0;
  h->status = 0;
  h->has_head = h->head_only = h->committed = h->chunked = 0;
  h->resp_len = -1;
  buf_trim(h, &h->rhead);
}

/* The call is the session's to close: once its response is out, or when
   the exchange fails (the handler then hears on_cancel if it holds it). */
static void ex_close_call(srv_h1 *h, uint32_t code) {
  conch_rpc *rpc = h->rpc;

  if (rpc != NULL) {
    h->rpc = NULL;
    conch__srv_rpc_close(rpc, code);
  }
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
}

/* The response is over: the call goes; the rest of an unfinished request
   is read and dropped (up to H1_DISCARD_MAX). */
static void resp_over(srv_h1 *h) {
  h->resp_done = 1;
  ex_close_call(h, NGHTTP2_NO_ERROR);
  if (!h->req_done) {
    h->discard = 1;
  }
  ex_try_complete(h);
}

/* An answer made here; the connection closes after it. */
static void put_simple(srv_h1 *h, int status) {
  char head[320];
  char body[64];
  char date[64];
  int bn = snprintf(body, sizeof(body), "%d %s\n", status, reason_of(status));
  int n;

  (void)conch__srv_date(date, sizeof(date));
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
   the call is closed and the connection closes after. */
static void ex_fail(srv_h1 *h, int status) {
  ex_close_call(h, NGHTTP2_CANCEL);
  if (!h->resp_done) {
    if (!h->committed && status > 0) {
      put_simple(h, status);
    }
    h->resp_done = 1;
  }
  h->closing = 1;
}

/* ---- The request: front-end callbacks ------------------------------------ */

static int cb_fail(srv_h1 *h, int status) {
  h->err_status = status;
  return -1;
}

/* The origin-form path, or the path of an absolute-form target
   "http://authority/path" (whose authority wins over Host, RFC 9112
   3.2.2), as |*pp|, |*plen|: in the target, or in |path| when a "/" had
   to be put before it.  Returns 0, -1 (not a target we serve) or
   CONCH_ERR_NOMEM. */
static int split_target(srv_h1 *h, const uint8_t *u, size_t n, conch_buf *path,
                        const uint8_t **pp, size_t *plen, const uint8_t **auth,
                        size_t *authlen) {
  const uint8_t *sep;
  size_t a;
  size_t e;

  if (n > 0 && u[0] == '/') {
    *pp = u;
    *plen = n;
    return 0;
  }
  sep = NULL;
  for (a = 0; n >= 3 && a <= n - 3; a++) {
    if (u[a] == ':' && u[a + 1] == '/' && u[a + 2] == '/') {
      sep = u + a;
      break;
    }
  }
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
  if (e < n && u[e] == '/') {
    *pp = u + e;
    *plen = n - e;
  } else {
    if (conch__buf_append(path, mem_of(h), "/", 1) != 0 ||
        conch__buf_append(path, mem_of(h), u + e, n - e) != 0) {
      return CONCH_ERR_NOMEM;
    }
    *pp = conch__buf_head(path);
    *plen = conch__buf_size(path);
  }
  *auth = u + a;
  *authlen = e - a;
  return 0;
}

static const srv_sink h1_sink;

/* Host and Expect.  Returns 0, or the status to answer. */
static int scan_fields(srv_h1 *h, const conch_h1_head *hd,
                       const uint8_t **host, size_t *hostlen) {
  int nhost = 0;
  size_t i;

  for (i = 0; i < hd->nfields; i++) {
    const conch_h1_field *f = &hd->fields[i];

    /* No CR, LF or NUL in a value: the front end counted a field with a
       control byte (but HTAB) as invalid, and on_head answered 400. */
    if (NAME_IS(f->name, f->nlen, "host")) {
      nhost++;
      *host = f->value;
      *hostlen = f->vlen;
    } else if (NAME_IS(f->name, f->nlen, "expect") && !h->http10) {
      if (!name_eq(f->value, f->vlen, "100-continue")) {
        return 417;
      }
      h->want_continue = hd->body;
    }
  }
  /* RFC 9112 3.2: exactly one Host in HTTP/1.1. */
  if (nhost > 1 || (nhost == 0 && !h->http10)) {
    return 400;
  }
  return 0;
}

/* The head: checked, then the call opened and given the headers as
   HTTP/2 would (a request line's parts as pseudo-headers). */
static int on_head(void *ud, const conch_h1_head *hd) {
  srv_h1 *h = ud;
  const http_parser *hp = &h->p.p;
  const uint8_t *auth = NULL;
  size_t authlen = 0;
  conch_buf path = CONCH_BUF_INIT;
  const uint8_t *pp = NULL;
  size_t plen = 0;
  conch_rpc *rpc;
  int rv;
  size_t i;

  h->active = 1;
  h->http10 = hd->version_minor == 0;
  h->keep = http_should_keep_alive(hp) && !hp->upgrade;
  h->head_req = strcmp(hd->method, "HEAD") == 0;
  h->chunked_req = hd->chunked;
  h->req_len = hd->length;
  if (hp->http_major != 1) {
    return cb_fail(h, 505);
  }
  if (strcmp(hd->method, "GET") != 0 && !h->head_req &&
      strcmp(hd->method, "POST") != 0) {
    return cb_fail(h, 405);
  }
  if (hd->url_len > H1_URL_MAX) {
    return cb_fail(h, 414);
  }
  if (hd->nfields > H1_MAX_FIELDS) {
    return cb_fail(h, 431);
  }
  if (hd->ninvalid > 0) {
    return cb_fail(h, 400);
  }
  rv = scan_fields(h, hd, &auth, &authlen);
  if (rv != 0) {
    return cb_fail(h, rv);
  }
  rv =
      split_target(h, hd->url, hd->url_len, &path, &pp, &plen, &auth, &authlen);
  if (rv != 0) {
    conch__buf_free(&path, mem_of(h));
    if (rv == CONCH_ERR_NOMEM) {
      h->fatal = 1;
      return -1;
    }
    return cb_fail(h, 400);
  }
  if (auth == NULL || authlen == 0) {
    auth = (const uint8_t *)"localhost";
    authlen = 9;
  }
  rpc = conch__srv_rpc_open(h->c, 1, &h1_sink);
  if (rpc == NULL) {
    conch__buf_free(&path, mem_of(h));
    h->fatal = 1;
    return -1;
  }
  h->rpc = rpc;
  rv = conch__srv_rpc_header(rpc, (const uint8_t *)":method", 7,
                             (const uint8_t *)hd->method, strlen(hd->method));
  if (rv == 0) {
    rv = conch__srv_rpc_header(rpc, (const uint8_t *)":path", 5, pp, plen);
  }
  if (rv == 0) {
    rv = conch__srv_rpc_header(rpc, (const uint8_t *)":authority", 10, auth,
                               authlen);
  }
  conch__buf_free(&path, mem_of(h));
  for (i = 0; rv == 0 && i < hd->nfields; i++) {
    const conch_h1_field *f = &hd->fields[i];

    if (NAME_IS(f->name, f->nlen, "host") ||
        NAME_IS(f->name, f->nlen, "expect") ||
        NAME_IS(f->name, f->nlen, "content-length")) {
      continue;
    }
    rv = conch__srv_rpc_header(rpc, f->name, f->nlen, f->value, f->vlen);
  }
  if (rv != 0) {
    h->fatal = 1;
    return -1;
  }
  conch__srv_rpc_headers_end(rpc);
  return 0;
}

static int on_body(void *ud, const uint8_t *p, size_t n) {
  srv_h1 *h = ud;

  h->want_continue = 0; /* it did not wait */
  if (h->discard || h->resp_done) {
    h->discarded += n;
    return h->discarded > H1_DISCARD_MAX ? cb_fail(h, -1) : 0;
  }
  if (h->rpc != NULL) {
    (void)conch__srv_rpc_data(h->rpc, p, n);
  }
  return 0;
}

static int on_end(void *ud, const conch_h1_field *trailers, size_t ntrailers,
                  int keep_alive) {
  srv_h1 *h = ud;

  /* Request trailers: the protocols have no use for them. */
  (void)trailers;
  (void)ntrailers;
  (void)keep_alive; /* decided from the head */
  h->req_done = 1;
  h->want_continue = 0;
  if (h->rpc != NULL && !h->resp_done) {
    conch__srv_rpc_data_end(h->rpc);
  }
  ex_try_complete(h);
  return 0;
}

static const conch_h1p_cbs h1_cbs = {on_head, on_body, on_end};

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

/* Runs the front end over |n| bytes at |data| as far as the exchange
   allows.  Returns how many it took. */
static size_t h1_parse(srv_h1 *h, const uint8_t *data, size_t n) {
  size_t taken = 0;

  while (!h->closing && !h->fatal && taken < n) {
    const uint8_t *p = data + taken;
    size_t k = n - taken;
    int at_start = !conch__h1p_in_message(&h->p);
    size_t used = 0;
    conch_h1p_result r;

    if (h->active && h->req_done) {
      break; /* the next request waits for this one's response */
    }
    if (at_start && h->stopping) {
      h->closing = 1;
      break;
    }
    if (h->rpc != NULL && h->active && !h->discard) {
      size_t held = conch__buf_size(&h->rpc->held);

      if (held >= H1_BODY_MAX) {
        break; /* the handler paused: the client waits */
      }
      if (k > H1_BODY_MAX - held) {
        k = H1_BODY_MAX - held;
      }
    }
    r = conch__h1p_feed(&h->p, p, k, &used);
    taken += used;
    if (h->fatal || r == CONCH_H1P_NOMEM) {
      h->fatal = 1;
      break;
    }
    if (r == CONCH_H1P_MORE || r == CONCH_H1P_DONE) {
      continue;
    }
    if (r == CONCH_H1P_STOP) {
      ex_fail(h, h->err_status);
    } else if (r == CONCH_H1P_LIMIT) {
      /* Past the bound in the request line: 414; in the fields: 431. */
      ex_fail(h, !conch__h1p_head_done(&h->p) && h->p.noffs == 0 ? 414 : 431);
    } else if (HTTP_PARSER_ERRNO(&h->p.p) == HPE_INVALID_METHOD && at_start &&
               looks_like_method(p, k)) {
      ex_fail(h, 405);
    } else {
      ex_fail(h, 400);
    }
    break;
  }
  return taken;
}

/* Parses what was read ahead.  Returns 1 if it moved. */
static int h1_parse_in(srv_h1 *h) {
  size_t n = conch__buf_size(&h->in);
  size_t taken;

  if (n == 0) {
    return 0;
  }
  taken = h1_parse(h, conch__buf_head(&h->in), n);
  conch__buf_consume(&h->in, taken);
  if (conch__buf_size(&h->in) == 0) {
    buf_trim(h, &h->in);
  }
  return taken > 0;
}

/* ---- The response: the call's sink --------------------------------------- */

static srv_h1 *h1_of(const conch_rpc *rpc) {
  srv_h1 *h = rpc->conn->h1;

  return h != NULL && h->rpc == rpc ? h : NULL;
}

/* The head: kept as HTTP/1.1 header lines until it is committed. */
static int h1_head(conch_rpc *rpc, srv_hb *hb, int with_data) {
  srv_h1 *h = h1_of(rpc);
  size_t i;

  if (h == NULL || h->has_head) {
    return CONCH_ERR_STATE;
  }
  for (i = 0; i < hb->n; i++) {
    const nghttp2_nv *nv = &hb->nv[i];
    const uint8_t *name = nv->name;
    const uint8_t *value = nv->value;
    size_t nlen = nv->namelen;
    size_t vlen = nv->valuelen;

    if (name_eq(name, nlen, ":status")) {
      h->status = 0;
      if (vlen == 3 && value[0] >= '1' && value[0] <= '9' &&
          value[1] >= '0' && value[1] <= '9' && value[2] >= '0' &&
          value[2] <= '9') {
        h->status =
            (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
      }
      continue;
    }
    if (name_eq(name, nlen, "content-length")) {
      long long v = 0;
      size_t k;

      for (k = 0; k < vlen && k < 18 && value[k] >= '0' && value[k] <= '9';
           k++) {
        v = v * 10 + (value[k] - '0');
      }
      h->resp_len = k > 0 && k == vlen ? v : -1;
      continue;
    }
    if (nlen == 0 || name[0] == ':' || conch__h1_hop_by_hop(name, nlen) ||
        has_ctl(name, nlen) || has_ctl(value, vlen)) {
      continue;
    }
    if (put_field(&h->rhead, mem_of(h), name, nlen, value, vlen) != 0) {
      h->fatal = 1;
    }
  }
  if (h->fatal) {
    return CONCH_ERR_NOMEM;
  }
  if (h->status < 200) {
    h->status = 500;
  }
  h->has_head = 1;
  h->head_only = !with_data;
  h->want_continue = 0;
  conch__srv_conn_dirty(h->c);
  return 0;
}

static void h1_more(conch_rpc *rpc) { conch__srv_conn_dirty(rpc->conn); }

static void h1_reset(conch_rpc *rpc, uint32_t code) {
  srv_h1 *h = h1_of(rpc);

  if (h != NULL && !h->reset) {
    h->reset = 1;
    h->reset_code = code;
    conch__srv_conn_dirty(rpc->conn);
  }
}

/* Held bytes reached the handler: the parser reads on at the next pump
   (server.c resumes calls before it flushes). */
static void h1_consumed(conch_rpc *rpc, size_t n) {
  (void)rpc;
  (void)n;
}

static void h1_overflow(conch_rpc *rpc) {
  h1_reset(rpc, NGHTTP2_ENHANCE_YOUR_CALM);
}

static const srv_sink h1_sink = {h1_head, h1_more, h1_reset, h1_consumed,
                                 h1_overflow};

/* "Content-Length: |v|\r\n" */
static void put_length(srv_h1 *h, unsigned long long v) {
  char line[48];
  size_t n = 16;

  memcpy(line, "Content-Length: ", 16);
  n += conch__put_dec(line + n, v);
  line[n++] = '\r';
  line[n++] = '\n';
  put(h, line, n);
}

static int no_body(const srv_h1 *h) {
  return h->head_req || h->status < 200 || h->status == 204 ||
         h->status == 304;
}

/* Status line and headers.  |ended|: the whole body, |len| bytes, is at
   hand (and no trailers follow it). */
static void commit(srv_h1 *h, int ended, size_t len) {
  char line[128];
  int nobody = no_body(h);
  const char *reason = reason_of(h->status);
  size_t rlen = strlen(reason);
  size_t n;

  /* An answer before the request body ended: the rest of the body is
     read and dropped if it is short, else the connection closes. */
  if (!h->req_done &&
      (h->chunked_req ||
       (h->req_len != UINT64_MAX && h->req_len > H1_DISCARD_MAX))) {
    h->keep = 0;
  }
  if (h->stopping || (!nobody && !ended && h->http10)) {
    h->keep = 0; /* HTTP/1.0: the body ends with the connection */
  }
  /* "HTTP/1.1 %d %s\r\n" (status 200..999, from h1_head) */
  memcpy(line, "HTTP/1.1 ", 9);
  n = 9 + conch__put_dec(line + 9, (unsigned long long)h->status);
  line[n++] = ' ';
  if (rlen > sizeof(line) - n - 2) {
    rlen = sizeof(line) - n - 2;
  }
  memcpy(line + n, reason, rlen);
  n += rlen;
  line[n++] = '\r';
  line[n++] = '\n';
  put(h, line, n);
  {
    size_t dl;
    const char *d = date_field(h, &dl);
    put(h, d, dl);
  }
  put(h, conch__buf_head(&h->rhead), conch__buf_size(&h->rhead));
  if (h->head_req && h->resp_len >= 0 && h->status >= 200 &&
      h->status != 204 && h->status != 304) {
    /* HEAD: the length a GET would have (RFC 9110 8.6). */
    put_length(h, (unsigned long long)h->resp_len);
  }
  if (!nobody) {
    if (ended) {
      put_length(h, len);
    } else if (h->resp_len >= 0) {
      /* The handler's promise (a plain HTTP handler holds it to it: a
         shorter body resets the call, and the connection closes). */
      put_length(h, (unsigned long long)h->resp_len);
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
  buf_trim(h, &h->rhead);
}

/* The end of a chunked body: the last chunk, gRPC's trailers. */
static void put_last_chunk(srv_h1 *h, const conch_rpc *rpc) {
  size_t i;

  put(h, "0\r\n", 3);
  for (i = 0; i < rpc->trl.n; i++) {
    const nghttp2_nv *nv = &rpc->trl.nv[i];
    conch_buf line = CONCH_BUF_INIT;

    if (has_ctl(nv->name, nv->namelen) || has_ctl(nv->value, nv->valuelen)) {
      continue;
    }
    if (put_field(&line, mem_of(h), nv->name, nv->namelen, nv->value,
                  nv->valuelen) != 0) {
      h->fatal = 1;
    }
    put(h, conch__buf_head(&line), conch__buf_size(&line));
    conch__buf_free(&line, mem_of(h));
  }
  put(h, "\r\n", 2);
}

/* HTTP/2 error code of a reset -> the status answered for it. */
static int reset_status(uint32_t code) {
  return code == NGHTTP2_PROTOCOL_ERROR       ? 400
         : code == NGHTTP2_REFUSED_STREAM ||
                 code == NGHTTP2_ENHANCE_YOUR_CALM
             ? 503
             : 500;
}

/* Moves the response of the exchange to the connection: the head once
   the body is whole (or at |settle|: the end of the pump), then the body
   while the connection's output has room.  Returns 1 if it moved. */
static int resp_pump(srv_h1 *h, int settle) {
  conch_rpc *rpc = h->rpc;
  int moved = 0;
  int ended;

  if (!h->active || h->resp_done) {
    return 0;
  }
  if (h->reset) {
    ex_fail(h, reset_status(h->reset_code));
    return 1;
  }
  if (!h->has_head || rpc == NULL) {
    if (settle && h->want_continue && !h->closing) {
      /* A client waiting on Expect: 100-continue is told to go on. */
      puts_out(h, "HTTP/1.1 100 Continue\r\n\r\n");
      h->want_continue = 0;
      return 1;
    }
    return 0;
  }
  ended = h->head_only || rpc->out_end;
  if (!h->committed) {
    if (!ended && !settle) {
      return 0;
    }
    commit(h, ended && (rpc->trl.n == 0 || h->http10),
           h->head_only ? 0 : conch__buf_size(&rpc->out));
    moved = 1;
  }
  while (conch__buf_size(&rpc->out) > 0) {
    size_t n = conch__buf_size(&rpc->out);
    size_t have = conch__srv_conn_out_size(h->c);

    if (no_body(h)) {
      conch__buf_consume(&rpc->out, n);
      break;
    }
    if (have >= H1_OUT_HIGH) {
      break;
    }
    if (n > H1_OUT_HIGH - have) {
      n = H1_OUT_HIGH - have;
    }
    if (h->chunked) {
      char ch[CONCH_CHUNK_HEAD];

      put(h, ch, conch__h1_chunk_head(n, ch));
      put(h, conch__buf_head(&rpc->out), n);
      put(h, "\r\n", 2);
    } else {
      put(h, conch__buf_head(&rpc->out), n);
    }
    conch__buf_consume(&rpc->out, n);
    moved = 1;
  }
  if (conch__buf_size(&rpc->out) == 0 && rpc->out.cap > H1_BUF_KEEP) {
    conch__buf_free(&rpc->out, mem_of(h));
  }
  if (conch__buf_size(&rpc->out) == 0 && ended) {
    if (h->chunked) {
      put_last_chunk(h, rpc);
    }
    resp_over(h);
    moved = 1;
  }
  return moved;
}

/* ---- Lifecycle ----------------------------------------------------------- */

int conch__srv_h1_start(srv_conn *c) {
  srv_h1 *h = conch__calloc(c->s->ep.mem, 1, sizeof(*h));

  if (h == NULL) {
    return CONCH_ERR_NOMEM;
  }
  h->c = c;
  h->resp_len = -1;
  h->req_len = UINT64_MAX;
  c->h1 = h;
  conch__h1p_init(&h->p, 1, c->s->ep.mem, H1_HEAD_MAX, &h1_cbs, h);
  return 0;
}

/* The calls are gone by now (conch__srv_conn_drop_rpcs()). */
void conch__srv_h1_free(srv_conn *c) {
  srv_h1 *h = c->h1;
  const conch_mem *mem = c->s->ep.mem;

  if (h == NULL) {
    return;
  }
  conch__h1p_free(&h->p);
  conch__buf_free(&h->in, mem);
  conch__buf_free(&h->rhead, mem);
  conch__free(mem, h);
  c->h1 = NULL;
}

void conch__srv_h1_goaway(srv_conn *c) {
  c->h1->stopping = 1;
  conch__srv_conn_dirty(c);
}

void conch__srv_h1_eof(srv_conn *c) {
  c->h1->eof = 1;
  conch__srv_conn_dirty(c);
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
    ex_fail(h, 0);
    return;
  }
  if (conch__buf_size(&h->in) > 0) {
    return;
  }
  if (h->active || conch__h1p_in_message(&h->p)) {
    ex_fail(h, 400);
  } else {
    h->closing = 1;
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
  conch__srv_conn_dirty(c);
  if (conch__buf_size(&h->in) == 0) {
    /* Parsed where it lies; only the rest is kept. */
    size_t taken = h1_parse(h, p, n);

    if (h->fatal) {
      return CONCH_ERR_NOMEM;
    }
    if (h->closing) {
      return 0;
    }
    p += taken;
    n -= taken;
  }
  if (n > 0 && conch__buf_append(&h->in, c->s->ep.mem, p, n) != 0) {
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

int conch__srv_h1_done(const srv_conn *c) { return c->h1->closing; }

/* ---- Pumping ------------------------------------------------------------- */

int conch__srv_h1_produce(srv_conn *c) {
  srv_h1 *h = c->h1;
  int any = 0;
  int i;

  if (c->lingering) {
    return 0;
  }
  if (h->stopping && !h->active) {
    h->closing = 1;
  }
  for (i = 0; i < H1_PUMP_MAX; i++) {
    int moved = h1_parse_in(h);

    moved |= resp_pump(h, 0);
    if (!moved) {
      moved = resp_pump(h, 1);
    }
    if (h->fatal) {
      return -1;
    }
    if (!moved) {
      break;
    }
    any = 1;
    if (conch__srv_conn_out_size(c) >= H1_OUT_HIGH) {
      break; /* server.c writes, then asks again */
    }
  }
  if (i == H1_PUMP_MAX) {
    conch__srv_conn_dirty(c); /* let the other connections have their turn */
  }
  h1_check_eof(h);
  return any;
}
