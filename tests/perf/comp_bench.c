/* comp-bench: the cost of compressing one message with each built-in
   compression, as the server does it (one conch_comps for every message,
   runtime/compress/compress.c).  A benchmark, not a test; driven by
   tools/bench/srvgzip.sh under callgrind.  It lives in tests/ because it
   calls the private registry (compress.h), which tools/ may not.

     comp-bench CODEC SIZE COUNT [z|d]

   Compresses COUNT messages of SIZE bytes with CODEC (gzip, deflate, br,
   zstd, snappy), each into an output buffer of its own that is freed
   after it, as the server's send path does ("z", the default); "d" also
   decompresses each one and checks it.  The message is the benchmark servers' canned
   485-byte ListResponse (list_fixture.c) repeated and cut to SIZE, every
   copy with one byte changed so that a copy is not an exact repeat.
   Prints the compressed size of the last message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/status.h>

#include "buf.h"
#include "compress.h"
#include "list_fixture.h"

int main(int argc, char **argv) {
  conch_comp_opts o;
  conch_comps cs;
  conch_buf z = CONCH_BUF_INIT, d = CONCH_BUF_INIT;
  uint8_t list[LIST_BYTES];
  uint8_t *msg;
  size_t size, i, zlen = 0;
  long count, k;
  int id, check, rv = 0;

  if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "z") != 0 &&
                               strcmp(argv[4], "d") != 0)) {
    fprintf(stderr, "usage: comp-bench CODEC SIZE COUNT [z|d]\n");
    return 2;
  }
  check = argc == 5 && argv[4][0] == 'd';
  size = (size_t)strtoul(argv[2], NULL, 10);
  count = atol(argv[3]);
  conch__comp_opts_defaults(&o);
  if (conch__comp_find(&o, argv[1], strlen(argv[1]), &id) != 0 ||
      id == CONCH_COMPRESSION_IDENTITY) {
    fprintf(stderr, "comp-bench: unknown or unbuilt codec %s\n", argv[1]);
    return 2;
  }
  bench_list_build(list, "comp-bench");
  msg = malloc(size + 1);
  if (msg == NULL) {
    return 1;
  }
  for (i = 0; i < size; i++) {
    msg[i] = list[i % LIST_BYTES];
    if (i % LIST_BYTES == LIST_BYTES - 1) {
      msg[i] = (uint8_t)(i / LIST_BYTES); /* the padded tag's last byte */
    }
  }
  conch__comps_init(&cs, conch_mem_default());
  for (k = 0; k < count && rv == 0; k++) {
    conch__buf_free(&z, conch_mem_default());
    rv = conch__comp_compress(&cs, &o, id, msg, size, &z);
    zlen = conch__buf_size(&z);
    if (rv == 0 && check) {
      conch__buf_reset(&d);
      rv = conch__comp_decompress(&cs, &o, id, conch__buf_head(&z), zlen, 0,
                                  &d);
      if (rv == 0 && (conch__buf_size(&d) != size ||
                      (size > 0 && memcmp(conch__buf_head(&d), msg, size)))) {
        rv = CONCH_ERR_COMPRESSION;
      }
    }
  }
  if (rv != 0) {
    fprintf(stderr, "comp-bench: %s of %zu bytes failed: %d\n", argv[1], size,
            rv);
  } else {
    printf("%zu\n", zlen);
  }
  conch__buf_free(&z, conch_mem_default());
  conch__buf_free(&d, conch_mem_default());
  conch__comps_clear(&cs);
  free(msg);
  return rv != 0;
}
