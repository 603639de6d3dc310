/* Connect, gRPC and gRPC-Web, server side, on one HTTP/2 stream
   (CONNECT_PROTOCOL.md 1-2, 5.1, 6, 8): request validation in the order
   connect-go applies it, unary bodies and streamed envelopes in, responses
   out with the status -> HTTP mapping, error JSON and end-stream JSON.
   gRPC and gRPC-Web requests (content type application/grpc[-web][+codec])
   are enveloped for every shape; their status goes out as grpc-status and
   grpc-message in HTTP/2 trailers (gRPC) or in a trailer frame at the end
   of the body (gRPC-Web, which so also works over HTTP/1.1).
   Both codecs are served, as envd (connect-go) serves them: proto
   (application/proto, application/connect+proto) and JSON
   (application/json, application/connect+json, also with
   "; charset=utf-8"), the proto3 JSON mapping of runtime/pbjson*.c, which is
   what the E2B SDKs speak.  A response uses the request's codec and its
   content type as connect-go canonicalizes it.  The JSON codec works on
   whole messages: it allocates per message and decodes (Start, Connect:
   unpacks the packed event, then writes it out) once per subscriber. */
#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "base64.h"
#include "mem_int.h"
#include "pbjson.h"
#include "status_int.h"
#include "wire.h"

#define DEFAULT_KEEPALIVE_MS 90000
#define MAX_KEEPALIVE_S 1000000000LL

static const char unauthorized_body[] =
    "{\"code\":401,\"message\":\"unauthorized access, please provide a valid "
    "access token or method signing if supported\"}\n";

/* The content types served (wire.h names them canonically, connect-go's
   form): proto, and JSON with and without the charset.  The 415 answer
   lists them as connect-go does, sorted. */
static const char *const accept_post[2] = {
    "application/json, application/json; charset=utf-8, application/proto",
    "application/connect+json, application/connect+json; charset=utf-8, "
    "application/connect+proto"};

static void on_deadline(srv_timer *t);
static void on_keepalive(srv_timer *t);
static void on_recv_timeout(srv_timer *t);

srv_server *srv_rpc_server(const srv_stream *st) { return st->conn->srv; }

size_t srv_rpc_queued(const srv_stream *st) {
  return conch__buf_size(&st->out);
}

srv_stream *srv_rpc_stream_new(srv_conn *c, int32_t id) {
  srv_stream *st = calloc(1, sizeof(*st));

  if (st == NULL) {
    return NULL;
  }
  st->conn = c;
  st->id = id;
  st->keepalive_ms = DEFAULT_KEEPALIVE_MS;
  srv_timer_init(&st->deadline_t, on_deadline);
  srv_timer_init(&st->keepalive_t, on_keepalive);
  srv_timer_init(&st->recv_t, on_recv_timeout);
  if (srv_timer_arm(&c->srv->loop, &st->recv_t,
                    srv_now_ms() + c->srv->cfg.header_ms) != 0) {
    free(st);
    return NULL;
  }
  conch__list_push(&c->streams, &st->link);
  srv_conn_streams_changed(c);
  return st;
}

/* Records that |st| holds |held| request bytes.  Returns 0, or -1 (nothing
   changed) when growing would take the server past --max-buffered-bytes:
   many connections, each under its own cap, may not add up to more. */
static int set_held(srv_stream *st, size_t held) {
  srv_conn *c = st->conn;
  srv_server *srv = c->srv;

  if (held > st->held &&
      srv->buffered - st->held + held > srv->cfg.max_buffered) {
    return -1;
  }
  srv->buffered = srv->buffered - st->held + held;
  c->buffered = c->buffered - st->held + held;
  st->held = held;
  /* One connection may not hold more than its share of memory in
     half-received messages; a client that tries is cut off. */
  if (c->buffered > srv->cfg.conn_buffered && !c->dead) {
    nghttp2_session_terminate_session(c->h2, NGHTTP2_ENHANCE_YOUR_CALM);
    srv_conn_kick(c);
  }
  return 0;
}

static void over_budget(srv_stream *st) {
  srv_server *srv = st->conn->srv;

  conch__buf_free(&st->body, srv->mem);
  if (st->env_ready) {
    conch__env_reader_clear(&st->env);
    st->env_ready = 0;
  }
  set_held(st, 0);
  srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                 "server busy: requests being received hold more than %zu "
                 "bytes",
                 srv->cfg.max_buffered);
}

void srv_rpc_stream_free(srv_stream *st) {
  srv_conn *c = st->conn;
  srv_server *srv = st->conn->srv;
  char **h[] = {&st->h_method,   &st->h_path,      &st->h_ctype,
                &st->h_encoding, &st->h_accept,    &st->h_version,
                &st->h_timeout,  &st->h_keepalive, &st->h_auth,
                &st->h_token,    &st->h_authority, &st->h_gencoding,
                &st->h_gaccept,  &st->h_gtimeout};
  size_t i;

  srv_service_stream_gone(st);
  srv_timer_cancel(&srv->loop, &st->deadline_t);
  srv_timer_cancel(&srv->loop, &st->keepalive_t);
  srv_timer_cancel(&srv->loop, &st->recv_t);
  set_held(st, 0);
  /* Bytes a paused stream held back count against the connection's
     window too: without them back, a few streams reset while paused
     leave the connection no window for any request body. */
  if (st->unconsumed > 0 && !st->conn->dead) {
    nghttp2_session_consume_connection(st->conn->h2, st->unconsumed);
    srv_conn_kick(st->conn);
  }
  for (i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
    free(*h[i]);
  }
  conch__free(srv->mem, st->end_msg);
  conch__buf_free(&st->body, srv->mem);
  conch__buf_free(&st->out, srv->mem);
  if (st->env_ready) {
    conch__env_reader_clear(&st->env);
  }
  if (st->req != NULL) {
    protobuf_c_message_free_unpacked(st->req, NULL);
  }
  srv_user_clear(&st->user);
  conch__list_remove(&st->link);
  free(st);
  srv_conn_streams_changed(c);
}

/* ---- Request headers ---------------------------------------------------- */

static int name_is(const uint8_t *name, size_t len, const char *want) {
  return strlen(want) == len && memcmp(name, want, len) == 0;
}

static int keep(char **slot, const uint8_t *v, size_t n) {
  char *s;

  if (*slot != NULL) {
    return 0; /* the first one counts */
  }
  s = malloc(n + 1);
  if (s == NULL) {
    return -1;
  }
  memcpy(s, v, n);
  s[n] = '\0';
  *slot = s;
  return 0;
}

static char **header_slot(srv_stream *st, const uint8_t *name, size_t len) {
  int streaming = st->m != NULL && st->m->shape != SRV_UNARY;

  if (name_is(name, len, ":method")) {
    return &st->h_method;
  }
  if (name_is(name, len, ":path")) {
    return &st->h_path;
  }
  if (name_is(name, len, "content-type")) {
    return &st->h_ctype;
  }
  if (name_is(name, len,
              streaming ? "connect-content-encoding" : "content-encoding")) {
    return &st->h_encoding;
  }
  if (name_is(name, len,
              streaming ? "connect-accept-encoding" : "accept-encoding")) {
    return &st->h_accept;
  }
  if (name_is(name, len, "connect-protocol-version")) {
    return &st->h_version;
  }
  if (name_is(name, len, "connect-timeout-ms")) {
    return &st->h_timeout;
  }
  if (name_is(name, len, "grpc-encoding")) {
    return &st->h_gencoding;
  }
  if (name_is(name, len, "grpc-accept-encoding")) {
    return &st->h_gaccept;
  }
  if (name_is(name, len, "grpc-timeout")) {
    return &st->h_gtimeout;
  }
  if (name_is(name, len, "keepalive-ping-interval")) {
    return &st->h_keepalive;
  }
  if (name_is(name, len, "authorization")) {
    return &st->h_auth;
  }
  if (name_is(name, len, "x-access-token")) {
    return &st->h_token;
  }
  if (name_is(name, len, ":authority") || name_is(name, len, "host")) {
    return &st->h_authority;
  }
  return NULL;
}

int srv_rpc_header(srv_stream *st, const uint8_t *name, size_t namelen,
                   const uint8_t *value, size_t valuelen) {
  char **slot;

  st->hdr_bytes += namelen + valuelen + 32;
  if (st->hdr_bytes > SRV_HDR_MAX) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  slot = header_slot(st, name, namelen);
  if (slot == NULL) {
    return 0;
  }
  if (keep(slot, value, valuelen) != 0) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  /* Pseudo-headers come first: once the path is known, so is the shape,
     and with it which encoding headers apply. */
  if (slot == &st->h_path) {
    char *q = strchr(st->h_path, '?');

    if (q != NULL) {
      *q = '\0';
    }
    st->m = srv_service_route(st->h_path);
  }
  return 0;
}

/* ---- Responses ----------------------------------------------------------- */

static void stream_reset(srv_stream *st) {
  srv_conn *c = st->conn;

  st->finished = 1;
  if (!c->dead) {
    nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                              NGHTTP2_INTERNAL_ERROR);
    srv_conn_kick(c);
  }
}

static void out_ready(srv_stream *st) {
  srv_conn *c = st->conn;

  if (st->deferred && !c->dead) {
    st->deferred = 0;
    nghttp2_session_resume_data(c->h2, st->id);
  }
  srv_conn_kick(c);
}

/* Submits the response HEADERS; the body comes from |st->out|.  |extra|
   is one more header (name, value) or NULL. */
static int respond(srv_stream *st, int status, const char *ctype,
                   const char *encoding_name, const char *encoding,
                   const char *const *extra, int with_body) {
  nghttp2_nv nva[4];
  size_t n = 0;
  char code[8];
  nghttp2_data_provider prd;
  int rv;

#define NV(k, v)                                                               \
  do {                                                                         \
    nva[n].name = (uint8_t *)(k);                                              \
    nva[n].namelen = strlen(k);                                                \
    nva[n].value = (uint8_t *)(v);                                             \
    nva[n].valuelen = strlen(v);                                               \
    nva[n].flags = NGHTTP2_NV_FLAG_NONE;                                       \
    n++;                                                                       \
  } while (0)

  snprintf(code, sizeof(code), "%d", status);
  NV(":status", code);
  if (ctype != NULL) {
    NV("content-type", ctype);
  }
  if (encoding != NULL) {
    NV(encoding_name, encoding);
  }
  if (extra != NULL) {
    NV(extra[0], extra[1]);
  }
#undef NV
  prd.source.ptr = st;
  prd.read_callback = srv_rpc_read_out;
  rv = nghttp2_submit_response(st->conn->h2, st->id, nva, n,
                               with_body ? &prd : NULL);
  if (rv != 0) {
    stream_reset(st);
    return -1;
  }
  st->started = 1;
  srv_conn_kick(st->conn);
  return 0;
}

/* A response that is not a Connect message: health, 401, 404, 405, 415. */
static void respond_plain(srv_stream *st, int status, const char *ctype,
                          const char *body, const char *const *extra) {
  srv_server *srv = st->conn->srv;

  st->rejected = 1;
  st->finished = 1;
  /* A stranger gets header_ms to take the answer: one that never opens
     its flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0) would
     otherwise keep the stream, and its connection, forever. */
  if (srv_timer_arm(&srv->loop, &st->recv_t,
                    srv_now_ms() + srv->cfg.header_ms) != 0) {
    stream_reset(st);
    return;
  }
  if (body != NULL &&
      conch__buf_append(&st->out, srv->mem, body, strlen(body)) != 0) {
    stream_reset(st);
    return;
  }
  respond(st, status, ctype, NULL, NULL, extra, body != NULL);
}

static int start_stream(srv_stream *st) {
  if (st->started) {
    return 0;
  }
  return respond(st, 200, st->ctype,
                 st->proto == SRV_CONNECT ? "connect-content-encoding"
                                          : "grpc-encoding",
                 st->resp_gzip ? "gzip" : NULL, NULL, 1);
}

/* Appends one envelope, gzipped when that pays. */
static int queue_envelope(srv_stream *st, uint8_t flags, const uint8_t *p,
                          size_t len) {
  srv_server *srv = st->conn->srv;
  conch_buf z = CONCH_BUF_INIT;
  uint8_t prefix[CONCH_ENV_PREFIX];
  int rv;

  if (st->resp_gzip && len >= srv->cfg.compress_min) {
    rv = conch__gzip_deflate(&srv->gz, -1, p, len, &z);
    if (rv != 0) {
      conch__buf_free(&z, srv->mem);
      return -1;
    }
    flags |= CONCH_ENV_COMPRESSED;
    p = conch__buf_head(&z);
    len = conch__buf_size(&z);
  }
  conch__env_write_prefix(prefix, flags, (uint32_t)len);
  rv = conch__buf_append(&st->out, srv->mem, prefix, sizeof(prefix));
  if (rv == 0 && len > 0) {
    rv = conch__buf_append(&st->out, srv->mem, p, len);
  }
  conch__buf_free(&z, srv->mem);
  return rv;
}

/* Whether the request and response messages go in envelopes: all of
   them but Connect unary ones. */
static int enveloped(const srv_stream *st) {
  return st->proto != SRV_CONNECT || st->m->shape != SRV_UNARY;
}

static int send_payload(srv_stream *st, const uint8_t *p, size_t len) {
  if (start_stream(st) != 0) {
    return -1;
  }
  if (queue_envelope(st, 0, p, len) != 0) {
    stream_reset(st);
    return -1;
  }
  out_ready(st);
  return 0;
}

static int send_json(srv_stream *st, const ProtobufCMessage *msg);

int srv_rpc_send_packed(srv_stream *st, const uint8_t *p, size_t len) {
  ProtobufCMessage *msg;
  int rv;

  if (st->finished || st->conn->dead) {
    return 0;
  }
  if (!st->json) {
    return send_payload(st, p, len);
  }
  /* Packed once for every subscriber; written as JSON for each one. */
  msg = protobuf_c_message_unpack(st->m->output, NULL, len, p);
  if (msg == NULL) {
    stream_reset(st);
    return -1;
  }
  rv = send_json(st, msg);
  protobuf_c_message_free_unpacked(msg, NULL);
  return rv;
}

static int send_unary(srv_stream *st, const uint8_t *p, size_t len) {
  srv_server *srv = st->conn->srv;
  const char *enc = NULL;
  int rv;

  if (st->resp_gzip && len >= srv->cfg.compress_min) {
    rv = conch__gzip_deflate(&srv->gz, -1, p, len, &st->out);
    enc = "gzip";
  } else {
    rv = conch__buf_append(&st->out, srv->mem, p, len);
  }
  if (rv != 0) {
    stream_reset(st);
    return -1;
  }
  st->finished = 1;
  srv_service_stream_gone(st);
  return respond(st, 200, st->ctype, "content-encoding", enc, NULL, 1);
}

/* One response message: a Connect unary body, or an envelope (which ends
   a gRPC unary call). */
static int send_message(srv_stream *st, const uint8_t *p, size_t len) {
  if (!enveloped(st)) {
    return send_unary(st, p, len);
  }
  if (send_payload(st, p, len) != 0) {
    return -1;
  }
  if (st->m->shape == SRV_UNARY) {
    srv_rpc_finish(st, CONCH_CODE_OK, NULL);
  }
  return 0;
}

/* Writes |msg| as proto3 JSON and sends that as the unary response or as
   one stream message. */
static int send_json(srv_stream *st, const ProtobufCMessage *msg) {
  srv_server *srv = st->conn->srv;
  conch_buf b = CONCH_BUF_INIT;
  char err[256];
  int rv = conch__pbjson_encode(msg, srv->mem, &b, err, sizeof(err));

  if (rv == CONCH_ERR_NOMEM) {
    conch__buf_free(&b, srv->mem);
    stream_reset(st);
    return -1;
  }
  if (rv != 0) {
    /* connect-go: a message the codec cannot write ends the call. */
    conch__buf_free(&b, srv->mem);
    srv_rpc_finish(st, CONCH_CODE_INTERNAL, "marshal message: %s", err);
    return -1;
  }
  rv = send_message(st, conch__buf_head(&b), conch__buf_size(&b));
  conch__buf_free(&b, srv->mem);
  return rv;
}

int srv_rpc_send(srv_stream *st, const ProtobufCMessage *msg) {
  size_t len;
  uint8_t stackbuf[512];
  uint8_t *p;
  int rv;

  if (st->finished || st->conn->dead) {
    return 0;
  }
  if (st->json) {
    return send_json(st, msg);
  }
  len = protobuf_c_message_get_packed_size(msg);
  p = len <= sizeof(stackbuf) ? stackbuf : malloc(len);
  if (p == NULL) {
    stream_reset(st);
    return -1;
  }
  protobuf_c_message_pack(msg, p);
  rv = send_message(st, p, len);
  if (p != stackbuf) {
    free(p);
  }
  return rv;
}

/* The status of a finished call, borrowing |msg|. */
static conch_status status_of(conch_code code, const char *msg) {
  conch_status st;

  conch_status_init(&st);
  st.code = code;
  st.message = (char *)msg;
  return st;
}

static void finish_unary_error(srv_stream *st, conch_code code,
                               const char *msg) {
  srv_server *srv = st->conn->srv;
  conch_status status = status_of(code, msg);
  int http = conch__http_from_code(code);

  if (conch__connect_error_write(&st->out, srv->mem, &status) != 0) {
    stream_reset(st);
    return;
  }
  st->finished = 1;
  st->unary_err_status = http;
  respond(st, http, "application/json", NULL, NULL, NULL, 1);
}

/* gRPC-Web's trailer frame: "grpc-status: 0\r\n" and grpc-message. */
static int grpc_web_trailers(srv_stream *st, conch_code code,
                             const char *msg) {
  srv_server *srv = st->conn->srv;
  char line[32];
  int n = snprintf(line, sizeof(line), "grpc-status: %d\r\n", (int)code);
  int rv = conch__buf_append(&st->out, srv->mem, line, (size_t)n);

  if (rv == 0 && msg != NULL) {
    rv = conch__buf_append(&st->out, srv->mem, "grpc-message: ", 14);
    if (rv == 0) {
      rv = conch__buf_append(&st->out, srv->mem, msg, strlen(msg));
    }
    if (rv == 0) {
      rv = conch__buf_append(&st->out, srv->mem, "\r\n", 2);
    }
  }
  return rv;
}

static void finish_stream(srv_stream *st, conch_code code, const char *msg) {
  srv_server *srv = st->conn->srv;
  conch_status status = status_of(code, msg);
  uint8_t prefix[CONCH_ENV_PREFIX];
  uint8_t flag = CONCH_ENV_END_STREAM;
  char *pct = NULL;
  size_t at;
  int rv = 0;

  if (start_stream(st) != 0) {
    stream_reset(st);
    return;
  }
  if (st->proto != SRV_CONNECT && msg != NULL && msg[0] != '\0' &&
      conch__grpc_message_encode(msg, strlen(msg), srv->mem, &pct) != 0) {
    stream_reset(st);
    return;
  }
  if (st->proto == SRV_GRPC) {
    /* The trailers go out once the body is written (srv_rpc_read_out). */
    st->end_code = code;
    st->end_msg = pct;
    st->finished = 1;
    out_ready(st);
    return;
  }
  /* The end block goes uncompressed: flag 0x02 (Connect) or 0x80
     (gRPC-Web) alone; its length is known once it is written. */
  at = st->out.len;
  rv = conch__buf_append(&st->out, srv->mem, prefix, sizeof(prefix));
  if (rv == 0 && st->proto == SRV_GRPC_WEB) {
    flag = CONCH_ENV_TRAILERS;
    rv = grpc_web_trailers(st, code, pct);
  } else if (rv == 0) {
    rv = conch__connect_end_write(&st->out, srv->mem, &status, NULL);
  }
  conch__free(srv->mem, pct);
  if (rv != 0) {
    stream_reset(st);
    return;
  }
  conch__env_write_prefix(st->out.data + at, flag,
                          (uint32_t)(st->out.len - at - sizeof(prefix)));
  st->finished = 1;
  out_ready(st);
}

void srv_rpc_vfinish(srv_stream *st, conch_code code, const char *fmt,
                     va_list ap) {
  char msg[1024];

  if (st->finished || st->conn->dead) {
    return;
  }
  msg[0] = '\0';
  if (fmt != NULL) {
    vsnprintf(msg, sizeof(msg), fmt, ap);
  }
  srv_service_stream_gone(st);
  srv_timer_cancel(&st->conn->srv->loop, &st->deadline_t);
  srv_timer_cancel(&st->conn->srv->loop, &st->keepalive_t);
  if (st->m == NULL || !enveloped(st)) {
    if (code != CONCH_CODE_OK) {
      finish_unary_error(st, code, msg);
    }
    return;
  }
  finish_stream(st, code, msg);
}

void srv_rpc_finish(srv_stream *st, conch_code code, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  srv_rpc_vfinish(st, code, fmt, ap);
  va_end(ap);
}

/* gRPC's trailers: grpc-status, and grpc-message when there is one.
   Returns 0, or -1 when they could not be queued (the DATA then ends the
   stream, and the client sees a missing status). */
static int send_trailers(nghttp2_session *s, srv_stream *st) {
  char code[8];
  nghttp2_nv nva[2];
  size_t n = 1;

  snprintf(code, sizeof(code), "%d", (int)st->end_code);
  nva[0].name = (uint8_t *)"grpc-status";
  nva[0].namelen = 11;
  nva[0].value = (uint8_t *)code;
  nva[0].valuelen = strlen(code);
  nva[0].flags = NGHTTP2_NV_FLAG_NONE;
  if (st->end_msg != NULL) {
    nva[1].name = (uint8_t *)"grpc-message";
    nva[1].namelen = 12;
    nva[1].value = (uint8_t *)st->end_msg;
    nva[1].valuelen = strlen(st->end_msg);
    nva[1].flags = NGHTTP2_NV_FLAG_NONE;
    n = 2;
  }
  return nghttp2_submit_trailer(s, st->id, nva, n) != 0 ? -1 : 0;
}

ssize_t srv_rpc_read_out(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *user_data) {
  srv_stream *st = src->ptr;
  srv_server *srv = st->conn->srv;
  size_t avail = conch__buf_size(&st->out);
  size_t n = avail < len ? avail : len;

  (void)id;
  (void)user_data;
  if (n > 0) {
    memcpy(buf, conch__buf_head(&st->out), n);
    conch__buf_consume(&st->out, n);
  }
  if (conch__buf_size(&st->out) == 0) {
    /* A burst is over: give its memory back. */
    if (st->out.cap > 64 * 1024) {
      conch__buf_free(&st->out, srv->mem);
    }
    if (st->finished) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (st->proto == SRV_GRPC && send_trailers(s, st) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    } else if (n == 0) {
      st->deferred = 1;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  if (st->over && conch__buf_size(&st->out) <= srv->cfg.out_low) {
    srv_proc_sub_drained(st);
  }
  return (ssize_t)n;
}

static void on_deadline(srv_timer *t) {
  srv_stream *st = CONCH_CONTAINER(t, srv_stream, deadline_t);

  srv_rpc_finish(st, CONCH_CODE_DEADLINE_EXCEEDED, "context deadline exceeded");
}

static void on_keepalive(srv_timer *t) {
  srv_stream *st = CONCH_CONTAINER(t, srv_stream, keepalive_t);

  srv_service_keepalive(st);
}

/* The request timer runs while the client owes us bytes: its header block
   (header_ms from the first HEADERS frame), then a unary or server-stream
   request's whole body, or each message of a client stream from its first
   byte (body_ms).  It does not run while we hold the input back, nor once
   the request is in: answering takes as long as it takes. */
static void recv_update(srv_stream *st) {
  srv_server *srv = st->conn->srv;
  int want;

  if (!st->headers_in) {
    return;
  }
  if (st->req_done || st->finished || st->conn->dead) {
    want = 0;
  } else if (st->m == NULL || st->m->shape != SRV_CLIENT_STREAM) {
    want = 1;
  } else {
    want = st->env_ready && !st->input_paused &&
           !conch__env_reader_at_boundary(&st->env);
  }
  if (!want) {
    srv_timer_cancel(&srv->loop, &st->recv_t);
  } else if (!srv_timer_armed(&st->recv_t) &&
             srv_timer_arm(&srv->loop, &st->recv_t,
                           srv_now_ms() + srv->cfg.body_ms) != 0) {
    stream_reset(st);
  }
}

static void on_recv_timeout(srv_timer *t) {
  srv_stream *st = CONCH_CONTAINER(t, srv_stream, recv_t);
  srv_conn *c = st->conn;
  srv_server *srv = c->srv;

  /* A header block that never ends blocks the whole connection (nothing
     but CONTINUATION may follow it). */
  if (!st->headers_in) {
    srv_conn_close(c);
    return;
  }
  conch__buf_free(&st->body, srv->mem);
  set_held(st, 0);
  if (st->finished) {
    nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
    srv_conn_kick(c);
    return;
  }
  srv_rpc_finish(st, CONCH_CODE_DEADLINE_EXCEEDED,
                 "request message not received within %lld ms",
                 (long long)srv->cfg.body_ms);
}

void srv_rpc_pause_input(srv_stream *st, int paused) {
  size_t n;

  if (paused || !st->input_paused) {
    st->input_paused = paused;
    recv_update(st);
    return;
  }
  st->input_paused = 0;
  recv_update(st);
  n = st->unconsumed;
  st->unconsumed = 0;
  srv_conn_consume(st->conn, st->id, n);
}

/* ---- Validation of the request headers ----------------------------------- */

static int token_ok(const srv_stream *st, const char *want) {
  size_t n = strlen(want);

  return st->h_token != NULL && strlen(st->h_token) == n &&
         CRYPTO_memcmp(st->h_token, want, n) == 0;
}

/* Connect-Timeout-Ms (wire.h).  Returns 0 or -1 with the message
   connect-go gives. */
static int parse_timeout(srv_stream *st, char *err, size_t errlen) {
  const char *v = st->proto == SRV_CONNECT ? st->h_timeout : st->h_gtimeout;
  int rv;

  if (v == NULL) {
    return 0;
  }
  if (st->proto != SRV_CONNECT) {
    rv = conch__grpc_timeout_parse(v, strlen(v), &st->timeout_ms);
    if (rv != 0) {
      snprintf(err, errlen, "malformed grpc-timeout: \"%s\"", v);
      return -1;
    }
    return 0;
  }
  rv = conch__connect_timeout_parse(v, strlen(v), &st->timeout_ms);
  if (rv == CONCH_TIMEOUT_TOO_LONG) {
    snprintf(err, errlen, "parse timeout: \"%s\" has >10 digits", v);
  } else if (rv != 0) {
    snprintf(err, errlen,
             "parse timeout: strconv.ParseInt: parsing \"%s\": invalid "
             "syntax",
             v);
  }
  return rv != 0 ? -1 : 0;
}

/* Keepalive-Ping-Interval, seconds: missing or not a number gives the
   default (as envd); zero or negative is refused (envd crashes). */
static int parse_keepalive(srv_stream *st, char *err, size_t errlen) {
  const char *v = st->h_keepalive;
  char *end;
  long long s;

  if (v == NULL || st->m->shape != SRV_SERVER_STREAM) {
    return 0;
  }
  errno = 0;
  s = strtoll(v, &end, 10);
  if (end == v || *end != '\0' || (errno != 0 && s != LLONG_MIN)) {
    return 0;
  }
  if (s <= 0) {
    snprintf(err, errlen,
             "invalid Keepalive-Ping-Interval '%s': must be a positive "
             "number of seconds",
             v);
    return -1;
  }
  if (s > MAX_KEEPALIVE_S) {
    s = MAX_KEEPALIVE_S;
  }
  st->keepalive_ms = s * 1000;
  return 0;
}

/* Accept lists: comma-separated, optional spaces, no q-values. */
static int accepts_gzip(const char *v) {
  while (v != NULL && *v != '\0') {
    size_t n;

    while (*v == ' ' || *v == ',') {
      v++;
    }
    n = strcspn(v, ", ");
    if (n == 4 && strncasecmp(v, "gzip", 4) == 0) {
      return 1;
    }
    v += n;
  }
  return 0;
}

static int parse_encodings(srv_stream *st, char *err, size_t errlen) {
  int grpc = st->proto != SRV_CONNECT;
  const char *e = grpc ? st->h_gencoding : st->h_encoding;

  if (e != NULL && e[0] != '\0' && strcmp(e, "identity") != 0) {
    if (strcmp(e, "gzip") != 0) {
      snprintf(err, errlen,
               "unknown compression \"%s\": supported encodings are gzip", e);
      return -1;
    }
    st->req_gzip = 1;
  }
  st->resp_gzip = accepts_gzip(grpc ? st->h_gaccept : st->h_accept);
  return 0;
}

/* Authorization: Basic base64("user:password"), as Go's BasicAuth reads it:
   anything else means "no user given". */
static char *basic_user(const char *auth) {
  static const char prefix[] = "Basic ";
  size_t n;
  uint8_t *raw;
  size_t rawlen;
  uint8_t *colon;
  char *user;

  if (auth == NULL || strncasecmp(auth, prefix, sizeof(prefix) - 1) != 0) {
    return NULL;
  }
  auth += sizeof(prefix) - 1;
  n = strlen(auth);
  raw = malloc(conch__b64_decoded_max(n) + 1);
  if (raw == NULL) {
    return NULL;
  }
  if (conch__b64_decode(auth, n, CONCH_B64_STD, raw, &rawlen) != 0) {
    free(raw);
    return NULL;
  }
  colon = memchr(raw, ':', rawlen);
  if (colon == NULL) {
    free(raw);
    return NULL;
  }
  user = malloc((size_t)(colon - raw) + 1);
  if (user != NULL) {
    memcpy(user, raw, (size_t)(colon - raw));
    user[colon - raw] = '\0';
  }
  free(raw);
  return user;
}

static conch_code resolve_user(srv_stream *st, char *err, size_t errlen) {
  char *name = basic_user(st->h_auth);
  int rv;

  if (name == NULL && st->conn->srv->cfg.default_user != NULL) {
    rv = srv_user_lookup(st->conn->srv->cfg.default_user, &st->user);
  } else if (name == NULL) {
    rv = srv_user_by_uid(st->conn->srv->euid, &st->user);
  } else {
    rv = srv_user_lookup(name, &st->user);
    if (rv == -1) {
      snprintf(err, errlen, "invalid username: '%s'", name);
    }
    free(name);
  }
  if (rv == -1) {
    if (name == NULL) {
      snprintf(err, errlen, "invalid default user");
    }
    return CONCH_CODE_UNAUTHENTICATED;
  }
  if (rv != 0) {
    snprintf(err, errlen, "out of memory");
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  }
  st->have_user = 1;
  return CONCH_CODE_OK;
}

/* The Connect-level checks, after routing.  Errors from here on are
   Connect errors (unary: HTTP status + JSON; streams: end-stream). */
static void check_connect(srv_stream *st) {
  srv_server *srv = st->conn->srv;
  char err[512];
  conch_code code;

  if (st->proto == SRV_CONNECT && st->h_version != NULL &&
      strcmp(st->h_version, "1") != 0) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                   "connect-protocol-version must be \"1\": got \"%s\"",
                   st->h_version);
    return;
  }
  if (parse_timeout(st, err, sizeof(err)) != 0 ||
      parse_encodings(st, err, sizeof(err)) != 0) {
    code = strncmp(err, "unknown compression", 19) == 0
               ? CONCH_CODE_UNIMPLEMENTED
               : CONCH_CODE_INVALID_ARGUMENT;
    srv_rpc_finish(st, code, "%s", err);
    return;
  }
  code = resolve_user(st, err, sizeof(err));
  if (code != CONCH_CODE_OK) {
    srv_rpc_finish(st, code, "%s", err);
    return;
  }
  if (parse_keepalive(st, err, sizeof(err)) != 0) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT, "%s", err);
    return;
  }
  if ((st->proto == SRV_CONNECT ? st->h_timeout : st->h_gtimeout) != NULL) {
    if (st->timeout_ms == 0) {
      srv_rpc_finish(st, CONCH_CODE_DEADLINE_EXCEEDED,
                     "context deadline exceeded");
      return;
    }
    srv_timer_arm(&srv->loop, &st->deadline_t, srv_now_ms() + st->timeout_ms);
  }
  if (enveloped(st)) {
    conch__env_reader_init(&st->env, srv->mem, CONCH_ENV_COMPRESSED,
                           (uint32_t)srv->cfg.max_message);
    st->env_ready = 1;
  }
}

/* Picks the codec from the content type, which connect-go compares after
   canonicalizing it (wire.h parses it as Go's mime package does): the
   only parameter served is charset=utf-8, on JSON.  Sets |st->json| and
   the canonical |st->ctype|; returns 0, or -1 for a 415. */
static int accept_ctype(srv_stream *st) {
  conch_ctype ct;
  int family = st->m->shape != SRV_UNARY ? CONCH_CT_CONNECT_STREAM
                                         : CONCH_CT_CONNECT;

  if (st->h_ctype == NULL ||
      conch__ctype_parse(st->h_ctype, strlen(st->h_ctype), &ct) != 0) {
    return -1;
  }
  /* gRPC and gRPC-Web, any shape: parameters are not looked at, and the
     response names the codec as the client does. */
  if (ct.family == CONCH_CT_GRPC || ct.family == CONCH_CT_GRPC_WEB) {
    st->ctype = conch__ctype_name(ct.family, ct.codec, 0);
    if (st->ctype == NULL) {
      return -1;
    }
    st->proto = ct.family == CONCH_CT_GRPC ? SRV_GRPC : SRV_GRPC_WEB;
    st->json = ct.codec == CONCH_CT_JSON;
    return 0;
  }
  if (ct.family != family || ct.params == CONCH_CT_BAD_PARAMS) {
    return -1;
  }
  st->ctype = conch__ctype_name(family, ct.codec, ct.params == CONCH_CT_UTF8);
  st->json = ct.codec == CONCH_CT_JSON;
  return st->ctype != NULL ? 0 : -1;
}

void srv_rpc_headers_done(srv_stream *st) {
  srv_server *srv = st->conn->srv;
  const char *method = st->h_method != NULL ? st->h_method : "";
  const char *path = st->h_path != NULL ? st->h_path : "";
  int health = strcmp(path, "/health") == 0 &&
               (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);

  st->headers_in = 1;
  srv_timer_cancel(&srv->loop, &st->recv_t);
  if (srv->cfg.host_check && !srv_authority_ok(srv, st->h_authority)) {
    respond_plain(st, 403, "text/plain; charset=utf-8",
                  "403 forbidden: the Host is not a loopback name\n", NULL);
    return;
  }
  if (srv->cfg.access_token != NULL && !health &&
      !token_ok(st, srv->cfg.access_token)) {
    respond_plain(st, 401, "application/json; charset=utf-8", unauthorized_body,
                  NULL);
    return;
  }
  if (!health) {
    st->conn->authed = 1;
  }
  if (health) {
    respond_plain(st, 204, NULL, NULL, NULL);
    return;
  }
  if (st->m == NULL) {
    respond_plain(st, 404, "text/plain; charset=utf-8", "404 page not found\n",
                  NULL);
    return;
  }
  if (strcmp(method, "POST") != 0) {
    static const char *const allow[] = {"allow", "POST"};

    respond_plain(st, 405, NULL, NULL, allow);
    return;
  }
  if (accept_ctype(st) != 0) {
    const char *const accept[] = {"accept-post",
                                  accept_post[st->m->shape != SRV_UNARY]};

    respond_plain(st, 415, NULL, NULL, accept);
    return;
  }
  check_connect(st);
  recv_update(st);
}

/* ---- Request bodies ------------------------------------------------------ */

static int inflate_msg(srv_stream *st, const uint8_t **p, size_t *len,
                       conch_buf *tmp) {
  srv_server *srv = st->conn->srv;
  int rv;

  if (*len == 0) {
    return 0; /* empty content is never inflated */
  }
  rv = conch__gzip_inflate(&srv->gz, *p, *len, srv->cfg.max_message, tmp);
  if (rv == CONCH_ERR_LIMIT) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                   "message is larger than configured max %zu",
                   srv->cfg.max_message);
    return -1;
  }
  if (rv != 0) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                   "decompress: gzip: invalid or truncated data");
    return -1;
  }
  *p = conch__buf_head(tmp);
  *len = conch__buf_size(tmp);
  return 0;
}

static ProtobufCMessage *decode_json(srv_stream *st, const uint8_t *p,
                                     size_t len) {
  ProtobufCMessage *msg = NULL;
  char err[512];
  int rv;

  /* The parse tree costs up to ~50 times the text ("[[],[],...]" is a
     node per 3 bytes): the values are counted before any tree is built. */
  if (conch__json_values(p, len) > CONCH_JSON_MAX_VALUES) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                   "JSON request has more than %d values",
                   CONCH_JSON_MAX_VALUES);
    return NULL;
  }
  rv = conch__pbjson_decode(st->m->input, p, len, NULL, &msg, err, sizeof(err));
  if (rv == CONCH_ERR_NOMEM) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  if (rv != 0) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT, "unmarshal into %s: %s",
                   st->m->input->name, err);
    return NULL;
  }
  return msg;
}

static int utf8_valid(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);

  while (n > 0) {
    size_t k = conch__utf8_seq(p, n);
    if (k == 0) {
      return 0;
    }
    p += k;
    n -= k;
  }
  return 1;
}

/* The first string field of |m| (nested messages, repeated fields and
   map entries included) that is not UTF-8, or NULL.  proto3 strings must
   be UTF-8: envd (protobuf-go) refuses a request with one, and a string
   that is not would later make JSON answers (List) impossible. */
static const ProtobufCFieldDescriptor *
bad_utf8(const ProtobufCMessage *m, const ProtobufCMessageDescriptor **owner) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  unsigned i;

  for (i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *base = (const char *)m;
    const void *at = base + f->offset;
    size_t n = 1, j;

    if (f->type != PROTOBUF_C_TYPE_STRING &&
        f->type != PROTOBUF_C_TYPE_MESSAGE) {
      continue;
    }
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
        *(const uint32_t *)(base + f->quantifier_offset) != f->id) {
      continue;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      n = *(const size_t *)(base + f->quantifier_offset);
      at = *(void *const *)at;
    }
    for (j = 0; j < n; j++) {
      const void *v = f->label == PROTOBUF_C_LABEL_REPEATED
                          ? ((void *const *)at)[j]
                          : *(void *const *)at;
      if (v == NULL) {
        continue;
      }
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        if (!utf8_valid(v)) {
          *owner = d;
          return f;
        }
      } else {
        const ProtobufCFieldDescriptor *bad = bad_utf8(v, owner);
        if (bad != NULL) {
          return bad;
        }
      }
    }
  }
  return NULL;
}

/* Decodes one request message; NULL after answering the error. */
static ProtobufCMessage *decode(srv_stream *st, const uint8_t *p, size_t len,
                                int compressed) {
  srv_server *srv = st->conn->srv;
  conch_buf tmp = CONCH_BUF_INIT;
  ProtobufCMessage *msg = NULL;

  if (compressed && !st->req_gzip) {
    srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                   "protocol error: sent compressed message without "
                   "compression support");
    return NULL;
  }
  if (compressed && inflate_msg(st, &p, &len, &tmp) != 0) {
    conch__buf_free(&tmp, srv->mem);
    return NULL;
  }
  if (st->json && len > 0) {
    msg = decode_json(st, p, len);
    conch__buf_free(&tmp, srv->mem);
    return msg;
  }
  if (st->json && !enveloped(st)) {
    /* Empty envelopes are empty messages whatever the codec; an empty
       unary body is not JSON (connect-go's codec says so). */
    conch__buf_free(&tmp, srv->mem);
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                   "unmarshal into %s: zero-length payload is not a valid "
                   "JSON object",
                   st->m->input->name);
    return NULL;
  }
  msg = protobuf_c_message_unpack(st->m->input, NULL, len, p);
  conch__buf_free(&tmp, srv->mem);
  if (msg == NULL) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                   "unmarshal into %s: invalid wire-format data",
                   st->m->input->name);
    return NULL;
  }
  {
    const ProtobufCMessageDescriptor *owner = NULL;
    const ProtobufCFieldDescriptor *bad = bad_utf8(msg, &owner);
    if (bad != NULL) {
      srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                     "unmarshal into %s: proto: field %s.%s contains invalid "
                     "UTF-8",
                     st->m->input->name, owner->name, bad->name);
      protobuf_c_message_free_unpacked(msg, NULL);
      return NULL;
    }
  }
  return msg;
}

static int on_envelope(void *user_data, uint8_t flags, const uint8_t *payload,
                       size_t len) {
  srv_stream *st = user_data;
  ProtobufCMessage *msg;

  if (st->finished) {
    return 1;
  }
  msg = decode(st, payload, len, (flags & CONCH_ENV_COMPRESSED) != 0);
  if (msg == NULL) {
    return 1;
  }
  st->nreq++;
  if (st->m->shape != SRV_CLIENT_STREAM) {
    if (st->nreq > 1) {
      protobuf_c_message_free_unpacked(msg, NULL);
      srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED,
                     "unary request has multiple messages");
      return 1;
    }
    st->req = msg;
    return 0;
  }
  st->m->on_message(st, msg);
  protobuf_c_message_free_unpacked(msg, NULL);
  return st->finished ? 1 : 0;
}

static void data_unary(srv_stream *st, const uint8_t *p, size_t n) {
  srv_server *srv = st->conn->srv;

  if (conch__buf_size(&st->body) + n > srv->cfg.max_message) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                   "message size %zu is larger than configured max %zu",
                   conch__buf_size(&st->body) + n, srv->cfg.max_message);
    conch__buf_free(&st->body, srv->mem);
    set_held(st, 0);
    return;
  }
  if (set_held(st, conch__buf_size(&st->body) + n) != 0) {
    over_budget(st);
    return;
  }
  if (conch__buf_append(&st->body, srv->mem, p, n) != 0) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
}

static void data_stream(srv_stream *st, const uint8_t *p, size_t n) {
  srv_server *srv = st->conn->srv;
  int rv = conch__env_reader_feed(&st->env, p, n, on_envelope, st);

  if (rv == CONCH_ERR_LIMIT) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                   "message is larger than configured max %zu",
                   srv->cfg.max_message);
  } else if (rv == CONCH_ERR_PROTO) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                   "protocol error: invalid envelope flags");
  } else if (rv == CONCH_ERR_NOMEM) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (set_held(st, st->finished ? 0 : conch__buf_size(&st->env.body)) != 0) {
    over_budget(st);
  }
  recv_update(st);
}

void srv_rpc_data(srv_stream *st, const uint8_t *p, size_t n) {
  if (!st->finished && !st->rejected && st->m != NULL) {
    if (!enveloped(st)) {
      data_unary(st, p, n);
    } else {
      data_stream(st, p, n);
    }
  }
  if (st->input_paused && !st->finished) {
    st->unconsumed += n;
    return;
  }
  srv_conn_consume(st->conn, st->id, n);
}

static void end_unary(srv_stream *st) {
  srv_server *srv = st->conn->srv;
  ProtobufCMessage *msg;

  msg = decode(st, conch__buf_head(&st->body), conch__buf_size(&st->body),
               st->req_gzip);
  conch__buf_free(&st->body, srv->mem);
  set_held(st, 0);
  if (msg == NULL) {
    return;
  }
  st->m->on_message(st, msg);
  protobuf_c_message_free_unpacked(msg, NULL);
}

void srv_rpc_request_end(srv_stream *st) {
  ProtobufCMessage *msg;

  st->req_done = 1;
  /* (A rejected request keeps its timer: see respond_plain().) */
  if (!st->rejected) {
    srv_timer_cancel(&st->conn->srv->loop, &st->recv_t);
  }
  if (st->finished || st->rejected || st->m == NULL) {
    return;
  }
  if (!enveloped(st)) {
    end_unary(st);
    return;
  }
  set_held(st, 0);
  if (!conch__env_reader_at_boundary(&st->env)) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT,
                   "protocol error: incomplete envelope");
    return;
  }
  if (st->m->shape == SRV_CLIENT_STREAM) {
    st->m->on_end(st);
    return;
  }
  if (st->req == NULL) {
    srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED,
                   "unary request has zero messages");
    return;
  }
  msg = st->req;
  st->req = NULL;
  st->m->on_message(st, msg);
  protobuf_c_message_free_unpacked(msg, NULL);
}
