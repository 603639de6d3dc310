/* conch/dynamic.h: proto3 JSON for messages of types built at run time
   (dynamic.c), through the JSON codec (pbjson). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/dynamic.h>
#include <conch/features.h>

#include "buf.h"
#include "dynamic_int.h"
#include "json.h"
#include "mem_int.h"
#include "pbjson.h"
#if CONCH_WITH_JSON
#include "pbjson_int.h"
#endif

/* ---- JSON ---------------------------------------------------------------- */

void conch_dynamic_buf_free(conch_dynamic *d, void *p) {
  if (d != NULL) {
    conch__free(&d->mem, p);
  }
}

/* The status outlives the builder: its message is the C library's. */
static void set_status(conch_status *st, const conch_mem *mem, conch_code code,
                       const char *msg) {
  (void)mem;
  if (st != NULL) {
    (void)conch_status_setf(st, NULL, code, "%s", msg);
  }
}

#if CONCH_WITH_JSON
/* protobuf-c's allocator over the builder's, noting a failure (an unpack
   returns NULL for bad bytes and for want of memory alike). */
typedef struct pb_mem {
  const conch_mem *mem;
  int failed;
} pb_mem;
static void *pb_alloc(void *ud, size_t n) {
  pb_mem *pm = ud;
  void *p = conch__malloc(pm->mem, n);
  if (p == NULL) {
    pm->failed = 1;
  }
  return p;
}
static void pb_free(void *ud, void *p) { conch__free(((pb_mem *)ud)->mem, p); }

static const ProtobufCMessageDescriptor *resolve(const char *url, void *ud) {
  conch_dynamic *d = ud;
  const char *slash = strrchr(url, '/');
  const char *name = slash != NULL ? slash + 1 : url;
  const ProtobufCMessageDescriptor *md = NULL;
  char saved[sizeof(d->err)];
  memcpy(saved, d->err, sizeof(saved));
  if (conch_dynamic_message(d, name, &md) == CONCH_ERR_NOMEM) {
    d->resolve_nomem = 1;
  }
  memcpy(d->err, saved, sizeof(saved));
  return md;
}
#endif

int conch_dynamic_json_to_pb(conch_dynamic *d,
                             const ProtobufCMessageDescriptor *md,
                             const char *json, size_t len, uint8_t **out,
                             size_t *outlen, conch_status *st) {
#if CONCH_WITH_JSON
  ProtobufCAllocator pa;
  pb_mem pm;
  ProtobufCMessage *m = NULL;
  conch_pbjson_opts o;
  char err[256];
  size_t n;
  int rc;
#endif
  if (out != NULL) {
    *out = NULL;
  }
  if (outlen != NULL) {
    *outlen = 0;
  }
  if (d == NULL || md == NULL || (json == NULL && len > 0) || out == NULL ||
      outlen == NULL) {
    return CONCH_ERR_INVALID;
  }
#if CONCH_WITH_JSON
  if (conch__json_values((const uint8_t *)json, len) > CONCH_JSON_MAX_VALUES) {
    set_status(st, &d->mem, CONCH_CODE_INVALID_ARGUMENT,
               "the JSON has too many values");
    return CONCH_ERR_LIMIT;
  }
  pm.mem = &d->mem;
  pm.failed = 0;
  pa.alloc = pb_alloc;
  pa.free = pb_free;
  pa.allocator_data = &pm;
  memset(&o, 0, sizeof(o));
  o.resolve = resolve;
  o.user_data = d;
  err[0] = '\0';
  d->resolve_nomem = 0;
  rc = conch__pbjson_decode_ex(md, (const uint8_t *)(json != NULL ? json : ""),
                               len, &o, &pa, &m, err, sizeof(err));
  if (rc == CONCH_ERR_CODEC && d->resolve_nomem) {
    rc = CONCH_ERR_NOMEM;
    snprintf(err, sizeof(err), "out of memory");
  }
  if (rc != 0) {
    set_status(st, &d->mem,
               rc == CONCH_ERR_NOMEM         ? CONCH_CODE_RESOURCE_EXHAUSTED
               : rc == CONCH_ERR_UNSUPPORTED ? CONCH_CODE_UNIMPLEMENTED
                                             : CONCH_CODE_INVALID_ARGUMENT,
               err);
    return rc;
  }
  n = protobuf_c_message_get_packed_size(m);
  *out = conch__malloc(&d->mem, n > 0 ? n : 1);
  if (*out == NULL) {
    protobuf_c_message_free_unpacked(m, &pa);
    set_status(st, &d->mem, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return CONCH_ERR_NOMEM;
  }
  *outlen = protobuf_c_message_pack(m, *out);
  protobuf_c_message_free_unpacked(m, &pa);
  return 0;
#else
  (void)json;
  set_status(st, &d->mem, CONCH_CODE_UNIMPLEMENTED,
             "built without the JSON codec");
  return CONCH_ERR_UNSUPPORTED;
#endif
}

int conch_dynamic_pb_to_json(conch_dynamic *d,
                             const ProtobufCMessageDescriptor *md,
                             const uint8_t *pb, size_t len, char **out,
                             size_t *outlen, conch_status *st) {
#if CONCH_WITH_JSON
  ProtobufCAllocator pa;
  pb_mem pm;
  ProtobufCMessage *m;
  conch_pbjson_opts o;
  conch_buf b;
  char err[256];
  int rc;
#endif
  if (out != NULL) {
    *out = NULL;
  }
  if (outlen != NULL) {
    *outlen = 0;
  }
  if (d == NULL || md == NULL || (pb == NULL && len > 0) || out == NULL ||
      outlen == NULL) {
    return CONCH_ERR_INVALID;
  }
#if CONCH_WITH_JSON
  pm.mem = &d->mem;
  pm.failed = 0;
  pa.alloc = pb_alloc;
  pa.free = pb_free;
  pa.allocator_data = &pm;
  m = protobuf_c_message_unpack(md, &pa, len,
                                pb != NULL ? pb : (const uint8_t *)"");
  if (m == NULL && pm.failed) {
    set_status(st, &d->mem, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return CONCH_ERR_NOMEM;
  }
  if (m == NULL) {
    set_status(st, &d->mem, CONCH_CODE_INVALID_ARGUMENT,
               "the bytes are not a message of that type");
    return CONCH_ERR_CODEC;
  }
  memset(&b, 0, sizeof(b));
  memset(&o, 0, sizeof(o));
  o.resolve = resolve;
  o.user_data = d;
  err[0] = '\0';
  d->resolve_nomem = 0;
  rc = conch__pbjson_encode_ex(m, &o, &d->mem, &b, err, sizeof(err));
  protobuf_c_message_free_unpacked(m, &pa);
  if (rc == CONCH_ERR_CODEC && d->resolve_nomem) {
    rc = CONCH_ERR_NOMEM;
    snprintf(err, sizeof(err), "out of memory");
  }
  if (rc == 0) {
    rc = conch__buf_append(&b, &d->mem, "", 1);
    if (rc != 0) {
      snprintf(err, sizeof(err), "out of memory");
    }
  }
  if (rc != 0) {
    conch__buf_free(&b, &d->mem);
    set_status(st, &d->mem,
               rc == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                     : CONCH_CODE_INTERNAL,
               err);
    return rc;
  }
  *outlen = conch__buf_size(&b) - 1;
  *out = conch__malloc(&d->mem, *outlen + 1);
  if (*out == NULL) {
    conch__buf_free(&b, &d->mem);
    set_status(st, &d->mem, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    *outlen = 0;
    return CONCH_ERR_NOMEM;
  }
  memcpy(*out, conch__buf_head(&b), *outlen + 1);
  conch__buf_free(&b, &d->mem);
  return 0;
#else
  (void)pb;
  set_status(st, &d->mem, CONCH_CODE_UNIMPLEMENTED,
             "built without the JSON codec");
  return CONCH_ERR_UNSUPPORTED;
#endif
}
