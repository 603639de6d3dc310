/* Fuzz target: the gRPC status trailers (runtime/base/status.c) and received
   "-bin" metadata (runtime/base/metadata.c).  The input goes whole to
   grpc-status-details-bin decoding, grpc-message percent-decoding,
   grpc-status parsing and conch__metadata_add_wire under a "-bin" name.
   Round-trip properties are checked with abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "status_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_details(const char *s, size_t size) {
  conch_status st, cp;
  size_t i;
  int rv;

  conch_status_init(&st);
  conch__status_set(&st, NULL, CONCH_CODE_INTERNAL, CONCH_ORIGIN_SERVER, 0,
                    "from grpc-message");
  rv = conch__grpc_status_details(s, size, NULL, &st);
  if (rv != 0) {
    if (rv != CONCH_ERR_PROTO || st.code != CONCH_CODE_INTERNAL ||
        st.message == NULL || strcmp(st.message, "from grpc-message") != 0) {
      abort();
    }
  } else if (conch_code_name(st.code) == NULL) {
    abort();
  }
  for (i = 0; i < st.ndetails; ++i) {
    if (strchr(st.details[i].type_url, '/') == NULL) {
      abort();
    }
  }
  conch_status_init(&cp);
  if (conch_status_copy(&cp, &st, NULL) != 0 || cp.ndetails != st.ndetails) {
    abort();
  }
  conch_status_clear(&cp);
  conch_status_clear(&st);
}

static void fuzz_message(const char *s, size_t size) {
  const conch_mem *mem = conch_mem_default();
  char *dec, *enc, *back;

  if (conch__grpc_message_decode(s, size, NULL, &dec) != 0) {
    abort();
  }
  /* Decoding never grows the text. */
  if (strlen(dec) > size) {
    abort();
  }
  conch__free(mem, dec);
  /* decode(encode(x)) == x for any bytes; the encoding is printable. */
  if (conch__grpc_message_encode(s, size, NULL, &enc) != 0) {
    abort();
  }
  if (!conch__metadata_value_ok((const uint8_t *)enc, strlen(enc))) {
    abort();
  }
  if (conch__grpc_message_decode(enc, strlen(enc), NULL, &back) != 0 ||
      (size > 0 && memcmp(back, s, size) != 0) || back[size] != '\0') {
    abort();
  }
  conch__free(mem, enc);
  conch__free(mem, back);
}

static void fuzz_status_parse(const char *s, size_t size) {
  int code = conch__grpc_status_parse(s, size);

  if (code < -1 || code > 16) {
    abort();
  }
  if (code >= 0 && (size == 0 || size > 2 || s[0] < '0' || s[0] > '9')) {
    abort();
  }
}

static void fuzz_bin(const char *s, size_t size) {
  conch_metadata md;
  const uint8_t *value;
  const char *name;
  size_t i, len, commas = 0;

  conch__metadata_init(&md, NULL);
  if (conch__metadata_add_wire(&md, "X-Trace-Bin", 11, s, size) != 0) {
    abort();
  }
  for (i = 0; i < size; ++i) {
    commas += s[i] == ',';
  }
  /* Either one pair per element, or the value kept whole. */
  if (md.n != commas + 1 && md.n != 1) {
    abort();
  }
  for (i = 0; i < md.n; ++i) {
    if (conch_metadata_at(&md, i, &name, &value, &len) != 0 ||
        strcmp(name, "x-trace-bin") != 0 || value[len] != '\0') {
      abort();
    }
  }
  if (md.n == 1 && conch_metadata_at(&md, 0, &name, &value, &len) == 0 &&
      len > size) {
    abort();
  }
  /* A text name keeps the bytes as they are. */
  if (conch__metadata_add_wire(&md, "x-text", 6, s, size) != 0) {
    abort();
  }
  value = (const uint8_t *)conch_metadata_get(&md, "X-TEXT", &len);
  if (value == NULL || len != size || (size > 0 && memcmp(value, s, size))) {
    abort();
  }
  conch__metadata_clear(&md);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;

  fuzz_details(s, size);
  fuzz_message(s, size);
  fuzz_status_parse(s, size);
  fuzz_bin(s, size);
  return 0;
}
