/* proto3 JSON for protobuf-c messages (pbjson.h): an encoder writing into a
   conch_buf, and a decoder over jansson's parse tree that builds messages
   the way protobuf_c_message_unpack() does.  Behaviour follows protojson
   (encoding/protojson of protobuf-go), which connect-go and so envd use;
   where it and protobuf-es disagree, protojson wins.  The well-known types
   (their own JSON forms, and built-in descriptors for Any's payloads) take
   a third of the file; they would move to a pbjson_wkt.c of their own. */
#include "pbjson.h"

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

/* ---- Well-known types ----------------------------------------------------

   Recognised by full name, their fields looked up by number and type, so
   that any compiled copy of the google/protobuf protos works (protobuf-c ships
   none).  Any's payloads of these types must resolve without the caller's
   help, so the runtime carries descriptors of its own for them below,
   shaped as protoc-c would generate them. */

typedef enum wkt {
  WKT_NONE = 0,
  WKT_ANY,
  WKT_TIMESTAMP,
  WKT_DURATION,
  WKT_WRAPPER,
  WKT_STRUCT,
  WKT_VALUE,
  WKT_LIST,
  WKT_FIELDMASK,
  WKT_EMPTY
} wkt;

static wkt wkt_of(const ProtobufCMessageDescriptor *d) {
  static const struct {
    const char *name;
    wkt kind;
  } names[] = {{"Any", WKT_ANY},
               {"Timestamp", WKT_TIMESTAMP},
               {"Duration", WKT_DURATION},
               {"DoubleValue", WKT_WRAPPER},
               {"FloatValue", WKT_WRAPPER},
               {"Int64Value", WKT_WRAPPER},
               {"UInt64Value", WKT_WRAPPER},
               {"Int32Value", WKT_WRAPPER},
               {"UInt32Value", WKT_WRAPPER},
               {"BoolValue", WKT_WRAPPER},
               {"StringValue", WKT_WRAPPER},
               {"BytesValue", WKT_WRAPPER},
               {"Struct", WKT_STRUCT},
               {"Value", WKT_VALUE},
               {"ListValue", WKT_LIST},
               {"FieldMask", WKT_FIELDMASK},
               {"Empty", WKT_EMPTY}};
  size_t i;

  if (d == NULL || d->name == NULL ||
      strncmp(d->name, "google.protobuf.", 16) != 0) {
    return WKT_NONE;
  }
  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcmp(d->name + 16, names[i].name) == 0) {
      return names[i].kind;
    }
  }
  return WKT_NONE;
}

#define ANY_SCALAR (-1)

/* Field |id| of |d| if it has type |t| (ANY_SCALAR: any but message) and is
   repeated or not as |repeated| says; else NULL. */
static const ProtobufCFieldDescriptor *
wkt_field(const ProtobufCMessageDescriptor *d, uint32_t id, int t,
          int repeated) {
  unsigned i;

  for (i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];

    if (f->id != id) {
      continue;
    }
    if ((t == ANY_SCALAR ? f->type == PROTOBUF_C_TYPE_MESSAGE
                         : (int)f->type != t) ||
        (f->label == PROTOBUF_C_LABEL_REPEATED) != (repeated != 0)) {
      return NULL;
    }
    return f;
  }
  return NULL;
}

static int is_null_enum(const ProtobufCEnumDescriptor *ed) {
  return ed != NULL && ed->name != NULL &&
         strcmp(ed->name, "google.protobuf.NullValue") == 0;
}

/* Fields that take JSON null as a value (protojson's isKnownValue and
   isNullValue): google.protobuf.Value and google.protobuf.NullValue. */
static int null_ok(const ProtobufCFieldDescriptor *f) {
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    return wkt_of(f->descriptor) == WKT_VALUE;
  }
  return f->type == PROTOBUF_C_TYPE_ENUM && is_null_enum(f->descriptor);
}

/* Built-in descriptors.  Proto3 strings default to NULL (protoc-c: the
   empty string); everything that reads them takes both. */
#define B_FIELD(nm, num, lab, ty, q, o, desc, fl)                              \
  {                                                                            \
    nm, num, PROTOBUF_C_LABEL_##lab, PROTOBUF_C_TYPE_##ty, q, o, desc, NULL,   \
        fl, 0, NULL, NULL                                                      \
  }
#define B_MSG(var, full, sname, type, nf, flds, sorted, nr, ranges)            \
  static const ProtobufCMessageDescriptor var = {                              \
      PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,                                    \
      full,                                                                    \
      sname,                                                                   \
      sname,                                                                   \
      "google.protobuf",                                                       \
      sizeof(type),                                                            \
      nf,                                                                      \
      flds,                                                                    \
      sorted,                                                                  \
      nr,                                                                      \
      ranges,                                                                  \
      NULL,                                                                    \
      NULL,                                                                    \
      NULL,                                                                    \
      NULL}

static const unsigned b_sorted0[] = {0};
static const unsigned b_sorted01[] = {0, 1};
static const unsigned b_sorted10[] = {1, 0};
static const ProtobufCIntRange b_ranges0[] = {{0, 0}};
static const ProtobufCIntRange b_ranges1[] = {{1, 0}, {0, 1}};
static const ProtobufCIntRange b_ranges2[] = {{1, 0}, {0, 2}};

#define B_WRAPPER(var, sname, ctype, ty)                                       \
  typedef struct {                                                             \
    ProtobufCMessage base;                                                     \
    ctype value;                                                               \
  } var##_t;                                                                   \
  static const ProtobufCFieldDescriptor var##_f[] = {                          \
      B_FIELD("value", 1, NONE, ty, 0, offsetof(var##_t, value), NULL, 0)};    \
  B_MSG(var, "google.protobuf." sname, sname, var##_t, 1, var##_f, b_sorted0,  \
        1, b_ranges1)

B_WRAPPER(b_double, "DoubleValue", double, DOUBLE);
B_WRAPPER(b_float, "FloatValue", float, FLOAT);
B_WRAPPER(b_int64, "Int64Value", int64_t, INT64);
B_WRAPPER(b_uint64, "UInt64Value", uint64_t, UINT64);
B_WRAPPER(b_int32, "Int32Value", int32_t, INT32);
B_WRAPPER(b_uint32, "UInt32Value", uint32_t, UINT32);
B_WRAPPER(b_bool, "BoolValue", protobuf_c_boolean, BOOL);
B_WRAPPER(b_string, "StringValue", char *, STRING);
B_WRAPPER(b_bytes, "BytesValue", ProtobufCBinaryData, BYTES);

typedef struct {
  ProtobufCMessage base;
  int64_t seconds;
  int32_t nanos;
} b_time_t;
static const ProtobufCFieldDescriptor b_time_f[] = {
    B_FIELD("seconds", 1, NONE, INT64, 0, offsetof(b_time_t, seconds), NULL, 0),
    B_FIELD("nanos", 2, NONE, INT32, 0, offsetof(b_time_t, nanos), NULL, 0)};
B_MSG(b_timestamp, "google.protobuf.Timestamp", "Timestamp", b_time_t, 2,
      b_time_f, b_sorted10, 1, b_ranges2);
B_MSG(b_duration, "google.protobuf.Duration", "Duration", b_time_t, 2, b_time_f,
      b_sorted10, 1, b_ranges2);

typedef struct {
  ProtobufCMessage base;
  char *type_url;
  ProtobufCBinaryData value;
} b_any_t;
static const ProtobufCFieldDescriptor b_any_f[] = {
    B_FIELD("type_url", 1, NONE, STRING, 0, offsetof(b_any_t, type_url), NULL,
            0),
    B_FIELD("value", 2, NONE, BYTES, 0, offsetof(b_any_t, value), NULL, 0)};
B_MSG(b_any, "google.protobuf.Any", "Any", b_any_t, 2, b_any_f, b_sorted01, 1,
      b_ranges2);

typedef struct {
  ProtobufCMessage base;
  size_t n;
  void *arr;
} b_rep_t; /* FieldMask, Struct and ListValue: one repeated field */
static const ProtobufCFieldDescriptor b_mask_f[] = {
    B_FIELD("paths", 1, REPEATED, STRING, offsetof(b_rep_t, n),
            offsetof(b_rep_t, arr), NULL, 0)};
B_MSG(b_fieldmask, "google.protobuf.FieldMask", "FieldMask", b_rep_t, 1,
      b_mask_f, b_sorted0, 1, b_ranges1);
B_MSG(b_empty, "google.protobuf.Empty", "Empty", ProtobufCMessage, 0, NULL,
      NULL, 0, b_ranges0);

static const ProtobufCEnumValue b_null_v[] = {
    {"NULL_VALUE", "GOOGLE_PROTOBUF__NULL_VALUE__NULL_VALUE", 0}};
static const ProtobufCEnumValueIndex b_null_by_name[] = {{"NULL_VALUE", 0}};
static const ProtobufCIntRange b_null_ranges[] = {{0, 0}, {0, 1}};
static const ProtobufCEnumDescriptor b_null = {
    PROTOBUF_C__ENUM_DESCRIPTOR_MAGIC,
    "google.protobuf.NullValue",
    "NullValue",
    "Google__Protobuf__NullValue",
    "google.protobuf",
    1,
    b_null_v,
    1,
    b_null_by_name,
    1,
    b_null_ranges,
    NULL,
    NULL,
    NULL,
    NULL};

typedef struct {
  ProtobufCMessage base;
  uint32_t kind_case;
  union {
    int32_t null_value;
    double number_value;
    char *string_value;
    protobuf_c_boolean bool_value;
    ProtobufCMessage *struct_value;
    ProtobufCMessage *list_value;
  } u;
} b_value_t;
typedef struct {
  ProtobufCMessage base;
  char *key;
  ProtobufCMessage *value;
} b_entry_t;

static const ProtobufCMessageDescriptor b_struct;
static const ProtobufCMessageDescriptor b_value;
static const ProtobufCMessageDescriptor b_list;

#define B_KIND(nm, num, ty, desc)                                              \
  B_FIELD(nm, num, NONE, ty, offsetof(b_value_t, kind_case),                   \
          offsetof(b_value_t, u), desc, PROTOBUF_C_FIELD_FLAG_ONEOF)
static const ProtobufCFieldDescriptor b_value_f[] = {
    B_KIND("null_value", 1, ENUM, &b_null),
    B_KIND("number_value", 2, DOUBLE, NULL),
    B_KIND("string_value", 3, STRING, NULL),
    B_KIND("bool_value", 4, BOOL, NULL),
    B_KIND("struct_value", 5, MESSAGE, &b_struct),
    B_KIND("list_value", 6, MESSAGE, &b_list)};
static const unsigned b_value_sorted[] = {3, 5, 0, 1, 2, 4};
static const ProtobufCIntRange b_ranges6[] = {{1, 0}, {0, 6}};
B_MSG(b_value, "google.protobuf.Value", "Value", b_value_t, 6, b_value_f,
      b_value_sorted, 1, b_ranges6);

static const ProtobufCFieldDescriptor b_entry_f[] = {
    B_FIELD("key", 1, NONE, STRING, 0, offsetof(b_entry_t, key), NULL, 0),
    B_FIELD("value", 2, NONE, MESSAGE, 0, offsetof(b_entry_t, value), &b_value,
            0)};
B_MSG(b_entry, "google.protobuf.Struct.FieldsEntry", "FieldsEntry", b_entry_t,
      2, b_entry_f, b_sorted01, 1, b_ranges2);
static const ProtobufCFieldDescriptor b_struct_f[] = {
    B_FIELD("fields", 1, REPEATED, MESSAGE, offsetof(b_rep_t, n),
            offsetof(b_rep_t, arr), &b_entry, 0)};
B_MSG(b_struct, "google.protobuf.Struct", "Struct", b_rep_t, 1, b_struct_f,
      b_sorted0, 1, b_ranges1);
static const ProtobufCFieldDescriptor b_list_f[] = {
    B_FIELD("values", 1, REPEATED, MESSAGE, offsetof(b_rep_t, n),
            offsetof(b_rep_t, arr), &b_value, 0)};
B_MSG(b_list, "google.protobuf.ListValue", "ListValue", b_rep_t, 1, b_list_f,
      b_sorted0, 1, b_ranges1);

/* The descriptor of an Any's |url|: the caller's resolver first, then the
   built-in well-known types by the name after the last '/' (as protobuf-go
   and protobuf-es read type URLs). */
static const ProtobufCMessageDescriptor *resolve_url(const conch_pbjson_opts *o,
                                                     const char *url) {
  static const ProtobufCMessageDescriptor *const builtin[] = {
      &b_any,    &b_timestamp, &b_duration, &b_double,    &b_float,  &b_int64,
      &b_uint64, &b_int32,     &b_uint32,   &b_bool,      &b_string, &b_bytes,
      &b_struct, &b_value,     &b_list,     &b_fieldmask, &b_empty};
  const ProtobufCMessageDescriptor *d = NULL;
  const char *name = strrchr(url, '/');
  size_t i;

  if (o != NULL && o->resolve != NULL) {
    d = o->resolve(url, o->user_data);
  }
  name = name != NULL ? name + 1 : url;
  for (i = 0; d == NULL && i < sizeof(builtin) / sizeof(builtin[0]); i++) {
    if (strcmp(builtin[i]->name, name) == 0) {
      d = builtin[i];
    }
  }
  return d;
}

/* Seconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z; the largest
   Duration, 10000 years. */
#define TS_MIN INT64_C(-62135596800)
#define TS_MAX INT64_C(253402300799)
#define DUR_MAX INT64_C(315576000000)

/* Days since 1970-01-01 of a proleptic Gregorian date, and back (Howard
   Hinnant's algorithms). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  int64_t era;
  unsigned yoe;
  unsigned doy;
  unsigned doe;

  y -= m <= 2;
  era = (y >= 0 ? y : y - 399) / 400;
  yoe = (unsigned)(y - era * 400);
  doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
  int64_t era;
  unsigned doe;
  unsigned yoe;
  unsigned doy;
  unsigned mp;

  z += 719468;
  era = (z >= 0 ? z : z - 146096) / 146097;
  doe = (unsigned)(z - era * 146097);
  yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

/* Whether |s| is a protobuf full name: identifiers joined by dots. */
static int valid_full_name(const char *s, size_t n) {
  size_t i = 0;

  for (;;) {
    if (i >= n || !((s[i] >= 'a' && s[i] <= 'z') ||
                    (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_')) {
      return 0;
    }
    i++;
    while (i < n &&
           ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
            (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) {
      i++;
    }
    if (i == n) {
      return 1;
    }
    if (s[i] != '.') {
      return 0;
    }
    i++;
  }
}

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

/* Length of the UTF-8 sequence at |s| (|n| bytes left), or 0 when it is
   not valid UTF-8: overlong forms, surrogates and code points past
   U+10FFFF are invalid, as in Go's utf8 package. */
size_t conch__utf8_seq(const unsigned char *s, size_t n) {
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
  char chunk[64];
  size_t n = 0;
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

    if (is_null_enum(ed)) {
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

static int enc_fields(enc *e, const ProtobufCMessage *m,
                      const ProtobufCMessageDescriptor *d, unsigned depth,
                      int first) {
  unsigned i;

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

  return m != NULL ? member(m, f->offset) : (const void *)&zero;
}

static int layout_fail(enc *e, const ProtobufCMessageDescriptor *d) {
  return enc_fail(e, CONCH_ERR_CODEC,
                  "%s: the descriptor does not have the well-known layout",
                  d->name);
}

/* ".5", ".500001": 0, 3, 6 or 9 digits, as protojson writes them. */
static size_t put_nanos(char *p, size_t cap, int32_t n) {
  if (n == 0) {
    return 0;
  }
  if (n % 1000000 == 0) {
    return (size_t)snprintf(p, cap, ".%03d", (int)(n / 1000000));
  }
  if (n % 1000 == 0) {
    return (size_t)snprintf(p, cap, ".%06d", (int)(n / 1000));
  }
  return (size_t)snprintf(p, cap, ".%09d", (int)n);
}

/* Timestamp as "1972-01-01T10:00:20.021Z", Duration as "-1.5s". */
static int enc_time(enc *e, const ProtobufCMessage *m,
                    const ProtobufCMessageDescriptor *d, wkt k) {
  const ProtobufCFieldDescriptor *sf =
      wkt_field(d, 1, PROTOBUF_C_TYPE_INT64, 0);
  const ProtobufCFieldDescriptor *nf =
      wkt_field(d, 2, PROTOBUF_C_TYPE_INT32, 0);
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
    civil_from_days(days, &y, &mo, &dd);
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
  o += put_nanos(buf + o, sizeof(buf) - o, n);
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
        !isfinite(*(const double *)member(m, f->offset))) {
      return enc_fail(e, CONCH_ERR_CODEC, "%s.%s: %g cannot be written as JSON",
                      d->name, f->name, *(const double *)member(m, f->offset));
    }
    return enc_value(e, d, f, member(m, f->offset), depth);
  }
  return enc_fail(e, CONCH_ERR_CODEC, "%s: none of the oneof fields is set",
                  d->name);
}

/* FieldMask: the paths in lowerCamelCase, joined by commas, when that form
   reads back as them (protojson's rule). */
static int enc_fieldmask(enc *e, const ProtobufCMessage *m,
                         const ProtobufCMessageDescriptor *d) {
  const ProtobufCFieldDescriptor *f =
      wkt_field(d, 1, PROTOBUF_C_TYPE_STRING, 1);
  size_t n;
  char *const *arr;
  size_t i;

  if (f == NULL) {
    return layout_fail(e, d);
  }
  n = m != NULL ? *(const size_t *)member(m, f->quantifier_offset) : 0;
  arr = m != NULL ? *(char *const *const *)member(m, f->offset) : NULL;
  if (put(e, "\"", 1) != 0) {
    return -1;
  }
  for (i = 0; arr != NULL && i < n; i++) {
    const char *p = arr[i] != NULL ? arr[i] : "";
    size_t j;

    if (!valid_full_name(p, strlen(p))) {
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
      wkt_field(d, 1, PROTOBUF_C_TYPE_STRING, 0);
  const ProtobufCFieldDescriptor *vf =
      wkt_field(d, 2, PROTOBUF_C_TYPE_BYTES, 0);
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
  pd = resolve_url(e->opts, url);
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
  if (rv == 0 && wkt_of(pd) != WKT_NONE) {
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
                   const ProtobufCMessageDescriptor *d, wkt k, unsigned depth) {
  const ProtobufCFieldDescriptor *f;

  switch (k) {
  case WKT_ANY:
    return enc_any(e, m, d, depth);
  case WKT_TIMESTAMP:
  case WKT_DURATION:
    return enc_time(e, m, d, k);
  case WKT_WRAPPER:
    f = wkt_field(d, 1, ANY_SCALAR, 0);
    if (f == NULL) {
      return layout_fail(e, d);
    }
    return enc_value(e, d, f, fval(m, f), depth);
  case WKT_STRUCT:
    f = wkt_field(d, 1, PROTOBUF_C_TYPE_MESSAGE, 1);
    if (f == NULL || !is_map(d, f)) {
      return layout_fail(e, d);
    }
    return m != NULL ? enc_map(e, d, f, m, depth) : put(e, "{}", 2);
  case WKT_LIST:
    f = wkt_field(d, 1, PROTOBUF_C_TYPE_MESSAGE, 1);
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
  wkt k = wkt_of(d);

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

    if (json_is_null(v) && is_null_enum(f->descriptor)) {
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

    if (!json_is_object(v) &&
        (wkt_of(sd) == WKT_NONE || wkt_of(sd) == WKT_EMPTY)) {
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

    if (json_is_null(el) && !null_ok(f)) {
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
    if (json_is_null(val) && !null_ok(&ed->fields[1])) {
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
    if (json_is_null(val) && !null_ok(f)) {
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

/* |n| digits at |s| as a number in [lo, hi], or -1. */
static int digits(const char *s, int n, int lo, int hi) {
  int v = 0;
  int i;

  for (i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') {
      return -1;
    }
    v = v * 10 + (s[i] - '0');
  }
  return v >= lo && v <= hi ? v : -1;
}

/* RFC 3339 as protojson takes it (Go's time.Parse with RFC3339Nano, at
   most 9 fraction digits): YYYY-MM-DDTHH:MM:SS[.f](Z|+HH:MM|-HH:MM). */
static int parse_timestamp(const char *s, size_t n, int64_t *secs,
                           int32_t *nanos) {
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int y, mo, dd, h, mi, sec;
  int32_t ns = 0;
  size_t i = 19;
  int64_t off = 0;

  if (n < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
      s[16] != ':') {
    return -1;
  }
  y = digits(s, 4, 0, 9999);
  mo = digits(s + 5, 2, 1, 12);
  dd = digits(s + 8, 2, 1, 31);
  h = digits(s + 11, 2, 0, 23);
  mi = digits(s + 14, 2, 0, 59);
  sec = digits(s + 17, 2, 0, 59);
  if (y < 0 || mo < 0 || dd < 0 || h < 0 || mi < 0 || sec < 0 ||
      dd > mdays[mo - 1] ||
      (mo == 2 && dd == 29 &&
       !(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)))) {
    return -1;
  }
  if (s[i] == '.') {
    int k = 0;

    i++;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      if (k == 9) {
        return -1;
      }
      ns = ns * 10 + (s[i] - '0');
      k++;
      i++;
    }
    if (k == 0) {
      return -1;
    }
    for (; k < 9; k++) {
      ns *= 10;
    }
  }
  if (i + 1 == n && s[i] == 'Z') {
    off = 0;
  } else if (i + 6 == n && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    int oh = digits(s + i + 1, 2, 0, 23);
    int om = digits(s + i + 4, 2, 0, 59);

    if (oh < 0 || om < 0) {
      return -1;
    }
    off = (int64_t)(oh * 60 + om) * 60 * (s[i] == '-' ? -1 : 1);
  } else {
    return -1;
  }
  *secs = days_from_civil(y, (unsigned)mo, (unsigned)dd) * 86400 + h * 3600 +
          mi * 60 + sec - off;
  *nanos = ns;
  return 0;
}

/* protojson's parseDuration: [+-](0|[1-9][0-9]*)?(.[0-9]{0,9})?s, where
   the integer part or the dot must be there; the sign applies to both. */
static int parse_duration(const char *s, size_t n, int64_t *secs,
                          int32_t *nanos) {
  size_t i = 0;
  int neg = 0;
  uint64_t ip = 0;
  int32_t ns = 0;
  int k;

  if (n < 2 || s[n - 1] != 's') {
    return -1;
  }
  n--;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    i++;
  }
  if (i == n) {
    return -1;
  }
  if (s[i] == '0') {
    i++;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      unsigned dgt = (unsigned)(s[i] - '0');

      if (ip > ((uint64_t)INT64_MAX - dgt) / 10) {
        return -1;
      }
      ip = ip * 10 + dgt;
      i++;
    }
  } else if (s[i] != '.') {
    return -1;
  }
  if (i < n) {
    if (s[i] != '.') {
      return -1;
    }
    i++;
    for (k = 0; k < 9 && i < n && s[i] >= '0' && s[i] <= '9'; k++, i++) {
      ns = ns * 10 + (s[i] - '0');
    }
    if (i < n) {
      return -1;
    }
    for (; k < 9; k++) {
      ns *= 10;
    }
  }
  *secs = neg ? -(int64_t)ip : (int64_t)ip;
  *nanos = neg ? -ns : ns;
  return 0;
}

static int dec_time(dec *d, const ProtobufCMessageDescriptor *pmd,
                    const ProtobufCFieldDescriptor *pf,
                    const ProtobufCMessageDescriptor *sd, const json_t *v,
                    ProtobufCMessage *m, wkt k) {
  const ProtobufCFieldDescriptor *sf =
      wkt_field(sd, 1, PROTOBUF_C_TYPE_INT64, 0);
  const ProtobufCFieldDescriptor *nf =
      wkt_field(sd, 2, PROTOBUF_C_TYPE_INT32, 0);
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
    rc = parse_timestamp(json_string_value(v), json_string_length(v), &secs,
                         &nanos);
    if (rc == 0 && (secs < TS_MIN || secs > TS_MAX)) {
      return wkt_fail(d, pmd, pf, "%s out of range (%s)",
                      show(v, buf, sizeof(buf)), sd->name);
    }
  } else {
    rc = parse_duration(json_string_value(v), json_string_length(v), &secs,
                        &nanos);
    if (rc == 0 && (secs < -DUR_MAX || secs > DUR_MAX)) {
      return wkt_fail(d, pmd, pf, "%s out of range (%s)",
                      show(v, buf, sizeof(buf)), sd->name);
    }
  }
  if (rc != 0) {
    return wkt_fail(d, pmd, pf, "invalid %s value %s", sd->name,
                    show(v, buf, sizeof(buf)));
  }
  *(int64_t *)member(m, sf->offset) = secs;
  *(int32_t *)member(m, nf->offset) = nanos;
  return 0;
}

/* FieldMask: "fooBar,baz.qux" becomes the paths foo_bar and baz.qux. */
static int dec_fieldmask(dec *d, const ProtobufCMessageDescriptor *pmd,
                         const ProtobufCFieldDescriptor *pf,
                         const ProtobufCMessageDescriptor *sd, const json_t *v,
                         ProtobufCMessage *m) {
  const ProtobufCFieldDescriptor *f =
      wkt_field(sd, 1, PROTOBUF_C_TYPE_STRING, 1);
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
  count = member(m, f->quantifier_offset);
  arrp = member(m, f->offset);
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
    if (!valid_full_name(p, o)) {
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
  f = wkt_field(sd, id, types[id], 0);
  if (f == NULL || (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) == 0 ||
      (id == 1 && !is_null_enum(f->descriptor)) ||
      (id == 5 && wkt_of(f->descriptor) != WKT_STRUCT) ||
      (id == 6 && wkt_of(f->descriptor) != WKT_LIST)) {
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
      wkt_field(sd, 1, PROTOBUF_C_TYPE_STRING, 0);
  const ProtobufCFieldDescriptor *vf =
      wkt_field(sd, 2, PROTOBUF_C_TYPE_BYTES, 0);
  const ProtobufCMessageDescriptor *pd;
  const json_t *t;
  const json_t *val;
  const char *url;
  ProtobufCMessage *sub;
  ProtobufCBinaryData *bin;
  char *copy;
  size_t n;
  wkt k;
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
  pd = resolve_url(d->opts, url);
  if (pd == NULL) {
    return wkt_fail(d, pmd, pf, "%s: cannot resolve type URL \"%.200s\"",
                    sd->name, url);
  }
  k = wkt_of(pd);
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
    *(char **)member(m, tf->offset) = copy;
    n = protobuf_c_message_get_packed_size(sub);
    bin = member(m, vf->offset);
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
  wkt k = wkt_of(sd);

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
    f = wkt_field(sd, 1, ANY_SCALAR, 0);
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
    f = wkt_field(sd, 1, PROTOBUF_C_TYPE_MESSAGE, 1);
    if (f == NULL || (k == WKT_STRUCT) != is_map(sd, f)) {
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

size_t conch__json_values(const uint8_t *p, size_t n) {
  size_t count = 1;
  size_t i;
  int in_str = 0;

  for (i = 0; i < n; i++) {
    uint8_t ch = p[i];

    if (in_str) {
      if (ch == '\\') {
        i++;
      } else if (ch == '"') {
        in_str = 0;
      }
    } else if (ch == '"') {
      in_str = 1;
    } else if (ch == '[' || ch == '{' || ch == ',' || ch == ':') {
      count++;
    }
  }
  return count;
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
  if (!json_is_object(root) &&
      (wkt_of(desc) == WKT_NONE || wkt_of(desc) == WKT_EMPTY)) {
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
