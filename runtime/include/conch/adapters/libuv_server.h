/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/libuv_server.h: drive a conch_server (conch/server.h) from a
 * libuv loop, as adapters/libuv.h drives a client.  Header-only, on the
 * public API; link libuv yourself.  Both headers may be included together.
 *
 *   conch_uvs a;
 *   conch_uvs_attach(&a, uv_default_loop(), server);
 *   ... uv_run(loop, UV_RUN_DEFAULT) ...
 *   conch_uvs_detach(&a);         (before conch_server_free)
 *   uv_run(loop, UV_RUN_NOWAIT);  (lets libuv finish closing the handles)
 *
 * Each fd the server asks for (listeners, connections) gets a uv_poll_t;
 * the server's timer is one uv_timer_t.  |a| must stay at the same address
 * while attached.  Connections the caller adopted with a transport of its
 * own whose handles are not descriptors are not for this adapter.
 */
#ifndef CONCH_ADAPTERS_LIBUV_SERVER_H
#define CONCH_ADAPTERS_LIBUV_SERVER_H

#include <stdlib.h>

#include <uv.h>

#include <conch/conch.h>
#include <conch/server.h>

typedef struct conch_uvs_fd {
  uv_poll_t poll;
  int fd;
  struct conch_uvs *owner;
  struct conch_uvs_fd *next;
} conch_uvs_fd;

typedef struct conch_uvs {
  uv_loop_t *loop;
  conch_server *server;
  uv_timer_t *timer; /* heap: closed asynchronously */
  conch_uvs_fd *fds;
} conch_uvs;

static void conch_uvs__free_cb(uv_handle_t *h) { free(h); }

static void conch_uvs__poll_cb(uv_poll_t *p, int status, int events) {
  conch_uvs_fd *f = (conch_uvs_fd *)p;
  unsigned ev = 0;
  /* An error on the fd is reported as readable: the server's read then
     sees what went wrong. */
  if (status < 0 || (events & (UV_READABLE | UV_DISCONNECT))) {
    ev |= CONCH_IO_READ;
  }
  if (status == 0 && (events & UV_WRITABLE)) {
    ev |= CONCH_IO_WRITE;
  }
  conch_server_on_io(f->owner->server, f->fd, ev);
}

static void conch_uvs__timer_cb(uv_timer_t *t) {
  conch_uvs *a = (conch_uvs *)t->data;
  conch_server_on_timer(a->server);
}

static int conch_uvs__watch(int fd, unsigned events, void *ud) {
  conch_uvs *a = (conch_uvs *)ud;
  conch_uvs_fd **pp = &a->fds, *f;
  int uvev = 0;

  while (*pp != NULL && (*pp)->fd != fd) {
    pp = &(*pp)->next;
  }
  f = *pp;
  if (events & CONCH_IO_REMOVE) {
    if (f != NULL) {
      *pp = f->next;
      uv_poll_stop(&f->poll);
      uv_close((uv_handle_t *)&f->poll, conch_uvs__free_cb);
    }
    return 0;
  }
  if (f == NULL) {
    f = (conch_uvs_fd *)calloc(1, sizeof(*f));
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
  return uv_poll_start(&f->poll, uvev, conch_uvs__poll_cb) == 0 ? 0 : -1;
}

static int conch_uvs__timer(long ms, void *ud) {
  conch_uvs *a = (conch_uvs *)ud;
  if (ms < 0) {
    return uv_timer_stop(a->timer) == 0 ? 0 : -1;
  }
  return uv_timer_start(a->timer, conch_uvs__timer_cb, (uint64_t)ms, 0) == 0
             ? 0
             : -1;
}

/**
 * Attaches |s| to |loop|.  Returns 0, -1 (out of memory or a libuv error)
 * or a CONCH_ERR_* from conch_server_set_io_hooks().
 */
static inline int conch_uvs_attach(conch_uvs *a, uv_loop_t *loop,
                                   conch_server *s) {
  conch_io_hooks hooks;
  a->loop = loop;
  a->server = s;
  a->fds = NULL;
  a->timer = (uv_timer_t *)malloc(sizeof(uv_timer_t));
  if (a->timer == NULL || uv_timer_init(loop, a->timer) != 0) {
    free(a->timer);
    return -1;
  }
  a->timer->data = a;
  hooks.watch = conch_uvs__watch;
  hooks.timer = conch_uvs__timer;
  hooks.user_data = a;
  return conch_server_set_io_hooks(s, &hooks);
}

/**
 * Detaches the server: every handle is stopped and closed (freed by libuv
 * on its next turn).  Call before conch_server_free().
 */
static inline void conch_uvs_detach(conch_uvs *a) {
  conch_server_set_io_hooks(a->server, NULL);
  while (a->fds != NULL) {
    conch_uvs_fd *f = a->fds;
    a->fds = f->next;
    uv_poll_stop(&f->poll);
    uv_close((uv_handle_t *)&f->poll, conch_uvs__free_cb);
  }
  uv_timer_stop(a->timer);
  uv_close((uv_handle_t *)a->timer, conch_uvs__free_cb);
  a->timer = NULL;
}

#endif /* CONCH_ADAPTERS_LIBUV_SERVER_H */
