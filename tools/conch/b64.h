/* base64 with the standard alphabet (RFC 4648 section 4) for the conch
   tool's own needs: HTTP Basic credentials, envd's signatures of /files
   URLs and the JSON of error details.  The library handles the base64 of
   metadata ("-bin" values) itself, so none of this is its API. */
#ifndef CONCH_TOOL_B64_H
#define CONCH_TOOL_B64_H

#include <stddef.h>
#include <stdint.h>

/* Length of the encoding of |n| bytes, with padding or without. */
size_t b64_encoded_len(size_t n, int pad);

/* Writes the encoding of |in| to |out| (room for b64_encoded_len(n, pad)
   bytes; no NUL is written), padded with '=' when |pad|.  Returns its
   length. */
size_t b64_encode(const uint8_t *in, size_t n, int pad, char *out);

/* Upper bound of the decoded length of |n| characters. */
size_t b64_decoded_max(size_t n);

/* Decodes |n| characters, padded or not, to |out| (room for
   b64_decoded_max(n)) and sets |*outlen|.  Padding counts only at the end
   of a whole number of quads, at most two '='; a length of 1 mod 4 and
   characters outside the alphabet are errors.  The unused low bits of the
   last character are ignored.  Returns 0, or -1 (|*outlen| unchanged). */
int b64_decode(const char *in, size_t n, uint8_t *out, size_t *outlen);

#endif
