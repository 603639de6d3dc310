/* What the fuzz targets share: libFuzzer's entry point, declared here for
   -Wmissing-prototypes (each target defines it; replay.c calls it without
   libFuzzer), and CHECK(), which aborts: libFuzzer and replay.c both
   report an abort as a finding, also in builds without assertions. */
#ifndef CONCH_TESTS_FUZZ_H
#define CONCH_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif
