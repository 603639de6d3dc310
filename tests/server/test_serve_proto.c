/* conch serve, the protocol and the edges: /health, routing, content
   types, Connect headers, gzip both ways, malformed and oversized requests,
   floods, the access token, TLS, HTTP/1.1 clients, and shutdown. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "gzip.h"
#include "support.h"

#define SVC "/process.Process/"

static serve_peer srv;   /* defaults */
static serve_peer small; /* --max-message-bytes 65536 --retention-ms 800 */

static const char *const unary_hdrs[] = {"content-type", "application/proto",
                                         NULL};
static const char *const stream_hdrs[] = {"content-type",
                                          "application/connect+proto", NULL};

static int group_setup(void **state) {
  static const char *const small_args[] = {"--max-message-bytes", "65536",
                                           "--retention-ms", "800", NULL};

  (void)state;
  if (serve_start(&srv, NULL) != 0 || serve_start(&small, small_args) != 0) {
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  int a;
  int b;

  (void)state;
  a = serve_stop(&srv, 10000);
  b = serve_stop(&small, 10000);
  return a == 0 && b == 0 ? 0 : -1;
}

/* The server still answers a normal call. */
static void assert_serving(const serve_peer *p) {
  conch_client *c = client_new(p->url);
  run_result r;

  run_cmd(c, NULL, &r, "echo", "alive", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.out, "alive\n");
  conch_client_free(c);
}

static void assert_error(const h2_resp *r, int stream, const char *code,
                         const char *msg) {
  char c[64];
  char m[512];

  connect_error(r, stream, c, sizeof(c), m, sizeof(m));
  assert_string_equal(c, code);
  if (msg != NULL) {
    assert_string_equal(m, msg);
  }
}

/* ---- Plain HTTP ------------------------------------------------------------
 */

static void test_health_and_routing(void **state) {
  h2_resp r;

  (void)state;
  assert_int_equal(h2_request(srv.port, "GET", "/health", NULL, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 204);
  assert_int_equal(r.len, 0);
  h2_resp_free(&r);

  assert_int_equal(h2_request(srv.port, "POST", "/nope.Service/Method",
                              unary_hdrs, (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 404);
  h2_resp_free(&r);

  assert_int_equal(
      h2_request(srv.port, "GET", SVC "List", unary_hdrs, NULL, 0, &r), 0);
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.extra, "allow: POST"));
  h2_resp_free(&r);
}

/* gRPC and gRPC-Web, raw: enveloped unary calls, the status in HTTP/2
   trailers (gRPC) or in a trailer frame that ends the body (gRPC-Web). */
static void test_grpc_raw(void **state) {
  static const char *const grpc[] = {"content-type", "application/grpc",
                                     "te", "trailers", NULL};
  static const char *const web[] = {"content-type",
                                    "application/grpc-web+proto", NULL};
  static const char *const bad_timeout[] = {"content-type", "application/grpc",
                                            "grpc-timeout", "1x", NULL};
  static const char *const bad_enc[] = {"content-type", "application/grpc",
                                        "grpc-encoding", "lz4", NULL};
  Process__ListRequest req = PROCESS__LIST_REQUEST__INIT;
  uint8_t *env;
  size_t len;
  h2_resp r;
  uint32_t flen;

  (void)state;
  env = envelope(0, &req.base, &len);
  assert_non_null(env);

  /* gRPC: a response envelope, then grpc-status 0 in the trailers. */
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", grpc, env, len, &r), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/grpc");
  assert_non_null(strstr(r.extra, "grpc-status: 0\n"));
  assert_null(strstr(r.extra, "grpc-message"));
  assert_true(r.len >= 5);
  assert_int_equal(r.body[0], 0);
  memcpy(&flen, r.body + 1, 4);
  assert_int_equal(5 + ntohl(flen), r.len);
  h2_resp_free(&r);

  /* No request message: the error goes in the trailers after a 200. */
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", grpc, NULL, 0, &r), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  assert_non_null(
      strstr(r.extra, "grpc-message: unary request has zero messages\n"));
  h2_resp_free(&r);

  /* grpc-timeout and grpc-encoding are checked as Connect's headers are. */
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", bad_timeout, env, len, &r), 0);
  assert_non_null(strstr(r.extra, "grpc-status: 3\n"));
  assert_non_null(strstr(r.extra, "grpc-message: malformed grpc-timeout"));
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", bad_enc, env, len, &r), 0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  h2_resp_free(&r);

  /* gRPC-Web: the message envelope, then the trailer frame (0x80). */
  assert_int_equal(h2_request(srv.port, "POST", SVC "List", web, env, len, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/grpc-web+proto");
  assert_null(strstr(r.extra, "grpc-status"));
  assert_true(r.len >= 10);
  memcpy(&flen, r.body + 1, 4);
  flen = ntohl(flen);
  assert_int_equal(r.body[0], 0);
  assert_true(5 + flen + 5 <= r.len);
  assert_int_equal(r.body[5 + flen], 0x80);
  {
    const char *t = (const char *)r.body + 5 + flen + 5;
    uint32_t tlen;

    memcpy(&tlen, r.body + 5 + flen + 1, 4);
    assert_int_equal(5 + flen + 5 + ntohl(tlen), r.len);
    assert_int_equal(ntohl(tlen), strlen("grpc-status: 0\r\n"));
    assert_memory_equal(t, "grpc-status: 0\r\n", ntohl(tlen));
  }
  h2_resp_free(&r);
  free(env);
}

static void test_content_types(void **state) {
  static const char *const xml[] = {"content-type", "application/xml", NULL};
  static const char *const grpc[] = {"content-type", "application/grpc+xml",
                                     NULL};
  h2_resp r;

  (void)state;
  /* Unknown codecs: 415 with what is served, as connect-go answers
     (JSON is served too: test_serve_json.c). */
  assert_int_equal(h2_request(srv.port, "POST", SVC "List", xml,
                              (const uint8_t *)"{}", 2, &r),
                   0);
  assert_int_equal(r.status, 415);
  assert_non_null(strstr(r.extra, "accept-post: application/json, "
                                  "application/json; charset=utf-8, "
                                  "application/proto"));
  h2_resp_free(&r);
  assert_int_equal(h2_request(srv.port, "POST", SVC "List", grpc,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 415);
  h2_resp_free(&r);
  /* A stream method with the unary content type. */
  assert_int_equal(h2_request(srv.port, "POST", SVC "Start", unary_hdrs,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 415);
  h2_resp_free(&r);
  /* The unary method with no body at all is an empty ListRequest. */
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", unary_hdrs, NULL, 0, &r), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/proto");
  h2_resp_free(&r);
}

static void test_connect_headers(void **state) {
  static const char *const long_timeout[] = {
      "content-type", "application/proto", "connect-timeout-ms", "12345678901",
      NULL};
  static const char *const bad_timeout[] = {"content-type", "application/proto",
                                            "connect-timeout-ms", "soon", NULL};
  static const char *const version[] = {"content-type", "application/proto",
                                        "connect-protocol-version", "2", NULL};
  static const char *const br[] = {"content-type", "application/proto",
                                   "content-encoding", "br", NULL};
  static const char *const br_stream[] = {
      "content-type", "application/connect+proto", "connect-content-encoding",
      "br", NULL};
  h2_resp r;

  (void)state;
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", long_timeout, NULL, 0, &r), 0);
  assert_int_equal(r.status, 400);
  assert_string_equal(r.ctype, "application/json");
  assert_error(&r, 0, "invalid_argument",
               "parse timeout: \"12345678901\" has >10 digits");
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", bad_timeout, NULL, 0, &r), 0);
  assert_int_equal(r.status, 400);
  assert_error(&r, 0, "invalid_argument", NULL);
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", version, NULL, 0, &r), 0);
  assert_int_equal(r.status, 400);
  assert_error(&r, 0, "invalid_argument",
               "connect-protocol-version must be \"1\": got \"2\"");
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", br, (const uint8_t *)"x", 1, &r),
      0);
  assert_int_equal(r.status, 501);
  assert_error(&r, 0, "unimplemented",
               "unknown compression \"br\": supported encodings are gzip");
  h2_resp_free(&r);
  /* A message quoting bytes that are not UTF-8 (a surrogate, a code
     point past U+10FFFF) keeps its message, with U+FFFD for each byte. */
  {
    static const char *const surrogate[] = {"content-type", "application/proto",
                                            "authorization",
                                            "Basic 7aCAOg==", NULL};
    static const char *const too_big[] = {"content-type", "application/proto",
                                          "authorization",
                                          "Basic 9JCAgMOpOg==", NULL};

    assert_int_equal(
        h2_request(srv.port, "POST", SVC "List", surrogate, NULL, 0, &r), 0);
    assert_int_equal(r.status, 401);
    assert_error(&r, 0, "unauthenticated",
                 "invalid username: '\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD'");
    h2_resp_free(&r);
    assert_int_equal(
        h2_request(srv.port, "POST", SVC "List", too_big, NULL, 0, &r), 0);
    assert_error(&r, 0, "unauthenticated",
                 "invalid username: '\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                 "\xEF\xBF\xBD\xC3\xA9'");
    h2_resp_free(&r);
  }
  /* Streams answer 200 with the error in the end-stream message. */
  assert_int_equal(h2_request(srv.port, "POST", SVC "Start", br_stream,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/connect+proto");
  assert_error(&r, 1, "unimplemented", NULL);
  h2_resp_free(&r);
}

/* ---- Malformed and oversized ------------------------------------------------
 */

static void test_malformed(void **state) {
  Process__StartRequest start = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg;
  uint8_t *env;
  uint8_t *two;
  size_t len;
  h2_resp r;

  (void)state;
  /* Not protobuf. */
  assert_int_equal(h2_request(srv.port, "POST", SVC "SendSignal", unary_hdrs,
                              (const uint8_t *)"\xff\xff\xff", 3, &r),
                   0);
  assert_int_equal(r.status, 400);
  assert_error(&r, 0, "invalid_argument", NULL);
  h2_resp_free(&r);

  process__process_config__init(&cfg);
  cfg.cmd = "true";
  start.process = &cfg;
  env = envelope(0, &start.base, &len);
  /* Truncated envelope. */
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "Start", stream_hdrs, env, len - 1, &r),
      0);
  assert_int_equal(r.status, 200);
  assert_error(&r, 1, "invalid_argument",
               "protocol error: incomplete envelope");
  h2_resp_free(&r);
  /* Reserved flags. */
  env[0] = 0x04;
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "Start", stream_hdrs, env, len, &r), 0);
  assert_error(&r, 1, "invalid_argument", NULL);
  h2_resp_free(&r);
  /* Compressed flag without an encoding. */
  env[0] = 0x01;
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "Start", stream_hdrs, env, len, &r), 0);
  assert_error(&r, 1, "internal", NULL);
  h2_resp_free(&r);
  /* No request message, and two. */
  env[0] = 0x00;
  assert_int_equal(h2_request(srv.port, "POST", SVC "Start", stream_hdrs,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_error(&r, 1, "unimplemented", "unary request has zero messages");
  h2_resp_free(&r);
  two = malloc(2 * len);
  memcpy(two, env, len);
  memcpy(two + len, env, len);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "Start", stream_hdrs, two, 2 * len, &r),
      0);
  assert_error(&r, 1, "unimplemented", "unary request has multiple messages");
  h2_resp_free(&r);
  free(two);
  free(env);

  /* Strings that are not UTF-8 (proto3 requires it; envd's protobuf-go
     refuses them): in a oneof of a nested message, unary ... */
  {
    Process__SendSignalRequest sig = PROCESS__SEND_SIGNAL_REQUEST__INIT;
    Process__ProcessSelector sel;
    Process__ProcessConfig__EnvsEntry e;
    Process__ProcessConfig__EnvsEntry *ep = &e;
    uint8_t buf[64];

    process__process_selector__init(&sel);
    sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_TAG;
    sel.tag = "a\xC3\x28"; /* a broken 2-byte sequence */
    sig.process = &sel;
    sig.signal = PROCESS__SIGNAL__SIGNAL_SIGKILL;
    len = protobuf_c_message_pack(&sig.base, buf);
    assert_int_equal(h2_request(srv.port, "POST", SVC "SendSignal", unary_hdrs,
                                buf, len, &r),
                     0);
    assert_int_equal(r.status, 400);
    assert_error(&r, 0, "invalid_argument",
                 "unmarshal into process.SendSignalRequest: proto: field "
                 "process.ProcessSelector.tag contains invalid UTF-8");
    h2_resp_free(&r);
    /* ... and a surrogate in a map value of a stream's request; nothing
       is started. */
    process__process_config__envs_entry__init(&e);
    e.key = "K";
    e.value = "\xED\xA0\x80";
    cfg.n_envs = 1;
    cfg.envs = &ep;
    env = envelope(0, &start.base, &len);
    assert_int_equal(
        h2_request(srv.port, "POST", SVC "Start", stream_hdrs, env, len, &r),
        0);
    assert_error(&r, 1, "invalid_argument",
                 "unmarshal into process.StartRequest: proto: field "
                 "process.ProcessConfig.EnvsEntry.value contains invalid "
                 "UTF-8");
    h2_resp_free(&r);
    free(env);
    /* Valid multi-byte text is fine. */
    e.value = "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x88";
    cfg.cmd = "true";
    env = envelope(0, &start.base, &len);
    assert_int_equal(
        h2_request(srv.port, "POST", SVC "Start", stream_hdrs, env, len, &r),
        0);
    assert_int_equal(r.status, 200);
    {
      char c[64], m[256];
      connect_error(&r, 1, c, sizeof(c), m, sizeof(m));
      assert_string_equal(c, ""); /* the end-stream has no error */
    }
    h2_resp_free(&r);
    free(env);
  }
  assert_serving(&srv);
}

static void test_oversized(void **state) {
  Process__SendInputRequest req = PROCESS__SEND_INPUT_REQUEST__INIT;
  Process__ProcessInput in;
  Process__ProcessSelector sel;
  uint8_t *big = calloc(1, 100000);
  uint8_t *body;
  size_t len;
  uint8_t prefix[5] = {0, 0, 0x10, 0, 0}; /* declares 1 MiB */
  h2_resp r;

  (void)state;
  process__process_selector__init(&sel);
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = 1;
  process__process_input__init(&in);
  in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
  in.stdin.data = big;
  in.stdin.len = 100000;
  req.process = &sel;
  req.input = &in;
  len = protobuf_c_message_get_packed_size(&req.base);
  body = malloc(len);
  protobuf_c_message_pack(&req.base, body);
  assert_int_equal(h2_request(small.port, "POST", SVC "SendInput", unary_hdrs,
                              body, len, &r),
                   0);
  assert_int_equal(r.status, 429);
  assert_error(&r, 0, "resource_exhausted", NULL);
  h2_resp_free(&r);
  /* A stream envelope that declares more than the limit is refused before
     any of it is buffered. */
  assert_int_equal(h2_request(small.port, "POST", SVC "StreamInput",
                              stream_hdrs, prefix, sizeof(prefix), &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_error(&r, 1, "resource_exhausted", NULL);
  h2_resp_free(&r);
  free(body);
  free(big);
  assert_serving(&small);
}

static void test_big_headers(void **state) {
  char *big = malloc(100001);
  const char *hdrs[] = {"content-type", "application/proto", "x-big", big,
                        NULL};
  h2_resp r;

  (void)state;
  memset(big, 'a', 100000);
  big[100000] = '\0';
  h2_request(srv.port, "POST", SVC "List", hdrs, NULL, 0, &r);
  /* Reset (or the connection refused it), never served. */
  assert_int_not_equal(r.status, 200);
  h2_resp_free(&r);
  free(big);
  assert_serving(&srv);
}

/* ---- gzip
 * -------------------------------------------------------------------- */

static void test_gzip(void **state) {
  static const char *const gz_unary[] = {"content-type",
                                         "application/proto",
                                         "content-encoding",
                                         "gzip",
                                         "accept-encoding",
                                         "gzip",
                                         NULL};
  static const char *const gz_stream[] = {"content-type",
                                          "application/connect+proto",
                                          "connect-content-encoding",
                                          "gzip",
                                          "connect-accept-encoding",
                                          "gzip",
                                          NULL};
  Process__SendSignalRequest sig = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector sel;
  Process__StartRequest start = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg;
  char *args[] = {"-c", "head -c 5000 /dev/zero"};
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  uint8_t plain[256];
  size_t len;
  uint8_t *body;
  h2_resp r;
  conch_client_opts *opts;
  conch_client *c;
  run_result rr;

  (void)state;
  conch__gzip_init(&gz, conch_mem_default());
  /* A gzipped unary request: decoded, hence not_found for the pid. */
  process__process_selector__init(&sel);
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = 999999;
  sig.process = &sel;
  sig.signal = PROCESS__SIGNAL__SIGNAL_SIGKILL;
  len = protobuf_c_message_pack(&sig.base, plain);
  assert_int_equal(conch__gzip_deflate(&gz, -1, plain, len, &out), 0);
  assert_int_equal(h2_request(srv.port, "POST", SVC "SendSignal", gz_unary,
                              conch__buf_head(&out), conch__buf_size(&out), &r),
                   0);
  assert_int_equal(r.status, 404);
  assert_error(&r, 0, "not_found", "process with pid 999999 not found");
  h2_resp_free(&r);
  conch__buf_reset(&out);

  /* A gzipped envelope in, gzipped envelopes out (5000 zero bytes). */
  process__process_config__init(&cfg);
  cfg.cmd = "sh";
  cfg.args = args;
  cfg.n_args = 2;
  start.process = &cfg;
  len = protobuf_c_message_pack(&start.base, plain);
  assert_int_equal(conch__gzip_deflate(&gz, -1, plain, len, &out), 0);
  body = malloc(conch__buf_size(&out) + 5);
  body[0] = 1;
  body[1] = 0;
  body[2] = 0;
  body[3] = (uint8_t)(conch__buf_size(&out) >> 8);
  body[4] = (uint8_t)conch__buf_size(&out);
  memcpy(body + 5, conch__buf_head(&out), conch__buf_size(&out));
  assert_int_equal(h2_request(srv.port, "POST", SVC "Start", gz_stream, body,
                              conch__buf_size(&out) + 5, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.extra, "connect-content-encoding: gzip"));
  {
    /* Some envelope carries flag 1 (the DataEvent of 5000 bytes). */
    size_t off = 0;
    int compressed = 0;

    while (off + 5 <= r.len) {
      size_t n = ((size_t)r.body[off + 1] << 24) |
                 ((size_t)r.body[off + 2] << 16) |
                 ((size_t)r.body[off + 3] << 8) | r.body[off + 4];

      compressed |= r.body[off] == 1;
      off += 5 + n;
    }
    assert_true(compressed);
    assert_int_equal(off, r.len);
  }
  assert_error(&r, 1, "", NULL);
  h2_resp_free(&r);
  free(body);
  conch__buf_free(&out, conch_mem_default());
  conch__gzip_clear(&gz);

  /* Our client, sending gzip and accepting it. */
  assert_int_equal(conch_client_opts_new(&opts), 0);
  conch_client_opts_set_send_compression(opts, CONCH_COMPRESSION_GZIP);
  assert_int_equal(conch_client_new(&c, srv.url, opts), 0);
  conch_client_opts_free(opts);
  run_cmd(c, NULL, &rr, "head", "-c", "100000", "/dev/zero", NULL);
  assert_int_equal(rr.code, CONCH_CODE_OK);
  assert_int_equal(rr.total, 100000);
  conch_client_free(c);
}

/* ---- Floods
 * ---------------------------------------------------------------------- */

static void test_stream_flood(void **state) {
  h2_conn *c;
  h2_resp *resps = calloc(3000, sizeof(*resps));
  int i;
  int refused = 0;
  int ok = 0;

  (void)state;
  /* 3000 streams at once, before our SETTINGS (1000 at most) arrive:
     the excess is refused, the rest answered. */
  assert_int_equal(h2_open(&c, srv.port), 0);
  for (i = 0; i < 3000; i++) {
    assert_true(
        h2_submit(c, "POST", SVC "List", unary_hdrs, NULL, 0, &resps[i]) > 0);
  }
  h2_run(c, 20000);
  for (i = 0; i < 3000; i++) {
    ok += resps[i].status == 200;
    refused += resps[i].rst != 0;
    h2_resp_free(&resps[i]);
  }
  h2_close(c);
  assert_true(ok >= 1000);
  assert_int_equal(ok + refused, 3000);
  assert_serving(&srv);

  /* Open and reset, 5000 times. */
  assert_int_equal(h2_open(&c, srv.port), 0);
  for (i = 0; i < 5000; i++) {
    int id =
        h2_submit(c, "POST", SVC "List", unary_hdrs, NULL, 0, &resps[i % 3000]);

    assert_true(id > 0);
    h2_rst(c, id);
    if (i % 500 == 0) {
      h2_run(c, 50);
    }
  }
  h2_run(c, 2000);
  h2_close(c);
  for (i = 0; i < 3000; i++) {
    h2_resp_free(&resps[i]);
  }
  free(resps);
  assert_serving(&srv);
}

/* A StreamInput call into a process that does not read its stdin stops
   taking window credit.  When such a call goes away (reset here), the
   bytes it held must go back to the connection's window: 16 of them used
   to leave the connection unable to carry a request body at all. */
static void test_paused_input_reset(void **state) {
  enum { NSTREAMS = 24, NMSG = 24, MSGLEN = 64 * 1024 };
  Process__StreamInputRequest req = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__StartEvent se =
      PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;
  Process__StreamInputRequest__DataEvent de =
      PROCESS__STREAM_INPUT_REQUEST__DATA_EVENT__INIT;
  Process__SendSignalRequest sig = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector sel;
  Process__ProcessInput in;
  conch_client *cl = client_new(srv.url);
  h2_resp *resps = calloc(NSTREAMS + 1, sizeof(*resps));
  uint8_t *chunk = calloc(1, MSGLEN);
  uint8_t *body;
  uint8_t *e;
  size_t len;
  size_t n;
  conch_call *call;
  run_result r;
  h2_conn *c;
  int ids[NSTREAMS];
  pid_t pid;
  int i;

  (void)state;
  call = start_call(cl, NULL, &r, &pid, "sleep", "60", NULL);
  assert_non_null(call);
  note_pid(pid);
  process__process_selector__init(&sel);
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = (uint32_t)pid;
  se.process = &sel;
  req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
  req.start = &se;
  e = envelope(0, &req.base, &n);
  body = malloc(n + NMSG * (MSGLEN + 64));
  memcpy(body, e, n);
  len = n;
  free(e);
  process__process_input__init(&in);
  in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
  in.stdin.data = chunk;
  in.stdin.len = MSGLEN;
  de.input = &in;
  req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA;
  req.data = &de;
  e = envelope(0, &req.base, &n);
  for (i = 0; i < NMSG; i++) {
    memcpy(body + len, e, n);
    len += n;
  }
  free(e);

  /* Each call fills what window it has, then waits on `sleep`. */
  assert_int_equal(h2_open(&c, srv.port), 0);
  for (i = 0; i < NSTREAMS; i++) {
    ids[i] = h2_submit(c, "POST", SVC "StreamInput", stream_hdrs, body, len,
                       &resps[i]);
    assert_true(ids[i] > 0);
  }
  h2_run(c, 1500);
  for (i = 0; i < NSTREAMS; i++) {
    h2_rst(c, ids[i]);
  }
  h2_run(c, 200);

  /* A request with a body still goes through on the same connection. */
  sig.process = &sel;
  sig.signal = PROCESS__SIGNAL__SIGNAL_SIGKILL;
  n = protobuf_c_message_get_packed_size(&sig.base);
  protobuf_c_message_pack(&sig.base, body);
  assert_true(h2_submit(c, "POST", SVC "SendSignal", unary_hdrs, body, n,
                        &resps[NSTREAMS]) > 0);
  assert_int_equal(h2_run(c, 5000), 0);
  assert_int_equal(resps[NSTREAMS].status, 200);
  h2_close(c);
  for (i = 0; i <= NSTREAMS; i++) {
    h2_resp_free(&resps[i]);
  }
  drain_call(cl, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: killed");
  conch_client_free(cl);
  free(resps);
  free(body);
  free(chunk);
  assert_serving(&srv);
}

static void test_garbage(void **state) {
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  struct sockaddr_in sa;
  char buf[4096];
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ssize_t n;
  long total = 0;

  (void)state;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)srv.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(write(fd, preface, sizeof(preface) - 1),
                   (ssize_t)sizeof(preface) - 1);
  assert_int_equal(
      write(fd, "\x00\x00\x04\x09\x00\x00\x00\x00\x07garbage!", 17), 17);
  /* GOAWAY and close. */
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    total += n;
  }
  assert_true(total > 0);
  close(fd);
  assert_serving(&srv);
}

/* HTTP/1.1 is served too (test_serve_h1.c has the rest): one request
   each way, on one keep-alive connection. */
static void test_http1(void **state) {
  static const char req[] = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
  static const char post[] =
      "POST /process.Process/List HTTP/1.1\r\n"
      "Host: localhost\r\nContent-Type: application/proto\r\n"
      "Content-Length: 0\r\n\r\n";
  struct sockaddr_in sa;
  char buf[1024];
  int fd;
  ssize_t n;

  (void)state;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)srv.port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
  n = read(fd, buf, sizeof(buf) - 1);
  assert_true(n > 0);
  buf[n] = '\0';
  assert_true(strncmp(buf, "HTTP/1.1 204", 12) == 0);
  assert_int_equal(write(fd, post, sizeof(post) - 1),
                   (ssize_t)sizeof(post) - 1);
  n = read(fd, buf, sizeof(buf) - 1);
  assert_true(n > 0);
  buf[n] = '\0';
  assert_true(strncmp(buf, "HTTP/1.1 200", 12) == 0);
  assert_non_null(strstr(buf, "Content-Type: application/proto\r\n"));
  close(fd);
}

/* ---- Retention, access token, TLS
 * ------------------------------------------------ */

typedef struct forgotten_arg {
  conch_client *c;
  pid_t pid;
  run_result *rc;
} forgotten_arg;

/* Connect to |pid| is refused as not found (what it got stays in rc). */
static int forgotten(void *arg) {
  forgotten_arg *f = arg;
  conch_call *call = connect_call(f->c, f->pid, NULL, 0, NULL);

  memset(f->rc, 0, sizeof(*f->rc));
  drain_call(f->c, call, f->rc);
  conch_call_free(call);
  return f->rc->code == CONCH_CODE_NOT_FOUND;
}

static void test_retention_expiry(void **state) {
  forgotten_arg f;
  conch_client *c = client_new(small.url);
  run_result r;
  run_result rc;
  conch_call *call;

  (void)state;
  run_cmd(c, NULL, &r, "true", NULL);
  assert_true(r.has_end);
  call = connect_call(c, r.pid, NULL, 0, NULL);
  memset(&rc, 0, sizeof(rc));
  drain_call(c, call, &rc);
  conch_call_free(call);
  assert_int_equal(rc.code, CONCH_CODE_OK);
  assert_true(rc.has_end);
  /* Forgotten once the 800 ms retention has passed. */
  f.c = c;
  f.pid = r.pid;
  f.rc = &rc;
  assert_true(conch_wait_until(forgotten, &f, CONCH_WAIT_MS));
  assert_int_equal(rc.code, CONCH_CODE_NOT_FOUND);
  assert_int_equal(rc.nstart, 0);
  {
    char want[64];

    snprintf(want, sizeof(want), "process with pid %d not found", (int)r.pid);
    assert_string_equal(rc.message, want);
  }
  conch_client_free(c);
}

static void test_access_token(void **state) {
  static const char *const args[] = {"--access-token", "s3cret", NULL};
  static const char *const good[] = {"content-type", "application/proto",
                                     "x-access-token", "s3cret", NULL};
  static const char *const bad[] = {"content-type", "application/proto",
                                    "x-access-token", "nope", NULL};
  serve_peer p;
  h2_resp r;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  assert_int_equal(
      h2_request(p.port, "POST", SVC "List", unary_hdrs, NULL, 0, &r), 0);
  assert_int_equal(r.status, 401);
  assert_true(strncmp(r.ctype, "application/json", 16) == 0);
  assert_non_null(strstr((const char *)r.body, "\"code\":401"));
  h2_resp_free(&r);
  assert_int_equal(h2_request(p.port, "POST", SVC "List", bad, NULL, 0, &r), 0);
  assert_int_equal(r.status, 401);
  h2_resp_free(&r);
  assert_int_equal(h2_request(p.port, "POST", SVC "List", good, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
  assert_int_equal(h2_request(p.port, "GET", "/health", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 204);
  h2_resp_free(&r);
  {
    /* Our client: 401 is unauthenticated. */
    conch_client *c = client_new(p.url);
    run_result rr;

    run_cmd(c, NULL, &rr, "true", NULL);
    assert_int_equal(rr.code, CONCH_CODE_UNAUTHENTICATED);
    conch_client_free(c);
  }
  assert_int_equal(serve_stop(&p, 10000), 0);
}

static void test_tls(void **state) {
  char dir[] = "/tmp/conch-serve-tls-XXXXXX";
  char cmd[512];
  char cert[128];
  char key[128];
  char ca[128];
  const char *args[5];
  serve_peer p;
  conch_client_opts *opts;
  conch_client *c;
  run_result r;

  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(cmd, sizeof(cmd),
           "sh " CONCH_SOURCE_DIR "/tests/interop/node/make-certs.sh %s "
           ">/dev/null 2>&1",
           dir);
  assert_int_equal(system(cmd), 0);
  snprintf(cert, sizeof(cert), "%s/server.pem", dir);
  snprintf(key, sizeof(key), "%s/server.key", dir);
  snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
  args[0] = "--tls-cert";
  args[1] = cert;
  args[2] = "--tls-key";
  args[3] = key;
  args[4] = NULL;
  assert_int_equal(serve_start(&p, args), 0);
  assert_int_equal(conch_client_opts_new(&opts), 0);
  assert_int_equal(conch_client_opts_set_ca_file(opts, ca), 0);
  assert_int_equal(conch_client_new(&c, p.url, opts), 0);
  conch_client_opts_free(opts);
  run_cmd(c, NULL, &r, "echo", "over tls", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.out, "over tls\n");
  conch_client_free(c);
  /* Cleartext HTTP/2 against the TLS port fails, the server lives on. */
  {
    h2_resp hr;

    h2_request(p.port, "GET", "/health", NULL, NULL, 0, &hr);
    assert_int_not_equal(hr.status, 204);
    h2_resp_free(&hr);
  }
  assert_int_equal(serve_stop(&p, 10000), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* ---- Shutdown
 * ------------------------------------------------------------------------- */

/* The escaper of test_shutdown has started its setsid'd sleep. */
static int escaper_runs(void *arg) {
  (void)arg;
  return proc_count_cmdline("sleep 31.75") == 1;
}

static void test_shutdown(void **state) {
  static const char *const args[] = {"--kill-grace-ms", "1000", NULL};
  serve_peer p;
  conch_client *c;
  run_result r;
  conch_call *plain;
  conch_call *stubborn;
  conch_call *escaper;
  pid_t pids[3];
  ProtobufCMessage *m;
  long long t0;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);
  plain = start_call(c, NULL, &r, &pids[0], "sleep", "31.25", NULL);
  stubborn = start_call(c, NULL, &r, &pids[1], "sh", "-c",
                        "trap '' TERM; sleep 31.5", NULL);
  escaper = start_call(c, NULL, &r, &pids[2], "sh", "-c",
                       "setsid sleep 31.75 & wait", NULL);
  assert_non_null(plain);
  assert_non_null(stubborn);
  assert_non_null(escaper);
  assert_true(conch_wait_until(escaper_runs, NULL, CONCH_WAIT_MS));
  assert_int_equal(proc_count_cmdline("sleep 31.75"), 1);
  t0 = conch_now_ms();
  assert_int_equal(serve_stop(&p, 10000), 0);
  assert_true(conch_now_ms() - t0 < 6000);
  /* The open stream of the plain sleep saw it end. */
  memset(&r, 0, sizeof(r));
  drain_call(c, plain, &r);
  assert_true(r.has_end);
  assert_string_equal(r.status, "signal: terminated");
  (void)m;
  conch_call_free(plain);
  conch_call_free(stubborn);
  conch_call_free(escaper);
  conch_client_free(c);
  assert_int_equal(proc_leftovers(0, pids, 3, NULL), 0);
  assert_int_equal(proc_count_cmdline("sleep 31.25"), 0);
  assert_int_equal(proc_count_cmdline("sleep 31.5"), 0);
  assert_int_equal(proc_count_cmdline("sleep 31.75"), 0);

  /* Closing its stdin stops it too. */
  assert_int_equal(serve_start(&p, NULL), 0);
  close(p.stdin_fd);
  p.stdin_fd = -1;
  assert_true(conch_proc_gone_within(p.pid, CONCH_WAIT_MS));
  assert_int_equal(serve_stop(&p, 5000), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health_and_routing),
      cmocka_unit_test(test_content_types),
      cmocka_unit_test(test_grpc_raw),
      cmocka_unit_test(test_connect_headers),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_oversized),
      cmocka_unit_test(test_big_headers),
      cmocka_unit_test(test_gzip),
      cmocka_unit_test(test_stream_flood),
      cmocka_unit_test(test_paused_input_reset),
      cmocka_unit_test(test_garbage),
      cmocka_unit_test(test_http1),
      cmocka_unit_test(test_retention_expiry),
      cmocka_unit_test(test_access_token),
      cmocka_unit_test(test_tls),
      cmocka_unit_test(test_shutdown),
  };

  if (getenv("SERVE_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
