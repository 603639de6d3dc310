/* The shared wire layer (runtime/http/wire.c): timeouts both ways, content
   types, the Connect error and end-stream JSON writers read back with
   status.c's readers, reason phrases, hop-by-hop fields, chunks and
   nghttp2 session setup (with a failing allocator). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "failmem.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "status_int.h"
#include "wire.h"

/* ---- Timeouts ------------------------------------------------------------ */

static int connect_parse(const char *v, int64_t *ms) {
  return conch__connect_timeout_parse(v, strlen(v), ms);
}

static int grpc_parse(const char *v, int64_t *ms) {
  return conch__grpc_timeout_parse(v, strlen(v), ms);
}

static void test_connect_timeout_parse(void **state) {
  static const struct {
    const char *v;
    int rv;
    int64_t ms;
  } cases[] = {
      {"0", 0, 0},
      {"1", 0, 1},
      {"0000000001", 0, 1},
      {"1500", 0, 1500},
      {"9999999999", 0, 9999999999LL},
      {"", CONCH_TIMEOUT_SYNTAX, 0},
      {"10000000000", CONCH_TIMEOUT_TOO_LONG, 0},
      {"abcdefghijk", CONCH_TIMEOUT_TOO_LONG, 0}, /* length is checked first */
      {"-1", CONCH_TIMEOUT_SYNTAX, 0},
      {"+1", CONCH_TIMEOUT_SYNTAX, 0},
      {" 1", CONCH_TIMEOUT_SYNTAX, 0},
      {"1 ", CONCH_TIMEOUT_SYNTAX, 0},
      {"1m", CONCH_TIMEOUT_SYNTAX, 0},
      {"1.5", CONCH_TIMEOUT_SYNTAX, 0},
      {"0x10", CONCH_TIMEOUT_SYNTAX, 0},
  };
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int64_t ms = -7;
    int rv = connect_parse(cases[i].v, &ms);

    if (rv != cases[i].rv) {
      fail_msg("\"%s\": %d, expected %d", cases[i].v, rv, cases[i].rv);
    }
    assert_int_equal(ms, rv == 0 ? cases[i].ms : -7); /* untouched on error */
  }
  /* A NUL inside the value is not a digit. */
  {
    int64_t ms;
    assert_int_equal(conch__connect_timeout_parse("1\0" "2", 3, &ms),
                     CONCH_TIMEOUT_SYNTAX);
  }
}

static void test_connect_timeout_format(void **state) {
  static const int64_t round[] = {0, 1, 9, 10, 999, 1000, 123456789,
                                  9999999999LL};
  char out[CONCH_TIMEOUT_BUF];
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(round) / sizeof(round[0]); i++) {
    int64_t back = -1;
    int n = conch__connect_timeout_format(round[i], out);

    assert_true(n > 0);
    assert_int_equal(n, strlen(out));
    assert_int_equal(connect_parse(out, &back), 0);
    assert_int_equal(back, round[i]);
  }
  assert_int_equal(conch__connect_timeout_format(1500, out), 4);
  assert_string_equal(out, "1500");
  assert_int_equal(conch__connect_timeout_format(10000000000LL, out), -1);
  assert_int_equal(conch__connect_timeout_format(-1, out), -1);
  assert_int_equal(conch__connect_timeout_format(INT64_MAX, out), -1);
}

static void test_grpc_timeout_parse(void **state) {
  static const struct {
    const char *v;
    int rv;
    int64_t ms;
  } cases[] = {
      {"0m", 0, 0},
      {"1m", 0, 1},
      {"1S", 0, 1000},
      {"1M", 0, 60000},
      {"1H", 0, 3600000},
      {"99999999H", 0, 99999999LL * 3600000},
      {"1u", 0, 1}, /* rounded up: never already over */
      {"1000u", 0, 1},
      {"1001u", 0, 2},
      {"1n", 0, 1},
      {"1000000n", 0, 1},
      {"1000001n", 0, 2},
      {"0n", 0, 0},
      {"12345678m", 0, 12345678},
      {"", CONCH_TIMEOUT_SYNTAX, 0},
      {"m", CONCH_TIMEOUT_SYNTAX, 0},
      {"1", CONCH_TIMEOUT_SYNTAX, 0},
      {"10", CONCH_TIMEOUT_SYNTAX, 0},
      {"1x", CONCH_TIMEOUT_SYNTAX, 0},
      {"1h", CONCH_TIMEOUT_SYNTAX, 0}, /* units are case-sensitive */
      {"1s", CONCH_TIMEOUT_SYNTAX, 0},
      {"1mm", CONCH_TIMEOUT_SYNTAX, 0},
      {"1 m", CONCH_TIMEOUT_SYNTAX, 0},
      {" 1m", CONCH_TIMEOUT_SYNTAX, 0},
      {"-1m", CONCH_TIMEOUT_SYNTAX, 0},
      {"+1m", CONCH_TIMEOUT_SYNTAX, 0},
      {"123456789m", CONCH_TIMEOUT_TOO_LONG, 0},
      {"99999999999999999999H", CONCH_TIMEOUT_TOO_LONG, 0},
  };
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int64_t ms = -7;
    int rv = grpc_parse(cases[i].v, &ms);

    if (rv != cases[i].rv) {
      fail_msg("\"%s\": %d, expected %d", cases[i].v, rv, cases[i].rv);
    }
    if (rv == 0 && ms != cases[i].ms) {
      fail_msg("\"%s\": %lld ms, expected %lld", cases[i].v, (long long)ms,
               (long long)cases[i].ms);
    }
    if (rv != 0) {
      assert_int_equal(ms, -7);
    }
  }
}

static void test_grpc_timeout_format(void **state) {
  static const struct {
    int64_t ms;
    const char *want;
  } cases[] = {
      {0, "0m"},
      {1, "1m"},
      {99999999, "99999999m"},
      {100000000, "100000S"},
      {100000999, "100000S"}, /* truncated: never more than is left */
      {99999999LL * 1000 + 999, "99999999S"},
      {100000000LL * 1000, "1666666M"},
      {100000000LL * 60000, "1666666H"},
      {99999999LL * 3600000, "99999999H"},
      {INT64_MAX, "99999999H"},
  };
  char out[CONCH_TIMEOUT_BUF];
  size_t i;
  int64_t ms;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int n = conch__grpc_timeout_format(cases[i].ms, out);

    assert_int_equal(n, strlen(cases[i].want));
    assert_string_equal(out, cases[i].want);
  }
  assert_int_equal(conch__grpc_timeout_format(-1, out), -1);
  /* Round trips: what is sent never exceeds the time left, and loses less
     than one unit of what was picked. */
  for (ms = 1; ms < INT64_MAX / 7; ms = ms * 7 + 3) {
    int64_t back = -1;

    assert_true(conch__grpc_timeout_format(ms, out) > 0);
    assert_int_equal(grpc_parse(out, &back), 0);
    assert_true(back <= ms);
    if (ms <= 99999999) {
      assert_int_equal(back, ms);
    } else if (ms <= 99999999LL * 3600000) {
      assert_true(ms - back < 3600000);
    }
  }
}

/* ---- Content types ------------------------------------------------------- */

static void test_ctype_parse(void **state) {
  static const struct {
    const char *v;
    int rv;
    int family;
    int codec;
    int params;
  } cases[] = {
      {"application/proto", 0, CONCH_CT_CONNECT, CONCH_CT_PROTO, 0},
      {"application/json", 0, CONCH_CT_CONNECT, CONCH_CT_JSON, 0},
      {"Application/JSON", 0, CONCH_CT_CONNECT, CONCH_CT_JSON, 0},
      {"  application/json  ", 0, CONCH_CT_CONNECT, CONCH_CT_JSON, 0},
      {"application/json; charset=utf-8", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_UTF8},
      {"application/json;charset=UTF-8", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_UTF8},
      {"application/json ; Charset = \"utf-8\"", 0, CONCH_CT_CONNECT,
       CONCH_CT_JSON, CONCH_CT_UTF8},
      {"application/json; charset=\"ut\\f-8\"", 0, CONCH_CT_CONNECT,
       CONCH_CT_JSON, CONCH_CT_UTF8}, /* a quoted-pair */
      {"application/json;", 0, CONCH_CT_CONNECT, CONCH_CT_JSON, 0},
      {"application/json; charset=utf-8;", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_UTF8},
      {"application/json; charset=latin1", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/json; charset=utf-8x", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/json; charset=utf-8; charset=utf-8", 0, CONCH_CT_CONNECT,
       CONCH_CT_JSON, CONCH_CT_BAD_PARAMS},
      {"application/json; charset=utf-8; q=1", 0, CONCH_CT_CONNECT,
       CONCH_CT_JSON, CONCH_CT_BAD_PARAMS},
      {"application/json; charset", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/json; charset=", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/json; =utf-8", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/json; charset=\"utf-8", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS}, /* unterminated */
      {"application/json; charset=utf-8 x", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/json;;", 0, CONCH_CT_CONNECT, CONCH_CT_JSON,
       CONCH_CT_BAD_PARAMS},
      {"application/connect+proto", 0, CONCH_CT_CONNECT_STREAM, CONCH_CT_PROTO,
       0},
      {"application/connect+json", 0, CONCH_CT_CONNECT_STREAM, CONCH_CT_JSON,
       0},
      {"application/connect+", 0, CONCH_CT_CONNECT_STREAM, CONCH_CT_OTHER, 0},
      {"application/connect+thrift", 0, CONCH_CT_CONNECT_STREAM,
       CONCH_CT_OTHER, 0},
      {"application/grpc", 0, CONCH_CT_GRPC, CONCH_CT_PROTO, 0},
      {"application/grpc+proto", 0, CONCH_CT_GRPC, CONCH_CT_PROTO, 0},
      {"application/grpc+json", 0, CONCH_CT_GRPC, CONCH_CT_JSON, 0},
      {"application/grpc;x=y", 0, CONCH_CT_GRPC, CONCH_CT_PROTO,
       CONCH_CT_BAD_PARAMS},
      {"application/grpc-web", 0, CONCH_CT_GRPC_WEB, CONCH_CT_PROTO, 0},
      {"application/grpc-web+proto", 0, CONCH_CT_GRPC_WEB, CONCH_CT_PROTO, 0},
      {"application/grpc-web+json", 0, CONCH_CT_GRPC_WEB, CONCH_CT_JSON, 0},
      /* Not one of ours: any other application/ type is Connect unary with
         a codec nobody serves. */
      {"application/grpc-web-text", 0, CONCH_CT_CONNECT, CONCH_CT_OTHER, 0},
      {"application/grpcx", 0, CONCH_CT_CONNECT, CONCH_CT_OTHER, 0},
      {"application/", 0, CONCH_CT_CONNECT, CONCH_CT_OTHER, 0},
      {"application/xml", 0, CONCH_CT_CONNECT, CONCH_CT_OTHER, 0},
      {"", -1, 0, 0, 0},
      {"   ", -1, 0, 0, 0},
      {";charset=utf-8", -1, 0, 0, 0},
      {"text/plain", -1, 0, 0, 0},
      {"application", -1, 0, 0, 0},
      {"applicationx/json", -1, 0, 0, 0},
  };
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    conch_ctype ct;
    int rv;

    memset(&ct, 0x5a, sizeof(ct));
    rv = conch__ctype_parse(cases[i].v, strlen(cases[i].v), &ct);
    if (rv != cases[i].rv || ct.family != cases[i].family ||
        ct.codec != cases[i].codec || ct.params != cases[i].params) {
      fail_msg("\"%s\": rv %d family %d codec %d params %d, expected %d %d "
               "%d %d",
               cases[i].v, rv, ct.family, ct.codec, ct.params, cases[i].rv,
               cases[i].family, cases[i].codec, cases[i].params);
    }
  }
  /* The length bounds the value: what follows is not read. */
  {
    conch_ctype ct;
    assert_int_equal(conch__ctype_parse("application/jsonx", 16, &ct), 0);
    assert_int_equal(ct.codec, CONCH_CT_JSON);
    assert_int_equal(conch__ctype_parse("application/json\0; x", 20, &ct), 0);
    assert_int_equal(ct.codec, CONCH_CT_OTHER);
  }
}

static void test_ctype_name(void **state) {
  int family;
  int codec;
  int utf8;

  (void)state;
  assert_string_equal(conch__ctype_name(CONCH_CT_GRPC, CONCH_CT_PROTO, 0),
                      "application/grpc");
  assert_string_equal(conch__ctype_name(CONCH_CT_CONNECT, CONCH_CT_JSON, 1),
                      "application/json; charset=utf-8");
  assert_string_equal(conch__ctype_name(CONCH_CT_GRPC_WEB, CONCH_CT_PROTO, 0),
                      "application/grpc-web+proto");
  assert_null(conch__ctype_name(CONCH_CT_CONNECT, CONCH_CT_PROTO, 1));
  assert_null(conch__ctype_name(CONCH_CT_CONNECT, CONCH_CT_OTHER, 0));
  assert_null(conch__ctype_name(0, CONCH_CT_PROTO, 0));
  assert_null(conch__ctype_name(CONCH_CT_GRPC_WEB + 1, CONCH_CT_PROTO, 0));
  /* Every name parses back to what it names. */
  for (family = CONCH_CT_CONNECT; family <= CONCH_CT_GRPC_WEB; family++) {
    for (codec = CONCH_CT_PROTO; codec <= CONCH_CT_JSON; codec++) {
      for (utf8 = 0; utf8 <= 1; utf8++) {
        const char *name = conch__ctype_name(family, codec, utf8);
        conch_ctype ct;

        if (name == NULL) {
          continue;
        }
        assert_int_equal(conch__ctype_parse(name, strlen(name), &ct), 0);
        assert_int_equal(ct.family, family);
        assert_int_equal(ct.codec, codec);
        assert_int_equal(ct.params, utf8 ? CONCH_CT_UTF8 : CONCH_CT_NO_PARAMS);
      }
    }
  }
}

/* ---- Connect JSON -------------------------------------------------------- */

static void write_error(conch_buf *b, conch_code code, const char *msg) {
  conch_status st;

  conch_status_init(&st);
  st.code = code;
  st.message = (char *)msg;
  conch__buf_reset(b);
  assert_int_equal(conch__connect_error_write(b, conch_mem_default(), &st), 0);
  assert_int_equal(conch__buf_append(b, conch_mem_default(), "", 1), 0);
}

static void test_error_write(void **state) {
  const conch_mem *mem = conch_mem_default();
  conch_buf b = CONCH_BUF_INIT;
  conch_status st;
  conch_status back;
  static const uint8_t dv[] = {0x08, 0x96, 0x01};

  (void)state;
  write_error(&b, CONCH_CODE_NOT_FOUND, NULL);
  assert_string_equal((char *)b.data, "{\"code\":\"not_found\"}");
  write_error(&b, CONCH_CODE_INTERNAL, "");
  assert_string_equal((char *)b.data, "{\"code\":\"internal\"}");
  write_error(&b, CONCH_CODE_INVALID_ARGUMENT,
              "say \"hi\"\\ \n\t\x01 caf\xc3\xa9 \xff\xc0\xaf end");
  assert_string_equal((char *)b.data,
                      "{\"code\":\"invalid_argument\",\"message\":"
                      "\"say \\\"hi\\\"\\\\ \\n\\t\\u0001 caf\xc3\xa9 "
                      "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end\"}");

  /* Read back by the client's reader: code, message and details. */
  conch_status_init(&st);
  st.code = CONCH_CODE_FAILED_PRECONDITION;
  st.message = "not now";
  assert_int_equal(conch__status_add_detail(&st, mem, "google.rpc.RetryInfo",
                                            20, dv, sizeof(dv)),
                   0);
  assert_int_equal(conch__status_add_detail(&st, mem,
                                            "type.googleapis.com/a.B", 23,
                                            dv, 1),
                   0);
  conch__buf_reset(&b);
  assert_int_equal(conch__connect_error_write(&b, mem, &st), 0);
  conch_status_init(&back);
  assert_int_equal(conch__connect_unary_error(&back, mem, 400, 1, b.data,
                                              conch__buf_size(&b)),
                   0);
  assert_int_equal(back.code, CONCH_CODE_FAILED_PRECONDITION);
  assert_string_equal(back.message, "not now");
  assert_int_equal(back.ndetails, 2);
  assert_string_equal(back.details[0].type_url,
                      "type.googleapis.com/google.rpc.RetryInfo");
  assert_int_equal(back.details[0].len, sizeof(dv));
  assert_memory_equal(back.details[0].value, dv, sizeof(dv));
  assert_string_equal(back.details[1].type_url, "type.googleapis.com/a.B");
  assert_int_equal(back.details[1].len, 1);
  conch_status_clear(&back);
  st.message = NULL;
  conch_status_clear(&st);
  conch__buf_free(&b, mem);
}

static void test_end_write(void **state) {
  const conch_mem *mem = conch_mem_default();
  conch_buf b = CONCH_BUF_INIT;
  conch_metadata *md;
  conch_metadata *got;
  conch_status st;
  conch_status back;
  static const uint8_t bin[] = {0, 1, 2, 0xff};
  const char *name;
  const uint8_t *value;
  size_t len;

  (void)state;
  assert_int_equal(conch__connect_end_write(&b, mem, NULL, NULL), 0);
  assert_int_equal(conch__buf_size(&b), 2);
  assert_memory_equal(b.data, "{}", 2);

  assert_int_equal(conch_metadata_new(&md, mem), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-one", "a"), 0);
  assert_int_equal(conch_metadata_add(md, "x-data-bin", bin, sizeof(bin)), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-two", "q\"uote"), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-one", "b"), 0);

  conch_status_init(&st);
  st.code = CONCH_CODE_ABORTED;
  st.message = "stop";
  conch__buf_reset(&b);
  assert_int_equal(conch__connect_end_write(&b, mem, &st, md), 0);
  assert_int_equal(conch__buf_append(&b, mem, "", 1), 0);
  assert_string_equal((char *)b.data,
                      "{\"error\":{\"code\":\"aborted\",\"message\":\"stop\"},"
                      "\"metadata\":{\"x-one\":[\"a\",\"b\"],"
                      "\"x-data-bin\":[\"AAEC/w\"],\"x-two\":[\"q\\\"uote\"]}}");

  /* Read back by the client's reader. */
  assert_int_equal(conch_metadata_new(&got, mem), 0);
  conch_status_init(&back);
  assert_int_equal(conch__connect_end_stream(b.data, conch__buf_size(&b) - 1,
                                             mem, &back, got),
                   0);
  assert_int_equal(back.code, CONCH_CODE_ABORTED);
  assert_string_equal(back.message, "stop");
  assert_int_equal(conch_metadata_count(got), 4);
  assert_string_equal(conch_metadata_get(got, "x-two", NULL), "q\"uote");
  value = (const uint8_t *)conch_metadata_get(got, "x-data-bin", &len);
  assert_non_null(value);
  assert_int_equal(len, sizeof(bin));
  assert_memory_equal(value, bin, sizeof(bin));
  assert_int_equal(conch_metadata_at(got, 1, &name, &value, &len), 0);
  assert_string_equal(name, "x-one");
  assert_memory_equal(value, "b", 1);

  /* OK with metadata: no "error". */
  st.code = CONCH_CODE_OK;
  conch__buf_reset(&b);
  conch_metadata_reset(md);
  assert_int_equal(conch_metadata_add_str(md, "k", "v"), 0);
  assert_int_equal(conch__connect_end_write(&b, mem, &st, md), 0);
  assert_int_equal(conch__buf_size(&b), 24);
  assert_memory_equal(b.data, "{\"metadata\":{\"k\":[\"v\"]}}", 24);

  conch_status_clear(&back);
  conch_metadata_free(got);
  conch_metadata_free(md);
  conch__buf_free(&b, mem);
}

/* Every allocation of the writers fails in turn: an error, nothing
   leaked. */
static void test_writers_oom(void **state) {
  const conch_mem *mem = failmem_hooks();
  conch_status st;
  size_t n;

  (void)state;
  conch_status_init(&st);
  st.code = CONCH_CODE_UNAVAILABLE;
  st.message = "a message long enough to need more room than the first "
               "allocation gives, with some more words to be sure";
  for (n = 0;; n++) {
    conch_buf b = CONCH_BUF_INIT;
    int rv;

    failmem_fail_at(n);
    rv = conch__connect_end_write(&b, mem, &st, NULL);
    conch__buf_free(&b, mem);
    assert_int_equal(failmem_live_blocks(), 0);
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
  }
  failmem_fail_at((size_t)-1);
}

/* ---- HTTP ---------------------------------------------------------------- */

static void test_reasons(void **state) {
  (void)state;
  /* RFC 9110's words: the table status.c and conch serve used to disagree
     on. */
  assert_string_equal(conch__http_reason(413), "Content Too Large");
  assert_string_equal(conch__http_reason(414), "URI Too Long");
  assert_string_equal(conch__http_reason(422), "Unprocessable Content");
  assert_string_equal(conch__http_reason(200), "OK");
  assert_string_equal(conch__http_reason(503), "Service Unavailable");
  assert_null(conch__http_reason(0));
  assert_null(conch__http_reason(299));
  assert_null(conch__http_reason(-1));
  assert_null(conch__http_reason(1000));

  assert_int_equal(conch__http_from_code(CONCH_CODE_OK), 200);
  assert_int_equal(conch__http_from_code(CONCH_CODE_CANCELED), 499);
  assert_int_equal(conch__http_from_code(CONCH_CODE_NOT_FOUND), 404);
  assert_int_equal(conch__http_from_code(CONCH_CODE_RESOURCE_EXHAUSTED), 429);
  assert_int_equal(conch__http_from_code(CONCH_CODE_UNIMPLEMENTED), 501);
  assert_int_equal(conch__http_from_code(CONCH_CODE_UNAUTHENTICATED), 401);
  assert_int_equal(conch__http_from_code((conch_code)17), 500);
  assert_int_equal(conch__http_from_code((conch_code)-1), 500);
}

static int hop(const char *name) {
  return conch__h1_hop_by_hop((const uint8_t *)name, strlen(name));
}

static void test_hop_by_hop(void **state) {
  (void)state;
  assert_true(hop("connection"));
  assert_true(hop("Connection"));
  assert_true(hop("KEEP-ALIVE"));
  assert_true(hop("proxy-connection"));
  assert_true(hop("Transfer-Encoding"));
  assert_true(hop("upgrade"));
  assert_true(hop("TE"));
  assert_true(hop("trailer"));
  assert_true(hop("HTTP2-Settings"));
  assert_false(hop(""));
  assert_false(hop("t"));
  assert_false(hop("tee"));
  assert_false(hop("trailers"));
  assert_false(hop("content-type"));
  assert_false(hop("connectionx"));
  assert_false(hop("grpc-timeout"));
  /* The length bounds the name. */
  assert_true(conch__h1_hop_by_hop((const uint8_t *)"tex", 2));
}

static void test_chunks(void **state) {
  const conch_mem *mem = conch_mem_default();
  conch_buf b = CONCH_BUF_INIT;
  char head[CONCH_CHUNK_HEAD];
  size_t n;

  (void)state;
  n = conch__h1_chunk_head(1, head);
  assert_int_equal(n, 3);
  assert_memory_equal(head, "1\r\n", 3);
  n = conch__h1_chunk_head(0x1f4, head);
  assert_memory_equal(head, "1f4\r\n", n);
  n = conch__h1_chunk_head(16, head);
  assert_memory_equal(head, "10\r\n", n);
  if (sizeof(size_t) == 8) {
    n = conch__h1_chunk_head(SIZE_MAX, head);
    assert_int_equal(n, CONCH_CHUNK_HEAD);
    assert_memory_equal(head, "ffffffffffffffff\r\n", n);
  }

  assert_int_equal(conch__h1_chunk_append(&b, mem, (const uint8_t *)"x", 0),
                   0);
  assert_int_equal(conch__buf_size(&b), 0); /* an empty chunk would end it */
  assert_int_equal(
      conch__h1_chunk_append(&b, mem, (const uint8_t *)"hello world", 11), 0);
  assert_int_equal(conch__buf_append(&b, mem, CONCH_CHUNK_LAST,
                                     strlen(CONCH_CHUNK_LAST)),
                   0);
  assert_int_equal(conch__buf_size(&b), 21);
  assert_memory_equal(b.data, "b\r\nhello world\r\n0\r\n\r\n", 21);
  conch__buf_free(&b, mem);
}

/* ---- nghttp2 sessions ---------------------------------------------------- */

/* The SETTINGS a new session sends, as (id, value) pairs. */
static size_t sent_settings(nghttp2_session *h2, uint32_t ids[8],
                            uint32_t vals[8], uint32_t *window_update) {
  uint8_t p[1024];
  size_t n = 0;
  size_t off = 0;
  size_t count = 0;
  const uint8_t *chunk;
  ssize_t k;

  /* nghttp2 hands the output over in pieces. */
  while ((k = nghttp2_session_mem_send(h2, &chunk)) > 0) {
    assert_true(n + (size_t)k <= sizeof(p));
    memcpy(p + n, chunk, (size_t)k);
    n += (size_t)k;
  }
  assert_int_equal(k, 0);

  *window_update = 0;
  /* A client starts with the 24-byte preface. */
  if (n >= 24 && memcmp(p, "PRI * HTTP/2.0", 14) == 0) {
    off = 24;
  }
  while (off + 9 <= n) {
    size_t len = ((size_t)p[off] << 16) | ((size_t)p[off + 1] << 8) |
                 p[off + 2];
    uint8_t type = p[off + 3];
    const uint8_t *f = p + off + 9;
    size_t i;

    assert_true(off + 9 + len <= n);
    if (type == NGHTTP2_SETTINGS) {
      for (i = 0; i + 6 <= len && count < 8; i += 6, count++) {
        ids[count] = ((uint32_t)f[i] << 8) | f[i + 1];
        vals[count] = ((uint32_t)f[i + 2] << 24) |
                      ((uint32_t)f[i + 3] << 16) | ((uint32_t)f[i + 4] << 8) |
                      f[i + 5];
      }
    } else if (type == NGHTTP2_WINDOW_UPDATE) {
      *window_update = (((uint32_t)f[0] & 0x7f) << 24) |
                       ((uint32_t)f[1] << 16) | ((uint32_t)f[2] << 8) | f[3];
    }
    off += 9 + len;
  }
  assert_int_equal(off, n);
  return count;
}

static void test_h2_session(void **state) {
  conch_h2_setup s;
  nghttp2_session *h2;
  uint32_t ids[8];
  uint32_t vals[8];
  uint32_t wu;
  size_t n;

  (void)state;
  memset(&s, 0, sizeof(s));
  s.stream_window = 1 << 20;
  s.conn_window = 1 << 24;
  s.max_header_list = 32768;
  assert_int_equal(conch__h2_session_new(&h2, &s, NULL), 0);
  assert_non_null(h2);
  n = sent_settings(h2, ids, vals, &wu);
  assert_int_equal(n, 3);
  assert_int_equal(ids[0], NGHTTP2_SETTINGS_ENABLE_PUSH);
  assert_int_equal(vals[0], 0);
  assert_int_equal(ids[1], NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE);
  assert_int_equal(vals[1], 1 << 20);
  assert_int_equal(ids[2], NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE);
  assert_int_equal(vals[2], 32768);
  assert_int_equal(wu, (1 << 24) - 65535);
  nghttp2_session_del(h2);

  memset(&s, 0, sizeof(s));
  s.server = 1;
  s.max_streams = 7;
  assert_int_equal(conch__h2_session_new(&h2, &s, NULL), 0);
  n = sent_settings(h2, ids, vals, &wu);
  assert_int_equal(n, 1); /* no ENABLE_PUSH from a server */
  assert_int_equal(ids[0], NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  assert_int_equal(vals[0], 7);
  assert_int_equal(wu, 0);
  assert_true(nghttp2_session_check_server_session(h2));
  nghttp2_session_del(h2);
}

/* The session's allocations go through |mem|; each one failing in turn
   gives CONCH_ERR_NOMEM, a NULL session and no leak. */
static void test_h2_session_oom(void **state) {
  conch_h2_setup s;
  size_t n;

  (void)state;
  memset(&s, 0, sizeof(s));
  s.mem = failmem_hooks();
  s.server = 1;
  s.max_streams = 100;
  s.conn_window = 1 << 20;
  for (n = 0;; n++) {
    nghttp2_session *h2 = (nghttp2_session *)&s;
    int rv;

    failmem_fail_at(n);
    rv = conch__h2_session_new(&h2, &s, NULL);
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      assert_true(failmem_live_blocks() > 0); /* it did use |mem| */
      nghttp2_session_del(h2);
      assert_int_equal(failmem_live_blocks(), 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_null(h2);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  assert_true(n > 0);
  failmem_fail_at((size_t)-1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_connect_timeout_parse),
      cmocka_unit_test(test_connect_timeout_format),
      cmocka_unit_test(test_grpc_timeout_parse),
      cmocka_unit_test(test_grpc_timeout_format),
      cmocka_unit_test(test_ctype_parse),
      cmocka_unit_test(test_ctype_name),
      cmocka_unit_test(test_error_write),
      cmocka_unit_test(test_end_write),
      cmocka_unit_test(test_writers_oom),
      cmocka_unit_test(test_reasons),
      cmocka_unit_test(test_hop_by_hop),
      cmocka_unit_test(test_chunks),
      cmocka_unit_test(test_h2_session),
      cmocka_unit_test(test_h2_session_oom),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
