/* Unit tests for runtime/net/tls.c: a conch_tls client against an OpenSSL
   server SSL in the same process, bytes shuttled between them in memory.
   Keys and certificates are made at start-up with the OpenSSL API. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <conch/status.h>

#include "failmem.h"
#include "filter.h"
#include "tls.h"

/* ---- certificates ---- */

static EVP_PKEY *ca_key, *other_key, *leaf_key;
static X509 *ca, *other_ca, *client_cert;
static char *ca_pem_text;
static char *ca_path, *garbage_path, *client_cert_path, *client_key_path,
    *client_combined_path, *other_key_path, *enc_key_path;
static long serial = 1;

static EVP_PKEY *new_key(void) {
  EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  assert_non_null(k);
  return k;
}

static void add_ext(X509 *x, X509V3_CTX *v3, int nid, const char *value) {
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, v3, nid, value);
  assert_non_null(ext);
  assert_int_equal(X509_add_ext(x, ext, -1), 1);
  X509_EXTENSION_free(ext);
}

typedef struct cert_spec {
  const char *cn;
  const char *san; /* "DNS:localhost,IP:127.0.0.1" or NULL */
  X509 *issuer;    /* NULL: self-signed with |key| */
  EVP_PKEY *issuer_key;
  int is_ca;
  long from_days; /* notBefore relative to now */
  long to_days;   /* notAfter */
  const char *eku;
} cert_spec;

static X509 *make_cert(EVP_PKEY *key, const cert_spec *s) {
  X509 *x = X509_new();
  X509_NAME *name;
  X509V3_CTX v3;

  assert_non_null(x);
  assert_int_equal(X509_set_version(x, 2), 1);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             (const unsigned char *)s->cn, -1, -1, 0);
  X509_set_issuer_name(x, s->issuer != NULL ? X509_get_subject_name(s->issuer)
                                            : name);
  X509_gmtime_adj(X509_getm_notBefore(x), s->from_days * 86400);
  X509_gmtime_adj(X509_getm_notAfter(x), s->to_days * 86400);
  X509_set_pubkey(x, key);
  X509V3_set_ctx(&v3, s->issuer != NULL ? s->issuer : x, x, NULL, NULL, 0);
  if (s->is_ca) {
    add_ext(x, &v3, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(x, &v3, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(x, &v3, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(x, &v3, NID_key_usage, "critical,digitalSignature");
    add_ext(x, &v3, NID_ext_key_usage, s->eku != NULL ? s->eku : "serverAuth");
  }
  add_ext(x, &v3, NID_subject_key_identifier, "hash");
  if (s->issuer != NULL) {
    add_ext(x, &v3, NID_authority_key_identifier, "keyid:always");
  }
  if (s->san != NULL) {
    add_ext(x, &v3, NID_subject_alt_name, s->san);
  }
  assert_true(X509_sign(x, s->issuer_key != NULL ? s->issuer_key : key,
                        EVP_sha256()) > 0);
  return x;
}

/* A server certificate for |san| from our CA, valid now. */
static X509 *leaf(const char *san) {
  cert_spec s = {"server", san, ca, ca_key, 0, -1, 30, NULL};
  return make_cert(leaf_key, &s);
}

static char *bio_text(BIO *b) {
  char *p, *s;
  long n = BIO_get_mem_data(b, &p);
  s = malloc((size_t)n + 1);
  assert_non_null(s);
  memcpy(s, p, (size_t)n);
  s[n] = '\0';
  BIO_free(b);
  return s;
}

static char *cert_to_pem(X509 *x) {
  BIO *b = BIO_new(BIO_s_mem());
  assert_int_equal(PEM_write_bio_X509(b, x), 1);
  return bio_text(b);
}

static char *key_to_pem(EVP_PKEY *k) {
  BIO *b = BIO_new(BIO_s_mem());
  assert_int_equal(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL),
                   1);
  return bio_text(b);
}

static char *enc_key_to_pem(EVP_PKEY *k) {
  BIO *b = BIO_new(BIO_s_mem());
  assert_int_equal(PEM_write_bio_PrivateKey(b, k, EVP_aes_128_cbc(), NULL, 0,
                                            NULL, (void *)"secret"),
                   1);
  return bio_text(b);
}

static char *write_temp(const char *a, const char *b) {
  char path[] = "/tmp/conch_test_tls_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, a, strlen(a)), (ssize_t)strlen(a));
  if (b != NULL) {
    assert_int_equal(write(fd, b, strlen(b)), (ssize_t)strlen(b));
  }
  close(fd);
  return strdup(path);
}

static int group_setup(void **state) {
  cert_spec cas = {"conch test CA", NULL, NULL, NULL, 1, -1, 365, NULL};
  cert_spec others = {"other CA", NULL, NULL, NULL, 1, -1, 365, NULL};
  cert_spec cls = {"client", NULL, NULL, NULL, 0, -1, 30, "clientAuth"};
  char *cert_text, *key_text, *other_text, *enc_text;

  (void)state;
  ca_key = new_key();
  other_key = new_key();
  leaf_key = new_key();
  ca = make_cert(ca_key, &cas);
  other_ca = make_cert(other_key, &others);
  cls.issuer = ca;
  cls.issuer_key = ca_key;
  client_cert = make_cert(leaf_key, &cls);

  ca_pem_text = cert_to_pem(ca);
  ca_path = write_temp(ca_pem_text, NULL);
  garbage_path = write_temp("this is not PEM\n", NULL);
  cert_text = cert_to_pem(client_cert);
  key_text = key_to_pem(leaf_key);
  other_text = key_to_pem(other_key);
  enc_text = enc_key_to_pem(leaf_key);
  client_cert_path = write_temp(cert_text, NULL);
  client_key_path = write_temp(key_text, NULL);
  client_combined_path = write_temp(cert_text, key_text);
  other_key_path = write_temp(other_text, NULL);
  enc_key_path = write_temp(enc_text, NULL);
  free(cert_text);
  free(key_text);
  free(other_text);
  free(enc_text);
  return 0;
}

static void drop_file(char *path) {
  unlink(path);
  free(path);
}

static int group_teardown(void **state) {
  (void)state;
  drop_file(ca_path);
  drop_file(garbage_path);
  drop_file(client_cert_path);
  drop_file(client_key_path);
  drop_file(client_combined_path);
  drop_file(other_key_path);
  drop_file(enc_key_path);
  free(ca_pem_text);
  X509_free(ca);
  X509_free(other_ca);
  X509_free(client_cert);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(other_key);
  EVP_PKEY_free(leaf_key);
  return 0;
}

/* ---- the server ---- */

enum { ALPN_H2, ALPN_HTTP11, ALPN_NONE, ALPN_ALERT };

typedef struct server_opts {
  X509 *cert;     /* owned by the caller */
  X509 *chain[2]; /* extra certificates sent, NULL-terminated */
  int alpn;
  int require_client_cert;
  int max_version;     /* 0: any */
  const char *ciphers; /* TLS 1.2 list, NULL: default */
} server_opts;

typedef struct server {
  SSL_CTX *ctx;
  SSL *ssl;
  BIO *rbio, *wbio; /* owned by |ssl| */
  int alpn;
  unsigned char offer[64]; /* the client's ALPN list */
  unsigned int offer_len;
  int done, failed;
  int feed_rv; /* the client refused input (an injected allocation failure) */
  char err[512];
} server;

static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  static const unsigned char h2[] = "\x02h2";
  server *s = arg;

  (void)ssl;
  if (inlen <= sizeof(s->offer)) {
    memcpy(s->offer, in, inlen);
    s->offer_len = inlen;
  }
  switch (s->alpn) {
  case ALPN_H2:
    if (SSL_select_next_proto((unsigned char **)out, outlen, h2, 3, in,
                              inlen) == OPENSSL_NPN_NEGOTIATED) {
      return SSL_TLSEXT_ERR_OK;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  case ALPN_HTTP11:
    /* Chosen regardless of the offer, like a server without h2. */
    *out = (const unsigned char *)"http/1.1";
    *outlen = 8;
    return SSL_TLSEXT_ERR_OK;
  case ALPN_ALERT:
    return SSL_TLSEXT_ERR_ALERT_FATAL; /* no_application_protocol */
  default:
    return SSL_TLSEXT_ERR_NOACK;
  }
}

static void server_start(server *s, const server_opts *o) {
  int i;

  memset(s, 0, sizeof(*s));
  s->alpn = o->alpn;
  s->ctx = SSL_CTX_new(TLS_server_method());
  assert_non_null(s->ctx);
  assert_int_equal(SSL_CTX_use_certificate(s->ctx, o->cert), 1);
  assert_int_equal(SSL_CTX_use_PrivateKey(s->ctx, leaf_key), 1);
  for (i = 0; i < 2 && o->chain[i] != NULL; i++) {
    assert_int_equal(SSL_CTX_add1_chain_cert(s->ctx, o->chain[i]), 1);
  }
  SSL_CTX_set_alpn_select_cb(s->ctx, alpn_select, s);
  if (o->max_version != 0) {
    SSL_CTX_set_min_proto_version(s->ctx, 0);
    SSL_CTX_set_max_proto_version(s->ctx, o->max_version);
    SSL_CTX_set_security_level(s->ctx, 0);
  }
  if (o->ciphers != NULL) {
    assert_int_equal(SSL_CTX_set_cipher_list(s->ctx, o->ciphers), 1);
  }
  if (o->require_client_cert) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(s->ctx), ca);
    SSL_CTX_set_verify(s->ctx,
                       SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  }
  s->ssl = SSL_new(s->ctx);
  assert_non_null(s->ssl);
  s->rbio = BIO_new(BIO_s_mem());
  s->wbio = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(s->rbio, -1);
  SSL_set_bio(s->ssl, s->rbio, s->wbio);
  SSL_set_accept_state(s->ssl);
}

static void server_stop(server *s) {
  SSL_free(s->ssl);
  SSL_CTX_free(s->ctx);
}

/* Records and empties the server's OpenSSL errors, which share this
   thread's queue with the client. */
static void server_error(server *s) {
  unsigned long e;
  size_t len;

  s->failed = 1;
  for (;;) {
    e = ERR_get_error();
    if (e == 0) {
      break;
    }
    len = strlen(s->err);
    ERR_error_string_n(e, s->err + len, sizeof(s->err) - len);
  }
}

/* Client output to the server.  Returns the bytes moved. */
static size_t to_server(conch_tls *t, server *s) {
  const uint8_t *p;
  size_t n = conch__tls_pending(t, &p);

  if (n > 0) {
    assert_int_equal(BIO_write(s->rbio, p, (int)n), (int)n);
    conch__tls_consume(t, n);
  }
  assert_int_equal(conch__tls_pending(t, &p), 0);
  return n;
}

/* Server output to the client in pieces of at most |chunk| bytes. */
static size_t to_client(server *s, conch_tls *t, size_t chunk) {
  uint8_t buf[4096];
  size_t moved = 0, want;
  int n;

  for (;;) {
    want = chunk < sizeof(buf) ? chunk : sizeof(buf);
    if (s->feed_rv != 0) {
      break;
    }
    n = BIO_read(s->wbio, buf, (int)want);
    if (n <= 0) {
      break;
    }
    s->feed_rv = conch__tls_feed(t, buf, (size_t)n);
    if (s->feed_rv == CONCH_ERR_TLS) {
      s->feed_rv = 0; /* the client failed before: its answer stands */
    }
    assert_true(s->feed_rv == 0 || s->feed_rv == CONCH_ERR_NOMEM);
    moved += (size_t)n;
  }
  return moved;
}

/* Runs both handshakes until nothing moves.  Returns the client's last
   handshake result. */
static int handshake(conch_tls *t, server *s) {
  int crv = CONCH_ERR_AGAIN, r, i;
  size_t moved;

  for (i = 0; i < 50; i++) {
    if (crv == CONCH_ERR_AGAIN) {
      crv = conch__tls_handshake(t);
      assert_int_equal(ERR_peek_error(), 0); /* nothing left behind */
    }
    moved = to_server(t, s);
    if (!s->done && !s->failed) {
      r = SSL_do_handshake(s->ssl);
      if (r == 1) {
        s->done = 1;
      } else if (SSL_get_error(s->ssl, r) != SSL_ERROR_WANT_READ) {
        server_error(s);
      }
    }
    moved += to_client(s, t, SIZE_MAX);
    if (s->feed_rv != 0) {
      return s->feed_rv;
    }
    if (crv != CONCH_ERR_AGAIN && moved == 0) {
      break;
    }
  }
  return crv;
}

static conch_tls_ctx *new_ctx(const conch_tls_config *cfg) {
  conch_tls_ctx *ctx = NULL;
  char err[256];
  int rv = conch__tls_ctx_new(&ctx, NULL, cfg, err, sizeof(err));
  if (rv != 0) {
    fail_msg("ctx_new: %d %s", rv, err);
  }
  return ctx;
}

static conch_tls_ctx *ca_ctx(void) {
  conch_tls_config cfg = {0};
  cfg.ca_file = ca_path;
  return new_ctx(&cfg);
}

/* A client connection and its server.  The pair owns |ctx|. */
typedef struct pair {
  conch_tls_ctx *ctx;
  conch_tls *t;
  server s;
  int rv;
} pair;

/* Handshake against a server built from |o| for |host|; on return the
   connection and server are live for more checks. */
static void pair_open(pair *p, conch_tls_ctx *ctx, const server_opts *o,
                      const char *host) {
  memset(p, 0, sizeof(*p));
  p->ctx = ctx;
  assert_int_equal(conch__tls_new(&p->t, ctx, host), 0);
  server_start(&p->s, o);
  p->rv = handshake(p->t, &p->s);
}

static void pair_close(pair *p) {
  conch__tls_free(p->t);
  conch__tls_ctx_free(p->ctx);
  server_stop(&p->s);
}

/* One handshake that must fail with a message containing |want|. */
static void expect_fail(conch_tls_ctx *ctx, X509 *cert, X509 *chain,
                        const char *host, const char *want) {
  server_opts o = {cert, {chain, NULL}, ALPN_H2, 0, 0, NULL};
  pair p;

  pair_open(&p, ctx, &o, host);
  assert_int_equal(p.rv, CONCH_ERR_TLS);
  if (strstr(conch__tls_error(p.t), want) == NULL) {
    fail_msg("message '%s' lacks '%s'", conch__tls_error(p.t), want);
  }
  /* Final: asking again gives the same answer without OpenSSL. */
  assert_int_equal(conch__tls_handshake(p.t), CONCH_ERR_TLS);
  assert_int_equal(conch__tls_feed(p.t, (const uint8_t *)"x", 1),
                   CONCH_ERR_TLS);
  assert_int_equal(conch__tls_read(p.t, (uint8_t[4]){0}, 4), CONCH_ERR_TLS);
  pair_close(&p);
}

static void expect_ok(conch_tls_ctx *ctx, X509 *cert, const char *host,
                      const char *sni) {
  server_opts o = {cert, {NULL}, ALPN_H2, 0, 0, NULL};
  const char *got;
  pair p;

  pair_open(&p, ctx, &o, host);
  if (p.rv != 0) {
    fail_msg("handshake %s: %d %s", host, p.rv, conch__tls_error(p.t));
  }
  assert_true(p.s.done);
  assert_string_equal(conch__tls_error(p.t), "");
  /* Exactly one ALPN protocol offered: h2. */
  assert_int_equal(p.s.offer_len, 3);
  assert_memory_equal(p.s.offer, "\x02h2", 3);
  got = SSL_get_servername(p.s.ssl, TLSEXT_NAMETYPE_host_name);
  if (sni == NULL) {
    assert_null(got);
  } else {
    assert_non_null(got);
    assert_string_equal(got, sni);
  }
  assert_int_equal(SSL_version(p.s.ssl), TLS1_3_VERSION);
  pair_close(&p);
}

/* ---- tests ---- */

static void test_ip_san(void **state) {
  X509 *c = leaf("IP:127.0.0.1,IP:::1,DNS:localhost");
  (void)state;
  expect_ok(ca_ctx(), c, "127.0.0.1", NULL);
  expect_ok(ca_ctx(), c, "::1", NULL);
  expect_ok(ca_ctx(), c, "[::1]", NULL);
  X509_free(c);
}

static void test_dns_name(void **state) {
  X509 *c = leaf("IP:127.0.0.1,DNS:localhost");
  conch_tls_config cfg = {0};
  (void)state;
  expect_ok(ca_ctx(), c, "localhost", "localhost");
  expect_ok(ca_ctx(), c, "localhost.", "localhost");
  /* The CA as PEM text instead of a file. */
  cfg.ca_pem = ca_pem_text;
  expect_ok(new_ctx(&cfg), c, "localhost", "localhost");
  cfg.ca_pem_len = strlen(ca_pem_text);
  expect_ok(new_ctx(&cfg), c, "localhost", "localhost");
  X509_free(c);
}

static void test_hostname_mismatch(void **state) {
  X509 *c = leaf("DNS:example.com,IP:127.0.0.2");
  X509 *dns_ip = leaf("DNS:127.0.0.1");
  (void)state;
  expect_fail(ca_ctx(), c, NULL, "localhost",
              "certificate verify failed: hostname mismatch "
              "(expected 'localhost')");
  expect_fail(ca_ctx(), c, NULL, "127.0.0.1",
              "certificate verify failed: IP address mismatch "
              "(expected '127.0.0.1')");
  /* An IP literal matches only IP SANs, never a DNS SAN spelling it. */
  expect_fail(ca_ctx(), dns_ip, NULL, "127.0.0.1", "IP address mismatch");
  X509_free(c);
  X509_free(dns_ip);
}

static void test_wildcards(void **state) {
  X509 *partial = leaf("DNS:f*.example.com");
  X509 *full = leaf("DNS:*.example.com");
  (void)state;
  expect_fail(ca_ctx(), partial, NULL, "foo.example.com",
              "hostname mismatch (expected 'foo.example.com')");
  expect_ok(ca_ctx(), full, "foo.example.com", "foo.example.com");
  expect_fail(ca_ctx(), full, NULL, "a.foo.example.com", "hostname mismatch");
  X509_free(partial);
  X509_free(full);
}

static void test_untrusted(void **state) {
  cert_spec self = {"self", "DNS:localhost", NULL, NULL, 0, -1, 30, NULL};
  cert_spec by_other = {
      "server", "DNS:localhost", other_ca, other_key, 0, -1, 30, NULL};
  X509 *selfc = make_cert(leaf_key, &self);
  X509 *otherc = make_cert(leaf_key, &by_other);
  (void)state;
  expect_fail(ca_ctx(), selfc, NULL, "localhost",
              "certificate verify failed: self-signed certificate "
              "(depth 0, subject '/CN=self')");
  expect_fail(ca_ctx(), otherc, other_ca, "localhost",
              "certificate verify failed: self-signed certificate in "
              "certificate chain (depth 1, subject '/CN=other CA')");
  expect_fail(ca_ctx(), otherc, NULL, "localhost",
              "certificate verify failed: unable to get local issuer "
              "certificate");
  /* The system store does not know our CA either. */
  expect_fail(new_ctx(NULL), otherc, NULL, "localhost",
              "certificate verify failed: unable to get local issuer");
  X509_free(selfc);
  X509_free(otherc);
}

static void test_expired(void **state) {
  cert_spec old = {"server", "DNS:localhost", ca, ca_key, 0, -30, -1, NULL};
  cert_spec early = {"server", "DNS:localhost", ca, ca_key, 0, 2, 30, NULL};
  X509 *oldc = make_cert(leaf_key, &old);
  X509 *earlyc = make_cert(leaf_key, &early);
  (void)state;
  expect_fail(ca_ctx(), oldc, NULL, "localhost",
              "certificate verify failed: certificate has expired "
              "(depth 0, subject '/CN=server')");
  expect_fail(ca_ctx(), earlyc, NULL, "localhost",
              "certificate verify failed: certificate is not yet valid");
  X509_free(oldc);
  X509_free(earlyc);
}

static void test_insecure(void **state) {
  conch_tls_config cfg = {0};
  cert_spec bad = {"junk", "DNS:example.com", NULL, NULL, 0, -30, -1, NULL};
  X509 *c = make_cert(leaf_key, &bad); /* self-signed, expired, wrong name */
  (void)state;
  cfg.insecure_skip_verify = 1;
  expect_ok(new_ctx(&cfg), c, "localhost", "localhost");
  expect_ok(new_ctx(&cfg), c, "127.0.0.1", NULL);
  X509_free(c);
}

static void alpn_case(int mode, const char *want) {
  X509 *c = leaf("DNS:localhost");
  server_opts o = {c, {NULL}, mode, 0, 0, NULL};
  pair p;

  pair_open(&p, ca_ctx(), &o, "localhost");
  assert_int_equal(p.rv, CONCH_ERR_TLS);
  if (strstr(conch__tls_error(p.t), want) == NULL) {
    fail_msg("message '%s' lacks '%s'", conch__tls_error(p.t), want);
  }
  assert_int_equal(conch__tls_write(p.t, (const uint8_t *)"x", 1),
                   CONCH_ERR_TLS);
  pair_close(&p);
  X509_free(c);
}

static void test_alpn(void **state) {
  (void)state;
  alpn_case(ALPN_NONE, "server did not select ALPN h2 (no ALPN)");
  alpn_case(ALPN_ALERT, "handshake failed: tlsv1 alert no application "
                        "protocol");
  /* OpenSSL's client itself refuses a protocol it did not offer, before
     our check runs. */
  alpn_case(ALPN_HTTP11, "handshake failed: bad extension");
}

static void client_cert_case(const conch_tls_config *cfg) {
  X509 *c = leaf("DNS:localhost");
  server_opts o = {c, {NULL}, ALPN_H2, 1, 0, NULL};
  X509 *peer;
  pair p;

  pair_open(&p, new_ctx(cfg), &o, "localhost");
  if (p.rv != 0) {
    fail_msg("handshake: %s / server: %s", conch__tls_error(p.t), p.s.err);
  }
  assert_true(p.s.done);
  assert_int_equal(SSL_get_verify_result(p.s.ssl), X509_V_OK);
  peer = SSL_get0_peer_certificate(p.s.ssl);
  assert_non_null(peer);
  assert_int_equal(X509_cmp(peer, client_cert), 0);
  pair_close(&p);
  X509_free(c);
}

static void test_client_cert(void **state) {
  conch_tls_config cfg = {0};
  char *cert_text = cert_to_pem(client_cert);
  char *key_text = key_to_pem(leaf_key);
  char *both;
  size_t a = strlen(cert_text), b = strlen(key_text);
  (void)state;

  cfg.ca_file = ca_path;
  cfg.cert_file = client_cert_path;
  cfg.key_file = client_key_path;
  client_cert_case(&cfg);
  cfg.cert_file = client_combined_path; /* key in the certificate file */
  cfg.key_file = NULL;
  client_cert_case(&cfg);
  cfg.cert_file = NULL;
  cfg.cert_pem = cert_text;
  cfg.key_pem = key_text;
  cfg.key_pem_len = b;
  client_cert_case(&cfg);
  both = malloc(a + b + 1);
  memcpy(both, cert_text, a);
  memcpy(both + a, key_text, b + 1);
  cfg.cert_pem = both;
  cfg.cert_pem_len = a + b;
  cfg.key_pem = NULL;
  cfg.key_pem_len = 0;
  client_cert_case(&cfg);
  free(both);
  free(cert_text);
  free(key_text);
}

static void test_client_cert_missing(void **state) {
  X509 *c = leaf("DNS:localhost");
  server_opts o = {c, {NULL}, ALPN_H2, 1, 0, NULL};
  uint8_t buf[16];
  long r;
  pair p;
  (void)state;

  pair_open(&p, ca_ctx(), &o, "localhost");
  /* Under TLS 1.3 the client finishes first and hears of the refusal
     when it next reads. */
  assert_int_equal(p.rv, 0);
  assert_true(p.s.failed);
  r = conch__tls_read(p.t, buf, sizeof(buf));
  assert_int_equal(r, CONCH_ERR_TLS);
  if (strstr(conch__tls_error(p.t), "read failed: ") == NULL ||
      strstr(conch__tls_error(p.t), "certificate required") == NULL) {
    fail_msg("message: %s", conch__tls_error(p.t));
  }
  assert_int_equal(ERR_peek_error(), 0);
  pair_close(&p);
  X509_free(c);
}

static void expect_ctx_fail(const conch_tls_config *cfg, int want_rv,
                            const char *want1, const char *want2) {
  conch_tls_ctx *ctx = (conch_tls_ctx *)&ctx; /* must stay untouched */
  conch_tls_ctx *orig = ctx;
  char err[256];
  int rv;

  rv = conch__tls_ctx_new(&ctx, NULL, cfg, err, sizeof(err));
  assert_int_equal(rv, want_rv);
  assert_ptr_equal(ctx, orig);
  if (strstr(err, want1) == NULL ||
      (want2 != NULL && strstr(err, want2) == NULL)) {
    fail_msg("message '%s' lacks '%s' / '%s'", err, want1,
             want2 != NULL ? want2 : "");
  }
  assert_int_equal(ERR_peek_error(), 0);
}

static void test_ctx_errors(void **state) {
  conch_tls_config cfg = {0};
  char path[300], broken[4096];
  (void)state;

  cfg.ca_file = "/nonexistent/ca.pem";
  snprintf(path, sizeof(path), "cannot load CA file '%s'", cfg.ca_file);
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, path, "No such file or directory");
  cfg.ca_file = garbage_path;
  snprintf(path, sizeof(path), "cannot load CA file '%s'", garbage_path);
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, path, NULL);
  cfg.ca_file = NULL;
  cfg.ca_pem = "-----BEGIN CERTIFICATE-----\nnot base64!\n"
               "-----END CERTIFICATE-----\n";
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, "ca_pem: ", NULL);
  cfg.ca_pem = "garbage";
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, "ca_pem: no PEM certificate found",
                  NULL);
  /* A good certificate does not excuse a broken one after it. */
  snprintf(broken, sizeof(broken),
           "%s-----BEGIN CERTIFICATE-----\nMIIB\n"
           "-----END CERTIFICATE-----\n",
           ca_pem_text);
  cfg.ca_pem = broken;
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, "ca_pem: cannot parse certificate 2",
                  NULL);
  cfg.ca_pem = NULL;

  cfg.cert_file = garbage_path;
  snprintf(path, sizeof(path), "cannot load client certificate file '%s'",
           garbage_path);
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, path, NULL);
  cfg.cert_file = client_cert_path; /* no key in it */
  snprintf(path, sizeof(path), "client key file '%s': no PEM private key",
           client_cert_path);
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, path, NULL);
  cfg.key_file = "/nonexistent/key.pem";
  expect_ctx_fail(&cfg, CONCH_ERR_TLS,
                  "cannot open client key file '/nonexistent/key.pem'",
                  "No such file or directory");
  cfg.key_file = other_key_path;
  expect_ctx_fail(&cfg, CONCH_ERR_TLS,
                  "the client key does not match the client certificate", NULL);
  cfg.key_file = enc_key_path;
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, "encrypted (not supported)", NULL);
  cfg.key_file = NULL;
  cfg.key_pem = "garbage";
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, "key_pem: no PEM private key found",
                  NULL);
  cfg.key_pem = NULL;
  cfg.cert_file = NULL;
  cfg.cert_pem = "garbage";
  expect_ctx_fail(&cfg, CONCH_ERR_TLS, "cert_pem: no PEM certificate found",
                  NULL);

  cfg.cert_file = client_cert_path;
  expect_ctx_fail(&cfg, CONCH_ERR_INVALID, "cert_file and cert_pem", NULL);
  cfg.cert_file = NULL;
  cfg.cert_pem = NULL;
  cfg.key_file = client_key_path;
  expect_ctx_fail(&cfg, CONCH_ERR_INVALID, "without a client certificate",
                  NULL);
  assert_int_equal(conch__tls_ctx_new(NULL, NULL, NULL, NULL, 0),
                   CONCH_ERR_INVALID);
}

static void test_bad_args(void **state) {
  conch_tls_ctx *ctx = ca_ctx();
  conch_tls *t = NULL;
  char longname[300];
  uint8_t buf[8];
  (void)state;

  memset(longname, 'a', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  assert_int_equal(conch__tls_new(&t, ctx, ""), CONCH_ERR_INVALID);
  assert_int_equal(conch__tls_new(&t, ctx, "."), CONCH_ERR_INVALID);
  assert_int_equal(conch__tls_new(&t, ctx, "[localhost]"), CONCH_ERR_INVALID);
  assert_int_equal(conch__tls_new(&t, ctx, "[127.0.0.1]"), CONCH_ERR_INVALID);
  assert_int_equal(conch__tls_new(&t, ctx, longname), CONCH_ERR_INVALID);
  assert_int_equal(conch__tls_new(&t, ctx, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch__tls_new(&t, NULL, "x"), CONCH_ERR_INVALID);
  assert_null(t);

  assert_int_equal(conch__tls_new(&t, ctx, "localhost"), 0);
  /* Nothing is sent before the handshake is done. */
  assert_int_equal(conch__tls_write(t, (const uint8_t *)"x", 1),
                   CONCH_ERR_STATE);
  assert_int_equal(conch__tls_read(t, buf, sizeof(buf)), CONCH_ERR_STATE);
  assert_int_equal(conch__tls_shutdown(t), CONCH_ERR_STATE);
  /* The first handshake step queues a ClientHello and wants input. */
  assert_int_equal(conch__tls_handshake(t), CONCH_ERR_AGAIN);
  assert_int_equal(conch__tls_handshake(t), CONCH_ERR_AGAIN);
  conch__tls_free(t);
  conch__tls_free(NULL);
  conch__tls_ctx_free(ctx);
  conch__tls_ctx_free(NULL);
}

/* Reads whatever is available into |buf| with reads of at most |cap|. */
static size_t client_drain(conch_tls *t, uint8_t *buf, size_t room,
                           size_t cap) {
  size_t got = 0;
  long r;

  while (got < room) {
    r = conch__tls_read(t, buf + got, room - got < cap ? room - got : cap);
    if (r == CONCH_ERR_AGAIN) {
      break;
    }
    if (r <= 0) {
      fail_msg("read: %ld %s", r, conch__tls_error(t));
    }
    assert_true((size_t)r <= cap);
    got += (size_t)r;
  }
  return got;
}

static size_t server_drain(server *s, uint8_t *buf, size_t room) {
  size_t got = 0, n;

  while (got < room && SSL_read_ex(s->ssl, buf + got, room - got, &n) == 1) {
    got += n;
  }
  ERR_clear_error();
  return got;
}

static void fill(uint8_t *p, size_t n, unsigned seed) {
  size_t i;
  for (i = 0; i < n; i++) {
    p[i] = (uint8_t)((i * 31u + seed) ^ (i >> 9));
  }
}

static void open_ok(pair *p) {
  X509 *c = leaf("DNS:localhost");
  server_opts o = {c, {NULL}, ALPN_H2, 0, 0, NULL};

  pair_open(p, ca_ctx(), &o, "localhost");
  X509_free(c); /* the server's SSL_CTX holds its own reference */
  assert_int_equal(p->rv, 0);
  assert_true(p->s.done);
}

static void test_data(void **state) {
  static const size_t pieces[] = {1, 7, 1000, 16384, 16385, 65536, 100000};
  static const size_t chunks[] = {1, 3, 5, 1000, 4096, 17000, SIZE_MAX};
  static const size_t caps[] = {1, 100, 16384, 65536};
  const size_t total = 1 << 20;
  uint8_t *src = malloc(total), *dst = malloc(total);
  size_t sent, got, n, i;
  uint8_t small[64];
  pair p;
  (void)state;

  open_ok(&p);
  /* A small message each way first. */
  assert_int_equal(conch__tls_write(p.t, (const uint8_t *)"ping", 4), 0);
  to_server(p.t, &p.s);
  assert_int_equal(server_drain(&p.s, small, sizeof(small)), 4);
  assert_memory_equal(small, "ping", 4);
  assert_int_equal(SSL_write(p.s.ssl, "pong", 4), 4);
  to_client(&p.s, p.t, SIZE_MAX);
  assert_int_equal(client_drain(p.t, small, sizeof(small), sizeof(small)), 4);
  assert_memory_equal(small, "pong", 4);
  assert_int_equal(conch__tls_write(p.t, NULL, 0), 0);

  /* 1 MiB client -> server in pieces of many sizes. */
  fill(src, total, 1);
  memset(dst, 0, total);
  for (sent = got = i = 0; sent < total; i++) {
    n = pieces[i % 7];
    if (n > total - sent) {
      n = total - sent;
    }
    assert_int_equal(conch__tls_write(p.t, src + sent, n), 0);
    sent += n;
    to_server(p.t, &p.s);
    got += server_drain(&p.s, dst + got, total - got);
  }
  assert_int_equal(got, total);
  assert_memory_equal(src, dst, total);

  /* 1 MiB server -> client, fed in chunks of many sizes, read with
     buffers of many sizes. */
  fill(src, total, 2);
  memset(dst, 0, total);
  for (sent = got = i = 0; sent < total; i++) {
    n = pieces[(i + 3) % 7];
    if (n > total - sent) {
      n = total - sent;
    }
    assert_int_equal(SSL_write(p.s.ssl, src + sent, (int)n), (int)n);
    sent += n;
    to_client(&p.s, p.t, chunks[i % 7]);
    got += client_drain(p.t, dst + got, total - got, caps[i % 4]);
  }
  assert_int_equal(got, total);
  assert_memory_equal(src, dst, total);
  assert_int_equal(conch__tls_read(p.t, small, sizeof(small)), CONCH_ERR_AGAIN);
  assert_int_equal(conch__tls_read(p.t, small, 0), CONCH_ERR_INVALID);
  assert_int_equal(ERR_peek_error(), 0);
  pair_close(&p);
  free(src);
  free(dst);
}

static void test_close_notify(void **state) {
  uint8_t buf[16];
  size_t n;
  pair p;
  (void)state;

  open_ok(&p);
  /* Data queued before the alert is still delivered. */
  assert_int_equal(SSL_write(p.s.ssl, "bye", 3), 3);
  assert_true(SSL_shutdown(p.s.ssl) >= 0);
  to_client(&p.s, p.t, SIZE_MAX);
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), 3);
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), CONCH_ERR_EOF);
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), CONCH_ERR_EOF);
  /* Our side: close_notify goes out, later writes are refused. */
  assert_int_equal(conch__tls_shutdown(p.t), 0);
  assert_int_equal(conch__tls_shutdown(p.t), 0);
  assert_int_equal(conch__tls_write(p.t, buf, 1), CONCH_ERR_STATE);
  assert_true(to_server(p.t, &p.s) > 0);
  assert_int_equal(SSL_read_ex(p.s.ssl, buf, sizeof(buf), &n), 0);
  assert_int_equal(SSL_get_error(p.s.ssl, 0), SSL_ERROR_ZERO_RETURN);
  ERR_clear_error();
  pair_close(&p);
}

/* filter.c's pump (the server connection's TLS read path, the client's
   without a room limit) over a live pair: each feed is bounded by the
   room and the buffer, no room holds the rest in TLS (HELD), a feed's
   non-zero answer stops it, close_notify ends it with CONCH_ERR_EOF. */
typedef struct pump_sink {
  uint8_t got[8192];
  size_t n;
  size_t room;
  size_t max_feed;
  int stop; /* the feed answers this (0: go on) */
} pump_sink;

static size_t sink_room(void *ud) { return ((pump_sink *)ud)->room; }

static int sink_feed(void *ud, const uint8_t *p, size_t n) {
  pump_sink *k = ud;
  assert_true(n > 0 && n <= k->room && n <= sizeof(k->got) - k->n);
  memcpy(k->got + k->n, p, n);
  k->n += n;
  k->room -= n;
  if (n > k->max_feed) {
    k->max_feed = n;
  }
  return k->stop;
}

static void test_filter_pump(void **state) {
  uint8_t src[5000], buf[512];
  conch_filter f;
  pump_sink k;
  pair p;
  (void)state;

  open_ok(&p);
  memset(&f, 0, sizeof(f));
  f.tls = p.t;
  memset(&k, 0, sizeof(k));
  fill(src, sizeof(src), 3);
  assert_int_equal(SSL_write(p.s.ssl, src, (int)sizeof(src)), sizeof(src));
  to_client(&p.s, p.t, SIZE_MAX);
  k.room = 1000;
  assert_int_equal(conch__filter_pump(&f, buf, sizeof(buf), sink_room,
                                      sink_feed, &k),
                   CONCH_FILTER_HELD);
  assert_int_equal(k.n, 1000);
  assert_true(k.max_feed <= sizeof(buf));
  k.room = 100000;
  assert_int_equal(conch__filter_pump(&f, buf, sizeof(buf), sink_room,
                                      sink_feed, &k),
                   0); /* all of it: TLS wants more input */
  assert_int_equal(k.n, sizeof(src));
  assert_memory_equal(k.got, src, sizeof(src));
  k.room = 0; /* nothing held: no room is not HELD */
  assert_int_equal(conch__filter_pump(&f, buf, sizeof(buf), sink_room,
                                      sink_feed, &k),
                   0);
  /* The feed says stop: the pump does. */
  assert_int_equal(SSL_write(p.s.ssl, "stop", 4), 4);
  to_client(&p.s, p.t, SIZE_MAX);
  k.n = 0;
  k.room = 100000;
  k.stop = 42;
  assert_int_equal(conch__filter_pump(&f, buf, sizeof(buf), NULL, sink_feed,
                                      &k),
                   42);
  assert_int_equal(k.n, 4);
  /* close_notify after data: the data, then EOF. */
  k.stop = 0;
  k.n = 0;
  assert_int_equal(SSL_write(p.s.ssl, "bye", 3), 3);
  assert_true(SSL_shutdown(p.s.ssl) >= 0);
  to_client(&p.s, p.t, SIZE_MAX);
  assert_int_equal(conch__filter_pump(&f, buf, sizeof(buf), NULL, sink_feed,
                                      &k),
                   CONCH_ERR_EOF);
  assert_int_equal(k.n, 3);
  assert_memory_equal(k.got, "bye", 3);
  pair_close(&p); /* frees p.t, which |f| only borrowed */
}

static void test_shutdown_first(void **state) {
  uint8_t buf[16];
  size_t n;
  pair p;
  (void)state;

  open_ok(&p);
  assert_int_equal(conch__tls_write(p.t, (const uint8_t *)"last", 4), 0);
  assert_int_equal(conch__tls_shutdown(p.t), 0);
  to_server(p.t, &p.s);
  assert_int_equal(server_drain(&p.s, buf, sizeof(buf)), 4);
  assert_int_equal(SSL_read_ex(p.s.ssl, buf, sizeof(buf), &n), 0);
  assert_int_equal(SSL_get_error(p.s.ssl, 0), SSL_ERROR_ZERO_RETURN);
  ERR_clear_error();
  /* Reading still works after our close_notify: the server's answer. */
  assert_true(SSL_shutdown(p.s.ssl) >= 0);
  to_client(&p.s, p.t, SIZE_MAX);
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), CONCH_ERR_EOF);
  pair_close(&p);
}

static void test_corrupt_record(void **state) {
  uint8_t rec[256], buf[64];
  const uint8_t *out;
  int n;
  pair p;
  (void)state;

  open_ok(&p);
  to_client(&p.s, p.t, SIZE_MAX); /* session tickets, if any */
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), CONCH_ERR_AGAIN);
  assert_int_equal(SSL_write(p.s.ssl, "hello", 5), 5);
  n = BIO_read(p.s.wbio, rec, sizeof(rec));
  assert_true(n > 5 + 5);
  rec[n - 1] ^= 0x01; /* inside the AEAD tag */
  assert_int_equal(conch__tls_feed(p.t, rec, (size_t)n), 0);
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), CONCH_ERR_TLS);
  if (strstr(conch__tls_error(p.t), "read failed: ") == NULL ||
      strstr(conch__tls_error(p.t), "bad record mac") == NULL) {
    fail_msg("message: %s", conch__tls_error(p.t));
  }
  /* The alert telling the server, ready to send. */
  assert_true(conch__tls_pending(p.t, &out) > 0);
  assert_int_equal(conch__tls_read(p.t, buf, sizeof(buf)), CONCH_ERR_TLS);
  assert_int_equal(conch__tls_write(p.t, buf, 1), CONCH_ERR_TLS);
  assert_int_equal(conch__tls_shutdown(p.t), CONCH_ERR_TLS);
  assert_int_equal(ERR_peek_error(), 0);
  pair_close(&p);
}

static void test_versions_and_ciphers(void **state) {
  X509 *c = leaf("DNS:localhost");
  server_opts o = {c, {NULL}, ALPN_H2, 0, TLS1_2_VERSION, NULL};
  pair p;
  (void)state;

  pair_open(&p, ca_ctx(), &o, "localhost");
  assert_int_equal(p.rv, 0);
  assert_int_equal(SSL_version(p.s.ssl), TLS1_2_VERSION);
  assert_true(SSL_CIPHER_is_aead(SSL_get_current_cipher(p.s.ssl)));
  assert_true(strncmp(SSL_get_cipher_name(p.s.ssl), "ECDHE-", 6) == 0);
  pair_close(&p);

  /* TLS 1.2 with only CBC suites on offer: nothing in common. */
  o.ciphers = "ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES128-SHA";
  pair_open(&p, ca_ctx(), &o, "localhost");
  assert_int_equal(p.rv, CONCH_ERR_TLS);
  assert_non_null(strstr(conch__tls_error(p.t), "handshake failed: "));
  assert_non_null(strstr(conch__tls_error(p.t), "handshake failure"));
  pair_close(&p);

  o.ciphers = NULL;
  o.max_version = TLS1_1_VERSION;
  pair_open(&p, ca_ctx(), &o, "localhost");
  assert_int_equal(p.rv, CONCH_ERR_TLS);
  assert_non_null(strstr(conch__tls_error(p.t), "handshake failed: "));
  assert_non_null(strstr(conch__tls_error(p.t), "protocol version"));
  pair_close(&p);
  X509_free(c);
}

/* What comes back instead of a ServerHello. */
static void bad_answer(const void *bytes, size_t n, const char *want) {
  conch_tls_ctx *ctx = ca_ctx();
  conch_tls *t = NULL;
  const uint8_t *out;

  assert_int_equal(conch__tls_new(&t, ctx, "localhost"), 0);
  assert_int_equal(conch__tls_handshake(t), CONCH_ERR_AGAIN);
  assert_true(conch__tls_pending(t, &out) > 0); /* the ClientHello */
  conch__tls_consume(t, SIZE_MAX);
  assert_int_equal(conch__tls_feed(t, bytes, n), 0);
  assert_int_equal(conch__tls_handshake(t), CONCH_ERR_TLS);
  if (strstr(conch__tls_error(t), want) == NULL) {
    fail_msg("message '%s' lacks '%s'", conch__tls_error(t), want);
  }
  assert_int_equal(ERR_peek_error(), 0);
  conch__tls_free(t);
  conch__tls_ctx_free(ctx);
}

static void test_not_a_tls_server(void **state) {
  static const char http[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
  static const uint8_t close_notify[] = {21, 3, 3, 0, 2, 1, 0};
  static const uint8_t fatal[] = {21, 3, 3, 0, 2, 2, 40};
  (void)state;
  bad_answer(http, sizeof(http) - 1,
             "handshake failed: the server did not answer with TLS: wrong "
             "version number");
  bad_answer(close_notify, sizeof(close_notify),
             "handshake failed: the server sent close_notify");
  bad_answer(fatal, sizeof(fatal),
             "handshake failed: sslv3 alert handshake failure");
}

/* Errors already on the thread's queue (another connection's, the
   application's) neither break a handshake nor show up in our message. */
static void test_error_queue_isolation(void **state) {
  X509 *c = leaf("DNS:example.com");
  server_opts o = {c, {NULL}, ALPN_H2, 0, 0, NULL};
  pair p;
  (void)state;

  memset(&p, 0, sizeof(p));
  p.ctx = ca_ctx();
  assert_int_equal(conch__tls_new(&p.t, p.ctx, "localhost"), 0);
  server_start(&p.s, &o);
  ERR_raise_data(ERR_LIB_USER, 1, "stale-marker");
  p.rv = handshake(p.t, &p.s);
  assert_int_equal(p.rv, CONCH_ERR_TLS);
  assert_null(strstr(conch__tls_error(p.t), "stale-marker"));
  assert_int_equal(ERR_peek_error(), 0);
  pair_close(&p);

  X509_free(c);
  c = leaf("DNS:localhost");
  o.cert = c;
  ERR_raise_data(ERR_LIB_USER, 1, "stale-marker");
  pair_open(&p, ca_ctx(), &o, "localhost");
  assert_int_equal(p.rv, 0);
  pair_close(&p);
  X509_free(c);
}

/* The context may be released before its connections. */
static void test_ctx_released_first(void **state) {
  pair p;
  uint8_t buf[8];
  (void)state;

  open_ok(&p);
  conch__tls_ctx_free(p.ctx);
  p.ctx = NULL;
  assert_int_equal(SSL_write(p.s.ssl, "abc", 3), 3);
  to_client(&p.s, p.t, SIZE_MAX);
  assert_int_equal(client_drain(p.t, buf, sizeof(buf), sizeof(buf)), 3);
  pair_close(&p); /* frees the connection, then the context */
}

/* ---- memory ---- */

typedef struct {
  size_t size;
} mhdr;
static size_t live_bytes, peak_bytes;

static void count(size_t add, size_t sub) {
  live_bytes += add;
  live_bytes -= sub;
  if (live_bytes > peak_bytes) {
    peak_bytes = live_bytes;
  }
}
static void *cm_malloc(size_t n, void *ud) {
  mhdr *h = malloc(sizeof(mhdr) + n);
  (void)ud;
  if (h == NULL) {
    return NULL;
  }
  h->size = n;
  count(n, 0);
  return h + 1;
}
static void cm_free(void *p, void *ud) {
  mhdr *h;
  (void)ud;
  if (p != NULL) {
    h = (mhdr *)p - 1;
    count(0, h->size);
    free(h);
  }
}
static void *cm_calloc(size_t a, size_t b, void *ud) {
  void *p = cm_malloc(a * b, ud);
  if (p != NULL) {
    memset(p, 0, a * b);
  }
  return p;
}
static void *cm_realloc(void *p, size_t n, void *ud) {
  mhdr *h;
  size_t old;
  if (p == NULL) {
    return cm_malloc(n, ud);
  }
  h = (mhdr *)p - 1;
  old = h->size;
  h = realloc(h, sizeof(mhdr) + n);
  if (h == NULL) {
    return NULL;
  }
  h->size = n;
  count(n, old);
  return h + 1;
}
static const conch_mem counting = {NULL, cm_malloc, cm_free, cm_calloc,
                                   cm_realloc};

/* Writing and sending much more than fits stays within the largest amount
   pending at once. */
static void test_memory_bounded(void **state) {
  conch_tls_config cfg = {0};
  X509 *c = leaf("DNS:localhost");
  server_opts o = {c, {NULL}, ALPN_H2, 0, 0, NULL};
  static uint8_t chunk[65536], sink[65536];
  conch_tls_ctx *ctx = NULL;
  char err[128];
  pair p;
  int i;
  (void)state;

  cfg.ca_file = ca_path;
  assert_int_equal(conch__tls_ctx_new(&ctx, &counting, &cfg, err, sizeof(err)),
                   0);
  pair_open(&p, ctx, &o, "localhost");
  assert_int_equal(p.rv, 0);
  peak_bytes = live_bytes;
  for (i = 0; i < 200; i++) { /* 12.5 MiB in all */
    assert_int_equal(conch__tls_write(p.t, chunk, sizeof(chunk)), 0);
    to_server(p.t, &p.s);
    while (server_drain(&p.s, sink, sizeof(sink)) > 0) {
    }
    assert_int_equal(SSL_write(p.s.ssl, chunk, sizeof(chunk)), 65536);
    to_client(&p.s, p.t, SIZE_MAX);
    assert_int_equal(client_drain(p.t, sink, sizeof(sink), sizeof(sink)),
                     sizeof(sink));
  }
  /* 64 KiB of plaintext is about 66 KiB of records each way. */
  assert_true(peak_bytes < 400 * 1024);
  pair_close(&p);
  assert_int_equal(live_bytes, 0);
  X509_free(c);
}

/* Every allocation through conch_mem fails once, in turn: each run ends in
   success or CONCH_ERR_NOMEM and frees everything. */
static int oom_run(const conch_mem *mem, X509 *c) {
  conch_tls_config cfg = {0};
  server_opts o = {c, {NULL}, ALPN_H2, 0, 0, NULL};
  conch_tls_ctx *ctx = NULL;
  static uint8_t big[40000];
  uint8_t buf[64];
  conch_tls *t = NULL;
  server s;
  long r;
  int rv;

  cfg.ca_pem = ca_pem_text;
  rv = conch__tls_ctx_new(&ctx, mem, &cfg, NULL, 0);
  if (rv != 0) {
    return rv;
  }
  rv = conch__tls_new(&t, ctx, "localhost");
  conch__tls_ctx_free(ctx);
  if (rv != 0) {
    return rv;
  }
  server_start(&s, &o);
  rv = handshake(t, &s);
  if (rv == 0) {
    rv = conch__tls_write(t, big, sizeof(big));
  }
  if (rv == 0) {
    to_server(t, &s);
    assert_int_equal(SSL_write(s.ssl, "abc", 3), 3);
    assert_true(SSL_shutdown(s.ssl) >= 0);
    to_client(&s, t, SIZE_MAX);
    r = conch__tls_read(t, buf, sizeof(buf));
    rv = s.feed_rv != 0 ? s.feed_rv : r == 3 ? 0 : (int)r;
  }
  if (rv == 0) {
    r = conch__tls_read(t, buf, sizeof(buf));
    rv = r == CONCH_ERR_EOF ? 0 : (int)r;
  }
  if (rv == 0) {
    rv = conch__tls_shutdown(t);
  }
  if (rv == CONCH_ERR_NOMEM && s.feed_rv == 0) {
    /* Failed inside OpenSSL; a refused feed is not a TLS failure. */
    assert_non_null(strstr(conch__tls_error(t), "out of memory"));
  }
  ERR_clear_error();
  conch__tls_free(t);
  server_stop(&s);
  return rv;
}

static void test_oom(void **state) {
  X509 *c = leaf("DNS:localhost");
  size_t n;
  int rv;
  (void)state;

  for (n = 0;; n++) {
    failmem_fail_at(n);
    rv = oom_run(failmem_hooks(), c);
    assert_int_equal(failmem_live_blocks(), 0);
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
  }
  assert_true(n > 4); /* ctx, conn, host, in, out at least */
  X509_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ip_san),
      cmocka_unit_test(test_dns_name),
      cmocka_unit_test(test_hostname_mismatch),
      cmocka_unit_test(test_wildcards),
      cmocka_unit_test(test_untrusted),
      cmocka_unit_test(test_expired),
      cmocka_unit_test(test_insecure),
      cmocka_unit_test(test_alpn),
      cmocka_unit_test(test_client_cert),
      cmocka_unit_test(test_client_cert_missing),
      cmocka_unit_test(test_ctx_errors),
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_data),
      cmocka_unit_test(test_close_notify),
      cmocka_unit_test(test_filter_pump),
      cmocka_unit_test(test_shutdown_first),
      cmocka_unit_test(test_corrupt_record),
      cmocka_unit_test(test_versions_and_ciphers),
      cmocka_unit_test(test_not_a_tls_server),
      cmocka_unit_test(test_error_queue_isolation),
      cmocka_unit_test(test_ctx_released_first),
      cmocka_unit_test(test_memory_bounded),
      cmocka_unit_test(test_oom),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
