/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/libevent.h: drive a conch_client or a conch_server
 * (conch/server.h) from a libevent event_base.  Header-only, on the public
 * API; link libevent (libevent_core is enough) yourself.
 *
 *   conch_event a;
 *   conch_event_attach(&a, base, client);
 *     or conch_event_attach_server(&a, base, server);
 *     or conch_event_attach_target(&a, base, &target);  (adapters/target.h)
 *   ... event_base_dispatch(base) ...
 *   conch_event_detach(&a);       (before conch_client_free/_server_free)
 *
 * conch_event_detach() may be called from inside one of the driven
 * object's callbacks (a call's on_close, a server handler): the detach
 * then happens once that callback's turn is over, before control returns
 * to libevent.  Free the object only after that.
 *
 * Each fd the driven object asks for (a client's connections; a server's
 * listeners and connections) gets a persistent event; its timer is one
 * timer event.  |a| must stay at the same address while attached; one
 * conch_event drives one object.
 */
#ifndef CONCH_ADAPTERS_LIBEVENT_H
#define CONCH_ADAPTERS_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>

#include <conch/adapters/target.h>

typedef struct conch_event_fd {
  struct event *ev;
  int fd;
  unsigned events;
  struct conch_event *owner;
  struct conch_event_fd *next;
} conch_event_fd;

typedef struct conch_event {
  struct event_base *base;
  conch_loop_target target;
  struct event *timer; /* NULL once detached */
  conch_event_fd *fds;
  int depth;          /* inside the driven object's on_io / on_timer */
  int detach_pending; /* conch_event_detach() came from inside: do it after */
} conch_event;

static void conch_event__free_all(conch_event *a);

/* After the driven object's turn: a detach asked for during it. */
static void conch_event__turn_over(conch_event *a) {
  a->depth--;
  if (a->depth == 0 && a->detach_pending) {
    a->detach_pending = 0;
    a->target.set_io_hooks(a->target.obj, NULL);
    conch_event__free_all(a);
  }
}

static void conch_event__io_cb(evutil_socket_t fd, short what, void *arg) {
  conch_event_fd *f = (conch_event_fd *)arg;
  unsigned ev = 0;
  if (what & EV_READ) {
    ev |= CONCH_IO_READ;
  }
  if (what & EV_WRITE) {
    ev |= CONCH_IO_WRITE;
  }
  conch_event *a = f->owner;
  a->depth++;
  a->target.on_io(a->target.obj, (int)fd, ev);
  conch_event__turn_over(a);
}

static void conch_event__timer_cb(evutil_socket_t fd, short what, void *arg) {
  conch_event *a = (conch_event *)arg;
  (void)fd;
  (void)what;
  a->depth++;
  a->target.on_timer(a->target.obj);
  conch_event__turn_over(a);
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

static void conch_event__free_all(conch_event *a) {
  while (a->fds != NULL) {
    conch_event_fd *f = a->fds;
    a->fds = f->next;
    if (f->ev != NULL) {
      event_free(f->ev);
    }
    free(f);
  }
  if (a->timer != NULL) {
    event_free(a->timer);
    a->timer = NULL;
  }
}

/**
 * Attaches the object |t| drives to |base| (|t| is copied).  Returns 0, -1
 * (out of memory or a libevent error) or a CONCH_ERR_* from its
 * set_io_hooks.
 */
static inline int conch_event_attach_target(conch_event *a,
                                            struct event_base *base,
                                            const conch_loop_target *t) {
  conch_io_hooks hooks;
  int rv;
  a->base = base;
  a->target = *t;
  a->fds = NULL;
  a->depth = 0;
  a->detach_pending = 0;
  a->timer = evtimer_new(base, conch_event__timer_cb, a);
  if (a->timer == NULL) {
    return -1;
  }
  hooks.watch = conch_event__watch;
  hooks.timer = conch_event__timer;
  hooks.user_data = a;
  rv = a->target.set_io_hooks(a->target.obj, &hooks);
  if (rv != 0) {
    conch_event__free_all(a);
  }
  return rv;
}

/**
 * Attaches client |c| to |base|.  Returns 0, -1 (out of memory or a
 * libevent error) or a CONCH_ERR_* from conch_client_set_io_hooks().
 */
static inline int conch_event_attach(conch_event *a, struct event_base *base,
                                     conch_client *c) {
  conch_loop_target t = conch_loop_target_client(c);
  return conch_event_attach_target(a, base, &t);
}

/**
 * Attaches server |s| to |base|: its listeners, connections and deadlines.
 * Returns 0, -1 (out of memory or a libevent error) or a CONCH_ERR_* from
 * conch_server_set_io_hooks().
 */
static inline int conch_event_attach_server(conch_event *a,
                                            struct event_base *base,
                                            conch_server *s) {
  conch_loop_target t = conch_loop_target_server(s);
  return conch_event_attach_target(a, base, &t);
}

/**
 * Detaches the driven object (it goes back to pull mode) and frees every
 * event.  Call before conch_client_free() or conch_server_free().  A second
 * detach does nothing.
 *
 * From inside one of the object's callbacks run by this adapter (a call's
 * handler, a server's handler, gate or accept filter) the object cannot let
 * go of its hooks yet: the detach is recorded and done as soon as the
 * object's turn returns to the adapter, still inside the libevent callback
 * that ran it.  Until then the object keeps its events; |a| must stay
 * valid, and the object must not be freed, until event_base_dispatch()
 * returned or another callback runs.
 *
 * Returns 0 (detached, or deferred as above), or CONCH_ERR_RECURSIVE when
 * called from a callback of the object that this adapter did not run (the
 * object's own blocking or free functions running it): nothing is changed
 * then, call it again after that callback returned.
 */
static inline int conch_event_detach(conch_event *a) {
  int rv = a->target.set_io_hooks(a->target.obj, NULL);
  if (rv == CONCH_ERR_RECURSIVE) {
    if (a->depth > 0) {
      a->detach_pending = 1;
      return 0;
    }
    return rv;
  }
  a->detach_pending = 0;
  conch_event__free_all(a);
  return 0;
}

#endif /* CONCH_ADAPTERS_LIBEVENT_H */
