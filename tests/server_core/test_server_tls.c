/* The server core serving TLS (conch_server_opts_set_tls*()): its options
   and their errors, conch's own client over TLS in HTTP/2 (ALPN h2) and
   HTTP/1.1 (ALPN http/1.1) for every protocol and codec that the HTTP
   version carries, curl over both, a client that offers no ALPN, one
   that offers only protocols we do not speak, and one that does not speak
   TLS at all.  The certificate is made with the openssl command for the
   run (an EC key, SAN 127.0.0.1 and localhost). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "svc.h"
#include "wait.h"

static char dir[] = "/tmp/conch-srvtls-XXXXXX";
static char cert[128], key[128], cert_pem[8192], key_pem[8192];

static void read_file(const char *path, char *out, size_t cap) {
  FILE *f = fopen(path, "r");
  size_t n;
  assert_non_null(f);
  n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  fclose(f);
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
           "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout %s -out %s "
           ">/dev/null 2>&1",
           key, cert);
  if (system(cmd) != 0) {
    return -1;
  }
  read_file(cert, cert_pem, sizeof(cert_pem));
  read_file(key, key_pem, sizeof(key_pem));
  return 0;
}

static int remove_cert(void **state) {
  (void)state;
  unlink(cert);
  unlink(key);
  rmdir(dir);
  return 0;
}

static fixture *start_tls(void) {
  fixture *fx = calloc(1, sizeof(*fx));
  conch_server_opts *o;
  assert_non_null(fx);
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_tls(o, cert, key), 0);
  fx_start(fx, o, 0);
  conch_server_opts_free(o);
  /* fx->url is http://127.0.0.1:PORT */
  snprintf(fx->url, sizeof(fx->url), "https://127.0.0.1:%d",
           conch_server_port(fx->s));
  return fx;
}

static void stop(fixture *fx) {
  fx_stop(fx);
  free(fx);
}

/* ---- conch's client -------------------------------------------------------- */

typedef struct variant {
  conch_protocol proto;
  conch_codec codec;
  int http; /* CONCH_HTTP_2 or CONCH_HTTP_1_1 */
} variant;

static const char *vname(const variant *v) {
  static char b[64];
  snprintf(b, sizeof(b), "%s/%s/%s",
           v->proto == CONCH_PROTOCOL_CONNECT ? "connect"
           : v->proto == CONCH_PROTOCOL_GRPC  ? "grpc"
                                              : "grpc-web",
           v->codec == CONCH_CODEC_JSON ? "json" : "proto",
           v->http == CONCH_HTTP_2 ? "h2" : "http/1.1");
  return b;
}

static conch_client *client_for(const fixture *fx, const variant *v,
                                int tls) {
  conch_client_opts *o;
  conch_client *c;
  char url[160];
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, "gzip"), 0);
  assert_int_equal(conch_client_opts_set_http_version(o, v->http), 0);
  if (tls) {
    assert_int_equal(conch_client_opts_set_ca_file(o, cert), 0);
    snprintf(url, sizeof(url), "%s", fx->url);
  } else {
    snprintf(url, sizeof(url), "http://127.0.0.1:%d",
             conch_server_port(fx->s));
  }
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static void unary_ok(const fixture *fx, const variant *v, int tls) {
  conch_client *c = client_for(fx, v, tls);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__Header t = CONCHTEST__V1__HEADER__INIT;
  Conchtest__V1__Header *tp = &t;
  ProtobufCBinaryData tv = {2, (uint8_t *)"t1"};
  conch_metadata *rt;
  ProtobufCMessage *out = NULL;
  conch_status st;
  uint8_t payload[70000]; /* several TLS records and DATA frames */

  for (size_t i = 0; i < sizeof(payload); i++) {
    payload[i] = (uint8_t)(i % 251);
  }
  req.payload.data = payload;
  req.payload.len = sizeof(payload);
  t.name = "x-trl";
  t.n_values = 1;
  t.values = &tv;
  req.n_response_trailers = 1;
  req.response_trailers = &tp;
  assert_int_equal(conch_metadata_new(&rt, NULL), 0);
  conch_status_init(&st);
  if (conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL, rt) !=
      0) {
    fail_msg("%s: %s", vname(v), conch_status_message(&st));
  }
  Conchtest__V1__Response *r = (Conchtest__V1__Response *)out;
  assert_int_equal(r->payload.len, sizeof(payload));
  assert_memory_equal(r->payload.data, payload, sizeof(payload));
  assert_non_null(conch_metadata_get(rt, "x-trl", NULL));
  conch_message_free(c, out);
  conch_metadata_free(rt);
  conch_status_clear(&st);
  conch_client_free(c);
}

static void server_stream_ok(const fixture *fx, const variant *v, int tls) {
  conch_client *c = client_for(fx, v, tls);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *m;
  uint32_t n = 0;
  int rv;

  req.response_count = 5;
  req.response_size = 40000;
  assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call),
                   0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  while ((rv = conch_call_recv_sync(call, &m)) == 0) {
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->index, n);
    assert_int_equal(r->payload.len, 40000);
    n++;
    conch_message_free(c, m);
  }
  if (rv != CONCH_ERR_EOF) {
    fail_msg("%s: %s", vname(v), conch_status_message(conch_call_status(call)));
  }
  assert_int_equal(n, 5);
  conch_call_free(call);
  conch_client_free(c);
}

/* Client stream, and bidi sent whole before reading (what HTTP/1.1
   carries). */
static void client_stream_ok(const fixture *fx, const variant *v, int tls,
                             const conch_method *m) {
  conch_client *c = client_for(fx, v, tls);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *msg;
  uint8_t buf[1000] = {0};
  int got = 0, rv;

  req.payload.data = buf;
  assert_int_equal(conch_call_start(c, m, NULL, NULL, NULL, &call), 0);
  for (int i = 0; i < 10; i++) {
    req.payload.len = 100 * (size_t)i;
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  while ((rv = conch_call_recv_sync(call, &msg)) == 0) {
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)msg;
    if (m == &m_cstream) {
      assert_int_equal(r->message_count, 10);
      assert_int_equal(r->total_bytes, 4500);
    } else {
      assert_int_equal(r->payload.len, 100 * (size_t)got);
    }
    got++;
    conch_message_free(c, msg);
  }
  if (rv != CONCH_ERR_EOF) {
    fail_msg("%s %s: %s", vname(v), m->path,
             conch_status_message(conch_call_status(call)));
  }
  assert_int_equal(got, m == &m_cstream ? 1 : 10);
  conch_call_free(call);
  conch_client_free(c);
}

static const variant variants[] = {
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, CONCH_HTTP_2},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON, CONCH_HTTP_2},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO, CONCH_HTTP_2},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_JSON, CONCH_HTTP_2},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO, CONCH_HTTP_2},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_JSON, CONCH_HTTP_2},
    /* gRPC needs HTTP/2 (trailers): the client refuses it over 1.1. */
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, CONCH_HTTP_1_1},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON, CONCH_HTTP_1_1},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO, CONCH_HTTP_1_1},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_JSON, CONCH_HTTP_1_1},
};
#define NVARIANTS (sizeof(variants) / sizeof(variants[0]))

static void test_conch_client(void **state) {
  fixture *fx = start_tls();
  (void)state;
  for (size_t i = 0; i < NVARIANTS; i++) {
    const variant *v = &variants[i];
    unary_ok(fx, v, 1);
    server_stream_ok(fx, v, 1);
    client_stream_ok(fx, v, 1, &m_cstream);
    client_stream_ok(fx, v, 1, &m_bidi);
  }
  stop(fx);
}

/* A TLS server speaks nothing else: a cleartext client gets no answer but
   the end of the connection (the server gives up on the handshake). */
static void test_cleartext_client_refused(void **state) {
  fixture *fx = start_tls();
  variant v = {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, CONCH_HTTP_2};
  conch_client *c = client_for(fx, &v, 0);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  ProtobufCMessage *out = NULL;
  conch_status st;

  (void)state;
  co.timeout_ms = 20000;
  conch_status_init(&st);
  assert_int_not_equal(
      conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL), 0);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  conch_status_clear(&st);
  conch_client_free(c);
  stop(fx);
}

/* ---- curl ----------------------------------------------------------------- */

/* Runs |cmd| and returns its output (static). */
static const char *run(const char *cmd) {
  static char out[65536];
  FILE *p = popen(cmd, "r");
  size_t n;
  assert_non_null(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  return out;
}

static void test_curl(void **state) {
  fixture *fx = start_tls();
  char cmd[1024];
  const char *out;
  const char *vers[] = {"--http1.1", "--http2"};

  (void)state;
  for (int i = 0; i < 2; i++) {
    /* Connect unary, JSON: the payload comes back (base64). */
    snprintf(cmd, sizeof(cmd),
             "curl -sS %s --cacert %s -w '\\n%%{http_version} "
             "%%{response_code}' -H 'content-type: application/json' "
             "--data-binary '{\"payload\":\"aGVsbG8=\"}' "
             "%s/conchtest.v1.TestService/Unary",
             vers[i], cert, fx->url);
    out = run(cmd);
    if (strstr(out, "\"payload\":\"aGVsbG8=\"") == NULL ||
        strstr(out, i == 0 ? "\n1.1 200" : "\n2 200") == NULL) {
      fail_msg("%s: %s", vers[i], out);
    }
    /* A Connect error: 404 for an unknown method, over TLS too. */
    snprintf(cmd, sizeof(cmd),
             "curl -sS %s --cacert %s -o /dev/null -w '%%{response_code}' "
             "-H 'content-type: application/json' --data-binary '{}' "
             "%s/conchtest.v1.TestService/Nope",
             vers[i], cert, fx->url);
    out = run(cmd);
    assert_string_equal(out, "404");
  }
  stop(fx);
}

/* ---- ALPN ----------------------------------------------------------------- */

/* A TLS handshake with ALPN |protos| (wire format; NULL: none).  Returns
   1 and the selected protocol in |got| (empty: none), or 0 when the
   handshake failed. */
static int handshake(int port, const unsigned char *protos, unsigned len,
                     char *got, size_t cap) {
  struct sockaddr_in a;
  struct timeval tv = {20, 0};
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL *ssl;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int ok;
  const unsigned char *sel = NULL;
  unsigned sellen = 0;

  assert_true(fd >= 0);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ssl = SSL_new(ctx);
  if (protos != NULL) {
    SSL_set_alpn_protos(ssl, protos, len);
  }
  SSL_set_fd(ssl, fd);
  ok = SSL_connect(ssl) == 1;
  got[0] = '\0';
  if (ok) {
    SSL_get0_alpn_selected(ssl, &sel, &sellen);
    snprintf(got, cap, "%.*s", (int)sellen, (const char *)sel);
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return ok;
}

static void test_alpn(void **state) {
  fixture *fx = start_tls();
  int port = conch_server_port(fx->s);
  static const unsigned char both[] = "\x08http/1.1\x02h2";
  static const unsigned char h1[] = "\x08http/1.1";
  static const unsigned char other[] = "\x08spdy/3.1";
  char got[32];

  (void)state;
  /* h2 wins whatever the client's order. */
  assert_int_equal(handshake(port, both, sizeof(both) - 1, got, sizeof(got)),
                   1);
  assert_string_equal(got, "h2");
  assert_int_equal(handshake(port, h1, sizeof(h1) - 1, got, sizeof(got)), 1);
  assert_string_equal(got, "http/1.1");
  assert_int_equal(handshake(port, NULL, 0, got, sizeof(got)), 1);
  assert_string_equal(got, "");
  /* no_application_protocol */
  assert_int_equal(handshake(port, other, sizeof(other) - 1, got, sizeof(got)),
                   0);
  stop(fx);
}

/* Without ALPN the first bytes decide, as in cleartext: curl speaks
   HTTP/1.1 without ALPN when told to (--no-alpn). */
static void test_no_alpn(void **state) {
  fixture *fx = start_tls();
  char cmd[1024];
  const char *out;

  (void)state;
  snprintf(cmd, sizeof(cmd),
           "curl -sS --no-alpn --http1.1 --cacert %s -w '\\n%%{http_version}' "
           "-H 'content-type: application/json' --data-binary "
           "'{\"payload\":\"aGk=\"}' %s/conchtest.v1.TestService/Unary",
           cert, fx->url);
  out = run(cmd);
  if (strstr(out, "\"payload\":\"aGk=\"") == NULL ||
      strstr(out, "\n1.1") == NULL) {
    fail_msg("%s", out);
  }
  stop(fx);
}

/* ---- Options -------------------------------------------------------------- */

static void test_opts(void **state) {
  conch_server_opts *o;
  conch_server *s;
  char bad[128];

  (void)state;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_string_equal(conch_server_opts_tls_error(o), "");
  assert_int_equal(conch_server_opts_set_tls(NULL, cert, key),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_tls(o, NULL, key), CONCH_ERR_INVALID);
  snprintf(bad, sizeof(bad), "%s/missing.pem", dir);
  assert_int_equal(conch_server_opts_set_tls(o, bad, key), CONCH_ERR_TLS);
  assert_non_null(strstr(conch_server_opts_tls_error(o), "missing.pem"));
  /* The key where the certificate belongs. */
  assert_int_equal(conch_server_opts_set_tls(o, key, key), CONCH_ERR_TLS);
  assert_true(strlen(conch_server_opts_tls_error(o)) > 0);
  assert_int_equal(conch_server_opts_set_tls_pem(o, "junk", 0, key_pem, 0),
                   CONCH_ERR_TLS);
  assert_non_null(strstr(conch_server_opts_tls_error(o), "no PEM"));
  /* A failed setter leaves TLS off: the server serves cleartext. */
  {
    fixture *fx = calloc(1, sizeof(*fx));
    variant v = {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, CONCH_HTTP_2};
    fx_start(fx, o, 0);
    unary_ok(fx, &v, 0);
    stop(fx);
  }
  /* The key inside the certificate's PEM, and a NULL that turns TLS off. */
  {
    char both[16384];
    snprintf(both, sizeof(both), "%s%s", cert_pem, key_pem);
    assert_int_equal(conch_server_opts_set_tls_pem(o, both, 0, NULL, 0), 0);
    assert_string_equal(conch_server_opts_tls_error(o), "");
    assert_int_equal(conch_server_opts_set_tls(o, NULL, NULL), 0);
    assert_int_equal(conch_server_opts_set_tls_pem(o, cert_pem, 0, key_pem,
                                                   strlen(key_pem)),
                     0);
  }
  assert_int_equal(conch_server_new(&s, o), 0);
  conch_server_opts_free(o); /* the server keeps nothing of it */
  conch_server_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_opts),
      cmocka_unit_test(test_conch_client),
      cmocka_unit_test(test_cleartext_client_refused),
      cmocka_unit_test(test_curl),
      cmocka_unit_test(test_alpn),
      cmocka_unit_test(test_no_alpn),
  };
  return cmocka_run_group_tests(tests, make_cert, remove_cert);
}
