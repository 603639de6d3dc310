/* The server core on a libuv loop through adapters/libuv.h: the server
   runs in uv_run() on a thread of its own (listener, connections and
   deadlines all libuv handles); conch's client calls it.  Once attached
   with conch_uv_attach_server(), once with the former names of
   adapters/libuv_server.h.  conch_uv_detach() from inside a callback of
   the driven object (a client's on_close, a server's accept filter) is
   deferred to the end of that callback's turn. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* ---- Detaching from inside a callback ----------------------------------- */

/* A guard that fails the test rather than letting it hang: unreferenced,
   so a loop with nothing else left returns before it fires. */
static void on_guard(uv_timer_t *t) {
  int *fired = t->data;
  *fired = 1;
  uv_stop(t->loop);
}

static void guard_start(uv_loop_t *loop, uv_timer_t *t, int *fired) {
  *fired = 0;
  assert_int_equal(uv_timer_init(loop, t), 0);
  t->data = fired;
  assert_int_equal(uv_timer_start(t, on_guard, 60000, 0), 0);
  uv_unref((uv_handle_t *)t);
}

static void guard_close(uv_loop_t *loop, uv_timer_t *t) {
  uv_close((uv_handle_t *)t, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  assert_int_equal(uv_loop_close(loop), 0); /* no handle left behind */
}

typedef struct detach_ctx {
  conch_uv a;
  int detach_rv;
  int closes;
  conch_code code;
} detach_ctx;

static void detach_on_close(conch_call *call, const conch_status *st,
                            const conch_metadata *trailers, void *ud) {
  detach_ctx *d = ud;
  (void)call;
  (void)trailers;
  d->closes++;
  d->code = st->code;
  /* The client is in its turn: the detach waits for the turn's end. */
  d->detach_rv = conch_uv_detach(&d->a);
}

/* A client whose call ends detaches its adapter from the call's on_close:
   the loop then has nothing left and returns; before, the timer was freed
   under the client, whose end of turn then crashed on it. */
static void test_uv_client_detach_in_callback(void **state) {
  static const conch_call_handler h = {NULL, NULL, NULL, NULL, detach_on_close};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  fixture fx;
  uv_loop_t loop;
  uv_timer_t guard;
  detach_ctx d;
  conch_client *c;
  conch_call *call;
  int fired;
  (void)state;

  fx_start(&fx, NULL, 0);
  memset(&d, 0, sizeof(d));
  d.detach_rv = -100;
  assert_int_equal(uv_loop_init(&loop), 0);
  guard_start(&loop, &guard, &fired);
  assert_int_equal(conch_client_new(&c, fx.url, NULL), 0);
  assert_int_equal(conch_uv_attach(&d.a, &loop, c), 0);
  co.timeout_ms = 30000;
  req.payload.data = (uint8_t *)"bye";
  req.payload.len = 3;
  assert_int_equal(conch_call_start(c, &m_unary, &co, &h, &d, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  uv_run(&loop, UV_RUN_DEFAULT); /* returns once every handle is closed */
  assert_int_equal(fired, 0);
  assert_int_equal(d.closes, 1);
  assert_int_equal(d.code, CONCH_CODE_OK);
  assert_int_equal(d.detach_rv, 0);
  /* Detached: the client is back in pull mode, and a second detach is a
     no-op. */
  assert_int_equal(conch_client_run(c, 0), 0);
  assert_int_equal(conch_uv_detach(&d.a), 0);
  conch_call_free(call);
  conch_client_free(c);
  guard_close(&loop, &guard);
  fx_stop(&fx);
}

typedef struct accept_ctx {
  conch_uv *a;
  int accepted;
  int detach_rv;
} accept_ctx;

static int detach_on_accept(const conch_server_peer *peer, void *ud) {
  accept_ctx *x = ud;
  (void)peer;
  if (x->accepted++ > 0) {
    return 1; /* later ones (pull mode): served */
  }
  x->detach_rv = conch_uv_detach(x->a);
  return 0; /* closed at once */
}

static void *connect_once(void *arg) {
  const char *url = arg;
  long port = strtol(strrchr(url, ':') + 1, NULL, 10);
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(0x7f000001);
  if (fd >= 0) {
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
      char b;
      /* The server closes it; EOF or a reset ends the read. */
      while (read(fd, &b, 1) > 0) {
      }
    }
    close(fd);
  }
  return NULL;
}

/* The same for a server: its accept filter detaches the adapter. */
static void test_uv_server_detach_in_callback(void **state) {
  conch_server_opts *so;
  fixture fx;
  uv_loop_t loop;
  uv_timer_t guard;
  conch_uv a;
  accept_ctx x = {&a, 0, -100};
  pthread_t t;
  int fired;
  (void)state;

  assert_int_equal(conch_server_opts_new(&so), 0);
  assert_int_equal(
      conch_server_opts_set_accept_filter(so, detach_on_accept, &x), 0);
  fx_start(&fx, so, 0);
  conch_server_opts_free(so);
  fx_pause(&fx);
  assert_int_equal(uv_loop_init(&loop), 0);
  guard_start(&loop, &guard, &fired);
  assert_int_equal(conch_uv_attach_server(&a, &loop, fx.s), 0);
  assert_int_equal(pthread_create(&t, NULL, connect_once, fx.url), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  assert_int_equal(fired, 0);
  assert_int_equal(x.accepted, 1);
  assert_int_equal(x.detach_rv, 0);
  assert_int_equal(conch_uv_detach(&a), 0); /* again: a no-op */
  guard_close(&loop, &guard);
  /* Detached for real: the server runs on in pull mode, its deadlines on
     its own timer (still hooked, they went to the closed adapter). */
  fx_resume(&fx);
  loop_calls(fx.url, "pulled again");
  fx_stop(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uv),
      cmocka_unit_test(test_uv_former_names),
      cmocka_unit_test(test_uv_client_detach_in_callback),
      cmocka_unit_test(test_uv_server_detach_in_callback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
