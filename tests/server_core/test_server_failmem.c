/* The server core under a failing allocator: for N = 0, 1, 2, ... the
   server's allocation N fails (the server's conch_mem is failmem's; the
   client allocates with libc), and a unary call (gzip both ways) and a
   bidi call run against it, over HTTP/2, over HTTP/1.1 (the bridge of
   server_h1.c), and over TLS, also with a client certificate the server
   requires and verifies (mutual TLS).  Whatever fails, the server must not crash,
   hang or leak: every call ends (an error is fine, a deadline is not),
   and once the server is freed no block of it is left. */
#define _GNU_SOURCE
#include <setjmp.h>
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

static conch_client *client(const fixture *fx, conch_protocol p) {
  conch_client_opts *o;
  conch_client *c;
  char url[160];
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, p), 0);
  assert_int_equal(conch_client_opts_set_send_compression(
                       o, CONCH_COMPRESSION_GZIP),
                   0);
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

static void sweep(conch_protocol p) {
  conch_server_opts *o;
  size_t n;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_mem(o, failmem_hooks()), 0);
  if (cur_tls) {
    assert_int_equal(conch_server_opts_set_tls(o, cert, key), 0);
  }
  if (cur_mtls) {
    assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, cert), 0);
  }
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
  char cmd[1024];
  (void)state;
  if (mkdtemp(dir) == NULL) {
    return -1;
  }
  snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
  snprintf(key, sizeof(key), "%s/key.pem", dir);
  snprintf(cmd, sizeof(cmd),
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
           "-nodes -days 2 -subj /CN=localhost -addext "
           "subjectAltName=IP:127.0.0.1 -keyout %s -out %s >/dev/null 2>&1",
           key, cert);
  return system(cmd) == 0 ? 0 : -1;
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
