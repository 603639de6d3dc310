/* The server core's protocol edges on raw HTTP/2 requests: routing,
   content types, gRPC and gRPC-Web framing and trailers, Connect headers,
   envelopes that are malformed (cut short, reserved or compressed flags,
   none or two on a unary-request method), a declared size over the
   receive limit, huge headers, gzip both ways, stream floods and garbage
   frames.  These cases were in tests/server/test_serve_proto.c, run
   through a spawned `conch serve`; here the core serves
   conchtest.v1.TestService on a thread of its own (svc.c) with the
   options conch serve gives it (gzip only, 1000 streams, a 64 KiB
   receive limit on |small|), so they test the core and only it. */
#include <arpa/inet.h>
#include <setjmp.h>
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
#include "support.h" /* tests/server: h2_request, h2_open, envelope */
#include "svc.h"
#include "wait.h"

static fixture fxs;    /* gzip only, 1000 streams (conch serve's) */
static fixture smalls; /* the same with a 64 KiB receive limit */
static int port;
static int small_port;

static const char *const unary_hdrs[] = {"content-type", "application/proto",
                                         NULL};
static const char *const stream_hdrs[] = {"content-type",
                                          "application/connect+proto", NULL};

static conch_server_opts *serve_like_opts(size_t recv_limit) {
  conch_server_opts *o;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_compression(o, "gzip"), 0);
  assert_int_equal(conch_server_opts_set_max_streams(o, 1000), 0);
  assert_int_equal(conch_server_opts_set_compress_min_bytes(o, 1024), 0);
  if (recv_limit > 0) {
    assert_int_equal(conch_server_opts_set_recv_limit(o, recv_limit), 0);
  }
  return o;
}

static int group_setup(void **state) {
  conch_server_opts *o;

  (void)state;
  o = serve_like_opts(0);
  fx_start(&fxs, o, 0);
  conch_server_opts_free(o);
  o = serve_like_opts(65536);
  fx_start(&smalls, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fxs.s);
  small_port = conch_server_port(smalls.s);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  fx_stop(&fxs);
  fx_stop(&smalls);
  return 0;
}

/* A packed Request (|env|: in an envelope), malloc'd. */
static uint8_t *request(const Conchtest__V1__Request *req, int env,
                        size_t *len) {
  uint8_t *b;

  if (env) {
    b = envelope(0, &req->base, len);
    assert_non_null(b);
    return b;
  }
  *len = conchtest__v1__request__get_packed_size(req);
  b = malloc(*len + 1);
  assert_non_null(b);
  conchtest__v1__request__pack(req, b);
  return b;
}

/* The server still answers a normal call. */
static void assert_serving(int p) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *body;
  size_t len;
  h2_resp r;

  req.payload.data = (uint8_t *)"alive";
  req.payload.len = 5;
  body = request(&req, 0, &len);
  assert_int_equal(
      h2_request(p, "POST", SVC "Unary", unary_hdrs, body, len, &r), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(r.body);
  assert_non_null(memmem(r.body, r.len, "alive", 5));
  h2_resp_free(&r);
  free(body);
}

/* ---- Routing and content types ----------------------------------------------
 */

static void test_routing(void **state) {
  h2_resp r;

  (void)state;
  assert_int_equal(h2_request(port, "POST", "/nope.Service/Method", unary_hdrs,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 404);
  h2_resp_free(&r);
  /* A method that only takes POST (Unary takes GET too: Connect GET). */
  assert_int_equal(
      h2_request(port, "GET", SVC "ClientStream", stream_hdrs, NULL, 0, &r), 0);
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.extra, "allow: POST"));
  h2_resp_free(&r);
}

static void test_content_types(void **state) {
  static const char *const xml[] = {"content-type", "application/xml", NULL};
  static const char *const grpc[] = {"content-type", "application/grpc+xml",
                                     NULL};
  h2_resp r;

  (void)state;
  /* Unknown codecs: 415 with what is served, as connect-go answers. */
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", xml, (const uint8_t *)"{}", 2, &r),
      0);
  assert_int_equal(r.status, 415);
  assert_non_null(strstr(r.extra, "accept-post: application/json, "
                                  "application/json; charset=utf-8, "
                                  "application/proto"));
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", grpc, (const uint8_t *)"", 0, &r),
      0);
  assert_int_equal(r.status, 415);
  h2_resp_free(&r);
  /* A stream method with the unary content type. */
  assert_int_equal(h2_request(port, "POST", SVC "ServerStream", unary_hdrs,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 415);
  h2_resp_free(&r);
  /* The unary method with no body at all is an empty request. */
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", unary_hdrs, NULL, 0, &r), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/proto");
  h2_resp_free(&r);
}

/* ---- gRPC and gRPC-Web, raw -------------------------------------------------
 */

/* Enveloped unary calls, the status in HTTP/2 trailers (gRPC) or in a
   trailer frame that ends the body (gRPC-Web). */
static void test_grpc_raw(void **state) {
  static const char *const grpc[] = {"content-type", "application/grpc", "te",
                                     "trailers", NULL};
  static const char *const web[] = {"content-type",
                                    "application/grpc-web+proto", NULL};
  static const char *const bad_timeout[] = {"content-type", "application/grpc",
                                            "grpc-timeout", "1x", NULL};
  static const char *const bad_enc[] = {"content-type", "application/grpc",
                                        "grpc-encoding", "lz4", NULL};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *env;
  size_t len;
  h2_resp r;
  uint32_t flen;

  (void)state;
  req.payload.data = (uint8_t *)"ping";
  req.payload.len = 4;
  env = request(&req, 1, &len);

  /* gRPC: a response envelope, then grpc-status 0 in the trailers. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc, env, len, &r),
                   0);
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
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc, NULL, 0, &r), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  assert_non_null(
      strstr(r.extra, "grpc-message: unary request has zero messages\n"));
  h2_resp_free(&r);

  /* grpc-timeout and grpc-encoding are checked as Connect's headers are. */
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", bad_timeout, env, len, &r), 0);
  assert_non_null(strstr(r.extra, "grpc-status: 3\n"));
  assert_non_null(strstr(r.extra, "grpc-message: malformed grpc-timeout"));
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", bad_enc, env, len, &r),
                   0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  h2_resp_free(&r);

  /* gRPC-Web: the message envelope, then the trailer frame (0x80). */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", web, env, len, &r), 0);
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

/* A 64 KiB response message goes out in one DATA frame to a client that
   allows large frames (and has the window), so that it can decode the
   message where it lies; without the setting, frames stay within the
   default 16 KiB. */
static void test_large_frames(void **state) {
  static const char *const grpc[] = {"content-type", "application/grpc", "te",
                                     "trailers", NULL};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *env;
  size_t len, largest;
  h2_resp r;
  h2_conn *c;
  int n, big;

  (void)state;
  req.response_size = 65536;
  env = request(&req, 1, &len);
  for (big = 1; big >= 0; big--) {
    if (big) {
      assert_int_equal(h2_open_big(&c, port, 1 << 20), 0);
    } else {
      assert_int_equal(h2_open(&c, port), 0);
    }
    memset(&r, 0, sizeof(r));
    assert_true(h2_submit(c, "POST", SVC "Unary", grpc, env, len, &r) > 0);
    assert_int_equal(h2_run(c, 20000), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.extra, "grpc-status: 0\n"));
    assert_true(r.len > 65536);
    h2_data_frames(c, &n, &largest);
    if (big) {
      assert_int_equal(n, 1);
      assert_int_equal(largest, r.len);
    } else {
      assert_true(n >= 5);
      assert_true(largest <= 16384);
    }
    h2_resp_free(&r);
    h2_close(c);
  }
  free(env);
}

/* ---- Connect headers --------------------------------------------------------
 */

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
      h2_request(port, "POST", SVC "Unary", long_timeout, NULL, 0, &r), 0);
  assert_int_equal(r.status, 400);
  assert_string_equal(r.ctype, "application/json");
  assert_connect_error(&r, 0, "invalid_argument",
                       "parse timeout: \"12345678901\" has >10 digits");
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", bad_timeout, NULL, 0, &r), 0);
  assert_int_equal(r.status, 400);
  assert_connect_error(&r, 0, "invalid_argument", NULL);
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", version, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 400);
  assert_connect_error(&r, 0, "invalid_argument",
                       "connect-protocol-version must be \"1\": got \"2\"");
  h2_resp_free(&r);
  /* A compression the server was not given (gzip only). */
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", br, (const uint8_t *)"x", 1, &r),
      0);
  assert_int_equal(r.status, 501);
  assert_connect_error(
      &r, 0, "unimplemented",
      "unknown compression \"br\": supported encodings are gzip");
  h2_resp_free(&r);
  /* Streams answer 200 with the error in the end-stream message. */
  assert_int_equal(h2_request(port, "POST", SVC "ServerStream", br_stream,
                              (const uint8_t *)"", 0, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/connect+proto");
  assert_connect_error(&r, 1, "unimplemented", NULL);
  h2_resp_free(&r);
}

/* ---- Malformed and oversized ------------------------------------------------
 */

static void test_malformed(void **state) {
  /* A server stream's one request message, malformed: what the body is
     made of, and the end-stream error it gets (after a 200). */
  enum { CUT, FLAGS, NONE, TWO };
  static const struct {
    int how;
    uint8_t flags; /* FLAGS: the envelope's */
    const char *code;
    const char *msg; /* NULL: any */
  } bad[] = {
      {CUT, 0, "invalid_argument", "protocol error: incomplete envelope"},
      {FLAGS, 0x04, "invalid_argument", NULL}, /* reserved */
      {FLAGS, 0x01, "internal", NULL}, /* compressed, without an encoding */
      {NONE, 0, "unimplemented", "unary request has zero messages"},
      {TWO, 0, "unimplemented", "unary request has multiple messages"},
  };
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *env;
  uint8_t *body;
  size_t len;
  h2_resp r;

  (void)state;
  /* Not protobuf. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", unary_hdrs,
                              (const uint8_t *)"\xff\xff\xff", 3, &r),
                   0);
  assert_int_equal(r.status, 400);
  assert_connect_error(&r, 0, "invalid_argument", NULL);
  h2_resp_free(&r);

  req.response_count = 1;
  env = request(&req, 1, &len);
  body = malloc(2 * len);
  assert_non_null(body);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    size_t n = len;

    memcpy(body, env, len);
    memcpy(body + len, env, len);
    if (bad[i].how == CUT) {
      n = len - 1;
    } else if (bad[i].how == FLAGS) {
      body[0] = bad[i].flags;
    } else if (bad[i].how == NONE) {
      n = 0;
    } else {
      n = 2 * len;
    }
    assert_int_equal(
        h2_request(port, "POST", SVC "ServerStream", stream_hdrs, body, n, &r),
        0);
    assert_int_equal(r.status, 200);
    assert_connect_error(&r, 1, bad[i].code, bad[i].msg);
    h2_resp_free(&r);
  }
  free(body);
  free(env);
  assert_serving(port);
}

/* A stream envelope that declares more than the receive limit is refused
   before any of it is buffered. */
static void test_declared_over_limit(void **state) {
  static const uint8_t prefix[5] = {0, 0, 0x10, 0, 0}; /* declares 1 MiB */
  h2_resp r;

  (void)state;
  assert_int_equal(h2_request(small_port, "POST", SVC "ClientStream",
                              stream_hdrs, prefix, sizeof(prefix), &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_connect_error(&r, 1, "resource_exhausted", NULL);
  h2_resp_free(&r);
  assert_serving(small_port);
}

static void test_big_headers(void **state) {
  char *big = malloc(100001);
  const char *hdrs[] = {"content-type", "application/proto", "x-big", big,
                        NULL};
  h2_resp r;

  (void)state;
  assert_non_null(big);
  memset(big, 'a', 100000);
  big[100000] = '\0';
  h2_request(port, "POST", SVC "Unary", hdrs, NULL, 0, &r);
  /* Reset (or the connection refused it), never served. */
  assert_int_not_equal(r.status, 200);
  h2_resp_free(&r);
  free(big);
  assert_serving(port);
}

/* ---- gzip -------------------------------------------------------------------
 */

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
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__ErrorSpec err = CONCHTEST__V1__ERROR_SPEC__INIT;
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  uint8_t plain[256];
  size_t len;
  uint8_t *body;
  h2_resp r;

  (void)state;
  conch__gzip_init(&gz, conch_mem_default());
  /* A gzipped unary request: decoded, hence the error it asks for. */
  err.code = CONCH_CODE_NOT_FOUND;
  err.message = "nothing with pid 999999";
  req.error = &err;
  len = conchtest__v1__request__pack(&req, plain);
  assert_int_equal(conch__gzip_deflate(&gz, -1, plain, len, &out), 0);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", gz_unary,
                              conch__buf_head(&out), conch__buf_size(&out), &r),
                   0);
  assert_int_equal(r.status, 404);
  assert_connect_error(&r, 0, "not_found", "nothing with pid 999999");
  h2_resp_free(&r);
  conch__buf_reset(&out);

  /* A gzipped envelope in, gzipped envelopes out (5000-byte responses,
     over the 1 KiB compress_min). */
  req.error = NULL;
  req.response_count = 2;
  req.response_size = 5000;
  len = conchtest__v1__request__pack(&req, plain);
  assert_int_equal(conch__gzip_deflate(&gz, -1, plain, len, &out), 0);
  body = malloc(conch__buf_size(&out) + 5);
  assert_non_null(body);
  body[0] = 1;
  body[1] = 0;
  body[2] = 0;
  body[3] = (uint8_t)(conch__buf_size(&out) >> 8);
  body[4] = (uint8_t)conch__buf_size(&out);
  memcpy(body + 5, conch__buf_head(&out), conch__buf_size(&out));
  assert_int_equal(h2_request(port, "POST", SVC "ServerStream", gz_stream, body,
                              conch__buf_size(&out) + 5, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.extra, "connect-content-encoding: gzip"));
  {
    /* Some envelope carries flag 1 (a response of 5000 bytes). */
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
  assert_connect_error(&r, 1, "", NULL);
  h2_resp_free(&r);
  free(body);
  conch__buf_free(&out, conch_mem_default());
  conch__gzip_clear(&gz);
}

/* ---- Floods and garbage -----------------------------------------------------
 */

static void test_stream_flood(void **state) {
  h2_conn *c;
  h2_resp *resps = calloc(3000, sizeof(*resps));
  int i;
  int refused = 0;
  int ok = 0;

  (void)state;
  assert_non_null(resps);
  /* 3000 streams at once, before our SETTINGS (1000 at most) arrive:
     the excess is refused, the rest answered. */
  assert_int_equal(h2_open(&c, port), 0);
  for (i = 0; i < 3000; i++) {
    assert_true(
        h2_submit(c, "POST", SVC "Unary", unary_hdrs, NULL, 0, &resps[i]) > 0);
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
  assert_serving(port);

  /* Open and reset, 5000 times. */
  assert_int_equal(h2_open(&c, port), 0);
  for (i = 0; i < 5000; i++) {
    int id = h2_submit(c, "POST", SVC "Unary", unary_hdrs, NULL, 0,
                       &resps[i % 3000]);

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
  assert_serving(port);
}

static void test_garbage(void **state) {
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  char buf[4096];
  int fd = tcp_open(port);
  ssize_t n;
  long total = 0;

  (void)state;
  assert_true(fd >= 0);
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
  assert_serving(port);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_routing),
      cmocka_unit_test(test_content_types),
      cmocka_unit_test(test_grpc_raw),
      cmocka_unit_test(test_large_frames),
      cmocka_unit_test(test_connect_headers),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_declared_over_limit),
      cmocka_unit_test(test_big_headers),
      cmocka_unit_test(test_gzip),
      cmocka_unit_test(test_stream_flood),
      cmocka_unit_test(test_garbage),
  };

  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
