/* Bounded output of collected runs (output.h). */
#include <stdint.h>
#include <string.h>

#include "api_int.h"
#include "output.h"

void conch__output_init(conch__output *o, const conch_mem *mem, size_t limit) {
  memset(o, 0, sizeof(*o));
  o->mem = mem;
  o->limit = limit;
}

void conch__output_clear(conch__output *o) {
  api_free(o->mem, o->out.p);
  api_free(o->mem, o->err.p);
  api_free(o->mem, o->text.p);
  conch__output_init(o, o->mem, o->limit);
}

/* Room for |n| more bytes in |b|, whose capacity need never pass |max|
   (len + n <= max).  Returns 0 or CONCH_ERR_NOMEM (|b| unchanged). */
static int reserve(const conch_mem *m, conch__obuf *b, size_t n, size_t max) {
  size_t cap, need = b->len + n;
  uint8_t *q;
  if (need <= b->cap) {
    return 0;
  }
  cap = b->cap != 0 ? b->cap : 4096;
  while (cap < need && cap <= SIZE_MAX / 2) {
    cap *= 2;
  }
  if (cap < need) {
    cap = need;
  }
  if (cap > max) {
    cap = max;
  }
  q = m->realloc(b->p, cap, m->user_data);
  if (q == NULL) {
    return CONCH_ERR_NOMEM;
  }
  b->p = q;
  b->cap = cap;
  return 0;
}

int conch__output_add(conch__output *o, int is_err, const uint8_t *p,
                      size_t n) {
  conch__obuf *b = is_err ? &o->err : &o->out;
  size_t *dropped = is_err ? &o->err_dropped : &o->out_dropped;
  size_t room = b->len < o->limit ? o->limit - b->len : 0;
  size_t keep = n < room ? n : room;
  size_t text_max =
      o->limit > SIZE_MAX / 2 ? SIZE_MAX : o->limit * 2; /* both streams */

  if (keep > 0 && (reserve(o->mem, b, keep, o->limit) != 0 ||
                   reserve(o->mem, &o->text, keep, text_max) != 0)) {
    keep = 0;
  }
  if (keep > 0) {
    memcpy(b->p + b->len, p, keep);
    b->len += keep;
    memcpy(o->text.p + o->text.len, p, keep);
    o->text.len += keep;
  }
  /* Saturates rather than wraps (a 32-bit size_t and 4 GiB of output). */
  *dropped = n - keep > SIZE_MAX - *dropped ? SIZE_MAX : *dropped + (n - keep);
  return keep < n && keep < room ? CONCH_ERR_NOMEM : 0;
}
