/* The 5-byte message envelope of Connect streams, gRPC and gRPC-Web:
   flags (1 byte), then the payload length (uint32 big-endian), then the
   payload.  The reader reassembles envelopes from arbitrary chunks; a whole
   envelope inside one chunk is handed on without copying, one that spans
   chunks is copied once into the reassembly buffer. */
#ifndef CONCH_ENVELOPE_H
#define CONCH_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>

#include "buf.h"

enum {
  CONCH_ENV_COMPRESSED = 0x01,
  CONCH_ENV_END_STREAM = 0x02, /* Connect streams */
  CONCH_ENV_TRAILERS = 0x80    /* gRPC-Web */
};

#define CONCH_ENV_PREFIX 5

/* Flag masks a client accepts per protocol: any bit outside is an error. */
#define CONCH_ENV_FLAGS_CONNECT 0x03u
#define CONCH_ENV_FLAGS_GRPC 0x01u
#define CONCH_ENV_FLAGS_GRPC_WEB 0x81u

/* Called once per complete envelope.  |payload| is borrowed until the
   callback returns.  A non-zero return stops the reader and is returned by
   conch__env_reader_feed(). */
typedef int (*conch_env_cb)(void *user_data, uint8_t flags,
                            const uint8_t *payload, size_t len);

typedef struct conch_env_reader {
  const conch_mem *mem;
  uint32_t max_len;      /* largest payload accepted; 0 = no limit */
  uint8_t allowed_flags; /* CONCH_ENV_FLAGS_* */
  uint8_t prefix[CONCH_ENV_PREFIX];
  uint8_t prefix_len; /* bytes of |prefix| held */
  uint8_t flags;      /* of the envelope being read */
  uint32_t len;       /* its payload length */
  uint32_t reserve;   /* reserved at once for a payload that spans chunks */
  conch_buf body;     /* partial payload, when spanning chunks */
  int failed;         /* a previous feed failed: the reader is dead */
} conch_env_reader;

void conch__env_reader_init(conch_env_reader *r, const conch_mem *mem,
                            uint8_t allowed_flags, uint32_t max_len);
void conch__env_reader_clear(conch_env_reader *r);

/* A payload that spans chunks then reserves its whole declared length (at
   most |max_len|, which must be set) before its first bytes are copied, so
   it is copied once and never grown.  Without this, the first reservation
   is 64 KiB and the buffer grows as bytes arrive: a bare prefix that claims
   a large payload costs little, which is what a server facing untrusted
   clients wants.  A client, which chose its server, calls this. */
void conch__env_reader_reserve_declared(conch_env_reader *r);

/* Feeds |n| bytes.  Calls |cb| for each envelope completed.  Returns 0, the
   callback's non-zero value, or:
     CONCH_ERR_PROTO  a flag byte outside |allowed_flags|
     CONCH_ERR_LIMIT  a declared length above |max_len| (checked before any
                      payload byte is buffered)
     CONCH_ERR_NOMEM
   After an error the reader refuses further input with the same error. */
int conch__env_reader_feed(conch_env_reader *r, const uint8_t *in, size_t n,
                           conch_env_cb cb, void *user_data);

/* Non-zero when the reader sits exactly at an envelope boundary (no partial
   prefix or payload held). */
int conch__env_reader_at_boundary(const conch_env_reader *r);

/* Writes the 5-byte prefix for a payload of |len| bytes. */
void conch__env_write_prefix(uint8_t out[CONCH_ENV_PREFIX], uint8_t flags,
                             uint32_t len);

#endif
