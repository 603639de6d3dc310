/* The server core on a libuv loop through adapters/libuv_server.h: the
   server runs in uv_run() on a thread of its own (listener, connections
   and deadlines all libuv handles); conch's client calls it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <conch/adapters/libuv_server.h>

#include "svc.h"

typedef struct uv_run_ctx {
  fixture *fx;
  uv_loop_t loop;
  uv_async_t stop;
  conch_uvs a;
  pthread_t thread;
} uv_run_ctx;

static void on_stop(uv_async_t *h) {
  uv_run_ctx *u = h->data;
  conch_uvs_detach(&u->a);
  uv_close((uv_handle_t *)&u->stop, NULL);
}

static void *uv_thread(void *arg) {
  uv_run_ctx *u = arg;
  uv_run(&u->loop, UV_RUN_DEFAULT); /* ends once every handle is closed */
  return NULL;
}

static void test_uv(void **state) {
  fixture fx;
  uv_run_ctx u;
  (void)state;

  fx_start(&fx, NULL, 0);
  fx_pause(&fx); /* the loop below drives it instead */
  u.fx = &fx;
  assert_int_equal(uv_loop_init(&u.loop), 0);
  assert_int_equal(uv_async_init(&u.loop, &u.stop, on_stop), 0);
  u.stop.data = &u;
  assert_int_equal(conch_uvs_attach(&u.a, &u.loop, fx.s), 0);
  assert_int_equal(pthread_create(&u.thread, NULL, uv_thread, &u), 0);

  for (int proto = 0; proto < 3; proto++) {
    conch_client_opts *o;
    conch_client *c;
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call_opts co = CONCH_CALL_OPTS_INIT;
    ProtobufCMessage *out = NULL;
    conch_call *call;
    conch_status st;
    int n = 0, rv;

    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_protocol(o, (conch_protocol)proto),
                     0);
    assert_int_equal(conch_client_new(&c, fx.url, o), 0);
    conch_client_opts_free(o);
    req.payload.data = (uint8_t *)"on uv";
    req.payload.len = 5;
    conch_status_init(&st);
    assert_int_equal(
        conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL, NULL),
        0);
    assert_memory_equal(((Conchtest__V1__Response *)out)->payload.data,
                        "on uv", 5);
    conch_message_free(c, out);
    req.response_count = 3;
    assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call),
                     0);
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    while ((rv = conch_call_recv_sync(call, &out)) == 0) {
      n++;
      conch_message_free(c, out);
    }
    assert_int_equal(rv, CONCH_ERR_EOF);
    assert_int_equal(n, 3);
    conch_call_free(call);
    /* The server's deadline runs on the uv timer. */
    req.delay_ms = 1;
    co.timeout_ms = 100;
    co.deadline_grace_ms = 30000;
    assert_int_equal(
        conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL),
        CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
    assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
    conch_status_clear(&st);
    conch_client_free(c);
  }
  assert_int_equal(uv_async_send(&u.stop), 0);
  pthread_join(u.thread, NULL);
  assert_int_equal(uv_loop_close(&u.loop), 0);
  conch_server_free(fx.s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
