/* conformance-client: conch as a client under test of the Connect
   conformance suite (connectrpc/conformance, "client mode").

     conformance-client [-p N]

   The runner writes ClientCompatRequest messages to stdin, each preceded
   by its length (4 bytes, big-endian); for each one this program makes
   the RPC it describes with conch and writes a ClientCompatResponse,
   framed the same way, to stdout.  Up to N calls (default 16) run at once
   on one thread, so results come out in the order calls end.  At the end
   of stdin the calls in flight are finished, then the program exits;
   SIGTERM ends it at once (its default action, which is kept).

   Calls with the same connection settings share one conch_client (and so
   its HTTP/2 connections); see cc_app_client().  The loop polls stdin and
   the descriptors of every client together, with conch's pull interface
   (conch_client_pollfds(), conch_client_timeout_ms(),
   conch_client_process()). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cc.h"

/* Requests larger than this are refused (the runner's largest are a few
   MiB). */
#define MAX_FRAME (256u << 20)
/* Enough calls in flight to overlap the suite's waits, few enough that
   each call's latency stays well inside its timing margins (the 500 ms
   deadline grace) on a busy two-core machine. */
#define DEFAULT_PARALLEL 16

typedef Connectrpc__Conformance__V1__ClientCompatRequest CompatRequest;

/* A client and the settings it was made with. */
typedef struct cc_client {
  struct cc_client *next;
  conch_client *c;
  Connectrpc__Conformance__V1__Protocol protocol;
  int json; /* CODEC_JSON, else proto */
  int comp; /* conch_compression of the run */
  int h1;   /* HTTP/1.1, else HTTP/2 */
  uint32_t recv_limit;
  char *host;
  uint32_t port;
  ProtobufCBinaryData ca, cert, key;
  /* Its slice of the pollfd array in the current turn. */
  size_t fd_off, fd_n;
} cc_client;

struct cc_app {
  cc_client *clients;
  size_t inflight;
  size_t max_inflight;
  /* Unparsed stdin bytes. */
  uint8_t *in;
  size_t inlen, incap;
  int in_eof;
  /* RPCs whose call ended this turn, freed after it. */
  cc_rpc **retired;
  size_t nretired, retcap;
  struct pollfd *fds;
  size_t fdcap;
};

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n != 0 ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "conformance-client: out of memory\n");
    exit(70);
  }
  return p;
}

static int bin_equal(const ProtobufCBinaryData *a,
                     const ProtobufCBinaryData *b) {
  return a->len == b->len &&
         (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static void bin_copy(ProtobufCBinaryData *dst, const ProtobufCBinaryData *src) {
  dst->len = src->len;
  dst->data = xrealloc(NULL, src->len);
  if (src->len > 0) {
    memcpy(dst->data, src->data, src->len);
  }
}

/* ---- Clients ------------------------------------------------------------ */

/* Fills the settings fields of |k| from |req|; they point into |req|
   (nothing is copied). */
static void settings_of(const CompatRequest *req, cc_client *k) {
  static const ProtobufCBinaryData none = {0, NULL};
  const Connectrpc__Conformance__V1__TLSCreds *creds = req->client_tls_creds;
  memset(k, 0, sizeof(*k));
  k->protocol = req->protocol;
  k->json = req->codec == CONNECTRPC__CONFORMANCE__V1__CODEC__CODEC_JSON;
  k->comp = cc_compression(req->compression);
  k->h1 = req->http_version ==
          CONNECTRPC__CONFORMANCE__V1__HTTPVERSION__HTTP_VERSION_1;
  k->recv_limit = req->message_receive_limit;
  k->host = req->host[0] != '\0' ? req->host : "127.0.0.1";
  k->port = req->port;
  k->ca = req->server_tls_cert;
  k->cert = creds != NULL ? creds->cert : none;
  k->key = creds != NULL ? creds->key : none;
}

static int same_settings(const cc_client *a, const cc_client *b) {
  return a->protocol == b->protocol && a->json == b->json &&
         a->comp == b->comp && a->h1 == b->h1 && a->recv_limit == b->recv_limit &&
         strcmp(a->host, b->host) == 0 && a->port == b->port &&
         bin_equal(&a->ca, &b->ca) && bin_equal(&a->cert, &b->cert) &&
         bin_equal(&a->key, &b->key);
}

static conch_protocol protocol_of(Connectrpc__Conformance__V1__Protocol p) {
  switch (p) {
  case CONNECTRPC__CONFORMANCE__V1__PROTOCOL__PROTOCOL_GRPC:
    return CONCH_PROTOCOL_GRPC;
  case CONNECTRPC__CONFORMANCE__V1__PROTOCOL__PROTOCOL_GRPC_WEB:
    return CONCH_PROTOCOL_GRPC_WEB;
  default:
    return CONCH_PROTOCOL_CONNECT;
  }
}

/* The message types of the suite, for google.protobuf.Any in JSON
   (ConformancePayload.RequestInfo.requests holds the requests as Any);
   well-known types resolve without help. */
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
    &connectrpc__conformance__v1__raw_httprequest__descriptor,
    &connectrpc__conformance__v1__raw_httprequest__encoded_query_param__descriptor,
    &connectrpc__conformance__v1__message_contents__descriptor,
    &connectrpc__conformance__v1__stream_contents__descriptor,
    &connectrpc__conformance__v1__stream_contents__stream_item__descriptor,
    &connectrpc__conformance__v1__raw_httpresponse__descriptor,
};

static const ProtobufCMessageDescriptor *resolve_any(const char *type_url,
                                                     void *user_data) {
  const char *name = strrchr(type_url, '/');
  size_t i;
  (void)user_data;
  name = name != NULL ? name + 1 : type_url;
  for (i = 0; i < sizeof(suite_types) / sizeof(suite_types[0]); i++) {
    if (strcmp(suite_types[i]->name, name) == 0) {
      return suite_types[i];
    }
  }
  return NULL;
}

/* Options for |k|.  Returns 0 or a CONCH_ERR_*. */
static int make_opts(const cc_client *k, conch_client_opts *o) {
  int rv = conch_client_opts_set_protocol(o, protocol_of(k->protocol));
  if (rv == 0) {
    rv = conch_client_opts_set_codec(o, k->json ? CONCH_CODEC_JSON
                                                : CONCH_CODEC_PROTO);
  }
  if (rv == 0) {
    rv = conch_client_opts_set_json_resolver(o, resolve_any, NULL);
  }
  /* As the reference client: a compression is sent and accepted only in
     its own runs (sending it advertises it); otherwise neither side
     compresses. */
  if (rv == 0) {
    rv = conch_client_opts_set_send_compression(o, (conch_compression)k->comp);
  }
  if (rv == 0) {
    rv = conch_client_opts_set_accept_compression(o, "");
  }
  /* The version asked for, for both schemes (https:// offers only that
     one in ALPN). */
  if (rv == 0) {
    rv = conch_client_opts_set_http_version(o, k->h1 ? CONCH_HTTP_1_1
                                                     : CONCH_HTTP_2);
  }
  if (rv == 0) {
    /* 0 (no limit asked for) is conch's "no limit" too. */
    rv = conch_client_opts_set_recv_limit(o, k->recv_limit);
  }
  if (rv == 0 && k->ca.len > 0) {
    rv = conch_client_opts_set_ca_pem(o, (const char *)k->ca.data, k->ca.len);
  }
  if (rv == 0 && k->cert.len > 0) {
    rv = conch_client_opts_set_client_cert_pem(
        o, (const char *)k->cert.data, k->cert.len, (const char *)k->key.data,
        k->key.len);
  }
  return rv;
}

conch_client *cc_app_client(cc_app *app, const CompatRequest *req, char *err,
                            size_t errlen) {
  cc_client k, *cl;
  conch_client_opts *o = NULL;
  conch_client *c = NULL;
  char url[512];
  int rv;

  settings_of(req, &k);
  for (cl = app->clients; cl != NULL; cl = cl->next) {
    if (same_settings(cl, &k)) {
      return cl->c;
    }
  }
  if (k.port == 0 || k.port > 65535) {
    snprintf(err, errlen, "bad port %u", (unsigned)k.port);
    return NULL;
  }
  if (k.cert.len > 0 && k.ca.len == 0) {
    snprintf(err, errlen, "a client certificate needs TLS");
    return NULL;
  }
  /* An IPv6 literal goes in brackets. */
  if (strchr(k.host, ':') != NULL) {
    snprintf(url, sizeof(url), "%s://[%s]:%u", k.ca.len > 0 ? "https" : "http",
             k.host, (unsigned)k.port);
  } else {
    snprintf(url, sizeof(url), "%s://%s:%u", k.ca.len > 0 ? "https" : "http",
             k.host, (unsigned)k.port);
  }
  rv = conch_client_opts_new(&o);
  if (rv == 0) {
    rv = make_opts(&k, o);
  }
  if (rv == 0) {
    rv = conch_client_new(&c, url, o);
  }
  conch_client_opts_free(o);
  if (rv != 0) {
    snprintf(err, errlen, "cannot make a client for %s: %s", url,
             conch_strerror(rv));
    return NULL;
  }
  cl = xrealloc(NULL, sizeof(*cl));
  *cl = k;
  cl->c = c;
  cl->host = xrealloc(NULL, strlen(k.host) + 1);
  memcpy(cl->host, k.host, strlen(k.host) + 1);
  bin_copy(&cl->ca, &k.ca);
  bin_copy(&cl->cert, &k.cert);
  bin_copy(&cl->key, &k.key);
  cl->next = app->clients;
  app->clients = cl;
  return c;
}

static void clients_free(cc_app *app) {
  while (app->clients != NULL) {
    cc_client *cl = app->clients;
    app->clients = cl->next;
    conch_client_free(cl->c);
    free(cl->host);
    free(cl->ca.data);
    free(cl->cert.data);
    free(cl->key.data);
    free(cl);
  }
}

/* ---- stdout ------------------------------------------------------------- */

int cc_app_write(
    cc_app *app,
    const Connectrpc__Conformance__V1__ClientCompatResponse *resp) {
  size_t len = protobuf_c_message_get_packed_size(&resp->base), off = 0;
  uint8_t *buf = xrealloc(NULL, len + 4);
  (void)app;

  buf[0] = (uint8_t)(len >> 24);
  buf[1] = (uint8_t)(len >> 16);
  buf[2] = (uint8_t)(len >> 8);
  buf[3] = (uint8_t)len;
  protobuf_c_message_pack(&resp->base, buf + 4);
  /* Blocking writes: the runner reads all the time, so they do not stall
     the loop for long. */
  while (off < len + 4) {
    ssize_t n = write(STDOUT_FILENO, buf + off, len + 4 - off);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      /* Nobody reads our results any more: stop at once, as on SIGTERM. */
      fprintf(stderr, "conformance-client: stdout: %s\n",
              n < 0 ? strerror(errno) : "closed");
      _exit(1);
    }
    off += (size_t)n;
  }
  free(buf);
  return 0;
}

/* ---- stdin -------------------------------------------------------------- */

/* Reads what stdin has.  Returns 0, or -1 on a read error. */
static int read_input(cc_app *app) {
  ssize_t n;
  if (app->incap - app->inlen < 65536) {
    app->incap = app->incap * 2 + 65536;
    app->in = xrealloc(app->in, app->incap);
  }
  n = read(STDIN_FILENO, app->in + app->inlen, app->incap - app->inlen);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) {
      return 0;
    }
    fprintf(stderr, "conformance-client: stdin: %s\n", strerror(errno));
    return -1;
  }
  if (n == 0) {
    app->in_eof = 1;
  }
  app->inlen += (size_t)n;
  return 0;
}

/* Starts the RPCs of the complete requests read so far, as long as there
   is room.  Returns 0, or -1 when the input cannot be framed. */
static int dispatch(cc_app *app) {
  size_t off = 0;
  int rv = 0;

  while (app->inflight < app->max_inflight && app->inlen - off >= 4) {
    const uint8_t *p = app->in + off;
    uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
                   (uint32_t)p[2] << 8 | p[3];
    CompatRequest *req;
    if (len > MAX_FRAME) {
      fprintf(stderr, "conformance-client: request of %u bytes refused\n",
              (unsigned)len);
      rv = -1;
      break;
    }
    if (app->inlen - off - 4 < len) {
      break;
    }
    req = connectrpc__conformance__v1__client_compat_request__unpack(NULL, len,
                                                                     p + 4);
    off += 4 + (size_t)len;
    if (req == NULL) {
      /* Without its test name there is nobody to answer to. */
      fprintf(stderr, "conformance-client: undecodable request skipped\n");
      continue;
    }
    if (cc_rpc_run(app, req) != NULL) {
      app->inflight++;
    }
  }
  if (off > 0) {
    memmove(app->in, app->in + off, app->inlen - off);
    app->inlen -= off;
  }
  return rv;
}

/* ---- The loop ----------------------------------------------------------- */

void cc_app_retire(cc_app *app, cc_rpc *rpc) {
  if (app->nretired == app->retcap) {
    app->retcap = app->retcap != 0 ? app->retcap * 2 : 16;
    app->retired = xrealloc(app->retired, app->retcap * sizeof(*app->retired));
  }
  app->retired[app->nretired++] = rpc;
  app->inflight--;
}

static void free_retired(cc_app *app) {
  size_t i;
  for (i = 0; i < app->nretired; i++) {
    cc_rpc_free(app->retired[i]);
  }
  app->nretired = 0;
}

/* Fills app->fds with stdin (when more requests are wanted) and what every
   client wants polled; returns the count and the poll timeout. */
static size_t gather(cc_app *app, int want_input, int *timeout) {
  size_t n = 0;
  cc_client *cl;
  long t = -1;

  if (app->fdcap == 0) {
    app->fdcap = 16;
    app->fds = xrealloc(NULL, app->fdcap * sizeof(*app->fds));
  }
  if (want_input) {
    app->fds[0].fd = STDIN_FILENO;
    app->fds[0].events = POLLIN;
    app->fds[0].revents = 0;
    n = 1;
  }
  for (cl = app->clients; cl != NULL; cl = cl->next) {
    long ct;
    size_t need = conch_client_pollfds(cl->c, app->fds + n, app->fdcap - n);
    if (need > app->fdcap - n) {
      app->fdcap = (n + need) * 2;
      app->fds = xrealloc(app->fds, app->fdcap * sizeof(*app->fds));
      need = conch_client_pollfds(cl->c, app->fds + n, app->fdcap - n);
    }
    cl->fd_off = n;
    cl->fd_n = need;
    n += need;
    ct = conch_client_timeout_ms(cl->c);
    if (ct >= 0 && (t < 0 || ct < t)) {
      t = ct;
    }
  }
  *timeout = t > 60000 ? 60000 : (int)t;
  return n;
}

static int run(cc_app *app) {
  for (;;) {
    int want_input, timeout, ready;
    size_t n;
    cc_client *cl;

    if (dispatch(app) != 0) {
      return -1;
    }
    if (app->in_eof && app->inflight == 0) {
      if (app->inlen != 0) {
        fprintf(stderr, "conformance-client: stdin ended inside a request\n");
        return -1;
      }
      return 0;
    }
    want_input = !app->in_eof && app->inflight < app->max_inflight;
    n = gather(app, want_input, &timeout);
    ready = poll(app->fds, (nfds_t)n, timeout);
    if (ready < 0 && errno != EINTR) {
      fprintf(stderr, "conformance-client: poll: %s\n", strerror(errno));
      return -1;
    }
    if (ready > 0 && want_input && app->fds[0].revents != 0 &&
        read_input(app) != 0) {
      return -1;
    }
    for (cl = app->clients; cl != NULL; cl = cl->next) {
      /* Failures of a connection reach its calls, not this return value;
         only an exhausted allocator would show here. */
      int rv =
          conch_client_process(cl->c, ready > 0 ? app->fds + cl->fd_off : NULL,
                               ready > 0 ? cl->fd_n : 0);
      if (rv != 0) {
        fprintf(stderr, "conformance-client: %s\n", conch_strerror(rv));
        return -1;
      }
    }
    free_retired(app);
  }
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: conformance-client [-p N]\n"
          "  Reads size-delimited ClientCompatRequest messages on stdin "
          "and writes\n"
          "  ClientCompatResponse messages to stdout (the Connect "
          "conformance\n"
          "  suite's client protocol).  -p: calls in flight at once "
          "(default %d).\n",
          DEFAULT_PARALLEL);
}

int main(int argc, char **argv) {
  cc_app app;
  int i, rv;

  memset(&app, 0, sizeof(app));
  app.max_inflight = DEFAULT_PARALLEL;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-p") == 0 && i + 1 < argc) {
      char *end;
      unsigned long v = strtoul(argv[++i], &end, 10);
      if (*end != '\0' || v == 0 || v > 100000) {
        usage(stderr);
        return 2;
      }
      app.max_inflight = v;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  /* SIGTERM must end us at once, whatever the parent left us with; a
     vanished reader shows as a failed write instead of SIGPIPE. */
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);

  rv = run(&app);
  /* Only reached with nothing in flight, or on a fatal input error (then
     freeing the clients ends their calls, which answer as canceled). */
  clients_free(&app);
  free_retired(&app);
  free(app.in);
  free(app.retired);
  free(app.fds);
  return rv == 0 ? 0 : 1;
}
