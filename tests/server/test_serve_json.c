/* conch serve and the JSON codec, over raw HTTP/2: what the E2B SDKs send
   (application/json, application/connect+json), the content types connect-go
   accepts, bad JSON and the answers connect-go gives, unknown fields,
   streams both ways with JSON envelopes, gzip, and the proto codec beside
   it on one connection.  The full RPC set through connect-node's JSON
   client is in node/test/serve.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "base64.h"
#include "envelope.h"
#include "gzip.h"
#include "support.h"

#define SVC "/process.Process/"

static serve_peer srv;

static const char *const json_hdrs[] = {"content-type", "application/json",
                                        NULL};
static const char *const json_stream_hdrs[] = {
    "content-type", "application/connect+json", NULL};

static int group_setup(void **state) {
  (void)state;
  return serve_start(&srv, NULL);
}

static int group_teardown(void **state) {
  (void)state;
  return serve_stop(&srv, 10000) == 0 ? 0 : -1;
}

/* One unary JSON request; |hdrs| NULL for json_hdrs. */
static void unary(const char *method, const char *const *hdrs, const char *body,
                  h2_resp *r) {
  assert_int_equal(h2_request(srv.port, "POST", method,
                              hdrs != NULL ? hdrs : json_hdrs,
                              (const uint8_t *)body, strlen(body), r),
                   0);
}

static void assert_error(const h2_resp *r, int stream, const char *code,
                         const char *msg_prefix) {
  char c[64];
  char m[512];

  connect_error(r, stream, c, sizeof(c), m, sizeof(m));
  assert_string_equal(c, code);
  if (msg_prefix != NULL && strncmp(m, msg_prefix, strlen(msg_prefix)) != 0) {
    fail_msg("message \"%s\" does not start with \"%s\"", m, msg_prefix);
  }
}

/* Envelopes holding JSON texts (NULL-terminated list); malloc'd. */
static uint8_t *json_envelopes(size_t *len, ...) {
  uint8_t *buf = NULL;
  size_t n = 0;
  va_list ap;
  const char *s;

  va_start(ap, len);
  while ((s = va_arg(ap, const char *)) != NULL) {
    size_t sl = strlen(s);

    buf = realloc(buf, n + CONCH_ENV_PREFIX + sl);
    assert_non_null(buf);
    conch__env_write_prefix(buf + n, 0, (uint32_t)sl);
    memcpy(buf + n + CONCH_ENV_PREFIX, s, sl);
    n += CONCH_ENV_PREFIX + sl;
  }
  va_end(ap);
  *len = n;
  return buf;
}

/* The envelopes of a stream response, parsed: messages (flag 0) into
   |msgs| (a JSON array, to json_decref), the end-stream object returned
   (to json_decref).  Fails the test on anything not JSON. */
static json_t *stream_body(const h2_resp *r, json_t **msgs) {
  const uint8_t *p = r->body;
  size_t len = r->len;
  json_t *end = NULL;

  *msgs = json_array();
  while (len > 0) {
    size_t n;
    json_t *j;
    json_error_t je;

    assert_true(len >= CONCH_ENV_PREFIX);
    n = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) | ((size_t)p[3] << 8) |
        p[4];
    assert_true(n + CONCH_ENV_PREFIX <= len);
    assert_null(end); /* the end-stream message comes last */
    j = json_loadb((const char *)p + CONCH_ENV_PREFIX, n, 0, &je);
    if (j == NULL) {
      fail_msg("envelope is not JSON: %s: %.*s", je.text, (int)n,
               (const char *)p + CONCH_ENV_PREFIX);
    }
    if (p[0] == CONCH_ENV_END_STREAM) {
      end = j;
    } else {
      assert_int_equal(p[0], 0);
      json_array_append_new(*msgs, j);
    }
    p += CONCH_ENV_PREFIX + n;
    len -= CONCH_ENV_PREFIX + n;
  }
  assert_non_null(end);
  return end;
}

/* ---- Unary ----------------------------------------------------------------
 */

static void test_unary(void **state) {
  h2_resp r;
  json_t *j;

  (void)state;
  unary(SVC "List", NULL, "{}", &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/json");
  j = json_loadb((const char *)r.body, r.len, 0, NULL);
  assert_true(json_is_object(j));
  json_decref(j);
  h2_resp_free(&r);
  /* Decoded for real: the pid and the signal are read, an unknown field
     is dropped (connect-go's codec discards unknown fields). */
  unary(SVC "SendSignal", NULL,
        "{\"process\":{\"pid\":999999},\"signal\":\"SIGNAL_SIGKILL\","
        "\"bogus\":{\"x\":[1,2,null]},\"alsoBogus\":1e300}",
        &r);
  assert_int_equal(r.status, 404);
  assert_string_equal(r.ctype, "application/json");
  assert_error(&r, 0, "not_found", "process with pid 999999 not found");
  h2_resp_free(&r);
  /* Proto field names and numbers work as well. */
  unary(SVC "SendSignal", NULL,
        "{\"process\":{\"pid\":\"999998\"},\"signal\":9}", &r);
  assert_error(&r, 0, "not_found", "process with pid 999998 not found");
  h2_resp_free(&r);
  /* An unknown enum name is dropped: SIGNAL_UNSPECIFIED. */
  unary(SVC "SendSignal", NULL,
        "{\"process\":{\"pid\":1},\"signal\":\"SIGHUP\"}", &r);
  assert_int_equal(r.status, 404);
  h2_resp_free(&r);
  /* A missing selector as envd answers it. */
  unary(SVC "CloseStdin", NULL, "{\"process\":null}", &r);
  assert_int_equal(r.status, 501);
  assert_error(&r, 0, "unimplemented",
               "invalid input type *process.ProcessSelector");
  h2_resp_free(&r);
}

static void test_bad_json(void **state) {
  static const char *const bodies[][2] = {
      {"{", "unmarshal into process.ListRequest: syntax error"},
      {"[]", "unmarshal into process.ListRequest: "},
      {"null", "unmarshal into process.ListRequest: process.ListRequest: "
               "expected a JSON object, got null"},
      {"{\"a\":1}x", "unmarshal into process.ListRequest: syntax error"},
      {"\xff", "unmarshal into process.ListRequest: syntax error"},
  };
  h2_resp r;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
    unary(SVC "List", NULL, bodies[i][0], &r);
    assert_int_equal(r.status, 400);
    assert_string_equal(r.ctype, "application/json");
    assert_error(&r, 0, "invalid_argument", bodies[i][1]);
    h2_resp_free(&r);
  }
  /* An empty body is no JSON object (proto takes it as an empty
     message). */
  unary(SVC "List", NULL, "", &r);
  assert_int_equal(r.status, 400);
  assert_error(&r, 0, "invalid_argument",
               "unmarshal into process.ListRequest: zero-length payload is "
               "not a valid JSON object");
  h2_resp_free(&r);
  /* Wrong types name the field. */
  unary(SVC "SendSignal", NULL, "{\"process\":{\"pid\":\"x\"}}", &r);
  assert_int_equal(r.status, 400);
  assert_error(&r, 0, "invalid_argument",
               "unmarshal into process.SendSignalRequest: field "
               "process.ProcessSelector.pid: invalid value for uint32: \"x\"");
  h2_resp_free(&r);
  unary(SVC "SendInput", NULL,
        "{\"process\":{\"pid\":1,\"tag\":\"t\"},\"input\":{\"stdin\":\"\"}}",
        &r);
  assert_error(&r, 0, "invalid_argument",
               "unmarshal into process.SendInputRequest: field "
               "process.ProcessSelector.tag: its oneof already has a value");
  h2_resp_free(&r);
  unary(SVC "SendInput", NULL, "{\"input\":{\"stdin\":\"not base64!\"}}", &r);
  assert_error(&r, 0, "invalid_argument",
               "unmarshal into process.SendInputRequest: field "
               "process.ProcessInput.stdin: invalid base64");
  h2_resp_free(&r);
  /* The server still answers. */
  unary(SVC "List", NULL, "{}", &r);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
}

/* The content types connect-go takes (it canonicalizes them first), and
   the form it answers with. */
static void test_content_types(void **state) {
  static const char *const ok[][2] = {
      {"application/json", "application/json"},
      {"application/json; charset=utf-8", "application/json; charset=utf-8"},
      {"application/json;charset=UTF-8", "application/json; charset=utf-8"},
      {"Application/JSON ; Charset=\"utf-8\"",
       "application/json; charset=utf-8"},
      {"application/json;", "application/json"},
      {"APPLICATION/PROTO", "application/proto"},
  };
  static const char *const refused[] = {
      "application/json; charset=latin1",
      "application/json; foo=bar",
      "application/json; charset=utf-8; charset=utf-8",
      "application/proto; charset=utf-8",
      "application/json;;",
      "application/json x",
      "application/connect+json",
      "text/json",
      "application/json; charset",
      "application/jsonx"};
  h2_resp r;
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    const char *const hdrs[] = {"content-type", ok[i][0], NULL};
    int proto = strstr(ok[i][1], "proto") != NULL;

    unary(SVC "List", hdrs, proto ? "" : "{}", &r);
    if (r.status != 200) {
      fail_msg("%s: status %d", ok[i][0], r.status);
    }
    assert_string_equal(r.ctype, ok[i][1]);
    if (!proto) {
      assert_true(r.len >= 2 && r.body[0] == '{');
    }
    h2_resp_free(&r);
  }
  for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    const char *const hdrs[] = {"content-type", refused[i], NULL};

    unary(SVC "List", hdrs, "{}", &r);
    if (r.status != 415) {
      fail_msg("%s: status %d", refused[i], r.status);
    }
    assert_non_null(strstr(r.extra, "accept-post: application/json, "
                                    "application/json; charset=utf-8, "
                                    "application/proto"));
    h2_resp_free(&r);
  }
  /* Streams take the connect+ forms only. */
  unary(SVC "Start", NULL, "{}", &r);
  assert_int_equal(r.status, 415);
  assert_non_null(strstr(r.extra, "accept-post: application/connect+json, "
                                  "application/connect+json; charset=utf-8, "
                                  "application/connect+proto"));
  h2_resp_free(&r);
}

/* ---- Streams ----------------------------------------------------------------
 */

static void test_start_stream(void **state) {
  static const char *const charset_hdrs[] = {
      "content-type", "application/connect+JSON; charset=utf-8", NULL};
  size_t len;
  uint8_t *body = json_envelopes(
      &len,
      "{\"process\":{\"cmd\":\"sh\",\"args\":[\"-c\",\"printf json; printf "
      "err >&2; exit 3\"],\"envs\":{}},\"stdin\":false,\"unknown\":true}",
      NULL);
  h2_resp r;
  json_t *msgs;
  json_t *end;
  json_t *ev;
  size_t i;
  char out[64];
  char err[64];
  size_t nout = 0;
  size_t nerr = 0;
  int pid;

  (void)state;
  assert_int_equal(h2_request(srv.port, "POST", SVC "Start", json_stream_hdrs,
                              body, len, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/connect+json");
  end = stream_body(&r, &msgs);
  assert_int_equal(json_object_size(end), 0); /* {}: success */
  assert_true(json_array_size(msgs) >= 3);
  ev = json_object_get(json_array_get(msgs, 0), "event");
  pid = (int)json_integer_value(
      json_object_get(json_object_get(ev, "start"), "pid"));
  assert_true(pid > 0);
  note_pid(pid);
  for (i = 1; i + 1 < json_array_size(msgs); i++) {
    json_t *d = json_object_get(
        json_object_get(json_array_get(msgs, i), "event"), "data");
    const char *o = json_string_value(json_object_get(d, "stdout"));
    const char *e = json_string_value(json_object_get(d, "stderr"));
    const char *b64 = o != NULL ? o : e;
    char *dst = o != NULL ? out + nout : err + nerr;
    size_t got = 0;

    /* Standard base64 with padding, as protojson writes bytes. */
    assert_non_null(b64);
    assert_int_equal(strlen(b64) % 4, 0);
    assert_true(conch__b64_decoded_max(strlen(b64)) < 32);
    assert_int_equal(conch__b64_decode(b64, strlen(b64), CONCH_B64_STD,
                                       (uint8_t *)dst, &got),
                     0);
    *(o != NULL ? &nout : &nerr) += got;
  }
  assert_int_equal(nout, 4);
  assert_memory_equal(out, "json", 4);
  assert_int_equal(nerr, 3);
  assert_memory_equal(err, "err", 3);
  ev =
      json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "event");
  {
    char *s = json_dumps(json_object_get(ev, "end"), JSON_COMPACT);

    assert_string_equal(s, "{\"exitCode\":3,\"exited\":true,\"status\":"
                           "\"exit status 3\",\"error\":\"exit status 3\"}");
    free(s);
  }
  json_decref(msgs);
  json_decref(end);
  h2_resp_free(&r);

  /* The charset form is answered as connect-go canonicalizes it. */
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "Start", charset_hdrs, body, len, &r),
      0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/connect+json; charset=utf-8");
  end = stream_body(&r, &msgs);
  pid = (int)json_integer_value(json_object_get(
      json_object_get(json_object_get(json_array_get(msgs, 0), "event"),
                      "start"),
      "pid"));
  note_pid(pid);
  json_decref(msgs);
  json_decref(end);
  h2_resp_free(&r);
  free(body);
}

static void test_stream_errors(void **state) {
  uint8_t *body;
  size_t len;
  h2_resp r;
  json_t *msgs;
  json_t *end;

  (void)state;
  /* An empty envelope is an empty message, whatever the codec. */
  body = json_envelopes(&len, "", NULL);
  assert_int_equal(h2_request(srv.port, "POST", SVC "Connect", json_stream_hdrs,
                              body, len, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_error(&r, 1, "unimplemented",
               "invalid input type *process.ProcessSelector");
  h2_resp_free(&r);
  free(body);
  /* Bad JSON in an envelope ends the stream with invalid_argument. */
  body = json_envelopes(&len, "{\"process\":{\"pid\":-1}}", NULL);
  assert_int_equal(h2_request(srv.port, "POST", SVC "Connect", json_stream_hdrs,
                              body, len, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/connect+json");
  end = stream_body(&r, &msgs);
  assert_int_equal(json_array_size(msgs), 0);
  json_decref(msgs);
  json_decref(end);
  assert_error(&r, 1, "invalid_argument",
               "unmarshal into process.ConnectRequest: field "
               "process.ProcessSelector.pid: -1 is out of range for uint32");
  h2_resp_free(&r);
  free(body);
  body = json_envelopes(&len, "{\"process\":{\"pid\":123456789}}", NULL);
  assert_int_equal(h2_request(srv.port, "POST", SVC "Connect", json_stream_hdrs,
                              body, len, &r),
                   0);
  assert_error(&r, 1, "not_found", "process with pid 123456789 not found");
  h2_resp_free(&r);
  free(body);
}

/* StreamInput (a client stream) and the unary input RPCs in JSON, feeding
   a `cat` started with the proto codec by our client. */
static void test_input(void **state) {
  conch_client *c = client_new(srv.url);
  run_result res;
  conch_call *call;
  pid_t pid;
  char start[96];
  char sel[64];
  uint8_t *body;
  size_t len;
  h2_resp r;
  json_t *msgs;
  json_t *end;

  (void)state;
  memset(&res, 0, sizeof(res));
  call = start_call(c, NULL, &res, &pid, "cat", NULL);
  assert_non_null(call);
  snprintf(start, sizeof(start), "{\"start\":{\"process\":{\"pid\":%d}}}",
           (int)pid);
  snprintf(sel, sizeof(sel), "{\"process\":{\"pid\":%d}}", (int)pid);
  body = json_envelopes(&len, start,
                        "{\"data\":{\"input\":{\"stdin\":"
                        "\"b25lIA==\"}}}",
                        "{\"keepalive\":{}}",
                        "{\"data\":{\"input\":{\"stdin\":\"dHdvIA\"}}}", NULL);
  assert_int_equal(h2_request(srv.port, "POST", SVC "StreamInput",
                              json_stream_hdrs, body, len, &r),
                   0);
  free(body);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/connect+json");
  end = stream_body(&r, &msgs);
  assert_int_equal(json_array_size(msgs), 1);
  assert_int_equal(json_object_size(json_array_get(msgs, 0)), 0);
  assert_int_equal(json_object_size(end), 0);
  json_decref(msgs);
  json_decref(end);
  h2_resp_free(&r);
  {
    char in[128];

    snprintf(in, sizeof(in),
             "{\"process\":{\"pid\":%d},\"input\":{\"stdin\":\"dGhyZWUK\"}}",
             (int)pid);
    unary(SVC "SendInput", NULL, in, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.ctype, "application/json");
    assert_int_equal(r.len, 2);
    assert_memory_equal(r.body, "{}", 2);
    h2_resp_free(&r);
  }
  unary(SVC "CloseStdin", NULL, sel, &r);
  assert_int_equal(r.status, 200);
  assert_memory_equal(r.body, "{}", 2);
  h2_resp_free(&r);
  drain_call(c, call, &res);
  assert_int_equal(res.code, CONCH_CODE_OK);
  assert_string_equal(res.out, "one two three\n");
  assert_int_equal(res.exit_code, 0);
  conch_client_free(c);
}

/* gzip both ways with JSON: a compressed request body, compressed
   envelopes out. */
static void test_gzip(void **state) {
  static const char *const gz_unary[] = {"content-type",
                                         "application/json",
                                         "content-encoding",
                                         "gzip",
                                         "accept-encoding",
                                         "gzip",
                                         NULL};
  static const char *const gz_stream[] = {
      "content-type", "application/connect+json", "connect-accept-encoding",
      "gzip", NULL};
  static const char sig[] =
      "{\"process\":{\"pid\":999997},\"signal\":\"SIGNAL_SIGTERM\"}";
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  uint8_t *body;
  size_t len;
  h2_resp r;
  const uint8_t *p;
  int saw_compressed = 0;

  (void)state;
  conch__gzip_init(&gz, conch_mem_default());
  assert_int_equal(
      conch__gzip_deflate(&gz, -1, (const uint8_t *)sig, strlen(sig), &out), 0);
  assert_int_equal(h2_request(srv.port, "POST", SVC "SendSignal", gz_unary,
                              conch__buf_head(&out), conch__buf_size(&out), &r),
                   0);
  assert_error(&r, 0, "not_found", "process with pid 999997 not found");
  h2_resp_free(&r);
  /* A gzip body that inflates to nothing is no JSON object either. */
  conch__buf_reset(&out);
  assert_int_equal(conch__gzip_deflate(&gz, -1, (const uint8_t *)"", 0, &out),
                   0);
  assert_true(conch__buf_size(&out) > 0);
  assert_int_equal(h2_request(srv.port, "POST", SVC "List", gz_unary,
                              conch__buf_head(&out), conch__buf_size(&out), &r),
                   0);
  assert_int_equal(r.status, 400);
  assert_error(&r, 0, "invalid_argument",
               "unmarshal into process.ListRequest: zero-length payload");
  h2_resp_free(&r);
  /* 5000 bytes of output: its JSON envelopes go out gzipped. */
  body = json_envelopes(&len,
                        "{\"process\":{\"cmd\":\"head\",\"args\":[\"-c\","
                        "\"5000\",\"/dev/zero\"]}}",
                        NULL);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "Start", gz_stream, body, len, &r), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.extra, "connect-content-encoding: gzip"));
  for (p = r.body; p < r.body + r.len;) {
    size_t n = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) |
               ((size_t)p[3] << 8) | p[4];

    if ((p[0] & CONCH_ENV_COMPRESSED) != 0 && (p[0] & 2) == 0) {
      conch_buf plain = CONCH_BUF_INIT;
      json_t *j;

      assert_int_equal(
          conch__gzip_inflate(&gz, p + CONCH_ENV_PREFIX, n, 0, &plain), 0);
      j = json_loadb((const char *)conch__buf_head(&plain),
                     conch__buf_size(&plain), 0, NULL);
      assert_non_null(j);
      json_decref(j);
      conch__buf_free(&plain, conch_mem_default());
      saw_compressed = 1;
    }
    p += CONCH_ENV_PREFIX + n;
  }
  assert_true(saw_compressed);
  h2_resp_free(&r);
  free(body);
  conch__buf_free(&out, conch_mem_default());
  conch__gzip_clear(&gz);
}

/* Proto and JSON calls side by side on one connection. */
static void test_mixed_codecs(void **state) {
  static const char *const proto_hdrs[] = {"content-type", "application/proto",
                                           NULL};
  h2_conn *c;
  h2_resp a;
  h2_resp b;

  (void)state;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  assert_int_equal(h2_open(&c, srv.port), 0);
  assert_true(h2_submit(c, "POST", SVC "List", json_hdrs, (const uint8_t *)"{}",
                        2, &a) > 0);
  assert_true(h2_submit(c, "POST", SVC "List", proto_hdrs, (const uint8_t *)"",
                        0, &b) > 0);
  assert_int_equal(h2_run(c, 10000), 0);
  assert_int_equal(a.status, 200);
  assert_string_equal(a.ctype, "application/json");
  assert_true(a.len >= 2 && a.body[0] == '{');
  assert_int_equal(b.status, 200);
  assert_string_equal(b.ctype, "application/proto");
  h2_resp_free(&a);
  h2_resp_free(&b);
  h2_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary),         cmocka_unit_test(test_bad_json),
      cmocka_unit_test(test_content_types), cmocka_unit_test(test_start_stream),
      cmocka_unit_test(test_stream_errors), cmocka_unit_test(test_input),
      cmocka_unit_test(test_gzip),          cmocka_unit_test(test_mixed_codecs),
  };

  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
