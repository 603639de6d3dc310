/* Decoding a message whose large `bytes` fields stay where they are: the
   decoded fields point into the input instead of into copies.  For push
   mode, where a decoded message is borrowed by the handler anyway (arena),
   so the input outlives every use.  Private to the runtime. */
#ifndef CONCH_PBBORROW_H
#define CONCH_PBBORROW_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/mem.h>

#include "buf.h"

/* A `bytes` field is borrowed from this size up; smaller ones are copied
   (the walk would cost more than the copy). */
#define CONCH_BORROW_MIN 4096

/* Decodes |p|/|len| as |desc| with |alloc|, like protobuf_c_message_unpack,
   except that singular `bytes` fields of CONCH_BORROW_MIN bytes or more (in
   the message or in its singular sub-messages) point into |p|.  |scratch|
   holds a copy of the rest of the message meanwhile.  Inputs it does not
   handle (repeated paths, fields seen twice, groups, deep nesting, memory)
   are decoded by protobuf-c as usual.  NULL when the message is invalid or
   memory ran out. */
ProtobufCMessage *conch__pb_unpack_borrow(const ProtobufCMessageDescriptor *desc,
                                          ProtobufCAllocator *alloc,
                                          const uint8_t *p, size_t len,
                                          conch_buf *scratch,
                                          const conch_mem *mem);

/* The first `string` field in the wire bytes |p|/|len| of a |desc|
   message (sub-messages, repeated fields and map entries included) that
   holds a NUL byte, or NULL; |*owner| is its message.  A decoded C string
   ends at its first NUL, so such a field would reach a handler cut short
   without a word (a path, a command): servers refuse the message instead.
   Malformed input is left to the decoder (NULL). */
const ProtobufCFieldDescriptor *
conch__pb_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                     size_t len, const ProtobufCMessageDescriptor **owner);

#endif
