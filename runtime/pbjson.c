/* proto3 JSON for protobuf-c messages (pbjson.h): an encoder writing into a
   conch_buf, and a decoder over jansson's parse tree that builds messages
   the way protobuf_c_message_unpack() does.  Behaviour follows protojson
   (encoding/protojson of protobuf-go), which connect-go and so envd use;
   where it and protobuf-es disagree, protojson wins. */
#include "pbjson.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <conch/status.h>

#include "base64.h"
#include "mem_int.h"

/* Message nesting both ways.  Decoding stops at the same depth, so that
   whatever decodes can be encoded again. */
#define MAX_DEPTH 1000

static const char *const type_names[] = {
    "int32",  "sint32",  "sfixed32", "int64",   "sint64", "sfixed64",
    "uint32", "fixed32", "uint64",   "fixed64", "float",  "double",
    "bool",   "enum",    "string",   "bytes",   "message"};

static const char *type_name(ProtobufCType t) {
  return (unsigned)t < sizeof(type_names) / sizeof(type_names[0])
             ? type_names[t]
             : "?";
}

/* Storage of one value of |t|: a singular field, or a repeated element. */
static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
    return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(ProtobufCMessage *);
  default:
    return 4; /* 32-bit integers, float, enum */
  }
}

static void *member(const ProtobufCMessage *m, unsigned off) {
  return (char *)(uintptr_t)m + off;
}

/* Well-known types carry JSON mappings of their own that this codec does
   not implement; writing them in the generic form would be wrong JSON.
   Empty is the exception: its mapping is the generic {}. */
static int is_wkt(const ProtobufCMessageDescriptor *d) {
  return d->package_name != NULL &&
         strcmp(d->package_name, "google.protobuf") == 0 &&
         strcmp(d->name, "google.protobuf.Empty") != 0;
}

/* Whether |key| is the json name of the field |name|: protoc's
   ToJsonName drops each '_' and upper-cases the character after it. */
static int json_name_eq(const char *name, const char *key) {
  int up = 0;

  for (; *name != '\0'; name++) {
    char c = *name;

    if (c == '_') {
      up = 1;
      continue;
    }
    if (up && c >= 'a' && c <= 'z') {
      c = (char)(c - 'a' + 'A');
    }
    up = 0;
    if (*key != c) {
      return 0;
    }
    key++;
  }
  return *key == '\0';
}

/* Whether |short_name| is protoc's MapEntryName of the field |field|: the
   field name in CamelCase (first letter and each one after '_' upper-cased,
   the '_' dropped) followed by "Entry". */
static int entry_name_eq(const char *field, const char *short_name) {
  int up = 1;

  for (; *field != '\0'; field++) {
    char c = *field;

    if (c == '_') {
      up = 1;
      continue;
    }
    if (up && c >= 'a' && c <= 'z') {
      c = (char)(c - 'a' + 'A');
    }
    up = 0;
    if (*short_name != c) {
      return 0;
    }
    short_name++;
  }
  return strcmp(short_name, "Entry") == 0;
}

/* protobuf-c has no map flag: protoc lowers map<K, V> name = N to a
   repeated field of the nested message <Parent>.<CamelName>Entry whose
   fields are K key = 1 and V value = 2.  That shape is the test.  (A
   message written by hand in exactly that shape and used as a repeated
   field of that name is taken for a map too: protobuf-c's descriptors
   cannot tell the two apart.) */
static int is_map(const ProtobufCMessageDescriptor *parent,
                  const ProtobufCFieldDescriptor *f) {
  const ProtobufCMessageDescriptor *e = f->descriptor;
  size_t pn;

  if (f->label != PROTOBUF_C_LABEL_REPEATED ||
      f->type != PROTOBUF_C_TYPE_MESSAGE || e == NULL || e->n_fields != 2 ||
      e->fields[0].id != 1 || e->fields[1].id != 2 ||
      strcmp(e->fields[0].name, "key") != 0 ||
      strcmp(e->fields[1].name, "value") != 0 ||
      e->fields[0].label == PROTOBUF_C_LABEL_REPEATED ||
      e->fields[1].label == PROTOBUF_C_LABEL_REPEATED) {
    return 0;
  }
  switch (e->fields[0].type) {
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE:
  case PROTOBUF_C_TYPE_ENUM:
  case PROTOBUF_C_TYPE_BYTES:
  case PROTOBUF_C_TYPE_MESSAGE:
    return 0;
  default:
    break;
  }
  if (!entry_name_eq(f->name, e->short_name)) {
    return 0;
  }
  pn = strlen(parent->name);
  return strncmp(e->name, parent->name, pn) == 0 && e->name[pn] == '.' &&
         strcmp(e->name + pn + 1, e->short_name) == 0;
}

/* ---- Encoding ------------------------------------------------------------ */

typedef struct enc {
  const conch_mem *mem;
  conch_buf *out;
  char *err;
  size_t errlen;
  int rv;
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

/* Length of the UTF-8 sequence at |s| (|n| bytes left), or 0 when it is
   not valid UTF-8: overlong forms, surrogates and code points past
   U+10FFFF are invalid, as in Go's utf8 package. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];

  if (c < 0x80) {
    return 1;
  }
  if (c < 0xC2) {
    return 0;
  }
  if (c < 0xE0) {
    return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  }
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
        (c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)) {
      return 0;
    }
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
        (s[3] & 0xC0) != 0x80 || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] >= 0x90)) {
      return 0;
    }
    return 4;
  }
  return 0;
}

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
      k = utf8_seq(p + i, n - i);
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

/* "<jsonName>": */
static int put_name(enc *e, const char *name) {
  char chunk[64];
  size_t n = 0;
  int up = 0;

  chunk[n++] = '"';
  for (; *name != '\0'; name++) {
    char c = *name;

    if (c == '_') {
      up = 1;
      continue;
    }
    if (up && c >= 'a' && c <= 'z') {
      c = (char)(c - 'a' + 'A');
    }
    up = 0;
    if (n == sizeof(chunk)) {
      if (put(e, chunk, n) != 0) {
        return -1;
      }
      n = 0;
    }
    chunk[n++] = c;
  }
  if (put(e, chunk, n) != 0) {
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
  size_t n = *(const size_t *)member(m, f->quantifier_offset);
  const char *arr = *(char *const *)member(m, f->offset);
  size_t sz = elem_size(f->type);
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

/* 0 string, 1 signed, 2 unsigned (and bool). */
static int key_kind(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_STRING:
    return 0;
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return 1;
  default:
    return 2;
  }
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
    if (key_kind(kf->type) == 1) {
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
  size_t n = *(const size_t *)member(m, f->quantifier_offset);
  ProtobufCMessage *const *arr =
      *(ProtobufCMessage * *const *)member(m, f->offset);
  int kind = key_kind(kf->type);
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
    read_key(kf, member(arr[i], kf->offset), &keys[i]);
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
      rv = enc_value(e, ed, vf, member(arr[keys[i].idx], vf->offset), depth);
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
  const void *p = member(m, f->offset);

  if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
    if (*(const uint32_t *)member(m, f->quantifier_offset) != f->id) {
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
    return *(const size_t *)member(m, f->quantifier_offset) > 0;
  case PROTOBUF_C_LABEL_OPTIONAL:
    if (f->type == PROTOBUF_C_TYPE_STRING ||
        f->type == PROTOBUF_C_TYPE_MESSAGE) {
      const void *v = *(void *const *)p;

      /* protobuf-c's own test for these (it packs them the same way). */
      return v != NULL && v != f->default_value;
    }
    return *(const protobuf_c_boolean *)member(m, f->quantifier_offset) != 0;
  default:
    return !is_default(f, p);
  }
}

static int enc_message(enc *e, const ProtobufCMessage *m,
                       const ProtobufCMessageDescriptor *d, unsigned depth) {
  unsigned i;
  int first = 1;

  if (is_wkt(d)) {
    return enc_fail(e, CONCH_ERR_UNSUPPORTED,
                    "%s: well-known types have their own JSON mapping, which "
                    "is not supported",
                    d->name);
  }
  if (depth > MAX_DEPTH) {
    return enc_fail(e, CONCH_ERR_CODEC, "%s: nested more than %d deep", d->name,
                    MAX_DEPTH);
  }
  if (put(e, "{", 1) != 0) {
    return -1;
  }
  for (i = 0; m != NULL && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    int rv;

    if (!present(m, f)) {
      continue;
    }
    if (!first && put(e, ",", 1) != 0) {
      return -1;
    }
    first = 0;
    if (put_name(e, f->name) != 0) {
      return -1;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      rv = is_map(d, f) ? enc_map(e, d, f, m, depth)
                        : enc_list(e, d, f, m, depth);
    } else {
      rv = enc_value(e, d, f, member(m, f->offset), depth);
    }
    if (rv != 0) {
      return -1;
    }
  }
  return put(e, "}", 1);
}

int conch__pbjson_encode(const ProtobufCMessage *m, const conch_mem *mem,
                         conch_buf *out, char *err, size_t errlen) {
  enc e;
  size_t size0 = conch__buf_size(out);

  if (errlen > 0) {
    err[0] = '\0';
  }
  e.mem = mem != NULL ? mem : conch_mem_default();
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

/* ---- Decoding ------------------------------------------------------------ */

typedef struct dec {
  ProtobufCAllocator *alloc;
  char *err;
  size_t errlen;
  int rv;
} dec;

/* dec_value() results besides 0 and -1: an unknown enum name, which is
   dropped (protojson's DiscardUnknown). */
#define DISCARD 1

static int dec_message(dec *d, const ProtobufCMessageDescriptor *md,
                       const json_t *obj, ProtobufCMessage *m, unsigned depth);

static int dec_fail(dec *d, int rv, const char *fmt, ...) CONCH_PRINTF(3, 4);
static int dec_fail(dec *d, int rv, const char *fmt, ...) {
  va_list ap;

  if (d->rv == 0) {
    d->rv = rv;
    if (d->errlen > 0) {
      va_start(ap, fmt);
      vsnprintf(d->err, d->errlen, fmt, ap);
      va_end(ap);
    }
  }
  return -1;
}

static int field_fail(dec *d, const ProtobufCMessageDescriptor *md,
                      const ProtobufCFieldDescriptor *f, const char *fmt, ...)
    CONCH_PRINTF(4, 5);
static int field_fail(dec *d, const ProtobufCMessageDescriptor *md,
                      const ProtobufCFieldDescriptor *f, const char *fmt, ...) {
  char what[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  return dec_fail(d, CONCH_ERR_CODEC, "field %s.%s: %s", md->name, f->name,
                  what);
}

static void *dalloc(dec *d, size_t n) {
  void *p = d->alloc->alloc(d->alloc->allocator_data, n > 0 ? n : 1);

  if (p == NULL) {
    dec_fail(d, CONCH_ERR_NOMEM, "out of memory");
  }
  return p;
}

static void dfree(dec *d, void *p) {
  if (p != NULL) {
    d->alloc->free(d->alloc->allocator_data, p);
  }
}

static void *libc_alloc(void *ud, size_t n) {
  (void)ud;
  return conch__malloc(conch_mem_default(), n);
}

static void libc_free(void *ud, void *p) {
  (void)ud;
  conch__free(conch_mem_default(), p);
}

static const char *jtype(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
    return "true";
  case JSON_FALSE:
    return "false";
  default:
    return "null";
  }
}

/* A short rendering of |v| for messages. */
static const char *show(const json_t *v, char *buf, size_t n) {
  if (json_is_integer(v)) {
    snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
  } else if (json_is_real(v)) {
    snprintf(buf, n, "%.17g", json_real_value(v));
  } else if (json_is_string(v)) {
    size_t len = json_string_length(v);

    snprintf(buf, n, "\"%.*s%s\"", len > 40 ? 40 : (int)len,
             json_string_value(v), len > 40 ? "..." : "");
  } else {
    snprintf(buf, n, "%s", jtype(v));
  }
  return buf;
}

static ProtobufCMessage *new_message(dec *d,
                                     const ProtobufCMessageDescriptor *md) {
  ProtobufCMessage *m;

  if (is_wkt(md)) {
    dec_fail(d, CONCH_ERR_UNSUPPORTED,
             "%s: well-known types have their own JSON mapping, which is not "
             "supported",
             md->name);
    return NULL;
  }
  m = dalloc(d, md->sizeof_message);
  if (m != NULL) {
    protobuf_c_message_init(md, m);
  }
  return m;
}

/* A JSON number in text: the parts of -?(0|[1-9][0-9]*)(.[0-9]+)?
   ([eE][+-]?[0-9]+)?, the exponent saturated at +-1000000.  Returns 0, or
   -1 when |s| is not exactly one number. */
typedef struct numtext {
  int neg;
  const char *ip; /* integer digits */
  size_t il;
  const char *fp; /* fraction digits */
  size_t fl;
  long exp;
} numtext;

static int parse_number(const char *s, size_t n, numtext *t) {
  size_t i = 0;

  memset(t, 0, sizeof(*t));
  if (i < n && s[i] == '-') {
    t->neg = 1;
    i++;
  }
  if (i >= n || s[i] < '0' || s[i] > '9') {
    return -1;
  }
  t->ip = s + i;
  if (s[i] == '0') {
    i++;
  } else {
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      i++;
    }
  }
  t->il = (size_t)(s + i - t->ip);
  if (i < n && s[i] == '.') {
    i++;
    t->fp = s + i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      i++;
    }
    t->fl = (size_t)(s + i - t->fp);
    if (t->fl == 0) {
      return -1;
    }
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    int eneg = 0;
    size_t start;

    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
      eneg = s[i] == '-';
      i++;
    }
    start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      if (t->exp < 1000000) {
        t->exp = t->exp * 10 + (s[i] - '0');
      }
      i++;
    }
    if (i == start) {
      return -1;
    }
    if (eneg) {
      t->exp = -t->exp;
    }
  }
  return i == n ? 0 : -1;
}

static char digit_at(const numtext *t, size_t k) {
  return k < t->il ? t->ip[k] : t->fp[k - t->il];
}

/* The exact integer a numtext denotes, as sign and magnitude.  Returns 0,
   -2 when it is not an integer, -3 when its magnitude exceeds 64 bits. */
static int numtext_int(const numtext *t, int *neg, uint64_t *mag) {
  size_t total = t->il + t->fl;
  size_t z = 0;
  size_t l;
  long long e;
  size_t k;
  uint64_t v = 0;

  *neg = t->neg;
  while (z < total && digit_at(t, z) == '0') {
    z++;
  }
  if (z == total) {
    *mag = 0;
    return 0;
  }
  l = total - 1;
  while (digit_at(t, l) == '0') {
    l--;
  }
  /* digits z..l, times 10^e */
  e = (long long)t->exp - (long long)t->fl + (long long)(total - 1 - l);
  if (e < 0) {
    return -2;
  }
  if ((long long)(l - z + 1) + e > 20) {
    return -3;
  }
  for (k = z; k <= l; k++) {
    unsigned dgt = (unsigned)(digit_at(t, k) - '0');

    if (v > (UINT64_MAX - dgt) / 10) {
      return -3;
    }
    v = v * 10 + dgt;
  }
  for (; e > 0; e--) {
    if (v > UINT64_MAX / 10) {
      return -3;
    }
    v *= 10;
  }
  *mag = v;
  return 0;
}

/* The integer in |v|, a JSON number or a string holding one, as sign and
   magnitude.  Returns 0; -1 wrong JSON type or not a number; -2 not an
   integer; -3 beyond 64 bits; -4 a number jansson only had as a double
   above 2^53 (with a fraction or exponent, or a huge literal), whose exact
   value is lost. */
static int json_int(const json_t *v, int *neg, uint64_t *mag) {
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);

    *neg = x < 0;
    *mag = x < 0 ? (uint64_t)(-(x + 1)) + 1 : (uint64_t)x;
    return 0;
  }
  if (json_is_real(v)) {
    double r = json_real_value(v);
    double a = r < 0 ? -r : r;

    *neg = r < 0;
    if (!(a < 18446744073709551616.0)) {
      return -3;
    }
    if (a > 9007199254740992.0) {
      return -4;
    }
    *mag = (uint64_t)a;
    return (double)*mag == a ? 0 : -2;
  }
  if (json_is_string(v)) {
    numtext t;

    if (parse_number(json_string_value(v), json_string_length(v), &t) != 0) {
      return -1;
    }
    return numtext_int(&t, neg, mag);
  }
  return -1;
}

static int int_fail(dec *d, const ProtobufCMessageDescriptor *md,
                    const ProtobufCFieldDescriptor *f, const json_t *v,
                    int rc) {
  char buf[64];

  show(v, buf, sizeof(buf));
  switch (rc) {
  case -1:
    return field_fail(d, md, f, "invalid value for %s: %s", type_name(f->type),
                      buf);
  case -2:
    return field_fail(d, md, f, "%s is not an integer", buf);
  case -4:
    return field_fail(d, md, f,
                      "%s: integers above 2^53 must be written as plain "
                      "integers or strings to be exact",
                      buf);
  default:
    return field_fail(d, md, f, "%s is out of range for %s", buf,
                      type_name(f->type));
  }
}

/* Sign and magnitude into [-2^(bits-1), 2^(bits-1)). */
static int to_signed(int neg, uint64_t mag, int bits, int64_t *out) {
  uint64_t lim = bits == 32 ? (uint64_t)INT32_MAX : (uint64_t)INT64_MAX;

  if (neg) {
    if (mag > lim + 1) {
      return -3;
    }
    *out = mag == 0 ? 0 : -(int64_t)(mag - 1) - 1;
    return 0;
  }
  if (mag > lim) {
    return -3;
  }
  *out = (int64_t)mag;
  return 0;
}

static int to_unsigned(int neg, uint64_t mag, int bits, uint64_t *out) {
  uint64_t lim = bits == 32 ? (uint64_t)UINT32_MAX : UINT64_MAX;

  if ((neg && mag != 0) || mag > lim) {
    return -3;
  }
  *out = mag;
  return 0;
}

/* A float or double from a JSON number, or from a string: "NaN",
   "Infinity", "-Infinity" or a number in JSON syntax.  Strings are
   rounded once, straight to the field's precision; numbers come from
   jansson as doubles, so a float field rounds them twice (a last-bit
   difference from protojson in rare halfway cases).  Returns 0, -1 wrong
   type or syntax, -3 out of range. */
static int json_float(dec *d, const json_t *v, int single, double *out) {
  if (json_is_integer(v)) {
    *out = (double)json_integer_value(v);
    if (single) {
      *out = (float)*out;
    }
    return 0;
  }
  if (json_is_real(v)) {
    double r = json_real_value(v);
    double a = r < 0 ? -r : r;

    if (single) {
      /* Go's ParseFloat(s, 32) fails only when the value rounds to
         infinity: up to half an ulp past FLT_MAX still gives FLT_MAX. */
      if (a > FLT_MAX) {
        if (a >= 0x1.ffffffp+127) {
          return -3;
        }
        r = r < 0 ? -FLT_MAX : FLT_MAX;
      }
      r = (float)r;
    }
    *out = r;
    return 0;
  }
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    numtext t;
    char small[128];
    char *num = small;
    size_t o = 0;
    size_t cap = n + 32;
    int rc = 0;

    if (strcmp(s, "NaN") == 0) {
      *out = NAN;
      return 0;
    }
    if (strcmp(s, "Infinity") == 0 || strcmp(s, "-Infinity") == 0) {
      *out = s[0] == '-' ? -INFINITY : INFINITY;
      return 0;
    }
    if (parse_number(s, n, &t) != 0) {
      return -1;
    }
    /* Without the decimal point, so that strtod's locale cannot matter:
       "-12.5e3" becomes "-125e2". */
    if (cap > sizeof(small)) {
      num = dalloc(d, cap);
      if (num == NULL) {
        return -5;
      }
    }
    if (t.neg) {
      num[o++] = '-';
    }
    memcpy(num + o, t.ip, t.il);
    o += t.il;
    if (t.fl > 0) {
      memcpy(num + o, t.fp, t.fl);
      o += t.fl;
    }
    snprintf(num + o, cap - o, "e%lld", (long long)t.exp - (long long)t.fl);
    if (single) {
      float f = strtof(num, NULL);

      if (isinf(f)) {
        rc = -3;
      }
      *out = f;
    } else {
      *out = strtod(num, NULL);
      if (isinf(*out)) {
        rc = -3;
      }
    }
    if (num != small) {
      dfree(d, num);
    }
    return rc;
  }
  return -1;
}

/* 0 with |*val|; DISCARD for an unknown name; -1 wrong type, -3 out of
   int32 range. */
static int json_enum(const ProtobufCEnumDescriptor *ed, const json_t *v,
                     int32_t *val) {
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    unsigned i;

    for (i = 0; i < ed->n_values; i++) {
      if (strcmp(ed->values[i].name, s) == 0) {
        *val = ed->values[i].value;
        return 0;
      }
    }
    return DISCARD;
  }
  if (json_is_number(v)) {
    int neg;
    uint64_t mag;
    int64_t x;
    int rc = json_int(v, &neg, &mag);

    if (rc == 0) {
      rc = to_signed(neg, mag, 32, &x);
    }
    if (rc != 0) {
      return rc;
    }
    *val = (int32_t)x;
    return 0;
  }
  return -1;
}

static int dec_bytes(dec *d, const ProtobufCMessageDescriptor *md,
                     const ProtobufCFieldDescriptor *f, const json_t *v,
                     ProtobufCBinaryData *out) {
  const char *s;
  size_t n;
  uint8_t *buf;
  size_t len = 0;
  int alphabet;

  if (!json_is_string(v)) {
    return field_fail(d, md, f, "expected base64 bytes (a string), got %s",
                      jtype(v));
  }
  s = json_string_value(v);
  n = json_string_length(v);
  /* As protojson: the URL-safe alphabet if either of its characters
     appears; padding is optional either way. */
  alphabet = memchr(s, '-', n) != NULL || memchr(s, '_', n) != NULL
                 ? CONCH_B64_URL
                 : CONCH_B64_STD;
  buf = NULL;
  if (conch__b64_decoded_max(n) > 0) {
    buf = dalloc(d, conch__b64_decoded_max(n));
    if (buf == NULL) {
      return -1;
    }
  }
  if (conch__b64_decode(s, n, alphabet, buf, &len) != 0) {
    dfree(d, buf);
    return field_fail(d, md, f, "invalid base64 data");
  }
  if (len == 0) {
    dfree(d, buf);
    buf = NULL;
  }
  out->data = buf;
  out->len = len;
  return 0;
}

/* One value of |f| from |v| into |slot| (its storage: a singular field or a
   repeated element).  A message is allocated and stored before it is
   filled, so that whatever was built is freed with the message when
   filling fails.  Returns 0, DISCARD, or -1. */
static int dec_value(dec *d, const ProtobufCMessageDescriptor *md,
                     const ProtobufCFieldDescriptor *f, const json_t *v,
                     void *slot, unsigned depth) {
  int neg;
  uint64_t mag;
  int rc;

  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: {
    int bits = elem_size(f->type) == 8 ? 64 : 32;
    int64_t x = 0;

    rc = json_int(v, &neg, &mag);
    if (rc == 0) {
      rc = to_signed(neg, mag, bits, &x);
    }
    if (rc != 0) {
      return int_fail(d, md, f, v, rc);
    }
    if (bits == 32) {
      *(int32_t *)slot = (int32_t)x;
    } else {
      *(int64_t *)slot = x;
    }
    return 0;
  }
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    int bits = elem_size(f->type) == 8 ? 64 : 32;
    uint64_t x = 0;

    rc = json_int(v, &neg, &mag);
    if (rc == 0) {
      rc = to_unsigned(neg, mag, bits, &x);
    }
    if (rc != 0) {
      return int_fail(d, md, f, v, rc);
    }
    if (bits == 32) {
      *(uint32_t *)slot = (uint32_t)x;
    } else {
      *(uint64_t *)slot = x;
    }
    return 0;
  }
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE: {
    int single = f->type == PROTOBUF_C_TYPE_FLOAT;
    double x = 0;
    char buf[64];

    rc = json_float(d, v, single, &x);
    if (rc == -5) {
      return -1;
    }
    if (rc != 0) {
      show(v, buf, sizeof(buf));
      return field_fail(d, md, f,
                        rc == -1 ? "invalid value for %s: %s"
                                 : "%s is out of range for %s",
                        rc == -1 ? type_name(f->type) : buf,
                        rc == -1 ? buf : type_name(f->type));
    }
    if (single) {
      *(float *)slot = (float)x;
    } else {
      *(double *)slot = x;
    }
    return 0;
  }
  case PROTOBUF_C_TYPE_BOOL:
    if (!json_is_boolean(v)) {
      return field_fail(d, md, f, "expected true or false, got %s", jtype(v));
    }
    *(protobuf_c_boolean *)slot = json_is_true(v);
    return 0;
  case PROTOBUF_C_TYPE_ENUM: {
    int32_t x = 0;
    char buf[64];

    rc = json_enum(f->descriptor, v, &x);
    if (rc == DISCARD) {
      return DISCARD;
    }
    if (rc != 0) {
      show(v, buf, sizeof(buf));
      return field_fail(d, md, f, "invalid value for enum %s: %s",
                        ((const ProtobufCEnumDescriptor *)f->descriptor)->name,
                        buf);
    }
    *(int32_t *)slot = x;
    return 0;
  }
  case PROTOBUF_C_TYPE_STRING: {
    char *s;
    size_t n;

    if (!json_is_string(v)) {
      return field_fail(d, md, f, "expected a string, got %s", jtype(v));
    }
    n = json_string_length(v);
    s = dalloc(d, n + 1);
    if (s == NULL) {
      return -1;
    }
    memcpy(s, json_string_value(v), n + 1);
    *(char **)slot = s;
    return 0;
  }
  case PROTOBUF_C_TYPE_BYTES:
    return dec_bytes(d, md, f, v, slot);
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessageDescriptor *sd = f->descriptor;
    ProtobufCMessage *sub;

    if (!json_is_object(v)) {
      return field_fail(d, md, f, "expected an object (%s), got %s", sd->name,
                        jtype(v));
    }
    sub = new_message(d, sd);
    if (sub == NULL) {
      return -1;
    }
    *(ProtobufCMessage **)slot = sub;
    return dec_message(d, sd, v, sub, depth + 1);
  }
  default:
    return field_fail(d, md, f, "unknown type %d", (int)f->type);
  }
}

/* A singular field: the oneof case or the proto2 has_ flag goes with it. */
static int dec_singular(dec *d, const ProtobufCMessageDescriptor *md,
                        const ProtobufCFieldDescriptor *f, const json_t *v,
                        ProtobufCMessage *m, unsigned depth) {
  uint32_t *cs = NULL;
  int rc;

  if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
    /* Set first: a member message is then freed with |m| if filling it
       fails.  The union was zero, so nothing else is freed. */
    cs = member(m, f->quantifier_offset);
    *cs = f->id;
  }
  rc = dec_value(d, md, f, v, member(m, f->offset), depth);
  if (rc == DISCARD && cs != NULL) {
    *cs = 0;
  }
  if (rc == 0 && cs == NULL && f->label == PROTOBUF_C_LABEL_OPTIONAL &&
      f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE) {
    *(protobuf_c_boolean *)member(m, f->quantifier_offset) = 1;
  }
  return rc;
}

static int dec_list(dec *d, const ProtobufCMessageDescriptor *md,
                    const ProtobufCFieldDescriptor *f, const json_t *v,
                    ProtobufCMessage *m, unsigned depth) {
  size_t n;
  size_t sz = elem_size(f->type);
  size_t *count = member(m, f->quantifier_offset);
  char **arrp = member(m, f->offset);
  size_t i;

  if (!json_is_array(v)) {
    return field_fail(d, md, f, "expected an array, got %s", jtype(v));
  }
  n = json_array_size(v);
  if (n == 0) {
    return 0;
  }
  if (n > SIZE_MAX / sz) {
    return dec_fail(d, CONCH_ERR_NOMEM, "out of memory");
  }
  *arrp = dalloc(d, n * sz);
  if (*arrp == NULL) {
    return -1;
  }
  /* Zeroed and counted before each element is filled: a half-built
     element is then freed with the message. */
  memset(*arrp, 0, n * sz);
  *count = 0;
  for (i = 0; i < n; i++) {
    const json_t *el = json_array_get(v, i);
    int rc;

    if (json_is_null(el)) {
      return field_fail(d, md, f, "element %zu is null", i);
    }
    (*count)++;
    rc = dec_value(d, md, f, el, *arrp + (*count - 1) * sz, depth);
    if (rc == DISCARD) {
      (*count)--;
    } else if (rc != 0) {
      return -1;
    }
  }
  if (*count == 0) {
    dfree(d, *arrp);
    *arrp = NULL;
  }
  return 0;
}

/* A map key from the JSON name: strings as they are, bool as "true" or
   "false", integers in decimal with an optional sign (none for unsigned
   types), as protojson reads them with strconv.ParseInt/ParseUint. */
static int dec_key(dec *d, const ProtobufCMessageDescriptor *ed,
                   const ProtobufCFieldDescriptor *kf, const char *key,
                   ProtobufCMessage *ent) {
  void *slot = member(ent, kf->offset);
  int kind = key_kind(kf->type);
  int bits = (int)elem_size(kf->type) * 8;
  const char *p = key;
  int neg = 0;
  uint64_t mag = 0;
  int64_t sx = 0;
  uint64_t ux = 0;
  int rc = 0;

  if (kf->type == PROTOBUF_C_TYPE_STRING) {
    size_t n = strlen(key);
    char *s = dalloc(d, n + 1);

    if (s == NULL) {
      return -1;
    }
    memcpy(s, key, n + 1);
    *(char **)slot = s;
    return 0;
  }
  if (kf->type == PROTOBUF_C_TYPE_BOOL) {
    rc = strcmp(key, "true") == 0 || strcmp(key, "false") == 0 ? 0 : -1;
    ux = key[0] == 't';
  } else {
    if (kind == 1 && (*p == '-' || *p == '+')) {
      neg = *p == '-';
      p++;
    }
    rc = *p == '\0' ? -1 : 0;
    for (; rc == 0 && *p != '\0'; p++) {
      unsigned dgt = (unsigned)(*p - '0');

      if (*p < '0' || *p > '9' || mag > (UINT64_MAX - dgt) / 10) {
        rc = -1;
      } else {
        mag = mag * 10 + dgt;
      }
    }
    if (rc == 0) {
      rc = kind == 1 ? to_signed(neg, mag, bits, &sx)
                     : to_unsigned(neg, mag, bits, &ux);
    }
  }
  if (rc != 0) {
    return field_fail(d, ed, kf, "not a valid %s map key", type_name(kf->type));
  }
  if (kf->type == PROTOBUF_C_TYPE_BOOL) {
    *(protobuf_c_boolean *)slot = (protobuf_c_boolean)ux;
  } else if (kind == 1 && bits == 32) {
    *(int32_t *)slot = (int32_t)sx;
  } else if (kind == 1) {
    *(int64_t *)slot = sx;
  } else if (bits == 32) {
    *(uint32_t *)slot = (uint32_t)ux;
  } else {
    *(uint64_t *)slot = ux;
  }
  if (kf->label == PROTOBUF_C_LABEL_OPTIONAL) {
    *(protobuf_c_boolean *)member(ent, kf->quantifier_offset) = 1;
  }
  return 0;
}

/* Names a failed key or value after the map field and the key, not after
   the entry message protoc made up: "field process.ProcessConfig.envs: key
   \"A\": expected a string, got a number". */
static int map_fail(dec *d, const ProtobufCMessageDescriptor *md,
                    const ProtobufCFieldDescriptor *f,
                    const ProtobufCMessageDescriptor *ed, const char *key) {
  char what[256];
  size_t n = strlen(ed->name);

  if (d->rv == CONCH_ERR_CODEC && d->errlen > 0 &&
      strncmp(d->err, "field ", 6) == 0 &&
      strncmp(d->err + 6, ed->name, n) == 0 && d->err[6 + n] == '.') {
    const char *colon = strstr(d->err, ": ");

    snprintf(what, sizeof(what), "%s", colon != NULL ? colon + 2 : "");
    snprintf(d->err, d->errlen, "field %s.%s: key \"%.40s\": %s", md->name,
             f->name, key, what);
  }
  return -1;
}

static int dec_map(dec *d, const ProtobufCMessageDescriptor *md,
                   const ProtobufCFieldDescriptor *f, const json_t *v,
                   ProtobufCMessage *m, unsigned depth) {
  const ProtobufCMessageDescriptor *ed = f->descriptor;
  size_t *count = member(m, f->quantifier_offset);
  ProtobufCMessage ***arrp = member(m, f->offset);
  const char *key;
  json_t *val;
  size_t n;

  if (!json_is_object(v)) {
    return field_fail(d, md, f, "expected an object (a map), got %s", jtype(v));
  }
  n = json_object_size(v);
  if (n == 0) {
    return 0;
  }
  if (n > SIZE_MAX / sizeof(**arrp)) {
    return dec_fail(d, CONCH_ERR_NOMEM, "out of memory");
  }
  *arrp = dalloc(d, n * sizeof(**arrp));
  if (*arrp == NULL) {
    return -1;
  }
  *count = 0;
  json_object_foreach((json_t *)(uintptr_t)v, key, val) {
    ProtobufCMessage *ent;
    int rc;

    if (*count == n) {
      break; /* jansson keeps its size; this cannot happen */
    }
    if (json_is_null(val)) {
      return field_fail(d, md, f, "key \"%.40s\": the value is null", key);
    }
    ent = new_message(d, ed);
    if (ent == NULL) {
      return -1;
    }
    (*arrp)[(*count)++] = ent;
    if (dec_key(d, ed, &ed->fields[0], key, ent) != 0) {
      return map_fail(d, md, f, ed, key);
    }
    rc = dec_singular(d, ed, &ed->fields[1], val, ent, depth);
    if (rc == DISCARD) {
      /* An unknown enum name drops the entry, as in protojson. */
      protobuf_c_message_free_unpacked(ent, d->alloc);
      (*count)--;
    } else if (rc != 0) {
      return map_fail(d, md, f, ed, key);
    }
  }
  if (*count == 0) {
    dfree(d, *arrp);
    *arrp = NULL;
  }
  return 0;
}

/* The field named |key|: json name first, then the proto name, as
   protojson looks them up. */
static const ProtobufCFieldDescriptor *
find_field(const ProtobufCMessageDescriptor *md, const char *key) {
  unsigned i;

  for (i = 0; i < md->n_fields; i++) {
    if (json_name_eq(md->fields[i].name, key)) {
      return &md->fields[i];
    }
  }
  for (i = 0; i < md->n_fields; i++) {
    if (strcmp(md->fields[i].name, key) == 0) {
      return &md->fields[i];
    }
  }
  return NULL;
}

enum { SEEN = 1, ONEOF_SET = 2, VALUE_SET = 4 };

/* Checks that no other member of |f|'s oneof was given a value. */
static int oneof_free(dec *d, const ProtobufCMessageDescriptor *md,
                      const ProtobufCFieldDescriptor *f, const uint8_t *seen) {
  unsigned j;

  for (j = 0; j < md->n_fields; j++) {
    const ProtobufCFieldDescriptor *g = &md->fields[j];

    if (g != f && (seen[j] & ONEOF_SET) != 0 &&
        (g->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
        g->quantifier_offset == f->quantifier_offset) {
      return field_fail(d, md, f, "its oneof already has a value (field %s)",
                        g->name);
    }
  }
  return 0;
}

static int dec_fields(dec *d, const ProtobufCMessageDescriptor *md,
                      const json_t *obj, ProtobufCMessage *m, uint8_t *seen,
                      unsigned depth) {
  const char *key;
  json_t *val;
  unsigned i;

  json_object_foreach((json_t *)(uintptr_t)obj, key, val) {
    const ProtobufCFieldDescriptor *f = find_field(md, key);
    int rc;

    if (f == NULL) {
      continue; /* unknown fields are dropped, as connect-go does */
    }
    i = (unsigned)(f - md->fields);
    if ((seen[i] & SEEN) != 0) {
      return field_fail(d, md, f, "duplicate field (\"%.40s\")", key);
    }
    seen[i] |= SEEN;
    if (json_is_null(val)) {
      continue; /* null is the default: nothing to set */
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      rc = is_map(md, f) ? dec_map(d, md, f, val, m, depth)
                         : dec_list(d, md, f, val, m, depth);
    } else {
      if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
        if (oneof_free(d, md, f, seen) != 0) {
          return -1;
        }
        seen[i] |= ONEOF_SET;
      }
      rc = dec_singular(d, md, f, val, m, depth);
    }
    if (rc < 0) {
      return -1;
    }
    if (rc == 0) {
      seen[i] |= VALUE_SET;
    }
  }
  for (i = 0; i < md->n_fields; i++) {
    if (md->fields[i].label == PROTOBUF_C_LABEL_REQUIRED &&
        (seen[i] & VALUE_SET) == 0) {
      return field_fail(d, md, &md->fields[i], "required field not set");
    }
  }
  return 0;
}

static int dec_message(dec *d, const ProtobufCMessageDescriptor *md,
                       const json_t *obj, ProtobufCMessage *m, unsigned depth) {
  uint8_t small[64];
  uint8_t *seen = small;
  int rv;

  if (depth > MAX_DEPTH) {
    return dec_fail(d, CONCH_ERR_CODEC, "%s: nested more than %d deep",
                    md->name, MAX_DEPTH);
  }
  if (md->n_fields > sizeof(small)) {
    seen = dalloc(d, md->n_fields);
    if (seen == NULL) {
      return -1;
    }
  }
  memset(seen, 0, md->n_fields);
  rv = dec_fields(d, md, obj, m, seen, depth);
  if (seen != small) {
    dfree(d, seen);
  }
  return rv;
}

int conch__pbjson_decode(const ProtobufCMessageDescriptor *desc,
                         const uint8_t *json, size_t len,
                         ProtobufCAllocator *alloc, ProtobufCMessage **out,
                         char *err, size_t errlen) {
  ProtobufCAllocator libc = {libc_alloc, libc_free, NULL};
  dec d;
  json_error_t je;
  json_t *root;
  ProtobufCMessage *m = NULL;

  *out = NULL;
  if (errlen > 0) {
    err[0] = '\0';
  }
  d.alloc = alloc != NULL ? alloc : &libc;
  d.err = err;
  d.errlen = errlen;
  d.rv = 0;
  root = json_loadb((const char *)json, len, JSON_REJECT_DUPLICATES, &je);
  if (root == NULL && json_error_code(&je) == json_error_numeric_overflow) {
    /* An integer past 64 bits, maybe in a field we drop anyway: read every
       integer as a double instead, as protojson copes with the number. */
    root = json_loadb((const char *)json, len,
                      JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
  }
  if (root == NULL) {
    if (json_error_code(&je) == json_error_out_of_memory) {
      dec_fail(&d, CONCH_ERR_NOMEM, "out of memory");
    } else {
      dec_fail(&d, CONCH_ERR_CODEC, "syntax error (line %d:%d): %s", je.line,
               je.column, je.text);
    }
    return d.rv;
  }
  if (!json_is_object(root)) {
    dec_fail(&d, CONCH_ERR_CODEC, "%s: expected a JSON object, got %s",
             desc->name, jtype(root));
  } else {
    m = new_message(&d, desc);
    if (m != NULL && dec_message(&d, desc, root, m, 0) != 0) {
      protobuf_c_message_free_unpacked(m, d.alloc);
      m = NULL;
    }
  }
  json_decref(root);
  if (m == NULL) {
    return d.rv != 0 ? d.rv : CONCH_ERR_CODEC;
  }
  *out = m;
  return 0;
}
