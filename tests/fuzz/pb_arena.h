/* What fuzz_pbdec.c and fuzz_pbborrow.c share to hold a decoder against
   protobuf-c: an arena allocator for the decoded messages and same(),
   which checks that two messages pack to the same bytes.  Include after
   fuzz.h and the protobuf-c headers. */
#ifndef CONCH_TESTS_PB_ARENA_H
#define CONCH_TESTS_PB_ARENA_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

/* An arena: nothing is freed until the run ends, as in push mode, so a
   field that points into the input is never handed to free(). */
typedef struct arena {
  void **blocks;
  size_t n, cap;
} arena;

static void *arena_alloc(void *ud, size_t n) {
  arena *a = ud;
  void *p;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    void **b = realloc(a->blocks, cap * sizeof(*b));
    if (b == NULL) {
      return NULL;
    }
    a->blocks = b;
    a->cap = cap;
  }
  p = malloc(n ? n : 1);
  if (p != NULL) {
    a->blocks[a->n++] = p;
  }
  return p;
}

static void arena_free(void *ud, void *p) {
  (void)ud;
  (void)p;
}

static void arena_clear(arena *a) {
  size_t i;
  for (i = 0; i < a->n; i++) {
    free(a->blocks[i]);
  }
  free(a->blocks);
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  uint8_t *out;
  *len = protobuf_c_message_get_packed_size(m);
  out = malloc(*len ? *len : 1);
  CHECK(out != NULL);
  CHECK(protobuf_c_message_pack(m, out) == *len);
  return out;
}

static void same(const ProtobufCMessage *got, const ProtobufCMessage *want) {
  size_t gl, wl;
  uint8_t *g = pack(got, &gl), *w = pack(want, &wl);
  CHECK(gl == wl && memcmp(g, w, gl) == 0);
  free(g);
  free(w);
}

#endif
