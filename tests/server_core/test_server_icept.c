/* The server's interceptors (conch/interceptor.h) with conch's client on
   the other side: an auth interceptor that refuses calls without the
   token (unauthenticated, the handler never hears of them) against a
   client interceptor that injects it; logging with timing and metrics by
   code on the server; per-service registration; a deferred call resumed
   later; a shortened deadline; a status changed at the end; a request
   message changed on its way to the handler. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <conch/conch.h>
#include <conch/interceptor.h>

#include "failmem.h"
#include "svc.h"

/* ---- Server interceptors ------------------------------------------------ */

typedef struct srv_rec {
  atomic_int calls, closes, refused, deferred, recvd, sent;
  atomic_int by_code[17];
  atomic_long took_us;
  atomic_int last_code;
  conch_rpc *held; /* deferred call (read with the server thread stopped) */
} srv_rec;

static srv_rec rec;

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Auth: the token or unauthenticated, before the handler. */
static int s_auth_call(conch_rpc *rpc, conch_metadata *h, void **state,
                       void *ud) {
  const char *v = conch_metadata_get(h, "authorization", NULL);
  conch_status st;
  (void)state;
  (void)ud;
  if (v != NULL && strcmp(v, "Bearer good") == 0) {
    conch_metadata_remove(h, "authorization"); /* the handler needs none */
    return CONCH_ICEPT_NEXT;
  }
  rec.refused++;
  conch_status_init(&st);
  assert_int_equal(conch_status_setf(&st, NULL, CONCH_CODE_UNAUTHENTICATED,
                                     "missing or bad token"),
                   0);
  assert_int_equal(conch_rpc_finish(rpc, &st), 0);
  conch_status_clear(&st);
  return CONCH_ICEPT_NEXT;
}

/* Logging with timing: the start in the state, the duration at close. */
static int s_log_call(conch_rpc *rpc, conch_metadata *h, void **state,
                      void *ud) {
  int64_t *t = malloc(sizeof(*t));
  (void)h;
  (void)ud;
  assert_non_null(t);
  assert_memory_equal(conch_rpc_method(rpc)->path, SVC, strlen(SVC));
  *t = now_us();
  *state = t;
  rec.calls++;
  return CONCH_ICEPT_NEXT;
}

static int s_log_recv(conch_rpc *rpc, const uint8_t **p, size_t *n,
                      void **state, void *ud) {
  (void)rpc;
  (void)p;
  (void)n;
  (void)state;
  (void)ud;
  rec.recvd++;
  return 0;
}

static int s_log_send(conch_rpc *rpc, const uint8_t **p, size_t *n,
                      void **state, void *ud) {
  (void)rpc;
  (void)p;
  (void)n;
  (void)state;
  (void)ud;
  rec.sent++;
  return 0;
}

static void s_log_close(conch_rpc *rpc, conch_status *st, conch_metadata *t,
                        void **state, void *ud) {
  (void)rpc;
  (void)t;
  (void)ud;
  rec.closes++;
  rec.last_code = st->code;
  if (*state != NULL) {
    rec.took_us = (long)(now_us() - *(int64_t *)*state);
    free(*state);
    *state = NULL;
  }
}

static void s_metrics_close(conch_rpc *rpc, conch_status *st,
                            conch_metadata *t, void **state, void *ud) {
  (void)rpc;
  (void)t;
  (void)state;
  (void)ud;
  if ((unsigned)st->code < 17) {
    rec.by_code[st->code]++;
  }
}

/* ---- Client side -------------------------------------------------------- */

static int c_auth_start(conch_call *call, conch_metadata *h, void **state,
                        void *ud) {
  (void)call;
  (void)state;
  return conch_metadata_add_str(h, "authorization", ud) == 0
             ? CONCH_ICEPT_NEXT
             : (conch_call_abort(call, CONCH_CODE_RESOURCE_EXHAUSTED, NULL),
                CONCH_ICEPT_NEXT);
}

static int use_h1; /* clients speak HTTP/1.1 */
static conch_protocol use_proto = CONCH_PROTOCOL_CONNECT;

static conch_client *client(const fixture *fx, const char *token) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  if (use_h1) {
    assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  }
  assert_int_equal(conch_client_opts_set_protocol(o, use_proto), 0);
  if (token != NULL) {
    conch_call_interceptor ic = CONCH_CALL_INTERCEPTOR_INIT;
    ic.on_start = c_auth_start;
    ic.user_data = (void *)token;
    assert_int_equal(conch_client_opts_add_interceptor(o, &ic), 0);
  }
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static conch_code unary(conch_client *c, const char *payload, uint32_t delay,
                        char *echo, size_t cap) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  conch_status st;
  conch_code code;
  req.payload.data = (uint8_t *)payload;
  req.payload.len = strlen(payload);
  req.delay_ms = delay;
  conch_status_init(&st);
  (void)conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL, NULL);
  code = st.code;
  if (getenv("ICEPT_DEBUG") != NULL) {
    fprintf(stderr, "unary: %s\n", conch_status_message(&st));
  }
  if (out != NULL && echo != NULL) {
    const Conchtest__V1__Response *r = (const Conchtest__V1__Response *)out;
    snprintf(echo, cap, "%.*s", (int)r->payload.len,
             (const char *)r->payload.data);
  }
  conch_message_free(c, out);
  conch_status_clear(&st);
  return code;
}

static void rec_reset(void) {
  int i;
  rec.calls = rec.closes = rec.refused = rec.deferred = 0;
  rec.recvd = rec.sent = 0;
  rec.took_us = 0;
  rec.last_code = -1;
  for (i = 0; i < 17; i++) {
    rec.by_code[i] = 0;
  }
  rec.held = NULL;
}

/* Adds interceptors to |fx|'s server with its thread stopped. */
static void add_all(fixture *fx, const char *auth_service) {
  conch_rpc_interceptor auth = CONCH_RPC_INTERCEPTOR_INIT;
  conch_rpc_interceptor lg = CONCH_RPC_INTERCEPTOR_INIT;
  conch_rpc_interceptor mt = CONCH_RPC_INTERCEPTOR_INIT;
  auth.on_call = s_auth_call;
  lg.on_call = s_log_call;
  lg.on_recv = s_log_recv;
  lg.on_send = s_log_send;
  lg.on_close = s_log_close;
  mt.on_close = s_metrics_close;
  fx_pause(fx);
  /* Metrics outermost: it counts the refused calls too. */
  assert_int_equal(conch_server_add_interceptor(fx->s, &mt), 0);
  if (auth_service != NULL) {
    assert_int_equal(
        conch_server_add_service_interceptor(fx->s, auth_service, &auth), 0);
  } else {
    assert_int_equal(conch_server_add_interceptor(fx->s, &auth), 0);
  }
  assert_int_equal(conch_server_add_interceptor(fx->s, &lg), 0);
  fx_resume(fx);
}

/* The auth pair: without the client's interceptor the server refuses
   (the handler and the interceptors inside auth never see the call);
   with it the call goes through, logged and counted. */
static void auth_round(void) {
  fixture fx;
  conch_client *c;
  char echo[32] = "";
  rec_reset();
  fx_start(&fx, NULL, 0);
  add_all(&fx, NULL);

  c = client(&fx, NULL);
  assert_int_equal(unary(c, "hi", 0, NULL, 0), CONCH_CODE_UNAUTHENTICATED);
  conch_client_free(c);
  assert_int_equal(rec.refused, 1);
  assert_int_equal(rec.calls, 0);
  assert_int_equal(rec.closes, 0);
  assert_int_equal(rec.by_code[CONCH_CODE_UNAUTHENTICATED], 1);

  c = client(&fx, "Bearer bad");
  assert_int_equal(unary(c, "hi", 0, NULL, 0), CONCH_CODE_UNAUTHENTICATED);
  conch_client_free(c);

  c = client(&fx, "Bearer good");
  assert_int_equal(unary(c, "hello", 0, echo, sizeof(echo)), CONCH_CODE_OK);
  assert_string_equal(echo, "hello");
  assert_int_equal(unary(c, "again", 0, echo, sizeof(echo)), CONCH_CODE_OK);
  conch_client_free(c);
  /* The same over HTTP/1.1 (the server's own session; gRPC needs
     HTTP/2: again over it). */
  use_h1 = use_proto != CONCH_PROTOCOL_GRPC;
  c = client(&fx, NULL);
  assert_int_equal(unary(c, "h1", 0, NULL, 0), CONCH_CODE_UNAUTHENTICATED);
  conch_client_free(c);
  c = client(&fx, "Bearer good");
  assert_int_equal(unary(c, "h1", 0, echo, sizeof(echo)), CONCH_CODE_OK);
  assert_string_equal(echo, "h1");
  conch_client_free(c);
  use_h1 = 0;
  fx_stop(&fx);
  assert_int_equal(rec.refused, 3);
  assert_int_equal(rec.calls, 3);
  assert_int_equal(rec.closes, 3);
  assert_int_equal(rec.recvd, 3);
  assert_int_equal(rec.sent, 3);
  assert_int_equal(rec.last_code, CONCH_CODE_OK);
  assert_true(rec.took_us >= 0);
  assert_int_equal(rec.by_code[CONCH_CODE_OK], 3);
  assert_int_equal(rec.by_code[CONCH_CODE_UNAUTHENTICATED], 3);
}

static void test_auth_log_metrics(void **state) {
  static const conch_protocol protos[] = {
      CONCH_PROTOCOL_CONNECT, CONCH_PROTOCOL_GRPC, CONCH_PROTOCOL_GRPC_WEB};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(protos) / sizeof(protos[0]); i++) {
    use_proto = protos[i];
    auth_round();
  }
  use_proto = CONCH_PROTOCOL_CONNECT;
}

/* Per service: auth registered for another service leaves TestService
   open; for TestService it applies. */
static void test_per_service(void **state) {
  fixture fx;
  conch_client *c;
  (void)state;
  rec_reset();
  fx_start(&fx, NULL, 0);
  add_all(&fx, "conchtest.v1.Other");
  c = client(&fx, NULL);
  assert_int_equal(unary(c, "open", 0, NULL, 0), CONCH_CODE_OK);
  conch_client_free(c);
  fx_stop(&fx);
  assert_int_equal(rec.refused, 0);
  assert_int_equal(rec.calls, 1);

  rec_reset();
  fx_start(&fx, NULL, 0);
  add_all(&fx, "conchtest.v1.TestService");
  c = client(&fx, NULL);
  assert_int_equal(unary(c, "shut", 0, NULL, 0), CONCH_CODE_UNAUTHENTICATED);
  conch_client_free(c);
  fx_stop(&fx);
  assert_int_equal(rec.refused, 1);
  {
    conch_rpc_interceptor ic = CONCH_RPC_INTERCEPTOR_INIT;
    assert_int_equal(conch_server_add_service_interceptor(NULL, "x", &ic),
                     CONCH_ERR_INVALID);
  }
}

/* Deferral, a shortened deadline and a changed status and message. */
static int s_defer_call(conch_rpc *rpc, conch_metadata *h, void **state,
                        void *ud) {
  (void)h;
  (void)state;
  (void)ud;
  rec.held = rpc;
  rec.deferred++;
  return CONCH_ICEPT_DEFER;
}

static int s_short_call(conch_rpc *rpc, conch_metadata *h, void **state,
                        void *ud) {
  (void)state;
  (void)ud;
  if (conch_metadata_get(h, "x-short", NULL) != NULL) {
    assert_int_equal(conch_rpc_shorten_deadline(rpc, 100), 0);
    assert_true(conch_rpc_timeout_ms(rpc) <= 100);
  }
  return CONCH_ICEPT_NEXT;
}

static const uint8_t swapped[] = {0x0a, 0x04, 's', 'w', 'a', 'p'};

static int s_swap_recv(conch_rpc *rpc, const uint8_t **p, size_t *n,
                       void **state, void *ud) {
  (void)rpc;
  (void)state;
  (void)ud;
  if (*n >= 6 && memcmp(*p + 2, "swap", 4) == 0) {
    *p = swapped + 0; /* the same bytes: exercised, no change */
  } else if (*n >= 2 + 6 && memcmp(*p + 2, "change", 6) == 0) {
    *p = swapped;
    *n = sizeof(swapped);
  }
  return 0;
}

static void s_remap_close(conch_rpc *rpc, conch_status *st, conch_metadata *t,
                          void **state, void *ud) {
  (void)rpc;
  (void)state;
  (void)ud;
  rec.closes++;
  rec.last_code = st->code;
  if (st->code == CONCH_CODE_DEADLINE_EXCEEDED) {
    (void)conch_metadata_add_str(t, "x-remapped", "1");
    (void)conch_status_setf(st, st->mem, CONCH_CODE_UNAVAILABLE,
                            "remapped deadline");
  }
}

static void test_defer_deadline_remap(void **state) {
  conch_rpc_interceptor d = CONCH_RPC_INTERCEPTOR_INIT;
  conch_rpc_interceptor sh = CONCH_RPC_INTERCEPTOR_INIT;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  conch_call *call;
  ProtobufCMessage *out = NULL;
  conch_client *c;
  fixture fx;
  char echo[32];
  int i;
  (void)state;
  rec_reset();
  fx_start(&fx, NULL, 0);
  fx_pause(&fx);
  sh.on_call = s_short_call;
  sh.on_recv = s_swap_recv;
  sh.on_close = s_remap_close;
  d.on_call = s_defer_call;
  assert_int_equal(conch_server_add_interceptor(fx.s, &sh), 0);
  assert_int_equal(conch_server_add_service_interceptor(
                       fx.s, "conchtest.v1.TestService", &d),
                   0);
  fx_resume(&fx);

  /* Deferred: the call waits (its request too) until resumed. */
  c = client(&fx, NULL);
  req.payload.data = (uint8_t *)"change";
  req.payload.len = 6;
  co.timeout_ms = 20000;
  assert_int_equal(conch_call_start(c, &m_unary, &co, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  for (i = 0; i < 2000 && rec.deferred == 0; i++) {
    (void)conch_client_run(c, 5);
  }
  assert_int_equal(rec.deferred, 1);
  for (i = 0; i < 20; i++) {
    (void)conch_client_run(c, 5); /* the request arrives and waits */
  }
  assert_false(conch_call_done(call));
  fx_pause(&fx);
  assert_non_null(rec.held);
  assert_int_equal(conch_rpc_icept_resume(rec.held), 0);
  assert_int_equal(conch_rpc_icept_resume(rec.held), CONCH_ERR_STATE);
  fx_resume(&fx);
  assert_int_equal(conch_call_recv_sync(call, &out), 0);
  snprintf(echo, sizeof(echo), "%.*s",
           (int)((Conchtest__V1__Response *)out)->payload.len,
           (const char *)((Conchtest__V1__Response *)out)->payload.data);
  assert_string_equal(echo, "swap"); /* changed on its way in */
  conch_message_free(c, out);
  assert_int_equal(conch_call_wait_sync(call), 0);
  conch_call_free(call);
  assert_int_equal(rec.last_code, CONCH_CODE_OK);

  /* Deferred and never resumed, with the deadline shortened to 100 ms:
     the deadline ends it, the close hook remaps the code, the handler
     never had it. */
  rec.held = NULL;
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-short", "1"), 0);
  co.headers = md;
  req.payload.data = (uint8_t *)"x";
  req.payload.len = 1;
  {
    conch_metadata *trl;
    conch_status st;
    assert_int_equal(conch_metadata_new(&trl, NULL), 0);
    conch_status_init(&st);
    assert_int_equal(conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st,
                                      NULL, trl),
                     CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
    assert_string_equal(conch_status_message(&st), "remapped deadline");
    assert_non_null(conch_metadata_get(trl, "x-remapped", NULL));
    conch_status_clear(&st);
    conch_metadata_free(trl);
  }
  conch_metadata_free(md);
  conch_client_free(c);
  fx_stop(&fx);
  assert_int_equal(rec.deferred, 2);
  assert_int_equal(rec.closes, 2);
  assert_int_equal(rec.last_code, CONCH_CODE_DEADLINE_EXCEEDED);
}

/* A bidi stream through the chain: each request and each response seen
   once, in both directions, and one close. */
static void test_bidi(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *out;
  conch_call *call;
  conch_client *c;
  fixture fx;
  int i;
  (void)state;
  rec_reset();
  fx_start(&fx, NULL, 0);
  add_all(&fx, NULL);
  c = client(&fx, "Bearer good");
  req.payload.data = (uint8_t *)"bi";
  req.payload.len = 2;
  assert_int_equal(conch_call_start(c, &m_bidi, NULL, NULL, NULL, &call), 0);
  for (i = 0; i < 3; i++) {
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    assert_int_equal(conch_call_recv_sync(call, &out), 0);
    assert_int_equal(((Conchtest__V1__Response *)out)->payload.len, 2);
    conch_message_free(c, out);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  assert_int_equal(conch_call_recv_sync(call, &out), CONCH_ERR_EOF);
  assert_int_equal(conch_call_wait_sync(call), 0);
  conch_call_free(call);
  conch_client_free(c);
  fx_stop(&fx);
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.recvd, 3);
  assert_int_equal(rec.sent, 3);
  assert_int_equal(rec.closes, 1);
  assert_int_equal(rec.last_code, CONCH_CODE_OK);
  assert_int_equal(rec.by_code[CONCH_CODE_OK], 1);
}

/* Every allocation of the server failing in turn, with the chain
   installed (auth, logging, metrics) and two calls, one refused, one
   through: whatever fails, nothing leaks, every call that reached the
   logging interceptor's on_call got its close once, and the last run
   (nothing failing) gives the right codes. */
static void test_every_oom(void **state) {
  conch_server_opts *o;
  size_t n;
  (void)state;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_mem(o, failmem_hooks()), 0);
  for (n = 0;; n++) {
    fixture fx;
    conch_client *c;
    conch_code refused = CONCH_CODE_OK, ok = CONCH_CODE_UNKNOWN;
    int rv;
    rec_reset();
    fx.tolerant = 1;
    failmem_fail_at(n);
    rv = fx_try_start(&fx, o, 0);
    if (rv == 0) {
      add_all(&fx, NULL);
      c = client(&fx, NULL);
      refused = unary(c, "no", 0, NULL, 0);
      conch_client_free(c);
      c = client(&fx, "Bearer good");
      ok = unary(c, "yes", 0, NULL, 0);
      conch_client_free(c);
      fx_stop(&fx);
      assert_int_equal(rec.closes, rec.calls);
      assert_true(refused != CONCH_CODE_OK);
    } else {
      assert_int_equal(rv, CONCH_ERR_NOMEM);
    }
    if (failmem_live_blocks() != 0) {
      fail_msg("allocation %zu failed: %ld blocks left", n,
               failmem_live_blocks());
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_int_equal(refused, CONCH_CODE_UNAUTHENTICATED);
      assert_int_equal(ok, CONCH_CODE_OK);
      assert_int_equal(rec.calls, 1);
      assert_int_equal(rec.by_code[CONCH_CODE_OK], 1);
      break;
    }
  }
  failmem_fail_at((size_t)-1);
  printf("# %zu allocations swept\n", n);
  conch_server_opts_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_auth_log_metrics),
      cmocka_unit_test(test_per_service),
      cmocka_unit_test(test_defer_deadline_remap),
      cmocka_unit_test(test_bidi),
      cmocka_unit_test(test_every_oom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
