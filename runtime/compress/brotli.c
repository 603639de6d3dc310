/* "br": brotli streams (RFC 7932) with libbrotli.  brotli 1.0.9 cannot
   reset a state, so each message gets a fresh one; the decoder's ring
   buffer is bounded by the stream's window (at most 16 MiB; large-window
   streams are refused).  The decoder runs over the client's allocator and
   reports its failures.  The encoder does not: libbrotlienc 1.0.9 calls
   exit(EXIT_FAILURE) when an allocation fails (enc/memory.c), so it keeps
   libc's allocator, where that is as unlikely as anywhere, rather than a
   caller's allocator that may refuse on purpose. */
#include <limits.h>
#include <string.h>

#include <brotli/decode.h>
#include <brotli/encode.h>

#include <conch/status.h>

#include "compress.h"
#include "mem_int.h"

#define BR_DEFAULT_QUALITY 5

static void *br_alloc(void *opaque, size_t size) {
  return conch__malloc(opaque, size);
}

static void br_free(void *opaque, void *p) {
  conch__free(opaque, p);
}

int conch__br_compress(const conch_mem *mem, int quality, const uint8_t *in,
                       size_t n, conch_buf *out) {
  BrotliEncoderState *s;
  size_t avail_in = n, avail_out, room;
  const uint8_t *next_in = in;
  uint8_t *next_out;
  size_t bound;
  int rv = 0;

  if (quality < -1 || quality > BROTLI_MAX_QUALITY) {
    return CONCH_ERR_INVALID;
  }
  s = BrotliEncoderCreateInstance(NULL, NULL, NULL);
  if (s == NULL) {
    return CONCH_ERR_NOMEM;
  }
  if (!BrotliEncoderSetParameter(
          s, BROTLI_PARAM_QUALITY,
          (uint32_t)(quality < 0 ? BR_DEFAULT_QUALITY : quality)) ||
      !BrotliEncoderSetParameter(s, BROTLI_PARAM_SIZE_HINT,
                                 n > (1u << 30) ? (1u << 30) : (uint32_t)n)) {
    rv = CONCH_ERR_COMPRESSION;
    goto out;
  }
  bound = BrotliEncoderMaxCompressedSize(n);
  if (bound != 0) {
    rv = conch__buf_reserve(out, mem, bound);
    if (rv != 0) {
      goto out;
    }
  }
  while (!BrotliEncoderIsFinished(s)) {
    if (out->cap == out->len) {
      rv = conch__buf_reserve(out, mem, (size_t)64 << 10);
      if (rv != 0) {
        goto out;
      }
    }
    room = avail_out = out->cap - out->len;
    next_out = out->data + out->len;
    if (!BrotliEncoderCompressStream(s, BROTLI_OPERATION_FINISH, &avail_in,
                                     &next_in, &avail_out, &next_out, NULL)) {
      rv = CONCH_ERR_COMPRESSION; /* not expected with valid parameters */
      goto out;
    }
    out->len += room - avail_out;
  }
out:
  BrotliEncoderDestroyInstance(s);
  return rv;
}

static int br_error(BrotliDecoderState *s) {
  BrotliDecoderErrorCode e = BrotliDecoderGetErrorCode(s);

  if (e <= BROTLI_DECODER_ERROR_ALLOC_CONTEXT_MODES &&
      e >= BROTLI_DECODER_ERROR_ALLOC_BLOCK_TYPE_TREES) {
    return CONCH_ERR_NOMEM;
  }
  return CONCH_ERR_COMPRESSION;
}

int conch__br_decompress(const conch_mem *mem, const uint8_t *in, size_t n,
                         size_t max_out, conch_buf *out) {
  BrotliDecoderState *s;
  BrotliDecoderResult r;
  size_t base = conch__buf_size(out);
  size_t avail_in = n, avail_out, room, done;
  const uint8_t *next_in = in;
  uint8_t *next_out;
  int rv;

  s = BrotliDecoderCreateInstance(br_alloc, br_free, (void *)mem);
  if (s == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (;;) {
    rv = conch__comp_room(out, mem, conch__buf_size(out) - base, max_out,
                          SIZE_MAX, &room);
    if (rv != 0) {
      break;
    }
    avail_out = room;
    next_out = out->data + out->len;
    r = BrotliDecoderDecompressStream(s, &avail_in, &next_in, &avail_out,
                                      &next_out, NULL);
    out->len += room - avail_out;
    done = conch__buf_size(out) - base;
    if (max_out != 0 && done > max_out) {
      rv = CONCH_ERR_LIMIT;
      break;
    }
    if (r == BROTLI_DECODER_RESULT_SUCCESS) {
      /* One stream per message: anything after it is not brotli. */
      rv = avail_in == 0 ? 0 : CONCH_ERR_COMPRESSION;
      break;
    }
    if (r == BROTLI_DECODER_RESULT_ERROR) {
      rv = br_error(s);
      break;
    }
    if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT) {
      rv = CONCH_ERR_COMPRESSION; /* all input was given: truncated */
      break;
    }
    /* NEEDS_MORE_OUTPUT: loop with more room. */
  }
  BrotliDecoderDestroyInstance(s);
  if (rv != 0) {
    out->len = out->off + base;
  }
  return rv;
}
