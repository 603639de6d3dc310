/* base64, RFC 4648 sections 4 and 5: the runtime's (no padding on output)
   and the public conch_base64_* (conch/base64.h) on top of it. */
#include "base64.h"

#include <conch/base64.h>
#include <conch/status.h>

static const char enc_std[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char enc_url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Decoding tables: the 6-bit value of each character, X for characters
   outside the alphabet.  X has the top bit set, so one test on the OR of a
   quad's four lookups rejects any bad character in it. */
#define X 0xff
/* clang-format off */
static const uint8_t dec_std[256] = {
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, 62, X, X, X, 63,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, X, X, X, X, X, X,
    X, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X, X, X, X, X,
    X, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, X, X, X, X, X,
    /* 0x80-0xff */
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X
};
static const uint8_t dec_url[256] = {
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, 62, X, X,
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, X, X, X, X, X, X,
    X, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X, X, X, X, 63,
    X, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, X, X, X, X, X,
    /* 0x80-0xff */
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X,
    X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X
};

/* clang-format on */
#undef X

size_t conch__b64_encoded_len(size_t n) {
  size_t rem = n % 3;

  return n / 3 * 4 + (rem == 0 ? 0 : rem + 1);
}

size_t conch__b64_encode(const uint8_t *in, size_t n, int alphabet, char *out) {
  const char *enc = alphabet == CONCH_B64_URL ? enc_url : enc_std;
  char *p = out;
  size_t i = 0;
  uint32_t v;

  for (; n - i >= 3; i += 3) {
    v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    p[0] = enc[v >> 18];
    p[1] = enc[(v >> 12) & 0x3f];
    p[2] = enc[(v >> 6) & 0x3f];
    p[3] = enc[v & 0x3f];
    p += 4;
  }
  switch (n - i) {
  case 2:
    v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
    p[0] = enc[v >> 18];
    p[1] = enc[(v >> 12) & 0x3f];
    p[2] = enc[(v >> 6) & 0x3f];
    p += 3;
    break;
  case 1:
    v = (uint32_t)in[i] << 16;
    p[0] = enc[v >> 18];
    p[1] = enc[(v >> 12) & 0x3f];
    p += 2;
    break;
  default:
    break;
  }
  return (size_t)(p - out);
}

size_t conch__b64_decoded_max(size_t n) {
  /* A trailing group of 2 or 3 characters carries 1 or 2 bytes; a lone
     character carries none (and is rejected by the decoder). */
  return n / 4 * 3 + (n % 4) * 3 / 4;
}

int conch__b64_decode(const char *in, size_t n, int alphabet, uint8_t *out,
                      size_t *outlen) {
  const uint8_t *dec = alphabet == CONCH_B64_URL ? dec_url : dec_std;
  const unsigned char *s = (const unsigned char *)in;
  uint8_t *p = out;
  size_t i = 0;
  uint32_t a, b, c, d;

  /* On error |out| may hold scratch bytes; |*outlen| is left alone.
     Padding counts only on a whole number of quads, as with Go's
     StdEncoding vs RawStdEncoding split by length.  At most two '=' are
     stripped; any '=' left over is then an invalid character. */
  if (n % 4 == 0 && n > 0 && s[n - 1] == '=') {
    n--;
    if (s[n - 1] == '=') {
      n--;
    }
  }
  if (n % 4 == 1) {
    return CONCH_ERR_PROTO;
  }
  for (; n - i >= 4; i += 4) {
    a = dec[s[i]];
    b = dec[s[i + 1]];
    c = dec[s[i + 2]];
    d = dec[s[i + 3]];
    if (((a | b | c | d) & 0x80) != 0) {
      return CONCH_ERR_PROTO;
    }
    a = a << 18 | b << 12 | c << 6 | d;
    p[0] = (uint8_t)(a >> 16);
    p[1] = (uint8_t)(a >> 8);
    p[2] = (uint8_t)a;
    p += 3;
  }
  /* Unused low bits of the last character are ignored, not required to be
     zero (RFC 4648 3.5 allows either; Go's default decoder ignores them). */
  switch (n - i) {
  case 3:
    a = dec[s[i]];
    b = dec[s[i + 1]];
    c = dec[s[i + 2]];
    if (((a | b | c) & 0x80) != 0) {
      return CONCH_ERR_PROTO;
    }
    a = a << 18 | b << 12 | c << 6;
    p[0] = (uint8_t)(a >> 16);
    p[1] = (uint8_t)(a >> 8);
    p += 2;
    break;
  case 2:
    a = dec[s[i]];
    b = dec[s[i + 1]];
    if (((a | b) & 0x80) != 0) {
      return CONCH_ERR_PROTO;
    }
    p[0] = (uint8_t)((a << 18 | b << 12) >> 16);
    p += 1;
    break;
  default:
    break;
  }
  *outlen = (size_t)(p - out);
  return 0;
}

/* ---- The public API (conch/base64.h) ------------------------------------ */

size_t conch_base64_encoded_len(size_t n, int flags) {
  if ((flags & CONCH_BASE64_PAD) != 0) {
    return (n + 2) / 3 * 4;
  }
  return conch__b64_encoded_len(n);
}

size_t conch_base64_encode(const uint8_t *in, size_t n, int flags, char *out) {
  size_t w = conch__b64_encode(
      in, n, (flags & CONCH_BASE64_URL) != 0 ? CONCH_B64_URL : CONCH_B64_STD,
      out);

  if ((flags & CONCH_BASE64_PAD) != 0) {
    while (w % 4 != 0) {
      out[w++] = '=';
    }
  }
  return w;
}

size_t conch_base64_decoded_max(size_t n) { return conch__b64_decoded_max(n); }

int conch_base64_decode(const char *in, size_t n, int flags, uint8_t *out,
                        size_t *outlen) {
  if (out == NULL || outlen == NULL || (in == NULL && n > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (n == 0) {
    *outlen = 0;
    return 0;
  }
  return conch__b64_decode(
      in, n, (flags & CONCH_BASE64_URL) != 0 ? CONCH_B64_URL : CONCH_B64_STD,
      out, outlen);
}
