/* conch serve under abuse: idle connections, header blocks and request
   bodies that never end, the connection limit, clients that half-close,
   and legitimate long streams that must not be cut.  Every attack is
   bounded in count and time and stays on loopback. */
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "support.h"

#define SVC "/process.Process/"
#define WAIT_MS 15000 /* generous: a loaded 2-core machine */

/* Short limits, so that the tests see them act. */
static serve_peer fast; /* idle 1500, header 1000, body 1500 ms */
/* Long header timeout and a small connection limit: whatever frees a
   slot within seconds is the eviction, not a timer. */
static serve_peer capped;
static serve_peer procs; /* --max-processes 3 */
static serve_peer tok;   /* --access-token secret, header 1000 ms */

static int group_setup(void **state) {
  static const char *const fast_args[] = {"--idle-timeout-ms",
                                          "1500",
                                          "--header-timeout-ms",
                                          "1000",
                                          "--body-timeout-ms",
                                          "1500",
                                          NULL};
  static const char *const capped_args[] = {"--max-connections",
                                            "32",
                                            "--header-timeout-ms",
                                            "60000",
                                            "--max-buffered-bytes",
                                            "4194304",
                                            NULL};
  static const char *const tok_args[] = {"--access-token", "secret",
                                         "--header-timeout-ms", "1000", NULL};
  static const char *const procs_args[] = {
      "--max-processes", "3", "--max-stdin-bytes", "1048576", NULL};

  (void)state;
  if (serve_start(&fast, fast_args) != 0 ||
      serve_start(&capped, capped_args) != 0 ||
      serve_start(&procs, procs_args) != 0 ||
      serve_start(&tok, tok_args) != 0) {
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  int a;
  int b;
  int c;

  (void)state;
  a = serve_stop(&fast, 10000);
  b = serve_stop(&capped, 10000);
  c = serve_stop(&procs, 10000);
  if (serve_stop(&tok, 10000) != 0) {
    c = -1;
  }
  return a == 0 && b == 0 && c == 0 ? 0 : -1;
}

/* ---- Raw HTTP/2 frames -----------------------------------------------------
 */

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static void send_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;

  while (n > 0) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

    if (k < 0 && errno == EINTR) {
      continue;
    }
    assert_true(k > 0);
    b += k;
    n -= (size_t)k;
  }
}

/* Like send_all(), but 0 / -1 instead of failing the test (the server may
   have closed the connection already). */
static int try_send(int fd, const void *p, size_t n) {
  return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

static void frame_head(uint8_t *h, size_t len, uint8_t type, uint8_t flags,
                       uint32_t sid) {
  h[0] = (uint8_t)(len >> 16);
  h[1] = (uint8_t)(len >> 8);
  h[2] = (uint8_t)len;
  h[3] = type;
  h[4] = flags;
  h[5] = (uint8_t)(sid >> 24);
  h[6] = (uint8_t)(sid >> 16);
  h[7] = (uint8_t)(sid >> 8);
  h[8] = (uint8_t)sid;
}

static int frame_send(int fd, uint8_t type, uint8_t flags, uint32_t sid,
                      const void *p, size_t len) {
  uint8_t buf[9 + 4096];

  assert_true(len <= 4096);
  frame_head(buf, len, type, flags, sid);
  if (len > 0) {
    memcpy(buf + 9, p, len);
  }
  return try_send(fd, buf, 9 + len);
}

/* A connection that sent the preface and an empty SETTINGS. */
static int h2_bare(int port) {
  int fd = tcp_open(port);

  assert_true(fd >= 0);
  send_all(fd, preface, sizeof(preface) - 1);
  assert_int_equal(frame_send(fd, 4, 0, 0, NULL, 0), 0);
  return fd;
}

/* The HPACK block of a POST to |path| (JSON). */
static size_t request_block(const char *path, uint8_t *out, size_t cap) {
  nghttp2_hd_deflater *d;
  nghttp2_nv nv[5];
  const char *kv[] = {
      ":method", "POST",       ":scheme",   "http",         ":path",
      path,      ":authority", "127.0.0.1", "content-type", "application/json"};
  ssize_t n;
  size_t i;

  for (i = 0; i < 5; i++) {
    nv[i].name = (uint8_t *)kv[2 * i];
    nv[i].namelen = strlen(kv[2 * i]);
    nv[i].value = (uint8_t *)kv[2 * i + 1];
    nv[i].valuelen = strlen(kv[2 * i + 1]);
    nv[i].flags = NGHTTP2_NV_FLAG_NONE;
  }
  assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
  n = nghttp2_hd_deflate_hd(d, out, cap, nv, 5);
  nghttp2_hd_deflate_del(d);
  assert_true(n > 0);
  return (size_t)n;
}

/* Reads frames until one of type HEADERS or RST_STREAM for |sid| (its type
   returned), the connection closes (0), or |ms| passes (-1). */
static int wait_answer(int fd, uint32_t sid, int ms) {
  static uint8_t buf[1 << 16];
  size_t have = 0;
  long long deadline = conch_now_ms() + ms;

  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    long long left = deadline - conch_now_ms();
    ssize_t n;

    while (have >= 9) {
      size_t len = ((size_t)buf[0] << 16) | ((size_t)buf[1] << 8) | buf[2];
      uint32_t id = ((uint32_t)(buf[5] & 0x7f) << 24) |
                    ((uint32_t)buf[6] << 16) | ((uint32_t)buf[7] << 8) | buf[8];

      if (have < 9 + len) {
        break;
      }
      if (id == sid && (buf[3] == 1 || buf[3] == 3)) {
        return buf[3];
      }
      memmove(buf, buf + 9 + len, have - 9 - len);
      have -= 9 + len;
    }
    if (left <= 0) {
      return -1;
    }
    if (poll(&pfd, 1, (int)left) <= 0) {
      continue;
    }
    n = recv(fd, buf + have, sizeof(buf) - have, 0);
    if (n <= 0) {
      return 0;
    }
    have += (size_t)n;
  }
}

/* A List through our client answers within |ms|; its latency. */
static long long list_latency(const serve_peer *p) {
  conch_client *c = client_new(p->url);
  Process__ListResponse *resp = NULL;
  long long t0 = conch_now_ms();
  conch_code code = list_procs(c, &resp);
  long long took = conch_now_ms() - t0;

  assert_int_equal(code, CONCH_CODE_OK);
  conch_message_free(c, &resp->base);
  conch_client_free(c);
  return took;
}

/* ---- Idle connections ------------------------------------------------------
 */

/* Bare prefaces, never followed by a request, used to hold their slot
   forever (the idle timer died with the first frame). */
static void test_idle_prefaces_closed(void **state) {
  enum { N = 32 };
  int fds[N];
  int i;
  long long t0 = conch_now_ms();

  (void)state;
  for (i = 0; i < N; i++) {
    fds[i] = h2_bare(fast.port);
  }
  for (i = 0; i < N; i++) {
    assert_int_equal(wait_closed(fds[i], WAIT_MS), 1);
    close(fds[i]);
  }
  print_message("%d bare prefaces closed after %lld ms\n", N,
                conch_now_ms() - t0);
}

/* An authenticated HTTP/2 connection with nothing in progress gets a
   GOAWAY and is closed after the idle timeout. */
static void test_idle_after_request(void **state) {
  h2_conn *c;
  h2_resp r;
  long long t0;

  (void)state;
  assert_int_equal(h2_open(&c, fast.port), 0);
  assert_true(
      h2_submit(c, "POST", SVC "List",
                (const char *const[]){"content-type", "application/json", NULL},
                (const uint8_t *)"{}", 2, &r) > 0);
  assert_int_equal(h2_run(c, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  t0 = conch_now_ms();
  assert_int_equal(wait_closed(h2_fd(c), WAIT_MS), 1);
  /* Not at once: it was idle, not refused. */
  assert_true(conch_now_ms() - t0 >= 300);
  h2_resp_free(&r);
  h2_close(c);
}

/* Our client keeps its connection between calls: once the server closed
   it as idle, the next call still goes through (on a new one). */
static void test_client_after_idle_close(void **state) {
  conch_client *c = client_new(fast.url);
  Process__ListResponse *l = NULL;
  int i;

  (void)state;
  for (i = 0; i < 2; i++) {
    assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
    conch_message_free(c, &l->base);
    /* Past the 1.5 s idle timeout (how long past does not matter: the
       call must work either way). */
    conch_sleep_ms(2500);
  }
  assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
  conch_message_free(c, &l->base);
  conch_client_free(c);
}

/* A HEADERS frame without END_HEADERS blocks the whole connection until
   its CONTINUATION: it may not wait for it forever. */
static void test_headers_without_end(void **state) {
  uint8_t block[256];
  size_t n = request_block(SVC "List", block, sizeof(block));
  int fd = h2_bare(fast.port);
  long long t0 = conch_now_ms();

  (void)state;
  /* END_STREAM, no END_HEADERS; half the block. */
  assert_int_equal(frame_send(fd, 1, 0x1, 1, block, n / 2), 0);
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  print_message("open header block closed after %lld ms\n",
                conch_now_ms() - t0);
  close(fd);
}

/* A stranger that never opens its window cannot take its 401: the stream
   (and so the connection) does not stay open for it. */
static void test_unread_401(void **state) {
  static const uint8_t no_window[6] = {0, 4, 0, 0, 0, 0};
  uint8_t block[256];
  size_t n = request_block(SVC "List", block, sizeof(block));
  int fd = tcp_open(tok.port);
  long long t0 = conch_now_ms();

  (void)state;
  assert_true(fd >= 0);
  send_all(fd, preface, sizeof(preface) - 1);
  /* SETTINGS_INITIAL_WINDOW_SIZE = 0 */
  assert_int_equal(frame_send(fd, 4, 0, 0, no_window, sizeof(no_window)), 0);
  assert_int_equal(frame_send(fd, 1, 0x5, 1, block, n), 0);
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  print_message("unread 401: connection closed after %lld ms\n",
                conch_now_ms() - t0);
  close(fd);
}

/* A request body sent a byte at a time never completes: it is answered
   (deadline_exceeded) once the body timeout passes, and the stream goes. */
static void test_body_trickle_h2(void **state) {
  uint8_t block[256];
  size_t n = request_block(SVC "List", block, sizeof(block));
  int fd = h2_bare(fast.port);
  long long t0 = conch_now_ms();
  int type = -1;

  (void)state;
  assert_int_equal(frame_send(fd, 1, 0x4, 1, block, n), 0);
  while (conch_now_ms() - t0 < WAIT_MS) {
    if (frame_send(fd, 0, 0, 1, " ", 1) != 0) {
      break;
    }
    type = wait_answer(fd, 1, 200);
    if (type >= 0) {
      break;
    }
  }
  print_message("HTTP/2 body trickle answered (frame type %d) after %lld ms\n",
                type, conch_now_ms() - t0);
  assert_true(type == 1 || type == 3);
  close(fd);
}

static void test_body_trickle_h1(void **state) {
  static const char head[] = "POST " SVC "List HTTP/1.1\r\n"
                             "Host: 127.0.0.1\r\n"
                             "Content-Type: application/json\r\n"
                             "Content-Length: 200\r\n\r\n";
  int fd = tcp_open(fast.port);
  long long t0 = conch_now_ms();
  char buf[512];
  ssize_t got = 0;

  (void)state;
  assert_true(fd >= 0);
  send_all(fd, head, sizeof(head) - 1);
  while (conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd = {fd, POLLIN, 0};

    if (try_send(fd, " ", 1) != 0) {
      break;
    }
    if (poll(&pfd, 1, 200) > 0) {
      got = recv(fd, buf, sizeof(buf) - 1, 0);
      break;
    }
  }
  print_message("HTTP/1.1 body trickle answered after %lld ms\n",
                conch_now_ms() - t0);
  assert_true(got > 0);
  buf[got] = '\0';
  assert_true(strncmp(buf, "HTTP/1.1 ", 9) == 0);
  assert_non_null(strstr(buf, "deadline_exceeded"));
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  close(fd);
}

/* Request headers a byte at a time. */
static void test_header_trickle_h1(void **state) {
  static const char head[] = "POST " SVC "List HTTP/1.1\r\n"
                             "Host: 127.0.0.1\r\n"
                             "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                             "\r\n\r\n";
  int fd = tcp_open(fast.port);
  long long t0 = conch_now_ms();
  size_t i;
  int closed = 0;

  (void)state;
  assert_true(fd >= 0);
  /* 8 s: far more than the 1 s header timeout, less than the 10 s the
     server used to give. */
  for (i = 0; i < sizeof(head) - 1 && conch_now_ms() - t0 < 8000; i++) {
    if (try_send(fd, head + i, 1) != 0 || wait_closed(fd, 150) == 1) {
      closed = 1;
      break;
    }
  }
  print_message("HTTP/1.1 header trickle closed after %lld ms\n",
                conch_now_ms() - t0);
  assert_true(closed);
  close(fd);
}

/* ---- What the timeouts must not touch --------------------------------------
 */

/* A Start of a process that prints nothing for longer than every timeout:
   the request is in, so nothing is cut. */
static void test_long_silent_stream(void **state) {
  conch_client *c = client_new(fast.url);
  run_result r;

  (void)state;
  run_cmd(c, NULL, &r, "/bin/sh", "-c", "sleep 4; echo done", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_true(r.has_end);
  assert_int_equal(r.exit_code, 0);
  assert_string_equal(r.out, "done\n");
  conch_client_free(c);
}

static void test_long_silent_stream_h1(void **state) {
  static const char body[] =
      "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"sleep 4; echo "
      "done\"]}}";
  char head[512];
  uint8_t env[5];
  char *all = NULL;
  size_t len = 0;
  int fd = tcp_open(fast.port);
  long long t0 = conch_now_ms();
  int n;

  (void)state;
  assert_true(fd >= 0);
  n = snprintf(head, sizeof(head),
               "POST " SVC "Start HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Content-Type: application/connect+json\r\n"
               "Connection: close\r\nContent-Length: %zu\r\n\r\n",
               sizeof(body) - 1 + 5);
  env[0] = 0;
  env[1] = env[2] = env[3] = 0;
  env[4] = (uint8_t)(sizeof(body) - 1);
  send_all(fd, head, (size_t)n);
  send_all(fd, env, 5);
  send_all(fd, body, sizeof(body) - 1);
  while (conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd = {fd, POLLIN, 0};
    char buf[4096];
    ssize_t k;

    if (poll(&pfd, 1, 200) <= 0) {
      continue;
    }
    k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) {
      break;
    }
    all = realloc(all, len + (size_t)k + 1);
    assert_non_null(all);
    memcpy(all + len, buf, (size_t)k);
    len += (size_t)k;
    all[len] = '\0';
  }
  assert_non_null(all);
  assert_non_null(memmem(all, len, "ZG9uZQo=", 8)); /* "done\n" */
  assert_non_null(memmem(all, len, "exit status 0", 13));
  free(all);
  close(fd);
}

/* ---- Half-close ------------------------------------------------------------
 */

static void half_close_h2(const char *path, const char *ctype,
                          const uint8_t *body, size_t len, h2_resp *r) {
  h2_conn *c;

  assert_int_equal(h2_open(&c, fast.port), 0);
  assert_true(h2_submit(c, "POST", path,
                        (const char *const[]){"content-type", ctype, NULL},
                        body, len, r) > 0);
  assert_int_equal(h2_shutdown_write(c), 0);
  assert_int_equal(h2_run(c, WAIT_MS), 0);
  h2_close(c);
}

static void test_half_close_h2(void **state) {
  static const char start[] =
      "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"sleep 1; echo "
      "hi\"]}}";
  uint8_t env[5 + sizeof(start)];
  h2_resp r;

  (void)state;
  half_close_h2(SVC "List", "application/json", (const uint8_t *)"{}", 2, &r);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 2);
  h2_resp_free(&r);

  /* A stream still answered to its end (output after the half-close). */
  env[0] = 0;
  env[1] = env[2] = env[3] = 0;
  env[4] = (uint8_t)(sizeof(start) - 1);
  memcpy(env + 5, start, sizeof(start) - 1);
  half_close_h2(SVC "Start", "application/connect+json", env,
                5 + sizeof(start) - 1, &r);
  assert_int_equal(r.status, 200);
  assert_non_null(r.body);
  assert_non_null(memmem(r.body, r.len, "aGkK", 4)); /* "hi\n" */
  assert_non_null(memmem(r.body, r.len, "exit status 0", 13));
  h2_resp_free(&r);
}

static void test_half_close_h1(void **state) {
  static const char req[] = "POST " SVC "List HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            "Content-Type: application/json\r\n"
                            "Content-Length: 2\r\n\r\n{}";
  int fd = tcp_open(fast.port);
  char buf[1024];
  size_t len = 0;
  long long t0 = conch_now_ms();

  (void)state;
  assert_true(fd >= 0);
  send_all(fd, req, sizeof(req) - 1);
  assert_int_equal(shutdown(fd, SHUT_WR), 0);
  while (len < sizeof(buf) - 1 && conch_now_ms() - t0 < WAIT_MS) {
    ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);

    if (k <= 0) {
      break;
    }
    len += (size_t)k;
  }
  buf[len] = '\0';
  assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
  assert_non_null(strstr(buf, "\r\n\r\n{}"));
  close(fd);
}

/* ---- The connection limit --------------------------------------------------
 */

/* Strangers holding every slot (bare prefaces, with a header timeout of a
   minute) do not lock a client out: the oldest of them makes room. */
static void test_slots_held_by_strangers(void **state) {
  enum { N = 40 }; /* more than --max-connections 32 */
  int fds[N];
  int i;
  long long took;
  int closed = 0;

  (void)state;
  for (i = 0; i < N; i++) {
    fds[i] = h2_bare(capped.port);
  }
  took = list_latency(&capped);
  print_message("List with %d bare prefaces held: %lld ms\n", N, took);
  assert_true(took < 10000);
  for (i = 0; i < N; i++) {
    closed += wait_closed(fds[i], 0) == 1;
    close(fds[i]);
  }
  (void)closed;
}

/* ---- Memory ----------------------------------------------------------------
 */

/* VmHWM (peak resident set) of |pid| in KiB, or -1. */
static long peak_kb(pid_t pid) {
  char path[64];
  char line[256];
  FILE *f;
  long kb = -1;

  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return -1;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "VmHWM:", 6) == 0) {
      kb = strtol(line + 6, NULL, 10);
    }
  }
  fclose(f);
  return kb;
}

/* A 15 MiB JSON body of empty arrays: within the size limit, but its parse
   tree would be ~50 times that.  It is refused before any tree is built. */
static void test_json_bomb(void **state) {
  size_t n = 15u << 20;
  uint8_t *body = malloc(n);
  long before = peak_kb(fast.pid);
  long after;
  char code[64];
  char msg[256];
  h2_resp r;
  size_t i;

  (void)state;
  assert_non_null(body);
  body[0] = '[';
  for (i = 1; i + 3 < n; i += 3) {
    memcpy(body + i, "[],", 3);
  }
  memcpy(body + i - 1, "]", 1);
  n = i;
  assert_int_equal(h2_request(fast.port, "POST", SVC "List",
                              (const char *const[]){"content-type",
                                                    "application/json", NULL},
                              body, n, &r),
                   0);
  after = peak_kb(fast.pid);
  connect_error(&r, 0, code, sizeof(code), msg, sizeof(msg));
  print_message("JSON bomb of %zu bytes: \"%s\" %s; server peak RSS %ld -> "
                "%ld KiB\n",
                n, code, msg, before, after);
  assert_string_equal(code, "resource_exhausted");
  /* The body itself is 15 MiB; its tree would be hundreds. */
  assert_true(after - before < 150 * 1024);
  h2_resp_free(&r);
  free(body);
}

/* Sends the head of an HTTP/1.1 List whose JSON body is |len| bytes, and
   |sent| bytes of that body (spaces). */
static int h1_partial_list(int port, size_t len, size_t sent) {
  char head[256];
  char *spaces = malloc(sent);
  int fd = tcp_open(port);
  int n;

  assert_true(fd >= 0);
  assert_non_null(spaces);
  memset(spaces, ' ', sent);
  n = snprintf(head, sizeof(head),
               "POST " SVC "List HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Content-Type: application/json\r\n"
               "Content-Length: %zu\r\n\r\n",
               len);
  send_all(fd, head, (size_t)n);
  /* The server may answer and stop reading before all went. */
  while (sent > 0) {
    ssize_t k = send(fd, spaces, sent, MSG_NOSIGNAL);

    if (k <= 0) {
      break;
    }
    sent -= (size_t)k;
  }
  free(spaces);
  return fd;
}

/* Reads an answer (up to |cap| - 1 bytes, NUL-terminated). */
static size_t h1_answer(int fd, char *buf, size_t cap) {
  size_t len = 0;
  long long t0 = conch_now_ms();

  while (len < cap - 1 && conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd = {fd, POLLIN, 0};
    ssize_t k;

    if (poll(&pfd, 1, 100) <= 0) {
      continue;
    }
    k = recv(fd, buf + len, cap - 1 - len, 0);
    if (k <= 0) {
      break;
    }
    len += (size_t)k;
    if (strstr(buf, "\r\n\r\n") != NULL && len > 0 &&
        memmem(buf, len, "}", 1) != NULL) {
      break;
    }
  }
  buf[len] = '\0';
  return len;
}

/* Request bodies being received are held in memory: each connection has
   its cap, and all of them together --max-buffered-bytes (4 MiB here).
   The request that would go past it is answered resource_exhausted; the
   others go on. */
static void test_buffered_budget(void **state) {
  size_t body = 3u << 20;
  int fds[2];
  char buf[1024];
  long long t0 = conch_now_ms();
  int refused = -1;
  int i;

  (void)state;
  fds[0] = h1_partial_list(capped.port, body + 2, body);
  fds[1] = h1_partial_list(capped.port, body + 2, body);
  /* One of the two is answered at once, its body not complete. */
  while (refused < 0 && conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};

    if (poll(pfd, 2, 100) <= 0) {
      continue;
    }
    refused = (pfd[0].revents & POLLIN) != 0 ? 0 : 1;
  }
  assert_true(refused >= 0);
  h1_answer(fds[refused], buf, sizeof(buf));
  print_message("a 3 MiB body past the 4 MiB budget: after %lld ms: %.40s\n",
                conch_now_ms() - t0, buf);
  assert_non_null(strstr(buf, "resource_exhausted"));
  close(fds[refused]);
  /* The other completes its request and is answered. */
  i = 1 - refused;
  send_all(fds[i], "{}", 2);
  h1_answer(fds[i], buf, sizeof(buf));
  assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
  close(fds[i]);
}

static void wait_no_procs(conch_client *c);

/* 1 when no established TCP connection to the server at 127.0.0.1:|port|
   has bytes in flight (/proc/net/tcp): the server's end holds none it did
   not read, and the client's end none still to be delivered, so that the
   server's end being drained for a moment while the rest of a body waits
   in the client's send queue does not count as quiet. */
static int tcp_quiet(int port) {
  char line[512];
  FILE *f = fopen("/proc/net/tcp", "r");
  int quiet = 1;

  assert_non_null(f);
  if (fgets(line, sizeof(line), f) == NULL) { /* the header */
    fclose(f);
    return 0;
  }
  while (quiet && fgets(line, sizeof(line), f) != NULL) {
    unsigned lport, rport, st;
    unsigned long tx, rx;
    if (sscanf(line, "%*d: %*x:%x %*x:%x %x %lx:%lx", &lport, &rport, &st, &tx,
               &rx) == 5 &&
        st == 1 && ((lport == (unsigned)port && rx != 0) ||
                    (rport == (unsigned)port && tx != 0))) {
      quiet = 0;
    }
  }
  fclose(f);
  return quiet;
}

/* One budget for everyone: 17 HTTP/1.1 connections each hold 8 MiB of an
   unfinished List body (136 MiB against the default 128 MiB); those past
   seven eighths of the budget are refused, and a small request (a 2-byte
   List, the SendSignal of a teardown) is served at once all the same. */
static serve_peer dflt; /* conch serve's defaults (test_budget_*) */

static int dflt_setup(void **state) {
  (void)state;
  return serve_start(&dflt, NULL);
}

static int dflt_teardown(void **state) {
  (void)state;
  return serve_stop(&dflt, 10000);
}

static void test_budget_small_requests(void **state) {
  static const char *const json[] = {"content-type", "application/json", NULL};
  enum { N = 17 };
  const size_t body = 8u << 20;
  conch_client *c = client_new(dflt.url);
  struct pollfd pfd[N];
  conch_call *call;
  run_result r;
  h2_resp lr;
  char buf[1024];
  char msg[256];
  pid_t pid;
  long long t0;
  int refused = -1;
  int i;

  (void)state;
  for (i = 0; i < N; i++) {
    pfd[i].fd = h1_partial_list(dflt.port, body + 2, body);
    pfd[i].events = POLLIN;
  }
  /* The budget is full once one of them is refused. */
  t0 = conch_now_ms();
  while (refused < 0 && conch_now_ms() - t0 < WAIT_MS) {
    if (poll(pfd, N, 100) <= 0) {
      continue;
    }
    for (i = 0; i < N && refused < 0; i++) {
      if (pfd[i].revents & POLLIN) {
        refused = i;
      }
    }
  }
  assert_true(refused >= 0);
  h1_answer(pfd[refused].fd, buf, sizeof(buf));
  print_message("17 x 8 MiB: connection %d refused after %lld ms: %.60s\n",
                refused, conch_now_ms() - t0, buf);
  assert_non_null(strstr(buf, "resource_exhausted"));
  /* The others hold all they sent: the server read every byte. */
  t0 = conch_now_ms();
  while (!tcp_quiet(dflt.port) && conch_now_ms() - t0 < WAIT_MS) {
    conch_sleep_ms(20);
  }
  assert_true(tcp_quiet(dflt.port));
  /* A process to signal: its Start is a small request too. */
  call = start_call(c, NULL, &r, &pid, "sleep", "60", NULL);
  assert_non_null(call);
  note_pid(pid);
  /* Small requests go through at once. */
  t0 = conch_now_ms();
  memset(&lr, 0, sizeof(lr));
  assert_int_equal(h2_request(dflt.port, "POST", SVC "List", json,
                              (const uint8_t *)"{}", 2, &lr),
                   0);
  print_message("a 2-byte List: HTTP %d after %lld ms\n", lr.status,
                conch_now_ms() - t0);
  assert_int_equal(lr.status, 200);
  h2_resp_free(&lr);
  t0 = conch_now_ms();
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  print_message("SendSignal: ok after %lld ms\n", conch_now_ms() - t0);
  for (i = 0; i < N; i++) {
    close(pfd[i].fd);
  }
  drain_call(c, call, &r);
  conch_call_free(call);
  wait_no_procs(c);
  conch_client_free(c);
}

/* curl 7.88 over HTTP/2 reports "(92) Stream error" instead of an answer
   that comes, with a reset, before it finished sending its body: a POST
   without the token must print its 401, every time. */
static void test_curl_401_h2(void **state) {
  char cmd[512];
  int ok = 0, tries = 200;

  (void)state;
  snprintf(cmd, sizeof(cmd),
           "curl -sS --http2-prior-knowledge -o /dev/null -w '%%{http_code}' "
           "-X POST -H 'Content-Type: application/json' --data '{}' "
           "http://127.0.0.1:%d" SVC "List 2>&1",
           tok.port);
  for (int i = 0; i < tries; i++) {
    char out[256] = "";
    FILE *f = popen(cmd, "r");
    size_t n;
    int rc;
    assert_non_null(f);
    n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    rc = pclose(f);
    if (rc == 0 && strcmp(out, "401") == 0) {
      ok++;
    } else if (i - ok < 3) {
      print_message("try %d: rc %d: %s\n", i, rc, out);
    }
  }
  print_message("curl --http2-prior-knowledge without a token: %d of %d "
                "printed 401\n",
                ok, tries);
  assert_int_equal(ok, tries);
}

/* ---- Processes -------------------------------------------------------------
 */

/* Waits until List shows no process (ended ones are not listed, and are
   what the caps let go of first). */
static void wait_no_procs(conch_client *c) {
  long long t0 = conch_now_ms();
  size_t n;

  do {
    Process__ListResponse *l = NULL;

    assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
    n = l->n_processes;
    conch_message_free(c, &l->base);
    if (n > 0) {
      conch_sleep_ms(50);
    }
  } while (n > 0 && conch_now_ms() - t0 < WAIT_MS);
  assert_int_equal(n, 0);
}

/* At --max-processes running, a Start fails resource_exhausted; an ended
   process (retained for re-attach) makes room. */
static void test_process_cap(void **state) {
  conch_client *c = client_new(procs.url);
  conch_call *calls[3];
  conch_call *extra;
  run_result r;
  pid_t pids[3];
  pid_t pid;
  char msg[256];
  long long t0;
  int i;

  (void)state;
  for (i = 0; i < 3; i++) {
    calls[i] = start_call(c, NULL, &r, &pids[i], "sleep", "30", NULL);
    assert_non_null(calls[i]);
    note_pid(pids[i]);
  }
  extra = start_call(c, NULL, &r, &pid, "sleep", "30", NULL);
  assert_null(extra);
  print_message("4th Start: %d %s\n", (int)r.code, r.message);
  assert_int_equal(r.code, CONCH_CODE_RESOURCE_EXHAUSTED);
  /* Once one ended, there is room again. */
  assert_int_equal(send_signal(c, pids[0], NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  conch_call_free(calls[0]);
  t0 = conch_now_ms();
  do {
    extra = start_call(c, NULL, &r, &pid, "sleep", "30", NULL);
    if (extra == NULL) {
      conch_sleep_ms(50);
    }
  } while (extra == NULL && conch_now_ms() - t0 < WAIT_MS);
  assert_non_null(extra);
  note_pid(pid);
  send_signal(c, pid, NULL, 9, msg, sizeof(msg));
  send_signal(c, pids[1], NULL, 9, msg, sizeof(msg));
  send_signal(c, pids[2], NULL, 9, msg, sizeof(msg));
  conch_call_free(extra);
  conch_call_free(calls[1]);
  conch_call_free(calls[2]);
  wait_no_procs(c);
  conch_client_free(c);
}

/* Processes with 1 MiB tags: List (every process's StartRequest) stays
   under 4 MiB, what our client and gRPC's receive by default.  Ended ones
   are forgotten to make room; running ones past the budget are refused. */
static void test_list_fits(void **state) {
  size_t tagn = 1u << 20;
  char *tag = malloc(tagn + 1);
  conch_client *c = client_new(procs.url);
  Process__ListResponse *l = NULL;
  conch_call *calls[5];
  pid_t pids[5];
  char msg[256];
  start_opts o;
  conch_code code;
  run_result r;
  int i;

  (void)state;
  assert_non_null(tag);
  memset(&o, 0, sizeof(o));
  o.tag = tag;
  for (i = 0; i < 6; i++) {
    memset(tag, 'a' + i, tagn);
    tag[tagn] = '\0';
    run_cmd(c, &o, &r, "true", NULL);
    assert_int_equal(r.code, CONCH_CODE_OK);
  }
  assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
  conch_message_free(c, &l->base);
  for (i = 0; i < 5; i++) {
    memset(tag, 'k' + i, tagn);
    calls[i] = start_call(c, &o, &r, &pids[i], "sleep", "30", NULL);
    if (calls[i] == NULL) {
      break;
    }
    note_pid(pids[i]);
  }
  print_message("running with 1 MiB tags: %d admitted, then %d %s\n", i,
                (int)r.code, r.message);
  code = list_procs(c, &l);
  print_message("List: %d\n", (int)code);
  assert_int_equal(code, CONCH_CODE_OK);
  assert_int_equal(l->n_processes, (size_t)i);
  conch_message_free(c, &l->base);
  assert_int_equal(i, 2);
  assert_int_equal(r.code, CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(r.message, "configurations"));
  while (i-- > 0) {
    send_signal(c, pids[i], NULL, 9, msg, sizeof(msg));
    conch_call_free(calls[i]);
  }
  wait_no_procs(c);
  conch_client_free(c);
  free(tag);
}

/* Stdin queued for processes that do not read it: 16 MiB per process, and
   --max-stdin-bytes (1 MiB here) for all of them.  (A SendInput is
   answered once its input is written, so the first one stays open.) */
static void test_stdin_budget(void **state) {
  static const char *const proto_hdrs[] = {"content-type", "application/proto",
                                           NULL};
  size_t n = 600 * 1024;
  uint8_t *data = calloc(1, n);
  conch_client *c = client_new(procs.url);
  Process__SendInputRequest req = PROCESS__SEND_INPUT_REQUEST__INIT;
  Process__ProcessSelector sel = PROCESS__PROCESS_SELECTOR__INIT;
  Process__ProcessInput in = PROCESS__PROCESS_INPUT__INIT;
  conch_call *calls[2];
  pid_t pids[2];
  start_opts o;
  run_result r;
  h2_conn *h;
  h2_resp first;
  uint8_t *packed;
  char msg[256];
  conch_code code;
  int i;

  (void)state;
  assert_non_null(data);
  memset(&o, 0, sizeof(o));
  o.stdin_mode = 1;
  for (i = 0; i < 2; i++) {
    calls[i] = start_call(c, &o, &r, &pids[i], "tail", "-f", "/dev/null", NULL);
    assert_non_null(calls[i]);
    note_pid(pids[i]);
  }
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = (uint32_t)pids[0];
  in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
  in.stdin.data = data;
  in.stdin.len = n;
  req.process = &sel;
  req.input = &in;
  packed = malloc(protobuf_c_message_get_packed_size(&req.base));
  assert_non_null(packed);
  protobuf_c_message_pack(&req.base, packed);
  assert_int_equal(h2_open(&h, procs.port), 0);
  assert_true(h2_submit(h, "POST", SVC "SendInput", proto_hdrs, packed,
                        protobuf_c_message_get_packed_size(&req.base),
                        &first) > 0);
  /* Sent, and not answered: the input waits for a reader. */
  assert_int_not_equal(h2_run(h, 1000), 0);
  assert_int_equal(first.done, 0);

  code = send_input(c, pids[1], NULL, 0, data, n, 0, msg, sizeof(msg));
  print_message("another 600 KiB of unread stdin: %d %s\n", (int)code, msg);
  assert_int_equal(code, CONCH_CODE_RESOURCE_EXHAUSTED);
  for (i = 0; i < 2; i++) {
    send_signal(c, pids[i], NULL, 9, msg, sizeof(msg));
    conch_call_free(calls[i]);
  }
  h2_run(h, WAIT_MS);
  h2_resp_free(&first);
  h2_close(h);
  free(packed);
  wait_no_procs(c);
  conch_client_free(c);
  free(data);
}

/* ---- Out of descriptors ----------------------------------------------------
 */

/* The lowest descriptor number |pid| has free: with that as its limit, it
   can open no more. */
static int free_fd(pid_t pid) {
  char path[64];
  struct stat sb;
  int n;

  for (n = 0;; n++) {
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, n);
    if (lstat(path, &sb) != 0) {
      return n;
    }
  }
}

/* The pidfds |pid| holds: one per group it still follows, closed once
   the group is gone (a moment after the process's end). */
static int pidfds_of(pid_t pid) { return proc_fds_of(pid, "pidfd"); }

static int no_pidfds(void *arg) { return pidfds_of(*(pid_t *)arg) == 0; }

static const char start_json[] =
    "{\"process\":{\"cmd\":\"/bin/echo\",\"args\":[\"fine\"]}}";

/* A Start on |c|: the Connect error code in |code| ("" when it ran). */
static void start_on(h2_conn *c, char *code, size_t codelen) {
  uint8_t env[5 + sizeof(start_json)];
  char msg[256];
  h2_resp r;

  env[0] = 0;
  env[1] = env[2] = env[3] = 0;
  env[4] = (uint8_t)(sizeof(start_json) - 1);
  memcpy(env + 5, start_json, sizeof(start_json) - 1);
  assert_true(h2_submit(c, "POST", SVC "Start",
                        (const char *const[]){"content-type",
                                              "application/connect+json", NULL},
                        env, 5 + sizeof(start_json) - 1, &r) > 0);
  assert_int_equal(h2_run(c, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  connect_error(&r, 1, code, codelen, msg, sizeof(msg));
  print_message("Start: \"%s\" %s\n", code, msg);
  h2_resp_free(&r);
}

/* With no descriptor left, a Start fails as resource_exhausted (it is not
   the request's fault), a new client is turned away at once instead of
   hanging in the backlog, and all is well again once descriptors are
   back. */
static void test_out_of_descriptors(void **state) {
  serve_peer p;
  h2_conn *c;
  h2_resp r;
  char code[64];
  struct rlimit old;
  struct rlimit low;
  long long t0;
  long long took;
  int rv;

  (void)state;
  assert_int_equal(serve_start(&p, NULL), 0);
  assert_int_equal(h2_open(&c, p.port), 0);
  start_on(c, code, sizeof(code));
  assert_string_equal(code, "");
  /* Its group followed no more: no descriptor of the server closes after
     the limit is set (one that did would let the new client in). */
  assert_true(conch_wait_until(no_pidfds, &p.pid, CONCH_WAIT_MS));

  assert_int_equal(prlimit(p.pid, RLIMIT_NOFILE, NULL, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)free_fd(p.pid);
  assert_int_equal(prlimit(p.pid, RLIMIT_NOFILE, &low, NULL), 0);

  start_on(c, code, sizeof(code));
  assert_string_equal(code, "resource_exhausted");

  t0 = conch_now_ms();
  rv = h2_request(p.port, "GET", "/health", NULL, NULL, 0, &r);
  took = conch_now_ms() - t0;
  print_message("new client out of descriptors: %s after %lld ms\n",
                rv == 0 ? "answered" : "refused", took);
  assert_int_not_equal(r.status, 204);
  assert_true(took < 5000); /* not hanging until our 10 s limit */
  h2_resp_free(&r);

  assert_int_equal(prlimit(p.pid, RLIMIT_NOFILE, &old, NULL), 0);
  t0 = conch_now_ms();
  do {
    rv = h2_request(p.port, "GET", "/health", NULL, NULL, 0, &r);
    if (rv != 0 || r.status != 204) {
      h2_resp_free(&r);
      conch_sleep_ms(50);
    }
  } while ((rv != 0 || r.status != 204) && conch_now_ms() - t0 < WAIT_MS);
  assert_int_equal(r.status, 204);
  h2_resp_free(&r);
  start_on(c, code, sizeof(code));
  assert_string_equal(code, "");
  h2_close(c);
  assert_int_equal(serve_stop(&p, 10000), 0);
}

/* ---- TLS -------------------------------------------------------------------
 */

/* A TLS handshake offering only |ciphers| (TLS 1.2) or TLS 1.3, with ALPN
   h2.  Returns 1 when it succeeded (the ALPN chosen in |alpn|), 0 if
   not. */
static int tls_try(int port, int v13, const char *ciphers, char *alpn,
                   size_t alpnlen) {
  static const unsigned char protos[] = "\x02h2";
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  SSL *ssl;
  int fd = tcp_open(port);
  int ok;
  const unsigned char *sel = NULL;
  unsigned int sellen = 0;

  assert_non_null(ctx);
  assert_true(fd >= 0);
  if (v13) {
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  } else {
    SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
    /* Level 0: let the client offer what the server must refuse. */
    SSL_CTX_set_security_level(ctx, 0);
    assert_int_equal(SSL_CTX_set_cipher_list(ctx, ciphers), 1);
  }
  SSL_CTX_set_alpn_protos(ctx, protos, sizeof(protos) - 1);
  ssl = SSL_new(ctx);
  assert_non_null(ssl);
  SSL_set_fd(ssl, fd);
  ok = SSL_connect(ssl) == 1;
  alpn[0] = '\0';
  if (ok) {
    SSL_get0_alpn_selected(ssl, &sel, &sellen);
    snprintf(alpn, alpnlen, "%.*s", (int)sellen, sel);
    SSL_shutdown(ssl);
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return ok;
}

/* Only forward-secret AEAD suites, which are also the only ones HTTP/2 may
   use (RFC 9113 9.2.2): no CBC, no static RSA key exchange. */
static void test_tls_suites(void **state) {
  char dir[] = "/tmp/conch-serve-limits-XXXXXX";
  char cmd[768];
  char cert[128];
  char key[128];
  char alpn[32];
  const char *args[5];
  serve_peer p;

  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(cert, sizeof(cert), "%s/rsa.pem", dir);
  snprintf(key, sizeof(key), "%s/rsa.key", dir);
  /* RSA, so that static RSA key exchange is possible at all. */
  snprintf(cmd, sizeof(cmd),
           "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
           "/CN=127.0.0.1 -keyout %s -out %s >/dev/null 2>&1",
           key, cert);
  assert_int_equal(system(cmd), 0);
  args[0] = "--tls-cert";
  args[1] = cert;
  args[2] = "--tls-key";
  args[3] = key;
  args[4] = NULL;
  assert_int_equal(serve_start(&p, args), 0);

  assert_int_equal(tls_try(p.port, 0, "AES128-GCM-SHA256", alpn, 32), 0);
  assert_int_equal(tls_try(p.port, 0, "AES128-SHA", alpn, 32), 0);
  assert_int_equal(tls_try(p.port, 0, "ECDHE-RSA-AES128-SHA", alpn, 32), 0);
  assert_int_equal(tls_try(p.port, 0, "ECDHE-RSA-AES256-SHA384", alpn, 32), 0);
  assert_int_equal(tls_try(p.port, 0, "DHE-RSA-AES128-GCM-SHA256", alpn, 32),
                   0);
  assert_int_equal(tls_try(p.port, 0, "ECDHE-RSA-AES128-GCM-SHA256", alpn, 32),
                   1);
  assert_string_equal(alpn, "h2");
  assert_int_equal(tls_try(p.port, 0, "ECDHE-RSA-CHACHA20-POLY1305", alpn, 32),
                   1);
  assert_int_equal(tls_try(p.port, 1, NULL, alpn, 32), 1);
  assert_string_equal(alpn, "h2");

  assert_int_equal(serve_stop(&p, 10000), 0);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest all[] = {
      cmocka_unit_test(test_idle_prefaces_closed),
      cmocka_unit_test(test_idle_after_request),
      cmocka_unit_test(test_client_after_idle_close),
      cmocka_unit_test(test_headers_without_end),
      cmocka_unit_test(test_unread_401),
      cmocka_unit_test(test_body_trickle_h2),
      cmocka_unit_test(test_body_trickle_h1),
      cmocka_unit_test(test_header_trickle_h1),
      cmocka_unit_test(test_long_silent_stream),
      cmocka_unit_test(test_long_silent_stream_h1),
      cmocka_unit_test(test_half_close_h2),
      cmocka_unit_test(test_half_close_h1),
      cmocka_unit_test(test_slots_held_by_strangers),
      cmocka_unit_test(test_json_bomb),
      cmocka_unit_test(test_buffered_budget),
      cmocka_unit_test_setup_teardown(test_budget_small_requests, dflt_setup,
                                      dflt_teardown),
      cmocka_unit_test(test_curl_401_h2),
      cmocka_unit_test(test_process_cap),
      cmocka_unit_test(test_list_fits),
      cmocka_unit_test(test_stdin_budget),
      cmocka_unit_test(test_out_of_descriptors),
      cmocka_unit_test(test_tls_suites),
  };

  if (getenv("SERVE_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
  }
  return cmocka_run_group_tests(all, group_setup, group_teardown);
}
