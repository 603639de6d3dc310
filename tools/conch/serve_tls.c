/* The server's TLS context: certificate and key from PEM files, TLS 1.2 or
   newer with forward-secret AEAD suites only (see TLS12_CIPHERS), ALPN
   "h2" preferred, else "http/1.1" (a client that offers
   neither gets the no_application_protocol alert, as Go and Node servers
   do; one that offers no ALPN at all is served as cleartext is: HTTP/2
   with prior knowledge, else HTTP/1.1). */
#include "serve_tls.h"

#include <stdio.h>
#include <string.h>

#include <openssl/err.h>

/* TLS 1.2: ECDHE key exchange and AEAD ciphers only.  No CBC (Lucky13 and
   its kin), no static RSA key exchange (no forward secrecy), no DHE (slow,
   small groups).  These are also exactly what RFC 9113 9.2.2 lets HTTP/2
   use, so no suite we pick can be one an h2 client must refuse
   (INADEQUATE_SECURITY).  TLS 1.3 suites are all AEAD; OpenSSL's defaults
   stay. */
#define TLS12_CIPHERS                                                          \
  "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                 \
  "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                 \
  "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* Finds |want| in the client's ALPN list. */
static int alpn_find(const unsigned char *in, unsigned int inlen,
                     const char *want, const unsigned char **out,
                     unsigned char *outlen) {
  size_t wlen = strlen(want);
  unsigned int i = 0;

  while (i < inlen) {
    unsigned int n = in[i];

    if (i + 1 + n > inlen) {
      break;
    }
    if (n == wlen && memcmp(in + i + 1, want, n) == 0) {
      *out = in + i + 1;
      *outlen = (unsigned char)n;
      return 1;
    }
    i += 1 + n;
  }
  return 0;
}

static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  (void)ssl;
  (void)arg;
  if (alpn_find(in, inlen, "h2", out, outlen) ||
      alpn_find(in, inlen, "http/1.1", out, outlen)) {
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static void print_errors(const char *what, const char *path) {
  unsigned long e = ERR_get_error();
  char buf[256];

  if (e == 0) {
    fprintf(stderr, "conch serve: %s %s failed\n", what, path);
    return;
  }
  ERR_error_string_n(e, buf, sizeof(buf));
  fprintf(stderr, "conch serve: %s %s: %s\n", what, path, buf);
  ERR_clear_error();
}

SSL_CTX *srv_tls_new(const char *cert, const char *key) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

  if (ctx == NULL) {
    print_errors("TLS setup", "");
    return NULL;
  }
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    print_errors("TLS setup", "");
    goto fail;
  }
  if (SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS) != 1) {
    print_errors("TLS setup", "");
    goto fail;
  }
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
    print_errors("reading certificate", cert);
    goto fail;
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
    print_errors("reading key", key);
    goto fail;
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    print_errors("checking key against certificate", key);
    goto fail;
  }
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
  return ctx;

fail:
  SSL_CTX_free(ctx);
  return NULL;
}
