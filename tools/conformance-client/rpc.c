/* One ClientCompatRequest: from the request to the call, through the
   script the request describes, to its ClientCompatResponse.

   The script follows the suite's pseudo-code for clients
   (docs/testing_clients.md upstream) on conch's push API:

     unary, server stream   start (sends the one request and half-closes);
                            cancel after_close_send_ms later if asked
     client stream,         for each request: wait request_delay_ms, send
     half-duplex bidi       (a failed send leaves it and the rest unsent);
                            then cancel instead of half-closing
                            (before_close_send) or half-close, and cancel
                            after_close_send_ms later if asked
     full-duplex bidi       the same, but after each send wait for one
                            response (or the end of the call) first

   after_num_responses cancels from the response handler once that many
   responses arrived.  Whatever the script is doing when the call ends,
   the call's end is the RPC's end: what was not sent by then is counted
   as unsent. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cc.h"

#define SERVICE_NAME "connectrpc.conformance.v1.ConformanceService"

/* protobuf-c's enum names, shortened. */
#define STREAM_TYPE(x) CONNECTRPC__CONFORMANCE__V1__STREAM_TYPE__STREAM_TYPE_##x
#define TIMING(x)                                                              \
  CONNECTRPC__CONFORMANCE__V1__CLIENT_COMPAT_REQUEST__CANCEL__CANCEL_TIMING_##x
#define PRESENT(field)                                                         \
  CONNECTRPC__CONFORMANCE__V1__CLIENT_COMPAT_REQUEST___##field
#define HTTP_VERSION(x)                                                        \
  CONNECTRPC__CONFORMANCE__V1__HTTPVERSION__HTTP_VERSION_##x
#define PROTOCOL(x) CONNECTRPC__CONFORMANCE__V1__PROTOCOL__PROTOCOL_##x
#define CODEC(x) CONNECTRPC__CONFORMANCE__V1__CODEC__CODEC_##x
#define COMPRESSION(x) CONNECTRPC__CONFORMANCE__V1__COMPRESSION__COMPRESSION_##x

typedef Connectrpc__Conformance__V1__ClientCompatRequest CompatRequest;
typedef Connectrpc__Conformance__V1__ClientCompatResponse CompatResponse;
typedef Connectrpc__Conformance__V1__ClientResponseResult ResponseResult;
typedef Connectrpc__Conformance__V1__ConformancePayload Payload;
typedef Connectrpc__Conformance__V1__Header Header;
typedef Connectrpc__Conformance__V1__Error Error;

typedef enum phase {
  PHASE_SEND,  /* sending request messages */
  PHASE_AWAIT, /* full duplex: waiting for the response to the last send */
  PHASE_CLOSE, /* every request sent: half-close (or cancel) next */
  PHASE_RECV   /* only responses left */
} phase;

typedef enum cancel_mode {
  CANCEL_NONE,
  CANCEL_BEFORE_CLOSE_SEND,
  CANCEL_AFTER_CLOSE_SEND,
  CANCEL_AFTER_RESPONSES
} cancel_mode;

struct cc_rpc {
  cc_app *app;
  CompatRequest *req;
  const cc_method *m;
  conch_call *call;
  /* Retained by the typed stubs until on_close has returned. */
  cc_handlers h;
  /* The request messages, unpacked with the method's request type. */
  ProtobufCMessage **msgs;
  size_t nmsgs;
  size_t nsent;
  int full_duplex;
  cancel_mode cancel;
  uint32_t cancel_arg;
  phase ph;
  /* The delay before msgs[nsent] has passed. */
  int delayed;
  /* The one pending alarm: a request delay or a timed cancel. */
  conch_alarm *alarm;
  /* Nesting of step(): handlers it triggers must not re-enter it. */
  int in_step;
  Payload **payloads;
  size_t npayloads;
  size_t cap;
};

int cc_compression(int suite) {
  switch (suite) {
  case COMPRESSION(UNSPECIFIED):
  case COMPRESSION(IDENTITY):
    return CONCH_COMPRESSION_IDENTITY;
  case COMPRESSION(GZIP):
    return CONCH_COMPRESSION_GZIP;
  case COMPRESSION(BR):
    return CONCH_COMPRESSION_BR;
  case COMPRESSION(ZSTD):
    return CONCH_COMPRESSION_ZSTD;
  case COMPRESSION(DEFLATE):
    return CONCH_COMPRESSION_DEFLATE;
  case COMPRESSION(SNAPPY):
    return CONCH_COMPRESSION_SNAPPY;
  default:
    return -1;
  }
}

/* ---- Small helpers ------------------------------------------------------ */

/* This tool's memory failures end the process: a conformance run cannot
   continue sensibly without memory, and the runner reports the exit. */
static void *xmalloc(size_t n) {
  void *p = malloc(n != 0 ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "conformance-client: out of memory\n");
    exit(70);
  }
  return p;
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n != 0 ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "conformance-client: out of memory\n");
    exit(70);
  }
  return p;
}

static char *xstrndup(const char *s, size_t n) {
  char *d = xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Unpadded standard base64 of |p|, as "-bin" values travel. */
static char *b64_encode(const uint8_t *p, size_t n) {
  char *out = xmalloc((n + 2) / 3 * 4 + 1);
  size_t i, o = 0;
  for (i = 0; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    out[o++] = b64_alphabet[v >> 18];
    out[o++] = b64_alphabet[(v >> 12) & 63];
    out[o++] = b64_alphabet[(v >> 6) & 63];
    out[o++] = b64_alphabet[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n) {
      v |= (uint32_t)p[i + 1] << 8;
    }
    out[o++] = b64_alphabet[v >> 18];
    out[o++] = b64_alphabet[(v >> 12) & 63];
    if (i + 1 < n) {
      out[o++] = b64_alphabet[(v >> 6) & 63];
    }
  }
  out[o] = '\0';
  return out;
}

static int b64_value(char c) {
  const char *p = c != '\0' ? strchr(b64_alphabet, c) : NULL;
  return p != NULL ? (int)(p - b64_alphabet) : -1;
}

/* Decodes standard base64, padded or not, into |out| (room for
   strlen(s) bytes).  Returns the length, or -1 for anything else. */
static long b64_decode(const char *s, uint8_t *out) {
  size_t n = strlen(s), i, o = 0;
  uint32_t acc = 0;
  int bits = 0;
  while (n > 0 && s[n - 1] == '=') {
    n--;
  }
  for (i = 0; i < n; i++) {
    int v = b64_value(s[i]);
    if (v < 0) {
      return -1;
    }
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
    }
  }
  return n % 4 == 1 ? -1 : (long)o;
}

static int is_bin(const char *name) {
  size_t n = strlen(name);
  return n > 4 && strcmp(name + n - 4, "-bin") == 0;
}

/* ---- Writing results ---------------------------------------------------- */

int cc_write_error(cc_app *app, const char *test_name, const char *fmt, ...) {
  Connectrpc__Conformance__V1__ClientErrorResult err =
      CONNECTRPC__CONFORMANCE__V1__CLIENT_ERROR_RESULT__INIT;
  CompatResponse resp =
      CONNECTRPC__CONFORMANCE__V1__CLIENT_COMPAT_RESPONSE__INIT;
  char msg[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  err.message = msg;
  resp.test_name = (char *)test_name;
  resp.result_case =
      CONNECTRPC__CONFORMANCE__V1__CLIENT_COMPAT_RESPONSE__RESULT_ERROR;
  resp.error = &err;
  return cc_app_write(app, &resp);
}

/* Metadata as the runner wants it: one Header per name, in order of first
   appearance, with every value of that name in order.  Binary ("-bin")
   values go back to the base64 they travelled as, since a Header value is
   a protobuf string (UTF-8). */
static Header **headers_from(const conch_metadata *md, size_t *n) {
  size_t count = conch_metadata_count(md), i, j, nh = 0;
  Header **hs = xmalloc(count * sizeof(*hs));

  for (i = 0; i < count; i++) {
    const char *name;
    const uint8_t *value;
    size_t len;
    Header *h = NULL;
    if (conch_metadata_at(md, i, &name, &value, &len) != 0) {
      continue;
    }
    for (j = 0; j < nh; j++) {
      if (strcmp(hs[j]->name, name) == 0) {
        h = hs[j];
        break;
      }
    }
    if (h == NULL) {
      h = xmalloc(sizeof(*h));
      connectrpc__conformance__v1__header__init(h);
      h->name = xstrndup(name, strlen(name));
      hs[nh++] = h;
    }
    h->value = xrealloc(h->value, (h->n_value + 1) * sizeof(*h->value));
    h->value[h->n_value++] = is_bin(name) ? b64_encode(value, len)
                                          : xstrndup((const char *)value, len);
  }
  *n = nh;
  return hs;
}

static void headers_free(Header **hs, size_t n) {
  size_t i, j;
  for (i = 0; i < n; i++) {
    for (j = 0; j < hs[i]->n_value; j++) {
      free(hs[i]->value[j]);
    }
    free(hs[i]->value);
    free(hs[i]->name);
    free(hs[i]);
  }
  free(hs);
}

/* The RPC error as the runner wants it: code, message (when there is
   one) and the details as Any messages. */
static void error_from(Error *e, Google__Protobuf__Any ***anys,
                       const conch_status *st) {
  size_t i;
  e->code = (Connectrpc__Conformance__V1__Code)st->code;
  if (st->message != NULL) {
    e->_message_case = CONNECTRPC__CONFORMANCE__V1__ERROR___MESSAGE_MESSAGE;
    e->message = st->message;
  }
  *anys = xmalloc(st->ndetails * sizeof(**anys));
  for (i = 0; i < st->ndetails; i++) {
    Google__Protobuf__Any *a = xmalloc(sizeof(*a));
    google__protobuf__any__init(a);
    a->type_url = st->details[i].type_url;
    a->value.data = st->details[i].value;
    a->value.len = st->details[i].len;
    (*anys)[i] = a;
  }
  e->n_details = st->ndetails;
  e->details = *anys;
}

static void write_result(cc_rpc *r, conch_call *call, const conch_status *st,
                         const conch_metadata *trailers) {
  ResponseResult res =
      CONNECTRPC__CONFORMANCE__V1__CLIENT_RESPONSE_RESULT__INIT;
  CompatResponse resp =
      CONNECTRPC__CONFORMANCE__V1__CLIENT_COMPAT_RESPONSE__INIT;
  Error err = CONNECTRPC__CONFORMANCE__V1__ERROR__INIT;
  Google__Protobuf__Any **anys = NULL;
  size_t i;
  conch_stream_kind kind = r->m->method->kind;

  res.response_headers =
      headers_from(conch_call_headers(call), &res.n_response_headers);
  res.response_trailers = headers_from(trailers, &res.n_response_trailers);
  /* A unary or client-streaming call has a response or an error, never
     both (a message that came before a failure is not a response). */
  if (st->code == CONCH_CODE_OK ||
      (kind != CONCH_STREAM_UNARY && kind != CONCH_STREAM_CLIENT)) {
    res.n_payloads = r->npayloads;
    res.payloads = r->payloads;
  }
  if (st->code != CONCH_CODE_OK) {
    error_from(&err, &anys, st);
    res.error = &err;
  }
  res.num_unsent_requests = (int32_t)(r->nmsgs - r->nsent);
  resp.test_name = r->req->test_name;
  resp.result_case =
      CONNECTRPC__CONFORMANCE__V1__CLIENT_COMPAT_RESPONSE__RESULT_RESPONSE;
  resp.response = &res;
  cc_app_write(r->app, &resp);

  headers_free(res.response_headers, res.n_response_headers);
  headers_free(res.response_trailers, res.n_response_trailers);
  for (i = 0; i < err.n_details; i++) {
    free(anys[i]);
  }
  free(anys);
}

/* ---- Responses and the end ---------------------------------------------- */

static void step(cc_rpc *r);

void cc_rpc_on_payload(cc_rpc *r, const Payload *p) {
  Payload *copy;

  /* Copied through the wire format: |p| lives in the call's arena. */
  if (p != NULL) {
    size_t len = protobuf_c_message_get_packed_size(&p->base);
    uint8_t *buf = xmalloc(len);
    protobuf_c_message_pack(&p->base, buf);
    copy = connectrpc__conformance__v1__conformance_payload__unpack(NULL, len,
                                                                    buf);
    free(buf);
    if (copy == NULL) {
      fprintf(stderr, "conformance-client: cannot copy a payload\n");
      exit(70);
    }
  } else {
    /* An empty response message: an empty payload. */
    copy = xmalloc(sizeof(*copy));
    connectrpc__conformance__v1__conformance_payload__init(copy);
  }
  if (r->npayloads == r->cap) {
    r->cap = r->cap != 0 ? r->cap * 2 : 4;
    r->payloads = xrealloc(r->payloads, r->cap * sizeof(*r->payloads));
  }
  r->payloads[r->npayloads++] = copy;

  if (r->cancel == CANCEL_AFTER_RESPONSES && r->npayloads == r->cancel_arg &&
      (r->m->method->kind == CONCH_STREAM_SERVER ||
       r->m->method->kind == CONCH_STREAM_BIDI)) {
    conch_call_cancel(r->call);
  }
  if (r->ph == PHASE_AWAIT) {
    step(r);
  }
}

void cc_rpc_on_send_ready(cc_rpc *r) { step(r); }

void cc_rpc_on_close(cc_rpc *r, conch_call *call, const conch_status *status,
                     const conch_metadata *trailers) {
  if (r->alarm != NULL) {
    conch_alarm_cancel(r->alarm);
    r->alarm = NULL;
  }
  write_result(r, call, status, trailers);
  /* The call may go now (conch defers the release until this handler has
     returned); the RPC, which holds the handler struct the stubs retain,
     goes after this loop turn. */
  conch_call_free(call);
  r->call = NULL;
  cc_app_retire(r->app, r);
}

/* ---- The script --------------------------------------------------------- */

static void cancel_alarm(conch_client *c, void *user_data) {
  cc_rpc *r = user_data;
  (void)c;
  r->alarm = NULL;
  conch_call_cancel(r->call);
}

static void delay_alarm(conch_client *c, void *user_data) {
  cc_rpc *r = user_data;
  (void)c;
  r->alarm = NULL;
  r->delayed = 1;
  step(r);
}

/* Arms the one alarm of |r|.  If that fails the action runs at once: the
   timing is then off, which the result will show. */
static void arm(cc_rpc *r, long ms, void (*cb)(conch_client *, void *)) {
  int rv = conch_client_alarm(conch_call_client(r->call), ms, cb, r, &r->alarm);
  if (rv != 0) {
    r->alarm = NULL;
    cb(conch_call_client(r->call), r);
  }
}

/* Sends the next request.  Returns 1 when the script may go on, 0 when it
   waits (a delay, a full send buffer, or a call that has ended). */
static int send_next(cc_rpc *r) {
  int rv;
  if (!r->delayed && r->req->request_delay_ms > 0) {
    arm(r, (long)r->req->request_delay_ms, delay_alarm);
    return r->alarm == NULL;
  }
  rv = r->m->send(r->call, r->msgs[r->nsent]);
  if (rv == CONCH_ERR_AGAIN) {
    return 0; /* on_send_ready resumes */
  }
  if (rv != 0) {
    /* The call has ended or is ending (its status says why); this request
       and the rest stay unsent, and on_close finishes the RPC. */
    r->ph = PHASE_RECV;
    return 0;
  }
  r->nsent++;
  r->delayed = 0;
  r->ph = r->full_duplex ? PHASE_AWAIT : PHASE_SEND;
  return 1;
}

static void close_send(cc_rpc *r) {
  r->ph = PHASE_RECV;
  if (r->cancel == CANCEL_BEFORE_CLOSE_SEND) {
    conch_call_cancel(r->call);
    return;
  }
  /* CONCH_ERR_STATE here means the call already ended: nothing to do. */
  r->m->close_send(r->call);
  if (r->cancel == CANCEL_AFTER_CLOSE_SEND) {
    arm(r, (long)r->cancel_arg, cancel_alarm);
  }
}

/* Advances the script of a client-streaming or bidi call as far as it can
   go without waiting. */
static void step(cc_rpc *r) {
  int go = 1;
  if (r->in_step) {
    return;
  }
  r->in_step = 1;
  while (go && !conch_call_done(r->call)) {
    switch (r->ph) {
    case PHASE_SEND:
      if (r->nsent == r->nmsgs) {
        r->ph = PHASE_CLOSE;
      } else {
        go = send_next(r);
      }
      break;
    case PHASE_AWAIT:
      /* One response per request sent, as in a ping-pong. */
      if (r->npayloads >= r->nsent) {
        r->ph = PHASE_SEND;
      } else {
        go = 0;
      }
      break;
    case PHASE_CLOSE:
      close_send(r);
      break;
    case PHASE_RECV:
      go = 0;
      break;
    }
  }
  r->in_step = 0;
}

/* ---- From the request to the call --------------------------------------- */

/* The method the request names, or the one its stream type implies. */
static const cc_method *pick_method(const CompatRequest *req, char *err,
                                    size_t errlen) {
  const char *name;
  const cc_method *m;
  conch_stream_kind want;

  if (req->_service_case == PRESENT(SERVICE_SERVICE) &&
      strcmp(req->service, SERVICE_NAME) != 0) {
    snprintf(err, errlen, "unknown service '%s'", req->service);
    return NULL;
  }
  switch (req->stream_type) {
  case STREAM_TYPE(UNARY):
    name = "Unary";
    want = CONCH_STREAM_UNARY;
    break;
  case STREAM_TYPE(CLIENT_STREAM):
    name = "ClientStream";
    want = CONCH_STREAM_CLIENT;
    break;
  case STREAM_TYPE(SERVER_STREAM):
    name = "ServerStream";
    want = CONCH_STREAM_SERVER;
    break;
  case STREAM_TYPE(HALF_DUPLEX_BIDI_STREAM):
  case STREAM_TYPE(FULL_DUPLEX_BIDI_STREAM):
    name = "BidiStream";
    want = CONCH_STREAM_BIDI;
    break;
  default:
    snprintf(err, errlen, "unsupported stream type %d", (int)req->stream_type);
    return NULL;
  }
  if (req->_method_case == PRESENT(METHOD_METHOD)) {
    name = req->method;
  }
  m = cc_method_find(name);
  if (m == NULL) {
    snprintf(err, errlen, "unknown method '%s' of %s", name, SERVICE_NAME);
    return NULL;
  }
  if (m->method->kind != want) {
    snprintf(err, errlen, "method %s does not have the requested stream type",
             name);
    return NULL;
  }
  return m;
}

/* What conch does not do, refused up front (config.yaml declares none of
   it, so a runner never asks). */
static int check_supported(const CompatRequest *req, char *err, size_t errlen) {
  if (req->http_version != HTTP_VERSION(1) &&
      req->http_version != HTTP_VERSION(2) &&
      req->http_version != HTTP_VERSION(UNSPECIFIED)) {
    snprintf(err, errlen,
             "HTTP version %d is not supported (HTTP/1.1 and HTTP/2 only)",
             (int)req->http_version);
    return -1;
  }
  if (req->protocol != PROTOCOL(CONNECT) && req->protocol != PROTOCOL(GRPC) &&
      req->protocol != PROTOCOL(GRPC_WEB)) {
    snprintf(err, errlen, "protocol %d is not supported", (int)req->protocol);
    return -1;
  }
  if (req->codec != CODEC(PROTO) && req->codec != CODEC(JSON) &&
      req->codec != CODEC(UNSPECIFIED)) {
    snprintf(err, errlen, "codec %d is not supported (proto and JSON only)",
             (int)req->codec);
    return -1;
  }
  if (cc_compression(req->compression) < 0) {
    snprintf(err, errlen, "compression %d is not supported",
             (int)req->compression);
    return -1;
  }
  if (req->raw_request != NULL) {
    snprintf(err, errlen, "raw_request is for the reference client only");
    return -1;
  }
  return 0;
}

/* Unpacks the request messages, each of which must be of the method's
   request type. */
static int unpack_messages(cc_rpc *r, char *err, size_t errlen) {
  const ProtobufCMessageDescriptor *in = r->m->method->input;
  const CompatRequest *req = r->req;
  size_t i;
  conch_stream_kind kind = r->m->method->kind;

  if ((kind == CONCH_STREAM_UNARY || kind == CONCH_STREAM_SERVER) &&
      req->n_request_messages != 1) {
    snprintf(err, errlen, "%s needs exactly one request message, not %zu",
             r->m->method->path, req->n_request_messages);
    return -1;
  }
  r->msgs = xmalloc(req->n_request_messages * sizeof(*r->msgs));
  for (i = 0; i < req->n_request_messages; i++) {
    const Google__Protobuf__Any *a = req->request_messages[i];
    /* The type is what follows the type URL's last '/'. */
    const char *slash = strrchr(a->type_url, '/');
    const char *type = slash != NULL ? slash + 1 : a->type_url;
    if (strcmp(type, in->name) != 0) {
      snprintf(err, errlen, "request message %zu is a %s, not a %s", i + 1,
               type, in->name);
      return -1;
    }
    r->msgs[i] =
        protobuf_c_message_unpack(in, NULL, a->value.len, a->value.data);
    if (r->msgs[i] == NULL) {
      snprintf(err, errlen, "request message %zu is not a valid %s", i + 1,
               in->name);
      return -1;
    }
    r->nmsgs++;
  }
  return 0;
}

/* The request metadata; "-bin" values arrive base64-encoded, as they
   travel, and conch wants them decoded. */
static conch_metadata *request_headers(const CompatRequest *req, char *err,
                                       size_t errlen) {
  conch_metadata *md;
  size_t i, j;
  int rv = conch_metadata_new(&md, NULL);
  if (rv != 0) {
    snprintf(err, errlen, "metadata: %s", conch_strerror(rv));
    return NULL;
  }
  for (i = 0; i < req->n_request_headers; i++) {
    const Header *h = req->request_headers[i];
    for (j = 0; j < h->n_value; j++) {
      if (is_bin(h->name)) {
        uint8_t *bytes = xmalloc(strlen(h->value[j]) + 1);
        long n = b64_decode(h->value[j], bytes);
        rv = n >= 0 ? conch_metadata_add(md, h->name, bytes, (size_t)n)
                    : CONCH_ERR_HEADER;
        free(bytes);
      } else {
        rv = conch_metadata_add_str(md, h->name, h->value[j]);
      }
      if (rv != 0) {
        snprintf(err, errlen, "request header '%s': %s", h->name,
                 conch_strerror(rv));
        conch_metadata_free(md);
        return NULL;
      }
    }
  }
  return md;
}

static void set_cancel(cc_rpc *r) {
  const Connectrpc__Conformance__V1__ClientCompatRequest__Cancel *c =
      r->req->cancel;
  if (c == NULL) {
    return;
  }
  switch (c->cancel_timing_case) {
  case TIMING(BEFORE_CLOSE_SEND):
    r->cancel = CANCEL_BEFORE_CLOSE_SEND;
    break;
  case TIMING(AFTER_NUM_RESPONSES):
    r->cancel = CANCEL_AFTER_RESPONSES;
    r->cancel_arg = c->after_num_responses;
    break;
  case TIMING(AFTER_CLOSE_SEND_MS):
    r->cancel = CANCEL_AFTER_CLOSE_SEND;
    r->cancel_arg = c->after_close_send_ms;
    break;
  default:
    /* A Cancel without a timing: right after the half-close. */
    r->cancel = CANCEL_AFTER_CLOSE_SEND;
    r->cancel_arg = 0;
    break;
  }
}

/* Starts the call.  Returns 0, or -1 with |err| set (nothing started). */
static int start(cc_rpc *r, char *err, size_t errlen) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_client *c;
  conch_metadata *md;
  int rv;

  c = cc_app_client(r->app, r->req, err, errlen);
  if (c == NULL) {
    return -1;
  }
  md = request_headers(r->req, err, errlen);
  if (md == NULL) {
    return -1;
  }
  opts.headers = md;
  /* GET only where it may be: Connect unary of a NO_SIDE_EFFECTS method
     (conch decides; anything else goes as POST). */
  opts.http_get = r->req->use_get_http_method;
  if (r->req->_timeout_ms_case == PRESENT(TIMEOUT_MS_TIMEOUT_MS)) {
    /* conch reads 0 as "no deadline"; a zero timeout is one that has
       already passed, so make it the shortest one. */
    opts.timeout_ms = r->req->timeout_ms > 0 ? (long)r->req->timeout_ms : 1;
  }
  rv = r->m->start(c, &opts, &r->h, r, r->nmsgs > 0 ? r->msgs[0] : NULL,
                   &r->call);
  conch_metadata_free(md);
  if (rv != 0) {
    snprintf(err, errlen, "cannot start %s: %s", r->m->method->path,
             conch_strerror(rv));
    return -1;
  }
  return 0;
}

cc_rpc *cc_rpc_run(cc_app *app, CompatRequest *req) {
  cc_rpc *r = xmalloc(sizeof(*r));
  char err[512];
  conch_stream_kind kind;

  memset(r, 0, sizeof(*r));
  r->app = app;
  r->req = req;
  err[0] = '\0';
  if (check_supported(req, err, sizeof(err)) != 0) {
    goto fail;
  }
  r->m = pick_method(req, err, sizeof(err));
  if (r->m == NULL) {
    goto fail;
  }
  if (unpack_messages(r, err, sizeof(err)) != 0) {
    goto fail;
  }
  kind = r->m->method->kind;
  r->full_duplex = req->stream_type == STREAM_TYPE(FULL_DUPLEX_BIDI_STREAM);
  set_cancel(r);
  if (start(r, err, sizeof(err)) != 0) {
    goto fail;
  }
  if (kind == CONCH_STREAM_UNARY || kind == CONCH_STREAM_SERVER) {
    /* _start sent the request and half-closed. */
    r->nsent = 1;
    r->ph = PHASE_RECV;
    if (r->cancel == CANCEL_AFTER_CLOSE_SEND) {
      arm(r, (long)r->cancel_arg, cancel_alarm);
    }
  } else {
    r->ph = PHASE_SEND;
    step(r);
  }
  return r;

fail:
  cc_write_error(app, req->test_name, "%s", err);
  cc_rpc_free(r);
  return NULL;
}

void cc_rpc_free(cc_rpc *r) {
  size_t i;
  if (r == NULL) {
    return;
  }
  conch_call_free(r->call);
  for (i = 0; i < r->nmsgs; i++) {
    protobuf_c_message_free_unpacked(r->msgs[i], NULL);
  }
  free(r->msgs);
  for (i = 0; i < r->npayloads; i++) {
    connectrpc__conformance__v1__conformance_payload__free_unpacked(
        r->payloads[i], NULL);
  }
  free(r->payloads);
  connectrpc__conformance__v1__client_compat_request__free_unpacked(r->req,
                                                                    NULL);
  free(r);
}
