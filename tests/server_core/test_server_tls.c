/* The server core serving TLS (conch_server_opts_set_tls*()): its options
   and their errors, conch's own client over TLS in HTTP/2 (ALPN h2) and
   HTTP/1.1 (ALPN http/1.1) for every protocol and codec that the HTTP
   version carries, curl over both, a client that offers no ALPN, one
   that offers only protocols we do not speak, and one that does not speak
   TLS at all; client certificates (mutual TLS), required and optional,
   with conch's client and curl.  The certificates are made with the
   openssl command for the run: the server's (an EC key, SAN 127.0.0.1 and
   localhost), two CAs and a client certificate from each. */
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
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "svc.h"
#include "wait.h"

#define WAIT_MS CONCH_WAIT_MS

static char dir[] = "/tmp/conch-srvtls-XXXXXX";
static char cert[128], key[128], cert_pem[8192], key_pem[8192];
/* Mutual TLS: CA "a" (trusted by the servers) and CA "b" (not), a client
   certificate from each (alice from a, mallory from b). */
static char ca_a[128], ca_b[128], alice[128], alice_key[128], mallory[128],
    mallory_key[128];
static char ca_a_pem[8192], alice_pem[8192], alice_key_pem[8192];
static size_t alice_der_len;

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
  if (svc_make_cert(dir, "IP:127.0.0.1,DNS:localhost", cert, key,
                    sizeof(cert)) != 0) {
    return -1;
  }
  read_file(cert, cert_pem, sizeof(cert_pem));
  read_file(key, key_pem, sizeof(key_pem));
  snprintf(ca_a, sizeof(ca_a), "%s/ca_a.pem", dir);
  snprintf(ca_b, sizeof(ca_b), "%s/ca_b.pem", dir);
  snprintf(alice, sizeof(alice), "%s/alice.pem", dir);
  snprintf(alice_key, sizeof(alice_key), "%s/alice.key", dir);
  snprintf(mallory, sizeof(mallory), "%s/mallory.pem", dir);
  snprintf(mallory_key, sizeof(mallory_key), "%s/mallory.key", dir);
  snprintf(cmd, sizeof(cmd),
           "cd %s && printf 'extendedKeyUsage=clientAuth\n' > ext && "
           "for x in a:alice b:mallory; do ca=${x%%%%:*} who=${x#*:}; "
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
           "-nodes -days 2 -subj \"/CN=Test CA $ca\" -addext "
           "basicConstraints=critical,CA:TRUE -keyout ca_$ca.key "
           "-out ca_$ca.pem && "
           "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
           "-subj \"/O=Conch Test/CN=$who\" -keyout $who.key -out $who.csr "
           "&& openssl x509 -req -in $who.csr -CA ca_$ca.pem -CAkey "
           "ca_$ca.key -set_serial 7 -days 2 -extfile ext -out $who.pem "
           "|| exit 1; done >/dev/null 2>&1",
           dir);
  if (system(cmd) != 0) {
    return -1;
  }
  read_file(ca_a, ca_a_pem, sizeof(ca_a_pem));
  read_file(alice, alice_pem, sizeof(alice_pem));
  read_file(alice_key, alice_key_pem, sizeof(alice_key_pem));
  {
    /* The DER length the handler should see. */
    FILE *f = fopen(alice, "r");
    X509 *x = f != NULL ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    int n = x != NULL ? i2d_X509(x, NULL) : -1;
    X509_free(x);
    if (f != NULL) {
      fclose(f);
    }
    if (n <= 0) {
      return -1;
    }
    alice_der_len = (size_t)n;
  }
  return 0;
}

static int remove_cert(void **state) {
  static const char *const names[] = {
      "cert.pem", "key.pem",     "ext",         "ca_a.pem",    "ca_a.key",
      "ca_b.pem", "ca_b.key",    "alice.pem",   "alice.key",   "alice.csr",
      "mallory.pem", "mallory.key", "mallory.csr"};
  char path[192];
  (void)state;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    unlink(path);
  }
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

/* A response over the client's receive limit: the client gives up on it
   (resource_exhausted) and the server serves on. */
static void test_client_limit(void **state) {
  fixture *fx = start_tls();
  (void)state;
  for (size_t i = 0; i < NVARIANTS; i++) {
    const variant *v = &variants[i];
    conch_client_opts *o;
    conch_client *c;
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    conch_status st;

    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
    assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
    assert_int_equal(conch_client_opts_set_http_version(o, v->http), 0);
    assert_int_equal(conch_client_opts_set_ca_file(o, cert), 0);
    assert_int_equal(conch_client_opts_set_recv_limit(o, 1024 * 1024), 0);
    assert_int_equal(conch_client_new(&c, fx->url, o), 0);
    conch_client_opts_free(o);
    req.response_size = 1024 * 1024 + 1;
    conch_status_init(&st);
    assert_int_equal(
        conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL, NULL),
        CONCH_ERR_RPC);
    if (st.code != CONCH_CODE_RESOURCE_EXHAUSTED) {
      fail_msg("%s: %s", vname(v), conch_status_message(&st));
    }
    conch_status_clear(&st);
    conch_client_free(c);
    unary_ok(fx, v, 1);
  }
  stop(fx);
}

/* A request larger than the HTTP/2 stream window (1 MiB), which the
   server takes only once it is whole: over HTTP/1.1 the bridge must keep
   pulling what TLS decrypted as room opens (no descriptor tells). */
static void test_big_request(void **state) {
  fixture *fx = start_tls();
  size_t len = 1536 * 1024;
  uint8_t *payload = malloc(len);
  (void)state;
  assert_non_null(payload);
  for (size_t i = 0; i < len; i++) {
    payload[i] = (uint8_t)(i % 239);
  }
  for (size_t i = 0; i < NVARIANTS; i++) {
    const variant *v = &variants[i];
    conch_client *c = client_for(fx, v, 1);
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    ProtobufCMessage *out = NULL;
    conch_status st;

    req.payload.data = payload;
    req.payload.len = len;
    req.response_size = 10;
    conch_status_init(&st);
    if (conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL,
                         NULL) != 0) {
      fail_msg("%s: %s", vname(v), conch_status_message(&st));
    }
    assert_int_equal(((Conchtest__V1__Response *)out)->payload.len, 10);
    conch_message_free(c, out);
    conch_status_clear(&st);
    conch_client_free(c);
  }
  free(payload);
  stop(fx);
}

/* A client that connects and says nothing (no ClientHello), or stops in
   the middle of its handshake, is cut off by the header timeout. */
static int closed_within(int fd, int ms) {
  struct pollfd p = {fd, POLLIN, 0};
  char b[256];
  long long end = conch_now_ms() + ms;
  while (conch_now_ms() < end) {
    if (poll(&p, 1, 100) > 0) {
      ssize_t n = recv(fd, b, sizeof(b), 0);
      if (n <= 0) {
        return 1;
      }
    }
  }
  return 0;
}

static int tcp_open(int port) {
  struct sockaddr_in a;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  return fd;
}

static void test_handshake_timeout(void **state) {
  fixture *fx = calloc(1, sizeof(*fx));
  conch_server_opts *o;
  int mute, half;
  /* The first bytes of a ClientHello record, and no more. */
  static const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};

  (void)state;
  assert_non_null(fx);
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_tls(o, cert, key), 0);
  assert_int_equal(conch_server_opts_set_header_timeout(o, 300), 0);
  fx_start(fx, o, 0);
  conch_server_opts_free(o);
  mute = tcp_open(conch_server_port(fx->s));
  half = tcp_open(conch_server_port(fx->s));
  assert_int_equal(send(half, hello, sizeof(hello), 0), (ssize_t)sizeof(hello));
  assert_true(closed_within(mute, WAIT_MS));
  assert_true(closed_within(half, WAIT_MS));
  close(mute);
  close(half);
  stop(fx);
}

/* ---- TLS over a transport of the caller's -------------------------------- */

typedef struct xport {
  fixture *fx;
  int lfd;
  atomic_int reads, writes, closes;
  int adopted;
} xport;

static long x_read(void *ud, int h, void *buf, size_t len) {
  xport *x = ud;
  ssize_t n = recv(h, buf, len, 0);
  atomic_fetch_add(&x->reads, 1);
  return n >= 0 ? (long)n : -(long)errno;
}

static long x_write(void *ud, int h, const void *buf, size_t len) {
  xport *x = ud;
  ssize_t n = send(h, buf, len, MSG_NOSIGNAL);
  atomic_fetch_add(&x->writes, 1);
  return n >= 0 ? (long)n : -(long)errno;
}

static void x_close(void *ud, int h) {
  xport *x = ud;
  atomic_fetch_add(&x->closes, 1);
  close(h);
}

/* Accepts one connection and hands it to the server with the transport
   (the server thread stopped meanwhile: a server is one thread's). */
static void *acceptor(void *arg) {
  xport *x = arg;
  conch_server_transport t = {x_read, x_write, x_close, x};
  int fd = accept(x->lfd, NULL, NULL);
  if (fd >= 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fx_pause(x->fx);
    x->adopted = conch_server_adopt(x->fx->s, fd, &t) == 0;
    fx_resume(x->fx);
  }
  return NULL;
}

static int x_closed(void *arg) {
  return atomic_load(&((xport *)arg)->closes) == 1;
}

static void test_adopted_transport(void **state) {
  fixture *fx = start_tls();
  struct sockaddr_un un;
  char path[108];
  pthread_t th;
  xport x;
  conch_client_opts *o;
  conch_client *c;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  conch_status st;

  (void)state;
  memset(&x, 0, sizeof(x));
  x.fx = fx;
  snprintf(path, sizeof(path), "%s/x.sock", dir);
  memset(&un, 0, sizeof(un));
  un.sun_family = AF_UNIX;
  snprintf(un.sun_path, sizeof(un.sun_path), "%s", path);
  x.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(x.lfd >= 0);
  assert_int_equal(bind(x.lfd, (struct sockaddr *)&un, sizeof(un)), 0);
  assert_int_equal(listen(x.lfd, 4), 0);
  assert_int_equal(pthread_create(&th, NULL, acceptor, &x), 0);

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_ca_file(o, cert), 0);
  assert_int_equal(conch_client_opts_set_unix_socket(o, path), 0);
  assert_int_equal(conch_client_new(&c, "https://localhost", o), 0);
  conch_client_opts_free(o);
  req.payload.data = (uint8_t *)"over the caller's transport";
  req.payload.len = strlen((const char *)req.payload.data);
  conch_status_init(&st);
  if (conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL, NULL) !=
      0) {
    fail_msg("%s", conch_status_message(&st));
  }
  assert_int_equal(((Conchtest__V1__Response *)out)->payload.len,
                   req.payload.len);
  conch_message_free(c, out);
  conch_status_clear(&st);
  pthread_join(th, NULL);
  assert_true(x.adopted);
  assert_true(atomic_load(&x.reads) > 0);
  assert_true(atomic_load(&x.writes) > 0);
  conch_client_free(c);
  assert_true(conch_wait_until(x_closed, &x, WAIT_MS));
  close(x.lfd);
  unlink(path);
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

/* ---- Client certificates -------------------------------------------------- */

/* A TLS server trusting CA "a" for client certificates (as a file, or as
   PEM with |pem|), |required| or not. */
static fixture *start_mtls(int required, int pem) {
  fixture *fx = calloc(1, sizeof(*fx));
  conch_server_opts *o;
  assert_non_null(fx);
  assert_int_equal(conch_server_opts_new(&o), 0);
  /* Before conch_server_opts_set_tls(), which keeps them. */
  if (pem) {
    assert_int_equal(conch_server_opts_set_tls_client_ca_pem(o, ca_a_pem, 0),
                     0);
  } else {
    assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, ca_a), 0);
  }
  assert_int_equal(conch_server_opts_set_tls(o, cert, key), 0);
  if (!required) {
    assert_int_equal(conch_server_opts_set_tls_client_cert_required(o, 0), 0);
  }
  fx_start(fx, o, 0);
  conch_server_opts_free(o);
  snprintf(fx->url, sizeof(fx->url), "https://127.0.0.1:%d",
           conch_server_port(fx->s));
  return fx;
}

enum { AS_NOBODY, AS_ALICE, AS_ALICE_PEM, AS_MALLORY };

#define ALICE "CN=alice,O=Conch Test"

/* A unary call presenting |who|'s certificate.  Returns 0 with the
   subject the handler reported in |subject| ("" for none), or the call's
   code with its message in |subject|. */
static int call_as(const fixture *fx, const variant *v, int who,
                   char *subject, size_t cap) {
  conch_client_opts *o;
  conch_client *c;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  conch_metadata *hdrs;
  conch_status st;
  int code = 0;

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
  assert_int_equal(conch_client_opts_set_http_version(o, v->http), 0);
  assert_int_equal(conch_client_opts_set_ca_file(o, cert), 0);
  switch (who) {
  case AS_ALICE:
    assert_int_equal(conch_client_opts_set_client_cert_file(o, alice,
                                                            alice_key),
                     0);
    break;
  case AS_ALICE_PEM:
    assert_int_equal(conch_client_opts_set_client_cert_pem(
                         o, alice_pem, strlen(alice_pem), alice_key_pem,
                         strlen(alice_key_pem)),
                     0);
    break;
  case AS_MALLORY:
    assert_int_equal(conch_client_opts_set_client_cert_file(o, mallory,
                                                            mallory_key),
                     0);
    break;
  default:
    break;
  }
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  req.payload.data = (uint8_t *)"hi";
  req.payload.len = 2;
  assert_int_equal(conch_metadata_new(&hdrs, NULL), 0);
  conch_status_init(&st);
  subject[0] = '\0';
  if (conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, hdrs, NULL) ==
      0) {
    const char *sub = conch_metadata_get(hdrs, "x-peer-subject", NULL);
    const char *len = conch_metadata_get(hdrs, "x-peer-der-len", NULL);
    if (sub != NULL) {
      snprintf(subject, cap, "%s", sub);
      assert_non_null(len);
      if (strcmp(sub, ALICE) == 0) {
        assert_int_equal(strtoul(len, NULL, 10), alice_der_len);
      } else {
        assert_true(strtoul(len, NULL, 10) > 100);
      }
    } else {
      assert_null(len);
    }
    conch_message_free(c, out);
  } else {
    code = (int)st.code;
    assert_int_not_equal(code, 0);
    snprintf(subject, cap, "%s", conch_status_message(&st));
  }
  conch_metadata_free(hdrs);
  conch_status_clear(&st);
  conch_client_free(c);
  return code;
}

static const variant mtls_variants[] = {
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, CONCH_HTTP_2},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO, CONCH_HTTP_2},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON, CONCH_HTTP_1_1},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO, CONCH_HTTP_1_1},
};

static void test_mtls_required(void **state) {
  char got[512];

  (void)state;
  for (int pem = 0; pem < 2; pem++) {
    fixture *fx = start_mtls(1, pem);
    for (size_t i = 0; i < sizeof(mtls_variants) / sizeof(mtls_variants[0]);
         i++) {
      const variant *v = &mtls_variants[i];
      int rc = call_as(fx, v, pem ? AS_ALICE_PEM : AS_ALICE, got,
                       sizeof(got));
      if (rc != 0 || strcmp(got, ALICE) != 0) {
        fail_msg("%s: alice: %d %s", vname(v), rc, got);
      }
      /* No certificate: TLS 1.3's certificate_required alert. */
      rc = call_as(fx, v, AS_NOBODY, got, sizeof(got));
      if (rc == 0 || strstr(got, "certificate required") == NULL) {
        fail_msg("%s: nobody: %d %s", vname(v), rc, got);
      }
      /* Another CA's certificate: unknown_ca. */
      rc = call_as(fx, v, AS_MALLORY, got, sizeof(got));
      if (rc == 0 || strstr(got, "unknown ca") == NULL) {
        fail_msg("%s: mallory: %d %s", vname(v), rc, got);
      }
    }
    stop(fx);
  }
}

static void test_mtls_optional(void **state) {
  char got[512];

  (void)state;
  fixture *fx = start_mtls(0, 0);
  for (size_t i = 0; i < sizeof(mtls_variants) / sizeof(mtls_variants[0]);
       i++) {
    const variant *v = &mtls_variants[i];
    int rc = call_as(fx, v, AS_ALICE, got, sizeof(got));
    if (rc != 0 || strcmp(got, ALICE) != 0) {
      fail_msg("%s: alice: %d %s", vname(v), rc, got);
    }
    /* In without one; the handler sees no subject. */
    rc = call_as(fx, v, AS_NOBODY, got, sizeof(got));
    if (rc != 0 || got[0] != '\0') {
      fail_msg("%s: nobody: %d %s", vname(v), rc, got);
    }
    /* One that is offered must verify. */
    rc = call_as(fx, v, AS_MALLORY, got, sizeof(got));
    if (rc == 0 || strstr(got, "unknown ca") == NULL) {
      fail_msg("%s: mallory: %d %s", vname(v), rc, got);
    }
  }
  stop(fx);
}

/* Runs |cmd| (stderr into the output) and returns its exit status. */
static int run_rc(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  size_t n;
  assert_non_null(p);
  n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  return pclose(p);
}

static void test_mtls_curl(void **state) {
  fixture *fx = start_mtls(1, 0);
  char cmd[1536], out[8192];
  const char *vers[] = {"--http1.1", "--http2"};

  (void)state;
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof(cmd),
             "curl -sS -i %s --cacert %s --cert %s --key %s -w "
             "'\n%%{http_version} %%{response_code}' -H 'content-type: "
             "application/json' --data-binary '{\"payload\":\"aGk=\"}' "
             "%s/conchtest.v1.TestService/Unary 2>&1",
             vers[i], cert, alice, alice_key, fx->url);
    if (run_rc(cmd, out, sizeof(out)) != 0 ||
        strstr(out, "\"payload\":\"aGk=\"") == NULL ||
        strcasestr(out, "x-peer-subject: " ALICE) == NULL ||
        strstr(out, i == 0 ? "\n1.1 200" : "\n2 200") == NULL) {
      fail_msg("%s: %s", vers[i], out);
    }
    /* Without a certificate, under TLS 1.3 and 1.2 (handshake_failure).
       Under 1.3 the refusal comes after curl's side of the handshake, and
       curl may find the connection closed before it reads the alert
       (conch's client names it: test_mtls_required), so only the refusal
       is checked there. */
    for (int t12 = 0; t12 < 2; t12++) {
      snprintf(cmd, sizeof(cmd),
               "curl -sS %s %s --cacert %s -w '%%{response_code}' -H "
               "'content-type: application/json' --data-binary '{}' "
               "%s/conchtest.v1.TestService/Unary 2>&1",
               vers[i], t12 ? "--tls-max 1.2" : "", cert, fx->url);
      if (run_rc(cmd, out, sizeof(out)) == 0 || strstr(out, "200") != NULL ||
          (t12 && strstr(out, "handshake failure") == NULL)) {
        fail_msg("%s%s: %s", vers[i], t12 ? " TLS 1.2" : "", out);
      }
    }
    /* Another CA's certificate: unknown_ca (read under TLS 1.2, as
       above). */
    for (int t12 = 0; t12 < 2; t12++) {
      snprintf(cmd, sizeof(cmd),
               "curl -sS %s %s --cacert %s --cert %s --key %s -w "
               "'%%{response_code}' -H 'content-type: application/json' "
               "--data-binary '{}' %s/conchtest.v1.TestService/Unary 2>&1",
               vers[i], t12 ? "--tls-max 1.2" : "", cert, mallory,
               mallory_key, fx->url);
      if (run_rc(cmd, out, sizeof(out)) == 0 || strstr(out, "200") != NULL ||
          (t12 && strstr(out, "unknown ca") == NULL)) {
        fail_msg("%s%s mallory: %s", vers[i], t12 ? " TLS 1.2" : "", out);
      }
    }
  }
  stop(fx);
}

static void test_mtls_opts(void **state) {
  conch_server_opts *o;
  conch_server *s;
  char bad[160];

  (void)state;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_tls_client_ca_file(NULL, ca_a),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_tls_client_ca_pem(NULL, "x", 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_tls_client_cert_required(NULL, 1),
                   CONCH_ERR_INVALID);
  snprintf(bad, sizeof(bad), "%s/missing-ca.pem", dir);
  assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, bad),
                   CONCH_ERR_TLS);
  assert_non_null(strstr(conch_server_opts_tls_error(o), "missing-ca.pem"));
  assert_int_equal(conch_server_opts_set_tls_client_ca_pem(o, "junk", 0),
                   CONCH_ERR_TLS);
  assert_non_null(strstr(conch_server_opts_tls_error(o), "no PEM"));
  /* A key is no certificate. */
  assert_int_equal(conch_server_opts_set_tls_client_ca_pem(o, alice_key_pem,
                                                           0),
                   CONCH_ERR_TLS);
  /* Failed setters set nothing: a cleartext server starts. */
  assert_int_equal(conch_server_new(&s, o), 0);
  conch_server_free(s);
  /* Client CAs without TLS: refused, not served in cleartext. */
  assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, ca_a), 0);
  assert_string_equal(conch_server_opts_tls_error(o), "");
  assert_int_equal(conch_server_new(&s, o), CONCH_ERR_INVALID);
  /* NULL drops them again. */
  assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, NULL), 0);
  assert_int_equal(conch_server_new(&s, o), 0);
  conch_server_free(s);
  /* Both kinds together, then TLS: the server trusts both. */
  assert_int_equal(conch_server_opts_set_tls_client_ca_file(o, ca_b), 0);
  assert_int_equal(conch_server_opts_set_tls_client_ca_pem(o, ca_a_pem, 0), 0);
  assert_int_equal(conch_server_opts_set_tls(o, cert, key), 0);
  {
    fixture *fx = calloc(1, sizeof(*fx));
    variant v = {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, CONCH_HTTP_2};
    char got[512];
    assert_non_null(fx);
    fx_start(fx, o, 0);
    snprintf(fx->url, sizeof(fx->url), "https://127.0.0.1:%d",
             conch_server_port(fx->s));
    assert_int_equal(call_as(fx, &v, AS_ALICE, got, sizeof(got)), 0);
    assert_string_equal(got, ALICE);
    assert_int_equal(call_as(fx, &v, AS_MALLORY, got, sizeof(got)), 0);
    assert_string_equal(got, "CN=mallory,O=Conch Test");
    stop(fx);
  }
  conch_server_opts_free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_opts),
      cmocka_unit_test(test_conch_client),
      cmocka_unit_test(test_client_limit),
      cmocka_unit_test(test_big_request),
      cmocka_unit_test(test_adopted_transport),
      cmocka_unit_test(test_handshake_timeout),
      cmocka_unit_test(test_cleartext_client_refused),
      cmocka_unit_test(test_curl),
      cmocka_unit_test(test_alpn),
      cmocka_unit_test(test_no_alpn),
      cmocka_unit_test(test_mtls_opts),
      cmocka_unit_test(test_mtls_required),
      cmocka_unit_test(test_mtls_optional),
      cmocka_unit_test(test_mtls_curl),
  };
  return cmocka_run_group_tests(tests, make_cert, remove_cert);
}
