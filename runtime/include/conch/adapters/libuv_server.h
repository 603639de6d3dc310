/*
 * conch - a Connect/gRPC client for C
 *
 * adapters/libuv_server.h: the former names of the libuv server adapter,
 * kept for source compatibility.  adapters/libuv.h drives a server itself
 * (conch_uv_attach_server); new code should use it.
 *
 *   conch_uvs a;                  (the same struct as conch_uv)
 *   conch_uvs_attach(&a, uv_default_loop(), server);
 *   ... uv_run(loop, UV_RUN_DEFAULT) ...
 *   conch_uvs_detach(&a);         (before conch_server_free)
 *   uv_run(loop, UV_RUN_NOWAIT);  (lets libuv finish closing the handles)
 */
#ifndef CONCH_ADAPTERS_LIBUV_SERVER_H
#define CONCH_ADAPTERS_LIBUV_SERVER_H

#include <conch/adapters/libuv.h>

typedef conch_uv_fd conch_uvs_fd;
typedef conch_uv conch_uvs;

/** conch_uv_attach_server(). */
static inline int conch_uvs_attach(conch_uvs *a, uv_loop_t *loop,
                                   conch_server *s) {
  return conch_uv_attach_server(a, loop, s);
}

/** conch_uv_detach(). */
static inline int conch_uvs_detach(conch_uvs *a) { return conch_uv_detach(a); }

#endif /* CONCH_ADAPTERS_LIBUV_SERVER_H */
