/* Calls of the server core: the dispatch of a request to its method and
   the three protocols' responses (Connect unary and streams, gRPC,
   gRPC-Web).  A session gives a call its request through
   conch__srv_rpc_open/header/headers_end/data/data_end/close (server_h2.c
   for HTTP/2, server_h1.c for HTTP/1.1), and the call gives its response
   to the session's srv_sink (server_h2.c's: nghttp2's data source reading
   rpc->out).  The gate and the budgets are
   server_admit.c's, the handler's side of a call server_call.c's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base64.h"
#include "mem_int.h"
#include "pbjson.h"
#include "pbborrow.h"
#include "server_int.h"
#include "status_int.h"
#include "wire.h"

srv_method *conch__srv_find_method(conch_server *s, const char *path);

/* ---- Header blocks -------------------------------------------------------- */

typedef srv_hb hb;

void conch__srv_hb_clear(hb *h, const conch_mem *mem) {
  conch__free(mem, h->nv);
  conch__buf_free(&h->store, mem);
  memset(h, 0, sizeof(*h));
}

static size_t hb_put(hb *h, const conch_mem *mem, const void *p, size_t n) {
  size_t off = h->store.len;
  if (conch__buf_append(&h->store, mem, p, n) != 0) {
    h->failed = 1;
  }
  return off;
}

static nghttp2_nv *hb_slot(hb *h, const conch_mem *mem) {
  if (h->n == h->cap) {
    size_t cap = h->cap != 0 ? h->cap * 2 : 16;
    nghttp2_nv *t = conch__realloc(mem, h->nv, cap * sizeof(*t));
    if (t == NULL) {
      h->failed = 1;
      return NULL;
    }
    h->nv = t;
    h->cap = cap;
  }
  return &h->nv[h->n++];
}

/* Adds |prefix||name|: |value|; a "-bin" value goes out in base64 unless
   |raw|. */
static void hb_add_ex(hb *h, const conch_mem *mem, const char *prefix,
                      const char *name, const uint8_t *value, size_t len,
                      int raw) {
  nghttp2_nv *nv = hb_slot(h, mem);
  size_t nlen = strlen(name);
  if (nv == NULL) {
    return;
  }
  nv->name = (uint8_t *)(uintptr_t)hb_put(h, mem, prefix, strlen(prefix));
  hb_put(h, mem, name, nlen);
  nv->namelen = strlen(prefix) + nlen;
  nv->value = (uint8_t *)(uintptr_t)h->store.len;
  if (!raw && conch__metadata_is_bin(name, nlen)) {
    size_t el = conch__b64_encoded_len(len);
    if (conch__buf_reserve(&h->store, mem, el) != 0) {
      h->failed = 1;
      nv->valuelen = 0;
      return;
    }
    h->store.len += conch__b64_encode(value, len, CONCH_B64_STD,
                                      (char *)h->store.data + h->store.len);
    nv->valuelen = el;
  } else {
    hb_put(h, mem, value, len);
    nv->valuelen = len;
  }
  nv->flags = NGHTTP2_NV_FLAG_NONE;
}

static void hb_add(hb *h, const conch_mem *mem, const char *prefix,
                   const char *name, const uint8_t *value, size_t len) {
  hb_add_ex(h, mem, prefix, name, value, len, 0);
}

void conch__srv_hb_raw(hb *h, const conch_mem *mem, const char *name,
                       const char *value) {
  hb_add_ex(h, mem, "", name, (const uint8_t *)value, strlen(value), 1);
}

void conch__srv_hb_str(hb *h, const conch_mem *mem, const char *name,
                       const char *value) {
  hb_add(h, mem, "", name, (const uint8_t *)value, strlen(value));
}

static void hb_md(hb *h, const conch_mem *mem, const char *prefix,
                  const conch_metadata *md) {
  for (size_t i = 0; i < conch_metadata_count(md); i++) {
    const char *name;
    const uint8_t *v;
    size_t len;
    conch_metadata_at(md, i, &name, &v, &len);
    hb_add(h, mem, prefix, name, v, len);
  }
}

/* Turns the offsets into pointers.  Returns 0 or CONCH_ERR_NOMEM. */
static int hb_done(hb *h) {
  if (h->failed) {
    return CONCH_ERR_NOMEM;
  }
  for (size_t i = 0; i < h->n; i++) {
    h->nv[i].name = h->store.data + (uintptr_t)h->nv[i].name;
    h->nv[i].value = h->store.data + (uintptr_t)h->nv[i].value;
  }
  return 0;
}

/* ---- google.rpc.Status ------------------------------------------------------ */

static int pb_varint(conch_buf *b, const conch_mem *mem, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  do {
    t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return conch__buf_append(b, mem, t, n);
}

static int pb_field(conch_buf *b, const conch_mem *mem, uint32_t field,
                    const void *p, size_t n) {
  int rv = pb_varint(b, mem, (uint64_t)field << 3 | 2);
  if (rv == 0) {
    rv = pb_varint(b, mem, n);
  }
  if (rv == 0) {
    rv = conch__buf_append(b, mem, p, n);
  }
  return rv;
}

/* google.rpc.Status {1: code, 2: message, 3: repeated Any}. */
static int rpc_status_pack(const conch_status *st, const conch_mem *mem,
                           conch_buf *out) {
  conch_buf any = CONCH_BUF_INIT;
  int rv = 0;

  if (st->code != 0) {
    rv = pb_varint(out, mem, 1 << 3);
    if (rv == 0) {
      rv = pb_varint(out, mem, (uint64_t)st->code);
    }
  }
  if (rv == 0 && st->message != NULL && st->message[0] != '\0') {
    rv = pb_field(out, mem, 2, st->message, strlen(st->message));
  }
  for (size_t i = 0; rv == 0 && i < st->ndetails; i++) {
    const conch_error_detail *d = &st->details[i];
    conch__buf_reset(&any);
    rv = pb_field(&any, mem, 1, d->type_url, strlen(d->type_url));
    if (rv == 0) {
      rv = pb_field(&any, mem, 2, d->value, d->len);
    }
    if (rv == 0) {
      rv = pb_field(out, mem, 3, conch__buf_head(&any), conch__buf_size(&any));
    }
  }
  conch__buf_free(&any, mem);
  return rv;
}

/* ---- Calls ---------------------------------------------------------------- */

static void rpc_free(conch_rpc *rpc);

conch_rpc *conch__srv_rpc_open(srv_conn *conn, int32_t id,
                               const srv_sink *sink) {
  conch_server *s = conn->s;
  conch_rpc *rpc = conch__calloc(s->ep.mem, 1, sizeof(*rpc));

  if (rpc == NULL) {
    return NULL;
  }
  rpc->conn = conn;
  rpc->sink = sink;
  rpc->id = id;
  rpc->deadline = -1;
  rpc->timer.idx = SIZE_MAX;
  rpc->recv.idx = SIZE_MAX;
  rpc->recv.kind = SRV_TIMER_RECV;
  rpc->req_enc = rpc->resp_enc = CONCH_COMPRESSION_IDENTITY;
  conch__metadata_init(&rpc->req_md, s->ep.mem);
  conch__metadata_init(&rpc->proto_md, s->ep.mem);
  conch__metadata_init(&rpc->resp_md, s->ep.mem);
  conch__metadata_init(&rpc->trl_md, s->ep.mem);
  conch__env_reader_init(
      &rpc->env, s->ep.mem, CONCH_ENV_COMPRESSED,
      s->o.recv_limit > UINT32_MAX ? 0 : (uint32_t)s->o.recv_limit);
  conch__list_push(&conn->rpcs, &rpc->link);
  s->ncalls++;
  conch__srv_conn_idle(conn);
  /* The header block has header_ms to end. */
  if (s->o.header_ms > 0 &&
      conch__srv_timer_arm(s, &rpc->recv, conch__srv_now(s) + s->o.header_ms) !=
          0) {
    rpc_free(rpc);
    return NULL;
  }
  return rpc;
}

static void rpc_free(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;

  if (rpc->ir != NULL) {
    conch__srv_icept_free(rpc); /* the close hooks, if not yet */
  }

  conch__srv_timer_disarm(s, &rpc->timer);
  conch__srv_timer_disarm(s, &rpc->recv);
  s->buffered -= rpc->counted;
  rpc->conn->buffered -= rpc->counted;
  conch__list_remove(&rpc->link);
  conch__srv_conn_idle(rpc->conn);
  conch__free(s->ep.mem, rpc->path);
  conch__free(s->ep.mem, rpc->authority);
  if (rpc->first != NULL) {
    protobuf_c_message_free_unpacked(rpc->first, &s->pb_alloc);
  }
  conch__buf_free(&rpc->first_raw, s->ep.mem);
  conch__free(s->ep.mem, rpc->query);
  conch__metadata_clear(&rpc->req_md);
  conch__metadata_clear(&rpc->proto_md);
  conch__metadata_clear(&rpc->resp_md);
  conch__metadata_clear(&rpc->trl_md);
  conch__env_reader_clear(&rpc->env);
  conch__buf_free(&rpc->body, s->ep.mem);
  conch__buf_free(&rpc->held, s->ep.mem);
  conch__buf_free(&rpc->pq, s->ep.mem);
  conch__buf_free(&rpc->pmsg, s->ep.mem);
  conch__buf_free(&rpc->out, s->ep.mem);
  conch__free(s->ep.mem, rpc->src);
  conch__free(s->ep.mem, rpc->trl.nv);
  conch__buf_free(&rpc->trl.store, s->ep.mem);
  conch__srv_http_free(rpc);
  s->ncalls--;
  conch__free(s->ep.mem, rpc);
}

/* The handler gives the call up: it hears of it once, through on_cancel. */
static void rpc_cancel_user(conch_rpc *rpc, const conch_status *st) {
  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  if (rpc->http != NULL) {
    conch__srv_http_cancel(rpc);
    return;
  }
  rpc->state = SRV_RPC_DONE;
  if (rpc->ir != NULL && !conch__srv_icept_passed(rpc)) {
    return; /* held by an interceptor: the handler never had it */
  }
  if (rpc->method->h.on_cancel != NULL) {
    rpc->method->h.on_cancel(rpc, st, rpc->method->user_data);
  }
}

int conch__srv_rpc_submit(conch_rpc *rpc, hb *h, int with_data) {
  int rv = hb_done(h);

  if (rv == 0) {
    rv = rpc->sink->head(rpc, h, with_data);
  }
  if (rv == 0) {
    rpc->submitted = 1;
  }
  return rv;
}

/* A plain HTTP answer before the protocol is known, or where connect-go
   answers so, as a Go server does: 404 "404 page not found" for a path
   no method has, 405 with Allow, 415 with Accept-Post (|name|, |value|:
   that one header, or NULL). */
static void rpc_plain_hdr(conch_rpc *rpc, int http_status, const char *name,
                          const char *value) {
  static const char not_found[] = "404 page not found\n";
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  int body = http_status == 404;
  char st[4];
  hb h = {0};

  rpc->state = SRV_RPC_DONE;
  conch__srv_timer_disarm(rpc->conn->s, &rpc->recv);
  conch__srv_conn_idle(rpc->conn);
  st[0] = (char)('0' + http_status / 100);
  st[1] = (char)('0' + http_status / 10 % 10);
  st[2] = (char)('0' + http_status % 10);
  st[3] = '\0';
  conch__srv_hb_str(&h, mem, ":status", st);
  if (name != NULL) {
    conch__srv_hb_str(&h, mem, name, value);
  }
  if (body) {
    conch__srv_hb_str(&h, mem, "content-type", "text/plain; charset=utf-8");
    conch__srv_hb_str(&h, mem, "content-length", "19");
    if (conch__buf_append(&rpc->out, mem, not_found, 19) != 0) {
      h.failed = 1;
    }
    rpc->out_end = 1;
  }
  if (conch__srv_rpc_submit(rpc, &h, body) != 0) {
    rpc->sink->reset(rpc, NGHTTP2_INTERNAL_ERROR);
  }
  conch__srv_hb_clear(&h, mem);
}

static void rpc_plain(conch_rpc *rpc, int http_status) {
  rpc_plain_hdr(rpc, http_status, NULL, NULL);
}

/* 405: the methods |m| takes (connect-go's Allow). */
static void rpc_405(conch_rpc *rpc, const srv_method *m) {
  int get = m != NULL && m->m.kind == CONCH_STREAM_UNARY &&
            m->m.idempotency == CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS;
  rpc_plain_hdr(rpc, 405, "allow", get ? "GET, POST" : "POST");
}

/* 415: the content types a method of |m|'s kind takes (Accept-Post). */
static void rpc_415(conch_rpc *rpc, const srv_method *m) {
#if CONCH_WITH_JSON
  static const char *const accept[2] = {
      "application/json, application/json; charset=utf-8, application/proto, "
      "application/grpc, application/grpc+json, application/grpc+proto, "
      "application/grpc-web, application/grpc-web+json, "
      "application/grpc-web+proto",
      "application/connect+json, application/connect+json; charset=utf-8, "
      "application/connect+proto, application/grpc, application/grpc+json, "
      "application/grpc+proto, application/grpc-web, "
      "application/grpc-web+json, application/grpc-web+proto"};
#else
  /* Built without the JSON codec: its content types are refused. */
  static const char *const accept[2] = {
      "application/proto, application/grpc, application/grpc+proto, "
      "application/grpc-web, application/grpc-web+proto",
      "application/connect+proto, application/grpc, application/grpc+proto, "
      "application/grpc-web, application/grpc-web+proto"};
#endif
  rpc_plain_hdr(rpc, 415, "accept-post",
                accept[m != NULL && m->m.kind != CONCH_STREAM_UNARY]);
}

/* What the server takes, so that the client may compress: under |name|
   (accept-encoding, connect-accept-encoding or grpc-accept-encoding). */
static void hb_accept(conch_rpc *rpc, hb *h, const char *name) {
  const conch_server *s = rpc->conn->s;
  if (s->accept_len > 0) {
    hb_add(h, s->ep.mem, "", name, (const uint8_t *)s->accept, s->accept_len);
  }
}

static const char *comp_name(const conch_rpc *rpc, int id) {
  return conch__comp_name(&rpc->conn->s->o.comp, id);
}

/* The response headers of a streaming protocol. */
static void head_stream(conch_rpc *rpc, hb *h) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  int family = rpc->wire == SRV_CONNECT_STREAM ? CONCH_CT_CONNECT_STREAM
               : rpc->wire == SRV_GRPC         ? CONCH_CT_GRPC
                                               : CONCH_CT_GRPC_WEB;

  conch__srv_hb_str(h, mem, ":status", "200");
  conch__srv_hb_str(
      h, mem, "content-type",
      conch__ctype_name(family, rpc->json ? CONCH_CT_JSON : CONCH_CT_PROTO,
                        rpc->utf8 && family == CONCH_CT_CONNECT_STREAM));
  if (rpc->resp_enc != CONCH_COMPRESSION_IDENTITY) {
    conch__srv_hb_str(h, mem,
                      rpc->wire == SRV_CONNECT_STREAM
                          ? "connect-content-encoding"
                          : "grpc-encoding",
                      comp_name(rpc, rpc->resp_enc));
  }
  hb_accept(rpc, h,
            rpc->wire == SRV_CONNECT_STREAM ? "connect-accept-encoding"
                                            : "grpc-accept-encoding");
  hb_md(h, mem, "", &rpc->resp_md);
}

int conch__srv_stream_head(conch_rpc *rpc) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  hb h = {0};
  int rv;

  if (rpc->submitted) {
    return 0;
  }
  head_stream(rpc, &h);
  rv = conch__srv_rpc_submit(rpc, &h, 1);
  conch__srv_hb_clear(&h, mem);
  return rv;
}

/* grpc-status, grpc-message, grpc-status-details-bin, then the trailers. */
static void grpc_status_fields(conch_rpc *rpc, hb *h, const conch_status *st) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  char code[3];

  code[0] = (char)(st->code >= 10 ? '1' : '0' + st->code);
  code[1] = (char)('0' + st->code % 10);
  code[2] = '\0';
  conch__srv_hb_str(h, mem, "grpc-status", st->code >= 10 ? code : code + 1);
  if (st->code != CONCH_CODE_OK && st->message != NULL) {
    char *enc = NULL;
    if (conch__grpc_message_encode(st->message, strlen(st->message), mem,
                                   &enc) != 0) {
      h->failed = 1;
    } else {
      conch__srv_hb_str(h, mem, "grpc-message", enc);
      conch__free(mem, enc);
    }
  }
  if (st->code != CONCH_CODE_OK && st->ndetails > 0) {
    conch_buf pb = CONCH_BUF_INIT;
    if (rpc_status_pack(st, mem, &pb) != 0) {
      h->failed = 1;
    } else {
      hb_add(h, mem, "", "grpc-status-details-bin", conch__buf_head(&pb),
             conch__buf_size(&pb));
    }
    conch__buf_free(&pb, mem);
  }
  hb_md(h, mem, "", &rpc->trl_md);
}

static int end_connect_unary(conch_rpc *rpc, const conch_status *st) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  hb h = {0};
  char num[24];
  int rv = 0;

  if (st->code == CONCH_CODE_OK) {
    conch__srv_hb_str(&h, mem, ":status", "200");
    conch__srv_hb_str(
        &h, mem, "content-type",
        conch__ctype_name(CONCH_CT_CONNECT,
                          rpc->json ? CONCH_CT_JSON : CONCH_CT_PROTO,
                          rpc->utf8));
    if (rpc->resp_enc != CONCH_COMPRESSION_IDENTITY) {
      conch__srv_hb_str(&h, mem, "content-encoding",
                        comp_name(rpc, rpc->resp_enc));
    }
  } else {
    int http = conch__http_from_code(st->code);
    conch__buf_reset(&rpc->out);
    rv = conch__connect_error_write(&rpc->out, mem, st);
    num[0] = (char)('0' + http / 100);
    num[1] = (char)('0' + http / 10 % 10);
    num[2] = (char)('0' + http % 10);
    num[3] = '\0';
    conch__srv_hb_str(&h, mem, ":status", num);
    conch__srv_hb_str(&h, mem, "content-type", "application/json");
  }
  (void)snprintf(num, sizeof(num), "%zu", conch__buf_size(&rpc->out));
  conch__srv_hb_str(&h, mem, "content-length", num);
  hb_accept(rpc, &h, "accept-encoding");
  hb_md(&h, mem, "", &rpc->resp_md);
  hb_md(&h, mem, "trailer-", &rpc->trl_md);
  rpc->out_end = 1;
  if (rv == 0) {
    rv = conch__srv_rpc_submit(rpc, &h, 1);
  }
  conch__srv_hb_clear(&h, mem);
  return rv;
}

static int end_grpc(conch_rpc *rpc, const conch_status *st) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  int rv;

  if (!rpc->submitted && rpc->resp_md.n > 0) {
    /* Headers the handler set go in a HEADERS frame of their own, as
       connect-go and grpc-go send them: folded into Trailers-Only a
       client would read them as trailers. */
    rv = conch__srv_stream_head(rpc);
    if (rv != 0) {
      return rv;
    }
  }
  if (!rpc->submitted) { /* Trailers-Only */
    hb h = {0};
    conch__srv_hb_str(&h, mem, ":status", "200");
    conch__srv_hb_str(
        &h, mem, "content-type",
        conch__ctype_name(CONCH_CT_GRPC,
                          rpc->json ? CONCH_CT_JSON : CONCH_CT_PROTO, 0));
    hb_accept(rpc, &h, "grpc-accept-encoding");
    hb_md(&h, mem, "", &rpc->resp_md);
    grpc_status_fields(rpc, &h, st);
    rv = conch__srv_rpc_submit(rpc, &h, 0);
    conch__srv_hb_clear(&h, mem);
    return rv;
  }
  grpc_status_fields(rpc, &rpc->trl, st);
  rv = hb_done(&rpc->trl);
  if (rv != 0) {
    return rv;
  }
  rpc->out_end = 1;
  conch__srv_rpc_resume(rpc);
  return 0;
}

/* Connect end-stream message or gRPC-Web trailer frame. */
static int end_in_body(conch_rpc *rpc, const conch_status *st) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  conch_buf b = CONCH_BUF_INIT;
  uint8_t flags;
  int rv = conch__srv_stream_head(rpc);

  if (rv == 0 && rpc->wire == SRV_CONNECT_STREAM) {
    flags = CONCH_ENV_END_STREAM;
    rv = conch__connect_end_write(&b, mem, st, &rpc->trl_md);
  } else if (rv == 0) {
    hb h = {0};
    flags = CONCH_ENV_TRAILERS;
    grpc_status_fields(rpc, &h, st);
    rv = hb_done(&h);
    for (size_t i = 0; rv == 0 && i < h.n; i++) {
      rv = conch__buf_append(&b, mem, h.nv[i].name, h.nv[i].namelen);
      if (rv == 0) {
        rv = conch__buf_append(&b, mem, ": ", 2);
      }
      if (rv == 0) {
        rv = conch__buf_append(&b, mem, h.nv[i].value, h.nv[i].valuelen);
      }
      if (rv == 0) {
        rv = conch__buf_append(&b, mem, "\r\n", 2);
      }
    }
    conch__srv_hb_clear(&h, mem);
  }
  if (rv == 0) {
    rv = conch__buf_reserve(&rpc->out, mem, CONCH_ENV_PREFIX + b.len);
  }
  if (rv == 0) {
    conch__env_write_prefix(rpc->out.data + rpc->out.len, flags,
                            (uint32_t)conch__buf_size(&b));
    rpc->out.len += CONCH_ENV_PREFIX;
    if (b.len > 0) {
      memcpy(rpc->out.data + rpc->out.len, conch__buf_head(&b), b.len);
      rpc->out.len += b.len;
    }
    rpc->out_end = 1;
    conch__srv_rpc_resume(rpc);
  }
  conch__buf_free(&b, mem);
  return rv;
}

/* The server's side of the end: the response for |st| goes out. */
void conch__srv_rpc_end(conch_rpc *rpc, const conch_status *st) {
  conch_status mine; /* the interceptors' copy of |st| */
  int rv;

  rpc->state = SRV_RPC_DONE;
  if (rpc->ir != NULL) {
    st = conch__srv_icept_end(rpc, st, &mine);
  }
  conch__srv_timer_disarm(rpc->conn->s, &rpc->timer);
  conch__srv_timer_disarm(rpc->conn->s, &rpc->recv);
  conch__srv_conn_idle(rpc->conn);
  switch (rpc->wire) {
  case SRV_CONNECT_UNARY:
    rv = end_connect_unary(rpc, st);
    break;
  case SRV_GRPC:
    rv = end_grpc(rpc, st);
    break;
  default:
    rv = end_in_body(rpc, st);
    break;
  }
  if (rv != 0) {
    rpc->sink->reset(rpc, NGHTTP2_INTERNAL_ERROR);
  }
  if (st == &mine) {
    conch_status_clear(&mine);
  }
  conch__srv_conn_kick(rpc->conn);
}

/* The call fails on the server's side: the handler hears on_cancel, the
   client gets |code|. */
void conch__srv_rpc_fail(conch_rpc *rpc, conch_code code, const char *fmt,
                         ...) {
  conch_status st;
  va_list ap;

  if (rpc->state == SRV_RPC_DONE) {
    return;
  }
  if (rpc->http != NULL) {
    conch__srv_http_fail(rpc, code);
    return;
  }
  conch_status_init(&st);
  va_start(ap, fmt);
  (void)conch__status_vset(&st, conch__srv_rpc_mem(rpc), code,
                           CONCH_ORIGIN_LOCAL, 0, fmt, ap);
  va_end(ap);
  rpc_cancel_user(rpc, &st);
  conch__srv_rpc_end(rpc, &st);
  conch_status_clear(&st);
}

void conch__srv_rpc_deadline(conch_rpc *rpc) {
  conch__srv_rpc_fail(rpc, CONCH_CODE_DEADLINE_EXCEEDED, "deadline exceeded");
}

void conch__srv_conn_fail_held(srv_conn *conn) {
  for (conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
    conch_rpc *rpc = CONCH_CONTAINER(l, conch_rpc, link);
    if (rpc->state == SRV_RPC_USER) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_UNAVAILABLE,
                          "the server is shutting down");
    }
  }
}

void conch__srv_conn_drop_rpcs(srv_conn *conn) {
  conch_status st;

  conch_status_init(&st);
  st.code = CONCH_CODE_CANCELED;
  st.origin = CONCH_ORIGIN_LOCAL;
  while (!conch__list_empty(&conn->rpcs)) {
    conch_rpc *rpc = CONCH_CONTAINER(conn->rpcs.next, conch_rpc, link);
    rpc_cancel_user(rpc, &st);
    rpc_free(rpc);
  }
}

/* ---- Requests ------------------------------------------------------------- */

static int decode_and_deliver(conch_rpc *rpc, const uint8_t *p, size_t n) {
  conch_server *s = rpc->conn->s;
  const srv_method *m = rpc->method;
  ProtobufCMessage *msg = NULL;
  char err[256];
  int rv;

  if (rpc->ir != NULL && conch__srv_icept_recv(rpc, &p, &n) != 0) {
    return -1; /* an interceptor ended the call */
  }
  rpc->nrecv++;
  if ((m->m.kind == CONCH_STREAM_UNARY || m->m.kind == CONCH_STREAM_SERVER) &&
      rpc->nrecv > 1) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED,
                        "unary request has multiple messages");
    return -1;
  }
  /* The request of a unary or server-streaming call is handed over when
     the request ends: a second message is refused before the handler
     acts on the first. */
  int hold = !rpc->pull && (m->m.kind == CONCH_STREAM_UNARY ||
                            m->m.kind == CONCH_STREAM_SERVER);
  if (m->m.input == NULL) {
    if (hold) {
      if (conch__buf_append(&rpc->first_raw, s->ep.mem, p, n) != 0) {
        conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
                            "out of memory");
        return -1;
      }
      rpc->has_first = 1;
    } else if (m->h.on_raw_message != NULL) {
      m->h.on_raw_message(rpc, p, n, m->user_data);
    }
    return 0;
  }
  rv = conch__srv_decode_msg(rpc, p, n, &msg, err, sizeof(err));
  if (rv == CONCH_ERR_LIMIT) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "%s", err);
    return -1;
  }
  if (rv != 0) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                        "unmarshal into %s: %s", m->m.input->name, err);
    return -1;
  }
  if (hold) {
    rpc->first = msg;
    rpc->has_first = 1;
    return 0;
  }
  /* Pull mode: checked now (a bad message ends the call as it comes),
     handed over again, from the bytes as received, when taken. */
  if (!rpc->pull && m->h.on_message != NULL) {
    m->h.on_message(rpc, msg, m->user_data);
  }
  protobuf_c_message_free_unpacked(msg, &s->pb_alloc);
  return 0;
}

/* One request message as it came (|compressed|: in the request's
   compression). */
static int deliver(conch_rpc *rpc, int compressed, const uint8_t *p,
                   size_t n) {
  conch_server *s = rpc->conn->s;
  conch_buf plain = CONCH_BUF_INIT;
  const uint8_t *wire = p;
  size_t wlen = n;
  int rv;

  if (rpc->state != SRV_RPC_USER) {
    return -1;
  }
  if (compressed && rpc->req_enc == CONCH_COMPRESSION_IDENTITY) {
    conch__srv_rpc_fail(
        rpc, CONCH_CODE_INTERNAL,
        "protocol error: compressed message without an encoding");
    return -1;
  }
  if (compressed && n > 0) {
    rv = conch__srv_inflate_msg(rpc, p, n, &plain);
    if (rv != 0) {
      conch__buf_free(&plain, s->ep.mem);
      if (rv == CONCH_ERR_LIMIT) {
        conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
                            "message is larger than the limit of %zu bytes",
                            s->o.recv_limit);
      } else {
        conch__srv_rpc_fail(rpc, CONCH_CODE_INTERNAL,
                            "cannot decompress %s message",
                            comp_name(rpc, rpc->req_enc));
      }
      return -1;
    }
    p = conch__buf_head(&plain);
    n = conch__buf_size(&plain);
  }
  rv = decode_and_deliver(rpc, p != NULL ? p : (const uint8_t *)"", n);
  conch__buf_free(&plain, s->ep.mem);
  if (rv == 0 && rpc->pull) {
    rv = conch__srv_pull_queue(rpc, compressed && wlen > 0,
                               wire != NULL ? wire : (const uint8_t *)"", wlen);
  }
  return rv;
}

static int on_envelope(void *user_data, uint8_t flags, const uint8_t *payload,
                       size_t len) {
  conch_rpc *rpc = user_data;
  return deliver(rpc, flags & CONCH_ENV_COMPRESSED, payload, len) != 0 ? 1 : 0;
}

static void rpc_half_close(conch_rpc *rpc) {
  const srv_method *m = rpc->method;

  if (rpc->half_closed) {
    return;
  }
  rpc->half_closed = 1;
  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  if (rpc->http != NULL) {
    conch__srv_http_eof(rpc);
    return;
  }
  if (rpc->wire == SRV_CONNECT_UNARY) {
    if (deliver(rpc, rpc->req_enc != CONCH_COMPRESSION_IDENTITY,
                conch__buf_head(&rpc->body),
                conch__buf_size(&rpc->body)) != 0) {
      return;
    }
  } else if (!conch__env_reader_at_boundary(&rpc->env)) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                        "protocol error: incomplete envelope");
    return;
  }
  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  if ((m->m.kind == CONCH_STREAM_UNARY || m->m.kind == CONCH_STREAM_SERVER) &&
      rpc->nrecv == 0) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED,
                        "unary request has zero messages");
    return;
  }
  if (rpc->has_first) {
    rpc->has_first = 0;
    if (m->m.input == NULL) {
      if (m->h.on_raw_message != NULL) {
        m->h.on_raw_message(rpc,
                            conch__buf_head(&rpc->first_raw) != NULL
                                ? conch__buf_head(&rpc->first_raw)
                                : (const uint8_t *)"",
                            conch__buf_size(&rpc->first_raw), m->user_data);
      }
    } else if (m->h.on_message != NULL) {
      m->h.on_message(rpc, rpc->first, m->user_data);
    }
    if (rpc->first != NULL) {
      protobuf_c_message_free_unpacked(rpc->first, &rpc->conn->s->pb_alloc);
      rpc->first = NULL;
    }
    conch__buf_free(&rpc->first_raw, conch__srv_rpc_mem(rpc));
    if (rpc->state != SRV_RPC_USER) {
      return;
    }
  }
  if (rpc->pull) {
    conch__srv_pull_notify(rpc); /* the end: conch_rpc_recv() says EOF */
  } else if (m->h.on_half_close != NULL) {
    m->h.on_half_close(rpc, m->user_data);
  }
}

static void rpc_data(conch_rpc *rpc, const uint8_t *p, size_t n) {
  conch_server *s = rpc->conn->s;
  int rv;

  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  if (rpc->http != NULL) {
    /* The body timer runs from chunk to chunk
       (conch__srv_rpc_recv_update() rearms it). */
    conch__srv_timer_disarm(s, &rpc->recv);
    conch__srv_http_body(rpc, p, n);
    return;
  }
  if (rpc->wire == SRV_CONNECT_UNARY) {
    if (s->o.recv_limit != 0 &&
        conch__buf_size(&rpc->body) + n > s->o.recv_limit) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
                          "message is larger than the limit of %zu bytes",
                          s->o.recv_limit);
      return;
    }
    if (conch__buf_append(&rpc->body, s->ep.mem, p, n) != 0) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
    return;
  }
  rv = conch__env_reader_feed(&rpc->env, p, n, on_envelope, rpc);
  if (rv == CONCH_ERR_LIMIT) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
                        "message is larger than the limit of %zu bytes",
                        s->o.recv_limit);
  } else if (rv == CONCH_ERR_PROTO) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                        "protocol error: bad envelope flags");
  } else if (rv == CONCH_ERR_NOMEM) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
}

const char *conch__srv_proto_hdr(conch_rpc *rpc, const char *name) {
  return conch_metadata_get(&rpc->proto_md, name, NULL);
}

/* The compression named by |name| (NULL or identity: identity), or -1
   when the server does not take it. */
static int accepted_comp(const conch_server *s, const char *name, size_t n) {
  int id;
  if (name == NULL || n == 0) {
    return CONCH_COMPRESSION_IDENTITY;
  }
  id = conch__comp_lookup(&s->o.comp, name, n);
  if (id == CONCH_COMPRESSION_IDENTITY) {
    return id;
  }
  if (id < 0 || memchr(s->o.comp.accept, id, s->o.comp.naccept) == NULL) {
    return -1;
  }
  return id;
}

/* The response compression: the request's, else the first of the
   client's accepted list the server has. */
static int pick_resp_comp(const conch_server *s, int req, const char *list) {
  const char *p = list;
  if (req != CONCH_COMPRESSION_IDENTITY || list == NULL) {
    return req;
  }
  while (*p != '\0') {
    size_t n = strcspn(p, ",;");
    const char *q = p;
    size_t m = n;
    int id;
    while (m > 0 && *q == ' ') {
      q++;
      m--;
    }
    while (m > 0 && q[m - 1] == ' ') {
      m--;
    }
    id = accepted_comp(s, q, m);
    if (id > 0) {
      return id;
    }
    p += n;
    p += strcspn(p, ",");
    if (*p == ',') {
      p++;
    }
  }
  return CONCH_COMPRESSION_IDENTITY;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/* Percent-decodes |n| bytes of a query value ('+' is a space) into |out|
   (room for |n|).  Returns the length, or -1 for a bad escape. */
static long query_unescape(const char *in, size_t n, uint8_t *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (in[i] == '%') {
      int hi = i + 2 < n ? hexval(in[i + 1]) : -1;
      int lo = i + 2 < n ? hexval(in[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return -1;
      }
      out[o++] = (uint8_t)(hi << 4 | lo);
      i += 2;
    } else {
      out[o++] = in[i] == '+' ? ' ' : (uint8_t)in[i];
    }
  }
  return (long)o;
}

/* The value of |key| in the query, or NULL; |*n| its length. */
static const char *query_get(const char *q, const char *key, size_t *n) {
  size_t kl = strlen(key);
  while (q != NULL && *q != '\0') {
    size_t l = strcspn(q, "&");
    if (l > kl && strncmp(q, key, kl) == 0 && q[kl] == '=') {
      *n = l - kl - 1;
      return q + kl + 1;
    }
    q += l;
    if (*q == '&') {
      q++;
    }
  }
  return NULL;
}

static int query_is(const char *q, const char *key, const char *want) {
  size_t n;
  const char *v = query_get(q, key, &n);
  return v != NULL && n == strlen(want) && memcmp(v, want, n) == 0;
}

/* A Connect unary GET (CONNECT_PROTOCOL.md 1.2): the request is in the
   query; only methods marked NO_SIDE_EFFECTS take it, as in connect-go.
   Returns 0 with |rpc->body| and the codec set. */
static int get_request(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  const char *q = rpc->query;
  const char *msg, *comp;
  size_t mlen, clen;
  uint8_t *raw;
  long n;

  rpc->method = conch__srv_find_method(s, rpc->path);
  if (rpc->method == NULL) {
    rpc_plain(rpc, 404);
    return -1;
  }
  if (q == NULL || rpc->method->m.kind != CONCH_STREAM_UNARY ||
      rpc->method->m.idempotency != CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS) {
    rpc_405(rpc, rpc->method);
    return -1;
  }
  rpc->wire = SRV_CONNECT_UNARY;
  if (query_is(q, "encoding", "json") && CONCH_WITH_JSON) {
    rpc->json = 1;
  } else if (!query_is(q, "encoding", "proto")) {
    rpc_plain(rpc, 415);
    return -1;
  }
  msg = query_get(q, "message", &mlen);
  if (msg == NULL) {
    msg = "";
    mlen = 0;
  }
  raw = conch__malloc(s->ep.mem, mlen + 1);
  if (raw == NULL) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  n = query_unescape(msg, mlen, raw);
  if (n >= 0 && query_is(q, "base64", "1")) {
    size_t out = 0;
    uint8_t *dec =
        conch__malloc(s->ep.mem, conch__b64_decoded_max((size_t)n) + 1);
    if (dec == NULL ||
        conch__b64_decode((const char *)raw, (size_t)n, CONCH_B64_URL, dec,
                          &out) != 0) {
      n = -1;
    } else {
      memcpy(raw, dec, out);
      n = (long)out;
    }
    conch__free(s->ep.mem, dec);
  }
  if (n < 0) {
    conch__free(s->ep.mem, raw);
    conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                        "the message in the query does not decode");
    return -1;
  }
  if (conch__buf_append(&rpc->body, s->ep.mem, raw, (size_t)n) != 0) {
    conch__free(s->ep.mem, raw);
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  conch__free(s->ep.mem, raw);
  comp = query_get(q, "compression", &clen);
  rpc->req_enc = accepted_comp(s, comp, comp != NULL ? clen : 0);
  if (rpc->req_enc < 0) {
    rpc->req_enc = CONCH_COMPRESSION_IDENTITY;
    conch__srv_rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED, "unknown compression");
    return -1;
  }
  return 0;
}

/* Gives the request headers a meaning.  Returns 0 when the handler may
   have the call. */
static int rpc_dispatch(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  const char *ct = conch__srv_proto_hdr(rpc, "content-type");
  const char *enc, *acc, *tmo;
  conch_ctype t;
  int stream_kind;

  if (rpc->bad_method) {
    /* As a Go mux and connect-go: the path first (404), then the method
       (405). */
    const srv_method *m = conch__srv_find_method(s, rpc->path != NULL
                                                        ? rpc->path
                                                        : "");
    if (m == NULL) {
      rpc_plain(rpc, 404);
    } else {
      rpc_405(rpc, m);
    }
    return -1;
  }
  if (rpc->get) {
    if (get_request(rpc) != 0) {
      return -1;
    }
    enc = NULL;
    goto negotiate;
  }
  if (ct == NULL || conch__ctype_parse(ct, strlen(ct), &t) != 0 ||
      t.codec == CONCH_CT_OTHER ||
      (t.codec == CONCH_CT_JSON && !CONCH_WITH_JSON) ||
      ((t.family == CONCH_CT_CONNECT || t.family == CONCH_CT_CONNECT_STREAM) &&
       (t.params == CONCH_CT_BAD_PARAMS ||
        (t.params == CONCH_CT_UTF8 && t.codec != CONCH_CT_JSON)))) {
    const srv_method *m = conch__srv_find_method(s, rpc->path != NULL
                                                        ? rpc->path
                                                        : "");
    if (m == NULL) {
      rpc_plain(rpc, 404);
    } else {
      rpc_415(rpc, m);
    }
    return -1;
  }
  rpc->utf8 = t.params == CONCH_CT_UTF8 && t.codec == CONCH_CT_JSON;
  rpc->wire = t.family == CONCH_CT_CONNECT          ? SRV_CONNECT_UNARY
              : t.family == CONCH_CT_CONNECT_STREAM ? SRV_CONNECT_STREAM
              : t.family == CONCH_CT_GRPC           ? SRV_GRPC
                                                    : SRV_GRPC_WEB;
  rpc->json = t.codec == CONCH_CT_JSON;
  rpc->method = conch__srv_find_method(s, rpc->path != NULL ? rpc->path : "");
  if (rpc->method == NULL) {
    if (rpc->wire == SRV_CONNECT_UNARY || rpc->wire == SRV_CONNECT_STREAM) {
      rpc_plain(rpc, 404);
    } else {
      conch__srv_rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED, "unknown method %s",
                          rpc->path != NULL ? rpc->path : "");
    }
    return -1;
  }
  stream_kind = rpc->method->m.kind != CONCH_STREAM_UNARY;
  if ((rpc->wire == SRV_CONNECT_UNARY && stream_kind) ||
      (rpc->wire == SRV_CONNECT_STREAM && !stream_kind)) {
    rpc_415(rpc, rpc->method);
    return -1;
  }
negotiate:
  if (rpc->hdr_too_big) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
                        "request headers are larger than the limit of %u bytes",
                        (unsigned)s->o.max_header_list);
    return -1;
  }
  switch (rpc->wire) {
  case SRV_CONNECT_UNARY:
    enc = rpc->get ? NULL : conch__srv_proto_hdr(rpc, "content-encoding");
    acc = conch__srv_proto_hdr(rpc, "accept-encoding");
    tmo = conch__srv_proto_hdr(rpc, "connect-timeout-ms");
    break;
  case SRV_CONNECT_STREAM:
    enc = conch__srv_proto_hdr(rpc, "connect-content-encoding");
    acc = conch__srv_proto_hdr(rpc, "connect-accept-encoding");
    tmo = conch__srv_proto_hdr(rpc, "connect-timeout-ms");
    break;
  default:
    enc = conch__srv_proto_hdr(rpc, "grpc-encoding");
    acc = conch__srv_proto_hdr(rpc, "grpc-accept-encoding");
    tmo = conch__srv_proto_hdr(rpc, "grpc-timeout");
    break;
  }
  if (rpc->wire == SRV_CONNECT_UNARY || rpc->wire == SRV_CONNECT_STREAM) {
    const char *v = conch__srv_proto_hdr(rpc, "connect-protocol-version");
    if (v != NULL && strcmp(v, "1") != 0) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                          "connect-protocol-version must be \"1\": got \"%s\"",
                          v);
      return -1;
    }
  }
  if (!rpc->get) {
    rpc->req_enc = accepted_comp(s, enc, enc != NULL ? strlen(enc) : 0);
  }
  if (rpc->req_enc < 0) {
    rpc->req_enc = CONCH_COMPRESSION_IDENTITY;
    conch__srv_rpc_fail(
        rpc, CONCH_CODE_UNIMPLEMENTED,
        "unknown compression \"%s\": supported encodings are %.*s", enc,
        (int)s->accept_len, s->accept);
    return -1;
  }
  rpc->resp_enc = pick_resp_comp(s, rpc->req_enc, acc);
  if (tmo != NULL) {
    int64_t ms;
    int connect =
        rpc->wire == SRV_CONNECT_UNARY || rpc->wire == SRV_CONNECT_STREAM;
    int rv = connect ? conch__connect_timeout_parse(tmo, strlen(tmo), &ms)
                     : conch__grpc_timeout_parse(tmo, strlen(tmo), &ms);
    /* The texts of connect-go (strconv's for Connect). */
    if (rv != 0 && !connect) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                          "malformed grpc-timeout: \"%s\"", tmo);
      return -1;
    }
    if (rv == CONCH_TIMEOUT_TOO_LONG) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
                          "parse timeout: \"%s\" has >10 digits", tmo);
      return -1;
    }
    if (rv != 0) {
      conch__srv_rpc_fail(
          rpc, CONCH_CODE_INVALID_ARGUMENT,
          "parse timeout: strconv.ParseInt: parsing \"%s\": invalid "
          "syntax",
          tmo);
      return -1;
    }
    if (ms == 0) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_DEADLINE_EXCEEDED,
                          "context deadline exceeded");
      return -1;
    }
    rpc->deadline = conch__srv_now(s) + ms;
    if (conch__srv_timer_arm(s, &rpc->timer, rpc->deadline) != 0) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return -1;
    }
  }
  return 0;
}

int conch__srv_rpc_header(conch_rpc *rpc, const uint8_t *name, size_t namelen,
                          const uint8_t *value, size_t valuelen) {
  srv_conn *conn = rpc->conn;
  const conch_mem *mem = conn->s->ep.mem;
  int rv = 0;

  rpc->hdr_bytes += namelen + valuelen + 32;
  if (rpc->hdr_bytes > conn->s->o.max_header_list) {
    rpc->hdr_too_big = 1;
  }
  if (namelen == 7 && memcmp(name, ":method", 7) == 0) {
    size_t ml = valuelen < sizeof(rpc->mname) ? valuelen
                                               : sizeof(rpc->mname) - 1;
    memcpy(rpc->mname, value, ml);
    rpc->mname[ml] = '\0';
    rpc->get = valuelen == 3 && memcmp(value, "GET", 3) == 0;
    rpc->bad_method =
        !rpc->get && !(valuelen == 4 && memcmp(value, "POST", 4) == 0);
  } else if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
    if (rpc->path == NULL) {
      const uint8_t *q = memchr(value, '?', valuelen);
      size_t plen = q != NULL ? (size_t)(q - value) : valuelen;
      rpc->path = conch__strndup(mem, (const char *)value, plen);
      rv = rpc->path == NULL ? CONCH_ERR_NOMEM : 0;
      if (rv == 0 && q != NULL) {
        rpc->query = conch__strndup(mem, (const char *)q + 1,
                                    valuelen - plen - 1);
        rv = rpc->query == NULL ? CONCH_ERR_NOMEM : 0;
      }
    }
  } else if (namelen == 10 && memcmp(name, ":authority", 10) == 0) {
    if (rpc->authority == NULL) {
      rpc->authority = conch__strndup(mem, (const char *)value, valuelen);
      rv = rpc->authority == NULL ? CONCH_ERR_NOMEM : 0;
    }
  } else if (name[0] == ':' || rpc->hdr_too_big) {
    return 0;
  } else if (conch__metadata_reserved((const char *)name, namelen)) {
    rv = conch__metadata_add_raw(&rpc->proto_md, (const char *)name, namelen,
                                 value, valuelen);
  } else {
    rv = conch__metadata_add_wire(&rpc->req_md, (const char *)name, namelen,
                                  (const char *)value, valuelen);
  }
  return rv != 0 ? CONCH_ERR_NOMEM : 0;
}

void conch__srv_rpc_headers_end(conch_rpc *rpc) {
  rpc->headers_in = 1;
  conch__srv_timer_disarm(rpc->conn->s, &rpc->recv);
  if (conch__srv_rpc_gate(rpc) != 0 || rpc_dispatch(rpc) != 0) {
    return;
  }
  rpc->state = SRV_RPC_USER;
  rpc->pull = rpc->method->h.on_recv_ready != NULL;
  conch__srv_conn_idle(rpc->conn);
  conch__srv_rpc_recv_update(rpc);
  if (rpc->conn->s->nicept != 0) {
    conch__srv_icept_call(rpc); /* the chain, then on_call */
    return;
  }
  rpc->method->h.on_call(rpc, rpc->method->user_data);
}

void conch__srv_rpc_data_end(conch_rpc *rpc) {
  if (rpc->state == SRV_RPC_USER && (rpc->paused || rpc->resumed)) {
    rpc->eos_held = 1;
  } else {
    rpc_half_close(rpc);
  }
  conch__srv_rpc_count(rpc);
  conch__srv_rpc_recv_update(rpc);
}

int conch__srv_rpc_data(conch_rpc *rpc, const uint8_t *data, size_t len) {
  if (rpc->state == SRV_RPC_USER && (rpc->paused || rpc->resumed)) {
    if (conch__buf_append(&rpc->held, conch__srv_rpc_mem(rpc), data, len) !=
        0) {
      conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return 0;
    }
    conch__srv_rpc_count(rpc);
    return 1;
  }
  rpc_data(rpc, data, len);
  conch__srv_rpc_count(rpc);
  conch__srv_rpc_recv_update(rpc);
  return 0;
}

void conch__srv_conn_resume(srv_conn *conn) {
  for (conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
    conch_rpc *rpc = CONCH_CONTAINER(l, conch_rpc, link);
    size_t n = conch__buf_size(&rpc->held);
    if (!rpc->resumed) {
      continue;
    }
    rpc->resumed = 0;
    if (n > 0) {
      /* A handler that pauses again meanwhile gets the rest of these
         bytes all the same: a pause acts between reads. */
      conch_buf held = rpc->held;
      rpc->held = (conch_buf)CONCH_BUF_INIT;
      rpc_data(rpc, conch__buf_head(&held), n);
      conch__buf_free(&held, conch__srv_rpc_mem(rpc));
      rpc->sink->consumed(rpc, n);
      conch__srv_rpc_count(rpc);
    }
    if (rpc->eos_held && !rpc->paused) {
      rpc->eos_held = 0;
      rpc_half_close(rpc);
    }
    conch__srv_rpc_recv_update(rpc);
  }
}

void conch__srv_rpc_close(conch_rpc *rpc, uint32_t error) {
  conch_status st;

  if (rpc->state == SRV_RPC_USER) {
    conch_status_init(&st);
    (void)conch__status_set(&st, conch__srv_rpc_mem(rpc), CONCH_CODE_CANCELED,
                            CONCH_ORIGIN_LOCAL, CONCH_ERR_CANCELED,
                            "the client canceled the call (RST_STREAM %u)",
                            (unsigned)error);
    rpc_cancel_user(rpc, &st);
    conch_status_clear(&st);
  }
  rpc_free(rpc);
}
