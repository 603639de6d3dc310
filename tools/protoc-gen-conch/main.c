/* protoc-gen-conch: the protoc plugin that writes typed conch stubs.
 *
 *   protoc --plugin=protoc-gen-conch=PATH --c_out=DIR --conch_out=DIR x.proto
 *
 * protoc writes a CodeGeneratorRequest to stdin and reads a
 * CodeGeneratorResponse from stdout.  A problem of the .proto goes back in
 * the response's error field; the exit status is non-zero only when the
 * plugin itself cannot work (unreadable input, out of memory, I/O). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stubgen.h"

/* Cap on the request: protoc's requests are descriptors, far below this. */
#define REQUEST_MAX ((size_t)1 << 30)

static int read_all(int fd, uint8_t **out, size_t *len) {
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;

  for (;;) {
    ssize_t r;
    if (n == cap) {
      uint8_t *p;
      if (cap >= REQUEST_MAX) {
        free(buf);
        return -1;
      }
      cap = cap > 0 ? cap * 2 : 65536;
      p = realloc(buf, cap);
      if (p == NULL) {
        free(buf);
        return -1;
      }
      buf = p;
    }
    r = read(fd, buf + n, cap - n);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      free(buf);
      return -1;
    }
    if (r == 0) {
      break;
    }
    n += (size_t)r;
  }
  *out = buf;
  *len = n;
  return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Packs |res| as a CodeGeneratorResponse and writes it to stdout. */
static int respond(const sg_result *res) {
  Conch__Plugin__CodeGeneratorResponse resp =
      CONCH__PLUGIN__CODE_GENERATOR_RESPONSE__INIT;
  Conch__Plugin__CodeGeneratorResponse__File *files = NULL;
  Conch__Plugin__CodeGeneratorResponse__File **ptrs = NULL;
  uint8_t *out = NULL;
  size_t i, n;
  int rv = -1;

  resp.has_supported_features = 1;
  resp.supported_features =
      CONCH__PLUGIN__CODE_GENERATOR_RESPONSE__FEATURE__FEATURE_PROTO3_OPTIONAL;
  resp.error = res->error;
  if (res->nfiles > 0) {
    files = calloc(res->nfiles, sizeof(*files));
    ptrs = calloc(res->nfiles, sizeof(*ptrs));
    if (files == NULL || ptrs == NULL) {
      goto out;
    }
  }
  for (i = 0; i < res->nfiles; i++) {
    conch__plugin__code_generator_response__file__init(&files[i]);
    files[i].name = res->files[i].name;
    files[i].content = res->files[i].content;
    ptrs[i] = &files[i];
  }
  resp.n_file = res->nfiles;
  resp.file = ptrs;
  n = conch__plugin__code_generator_response__get_packed_size(&resp);
  out = malloc(n > 0 ? n : 1);
  if (out == NULL) {
    goto out;
  }
  if (conch__plugin__code_generator_response__pack(&resp, out) != n) {
    goto out;
  }
  rv = write_all(STDOUT_FILENO, out, n);
out:
  free(out);
  free(ptrs);
  free(files);
  return rv;
}

int main(int argc, char **argv) {
  Conch__Plugin__CodeGeneratorRequest *req;
  sg_result res;
  uint8_t *in;
  size_t len;
  int rv;

  if (argc > 1) {
    /* protoc passes no arguments; anything else is a person at a shell. */
    fprintf(stderr,
            "%s: a protoc plugin; run it through protoc:\n"
            "  protoc --plugin=protoc-gen-conch=%s --c_out=DIR "
            "--conch_out=DIR x.proto\n",
            argv[0], argv[0]);
    return strcmp(argv[1], "--help") == 0 ? 0 : 2;
  }
  if (read_all(STDIN_FILENO, &in, &len) != 0) {
    fprintf(stderr, "protoc-gen-conch: cannot read the request\n");
    return 1;
  }
  req = conch__plugin__code_generator_request__unpack(NULL, len, in);
  free(in);
  if (req == NULL) {
    fprintf(stderr, "protoc-gen-conch: the input is not a "
                    "CodeGeneratorRequest\n");
    return 1;
  }
  rv = sg_generate(req, &res);
  conch__plugin__code_generator_request__free_unpacked(req, NULL);
  if (rv != 0) {
    sg_result_free(&res);
    fprintf(stderr, "protoc-gen-conch: out of memory\n");
    return 1;
  }
  rv = respond(&res);
  sg_result_free(&res);
  if (rv != 0) {
    fprintf(stderr, "protoc-gen-conch: cannot write the response\n");
    return 1;
  }
  return 0;
}
