/* The server core over HTTP/1.1 in cleartext (the first bytes are not
   the HTTP/2 preface): conch's own client in HTTP/1.1 mode for Connect
   and gRPC-Web, proto and JSON, every stream kind; curl --http1.1; and
   raw sockets (tests/support/h1raw.h) for what the HTTP/1.1 bridge
   (runtime/server/server_h1.c) must get right: keep-alive (over TCP and a Unix
   socket), pipelining, chunked requests and responses, Expect:
   100-continue, malformed and oversized requests, HTTP/1.0, Connection:
   close, a client leaving mid-stream, a slow reader, and a graceful
   shutdown.  Ported from tests/server/test_serve_h1.c (conch serve's
   bridge, which this one came from). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "h1raw.h"
#include "svc.h"
#include "wait.h"

#define WAIT_MS CONCH_WAIT_MS

/* ---- Messages --------------------------------------------------------------- */

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  uint8_t *b;
  *len = protobuf_c_message_get_packed_size(m);
  b = malloc(*len + 5);
  assert_non_null(b);
  protobuf_c_message_pack(m, b + 5);
  return b;
}

/* |m| packed (|env| 0) or in a Connect/gRPC-Web envelope. */
static uint8_t *msg_bytes(const ProtobufCMessage *m, int env, size_t *len) {
  size_t n;
  uint8_t *b = pack(m, &n);
  if (!env) {
    memmove(b, b + 5, n);
    *len = n;
    return b;
  }
  b[0] = 0;
  b[1] = (uint8_t)(n >> 24);
  b[2] = (uint8_t)(n >> 16);
  b[3] = (uint8_t)(n >> 8);
  b[4] = (uint8_t)n;
  *len = n + 5;
  return b;
}

/* The envelopes of a streamed body: how many data messages (flags 0),
   and the end-stream message (flags 2) copied into |end|. */
static int envelopes(const h1raw_resp *r, char *end, size_t endcap,
                     Conchtest__V1__Response **last) {
  size_t off = 0;
  int n = 0;
  end[0] = '\0';
  while (off + 5 <= r->len) {
    const uint8_t *p = r->body + off;
    size_t len = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) |
                 ((size_t)p[3] << 8) | p[4];
    assert_true(off + 5 + len <= r->len);
    if (p[0] & 2) {
      snprintf(end, endcap, "%.*s", (int)len, (const char *)p + 5);
    } else {
      n++;
      if (last != NULL) {
        if (*last != NULL) {
          conchtest__v1__response__free_unpacked(*last, NULL);
        }
        *last = conchtest__v1__response__unpack(NULL, len, p + 5);
        assert_non_null(*last);
      }
    }
    off += 5 + len;
  }
  assert_int_equal(off, r->len);
  return n;
}

static fixture *fx;
static int port;

static int setup(void **state) {
  (void)state;
  fx = calloc(1, sizeof(*fx));
  fx_start(fx, NULL, 0);
  port = conch_server_port(fx->s);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fx_stop(fx);
  free(fx);
  return 0;
}

/* A unary Connect call (proto) on |c|: the request echoes |payload|. */
static void unary_on(h1raw *c, const char *payload, const char *extra,
                     h1raw_resp *r) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  size_t len;
  uint8_t *b;
  req.payload.data = (uint8_t *)payload;
  req.payload.len = strlen(payload);
  b = msg_bytes(&req.base, 0, &len);
  h1raw_post(c, SVC "Unary", "application/proto", extra, b, len);
  free(b);
  assert_int_equal(h1raw_read_resp(c, r, 0, WAIT_MS), 0);
}

static void assert_echo(const h1raw_resp *r, const char *payload) {
  Conchtest__V1__Response *m;
  assert_int_equal(r->status, 200);
  m = conchtest__v1__response__unpack(NULL, r->len, r->body);
  assert_non_null(m);
  assert_int_equal(m->payload.len, strlen(payload));
  assert_memory_equal(m->payload.data, payload, strlen(payload));
  conchtest__v1__response__free_unpacked(m, NULL);
}

static void assert_alive(void) {
  h1raw *c = h1raw_open(port);
  h1raw_resp r;
  unary_on(c, "alive", NULL, &r);
  assert_echo(&r, "alive");
  h1raw_resp_free(&r);
  h1raw_close(c);
}

/* ---- conch's client, forced to HTTP/1.1 ------------------------------------ */

static conch_client *h1_client(conch_protocol proto, conch_codec codec) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, codec), 0);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, "gzip"), 0);
  assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static void test_conch_client(void **state) {
  static const conch_protocol protos[] = {CONCH_PROTOCOL_CONNECT,
                                          CONCH_PROTOCOL_GRPC_WEB};
  static const conch_codec codecs[] = {CONCH_CODEC_PROTO, CONCH_CODEC_JSON};
  (void)state;
  for (int pi = 0; pi < 2; pi++) {
    for (int ci = 0; ci < 2; ci++) {
      conch_client *c = h1_client(protos[pi], codecs[ci]);
      Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
      ProtobufCMessage *out = NULL, *m;
      conch_status st;
      conch_call *call;
      uint8_t payload[50000];
      uint32_t n = 0;
      int rv;

      for (size_t i = 0; i < sizeof(payload); i++) {
        payload[i] = (uint8_t)(i * 3);
      }
      /* Unary, several times over the kept-alive connection. */
      for (int k = 0; k < 3; k++) {
        req.payload.data = payload;
        req.payload.len = sizeof(payload) - (size_t)k;
        conch_status_init(&st);
        if (conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL,
                             NULL) != 0) {
          fail_msg("%d/%d: %s", pi, ci, conch_status_message(&st));
        }
        assert_int_equal(
            ((Conchtest__V1__Response *)out)->payload.len, req.payload.len);
        assert_memory_equal(((Conchtest__V1__Response *)out)->payload.data,
                            payload, req.payload.len);
        conch_message_free(c, out);
        conch_status_clear(&st);
      }
      /* An error with its code. */
      {
        Conchtest__V1__ErrorSpec e = CONCHTEST__V1__ERROR_SPEC__INIT;
        Conchtest__V1__Request er = CONCHTEST__V1__REQUEST__INIT;
        e.code = CONCH_CODE_FAILED_PRECONDITION;
        e.message = "nope";
        er.error = &e;
        conch_status_init(&st);
        assert_int_equal(conch_unary_sync(c, &m_unary, NULL, &er.base, &out,
                                          &st, NULL, NULL),
                         CONCH_ERR_RPC);
        assert_int_equal(st.code, CONCH_CODE_FAILED_PRECONDITION);
        assert_string_equal(conch_status_message(&st), "nope");
        conch_status_clear(&st);
      }
      /* Server stream. */
      req.payload.len = 0;
      req.response_count = 6;
      req.response_size = 30000;
      assert_int_equal(
          conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call), 0);
      assert_int_equal(conch_call_send_sync(call, &req.base), 0);
      while ((rv = conch_call_recv_sync(call, &m)) == 0) {
        assert_int_equal(((Conchtest__V1__Response *)m)->index, n);
        n++;
        conch_message_free(c, m);
      }
      if (rv != CONCH_ERR_EOF) {
        fail_msg("%d/%d: %s", pi, ci,
                 conch_status_message(conch_call_status(call)));
      }
      assert_int_equal(n, 6);
      conch_call_free(call);
      /* Client stream and bidi, sent whole. */
      for (int b = 0; b < 2; b++) {
        Conchtest__V1__Request q = CONCHTEST__V1__REQUEST__INIT;
        int got = 0;
        assert_int_equal(conch_call_start(c, b ? &m_bidi : &m_cstream, NULL,
                                          NULL, NULL, &call),
                         0);
        q.payload.data = payload;
        for (int i = 0; i < 8; i++) {
          q.payload.len = 1000 * (size_t)i;
          assert_int_equal(conch_call_send_sync(call, &q.base), 0);
        }
        assert_int_equal(conch_call_close_send(call), 0);
        while ((rv = conch_call_recv_sync(call, &m)) == 0) {
          Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
          if (b) {
            assert_int_equal(r->payload.len, 1000 * (size_t)got);
          } else {
            assert_int_equal(r->message_count, 8);
            assert_int_equal(r->total_bytes, 28000);
          }
          got++;
          conch_message_free(c, m);
        }
        if (rv != CONCH_ERR_EOF) {
          fail_msg("%d/%d %d: %s", pi, ci, b,
                   conch_status_message(conch_call_status(call)));
        }
        assert_int_equal(got, b ? 8 : 1);
        conch_call_free(call);
      }
      conch_client_free(c);
    }
  }
}

/* ---- Raw sockets ------------------------------------------------------------ */

/* HTTP/1.1 over a Unix socket: two calls on one keep-alive connection,
   and a Connection: close that the server honours. */
static void test_unix_socket(void **state) {
  fixture ux;
  h1raw *c;
  h1raw_resp r;
  char v[64];

  (void)state;
  memset(&ux, 0, sizeof(ux));
  fx_start(&ux, NULL, 1);
  assert_true(ux.sock[0] != '\0');
  c = h1raw_open_unix(ux.sock);
  unary_on(c, "one", NULL, &r);
  assert_echo(&r, "one");
  assert_null(h1raw_header(&r, "connection", v, sizeof(v)));
  h1raw_resp_free(&r);
  unary_on(c, "two", "Connection: close\r\n", &r);
  assert_echo(&r, "two");
  assert_non_null(h1raw_header(&r, "connection", v, sizeof(v)));
  assert_string_equal(v, "close");
  h1raw_resp_free(&r);
  assert_true(h1raw_at_eof(c, WAIT_MS));
  assert_int_equal(c->len, 0);
  h1raw_close(c);
  fx_stop(&ux);
}

static void test_keepalive_pipelining(void **state) {
  h1raw *c = h1raw_open(port);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__Response *last = NULL;
  char v[128], end[256];
  uint8_t *all, *u, *s;
  size_t ul, sl, n = 0;
  h1raw_resp r;
  static const char get[] =
      "GET " SVC "Unary?encoding=json&message=%7B%22payload%22%3A%22Z2V0%22%7D"
      " HTTP/1.1\r\nHost: localhost\r\n\r\n";

  (void)state;
  req.payload.data = (uint8_t *)"one";
  req.payload.len = 3;
  u = msg_bytes(&req.base, 0, &ul);
  req.payload.len = 0;
  req.response_count = 3;
  req.response_size = 20000;
  s = msg_bytes(&req.base, 1, &sl);
  all = malloc(4096 + ul + sl);
  assert_non_null(all);
  /* Three requests in one write: a unary call, a server stream, a
     Connect GET; each waits its turn. */
  n += (size_t)sprintf((char *)all + n,
                       "POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
                       "Content-Type: application/proto\r\n"
                       "Content-Length: %zu\r\n\r\n",
                       ul);
  memcpy(all + n, u, ul);
  n += ul;
  n += (size_t)sprintf((char *)all + n,
                       "POST " SVC "ServerStream HTTP/1.1\r\nHost: localhost\r\n"
                       "Content-Type: application/connect+proto\r\n"
                       "Content-Length: %zu\r\n\r\n",
                       sl);
  memcpy(all + n, s, sl);
  n += sl;
  memcpy(all + n, get, sizeof(get) - 1);
  n += sizeof(get) - 1;
  h1raw_send(c, all, n);
  free(all);
  free(u);
  free(s);

  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_echo(&r, "one");
  assert_non_null(h1raw_header(&r, "content-length", v, sizeof(v)));
  assert_null(h1raw_header(&r, "connection", v, sizeof(v)));
  assert_non_null(h1raw_header(&r, "date", v, sizeof(v)));
  h1raw_resp_free(&r);

  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(h1raw_header(&r, "content-type", v, sizeof(v)));
  assert_string_equal(v, "application/connect+proto");
  assert_int_equal(envelopes(&r, end, sizeof(end), &last), 3);
  assert_int_equal(last->index, 2);
  assert_int_equal(last->payload.len, 20000);
  conchtest__v1__response__free_unpacked(last, NULL);
  assert_string_equal(end, "{}");
  h1raw_resp_free(&r);

  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr((char *)r.body, "\"payload\":\"Z2V0\""));
  h1raw_resp_free(&r);
  assert_int_equal(c->len, 0);
  /* HEAD: the server core takes GET and POST only (as connect-go), and
     the answer to HEAD has no body. */
  h1raw_sendf(c, "HEAD " SVC "Unary?encoding=json&message=%%7B%%7D HTTP/1.1\r\n"
                 "Host: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 1, WAIT_MS), 0);
  assert_int_equal(r.status, 405);
  h1raw_resp_free(&r);
  /* And the connection still serves. */
  unary_on(c, "again", NULL, &r);
  assert_echo(&r, "again");
  h1raw_resp_free(&r);
  h1raw_close(c);
}

/* The bytes of |p| as chunks of |step|, with an extension and trailers. */
static void send_chunked(h1raw *c, const uint8_t *p, size_t n, size_t step) {
  size_t off;
  for (off = 0; off < n; off += step) {
    size_t k = n - off < step ? n - off : step;
    h1raw_sendf(c, "%zx;ext=1\r\n", k);
    h1raw_send(c, p + off, k);
    h1raw_send(c, "\r\n", 2);
  }
  h1raw_sendf(c, "0\r\nX-Trailer: t\r\n\r\n");
}

static void test_chunked_request(void **state) {
  h1raw *c = h1raw_open(port);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__Response *last = NULL;
  uint8_t body[4096];
  char end[256];
  size_t n = 0;
  h1raw_resp r;

  (void)state;
  /* A client stream of 5 envelopes, chunked in pieces that split them. */
  req.payload.data = body;
  for (int i = 0; i < 5; i++) {
    size_t len;
    uint8_t *e;
    req.payload.len = (size_t)i * 100;
    e = msg_bytes(&req.base, 1, &len);
    memcpy(body + n, e, len);
    n += len;
    free(e);
  }
  memset(body + n, 0, 0);
  h1raw_sendf(c, "POST " SVC "ClientStream HTTP/1.1\r\nHost: localhost\r\n"
                 "Content-Type: application/connect+proto\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n");
  send_chunked(c, body, n, 7);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(envelopes(&r, end, sizeof(end), &last), 1);
  assert_int_equal(last->message_count, 5);
  assert_int_equal(last->total_bytes, 1000);
  conchtest__v1__response__free_unpacked(last, NULL);
  h1raw_resp_free(&r);
  /* A unary call with a chunked body, on the same connection. */
  {
    size_t len;
    uint8_t *b;
    req.payload.data = (uint8_t *)"chunky";
    req.payload.len = 6;
    b = msg_bytes(&req.base, 0, &len);
    h1raw_sendf(c, "POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
                   "Content-Type: application/proto\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n");
    send_chunked(c, b, len, 3);
    free(b);
    assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
    assert_echo(&r, "chunky");
    h1raw_resp_free(&r);
  }
  h1raw_close(c);
}

static void test_expect_continue(void **state) {
  h1raw *c = h1raw_open(port);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  size_t len;
  uint8_t *b;
  h1raw_resp r;

  (void)state;
  req.payload.data = (uint8_t *)"after 100";
  req.payload.len = 9;
  b = msg_bytes(&req.base, 0, &len);
  h1raw_sendf(c,
              "POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
              "Content-Type: application/proto\r\nContent-Length: %zu\r\n"
              "Expect: 100-continue\r\n\r\n",
              len);
  assert_int_equal(h1raw_read_head(c, &r, WAIT_MS), 0);
  assert_int_equal(r.status, 100);
  h1raw_send(c, b, len);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_echo(&r, "after 100");
  h1raw_resp_free(&r);
  /* Refused before the body (no such method): no 100, and the body that
     follows anyway is read and dropped; the connection goes on. */
  h1raw_sendf(c,
              "POST /nope.v1.Nope/Nope HTTP/1.1\r\nHost: localhost\r\n"
              "Content-Type: application/proto\r\nContent-Length: %zu\r\n"
              "Expect: 100-continue\r\n\r\n",
              len);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 404);
  h1raw_resp_free(&r);
  h1raw_send(c, b, len);
  unary_on(c, "next", NULL, &r);
  assert_echo(&r, "next");
  h1raw_resp_free(&r);
  /* An expectation we do not know. */
  h1raw_sendf(c, "POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
                 "Content-Length: 1\r\nExpect: magic\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 417);
  h1raw_resp_free(&r);
  assert_true(h1raw_at_eof(c, WAIT_MS));
  free(b);
  h1raw_close(c);
}

#define REFUSED(s, status) h1raw_assert_refused(port, s, sizeof(s) - 1, status)
#define GET_OK SVC "Unary?encoding=json&message=%7B%7D"

static void test_malformed(void **state) {
  (void)state;
  REFUSED("\x01\x02 garbage\r\n\r\n", 400);
  REFUSED("GET " GET_OK " HTTP/1.1\r\n\r\n", 400); /* no Host */
  REFUSED("GET " GET_OK " HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
  REFUSED("GET " GET_OK " HTTP/1.1\r\nHost: localhost\r\nBad Name: v\r\n\r\n",
          400);
  REFUSED("POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
          "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
          400);
  REFUSED("POST " SVC
          "Unary HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n"
          "Content-Length: 2\r\n\r\nab",
          400);
  REFUSED("GET health HTTP/1.1\r\nHost: localhost\r\n\r\n", 400);
  REFUSED("FOO / HTTP/1.1\r\nHost: localhost\r\n\r\n", 405);
  REFUSED("PUT " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
          "Content-Length: 0\r\n\r\n",
          405);
  REFUSED("CONNECT example.com:443 HTTP/1.1\r\nHost: localhost\r\n\r\n", 405);
  REFUSED("GET " GET_OK " HTTP/2.0\r\nHost: localhost\r\n\r\n", 505);
  /* Truncated: the client ends its side inside the headers. */
  {
    h1raw *c = h1raw_open(port);
    h1raw_resp r;
    h1raw_sendf(c, "POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n"
                   "Content-Type: application/proto\r\n"
                   "Content-Length: 10\r\n\r\nabc");
    shutdown(c->fd, SHUT_WR);
    assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
    assert_int_equal(r.status, 400);
    h1raw_resp_free(&r);
    assert_true(h1raw_at_eof(c, WAIT_MS));
    h1raw_close(c);
  }
  /* Well-formed, but the client says it is the last. */
  REFUSED("GET " GET_OK " HTTP/1.0\r\n\r\n", 200);
  REFUSED("GET " GET_OK " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
          "\r\n",
          200);
  /* HTTP/1.0 keep-alive, with a length. */
  {
    h1raw *c = h1raw_open(port);
    h1raw_resp r;
    char v[64];

    h1raw_sendf(c, "GET %s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", GET_OK);
    assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(h1raw_header(&r, "connection", v, sizeof(v)));
    assert_string_equal(v, "keep-alive");
    h1raw_resp_free(&r);
    h1raw_sendf(c, "GET %s HTTP/1.0\r\n\r\n", GET_OK);
    assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
    assert_int_equal(r.status, 200);
    h1raw_resp_free(&r);
    assert_true(h1raw_at_eof(c, WAIT_MS));
    h1raw_close(c);
  }
  assert_alive();
}

static void test_oversized(void **state) {
  size_t n = 48 * 1024;
  char *big = malloc(n + 256);
  size_t k;
  int i;

  (void)state;
  assert_non_null(big);
  k = (size_t)snprintf(big, 256,
                       "GET %s HTTP/1.1\r\nHost: localhost\r\nX-Big: ", GET_OK);
  memset(big + k, 'a', n);
  k += n;
  memcpy(big + k, "\r\n\r\n", 4);
  h1raw_assert_refused(port, big, k + 4, 431);
  /* Too many fields. */
  k = (size_t)snprintf(big, 256, "GET %s HTTP/1.1\r\nHost: localhost\r\n",
                       GET_OK);
  for (i = 0; i < 120; i++) {
    k += (size_t)snprintf(big + k, 32, "X-%d: y\r\n", i);
  }
  memcpy(big + k, "\r\n", 2);
  h1raw_assert_refused(port, big, k + 2, 431);
  /* A request line past 8 KiB. */
  memcpy(big, "GET /", 5);
  memset(big + 5, 'a', 9000);
  k = 5 + 9000;
  k += (size_t)snprintf(big + k, 64, " HTTP/1.1\r\nHost: localhost\r\n\r\n");
  h1raw_assert_refused(port, big, k, 414);
  free(big);
  assert_alive();
}

static int cancels_at_least(void *arg) {
  return atomic_load(&fx->cancels) >= *(int *)arg;
}

static int no_calls(void *arg) {
  (void)arg;
  return atomic_load(&fx->calls_live) == 0;
}

/* A server stream whose handler holds the call after one response. */
static void start_held_stream(h1raw *c, h1raw_resp *r) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  size_t len;
  uint8_t *b;
  req.response_count = 1;
  req.response_size = 10;
  req.delay_ms = 1;
  b = msg_bytes(&req.base, 1, &len);
  h1raw_post(c, SVC "ServerStream", "application/connect+proto", NULL, b, len);
  free(b);
  assert_int_equal(h1raw_read_head(c, r, WAIT_MS), 0);
  assert_int_equal(r->status, 200);
  assert_true(h1raw_read_chunk(c, r, WAIT_MS) > 0);
}

static void test_client_leaves_mid_stream(void **state) {
  h1raw *c = h1raw_open(port);
  int want = atomic_load(&fx->cancels) + 1;
  h1raw_resp r;

  (void)state;
  start_held_stream(c, &r);
  h1raw_resp_free(&r);
  h1raw_close(c);
  /* The handler hears of it; the call is freed; the server serves on. */
  assert_true(conch_wait_until(cancels_at_least, &want, WAIT_MS));
  assert_true(conch_wait_until(no_calls, NULL, WAIT_MS));
  assert_alive();
}

static int again_seen(void *arg) {
  (void)arg;
  return atomic_load(&fx->again) > 0;
}

/* A client that does not read: the handler's sends are refused
   (CONCH_ERR_AGAIN) instead of piling up; then everything arrives. */
static void test_slow_reader(void **state) {
  h1raw *c = h1raw_open(port);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  char end[256];
  size_t len;
  uint8_t *b;
  h1raw_resp r;

  (void)state;
  atomic_store(&fx->again, 0);
  req.response_count = 400;
  req.response_size = 60000; /* 24 MB: more than the socket buffers hold */
  b = msg_bytes(&req.base, 1, &len);
  h1raw_post(c, SVC "ServerStream", "application/connect+proto", NULL, b, len);
  free(b);
  assert_true(conch_wait_until(again_seen, NULL, WAIT_MS));
  assert_int_equal(h1raw_read_resp(c, &r, 0, 60000), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(envelopes(&r, end, sizeof(end), NULL), 400);
  assert_string_equal(end, "{}");
  h1raw_resp_free(&r);
  h1raw_close(c);
}

static int server_idle(void *arg) {
  (void)arg;
  return atomic_load(&fx->idle);
}

/* Shutdown with HTTP/1.1 connections open: an idle keep-alive one closes
   at once, a busy one when its call is done. */
static void test_shutdown(void **state) {
  h1raw *idle = h1raw_open(port);
  h1raw *busy = h1raw_open(port);
  Conchtest__V1__Response *last = NULL;
  char end[256];
  h1raw_resp r;
  long n;

  (void)state;
  unary_on(idle, "first", NULL, &r);
  assert_echo(&r, "first");
  h1raw_resp_free(&r);
  start_held_stream(busy, &r);
  atomic_store(&fx->shutdown_req, 1);
  assert_true(h1raw_at_eof(idle, WAIT_MS));
  assert_false(h1raw_at_eof(busy, 200));
  atomic_store(&fx->release, 1);
  do {
    n = h1raw_read_chunk(busy, &r, WAIT_MS);
  } while (n > 0);
  assert_int_equal(n, 0);
  assert_int_equal(envelopes(&r, end, sizeof(end), &last), 2);
  assert_memory_equal(last->payload.data, "late", 4);
  conchtest__v1__response__free_unpacked(last, NULL);
  assert_string_equal(end, "{}");
  h1raw_resp_free(&r);
  assert_true(h1raw_at_eof(busy, WAIT_MS));
  assert_true(conch_wait_until(server_idle, NULL, WAIT_MS));
  h1raw_close(idle);
  h1raw_close(busy);
}

/* A client that sends its request line and headers too slowly (or nothing
   at all) is cut off by the header timeout, as an HTTP/2 one is. */
static void test_header_timeout(void **state) {
  conch_server_opts *o;
  h1raw *slow, *mute;
  h1raw_resp r;

  (void)state;
  fx_stop(fx);
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_header_timeout(o, 300), 0);
  fx_start(fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx->s);
  slow = h1raw_open(port);
  mute = h1raw_open(port);
  h1raw_sendf(slow, "POST " SVC "Unary HTTP/1.1\r\nHost: localhost\r\n");
  assert_true(h1raw_at_eof(slow, WAIT_MS));
  assert_true(h1raw_at_eof(mute, WAIT_MS));
  h1raw_close(slow);
  h1raw_close(mute);
  /* A prompt one is served. */
  slow = h1raw_open(port);
  unary_on(slow, "prompt", NULL, &r);
  assert_echo(&r, "prompt");
  h1raw_resp_free(&r);
  h1raw_close(slow);
}

/* ---- curl --http1.1 --------------------------------------------------------- */

static const char *run(const char *cmd) {
  static char out[65536];
  FILE *p = popen(cmd, "r");
  size_t n;
  assert_non_null(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  return out;
}

static void test_curl(void **state) {
  char cmd[1024], path[] = "/tmp/conch-srvh1-XXXXXX";
  const char *out;
  FILE *f;
  int fd;

  (void)state;
  snprintf(cmd, sizeof(cmd),
           "curl -sS --http1.1 -w '\\n%%{http_version} %%{response_code}' "
           "-H 'content-type: application/json' --data-binary "
           "'{\"payload\":\"aGVsbG8=\"}' %s" SVC "Unary",
           fx->url);
  out = run(cmd);
  if (strstr(out, "\"payload\":\"aGVsbG8=\"") == NULL ||
      strstr(out, "\n1.1 200") == NULL) {
    fail_msg("%s", out);
  }
  /* A 200 KB JSON body, chunked, after Expect: 100-continue. */
  fd = mkstemp(path);
  assert_true(fd >= 0);
  f = fdopen(fd, "w");
  fputs("{\"payload\":\"", f);
  for (int i = 0; i < 50000; i++) {
    fputs("QUJD", f); /* "ABC" */
  }
  fputs("\"}", f);
  fclose(f);
  snprintf(cmd, sizeof(cmd),
           "curl -sS --http1.1 -o /dev/null -w '%%{http_version} "
           "%%{response_code} %%{size_download}' "
           "-H 'content-type: application/json' -H 'Transfer-Encoding: "
           "chunked' -H 'Expect: 100-continue' --data-binary @%s %s" SVC
           "Unary",
           path, fx->url);
  out = run(cmd);
  if (strncmp(out, "1.1 200 ", 8) != 0 || atol(out + 8) < 200000) {
    fail_msg("%s", out);
  }
  unlink(path);
  /* A Connect error (JSON) over HTTP/1.1. */
  snprintf(cmd, sizeof(cmd),
           "curl -sS --http1.1 -w ' %%{response_code}' "
           "-H 'content-type: application/json' --data-binary "
           "'{\"error\":{\"code\":9,\"message\":\"nope\"}}' %s" SVC "Unary",
           fx->url);
  out = run(cmd);
  if (strstr(out, "\"code\":\"failed_precondition\"") == NULL ||
      strstr(out, " 400") == NULL) {
    fail_msg("%s", out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_conch_client, setup, teardown),
      cmocka_unit_test_setup_teardown(test_keepalive_pipelining, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_unix_socket, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chunked_request, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expect_continue, setup, teardown),
      cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_leaves_mid_stream, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_slow_reader, setup, teardown),
      cmocka_unit_test_setup_teardown(test_curl, setup, teardown),
      cmocka_unit_test_setup_teardown(test_header_timeout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown, setup, teardown),
  };
  if (getenv("TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
