/* Helpers for the conch serve tests (see support.h). */
#include "support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <nghttp2/nghttp2.h>

#include "envelope.h"
#include "peer.h"

/* ---- The server ------------------------------------------------------------
 */

int serve_start(serve_peer *p, const char *const *extra) {
  const char *argv[32];
  conch_peer peer;
  size_t n = 0;
  int tls = 0;
  int token = 0;

  argv[n++] = CONCH_SERVE_BIN;
  argv[n++] = "serve";
  argv[n++] = "--listen";
  argv[n++] = "127.0.0.1:0";
  while (extra != NULL && *extra != NULL && n < 29) {
    tls |= strcmp(*extra, "--tls-cert") == 0;
    token |= strncmp(*extra, "--access-token", 14) == 0;
    argv[n++] = *extra++;
  }
  if (!token) {
    argv[n++] = "--no-token"; /* loopback only; the Host check applies */
  }
  argv[n] = NULL;
  p->pid = -1;
  p->port = 0;
  p->stdin_fd = -1;
  p->url[0] = '\0';
  if (conch_peer_start_argv(&peer, argv) != 0) {
    return -1;
  }
  p->pid = peer.pid;
  p->port = peer.port;
  p->stdin_fd = peer.stdin_fd;
  snprintf(p->url, sizeof(p->url), "%s://127.0.0.1:%d", tls ? "https" : "http",
           p->port);
  return 0;
}

int serve_stop(serve_peer *p, int wait_ms) {
  conch_peer peer;

  peer.pid = p->pid;
  peer.port = p->port;
  peer.stdin_fd = p->stdin_fd;
  p->pid = -1;
  p->stdin_fd = -1;
  return conch_peer_stop_status(&peer, wait_ms);
}

/* ---- Process table
 * ----------------------------------------------------------- */

/* state, ppid, pgrp from /proc/<pid>/stat.  Returns 0 or -1. */
static int proc_stat(pid_t pid, char *state, long *ppid, long *pgrp) {
  char path[64];
  char buf[1024];
  FILE *f;
  char *rp;

  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return -1;
  }
  rp = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
  fclose(f);
  if (rp == NULL || sscanf(rp + 1, " %c %ld %ld", state, ppid, pgrp) != 3) {
    return -1;
  }
  return 0;
}

int proc_leftovers(pid_t ppid, const pid_t *pgids, size_t n, pid_t *first) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int count = 0;

  if (d == NULL) {
    return 0;
  }
  while ((e = readdir(d)) != NULL) {
    pid_t pid;
    char state;
    long pp;
    long pg;
    size_t i;
    int hit;

    if (e->d_name[0] < '1' || e->d_name[0] > '9') {
      continue;
    }
    pid = (pid_t)strtol(e->d_name, NULL, 10);
    if (proc_stat(pid, &state, &pp, &pg) != 0 || state == 'Z' || state == 'X') {
      continue;
    }
    hit = ppid > 0 && pp == (long)ppid;
    for (i = 0; i < n && !hit; i++) {
      hit = pg == (long)pgids[i];
    }
    if (hit) {
      if (count == 0 && first != NULL) {
        *first = pid;
      }
      count++;
    }
  }
  closedir(d);
  return count;
}

int proc_count_cmdline(const char *cmdline) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int count = 0;

  if (d == NULL) {
    return 0;
  }
  while ((e = readdir(d)) != NULL) {
    char path[300];
    char buf[512];
    FILE *f;
    size_t n;
    size_t i;

    if (e->d_name[0] < '1' || e->d_name[0] > '9' ||
        !conch_proc_alive((pid_t)strtol(e->d_name, NULL, 10))) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i + 1 < n; i++) {
      if (buf[i] == '\0') {
        buf[i] = ' ';
      }
    }
    buf[n] = '\0';
    if (n > 0 && buf[n - 1] == '\0') {
      n--;
    }
    count += strcmp(buf, cmdline) == 0;
  }
  closedir(d);
  return count;
}

long proc_wait_count(const char *cmdline, int want, long limit_ms, int *left) {
  long long t0 = conch_now_ms();
  int n;

  for (;;) {
    n = proc_count_cmdline(cmdline);
    if (left != NULL) {
      *left = n;
    }
    if (n == want) {
      return (long)(conch_now_ms() - t0);
    }
    if (conch_now_ms() - t0 > limit_ms) {
      return -1;
    }
    conch_sleep_ms(5);
  }
}

static long long proc_field(pid_t pid, const char *file, const char *key) {
  char path[64];
  char line[256];
  FILE *f;
  long long v = -1;
  size_t klen = strlen(key);

  snprintf(path, sizeof(path), "/proc/%ld/%s", (long)pid, file);
  f = fopen(path, "r");
  if (f == NULL) {
    return -1;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, key, klen) == 0) {
      v = strtoll(line + klen, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

int proc_fds_of(pid_t pid, const char *kind) {
  char dir[64], link[400], target[300];
  struct dirent *de;
  int n = 0;
  DIR *d;

  snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
  d = opendir(dir);
  if (d == NULL) {
    return -1;
  }
  while ((de = readdir(d)) != NULL) {
    ssize_t k;

    snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
    k = readlink(link, target, sizeof(target) - 1);
    if (k > 0) {
      target[k] = '\0';
      n += strstr(target, kind) != NULL;
    }
  }
  closedir(d);
  return n;
}

long proc_rss_kb(pid_t pid) {
  return (long)proc_field(pid, "status", "VmRSS:");
}

long long proc_wchar(pid_t pid) { return proc_field(pid, "io", "wchar:"); }

long long proc_syscr(pid_t pid) { return proc_field(pid, "io", "syscr:"); }

typedef struct wchar_wait {
  pid_t pid;
  long long above;
} wchar_wait;

static int wchar_above(void *arg) {
  wchar_wait *w = arg;

  return proc_wchar(w->pid) > w->above;
}

int wait_wchar_above(pid_t pid, long long above, long limit_ms) {
  wchar_wait w;

  w.pid = pid;
  w.above = above;
  return conch_wait_until(wchar_above, &w, limit_ms);
}

static pid_t noted[4096];
static size_t nnoted;

void note_pid(pid_t pid) {
  if (nnoted < sizeof(noted) / sizeof(noted[0])) {
    noted[nnoted++] = pid;
  }
}

const pid_t *noted_pids(size_t *n) {
  *n = nnoted;
  return noted;
}

/* ---- Raw HTTP/2
 * ------------------------------------------------------------------ */

typedef struct h2_body {
  const uint8_t *p;
  size_t len;
  struct h2_body *next;
} h2_body;

struct h2_conn {
  int fd;
  nghttp2_session *s;
  int pending;
  int last_id;
  int wr_shut;     /* h2_shutdown_write(): sends are dropped */
  h2_body *bodies; /* freed with the connection: a reset stream never
                      reads its body to the end */
  int ndata;       /* DATA frames with a payload received */
  size_t max_data; /* the largest one's payload */
};

static int h2_on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  h2_conn *c = ud;
  (void)s;
  if (f->hd.type == NGHTTP2_DATA && f->hd.length > 0) {
    c->ndata++;
    if (f->hd.length > c->max_data) {
      c->max_data = f->hd.length;
    }
  }
  return 0;
}

void h2_data_frames(const h2_conn *c, int *n, size_t *largest) {
  *n = c->ndata;
  *largest = c->max_data;
}

static ssize_t h2_send_cb(nghttp2_session *s, const uint8_t *data, size_t len,
                          int flags, void *ud) {
  h2_conn *c = ud;
  ssize_t n;

  (void)s;
  (void)flags;
  if (c->wr_shut) {
    return (ssize_t)len;
  }
  n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    return errno == EAGAIN ? NGHTTP2_ERR_WOULDBLOCK
                           : NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return n;
}

static void resp_done(h2_conn *c, h2_resp *r) {
  if (r != NULL && !r->done) {
    r->done = 1;
    c->pending--;
  }
}

static int h2_on_header(nghttp2_session *s, const nghttp2_frame *f,
                        const uint8_t *name, size_t nlen, const uint8_t *value,
                        size_t vlen, uint8_t flags, void *ud) {
  h2_resp *r = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  size_t used;

  (void)flags;
  (void)ud;
  if (r == NULL) {
    return 0;
  }
  if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
    r->status = (int)strtol((const char *)value, NULL, 10);
  } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
    snprintf(r->ctype, sizeof(r->ctype), "%.*s", (int)vlen, value);
  } else {
    used = strlen(r->extra);
    snprintf(r->extra + used, sizeof(r->extra) - used, "%.*s: %.*s\n",
             (int)nlen, name, (int)vlen, value);
  }
  return 0;
}

static int h2_on_data(nghttp2_session *s, uint8_t flags, int32_t id,
                      const uint8_t *data, size_t len, void *ud) {
  h2_resp *r = nghttp2_session_get_stream_user_data(s, id);
  uint8_t *b;

  (void)flags;
  (void)ud;
  if (r == NULL || len == 0) {
    return 0;
  }
  b = realloc(r->body, r->len + len);
  if (b == NULL) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  memcpy(b + r->len, data, len);
  r->body = b;
  r->len += len;
  return 0;
}

static int h2_on_close(nghttp2_session *s, int32_t id, uint32_t code,
                       void *ud) {
  h2_resp *r = nghttp2_session_get_stream_user_data(s, id);

  if (r != NULL && code != NGHTTP2_NO_ERROR && r->status == 0) {
    r->rst = code + 1;
  }
  resp_done(ud, r);
  return 0;
}

static int open_with(h2_conn **out, int port, const nghttp2_settings_entry *iv,
                     size_t niv, int32_t conn_window);

int h2_open(h2_conn **out, int port) {
  return open_with(out, port, NULL, 0, 0);
}

int h2_open_big(h2_conn **out, int port, uint32_t max_frame) {
  const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, max_frame},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
  return open_with(out, port, iv, 2, 1 << 20);
}

static int open_with(h2_conn **out, int port, const nghttp2_settings_entry *iv,
                     size_t niv, int32_t conn_window) {
  struct sockaddr_in sa;
  nghttp2_session_callbacks *cbs;
  h2_conn *c = calloc(1, sizeof(*c));
  int one = 1;

  if (c == NULL) {
    return -1;
  }
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    if (c->fd >= 0) {
      close(c->fd);
    }
    free(c);
    return -1;
  }
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_send_callback(cbs, h2_send_cb);
  nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_close);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_on_frame);
  nghttp2_session_client_new(&c->s, cbs, c);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, niv);
  if (conn_window > 0) {
    nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0,
                                          conn_window);
  }
  *out = c;
  return 0;
}

static ssize_t h2_read_body(nghttp2_session *s, int32_t id, uint8_t *buf,
                            size_t len, uint32_t *flags,
                            nghttp2_data_source *src, void *ud) {
  h2_body *b = src->ptr;
  size_t n = b->len < len ? b->len : len;

  (void)s;
  (void)id;
  (void)ud;
  memcpy(buf, b->p, n);
  b->p += n;
  b->len -= n;
  if (b->len == 0) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return (ssize_t)n;
}

int h2_submit(h2_conn *c, const char *method, const char *path,
              const char *const *hdrs, const uint8_t *body, size_t len,
              h2_resp *resp) {
  nghttp2_nv nva[32];
  size_t n = 0;
  nghttp2_data_provider prd;
  h2_body *b = NULL;
  int32_t id;

#define NV(k, v)                                                               \
  do {                                                                         \
    nva[n].name = (uint8_t *)(k);                                              \
    nva[n].namelen = strlen(k);                                                \
    nva[n].value = (uint8_t *)(v);                                             \
    nva[n].valuelen = strlen(v);                                               \
    nva[n].flags = NGHTTP2_NV_FLAG_NONE;                                       \
    n++;                                                                       \
  } while (0)
  NV(":method", method);
  NV(":path", path);
  NV(":scheme", "http");
  NV(":authority", "127.0.0.1");
  while (hdrs != NULL && hdrs[0] != NULL && n < 30) {
    NV(hdrs[0], hdrs[1]);
    hdrs += 2;
  }
#undef NV
  memset(resp, 0, sizeof(*resp));
  if (body != NULL) {
    b = malloc(sizeof(*b));
    if (b == NULL) {
      return -1;
    }
    b->p = body;
    b->len = len;
    prd.source.ptr = b;
    prd.read_callback = h2_read_body;
  }
  id =
      nghttp2_submit_request(c->s, NULL, nva, n, b != NULL ? &prd : NULL, resp);
  if (id < 0) {
    free(b);
    return -1;
  }
  if (b != NULL) {
    b->next = c->bodies;
    c->bodies = b;
  }
  c->pending++;
  c->last_id = id;
  return id;
}

int h2_last_id(h2_conn *c) { return c->last_id; }

int h2_rst(h2_conn *c, int32_t id) {
  return nghttp2_submit_rst_stream(c->s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

int h2_run(h2_conn *c, int ms) {
  long long deadline = conch_now_ms() + ms;

  for (;;) {
    struct pollfd pfd;
    uint8_t buf[16384];
    long long left;
    ssize_t n;

    if (nghttp2_session_send(c->s) != 0) {
      return -1;
    }
    if (c->pending <= 0) {
      return 0;
    }
    left = deadline - conch_now_ms();
    if (left <= 0) {
      return -1;
    }
    pfd.fd = c->fd;
    pfd.events = POLLIN;
    if (nghttp2_session_want_write(c->s)) {
      pfd.events |= POLLOUT;
    }
    if (poll(&pfd, 1, (int)(left > 100 ? 100 : left)) <= 0) {
      continue;
    }
    if ((pfd.revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
      continue;
    }
    n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN)) {
      return -1;
    }
    if (n > 0 && nghttp2_session_mem_recv(c->s, buf, (size_t)n) < 0) {
      return -1;
    }
  }
}

int h2_fd(h2_conn *c) { return c->fd; }

int h2_shutdown_write(h2_conn *c) {
  long long deadline = conch_now_ms() + 10000;

  while (nghttp2_session_want_write(c->s) && conch_now_ms() < deadline) {
    struct pollfd pfd = {c->fd, POLLOUT, 0};

    if (nghttp2_session_send(c->s) != 0) {
      return -1;
    }
    poll(&pfd, 1, 100);
  }
  if (nghttp2_session_want_write(c->s) || shutdown(c->fd, SHUT_WR) != 0) {
    return -1;
  }
  c->wr_shut = 1;
  return 0;
}

int tcp_open(int port) {
  struct sockaddr_in sa;
  int one = 1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0) {
    return -1;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int wait_closed(int fd, int ms) {
  long long deadline = conch_now_ms() + ms;

  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    long long left = deadline - conch_now_ms();
    char buf[4096];
    ssize_t n;

    if (left <= 0) {
      return 0;
    }
    if (poll(&pfd, 1, (int)left) <= 0) {
      continue;
    }
    n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      return 1;
    }
  }
}

void h2_close(h2_conn *c) {
  if (c == NULL) {
    return;
  }
  nghttp2_session_del(c->s);
  close(c->fd);
  while (c->bodies != NULL) {
    h2_body *b = c->bodies;

    c->bodies = b->next;
    free(b);
  }
  free(c);
}

void h2_resp_free(h2_resp *r) {
  free(r->body);
  r->body = NULL;
  r->len = 0;
}

int h2_request(int port, const char *method, const char *path,
               const char *const *hdrs, const uint8_t *body, size_t len,
               h2_resp *resp) {
  h2_conn *c;
  int rv;

  memset(resp, 0, sizeof(*resp));
  if (h2_open(&c, port) != 0) {
    return -1;
  }
  rv = h2_submit(c, method, path, hdrs, body, len, resp);
  if (rv > 0) {
    rv = h2_run(c, 10000);
  }
  h2_close(c);
  return rv < 0 ? -1 : 0;
}

uint8_t *envelope(uint8_t flags, const ProtobufCMessage *msg, size_t *len) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t *p = malloc(n + CONCH_ENV_PREFIX);

  if (p == NULL) {
    return NULL;
  }
  conch__env_write_prefix(p, flags, (uint32_t)n);
  protobuf_c_message_pack(msg, p + CONCH_ENV_PREFIX);
  *len = n + CONCH_ENV_PREFIX;
  return p;
}

void connect_error(const h2_resp *r, int stream, char *code, size_t codelen,
                   char *msg, size_t msglen) {
  const uint8_t *p = r->body;
  size_t len = r->len;
  json_t *root;
  json_t *e;

  code[0] = '\0';
  msg[0] = '\0';
  if (stream) {
    /* Walk the envelopes to the last one. */
    while (len >= CONCH_ENV_PREFIX) {
      size_t n = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) |
                 ((size_t)p[3] << 8) | p[4];

      if (n + CONCH_ENV_PREFIX > len) {
        return;
      }
      if (n + CONCH_ENV_PREFIX == len) {
        p += CONCH_ENV_PREFIX;
        len = n;
        break;
      }
      p += n + CONCH_ENV_PREFIX;
      len -= n + CONCH_ENV_PREFIX;
    }
  }
  root = json_loadb((const char *)p, len, 0, NULL);
  if (root == NULL) {
    return;
  }
  e = stream ? json_object_get(root, "error") : root;
  if (json_is_object(e)) {
    const char *c = json_string_value(json_object_get(e, "code"));
    const char *m = json_string_value(json_object_get(e, "message"));

    snprintf(code, codelen, "%s", c != NULL ? c : "");
    snprintf(msg, msglen, "%s", m != NULL ? m : "");
  }
  json_decref(root);
}

void assert_connect_error(const h2_resp *r, int stream, const char *code,
                          const char *msg) {
  char c[64];
  char m[512];

  connect_error(r, stream, c, sizeof(c), m, sizeof(m));
  if (strcmp(c, code) != 0 || (msg != NULL && strcmp(m, msg) != 0)) {
    fail_msg("Connect error \"%s\" (\"%s\"), want \"%s\" (\"%s\")", c, m, code,
             msg != NULL ? msg : "any message");
  }
}

/* ---- process.Process through our client
 * ----------------------------------------- */

#define SVC "/process.Process/"

const conch_method m_list = {SVC "List", CONCH_STREAM_UNARY,
                             &process__list_request__descriptor,
                             &process__list_response__descriptor, 0};
const conch_method m_start = {SVC "Start", CONCH_STREAM_SERVER,
                              &process__start_request__descriptor,
                              &process__start_response__descriptor, 0};
const conch_method m_connect = {SVC "Connect", CONCH_STREAM_SERVER,
                                &process__connect_request__descriptor,
                                &process__connect_response__descriptor, 0};
const conch_method m_update = {SVC "Update", CONCH_STREAM_UNARY,
                               &process__update_request__descriptor,
                               &process__update_response__descriptor, 0};
const conch_method m_stream_input = {
    SVC "StreamInput", CONCH_STREAM_CLIENT,
    &process__stream_input_request__descriptor,
    &process__stream_input_response__descriptor, 0};
const conch_method m_send_input = {SVC "SendInput", CONCH_STREAM_UNARY,
                                   &process__send_input_request__descriptor,
                                   &process__send_input_response__descriptor,
                                   0};
const conch_method m_send_signal = {SVC "SendSignal", CONCH_STREAM_UNARY,
                                    &process__send_signal_request__descriptor,
                                    &process__send_signal_response__descriptor,
                                    0};
const conch_method m_close_stdin = {SVC "CloseStdin", CONCH_STREAM_UNARY,
                                    &process__close_stdin_request__descriptor,
                                    &process__close_stdin_response__descriptor,
                                    0};

conch_client *client_new(const char *url) {
  conch_client *c = NULL;

  if (conch_client_new(&c, url, NULL) != 0) {
    return NULL;
  }
  return c;
}

static void b64(const char *in, char *out) {
  static const char tab[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = strlen(in);
  size_t i;
  size_t o = 0;

  for (i = 0; i < n; i += 3) {
    unsigned v = (unsigned char)in[i] << 16;

    if (i + 1 < n) {
      v |= (unsigned char)in[i + 1] << 8;
    }
    if (i + 2 < n) {
      v |= (unsigned char)in[i + 2];
    }
    out[o++] = tab[(v >> 18) & 63];
    out[o++] = tab[(v >> 12) & 63];
    out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? tab[v & 63] : '=';
  }
  out[o] = '\0';
}

static void status_into(const conch_status *st, run_result *res) {
  res->code = st->code;
  snprintf(res->message, sizeof(res->message), "%s",
           st->message != NULL ? st->message : "");
}

/* Handles one event; returns 1 for an EndEvent. */
static int take_event(run_result *res, const Process__ProcessEvent *ev) {
  if (ev == NULL) {
    return 0;
  }
  switch (ev->event_case) {
  case PROCESS__PROCESS_EVENT__EVENT_START:
    res->nstart++;
    res->pid = (pid_t)ev->start->pid;
    return 0;
  case PROCESS__PROCESS_EVENT__EVENT_KEEPALIVE:
    res->nkeepalive++;
    return 0;
  case PROCESS__PROCESS_EVENT__EVENT_DATA: {
    const Process__ProcessEvent__DataEvent *d = ev->data;
    const ProtobufCBinaryData *b = &d->stdout;
    int is_err =
        d->output_case == PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR;
    char *dst = is_err ? res->err : res->out;
    size_t cap = is_err ? sizeof(res->err) : sizeof(res->out);
    size_t *used = is_err ? &res->errlen : &res->outlen;
    size_t n = b->len;

    res->ndata++;
    res->total += b->len;
    if (*used + n >= cap) {
      n = cap - 1 - *used;
    }
    memcpy(dst + *used, b->data, n);
    *used += n;
    dst[*used] = '\0';
    return 0;
  }
  case PROCESS__PROCESS_EVENT__EVENT_END:
    res->has_end = 1;
    res->exit_code = ev->end->exit_code;
    res->exited = ev->end->exited;
    snprintf(res->status, sizeof(res->status), "%s", ev->end->status);
    res->has_error =
        ev->end->_error_case == PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR;
    if (res->has_error) {
      snprintf(res->error, sizeof(res->error), "%s", ev->end->error);
    }
    return 1;
  default:
    return 0;
  }
}

/* Start and Connect responses share one layout. */
static const Process__ProcessEvent *event_of(const ProtobufCMessage *m) {
  return ((const Process__StartResponse *)m)->event;
}

void drain_call(conch_client *c, conch_call *call, run_result *res) {
  ProtobufCMessage *m;
  int rv;

  while ((rv = conch_call_recv_sync(call, &m)) == 0) {
    take_event(res, event_of(m));
    conch_message_free(c, m);
  }
  conch_call_wait_sync(call);
  status_into(conch_call_status(call), res);
}

static conch_call *begin(conch_client *c, const conch_method *method,
                         const ProtobufCMessage *req, long timeout_ms,
                         const char *user, const char *keepalive) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_metadata *md = NULL;
  conch_call *call = NULL;
  char auth[300];
  char enc[256];

  conch_metadata_new(&md, NULL);
  if (user != NULL) {
    char raw[260];

    snprintf(raw, sizeof(raw), "%s:", user);
    b64(raw, enc);
    snprintf(auth, sizeof(auth), "Basic %s", enc);
    conch_metadata_add_str(md, "authorization", auth);
  }
  if (keepalive != NULL) {
    conch_metadata_add_str(md, "keepalive-ping-interval", keepalive);
  }
  opts.timeout_ms = timeout_ms;
  opts.headers = md;
  if (conch_call_start(c, method, &opts, NULL, NULL, &call) != 0) {
    conch_metadata_free(md);
    return NULL;
  }
  conch_metadata_free(md);
  conch_call_send(call, req);
  return call;
}

conch_call *start_call(conch_client *c, const start_opts *o, run_result *res,
                       pid_t *pid, const char *cmd, ...) {
  static const start_opts none;
  Process__StartRequest req = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg;
  Process__PTY pty = PROCESS__PTY__INIT;
  Process__PTY__Size size = PROCESS__PTY__SIZE__INIT;
  Process__ProcessConfig__EnvsEntry ents[16];
  Process__ProcessConfig__EnvsEntry *entp[16];
  char *args[64];
  size_t nargs = 0;
  conch_call *call;
  ProtobufCMessage *m;
  va_list ap;
  size_t i;

  if (o == NULL) {
    o = &none;
  }
  process__process_config__init(&cfg);
  va_start(ap, cmd);
  for (;;) {
    char *a = va_arg(ap, char *);

    if (a == NULL || nargs == 64) {
      break;
    }
    args[nargs++] = a;
  }
  va_end(ap);
  cfg.cmd = (char *)cmd;
  cfg.args = args;
  cfg.n_args = nargs;
  for (i = 0; o->envs != NULL && o->envs[2 * i] != NULL && i < 16; i++) {
    process__process_config__envs_entry__init(&ents[i]);
    ents[i].key = (char *)o->envs[2 * i];
    ents[i].value = (char *)o->envs[2 * i + 1];
    entp[i] = &ents[i];
  }
  cfg.envs = entp;
  cfg.n_envs = i;
  if (o->cwd != NULL) {
    cfg._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
    cfg.cwd = (char *)o->cwd;
  }
  req.process = &cfg;
  if (o->tag != NULL) {
    req._tag_case = PROCESS__START_REQUEST___TAG_TAG;
    req.tag = (char *)o->tag;
  }
  if (o->stdin_mode != 0) {
    req._stdin_case = PROCESS__START_REQUEST___STDIN_STDIN;
    req.stdin = o->stdin_mode == 1;
  }
  if (o->pty_cols > 0) {
    size.cols = (uint32_t)o->pty_cols;
    size.rows = (uint32_t)o->pty_rows;
    pty.size = &size;
    req._pty_case = PROCESS__START_REQUEST___PTY_PTY;
    req.pty = &pty;
  }
  memset(res, 0, sizeof(*res));
  *pid = 0;
  call = begin(c, &m_start, &req.base, o->timeout_ms, o->user, o->keepalive);
  if (call == NULL) {
    res->code = CONCH_CODE_INTERNAL;
    return NULL;
  }
  if (conch_call_recv_sync(call, &m) != 0) {
    status_into(conch_call_status(call), res);
    conch_call_free(call);
    return NULL;
  }
  take_event(res, event_of(m));
  conch_message_free(c, m);
  *pid = res->pid;
  if (res->pid > 0) {
    note_pid(res->pid);
  }
  return call;
}

conch_call *connect_call(conch_client *c, pid_t pid, const char *tag,
                         long timeout_ms, const char *keepalive) {
  Process__ConnectRequest req = PROCESS__CONNECT_REQUEST__INIT;
  Process__ProcessSelector sel;

  process__process_selector__init(&sel);
  if (tag != NULL) {
    sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_TAG;
    sel.tag = (char *)tag;
  } else {
    sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
    sel.pid = (uint32_t)pid;
  }
  req.process = &sel;
  return begin(c, &m_connect, &req.base, timeout_ms, NULL, keepalive);
}

void run_cmd(conch_client *c, const start_opts *o, run_result *res,
             const char *cmd, ...) {
  /* Up to 8 arguments are passed on. */
  const char *a[9] = {NULL};
  conch_call *call;
  pid_t pid;
  va_list ap;
  int i;

  va_start(ap, cmd);
  for (i = 0; i < 8; i++) {
    a[i] = va_arg(ap, const char *);
    if (a[i] == NULL) {
      break;
    }
  }
  va_end(ap);
  call = start_call(c, o, res, &pid, cmd, a[0], a[1], a[2], a[3], a[4], a[5],
                    a[6], a[7], (char *)NULL);
  if (call == NULL) {
    return;
  }
  drain_call(c, call, res);
  conch_call_free(call);
}

static void selector(Process__ProcessSelector *sel, pid_t pid,
                     const char *tag) {
  process__process_selector__init(sel);
  if (tag != NULL) {
    sel->selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_TAG;
    sel->tag = (char *)tag;
  } else {
    sel->selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
    sel->pid = (uint32_t)pid;
  }
}

static conch_code unary(conch_client *c, const conch_method *m,
                        const ProtobufCMessage *req, ProtobufCMessage **resp,
                        char *msg, size_t msglen) {
  conch_status st;
  ProtobufCMessage *r = NULL;
  conch_code code;

  conch_status_init(&st);
  conch_unary_sync(c, m, NULL, req, &r, &st, NULL, NULL);
  code = st.code;
  if (msg != NULL) {
    snprintf(msg, msglen, "%s", st.message != NULL ? st.message : "");
  }
  conch_status_clear(&st);
  if (resp != NULL) {
    *resp = r;
  } else if (r != NULL) {
    conch_message_free(c, r);
  }
  return code;
}

conch_code send_signal(conch_client *c, pid_t pid, const char *tag, int sig,
                       char *msg, size_t msglen) {
  Process__SendSignalRequest req = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector sel;

  selector(&sel, pid, tag);
  req.process = &sel;
  req.signal = (Process__Signal)sig;
  return unary(c, &m_send_signal, &req.base, NULL, msg, msglen);
}

conch_code send_input(conch_client *c, pid_t pid, const char *tag, int pty,
                      const void *data, size_t len, int no_input, char *msg,
                      size_t msglen) {
  Process__SendInputRequest req = PROCESS__SEND_INPUT_REQUEST__INIT;
  Process__ProcessSelector sel;
  Process__ProcessInput in;

  selector(&sel, pid, tag);
  process__process_input__init(&in);
  in.input_case = pty ? PROCESS__PROCESS_INPUT__INPUT_PTY
                      : PROCESS__PROCESS_INPUT__INPUT_STDIN;
  in.stdin.data = (uint8_t *)data;
  in.stdin.len = len;
  req.process = &sel;
  req.input = no_input ? NULL : &in;
  return unary(c, &m_send_input, &req.base, NULL, msg, msglen);
}

conch_code close_stdin(conch_client *c, pid_t pid, char *msg, size_t msglen) {
  Process__CloseStdinRequest req = PROCESS__CLOSE_STDIN_REQUEST__INIT;
  Process__ProcessSelector sel;

  selector(&sel, pid, NULL);
  req.process = &sel;
  return unary(c, &m_close_stdin, &req.base, NULL, msg, msglen);
}

conch_code update_pty(conch_client *c, pid_t pid, int cols, int rows, char *msg,
                      size_t msglen) {
  Process__UpdateRequest req = PROCESS__UPDATE_REQUEST__INIT;
  Process__ProcessSelector sel;
  Process__PTY pty = PROCESS__PTY__INIT;
  Process__PTY__Size size = PROCESS__PTY__SIZE__INIT;

  selector(&sel, pid, NULL);
  size.cols = (uint32_t)cols;
  size.rows = (uint32_t)rows;
  pty.size = &size;
  req.process = &sel;
  req._pty_case = PROCESS__UPDATE_REQUEST___PTY_PTY;
  req.pty = &pty;
  return unary(c, &m_update, &req.base, NULL, msg, msglen);
}

conch_code list_procs(conch_client *c, Process__ListResponse **resp) {
  Process__ListRequest req = PROCESS__LIST_REQUEST__INIT;
  ProtobufCMessage *r = NULL;
  conch_code code = unary(c, &m_list, &req.base, &r, NULL, 0);

  *resp = (Process__ListResponse *)r;
  return code;
}
