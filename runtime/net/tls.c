/* TLS over memory (see tls.h). */
#include "tls.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <conch/export.h>
#include <conch/status.h>

#include "buf.h"
#include "mem_int.h"

/* TLS 1.2 suites: ephemeral key exchange and AEAD only, which also keeps
   HTTP/2's TLS 1.2 cipher deny-list (RFC 9113 9.2.2) out.  TLS 1.3 suites
   are all AEAD and keep OpenSSL's defaults. */
#define TLS12_CIPHERS                                                          \
  "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"                 \
  "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"                 \
  "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"                 \
  "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:"                       \
  "DHE-RSA-CHACHA20-POLY1305"

/* ALPN wire format: length-prefixed names. */
static const unsigned char alpn_h2[] = {2, 'h', '2'};
static const unsigned char alpn_any[] = {2,   'h', '2', 8,   'h', 't',
                                         't', 'p', '/', '1', '.', '1'};
static const unsigned char alpn_h1[] = {8,   'h', 't', 't', 'p',
                                        '/', '1', '.', '1'};

struct conch_tls_ctx {
  const conch_mem *mem;
  SSL_CTX *ssl_ctx;
  /* Our BIO type.  Each BIO points at its method, so the context lives as
     long as any connection: |refs| counts the owner plus each conch_tls. */
  BIO_METHOD *bio_method;
  size_t refs;
  int verify;
  int alpn;   /* CONCH_TLS_ALPN_* */
  int server; /* a server context (conch__tls_server_ctx_new()) */
};

enum { TLS_HANDSHAKE, TLS_OPEN, TLS_FAILED };

struct conch_tls {
  conch_tls_ctx *ctx;
  const conch_mem *mem;
  SSL *ssl;
  conch_buf in;  /* ciphertext fed, not yet taken by OpenSSL */
  conch_buf out; /* ciphertext from OpenSSL, not yet consumed */
  char *host;    /* as checked, for messages */
  int state;
  int fail_rv;     /* the final error, in TLS_FAILED */
  int peer_closed; /* close_notify received */
  int shut;        /* close_notify queued */
  int oom;         /* |out| could not grow inside an OpenSSL call */
  int h2;          /* ALPN selected "h2" */
  int h1;          /* ALPN selected "http/1.1" */
  int first_in;    /* first byte received, or -1 */
  int vdepth;      /* chain depth of the first verify failure, or -1 */
  char vsubject[160];
  /* Server side: the client's verified certificate (conch_mem). */
  char *peer_subject;
  uint8_t *peer_der;
  size_t peer_der_len;
  char err[512];
};

/* Appends to the NUL-terminated |buf|, truncating silently: a clipped
   message is better than none. */
static void CONCH_PRINTF(3, 4)
    msg_append(char *buf, size_t cap, const char *fmt, ...) {
  size_t len;
  va_list ap;

  if (cap == 0) {
    return;
  }
  len = strnlen(buf, cap);
  if (len + 1 >= cap) {
    return;
  }
  va_start(ap, fmt);
  vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
}

/* One OpenSSL error as text: the reason without the "error:0A000086:"
   boilerplate when OpenSSL knows it. */
static const char *error_text(unsigned long e, char *tmp, size_t n) {
  const char *s;

  if (ERR_SYSTEM_ERROR(e)) {
    /* ERR_reason_error_string() does not cover errno values. */
    if (strerror_r((int)ERR_GET_REASON(e), tmp, n) == 0) {
      return tmp;
    }
  } else {
    s = ERR_reason_error_string(e);
    if (s != NULL) {
      return s;
    }
  }
  ERR_error_string_n(e, tmp, n);
  return tmp;
}

/* Moves the thread's OpenSSL errors, oldest (the root cause) first, to the
   end of |buf| as ": a; b (detail)" and leaves the queue empty.  Returns
   CONCH_ERR_NOMEM if one of them was an allocation failure, else 0. */
static int drain_errors(char *buf, size_t cap) {
  unsigned long seen[8];
  size_t nseen = 0, i;
  char tmp[256];
  const char *data;
  unsigned long e;
  int flags, rv = 0;

  for (;;) {
    e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags);
    if (e == 0) {
      break;
    }
    if (!ERR_SYSTEM_ERROR(e) && ERR_GET_REASON(e) == ERR_R_MALLOC_FAILURE) {
      rv = CONCH_ERR_NOMEM;
    }
    for (i = 0; i < nseen && seen[i] != e; i++) {
    }
    if (i < nseen) {
      continue; /* layers often repeat a reason on the way up */
    }
    msg_append(buf, cap, "%s%s", nseen == 0 ? ": " : "; ",
               error_text(e, tmp, sizeof(tmp)));
    if ((flags & ERR_TXT_STRING) != 0 && data != NULL && data[0] != '\0') {
      msg_append(buf, cap, " (%s)", data);
    }
    if (nseen < sizeof(seen) / sizeof(seen[0])) {
      seen[nseen++] = e;
    }
  }
  return rv;
}

/* Fails context creation: formats the message, appends OpenSSL's reasons
   and empties the error queue. */
static int CONCH_PRINTF(4, 5)
    ctx_fail(char *err, size_t errlen, int rv, const char *fmt, ...) {
  va_list ap;

  if (errlen > 0) {
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  if (drain_errors(err, errlen) != 0) {
    rv = CONCH_ERR_NOMEM;
  }
  return rv;
}

/* PEM password callback.  Without one OpenSSL would prompt on the
   terminal; a library must not.  Noting the call lets the message say
   why the key failed to load. */
static int no_password(char *buf, int size, int rwflag, void *u) {
  (void)buf;
  (void)size;
  (void)rwflag;
  if (u != NULL) {
    *(int *)u = 1;
  }
  return -1;
}

/* PEM text with length 0 means NUL-terminated. */
static BIO *pem_bio(const char *pem, size_t len) {
  if (len == 0) {
    len = strlen(pem);
  }
  if (len > INT_MAX) {
    return NULL;
  }
  return BIO_new_mem_buf(pem, (int)len);
}

/* After PEM_read_bio_X509() returned NULL: did it just run out of
   certificates (rather than fail on a broken one)? */
static int pem_at_end(void) {
  unsigned long e = ERR_peek_last_error();

  return ERR_GET_LIB(e) == ERR_LIB_PEM &&
         ERR_GET_REASON(e) == PEM_R_NO_START_LINE;
}

static int load_ca_pem(SSL_CTX *sc, const char *pem, size_t len, char *err,
                       size_t errlen) {
  X509_STORE *store = SSL_CTX_get_cert_store(sc);
  X509 *x;
  BIO *bio;
  int ok, n = 0;

  bio = pem_bio(pem, len);
  if (bio == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "ca_pem: cannot read");
  }
  for (;;) {
    x = PEM_read_bio_X509(bio, NULL, no_password, NULL);
    if (x == NULL) {
      break;
    }
    ok = X509_STORE_add_cert(store, x);
    X509_free(x);
    if (ok != 1) {
      BIO_free(bio);
      return ctx_fail(err, errlen, CONCH_ERR_TLS,
                      "ca_pem: cannot add certificate %d", n + 1);
    }
    n++;
  }
  BIO_free(bio);
  if (n == 0) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "ca_pem: no PEM certificate found");
  }
  if (!pem_at_end()) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "ca_pem: cannot parse certificate %d", n + 1);
  }
  ERR_clear_error(); /* the end-of-input "no start line" */
  return 0;
}

static int load_cas(SSL_CTX *sc, const conch_tls_config *cfg, int verify,
                    char *err, size_t errlen) {
  int rv;

  if (cfg->ca_file != NULL && SSL_CTX_load_verify_file(sc, cfg->ca_file) != 1) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS, "cannot load CA file '%s'",
                    cfg->ca_file);
  }
  if (cfg->ca_pem != NULL) {
    rv = load_ca_pem(sc, cfg->ca_pem, cfg->ca_pem_len, err, errlen);
    if (rv != 0) {
      return rv;
    }
  }
  /* The system store is of no use when nothing is verified. */
  if (cfg->ca_file == NULL && cfg->ca_pem == NULL && verify &&
      SSL_CTX_set_default_verify_paths(sc) != 1) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "cannot load the system CA store");
  }
  return 0;
}

/* Leaf certificate, then any chain certificates, from PEM text. */
static int use_cert_pem(SSL_CTX *sc, const char *pem, size_t len, char *err,
                        size_t errlen) {
  X509 *x;
  BIO *bio;
  int rv = 0;

  bio = pem_bio(pem, len);
  if (bio == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cert_pem: cannot read");
  }
  x = PEM_read_bio_X509_AUX(bio, NULL, no_password, NULL);
  if (x == NULL) {
    rv = ctx_fail(err, errlen, CONCH_ERR_TLS,
                  "cert_pem: no PEM certificate found");
    goto out;
  }
  if (SSL_CTX_use_certificate(sc, x) != 1) {
    X509_free(x);
    rv = ctx_fail(err, errlen, CONCH_ERR_TLS,
                  "cert_pem: cannot use the certificate");
    goto out;
  }
  X509_free(x);
  for (;;) {
    x = PEM_read_bio_X509(bio, NULL, no_password, NULL);
    if (x == NULL) {
      break;
    }
    if (SSL_CTX_add0_chain_cert(sc, x) != 1) {
      X509_free(x);
      rv = ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "cert_pem: cannot add a chain certificate");
      goto out;
    }
  }
  if (!pem_at_end()) {
    rv = ctx_fail(err, errlen, CONCH_ERR_TLS,
                  "cert_pem: cannot parse a chain certificate");
    goto out;
  }
  ERR_clear_error(); /* the end-of-input "no start line" */
out:
  BIO_free(bio);
  return rv;
}

/* Loads the private key from |bio| (consumed) and checks it against the
   certificate already in |sc|, so a mismatch is reported as such. */
static int use_key(SSL_CTX *sc, BIO *bio, const char *what, const char *who,
                   char *err, size_t errlen) {
  EVP_PKEY *pkey;
  int asked = 0, rv = 0;

  pkey = PEM_read_bio_PrivateKey(bio, NULL, no_password, &asked);
  BIO_free(bio);
  if (pkey == NULL && asked) {
    /* The queue would only add "bad password read" and its echoes. */
    ERR_clear_error();
    return ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "%s: the private key is encrypted (not supported)", what);
  }
  if (pkey == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS, "%s: no PEM private key found",
                    what);
  }
  if (X509_check_private_key(SSL_CTX_get0_certificate(sc), pkey) != 1) {
    rv = ctx_fail(err, errlen, CONCH_ERR_TLS,
                  "%s: the %s key does not match the %s certificate", what,
                  who, who);
  } else if (SSL_CTX_use_PrivateKey(sc, pkey) != 1) {
    rv = ctx_fail(err, errlen, CONCH_ERR_TLS, "%s: cannot use the private key",
                  what);
  }
  EVP_PKEY_free(pkey);
  return rv;
}

static int load_key(SSL_CTX *sc, const conch_tls_config *cfg, const char *who,
                    char *err, size_t errlen) {
  char what[300];
  const char *path = NULL;
  BIO *bio;

  if (cfg->key_pem != NULL) {
    bio = pem_bio(cfg->key_pem, cfg->key_pem_len);
    snprintf(what, sizeof(what), "key_pem");
  } else if (cfg->key_file == NULL && cfg->cert_pem != NULL) {
    bio = pem_bio(cfg->cert_pem, cfg->cert_pem_len);
    snprintf(what, sizeof(what), "cert_pem");
  } else {
    path = cfg->key_file != NULL ? cfg->key_file : cfg->cert_file;
    snprintf(what, sizeof(what), "%s key file '%s'", who, path);
    bio = BIO_new_file(path, "r");
  }
  if (bio == NULL) {
    return ctx_fail(err, errlen, path != NULL ? CONCH_ERR_TLS : CONCH_ERR_NOMEM,
                    "cannot open %s", what);
  }
  return use_key(sc, bio, what, who, err, errlen);
}

static int load_cert(SSL_CTX *sc, const conch_tls_config *cfg, const char *who,
                     char *err, size_t errlen) {
  int rv;

  if (cfg->cert_file == NULL && cfg->cert_pem == NULL) {
    if (cfg->key_file != NULL || cfg->key_pem != NULL) {
      return ctx_fail(err, errlen, CONCH_ERR_INVALID,
                      "a %s key was given without a %s certificate", who, who);
    }
    return 0;
  }
  if (cfg->cert_file != NULL && cfg->cert_pem != NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_INVALID,
                    "cert_file and cert_pem are both set");
  }
  if (cfg->key_file != NULL && cfg->key_pem != NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_INVALID,
                    "key_file and key_pem are both set");
  }
  if (cfg->cert_file != NULL) {
    if (SSL_CTX_use_certificate_chain_file(sc, cfg->cert_file) != 1) {
      return ctx_fail(err, errlen, CONCH_ERR_TLS,
                      "cannot load %s certificate file '%s'", who,
                      cfg->cert_file);
    }
  } else {
    rv = use_cert_pem(sc, cfg->cert_pem, cfg->cert_pem_len, err, errlen);
    if (rv != 0) {
      return rv;
    }
  }
  return load_key(sc, cfg, who, err, errlen);
}

/* The BIO between OpenSSL and our two buffers.  Reading takes from |in|,
   writing appends to |out|, so records reach the socket after one copy
   and consuming them costs nothing. */
static int bio_write(BIO *b, const char *data, size_t n, size_t *written) {
  conch_tls *t = BIO_get_data(b);

  BIO_clear_retry_flags(b);
  if (conch__buf_append(&t->out, t->mem, data, n) != 0) {
    /* A plain failure (no retry flag) fails the SSL call; |oom| tells
       tls_fail() what happened. */
    t->oom = 1;
    *written = 0;
    return 0;
  }
  *written = n;
  return 1;
}

static int bio_read(BIO *b, char *data, size_t n, size_t *nread) {
  conch_tls *t = BIO_get_data(b);
  size_t avail = conch__buf_size(&t->in);

  BIO_clear_retry_flags(b);
  *nread = 0;
  if (avail == 0) {
    /* Like a non-blocking socket: OpenSSL reports SSL_ERROR_WANT_READ. */
    BIO_set_retry_read(b);
    return 0;
  }
  if (n > avail) {
    n = avail;
  }
  memcpy(data, conch__buf_head(&t->in), n);
  conch__buf_consume(&t->in, n);
  *nread = n;
  return 1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  conch_tls *t = BIO_get_data(b);
  size_t n;

  (void)num;
  (void)ptr;
  switch (cmd) {
  case BIO_CTRL_FLUSH:
    /* Must succeed or the handshake stalls; the socket write is the
       driver's job. */
    return 1;
  case BIO_CTRL_PENDING:
  case BIO_CTRL_WPENDING:
    n = conch__buf_size(cmd == BIO_CTRL_PENDING ? &t->in : &t->out);
    return n > LONG_MAX ? LONG_MAX : (long)n;
  default:
    /* EOF, kTLS, push/pop, ...: not supported, which is what 0 says. */
    return 0;
  }
}

static int bio_method_setup(conch_tls_ctx *ctx, char *err, size_t errlen);

static int ctx_setup(conch_tls_ctx *ctx, const conch_tls_config *cfg, char *err,
                     size_t errlen) {
  SSL_CTX *sc;
  int rv;

  sc = SSL_CTX_new(TLS_client_method());
  if (sc == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cannot create SSL_CTX");
  }
  ctx->ssl_ctx = sc;
  if (SSL_CTX_set_min_proto_version(sc, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(sc, TLS12_CIPHERS) != 1) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "cannot set TLS versions and ciphers");
  }
  /* Returns 0 on success, unlike its neighbours. */
  if ((ctx->alpn == CONCH_TLS_ALPN_ANY
           ? SSL_CTX_set_alpn_protos(sc, alpn_any, sizeof(alpn_any))
       : ctx->alpn == CONCH_TLS_ALPN_H1
           ? SSL_CTX_set_alpn_protos(sc, alpn_h1, sizeof(alpn_h1))
           : SSL_CTX_set_alpn_protos(sc, alpn_h2, sizeof(alpn_h2))) != 0) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cannot set ALPN");
  }
  /* HTTP/2 forbids renegotiation (RFC 9113 9.2.1). */
  SSL_CTX_set_options(sc, SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_default_passwd_cb(sc, no_password);
  SSL_CTX_set_verify(sc, ctx->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
  rv = load_cas(sc, cfg, ctx->verify, err, errlen);
  if (rv != 0) {
    return rv;
  }
  rv = load_cert(sc, cfg, "client", err, errlen);
  if (rv != 0) {
    return rv;
  }
  return bio_method_setup(ctx, err, errlen);
}

static int bio_method_setup(conch_tls_ctx *ctx, char *err, size_t errlen) {
  BIO_METHOD *m;

  /* A fixed type rather than BIO_get_new_index(), which would draw from a
     small process-wide counter on every context. */
  m = BIO_meth_new(BIO_TYPE_SOURCE_SINK, "conch");
  if (m == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cannot create BIO method");
  }
  ctx->bio_method = m;
  if (BIO_meth_set_write_ex(m, bio_write) != 1 ||
      BIO_meth_set_read_ex(m, bio_read) != 1 ||
      BIO_meth_set_ctrl(m, bio_ctrl) != 1) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cannot set BIO method");
  }
  return 0;
}

static void ctx_destroy(conch_tls_ctx *ctx) {
  SSL_CTX_free(ctx->ssl_ctx);
  BIO_meth_free(ctx->bio_method);
  conch__free(ctx->mem, ctx);
}

int conch__tls_ctx_new(conch_tls_ctx **out, const conch_mem *mem,
                       const conch_tls_config *cfg, char *err, size_t errlen) {
  static const conch_tls_config defaults;
  conch_tls_ctx *ctx;
  int rv;

  if (errlen > 0) {
    err[0] = '\0';
  }
  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (mem == NULL) {
    mem = conch_mem_default();
  }
  if (cfg == NULL) {
    cfg = &defaults;
  }
  ctx = conch__calloc(mem, 1, sizeof(*ctx));
  if (ctx == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "out of memory");
  }
  ctx->mem = mem;
  ctx->refs = 1;
  ctx->verify = !cfg->insecure_skip_verify;
  ctx->alpn = cfg->alpn;
  ERR_clear_error();
  rv = ctx_setup(ctx, cfg, err, errlen);
  ERR_clear_error();
  if (rv != 0) {
    ctx_destroy(ctx);
    return rv;
  }
  *out = ctx;
  return 0;
}

void conch__tls_ctx_free(conch_tls_ctx *ctx) {
  if (ctx == NULL) {
    return;
  }
  if (--ctx->refs == 0) {
    ctx_destroy(ctx);
  }
}

/* Records which certificate failed first, for the message; the outcome is
   OpenSSL's. */
static int verify_cb(int ok, X509_STORE_CTX *xs) {
  SSL *ssl;
  conch_tls *t;
  X509 *cert;

  if (ok) {
    return ok;
  }
  ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
  t = ssl == NULL ? NULL : SSL_get_app_data(ssl);
  if (t == NULL || t->vdepth >= 0) {
    return ok;
  }
  t->vdepth = X509_STORE_CTX_get_error_depth(xs);
  cert = X509_STORE_CTX_get_current_cert(xs);
  if (cert != NULL) {
    X509_NAME_oneline(X509_get_subject_name(cert), t->vsubject,
                      (int)sizeof(t->vsubject));
  }
  return ok;
}

/* Splits |host| into the name to check and whether it is an IP literal.
   Returns 0 or CONCH_ERR_INVALID. */
static int parse_host(const char *host, size_t *off, size_t *len, int *is_ip) {
  unsigned char addr[16];
  char tmp[INET6_ADDRSTRLEN + 1];
  size_t n = strlen(host);

  *off = 0;
  *is_ip = 0;
  if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
    /* A URL authority's bracketed IPv6 literal. */
    if (n - 2 >= sizeof(tmp)) {
      return CONCH_ERR_INVALID;
    }
    memcpy(tmp, host + 1, n - 2);
    tmp[n - 2] = '\0';
    if (inet_pton(AF_INET6, tmp, addr) != 1) {
      return CONCH_ERR_INVALID;
    }
    *off = 1;
    *len = n - 2;
    *is_ip = 1;
    return 0;
  }
  if (inet_pton(AF_INET, host, addr) == 1 ||
      inet_pton(AF_INET6, host, addr) == 1) {
    *len = n;
    *is_ip = 1;
    return 0;
  }
  /* SNI carries no trailing dot (RFC 6066 3), and certificates name hosts
     without one. */
  if (n > 0 && host[n - 1] == '.') {
    n--;
  }
  if (n == 0 || n > 255) {
    return CONCH_ERR_INVALID;
  }
  *len = n;
  return 0;
}

static int tls_setup(conch_tls *t, int is_ip) {
  conch_tls_ctx *ctx = t->ctx;
  X509_VERIFY_PARAM *vp;
  BIO *bio;

  t->ssl = SSL_new(ctx->ssl_ctx);
  if (t->ssl == NULL) {
    return CONCH_ERR_NOMEM;
  }
  bio = BIO_new(ctx->bio_method);
  if (bio == NULL) {
    return CONCH_ERR_NOMEM;
  }
  BIO_set_data(bio, t);
  BIO_set_init(bio, 1);
  SSL_set_bio(t->ssl, bio, bio); /* one BIO both ways; the SSL owns it */
  if (SSL_set_app_data(t->ssl, t) != 1) {
    return CONCH_ERR_NOMEM;
  }
  SSL_set_connect_state(t->ssl);
  /* No IP literals in SNI (RFC 6066 3). */
  if (!is_ip && SSL_set_tlsext_host_name(t->ssl, t->host) != 1) {
    return CONCH_ERR_NOMEM;
  }
  if (!ctx->verify) {
    return 0;
  }
  vp = SSL_get0_param(t->ssl);
  if (is_ip) {
    if (X509_VERIFY_PARAM_set1_ip_asc(vp, t->host) != 1) {
      return CONCH_ERR_NOMEM;
    }
  } else {
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_host(vp, t->host, 0) != 1) {
      return CONCH_ERR_NOMEM;
    }
  }
  SSL_set_verify(t->ssl, SSL_VERIFY_PEER, verify_cb);
  return 0;
}

/* A connection of |ctx| in its handshake, holding a reference to |ctx|
   that conch__tls_free() drops; NULL when out of memory. */
static conch_tls *tls_new(conch_tls_ctx *ctx) {
  conch_tls *t = conch__calloc(ctx->mem, 1, sizeof(*t));
  if (t == NULL) {
    return NULL;
  }
  t->ctx = ctx;
  t->mem = ctx->mem;
  t->state = TLS_HANDSHAKE;
  t->first_in = -1;
  t->vdepth = -1;
  ctx->refs++;
  return t;
}

/* The end of conch__tls_new() and conch__tls_accept_new(): |t| to |*out|
   when its set-up returned |rv| 0, else freed. */
static int tls_done(conch_tls *t, int rv, conch_tls **out) {
  ERR_clear_error();
  if (rv != 0) {
    conch__tls_free(t);
    return rv;
  }
  *out = t;
  return 0;
}

int conch__tls_new(conch_tls **out, conch_tls_ctx *ctx, const char *host) {
  conch_tls *t;
  size_t off, len;
  int is_ip, rv;

  if (out == NULL || ctx == NULL || host == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = parse_host(host, &off, &len, &is_ip);
  if (rv != 0) {
    return rv;
  }
  t = tls_new(ctx);
  if (t == NULL) {
    return CONCH_ERR_NOMEM;
  }
  t->host = conch__strndup(t->mem, host + off, len);
  if (t->host == NULL) {
    conch__tls_free(t);
    return CONCH_ERR_NOMEM;
  }
  ERR_clear_error();
  return tls_done(t, tls_setup(t, is_ip), out);
}

void conch__tls_free(conch_tls *t) {
  if (t == NULL) {
    return;
  }
  /* Frees the BIO too, which points into |t| and at ctx's method. */
  SSL_free(t->ssl);
  conch__buf_free(&t->in, t->mem);
  conch__buf_free(&t->out, t->mem);
  conch__free(t->mem, t->host);
  conch__free(t->mem, t->peer_subject);
  conch__free(t->mem, t->peer_der);
  conch__tls_ctx_free(t->ctx);
  conch__free(t->mem, t);
}

/* Makes the failure final and writes its message. */
static int tls_fail(conch_tls *t, const char *what) {
  long vr = X509_V_OK;
  int rv = CONCH_ERR_TLS;

  t->err[0] = '\0';
  if (t->ctx->verify) {
    vr = SSL_get_verify_result(t->ssl);
  }
  if (t->oom) {
    msg_append(t->err, sizeof(t->err), "%s: out of memory", what);
    rv = CONCH_ERR_NOMEM;
    ERR_clear_error();
  } else if (vr != X509_V_OK) {
    msg_append(t->err, sizeof(t->err), "certificate verify failed: %s",
               X509_verify_cert_error_string(vr));
    if ((vr == X509_V_ERR_HOSTNAME_MISMATCH ||
         vr == X509_V_ERR_IP_ADDRESS_MISMATCH) &&
        t->host != NULL) {
      msg_append(t->err, sizeof(t->err), " (expected '%s')", t->host);
    } else if (t->vdepth >= 0) {
      msg_append(t->err, sizeof(t->err), " (depth %d, subject '%s')", t->vdepth,
                 t->vsubject);
    }
    /* The queue only repeats "certificate verify failed". */
    ERR_clear_error();
  } else {
    msg_append(t->err, sizeof(t->err), "%s", what);
    if (ERR_peek_error() == 0) {
      /* A fatal SSL_ERROR_SYSCALL without an errno: our BIO never ends,
         so this is unexpected. */
      msg_append(t->err, sizeof(t->err), ": no reason given");
    }
    rv = drain_errors(t->err, sizeof(t->err));
    if (rv == 0) {
      rv = CONCH_ERR_TLS;
    }
  }
  t->state = TLS_FAILED;
  t->fail_rv = rv;
  return rv;
}

int conch__tls_feed(conch_tls *t, const uint8_t *in, size_t n) {
  int rv;

  if (t->state == TLS_FAILED) {
    return t->fail_rv;
  }
  rv = conch__buf_append(&t->in, t->mem, in, n);
  if (rv == 0 && n > 0 && t->first_in < 0) {
    t->first_in = in[0];
  }
  return rv;
}

/* A failure OpenSSL did not report: |msg| is the whole story. */
static int fail_with(conch_tls *t, const char *msg) {
  ERR_clear_error();
  snprintf(t->err, sizeof(t->err), "%s", msg);
  t->state = TLS_FAILED;
  t->fail_rv = CONCH_ERR_TLS;
  return CONCH_ERR_TLS;
}

/* Names the protocol chosen instead, non-printables as '?'. */
static int alpn_fail(conch_tls *t, const unsigned char *p, unsigned int n) {
  char name[64], msg[128];
  unsigned int i;

  if (n == 0) {
    return fail_with(t, "server did not select ALPN h2 (no ALPN)");
  }
  if (n >= sizeof(name)) {
    n = sizeof(name) - 1;
  }
  for (i = 0; i < n; i++) {
    name[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
  }
  name[n] = '\0';
  snprintf(msg, sizeof(msg), "server did not select ALPN h2 (selected '%s')",
           name);
  return fail_with(t, msg);
}

/* A server's copy of the client certificate OpenSSL verified, so that the
   call handlers can read it without OpenSSL.  Returns 0 or
   CONCH_ERR_NOMEM (final). */
static int keep_peer_cert(conch_tls *t) {
  X509 *x = SSL_get0_peer_certificate(t->ssl);
  BIO *b;
  char *text = NULL;
  long n;
  int len;
  unsigned char *p;

  if (x == NULL) {
    return 0;
  }
  len = i2d_X509(x, NULL);
  b = BIO_new(BIO_s_mem());
  if (len <= 0 || b == NULL ||
      X509_NAME_print_ex(b, X509_get_subject_name(x), 0, XN_FLAG_RFC2253) < 0) {
    BIO_free(b);
    t->oom = 1;
    return tls_fail(t, "handshake failed");
  }
  n = BIO_get_mem_data(b, &text);
  t->peer_subject = conch__strndup(t->mem, n > 0 ? text : "",
                                   n > 0 ? (size_t)n : 0);
  BIO_free(b);
  t->peer_der = conch__malloc(t->mem, (size_t)len);
  p = t->peer_der;
  if (t->peer_subject == NULL || p == NULL || i2d_X509(x, &p) != len) {
    t->oom = 1;
    return tls_fail(t, "handshake failed");
  }
  t->peer_der_len = (size_t)len;
  return 0;
}

int conch__tls_handshake(conch_tls *t) {
  const unsigned char *proto;
  unsigned int n;
  int r;

  if (t->state == TLS_OPEN) {
    return 0;
  }
  if (t->state == TLS_FAILED) {
    return t->fail_rv;
  }
  /* SSL_get_error() reads the queue: it must hold only this call's. */
  ERR_clear_error();
  r = SSL_do_handshake(t->ssl);
  if (r != 1) {
    switch (SSL_get_error(t->ssl, r)) {
    case SSL_ERROR_WANT_READ:
      return CONCH_ERR_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
      return fail_with(t, t->ctx->server
                              ? "handshake failed: the client sent "
                                "close_notify"
                              : "handshake failed: the server sent "
                                "close_notify");
    default:
      /* A TLS server answers with a handshake or alert record; anything
         else (often "HTTP/1.1 400") gets "wrong version number" from
         OpenSSL, which does not tell the user what happened. */
      if (t->first_in >= 0 && t->first_in != 0x16 && t->first_in != 0x15) {
        return tls_fail(t, t->ctx->server
                               ? "handshake failed: the client did not "
                                 "speak TLS"
                               : "handshake failed: the server did not "
                                 "answer with TLS");
      }
      return tls_fail(t, "handshake failed");
    }
  }
  SSL_get0_alpn_selected(t->ssl, &proto, &n);
  t->h2 = n == 2 && memcmp(proto, "h2", 2) == 0;
  t->h1 = n == 8 && memcmp(proto, "http/1.1", 8) == 0;
  if (t->ctx->server) {
    /* The selection callback decided ALPN. */
    r = keep_peer_cert(t);
    if (r != 0) {
      return r;
    }
    t->state = TLS_OPEN;
    return 0;
  }
  if (t->ctx->alpn == CONCH_TLS_ALPN_H2 && !t->h2) {
    return alpn_fail(t, proto, n);
  }
  if (t->ctx->alpn != CONCH_TLS_ALPN_H2 && !t->h2 && n != 0 &&
      (n != 8 || memcmp(proto, "http/1.1", 8) != 0)) {
    return alpn_fail(t, proto, n);
  }
  if (t->ctx->alpn == CONCH_TLS_ALPN_H1 && t->h2) {
    return alpn_fail(t, proto, n);
  }
  t->state = TLS_OPEN;
  return 0;
}

long conch__tls_read(conch_tls *t, uint8_t *out, size_t cap) {
  size_t n = 0;
  int r;

  if (t->state == TLS_FAILED) {
    return t->fail_rv;
  }
  if (t->state != TLS_OPEN) {
    return CONCH_ERR_STATE;
  }
  if (cap == 0) {
    return CONCH_ERR_INVALID;
  }
  if (t->peer_closed) {
    return CONCH_ERR_EOF;
  }
  if (cap > LONG_MAX) {
    cap = LONG_MAX;
  }
  ERR_clear_error();
  r = SSL_read_ex(t->ssl, out, cap, &n);
  if (r == 1) {
    return (long)n;
  }
  switch (SSL_get_error(t->ssl, r)) {
  case SSL_ERROR_WANT_READ:
    return CONCH_ERR_AGAIN;
  case SSL_ERROR_ZERO_RETURN:
    t->peer_closed = 1;
    return CONCH_ERR_EOF;
  default:
    return tls_fail(t, "read failed");
  }
}

int conch__tls_write(conch_tls *t, const uint8_t *in, size_t n) {
  size_t written = 0;

  if (t->state == TLS_FAILED) {
    return t->fail_rv;
  }
  if (t->state != TLS_OPEN || t->shut) {
    return CONCH_ERR_STATE;
  }
  if (n == 0) {
    return 0;
  }
  ERR_clear_error();
  /* Our BIO takes everything, so this either queues all of |in| or
     fails. */
  if (SSL_write_ex(t->ssl, in, n, &written) == 1 && written == n) {
    return 0;
  }
  return tls_fail(t, "write failed");
}

int conch__tls_shutdown(conch_tls *t) {
  if (t->state == TLS_FAILED) {
    return t->fail_rv;
  }
  if (t->state != TLS_OPEN) {
    return CONCH_ERR_STATE;
  }
  if (t->shut) {
    return 0;
  }
  ERR_clear_error();
  /* 0 means "sent, the peer's has not arrived", which is all we want. */
  if (SSL_shutdown(t->ssl) < 0) {
    return tls_fail(t, "shutdown failed");
  }
  t->shut = 1;
  return 0;
}

size_t conch__tls_pending(conch_tls *t, const uint8_t **p) {
  size_t n = conch__buf_size(&t->out);

  *p = n > 0 ? conch__buf_head(&t->out) : NULL;
  return n;
}

void conch__tls_consume(conch_tls *t, size_t n) {
  size_t have = conch__buf_size(&t->out);

  conch__buf_consume(&t->out, n < have ? n : have);
}

const char *conch__tls_error(const conch_tls *t) { return t->err; }

int conch__tls_is_h2(const conch_tls *t) { return t != NULL && t->h2; }

int conch__tls_alpn(const conch_tls *t) {
  if (t == NULL) {
    return CONCH_TLS_PROTO_NONE;
  }
  return t->h2 ? CONCH_TLS_PROTO_H2
         : t->h1 ? CONCH_TLS_PROTO_H1
                 : CONCH_TLS_PROTO_NONE;
}

/* ---- The server side ------------------------------------------------------ */

/* Finds |want| in the client's ALPN list. */
static int alpn_find(const unsigned char *in, unsigned int inlen,
                     const unsigned char *want, const unsigned char **out,
                     unsigned char *outlen) {
  unsigned int i = 0;

  while (i < inlen) {
    unsigned int n = in[i];
    if (n == 0 || i + 1 + n > inlen) {
      break;
    }
    if (n == want[0] && memcmp(in + i + 1, want + 1, n) == 0) {
      *out = in + i + 1;
      *outlen = (unsigned char)n;
      return 1;
    }
    i += 1 + n;
  }
  return 0;
}

/* "h2" first, then "http/1.1" when the context serves it.  A client that
   offers neither gets the no_application_protocol alert (as Go and Node
   servers send); one that offers no ALPN at all never gets here. */
static int alpn_select(SSL *ssl, const unsigned char **out,
                       unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg) {
  const conch_tls_ctx *ctx = arg;

  (void)ssl;
  if (alpn_find(in, inlen, alpn_h2, out, outlen) ||
      (ctx->alpn != CONCH_TLS_ALPN_H2 &&
       alpn_find(in, inlen, alpn_h1, out, outlen))) {
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* Client certificates: the CAs of |cfg| (no system store) verify them and
   are named in the CertificateRequest; a missing certificate fails the
   handshake when required (OpenSSL sends certificate_required under TLS
   1.3, handshake_failure under 1.2), one that does not verify fails it
   with OpenSSL's alert for the reason (unknown_ca, bad_certificate,
   certificate_expired, ...). */
static int client_auth_setup(conch_tls_ctx *ctx, SSL_CTX *sc,
                             const conch_tls_config *cfg, char *err,
                             size_t errlen) {
  static const unsigned char sid_ctx[] = "conch server";
  STACK_OF(X509_OBJECT) *objs;
  int i, rv, mode = SSL_VERIFY_PEER;

  if (cfg->ca_file == NULL && cfg->ca_pem == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_INVALID,
                    "client certificates need a CA to verify them");
  }
  rv = load_cas(sc, cfg, 0, err, errlen);
  if (rv != 0) {
    return rv;
  }
  objs = X509_STORE_get0_objects(SSL_CTX_get_cert_store(sc));
  for (i = 0; i < sk_X509_OBJECT_num(objs); i++) {
    X509 *x = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));
    if (x != NULL && SSL_CTX_add_client_CA(sc, x) != 1) {
      return ctx_fail(err, errlen, CONCH_ERR_NOMEM,
                      "cannot list the client CAs");
    }
  }
  /* Sessions resumed under client verification need a context. */
  if (SSL_CTX_set_session_id_context(sc, sid_ctx, sizeof(sid_ctx) - 1) != 1) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM,
                    "cannot set the session id context");
  }
  if (cfg->client_auth == CONCH_TLS_CLIENT_REQUIRED) {
    mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  }
  SSL_CTX_set_verify(sc, mode, verify_cb);
  ctx->verify = 1; /* tls_fail() reports the verify result */
  return 0;
}

static int server_ctx_setup(conch_tls_ctx *ctx, const conch_tls_config *cfg,
                            char *err, size_t errlen) {
  SSL_CTX *sc;
  int rv;

  if (cfg->cert_file == NULL && cfg->cert_pem == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_INVALID,
                    "a TLS server needs a certificate");
  }
  sc = SSL_CTX_new(TLS_server_method());
  if (sc == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cannot create SSL_CTX");
  }
  ctx->ssl_ctx = sc;
  if (SSL_CTX_set_min_proto_version(sc, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(sc, TLS12_CIPHERS) != 1) {
    return ctx_fail(err, errlen, CONCH_ERR_TLS,
                    "cannot set TLS versions and ciphers");
  }
  SSL_CTX_set_options(sc, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                              SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_default_passwd_cb(sc, no_password);
  SSL_CTX_set_verify(sc, SSL_VERIFY_NONE, NULL);
  rv = load_cert(sc, cfg, "server", err, errlen);
  if (rv == 0 && cfg->client_auth != CONCH_TLS_CLIENT_NONE) {
    rv = client_auth_setup(ctx, sc, cfg, err, errlen);
  }
  if (rv != 0) {
    return rv;
  }
  SSL_CTX_set_alpn_select_cb(sc, alpn_select, ctx);
  return bio_method_setup(ctx, err, errlen);
}

int conch__tls_server_ctx_new(conch_tls_ctx **out, const conch_mem *mem,
                              const conch_tls_config *cfg, char *err,
                              size_t errlen) {
  conch_tls_ctx *ctx;
  int rv;

  if (errlen > 0) {
    err[0] = '\0';
  }
  if (out == NULL || cfg == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (mem == NULL) {
    mem = conch_mem_default();
  }
  ctx = conch__calloc(mem, 1, sizeof(*ctx));
  if (ctx == NULL) {
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "out of memory");
  }
  ctx->mem = mem;
  ctx->refs = 1;
  ctx->server = 1;
  ctx->alpn = cfg->alpn;
  ERR_clear_error();
  rv = server_ctx_setup(ctx, cfg, err, errlen);
  ERR_clear_error();
  if (rv != 0) {
    ctx_destroy(ctx);
    return rv;
  }
  *out = ctx;
  return 0;
}

int conch__tls_accept_new(conch_tls **out, conch_tls_ctx *ctx) {
  conch_tls *t;
  BIO *bio;
  int rv = CONCH_ERR_NOMEM;

  if (out == NULL || ctx == NULL || !ctx->server) {
    return CONCH_ERR_INVALID;
  }
  t = tls_new(ctx);
  if (t == NULL) {
    return CONCH_ERR_NOMEM;
  }
  ERR_clear_error();
  t->ssl = SSL_new(ctx->ssl_ctx);
  if (t->ssl != NULL && (bio = BIO_new(ctx->bio_method)) != NULL) {
    BIO_set_data(bio, t);
    BIO_set_init(bio, 1);
    SSL_set_bio(t->ssl, bio, bio);
    if (SSL_set_app_data(t->ssl, t) == 1) {
      SSL_set_accept_state(t->ssl);
      rv = 0;
    }
  }
  return tls_done(t, rv, out);
}

size_t conch__tls_buffered(const conch_tls *t) {
  int pending = SSL_pending(t->ssl); /* decrypted, not yet read */
  return conch__buf_size(&t->in) + (pending > 0 ? (size_t)pending : 0);
}

int conch__tls_ca_check(const char *file, const char *pem, size_t len,
                        char *err, size_t errlen) {
  conch_tls_config cfg;
  SSL_CTX *sc;
  int rv;

  if (errlen > 0) {
    err[0] = '\0';
  }
  memset(&cfg, 0, sizeof(cfg));
  cfg.ca_file = file;
  cfg.ca_pem = pem;
  cfg.ca_pem_len = len;
  ERR_clear_error();
  sc = SSL_CTX_new(TLS_server_method());
  if (sc == NULL) {
    ERR_clear_error();
    return ctx_fail(err, errlen, CONCH_ERR_NOMEM, "cannot create SSL_CTX");
  }
  rv = load_cas(sc, &cfg, 0, err, errlen);
  SSL_CTX_free(sc);
  ERR_clear_error();
  return rv;
}

const char *conch__tls_peer_subject(const conch_tls *t) {
  return t != NULL ? t->peer_subject : NULL;
}

const uint8_t *conch__tls_peer_der(const conch_tls *t, size_t *len) {
  *len = t != NULL ? t->peer_der_len : 0;
  return t != NULL ? t->peer_der : NULL;
}

/* ---- The TLS material of options (tls.h) ----------------------------------
 */

int conch__tls_material_set(const conch_mem *mem, char **slot, size_t *lenp,
                            const char *p, size_t n) {
  char *copy = NULL;

  if (p != NULL) {
    copy = conch__strndup(mem, p, n);
    if (copy == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  conch__free(mem, *slot);
  *slot = copy;
  if (lenp != NULL) {
    *lenp = p != NULL ? n : 0;
  }
  return 0;
}

void conch__tls_material_clear(conch_tls_material *m, const conch_mem *mem) {
  char *strings[] = {m->ca_file,  m->ca_pem,   m->cert_file,
                     m->key_file, m->cert_pem, m->key_pem};

  for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
    conch__free(mem, strings[i]);
  }
  memset(m, 0, sizeof(*m));
}

int conch__tls_material_copy(conch_tls_material *dst,
                             const conch_tls_material *src,
                             const conch_mem *mem) {
  int rv = 0;

  memset(dst, 0, sizeof(*dst));
  rv |=
      conch__tls_material_set(mem, &dst->ca_file, NULL, src->ca_file,
                              src->ca_file != NULL ? strlen(src->ca_file) : 0);
  rv |= conch__tls_material_set(mem, &dst->ca_pem, &dst->ca_pem_len,
                                src->ca_pem, src->ca_pem_len);
  rv |= conch__tls_material_set(mem, &dst->cert_file, NULL, src->cert_file,
                                src->cert_file != NULL ? strlen(src->cert_file)
                                                       : 0);
  rv |= conch__tls_material_set(mem, &dst->key_file, NULL, src->key_file,
                                src->key_file != NULL ? strlen(src->key_file)
                                                      : 0);
  rv |= conch__tls_material_set(mem, &dst->cert_pem, &dst->cert_pem_len,
                                src->cert_pem, src->cert_pem_len);
  rv |= conch__tls_material_set(mem, &dst->key_pem, &dst->key_pem_len,
                                src->key_pem, src->key_pem_len);
  if (rv != 0) {
    conch__tls_material_clear(dst, mem);
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

void conch__tls_material_config(const conch_tls_material *m,
                                conch_tls_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->ca_file = m->ca_file;
  cfg->ca_pem = m->ca_pem;
  cfg->ca_pem_len = m->ca_pem_len;
  cfg->cert_file = m->cert_file;
  cfg->key_file = m->key_file;
  cfg->cert_pem = m->cert_pem;
  cfg->cert_pem_len = m->cert_pem_len;
  cfg->key_pem = m->key_pem;
  cfg->key_pem_len = m->key_pem_len;
}
