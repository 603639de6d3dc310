/* Fuzz target: Connect end-stream JSON and unary error bodies
   (runtime/base/status.c).  The same bytes go to conch__connect_end_stream and,
   under an HTTP status picked by the first byte, to
   conch__connect_unary_error with and without a JSON content type.  The
   invariants the callers rely on are checked with abort().  Where jansson
   is built in (CONCH_WITH_JSON), the reader's verdict (runtime/base/json.c)
   must be jansson's too (but for what unit/test_json.c lists: numbers
   beyond a double, a NUL byte after a number). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/features.h>

#include "json.h"
#include "metadata_int.h"
#include "status_int.h"

#if CONCH_WITH_JSON
#include <jansson.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int http_statuses[] = {400, 401, 403, 404, 408, 409, 412, 413,
                                    415, 418, 422, 429, 431, 499, 500, 501,
                                    502, 503, 504, 505, 800, 200, 0,   -1};

static void check_status(const conch_status *st) {
  size_t i;

  if (conch_code_name(st->code) == NULL || conch_status_message(st) == NULL) {
    abort();
  }
  if ((st->ndetails == 0) != (st->details == NULL)) {
    abort();
  }
  for (i = 0; i < st->ndetails; ++i) {
    /* A type URL always has its '/' (bare names get the prefix). */
    if (strchr(st->details[i].type_url, '/') == NULL ||
        st->details[i].value == NULL) {
      abort();
    }
  }
}

static void check_copy(const conch_status *st) {
  conch_status cp;
  size_t i;

  conch_status_init(&cp);
  if (conch_status_copy(&cp, st, NULL) != 0 || cp.code != st->code ||
      cp.ndetails != st->ndetails ||
      (st->message == NULL) != (cp.message == NULL) ||
      (st->message != NULL && strcmp(st->message, cp.message) != 0)) {
    abort();
  }
  for (i = 0; i < st->ndetails; ++i) {
    if (cp.details[i].len != st->details[i].len ||
        strcmp(cp.details[i].type_url, st->details[i].type_url) != 0 ||
        memcmp(cp.details[i].value, st->details[i].value, st->details[i].len) !=
            0) {
      abort();
    }
  }
  conch_status_clear(&cp);
}

static void fuzz_end_stream(const uint8_t *data, size_t size) {
  conch_metadata md;
  conch_status st;
  const char *name;
  const uint8_t *value;
  size_t i, len;
  int rv;

  conch__metadata_init(&md, NULL);
  conch_status_init(&st);
  rv = conch__connect_end_stream(data, size, NULL, &st, &md);
  if (rv != 0) {
    /* A failed call changes nothing. */
    if (rv != CONCH_ERR_PROTO || st.code != CONCH_CODE_OK ||
        st.message != NULL || conch_metadata_count(&md) != 0) {
      abort();
    }
  }
  if (st.code != CONCH_CODE_OK && st.origin != CONCH_ORIGIN_SERVER) {
    abort();
  }
  check_status(&st);
  check_copy(&st);
  for (i = 0; i < conch_metadata_count(&md); ++i) {
    if (conch_metadata_at(&md, i, &name, &value, &len) != 0 ||
        value[len] != '\0' || conch_metadata_find(&md, name, 0) < 0) {
      abort();
    }
  }
  conch_status_clear(&st);
  conch__metadata_clear(&md);
}

static void fuzz_unary(const uint8_t *data, size_t size, int http_status,
                       int json_ctype) {
  conch_status st;
  int rv;

  conch_status_init(&st);
  rv = conch__connect_unary_error(&st, NULL, http_status, json_ctype, data,
                                  size);
  if (rv != 0 || st.code == CONCH_CODE_OK || st.http_status != http_status) {
    abort();
  }
  if (st.origin == CONCH_ORIGIN_HTTP) {
    /* Inferred codes always say which status they came from. */
    if (st.code != conch__code_from_http(http_status) || st.message == NULL) {
      abort();
    }
  } else if (st.origin != CONCH_ORIGIN_SERVER || !json_ctype) {
    abort();
  }
  check_status(&st);
  check_copy(&st);
  conch_status_clear(&st);
}

static void fuzz_reader(const uint8_t *data, size_t size) {
#if CONCH_WITH_JSON
  json_error_t err;
  json_t *j;
  int mine;

  if (conch__json_values(data, size) > 100000) {
    return; /* jansson's tree would be the cost, not the reader */
  }
  j = json_loadb((const char *)data, size,
                 JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
  mine = conch__json_check(data, size, NULL);
  if ((j == NULL && strstr(err.text, "overflow") != NULL) ||
      (j != NULL && mine != 0 && memchr(data, 0, size) != NULL)) {
    json_decref(j);
    return;
  }
  if ((mine == 0) != (j != NULL)) {
    abort();
  }
  json_decref(j);
#else
  (void)conch__json_check(data, size, NULL);
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t n = sizeof(http_statuses) / sizeof(http_statuses[0]);
  int http_status = http_statuses[size > 0 ? data[0] % n : 0];

  fuzz_reader(data, size);
  fuzz_end_stream(data, size);
  fuzz_unary(data, size, http_status, 1);
  fuzz_unary(data, size, http_status, 0);
  return 0;
}
