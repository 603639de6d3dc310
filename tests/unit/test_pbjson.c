/* Unit tests for runtime/pbjson*.c, the proto3 JSON codec: the vectors of
   pbjson/vectors.json (what protobuf-es makes of each case, with
   protojson's verdict where the two differ; pbjson/gen.sh regenerates
   them), process.proto messages as conch serve sends them, number
   formatting, maps, presence, error messages, well-known types, and every
   allocation failing in turn. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include <conch/status.h>

#include "failmem.h"
#include "mem_int.h"
#include "pbjson.h"
#include "process/process.pb-c.h"

/* The test schemas, compiled here (protoc-c output is not held to our
   warnings). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "pbjson/types.pb-c.c"
#include "pbjson/types2.pb-c.c"
#include "google/protobuf/any.pb-c.c"
#include "google/protobuf/duration.pb-c.c"
#include "google/protobuf/empty.pb-c.c"
#include "google/protobuf/field_mask.pb-c.c"
#include "google/protobuf/struct.pb-c.c"
#include "google/protobuf/timestamp.pb-c.c"
#include "google/protobuf/wrappers.pb-c.c"
#pragma GCC diagnostic pop

static const ProtobufCMessageDescriptor *resolve(const char *url, void *ud);

/* Any resolves through the test's descriptors: all of them (the compiled
   well-known types too), or, with |plain|, only the test's own messages,
   so that well-known payloads take the codec's built-in descriptors. */
static int plain_only;
static const conch_pbjson_opts opts = {resolve, &plain_only};

/* ---- Helpers ----------------------------------------------------------- */

/* Encodes |m|; returns a malloc'd NUL-terminated string, or NULL with the
   code in |*rv| and the message in |err|. */
static char *encode(const ProtobufCMessage *m, int *rv, char *err,
                    size_t errlen) {
  conch_buf b = CONCH_BUF_INIT;
  char *s;
  int r = conch__pbjson_encode_ex(m, &opts, NULL, &b, err, errlen);

  if (rv != NULL) {
    *rv = r;
  }
  if (r != 0) {
    conch__buf_free(&b, conch_mem_default());
    return NULL;
  }
  s = malloc(conch__buf_size(&b) + 1);
  assert_non_null(s);
  memcpy(s, conch__buf_head(&b), conch__buf_size(&b));
  s[conch__buf_size(&b)] = '\0';
  conch__buf_free(&b, conch_mem_default());
  return s;
}

static char *encode_ok(const ProtobufCMessage *m) {
  char err[256];
  int rv;
  char *s = encode(m, &rv, err, sizeof(err));

  if (s == NULL) {
    fail_msg("encode %s: %d %s", m->descriptor->name, rv, err);
  }
  return s;
}

static int decode(const ProtobufCMessageDescriptor *d, const char *json,
                  ProtobufCMessage **out, char *err, size_t errlen) {
  return conch__pbjson_decode_ex(d, (const uint8_t *)json, strlen(json), &opts,
                                 NULL, out, err, errlen);
}

static ProtobufCMessage *decode_ok(const ProtobufCMessageDescriptor *d,
                                   const char *json) {
  ProtobufCMessage *m = NULL;
  char err[256];
  int rv = decode(d, json, &m, err, sizeof(err));

  if (rv != 0) {
    fail_msg("decode %s %s: %d %s", d->name, json, rv, err);
  }
  assert_non_null(m);
  return m;
}

/* Decodes |json| as |d| and expects it encoded as |want|. */
static void check_json(const ProtobufCMessageDescriptor *d, const char *json,
                       const char *want) {
  ProtobufCMessage *m = decode_ok(d, json);
  char *s = encode_ok(m);

  if (strcmp(s, want) != 0) {
    fail_msg("%s %s\n  got  %s\n  want %s", d->name, json, s, want);
  }
  free(s);
  protobuf_c_message_free_unpacked(m, NULL);
}

/* Expects |json| refused as |d| with |code|, the message containing
   |part| (NULL: any). */
static void check_error(const ProtobufCMessageDescriptor *d, const char *json,
                        int code, const char *part) {
  ProtobufCMessage *m = (ProtobufCMessage *)1;
  char err[256];
  int rv = decode(d, json, &m, err, sizeof(err));

  if (rv != code) {
    fail_msg("%s %s: got %d (%s), want %d", d->name, json, rv, err, code);
  }
  assert_null(m);
  assert_true(err[0] != '\0');
  if (part != NULL && strstr(err, part) == NULL) {
    fail_msg("%s %s: \"%s\" lacks \"%s\"", d->name, json, err, part);
  }
}

static const ProtobufCMessageDescriptor *const descriptors[] = {
    &process__start_request__descriptor,
    &process__start_response__descriptor,
    &process__connect_response__descriptor,
    &process__connect_request__descriptor,
    &process__list_request__descriptor,
    &process__list_response__descriptor,
    &process__send_signal_request__descriptor,
    &process__send_input_request__descriptor,
    &process__stream_input_request__descriptor,
    &process__update_request__descriptor,
    &process__close_stdin_request__descriptor,
    &pbjsontest__scalars__descriptor,
    &pbjsontest__repeats__descriptor,
    &pbjsontest__maps__descriptor,
    &pbjsontest__oneofs__descriptor,
    &pbjsontest2__p2__descriptor,
    &pbjsontest__wkt__descriptor,
    &google__protobuf__timestamp__descriptor,
    &google__protobuf__duration__descriptor,
    &google__protobuf__int64_value__descriptor,
    &google__protobuf__bool_value__descriptor,
    &google__protobuf__int32_value__descriptor,
    &google__protobuf__string_value__descriptor,
    &google__protobuf__bytes_value__descriptor,
    &google__protobuf__value__descriptor,
    &google__protobuf__struct__descriptor,
    &google__protobuf__list_value__descriptor,
    &google__protobuf__field_mask__descriptor,
    &google__protobuf__empty__descriptor,
    &google__protobuf__any__descriptor,
};

static const ProtobufCMessageDescriptor *resolve(const char *url, void *ud) {
  const char *name = strrchr(url, '/');
  size_t i;

  name = name != NULL ? name + 1 : url;
  for (i = 0; i < sizeof(descriptors) / sizeof(descriptors[0]); i++) {
    if (strcmp(descriptors[i]->name, name) == 0) {
      if (*(const int *)ud && strncmp(name, "google.protobuf.", 16) == 0) {
        return NULL;
      }
      return descriptors[i];
    }
  }
  return NULL;
}

static const ProtobufCMessageDescriptor *by_name(const char *name) {
  size_t i;

  for (i = 0; i < sizeof(descriptors) / sizeof(descriptors[0]); i++) {
    if (strcmp(descriptors[i]->name, name) == 0) {
      return descriptors[i];
    }
  }
  fail_msg("no descriptor for %s", name);
  return NULL;
}

static uint8_t *unhex(const char *s, size_t *len) {
  size_t n = strlen(s) / 2;
  uint8_t *b = malloc(n + 1);
  size_t i;

  assert_non_null(b);
  for (i = 0; i < n; i++) {
    unsigned v;

    assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
    b[i] = (uint8_t)v;
  }
  *len = n;
  return b;
}

/* Equal as JSON values (object member order aside). */
static int same_json(const char *a, const char *b) {
  json_t *ja = json_loads(a, JSON_DECODE_INT_AS_REAL, NULL);
  json_t *jb = json_loads(b, JSON_DECODE_INT_AS_REAL, NULL);
  int eq = ja != NULL && jb != NULL && json_equal(ja, jb);

  json_decref(ja);
  json_decref(jb);
  return eq;
}

/* ---- Vectors from protobuf-es ------------------------------------------- */

static void run_vector(const json_t *v, size_t idx) {
  const char *type = json_string_value(json_object_get(v, "type"));
  const char *in = json_string_value(json_object_get(v, "json"));
  int es_ok = json_is_true(json_object_get(v, "ok"));
  const json_t *eok = json_object_get(v, "expect_ok");
  int want_ok = eok != NULL ? json_is_true(eok) : es_ok;
  const char *canon = json_string_value(json_object_get(v, "expect_canon"));
  int map_order = json_is_true(json_object_get(v, "map_order")) ||
                  json_is_true(json_object_get(v, "member_order"));
  const ProtobufCMessageDescriptor *d = by_name(type);
  ProtobufCMessage *m = NULL;
  ProtobufCMessage *again = NULL;
  char err[256];
  char *ours;
  char *ours2;
  int rv;

  if (canon == NULL) {
    canon = json_string_value(json_object_get(v, "canon"));
  }
  rv = decode(d, in, &m, err, sizeof(err));
  if (getenv("PBJSON_VERBOSE") != NULL) {
    print_message("%zu %s %s -> %d %s\n", idx, type, in, rv, err);
  }
  if (!want_ok) {
    if (rv == 0) {
      fail_msg("vector %zu: %s %s decoded; expected an error", idx, type, in);
    }
    assert_int_equal(rv, CONCH_ERR_CODEC);
    assert_null(m);
    assert_true(err[0] != '\0');
    return;
  }
  if (rv != 0) {
    fail_msg("vector %zu: %s %s: %d %s", idx, type, in, rv, err);
  }
  assert_non_null(canon);
  ours = encode_ok(m);
  if (map_order ? !same_json(ours, canon) : strcmp(ours, canon) != 0) {
    fail_msg("vector %zu: %s %s\n  got  %s\n  want %s", idx, type, in, ours,
             canon);
  }
  /* What protobuf-es decoded (its binary form, through protobuf-c) is what
     we decoded. */
  if (es_ok && !json_is_true(json_object_get(v, "bin_differs"))) {
    size_t n;
    uint8_t *bin = unhex(json_string_value(json_object_get(v, "bin")), &n);
    ProtobufCMessage *es = protobuf_c_message_unpack(d, NULL, n, bin);
    char *es_json;

    assert_non_null(es);
    es_json = encode_ok(es);
    if (strcmp(es_json, ours) != 0) {
      fail_msg("vector %zu: %s %s\n  ours     %s\n  es's     %s", idx, type, in,
               ours, es_json);
    }
    free(es_json);
    protobuf_c_message_free_unpacked(es, NULL);
    free(bin);
  }
  /* Our output reads back to the same message. */
  again = decode_ok(d, ours);
  ours2 = encode_ok(again);
  if (!json_is_true(json_object_get(v, "lossy"))) {
    assert_string_equal(ours, ours2);
  }
  /* So does the binary form of what we decoded. */
  {
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *bin = malloc(n + 1);
    ProtobufCMessage *back;
    char *s;

    assert_non_null(bin);
    assert_int_equal(protobuf_c_message_pack(m, bin), n);
    back = protobuf_c_message_unpack(d, NULL, n, bin);
    assert_non_null(back);
    s = encode_ok(back);
    assert_string_equal(s, ours);
    free(s);
    protobuf_c_message_free_unpacked(back, NULL);
    free(bin);
  }
  free(ours);
  free(ours2);
  protobuf_c_message_free_unpacked(again, NULL);
  protobuf_c_message_free_unpacked(m, NULL);
}

static void test_vectors(void **state) {
  char path[4096];
  const char *slash = strrchr(__FILE__, '/');
  json_error_t je;
  json_t *root;
  json_t *vecs;
  size_t i;
  size_t nok = 0;

  (void)state;
  snprintf(path, sizeof(path), "%.*s/pbjson/vectors.json",
           slash != NULL ? (int)(slash - __FILE__) : 1,
           slash != NULL ? __FILE__ : ".");
  root = json_load_file(path, 0, &je);
  if (root == NULL) {
    fail_msg("%s: %s", path, je.text);
  }
  vecs = json_object_get(root, "vectors");
  assert_true(json_array_size(vecs) > 150);
  for (i = 0; i < json_array_size(vecs); i++) {
    plain_only = 0;
    run_vector(json_array_get(vecs, i), i);
    plain_only = 1;
    run_vector(json_array_get(vecs, i), i);
    nok += json_is_true(json_object_get(json_array_get(vecs, i), "ok"));
  }
  plain_only = 0;
  print_message("%zu vectors, %zu accepted by protobuf-es\n",
                json_array_size(vecs), nok);
  json_decref(root);
}

/* ---- process.proto as conch serve writes it ------------------------------ */

static void test_process_events(void **state) {
  Process__StartResponse r = PROCESS__START_RESPONSE__INIT;
  Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
  Process__ProcessEvent__StartEvent se =
      PROCESS__PROCESS_EVENT__START_EVENT__INIT;
  Process__ProcessEvent__DataEvent de =
      PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
  Process__ProcessEvent__EndEvent ee = PROCESS__PROCESS_EVENT__END_EVENT__INIT;
  Process__ProcessEvent__KeepAlive ka =
      PROCESS__PROCESS_EVENT__KEEP_ALIVE__INIT;
  char *s;

  (void)state;
  r.event = &ev;
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_START;
  ev.start = &se;
  se.pid = 4242;
  s = encode_ok(&r.base);
  assert_string_equal(s, "{\"event\":{\"start\":{\"pid\":4242}}}");
  free(s);

  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
  ev.data = &de;
  de.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
  de.stdout.data = (uint8_t *)"hello\n";
  de.stdout.len = 6;
  s = encode_ok(&r.base);
  assert_string_equal(s, "{\"event\":{\"data\":{\"stdout\":\"aGVsbG8K\"}}}");
  free(s);
  de.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY;
  de.pty.data = (uint8_t *)"\xff\xfe";
  de.pty.len = 2;
  s = encode_ok(&r.base);
  assert_string_equal(s, "{\"event\":{\"data\":{\"pty\":\"//4=\"}}}");
  free(s);

  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_END;
  ev.end = &ee;
  ee.exit_code = -1;
  ee.status = "signal: killed";
  ee._error_case = PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR;
  ee.error = "signal: killed";
  s = encode_ok(&r.base);
  assert_string_equal(s, "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":"
                         "\"signal: killed\",\"error\":\"signal: killed\"}}}");
  free(s);
  ee.exit_code = 0;
  ee.exited = 1;
  ee.status = "exit status 0";
  ee._error_case = PROCESS__PROCESS_EVENT__END_EVENT___ERROR__NOT_SET;
  s = encode_ok(&r.base);
  assert_string_equal(
      s,
      "{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status 0\"}}}");
  free(s);

  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_KEEPALIVE;
  ev.keepalive = &ka;
  s = encode_ok(&r.base);
  assert_string_equal(s, "{\"event\":{\"keepalive\":{}}}");
  free(s);

  /* A selected oneof member with a NULL message is not set (protobuf-c
     does not pack it either). */
  ev.keepalive = NULL;
  s = encode_ok(&r.base);
  assert_string_equal(s, "{\"event\":{}}");
  free(s);
}

static void test_process_requests(void **state) {
  Process__StartRequest *req;
  Process__SendSignalRequest *sig;
  Process__StreamInputRequest *in;

  (void)state;
  /* What the E2B SDK sends for commands.run(). */
  req = (Process__StartRequest *)decode_ok(
      &process__start_request__descriptor,
      "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo "
      "hi\"],\"envs\":{\"A\":\"b\"},\"cwd\":\"\"},\"stdin\":false,"
      "\"unknownField\":{\"x\":[1,2]}}");
  assert_string_equal(req->process->cmd, "/bin/bash");
  assert_int_equal(req->process->n_args, 3);
  assert_string_equal(req->process->args[2], "echo hi");
  assert_int_equal(req->process->n_envs, 1);
  assert_string_equal(req->process->envs[0]->key, "A");
  assert_string_equal(req->process->envs[0]->value, "b");
  assert_int_equal(req->process->_cwd_case, PROCESS__PROCESS_CONFIG___CWD_CWD);
  assert_string_equal(req->process->cwd, "");
  assert_int_equal(req->_stdin_case, PROCESS__START_REQUEST___STDIN_STDIN);
  assert_false(req->stdin);
  assert_int_equal(req->_pty_case, PROCESS__START_REQUEST___PTY__NOT_SET);
  assert_int_equal(req->_tag_case, PROCESS__START_REQUEST___TAG__NOT_SET);
  protobuf_c_message_free_unpacked(&req->base, NULL);

  sig = (Process__SendSignalRequest *)decode_ok(
      &process__send_signal_request__descriptor,
      "{\"process\":{\"tag\":\"t\"},\"signal\":\"SIGNAL_SIGTERM\"}");
  assert_int_equal(sig->signal, PROCESS__SIGNAL__SIGNAL_SIGTERM);
  assert_int_equal(sig->process->selector_case,
                   PROCESS__PROCESS_SELECTOR__SELECTOR_TAG);
  assert_string_equal(sig->process->tag, "t");
  protobuf_c_message_free_unpacked(&sig->base, NULL);

  in = (Process__StreamInputRequest *)decode_ok(
      &process__stream_input_request__descriptor,
      "{\"data\":{\"input\":{\"stdin\":\"AAEC\"}}}");
  assert_int_equal(in->event_case, PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA);
  assert_int_equal(in->data->input->input_case,
                   PROCESS__PROCESS_INPUT__INPUT_STDIN);
  assert_int_equal(in->data->input->stdin.len, 3);
  assert_memory_equal(in->data->input->stdin.data, "\x00\x01\x02", 3);
  protobuf_c_message_free_unpacked(&in->base, NULL);
}

/* ---- Encoding details ------------------------------------------------------
 */

static void check_double(double v, const char *want) {
  Pbjsontest__Scalars m = PBJSONTEST__SCALARS__INIT;
  char buf[128];
  char *s;

  m.db = v;
  s = encode_ok(&m.base);
  snprintf(buf, sizeof(buf), "{\"db\":%s}", want);
  if (strcmp(s, buf) != 0) {
    fail_msg("%.17g: got %s, want %s", v, s, buf);
  }
  free(s);
}

static void check_float(float v, const char *want) {
  Pbjsontest__Scalars m = PBJSONTEST__SCALARS__INIT;
  char buf[128];
  char *s;

  m.fl = v;
  s = encode_ok(&m.base);
  snprintf(buf, sizeof(buf), "{\"fl\":%s}", want);
  if (strcmp(s, buf) != 0) {
    fail_msg("%.9g: got %s, want %s", (double)v, s, buf);
  }
  free(s);
}

/* Expected texts: Go's strconv.FormatFloat as protojson uses it. */
static void test_floats(void **state) {
  (void)state;
  check_double(1, "1");
  check_double(0.1, "0.1");
  check_double(1.0 / 3, "0.3333333333333333");
  check_double(123456789.125, "123456789.125");
  check_double(1e20, "100000000000000000000");
  check_double(1e21, "1e+21");
  check_double(1.5e300, "1.5e+300");
  check_double(1e-6, "0.000001");
  check_double(9.99e-7, "9.99e-7");
  check_double(1e-7, "1e-7");
  check_double(1.2e-10, "1.2e-10");
  check_double(5e-324, "5e-324");
  check_double(1.7976931348623157e308, "1.7976931348623157e+308");
  check_double(-2.5, "-2.5");
  check_double(NAN, "\"NaN\"");
  check_double(INFINITY, "\"Infinity\"");
  check_double(-INFINITY, "\"-Infinity\"");
  check_float(0.1f, "0.1");
  check_float(1.0f / 3, "0.33333334");
  check_float(16777216.0f, "16777216");
  check_float(3.4028235e38f, "3.4028235e+38");
  check_float(1e-45f, "1e-45");
  check_float(1.17549435e-38f, "1.1754944e-38");
  check_float(1e21f, "1e+21");
  check_float(1e20f, "100000000000000000000");
  check_float(NAN, "\"NaN\"");
  /* Float fields round once from strings, and clamp what rounds to
     FLT_MAX rather than to infinity (Go's ParseFloat(s, 32)). */
  check_json(&pbjsontest__scalars__descriptor, "{\"fl\":3.4028235677973362e38}",
             "{\"fl\":3.4028235e+38}");
  check_error(&pbjsontest__scalars__descriptor,
              "{\"fl\":3.4028235677973366e38}", CONCH_ERR_CODEC,
              "out of range");
  check_json(&pbjsontest__scalars__descriptor, "{\"fl\":\"1e-50\"}", "{}");
  /* Negative zero: the default where there is no presence (as protobuf-c
     packs it), "-0.0" where it is written (jansson reads "-0" as 0). */
  check_json(&pbjsontest__scalars__descriptor, "{\"db\":-0.0,\"fl\":-0.0}",
             "{}");
  check_json(&pbjsontest__oneofs__descriptor, "{\"dbl\":-0.0}",
             "{\"dbl\":-0.0}");
  check_json(&pbjsontest__repeats__descriptor, "{\"fl\":[-0.0,0]}",
             "{\"fl\":[-0.0,0]}");
  check_json(&pbjsontest__oneofs__descriptor, "{\"dbl\":-0}", "{\"dbl\":0}");
}

static void test_strings(void **state) {
  Pbjsontest__Scalars m = PBJSONTEST__SCALARS__INIT;
  conch_buf b = CONCH_BUF_INIT;
  char err[256];
  char *s;
  int rv;

  (void)state;
  m.s = "\x01\x1f\x7f\"\\/\b\f\n\r\t\xe2\x80\xa8\xef\xbf\xbd";
  s = encode_ok(&m.base);
  assert_string_equal(s, "{\"s\":\"\\u0001\\u001f\x7f\\\"\\\\/\\b\\f\\n\\r\\t"
                         "\xe2\x80\xa8\xef\xbf\xbd\"}");
  free(s);
  /* Not UTF-8: refused, and the buffer keeps what it held. */
  {
    static const char *const bad[] = {
        "\xff",         "\xc0\x80",         "\xe0\x80\x80",
        "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
        "a\xc3",        "\xe2\x82"};
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
      m.s = (char *)bad[i];
      assert_int_equal(conch__buf_append(&b, conch_mem_default(), "abc", 3), 0);
      rv = conch__pbjson_encode(&m.base, NULL, &b, err, sizeof(err));
      assert_int_equal(rv, CONCH_ERR_CODEC);
      assert_non_null(strstr(err, "pbjsontest.Scalars.s"));
      assert_non_null(strstr(err, "UTF-8"));
      assert_int_equal(conch__buf_size(&b), 3);
      assert_memory_equal(conch__buf_head(&b), "abc", 3);
      conch__buf_reset(&b);
    }
  }
  /* Appends after what the buffer holds. */
  m.s = "x";
  assert_int_equal(conch__buf_append(&b, conch_mem_default(), "[", 1), 0);
  assert_int_equal(conch__pbjson_encode(&m.base, NULL, &b, err, sizeof(err)),
                   0);
  assert_int_equal(conch__buf_size(&b), strlen("[{\"s\":\"x\"}"));
  assert_memory_equal(conch__buf_head(&b), "[{\"s\":\"x\"}",
                      conch__buf_size(&b));
  conch__buf_free(&b, conch_mem_default());
  /* A map key must be UTF-8 too. */
  {
    Process__ProcessConfig pc = PROCESS__PROCESS_CONFIG__INIT;
    Process__ProcessConfig__EnvsEntry e =
        PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT;
    Process__ProcessConfig__EnvsEntry *ents[] = {&e};

    e.key = "\xff";
    pc.n_envs = 1;
    pc.envs = ents;
    assert_null(encode(&pc.base, &rv, err, sizeof(err)));
    assert_int_equal(rv, CONCH_ERR_CODEC);
    assert_non_null(strstr(err, "EnvsEntry.key"));
  }
  /* JSON escapes decode: surrogate pairs, and names json or proto. */
  check_json(&pbjsontest__scalars__descriptor,
             "{\"s\":\"\\u00e9\\ud83d\\ude00\\n\",\"_leading\":\"a\"}",
             "{\"s\":\"\xc3\xa9\xf0\x9f\x98\x80\\n\",\"Leading\":\"a\"}");
  /* jansson refuses \u0000 (a protobuf-c string ends at NUL) and lone
     surrogates. */
  check_error(&pbjsontest__scalars__descriptor, "{\"s\":\"a\\u0000b\"}",
              CONCH_ERR_CODEC, "syntax error");
  check_error(&pbjsontest__scalars__descriptor, "{\"s\":\"\\ud800\"}",
              CONCH_ERR_CODEC, "syntax error");
  check_error(&pbjsontest__scalars__descriptor, "{\"s\":\"\xff\"}",
              CONCH_ERR_CODEC, "syntax error");
}

static void test_maps(void **state) {
  Process__ProcessConfig pc = PROCESS__PROCESS_CONFIG__INIT;
  Process__ProcessConfig__EnvsEntry e[4];
  Process__ProcessConfig__EnvsEntry *ents[4];
  static const char *const kv[][2] = {
      {"b", "1"}, {"a", "2"}, {"b", "3"}, {"", "4"}};
  Pbjsontest__Maps mm = PBJSONTEST__MAPS__INIT;
  Pbjsontest__Maps__IsEntry ie[3];
  Pbjsontest__Maps__IsEntry *ies[3];
  static const int32_t keys[] = {10, -3, 2};
  char *s;
  size_t i;

  (void)state;
  for (i = 0; i < 4; i++) {
    process__process_config__envs_entry__init(&e[i]);
    e[i].key = (char *)kv[i][0];
    e[i].value = (char *)kv[i][1];
    ents[i] = &e[i];
  }
  pc.cmd = "x";
  pc.n_envs = 4;
  pc.envs = ents;
  /* Sorted, and of a repeated key the last entry wins. */
  s = encode_ok(&pc.base);
  assert_string_equal(
      s, "{\"cmd\":\"x\",\"envs\":{\"\":\"4\",\"a\":\"2\",\"b\":\"3\"}}");
  free(s);
  for (i = 0; i < 3; i++) {
    pbjsontest__maps__is_entry__init(&ie[i]);
    ie[i].key = keys[i];
    ie[i].value = "v";
    ies[i] = &ie[i];
  }
  mm.n_is = 3;
  mm.is = ies;
  s = encode_ok(&mm.base);
  assert_string_equal(s, "{\"is\":{\"-3\":\"v\",\"2\":\"v\",\"10\":\"v\"}}");
  free(s);
  /* A NULL entry is refused rather than dereferenced. */
  {
    int rv;
    char err[128];

    ies[1] = NULL;
    assert_null(encode(&mm.base, &rv, err, sizeof(err)));
    assert_int_equal(rv, CONCH_ERR_CODEC);
    assert_non_null(strstr(err, "pbjsontest.Maps.is"));
  }
  /* Decoded map entries hold key and value; an unknown enum name drops
     the entry. */
  {
    Pbjsontest__Maps *d = (Pbjsontest__Maps *)decode_ok(
        &pbjsontest__maps__descriptor,
        "{\"bc\":{\"true\":\"COLOR_RED\",\"false\":\"X\"},\"ll\":{\"-5\":\"7\"}"
        "}");

    assert_int_equal(d->n_bc, 1);
    assert_true(d->bc[0]->key);
    assert_int_equal(d->bc[0]->value, PBJSONTEST__COLOR__COLOR_RED);
    assert_int_equal(d->n_ll, 1);
    assert_int_equal(d->ll[0]->key, -5);
    assert_int_equal(d->ll[0]->value, 7);
    protobuf_c_message_free_unpacked(&d->base, NULL);
  }
}

static void test_presence(void **state) {
  Pbjsontest__Oneofs o = PBJSONTEST__ONEOFS__INIT;
  Pbjsontest2__P2 p = PBJSONTEST2__P2__INIT;
  Pbjsontest2__P2 *d;
  char *s;

  (void)state;
  /* A selected member is written at its default. */
  o.kind_case = PBJSONTEST__ONEOFS__KIND_NUM;
  o._opt_s_case = PBJSONTEST__ONEOFS___OPT_S_OPT_S;
  o.opt_s = "";
  s = encode_ok(&o.base);
  assert_string_equal(s, "{\"num\":0,\"optS\":\"\"}");
  free(s);
  /* proto2: has_ flags, and a string at its default pointer is unset. */
  p.r = 0;
  s = encode_ok(&p.base);
  assert_string_equal(s, "{\"r\":0}");
  free(s);
  p.has_a = 1;
  p.has_d = 1;
  p.mode = PBJSONTEST2__MODE__MODE_B;
  s = encode_ok(&p.base);
  assert_string_equal(s, "{\"a\":0,\"r\":0,\"d\":1.5}");
  free(s);
  d = (Pbjsontest2__P2 *)decode_ok(&pbjsontest2__p2__descriptor,
                                   "{\"r\":3,\"mode\":\"MODE_B\",\"s\":null}");
  assert_int_equal(d->r, 3);
  assert_true(d->has_mode);
  assert_false(d->has_a);
  assert_false(d->has_d);
  assert_true(d->d == 1.5);
  assert_string_equal(d->s, "dflt"); /* the default, not freed */
  protobuf_c_message_free_unpacked(&d->base, NULL);
  d = (Pbjsontest2__P2 *)decode_ok(&pbjsontest2__p2__descriptor,
                                   "{\"r\":3,\"s\":\"dflt\",\"m\":{\"k\":0}}");
  assert_string_equal(d->s, "dflt"); /* a copy: freed */
  assert_int_equal(d->n_m, 1);
  assert_string_equal(d->m[0]->key, "k");
  assert_true(d->m[0]->has_value);
  protobuf_c_message_free_unpacked(&d->base, NULL);
}

/* ---- Decoding details ------------------------------------------------------
 */

static void test_errors(void **state) {
  const ProtobufCMessageDescriptor *S = &pbjsontest__scalars__descriptor;

  (void)state;
  check_error(&process__connect_request__descriptor,
              "{\"process\":{\"pid\":\"x\"}}", CONCH_ERR_CODEC,
              "field process.ProcessSelector.pid: invalid value for uint32");
  check_error(&process__connect_request__descriptor,
              "{\"process\":{\"pid\":1,\"tag\":\"a\"}}", CONCH_ERR_CODEC,
              "field process.ProcessSelector.tag: its oneof already has a "
              "value (field pid)");
  check_error(&process__start_request__descriptor, "{\"process\":{\"cmd\":[]}}",
              CONCH_ERR_CODEC,
              "field process.ProcessConfig.cmd: expected a string, got an "
              "array");
  check_error(&process__start_request__descriptor, "{\"process\":[]}",
              CONCH_ERR_CODEC,
              "field process.StartRequest.process: expected an object");
  check_error(&process__start_request__descriptor,
              "{\"process\":{\"envs\":[]}}", CONCH_ERR_CODEC,
              "field process.ProcessConfig.envs: expected an object (a map)");
  check_error(&process__start_request__descriptor,
              "{\"process\":{\"envs\":{\"A\":1}}}", CONCH_ERR_CODEC,
              "field process.ProcessConfig.envs: key \"A\": expected a "
              "string, got a number");
  check_error(&process__start_request__descriptor,
              "{\"process\":{\"envs\":{\"A\":null}}}", CONCH_ERR_CODEC,
              "field process.ProcessConfig.envs: key \"A\": the value is "
              "null");
  check_error(&pbjsontest__maps__descriptor, "{\"sm\":{\"k\":{\"i32\":\"x\"}}}",
              CONCH_ERR_CODEC,
              "field pbjsontest.Scalars.i32: invalid value for int32: \"x\"");
  check_error(&process__start_request__descriptor,
              "{\"process\":{\"args\":\"a\"}}", CONCH_ERR_CODEC,
              "field process.ProcessConfig.args: expected an array");
  check_error(&process__send_input_request__descriptor,
              "{\"input\":{\"stdin\":\"***\"}}", CONCH_ERR_CODEC,
              "field process.ProcessInput.stdin: invalid base64");
  check_error(&process__send_signal_request__descriptor, "{\"signal\":{}}",
              CONCH_ERR_CODEC,
              "field process.SendSignalRequest.signal: invalid value for "
              "enum process.Signal");
  check_error(S, "{\"snake_case_name\":\"a\",\"snakeCaseName\":\"b\"}",
              CONCH_ERR_CODEC, "duplicate field");
  check_error(S, "{\"i32\":1,\"i32\":1}", CONCH_ERR_CODEC, "duplicate");
  check_error(S, "{\"i32\":1.5}", CONCH_ERR_CODEC, "1.5 is not an integer");
  check_error(S, "{\"u32\":-1}", CONCH_ERR_CODEC,
              "-1 is out of range for uint32");
  check_error(S, "{\"by\":true}", CONCH_ERR_CODEC,
              "expected base64 bytes (a string), got true");
  check_error(S, "{\"b\":0}", CONCH_ERR_CODEC, "expected true or false");
  check_error(S, "", CONCH_ERR_CODEC, "syntax error (line 1:0)");
  check_error(S, "[1]", CONCH_ERR_CODEC,
              "pbjsontest.Scalars: expected a JSON object, got an array");
  check_error(S, "{\"child\":{\"child\":{\"u64\":\"-1\"}}}", CONCH_ERR_CODEC,
              "field pbjsontest.Scalars.u64: \"-1\" is out of range");
  check_error(&pbjsontest__repeats__descriptor, "{\"msg\":[{},null]}",
              CONCH_ERR_CODEC,
              "field pbjsontest.Repeats.msg: element 1 is "
              "null");
  check_error(&pbjsontest__maps__descriptor,
              "{\"is\":{\"1\":\"a\",\"x\":\"b\"}}", CONCH_ERR_CODEC,
              "field pbjsontest.Maps.is: key \"x\": not a valid int32 map key");
  check_error(&pbjsontest2__p2__descriptor, "{\"a\":1}", CONCH_ERR_CODEC,
              "field pbjsontest2.P2.r: required field not set");
}

static void test_numbers(void **state) {
  const ProtobufCMessageDescriptor *S = &pbjsontest__scalars__descriptor;

  (void)state;
  /* Exact at every size jansson hands over as an integer. */
  check_json(
      S, "{\"i64\":9007199254740993,\"sf64\":-9223372036854775808}",
      "{\"i64\":\"9007199254740993\",\"sf64\":\"-9223372036854775808\"}");
  check_json(S, "{\"u64\":9223372036854775807}",
             "{\"u64\":\"9223372036854775807\"}");
  /* Past int64, jansson has only doubles: exact up to 2^53, refused above
     rather than rounded. */
  check_error(S, "{\"u64\":10000000000000000000}", CONCH_ERR_CODEC,
              "must be written as plain integers or strings");
  check_error(S, "{\"u64\":18446744073709551615}", CONCH_ERR_CODEC,
              "out of range for uint64");
  check_error(S, "{\"i64\":1.2e18}", CONCH_ERR_CODEC,
              "must be written as plain integers or strings");
  check_json(S, "{\"u64\":\"18446744073709551615\",\"i32\":5e0}",
             "{\"i32\":5,\"u64\":\"18446744073709551615\"}");
  check_json(S, "{\"i32\":-2147483648,\"u32\":\"4294967295\"}",
             "{\"i32\":-2147483648,\"u32\":4294967295}");
  /* A huge integer elsewhere does not spoil the document; a real past
     the double range does (jansson refuses it), unlike in protojson. */
  check_error(S, "{\"x\":1e999999,\"i32\":1}", CONCH_ERR_CODEC, "syntax error");
  check_json(S, "{\"x\":123456789012345678901234567890,\"i32\":\"7\"}",
             "{\"i32\":7}");
  check_json(S, "{\"i64\":\"0e999999999\",\"u64\":\"0.000\"}", "{}");
  check_error(S, "{\"u64\":\"00\"}", CONCH_ERR_CODEC, "invalid value");
  check_error(S, "{\"i64\":\"1e-9999999999\"}", CONCH_ERR_CODEC,
              "is not an integer");
  check_error(S, "{\"u64\":\"1e20\"}", CONCH_ERR_CODEC, "out of range");
  check_json(S, "{\"u64\":\"10000000000000000000e0\"}",
             "{\"u64\":\"10000000000000000000\"}");
  check_json(S, "{\"u64\":\"100000000000000000000e-1\"}",
             "{\"u64\":\"10000000000000000000\"}");
  check_json(S, "{\"db\":\"-1.5E+3\",\"fl\":\"2.5e-1\"}",
             "{\"fl\":0.25,\"db\":-1500}");
  check_json(S, "{\"color\":1e0}", "{\"color\":\"COLOR_RED\"}");
}

/* |depth| "child" levels below the top. */
static char *nested(size_t depth) {
  char *json = malloc(depth * 10 + 8);
  size_t o = 0;
  size_t i;

  assert_non_null(json);
  for (i = 0; i < depth; i++) {
    memcpy(json + o, "{\"child\":", 9);
    o += 9;
  }
  memcpy(json + o, "{}", 2);
  o += 2;
  memset(json + o, '}', depth);
  o += depth;
  json[o] = '\0';
  return json;
}

static void test_nesting(void **state) {
  const ProtobufCMessageDescriptor *S = &pbjsontest__scalars__descriptor;
  ProtobufCMessage *m = NULL;
  char err[256];
  char *json;

  (void)state;
  /* 1000 levels below the top decode and encode again; 1001 do not. */
  json = nested(1001);
  assert_int_equal(decode(S, json, &m, err, sizeof(err)), CONCH_ERR_CODEC);
  assert_non_null(strstr(err, "nested more than 1000 deep"));
  free(json);
  json = nested(1000);
  assert_int_equal(decode(S, json, &m, err, sizeof(err)), 0);
  free(encode_ok(m));
  protobuf_c_message_free_unpacked(m, NULL);
  free(json);
}

/* Expects |m| refused by the encoder with CONCH_ERR_CODEC, the message
   containing |part|. */
static void check_enc_error(const ProtobufCMessage *m, const char *part) {
  char err[256];
  int rv;
  char *s = encode(m, &rv, err, sizeof(err));

  if (s != NULL) {
    fail_msg("%s encoded as %s; expected \"%s\"", m->descriptor->name, s, part);
  }
  assert_int_equal(rv, CONCH_ERR_CODEC);
  if (strstr(err, part) == NULL) {
    fail_msg("\"%s\" lacks \"%s\"", err, part);
  }
}

static void check_ts(int64_t secs, int32_t nanos, const char *want) {
  Google__Protobuf__Timestamp t = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  char *s;

  t.seconds = secs;
  t.nanos = nanos;
  s = encode_ok(&t.base);
  assert_string_equal(s, want);
  free(s);
}

static void check_dur(int64_t secs, int32_t nanos, const char *want) {
  Google__Protobuf__Duration t = GOOGLE__PROTOBUF__DURATION__INIT;
  char *s;

  t.seconds = secs;
  t.nanos = nanos;
  s = encode_ok(&t.base);
  assert_string_equal(s, want);
  free(s);
}

static void test_time(void **state) {
  Google__Protobuf__Timestamp t = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
  Google__Protobuf__Timestamp *td;

  (void)state;
  check_ts(0, 0, "\"1970-01-01T00:00:00Z\"");
  check_ts(-1, 500000000, "\"1969-12-31T23:59:59.500Z\"");
  check_ts(951782400, 1000, "\"2000-02-29T00:00:00.000001Z\"");
  check_ts(1, 1, "\"1970-01-01T00:00:01.000000001Z\"");
  check_ts(INT64_C(-62135596800), 0, "\"0001-01-01T00:00:00Z\"");
  check_ts(INT64_C(253402300799), 999999999,
           "\"9999-12-31T23:59:59.999999999Z\"");
  t.seconds = INT64_C(-62135596801);
  check_enc_error(&t.base, "google.protobuf.Timestamp: seconds "
                           "-62135596801 out of range");
  t.seconds = INT64_C(253402300800);
  check_enc_error(&t.base, "out of range");
  t.seconds = 0;
  t.nanos = -1;
  check_enc_error(&t.base, "nanos -1 out of range");
  t.nanos = 1000000000;
  check_enc_error(&t.base, "nanos 1000000000 out of range");
  check_dur(0, 0, "\"0s\"");
  check_dur(0, -500000000, "\"-0.500s\"");
  check_dur(-3, -10000, "\"-3.000010s\"");
  check_dur(INT64_C(315576000000), 999999999, "\"315576000000.999999999s\"");
  d.seconds = 1;
  d.nanos = -1;
  check_enc_error(&d.base, "signs of seconds and nanos do not match");
  d.seconds = -1;
  d.nanos = 1;
  check_enc_error(&d.base, "signs of seconds and nanos do not match");
  d.seconds = 0;
  d.nanos = -1000000000;
  check_enc_error(&d.base, "nanos -1000000000 out of range");
  d.seconds = INT64_C(-315576000001);
  d.nanos = 0;
  check_enc_error(&d.base, "seconds -315576000001 out of range");
  /* Decoded: offsets and fractions normalised. */
  td = (Google__Protobuf__Timestamp *)decode_ok(
      &google__protobuf__timestamp__descriptor,
      "\"1970-01-01T00:00:00.25-01:30\"");
  assert_int_equal(td->seconds, 5400);
  assert_int_equal(td->nanos, 250000000);
  protobuf_c_message_free_unpacked(&td->base, NULL);
  check_error(&pbjsontest__wkt__descriptor,
              "{\"child\":{\"ts\":\"1970-01-01T00:00:00\"}}", CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.ts: invalid google.protobuf.Timestamp "
              "value \"1970-01-01T00:00:00\"");
  check_error(&pbjsontest__wkt__descriptor, "{\"dur\":\"315576000001s\"}",
              CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.dur: \"315576000001s\" out of range");
  check_error(&pbjsontest__wkt__descriptor, "{\"dur\":1}", CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.dur: expected a string "
              "(google.protobuf.Duration), got a number");
}

static void test_struct(void **state) {
  Google__Protobuf__Value v = GOOGLE__PROTOBUF__VALUE__INIT;
  Google__Protobuf__ListValue l = GOOGLE__PROTOBUF__LIST_VALUE__INIT;
  Google__Protobuf__Value *vs[2];
  Google__Protobuf__FieldMask fm = GOOGLE__PROTOBUF__FIELD_MASK__INIT;
  char *paths[2];
  Pbjsontest__Wkt *w;
  char *s;

  (void)state;
  /* protojson refuses a Value without a kind and non-finite numbers. */
  check_enc_error(&v.base, "google.protobuf.Value: none of the oneof fields "
                           "is set");
  v.kind_case = GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE;
  v.number_value = NAN;
  check_enc_error(&v.base, "number_value: nan cannot be written");
  v.number_value = -0.5;
  vs[0] = &v;
  vs[1] = NULL;
  l.n_values = 1;
  l.values = vs;
  s = encode_ok(&l.base);
  assert_string_equal(s, "[-0.5]");
  free(s);
  l.n_values = 2;
  check_enc_error(&l.base, "element 1 is NULL");
  /* Decoded: null where a Value goes is a Value holding null. */
  w = (Pbjsontest__Wkt *)decode_ok(
      &pbjsontest__wkt__descriptor,
      "{\"val\":null,\"vals\":[null,\"NaN\",2],\"oNull\":null,"
      "\"st\":{\"k\":null}}");
  assert_non_null(w->val);
  assert_int_equal(w->val->kind_case, GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  assert_int_equal(w->n_vals, 3);
  assert_int_equal(w->vals[1]->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE);
  assert_string_equal(w->vals[1]->string_value, "NaN");
  assert_true(w->vals[2]->number_value == 2);
  assert_int_equal(w->kind_case, PBJSONTEST__WKT__KIND_O_NULL);
  assert_int_equal(w->st->n_fields, 1);
  assert_int_equal(w->st->fields[0]->value->kind_case,
                   GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  check_error(&pbjsontest__wkt__descriptor, "{\"vals\":null}", CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.vals: expected an array, got null");
  check_error(&pbjsontest__wkt__descriptor, "{\"st\":[]}", CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.st: expected an object "
              "(google.protobuf.Struct), got an array");
  check_error(&pbjsontest__wkt__descriptor, "{\"i32\":\"x\"}", CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.i32: invalid value for int32: \"x\"");
  check_error(&pbjsontest__wkt__descriptor, "{\"child\":{\"bo\":1}}",
              CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.bo: expected true or false, got a number");
  check_error(&pbjsontest__wkt__descriptor, "{\"i32s\":[null]}",
              CONCH_ERR_CODEC, "field pbjsontest.Wkt.i32s: element 0 is null");
  /* FieldMask: only paths whose lowerCamelCase form reads back. */
  paths[0] = "foo_bar.baz";
  paths[1] = "x";
  fm.n_paths = 2;
  fm.paths = paths;
  s = encode_ok(&fm.base);
  assert_string_equal(s, "\"fooBar.baz,x\"");
  free(s);
  paths[1] = "fooBar";
  check_enc_error(&fm.base, "irreversible value \"fooBar\"");
  paths[1] = "foo__bar";
  check_enc_error(&fm.base, "irreversible value \"foo__bar\"");
  paths[1] = "a_1";
  check_enc_error(&fm.base, "irreversible value \"a_1\"");
  paths[1] = "a b";
  check_enc_error(&fm.base, "invalid path: \"a b\"");
  paths[1] = "";
  check_enc_error(&fm.base, "invalid path: \"\"");
  check_error(&pbjsontest__wkt__descriptor, "{\"fm\":\"a,foo_bar\"}",
              CONCH_ERR_CODEC,
              "field pbjsontest.Wkt.fm: google.protobuf.FieldMask.paths "
              "contains invalid path: \"foo_bar\"");
}

/* Any: resolved by the caller's resolver, or built in for the well-known
   types; an unknown URL is an error naming it. */
static void test_any(void **state) {
  Google__Protobuf__Any a = GOOGLE__PROTOBUF__ANY__INIT;
  Pbjsontest__Scalars sc = PBJSONTEST__SCALARS__INIT;
  uint8_t buf[64];
  ProtobufCMessage *m = NULL;
  conch_buf b = CONCH_BUF_INIT;
  char err[256];
  const char *json = "{\"any\":{\"@type\":\"type.googleapis.com/google."
                     "protobuf.Timestamp\",\"value\":\"1970-01-01T00:00:01Z\"}"
                     ",\"anys\":[{\"@type\":\"x/google.protobuf.Struct\","
                     "\"value\":{\"a\":[true]}}]}";
  char *s;

  (void)state;
  /* No options: the well-known types still resolve. */
  assert_int_equal(conch__pbjson_decode(&pbjsontest__wkt__descriptor,
                                        (const uint8_t *)json, strlen(json),
                                        NULL, &m, err, sizeof(err)),
                   0);
  assert_int_equal(conch__pbjson_encode(m, NULL, &b, err, sizeof(err)), 0);
  assert_int_equal(conch__buf_size(&b), strlen(json));
  assert_memory_equal(conch__buf_head(&b), json, strlen(json));
  conch__buf_free(&b, conch_mem_default());
  {
    Pbjsontest__Wkt *w = (Pbjsontest__Wkt *)m;

    assert_string_equal(w->any->type_url,
                        "type.googleapis.com/google.protobuf.Timestamp");
    assert_int_equal(w->any->value.len, 2);
    assert_memory_equal(w->any->value.data, "\x08\x01", 2);
  }
  protobuf_c_message_free_unpacked(m, NULL);
  json = "{\"any\":{\"@type\":\"type.googleapis.com/pbjsontest.Scalars\"}}";
  assert_int_equal(conch__pbjson_decode(&pbjsontest__wkt__descriptor,
                                        (const uint8_t *)json, strlen(json),
                                        NULL, &m, err, sizeof(err)),
                   CONCH_ERR_CODEC);
  assert_string_equal(err, "field pbjsontest.Wkt.any: google.protobuf.Any: "
                           "cannot resolve type URL \"type.googleapis.com/"
                           "pbjsontest.Scalars\"");
  /* Encoding. */
  sc.i32 = 7;
  a.type_url = "type.googleapis.com/pbjsontest.Scalars";
  a.value.data = buf;
  a.value.len = pbjsontest__scalars__pack(&sc, buf);
  s = encode_ok(&a.base);
  assert_string_equal(
      s, "{\"@type\":\"type.googleapis.com/pbjsontest.Scalars\",\"i32\":7}");
  free(s);
  assert_int_equal(conch__pbjson_encode(&a.base, NULL, &b, err, sizeof(err)),
                   CONCH_ERR_CODEC);
  assert_string_equal(err, "google.protobuf.Any: cannot resolve type URL "
                           "\"type.googleapis.com/pbjsontest.Scalars\"");
  assert_int_equal(conch__buf_size(&b), 0);
  a.value.data = (uint8_t *)"\xff";
  a.value.len = 1;
  check_enc_error(&a.base, "cannot unpack the value of \"type.googleapis.com/"
                           "pbjsontest.Scalars\" (1 bytes)");
  a.type_url = "";
  check_enc_error(&a.base, "google.protobuf.Any: type_url is not set");
  a.value.len = 0;
  s = encode_ok(&a.base);
  assert_string_equal(s, "{}");
  free(s);
  a.type_url = "type.googleapis.com/google.protobuf.Duration";
  s = encode_ok(&a.base);
  assert_string_equal(s, "{\"@type\":\"type.googleapis.com/google.protobuf."
                         "Duration\",\"value\":\"0s\"}");
  free(s);
  check_error(&pbjsontest__wkt__descriptor,
              "{\"any\":{\"@type\":\"t/google.protobuf.Duration\"}}",
              CONCH_ERR_CODEC,
              "google.protobuf.Any: missing \"value\" for "
              "google.protobuf.Duration");
  check_error(&pbjsontest__wkt__descriptor,
              "{\"any\":{\"@type\":\"t/google.protobuf.Duration\","
              "\"value\":\"1m\"}}",
              CONCH_ERR_CODEC,
              "invalid google.protobuf.Duration value "
              "\"1m\"");
  check_error(&pbjsontest__wkt__descriptor, "{\"any\":{\"@type\":7}}",
              CONCH_ERR_CODEC, "@type must be a non-empty string");
}

/* Recognised by name and layout; other google.protobuf messages take the
   generic form. */
static void test_well_known(void **state) {
  ProtobufCMessageDescriptor wkt = pbjsontest__scalars__descriptor;
  Pbjsontest__Scalars m = PBJSONTEST__SCALARS__INIT;
  ProtobufCMessage *out = NULL;
  char err[256];
  char *s;

  (void)state;
  wkt.name = "google.protobuf.Timestamp";
  wkt.package_name = "google.protobuf";
  m.base.descriptor = &wkt;
  check_enc_error(&m.base, "google.protobuf.Timestamp: the descriptor does "
                           "not have the well-known layout");
  assert_int_equal(
      decode(&wkt, "\"1970-01-01T00:00:00Z\"", &out, err, sizeof(err)),
      CONCH_ERR_CODEC);
  assert_null(out);
  wkt.name = "google.protobuf.Api";
  m.i32 = 3;
  s = encode_ok(&m.base);
  assert_string_equal(s, "{\"i32\":3}");
  free(s);
  out = decode_ok(&wkt, "{\"i32\":4}");
  assert_int_equal(((Pbjsontest__Scalars *)out)->i32, 4);
  protobuf_c_message_free_unpacked(out, NULL);
  check_error(&wkt, "3", CONCH_ERR_CODEC,
              "google.protobuf.Api: expected a JSON object, got a number");
  wkt.name = "google.protobuf.Empty";
  assert_int_equal(decode(&wkt, "{\"i32\":1}", &out, err, sizeof(err)), 0);
  protobuf_c_message_free_unpacked(out, NULL);
}

/* |n| levels of {"a": ... } around 1. */
static char *nested_struct(size_t n) {
  char *json = malloc(n * 6 + 2);
  size_t o = 0;
  size_t i;

  assert_non_null(json);
  for (i = 0; i < n; i++) {
    memcpy(json + o, "{\"a\":", 5);
    o += 5;
  }
  json[o++] = '1';
  memset(json + o, '}', n);
  json[o + n] = '\0';
  return json;
}

/* Nesting through Struct counts as through any message: each level is a
   Struct and a Value. */
static void test_wkt_nesting(void **state) {
  const ProtobufCMessageDescriptor *V = &google__protobuf__value__descriptor;
  ProtobufCMessage *m = NULL;
  char err[256];
  char *json;

  (void)state;
  json = nested_struct(500);
  assert_int_equal(decode(V, json, &m, err, sizeof(err)), 0);
  free(encode_ok(m));
  protobuf_c_message_free_unpacked(m, NULL);
  free(json);
  json = nested_struct(501);
  assert_int_equal(decode(V, json, &m, err, sizeof(err)), CONCH_ERR_CODEC);
  assert_non_null(strstr(err, "nested more than 1000 deep"));
  free(json);
}

/* ---- Allocation ------------------------------------------------------------
 */

static void *fm_alloc(void *ud, size_t n) { return conch__malloc(ud, n); }
static void fm_free(void *ud, void *p) { conch__free(ud, p); }

static const char big_json[] =
    "{\"s\":[\"a\",\"b\",\"\"],\"by\":[\"AAE=\",\"\"],\"i64\":[1,2],"
    "\"color\":[\"BOGUS\",1],\"msg\":[{\"s\":\"x\",\"by\":\"AA==\",\"child\":"
    "{\"s\":\"y\"}},{}],\"fl\":[\"1.25\"]}";
static const char map_json[] =
    "{\"ss\":{\"a\":\"b\",\"c\":\"d\"},\"sm\":{\"k\":{\"s\":\"v\"}},"
    "\"nested\":{\"1\":{\"ub\":{\"2\":\"AQ==\"}}},\"bc\":{\"true\":\"X\"}}";

static const char wkt_json[] =
    "{\"ts\":\"1970-01-01T00:00:00Z\",\"dur\":\"1.500s\",\"str\":\"s\","
    "\"st\":{\"a\":[null,{\"b\":\"c\"}]},\"fm\":\"a.bC,d\",\"any\":{\"@type\":"
    "\"type.googleapis.com/google.protobuf.Any\",\"value\":{\"@type\":"
    "\"type.googleapis.com/pbjsontest.Scalars\",\"s\":\"x\"}},\"vals\":["
    "\"v\"]}";

/* Every allocation of a decode fails in turn: NOMEM, nothing leaked. */
static void check_decode_failmem(const ProtobufCMessageDescriptor *d,
                                 const char *json, const char *want) {
  ProtobufCAllocator a = {fm_alloc, fm_free, (void *)failmem_hooks()};
  size_t n;

  for (n = 0;; n++) {
    ProtobufCMessage *m = NULL;
    char err[128];
    int rv;

    failmem_fail_at(n);
    rv = conch__pbjson_decode_ex(d, (const uint8_t *)json, strlen(json), &opts,
                                 &a, &m, err, sizeof(err));
    if (!failmem_fired()) {
      char *s;

      assert_int_equal(rv, 0);
      s = encode_ok(m);
      assert_string_equal(s, want);
      free(s);
      protobuf_c_message_free_unpacked(m, &a);
      assert_int_equal(failmem_live_blocks(), 0);
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_null(m);
    assert_string_equal(err, "out of memory");
    assert_int_equal(failmem_live_blocks(), 0);
  }
  assert_true(n > 5);
  failmem_fail_at((size_t)-1);
}

/* Every allocation of an encode fails in turn (an Any's payload is
   unpacked with the same allocator). */
static void check_encode_failmem(const ProtobufCMessage *m) {
  size_t n;

  for (n = 0;; n++) {
    conch_buf b = CONCH_BUF_INIT;
    char err[128];
    int rv;

    failmem_fail_at((size_t)-1);
    assert_int_equal(conch__buf_append(&b, failmem_hooks(), "x", 1), 0);
    failmem_fail_at(n);
    rv = conch__pbjson_encode_ex(m, &opts, failmem_hooks(), &b, err,
                                 sizeof(err));
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      conch__buf_free(&b, failmem_hooks());
      break;
    }
    assert_int_equal(rv, CONCH_ERR_NOMEM);
    assert_int_equal(conch__buf_size(&b), 1);
    conch__buf_free(&b, failmem_hooks());
    assert_int_equal(failmem_live_blocks(), 0);
  }
  failmem_fail_at((size_t)-1);
}

static void test_alloc_failures(void **state) {
  Pbjsontest__Repeats *m;
  ProtobufCMessage *w;

  (void)state;
  check_decode_failmem(
      &pbjsontest__repeats__descriptor, big_json,
      "{\"i64\":[\"1\",\"2\"],\"fl\":[1.25],\"s\":[\"a\",\"b\",\"\"],"
      "\"by\":[\"AAE=\",\"\"],\"color\":[\"COLOR_RED\"],\"msg\":[{\"s\":"
      "\"x\",\"by\":\"AA==\",\"child\":{\"s\":\"y\"}},{}]}");
  check_decode_failmem(&pbjsontest__wkt__descriptor, wkt_json, wkt_json);
  check_decode_failmem(&pbjsontest__maps__descriptor, map_json,
                       "{\"ss\":{\"a\":\"b\",\"c\":\"d\"},\"sm\":{\"k\":{"
                       "\"s\":\"v\"}},\"nested\":{\"1\":{\"ub\":{\"2\":"
                       "\"AQ==\"}}}}");
  /* Encoding into a buffer whose allocator fails: NOMEM, buffer as it
     was. */
  m = (Pbjsontest__Repeats *)decode_ok(&pbjsontest__repeats__descriptor,
                                       big_json);
  check_encode_failmem(&m->base);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  w = decode_ok(&pbjsontest__wkt__descriptor, wkt_json);
  check_encode_failmem(w);
  protobuf_c_message_free_unpacked(w, NULL);
}

/* A 4 MiB message of empty arrays is refused before jansson builds its
   tree (~50 times the text). */
static void test_values_budget(void **state) {
  size_t n = 4u << 20;
  char *text = malloc(n + 1);
  ProtobufCMessage *m = NULL;
  char err[128];
  size_t i;

  (void)state;
  assert_non_null(text);
  memcpy(text, "{\"args\":[", 9);
  for (i = 9; i + 3 + 4 <= n; i += 3) { /* then "[]]}" and NUL */
    memcpy(text + i, "[],", 3);
  }
  memcpy(text + i, "[]]}", 5);
  assert_int_equal(conch__json_values((const uint8_t *)"[1,{\"a,\":2}]", 13),
                   5);
  assert_true(conch__json_values((const uint8_t *)text, strlen(text)) >
              CONCH_JSON_MAX_VALUES);
  assert_int_equal(conch__pbjson_decode(&process__process_config__descriptor,
                                        (const uint8_t *)text, strlen(text),
                                        NULL, &m, err, sizeof(err)),
                   CONCH_ERR_CODEC);
  assert_null(m);
  assert_string_equal(err, "more than 262144 JSON values");
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vectors),
      cmocka_unit_test(test_process_events),
      cmocka_unit_test(test_process_requests),
      cmocka_unit_test(test_floats),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_maps),
      cmocka_unit_test(test_presence),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_numbers),
      cmocka_unit_test(test_nesting),
      cmocka_unit_test(test_time),
      cmocka_unit_test(test_struct),
      cmocka_unit_test(test_any),
      cmocka_unit_test(test_well_known),
      cmocka_unit_test(test_wkt_nesting),
      cmocka_unit_test(test_alloc_failures),
      cmocka_unit_test(test_values_budget),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
