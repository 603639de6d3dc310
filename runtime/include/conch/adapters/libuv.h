/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/libuv.h: drive a conch_client from a libuv loop.  Header-only,
 * on the public API; link libuv yourself.
 *
 *   conch_uv a;
 *   conch_uv_attach(&a, uv_default_loop(), client);
 *   ... uv_run(loop, UV_RUN_DEFAULT) ...
 *   conch_uv_detach(&a);          (before conch_client_free)
 *   uv_run(loop, UV_RUN_NOWAIT);  (lets libuv finish closing the handles)
 *
 * Each fd the client asks for gets a uv_poll_t; the client's timer is one
 * uv_timer_t.  |a| must stay at the same address while attached.
 */
#ifndef CONCH_ADAPTERS_LIBUV_H
#define CONCH_ADAPTERS_LIBUV_H

#include <stdlib.h>

#include <uv.h>

#include <conch/conch.h>

typedef struct conch_uv_fd {
  uv_poll_t poll;
  int fd;
  struct conch_uv *owner;
  struct conch_uv_fd *next;
} conch_uv_fd;

typedef struct conch_uv {
  uv_loop_t *loop;
  conch_client *client;
  uv_timer_t *timer; /* heap: closed asynchronously */
  conch_uv_fd *fds;
} conch_uv;

static void conch_uv__free_cb(uv_handle_t *h) { free(h); }

static void conch_uv__poll_cb(uv_poll_t *p, int status, int events) {
  conch_uv_fd *f = (conch_uv_fd *)p;
  unsigned ev = 0;
  /* An error on the fd is reported as readable: the client's read then
     sees what went wrong. */
  if (status < 0 || (events & (UV_READABLE | UV_DISCONNECT))) {
    ev |= CONCH_IO_READ;
  }
  if (status == 0 && (events & UV_WRITABLE)) {
    ev |= CONCH_IO_WRITE;
  }
  conch_client_on_io(f->owner->client, f->fd, ev);
}

static void conch_uv__timer_cb(uv_timer_t *t) {
  conch_uv *a = (conch_uv *)t->data;
  conch_client_on_timer(a->client);
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

/**
 * Attaches |c| to |loop|.  Returns 0, -1 (out of memory or a libuv error)
 * or a CONCH_ERR_* from conch_client_set_io_hooks().
 */
static inline int conch_uv_attach(conch_uv *a, uv_loop_t *loop,
                                  conch_client *c) {
  conch_io_hooks hooks;
  a->loop = loop;
  a->client = c;
  a->fds = NULL;
  a->timer = (uv_timer_t *)malloc(sizeof(uv_timer_t));
  if (a->timer == NULL || uv_timer_init(loop, a->timer) != 0) {
    free(a->timer);
    return -1;
  }
  a->timer->data = a;
  hooks.watch = conch_uv__watch;
  hooks.timer = conch_uv__timer;
  hooks.user_data = a;
  return conch_client_set_io_hooks(c, &hooks);
}

/**
 * Detaches the client: every handle is stopped and closed (freed by libuv
 * on its next turn).  Call before conch_client_free().
 */
static inline void conch_uv_detach(conch_uv *a) {
  conch_client_set_io_hooks(a->client, NULL);
  while (a->fds != NULL) {
    conch_uv_fd *f = a->fds;
    a->fds = f->next;
    uv_poll_stop(&f->poll);
    uv_close((uv_handle_t *)&f->poll, conch_uv__free_cb);
  }
  uv_timer_stop(a->timer);
  uv_close((uv_handle_t *)a->timer, conch_uv__free_cb);
  a->timer = NULL;
}

#endif /* CONCH_ADAPTERS_LIBUV_H */
