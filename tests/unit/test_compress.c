/* The compression registry and the codecs beside gzip (br, zstd, deflate,
   snappy): streams made by other encoders (zstd 1.5.4 CLI, Node 20's
   brotli and zlib), round trips through the registry, every truncation,
   corrupt input, the snappy framing rules, decompression bombs with
   bounded memory, every allocation failure, registered compressions and
   the options that choose and advertise them.  A build without br, zstd
   or snappy (CONCH_WITH_*) tests the others, and that the missing ones are
   refused as unsupported and their names free for registration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/client.h>
#include <conch/features.h>
#include <conch/status.h>

#include "buf.h"
#include "client_int.h"
#include "compress.h"
#include "failmem.h"

static const char hello_txt[] = "Hello, conch!\n";

/* `zstd -19` (zstd 1.5.4 CLI) of hello_txt: content size and checksum. */
static const uint8_t zstd_hello[] = {
    0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x0e, 0x71, 0x00, 0x00, 0x48,
    0x65, 0x6c, 0x6c, 0x6f, 0x2c, 0x20, 0x63, 0x6f, 0x6e, 0x63,
    0x68, 0x21, 0x0a, 0x7b, 0x4a, 0x42, 0x17};
#if CONCH_WITH_ZSTD || CONCH_WITH_BROTLI
/* `zstd -3` (zstd 1.5.4 CLI) of 20 fox lines: a repeat-offset sequence. */
static const uint8_t zstd_fox[] = {
    0x28, 0xb5, 0x2f, 0xfd, 0x64, 0x84, 0x02, 0xb5, 0x01, 0x00, 0xd4, 0x02,
    0x54, 0x68, 0x65, 0x20, 0x71, 0x75, 0x69, 0x63, 0x6b, 0x20, 0x62, 0x72,
    0x6f, 0x77, 0x6e, 0x20, 0x66, 0x6f, 0x78, 0x20, 0x6a, 0x75, 0x6d, 0x70,
    0x73, 0x20, 0x6f, 0x76, 0x65, 0x72, 0x20, 0x74, 0x68, 0x65, 0x20, 0x6c,
    0x61, 0x7a, 0x79, 0x20, 0x64, 0x6f, 0x67, 0x2e, 0x0a, 0x01, 0x00, 0xa5,
    0x0a, 0x2b, 0x55, 0x06, 0xbf, 0xcb, 0x58, 0xa6};
#endif
/* Node 20 zlib.brotliCompressSync(hello_txt) */
static const uint8_t br_hello[] = {0x8b, 0x06, 0x80, 0x48, 0x65, 0x6c,
                                   0x6c, 0x6f, 0x2c, 0x20, 0x63, 0x6f,
                                   0x6e, 0x63, 0x68, 0x21, 0x0a, 0x03};
#if CONCH_WITH_BROTLI
/* Node 20 zlib.brotliCompressSync(20 fox lines) */
static const uint8_t br_fox[] = {
    0x1b, 0x83, 0x03, 0x88, 0x2c, 0x0e, 0xec, 0x98, 0x32, 0x78, 0x61, 0xc3,
    0x74, 0xea, 0x6b, 0x05, 0xaa, 0x32, 0x34, 0x49, 0x66, 0xc6, 0xd6, 0x20,
    0x67, 0x78, 0x7a, 0x2a, 0xec, 0xad, 0x41, 0x5c, 0xe6, 0xf2, 0xc2, 0x06,
    0x1c, 0x38, 0x24, 0x90, 0x37, 0x12, 0xdf, 0xa0, 0xd3, 0x0a, 0x67, 0x1e,
    0x1e, 0x27, 0xaa, 0x29, 0x38, 0xc2, 0x89, 0xb8, 0x4f, 0x03, 0x03};
#endif
/* Node 20 zlib.deflateSync(hello_txt): zlib format, RFC 1950 */
static const uint8_t zlib_hello[] = {
    0x78, 0x9c, 0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0xd7, 0x51, 0x48, 0xce,
    0xcf, 0x4b, 0xce, 0x50, 0xe4, 0x02, 0x00, 0x24, 0x3a, 0x04, 0x77};

static const char fox_line[] = "The quick brown fox jumps over the lazy dog.\n";

static const int all_codecs[] = {
    CONCH_COMPRESSION_GZIP, CONCH_COMPRESSION_BR, CONCH_COMPRESSION_ZSTD,
    CONCH_COMPRESSION_DEFLATE, CONCH_COMPRESSION_SNAPPY};
/* Those this build has (CONCH_WITH_*), set by main(). */
static int codecs[sizeof(all_codecs) / sizeof(all_codecs[0])];
static size_t ncodecs;

/* An allocator that tracks live and peak bytes, to bound the memory a
   decoder may use. */
typedef union meter_hdr {
  size_t size;
  max_align_t align;
} meter_hdr;

typedef struct meter {
  size_t live;
  size_t peak;
} meter;

static void *meter_malloc(size_t size, void *ud) {
  meter *m = ud;
  meter_hdr *h = malloc(sizeof(*h) + size);
  if (h == NULL) {
    return NULL;
  }
  h->size = size;
  m->live += size;
  if (m->live > m->peak) {
    m->peak = m->live;
  }
  return h + 1;
}

static void meter_free(void *p, void *ud) {
  meter *m = ud;
  meter_hdr *h;
  if (p == NULL) {
    return;
  }
  h = (meter_hdr *)p - 1;
  m->live -= h->size;
  free(h);
}

static void *meter_calloc(size_t nmemb, size_t size, void *ud) {
  void *p;
  if (size != 0 && nmemb > SIZE_MAX / size) {
    return NULL;
  }
  p = meter_malloc(nmemb * size, ud);
  if (p != NULL) {
    memset(p, 0, nmemb * size);
  }
  return p;
}

static void *meter_realloc(void *p, size_t size, void *ud) {
  meter *m = ud;
  meter_hdr *h;
  void *q;
  if (p == NULL) {
    return meter_malloc(size, ud);
  }
  h = (meter_hdr *)p - 1;
  q = meter_malloc(size, ud);
  if (q == NULL) {
    return NULL;
  }
  memcpy(q, p, h->size < size ? h->size : size);
  meter_free(p, m);
  return q;
}

static void fill_text(uint8_t *p, size_t n, uint32_t seed) {
  size_t i;
  for (i = 0; i < n; i++) {
    p[i] = (uint8_t)fox_line[(i + seed) % (sizeof(fox_line) - 1)];
    if (i % 997 == 0) {
      p[i] = (uint8_t)('a' + (seed + i / 997) % 26);
    }
  }
}

static void fill_random(uint8_t *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  size_t i;
  for (i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (uint8_t)x;
  }
}

typedef struct env {
  conch_comp_opts o;
  conch_comps cs;
} env;

static void env_init(env *e, const conch_mem *mem) {
  conch__comp_opts_defaults(&e->o);
  conch__comps_init(&e->cs, mem);
}

static void env_clear(env *e) { conch__comps_clear(&e->cs); }

static int dec(env *e, int id, const uint8_t *in, size_t n, size_t max,
               conch_buf *out) {
  return conch__comp_decompress(&e->cs, &e->o, id, in, n, max, out);
}

static int enc(env *e, int id, const uint8_t *in, size_t n, conch_buf *out) {
  return conch__comp_compress(&e->cs, &e->o, id, in, n, out);
}

static void expect_decode(env *e, int id, const uint8_t *z, size_t zlen,
                          const void *want, size_t wlen) {
  conch_buf out = CONCH_BUF_INIT;
  assert_int_equal(dec(e, id, z, zlen, 0, &out), 0);
  assert_int_equal(conch__buf_size(&out), wlen);
  if (wlen > 0) {
    assert_memory_equal(conch__buf_head(&out), want, wlen);
  }
  /* Exactly the decoded size as the limit is fine; one less is not. */
  conch__buf_reset(&out);
  assert_int_equal(dec(e, id, z, zlen, wlen == 0 ? 1 : wlen, &out), 0);
  if (wlen > 1) {
    conch__buf_reset(&out);
    assert_int_equal(dec(e, id, z, zlen, wlen - 1, &out), CONCH_ERR_LIMIT);
    assert_int_equal(conch__buf_size(&out), 0);
  }
  conch__buf_free(&out, conch_mem_default());
}

static void expect_error(env *e, int id, const uint8_t *z, size_t zlen) {
  conch_buf out = CONCH_BUF_INIT;
  assert_int_equal(conch__buf_append(&out, conch_mem_default(), "keep", 4), 0);
  assert_int_equal(dec(e, id, z, zlen, 0, &out), CONCH_ERR_COMPRESSION);
  assert_int_equal(conch__buf_size(&out), 4); /* nothing partial appended */
  conch__buf_free(&out, conch_mem_default());
}

static void fox20(uint8_t *p) {
  size_t i, l = strlen(fox_line);
  for (i = 0; i < 20; i++) {
    memcpy(p + i * l, fox_line, l);
  }
}

static void test_foreign_streams(void **state) {
  uint8_t fox[20 * 45];
  uint8_t two[sizeof(zstd_hello) * 2 + 12];
  env e;
  (void)state;

  assert_int_equal(strlen(fox_line), 45);
  fox20(fox);
  env_init(&e, conch_mem_default());
#if CONCH_WITH_ZSTD
  expect_decode(&e, CONCH_COMPRESSION_ZSTD, zstd_hello, sizeof(zstd_hello),
                hello_txt, strlen(hello_txt));
  expect_decode(&e, CONCH_COMPRESSION_ZSTD, zstd_fox, sizeof(zstd_fox), fox,
                sizeof(fox));
#endif
#if CONCH_WITH_BROTLI
  expect_decode(&e, CONCH_COMPRESSION_BR, br_hello, sizeof(br_hello),
                hello_txt, strlen(hello_txt));
  expect_decode(&e, CONCH_COMPRESSION_BR, br_fox, sizeof(br_fox), fox,
                sizeof(fox));
#endif
  expect_decode(&e, CONCH_COMPRESSION_DEFLATE, zlib_hello, sizeof(zlib_hello),
                hello_txt, strlen(hello_txt));
  /* zstd: frames follow each other, and skippable frames are skipped. */
  memcpy(two, zstd_hello, sizeof(zstd_hello));
  memcpy(two + sizeof(zstd_hello), "\x50\x2a\x4d\x18\x04\x00\x00\x00skip", 12);
  memcpy(two + sizeof(zstd_hello) + 12, zstd_hello, sizeof(zstd_hello));
#if CONCH_WITH_ZSTD
  {
    char want[64];
    snprintf(want, sizeof(want), "%s%s", hello_txt, hello_txt);
    expect_decode(&e, CONCH_COMPRESSION_ZSTD, two, sizeof(two), want,
                  strlen(want));
  }
#endif
  /* Each decoder refuses the others' formats. */
  expect_error(&e, CONCH_COMPRESSION_DEFLATE, br_hello, sizeof(br_hello));
#if CONCH_WITH_ZSTD
  expect_error(&e, CONCH_COMPRESSION_ZSTD, zlib_hello, sizeof(zlib_hello));
#endif
#if CONCH_WITH_SNAPPY
  expect_error(&e, CONCH_COMPRESSION_SNAPPY, zstd_hello, sizeof(zstd_hello));
#endif
#if CONCH_WITH_BROTLI
  expect_error(&e, CONCH_COMPRESSION_BR, zstd_fox, sizeof(zstd_fox));
#endif
  expect_error(&e, CONCH_COMPRESSION_GZIP, zlib_hello, sizeof(zlib_hello));
  /* deflate is one zlib stream: a second one, or any byte after it, is an
     error (gzip alone allows members to follow each other). */
  {
    uint8_t z2[sizeof(zlib_hello) * 2];
    memcpy(z2, zlib_hello, sizeof(zlib_hello));
    memcpy(z2 + sizeof(zlib_hello), zlib_hello, sizeof(zlib_hello));
    expect_error(&e, CONCH_COMPRESSION_DEFLATE, z2, sizeof(z2));
    expect_error(&e, CONCH_COMPRESSION_DEFLATE, z2, sizeof(zlib_hello) + 1);
  }
#if CONCH_WITH_BROTLI
  /* br: one stream, nothing after it. */
  {
    uint8_t b2[sizeof(br_hello) + 1];
    memcpy(b2, br_hello, sizeof(br_hello));
    b2[sizeof(br_hello)] = 0;
    expect_error(&e, CONCH_COMPRESSION_BR, b2, sizeof(b2));
  }
#endif
#if CONCH_WITH_ZSTD
  /* A zstd checksum that does not match. */
  {
    uint8_t bad[sizeof(zstd_hello)];
    memcpy(bad, zstd_hello, sizeof(bad));
    bad[sizeof(bad) - 1] ^= 1;
    expect_error(&e, CONCH_COMPRESSION_ZSTD, bad, sizeof(bad));
  }
#endif
  env_clear(&e);
}

static void roundtrip(env *e, int id, const uint8_t *in, size_t n) {
  conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
  const conch_mem *mem = conch_mem_default();

  assert_int_equal(conch__buf_append(&z, mem, "pre", 3), 0);
  assert_int_equal(enc(e, id, in, n, &z), 0);
  assert_true(conch__buf_size(&z) > 3);
  assert_memory_equal(conch__buf_head(&z), "pre", 3);
  assert_int_equal(dec(e, id, conch__buf_head(&z) + 3, conch__buf_size(&z) - 3,
                       n == 0 ? 1 : n, &out),
                   0);
  assert_int_equal(conch__buf_size(&out), n);
  if (n > 0) {
    assert_memory_equal(conch__buf_head(&out), in, n);
  }
  conch__buf_free(&z, mem);
  conch__buf_free(&out, mem);
}

static void test_roundtrips(void **state) {
  static const size_t sizes[] = {0, 1, 14, 1000, 65535, 65536, 65537, 300000};
  size_t big = (size_t)3 << 20;
  uint8_t *text = malloc(big), *rnd = malloc(300000);
  size_t i, k;
  env e;
  (void)state;

  assert_non_null(text);
  assert_non_null(rnd);
  fill_text(text, big, 3);
  fill_random(rnd, 300000, 4);
  env_init(&e, conch_mem_default());
  for (i = 0; i < ncodecs; i++) {
    for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
      roundtrip(&e, codecs[i], text, sizes[k]);
      roundtrip(&e, codecs[i], rnd, sizes[k]);
    }
    roundtrip(&e, codecs[i], text, big);
  }
  /* Levels, where a codec has them. */
#if CONCH_WITH_BROTLI
  for (k = 0; k <= 11; k++) {
    e.o.level[CONCH_COMPRESSION_BR] = (int)k;
    roundtrip(&e, CONCH_COMPRESSION_BR, text, 100000);
  }
#endif
#if CONCH_WITH_ZSTD
  for (k = 1; k <= 19; k += 3) {
    e.o.level[CONCH_COMPRESSION_ZSTD] = (int)k;
    roundtrip(&e, CONCH_COMPRESSION_ZSTD, text, 100000);
  }
#endif
  for (k = 0; k <= 9; k++) {
    e.o.level[CONCH_COMPRESSION_DEFLATE] = (int)k;
    roundtrip(&e, CONCH_COMPRESSION_DEFLATE, text, 100000);
  }
  /* Compression works: text shrinks. */
  for (i = 0; i < ncodecs; i++) {
    conch_buf z = CONCH_BUF_INIT;
    assert_int_equal(enc(&e, codecs[i], text, 100000, &z), 0);
    assert_true(conch__buf_size(&z) < 100000 / 4);
    conch__buf_free(&z, conch_mem_default());
  }
  env_clear(&e);
  free(text);
  free(rnd);
}

/* Every proper prefix of a valid message fails, leaving |out| as it was. */
static void test_every_truncation(void **state) {
  uint8_t text[70000];
  size_t i, cut, nsnappy = 0;
  env e;
  (void)state;

  fill_text(text, sizeof(text), 5);
  env_init(&e, conch_mem_default());
  for (i = 0; i < ncodecs; i++) {
    conch_buf z = CONCH_BUF_INIT;
    assert_int_equal(enc(&e, codecs[i], text, sizeof(text), &z), 0);
    for (cut = 1; cut < conch__buf_size(&z); cut++) {
      conch_buf out = CONCH_BUF_INIT;
      int rv = dec(&e, codecs[i], conch__buf_head(&z), cut, 0, &out);
      if (codecs[i] == CONCH_COMPRESSION_SNAPPY && rv == 0) {
        /* The framing has no end marker: a cut between chunks is a
           shorter stream, whole 64 KiB chunks of the start (or none, right
           after the stream identifier). */
        assert_true(conch__buf_size(&out) == 0 ||
                    conch__buf_size(&out) == 65536);
        if (conch__buf_size(&out) > 0) {
          assert_memory_equal(conch__buf_head(&out), text, 65536);
        }
        nsnappy++;
      } else {
        assert_int_equal(rv, CONCH_ERR_COMPRESSION);
        assert_int_equal(conch__buf_size(&out), 0);
      }
      conch__buf_free(&out, conch_mem_default());
    }
    conch__buf_free(&z, conch_mem_default());
  }
  /* 70000 bytes: identifier, two chunks */
  assert_int_equal(nsnappy, CONCH_WITH_SNAPPY ? 2 : 0);
  env_clear(&e);
}

/* Flipped bytes: an error or some output, never a crash, never more than
   the limit. */
static void test_corrupt_bytes(void **state) {
  uint8_t text[5000];
  size_t i, at;
  env e;
  (void)state;

  fill_text(text, sizeof(text), 6);
  env_init(&e, conch_mem_default());
  for (i = 0; i < ncodecs; i++) {
    conch_buf z = CONCH_BUF_INIT;
    assert_int_equal(enc(&e, codecs[i], text, sizeof(text), &z), 0);
    for (at = 0; at < conch__buf_size(&z); at++) {
      conch_buf out = CONCH_BUF_INIT;
      int rv;
      z.data[z.off + at] ^= 0x41;
      rv = dec(&e, codecs[i], conch__buf_head(&z), conch__buf_size(&z),
               sizeof(text), &out);
      assert_true(rv == 0 || rv == CONCH_ERR_COMPRESSION ||
                  rv == CONCH_ERR_LIMIT);
      assert_true(conch__buf_size(&out) <= sizeof(text));
      if (rv != 0) {
        assert_int_equal(conch__buf_size(&out), 0);
      }
      z.data[z.off + at] ^= 0x41;
      conch__buf_free(&out, conch_mem_default());
    }
    conch__buf_free(&z, conch_mem_default());
  }
  env_clear(&e);
}

/* ---- snappy framing ------------------------------------------------------ */

#if !CONCH_WITH_SNAPPY
static void test_snappy_framing(void **state) {
  (void)state;
  skip();
}
#else

static void put_chunk(uint8_t *p, size_t *at, int type, const void *body,
                      size_t n) {
  p[(*at)++] = (uint8_t)type;
  p[(*at)++] = (uint8_t)n;
  p[(*at)++] = (uint8_t)(n >> 8);
  p[(*at)++] = (uint8_t)(n >> 16);
  memcpy(p + *at, body, n);
  *at += n;
}

static void put_stored(env *e, uint8_t *p, size_t *at, const char *s) {
  uint8_t body[256];
  size_t n = strlen(s);
  uint32_t crc = conch__snappy_masked_crc(e->cs.sn, (const uint8_t *)s, n);
  body[0] = (uint8_t)crc;
  body[1] = (uint8_t)(crc >> 8);
  body[2] = (uint8_t)(crc >> 16);
  body[3] = (uint8_t)(crc >> 24);
  memcpy(body + 4, s, n);
  put_chunk(p, at, 0x01, body, n + 4);
}

static void test_snappy_framing(void **state) {
  uint8_t s[1024];
  size_t at = 0;
  env e;
  conch_buf z = CONCH_BUF_INIT;
  (void)state;

  env_init(&e, conch_mem_default());
  /* Make the context (and its CRC table): a round trip of nothing. */
  assert_int_equal(enc(&e, CONCH_COMPRESSION_SNAPPY, NULL, 0, &z), 0);
  /* An empty stream is the identifier alone. */
  assert_int_equal(conch__buf_size(&z), 10);
  assert_memory_equal(conch__buf_head(&z), "\xff\x06\x00\x00sNaPpY", 10);
  conch__buf_free(&z, conch_mem_default());
  /* CRC-32C check value ("123456789" -> 0xe3069283), masked as the format
     says: rotate right by 15, add 0xa282ead8. */
  {
    uint32_t c = 0xe3069283u;
    assert_int_equal(
        conch__snappy_masked_crc(e.cs.sn, (const uint8_t *)"123456789", 9),
        (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u));
  }
  /* RFC 3720 B.4's 32-byte vectors (eight bytes at a time, then none
     left over), and every length of "123456789" repeated against the
     plain bitwise CRC, so that each leftover count is checked. */
  {
    static const uint32_t want[3] = {0x8a9136aau, 0x62a8ab43u, 0x46dd794eu};
    uint8_t v[64];
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < 32; i++) {
        v[i] = k == 0 ? 0 : k == 1 ? 0xff : (uint8_t)i;
      }
      uint32_t c = want[k];
      assert_int_equal(conch__snappy_masked_crc(e.cs.sn, v, 32),
                       (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u));
    }
    for (int i = 0; i < 64; i++) {
      v[i] = (uint8_t)("123456789"[i % 9] + i / 9);
    }
    for (size_t n = 0; n <= sizeof(v); n++) {
      uint32_t c = 0xffffffffu;
      for (size_t i = 0; i < n; i++) {
        c ^= v[i];
        for (int b = 0; b < 8; b++) {
          c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
      }
      c ^= 0xffffffffu;
      assert_int_equal(conch__snappy_masked_crc(e.cs.sn, v, n),
                       (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u));
    }
  }
  /* Stored chunks, padding, a skippable chunk, a second stream. */
  put_chunk(s, &at, 0xff, "sNaPpY", 6);
  put_stored(&e, s, &at, "Hello, ");
  put_chunk(s, &at, 0xfe, "\0\0\0", 3);
  put_chunk(s, &at, 0x80, "skip me", 7);
  put_chunk(s, &at, 0xff, "sNaPpY", 6);
  put_stored(&e, s, &at, "conch!\n");
  expect_decode(&e, CONCH_COMPRESSION_SNAPPY, s, at, hello_txt,
                strlen(hello_txt));
  /* A reserved unskippable chunk. */
  {
    size_t a2 = at;
    put_chunk(s, &a2, 0x02, "x", 1);
    expect_error(&e, CONCH_COMPRESSION_SNAPPY, s, a2);
  }
  /* No stream identifier first. */
  expect_error(&e, CONCH_COMPRESSION_SNAPPY, s + 10, at - 10);
  /* A wrong identifier body. */
  {
    uint8_t t[64];
    size_t a2 = 0;
    put_chunk(t, &a2, 0xff, "sNaPpY", 6);
    put_chunk(t, &a2, 0xff, "SNAPPY", 6);
    expect_error(&e, CONCH_COMPRESSION_SNAPPY, t, a2);
  }
  /* A bad CRC. */
  s[10 + 4] ^= 1;
  expect_error(&e, CONCH_COMPRESSION_SNAPPY, s, at);
  s[10 + 4] ^= 1;
  /* A data chunk shorter than its CRC. */
  {
    uint8_t t[64];
    size_t a2 = 0;
    put_chunk(t, &a2, 0xff, "sNaPpY", 6);
    put_chunk(t, &a2, 0x01, "abc", 3);
    expect_error(&e, CONCH_COMPRESSION_SNAPPY, t, a2);
  }
  /* A stored chunk over 64 KiB. */
  {
    size_t n = 65536 + 1 + 4;
    uint8_t *t = calloc(1, n + 14);
    size_t a2 = 0;
    assert_non_null(t);
    put_chunk(t, &a2, 0xff, "sNaPpY", 6);
    t[a2++] = 0x01;
    t[a2++] = (uint8_t)n;
    t[a2++] = (uint8_t)(n >> 8);
    t[a2++] = (uint8_t)(n >> 16);
    a2 += n;
    expect_error(&e, CONCH_COMPRESSION_SNAPPY, t, a2);
    free(t);
  }
  /* Incompressible data goes stored, compressible data compressed. */
  {
    uint8_t rnd[1000], txt[1000];
    fill_random(rnd, sizeof(rnd), 1);
    fill_text(txt, sizeof(txt), 1);
    assert_int_equal(enc(&e, CONCH_COMPRESSION_SNAPPY, rnd, 1000, &z), 0);
    assert_int_equal(z.data[z.off + 10], 0x01);
    conch__buf_reset(&z);
    assert_int_equal(enc(&e, CONCH_COMPRESSION_SNAPPY, txt, 1000, &z), 0);
    assert_int_equal(z.data[z.off + 10], 0x00);
    conch__buf_free(&z, conch_mem_default());
  }
  env_clear(&e);
}

#endif /* CONCH_WITH_SNAPPY */

/* ---- Bombs --------------------------------------------------------------- */

/* 64 MiB of zeros compressed, decoded with a 1 MiB limit: LIMIT, with
   memory bounded by the limit plus each decoder's fixed state, never by
   the claimed or real size. */
static void test_bombs(void **state) {
  size_t big = (size_t)64 << 20, limit = (size_t)1 << 20;
  uint8_t *zeros = calloc(1, big);
  size_t i;
  (void)state;

  assert_non_null(zeros);
  for (i = 0; i < ncodecs; i++) {
    meter m = {0, 0};
    conch_mem mm = {&m, meter_malloc, meter_free, meter_calloc,
                    meter_realloc};
    conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
    env e;
    int id = codecs[i];
    /* snappy's ratio is at most about 21:1: a smaller bomb does. */
    size_t n = id == CONCH_COMPRESSION_SNAPPY ? (size_t)16 << 20 : big;

    env_init(&e, conch_mem_default());
    assert_int_equal(enc(&e, id, zeros, n, &z), 0);
    env_clear(&e);
    env_init(&e, &mm);
    assert_int_equal(dec(&e, id, conch__buf_head(&z), conch__buf_size(&z),
                         limit, &out),
                     CONCH_ERR_LIMIT);
    assert_int_equal(conch__buf_size(&out), 0);
    conch__buf_free(&out, &mm);
    env_clear(&e);
    assert_int_equal(m.live, 0);
    /* Output at most twice the limit (doubling steps) plus the decoder's
       window and tables: zstd 8 MiB at most, brotli 4 MiB for this
       stream. */
    if (m.peak > 3 * limit + ((size_t)9 << 20)) {
      fail_msg("%s: peak %zu bytes", conch__comp_name(&e.o, id), m.peak);
    }
    conch__buf_free(&z, conch_mem_default());
  }
  free(zeros);
}

/* ---- Allocation failures ------------------------------------------------- */

static void test_every_allocation_failure(void **state) {
  uint8_t text[200000];
  long live0 = failmem_live_blocks();
  size_t i, n;
  (void)state;

  fill_text(text, sizeof(text), 7);
  for (i = 0; i < ncodecs; i++) {
    int id = codecs[i];
    for (n = 0;; n++) {
      conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
      env e;
      int rv;

      env_init(&e, failmem_hooks());
      failmem_fail_at(n);
      rv = enc(&e, id, text, sizeof(text), &z);
      if (rv == 0) {
        rv = dec(&e, id, conch__buf_head(&z), conch__buf_size(&z), 0, &out);
      }
      if (rv == 0) {
        /* Again on the same contexts: the reset paths. */
        conch__buf_reset(&out);
        rv = dec(&e, id, conch__buf_head(&z), conch__buf_size(&z), 0, &out);
      }
      if (!failmem_fired()) {
        assert_int_equal(rv, 0);
        assert_int_equal(conch__buf_size(&out), sizeof(text));
        assert_memory_equal(conch__buf_head(&out), text, sizeof(text));
      } else {
        assert_int_equal(rv, CONCH_ERR_NOMEM);
        assert_int_equal(conch__buf_size(&out), 0);
      }
      conch__buf_free(&z, failmem_hooks());
      conch__buf_free(&out, failmem_hooks());
      env_clear(&e);
      assert_int_equal(failmem_live_blocks(), live0);
      if (!failmem_fired()) {
        break;
      }
    }
    assert_true(n >= 3); /* context, output, state: all were exercised */
  }
}

/* ---- Registered compressions --------------------------------------------- */

/* "xor": each byte XOR 0x5a, preceded by a 0x5a marker byte; written to the
   sink one byte at a time, as a streaming decoder would. */
static int xor_calls;
static int xor_ignore_errors;
static int xor_return;

static int xor_compress(void *ud, int level, const uint8_t *in, size_t len,
                        conch_compress_out *out) {
  uint8_t b = 0x5a;
  size_t i;
  int rv;
  (void)level;
  assert_ptr_equal(ud, &xor_calls);
  xor_calls++;
  rv = conch_compress_out_write(out, &b, 1);
  for (i = 0; rv == 0 && i < len; i++) {
    b = in[i] ^ 0x5a;
    rv = conch_compress_out_write(out, &b, 1);
  }
  return rv;
}

static int xor_decompress(void *ud, const uint8_t *in, size_t len,
                          conch_compress_out *out) {
  size_t i;
  int rv = 0;
  assert_ptr_equal(ud, &xor_calls);
  xor_calls++;
  if (xor_return != 0) {
    return xor_return;
  }
  if (in[0] != 0x5a) {
    return CONCH_ERR_COMPRESSION;
  }
  for (i = 1; i < len; i++) {
    uint8_t b = in[i] ^ 0x5a;
    rv = conch_compress_out_write(out, &b, 1);
    if (rv != 0 && !xor_ignore_errors) {
      return rv;
    }
  }
  return xor_ignore_errors ? 0 : rv;
}

static void test_registered(void **state) {
  conch_client_opts *opts;
  conch_compressor x = CONCH_COMPRESSOR_INIT;
  conch_comps cs;
  conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
  const conch_mem *mem = conch_mem_default();
  char names[16];
  int id, k;
  (void)state;

  assert_int_equal(conch_client_opts_new(&opts), 0);
  x.name = "x-or";
  x.compress = xor_compress;
  x.decompress = xor_decompress;
  x.user_data = &xor_calls;
  /* Misuse. */
  assert_int_equal(conch_client_opts_add_compression(NULL, &x, &id),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_add_compression(opts, NULL, &id),
                   CONCH_ERR_INVALID);
  x.name = "GZip"; /* taken, in any case */
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.name = "identity";
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.name = "bad name";
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.name = "";
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.name = "a23456789012345678901234567890123"; /* 33 */
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.name = "x-or";
  x.decompress = NULL;
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.decompress = xor_decompress;
  x.struct_size = sizeof(size_t);
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_INVALID);
  x.struct_size = sizeof(x);
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id), 0);
  assert_int_equal(id, CONCH_COMPRESSION_CUSTOM_FIRST);
  assert_int_equal(conch_client_opts_add_compression(opts, &x, NULL),
                   CONCH_ERR_INVALID); /* the name is taken now */
  /* Up to the maximum. */
  for (k = 1; k < CONCH_COMPRESSION_CUSTOM_MAX; k++) {
    snprintf(names, sizeof(names), "c%d", k);
    x.name = names;
    assert_int_equal(conch_client_opts_add_compression(opts, &x, &id), 0);
    assert_int_equal(id, CONCH_COMPRESSION_CUSTOM_FIRST + k);
  }
  x.name = "one-more";
  assert_int_equal(conch_client_opts_add_compression(opts, &x, &id),
                   CONCH_ERR_LIMIT);

  /* Chosen by id or name; levels pass through. */
  assert_int_equal(conch_client_opts_set_send_compression(
                       opts, (conch_compression)CONCH_COMPRESSION_CUSTOM_FIRST),
                   0);
  assert_int_equal(opts->comp.send, CONCH_COMPRESSION_CUSTOM_FIRST);
  assert_int_equal(conch_client_opts_set_send_compression_name(opts, "C3"), 0);
  assert_int_equal(opts->comp.send, CONCH_COMPRESSION_CUSTOM_FIRST + 3);
  assert_int_equal(conch_client_opts_set_compression_level(
                       opts, CONCH_COMPRESSION_CUSTOM_FIRST, 77),
                   0);
  assert_int_equal(conch_client_opts_set_compression_level(
                       opts, CONCH_COMPRESSION_CUSTOM_FIRST, -2),
                   CONCH_ERR_INVALID);

  /* Through the registry, as a client uses it. */
  conch__comps_init(&cs, mem);
  id = CONCH_COMPRESSION_CUSTOM_FIRST;
  xor_calls = 0;
  assert_int_equal(conch__comp_compress(&cs, &opts->comp, id,
                                        (const uint8_t *)"hello", 5, &z),
                   0);
  assert_int_equal(conch__buf_size(&z), 6);
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          conch__buf_head(&z), 6, 0, &out),
                   0);
  assert_int_equal(conch__buf_size(&out), 5);
  assert_memory_equal(conch__buf_head(&out), "hello", 5);
  assert_int_equal(xor_calls, 2);
  /* The limit applies to what the codec writes: at the limit fine, one
     over fails, even when the codec ignores the sink's refusal. */
  conch__buf_reset(&out);
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          conch__buf_head(&z), 6, 5, &out),
                   0);
  conch__buf_reset(&out);
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          conch__buf_head(&z), 6, 4, &out),
                   CONCH_ERR_LIMIT);
  assert_int_equal(conch__buf_size(&out), 0);
  xor_ignore_errors = 1;
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          conch__buf_head(&z), 6, 4, &out),
                   CONCH_ERR_LIMIT);
  assert_int_equal(conch__buf_size(&out), 0);
  xor_ignore_errors = 0;
  /* Corrupt input, and returns outside the contract. */
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          (const uint8_t *)"zz", 2, 0, &out),
                   CONCH_ERR_COMPRESSION);
  xor_return = 12345;
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          conch__buf_head(&z), 6, 0, &out),
                   CONCH_ERR_COMPRESSION);
  xor_return = CONCH_ERR_NOMEM;
  assert_int_equal(conch__comp_decompress(&cs, &opts->comp, id,
                                          conch__buf_head(&z), 6, 0, &out),
                   CONCH_ERR_NOMEM);
  xor_return = 0;
  assert_int_equal(conch_compress_out_write(NULL, "x", 1), CONCH_ERR_INVALID);
  conch__comps_clear(&cs);
  conch__buf_free(&z, mem);
  conch__buf_free(&out, mem);
  conch_client_opts_free(opts);
}

/* ---- Options: send, accepted lists, levels ------------------------------- */

#if !(CONCH_WITH_BROTLI && CONCH_WITH_ZSTD && CONCH_WITH_SNAPPY)
/* Written with all of them; test_built_or_not covers the others. */
static void test_options(void **state) {
  (void)state;
  skip();
}
#else
static void accept_is(const conch_client_opts *o, int send, const char *want) {
  char v[CONCH__COMP_ACCEPT_MAX + 1];
  size_t n = conch__comp_accept_value(&o->comp, send, v);
  v[n] = '\0';
  assert_string_equal(v, want);
}

static void test_options(void **state) {
  conch_client_opts *o;
  (void)state;

  assert_int_equal(conch_client_opts_new(&o), 0);
  /* Defaults: identity sent, gzip accepted. */
  assert_int_equal(o->comp.send, CONCH_COMPRESSION_IDENTITY);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "gzip");
  /* The send compression is advertised first when the list lacks it. */
  accept_is(o, CONCH_COMPRESSION_ZSTD, "zstd,gzip");
  accept_is(o, CONCH_COMPRESSION_GZIP, "gzip");

  assert_int_equal(
      conch_client_opts_set_accept_compression(o, " zstd, br ,identity,,ZSTD,"
                                                  "snappy,deflate,gzip"),
      0);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "zstd,br,snappy,deflate,gzip");
  accept_is(o, CONCH_COMPRESSION_SNAPPY, "zstd,br,snappy,deflate,gzip");
  /* Unknown names change nothing. */
  assert_int_equal(conch_client_opts_set_accept_compression(o, "br,foo"),
                   CONCH_ERR_INVALID);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "zstd,br,snappy,deflate,gzip");
  assert_int_equal(conch_client_opts_set_accept_compression(o, ""), 0);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "");
  accept_is(o, CONCH_COMPRESSION_BR, "br");
  assert_int_equal(conch_client_opts_set_accept_compression(o, NULL), 0);
  assert_int_equal(conch_client_opts_set_accept_compression(NULL, "gzip"),
                   CONCH_ERR_INVALID);

  /* The deprecated gzip switch edits the list. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
  assert_int_equal(conch_client_opts_set_accept_compression(o, "br"), 0);
  assert_int_equal(conch_client_opts_set_accept_gzip(o, 1), 0);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "br,gzip");
  assert_int_equal(conch_client_opts_set_accept_gzip(o, 1), 0);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "br,gzip");
  assert_int_equal(conch_client_opts_set_accept_compression(o, "gzip,br"), 0);
  assert_int_equal(conch_client_opts_set_accept_gzip(o, 0), 0);
  accept_is(o, CONCH_COMPRESSION_IDENTITY, "br");
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

  /* Send compressions: every built-in by id and by name. */
  assert_int_equal(
      conch_client_opts_set_send_compression(o, CONCH_COMPRESSION_SNAPPY), 0);
  assert_int_equal(conch_client_opts_set_send_compression(
                       o, (conch_compression)CONCH_COMPRESSION_CUSTOM_FIRST),
                   CONCH_ERR_INVALID); /* none registered */
  assert_int_equal(conch_client_opts_set_send_compression(
                       o, CONCH_COMPRESSION_DEFAULT),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, "Deflate"),
                   0);
  assert_int_equal(o->comp.send, CONCH_COMPRESSION_DEFLATE);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, "lz4"),
                   CONCH_ERR_INVALID);
  assert_int_equal(o->comp.send, CONCH_COMPRESSION_DEFLATE);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, NULL),
                   CONCH_ERR_INVALID);

  /* Level ranges. */
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_BR, 11),
                   0);
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_BR, 12),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_ZSTD, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_ZSTD, 22),
                   0);
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_SNAPPY, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_SNAPPY, -1),
                   0);
  assert_int_equal(conch_client_opts_set_compression_level(
                       o, CONCH_COMPRESSION_DEFLATE, 10),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_compression_level(o, 99, -1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_gzip_level(o, 4), 0);
  assert_int_equal(o->comp.level[CONCH_COMPRESSION_GZIP], 4);
  conch_client_opts_free(o);
}
#endif

/* ---- What the build has -------------------------------------------------- */

/* Each of br, zstd and snappy answers the setters as the build says: taken
   when built, CONCH_ERR_UNSUPPORTED (and nothing changed) when not, with
   its name then free for a registered compression.  Unknown names stay
   CONCH_ERR_INVALID either way. */
static void test_built_or_not(void **state) {
  static const struct {
    int id;
    const char *name;
    int built;
    int level;
  } opt[] = {{CONCH_COMPRESSION_BR, "br", CONCH_WITH_BROTLI, 3},
             {CONCH_COMPRESSION_ZSTD, "zstd", CONCH_WITH_ZSTD, 3},
             {CONCH_COMPRESSION_SNAPPY, "snappy", CONCH_WITH_SNAPPY, -1}};
  char list[64], v[CONCH__COMP_ACCEPT_MAX + 1], want[64];
  conch_comp_opts so;
  size_t i, n;
  (void)state;

  for (i = 0; i < sizeof(opt) / sizeof(opt[0]); i++) {
    conch_client_opts *o;
    conch_compressor x = CONCH_COMPRESSOR_INIT;
    int expect = opt[i].built ? 0 : CONCH_ERR_UNSUPPORTED, id = -1;
    conch_comps cs;
    conch_buf out = CONCH_BUF_INIT;

    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch__comp_valid(&o->comp, opt[i].id), opt[i].built);
    assert_int_equal(
        conch_client_opts_set_send_compression(o, (conch_compression)opt[i].id),
        expect);
    assert_int_equal(o->comp.send,
                     opt[i].built ? opt[i].id : CONCH_COMPRESSION_IDENTITY);
    assert_int_equal(
        conch_client_opts_set_send_compression(o, CONCH_COMPRESSION_IDENTITY),
        0);
    assert_int_equal(
        conch_client_opts_set_send_compression_name(o, opt[i].name), expect);
    assert_int_equal(
        conch_client_opts_set_compression_level(o, opt[i].id, opt[i].level),
        expect);
    snprintf(list, sizeof(list), "deflate,%s", opt[i].name);
    assert_int_equal(conch_client_opts_set_accept_compression(o, list), expect);
    n = conch__comp_accept_value(&o->comp, CONCH_COMPRESSION_IDENTITY, v);
    v[n] = '\0';
    assert_string_equal(v, opt[i].built ? list : "gzip"); /* or unchanged */
    /* Unknown stays unknown. */
    assert_int_equal(conch_client_opts_set_send_compression_name(o, "lz4"),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_client_opts_set_accept_compression(o, "lz4"),
                     CONCH_ERR_INVALID);
    /* The registry does not dispatch to a codec it lacks. */
    conch__comps_init(&cs, conch_mem_default());
    if (!opt[i].built) {
      assert_int_equal(conch__comp_decompress(&cs, &o->comp, opt[i].id,
                                              (const uint8_t *)"x", 1, 0, &out),
                       CONCH_ERR_INVALID);
      assert_int_equal(conch__comp_compress(&cs, &o->comp, opt[i].id,
                                            (const uint8_t *)"x", 1, &out),
                       CONCH_ERR_INVALID);
      assert_int_equal(conch__buf_size(&out), 0);
    }
    /* A compression of the caller's may take the name of one not built. */
    x.name = opt[i].name;
    x.compress = xor_compress;
    x.decompress = xor_decompress;
    x.user_data = &xor_calls;
    assert_int_equal(conch_client_opts_add_compression(o, &x, &id),
                     opt[i].built ? CONCH_ERR_INVALID : 0);
    if (!opt[i].built) {
      assert_int_equal(id, CONCH_COMPRESSION_CUSTOM_FIRST);
      assert_int_equal(
          conch_client_opts_set_send_compression_name(o, opt[i].name), 0);
      assert_int_equal(o->comp.send, CONCH_COMPRESSION_CUSTOM_FIRST);
      assert_int_equal(conch__comp_compress(&cs, &o->comp, o->comp.send,
                                            (const uint8_t *)"x", 1, &out),
                       0);
      assert_int_equal(conch__buf_size(&out), 2); /* the marker and 'x' */
    }
    conch__comps_clear(&cs);
    conch__buf_free(&out, conch_mem_default());
    conch_client_opts_free(o);
  }
  /* The server's default accepted list: every built-in the build has. */
  conch__comp_opts_defaults(&so);
  conch__comp_accept_builtins(&so);
  n = conch__comp_accept_value(&so, CONCH_COMPRESSION_IDENTITY, v);
  v[n] = '\0';
  snprintf(want, sizeof(want), "gzip%s%s,deflate%s",
           CONCH_WITH_BROTLI ? ",br" : "", CONCH_WITH_ZSTD ? ",zstd" : "",
           CONCH_WITH_SNAPPY ? ",snappy" : "");
  assert_string_equal(v, want);
}

int main(void) {
  conch_comp_opts co;
  size_t i;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_foreign_streams),
      cmocka_unit_test(test_roundtrips),
      cmocka_unit_test(test_every_truncation),
      cmocka_unit_test(test_corrupt_bytes),
      cmocka_unit_test(test_snappy_framing),
      cmocka_unit_test(test_bombs),
      cmocka_unit_test(test_every_allocation_failure),
      cmocka_unit_test(test_registered),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_built_or_not),
  };

  conch__comp_opts_defaults(&co);
  for (i = 0; i < sizeof(all_codecs) / sizeof(all_codecs[0]); i++) {
    if (conch__comp_valid(&co, all_codecs[i])) {
      codecs[ncodecs++] = all_codecs[i];
    }
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
