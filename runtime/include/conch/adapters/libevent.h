/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/libevent.h: drive a conch_client from a libevent event_base.
 * Header-only, on the public API; link libevent yourself.
 *
 *   conch_event a;
 *   conch_event_attach(&a, base, client);
 *   ... event_base_dispatch(base) ...
 *   conch_event_detach(&a);       (before conch_client_free)
 *
 * Each fd the client asks for gets a persistent event; the client's timer
 * is one timer event.  |a| must stay at the same address while attached.
 */
#ifndef CONCH_ADAPTERS_LIBEVENT_H
#define CONCH_ADAPTERS_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>

#include <conch/conch.h>

typedef struct conch_event_fd {
  struct event *ev;
  int fd;
  unsigned events;
  struct conch_event *owner;
  struct conch_event_fd *next;
} conch_event_fd;

typedef struct conch_event {
  struct event_base *base;
  conch_client *client;
  struct event *timer;
  conch_event_fd *fds;
} conch_event;

static void conch_event__io_cb(evutil_socket_t fd, short what, void *arg) {
  conch_event_fd *f = (conch_event_fd *)arg;
  unsigned ev = 0;
  if (what & EV_READ) {
    ev |= CONCH_IO_READ;
  }
  if (what & EV_WRITE) {
    ev |= CONCH_IO_WRITE;
  }
  conch_client_on_io(f->owner->client, (int)fd, ev);
}

static void conch_event__timer_cb(evutil_socket_t fd, short what, void *arg) {
  conch_event *a = (conch_event *)arg;
  (void)fd;
  (void)what;
  conch_client_on_timer(a->client);
}

static int conch_event__watch(int fd, unsigned events, void *ud) {
  conch_event *a = (conch_event *)ud;
  conch_event_fd **pp = &a->fds, *f;
  short what = EV_PERSIST;

  while (*pp != NULL && (*pp)->fd != fd) {
    pp = &(*pp)->next;
  }
  f = *pp;
  if (f != NULL) {
    /* libevent cannot change an event's mask: replace it. */
    event_free(f->ev);
    f->ev = NULL;
    if (events & CONCH_IO_REMOVE) {
      *pp = f->next;
      free(f);
      return 0;
    }
  } else {
    if (events & CONCH_IO_REMOVE) {
      return 0;
    }
    f = (conch_event_fd *)calloc(1, sizeof(*f));
    if (f == NULL) {
      return -1;
    }
    f->fd = fd;
    f->owner = a;
    f->next = a->fds;
    a->fds = f;
  }
  if (events & CONCH_IO_READ) {
    what |= EV_READ;
  }
  if (events & CONCH_IO_WRITE) {
    what |= EV_WRITE;
  }
  f->events = events;
  f->ev = event_new(a->base, fd, what, conch_event__io_cb, f);
  if (f->ev == NULL || event_add(f->ev, NULL) != 0) {
    return -1;
  }
  return 0;
}

static int conch_event__timer(long ms, void *ud) {
  conch_event *a = (conch_event *)ud;
  struct timeval tv;
  if (ms < 0) {
    return event_del(a->timer) == 0 ? 0 : -1;
  }
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return event_add(a->timer, &tv) == 0 ? 0 : -1;
}

/**
 * Attaches |c| to |base|.  Returns 0, -1 (out of memory or a libevent
 * error) or a CONCH_ERR_* from conch_client_set_io_hooks().
 */
static inline int conch_event_attach(conch_event *a, struct event_base *base,
                                     conch_client *c) {
  conch_io_hooks hooks;
  a->base = base;
  a->client = c;
  a->fds = NULL;
  a->timer = evtimer_new(base, conch_event__timer_cb, a);
  if (a->timer == NULL) {
    return -1;
  }
  hooks.watch = conch_event__watch;
  hooks.timer = conch_event__timer;
  hooks.user_data = a;
  return conch_client_set_io_hooks(c, &hooks);
}

/** Detaches the client and frees every event.  Call before
    conch_client_free(). */
static inline void conch_event_detach(conch_event *a) {
  conch_client_set_io_hooks(a->client, NULL);
  while (a->fds != NULL) {
    conch_event_fd *f = a->fds;
    a->fds = f->next;
    if (f->ev != NULL) {
      event_free(f->ev);
    }
    free(f);
  }
  event_free(a->timer);
  a->timer = NULL;
}

#endif /* CONCH_ADAPTERS_LIBEVENT_H */
