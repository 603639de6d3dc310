/* Timers (timer.h): a binary min-heap; each timer knows its index, so
   removal is O(log n). */
#include "timer.h"

#include <conch/status.h>

#include "mem_int.h"

static void swap(conch_heap *h, size_t a, size_t b) {
  conch_timer *t = h->t[a];
  h->t[a] = h->t[b];
  h->t[b] = t;
  h->t[a]->idx = a;
  h->t[b]->idx = b;
}

static void up(conch_heap *h, size_t i) {
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (h->t[parent]->when <= h->t[i]->when) {
      break;
    }
    swap(h, i, parent);
    i = parent;
  }
}

static void down(conch_heap *h, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && h->t[l]->when < h->t[m]->when) {
      m = l;
    }
    if (r < h->n && h->t[r]->when < h->t[m]->when) {
      m = r;
    }
    if (m == i) {
      return;
    }
    swap(h, i, m);
    i = m;
  }
}

void conch__heap_remove(conch_heap *h, conch_timer *t) {
  size_t i = t->idx;
  if (i == SIZE_MAX) {
    return;
  }
  t->idx = SIZE_MAX;
  h->n--;
  if (i == h->n) {
    return;
  }
  h->t[i] = h->t[h->n];
  h->t[i]->idx = i;
  up(h, i);
  down(h, h->t[i]->idx);
}

int conch__heap_reserve(conch_heap *h, const conch_mem *mem, size_t extra) {
  size_t cap;
  conch_timer **a;
  if (h->cap - h->n >= extra) {
    return 0;
  }
  cap = h->cap ? h->cap * 2 : 16;
  while (cap - h->n < extra) {
    cap *= 2;
  }
  a = conch__realloc(mem, h->t, cap * sizeof(*a));
  if (a == NULL) {
    return CONCH_ERR_NOMEM;
  }
  h->t = a;
  h->cap = cap;
  return 0;
}

int conch__heap_insert(conch_heap *h, const conch_mem *mem, conch_timer *t,
                       int64_t when) {
  conch__heap_remove(h, t);
  if (h->n == h->cap && conch__heap_reserve(h, mem, 1) != 0) {
    return CONCH_ERR_NOMEM;
  }
  t->when = when;
  t->idx = h->n;
  h->t[h->n++] = t;
  up(h, t->idx);
  return 0;
}

void conch__heap_free(conch_heap *h, const conch_mem *mem) {
  conch__free(mem, h->t);
  h->t = NULL;
  h->n = h->cap = 0;
}
