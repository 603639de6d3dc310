/* The well-known types of proto3 JSON (pbjson.h): recognising them, the
   built-in descriptors that Any's payloads resolve to, and the text forms
   of Timestamp and Duration.  Their JSON encoding and decoding sit with the
   rest of each direction, in pbjson_enc.c and pbjson_dec.c. */
#include "pbjson_int.h"

#include <stdio.h>
#include <string.h>

/* ---- Well-known types ----------------------------------------------------

   Recognised by full name, their fields looked up by number and type, so
   that any compiled copy of the google/protobuf protos works (protobuf-c ships
   none).  Any's payloads of these types must resolve without the caller's
   help, so the runtime carries descriptors of its own for them below,
   shaped as protoc-c would generate them. */

pbj_wkt conch__pbj_wkt_of(const ProtobufCMessageDescriptor *d) {
  static const struct {
    const char *name;
    pbj_wkt kind;
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

/* Field |id| of |d| if it has type |t| (ANY_SCALAR: any but message) and is
   repeated or not as |repeated| says; else NULL. */
const ProtobufCFieldDescriptor *
conch__pbj_wkt_field(const ProtobufCMessageDescriptor *d, uint32_t id, int t,
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

int conch__pbj_is_null_enum(const ProtobufCEnumDescriptor *ed) {
  return ed != NULL && ed->name != NULL &&
         strcmp(ed->name, "google.protobuf.NullValue") == 0;
}

/* Fields that take JSON null as a value (protojson's isKnownValue and
   isNullValue): google.protobuf.Value and google.protobuf.NullValue. */
int conch__pbj_null_ok(const ProtobufCFieldDescriptor *f) {
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    return conch__pbj_wkt_of(f->descriptor) == WKT_VALUE;
  }
  return f->type == PROTOBUF_C_TYPE_ENUM &&
         conch__pbj_is_null_enum(f->descriptor);
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
const ProtobufCMessageDescriptor *
conch__pbj_resolve_url(const conch_pbjson_opts *o, const char *url) {
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

/* Days since 1970-01-01 of a proleptic Gregorian date, and back (Howard
   Hinnant's algorithms). */
int64_t conch__pbj_days_from_civil(int64_t y, unsigned m, unsigned d) {
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

void conch__pbj_civil_from_days(int64_t z, int64_t *y, unsigned *m,
                                unsigned *d) {
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
int conch__pbj_valid_full_name(const char *s, size_t n) {
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

/* ".5", ".500001": 0, 3, 6 or 9 digits, as protojson writes them. */
size_t conch__pbj_put_nanos(char *p, size_t cap, int32_t n) {
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
int conch__pbj_parse_timestamp(const char *s, size_t n, int64_t *secs,
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
  *secs = conch__pbj_days_from_civil(y, (unsigned)mo, (unsigned)dd) * 86400 +
          h * 3600 + mi * 60 + sec - off;
  *nanos = ns;
  return 0;
}

/* protojson's parseDuration: [+-](0|[1-9][0-9]*)?(.[0-9]{0,9})?s, where
   the integer part or the dot must be there; the sign applies to both. */
int conch__pbj_parse_duration(const char *s, size_t n, int64_t *secs,
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
