/* Fuzz target: a FileDescriptorSet written in JSON
   (conch_fileset_add_set_json(), what `conch call --schema x.json` reads),
   read with the descriptor.proto types compiled into the library.  The
   input is the JSON text.  What it adds must be files the binary path takes
   as they are: each added again with conch_fileset_add_file() to a second
   set gives the same files, and both sets go into a pool alike.  Bad input
   must be refused, never crash or leak.  Failures abort(). */
#include <stdint.h>
#include <string.h>

#include <conch/descriptor.h>
#include <conch/dynamic.h>
#include <conch/status.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  conch_fileset *fs = NULL, *fs2 = NULL;
  conch_descpool *p1 = NULL, *p2 = NULL;
  size_t i, n;
  int rc, rc2;

  CHECK(conch_fileset_new(&fs, NULL) == 0);
  CHECK(conch_fileset_new(&fs2, NULL) == 0);
  rc = conch_fileset_add_set_json(fs, (const char *)data, size);
  CHECK(rc == 0 || rc == CONCH_ERR_INVALID);
  n = conch_fileset_n_files(fs);
  for (i = 0; i < n; i++) {
    const conch_file_descriptor *f = conch_fileset_file_at(fs, i);
    CHECK(f != NULL && f->name != NULL);
    CHECK(conch_fileset_add_file(fs2, f->data, f->len) == 0);
    CHECK(strcmp(conch_fileset_file_at(fs2, i)->name, f->name) == 0);
  }
  CHECK(conch_fileset_n_files(fs2) == n);
  CHECK(conch_fileset_file_at(fs, n) == NULL);
  CHECK(conch_descpool_new(&p1, NULL) == 0);
  CHECK(conch_descpool_new(&p2, NULL) == 0);
  rc = conch_fileset_to_pool(fs, p1);
  rc2 = conch_fileset_to_pool(fs2, p2);
  CHECK(rc == 0 || rc == CONCH_ERR_INVALID);
  CHECK(rc == rc2);
  CHECK(conch_descpool_n_files(p1) == conch_descpool_n_files(p2));
  conch_descpool_free(p1);
  conch_descpool_free(p2);
  conch_fileset_free(fs);
  conch_fileset_free(fs2);
  return 0;
}
