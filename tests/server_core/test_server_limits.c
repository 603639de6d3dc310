/* The server core's limits as a server built with the defaults has them
   (conch/server.h, "Limits"), and the one budget of buffered request
   bytes shared fairly:

   - many connections holding partial messages stay within the default
     budget (the server's own accounting, conch_server_stats_get());
   - idle prefaces, silent connections and slowloris headers (HTTP/2 and
     HTTP/1.1) are cut off by the default header timeout;
   - out of descriptors, an idle connection makes room for a client
     instead of the client being turned away;
   - requests that fill the budget leave room for small ones: a small
     request is served at once, and when small ones fill the reserve too,
     the largest holder makes room.

   The peers are nghttp2 client sessions and hand-made frames on real
   sockets; the server runs on a thread of its own (svc.c). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <nghttp2/nghttp2.h>

#include "support.h" /* tests/server: tcp_open, wait_closed, h2_request */
#include "svc.h"

#define WAIT_MS 30000 /* generous: a loaded 2-core machine */

/* ---- Holders: request bodies that never end ----------------------------- */

#define MAX_STREAMS 16

/* One connection whose streams each send |want| body bytes and then
   nothing more (the data source defers for good). */
typedef struct holder {
  int fd;
  nghttp2_session *h2;
  size_t want;
  int grpc;     /* gRPC ClientStream: an envelope claiming |claim| bytes */
  size_t claim; /* (Connect unary otherwise: the bytes as they are) */
  int n;
  int32_t id[MAX_STREAMS];
  size_t sent[MAX_STREAMS];
  int answered[MAX_STREAMS]; /* HEADERS, RST_STREAM or the stream closed */
  int status[MAX_STREAMS];   /* :status of the answer, 0 if none */
  int goaway;
  int closed;
} holder;

static int stream_index(holder *h, int32_t id) {
  for (int i = 0; i < h->n; i++) {
    if (h->id[i] == id) {
      return i;
    }
  }
  return -1;
}

static ssize_t h_send(nghttp2_session *s, const uint8_t *p, size_t n, int flags,
                      void *ud) {
  holder *h = ud;
  ssize_t k = send(h->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)s;
  (void)flags;
  if (k < 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK
               ? NGHTTP2_ERR_WOULDBLOCK
               : NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return k;
}

static ssize_t h_recv(nghttp2_session *s, uint8_t *p, size_t n, int flags,
                      void *ud) {
  holder *h = ud;
  ssize_t k = recv(h->fd, p, n, MSG_DONTWAIT);
  (void)s;
  (void)flags;
  if (k == 0) {
    return NGHTTP2_ERR_EOF;
  }
  if (k < 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK
               ? NGHTTP2_ERR_WOULDBLOCK
               : NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return k;
}

static int h_header(nghttp2_session *s, const nghttp2_frame *f,
                    const uint8_t *name, size_t namelen, const uint8_t *value,
                    size_t valuelen, uint8_t flags, void *ud) {
  holder *h = ud;
  int i = stream_index(h, f->hd.stream_id);
  (void)s;
  (void)flags;
  if (i >= 0 && namelen == 7 && memcmp(name, ":status", 7) == 0 &&
      valuelen == 3) {
    h->status[i] = atoi((const char *)value);
  }
  return 0;
}

static int h_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  holder *h = ud;
  int i = stream_index(h, f->hd.stream_id);
  (void)s;
  if (f->hd.type == NGHTTP2_GOAWAY) {
    h->goaway = 1;
  } else if (i >= 0 && (f->hd.type == NGHTTP2_HEADERS ||
                        f->hd.type == NGHTTP2_RST_STREAM)) {
    h->answered[i] = 1;
  }
  return 0;
}

static int h_close(nghttp2_session *s, int32_t id, uint32_t err, void *ud) {
  holder *h = ud;
  int i = stream_index(h, id);
  (void)s;
  (void)err;
  if (i >= 0) {
    h->answered[i] = 1;
  }
  return 0;
}

static ssize_t h_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                      uint32_t *flags, nghttp2_data_source *src, void *ud) {
  holder *h = ud;
  int i = stream_index(h, id);
  size_t left, k;
  (void)s;
  (void)flags;
  (void)src;
  if (i < 0 || h->sent[i] >= h->want) {
    return NGHTTP2_ERR_DEFERRED; /* and never resumed */
  }
  left = h->want - h->sent[i];
  k = len < left ? len : left;
  memset(buf, 0, k);
  if (h->grpc && h->sent[i] == 0 && k >= 5) {
    buf[1] = (uint8_t)(h->claim >> 24);
    buf[2] = (uint8_t)(h->claim >> 16);
    buf[3] = (uint8_t)(h->claim >> 8);
    buf[4] = (uint8_t)h->claim;
  }
  h->sent[i] += k;
  return (ssize_t)k;
}

/* Opens a holder with |n| streams of |want| bytes each. */
static holder *holder_open(int port, int n, size_t want, int grpc,
                           size_t claim) {
  holder *h = calloc(1, sizeof(*h));
  nghttp2_session_callbacks *cb;
  nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20};
  const char *path = grpc ? SVC "ClientStream" : SVC "Unary";
  const char *ctype = grpc ? "application/grpc" : "application/proto";
  nghttp2_nv nv[5] = {
      {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
      {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
      {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
      {(uint8_t *)":authority", (uint8_t *)"127.0.0.1", 10, 9, 0},
      {(uint8_t *)"content-type", (uint8_t *)ctype, 12, strlen(ctype), 0},
  };

  assert_non_null(h);
  assert_true(n <= MAX_STREAMS);
  h->fd = tcp_open(port);
  assert_true(h->fd >= 0);
  h->want = want;
  h->grpc = grpc;
  h->claim = claim;
  assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
  nghttp2_session_callbacks_set_send_callback(cb, h_send);
  nghttp2_session_callbacks_set_recv_callback(cb, h_recv);
  nghttp2_session_callbacks_set_on_header_callback(cb, h_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, h_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, h_close);
  assert_int_equal(nghttp2_session_client_new(&h->h2, cb, h), 0);
  nghttp2_session_callbacks_del(cb);
  assert_int_equal(nghttp2_submit_settings(h->h2, NGHTTP2_FLAG_NONE, &iv, 1),
                   0);
  for (int i = 0; i < n; i++) {
    nghttp2_data_provider prd;
    prd.source.ptr = NULL;
    prd.read_callback = h_body;
    h->id[i] = nghttp2_submit_request(h->h2, NULL, nv, 5, &prd, NULL);
    assert_true(h->id[i] > 0);
    h->n++;
  }
  return h;
}

static void holder_free(holder *h) {
  nghttp2_session_del(h->h2);
  close(h->fd);
  free(h);
}

/* 1 when |h| has nothing more to do: every stream sent its bytes or was
   answered, or the connection is gone. */
static int holder_done(const holder *h) {
  if (h->closed || h->goaway) {
    return 1;
  }
  for (int i = 0; i < h->n; i++) {
    if (!h->answered[i] && h->sent[i] < h->want) {
      return 0;
    }
  }
  return 1;
}

static void holder_turn(holder *h, short revents) {
  if (h->closed) {
    return;
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) &&
      nghttp2_session_recv(h->h2) != 0) {
    h->closed = 1;
    return;
  }
  if (nghttp2_session_send(h->h2) != 0) {
    h->closed = 1;
  }
}

/* Drives |hs| until |until| says stop (NULL: each is holder_done()) or
   |ms| pass.  Returns 1 when it stopped because of the condition. */
static int drive(holder **hs, int n, int (*until)(holder **, int), int ms) {
  long long deadline = conch_now_ms() + ms;
  struct pollfd pfd[64];

  assert_true(n <= 64);
  for (int i = 0; i < n; i++) {
    holder_turn(hs[i], 0);
  }
  while (conch_now_ms() < deadline) {
    int all = 1;
    if (until != NULL) {
      if (until(hs, n)) {
        return 1;
      }
      all = 0;
    } else {
      for (int i = 0; i < n; i++) {
        all &= holder_done(hs[i]);
      }
    }
    if (all) {
      return 1;
    }
    for (int i = 0; i < n; i++) {
      pfd[i].fd = hs[i]->closed ? -1 : hs[i]->fd;
      pfd[i].events = POLLIN;
      if (!hs[i]->closed && nghttp2_session_want_write(hs[i]->h2)) {
        pfd[i].events |= POLLOUT;
      }
      pfd[i].revents = 0;
    }
    if (poll(pfd, (nfds_t)n, 50) < 0 && errno != EINTR) {
      return 0;
    }
    for (int i = 0; i < n; i++) {
      holder_turn(hs[i], pfd[i].revents);
    }
  }
  return 0;
}

static conch_server_stats stats_of(fixture *fx) {
  conch_server_stats st;
  fx_pause(fx);
  assert_int_equal(conch_server_stats_get(fx->s, &st, sizeof(st)), 0);
  fx_resume(fx);
  return st;
}

/* One Unary call with a |payload|-byte payload on a connection of its
   own; returns the HTTP status (0: no answer). */
static int unary(int port, size_t payload) {
  static const char *const hdrs[] = {"content-type", "application/proto", NULL};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  uint8_t *body;
  size_t n;
  h2_resp r;
  int status;

  req.payload.data = calloc(1, payload + 1);
  req.payload.len = payload;
  assert_non_null(req.payload.data);
  n = conchtest__v1__request__get_packed_size(&req);
  body = malloc(n);
  assert_non_null(body);
  conchtest__v1__request__pack(&req, body);
  memset(&r, 0, sizeof(r));
  status = h2_request(port, "POST", SVC "Unary", hdrs, body, n, &r) == 0
               ? r.status
               : 0;
  h2_resp_free(&r);
  free(body);
  free(req.payload.data);
  return status;
}

/* ---- The default budget ------------------------------------------------- */

/* 20 connections x 10 gRPC streams, each sending 3.9 MiB of a message it
   never finishes (786 MB if all were held): the defaults (32 MiB a
   connection, 64 MiB in all) bound what the server holds, and it still
   serves. */
static void test_default_memory_bound(void **state) {
  const size_t msg = (39u << 20) / 10; /* 3.9 MiB */
  holder *hs[20];
  conch_server_stats st;
  fixture fx;
  size_t sent = 0;
  int port;
  (void)state;

  fx_start(&fx, NULL, 0);
  port = conch_server_port(fx.s);
  for (int i = 0; i < 20; i++) {
    hs[i] = holder_open(port, 10, msg, 1, (size_t)(msg + 1024));
  }
  assert_int_equal(drive(hs, 20, NULL, 120000), 1);
  for (int i = 0; i < 20; i++) {
    for (int j = 0; j < hs[i]->n; j++) {
      sent += hs[i]->sent[j];
    }
  }
  st = stats_of(&fx);
  print_message("sent %zu MiB; the server held at most %zu MiB; %zu now\n",
                sent >> 20, st.buffered_peak >> 20, st.buffered >> 20);
  /* The load reached the budget (the test is not vacuous)... */
  assert_true(sent > (64u << 20));
  assert_true(st.buffered_peak > (32u << 20));
  /* ... and what was held never went past it. */
  assert_true(st.buffered_peak <= (64u << 20));
  for (int i = 0; i < 20; i++) {
    holder_free(hs[i]);
  }
  assert_int_equal(unary(port, 100), 200);
  fx_stop(&fx);
}

/* ---- The default header timeout ------------------------------------------ */

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static void frame(int fd, uint8_t type, uint8_t flags, uint32_t sid,
                  const void *p, size_t len) {
  uint8_t buf[9 + 1024];
  assert_true(len <= 1024);
  buf[0] = (uint8_t)(len >> 16);
  buf[1] = (uint8_t)(len >> 8);
  buf[2] = (uint8_t)len;
  buf[3] = type;
  buf[4] = flags;
  buf[5] = (uint8_t)(sid >> 24);
  buf[6] = (uint8_t)(sid >> 16);
  buf[7] = (uint8_t)(sid >> 8);
  buf[8] = (uint8_t)sid;
  if (len > 0) {
    memcpy(buf + 9, p, len);
  }
  assert_int_equal(send(fd, buf, 9 + len, MSG_NOSIGNAL), (ssize_t)(9 + len));
}

static int h2_bare(int port) {
  int fd = tcp_open(port);
  assert_true(fd >= 0);
  assert_int_equal(send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL),
                   (ssize_t)(sizeof(preface) - 1));
  frame(fd, 4, 0, 0, NULL, 0);
  return fd;
}

/* HEADERS (|flags|) of a POST to Unary: HPACK with literal names. */
static void h2_headers(int fd, uint32_t sid, uint8_t flags) {
  static const char *const kv[] = {":method",    "POST",     ":scheme",
                                   "http",       ":path",    SVC "Unary",
                                   ":authority", "127.0.0.1"};
  nghttp2_hd_deflater *d;
  nghttp2_nv nv[4];
  uint8_t block[256];
  ssize_t n;

  for (size_t i = 0; i < 4; i++) {
    nv[i].name = (uint8_t *)kv[2 * i];
    nv[i].namelen = strlen(kv[2 * i]);
    nv[i].value = (uint8_t *)kv[2 * i + 1];
    nv[i].valuelen = strlen(kv[2 * i + 1]);
    nv[i].flags = NGHTTP2_NV_FLAG_NONE;
  }
  assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
  n = nghttp2_hd_deflate_hd(d, block, sizeof(block), nv, 4);
  nghttp2_hd_deflate_del(d);
  assert_true(n > 0);
  frame(fd, 1, flags, sid, block, (size_t)n);
}

/* 1 when the peer closed |fd| (EOF or reset); reads and drops the rest. */
static int peer_closed(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      return 1;
    }
    if (k < 0) {
      return 0;
    }
  }
}

/* Strangers that hold connections without a request: silent TCP, idle
   HTTP/2 prefaces, an HTTP/2 header block that never ends, HTTP/1.1
   headers sent a byte at a time.  The default header timeout (10 s) cuts
   each off; a client that asks is served all along. */
static void test_default_header_timeout(void **state) {
  static const char h1_head[] =
      "POST " SVC "Unary HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  enum { N = 12 };
  int fds[N];
  long long closed_at[N];
  const char *what[N];
  size_t trickled = 0;
  fixture fx;
  long long t0;
  int port, left = N;
  (void)state;

  fx_start(&fx, NULL, 0);
  port = conch_server_port(fx.s);
  t0 = conch_now_ms();
  for (int i = 0; i < N; i++) {
    closed_at[i] = -1;
    switch (i % 4) {
    case 0:
      fds[i] = tcp_open(port);
      what[i] = "silent TCP";
      break;
    case 1:
      fds[i] = h2_bare(port);
      what[i] = "idle preface";
      break;
    case 2:
      fds[i] = h2_bare(port);
      h2_headers(fds[i], 1, 0x0); /* no END_HEADERS, and no CONTINUATION */
      what[i] = "open header block";
      break;
    default:
      fds[i] = tcp_open(port);
      what[i] = "HTTP/1.1 header trickle";
      break;
    }
    assert_true(fds[i] >= 0);
  }
  while (left > 0 && conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd[N];
    for (int i = 0; i < N; i++) {
      pfd[i].fd = closed_at[i] < 0 ? fds[i] : -1;
      pfd[i].events = POLLIN;
      pfd[i].revents = 0;
    }
    (void)poll(pfd, N, 250);
    /* A byte of HTTP/1.1 headers every quarter second. */
    if (trickled < sizeof(h1_head) - 1) {
      for (int i = 3; i < N; i += 4) {
        if (closed_at[i] < 0) {
          (void)send(fds[i], h1_head + trickled, 1, MSG_NOSIGNAL);
        }
      }
      trickled++;
    }
    for (int i = 0; i < N; i++) {
      if (closed_at[i] < 0 && pfd[i].revents != 0 && peer_closed(fds[i])) {
        closed_at[i] = conch_now_ms() - t0;
        left--;
      }
    }
  }
  for (int i = 0; i < N; i++) {
    print_message("%-24s closed after %lld ms\n", what[i], closed_at[i]);
    close(fds[i]);
  }
  assert_int_equal(left, 0);
  assert_int_equal(unary(port, 10), 200);
  fx_stop(&fx);
}

/* ---- Out of descriptors ---------------------------------------------------
 */

/* With no descriptor left, a client that connects is served: an idle
   connection (a stranger's) is closed to make room for it. */
static void test_default_fd_exhaustion(void **state) {
  enum { IDLE = 8 };
  struct rlimit old, low;
  struct sockaddr_in sa;
  int idle[IDLE];
  int fill[256];
  size_t nfill = 0;
  int maxfd = 0, fd, got = 0, evicted = 0;
  uint8_t body[5] = {0};
  char buf[4096];
  size_t have = 0;
  long long t0;
  DIR *d;
  struct dirent *e;
  conch_server_stats st;
  fixture fx;
  (void)state;

  fx_start(&fx, NULL, 0);
  for (int i = 0; i < IDLE; i++) {
    struct pollfd pfd;
    idle[i] = h2_bare(conch_server_port(fx.s));
    pfd.fd = idle[i];
    pfd.events = POLLIN;
    assert_int_equal(poll(&pfd, 1, WAIT_MS), 1); /* served: SETTINGS */
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  d = opendir("/proc/self/fd");
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    int n = atoi(e->d_name);
    if (n > maxfd) {
      maxfd = n;
    }
  }
  closedir(d);
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)maxfd + 1;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
    print_message("cannot lower RLIMIT_NOFILE (%s): skipped\n",
                  strerror(errno));
    close(fd);
    for (int i = 0; i < IDLE; i++) {
      close(idle[i]);
    }
    fx_stop(&fx);
    skip();
  }
  while (nfill < 256) {
    int f = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (f < 0) {
      break;
    }
    fill[nfill++] = f;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)conch_server_port(fx.s));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  /* A whole Unary call: an empty Request. */
  assert_int_equal(send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL),
                   (ssize_t)(sizeof(preface) - 1));
  frame(fd, 4, 0, 0, NULL, 0);
  {
    static const char *const kv[] = {":method",      "POST",
                                     ":scheme",      "http",
                                     ":path",        SVC "Unary",
                                     ":authority",   "127.0.0.1",
                                     "content-type", "application/grpc"};
    nghttp2_hd_deflater *dd;
    nghttp2_nv nv[5];
    uint8_t block[256];
    ssize_t n;
    for (size_t i = 0; i < 5; i++) {
      nv[i].name = (uint8_t *)kv[2 * i];
      nv[i].namelen = strlen(kv[2 * i]);
      nv[i].value = (uint8_t *)kv[2 * i + 1];
      nv[i].valuelen = strlen(kv[2 * i + 1]);
      nv[i].flags = NGHTTP2_NV_FLAG_NONE;
    }
    assert_int_equal(nghttp2_hd_deflate_new(&dd, 4096), 0);
    n = nghttp2_hd_deflate_hd(dd, block, sizeof(block), nv, 5);
    nghttp2_hd_deflate_del(dd);
    assert_true(n > 0);
    frame(fd, 1, 0x4, 1, block, (size_t)n);
  }
  frame(fd, 0, 0x1, 1, body, sizeof(body));
  /* The answer: a HEADERS frame on stream 1 with ":status: 200" (HPACK
     static index 8, 0x88) and, later, grpc-status 0 in the trailers. */
  t0 = conch_now_ms();
  while (!got && conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd = {fd, POLLIN, 0};
    ssize_t k;
    if (poll(&pfd, 1, 100) <= 0) {
      continue;
    }
    k = recv(fd, buf + have, sizeof(buf) - have, 0);
    if (k <= 0) {
      break; /* closed: turned away */
    }
    have += (size_t)k;
    while (have >= 9) {
      size_t len = ((size_t)(uint8_t)buf[0] << 16) |
                   ((size_t)(uint8_t)buf[1] << 8) | (uint8_t)buf[2];
      if (have < 9 + len) {
        break;
      }
      if (buf[3] == 1 && buf[8] == 1 && len > 0 && (uint8_t)buf[9] == 0x88) {
        got = 1;
      }
      memmove(buf, buf + 9 + len, have - 9 - len);
      have -= 9 + len;
    }
  }
  for (size_t i = 0; i < nfill; i++) {
    close(fill[i]);
  }
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  close(fd);
  for (int i = 0; i < IDLE; i++) {
    evicted += peer_closed(idle[i]);
    close(idle[i]);
  }
  st = stats_of(&fx);
  print_message("out of descriptors: served %d; idle connections closed %d "
                "(shed_conns %llu)\n",
                got, evicted, (unsigned long long)st.shed_conns);
  assert_int_equal(got, 1);
  assert_true(st.shed_conns >= 1);
  fx_stop(&fx);
}

/* ---- One budget for everyone --------------------------------------------- */

static int one_answered(holder **hs, int n) {
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < hs[i]->n; j++) {
      if (hs[i]->answered[j]) {
        return 1;
      }
    }
  }
  return 0;
}

static int answered_count(holder **hs, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < hs[i]->n; j++) {
      k += hs[i]->answered[j];
    }
  }
  return k;
}

/* Large requests fill the budget (1 MiB here) as far as they may; a
   small request is then served at once, and the large ones go on. */
static void test_budget_small_gets_through(void **state) {
  conch_server_opts *o;
  holder *hs[3];
  conch_server_stats st;
  fixture fx;
  int port;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_buffer_limits(o, 0, 1u << 20), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);
  /* 3 x 340 KiB of unary bodies that never end: the third is refused
     once the large ones would hold more than seven eighths. */
  for (int i = 0; i < 3; i++) {
    hs[i] = holder_open(port, 1, 340u << 10, 0, 0);
    assert_int_equal(drive(&hs[i], 1, NULL, WAIT_MS), 1);
  }
  st = stats_of(&fx);
  print_message("held %zu KiB of 1024; answered %d of 3\n", st.buffered >> 10,
                answered_count(hs, 3));
  assert_true(st.buffered >= (680u << 10));
  /* A small request: served, and nobody makes room for it. */
  assert_int_equal(unary(port, 8 << 10), 200);
  assert_int_equal(unary(port, 100), 200);
  st = stats_of(&fx);
  assert_int_equal(st.shed_calls, 0);
  assert_true(st.buffered_peak <= (1u << 20));
  for (int i = 0; i < 3; i++) {
    holder_free(hs[i]);
  }
  fx_stop(&fx);
}

/* Small requests that never end fill the reserve as well: the next small
   one takes the place of the largest holder, which is told
   resource_exhausted, and the small ones all stay. */
static void test_budget_largest_makes_room(void **state) {
  conch_server_opts *o;
  holder *large[2];
  holder *small[8];
  conch_server_stats st;
  fixture fx;
  int port, shed = -1;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_buffer_limits(o, 0, 1u << 20), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);
  large[0] = holder_open(port, 1, 400u << 10, 0, 0);
  large[1] = holder_open(port, 1, 300u << 10, 0, 0);
  assert_int_equal(drive(large, 2, NULL, WAIT_MS), 1);
  assert_int_equal(answered_count(large, 2), 0);
  /* 8 x 60 KiB: 700 + 480 KiB is past the 1024 KiB, so one of them
     makes room, and the largest (400 KiB) goes. */
  for (int i = 0; i < 8; i++) {
    small[i] = holder_open(port, 1, 60u << 10, 0, 0);
    assert_int_equal(drive(&small[i], 1, NULL, WAIT_MS), 1);
  }
  assert_int_equal(drive(large, 2, one_answered, WAIT_MS), 1);
  for (int i = 0; i < 2; i++) {
    if (large[i]->answered[0]) {
      shed = i;
    }
  }
  st = stats_of(&fx);
  print_message("shed: the %s holder (status %d); %llu shed; held %zu KiB, "
                "at most %zu KiB\n",
                shed == 0 ? "400 KiB" : "300 KiB", large[shed]->status[0],
                (unsigned long long)st.shed_calls, st.buffered >> 10,
                st.buffered_peak >> 10);
  assert_int_equal(shed, 0);
  assert_int_equal(large[0]->status[0], 429); /* resource_exhausted */
  assert_int_equal(large[1]->answered[0], 0);
  assert_int_equal(answered_count(small, 8), 0);
  assert_int_equal(st.shed_calls, 1);
  assert_true(st.buffered_peak <= (1u << 20));
  /* Teardown-sized requests still get through. */
  assert_int_equal(unary(port, 100), 200);
  for (int i = 0; i < 2; i++) {
    holder_free(large[i]);
  }
  for (int i = 0; i < 8; i++) {
    holder_free(small[i]);
  }
  fx_stop(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_budget_small_gets_through),
      cmocka_unit_test(test_budget_largest_makes_room),
      cmocka_unit_test(test_default_memory_bound),
      cmocka_unit_test(test_default_fd_exhaustion),
      cmocka_unit_test(test_default_header_timeout),
  };
  signal(SIGPIPE, SIG_IGN);
  if (getenv("SERVER_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVER_TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
