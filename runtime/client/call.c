/* Calls: lifecycle, sending, delivery of messages (pushed to handlers or
   queued for pull), flow-control credit, and the exactly-once end. */
#include <string.h>

#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "compress.h"
#include "conn_int.h"
#include "envelope.h"
#include "intercept.h"
#include "list.h"
#include "pbborrow.h"
#include "pbdec.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "pbjson.h"
#include "pool.h"
#include "protocol.h"
#include "retry.h"
#include "session.h"
#include "status_int.h"
#include "timer.h"

/* A send returns CONCH_ERR_AGAIN while this much waits; on_send_ready fires
   when it drains below half. */
#define SEND_HIGH_WATER (1u << 20)

/* ---- Handlers ----------------------------------------------------------- */

static void enter(conch_call *call) { call->in_handler++; }

/* Returns non-zero when |call| was released: the caller must not touch it
   again.  Only the end of on_close can release (a call freed inside an
   earlier handler is canceled here and released after its on_close). */
static int leave(conch_call *call) {
  call->in_handler--;
  if (call->in_handler == 0 && call->user_freed) {
    if (!call->finished) {
      conch__call_fail(call, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                       "call freed by the application");
    }
    return conch__call_maybe_release(call);
  }
  return 0;
}

/* A Connect stream's headers come before its end-stream message says
   whether it failed, and so do gRPC-Web's over HTTP/1.1 (no trailers-only
   form there): under a retry policy they wait for the first message or
   the end (conch/retry.h). */
static int hold_headers(const conch_call *call) {
  conch_protocol p = call->client->o.protocol;
  if (call->http != NULL) {
    return 0;
  }
  return p == CONCH_PROTOCOL_GRPC_WEB ||
         (p == CONCH_PROTOCOL_CONNECT &&
          call->method->kind != CONCH_STREAM_UNARY);
}

void conch__call_emit_headers(conch_call *call) {
  if (call->rp != NULL && !call->committed) {
    if (hold_headers(call) && !call->ending) {
      call->hdrs_held = 1;
      return;
    }
    call->committed = 1;
  }
  if (call->ir != NULL && !call->finished) {
    conch__icept_headers(call);
  }
  if (call->h.on_headers == NULL || call->finished) {
    return;
  }
  enter(call);
  call->h.on_headers(call, &call->headers, call->user_data);
  leave(call);
}

/* Runs on_close once.  Returns non-zero when |call| was released. */
static int deliver_close(conch_call *call) {
  conch__list_remove(&call->done_link);
  if (call->closed_cb) {
    return 0;
  }
  call->closed_cb = 1;
  if (call->auto_free) {
    call->user_freed = 1; /* released after on_close, as if freed there */
  }
  if (call->h.on_close != NULL) {
    enter(call);
    call->h.on_close(call, &call->status, &call->trailers, call->user_data);
    return leave(call);
  }
  return conch__call_maybe_release(call);
}

void conch__client_run_done(conch_client *c) {
  while (!conch__list_empty(&c->done)) {
    conch_call *call = CONCH_CONTAINER(c->done.next, conch_call, done_link);
    deliver_close(call);
  }
  while (!conch__list_empty(&c->ready)) {
    conch_call *call = CONCH_CONTAINER(c->ready.next, conch_call, ready_link);
    conch__list_remove(&call->ready_link);
    if (!call->finished && call->h.on_send_ready != NULL) {
      enter(call);
      call->h.on_send_ready(call, call->user_data);
      leave(call);
    }
  }
}

/* ---- Lifecycle ---------------------------------------------------------- */

static void pull_clear(conch_call *call) {
  conch_client *c = call->client;
  while (call->qlen > 0) {
    conch_qmsg *m = &call->q[call->qhead];
    if (m->msg != NULL) {
      protobuf_c_message_free_unpacked(m->msg, &c->pb_alloc);
    }
    conch__free(c->mem, m->gz);
    call->qhead = (call->qhead + 1) % call->qcap;
    call->qlen--;
  }
  call->qhead = 0; /* the queue's array stays, for a spare call */
  conch__buf_free(&call->rawq, c->mem);
  conch__buf_free(&call->rawcur, c->mem);
}

/* Released calls are kept for reuse, at most CALL_SPARE_MAX per client,
   with the memory of their send buffer and metadata when it is small: a
   steady flow of calls then allocates nothing of its own for them. */
#define CALL_SPARE_MAX 64
#define CALL_KEEP_BYTES 1024
#define CALL_KEEP_QUEUE 8 /* pull-queue slots a spare call keeps */

/* Empties |md|, keeping its memory unless it grew large. */
static void md_keep(conch_metadata *md) {
  if (md->strings.cap > CALL_KEEP_BYTES || md->cap > 16) {
    conch__metadata_clear(md);
  } else {
    conch_metadata_reset(md);
  }
}

static void buf_keep(conch_buf *b, const conch_mem *mem) {
  if (b->cap > CALL_KEEP_BYTES) {
    conch__buf_free(b, mem);
  } else {
    conch__buf_reset(b);
  }
}

static void call_free_memory(conch_call *call) {
  const conch_mem *mem = call->client->mem;
  conch__metadata_clear(&call->req_headers);
  conch__metadata_clear(&call->headers);
  conch__metadata_clear(&call->trailers);
  conch__metadata_clear(&call->gfields[0]);
  conch__metadata_clear(&call->gfields[1]);
  conch__buf_free(&call->sendbuf, mem);
  conch__buf_free(&call->body, mem);
  conch__free(mem, call->q);
  conch__free(mem, call->ir);
  conch__free(mem, call);
}

void conch__call_destroy(conch_call *call) {
  conch_client *c = call->client;

  if (call->conn != NULL && call->stream_live) {
    /* Only from conch_client_free: the session must not call back. */
    call->conn->ops->forget(call->conn, call);
  }
  conch__list_remove(&call->client_link);
  conch__proto_unlend(call);
  conch__conn_unbind(call);
  conch__list_remove(&call->queue_link);
  conch__list_remove(&call->done_link);
  conch__list_remove(&call->ready_link);
  conch__timer_disarm(c, &call->deadline);
  conch__timer_disarm(c, &call->retry_timer);
  conch__env_reader_clear(&call->reader);
  pull_clear(call);
  conch_status_clear(&call->status);
  conch__free(c->mem, call->http); /* one block with its strings */
  call->http = NULL;
  if (call->ir != NULL) {
    conch__icept_done(call); /* its block stays with a spare call */
  }
  if (c->nspare < CALL_SPARE_MAX) {
    /* Kept for the next call, with its small buffers. */
    md_keep(&call->req_headers);
    md_keep(&call->headers);
    md_keep(&call->trailers);
    md_keep(&call->gfields[0]);
    md_keep(&call->gfields[1]);
    buf_keep(&call->sendbuf, c->mem);
    buf_keep(&call->body, c->mem);
    if (call->qcap > CALL_KEEP_QUEUE) {
      conch__free(c->mem, call->q);
      call->q = NULL;
      call->qcap = 0;
    }
    call->spare_next = c->spare_calls;
    c->spare_calls = call;
    c->nspare++;
    return;
  }
  call_free_memory(call);
}

void conch__call_spares_free(conch_client *c) {
  while (c->spare_calls != NULL) {
    conch_call *call = c->spare_calls;
    c->spare_calls = call->spare_next;
    call_free_memory(call);
  }
  c->nspare = 0;
}

/* A zeroed call: a spare one (keeping the memory of its buffers and
   metadata) or a new one.  NULL when out of memory. */
static conch_call *call_take(conch_client *c) {
  conch_call *call = c->spare_calls;
  if (call != NULL) {
    conch_buf sendbuf = call->sendbuf, body = call->body;
    conch_qmsg *q = call->q;
    size_t qcap = call->qcap;
    struct conch_icept_run *ir = call->ir; /* the same client's: its size */
    conch_metadata md[5];
    md[0] = call->req_headers;
    md[1] = call->headers;
    md[2] = call->trailers;
    md[3] = call->gfields[0];
    md[4] = call->gfields[1];
    c->spare_calls = call->spare_next;
    c->nspare--;
    memset(call, 0, sizeof(*call));
    call->sendbuf = sendbuf;
    call->body = body;
    call->q = q; /* empty */
    call->qcap = qcap;
    call->ir = ir; /* reused by conch__icept_start(), else freed with it */
    call->req_headers = md[0];
    call->headers = md[1];
    call->trailers = md[2];
    call->gfields[0] = md[3];
    call->gfields[1] = md[4];
    return call;
  }
  call = conch__calloc(c->mem, 1, sizeof(*call));
  if (call != NULL) {
    conch__metadata_init(&call->req_headers, c->mem);
    conch__metadata_init(&call->headers, c->mem);
    conch__metadata_init(&call->trailers, c->mem);
    conch__metadata_init(&call->gfields[0], c->mem);
    conch__metadata_init(&call->gfields[1], c->mem);
  }
  return call;
}

int conch__call_maybe_release(conch_call *call) {
  if (call->user_freed && call->closed_cb && !call->stream_live &&
      call->in_handler == 0) {
    conch__call_destroy(call);
    return 1;
  }
  return 0;
}

/* Gives back the stream-window credit not held by queued messages (none
   while the reader has paused the call, unless it ended). */
static void credit(conch_call *call) {
  size_t n;
  if (call->unconsumed <= call->held || (call->paused && !call->finished)) {
    return;
  }
  n = call->unconsumed - call->held;
  call->unconsumed = call->held;
  if (call->conn != NULL) {
    conch__conn_consume(call->conn, call, n);
  }
}

/* Settles the call: status is final, the stream is let go, on_close is
   queued.  Idempotent. */
static void call_end(conch_call *call) {
  conch_client *c = call->client;
  if (call->finished || call->ending) {
    return;
  }
  if (call->rp != NULL) {
    if (conch__retry_next(call)) {
      return; /* another attempt follows */
    }
    conch__timer_disarm(c, &call->retry_timer);
    call->retry_wait = 0;
    if (call->hdrs_held) {
      /* This attempt's end is the call's: its headers come first, unless
         the application ended it. */
      call->hdrs_held = 0;
      call->committed = 1;
      if (call->status.origin != CONCH_ORIGIN_LOCAL) {
        call->ending = 1;
        conch__call_emit_headers(call);
        call->ending = 0;
      }
    }
  }
  if (call->hp != NULL) {
    conch__hedge_end(call); /* its kids go */
  }
  if ((call->rp != NULL || call->hp != NULL) &&
      call->status.code == CONCH_CODE_OK) {
    conch__retry_success(c); /* the throttle gains */
  }
  call->finished = 1;
  if (call->ir != NULL) {
    conch__icept_close(call); /* the status is final: theirs to change */
  }
  conch__timer_disarm(c, &call->deadline);
  conch__list_remove(&call->queue_link);
  conch__list_remove(&call->ready_link);
  if (call->conn != NULL && call->submitted && call->stream_live) {
    int local_closed = call->conn->ops->sent_all(call->conn, call);
    if (!(call->remote_ended && local_closed)) {
      /* After a complete response we only stop sending; anything else is
         an abandoned stream. */
      conch__conn_reset(call->conn, call,
                        call->remote_ended ? NGHTTP2_NO_ERROR : NGHTTP2_CANCEL);
    }
  }
  /* The stream is gone or going: no reason to hold its window. */
  call->held = 0;
  credit(call);
  if (!call->submitted) {
    conch__conn_unbind(call);
  }
  conch__list_push(&c->done, &call->done_link);
  conch__client_kick(c);
}

void conch__call_fail(conch_call *call, conch_code code, int local_err,
                      const char *fmt, ...) {
  va_list ap;
  if (call->finished || call->ending) {
    return;
  }
  va_start(ap, fmt);
  conch__status_vset(&call->status, call->client->mem, code, CONCH_ORIGIN_LOCAL,
                     local_err, fmt, ap);
  va_end(ap);
  call_end(call);
}

void conch__call_finish(conch_call *call) { call_end(call); }

void conch__call_end_with(conch_call *call, conch_status *st) {
  if (call->finished || call->ending) {
    conch_status_clear(st);
    return;
  }
  if (call->status.code == CONCH_CODE_OK) {
    conch_status_clear(&call->status);
    call->status = *st;
    conch_status_init(st);
  } else {
    conch_status_clear(st);
  }
  call_end(call);
}

void conch__call_on_deadline(conch_call *call) {
  conch__call_fail(call, CONCH_CODE_DEADLINE_EXCEEDED, CONCH_ERR_TIMEOUT,
                   "deadline exceeded");
}

/* ---- Start -------------------------------------------------------------- */

/* Request metadata is checked up front; a bad entry ends the call with
   internal before anything is sent. */
int conch__call_check_headers(conch_call *call) {
  const conch_metadata *md = &call->req_headers;
  size_t i;
  for (i = 0; i < md->n; i++) {
    const char *name = (const char *)md->strings.data + md->ents[i].name_off;
    size_t nlen = md->ents[i].name_len;
    const uint8_t *v = md->strings.data + md->ents[i].value_off;
    if (!conch__metadata_name_ok(name, nlen)) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_HEADER,
                       "invalid request header name '%.*s'", (int)nlen, name);
      return -1;
    }
    if (conch__metadata_reserved(name, nlen)) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_HEADER,
                       "request header '%.*s' is reserved for the protocol",
                       (int)nlen, name);
      return -1;
    }
    if (!conch__metadata_is_bin(name, nlen) &&
        !conch__metadata_value_ok(v, md->ents[i].value_len)) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_HEADER,
                       "invalid value for request header '%.*s'", (int)nlen,
                       name);
      return -1;
    }
  }
  return 0;
}

static uint8_t allowed_flags(conch_protocol p) {
  switch (p) {
  case CONCH_PROTOCOL_GRPC:
    return CONCH_ENV_FLAGS_GRPC;
  case CONCH_PROTOCOL_GRPC_WEB:
    return CONCH_ENV_FLAGS_GRPC_WEB;
  default:
    return CONCH_ENV_FLAGS_CONNECT;
  }
}

/* The envelope reader of a call's response, for the client's protocol and
   receive limit (a new call, or a new attempt). */
static void reader_init(conch_call *call) {
  const conch_client *c = call->client;
  uint32_t max_len =
      c->o.recv_limit > 0xffffffffu ? 0 : (uint32_t)c->o.recv_limit;
  conch__env_reader_init(&call->reader, c->mem, allowed_flags(c->o.protocol),
                         max_len);
  /* A message split over reads is copied once, into its whole size. */
  conch__env_reader_reserve_declared(&call->reader);
}

/* Makes a started call, not yet bound to a connection.  Returns 0 with
   |*out| set (the call may already have ended, e.g. on bad metadata), or an
   error with nothing allocated. */
static int call_create(conch_client *c, const conch_method *method,
                       const conch_call_opts *opts,
                       const conch_call_handler *handler, void *user_data,
                       conch_call **out) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  const conch_retry_policy *rp;
  const conch_hedge_policy *hp;
  conch_call *call;
  int rv;

  if (c == NULL || method == NULL || method->path == NULL || out == NULL ||
      method->path[0] != '/' || (int)method->kind < 0 ||
      method->kind > CONCH_STREAM_BIDI) {
    return CONCH_ERR_INVALID;
  }
  if (opts != NULL) {
    size_t n = opts->struct_size < sizeof(o) ? opts->struct_size : sizeof(o);
    if (n < sizeof(size_t)) {
      return CONCH_ERR_INVALID;
    }
    memcpy(&o, opts, n);
    o.struct_size = sizeof(o);
  }
  if (o.timeout_ms < 0 || o.deadline_grace_ms < 0 ||
      (o.send_compression != CONCH_COMPRESSION_DEFAULT &&
       !conch__comp_valid(&c->o.comp, o.send_compression))) {
    return CONCH_ERR_INVALID;
  }
  /* A call under a retry or hedging policy may have its backoff (or its
     next hedge) armed with its deadline. */
  {
    const conch_retry_entry *e =
        c->o.nretry != 0 ? conch__retry_lookup(c, method) : NULL;
    rp = e != NULL && !e->hedge ? &e->p : NULL;
    hp = e != NULL && e->hedge && conch__hedge_applies(&e->h, method)
             ? &e->h
             : NULL;
  }
  rv = conch__timer_reserve(c, rp != NULL || hp != NULL ? 2 : 1);
  if (rv != 0) {
    return rv;
  }
  call = call_take(c);
  if (call == NULL) {
    return CONCH_ERR_NOMEM;
  }
  call->client = c;
  call->method = method;
  if (handler != NULL) {
    call->h = *handler;
  }
  call->user_data = user_data;
  call->pull = call->h.on_message == NULL && call->h.on_raw_message == NULL;
  call->deadline.idx = SIZE_MAX;
  call->deadline.kind = CONCH_TIMER_CALL_DEADLINE;
  call->retry_timer.idx = SIZE_MAX;
  call->retry_timer.kind = CONCH_TIMER_CALL_RETRY;
  call->attempts = 1;
  call->rp = rp;
  call->hp = hp;
  if (hp != NULL) {
    call->attempts = 0; /* its kids are the attempts */
  }
  call->send_comp = o.send_compression == CONCH_COMPRESSION_DEFAULT
                        ? c->o.comp.send
                        : o.send_compression;
  call->auto_free = o.auto_free != 0;
  call->get = o.http_get != 0 && c->o.protocol == CONCH_PROTOCOL_CONNECT &&
              method->kind == CONCH_STREAM_UNARY &&
              method->idempotency == CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS;
  conch_status_init(&call->status);
  call->status.mem = c->mem;
  reader_init(call);
  if (o.headers != NULL) {
    rv = conch_metadata_append(&call->req_headers, o.headers);
    if (rv != 0) {
      conch__call_destroy(call);
      return rv;
    }
  }
  conch__list_push(&c->calls, &call->client_link);
  *out = call;

  if (o.timeout_ms > 0) {
    call->deadline_at = conch__client_now(c) + o.timeout_ms;
    conch__timer_arm(c, &call->deadline,
                     call->deadline_at + o.deadline_grace_ms);
  }
  return 0;
}

void conch__call_queue(conch_call *call) {
  conch_conn *conn;
  if (call->finished) {
    return; /* on_close follows */
  }
  if (call->hp != NULL) {
    call->hedge_queued = 1; /* no stream of its own: its kids' */
    conch__hedge_kick(call);
    return;
  }
  conn = conch__conn_get(call->client, &call->status);
  if (conn == NULL) {
    call_end(call);
    return;
  }
  conch__conn_bind(conn, call);
  conch__list_push(&conn->queue, &call->queue_link);
  conch__conn_mark_dirty(conn);
}

int conch_call_start(conch_client *c, const conch_method *method,
                     const conch_call_opts *opts,
                     const conch_call_handler *handler, void *user_data,
                     conch_call **out) {
  int rv = call_create(c, method, opts, handler, user_data, out);
  if (rv != 0) {
    return rv;
  }
  if (c->o.nicept != 0) { /* interceptors: the chain queues it */
    rv = conch__icept_start(*out);
    if (rv != 0) {
      conch__call_destroy(*out);
      *out = NULL;
    }
    return rv;
  }
  conch__call_check_headers(*out); /* may end it with internal */
  conch__call_queue(*out);
  return 0;
}

int conch__http_start(conch_client *c, const char *verb, const char *target,
                      const char *ctype, const conch_call_opts *opts,
                      const conch_call_handler *handler, void *user_data,
                      conch_call **out) {
  size_t vlen, tlen, clen;
  conch_http_x *x;
  char *p;
  int rv;

  if (c == NULL || verb == NULL || target == NULL || target[0] != '/' ||
      out == NULL) {
    return CONCH_ERR_INVALID;
  }
  vlen = strlen(verb) + 1;
  tlen = strlen(target) + 1;
  clen = ctype != NULL ? strlen(ctype) + 1 : 0;
  x = conch__calloc(c->mem, 1, sizeof(*x) + vlen + tlen + clen);
  if (x == NULL) {
    return CONCH_ERR_NOMEM;
  }
  p = (char *)(x + 1);
  x->verb = memcpy(p, verb, vlen);
  x->method.path = memcpy(p + vlen, target, tlen);
  x->ctype = clen > 0 ? memcpy(p + vlen + tlen, ctype, clen) : NULL;
  x->method.kind = CONCH_STREAM_BIDI; /* the body streams both ways */
  rv = call_create(c, &x->method, opts, handler, user_data, out);
  if (rv != 0) {
    conch__free(c->mem, x);
    return rv;
  }
  (*out)->http = x;
  conch__icept_drop(*out); /* no interceptors for plain exchanges */
  if (strcmp(verb, "GET") == 0 || strcmp(verb, "HEAD") == 0) {
    (*out)->get = 1; /* no body: HEADERS end the request */
    (*out)->send_closed = 1;
  }
  conch__call_check_headers(*out);
  conch__call_queue(*out);
  return 0;
}

int conch__http_status(const conch_call *call) { return call->http_status; }

int conch__call_new_detached(conch_client *c, const conch_method *method,
                             const conch_call_opts *opts,
                             const conch_call_handler *handler, void *user_data,
                             conch_call **out) {
  int rv = call_create(c, method, opts, handler, user_data, out);
  if (rv == 0) {
    conch__icept_drop(*out);
    conch__call_check_headers(*out);
    (*out)->submitted = 1;
    (*out)->submitted_at = conch__now_ms();
  }
  return rv;
}

/* For the commands API's liveness (api/process.c): a call queued behind
   others (HTTP/1.1, no stream free) has not been heard from because it
   has not been sent. */
int64_t conch__call_sent_ms(const conch_call *call) {
  return call->submitted ? call->submitted_at : 0;
}

int conch__call_ready_to_submit(const conch_call *call) {
  if (conch__proto_headers_wait_message(call)) {
    return call->nsent > 0 || call->send_closed;
  }
  return 1;
}

/* ---- Sending ------------------------------------------------------------ */

static int one_message_kind(const conch_call *call) {
  return call->method->kind == CONCH_STREAM_UNARY ||
         call->method->kind == CONCH_STREAM_SERVER;
}

static int send_check(conch_call *call) {
  if (call->finished || call->send_closed) {
    return CONCH_ERR_STATE;
  }
  if (conch__buf_size(&call->sendbuf) >= SEND_HIGH_WATER) {
    if (!call->want_send_ready) {
      call->want_send_ready = 1;
    }
    return CONCH_ERR_AGAIN;
  }
  return 0;
}

static void after_queue(conch_call *call) {
  call->nsent++;
  if (one_message_kind(call)) {
    call->send_closed = 1; /* exactly one message: it also half-closes */
  }
  if (call->conn != NULL) {
    conch__conn_resume(call->conn, call);
  }
  if (call->hp != NULL) {
    conch__hedge_kick(call);
  }
}

static int send_bytes(conch_call *call, const uint8_t *p, size_t n) {
  int rv;
  if (call->ir != NULL &&
      (rv = conch__icept_send(call, &p, &n, SEND_HIGH_WATER)) != 0) {
    if (rv > 0) { /* held until the interceptors let the call go */
      after_queue(call);
      return 0;
    }
    if (rv != CONCH_ERR_NOMEM || !one_message_kind(call)) {
      return rv;
    }
  } else {
    rv = conch__proto_frame_message(call, p, n);
  }
  if (rv != 0) {
    if (rv == CONCH_ERR_NOMEM && one_message_kind(call)) {
      /* The call waits for this one message: without it, it is over. */
      conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                       "out of memory queuing the request");
    }
    return rv;
  }
  after_queue(call);
  return 0;
}

static void json_opts(const conch_client *c, conch_pbjson_opts *jo) {
  jo->resolve = c->o.json_resolve;
  jo->user_data = c->o.json_resolve_ud;
}

/* The JSON codec: |msg| into the client's scratch buffer.  A message that
   cannot be written (an Any whose type does not resolve, a string that is
   not UTF-8, ...) ends the call with internal, naming the reason. */
static int encode_json(conch_call *call, const ProtobufCMessage *msg) {
  conch_client *c = call->client;
  conch_pbjson_opts jo;
  char err[256];
  int rv;

  json_opts(c, &jo);
  rv = conch__pbjson_encode_ex(msg, &jo, c->mem, &c->scratch, err, sizeof(err));
  if (rv == CONCH_ERR_NOMEM) {
    if (one_message_kind(call)) {
      conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                       "out of memory serializing the request");
    }
    return rv;
  }
  if (rv != 0) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_CODEC,
                     "cannot encode %s as JSON: %s", msg->descriptor->name,
                     err);
    return CONCH_ERR_CODEC;
  }
  return 0;
}

int conch_call_send(conch_call *call, const ProtobufCMessage *msg) {
  conch_client *c;
  size_t n;
  int rv;

  if (call == NULL || msg == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (call->method->input == NULL || msg->descriptor != call->method->input) {
    return CONCH_ERR_INVALID;
  }
  rv = send_check(call);
  if (rv != 0) {
    return rv;
  }
  c = call->client;
  conch__buf_reset(&c->scratch);
  if (c->o.codec == CONCH_CODEC_JSON) {
    rv = encode_json(call, msg);
    if (rv != 0) {
      return rv;
    }
    n = conch__buf_size(&c->scratch);
  } else {
    n = protobuf_c_message_get_packed_size(msg);
    rv = conch__buf_reserve(&c->scratch, c->mem, n);
    if (rv != 0) {
      if (one_message_kind(call)) {
        conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                         "out of memory serializing the request");
      }
      return rv;
    }
    if (protobuf_c_message_pack(msg, c->scratch.data) != n) {
      return CONCH_ERR_CODEC;
    }
    c->scratch.len = n;
  }
  rv = send_bytes(
      call, c->scratch.data != NULL ? c->scratch.data : (const uint8_t *)"", n);
  if (c->scratch.cap > (4u << 20)) {
    /* Do not keep a huge scratch buffer after one big message. */
    conch__buf_free(&c->scratch, c->mem);
  }
  return rv;
}

int conch_call_send_raw(conch_call *call, const void *data, size_t len) {
  int rv;
  if (call == NULL || (data == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (call->method->input != NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = send_check(call);
  if (rv != 0) {
    return rv;
  }
  return send_bytes(call, data, len);
}

int conch_call_close_send(conch_call *call) {
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (call->send_closed) {
    return CONCH_ERR_STATE;
  }
  call->send_closed = 1;
  if (call->finished) {
    return 0;
  }
  if (one_message_kind(call) && call->nsent == 0) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_STATE,
                     "a %s call needs exactly one request message",
                     call->method->kind == CONCH_STREAM_UNARY
                         ? "unary"
                         : "server-streaming");
    return 0;
  }
  if (call->conn != NULL) {
    conch__conn_resume(call->conn, call);
  }
  return 0;
}

size_t conch__call_send_pending(const conch_call *call) {
  return conch__buf_size(&call->sendbuf) - call->sent;
}

const uint8_t *conch__call_send_head(const conch_call *call) {
  return conch__buf_head(&call->sendbuf) + call->sent;
}

/* Whether the request bytes given to the session stay in |sendbuf|: for
   another attempt under a retry policy, within its buffer (past it the
   call commits), else for a transparent retry. */
static int keep_sent(conch_call *call, size_t n) {
  if (call->rp != NULL && !call->committed) {
    /* Below the send high water mark, so that a sender waiting for
       on_send_ready is never held up by what is kept. */
    size_t cap = call->rp->buffer_bytes < SEND_HIGH_WATER / 2
                     ? call->rp->buffer_bytes
                     : SEND_HIGH_WATER / 2;
    if (call->sent + n <= cap) {
      return 1;
    }
    call->committed = 1; /* outgrew the buffer: no further attempt */
  }
  return one_message_kind(call) && !call->retried && !call->headers_done;
}

void conch__call_sent(conch_call *call, size_t n) {
  if (keep_sent(call, n)) {
    call->sent += n; /* kept: see conch__call_on_stream_close() */
    return;
  }
  conch__buf_consume(&call->sendbuf, call->sent + n);
  call->sent = 0;
  call->stream_sent += n;
  if (call->want_send_ready &&
      conch__buf_size(&call->sendbuf) < SEND_HIGH_WATER / 2 &&
      !conch__linked(&call->ready_link)) {
    call->want_send_ready = 0;
    conch__list_push(&call->client->ready, &call->ready_link);
  }
}

int conch_call_cancel(conch_call *call) {
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  conch__call_fail(call, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                   "canceled by the application");
  return 0;
}

int conch_call_pause(conch_call *call) {
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  call->paused = 1;
  if (call->hp != NULL && call->winner != NULL) {
    conch_call_pause(call->winner); /* the stream is the winner's */
  }
  return 0;
}

int conch_call_resume(conch_call *call) {
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (call->paused) {
    call->paused = 0;
    if (!call->finished) {
      credit(call);
      conch__client_kick(call->client);
      if (call->hp != NULL) {
        conch__hedge_resume(call);
      }
    }
  }
  return 0;
}

int conch_call_paused(const conch_call *call) {
  return call != NULL && call->paused;
}

void conch_call_free(conch_call *call) {
  if (call == NULL || call->user_freed) {
    return;
  }
  call->user_freed = 1;
  if (call->in_handler > 0) {
    return; /* leave() finishes the job */
  }
  if (!call->finished) {
    conch__call_fail(call, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                     "call freed by the application");
  }
  if (!call->closed_cb && deliver_close(call)) {
    return; /* on_close ran (exactly once, before free returns) */
  }
  conch__call_maybe_release(call);
}

/* ---- Receiving ---------------------------------------------------------- */

int conch__call_inflate(conch_call *call, const uint8_t *p, size_t n,
                        const char *what) {
  conch_client *c = call->client;
  int rv;
  conch__buf_reset(&c->inflbuf);
  rv = conch__comp_decompress(&c->comps, &c->o.comp, call->resp_enc, p, n,
                              c->o.recv_limit, &c->inflbuf);
  if (rv == CONCH_ERR_LIMIT) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                     "%s larger than the receive limit of %zu bytes once "
                     "decompressed",
                     what, c->o.recv_limit);
  } else if (rv == CONCH_ERR_NOMEM) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                     "out of memory decompressing %s", what);
  } else if (rv != 0) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, rv, "invalid %s data in %s",
                     conch__comp_name(&c->o.comp, call->resp_enc), what);
  }
  return rv;
}

void conch__client_shrink_inflbuf(conch_client *c) {
  if (c->inflbuf.cap > (4u << 20)) {
    conch__buf_free(&c->inflbuf, c->mem);
  }
}

static int queue_push(conch_call *call, const conch_qmsg *m) {
  conch_client *c = call->client;
  if (call->qlen == call->qcap) {
    size_t cap = call->qcap ? call->qcap * 2 : 4;
    conch_qmsg *q = conch__malloc(c->mem, cap * sizeof(*q));
    size_t i;
    if (q == NULL) {
      return CONCH_ERR_NOMEM;
    }
    for (i = 0; i < call->qlen; i++) {
      q[i] = call->q[(call->qhead + i) % call->qcap];
    }
    conch__free(c->mem, call->q);
    call->q = q;
    call->qcap = cap;
    call->qhead = 0;
  }
  call->q[(call->qhead + call->qlen) % call->qcap] = *m;
  call->qlen++;
  return 0;
}

/* A queued message holds back stream-window credit for all of its wire
   bytes, including those of earlier chunks that were already credited while
   it was incomplete (partial messages are credited so that one bigger than
   the window can still arrive).  |held| may so exceed |unconsumed|; credit
   then stops until the reader takes messages, which bounds what a slow
   reader queues to about one window plus one message. */
static size_t take_hold(conch_call *call, size_t wire) {
  call->held += wire;
  return wire;
}

/* Decodes |p| as the call's output with the client's codec, allocating
   with |alloc|.  Returns 0, CONCH_ERR_NOMEM (JSON only: protobuf-c does not
   tell) or CONCH_ERR_CODEC with the reason in |err| ("" when none). */
static int decode(conch_call *call, ProtobufCAllocator *alloc, const uint8_t *p,
                  size_t len, ProtobufCMessage **out, char *err,
                  size_t errlen) {
  conch_client *c = call->client;
  err[0] = '\0';
  if (c->o.codec == CONCH_CODEC_JSON) {
    conch_pbjson_opts jo;
    json_opts(c, &jo);
    return conch__pbjson_decode_ex(call->method->output, p, len, &jo, alloc,
                                   out, err, errlen);
  }
  if (alloc == &c->arena_alloc) {
    /* Borrowed by a handler: bytes fields can stay in |p|, which outlives
       the handler too.  The one-pass decoder first; what it leaves (unknown
       fields, merges, invalid input) protobuf-c decodes. */
    *out = conch__pb_decode(call->method->output, alloc, p, len, &c->pbdec);
    if (*out == NULL) {
      *out = conch__pb_unpack_borrow(call->method->output, alloc, p, len,
                                     &c->scratch, c->mem);
    }
  } else {
    *out = protobuf_c_message_unpack(call->method->output, alloc, len, p);
  }
  return *out != NULL ? 0 : CONCH_ERR_CODEC;
}

static int fail_decode(conch_call *call, size_t len, int rv, const char *err) {
  if (rv == CONCH_ERR_NOMEM) {
    return rv; /* conch__call_deliver() says so */
  }
  conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_CODEC,
                   "cannot decode %s (%zu bytes)%s%s",
                   call->method->output->name, len, err[0] ? ": " : "", err);
  return CONCH_ERR_CODEC;
}

/* Checks that |p| decodes, without keeping the result. */
static int decodes(conch_call *call, const uint8_t *p, size_t len) {
  conch_client *c = call->client;
  ProtobufCMessage *msg = NULL;
  char err[256];
  int rv = decode(call, &c->arena_alloc, p, len, &msg, err, sizeof(err));
  conch__arena_reset(c);
  return rv == 0 ? 0 : fail_decode(call, len, rv, err);
}

enum { RAWQ_GZIP = 1 };

/* Pull mode.  |wire|/|wlen| is the payload as received; |p|/|len| the
   same inflated (equal when not compressed). */
static int deliver_pull(conch_call *call, const uint8_t *wire, size_t wlen,
                        const uint8_t *p, size_t len, int compressed) {
  conch_client *c = call->client;
  size_t hold_bytes = wlen + CONCH_ENV_PREFIX;
  int rv;

  if (call->method->output == NULL) {
    /* [u32 len][u32 hold][u32 flags][bytes], the bytes as received. */
    uint32_t hdr[3];
    hdr[0] = (uint32_t)wlen;
    hdr[1] = (uint32_t)hold_bytes;
    hdr[2] = compressed ? RAWQ_GZIP : 0;
    rv = conch__buf_reserve(&call->rawq, c->mem, sizeof(hdr) + wlen);
    if (rv != 0) {
      return rv;
    }
    conch__buf_append(&call->rawq, c->mem, hdr, sizeof(hdr));
    conch__buf_append(&call->rawq, c->mem, wire, wlen);
    take_hold(call, hold_bytes);
    return 0;
  }
  {
    conch_qmsg m = {NULL, NULL, 0, 0, 0};
    if (!compressed && call->unary_raw) {
      /* Decoded when done runs, into the arena (conch__call_take_unary). */
      m.gz = conch__malloc(c->mem, wlen > 0 ? wlen : 1);
      if (m.gz == NULL) {
        return CONCH_ERR_NOMEM;
      }
      if (wlen > 0) {
        memcpy(m.gz, wire, wlen);
      }
      m.gzlen = wlen;
      m.plain = 1;
    } else if (compressed) {
      rv = decodes(call, p, len);
      if (rv != 0) {
        return rv;
      }
      m.gz = conch__memdup(c->mem, wire, wlen);
      if (m.gz == NULL) {
        return CONCH_ERR_NOMEM;
      }
      m.gzlen = wlen;
    } else {
      char err[256];
      rv = decode(call, &c->pb_alloc, p, len, &m.msg, err, sizeof(err));
      if (rv != 0) {
        return fail_decode(call, len, rv, err);
      }
    }
    m.wire = hold_bytes;
    rv = queue_push(call, &m);
    if (rv != 0) {
      protobuf_c_message_free_unpacked(m.msg, &c->pb_alloc);
      conch__free(c->mem, m.gz);
      return rv;
    }
    take_hold(call, hold_bytes);
  }
  return 0;
}

static int deliver_push(conch_call *call, const uint8_t *p, size_t len) {
  conch_client *c = call->client;
  if (call->method->output == NULL) {
    if (call->h.on_raw_message != NULL) {
      enter(call);
      call->h.on_raw_message(call, p, len, call->user_data);
      leave(call);
    }
    return 0;
  }
  {
    ProtobufCMessage *msg = NULL;
    char err[256];
    int rv = decode(call, &c->arena_alloc, p, len, &msg, err, sizeof(err));
    if (rv != 0) {
      conch__arena_reset(c);
      return fail_decode(call, len, rv, err);
    }
    if (call->h.on_message != NULL) {
      enter(call);
      call->h.on_message(call, msg, call->user_data);
      leave(call);
    }
    conch__arena_reset(c);
  }
  return 0;
}

int conch__call_deliver(conch_call *call, const uint8_t *wire, size_t wlen,
                        int compressed) {
  conch_client *c = call->client;
  const uint8_t *p = wire;
  size_t len = wlen;
  int rv;

  if (call->finished) {
    return 1;
  }
  if (call->rp != NULL && !call->committed) {
    call->committed = 1; /* a message reaches the application */
    if (call->hdrs_held) {
      call->hdrs_held = 0;
      conch__call_emit_headers(call);
      if (call->finished) {
        return 1;
      }
    }
  }
  compressed = compressed && wlen > 0; /* empty content is never inflated */
  if (wire == NULL) {
    wire = p = (const uint8_t *)""; /* handlers always get a valid pointer */
  }
  call->nrecv++;
  if (call->nrecv > 1 && (call->method->kind == CONCH_STREAM_UNARY ||
                          call->method->kind == CONCH_STREAM_CLIENT)) {
    /* Held back: the final status decides (a non-OK status wins over the
       cardinality error). */
    return 0;
  }
  if (compressed) {
    if (conch__call_inflate(call, wire, wlen, "response message") != 0) {
      return 1;
    }
    p = c->inflbuf.data != NULL ? c->inflbuf.data : (const uint8_t *)"";
    len = conch__buf_size(&c->inflbuf);
  }
  if (call->hedge_kid) {
    rv = conch__hedge_msg(call, p, len); /* the parent decodes it */
    if (compressed) {
      conch__client_shrink_inflbuf(c);
    }
    return rv;
  }
  if (call->ir != NULL) {
    const uint8_t *was = p;
    if (conch__icept_recv(call, &p, &len) != 0) {
      return 1;
    }
    if (p != was) { /* other bytes: delivered as they are */
      wire = p;
      wlen = len;
      compressed = 0;
    }
  }
  if (call->pull) {
    rv = deliver_pull(call, wire, wlen, p, len, compressed);
  } else {
    call->msg_size = len;
    rv = deliver_push(call, p, len);
    call->msg_size = 0;
  }
  if (compressed) {
    conch__client_shrink_inflbuf(c);
  }
  if (rv == CONCH_ERR_NOMEM) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory receiving a message");
  }
  return call->finished ? 1 : 0;
}

/* ---- From the connection ------------------------------------------------ */

enum { BLK_RESPONSE = 0, BLK_INFO = 1, BLK_TRAILERS = 2 };

/* Remembers where the headers the runtime reads are, as the last field of
   call->headers was just added (its name stored lowercase: compared as
   bytes). */
static void note_header(conch_call *call) {
  const conch_metadata *md = &call->headers;
  const conch_md_entry *e;
  const char *name;
  int which;
  if (md->n == 0) {
    return;
  }
  e = &md->ents[md->n - 1];
  name = (const char *)md->strings.data + e->name_off;
  switch (e->name_len) {
  case 12:
    which = memcmp(name, "content-type", 12) == 0 ? CONCH_H_CTYPE : -1;
    break;
  case 13:
    which = memcmp(name, "grpc-encoding", 13) == 0 ? CONCH_H_GENC : -1;
    break;
  case 16:
    which = memcmp(name, "content-encoding", 16) == 0 ? CONCH_H_CENC : -1;
    break;
  case 24:
    which = memcmp(name, "connect-content-encoding", 24) == 0 ? CONCH_H_CCENC
                                                              : -1;
    break;
  default:
    return;
  }
  if (which >= 0 && call->hpos[which] == 0) {
    call->hpos[which] = (uint32_t)md->n;
  }
}

const char *conch__call_header(const conch_call *call, int which) {
  const conch_metadata *md = &call->headers;
  uint32_t pos = call->hpos[which];
  if (pos == 0 || pos > md->n) {
    return NULL;
  }
  return (const char *)md->strings.data + md->ents[pos - 1].value_off;
}

int conch__call_on_header(conch_call *call, const uint8_t *name, size_t nlen,
                          const uint8_t *value, size_t vlen, int trailer) {
  int rv;
  (void)trailer;
  if (name == NULL) { /* a header block begins */
    call->blk = call->headers_done ? BLK_TRAILERS : BLK_RESPONSE;
    call->blk_bytes = 0;
    return 0;
  }
  if (call->finished || call->retry_wait) {
    return 0;
  }
  call->blk_bytes += nlen + vlen + 32;
  if (call->blk_bytes > call->client->o.max_header_list) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_LIMIT,
                     "response header list larger than %u bytes",
                     (unsigned)call->client->o.max_header_list);
    return -1;
  }
  if (call->blk == BLK_INFO) {
    return 0;
  }
  if (nlen > 0 && name[0] == ':') {
    if (nlen == 7 && memcmp(name, ":status", 7) == 0 &&
        call->blk == BLK_RESPONSE) {
      int st = 0;
      size_t i;
      for (i = 0; i < vlen && i < 3; i++) {
        st = st * 10 + (value[i] - '0');
      }
      call->http_status = st;
      call->status.http_status = st;
      if (st >= 100 && st < 200) {
        call->blk = BLK_INFO;
      }
    }
    return 0;
  }
  if (call->client->o.protocol != CONCH_PROTOCOL_CONNECT &&
      conch__grpc_status_field((const char *)name, nlen)) {
    /* grpc-status & co. are the protocol's, not metadata: kept apart per
       block, because a trailer block overrides the headers. */
    rv = conch__metadata_add_raw(
        &call->gfields[call->blk == BLK_TRAILERS ? 1 : 0], (const char *)name,
        nlen, value, vlen);
  } else if (call->blk == BLK_TRAILERS) {
    rv = conch__metadata_add_wire(&call->trailers, (const char *)name, nlen,
                                  (const char *)value, vlen);
  } else if (call->client->o.protocol == CONCH_PROTOCOL_CONNECT &&
             call->method->kind == CONCH_STREAM_UNARY && nlen > 8 &&
             strncmp((const char *)name, "trailer-", 8) == 0) {
    /* Connect unary trailers travel as prefixed headers. */
    rv = conch__metadata_add_wire(&call->trailers, (const char *)name + 8,
                                  nlen - 8, (const char *)value, vlen);
  } else {
    rv = conch__metadata_add_wire(&call->headers, (const char *)name, nlen,
                                  (const char *)value, vlen);
    if (rv == 0) {
      note_header(call);
    }
  }
  if (rv != 0) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                     "out of memory storing response headers");
    return -1;
  }
  return 0;
}

void conch__call_on_headers_done(conch_call *call, int end_stream) {
  if (call->retry_wait) {
    return; /* the last attempt's stream, on its way out */
  }
  if (call->blk == BLK_INFO) {
    if (end_stream) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                       "informational (1xx) response ended the stream");
    }
    return;
  }
  if (call->blk == BLK_RESPONSE) {
    call->headers_done = 1;
    if (call->sent > 0 && (call->rp == NULL || call->committed)) {
      /* The server answered: the request cannot be refused any more. */
      conch__buf_consume(&call->sendbuf, call->sent);
      call->sent = 0;
    }
    call->got_trailers_only = end_stream;
    if (!call->finished) {
      conch__proto_on_headers(call);
    }
  } else {
    call->got_http_trailers = 1;
  }
  if (end_stream) {
    conch__call_on_remote_end(call);
  }
}

void conch__call_on_data(conch_call *call, const uint8_t *data, size_t len) {
  call->unconsumed += len;
  if (!call->finished && !call->retry_wait) {
    conch__proto_on_data(call, data, len);
  }
  credit(call);
}

void conch__call_on_remote_end(conch_call *call) {
  call->remote_ended = 1;
  if (!call->finished && !call->retry_wait) {
    conch__proto_on_end(call);
  }
}

/* A stream refused unprocessed (RST_STREAM REFUSED_STREAM, or above the
   last stream id of a GOAWAY) is sent once more, on a connection that takes
   new streams, if the whole request is still at hand: a one-message call,
   or a streaming call that has sent nothing yet.  This is gRPC's
   transparent retry; the deadline keeps running.  Returns 0 when the call
   was queued again. */
static int retry(conch_call *call) {
  conch_conn *conn;
  conch_status st;

  if (call->retried || call->headers_done || call->body_bytes > 0) {
    return -1;
  }
  if (!one_message_kind(call) && call->stream_sent > 0) {
    return -1;
  }
  conch_status_init(&st);
  conn = conch__conn_get(call->client, &st);
  if (conn == NULL) {
    conch_status_clear(&st);
    return -1;
  }
  call->retried = 1;
  call->sent = 0;
  call->stream_id = 0;
  call->submitted = 0;
  call->deferred = 0;
  call->stream_live = 0;
  call->http_status = 0;
  call->status.http_status = 0;
  conch__conn_bind(conn, call);
  conch__list_push(&conn->queue, &call->queue_link);
  conch__conn_mark_dirty(conn);
  return 0;
}

/* ---- Retries (retry.c decides) ------------------------------------------ */

void conch__call_park(conch_call *call) {
  conch__list_remove(&call->queue_link);
  conch__list_remove(&call->ready_link);
  if (call->conn != NULL && call->submitted && call->stream_live) {
    if (!(call->remote_ended && call->conn->ops->sent_all(call->conn, call))) {
      conch__conn_reset(call->conn, call, NGHTTP2_CANCEL);
    }
  } else {
    conch__conn_unbind(call);
  }
  /* Nothing of the attempt was queued for the reader (it would have
     committed): its window goes back. */
  call->held = 0;
  credit(call);
}

void conch__call_resend(conch_call *call) {
  conch_client *c = call->client;
  conch_conn *conn;
  conch_status st;

  call->retry_wait = 0;
  call->attempts++;
  /* A fresh response side: nothing of the last one reached anyone. */
  conch_status_clear(&call->status);
  call->status.mem = c->mem;
  conch_metadata_reset(&call->headers);
  conch_metadata_reset(&call->trailers);
  conch_metadata_reset(&call->gfields[0]);
  conch_metadata_reset(&call->gfields[1]);
  memset(call->hpos, 0, sizeof(call->hpos));
  call->http_status = 0;
  call->blk = 0;
  call->blk_bytes = 0;
  call->headers_done = 0;
  call->remote_ended = 0;
  call->got_end = 0;
  call->got_trailers_only = 0;
  call->got_http_trailers = 0;
  call->body_over = 0;
  call->moved_headers = 0;
  call->body_bytes = 0;
  call->resp_enc = CONCH_ENC_IDENTITY;
  call->unconsumed = 0;
  call->held = 0;
  call->nrecv = 0;
  conch__proto_unlend(call);
  conch__buf_reset(&call->body);
  conch__env_reader_clear(&call->reader);
  reader_init(call);
  /* The kept request, from its first byte, on a new stream. */
  call->sent = 0;
  call->stream_id = 0;
  call->submitted = 0;
  call->submitted_at = 0;
  call->deferred = 0;
  call->stream_live = 0;
  conch_status_init(&st);
  conn = conch__conn_get(c, &st);
  if (conn == NULL) {
    conch__call_end_with(call, &st); /* an attempt too: it may retry */
    return;
  }
  conch__conn_bind(conn, call);
  conch__list_push(&conn->queue, &call->queue_link);
  conch__conn_mark_dirty(conn);
}

int conch__call_kid(conch_call *parent, unsigned attempt,
                    const conch_call_handler *h, conch_call **out) {
  conch_client *c = parent->client;
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_call *kid;
  int rv;

  if (parent->deadline_at != 0) {
    int64_t left = parent->deadline_at - conch__client_now(c);
    if (left <= 0) {
      return CONCH_ERR_TIMEOUT;
    }
    o.timeout_ms = (long)left;
  }
  o.headers = &parent->req_headers;
  o.send_compression = parent->send_comp;
  rv = call_create(c, parent->method, &o, h, parent, &kid);
  if (rv != 0) {
    return rv;
  }
  conch__icept_drop(kid); /* the parent's chain runs, once */
  kid->rp = NULL;
  kid->hp = NULL;
  kid->hedge_kid = 1;
  kid->attempts = attempt;
  kid->pull = 0;
  kid->get = parent->get;
  kid->unary_compressed = parent->unary_compressed;
  if (conch__buf_size(&parent->sendbuf) > 0 &&
      conch__buf_append(&kid->sendbuf, c->mem,
                        conch__buf_head(&parent->sendbuf),
                        conch__buf_size(&parent->sendbuf)) != 0) {
    conch__call_destroy(kid);
    return CONCH_ERR_NOMEM;
  }
  kid->nsent = 1;
  kid->send_closed = 1;
  *out = kid;
  conch__call_queue(kid);
  return 0;
}

void conch__call_on_stream_close(conch_call *call, uint32_t h2err) {
  int deadline_passed;
  conch_code code;

  if (call->finished) {
    return;
  }
  if (call->retry_wait) {
    conch__retry_stream_gone(call);
    return;
  }
  if (h2err == NGHTTP2_NO_ERROR) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "stream closed before the response was complete");
    return;
  }
  if (h2err == NGHTTP2_REFUSED_STREAM && retry(call) == 0) {
    return;
  }
  deadline_passed = call->deadline_at != 0 &&
                    conch__client_now(call->client) >= call->deadline_at;
  code = conch__code_from_rst(h2err, deadline_passed);
  if (h2err == NGHTTP2_REFUSED_STREAM) {
    conch__call_fail(call, code, CONCH_ERR_CONNECT,
                     "stream refused by the server (not processed)");
  } else {
    conch__call_fail(call, code, CONCH_ERR_PROTO,
                     "stream reset by the server: %s (0x%x)",
                     nghttp2_http2_strerror(h2err), (unsigned)h2err);
  }
}

/* ---- Pull --------------------------------------------------------------- */

static int pull_end(const conch_call *call) {
  if (!call->finished) {
    return CONCH_ERR_AGAIN;
  }
  return call->status.code == CONCH_CODE_OK ? CONCH_ERR_EOF : CONCH_ERR_RPC;
}

static void give_back(conch_call *call, size_t hold) {
  if (hold == 0) {
    return;
  }
  call->held -= hold;
  if (!call->finished) {
    credit(call);
    conch__client_kick(call->client);
    if (call->hp != NULL) {
      conch__hedge_resume(call);
    }
  }
}

int conch_call_recv(conch_call *call, ProtobufCMessage **msg) {
  conch_client *c;
  conch_qmsg m;
  if (call == NULL || msg == NULL) {
    return CONCH_ERR_INVALID;
  }
  *msg = NULL;
  if (!call->pull || call->method->output == NULL) {
    return CONCH_ERR_STATE;
  }
  if (call->qlen == 0) {
    return pull_end(call);
  }
  c = call->client;
  m = call->q[call->qhead];
  if (m.plain) {
    char err[256];
    int rv = decode(call, &c->pb_alloc, m.gz, m.gzlen, &m.msg, err,
                    sizeof(err));
    if (rv != 0) {
      return rv == CONCH_ERR_NOMEM ? rv : CONCH_ERR_CODEC;
    }
    conch__free(c->mem, m.gz);
  } else if (m.msg == NULL) {
    /* Arrived compressed and was checked then: decode it now. */
    conch__buf_reset(&c->inflbuf);
    if (conch__comp_decompress(&c->comps, &c->o.comp, call->resp_enc, m.gz,
                               m.gzlen, c->o.recv_limit, &c->inflbuf) != 0) {
      return CONCH_ERR_NOMEM; /* it inflated before: only memory can fail */
    }
    {
      char err[256];
      int rv = decode(call, &c->pb_alloc,
                      c->inflbuf.data != NULL ? c->inflbuf.data
                                              : (const uint8_t *)"",
                      conch__buf_size(&c->inflbuf), &m.msg, err, sizeof(err));
      conch__client_shrink_inflbuf(c);
      if (rv != 0) {
        return CONCH_ERR_NOMEM; /* it decoded before: only memory can fail */
      }
    }
    conch__free(c->mem, m.gz);
  }
  call->qhead = (call->qhead + 1) % call->qcap;
  call->qlen--;
  give_back(call, m.wire);
  *msg = m.msg;
  return 0;
}

int conch__call_take_unary(conch_call *call, ProtobufCMessage **msg,
                           int *in_arena, uint8_t **payload, char *err,
                           size_t errlen) {
  conch_client *c = call->client;
  conch_qmsg m;
  int rv;
  *msg = NULL;
  *in_arena = 0;
  *payload = NULL;
  err[0] = '\0';
  if (!call->pull || call->method->output == NULL || call->qlen == 0 ||
      !call->q[call->qhead].plain) {
    return conch_call_recv(call, msg);
  }
  m = call->q[call->qhead];
  call->qhead = (call->qhead + 1) % call->qcap;
  call->qlen--;
  give_back(call, m.wire);
  /* The arena is free unless a handler holds a message from it (a done
     callback does not run inside one, but nothing is assumed). */
  *in_arena = c->arena_used == 0 && c->arena_nextra == 0;
  rv = decode(call, *in_arena ? &c->arena_alloc : &c->pb_alloc, m.gz,
              m.gzlen, msg, err, errlen);
  if (rv != 0 || !*in_arena) {
    /* protobuf-c's copy needs no payload; a failed decode none either. */
    if (*in_arena) {
      conch__arena_reset(c);
      *in_arena = 0;
    }
    conch__free(c->mem, m.gz);
    return rv == 0 ? 0 : rv == CONCH_ERR_NOMEM ? rv : CONCH_ERR_CODEC;
  }
  *payload = m.gz;
  return 0;
}

int conch_call_recv_raw(conch_call *call, const uint8_t **data, size_t *len) {
  conch_client *c;
  uint32_t hdr[3];
  size_t entry;
  if (call == NULL || data == NULL || len == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!call->pull || call->method->output != NULL) {
    return CONCH_ERR_STATE;
  }
  c = call->client;
  if (conch__buf_size(&call->rawq) == 0) {
    conch__buf_reset(&call->rawcur);
    return pull_end(call);
  }
  memcpy(hdr, conch__buf_head(&call->rawq), sizeof(hdr));
  entry = sizeof(hdr) + hdr[0];
  conch__buf_reset(&call->rawcur);
  if (hdr[2] & RAWQ_GZIP) {
    if (conch__comp_decompress(&c->comps, &c->o.comp, call->resp_enc,
                               conch__buf_head(&call->rawq) + sizeof(hdr),
                               hdr[0], c->o.recv_limit, &call->rawcur) != 0) {
      return CONCH_ERR_NOMEM; /* it inflated before: only memory can fail */
    }
    conch__buf_consume(&call->rawq, entry);
  } else if (conch__buf_size(&call->rawq) == entry) {
    /* The message handed out must survive later arrivals, which may move
       the queue: the only entry moves to |rawcur| by swapping buffers (the
       usual case for a reader that keeps up); others are copied. */
    conch_buf t = call->rawcur;
    call->rawcur = call->rawq;
    call->rawq = t;
    conch__buf_reset(&call->rawq);
    conch__buf_consume(&call->rawcur, sizeof(hdr));
  } else {
    if (conch__buf_append(&call->rawcur, c->mem,
                          conch__buf_head(&call->rawq) + sizeof(hdr),
                          hdr[0]) != 0) {
      return CONCH_ERR_NOMEM;
    }
    conch__buf_consume(&call->rawq, entry);
  }
  *data = conch__buf_head(&call->rawcur) != NULL
              ? conch__buf_head(&call->rawcur)
              : (const uint8_t *)"";
  *len = conch__buf_size(&call->rawcur);
  give_back(call, hdr[1]);
  return 0;
}

void conch_message_free(conch_client *c, ProtobufCMessage *msg) {
  if (c == NULL || msg == NULL) {
    return;
  }
  protobuf_c_message_free_unpacked(msg, &c->pb_alloc);
}

/* ---- Accessors ---------------------------------------------------------- */

int conch_call_done(const conch_call *call) {
  return call != NULL && call->finished;
}

const conch_status *conch_call_status(const conch_call *call) {
  return call != NULL && call->finished ? &call->status : NULL;
}

const conch_metadata *conch_call_headers(const conch_call *call) {
  return &call->headers;
}

const conch_metadata *conch_call_trailers(const conch_call *call) {
  return &call->trailers;
}

void *conch_call_user_data(const conch_call *call) {
  return call != NULL ? call->user_data : NULL;
}

conch_client *conch_call_client(const conch_call *call) {
  return call != NULL ? call->client : NULL;
}

size_t conch_call_message_size(const conch_call *call) {
  return call != NULL ? call->msg_size : 0;
}

unsigned conch_call_attempts(const conch_call *call) {
  return call != NULL ? call->attempts : 0;
}
