/* One-pass protobuf decoding into an arena (pbdec.h).  protobuf-c's own
   unpack scans every message twice, records each field in slabs and asks
   the allocator once per message, string and array; for the small nested
   messages of a typical response that is most of a call's instructions.
   Here a message is read once (arrays of repeated fields start at 4
   elements and double, the old ones left in the arena), memory comes from
   blocks sized from the input, and `bytes` fields are not copied at all.
   What this file does not handle it leaves to protobuf-c, which then
   decides, so the two never disagree about an input:
   tests/unit/test_pbdec.c checks that they give the same messages. */
#include <string.h>

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

typedef struct dec {
  ProtobufCAllocator *alloc;
  uint8_t *cur, *end;   /* the block memory is taken from */
  const uint8_t *in_end; /* of the whole input */
  size_t next;        /* size of the next block */
  conch_pbdec_cache *cache; /* descriptors checked before */
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

/* What decoding |desc| needs: whether it has repeated fields, and whether
   it is beyond this decoder (proto2 required fields, fields not ordered by
   number, no generated init). */
static unsigned desc_flags(dec *d, const ProtobufCMessageDescriptor *desc) {
  /* Direct-mapped by address: descriptors are static and few. */
  unsigned h = (unsigned)(((uint32_t)((uintptr_t)desc >> 3) * 2654435761u) >>
                          28) %
               CONCH_PBDEC_CACHE;
  unsigned i, f = 0;
  if (d->cache->desc[h] == desc) {
    return d->cache->flags[h];
  }
  if (desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC ||
      desc->message_init == NULL) {
    f = D_UNSUPPORTED;
  }
  for (i = 0; i < desc->n_fields && f != D_UNSUPPORTED; i++) {
    const ProtobufCFieldDescriptor *fd = &desc->fields[i];
    if (fd->label == PROTOBUF_C_LABEL_REQUIRED || (unsigned)fd->type >= NTYPES ||
        (i > 0 && desc->fields[i - 1].id >= fd->id)) {
      f = D_UNSUPPORTED;
    }
  }
  d->cache->desc[h] = desc;
  d->cache->flags[h] = (unsigned char)f;
  return f;
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

/* Reads the tag at *pp and the value after it.  Returns the field number,
   or 0 when the bytes are not a field this decoder takes. */
HOT uint32_t next_field(const uint8_t **pp, const uint8_t *end, val *x) {
  const uint8_t *p = *pp, *start; /* p < end */
  uint64_t tag, n;
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
  case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
    if (p < end && *p < 0x80) {
      n = *p++;
    } else {
      start = p;
      if (varint_slow(&p, end, &n) != 0 || p - start > 5) {
        return 0;
      }
    }
    if (n > (uint64_t)(end - p)) {
      return 0;
    }
    x->p = p;
    p += n;
    break;
  default:
    return 0; /* groups */
  }
  x->end = p;
  *pp = p;
  return (uint32_t)(tag >> 3);
}

static ProtobufCMessage *message(dec *d, const ProtobufCMessageDescriptor *desc,
                                 const uint8_t *p, const uint8_t *end,
                                 unsigned depth);

/* Stores one value of |fd|'s type at |m|.  |x| matches the type's wire
   type (packed elements come as VARINT/32BIT/64BIT values).  Returns 0 or
   -1. */
HOT int store(dec *d, const ProtobufCFieldDescriptor *fd, void *m,
                 const val *x, unsigned depth) {
  size_t n;
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
  case PROTOBUF_C_TYPE_STRING: {
    char *s;
    n = (size_t)(x->end - x->p);
    if (n < 16 && d->in_end - x->p >= 16) {
      /* Short, with input to spare: one fixed-size copy, no call. */
      s = take(d, 16);
      if (s == NULL) {
        return -1;
      }
      memcpy(s, x->p, 16);
    } else {
      s = take(d, n + 1);
      if (s == NULL) {
        return -1;
      }
      if (n > 0) {
        memcpy(s, x->p, n);
      }
    }
    s[n] = '\0';
    memcpy(m, &s, sizeof(s));
    return 0;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    ProtobufCBinaryData b;
    b.len = (size_t)(x->end - x->p);
    b.data = b.len > 0 ? (uint8_t *)(uintptr_t)x->p : NULL;
    memcpy(m, &b, sizeof(b));
    return 0;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *sub = message(d, fd->descriptor, x->p, x->end, depth + 1);
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

static ProtobufCMessage *message(dec *d, const ProtobufCMessageDescriptor *desc,
                                 const uint8_t *p, const uint8_t *end,
                                 unsigned depth) {
  ProtobufCMessage *msg;
  unsigned flags;
  val x;
  if (depth > DEPTH_MAX) {
    return NULL;
  }
  flags = desc_flags(d, desc);
  if (flags & D_UNSUPPORTED) {
    return NULL;
  }
  msg = take(d, desc->sizeof_message);
  if (msg == NULL) {
    return NULL;
  }
  desc->message_init(msg);
  while (p < end) {
    uint32_t id = next_field(&p, end, &x);
    const ProtobufCFieldDescriptor *fd = id ? field_of(desc, id) : NULL;
    uint8_t *m;
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
  return message(&d, desc, p, p + len, 0);
}
