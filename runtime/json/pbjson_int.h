/* What the parts of the proto3 JSON codec share (pbjson.c: descriptor
   helpers; pbjson_wkt.c: the well-known types; pbjson_enc.c and
   pbjson_dec.c: the two directions).  Private to the runtime. */
#ifndef CONCH_PBJSON_INT_H
#define CONCH_PBJSON_INT_H

#include <stddef.h>
#include <stdint.h>

#include "jsonname.h"
#include "pbjson.h"

/* Message nesting both ways.  Decoding stops at the same depth, so that
   whatever decodes can be encoded again. */
#define MAX_DEPTH 1000

/* The protobuf type's name as .proto spells it ("?" when unknown). */
const char *conch__pbj_type_name(ProtobufCType t);

/* Storage of one value of |t|: a singular field, or a repeated element. */
size_t conch__pbj_elem_size(ProtobufCType t);

static inline void *conch__pbj_member(const ProtobufCMessage *m, unsigned off) {
  return (char *)(uintptr_t)m + off;
}

/* Descriptors built at run time (dynamic.c) keep a [json_name = ...] that
   differs from the derived one: their message descriptor's reserved1 is
   conch__dyn_json_mark, the field's reserved2 the name (protobuf-c reads
   neither; generated descriptors leave them NULL).  In JSON for those, an
   extension's key ("[pkg.ext]") is refused with CONCH_ERR_UNSUPPORTED
   rather than dropped as unknown fields are: the builder does not build
   extensions (conch/dynamic.h). */
extern const char conch__dyn_json_mark[];
static inline int conch__pbj_dynamic(const ProtobufCMessageDescriptor *md) {
  return md->reserved1 == (const void *)conch__dyn_json_mark;
}
static inline const char *
conch__pbj_custom_name(const ProtobufCMessageDescriptor *md,
                       const ProtobufCFieldDescriptor *f) {
  return md->reserved1 == (const void *)conch__dyn_json_mark
             ? (const char *)f->reserved2
             : NULL;
}

/* In a proto2 message built at run time, a field whose JSON name an
   earlier-declared field owns (protojson's ByJSONName) is shadowed: its
   reserved3 is the key it is written with (its proto name where that
   reads back to it), and a key finds it by its proto name only. */
static inline const char *
conch__pbj_shadowed(const ProtobufCMessageDescriptor *md,
                    const ProtobufCFieldDescriptor *f) {
  return md->reserved1 == (const void *)conch__dyn_json_mark
             ? (const char *)f->reserved3
             : NULL;
}

/* Whether the field |f| of |parent| is a map (see pbjson.c). */
int conch__pbj_is_map(const ProtobufCMessageDescriptor *parent,
                      const ProtobufCFieldDescriptor *f);

/* The kind of a map key of type |t|: 0 string, 1 signed, 2 unsigned (and
   bool). */
int conch__pbj_key_kind(ProtobufCType t);

/* ---- Well-known types (pbjson_wkt.c) ---- */

typedef enum pbj_wkt {
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
} pbj_wkt;

/* Which well-known type |d| is, by full name (WKT_NONE: none). */
pbj_wkt conch__pbj_wkt_of(const ProtobufCMessageDescriptor *d);

#define ANY_SCALAR (-1)

/* Field |id| of |d| if it has type |t| (ANY_SCALAR: any but message) and is
   repeated or not as |repeated| says; else NULL. */
const ProtobufCFieldDescriptor *
conch__pbj_wkt_field(const ProtobufCMessageDescriptor *d, uint32_t id, int t,
                     int repeated);

/* Whether |ed| is google.protobuf.NullValue. */
int conch__pbj_is_null_enum(const ProtobufCEnumDescriptor *ed);

/* Fields that take JSON null as a value: google.protobuf.Value and
   google.protobuf.NullValue. */
int conch__pbj_null_ok(const ProtobufCFieldDescriptor *f);

/* The descriptor of an Any's |url|: the caller's resolver first, then the
   built-in well-known types; NULL when neither knows it. */
const ProtobufCMessageDescriptor *
conch__pbj_resolve_url(const conch_pbjson_opts *o, const char *url);

/* Seconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z; the largest
   Duration, 10000 years. */
#define TS_MIN INT64_C(-62135596800)
#define TS_MAX INT64_C(253402300799)
#define DUR_MAX INT64_C(315576000000)

/* Days since 1970-01-01 of a proleptic Gregorian date, and back. */
int64_t conch__pbj_days_from_civil(int64_t y, unsigned m, unsigned d);
void conch__pbj_civil_from_days(int64_t z, int64_t *y, unsigned *m,
                                unsigned *d);

/* Whether |s| (|n| bytes) is a protobuf full name. */
int conch__pbj_valid_full_name(const char *s, size_t n);

/* The fraction of a Timestamp or Duration as protojson writes it (".5",
   ".500001": 0, 3, 6 or 9 digits) into |p|; returns its length. */
size_t conch__pbj_put_nanos(char *p, size_t cap, int32_t n);

/* RFC 3339 and "1.5s" as protojson reads them; 0 or -1. */
int conch__pbj_parse_timestamp(const char *s, size_t n, int64_t *secs,
                               int32_t *nanos);
int conch__pbj_parse_duration(const char *s, size_t n, int64_t *secs,
                              int32_t *nanos);

#endif
