/* A JSON reader without a parse tree, for the JSON every Connect client
   must read whatever its codec: error bodies and end-stream messages
   (status.c).  It stands on nothing but the C library, so a build without
   the JSON codec (CONCH_WITH_JSON=OFF: no pbjson*.c, no jansson) still
   reads Connect errors.

   Use: conch__json_check() the whole text p[0..n) first; every other
   function assumes text it accepted and takes the offset of a value (its
   first byte, after any white space).  Nothing is allocated: strings are
   decoded into the caller's memory.  Private to the runtime. */
#ifndef CONCH_JSON_H
#define CONCH_JSON_H

#include <stddef.h>
#include <stdint.h>

/* Kinds of value (conch__json_kind). */
enum {
  CONCH_JSON_OBJECT = 1,
  CONCH_JSON_ARRAY,
  CONCH_JSON_STRING,
  CONCH_JSON_NUMBER,
  CONCH_JSON_TRUE,
  CONCH_JSON_FALSE,
  CONCH_JSON_NULL
};

/* Deepest nesting of objects and arrays accepted (jansson's limit). */
#define CONCH_JSON_MAX_DEPTH 2048

/* Whether p[0..n) is one JSON text (RFC 8259): one value with white
   space around it, strings of valid UTF-8 (no lone surrogate escapes, no
   \u0000: a C string could not hold it), numbers in JSON's syntax (any
   magnitude), at most CONCH_JSON_MAX_DEPTH levels.  On success |*root|
   (may be NULL) is the offset of the value.  Returns 0 or
   CONCH_ERR_PROTO.  One pass; nothing allocated. */
int conch__json_check(const uint8_t *p, size_t n, size_t *root);

/* The kind of the value at |at|. */
int conch__json_kind(const uint8_t *p, size_t at);

/* Iterates over the members of the object at |*it| (start with |*it| at
   the object's '{'): returns 1 with the offsets of the next member's key
   (a string) and value and |*it| moved past it, or 0 after the last. */
int conch__json_member(const uint8_t *p, size_t n, size_t *it, size_t *key,
                       size_t *value);

/* The same for the elements of the array at |*it|. */
int conch__json_element(const uint8_t *p, size_t n, size_t *it, size_t *value);

/* The decoded length in bytes (UTF-8, escapes resolved) of the string at
   |at|. */
size_t conch__json_strlen(const uint8_t *p, size_t at);

/* Decodes the string at |at| into |out|, room for conch__json_strlen()
   bytes and a NUL, which is appended.  Returns the length. */
size_t conch__json_string(const uint8_t *p, size_t at, char *out);

/* Whether the string at |at| decodes to the NUL-terminated |s|. */
int conch__json_string_is(const uint8_t *p, size_t at, const char *s);

/* An upper bound on the values (objects, arrays, members, elements) in the
   JSON text |p|: one, plus one per '[', '{', ',' and ':' outside strings.
   One pass; nothing allocated.  (The JSON codec counts them before jansson
   builds a tree, CONCH_JSON_MAX_VALUES in pbjson.h.) */
size_t conch__json_values(const uint8_t *p, size_t n);

/* Length of the UTF-8 sequence at |s| (|n| > 0 bytes left), or 0 when it
   is not valid UTF-8: overlong forms, surrogates and code points past
   U+10FFFF are invalid, as in Go's utf8 package (and for jansson). */
size_t conch__utf8_seq(const unsigned char *s, size_t n);

#endif
