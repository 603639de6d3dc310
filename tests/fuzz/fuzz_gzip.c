/* Fuzz target: gzip inflate with a 256 KiB cap, enough for five growth
   steps and the clamp at the limit (1 MiB made runs 5x slower).  When the
   input inflates, the output is deflated again (level chosen by the input
   size) and must inflate back to the same bytes.  One context serves the
   whole run, so the reset paths follow both success and failure. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/status.h>

#include "fuzz.h"
#include "gzip.h"

#define MAX_OUT ((size_t)256 << 10)

/* `printf 'hello\n' | gzip -n` */
static const uint8_t hello_gz[] = {
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0xe7, 0x02, 0x00,
    0x20, 0x30, 0x3a, 0x36, 0x06, 0x00, 0x00, 0x00,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const conch_mem *mem = conch_mem_default();
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT, z = CONCH_BUF_INIT, back = CONCH_BUF_INIT;
  size_t len;
  int rv;

  conch__gzip_init(&gz, mem);
  /* Live bytes off the start of |out|, to check they survive an error and
     a compacting growth. */
  CHECK(conch__buf_append(&out, mem, "xyz", 3) == 0);
  conch__buf_consume(&out, 1);

  rv = conch__gzip_inflate(&gz, data, size, MAX_OUT, &out);
  CHECK(memcmp(conch__buf_head(&out), "yz", 2) == 0);
  if (rv != 0) {
    CHECK(rv == CONCH_ERR_GZIP || rv == CONCH_ERR_LIMIT);
    CHECK(conch__buf_size(&out) == 2);
    /* The context is reusable after a failure. */
    CHECK(conch__gzip_inflate(&gz, hello_gz, sizeof(hello_gz), 0, &back) == 0);
    CHECK(back.len == 6 && memcmp(back.data, "hello\n", 6) == 0);
    goto out;
  }
  len = conch__buf_size(&out) - 2;
  CHECK(len <= MAX_OUT);

  rv = conch__gzip_deflate(&gz, (int)(size % 11) - 1, conch__buf_head(&out) + 2,
                           len, &z);
  CHECK(rv == 0);
  CHECK(z.len >= 20);
  rv = conch__gzip_inflate(&gz, z.data, z.len, len == 0 ? 1 : len, &back);
  CHECK(rv == 0);
  CHECK(back.len == len);
  CHECK(len == 0 || memcmp(back.data, conch__buf_head(&out) + 2, len) == 0);

  /* Inflating the input again gives the same bytes. */
  conch__buf_reset(&back);
  CHECK(conch__gzip_inflate(&gz, data, size, MAX_OUT, &back) == 0);
  CHECK(back.len == len);
  CHECK(len == 0 || memcmp(back.data, conch__buf_head(&out) + 2, len) == 0);

out:
  conch__buf_free(&out, mem);
  conch__buf_free(&z, mem);
  conch__buf_free(&back, mem);
  conch__gzip_clear(&gz);
  return 0;
}
