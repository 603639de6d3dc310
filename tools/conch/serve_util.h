/* conch serve's small data structures: intrusive lists, a byte queue and
   the min-heap of its loop's timers.  The runtime has its own of each,
   private to it (list.h, buf.h, timer.h); a tool is built on the public
   API only (scripts/check-source.sh), and these are too small and too
   much the tool's own business (its loop, its queues) to be the library's
   API. */
#ifndef CONCH_SERVE_UTIL_H
#define CONCH_SERVE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>

/* ---- Lists: a srv_link in each element, a srv_link as the head ---------- */

typedef struct srv_link {
  struct srv_link *prev;
  struct srv_link *next; /* NULL: in no list */
} srv_link;

/* The element of type |type| whose member |member| is at |ptr|. */
#define SRV_CONTAINER(ptr, type, member)                                       \
  ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

static inline void srv_list_init(srv_link *head) {
  head->prev = head->next = head;
}
static inline int srv_list_empty(const srv_link *head) {
  return head->next == head;
}
/* Whether |l| is in a list (a zeroed link is in none). */
static inline int srv_linked(const srv_link *l) { return l->next != NULL; }
/* Appends |l| at the tail of |head|. */
static inline void srv_list_push(srv_link *head, srv_link *l) {
  srv_link *last = head->prev;

  l->next = head;
  l->prev = last;
  last->next = l;
  head->prev = l;
}
/* Takes |l| out of its list; nothing when it is in none. */
static inline void srv_list_remove(srv_link *l) {
  if (srv_linked(l)) {
    l->next->prev = l->prev;
    l->prev->next = l->next;
    l->next = NULL;
    l->prev = NULL;
  }
}

/* ---- A byte queue: bytes in data[off .. len) ----------------------------- */

typedef struct srv_buf {
  uint8_t *data;
  size_t off;
  size_t len;
  size_t cap;
} srv_buf;

#define SRV_BUF_INIT                                                           \
  { NULL, 0, 0, 0 }

static inline size_t srv_buf_size(const srv_buf *b) { return b->len - b->off; }
/* The first byte held (NULL for a buffer that never held one). */
static inline uint8_t *srv_buf_head(const srv_buf *b) {
  return b->data == NULL ? NULL : b->data + b->off;
}
/* Appends |n| bytes.  Returns 0, or -1 (out of memory: |b| unchanged). */
int srv_buf_append(srv_buf *b, const conch_mem *mem, const void *p, size_t n);
/* Drops |n| bytes (at most the size) from the front. */
void srv_buf_consume(srv_buf *b, size_t n);
/* Empties |b|, keeping its memory. */
void srv_buf_reset(srv_buf *b);
/* Frees its memory; |b| is empty and reusable. */
void srv_buf_free(srv_buf *b, const conch_mem *mem);

/* ---- Timers: a binary min-heap by deadline (serve_loop.c's) -------------- */

typedef struct srv_timer srv_timer;
typedef void (*srv_timer_cb)(srv_timer *t);

struct srv_timer {
  int64_t when; /* ms, srv_loop's clock */
  size_t idx;   /* in the heap; SIZE_MAX when not armed */
  srv_timer_cb cb;
};

typedef struct srv_heap {
  srv_timer **t;
  size_t n;
  size_t cap;
} srv_heap;

/* Arms |t| at |when|, re-arming it when armed.  Returns 0, or -1 (out of
   memory: |t| is left as it was). */
int srv_heap_insert(srv_heap *h, srv_timer *t, int64_t when);
/* Disarms |t|; nothing when it is not armed. */
void srv_heap_remove(srv_heap *h, srv_timer *t);
/* The earliest timer, or NULL. */
static inline srv_timer *srv_heap_top(const srv_heap *h) {
  return h->n == 0 ? NULL : h->t[0];
}
/* Frees the array (the timers are their owners'). */
void srv_heap_free(srv_heap *h);

/* ---- A table of int keys: open addressing, linear probing ---------------- */

typedef struct srv_islot {
  int key;
  void *val; /* NULL: empty */
} srv_islot;

/* At most half full; zero-initialised is an empty table.  The values are
   their owners'; walk |slot[0..cap)| for the ones there (val != NULL). */
typedef struct srv_itab {
  srv_islot *slot;
  size_t cap;
  size_t n;
} srv_itab;

/* The value of |key|, or NULL. */
void *srv_itab_get(const srv_itab *t, int key);
/* Puts |val| (not NULL) under |key|, which is not in the table.  Returns 0,
   or -1 (out of memory: the table is as it was). */
int srv_itab_put(srv_itab *t, int key, void *val);
/* Takes |key| out (backward-shift deletion: no tombstones); nothing when
   it is not there. */
void srv_itab_del(srv_itab *t, int key);
/* Frees the slots (not the values); the table is empty again. */
void srv_itab_free(srv_itab *t);

#endif
