/* A call over HTTP/1.1 fed an arbitrary response: the bytes go through a
   real loopback socket into the client's HTTP/1.1 bridge (runtime/h1.c),
   at split points the input chooses.  Two calls run one after the other,
   so that what follows a complete response meets a kept-alive
   connection.  Whatever the input, each call ends exactly once with a
   valid code, nothing hangs and nothing leaks.

   Input: byte 0: bit 0 the first call is server-streaming (else unary),
   bit 1 the second too, bit 2 gRPC-Web (else Connect), bit 3 the server
   keeps the connection open at the end (the calls then end by their 50 ms
   deadline);
   then chunks until the input ends: one length byte, that many bytes,
   written to the socket as one piece with the client run in between. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int lfd = -1;
static char url[64];

static int listen_once(void) {
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  if (lfd >= 0) {
    return 0;
  }
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0) {
    return -1;
  }
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(lfd, 64) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &len) != 0) {
    return -1;
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%u", ntohs(a.sin_port));
  return 0;
}

typedef struct seen {
  int closes;
  conch_code code;
} seen;

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  (void)call;
  (void)p;
  (void)n;
  (void)ud;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  seen *s = ud;
  (void)call;
  (void)t;
  s->closes++;
  s->code = st->code;
  if ((int)st->code < 0 || st->code > CONCH_CODE_UNAUTHENTICATED ||
      s->closes != 1) {
    abort();
  }
}

static const conch_call_handler handler = {NULL, NULL, on_raw, NULL, on_close};

/* Accepts what connects: the first connection is the fuzzed server, any
   later one is closed at once. */
static void accept_all(int *sfd) {
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      return;
    }
    if (*sfd < 0) {
      *sfd = fd;
    } else {
      close(fd);
    }
  }
}

static void drain(int sfd) {
  uint8_t buf[4096];
  while (sfd >= 0 && recv(sfd, buf, sizeof(buf), 0) > 0) {
  }
}

static conch_call *start(conch_client *c, conch_method *m, int server,
                         seen *s) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_call *call = NULL;
  memset(m, 0, sizeof(*m));
  m->path = "/conchfault.v1.Fault/Fuzz";
  m->kind = server ? CONCH_STREAM_SERVER : CONCH_STREAM_UNARY;
  o.timeout_ms = 50; /* short: undecided inputs end by it */
  if (conch_call_start(c, m, &o, &handler, s, &call) != 0) {
    abort();
  }
  if (conch_call_send_raw(call, (const uint8_t *)"\x0a\x02ok", 4) != 0) {
    abort();
  }
  return call;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  conch_client_opts *o;
  conch_client *c;
  conch_method m1, m2;
  conch_call *call1, *call2 = NULL;
  seen s1 = {0, CONCH_CODE_OK}, s2 = {0, CONCH_CODE_OK};
  int sfd = -1, i;
  size_t pos = 1;

  if (size < 1 || listen_once() != 0) {
    return 0;
  }
  if (conch_client_opts_new(&o) != 0) {
    return 0;
  }
  conch_client_opts_set_http_version(o, CONCH_HTTP_1_1);
  conch_client_opts_set_protocol(o, (data[0] & 4) ? CONCH_PROTOCOL_GRPC_WEB
                                                  : CONCH_PROTOCOL_CONNECT);
  if (conch_client_new(&c, url, o) != 0) {
    conch_client_opts_free(o);
    return 0;
  }
  conch_client_opts_free(o);
  call1 = start(c, &m1, data[0] & 1, &s1);
  for (i = 0; i < 200 && sfd < 0; i++) {
    conch_client_run(c, 1);
    accept_all(&sfd);
  }
  while (pos < size && sfd >= 0) {
    size_t n = data[pos++];
    if (n > size - pos) {
      n = size - pos;
    }
    drain(sfd);
    if (n > 0 && send(sfd, data + pos, n, MSG_NOSIGNAL) < 0 &&
        errno != EAGAIN) {
      break;
    }
    pos += n;
    conch_client_run(c, 0);
    accept_all(&sfd);
    if (s1.closes && call2 == NULL) {
      call2 = start(c, &m2, data[0] & 2, &s2);
      conch_client_run(c, 0);
    }
  }
  if (!(data[0] & 8) && sfd >= 0) {
    close(sfd);
    sfd = -1;
  }
  for (i = 0; i < 2000 && (!s1.closes || (call2 != NULL && !s2.closes)); i++) {
    conch_client_run(c, 5);
    accept_all(&sfd);
    drain(sfd);
    if (s1.closes && call2 == NULL) {
      call2 = start(c, &m2, data[0] & 2, &s2);
    }
  }
  if (!s1.closes || (call2 != NULL && !s2.closes)) {
    abort(); /* a hang: deadlines are 50 ms */
  }
  conch_call_free(call1);
  conch_call_free(call2);
  conch_client_free(c);
  if (sfd >= 0) {
    close(sfd);
  }
  return 0;
}
