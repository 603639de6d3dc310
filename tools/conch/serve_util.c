/* conch serve's byte queue and timer heap (serve_util.h). */
#include "serve_util.h"

#include <stdlib.h>
#include <string.h>

/* ---- The byte queue ------------------------------------------------------ */

int srv_buf_append(srv_buf *b, const conch_mem *mem, const void *p, size_t n) {
  size_t held = b->len - b->off;
  size_t cap;
  uint8_t *grown;

  if (n == 0) {
    return 0;
  }
  if (b->cap - b->len < n && b->off > 0) {
    /* Slide what is held to the front before anything grows. */
    memmove(b->data, b->data + b->off, held);
    b->off = 0;
    b->len = held;
  }
  if (b->cap - b->len >= n) {
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
  }
  if (n > SIZE_MAX / 2 - held) {
    return -1;
  }
  for (cap = b->cap > 0 ? b->cap : 256; cap - held < n;) {
    cap *= 2;
  }
  grown = mem->realloc(b->data, cap, mem->user_data);
  if (grown == NULL) {
    return -1;
  }
  b->data = grown;
  b->cap = cap;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void srv_buf_consume(srv_buf *b, size_t n) {
  if (n >= b->len - b->off) {
    srv_buf_reset(b);
  } else {
    b->off += n;
  }
}

void srv_buf_reset(srv_buf *b) { b->off = b->len = 0; }

void srv_buf_free(srv_buf *b, const conch_mem *mem) {
  mem->free(b->data, mem->user_data);
  b->data = NULL;
  b->off = b->len = b->cap = 0;
}

/* ---- The timer heap: t[i]'s children are t[2i+1] and t[2i+2] ------------- */

static void heap_place(srv_heap *h, size_t i, srv_timer *t) {
  h->t[i] = t;
  t->idx = i;
}

/* Puts |t| where hole |i| is, moving it up or down until the heap holds. */
static void heap_fix(srv_heap *h, size_t i, srv_timer *t) {
  while (i > 0 && h->t[(i - 1) / 2]->when > t->when) {
    heap_place(h, i, h->t[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  for (;;) {
    size_t c = 2 * i + 1;

    if (c >= h->n) {
      break;
    }
    if (c + 1 < h->n && h->t[c + 1]->when < h->t[c]->when) {
      c++;
    }
    if (h->t[c]->when >= t->when) {
      break;
    }
    heap_place(h, i, h->t[c]);
    i = c;
  }
  heap_place(h, i, t);
}

int srv_heap_insert(srv_heap *h, srv_timer *t, int64_t when) {
  if (t->idx != SIZE_MAX) {
    t->when = when;
    heap_fix(h, t->idx, t);
    return 0;
  }
  if (h->n == h->cap) {
    size_t cap = h->cap > 0 ? h->cap * 2 : 64;
    srv_timer **grown;

    if (cap > SIZE_MAX / sizeof(*grown)) {
      return -1;
    }
    grown = realloc(h->t, cap * sizeof(*grown));
    if (grown == NULL) {
      return -1;
    }
    h->t = grown;
    h->cap = cap;
  }
  t->when = when;
  h->n++;
  heap_fix(h, h->n - 1, t);
  return 0;
}

void srv_heap_remove(srv_heap *h, srv_timer *t) {
  size_t i = t->idx;
  srv_timer *last;

  if (i == SIZE_MAX) {
    return;
  }
  t->idx = SIZE_MAX;
  last = h->t[--h->n];
  if (last != t) {
    heap_fix(h, i, last);
  }
}

void srv_heap_free(srv_heap *h) {
  free(h->t);
  h->t = NULL;
  h->n = h->cap = 0;
}

/* ---- A table of int keys ------------------------------------------------- */

static size_t itab_home(const srv_itab *t, int key) {
  return ((size_t)(uint32_t)key * 2654435761u) & (t->cap - 1);
}

void *srv_itab_get(const srv_itab *t, int key) {
  if (t->cap == 0) {
    return NULL;
  }
  for (size_t i = itab_home(t, key); t->slot[i].val != NULL;
       i = (i + 1) & (t->cap - 1)) {
    if (t->slot[i].key == key) {
      return t->slot[i].val;
    }
  }
  return NULL;
}

static void itab_place(srv_itab *t, int key, void *val) {
  size_t i = itab_home(t, key);

  while (t->slot[i].val != NULL) {
    i = (i + 1) & (t->cap - 1);
  }
  t->slot[i].key = key;
  t->slot[i].val = val;
}

int srv_itab_put(srv_itab *t, int key, void *val) {
  if ((t->n + 1) * 2 > t->cap) {
    size_t cap = t->cap == 0 ? 64 : t->cap * 2;
    srv_islot *old = t->slot;
    size_t oldcap = t->cap;

    t->slot = calloc(cap, sizeof(*t->slot));
    if (t->slot == NULL) {
      t->slot = old;
      return -1;
    }
    t->cap = cap;
    for (size_t i = 0; i < oldcap; i++) {
      if (old[i].val != NULL) {
        itab_place(t, old[i].key, old[i].val);
      }
    }
    free(old);
  }
  itab_place(t, key, val);
  t->n++;
  return 0;
}

void srv_itab_del(srv_itab *t, int key) {
  size_t i, j;

  if (t->cap == 0) {
    return;
  }
  for (i = itab_home(t, key); t->slot[i].key != key;
       i = (i + 1) & (t->cap - 1)) {
    if (t->slot[i].val == NULL) {
      return;
    }
  }
  if (t->slot[i].val == NULL) {
    return;
  }
  t->slot[i].val = NULL;
  t->n--;
  for (j = (i + 1) & (t->cap - 1); t->slot[j].val != NULL;
       j = (j + 1) & (t->cap - 1)) {
    size_t home = itab_home(t, t->slot[j].key);

    /* Moved up unless its home is within (i, j]. */
    if (((j - home) & (t->cap - 1)) >= ((j - i) & (t->cap - 1))) {
      t->slot[i] = t->slot[j];
      t->slot[j].val = NULL;
      i = j;
    }
  }
}

void srv_itab_free(srv_itab *t) {
  free(t->slot);
  t->slot = NULL;
  t->cap = t->n = 0;
}
