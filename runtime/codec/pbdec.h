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
   (a client's): a plan per message type, built at its first use (a table
   from a field's one-byte tag to where and how its value goes), taken
   from |mem| (conch_mem_default() when NULL).  Zero it before the first
   use; free the plans with conch__pbdec_cache_clear().  Not shared between
   threads. */
#define CONCH_PBDEC_CACHE 32 /* message types planned; more decode slower */
struct conch_pbdec_plan;
typedef struct conch_pbdec_cache {
  struct conch_pbdec_plan *plans[CONCH_PBDEC_CACHE]; /* open addressing */
  struct conch_pbdec_plan *last; /* of the last message decoded */
  const struct conch_mem *mem;
} conch_pbdec_cache;

void conch__pbdec_cache_clear(conch_pbdec_cache *cache);

/* Decodes |p|/|len| as |desc|, taking memory from |alloc| (never freed one
   by one: an arena); |cache| may be NULL (plans are then built for this
   call alone).  The result is what protobuf_c_message_unpack() gives
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
