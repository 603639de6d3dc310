/* A growable byte buffer with a read offset.  Bytes live in
   data[off .. len); consuming from the front only moves |off|, and the
   buffer compacts itself when it needs room. */
#ifndef CONCH_BUF_H
#define CONCH_BUF_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>

typedef struct conch_buf {
  uint8_t *data;
  size_t off; /* first unread byte */
  size_t len; /* end of the bytes held */
  size_t cap;
} conch_buf;

#define CONCH_BUF_INIT                                                         \
  { NULL, 0, 0, 0 }

static inline size_t conch__buf_size(const conch_buf *b) {
  return b->len - b->off;
}
/* NULL for a buffer that never held anything. */
static inline uint8_t *conch__buf_head(const conch_buf *b) {
  return b->data != NULL ? b->data + b->off : NULL;
}

/* Makes room for |extra| more bytes after |len|.  Returns 0 or
   CONCH_ERR_NOMEM (buffer unchanged). */
int conch__buf_reserve(conch_buf *b, const conch_mem *mem, size_t extra);
/* Appends |n| bytes.  Returns 0 or CONCH_ERR_NOMEM (buffer unchanged). */
int conch__buf_append(conch_buf *b, const conch_mem *mem, const void *p,
                      size_t n);
/* Drops |n| bytes from the front (n <= size).  Resets to empty when all
   are consumed. */
void conch__buf_consume(conch_buf *b, size_t n);
/* Empties the buffer, keeping its memory. */
void conch__buf_reset(conch_buf *b);
/* Frees the memory; the buffer is left empty and reusable. */
void conch__buf_free(conch_buf *b, const conch_mem *mem);

#endif
