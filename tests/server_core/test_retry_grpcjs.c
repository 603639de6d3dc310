/* Retries by policy (conch/retry.h) against a grpc-js server failing on
   purpose (tests/cli/grpcjs_server.mjs, "retry:KEY:N[:PUSHBACK]"): the
   client retries unavailable until the answer, the server sees
   grpc-previous-rpc-attempts on the attempt it answers, the pushback
   trailer of grpc-js delays the next attempt, max_attempts bounds them, and
   a method not marked idempotent is not retried once sent; hedging's
   next attempt starts at once after a non-fatal failure.  Exits 77
   (skipped) when tests/node_modules has not the peers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <conch/conch.h>
#include <conch/retry.h>

#include "peer.h"
#include "svc.h"
#include "wait.h"

static conch_peer peer;

static conch_client *client(int non_idempotent) {
  conch_retry_policy p = CONCH_RETRY_POLICY_INIT;
  conch_client_opts *o;
  conch_client *c;
  char url[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", peer.port);
  p.max_attempts = 4;
  p.initial_backoff_ms = 10;
  p.max_backoff_ms = 50;
  p.backoff_multiplier = 2;
  p.retryable_codes = CONCH_RETRY_CODE(CONCH_CODE_UNAVAILABLE);
  p.non_idempotent = non_idempotent;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC), 0);
  assert_int_equal(conch_client_opts_set_retry(o, "conchtest.v1.TestService",
                                               &p),
                   0);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

typedef struct answer {
  conch_code code;
  unsigned attempts;
  unsigned index;   /* calls the server saw for the key */
  char prev[16];    /* its grpc-previous-rpc-attempts */
} answer;

static answer unary(conch_client *c, const conch_method *m, const char *p) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  conch_call *call;
  answer a;
  int rv;
  memset(&a, 0, sizeof(a));
  req.payload.data = (uint8_t *)p;
  req.payload.len = strlen(p);
  assert_int_equal(conch_call_start(c, m, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  rv = conch_call_recv_sync(call, &out);
  if (rv == 0) {
    const Conchtest__V1__Response *r = (const Conchtest__V1__Response *)out;
    a.index = r->index;
    snprintf(a.prev, sizeof(a.prev), "%.*s", (int)r->payload.len,
             (const char *)r->payload.data);
    conch_message_free(c, out);
  }
  rv = conch_call_wait_sync(call);
  assert_true(rv == 0 || rv == CONCH_ERR_RPC);
  a.code = conch_call_status(call)->code;
  a.attempts = conch_call_attempts(call);
  conch_call_free(call);
  return a;
}

static void test_retried_by_grpcjs(void **state) {
  static const conch_method m_unary_unknown = {
      SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
      &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};
  conch_client *c = client(0);
  long long t0;
  answer a;
  (void)state;
  a = unary(c, &m_unary, "retry:a:2");
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_int_equal(a.attempts, 3);
  assert_int_equal(a.index, 3);
  assert_string_equal(a.prev, "2");
  /* grpc-js's pushback trailer: the next attempt waits 300 ms. */
  t0 = conch_now_ms();
  a = unary(c, &m_unary, "retry:b:1:300");
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_int_equal(a.attempts, 2);
  assert_true(conch_now_ms() - t0 >= 300);
  /* Exhausted. */
  a = unary(c, &m_unary, "retry:c:9");
  assert_int_equal(a.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(a.attempts, 4);
  /* Not marked idempotent, and sent: one attempt; the next call (a new
     one, not a retry) is answered at the server's second. */
  a = unary(c, &m_unary_unknown, "retry:d:1");
  assert_int_equal(a.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(a.attempts, 1);
  a = unary(c, &m_unary_unknown, "retry:d:1");
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_int_equal(a.index, 2);
  assert_string_equal(a.prev, "");
  conch_client_free(c);
  c = client(1); /* non_idempotent: as gRPC */
  a = unary(c, &m_unary_unknown, "retry:e:1");
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_int_equal(a.attempts, 2);
  assert_string_equal(a.prev, "1");
  conch_client_free(c);
}

/* Hedging against grpc-js: an attempt that fails with a non-fatal code
   starts the next at once (well before the 10 s hedging delay), which
   carries grpc-previous-rpc-attempts 1. */
static void test_hedged_by_grpcjs(void **state) {
  conch_hedge_policy h = CONCH_HEDGE_POLICY_INIT;
  conch_client_opts *o;
  conch_client *c;
  char url[64];
  long long t0;
  answer a;
  (void)state;
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", peer.port);
  h.max_attempts = 3;
  h.hedging_delay_ms = 10000;
  h.non_fatal_codes = CONCH_RETRY_CODE(CONCH_CODE_UNAVAILABLE);
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC), 0);
  assert_int_equal(conch_client_opts_set_hedge(o, NULL, &h), 0);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  t0 = conch_now_ms();
  a = unary(c, &m_unary, "retry:h:1");
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_int_equal(a.attempts, 2);
  assert_int_equal(a.index, 2);
  assert_string_equal(a.prev, "1");
  assert_true(conch_now_ms() - t0 < 5000);
  a = unary(c, &m_unary, "retry:i:9");
  assert_int_equal(a.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(a.attempts, 3);
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_retried_by_grpcjs),
      cmocka_unit_test(test_hedged_by_grpcjs),
  };
  static const char *const need[] = {"@grpc/grpc-js", "@grpc/proto-loader",
                                     "@grpc/reflection", NULL};
  const char *const args[] = {PROTO_DIR, "--reflection", "none", NULL};
  int rv;
  if (!conch_peer_have_modules(NODE_MODULES, need)) {
    return 77;
  }
  if (conch_peer_start(&peer, GRPCJS_SERVER, args) != 0) {
    return 1;
  }
  rv = cmocka_run_group_tests(tests, NULL, NULL);
  conch_peer_stop(&peer);
  return rv;
}
