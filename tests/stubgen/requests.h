/* Shared by the generator tests and the fuzzer: reading a file whole. */
#ifndef SG_TEST_REQUESTS_H
#define SG_TEST_REQUESTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Returns the bytes of |path| (to free) and their number in |*len|, or
   NULL. */
static inline uint8_t *sg_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0, r;

  *len = 0;
  if (f == NULL) {
    return NULL;
  }
  for (;;) {
    if (n == cap) {
      uint8_t *p = realloc(buf, cap > 0 ? cap * 2 : 65536);
      if (p == NULL) {
        break;
      }
      buf = p;
      cap = cap > 0 ? cap * 2 : 65536;
    }
    r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) {
      fclose(f);
      *len = n;
      return buf;
    }
  }
  fclose(f);
  free(buf);
  return NULL;
}

#endif
