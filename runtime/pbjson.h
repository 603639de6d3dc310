/* proto3 JSON for protobuf-c messages, driven by their descriptors: the
   JSON codec of CONNECT_PROTOCOL.md 0 (application/json,
   application/connect+json), written and read the way connect-go's codec
   (protojson, with DiscardUnknown) does.

   protobuf-c keeps neither json_name nor a map flag in its descriptors, so
   both are derived: json names by protoc's rule (drop each '_' and upper-case
   the letter after it; a [json_name = ...] option is not seen), and a map
   field is a repeated field of the nested message "<CamelName>Entry" with
   fields key = 1 and value = 2, which is how protoc lowers map<K, V>.

   Well-known types (google.protobuf.*) have JSON forms of their own
   (Timestamp as an RFC 3339 string, Struct as a bare object, wrappers as
   their value, ...).  They are refused with CONCH_ERR_UNSUPPORTED instead of
   being written in the generic form, except google.protobuf.Empty, whose
   special form is the generic one. */
#ifndef CONCH_PBJSON_H
#define CONCH_PBJSON_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/mem.h>

#include "buf.h"

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
   nesting beyond 1000 levels); CONCH_ERR_UNSUPPORTED for a well-known type.
   On error |out| holds what it held before.  |err| (|errlen| bytes, may be
   0) gets a NUL-terminated message on every error. */
int conch__pbjson_encode(const ProtobufCMessage *m, const conch_mem *mem,
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
   Returns 0; CONCH_ERR_NOMEM; CONCH_ERR_CODEC with the reason in |err|;
   CONCH_ERR_UNSUPPORTED for a well-known type.  On error |*out| is NULL.
   |err| (|errlen| bytes, may be 0) gets a NUL-terminated message on every
   error. */
int conch__pbjson_decode(const ProtobufCMessageDescriptor *d,
                         const uint8_t *json, size_t len,
                         ProtobufCAllocator *alloc, ProtobufCMessage **out,
                         char *err, size_t errlen);

#endif
