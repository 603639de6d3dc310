/* proto3 JSON encoding of protobuf-c messages (pbjson.h), into a
   conch_buf, as protojson writes it; the well-known types in their own
   forms. */
#include "pbjson_int.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <conch/status.h>

#include "base64.h"
#include "mem_int.h"

/* ---- Encoding ------------------------------------------------------------ */

typedef struct enc {
  const conch_mem *mem;
  const conch_pbjson_opts *opts;
  conch_buf *out;
  char *err;
  size_t errlen;
  int rv;
  int oom; /* an allocation for an Any's payload failed */
} enc;

static int enc_message(enc *e, const ProtobufCMessage *m,
                       const ProtobufCMessageDescriptor *d, unsigned depth);

static int enc_fail(enc *e, int rv, const char *fmt, ...) CONCH_PRINTF(3, 4);
static int enc_fail(enc *e, int rv, const char *fmt, ...) {
  va_list ap;

  if (e->rv == 0) {
    e->rv = rv;
    if (e->errlen > 0) {
      va_start(ap, fmt);
      vsnprintf(e->err, e->errlen, fmt, ap);
      va_end(ap);
    }
  }
  return -1;
}

static int put(enc *e, const void *p, size_t n) {
  if (conch__buf_append(e->out, e->mem, p, n) != 0) {
    return enc_fail(e, CONCH_ERR_NOMEM, "out of memory");
  }
  return 0;
}

static int put_str(enc *e, const char *s) { return put(e, s, strlen(s)); }

/* A JSON string, escaped as protojson escapes: '"', '\\' and the C0
   controls, with \uXXXX in lower case for controls without a short form.
   Invalid UTF-8 is an error (protojson refuses it too). */
static int put_string(enc *e, const char *s, size_t n,
                      const ProtobufCMessageDescriptor *md,
                      const ProtobufCFieldDescriptor *f) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s;
  size_t start = 0;
  size_t i = 0;

  if (put(e, "\"", 1) != 0) {
    return -1;
  }
  while (i < n) {
    unsigned char c = p[i];
    char esc[6] = {'\\', 0, 0, 0, 0, 0};
    size_t elen = 2;
    size_t k;

    if (c >= 0x80) {
      k = conch__utf8_seq(p + i, n - i);
      if (k == 0) {
        return enc_fail(e, CONCH_ERR_CODEC,
                        "field %s.%s: string is not valid UTF-8 (byte %zu)",
                        md->name, f->name, i);
      }
      i += k;
      continue;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {
      i++;
      continue;
    }
    switch (c) {
    case '"':
    case '\\':
      esc[1] = (char)c;
      break;
    case '\b':
      esc[1] = 'b';
      break;
    case '\f':
      esc[1] = 'f';
      break;
    case '\n':
      esc[1] = 'n';
      break;
    case '\r':
      esc[1] = 'r';
      break;
    case '\t':
      esc[1] = 't';
      break;
    default:
      memcpy(esc + 1, "u00", 3);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 0xf];
      elen = 6;
      break;
    }
    if (put(e, s + start, i - start) != 0 || put(e, esc, elen) != 0) {
      return -1;
    }
    i++;
    start = i;
  }
  if (put(e, s + start, i - start) != 0) {
    return -1;
  }
  return put(e, "\"", 1);
}

/* |name| in lowerCamelCase, unquoted: protoc's json name, and protojson's
   JSONCamelCase of a FieldMask path. */
static int put_camel(enc *e, const char *name) {
  char chunk[64], c;
  size_t n = 0;

  while ((c = conch__json_name_next(&name)) != '\0') {
    if (n == sizeof(chunk)) {
      if (put(e, chunk, n) != 0) {
        return -1;
      }
      n = 0;
    }
    chunk[n++] = c;
  }
  return put(e, chunk, n);
}

/* "<jsonName>": */
static int put_name(enc *e, const char *name) {
  if (put(e, "\"", 1) != 0 || put_camel(e, name) != 0) {
    return -1;
  }
  return put(e, "\":", 2);
}

/* Standard base64 with padding, quoted. */
static int put_bytes(enc *e, const ProtobufCBinaryData *b) {
  size_t n = conch__b64_encoded_len(b->len);
  size_t pad = (4 - n % 4) % 4;
  char *p;

  if (conch__buf_reserve(e->out, e->mem, n + pad + 2) != 0) {
    return enc_fail(e, CONCH_ERR_NOMEM, "out of memory");
  }
  p = (char *)e->out->data + e->out->len;
  p[0] = '"';
  if (b->len > 0) {
    conch__b64_encode(b->data, b->len, CONCH_B64_STD, p + 1);
  }
  memset(p + 1 + n, '=', pad);
  p[1 + n + pad] = '"';
  e->out->len += n + pad + 2;
  return 0;
}

/* The shortest decimal digits that read back as |a| (> 0, finite), as a
   float when |single|: they go to |digits| (no dot, |*nd| of them) and
   the return value is the decimal exponent of the first one.  The digits
   are read off "%e" and checked with strtod/strtof on a string without a
   decimal point, so the locale does not matter. */
static int shortest(double a, int single, char *digits, size_t *nd) {
  char tmp[48];
  char num[48];
  int maxp = single ? 9 : 17;
  int prec;
  int x = 0;
  size_t n = 0;

  for (prec = 1; prec <= maxp; prec++) {
    const char *p;

    snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, a);
    n = 0;
    for (p = tmp; *p != 'e' && *p != '\0'; p++) {
      if (*p >= '0' && *p <= '9' && n < 20) {
        digits[n++] = *p;
      }
    }
    x = *p == 'e' ? (int)strtol(p + 1, NULL, 10) : 0;
    snprintf(num, sizeof(num), "%.*se%d", (int)n, digits, x - (int)(n - 1));
    if (single ? strtof(num, NULL) == (float)a : strtod(num, NULL) == a) {
      break;
    }
  }
  while (n > 1 && digits[n - 1] == '0') {
    n--;
  }
  *nd = n;
  return x;
}

/* A float or double as protojson writes it: shortest round-trip digits,
   plain notation for 1e-6 <= |v| < 1e21 and exponent notation outside
   (1e+21, 1.5e-7), which is also what JavaScript's Number#toString
   gives. */
static int put_float(enc *e, double v, int single) {
  char out[64];
  char digits[24];
  size_t nd;
  size_t o = 0;
  int x;
  int expo;
  double a;

  if (isnan(v)) {
    return put_str(e, "\"NaN\"");
  }
  if (isinf(v)) {
    return put_str(e, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  }
  if (signbit(v)) {
    out[o++] = '-';
  }
  a = v < 0 ? -v : v;
  if (a == 0) {
    /* "-0.0", not protojson's "-0": jansson reads "-0" as the integer 0,
       and our own output must read back as what it was. */
    return put_str(e, o > 0 ? "-0.0" : "0");
  }
  x = shortest(a, single, digits, &nd);
  expo = single ? ((float)a < 1e-6f || (float)a >= 1e21f)
                : (a < 1e-6 || a >= 1e21);
  if (expo) {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      memcpy(out + o, digits + 1, nd - 1);
      o += nd - 1;
    }
    o += (size_t)snprintf(out + o, sizeof(out) - o, "e%c%d", x < 0 ? '-' : '+',
                          x < 0 ? -x : x);
  } else if (x >= 0) {
    size_t ip = (size_t)x + 1; /* digits before the point */

    if (nd <= ip) {
      memcpy(out + o, digits, nd);
      o += nd;
      memset(out + o, '0', ip - nd);
      o += ip - nd;
    } else {
      memcpy(out + o, digits, ip);
      o += ip;
      out[o++] = '.';
      memcpy(out + o, digits + ip, nd - ip);
      o += nd - ip;
    }
  } else {
    out[o++] = '0';
    out[o++] = '.';
    memset(out + o, '0', (size_t)(-x - 1));
    o += (size_t)(-x - 1);
    memcpy(out + o, digits, nd);
    o += nd;
  }
  return put(e, out, o);
}

/* One value of |f| stored at |p|. */
static int enc_value(enc *e, const ProtobufCMessageDescriptor *md,
                     const ProtobufCFieldDescriptor *f, const void *p,
                     unsigned depth) {
  char num[32];
  int n;

  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    n = snprintf(num, sizeof(num), "%" PRId32, *(const int32_t *)p);
    return put(e, num, (size_t)n);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    n = snprintf(num, sizeof(num), "%" PRIu32, *(const uint32_t *)p);
    return put(e, num, (size_t)n);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    n = snprintf(num, sizeof(num), "\"%" PRId64 "\"", *(const int64_t *)p);
    return put(e, num, (size_t)n);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    n = snprintf(num, sizeof(num), "\"%" PRIu64 "\"", *(const uint64_t *)p);
    return put(e, num, (size_t)n);
  case PROTOBUF_C_TYPE_FLOAT:
    return put_float(e, *(const float *)p, 1);
  case PROTOBUF_C_TYPE_DOUBLE:
    return put_float(e, *(const double *)p, 0);
  case PROTOBUF_C_TYPE_BOOL:
    return put_str(e, *(const protobuf_c_boolean *)p ? "true" : "false");
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumDescriptor *ed = f->descriptor;
    int32_t v = *(const int32_t *)p;
    unsigned i;

    if (conch__pbj_is_null_enum(ed)) {
      return put(e, "null", 4); /* whatever the number, as protojson */
    }
    for (i = 0; i < ed->n_values; i++) {
      if (ed->values[i].value == v) {
        if (put(e, "\"", 1) != 0 || put_str(e, ed->values[i].name) != 0) {
          return -1;
        }
        return put(e, "\"", 1);
      }
    }
    n = snprintf(num, sizeof(num), "%" PRId32, v);
    return put(e, num, (size_t)n);
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;

    return put_string(e, s != NULL ? s : "", s != NULL ? strlen(s) : 0, md, f);
  }
  case PROTOBUF_C_TYPE_BYTES:
    return put_bytes(e, p);
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;

    return enc_message(e, sub, sub != NULL ? sub->descriptor : f->descriptor,
                       depth + 1);
  }
  default:
    return enc_fail(e, CONCH_ERR_CODEC, "field %s.%s: unknown type %d",
                    md->name, f->name, (int)f->type);
  }
}

static int enc_list(enc *e, const ProtobufCMessageDescriptor *md,
                    const ProtobufCFieldDescriptor *f,
                    const ProtobufCMessage *m, unsigned depth) {
  size_t n = *(const size_t *)conch__pbj_member(m, f->quantifier_offset);
  const char *arr = *(char *const *)conch__pbj_member(m, f->offset);
  size_t sz = conch__pbj_elem_size(f->type);
  size_t i;

  if (arr == NULL) {
    n = 0;
  }
  if (put(e, "[", 1) != 0) {
    return -1;
  }
  for (i = 0; i < n; i++) {
    if (i > 0 && put(e, ",", 1) != 0) {
      return -1;
    }
    if (f->type == PROTOBUF_C_TYPE_MESSAGE &&
        ((ProtobufCMessage *const *)(const void *)arr)[i] == NULL) {
      return enc_fail(e, CONCH_ERR_CODEC, "field %s.%s: element %zu is NULL",
                      md->name, f->name, i);
    }
    if (enc_value(e, md, f, arr + i * sz, depth) != 0) {
      return -1;
    }
  }
  return put(e, "]", 1);
}

/* A map key, for sorting: keys are written in order (as protojson does),
   and of keys repeated in the entries the last one counts, as when the
   binary form is parsed. */
typedef struct mkey {
  const char *s;
  size_t slen;
  int64_t i;
  uint64_t u;
  size_t idx;
} mkey;

static int cmp_idx(const mkey *a, const mkey *b) {
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int cmp_str(const void *pa, const void *pb) {
  const mkey *a = pa;
  const mkey *b = pb;
  size_t n = a->slen < b->slen ? a->slen : b->slen;
  int c = n > 0 ? memcmp(a->s, b->s, n) : 0;

  if (c != 0) {
    return c;
  }
  if (a->slen != b->slen) {
    return a->slen < b->slen ? -1 : 1;
  }
  return cmp_idx(a, b);
}

static int cmp_int(const void *pa, const void *pb) {
  const mkey *a = pa;
  const mkey *b = pb;

  if (a->i != b->i) {
    return a->i < b->i ? -1 : 1;
  }
  return cmp_idx(a, b);
}

static int cmp_uint(const void *pa, const void *pb) {
  const mkey *a = pa;
  const mkey *b = pb;

  if (a->u != b->u) {
    return a->u < b->u ? -1 : 1;
  }
  return cmp_idx(a, b);
}

static void read_key(const ProtobufCFieldDescriptor *kf, const void *p,
                     mkey *k) {
  switch (kf->type) {
  case PROTOBUF_C_TYPE_STRING:
    k->s = *(char *const *)p;
    if (k->s == NULL) {
      k->s = "";
    }
    k->slen = strlen(k->s);
    break;
  case PROTOBUF_C_TYPE_BOOL:
    k->u = *(const protobuf_c_boolean *)p != 0;
    break;
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    k->i = *(const int32_t *)p;
    break;
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    k->u = *(const uint32_t *)p;
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    k->u = *(const uint64_t *)p;
    break;
  default:
    k->i = *(const int64_t *)p;
    break;
  }
}

static int put_key(enc *e, const ProtobufCMessageDescriptor *ed,
                   const ProtobufCFieldDescriptor *kf, const mkey *k) {
  char num[32];
  int n;

  switch (kf->type) {
  case PROTOBUF_C_TYPE_STRING:
    return put_string(e, k->s, k->slen, ed, kf);
  case PROTOBUF_C_TYPE_BOOL:
    return put_str(e, k->u ? "\"true\"" : "\"false\"");
  default:
    if (conch__pbj_key_kind(kf->type) == 1) {
      n = snprintf(num, sizeof(num), "\"%" PRId64 "\"", k->i);
    } else {
      n = snprintf(num, sizeof(num), "\"%" PRIu64 "\"", k->u);
    }
    return put(e, num, (size_t)n);
  }
}

static int same_key(int kind, const mkey *a, const mkey *b) {
  if (kind == 0) {
    return a->slen == b->slen && memcmp(a->s, b->s, a->slen) == 0;
  }
  return kind == 1 ? a->i == b->i : a->u == b->u;
}

static int enc_map(enc *e, const ProtobufCMessageDescriptor *md,
                   const ProtobufCFieldDescriptor *f, const ProtobufCMessage *m,
                   unsigned depth) {
  const ProtobufCMessageDescriptor *ed = f->descriptor;
  const ProtobufCFieldDescriptor *kf = &ed->fields[0];
  const ProtobufCFieldDescriptor *vf = &ed->fields[1];
  size_t n = *(const size_t *)conch__pbj_member(m, f->quantifier_offset);
  ProtobufCMessage *const *arr =
      *(ProtobufCMessage * *const *)conch__pbj_member(m, f->offset);
  int kind = conch__pbj_key_kind(kf->type);
  static int (*const cmp[])(const void *, const void *) = {cmp_str, cmp_int,
                                                           cmp_uint};
  mkey *keys;
  size_t i;
  int first = 1;
  int rv = 0;

  if (arr == NULL || n == 0) {
    return put(e, "{}", 2);
  }
  if (n > SIZE_MAX / sizeof(*keys)) {
    return enc_fail(e, CONCH_ERR_NOMEM, "out of memory");
  }
  keys = conch__calloc(e->mem, n, sizeof(*keys));
  if (keys == NULL) {
    return enc_fail(e, CONCH_ERR_NOMEM, "out of memory");
  }
  for (i = 0; i < n; i++) {
    if (arr[i] == NULL) {
      conch__free(e->mem, keys);
      return enc_fail(e, CONCH_ERR_CODEC, "field %s.%s: entry %zu is NULL",
                      md->name, f->name, i);
    }
    keys[i].idx = i;
    read_key(kf, conch__pbj_member(arr[i], kf->offset), &keys[i]);
  }
  qsort(keys, n, sizeof(*keys), cmp[kind]);
  rv = put(e, "{", 1);
  for (i = 0; rv == 0 && i < n; i++) {
    if (i + 1 < n && same_key(kind, &keys[i], &keys[i + 1])) {
      continue; /* a later entry has the same key */
    }
    if (!first) {
      rv = put(e, ",", 1);
    }
    first = 0;
    if (rv == 0) {
      rv = put_key(e, ed, kf, &keys[i]);
    }
    if (rv == 0) {
      rv = put(e, ":", 1);
    }
    if (rv == 0) {
      rv = enc_value(e, ed, vf, conch__pbj_member(arr[keys[i].idx], vf->offset),
                     depth);
    }
  }
  conch__free(e->mem, keys);
  if (rv != 0) {
    return -1;
  }
  return put(e, "}", 1);
}

/* The proto3 default, which a field without presence is left out at.
   Negative zero counts as zero, as protobuf-c's packer and protobuf-es see
   it (protojson writes it as -0). */
static int is_default(const ProtobufCFieldDescriptor *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_FLOAT:
    return *(const float *)p == 0;
  case PROTOBUF_C_TYPE_DOUBLE:
    return *(const double *)p == 0;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t bits;

    memcpy(&bits, p, sizeof(bits));
    return bits == 0;
  }
  case PROTOBUF_C_TYPE_BOOL:
    return *(const protobuf_c_boolean *)p == 0;
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)p;

    return s == NULL || s[0] == '\0';
  }
  case PROTOBUF_C_TYPE_BYTES:
    return ((const ProtobufCBinaryData *)p)->len == 0;
  case PROTOBUF_C_TYPE_MESSAGE:
    return *(ProtobufCMessage *const *)p == NULL;
  default: {
    uint32_t bits;

    memcpy(&bits, p, sizeof(bits));
    return bits == 0;
  }
  }
}

/* Whether |f| is written: oneof members (proto3 `optional` included, as
   our regen.sh turns it into a synthetic oneof) when selected, proto2
   optional fields when set, repeated fields when not empty, and the rest
   when not at their default. */
static int present(const ProtobufCMessage *m,
                   const ProtobufCFieldDescriptor *f) {
  const void *p = conch__pbj_member(m, f->offset);

  if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
    if (*(const uint32_t *)conch__pbj_member(m, f->quantifier_offset) !=
        f->id) {
      return 0;
    }
    if (f->type == PROTOBUF_C_TYPE_STRING ||
        f->type == PROTOBUF_C_TYPE_MESSAGE) {
      return *(void *const *)p != NULL;
    }
    return 1;
  }
  switch (f->label) {
  case PROTOBUF_C_LABEL_REQUIRED:
    return 1;
  case PROTOBUF_C_LABEL_REPEATED:
    return *(const size_t *)conch__pbj_member(m, f->quantifier_offset) > 0;
  case PROTOBUF_C_LABEL_OPTIONAL:
    if (f->type == PROTOBUF_C_TYPE_STRING ||
        f->type == PROTOBUF_C_TYPE_MESSAGE) {
      const void *v = *(void *const *)p;

      /* protobuf-c's own test for these (it packs them the same way). */
      return v != NULL && v != f->default_value;
    }
    return *(const protobuf_c_boolean *)conch__pbj_member(
               m, f->quantifier_offset) != 0;
  default:
    return !is_default(f, p);
  }
}

static int enc_fields(enc *e, const ProtobufCMessage *m,
                      const ProtobufCMessageDescriptor *d, unsigned depth,
                      int first) {
  unsigned i;

  for (i = 0; m != NULL && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *jn;
    int rv;

    if (!present(m, f)) {
      continue;
    }
    if (!first && put(e, ",", 1) != 0) {
      return -1;
    }
    first = 0;
    jn = conch__pbj_shadowed(d, f);
    if (jn == NULL) {
      jn = conch__pbj_custom_name(d, f);
    }
    if (jn != NULL) {
      /* Checked when built: no byte that JSON must escape. */
      if (put(e, "\"", 1) != 0 || put(e, jn, strlen(jn)) != 0 ||
          put(e, "\":", 2) != 0) {
        return -1;
      }
    } else if (put_name(e, f->name) != 0) {
      return -1;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      rv = conch__pbj_is_map(d, f) ? enc_map(e, d, f, m, depth)
                                   : enc_list(e, d, f, m, depth);
    } else {
      rv = enc_value(e, d, f, conch__pbj_member(m, f->offset), depth);
    }
    if (rv != 0) {
      return -1;
    }
  }
  return 0;
}

/* Storage of |f| in |m|, or zeros when there is no message (a map entry
   without its value). */
static const void *fval(const ProtobufCMessage *m,
                        const ProtobufCFieldDescriptor *f) {
  static const union {
    uint64_t u;
    double d;
    void *p;
    ProtobufCBinaryData b;
  } zero;

  return m != NULL ? conch__pbj_member(m, f->offset) : (const void *)&zero;
}

static int layout_fail(enc *e, const ProtobufCMessageDescriptor *d) {
  return enc_fail(e, CONCH_ERR_CODEC,
                  "%s: the descriptor does not have the well-known layout",
                  d->name);
}

/* Timestamp as "1972-01-01T10:00:20.021Z", Duration as "-1.5s". */
static int enc_time(enc *e, const ProtobufCMessage *m,
                    const ProtobufCMessageDescriptor *d, pbj_wkt k) {
  const ProtobufCFieldDescriptor *sf =
      conch__pbj_wkt_field(d, 1, PROTOBUF_C_TYPE_INT64, 0);
  const ProtobufCFieldDescriptor *nf =
      conch__pbj_wkt_field(d, 2, PROTOBUF_C_TYPE_INT32, 0);
  char buf[80];
  size_t o;
  int64_t s;
  int32_t n;

  if (sf == NULL || nf == NULL) {
    return layout_fail(e, d);
  }
  s = *(const int64_t *)fval(m, sf);
  n = *(const int32_t *)fval(m, nf);
  if (k == WKT_TIMESTAMP) {
    int64_t days = (s >= 0 ? s : s - 86399) / 86400;
    int64_t rem = s - days * 86400;
    int64_t y;
    unsigned mo;
    unsigned dd;

    if (s < TS_MIN || s > TS_MAX) {
      return enc_fail(e, CONCH_ERR_CODEC,
                      "%s: seconds %" PRId64 " out of range", d->name, s);
    }
    if (n < 0 || n > 999999999) {
      return enc_fail(e, CONCH_ERR_CODEC, "%s: nanos %" PRId32 " out of range",
                      d->name, n);
    }
    conch__pbj_civil_from_days(days, &y, &mo, &dd);
    o = (size_t)snprintf(buf, sizeof(buf), "\"%04d-%02u-%02uT%02d:%02d:%02d",
                         (int)y, mo, dd, (int)(rem / 3600),
                         (int)(rem / 60 % 60), (int)(rem % 60));
  } else {
    if (s < -DUR_MAX || s > DUR_MAX) {
      return enc_fail(e, CONCH_ERR_CODEC,
                      "%s: seconds %" PRId64 " out of range", d->name, s);
    }
    if (n <= -1000000000 || n >= 1000000000) {
      return enc_fail(e, CONCH_ERR_CODEC, "%s: nanos %" PRId32 " out of range",
                      d->name, n);
    }
    if ((s > 0 && n < 0) || (s < 0 && n > 0)) {
      return enc_fail(e, CONCH_ERR_CODEC,
                      "%s: signs of seconds and nanos do not match", d->name);
    }
    o = (size_t)snprintf(buf, sizeof(buf), "\"%s%" PRId64,
                         s < 0 || n < 0 ? "-" : "", s < 0 ? -s : s);
    n = n < 0 ? -n : n;
  }
  o += conch__pbj_put_nanos(buf + o, sizeof(buf) - o, n);
  buf[o++] = k == WKT_TIMESTAMP ? 'Z' : 's';
  buf[o++] = '"';
  return put(e, buf, o);
}

/* Value: its kind as plain JSON. */
static int enc_kind(enc *e, const ProtobufCMessage *m,
                    const ProtobufCMessageDescriptor *d, unsigned depth) {
  unsigned i;

  for (i = 0; m != NULL && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];

    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) == 0 || !present(m, f)) {
      continue;
    }
    if (f->type == PROTOBUF_C_TYPE_DOUBLE &&
        !isfinite(*(const double *)conch__pbj_member(m, f->offset))) {
      return enc_fail(e, CONCH_ERR_CODEC, "%s.%s: %g cannot be written as JSON",
                      d->name, f->name,
                      *(const double *)conch__pbj_member(m, f->offset));
    }
    return enc_value(e, d, f, conch__pbj_member(m, f->offset), depth);
  }
  return enc_fail(e, CONCH_ERR_CODEC, "%s: none of the oneof fields is set",
                  d->name);
}

/* FieldMask: the paths in lowerCamelCase, joined by commas, when that form
   reads back as them (protojson's rule). */
static int enc_fieldmask(enc *e, const ProtobufCMessage *m,
                         const ProtobufCMessageDescriptor *d) {
  const ProtobufCFieldDescriptor *f =
      conch__pbj_wkt_field(d, 1, PROTOBUF_C_TYPE_STRING, 1);
  size_t n;
  char *const *arr;
  size_t i;

  if (f == NULL) {
    return layout_fail(e, d);
  }
  n = m != NULL ? *(const size_t *)conch__pbj_member(m, f->quantifier_offset)
                : 0;
  arr =
      m != NULL ? *(char *const *const *)conch__pbj_member(m, f->offset) : NULL;
  if (put(e, "\"", 1) != 0) {
    return -1;
  }
  for (i = 0; arr != NULL && i < n; i++) {
    const char *p = arr[i] != NULL ? arr[i] : "";
    size_t j;

    if (!conch__pbj_valid_full_name(p, strlen(p))) {
      return enc_fail(e, CONCH_ERR_CODEC,
                      "%s.paths contains invalid path: \"%.40s\"", d->name, p);
    }
    /* Reversible: no upper case, and each '_' before a lower-case letter. */
    for (j = 0; p[j] != '\0'; j++) {
      if ((p[j] >= 'A' && p[j] <= 'Z') ||
          (p[j] == '_' && !(p[j + 1] >= 'a' && p[j + 1] <= 'z'))) {
        return enc_fail(e, CONCH_ERR_CODEC,
                        "%s.paths contains irreversible value \"%.40s\"",
                        d->name, p);
      }
    }
    if ((i > 0 && put(e, ",", 1) != 0) || put_camel(e, p) != 0) {
      return -1;
    }
  }
  return put(e, "\"", 1);
}

static void *enc_pb_alloc(void *ud, size_t n) {
  enc *e = ud;
  void *p = conch__malloc(e->mem, n);

  if (p == NULL) {
    e->oom = 1;
  }
  return p;
}

static void enc_pb_free(void *ud, void *p) {
  enc *e = ud;

  conch__free(e->mem, p);
}

/* Any: {"@type": url, ...fields}, or {"@type": url, "value": <form>} for a
   well-known payload. */
static int enc_any(enc *e, const ProtobufCMessage *m,
                   const ProtobufCMessageDescriptor *d, unsigned depth) {
  const ProtobufCFieldDescriptor *tf =
      conch__pbj_wkt_field(d, 1, PROTOBUF_C_TYPE_STRING, 0);
  const ProtobufCFieldDescriptor *vf =
      conch__pbj_wkt_field(d, 2, PROTOBUF_C_TYPE_BYTES, 0);
  ProtobufCAllocator pba = {enc_pb_alloc, enc_pb_free, e};
  const ProtobufCMessageDescriptor *pd;
  const ProtobufCBinaryData *val;
  const char *url;
  ProtobufCMessage *sub;
  int rv;

  if (tf == NULL || vf == NULL) {
    return layout_fail(e, d);
  }
  url = *(char *const *)fval(m, tf);
  url = url != NULL ? url : "";
  val = fval(m, vf);
  if (url[0] == '\0') {
    if (val->len == 0) {
      return put(e, "{}", 2);
    }
    return enc_fail(e, CONCH_ERR_CODEC, "%s: type_url is not set", d->name);
  }
  pd = conch__pbj_resolve_url(e->opts, url);
  if (pd == NULL) {
    return enc_fail(e, CONCH_ERR_CODEC,
                    "%s: cannot resolve type URL \"%.200s\"", d->name, url);
  }
  if (depth + 1 > MAX_DEPTH) {
    return enc_fail(e, CONCH_ERR_CODEC, "%s: nested more than %d deep",
                    pd->name, MAX_DEPTH);
  }
  e->oom = 0;
  sub = protobuf_c_message_unpack(pd, &pba, val->len, val->data);
  if (sub == NULL) {
    if (e->oom) {
      return enc_fail(e, CONCH_ERR_NOMEM, "out of memory");
    }
    return enc_fail(e, CONCH_ERR_CODEC,
                    "%s: cannot unpack the value of \"%.200s\" (%zu bytes)",
                    d->name, url, val->len);
  }
  rv = put(e, "{\"@type\":", 9);
  if (rv == 0) {
    rv = put_string(e, url, strlen(url), d, tf);
  }
  if (rv == 0 && conch__pbj_wkt_of(pd) != WKT_NONE) {
    rv = put(e, ",\"value\":", 9);
    if (rv == 0) {
      rv = enc_message(e, sub, pd, depth + 1);
    }
  } else if (rv == 0) {
    rv = enc_fields(e, sub, pd, depth + 1, 0);
  }
  protobuf_c_message_free_unpacked(sub, &pba);
  if (rv != 0) {
    return -1;
  }
  return put(e, "}", 1);
}

static int enc_wkt(enc *e, const ProtobufCMessage *m,
                   const ProtobufCMessageDescriptor *d, pbj_wkt k,
                   unsigned depth) {
  const ProtobufCFieldDescriptor *f;

  switch (k) {
  case WKT_ANY:
    return enc_any(e, m, d, depth);
  case WKT_TIMESTAMP:
  case WKT_DURATION:
    return enc_time(e, m, d, k);
  case WKT_WRAPPER:
    f = conch__pbj_wkt_field(d, 1, ANY_SCALAR, 0);
    if (f == NULL) {
      return layout_fail(e, d);
    }
    return enc_value(e, d, f, fval(m, f), depth);
  case WKT_STRUCT:
    f = conch__pbj_wkt_field(d, 1, PROTOBUF_C_TYPE_MESSAGE, 1);
    if (f == NULL || !conch__pbj_is_map(d, f)) {
      return layout_fail(e, d);
    }
    return m != NULL ? enc_map(e, d, f, m, depth) : put(e, "{}", 2);
  case WKT_LIST:
    f = conch__pbj_wkt_field(d, 1, PROTOBUF_C_TYPE_MESSAGE, 1);
    if (f == NULL) {
      return layout_fail(e, d);
    }
    return m != NULL ? enc_list(e, d, f, m, depth) : put(e, "[]", 2);
  case WKT_VALUE:
    return enc_kind(e, m, d, depth);
  case WKT_FIELDMASK:
    return enc_fieldmask(e, m, d);
  default:
    return layout_fail(e, d);
  }
}

static int enc_message(enc *e, const ProtobufCMessage *m,
                       const ProtobufCMessageDescriptor *d, unsigned depth) {
  pbj_wkt k = conch__pbj_wkt_of(d);

  if (depth > MAX_DEPTH) {
    return enc_fail(e, CONCH_ERR_CODEC, "%s: nested more than %d deep", d->name,
                    MAX_DEPTH);
  }
  if (k != WKT_NONE && k != WKT_EMPTY) {
    return enc_wkt(e, m, d, k, depth);
  }
  if (put(e, "{", 1) != 0 || enc_fields(e, m, d, depth, 1) != 0) {
    return -1;
  }
  return put(e, "}", 1);
}

int conch__pbjson_encode(const ProtobufCMessage *m, const conch_mem *mem,
                         conch_buf *out, char *err, size_t errlen) {
  return conch__pbjson_encode_ex(m, NULL, mem, out, err, errlen);
}

int conch__pbjson_encode_ex(const ProtobufCMessage *m,
                            const conch_pbjson_opts *opts, const conch_mem *mem,
                            conch_buf *out, char *err, size_t errlen) {
  enc e;
  size_t size0 = conch__buf_size(out);

  if (errlen > 0) {
    err[0] = '\0';
  }
  e.mem = mem != NULL ? mem : conch_mem_default();
  e.opts = opts;
  e.oom = 0;
  e.out = out;
  e.err = err;
  e.errlen = errlen;
  e.rv = 0;
  if (enc_message(&e, m, m->descriptor, 0) != 0) {
    out->len = out->off + size0;
    return e.rv;
  }
  return 0;
}
