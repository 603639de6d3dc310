/* One call as its handler sees it: the request messages decoded (and, in
   pull mode, queued until taken), the responses sent (typed, raw, packed
   or from a source), and the public conch_rpc_* accessors.  The stream
   and the protocols' heads and ends are server_rpc.c's. */
#include <stdio.h>
#include <string.h>

#include "mem_int.h"
#include "pbborrow.h"
#include "pbjson.h"
#include "server_int.h"
#include "status_int.h"
#include "wire.h"

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
int conch__srv_decode_msg(conch_rpc *rpc, const uint8_t *p, size_t n,
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

/* Decompresses |p| (|n| bytes) into |plain|.  Returns 0 or what
   conch__comp_decompress() returns. */
int conch__srv_inflate_msg(conch_rpc *rpc, const uint8_t *p, size_t n,
                           conch_buf *plain) {
  conch_server *s = rpc->conn->s;
  return conch__comp_decompress(&s->comps, &s->o.comp, rpc->req_enc, p, n,
                                s->o.recv_limit, plain);
}

/* Pull mode: tells a handler that asked in vain that there is news. */
void conch__srv_pull_notify(conch_rpc *rpc) {
  if (rpc->want_recv && rpc->state == SRV_RPC_USER) {
    rpc->want_recv = 0;
    rpc->method->h.on_recv_ready(rpc, rpc->method->user_data);
  }
}

/* Pull mode: queues a checked message as received, and holds the bytes
   after it (their stream window kept) until the queue is taken. */
int conch__srv_pull_queue(conch_rpc *rpc, int compressed, const uint8_t *p,
                          size_t n) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  uint32_t len = (uint32_t)n;
  uint8_t c = compressed ? 1 : 0;

  if (conch__buf_reserve(&rpc->pq, mem, sizeof(len) + 1 + n) != 0) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return -1;
  }
  conch__buf_append(&rpc->pq, mem, &len, sizeof(len));
  conch__buf_append(&rpc->pq, mem, &c, 1);
  conch__buf_append(&rpc->pq, mem, p, n);
  rpc->pq_n++;
  rpc->paused = 1;
  conch__srv_pull_notify(rpc);
  return 0;
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

unsigned conch_rpc_previous_attempts(const conch_rpc *rpc) {
  size_t len = 0;
  const char *v;
  int64_t n;
  if (rpc == NULL) {
    return 0;
  }
  v = conch_metadata_get(&rpc->proto_md, "grpc-previous-rpc-attempts", &len);
  /* Digits only, read as Connect-Timeout-Ms is (wire.c). */
  if (v == NULL || len > 9 || conch__connect_timeout_parse(v, len, &n) != 0) {
    return 0;
  }
  return (unsigned)n;
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
  const conch_mem *mem = s->ep.mem;
  conch_buf z = CONCH_BUF_INIT;
  int compressed = 0;
  int rv;

  if (rpc->ir != NULL && (rv = conch__srv_icept_send(rpc, &p, &n)) != 0) {
    return rv;
  }
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
    rv = conch__srv_stream_head(rpc);
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
    conch__srv_rpc_resume(rpc);
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
      conch__srv_rpc_fail(rpc, CONCH_CODE_INTERNAL,
                          "response %d of the stream cannot be sent: %s",
                          rpc->nsent + 1, conch_strerror(rv));
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
        /* The handler may send or finish; calls are freed only by the
           session (conch__srv_rpc_close()), never from here, so |l|
           stays valid. */
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

/* Queues |msg|, |n| bytes packed, when it goes out uncompressed: packed
   straight into the call's output (after its envelope prefix), so that
   the session's write is the one copy of its bytes. */
static int send_packed(conch_rpc *rpc, const ProtobufCMessage *msg,
                       size_t n) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  size_t pre = rpc->wire != SRV_CONNECT_UNARY ? CONCH_ENV_PREFIX : 0;
  int rv = 0;

  if (pre == 0) {
    rpc->resp_enc = CONCH_COMPRESSION_IDENTITY; /* no Content-Encoding */
  } else {
    rv = conch__srv_stream_head(rpc);
  }
  if (rv == 0) {
    rv = conch__buf_reserve(&rpc->out, mem, pre + n);
  }
  if (rv != 0) {
    return rv;
  }
  if (pre > 0) {
    conch__env_write_prefix(rpc->out.data + rpc->out.len, 0, (uint32_t)n);
  }
  if (n > 0) {
    (void)protobuf_c_message_pack(msg, rpc->out.data + rpc->out.len + pre);
  }
  rpc->out.len += pre + n;
  rpc->nsent++;
  rpc->refused = 0;
  if (pre > 0) {
    conch__srv_rpc_resume(rpc);
    conch__srv_conn_kick(rpc->conn);
  }
  return 0;
}

/* Serializes and queues |msg| (checked by the caller). */
static int send_msg(conch_rpc *rpc, const ProtobufCMessage *msg) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  conch_buf b = CONCH_BUF_INIT;
  char err[256];
  int rv;

  if (!rpc->json) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n <= UINT32_MAX &&
        (rpc->resp_enc == CONCH_COMPRESSION_IDENTITY ||
         n < rpc->conn->s->o.compress_min) &&
        !(rpc->ir != NULL && conch__srv_icept_sends(rpc))) {
      return send_packed(rpc, msg, n);
    }
    /* To be compressed: packed into a buffer of its own (the size is
       known now: not asked again). */
    rv = conch__buf_reserve(&b, mem, n);
    if (rv == 0) {
      b.len = protobuf_c_message_pack(msg, b.data);
      rv = send_bytes(rpc, conch__buf_head(&b) != NULL ? conch__buf_head(&b)
                                                        : (const uint8_t *)"",
                      conch__buf_size(&b));
    }
    conch__buf_free(&b, mem);
    return rv;
  }

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
    rv = conch__srv_inflate_msg(rpc, *p, *n, plain);
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
    conch__buf_free(&rpc->pq, conch__srv_rpc_mem(rpc));
    if (rpc->paused) {
      rpc->paused = 0;
      rpc->resumed = 1;
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
    rv = conch__srv_decode_msg(rpc, p, n, msg, err, sizeof(err));
    if (rv != 0) {
      rv = CONCH_ERR_NOMEM; /* it decoded once: only memory can fail */
    } else {
      pull_drop(rpc, entry);
    }
  }
  conch__buf_free(&plain, conch__srv_rpc_mem(rpc));
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
  mem = conch__srv_rpc_mem(rpc);
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
  conch__srv_rpc_recv_update(rpc);
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
  rpc->src = conch__malloc(conch__srv_rpc_mem(rpc), sizeof(*rpc->src));
  if (rpc->src == NULL) {
    return CONCH_ERR_NOMEM;
  }
  *rpc->src = *src;
  rpc->src_wait = 0;
  rpc->want_ready = 0; /* the source takes the room from now on */
  rpc->refused = 0;    /* and sends what was refused, if it still counts */
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
    (void)conch__status_set(&ok, conch__srv_rpc_mem(rpc), CONCH_CODE_INTERNAL,
                            CONCH_ORIGIN_LOCAL, 0,
                            "the handler sent no response message");
    conch__srv_rpc_end(rpc, &ok);
    conch_status_clear(&ok);
    return 0;
  }
  if ((status == NULL || status->code == CONCH_CODE_OK) && rpc->refused) {
    /* The stream lost a response the handler sent: OK would hide it. */
    conch_status_init(&ok);
    (void)conch__status_set(
        &ok, conch__srv_rpc_mem(rpc), CONCH_CODE_INTERNAL, CONCH_ORIGIN_LOCAL,
        0,
        "the handler ended the stream after %d responses, while a response "
        "it sent was refused (CONCH_ERR_AGAIN: send buffer full) and not "
        "sent again",
        rpc->nsent);
    conch__srv_rpc_end(rpc, &ok);
    conch_status_clear(&ok);
    return 0;
  }
  if (status == NULL) {
    conch_status_init(&ok);
    status = &ok;
  }
  conch__srv_rpc_end(rpc, status);
  return 0;
}
