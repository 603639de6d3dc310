/*
 * conch - a Connect/gRPC client for C
 *
 * mem.h: allocator hooks.
 */
#ifndef CONCH_MEM_H
#define CONCH_MEM_H

#include <stddef.h>

#include <conch/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Allocator hooks, with the shape of nghttp2_mem.  Given per client (see
 * conch_client_opts_set_mem()); there is no global allocator.  Every
 * allocation the library makes for a client, including those of nghttp2,
 * zlib and protobuf-c on its behalf, goes through these functions.  jansson
 * (error and end-stream JSON) and OpenSSL only offer process-wide hooks; the
 * library does not touch them.
 *
 * Each function receives |user_data| as its last argument.  |free| must
 * accept NULL.  A failing |malloc|/|calloc|/|realloc| returns NULL and the
 * operation that needed the memory fails with CONCH_ERR_NOMEM.
 */
typedef struct conch_mem {
  void *user_data;
  void *(*malloc)(size_t size, void *user_data);
  void (*free)(void *ptr, void *user_data);
  void *(*calloc)(size_t nmemb, size_t size, void *user_data);
  void *(*realloc)(void *ptr, size_t size, void *user_data);
} conch_mem;

/**
 * Returns the allocator that forwards to the C library.  The pointer is to
 * static storage and never NULL.
 */
CONCH_EXTERN const conch_mem *conch_mem_default(void);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_MEM_H */
