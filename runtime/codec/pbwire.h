/* The small protobuf wire reader of the codec module: fields one at a
   time, for the FileDescriptorProto bytes the descriptor pool (descpool.c)
   and the run-time descriptors (dynamic.c) read without descriptor.proto's
   types.  Defined in descpool.c. */
#ifndef CONCH_PBWIRE_H
#define CONCH_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rd {
  const uint8_t *p, *end;
} rd;

typedef struct fld {
  uint32_t num;
  int wt;
  uint64_t v;          /* varint value */
  const uint8_t *data; /* length-delimited */
  size_t len;
} fld;

/* The next field of |r|: 1 a field in |f|; 0 the end; -1 not protobuf
   (groups included: descriptor.proto has none). */
int conch__pbw_next(rd *r, fld *f);

static inline rd rd_of(const uint8_t *p, size_t n) {
  rd r;
  r.p = p;
  r.end = p + n;
  return r;
}

#endif
