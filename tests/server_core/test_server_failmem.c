/* The server core under a failing allocator: for N = 0, 1, 2, ... the
   server's allocation N fails (the server's conch_mem is failmem's; the
   client allocates with libc), and a unary call (gzip both ways), a bidi
   call and a client stream to a pull-mode handler (conch_rpc_recv()) in a
   compression of the test's own (both ways) run against it, over HTTP/2,
   over HTTP/1.1 (the bridge of server_h1.c), and over TLS, also with a
   client certificate the server requires and verifies (mutual TLS).
   Whatever fails, the server must not crash, hang or leak: every call ends
   (an error is fine, a deadline is not), and once the server is freed no
   block of it is left. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "failmem.h"
#include "svc.h"

static size_t cur_n;
static int cur_h1;  /* the client speaks HTTP/1.1 */
static int cur_tls; /* ... over TLS */
static int cur_mtls; /* ... presenting a client certificate (the server's
                        own, self-signed: the server trusts it) */
static char dir[] = "/tmp/conch-srvfailmem-XXXXXX";
static char cert[128], key[128];
/* How often the server's x-rev ran (user_data): the last run, with no
   allocation failing, must have used it both ways. */
static svc_xr_count srv_count;

/* The pull-mode handler: counts the requests it takes with
   conch_rpc_recv(), then answers how many. */
static void pull_end(conch_rpc *rpc, int rv) {
  Conchtest__V1__Response r = CONCHTEST__V1__RESPONSE__INIT;
  uint32_t *count = conch_rpc_data(rpc);
  conch_status bad;

  conch_status_init(&bad);
  bad.code = CONCH_CODE_INTERNAL;
  r.message_count = *count;
  conch_rpc_set_data(rpc, NULL);
  free(count);
  if (rv != CONCH_ERR_EOF || conch_rpc_send(rpc, &r.base) != 0 ||
      conch_rpc_finish(rpc, NULL) != 0) {
    (void)conch_rpc_finish(rpc, &bad);
  }
}

static void pull_take(conch_rpc *rpc, void *user_data) {
  int rv;
  (void)user_data;
  if (conch_rpc_data(rpc) == NULL) {
    return; /* ended */
  }
  for (;;) {
    ProtobufCMessage *m;
    rv = conch_rpc_recv(rpc, &m);
    if (rv == CONCH_ERR_AGAIN) {
      return;
    }
    if (rv != 0) {
      pull_end(rpc, rv);
      return;
    }
    (*(uint32_t *)conch_rpc_data(rpc))++;
    conch_server_message_free(conch_rpc_server(rpc), m);
  }
}

static void pull_on_call(conch_rpc *rpc, void *user_data) {
  uint32_t *count = calloc(1, sizeof(*count));
  conch_status bad;
  if (count == NULL) {
    conch_status_init(&bad);
    bad.code = CONCH_CODE_RESOURCE_EXHAUSTED;
    (void)conch_rpc_finish(rpc, &bad);
    return;
  }
  conch_rpc_set_data(rpc, count);
  pull_take(rpc, user_data);
}

static void pull_on_cancel(conch_rpc *rpc, const conch_status *st,
                           void *user_data) {
  (void)st;
  (void)user_data;
  free(conch_rpc_data(rpc));
  conch_rpc_set_data(rpc, NULL);
}

static const conch_method m_pull = {
    "/pull.v1.Svc/Count", CONCH_STREAM_CLIENT,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

/* Registers the pull-mode method on the running fixture; its allocations
   fail too.  Returns 1 when it is registered. */
static int add_pull(fixture *fx) {
  conch_server_handler h = {.on_call = pull_on_call,
                            .on_cancel = pull_on_cancel,
                            .on_recv_ready = pull_take};
  int rv;
  fx_pause(fx);
  rv = conch_server_add_method(fx->s, &m_pull, &h, fx);
  fx_resume(fx);
  if (rv != 0) {
    assert_int_equal(rv, CONCH_ERR_NOMEM);
  }
  return rv == 0;
}


/* A client for |fx| as the sweep speaks; it sends in gzip, or with |xrev|
   in x-rev. */
static conch_client *client(const fixture *fx, conch_protocol p, int xrev) {
  conch_compressor xr = svc_xr_compressor(NULL);
  conch_client_opts *o;
  conch_client *c;
  char url[160];
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, p), 0);
  if (xrev) {
    assert_int_equal(conch_client_opts_add_compression(o, &xr, NULL), 0);
    assert_int_equal(conch_client_opts_set_send_compression_name(o, "x-rev"),
                     0);
  } else {
    assert_int_equal(conch_client_opts_set_send_compression(
                         o, CONCH_COMPRESSION_GZIP),
                     0);
  }
  assert_int_equal(conch_client_opts_set_http_version(
                       o, cur_h1 ? CONCH_HTTP_1_1 : CONCH_HTTP_2),
                   0);
  snprintf(url, sizeof(url), "%s", fx->url);
  if (cur_tls) {
    assert_int_equal(conch_client_opts_set_ca_file(o, cert), 0);
    if (cur_mtls) {
      assert_int_equal(conch_client_opts_set_client_cert_file(o, cert, key),
                       0);
    }
    snprintf(url, sizeof(url), "https://127.0.0.1:%d",
             conch_server_port(fx->s));
  }
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

/* Returns 1 when both calls succeeded. */
static int calls(const fixture *fx, conch_protocol p) {
  conch_client *c = client(fx, p, 0);
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
  /* HTTP/1.1 is half duplex: everything is sent before reading. */
  for (int i = 0; cur_h1 && i < 2; i++) {
    if (conch_call_send_sync(call, &req.base) != 0) {
      break;
    }
  }
  if (cur_h1) {
    (void)conch_call_close_send(call);
  }
  for (int i = 0; i < 2; i++) {
    ProtobufCMessage *m;
    if (!cur_h1 && conch_call_send_sync(call, &req.base) != 0) {
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

static int pull_call(const fixture *fx, conch_protocol p) {
  conch_client *c = client(fx, p, 1);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  ProtobufCMessage *m;
  conch_call *call;
  uint8_t payload[1500] = {2};
  int ok = 1;

  co.timeout_ms = 20000;
  req.payload.data = payload;
  req.payload.len = sizeof(payload);
  assert_int_equal(conch_call_start(c, &m_pull, &co, NULL, NULL, &call), 0);
  for (int i = 0; i < 3 && ok; i++) {
    ok = conch_call_send_sync(call, &req.base) == 0;
  }
  (void)conch_call_close_send(call);
  if (conch_call_recv_sync(call, &m) == 0) {
    if (ok) {
      assert_int_equal(((Conchtest__V1__Response *)m)->message_count, 3);
    }
    conch_message_free(c, m);
  } else {
    ok = 0;
  }
  if (conch_call_wait_sync(call) != 0) {
    if (conch_call_status(call)->code == CONCH_CODE_DEADLINE_EXCEEDED) {
      fail_msg("pull call hangs when allocation %zu fails: %s", cur_n,
               conch_status_message(conch_call_status(call)));
    }
    ok = 0;
  }
  conch_call_free(call);
  conch_client_free(c);
  return ok;
}

static void sweep(conch_protocol p) {
  conch_compressor xr = svc_xr_compressor(&srv_count);
  conch_server_opts *o;
  size_t n;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_mem(o, failmem_hooks()), 0);
  assert_int_equal(conch_server_opts_add_compression(o, &xr, NULL), 0);
  assert_int_equal(conch_server_opts_set_compression(o, "x-rev, gzip"), 0);
  /* Every response compressed, however small, so that the sweep fails the
     compression's allocations too (the default leaves those under 1 KiB
     plain). */
  assert_int_equal(conch_server_opts_set_compress_min_bytes(o, 0), 0);
  if (cur_tls) {
    assert_int_equal(conch_server_opts_set_tls(o, cert, key), 0);
  }
  if (cur_mtls) {
    assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, cert), 0);
  }
  n = getenv("FAILMEM_FROM") != NULL ? (size_t)atol(getenv("FAILMEM_FROM")) : 0;
  for (;; n++) {
    fixture fx;
    int ok = 0, rv, comp0 = atomic_load(&srv_count.comp),
            decomp0 = atomic_load(&srv_count.decomp);
    fx.tolerant = 1;
    cur_n = n;
    failmem_fail_at(n);
    rv = fx_try_start(&fx, o, 0);
    if (rv == 0) {
      ok = calls(&fx, p);
      if (add_pull(&fx)) {
        ok &= pull_call(&fx, p);
      } else {
        ok = 0;
      }
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
      /* 3 requests in x-rev (pull mode decodes each on arrival, to check
         it, and again at conch_rpc_recv()); the answer in x-rev. */
      assert_true(atomic_load(&srv_count.decomp) >= decomp0 + 3);
      assert_true(atomic_load(&srv_count.comp) > comp0);
      break;
    }
  }
  printf("# %s%s%s: %zu allocations swept\n",
         p == CONCH_PROTOCOL_CONNECT ? "connect"
         : p == CONCH_PROTOCOL_GRPC  ? "grpc"
                                     : "grpc-web",
         cur_h1 ? " http/1.1" : "",
         cur_mtls ? " mtls" : cur_tls ? " tls" : "", n);
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

static void test_connect_h1(void **state) {
  (void)state;
  cur_h1 = 1;
  sweep(CONCH_PROTOCOL_CONNECT);
  cur_h1 = 0;
}

static void test_tls(void **state) {
  (void)state;
  cur_tls = 1;
  sweep(CONCH_PROTOCOL_GRPC);
  cur_h1 = 1;
  sweep(CONCH_PROTOCOL_GRPC_WEB);
  cur_h1 = cur_tls = 0;
}

static void test_mtls(void **state) {
  (void)state;
  cur_tls = cur_mtls = 1;
  sweep(CONCH_PROTOCOL_CONNECT);
  cur_h1 = 1;
  sweep(CONCH_PROTOCOL_CONNECT);
  cur_h1 = cur_tls = cur_mtls = 0;
}

static int make_cert(void **state) {
  (void)state;
  return svc_make_cert(dir, "IP:127.0.0.1", cert, key, sizeof(cert));
}

static int remove_cert(void **state) {
  (void)state;
  unlink(cert);
  unlink(key);
  rmdir(dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_connect),
      cmocka_unit_test(test_grpc),
      cmocka_unit_test(test_grpc_web),
      cmocka_unit_test(test_connect_h1),
      cmocka_unit_test(test_tls),
      cmocka_unit_test(test_mtls),
  };
  return cmocka_run_group_tests(tests, make_cert, remove_cert);
}
