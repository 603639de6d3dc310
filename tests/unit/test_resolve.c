/* Name resolution off the loop (runtime/net/resolve.c): a resolver that never
   answers ends a call at its deadline, or the connection at the connect
   timeout; answers from inside start(), failures and refusals; the
   default resolver (getaddrinfo() on threads) for "localhost" and for a
   name that does not exist; an answer after the client was freed; and
   1,000 calls to distinct host names from one thread, their lookups all
   under way at once and the loop never held up by them. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "call_int.h"
#include "client_int.h"

/* A listener on 127.0.0.1; its port in |*port|. */
static int listener(int *port) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0);

  assert_true(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, 64), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* A port on 127.0.0.1 where nothing listens (bound, then closed). */
static int dead_port(void) {
  int port;
  int fd = listener(&port);
  close(fd);
  return port;
}

/* Whether |c| reached the listener |lfd|: a connection arrives and starts
   with the HTTP/2 preface.  The client is driven meanwhile. */
static void expect_preface(conch_client *c, int lfd) {
  struct pollfd p = {lfd, POLLIN, 0};
  char buf[24];
  int64_t t0 = conch__now_ms();
  int fd;
  size_t got = 0;

  while (poll(&p, 1, 0) == 0) {
    assert_int_equal(conch_client_run(c, 20), 0);
    assert_true(conch__now_ms() - t0 < 20000);
  }
  fd = accept(lfd, NULL, NULL);
  assert_true(fd >= 0);
  while (got < sizeof(buf)) {
    ssize_t n;
    struct pollfd q = {fd, POLLIN, 0};

    assert_int_equal(conch_client_run(c, 0), 0);
    if (poll(&q, 1, 20) == 0) {
      assert_true(conch__now_ms() - t0 < 20000);
      continue;
    }
    n = read(fd, buf + got, sizeof(buf) - got);
    assert_true(n > 0);
    got += (size_t)n;
  }
  assert_memory_equal(buf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
  close(fd);
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  conch_status *out = ud;
  (void)call;
  (void)trailers;
  conch_status_copy(out, st, NULL);
}

static const conch_method m = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL, NULL, 0};

static conch_call *start(conch_client *c, long timeout_ms, conch_status *st) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  static const conch_call_handler h = {NULL, NULL, NULL, NULL, on_close};
  conch_call *call;

  opts.timeout_ms = timeout_ms;
  conch_status_init(st);
  assert_int_equal(conch_call_start(c, &m, &opts, &h, st, &call), 0);
  assert_int_equal(conch_call_send_raw(call, (const uint8_t *)"", 0), 0);
  return call;
}

/* Runs |call| to its end; the time it took from |t0|. */
static int64_t finish(conch_client *c, conch_call *call, int64_t t0) {
  while (!conch_call_done(call)) {
    assert_int_equal(conch_client_run(c, 1000), 0);
    assert_true(conch__now_ms() - t0 < 20000);
  }
  conch__client_run_done(c);
  conch_call_free(call);
  return conch__now_ms() - t0;
}

static conch_client *client_with(const char *host, int port,
                                 const conch_resolver *r, long connect_ms) {
  conch_client_opts *o;
  conch_client *c;
  char url[300];

  snprintf(url, sizeof(url), "http://%s:%d", host, port);
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_resolver(o, r), 0);
  if (connect_ms > 0) {
    assert_int_equal(conch_client_opts_set_connect_timeout(o, connect_ms), 0);
  }
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

/* ---- A resolver that never answers -------------------------------------- */

typedef struct silent {
  conch_resolve_req *req;
  int starts;
  int cancels;
  char host[64];
} silent;

static int silent_start(conch_resolve_req *req, const char *host,
                        const char *port, void *ud) {
  silent *s = ud;
  (void)port;
  s->req = req;
  s->starts++;
  snprintf(s->host, sizeof(s->host), "%s", host);
  return 0;
}

static void silent_cancel(conch_resolve_req *req, void *ud) {
  silent *s = ud;
  assert_ptr_equal(req, s->req);
  s->cancels++;
}

static void test_deadline_covers_lookup(void **state) {
  silent s = {NULL, 0, 0, ""};
  conch_resolver r = {silent_start, silent_cancel, &s};
  conch_client *c = client_with("never.test", 443, &r, 60000);
  conch_status st;
  conch_call *call;
  int64_t t0 = conch__now_ms(), took;
  (void)state;

  call = start(c, 300, &st);
  assert_int_equal(s.starts, 0); /* not inside conch_call_start */
  took = finish(c, call, t0);
  assert_int_equal(s.starts, 1);
  assert_string_equal(s.host, "never.test");
  assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(took >= 290 && took < 10000);
  conch_status_clear(&st);
  /* The connection still waits for its answer; freeing the client gives
     it up, and the answer may come afterwards. */
  assert_int_equal(s.cancels, 0);
  conch_client_free(c);
  assert_int_equal(s.cancels, 1);
  assert_int_equal(conch_resolve_done(s.req, NULL, "too late"), 0);
}

static void test_connect_timeout_covers_lookup(void **state) {
  silent s = {NULL, 0, 0, ""};
  conch_resolver r = {silent_start, NULL, &s};
  conch_client *c = client_with("never.test", 443, &r, 300);
  conch_status st;
  conch_call *call;
  int64_t t0 = conch__now_ms(), took;
  (void)state;

  call = start(c, 0, &st);
  took = finish(c, call, t0);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(conch_status_message(&st), "looking up never.test"));
  assert_non_null(strstr(conch_status_message(&st), "timed out"));
  assert_true(took >= 290 && took < 10000);
  conch_status_clear(&st);
  conch_client_free(c);
  /* No cancel function: the answer still comes once. */
  assert_int_equal(conch_resolve_done(s.req, NULL, NULL), 0);
}

/* ---- Answers from inside start() ---------------------------------------- */

typedef struct sync_answer {
  int port;   /* 0: fail with |error| */
  int refuse; /* start() returns non-zero */
  const char *error;
  int starts;
} sync_answer;

static int sync_start(conch_resolve_req *req, const char *host,
                      const char *port, void *ud) {
  sync_answer *a = ud;
  struct addrinfo hints, *res = NULL;
  char p[16];
  (void)host;
  (void)port;

  a->starts++;
  if (a->refuse) {
    return -1;
  }
  if (a->port == 0) {
    assert_int_equal(conch_resolve_done(req, NULL, a->error), 0);
    return 0;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  snprintf(p, sizeof(p), "%d", a->port);
  assert_int_equal(getaddrinfo("127.0.0.1", p, &hints, &res), 0);
  assert_int_equal(conch_resolve_done(req, res, NULL), 0);
  freeaddrinfo(res); /* copied */
  return 0;
}

static void test_answer_inside_start(void **state) {
  int port, lfd = listener(&port);
  sync_answer a = {port, 0, NULL, 0};
  conch_resolver r = {sync_start, NULL, &a};
  conch_client *c = client_with("anything.test", 1, &r, 0);
  conch_status st;
  conch_call *call;
  (void)state;

  /* The resolver's answer wins over the URL's port: it gives addresses. */
  call = start(c, 0, &st);
  expect_preface(c, lfd);
  assert_int_equal(a.starts, 1);
  conch_call_cancel(call);
  finish(c, call, conch__now_ms());
  assert_int_equal(st.code, CONCH_CODE_CANCELED);
  conch_status_clear(&st);
  conch_client_free(c);
  close(lfd);
}

static void test_failed_and_refused_lookups(void **state) {
  sync_answer a = {0, 0, "no such host here", 0};
  conch_resolver r = {sync_start, NULL, &a};
  conch_client *c = client_with("missing.test", 443, &r, 0);
  conch_status st;
  (void)state;

  finish(c, start(c, 0, &st), conch__now_ms());
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(conch_status_message(&st), "cannot resolve"));
  assert_non_null(strstr(conch_status_message(&st), "no such host here"));
  conch_status_clear(&st);
  /* A later call looks the name up again. */
  finish(c, start(c, 0, &st), conch__now_ms());
  assert_int_equal(a.starts, 2);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  conch_status_clear(&st);
  conch_client_free(c);

  a.refuse = 1;
  c = client_with("refused.test", 443, &r, 0);
  finish(c, start(c, 0, &st), conch__now_ms());
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(conch_status_message(&st), "refused the lookup"));
  conch_status_clear(&st);
  conch_client_free(c);

  assert_int_equal(conch_resolve_done(NULL, NULL, NULL), CONCH_ERR_INVALID);
  {
    conch_client_opts *o;
    conch_resolver bad = {NULL, NULL, NULL};
    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_resolver(o, &bad),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_client_opts_set_resolver(NULL, &r),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_client_opts_set_resolver(o, NULL), 0);
    conch_client_opts_free(o);
  }
}

/* ---- The default resolver ------------------------------------------------ */

static void test_default_resolver(void **state) {
  int port, lfd = listener(&port);
  conch_client *c = client_with("localhost", port, NULL, 0);
  conch_status st;
  conch_call *call;
  (void)state;

  call = start(c, 0, &st);
  expect_preface(c, lfd);
  conch_call_cancel(call);
  finish(c, call, conch__now_ms());
  conch_status_clear(&st);
  conch_client_free(c);
  close(lfd);

  /* RFC 6761: .invalid never resolves. */
  c = client_with("no-such-host.invalid", port, NULL, 0);
  finish(c, start(c, 0, &st), conch__now_ms());
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(conch_status_message(&st), "cannot resolve"));
  conch_status_clear(&st);
  conch_client_free(c);

  /* Freed with a lookup under way: the thread finishes on its own. */
  c = client_with("localhost", port, NULL, 0);
  call = start(c, 0, &st);
  assert_int_equal(conch_client_run(c, 0), 0); /* the lookup starts */
  conch_call_free(call);
  conch_status_clear(&st);
  conch_client_free(c);
}

/* ---- 1,000 names from one thread ------------------------------------------
 */

#define NAMES 1000

typedef struct slow_job {
  conch_resolve_req *req;
  conch_client *c;
  int64_t due;
  struct slow_job *next;
} slow_job;

/* A resolver on a thread of its own that answers each lookup 50-150 ms
   after it was asked, through the client's wakeup. */
typedef struct slow {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  slow_job *asked; /* waiting for their time */
  slow_job *ready; /* answered, for the loop */
  int outstanding, max_outstanding, started, stop;
  int port;
} slow;

static slow S;

static int slow_start(conch_resolve_req *req, const char *host,
                      const char *port, void *ud) {
  conch_client *c = *(conch_client **)ud; /* its slot in the test */
  slow_job *j = calloc(1, sizeof(*j));
  (void)host;
  (void)port;
  assert_non_null(j);
  j->req = req;
  j->c = c;
  j->due = conch__now_ms() + 50 + rand() % 100;
  pthread_mutex_lock(&S.mu);
  j->next = S.asked;
  S.asked = j;
  S.started++;
  if (++S.outstanding > S.max_outstanding) {
    S.max_outstanding = S.outstanding;
  }
  pthread_cond_signal(&S.cv);
  pthread_mutex_unlock(&S.mu);
  return 0;
}

static void *slow_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&S.mu);
  while (!S.stop) {
    slow_job **pp = &S.asked;
    int64_t now = conch__now_ms();

    while (*pp != NULL) {
      slow_job *j = *pp;
      if (j->due <= now) {
        *pp = j->next;
        j->next = S.ready;
        S.ready = j;
        conch_client_wakeup(j->c);
      } else {
        pp = &j->next;
      }
    }
    {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 5 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&S.cv, &S.mu, &ts);
    }
  }
  pthread_mutex_unlock(&S.mu);
  return NULL;
}

/* The wakeup of client |c|: its answers go in. */
static void slow_wake(conch_client *c, void *ud) {
  slow_job **pp, *mine = NULL;
  (void)ud;
  pthread_mutex_lock(&S.mu);
  for (pp = &S.ready; *pp != NULL;) {
    slow_job *j = *pp;
    if (j->c == c) {
      *pp = j->next;
      j->next = mine;
      mine = j;
    } else {
      pp = &j->next;
    }
  }
  pthread_mutex_unlock(&S.mu);
  while (mine != NULL) {
    slow_job *j = mine;
    struct addrinfo hints, *res = NULL;
    char p[16];

    mine = j->next;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    snprintf(p, sizeof(p), "%d", S.port);
    assert_int_equal(getaddrinfo("127.0.0.1", p, &hints, &res), 0);
    pthread_mutex_lock(&S.mu);
    S.outstanding--;
    pthread_mutex_unlock(&S.mu);
    assert_int_equal(conch_resolve_done(j->req, res, NULL), 0);
    freeaddrinfo(res);
    free(j);
  }
}

static void test_thousand_names(void **state) {
  static conch_client *cs[NAMES];
  static conch_call *calls[NAMES];
  static conch_status sts[NAMES];
  pthread_t t;
  int64_t t0, longest = 0;
  int i, left, refused = 0;
  (void)state;

  memset(&S, 0, sizeof(S));
  pthread_mutex_init(&S.mu, NULL);
  pthread_cond_init(&S.cv, NULL);
  S.port = dead_port();
  srand(7);
  assert_int_equal(pthread_create(&t, NULL, slow_thread, NULL), 0);
  t0 = conch__now_ms();
  for (i = 0; i < NAMES; i++) {
    char host[32];
    conch_resolver r = {slow_start, NULL, NULL};

    /* The resolver wakes the client up: its user data is the client's
       slot, filled before any lookup starts. */
    r.user_data = &cs[i];
    snprintf(host, sizeof(host), "h%04d.test", i);
    cs[i] = client_with(host, S.port, &r, 0);
    assert_int_equal(conch_client_set_wakeup_cb(cs[i], slow_wake, NULL), 0);
    calls[i] = start(cs[i], 0, &sts[i]);
  }
  /* One thread drives all: no turn of any client may wait for a lookup. */
  left = NAMES;
  while (left > 0) {
    left = 0;
    for (i = 0; i < NAMES; i++) {
      int64_t a;
      if (calls[i] == NULL) {
        continue;
      }
      a = conch__now_ms();
      assert_int_equal(conch_client_run(cs[i], 0), 0);
      if (conch__now_ms() - a > longest) {
        longest = conch__now_ms() - a;
      }
      if (conch_call_done(calls[i])) {
        conch__client_run_done(cs[i]);
        conch_call_free(calls[i]);
        calls[i] = NULL;
        continue;
      }
      left++;
    }
    assert_true(conch__now_ms() - t0 < 120000);
  }
  print_message("1000 names: %lld ms in all, longest turn %lld ms, "
                "%d lookups under way at once at most\n",
                (long long)(conch__now_ms() - t0), (long long)longest,
                S.max_outstanding);
  pthread_mutex_lock(&S.mu);
  S.stop = 1;
  pthread_cond_signal(&S.cv);
  pthread_mutex_unlock(&S.mu);
  pthread_join(t, NULL);
  assert_int_equal(S.started, NAMES);
  /* Every lookup was started before the first answers came back. */
  assert_true(S.max_outstanding > NAMES / 2);
  for (i = 0; i < NAMES; i++) {
    char want[64];
    /* Each call was answered with its address and tried it. */
    snprintf(want, sizeof(want), "cannot connect to h%04d.test:", i);
    if (sts[i].code == CONCH_CODE_UNAVAILABLE &&
        strstr(conch_status_message(&sts[i]), want) != NULL) {
      refused++;
    }
    conch_status_clear(&sts[i]);
    conch_client_free(cs[i]);
  }
  assert_int_equal(refused, NAMES);
  pthread_mutex_destroy(&S.mu);
  pthread_cond_destroy(&S.cv);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deadline_covers_lookup),
      cmocka_unit_test(test_connect_timeout_covers_lookup),
      cmocka_unit_test(test_answer_inside_start),
      cmocka_unit_test(test_failed_and_refused_lookups),
      cmocka_unit_test(test_default_resolver),
      cmocka_unit_test(test_thousand_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
