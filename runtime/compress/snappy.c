/* "snappy": the snappy framing format (snappy's framing_format.txt) on top
   of libsnappy's C API for the raw blocks.  A stream is the stream
   identifier chunk, then chunks of type 0x00 (compressed block) or 0x01
   (stored bytes), each with the masked CRC-32C of its uncompressed data
   and at most 64 KiB of it; padding (0xfe) and reserved skippable chunks
   (0x80..0xfd) are skipped, reserved unskippable ones (0x02..0x7f) are an
   error.  Streams may follow each other.
   libsnappy takes no allocator: its compressor's working memory (hash
   table and scratch, under 200 KiB for a 64 KiB chunk) comes from C++
   operator new, whose failure the C API does not catch (std::terminate),
   as brotli's encoder exits; decompression allocates nothing. */
#include <string.h>

#include <snappy-c.h>

#include <conch/status.h>

#include "compress.h"
#include "mem_int.h"

#define SN_BLOCK ((size_t)64 << 10) /* most uncompressed bytes per chunk */
#define SN_CHUNK_COMPRESSED 0x00
#define SN_CHUNK_STORED 0x01
#define SN_CHUNK_PADDING 0xfe
#define SN_CHUNK_STREAM 0xff

static const uint8_t stream_id[10] = {0xff, 0x06, 0x00, 0x00, 's',
                                      'N',  'a',  'P',  'p',  'Y'};

/* The CRC tables live in the per-client context: no global state.
   crc_table[0] is the byte-at-a-time table; crc_table[k] advances a byte
   that is k more bytes from the end, so that eight bytes go in one step
   (slicing by 8): about a quarter of the work per byte of the plain loop,
   which was most of the cost of a small snappy message. */
struct conch_snappy {
  uint32_t crc_table[8][256];
};

static void crc_table_init(uint32_t (*t)[256]) {
  uint32_t i, c;
  int k;

  for (i = 0; i < 256; i++) {
    c = i;
    for (k = 0; k < 8; k++) {
      c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* Castagnoli */
    }
    t[0][i] = c;
  }
  for (i = 0; i < 256; i++) {
    for (k = 1; k < 8; k++) {
      t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    }
  }
}

static uint32_t load_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

uint32_t conch__snappy_masked_crc(const struct conch_snappy *sn,
                                  const uint8_t *p, size_t n) {
  const uint32_t (*t)[256] = sn->crc_table;
  uint32_t c = 0xffffffffu, hi;

  for (; n >= 8; p += 8, n -= 8) {
    c ^= load_le32(p);
    hi = load_le32(p + 4);
    c = t[7][c & 0xff] ^ t[6][(c >> 8) & 0xff] ^ t[5][(c >> 16) & 0xff] ^
        t[4][c >> 24] ^ t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^
        t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; p++, n--) {
    c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  }
  c ^= 0xffffffffu;
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static int sn_get(struct conch_snappy **sn, const conch_mem *mem) {
  if (*sn == NULL) {
    *sn = conch__malloc(mem, sizeof(**sn));
    if (*sn == NULL) {
      return CONCH_ERR_NOMEM;
    }
    crc_table_init((*sn)->crc_table);
  }
  return 0;
}

void conch__snappy_free(struct conch_snappy *sn, const conch_mem *mem) {
  conch__free(mem, sn);
}

static void put_le24(uint8_t *p, size_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
}

static void put_le32(uint8_t *p, uint32_t v) {
  put_le24(p, v);
  p[3] = (uint8_t)(v >> 24);
}

/* One chunk for |n| (<= SN_BLOCK) bytes: compressed, or stored when
   compression saves less than an eighth (as the Go and C++ writers do). */
static int put_chunk(const struct conch_snappy *sn, const uint8_t *in,
                     size_t n, conch_buf *out, const conch_mem *mem) {
  size_t max = snappy_max_compressed_length(n);
  size_t clen = max;
  uint8_t *h;
  int rv;

  rv = conch__buf_reserve(out, mem, 8 + (max > n ? max : n));
  if (rv != 0) {
    return rv;
  }
  h = out->data + out->len;
  put_le32(h + 4, conch__snappy_masked_crc(sn, in, n));
  if (snappy_compress((const char *)in, n, (char *)h + 8, &clen) ==
          SNAPPY_OK &&
      clen < n - n / 8) {
    h[0] = SN_CHUNK_COMPRESSED;
  } else {
    h[0] = SN_CHUNK_STORED;
    memcpy(h + 8, in, n);
    clen = n;
  }
  put_le24(h + 1, clen + 4);
  out->len += 8 + clen;
  return 0;
}

int conch__snappy_compress(struct conch_snappy **sn, const conch_mem *mem,
                           const uint8_t *in, size_t n, conch_buf *out) {
  size_t keep = conch__buf_size(out);
  size_t at, k;
  int rv;

  rv = sn_get(sn, mem);
  if (rv == 0) {
    rv = conch__buf_append(out, mem, stream_id, sizeof(stream_id));
  }
  for (at = 0; rv == 0 && at < n; at += k) {
    k = n - at < SN_BLOCK ? n - at : SN_BLOCK;
    rv = put_chunk(*sn, in + at, k, out, mem);
  }
  if (rv != 0) {
    out->len = out->off + keep;
  }
  return rv;
}

/* One data chunk's body |p|/|len| (CRC first) of |type|: checks, limits
   and appends its uncompressed bytes. */
static int take_data(const struct conch_snappy *sn, int type, const uint8_t *p,
                     size_t len, size_t done, size_t max_out, conch_buf *out,
                     const conch_mem *mem) {
  uint32_t crc;
  size_t ulen;
  uint8_t *dst;
  int rv;

  if (len < 4) {
    return CONCH_ERR_COMPRESSION;
  }
  crc = load_le32(p);
  p += 4;
  len -= 4;
  if (type == SN_CHUNK_STORED) {
    ulen = len;
  } else if (snappy_uncompressed_length((const char *)p, len, &ulen) !=
             SNAPPY_OK) {
    return CONCH_ERR_COMPRESSION;
  }
  if (ulen > SN_BLOCK) {
    return CONCH_ERR_COMPRESSION;
  }
  if (max_out != 0 && ulen > max_out - done) {
    return CONCH_ERR_LIMIT;
  }
  rv = conch__buf_reserve(out, mem, ulen == 0 ? 1 : ulen);
  if (rv != 0) {
    return rv;
  }
  dst = out->data + out->len;
  if (type == SN_CHUNK_STORED) {
    memcpy(dst, p, ulen);
  } else if (snappy_uncompress((const char *)p, len, (char *)dst, &ulen) !=
             SNAPPY_OK) {
    return CONCH_ERR_COMPRESSION;
  }
  if (conch__snappy_masked_crc(sn, dst, ulen) != crc) {
    return CONCH_ERR_COMPRESSION;
  }
  out->len += ulen;
  return 0;
}

static int sn_run(const struct conch_snappy *sn, const uint8_t *in, size_t n,
                  size_t max_out, conch_buf *out, const conch_mem *mem) {
  size_t base = conch__buf_size(out);
  size_t at = 0, len;
  int type, rv;

  if (n < sizeof(stream_id) || memcmp(in, stream_id, sizeof(stream_id)) != 0) {
    return CONCH_ERR_COMPRESSION; /* a stream starts with its identifier */
  }
  while (at < n) {
    if (n - at < 4) {
      return CONCH_ERR_COMPRESSION;
    }
    type = in[at];
    len = (size_t)in[at + 1] | (size_t)in[at + 2] << 8 |
          (size_t)in[at + 3] << 16;
    at += 4;
    if (len > n - at) {
      return CONCH_ERR_COMPRESSION; /* truncated */
    }
    if (type == SN_CHUNK_COMPRESSED || type == SN_CHUNK_STORED) {
      rv = take_data(sn, type, in + at, len, conch__buf_size(out) - base,
                     max_out, out, mem);
      if (rv != 0) {
        return rv;
      }
    } else if (type == SN_CHUNK_STREAM) {
      if (len != 6 || memcmp(in + at, stream_id + 4, 6) != 0) {
        return CONCH_ERR_COMPRESSION;
      }
    } else if (type < 0x80) {
      return CONCH_ERR_COMPRESSION; /* reserved unskippable */
    }
    at += len; /* padding and reserved skippable chunks: skipped */
  }
  return 0;
}

int conch__snappy_decompress(struct conch_snappy **sn, const conch_mem *mem,
                             const uint8_t *in, size_t n, size_t max_out,
                             conch_buf *out) {
  size_t keep = conch__buf_size(out);
  int rv;

  rv = sn_get(sn, mem);
  if (rv != 0) {
    return rv;
  }
  rv = sn_run(*sn, in, n, max_out, out, mem);
  if (rv != 0) {
    out->len = out->off + keep;
  }
  return rv;
}
