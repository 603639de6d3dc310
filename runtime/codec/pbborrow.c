/* Large `bytes` fields decoded in place (pbborrow.h).  The message is
   walked once to find them; a copy of the message with each of them
   emptied (and the lengths of the sub-messages holding them adjusted) goes
   to protobuf-c; the emptied fields of the result are then pointed at the
   input.  One walk of a few small fields replaces a copy of the payload. */
#include <string.h>

#include "pbborrow.h"

#define BORROW_MAX 8   /* fields borrowed per message */
#define BORROW_DEPTH 6 /* levels of sub-messages followed */
#define SEEN_MAX 16    /* LEN fields of interest per level */

typedef struct borrow {
  const ProtobufCFieldDescriptor *path[BORROW_DEPTH + 1];
  unsigned depth; /* entries of |path|; the last is the bytes field */
  const uint8_t *data;
  size_t len;
} borrow;

typedef struct walk {
  borrow b[BORROW_MAX];
  unsigned n;
  const ProtobufCFieldDescriptor *stack[BORROW_DEPTH];
  unsigned depth;
} walk;

static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  unsigned shift = 0;
  while (*p < end && shift < 64) {
    uint8_t b = *(*p)++;
    r |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *v = r;
      return 0;
    }
    shift += 7;
  }
  return -1;
}

static size_t varint_size(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static uint8_t *put_varint(uint8_t *o, uint64_t v) {
  while (v >= 0x80) {
    *o++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *o++ = (uint8_t)v;
  return o;
}

/* What a LEN field of |f| with |len| bytes is to the walk. */
enum { F_KEEP, F_BORROW, F_DESCEND };

static int classify(const ProtobufCFieldDescriptor *f, uint64_t len) {
  if (f == NULL || f->label == PROTOBUF_C_LABEL_REPEATED ||
      len < CONCH_BORROW_MIN) {
    return F_KEEP;
  }
  if (f->type == PROTOBUF_C_TYPE_BYTES) {
    return F_BORROW;
  }
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    return F_DESCEND;
  }
  return F_KEEP;
}

/* Skips the value of wire type |wt|; for LEN sets |*vp|/|*vlen|.  -1 on
   anything this walk does not take (groups, truncation). */
static int skip_value(unsigned wt, const uint8_t **p, const uint8_t *end,
                      const uint8_t **vp, uint64_t *vlen) {
  uint64_t v;
  switch (wt) {
  case 0:
    return get_varint(p, end, &v);
  case 1:
    if (end - *p < 8) {
      return -1;
    }
    *p += 8;
    return 0;
  case 5:
    if (end - *p < 4) {
      return -1;
    }
    *p += 4;
    return 0;
  case 2:
    if (get_varint(p, end, &v) != 0 || v > (uint64_t)(end - *p)) {
      return -1;
    }
    *vp = *p;
    *vlen = v;
    *p += v;
    return 0;
  default:
    return -1;
  }
}

/* Finds the fields to borrow.  0, or -1 to leave the message to protobuf-c
   as it is. */
static int scan(walk *w, const ProtobufCMessageDescriptor *desc,
                const uint8_t *p, const uint8_t *end) {
  uint32_t seen[SEEN_MAX];
  unsigned nseen = 0, i;

  while (p < end) {
    const ProtobufCFieldDescriptor *f;
    const uint8_t *vp = NULL;
    uint64_t tag, vlen = 0;
    int kind;

    if (get_varint(&p, end, &tag) != 0 || (tag >> 3) == 0 ||
        (tag >> 3) > 0x1fffffff) {
      return -1;
    }
    if (skip_value((unsigned)(tag & 7), &p, end, &vp, &vlen) != 0) {
      return -1;
    }
    if ((tag & 7) != 2) {
      continue;
    }
    f = protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
    kind = classify(f, vlen);
    if (kind == F_KEEP) {
      if (f != NULL && f->label != PROTOBUF_C_LABEL_REPEATED &&
          (f->type == PROTOBUF_C_TYPE_BYTES ||
           f->type == PROTOBUF_C_TYPE_MESSAGE)) {
        /* A small occurrence may follow a large one: see below. */
        kind = -1;
      } else {
        continue;
      }
    }
    /* A field seen twice merges or overrides: protobuf-c's business. */
    for (i = 0; i < nseen; i++) {
      if (seen[i] == f->id) {
        return -1;
      }
    }
    if (nseen == SEEN_MAX) {
      return -1;
    }
    seen[nseen++] = f->id;
    if (kind == F_BORROW) {
      borrow *b;
      if (w->n == BORROW_MAX) {
        return -1;
      }
      b = &w->b[w->n++];
      memcpy(b->path, w->stack, w->depth * sizeof(w->stack[0]));
      b->path[w->depth] = f;
      b->depth = w->depth + 1;
      b->data = vp;
      b->len = (size_t)vlen;
    } else if (kind == F_DESCEND) {
      if (w->depth == BORROW_DEPTH) {
        return -1;
      }
      w->stack[w->depth++] = f;
      if (scan(w, f->descriptor, vp, vp + vlen) != 0) {
        return -1;
      }
      w->depth--;
    }
  }
  return 0;
}

/* Writes the message with the borrowed fields emptied to |out| (NULL:
   only counts).  Returns its size.  Only after a successful scan(). */
static size_t emit(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                   const uint8_t *end, uint8_t *out) {
  size_t n = 0;
  while (p < end) {
    const uint8_t *start = p, *vp = NULL;
    uint64_t tag = 0, vlen = 0;
    const ProtobufCFieldDescriptor *f = NULL;
    int kind = F_KEEP;

    get_varint(&p, end, &tag);
    skip_value((unsigned)(tag & 7), &p, end, &vp, &vlen);
    if ((tag & 7) == 2) {
      f = protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
      kind = classify(f, vlen);
    }
    if (kind == F_KEEP) {
      if (out != NULL) {
        memcpy(out + n, start, (size_t)(p - start));
      }
      n += (size_t)(p - start);
    } else if (kind == F_BORROW) {
      if (out != NULL) {
        put_varint(out + n, tag);
        out[n + varint_size(tag)] = 0;
      }
      n += varint_size(tag) + 1;
    } else {
      size_t sub = emit(f->descriptor, vp, vp + vlen, NULL);
      if (out != NULL) {
        uint8_t *o = put_varint(put_varint(out + n, tag), sub);
        emit(f->descriptor, vp, vp + vlen, o);
      }
      n += varint_size(tag) + varint_size(sub) + sub;
    }
  }
  return n;
}

/* Whether |f| of |msg| is the member its oneof holds (or no oneof). */
static int oneof_holds(const ProtobufCMessage *msg,
                       const ProtobufCFieldDescriptor *f) {
  if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) == 0) {
    return 1;
  }
  return *(const uint32_t *)((const char *)msg + f->quantifier_offset) ==
         f->id;
}

static void patch(ProtobufCMessage *top, const borrow *b) {
  ProtobufCMessage *msg = top;
  ProtobufCBinaryData *bd;
  unsigned i;

  for (i = 0; i + 1 < b->depth; i++) {
    if (!oneof_holds(msg, b->path[i])) {
      return;
    }
    msg = *(ProtobufCMessage **)((char *)msg + b->path[i]->offset);
    if (msg == NULL) {
      return;
    }
  }
  if (!oneof_holds(msg, b->path[i])) {
    return;
  }
  bd = (ProtobufCBinaryData *)((char *)msg + b->path[i]->offset);
  if (bd->len == 0) {
    bd->data = (uint8_t *)(uintptr_t)b->data;
    bd->len = b->len;
  }
}

ProtobufCMessage *conch__pb_unpack_borrow(const ProtobufCMessageDescriptor *desc,
                                          ProtobufCAllocator *alloc,
                                          const uint8_t *p, size_t len,
                                          conch_buf *scratch,
                                          const conch_mem *mem) {
  walk w;
  ProtobufCMessage *msg;
  size_t n;
  unsigned i;

  w.n = 0;
  w.depth = 0;
  if (len < CONCH_BORROW_MIN || scan(&w, desc, p, p + len) != 0 || w.n == 0) {
    return protobuf_c_message_unpack(desc, alloc, len, p);
  }
  n = emit(desc, p, p + len, NULL);
  conch__buf_reset(scratch);
  if (conch__buf_reserve(scratch, mem, n + 1) != 0) {
    return protobuf_c_message_unpack(desc, alloc, len, p);
  }
  emit(desc, p, p + len, conch__buf_head(scratch));
  msg = protobuf_c_message_unpack(desc, alloc, n, conch__buf_head(scratch));
  if (msg != NULL) {
    for (i = 0; i < w.n; i++) {
      patch(msg, &w.b[i]);
    }
  }
  return msg;
}

/* ---- Strings a C program cannot hold ------------------------------------ */

#define NUL_DEPTH 64 /* levels of sub-messages followed */

static const ProtobufCFieldDescriptor *
nul_walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
         const uint8_t *end, unsigned depth,
         const ProtobufCMessageDescriptor **owner) {
  while (p < end) {
    const ProtobufCFieldDescriptor *f;
    const uint8_t *vp = NULL;
    uint64_t tag, vlen = 0;

    if (get_varint(&p, end, &tag) != 0 || (tag >> 3) == 0 ||
        (tag >> 3) > 0x1fffffff ||
        skip_value((unsigned)(tag & 7), &p, end, &vp, &vlen) != 0) {
      return NULL; /* the decoder judges malformed input */
    }
    if ((tag & 7) != 2) {
      continue;
    }
    f = protobuf_c_message_descriptor_get_field(desc, (unsigned)(tag >> 3));
    if (f == NULL) {
      continue;
    }
    if (f->type == PROTOBUF_C_TYPE_STRING && memchr(vp, 0, vlen) != NULL) {
      *owner = desc;
      return f;
    }
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < NUL_DEPTH) {
      const ProtobufCFieldDescriptor *bad =
          nul_walk(f->descriptor, vp, vp + vlen, depth + 1, owner);
      if (bad != NULL) {
        return bad;
      }
    }
  }
  return NULL;
}

const ProtobufCFieldDescriptor *
conch__pb_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                     size_t len, const ProtobufCMessageDescriptor **owner) {
  return nul_walk(desc, p, p + len, 0, owner);
}
