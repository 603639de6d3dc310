/* Envelope framing: a 5-byte prefix, then the payload, reassembled from
   chunks whose boundaries have nothing to do with envelope boundaries. */
#include "envelope.h"

#include <string.h>

#include <conch/status.h>

/* First reservation for a payload that spans chunks, unless the reader
   was told to reserve the declared length (conch__env_reader_reserve_
   declared()).  The declared length is only a claim by the peer: past
   this, memory grows (by doubling) as bytes actually arrive, so a bare
   4 GiB prefix costs 64 KiB, not 4 GiB.  Kept small because every stream
   can be made to pay it; the doubling costs a big message a few reallocs
   (copies, with an allocator that cannot move pages). */
#define ENV_FIRST_RESERVE ((size_t)64 << 10)

/* A reassembly buffer bigger than this is freed once its envelope has been
   delivered, so one large message does not pin memory for the rest of a
   long stream.  Smaller ones are kept to avoid an allocation per envelope
   in steady state. */
#define ENV_KEEP_MAX ((size_t)64 << 10)

void conch__env_reader_init(conch_env_reader *r, const conch_mem *mem,
                            uint8_t allowed_flags, uint32_t max_len) {
  memset(r, 0, sizeof(*r));
  r->mem = mem;
  r->allowed_flags = allowed_flags;
  r->max_len = max_len;
  r->reserve = (uint32_t)ENV_FIRST_RESERVE;
  r->body = (conch_buf)CONCH_BUF_INIT;
}

void conch__env_reader_reserve_declared(conch_env_reader *r) {
  if (r->max_len > r->reserve) {
    r->reserve = r->max_len;
  }
}

void conch__env_reader_clear(conch_env_reader *r) {
  conch__buf_free(&r->body, r->mem);
  r->prefix_len = 0;
  r->flags = 0;
  r->len = 0;
  r->failed = 0;
}

int conch__env_reader_at_boundary(const conch_env_reader *r) {
  /* Payload bytes are only ever held after a complete prefix. */
  return r->prefix_len == 0;
}

void conch__env_write_prefix(uint8_t out[CONCH_ENV_PREFIX], uint8_t flags,
                             uint32_t len) {
  out[0] = flags;
  out[1] = (uint8_t)(len >> 24);
  out[2] = (uint8_t)(len >> 16);
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
}

static int reader_fail(conch_env_reader *r, int rv) {
  r->failed = rv;
  return rv;
}

/* Decodes the complete prefix and vets it before any payload byte is
   accepted. */
static int begin_envelope(conch_env_reader *r) {
  const uint8_t *p = r->prefix;

  r->flags = p[0];
  r->len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 |
           (uint32_t)p[4];
  if ((r->flags & ~r->allowed_flags) != 0) {
    return CONCH_ERR_PROTO;
  }
  if (r->max_len != 0 && r->len > r->max_len) {
    return CONCH_ERR_LIMIT;
  }
  return 0;
}

/* Hands one complete envelope to |cb|.  The reader is back at a boundary
   while the callback runs; |payload| may point into |r->body|, which is
   only released afterwards. */
static int deliver(conch_env_reader *r, const uint8_t *payload, size_t len,
                   conch_env_cb cb, void *user_data) {
  int rv;

  r->prefix_len = 0;
  rv = cb(user_data, r->flags, payload, len);
  if (r->body.cap > ENV_KEEP_MAX) {
    conch__buf_free(&r->body, r->mem);
  } else {
    conch__buf_reset(&r->body);
  }
  if (rv != 0) {
    /* The caller cannot know how much input was consumed, so the stream
       cannot be resumed. */
    return reader_fail(r, rv);
  }
  return 0;
}

/* Copies |n| payload bytes (no more than the envelope still lacks) into the
   reassembly buffer. */
static int buffer_payload(conch_env_reader *r, const uint8_t *in, size_t n) {
  size_t first;
  int rv;

  if (conch__buf_size(&r->body) == 0) {
    first = r->len < r->reserve ? r->len : r->reserve;
    if (first < n) {
      first = n;
    }
    rv = conch__buf_reserve(&r->body, r->mem, first);
    if (rv != 0) {
      return rv;
    }
  }
  return conch__buf_append(&r->body, r->mem, in, n);
}

int conch__env_reader_feed(conch_env_reader *r, const uint8_t *in, size_t n,
                           conch_env_cb cb, void *user_data) {
  size_t take, have;
  int rv;

  if (r->failed != 0) {
    return r->failed;
  }
  while (n > 0) {
    if (r->prefix_len < CONCH_ENV_PREFIX) {
      take = (size_t)(CONCH_ENV_PREFIX - r->prefix_len);
      if (take > n) {
        take = n;
      }
      memcpy(r->prefix + r->prefix_len, in, take);
      r->prefix_len = (uint8_t)(r->prefix_len + take);
      in += take;
      n -= take;
      if (r->prefix_len < CONCH_ENV_PREFIX) {
        break;
      }
      rv = begin_envelope(r);
      if (rv != 0) {
        return reader_fail(r, rv);
      }
      if (r->len == 0) {
        /* Delivered now, even at the end of the chunk.  The prefix is a
           valid address for an empty payload. */
        rv = deliver(r, r->prefix, 0, cb, user_data);
        if (rv != 0) {
          return rv;
        }
      }
      continue;
    }
    have = conch__buf_size(&r->body);
    if (have == 0 && n >= r->len) {
      /* The whole payload is in this chunk: no copy. */
      take = r->len;
      rv = deliver(r, in, take, cb, user_data);
      if (rv != 0) {
        return rv;
      }
      in += take;
      n -= take;
      continue;
    }
    take = r->len - have;
    if (take > n) {
      take = n;
    }
    rv = buffer_payload(r, in, take);
    if (rv != 0) {
      return reader_fail(r, rv);
    }
    in += take;
    n -= take;
    if (conch__buf_size(&r->body) == r->len) {
      rv = deliver(r, conch__buf_head(&r->body), r->len, cb, user_data);
      if (rv != 0) {
        return rv;
      }
    }
  }
  return 0;
}
