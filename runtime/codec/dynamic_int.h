/* What dynamic.c, dynamic_field.c, dynamic_json.c and fileset.c share
   (conch/dynamic.h): the builder's state, its arena and errors, and the
   small wire reader of FileDescriptorProto bytes. */
#ifndef CONCH_DYNAMIC_INT_H
#define CONCH_DYNAMIC_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <conch/dynamic.h>

#include "mem_int.h"
#include "pbwire.h"

#define NBUCKETS 256
#define MAX_NAME 4096 /* a full name */

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

/* ---- The builder's arena and errors (dynamic.c) ---------------------------
 */

/* |n| zeroed bytes in the arena of |d|, or NULL. */
void *conch__dyn_alloc(conch_dynamic *d, size_t n);
/* A NUL-terminated copy of |n| bytes of |s| in the arena, or NULL. */
char *conch__dyn_strndup(conch_dynamic *d, const char *s, size_t n);
/* Keeps the reason (the innermost one stays) and returns |rc|. */
int conch__dyn_fail(conch_dynamic *d, int rc, const char *fmt, ...)
    CONCH_PRINTF(3, 4);
/* conch__dyn_fail() with CONCH_ERR_NOMEM, "out of memory". */
int conch__dyn_nomem(conch_dynamic *d);

/* ---- A field as FieldDescriptorProto gives it ------------------------------
 */

typedef struct pfield {
  const uint8_t *name;
  size_t nl;
  uint64_t number, label, type;
  const uint8_t *type_name;
  size_t tnl;
  const uint8_t *def;
  size_t dl;
  int has_def;
  int64_t oneof; /* -1: none */
  int packed;    /* -1: not said */
  int deprecated;
  unsigned decl_index;
  const uint8_t *json; /* [json_name = ...], as protoc always writes it */
  size_t jl;
} pfield;

/* ---- Defaults and JSON names (dynamic_field.c) -----------------------------
 */

/* The default of field |fd| of message |msg| from its text |s| (|sl|
   bytes), in the arena; NULL with *rc set (0 where the field's type has
   none to keep). */
const void *conch__dyn_default(conch_dynamic *d, const char *msg,
                               const ProtobufCFieldDescriptor *fd,
                               const uint8_t *s, size_t sl, int *rc);
/* Keeps |pf|'s [json_name] on |fd| when it is not the derived one.
   Returns 0 or an error. */
int conch__dyn_json_name(conch_dynamic *d, dmsg *dm, const char *msg,
                         ProtobufCFieldDescriptor *fd, const pfield *pf);
/* The JSON names of the |nf| fields of |msg|, in declaration order (before
   they are sorted by number), as protoc checks them: in proto3 two fields
   of one JSON name (derived, or in effect) are refused; in proto2 only two
   custom ones are, and a field whose name an earlier one owns is shadowed:
   its reserved3 is the key it is written with (pbjson_int.h).  Returns 0,
   CONCH_ERR_INVALID or CONCH_ERR_NOMEM. */
int conch__dyn_json_names(conch_dynamic *d, const char *msg,
                          ProtobufCFieldDescriptor *fields, size_t nf,
                          int proto3);

/* ---- The wire ------------------------------------------------------------ */

/* The string field |num| of the message |p|: 1 found, 0 not, -1 bad. */
int conch__dyn_get_str(const uint8_t *p, size_t n, uint32_t num,
                       const uint8_t **s, size_t *sl);

static inline int name_eq(const uint8_t *s, size_t n, const char *z,
                          size_t zl) {
  return n == zl && memcmp(s, z, n) == 0;
}

#endif
