/* The server core under a failing allocator: for N = 0, 1, 2, ... the
   server's allocation N fails (the server's conch_mem is failmem's; the
   client allocates with libc), and a unary call (gzip both ways) and a
   bidi call run against it.  Whatever fails, the server must not crash,
   hang or leak: every call ends (an error is fine, a deadline is not),
   and once the server is freed no block of it is left. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "failmem.h"
#include "svc.h"

static size_t cur_n;

static conch_client *client(const fixture *fx, conch_protocol p) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, p), 0);
  assert_int_equal(conch_client_opts_set_send_compression(
                       o, CONCH_COMPRESSION_GZIP),
                   0);
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

/* Returns 1 when both calls succeeded. */
static int calls(const fixture *fx, conch_protocol p) {
  conch_client *c = client(fx, p);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  ProtobufCMessage *out = NULL;
  conch_call *call;
  conch_status st;
  uint8_t payload[2000] = {1};
  int ok = 1, rv;

  co.timeout_ms = 20000;
  req.payload.data = payload;
  req.payload.len = sizeof(payload);
  conch_status_init(&st);
  rv = conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL);
  if (rv == 0) {
    conch_message_free(c, out);
  } else {
    assert_int_equal(rv, CONCH_ERR_RPC);
    if (st.code == CONCH_CODE_DEADLINE_EXCEEDED) {
      fail_msg("unary hangs when allocation %zu fails", cur_n);
    }
    ok = 0;
  }
  conch_status_clear(&st);
  assert_int_equal(conch_call_start(c, &m_bidi, &co, NULL, NULL, &call), 0);
  for (int i = 0; i < 2; i++) {
    ProtobufCMessage *m;
    if (conch_call_send_sync(call, &req.base) != 0) {
      break;
    }
    rv = conch_call_recv_sync(call, &m);
    if (getenv("FAILMEM_DEBUG") != NULL) {
      fprintf(stderr, "recv %d: %d %s\n", i, rv,
              rv ? conch_status_message(conch_call_status(call)) : "");
    }
    if (rv != 0) {
      break;
    }
    conch_message_free(c, m);
  }
  (void)conch_call_close_send(call);
  if (conch_call_wait_sync(call) != 0) {
    if (conch_call_status(call)->code == CONCH_CODE_DEADLINE_EXCEEDED) {
      fail_msg("bidi hangs when allocation %zu fails: %s", cur_n,
               conch_status_message(conch_call_status(call)));
    }
    ok = 0;
  }
  conch_call_free(call);
  conch_client_free(c);
  return ok;
}

static void sweep(conch_protocol p) {
  conch_server_opts *o;
  size_t n;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_mem(o, failmem_hooks()), 0);
  n = getenv("FAILMEM_FROM") != NULL ? (size_t)atol(getenv("FAILMEM_FROM")) : 0;
  for (;; n++) {
    fixture fx;
    int ok = 0, rv;
    fx.tolerant = 1;
    cur_n = n;
    failmem_fail_at(n);
    rv = fx_try_start(&fx, o, 0);
    if (rv == 0) {
      ok = calls(&fx, p);
      fx_stop(&fx);
    } else {
      assert_int_equal(rv, CONCH_ERR_NOMEM);
    }
    if (failmem_live_blocks() != 0) {
      fail_msg("allocation %zu failed (start %d): %ld blocks left", n, rv,
               failmem_live_blocks());
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_true(ok);
      break;
    }
  }
  printf("# %s: %zu allocations swept\n",
         p == CONCH_PROTOCOL_CONNECT ? "connect"
         : p == CONCH_PROTOCOL_GRPC  ? "grpc"
                                     : "grpc-web",
         n);
  conch_server_opts_free(o);
}

static void test_connect(void **state) {
  (void)state;
  sweep(CONCH_PROTOCOL_CONNECT);
}

static void test_grpc(void **state) {
  (void)state;
  sweep(CONCH_PROTOCOL_GRPC);
}

static void test_grpc_web(void **state) {
  (void)state;
  sweep(CONCH_PROTOCOL_GRPC_WEB);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_connect),
      cmocka_unit_test(test_grpc),
      cmocka_unit_test(test_grpc_web),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
