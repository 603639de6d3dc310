/* A main() for the fuzz targets when libFuzzer is not used: runs
   LLVMFuzzerTestOneInput over every file named on the command line, or over
   every file in each directory named.  gcc builds run the corpora this way
   in CI. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf;
  long n;

  if (f == NULL) {
    perror(path);
    return 1;
  }
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
      fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return 1;
  }
  buf = malloc((size_t)n + 1);
  if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    fclose(f);
    return 1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, (size_t)n);
  free(buf);
  return 0;
}

static int run_path(const char *path, size_t *count) {
  struct stat st;
  DIR *d;
  struct dirent *e;
  int rv = 0;

  if (stat(path, &st) != 0) {
    perror(path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) {
    (*count)++;
    return run_file(path);
  }
  d = opendir(path);
  if (d == NULL) {
    perror(path);
    return 1;
  }
  while ((e = readdir(d)) != NULL) {
    char sub[4096];
    if (e->d_name[0] == '.') {
      continue;
    }
    snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
    rv |= run_path(sub, count);
  }
  closedir(d);
  return rv;
}

int main(int argc, char **argv) {
  size_t count = 0;
  int rv = 0;

  for (int i = 1; i < argc; i++) {
    rv |= run_path(argv[i], &count);
  }
  printf("replayed %zu inputs\n", count);
  if (count == 0) {
    fprintf(stderr, "no inputs: the corpus is missing\n");
    return 1;
  }
  return rv;
}
