/* A one-pass protobuf decoder for messages that handlers only borrow
   (push mode, the client's arena): the messages protobuf-c would give,
   built from its descriptors, with memory taken in a few blocks sized from
   the message and every `bytes` field pointing into the input.  Private to
   the runtime. */
#ifndef CONCH_PBDEC_H
#define CONCH_PBDEC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* What conch__pb_decode() learned about descriptors, kept between calls
   (a client's): zero it before the first use. */
#define CONCH_PBDEC_CACHE 16
typedef struct conch_pbdec_cache {
  const ProtobufCMessageDescriptor *desc[CONCH_PBDEC_CACHE];
  unsigned char flags[CONCH_PBDEC_CACHE];
} conch_pbdec_cache;

/* Decodes |p|/|len| as |desc|, taking memory from |alloc| (never freed one
   by one: an arena); |cache| may be NULL.  The result is what protobuf_c_message_unpack() gives
   for the same bytes, except that `bytes` fields point into |p|, which
   must outlive the message.  NULL when the input is one it leaves to
   protobuf-c: invalid, or using what it does not handle (unknown fields,
   a sub-message or oneof given twice, proto2 required fields, groups, deep
   nesting) or when memory ran out.  The caller then decodes with protobuf-c,
   which decides. */
ProtobufCMessage *conch__pb_decode(const ProtobufCMessageDescriptor *desc,
                                   ProtobufCAllocator *alloc,
                                   const uint8_t *p, size_t len,
                                   conch_pbdec_cache *cache);

#endif
