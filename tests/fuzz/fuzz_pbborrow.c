/* Fuzz target: decoding with large bytes fields left in the input
   (runtime/codec/pbborrow.c) against protobuf-c's own decoding of the same bytes.
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

#include "fuzz.h"
#include "pb_arena.h"
#include "buf.h"
#include "pbborrow.h"
#include "process/process.pb-c.h"

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
    same(got, want);
    protobuf_c_message_free_unpacked(want, NULL);
  }
  conch__buf_free(&scratch, conch_mem_default());
  arena_clear(&a);
  return 0;
}
