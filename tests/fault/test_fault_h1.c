/* conch over HTTP/1.1 against a server that breaks HTTP/1.1 on purpose
   (tests/fault/h1.mjs): every fault ends in the documented code without a
   hang or a leak, and the client stays usable afterwards.

   Codes: bytes that are not an HTTP/1.1 response -> internal; connection
   closed before or inside the response head -> unavailable; a body cut
   short of its Content-Length or inside a chunk -> internal (as a reset
   HTTP/2 stream); the deadline -> deadline_exceeded and a cancel ->
   canceled, both closing the connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "client_int.h"
#include "peer.h"
#include "wait.h"

#define MSG "\x0a\x02ok"

static conch_peer peer;
static char url[64];

static int group_setup(void **state) {
  (void)state;
  if (conch_peer_start(&peer, CONCH_SOURCE_DIR "/tests/fault/h1.mjs", NULL) !=
      0) {
    return -1;
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", peer.port);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  conch_peer_stop(&peer);
  return 0;
}

static conch_client *h1_client(void) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

typedef struct outcome {
  conch_code code;
  int messages;
  size_t last_len;
  char message[256];
  int64_t elapsed_ms;
  char trailer[16];
} outcome;

static void run(conch_client *c, const char *scenario, conch_stream_kind kind,
                long timeout_ms, long cancel_after_ms, outcome *out) {
  char path[128];
  conch_method m;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call *call;
  const uint8_t *data;
  size_t len;
  int64_t t0 = conch__now_ms();
  int rv;

  snprintf(path, sizeof(path), "/conchfault.v1.Fault/%s", scenario);
  memset(&m, 0, sizeof(m));
  m.path = path;
  m.kind = kind;
  opts.timeout_ms = timeout_ms;
  memset(out, 0, sizeof(*out));
  assert_int_equal(conch_call_start(c, &m, &opts, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_raw(call, MSG, 4), 0);
  for (;;) {
    rv = conch_call_recv_raw(call, &data, &len);
    if (rv == 0) {
      out->messages++;
      out->last_len = len;
      continue;
    }
    if (rv != CONCH_ERR_AGAIN) {
      break;
    }
    if (cancel_after_ms > 0 && conch__now_ms() - t0 >= cancel_after_ms) {
      conch_call_cancel(call);
      cancel_after_ms = 0;
    }
    assert_int_equal(conch_client_run(c, 50), 0);
    assert_true(conch__now_ms() - t0 < 15000); /* nothing hangs */
  }
  assert_int_equal(conch_call_wait_sync(call),
                   rv == CONCH_ERR_EOF ? 0 : CONCH_ERR_RPC);
  out->code = conch_call_status(call)->code;
  snprintf(out->message, sizeof(out->message), "%s",
           conch_status_message(conch_call_status(call)));
  {
    const conch_metadata *t = conch_call_trailers(call);
    long i = t != NULL ? conch_metadata_find(t, "x-trailer", 0) : -1;
    if (i >= 0) {
      const char *n;
      const uint8_t *v;
      size_t vlen;
      assert_int_equal(conch_metadata_at(t, (size_t)i, &n, &v, &vlen), 0);
      snprintf(out->trailer, sizeof(out->trailer), "%.*s", (int)vlen,
               (const char *)v);
    }
  }
  out->elapsed_ms = conch__now_ms() - t0;
  conch_call_free(call);
}

static void check_healthy(conch_client *c) {
  outcome o;
  run(c, "Echo", CONCH_STREAM_UNARY, 5000, 0, &o);
  assert_int_equal(o.code, CONCH_CODE_OK);
  assert_int_equal(o.messages, 1);
  run(c, "EchoStream", CONCH_STREAM_SERVER, 5000, 0, &o);
  assert_int_equal(o.code, CONCH_CODE_OK);
  assert_int_equal(o.messages, 1);
}

typedef struct fault_case {
  const char *scenario;
  conch_stream_kind kind;
  conch_code code;
  int min_messages;
  long timeout_ms;
  long cancel_after_ms;
  const char *msg_part; /* in the status message, or NULL */
} fault_case;

#define U CONCH_STREAM_UNARY
#define S CONCH_STREAM_SERVER

static const fault_case cases[] = {
    {"Echo", U, CONCH_CODE_OK, 1, 5000, 0, NULL},
    {"EchoStream", S, CONCH_CODE_OK, 1, 5000, 0, NULL},
    {"Garbage", U, CONCH_CODE_INTERNAL, 0, 5000, 0, "malformed HTTP/1.1"},
    /* Content-Length rules: the body is its first 2 bytes, the rest is
       out of step and closes the connection. */
    {"ShortLength", U, CONCH_CODE_OK, 1, 5000, 0, NULL},
    {"LongLength", U, CONCH_CODE_INTERNAL, 0, 5000, 0, "truncated"},
    {"ChunkCut", S, CONCH_CODE_INTERNAL, 1, 5000, 0, "truncated"},
    {"CloseInHead", U, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, "closed"},
    {"Never", U, CONCH_CODE_DEADLINE_EXCEEDED, 0, 300, 0, NULL},
    {"Never", S, CONCH_CODE_CANCELED, 0, 5000, 200, NULL},
    {"ConnClose", U, CONCH_CODE_OK, 1, 5000, 0, NULL},
    {"Http10", U, CONCH_CODE_OK, 1, 5000, 0, NULL},
    {"Continue", U, CONCH_CODE_OK, 1, 5000, 0, NULL},
    {"Trailers", S, CONCH_CODE_OK, 1, 5000, 0, NULL},
};

static void test_faults(void **state) {
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const fault_case *fc = &cases[i];
    conch_client *c = h1_client();
    outcome o;
    run(c, fc->scenario, fc->kind, fc->timeout_ms, fc->cancel_after_ms, &o);
    if (o.code != fc->code || o.messages < fc->min_messages ||
        (fc->msg_part != NULL && strstr(o.message, fc->msg_part) == NULL)) {
      fail_msg("%s: code %d (want %d), %d messages, '%s'", fc->scenario, o.code,
               fc->code, o.messages, o.message);
    }
    if (strcmp(fc->scenario, "ShortLength") == 0) {
      assert_int_equal(o.last_len, 2);
    }
    if (strcmp(fc->scenario, "Trailers") == 0) {
      assert_string_equal(o.trailer, "yes");
    }
    assert_true(o.elapsed_ms < 3000);
    check_healthy(c);
    conch_client_free(c);
  }
}

static void stats3(conch_client *c, int *conns, int *reqs, int *idle_closes) {
  conch_method m;
  conch_call *call;
  const uint8_t *data;
  size_t len;
  char buf[64];
  memset(&m, 0, sizeof(m));
  m.path = "/conchfault.v1.Fault/Stats";
  m.kind = CONCH_STREAM_UNARY;
  assert_int_equal(conch_call_start(c, &m, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_raw(call, MSG, 4), 0);
  while (conch_call_recv_raw(call, &data, &len) == CONCH_ERR_AGAIN) {
    assert_int_equal(conch_client_run(c, 50), 0);
  }
  snprintf(buf, sizeof(buf), "%.*s", (int)len, (const char *)data);
  assert_int_equal(sscanf(buf, "%d %d %d", conns, reqs, idle_closes), 3);
  conch_call_free(call);
}

static void stats(conch_client *c, int *conns, int *reqs) {
  int idle_closes;

  stats3(c, conns, reqs, &idle_closes);
}

typedef struct idle_wait {
  conch_client *observer; /* its own connection: c's stays idle */
  int want;
} idle_wait;

/* The server has closed |want| idle connections. */
static int idle_closed(void *arg) {
  idle_wait *w = arg;
  int conns, reqs, n;

  stats3(w->observer, &conns, &reqs, &n);
  return n >= w->want;
}

/* Calls reuse a kept-alive connection; a server closing it while idle
   makes the next call go again on a new one, transparently. */
static void test_keep_alive_and_idle_close(void **state) {
  conch_client *c = h1_client();
  idle_wait w;
  outcome o;
  int c0, r0, c1, r1, i;
  (void)state;

  stats(c, &c0, &r0);
  for (i = 0; i < 5; i++) {
    run(c, "Echo", U, 5000, 0, &o);
    assert_int_equal(o.code, CONCH_CODE_OK);
  }
  stats(c, &c1, &r1);
  assert_int_equal(c1, c0); /* one connection for all of them */
  assert_int_equal(r1, r0 + 6);

  w.observer = h1_client();
  stats3(w.observer, &c1, &r1, &w.want);
  for (i = 0; i < 3; i++) {
    run(c, "IdleClose", U, 5000, 0, &o);
    assert_int_equal(o.code, CONCH_CODE_OK);
    /* The server closes; the client is not polling. */
    w.want++;
    assert_true(conch_wait_until(idle_closed, &w, CONCH_WAIT_MS));
    run(c, "Echo", U, 5000, 0, &o);
    if (o.code != CONCH_CODE_OK) {
      fail_msg("after an idle close: code %d '%s'", o.code, o.message);
    }
  }
  /* The server reads the request and closes without a byte of answer:
     the call goes again, once, on a new connection. */
  for (i = 0; i < 3; i++) {
    stats(c, &c0, &r0);
    run(c, "CloseNext", U, 5000, 0, &o);
    assert_int_equal(o.code, CONCH_CODE_OK);
    run(c, "Echo", U, 5000, 0, &o);
    if (o.code != CONCH_CODE_OK) {
      fail_msg("after a dropped request: code %d '%s'", o.code, o.message);
    }
    stats(c, &c1, &r1);
    assert_int_equal(c1, c0 + 1);
    assert_int_equal(r1, r0 + 4); /* stats, CloseNext, Echo twice */
  }
  /* Only once: a server that drops every request gets no second retry
     (a fresh connection that closes without an answer is unavailable). */
  conch_client_free(w.observer);
  conch_client_free(c);
}

static void test_refused(void **state) {
  conch_client_opts *o;
  conch_client *c;
  outcome out;
  (void)state;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", o), 0);
  conch_client_opts_free(o);
  run(c, "Echo", U, 5000, 0, &out);
  assert_int_equal(out.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(out.message, "refused"));
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_faults),
      cmocka_unit_test(test_keep_alive_and_idle_close),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
