/* Fuzz target: the wire layer's parsers (runtime/http/wire.c).  The bytes are
   given whole to each: Connect-Timeout-Ms, grpc-timeout and Content-Type.
   What parses must hold together: a timeout is in range and formats back
   to itself (grpc-timeout: to no more than itself); a content type's
   canonical name parses back to the same family and codec, and upper case
   or leading blanks change nothing.  Then the bytes are an error message:
   the Connect error JSON written for it must read back (status.c) with
   the same code, and the same message when it is UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/status.h>

#include "fuzz.h"
#include "pbjson.h"
#include "status_int.h"
#include "wire.h"

static void timeouts(const char *v, size_t n) {
  char out[CONCH_TIMEOUT_BUF];
  int64_t ms = -1;
  int64_t back = -1;
  int rv;

  rv = conch__connect_timeout_parse(v, n, &ms);
  CHECK((rv == CONCH_TIMEOUT_TOO_LONG) == (n > 10));
  if (rv == 0) {
    CHECK(n >= 1 && ms >= 0 && ms <= CONCH_CONNECT_TIMEOUT_MAX);
    CHECK(conch__connect_timeout_format(ms, out) > 0);
    CHECK(conch__connect_timeout_parse(out, strlen(out), &back) == 0);
    CHECK(back == ms);
  } else {
    CHECK(rv == CONCH_TIMEOUT_SYNTAX || rv == CONCH_TIMEOUT_TOO_LONG);
  }

  ms = back = -1;
  rv = conch__grpc_timeout_parse(v, n, &ms);
  if (rv == 0) {
    CHECK(n >= 2 && n <= 9);
    CHECK(ms >= 0 && ms <= 99999999LL * 3600000);
    CHECK(conch__grpc_timeout_format(ms, out) > 0);
    CHECK(strlen(out) <= 9);
    CHECK(conch__grpc_timeout_parse(out, strlen(out), &back) == 0);
    CHECK(back <= ms && (ms > 99999999 || back == ms));
  } else {
    CHECK(rv == CONCH_TIMEOUT_SYNTAX || rv == CONCH_TIMEOUT_TOO_LONG);
  }
}

static void ctypes(const char *v, size_t n) {
  conch_ctype ct;
  conch_ctype again;
  char *alt;
  size_t i;
  int rv = conch__ctype_parse(v, n, &ct);

  if (rv != 0) {
    CHECK(rv == -1 && ct.family == 0 && ct.codec == 0 && ct.params == 0);
  } else {
    const char *name;

    CHECK(ct.family >= CONCH_CT_CONNECT && ct.family <= CONCH_CT_GRPC_WEB);
    CHECK(ct.codec >= CONCH_CT_PROTO && ct.codec <= CONCH_CT_OTHER);
    CHECK(ct.params >= CONCH_CT_NO_PARAMS && ct.params <= CONCH_CT_BAD_PARAMS);
    name = conch__ctype_name(ct.family, ct.codec, ct.params == CONCH_CT_UTF8);
    CHECK((name == NULL) ==
          (ct.codec == CONCH_CT_OTHER ||
           (ct.codec == CONCH_CT_PROTO && ct.params == CONCH_CT_UTF8)));
    if (name != NULL) {
      CHECK(conch__ctype_parse(name, strlen(name), &again) == 0);
      CHECK(again.family == ct.family && again.codec == ct.codec);
      CHECK(again.params == (ct.params == CONCH_CT_UTF8 ? CONCH_CT_UTF8
                                                        : CONCH_CT_NO_PARAMS));
    }
  }
  /* Case and leading blanks do not matter. */
  alt = malloc(n + 2);
  CHECK(alt != NULL);
  alt[0] = ' ';
  alt[1] = '\t';
  for (i = 0; i < n; i++) {
    char c = v[i];

    alt[i + 2] = (char)(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  CHECK(conch__ctype_parse(alt, n + 2, &again) == rv);
  CHECK(again.family == ct.family && again.codec == ct.codec &&
        again.params == ct.params);
  free(alt);
}

static int utf8_valid(const char *s, size_t n) {
  size_t i = 0;

  while (i < n) {
    size_t k = conch__utf8_seq((const unsigned char *)s + i, n - i);

    if (k == 0) {
      return 0;
    }
    i += k;
  }
  return 1;
}

static void error_json(const char *v, size_t n) {
  const conch_mem *mem = conch_mem_default();
  conch_buf b = CONCH_BUF_INIT;
  conch_status st;
  conch_status back;
  char *msg = malloc(n + 1);
  size_t len;

  CHECK(msg != NULL);
  memcpy(msg, v, n);
  msg[n] = '\0';
  len = strlen(msg);
  conch_status_init(&st);
  st.code = (conch_code)(1 + n % 16);
  st.message = msg;
  CHECK(conch__connect_error_write(&b, mem, &st) == 0);
  conch_status_init(&back);
  CHECK(conch__connect_unary_error(&back, mem, 500, 1, conch__buf_head(&b),
                                   conch__buf_size(&b)) == 0);
  CHECK(back.code == st.code && back.origin == CONCH_ORIGIN_SERVER);
  if (len > 0 && utf8_valid(msg, len)) {
    CHECK(back.message != NULL && strcmp(back.message, msg) == 0);
  }
  conch_status_clear(&back);
  conch__buf_free(&b, mem);
  free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *v = (const char *)data;

  if (size > 4096) {
    return 0;
  }
  timeouts(v, size);
  ctypes(v, size);
  error_json(v, size);
  return 0;
}
