/* base64, standard alphabet (see b64.h). */
#include "b64.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The 6-bit value of |c|, or -1. */
static int value_of(unsigned char c) {
  if (c >= 'A' && c <= 'Z') {
    return c - 'A';
  }
  if (c >= 'a' && c <= 'z') {
    return c - 'a' + 26;
  }
  if (c >= '0' && c <= '9') {
    return c - '0' + 52;
  }
  if (c == '+') {
    return 62;
  }
  if (c == '/') {
    return 63;
  }
  return -1;
}

size_t b64_encoded_len(size_t n, int pad) {
  size_t rem = n % 3;

  if (rem == 0) {
    return n / 3 * 4;
  }
  return n / 3 * 4 + (pad ? 4 : rem + 1);
}

size_t b64_encode(const uint8_t *in, size_t n, int pad, char *out) {
  size_t i, w = 0;

  for (i = 0; i < n; i += 3) {
    size_t left = n - i;
    uint32_t v = (uint32_t)in[i] << 16;

    if (left > 1) {
      v |= (uint32_t)in[i + 1] << 8;
    }
    if (left > 2) {
      v |= in[i + 2];
    }
    out[w++] = alphabet[v >> 18];
    out[w++] = alphabet[(v >> 12) & 0x3f];
    if (left > 1) {
      out[w++] = alphabet[(v >> 6) & 0x3f];
    } else if (pad) {
      out[w++] = '=';
    }
    if (left > 2) {
      out[w++] = alphabet[v & 0x3f];
    } else if (pad) {
      out[w++] = '=';
    }
  }
  return w;
}

size_t b64_decoded_max(size_t n) {
  return n / 4 * 3 + (n % 4) * 3 / 4;
}

int b64_decode(const char *in, size_t n, uint8_t *out, size_t *outlen) {
  const unsigned char *s = (const unsigned char *)in;
  size_t i, w = 0;
  uint32_t acc = 0;
  int bits = 0;

  if (n % 4 == 0 && n > 0 && s[n - 1] == '=') {
    n--;
    if (s[n - 1] == '=') {
      n--;
    }
  }
  if (n % 4 == 1) {
    return -1;
  }
  for (i = 0; i < n; i++) {
    int v = value_of(s[i]);

    if (v < 0) {
      return -1;
    }
    acc = (acc << 6 | (uint32_t)v) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[w++] = (uint8_t)(acc >> bits);
    }
  }
  *outlen = w;
  return 0;
}
