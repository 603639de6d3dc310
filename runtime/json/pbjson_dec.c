/* proto3 JSON decoding into protobuf-c messages (pbjson.h): jansson's parse
   tree walked along the descriptors, messages built the way
   protobuf_c_message_unpack() builds them, as protojson (with
   DiscardUnknown) reads JSON; the well-known types in their own forms. */
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

/* ---- Decoding ------------------------------------------------------------ */

typedef struct dec {
  ProtobufCAllocator *alloc;
  const conch_pbjson_opts *opts;
  char *err;
  size_t errlen;
  int rv;
} dec;

/* dec_value() results besides 0 and -1: an unknown enum name, which is
   dropped (protojson's DiscardUnknown). */
#define DISCARD 1

static int dec_message(dec *d, const ProtobufCMessageDescriptor *md,
                       const json_t *obj, ProtobufCMessage *m, unsigned depth);
static int dec_msg(dec *d, const ProtobufCMessageDescriptor *pmd,
                   const ProtobufCFieldDescriptor *pf,
                   const ProtobufCMessageDescriptor *sd, const json_t *v,
                   ProtobufCMessage *m, unsigned depth);

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

  m = dalloc(d, md->sizeof_message);
  if (m != NULL && md->message_init != NULL) {
    protobuf_c_message_init(md, m);
  } else if (m != NULL) { /* our built-in well-known types */
    memset(m, 0, md->sizeof_message);
    m->descriptor = md;
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
    return field_fail(d, md, f, "invalid value for %s: %s",
                      conch__pbj_type_name(f->type), buf);
  case -2:
    return field_fail(d, md, f, "%s is not an integer", buf);
  case -4:
    return field_fail(d, md, f,
                      "%s: integers above 2^53 must be written as plain "
                      "integers or strings to be exact",
                      buf);
  default:
    return field_fail(d, md, f, "%s is out of range for %s", buf,
                      conch__pbj_type_name(f->type));
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
    int bits = conch__pbj_elem_size(f->type) == 8 ? 64 : 32;
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
    int bits = conch__pbj_elem_size(f->type) == 8 ? 64 : 32;
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
                        rc == -1 ? conch__pbj_type_name(f->type) : buf,
                        rc == -1 ? buf : conch__pbj_type_name(f->type));
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

    if (json_is_null(v) && conch__pbj_is_null_enum(f->descriptor)) {
      *(int32_t *)slot = 0;
      return 0;
    }
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
    if (memchr(json_string_value(v), 0, n) != NULL) {
      /* A C string would end there: the value would arrive cut short. */
      return field_fail(d, md, f, "string holds a NUL byte (\\u0000)");
    }
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

    if (!json_is_object(v) && (conch__pbj_wkt_of(sd) == WKT_NONE ||
                               conch__pbj_wkt_of(sd) == WKT_EMPTY)) {
      return field_fail(d, md, f, "expected an object (%s), got %s", sd->name,
                        jtype(v));
    }
    sub = new_message(d, sd);
    if (sub == NULL) {
      return -1;
    }
    *(ProtobufCMessage **)slot = sub;
    return dec_msg(d, md, f, sd, v, sub, depth + 1);
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
    cs = conch__pbj_member(m, f->quantifier_offset);
    *cs = f->id;
  }
  rc = dec_value(d, md, f, v, conch__pbj_member(m, f->offset), depth);
  if (rc == DISCARD && cs != NULL) {
    *cs = 0;
  }
  if (rc == 0 && cs == NULL && f->label == PROTOBUF_C_LABEL_OPTIONAL &&
      f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE) {
    *(protobuf_c_boolean *)conch__pbj_member(m, f->quantifier_offset) = 1;
  }
  return rc;
}

static int dec_list(dec *d, const ProtobufCMessageDescriptor *md,
                    const ProtobufCFieldDescriptor *f, const json_t *v,
                    ProtobufCMessage *m, unsigned depth) {
  size_t n;
  size_t sz = conch__pbj_elem_size(f->type);
  size_t *count = conch__pbj_member(m, f->quantifier_offset);
  char **arrp = conch__pbj_member(m, f->offset);
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

    if (json_is_null(el) && !conch__pbj_null_ok(f)) {
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
  void *slot = conch__pbj_member(ent, kf->offset);
  int kind = conch__pbj_key_kind(kf->type);
  int bits = (int)conch__pbj_elem_size(kf->type) * 8;
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
    return field_fail(d, ed, kf, "not a valid %s map key",
                      conch__pbj_type_name(kf->type));
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
    *(protobuf_c_boolean *)conch__pbj_member(ent, kf->quantifier_offset) = 1;
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
  size_t *count = conch__pbj_member(m, f->quantifier_offset);
  ProtobufCMessage ***arrp = conch__pbj_member(m, f->offset);
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
    if (json_is_null(val) && !conch__pbj_null_ok(&ed->fields[1])) {
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
   protojson looks them up (a proto2 JSON name two fields have is the
   first-declared one's: conch__pbj_shadowed()). */
static const ProtobufCFieldDescriptor *
find_field(const ProtobufCMessageDescriptor *md, const char *key) {
  size_t kl = strlen(key);
  unsigned i;

  for (i = 0; i < md->n_fields; i++) {
    const char *custom = conch__pbj_custom_name(md, &md->fields[i]);
    if (conch__pbj_shadowed(md, &md->fields[i]) != NULL) {
      continue; /* another field owns its JSON name */
    }
    if (custom != NULL ? strcmp(custom, key) == 0
                       : conch__json_name_eq(md->fields[i].name, key, kl)) {
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

    if (f == NULL && key[0] == '[' && conch__pbj_dynamic(md)) {
      return dec_fail(d, CONCH_ERR_UNSUPPORTED,
                      "%s: \"%.200s\": extensions are not supported in JSON",
                      md->name, key);
    }
    if (f == NULL) {
      continue; /* unknown fields are dropped, as connect-go does */
    }
    i = (unsigned)(f - md->fields);
    if ((seen[i] & SEEN) != 0) {
      return field_fail(d, md, f, "duplicate field (\"%.40s\")", key);
    }
    seen[i] |= SEEN;
    if (json_is_null(val) && !conch__pbj_null_ok(f)) {
      continue; /* null is the default: nothing to set */
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      rc = conch__pbj_is_map(md, f) ? dec_map(d, md, f, val, m, depth)
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

/* ---- Decoding well-known types ------------------------------------------ */

/* A failure in a well-known type below the field |pf| of |pmd| (both NULL
   at the top), named after that field. */
static int wkt_fail(dec *d, const ProtobufCMessageDescriptor *pmd,
                    const ProtobufCFieldDescriptor *pf, const char *fmt, ...)
    CONCH_PRINTF(4, 5);
static int wkt_fail(dec *d, const ProtobufCMessageDescriptor *pmd,
                    const ProtobufCFieldDescriptor *pf, const char *fmt, ...) {
  char what[320];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  if (pf == NULL) {
    return dec_fail(d, CONCH_ERR_CODEC, "%s", what);
  }
  return dec_fail(d, CONCH_ERR_CODEC, "field %s.%s: %s", pmd->name, pf->name,
                  what);
}

static int dlayout_fail(dec *d, const ProtobufCMessageDescriptor *sd) {
  return dec_fail(d, CONCH_ERR_CODEC,
                  "%s: the descriptor does not have the well-known layout",
                  sd->name);
}

static int dec_time(dec *d, const ProtobufCMessageDescriptor *pmd,
                    const ProtobufCFieldDescriptor *pf,
                    const ProtobufCMessageDescriptor *sd, const json_t *v,
                    ProtobufCMessage *m, pbj_wkt k) {
  const ProtobufCFieldDescriptor *sf =
      conch__pbj_wkt_field(sd, 1, PROTOBUF_C_TYPE_INT64, 0);
  const ProtobufCFieldDescriptor *nf =
      conch__pbj_wkt_field(sd, 2, PROTOBUF_C_TYPE_INT32, 0);
  int64_t secs = 0;
  int32_t nanos = 0;
  char buf[64];
  int rc;

  if (sf == NULL || nf == NULL) {
    return dlayout_fail(d, sd);
  }
  if (!json_is_string(v)) {
    return wkt_fail(d, pmd, pf, "expected a string (%s), got %s", sd->name,
                    jtype(v));
  }
  if (k == WKT_TIMESTAMP) {
    rc = conch__pbj_parse_timestamp(json_string_value(v), json_string_length(v),
                                    &secs, &nanos);
    if (rc == 0 && (secs < TS_MIN || secs > TS_MAX)) {
      return wkt_fail(d, pmd, pf, "%s out of range (%s)",
                      show(v, buf, sizeof(buf)), sd->name);
    }
  } else {
    rc = conch__pbj_parse_duration(json_string_value(v), json_string_length(v),
                                   &secs, &nanos);
    if (rc == 0 && (secs < -DUR_MAX || secs > DUR_MAX)) {
      return wkt_fail(d, pmd, pf, "%s out of range (%s)",
                      show(v, buf, sizeof(buf)), sd->name);
    }
  }
  if (rc != 0) {
    return wkt_fail(d, pmd, pf, "invalid %s value %s", sd->name,
                    show(v, buf, sizeof(buf)));
  }
  *(int64_t *)conch__pbj_member(m, sf->offset) = secs;
  *(int32_t *)conch__pbj_member(m, nf->offset) = nanos;
  return 0;
}

/* FieldMask: "fooBar,baz.qux" becomes the paths foo_bar and baz.qux. */
static int dec_fieldmask(dec *d, const ProtobufCMessageDescriptor *pmd,
                         const ProtobufCFieldDescriptor *pf,
                         const ProtobufCMessageDescriptor *sd, const json_t *v,
                         ProtobufCMessage *m) {
  const ProtobufCFieldDescriptor *f =
      conch__pbj_wkt_field(sd, 1, PROTOBUF_C_TYPE_STRING, 1);
  const char *s;
  size_t n;
  size_t np = 1;
  size_t i;
  size_t start;
  size_t *count;
  char ***arrp;

  if (f == NULL) {
    return dlayout_fail(d, sd);
  }
  if (!json_is_string(v)) {
    return wkt_fail(d, pmd, pf, "expected a string (%s), got %s", sd->name,
                    jtype(v));
  }
  s = json_string_value(v);
  n = json_string_length(v);
  while (n > 0 && strchr(" \t\n\v\f\r", s[0]) != NULL) {
    s++;
    n--;
  }
  while (n > 0 && strchr(" \t\n\v\f\r", s[n - 1]) != NULL) {
    n--;
  }
  if (n == 0) {
    return 0;
  }
  for (i = 0; i < n; i++) {
    np += s[i] == ',';
  }
  count = conch__pbj_member(m, f->quantifier_offset);
  arrp = conch__pbj_member(m, f->offset);
  *arrp = dalloc(d, np * sizeof(char *));
  if (*arrp == NULL) {
    return -1;
  }
  *count = 0;
  for (start = 0; start <= n; start = i + 1) {
    size_t len;
    size_t up = 0;
    size_t j;
    size_t o = 0;
    char *p;

    for (i = start; i < n && s[i] != ','; i++) {
      up += s[i] >= 'A' && s[i] <= 'Z';
    }
    len = i - start;
    if (memchr(s + start, '_', len) != NULL) {
      return wkt_fail(d, pmd, pf, "%s.paths contains invalid path: \"%.*s\"",
                      sd->name, (int)(len > 40 ? 40 : len), s + start);
    }
    p = dalloc(d, len + up + 1);
    if (p == NULL) {
      return -1;
    }
    (*arrp)[(*count)++] = p;
    for (j = start; j < i; j++) {
      if (s[j] >= 'A' && s[j] <= 'Z') {
        p[o++] = '_';
        p[o++] = (char)(s[j] - 'A' + 'a');
      } else {
        p[o++] = s[j];
      }
    }
    p[o] = '\0';
    if (!conch__pbj_valid_full_name(p, o)) {
      return wkt_fail(d, pmd, pf, "%s.paths contains invalid path: \"%.*s\"",
                      sd->name, (int)(len > 40 ? 40 : len), s + start);
    }
  }
  return 0;
}

/* Value: the kind follows the JSON type; a string is always string_value,
   even "NaN" (protojson). */
static int dec_kind(dec *d, const ProtobufCMessageDescriptor *sd,
                    const json_t *v, ProtobufCMessage *m, unsigned depth) {
  static const int types[] = {0,
                              PROTOBUF_C_TYPE_ENUM,
                              PROTOBUF_C_TYPE_DOUBLE,
                              PROTOBUF_C_TYPE_STRING,
                              PROTOBUF_C_TYPE_BOOL,
                              PROTOBUF_C_TYPE_MESSAGE,
                              PROTOBUF_C_TYPE_MESSAGE};
  const ProtobufCFieldDescriptor *f;
  uint32_t id;

  switch (json_typeof(v)) {
  case JSON_NULL:
    id = 1;
    break;
  case JSON_INTEGER:
  case JSON_REAL:
    id = 2;
    break;
  case JSON_STRING:
    id = 3;
    break;
  case JSON_TRUE:
  case JSON_FALSE:
    id = 4;
    break;
  case JSON_OBJECT:
    id = 5;
    break;
  default:
    id = 6;
    break;
  }
  f = conch__pbj_wkt_field(sd, id, types[id], 0);
  if (f == NULL || (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) == 0 ||
      (id == 1 && !conch__pbj_is_null_enum(f->descriptor)) ||
      (id == 5 && conch__pbj_wkt_of(f->descriptor) != WKT_STRUCT) ||
      (id == 6 && conch__pbj_wkt_of(f->descriptor) != WKT_LIST)) {
    return dlayout_fail(d, sd);
  }
  return dec_singular(d, sd, f, v, m, depth);
}

/* Any: the payload is read (the object's other members, or its "value"
   for a well-known type) and packed into value. */
static int dec_any(dec *d, const ProtobufCMessageDescriptor *pmd,
                   const ProtobufCFieldDescriptor *pf,
                   const ProtobufCMessageDescriptor *sd, const json_t *v,
                   ProtobufCMessage *m, unsigned depth) {
  const ProtobufCFieldDescriptor *tf =
      conch__pbj_wkt_field(sd, 1, PROTOBUF_C_TYPE_STRING, 0);
  const ProtobufCFieldDescriptor *vf =
      conch__pbj_wkt_field(sd, 2, PROTOBUF_C_TYPE_BYTES, 0);
  const ProtobufCMessageDescriptor *pd;
  const json_t *t;
  const json_t *val;
  const char *url;
  ProtobufCMessage *sub;
  ProtobufCBinaryData *bin;
  char *copy;
  size_t n;
  pbj_wkt k;
  int rc;

  if (tf == NULL || vf == NULL) {
    return dlayout_fail(d, sd);
  }
  if (!json_is_object(v)) {
    return wkt_fail(d, pmd, pf, "expected an object (%s), got %s", sd->name,
                    jtype(v));
  }
  t = json_object_get(v, "@type");
  if (t == NULL) {
    return 0; /* no type: every member is unknown, and dropped */
  }
  if (!json_is_string(t) || json_string_length(t) == 0) {
    return wkt_fail(d, pmd, pf, "%s: @type must be a non-empty string",
                    sd->name);
  }
  url = json_string_value(t);
  pd = conch__pbj_resolve_url(d->opts, url);
  if (pd == NULL) {
    return wkt_fail(d, pmd, pf, "%s: cannot resolve type URL \"%.200s\"",
                    sd->name, url);
  }
  k = conch__pbj_wkt_of(pd);
  val = json_object_get(v, "value");
  if (k != WKT_NONE && val == NULL && k != WKT_EMPTY) {
    return wkt_fail(d, pmd, pf, "%s: missing \"value\" for %s", sd->name,
                    pd->name);
  }
  if (k == WKT_EMPTY && val != NULL && !json_is_object(val)) {
    return wkt_fail(d, pmd, pf, "%s: expected an object (%s), got %s", sd->name,
                    pd->name, jtype(val));
  }
  sub = new_message(d, pd);
  if (sub == NULL) {
    return -1;
  }
  if (k == WKT_NONE) {
    rc = dec_message(d, pd, v, sub, depth + 1);
  } else {
    rc = val != NULL ? dec_msg(d, NULL, NULL, pd, val, sub, depth + 1) : 0;
  }
  if (rc == 0) {
    copy = dalloc(d, strlen(url) + 1);
    rc = copy != NULL ? 0 : -1;
  }
  if (rc == 0) {
    memcpy(copy, url, strlen(url) + 1);
    *(char **)conch__pbj_member(m, tf->offset) = copy;
    n = protobuf_c_message_get_packed_size(sub);
    bin = conch__pbj_member(m, vf->offset);
    if (n > 0) {
      bin->data = dalloc(d, n);
      if (bin->data == NULL) {
        rc = -1;
      } else {
        bin->len = protobuf_c_message_pack(sub, bin->data);
      }
    }
  }
  protobuf_c_message_free_unpacked(sub, d->alloc);
  return rc;
}

/* |v| into |m|, a |sd| message, at |depth|: a well-known type in its own
   form, anything else from an object.  |pf| of |pmd| is the field it
   came in (both NULL at the top). */
static int dec_msg(dec *d, const ProtobufCMessageDescriptor *pmd,
                   const ProtobufCFieldDescriptor *pf,
                   const ProtobufCMessageDescriptor *sd, const json_t *v,
                   ProtobufCMessage *m, unsigned depth) {
  const ProtobufCFieldDescriptor *f;
  pbj_wkt k = conch__pbj_wkt_of(sd);

  if (depth > MAX_DEPTH) {
    return dec_fail(d, CONCH_ERR_CODEC, "%s: nested more than %d deep",
                    sd->name, MAX_DEPTH);
  }
  switch (k) {
  case WKT_ANY:
    return dec_any(d, pmd, pf, sd, v, m, depth);
  case WKT_TIMESTAMP:
  case WKT_DURATION:
    return dec_time(d, pmd, pf, sd, v, m, k);
  case WKT_WRAPPER:
    f = conch__pbj_wkt_field(sd, 1, ANY_SCALAR, 0);
    if (f == NULL) {
      return dlayout_fail(d, sd);
    }
    if (json_is_null(v)) {
      return wkt_fail(d, pmd, pf, "expected a value (%s), got null", sd->name);
    }
    if (dec_singular(d, sd, f, v, m, depth) == 0) {
      return 0;
    }
    if (pf != NULL && d->rv == CONCH_ERR_CODEC && d->errlen > 0) {
      /* Named after the field, not after the wrapper's "value". */
      char what[256];
      const char *colon = strstr(d->err, ": ");

      snprintf(what, sizeof(what), "%s", colon != NULL ? colon + 2 : d->err);
      snprintf(d->err, d->errlen, "field %s.%s: %s", pmd->name, pf->name, what);
    }
    return -1;
  case WKT_STRUCT:
  case WKT_LIST:
    f = conch__pbj_wkt_field(sd, 1, PROTOBUF_C_TYPE_MESSAGE, 1);
    if (f == NULL || (k == WKT_STRUCT) != conch__pbj_is_map(sd, f)) {
      return dlayout_fail(d, sd);
    }
    if (k == WKT_STRUCT ? !json_is_object(v) : !json_is_array(v)) {
      return wkt_fail(d, pmd, pf, "expected %s (%s), got %s",
                      k == WKT_STRUCT ? "an object" : "an array", sd->name,
                      jtype(v));
    }
    return k == WKT_STRUCT ? dec_map(d, sd, f, v, m, depth)
                           : dec_list(d, sd, f, v, m, depth);
  case WKT_VALUE:
    return dec_kind(d, sd, v, m, depth);
  case WKT_FIELDMASK:
    return dec_fieldmask(d, pmd, pf, sd, v, m);
  default:
    if (!json_is_object(v)) {
      if (pf == NULL) {
        return dec_fail(d, CONCH_ERR_CODEC,
                        "%s: expected a JSON object, got %s", sd->name,
                        jtype(v));
      }
      return wkt_fail(d, pmd, pf, "expected an object (%s), got %s", sd->name,
                      jtype(v));
    }
    return dec_message(d, sd, v, m, depth);
  }
}

int conch__pbjson_decode(const ProtobufCMessageDescriptor *desc,
                         const uint8_t *json, size_t len,
                         ProtobufCAllocator *alloc, ProtobufCMessage **out,
                         char *err, size_t errlen) {
  return conch__pbjson_decode_ex(desc, json, len, NULL, alloc, out, err,
                                 errlen);
}

int conch__pbjson_decode_ex(const ProtobufCMessageDescriptor *desc,
                            const uint8_t *json, size_t len,
                            const conch_pbjson_opts *opts,
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
  d.opts = opts;
  d.err = err;
  d.errlen = errlen;
  d.rv = 0;
  if (conch__json_values(json, len) > CONCH_JSON_MAX_VALUES) {
    snprintf(err, errlen, "more than %d JSON values", CONCH_JSON_MAX_VALUES);
    return CONCH_ERR_CODEC;
  }
  root = json_loadb((const char *)json, len,
                    JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (root == NULL && json_error_code(&je) == json_error_numeric_overflow) {
    /* An integer past 64 bits, maybe in a field we drop anyway: read every
       integer as a double instead, as protojson copes with the number. */
    root = json_loadb((const char *)json, len,
                      JSON_REJECT_DUPLICATES | JSON_DECODE_ANY |
                          JSON_DECODE_INT_AS_REAL,
                      &je);
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
  if (!json_is_object(root) && (conch__pbj_wkt_of(desc) == WKT_NONE ||
                                conch__pbj_wkt_of(desc) == WKT_EMPTY)) {
    dec_fail(&d, CONCH_ERR_CODEC, "%s: expected a JSON object, got %s",
             desc->name, jtype(root));
  } else {
    m = new_message(&d, desc);
    if (m != NULL && dec_msg(&d, NULL, NULL, desc, root, m, 0) != 0) {
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
