/* Message compression: the registry of compressions a client knows (the
   built-in ones and those registered through the public API) and the
   per-client state of each.  Every decoder has the same contract as
   conch__gzip_inflate(): output in bounded steps, the limit on the decoded
   size, the same error codes. */
#ifndef CONCH_COMPRESS_H
#define CONCH_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include <conch/client.h>
#include <conch/features.h>
#include <conch/mem.h>

#include "buf.h"
#include "gzip.h"

#define CONCH__COMP_NBUILTIN CONCH_COMPRESSION_CUSTOM_FIRST
#define CONCH__COMP_MAX (CONCH__COMP_NBUILTIN + CONCH_COMPRESSION_CUSTOM_MAX)

/* A registered compression, as the options keep it (copied by value). */
typedef struct conch_comp_custom {
  char name[CONCH_COMPRESSION_NAME_MAX + 1];
  int (*compress)(void *, int, const uint8_t *, size_t, conch_compress_out *);
  int (*decompress)(void *, const uint8_t *, size_t, conch_compress_out *);
  void *user_data;
} conch_comp_custom;

/* What client options say about compression. */
typedef struct conch_comp_opts {
  int send;                        /* id */
  uint8_t accept[CONCH__COMP_MAX]; /* ids, most preferred first */
  size_t naccept;
  int level[CONCH__COMP_MAX]; /* -1: the codec's default */
  conch_comp_custom custom[CONCH_COMPRESSION_CUSTOM_MAX];
  size_t ncustom;
} conch_comp_opts;

struct conch_zstd;
struct conch_snappy;

/* Per-client state: contexts are made on first use and reset, not
   re-created, between messages where the library allows it. */
typedef struct conch_comps {
  const conch_mem *mem;
  conch_gzip gz; /* gzip */
  conch_gzip zl; /* deflate (zlib format) */
  struct conch_zstd *zs;
  struct conch_snappy *sn;
} conch_comps;

void conch__comp_opts_defaults(conch_comp_opts *o);

/* The id of |name| (|len| bytes, case-insensitive), or -1.  A built-in
   compression this build lacks is not found (so its name may be
   registered). */
int conch__comp_lookup(const conch_comp_opts *o, const char *name, size_t len);

/* conch__comp_lookup() that says why not: 0 with |*id| set,
   CONCH_ERR_UNSUPPORTED (a built-in this build lacks: "br" without
   CONCH_WITH_BROTLI) or CONCH_ERR_INVALID (unknown). */
int conch__comp_find(const conch_comp_opts *o, const char *name, size_t len,
                     int *id);

/* Registers |comp| (conch_client_opts_add_compression()'s checks; the
   name is copied, the functions and user_data kept) as the next custom
   id, written to |id| (may be NULL).  Returns 0, CONCH_ERR_INVALID or
   CONCH_ERR_LIMIT; |o| unchanged on error. */
int conch__comp_add_custom(conch_comp_opts *o, const conch_compressor *comp,
                           int *id);

/* Sets |o|'s accepted list from |names|, comma-separated, blanks around
   each name ignored, duplicates and identity dropped (NULL or "": identity
   only).  |strict| (the server's) also refuses empty items.  Returns 0,
   CONCH_ERR_UNSUPPORTED for a built-in this build lacks or
   CONCH_ERR_INVALID for an unknown name (|o| unchanged either way). */
int conch__comp_set_accept(conch_comp_opts *o, const char *names, int strict);

/* The wire name of |id| (a valid id). */
const char *conch__comp_name(const conch_comp_opts *o, int id);

/* 1 when |id| is a compression |o| knows (built-in and built, or
   registered). */
int conch__comp_valid(const conch_comp_opts *o, int id);

/* 0 when |id| is valid, CONCH_ERR_UNSUPPORTED for a built-in id this build
   lacks, CONCH_ERR_INVALID for any other. */
int conch__comp_check(const conch_comp_opts *o, int id);

/* Sets the accepted list to every built-in this build has but identity:
   gzip, br, zstd, deflate, snappy (the server's default). */
void conch__comp_accept_builtins(conch_comp_opts *o);

/* Room for the longest accepted list: every name and a comma each. */
#define CONCH__COMP_ACCEPT_MAX (CONCH__COMP_MAX * (CONCH_COMPRESSION_NAME_MAX + 1))

/* Writes the accepted list for a request sending with |send| (an id):
   |send| first when the list lacks it, comma-separated, no NUL.  Returns
   its length, 0 for identity only. */
size_t conch__comp_accept_value(const conch_comp_opts *o, int send,
                                char out[CONCH__COMP_ACCEPT_MAX]);

void conch__comps_init(conch_comps *cs, const conch_mem *mem);
void conch__comps_clear(conch_comps *cs);

/* Appends |in| compressed with |id| (not identity) to |out|.  Returns 0,
   CONCH_ERR_NOMEM or CONCH_ERR_COMPRESSION; |out| keeps its size on
   error. */
int conch__comp_compress(conch_comps *cs, const conch_comp_opts *o, int id,
                         const uint8_t *in, size_t n, conch_buf *out);

/* Decompresses |in| (n > 0) with |id| (not identity), appending to |out|.
   Returns 0, CONCH_ERR_LIMIT (decoded size over |max_out|, 0 = none),
   CONCH_ERR_COMPRESSION or CONCH_ERR_NOMEM; |out| keeps its size on
   error. */
int conch__comp_decompress(conch_comps *cs, const conch_comp_opts *o, int id,
                           const uint8_t *in, size_t n, size_t max_out,
                           conch_buf *out);

/* Shared by the decoders: room for the next step of output, at most one
   byte past |max_out| in all (|done| bytes are out already), capped at
   |cap| per step.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__comp_room(conch_buf *out, const conch_mem *mem, size_t done,
                     size_t max_out, size_t cap, size_t *room);

/* ---- The built-in codecs beside zlib's ---------------------------------- */

/* brotli: a stream; no state kept between messages (brotli 1.0.9 has no
   reset).  |quality| -1 or 0..11. */
int conch__br_compress(const conch_mem *mem, int quality, const uint8_t *in,
                       size_t n, conch_buf *out);
int conch__br_decompress(const conch_mem *mem, const uint8_t *in, size_t n,
                         size_t max_out, conch_buf *out);

/* zstd: one or more frames (skippable frames allowed).  |level| -1 or
   1..22.  The context is made on first use. */
int conch__zstd_compress(struct conch_zstd **zs, const conch_mem *mem,
                         int level, const uint8_t *in, size_t n,
                         conch_buf *out);
int conch__zstd_decompress(struct conch_zstd **zs, const conch_mem *mem,
                           const uint8_t *in, size_t n, size_t max_out,
                           conch_buf *out);
void conch__zstd_free(struct conch_zstd *zs, const conch_mem *mem);

/* snappy framing format (one or more streams back to back). */
int conch__snappy_compress(struct conch_snappy **sn, const conch_mem *mem,
                           const uint8_t *in, size_t n, conch_buf *out);
int conch__snappy_decompress(struct conch_snappy **sn, const conch_mem *mem,
                             const uint8_t *in, size_t n, size_t max_out,
                             conch_buf *out);
void conch__snappy_free(struct conch_snappy *sn, const conch_mem *mem);

/* CRC-32C (Castagnoli) as the snappy framing format masks it. */
uint32_t conch__snappy_masked_crc(const struct conch_snappy *sn,
                                  const uint8_t *p, size_t n);

#endif
