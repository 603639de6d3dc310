/*
 * conch - a Connect/gRPC client for C
 *
 * base64.h: base64 (RFC 4648), the codec the library uses for metadata
 * "-bin" values, error details and Connect GET messages, for what an
 * application needs of its own (HTTP Basic credentials, signatures in
 * URLs, the JSON of error details).
 */
#ifndef CONCH_BASE64_H
#define CONCH_BASE64_H

#include <stddef.h>
#include <stdint.h>

#include <conch/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Flags of the functions below; 0 is the standard alphabet, unpadded. */
enum {
  CONCH_BASE64_URL = 1, /**< the URL-safe alphabet ('-' and '_', section 5)
                             in place of the standard one ('+' and '/') */
  CONCH_BASE64_PAD = 2  /**< encoders pad with '=' to a multiple of four
                             (decoders take padded and unpadded input) */
};

/** Length of the encoding of |n| bytes with |flags| (no NUL counted). */
CONCH_EXTERN size_t conch_base64_encoded_len(size_t n, int flags);

/**
 * Writes the encoding of |in| (|n| bytes) to |out|, which has room for
 * conch_base64_encoded_len(n, flags) characters; no NUL is written.
 *
 * Returns the number of characters written.
 */
CONCH_EXTERN size_t conch_base64_encode(const uint8_t *in, size_t n, int flags,
                                        char *out);

/** Upper bound of the decoded length of |n| characters. */
CONCH_EXTERN size_t conch_base64_decoded_max(size_t n);

/**
 * Decodes |n| characters of the alphabet |flags| names, padded or not, to
 * |out| (room for conch_base64_decoded_max(n) bytes) and sets |*outlen|.
 * Padding counts only at the end of a whole number of quads, at most two
 * '='; a length of 1 mod 4, blanks and characters outside the alphabet are
 * errors.  The unused low bits of the last character are ignored (as Go's
 * decoder does).  CONCH_BASE64_PAD changes nothing here.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out| or |outlen|, or NULL |in| with
 * |n| > 0) or CONCH_ERR_PROTO (not base64); on error |*outlen| is left
 * alone and |out| may hold scratch bytes.
 */
CONCH_EXTERN int conch_base64_decode(const char *in, size_t n, int flags,
                                     uint8_t *out, size_t *outlen);

#ifdef __cplusplus
}
#endif

#endif
