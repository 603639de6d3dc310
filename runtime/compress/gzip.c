/* gzip members (RFC 1952) with zlib.  windowBits 31 = 15 + 16: gzip
   wrapper only, so zlib-wrapped ("deflate") and raw deflate input are
   rejected rather than guessed at.  The same code speaks the zlib format
   (RFC 1950, windowBits 15) for the "deflate" compression, which takes
   exactly one stream. */
#include "gzip.h"

#include <limits.h>
#include <string.h>

#include <conch/status.h>

#include "compress.h"
#include "mem_int.h"

#define GZ_WINDOW_BITS 31
#define ZLIB_WINDOW_BITS 15

/* Output grows by the amount produced so far (doubling), at least this
   much, and never by more than the limit still allows. */
#define GZ_STEP_MIN ((size_t)16 << 10)

static voidpf gz_zalloc(voidpf opaque, uInt items, uInt size) {
  const conch_mem *mem = opaque;

  if (size != 0 && items > SIZE_MAX / size) {
    return Z_NULL;
  }
  return conch__malloc(mem, (size_t)items * size);
}

static void gz_zfree(voidpf opaque, voidpf p) {
  conch__free((const conch_mem *)opaque, p);
}

static void stream_setup(conch_gzip *gz, z_stream *zs) {
  memset(zs, 0, sizeof(*zs));
  zs->zalloc = gz_zalloc;
  zs->zfree = gz_zfree;
  /* zlib's opaque is not const; gz_zalloc/gz_zfree only read through it. */
  zs->opaque = (voidpf)gz->mem;
}

void conch__gzip_init(conch_gzip *gz, const conch_mem *mem) {
  memset(gz, 0, sizeof(*gz));
  gz->mem = mem;
  gz->wbits = GZ_WINDOW_BITS;
}

void conch__gzip_init_zlib(conch_gzip *gz, const conch_mem *mem) {
  conch__gzip_init(gz, mem);
  gz->wbits = ZLIB_WINDOW_BITS;
}

void conch__gzip_clear(conch_gzip *gz) {
  int c;

  if (gz->inf_ready) {
    inflateEnd(&gz->inf);
    gz->inf_ready = 0;
  }
  for (c = 0; c < CONCH__GZ_CLASSES; c++) {
    if (gz->def_ready[c]) {
      deflateEnd(&gz->def[c]);
      gz->def_ready[c] = 0;
    }
  }
}

static int zerr(int zr) {
  return zr == Z_MEM_ERROR ? CONCH_ERR_NOMEM : CONCH_ERR_GZIP;
}

/* Hands zlib the next slice of input: avail_in is a uInt, |*left| a
   size_t. */
static void refill(z_stream *zs, size_t *left) {
  size_t chunk = *left;

  if (zs->avail_in != 0 || chunk == 0) {
    return;
  }
  if (chunk > UINT_MAX) {
    chunk = UINT_MAX;
  }
  zs->avail_in = (uInt)chunk;
  *left -= chunk;
}

/* The size class of an |n|-byte message: the smallest window from
   2^CONCH__GZ_WBITS_MIN bytes that holds it, else the largest. */
static int deflate_class(size_t n) {
  int c = 0;

  while (c < CONCH__GZ_CLASSES - 1 &&
         ((size_t)1 << (CONCH__GZ_WBITS_MIN + c)) < n) {
    c++;
  }
  return c;
}

/* The stream of class |c|, reset, or made on first use.  Its hash table
   has as many heads as its window has bytes, and its symbol buffer half
   as many entries (memLevel = window bits - 7), the proportions of zlib's
   default (memLevel 8 for a 32 KiB window). */
static int deflate_prepare(conch_gzip *gz, int c, int level) {
  z_stream *zs = &gz->def[c];
  int wbits = CONCH__GZ_WBITS_MIN + c;
  int mem_level = wbits - 7;
  int zr;

  if (gz->def_ready[c] && gz->def_level[c] != level) {
    /* deflateParams() would emit a block into a stream that is not
       started; a fresh state is simpler and level changes are rare. */
    deflateEnd(zs);
    gz->def_ready[c] = 0;
  }
  if (gz->def_ready[c]) {
    zr = deflateReset(zs);
    return zr == Z_OK ? 0 : CONCH_ERR_GZIP;
  }
  stream_setup(gz, zs);
  /* gz->wbits says the format: 16 more for the gzip wrapper. */
  zr = deflateInit2(zs, level, Z_DEFLATED,
                    wbits + (gz->wbits - ZLIB_WINDOW_BITS), mem_level,
                    Z_DEFAULT_STRATEGY);
  if (zr != Z_OK) {
    return zerr(zr);
  }
  gz->def_ready[c] = 1;
  gz->def_level[c] = level;
  return 0;
}

/* One Z_FINISH pass: |out| is sized with deflateBound() first, so zlib
   normally ends in a single call.  The loop only matters for inputs above
   4 GiB, which need several avail_in slices. */
static int deflate_run(z_stream *zs, const uint8_t *in, size_t n,
                       conch_buf *out, const conch_mem *mem) {
  size_t left = n;
  size_t avail;
  uLong bound;
  int zr, rv;

  bound = deflateBound(zs, (uLong)n);
  rv = conch__buf_reserve(out, mem, (size_t)bound);
  if (rv != 0) {
    return rv;
  }
  zs->next_in = (Bytef *)in;
  zs->avail_in = 0;
  for (;;) {
    refill(zs, &left);
    if (out->cap == out->len) {
      rv = conch__buf_reserve(out, mem, GZ_STEP_MIN);
      if (rv != 0) {
        return rv;
      }
    }
    avail = out->cap - out->len;
    if (avail > UINT_MAX) {
      avail = UINT_MAX;
    }
    zs->next_out = out->data + out->len;
    zs->avail_out = (uInt)avail;
    zr = deflate(zs, left == 0 ? Z_FINISH : Z_NO_FLUSH);
    out->len += avail - zs->avail_out;
    if (zr == Z_STREAM_END) {
      return 0;
    }
    if (zr != Z_OK && (zr != Z_BUF_ERROR || zs->avail_out != 0)) {
      /* Z_BUF_ERROR with room left would mean no progress: never loop. */
      return zerr(zr);
    }
  }
}

int conch__gzip_deflate(conch_gzip *gz, int level, const uint8_t *in, size_t n,
                        conch_buf *out) {
  size_t keep = conch__buf_size(out);
  int c, rv;

  if (level < Z_DEFAULT_COMPRESSION || level > Z_BEST_COMPRESSION) {
    return CONCH_ERR_INVALID;
  }
  c = deflate_class(n);
  rv = deflate_prepare(gz, c, level);
  if (rv != 0) {
    return rv;
  }
  rv = deflate_run(&gz->def[c], in, n, out, gz->mem);
  if (rv != 0) {
    /* conch__buf_reserve() may have compacted |out|, so restore the size
       relative to |off|, not the old |len|. */
    out->len = out->off + keep;
  }
  return rv;
}

static int inflate_prepare(conch_gzip *gz) {
  int zr;

  if (gz->inf_ready) {
    zr = inflateReset(&gz->inf);
    return zr == Z_OK ? 0 : CONCH_ERR_GZIP;
  }
  stream_setup(gz, &gz->inf);
  zr = inflateInit2(&gz->inf, gz->wbits);
  if (zr != Z_OK) {
    return zerr(zr);
  }
  gz->inf_ready = 1;
  return 0;
}

/* Room for the next inflate() call: conch__comp_room(), which allows at
   most one byte past |max_out| (how an over-long output is detected), and
   no more than zlib's uInt can say. */
static int inflate_room(conch_buf *out, const conch_mem *mem, size_t done,
                        size_t max_out, size_t *room) {
  return conch__comp_room(out, mem, done, max_out, UINT_MAX, room);
}

static int inflate_run(z_stream *zs, int multi, const uint8_t *in, size_t n,
                       size_t max_out, conch_buf *out, const conch_mem *mem) {
  size_t base = conch__buf_size(out);
  size_t left = n;
  size_t room, done;
  int zr, rv;

  zs->next_in = (Bytef *)in;
  zs->avail_in = 0;
  for (;;) {
    refill(zs, &left);
    rv = inflate_room(out, mem, conch__buf_size(out) - base, max_out, &room);
    if (rv != 0) {
      return rv;
    }
    zs->next_out = out->data + out->len;
    zs->avail_out = (uInt)room;
    zr = inflate(zs, Z_NO_FLUSH);
    out->len += room - zs->avail_out;
    done = conch__buf_size(out) - base;
    if (max_out != 0 && done > max_out) {
      return CONCH_ERR_LIMIT;
    }
    if (zr == Z_STREAM_END) {
      if (zs->avail_in == 0 && left == 0) {
        return 0;
      }
      if (!multi) {
        return CONCH_ERR_GZIP; /* bytes after the one zlib stream */
      }
      /* Another member follows (RFC 1952 2.2).  Anything that is not a
         gzip header fails in inflate() as Z_DATA_ERROR. */
      zr = inflateReset(zs);
      if (zr != Z_OK) {
        return CONCH_ERR_GZIP;
      }
      continue;
    }
    if (zr != Z_OK && zr != Z_BUF_ERROR) {
      return zerr(zr);
    }
    if (zs->avail_out != 0 && zs->avail_in == 0 && left == 0) {
      /* zlib stopped with room to spare: it wants input there is none
         of, so the member is truncated.  (refill() ran before the call,
         so Z_BUF_ERROR with room left always lands here too.) */
      return CONCH_ERR_GZIP;
    }
  }
}

int conch__gzip_inflate(conch_gzip *gz, const uint8_t *in, size_t n,
                        size_t max_out, conch_buf *out) {
  size_t keep = conch__buf_size(out);
  int rv;

  if (n == 0) {
    return CONCH_ERR_GZIP;
  }
  rv = inflate_prepare(gz);
  if (rv != 0) {
    return rv;
  }
  rv = inflate_run(&gz->inf, gz->wbits == GZ_WINDOW_BITS, in, n, max_out, out,
                   gz->mem);
  if (rv != 0) {
    out->len = out->off + keep;
  }
  return rv;
}
