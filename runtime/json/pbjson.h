/* proto3 JSON for protobuf-c messages, driven by their descriptors: the
   JSON codec of CONNECT_PROTOCOL.md 0 (application/json,
   application/connect+json), written and read the way connect-go's codec
   (protojson, with DiscardUnknown) does.

   protobuf-c keeps neither json_name nor a map flag in its descriptors, so
   both are derived: json names by protoc's rule (drop each '_' and upper-case
   the letter after it; a [json_name = ...] option is not seen), and a map
   field is a repeated field of the nested message "<CamelName>Entry" with
   fields key = 1 and value = 2, which is how protoc lowers map<K, V>.

   Well-known types (google.protobuf.*) take their own JSON forms, as
   protojson writes and reads them: Timestamp as an RFC 3339 string, Duration
   as "1.5s", the wrappers as their value, Struct, Value and ListValue as
   arbitrary JSON, NullValue as null, FieldMask as comma-joined lowerCamelCase
   paths, Empty as {}, and Any as {"@type": url, ...fields} (a well-known
   payload: {"@type": url, "value": <its form>}).  They are recognised by
   full name and field numbers, so any compiled copy of them works.  Other
   google.protobuf.* messages (Api, Type, descriptor.proto, ...) take the
   generic form, as in protojson. */
#ifndef CONCH_PBJSON_H
#define CONCH_PBJSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/features.h>
#include <conch/mem.h>
#include <conch/status.h>

#include "buf.h"
#include "json.h"

/* Options of the _ex functions.  Zero-initialise; NULL options are all
   zero. */
typedef struct conch_pbjson_opts {
  /* Finds the message type of a google.protobuf.Any: |type_url| is the
     Any's whole type_url ("type.googleapis.com/pkg.Msg"); return its
     descriptor, or NULL when unknown.  May be NULL.  Well-known types need
     no resolver: when it is NULL or returns NULL, a URL whose last '/'
     is followed by the name of a well-known type resolves to a built-in
     descriptor.  A URL that resolves to nothing is an error (an Any cannot
     be written or read without its type).  The descriptor must stay valid
     for the call. */
  const ProtobufCMessageDescriptor *(*resolve)(const char *type_url,
                                               void *user_data);
  void *user_data; /* passed to |resolve| */
} conch_pbjson_opts;

#if CONCH_WITH_JSON
/* Appends the canonical proto3 JSON of |m| to |out|, grown with |mem| (NULL:
   the C library).  Fields without presence are left out at their default;
   64-bit integers are strings; bytes are standard base64 with padding; enums
   are names (numbers when unknown); NaN and the infinities are "NaN",
   "Infinity", "-Infinity"; floats and doubles take the shortest form that
   reads back exactly, in protojson's notation (1e+21, 1.5e-7); map keys are
   sorted (of a key repeated in the entries, the last entry wins).
   Differences from protojson's bytes, not from its meaning: fields go in
   field-number order (protojson: declaration order); negative zero is the
   default where there is no presence (as protobuf-c packs it) and is
   written "-0.0" elsewhere (protojson: "-0", which jansson would read back
   as the integer 0); no random spaces (protojson adds some on purpose).
   Returns 0; CONCH_ERR_NOMEM; CONCH_ERR_CODEC with the reason in |err| (a
   string that is not UTF-8, a NULL element of a repeated message field,
   nesting beyond 1000 levels).
   On error |out| holds what it held before.  |err| (|errlen| bytes, may be
   0) gets a NUL-terminated message on every error.
   Same as conch__pbjson_encode_ex() with NULL options. */
int conch__pbjson_encode(const ProtobufCMessage *m, const conch_mem *mem,
                         conch_buf *out, char *err, size_t errlen);

/* conch__pbjson_encode() with |opts| (NULL: none).  Well-known types in
   |m| are refused with CONCH_ERR_CODEC and a reason when protojson refuses
   them: a Timestamp out of 0001-01-01..9999-12-31 or with nanos out of
   [0, 1e9), a Duration beyond +-315576000000 s, with |nanos| >= 1e9 or
   signs that differ, a Value with no kind or a NaN or infinite number, a
   FieldMask path that is not a dotted identifier or does not survive the
   lowerCamelCase round trip, an Any with a value but no type_url, whose
   type does not resolve, or whose value does not unpack as that type.
   An Any's value is unpacked with |mem|. */
int conch__pbjson_encode_ex(const ProtobufCMessage *m,
                            const conch_pbjson_opts *opts, const conch_mem *mem,
                            conch_buf *out, char *err, size_t errlen);

/* Parses |len| bytes of JSON as a |d| message into |*out|, allocated with
   |alloc| (NULL: protobuf-c's default, the C library) the way
   protobuf_c_message_unpack() allocates, so that
   protobuf_c_message_free_unpacked(*out, alloc) frees it all.
   Accepts json names and original field names; null as the default;
   numbers as JSON numbers or as strings in JSON number syntax (integers
   must be integral and in range; exponent and fraction forms are taken
   when the value is exact); "NaN", "Infinity", "-Infinity"; enum names or
   numbers; bytes in standard or URL-safe base64, padded or not.  Unknown
   fields and unknown enum names are ignored (connect-go's DiscardUnknown).
   Errors, each naming the field: JSON of the wrong type, a field given
   twice (also under both names), two members of one oneof, a missing
   proto2 required field, nesting beyond 1000 levels.
   Stricter than protojson, because jansson parses the text first: a key
   repeated in any object is refused (unknown fields included); \u0000 in
   a string is refused (a protobuf-c string ends at NUL); a real number
   outside the double range is refused anywhere; an integer field given a
   JSON number that has a fraction or exponent and lies above 2^53 is
   refused (jansson holds it as a double; quote it to be exact); a float
   field given a JSON number is rounded through double.
   Returns 0; CONCH_ERR_NOMEM; CONCH_ERR_CODEC with the reason in |err|.
   On error |*out| is NULL.  |err| (|errlen| bytes, may be 0) gets a
   NUL-terminated message on every error.
   Same as conch__pbjson_decode_ex() with NULL options. */
int conch__pbjson_decode(const ProtobufCMessageDescriptor *d,
                         const uint8_t *json, size_t len,
                         ProtobufCAllocator *alloc, ProtobufCMessage **out,
                         char *err, size_t errlen);

/* conch__pbjson_decode() with |opts| (NULL: none).  |d| may itself be a
   well-known type, whose JSON need not be an object ("1.5s").
   Well-known types are read as protojson reads them: null for a Value
   field (or a NullValue one) is a Value holding null_value, not "unset";
   a Timestamp is YYYY-MM-DDTHH:MM:SS[.1-9 digits](Z|+HH:MM|-HH:MM) within
   0001-01-01T00:00:00Z..9999-12-31T23:59:59.999999999Z; a Duration is
   [+-]digits[.0-9 digits]s within +-315576000000 s; an Any with no
   "@type" member is an empty Any (DiscardUnknown), and one whose type does
   not resolve is an error naming the URL; an Any's value is packed with
   |alloc|.  Refused where protojson takes them: Go's time.Parse also takes
   a one-digit hour, a ',' before the fraction and a zone hour of 24 (its
   fallback parser); a FieldMask is trimmed of ASCII white space only (Go:
   Unicode). */
int conch__pbjson_decode_ex(const ProtobufCMessageDescriptor *d,
                            const uint8_t *json, size_t len,
                            const conch_pbjson_opts *opts,
                            ProtobufCAllocator *alloc, ProtobufCMessage **out,
                            char *err, size_t errlen);

#else
/* Built without the JSON codec (CONCH_WITH_JSON=OFF): pbjson*.c are not
   compiled and nothing reaches these (conch_client_opts_set_codec()
   refuses JSON, the server answers a JSON request 415 and a GET with
   encoding=json the same); they keep the callers linking. */
static inline int conch__pbjson_absent(char *err, size_t errlen) {
  if (errlen > 0) {
    static const char msg[] = "built without the JSON codec";
    size_t n = sizeof(msg) < errlen ? sizeof(msg) : errlen;
    memcpy(err, msg, n - 1);
    err[n - 1] = '\0';
  }
  return CONCH_ERR_UNSUPPORTED;
}
static inline int conch__pbjson_encode(const ProtobufCMessage *m,
                                       const conch_mem *mem, conch_buf *out,
                                       char *err, size_t errlen) {
  (void)m;
  (void)mem;
  (void)out;
  return conch__pbjson_absent(err, errlen);
}
static inline int conch__pbjson_encode_ex(const ProtobufCMessage *m,
                                          const conch_pbjson_opts *opts,
                                          const conch_mem *mem, conch_buf *out,
                                          char *err, size_t errlen) {
  (void)m;
  (void)opts;
  (void)mem;
  (void)out;
  return conch__pbjson_absent(err, errlen);
}
static inline int conch__pbjson_decode(const ProtobufCMessageDescriptor *d,
                                       const uint8_t *json, size_t len,
                                       ProtobufCAllocator *alloc,
                                       ProtobufCMessage **out, char *err,
                                       size_t errlen) {
  (void)d;
  (void)json;
  (void)len;
  (void)alloc;
  *out = NULL;
  return conch__pbjson_absent(err, errlen);
}
static inline int conch__pbjson_decode_ex(const ProtobufCMessageDescriptor *d,
                                          const uint8_t *json, size_t len,
                                          const conch_pbjson_opts *opts,
                                          ProtobufCAllocator *alloc,
                                          ProtobufCMessage **out, char *err,
                                          size_t errlen) {
  (void)opts;
  return conch__pbjson_decode(d, json, len, alloc, out, err, errlen);
}
#endif

/* JSON text is parsed into a tree (jansson) that costs up to ~50 times the
   text ("[[],[],...]" is a node per 3 bytes), so no text with more values
   than this is parsed: callers of conch__pbjson_decode*() count them first
   (conch__json_values(), json.h).  The Connect error and end-stream JSON
   is read without a tree (json.h) and needs no such limit. */
#define CONCH_JSON_MAX_VALUES (256 * 1024)

#endif
