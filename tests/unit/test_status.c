/* Unit tests for runtime/base/status.c: return codes, code names, the HTTP, RST
   and local mappings, the Connect error and end-stream JSON
   (CONNECT_PROTOCOL.md 9.2 B.9, B.10, C.11), and the gRPC status
   trailers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base64.h"
#include "failmem.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "status_int.h"

/* The message of the unicode cases of errors.yaml, as UTF-8... */
#define UNICODE_MSG                                                            \
  "\ntest with whitespace\r\nand Unicode BMP \xe2\x98\xba and non-BMP "        \
  "\xf0\x9f\x98\x88\n"
/* ...as JSON escapes (surrogate pair for the emoji)... */
#define UNICODE_JSON                                                           \
  "\"\\ntest with whitespace\\r\\nand Unicode BMP \\u263a and non-BMP "        \
  "\\ud83d\\ude08\\n\""
/* ...and as grpc-message. */
#define UNICODE_PCT                                                            \
  "%0Atest with whitespace%0D%0Aand Unicode BMP %E2%98%BA and non-BMP "        \
  "%F0%9F%98%88%0A"

/* VmHWM (peak resident set) of this process in KiB. */
static long peak_kb(void) {
  char line[256];
  FILE *f = fopen("/proc/self/status", "r");
  long kb = -1;

  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kb = strtol(line + 6, NULL, 10);
    }
  }
  fclose(f);
  return kb;
}

/* |head| + "[[],[],...[]]" + |tail|, |n| bytes in all; malloc'd, NUL-
   terminated. */
static char *json_bomb(const char *head, const char *tail, size_t n) {
  size_t hl = strlen(head);
  size_t tl = strlen(tail);
  char *s = malloc(n + 1);
  size_t i;

  assert_non_null(s);
  memcpy(s, head, hl);
  s[hl] = '[';
  /* Room is left for the last "[]]", the tail and its NUL. */
  for (i = hl + 1; i + 6 + tl <= n; i += 3) {
    memcpy(s + i, "[],", 3);
  }
  memcpy(s + i, "[]]", 3);
  memcpy(s + i + 3, tail, tl + 1);
  return s;
}

static int unary(conch_status *st, int http_status, const char *body) {
  conch_status_init(st);
  return conch__connect_unary_error(st, NULL, http_status, 1,
                                    (const uint8_t *)body, strlen(body));
}

static int end_stream(conch_status *st, conch_metadata *md, const char *json) {
  return conch__connect_end_stream((const uint8_t *)json, strlen(json), NULL,
                                   st, md);
}

static void assert_detail(const conch_status *st, size_t i, const char *type,
                          const void *value, size_t len) {
  assert_true(i < st->ndetails);
  assert_string_equal(st->details[i].type_url, type);
  assert_int_equal(st->details[i].len, len);
  if (len > 0) {
    assert_memory_equal(st->details[i].value, value, len);
  }
}

/* Asserts the full HTTP fallback: code from the status, its reason text as
   the message, no details. */
static void assert_http_fallback(const conch_status *st, int http_status,
                                 conch_code code, const char *message) {
  assert_int_equal(st->code, code);
  assert_int_equal(st->origin, CONCH_ORIGIN_HTTP);
  assert_int_equal(st->http_status, http_status);
  assert_int_equal(st->ndetails, 0);
  assert_non_null(st->message);
  assert_string_equal(st->message, message);
}

static void test_strerror(void **state) {
  static const int codes[] = {
      0,
      CONCH_ERR_INVALID,
      CONCH_ERR_NOMEM,
      CONCH_ERR_RPC,
      CONCH_ERR_STATE,
      CONCH_ERR_AGAIN,
      CONCH_ERR_RECURSIVE,
      CONCH_ERR_EOF,
      CONCH_ERR_IO,
      CONCH_ERR_TLS,
      CONCH_ERR_PROTO,
      CONCH_ERR_LIMIT,
      CONCH_ERR_TIMEOUT,
      CONCH_ERR_CANCELED,
      CONCH_ERR_GZIP,
      CONCH_ERR_HEADER,
      CONCH_ERR_URL,
      CONCH_ERR_RESOLVE,
      CONCH_ERR_CONNECT,
      CONCH_ERR_CODEC,
      CONCH_ERR_UNSUPPORTED,
      CONCH_ERR_CAPABILITY,
      CONCH_ERR_FATAL,
      CONCH_ERR_SESSION,
  };
  const char *unknown = conch_strerror(-12345);
  size_t i, j;

  (void)state;
  assert_non_null(unknown);
  assert_non_null(conch_strerror(1));
  assert_string_equal(conch_strerror(1), unknown);
  for (i = 0; i < sizeof(codes) / sizeof(codes[0]); ++i) {
    const char *s = conch_strerror(codes[i]);
    assert_non_null(s);
    assert_true(strlen(s) > 0);
    /* Every code has its own text. */
    assert_string_not_equal(s, unknown);
    for (j = 0; j < i; ++j) {
      assert_string_not_equal(s, conch_strerror(codes[j]));
    }
  }
}

static void test_code_names(void **state) {
  static const char *const names[] = {
      "ok",
      "canceled",
      "unknown",
      "invalid_argument",
      "deadline_exceeded",
      "not_found",
      "already_exists",
      "permission_denied",
      "resource_exhausted",
      "failed_precondition",
      "aborted",
      "out_of_range",
      "unimplemented",
      "internal",
      "unavailable",
      "data_loss",
      "unauthenticated",
  };
  int i;

  (void)state;
  for (i = 0; i <= 16; ++i) {
    assert_string_equal(conch_code_name((conch_code)i), names[i]);
    if (i > 0) {
      assert_int_equal(conch_code_parse(names[i], strlen(names[i])), i);
    }
  }
  assert_null(conch_code_name((conch_code)17));
  assert_null(conch_code_name((conch_code)-1));
  assert_int_equal(conch_code_parse("ok", 2), -1);
  assert_int_equal(conch_code_parse("cancelled", 9), -1);
  assert_int_equal(conch_code_parse("CANCELED", 8), -1);
  assert_int_equal(conch_code_parse("cancel", 6), -1);
  assert_int_equal(conch_code_parse("canceledx", 9), -1);
  /* Only |len| bytes count. */
  assert_int_equal(conch_code_parse("internalxyz", 8), 13);
  assert_int_equal(conch_code_parse("", 0), -1);
  assert_int_equal(conch_code_parse(NULL, 0), -1);
  assert_int_equal(conch_code_parse("foobar", 6), -1);
}

static void test_code_from_http(void **state) {
  static const struct {
    int http;
    conch_code code;
  } cases[] = {
      /* B.9 client_http_to_rpc_code */
      {400, CONCH_CODE_INTERNAL},
      {401, CONCH_CODE_UNAUTHENTICATED},
      {403, CONCH_CODE_PERMISSION_DENIED},
      {404, CONCH_CODE_UNIMPLEMENTED},
      {409, CONCH_CODE_UNKNOWN},
      {412, CONCH_CODE_UNKNOWN},
      {413, CONCH_CODE_UNKNOWN},
      {415, CONCH_CODE_UNKNOWN},
      {429, CONCH_CODE_UNAVAILABLE},
      {431, CONCH_CODE_UNKNOWN},
      {502, CONCH_CODE_UNAVAILABLE},
      {503, CONCH_CODE_UNAVAILABLE},
      {504, CONCH_CODE_UNAVAILABLE},
      {505, CONCH_CODE_UNKNOWN},
      /* B.10 client_unexpected */
      {418, CONCH_CODE_UNKNOWN},
      {800, CONCH_CODE_UNKNOWN},
      /* others */
      {200, CONCH_CODE_UNKNOWN},
      {499, CONCH_CODE_UNKNOWN},
      {500, CONCH_CODE_UNKNOWN},
      {501, CONCH_CODE_UNKNOWN},
      {0, CONCH_CODE_UNKNOWN},
      {-1, CONCH_CODE_UNKNOWN},
  };
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    assert_int_equal(conch__code_from_http(cases[i].http), cases[i].code);
  }
}

/* A bare status with any body type: the Connect unary path must agree with
   the table and say which status it was. */
static void test_unary_bare_http(void **state) {
  static const struct {
    int http;
    conch_code code;
    const char *msg;
  } cases[] = {
      {400, CONCH_CODE_INTERNAL, "HTTP status 400 Bad Request"},
      {401, CONCH_CODE_UNAUTHENTICATED, "HTTP status 401 Unauthorized"},
      {403, CONCH_CODE_PERMISSION_DENIED, "HTTP status 403 Forbidden"},
      {404, CONCH_CODE_UNIMPLEMENTED, "HTTP status 404 Not Found"},
      {409, CONCH_CODE_UNKNOWN, "HTTP status 409 Conflict"},
      {412, CONCH_CODE_UNKNOWN, "HTTP status 412 Precondition Failed"},
      {413, CONCH_CODE_UNKNOWN, "HTTP status 413 Content Too Large"},
      {415, CONCH_CODE_UNKNOWN, "HTTP status 415 Unsupported Media Type"},
      {429, CONCH_CODE_UNAVAILABLE, "HTTP status 429 Too Many Requests"},
      {431, CONCH_CODE_UNKNOWN,
       "HTTP status 431 Request Header Fields Too Large"},
      {502, CONCH_CODE_UNAVAILABLE, "HTTP status 502 Bad Gateway"},
      {503, CONCH_CODE_UNAVAILABLE, "HTTP status 503 Service Unavailable"},
      {504, CONCH_CODE_UNAVAILABLE, "HTTP status 504 Gateway Timeout"},
      {505, CONCH_CODE_UNKNOWN, "HTTP status 505 HTTP Version Not Supported"},
      {418, CONCH_CODE_UNKNOWN, "HTTP status 418 I'm a teapot"},
      {800, CONCH_CODE_UNKNOWN, "HTTP status 800"},
  };
  conch_status st;
  size_t i;
  int rv;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    /* No body, as the suite sends it. */
    conch_status_init(&st);
    rv = conch__connect_unary_error(&st, NULL, cases[i].http, 0, NULL, 0);
    assert_int_equal(rv, 0);
    assert_http_fallback(&st, cases[i].http, cases[i].code, cases[i].msg);
    conch_status_clear(&st);
    /* A JSON content type with an empty body. */
    rv = conch__connect_unary_error(&st, NULL, cases[i].http, 1,
                                    (const uint8_t *)"", 0);
    assert_int_equal(rv, 0);
    assert_http_fallback(&st, cases[i].http, cases[i].code, cases[i].msg);
    conch_status_clear(&st);
    /* A valid error body under a non-JSON content type is ignored
       (403 + application/proto of connect_client_unexpected). */
    rv = conch__connect_unary_error(&st, NULL, cases[i].http, 0,
                                    (const uint8_t *)"{\"code\":\"aborted\"}",
                                    18);
    assert_int_equal(rv, 0);
    assert_http_fallback(&st, cases[i].http, cases[i].code, cases[i].msg);
    conch_status_clear(&st);
  }
}

static void test_code_from_rst(void **state) {
  uint32_t e;

  (void)state;
  assert_int_equal(conch__code_from_rst(0x0, 0), CONCH_CODE_OK);
  assert_int_equal(conch__code_from_rst(0x0, 1), CONCH_CODE_OK);
  assert_int_equal(conch__code_from_rst(0x7, 0), CONCH_CODE_UNAVAILABLE);
  assert_int_equal(conch__code_from_rst(0x8, 0), CONCH_CODE_CANCELED);
  assert_int_equal(conch__code_from_rst(0x8, 1), CONCH_CODE_DEADLINE_EXCEEDED);
  assert_int_equal(conch__code_from_rst(0xb, 0), CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_int_equal(conch__code_from_rst(0xc, 0), CONCH_CODE_PERMISSION_DENIED);
  /* PROTOCOL_ERROR .. SETTINGS_TIMEOUT, STREAM_CLOSED, FRAME_SIZE_ERROR,
     COMPRESSION_ERROR, CONNECT_ERROR, HTTP_1_1_REQUIRED, unknown codes. */
  for (e = 0x1; e <= 0x6; ++e) {
    assert_int_equal(conch__code_from_rst(e, 0), CONCH_CODE_INTERNAL);
    assert_int_equal(conch__code_from_rst(e, 1), CONCH_CODE_INTERNAL);
  }
  assert_int_equal(conch__code_from_rst(0x9, 0), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_rst(0xa, 0), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_rst(0xd, 0), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_rst(0xe, 0), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_rst(0xffffffffu, 1), CONCH_CODE_INTERNAL);
}

static void test_code_from_err(void **state) {
  (void)state;
  assert_int_equal(conch__code_from_err(CONCH_ERR_CONNECT),
                   CONCH_CODE_UNAVAILABLE);
  assert_int_equal(conch__code_from_err(CONCH_ERR_IO), CONCH_CODE_UNAVAILABLE);
  assert_int_equal(conch__code_from_err(CONCH_ERR_TLS), CONCH_CODE_UNAVAILABLE);
  assert_int_equal(conch__code_from_err(CONCH_ERR_RESOLVE),
                   CONCH_CODE_UNAVAILABLE);
  assert_int_equal(conch__code_from_err(CONCH_ERR_TIMEOUT),
                   CONCH_CODE_DEADLINE_EXCEEDED);
  assert_int_equal(conch__code_from_err(CONCH_ERR_CANCELED),
                   CONCH_CODE_CANCELED);
  assert_int_equal(conch__code_from_err(CONCH_ERR_LIMIT),
                   CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_int_equal(conch__code_from_err(CONCH_ERR_PROTO), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_err(CONCH_ERR_GZIP), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_err(CONCH_ERR_CODEC), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_err(CONCH_ERR_NOMEM), CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_err(CONCH_ERR_SESSION),
                   CONCH_CODE_INTERNAL);
  assert_int_equal(conch__code_from_err(-4242), CONCH_CODE_INTERNAL);
}

static void test_status_basics(void **state) {
  conch_status st, cp;
  static const uint8_t v[] = {1, 2, 0, 3};
  int rv;

  (void)state;
  conch_status_init(&st);
  assert_int_equal(st.code, CONCH_CODE_OK);
  assert_int_equal(st.origin, CONCH_ORIGIN_NONE);
  assert_null(st.message);
  assert_string_equal(conch_status_message(&st), "ok");
  assert_string_equal(conch_status_message(NULL), "ok");
  conch_status_clear(NULL);
  conch_status_init(NULL);

  rv = conch__status_set(&st, NULL, CONCH_CODE_UNAVAILABLE, CONCH_ORIGIN_LOCAL,
                         CONCH_ERR_CONNECT, "connect to %s:%d failed",
                         "example.com", 443);
  assert_int_equal(rv, 1);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(st.origin, CONCH_ORIGIN_LOCAL);
  assert_int_equal(st.local_err, CONCH_ERR_CONNECT);
  assert_string_equal(st.message, "connect to example.com:443 failed");
  assert_string_equal(conch_status_message(&st),
                      "connect to example.com:443 failed");

  /* The first error wins. */
  rv = conch__status_set(&st, NULL, CONCH_CODE_INTERNAL, CONCH_ORIGIN_LOCAL,
                         CONCH_ERR_PROTO, "later");
  assert_int_equal(rv, 0);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_string_equal(st.message, "connect to example.com:443 failed");

  /* Details: a bare message name gets the prefix, a URL is kept. */
  rv = conch__status_add_detail(&st, NULL, "foo.Bar", 7, v, sizeof(v));
  assert_int_equal(rv, 0);
  rv = conch__status_add_detail(&st, NULL, "example.com/x.Y", 15, NULL, 0);
  assert_int_equal(rv, 0);
  assert_int_equal(st.ndetails, 2);
  assert_detail(&st, 0, "type.googleapis.com/foo.Bar", v, sizeof(v));
  assert_detail(&st, 1, "example.com/x.Y", NULL, 0);

  conch_status_init(&cp);
  rv = conch_status_copy(&cp, &st, NULL);
  assert_int_equal(rv, 0);
  assert_int_equal(cp.code, st.code);
  assert_int_equal(cp.origin, st.origin);
  assert_int_equal(cp.local_err, st.local_err);
  assert_string_equal(cp.message, st.message);
  assert_int_equal(cp.ndetails, 2);
  assert_detail(&cp, 0, "type.googleapis.com/foo.Bar", v, sizeof(v));
  assert_detail(&cp, 1, "example.com/x.Y", NULL, 0);
  /* Copying onto a status that holds something replaces it. */
  rv = conch_status_copy(&cp, &st, NULL);
  assert_int_equal(rv, 0);
  assert_int_equal(cp.ndetails, 2);
  assert_int_equal(conch_status_copy(&cp, &cp, NULL), 0);
  assert_int_equal(conch_status_copy(NULL, &st, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_status_copy(&cp, NULL, NULL), CONCH_ERR_INVALID);
  conch_status_clear(&cp);
  assert_int_equal(cp.code, CONCH_CODE_OK);
  assert_null(cp.details);

  conch_status_clear(&st);
  assert_int_equal(st.code, CONCH_CODE_OK);
  assert_null(st.message);
  assert_int_equal(st.ndetails, 0);

  /* No message: the code's name stands in. */
  rv = conch__status_set(&st, NULL, CONCH_CODE_DATA_LOSS, CONCH_ORIGIN_LOCAL, 0,
                         NULL);
  assert_int_equal(rv, 1);
  assert_null(st.message);
  assert_string_equal(conch_status_message(&st), "data_loss");
  conch_status_clear(&st);
  st.code = (conch_code)99;
  assert_string_equal(conch_status_message(&st), "unknown");
  conch_status_clear(&st);
}

static void test_status_oom(void **state) {
  static const uint8_t v[] = {9, 8, 7};
  conch_status st, cp;
  size_t n;
  int rv;

  (void)state;
  /* conch__status_set: out of memory still sets the code. */
  conch_status_init(&st);
  failmem_fail_at(0);
  rv = conch__status_set(&st, failmem_hooks(), CONCH_CODE_ABORTED,
                         CONCH_ORIGIN_LOCAL, 0, "%s", "x");
  assert_int_equal(rv, 1);
  assert_true(failmem_fired());
  assert_int_equal(st.code, CONCH_CODE_ABORTED);
  assert_null(st.message);
  assert_string_equal(conch_status_message(&st), "aborted");
  conch_status_clear(&st);
  assert_int_equal(failmem_live_blocks(), 0);

  /* add_detail leaves the status unchanged on failure. */
  for (n = 0;; ++n) {
    conch_status_init(&st);
    failmem_fail_at((size_t)-1);
    conch__status_set(&st, failmem_hooks(), CONCH_CODE_ABORTED,
                      CONCH_ORIGIN_LOCAL, 0, "m");
    rv = conch__status_add_detail(&st, failmem_hooks(), "a.B", 3, v, 3);
    assert_int_equal(rv, 0);
    failmem_fail_at(n);
    rv = conch__status_add_detail(&st, failmem_hooks(), "c.D", 3, v, 2);
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_int_equal(st.ndetails, 2);
      assert_detail(&st, 1, "type.googleapis.com/c.D", v, 2);
      conch_status_clear(&st);
      assert_int_equal(failmem_live_blocks(), 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_int_equal(st.ndetails, 1);
    assert_detail(&st, 0, "type.googleapis.com/a.B", v, 3);
    conch_status_clear(&st);
    assert_int_equal(failmem_live_blocks(), 0);
  }

  /* conch_status_copy: on failure the code and origin are there. */
  conch_status_init(&st);
  conch__status_set(&st, NULL, CONCH_CODE_NOT_FOUND, CONCH_ORIGIN_SERVER, 0,
                    "missing");
  conch__status_add_detail(&st, NULL, "a.B", 3, v, 3);
  conch__status_add_detail(&st, NULL, "c.D", 3, v, 1);
  for (n = 0;; ++n) {
    conch_status_init(&cp);
    failmem_fail_at(n);
    rv = conch_status_copy(&cp, &st, failmem_hooks());
    assert_int_equal(cp.code, CONCH_CODE_NOT_FOUND);
    assert_int_equal(cp.origin, CONCH_ORIGIN_SERVER);
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_string_equal(cp.message, "missing");
      assert_int_equal(cp.ndetails, 2);
      conch_status_clear(&cp);
      assert_int_equal(failmem_live_blocks(), 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_null(cp.message);
    assert_int_equal(cp.ndetails, 0);
    conch_status_clear(&cp);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  conch_status_clear(&st);
}

/* connect_client_error_endstream, unary half. */

static void test_unary_null_body(void **state) {
  conch_status st;

  (void)state;
  assert_int_equal(unary(&st, 429, "null"), 0);
  assert_http_fallback(&st, 429, CONCH_CODE_UNAVAILABLE,
                       "HTTP status 429 Too Many Requests");
  conch_status_clear(&st);
  /* Other non-objects and unparsable bodies. */
  assert_int_equal(unary(&st, 401, "[{\"code\":\"aborted\"}]"), 0);
  assert_http_fallback(&st, 401, CONCH_CODE_UNAUTHENTICATED,
                       "HTTP status 401 Unauthorized");
  conch_status_clear(&st);
  assert_int_equal(unary(&st, 503, "\"aborted\""), 0);
  assert_http_fallback(&st, 503, CONCH_CODE_UNAVAILABLE,
                       "HTTP status 503 Service Unavailable");
  conch_status_clear(&st);
  assert_int_equal(unary(&st, 503, "{\"code\":\"aborted\""), 0);
  assert_http_fallback(&st, 503, CONCH_CODE_UNAVAILABLE,
                       "HTTP status 503 Service Unavailable");
  conch_status_clear(&st);
  assert_int_equal(unary(&st, 503, "{\"code\":\"aborted\"} x"), 0);
  assert_http_fallback(&st, 503, CONCH_CODE_UNAVAILABLE,
                       "HTTP status 503 Service Unavailable");
  conch_status_clear(&st);
  assert_int_equal(unary(&st, 502, "<html>Bad gateway</html>"), 0);
  assert_http_fallback(&st, 502, CONCH_CODE_UNAVAILABLE,
                       "HTTP status 502 Bad Gateway");
  conch_status_clear(&st);
  /* Not UTF-8. */
  assert_int_equal(
      unary(&st, 404, "{\"code\":\"aborted\",\"message\":\"\xff\"}"), 0);
  assert_http_fallback(&st, 404, CONCH_CODE_UNIMPLEMENTED,
                       "HTTP status 404 Not Found");
  conch_status_clear(&st);
}

static void test_unary_code_null_or_missing(void **state) {
  conch_status st;

  (void)state;
  assert_int_equal(
      unary(&st, 429, "{\"code\":null,\"message\":\"no code here\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(st.origin, CONCH_ORIGIN_HTTP);
  assert_int_equal(st.http_status, 429);
  assert_string_equal(st.message, "no code here");
  conch_status_clear(&st);

  /* No code, but details: both message and details survive. */
  assert_int_equal(unary(&st, 401,
                         "{\"message\":\"who are you\",\"details\":"
                         "[{\"type\":\"a.B\",\"value\":\"AQID\"}]}"),
                   0);
  assert_int_equal(st.code, CONCH_CODE_UNAUTHENTICATED);
  assert_int_equal(st.origin, CONCH_ORIGIN_HTTP);
  assert_string_equal(st.message, "who are you");
  assert_int_equal(st.ndetails, 1);
  assert_detail(&st, 0, "type.googleapis.com/a.B", "\x01\x02\x03", 3);
  conch_status_clear(&st);

  /* {} alone: nothing usable, the status text becomes the message. */
  assert_int_equal(unary(&st, 400, "{}"), 0);
  assert_http_fallback(&st, 400, CONCH_CODE_INTERNAL,
                       "HTTP status 400 Bad Request");
  conch_status_clear(&st);

  /* A code of the wrong type counts as absent in a unary body. */
  assert_int_equal(unary(&st, 403, "{\"code\":7,\"message\":\"m\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_PERMISSION_DENIED);
  assert_int_equal(st.origin, CONCH_ORIGIN_HTTP);
  assert_string_equal(st.message, "m");
  conch_status_clear(&st);
  /* "ok" is not a wire code. */
  assert_int_equal(unary(&st, 403, "{\"code\":\"ok\",\"message\":\"m\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_PERMISSION_DENIED);
  assert_int_equal(st.origin, CONCH_ORIGIN_HTTP);
  conch_status_clear(&st);
}

static void test_unary_unknown_code(void **state) {
  conch_status st;

  (void)state;
  assert_int_equal(
      unary(&st, 401, "{\"code\":\"foobar\",\"message\":\"kept\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_UNAUTHENTICATED);
  assert_int_equal(st.origin, CONCH_ORIGIN_HTTP);
  assert_int_equal(st.http_status, 401);
  assert_string_equal(st.message, "kept");
  conch_status_clear(&st);

  assert_int_equal(
      unary(&st, 429, "{\"code\":\"foobar\",\"message\":\"kept\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_UNAVAILABLE);
  assert_int_equal(st.origin, CONCH_ORIGIN_HTTP);
  assert_string_equal(st.message, "kept");
  conch_status_clear(&st);
}

static void test_unary_no_message(void **state) {
  conch_status st;

  (void)state;
  assert_int_equal(unary(&st, 429, "{\"code\":\"resource_exhausted\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
  assert_int_equal(st.http_status, 429);
  assert_null(st.message);
  assert_string_equal(conch_status_message(&st), "resource_exhausted");
  conch_status_clear(&st);

  /* Empty, null and mistyped messages are all "none". */
  assert_int_equal(unary(&st, 500, "{\"code\":\"internal\",\"message\":\"\"}"),
                   0);
  assert_int_equal(st.code, CONCH_CODE_INTERNAL);
  assert_null(st.message);
  conch_status_clear(&st);
  assert_int_equal(unary(&st, 500, "{\"code\":\"internal\",\"message\":null}"),
                   0);
  assert_int_equal(st.code, CONCH_CODE_INTERNAL);
  assert_null(st.message);
  conch_status_clear(&st);
  assert_int_equal(
      unary(&st, 500, "{\"code\":\"internal\",\"message\":[\"x\"]}"), 0);
  assert_int_equal(st.code, CONCH_CODE_INTERNAL);
  assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
  assert_null(st.message);
  conch_status_clear(&st);
}

static void test_unary_unknown_fields_and_debug(void **state) {
  conch_status st;

  (void)state;
  /* Unknown top-level fields; a detail with garbage debug, with an object
     debug, without debug, and with unknown keys: all still decode. */
  assert_int_equal(
      unary(&st, 500,
            "{\"code\":\"failed_precondition\",\"message\":\"fp\","
            "\"extra\":{\"a\":[1,2,{}]},\"number\":12345678901234567890123,"
            "\"details\":["
            "{\"type\":\"conformance.v1.RequestInfo\",\"value\":\"AQI\","
            "\"debug\":\"garbage\"},"
            "{\"type\":\"a.B\",\"value\":\"AQI=\",\"debug\":{\"x\":[null]}},"
            "{\"type\":\"a.C\",\"value\":\"\"},"
            "{\"value\":\"/w\",\"type\":\"a.D\",\"unknown\":true,"
            "\"other\":[1]}],"
            "\"zzz\":null}"),
      0);
  assert_int_equal(st.code, CONCH_CODE_FAILED_PRECONDITION);
  assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
  assert_int_equal(st.http_status, 500);
  assert_string_equal(st.message, "fp");
  assert_int_equal(st.ndetails, 4);
  assert_detail(&st, 0, "type.googleapis.com/conformance.v1.RequestInfo",
                "\x01\x02", 2);
  assert_detail(&st, 1, "type.googleapis.com/a.B", "\x01\x02", 2);
  assert_detail(&st, 2, "type.googleapis.com/a.C", NULL, 0);
  assert_detail(&st, 3, "type.googleapis.com/a.D", "\xff", 1);
  conch_status_clear(&st);

  /* Details null or empty: none. A type URL is kept as given. */
  assert_int_equal(unary(&st, 500, "{\"code\":\"aborted\",\"details\":null}"),
                   0);
  assert_int_equal(st.code, CONCH_CODE_ABORTED);
  assert_int_equal(st.ndetails, 0);
  conch_status_clear(&st);
  assert_int_equal(unary(&st, 500,
                         "{\"code\":\"aborted\",\"details\":[{\"type\":"
                         "\"example.com/p.Q\",\"value\":\"AA==\"}]}"),
                   0);
  assert_int_equal(st.ndetails, 1);
  assert_detail(&st, 0, "example.com/p.Q", "\0", 1);
  conch_status_clear(&st);
}

static void test_unary_malformed_details(void **state) {
  static const char *const bodies[] = {
      /* missing type / value */
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"value\":\"AA\"}]"
      "}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\"}]"
      "}",
      /* wrong types */
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":1,"
      "\"value\":\"AA\"}]}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":null}]}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":[\"AA\"]}]}",
      /* bad base64: bad character, URL alphabet, 1 mod 4, bad padding */
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":\"A*AA\"}]}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":\"-_-_\"}]}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":\"AAAAA\"}]}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":\"A===\"}]}",
      /* one good detail then a bad one */
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[{\"type\":\"a.B\","
      "\"value\":\"AA\"},{\"type\":\"a.B\",\"value\":\"!\"}]}",
      /* details not an array, element not an object */
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":{}}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":\"AA\"}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[null]}",
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":[\"a.B\"]}",
  };
  conch_status st;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); ++i) {
    assert_int_equal(unary(&st, 503, bodies[i]), 0);
    assert_http_fallback(&st, 503, CONCH_CODE_UNAVAILABLE,
                         "HTTP status 503 Service Unavailable");
    conch_status_clear(&st);
  }
}

static void test_unary_body_code_wins(void **state) {
  conch_status st;

  (void)state;
  assert_int_equal(
      unary(&st, 422,
            "{\"code\":\"out_of_range\",\"message\":\"too far\","
            "\"details\":[{\"type\":\"a.B\",\"value\":\"AQID\"}]}"),
      0);
  assert_int_equal(st.code, CONCH_CODE_OUT_OF_RANGE);
  assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
  assert_int_equal(st.http_status, 422);
  assert_string_equal(st.message, "too far");
  assert_int_equal(st.ndetails, 1);
  conch_status_clear(&st);

  /* Even against a status that maps to something else. */
  assert_int_equal(unary(&st, 503, "{\"code\":\"not_found\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
  conch_status_clear(&st);

  /* Duplicate keys: the last one wins. */
  assert_int_equal(
      unary(&st, 500, "{\"code\":\"aborted\",\"code\":\"data_loss\"}"), 0);
  assert_int_equal(st.code, CONCH_CODE_DATA_LOSS);
  conch_status_clear(&st);

  /* All sixteen codes. */
  for (int c = 1; c <= 16; ++c) {
    char body[128];
    snprintf(body, sizeof(body), "{\"code\":\"%s\",\"message\":\"m%d\"}",
             conch_code_name((conch_code)c), c);
    assert_int_equal(unary(&st, 500, body), 0);
    assert_int_equal(st.code, c);
    assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
    conch_status_clear(&st);
  }
}

static void test_unary_unicode(void **state) {
  conch_status st;

  (void)state;
  assert_int_equal(
      unary(&st, 500, "{\"code\":\"internal\",\"message\":" UNICODE_JSON "}"),
      0);
  assert_int_equal(st.code, CONCH_CODE_INTERNAL);
  assert_string_equal(st.message, UNICODE_MSG);
  conch_status_clear(&st);
  /* Raw UTF-8 in the JSON works too. */
  assert_int_equal(unary(&st, 500,
                         "{\"code\":\"internal\",\"message\":\"\xe2\x98\xba "
                         "\xf0\x9f\x98\x88\"}"),
                   0);
  assert_string_equal(st.message, "\xe2\x98\xba \xf0\x9f\x98\x88");
  conch_status_clear(&st);
  /* A lone surrogate is not valid JSON text: fallback. */
  assert_int_equal(
      unary(&st, 500, "{\"code\":\"internal\",\"message\":\"\\ud83d\"}"), 0);
  assert_http_fallback(&st, 500, CONCH_CODE_UNKNOWN,
                       "HTTP status 500 Internal Server Error");
  conch_status_clear(&st);
}

static void test_unary_first_error_wins(void **state) {
  conch_status st;
  int rv;

  (void)state;
  conch_status_init(&st);
  conch__status_set(&st, NULL, CONCH_CODE_CANCELED, CONCH_ORIGIN_LOCAL,
                    CONCH_ERR_CANCELED, "canceled by user");
  rv = conch__connect_unary_error(
      &st, NULL, 500, 1, (const uint8_t *)"{\"code\":\"internal\"}", 20);
  assert_int_equal(rv, 0);
  assert_int_equal(st.code, CONCH_CODE_CANCELED);
  assert_string_equal(st.message, "canceled by user");
  conch_status_clear(&st);
}

/* connect_client_error_endstream, end-stream half. */

static void test_end_stream_success(void **state) {
  static const char *const ok[] = {
      "{}",
      "{\"error\":null}",
      " { \"error\" : null , \"metadata\" : null } ",
      /* A stray top-level code is not an error (connect_client_unexpected). */
      "{\"code\":\"internal\",\"message\":\"x\"}",
      "{\"unknown\":[1,2,3],\"metadata\":{}}",
  };
  conch_metadata md;
  conch_status st;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(ok) / sizeof(ok[0]); ++i) {
    conch_status_init(&st);
    conch__metadata_init(&md, NULL);
    assert_int_equal(end_stream(&st, &md, ok[i]), 0);
    assert_int_equal(st.code, CONCH_CODE_OK);
    assert_int_equal(st.origin, CONCH_ORIGIN_NONE);
    assert_null(st.message);
    assert_int_equal(conch_metadata_count(&md), 0);
    conch__metadata_clear(&md);
  }
  /* Trailers are optional. */
  assert_int_equal(end_stream(&st, NULL, "{\"metadata\":{\"a\":[\"b\"]}}"), 0);
}

static void test_end_stream_error(void **state) {
  conch_metadata md;
  conch_status st;

  (void)state;
  conch_status_init(&st);
  conch__metadata_init(&md, NULL);
  assert_int_equal(
      end_stream(&st, &md,
                 "{\"error\":{\"code\":\"resource_exhausted\",\"message\":"
                 "\"slow down\",\"details\":[{\"type\":\"a.B\",\"value\":"
                 "\"AQID\",\"debug\":{\"k\":1}},{\"type\":\"x.io/c.D\","
                 "\"value\":\"\",\"extra\":1}],\"extra\":[]},"
                 "\"metadata\":{\"x-custom-trailer\":[\"v1\",\"v2\"]},"
                 "\"unknown\":{}}"),
      0);
  assert_int_equal(st.code, CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
  assert_int_equal(st.http_status, 0);
  assert_string_equal(st.message, "slow down");
  assert_int_equal(st.ndetails, 2);
  assert_detail(&st, 0, "type.googleapis.com/a.B", "\x01\x02\x03", 3);
  assert_detail(&st, 1, "x.io/c.D", NULL, 0);
  assert_int_equal(conch_metadata_count(&md), 2);
  conch_status_clear(&st);
  conch__metadata_clear(&md);

  /* Unicode message through JSON escapes. */
  assert_int_equal(
      end_stream(&st, NULL,
                 "{\"error\":{\"code\":\"aborted\",\"message\":" UNICODE_JSON
                 "}}"),
      0);
  assert_int_equal(st.code, CONCH_CODE_ABORTED);
  assert_string_equal(st.message, UNICODE_MSG);
  conch_status_clear(&st);
}

static void test_end_stream_unknown_code(void **state) {
  static const char *const cases[] = {
      "{\"error\":{\"code\":null,\"message\":\"m\"}}",
      "{\"error\":{\"message\":\"m\"}}",
      "{\"error\":{\"code\":\"foobar\",\"message\":\"m\"}}",
      "{\"error\":{\"code\":\"ok\",\"message\":\"m\"}}",
  };
  conch_status st;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    conch_status_init(&st);
    assert_int_equal(end_stream(&st, NULL, cases[i]), 0);
    assert_int_equal(st.code, CONCH_CODE_UNKNOWN);
    assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
    assert_string_equal(st.message, "m");
    conch_status_clear(&st);
  }
  /* {"error": {}}: unknown with no message. */
  assert_int_equal(end_stream(&st, NULL, "{\"error\":{}}"), 0);
  assert_int_equal(st.code, CONCH_CODE_UNKNOWN);
  assert_null(st.message);
  assert_string_equal(conch_status_message(&st), "unknown");
  conch_status_clear(&st);
}

static void test_end_stream_metadata(void **state) {
  conch_metadata md;
  conch_status st;
  const char *name;
  const uint8_t *value;
  size_t len;

  (void)state;
  conch_status_init(&st);
  conch__metadata_init(&md, NULL);
  assert_int_equal(end_stream(&st, &md,
                              "{\"metadata\":{\"X-Custom\":[\"a\",\"b, c\"],"
                              "\"x-bin\":[\"AQID\",\"AAEC,AwQ=\"],"
                              "\"y-bin\":[\"not base64!\"],"
                              "\"empty\":[]}}"),
                   0);
  assert_int_equal(st.code, CONCH_CODE_OK);
  assert_int_equal(conch_metadata_count(&md), 6);
  assert_int_equal(conch_metadata_at(&md, 0, &name, &value, &len), 0);
  assert_string_equal(name, "x-custom");
  assert_string_equal((const char *)value, "a");
  assert_int_equal(conch_metadata_at(&md, 1, &name, &value, &len), 0);
  assert_string_equal(name, "x-custom");
  assert_string_equal((const char *)value, "b, c");
  assert_int_equal(conch_metadata_at(&md, 2, &name, &value, &len), 0);
  assert_string_equal(name, "x-bin");
  assert_int_equal(len, 3);
  assert_memory_equal(value, "\x01\x02\x03", 3);
  assert_int_equal(conch_metadata_at(&md, 3, &name, &value, &len), 0);
  assert_int_equal(len, 3);
  assert_memory_equal(value, "\x00\x01\x02", 3);
  assert_int_equal(conch_metadata_at(&md, 4, &name, &value, &len), 0);
  assert_int_equal(len, 2);
  assert_memory_equal(value, "\x03\x04", 2);
  assert_int_equal(conch_metadata_at(&md, 5, &name, &value, &len), 0);
  assert_string_equal(name, "y-bin");
  assert_string_equal((const char *)value, "not base64!");
  conch__metadata_clear(&md);
}

static void test_end_stream_proto_errors(void **state) {
  static const char *const bad[] = {
      /* not an object */
      "",
      "null",
      "[]",
      "\"error\"",
      "42",
      "{",
      "{} {}",
      "{\"error\":null",
      /* error not an object */
      "{\"error\":\"internal\"}",
      "{\"error\":[]}",
      "{\"error\":1}",
      /* mistyped members of the error */
      "{\"error\":{\"code\":13}}",
      "{\"error\":{\"code\":\"internal\",\"message\":1}}",
      "{\"error\":{\"code\":\"internal\",\"details\":{}}}",
      "{\"error\":{\"code\":\"internal\",\"details\":[{\"type\":\"a\"}]}}",
      ("{\"error\":{\"code\":\"internal\",\"details\":[{\"type\":\"a\","
       "\"value\":\"!!\"}]}}"),
      /* mistyped metadata */
      "{\"metadata\":[]}",
      "{\"metadata\":\"a\"}",
      "{\"metadata\":{\"a\":\"b\"}}",
      "{\"metadata\":{\"a\":null}}",
      "{\"metadata\":{\"a\":[\"b\",1]}}",
      "{\"metadata\":{\"a\":[[\"b\"]]}}",
      "{\"metadata\":{\"a\":[\"b\"],\"c\":{}}}",
      "{\"error\":{\"code\":\"internal\"},\"metadata\":{\"a\":[null]}}",
  };
  conch_metadata md;
  conch_status st;
  size_t i;

  (void)state;
  conch__metadata_init(&md, NULL);
  assert_int_equal(conch_metadata_add_str(&md, "keep", "me"), 0);
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    conch_status_init(&st);
    assert_int_equal(end_stream(&st, &md, bad[i]), CONCH_ERR_PROTO);
    /* A failed call changes nothing. */
    assert_int_equal(st.code, CONCH_CODE_OK);
    assert_null(st.message);
    assert_int_equal(conch_metadata_count(&md), 1);
  }
  /* A NUL byte inside the block. */
  assert_int_equal(
      conch__connect_end_stream((const uint8_t *)"{}\0", 3, NULL, &st, &md),
      CONCH_ERR_PROTO);
  conch__metadata_clear(&md);
}

static void test_end_stream_first_error_wins(void **state) {
  conch_metadata md;
  conch_status st;

  (void)state;
  conch_status_init(&st);
  conch__metadata_init(&md, NULL);
  conch__status_set(&st, NULL, CONCH_CODE_DEADLINE_EXCEEDED, CONCH_ORIGIN_LOCAL,
                    CONCH_ERR_TIMEOUT, "late");
  assert_int_equal(end_stream(&st, &md,
                              "{\"error\":{\"code\":\"internal\"},"
                              "\"metadata\":{\"a\":[\"b\"]}}"),
                   0);
  assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_string_equal(st.message, "late");
  /* The trailers still arrive. */
  assert_int_equal(conch_metadata_count(&md), 1);
  conch_status_clear(&st);
  conch__metadata_clear(&md);
}

static void test_grpc_message(void **state) {
  static const struct {
    const char *in, *out;
  } dec[] = {
      {"", ""},
      {"plain text", "plain text"},
      {"%41%62", "Ab"},
      {"%e2%98%ba", "\xe2\x98\xba"},
      {"100%", "100%"},
      {"%", "%"},
      {"%4", "%4"},
      {"%4g", "%4g"},
      {"%zz%41", "%zzA"},
      {"%%41", "%A"},
      {"a%2", "a%2"},
      {"%25", "%"},
      {UNICODE_PCT, UNICODE_MSG},
  };
  char *s, *t;
  size_t i;
  int rv;

  (void)state;
  for (i = 0; i < sizeof(dec) / sizeof(dec[0]); ++i) {
    rv = conch__grpc_message_decode(dec[i].in, strlen(dec[i].in), NULL, &s);
    assert_int_equal(rv, 0);
    assert_string_equal(s, dec[i].out);
    conch__free(conch_mem_default(), s);
  }
  /* Encoding: controls, non-ASCII and '%' escaped, uppercase. */
  rv = conch__grpc_message_encode(UNICODE_MSG, strlen(UNICODE_MSG), NULL, &s);
  assert_int_equal(rv, 0);
  assert_string_equal(s, UNICODE_PCT);
  rv = conch__grpc_message_decode(s, strlen(s), NULL, &t);
  assert_int_equal(rv, 0);
  assert_string_equal(t, UNICODE_MSG);
  conch__free(conch_mem_default(), s);
  conch__free(conch_mem_default(), t);

  rv = conch__grpc_message_encode("50% off ~\x7f", 10, NULL, &s);
  assert_int_equal(rv, 0);
  assert_string_equal(s, "50%25 off ~%7F");
  conch__free(conch_mem_default(), s);
  rv = conch__grpc_message_encode("", 0, NULL, &s);
  assert_int_equal(rv, 0);
  assert_string_equal(s, "");
  conch__free(conch_mem_default(), s);

  /* Every byte value survives a round trip. */
  {
    char all[256];
    for (i = 0; i < 256; ++i) {
      all[i] = (char)(i + 1 == 256 ? 0x7f : i + 1);
    }
    rv = conch__grpc_message_encode(all, 255, NULL, &s);
    assert_int_equal(rv, 0);
    rv = conch__grpc_message_decode(s, strlen(s), NULL, &t);
    assert_int_equal(rv, 0);
    assert_int_equal(strlen(t), 255);
    assert_memory_equal(t, all, 255);
    conch__free(conch_mem_default(), s);
    conch__free(conch_mem_default(), t);
  }

  failmem_fail_at(0);
  assert_int_equal(conch__grpc_message_decode("abc", 3, failmem_hooks(), &s),
                   CONCH_ERR_NOMEM);
  failmem_fail_at(0);
  assert_int_equal(conch__grpc_message_encode("abc", 3, failmem_hooks(), &s),
                   CONCH_ERR_NOMEM);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_grpc_status_parse(void **state) {
  static const struct {
    const char *v;
    int code;
  } cases[] = {
      {"0", 0},   {"1", 1},   {"9", 9},    {"10", 10},  {"16", 16},
      {"17", -1}, {"99", -1}, {"100", -1}, {"00", -1},  {"01", -1},
      {"-1", -1}, {"+1", -1}, {" 1", -1},  {"1 ", -1},  {"", -1},
      {"a", -1},  {"1a", -1}, {"0x1", -1}, {"016", -1},
  };
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    assert_int_equal(conch__grpc_status_parse(cases[i].v, strlen(cases[i].v)),
                     cases[i].code);
  }
  /* Only |len| bytes count. */
  assert_int_equal(conch__grpc_status_parse("123", 1), 1);
  assert_int_equal(conch__grpc_status_parse(NULL, 0), -1);
}

/* Hand-built protobuf for grpc-status-details-bin. */
typedef struct pb {
  uint8_t b[512];
  size_t n;
} pb;

static void pb_raw(pb *p, const void *data, size_t n) {
  assert_true(p->n + n <= sizeof(p->b));
  memcpy(p->b + p->n, data, n);
  p->n += n;
}

static void pb_varint(pb *p, uint64_t v) {
  uint8_t c;
  do {
    c = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v != 0) {
      c |= 0x80;
    }
    pb_raw(p, &c, 1);
  } while (v != 0);
}

static void pb_len(pb *p, uint32_t field, const void *data, size_t n) {
  pb_varint(p, (uint64_t)field << 3 | 2);
  pb_varint(p, n);
  pb_raw(p, data, n);
}

/* Standard base64 of |p|, padded or not. */
static char *pb_b64(const pb *p, int padded, size_t *len) {
  static char out[1024];
  size_t n = conch__b64_encode(p->b, p->n, CONCH_B64_STD, out);
  while (padded && n % 4 != 0) {
    out[n++] = '=';
  }
  out[n] = '\0';
  *len = n;
  return out;
}

static int details_bin(conch_status *st, const pb *p, int padded) {
  size_t len;
  char *b64 = pb_b64(p, padded, &len);
  return conch__grpc_status_details(b64, len, NULL, st);
}

/* Status{code 5, message "gone", details [Any{RequestInfo, 01 02},
   Any{x.io/c.D, ""}]}, with unknown fields of every wire type. */
static void build_status(pb *s, int unknowns) {
  pb any1 = {{0}, 0}, any2 = {{0}, 0};
  static const char t1[] = "type.googleapis.com/conformance.v1.RequestInfo";

  pb_len(&any1, 1, t1, sizeof(t1) - 1);
  if (unknowns) {
    pb_varint(&any1, 3 << 3 | 0); /* varint */
    pb_varint(&any1, 300);
    pb_varint(&any1, 4 << 3 | 1); /* fixed64 */
    pb_raw(&any1, "12345678", 8);
  }
  pb_len(&any1, 2, "\x01\x02", 2);
  pb_len(&any2, 1, "x.io/c.D", 8);

  s->n = 0;
  if (unknowns) {
    pb_varint(s, 9 << 3 | 5); /* fixed32 */
    pb_raw(s, "1234", 4);
    pb_len(s, 1000, "ignored", 7);
  }
  pb_varint(s, 1 << 3 | 0);
  pb_varint(s, 5);
  pb_len(s, 2, "gone", 4);
  pb_len(s, 3, any1.b, any1.n);
  if (unknowns) {
    pb_varint(s, 536870911ull << 3 | 0); /* the largest field number */
    pb_varint(s, UINT64_MAX);
  }
  pb_len(s, 3, any2.b, any2.n);
}

static void test_grpc_status_details(void **state) {
  conch_status st;
  pb s;
  int padded, unknowns;

  (void)state;
  for (unknowns = 0; unknowns <= 1; ++unknowns) {
    for (padded = 0; padded <= 1; ++padded) {
      build_status(&s, unknowns);
      conch_status_init(&st);
      /* What the status held is replaced. */
      conch__status_set(&st, NULL, CONCH_CODE_INTERNAL, CONCH_ORIGIN_SERVER, 0,
                        "from grpc-message");
      conch__status_add_detail(&st, NULL, "old.Detail", 10, NULL, 0);
      assert_int_equal(details_bin(&st, &s, padded), 0);
      assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
      assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
      assert_string_equal(st.message, "gone");
      assert_int_equal(st.ndetails, 2);
      assert_detail(&st, 0, "type.googleapis.com/conformance.v1.RequestInfo",
                    "\x01\x02", 2);
      assert_detail(&st, 1, "x.io/c.D", NULL, 0);
      conch_status_clear(&st);
    }
  }

  /* The unicode message survives the protobuf path. */
  s.n = 0;
  pb_varint(&s, 1 << 3);
  pb_varint(&s, 13);
  pb_len(&s, 2, UNICODE_MSG, strlen(UNICODE_MSG));
  conch_status_init(&st);
  assert_int_equal(details_bin(&st, &s, 0), 0);
  assert_int_equal(st.code, CONCH_CODE_INTERNAL);
  assert_string_equal(st.message, UNICODE_MSG);
  conch_status_clear(&st);

  /* Empty input: an empty Status, code 0. */
  conch_status_init(&st);
  assert_int_equal(conch__grpc_status_details("", 0, NULL, &st), 0);
  assert_int_equal(st.code, CONCH_CODE_OK);
  assert_int_equal(st.origin, CONCH_ORIGIN_NONE);
  assert_null(st.message);

  /* Codes outside 0..16 (17, 2^32 + 3, -1 sign-extended) are unknown. */
  s.n = 0;
  pb_varint(&s, 1 << 3);
  pb_varint(&s, 17);
  assert_int_equal(details_bin(&st, &s, 0), 0);
  assert_int_equal(st.code, CONCH_CODE_UNKNOWN);
  s.n = 0;
  pb_varint(&s, 1 << 3);
  pb_varint(&s, (1ull << 32) + 3);
  assert_int_equal(details_bin(&st, &s, 0), 0);
  assert_int_equal(st.code, CONCH_CODE_INVALID_ARGUMENT);
  s.n = 0;
  pb_varint(&s, 1 << 3);
  pb_varint(&s, UINT64_MAX);
  assert_int_equal(details_bin(&st, &s, 0), 0);
  assert_int_equal(st.code, CONCH_CODE_UNKNOWN);
  /* A repeated scalar: the last value wins; non-minimal varints are
     valid. */
  s.n = 0;
  pb_varint(&s, 1 << 3);
  pb_varint(&s, 4);
  pb_raw(&s, "\x08\x86\x80\x80\x00", 5);
  assert_int_equal(details_bin(&st, &s, 0), 0);
  assert_int_equal(st.code, CONCH_CODE_ALREADY_EXISTS);
  conch_status_clear(&st);
}

static void test_grpc_status_details_malformed(void **state) {
  static const struct {
    const char *bytes;
    size_t n;
  } bad[] = {
      {"\x08", 1},                     /* truncated varint value */
      {"\x08\x80", 2},                 /* truncated varint */
      {"\x12\x05gone", 6},             /* length past the end */
      {"\x12\xff\xff\xff\xff\x0f", 6}, /* huge length */
      /* an 11-byte varint */
      {"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12},
      /* a 10-byte varint of more than 64 bits */
      {"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 11},
      {"\x0b\x0c", 2},                 /* group (wire type 3/4) */
      {"\x0c", 1},                     /* end group */
      {"\x2b\x2c", 2},                 /* unknown field as a group */
      {"\x2e", 1},                     /* unknown field, wire type 6 */
      {"\x0e", 1},                     /* wire type 6 */
      {"\x0f", 1},                     /* wire type 7 */
      {"\x00\x00", 2},                 /* field 0 */
      {"\x0a\x01x", 3},                /* code with wire type 2 */
      {"\x10\x01", 2},                 /* message with wire type 0 */
      {"\x18\x01", 2},                 /* details with wire type 0 */
      {"!1234567", 8},                 /* 0x21: field 4 fixed64, truncated */
      {"%123", 4},                     /* 0x25: field 4 fixed32, truncated */
      {"\x1a\x02\x0a\x05", 4},         /* Any type_url past its end */
      {"\x1a\x02\x08\x01", 4},         /* Any type_url with wire type 0 */
      {"\x1a\x02\x1b\x01", 4},         /* Any: unknown group inside */
      {"\x1a\x01\x12", 3},             /* Any: truncated value */
      {"\x1a\x01\x80", 3},             /* Any: truncated key */
      {"\x12", 1},                     /* truncated length */
      {"\x80\x80\x80\x80\x80\x01", 6}, /* key above 32 bits */
      {"\x1a\x05\x0a\x03\x61\0b", 7},  /* NUL inside a type URL */
  };
  conch_status st;
  pb s;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    s.n = 0;
    pb_raw(&s, bad[i].bytes, bad[i].n);
    conch_status_init(&st);
    conch__status_set(&st, NULL, CONCH_CODE_ABORTED, CONCH_ORIGIN_SERVER, 0,
                      "kept");
    if (details_bin(&st, &s, (int)(i % 2)) != CONCH_ERR_PROTO) {
      fail_msg("case %zu accepted", i);
    }
    /* A failed call changes nothing. */
    assert_int_equal(st.code, CONCH_CODE_ABORTED);
    assert_string_equal(st.message, "kept");
    assert_int_equal(st.ndetails, 0);
    conch_status_clear(&st);
  }
  /* Bad base64. */
  conch_status_init(&st);
  assert_int_equal(conch__grpc_status_details("CAU*", 4, NULL, &st),
                   CONCH_ERR_PROTO);
  assert_int_equal(conch__grpc_status_details("CAUx_", 5, NULL, &st),
                   CONCH_ERR_PROTO);
  assert_int_equal(conch__grpc_status_details("CAU=x", 5, NULL, &st),
                   CONCH_ERR_PROTO);
  assert_int_equal(st.code, CONCH_CODE_OK);
}

/* Runs |fn| with allocation n failing for n = 0, 1, ... and checks that
   each run returns NOMEM (or succeeds past the last allocation) and frees
   everything. */
typedef int (*oom_fn)(conch_status *st, conch_metadata *md);

static void oom_loop(oom_fn fn, int expect) {
  conch_metadata md;
  conch_status st;
  size_t n;
  int rv;

  for (n = 0;; ++n) {
    conch_status_init(&st);
    conch__metadata_init(&md, failmem_hooks());
    failmem_fail_at(n);
    rv = fn(&st, &md);
    if (!failmem_fired()) {
      assert_int_equal(rv, expect);
      conch_status_clear(&st);
      conch__metadata_clear(&md);
      assert_int_equal(failmem_live_blocks(), 0);
      assert_true(n > 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    conch_status_clear(&st);
    conch__metadata_clear(&md);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  failmem_fail_at((size_t)-1);
}

/* Long enough to make the trailer string buffer grow more than once. */
#define FILLER10 "0123456789"
#define FILLER100                                                              \
  FILLER10 FILLER10 FILLER10 FILLER10 FILLER10 FILLER10 FILLER10 FILLER10      \
      FILLER10 FILLER10
#define OOM_BODY_FILLER FILLER100 FILLER100 FILLER100 FILLER100

static const char OOM_BODY[] =
    "{\"code\":\"out_of_range\",\"message\":\"m\",\"details\":["
    "{\"type\":\"a.B\",\"value\":\"AQID\"},{\"type\":\"c.D\",\"value\":\"\"}]}";

static int oom_unary(conch_status *st, conch_metadata *md) {
  int rv;

  (void)md;
  rv = conch__connect_unary_error(st, failmem_hooks(), 422, 1,
                                  (const uint8_t *)OOM_BODY,
                                  sizeof(OOM_BODY) - 1);
  /* Even out of memory, a code is set. */
  assert_int_not_equal(st->code, CONCH_CODE_OK);
  if (rv == 0) {
    assert_int_equal(st->code, CONCH_CODE_OUT_OF_RANGE);
    assert_int_equal(st->ndetails, 2);
  }
  return rv;
}

static int oom_unary_nocode(conch_status *st, conch_metadata *md) {
  static const char body[] =
      "{\"details\":[{\"type\":\"a.B\",\"value\":\"\"}]}";
  int rv;

  (void)md;
  rv = conch__connect_unary_error(st, failmem_hooks(), 503, 1,
                                  (const uint8_t *)body, sizeof(body) - 1);
  assert_int_equal(st->code, CONCH_CODE_UNAVAILABLE);
  if (rv == 0) {
    assert_string_equal(st->message, "HTTP status 503 Service Unavailable");
    assert_int_equal(st->ndetails, 1);
  }
  return rv;
}

static int oom_unary_bad(conch_status *st, conch_metadata *md) {
  static const char body[] =
      "{\"code\":\"aborted\",\"message\":\"m\",\"details\":["
      "{\"type\":\"a.B\",\"value\":\"AQID\"},{\"type\":\"c.D\"}]}";

  (void)md;
  return conch__connect_unary_error(st, failmem_hooks(), 404, 1,
                                    (const uint8_t *)body, sizeof(body) - 1);
}

static int oom_end_stream(conch_status *st, conch_metadata *md) {
  static const char json[] =
      "{\"error\":{\"code\":\"aborted\",\"message\":\"m\",\"details\":["
      "{\"type\":\"a.B\",\"value\":\"AQID\"}]},"
      "\"metadata\":{\"a\":[\"1\",\"2\"],\"b-bin\":[\"AQID,AAEC\"],"
      "\"c\":[\"" OOM_BODY_FILLER "\"]}}";
  int rv;

  rv = conch__connect_end_stream((const uint8_t *)json, sizeof(json) - 1,
                                 failmem_hooks(), st, md);
  if (rv != 0) {
    /* Nothing changed. */
    assert_int_equal(st->code, CONCH_CODE_OK);
    assert_int_equal(conch_metadata_count(md), 0);
  } else {
    assert_int_equal(st->code, CONCH_CODE_ABORTED);
    assert_int_equal(conch_metadata_count(md), 5);
  }
  return rv;
}

static int oom_details_bin(conch_status *st, conch_metadata *md) {
  pb s;
  size_t len;
  char *b64;
  int rv;

  (void)md;
  build_status(&s, 1);
  b64 = pb_b64(&s, 1, &len);
  rv = conch__grpc_status_details(b64, len, failmem_hooks(), st);
  if (rv == 0) {
    assert_int_equal(st->ndetails, 2);
  } else {
    assert_int_equal(st->code, CONCH_CODE_OK);
  }
  return rv;
}

static void test_oom(void **state) {
  (void)state;
  oom_loop(oom_unary, 0);
  oom_loop(oom_unary_nocode, 0);
  oom_loop(oom_unary_bad, 0);
  oom_loop(oom_end_stream, 0);
  oom_loop(oom_details_bin, 0);
}

/* A 4 MiB error body of empty arrays (what a server, or whoever holds the
   port, may send): it is read without a parse tree (runtime/base/json.c; a tree
   would cost ~50 times the text), so memory stays flat, and its details
   are no objects, so it counts as no usable body. */
static void test_json_bombs(void **state) {
  char *body = json_bomb("{\"code\":\"internal\",\"details\":", "}", 4u << 20);
  char *end = json_bomb("{\"error\":{\"code\":\"internal\",\"details\":", "}}",
                        4u << 20);
  conch_status st;
  conch_metadata md;
  long before;
  long after;

  (void)state;
  before = peak_kb();
  assert_int_equal(unary(&st, 503, body), 0);
  assert_http_fallback(&st, 503, CONCH_CODE_UNAVAILABLE,
                       "HTTP status 503 Service Unavailable");
  conch_status_clear(&st);
  conch_status_init(&st);
  conch__metadata_init(&md, NULL);
  assert_int_equal(end_stream(&st, &md, end), CONCH_ERR_PROTO);
  conch_status_clear(&st);
  conch__metadata_clear(&md);
  after = peak_kb();
  print_message("4 MiB JSON bombs: peak RSS %ld -> %ld KiB\n", before, after);
  assert_true(after - before < 64 * 1024);
  free(body);
  free(end);
}

/* conch_status_setf(): the public builder replaces what the status held,
   formats its message and refuses codes out of range. */
static void test_status_setf(void **state) {
  conch_status st;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(conch__status_set(&st, NULL, CONCH_CODE_INTERNAL,
                                     CONCH_ORIGIN_SERVER, 0, "old"),
                   1);
  st.http_status = 500;
  assert_int_equal(conch_status_setf(&st, NULL, CONCH_CODE_NOT_FOUND,
                                     "no %s at %d", "file", 7),
                   0);
  assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
  assert_int_equal(st.origin, CONCH_ORIGIN_LOCAL);
  assert_int_equal(st.http_status, 0);
  assert_string_equal(conch_status_message(&st), "no file at 7");
  assert_int_equal(conch_status_setf(&st, NULL, (conch_code)17, "x"),
                   CONCH_ERR_INVALID);
  assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
  assert_int_equal(conch_status_setf(NULL, NULL, CONCH_CODE_OK, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_status_setf(&st, NULL, CONCH_CODE_ABORTED, NULL), 0);
  assert_null(st.message);
  assert_string_equal(conch_status_message(&st), "aborted");
  conch_status_clear(&st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strerror),
      cmocka_unit_test(test_code_names),
      cmocka_unit_test(test_code_from_http),
      cmocka_unit_test(test_unary_bare_http),
      cmocka_unit_test(test_code_from_rst),
      cmocka_unit_test(test_code_from_err),
      cmocka_unit_test(test_status_basics),
      cmocka_unit_test(test_status_oom),
      cmocka_unit_test(test_unary_null_body),
      cmocka_unit_test(test_unary_code_null_or_missing),
      cmocka_unit_test(test_unary_unknown_code),
      cmocka_unit_test(test_unary_no_message),
      cmocka_unit_test(test_unary_unknown_fields_and_debug),
      cmocka_unit_test(test_unary_malformed_details),
      cmocka_unit_test(test_unary_body_code_wins),
      cmocka_unit_test(test_unary_unicode),
      cmocka_unit_test(test_unary_first_error_wins),
      cmocka_unit_test(test_end_stream_success),
      cmocka_unit_test(test_end_stream_error),
      cmocka_unit_test(test_end_stream_unknown_code),
      cmocka_unit_test(test_end_stream_metadata),
      cmocka_unit_test(test_end_stream_proto_errors),
      cmocka_unit_test(test_end_stream_first_error_wins),
      cmocka_unit_test(test_grpc_message),
      cmocka_unit_test(test_grpc_status_parse),
      cmocka_unit_test(test_grpc_status_details),
      cmocka_unit_test(test_grpc_status_details_malformed),
      cmocka_unit_test(test_oom),
      cmocka_unit_test(test_json_bombs),
      cmocka_unit_test(test_status_setf),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
