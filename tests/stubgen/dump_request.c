/* A protoc plugin that keeps its CodeGeneratorRequest: copies stdin to the
   file named by $SG_DUMP and answers with a response that only declares
   proto3 `optional` support, so that protoc sends such files as they are.
   The build uses it to make the requests the generator tests and the
   fuzzer start from. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  const char *path = getenv("SG_DUMP");
  char buf[65536];
  FILE *out;
  size_t n;

  if (path == NULL) {
    fprintf(stderr, "dump_request: set SG_DUMP\n");
    return 1;
  }
  out = fopen(path, "wb");
  if (out == NULL) {
    perror(path);
    return 1;
  }
  while ((n = fread(buf, 1, sizeof(buf), stdin)) > 0) {
    if (fwrite(buf, 1, n, out) != n) {
      perror(path);
      fclose(out);
      return 1;
    }
  }
  if (ferror(stdin) || fclose(out) != 0) {
    perror(path);
    return 1;
  }
  /* supported_features (field 2, varint) = FEATURE_PROTO3_OPTIONAL */
  if (fwrite("\x10\x01", 1, 2, stdout) != 2 || fflush(stdout) != 0) {
    return 1;
  }
  return 0;
}
