/* An LD_PRELOAD counter for tools/bench/python/read_copies.sh: the
   allocations (malloc, realloc, calloc) and the memcpy/memmove calls of at
   least COUNT_MIN bytes that go through the dynamic linker (the Python
   extension's and the interpreter's, libconch's in the extension), their
   number and bytes.  cc_reset() and cc_get() are reached from Python with
   ctypes.  A bench tool, not part of libconch. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define COUNT_MIN 4096

extern void *__libc_malloc(size_t n);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_calloc(size_t k, size_t n);

static atomic_ullong n_alloc, b_alloc, n_copy, b_copy;
static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);

__attribute__((constructor)) static void cc_init(void) {
  real_memcpy =
      (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memcpy");
  real_memmove =
      (void *(*)(void *, const void *, size_t))dlsym(RTLD_NEXT, "memmove");
}

static void alloc_seen(size_t n) {
  if (n >= COUNT_MIN) {
    n_alloc++;
    b_alloc += n;
  }
}

static void copy_seen(size_t n) {
  if (n >= COUNT_MIN) {
    n_copy++;
    b_copy += n;
  }
}

void *malloc(size_t n) {
  alloc_seen(n);
  return __libc_malloc(n);
}

void *realloc(void *p, size_t n) {
  alloc_seen(n);
  return __libc_realloc(p, n);
}

void *calloc(size_t k, size_t n) {
  alloc_seen(k * n);
  return __libc_calloc(k, n);
}

static void *slow_move(void *d, const void *s, size_t n) {
  unsigned char *dp = d;
  const unsigned char *sp = s;
  if (dp < sp) {
    while (n-- > 0) {
      *dp++ = *sp++;
    }
  } else {
    while (n-- > 0) {
      dp[n] = sp[n];
    }
  }
  return d;
}

void *memcpy(void *d, const void *s, size_t n) {
  copy_seen(n);
  return real_memcpy != NULL ? real_memcpy(d, s, n) : slow_move(d, s, n);
}

void *memmove(void *d, const void *s, size_t n) {
  copy_seen(n);
  return real_memmove != NULL ? real_memmove(d, s, n) : slow_move(d, s, n);
}

void cc_reset(void) { n_alloc = b_alloc = n_copy = b_copy = 0; }

/* out[0..4): allocations, their bytes, copies, their bytes. */
void cc_get(uint64_t *out) {
  out[0] = n_alloc;
  out[1] = b_alloc;
  out[2] = n_copy;
  out[3] = b_copy;
}
