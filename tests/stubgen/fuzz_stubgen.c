/* Fuzzing protoc-gen-conch: any bytes that decode as a CodeGeneratorRequest
   go through the generator, which must answer with files or an error and
   never crash, read out of bounds or leak (ASan/UBSan/LSan builds).
   With CONCH_FUZZ (clang) this is a libFuzzer target; otherwise main()
   below mutates the seed requests given on the command line with a fixed
   PRNG: flipped and overwritten bytes, cuts and splices. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stubgen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Conch__Plugin__CodeGeneratorRequest *req;
  sg_result res;

  /* protobuf-c decodes nested messages recursively; bound the input so a
     pathological nesting cannot exhaust the stack inside protobuf-c. */
  if (size > (1u << 20)) {
    return 0;
  }
  req = conch__plugin__code_generator_request__unpack(NULL, size, data);
  if (req == NULL) {
    return 0;
  }
  if (sg_generate(req, &res) == 0 && res.error == NULL) {
    size_t i;
    for (i = 0; i < res.nfiles; i++) {
      if (res.files[i].name == NULL || res.files[i].content == NULL ||
          strlen(res.files[i].content) != res.files[i].len) {
        abort();
      }
    }
  }
  sg_result_free(&res);
  conch__plugin__code_generator_request__free_unpacked(req, NULL);
  return 0;
}

#ifndef SG_LIBFUZZER
#include "requests.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Bytes that are often lengths or tags. */
static const uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x0a, 0x12};

static void mutate(uint8_t *p, size_t *n, const uint8_t *seed,
                   size_t seed_len) {
  size_t edits = 1 + next() % 8, i;
  memcpy(p, seed, seed_len);
  *n = seed_len;
  for (i = 0; i < edits && *n != 0; i++) {
    size_t at = next() % *n;
    switch (next() % 5) {
    case 0: /* flip a bit */
      p[at] ^= (uint8_t)(1u << (next() % 8));
      break;
    case 1: /* a random byte */
      p[at] = (uint8_t)next();
      break;
    case 2: /* an interesting byte: lengths and tags */
      p[at] = interesting[next() % sizeof(interesting)];
      break;
    case 3: /* cut the tail */
      *n = at;
      break;
    default: { /* copy a run of bytes elsewhere */
      size_t from = next() % *n, len = next() % 64;
      if (from + len > *n) {
        len = *n - from;
      }
      if (at + len > *n) {
        len = *n - at;
      }
      memmove(p + at, p + from, len);
      break;
    }
    }
  }
}

int main(int argc, char **argv) {
  long rounds = 2000;
  int i;

  if (argc > 2 && strcmp(argv[1], "-rounds") == 0) {
    rounds = strtol(argv[2], NULL, 10);
    argv += 2;
    argc -= 2;
  }
  for (i = 1; i < argc; i++) {
    size_t len, n;
    uint8_t *seed = sg_read_file(argv[i], &len);
    uint8_t *buf;
    long r;

    if (seed == NULL) {
      perror(argv[i]);
      return 1;
    }
    buf = malloc(len + 1);
    if (buf == NULL) {
      return 1;
    }
    LLVMFuzzerTestOneInput(seed, len);
    for (r = 0; r < rounds; r++) {
      mutate(buf, &n, seed, len);
      LLVMFuzzerTestOneInput(buf, n);
    }
    printf("%s: %ld mutations\n", argv[i], rounds);
    free(buf);
    free(seed);
  }
  return 0;
}
#endif
