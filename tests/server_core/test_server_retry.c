/* Retries by policy (conch/retry.h) against the server core failing on
   purpose: a server interceptor ends the first N calls with a code (and,
   when asked, a grpc-retry-pushback-ms trailer) before the service sees
   them, and records the grpc-previous-rpc-attempts each call carried.
   Over Connect (HTTP/2 and HTTP/1.1), gRPC and gRPC-Web: retried until
   OK; attempts exhausted; codes outside the policy; methods not marked
   idempotent; attempts that never left the client (a refused
   connection); pushback; the throttle; a stream that committed (messages
   delivered) against one that failed before its first message (Connect's
   held headers); client-streaming requests kept within the buffer and
   committed past it; the deadline across attempts; a cancel and a free
   during the backoff; the service config; and every allocation of the
   client failing in turn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include <conch/conch.h>
#include <conch/interceptor.h>
#include <conch/retry.h>

#include "failmem.h"
#include "svc.h"
#include "wait.h"

/* ---- The failing server ------------------------------------------------- */

#define MAX_SEEN 32

static struct {
  atomic_int fail_left; /* calls still to fail */
  atomic_int fail_code;
  atomic_int pushback;   /* -2: none; else the trailer's value */
  atomic_int calls;      /* calls the interceptor saw */
  atomic_int hold_first; /* 1: the first call is held, never answered */
  atomic_int canceled;   /* calls that closed canceled */
  atomic_int seen[MAX_SEEN]; /* conch_rpc_previous_attempts() */
} srv;

static void srv_reset(int fail, conch_code code) {
  int i;
  srv.fail_left = fail;
  srv.fail_code = code;
  srv.pushback = -2;
  srv.calls = 0;
  srv.hold_first = 0;
  srv.canceled = 0;
  for (i = 0; i < MAX_SEEN; i++) {
    srv.seen[i] = -9;
  }
}

static int s_fail_call(conch_rpc *rpc, conch_metadata *h, void **state,
                       void *ud) {
  int n = srv.calls++;
  (void)h;
  (void)state;
  (void)ud;
  if (n < MAX_SEEN) {
    srv.seen[n] = (int)conch_rpc_previous_attempts(rpc);
  }
  if (n == 0 && srv.hold_first) {
    return CONCH_ICEPT_DEFER; /* a slow server: it never answers */
  }
  if (srv.fail_left > 0) {
    conch_status st;
    srv.fail_left--;
    conch_status_init(&st);
    assert_int_equal(conch_status_setf(&st, NULL, (conch_code)srv.fail_code,
                                       "failing on purpose"),
                     0);
    assert_int_equal(conch_rpc_finish(rpc, &st), 0);
    conch_status_clear(&st);
  }
  return CONCH_ICEPT_NEXT;
}

static void s_pushback_close(conch_rpc *rpc, conch_status *st,
                             conch_metadata *t, void **state, void *ud) {
  char num[16];
  (void)rpc;
  (void)state;
  (void)ud;
  if (st->code == CONCH_CODE_CANCELED) {
    srv.canceled++;
  }
  if (st->code != CONCH_CODE_OK && srv.pushback != -2) {
    snprintf(num, sizeof(num), "%d", (int)srv.pushback);
    (void)conch_metadata_add_str(t, "grpc-retry-pushback-ms", num);
  }
}

static void start(fixture *fx) {
  conch_rpc_interceptor pb = CONCH_RPC_INTERCEPTOR_INIT;
  conch_rpc_interceptor f = CONCH_RPC_INTERCEPTOR_INIT;
  fx_start(fx, NULL, 0);
  pb.on_close = s_pushback_close;
  f.on_call = s_fail_call;
  fx_pause(fx);
  assert_int_equal(conch_server_add_interceptor(fx->s, &pb), 0);
  assert_int_equal(conch_server_add_interceptor(fx->s, &f), 0);
  fx_resume(fx);
}

/* ---- Clients ------------------------------------------------------------ */

static conch_protocol use_proto = CONCH_PROTOCOL_CONNECT;
static int use_h1;

/* A unary method of the test service not marked idempotent. */
static const conch_method m_unary_unknown = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

static conch_retry_policy policy(int attempts, long initial_ms) {
  conch_retry_policy p = CONCH_RETRY_POLICY_INIT;
  p.max_attempts = attempts;
  p.initial_backoff_ms = initial_ms;
  p.max_backoff_ms = initial_ms * 4;
  p.backoff_multiplier = 2.0;
  p.retryable_codes = CONCH_RETRY_CODE(CONCH_CODE_UNAVAILABLE) |
                      CONCH_RETRY_CODE(CONCH_CODE_RESOURCE_EXHAUSTED);
  return p;
}

static double fixed_random(void *ud) { return *(double *)ud; }

static conch_client_opts *base_opts(void) {
  conch_client_opts *o;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, use_proto), 0);
  if (use_h1) {
    assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  }
  return o;
}

static conch_client *client_with(const char *url, conch_client_opts *o) {
  conch_client *c;
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static conch_client *client(const fixture *fx, const conch_retry_policy *p) {
  conch_client_opts *o = base_opts();
  assert_int_equal(conch_client_opts_set_retry(o, "conchtest.v1.TestService",
                                               p),
                   0);
  return client_with(fx->url, o);
}

typedef struct result {
  conch_code code;
  unsigned attempts;
  char echo[64];
  int headers; /* on_headers runs */
  int messages;
} result;

static void on_headers(conch_call *call, const conch_metadata *h, void *ud) {
  (void)call;
  (void)h;
  ((result *)ud)->headers++;
}

static void on_message(conch_call *call, const ProtobufCMessage *m, void *ud) {
  const Conchtest__V1__Response *r = (const Conchtest__V1__Response *)m;
  result *res = ud;
  (void)call;
  res->messages++;
  snprintf(res->echo, sizeof(res->echo), "%.*s", (int)r->payload.len,
           (const char *)r->payload.data);
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  result *res = ud;
  (void)t;
  res->code = st->code;
  res->attempts = conch_call_attempts(call);
}

static const conch_call_handler push = {on_headers, on_message, NULL, NULL,
                                        on_close};

/* One call of |m| with |payload| (ServerStream: |count| responses, then
   the error |err| when not OK), driven to its end. */
static result call_one(conch_client *c, const conch_method *m,
                       const char *payload, uint32_t count, conch_code err,
                       long timeout_ms) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__ErrorSpec es = CONCHTEST__V1__ERROR_SPEC__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  result res;
  conch_call *call;
  int rv;
  memset(&res, 0, sizeof(res));
  res.code = (conch_code)-1;
  req.payload.data = (uint8_t *)payload;
  req.payload.len = strlen(payload);
  req.response_count = count;
  if (err != CONCH_CODE_OK) {
    es.code = (int32_t)err;
    es.message = "after the responses";
    req.error = &es;
  }
  co.timeout_ms = timeout_ms;
  assert_int_equal(conch_call_start(c, m, &co, &push, &res, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  if (m->kind == CONCH_STREAM_CLIENT || m->kind == CONCH_STREAM_BIDI) {
    assert_int_equal(conch_call_send(call, &req.base), 0);
    assert_int_equal(conch_call_send(call, &req.base), 0);
    assert_int_equal(conch_call_close_send(call), 0);
  }
  rv = conch_call_wait_sync(call);
  assert_true(rv == 0 || rv == CONCH_ERR_RPC);
  assert_true(conch_call_done(call));
  assert_int_equal(conch_call_attempts(call), res.attempts);
  conch_call_free(call);
  return res;
}

static result unary(conch_client *c, const conch_method *m, const char *p) {
  return call_one(c, m, p, 0, CONCH_CODE_OK, 20000);
}

/* Runs |fn| for each protocol, and Connect over HTTP/1.1. */
static void each_protocol(void (*fn)(void)) {
  static const struct {
    conch_protocol p;
    int h1;
  } runs[] = {{CONCH_PROTOCOL_CONNECT, 0},
              {CONCH_PROTOCOL_CONNECT, 1},
              {CONCH_PROTOCOL_GRPC, 0},
              {CONCH_PROTOCOL_GRPC_WEB, 0},
              {CONCH_PROTOCOL_GRPC_WEB, 1}};
  const char *only = getenv("RETRY_ONLY"); /* one run, to debug it */
  size_t i;
  for (i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    if (only != NULL && (size_t)atoi(only) != i) {
      continue;
    }
    use_proto = runs[i].p;
    use_h1 = runs[i].h1;
    fn();
  }
  use_proto = CONCH_PROTOCOL_CONNECT;
  use_h1 = 0;
}

/* ---- Tests -------------------------------------------------------------- */

/* Two failures, then OK: three attempts, each but the first saying how
   many came before; the application saw one answer. */
static void retried_until_ok(void) {
  conch_retry_policy p = policy(4, 5);
  fixture fx;
  conch_client *c;
  result r;
  start(&fx);
  c = client(&fx, &p);
  srv_reset(2, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "third time");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.echo, "third time");
  assert_int_equal(r.attempts, 3);
  assert_int_equal(r.headers, 1);
  assert_int_equal(srv.calls, 3);
  assert_int_equal(srv.seen[0], 0);
  assert_int_equal(srv.seen[1], 1);
  assert_int_equal(srv.seen[2], 2);
  /* Exhausted: max_attempts in all, then the last attempt's status. */
  srv_reset(100, CONCH_CODE_RESOURCE_EXHAUSTED);
  r = unary(c, &m_unary, "never");
  assert_int_equal(r.code, CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_int_equal(r.attempts, 4);
  assert_int_equal(srv.calls, 4);
  /* gRPC-Web may have headers before its trailers (the only form over
     HTTP/1.1): held until the last attempt ended, then given as they
     would be without a policy, once. */
  if (use_proto == CONCH_PROTOCOL_GRPC_WEB) {
    assert_true(r.headers <= 1);
  } else {
    assert_int_equal(r.headers, 0);
  }
  /* A code outside the policy ends the call at once. */
  srv_reset(1, CONCH_CODE_INTERNAL);
  r = unary(c, &m_unary, "internal");
  assert_int_equal(r.code, CONCH_CODE_INTERNAL);
  assert_int_equal(r.attempts, 1);
  assert_int_equal(srv.calls, 1);
  /* A method not marked idempotent, sent: the server may have acted. */
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary_unknown, "once");
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  /* Without a policy nothing is retried. */
  conch_client_free(c);
  c = client(&fx, NULL);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "none");
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  conch_client_free(c);
  /* non_idempotent: what gRPC does for any method in its config. */
  p.non_idempotent = 1;
  c = client(&fx, &p);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary_unknown, "any");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 2);
  conch_client_free(c);
  fx_stop(&fx);
}

static void test_unary(void **state) {
  (void)state;
  each_protocol(retried_until_ok);
}

/* A port nobody listens on: every attempt fails before a byte leaves,
   so even a method not marked idempotent is tried max_attempts times. */
static void test_never_sent(void **state) {
  conch_retry_policy p = policy(3, 5);
  struct sockaddr_in a;
  socklen_t alen = sizeof(a);
  conch_client_opts *o;
  conch_client *c;
  char url[64];
  result r;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  (void)state;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
  close(fd); /* nothing listens there now */
  snprintf(url, sizeof(url), "http://127.0.0.1:%u", ntohs(a.sin_port));
  o = base_opts();
  assert_int_equal(conch_client_opts_set_retry(o, NULL, &p), 0);
  c = client_with(url, o);
  r = unary(c, &m_unary_unknown, "nobody");
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 3);
  conch_client_free(c);
}

/* The server's pushback replaces the backoff; a negative one stops. */
static void test_pushback(void **state) {
  conch_retry_policy p = policy(3, 1);
  fixture fx;
  conch_client *c;
  long long t0;
  result r;
  (void)state;
  start(&fx);
  c = client(&fx, &p);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  srv.pushback = 300;
  t0 = conch_now_ms();
  r = unary(c, &m_unary, "later");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 2);
  assert_true(conch_now_ms() - t0 >= 300);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  srv.pushback = -1;
  r = unary(c, &m_unary, "never");
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  conch_client_free(c);
  fx_stop(&fx);
}

static const conch_method m_sstream_safe = {
    SVC "ServerStream", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_IDEMPOTENT};

/* Four tokens, one per failed attempt, one back per success; no retry at
   or below two. */
static void test_throttle(void **state) {
  conch_retry_policy p = policy(5, 1);
  conch_client_opts *o;
  fixture fx;
  conch_client *c;
  result r;
  (void)state;
  start(&fx);
  o = base_opts();
  assert_int_equal(conch_client_opts_set_retry(o, "", &p), 0);
  assert_int_equal(conch_client_opts_set_retry_throttle(o, 4, 1.0), 0);
  assert_int_equal(conch_client_opts_set_retry_throttle(o, 4, 0.0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_retry_throttle(o, 1001, 1.0),
                   CONCH_ERR_INVALID);
  c = client_with(fx.url, o);
  srv_reset(100, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "a"); /* 4 -> 3 (retry) -> 2 (stop) */
  assert_int_equal(r.attempts, 2);
  r = unary(c, &m_unary, "b"); /* 2 -> 1 */
  assert_int_equal(r.attempts, 1);
  srv_reset(0, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "c"); /* OK: 1 -> 2 */
  assert_int_equal(r.code, CONCH_CODE_OK);
  r = unary(c, &m_unary, "d"); /* 2 -> 3 */
  srv_reset(100, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "e"); /* 3 -> 2: stop */
  assert_int_equal(r.attempts, 1);
  conch_client_free(c);
  /* A retryable failure that cannot be retried (the stream committed:
     its messages reached the application) costs a token all the same. */
  o = base_opts();
  assert_int_equal(conch_client_opts_set_retry(o, "", &p), 0);
  assert_int_equal(conch_client_opts_set_retry_throttle(o, 4, 1.0), 0);
  c = client_with(fx.url, o);
  srv_reset(0, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_sstream_safe, "s", 2, CONCH_CODE_UNAVAILABLE, 20000);
  assert_int_equal(r.attempts, 1); /* 4 -> 3 */
  assert_int_equal(r.messages, 2);
  r = call_one(c, &m_sstream_safe, "s", 2, CONCH_CODE_UNAVAILABLE, 20000);
  assert_int_equal(r.attempts, 1); /* 3 -> 2 */
  srv_reset(100, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "f"); /* 2 -> 1: no retry */
  assert_int_equal(r.attempts, 1);
  conch_client_free(c);
  fx_stop(&fx);
}

/* Streams: an error before any message is retried (Connect holds the
   headers for it: on_headers once, for the attempt that answers); after
   messages reached the application the call has committed. */
static void streams(void) {
  static const conch_method m_cstream_safe = {
      SVC "ClientStream", CONCH_STREAM_CLIENT,
      &conchtest__v1__request__descriptor,
      &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_IDEMPOTENT};
  conch_retry_policy p = policy(3, 5);
  fixture fx;
  conch_client *c;
  result r;
  start(&fx);
  c = client(&fx, &p);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_sstream_safe, "s", 3, CONCH_CODE_OK, 20000);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 2);
  assert_int_equal(r.messages, 3);
  assert_int_equal(r.headers, 1);
  /* Two messages, then unavailable from the service: committed. */
  srv_reset(0, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_sstream_safe, "s", 2, CONCH_CODE_UNAVAILABLE, 20000);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  assert_int_equal(r.messages, 2);
  assert_int_equal(r.headers, 1);
  assert_int_equal(srv.calls, 1);
  /* No message, then the service's error: Connect held its headers, so
     this retries too; and on_headers ran for the last attempt only. */
  srv_reset(0, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_sstream_safe, "s", 0, CONCH_CODE_UNAVAILABLE, 20000);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 3);
  assert_int_equal(srv.calls, 3);
  assert_int_equal(r.headers, use_proto == CONCH_PROTOCOL_GRPC ? 0 : 1);
  /* Client streaming: the three requests are kept and sent again. */
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_cstream_safe, "abc", 0, CONCH_CODE_OK, 20000);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 2);
  conch_client_free(c);
  /* ... unless they outgrow the buffer: the call commits. */
  p.buffer_bytes = 8;
  c = client(&fx, &p);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_cstream_safe, "abcdefghijkl", 0, CONCH_CODE_OK, 20000);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  conch_client_free(c);
  fx_stop(&fx);
}

static void test_streams(void **state) {
  (void)state;
  each_protocol(streams);
}

/* The deadline runs across attempts: a backoff that would end past it is
   not started. */
static void test_deadline(void **state) {
  conch_retry_policy p = policy(5, 400);
  conch_client_opts *o;
  double r99 = 0.99;
  fixture fx;
  conch_client *c;
  result r;
  (void)state;
  start(&fx);
  o = base_opts();
  assert_int_equal(conch_client_opts_set_retry(o, NULL, &p), 0);
  assert_int_equal(conch_client_opts_set_backoff_random(o, fixed_random, &r99),
                   0);
  c = client_with(fx.url, o);
  srv_reset(100, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_unary, "x", 0, CONCH_CODE_OK, 300); /* 396 > 300 */
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  r = call_one(c, &m_unary, "y", 0, CONCH_CODE_OK, 5000);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 5);
  conch_client_free(c);
  fx_stop(&fx);
}

/* A cancel in the backoff ends the call canceled, on_close once; a free
   there too. */
typedef struct counted {
  int closes;
  conch_code code;
} counted;

static void count_close(conch_call *call, const conch_status *st,
                        const conch_metadata *t, void *ud) {
  counted *k = ud;
  (void)call;
  (void)t;
  k->closes++;
  k->code = st->code;
}

static void test_cancel_in_backoff(void **state) {
  static const conch_call_handler h = {NULL, NULL, NULL, NULL, count_close};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_retry_policy p = policy(3, 1);
  fixture fx;
  conch_client *c;
  conch_call *call;
  counted k;
  int pass;
  (void)state;
  start(&fx);
  c = client(&fx, &p);
  for (pass = 0; pass < 2; pass++) {
    memset(&k, 0, sizeof(k));
    srv_reset(1, CONCH_CODE_UNAVAILABLE);
    srv.pushback = 60000;
    assert_int_equal(conch_call_start(c, &m_unary, NULL, &h, &k, &call), 0);
    assert_int_equal(conch_call_send(call, &req.base), 0);
    /* Until the only timer is the minute of the pushback. */
    while (srv.calls < 1 || conch_client_timeout_ms(c) < 45000) {
      assert_int_equal(conch_client_run(c, 50), 0);
      assert_int_equal(k.closes, 0);
    }
    /* The first attempt failed; the second waits a minute. */
    assert_int_equal(k.closes, 0);
    assert_false(conch_call_done(call));
    if (pass == 0) {
      assert_int_equal(conch_call_cancel(call), 0);
      while (k.closes == 0) {
        assert_int_equal(conch_client_run(c, 50), 0);
      }
      conch_call_free(call);
    } else {
      conch_call_free(call); /* on_close runs inside */
    }
    if (k.closes != 1 || k.code != CONCH_CODE_CANCELED) {
      fail_msg("pass %d: %d closes, code %d", pass, k.closes, (int)k.code);
    }
    if (srv.calls != 1) {
      fail_msg("pass %d: %d calls", pass, (int)srv.calls);
    }
  }
  conch_client_free(c);
  fx_stop(&fx);
}

/* ---- Hedging ------------------------------------------------------------ */

static conch_hedge_policy hedge_policy(int attempts, long delay_ms) {
  conch_hedge_policy h = CONCH_HEDGE_POLICY_INIT;
  h.max_attempts = attempts;
  h.hedging_delay_ms = delay_ms;
  h.non_fatal_codes = CONCH_RETRY_CODE(CONCH_CODE_UNAVAILABLE);
  return h;
}

static conch_client *hedge_client(const fixture *fx,
                                  const conch_hedge_policy *h) {
  conch_client_opts *o = base_opts();
  assert_int_equal(conch_client_opts_set_hedge(o, "conchtest.v1.TestService",
                                               h),
                   0);
  return client_with(fx->url, o);
}

/* A first attempt the server sits on: the second, a hedging delay later,
   answers; the first is canceled (the server sees it close canceled). */
static void hedged(void) {
  conch_hedge_policy h = hedge_policy(3, 100);
  fixture fx;
  conch_client *c;
  long long t0;
  result r;
  int i;
  start(&fx);
  c = hedge_client(&fx, &h);
  srv_reset(0, CONCH_CODE_UNAVAILABLE);
  srv.hold_first = 1;
  t0 = conch_now_ms();
  r = unary(c, &m_unary, "hedged");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.echo, "hedged");
  assert_int_equal(r.attempts, 2);
  assert_int_equal(r.headers, 1);
  assert_true(conch_now_ms() - t0 >= 100);
  assert_int_equal(srv.calls, 2);
  assert_int_equal(srv.seen[1], 1);
  for (i = 0; i < 2000 && srv.canceled == 0; i++) {
    assert_int_equal(conch_client_run(c, 10), 0);
  }
  assert_int_equal(srv.canceled, 1);
  /* A server stream: the messages of the winner only. */
  srv_reset(0, CONCH_CODE_UNAVAILABLE);
  srv.hold_first = 1;
  r = call_one(c, &m_sstream_safe, "s", 3, CONCH_CODE_OK, 20000);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.messages, 3);
  assert_int_equal(r.headers, 1);
  assert_int_equal(r.attempts, 2);
  conch_client_free(c);
  fx_stop(&fx);
}

static void test_hedge(void **state) {
  (void)state;
  each_protocol(hedged);
}

/* Non-fatal failures start the next attempt at once; a fatal one ends the
   call; all failing ends with the last; a method not marked idempotent,
   and a blocking unary (pull mode) call. */
static void test_hedge_codes(void **state) {
  conch_hedge_policy h = hedge_policy(3, 10000);
  fixture fx;
  conch_client *c;
  long long t0;
  result r;
  (void)state;
  start(&fx);
  c = hedge_client(&fx, &h);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  t0 = conch_now_ms();
  r = unary(c, &m_unary, "second");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 2);
  assert_true(conch_now_ms() - t0 < 5000); /* not the 10 s delay */
  srv_reset(1, CONCH_CODE_INTERNAL);
  r = unary(c, &m_unary, "fatal");
  assert_int_equal(r.code, CONCH_CODE_INTERNAL);
  assert_int_equal(r.attempts, 1);
  assert_int_equal(srv.calls, 1);
  srv_reset(100, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "all");
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 3);
  assert_int_equal(srv.calls, 3);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary_unknown, "once");
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  {
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    conch_status st;
    conch_status_init(&st);
    req.payload.data = (uint8_t *)"sync";
    req.payload.len = 4;
    srv_reset(1, CONCH_CODE_UNAVAILABLE);
    assert_int_equal(conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st,
                                      NULL, NULL),
                     0);
    assert_int_equal(((Conchtest__V1__Response *)out)->payload.len, 4);
    conch_message_free(c, out);
    conch_status_clear(&st);
    assert_int_equal(srv.calls, 2);
  }
  conch_client_free(c);
  fx_stop(&fx);
}

/* A cancel and a free while the first attempt is held and the next waits
   for the delay: on_close once, canceled; the held attempt is canceled at
   the server. */
static void test_hedge_cancel(void **state) {
  static const conch_call_handler hc = {NULL, NULL, NULL, NULL, count_close};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_hedge_policy h = hedge_policy(3, 60000);
  fixture fx;
  conch_client *c;
  conch_call *call;
  counted k;
  int pass, i;
  (void)state;
  start(&fx);
  c = hedge_client(&fx, &h);
  for (pass = 0; pass < 2; pass++) {
    memset(&k, 0, sizeof(k));
    srv_reset(0, CONCH_CODE_UNAVAILABLE);
    srv.hold_first = 1;
    assert_int_equal(conch_call_start(c, &m_unary, NULL, &hc, &k, &call), 0);
    assert_int_equal(conch_call_send(call, &req.base), 0);
    while (srv.calls < 1) {
      assert_int_equal(conch_client_run(c, 10), 0);
    }
    assert_int_equal(conch_call_attempts(call), 1);
    if (pass == 0) {
      assert_int_equal(conch_call_cancel(call), 0);
      while (k.closes == 0) {
        assert_int_equal(conch_client_run(c, 10), 0);
      }
      conch_call_free(call);
    } else {
      conch_call_free(call);
    }
    if (k.closes != 1 || k.code != CONCH_CODE_CANCELED) {
      fail_msg("pass %d: %d closes, code %d", pass, k.closes, (int)k.code);
    }
    for (i = 0; i < 2000 && srv.canceled == 0; i++) {
      assert_int_equal(conch_client_run(c, 10), 0);
    }
    assert_int_equal(srv.canceled, 1);
    assert_int_equal(srv.calls, 1);
  }
  conch_client_free(c);
  fx_stop(&fx);
}

/* The service config: names, durations, codes by name and number, the
   throttle; errors say what is wrong and set nothing. */
static void test_service_config(void **state) {
  static const char good[] =
      "{\"methodConfig\": [{\"name\": [{\"service\": "
      "\"conchtest.v1.TestService\", \"method\": \"Unary\"}],"
      " \"timeout\": \"5s\", \"retryPolicy\": {\"maxAttempts\": 3,"
      " \"initialBackoff\": \"0.005s\", \"maxBackoff\": \"0.02s\","
      " \"backoffMultiplier\": 2, \"retryableStatusCodes\": [\"UNAVAILABLE\","
      " 8]}}], \"retryThrottling\": {\"maxTokens\": 10, \"tokenRatio\": "
      "0.5}, \"loadBalancingConfig\": [{\"round_robin\": {}}]}";
  static const char *const bad[] = {
      "[]",
      "{\"methodConfig\": {}}",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"retryPolicy\":"
      " {\"maxAttempts\": 1, \"initialBackoff\": \"1s\", \"maxBackoff\": "
      "\"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": [14]}}]}",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"retryPolicy\":"
      " {\"maxAttempts\": 2, \"initialBackoff\": \"1\", \"maxBackoff\": "
      "\"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": [14]}}]}",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"retryPolicy\":"
      " {\"maxAttempts\": 2, \"initialBackoff\": \"1s\", \"maxBackoff\": "
      "\"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": "
      "[\"NOPE\"]}}]}",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"retryPolicy\":"
      " {\"maxAttempts\": 2, \"initialBackoff\": \"1s\", \"maxBackoff\": "
      "\"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": []}}]}",
      "{\"methodConfig\": [{\"name\": [{\"method\": \"m\"}], \"retryPolicy\":"
      " {\"maxAttempts\": 2, \"initialBackoff\": \"1s\", \"maxBackoff\": "
      "\"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": [14]}}]}",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"retryPolicy\":"
      " {\"maxAttempts\": 2.5, \"initialBackoff\": \"1s\", \"maxBackoff\": "
      "\"1s\", \"backoffMultiplier\": 2, \"retryableStatusCodes\": [14]}}]}",
      "{\"retryThrottling\": {\"maxTokens\": 0, \"tokenRatio\": 1}}",
      "{\"methodConfig\": [",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"hedgingPolicy\":"
      " {\"hedgingDelay\": \"1s\"}}]}",
      "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], \"hedgingPolicy\":"
      " {\"maxAttempts\": 2}, \"retryPolicy\": {\"maxAttempts\": 2, "
      "\"initialBackoff\": \"1s\", \"maxBackoff\": \"1s\", \"backoffMultiplier\":"
      " 2, \"retryableStatusCodes\": [14]}}]}",
  };
  conch_client_opts *o;
  fixture fx;
  conch_client *c;
  char err[200];
  result r;
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    o = base_opts();
    assert_int_equal(conch_client_opts_set_service_config(o, bad[i], err,
                                                          sizeof(err)),
                     CONCH_ERR_INVALID);
    assert_true(strlen(err) > 0);
    conch_client_opts_free(o);
  }
  /* A maxAttempts past any int is capped, as gRPC caps it (at 5). */
  o = base_opts();
  assert_int_equal(
      conch_client_opts_set_service_config(
          o,
          "{\"methodConfig\": [{\"name\": [{\"service\": \"s\"}], "
          "\"retryPolicy\": {\"maxAttempts\": 1e20, \"initialBackoff\": "
          "\"1s\", \"maxBackoff\": \"1s\", \"backoffMultiplier\": 2, "
          "\"retryableStatusCodes\": [14]}}]}",
          err, sizeof(err)),
      0);
  conch_client_opts_free(o);
  start(&fx);
  o = base_opts();
  err[0] = 'x';
  assert_int_equal(
      conch_client_opts_set_service_config(o, good, err, sizeof(err)), 0);
  assert_string_equal(err, "");
  c = client_with(fx.url, o);
  srv_reset(2, CONCH_CODE_RESOURCE_EXHAUSTED); /* 8 */
  r = unary(c, &m_unary, "config");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 3);
  /* Only Unary has the policy. */
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = call_one(c, &m_sstream, "s", 1, CONCH_CODE_OK, 20000);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(r.attempts, 1);
  conch_client_free(c);
  /* A hedgingPolicy. */
  o = base_opts();
  assert_int_equal(
      conch_client_opts_set_service_config(
          o,
          "{\"methodConfig\": [{\"name\": [{\"service\": "
          "\"conchtest.v1.TestService\"}], \"hedgingPolicy\": "
          "{\"maxAttempts\": 2, \"hedgingDelay\": \"5s\", "
          "\"nonFatalStatusCodes\": [\"UNAVAILABLE\"]}}]}",
          err, sizeof(err)),
      0);
  c = client_with(fx.url, o);
  srv_reset(1, CONCH_CODE_UNAVAILABLE);
  r = unary(c, &m_unary, "hedge");
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.attempts, 2);
  conch_client_free(c);
  fx_stop(&fx);
  /* Setters refuse what is out of range. */
  {
    conch_retry_policy p = policy(2, 1);
    o = base_opts();
    assert_int_equal(conch_client_opts_set_retry(o, "/a/b", &p),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_client_opts_set_retry(o, "a/b/c", &p),
                     CONCH_ERR_INVALID);
    p.max_attempts = 1;
    assert_int_equal(conch_client_opts_set_retry(o, "a", &p),
                     CONCH_ERR_INVALID);
    p = policy(2, 1);
    p.retryable_codes |= CONCH_RETRY_CODE(CONCH_CODE_OK);
    assert_int_equal(conch_client_opts_set_retry(o, "a", &p),
                     CONCH_ERR_INVALID);
    p = policy(2, 1);
    assert_int_equal(conch_client_opts_set_retry(o, "a", &p), 0);
    assert_int_equal(conch_client_opts_set_retry(o, "a", NULL), 0);
    conch_client_opts_free(o);
  }
}

/* Every allocation of the client failing in turn through a retried call:
   nothing leaks, the call ends once, and the last run (nothing failing)
   retries to OK. */
static void every_oom(int hedge) {
  conch_retry_policy p = policy(3, 1);
  conch_hedge_policy h = hedge_policy(3, 10000);
  fixture fx;
  size_t n;
  start(&fx);
  for (n = 0;; n++) {
    conch_client_opts *o = base_opts();
    conch_client *c = NULL;
    conch_code code = CONCH_CODE_UNKNOWN;
    unsigned attempts = 0;
    int rv;
    assert_int_equal(conch_client_opts_set_mem(o, failmem_hooks()), 0);
    if (hedge) {
      assert_int_equal(conch_client_opts_set_hedge(o, NULL, &h), 0);
    } else {
      assert_int_equal(conch_client_opts_set_retry(o, NULL, &p), 0);
    }
    srv_reset(1, CONCH_CODE_UNAVAILABLE);
    failmem_fail_at(n);
    rv = conch_client_new(&c, fx.url, o);
    conch_client_opts_free(o);
    if (rv == 0) {
      Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
      ProtobufCMessage *out = NULL;
      conch_status st;
      conch_status_init(&st);
      req.payload.data = (uint8_t *)"oom";
      req.payload.len = 3;
      (void)conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL,
                             NULL);
      code = st.code;
      attempts = srv.calls;
      conch_message_free(c, out);
      conch_status_clear(&st);
      conch_client_free(c);
    } else {
      assert_int_equal(rv, CONCH_ERR_NOMEM);
    }
    if (failmem_live_blocks() != 0) {
      fail_msg("allocation %zu failed: %ld blocks left", n,
               failmem_live_blocks());
    }
    if (!failmem_fired()) {
      assert_int_equal(code, CONCH_CODE_OK);
      assert_int_equal(attempts, 2);
      break;
    }
  }
  failmem_fail_at((size_t)-1);
  printf("# %s: %zu allocations swept\n", hedge ? "hedging" : "retries", n);
  fx_stop(&fx);
}

static void test_every_oom(void **state) {
  (void)state;
  every_oom(0);
  every_oom(1);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_never_sent),
      cmocka_unit_test(test_pushback),
      cmocka_unit_test(test_throttle),
      cmocka_unit_test(test_streams),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_cancel_in_backoff),
      cmocka_unit_test(test_hedge),
      cmocka_unit_test(test_hedge_codes),
      cmocka_unit_test(test_hedge_cancel),
      cmocka_unit_test(test_service_config),
      cmocka_unit_test(test_every_oom),
  };
  if (argc > 1) {
    cmocka_set_test_filter(argv[1]); /* one case, to debug it */
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
