/* The server core on a libevent event_base through adapters/libevent.h:
   the server runs in event_base_dispatch() on a thread of its own
   (listener, connections and deadlines all libevent events); conch's
   client calls it.  The loop thread alone touches the base: the test
   stops it through a pipe, so libevent needs no thread support. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <conch/adapters/libevent.h>

#include "svc.h"
#include "loop_calls.h"

typedef struct ev_run_ctx {
  struct event_base *base;
  conch_event a;
  int stop[2];
  int dispatched; /* event_base_dispatch()'s result */
  pthread_t thread;
} ev_run_ctx;

static void on_stop(evutil_socket_t fd, short what, void *arg) {
  ev_run_ctx *e = arg;
  (void)fd;
  (void)what;
  conch_event_detach(&e->a); /* then nothing is left: dispatch returns */
}

static void *ev_thread(void *arg) {
  ev_run_ctx *e = arg;
  e->dispatched = event_base_dispatch(e->base);
  return NULL;
}

/* A new base with the stop pipe's event on it. */
static void ev_open(ev_run_ctx *e) {
  e->base = event_base_new();
  assert_non_null(e->base);
  e->dispatched = -2;
  assert_int_equal(pipe(e->stop), 0);
  assert_int_equal(
      event_base_once(e->base, e->stop[0], EV_READ, on_stop, e, NULL), 0);
}

/* With the server attached to e->base: the calls on the loop's thread,
   then the loop stopped and the base freed. */
static void ev_run_calls(ev_run_ctx *e, const char *url, const char *text) {
  assert_int_equal(pthread_create(&e->thread, NULL, ev_thread, e), 0);
  loop_calls(url, text);
  assert_int_equal(write(e->stop[1], "x", 1), 1);
  pthread_join(e->thread, NULL);
  /* Returned for lack of events: detaching freed every one. */
  assert_int_equal(e->dispatched, 1);
  close(e->stop[0]);
  close(e->stop[1]);
  event_base_free(e->base);
}

static void test_event(void **state) {
  fixture fx;
  ev_run_ctx e;
  conch_loop_target t;
  (void)state;

  fx_start(&fx, NULL, 0);
  fx_pause(&fx); /* the loop below drives it instead */
  ev_open(&e);
  assert_int_equal(conch_event_attach_server(&e.a, e.base, fx.s), 0);
  ev_run_calls(&e, fx.url, "on libevent");

  /* Detached, the server is back in pull mode; a target made by hand
     attaches it again, to a new base. */
  assert_int_equal(conch_server_run(fx.s, 0), 0);
  ev_open(&e);
  t = conch_loop_target_server(fx.s);
  assert_int_equal(conch_event_attach_target(&e.a, e.base, &t), 0);
  ev_run_calls(&e, fx.url, "again");
  conch_server_free(fx.s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_event),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
