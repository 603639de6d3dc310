/* gzip: round trips, members from GNU gzip, header fields, concatenated
   members, every truncation, bad trailers, zlib-wrapped input, limits, a
   1 GiB decompression bomb with bounded memory, context reuse and every
   allocation failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include <conch/status.h>

#include "failmem.h"
#include "gzip.h"

/* `gzip -n` (GNU gzip 1.12) of "Hello, conch!\n" */
static const uint8_t gnu_hello[] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xf3, 0x48,
    0xcd, 0xc9, 0xc9, 0xd7, 0x51, 0x48, 0xce, 0xcf, 0x4b, 0xce, 0x50, 0xe4,
    0x02, 0x00, 0x74, 0x8c, 0xad, 0x1c, 0x0e, 0x00, 0x00, 0x00,
};
/* `gzip -9` (GNU gzip 1.12) of conch.txt, 20 fox lines: FNAME and MTIME */
static const uint8_t gnu_fox[] = {
    0x1f, 0x8b, 0x08, 0x08, 0x25, 0x7d, 0x93, 0x65, 0x02, 0x03, 0x63, 0x6f,
    0x6e, 0x63, 0x68, 0x2e, 0x74, 0x78, 0x74, 0x00, 0x0b, 0xc9, 0x48, 0x55,
    0x28, 0x2c, 0xcd, 0x4c, 0xce, 0x56, 0x48, 0x2a, 0xca, 0x2f, 0xcf, 0x53,
    0x48, 0xcb, 0xaf, 0x50, 0xc8, 0x2a, 0xcd, 0x2d, 0x28, 0x56, 0xc8, 0x2f,
    0x4b, 0x2d, 0x52, 0x28, 0x01, 0x4a, 0xe7, 0x24, 0x56, 0x55, 0x2a, 0xa4,
    0xe4, 0xa7, 0xeb, 0x71, 0x85, 0x8c, 0x2a, 0x1e, 0x55, 0x3c, 0xaa, 0x98,
    0xda, 0x8a, 0x01, 0xc5, 0x0d, 0xd0, 0x56, 0x84, 0x03, 0x00, 0x00,
};
/* `gzip -n` (GNU gzip 1.12) of an empty file */
static const uint8_t gnu_empty[] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03,
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};
/* Hand-built: FEXTRA, FNAME, FCOMMENT and FHCRC all set, OS 255 */
static const uint8_t all_fields[] = {
    0x1f, 0x8b, 0x08, 0x1e, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x06, 0x00,
    0x43, 0x63, 0x02, 0x00, 0x68, 0x69, 0x78, 0x2e, 0x74, 0x78, 0x74, 0x00,
    0x63, 0x6f, 0x6e, 0x63, 0x68, 0x00, 0xd1, 0x9f, 0xcb, 0x48, 0xcd, 0xc9,
    0xc9, 0xd7, 0x51, 0xc8, 0x2f, 0x28, 0xc9, 0xcc, 0xcf, 0x4b, 0xcc, 0x51,
    0xc8, 0x48, 0x4d, 0x4c, 0x49, 0x2d, 0x52, 0x48, 0xcb, 0x4c, 0xcd, 0x49,
    0x29, 0x06, 0x00, 0x28, 0xf0, 0xf9, 0xd7, 0x1d, 0x00, 0x00, 0x00,
};

static const char hello_txt[] = "Hello, conch!\n";
static const char all_fields_txt[] = "hello, optional header fields";
static const char fox_line[] = "The quick brown fox jumps over the lazy dog.\n";

/* An allocator that tracks live and peak bytes, to bound the memory an
   inflate may use (failmem counts blocks, not bytes). */
typedef union meter_hdr {
  size_t size;
  max_align_t align;
} meter_hdr;

typedef struct meter {
  size_t live;
  size_t peak;
} meter;

static void meter_note(meter *m, size_t freed, size_t added) {
  m->live = m->live - freed + added;
  if (m->live > m->peak) {
    m->peak = m->live;
  }
}

static void *meter_malloc(size_t size, void *ud) {
  meter_hdr *h;

  if (size > SIZE_MAX - sizeof(*h)) {
    return NULL;
  }
  h = malloc(sizeof(*h) + size);
  if (h == NULL) {
    return NULL;
  }
  h->size = size;
  meter_note(ud, 0, size);
  return h + 1;
}

static void meter_free(void *p, void *ud) {
  meter_hdr *h;

  if (p == NULL) {
    return;
  }
  h = (meter_hdr *)p - 1;
  meter_note(ud, h->size, 0);
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
  meter_hdr *h, *nh;
  size_t old;

  if (p == NULL) {
    return meter_malloc(size, ud);
  }
  if (size > SIZE_MAX - sizeof(*h)) {
    return NULL;
  }
  h = (meter_hdr *)p - 1;
  old = h->size;
  nh = realloc(h, sizeof(*nh) + size);
  if (nh == NULL) {
    return NULL;
  }
  nh->size = size;
  meter_note(ud, old, size);
  return nh + 1;
}

static conch_mem meter_mem(meter *m) {
  conch_mem mem = {m, meter_malloc, meter_free, meter_calloc, meter_realloc};
  memset(m, 0, sizeof(*m));
  return mem;
}

static uint32_t rng_next(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *s = x;
  return x;
}

/* Compressible, text-like bytes: words drawn from a small list. */
static void fill_text(uint8_t *p, size_t n, uint32_t seed) {
  static const char *const words[] = {"conch ", "gzip ",   "envelope ",
                                      "grpc ",  "stream ", "deflate\n",
                                      "a ",     "the ",    "message "};
  size_t i = 0;

  while (i < n) {
    const char *w = words[rng_next(&seed) % 9];
    for (; *w != '\0' && i < n; w++) {
      p[i++] = (uint8_t)*w;
    }
  }
}

static void fill_random(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (uint8_t)(rng_next(&seed) >> 24);
  }
}

static uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* One RFC 1952 member as zlib writes it, holding exactly |in|. */
static void check_member(const uint8_t *z, size_t zlen, const uint8_t *in,
                         size_t n) {
  assert_true(zlen >= 20);
  assert_int_equal(z[0], 0x1f);
  assert_int_equal(z[1], 0x8b);
  assert_int_equal(z[2], 8); /* deflate */
  assert_int_equal(z[3], 0); /* no optional fields */
  assert_int_equal(z[9], 3); /* zlib's OS byte */
  assert_int_equal(get_le32(z + zlen - 8), crc32(0, in, (uInt)n)); /* CRC-32 */
  assert_int_equal(get_le32(z + zlen - 4), (uint32_t)n);           /* ISIZE */
}

/* Appends |n| bytes to a plain malloc'd buffer (test-side data). */
static uint8_t *cat(uint8_t *dst, size_t *dlen, const void *p, size_t n) {
  uint8_t *q = realloc(dst, *dlen + n + 1);
  assert_non_null(q);
  memcpy(q + *dlen, p, n);
  *dlen += n;
  return q;
}

static void expect_inflate(conch_gzip *gz, const uint8_t *z, size_t zlen,
                           const void *want, size_t wantlen) {
  conch_buf out = CONCH_BUF_INIT;

  assert_int_equal(conch__gzip_inflate(gz, z, zlen, 0, &out), 0);
  assert_int_equal(conch__buf_size(&out), wantlen);
  if (wantlen > 0) {
    assert_memory_equal(conch__buf_head(&out), want, wantlen);
  }
  conch__buf_free(&out, gz->mem);
}

/* Expects |rv| and no output; |out| is pre-filled to prove it is kept. */
static void expect_inflate_error(conch_gzip *gz, const uint8_t *z, size_t zlen,
                                 size_t max_out, int rv) {
  conch_buf out = CONCH_BUF_INIT;
  int got;

  assert_int_equal(conch__buf_append(&out, gz->mem, "keep", 4), 0);
  got = conch__gzip_inflate(gz, z, zlen, max_out, &out);
  if (got != rv) {
    fail_msg("inflate of %zu bytes: got %d, want %d", zlen, got, rv);
  }
  assert_int_equal(conch__buf_size(&out), 4);
  assert_memory_equal(conch__buf_head(&out), "keep", 4);
  conch__buf_free(&out, gz->mem);
}

static void roundtrip(conch_gzip *gz, int level, const uint8_t *in, size_t n) {
  conch_buf z = CONCH_BUF_INIT;

  assert_int_equal(conch__gzip_deflate(gz, level, in, n, &z), 0);
  check_member(z.data, z.len, in, n);
  expect_inflate(gz, z.data, z.len, in, n);
  if (n > 1) { /* a limit of 0 means none */
    conch_buf out = CONCH_BUF_INIT;
    /* A limit of exactly the size passes; one less does not. */
    assert_int_equal(conch__gzip_inflate(gz, z.data, z.len, n, &out), 0);
    assert_int_equal(out.len, n);
    conch__buf_free(&out, gz->mem);
    expect_inflate_error(gz, z.data, z.len, n - 1, CONCH_ERR_LIMIT);
  }
  conch__buf_free(&z, gz->mem);
}

static void test_deflate_empty(void **state) {
  static const uint8_t want[20] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3,
                                   3,    0,    0, 0, 0, 0, 0, 0, 0, 0};
  conch_gzip gz;
  conch_buf z = CONCH_BUF_INIT;
  (void)state;

  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  assert_int_equal(conch__gzip_deflate(&gz, -1, NULL, 0, &z), 0);
  assert_int_equal(z.len, 20);
  assert_memory_equal(z.data, want, 20);
  expect_inflate(&gz, z.data, z.len, "", 0);
  expect_inflate(&gz, gnu_empty, sizeof(gnu_empty), "", 0);
  conch__buf_free(&z, gz.mem);
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_roundtrip_small_all_levels(void **state) {
  conch_gzip gz;
  uint8_t text[3000];
  (void)state;

  fill_text(text, sizeof(text), 7);
  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  for (int level = -1; level <= 9; level++) {
    conch_buf z = CONCH_BUF_INIT;
    int xfl = level == 9 ? 2 : (level == 0 || level == 1) ? 4 : 0;

    roundtrip(&gz, level, (const uint8_t *)"", 0);
    roundtrip(&gz, level, (const uint8_t *)"x", 1);
    roundtrip(&gz, level, (const uint8_t *)hello_txt, strlen(hello_txt));
    roundtrip(&gz, level, text, sizeof(text));
    /* XFL reflects the level: proof the context was set up again. */
    assert_int_equal(conch__gzip_deflate(&gz, level, text, 10, &z), 0);
    assert_int_equal(z.data[8], xfl);
    assert_int_equal(gz.def_level[0], level); /* 10 bytes: the smallest class */
    conch__buf_free(&z, gz.mem);
  }
  /* Back and forth between two levels. */
  for (int i = 0; i < 6; i++) {
    roundtrip(&gz, i % 2 == 0 ? 1 : 9, text, sizeof(text));
  }
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_roundtrip_large(void **state) {
  size_t n = (size_t)6 << 20;
  uint8_t *p = malloc(n);
  conch_gzip gz;
  (void)state;

  assert_non_null(p);
  conch__gzip_init(&gz, conch_mem_default());
  fill_text(p, n, 11);
  roundtrip(&gz, -1, p, n);
  roundtrip(&gz, 1, p, n);
  fill_random(p, (size_t)3 << 20, 12); /* incompressible head */
  roundtrip(&gz, 0, p, (size_t)3 << 20);
  roundtrip(&gz, 6, p, n);
  conch__gzip_clear(&gz);
  free(p);
}

static void test_interop_gnu_gzip(void **state) {
  conch_gzip gz;
  char fox[sizeof(fox_line) * 20];
  uint8_t go_style[sizeof(gnu_hello)];
  (void)state;

  for (int i = 0; i < 20; i++) {
    memcpy(fox + i * (sizeof(fox_line) - 1), fox_line, sizeof(fox_line) - 1);
  }
  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  expect_inflate(&gz, gnu_hello, sizeof(gnu_hello), hello_txt,
                 strlen(hello_txt));
  expect_inflate(&gz, gnu_fox, sizeof(gnu_fox), fox,
                 20 * (sizeof(fox_line) - 1));
  expect_inflate(&gz, gnu_empty, sizeof(gnu_empty), "", 0);
  expect_inflate(&gz, all_fields, sizeof(all_fields), all_fields_txt,
                 strlen(all_fields_txt));
  /* Go writes OS 255 (unknown); the header is not covered by the CRC. */
  memcpy(go_style, gnu_hello, sizeof(gnu_hello));
  go_style[9] = 0xff;
  expect_inflate(&gz, go_style, sizeof(go_style), hello_txt, strlen(hello_txt));
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_multi_member(void **state) {
  conch_gzip gz;
  conch_buf z = CONCH_BUF_INIT;
  uint8_t *in = NULL, *want = NULL;
  size_t inlen = 0, wantlen = 0;
  (void)state;

  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  assert_int_equal(
      conch__gzip_deflate(&gz, -1, (const uint8_t *)"second|", 7, &z), 0);
  in = cat(in, &inlen, gnu_hello, sizeof(gnu_hello));
  want = cat(want, &wantlen, hello_txt, strlen(hello_txt));
  in = cat(in, &inlen, z.data, z.len);
  want = cat(want, &wantlen, "second|", 7);
  in = cat(in, &inlen, gnu_empty, sizeof(gnu_empty));
  in = cat(in, &inlen, all_fields, sizeof(all_fields));
  want = cat(want, &wantlen, all_fields_txt, strlen(all_fields_txt));
  in = cat(in, &inlen, z.data, z.len);
  want = cat(want, &wantlen, "second|", 7);

  expect_inflate(&gz, in, inlen, want, wantlen);
  /* The limit counts the output of all members together. */
  expect_inflate_error(&gz, in, inlen, wantlen - 1, CONCH_ERR_LIMIT);
  /* A truncated second member fails the whole input. */
  expect_inflate_error(&gz, in, sizeof(gnu_hello) + 12, 0, CONCH_ERR_GZIP);
  /* Two empty members. */
  {
    uint8_t two[2 * sizeof(gnu_empty)];
    memcpy(two, gnu_empty, sizeof(gnu_empty));
    memcpy(two + sizeof(gnu_empty), gnu_empty, sizeof(gnu_empty));
    expect_inflate(&gz, two, sizeof(two), "", 0);
  }
  free(in);
  free(want);
  conch__buf_free(&z, gz.mem);
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_trailing_garbage(void **state) {
  uint8_t zlib_abc[64];
  uLongf zlib_len = sizeof(zlib_abc);
  const struct {
    const void *p;
    size_t n;
  } tails[] = {
      {"\0", 1},
      {"x", 1},
      {"\x1f", 1},
      {"\x1f\x8b", 2},
      {"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10}, /* header only */
      {"\0\0\0\0\0\0\0\0", 8},
      {"\n", 1},
      {zlib_abc, 0}, /* a zlib-wrapped stream; length set below */
  };
  conch_gzip gz;
  (void)state;

  assert_int_equal(compress2(zlib_abc, &zlib_len, (const Bytef *)"abc", 3, 6),
                   Z_OK);
  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
    uint8_t *in = NULL;
    size_t inlen = 0;
    size_t n = tails[i].p == zlib_abc ? (size_t)zlib_len : tails[i].n;
    in = cat(in, &inlen, gnu_hello, sizeof(gnu_hello));
    in = cat(in, &inlen, tails[i].p, n);
    expect_inflate_error(&gz, in, inlen, 0, CONCH_ERR_GZIP);
    free(in);
  }
  /* The context is still good afterwards. */
  expect_inflate(&gz, gnu_hello, sizeof(gnu_hello), hello_txt,
                 strlen(hello_txt));
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_truncated(void **state) {
  const struct {
    const uint8_t *p;
    size_t n;
  } v[] = {
      {gnu_hello, sizeof(gnu_hello)},
      {gnu_fox, sizeof(gnu_fox)},
      {gnu_empty, sizeof(gnu_empty)},
      {all_fields, sizeof(all_fields)},
  };
  conch_gzip gz;
  conch_buf big = CONCH_BUF_INIT;
  uint8_t *text;
  size_t tlen = 200000;
  (void)state;

  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    for (size_t cut = 1; cut < v[i].n; cut++) {
      expect_inflate_error(&gz, v[i].p, cut, 0, CONCH_ERR_GZIP);
    }
  }
  /* A bigger member, cut in its deflate data and in its trailer; its
     output fills several growth steps before the input runs out. */
  text = malloc(tlen);
  assert_non_null(text);
  fill_text(text, tlen, 3);
  assert_int_equal(conch__gzip_deflate(&gz, -1, text, tlen, &big), 0);
  for (size_t cut = 1; cut < big.len; cut += cut < 64 ? 1 : 997) {
    expect_inflate_error(&gz, big.data, cut, 0, CONCH_ERR_GZIP);
  }
  for (size_t cut = big.len - 12; cut < big.len; cut++) {
    expect_inflate_error(&gz, big.data, cut, 0, CONCH_ERR_GZIP);
  }
  expect_inflate(&gz, big.data, big.len, text, tlen);
  free(text);
  conch__buf_free(&big, gz.mem);
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_bad_trailer_and_header(void **state) {
  uint8_t m[sizeof(gnu_hello)];
  uint8_t f[sizeof(all_fields)];
  size_t n = sizeof(m);
  const uint32_t bad_sizes[] = {0, 13, 15, 0xffffffffu, 14 + 65536};
  conch_gzip gz;
  (void)state;

  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  /* Every single-bit error in CRC-32 and ISIZE. */
  for (size_t byte = n - 8; byte < n; byte++) {
    for (int bit = 0; bit < 8; bit++) {
      memcpy(m, gnu_hello, n);
      m[byte] ^= (uint8_t)(1u << bit);
      expect_inflate_error(&gz, m, n, 0, CONCH_ERR_GZIP);
    }
  }
  /* Wrong lengths, including one that would be a huge allocation if it
     were believed. */
  for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
    memcpy(m, gnu_hello, n);
    put_le32(m + n - 4, bad_sizes[i]);
    expect_inflate_error(&gz, m, n, 0, CONCH_ERR_GZIP);
  }
  /* Header: magic, method, reserved flag bits. */
  memcpy(m, gnu_hello, n);
  m[0] = 0x1e;
  expect_inflate_error(&gz, m, n, 0, CONCH_ERR_GZIP);
  memcpy(m, gnu_hello, n);
  m[1] = 0x8c;
  expect_inflate_error(&gz, m, n, 0, CONCH_ERR_GZIP);
  memcpy(m, gnu_hello, n);
  m[2] = 7;
  expect_inflate_error(&gz, m, n, 0, CONCH_ERR_GZIP);
  for (int bit = 5; bit < 8; bit++) {
    memcpy(m, gnu_hello, n);
    m[3] = (uint8_t)(1u << bit);
    expect_inflate_error(&gz, m, n, 0, CONCH_ERR_GZIP);
  }
  /* FHCRC: the header CRC is checked. */
  memcpy(f, all_fields, sizeof(f));
  f[30] ^= 1;
  expect_inflate_error(&gz, f, sizeof(f), 0, CONCH_ERR_GZIP);
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_not_gzip(void **state) {
  uint8_t buf[256];
  uLongf len = sizeof(buf);
  z_stream zs;
  conch_gzip gz;
  (void)state;

  conch__gzip_init(&gz, failmem_hooks());
  failmem_fail_at((size_t)-1);
  /* zlib wrapper (RFC 1950, gRPC's "deflate"). */
  assert_int_equal(compress2(buf, &len, (const Bytef *)hello_txt,
                             (uLong)strlen(hello_txt), 6),
                   Z_OK);
  expect_inflate_error(&gz, buf, len, 0, CONCH_ERR_GZIP);
  /* Raw deflate. */
  memset(&zs, 0, sizeof(zs));
  assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY),
                   Z_OK);
  zs.next_in = (Bytef *)hello_txt;
  zs.avail_in = (uInt)strlen(hello_txt);
  zs.next_out = buf;
  zs.avail_out = sizeof(buf);
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  expect_inflate_error(&gz, buf, sizeof(buf) - zs.avail_out, 0, CONCH_ERR_GZIP);
  deflateEnd(&zs);
  /* Plain text, a lone magic byte, and nothing at all. */
  expect_inflate_error(&gz, (const uint8_t *)hello_txt, strlen(hello_txt), 0,
                       CONCH_ERR_GZIP);
  expect_inflate_error(&gz, (const uint8_t *)"\x1f", 1, 0, CONCH_ERR_GZIP);
  expect_inflate_error(&gz, gnu_hello, 0, 0, CONCH_ERR_GZIP);
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

/* A gzip member of |mib| MiB of zeros, ~1 KiB per MiB, built without
   compressing it all: after a Z_FULL_FLUSH, each further MiB of zeros
   compresses to the same byte-aligned bytes, which are simply repeated.
   Then a final empty block (03 00) and a correct trailer. */
static uint8_t *make_zero_bomb(size_t mib, size_t *outlen) {
  size_t mb = (size_t)1 << 20;
  uint8_t *zeros = calloc(1, mb);
  uint8_t *first = malloc(mb), *rep = malloc(mb), *check = malloc(mb);
  uint8_t *bomb;
  size_t flen, rlen, pos;
  uLong crc1, crc;
  z_stream zs;

  assert_true(zeros != NULL && first != NULL && rep != NULL && check != NULL);
  assert_true(mib >= 2);
  memset(&zs, 0, sizeof(zs));
  assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY),
                   Z_OK);
  zs.next_in = zeros;
  zs.avail_in = (uInt)mb;
  zs.next_out = first;
  zs.avail_out = (uInt)mb;
  assert_int_equal(deflate(&zs, Z_FULL_FLUSH), Z_OK);
  flen = mb - zs.avail_out;
  zs.next_in = zeros;
  zs.avail_in = (uInt)mb;
  zs.next_out = rep;
  zs.avail_out = (uInt)mb;
  assert_int_equal(deflate(&zs, Z_FULL_FLUSH), Z_OK);
  rlen = mb - zs.avail_out;
  zs.next_in = zeros;
  zs.avail_in = (uInt)mb;
  zs.next_out = check;
  zs.avail_out = (uInt)mb;
  assert_int_equal(deflate(&zs, Z_FULL_FLUSH), Z_OK);
  /* The repetition is what makes the construction valid. */
  assert_int_equal(mb - zs.avail_out, rlen);
  assert_memory_equal(check, rep, rlen);
  deflateEnd(&zs);

  bomb = malloc(flen + (mib - 1) * rlen + 2 + 8);
  assert_non_null(bomb);
  memcpy(bomb, first, flen);
  pos = flen;
  for (size_t i = 1; i < mib; i++) {
    memcpy(bomb + pos, rep, rlen);
    pos += rlen;
  }
  bomb[pos++] = 0x03; /* BFINAL, fixed Huffman, end of block */
  bomb[pos++] = 0x00;
  crc1 = crc32(0, zeros, (uInt)mb);
  crc = crc1;
  for (size_t i = 1; i < mib; i++) {
    crc = crc32_combine(crc, crc1, (z_off_t)mb);
  }
  put_le32(bomb + pos, (uint32_t)crc);
  put_le32(bomb + pos + 4, (uint32_t)(mib * mb));
  pos += 8;
  free(zeros);
  free(first);
  free(rep);
  free(check);
  *outlen = pos;
  return bomb;
}

static void test_bomb_construction_is_valid(void **state) {
  size_t n, mb = (size_t)1 << 20;
  uint8_t *bomb = make_zero_bomb(8, &n);
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  (void)state;

  conch__gzip_init(&gz, conch_mem_default());
  assert_int_equal(conch__gzip_inflate(&gz, bomb, n, 0, &out), 0);
  assert_int_equal(out.len, 8 * mb);
  for (size_t i = 0; i < out.len; i++) {
    if (out.data[i] != 0) {
      fail_msg("non-zero byte at %zu", i);
    }
  }
  conch__buf_free(&out, gz.mem);
  conch__gzip_clear(&gz);
  free(bomb);
}

static void test_bomb_1gib(void **state) {
  size_t n, mb = (size_t)1 << 20;
  uint8_t *bomb = make_zero_bomb(1024, &n);
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  meter m;
  conch_mem mem = meter_mem(&m);
  (void)state;

  /* About 1 MB on the wire for 1 GiB of output. */
  assert_true(n < 2 * mb);
  conch__gzip_init(&gz, &mem);
  assert_int_equal(conch__gzip_inflate(&gz, bomb, n, mb, &out),
                   CONCH_ERR_LIMIT);
  assert_int_equal(conch__buf_size(&out), 0);
  /* The output buffer never grew much past the limit: 1 MiB + 1 byte of
     output may double the buffer once, plus zlib's state and window. */
  assert_true(m.peak <= 2 * mb + 128 * 1024);

  m.peak = m.live;
  assert_int_equal(conch__gzip_inflate(&gz, bomb, n, 16 * mb, &out),
                   CONCH_ERR_LIMIT);
  assert_true(m.peak <= 32 * mb + 128 * 1024);
  conch__buf_free(&out, gz.mem);
  conch__gzip_clear(&gz);
  assert_int_equal(m.live, 0);
  free(bomb);
}

static void test_isize_not_trusted(void **state) {
  uint8_t m[sizeof(gnu_hello)];
  conch_gzip gz;
  meter me;
  conch_mem mem = meter_mem(&me);
  (void)state;

  /* ISIZE claims 4 GiB - 1: no buffer is sized from it. */
  memcpy(m, gnu_hello, sizeof(m));
  put_le32(m + sizeof(m) - 4, 0xffffffffu);
  conch__gzip_init(&gz, &mem);
  expect_inflate_error(&gz, m, sizeof(m), 0, CONCH_ERR_GZIP);
  assert_true(me.peak < 256 * 1024);
  conch__gzip_clear(&gz);
  assert_int_equal(me.live, 0);
}

static void test_output_buffer_kept(void **state) {
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  const conch_mem *mem = failmem_hooks();
  size_t hl = strlen(hello_txt);
  (void)state;

  failmem_fail_at((size_t)-1);
  conch__gzip_init(&gz, mem);
  /* Live bytes not at the start of the buffer: growth may compact it. */
  assert_int_equal(conch__buf_append(&out, mem, "0123456789", 10), 0);
  conch__buf_consume(&out, 4);
  assert_int_equal(
      conch__gzip_inflate(&gz, gnu_hello, sizeof(gnu_hello), 0, &out), 0);
  assert_int_equal(conch__buf_size(&out), 6 + hl);
  assert_memory_equal(conch__buf_head(&out), "456789", 6);
  assert_memory_equal(conch__buf_head(&out) + 6, hello_txt, hl);

  /* Failures leave the size and the bytes as they were. */
  assert_int_equal(
      conch__gzip_inflate(&gz, gnu_hello, sizeof(gnu_hello) - 1, 0, &out),
      CONCH_ERR_GZIP);
  assert_int_equal(conch__buf_size(&out), 6 + hl);
  assert_int_equal(
      conch__gzip_inflate(&gz, gnu_hello, sizeof(gnu_hello), hl - 1, &out),
      CONCH_ERR_LIMIT);
  assert_int_equal(conch__buf_size(&out), 6 + hl);
  assert_int_equal(conch__gzip_deflate(&gz, 10, (const uint8_t *)"a", 1, &out),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch__gzip_deflate(&gz, -2, (const uint8_t *)"a", 1, &out),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch__buf_size(&out), 6 + hl);
  assert_memory_equal(conch__buf_head(&out), "456789", 6);
  assert_memory_equal(conch__buf_head(&out) + 6, hello_txt, hl);

  /* Deflate appends too. */
  assert_int_equal(conch__gzip_deflate(&gz, 6, (const uint8_t *)"a", 1, &out),
                   0);
  assert_memory_equal(conch__buf_head(&out), "456789", 6);
  check_member(conch__buf_head(&out) + 6 + hl, conch__buf_size(&out) - 6 - hl,
               (const uint8_t *)"a", 1);
  conch__buf_free(&out, mem);
  conch__gzip_clear(&gz);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_steady_state_allocates_nothing(void **state) {
  conch_gzip gz;
  conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
  const conch_mem *mem = failmem_hooks();
  uint8_t text[20000];
  uint8_t bad[sizeof(gnu_hello)];
  (void)state;

  fill_text(text, sizeof(text), 5);
  memcpy(bad, gnu_hello, sizeof(bad));
  bad[sizeof(bad) - 5] ^= 1;
  failmem_fail_at((size_t)-1);
  conch__gzip_init(&gz, mem);
  assert_int_equal(conch__gzip_deflate(&gz, -1, text, sizeof(text), &z), 0);
  assert_int_equal(conch__gzip_inflate(&gz, z.data, z.len, 0, &out), 0);
  for (int i = 0; i < 20; i++) {
    conch__buf_reset(&z);
    conch__buf_reset(&out);
    failmem_fail_at((size_t)-1);
    assert_int_equal(conch__gzip_deflate(&gz, -1, text, sizeof(text), &z), 0);
    assert_int_equal(conch__gzip_inflate(&gz, z.data, z.len, 0, &out), 0);
    assert_memory_equal(out.data, text, sizeof(text));
    /* A failure in between does not spoil the context. */
    assert_int_equal(conch__gzip_inflate(&gz, bad, sizeof(bad), 0, &out),
                     CONCH_ERR_GZIP);
    assert_int_equal(failmem_count(), 0);
  }
  conch__buf_free(&z, mem);
  conch__buf_free(&out, mem);
  conch__gzip_clear(&gz);
  conch__gzip_clear(&gz); /* twice is harmless */
  assert_int_equal(failmem_live_blocks(), 0);
}

/* Sizes on both sides of every size class's edge (512 B to 32 KiB
   windows), and past the largest. */
static const size_t mixed_sizes[] = {0,    1,    100,   511,   512,   513,
                                     1024, 1025, 4096,  4097,  16384, 20000,
                                     32768, 32769, 70000, 300,  5,     2048};
#define NMIXED (sizeof(mixed_sizes) / sizeof(mixed_sizes[0]))

/* Messages of mixed sizes, text and random, through one context in both
   formats, each round trip checked (also by zlib itself, with its default
   window, as any peer's inflate would); a second pass through the same
   context allocates nothing but output, its streams all made. */
static void test_mixed_sizes_one_context(void **state) {
  static uint8_t text[70000], rnd[70000];
  const conch_mem *mem = failmem_hooks();
  (void)state;

  fill_text(text, sizeof(text), 21);
  fill_random(rnd, sizeof(rnd), 22);
  for (int zlib_fmt = 0; zlib_fmt < 2; zlib_fmt++) {
    conch_gzip gz;
    if (zlib_fmt) {
      conch__gzip_init_zlib(&gz, mem);
    } else {
      conch__gzip_init(&gz, mem);
    }
    for (int pass = 0; pass < 2; pass++) {
      conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
      assert_int_equal(conch__buf_reserve(&z, mem, 80000), 0);
      assert_int_equal(conch__buf_reserve(&out, mem, 80000), 0);
      failmem_fail_at((size_t)-1);
      for (size_t i = 0; i < 2 * NMIXED; i++) {
        size_t n = mixed_sizes[i % NMIXED];
        const uint8_t *in = i < NMIXED ? text : rnd;
        uint8_t plain[70000 + 16];
        uLongf plen = sizeof(plain);
        conch__buf_reset(&z);
        conch__buf_reset(&out);
        assert_int_equal(conch__gzip_deflate(&gz, -1, in, n, &z), 0);
        if (!zlib_fmt) {
          check_member(z.data, z.len, in, n);
        } else {
          /* uncompress(): zlib's inflate with its 32 KiB window. */
          assert_int_equal(uncompress(plain, &plen, z.data, (uLong)z.len),
                           Z_OK);
          assert_int_equal(plen, n);
          assert_true(n == 0 || memcmp(plain, in, n) == 0);
        }
        assert_int_equal(conch__gzip_inflate(&gz, z.data, z.len, 0, &out), 0);
        assert_int_equal(conch__buf_size(&out), n);
        assert_true(n == 0 || memcmp(out.data, in, n) == 0);
        if (i < NMIXED && n > 2000) {
          assert_true(z.len < n / 2); /* compressed, not just wrapped */
        }
      }
      if (pass == 1) {
        assert_int_equal(failmem_count(), 0);
      }
      conch__buf_free(&z, mem);
      conch__buf_free(&out, mem);
    }
    conch__gzip_clear(&gz);
  }
  assert_int_equal(failmem_live_blocks(), 0);
}

/* A small message sets up only a small stream: its deflate state is a few
   KiB, not zlib's 256 KiB for the default window and memLevel, and the
   stream of the largest class is made only for a large message. */
static void test_small_message_small_state(void **state) {
  meter m;
  conch_mem mem = meter_mem(&m);
  conch_gzip gz;
  conch_buf z = CONCH_BUF_INIT;
  uint8_t text[40000];
  size_t small;
  (void)state;

  fill_text(text, sizeof(text), 23);
  conch__gzip_init(&gz, &mem);
  assert_int_equal(conch__buf_reserve(&z, conch_mem_default(), 50000), 0);
  assert_int_equal(conch__gzip_deflate(&gz, -1, text, 485, &z), 0);
  assert_true(gz.def_ready[0]);
  small = m.live;
  if (small > 16384) {
    fail_msg("485 bytes set up %zu bytes of deflate state", small);
  }
  conch__buf_reset(&z);
  assert_int_equal(conch__gzip_deflate(&gz, -1, text, sizeof(text), &z), 0);
  assert_true(gz.def_ready[CONCH__GZ_CLASSES - 1]);
  assert_true(m.live - small > 200000); /* the full-size stream */
  conch__gzip_clear(&gz);
  assert_int_equal(m.live, 0);
  conch__buf_free(&z, conch_mem_default());
}

/* A message whose compression fails (each allocation in turn: a class's
   stream set-up, the output) leaves |out| as it was, and the next message
   of every class, through the same context, comes out whole. */
static void test_message_after_failed_one(void **state) {
  static const size_t sizes[] = {100, 3000, 50000};
  uint8_t text[50000];
  long live0 = failmem_live_blocks();
  (void)state;

  fill_text(text, sizeof(text), 24);
  for (size_t k = 0; k < 3; k++) {
    for (size_t n = 0;; n++) {
      conch_gzip gz;
      conch_buf z = CONCH_BUF_INIT;
      int rv;

      failmem_fail_at((size_t)-1);
      conch__gzip_init(&gz, failmem_hooks());
      if (n % 2 == 1) {
        /* The stream made already: the failure lands in the output. */
        assert_int_equal(conch__gzip_deflate(&gz, -1, text, sizes[k], &z), 0);
        conch__buf_free(&z, gz.mem);
      }
      assert_int_equal(conch__buf_append(&z, gz.mem, "keep", 4), 0);
      failmem_fail_at(n / 2);
      rv = conch__gzip_deflate(&gz, -1, text, sizes[k], &z);
      if (!failmem_fired()) {
        assert_int_equal(rv, 0);
        conch__buf_free(&z, gz.mem);
        conch__gzip_clear(&gz);
        if (n % 2 == 1) {
          break;
        }
        continue;
      }
      assert_int_equal(rv, CONCH_ERR_NOMEM);
      assert_int_equal(conch__buf_size(&z), 4);
      assert_memory_equal(conch__buf_head(&z), "keep", 4);
      conch__buf_free(&z, gz.mem);
      failmem_fail_at((size_t)-1);
      for (size_t j = 0; j < 3; j++) {
        conch__buf_free(&z, gz.mem);
        roundtrip(&gz, -1, text, sizes[(k + j) % 3]);
      }
      conch__gzip_clear(&gz);
      assert_int_equal(failmem_live_blocks(), live0);
    }
  }
}

static void test_inflate_every_allocation_failure(void **state) {
  conch_gzip gz;
  conch_buf z = CONCH_BUF_INIT;
  uint8_t *text, *in = NULL;
  size_t tlen = 300000, inlen = 0;
  long live0 = failmem_live_blocks();
  size_t n;
  (void)state;

  /* Two members, so the reset-and-continue path meets failures too. */
  text = malloc(tlen);
  assert_non_null(text);
  fill_text(text, tlen, 9);
  conch__gzip_init(&gz, conch_mem_default());
  assert_int_equal(conch__gzip_deflate(&gz, -1, text, tlen, &z), 0);
  in = cat(in, &inlen, z.data, z.len);
  in = cat(in, &inlen, z.data, z.len);
  conch__buf_free(&z, gz.mem);
  conch__gzip_clear(&gz);

  for (n = 0;; n++) {
    conch_buf out = CONCH_BUF_INIT;
    int rv;

    conch__gzip_init(&gz, failmem_hooks());
    failmem_fail_at(n);
    rv = conch__gzip_inflate(&gz, in, inlen, 0, &out);
    if (rv == 0) {
      /* Once more on the same context: the reset path. */
      conch__buf_reset(&out);
      rv = conch__gzip_inflate(&gz, in, inlen, 0, &out);
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_int_equal(conch__buf_size(&out), 2 * tlen);
      assert_memory_equal(out.data, text, tlen);
      assert_memory_equal(out.data + tlen, text, tlen);
    } else {
      assert_int_equal(rv, CONCH_ERR_NOMEM);
      assert_int_equal(conch__buf_size(&out), 0);
    }
    conch__buf_free(&out, gz.mem);
    conch__gzip_clear(&gz);
    assert_int_equal(failmem_live_blocks(), live0);
    if (!failmem_fired()) {
      break;
    }
  }
  assert_true(n >= 3); /* state, window, output: all were exercised */
  free(in);
  free(text);
}

static void test_deflate_every_allocation_failure(void **state) {
  conch_gzip gz;
  uint8_t text[50000];
  long live0 = failmem_live_blocks();
  size_t n;
  (void)state;

  fill_text(text, sizeof(text), 10);
  for (n = 0;; n++) {
    conch_buf z = CONCH_BUF_INIT, out = CONCH_BUF_INIT;
    size_t before = 0;
    int rv;

    conch__gzip_init(&gz, failmem_hooks());
    failmem_fail_at(n);
    rv = conch__gzip_deflate(&gz, -1, text, sizeof(text), &z);
    if (rv == 0) {
      /* Level change: a second setup that can fail as well. */
      before = conch__buf_size(&z);
      rv = conch__gzip_deflate(&gz, 1, text, sizeof(text), &z);
      if (rv != 0) {
        assert_int_equal(conch__buf_size(&z), before);
      }
    }
    if (rv == 0) {
      rv = conch__gzip_inflate(&gz, z.data, z.len, 0, &out);
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      /* z holds member(-1) then member(1). */
      assert_int_equal(conch__buf_size(&out), 2 * sizeof(text));
      assert_memory_equal(out.data, text, sizeof(text));
      assert_memory_equal(out.data + sizeof(text), text, sizeof(text));
    } else {
      assert_int_equal(rv, CONCH_ERR_NOMEM);
    }
    conch__buf_free(&z, gz.mem);
    conch__buf_free(&out, gz.mem);
    conch__gzip_clear(&gz);
    assert_int_equal(failmem_live_blocks(), live0);
    if (!failmem_fired()) {
      break;
    }
  }
  assert_true(n >= 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deflate_empty),
      cmocka_unit_test(test_roundtrip_small_all_levels),
      cmocka_unit_test(test_roundtrip_large),
      cmocka_unit_test(test_interop_gnu_gzip),
      cmocka_unit_test(test_multi_member),
      cmocka_unit_test(test_trailing_garbage),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_bad_trailer_and_header),
      cmocka_unit_test(test_not_gzip),
      cmocka_unit_test(test_bomb_construction_is_valid),
      cmocka_unit_test(test_bomb_1gib),
      cmocka_unit_test(test_isize_not_trusted),
      cmocka_unit_test(test_output_buffer_kept),
      cmocka_unit_test(test_steady_state_allocates_nothing),
      cmocka_unit_test(test_mixed_sizes_one_context),
      cmocka_unit_test(test_small_message_small_state),
      cmocka_unit_test(test_message_after_failed_one),
      cmocka_unit_test(test_inflate_every_allocation_failure),
      cmocka_unit_test(test_deflate_every_allocation_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
