/* The HTTP/1.1 session (runtime/http/h1.c) and its front end (runtime/http/h1parse.c)
   without sockets or peers: the in-memory transport
   (tests/support/memxport.c) carries the bytes, the test plays the server
   byte for byte, time is the transport's clock.  Covered: the request as
   written (request line, Host, Content-Length or chunked framing), a
   unary response with Content-Length and the connection kept alive for
   the next call, a chunked stream with trailers, "Connection: close", the
   keep-alive race (a reused connection closed before any byte of the
   answer: the call goes again, once, elsewhere), bytes beyond a response,
   a malformed response, response headers over the limit, a cancel
   mid-response, back-pressure (a pull-mode call that does not read stops
   the socket being read), and the front end alone on pipelined requests
   (the server role). */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "client_int.h"
#include "conn_int.h"
#include "h1parse.h"
#include "memxport.h"

#define URL "http://127.0.0.1:8080"

typedef struct result {
  int closes;
  int msgs;
  conch_code code;
  char msg[256];
  char body[64];
  char trailer[16];
} result;

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  result *r = ud;
  (void)call;
  r->msgs++;
  if (n < sizeof(r->body)) {
    memcpy(r->body, p, n);
    r->body[n] = '\0';
  }
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  result *r = ud;
  long i;
  (void)call;
  r->closes++;
  r->code = st->code;
  snprintf(r->msg, sizeof(r->msg), "%s", conch_status_message(st));
  i = t != NULL ? conch_metadata_find(t, "x-trailer", 0) : -1;
  if (i >= 0) {
    const char *n;
    const uint8_t *v;
    size_t vlen;
    assert_int_equal(conch_metadata_at(t, (size_t)i, &n, &v, &vlen), 0);
    snprintf(r->trailer, sizeof(r->trailer), "%.*s", (int)vlen,
             (const char *)v);
  }
}

static const conch_call_handler handler = {NULL, NULL, on_raw, NULL, on_close};
static const conch_method unary = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL, NULL,
                                   0};
static const conch_method sstream = {"/t.v1.T/S", CONCH_STREAM_SERVER, NULL,
                                     NULL, 0};
static const conch_method cstream = {"/t.v1.T/C", CONCH_STREAM_CLIENT, NULL,
                                     NULL, 0};

static conch_client *client(memx *m) {
  conch_client_opts *o;
  conch_client *c;
  memx_init(m);
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(m, o);
  assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  assert_int_equal(conch_client_new(&c, URL, o), 0);
  conch_client_opts_free(o);
  memx_attach(m, c);
  return c;
}

static conch_call *start(conch_client *c, const conch_method *me, result *r,
                         int close_send) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_call *call;
  memset(r, 0, sizeof(*r));
  o.timeout_ms = 60000;
  assert_int_equal(conch_call_start(c, me, &o, &handler, r, &call), 0);
  assert_int_equal(conch_call_send_raw(call, "hi", 2), 0);
  if (close_send && me->kind != CONCH_STREAM_UNARY &&
      me->kind != CONCH_STREAM_SERVER) {
    assert_int_equal(conch_call_close_send(call), 0);
  }
  return call;
}

/* What the client wrote on |mc| as a string (the test's requests are
   text). */
static const char *written(memx_conn *mc) {
  static char buf[4096];
  size_t n = mc->out_len < sizeof(buf) - 1 ? mc->out_len : sizeof(buf) - 1;
  memcpy(buf, mc->out, n);
  buf[n] = '\0';
  return buf;
}

static void feed(memx *m, memx_conn *mc, const char *s) {
  memx_feed(mc, s, strlen(s));
  memx_pump(m, 32);
}

static const char ok_unary[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: application/proto\r\n"
                               "Content-Length: 2\r\n\r\nok";

/* ---- The session -------------------------------------------------------- */

static void test_unary_and_keep_alive(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &unary, &r, 1);
  const char *req;
  (void)state;

  memx_pump(&m, 32);
  assert_int_equal(m.opens, 1);
  req = written(m.conns[0]);
  assert_memory_equal(
      req, "POST /t.v1.T/M HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n", 47);
  assert_non_null(strstr(req, "\r\ncontent-type: application/proto\r\n"));
  assert_non_null(strstr(req, "\r\ncontent-length: 2\r\n\r\nhi"));
  assert_null(strstr(req, "transfer-encoding"));
  assert_null(strstr(req, ":scheme"));
  memx_drain(m.conns[0]);
  feed(&m, m.conns[0], ok_unary);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.body, "ok");
  conch_call_free(call);

  /* The next call takes the same connection. */
  call = start(c, &unary, &r, 1);
  memx_pump(&m, 32);
  assert_int_equal(m.opens, 1);
  assert_memory_equal(written(m.conns[0]), "POST /t.v1.T/M HTTP/1.1\r\n", 25);
  feed(&m, m.conns[0], ok_unary);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_true(m.conns[0]->open);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

/* A Connect end-stream message: flags 2, "{}". */
static const char end_msg[] = "\x02\x00\x00\x00\x02{}";

static void test_chunked_stream_with_trailers(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &sstream, &r, 1);
  char chunk[64];
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0],
       "HTTP/1.1 200 OK\r\nContent-Type: application/connect+proto\r\n"
       "Transfer-Encoding: chunked\r\nTrailer: X-Trailer\r\n\r\n");
  assert_int_equal(r.msgs, 0);
  /* One message split over two chunks, then the end-stream message. */
  memx_feed(m.conns[0], "4\r\n\x00\x00\x00\x00\r\n", 9);
  memx_pump(&m, 32);
  memx_feed(m.conns[0], "3\r\n\x02ok\r\n", 8);
  memx_pump(&m, 32);
  assert_int_equal(r.msgs, 1);
  assert_string_equal(r.body, "ok");
  snprintf(chunk, sizeof(chunk), "7\r\n");
  memx_feed(m.conns[0], chunk, strlen(chunk));
  memx_feed(m.conns[0], end_msg, 7);
  feed(&m, m.conns[0], "\r\n0\r\nX-Trailer:  yes \r\n\r\n");
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.trailer, "yes");
  assert_true(m.conns[0]->open); /* kept alive */
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_chunked_request(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &cstream, &r, 0);
  const char *req;
  (void)state;

  memx_pump(&m, 32);
  req = written(m.conns[0]);
  assert_memory_equal(req, "POST /t.v1.T/C HTTP/1.1\r\n", 25);
  assert_non_null(strstr(req, "\r\ntransfer-encoding: chunked\r\n\r\n"));
  assert_null(strstr(req, "content-length"));
  /* The enveloped message (5 + 2 bytes) is one chunk; no end yet. */
  assert_non_null(strstr(req, "\r\n\r\n7\r\n"));
  assert_null(strstr(req, "0\r\n\r\n"));
  memx_drain(m.conns[0]);
  assert_int_equal(conch_call_close_send(call), 0);
  memx_pump(&m, 32);
  assert_string_equal(written(m.conns[0]), "0\r\n\r\n");
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_connection_close(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &unary, &r, 1);
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0],
       "HTTP/1.1 200 OK\r\nConnection: close\r\n"
       "Content-Type: application/proto\r\nContent-Length: 2\r\n\r\nok");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_false(m.conns[0]->open);
  conch_call_free(call);
  call = start(c, &unary, &r, 1);
  memx_pump(&m, 32);
  assert_int_equal(m.opens, 2);
  feed(&m, m.conns[1], ok_unary);
  assert_int_equal(r.code, CONCH_CODE_OK);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_keep_alive_race_retries(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &unary, &r, 1);
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0], ok_unary);
  conch_call_free(call);
  call = start(c, &unary, &r, 1);
  memx_pump(&m, 32);
  /* The server closes the reused connection without a byte of answer. */
  m.conns[0]->eof = 1;
  memx_pump(&m, 32);
  assert_int_equal(r.closes, 0);
  assert_int_equal(m.opens, 2);
  assert_non_null(strstr(written(m.conns[1]), "\r\n\r\nhi"));
  feed(&m, m.conns[1], ok_unary);
  assert_int_equal(r.code, CONCH_CODE_OK);
  conch_call_free(call);

  /* A fresh connection closed the same way is not retried. */
  call = start(c, &unary, &r, 1);
  memx_pump(&m, 32);
  m.conns[1]->eof = 1;
  memx_pump(&m, 32);
  if (m.opens == 3) {
    m.conns[2]->eof = 1;
    memx_pump(&m, 32);
  }
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_bytes_beyond_the_response(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &unary, &r, 1);
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0],
       "HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\n"
       "Content-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.body, "ok");
  assert_false(m.conns[0]->open); /* out of step: closed */
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_malformed_and_too_large(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &unary, &r, 1);
  char big[2048];
  int i;
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0], "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n");
  assert_int_equal(r.code, CONCH_CODE_INTERNAL);
  assert_non_null(strstr(r.msg, "malformed HTTP/1.1 response"));
  assert_false(m.conns[0]->open);
  conch_call_free(call);

  call = start(c, &unary, &r, 1);
  memx_pump(&m, 32);
  assert_int_equal(m.opens, 2);
  feed(&m, m.conns[1], "HTTP/1.1 200 OK\r\n");
  memset(big, 'v', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  /* 48 fields of 2 KiB: past 16 KiB of default max_header_list + slack. */
  for (i = 0; i < 48 && r.closes == 0; i++) {
    feed(&m, m.conns[1], "x-big: ");
    feed(&m, m.conns[1], big);
    feed(&m, m.conns[1], "\r\n");
  }
  assert_int_equal(r.closes, 1);
  assert_true(r.code == CONCH_CODE_RESOURCE_EXHAUSTED ||
              r.code == CONCH_CODE_INTERNAL);
  assert_false(m.conns[1]->open);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_cancel_closes(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &sstream, &r, 1);
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0],
       "HTTP/1.1 200 OK\r\nContent-Type: application/connect+proto\r\n"
       "Transfer-Encoding: chunked\r\n\r\n");
  assert_int_equal(conch_call_cancel(call), 0);
  memx_pump(&m, 32);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_CANCELED);
  assert_false(m.conns[0]->open); /* HTTP/1.1 cannot abandon a request */
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

/* A pull-mode call that takes nothing: once a stream window's worth of
   body waits in it, the socket is not read any more. */
static void test_back_pressure(void **state) {
  memx m;
  conch_client *c = client(&m);
  conch_call *call;
  static uint8_t msg[5 + 65536];
  size_t window = c->o.stream_window, fed = 0, i;
  char head[32];
  const uint8_t *p;
  size_t len;
  (void)state;

  assert_int_equal(conch_call_start(c, &sstream, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_raw(call, "hi", 2), 0);
  memx_pump(&m, 32);
  feed(&m, m.conns[0],
       "HTTP/1.1 200 OK\r\nContent-Type: application/connect+proto\r\n"
       "Transfer-Encoding: chunked\r\n\r\n");
  memset(msg, 'x', sizeof(msg));
  msg[0] = 0;
  msg[1] = 0;
  msg[2] = 1;
  msg[3] = 0;
  msg[4] = 0; /* 65536 bytes of payload */
  snprintf(head, sizeof(head), "%zx\r\n", sizeof(msg));
  for (i = 0; fed < 2 * window; i++) {
    memx_feed(m.conns[0], head, strlen(head));
    memx_feed(m.conns[0], msg, sizeof(msg));
    memx_feed(m.conns[0], "\r\n", 2);
    fed += sizeof(msg);
  }
  memx_pump(&m, 64);
  /* Bytes are left unread: at most a window and one read past it went. */
  assert_true(m.conns[0]->in_off < m.conns[0]->in_len);
  assert_true(m.conns[0]->in_off <= window + CONCH_CONN_READ_BUF + 4096);
  /* Taking the messages lets the rest in. */
  for (i = 0; i < 1000 && m.conns[0]->in_off < m.conns[0]->in_len; i++) {
    while (conch_call_recv_raw(call, &p, &len) == 0) {
      assert_int_equal(len, 65536);
    }
    memx_pump(&m, 8);
  }
  assert_int_equal(m.conns[0]->in_off, m.conns[0]->in_len);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

/* ---- The front end alone (the server role) ------------------------------ */

typedef struct preq {
  int heads, ends, keep;
  char url[64];
  char body[64];
  size_t blen;
  char ctype[32];
} preq;

static int p_head(void *ud, const conch_h1_head *h) {
  preq *q = ud;
  size_t i;
  q->heads++;
  snprintf(q->url, sizeof(q->url), "%s %.*s", h->method, (int)h->url_len,
           (const char *)h->url);
  for (i = 0; i < h->nfields; i++) {
    /* Connection is HTTP/1.1's own: never handed over. */
    assert_false(h->fields[i].nlen == 10 &&
                 memcmp(h->fields[i].name, "connection", 10) == 0);
    if (h->fields[i].nlen == 12 &&
        memcmp(h->fields[i].name, "content-type", 12) == 0) {
      snprintf(q->ctype, sizeof(q->ctype), "%.*s", (int)h->fields[i].vlen,
               (const char *)h->fields[i].value);
    }
  }
  q->blen = 0;
  return 0;
}

static int p_body(void *ud, const uint8_t *p, size_t n) {
  preq *q = ud;
  assert_true(q->blen + n < sizeof(q->body));
  memcpy(q->body + q->blen, p, n);
  q->blen += n;
  q->body[q->blen] = '\0';
  return 0;
}

static int p_end(void *ud, const conch_h1_field *t, size_t nt, int keep) {
  preq *q = ud;
  (void)t;
  (void)nt;
  q->ends++;
  q->keep = keep;
  return 0;
}

static const conch_h1p_cbs pcbs = {p_head, p_body, p_end};

static void test_parser_pipelined_requests(void **state) {
  static const char two[] =
      "POST /a HTTP/1.1\r\nHost: x\r\nContent-Type:  application/proto \r\n"
      "Content-Length: 3\r\n\r\nabc"
      "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n2\r\nde\r\n0\r\n\r\n";
  conch_h1p p;
  preq q;
  size_t used, off = 0;
  (void)state;

  memset(&q, 0, sizeof(q));
  conch__h1p_init(&p, 1, conch_mem_default(), 4096, &pcbs, &q);
  assert_int_equal(
      conch__h1p_feed(&p, (const uint8_t *)two, sizeof(two) - 1, &used),
      CONCH_H1P_DONE);
  /* The first request ends where the second begins. */
  assert_memory_equal(two + used, "POST /b", 7);
  assert_string_equal(q.url, "POST /a");
  assert_string_equal(q.ctype, "application/proto");
  assert_string_equal(q.body, "abc");
  assert_true(q.keep);
  off = used;
  assert_int_equal(conch__h1p_feed(&p, (const uint8_t *)two + off,
                                   sizeof(two) - 1 - off, &used),
                   CONCH_H1P_DONE);
  assert_int_equal(off + used, sizeof(two) - 1);
  assert_string_equal(q.url, "POST /b");
  assert_string_equal(q.body, "de");
  assert_false(q.keep);
  assert_int_equal(q.ends, 2);
  conch__h1p_free(&p);

  /* A head over the limit. */
  memset(&q, 0, sizeof(q));
  conch__h1p_init(&p, 1, conch_mem_default(), 16, &pcbs, &q);
  assert_int_equal(
      conch__h1p_feed(&p, (const uint8_t *)two, sizeof(two) - 1, &used),
      CONCH_H1P_LIMIT);
  assert_int_equal(q.heads, 0);
  conch__h1p_free(&p);

  /* Not HTTP. */
  memset(&q, 0, sizeof(q));
  conch__h1p_init(&p, 0, conch_mem_default(), 4096, &pcbs, &q);
  assert_int_equal(conch__h1p_feed(&p, (const uint8_t *)"xyz\r\n", 5, &used),
                   CONCH_H1P_BAD);
  conch__h1p_free(&p);
}

/* The names of the fields handed over, "name=value;" each. */
static char seen[256];

static void seen_add(const conch_h1_field *f, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    size_t at = strlen(seen);
    snprintf(seen + at, sizeof(seen) - at, "%.*s=%.*s;", (int)f[i].nlen,
             (const char *)f[i].name, (int)f[i].vlen, (const char *)f[i].value);
  }
}

static int s_head(void *ud, const conch_h1_head *h) {
  (void)ud;
  seen_add(h->fields, h->nfields);
  return 0;
}

static int s_body(void *ud, const uint8_t *p, size_t n) {
  (void)ud;
  (void)p;
  (void)n;
  return 0;
}

static int s_end(void *ud, const conch_h1_field *t, size_t nt, int keep) {
  (void)ud;
  (void)keep;
  strcat(seen, "|");
  seen_add(t, nt);
  return 0;
}

static const conch_h1p_cbs scbs = {s_head, s_body, s_end};

/* RFC 9110 7.6.1: a field named in Connection is the connection's, not
   the message's: neither role hands it over (nor Connection itself);
   names are matched without case, a Connection field may list several
   and there may be several Connection fields. */
static void test_parser_connection_options(void **state) {
  static const char req[] =
      "POST /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Hop\r\n"
      "x-hop: 1\r\nX-Keep: 2\r\nX-Other: 3\r\n"
      "Connection:  ,x-other ,\r\nContent-Length: 0\r\n\r\n";
  static const char resp[] =
      "HTTP/1.1 200 OK\r\nConnection: X-PRIVATE\r\nX-Private: y\r\n"
      "Content-Type: a/b\r\nX-Private-Not: z\r\n"
      "Transfer-Encoding: chunked\r\n\r\n"
      "0\r\nGrpc-Status: 0\r\n\r\n";
  conch_h1p p;
  size_t used;
  (void)state;

  seen[0] = '\0';
  conch__h1p_init(&p, 1, conch_mem_default(), 4096, &scbs, NULL);
  assert_int_equal(
      conch__h1p_feed(&p, (const uint8_t *)req, sizeof(req) - 1, &used),
      CONCH_H1P_DONE);
  assert_int_equal(used, sizeof(req) - 1);
  assert_string_equal(seen, "host=x;x-keep=2;content-length=0;|");
  conch__h1p_free(&p);

  seen[0] = '\0';
  conch__h1p_init(&p, 0, conch_mem_default(), 4096, &scbs, NULL);
  assert_int_equal(
      conch__h1p_feed(&p, (const uint8_t *)resp, sizeof(resp) - 1, &used),
      CONCH_H1P_DONE);
  assert_string_equal(seen, "content-type=a/b;x-private-not=z;|grpc-status=0;");
  conch__h1p_free(&p);
}

static size_t invalid_seen;

static int v_head(void *ud, const conch_h1_head *h) {
  (void)ud;
  invalid_seen = h->ninvalid;
  seen_add(h->fields, h->nfields);
  return 0;
}

static const conch_h1p_cbs vcbs = {v_head, s_body, s_end};

/* Field values are checked past their first eight bytes too (the check
   goes a word at a time): HTAB and obs-text anywhere are kept, a field
   with a control byte is never handed over. */
static void test_parser_field_values(void **state) {
  static const char *const bad[] = {"0123456789abc\001x", "0123456789ab\177",
                                    "012345678\033", "\037"};
  static const char good[] = "POST / HTTP/1.1\r\nX-A: 0123456789\tab \r\n"
                             "X-B: 01234567\200\377xyz\r\n\r\n";
  char req[128];
  conch_h1p p;
  conch_h1p_result r;
  size_t used, i;
  (void)state;

  seen[0] = '\0';
  conch__h1p_init(&p, 1, conch_mem_default(), 4096, &vcbs, NULL);
  assert_int_equal(
      conch__h1p_feed(&p, (const uint8_t *)good, sizeof(good) - 1, &used),
      CONCH_H1P_DONE);
  assert_int_equal(invalid_seen, 0);
  assert_string_equal(seen, "x-a=0123456789\tab;x-b=01234567\200\377xyz;|");
  conch__h1p_free(&p);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    snprintf(req, sizeof(req), "POST / HTTP/1.1\r\nX-A: %s\r\nX-B: 1\r\n\r\n",
             bad[i]);
    seen[0] = '\0';
    conch__h1p_init(&p, 1, conch_mem_default(), 4096, &vcbs, NULL);
    r = conch__h1p_feed(&p, (const uint8_t *)req, strlen(req), &used);
    /* Refused by libhttp-parser, or the field dropped as invalid: never
       handed over. */
    if (r != CONCH_H1P_BAD) {
      assert_int_equal(r, CONCH_H1P_DONE);
      assert_int_equal(invalid_seen, 1);
      assert_string_equal(seen, "x-b=1;|");
    }
    conch__h1p_free(&p);
  }
}

static void test_parser_response_to_eof(void **state) {
  static const char r[] = "HTTP/1.0 200 OK\r\nContent-Type: a/b\r\n\r\nhello";
  conch_h1p p;
  preq q;
  size_t used;
  (void)state;

  memset(&q, 0, sizeof(q));
  conch__h1p_init(&p, 0, conch_mem_default(), 4096, &pcbs, &q);
  assert_int_equal(
      conch__h1p_feed(&p, (const uint8_t *)r, sizeof(r) - 1, &used),
      CONCH_H1P_MORE);
  assert_true(conch__h1p_in_message(&p));
  assert_true(conch__h1p_head_done(&p));
  assert_string_equal(q.body, "hello");
  assert_int_equal(q.ends, 0);
  assert_int_equal(conch__h1p_feed(&p, NULL, 0, &used), CONCH_H1P_DONE);
  assert_int_equal(q.ends, 1);
  assert_false(q.keep);
  conch__h1p_free(&p);
}

/* An alarm due when a pull-mode turn begins runs before that turn's I/O:
   a cancel scheduled 5 ms after the request, on a loop that was busy for
   10 ms, comes before the response that arrived meanwhile (the official
   conformance suite's cancel-after-close-send, on a loaded machine). */
static void cancel_cb(conch_client *c, void *ud) {
  (void)c;
  conch_call_cancel(ud);
}

static void test_due_alarm_before_io(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &sstream, &r, 1);
  struct pollfd pfd;
  (void)state;

  memx_pump(&m, 32);
  feed(&m, m.conns[0],
       "HTTP/1.1 200 OK\r\nContent-Type: application/connect+proto\r\n"
       "Transfer-Encoding: chunked\r\n\r\n");
  assert_int_equal(conch_client_alarm(c, 5, cancel_cb, call, NULL), 0);
  m.now += 10; /* busy: the alarm is due, nothing handled yet */
  memx_feed(m.conns[0], "7\r\n\x00\x00\x00\x00\x02ok\r\n", 12);
  pfd.fd = m.conns[0]->handle;
  pfd.events = POLLIN;
  pfd.revents = POLLIN;
  assert_int_equal(conch_client_process(c, &pfd, 1), 0);
  memx_pump(&m, 32);
  assert_int_equal(r.msgs, 0);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_CANCELED);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_and_keep_alive),
      cmocka_unit_test(test_chunked_stream_with_trailers),
      cmocka_unit_test(test_chunked_request),
      cmocka_unit_test(test_connection_close),
      cmocka_unit_test(test_keep_alive_race_retries),
      cmocka_unit_test(test_bytes_beyond_the_response),
      cmocka_unit_test(test_malformed_and_too_large),
      cmocka_unit_test(test_cancel_closes),
      cmocka_unit_test(test_back_pressure),
      cmocka_unit_test(test_due_alarm_before_io),
      cmocka_unit_test(test_parser_pipelined_requests),
      cmocka_unit_test(test_parser_response_to_eof),
      cmocka_unit_test(test_parser_connection_options),
      cmocka_unit_test(test_parser_field_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
