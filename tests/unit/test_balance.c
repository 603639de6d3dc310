/* Load balancing across addresses (balance.c) on the in-memory transport
   (memxport.h) with an echo server per connection (memsrv.h): which
   address each connection went to, how many requests each server saw,
   the reconnect backoff on the test's clock and random numbers, static
   targets, every address of a lookup, and the failing allocator on these
   paths.  No sockets, no threads, no real time. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "conchtest/v1/test.pb-c.h"
#include "failmem.h"
#include "memsrv.h"
#include "memxport.h"

#define SVC "/conchtest.v1.TestService/"
#define TURNS 400 /* exchanges before a run counts as hung */
#define MAXPORT 8

static const conch_method m_unary = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

/* The client, the servers of its connections, and which ports are down. */
typedef struct rig {
  memx m;
  memsrv *srv[MEMX_MAX_CONNS];
  conch_client *c;
  int down[MAXPORT]; /* port 1000+i refuses connections (an errno) */
  int async_down;    /* ...and says so in connect_result, not open */
  int opens_to[MAXPORT];
  double rnd; /* the backoff's random number */
  int rnd_calls;
} rig;

static int port_of(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    return ntohs(((const struct sockaddr_in *)sa)->sin_port);
  }
  if (sa->sa_family == AF_INET6) {
    return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
  }
  return 1000 + MAXPORT - 1; /* unix: the last slot */
}

static int slot(int port) {
  return port >= 1000 && port < 1000 + MAXPORT ? port - 1000 : MAXPORT - 1;
}

static int on_open(memx *m, const struct sockaddr *sa, socklen_t len,
                   int *connect_err) {
  rig *r = m->on_open_ud;
  int i = slot(port_of(sa));
  (void)len;
  r->opens_to[i]++;
  if (r->down[i] != 0) {
    if (r->async_down) {
      *connect_err = r->down[i];
      return 0;
    }
    return r->down[i];
  }
  return 0;
}

static double rnd(void *ud) {
  rig *r = ud;
  r->rnd_calls++;
  return r->rnd;
}

/* Options with the rig's transport, clock and random numbers; the caller
   adds what the test needs, then rig_start(). */
static conch_client_opts *rig_opts(rig *r) {
  conch_client_opts *o;
  memset(r, 0, sizeof(*r));
  memx_init(&r->m);
  r->m.on_open = on_open;
  r->m.on_open_ud = r;
  r->rnd = 0.5;
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(&r->m, o);
  assert_int_equal(conch_client_opts_set_backoff_random(o, rnd, r), 0);
  return o;
}

static int rig_start(rig *r, conch_client_opts *o, const char *url) {
  int rv = conch_client_new(&r->c, url, o);
  conch_client_opts_free(o);
  if (rv == 0) {
    memx_attach(&r->m, r->c);
  }
  return rv;
}

static void rig_turn(rig *r) {
  int i;
  memx_pump(&r->m, 16);
  for (i = 0; i < r->m.nconns; i++) {
    if (r->srv[i] == NULL && r->m.conns[i]->connect_err == 0) {
      r->srv[i] = memsrv_new(r->m.conns[i]);
    }
    if (r->srv[i] != NULL) {
      memsrv_exchange(r->srv[i], &r->m, 16);
    }
  }
}

static void rig_close(rig *r) {
  int i;
  conch_client_free(r->c);
  for (i = 0; i < MEMX_MAX_CONNS; i++) {
    memsrv_free(r->srv[i]);
  }
  memx_clear(&r->m);
}

/* Requests the servers of port 1000+|i|'s connections saw. */
static int requests_to(const rig *r, int i) {
  int k, n = 0;
  for (k = 0; k < r->m.nconns; k++) {
    if (r->srv[k] != NULL &&
        slot(port_of((const struct sockaddr *)&r->m.conns[k]->addr)) == i) {
      n += memsrv_requests(r->srv[k]);
    }
  }
  return n;
}

/* The server at port 1000+|i| goes away: its connections end (EOF) and
   new ones are refused. */
static void stop_port(rig *r, int i) {
  int k;
  r->down[i] = ECONNREFUSED;
  for (k = 0; k < r->m.nconns; k++) {
    if (slot(port_of((const struct sockaddr *)&r->m.conns[k]->addr)) == i) {
      r->m.conns[k]->eof = 1;
    }
  }
}

typedef struct outcome {
  int closed;
  conch_code code;
  char msg[256];
} outcome;

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  outcome *s = ud;
  (void)call;
  (void)t;
  s->closed++;
  s->code = st->code;
  snprintf(s->msg, sizeof(s->msg), "%s", conch_status_message(st));
}

static const conch_call_handler pull = {NULL, NULL, NULL, NULL, on_close};

#define MAXCALLS 64

/* |n| unary calls at once, run to their ends; returns how many ended OK
   (|last| gets the last outcome). */
static int calls(rig *r, int n, outcome *last) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call *call[MAXCALLS];
  outcome s[MAXCALLS];
  int i, t, done, ok = 0;

  assert_true(n <= MAXCALLS);
  memset(s, 0, sizeof(s));
  req.payload.data = (uint8_t *)"hello";
  req.payload.len = 5;
  opts.timeout_ms = 60000;
  for (i = 0; i < n; i++) {
    assert_int_equal(
        conch_call_start(r->c, &m_unary, &opts, &pull, &s[i], &call[i]), 0);
    (void)conch_call_send(call[i], &req.base);
  }
  for (t = 0; t < TURNS; t++) {
    for (done = 0, i = 0; i < n; i++) {
      done += s[i].closed;
    }
    if (done == n) {
      break;
    }
    rig_turn(r);
  }
  for (i = 0; i < n; i++) {
    if (!s[i].closed) {
      fail_msg("call %d did not end after %d turns", i, TURNS);
    }
    ok += s[i].code == CONCH_CODE_OK;
    if (last != NULL) {
      *last = s[i];
    }
    conch_call_free(call[i]);
  }
  return ok;
}

static conch_client_opts *with_targets(rig *r, conch_lb_policy p, int n) {
  static const char *const t[] = {"127.0.0.1:1000", "127.0.0.1:1001",
                                  "127.0.0.1:1002", "127.0.0.1:1003"};
  conch_client_opts *o = rig_opts(r);
  assert_int_equal(conch_client_opts_set_targets(o, t, (size_t)n), 0);
  assert_int_equal(conch_client_opts_set_lb_policy(o, p), 0);
  return o;
}

/* ---- Policies ------------------------------------------------------------ */

static void test_round_robin_spreads(void **state) {
  rig r;
  (void)state;
  assert_int_equal(
      rig_start(&r, with_targets(&r, CONCH_LB_ROUND_ROBIN, 3), "http://svc"),
      0);
  /* At once (all queued while connecting), then one at a time. */
  assert_int_equal(calls(&r, 30, NULL), 30);
  assert_int_equal(requests_to(&r, 0), 10);
  assert_int_equal(requests_to(&r, 1), 10);
  assert_int_equal(requests_to(&r, 2), 10);
  for (int i = 0; i < 9; i++) {
    assert_int_equal(calls(&r, 1, NULL), 1);
  }
  assert_int_equal(requests_to(&r, 0), 13);
  assert_int_equal(requests_to(&r, 1), 13);
  assert_int_equal(requests_to(&r, 2), 13);
  /* One connection per address. */
  assert_int_equal(r.m.opens, 3);
  rig_close(&r);
}

/* round_robin connects to every address at once and sends calls to those
   whose connection is up: an address whose connect hangs (no answer, as
   from a host that drops SYNs) takes none of them, rather than every
   third call waiting out the connect timeout. */
static void test_round_robin_passes_connecting(void **state) {
  rig r;
  conch_client_opts *o;
  int i;
  (void)state;
  o = with_targets(&r, CONCH_LB_ROUND_ROBIN, 3);
  r.down[1] = EINPROGRESS; /* connect_result: still connecting, forever */
  r.async_down = 1;
  assert_int_equal(rig_start(&r, o, "http://svc"), 0);
  for (i = 0; i < 12; i++) {
    assert_int_equal(calls(&r, 1, NULL), 1);
  }
  assert_int_equal(requests_to(&r, 1), 0);
  assert_int_equal(requests_to(&r, 0), 6);
  assert_int_equal(requests_to(&r, 2), 6);
  /* All three were opened by the first call, each once. */
  assert_int_equal(r.opens_to[0], 1);
  assert_int_equal(r.opens_to[1], 1);
  assert_int_equal(r.opens_to[2], 1);
  rig_close(&r);
}

static void test_pick_first_sticks_and_fails_over(void **state) {
  rig r;
  outcome last;
  (void)state;
  assert_int_equal(
      rig_start(&r, with_targets(&r, CONCH_LB_PICK_FIRST, 3), "http://svc"), 0);
  assert_int_equal(calls(&r, 5, NULL), 5);
  assert_int_equal(calls(&r, 1, NULL), 1);
  assert_int_equal(requests_to(&r, 0), 6);
  assert_int_equal(r.m.opens, 1);
  /* The first server stops: the next calls go to the second one. */
  stop_port(&r, 0);
  rig_turn(&r);
  assert_int_equal(calls(&r, 4, &last), 4);
  assert_int_equal(requests_to(&r, 1), 4);
  assert_int_equal(requests_to(&r, 2), 0);
  /* It is back, but calls stick to the second while it lives. */
  r.down[0] = 0;
  r.m.now += 5000; /* past any backoff */
  assert_int_equal(calls(&r, 3, NULL), 3);
  assert_int_equal(requests_to(&r, 1), 7);
  assert_int_equal(requests_to(&r, 0), 6);
  rig_close(&r);
}

/* A connection that fails before sending its calls hands them to the next
   address: the call never sees the failure. */
static void test_unsent_calls_move(void **state) {
  rig r;
  (void)state;
  conch_client_opts *o = with_targets(&r, CONCH_LB_PICK_FIRST, 2);
  r.down[0] = ECONNREFUSED;
  r.async_down = 1; /* refused in connect_result, calls already queued */
  assert_int_equal(rig_start(&r, o, "http://svc"), 0);
  assert_int_equal(calls(&r, 3, NULL), 3);
  assert_int_equal(requests_to(&r, 1), 3);
  assert_int_equal(r.opens_to[0], 1);
  /* The same with round_robin, both ways round. */
  rig_close(&r);
  o = with_targets(&r, CONCH_LB_ROUND_ROBIN, 3);
  r.down[1] = ECONNREFUSED;
  r.async_down = 1;
  assert_int_equal(rig_start(&r, o, "http://svc"), 0);
  assert_int_equal(calls(&r, 12, NULL), 12);
  assert_int_equal(requests_to(&r, 1), 0);
  assert_int_equal(requests_to(&r, 0) + requests_to(&r, 2), 12);
  assert_int_equal(r.opens_to[1], 1); /* backing off since */
  rig_close(&r);
}

/* ---- Backoff ---------------------------------------------------------------
 */

static void test_backoff_times(void **state) {
  rig r;
  outcome last;
  int64_t t0;
  (void)state;
  conch_client_opts *o = with_targets(&r, CONCH_LB_PICK_FIRST, 1);
  r.down[0] = ECONNREFUSED;
  r.rnd = 0.75; /* each jittered wait is 1.1 times its backoff */
  assert_int_equal(rig_start(&r, o, "http://svc"), 0);
  t0 = r.m.now;
  assert_int_equal(calls(&r, 1, &last), 0);
  assert_int_equal(last.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(last.msg, "next attempt in 1000 ms"));
  assert_non_null(strstr(last.msg, "127.0.0.1:1000"));
  assert_int_equal(r.m.opens, 1);
  /* Backing off: calls fail at once without trying. */
  r.m.now = t0 + 999;
  assert_int_equal(calls(&r, 2, &last), 0);
  assert_non_null(strstr(last.msg, "next attempt in 1 ms"));
  assert_int_equal(r.m.opens, 1);
  /* The first wait is the initial backoff itself (no jitter); then 1600,
     2560, 4096, each times 1.1. */
  r.m.now = t0 + 1000;
  assert_int_equal(calls(&r, 1, NULL), 0);
  assert_int_equal(r.m.opens, 2);
  assert_int_equal(r.rnd_calls, 1);
  r.m.now = t0 + 1000 + 1759;
  assert_int_equal(calls(&r, 1, NULL), 0);
  assert_int_equal(r.m.opens, 2);
  r.m.now = t0 + 1000 + 1760;
  assert_int_equal(calls(&r, 1, NULL), 0);
  assert_int_equal(r.m.opens, 3);
  r.m.now += 2815;
  assert_int_equal(calls(&r, 1, NULL), 0);
  assert_int_equal(r.m.opens, 3);
  r.m.now += 1;
  assert_int_equal(calls(&r, 1, &last), 0);
  assert_int_equal(r.m.opens, 4);
  assert_non_null(strstr(last.msg, "next attempt in 4505 ms"));
  /* The server is back: the next attempt works, and a failure after it
     starts from the initial backoff again. */
  r.down[0] = 0;
  r.m.now += 4505;
  assert_int_equal(calls(&r, 2, NULL), 2);
  assert_int_equal(r.m.opens, 5);
  stop_port(&r, 0);
  rig_turn(&r);
  assert_int_equal(calls(&r, 1, &last), 0);
  assert_non_null(strstr(last.msg, "next attempt in 1000 ms"));
  rig_close(&r);
}

static void test_backoff_max_and_jitter(void **state) {
  rig r;
  outcome last;
  int i;
  (void)state;
  conch_client_opts *o = with_targets(&r, CONCH_LB_PICK_FIRST, 1);
  assert_int_equal(conch_client_opts_set_backoff(o, 100, 2.0, 0.5, 500), 0);
  r.down[0] = ECONNREFUSED;
  r.rnd = 0.0; /* the low end: half of each backoff */
  assert_int_equal(rig_start(&r, o, "http://svc"), 0);
  assert_int_equal(calls(&r, 1, &last), 0);
  assert_non_null(strstr(last.msg, "next attempt in 100 ms"));
  /* 200, 400, then 500 (the max) for good: halved by the jitter. */
  static const int want[] = {100, 200, 250, 250, 250};
  for (i = 0; i < 5; i++) {
    char s[64];
    r.m.now += i == 0 ? 100 : want[i - 1];
    assert_int_equal(calls(&r, 1, &last), 0);
    snprintf(s, sizeof(s), "next attempt in %d ms", want[i]);
    if (strstr(last.msg, s) == NULL) {
      fail_msg("step %d: %s (wanted %s)", i, last.msg, s);
    }
  }
  rig_close(&r);
}

/* ---- Lookups ----------------------------------------------------------------
 */

/* A resolver answering at once with the addresses in |answer|. */
typedef struct fake_dns {
  const char *answer[4];
  int starts;
} fake_dns;

static int dns_start(conch_resolve_req *req, const char *host, const char *port,
                     void *ud) {
  fake_dns *d = ud;
  struct addrinfo *head = NULL, **tail = &head, hints;
  int i;
  (void)host;
  d->starts++;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  for (i = 0; i < 4 && d->answer[i] != NULL; i++) {
    char h[64], *colon;
    struct addrinfo *one = NULL;
    snprintf(h, sizeof(h), "%s", d->answer[i]);
    colon = strrchr(h, ':');
    *colon = '\0';
    assert_int_equal(getaddrinfo(h, colon + 1, &hints, &one), 0);
    *tail = one;
    while (*tail != NULL) {
      tail = &(*tail)->ai_next;
    }
  }
  (void)port;
  conch_resolve_done(req, head, head == NULL ? "no such host" : NULL);
  if (head != NULL) {
    freeaddrinfo(head);
  }
  return 0;
}

static void test_every_resolved_address(void **state) {
  rig r;
  fake_dns d = {{"127.0.0.1:1000", "127.0.0.2:1001", NULL, NULL}, 0};
  conch_resolver res = {dns_start, NULL, &d};
  outcome last;
  (void)state;
  conch_client_opts *o = rig_opts(&r);
  assert_int_equal(conch_client_opts_set_resolver(o, &res), 0);
  assert_int_equal(conch_client_opts_set_lb_policy(o, CONCH_LB_ROUND_ROBIN), 0);
  assert_int_equal(rig_start(&r, o, "http://svc.test:1000"), 0);
  assert_int_equal(calls(&r, 8, NULL), 8);
  assert_int_equal(requests_to(&r, 0), 4);
  assert_int_equal(requests_to(&r, 1), 4);
  assert_int_equal(d.starts, 1); /* looked up once, not per connection */
  /* 30 s later the name is looked up again; the answer replaces the list
     (the address kept keeps its connection). */
  d.answer[1] = "127.0.0.3:1002";
  r.m.now += 30000;
  assert_int_equal(calls(&r, 1, NULL), 1);
  assert_int_equal(d.starts, 2);
  /* The new address is connected to at once; until its connection is up
     the calls go to the one that is. */
  assert_int_equal(r.opens_to[2], 1);
  assert_int_equal(calls(&r, 8, NULL), 8);
  assert_int_equal(requests_to(&r, 1), 4); /* gone from the answer */
  assert_int_equal(calls(&r, 8, NULL), 8);
  assert_true(requests_to(&r, 2) >= 4);
  assert_int_equal(r.opens_to[2], 1);
  assert_int_equal(r.opens_to[0], 1);
  /* ...and its connection, idle, was closed. */
  for (int k = 0; k < r.m.nconns; k++) {
    if (slot(port_of((const struct sockaddr *)&r.m.conns[k]->addr)) == 1) {
      assert_int_equal(r.m.conns[k]->open, 0);
    } else if (slot(port_of((const struct sockaddr *)&r.m.conns[k]->addr)) ==
               0) {
      assert_int_equal(r.m.conns[k]->open, 1);
    }
  }
  /* A failed lookup with no address known fails the calls with its
     reason. */
  rig_close(&r);
  d.answer[0] = NULL;
  d.starts = 0;
  o = rig_opts(&r);
  assert_int_equal(conch_client_opts_set_resolver(o, &res), 0);
  assert_int_equal(conch_client_opts_set_lb_policy(o, CONCH_LB_PICK_FIRST), 0);
  assert_int_equal(rig_start(&r, o, "http://svc.test:1000"), 0);
  assert_int_equal(calls(&r, 2, &last), 0);
  assert_int_equal(last.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(last.msg, "no such host"));
  rig_close(&r);
}

/* Every address failing: the name is looked up again (at most every
   initial backoff), and the next calls go where it points now. */
static void test_lookup_again_when_all_fail(void **state) {
  rig r;
  fake_dns d = {{"127.0.0.1:1000", NULL, NULL, NULL}, 0};
  conch_resolver res = {dns_start, NULL, &d};
  outcome last;
  int i;
  (void)state;
  conch_client_opts *o = rig_opts(&r);
  assert_int_equal(conch_client_opts_set_resolver(o, &res), 0);
  assert_int_equal(conch_client_opts_set_lb_policy(o, CONCH_LB_PICK_FIRST), 0);
  r.down[0] = ECONNREFUSED;
  assert_int_equal(rig_start(&r, o, "http://svc.test:1000"), 0);
  assert_int_equal(calls(&r, 1, &last), 0);
  assert_int_equal(last.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(d.starts, 1);
  /* Within the initial backoff: no new lookup. */
  r.m.now += 500;
  assert_int_equal(calls(&r, 1, NULL), 0);
  assert_int_equal(d.starts, 1);
  d.answer[0] = "127.0.0.2:1001";
  r.m.now += 500;
  for (i = 0; i < 3 && d.starts == 1; i++) {
    (void)calls(&r, 1, NULL);
  }
  assert_int_equal(d.starts, 2);
  assert_int_equal(calls(&r, 2, NULL), 2);
  assert_int_equal(requests_to(&r, 1), 2);
  rig_close(&r);
}

/* Without a policy nothing changes: each connection looks the name up. */
static void test_default_unchanged(void **state) {
  rig r;
  fake_dns d = {{"127.0.0.1:1000", NULL, NULL, NULL}, 0};
  conch_resolver res = {dns_start, NULL, &d};
  (void)state;
  conch_client_opts *o = rig_opts(&r);
  assert_int_equal(conch_client_opts_set_resolver(o, &res), 0);
  assert_int_equal(rig_start(&r, o, "http://svc.test:1000"), 0);
  assert_int_equal(calls(&r, 3, NULL), 3);
  assert_int_equal(r.rnd_calls, 0);
  assert_int_equal(d.starts, 1);
  rig_close(&r);
}

/* ---- Options ----------------------------------------------------------------
 */

static void test_bad_options(void **state) {
  conch_client_opts *o;
  static const char *const bad[] = {
      "example.com:80", "127.0.0.1",    "127.0.0.1:0",  "127.0.0.1:65536",
      "127.0.0.1:8x",   "[::1]80",      "[::1]:",       "::1:80",
      "unix:",          "[nothost]:80", "127.0.0.1:-1", ""};
  static const char *const good[] = {"127.0.0.1:1", "[::1]:65535",
                                     "unix:/tmp/x.sock"};
  char longpath[200];
  const char *lp[1] = {longpath};
  size_t i;
  (void)state;
  assert_int_equal(conch_client_opts_new(&o), 0);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (conch_client_opts_set_targets(o, &bad[i], 1) != CONCH_ERR_INVALID) {
      fail_msg("target \"%s\" was taken", bad[i]);
    }
  }
  memset(longpath, 'a', sizeof(longpath) - 1);
  memcpy(longpath, "unix:/", 6);
  longpath[sizeof(longpath) - 1] = '\0';
  assert_int_equal(conch_client_opts_set_targets(o, lp, 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_targets(o, NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_targets(NULL, good, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_targets(o, good, 3), 0);
  assert_int_equal(conch_client_opts_set_targets(o, good, 2), 0);
  assert_int_equal(conch_client_opts_set_targets(o, NULL, 0), 0);
  assert_int_equal(conch_client_opts_set_lb_policy(o, (conch_lb_policy)7),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_lb_policy(NULL, CONCH_LB_NONE),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 0, 1.6, 0.2, 1000),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 1000, 0.5, 0.2, 1000),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 1000, 1.6, 1.5, 1000),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 1000, 1.6, -0.1, 1000),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 1000, 1.6, 0.2, 999),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 1000, 0.0 / 0.0, 0.2, 999),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_backoff(o, 1, 1.0, 0.0, 1), 0);
  assert_int_equal(conch_client_opts_set_backoff_random(NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  conch_client_opts_free(o);
}

/* The targets are copied: options freed or changed after the client was
   made do not matter; and a copy of options keeps them. */
static void test_targets_copied(void **state) {
  rig r;
  char t0[32];
  const char *t[1] = {t0};
  (void)state;
  conch_client_opts *o = rig_opts(&r);
  snprintf(t0, sizeof(t0), "127.0.0.1:1002");
  assert_int_equal(conch_client_opts_set_targets(o, t, 1), 0);
  memset(t0, 'x', sizeof(t0) - 1);
  assert_int_equal(rig_start(&r, o, "http://svc"), 0);
  assert_int_equal(calls(&r, 2, NULL), 2);
  assert_int_equal(requests_to(&r, 2), 2);
  rig_close(&r);
}

/* ---- The failing allocator
 * ------------------------------------------------------ */

/* A round_robin client over three targets, one down (refused in
   connect_result, so queued calls move), makes a few calls; with each
   allocation failing in turn every call ends, nothing leaks. */
static int health_run; /* the runs also watch health (the echo server
                          answers a Watch with its own request) */

static int rr_once(void) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call *call[6];
  outcome s[6];
  conch_client_opts *o;
  rig r;
  int i, t, n = 0, ok = 0, rv;

  memset(s, 0, sizeof(s));
  o = with_targets(&r, CONCH_LB_ROUND_ROBIN, 3);
  assert_int_equal(conch_client_opts_set_mem(o, failmem_hooks()), 0);
  if (health_run) {
    assert_int_equal(conch_client_opts_set_health_check(o, "x"), 0);
  }
  r.down[1] = ECONNREFUSED;
  r.async_down = 1;
  rv = rig_start(&r, o, "http://svc");
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    memx_clear(&r.m);
    return rv;
  }
  req.payload.data = (uint8_t *)"x";
  req.payload.len = 1;
  opts.timeout_ms = 10000;
  for (i = 0; i < 6; i++) {
    rv = conch_call_start(r.c, &m_unary, &opts, &pull, &s[n], &call[n]);
    if (rv != 0) {
      assert_int_equal(rv, CONCH_ERR_NOMEM);
      continue;
    }
    (void)conch_call_send(call[n], &req.base);
    n++;
  }
  for (t = 0; t < TURNS; t++) {
    int done = 0;
    for (i = 0; i < n; i++) {
      done += s[i].closed;
    }
    if (done == n) {
      break;
    }
    rig_turn(&r);
  }
  for (i = 0; i < n; i++) {
    if (!s[i].closed) {
      fail_msg("call %d did not end (allocation %zu failed)", i,
               failmem_count());
    }
    if (s[i].code == CONCH_CODE_OK) {
      ok++;
    } else if (s[i].code != CONCH_CODE_RESOURCE_EXHAUSTED &&
               s[i].code != CONCH_CODE_INTERNAL &&
               s[i].code != CONCH_CODE_UNAVAILABLE) {
      fail_msg("call %d: %s: %s", i, conch_code_name(s[i].code), s[i].msg);
    }
    conch_call_free(call[i]);
  }
  rig_close(&r);
  return ok == 6 ? 0 : -1;
}

static void test_every_oom(void **state) {
  size_t k;
  (void)state;
  failmem_fail_at((size_t)-1);
  assert_int_equal(rr_once(), 0);
  assert_int_equal(failmem_live_blocks(), 0);
  assert_int_equal(failmem_live_blocks(), 0);
  for (k = 0;; k++) {
    failmem_fail_at(k);
    (void)rr_once();
    if (failmem_live_blocks() != 0) {
      fail_msg("allocation %zu failed: %ld blocks leaked", k,
               failmem_live_blocks());
    }
    if (!failmem_fired()) {
      break; /* every allocation of the run has failed once */
    }
  }
  failmem_fail_at((size_t)-1);
  print_message("%zu allocations failed in turn\n", k);
  assert_true(k > 10);
}

static void test_every_oom_health(void **state) {
  health_run = 1;
  test_every_oom(state);
  health_run = 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_robin_spreads),
      cmocka_unit_test(test_round_robin_passes_connecting),
      cmocka_unit_test(test_pick_first_sticks_and_fails_over),
      cmocka_unit_test(test_unsent_calls_move),
      cmocka_unit_test(test_backoff_times),
      cmocka_unit_test(test_backoff_max_and_jitter),
      cmocka_unit_test(test_every_resolved_address),
      cmocka_unit_test(test_lookup_again_when_all_fail),
      cmocka_unit_test(test_default_unchanged),
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_targets_copied),
      cmocka_unit_test(test_every_oom),
      cmocka_unit_test(test_every_oom_health),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
