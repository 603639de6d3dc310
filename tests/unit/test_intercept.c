/* The client's interceptors (conch/interceptor.h) on the in-memory HTTP/2
   echo server (memsrv.h): the three examples of the design (an auth token
   fetched asynchronously and injected, logging with timing, metrics by
   code), short-circuits, the deadline and cancel while a call is held,
   changed messages and statuses, the one-callback and stub paths, and
   every allocation of a call through a chain failing in turn.  No
   sockets and no real clock (memx's): each run is deterministic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "conchtest/v1/test.pb-c.h"
#include "failmem.h"
#include "memsrv.h"
#include "memxport.h"

#define SVC "/conchtest.v1.TestService/"
#define URL "http://127.0.0.1:8080"
#define TURNS 200 /* exchanges before a run counts as hung */

static const conch_method m_unary = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_bidi = {
    SVC "Bidi", CONCH_STREAM_BIDI, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

/* ---- The example interceptors ------------------------------------------ */

/* Auth: a token "fetched" asynchronously.  on_start asks the token source
   and defers the call; the test's loop answers a few turns later
   (token_pump), which adds authorization and resumes the call.  The
   pending request is the interceptor's per-call state, allocated with
   the client's allocator (failmem in the sweep) and freed at close. */
typedef struct token_src {
  const conch_mem *mem;
  const char *token;  /* NULL: the source fails (the call is refused) */
  conch_call *waiting; /* the one call waiting for a token */
  int turns;           /* turns before it answers */
  int sync;            /* 1: answer inside on_start (no deferral) */
  int never;           /* 1: never answers */
  int closes;          /* on_close runs */
  int starts;
} token_src;

typedef struct token_req {
  token_src *src;
  int answered;
} token_req;

/* The token source has none: the call is refused. */
static void auth_refuse(conch_call *call) {
  assert_int_equal(
      conch_call_abort(call, CONCH_CODE_UNAUTHENTICATED, "no token to be had"),
      0);
}

static conch_metadata *g_md_for_grant; /* set by auth_start for the grant */

static int auth_start(conch_call *call, conch_metadata *headers, void **state,
                      void *ud) {
  token_src *t = ud;
  token_req *r;
  t->starts++;
  r = t->mem->malloc(sizeof(*r), t->mem->user_data);
  if (r == NULL) {
    conch_call_abort(call, CONCH_CODE_RESOURCE_EXHAUSTED,
                     "out of memory asking for a token");
    return CONCH_ICEPT_NEXT;
  }
  r->src = t;
  r->answered = 0;
  *state = r;
  g_md_for_grant = headers;
  if (t->sync) {
    if (t->token == NULL) {
      auth_refuse(call);
      return CONCH_ICEPT_NEXT;
    }
    if (conch_metadata_add_str(headers, "authorization", "Bearer sync") != 0) {
      conch_call_abort(call, CONCH_CODE_RESOURCE_EXHAUSTED, "no memory");
    }
    return CONCH_ICEPT_NEXT;
  }
  t->waiting = call;
  return CONCH_ICEPT_DEFER;
}

static void auth_close(conch_call *call, conch_status *st, conch_metadata *tr,
                       void **state, void *ud) {
  token_src *t = ud;
  (void)st;
  (void)tr;
  t->closes++;
  if (t->waiting == call) {
    t->waiting = NULL; /* the call ended while waiting: forget it */
  }
  if (*state != NULL) {
    t->mem->free(*state, t->mem->user_data);
    *state = NULL;
  }
}

/* The token source's turn: answers the waiting call when due. */
static void token_pump(token_src *t) {
  conch_call *call = t->waiting;
  char v[80];
  if (call == NULL || t->never || t->turns-- > 0) {
    return;
  }
  t->waiting = NULL;
  if (t->token == NULL) {
    auth_refuse(call);
    return;
  }
  snprintf(v, sizeof(v), "Bearer %s", t->token);
  /* The request metadata is the call's until it goes out: on_start handed
     it over (the state could keep it; one call waits here at a time). */
  if (conch_metadata_add_str(g_md_for_grant, "authorization", v) != 0) {
    conch_call_abort(call, CONCH_CODE_RESOURCE_EXHAUSTED, "no memory");
    return;
  }
  assert_int_equal(conch_call_icept_resume(call), 0);
}

/* A guard that short-circuits calls without authorization (what a
   server's interceptor does, here on the client: nothing is sent). */
static int guard_start(conch_call *call, conch_metadata *headers, void **state,
                       void *ud) {
  int *refused = ud;
  (void)state;
  if (conch_metadata_get(headers, "authorization", NULL) == NULL) {
    (*refused)++;
    conch_call_abort(call, CONCH_CODE_UNAUTHENTICATED,
                     "authorization required");
  }
  return CONCH_ICEPT_NEXT;
}

/* Logging with timing, on memx's clock: the start time in the state (no
   allocation: the slot holds the time itself), messages and bytes seen
   both ways, the end's code and duration. */
typedef struct log_rec {
  const memx *clock;
  int starts, closes, headers;
  int sent, recvd;
  size_t sent_bytes, recvd_bytes;
  int64_t took_ms;
  conch_code code;
  char path[64];
  char order[16]; /* hooks of all interceptors, in the order they ran */
} log_rec;

static char *g_order; /* log_rec.order of the run, shared by everybody */

static void order_add(char ch) {
  size_t n;
  if (g_order == NULL) {
    return;
  }
  n = strlen(g_order);
  if (n + 1 < 16) {
    g_order[n] = ch;
    g_order[n + 1] = '\0';
  }
}

static int log_start(conch_call *call, conch_metadata *headers, void **state,
                     void *ud) {
  log_rec *l = ud;
  (void)headers;
  l->starts++;
  order_add('L');
  snprintf(l->path, sizeof(l->path), "%s", conch_call_method(call)->path);
  *state = (void *)(intptr_t)(l->clock->now + 1); /* non-NULL: started */
  return CONCH_ICEPT_NEXT;
}

static int log_send(conch_call *call, const uint8_t **p, size_t *n,
                    void **state, void *ud) {
  log_rec *l = ud;
  (void)call;
  (void)p;
  (void)state;
  l->sent++;
  l->sent_bytes += *n;
  return 0;
}

static int log_recv(conch_call *call, const uint8_t **p, size_t *n,
                    void **state, void *ud) {
  log_rec *l = ud;
  (void)call;
  (void)p;
  (void)state;
  l->recvd++;
  l->recvd_bytes += *n;
  return 0;
}

static void log_headers(conch_call *call, const conch_metadata *h,
                        void **state, void *ud) {
  log_rec *l = ud;
  (void)call;
  (void)state;
  assert_non_null(conch_metadata_get(h, "content-type", NULL));
  l->headers++;
}

static void log_close(conch_call *call, conch_status *st, conch_metadata *tr,
                      void **state, void *ud) {
  log_rec *l = ud;
  (void)call;
  (void)tr;
  l->closes++;
  order_add('l');
  l->code = st->code;
  l->took_ms = l->clock->now - ((int64_t)(intptr_t)*state - 1);
  *state = NULL;
}

/* Metrics: calls counted by final code. */
typedef struct metrics {
  int by_code[17];
  int started;
} metrics;

static int metrics_start(conch_call *call, conch_metadata *h, void **state,
                         void *ud) {
  metrics *m = ud;
  (void)call;
  (void)h;
  (void)state;
  m->started++;
  order_add('M');
  return CONCH_ICEPT_NEXT;
}

static void metrics_close(conch_call *call, conch_status *st,
                          conch_metadata *tr, void **state, void *ud) {
  metrics *m = ud;
  (void)call;
  (void)tr;
  (void)state;
  order_add('m');
  if ((int)st->code >= 0 && (int)st->code < 17) {
    m->by_code[st->code]++;
  }
}

/* ---- The rig: a client with a chain, memsrv behind it ------------------ */

typedef struct rig {
  memx m;
  memsrv *srv[MEMX_MAX_CONNS];
  conch_client *c;
  token_src tok;
  log_rec log;
  metrics met;
  int refused;
} rig;

enum {
  WITH_AUTH = 1,
  WITH_GUARD = 2,
  WITH_LOG = 4,
  WITH_METRICS = 8,
  WITH_ALL = 15,
  LOG_OUTER = 16 /* logging first, outside auth */
};

/* Opens a client with the interceptors of |which|, in the order auth,
   guard, log, metrics (auth outermost), or with LOG_OUTER log first. */
static int rig_open(rig *r, int which, const conch_mem *mem) {
  conch_call_interceptor auth = CONCH_CALL_INTERCEPTOR_INIT;
  conch_call_interceptor guard = CONCH_CALL_INTERCEPTOR_INIT;
  conch_call_interceptor lg = CONCH_CALL_INTERCEPTOR_INIT;
  conch_call_interceptor mt = CONCH_CALL_INTERCEPTOR_INIT;
  conch_client_opts *o;
  int rv;
  memset(r, 0, sizeof(*r));
  memx_init(&r->m);
  r->tok.mem = mem;
  r->tok.token = "t0k";
  r->tok.turns = 2;
  r->log.clock = &r->m;
  g_order = r->log.order;
  auth.on_start = auth_start;
  auth.on_close = auth_close;
  auth.user_data = &r->tok;
  guard.on_start = guard_start;
  guard.user_data = &r->refused;
  lg.on_start = log_start;
  lg.on_send = log_send;
  lg.on_recv = log_recv;
  lg.on_headers = log_headers;
  lg.on_close = log_close;
  lg.user_data = &r->log;
  mt.on_start = metrics_start;
  mt.on_close = metrics_close;
  mt.user_data = &r->met;
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(&r->m, o);
  assert_int_equal(conch_client_opts_set_mem(o, mem), 0);
  if (which & LOG_OUTER) {
    assert_int_equal(conch_client_opts_add_interceptor(o, &lg), 0);
  }
  if (which & WITH_AUTH) {
    assert_int_equal(conch_client_opts_add_interceptor(o, &auth), 0);
  }
  if (which & WITH_GUARD) {
    assert_int_equal(conch_client_opts_add_interceptor(o, &guard), 0);
  }
  if (which & WITH_LOG) {
    assert_int_equal(conch_client_opts_add_interceptor(o, &lg), 0);
  }
  if (which & WITH_METRICS) {
    assert_int_equal(conch_client_opts_add_interceptor(o, &mt), 0);
  }
  rv = conch_client_new(&r->c, URL, o);
  conch_client_opts_free(o);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    return rv;
  }
  memx_attach(&r->m, r->c);
  return 0;
}

static void rig_turn(rig *r) {
  int i;
  token_pump(&r->tok);
  memx_pump(&r->m, 16);
  for (i = 0; i < r->m.nconns; i++) {
    if (r->srv[i] == NULL) {
      r->srv[i] = memsrv_new(r->m.conns[i]);
    }
    memsrv_exchange(r->srv[i], &r->m, 16);
  }
  memx_advance(&r->m, 1); /* a millisecond a turn: timing to measure */
}

static int rig_requests(const rig *r) {
  int i, n = 0;
  for (i = 0; i < r->m.nconns; i++) {
    n += r->srv[i] != NULL ? memsrv_requests(r->srv[i]) : 0;
  }
  return n;
}

static const char *rig_auth(const rig *r) {
  return r->srv[0] != NULL ? memsrv_last_authorization(r->srv[0]) : "";
}

static void rig_close(rig *r) {
  int i;
  conch_client_free(r->c);
  for (i = 0; i < MEMX_MAX_CONNS; i++) {
    memsrv_free(r->srv[i]);
  }
  memx_clear(&r->m);
  g_order = NULL;
}

static void run_until(rig *r, const int *flag) {
  int i;
  for (i = 0; i < TURNS && !*flag; i++) {
    rig_turn(r);
  }
  if (!*flag) {
    fail_msg("the call did not end after %d turns (allocation %zu failed)",
             TURNS, failmem_count());
  }
}

typedef struct outcome {
  int messages;
  int closed;
  conch_code code;
  uint8_t payload[64];
  size_t payload_len;
} outcome;

static void on_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  outcome *s = ud;
  const Conchtest__V1__Response *resp = (const Conchtest__V1__Response *)m;
  (void)call;
  s->messages++;
  s->payload_len = resp->payload.len;
  if (resp->payload.len <= sizeof(s->payload)) {
    memcpy(s->payload, resp->payload.data, resp->payload.len);
  }
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  outcome *s = ud;
  (void)call;
  (void)t;
  s->closed++;
  s->code = st->code;
}

static const conch_call_handler push = {NULL, on_msg, NULL, NULL, on_close};

static void set_payload(Conchtest__V1__Request *req, const char *text) {
  req->payload.data = (uint8_t *)text;
  req->payload.len = strlen(text);
}

/* ---- Tests -------------------------------------------------------------- */

/* The whole chain on a unary call: the token comes two turns later, the
   request carries it, the echo comes back; logging saw one message each
   way with their sizes and the time the call took; metrics counted one
   OK; start hooks ran outermost first, close hooks innermost first. */
static void test_chain_unary(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  outcome s = {0};
  conch_call *call;
  rig r;
  (void)state;
  assert_int_equal(rig_open(&r, WITH_ALL, conch_mem_default()), 0);
  set_payload(&req, "hello");
  opts.timeout_ms = 10000;
  assert_int_equal(conch_call_start(r.c, &m_unary, &opts, &push, &s, &call),
                   0);
  assert_int_equal(r.tok.starts, 1);
  assert_int_equal(r.log.starts, 0); /* held by auth, outside it */
  assert_int_equal(conch_call_send(call, &req.base), 0); /* held too */
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_OK);
  assert_int_equal(s.messages, 1);
  assert_int_equal(s.payload_len, 5);
  assert_memory_equal(s.payload, "hello", 5);
  assert_string_equal(rig_auth(&r), "Bearer t0k");
  assert_int_equal(r.refused, 0);
  assert_int_equal(r.log.starts, 1);
  assert_int_equal(r.log.closes, 1);
  assert_int_equal(r.log.headers, 1);
  assert_int_equal(r.log.sent, 1);
  assert_int_equal(r.log.recvd, 1);
  assert_int_equal(r.log.sent_bytes, 7); /* field 1, length 5, "hello" */
  assert_int_equal(r.log.recvd_bytes, 7);
  assert_string_equal(r.log.path, SVC "Unary");
  assert_true(r.log.took_ms >= 0 && r.log.took_ms < TURNS);
  assert_int_equal(r.log.code, CONCH_CODE_OK);
  assert_int_equal(r.met.started, 1);
  assert_int_equal(r.met.by_code[CONCH_CODE_OK], 1);
  assert_int_equal(r.tok.closes, 1);
  assert_string_equal(r.log.order, "LMml"); /* auth and guard do not log */
  conch_call_free(call);
  rig_close(&r);
}

/* A bidi stream through the chain: three messages sent while the call is
   held go out once the token came, each seen by logging, and come back. */
static void test_chain_bidi(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  outcome s = {0};
  conch_call *call;
  rig r;
  int i;
  (void)state;
  assert_int_equal(rig_open(&r, WITH_ALL, conch_mem_default()), 0);
  set_payload(&req, "abc");
  assert_int_equal(conch_call_start(r.c, &m_bidi, NULL, &push, &s, &call), 0);
  for (i = 0; i < 3; i++) {
    assert_int_equal(conch_call_send(call, &req.base), 0);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_OK);
  assert_int_equal(s.messages, 3);
  assert_int_equal(r.log.sent, 3);
  assert_int_equal(r.log.recvd, 3);
  assert_int_equal(r.met.by_code[CONCH_CODE_OK], 1);
  assert_string_equal(rig_auth(&r), "Bearer t0k");
  conch_call_free(call);
  rig_close(&r);
}

/* Without a token the guard short-circuits: nothing reaches the server,
   the call ends unauthenticated through on_close, once; the interceptors
   inside the guard never saw the call, those outside saw its end. */
static void test_short_circuit(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  outcome s = {0};
  conch_call *call;
  rig r;
  (void)state;
  assert_int_equal(rig_open(&r, WITH_GUARD | WITH_LOG | WITH_METRICS,
                            conch_mem_default()),
                   0);
  set_payload(&req, "x");
  assert_int_equal(conch_call_start(r.c, &m_unary, NULL, &push, &s, &call), 0);
  assert_int_equal(s.closed, 0); /* never from inside the start */
  assert_true(conch_call_done(call));
  assert_int_equal(conch_call_send(call, &req.base), CONCH_ERR_STATE);
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_UNAUTHENTICATED);
  assert_string_equal(conch_status_message(conch_call_status(call)),
                      "authorization required");
  assert_int_equal(r.refused, 1);
  assert_int_equal(rig_requests(&r), 0);
  assert_int_equal(r.log.starts, 0);
  assert_int_equal(r.log.closes, 0);
  assert_int_equal(r.met.started, 0);
  conch_call_free(call);
  rig_close(&r);

  /* The token source fails: auth itself ends the call, and metrics
     (inside it) count nothing while auth's close ran once. */
  memset(&s, 0, sizeof(s));
  assert_int_equal(rig_open(&r, WITH_AUTH | WITH_METRICS, conch_mem_default()),
                   0);
  r.tok.token = NULL;
  assert_int_equal(conch_call_start(r.c, &m_unary, NULL, &push, &s, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0); /* held */
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_UNAUTHENTICATED);
  assert_int_equal(rig_requests(&r), 0);
  assert_int_equal(r.tok.closes, 1);
  assert_int_equal(r.met.started, 0);
  assert_int_equal(conch_call_icept_resume(call), CONCH_ERR_STATE);
  conch_call_free(call);
  rig_close(&r);
}

/* A call held by an interceptor still has its deadline, and can be
   canceled: either way every entered close hook runs once, the request
   never goes out, and a resume after the end is refused. */
static void test_held_deadline_cancel(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  outcome s = {0};
  conch_call *call;
  rig r;
  (void)state;
  assert_int_equal(rig_open(&r, LOG_OUTER | WITH_AUTH | WITH_METRICS,
                            conch_mem_default()),
                   0);
  r.tok.never = 1;
  set_payload(&req, "late");
  opts.timeout_ms = 20;
  assert_int_equal(conch_call_start(r.c, &m_unary, &opts, &push, &s, &call),
                   0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_int_equal(r.log.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(r.log.took_ms >= 20);
  assert_int_equal(r.log.closes, 1);
  assert_int_equal(r.tok.closes, 1);
  assert_int_equal(r.met.started, 0); /* inside auth: never reached */
  assert_int_equal(rig_requests(&r), 0);
  assert_null(r.tok.waiting);
  conch_call_free(call);

  /* Canceled while held. */
  memset(&s, 0, sizeof(s));
  assert_int_equal(conch_call_start(r.c, &m_unary, NULL, &push, &s, &call), 0);
  assert_int_equal(conch_call_cancel(call), 0);
  assert_int_equal(conch_call_icept_resume(call), CONCH_ERR_STATE);
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_CANCELED);
  assert_int_equal(r.log.closes, 2);
  assert_int_equal(r.tok.closes, 2);
  conch_call_free(call);

  /* Freed while held: on_close runs inside the free, once. */
  memset(&s, 0, sizeof(s));
  assert_int_equal(conch_call_start(r.c, &m_unary, NULL, &push, &s, &call), 0);
  conch_call_free(call);
  assert_int_equal(s.closed, 1);
  assert_int_equal(s.code, CONCH_CODE_CANCELED);
  assert_int_equal(r.tok.closes, 3);
  assert_int_equal(rig_requests(&r), 0);
  rig_close(&r);
}

/* Changing things: on_start shortens the deadline (a call with none gets
   one), on_send swaps the request for other bytes (the echo returns
   them), on_close turns the status into another. */
static const uint8_t swapped[] = {0x0a, 0x04, 's', 'w', 'a', 'p'};

static int swap_start(conch_call *call, conch_metadata *h, void **state,
                      void *ud) {
  (void)h;
  (void)state;
  (void)ud;
  assert_int_equal(conch_call_timeout_left(call), -1);
  assert_int_equal(conch_call_shorten_deadline(call, 0), CONCH_ERR_INVALID);
  assert_int_equal(conch_call_shorten_deadline(call, 5000), 0);
  assert_int_equal(conch_call_shorten_deadline(call, 9000), 0); /* later */
  assert_true(conch_call_timeout_left(call) <= 5000);
  assert_true(conch_call_timeout_left(call) > 4000);
  return CONCH_ICEPT_NEXT;
}

static int swap_send(conch_call *call, const uint8_t **p, size_t *n,
                     void **state, void *ud) {
  (void)call;
  (void)state;
  (void)ud;
  *p = swapped;
  *n = sizeof(swapped);
  return 0;
}

static void remap_close(conch_call *call, conch_status *st, conch_metadata *tr,
                        void **state, void *ud) {
  (void)tr;
  (void)state;
  (void)ud;
  assert_int_equal(conch_call_shorten_deadline(call, 10), CONCH_ERR_STATE);
  if (st->code == CONCH_CODE_UNAUTHENTICATED) {
    char was[64];
    snprintf(was, sizeof(was), "%s", conch_status_message(st));
    assert_int_equal(conch_status_setf(st, st->mem, CONCH_CODE_PERMISSION_DENIED,
                                       "remapped: %s", was),
                     0);
  }
}

static void test_changes(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_interceptor sw = CONCH_CALL_INTERCEPTOR_INIT;
  conch_call_interceptor g = CONCH_CALL_INTERCEPTOR_INIT;
  conch_client_opts *o;
  outcome s = {0};
  conch_call *call;
  int refused = 0;
  rig r;
  (void)state;
  assert_int_equal(rig_open(&r, 0, conch_mem_default()), 0);
  conch_client_free(r.c);
  sw.on_start = swap_start;
  sw.on_send = swap_send;
  sw.on_close = remap_close;
  g.on_start = guard_start;
  g.user_data = &refused;
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(&r.m, o);
  assert_int_equal(conch_client_opts_add_interceptor(o, &sw), 0);
  assert_int_equal(conch_client_new(&r.c, URL, o), 0);
  memx_attach(&r.m, r.c);
  set_payload(&req, "original");
  assert_int_equal(conch_call_start(r.c, &m_unary, NULL, &push, &s, &call), 0);
  assert_int_equal(conch_call_send(call, &req.base), 0);
  run_until(&r, &s.closed);
  assert_int_equal(s.code, CONCH_CODE_OK);
  assert_int_equal(s.payload_len, 4);
  assert_memory_equal(s.payload, "swap", 4);
  conch_call_free(call);
  rig_close(&r);

  /* The remap, outermost, sees the guard's unauthenticated and the
     application sees what it made of it, in on_close and the getter. */
  memx_init(&r.m);
  memset(r.srv, 0, sizeof(r.srv));
  memset(&s, 0, sizeof(s));
  memx_setup(&r.m, o);
  assert_int_equal(conch_client_opts_add_interceptor(o, &g), 0);
  assert_int_equal(conch_client_new(&r.c, URL, o), 0);
  conch_client_opts_free(o);
  memx_attach(&r.m, r.c);
  assert_int_equal(conch_call_start(r.c, &m_unary, NULL, &push, &s, &call), 0);
  run_until(&r, &s.closed);
  assert_int_equal(refused, 1);
  assert_int_equal(s.code, CONCH_CODE_PERMISSION_DENIED);
  assert_int_equal(conch_call_status(call)->code,
                   CONCH_CODE_PERMISSION_DENIED);
  assert_string_equal(conch_status_message(conch_call_status(call)),
                      "remapped: authorization required");
  conch_call_free(call);
  rig_close(&r);
}

/* A synchronous grant (no deferral) on the one-callback path
   (conch_unary_async(), what generated stubs' _async() use): the chain
   runs unchanged. */
typedef struct done_rec {
  int runs;
  conch_code code;
  int had_resp;
} done_rec;

static void on_done(const ProtobufCMessage *resp, const conch_status *st,
                    const conch_metadata *h, const conch_metadata *t,
                    void *ud) {
  done_rec *d = ud;
  (void)h;
  (void)t;
  d->runs++;
  d->code = st->code;
  d->had_resp = resp != NULL;
}

static void test_unary_async(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  done_rec d = {0};
  rig r;
  (void)state;
  assert_int_equal(rig_open(&r, WITH_ALL, conch_mem_default()), 0);
  r.tok.sync = 1;
  set_payload(&req, "cb");
  assert_int_equal(
      conch_unary_async(r.c, &m_unary, NULL, &req.base, on_done, &d, NULL), 0);
  run_until(&r, &d.runs);
  assert_int_equal(d.runs, 1);
  assert_int_equal(d.code, CONCH_CODE_OK);
  assert_true(d.had_resp);
  assert_string_equal(rig_auth(&r), "Bearer sync");
  assert_int_equal(r.met.by_code[CONCH_CODE_OK], 1);
  assert_int_equal(r.log.recvd, 1);
  /* And deferred. */
  memset(&d, 0, sizeof(d));
  r.tok.sync = 0;
  r.tok.token = "later";
  r.tok.turns = 3;
  assert_int_equal(
      conch_unary_async(r.c, &m_unary, NULL, &req.base, on_done, &d, NULL), 0);
  run_until(&r, &d.runs);
  assert_int_equal(d.code, CONCH_CODE_OK);
  assert_true(d.had_resp);
  assert_string_equal(rig_auth(&r), "Bearer later");
  assert_int_equal(r.met.by_code[CONCH_CODE_OK], 2);
  assert_int_equal(r.tok.closes, 2);
  rig_close(&r);
}

/* Registration limits. */
static void test_register(void **state) {
  conch_call_interceptor ic = CONCH_CALL_INTERCEPTOR_INIT;
  conch_client_opts *o;
  int i;
  (void)state;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_add_interceptor(NULL, &ic),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_add_interceptor(o, NULL),
                   CONCH_ERR_INVALID);
  ic.struct_size = 0;
  assert_int_equal(conch_client_opts_add_interceptor(o, &ic),
                   CONCH_ERR_INVALID);
  ic.struct_size = sizeof(ic);
  for (i = 0; i < CONCH_INTERCEPTORS_MAX; i++) {
    assert_int_equal(conch_client_opts_add_interceptor(o, &ic), 0);
  }
  assert_int_equal(conch_client_opts_add_interceptor(o, &ic), CONCH_ERR_LIMIT);
  conch_client_opts_free(o);
  assert_int_equal(conch_call_abort(NULL, CONCH_CODE_INTERNAL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_call_icept_resume(NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_call_timeout_left(NULL), -1);
  assert_null(conch_call_method(NULL));
}

/* ---- Every allocation fails in turn ------------------------------------- */

/* One unary call through the whole chain (deferred token, logging,
   metrics) with the failing allocator for the client and the auth
   interceptor's state.  Every run must end cleanly: a NOMEM start (and
   then no hook ran), or on_close once with every entered close hook run
   once, nothing leaked. */
static int chain_once(void) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  outcome s = {0};
  conch_call *call;
  rig r;
  int rv;

  if ((rv = rig_open(&r, WITH_ALL, failmem_hooks())) != 0) {
    return rv;
  }
  set_payload(&req, "sweep me");
  opts.timeout_ms = 10000;
  rv = conch_call_start(r.c, &m_unary, &opts, &push, &s, &call);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_int_equal(r.tok.starts, 0); /* no hook ran */
    rig_close(&r);
    return rv;
  }
  rv = conch_call_send(call, &req.base);
  if (rv != 0) {
    assert_true(rv == CONCH_ERR_NOMEM || rv == CONCH_ERR_STATE);
  }
  run_until(&r, &s.closed);
  assert_int_equal(s.closed, 1);
  assert_int_equal(r.tok.closes, 1);
  assert_int_equal(r.log.closes, r.log.starts);
  assert_int_equal(r.log.starts <= 1, 1);
  if (r.log.starts == 1) {
    assert_int_equal(r.log.code, s.code); /* the status everybody saw */
  }
  if (s.code != CONCH_CODE_OK) {
    assert_true(s.code == CONCH_CODE_RESOURCE_EXHAUSTED ||
                s.code == CONCH_CODE_INTERNAL ||
                s.code == CONCH_CODE_UNAVAILABLE);
    rv = CONCH_ERR_RPC;
  } else {
    assert_int_equal(rv, 0);
    assert_memory_equal(s.payload, "sweep me", 8);
    assert_string_equal(rig_auth(&r), "Bearer t0k");
  }
  conch_call_free(call);
  rig_close(&r);
  return rv;
}

static void test_chain_every_oom(void **state) {
  size_t n;
  (void)state;
  for (n = 0;; n++) {
    int rv;
    failmem_fail_at(n);
    rv = chain_once();
    if (failmem_live_blocks() != 0) {
      fail_msg("allocation %zu failed: %ld blocks leaked", n,
               failmem_live_blocks());
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_true(n > 20);
      printf("  chain: %zu allocations, each failed once\n", n);
      break;
    }
  }
  failmem_fail_at((size_t)-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register),
      cmocka_unit_test(test_chain_unary),
      cmocka_unit_test(test_chain_bidi),
      cmocka_unit_test(test_short_circuit),
      cmocka_unit_test(test_held_deadline_cancel),
      cmocka_unit_test(test_changes),
      cmocka_unit_test(test_unary_async),
      cmocka_unit_test(test_chain_every_oom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
