/* conch serve, the protocol and the edges where they are conch serve's:
   /health, the Basic username, strings that are not UTF-8 in process.proto,
   --max-message-bytes, gzip taken, a paused StreamInput reset, HTTP/1.1 on
   the same port, retention, the access token, TLS, and shutdown.  The
   server core's own protocol checks (routing, content types, gRPC and
   gRPC-Web framing, Connect headers, malformed envelopes, big headers,
   gzip framing, floods, garbage frames) are
   tests/server_core/test_server_proto.c's, on the core in-process. */
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

/* ---- Plain HTTP ------------------------------------------------------------
 */

/* /health is conch serve's route (envd's); the core's routing (404, 405)
   is tests/server_core/test_server_proto.c's. */
static void test_health(void **state) {
  h2_resp r;

  (void)state;
  assert_int_equal(h2_request(srv.port, "GET", "/health", NULL, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 204);
  assert_int_equal(r.len, 0);
  h2_resp_free(&r);
}

/* conch serve's Basic authorization (envd's username): a message quoting
   bytes that are not UTF-8 (a surrogate, a code point past U+10FFFF)
   keeps its message, with U+FFFD for each byte.  The core's checks of
   Connect's own headers are tests/server_core/test_server_proto.c's. */
static void test_auth_username(void **state) {
  static const char *const surrogate[] = {"content-type", "application/proto",
                                          "authorization",
                                          "Basic 7aCAOg==", NULL};
  static const char *const too_big[] = {"content-type", "application/proto",
                                        "authorization",
                                        "Basic 9JCAgMOpOg==", NULL};
  h2_resp r;

  (void)state;
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", surrogate, NULL, 0, &r), 0);
  assert_int_equal(r.status, 401);
  assert_connect_error(
      &r, 0, "unauthenticated",
      "invalid username: '\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD'");
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(srv.port, "POST", SVC "List", too_big, NULL, 0, &r), 0);
  assert_connect_error(&r, 0, "unauthenticated",
                       "invalid username: '\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                       "\xEF\xBF\xBD\xC3\xA9'");
  h2_resp_free(&r);
}

/* ---- Malformed and oversized ------------------------------------------------
 */

/* Strings that are not UTF-8 in process.proto's shapes (the core's
   framing checks are tests/server_core/test_server_proto.c's). */
static void test_not_utf8(void **state) {
  Process__StartRequest start = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg;
  uint8_t *env;
  size_t len;
  h2_resp r;

  (void)state;
  process__process_config__init(&cfg);
  cfg.cmd = "true";
  start.process = &cfg;
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
    assert_connect_error(
        &r, 0, "invalid_argument",
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
    assert_connect_error(
        &r, 1, "invalid_argument",
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

/* --max-message-bytes reaches the core (the core's refusal of a declared
   size over its limit is tests/server_core/test_server_proto.c's). */
static void test_oversized(void **state) {
  Process__SendInputRequest req = PROCESS__SEND_INPUT_REQUEST__INIT;
  Process__ProcessInput in;
  Process__ProcessSelector sel;
  uint8_t *big = calloc(1, 100000);
  uint8_t *body;
  size_t len;
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
  assert_connect_error(&r, 0, "resource_exhausted", NULL);
  h2_resp_free(&r);
  free(body);
  free(big);
  assert_serving(&small);
}

/* ---- gzip
 * -------------------------------------------------------------------- */

/* conch serve takes gzip, in a raw request and from our client (the
   core's gzip framing both ways is tests/server_core/test_server_proto.c's). */
static void test_gzip(void **state) {
  static const char *const gz_unary[] = {"content-type",
                                         "application/proto",
                                         "content-encoding",
                                         "gzip",
                                         "accept-encoding",
                                         "gzip",
                                         NULL};
  Process__SendSignalRequest sig = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector sel;
  conch_gzip gz;
  conch_buf out = CONCH_BUF_INIT;
  uint8_t plain[256];
  size_t len;
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
  assert_connect_error(&r, 0, "not_found", "process with pid 999999 not found");
  h2_resp_free(&r);
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
      cmocka_unit_test(test_health),
      cmocka_unit_test(test_auth_username),
      cmocka_unit_test(test_not_utf8),
      cmocka_unit_test(test_oversized),
      cmocka_unit_test(test_gzip),
      cmocka_unit_test(test_paused_input_reset),
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
