/* Fuzz target: decoding with large bytes fields left in the input
   (runtime/pbborrow.c) against protobuf-c's own decoding of the same bytes.
   Both must accept or reject the input alike, and an accepted message must
   pack back to the same bytes either way.

   Input layout:
     [0]   which message: StartResponse, ConnectResponse, SendInputRequest
     [1..] the message (the corpus holds ones with bytes fields of
           CONCH_BORROW_MIN bytes and more, so that libFuzzer's inputs are
           that long too) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "pbborrow.h"
#include "process/process.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ProtobufCMessageDescriptor *const descs[] = {
      &process__start_response__descriptor,
      &process__connect_response__descriptor,
      &process__send_input_request__descriptor,
  };
  const ProtobufCMessageDescriptor *desc;
  arena a = {NULL, 0, 0};
  ProtobufCAllocator alloc = {arena_alloc, arena_free, NULL};
  conch_buf scratch = CONCH_BUF_INIT;
  ProtobufCMessage *got, *want;

  if (size < 1) {
    return 0;
  }
  desc = descs[data[0] % 3];
  alloc.allocator_data = &a;
  got = conch__pb_unpack_borrow(desc, &alloc, data + 1, size - 1, &scratch,
                                conch_mem_default());
  want = protobuf_c_message_unpack(desc, NULL, size - 1, data + 1);
  CHECK((got == NULL) == (want == NULL));
  if (want != NULL) {
    size_t gl, wl;
    uint8_t *g = pack(got, &gl), *w = pack(want, &wl);
    CHECK(gl == wl && memcmp(g, w, gl) == 0);
    free(g);
    free(w);
    protobuf_c_message_free_unpacked(want, NULL);
  }
  conch__buf_free(&scratch, conch_mem_default());
  arena_clear(&a);
  return 0;
}
