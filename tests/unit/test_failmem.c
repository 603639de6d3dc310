/* Every allocation of a unary and of a bidi call fails in turn, in each
   compression, against an in-memory HTTP/2 echo server (memsrv.h): each
   run must end cleanly (a NOMEM return or an RPC status), with nothing
   leaked and nothing hung.  No sockets, no Node, no clock: a run is
   deterministic, so "hung" means no progress with nothing left to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "conchtest/v1/test.pb-c.h"
#include "compress.h"
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

/* Codes a run may end with when memory ran out somewhere. */
static int acceptable(conch_code code) {
  return code == CONCH_CODE_RESOURCE_EXHAUSTED ||
         code == CONCH_CODE_INTERNAL || code == CONCH_CODE_UNAVAILABLE;
}

/* The compression of the run, both ways (the server echoes the request's
   bytes, so the response comes back in it too). */
static const char *comp = "gzip";

/* The client and the servers of its connections. */
typedef struct rig {
  memx m;
  memsrv *srv[MEMX_MAX_CONNS];
  conch_client *c;
} rig;

static int rig_open(rig *r) {
  conch_client_opts *o;
  int rv;
  memset(r, 0, sizeof(*r));
  memx_init(&r->m);
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(&r->m, o);
  assert_int_equal(conch_client_opts_set_mem(o, failmem_hooks()), 0);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, comp), 0);
  rv = conch_client_new(&r->c, URL, o);
  conch_client_opts_free(o);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    return rv;
  }
  memx_attach(&r->m, r->c);
  return 0;
}

/* One turn: the client acts, each connection's server answers. */
static void rig_turn(rig *r) {
  int i;
  memx_pump(&r->m, 16);
  for (i = 0; i < r->m.nconns; i++) {
    if (r->srv[i] == NULL) {
      r->srv[i] = memsrv_new(r->m.conns[i]);
    }
    memsrv_exchange(r->srv[i], &r->m, 16);
  }
}

/* The encoding the server saw last (rig_close keeps it). */
static char seen_enc[32];

static void rig_close(rig *r) {
  int i;
  seen_enc[0] = '\0';
  if (r->srv[0] != NULL) {
    snprintf(seen_enc, sizeof(seen_enc), "%s",
             memsrv_last_encoding(r->srv[0]));
  }
  conch_client_free(r->c);
  for (i = 0; i < MEMX_MAX_CONNS; i++) {
    memsrv_free(r->srv[i]);
  }
  memx_clear(&r->m);
}

/* Turns until |*flag| is set; fails the test when nothing moves. */
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
  size_t payload_len; /* of the last message */
} outcome;

static void on_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  outcome *s = ud;
  (void)call;
  s->messages++;
  s->payload_len = ((const Conchtest__V1__Response *)m)->payload.len;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  outcome *s = ud;
  (void)call;
  (void)t;
  s->closed++;
  s->code = st->code;
}

static const conch_call_handler pull = {NULL, NULL, NULL, NULL, on_close};
static const conch_call_handler push = {NULL, on_msg, NULL, NULL, on_close};

static void check_code(conch_call *call, const outcome *s) {
  if (s->code != CONCH_CODE_OK && !acceptable(s->code)) {
    fail_msg("unexpected code %s: %s", conch_code_name(s->code),
             conch_status_message(conch_call_status(call)));
  }
}

/* One unary call, compressed both ways, with request metadata; the
   response pulled.  Returns 0 when the whole call succeeded. */
static int unary_once(void) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_metadata *md = NULL;
  ProtobufCMessage *resp = NULL;
  outcome s = {0};
  uint8_t payload[4096];
  conch_call *call;
  rig r;
  int rv;

  if ((rv = rig_open(&r)) != 0) {
    return rv;
  }
  memset(payload, 'q', sizeof(payload));
  req.payload.data = payload;
  req.payload.len = sizeof(payload);
  opts.timeout_ms = 10000;
  rv = conch_metadata_new(&md, failmem_hooks());
  if (rv == 0) {
    rv = conch_metadata_add_str(md, "x-test", "failmem");
  }
  if (rv == 0) {
    opts.headers = md;
    rv = conch_call_start(r.c, &m_unary, &opts, &pull, &s, &call);
  }
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    conch_metadata_free(md);
    rig_close(&r);
    return rv;
  }
  /* The one message half-closes a unary call; when it cannot be queued
     the call ends by itself. */
  rv = conch_call_send(call, &req.base);
  if (rv != 0) {
    assert_true(rv == CONCH_ERR_NOMEM || rv == CONCH_ERR_STATE);
  }
  run_until(&r, &s.closed);
  assert_int_equal(s.closed, 1);
  check_code(call, &s);
  if (s.code == CONCH_CODE_OK) {
    assert_int_equal(rv, 0);
    rv = conch_call_recv(call, &resp);
    if (rv == 0) {
      Conchtest__V1__Response *m = (Conchtest__V1__Response *)resp;
      assert_int_equal(m->payload.len, sizeof(payload));
      assert_memory_equal(m->payload.data, payload, sizeof(payload));
      conch_message_free(r.c, resp);
    } else {
      assert_int_equal(rv, CONCH_ERR_NOMEM); /* decoding it ran out */
    }
  } else {
    rv = CONCH_ERR_RPC;
  }
  conch_call_free(call);
  conch_metadata_free(md);
  rig_close(&r);
  return rv;
}

/* A bidi call: three messages each way, pushed to a handler. */
static int bidi_once(void) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  outcome s = {0};
  conch_call *call;
  rig r;
  int rv, i, sent;

  if ((rv = rig_open(&r)) != 0) {
    return rv;
  }
  opts.timeout_ms = 10000;
  rv = conch_call_start(r.c, &m_bidi, &opts, &push, &s, &call);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_int_equal(s.closed, 0); /* a failed start never calls back */
    rig_close(&r);
    return rv;
  }
  req.payload.data = (uint8_t *)"hello hello hello hello";
  req.payload.len = 23;
  for (i = 0; i < 3; i++) {
    rv = conch_call_send(call, &req.base);
    if (rv != 0) {
      assert_true(rv == CONCH_ERR_NOMEM || rv == CONCH_ERR_STATE);
      break;
    }
  }
  sent = i;
  conch_call_close_send(call);
  run_until(&r, &s.closed);
  assert_int_equal(s.closed, 1);
  check_code(call, &s);
  if (s.code == CONCH_CODE_OK) {
    /* Each message that went out came back; a refused send is not an
       error of the call. */
    assert_int_equal(s.messages, sent);
    if (sent > 0) {
      assert_int_equal(s.payload_len, 23);
    }
  }
  rv = s.code == CONCH_CODE_OK && sent == 3 ? 0 : CONCH_ERR_RPC;
  conch_call_free(call);
  rig_close(&r);
  return rv;
}

static const char *const comps[] = {"identity", "gzip",    "br",
                                    "zstd",     "deflate", "snappy"};

/* Whether this build has compression |name| (CONCH_WITH_*). */
static int built(const char *name) {
  conch_comp_opts co;
  int id;
  conch__comp_opts_defaults(&co);
  return conch__comp_find(&co, name, strlen(name), &id) == 0;
}

/* ---- conch_unary_async: the whole end in one callback ------------------- */

typedef struct done_rec {
  int runs;
  int inside; /* set while conch_unary_async() runs: done must not */
  int ran_inside;
  conch_code code;
  int had_resp;
  size_t payload_len;
  int payload_ok;
  int header_ok; /* the response headers reached done */
} done_rec;

static uint8_t async_payload[1000];

static void on_done(const ProtobufCMessage *resp, const conch_status *st,
                    const conch_metadata *headers,
                    const conch_metadata *trailers, void *ud) {
  done_rec *d = ud;
  d->runs++;
  d->ran_inside |= d->inside;
  d->code = st->code;
  d->had_resp = resp != NULL;
  assert_non_null(headers);
  assert_non_null(trailers);
  /* The echo server answers a unary call with content-type, so a call
     that got its response saw headers. */
  d->header_ok = conch_metadata_get(headers, "content-type", NULL) != NULL;
  if (resp != NULL) {
    const Conchtest__V1__Response *m = (const Conchtest__V1__Response *)resp;
    assert_ptr_equal(resp->descriptor, &conchtest__v1__response__descriptor);
    d->payload_len = m->payload.len;
    d->payload_ok = m->payload.len == sizeof(async_payload) &&
                    memcmp(m->payload.data, async_payload,
                           sizeof(async_payload)) == 0;
  }
}

/* One conch_unary_async() call of |m| on a fresh rig, run to its end;
   |cancel| cancels it through the out handle right after the start.
   Returns the start's result, or 0 with |*d| filled. */
static int async_once_of(const conch_method *m, int cancel, done_rec *d) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call *call = (conch_call *)&req; /* must be overwritten */
  rig r;
  int rv, i;

  memset(d, 0, sizeof(*d));
  if ((rv = rig_open(&r)) != 0) {
    return rv;
  }
  memset(async_payload, 'u', sizeof(async_payload));
  req.payload.data = async_payload;
  req.payload.len = sizeof(async_payload);
  opts.timeout_ms = 10000;
  d->inside = 1;
  rv = conch_unary_async(r.c, m, &opts, &req.base, on_done, d, &call);
  d->inside = 0;
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_null(call);
    rig_close(&r);
    assert_int_equal(d->runs, 0); /* a failed start never calls back */
    return rv;
  }
  assert_non_null(call);
  assert_int_equal(d->runs, 0);
  if (cancel) {
    assert_int_equal(conch_call_cancel(call), 0);
  }
  run_until(&r, &d->runs);
  /* More turns: done must not run again, and the call (freed by itself)
     must not be touched; ASan and the block count see to that. */
  for (i = 0; i < 5; i++) {
    rig_turn(&r);
  }
  assert_int_equal(d->runs, 1);
  assert_int_equal(d->ran_inside, 0);
  assert_int_equal(d->had_resp, d->code == CONCH_CODE_OK);
  rig_close(&r);
  return 0;
}

static int async_once(void) {
  done_rec d;
  int rv = async_once_of(&m_unary, 0, &d);
  if (rv != 0) {
    return rv;
  }
  if (d.code == CONCH_CODE_OK) {
    assert_true(d.payload_ok);
    assert_true(d.header_ok);
    return 0;
  }
  if (!acceptable(d.code)) {
    fail_msg("unexpected code %s", conch_code_name(d.code));
  }
  return CONCH_ERR_RPC;
}

static void test_unary_async_ok(void **state) {
  done_rec d;
  size_t i;
  (void)state;
  failmem_fail_at((size_t)-1);
  for (i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
    if (!built(comps[i])) {
      continue;
    }
    comp = comps[i];
    assert_int_equal(async_once_of(&m_unary, 0, &d), 0);
    assert_int_equal(d.code, CONCH_CODE_OK);
    assert_true(d.had_resp);
    assert_true(d.payload_ok);
    assert_true(d.header_ok);
    assert_string_equal(seen_enc, i == 0 ? "" : comp);
  }
  comp = "gzip";
  assert_int_equal(failmem_live_blocks(), 0);
}

/* The echoed Request does not decode as an ErrorSpec (field 1 is bytes
   there, an int32 here): the call fails, and done gets no message. */
static const conch_method m_undecodable = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__error_spec__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

static void test_unary_async_rpc_error(void **state) {
  done_rec d;
  (void)state;
  failmem_fail_at((size_t)-1);
  assert_int_equal(async_once_of(&m_undecodable, 0, &d), 0);
  assert_int_not_equal(d.code, CONCH_CODE_OK);
  assert_false(d.had_resp);
  /* Uncompressed, the response is kept as received and decoded only when
     done runs: the same outcome. */
  comp = comps[0];
  assert_int_equal(async_once_of(&m_undecodable, 0, &d), 0);
  assert_int_equal(d.code, CONCH_CODE_INTERNAL);
  assert_false(d.had_resp);
  comp = "gzip";
  /* Canceled through the out handle before its request went out. */
  assert_int_equal(async_once_of(&m_unary, 1, &d), 0);
  assert_int_equal(d.code, CONCH_CODE_CANCELED);
  assert_false(d.had_resp);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_unary_async_invalid(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__Response wrong = CONCHTEST__V1__RESPONSE__INIT;
  done_rec d = {0};
  conch_call *call = (conch_call *)&req;
  rig r;
  (void)state;
  failmem_fail_at((size_t)-1);
  assert_int_equal(rig_open(&r), 0);
  assert_int_equal(conch_unary_async(NULL, &m_unary, NULL, &req.base,
                                     on_done, &d, &call),
                   CONCH_ERR_INVALID);
  assert_null(call);
  assert_int_equal(
      conch_unary_async(r.c, &m_unary, NULL, &req.base, NULL, &d, NULL),
      CONCH_ERR_INVALID);
  assert_int_equal(
      conch_unary_async(r.c, &m_unary, NULL, NULL, on_done, &d, NULL),
      CONCH_ERR_INVALID);
  assert_int_equal(
      conch_unary_async(r.c, &m_bidi, NULL, &req.base, on_done, &d, NULL),
      CONCH_ERR_INVALID);
  assert_int_equal(
      conch_unary_async(r.c, &m_unary, NULL, &wrong.base, on_done, &d, NULL),
      CONCH_ERR_INVALID);
  rig_turn(&r);
  assert_int_equal(d.runs, 0);
  rig_close(&r);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void every_allocation(int (*run)(void)) {
  size_t n;
  for (n = 0;; n++) {
    int rv;
    failmem_fail_at(n);
    rv = run();
    if (failmem_live_blocks() != 0) {
      fail_msg("allocation %zu failed: %ld blocks leaked", n,
               failmem_live_blocks());
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0); /* past the last allocation: success */
      assert_true(n > 20);       /* the runs did reach the server */
      printf("  %s: %zu allocations, each failed once\n", comp, n);
      break;
    }
  }
  failmem_fail_at((size_t)-1);
}

static void test_unary_every_oom(void **state) {
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
    if (!built(comps[i])) {
      continue;
    }
    comp = comps[i];
    every_allocation(unary_once);
  }
  comp = "gzip";
}

static void test_unary_async_every_oom(void **state) {
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
    if (!built(comps[i])) {
      continue;
    }
    comp = comps[i];
    every_allocation(async_once);
  }
  comp = "gzip";
}

static void test_bidi_every_oom(void **state) {
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
    if (!built(comps[i])) {
      continue;
    }
    comp = comps[i];
    every_allocation(bidi_once);
  }
  comp = "gzip";
}

/* The sweep means something only if the echo really is compressed: one
   unary and one bidi call in each compression, with the encoding the
   server saw in the request's headers checked. */
static void test_echo_is_compressed(void **state) {
  size_t i;
  (void)state;
  failmem_fail_at((size_t)-1);
  for (i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
    if (!built(comps[i])) {
      continue;
    }
    comp = comps[i];
    assert_int_equal(unary_once(), 0);
    assert_string_equal(seen_enc, i == 0 ? "" : comp);
    assert_int_equal(bidi_once(), 0);
    assert_string_equal(seen_enc, i == 0 ? "" : comp);
  }
  comp = "gzip";
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_echo_is_compressed),
      cmocka_unit_test(test_unary_every_oom),
      cmocka_unit_test(test_bidi_every_oom),
      cmocka_unit_test(test_unary_async_ok),
      cmocka_unit_test(test_unary_async_rpc_error),
      cmocka_unit_test(test_unary_async_invalid),
      cmocka_unit_test(test_unary_async_every_oom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
