/* Timers: a binary min-heap of conch_timer by deadline (timer.c).  Each
   client has one; what a timer means is its |kind| (client.c dispatches).
   Private to the runtime. */
#ifndef CONCH_TIMER_H
#define CONCH_TIMER_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>

enum {
  CONCH_TIMER_CALL_DEADLINE = 1,
  CONCH_TIMER_CONN_CONNECT = 2,
  CONCH_TIMER_ALARM = 3,
  CONCH_TIMER_CONN_KEEPALIVE = 4,
  CONCH_TIMER_CALL_RETRY = 5
};

typedef struct conch_timer {
  int64_t when; /* ms by the client's clock */
  size_t idx;   /* position in the heap, SIZE_MAX when not armed */
  int kind;
} conch_timer;

typedef struct conch_heap {
  conch_timer **t;
  size_t n;
  size_t cap;
} conch_heap;

/* Room for |extra| more timers, so that inserting cannot fail.  Returns 0
   or CONCH_ERR_NOMEM. */
int conch__heap_reserve(conch_heap *h, const conch_mem *mem, size_t extra);
/* Arms |t| at |when| (re-arms it when armed).  Without room (and none to
   be had) |t| is left unarmed and CONCH_ERR_NOMEM returned. */
int conch__heap_insert(conch_heap *h, const conch_mem *mem, conch_timer *t,
                       int64_t when);
/* Disarms |t|; nothing when it is not armed. */
void conch__heap_remove(conch_heap *h, conch_timer *t);
/* The earliest timer, or NULL. */
static inline conch_timer *conch__heap_top(const conch_heap *h) {
  return h->n > 0 ? h->t[0] : NULL;
}
/* Frees the array (the timers belong to their owners). */
void conch__heap_free(conch_heap *h, const conch_mem *mem);

#endif
