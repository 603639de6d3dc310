/* The body of the fuzz targets of the decoders beside gzip's (fuzz_br.c,
   fuzz_zstd.c, fuzz_deflate.c, fuzz_snappy.c), each of which defines
   COMP_ID and includes this: decode through the registry with a 256 KiB
   cap; on failure the output is untouched and the contexts still work;
   on success the output compresses again and decodes back to the same
   bytes, and decoding the input again gives them too.  One set of
   contexts serves the whole run, so reset paths follow both success and
   failure. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/status.h>

#include "fuzz.h"
#include "compress.h"

#define MAX_OUT ((size_t)256 << 10)

static conch_comps comps;
static conch_comp_opts copts;
static int ready;

static void check_usable(void) {
  const conch_mem *mem = conch_mem_default();
  conch_buf z = CONCH_BUF_INIT, back = CONCH_BUF_INIT;

  CHECK(conch__comp_compress(&comps, &copts, COMP_ID,
                             (const uint8_t *)"hello\n", 6, &z) == 0);
  CHECK(conch__comp_decompress(&comps, &copts, COMP_ID, z.data, z.len, 6,
                               &back) == 0);
  CHECK(back.len == 6 && memcmp(back.data, "hello\n", 6) == 0);
  conch__buf_free(&z, mem);
  conch__buf_free(&back, mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const conch_mem *mem = conch_mem_default();
  conch_buf out = CONCH_BUF_INIT, z = CONCH_BUF_INIT, back = CONCH_BUF_INIT;
  size_t len;
  int rv;

  if (!ready) {
    conch__comp_opts_defaults(&copts);
    conch__comps_init(&comps, mem);
    ready = 1;
  }
  if (size == 0) {
    return 0; /* callers never decode empty content */
  }
  /* Live bytes off the start of |out|, to check they survive an error and
     a compacting growth. */
  CHECK(conch__buf_append(&out, mem, "xyz", 3) == 0);
  conch__buf_consume(&out, 1);

  rv = conch__comp_decompress(&comps, &copts, COMP_ID, data, size, MAX_OUT,
                              &out);
  CHECK(memcmp(conch__buf_head(&out), "yz", 2) == 0);
  if (rv != 0) {
    CHECK(rv == CONCH_ERR_COMPRESSION || rv == CONCH_ERR_LIMIT);
    CHECK(conch__buf_size(&out) == 2);
    check_usable();
    goto out;
  }
  len = conch__buf_size(&out) - 2;
  CHECK(len <= MAX_OUT);

  rv = conch__comp_compress(&comps, &copts, COMP_ID, conch__buf_head(&out) + 2,
                            len, &z);
  CHECK(rv == 0);
  CHECK(z.len > 0);
  rv = conch__comp_decompress(&comps, &copts, COMP_ID, z.data, z.len,
                              len == 0 ? 1 : len, &back);
  CHECK(rv == 0);
  CHECK(back.len == len);
  CHECK(len == 0 || memcmp(back.data, conch__buf_head(&out) + 2, len) == 0);

  conch__buf_reset(&back);
  CHECK(conch__comp_decompress(&comps, &copts, COMP_ID, data, size, MAX_OUT,
                               &back) == 0);
  CHECK(back.len == len);
  CHECK(len == 0 || memcmp(back.data, conch__buf_head(&out) + 2, len) == 0);

out:
  conch__buf_free(&out, mem);
  conch__buf_free(&z, mem);
  conch__buf_free(&back, mem);
  return 0;
}
