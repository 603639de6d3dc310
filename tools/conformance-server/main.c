/* conformance-server: conch's server core under test of the Connect
   conformance suite (connectrpc/conformance, "server mode").

     conformance-server

   The runner writes one ServerCompatRequest to stdin, preceded by its
   length (4 bytes, big-endian).  This program starts a conch_server on
   127.0.0.1 (a free port) serving connectrpc.conformance.v1.
   ConformanceService (service.c), writes a ServerCompatResponse with the
   host and port to stdout, framed the same way, and serves until SIGTERM
   or SIGINT (then it cancels the calls still running and exits 0), as the
   suite's reference server does: the runner closes our stdin once it has
   written the request, so the end of stdin means nothing.  If the runner
   dies first we get SIGTERM all the same (PR_SET_PDEATHSIG).

   HTTP/2 and HTTP/1.1 are served on the same port (the server core tells
   them apart); with use_tls the server makes a self-signed certificate
   for 127.0.0.1 and localhost (EC P-256, one day), serves TLS with it
   (conch_server_opts_set_tls_pem()) and returns it as pem_cert.  With
   client_tls_cert as well it requires client certificates issued by that
   PEM certificate (conch_server_opts_set_tls_client_ca_pem(); a handshake
   without one, or with one it does not verify, fails).  What the server
   core cannot do is refused at start with a message on stderr and exit
   status 3: HTTP/3.  Bad input (a frame that does not parse,
   client_tls_cert without use_tls, a client_tls_cert that is no PEM
   certificate) exits 2.

   One thread: the loop polls a signalfd and the server's descriptors
   together (conch_server_pollfds(), conch_server_timeout_ms(),
   conch_server_process()) and runs the response delays of the calls. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "cs.h"

/* A ServerCompatRequest is a few bytes; anything near this is not one. */
#define MAX_FRAME (1u << 20)

/* Exit statuses. */
#define EXIT_BAD_INPUT 2
#define EXIT_UNSUPPORTED 3
#define EXIT_FAILED 1

static int read_full(int fd, uint8_t *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, buf + got, len - got);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return -1;
    }
    got += (size_t)n;
  }
  return 0;
}

static int write_full(int fd, const uint8_t *buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    ssize_t n = write(fd, buf + put, len - put);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return -1;
    }
    put += (size_t)n;
  }
  return 0;
}

static CompatRequest *read_request(void) {
  uint8_t hdr[4];
  if (read_full(0, hdr, sizeof(hdr)) != 0) {
    fprintf(stderr, "conformance-server: no ServerCompatRequest on stdin\n");
    return NULL;
  }
  uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                 (uint32_t)hdr[2] << 8 | hdr[3];
  if (len > MAX_FRAME) {
    fprintf(stderr, "conformance-server: request frame of %u bytes\n", len);
    return NULL;
  }
  uint8_t *buf = malloc(len != 0 ? len : 1);
  if (buf == NULL || read_full(0, buf, len) != 0) {
    fprintf(stderr, "conformance-server: short ServerCompatRequest\n");
    free(buf);
    return NULL;
  }
  CompatRequest *req =
      connectrpc__conformance__v1__server_compat_request__unpack(NULL, len,
                                                                  buf);
  free(buf);
  if (req == NULL) {
    fprintf(stderr, "conformance-server: ServerCompatRequest does not "
                    "parse\n");
  }
  return req;
}

/* Returns NULL when the server core can serve |req|, else why not. */
static const char *unsupported(const CompatRequest *req) {
  switch (req->http_version) {
  case CONNECTRPC__CONFORMANCE__V1__HTTPVERSION__HTTP_VERSION_1:
  case CONNECTRPC__CONFORMANCE__V1__HTTPVERSION__HTTP_VERSION_2:
    break;
  case CONNECTRPC__CONFORMANCE__V1__HTTPVERSION__HTTP_VERSION_3:
    return "HTTP/3 is not supported";
  default:
    return "no HTTP version given (HTTP_VERSION_1 and _2 are served)";
  }
  return NULL;
}

/* The text a memory BIO holds (malloc'ed, NUL-terminated), or NULL. */
static char *bio_text(BIO *b) {
  char *p;
  long n = BIO_get_mem_data(b, &p);
  char *out = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (out != NULL) {
    memcpy(out, p, (size_t)n);
    out[n] = '\0';
  }
  return out;
}

/* A self-signed certificate for 127.0.0.1 and localhost and its key, as
   PEM text (malloc'ed).  Returns 0 or -1. */
static int make_cert(char **cert, char **key) {
  EVP_PKEY *pk = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  X509V3_CTX v3;
  X509_EXTENSION *ext = NULL;
  BIO *cb = BIO_new(BIO_s_mem()), *kb = BIO_new(BIO_s_mem());
  int rv = -1;

  *cert = *key = NULL;
  if (pk == NULL || x == NULL || cb == NULL || kb == NULL ||
      X509_set_version(x, 2) != 1 ||
      ASN1_INTEGER_set(X509_get_serialNumber(x), (long)getpid()) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(x), -3600) == NULL ||
      X509_gmtime_adj(X509_getm_notAfter(x), 86400) == NULL ||
      X509_set_pubkey(x, pk) != 1 ||
      X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                                 (const unsigned char *)"localhost", -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(x, X509_get_subject_name(x)) != 1) {
    goto out;
  }
  X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
  ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name,
                            "IP:127.0.0.1,DNS:localhost");
  if (ext == NULL || X509_add_ext(x, ext, -1) != 1 ||
      X509_sign(x, pk, EVP_sha256()) == 0 || PEM_write_bio_X509(cb, x) != 1 ||
      PEM_write_bio_PrivateKey(kb, pk, NULL, NULL, 0, NULL, NULL) != 1) {
    goto out;
  }
  *cert = bio_text(cb);
  *key = bio_text(kb);
  rv = *cert != NULL && *key != NULL ? 0 : -1;
out:
  X509_EXTENSION_free(ext);
  X509_free(x);
  EVP_PKEY_free(pk);
  BIO_free(cb);
  BIO_free(kb);
  return rv;
}

/* The message types of the suite, for google.protobuf.Any in JSON
   (ConformancePayload.RequestInfo.requests echoes the requests as Any, and
   requests may carry error details); well-known types resolve without
   help. */
static const ProtobufCMessageDescriptor *const suite_types[] = {
    &connectrpc__conformance__v1__unary_response_definition__descriptor,
    &connectrpc__conformance__v1__stream_response_definition__descriptor,
    &connectrpc__conformance__v1__unary_request__descriptor,
    &connectrpc__conformance__v1__unary_response__descriptor,
    &connectrpc__conformance__v1__idempotent_unary_request__descriptor,
    &connectrpc__conformance__v1__idempotent_unary_response__descriptor,
    &connectrpc__conformance__v1__server_stream_request__descriptor,
    &connectrpc__conformance__v1__server_stream_response__descriptor,
    &connectrpc__conformance__v1__client_stream_request__descriptor,
    &connectrpc__conformance__v1__client_stream_response__descriptor,
    &connectrpc__conformance__v1__bidi_stream_request__descriptor,
    &connectrpc__conformance__v1__bidi_stream_response__descriptor,
    &connectrpc__conformance__v1__unimplemented_request__descriptor,
    &connectrpc__conformance__v1__unimplemented_response__descriptor,
    &connectrpc__conformance__v1__conformance_payload__descriptor,
    &connectrpc__conformance__v1__conformance_payload__request_info__descriptor,
    &connectrpc__conformance__v1__conformance_payload__connect_get_info__descriptor,
    &connectrpc__conformance__v1__error__descriptor,
    &connectrpc__conformance__v1__header__descriptor,
};

static const ProtobufCMessageDescriptor *resolve_any(const char *type_url,
                                                     void *user_data) {
  const char *name = strrchr(type_url, '/');
  (void)user_data;
  name = name != NULL ? name + 1 : type_url;
  for (size_t i = 0; i < sizeof(suite_types) / sizeof(suite_types[0]); i++) {
    if (strcmp(suite_types[i]->name, name) == 0) {
      return suite_types[i];
    }
  }
  return NULL;
}

static int write_response(int port, const char *pem) {
  Connectrpc__Conformance__V1__ServerCompatResponse resp =
      CONNECTRPC__CONFORMANCE__V1__SERVER_COMPAT_RESPONSE__INIT;
  resp.host = (char *)"127.0.0.1";
  resp.port = (uint32_t)port;
  if (pem != NULL) {
    resp.pem_cert.data = (uint8_t *)pem;
    resp.pem_cert.len = strlen(pem);
  }
  size_t len =
      connectrpc__conformance__v1__server_compat_response__get_packed_size(
          &resp);
  uint8_t *buf = malloc(4 + len);
  if (buf == NULL) {
    return -1;
  }
  buf[0] = (uint8_t)(len >> 24);
  buf[1] = (uint8_t)(len >> 16);
  buf[2] = (uint8_t)(len >> 8);
  buf[3] = (uint8_t)len;
  connectrpc__conformance__v1__server_compat_response__pack(&resp, buf + 4);
  int rv = write_full(1, buf, 4 + len);
  free(buf);
  return rv;
}

/* SIGTERM and SIGINT, blocked, as a descriptor to poll; also SIGTERM when
   the runner dies.  Returns the descriptor or -1. */
static int stop_signals(void) {
  sigset_t set;
  pid_t parent = getppid();

  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
    return -1;
  }
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
    return -1;
  }
  if (getppid() != parent) {
    raise(SIGTERM); /* it died before the prctl: pending, seen at once */
  }
  return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

/* Serves until a signal comes on |sig_fd|.  Returns 0, or -1 when polling
   failed. */
static int serve(conch_server *s, int sig_fd) {
  struct pollfd *fds = NULL;
  size_t cap = 0;
  int rv = 0;

  for (;;) {
    size_t need = conch_server_pollfds(s, cap > 1 ? fds + 1 : NULL,
                                       cap > 1 ? cap - 1 : 0);
    if (need + 1 > cap) {
      struct pollfd *n = realloc(fds, (need + 8) * sizeof(*fds));
      if (n == NULL) {
        rv = -1;
        break;
      }
      fds = n;
      cap = need + 8;
      continue;
    }
    fds[0].fd = sig_fd;
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    long t = conch_server_timeout_ms(s);
    long d = cs_next_delay_ms();
    if (d >= 0 && (t < 0 || d < t)) {
      t = d;
    }
    int n = poll(fds, need + 1, t > (long)1 << 30 ? 1 << 30 : (int)t);
    if (n < 0 && errno != EINTR) {
      perror("conformance-server: poll");
      rv = -1;
      break;
    }
    if (n > 0 && fds[0].revents != 0) {
      struct signalfd_siginfo si;
      if (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        break; /* the runner is done with us */
      }
    }
    if (n < 0) {
      continue;
    }
    conch_server_process(s, fds + 1, need);
    cs_run_due();
  }
  free(fds);
  return rv;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);

  CompatRequest *req = read_request();
  if (req == NULL) {
    return EXIT_BAD_INPUT;
  }
  if (req->client_tls_cert.len > 0 && !req->use_tls) {
    fprintf(stderr, "conformance-server: client_tls_cert without use_tls\n");
    connectrpc__conformance__v1__server_compat_request__free_unpacked(req,
                                                                      NULL);
    return EXIT_BAD_INPUT;
  }
  const char *why = unsupported(req);
  if (why != NULL) {
    fprintf(stderr, "conformance-server: %s\n", why);
    connectrpc__conformance__v1__server_compat_request__free_unpacked(req,
                                                                      NULL);
    return EXIT_UNSUPPORTED;
  }

  conch_server_opts *opts = NULL;
  conch_server *s = NULL;
  char *cert = NULL, *key = NULL;
  int status = EXIT_FAILED;
  int sig_fd = -1;
  if (conch_server_opts_new(&opts) != 0 ||
      conch_server_opts_set_json_resolver(opts, resolve_any, NULL) != 0) {
    goto out;
  }
  if (req->client_tls_cert.len > 0) {
    int rv = conch_server_opts_set_tls_client_ca_pem(
        opts, (const char *)req->client_tls_cert.data,
        req->client_tls_cert.len);
    if (rv != 0) {
      fprintf(stderr, "conformance-server: client_tls_cert: %s\n",
              rv == CONCH_ERR_TLS ? conch_server_opts_tls_error(opts)
                                  : conch_strerror(rv));
      status = rv == CONCH_ERR_TLS ? EXIT_BAD_INPUT : EXIT_FAILED;
      goto out;
    }
  }
  if (req->use_tls) {
    if (make_cert(&cert, &key) != 0) {
      fprintf(stderr, "conformance-server: making a certificate failed\n");
      goto out;
    }
    if (conch_server_opts_set_tls_pem(opts, cert, 0, key, 0) != 0) {
      fprintf(stderr, "conformance-server: TLS: %s\n",
              conch_server_opts_tls_error(opts));
      goto out;
    }
  }
  /* The suite's limit; without one the core's default (4 MiB) stays. */
  if (req->message_receive_limit > 0 &&
      conch_server_opts_set_recv_limit(opts, req->message_receive_limit) !=
          0) {
    goto out;
  }
  if (conch_server_new(&s, opts) != 0) {
    fprintf(stderr, "conformance-server: conch_server_new failed\n");
    goto out;
  }
  if (cs_register(s) != 0 || conch_server_add_reflection(s) != 0 ||
      conch_server_health_set(s, "connectrpc.conformance.v1.ConformanceService",
                              CONCH_HEALTH_SERVING) != 0) {
    fprintf(stderr, "conformance-server: registering the service failed\n");
    goto out;
  }
  /* Before the response: a SIGTERM from then on ends us well. */
  sig_fd = stop_signals();
  if (sig_fd < 0) {
    perror("conformance-server: signals");
    goto out;
  }
  int rv = conch_server_listen(s, "127.0.0.1:0");
  if (rv != 0) {
    fprintf(stderr, "conformance-server: listen: %s\n", conch_strerror(rv));
    goto out;
  }
  if (write_response(conch_server_port(s), cert) != 0) {
    fprintf(stderr, "conformance-server: writing the response failed\n");
    goto out;
  }
  if (serve(s, sig_fd) == 0) {
    status = 0;
  }

out:
  if (sig_fd >= 0) {
    close(sig_fd);
  }
  conch_server_free(s); /* cancels the calls still running */
  conch_server_opts_free(opts);
  free(cert);
  free(key);
  connectrpc__conformance__v1__server_compat_request__free_unpacked(req, NULL);
  return status;
}
