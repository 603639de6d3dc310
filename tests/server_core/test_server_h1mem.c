/* The server core's HTTP/1.1 session (runtime/server_h1.c) on an
   in-memory transport: the test writes the request bytes, drives the
   server itself (conch_server_on_io) and reads what it wrote.  No
   sockets, no threads: pipelining, chunked bodies both ways, gRPC's
   chunked trailers, both kinds of back-pressure and malformed requests,
   the same on every run. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "svc.h"

#define HANDLE 4242

/* One connection: |in| test -> server, |out| server -> test. */
typedef struct mt {
  uint8_t *in;
  size_t in_len, in_off;
  char *out;
  size_t out_len, out_cap;
  int open;   /* 0: the server reads EOF after |in| */
  int block;  /* writes take nothing: a client that does not read */
  int closed; /* the server closed its end */
} mt;

static long mt_read(void *ud, int h, void *buf, size_t len) {
  mt *t = ud;
  size_t n = t->in_len - t->in_off;
  (void)h;
  if (n == 0) {
    return t->open ? -EAGAIN : 0;
  }
  if (n > len) {
    n = len;
  }
  memcpy(buf, t->in + t->in_off, n);
  t->in_off += n;
  return (long)n;
}

static long mt_write(void *ud, int h, const void *buf, size_t len) {
  mt *t = ud;
  (void)h;
  if (t->block) {
    return -EAGAIN;
  }
  if (t->out_len + len + 1 > t->out_cap) {
    size_t cap = (t->out_len + len + 1) * 2;
    t->out = realloc(t->out, cap);
    assert_non_null(t->out);
    t->out_cap = cap;
  }
  memcpy(t->out + t->out_len, buf, len);
  t->out_len += len;
  t->out[t->out_len] = '\0';
  return (long)len;
}

static void mt_close(void *ud, int h) {
  (void)h;
  ((mt *)ud)->closed = 1;
}

static void mt_send(mt *t, const void *p, size_t n) {
  t->in = realloc(t->in, t->in_len + n);
  assert_non_null(t->in);
  memcpy(t->in + t->in_len, p, n);
  t->in_len += n;
}

static void mt_sends(mt *t, const char *s) { mt_send(t, s, strlen(s)); }

static fixture fx;
static mt t;
static conch_server_transport tr = {mt_read, mt_write, mt_close, NULL};

static int setup(void **state) {
  (void)state;
  memset(&fx, 0, sizeof(fx));
  memset(&t, 0, sizeof(t));
  t.open = 1;
  fx_start(&fx, NULL, 0);
  fx_pause(&fx); /* this thread drives the server */
  tr.user_data = &t;
  assert_int_equal(conch_server_adopt(fx.s, HANDLE, &tr), 0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  conch_server_free(fx.s);
  free(t.in);
  free(t.out);
  return 0;
}

/* Lets the server act |rounds| times. */
static void drive(int rounds) {
  for (int i = 0; i < rounds && !t.closed; i++) {
    assert_int_equal(
        conch_server_on_io(fx.s, HANDLE, CONCH_IO_READ | CONCH_IO_WRITE), 0);
  }
}

/* |needle| in what the server wrote, at or after |from| (bodies hold
   NULs: not strstr). */
static const char *find(const char *from, const char *needle) {
  if (from == NULL || t.out == NULL) {
    return NULL;
  }
  return memmem(from, (size_t)(t.out + t.out_len - from), needle,
                strlen(needle));
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; p != NULL && (p = find(p, needle)) != NULL;
       p += strlen(needle)) {
    n++;
  }
  return n;
}

/* A request message (conchtest.v1.Request), enveloped when |env|. */
static uint8_t *req_bytes(const Conchtest__V1__Request *r, int env,
                          size_t *len) {
  size_t n = conchtest__v1__request__get_packed_size(r);
  uint8_t *b = malloc(n + 5);
  assert_non_null(b);
  conchtest__v1__request__pack(r, b + 5);
  b[0] = 0;
  b[1] = (uint8_t)(n >> 24);
  b[2] = (uint8_t)(n >> 16);
  b[3] = (uint8_t)(n >> 8);
  b[4] = (uint8_t)n;
  if (!env) {
    memmove(b, b + 5, n);
    *len = n;
  } else {
    *len = n + 5;
  }
  return b;
}

#define GET_OK                                                                 \
  "GET " SVC "Unary?encoding=json&message=%7B%22payload%22%3A%22aGk%3D%22%7D " \
  "HTTP/1.1\r\nHost: x\r\n\r\n"

/* Three requests in one write: answered in order, one at a time, each
   with a Content-Length (the whole response was at hand). */
static void test_pipelining(void **state) {
  Conchtest__V1__Request r = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *b;
  size_t n;
  char head[256];
  (void)state;
  r.payload.data = (uint8_t *)"post";
  r.payload.len = 4;
  b = req_bytes(&r, 0, &n);
  snprintf(head, sizeof(head),
           "POST " SVC "Unary HTTP/1.1\r\nHost: x\r\n"
           "Content-Type: application/proto\r\nContent-Length: %zu\r\n\r\n",
           n);
  mt_sends(&t, GET_OK);
  mt_sends(&t, head);
  mt_send(&t, b, n);
  mt_sends(&t, GET_OK);
  free(b);
  drive(20);
  assert_int_equal(count(t.out, "HTTP/1.1 200 OK\r\n"), 3);
  assert_int_equal(count(t.out, "Content-Length: "), 3);
  assert_int_equal(count(t.out, "Transfer-Encoding"), 0);
  assert_int_equal(count(t.out, "Date: "), 3);
  /* In order: GET's JSON, the POST's proto, the GET's JSON. */
  assert_non_null(find(t.out, "aGk="));
  assert_true(find(t.out, "aGk=") < find(t.out, "post"));
  assert_non_null(find(find(t.out, "post"), "aGk="));
  assert_false(t.closed);
  /* The client ends: the connection closes. */
  t.open = 0;
  drive(20);
  assert_true(t.closed);
}

/* A chunked request body in pieces over several reads. */
static void test_chunked_request(void **state) {
  Conchtest__V1__Request r = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *b;
  size_t n;
  char ch[32];
  (void)state;
  r.payload.data = (uint8_t *)"chunked-body";
  r.payload.len = 12;
  b = req_bytes(&r, 0, &n);
  mt_sends(&t, "POST " SVC "Unary HTTP/1.1\r\nHost: x\r\n"
               "Content-Type: application/proto\r\n"
               "Transfer-Encoding: chunked\r\n\r\n");
  snprintf(ch, sizeof(ch), "%zx\r\n", n / 2);
  mt_sends(&t, ch);
  mt_send(&t, b, n / 2);
  mt_sends(&t, "\r\n");
  drive(5);
  assert_int_equal(t.out_len, 0); /* not whole yet */
  snprintf(ch, sizeof(ch), "%zx\r\n", n - n / 2);
  mt_sends(&t, ch);
  mt_send(&t, b + n / 2, n - n / 2);
  mt_sends(&t, "\r\n0\r\nX-Trailer: t\r\n\r\n");
  free(b);
  drive(10);
  assert_non_null(find(t.out, "HTTP/1.1 200 OK\r\n"));
  assert_non_null(find(t.out, "chunked-body"));
  assert_false(t.closed);
}

/* A server stream goes out chunked; gRPC's status as chunked trailers. */
static void test_chunked_response_trailers(void **state) {
  Conchtest__V1__Request r = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *b;
  size_t n;
  char head[256];
  const char *last;
  (void)state;
  r.response_count = 3;
  r.response_size = 10;
  b = req_bytes(&r, 1, &n);
  snprintf(head, sizeof(head),
           "POST " SVC "ServerStream HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n"
           "Content-Type: application/grpc\r\nContent-Length: %zu\r\n\r\n",
           n);
  mt_sends(&t, head);
  mt_send(&t, b, n);
  free(b);
  drive(20);
  assert_non_null(find(t.out, "HTTP/1.1 200 OK\r\n"));
  assert_non_null(find(t.out, "Transfer-Encoding: chunked\r\n"));
  assert_null(find(t.out, "Content-Length"));
  last = find(t.out, "\r\n0\r\n");
  assert_non_null(last);
  assert_non_null(find(last, "Grpc-Status: 0\r\n"));
  assert_int_equal(strcmp(t.out + t.out_len - 4, "\r\n\r\n"), 0);
}

/* A client that does not read: the server stops writing, the handler's
   sends are refused; once it reads, the whole stream arrives. */
static void test_slow_reader(void **state) {
  Conchtest__V1__Request r = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *b;
  size_t n;
  char head[256];
  (void)state;
  r.response_count = 2000;
  r.response_size = 1000;
  b = req_bytes(&r, 1, &n);
  snprintf(head, sizeof(head),
           "POST " SVC "ServerStream HTTP/1.1\r\nHost: x\r\n"
           "Content-Type: application/connect+proto\r\n"
           "Content-Length: %zu\r\n\r\n",
           n);
  mt_sends(&t, head);
  mt_send(&t, b, n);
  free(b);
  t.block = 1;
  drive(50);
  assert_int_equal(t.out_len, 0);
  assert_true(atomic_load(&fx.again) > 0); /* back-pressure reached it */
  t.block = 0;
  for (int i = 0; i < 2000 && find(t.out, "\r\n0\r\n\r\n") == NULL;
       i++) {
    drive(1);
  }
  assert_non_null(find(t.out, "\r\n0\r\n\r\n"));
  assert_true(t.out_len > 2000 * 1000);
}

/* A handler that pauses its call: the body is not read past a bound, so
   the client stalls; resumed, the rest is read. */
static void test_paused_request(void **state) {
  Conchtest__V1__Request r = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *b;
  size_t n;
  size_t total = 0;
  char ch[32];
  (void)state;
  mt_sends(&t, "POST " SVC "ClientStream HTTP/1.1\r\nHost: x\r\n"
               "Content-Type: application/connect+proto\r\n"
               "Transfer-Encoding: chunked\r\n\r\n");
  r.delay_ms = 1; /* the first message pauses the call */
  b = req_bytes(&r, 1, &n);
  snprintf(ch, sizeof(ch), "%zx\r\n", n);
  mt_sends(&t, ch);
  mt_send(&t, b, n);
  mt_sends(&t, "\r\n");
  free(b);
  r.delay_ms = 0;
  r.payload.data = calloc(1, 4000);
  r.payload.len = 4000;
  b = req_bytes(&r, 1, &n);
  free(r.payload.data);
  for (int i = 0; i < 500; i++) { /* 2 MB */
    snprintf(ch, sizeof(ch), "%zx\r\n", n);
    mt_sends(&t, ch);
    mt_send(&t, b, n);
    mt_sends(&t, "\r\n");
    total += n;
  }
  free(b);
  mt_sends(&t, "0\r\n\r\n");
  drive(200);
  assert_true(atomic_load(&fx.held) == 1);
  /* Read: the held bound and the read-ahead, not the 2 MB. */
  assert_true(t.in_off < 256 * 1024);
  assert_int_equal(t.out_len, 0);
  for (int i = 0; i < MAX_HELD; i++) {
    if (fx.held_rpc[i] != NULL) {
      assert_int_equal(conch_rpc_resume(fx.held_rpc[i]), 0);
      fx.held_rpc[i] = NULL;
      atomic_fetch_sub(&fx.held, 1);
    }
  }
  for (int i = 0; i < 5000 && t.out_len == 0; i++) {
    drive(1);
  }
  assert_int_equal(t.in_off, t.in_len);
  assert_non_null(find(t.out, "HTTP/1.1 200 OK\r\n"));
  (void)total;
}

/* Each is answered and the connection closed. */
static void refused(const char *req, const char *status) {
  setup(NULL);
  mt_sends(&t, req);
  drive(20);
  assert_non_null(t.out);
  assert_int_equal(strncmp(t.out, status, strlen(status)), 0);
  assert_non_null(find(t.out, "Connection: close\r\n"));
  t.open = 0; /* the client reads the answer, then goes */
  drive(20);
  assert_true(t.closed);
  teardown(NULL);
}

static void test_malformed(void **state) {
  (void)state;
  teardown(NULL); /* each case on a server of its own */
  refused("\x01\x02 garbage\r\n\r\n", "HTTP/1.1 400 ");
  refused("GET / HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/1.1 505 ");
  refused("FOO / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 405 ");
  refused("PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
          "HTTP/1.1 405 ");
  refused("GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400 "); /* no Host */
  refused("GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", "HTTP/1.1 400 ");
  refused("POST " SVC "Unary HTTP/1.1\r\nHost: x\r\n"
          "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
          "HTTP/1.1 400 ");
  refused("POST " SVC "Unary HTTP/1.1\r\nHost: x\r\nExpect: magic\r\n"
          "Content-Length: 1\r\n\r\n",
          "HTTP/1.1 417 ");
  setup(NULL);
}

/* Expect: 100-continue: told to go on when nothing else was said. */
static void test_expect_continue(void **state) {
  Conchtest__V1__Request r = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *b;
  size_t n;
  char head[256];
  (void)state;
  r.payload.data = (uint8_t *)"cont";
  r.payload.len = 4;
  b = req_bytes(&r, 0, &n);
  snprintf(head, sizeof(head),
           "POST " SVC "Unary HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
           "Content-Type: application/proto\r\nContent-Length: %zu\r\n\r\n",
           n);
  mt_sends(&t, head);
  drive(5);
  assert_string_equal(t.out, "HTTP/1.1 100 Continue\r\n\r\n");
  mt_send(&t, b, n);
  free(b);
  drive(10);
  assert_non_null(find(t.out, "HTTP/1.1 200 OK\r\n"));
  assert_non_null(find(t.out, "cont"));
}

/* Bytes the server's allocator holds (a size before each block). */
static size_t live_bytes;

static void *cm_malloc(size_t n, void *ud) {
  size_t *p = malloc(n + 16);
  (void)ud;
  if (p == NULL) {
    return NULL;
  }
  p[0] = n;
  live_bytes += n;
  return (char *)p + 16;
}

static void cm_free(void *q, void *ud) {
  size_t *p;
  (void)ud;
  if (q == NULL) {
    return;
  }
  p = (size_t *)(void *)((char *)q - 16);
  live_bytes -= p[0];
  free(p);
}

static void *cm_calloc(size_t k, size_t n, void *ud) {
  void *q = cm_malloc(k * n, ud);
  if (q != NULL) {
    memset(q, 0, k * n);
  }
  return q;
}

static void *cm_realloc(void *q, size_t n, void *ud) {
  size_t *p, *np, old;
  if (q == NULL) {
    return cm_malloc(n, ud);
  }
  p = (size_t *)(void *)((char *)q - 16);
  old = p[0];
  np = realloc(p, n + 16);
  if (np == NULL) {
    return NULL;
  }
  np[0] = n;
  live_bytes = live_bytes - old + n;
  return (char *)np + 16;
}

/* nghttp2's server session (kilobytes) is made only for a connection
   that sends the HTTP/2 preface: one that has said nothing yet holds
   far less, and an HTTP/1.1 one answers without ever making one. */
static void test_session_on_demand(void **state) {
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  conch_mem cm = {NULL, cm_malloc, cm_free, cm_calloc, cm_realloc};
  conch_server_opts *o;
  conch_server_transport tr2 = {mt_read, mt_write, mt_close, NULL};
  mt t2;
  size_t base, quiet, h2;
  (void)state;

  memset(&fx, 0, sizeof(fx));
  memset(&t, 0, sizeof(t));
  memset(&t2, 0, sizeof(t2));
  t.open = t2.open = 1;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_mem(o, &cm), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  fx_pause(&fx); /* this thread drives the server: |live_bytes| is ours */

  base = live_bytes;
  tr.user_data = &t;
  assert_int_equal(conch_server_adopt(fx.s, HANDLE, &tr), 0);
  drive(2);
  quiet = live_bytes - base;

  base = live_bytes;
  tr2.user_data = &t2;
  mt_send(&t2, preface, sizeof(preface) - 1);
  assert_int_equal(conch_server_adopt(fx.s, HANDLE + 1, &tr2), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(
        conch_server_on_io(fx.s, HANDLE + 1, CONCH_IO_READ | CONCH_IO_WRITE),
        0);
  }
  h2 = live_bytes - base;
  assert_true(t2.out_len > 0); /* our SETTINGS */
  assert_false(t2.closed);
  /* The session is most of an HTTP/2 connection's memory. */
  assert_true(quiet * 2 < h2);

  /* The quiet one turns out to speak HTTP/1.1, and is answered. */
  mt_sends(&t, GET_OK);
  drive(10);
  assert_non_null(find(t.out, "HTTP/1.1 200 OK\r\n"));
  conch_server_free(fx.s); /* while |t2| stands */
  fx.s = NULL;
  assert_true(t2.closed);
  assert_int_equal(live_bytes, 0);
  free(t2.in);
  free(t2.out);
}

/* Many connections, their handles chosen to share slots in the server's
   table of connections by descriptor (multiples of 64, and neighbours),
   closed in an order that moves entries about: each event still reaches
   its own connection, and a closed one is gone. */
#define MANY 300
static void test_many_handles(void **state) {
  static mt ts[MANY];
  static conch_server_transport trs[MANY];
  int h[MANY];
  (void)state;

  memset(&fx, 0, sizeof(fx));
  memset(&t, 0, sizeof(t));
  fx_start(&fx, NULL, 0);
  fx_pause(&fx);
  for (int i = 0; i < MANY; i++) {
    memset(&ts[i], 0, sizeof(ts[i]));
    ts[i].open = 1;
    trs[i] = (conch_server_transport){mt_read, mt_write, mt_close, &ts[i]};
    h[i] = i % 3 == 0 ? (i + 1) * 64 : 100000 + i * 7;
    assert_int_equal(conch_server_adopt(fx.s, h[i], &trs[i]), 0);
  }
  /* Every other connection of the first half, then every fifth of the
     rest, hangs up. */
  for (int i = 0; i < MANY; i++) {
    if ((i < MANY / 2 && i % 2 == 0) || (i >= MANY / 2 && i % 5 == 0)) {
      ts[i].open = 0;
      for (int k = 0; k < 5 && !ts[i].closed; k++) {
        assert_int_equal(conch_server_on_io(fx.s, h[i], CONCH_IO_READ), 0);
      }
      assert_true(ts[i].closed);
    }
  }
  /* The rest ask, last first, and each is answered on its own. */
  for (int i = MANY - 1; i >= 0; i--) {
    if (ts[i].closed) {
      continue;
    }
    mt_sends(&ts[i], GET_OK);
    for (int k = 0; k < 10 && ts[i].out == NULL; k++) {
      assert_int_equal(
          conch_server_on_io(fx.s, h[i], CONCH_IO_READ | CONCH_IO_WRITE), 0);
    }
    assert_non_null(ts[i].out);
    assert_non_null(strstr(ts[i].out, "HTTP/1.1 200 OK\r\n"));
  }
  /* Nobody answered twice or out of turn. */
  for (int i = 0; i < MANY; i++) {
    if (ts[i].out != NULL) {
      const char *first = strstr(ts[i].out, "HTTP/1.1 200");
      assert_null(strstr(first + 1, "HTTP/1.1 200"));
    }
  }
  conch_server_free(fx.s);
  fx.s = NULL;
  for (int i = 0; i < MANY; i++) {
    assert_true(ts[i].closed);
    free(ts[i].in);
    free(ts[i].out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pipelining, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chunked_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chunked_response_trailers, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_slow_reader, setup, teardown),
      cmocka_unit_test_setup_teardown(test_paused_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expect_continue, setup, teardown),
      cmocka_unit_test_teardown(test_session_on_demand, teardown),
      cmocka_unit_test_teardown(test_many_handles, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
