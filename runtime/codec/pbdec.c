/* One-pass protobuf decoding into an arena (pbdec.h).  protobuf-c's own
   unpack scans every message twice, records each field in slabs and asks
   the allocator once per message, string and array; for the small nested
   messages of a typical response that is most of a call's instructions.
   Here a message is read once (arrays of repeated fields start at 4
   elements and double, the old ones left in the arena), memory comes from
   blocks sized from the input, and `bytes` fields are not copied at all.
   Each message type gets a plan at its first use (plan_build()): a table
   from a one-byte tag (fields 1 to 15 with the wire type their type
   expects) to a slot saying where the value goes and how, so that the
   common fields take one lookup and one switch (store_planned()); the
   rest, and any tag that is not in the table, take the general path.
   What this file does not handle it leaves to protobuf-c, which then
   decides, so the two never disagree about an input:
   tests/unit/test_pbdec.c checks that they give the same messages. */
#include <string.h>

#include "mem_int.h"
#include "pbdec.h"

#define DEPTH_MAX 32  /* nesting followed; deeper goes to protobuf-c */
#define BLOCK_MIN 256 /* first block: from 4x the input, within these */
#define BLOCK_MAX 8192
#define ALIGN 8

#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline))
#else
#define HOT static inline
#define COLD static
#endif

enum { D_UNSUPPORTED = 2 };

/* By ProtobufCType: the wire type of a single value, and the size of an
   element of a repeated field. */
static const unsigned char wire_tab[] = {
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* INT32 */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* SINT32 */
    PROTOBUF_C_WIRE_TYPE_32BIT,           /* SFIXED32 */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* INT64 */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* SINT64 */
    PROTOBUF_C_WIRE_TYPE_64BIT,           /* SFIXED64 */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* UINT32 */
    PROTOBUF_C_WIRE_TYPE_32BIT,           /* FIXED32 */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* UINT64 */
    PROTOBUF_C_WIRE_TYPE_64BIT,           /* FIXED64 */
    PROTOBUF_C_WIRE_TYPE_32BIT,           /* FLOAT */
    PROTOBUF_C_WIRE_TYPE_64BIT,           /* DOUBLE */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* BOOL */
    PROTOBUF_C_WIRE_TYPE_VARINT,          /* ENUM */
    PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, /* STRING */
    PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, /* BYTES */
    PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, /* MESSAGE */
};
static const unsigned char size_tab[] = {
    4, 4, 4, 8, 8, 8, 4, 4, 8, 8, 4, 8, sizeof(protobuf_c_boolean), 4,
    sizeof(char *), sizeof(ProtobufCBinaryData), sizeof(ProtobufCMessage *),
};
#define NTYPES (sizeof(wire_tab) / sizeof(wire_tab[0]))

static ProtobufCWireType wire_of(ProtobufCType t) {
  return (ProtobufCWireType)wire_tab[t];
}

static size_t elt_size(ProtobufCType t) { return size_tab[t]; }

/* How a field with a one-byte tag (numbers 1 to 15) is stored when it
   needs none of the general path's checks. */
enum {
  K_GENERAL = 0, /* not planned: the general path */
  K_V32,         /* int32, uint32, enum: a varint's low 32 bits */
  K_V64,         /* int64, uint64 */
  K_BOOL,
  K_STR,
  K_BYTES,
  K_MSG,
  K_STR_REP, /* repeated string */
  K_MSG_REP, /* repeated message */
};

typedef struct slot {
  const ProtobufCFieldDescriptor *fd;
  struct conch_pbdec_plan *sub; /* K_MSG*: its type's plan, once looked up */
  uint32_t off;                 /* fd->offset */
  uint32_t qoff;                /* K_*_REP, oneof: fd->quantifier_offset */
  unsigned char kind;
  unsigned char oneof;          /* a member of a oneof (qoff: its case) */
} slot;

/* A message type's plan: built once, kept until the cache is cleared (so
   slots may point at other plans). */
typedef struct conch_pbdec_plan {
  const ProtobufCMessageDescriptor *desc;
  unsigned char unsupported; /* beyond this decoder: protobuf-c's */
  uint8_t by_tag[128];       /* a tag byte's slot + 1; 0: the general path */
  slot slots[];
} plan;

typedef struct dec {
  ProtobufCAllocator *alloc;
  uint8_t *cur, *end;   /* the block memory is taken from */
  const uint8_t *in_end; /* of the whole input */
  size_t next;        /* size of the next block */
  conch_pbdec_cache *cache; /* plans built before */
} dec;

COLD void *take_block(dec *d, size_t n) {
  size_t sz = n > d->next ? n : d->next;
  uint8_t *b = d->alloc->alloc(d->alloc->allocator_data, sz);
  if (b == NULL) {
    return NULL;
  }
  d->cur = b + n;
  d->end = b + sz;
  if (d->next < (SIZE_MAX >> 2)) {
    d->next *= 2;
  }
  return b;
}

HOT void *take(dec *d, size_t n) {
  void *p;
  n = (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if ((size_t)(d->end - d->cur) < n) {
    return take_block(d, n);
  }
  p = d->cur;
  d->cur += n;
  return p;
}

/* Whether |desc| is beyond this decoder: proto2 required fields, fields
   not ordered by number, no generated init. */
static int unsupported(const ProtobufCMessageDescriptor *desc) {
  unsigned i;
  if (desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC ||
      desc->message_init == NULL) {
    return 1;
  }
  for (i = 0; i < desc->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &desc->fields[i];
    if (fd->label == PROTOBUF_C_LABEL_REQUIRED || (unsigned)fd->type >= NTYPES ||
        (i > 0 && desc->fields[i - 1].id >= fd->id)) {
      return 1;
    }
  }
  return 0;
}

/* The kind of |fd| when its values need nothing but a store (no presence
   flag; a oneof's case is set by store_planned()), else K_GENERAL. */
static unsigned char kind_of(const ProtobufCFieldDescriptor *fd) {
  int rep = fd->label == PROTOBUF_C_LABEL_REPEATED;
  if (!(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
      fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->quantifier_offset != 0 &&
      !rep) {
    return K_GENERAL;
  }
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_ENUM:
    return rep ? K_GENERAL : K_V32;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_UINT64:
    return rep ? K_GENERAL : K_V64;
  case PROTOBUF_C_TYPE_BOOL:
    return rep ? K_GENERAL : K_BOOL;
  case PROTOBUF_C_TYPE_STRING:
    return rep ? K_STR_REP : K_STR;
  case PROTOBUF_C_TYPE_BYTES:
    return rep ? K_GENERAL : K_BYTES;
  case PROTOBUF_C_TYPE_MESSAGE:
    return rep ? K_MSG_REP : K_MSG;
  default:
    return K_GENERAL;
  }
}

static const conch_mem *plan_mem(const conch_pbdec_cache *c) {
  return c->mem != NULL ? c->mem : conch_mem_default();
}

COLD plan *plan_build(conch_pbdec_cache *c,
                      const ProtobufCMessageDescriptor *desc) {
  unsigned i, n = 0;
  int bad = unsupported(desc);
  plan *pl;
  for (i = 0; !bad && i < desc->n_fields; i++) {
    n += desc->fields[i].id <= 15 && kind_of(&desc->fields[i]) != K_GENERAL;
  }
  pl = conch__malloc(plan_mem(c), sizeof(plan) + n * sizeof(slot));
  if (pl == NULL) {
    return NULL;
  }
  pl->desc = desc;
  pl->unsupported = (unsigned char)bad;
  memset(pl->by_tag, 0, sizeof(pl->by_tag));
  for (i = 0, n = 0; !bad && i < desc->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &desc->fields[i];
    unsigned char k = kind_of(fd);
    slot *s;
    if (fd->id > 15 || k == K_GENERAL) {
      continue;
    }
    s = &pl->slots[n++];
    s->fd = fd;
    s->sub = NULL;
    s->off = fd->offset;
    s->qoff = fd->quantifier_offset;
    s->kind = k;
    s->oneof = (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
    pl->by_tag[fd->id << 3 | wire_of(fd->type)] = (uint8_t)n;
  }
  return pl;
}

/* |desc|'s plan, built now when it has none; NULL when the cache is full
   or memory ran out (the message is then decoded without one). */
static plan *plan_of(dec *d, const ProtobufCMessageDescriptor *desc) {
  conch_pbdec_cache *c = d->cache;
  unsigned h = (unsigned)(((uint32_t)((uintptr_t)desc >> 3) * 2654435761u) >>
                          27) %
               CONCH_PBDEC_CACHE;
  unsigned i;
  for (i = 0; i < CONCH_PBDEC_CACHE; i++) {
    plan **e = &c->plans[(h + i) % CONCH_PBDEC_CACHE];
    if (*e == NULL) {
      *e = plan_build(c, desc);
      return *e;
    }
    if ((*e)->desc == desc) {
      return *e;
    }
  }
  return NULL;
}

void conch__pbdec_cache_clear(conch_pbdec_cache *c) {
  unsigned i;
  for (i = 0; i < CONCH_PBDEC_CACHE; i++) {
    if (c->plans[i] != NULL) {
      conch__free(plan_mem(c), c->plans[i]);
      c->plans[i] = NULL;
    }
  }
  c->last = NULL;
}

HOT const ProtobufCFieldDescriptor *
field_of(const ProtobufCMessageDescriptor *desc, uint32_t id) {
  unsigned lo = 0, hi = desc->n_fields;
  if (id - 1 < hi && desc->fields[id - 1].id == id) {
    return &desc->fields[id - 1]; /* numbered 1, 2, 3...: the usual case */
  }
  while (lo < hi) {
    unsigned mid = lo + (hi - lo) / 2;
    uint32_t m = desc->fields[mid].id;
    if (m == id) {
      return &desc->fields[mid];
    }
    if (m < id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return NULL;
}

/* A varint of at most 10 bytes.  Returns 0, or -1 when unterminated. */
COLD int varint_slow(const uint8_t **pp, const uint8_t *end, uint64_t *v) {
  const uint8_t *p = *pp;
  uint64_t r = 0;
  unsigned i;
  for (i = 0; i < 10 && p < end; i++) {
    uint8_t b = *p++;
    /* 7 * 9 = 63: of a tenth byte only the lowest bit fits, as in
       protobuf-c */
    r |= (uint64_t)(b & 0x7f) << (7 * i);
    if (b < 0x80) {
      *v = r;
      *pp = p;
      return 0;
    }
  }
  return -1;
}

HOT int varint(const uint8_t **pp, const uint8_t *end, uint64_t *v) {
  const uint8_t *p = *pp;
  if (p < end && *p < 0x80) {
    *v = *p;
    *pp = p + 1;
    return 0;
  }
  return varint_slow(pp, end, v);
}

/* protobuf-c's bool: true when any bit of the varint is set, including
   bits past 64. */
static int varint_bool(const uint8_t *p, const uint8_t *end) {
  int r = 0;
  for (; p < end; p++) {
    r |= (*p & 0x7f) != 0;
  }
  return r;
}

static int packable(ProtobufCType t) {
  return t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_BYTES &&
         t != PROTOBUF_C_TYPE_MESSAGE;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) {
  return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* One field's wire value: a tag read, then this. */
typedef struct val {
  ProtobufCWireType wt;
  const uint8_t *p, *end; /* varint bytes, fixed bytes or LEN payload */
  uint64_t v;             /* varint value */
} val;

/* Reads the length of a LEN value at *pp (after its tag), checks that the
   value fits before |end| and leaves *pp at the value.  Returns the length,
   or -1. */
HOT long len_of(const uint8_t **pp, const uint8_t *end) {
  const uint8_t *q = *pp, *start = q;
  uint64_t n;
  if (q < end && *q < 0x80) {
    n = *q++;
  } else if (end - q >= 2 && q[1] < 0x80) {
    n = (uint64_t)(q[0] & 0x7f) | (uint64_t)q[1] << 7;
    q += 2;
  } else if (varint_slow(&q, end, &n) != 0 || q - start > 5) {
    return -1;
  }
  if (n > (uint64_t)(end - q)) {
    return -1;
  }
  *pp = q;
  return (long)n;
}

/* Reads the tag at *pp and the value after it.  Returns the field number,
   or 0 when the bytes are not a field this decoder takes. */
HOT uint32_t next_field(const uint8_t **pp, const uint8_t *end, val *x) {
  const uint8_t *p = *pp; /* p < end */
  uint64_t tag;
  if (*p < 0x80) {
    tag = *p++;
  } else if (varint_slow(&p, end, &tag) != 0 || p - *pp > 5 ||
             (tag >> 3) > 0x1fffffff) {
    return 0;
  }
  if (tag < 8) {
    return 0; /* field 0 */
  }
  x->wt = (ProtobufCWireType)(tag & 7);
  switch (x->wt) {
  case PROTOBUF_C_WIRE_TYPE_VARINT:
    x->p = p;
    if (varint(&p, end, &x->v) != 0) {
      return 0;
    }
    break;
  case PROTOBUF_C_WIRE_TYPE_64BIT:
    if (end - p < 8) {
      return 0;
    }
    x->p = p;
    p += 8;
    break;
  case PROTOBUF_C_WIRE_TYPE_32BIT:
    if (end - p < 4) {
      return 0;
    }
    x->p = p;
    p += 4;
    break;
  case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
    long n = len_of(&p, end);
    if (n < 0) {
      return 0;
    }
    x->p = p;
    p += n;
    break;
  }
  default:
    return 0; /* groups */
  }
  x->end = p;
  *pp = p;
  return (uint32_t)(tag >> 3);
}

static ProtobufCMessage *message(dec *d, const ProtobufCMessageDescriptor *desc,
                                 plan *pl, const uint8_t *p,
                                 const uint8_t *end, unsigned depth);

/* Stores a copy of the |n| bytes at |q|, NUL-terminated, as a string at
   |m|.  Returns 0 or -1. */
HOT int store_str(dec *d, void *m, const uint8_t *q, size_t n) {
  char *s;
  if (n < 16 && d->in_end - q >= 16) {
    /* Short, with input to spare: one fixed-size copy, no call. */
    s = take(d, 16);
    if (s == NULL) {
      return -1;
    }
    memcpy(s, q, 16);
  } else if (n < 32 && d->in_end - q >= 32) {
    s = take(d, 32);
    if (s == NULL) {
      return -1;
    }
    memcpy(s, q, 32);
  } else {
    s = take(d, n + 1);
    if (s == NULL) {
      return -1;
    }
    if (n > 0) {
      memcpy(s, q, n);
    }
  }
  s[n] = '\0';
  memcpy(m, &s, sizeof(s));
  return 0;
}

/* Stores one value of |fd|'s type at |m|.  |x| matches the type's wire
   type (packed elements come as VARINT/32BIT/64BIT values).  Returns 0 or
   -1. */
HOT int store(dec *d, const ProtobufCFieldDescriptor *fd, void *m,
                 const val *x, unsigned depth) {
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_ENUM: {
    uint32_t u = (uint32_t)x->v;
    memcpy(m, &u, 4);
    return 0;
  }
  case PROTOBUF_C_TYPE_SINT32: {
    uint32_t u = (uint32_t)x->v;
    int32_t s = (int32_t)(u >> 1) ^ -(int32_t)(u & 1);
    memcpy(m, &s, 4);
    return 0;
  }
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_UINT64:
    memcpy(m, &x->v, 8);
    return 0;
  case PROTOBUF_C_TYPE_SINT64: {
    int64_t s = (int64_t)(x->v >> 1) ^ -(int64_t)(x->v & 1);
    memcpy(m, &s, 8);
    return 0;
  }
  case PROTOBUF_C_TYPE_BOOL: {
    protobuf_c_boolean b = varint_bool(x->p, x->end);
    memcpy(m, &b, sizeof(b));
    return 0;
  }
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT: {
    uint32_t u = le32(x->p);
    memcpy(m, &u, 4);
    return 0;
  }
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE: {
    uint64_t u = le64(x->p);
    memcpy(m, &u, 8);
    return 0;
  }
  case PROTOBUF_C_TYPE_STRING:
    return store_str(d, m, x->p, (size_t)(x->end - x->p));
  case PROTOBUF_C_TYPE_BYTES: {
    ProtobufCBinaryData b;
    b.len = (size_t)(x->end - x->p);
    b.data = b.len > 0 ? (uint8_t *)(uintptr_t)x->p : NULL;
    memcpy(m, &b, sizeof(b));
    return 0;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *sub =
        message(d, fd->descriptor, NULL, x->p, x->end, depth + 1);
    if (sub == NULL) {
      return -1;
    }
    memcpy(m, &sub, sizeof(sub));
    return 0;
  }
  default:
    return -1;
  }
}

/* Number of elements in a packed run of |t|, or -1 when malformed. */
static long packed_count(ProtobufCType t, const uint8_t *p, const uint8_t *end) {
  size_t n = (size_t)(end - p), c = 0;
  switch (wire_of(t)) {
  case PROTOBUF_C_WIRE_TYPE_32BIT:
    return n % 4 == 0 ? (long)(n / 4) : -1;
  case PROTOBUF_C_WIRE_TYPE_64BIT:
    return n % 8 == 0 ? (long)(n / 8) : -1;
  default:
    break;
  }
  for (; p < end; p++) {
    c += *p < 0x80;
  }
  return n > 0 && end[-1] >= 0x80 ? -1 : (long)c;
}

/* The element count of repeated field |fd| at |msg|. */
static size_t *count_of(ProtobufCMessage *msg,
                        const ProtobufCFieldDescriptor *fd) {
  return (size_t *)(void *)((uint8_t *)msg + fd->quantifier_offset);
}

/* The capacity of a repeated field's array of |n| elements: arrays start
   at 4 and double, so it follows from the count alone. */
static size_t cap_of(size_t n) {
  size_t c = 4;
  if (n == 0) {
    return 0;
  }
  while (c < n) {
    c <<= 1;
  }
  return c;
}

/* Makes room for |more| elements in repeated field |fd| of |msg|, moving
   its array when full (the old one stays in the arena).  Returns the
   array, or NULL when memory ran out. */
HOT uint8_t *room(dec *d, const ProtobufCFieldDescriptor *fd,
                  ProtobufCMessage *msg, size_t more) {
  size_t n = *count_of(msg, fd), sz = elt_size(fd->type);
  uint8_t *arr, *old;
  memcpy(&arr, (uint8_t *)msg + fd->offset, sizeof(arr));
  if (n > 0 && n + more <= cap_of(n)) {
    return arr;
  }
  old = arr;
  arr = take(d, cap_of(n + more) * sz);
  if (arr == NULL) {
    return NULL;
  }
  if (n > 0) {
    memcpy(arr, old, n * sz);
  }
  memcpy((uint8_t *)msg + fd->offset, &arr, sizeof(arr));
  return arr;
}

/* Reads the elements of a packed run into the array of |fd|. */
COLD int store_packed(dec *d, const ProtobufCFieldDescriptor *fd,
                      ProtobufCMessage *msg, const val *run, unsigned depth) {
  ProtobufCWireType wt = wire_of(fd->type);
  size_t sz = elt_size(fd->type), *n = count_of(msg, fd);
  long c = packed_count(fd->type, run->p, run->end);
  uint8_t *arr;
  const uint8_t *p = run->p;
  val x;
  if (c <= 0) {
    return (int)c; /* -1: malformed; 0: an empty run adds nothing */
  }
  arr = room(d, fd, msg, (size_t)c);
  if (arr == NULL) {
    return -1;
  }
  x.wt = wt;
  while (p < run->end) {
    x.p = p;
    if (wt == PROTOBUF_C_WIRE_TYPE_VARINT) {
      if (varint(&p, run->end, &x.v) != 0) {
        return -1;
      }
    } else {
      p += wt == PROTOBUF_C_WIRE_TYPE_32BIT ? 4 : 8;
    }
    x.end = p;
    if (store(d, fd, arr + *n * sz, &x, depth) != 0) {
      return -1;
    }
    (*n)++;
  }
  return 0;
}

/* Makes room for one more element of the repeated pointer field |s| at
   |msg|; returns where it goes, or NULL. */
HOT uint8_t *push_one(dec *d, const slot *s, ProtobufCMessage *msg) {
  size_t *count = (size_t *)(void *)((uint8_t *)msg + s->qoff);
  uint8_t *arr = room(d, s->fd, msg, 1);
  if (arr == NULL) {
    return NULL;
  }
  return arr + (*count)++ * sizeof(void *);
}

/* Decodes the sub-message of slot |s| in [q, q + n) into |m|.  Returns
   0 or -1. */
HOT int store_sub(dec *d, slot *s, uint8_t *m, const uint8_t *q, long n,
                  unsigned depth) {
  ProtobufCMessage *sub;
  if (s->sub == NULL) {
    s->sub = plan_of(d, s->fd->descriptor);
  }
  sub = message(d, s->fd->descriptor, s->sub, q, q + n, depth + 1);
  if (sub == NULL) {
    return -1;
  }
  memcpy(m, &sub, sizeof(sub));
  return 0;
}

/* Stores the value of a planned field (|s|) that starts at |q|, after its
   one-byte tag, at |msg|.  Returns where the next field starts, or NULL. */
HOT const uint8_t *store_planned(dec *d, slot *s, ProtobufCMessage *msg,
                                 const uint8_t *q, const uint8_t *end,
                                 unsigned depth) {
  uint8_t *m = (uint8_t *)msg + s->off;
  const uint8_t *v0 = q;
  uint64_t v;
  long n;
  if (s->oneof) {
    uint32_t *which = (uint32_t *)(void *)((uint8_t *)msg + s->qoff);
    if (*which != 0 && (*which != s->fd->id || s->kind == K_MSG)) {
      return NULL; /* another member given, or a message to merge */
    }
    *which = s->fd->id;
    if (s->kind == K_MSG) {
      /* The member's pointer shares the union: nothing to merge with. */
      if ((n = len_of(&q, end)) < 0 || store_sub(d, s, m, q, n, depth) != 0) {
        return NULL;
      }
      return q + n;
    }
  }
  switch (s->kind) {
  case K_V32: {
    uint32_t u;
    if (varint(&q, end, &v) != 0) {
      return NULL;
    }
    u = (uint32_t)v;
    memcpy(m, &u, 4);
    return q;
  }
  case K_V64:
    if (varint(&q, end, &v) != 0) {
      return NULL;
    }
    memcpy(m, &v, 8);
    return q;
  case K_BOOL: {
    protobuf_c_boolean b;
    if (varint(&q, end, &v) != 0) {
      return NULL;
    }
    b = varint_bool(v0, q);
    memcpy(m, &b, sizeof(b));
    return q;
  }
  case K_STR:
    if ((n = len_of(&q, end)) < 0 || store_str(d, m, q, (size_t)n) != 0) {
      return NULL;
    }
    return q + n;
  case K_STR_REP:
    if ((n = len_of(&q, end)) < 0 || (m = push_one(d, s, msg)) == NULL ||
        store_str(d, m, q, (size_t)n) != 0) {
      return NULL;
    }
    return q + n;
  case K_BYTES: {
    ProtobufCBinaryData b;
    if ((n = len_of(&q, end)) < 0) {
      return NULL;
    }
    b.len = (size_t)n;
    b.data = n > 0 ? (uint8_t *)(uintptr_t)q : NULL;
    memcpy(m, &b, sizeof(b));
    return q + n;
  }
  case K_MSG: {
    void *prev;
    memcpy(&prev, m, sizeof(prev));
    if (prev != NULL && prev != s->fd->default_value) {
      return NULL; /* given twice: protobuf-c merges them */
    }
    if ((n = len_of(&q, end)) < 0 || store_sub(d, s, m, q, n, depth) != 0) {
      return NULL;
    }
    return q + n;
  }
  default: /* K_MSG_REP */
    if ((n = len_of(&q, end)) < 0 || (m = push_one(d, s, msg)) == NULL ||
        store_sub(d, s, m, q, n, depth) != 0) {
      return NULL;
    }
    return q + n;
  }
}

/* Decodes the message of type |desc| (|pl| its plan, or NULL: looked up)
   in [p, end). */
static ProtobufCMessage *message(dec *d, const ProtobufCMessageDescriptor *desc,
                                 plan *pl, const uint8_t *p,
                                 const uint8_t *end, unsigned depth) {
  ProtobufCMessage *msg;
  val x;
  if (depth > DEPTH_MAX) {
    return NULL;
  }
  if (pl == NULL && (pl = plan_of(d, desc)) == NULL) {
    /* No plan to be had: every field takes the general path. */
    static plan none;
    if (unsupported(desc)) {
      return NULL;
    }
    pl = &none;
  } else if (pl->unsupported) {
    return NULL;
  }
  msg = take(d, desc->sizeof_message);
  if (msg == NULL) {
    return NULL;
  }
  desc->message_init(msg);
  while (p < end) {
    const ProtobufCFieldDescriptor *fd;
    uint8_t *m;
    uint32_t id;
    unsigned si;
    if (*p < 128 && (si = pl->by_tag[*p]) != 0) {
      p = store_planned(d, &pl->slots[si - 1], msg, p + 1, end, depth);
      if (p == NULL) {
        return NULL;
      }
      continue;
    }
    id = next_field(&p, end, &x);
    fd = id ? field_of(desc, id) : NULL;
    if (fd == NULL) {
      return NULL; /* unknown fields are protobuf-c's to keep */
    }
    m = (uint8_t *)msg + fd->offset;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t *n = count_of(msg, fd);
      uint8_t *arr;
      if (x.wt == PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED && packable(fd->type)) {
        if (store_packed(d, fd, msg, &x, depth) != 0) {
          return NULL;
        }
        continue;
      }
      if (x.wt != wire_of(fd->type) || (arr = room(d, fd, msg, 1)) == NULL) {
        return NULL;
      }
      m = arr + *n * elt_size(fd->type);
      (*n)++;
    } else if (x.wt != wire_of(fd->type)) {
      return NULL;
    } else if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      uint32_t *which = (uint32_t *)(void *)((uint8_t *)msg +
                                             fd->quantifier_offset);
      if (*which != 0 &&
          (*which != fd->id || fd->type == PROTOBUF_C_TYPE_MESSAGE)) {
        return NULL; /* another member given, or a message to merge */
      }
      *which = fd->id;
    } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
      void *prev;
      memcpy(&prev, m, sizeof(prev));
      if (prev != NULL && prev != fd->default_value) {
        return NULL; /* given twice: protobuf-c merges them */
      }
    } else if (fd->label == PROTOBUF_C_LABEL_OPTIONAL &&
               fd->quantifier_offset != 0) {
      protobuf_c_boolean one = 1;
      memcpy((uint8_t *)msg + fd->quantifier_offset, &one, sizeof(one));
    }
    if (store(d, fd, m, &x, depth) != 0) {
      return NULL;
    }
  }
  return msg;
}

ProtobufCMessage *conch__pb_decode(const ProtobufCMessageDescriptor *desc,
                                   ProtobufCAllocator *alloc,
                                   const uint8_t *p, size_t len,
                                   conch_pbdec_cache *cache) {
  conch_pbdec_cache local;
  ProtobufCMessage *msg;
  dec d;
  d.alloc = alloc;
  d.cur = d.end = NULL;
  d.next = len < (BLOCK_MAX - BLOCK_MIN) / 4 ? len * 4 + BLOCK_MIN : BLOCK_MAX;
  if (cache == NULL) {
    memset(&local, 0, sizeof(local));
    cache = &local;
  }
  d.cache = cache;
  if (len == 0) {
    static const uint8_t none[1];
    p = none;
  } else if (p == NULL) {
    return NULL;
  }
  d.in_end = p + len;
  if (cache->last == NULL || cache->last->desc != desc) {
    cache->last = plan_of(&d, desc);
  }
  msg = message(&d, desc, cache->last, p, p + len, 0);
  if (cache == &local) {
    conch__pbdec_cache_clear(&local);
  }
  return msg;
}
