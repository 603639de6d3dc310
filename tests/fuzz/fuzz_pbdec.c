/* Fuzz target: the one-pass decoder (runtime/codec/pbdec.c, network input)
   against protobuf-c's own decoding of the same bytes.  pbdec may leave an
   input to protobuf-c (NULL), but must never take one protobuf-c refuses,
   and what it takes must pack back to the bytes protobuf-c's message packs
   to.  Decoding as the runtime does (pbdec, else pbborrow.c) must accept
   or reject every input as protobuf-c does.

   Input layout:
     [0]   which message: process.StartResponse, ConnectResponse,
           ListResponse, StartRequest; the test protos' Scalars, Repeats,
           Maps, Oneofs (proto3), P2 and its map entry (proto2)
     [1..] the message */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "pb_arena.h"
#include "buf.h"
#include "pbborrow.h"
#include "pbdec.h"
#include "process/process.pb-c.h"

/* The test protos' protoc-c output (tests/unit/pbjson), compiled here. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "google/protobuf/any.pb-c.c"
#include "google/protobuf/duration.pb-c.c"
#include "google/protobuf/empty.pb-c.c"
#include "google/protobuf/field_mask.pb-c.c"
#include "google/protobuf/struct.pb-c.c"
#include "google/protobuf/timestamp.pb-c.c"
#include "google/protobuf/wrappers.pb-c.c"
#include "pbjson/types.pb-c.c"
#include "pbjson/types2.pb-c.c"
#pragma GCC diagnostic pop

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const ProtobufCMessageDescriptor *const descs[] = {
      &process__start_response__descriptor,
      &process__connect_response__descriptor,
      &process__list_response__descriptor,
      &process__start_request__descriptor,
      &pbjsontest__scalars__descriptor,
      &pbjsontest__repeats__descriptor,
      &pbjsontest__maps__descriptor,
      &pbjsontest__oneofs__descriptor,
      &pbjsontest2__p2__descriptor,
      &pbjsontest2__p2__mentry__descriptor,
  };
  /* Kept across runs, as a client keeps it. */
  static conch_pbdec_cache cache;
  const ProtobufCMessageDescriptor *desc;
  arena a = {NULL, 0, 0};
  ProtobufCAllocator alloc = {arena_alloc, arena_free, NULL};
  conch_buf scratch = CONCH_BUF_INIT;
  ProtobufCMessage *got, *want;

  if (size < 1) {
    return 0;
  }
  desc = descs[data[0] % (sizeof(descs) / sizeof(descs[0]))];
  alloc.allocator_data = &a;
  want = protobuf_c_message_unpack(desc, NULL, size - 1, data + 1);
  got = conch__pb_decode(desc, &alloc, data + 1, size - 1, &cache);
  if (got != NULL) {
    CHECK(want != NULL); /* never takes what protobuf-c refuses */
    same(got, want);
  } else {
    /* Left to protobuf-c: decoded as the runtime does next. */
    got = conch__pb_unpack_borrow(desc, &alloc, data + 1, size - 1, &scratch,
                                  conch_mem_default());
    CHECK((got == NULL) == (want == NULL));
    if (got != NULL) {
      same(got, want);
    }
  }
  if (want != NULL) {
    protobuf_c_message_free_unpacked(want, NULL);
  }
  conch__buf_free(&scratch, conch_mem_default());
  arena_clear(&a);
  return 0;
}
