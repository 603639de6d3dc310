/* The same scenario driven four ways over one core: the blocking turn
   (conch_client_run), pull (pollfds + poll(2) + process), and hooks through
   the libuv and libevent adapters.  Each run includes a wakeup from
   another thread whose callback starts a call on the loop thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <conch/adapters/libevent.h>
#include <conch/adapters/libuv.h>
#include <conch/conch.h>

#include "conchtest/v1/test.pb-c.h"
#include "peer.h"

#define SVC "/conchtest.v1.TestService/"

static const conch_method m_unary = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_server = {
    SVC "ServerStream", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_bidi = {
    SVC "Bidi", CONCH_STREAM_BIDI, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

static conch_peer peer;
static char url[64];

static int group_setup(void **state) {
  (void)state;
  if (conch_peer_start(&peer,
                       CONCH_SOURCE_DIR "/tests/interop/node/server.mjs",
                       NULL) != 0) {
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

/* ---- The scenario ------------------------------------------------------- */

enum { C_UNARY, C_STREAM, C_BIDI, C_LATE, C_WOKEN, NCALLS };

typedef struct scenario {
  conch_client *client;
  conch_call *calls[NCALLS];
  int messages[NCALLS];
  int closes[NCALLS];
  conch_code codes[NCALLS];
  int wakeups;
  int done;
} scenario;

typedef struct slot {
  scenario *s;
  int which;
} slot;

static slot slots[NCALLS];

static void on_message(conch_call *call, const ProtobufCMessage *msg,
                       void *ud) {
  slot *sl = ud;
  scenario *s = sl->s;
  (void)msg;
  s->messages[sl->which]++;
  if (sl->which == C_BIDI) {
    /* Ping-pong from inside the handler: send the next or finish. */
    if (s->messages[C_BIDI] < 3) {
      Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
      req.payload.data = (uint8_t *)"ping";
      req.payload.len = 4;
      assert_int_equal(conch_call_send(call, &req.base), 0);
    } else {
      assert_int_equal(conch_call_close_send(call), 0);
    }
  }
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  slot *sl = ud;
  scenario *s = sl->s;
  int i;
  (void)call;
  (void)trailers;
  s->closes[sl->which]++;
  s->codes[sl->which] = st->code;
  s->done = 1;
  for (i = 0; i < NCALLS; i++) {
    if (s->closes[i] == 0) {
      s->done = 0;
    }
  }
}

static const conch_call_handler handler = {NULL, on_message, NULL, NULL,
                                           on_close};

static void start(scenario *s, int which, const conch_method *m,
                  long timeout_ms, const Conchtest__V1__Request *req) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  opts.timeout_ms = timeout_ms;
  slots[which].s = s;
  slots[which].which = which;
  assert_int_equal(conch_call_start(s->client, m, &opts, &handler,
                                    &slots[which], &s->calls[which]),
                   0);
  assert_int_equal(conch_call_send(s->calls[which], &req->base), 0);
}

/* Runs on the loop thread after another thread's conch_client_wakeup(). */
static void on_wakeup(conch_client *c, void *ud) {
  scenario *s = ud;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  (void)c;
  s->wakeups++;
  if (s->calls[C_WOKEN] == NULL) {
    start(s, C_WOKEN, &m_unary, 0, &req);
  }
}

static void *waker(void *arg) {
  conch_client *c = arg;
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  conch_client_wakeup(c);
  return NULL;
}

static void scenario_begin(scenario *s) {
  memset(s, 0, sizeof(*s));
  assert_int_equal(conch_client_new(&s->client, url, NULL), 0);
  assert_int_equal(conch_client_set_wakeup_cb(s->client, on_wakeup, s), 0);
}

static void scenario_start(scenario *s, pthread_t *thread) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  req.payload.data = (uint8_t *)"hi";
  req.payload.len = 2;
  start(s, C_UNARY, &m_unary, 0, &req);
  req.response_count = 5;
  req.delay_ms = 10;
  start(s, C_STREAM, &m_server, 0, &req);
  req.response_count = 0;
  req.delay_ms = 0;
  start(s, C_BIDI, &m_bidi, 0, &req);
  req.delay_ms = 3000;
  start(s, C_LATE, &m_unary, 200, &req);
  assert_int_equal(pthread_create(thread, NULL, waker, s->client), 0);
}

static void scenario_check(scenario *s, pthread_t thread) {
  int i;
  pthread_join(thread, NULL);
  for (i = 0; i < NCALLS; i++) {
    assert_int_equal(s->closes[i], 1);
  }
  assert_int_equal(s->codes[C_UNARY], CONCH_CODE_OK);
  assert_int_equal(s->messages[C_UNARY], 1);
  assert_int_equal(s->codes[C_STREAM], CONCH_CODE_OK);
  assert_int_equal(s->messages[C_STREAM], 5);
  assert_int_equal(s->codes[C_BIDI], CONCH_CODE_OK);
  assert_int_equal(s->messages[C_BIDI], 3);
  assert_int_equal(s->codes[C_LATE], CONCH_CODE_DEADLINE_EXCEEDED);
  assert_int_equal(s->codes[C_WOKEN], CONCH_CODE_OK);
  assert_true(s->wakeups >= 1);
  for (i = 0; i < NCALLS; i++) {
    conch_call_free(s->calls[i]);
  }
  conch_client_free(s->client);
}

/* ---- Drivers ------------------------------------------------------------ */

static void test_blocking_turns(void **state) {
  scenario s;
  pthread_t t;
  (void)state;
  scenario_begin(&s);
  scenario_start(&s, &t);
  while (!s.done) {
    assert_int_equal(conch_client_run(s.client, -1), 0);
  }
  scenario_check(&s, t);
}

static void test_pull(void **state) {
  scenario s;
  pthread_t t;
  struct pollfd fds[8];
  (void)state;
  scenario_begin(&s);
  scenario_start(&s, &t);
  while (!s.done) {
    size_t n = conch_client_pollfds(s.client, fds, 8);
    long timeout = conch_client_timeout_ms(s.client);
    int rv;
    assert_true(n >= 1 && n <= 8);
    rv = poll(fds, n, (int)timeout);
    assert_true(rv >= 0);
    assert_int_equal(conch_client_process(s.client, fds, n), 0);
  }
  scenario_check(&s, t);
}

static void test_libuv(void **state) {
  scenario s;
  pthread_t t;
  conch_uv a;
  uv_loop_t loop;
  (void)state;
  assert_int_equal(uv_loop_init(&loop), 0);
  scenario_begin(&s);
  /* Attached before any call: everything goes through the hooks. */
  assert_int_equal(conch_uv_attach(&a, &loop, s.client), 0);
  scenario_start(&s, &t);
  /* The client refuses blocking turns while hooked. */
  assert_int_equal(conch_client_run(s.client, 0), CONCH_ERR_STATE);
  while (!s.done) {
    uv_run(&loop, UV_RUN_ONCE);
  }
  conch_uv_detach(&a);
  uv_run(&loop, UV_RUN_NOWAIT);
  scenario_check(&s, t);
  assert_int_equal(uv_loop_close(&loop), 0); /* no handle left behind */
}

static void test_libevent(void **state) {
  scenario s;
  pthread_t t;
  conch_event a;
  struct event_base *base = event_base_new();
  (void)state;
  assert_non_null(base);
  scenario_begin(&s);
  scenario_start(&s, &t);
  /* Attached with calls already queued: the hooks learn the fds then. */
  assert_int_equal(conch_event_attach(&a, base, s.client), 0);
  while (!s.done) {
    assert_true(event_base_loop(base, EVLOOP_ONCE) >= 0);
  }
  conch_event_detach(&a);
  scenario_check(&s, t);
  event_base_free(base);
}

/* Hooks are told only of changes, and an fd is removed before it closes:
   checked with a hook table that records what it hears. */
typedef struct recorder {
  int fds[16];
  unsigned events[16];
  int n;
  int removes;
  int bad;
  long timer;
} recorder;

static int rec_watch(int fd, unsigned events, void *ud) {
  recorder *r = ud;
  int i;
  for (i = 0; i < r->n; i++) {
    if (r->fds[i] == fd) {
      break;
    }
  }
  if (events & CONCH_IO_REMOVE) {
    if (i == r->n) {
      r->bad++; /* removing what was never watched */
      return 0;
    }
    r->fds[i] = r->fds[--r->n];
    r->events[i] = r->events[r->n];
    r->removes++;
    return 0;
  }
  if (i == r->n) {
    r->fds[r->n++] = fd;
  } else if (r->events[i] == events) {
    r->bad++; /* not a change */
  }
  r->events[i] = events;
  return 0;
}

static int rec_timer(long ms, void *ud) {
  recorder *r = ud;
  r->timer = ms;
  return 0;
}

static void test_hook_contract(void **state) {
  scenario s;
  pthread_t t;
  recorder r;
  conch_io_hooks hooks = {rec_watch, rec_timer, &r};
  (void)state;
  memset(&r, 0, sizeof(r));
  r.timer = -1;
  scenario_begin(&s);
  assert_int_equal(conch_client_set_io_hooks(s.client, &hooks), 0);
  assert_int_equal(r.n, 1); /* the wakeup fd */
  scenario_start(&s, &t);
  while (!s.done) {
    struct pollfd fds[16];
    int i, n = r.n, rv;
    for (i = 0; i < n; i++) {
      fds[i].fd = r.fds[i];
      fds[i].events = (short)(((r.events[i] & CONCH_IO_READ) ? POLLIN : 0) |
                              ((r.events[i] & CONCH_IO_WRITE) ? POLLOUT : 0));
      fds[i].revents = 0;
    }
    rv = poll(fds, (nfds_t)n, (int)r.timer);
    assert_true(rv >= 0);
    if (rv == 0) {
      assert_int_equal(conch_client_on_timer(s.client), 0);
      continue;
    }
    for (i = 0; i < n; i++) {
      unsigned ev = 0;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        ev |= CONCH_IO_READ;
      }
      if (fds[i].revents & POLLOUT) {
        ev |= CONCH_IO_WRITE;
      }
      if (ev != 0) {
        assert_int_equal(conch_client_on_io(s.client, fds[i].fd, ev), 0);
      }
    }
  }
  assert_int_equal(r.bad, 0);
  assert_int_equal(conch_client_set_io_hooks(s.client, NULL), 0);
  assert_int_equal(r.n, 0); /* switching back removed every fd */
  scenario_check(&s, t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocking_turns),
      cmocka_unit_test(test_pull),
      cmocka_unit_test(test_libuv),
      cmocka_unit_test(test_libevent),
      cmocka_unit_test(test_hook_contract),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
