/* Growable byte buffer. */
#include "buf.h"

#include <stdint.h>
#include <string.h>

#include <conch/status.h>

#include "mem_int.h"

int conch__buf_reserve(conch_buf *b, const conch_mem *mem, size_t extra) {
  size_t used = b->len - b->off;
  size_t need, cap;
  uint8_t *p;

  if (b->cap - b->len >= extra) {
    return 0;
  }
  if (extra > SIZE_MAX - used) {
    return CONCH_ERR_NOMEM;
  }
  need = used + extra;
  /* Compacting is enough when the consumed front is at least half. */
  if (b->off > 0 && need <= b->cap && b->off >= used) {
    memmove(b->data, b->data + b->off, used);
    b->off = 0;
    b->len = used;
    return 0;
  }
  cap = b->cap < 256 ? 256 : b->cap;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) {
      cap = need;
      break;
    }
    cap *= 2;
  }
  if (b->off > 0) {
    /* Move the live bytes down first so realloc copies only them. */
    memmove(b->data, b->data + b->off, used);
    b->off = 0;
    b->len = used;
  }
  p = conch__realloc(mem, b->data, cap);
  if (p == NULL) {
    return CONCH_ERR_NOMEM;
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

int conch__buf_append(conch_buf *b, const conch_mem *mem, const void *p,
                      size_t n) {
  int rv;
  if (n == 0) {
    return 0;
  }
  rv = conch__buf_reserve(b, mem, n);
  if (rv != 0) {
    return rv;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void conch__buf_consume(conch_buf *b, size_t n) {
  b->off += n;
  if (b->off >= b->len) {
    b->off = 0;
    b->len = 0;
  }
}

void conch__buf_reset(conch_buf *b) {
  b->off = 0;
  b->len = 0;
}

void conch__buf_free(conch_buf *b, const conch_mem *mem) {
  conch__free(mem, b->data);
  b->data = NULL;
  b->off = b->len = b->cap = 0;
}
