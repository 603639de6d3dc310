/* Connections without sockets, Node or sleeps: the in-memory transport
   (tests/support/memxport.c) carries the bytes, an nghttp2 server session
   (tests/support/h2peer.c, which never answers a PING here) plays the
   HTTP/2 peer, and time is the transport's clock.  Covered:
   the h2c SETTINGS exchange and a unary call over it, the fallback to
   HTTP/1.1 when the server answers the preface in HTTP/1.x, a GOAWAY that
   sends a waiting call to a new connection, the keepalive PING timeout
   and the sessions' keepalive decision (a function of the time passed in),
   a read error and a refused open.  The failing-allocator sweep over the
   same transport is unit/test_failmem.c. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <nghttp2/nghttp2.h>

#include "client_int.h"
#include "conn_int.h"
#include "h1.h"
#include "list.h"
#include "h2peer.h"
#include "memxport.h"
#include "session.h"

#define URL "http://127.0.0.1:8080"

/* ---- The client -------------------------------------------------------- */

typedef struct result {
  int closes;
  conch_code code;
  char msg[256];
  char body[64];
} result;

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  result *r = ud;
  (void)call;
  if (n < sizeof(r->body)) {
    memcpy(r->body, p, n);
    r->body[n] = '\0';
  }
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  result *r = ud;
  (void)call;
  (void)t;
  r->closes++;
  r->code = st->code;
  snprintf(r->msg, sizeof(r->msg), "%s", conch_status_message(st));
}

static const conch_call_handler handler = {NULL, NULL, on_raw, NULL,
                                           on_close};
static const conch_method method = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL,
                                    NULL, 0};

static conch_client *client(memx *m, long keepalive_ms) {
  conch_client_opts *o;
  conch_client *c;
  memx_init(m);
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(m, o);
  if (keepalive_ms > 0) {
    assert_int_equal(conch_client_opts_set_keepalive(o, keepalive_ms, 500), 0);
  }
  assert_int_equal(conch_client_new(&c, URL, o), 0);
  conch_client_opts_free(o);
  memx_attach(m, c);
  return c;
}

static conch_call *start(conch_client *c, result *r) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_call *call;
  memset(r, 0, sizeof(*r));
  o.timeout_ms = 60000;
  assert_int_equal(conch_call_start(c, &method, &o, &handler, r, &call), 0);
  assert_int_equal(conch_call_send_raw(call, "hi", 2), 0);
  return call;
}

static conch_conn *first_conn(conch_client *c) {
  assert_true(c->conns.next != &c->conns);
  return CONCH_CONTAINER(c->conns.next, conch_conn, link);
}

/* ---- Tests ------------------------------------------------------------- */

static void test_settings_and_unary(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m, 0);
  conch_call *call = start(c, &r);
  conch_conn *conn;
  (void)state;

  memx_pump(&m, 16);
  assert_int_equal(m.opens, 1);
  assert_non_null(memx_last(&m));
  /* The client speaks first: the preface, then its SETTINGS. */
  assert_true(memx_last(&m)->out_len >= 24);
  assert_memory_equal(memx_last(&m)->out, NGHTTP2_CLIENT_MAGIC, 24);
  h2peer_new(&h, memx_last(&m), 7, H2PEER_NO_PING_ACK);
  h2peer_exchange(&m, &h);
  conn = first_conn(c);
  assert_int_equal(conn->state, CONCH_CONN_READY);
  assert_true(conn->peer_settings);
  assert_int_equal(nghttp2_session_get_remote_settings(
                       conn->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS),
                   7);
  assert_true(h.settings_acked);
  assert_int_equal(h.nstreams, 1);
  assert_true(h.streams[0].ended);
  assert_int_equal(r.closes, 0);
  h2peer_reply(&h, h.streams[0].id, "application/proto", "ok", 2, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.body, "ok");
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

static void test_http1_fallback(void **state) {
  static const char no_h2[] =
      "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
      "Content-Length: 0\r\n\r\n";
  static const char ok[] = "HTTP/1.1 200 OK\r\n"
                           "Content-Type: application/proto\r\n"
                           "Content-Length: 2\r\n\r\nok";
  memx m;
  result r;
  conch_client *c = client(&m, 0);
  conch_call *call = start(c, &r);
  memx_conn *second;
  (void)state;

  memx_pump(&m, 16);
  assert_int_equal(m.opens, 1);
  memx_feed(m.conns[0], no_h2, sizeof(no_h2) - 1);
  m.conns[0]->eof = 1;
  memx_pump(&m, 16);
  /* The call went to a new connection, which speaks HTTP/1.1. */
  assert_int_equal(r.closes, 0);
  assert_int_equal(m.opens, 2);
  assert_false(m.conns[0]->open);
  second = m.conns[1];
  assert_true(second->out_len > 20);
  assert_memory_equal(second->out, "POST /t.v1.T/M HTTP/1.1\r\n", 25);
  memx_feed(second, ok, sizeof(ok) - 1);
  memx_pump(&m, 16);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.body, "ok");
  assert_true(c->h1);
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);
}

static void test_goaway_requeues(void **state) {
  memx m;
  h2peer h1, h2;
  result ra, rb;
  conch_client *c = client(&m, 0);
  conch_call *a = start(c, &ra), *b = start(c, &rb);
  (void)state;

  memx_pump(&m, 16);
  assert_int_equal(m.opens, 1);
  h2peer_new(&h1, m.conns[0], 1,
             H2PEER_NO_PING_ACK); /* one stream at a time: b waits */
  h2peer_exchange(&m, &h1);
  assert_int_equal(h1.nstreams, 1);
  assert_int_equal(m.opens, 1);
  assert_int_equal(rb.closes, 0);
  /* The server goes away: a (stream 1) may finish, b never started here. */
  assert_int_equal(nghttp2_submit_goaway(h1.s, NGHTTP2_FLAG_NONE,
                                         h1.streams[0].id, NGHTTP2_NO_ERROR,
                                         NULL, 0),
                   0);
  h2peer_exchange(&m, &h1);
  assert_int_equal(m.opens, 2);
  assert_int_equal(rb.closes, 0);
  h2peer_new(&h2, m.conns[1], 100, H2PEER_NO_PING_ACK);
  h2peer_exchange(&m, &h2);
  assert_int_equal(h2.nstreams, 1);
  h2peer_reply(&h2, h2.streams[0].id, "application/proto", "b", 1, NULL);
  h2peer_reply(&h1, h1.streams[0].id, "application/proto", "a", 1, NULL);
  h2peer_exchange(&m, &h2);
  h2peer_exchange(&m, &h1);
  assert_int_equal(ra.closes, 1);
  assert_int_equal(ra.code, CONCH_CODE_OK);
  assert_string_equal(ra.body, "a");
  assert_int_equal(rb.closes, 1);
  assert_int_equal(rb.code, CONCH_CODE_OK);
  assert_string_equal(rb.body, "b");
  conch_call_free(a);
  conch_call_free(b);
  conch_client_free(c);
  h2peer_free(&h1);
  h2peer_free(&h2);
  memx_clear(&m);
}

static void test_keepalive_timeout(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m, 1000);
  conch_call *call = start(c, &r);
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, H2PEER_NO_PING_ACK);
  h2peer_exchange(&m, &h);
  assert_int_equal(first_conn(c)->state, CONCH_CONN_READY);
  assert_int_equal(h.pings, 0);
  memx_advance(&m, 999);
  h2peer_io(&h);
  assert_int_equal(h.pings, 0);
  memx_advance(&m, 1); /* the interval: a PING goes out */
  h2peer_io(&h);
  assert_int_equal(h.pings, 1);
  /* The server read it and stays silent. */
  memx_advance(&m, 499);
  assert_int_equal(r.closes, 0);
  memx_advance(&m, 1); /* the PING timeout */
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(r.msg, "did not answer a PING within 500 ms"));
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* The keepalive decision alone: the session's pure function of the time
   passed in, asked directly with no timer running. */
static void test_keepalive_decision(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m, 1000);
  conch_call *call = start(c, &r);
  conch_conn *conn;
  int64_t t0, next = -1;
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, H2PEER_NO_PING_ACK);
  h2peer_exchange(&m, &h);
  conn = first_conn(c);
  assert_int_equal(conn->state, CONCH_CONN_READY);
  assert_ptr_equal(conn->ops, &conch__h2_ops);
  t0 = conn->last_read;
  assert_int_equal(conn->ops->keepalive(conn, t0 + 999, &next), CONCH_KA_WAIT);
  assert_true(next == t0 + 1000);
  assert_int_equal(conn->ops->keepalive(conn, t0 + 1000, &next), CONCH_KA_PING);
  assert_true(next == t0 + 1500);
  /* A PING outstanding: dead once its timeout passed without a byte. */
  conn->ping_sent = t0 + 1000;
  assert_int_equal(conn->ops->keepalive(conn, t0 + 1499, &next), CONCH_KA_WAIT);
  assert_true(next == t0 + 1500);
  assert_int_equal(conn->ops->keepalive(conn, t0 + 1500, &next), CONCH_KA_DEAD);
  /* A byte after the PING: alive, the interval counts from it. */
  conn->last_read = t0 + 1200;
  assert_int_equal(conn->ops->keepalive(conn, t0 + 1500, &next), CONCH_KA_WAIT);
  assert_true(next == t0 + 2200);
  conn->ping_sent = 0;
  conn->last_read = t0;
  /* HTTP/1.1 has no PING: its table never keeps a connection alive. */
  assert_int_equal(conch__h1_ops.keepalive(conn, t0 + 5000, &next),
                   CONCH_KA_OFF);
  /* Nothing happened to the connection meanwhile. */
  assert_int_equal(h.pings, 0);
  assert_int_equal(r.closes, 0);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

static void test_read_error(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m, 0);
  conch_call *call = start(c, &r);
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, H2PEER_NO_PING_ACK);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 1);
  memx_last(&m)->read_err = ECONNRESET;
  memx_pump(&m, 16);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(r.msg, "read from 127.0.0.1:8080 failed"));
  assert_non_null(strstr(r.msg, strerror(ECONNRESET)));
  assert_false(memx_last(&m)->open);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* A transport that refuses: the call fails unavailable with its reason,
   and a transport missing a hook is refused by the setter. */
static void test_refused_and_bad_transport(void **state) {
  memx m;
  result r;
  conch_client *c = client(&m, 0);
  conch_call *call;
  conch_client_opts *o;
  conch_transport t;
  (void)state;

  m.refuse = ECONNREFUSED;
  call = start(c, &r);
  memx_pump(&m, 16);
  assert_int_equal(m.opens, 1);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(r.msg, strerror(ECONNREFUSED)));
  conch_call_free(call);
  conch_client_free(c);
  memx_clear(&m);

  assert_int_equal(conch_client_opts_new(&o), 0);
  memset(&t, 0, sizeof(t));
  assert_int_equal(conch_client_opts_set_transport(o, &t), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_transport(NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_transport(o, NULL), 0);
  conch_client_opts_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_settings_and_unary),
      cmocka_unit_test(test_http1_fallback),
      cmocka_unit_test(test_goaway_requeues),
      cmocka_unit_test(test_keepalive_timeout),
      cmocka_unit_test(test_keepalive_decision),
      cmocka_unit_test(test_read_error),
      cmocka_unit_test(test_refused_and_bad_transport),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
