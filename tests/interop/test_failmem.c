/* Every allocation of a unary and of a streaming call fails in turn, on a
   real connection to the connect-node server: each run must end cleanly (a
   NOMEM return or an RPC status), with nothing leaked and nothing hung. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>
#include <protobuf-c/protobuf-c.h>

#include "conchtest/v1/test.pb-c.h"
#include "failmem.h"
#include "peer.h"

#define SVC "/conchtest.v1.TestService/"

static const conch_method m_unary = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};
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

/* Codes a run may end with when memory ran out somewhere. */
static int acceptable(conch_code code) {
  return code == CONCH_CODE_RESOURCE_EXHAUSTED ||
         code == CONCH_CODE_INTERNAL || code == CONCH_CODE_UNAVAILABLE;
}

/* The compression of the run, both ways (the server answers in it). */
static const char *comp = "gzip";

static conch_client *make_client(int *rv) {
  conch_client_opts *o;
  conch_client *c = NULL;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_mem(o, failmem_hooks()), 0);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, comp), 0);
  *rv = conch_client_new(&c, url, o);
  conch_client_opts_free(o);
  return c;
}

/* One unary call compressed both ways; returns the conch_unary_sync code. */
static int unary_once(void) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_metadata *md = NULL;
  ProtobufCMessage *resp = NULL;
  conch_status st;
  uint8_t payload[4096];
  conch_client *c;
  int rv;

  c = make_client(&rv);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
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
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    conch_metadata_free(md);
    conch_client_free(c);
    return rv;
  }
  opts.headers = md;
  conch_status_init(&st);
  rv = conch_unary_sync(c, &m_unary, &opts, &req.base, &resp, &st, NULL,
                        NULL);
  if (rv == 0) {
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)resp;
    assert_int_equal(r->payload.len, sizeof(payload));
    conch_message_free(c, resp);
  } else if (rv == CONCH_ERR_RPC) {
    if (!acceptable(st.code)) {
      fail_msg("unexpected code %s: %s", conch_code_name(st.code),
               conch_status_message(&st));
    }
  } else {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
  }
  conch_status_clear(&st);
  conch_metadata_free(md);
  conch_client_free(c);
  return rv;
}

/* A bidi call: three messages each way, pushed to handlers. */
typedef struct bidi_state {
  int messages;
  int closed;
  conch_code code;
} bidi_state;

static void on_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  bidi_state *s = ud;
  (void)call;
  (void)m;
  s->messages++;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  bidi_state *s = ud;
  (void)call;
  (void)t;
  s->closed++;
  s->code = st->code;
}

static int bidi_once(void) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call_handler h = {NULL, on_msg, NULL, NULL, on_close};
  bidi_state s = {0};
  conch_client *c;
  conch_call *call;
  int rv, i, sent;

  c = make_client(&rv);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    return rv;
  }
  opts.timeout_ms = 10000;
  rv = conch_call_start(c, &m_bidi, &opts, &h, &s, &call);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_int_equal(s.closed, 0); /* a failed start never calls back */
    conch_client_free(c);
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
  while (s.closed == 0) {
    assert_int_equal(conch_client_run(c, 1000), 0);
  }
  assert_int_equal(s.closed, 1);
  if (s.code == CONCH_CODE_OK) {
    /* Each message that went out came back; a refused send is not an
       error of the call. */
    assert_int_equal(s.messages, sent);
  } else if (!acceptable(s.code)) {
    fail_msg("unexpected code %s: %s", conch_code_name(s.code),
             conch_status_message(conch_call_status(call)));
  }
  rv = s.code == CONCH_CODE_OK && sent == 3 ? 0 : CONCH_ERR_RPC;
  conch_call_free(call);
  conch_client_free(c);
  return rv;
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
      printf("  %zu allocations, each failed once\n", n);
      break;
    }
  }
  failmem_fail_at((size_t)-1);
}

static void test_unary_every_oom(void **state) {
  (void)state;
  every_allocation(unary_once);
}

/* The same for each other compression (the response, 4 KiB, is over the
   server's 1 KiB threshold, so it comes compressed too). */
static void test_unary_every_oom_each_compression(void **state) {
  static const char *const names[] = {"br", "zstd", "deflate", "snappy"};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    printf("  %s:\n", names[i]);
    comp = names[i];
    every_allocation(unary_once);
  }
  comp = "gzip";
}

static void test_bidi_every_oom(void **state) {
  (void)state;
  every_allocation(bidi_once);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_every_oom),
      cmocka_unit_test(test_unary_every_oom_each_compression),
      cmocka_unit_test(test_bidi_every_oom),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
