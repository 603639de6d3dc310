/* A raw HTTP/1.1 client for tests (see h1raw.h). */
#define _GNU_SOURCE /* memmem */
#include "h1raw.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "wait.h"

/* The buffer grows by at least this much before a read. */
#define H1RAW_READ 65536

/* Says on stderr why a read failed, with the start of what is buffered
   (escaped), and returns -1. */
static int h1raw_fail(const h1raw *c, const char *why) {
  char shown[161];
  size_t n = 0;
  size_t i;

  for (i = 0; i < c->len && n + 4 < sizeof(shown); i++) {
    uint8_t b = c->buf[i];

    if (b == '\r') {
      n += (size_t)snprintf(shown + n, sizeof(shown) - n, "\\r");
    } else if (b == '\n') {
      n += (size_t)snprintf(shown + n, sizeof(shown) - n, "\\n");
    } else if (b < 0x20 || b >= 0x7f) {
      n += (size_t)snprintf(shown + n, sizeof(shown) - n, "\\x%02x", b);
    } else {
      shown[n++] = (char)b;
    }
  }
  shown[n] = '\0';
  fprintf(stderr, "h1raw: %s (%s; %zu bytes buffered: \"%s%s\")\n", why,
          c->eof ? "peer closed" : "still open", c->len, shown,
          i < c->len ? "..." : "");
  return -1;
}

static h1raw *h1raw_new(int fd) {
  h1raw *c = calloc(1, sizeof(*c));

  assert_non_null(c);
  c->fd = fd;
  return c;
}

h1raw *h1raw_open(int port) {
  struct sockaddr_in sa;
  int one = 1;
  int fd;

  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    fprintf(stderr, "h1raw: connect to 127.0.0.1:%d: %s\n", port,
            strerror(errno));
    close(fd);
    fail();
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return h1raw_new(fd);
}

h1raw *h1raw_open_unix(const char *path) {
  struct sockaddr_un sa;
  int fd;

  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  assert_true(strlen(path) < sizeof(sa.sun_path));
  memcpy(sa.sun_path, path, strlen(path) + 1);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    fprintf(stderr, "h1raw: connect to %s: %s\n", path, strerror(errno));
    close(fd);
    fail();
  }
  return h1raw_new(fd);
}

void h1raw_close(h1raw *c) {
  if (c == NULL) {
    return;
  }
  close(c->fd);
  free(c->buf);
  free(c);
}

void h1raw_send(h1raw *c, const void *p, size_t n) {
  const uint8_t *b = p;

  while (n > 0) {
    ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);

    if (w < 0 && errno == EINTR) {
      continue;
    }
    if (w <= 0) {
      fprintf(stderr, "h1raw: send of %zu bytes: %s\n", n,
              w < 0 ? strerror(errno) : "nothing taken");
    }
    assert_true(w > 0);
    b += w;
    n -= (size_t)w;
  }
}

void h1raw_sendf(h1raw *c, const char *fmt, ...) {
  char buf[4096];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  assert_true(n > 0 && (size_t)n < sizeof(buf));
  h1raw_send(c, buf, (size_t)n);
}

void h1raw_post(h1raw *c, const char *path, const char *ctype,
                const char *extra, const uint8_t *body, size_t len) {
  h1raw_sendf(c,
              "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
              "Content-Length: %zu\r\n%s\r\n",
              path, ctype, len, extra != NULL ? extra : "");
  if (len > 0) {
    h1raw_send(c, body, len);
  }
}

int h1raw_fill(h1raw *c, int ms) {
  long long deadline = conch_now_ms() + (ms > 0 ? ms : 0);
  struct pollfd pfd;
  ssize_t n;
  int r;

  if (c->eof) {
    return 0;
  }
  for (;;) {
    long long left = deadline - conch_now_ms();

    pfd.fd = c->fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    r = poll(&pfd, 1, left > 0 ? (int)left : 0);
    if (r > 0) {
      break;
    }
    if (r == 0 || errno != EINTR || conch_now_ms() >= deadline) {
      return -1;
    }
  }
  if (c->cap - c->len < H1RAW_READ) {
    c->cap = c->cap * 2 + H1RAW_READ;
    c->buf = realloc(c->buf, c->cap);
    assert_non_null(c->buf);
  }
  do {
    n = read(c->fd, c->buf + c->len, c->cap - c->len);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    c->eof = 1;
    return 0;
  }
  c->len += (size_t)n;
  return 1;
}

void h1raw_drop(h1raw *c, size_t n) {
  assert_true(n <= c->len);
  memmove(c->buf, c->buf + n, c->len - n);
  c->len -= n;
}

size_t h1raw_want(h1raw *c, size_t n, int line, long long deadline) {
  for (;;) {
    long long left = deadline - conch_now_ms();

    if (line) {
      uint8_t *e = c->len >= 2 ? memmem(c->buf, c->len, "\r\n", 2) : NULL;

      if (e != NULL) {
        return (size_t)(e - c->buf) + 2;
      }
    } else if (c->len >= n) {
      return n;
    }
    if (left <= 0 || h1raw_fill(c, (int)left) <= 0) {
      return 0;
    }
  }
}

int h1raw_at_eof(h1raw *c, int ms) {
  long long deadline = conch_now_ms() + ms;

  while (!c->eof && conch_now_ms() < deadline) {
    if (h1raw_fill(c, (int)(deadline - conch_now_ms())) < 0) {
      break;
    }
  }
  return c->eof;
}

const char *h1raw_header(const h1raw_resp *r, const char *name, char *out,
                         size_t outlen) {
  const char *p = r->head;
  size_t n = strlen(name);

  while (*p != '\0') {
    const char *e = strstr(p, "\r\n");
    size_t len = e != NULL ? (size_t)(e - p) : strlen(p);

    if (len > n && strncasecmp(p, name, n) == 0 && p[n] == ':') {
      const char *v = p + n + 1;
      size_t vl;

      while (*v == ' ' || *v == '\t') {
        v++;
      }
      vl = (size_t)(p + len - v);
      if (vl >= outlen) {
        vl = outlen - 1;
      }
      memcpy(out, v, vl);
      out[vl] = '\0';
      return out;
    }
    p += len;
    if (e != NULL) {
      p += 2;
    }
  }
  return NULL;
}

int h1raw_read_head(h1raw *c, h1raw_resp *r, int ms) {
  long long deadline = conch_now_ms() + ms;
  uint8_t *end;
  uint8_t *first;
  size_t n;
  int i;

  memset(r, 0, sizeof(*r));
  for (;;) {
    end = c->len >= 4 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
    if (end != NULL) {
      break;
    }
    if (conch_now_ms() >= deadline ||
        h1raw_fill(c, (int)(deadline - conch_now_ms())) <= 0) {
      return h1raw_fail(c, c->eof ? "EOF before the end of a response head"
                                  : "no whole response head in time");
    }
  }
  if (c->len < 12 || memcmp(c->buf, "HTTP/1.1 ", 9) != 0) {
    return h1raw_fail(c, "not an HTTP/1.1 status line");
  }
  for (i = 9; i < 12; i++) {
    if (c->buf[i] < '0' || c->buf[i] > '9') {
      return h1raw_fail(c, "a status code that is not three digits");
    }
  }
  r->status =
      (c->buf[9] - '0') * 100 + (c->buf[10] - '0') * 10 + (c->buf[11] - '0');
  /* The header lines with the CRLF of the last (the status line's own
     CRLF is the first in the buffer, at or before |end|). */
  first = memmem(c->buf, c->len, "\r\n", 2);
  n = (size_t)(end - first);
  if (n >= sizeof(r->head)) {
    n = sizeof(r->head) - 1;
  }
  memcpy(r->head, first + 2, n);
  r->head[n] = '\0';
  h1raw_drop(c, (size_t)(end - c->buf) + 4);
  return 0;
}

static void h1raw_body_add(h1raw_resp *r, const uint8_t *p, size_t n) {
  if (n == 0) {
    return;
  }
  if (r->cap < r->len + n + 1) {
    size_t cap = r->cap * 2 > r->len + n + 1 ? r->cap * 2 : r->len + n + 1;

    r->body = realloc(r->body, cap);
    assert_non_null(r->body);
    r->cap = cap;
  }
  memcpy(r->body + r->len, p, n);
  r->len += n;
  r->body[r->len] = '\0';
}

long h1raw_read_chunk(h1raw *c, h1raw_resp *r, int ms) {
  long long deadline = conch_now_ms() + ms;
  size_t k = h1raw_want(c, 0, 1, deadline);
  char line[64];
  char *end;
  long size;

  if (k == 0) {
    return h1raw_fail(c, "no chunk-size line in time");
  }
  if (k > sizeof(line)) {
    return h1raw_fail(c, "a chunk-size line over 64 bytes");
  }
  memcpy(line, c->buf, k - 2);
  line[k - 2] = '\0';
  size = strtol(line, &end, 16);
  if (end == line || size < 0 || (*end != '\0' && *end != ';')) {
    return h1raw_fail(c, "a malformed chunk-size line");
  }
  h1raw_drop(c, k);
  if (size == 0) {
    for (;;) {
      k = h1raw_want(c, 0, 1, deadline);
      if (k == 0) {
        return h1raw_fail(c, "no end of the trailers in time");
      }
      if (k == 2) {
        h1raw_drop(c, 2);
        return 0;
      }
      if (strlen(r->trailers) + k < sizeof(r->trailers)) {
        strncat(r->trailers, (const char *)c->buf, k);
      }
      h1raw_drop(c, k);
    }
  }
  if (h1raw_want(c, (size_t)size + 2, 0, deadline) == 0) {
    return h1raw_fail(c, "a chunk shorter than its size in time");
  }
  if (memcmp(c->buf + size, "\r\n", 2) != 0) {
    return h1raw_fail(c, "no CRLF after a chunk's data");
  }
  h1raw_body_add(r, c->buf, (size_t)size);
  h1raw_drop(c, (size_t)size + 2);
  r->nchunks++;
  return size;
}

int h1raw_read_resp(h1raw *c, h1raw_resp *r, int head_req, int ms) {
  long long deadline = conch_now_ms() + ms;
  char v[64];

  if (h1raw_read_head(c, r, ms) != 0) {
    return -1;
  }
  if (head_req || r->status == 204 || r->status == 304 || r->status < 200) {
    return 0;
  }
  if (h1raw_header(r, "transfer-encoding", v, sizeof(v)) != NULL) {
    long n;

    assert_string_equal(v, "chunked");
    r->chunked = 1;
    do {
      n = h1raw_read_chunk(c, r, (int)(deadline - conch_now_ms()));
    } while (n > 0);
    return n == 0 ? 0 : -1;
  }
  if (h1raw_header(r, "content-length", v, sizeof(v)) != NULL) {
    char *end;
    unsigned long n = strtoul(v, &end, 10);

    if (end == v || *end != '\0') {
      return h1raw_fail(c, "a Content-Length that is not a number");
    }
    if (n > 0 && h1raw_want(c, n, 0, deadline) == 0) {
      return h1raw_fail(c, "a body shorter than its Content-Length in time");
    }
    h1raw_body_add(r, c->buf, n);
    h1raw_drop(c, n);
    return 0;
  }
  while (h1raw_fill(c, (int)(deadline - conch_now_ms())) > 0) {
  }
  h1raw_body_add(r, c->buf, c->len);
  h1raw_drop(c, c->len);
  return c->eof ? 0 : h1raw_fail(c, "a body to EOF still open at the limit");
}

void h1raw_resp_free(h1raw_resp *r) {
  free(r->body);
  r->body = NULL;
  r->len = 0;
  r->cap = 0;
}

void h1raw_assert_refused(int port, const char *req, size_t len, int status) {
  h1raw *c = h1raw_open(port);
  h1raw_resp r;
  char v[64];

  h1raw_send(c, req, len);
  assert_int_equal(h1raw_read_resp(c, &r, 0, CONCH_WAIT_MS), 0);
  if (r.status != status) {
    fprintf(stderr, "h1raw: %.40s...: %d, not %d\n", req, r.status, status);
  }
  assert_int_equal(r.status, status);
  assert_non_null(h1raw_header(&r, "connection", v, sizeof(v)));
  assert_string_equal(v, "close");
  h1raw_resp_free(&r);
  assert_true(h1raw_at_eof(c, CONCH_WAIT_MS));
  h1raw_close(c);
}
