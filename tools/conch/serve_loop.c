/* The event loop: one epoll set, level-triggered, and a binary heap of
   timers (serve_util.h). */
#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define LOOP_MAX_EVENTS 128

static int64_t (*clock_now)(void *ud);
static void *clock_ud;

void srv_clock_set(int64_t (*now)(void *ud), void *ud) {
  clock_now = now;
  clock_ud = ud;
}

int srv_clock_injected(void) { return clock_now != NULL; }

int64_t srv_now_ms(void) {
  struct timespec ts;

  if (clock_now != NULL) {
    return clock_now(clock_ud);
  }
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int srv_loop_init(srv_loop *l) {
  l->heap.t = NULL;
  l->heap.n = 0;
  l->heap.cap = 0;
  l->epfd = epoll_create1(EPOLL_CLOEXEC);
  return l->epfd < 0 ? -1 : 0;
}

void srv_loop_clear(srv_loop *l) {
  if (l->epfd >= 0) {
    close(l->epfd);
    l->epfd = -1;
  }
  srv_heap_free(&l->heap);
}

void srv_watch_init(srv_watch *w, int fd, srv_watch_cb cb) {
  w->fd = fd;
  w->events = 0;
  w->cb = cb;
}

int srv_watch_set(srv_loop *l, srv_watch *w, uint32_t events) {
  struct epoll_event ev;
  int op;
  int rv;

  if (w->fd < 0 || events == w->events) {
    return 0;
  }
  ev.events = events;
  ev.data.ptr = w;
  if (events == 0) {
    op = EPOLL_CTL_DEL;
  } else if (w->events == 0) {
    op = EPOLL_CTL_ADD;
  } else {
    op = EPOLL_CTL_MOD;
  }
  rv = epoll_ctl(l->epfd, op, w->fd, &ev);
  if (rv != 0) {
    return -1;
  }
  w->events = events;
  return 0;
}

/* ---- Timers ---------------------------------------------------------------
 */

void srv_timer_init(srv_timer *t, srv_timer_cb cb) {
  t->when = 0;
  t->idx = SIZE_MAX;
  t->cb = cb;
}

int srv_timer_armed(const srv_timer *t) { return t->idx != SIZE_MAX; }

void srv_timer_cancel(srv_loop *l, srv_timer *t) {
  srv_heap_remove(&l->heap, t);
}

int srv_timer_arm(srv_loop *l, srv_timer *t, int64_t when) {
  return srv_heap_insert(&l->heap, t, when);
}

int srv_loop_timeout(const srv_loop *l, int max_ms) {
  const srv_timer *top = srv_heap_top(&l->heap);
  int64_t left;

  if (top == NULL) {
    return max_ms;
  }
  left = top->when - srv_now_ms();
  if (left <= 0) {
    return 0;
  }
  return left < max_ms ? (int)left : max_ms;
}

static void run_timers(srv_loop *l) {
  int64_t now = srv_now_ms();
  srv_timer *t;

  /* One at a time: a callback may arm or cancel any timer. */
  while ((t = srv_heap_top(&l->heap)) != NULL && t->when <= now) {
    srv_heap_remove(&l->heap, t);
    t->cb(t);
  }
}

int srv_loop_poll(srv_loop *l, int max_ms) {
  struct epoll_event evs[LOOP_MAX_EVENTS];
  int n;
  int i;

  n = epoll_wait(l->epfd, evs, LOOP_MAX_EVENTS, srv_loop_timeout(l, max_ms));
  if (n < 0) {
    if (errno != EINTR) {
      return -1;
    }
    n = 0;
  }
  for (i = 0; i < n; i++) {
    srv_watch *w = evs[i].data.ptr;

    /* An earlier callback of this turn may have stopped watching it; its
       owner is freed only after the turn. */
    if (w->events == 0) {
      continue;
    }
    w->cb(w, evs[i].events);
  }
  run_timers(l);
  return 0;
}
