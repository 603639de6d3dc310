/* Ordered multi-map of header fields: an array of entries and one string
   buffer holding every name and value, each followed by a NUL.  Entries
   only ever append their strings at the end of the buffer and removal keeps
   the entry order, so strings appear in the buffer in entry order. */
#include "metadata_int.h"

#include <string.h>

#include <conch/status.h>

#include "base64.h"
#include "mem_int.h"

#define NAME_MAX_LEN 255

static int to_lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

/* Zero when none of the |n| bytes at |p| is in 'A'..'Z', eight at a time:
   received names are lowercase already (HTTP/2 demands it, the HTTP/1.1
   parser lowercases them).  Non-zero for some bytes of 0x80 and up too,
   which the caller then looks at one by one. */
static int maybe_upper(const uint8_t *p, size_t n) {
  const uint64_t hi = 0x8080808080808080ull;
  uint64_t w, acc = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    memcpy(&w, p + i, 8);
    /* Bit 7 of a byte x < 0x80: x + 0x3f sets it from 'A', x + 0x25 from
       '[' on, neither carrying out of the byte; x >= 0x80 sets it. */
    acc |= ((w + 0x3f3f3f3f3f3f3f3full) & ~(w + 0x2525252525252525ull)) | w;
  }
  for (; i < n; i++) {
    acc |= (unsigned)(p[i] - 'A') < 26u ? 0x80u : 0u;
  }
  return (acc & hi) != 0;
}

static int name_eq(const char *a, size_t a_len, const char *b, size_t b_len) {
  size_t i;

  if (a_len != b_len) {
    return 0;
  }
  for (i = 0; i < a_len; ++i) {
    if (to_lower((unsigned char)a[i]) != to_lower((unsigned char)b[i])) {
      return 0;
    }
  }
  return 1;
}

/* Whether |name| starts with |prefix| (lowercase), case-insensitively. */
static int has_prefix(const char *name, size_t len, const char *prefix) {
  size_t n = strlen(prefix);

  return len >= n && name_eq(name, n, prefix, n);
}

void conch__metadata_init(conch_metadata *md, const conch_mem *mem) {
  static const conch_buf empty = CONCH_BUF_INIT;

  md->mem = mem != NULL ? mem : conch_mem_default();
  md->ents = NULL;
  md->n = 0;
  md->cap = 0;
  md->strings = empty;
}

void conch__metadata_clear(conch_metadata *md) {
  if (md == NULL) {
    return;
  }
  conch__free(md->mem, md->ents);
  conch__buf_free(&md->strings, md->mem);
  md->ents = NULL;
  md->n = 0;
  md->cap = 0;
}

int conch_metadata_new(conch_metadata **out, const conch_mem *mem) {
  conch_metadata *md;

  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (mem == NULL) {
    mem = conch_mem_default();
  }
  md = conch__malloc(mem, sizeof(*md));
  if (md == NULL) {
    return CONCH_ERR_NOMEM;
  }
  conch__metadata_init(md, mem);
  *out = md;
  return 0;
}

void conch_metadata_free(conch_metadata *md) {
  const conch_mem *mem;

  if (md == NULL) {
    return;
  }
  mem = md->mem;
  conch__metadata_clear(md);
  conch__free(mem, md);
}

static int ents_reserve(conch_metadata *md, size_t extra) {
  conch_md_entry *ents;
  size_t cap;

  if (md->cap - md->n >= extra) {
    return 0;
  }
  if (extra > SIZE_MAX / sizeof(*ents) - md->n) {
    return CONCH_ERR_NOMEM;
  }
  cap = md->cap > 0 ? md->cap : 8;
  while (cap < md->n + extra) {
    cap = cap > SIZE_MAX / sizeof(*ents) / 2 ? md->n + extra : cap * 2;
  }
  ents = conch__realloc(md->mem, md->ents, cap * sizeof(*ents));
  if (ents == NULL) {
    return CONCH_ERR_NOMEM;
  }
  md->ents = ents;
  md->cap = cap;
  return 0;
}

/* Bytes that |name_len| and |value_len| take in the string buffer, or 0
   when they would push an offset past 32 bits. */
static size_t pair_size(const conch_metadata *md, size_t name_len,
                        size_t value_len) {
  size_t room;

  if (md->strings.len >= UINT32_MAX) {
    return 0;
  }
  room = UINT32_MAX - md->strings.len;
  if (name_len > room || value_len > room - name_len ||
      room - name_len - value_len < 2) {
    return 0;
  }
  return name_len + value_len + 2;
}

/* Appends a pair, lowercasing the name.  Nothing is added on failure. */
static int md_push(conch_metadata *md, const char *name, size_t name_len,
                   const void *value, size_t value_len) {
  conch_md_entry *e;
  size_t need, off, i;
  uint8_t *p;
  int rv;

  need = pair_size(md, name_len, value_len);
  if (need == 0) {
    return CONCH_ERR_NOMEM;
  }
  rv = ents_reserve(md, 1);
  if (rv != 0) {
    return rv;
  }
  rv = conch__buf_reserve(&md->strings, md->mem, need);
  if (rv != 0) {
    return rv;
  }
  off = md->strings.len;
  p = md->strings.data + off;
  if (name_len > 0) {
    memcpy(p, name, name_len);
  }
  if (maybe_upper(p, name_len)) {
    for (i = 0; i < name_len; ++i) {
      p[i] = (uint8_t)to_lower(p[i]);
    }
  }
  p[name_len] = '\0';
  if (value_len > 0) {
    memcpy(p + name_len + 1, value, value_len);
  }
  p[name_len + 1 + value_len] = '\0';
  md->strings.len += need;
  e = &md->ents[md->n++];
  e->name_off = (uint32_t)off;
  e->name_len = (uint32_t)name_len;
  e->value_off = (uint32_t)(off + name_len + 1);
  e->value_len = (uint32_t)value_len;
  return 0;
}

/* Drops everything added after the list had |n| pairs and |len| string
   bytes; valid because adding only appends. */
static void md_truncate(conch_metadata *md, size_t n, size_t len) {
  md->n = n;
  md->strings.len = len;
}

static int name_char_ok(unsigned char c, int allow_upper) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || (allow_upper && c >= 'A' && c <= 'Z');
}

static int name_valid(const char *name, size_t len, int allow_upper) {
  size_t i;

  if (len == 0 || len > NAME_MAX_LEN) {
    return 0;
  }
  for (i = 0; i < len; ++i) {
    if (!name_char_ok((unsigned char)name[i], allow_upper)) {
      return 0;
    }
  }
  return 1;
}

int conch__metadata_name_ok(const char *name, size_t len) {
  return name_valid(name, len, 0);
}

int conch__metadata_value_ok(const uint8_t *value, size_t len) {
  size_t i;

  for (i = 0; i < len; ++i) {
    if ((value[i] < 0x20 || value[i] > 0x7e) && value[i] != '\t') {
      return 0;
    }
  }
  return 1;
}

int conch__metadata_is_bin(const char *name, size_t len) {
  return len >= 4 && name_eq(name + len - 4, 4, "-bin", 4);
}

int conch__metadata_reserved(const char *name, size_t len) {
  static const char *const exact[] = {
      "connection",
      "keep-alive",
      "proxy-connection",
      "transfer-encoding",
      "upgrade",
      "te",
      "host",
      "content-type",
      "content-length",
      "content-encoding",
      "accept-encoding",
      "x-user-agent",
      "x-grpc-web",
  };
  static const char *const prefixes[] = {":", "connect-", "trailer-connect-",
                                         "grpc-"};
  size_t i;

  for (i = 0; i < sizeof(exact) / sizeof(exact[0]); ++i) {
    if (name_eq(name, len, exact[i], strlen(exact[i]))) {
      return 1;
    }
  }
  for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); ++i) {
    if (has_prefix(name, len, prefixes[i])) {
      return 1;
    }
  }
  return 0;
}

int conch_metadata_add(conch_metadata *md, const char *name, const void *value,
                       size_t len) {
  size_t name_len;

  if (md == NULL || name == NULL || (value == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  name_len = strlen(name);
  if (!name_valid(name, name_len, 1)) {
    return CONCH_ERR_HEADER;
  }
  if (!conch__metadata_is_bin(name, name_len) &&
      !conch__metadata_value_ok(value, len)) {
    return CONCH_ERR_HEADER;
  }
  return md_push(md, name, name_len, value, len);
}

int conch_metadata_add_str(conch_metadata *md, const char *name,
                           const char *value) {
  if (value == NULL) {
    return CONCH_ERR_INVALID;
  }
  return conch_metadata_add(md, name, value, strlen(value));
}

size_t conch_metadata_count(const conch_metadata *md) {
  return md != NULL ? md->n : 0;
}

int conch_metadata_at(const conch_metadata *md, size_t i, const char **name,
                      const uint8_t **value, size_t *len) {
  const conch_md_entry *e;

  if (md == NULL || i >= md->n) {
    return CONCH_ERR_INVALID;
  }
  e = &md->ents[i];
  if (name != NULL) {
    *name = (const char *)md->strings.data + e->name_off;
  }
  if (value != NULL) {
    *value = md->strings.data + e->value_off;
  }
  if (len != NULL) {
    *len = e->value_len;
  }
  return 0;
}

static int ent_is(const conch_metadata *md, const conch_md_entry *e,
                  const char *name, size_t len) {
  return name_eq((const char *)md->strings.data + e->name_off, e->name_len,
                 name, len);
}

long conch_metadata_find(const conch_metadata *md, const char *name,
                         size_t start) {
  size_t i, len;

  if (md == NULL || name == NULL) {
    return -1;
  }
  len = strlen(name);
  for (i = start; i < md->n; ++i) {
    if (ent_is(md, &md->ents[i], name, len)) {
      return (long)i;
    }
  }
  return -1;
}

const char *conch_metadata_get(const conch_metadata *md, const char *name,
                               size_t *len) {
  const conch_md_entry *e;
  long i;

  i = conch_metadata_find(md, name, 0);
  if (i < 0) {
    if (len != NULL) {
      *len = 0;
    }
    return NULL;
  }
  e = &md->ents[(size_t)i];
  if (len != NULL) {
    *len = e->value_len;
  }
  return (const char *)md->strings.data + e->value_off;
}

/* Slides the live strings down over the garbage removed entries left.
   Strings are in entry order, so a move never lands on one not yet
   moved. */
static void md_compact(conch_metadata *md) {
  uint8_t *base = md->strings.data;
  conch_md_entry *e;
  size_t w = 0, i, n;

  for (i = 0; i < md->n; ++i) {
    e = &md->ents[i];
    n = (size_t)e->name_len + 1;
    memmove(base + w, base + e->name_off, n);
    e->name_off = (uint32_t)w;
    w += n;
    n = (size_t)e->value_len + 1;
    memmove(base + w, base + e->value_off, n);
    e->value_off = (uint32_t)w;
    w += n;
  }
  md->strings.len = w;
}

size_t conch_metadata_remove(conch_metadata *md, const char *name) {
  size_t i, w = 0, len;

  if (md == NULL || name == NULL) {
    return 0;
  }
  len = strlen(name);
  for (i = 0; i < md->n; ++i) {
    if (!ent_is(md, &md->ents[i], name, len)) {
      md->ents[w++] = md->ents[i];
    }
  }
  i = md->n - w;
  md->n = w;
  /* Compacting on every removal keeps the buffer at its live size however
     often a caller adds and removes; it costs no more than the scan. */
  if (i > 0) {
    md_compact(md);
  }
  return i;
}

void conch_metadata_reset(conch_metadata *md) {
  if (md == NULL) {
    return;
  }
  md->n = 0;
  conch__buf_reset(&md->strings);
}

int conch_metadata_append(conch_metadata *dst, const conch_metadata *src) {
  const conch_md_entry *e;
  size_t n, i, n0, len0, bytes = 0;
  int rv;

  if (dst == NULL || src == NULL) {
    return CONCH_ERR_INVALID;
  }
  /* Reserving everything first makes the copy unable to fail halfway, and
     keeps |src| valid when it is |dst| itself. */
  n = src->n;
  for (i = 0; i < n; ++i) {
    e = &src->ents[i];
    bytes += (size_t)e->name_len + e->value_len + 2;
  }
  if (n > 0 && pair_size(dst, bytes, 0) == 0) {
    return CONCH_ERR_NOMEM;
  }
  rv = ents_reserve(dst, n);
  if (rv != 0) {
    return rv;
  }
  rv = conch__buf_reserve(&dst->strings, dst->mem, bytes);
  if (rv != 0) {
    return rv;
  }
  n0 = dst->n;
  len0 = dst->strings.len;
  for (i = 0; i < n; ++i) {
    e = &src->ents[i];
    rv = md_push(dst, (const char *)src->strings.data + e->name_off,
                 e->name_len, src->strings.data + e->value_off, e->value_len);
    if (rv != 0) {
      md_truncate(dst, n0, len0);
      return rv;
    }
  }
  return 0;
}

int conch__metadata_add_raw(conch_metadata *md, const char *name,
                            size_t name_len, const void *value,
                            size_t value_len) {
  return md_push(md, name, name_len, value, value_len);
}

static int is_ows(char c) { return c == ' ' || c == '\t'; }

/* Walks the comma-separated elements of a "-bin" value, decoding each into
   |raw|; with |add| set, appends each decoded element.  Returns 0,
   CONCH_ERR_PROTO (an element is not base64) or CONCH_ERR_NOMEM. */
static int bin_elements(conch_metadata *md, const char *name, size_t name_len,
                        const char *value, size_t value_len, uint8_t *raw,
                        int add) {
  const char *p = value, *end = value + value_len, *comma, *b, *e;
  size_t len;
  int rv;

  for (;;) {
    comma = memchr(p, ',', (size_t)(end - p));
    e = comma != NULL ? comma : end;
    b = p;
    /* HTTP joins repeated fields with ", ": the space is not base64. */
    while (b < e && is_ows(*b)) {
      ++b;
    }
    while (e > b && is_ows(e[-1])) {
      --e;
    }
    rv = conch__b64_decode(b, (size_t)(e - b), CONCH_B64_STD, raw, &len);
    if (rv != 0) {
      return CONCH_ERR_PROTO;
    }
    if (add) {
      rv = md_push(md, name, name_len, raw, len);
      if (rv != 0) {
        return rv;
      }
    }
    if (comma == NULL) {
      return 0;
    }
    p = comma + 1;
  }
}

int conch__metadata_add_wire(conch_metadata *md, const char *name,
                             size_t name_len, const char *value,
                             size_t value_len) {
  size_t n0 = md->n, len0 = md->strings.len;
  uint8_t *raw;
  int rv;

  if (!conch__metadata_is_bin(name, name_len)) {
    return md_push(md, name, name_len, value, value_len);
  }
  /* Every element decodes to at most what the whole value would. */
  raw = conch__malloc(md->mem, conch__b64_decoded_max(value_len) + 1);
  if (raw == NULL) {
    return CONCH_ERR_NOMEM;
  }
  /* Check every element before adding any, so that a bad one leaves a
     single verbatim pair rather than a partial list. */
  rv = bin_elements(md, name, name_len, value, value_len, raw, 0);
  if (rv == 0) {
    rv = bin_elements(md, name, name_len, value, value_len, raw, 1);
  } else if (rv == CONCH_ERR_PROTO) {
    rv = md_push(md, name, name_len, value, value_len);
  }
  if (rv != 0) {
    md_truncate(md, n0, len0);
  }
  conch__free(md->mem, raw);
  return rv;
}
