/* Load balancing over real sockets: several server cores (svc.h), on TCP
   ports and a Unix socket, behind one client with static targets
   (conch_client_opts_set_targets): round_robin spreads calls (counted by
   each server), pick_first sticks to one server and fails over when it
   stops, and a server whose health (set by the application on the core)
   is NOT_SERVING takes no new calls until it is SERVING again.  Tests wait
   for conditions with generous limits, never for a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "svc.h"

#define LIMIT 400 /* calls (or loop turns) before a condition counts as never  \
                   */

static void target_of(const fixture *fx, char *out, size_t cap) {
  if (fx->sock[0] != '\0') {
    snprintf(out, cap, "unix:%s", fx->sock);
  } else {
    /* "http://127.0.0.1:PORT" */
    snprintf(out, cap, "%s", fx->url + strlen("http://"));
  }
}

static int http1; /* the next client speaks HTTP/1.1 */

static conch_client *client_for(fixture *fx, int n, conch_lb_policy p,
                                const char *health) {
  char t[4][160];
  const char *tp[4];
  conch_client_opts *o;
  conch_client *c;
  int i;
  for (i = 0; i < n; i++) {
    target_of(&fx[i], t[i], sizeof(t[i]));
    tp[i] = t[i];
  }
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_targets(o, tp, (size_t)n), 0);
  assert_int_equal(conch_client_opts_set_lb_policy(o, p), 0);
  if (health != NULL) {
    assert_int_equal(conch_client_opts_set_health_check(o, health), 0);
  }
  /* Quick reconnects: a stopped server is tried again soon. */
  assert_int_equal(conch_client_opts_set_backoff(o, 20, 1.6, 0.2, 200), 0);
  if (http1) {
    assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  }
  assert_int_equal(conch_client_new(&c, "http://balanced.test", o), 0);
  conch_client_opts_free(o);
  return c;
}

/* One unary call; returns its code (|msg| gets the message). */
static conch_code call(conch_client *c, char *msg, size_t cap) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  ProtobufCMessage *out = NULL;
  conch_status st;
  conch_code code;
  req.payload.data = (uint8_t *)"hi";
  req.payload.len = 2;
  co.timeout_ms = 20000;
  conch_status_init(&st);
  (void)conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL);
  code = st.code;
  if (msg != NULL) {
    snprintf(msg, cap, "%s", conch_status_message(&st));
  }
  conch_status_clear(&st);
  if (out != NULL) {
    conch_message_free(c, out);
  }
  return code;
}

static void must_call(conch_client *c) {
  char msg[256];
  conch_code code = call(c, msg, sizeof(msg));
  if (code != CONCH_CODE_OK) {
    fail_msg("call: %s: %s", conch_code_name(code), msg);
  }
}

static int served(fixture *fx) { return atomic_load(&fx->ncalls); }

static void test_round_robin_spreads(void **state) {
  fixture fx[3];
  conch_client *c;
  int i;
  (void)state;
  fx_start(&fx[0], NULL, 0);
  fx_start(&fx[1], NULL, 0);
  fx_start(&fx[2], NULL, 1); /* a Unix socket */
  c = client_for(fx, 3, CONCH_LB_ROUND_ROBIN, NULL);
  for (i = 0; i < 30; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[0]), 10);
  assert_int_equal(served(&fx[1]), 10);
  assert_int_equal(served(&fx[2]), 10);
  conch_client_free(c);
  for (i = 0; i < 3; i++) {
    fx_stop(&fx[i]);
  }
}

static void test_pick_first_fails_over(void **state) {
  fixture fx[2];
  conch_client *c;
  int i, before;
  (void)state;
  fx_start(&fx[0], NULL, 0);
  fx_start(&fx[1], NULL, 0);
  c = client_for(fx, 2, CONCH_LB_PICK_FIRST, NULL);
  for (i = 0; i < 5; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[0]), 5);
  assert_int_equal(served(&fx[1]), 0);
  /* The first server stops.  A call already on its way may fail with it;
     the calls after it go to the second server. */
  fx_stop(&fx[0]);
  for (i = 0; i < LIMIT && served(&fx[1]) == 0; i++) {
    conch_code code = call(c, NULL, 0);
    assert_true(code == CONCH_CODE_OK || code == CONCH_CODE_UNAVAILABLE);
  }
  assert_true(served(&fx[1]) > 0);
  before = served(&fx[1]);
  for (i = 0; i < 5; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[1]), before + 5);
  conch_client_free(c);
  fx_stop(&fx[1]);
}

/* Sets the health of |fx|'s server as a whole, on its thread's behalf. */
static void set_health(fixture *fx, conch_health_status h) {
  fx_pause(fx);
  assert_int_equal(conch_server_health_set(fx->s, "", h), 0);
  fx_resume(fx);
}

static void test_not_serving_takes_no_calls(void **state) {
  fixture fx[2];
  conch_client *c;
  char msg[256];
  int i, run, s0;
  (void)state;
  fx_start_health(&fx[0], NULL, 0);
  fx_start_health(&fx[1], NULL, 0);
  c = client_for(fx, 2, CONCH_LB_ROUND_ROBIN, "");
  for (i = 0; i < 10; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[0]), 5);
  assert_int_equal(served(&fx[1]), 5);
  set_health(&fx[0], CONCH_HEALTH_NOT_SERVING);
  /* Once the client heard it, every call goes to the other server: wait
     for 8 in a row there. */
  for (i = 0, run = 0; i < LIMIT && run < 8; i++) {
    int b = served(&fx[1]);
    must_call(c);
    run = served(&fx[1]) > b ? run + 1 : 0;
  }
  assert_int_equal(run, 8);
  s0 = served(&fx[0]);
  for (i = 0; i < 10; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[0]), s0);
  /* Neither serving: calls fail at once, saying why. */
  set_health(&fx[1], CONCH_HEALTH_NOT_SERVING);
  for (i = 0; i < LIMIT; i++) {
    conch_code code = call(c, msg, sizeof(msg));
    if (code != CONCH_CODE_OK) {
      assert_int_equal(code, CONCH_CODE_UNAVAILABLE);
      break;
    }
  }
  assert_true(i < LIMIT);
  assert_non_null(strstr(msg, "not serving"));
  /* Serving again: it takes calls again. */
  set_health(&fx[0], CONCH_HEALTH_SERVING);
  for (i = 0; i < LIMIT && served(&fx[0]) == s0; i++) {
    conch_code code = call(c, NULL, 0);
    assert_true(code == CONCH_CODE_OK || code == CONCH_CODE_UNAVAILABLE);
    if (code != CONCH_CODE_OK) {
      conch_client_run(c, 10); /* the Watch's news, if it is on its way */
    }
  }
  assert_true(served(&fx[0]) > s0);
  conch_client_free(c);
  fx_stop(&fx[0]);
  fx_stop(&fx[1]);
}

/* Over HTTP/1.1 (a connection per call at a time, several per address). */
static void test_round_robin_http1(void **state) {
  fixture fx[2];
  conch_client *c;
  int i;
  (void)state;
  fx_start(&fx[0], NULL, 0);
  fx_start(&fx[1], NULL, 0);
  http1 = 1;
  c = client_for(fx, 2, CONCH_LB_ROUND_ROBIN, NULL);
  http1 = 0;
  for (i = 0; i < 20; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[0]), 10);
  assert_int_equal(served(&fx[1]), 10);
  conch_client_free(c);
  fx_stop(&fx[0]);
  fx_stop(&fx[1]);
}

/* pick_first leaves a server that stops serving for the next one. */
static void test_pick_first_health(void **state) {
  fixture fx[2];
  conch_client *c;
  int i, s1;
  (void)state;
  fx_start_health(&fx[0], NULL, 0);
  fx_start_health(&fx[1], NULL, 0);
  c = client_for(fx, 2, CONCH_LB_PICK_FIRST, "");
  for (i = 0; i < 4; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[0]), 4);
  set_health(&fx[0], CONCH_HEALTH_NOT_SERVING);
  for (i = 0; i < LIMIT && served(&fx[1]) == 0; i++) {
    must_call(c);
  }
  assert_true(served(&fx[1]) > 0);
  s1 = served(&fx[1]);
  for (i = 0; i < 5; i++) {
    must_call(c);
  }
  assert_int_equal(served(&fx[1]), s1 + 5);
  conch_client_free(c);
  fx_stop(&fx[0]);
  fx_stop(&fx[1]);
}

typedef struct ended {
  int closed;
  conch_code code;
} ended;

static void on_ended(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  ended *e = ud;
  (void)call;
  (void)trailers;
  e->closed = 1;
  e->code = st->code;
}

static const conch_call_handler ended_handler = {NULL, NULL, NULL, NULL,
                                                 on_ended};

/* A call waiting on a connection (never sent: the server's stream limit
   is taken by the Watch and a held call) moves to another address when
   the one it waits for says NOT_SERVING, rather than waiting behind the
   held call. */
static void test_not_serving_moves_waiting_calls(void **state) {
  Conchtest__V1__Request held_req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_server_opts *so;
  fixture fx[2];
  conch_client *c;
  conch_call *a, *b;
  ended ea = {0, CONCH_CODE_OK}, eb = {0, CONCH_CODE_OK};
  int i;
  (void)state;
  assert_int_equal(conch_server_opts_new(&so), 0);
  assert_int_equal(conch_server_opts_set_max_streams(so, 2), 0);
  fx_start_health(&fx[0], so, 0);
  conch_server_opts_free(so);
  fx_start_health(&fx[1], NULL, 0);
  c = client_for(fx, 2, CONCH_LB_PICK_FIRST, "");
  must_call(c); /* connected, its Watch under way; SETTINGS known */
  assert_int_equal(served(&fx[0]), 1);
  co.timeout_ms = 20000;
  held_req.delay_ms = 1; /* held until released */
  assert_int_equal(
      conch_call_start(c, &m_unary, &co, &ended_handler, &ea, &a), 0);
  assert_int_equal(conch_call_send(a, &held_req.base), 0);
  for (i = 0; i < LIMIT && atomic_load(&fx[0].held) == 0; i++) {
    assert_int_equal(conch_client_run(c, 50), 0);
  }
  assert_int_equal(atomic_load(&fx[0].held), 1);
  /* The Watch and the held call fill the server's two streams. */
  req.payload.data = (uint8_t *)"b";
  req.payload.len = 1;
  assert_int_equal(
      conch_call_start(c, &m_unary, &co, &ended_handler, &eb, &b), 0);
  assert_int_equal(conch_call_send(b, &req.base), 0);
  for (i = 0; i < 10; i++) {
    assert_int_equal(conch_client_run(c, 10), 0);
  }
  assert_false(eb.closed); /* waiting for a stream of the first server */
  set_health(&fx[0], CONCH_HEALTH_NOT_SERVING);
  for (i = 0; i < LIMIT && !eb.closed; i++) {
    assert_int_equal(conch_client_run(c, 50), 0);
  }
  assert_true(eb.closed);
  assert_int_equal(eb.code, CONCH_CODE_OK);
  assert_int_equal(served(&fx[1]), 1);
  assert_false(ea.closed); /* still held */
  conch_call_free(b);
  atomic_store(&fx[0].release, 1);
  for (i = 0; i < LIMIT && !ea.closed; i++) {
    assert_int_equal(conch_client_run(c, 50), 0);
  }
  assert_true(ea.closed);
  conch_call_free(a);
  conch_client_free(c);
  fx_stop(&fx[0]);
  fx_stop(&fx[1]);
}

/* A server without the health service: its addresses count as serving. */
static void test_health_unimplemented_serves(void **state) {
  fixture fx;
  conch_client *c;
  int i;
  (void)state;
  fx_start(&fx, NULL, 0);
  c = client_for(&fx, 1, CONCH_LB_PICK_FIRST, "some.Service");
  for (i = 0; i < 5; i++) {
    must_call(c);
  }
  conch_client_free(c);
  fx_stop(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_robin_spreads),
      cmocka_unit_test(test_pick_first_fails_over),
      cmocka_unit_test(test_not_serving_takes_no_calls),
      cmocka_unit_test(test_health_unimplemented_serves),
      cmocka_unit_test(test_round_robin_http1),
      cmocka_unit_test(test_pick_first_health),
      cmocka_unit_test(test_not_serving_moves_waiting_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
