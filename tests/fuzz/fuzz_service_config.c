/* Fuzz target: gRPC service configs (conch_client_opts_set_service_config,
   runtime/client/retry.c).  The bytes, up to the first NUL, are the JSON.
   Whatever they are, the call returns 0, CONCH_ERR_INVALID with a message,
   or CONCH_ERR_NOMEM; what it accepted is accepted again on top of itself
   (names replace their policies: no growth past the 64 names), and a
   client made from the options (nothing is connected) copies and frees
   the table (LSan: no leak). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/client.h>
#include <conch/retry.h>
#include <conch/status.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  conch_client_opts *o;
  conch_client *c = NULL;
  char err[256];
  char *text = malloc(size + 1);
  int rv;

  if (text == NULL) {
    return 0;
  }
  memcpy(text, data, size);
  text[size] = '\0';
  if (conch_client_opts_new(&o) != 0) {
    free(text);
    return 0;
  }
  rv = conch_client_opts_set_service_config(o, text, err, sizeof(err));
  CHECK(rv == 0 || rv == CONCH_ERR_INVALID || rv == CONCH_ERR_NOMEM);
  if (rv == CONCH_ERR_INVALID) {
    CHECK(err[0] != '\0' && strlen(err) < sizeof(err));
  }
  if (rv == 0) {
    CHECK(err[0] == '\0');
    rv = conch_client_opts_set_service_config(o, text, err, sizeof(err));
    CHECK(rv == 0 || rv == CONCH_ERR_NOMEM);
    if (conch_client_new(&c, "http://127.0.0.1:1", o) == 0) {
      conch_client_free(c);
    }
  }
  conch_client_opts_free(o);
  free(text);
  return 0;
}
