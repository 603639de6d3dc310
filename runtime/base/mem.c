/* Allocation through the client's conch_mem. */
#include "mem_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *libc_malloc(size_t n, void *ud) {
  (void)ud;
  return malloc(n); /* conch-allow: the default allocator */
}
static void libc_free(void *p, void *ud) {
  (void)ud;
  free(p); /* conch-allow */
}
static void *libc_calloc(size_t nmemb, size_t size, void *ud) {
  (void)ud;
  return calloc(nmemb, size); /* conch-allow */
}
static void *libc_realloc(void *p, size_t n, void *ud) {
  (void)ud;
  return realloc(p, n); /* conch-allow */
}

static const conch_mem libc_mem = {NULL, libc_malloc, libc_free, libc_calloc,
                                   libc_realloc};

const conch_mem *conch_mem_default(void) { return &libc_mem; }

void *conch__malloc(const conch_mem *mem, size_t n) {
  return mem->malloc(n, mem->user_data);
}

void *conch__calloc(const conch_mem *mem, size_t nmemb, size_t size) {
  return mem->calloc(nmemb, size, mem->user_data);
}

void *conch__realloc(const conch_mem *mem, void *p, size_t n) {
  return mem->realloc(p, n, mem->user_data);
}

void conch__free(const conch_mem *mem, void *p) {
  if (p != NULL) {
    mem->free(p, mem->user_data);
  }
}

char *conch__strndup(const conch_mem *mem, const char *s, size_t n) {
  char *p;
  if (n == SIZE_MAX) {
    return NULL;
  }
  p = conch__malloc(mem, n + 1);
  if (p == NULL) {
    return NULL;
  }
  if (n > 0) {
    memcpy(p, s, n);
  }
  p[n] = '\0';
  return p;
}

char *conch__strdup(const conch_mem *mem, const char *s) {
  return conch__strndup(mem, s, strlen(s));
}

void *conch__memdup(const conch_mem *mem, const void *p, size_t n) {
  void *q = conch__malloc(mem, n > 0 ? n : 1);
  if (q != NULL && n > 0) {
    memcpy(q, p, n);
  }
  return q;
}
