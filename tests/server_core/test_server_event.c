/* The server core on a libevent event_base through adapters/libevent.h:
   the server runs in event_base_dispatch() on a thread of its own
   (listener, connections and deadlines all libevent events); conch's
   client calls it.  The loop thread alone touches the base: the test
   stops it through a pipe, so libevent needs no thread support.
   conch_event_detach() from inside a callback of the driven object (a
   client's on_close, a server's accept filter) is deferred to the end of
   that callback's turn. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

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

/* ---- Detaching from inside a callback ----------------------------------- */

/* A watchdog on the base: once only it is left (the adapter freed every
   event of its own), it removes itself and dispatch returns; after 60 s
   with more left it breaks the loop, and the test fails. */
typedef struct watchdog {
  struct event *ev;
  struct event_base *base;
  time_t until;
  int fired;
} watchdog;

static void on_watchdog(evutil_socket_t fd, short what, void *arg) {
  watchdog *w = arg;
  (void)fd;
  (void)what;
  if (event_base_get_num_events(w->base, EVENT_BASE_COUNT_ADDED) <= 1) {
    event_del(w->ev);
  } else if (time(NULL) > w->until) {
    w->fired = 1;
    event_base_loopbreak(w->base);
  }
}

static void watchdog_start(watchdog *w, struct event_base *base) {
  struct timeval tv = {0, 20000};
  w->base = base;
  w->until = time(NULL) + 60;
  w->fired = 0;
  w->ev = event_new(base, -1, EV_PERSIST, on_watchdog, w);
  assert_non_null(w->ev);
  assert_int_equal(event_add(w->ev, &tv), 0);
}

typedef struct detach_ctx {
  conch_event a;
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
  d->detach_rv = conch_event_detach(&d->a);
}

/* A client whose call ends detaches its adapter from the call's on_close;
   before, the timer event was freed under the client, whose end of turn
   then crashed on it. */
static void test_event_client_detach_in_callback(void **state) {
  static const conch_call_handler h = {NULL, NULL, NULL, NULL, detach_on_close};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  struct event_base *base;
  fixture fx;
  watchdog w;
  detach_ctx d;
  conch_client *c;
  conch_call *call;
  (void)state;

  fx_start(&fx, NULL, 0);
  memset(&d, 0, sizeof(d));
  d.detach_rv = -100;
  base = event_base_new();
  assert_non_null(base);
  watchdog_start(&w, base);
  assert_int_equal(conch_client_new(&c, fx.url, NULL), 0);
  assert_int_equal(conch_event_attach(&d.a, base, c), 0);
  co.timeout_ms = 30000;
  req.payload.data = (uint8_t *)"bye";
  req.payload.len = 3;
  assert_int_equal(conch_call_start(c, &m_unary, &co, &h, &d, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  event_base_dispatch(base);
  assert_int_equal(w.fired, 0);
  assert_int_equal(d.closes, 1);
  assert_int_equal(d.code, CONCH_CODE_OK);
  assert_int_equal(d.detach_rv, 0);
  /* Detached: the client is back in pull mode; a second detach does
     nothing. */
  assert_int_equal(conch_client_run(c, 0), 0);
  assert_int_equal(conch_event_detach(&d.a), 0);
  conch_call_free(call);
  conch_client_free(c);
  event_free(w.ev);
  event_base_free(base);
  fx_stop(&fx);
}

typedef struct accept_ctx {
  conch_event *a;
  int accepted;
  int detach_rv;
} accept_ctx;

static int detach_on_accept(const conch_server_peer *peer, void *ud) {
  accept_ctx *x = ud;
  (void)peer;
  if (x->accepted++ > 0) {
    return 1; /* later ones (pull mode): served */
  }
  x->detach_rv = conch_event_detach(x->a);
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
      while (read(fd, &b, 1) > 0) {
      }
    }
    close(fd);
  }
  return NULL;
}

/* The same for a server: its accept filter detaches the adapter, and the
   server then runs on in pull mode. */
static void test_event_server_detach_in_callback(void **state) {
  conch_server_opts *so;
  struct event_base *base;
  fixture fx;
  watchdog w;
  conch_event a;
  accept_ctx x = {&a, 0, -100};
  pthread_t t;
  (void)state;

  assert_int_equal(conch_server_opts_new(&so), 0);
  assert_int_equal(
      conch_server_opts_set_accept_filter(so, detach_on_accept, &x), 0);
  fx_start(&fx, so, 0);
  conch_server_opts_free(so);
  fx_pause(&fx);
  base = event_base_new();
  assert_non_null(base);
  watchdog_start(&w, base);
  assert_int_equal(conch_event_attach_server(&a, base, fx.s), 0);
  assert_int_equal(pthread_create(&t, NULL, connect_once, fx.url), 0);
  event_base_dispatch(base);
  pthread_join(t, NULL);
  assert_int_equal(w.fired, 0);
  assert_int_equal(x.accepted, 1);
  assert_int_equal(x.detach_rv, 0);
  assert_int_equal(conch_event_detach(&a), 0);
  event_free(w.ev);
  event_base_free(base);
  /* Its deadlines on its own timer now (still hooked, they went to the
     freed timer event). */
  fx_resume(&fx);
  loop_calls(fx.url, "pulled again");
  fx_stop(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_event),
      cmocka_unit_test(test_event_client_detach_in_callback),
      cmocka_unit_test(test_event_server_detach_in_callback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
