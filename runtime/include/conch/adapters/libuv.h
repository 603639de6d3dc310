/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/libuv.h: drive a conch_client or a conch_server (conch/server.h)
 * from a libuv loop.  Header-only, on the public API; link libuv yourself.
 *
 *   conch_uv a;
 *   conch_uv_attach(&a, uv_default_loop(), client);
 *     or conch_uv_attach_server(&a, uv_default_loop(), server);
 *     or conch_uv_attach_target(&a, loop, &target);  (adapters/target.h)
 *   ... uv_run(loop, UV_RUN_DEFAULT) ...
 *   conch_uv_detach(&a);          (before conch_client_free/_server_free)
 *   uv_run(loop, UV_RUN_NOWAIT);  (lets libuv finish closing the handles)
 *
 * conch_uv_detach() may be called from inside one of the driven object's
 * callbacks (a call's on_close, a server handler): the detach then
 * happens once that callback's turn is over, before control returns to
 * libuv.  Free the object only after that (after uv_run returns, or from
 * a callback of your own).
 *
 * Each fd the driven object asks for (a client's connections; a server's
 * listeners and connections) gets a uv_poll_t; its timer is one uv_timer_t.
 * |a| must stay at the same address while attached; one conch_uv drives
 * one object.  adapters/libuv_server.h keeps the former server names
 * (conch_uvs_attach/_detach) for source compatibility.
 */
#ifndef CONCH_ADAPTERS_LIBUV_H
#define CONCH_ADAPTERS_LIBUV_H

#include <stdlib.h>

#include <uv.h>

#include <conch/adapters/target.h>

typedef struct conch_uv_fd {
  uv_poll_t poll;
  int fd;
  struct conch_uv *owner;
  struct conch_uv_fd *next;
} conch_uv_fd;

typedef struct conch_uv {
  uv_loop_t *loop;
  conch_loop_target target;
  uv_timer_t *timer; /* heap: closed asynchronously; NULL once detached */
  conch_uv_fd *fds;
  int depth;          /* inside the driven object's on_io / on_timer */
  int detach_pending; /* conch_uv_detach() came from inside: do it after */
} conch_uv;

static void conch_uv__close_all(conch_uv *a);

/* After the driven object's turn: a detach asked for during it. */
static void conch_uv__turn_over(conch_uv *a) {
  a->depth--;
  if (a->depth == 0 && a->detach_pending) {
    a->detach_pending = 0;
    a->target.set_io_hooks(a->target.obj, NULL);
    conch_uv__close_all(a);
  }
}

static void conch_uv__free_cb(uv_handle_t *h) { free(h); }

static void conch_uv__poll_cb(uv_poll_t *p, int status, int events) {
  conch_uv_fd *f = (conch_uv_fd *)p;
  unsigned ev = 0;
  /* An error on the fd is reported as readable: the driven object's read
     then sees what went wrong. */
  if (status < 0 || (events & (UV_READABLE | UV_DISCONNECT))) {
    ev |= CONCH_IO_READ;
  }
  if (status == 0 && (events & UV_WRITABLE)) {
    ev |= CONCH_IO_WRITE;
  }
  conch_uv *a = f->owner;
  a->depth++;
  a->target.on_io(a->target.obj, f->fd, ev);
  conch_uv__turn_over(a);
}

static void conch_uv__timer_cb(uv_timer_t *t) {
  conch_uv *a = (conch_uv *)t->data;
  a->depth++;
  a->target.on_timer(a->target.obj);
  conch_uv__turn_over(a);
}

static int conch_uv__watch(int fd, unsigned events, void *ud) {
  conch_uv *a = (conch_uv *)ud;
  conch_uv_fd **pp = &a->fds, *f;
  int uvev = 0;

  while (*pp != NULL && (*pp)->fd != fd) {
    pp = &(*pp)->next;
  }
  f = *pp;
  if (events & CONCH_IO_REMOVE) {
    if (f != NULL) {
      *pp = f->next;
      uv_poll_stop(&f->poll);
      uv_close((uv_handle_t *)&f->poll, conch_uv__free_cb);
    }
    return 0;
  }
  if (f == NULL) {
    f = (conch_uv_fd *)calloc(1, sizeof(*f));
    if (f == NULL) {
      return -1;
    }
    if (uv_poll_init_socket(a->loop, &f->poll, fd) != 0) {
      free(f);
      return -1;
    }
    f->fd = fd;
    f->owner = a;
    f->next = a->fds;
    a->fds = f;
  }
  if (events & CONCH_IO_READ) {
    uvev |= UV_READABLE;
  }
  if (events & CONCH_IO_WRITE) {
    uvev |= UV_WRITABLE;
  }
  return uv_poll_start(&f->poll, uvev, conch_uv__poll_cb) == 0 ? 0 : -1;
}

static int conch_uv__timer(long ms, void *ud) {
  conch_uv *a = (conch_uv *)ud;
  if (ms < 0) {
    return uv_timer_stop(a->timer) == 0 ? 0 : -1;
  }
  return uv_timer_start(a->timer, conch_uv__timer_cb, (uint64_t)ms, 0) == 0
             ? 0
             : -1;
}

static void conch_uv__close_all(conch_uv *a) {
  while (a->fds != NULL) {
    conch_uv_fd *f = a->fds;
    a->fds = f->next;
    uv_poll_stop(&f->poll);
    uv_close((uv_handle_t *)&f->poll, conch_uv__free_cb);
  }
  if (a->timer != NULL) {
    uv_timer_stop(a->timer);
    uv_close((uv_handle_t *)a->timer, conch_uv__free_cb);
    a->timer = NULL;
  }
}

/**
 * Attaches the object |t| drives to |loop| (|t| is copied).  Returns 0, -1
 * (out of memory or a libuv error) or a CONCH_ERR_* from its set_io_hooks.
 */
static inline int conch_uv_attach_target(conch_uv *a, uv_loop_t *loop,
                                         const conch_loop_target *t) {
  conch_io_hooks hooks;
  int rv;
  a->loop = loop;
  a->target = *t;
  a->fds = NULL;
  a->depth = 0;
  a->detach_pending = 0;
  a->timer = (uv_timer_t *)malloc(sizeof(uv_timer_t));
  if (a->timer == NULL || uv_timer_init(loop, a->timer) != 0) {
    free(a->timer);
    a->timer = NULL;
    return -1;
  }
  a->timer->data = a;
  hooks.watch = conch_uv__watch;
  hooks.timer = conch_uv__timer;
  hooks.user_data = a;
  rv = a->target.set_io_hooks(a->target.obj, &hooks);
  if (rv != 0) {
    conch_uv__close_all(a);
  }
  return rv;
}

/**
 * Attaches client |c| to |loop|.  Returns 0, -1 (out of memory or a libuv
 * error) or a CONCH_ERR_* from conch_client_set_io_hooks().
 */
static inline int conch_uv_attach(conch_uv *a, uv_loop_t *loop,
                                  conch_client *c) {
  conch_loop_target t = conch_loop_target_client(c);
  return conch_uv_attach_target(a, loop, &t);
}

/**
 * Attaches server |s| to |loop|: its listeners, connections and deadlines.
 * Returns 0, -1 (out of memory or a libuv error) or a CONCH_ERR_* from
 * conch_server_set_io_hooks().
 */
static inline int conch_uv_attach_server(conch_uv *a, uv_loop_t *loop,
                                         conch_server *s) {
  conch_loop_target t = conch_loop_target_server(s);
  return conch_uv_attach_target(a, loop, &t);
}

/**
 * Detaches the driven object: it goes back to pull mode, and every handle
 * is stopped and closed (freed by libuv on its next turn).  Call before
 * conch_client_free() or conch_server_free().  A second detach does
 * nothing.
 *
 * From inside one of the object's callbacks run by this adapter (a call's
 * handler, a server's handler, gate or accept filter) the object cannot let
 * go of its hooks yet: the detach is recorded and done as soon as the
 * object's turn returns to the adapter, still inside the libuv callback
 * that ran it.  Until then the object keeps its handles (it may still ask
 * for fds and timers in that turn); |a| must stay valid, and the object
 * must not be freed, until uv_run() returned or another callback runs.
 *
 * Returns 0 (detached, or deferred as above), or CONCH_ERR_RECURSIVE when
 * called from a callback of the object that this adapter did not run (the
 * object's own blocking or free functions running it): nothing is changed
 * then, call it again after that callback returned.
 */
static inline int conch_uv_detach(conch_uv *a) {
  int rv = a->target.set_io_hooks(a->target.obj, NULL);
  if (rv == CONCH_ERR_RECURSIVE) {
    if (a->depth > 0) {
      a->detach_pending = 1;
      return 0;
    }
    return rv;
  }
  a->detach_pending = 0;
  conch_uv__close_all(a);
  return 0;
}

#endif /* CONCH_ADAPTERS_LIBUV_H */
