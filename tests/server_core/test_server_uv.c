/* The server core on a libuv loop through adapters/libuv.h: the server
   runs in uv_run() on a thread of its own (listener, connections and
   deadlines all libuv handles); conch's client calls it.  Once attached
   with conch_uv_attach_server(), once with the former names of
   adapters/libuv_server.h. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <conch/adapters/libuv.h>
#include <conch/adapters/libuv_server.h>

#include "svc.h"
#include "loop_calls.h"

typedef struct uv_run_ctx {
  fixture *fx;
  uv_loop_t loop;
  uv_async_t stop;
  conch_uv a;
  int compat;
  pthread_t thread;
} uv_run_ctx;

static void on_stop(uv_async_t *h) {
  uv_run_ctx *u = h->data;
  if (u->compat) {
    conch_uvs_detach(&u->a);
  } else {
    conch_uv_detach(&u->a);
  }
  uv_close((uv_handle_t *)&u->stop, NULL);
}

static void *uv_thread(void *arg) {
  uv_run_ctx *u = arg;
  uv_run(&u->loop, UV_RUN_DEFAULT); /* ends once every handle is closed */
  return NULL;
}

static void run_uv(int compat) {
  fixture fx;
  uv_run_ctx u;

  fx_start(&fx, NULL, 0);
  fx_pause(&fx); /* the loop below drives it instead */
  u.fx = &fx;
  u.compat = compat;
  assert_int_equal(uv_loop_init(&u.loop), 0);
  assert_int_equal(uv_async_init(&u.loop, &u.stop, on_stop), 0);
  u.stop.data = &u;
  if (compat) {
    assert_int_equal(conch_uvs_attach(&u.a, &u.loop, fx.s), 0);
  } else {
    assert_int_equal(conch_uv_attach_server(&u.a, &u.loop, fx.s), 0);
  }
  assert_int_equal(pthread_create(&u.thread, NULL, uv_thread, &u), 0);
  loop_calls(fx.url, "on uv");
  assert_int_equal(uv_async_send(&u.stop), 0);
  pthread_join(u.thread, NULL);
  assert_int_equal(uv_loop_close(&u.loop), 0);
  conch_server_free(fx.s);
}

static void test_uv(void **state) {
  (void)state;
  run_uv(0);
}

static void test_uv_former_names(void **state) {
  (void)state;
  run_uv(1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uv),
      cmocka_unit_test(test_uv_former_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
