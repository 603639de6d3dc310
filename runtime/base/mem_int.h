/* Internal allocation helpers: every allocation in runtime/ and api/ goes
   through these (a CI grep rejects raw malloc there). */
#ifndef CONCH_MEM_INT_H
#define CONCH_MEM_INT_H

#include <stddef.h>

#include <conch/mem.h>

void *conch__malloc(const conch_mem *mem, size_t n);
void *conch__calloc(const conch_mem *mem, size_t nmemb, size_t size);
void *conch__realloc(const conch_mem *mem, void *p, size_t n);
void conch__free(const conch_mem *mem, void *p);
/* Copies |n| bytes and appends a NUL. */
char *conch__strndup(const conch_mem *mem, const char *s, size_t n);
char *conch__strdup(const conch_mem *mem, const char *s);
void *conch__memdup(const conch_mem *mem, const void *p, size_t n);

#endif
