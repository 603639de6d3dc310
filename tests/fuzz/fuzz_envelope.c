/* Fuzz target: the envelope reader, fed at input-chosen split points and
   checked against a one-shot reference parse of the same bytes.

   Input layout:
     [0]    bits 0-1: flag mask (Connect, gRPC, gRPC-Web, anything);
            bit 2: use the max_len below (else unlimited);
            bit 3: reserve a spanning payload's declared length at once
     [1]    bit 7: make the callback stop at envelope [1] & 0x7f
     [2..3] max_len, big-endian
     [4..5] seed of the chunk sizes
     [6]    largest chunk (0: everything in one feed)
     [7..]  the stream */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/status.h>

#include "fuzz.h"
#include "envelope.h"

#define HDR 7
#define ABORT_RV 7

typedef struct ref_env {
  uint8_t flags;
  size_t off; /* of the payload, in the stream */
  size_t len;
} ref_env;

typedef struct ctx {
  const uint8_t *s; /* the stream */
  size_t n;
  const ref_env *ref;
  size_t nref;
  size_t got;
  size_t bytes;
  size_t chunk_start;
  size_t abort_at;
  uint8_t mask;
  uint32_t max_len;
} ctx;

/* What the reader must do with the whole stream, parsed in one go. */
static int ref_parse(const uint8_t *s, size_t n, uint8_t mask, uint32_t max_len,
                     ref_env *out, size_t *nout, size_t *end) {
  size_t pos = 0;
  uint32_t len;

  *nout = 0;
  while (n - pos >= CONCH_ENV_PREFIX) {
    len = (uint32_t)s[pos + 1] << 24 | (uint32_t)s[pos + 2] << 16 |
          (uint32_t)s[pos + 3] << 8 | (uint32_t)s[pos + 4];
    if ((s[pos] & ~mask) != 0) {
      return CONCH_ERR_PROTO;
    }
    if (max_len != 0 && len > max_len) {
      return CONCH_ERR_LIMIT;
    }
    if (n - pos - CONCH_ENV_PREFIX < len) {
      break;
    }
    out[*nout].flags = s[pos];
    out[*nout].off = pos + CONCH_ENV_PREFIX;
    out[*nout].len = len;
    (*nout)++;
    pos += CONCH_ENV_PREFIX + len;
  }
  *end = pos;
  return 0;
}

static int on_env(void *user_data, uint8_t flags, const uint8_t *payload,
                  size_t len) {
  ctx *c = user_data;
  const ref_env *e;
  size_t idx = c->got++;

  CHECK(idx < c->nref);
  e = &c->ref[idx];
  CHECK(flags == e->flags);
  CHECK((flags & ~c->mask) == 0);
  CHECK(len == e->len);
  CHECK(c->max_len == 0 || len <= c->max_len);
  CHECK(payload != NULL);
  if (len > 0) {
    CHECK(memcmp(payload, c->s + e->off, len) == 0);
    if (e->off >= c->chunk_start) {
      CHECK(payload == c->s + e->off); /* whole in this chunk: no copy */
    } else {
      CHECK(payload < c->s || payload >= c->s + c->n);
    }
  }
  c->bytes += len;
  CHECK(c->bytes <= c->n);
  return idx == c->abort_at ? ABORT_RV : 0;
}

static size_t next_chunk(uint32_t *seed, size_t maxchunk, size_t left) {
  size_t k;

  if (maxchunk == 0) {
    return left;
  }
  /* LCG: cheap, and deterministic for a given input. */
  *seed = *seed * 1103515245u + 12345u;
  k = 1 + (*seed >> 16) % maxchunk;
  return k < left ? k : left;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t masks[4] = {CONCH_ENV_FLAGS_CONNECT,
                                   CONCH_ENV_FLAGS_GRPC,
                                   CONCH_ENV_FLAGS_GRPC_WEB, 0xff};
  conch_env_reader r;
  ref_env *ref;
  ctx c;
  uint32_t seed;
  size_t maxchunk, pos = 0, end = 0, want_got;
  int want_rv, rv = 0;

  if (size < HDR) {
    return 0;
  }
  memset(&c, 0, sizeof(c));
  c.mask = masks[data[0] & 3];
  c.max_len = (data[0] & 4) != 0 ? (uint32_t)data[2] << 8 | data[3] : 0;
  c.abort_at = (data[1] & 0x80) != 0 ? (size_t)(data[1] & 0x7f) : SIZE_MAX;
  seed = (uint32_t)data[4] << 8 | data[5];
  maxchunk = data[6];
  c.s = data + HDR;
  c.n = size - HDR;

  ref = malloc(sizeof(*ref) * (c.n / CONCH_ENV_PREFIX + 1));
  CHECK(ref != NULL);
  want_rv = ref_parse(c.s, c.n, c.mask, c.max_len, ref, &c.nref, &end);
  want_got = c.nref;
  if (c.abort_at < c.nref) {
    want_rv = ABORT_RV;
    want_got = c.abort_at + 1;
  }
  c.ref = ref;

  conch__env_reader_init(&r, conch_mem_default(), c.mask, c.max_len);
  if ((data[0] & 8) != 0) {
    conch__env_reader_reserve_declared(&r);
  }
  CHECK(conch__env_reader_at_boundary(&r));
  while (pos < c.n) {
    size_t k = next_chunk(&seed, maxchunk, c.n - pos);
    c.chunk_start = pos;
    rv = conch__env_reader_feed(&r, c.s + pos, k, on_env, &c);
    pos += k;
    if (rv != 0) {
      break;
    }
  }
  CHECK(rv == want_rv);
  CHECK(c.got == want_got);
  if (rv == 0) {
    /* Whatever is left after the last whole envelope is held, no more. */
    CHECK(conch__env_reader_at_boundary(&r) == (end == c.n));
    CHECK(conch__buf_size(&r.body) <= c.n - end);
  } else {
    /* Dead: the same error again, and no callback. */
    size_t got = c.got;
    CHECK(conch__env_reader_feed(&r, c.s, c.n, on_env, &c) == rv);
    CHECK(c.got == got);
  }
  CHECK(c.bytes <= c.n);
  conch__env_reader_clear(&r);
  free(ref);
  return 0;
}
