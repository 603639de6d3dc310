/* tools/bench/python/count_copies.c for a C client (tools/bench/bulk.sh):
   the same LD_PRELOAD counter, printing its counts to stderr at exit as
   "copies: ALLOCS ALLOC_BYTES COPIES COPY_BYTES" (calls of at least 4 KiB
   that go through the dynamic linker).  A bench tool. */
#include <stdio.h>

#include "python/count_copies.c"

__attribute__((destructor)) static void cc_report(void) {
  uint64_t v[4];
  cc_get(v);
  fprintf(stderr, "copies: %llu %llu %llu %llu\n", (unsigned long long)v[0],
          (unsigned long long)v[1], (unsigned long long)v[2],
          (unsigned long long)v[3]);
}
