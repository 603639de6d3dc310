/* base64, RFC 4648: the standard alphabet (metadata "-bin" values, error
   detail values, grpc-status-details-bin) and the URL-safe one (Connect GET
   "message").  Encoders emit no padding; decoders accept padded and unpadded
   input. */
#ifndef CONCH__BASE64_H
#define CONCH__BASE64_H

#include <stddef.h>
#include <stdint.h>

enum { CONCH_B64_STD = 0, CONCH_B64_URL = 1 };

/* Length of the unpadded encoding of |n| bytes. */
size_t conch__b64_encoded_len(size_t n);
/* Writes the unpadded encoding of |in| to |out| (room for
   conch__b64_encoded_len(n) bytes; no NUL is written) and returns its
   length. */
size_t conch__b64_encode(const uint8_t *in, size_t n, int alphabet, char *out);
/* Upper bound of the decoded length of |n| characters. */
size_t conch__b64_decoded_max(size_t n);
/* Decodes |n| characters to |out| (room for conch__b64_decoded_max(n)),
   setting |*outlen|.  Padding ('=') is accepted only at the end and only in
   a valid amount; a length of 1 mod 4 and characters outside |alphabet| are
   errors.  Returns 0 or CONCH_ERR_PROTO. */
int conch__b64_decode(const char *in, size_t n, int alphabet, uint8_t *out,
                      size_t *outlen);

#endif
