/* A call over HTTP/1.1 fed an arbitrary response: the bytes go through the
   in-memory transport (tests/support/memxport.c) into the client's
   HTTP/1.1 session (runtime/http/h1.c), at split points the input chooses.  Two
   calls run one after the other, so that what follows a complete response
   meets a kept-alive connection.  Whatever the input, each call ends
   exactly once with a valid code, nothing hangs and nothing leaks.  Time
   is the transport's clock: deterministic, and no run waits.

   Input: byte 0: bit 0 the first call is server-streaming (else unary),
   bit 1 the second too, bit 2 gRPC-Web (else Connect), bit 3 the server
   keeps the connection open at the end (the calls then end by their 50 ms
   deadline, on the simulated clock);
   then chunks until the input ends: one length byte, that many bytes,
   given to the client as one piece with the client run in between. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memxport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

/* The first connection is the fuzzed server; any later one is closed by
   the server at once. */
static void close_later(memx *m) {
  int i;
  for (i = 1; i < m->nconns; i++) {
    m->conns[i]->eof = 1;
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
  memx m;
  memx_conn *srv;
  int i;
  size_t pos = 1;

  if (size < 1) {
    return 0;
  }
  if (conch_client_opts_new(&o) != 0) {
    return 0;
  }
  memx_init(&m);
  memx_setup(&m, o);
  conch_client_opts_set_http_version(o, CONCH_HTTP_1_1);
  conch_client_opts_set_protocol(o, (data[0] & 4) ? CONCH_PROTOCOL_GRPC_WEB
                                                  : CONCH_PROTOCOL_CONNECT);
  if (conch_client_new(&c, "http://127.0.0.1:8080", o) != 0) {
    conch_client_opts_free(o);
    return 0;
  }
  conch_client_opts_free(o);
  memx_attach(&m, c);
  call1 = start(c, &m1, data[0] & 1, &s1);
  memx_pump(&m, 16);
  srv = m.nconns > 0 ? m.conns[0] : NULL;
  while (pos < size && srv != NULL && srv->open) {
    size_t n = data[pos++];
    if (n > size - pos) {
      n = size - pos;
    }
    memx_drain(srv);
    memx_feed(srv, data + pos, n);
    pos += n;
    memx_pump(&m, 16);
    close_later(&m);
    if (s1.closes && call2 == NULL) {
      call2 = start(c, &m2, data[0] & 2, &s2);
      memx_pump(&m, 16);
    }
  }
  if (!(data[0] & 8) && srv != NULL) {
    srv->eof = 1;
  }
  for (i = 0; i < 200 && (!s1.closes || (call2 != NULL && !s2.closes)); i++) {
    memx_advance(&m, 5);
    close_later(&m);
    if (srv != NULL) {
      memx_drain(srv);
    }
    if (s1.closes && call2 == NULL) {
      call2 = start(c, &m2, data[0] & 2, &s2);
    }
  }
  if (!s1.closes || (call2 != NULL && !s2.closes)) {
    abort(); /* a hang: deadlines are 50 ms of the clock */
  }
  conch_call_free(call1);
  conch_call_free(call2);
  conch_client_free(c);
  memx_clear(&m);
  return 0;
}
