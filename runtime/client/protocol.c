/* Wire protocols over the shared call core: request headers, message
   framing, and turning response headers, body and end into a status. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base64.h"
#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "compress.h"
#include "envelope.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "protocol.h"
#include "status_int.h"
#include "wire.h"

/* ---- Helpers ------------------------------------------------------------ */

/* The response's content type, parsed (wire.h); family 0 when absent or
   not an "application/" type. */
static conch_ctype resp_ctype(conch_call *call, const char *ctype) {
  conch_client *c = call->client;
  conch_ctype ct;
  size_t len;
  if (ctype == NULL) {
    memset(&ct, 0, sizeof(ct));
    return ct;
  }
  len = strlen(ctype);
  if (len == c->ct_last_len && memcmp(ctype, c->ct_last, len) == 0) {
    ct.family = c->ct_last_family;
    ct.codec = c->ct_last_codec;
    ct.params = c->ct_last_params;
    return ct;
  }
  if (conch__ctype_parse(ctype, len, &ct) != 0) {
    memset(&ct, 0, sizeof(ct));
  } else if (len > 0 && len <= sizeof(c->ct_last)) {
    memcpy(c->ct_last, ctype, len);
    c->ct_last_len = len;
    c->ct_last_family = ct.family;
    c->ct_last_codec = ct.codec;
    c->ct_last_params = ct.params;
  }
  return ct;
}

/* Any compression the client knows is decoded, advertised or not. */
static int parse_encoding(const conch_call *call, const char *v) {
  int id;

  if (v == NULL || v[0] == '\0') {
    return CONCH_ENC_IDENTITY;
  }
  id = conch__comp_lookup(&call->client->o.comp, v, strlen(v));
  return id >= 0 ? id : CONCH_ENC_UNSUPPORTED;
}

static const char *send_comp_name(const conch_call *call) {
  return conch__comp_name(&call->client->o.comp, call->send_comp);
}

/* |p|/|n| compressed with the call's send compression onto |out|; a
   failure other than memory ends the call (the codec is at fault). */
static int compress_onto(conch_call *call, const uint8_t *p, size_t n,
                         conch_buf *out) {
  conch_client *c = call->client;
  int rv = conch__comp_compress(&c->comps, &c->o.comp, call->send_comp, p, n,
                                out);
  if (rv != 0 && rv != CONCH_ERR_NOMEM) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, rv,
                     "cannot compress the request with %s",
                     send_comp_name(call));
  }
  return rv;
}

static int is_connect(const conch_call *call) {
  return call->client->o.protocol == CONCH_PROTOCOL_CONNECT;
}

static int is_web(const conch_call *call) {
  return call->client->o.protocol == CONCH_PROTOCOL_GRPC_WEB;
}

int conch__grpc_status_field(const char *name, size_t len) {
  return (len == 11 && memcmp(name, "grpc-status", 11) == 0) ||
         (len == 12 && memcmp(name, "grpc-message", 12) == 0) ||
         (len == 23 && memcmp(name, "grpc-status-details-bin", 23) == 0);
}

static int is_json(const conch_call *call) {
  return call->client->o.codec == CONCH_CODEC_JSON;
}

static int want_codec(const conch_call *call) {
  return is_json(call) ? CONCH_CT_JSON : CONCH_CT_PROTO;
}

static const char *codec_name(const conch_call *call) {
  return is_json(call) ? "json" : "proto";
}

static int connect_unary(const conch_call *call) {
  return is_connect(call) && call->method->kind == CONCH_STREAM_UNARY;
}

/* A Connect stream answered with an HTTP error and a JSON body: the body
   is read and decoded as a unary error is, so the server's message (a 401's
   "unauthorized access, ...") reaches the caller; the code stays the one
   of the HTTP status (connect_unary_end). */
static int connect_stream_error_body(const conch_call *call) {
  return is_connect(call) && call->method->kind != CONCH_STREAM_UNARY &&
         call->http_status != 0 && call->http_status != 200;
}

#define inflate_or_fail conch__call_inflate
#define shrink_inflbuf conch__client_shrink_inflbuf

/* A status from a non-200 HTTP response without a usable body. */
static void fail_http(conch_call *call) {
  conch_status st;
  conch_status_init(&st);
  conch__connect_unary_error(&st, call->client->mem, call->http_status, 0, NULL,
                             0);
  conch__call_end_with(call, &st);
}

/* ---- Request ------------------------------------------------------------ */

int conch__proto_headers_wait_message(const conch_call *call) {
  if (call->http != NULL) {
    return 0; /* a plain HTTP body streams */
  }
  /* The one request message of these shapes goes out with the HEADERS;
     Connect unary must know it anyway to say whether it is compressed. */
  return call->method->kind == CONCH_STREAM_UNARY ||
         call->method->kind == CONCH_STREAM_SERVER;
}

int conch__proto_frame_message(conch_call *call, const uint8_t *p, size_t n) {
  conch_client *c = call->client;
  int compress = call->send_comp != CONCH_COMPRESSION_IDENTITY &&
                 n >= c->o.compress_min_bytes;
  size_t start = conch__buf_size(&call->sendbuf);
  size_t size;
  int rv;

  if (call->http != NULL) {
    return conch__buf_append(&call->sendbuf, c->mem, p, n); /* as it is */
  }
  if (connect_unary(call)) {
    rv = compress ? compress_onto(call, p, n, &call->sendbuf)
                  : conch__buf_append(&call->sendbuf, c->mem, p, n);
    if (rv != 0) {
      return rv;
    }
    call->unary_compressed = compress;
    size = conch__buf_size(&call->sendbuf) - start;
  } else {
    uint8_t prefix[CONCH_ENV_PREFIX] = {0};
    rv = conch__buf_append(&call->sendbuf, c->mem, prefix, sizeof(prefix));
    if (rv == 0) {
      rv = compress ? compress_onto(call, p, n, &call->sendbuf)
                    : conch__buf_append(&call->sendbuf, c->mem, p, n);
    }
    if (rv != 0) {
      call->sendbuf.len = call->sendbuf.off + start;
      return rv;
    }
    size = conch__buf_size(&call->sendbuf) - start - CONCH_ENV_PREFIX;
    if (size <= 0xffffffffu) {
      conch__env_write_prefix(conch__buf_head(&call->sendbuf) + start,
                              compress ? CONCH_ENV_COMPRESSED : 0,
                              (uint32_t)size);
    }
  }
  if ((c->o.send_limit > 0 && size > c->o.send_limit) || size > 0xffffffffu) {
    call->sendbuf.len = call->sendbuf.off + start;
    conch__call_fail(
        call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_LIMIT,
        "request message of %zu bytes exceeds the send limit "
        "of %zu bytes",
        size, c->o.send_limit > 0 ? c->o.send_limit : (size_t)0xffffffffu);
    return CONCH_ERR_LIMIT;
  }
  return 0;
}

/* Header entries are collected as offsets into |store| (which may move as
   it grows) and turned into pointers at the end. */
typedef struct hdr_list {
  nghttp2_nv *nva;
  size_t cap;
  size_t n;
  conch_buf *store;
  const conch_mem *mem;
  int err;
} hdr_list;

static void hdr_add(hdr_list *h, const char *name, size_t nlen,
                    const void *value, size_t vlen) {
  size_t off;
  if (h->err != 0) {
    return;
  }
  if (h->n == h->cap) {
    h->err = CONCH_ERR_LIMIT;
    return;
  }
  off = conch__buf_size(h->store);
  if (conch__buf_append(h->store, h->mem, name, nlen) != 0 ||
      conch__buf_append(h->store, h->mem, value, vlen) != 0) {
    h->err = CONCH_ERR_NOMEM;
    return;
  }
  h->nva[h->n].name = (uint8_t *)(uintptr_t)off;
  h->nva[h->n].namelen = nlen;
  h->nva[h->n].value = (uint8_t *)(uintptr_t)(off + nlen);
  h->nva[h->n].valuelen = vlen;
  h->nva[h->n].flags = NGHTTP2_NV_FLAG_NONE;
  h->n++;
}

static void hdr_adds(hdr_list *h, const char *name, const char *value) {
  hdr_add(h, name, strlen(name), value, strlen(value));
}

static void hdr_init(hdr_list *h, nghttp2_nv *nva, size_t cap, conch_buf *store,
                     const conch_mem *mem) {
  h->nva = nva;
  h->cap = cap;
  h->n = 0;
  h->store = store;
  h->mem = mem;
  h->err = 0;
}

/* Appends ":path", the client's prefix and |path| (|len| bytes) to the
   store, where they start at |*off|.  Returns 0 or CONCH_ERR_NOMEM. */
static int path_put(hdr_list *h, const conch_client *c, const char *path,
                    size_t len, size_t *off) {
  *off = conch__buf_size(h->store);
  if (conch__buf_append(h->store, h->mem, ":path", 5) != 0 ||
      conch__buf_append(h->store, h->mem, c->prefix, strlen(c->prefix)) != 0 ||
      conch__buf_append(h->store, h->mem, path, len) != 0) {
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

/* The next entry: the :path that path_put() stored at |off|, with |vlen|
   bytes of value (offsets into the store, as hdr_add() records them). */
static void path_entry(hdr_list *h, size_t off, size_t vlen) {
  nghttp2_nv *nv = &h->nva[h->n++];

  nv->name = (uint8_t *)(uintptr_t)off;
  nv->namelen = 5;
  nv->value = (uint8_t *)(uintptr_t)(off + 5);
  nv->valuelen = vlen;
  nv->flags = NGHTTP2_NV_FLAG_NONE;
}

/* Entries [from, h->n) hold offsets into the store: makes them pointers,
   now that the store moves no more.  Inline: request_headers() is the
   client's hot path, where often no entry is left to fix. */
static inline void hdr_resolve(hdr_list *h, size_t from) {
  size_t i;

  for (i = from; i < h->n; i++) {
    uint8_t *base = conch__buf_head(h->store);

    h->nva[i].name = base + (uintptr_t)h->nva[i].name;
    h->nva[i].value = base + (uintptr_t)h->nva[i].value;
  }
}

/* Appends the caller's metadata; binary values go out as unpadded
   standard base64. */
static void add_user_headers(hdr_list *h, const conch_metadata *md) {
  size_t i;
  for (i = 0; i < md->n && h->err == 0; i++) {
    const conch_md_entry *e = &md->ents[i];
    const char *name = (const char *)md->strings.data + e->name_off;
    const uint8_t *v = md->strings.data + e->value_off;
    if (conch__metadata_is_bin(name, e->name_len)) {
      size_t elen = conch__b64_encoded_len(e->value_len);
      char stackbuf[256];
      char *enc = stackbuf;
      if (elen > sizeof(stackbuf)) {
        enc = conch__malloc(h->mem, elen);
        if (enc == NULL) {
          h->err = CONCH_ERR_NOMEM;
          return;
        }
      }
      conch__b64_encode(v, e->value_len, CONCH_B64_STD, enc);
      hdr_add(h, name, e->name_len, enc, elen);
      if (enc != stackbuf) {
        conch__free(h->mem, enc);
      }
    } else {
      hdr_add(h, name, e->name_len, v, e->value_len);
    }
  }
}

/* Appends |n| bytes of |p| to |store| percent-encoded for a query value:
   everything but RFC 3986's unreserved characters becomes %HH. */
static int percent_encode(conch_buf *store, const conch_mem *mem,
                          const uint8_t *p, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t i;
  char *out;
  if (n == 0) {
    return 0;
  }
  if (conch__buf_reserve(store, mem, 3 * n) != 0) {
    return CONCH_ERR_NOMEM;
  }
  out = (char *)conch__buf_head(store) + conch__buf_size(store);
  for (i = 0; i < n; i++) {
    uint8_t ch = p[i];
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
        (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_' ||
        ch == '~') {
      *out++ = (char)ch;
    } else {
      *out++ = '%';
      *out++ = hex[ch >> 4];
      *out++ = hex[ch & 15];
    }
  }
  store->len = (size_t)((uint8_t *)out - store->data);
  return 0;
}

/* Appends the query of a Connect GET to |store|, in connect-go's order:
   the request body (sendbuf) as unpadded URL-safe base64 when it is binary
   or compressed, else (uncompressed JSON) percent-encoded (1.2). */
static int get_query(conch_call *call, conch_buf *store) {
  conch_client *c = call->client;
  int json = is_json(call);
  const char *q;
  size_t n = conch__buf_size(&call->sendbuf);
  size_t elen = conch__b64_encoded_len(n);
  size_t at;

  if (call->unary_compressed) {
    const char *name = send_comp_name(call);
    q = json ? "&encoding=json&message=" : "&encoding=proto&message=";
    if (conch__buf_append(store, c->mem, "?connect=v1&base64=1&compression=",
                          33) != 0 ||
        conch__buf_append(store, c->mem, name, strlen(name)) != 0) {
      return CONCH_ERR_NOMEM;
    }
  } else {
    q = json ? "?connect=v1&encoding=json&message="
             : "?connect=v1&base64=1&encoding=proto&message=";
  }
  if (conch__buf_append(store, c->mem, q, strlen(q)) != 0) {
    return CONCH_ERR_NOMEM;
  }
  if (json && !call->unary_compressed) {
    return percent_encode(store, c->mem, conch__buf_head(&call->sendbuf), n);
  }
  at = conch__buf_size(store);
  if (conch__buf_reserve(store, c->mem, elen) != 0) {
    return CONCH_ERR_NOMEM;
  }
  conch__b64_encode(conch__buf_head(&call->sendbuf), n, CONCH_B64_URL,
                    (char *)conch__buf_head(store) + at);
  store->len += elen;
  return 0;
}

/* The accepted list (with the send compression) under |name|; nothing
   when it is identity only. */
static void accept_header(hdr_list *h, const conch_call *call,
                          const char *name) {
  char v[CONCH__COMP_ACCEPT_MAX];
  size_t n = conch__comp_accept_value(&call->client->o.comp, call->send_comp, v);

  if (n > 0) {
    hdr_add(h, name, strlen(name), v, n);
  }
}

/* The request headers that stay the same for every POST of one method on a
   client (with one send compression): the pseudo-headers, content-type,
   the protocol's fixed fields, the accepted encodings and the user agents.
   Built once per client and method and handed to nghttp2 without copying
   (NGHTTP2_NV_FLAG_NO_COPY_*): their strings live as long as the client.
   Templates are never freed before the client, so a HEADERS frame nghttp2
   still holds always points at live strings; past HDR_TMPL_MAX methods the
   headers are built per call instead. */
#define HDR_TMPL_MAX 64

typedef struct conch_hdr_tmpl {
  struct conch_hdr_tmpl *next;
  char *path; /* the method's path, the key with |kind| and |send_comp| */
  conch_stream_kind kind;
  int send_comp;
  size_t n;      /* entries */
  int ua_last;   /* the last entry is user-agent (dropped when the call
                    sets its own) */
  nghttp2_nv *nva;
} conch_hdr_tmpl;

/* Appends the POST headers every call of |call|'s method shares. */
static void const_headers(hdr_list *h, conch_call *call) {
  conch_client *c = call->client;
  hdr_adds(h, ":method", "POST");
  hdr_adds(h, ":scheme", c->tls ? "https" : "http");
  hdr_adds(h, ":authority", c->authority);
  if (is_connect(call)) {
    hdr_adds(h, "content-type",
             conch__ctype_name(connect_unary(call) ? CONCH_CT_CONNECT
                                                   : CONCH_CT_CONNECT_STREAM,
                               want_codec(call), 0));
    hdr_adds(h, "connect-protocol-version", "1");
  } else if (is_web(call)) {
    hdr_adds(h, "content-type",
             conch__ctype_name(CONCH_CT_GRPC_WEB, want_codec(call), 0));
  } else {
    hdr_adds(h, "content-type",
             conch__ctype_name(CONCH_CT_GRPC, want_codec(call), 0));
    hdr_adds(h, "te", "trailers");
  }
  if (connect_unary(call)) {
    accept_header(h, call, "accept-encoding");
  } else {
    if (call->send_comp != CONCH_COMPRESSION_IDENTITY) {
      hdr_adds(h,
               is_connect(call) ? "connect-content-encoding" : "grpc-encoding",
               send_comp_name(call));
    }
    accept_header(h, call,
                  is_connect(call) ? "connect-accept-encoding"
                                   : "grpc-accept-encoding");
  }
  if (is_web(call)) {
    /* Browsers cannot set user-agent; gRPC-Web servers look here too. */
    hdr_adds(h, "x-user-agent", c->user_agent);
  }
}

/* Builds the template of |call|'s method: NULL when out of memory or when
   the client has HDR_TMPL_MAX already (the caller builds per call). */
static conch_hdr_tmpl *tmpl_new(conch_call *call) {
  conch_client *c = call->client;
  const conch_mem *mem = c->mem;
  nghttp2_nv nva[16];
  conch_buf store = CONCH_BUF_INIT;
  hdr_list h;
  conch_hdr_tmpl *t = NULL, *x;
  size_t i, plen = strlen(c->prefix), mlen = strlen(call->method->path);
  size_t nt = 0, sz, off;
  uint8_t *strings;

  for (x = c->hdr_tmpls; x != NULL; x = x->next) {
    nt++;
  }
  if (nt >= HDR_TMPL_MAX) {
    return NULL;
  }
  hdr_init(&h, nva, sizeof(nva) / sizeof(nva[0]), &store, mem);
  /* :path = prefix + path */
  if (path_put(&h, c, call->method->path, mlen, &off) != 0) {
    conch__buf_free(&store, mem);
    return NULL;
  }
  path_entry(&h, off, plen + mlen);
  const_headers(&h, call);
  hdr_adds(&h, "user-agent", c->user_agent);
  if (h.err == 0) {
    sz = sizeof(*t) + h.n * sizeof(nghttp2_nv) + mlen + 1 +
         conch__buf_size(&store);
    t = conch__malloc(mem, sz);
  }
  if (t != NULL) {
    t->nva = (nghttp2_nv *)(t + 1);
    t->path = (char *)(t->nva + h.n);
    memcpy(t->path, call->method->path, mlen + 1);
    strings = (uint8_t *)t->path + mlen + 1;
    memcpy(strings, conch__buf_head(&store), conch__buf_size(&store));
    for (i = 0; i < h.n; i++) {
      t->nva[i] = nva[i];
      t->nva[i].name = strings + (uintptr_t)nva[i].name;
      t->nva[i].value = strings + (uintptr_t)nva[i].value;
      t->nva[i].flags =
          NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    }
    t->n = h.n;
    t->ua_last = 1;
    t->kind = call->method->kind;
    t->send_comp = call->send_comp;
    t->next = c->hdr_tmpls;
    c->hdr_tmpls = t;
  }
  conch__buf_free(&store, mem);
  return t;
}

/* The template for |call|, made on first use; NULL when none can be. */
static const conch_hdr_tmpl *tmpl_get(conch_call *call) {
  conch_client *c = call->client;
  conch_hdr_tmpl *t;
  for (t = c->hdr_tmpls; t != NULL; t = t->next) {
    if (t->kind == call->method->kind && t->send_comp == call->send_comp &&
        strcmp(t->path, call->method->path) == 0) {
      return t;
    }
  }
  return tmpl_new(call);
}

void conch__proto_client_free(conch_client *c) {
  while (c->hdr_tmpls != NULL) {
    conch_hdr_tmpl *t = c->hdr_tmpls;
    c->hdr_tmpls = t->next;
    conch__free(c->mem, t);
  }
}

/* The head of a plain HTTP exchange (call_int.h): its verb and target,
   the content type, the caller's headers. */
static long http_headers(conch_call *call, nghttp2_nv *nva, size_t cap,
                         conch_buf *store) {
  conch_client *c = call->client;
  const conch_http_x *x = call->http;
  size_t off;
  hdr_list h;

  hdr_init(&h, nva, cap, store, c->mem);
  if (path_put(&h, c, x->method.path, strlen(x->method.path), &off) != 0) {
    return CONCH_ERR_NOMEM;
  }
  path_entry(&h, off, conch__buf_size(store) - off - 5);
  hdr_adds(&h, ":method", x->verb);
  hdr_adds(&h, ":scheme", c->tls ? "https" : "http");
  hdr_adds(&h, ":authority", c->authority);
  if (conch_metadata_find(&call->req_headers, "user-agent", 0) < 0) {
    hdr_adds(&h, "user-agent", c->user_agent);
  }
  if (x->ctype != NULL) {
    hdr_adds(&h, "content-type", x->ctype);
  }
  add_user_headers(&h, &call->req_headers);
  if (h.err != 0) {
    return h.err;
  }
  hdr_resolve(&h, 0);
  return (long)h.n;
}

static long request_headers(conch_call *call, nghttp2_nv *nva, size_t cap,
                            conch_buf *store) {
  conch_client *c = call->client;
  const conch_hdr_tmpl *t = call->get ? NULL : tmpl_get(call);
  int own_ua = conch_metadata_find(&call->req_headers, "user-agent", 0) >= 0;
  hdr_list h;
  char num[32];
  size_t fixed = 0; /* entries [0, fixed) are pointers already */

  hdr_init(&h, nva, cap, store, c->mem);
  if (t != NULL) {
    fixed = t->n - (own_ua && t->ua_last ? 1 : 0);
    if (fixed > cap) {
      return CONCH_ERR_LIMIT;
    }
    memcpy(nva, t->nva, fixed * sizeof(nghttp2_nv));
    h.n = fixed;
  } else {
    size_t plen = strlen(c->prefix), mlen = strlen(call->method->path);
    size_t off, vlen;

    if (path_put(&h, c, call->method->path, mlen, &off) != 0) {
      return CONCH_ERR_NOMEM;
    }
    if (call->get && get_query(call, store) != 0) {
      return CONCH_ERR_NOMEM;
    }
    vlen = conch__buf_size(store) - off - 5;
    if (call->get && c->o.get_max_url > 0 && vlen > c->o.get_max_url) {
      call->get = 0; /* too long for a GET: POST after all */
      store->len = store->off + off + 5 + plen + mlen;
      vlen = plen + mlen;
    }
    path_entry(&h, off, vlen);
    if (call->get) {
      /* The query says it all: no content-type, no protocol version. */
      hdr_adds(&h, ":method", "GET");
      hdr_adds(&h, ":scheme", c->tls ? "https" : "http");
      hdr_adds(&h, ":authority", c->authority);
      accept_header(&h, call, "accept-encoding");
    } else {
      const_headers(&h, call);
    }
    if (!own_ua) {
      hdr_adds(&h, "user-agent", c->user_agent);
    }
  }
  if (call->deadline_at != 0) {
    int64_t left = call->deadline_at - conch__client_now(call->client);
    if (left <= 0) {
      conch__call_fail(call, CONCH_CODE_DEADLINE_EXCEEDED, CONCH_ERR_TIMEOUT,
                       "deadline exceeded before the request was sent");
      return CONCH_ERR_TIMEOUT;
    }
    if (is_connect(call)) {
      /* More than 10 digits means no limit worth sending. */
      if (conch__connect_timeout_format(left, num) > 0) {
        hdr_adds(&h, "connect-timeout-ms", num);
      }
    } else {
      conch__grpc_timeout_format(left, num);
      hdr_adds(&h, "grpc-timeout", num);
    }
  }
  if (call->attempts > 1) {
    hdr_add(&h, "grpc-previous-rpc-attempts", 26, num,
            conch__put_dec(num, call->attempts - 1));
  }
  if (connect_unary(call) && call->unary_compressed && !call->get) {
    hdr_adds(&h, "content-encoding", send_comp_name(call));
  }
  add_user_headers(&h, &call->req_headers);
  if (h.err != 0) {
    return h.err;
  }
  hdr_resolve(&h, fixed);
  return (long)h.n;
}

long conch__proto_request_headers(conch_call *call, nghttp2_nv *nva, size_t cap,
                                  conch_buf *store) {
  long n = call->http != NULL ? http_headers(call, nva, cap, store)
                              : request_headers(call, nva, cap, store);
  if (n == CONCH_ERR_NOMEM) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory building request headers");
  } else if (n < 0 && !call->finished) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, (int)n,
                     "cannot build request headers: %s",
                     conch_strerror((int)n));
  }
  return n;
}

/* ---- Connect responses -------------------------------------------------- */

static void connect_stream_headers(conch_call *call) {
  const char *ctype = conch__call_header(call, CONCH_H_CTYPE);
  conch_ctype ct = resp_ctype(call, ctype);
  const char *enc;

  if (call->http_status != 200) {
    if (ct.family != CONCH_CT_CONNECT || ct.codec != CONCH_CT_JSON) {
      fail_http(call);
    }
    return; /* the error's JSON follows (connect_stream_error_body) */
  }
  if (ct.family != CONCH_CT_CONNECT_STREAM) {
    conch__call_fail(call, CONCH_CODE_UNKNOWN, CONCH_ERR_PROTO,
                     "unexpected response content-type '%s'",
                     ctype != NULL ? ctype : "");
    return;
  }
  if (ct.codec != want_codec(call)) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "response content-type '%s' does not match the request "
                     "codec (%s)",
                     ctype, codec_name(call));
    return;
  }
  enc = conch__call_header(call, CONCH_H_CCENC);
  call->resp_enc = parse_encoding(call, enc);
  if (call->resp_enc == CONCH_ENC_UNSUPPORTED) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "unsupported response connect-content-encoding '%s'", enc);
    return;
  }
  conch__call_emit_headers(call);
}

static void grpc_headers(conch_call *call);
static void grpc_feed(conch_call *call, const uint8_t *data, size_t len);
static void grpc_end(conch_call *call);

void conch__proto_on_headers(conch_call *call) {
  if (call->http != NULL) {
    conch__call_emit_headers(call); /* any status: the caller's to judge */
    return;
  }
  if (!is_connect(call)) {
    grpc_headers(call);
    return;
  }
  if (connect_unary(call)) {
    /* Validated with the body at the end; only a good one is announced. */
    if (call->http_status == 200) {
      conch__call_emit_headers(call);
    }
    return;
  }
  connect_stream_headers(call);
}

static int connect_end_stream(conch_call *call, uint8_t flags, const uint8_t *p,
                              size_t len) {
  conch_client *c = call->client;
  conch_status st;
  int rv;

  if (flags & CONCH_ENV_COMPRESSED) {
    if (call->resp_enc <= CONCH_ENC_IDENTITY) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                       "compressed end-stream message without a response "
                       "encoding");
      return 1;
    }
    if (len > 0) {
      if (inflate_or_fail(call, p, len, "end-stream message") != 0) {
        return 1;
      }
      p = c->inflbuf.data;
      len = conch__buf_size(&c->inflbuf);
    }
  }
  conch_status_init(&st);
  rv = conch__connect_end_stream(p, len, c->mem, &st, &call->trailers);
  shrink_inflbuf(c);
  if (rv != 0) {
    conch_status_clear(&st);
    if (rv == CONCH_ERR_NOMEM) {
      conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                       "out of memory parsing the end-stream message");
    } else {
      conch__call_fail(call, CONCH_CODE_INTERNAL, rv,
                       "invalid end-stream message");
    }
    return 1;
  }
  call->got_end = 1;
  if (st.code != CONCH_CODE_OK) {
    /* Kept until the stream ends: bytes after the end-stream message
       would still be an error of their own, but this one was first. */
    conch_status_clear(&call->status);
    call->status = st;
  } else {
    conch_status_clear(&st);
  }
  return 0;
}

static int on_envelope(void *ud, uint8_t flags, const uint8_t *p, size_t len) {
  conch_call *call = ud;

  if (call->finished) {
    return 1;
  }
  if (call->got_end) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "data after the end-stream message");
    return 1;
  }
  if (flags & CONCH_ENV_END_STREAM) {
    return connect_end_stream(call, flags, p, len);
  }
  if (flags & CONCH_ENV_COMPRESSED) {
    if (call->resp_enc <= CONCH_ENC_IDENTITY) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                       "received a compressed message but the response "
                       "declared no encoding");
      return 1;
    }
  }
  return conch__call_deliver(call, p, len, (flags & CONCH_ENV_COMPRESSED) != 0);
}

static void feed_envelopes(conch_call *call, const uint8_t *data, size_t len,
                           conch_env_cb cb) {
  conch_env_reader *r = &call->reader;
  int rv;

  if (call->got_end && len > 0) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     is_connect(call) ? "data after the end-stream message"
                                      : "data after the trailers");
    return;
  }
  rv = conch__env_reader_feed(r, data, len, cb, call);
  if (rv == 0 || call->finished) {
    return;
  }
  if (rv == CONCH_ERR_LIMIT) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                     "response message of %u bytes exceeds the receive "
                     "limit of %zu bytes",
                     (unsigned)r->len, call->client->o.recv_limit);
  } else if (rv == CONCH_ERR_PROTO) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, rv,
                     "invalid envelope flags 0x%02x", (unsigned)r->flags);
  } else if (rv == CONCH_ERR_NOMEM) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                     "out of memory receiving a message");
  } else {
    conch__call_fail(call, CONCH_CODE_INTERNAL, rv, "cannot read response: %s",
                     conch_strerror(rv));
  }
}

void conch__proto_unlend(conch_call *call) {
  if (call->body_lent != NULL) {
    call->body_lent = NULL;
    call->body_lent_len = 0;
    conch__list_remove(&call->lent_link);
  }
}

/* Copies |call|'s lent body into its own.  Returns 0, or -1 when memory
   ran out (the call failed). */
static int settle_one(conch_call *call) {
  const uint8_t *p = call->body_lent;
  size_t n = call->body_lent_len;
  conch__proto_unlend(call);
  if (conch__buf_append(&call->body, call->client->mem, p, n) != 0) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory receiving the response");
    return -1;
  }
  return 0;
}

void conch__proto_settle(conch_client *c) {
  while (!conch__list_empty(&c->lent)) {
    conch_call *call = CONCH_CONTAINER(c->lent.next, conch_call, lent_link);
    if (call->finished) {
      conch__proto_unlend(call); /* ended meanwhile: nothing reads it */
    } else {
      (void)settle_one(call);
    }
  }
}

/* A Connect unary body (or a stream's error body): the first piece is
   lent, not copied, so that a body that arrives whole in one piece (one
   DATA frame in one read) reaches the decoder where it lies; a second
   piece, or the end of the feed, has it copied. */
static void unary_body(conch_call *call, const uint8_t *data, size_t len) {
  conch_client *c = call->client;
  size_t limit = c->o.recv_limit;

  if (call->body_over || len == 0) {
    return;
  }
  if (limit > 0 &&
      conch__buf_size(&call->body) + call->body_lent_len + len > limit) {
    conch__proto_unlend(call);
    if (call->http_status == 200) {
      conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_LIMIT,
                       "response message exceeds the receive limit of %zu "
                       "bytes",
                       limit);
    }
    call->body_over = 1; /* an error body that big is not worth reading */
    return;
  }
  if (call->body_lent == NULL && conch__buf_size(&call->body) == 0) {
    call->body_lent = data;
    call->body_lent_len = len;
    conch__list_push(&c->lent, &call->lent_link);
    return;
  }
  if (call->body_lent != NULL && settle_one(call) != 0) {
    return;
  }
  if (conch__buf_append(&call->body, c->mem, data, len) != 0) {
    conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory receiving the response");
  }
}

void conch__proto_on_data(conch_call *call, const uint8_t *data, size_t len) {
  call->body_bytes += len;
  if (call->http != NULL) {
    if (len > 0) {
      conch__call_deliver(call, data, len, 0); /* to on_raw_message */
    }
    return;
  }
  if (!is_connect(call)) {
    grpc_feed(call, data, len);
    return;
  }
  if (connect_unary(call) || connect_stream_error_body(call)) {
    unary_body(call, data, len);
    return;
  }
  feed_envelopes(call, data, len, on_envelope);
}

static void connect_unary_end(conch_call *call) {
  conch_client *c = call->client;
  const char *ctype = conch__call_header(call, CONCH_H_CTYPE);
  conch_ctype ct = resp_ctype(call, ctype);
  const char *encv =
      conch__call_header(call, CONCH_H_CENC);
  int enc = parse_encoding(call, encv);
  const uint8_t *p = conch__buf_head(&call->body);
  size_t n = conch__buf_size(&call->body);

  if (call->body_lent != NULL) {
    /* The whole body, where it arrived: still valid, as this runs from
       the feed that brought it. */
    p = call->body_lent;
    n = call->body_lent_len;
    conch__proto_unlend(call);
  }

  if (call->http_status != 200) {
    conch_status st;
    int json = ct.family == CONCH_CT_CONNECT && ct.codec == CONCH_CT_JSON;
    if (call->body_over || enc == CONCH_ENC_UNSUPPORTED) {
      n = 0;
    } else if (enc != CONCH_ENC_IDENTITY && n > 0) {
      conch__buf_reset(&c->inflbuf);
      if (conch__comp_decompress(&c->comps, &c->o.comp, enc, p, n,
                                 c->o.recv_limit, &c->inflbuf) == 0) {
        p = c->inflbuf.data;
        n = conch__buf_size(&c->inflbuf);
      } else {
        n = 0; /* unreadable: the HTTP status speaks */
      }
    }
    conch_status_init(&st);
    conch__connect_unary_error(&st, c->mem, call->http_status, json, p, n);
    if (connect_stream_error_body(call) &&
        st.code != conch__code_from_http(call->http_status)) {
      /* A stream's code comes from its HTTP status (CONNECT_PROTOCOL.md
         2.3, as connect-go); only the message is the body's. */
      st.code = conch__code_from_http(call->http_status);
      st.origin = CONCH_ORIGIN_HTTP;
    }
    shrink_inflbuf(c);
    conch__call_end_with(call, &st);
    return;
  }
  if (ct.family == 0) {
    conch__call_fail(call, CONCH_CODE_UNKNOWN, CONCH_ERR_PROTO,
                     "unexpected response content-type '%s'",
                     ctype != NULL ? ctype : "");
    return;
  }
  /* Parameters are ignored: "application/json; charset=utf-8" is JSON. */
  if (ct.family != CONCH_CT_CONNECT || ct.codec != want_codec(call)) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "response content-type '%s' does not match the request "
                     "codec (%s)",
                     ctype, codec_name(call));
    return;
  }
  if (enc == CONCH_ENC_UNSUPPORTED) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "unsupported response content-encoding '%s'", encv);
    return;
  }
  call->resp_enc = enc;
  conch__call_deliver(call, p, n, enc != CONCH_ENC_IDENTITY);
  /* A small body's memory stays for the call's reuse (call.c's spares). */
  if (call->body.cap > 1024) {
    conch__buf_free(&call->body, c->mem);
  } else {
    conch__buf_reset(&call->body);
  }
  conch__call_finish(call);
}

void conch__proto_on_end(conch_call *call) {
  conch_env_reader *r = &call->reader;
  if (call->http != NULL) {
    conch__call_finish(call); /* the whole response arrived */
    return;
  }

  if (!is_connect(call)) {
    grpc_end(call);
    return;
  }
  if (connect_unary(call) || connect_stream_error_body(call)) {
    connect_unary_end(call);
    return;
  }
  if (!call->got_end) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     conch__env_reader_at_boundary(r)
                         ? "stream ended without an end-stream message"
                         : "stream ended inside a message (truncated "
                           "envelope)");
    return;
  }
  if (!conch__env_reader_at_boundary(r)) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "data after the end-stream message");
    return;
  }
  if (call->status.code == CONCH_CODE_OK &&
      call->method->kind == CONCH_STREAM_CLIENT && call->nrecv != 1) {
    conch__call_fail(call, CONCH_CODE_UNIMPLEMENTED, CONCH_ERR_PROTO,
                     "client-streaming response had %u messages, not one",
                     call->nrecv);
    return;
  }
  conch__call_finish(call);
}

/* ---- gRPC and gRPC-Web responses ---------------------------------------- */

/* A trailers-only response: its headers are the trailers. */
static void headers_are_trailers(conch_call *call) {
  conch_metadata *h = &call->headers;
  size_t i;
  if (call->moved_headers) {
    return;
  }
  call->moved_headers = 1;
  for (i = 0; i < h->n; i++) {
    const conch_md_entry *e = &h->ents[i];
    const char *name = (const char *)h->strings.data + e->name_off;
    if (strcmp(name, "content-type") == 0) {
      continue;
    }
    if (conch__metadata_add_raw(&call->trailers, name, e->name_len,
                                h->strings.data + e->value_off,
                                e->value_len) != 0) {
      conch__call_fail(call, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                       "out of memory storing trailers");
      return;
    }
  }
  conch_metadata_remove(&call->trailers, "content-type");
  {
    /* Only content-type stays a header. */
    size_t ctlen = 0;
    const char *ct = conch_metadata_get(h, "content-type", &ctlen);
    char *copy =
        ct != NULL ? conch__strndup(call->client->mem, ct, ctlen) : NULL;
    conch_metadata_reset(h);
    memset(call->hpos, 0, sizeof(call->hpos));
    if (copy != NULL) {
      if (conch__metadata_add_raw(h, "content-type", 12, copy, ctlen) == 0) {
        call->hpos[CONCH_H_CTYPE] = 1;
      }
      conch__free(call->client->mem, copy);
    }
  }
}

static void grpc_headers(conch_call *call) {
  const char *ctype = conch__call_header(call, CONCH_H_CTYPE);
  conch_ctype ct = resp_ctype(call, ctype);
  const char *enc;

  if (call->http_status != 200) {
    fail_http(call);
    return;
  }
  if (ct.family != (is_web(call) ? CONCH_CT_GRPC_WEB : CONCH_CT_GRPC)) {
    conch__call_fail(call, CONCH_CODE_UNKNOWN, CONCH_ERR_PROTO,
                     "unexpected response content-type '%s'",
                     ctype != NULL ? ctype : "");
    return;
  }
  /* The bare form is proto. */
  if (ct.codec != want_codec(call)) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "response content-type '%s' does not match the request "
                     "codec (%s)",
                     ctype, codec_name(call));
    return;
  }
  enc = conch__call_header(call, CONCH_H_GENC);
  call->resp_enc = parse_encoding(call, enc);
  if (call->resp_enc == CONCH_ENC_UNSUPPORTED) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "unsupported response grpc-encoding '%s'", enc);
    return;
  }
  if (call->got_trailers_only) {
    headers_are_trailers(call);
    return;
  }
  conch__call_emit_headers(call);
}

/* Parses a gRPC-Web trailers block: "name: value" lines separated by CRLF
   (LF tolerated), names case-insensitive, blanks around values trimmed. */
static int web_trailers(conch_call *call, const uint8_t *p, size_t len) {
  size_t i = 0;
  while (i < len) {
    size_t eol = i, end, colon, vs, ve;
    char name[256];
    size_t nlen, k;
    int rv;
    while (eol < len && p[eol] != '\n') {
      eol++;
    }
    end = eol;
    if (end > i && p[end - 1] == '\r') {
      end--;
    }
    if (end > i) {
      for (colon = i; colon < end && p[colon] != ':'; colon++) {
      }
      nlen = colon - i;
      while (nlen > 0 && (p[i + nlen - 1] == ' ' || p[i + nlen - 1] == '\t')) {
        nlen--;
      }
      if (colon == end || nlen == 0 || nlen >= sizeof(name)) {
        return CONCH_ERR_PROTO;
      }
      for (k = 0; k < nlen; k++) {
        uint8_t ch = p[i + k];
        name[k] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
      }
      name[nlen] = '\0';
      vs = colon + 1;
      ve = end;
      while (vs < ve && (p[vs] == ' ' || p[vs] == '\t')) {
        vs++;
      }
      while (ve > vs && (p[ve - 1] == ' ' || p[ve - 1] == '\t')) {
        ve--;
      }
      if (conch__grpc_status_field(name, nlen)) {
        rv = conch__metadata_add_raw(&call->gfields[1], name, nlen, p + vs,
                                     ve - vs);
      } else {
        rv = conch__metadata_add_wire(&call->trailers, name, nlen,
                                      (const char *)p + vs, ve - vs);
      }
      if (rv != 0) {
        return rv;
      }
    }
    i = eol + 1;
  }
  return 0;
}

static int on_grpc_envelope(void *ud, uint8_t flags, const uint8_t *p,
                            size_t len) {
  conch_call *call = ud;
  conch_client *c = call->client;
  int compressed = (flags & CONCH_ENV_COMPRESSED) != 0;

  if (call->finished) {
    return 1;
  }
  if (call->got_end) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "data after the trailers");
    return 1;
  }
  if (compressed && call->resp_enc <= CONCH_ENC_IDENTITY) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "received a compressed message but the response "
                     "declared no encoding");
    return 1;
  }
  if (flags & CONCH_ENV_TRAILERS) {
    int rv;
    if (compressed && len > 0) {
      if (inflate_or_fail(call, p, len, "trailers") != 0) {
        return 1;
      }
      p = c->inflbuf.data;
      len = conch__buf_size(&c->inflbuf);
    }
    rv = web_trailers(call, p, len);
    shrink_inflbuf(c);
    if (rv != 0) {
      conch__call_fail(call,
                       rv == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                             : CONCH_CODE_INTERNAL,
                       rv, "invalid gRPC-Web trailers");
      return 1;
    }
    call->got_end = 1;
    return 0;
  }
  return conch__call_deliver(call, p, len, compressed);
}

static void grpc_feed(conch_call *call, const uint8_t *data, size_t len) {
  feed_envelopes(call, data, len, on_grpc_envelope);
}

/* Settles the status from grpc-status, grpc-message and
   grpc-status-details-bin of |fields| (3.3 steps 5-8). */
static void grpc_resolve(conch_call *call, const conch_metadata *fields) {
  conch_client *c = call->client;
  size_t slen = 0, mlen = 0, dlen = 0, i;
  const char *sv = NULL, *mv = NULL, *dv = NULL;
  conch_status st;
  char *msg = NULL;
  int code;

  /* One walk for the three (names are stored lowercase; the first of each
     counts, as conch_metadata_get() would find it). */
  for (i = 0; i < fields->n; i++) {
    const conch_md_entry *e = &fields->ents[i];
    const char *name = (const char *)fields->strings.data + e->name_off;
    const char *value = (const char *)fields->strings.data + e->value_off;
    if (sv == NULL && e->name_len == 11 && memcmp(name, "grpc-status", 11) == 0) {
      sv = value;
      slen = e->value_len;
    } else if (mv == NULL && e->name_len == 12 &&
               memcmp(name, "grpc-message", 12) == 0) {
      mv = value;
      mlen = e->value_len;
    } else if (dv == NULL && e->name_len == 23 &&
               memcmp(name, "grpc-status-details-bin", 23) == 0) {
      dv = value;
      dlen = e->value_len;
    }
  }

  if (sv == NULL) {
    conch__call_fail(call, CONCH_CODE_UNKNOWN, CONCH_ERR_PROTO,
                     "response trailers carry no grpc-status");
    return;
  }
  code = conch__grpc_status_parse(sv, slen);
  if (code < 0) {
    conch__call_fail(call, CONCH_CODE_UNKNOWN, CONCH_ERR_PROTO,
                     "invalid grpc-status '%.*s'", (int)(slen > 32 ? 32 : slen),
                     sv);
    return;
  }
  if (mv != NULL && mlen > 0 &&
      conch__grpc_message_decode(mv, mlen, c->mem, &msg) != 0) {
    msg = NULL;
  }
  conch_status_init(&st);
  st.mem = c->mem;
  if (code != CONCH_CODE_OK) {
    conch__status_set(&st, c->mem, (conch_code)code, CONCH_ORIGIN_SERVER, 0,
                      msg != NULL ? "%s" : NULL, msg);
  }
  conch__free(c->mem, msg);
  if (dv != NULL) {
    int rv = conch__grpc_status_details(dv, dlen, c->mem, &st);
    if (rv != 0) {
      conch_status_clear(&st);
      conch__call_fail(call,
                       rv == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                             : CONCH_CODE_INTERNAL,
                       rv, "invalid grpc-status-details-bin");
      return;
    }
  }
  st.http_status = call->http_status;
  if (st.code == CONCH_CODE_OK &&
      (call->method->kind == CONCH_STREAM_UNARY ||
       call->method->kind == CONCH_STREAM_CLIENT) &&
      call->nrecv != 1) {
    conch_status_clear(&st);
    conch__call_fail(
        call, CONCH_CODE_UNIMPLEMENTED, CONCH_ERR_PROTO,
        "%s response had %u messages, not one",
        call->method->kind == CONCH_STREAM_UNARY ? "unary" : "client-streaming",
        call->nrecv);
    return;
  }
  conch__call_end_with(call, &st);
}

static void grpc_end(conch_call *call) {
  if (!conch__env_reader_at_boundary(&call->reader)) {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "stream ended inside a message (truncated envelope)");
    return;
  }
  if (is_web(call)) {
    if (call->got_end) {
      grpc_resolve(call, &call->gfields[1]);
    } else if (call->body_bytes == 0) {
      headers_are_trailers(call);
      if (!call->finished) {
        grpc_resolve(call, &call->gfields[0]);
      }
    } else {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                       "response ended without a trailers frame");
    }
    return;
  }
  if (call->got_http_trailers) {
    grpc_resolve(call, &call->gfields[1]);
  } else if (call->got_trailers_only) {
    grpc_resolve(call, &call->gfields[0]);
  } else {
    conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "response ended without trailers");
  }
}
