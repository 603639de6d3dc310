#include "failmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Each block carries a header so realloc/free can keep the live count. */
typedef struct hdr {
  size_t size;
  size_t magic;
} hdr;

#define FAILMEM_MAGIC ((size_t)0xfa11fa11u)

static size_t fail_at = (size_t)-1;
static size_t count;
static int fired;
static long live;

void failmem_fail_at(size_t n) {
  fail_at = n;
  count = 0;
  fired = 0;
}

int failmem_fired(void) { return fired; }
size_t failmem_count(void) { return count; }
long failmem_live_blocks(void) { return live; }

static int should_fail(void) {
  size_t n = count++;
  if (n == fail_at) {
    fired = 1;
    return 1;
  }
  return 0;
}

static void *fm_malloc(size_t size, void *ud) {
  hdr *h;
  (void)ud;
  if (should_fail()) {
    return NULL;
  }
  h = malloc(sizeof(hdr) + size);
  if (h == NULL) {
    return NULL;
  }
  h->size = size;
  h->magic = FAILMEM_MAGIC;
  live++;
  return h + 1;
}

static void fm_free(void *p, void *ud) {
  hdr *h;
  (void)ud;
  if (p == NULL) {
    return;
  }
  h = (hdr *)p - 1;
  if (h->magic != FAILMEM_MAGIC) {
    abort(); /* not ours: a mismatched allocator */
  }
  h->magic = 0;
  live--;
  free(h);
}

static void *fm_calloc(size_t nmemb, size_t size, void *ud) {
  void *p;
  if (size != 0 && nmemb > SIZE_MAX / size) {
    return NULL;
  }
  p = fm_malloc(nmemb * size, ud);
  if (p != NULL) {
    memset(p, 0, nmemb * size);
  }
  return p;
}

static void *fm_realloc(void *p, size_t size, void *ud) {
  hdr *h, *nh;
  if (p == NULL) {
    return fm_malloc(size, ud);
  }
  if (should_fail()) {
    return NULL;
  }
  h = (hdr *)p - 1;
  if (h->magic != FAILMEM_MAGIC) {
    abort();
  }
  nh = realloc(h, sizeof(hdr) + size);
  if (nh == NULL) {
    return NULL;
  }
  nh->size = size;
  return nh + 1;
}

static const conch_mem hooks = {NULL, fm_malloc, fm_free, fm_calloc,
                                fm_realloc};

const conch_mem *failmem_hooks(void) { return &hooks; }
