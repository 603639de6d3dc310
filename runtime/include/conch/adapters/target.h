/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/target.h: what an event-loop adapter drives.  A conch_client
 * (conch/io.h) and a conch_server (conch/server.h) are driven the same way:
 * io hooks that say which fds to watch and when to call back, and two entry
 * points the loop calls, on_io and on_timer.  A conch_loop_target is those
 * three functions and the object they take, so one adapter per loop library
 * (adapters/libuv.h, adapters/libevent.h) serves both.  Header-only, on the
 * public API.
 *
 *   conch_loop_target t = conch_loop_target_client(client);
 *   conch_loop_target t = conch_loop_target_server(server);
 *
 * An adapter for another loop can take a conch_loop_target too; an object
 * of the caller's own that keeps the same contract (conch_io_hooks) can be
 * filled in by hand.
 */
#ifndef CONCH_ADAPTERS_TARGET_H
#define CONCH_ADAPTERS_TARGET_H

#include <conch/conch.h>
#include <conch/server.h>

typedef struct conch_loop_target {
  void *obj;
  /* conch_client_set_io_hooks() or conch_server_set_io_hooks(); NULL hooks
     switch the object back to pull mode. */
  int (*set_io_hooks)(void *obj, const conch_io_hooks *hooks);
  /* conch_client_on_io() or conch_server_on_io(). */
  int (*on_io)(void *obj, int fd, unsigned events);
  /* conch_client_on_timer() or conch_server_on_timer(). */
  int (*on_timer)(void *obj);
} conch_loop_target;

static inline int conch_loop_target__client_hooks(void *obj,
                                                  const conch_io_hooks *h) {
  return conch_client_set_io_hooks((conch_client *)obj, h);
}

static inline int conch_loop_target__client_io(void *obj, int fd,
                                               unsigned events) {
  return conch_client_on_io((conch_client *)obj, fd, events);
}

static inline int conch_loop_target__client_timer(void *obj) {
  return conch_client_on_timer((conch_client *)obj);
}

static inline int conch_loop_target__server_hooks(void *obj,
                                                  const conch_io_hooks *h) {
  return conch_server_set_io_hooks((conch_server *)obj, h);
}

static inline int conch_loop_target__server_io(void *obj, int fd,
                                               unsigned events) {
  return conch_server_on_io((conch_server *)obj, fd, events);
}

static inline int conch_loop_target__server_timer(void *obj) {
  return conch_server_on_timer((conch_server *)obj);
}

/** The target that drives client |c|. */
static inline conch_loop_target conch_loop_target_client(conch_client *c) {
  conch_loop_target t;
  t.obj = c;
  t.set_io_hooks = conch_loop_target__client_hooks;
  t.on_io = conch_loop_target__client_io;
  t.on_timer = conch_loop_target__client_timer;
  return t;
}

/** The target that drives server |s| (its listeners, its connections and
    its deadlines).  Connections adopted with a transport of the caller's
    own whose handles are not descriptors are not for fd-based adapters. */
static inline conch_loop_target conch_loop_target_server(conch_server *s) {
  conch_loop_target t;
  t.obj = s;
  t.set_io_hooks = conch_loop_target__server_hooks;
  t.on_io = conch_loop_target__server_io;
  t.on_timer = conch_loop_target__server_timer;
  return t;
}

#endif /* CONCH_ADAPTERS_TARGET_H */
