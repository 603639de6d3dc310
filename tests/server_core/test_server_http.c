/* Plain HTTP handlers of the server core (conch_server_add_http()): request
   bodies streamed to the handler over HTTP/2 and HTTP/1.1 (Content-Length
   and chunked, chunks split at every size), responses streamed back with
   a declared length (Content-Length over HTTP/1.1) or without, HEAD, an
   answer before the body ended, a promise of more bytes than were sent
   (never taken for a whole response), and the bounds: a client that stops
   reading holds the response budget and no more, a paused upload holds
   its flow-control window and no more, a client that leaves is a
   cancel.  curl (HTTP/1.1 and HTTP/2 with prior knowledge) and raw
   sockets are the clients; the server runs on a thread of its own
   (svc.c). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "support.h" /* tcp_open */
#include "svc.h"
#include "wait.h"

#define PIECE (64 * 1024)

static fixture fxs;
static fixture *fx = &fxs;
static int port;

/* What the handlers saw (they run on the server's thread). */
static atomic_int cancels;
static atomic_int again;
static atomic_int paused;
static atomic_long max_queued;
static atomic_llong down_written;
static atomic_llong up_received;
static conch_http *paused_h; /* read by the test while the thread stops */

static uint8_t pat(uint64_t i) { return (uint8_t)(i * 7 + i / 251); }

static uint32_t fnv(uint32_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h = (h ^ p[i]) * 16777619u;
  }
  return h;
}

/* A query value (digits), or |def|. */
static long long qnum(const char *q, const char *key, long long def) {
  size_t k = strlen(key);
  for (const char *p = q; p != NULL && *p != '\0';) {
    if (strncmp(p, key, k) == 0 && p[k] == '=') {
      return atoll(p + k + 1);
    }
    p = strchr(p, '&');
    p = p != NULL ? p + 1 : NULL;
  }
  return def;
}

/* ---- /up: counts and hashes the body; ?pause=1 pauses after a chunk -------- */

typedef struct up_state {
  long long n;
  uint32_t h;
  int pause;
} up_state;

static void up_request(conch_http *h, void *ud) {
  up_state *u = calloc(1, sizeof(*u));
  (void)ud;
  assert_non_null(u);
  u->h = 2166136261u;
  u->pause = qnum(conch_http_query(h), "pause", 0) != 0;
  atomic_store(&up_received, 0);
  conch_http_set_data(h, u);
}

static void up_body(conch_http *h, const uint8_t *p, size_t n, void *ud) {
  up_state *u = conch_http_data(h);
  (void)ud;
  u->n += (long long)n;
  u->h = fnv(u->h, p, n);
  atomic_store(&up_received, u->n);
  if (u->pause) {
    u->pause = 0;
    assert_int_equal(conch_http_pause(h), 0);
    paused_h = h;
    atomic_store(&paused, 1);
  }
}

static void up_end(conch_http *h, void *ud) {
  static const char *const hdrs[] = {"content-type", "application/json",
                                     "x-kind", "up", NULL};
  up_state *u = conch_http_data(h);
  char body[96];
  int n = snprintf(body, sizeof(body), "{\"n\":%lld,\"h\":%u}", u->n, u->h);
  (void)ud;
  assert_int_equal(conch_http_respond(h, 200, hdrs, 1), 0);
  assert_int_equal(conch_http_respond(h, 200, hdrs, 1), CONCH_ERR_STATE);
  assert_int_equal(conch_http_write(h, body, (size_t)n), 0);
  conch_http_set_data(h, NULL);
  free(u);
  assert_int_equal(conch_http_end(h), 0);
  assert_int_equal(conch_http_end(h), CONCH_ERR_STATE);
}

static void any_cancel(conch_http *h, void *ud) {
  (void)ud;
  free(conch_http_data(h));
  atomic_fetch_add(&cancels, 1);
}

/* ---- /down?n=N: N pattern bytes; &nolen=1 without content-length;
   &short=1 promises N, sends N/2 ------------------------------------------ */

typedef struct down_state {
  long long n, sent, stop;
} down_state;

static void down_pump(conch_http *h, void *ud) {
  down_state *d = conch_http_data(h);
  uint8_t buf[PIECE];
  (void)ud;
  while (d->sent < d->stop) {
    size_t k = d->stop - d->sent < PIECE ? (size_t)(d->stop - d->sent) : PIECE;
    for (size_t i = 0; i < k; i++) {
      buf[i] = pat((uint64_t)d->sent + i);
    }
    int rv = conch_http_write(h, buf, k);
    if (rv == CONCH_ERR_AGAIN) {
      atomic_fetch_add(&again, 1);
      return;
    }
    assert_int_equal(rv, 0);
    d->sent += (long long)k;
    atomic_store(&down_written, d->sent);
    if ((long)conch_http_queued(h) > atomic_load(&max_queued)) {
      atomic_store(&max_queued, (long)conch_http_queued(h));
    }
  }
  conch_http_set_data(h, NULL);
  free(d);
  assert_int_equal(conch_http_end(h), 0);
}

/* test_download's X-Probe header, seen through conch_http_header_at(). */
static atomic_int down_probe_seen;

static void down_request(conch_http *h, void *ud) {
  const char *q = conch_http_query(h);
  down_state *d = calloc(1, sizeof(*d));
  char len[32];
  const char *hdrs[] = {"content-type", "application/octet-stream",
                        "content-length", len, NULL};
  assert_non_null(d);
  assert_string_equal(conch_http_path(h), "/down");
  /* Every header conch_http_header_at() lists, conch_http_header() finds
     (the first of a name), lower-cased; none past the count. */
  {
    size_t nh = conch_http_header_count(h);
    for (size_t i = 0; i < nh; i++) {
      const char *name, *value, *first;
      size_t vl;
      assert_int_equal(conch_http_header_at(h, i, &name, &value, &vl), 0);
      assert_int_equal(strlen(value), vl);
      for (const char *c = name; *c != '\0'; c++) {
        assert_false(*c >= 'A' && *c <= 'Z');
      }
      first = conch_http_header(h, name);
      assert_non_null(first);
      if (strcmp(name, "x-probe") == 0 && strcmp(value, "One") == 0) {
        atomic_store(&down_probe_seen, 1);
      }
    }
    assert_int_equal(conch_http_header_at(h, nh, NULL, NULL, NULL),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_http_header_at(NULL, 0, NULL, NULL, NULL),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_http_header_count(NULL), 0);
  }
  d->n = qnum(q, "n", 0);
  d->stop = qnum(q, "short", 0) ? d->n / 2 : d->n;
  snprintf(len, sizeof(len), "%lld", d->n);
  if (qnum(q, "nolen", 0)) {
    hdrs[2] = NULL;
  }
  conch_http_set_data(h, d);
  atomic_store(&down_written, 0);
  assert_int_equal(conch_http_write(h, "x", 1), CONCH_ERR_STATE);
  assert_int_equal(conch_http_respond(h, 600, hdrs, 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_http_respond(h, 200, hdrs, 1), 0);
  down_pump(h, ud);
}

/* ---- /early: 401 at once, whatever the body ------------------------------- */

static void early_request(conch_http *h, void *ud) {
  static const char *const hdrs[] = {"content-type", "application/json",
                                     "content-length", "15", NULL};
  (void)ud;
  assert_int_equal(conch_http_respond(h, 401, hdrs, 1), 0);
  assert_int_equal(conch_http_write(h, "{\"code\":401}   ", 15), 0);
  assert_int_equal(conch_http_write(h, "x", 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_http_end(h), 0);
}

static int setup(void **state) {
  const conch_http_handler up = {up_request, up_body, up_end, NULL,
                                 any_cancel};
  const conch_http_handler down = {down_request, NULL, NULL, down_pump,
                                   any_cancel};
  const conch_http_handler early = {early_request, NULL, NULL, NULL,
                                    any_cancel};
  const conch_http_handler none = {NULL, NULL, NULL, NULL, NULL};
  (void)state;
  fx_start(fx, NULL, 0);
  fx_pause(fx);
  assert_int_equal(conch_server_add_http(fx->s, "/up", &up, NULL), 0);
  assert_int_equal(conch_server_add_http(fx->s, "/down", &down, NULL), 0);
  assert_int_equal(conch_server_add_http(fx->s, "/early", &early, NULL), 0);
  assert_int_equal(conch_server_add_http(fx->s, "/up", &up, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_http(fx->s, SVC "Unary", &up, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_http(fx->s, "up", &up, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_http(fx->s, "/x", &none, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_http(NULL, "/x", &up, NULL),
                   CONCH_ERR_INVALID);
  fx_resume(fx);
  port = conch_server_port(fx->s);
  atomic_store(&cancels, 0);
  atomic_store(&again, 0);
  atomic_store(&paused, 0);
  atomic_store(&max_queued, 0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fx_stop(fx);
  return 0;
}

/* ---- Helpers --------------------------------------------------------------- */

static const char *run(const char *cmd) {
  static char out[8192];
  FILE *p = popen(cmd, "r");
  size_t n;
  assert_non_null(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  pclose(p);
  return out;
}

static char dir[] = "/tmp/conch-srvhttp-XXXXXX";

/* A file of |n| pattern bytes; its hash in |*h|. */
static void make_file(const char *path, long long n, uint32_t *h) {
  FILE *f = fopen(path, "w");
  uint8_t buf[PIECE];
  assert_non_null(f);
  *h = 2166136261u;
  for (long long off = 0; off < n;) {
    size_t k = n - off < PIECE ? (size_t)(n - off) : PIECE;
    for (size_t i = 0; i < k; i++) {
      buf[i] = pat((uint64_t)off + i);
    }
    *h = fnv(*h, buf, k);
    assert_int_equal(fwrite(buf, 1, k, f), k);
    off += (long long)k;
  }
  fclose(f);
}

/* The file holds |n| pattern bytes. */
static int file_is_pattern(const char *path, long long n) {
  FILE *f = fopen(path, "r");
  uint8_t buf[PIECE];
  long long off = 0;
  size_t k;
  if (f == NULL) {
    return 0;
  }
  while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
    for (size_t i = 0; i < k; i++) {
      if (buf[i] != pat((uint64_t)off + i)) {
        fclose(f);
        return 0;
      }
    }
    off += (long long)k;
  }
  fclose(f);
  return off == n;
}

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

/* Reads until the peer closes or |ms| pass; returns what came (malloc'd,
   NUL-terminated), its length in |*len|. */
static char *read_all(int fd, size_t *len, int ms) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap + 1);
  long long end = conch_now_ms() + ms;
  assert_non_null(b);
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    long long left = end - conch_now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
      break;
    }
    if (n == cap) {
      cap *= 2;
      b = realloc(b, cap + 1);
      assert_non_null(b);
    }
    ssize_t k = recv(fd, b + n, cap - n, 0);
    if (k <= 0) {
      break;
    }
    n += (size_t)k;
  }
  b[n] = '\0';
  *len = n;
  return b;
}

static int cancels_seen(void *arg) {
  return atomic_load(&cancels) >= *(int *)arg;
}

/* ---- Tests ------------------------------------------------------------------ */

static void test_upload(void **state) {
  char path[128], cmd[1024], want[96];
  const char *out;
  uint32_t h;
  long long n = 5 * 1024 * 1024 + 17;
  (void)state;
  snprintf(path, sizeof(path), "%s/up.bin", dir);
  make_file(path, n, &h);
  snprintf(want, sizeof(want), "{\"n\":%lld,\"h\":%u}", n, h);
  /* HTTP/2 (flow control over several windows), HTTP/1.1 with
     Content-Length (Expect: 100-continue), HTTP/1.1 chunked. */
  const char *modes[] = {
      "--http2-prior-knowledge", "--http1.1",
      "--http1.1 -H 'Transfer-Encoding: chunked'"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(cmd, sizeof(cmd),
             "curl -sS --max-time 60 %s -w ' %%{http_version} "
             "%%{response_code} %%{content_type}' -H 'content-type: "
             "application/octet-stream' --data-binary @%s '%s/up?x=1'",
             modes[i], path, fx->url);
    out = run(cmd);
    if (strncmp(out, want, strlen(want)) != 0 ||
        strstr(out, " 200 application/json") == NULL) {
      fail_msg("%s: %s (want %s)", modes[i], out, want);
    }
  }
  unlink(path);
}

/* Chunked request bodies with chunks of every size from 1 byte, split
   across reads at odd places: the handler gets the bytes joined, in
   order, once each. */
static void test_chunked_split(void **state) {
  uint8_t body[70000];
  char head[256], want[96];
  uint32_t h = 2166136261u;
  size_t off = 0, k = 1, len;
  int fd;
  char *resp;
  (void)state;
  for (size_t i = 0; i < sizeof(body); i++) {
    body[i] = pat(i);
  }
  h = fnv(h, body, sizeof(body));
  fd = tcp_open(port);
  assert_true(fd >= 0);
  snprintf(head, sizeof(head),
           "POST /up HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: "
           "chunked\r\nConnection: close\r\n\r\n");
  send_all(fd, head, strlen(head));
  while (off < sizeof(body)) {
    char line[32];
    size_t m = k < sizeof(body) - off ? k : sizeof(body) - off;
    int ln = snprintf(line, sizeof(line), "%zx\r\n", m);
    /* The chunk head, its data and its CRLF in three sends, the data cut
       in two. */
    send_all(fd, line, (size_t)ln);
    send_all(fd, body + off, m / 2);
    send_all(fd, body + off + m / 2, m - m / 2);
    send_all(fd, "\r\n", 2);
    off += m;
    k = k * 3 + 1;
  }
  send_all(fd, "0\r\n\r\n", 5);
  resp = read_all(fd, &len, 30000);
  close(fd);
  snprintf(want, sizeof(want), "{\"n\":%zu,\"h\":%u}", sizeof(body), h);
  if (strstr(resp, "HTTP/1.1 200 OK\r\n") != resp ||
      strstr(resp, "\r\nX-Kind: up\r\n") == NULL ||
      strstr(resp, want) == NULL) {
    fail_msg("%s", resp);
  }
  free(resp);
}

static void test_download(void **state) {
  char path[128], cmd[1024];
  const char *out;
  long long n = 6 * 1024 * 1024 + 5;
  const char *modes[] = {"--http2-prior-knowledge", "--http1.1"};
  (void)state;
  snprintf(path, sizeof(path), "%s/down.bin", dir);
  for (size_t i = 0; i < 2; i++) {
    for (int nolen = 0; nolen < 2; nolen++) {
      snprintf(cmd, sizeof(cmd),
               "curl -sS --max-time 60 %s -H 'X-Probe: One' -D - -o %s "
               "'%s/down?n=%lld&nolen=%d'",
               modes[i], path, fx->url, n, nolen);
      atomic_store(&down_probe_seen, 0);
      out = run(cmd);
      assert_int_equal(atomic_load(&down_probe_seen), 1);
      if (strstr(out, " 200") == NULL || !file_is_pattern(path, n)) {
        fail_msg("%s nolen=%d: %s", modes[i], nolen, out);
      }
      /* HTTP/1.1: the declared length goes out as Content-Length, a body
         without one is chunked. */
      if (i == 1 && !nolen &&
          strcasestr(out, "content-length: 6291461") == NULL) {
        fail_msg("%s", out);
      }
      if (i == 1 && nolen &&
          strcasestr(out, "transfer-encoding: chunked") == NULL) {
        fail_msg("%s", out);
      }
    }
  }
  unlink(path);
  /* HEAD: the head, no body. */
  snprintf(cmd, sizeof(cmd),
           "curl -sS --max-time 30 --http1.1 -I '%s/down?n=10'", fx->url);
  out = run(cmd);
  if (strstr(out, "200") == NULL || strcasestr(out, "content-length: 10") ==
                                        NULL) {
    fail_msg("%s", out);
  }
  /* An empty body. */
  snprintf(cmd, sizeof(cmd),
           "curl -sS --max-time 30 --http1.1 -D - -o /dev/null '%s/down?n=0'",
           fx->url);
  out = run(cmd);
  if (strcasestr(out, "content-length: 0") == NULL) {
    fail_msg("%s", out);
  }
}

static int again_seen(void *arg) {
  (void)arg;
  return atomic_load(&again) > 0;
}

/* A client that stops reading: the handler is refused (AGAIN), the queue
   stays within the budget, and the download stops far short of its end;
   the client's leaving cancels the exchange. */
static void test_slow_reader(void **state) {
  const char req[] =
      "GET /down?n=1073741824 HTTP/1.1\r\nHost: localhost\r\n\r\n";
  int fd = tcp_open(port);
  long long w1;
  (void)state;
  assert_true(fd >= 0);
  send_all(fd, req, sizeof(req) - 1);
  assert_true(conch_wait_until(again_seen, NULL, CONCH_WAIT_MS));
  w1 = atomic_load(&down_written);
  /* What is out there: the budget, the bridge's window, the socket
     buffers; nowhere near 1 GiB. */
  assert_true(w1 < 64LL * 1024 * 1024);
  assert_true(atomic_load(&max_queued) <= 256 * 1024 + PIECE);
  close(fd);
  int want = 1;
  assert_true(conch_wait_until(cancels_seen, &want, CONCH_WAIT_MS));
}

static int paused_seen(void *arg) {
  (void)arg;
  return atomic_load(&paused) != 0;
}

/* A paused upload: the client is held to the window, the server holds no
   more than that; resumed, the whole body arrives. */
static void test_pause(void **state) {
  char path[128], cmd[1024], want[96];
  const char *modes[] = {"--http2-prior-knowledge", "--http1.1"};
  uint32_t h;
  long long n = 8 * 1024 * 1024;
  (void)state;
  snprintf(path, sizeof(path), "%s/pause.bin", dir);
  make_file(path, n, &h);
  snprintf(want, sizeof(want), "{\"n\":%lld,\"h\":%u}", n, h);
  for (size_t i = 0; i < 2; i++) {
    char outp[160];
    FILE *p;
    conch_server_stats st;
    snprintf(outp, sizeof(outp), "%s/out%zu", dir, i);
    atomic_store(&paused, 0);
    snprintf(cmd, sizeof(cmd),
             "curl -sS --max-time 60 %s -o %s -H 'content-type: "
             "application/octet-stream' --data-binary @%s '%s/up?pause=1'",
             modes[i], outp, path, fx->url);
    p = popen(cmd, "r");
    assert_non_null(p);
    assert_true(conch_wait_until(paused_seen, NULL, CONCH_WAIT_MS));
    /* The server's thread stops: the exchange can be looked at and resumed
       from here. */
    fx_pause(fx);
    assert_int_equal(conch_server_stats_get(fx->s, &st, sizeof(st)), 0);
    assert_true(st.buffered <= 1024 * 1024 + 16 * 1024);
    assert_true(atomic_load(&up_received) < n);
    assert_int_equal(conch_http_resume(paused_h), 0);
    fx_resume(fx);
    pclose(p);
    p = fopen(outp, "r");
    assert_non_null(p);
    char got[128] = "";
    (void)!fgets(got, sizeof(got), p);
    fclose(p);
    unlink(outp);
    if (strcmp(got, want) != 0) {
      fail_msg("%s: %s (want %s)", modes[i], got, want);
    }
  }
  unlink(path);
}

/* A response that promised more than it sent: HTTP/1.1 closes the
   connection short of the length, HTTP/2 resets the stream; neither
   client takes it for whole. */
static void test_short_promise(void **state) {
  const char req[] =
      "GET /down?n=1000000&short=1 HTTP/1.1\r\nHost: localhost\r\n\r\n";
  char cmd[512];
  const char *out;
  size_t len;
  char *resp;
  int fd = tcp_open(port);
  (void)state;
  assert_true(fd >= 0);
  send_all(fd, req, sizeof(req) - 1);
  resp = read_all(fd, &len, 30000);
  close(fd);
  assert_non_null(strstr(resp, "Content-Length: 1000000\r\n"));
  assert_true(len < 1000000);
  free(resp);
  snprintf(cmd, sizeof(cmd),
           "curl -sS --max-time 30 --http2-prior-knowledge -o /dev/null "
           "'%s/down?n=1000000&short=1' 2>&1; echo \" rc=$?\"",
           fx->url);
  out = run(cmd);
  if (strstr(out, " rc=0") != NULL) {
    fail_msg("%s", out);
  }
}

/* An answer before the body ended: the client reads it. */
static void test_early_answer(void **state) {
  char path[128], cmd[1024];
  const char *out;
  uint32_t h;
  const char *modes[] = {"--http2-prior-knowledge", "--http1.1"};
  (void)state;
  snprintf(path, sizeof(path), "%s/early.bin", dir);
  make_file(path, 300000, &h);
  for (size_t i = 0; i < 2; i++) {
    snprintf(cmd, sizeof(cmd),
             "curl -sS --max-time 30 %s -w ' %%{response_code}' "
             "--data-binary @%s '%s/early'",
             modes[i], path, fx->url);
    out = run(cmd);
    if (strstr(out, "{\"code\":401}") == NULL || strstr(out, " 401") == NULL) {
      fail_msg("%s: %s", modes[i], out);
    }
  }
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_upload, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chunked_split, setup, teardown),
      cmocka_unit_test_setup_teardown(test_download, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slow_reader, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pause, setup, teardown),
      cmocka_unit_test_setup_teardown(test_short_promise, setup, teardown),
      cmocka_unit_test_setup_teardown(test_early_answer, setup, teardown),
  };
  int rv;
  if (mkdtemp(dir) == NULL) {
    return 1;
  }
  rv = cmocka_run_group_tests(tests, NULL, NULL);
  rmdir(dir);
  return rv;
}
