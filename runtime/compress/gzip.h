/* gzip (RFC 1952) with zlib.  One context per client (and one per
   server); streams are reset, not re-created, between messages, so steady
   state allocates nothing but output growth.

   Compression keeps one deflate stream per size class: a message of n
   bytes goes through the stream whose window is the smallest power of two
   from 512 B to 32 KiB that holds it, and whose hash table is sized to
   that window.  A window as long as the message loses nothing (no match
   reaches further back than the message's start), and resetting the
   stream clears only its own hash table: 1 KiB for a message up to 512 B,
   where zlib's defaults would clear 64 KiB for every message. */
#ifndef CONCH_GZIP_H
#define CONCH_GZIP_H

#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include <conch/mem.h>

#include "buf.h"

/* Deflate windows of 2^9 (zlib's smallest) to 2^15 bytes. */
#define CONCH__GZ_WBITS_MIN 9
#define CONCH__GZ_WBITS_MAX 15
#define CONCH__GZ_CLASSES (CONCH__GZ_WBITS_MAX - CONCH__GZ_WBITS_MIN + 1)

typedef struct conch_gzip {
  const conch_mem *mem;
  z_stream inf;
  z_stream def[CONCH__GZ_CLASSES]; /* by window, 2^9 first */
  int inf_ready;                   /* inflateInit2 done */
  unsigned char def_ready[CONCH__GZ_CLASSES]; /* deflateInit2 done */
  int def_level[CONCH__GZ_CLASSES]; /* the level each was set up with */
  int wbits;                        /* 31: gzip; 15: zlib format */
} conch_gzip;

void conch__gzip_init(conch_gzip *gz, const conch_mem *mem);
/* The same for the zlib format (RFC 1950): one stream per message, no
   concatenation; otherwise as gzip below. */
void conch__gzip_init_zlib(conch_gzip *gz, const conch_mem *mem);
void conch__gzip_clear(conch_gzip *gz);

/* Appends one complete gzip member holding |in| to |out|.  |level| is -1 or
   0..9.  Returns 0, CONCH_ERR_NOMEM, CONCH_ERR_GZIP, or CONCH_ERR_INVALID
   for a |level| outside that range. */
int conch__gzip_deflate(conch_gzip *gz, int level, const uint8_t *in, size_t n,
                        conch_buf *out);

/* Inflates |in| (one or more concatenated gzip members) and appends the
   result to |out|.  Output is produced in bounded steps and never sized from
   the gzip header or trailer.  Returns 0;
     CONCH_ERR_LIMIT  output would exceed |max_out| bytes (0 = no limit)
     CONCH_ERR_GZIP   not gzip, corrupt, bad CRC/length, or truncated
     CONCH_ERR_NOMEM
   On error |out| keeps its previous size (no partial output appended).
   Empty input is an error: callers never inflate zero-length content. */
int conch__gzip_inflate(conch_gzip *gz, const uint8_t *in, size_t n,
                        size_t max_out, conch_buf *out);

#endif
