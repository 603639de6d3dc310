/* What dynamic.c, dynamic_json.c and fileset.c share (conch/dynamic.h):
   the builder's state and the small wire reader of FileDescriptorProto
   bytes. */
#ifndef CONCH_DYNAMIC_INT_H
#define CONCH_DYNAMIC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <conch/dynamic.h>

#include "mem_int.h"

#define NBUCKETS 256

/* ---- The arena ------------------------------------------------------------
 */

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  /* data follows, aligned */
} chunk;

#define CHUNK_HDR ((sizeof(chunk) + 15) & ~(size_t)15)
#define CHUNK_MIN 8192

typedef enum ent_kind {
  ENT_MSG = 1,
  ENT_ENUM,
  ENT_METHOD,
  ENT_BUILTIN
} ent_kind;

typedef struct entry {
  struct entry *next;
  const char *name;
  ent_kind kind;
  unsigned gen;
  const void *ptr;
} entry;

/* A message type as built here: the descriptor first, so that a pointer to
   one is a pointer to the other. */
typedef struct dmsg {
  ProtobufCMessageDescriptor md;
  int mark; /* the required-cycle walk: 0 new, 1 on the path, 2 done */
  unsigned gen;
} dmsg;

struct conch_dynamic {
  conch_mem mem;
  const conch_descpool *pool;
  chunk *chunks;
  entry *buckets[NBUCKETS];
  unsigned gen;
  chunk *mark_chunk; /* the arena when the current lookup began */
  size_t mark_used;
  int depth;
  int resolve_nomem; /* an Any's type could not be built for want of memory */
  char err[256];
};

/* The mark of descriptors that keep custom json names (pbjson_int.h). */
extern const char conch__dyn_json_mark[];

/* ---- The wire ------------------------------------------------------------ */

typedef struct rd {
  const uint8_t *p, *end;
} rd;

typedef struct fld {
  uint32_t num;
  int wt;
  uint64_t v;
  const uint8_t *data;
  size_t len;
} fld;

/* The next field of |r|: 1 a field in |f|; 0 the end; -1 not protobuf. */
int conch__dyn_next(rd *r, fld *f);
/* The string field |num| of the message |p|: 1 found, 0 not, -1 bad. */
int conch__dyn_get_str(const uint8_t *p, size_t n, uint32_t num,
                       const uint8_t **s, size_t *sl);

static inline rd rd_of(const uint8_t *p, size_t n) {
  rd r;
  r.p = p;
  r.end = p + n;
  return r;
}

static inline int name_eq(const uint8_t *s, size_t n, const char *z,
                          size_t zl) {
  return n == zl && memcmp(s, z, n) == 0;
}

#endif
