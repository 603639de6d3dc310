/* The tree-less JSON reader (json.h): a checking pass, then walks over
   the checked text that decode only what the caller asks for. */
#include "json.h"

#include <string.h>

#include <conch/status.h>

#define BAD ((size_t)-1)

static size_t ws(const uint8_t *p, size_t n, size_t i) {
  while (i < n &&
         (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) {
    i++;
  }
  return i;
}

static int hex(uint8_t c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/* The four hex digits at p[i..i+4), or -1. */
static long hex4(const uint8_t *p, size_t n, size_t i) {
  long v = 0;
  size_t k;
  if (n < 4 || i > n - 4) {
    return -1;
  }
  for (k = 0; k < 4; k++) {
    int h = hex(p[i + k]);
    if (h < 0) {
      return -1;
    }
    v = v * 16 + h;
  }
  return v;
}

size_t conch__utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];

  if (c < 0x80) {
    return 1;
  }
  if (c < 0xC2) {
    return 0;
  }
  if (c < 0xE0) {
    return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
  }
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
        (c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0)) {
      return 0;
    }
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
        (s[3] & 0xC0) != 0x80 || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] >= 0x90)) {
      return 0;
    }
    return 4;
  }
  return 0;
}

/* ---- Checking ------------------------------------------------------------ */

/* The string at p[i] ('"'): the offset past its closing quote, or BAD. */
static size_t check_string(const uint8_t *p, size_t n, size_t i) {
  for (i++; i < n;) {
    uint8_t c = p[i];
    long u, lo;
    size_t k;

    if (c == '"') {
      return i + 1;
    }
    if (c < 0x20) {
      return BAD;
    }
    if (c >= 0x80) {
      k = conch__utf8_seq(p + i, n - i);
      if (k == 0) {
        return BAD;
      }
      i += k;
      continue;
    }
    if (c != '\\') {
      i++;
      continue;
    }
    if (i + 1 >= n) {
      return BAD;
    }
    if (strchr("\"\\/bfnrt", p[i + 1]) != NULL && p[i + 1] != '\0') {
      i += 2;
      continue;
    }
    if (p[i + 1] != 'u') {
      return BAD;
    }
    u = hex4(p, n, i + 2);
    if (u <= 0 || (u >= 0xDC00 && u <= 0xDFFF)) {
      return BAD; /* \u0000, a bad escape or a lone low surrogate */
    }
    if (u >= 0xD800 && u <= 0xDBFF) {
      if (i + 7 >= n || p[i + 6] != '\\' || p[i + 7] != 'u') {
        return BAD;
      }
      lo = hex4(p, n, i + 8);
      if (lo < 0xDC00 || lo > 0xDFFF) {
        return BAD;
      }
      i += 12;
    } else {
      i += 6;
    }
  }
  return BAD;
}

static size_t digits(const uint8_t *p, size_t n, size_t i) {
  while (i < n && p[i] >= '0' && p[i] <= '9') {
    i++;
  }
  return i;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at p[i]. */
static size_t check_number(const uint8_t *p, size_t n, size_t i) {
  size_t j;

  if (i < n && p[i] == '-') {
    i++;
  }
  if (i < n && p[i] == '0') {
    i++;
  } else {
    j = digits(p, n, i);
    if (j == i) {
      return BAD;
    }
    i = j;
  }
  if (i < n && p[i] == '.') {
    j = digits(p, n, i + 1);
    if (j == i + 1) {
      return BAD;
    }
    i = j;
  }
  if (i < n && (p[i] == 'e' || p[i] == 'E')) {
    i++;
    if (i < n && (p[i] == '+' || p[i] == '-')) {
      i++;
    }
    j = digits(p, n, i);
    if (j == i) {
      return BAD;
    }
    i = j;
  }
  return i;
}

static size_t check_word(const uint8_t *p, size_t n, size_t i, const char *w) {
  size_t len = strlen(w);
  return n - i >= len && memcmp(p + i, w, len) == 0 ? i + len : BAD;
}

/* A scalar at p[i]: the offset past it, or BAD. */
static size_t check_scalar(const uint8_t *p, size_t n, size_t i) {
  switch (p[i]) {
  case '"':
    return check_string(p, n, i);
  case 't':
    return check_word(p, n, i, "true");
  case 'f':
    return check_word(p, n, i, "false");
  case 'n':
    return check_word(p, n, i, "null");
  default:
    return check_number(p, n, i);
  }
}

/* A member's key and its ':' at p[i]: the offset of its value, or BAD. */
static size_t check_key(const uint8_t *p, size_t n, size_t i) {
  if (i >= n || p[i] != '"') {
    return BAD;
  }
  i = ws(p, n, check_string(p, n, i));
  if (i >= n || p[i] != ':') {
    return BAD;
  }
  return ws(p, n, i + 1);
}

int conch__json_check(const uint8_t *p, size_t n, size_t *root) {
  /* One bit per open container: set for an object. */
  uint8_t stack[CONCH_JSON_MAX_DEPTH / 8];
  size_t depth = 0;
  size_t i = ws(p, n, 0);
  int obj;

  if (root != NULL) {
    *root = i;
  }
  for (;;) {
    /* A value at p[i], at level depth + 1. */
    if (i >= n || i == BAD || depth >= CONCH_JSON_MAX_DEPTH) {
      return CONCH_ERR_PROTO;
    }
    if (p[i] == '{' || p[i] == '[') {
      obj = p[i] == '{';
      if (obj) {
        stack[depth / 8] |= (uint8_t)(1u << (depth % 8));
      } else {
        stack[depth / 8] &= (uint8_t) ~(1u << (depth % 8));
      }
      depth++;
      i = ws(p, n, i + 1);
      if (i < n && p[i] == (obj ? '}' : ']')) {
        depth--;
        i++;
      } else {
        if (obj) {
          i = check_key(p, n, i);
        }
        continue;
      }
    } else {
      i = check_scalar(p, n, i);
      if (i == BAD) {
        return CONCH_ERR_PROTO;
      }
    }
    /* After a value: a separator, a closer, or the end. */
    for (;;) {
      i = ws(p, n, i);
      if (depth == 0) {
        return i == n ? 0 : CONCH_ERR_PROTO;
      }
      if (i >= n) {
        return CONCH_ERR_PROTO;
      }
      obj = (stack[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1;
      if (p[i] == (obj ? '}' : ']')) {
        depth--;
        i++;
        continue;
      }
      if (p[i] != ',') {
        return CONCH_ERR_PROTO;
      }
      i = ws(p, n, i + 1);
      if (obj) {
        i = check_key(p, n, i);
      }
      break;
    }
  }
}

/* ---- Walking checked text ------------------------------------------------ */

int conch__json_kind(const uint8_t *p, size_t at) {
  switch (p[at]) {
  case '{':
    return CONCH_JSON_OBJECT;
  case '[':
    return CONCH_JSON_ARRAY;
  case '"':
    return CONCH_JSON_STRING;
  case 't':
    return CONCH_JSON_TRUE;
  case 'f':
    return CONCH_JSON_FALSE;
  case 'n':
    return CONCH_JSON_NULL;
  default:
    return CONCH_JSON_NUMBER;
  }
}

static size_t skip_string(const uint8_t *p, size_t i) {
  for (i++; p[i] != '"'; i++) {
    if (p[i] == '\\') {
      i++;
    }
  }
  return i + 1;
}

/* The offset past the value at p[i]. */
static size_t skip(const uint8_t *p, size_t n, size_t i) {
  size_t depth = 0;

  if (p[i] == '"') {
    return skip_string(p, i);
  }
  if (p[i] != '{' && p[i] != '[') {
    while (i < n && strchr(",}] \t\r\n", p[i]) == NULL) {
      i++;
    }
    return i;
  }
  for (;;) {
    switch (p[i]) {
    case '"':
      i = skip_string(p, i);
      continue;
    case '{':
    case '[':
      depth++;
      break;
    case '}':
    case ']':
      if (--depth == 0) {
        return i + 1;
      }
      break;
    default:
      break;
    }
    i++;
  }
}

/* *it is at the container's opener or at the ',' or closer after an
   item: the offset of the next item, or BAD after the last. */
static size_t next_item(const uint8_t *p, size_t n, size_t *it, uint8_t end) {
  size_t i = *it;

  if (p[i] == end) {
    return BAD;
  }
  i = ws(p, n, i + 1);
  if (p[i] == end) {
    *it = i;
    return BAD;
  }
  return i;
}

int conch__json_member(const uint8_t *p, size_t n, size_t *it, size_t *key,
                       size_t *value) {
  size_t i = next_item(p, n, it, '}');

  if (i == BAD) {
    return 0;
  }
  *key = i;
  i = ws(p, n, skip_string(p, i)); /* at ':' */
  i = ws(p, n, i + 1);
  *value = i;
  *it = ws(p, n, skip(p, n, i));
  return 1;
}

int conch__json_element(const uint8_t *p, size_t n, size_t *it, size_t *value) {
  size_t i = next_item(p, n, it, ']');

  if (i == BAD) {
    return 0;
  }
  *value = i;
  *it = ws(p, n, skip(p, n, i));
  return 1;
}

/* The next character of the string whose body continues at p[*i]: its
   UTF-8 bytes into |out|, their count returned; 0 at the closing quote. */
static size_t next_char(const uint8_t *p, size_t *i, uint8_t out[4]) {
  size_t at = *i;
  unsigned long u;

  if (p[at] == '"') {
    return 0;
  }
  if (p[at] != '\\') {
    out[0] = p[at];
    *i = at + 1;
    return 1;
  }
  switch (p[at + 1]) {
  case 'b':
    out[0] = '\b';
    break;
  case 'f':
    out[0] = '\f';
    break;
  case 'n':
    out[0] = '\n';
    break;
  case 'r':
    out[0] = '\r';
    break;
  case 't':
    out[0] = '\t';
    break;
  case 'u':
    u = (unsigned long)hex4(p, at + 6, at + 2);
    *i = at + 6;
    if (u >= 0xD800 && u <= 0xDBFF) {
      u = 0x10000 + ((u - 0xD800) << 10) +
          ((unsigned long)hex4(p, at + 12, at + 8) - 0xDC00);
      *i = at + 12;
    }
    if (u < 0x80) {
      out[0] = (uint8_t)u;
      return 1;
    }
    if (u < 0x800) {
      out[0] = (uint8_t)(0xC0 | (u >> 6));
      out[1] = (uint8_t)(0x80 | (u & 0x3F));
      return 2;
    }
    if (u < 0x10000) {
      out[0] = (uint8_t)(0xE0 | (u >> 12));
      out[1] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
      out[2] = (uint8_t)(0x80 | (u & 0x3F));
      return 3;
    }
    out[0] = (uint8_t)(0xF0 | (u >> 18));
    out[1] = (uint8_t)(0x80 | ((u >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((u >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (u & 0x3F));
    return 4;
  default: /* '"', '\\', '/' */
    out[0] = p[at + 1];
    break;
  }
  *i = at + 2;
  return 1;
}

size_t conch__json_strlen(const uint8_t *p, size_t at) {
  uint8_t c[4];
  size_t i = at + 1, len = 0, k;

  while ((k = next_char(p, &i, c)) > 0) {
    len += k;
  }
  return len;
}

size_t conch__json_string(const uint8_t *p, size_t at, char *out) {
  uint8_t c[4];
  size_t i = at + 1, len = 0, k;

  while ((k = next_char(p, &i, c)) > 0) {
    memcpy(out + len, c, k);
    len += k;
  }
  out[len] = '\0';
  return len;
}

int conch__json_string_is(const uint8_t *p, size_t at, const char *s) {
  uint8_t c[4];
  size_t i = at + 1, len = 0, k, slen = strlen(s);

  while ((k = next_char(p, &i, c)) > 0) {
    if (k > slen - len || memcmp(s + len, c, k) != 0) {
      return 0;
    }
    len += k;
  }
  return len == slen;
}

size_t conch__json_values(const uint8_t *p, size_t n) {
  size_t count = 1;
  size_t i;
  int in_str = 0;

  for (i = 0; i < n; i++) {
    uint8_t ch = p[i];

    if (in_str) {
      if (ch == '\\') {
        i++;
      } else if (ch == '"') {
        in_str = 0;
      }
    } else if (ch == '"') {
      in_str = 1;
    } else if (ch == '[' || ch == '{' || ch == ',' || ch == ':') {
      count++;
    }
  }
  return count;
}
