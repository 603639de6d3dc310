/* Envelope reader: reassembly at every split point, zero-copy vs copied
   delivery, flag masks, limits checked on the bare prefix, huge declared
   lengths, empty payloads, callback abort and allocation failures; many
   large messages to a feed, the declared length reserved once (and the
   limit still held), input that ends inside an envelope. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/status.h>

#include "envelope.h"
#include "failmem.h"

#define MAX_ENV 64

/* One envelope of a test stream: where its payload sits in the source. */
typedef struct expect {
  uint8_t flags;
  size_t off;
  size_t len;
} expect;

/* A test stream built from envelopes. */
typedef struct stream {
  uint8_t *data;
  size_t len;
  expect env[MAX_ENV];
  size_t nenv;
} stream;

/* What the callback saw, and how the test wants it to behave. */
typedef struct sink {
  const stream *src;
  size_t chunk_start; /* offset in |src| of the chunk being fed */
  size_t chunk_end;
  size_t got;         /* envelopes delivered */
  size_t zero_copied; /* ... of those, delivered from the input */
  size_t copied;      /* ... delivered from the reassembly buffer */
  size_t bytes;       /* payload bytes delivered */
  size_t abort_at;    /* return abort_rv on this envelope; SIZE_MAX: never */
  int abort_rv;
  const conch_env_reader *reader;
  int boundary_in_cb; /* at_boundary() seen during the last callback */
} sink;

static void stream_add(stream *s, uint8_t flags, size_t len, uint8_t seed) {
  uint8_t *p;

  assert_true(s->nenv < MAX_ENV);
  p = realloc(s->data, s->len + CONCH_ENV_PREFIX + len);
  assert_non_null(p);
  s->data = p;
  conch__env_write_prefix(p + s->len, flags, (uint32_t)len);
  for (size_t i = 0; i < len; i++) {
    p[s->len + CONCH_ENV_PREFIX + i] = (uint8_t)(seed + i * 31);
  }
  s->env[s->nenv].flags = flags;
  s->env[s->nenv].off = s->len + CONCH_ENV_PREFIX;
  s->env[s->nenv].len = len;
  s->nenv++;
  s->len += CONCH_ENV_PREFIX + len;
}

static void stream_free(stream *s) {
  free(s->data);
  memset(s, 0, sizeof(*s));
}

/* A mix of sizes, flags and empty payloads, all valid for Connect. */
static void stream_mixed(stream *s) {
  memset(s, 0, sizeof(*s));
  stream_add(s, 0x00, 5, 1);
  stream_add(s, 0x01, 0, 2);
  stream_add(s, 0x00, 1, 3);
  stream_add(s, 0x00, 0, 4);
  stream_add(s, 0x00, 0, 5);
  stream_add(s, 0x01, 300, 6);
  stream_add(s, 0x00, 2, 7);
  stream_add(s, 0x00, 4, 8);
  stream_add(s, 0x02, 17, 9);
}

static void sink_init(sink *k, const stream *src, const conch_env_reader *r) {
  memset(k, 0, sizeof(*k));
  k->src = src;
  k->abort_at = SIZE_MAX;
  k->reader = r;
}

static int on_env(void *user_data, uint8_t flags, const uint8_t *payload,
                  size_t len) {
  sink *k = user_data;
  const expect *e;
  const uint8_t *want;
  size_t idx = k->got++;

  assert_true(idx < k->src->nenv);
  e = &k->src->env[idx];
  want = k->src->data + e->off;
  assert_int_equal(flags, e->flags);
  assert_int_equal(len, e->len);
  assert_non_null(payload);
  k->boundary_in_cb = conch__env_reader_at_boundary(k->reader);
  if (len > 0) {
    assert_memory_equal(payload, want, len);
    if (e->off >= k->chunk_start) {
      /* The whole payload is in the current chunk: it must be handed on
         in place. */
      assert_ptr_equal(payload, want);
      k->zero_copied++;
    } else {
      /* It spanned chunks: it must come from the reader's buffer, not
         from the caller's memory. */
      assert_true(payload < k->src->data ||
                  payload >= k->src->data + k->src->len);
      k->copied++;
    }
  }
  k->bytes += len;
  if (idx == k->abort_at) {
    return k->abort_rv;
  }
  return 0;
}

static int feed(conch_env_reader *r, sink *k, size_t from, size_t to) {
  k->chunk_start = from;
  k->chunk_end = to;
  return conch__env_reader_feed(r, k->src->data + from, to - from, on_env, k);
}

/* Never called: for feeds that must fail before any envelope completes. */
static int on_env_never(void *user_data, uint8_t flags, const uint8_t *payload,
                        size_t len) {
  (void)user_data;
  (void)flags;
  (void)payload;
  (void)len;
  fail_msg("callback must not run");
  return 0;
}

static int on_env_count(void *user_data, uint8_t flags, const uint8_t *payload,
                        size_t len) {
  size_t *count = user_data;
  (void)flags;
  assert_non_null(payload);
  (void)len;
  (*count)++;
  return 0;
}

static uint32_t rng_next(uint32_t *s) {
  /* xorshift32: deterministic, so failures reproduce. */
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  *s = x;
  return x;
}

static void test_write_prefix(void **state) {
  uint8_t p[CONCH_ENV_PREFIX];
  (void)state;
  conch__env_write_prefix(p, 0x81, 0x01020304u);
  assert_memory_equal(p, "\x81\x01\x02\x03\x04", 5);
  conch__env_write_prefix(p, 0, 0xffffffffu);
  assert_memory_equal(p, "\x00\xff\xff\xff\xff", 5);
  conch__env_write_prefix(p, 2, 0);
  assert_memory_equal(p, "\x02\x00\x00\x00\x00", 5);
}

static void test_one_chunk_is_zero_copy(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
  sink_init(&k, &s, &r);
  assert_true(conch__env_reader_at_boundary(&r));
  assert_int_equal(feed(&r, &k, 0, s.len), 0);
  assert_int_equal(k.got, s.nenv);
  assert_int_equal(k.copied, 0);
  assert_int_equal(k.zero_copied, 6);
  assert_true(conch__env_reader_at_boundary(&r));
  assert_int_equal(failmem_count(), 0); /* nothing allocated at all */
  conch__env_reader_clear(&r);
  stream_free(&s);
}

static void test_every_split_point(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  long live0 = failmem_live_blocks();
  (void)state;

  stream_mixed(&s);
  for (size_t cut = 0; cut <= s.len; cut++) {
    failmem_fail_at((size_t)-1);
    conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 300);
    sink_init(&k, &s, &r);
    assert_int_equal(feed(&r, &k, 0, cut), 0);
    assert_int_equal(feed(&r, &k, cut, s.len), 0);
    assert_int_equal(k.got, s.nenv);
    assert_int_equal(k.bytes, s.len - s.nenv * CONCH_ENV_PREFIX);
    /* At most the envelope holding the cut is copied. */
    assert_true(k.copied <= 1);
    assert_true(conch__env_reader_at_boundary(&r));
    conch__env_reader_clear(&r);
    assert_int_equal(failmem_live_blocks(), live0);
  }
  stream_free(&s);
}

static void test_every_pair_of_split_points(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  failmem_fail_at((size_t)-1);
  for (size_t a = 0; a <= s.len; a++) {
    for (size_t b = a; b <= s.len; b++) {
      conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
      sink_init(&k, &s, &r);
      assert_int_equal(feed(&r, &k, 0, a), 0);
      assert_int_equal(feed(&r, &k, a, b), 0);
      assert_int_equal(feed(&r, &k, b, s.len), 0);
      assert_int_equal(k.got, s.nenv);
      assert_true(conch__env_reader_at_boundary(&r));
      conch__env_reader_clear(&r);
    }
  }
  assert_int_equal(failmem_live_blocks(), 0);
  stream_free(&s);
}

static void test_one_byte_at_a_time(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
  sink_init(&k, &s, &r);
  for (size_t i = 0; i < s.len; i++) {
    int at_end = 0;
    assert_int_equal(feed(&r, &k, i, i + 1), 0);
    for (size_t e = 0; e < s.nenv; e++) {
      at_end |= s.env[e].off + s.env[e].len == i + 1;
    }
    assert_int_equal(conch__env_reader_at_boundary(&r), at_end);
  }
  assert_int_equal(k.got, s.nenv);
  /* A 1-byte payload arriving alone is still whole in its chunk. */
  assert_int_equal(k.zero_copied, 1);
  assert_int_equal(k.copied, 5);
  assert_true(conch__env_reader_at_boundary(&r));
  conch__env_reader_clear(&r);
  assert_int_equal(failmem_live_blocks(), 0);
  stream_free(&s);
}

static void test_random_splits(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  uint32_t seed = 0x1234567u;
  (void)state;

  memset(&s, 0, sizeof(s));
  stream_add(&s, 0x01, 200000, 1); /* above the reader's keep size */
  stream_add(&s, 0x00, 3, 2);
  stream_add(&s, 0x00, 0, 3);
  stream_add(&s, 0x00, 70000, 4);
  stream_add(&s, 0x01, 100, 5);
  stream_add(&s, 0x00, 1 << 20, 6);
  stream_add(&s, 0x02, 9, 7);
  failmem_fail_at((size_t)-1);
  for (int iter = 0; iter < 300; iter++) {
    size_t pos = 0;
    /* Mostly small chunks, sometimes large ones. */
    size_t maxchunk = iter % 3 == 0 ? 64 : iter % 3 == 1 ? 4096 : 300000;
    conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
    sink_init(&k, &s, &r);
    while (pos < s.len) {
      size_t n = rng_next(&seed) % (maxchunk + 1);
      if (n > s.len - pos) {
        n = s.len - pos;
      }
      assert_int_equal(feed(&r, &k, pos, pos + n), 0);
      pos += n;
    }
    assert_int_equal(k.got, s.nenv);
    assert_true(conch__env_reader_at_boundary(&r));
    conch__env_reader_clear(&r);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  stream_free(&s);
}

static void check_mask(uint8_t mask, const uint8_t *ok, size_t nok) {
  for (int f = 0; f < 256; f++) {
    conch_env_reader r;
    uint8_t in[2 * (CONCH_ENV_PREFIX + 1)];
    size_t count = 0;
    int want_ok = memchr(ok, f, nok) != NULL;
    int rv;

    conch__env_write_prefix(in, (uint8_t)f, 1);
    in[5] = 'x';
    conch__env_write_prefix(in + 6, 0, 1);
    in[11] = 'y';
    conch__env_reader_init(&r, failmem_hooks(), mask, 0);
    rv = conch__env_reader_feed(&r, in, sizeof(in), on_env_count, &count);
    if (want_ok) {
      assert_int_equal(rv, 0);
      assert_int_equal(count, 2);
    } else {
      /* Rejected on the prefix: the payload after it is never seen, and
         the reader stays dead even for valid input. */
      assert_int_equal(rv, CONCH_ERR_PROTO);
      assert_int_equal(count, 0);
      rv = conch__env_reader_feed(&r, in + 6, 6, on_env_count, &count);
      assert_int_equal(rv, CONCH_ERR_PROTO);
      assert_int_equal(count, 0);
    }
    conch__env_reader_clear(&r);
  }
}

static void test_flag_masks(void **state) {
  /* CONNECT_PROTOCOL.md section 0: the flag bytes each client accepts. */
  static const uint8_t connect[] = {0x00, 0x01, 0x02, 0x03};
  static const uint8_t grpc[] = {0x00, 0x01};
  static const uint8_t grpc_web[] = {0x00, 0x01, 0x80, 0x81};
  (void)state;
  failmem_fail_at((size_t)-1);
  check_mask(CONCH_ENV_FLAGS_CONNECT, connect, sizeof(connect));
  check_mask(CONCH_ENV_FLAGS_GRPC, grpc, sizeof(grpc));
  check_mask(CONCH_ENV_FLAGS_GRPC_WEB, grpc_web, sizeof(grpc_web));
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_bad_flag_split_prefix(void **state) {
  conch_env_reader r;
  uint8_t in[CONCH_ENV_PREFIX];
  (void)state;

  conch__env_write_prefix(in, 0x04, 10);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
  /* The flag byte alone is not judged until the prefix is complete. */
  assert_int_equal(conch__env_reader_feed(&r, in, 1, on_env_never, NULL), 0);
  assert_int_equal(conch__env_reader_feed(&r, in + 1, 4, on_env_never, NULL),
                   CONCH_ERR_PROTO);
  assert_int_equal(failmem_count(), 0);
  conch__env_reader_clear(&r);
}

static void test_limit_on_prefix_alone(void **state) {
  conch_env_reader r;
  uint8_t in[CONCH_ENV_PREFIX + 200];
  long live0 = failmem_live_blocks();
  size_t count = 0;
  (void)state;

  memset(in, 'z', sizeof(in));
  for (size_t split = 1; split <= CONCH_ENV_PREFIX; split++) {
    conch__env_write_prefix(in, 0, 101);
    failmem_fail_at((size_t)-1);
    conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 100);
    assert_int_equal(
        conch__env_reader_feed(&r, in, split - 1, on_env_never, NULL), 0);
    assert_int_equal(conch__env_reader_feed(&r, in + split - 1,
                                            CONCH_ENV_PREFIX - split + 1,
                                            on_env_never, NULL),
                     CONCH_ERR_LIMIT);
    /* Nothing was allocated, not even attempted. */
    assert_int_equal(failmem_count(), 0);
    assert_int_equal(failmem_live_blocks(), live0);
    assert_int_equal(
        conch__env_reader_feed(&r, in + 5, 100, on_env_never, NULL),
        CONCH_ERR_LIMIT);
    conch__env_reader_clear(&r);
  }

  /* With part of the payload in the same chunk (which would otherwise be
     buffered), still nothing is allocated. */
  conch__env_write_prefix(in, 0, 200);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 199);
  assert_int_equal(
      conch__env_reader_feed(&r, in, CONCH_ENV_PREFIX + 50, on_env_never, NULL),
      CONCH_ERR_LIMIT);
  assert_int_equal(failmem_count(), 0);
  conch__env_reader_clear(&r);

  /* Exactly the limit is fine. */
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 200);
  assert_int_equal(
      conch__env_reader_feed(&r, in, sizeof(in), on_env_count, &count), 0);
  assert_int_equal(count, 1);
  conch__env_reader_clear(&r);
  assert_int_equal(failmem_live_blocks(), live0);
}

static void test_4gib_prefix_unlimited(void **state) {
  conch_env_reader r;
  uint8_t *in;
  size_t chunk = 256 << 10, fed = 0;
  (void)state;

  in = calloc(1, chunk);
  assert_non_null(in);
  conch__env_write_prefix(in, 0x01, 0xffffffffu);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 0);

  /* The prefix alone allocates nothing. */
  assert_int_equal(
      conch__env_reader_feed(&r, in, CONCH_ENV_PREFIX, on_env_never, NULL), 0);
  assert_int_equal(failmem_count(), 0);
  assert_false(conch__env_reader_at_boundary(&r));

  /* The first bytes reserve at most 1 MiB, not 4 GiB. */
  assert_int_equal(conch__env_reader_feed(&r, in + CONCH_ENV_PREFIX, 100,
                                          on_env_never, NULL),
                   0);
  fed = 100;
  assert_int_equal(failmem_live_blocks(), 1);
  assert_true(r.body.cap >= 100);
  assert_true(r.body.cap <= (size_t)1 << 20);

  /* Further growth follows the bytes that actually arrive. */
  for (int i = 0; i < 12; i++) {
    assert_int_equal(conch__env_reader_feed(&r, in, chunk, on_env_never, NULL),
                     0);
    fed += chunk;
    assert_int_equal(conch__buf_size(&r.body), fed);
    assert_true(r.body.cap <= 2 * fed);
  }
  assert_int_equal(failmem_live_blocks(), 1);
  conch__env_reader_clear(&r);
  assert_int_equal(failmem_live_blocks(), 0);
  free(in);
}

static void test_zero_length(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  memset(&s, 0, sizeof(s));
  stream_add(&s, 0x00, 0, 0);
  stream_add(&s, 0x01, 0, 0); /* compressed + empty: an empty message */
  stream_add(&s, 0x02, 0, 0);
  stream_add(&s, 0x00, 0, 0);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
  sink_init(&k, &s, &r);
  /* Each prefix ends its chunk: the empty payload is delivered at once,
     without waiting for more input. */
  for (size_t i = 0; i < s.nenv; i++) {
    assert_int_equal(feed(&r, &k, i * 5, i * 5 + 5), 0);
    assert_int_equal(k.got, i + 1);
    assert_true(k.boundary_in_cb);
    assert_true(conch__env_reader_at_boundary(&r));
  }
  assert_int_equal(k.bytes, 0);
  assert_int_equal(failmem_count(), 0);
  conch__env_reader_clear(&r);

  /* All in one chunk, with max_len 1. */
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 1);
  sink_init(&k, &s, &r);
  assert_int_equal(feed(&r, &k, 0, s.len), 0);
  assert_int_equal(k.got, s.nenv);
  conch__env_reader_clear(&r);
  stream_free(&s);
}

static void test_callback_abort(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  failmem_fail_at((size_t)-1);
  for (size_t at = 0; at < s.nenv; at++) {
    for (size_t cut = 0; cut <= s.len; cut += 7) {
      size_t got;
      int rv;
      conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
      sink_init(&k, &s, &r);
      k.abort_at = at;
      k.abort_rv = at % 2 == 0 ? CONCH_ERR_CANCELED : 42;
      rv = feed(&r, &k, 0, cut);
      if (rv == 0) {
        rv = feed(&r, &k, cut, s.len);
      }
      assert_int_equal(rv, k.abort_rv);
      assert_int_equal(k.got, at + 1); /* nothing after the abort */
      got = k.got;
      /* The reader stays stopped, with the callback's value. */
      assert_int_equal(feed(&r, &k, 0, s.len), k.abort_rv);
      assert_int_equal(k.got, got);
      conch__env_reader_clear(&r);
      assert_int_equal(failmem_live_blocks(), 0);
    }
  }
  stream_free(&s);
}

static void test_buffer_kept_or_released(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  memset(&s, 0, sizeof(s));
  stream_add(&s, 0, 1000, 1);
  stream_add(&s, 0, 1000, 2);
  stream_add(&s, 0, 300000, 3);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 0);
  sink_init(&k, &s, &r);

  /* First small envelope split: one allocation, kept afterwards. */
  assert_int_equal(feed(&r, &k, 0, 10), 0);
  assert_int_equal(feed(&r, &k, 10, 1005), 0);
  assert_int_equal(k.copied, 1);
  assert_int_equal(failmem_live_blocks(), 1);
  assert_true(r.body.cap > 0);

  /* Second one reuses it: steady state allocates nothing. */
  failmem_fail_at((size_t)-1);
  assert_int_equal(feed(&r, &k, 1005, 1015), 0);
  assert_int_equal(feed(&r, &k, 1015, 2010), 0);
  assert_int_equal(k.copied, 2);
  assert_int_equal(failmem_count(), 0);

  /* A big one is released once delivered. */
  assert_int_equal(feed(&r, &k, 2010, 2020), 0);
  assert_int_equal(feed(&r, &k, 2020, s.len), 0);
  assert_int_equal(k.got, 3);
  assert_int_equal(r.body.cap, 0);
  assert_int_equal(failmem_live_blocks(), 0);
  conch__env_reader_clear(&r);
  stream_free(&s);
}

static void test_out_of_memory(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  memset(&s, 0, sizeof(s));
  stream_add(&s, 0, 100, 1);
  stream_add(&s, 0, 3000, 2);
  stream_add(&s, 0, 2000000, 3);
  stream_add(&s, 0, 10, 4);
  for (size_t n = 0;; n++) {
    size_t pos = 0;
    int rv = 0;
    failmem_fail_at(n);
    conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 0);
    sink_init(&k, &s, &r);
    while (pos < s.len && rv == 0) {
      size_t step = s.len - pos < 50000 ? s.len - pos : 50000;
      rv = feed(&r, &k, pos, pos + step);
      pos += step;
    }
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_int_equal(k.got, s.nenv);
      conch__env_reader_clear(&r);
      assert_int_equal(failmem_live_blocks(), 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_true(k.got < s.nenv);
    /* Dead afterwards, with the same error. */
    assert_int_equal(feed(&r, &k, 0, 5), CONCH_ERR_NOMEM);
    conch__env_reader_clear(&r);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  stream_free(&s);
}

static void test_clear_mid_envelope_and_reuse(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT, 0);
  sink_init(&k, &s, &r);
  assert_int_equal(feed(&r, &k, 0, 3), 0);
  assert_false(conch__env_reader_at_boundary(&r));
  conch__env_reader_clear(&r);
  assert_true(conch__env_reader_at_boundary(&r));
  sink_init(&k, &s, &r);
  assert_int_equal(feed(&r, &k, 0, s.len), 0);
  assert_int_equal(k.got, s.nenv);
  conch__env_reader_clear(&r);
  conch__env_reader_clear(&r); /* twice is harmless */
  assert_int_equal(failmem_live_blocks(), 0);
  stream_free(&s);
}

/* Large messages, many to a feed: each one whole in the feed is handed on
   where it lies, and nothing is allocated. */
static void test_many_large_in_one_feed(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  memset(&s, 0, sizeof(s));
  for (int i = 0; i < 16; i++) {
    stream_add(&s, i % 3 == 0 ? 0x01 : 0x00, 65536 + (size_t)i, (uint8_t)i);
  }
  stream_add(&s, 0x02, 2, 99);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT,
                         1u << 20);
  conch__env_reader_reserve_declared(&r);
  sink_init(&k, &s, &r);
  assert_int_equal(feed(&r, &k, 0, s.len), 0);
  assert_int_equal(k.got, s.nenv);
  assert_int_equal(k.zero_copied, s.nenv);
  assert_int_equal(k.copied, 0);
  assert_int_equal(failmem_count(), 0);
  /* Cut anywhere: only the envelope that holds the cut is copied. */
  for (size_t cut = 1; cut < s.len; cut += 16411) {
    sink_init(&k, &s, &r);
    assert_int_equal(feed(&r, &k, 0, cut), 0);
    assert_int_equal(feed(&r, &k, cut, s.len), 0);
    assert_int_equal(k.got, s.nenv);
    assert_true(k.copied <= 1);
    assert_true(conch__env_reader_at_boundary(&r));
  }
  conch__env_reader_clear(&r);
  assert_int_equal(failmem_live_blocks(), 0);
  stream_free(&s);
}

/* A payload that spans feeds, with its declared length reserved: one
   allocation of its whole size, whatever the feeds, at every split point
   of the prefix and of the payload; without, the buffer grows as bytes
   come (more than one allocation for a payload past 64 KiB). */
static void test_reserve_declared(void **state) {
  static const size_t sizes[] = {1000, 65536, 300000};
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
    size_t len = sizes[z];
    size_t step = len / 97 + 1;
    memset(&s, 0, sizeof(s));
    stream_add(&s, 0x01, len, (uint8_t)z);
    for (size_t cut = 1; cut < s.len; cut = cut < 8 ? cut + 1 : cut + step) {
      failmem_fail_at((size_t)-1);
      conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC,
                             (uint32_t)len);
      conch__env_reader_reserve_declared(&r);
      sink_init(&k, &s, &r);
      /* In 4 KiB feeds after the cut, as reads of a socket would. */
      assert_int_equal(feed(&r, &k, 0, cut), 0);
      for (size_t pos = cut; pos < s.len;) {
        size_t end = s.len - pos < 4096 ? s.len : pos + 4096;
        assert_int_equal(feed(&r, &k, pos, end), 0);
        pos = end;
      }
      assert_int_equal(k.got, 1);
      if (cut <= CONCH_ENV_PREFIX && len <= 4096) {
        /* Only the prefix was cut: the payload is whole in a feed. */
        assert_int_equal(k.zero_copied, 1);
        assert_int_equal(failmem_count(), 0);
      } else {
        assert_int_equal(k.copied, 1);
        assert_int_equal(failmem_count(), 1);
      }
      conch__env_reader_clear(&r);
      assert_int_equal(failmem_live_blocks(), 0);
    }
    /* The growing reader, for contrast. */
    failmem_fail_at((size_t)-1);
    conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 0);
    sink_init(&k, &s, &r);
    for (size_t pos = 0; pos < s.len;) {
      size_t end = s.len - pos < 4096 ? s.len : pos + 4096;
      assert_int_equal(feed(&r, &k, pos, end), 0);
      pos = end;
    }
    assert_int_equal(k.got, 1);
    if (len > 65536) {
      assert_true(failmem_count() > 1);
    }
    conch__env_reader_clear(&r);
    stream_free(&s);
  }
}

/* The limit still holds with the declared length reserved: one byte over
   is refused on the prefix, before anything is allocated; exactly the
   limit is taken.  Without a limit, nothing is reserved up front. */
static void test_reserve_declared_limit(void **state) {
  conch_env_reader r;
  uint8_t in[CONCH_ENV_PREFIX + 100];
  size_t count = 0;
  (void)state;

  memset(in, 'q', sizeof(in));
  conch__env_write_prefix(in, 0, 100001);
  failmem_fail_at((size_t)-1);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 100000);
  conch__env_reader_reserve_declared(&r);
  assert_int_equal(conch__env_reader_feed(&r, in, sizeof(in), on_env_never,
                                          NULL),
                   CONCH_ERR_LIMIT);
  assert_int_equal(failmem_count(), 0);
  conch__env_reader_clear(&r);

  conch__env_write_prefix(in, 0, 100000);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 100000);
  conch__env_reader_reserve_declared(&r);
  assert_int_equal(
      conch__env_reader_feed(&r, in, sizeof(in), on_env_count, &count), 0);
  assert_true(r.body.cap >= 100000);
  assert_int_equal(failmem_live_blocks(), 1);
  conch__env_reader_clear(&r);
  assert_int_equal(failmem_live_blocks(), 0);

  conch__env_write_prefix(in, 0, 0xffffffffu);
  conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_GRPC, 0);
  conch__env_reader_reserve_declared(&r); /* no limit: no effect */
  assert_int_equal(
      conch__env_reader_feed(&r, in, sizeof(in), on_env_never, NULL), 0);
  assert_true(r.body.cap <= (size_t)64 << 10);
  conch__env_reader_clear(&r);
  assert_int_equal(count, 0);
  assert_int_equal(failmem_live_blocks(), 0);
}

/* The input ends inside an envelope (end of stream mid-message): the
   reader says it is not at a boundary, whether the cut falls in a prefix
   or in a payload, and clearing it frees what it held. */
static void test_end_mid_message(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  stream_add(&s, 0x01, 70000, 10);
  for (size_t cut = 0; cut <= s.len; cut = cut < 400 ? cut + 1 : cut + 997) {
    int inside = 1;
    if (cut == 0) {
      inside = 0;
    }
    for (size_t e = 0; e < s.nenv; e++) {
      if (s.env[e].off + s.env[e].len == cut) {
        inside = 0;
      }
    }
    failmem_fail_at((size_t)-1);
    conch__env_reader_init(&r, failmem_hooks(), CONCH_ENV_FLAGS_CONNECT,
                           1u << 20);
    conch__env_reader_reserve_declared(&r);
    sink_init(&k, &s, &r);
    assert_int_equal(feed(&r, &k, 0, cut), 0);
    assert_int_equal(conch__env_reader_at_boundary(&r), !inside);
    conch__env_reader_clear(&r);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  stream_free(&s);
}

static void test_default_allocator(void **state) {
  conch_env_reader r;
  stream s;
  sink k;
  (void)state;

  stream_mixed(&s);
  conch__env_reader_init(&r, conch_mem_default(), CONCH_ENV_FLAGS_CONNECT, 0);
  sink_init(&k, &s, &r);
  for (size_t i = 0; i < s.len; i += 2) {
    size_t end = i + 2 < s.len ? i + 2 : s.len;
    assert_int_equal(feed(&r, &k, i, end), 0);
  }
  assert_int_equal(k.got, s.nenv);
  conch__env_reader_clear(&r);
  stream_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_prefix),
      cmocka_unit_test(test_one_chunk_is_zero_copy),
      cmocka_unit_test(test_every_split_point),
      cmocka_unit_test(test_every_pair_of_split_points),
      cmocka_unit_test(test_one_byte_at_a_time),
      cmocka_unit_test(test_random_splits),
      cmocka_unit_test(test_flag_masks),
      cmocka_unit_test(test_bad_flag_split_prefix),
      cmocka_unit_test(test_limit_on_prefix_alone),
      cmocka_unit_test(test_4gib_prefix_unlimited),
      cmocka_unit_test(test_zero_length),
      cmocka_unit_test(test_callback_abort),
      cmocka_unit_test(test_buffer_kept_or_released),
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_clear_mid_envelope_and_reuse),
      cmocka_unit_test(test_many_large_in_one_feed),
      cmocka_unit_test(test_reserve_declared),
      cmocka_unit_test(test_reserve_declared_limit),
      cmocka_unit_test(test_end_mid_message),
      cmocka_unit_test(test_default_allocator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
