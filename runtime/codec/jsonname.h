/* protoc's JSON name of a field (ToJsonName): each '_' dropped and the
   lower-case letter after one upper-cased.  The one derivation of it: the
   run-time descriptors (dynamic_field.c) check and derive names with it,
   the JSON codec (pbjson*.c) compares keys and writes names with it, one
   character at a time, without a copy. */
#ifndef CONCH_JSONNAME_H
#define CONCH_JSONNAME_H

#include <stddef.h>

/* The next character of the JSON name of the field name at *|p|, *|p|
   moved past what it took; '\0' at the name's end. */
static inline char conch__json_name_next(const char **p) {
  const char *s = *p;
  int up = 0;
  while (*s == '_') {
    up = 1;
    s++;
  }
  if (*s == '\0') {
    *p = s;
    return '\0';
  }
  *p = s + 1;
  return up && *s >= 'a' && *s <= 'z' ? (char)(*s - 'a' + 'A') : *s;
}

/* Whether |key| (|kl| bytes) is the JSON name of the field |name|. */
static inline int conch__json_name_eq(const char *name, const char *key,
                                      size_t kl) {
  size_t k = 0;
  char c;
  while ((c = conch__json_name_next(&name)) != '\0') {
    if (k == kl || key[k] != c) {
      return 0;
    }
    k++;
  }
  return k == kl;
}

/* The JSON name of the field |name| into |buf| (strlen(name) + 1 bytes,
   NUL-terminated); returns its length. */
static inline size_t conch__json_name(const char *name, char *buf) {
  size_t k = 0;
  while ((buf[k] = conch__json_name_next(&name)) != '\0') {
    k++;
  }
  return k;
}

#endif
