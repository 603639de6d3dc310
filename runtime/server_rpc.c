/* Calls of the server core: nghttp2's server session, the dispatch of a
   request to its method, and the three protocols' responses (Connect
   unary and streams, gRPC, gRPC-Web). */
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

static void hb_clear(hb *h, const conch_mem *mem) {
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

/* Adds |prefix||name|: |value|; a "-bin" value goes out in base64. */
static void hb_add(hb *h, const conch_mem *mem, const char *prefix,
                   const char *name, const uint8_t *value, size_t len) {
  nghttp2_nv *nv = hb_slot(h, mem);
  size_t nlen = strlen(name);
  if (nv == NULL) {
    return;
  }
  nv->name = (uint8_t *)(uintptr_t)hb_put(h, mem, prefix, strlen(prefix));
  hb_put(h, mem, name, nlen);
  nv->namelen = strlen(prefix) + nlen;
  nv->value = (uint8_t *)(uintptr_t)h->store.len;
  if (conch__metadata_is_bin(name, nlen)) {
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

static void hb_str(hb *h, const conch_mem *mem, const char *name,
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

static const conch_mem *rpc_mem(const conch_rpc *rpc) {
  return rpc->conn->s->mem;
}

static void rpc_free(conch_rpc *rpc);
static void rpc_count(conch_rpc *rpc);

static conch_rpc *rpc_new(srv_conn *conn, int32_t id) {
  conch_server *s = conn->s;
  conch_rpc *rpc = conch__calloc(s->mem, 1, sizeof(*rpc));

  if (rpc == NULL) {
    return NULL;
  }
  rpc->conn = conn;
  rpc->id = id;
  rpc->deadline = -1;
  rpc->timer.idx = SIZE_MAX;
  rpc->recv.idx = SIZE_MAX;
  rpc->recv.kind = SRV_TIMER_RECV;
  rpc->req_enc = rpc->resp_enc = CONCH_COMPRESSION_IDENTITY;
  conch__metadata_init(&rpc->req_md, s->mem);
  conch__metadata_init(&rpc->proto_md, s->mem);
  conch__metadata_init(&rpc->resp_md, s->mem);
  conch__metadata_init(&rpc->trl_md, s->mem);
  conch__env_reader_init(&rpc->env, s->mem, CONCH_ENV_COMPRESSED,
                         s->o.recv_limit > UINT32_MAX
                             ? 0
                             : (uint32_t)s->o.recv_limit);
  conch__list_push(&conn->rpcs, &rpc->link);
  s->ncalls++;
  conch__srv_conn_idle(conn);
  /* The header block has header_ms to end. */
  if (s->o.header_ms > 0 &&
      conch__heap_insert(&s->heap, s->mem, &rpc->recv,
                         conch__srv_now(s) + s->o.header_ms) != 0) {
    rpc_free(rpc);
    return NULL;
  }
  return rpc;
}

static void rpc_free(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;

  conch__heap_remove(&s->heap, &rpc->timer);
  conch__heap_remove(&s->heap, &rpc->recv);
  s->buffered -= rpc->counted;
  rpc->conn->buffered -= rpc->counted;
  conch__list_remove(&rpc->link);
  conch__srv_conn_idle(rpc->conn);
  conch__free(s->mem, rpc->path);
  conch__free(s->mem, rpc->authority);
  if (rpc->first != NULL) {
    protobuf_c_message_free_unpacked(rpc->first, &s->pb_alloc);
  }
  conch__buf_free(&rpc->first_raw, s->mem);
  conch__free(s->mem, rpc->query);
  conch__metadata_clear(&rpc->req_md);
  conch__metadata_clear(&rpc->proto_md);
  conch__metadata_clear(&rpc->resp_md);
  conch__metadata_clear(&rpc->trl_md);
  conch__env_reader_clear(&rpc->env);
  conch__buf_free(&rpc->body, s->mem);
  conch__buf_free(&rpc->held, s->mem);
  conch__buf_free(&rpc->pq, s->mem);
  conch__buf_free(&rpc->pmsg, s->mem);
  conch__buf_free(&rpc->out, s->mem);
  conch__free(s->mem, rpc->src);
  conch__free(s->mem, rpc->trl.nv);
  conch__buf_free(&rpc->trl.store, s->mem);
  conch__srv_http_free(rpc);
  s->ncalls--;
  conch__free(s->mem, rpc);
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
  if (rpc->method->h.on_cancel != NULL) {
    rpc->method->h.on_cancel(rpc, st, rpc->method->user_data);
  }
}

static void rpc_resume(conch_rpc *rpc) {
  if (rpc->deferred) {
    rpc->deferred = 0;
    (void)nghttp2_session_resume_data(rpc->conn->h2, rpc->id);
  }
}

static ssize_t rpc_read(nghttp2_session *h2, int32_t id, uint8_t *buf,
                        size_t len, uint32_t *flags, nghttp2_data_source *src,
                        void *user_data) {
  conch_rpc *rpc = src->ptr;
  size_t n = conch__buf_size(&rpc->out);
  (void)user_data;

  if (n > len) {
    n = len;
  }
  if (n > 0) {
    memcpy(buf, conch__buf_head(&rpc->out), n);
    conch__buf_consume(&rpc->out, n);
  }
  if (conch__buf_size(&rpc->out) == 0) {
    if (rpc->out_end) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (rpc->trl.n > 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(h2, id, rpc->trl.nv, rpc->trl.n) != 0) {
          return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
      }
    } else if (n == 0) {
      rpc->deferred = 1;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  return (ssize_t)n;
}

static int rpc_submit(conch_rpc *rpc, hb *h, int with_data) {
  nghttp2_data_provider prd;
  int rv = hb_done(h);

  if (rv != 0) {
    return rv;
  }
  prd.source.ptr = rpc;
  prd.read_callback = rpc_read;
  rv = nghttp2_submit_response(rpc->conn->h2, rpc->id, h->nv, h->n,
                               with_data ? &prd : NULL);
  if (rv != 0) {
    return CONCH_ERR_NOMEM;
  }
  rpc->submitted = 1;
  return 0;
}

/* A plain HTTP answer before the protocol is known, or where connect-go
   answers so, as a Go server does: 404 "404 page not found" for a path
   no method has, 405 with Allow, 415 with Accept-Post (|name|, |value|:
   that one header, or NULL). */
static void rpc_plain_hdr(conch_rpc *rpc, int http_status, const char *name,
                          const char *value) {
  static const char not_found[] = "404 page not found\n";
  const conch_mem *mem = rpc_mem(rpc);
  int body = http_status == 404;
  char st[4];
  hb h = {0};

  rpc->state = SRV_RPC_DONE;
  conch__heap_remove(&rpc->conn->s->heap, &rpc->recv);
  conch__srv_conn_idle(rpc->conn);
  st[0] = (char)('0' + http_status / 100);
  st[1] = (char)('0' + http_status / 10 % 10);
  st[2] = (char)('0' + http_status % 10);
  st[3] = '\0';
  hb_str(&h, mem, ":status", st);
  if (name != NULL) {
    hb_str(&h, mem, name, value);
  }
  if (body) {
    hb_str(&h, mem, "content-type", "text/plain; charset=utf-8");
    hb_str(&h, mem, "content-length", "19");
    if (conch__buf_append(&rpc->out, mem, not_found, 19) != 0) {
      h.failed = 1;
    }
    rpc->out_end = 1;
  }
  if (rpc_submit(rpc, &h, body) != 0) {
    (void)nghttp2_submit_rst_stream(rpc->conn->h2, NGHTTP2_FLAG_NONE, rpc->id,
                                    NGHTTP2_INTERNAL_ERROR);
  }
  hb_clear(&h, mem);
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
    hb_add(h, s->mem, "", name, (const uint8_t *)s->accept, s->accept_len);
  }
}

static const char *comp_name(const conch_rpc *rpc, int id) {
  return conch__comp_name(&rpc->conn->s->o.comp, id);
}

/* The response headers of a streaming protocol. */
static void head_stream(conch_rpc *rpc, hb *h) {
  const conch_mem *mem = rpc_mem(rpc);
  int family = rpc->wire == SRV_CONNECT_STREAM ? CONCH_CT_CONNECT_STREAM
               : rpc->wire == SRV_GRPC        ? CONCH_CT_GRPC
                                              : CONCH_CT_GRPC_WEB;

  hb_str(h, mem, ":status", "200");
  hb_str(h, mem, "content-type",
         conch__ctype_name(family, rpc->json ? CONCH_CT_JSON : CONCH_CT_PROTO,
                           rpc->utf8 && family == CONCH_CT_CONNECT_STREAM));
  if (rpc->resp_enc != CONCH_COMPRESSION_IDENTITY) {
    hb_str(h, mem,
           rpc->wire == SRV_CONNECT_STREAM ? "connect-content-encoding"
                                           : "grpc-encoding",
           comp_name(rpc, rpc->resp_enc));
  }
  hb_accept(rpc, h,
            rpc->wire == SRV_CONNECT_STREAM ? "connect-accept-encoding"
                                            : "grpc-accept-encoding");
  hb_md(h, mem, "", &rpc->resp_md);
}

static int submit_stream_head(conch_rpc *rpc) {
  const conch_mem *mem = rpc_mem(rpc);
  hb h = {0};
  int rv;

  if (rpc->submitted) {
    return 0;
  }
  head_stream(rpc, &h);
  rv = rpc_submit(rpc, &h, 1);
  hb_clear(&h, mem);
  return rv;
}

/* grpc-status, grpc-message, grpc-status-details-bin, then the trailers. */
static void grpc_status_fields(conch_rpc *rpc, hb *h, const conch_status *st) {
  const conch_mem *mem = rpc_mem(rpc);
  char code[3];

  code[0] = (char)(st->code >= 10 ? '1' : '0' + st->code);
  code[1] = (char)('0' + st->code % 10);
  code[2] = '\0';
  hb_str(h, mem, "grpc-status", st->code >= 10 ? code : code + 1);
  if (st->code != CONCH_CODE_OK && st->message != NULL) {
    char *enc = NULL;
    if (conch__grpc_message_encode(st->message, strlen(st->message), mem,
                                   &enc) != 0) {
      h->failed = 1;
    } else {
      hb_str(h, mem, "grpc-message", enc);
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
  const conch_mem *mem = rpc_mem(rpc);
  hb h = {0};
  char num[24];
  int rv = 0;

  if (st->code == CONCH_CODE_OK) {
    hb_str(&h, mem, ":status", "200");
    hb_str(&h, mem, "content-type",
           conch__ctype_name(CONCH_CT_CONNECT,
                             rpc->json ? CONCH_CT_JSON : CONCH_CT_PROTO,
                             rpc->utf8));
    if (rpc->resp_enc != CONCH_COMPRESSION_IDENTITY) {
      hb_str(&h, mem, "content-encoding", comp_name(rpc, rpc->resp_enc));
    }
  } else {
    int http = conch__http_from_code(st->code);
    conch__buf_reset(&rpc->out);
    rv = conch__connect_error_write(&rpc->out, mem, st);
    num[0] = (char)('0' + http / 100);
    num[1] = (char)('0' + http / 10 % 10);
    num[2] = (char)('0' + http % 10);
    num[3] = '\0';
    hb_str(&h, mem, ":status", num);
    hb_str(&h, mem, "content-type", "application/json");
  }
  (void)snprintf(num, sizeof(num), "%zu", conch__buf_size(&rpc->out));
  hb_str(&h, mem, "content-length", num);
  hb_accept(rpc, &h, "accept-encoding");
  hb_md(&h, mem, "", &rpc->resp_md);
  hb_md(&h, mem, "trailer-", &rpc->trl_md);
  rpc->out_end = 1;
  if (rv == 0) {
    rv = rpc_submit(rpc, &h, 1);
  }
  hb_clear(&h, mem);
  return rv;
}

static int end_grpc(conch_rpc *rpc, const conch_status *st) {
  const conch_mem *mem = rpc_mem(rpc);
  int rv;

  if (!rpc->submitted && rpc->resp_md.n > 0) {
    /* Headers the handler set go in a HEADERS frame of their own, as
       connect-go and grpc-go send them: folded into Trailers-Only a
       client would read them as trailers. */
    rv = submit_stream_head(rpc);
    if (rv != 0) {
      return rv;
    }
  }
  if (!rpc->submitted) { /* Trailers-Only */
    hb h = {0};
    hb_str(&h, mem, ":status", "200");
    hb_str(&h, mem, "content-type",
           conch__ctype_name(CONCH_CT_GRPC,
                             rpc->json ? CONCH_CT_JSON : CONCH_CT_PROTO, 0));
    hb_accept(rpc, &h, "grpc-accept-encoding");
    hb_md(&h, mem, "", &rpc->resp_md);
    grpc_status_fields(rpc, &h, st);
    rv = rpc_submit(rpc, &h, 0);
    hb_clear(&h, mem);
    return rv;
  }
  grpc_status_fields(rpc, &rpc->trl, st);
  rv = hb_done(&rpc->trl);
  if (rv != 0) {
    return rv;
  }
  rpc->out_end = 1;
  rpc_resume(rpc);
  return 0;
}

/* Connect end-stream message or gRPC-Web trailer frame. */
static int end_in_body(conch_rpc *rpc, const conch_status *st) {
  const conch_mem *mem = rpc_mem(rpc);
  conch_buf b = CONCH_BUF_INIT;
  uint8_t flags;
  int rv = submit_stream_head(rpc);

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
    hb_clear(&h, mem);
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
    rpc_resume(rpc);
  }
  conch__buf_free(&b, mem);
  return rv;
}

/* The server's side of the end: the response for |st| goes out. */
static void rpc_end(conch_rpc *rpc, const conch_status *st) {
  int rv;

  rpc->state = SRV_RPC_DONE;
  conch__heap_remove(&rpc->conn->s->heap, &rpc->timer);
  conch__heap_remove(&rpc->conn->s->heap, &rpc->recv);
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
    (void)nghttp2_submit_rst_stream(rpc->conn->h2, NGHTTP2_FLAG_NONE, rpc->id,
                                    NGHTTP2_INTERNAL_ERROR);
  }
  conch__srv_conn_kick(rpc->conn);
}

/* The call fails on the server's side: the handler hears on_cancel, the
   client gets |code|. */
static CONCH_PRINTF(3, 4) void rpc_fail(conch_rpc *rpc, conch_code code,
                                        const char *fmt, ...) {
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
  (void)conch__status_vset(&st, rpc_mem(rpc), code, CONCH_ORIGIN_LOCAL, 0,
                           fmt, ap);
  va_end(ap);
  rpc_cancel_user(rpc, &st);
  rpc_end(rpc, &st);
  conch_status_clear(&st);
}

void conch__srv_rpc_deadline(conch_rpc *rpc) {
  rpc_fail(rpc, CONCH_CODE_DEADLINE_EXCEEDED, "deadline exceeded");
}

void conch__srv_conn_fail_held(srv_conn *conn) {
  for (conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
    conch_rpc *rpc = CONCH_CONTAINER(l, conch_rpc, link);
    if (rpc->state == SRV_RPC_USER) {
      rpc_fail(rpc, CONCH_CODE_UNAVAILABLE, "the server is shutting down");
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

/* Decodes the request message |p| (|n| bytes, decompressed) of a typed
   method.  Returns 0, CONCH_ERR_NOMEM (the allocator failed; protobuf-c
   cannot tell it from bad input, JSON can) or CONCH_ERR_CODEC with the
   reason in |err|. */
static int utf8_valid(const char *str) {
  const unsigned char *p = (const unsigned char *)str;
  size_t n = strlen(str);

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
   map entries included) that is not UTF-8, or NULL; |*owner| its
   message.  proto3 strings must be UTF-8: protobuf-go (connect-go)
   refuses a message with one, and its JSON could not be written. */
static const ProtobufCFieldDescriptor *
bad_utf8(const ProtobufCMessage *m, const ProtobufCMessageDescriptor **owner) {
  const ProtobufCMessageDescriptor *d = m->descriptor;

  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *base = (const char *)m;
    const void *at = base + f->offset;
    size_t n = 1;

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
    for (size_t j = 0; j < n; j++) {
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

/* Decodes one request message, with the error texts of connect-go (after
   "unmarshal into <type>: ").  Returns 0, CONCH_ERR_CODEC,
   CONCH_ERR_LIMIT (a JSON message of too many values: its text alone in
   |err|) or CONCH_ERR_NOMEM. */
static int decode_msg(conch_rpc *rpc, const uint8_t *p, size_t n,
                      ProtobufCMessage **out, char *err, size_t errlen) {
  conch_server *s = rpc->conn->s;
  const srv_method *m = rpc->method;
  const ProtobufCMessageDescriptor *owner = NULL;
  const ProtobufCFieldDescriptor *bad;

  if (rpc->json && n == 0 && rpc->wire == SRV_CONNECT_UNARY) {
    /* An empty envelope is an empty message whatever the codec; an empty
       unary body is no JSON. */
    snprintf(err, errlen, "zero-length payload is not a valid JSON object");
    return CONCH_ERR_CODEC;
  }
  if (rpc->json && n > 0) {
    conch_pbjson_opts jo = {s->o.json_resolve, s->o.json_resolve_ud};
    /* The parse tree costs up to ~50 times the text: the values are
       counted before any is built. */
    if (conch__json_values(p, n) > CONCH_JSON_MAX_VALUES) {
      snprintf(err, errlen, "JSON request has more than %d values",
               CONCH_JSON_MAX_VALUES);
      return CONCH_ERR_LIMIT;
    }
    return conch__pbjson_decode_ex(m->m.input, p, n, &jo, &s->pb_alloc, out,
                                   err, errlen);
  }
  *out = protobuf_c_message_unpack(m->m.input, &s->pb_alloc, n, p);
  if (*out == NULL) {
    snprintf(err, errlen, "invalid wire-format data");
    return CONCH_ERR_CODEC;
  }
  bad = bad_utf8(*out, &owner);
  if (bad != NULL) {
    snprintf(err, errlen, "proto: field %s.%s contains invalid UTF-8",
             owner->name, bad->name);
  } else if ((bad = conch__pb_nul_string(m->m.input, p, n, &owner)) != NULL) {
    snprintf(err, errlen,
             "proto: field %s.%s contains a NUL byte, which this server "
             "cannot take in a string",
             owner->name, bad->name);
  }
  if (bad != NULL) {
    protobuf_c_message_free_unpacked(*out, &s->pb_alloc);
    *out = NULL;
    return CONCH_ERR_CODEC;
  }
  return 0;
}

static int decode_and_deliver(conch_rpc *rpc, const uint8_t *p, size_t n) {
  conch_server *s = rpc->conn->s;
  const srv_method *m = rpc->method;
  ProtobufCMessage *msg = NULL;
  char err[256];
  int rv;

  rpc->nrecv++;
  if ((m->m.kind == CONCH_STREAM_UNARY || m->m.kind == CONCH_STREAM_SERVER) &&
      rpc->nrecv > 1) {
    rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED,
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
      if (conch__buf_append(&rpc->first_raw, s->mem, p, n) != 0) {
        rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
      }
      rpc->has_first = 1;
    } else if (m->h.on_raw_message != NULL) {
      m->h.on_raw_message(rpc, p, n, m->user_data);
    }
    return 0;
  }
  rv = decode_msg(rpc, p, n, &msg, err, sizeof(err));
  if (rv == CONCH_ERR_LIMIT) {
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "%s", err);
    return -1;
  }
  if (rv != 0) {
    rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT, "unmarshal into %s: %s",
             m->m.input->name, err);
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

/* Decompresses |p| (|n| bytes) into |plain|.  Returns 0 or what
   conch__comp_decompress() returns. */
static int inflate_msg(conch_rpc *rpc, const uint8_t *p, size_t n,
                       conch_buf *plain) {
  conch_server *s = rpc->conn->s;
  return conch__comp_decompress(&s->comps, &s->o.comp, rpc->req_enc, p, n,
                                s->o.recv_limit, plain);
}

/* Pull mode: tells a handler that asked in vain that there is news. */
static void pull_notify(conch_rpc *rpc) {
  if (rpc->want_recv && rpc->state == SRV_RPC_USER) {
    rpc->want_recv = 0;
    rpc->method->h.on_recv_ready(rpc, rpc->method->user_data);
  }
}

/* Pull mode: queues a checked message as received, and holds the bytes
   after it (their stream window kept) until the queue is taken. */
static int pull_queue(conch_rpc *rpc, int compressed, const uint8_t *p,
                      size_t n) {
  const conch_mem *mem = rpc_mem(rpc);
  uint32_t len = (uint32_t)n;
  uint8_t c = compressed ? 1 : 0;

  if (conch__buf_reserve(&rpc->pq, mem, sizeof(len) + 1 + n) != 0) {
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  conch__buf_append(&rpc->pq, mem, &len, sizeof(len));
  conch__buf_append(&rpc->pq, mem, &c, 1);
  conch__buf_append(&rpc->pq, mem, p, n);
  rpc->pq_n++;
  rpc->paused = 1;
  pull_notify(rpc);
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
    rpc_fail(rpc, CONCH_CODE_INTERNAL,
             "protocol error: compressed message without an encoding");
    return -1;
  }
  if (compressed && n > 0) {
    rv = inflate_msg(rpc, p, n, &plain);
    if (rv != 0) {
      conch__buf_free(&plain, s->mem);
      if (rv == CONCH_ERR_LIMIT) {
        rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
                 "message is larger than the limit of %zu bytes",
                 s->o.recv_limit);
      } else {
        rpc_fail(rpc, CONCH_CODE_INTERNAL, "cannot decompress %s message",
                 comp_name(rpc, rpc->req_enc));
      }
      return -1;
    }
    p = conch__buf_head(&plain);
    n = conch__buf_size(&plain);
  }
  rv = decode_and_deliver(rpc, p != NULL ? p : (const uint8_t *)"", n);
  conch__buf_free(&plain, s->mem);
  if (rv == 0 && rpc->pull) {
    rv = pull_queue(rpc, compressed && wlen > 0,
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
                conch__buf_head(&rpc->body), conch__buf_size(&rpc->body)) != 0) {
      return;
    }
  } else if (!conch__env_reader_at_boundary(&rpc->env)) {
    rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
             "protocol error: incomplete envelope");
    return;
  }
  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  if ((m->m.kind == CONCH_STREAM_UNARY || m->m.kind == CONCH_STREAM_SERVER) &&
      rpc->nrecv == 0) {
    rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED,
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
    conch__buf_free(&rpc->first_raw, rpc_mem(rpc));
    if (rpc->state != SRV_RPC_USER) {
      return;
    }
  }
  if (rpc->pull) {
    pull_notify(rpc); /* the end: conch_rpc_recv() says EOF */
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
    /* The body timer runs from chunk to chunk (recv_update rearms it). */
    conch__heap_remove(&s->heap, &rpc->recv);
    conch__srv_http_body(rpc, p, n);
    return;
  }
  if (rpc->wire == SRV_CONNECT_UNARY) {
    if (s->o.recv_limit != 0 &&
        conch__buf_size(&rpc->body) + n > s->o.recv_limit) {
      rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
               "message is larger than the limit of %zu bytes",
               s->o.recv_limit);
      return;
    }
    if (conch__buf_append(&rpc->body, s->mem, p, n) != 0) {
      rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
    return;
  }
  rv = conch__env_reader_feed(&rpc->env, p, n, on_envelope, rpc);
  if (rv == CONCH_ERR_LIMIT) {
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
             "message is larger than the limit of %zu bytes", s->o.recv_limit);
  } else if (rv == CONCH_ERR_PROTO) {
    rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
             "protocol error: bad envelope flags");
  } else if (rv == CONCH_ERR_NOMEM) {
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
}

static const char *proto_hdr(conch_rpc *rpc, const char *name) {
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
  raw = conch__malloc(s->mem, mlen + 1);
  if (raw == NULL) {
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  n = query_unescape(msg, mlen, raw);
  if (n >= 0 && query_is(q, "base64", "1")) {
    size_t out = 0;
    uint8_t *dec = conch__malloc(s->mem, conch__b64_decoded_max((size_t)n) + 1);
    if (dec == NULL ||
        conch__b64_decode((const char *)raw, (size_t)n, CONCH_B64_URL, dec,
                          &out) != 0) {
      n = -1;
    } else {
      memcpy(raw, dec, out);
      n = (long)out;
    }
    conch__free(s->mem, dec);
  }
  if (n < 0) {
    conch__free(s->mem, raw);
    rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
             "the message in the query does not decode");
    return -1;
  }
  if (conch__buf_append(&rpc->body, s->mem, raw, (size_t)n) != 0) {
    conch__free(s->mem, raw);
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  conch__free(s->mem, raw);
  comp = query_get(q, "compression", &clen);
  rpc->req_enc = accepted_comp(s, comp, comp != NULL ? clen : 0);
  if (rpc->req_enc < 0) {
    rpc->req_enc = CONCH_COMPRESSION_IDENTITY;
    rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED, "unknown compression");
    return -1;
  }
  return 0;
}

/* Gives the request headers a meaning.  Returns 0 when the handler may
   have the call. */
static int rpc_dispatch(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  const char *ct = proto_hdr(rpc, "content-type");
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
      rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED, "unknown method %s",
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
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
             "request headers are larger than the limit of %u bytes",
             (unsigned)s->o.max_header_list);
    return -1;
  }
  switch (rpc->wire) {
  case SRV_CONNECT_UNARY:
    enc = rpc->get ? NULL : proto_hdr(rpc, "content-encoding");
    acc = proto_hdr(rpc, "accept-encoding");
    tmo = proto_hdr(rpc, "connect-timeout-ms");
    break;
  case SRV_CONNECT_STREAM:
    enc = proto_hdr(rpc, "connect-content-encoding");
    acc = proto_hdr(rpc, "connect-accept-encoding");
    tmo = proto_hdr(rpc, "connect-timeout-ms");
    break;
  default:
    enc = proto_hdr(rpc, "grpc-encoding");
    acc = proto_hdr(rpc, "grpc-accept-encoding");
    tmo = proto_hdr(rpc, "grpc-timeout");
    break;
  }
  if (rpc->wire == SRV_CONNECT_UNARY || rpc->wire == SRV_CONNECT_STREAM) {
    const char *v = proto_hdr(rpc, "connect-protocol-version");
    if (v != NULL && strcmp(v, "1") != 0) {
      rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
               "connect-protocol-version must be \"1\": got \"%s\"", v);
      return -1;
    }
  }
  if (!rpc->get) {
    rpc->req_enc = accepted_comp(s, enc, enc != NULL ? strlen(enc) : 0);
  }
  if (rpc->req_enc < 0) {
    rpc->req_enc = CONCH_COMPRESSION_IDENTITY;
    rpc_fail(rpc, CONCH_CODE_UNIMPLEMENTED,
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
      rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
               "malformed grpc-timeout: \"%s\"", tmo);
      return -1;
    }
    if (rv == CONCH_TIMEOUT_TOO_LONG) {
      rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
               "parse timeout: \"%s\" has >10 digits", tmo);
      return -1;
    }
    if (rv != 0) {
      rpc_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
               "parse timeout: strconv.ParseInt: parsing \"%s\": invalid "
               "syntax",
               tmo);
      return -1;
    }
    if (ms == 0) {
      rpc_fail(rpc, CONCH_CODE_DEADLINE_EXCEEDED, "context deadline exceeded");
      return -1;
    }
    rpc->deadline = conch__srv_now(s) + ms;
    if (conch__heap_insert(&s->heap, s->mem, &rpc->timer, rpc->deadline) !=
        0) {
      rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return -1;
    }
  }
  return 0;
}

/* ---- nghttp2 callbacks ------------------------------------------------------ */

static conch_rpc *stream_rpc(nghttp2_session *h2, int32_t id) {
  return nghttp2_session_get_stream_user_data(h2, id);
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame,
                            void *user_data) {
  srv_conn *conn = user_data;
  conch_rpc *rpc;

  if (frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  rpc = rpc_new(conn, frame->hd.stream_id);
  if (rpc == NULL) {
    (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                    NGHTTP2_INTERNAL_ERROR);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  nghttp2_session_set_stream_user_data(h2, frame->hd.stream_id, rpc);
  return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user_data) {
  srv_conn *conn = user_data;
  conch_rpc *rpc = stream_rpc(h2, frame->hd.stream_id);
  const conch_mem *mem = conn->s->mem;
  int rv = 0;
  (void)flags;

  if (rpc == NULL || rpc->state != SRV_RPC_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
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
  if (rv != 0) {
    (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                    NGHTTP2_INTERNAL_ERROR);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return 0;
}

/* ---- The gate and plain routes ---------------------------------------------- */

const char *conch_server_request_header(const conch_server_request *req,
                                        const char *name) {
  const conch_rpc *rpc;
  const char *v;

  if (req == NULL || name == NULL || req->impl_ == NULL) {
    return NULL;
  }
  rpc = req->impl_;
  v = conch_metadata_get(&rpc->proto_md, name, NULL);
  return v != NULL ? v : conch_metadata_get(&rpc->req_md, name, NULL);
}

static void put_status(char *b, int status) {
  b[0] = (char)('0' + status / 100);
  b[1] = (char)('0' + status / 10 % 10);
  b[2] = (char)('0' + status % 10);
  b[3] = '\0';
}

/* Answers with plain HTTP: |r|'s status, content type, headers and body
   (none for HEAD). */
static void rpc_reply(conch_rpc *rpc, const conch_server_reply *r) {
  const conch_mem *mem = rpc_mem(rpc);
  int status = r->status >= 200 && r->status <= 599 ? r->status : 500;
  int head = strcmp(rpc->mname, "HEAD") == 0;
  size_t blen = r->body != NULL ? r->body_len : 0;
  char st[4], num[24];
  hb h = {0};
  int rv = 0;

  rpc->state = SRV_RPC_DONE;
  conch__heap_remove(&rpc->conn->s->heap, &rpc->recv);
  conch__srv_conn_idle(rpc->conn);
  put_status(st, status);
  hb_str(&h, mem, ":status", st);
  if (r->content_type != NULL) {
    hb_str(&h, mem, "content-type", r->content_type);
  }
  if (status != 204 && status != 304) {
    (void)snprintf(num, sizeof(num), "%zu", blen);
    hb_str(&h, mem, "content-length", num);
  }
  for (size_t i = 0; r->headers != NULL && r->headers[i] != NULL &&
                     r->headers[i + 1] != NULL;
       i += 2) {
    hb_str(&h, mem, r->headers[i], r->headers[i + 1]);
  }
  if (head || status == 204 || status == 304) {
    blen = 0;
  }
  if (blen > 0) {
    rv = conch__buf_append(&rpc->out, mem, r->body, blen);
  }
  rpc->out_end = 1;
  if (rv == 0) {
    rv = rpc_submit(rpc, &h, blen > 0);
  }
  if (rv != 0) {
    (void)nghttp2_submit_rst_stream(rpc->conn->h2, NGHTTP2_FLAG_NONE, rpc->id,
                                    NGHTTP2_INTERNAL_ERROR);
  }
  hb_clear(&h, mem);
}

/* The gate refused the call: a plain answer, or an RPC error in the
   request's protocol (a Connect unary error when none is named). */
static void rpc_refuse(conch_rpc *rpc, const conch_server_verdict *v) {
  const char *ct = proto_hdr(rpc, "content-type");
  conch_status st;
  conch_ctype t;
  conch_code code = v->code;

  if (v->reply.status != 0) {
    rpc_reply(rpc, &v->reply);
    return;
  }
  rpc->wire = SRV_CONNECT_UNARY;
  if (ct != NULL && conch__ctype_parse(ct, strlen(ct), &t) == 0 &&
      t.codec != CONCH_CT_OTHER) {
    rpc->wire = t.family == CONCH_CT_CONNECT          ? SRV_CONNECT_UNARY
                : t.family == CONCH_CT_CONNECT_STREAM ? SRV_CONNECT_STREAM
                : t.family == CONCH_CT_GRPC           ? SRV_GRPC
                                                      : SRV_GRPC_WEB;
    rpc->json = t.codec == CONCH_CT_JSON;
  }
  if (code <= CONCH_CODE_OK || code > CONCH_CODE_UNAUTHENTICATED) {
    code = CONCH_CODE_PERMISSION_DENIED;
  }
  conch_status_init(&st);
  (void)conch__status_set(&st, rpc_mem(rpc), code, CONCH_ORIGIN_LOCAL, 0, "%s",
                          v->message != NULL ? v->message : "");
  rpc_end(rpc, &st);
  conch_status_clear(&st);
}

/* The gate, then plain routes.  Returns 0 when the request goes on to its
   method. */
static int rpc_gate(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  conch_server_request req;
  srv_route *route;
  srv_http_route *http;

  memset(&req, 0, sizeof(req));
  req.method = rpc->mname;
  req.path = rpc->path != NULL ? rpc->path : "";
  req.authority = rpc->authority != NULL ? rpc->authority
                                         : proto_hdr(rpc, "host");
  req.peer_uid = rpc->conn->peer_uid;
  req.conn_passed = rpc->conn->passed;
  req.impl_ = rpc;
  if (s->o.gate != NULL) {
    conch_server_verdict v;
    memset(&v, 0, sizeof(v));
    if (s->o.gate(&req, &v, s->o.gate_ud) != 0) {
      rpc_refuse(rpc, &v);
      return -1;
    }
  }
  http = conch__srv_find_http(s, req.path);
  if (http != NULL) {
    if (conch__srv_http_start(rpc, http) != 0) {
      conch_server_reply r;
      memset(&r, 0, sizeof(r));
      r.status = 503;
      rpc_reply(rpc, &r);
    }
    return -1;
  }
  route = conch__srv_find_route(s, req.path);
  if (route != NULL) {
    conch_server_reply r;
    memset(&r, 0, sizeof(r));
    route->fn(&req, &r, route->user_data);
    rpc_reply(rpc, &r);
    return -1;
  }
  if (!rpc->conn->passed) {
    rpc->conn->passed = 1;
    conch__srv_conn_idle(rpc->conn);
  }
  return 0;
}

/* ---- Request timeouts and held bytes --------------------------------------- */

/* The body timer runs while the client owes bytes: the whole request of a
   unary or server-streaming call, each message of the other kinds from
   its first byte; not while the handler keeps the call paused. */
static void recv_update(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  conch_stream_kind k;
  int want;

  if (!rpc->headers_in || s->o.body_ms == 0 || rpc->discarding) {
    return; /* a discarding call has its own timer */
  }
  k = rpc->method != NULL ? rpc->method->m.kind : CONCH_STREAM_UNARY;
  if (rpc->state != SRV_RPC_USER || rpc->half_closed || rpc->paused ||
      rpc->eos_held) {
    want = 0;
  } else if (rpc->http != NULL) {
    want = 1; /* rearmed by each chunk (rpc_data) */
  } else if (k == CONCH_STREAM_UNARY || k == CONCH_STREAM_SERVER ||
             rpc->wire == SRV_CONNECT_UNARY) {
    want = 1;
  } else {
    want = !conch__env_reader_at_boundary(&rpc->env);
  }
  if (!want) {
    conch__heap_remove(&s->heap, &rpc->recv);
  } else if (rpc->recv.idx == SIZE_MAX &&
             conch__heap_insert(&s->heap, s->mem, &rpc->recv,
                                conch__srv_now(s) + s->o.body_ms) != 0) {
    rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
}

void conch__srv_rpc_recv_update(conch_rpc *rpc) { recv_update(rpc); }

void conch__srv_rpc_recv_expired(conch_rpc *rpc) {
  srv_conn *conn = rpc->conn;

  if (rpc->discarding) {
    /* Answered long ago, and the client still has not ended its side. */
    (void)nghttp2_submit_rst_stream(conn->h2, NGHTTP2_FLAG_NONE, rpc->id,
                                    NGHTTP2_NO_ERROR);
    return;
  }

  if (!rpc->headers_in) {
    /* A header block that never ends blocks the whole connection
       (nothing but CONTINUATION may follow it). */
    conn->dead = 1;
    return;
  }
  if (rpc->state != SRV_RPC_USER) {
    (void)nghttp2_submit_rst_stream(conn->h2, NGHTTP2_FLAG_NONE, rpc->id,
                                    NGHTTP2_CANCEL);
    return;
  }
  rpc_fail(rpc, CONCH_CODE_DEADLINE_EXCEEDED,
           "request message not received within %ld ms", conn->s->o.body_ms);
}

/* Request bytes |rpc| holds now. */
static size_t rpc_held(const conch_rpc *rpc) {
  return conch__buf_size(&rpc->body) + conch__buf_size(&rpc->held) +
         conch__buf_size(&rpc->env.body) + rpc->env.prefix_len;
}

/* Drops the request bytes of a call that ends. */
static void rpc_drop_held(conch_rpc *rpc) {
  const conch_mem *mem = rpc_mem(rpc);
  conch__buf_free(&rpc->body, mem);
  conch__buf_free(&rpc->held, mem);
  conch__buf_free(&rpc->env.body, mem);
  rpc->env.prefix_len = 0;
}

/* The server's budget of buffered request bytes is one for everyone, and
   small requests (a listing, a signal, the teardown of a process) must
   get through however it was filled.  A call that holds at most
   SRV_SMALL_HOLD (and at most a 16th of the budget) is small: it may use
   the whole budget, while larger ones may fill only SRV_RESERVE_DIV - 1
   of its SRV_RESERVE_DIV parts.  Should small calls fill the rest too
   (many of them held unfinished), a small call past the budget takes the
   place of the calls that hold the most. */
#define SRV_SMALL_HOLD (64 * 1024)
#define SRV_RESERVE_DIV 8

static size_t small_hold(const conch_server *s) {
  size_t k = s->o.max_buffered / 16;
  return k < SRV_SMALL_HOLD ? k : SRV_SMALL_HOLD;
}

/* The call that holds the most request bytes, other than |self|, or NULL.
   Runs only past the budget; connections that hold no more than the best
   so far are skipped whole. */
static conch_rpc *largest_holder(conch_server *s, const conch_rpc *self) {
  conch_rpc *best = NULL;

  for (conch_link *c = s->conns.next; c != &s->conns; c = c->next) {
    srv_conn *conn = CONCH_CONTAINER(c, srv_conn, link);
    if (conn->buffered == 0 ||
        (best != NULL && conn->buffered <= best->counted)) {
      continue;
    }
    for (conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
      conch_rpc *r = CONCH_CONTAINER(l, conch_rpc, link);
      if (r != self && r->counted > 0 &&
          (best == NULL || r->counted > best->counted)) {
        best = r;
      }
    }
  }
  return best;
}

/* Ends |v| (resource_exhausted) and lets go of the request bytes it
   holds, to make room for a smaller request. */
static void shed_call(conch_rpc *v) {
  srv_conn *vc = v->conn;
  conch_server *s = vc->s;
  size_t held = v->counted;
  size_t unread = conch__buf_size(&v->held); /* their window still out */

  rpc_drop_held(v);
  s->buffered -= v->counted;
  vc->buffered -= v->counted;
  v->counted = 0;
  s->shed_calls++;
  if (unread > 0) {
    (void)nghttp2_session_consume_stream(vc->h2, v->id, unread);
  }
  rpc_fail(v, CONCH_CODE_RESOURCE_EXHAUSTED,
           "server busy: this request held the most (%zu bytes) when "
           "requests being received reached %zu bytes, and a smaller one "
           "took its place",
           held, s->o.max_buffered);
}

/* Counts what |rpc| holds against the limits: past the server's, a small
   call takes the place of the largest holders, a larger one ends
   (resource_exhausted); past its connection's, the connection ends. */
static void rpc_count(conch_rpc *rpc) {
  srv_conn *conn = rpc->conn;
  conch_server *s = conn->s;
  size_t now = rpc_held(rpc);
  size_t max = s->o.max_buffered;

  if (now > rpc->counted && max > 0) {
    int small = now <= small_hold(s);
    size_t cap = small ? max : max - max / SRV_RESERVE_DIV;
    conch_rpc *v;
    while (small && s->buffered - rpc->counted + now > cap &&
           (v = largest_holder(s, rpc)) != NULL && v->counted > now) {
      shed_call(v);
    }
    if (s->buffered - rpc->counted + now > cap) {
      rpc_drop_held(rpc);
      now = 0;
      rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
               "server busy: requests being received hold more than %zu "
               "bytes",
               small ? max : cap);
    }
  }
  s->buffered = s->buffered - rpc->counted + now;
  conn->buffered = conn->buffered - rpc->counted + now;
  rpc->counted = now;
  if (s->buffered > s->buffered_peak) {
    s->buffered_peak = s->buffered;
  }
  if (s->o.conn_buffered > 0 && conn->buffered > s->o.conn_buffered &&
      !conn->dead) {
    (void)nghttp2_session_terminate_session(conn->h2,
                                            NGHTTP2_ENHANCE_YOUR_CALM);
  }
}

static void start_call(conch_rpc *rpc) {
  rpc->headers_in = 1;
  conch__heap_remove(&rpc->conn->s->heap, &rpc->recv);
  if (rpc_gate(rpc) != 0 || rpc_dispatch(rpc) != 0) {
    return;
  }
  rpc->state = SRV_RPC_USER;
  rpc->pull = rpc->method->h.on_recv_ready != NULL;
  conch__srv_conn_idle(rpc->conn);
  recv_update(rpc);
  rpc->method->h.on_call(rpc, rpc->method->user_data);
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *user_data) {
  conch_rpc *rpc;
  (void)user_data;

  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) {
    return 0;
  }
  rpc = stream_rpc(h2, frame->hd.stream_id);
  if (rpc == NULL) {
    return 0;
  }
  if (frame->hd.type == NGHTTP2_HEADERS &&
      frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
      rpc->state == SRV_RPC_HEADERS) {
    start_call(rpc);
  }
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    if (rpc->state == SRV_RPC_USER && (rpc->paused || rpc->resumed)) {
      rpc->eos_held = 1;
    } else {
      rpc_half_close(rpc);
    }
    rpc_count(rpc);
    recv_update(rpc);
  }
  return 0;
}

/* An answered request's rest, read and dropped before its stream is
   reset (on_frame_send()): at most this many bytes, for at most this
   long. */
#define SRV_DISCARD_MAX (1024 * 1024)
#define SRV_DISCARD_MS 5000

/* Request bytes of a paused call wait, their stream window not returned:
   the client can send no more than the window ahead. */
static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user_data) {
  conch_rpc *rpc = stream_rpc(h2, id);
  (void)flags;
  (void)user_data;

  /* The connection window is returned at once, the stream's as the
     handler takes the bytes. */
  if (nghttp2_session_consume_connection(h2, len) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (rpc != NULL && rpc->state == SRV_RPC_USER &&
      (rpc->paused || rpc->resumed)) {
    if (conch__buf_append(&rpc->held, rpc_mem(rpc), data, len) != 0) {
      rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      rpc_count(rpc);
      return 0;
    }
  } else if (rpc != NULL && rpc->discarding) {
    rpc->discarded += (uint32_t)len; /* at most one frame past the max */
    if (rpc->discarded > SRV_DISCARD_MAX) {
      (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, id,
                                      NGHTTP2_NO_ERROR);
    }
  } else if (rpc != NULL) {
    rpc_data(rpc, data, len);
    rpc_count(rpc);
    recv_update(rpc);
  }
  if (nghttp2_session_consume_stream(h2, id, len) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
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
      conch__buf_free(&held, rpc_mem(rpc));
      (void)nghttp2_session_consume_stream(conn->h2, rpc->id, n);
      rpc_count(rpc);
    }
    if (rpc->eos_held && !rpc->paused) {
      rpc->eos_held = 0;
      rpc_half_close(rpc);
    }
    recv_update(rpc);
  }
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *user_data) {
  conch_rpc *rpc;
  (void)user_data;

  if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
      !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    return 0;
  }
  rpc = stream_rpc(h2, frame->hd.stream_id);
  if (rpc != NULL && !rpc->half_closed && !rpc->discarding) {
    /* The response is complete and the rest of the request is not wanted
       (a refusal, an error).  HTTP/2 lets the server reset the stream
       with NO_ERROR now, but clients that are still sending (curl)
       report the reset and drop the answer: the rest is read and dropped
       until the client ends its side, and the stream is reset only when
       it sends more than SRV_DISCARD_MAX or takes longer than
       SRV_DISCARD_MS (as an HTTP/1.1 connection reads the body after an
       early answer). */
    conch_server *s = rpc->conn->s;
    rpc->discarding = 1;
    conch__heap_remove(&s->heap, &rpc->recv);
    if (conch__heap_insert(&s->heap, s->mem, &rpc->recv,
                           conch__srv_now(s) + SRV_DISCARD_MS) != 0) {
      (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE,
                                      frame->hd.stream_id, NGHTTP2_NO_ERROR);
    }
  }
  return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t error,
                           void *user_data) {
  conch_rpc *rpc = stream_rpc(h2, id);
  conch_status st;
  (void)user_data;

  if (rpc == NULL) {
    return 0;
  }
  nghttp2_session_set_stream_user_data(h2, id, NULL);
  if (rpc->state == SRV_RPC_USER) {
    conch_status_init(&st);
    (void)conch__status_set(&st, rpc_mem(rpc), CONCH_CODE_CANCELED,
                            CONCH_ORIGIN_LOCAL, CONCH_ERR_CANCELED,
                            "the client canceled the call (RST_STREAM %u)",
                            (unsigned)error);
    rpc_cancel_user(rpc, &st);
    conch_status_clear(&st);
  }
  rpc_free(rpc);
  return 0;
}

int conch__srv_session_new(srv_conn *conn) {
  conch_server *s = conn->s;
  conch_h2_setup h;

  memset(&h, 0, sizeof(h));
  h.server = 1;
  h.mem = s->mem;
  h.begin_headers = on_begin_headers;
  h.header = on_header;
  h.frame_recv = on_frame_recv;
  h.frame_send = on_frame_send;
  h.data_chunk = on_data_chunk;
  h.stream_close = on_stream_close;
  h.max_streams = s->o.max_streams;
  h.max_header_list = s->o.max_header_list;
  h.stream_window = 1024 * 1024;
  h.manual_window = 1;
  return conch__h2_session_new(&conn->h2, &h, conn);
}

/* ---- Public: one call ------------------------------------------------------- */

const conch_method *conch_rpc_method(const conch_rpc *rpc) {
  return rpc != NULL ? &rpc->method->m : NULL;
}

conch_protocol conch_rpc_protocol(const conch_rpc *rpc) {
  if (rpc == NULL) {
    return CONCH_PROTOCOL_CONNECT;
  }
  return rpc->wire == SRV_GRPC       ? CONCH_PROTOCOL_GRPC
         : rpc->wire == SRV_GRPC_WEB ? CONCH_PROTOCOL_GRPC_WEB
                                     : CONCH_PROTOCOL_CONNECT;
}

conch_codec conch_rpc_codec(const conch_rpc *rpc) {
  return rpc != NULL && rpc->json ? CONCH_CODEC_JSON : CONCH_CODEC_PROTO;
}

const conch_metadata *conch_rpc_request_headers(const conch_rpc *rpc) {
  return &rpc->req_md;
}

long conch_rpc_timeout_ms(const conch_rpc *rpc) {
  int64_t left;
  if (rpc == NULL || rpc->deadline < 0) {
    return -1;
  }
  left = rpc->deadline - conch__srv_now(rpc->conn->s);
  return left <= 0 ? 0 : (left > 0x7fffffff ? 0x7fffffff : (long)left);
}

conch_metadata *conch_rpc_response_headers(conch_rpc *rpc) {
  return &rpc->resp_md;
}

conch_metadata *conch_rpc_response_trailers(conch_rpc *rpc) {
  return &rpc->trl_md;
}

void *conch_rpc_user_data(const conch_rpc *rpc) {
  return rpc != NULL ? rpc->method->user_data : NULL;
}

void conch_rpc_set_data(conch_rpc *rpc, void *data) {
  if (rpc != NULL) {
    rpc->data = data;
  }
}

void *conch_rpc_data(const conch_rpc *rpc) {
  return rpc != NULL ? rpc->data : NULL;
}

conch_server *conch_rpc_server(const conch_rpc *rpc) {
  return rpc != NULL ? rpc->conn->s : NULL;
}

const char *conch_rpc_peer_cert_subject(const conch_rpc *rpc) {
  return rpc != NULL ? conch__tls_peer_subject(rpc->conn->tls) : NULL;
}

const uint8_t *conch_rpc_peer_cert_der(const conch_rpc *rpc, size_t *len) {
  size_t n = 0;
  const uint8_t *p = rpc != NULL ? conch__tls_peer_der(rpc->conn->tls, &n)
                                 : NULL;
  if (len != NULL) {
    *len = n;
  }
  return p;
}

/* Queues one serialized message |p| (|n| bytes). */
static int send_bytes(conch_rpc *rpc, const uint8_t *p, size_t n) {
  conch_server *s = rpc->conn->s;
  const conch_mem *mem = s->mem;
  conch_buf z = CONCH_BUF_INIT;
  int compressed = 0;
  int rv;

  if (rpc->resp_enc != CONCH_COMPRESSION_IDENTITY && n < s->o.compress_min &&
      rpc->wire == SRV_CONNECT_UNARY) {
    rpc->resp_enc = CONCH_COMPRESSION_IDENTITY; /* no Content-Encoding */
  }
  if (rpc->resp_enc != CONCH_COMPRESSION_IDENTITY && n >= s->o.compress_min) {
    rv = conch__comp_compress(&s->comps, &s->o.comp, rpc->resp_enc, p, n, &z);
    if (rv != 0) {
      conch__buf_free(&z, mem);
      return rv == CONCH_ERR_NOMEM ? rv : CONCH_ERR_CODEC;
    }
    p = conch__buf_head(&z);
    n = conch__buf_size(&z);
    compressed = 1;
  }
  if (n > UINT32_MAX) {
    conch__buf_free(&z, mem);
    return CONCH_ERR_LIMIT;
  }
  if (rpc->wire != SRV_CONNECT_UNARY) {
    rv = submit_stream_head(rpc);
    if (rv == 0) {
      rv = conch__buf_reserve(&rpc->out, mem, CONCH_ENV_PREFIX + n);
    }
    if (rv == 0) {
      conch__env_write_prefix(rpc->out.data + rpc->out.len,
                              compressed ? CONCH_ENV_COMPRESSED : 0,
                              (uint32_t)n);
      rpc->out.len += CONCH_ENV_PREFIX;
    }
  } else {
    rv = conch__buf_reserve(&rpc->out, mem, n);
  }
  if (rv == 0 && n > 0) {
    memcpy(rpc->out.data + rpc->out.len, p, n);
    rpc->out.len += n;
  }
  conch__buf_free(&z, mem);
  if (rv != 0) {
    return rv;
  }
  rpc->nsent++;
  rpc->refused = 0;
  if (rpc->wire != SRV_CONNECT_UNARY) {
    rpc_resume(rpc);
    conch__srv_conn_kick(rpc->conn);
  }
  return 0;
}

static int send_check(conch_rpc *rpc) {
  conch_stream_kind k = rpc->method->m.kind;
  if (rpc->state != SRV_RPC_USER || rpc->src != NULL) {
    return CONCH_ERR_STATE;
  }
  if ((k == CONCH_STREAM_UNARY || k == CONCH_STREAM_CLIENT) &&
      rpc->nsent > 0) {
    return CONCH_ERR_STATE;
  }
  if (conch__buf_size(&rpc->out) >= rpc->conn->s->o.send_buffer) {
    rpc->want_ready = 1;
    rpc->refused = 1;
    return CONCH_ERR_AGAIN;
  }
  return 0;
}

static int send_msg(conch_rpc *rpc, const ProtobufCMessage *msg);

/* The most a source's responses may queue: the send buffer, and no more
   than this however large that is. */
#define SRV_SOURCE_MAX (1024 * 1024)

/* Takes responses from the source of |rpc| while its send buffer has room
   (one at least when nothing waits), until it has none now, ends the
   call, or a response cannot be sent (the call then ends with internal).
   Returns 1 when the source ran. */
static int rpc_pump(conch_rpc *rpc) {
  size_t room = rpc->conn->s->o.send_buffer;
  int ran = 0;

  if (room > SRV_SOURCE_MAX) {
    room = SRV_SOURCE_MAX;
  }
  while (rpc->state == SRV_RPC_USER && !rpc->src_wait &&
         conch__buf_size(&rpc->out) < room) {
    const ProtobufCMessage *m = rpc->src->next(rpc, rpc->src);
    int rv;
    ran = 1;
    if (rpc->state != SRV_RPC_USER) {
      break; /* finished (the end of the stream), or canceled */
    }
    if (m == NULL) {
      rpc->src_wait = 1;
      break;
    }
    rv = m->descriptor != rpc->method->m.output ? CONCH_ERR_INVALID
                                                : send_msg(rpc, m);
    if (rv != 0) {
      rpc_fail(rpc, CONCH_CODE_INTERNAL,
               "response %d of the stream cannot be sent: %s", rpc->nsent + 1,
               conch_strerror(rv));
    }
  }
  return ran;
}

int conch__srv_conn_ready(srv_conn *conn) {
  size_t room = conn->s->o.send_buffer;
  conch_link *l;
  int n = 0;

  for (l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
    conch_rpc *rpc = CONCH_CONTAINER(l, conch_rpc, link);
    if (rpc->http != NULL) {
      n += conch__srv_http_ready(rpc);
      continue;
    }
    if (rpc->state == SRV_RPC_USER && rpc->src != NULL) {
      /* The source is the handler: it runs while there is room. */
      n += rpc_pump(rpc);
      continue;
    }
    if (rpc->state == SRV_RPC_USER &&
        ((rpc->want_ready && conch__buf_size(&rpc->out) < room) ||
         (rpc->want_low && conch__buf_size(&rpc->out) <= rpc->low))) {
      rpc->want_ready = 0;
      rpc->want_low = 0;
      if (rpc->method->h.on_send_ready != NULL) {
        /* The handler may send or finish; calls are freed only by
           nghttp2's callbacks, never from here, so |l| stays valid. */
        rpc->method->h.on_send_ready(rpc, rpc->method->user_data);
        n++;
      }
    }
  }
  return n;
}

int conch_rpc_send(conch_rpc *rpc, const ProtobufCMessage *msg) {
  int rv;

  if (rpc == NULL || msg == NULL || rpc->method->m.output == NULL ||
      msg->descriptor != rpc->method->m.output) {
    return CONCH_ERR_INVALID;
  }
  rv = send_check(rpc);
  return rv != 0 ? rv : send_msg(rpc, msg);
}

/* Serializes and queues |msg| (checked by the caller). */
static int send_msg(conch_rpc *rpc, const ProtobufCMessage *msg) {
  const conch_mem *mem = rpc_mem(rpc);
  conch_buf b = CONCH_BUF_INIT;
  char err[256];
  int rv;

  if (rpc->json) {
    const conch_server *s = rpc->conn->s;
    conch_pbjson_opts jo = {s->o.json_resolve, s->o.json_resolve_ud};
    rv = conch__pbjson_encode_ex(msg, &jo, mem, &b, err, sizeof(err));
  } else {
    size_t n = protobuf_c_message_get_packed_size(msg);
    rv = conch__buf_reserve(&b, mem, n);
    if (rv == 0) {
      b.len = protobuf_c_message_pack(msg, b.data);
    }
  }
  if (rv == 0) {
    rv = send_bytes(rpc, conch__buf_head(&b) != NULL ? conch__buf_head(&b)
                                                      : (const uint8_t *)"",
                    conch__buf_size(&b));
  }
  conch__buf_free(&b, mem);
  return rv;
}

int conch_rpc_send_raw(conch_rpc *rpc, const void *data, size_t len) {
  int rv;

  if (rpc == NULL || (data == NULL && len > 0) ||
      rpc->method->m.output != NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = send_check(rpc);
  if (rv != 0) {
    return rv;
  }
  return send_bytes(rpc, data != NULL ? data : "", len);
}

int conch_rpc_send_packed(conch_rpc *rpc, const void *data, size_t len) {
  conch_server *s;
  ProtobufCMessage *msg;
  int rv;

  if (rpc == NULL || (data == NULL && len > 0) ||
      rpc->method->m.output == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = send_check(rpc);
  if (rv != 0 || !rpc->json) {
    return rv != 0 ? rv : send_bytes(rpc, data != NULL ? data : "", len);
  }
  s = rpc->conn->s;
  msg = protobuf_c_message_unpack(rpc->method->m.output, &s->pb_alloc, len,
                                  data != NULL ? data : "");
  if (msg == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = conch_rpc_send(rpc, msg);
  protobuf_c_message_free_unpacked(msg, &s->pb_alloc);
  return rv;
}

size_t conch_rpc_queued(const conch_rpc *rpc) {
  return rpc != NULL ? conch__buf_size(&rpc->out) : 0;
}

/* Takes the first queued message of a pull-mode call: its bytes
   decompressed into |plain| (or, uncompressed, pointed at in the queue:
   |*p|, |*n|).  Returns 0, CONCH_ERR_AGAIN, CONCH_ERR_EOF or
   CONCH_ERR_NOMEM (the message stays queued). */
static int pull_take(conch_rpc *rpc, conch_buf *plain, const uint8_t **p,
                     size_t *n, size_t *entry) {
  const uint8_t *q;
  uint32_t len;
  int rv;

  if (rpc->pq_n == 0) {
    if (rpc->half_closed && !rpc->eos_held) {
      return CONCH_ERR_EOF;
    }
    rpc->want_recv = 1;
    return CONCH_ERR_AGAIN;
  }
  q = conch__buf_head(&rpc->pq);
  memcpy(&len, q, sizeof(len));
  *entry = sizeof(len) + 1 + len;
  *p = q + sizeof(len) + 1;
  *n = len;
  if (q[sizeof(len)] != 0) {
    rv = inflate_msg(rpc, *p, *n, plain);
    if (rv != 0) {
      return CONCH_ERR_NOMEM; /* it inflated once: only memory can fail */
    }
    *p = conch__buf_head(plain) != NULL ? conch__buf_head(plain)
                                        : (const uint8_t *)"";
    *n = conch__buf_size(plain);
  }
  return 0;
}

/* Drops the first queued message; the queue empty, the bytes held behind
   it go on (on the server's next turn). */
static void pull_drop(conch_rpc *rpc, size_t entry) {
  conch__buf_consume(&rpc->pq, entry);
  if (--rpc->pq_n == 0) {
    conch__buf_free(&rpc->pq, rpc_mem(rpc));
    if (rpc->paused) {
      rpc->paused = 0;
      rpc->resumed = 1;
      rpc->conn->s->pending = 1;
      conch__srv_conn_kick(rpc->conn); /* outside a turn: asks for one */
    }
  }
}

int conch_rpc_recv(conch_rpc *rpc, ProtobufCMessage **msg) {
  conch_buf plain = CONCH_BUF_INIT;
  const uint8_t *p;
  size_t n, entry;
  char err[256];
  int rv;

  if (rpc == NULL || msg == NULL) {
    return CONCH_ERR_INVALID;
  }
  *msg = NULL;
  if (!rpc->pull || rpc->method->m.input == NULL ||
      rpc->state != SRV_RPC_USER) {
    return CONCH_ERR_STATE;
  }
  rv = pull_take(rpc, &plain, &p, &n, &entry);
  if (rv == 0) {
    rv = decode_msg(rpc, p, n, msg, err, sizeof(err));
    if (rv != 0) {
      rv = CONCH_ERR_NOMEM; /* it decoded once: only memory can fail */
    } else {
      pull_drop(rpc, entry);
    }
  }
  conch__buf_free(&plain, rpc_mem(rpc));
  return rv;
}

int conch_rpc_recv_raw(conch_rpc *rpc, const uint8_t **data, size_t *len) {
  const conch_mem *mem;
  conch_buf plain = CONCH_BUF_INIT;
  const uint8_t *p;
  size_t n, entry;
  int rv;

  if (rpc == NULL || data == NULL || len == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!rpc->pull || rpc->method->m.input != NULL ||
      rpc->state != SRV_RPC_USER) {
    return CONCH_ERR_STATE;
  }
  mem = rpc_mem(rpc);
  rv = pull_take(rpc, &plain, &p, &n, &entry);
  if (rv == 0) {
    conch__buf_reset(&rpc->pmsg);
    if (conch__buf_append(&rpc->pmsg, mem, p, n) != 0) {
      rv = CONCH_ERR_NOMEM;
    } else {
      pull_drop(rpc, entry);
      *data = conch__buf_head(&rpc->pmsg) != NULL ? conch__buf_head(&rpc->pmsg)
                                                  : (const uint8_t *)"";
      *len = n;
    }
  }
  conch__buf_free(&plain, mem);
  return rv;
}

void conch_server_message_free(conch_server *s, ProtobufCMessage *msg) {
  if (s != NULL && msg != NULL) {
    protobuf_c_message_free_unpacked(msg, &s->pb_alloc);
  }
}

int conch_rpc_notify_drained(conch_rpc *rpc, size_t low) {
  if (rpc == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER) {
    return CONCH_ERR_STATE;
  }
  rpc->want_low = 1;
  rpc->low = low;
  rpc->conn->s->pending = 1;
  conch__srv_conn_kick(rpc->conn); /* outside a turn: asks for one */
  return 0;
}

int conch_rpc_pause(conch_rpc *rpc) {
  if (rpc == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER || rpc->pull) {
    return CONCH_ERR_STATE;
  }
  rpc->paused = 1;
  recv_update(rpc);
  return 0;
}

int conch_rpc_resume(conch_rpc *rpc) {
  if (rpc == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER || rpc->pull) {
    return CONCH_ERR_STATE;
  }
  if (rpc->paused) {
    rpc->paused = 0;
    rpc->resumed = 1;
    rpc->conn->s->pending = 1;
    conch__srv_conn_kick(rpc->conn); /* outside a turn: asks for one */
  }
  return 0;
}

int conch_rpc_send_from(conch_rpc *rpc, const conch_rpc_source *src) {
  conch_stream_kind k;

  if (rpc == NULL || src == NULL || src->next == NULL ||
      rpc->method->m.output == NULL) {
    return CONCH_ERR_INVALID;
  }
  k = rpc->method->m.kind;
  if (k != CONCH_STREAM_SERVER && k != CONCH_STREAM_BIDI) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER || rpc->src != NULL) {
    return CONCH_ERR_STATE;
  }
  rpc->src = conch__malloc(rpc_mem(rpc), sizeof(*rpc->src));
  if (rpc->src == NULL) {
    return CONCH_ERR_NOMEM;
  }
  *rpc->src = *src;
  rpc->src_wait = 0;
  rpc->want_ready = 0; /* the source takes the room from now on */
  rpc->refused = 0;    /* and sends what was refused, if it still counts */
  rpc->conn->s->pending = 1;
  conch__srv_conn_kick(rpc->conn); /* outside a turn: asks for one */
  return 0;
}

int conch_rpc_wake(conch_rpc *rpc) {
  if (rpc == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER || rpc->src == NULL) {
    return CONCH_ERR_STATE;
  }
  if (rpc->src_wait) {
    rpc->src_wait = 0;
    rpc->conn->s->pending = 1;
    conch__srv_conn_kick(rpc->conn);
  }
  return 0;
}

int conch_rpc_finish(conch_rpc *rpc, const conch_status *status) {
  conch_status ok;
  conch_stream_kind k;

  if (rpc == NULL ||
      (status != NULL && (unsigned)status->code > CONCH_CODE_UNAUTHENTICATED)) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER) {
    return CONCH_ERR_STATE;
  }
  k = rpc->method->m.kind;
  if ((status == NULL || status->code == CONCH_CODE_OK) &&
      (k == CONCH_STREAM_UNARY || k == CONCH_STREAM_CLIENT) &&
      rpc->nsent == 0) {
    conch_status_init(&ok);
    (void)conch__status_set(&ok, rpc_mem(rpc), CONCH_CODE_INTERNAL,
                            CONCH_ORIGIN_LOCAL, 0,
                            "the handler sent no response message");
    rpc_end(rpc, &ok);
    conch_status_clear(&ok);
    return 0;
  }
  if ((status == NULL || status->code == CONCH_CODE_OK) && rpc->refused) {
    /* The stream lost a response the handler sent: OK would hide it. */
    conch_status_init(&ok);
    (void)conch__status_set(
        &ok, rpc_mem(rpc), CONCH_CODE_INTERNAL, CONCH_ORIGIN_LOCAL, 0,
        "the handler ended the stream after %d responses, while a response "
        "it sent was refused (CONCH_ERR_AGAIN: send buffer full) and not "
        "sent again",
        rpc->nsent);
    rpc_end(rpc, &ok);
    conch_status_clear(&ok);
    return 0;
  }
  if (status == NULL) {
    conch_status_init(&ok);
    status = &ok;
  }
  rpc_end(rpc, status);
  return 0;
}
