/* The server core's request gate, plain routes and connection policy
   (conch/server.h): the gate sees every request before its method is
   looked up and refuses it with plain HTTP or an RPC error; a plain route
   answers GET /health; the accept filter, the connection limit with
   eviction, the header and body timeouts, the limits on buffered request
   bytes; conch_rpc_send_packed() in both codecs and conch_rpc_queued().
   Raw HTTP/2 (nghttp2 client sessions and hand-made frames) and conch's
   own client are the peers; the server runs on a thread of its own. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <nghttp2/nghttp2.h>

#include "support.h" /* tests/server: h2_request, tcp_open, wait_closed */
#include "svc.h"

#define WAIT_MS 15000 /* generous: a loaded 2-core machine */

static const char unauthorized[] = "{\"code\":401,\"message\":\"no token\"}";

/* What the gate saw last (it runs on the server's thread). */
static atomic_int gate_runs;
static atomic_int last_passed = -2;
static atomic_long last_uid = -2;
static char last_authority[64];
static atomic_int packed_queued;

static int gate(const conch_server_request *req, conch_server_verdict *v,
                void *user_data) {
  const char *tok = conch_server_request_header(req, "x-access-token");
  (void)user_data;

  atomic_fetch_add(&gate_runs, 1);
  atomic_store(&last_passed, req->conn_passed);
  atomic_store(&last_uid, req->peer_uid);
  snprintf(last_authority, sizeof(last_authority), "%s",
           req->authority != NULL ? req->authority : "(none)");
  /* HTTP/1.1's Host arrives as the authority; an HTTP/2 client may send
     a Host header of its own beside :authority. */
  const char *host = conch_server_request_header(req, "host");
  if ((host != NULL && strncmp(host, "evil", 4) == 0) ||
      (req->authority != NULL && strncmp(req->authority, "evil", 4) == 0)) {
    static const char *const hdrs[] = {"x-why", "rebinding", NULL};
    v->reply.status = 403;
    v->reply.content_type = "text/plain; charset=utf-8";
    v->reply.body = "forbidden\n";
    v->reply.body_len = 10;
    v->reply.headers = hdrs;
    return 1;
  }
  if (conch_server_request_header(req, "x-refuse") != NULL) {
    v->code = CONCH_CODE_PERMISSION_DENIED;
    v->message = "refused by the gate";
    return 1;
  }
  if (strcmp(req->path, "/health") == 0) {
    return 0;
  }
  if (tok == NULL || strcmp(tok, "s3cret") != 0) {
    v->reply.status = 401;
    v->reply.content_type = "application/json";
    v->reply.body = unauthorized;
    v->reply.body_len = sizeof(unauthorized) - 1;
    return 1;
  }
  return 0;
}

static void health(const conch_server_request *req, conch_server_reply *r,
                   void *user_data) {
  (void)user_data;
  if (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0) {
    r->status = 204;
  } else {
    static const char *const allow[] = {"allow", "GET, HEAD", NULL};
    r->status = 405;
    r->headers = allow;
  }
}

/* /policy.Test/Packed: Unary's types; answers with a serialized Response
   (payload "packed") through conch_rpc_send_packed(). */
static void packed_call(conch_rpc *rpc, void *ud) { (void)rpc, (void)ud; }
static void packed_msg(conch_rpc *rpc, const ProtobufCMessage *m, void *ud) {
  Conchtest__V1__Response resp = CONCHTEST__V1__RESPONSE__INIT;
  uint8_t buf[64];
  size_t n;
  (void)m;
  (void)ud;
  resp.payload.data = (uint8_t *)"packed";
  resp.payload.len = 6;
  n = conchtest__v1__response__pack(&resp, buf);
  if (conch_rpc_send_packed(rpc, buf, n) == 0) {
    atomic_store(&packed_queued, (int)conch_rpc_queued(rpc));
  }
  (void)conch_rpc_finish(rpc, NULL);
}
static const conch_method m_packed = {
    "/policy.Test/Packed", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

static void start_with(fixture *fx, conch_server_opts *o, int use_unix) {
  const conch_server_handler ph = {packed_call, packed_msg, NULL, NULL, NULL,
                                   NULL};
  fx_start(fx, o, use_unix);
  fx_pause(fx);
  assert_int_equal(conch_server_add_route(fx->s, "/health", health, NULL), 0);
  assert_int_equal(conch_server_add_route(fx->s, "/health", health, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_route(fx->s, SVC "Unary", health, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_method(fx->s, &m_packed, &ph, NULL), 0);
  fx_resume(fx);
}

static conch_server_opts *gated_opts(void) {
  conch_server_opts *o;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_gate(o, gate, NULL), 0);
  return o;
}

/* ---- Raw frames ------------------------------------------------------------- */

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static int frame_send(int fd, uint8_t type, uint8_t flags, uint32_t sid,
                      const void *p, size_t len) {
  uint8_t buf[9 + 16384];
  assert_true(len <= 16384);
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
  return send(fd, buf, 9 + len, MSG_NOSIGNAL) == (ssize_t)(9 + len) ? 0 : -1;
}

/* A connection that sent the preface and an empty SETTINGS. */
static int h2_bare(int port) {
  int fd = tcp_open(port);
  assert_true(fd >= 0);
  assert_int_equal(send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL),
                   (ssize_t)(sizeof(preface) - 1));
  assert_int_equal(frame_send(fd, 4, 0, 0, NULL, 0), 0);
  return fd;
}

/* The HPACK block of a POST to |path| with |ctype| and the token. */
static size_t request_block(const char *path, const char *ctype, uint8_t *out,
                            size_t cap) {
  nghttp2_hd_deflater *d;
  nghttp2_nv nv[6];
  const char *kv[] = {":method", "POST",     ":scheme",        "http",
                      ":path",   path,       ":authority",     "127.0.0.1",
                      "content-type", ctype, "x-access-token", "s3cret"};
  ssize_t n;

  for (size_t i = 0; i < 6; i++) {
    nv[i].name = (uint8_t *)kv[2 * i];
    nv[i].namelen = strlen(kv[2 * i]);
    nv[i].value = (uint8_t *)kv[2 * i + 1];
    nv[i].valuelen = strlen(kv[2 * i + 1]);
    nv[i].flags = NGHTTP2_NV_FLAG_NONE;
  }
  assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
  n = nghttp2_hd_deflate_hd(d, out, cap, nv, 6);
  nghttp2_hd_deflate_del(d);
  assert_true(n > 0);
  return (size_t)n;
}

/* Reads frames until a HEADERS (1) or RST_STREAM (3) for |sid|, or a
   GOAWAY (7) when |goaway|; returns its type, 0 when the connection
   closed, -1 when |ms| passed.  |status| gets a HEADERS frame's first
   byte of HPACK (":status" indexed: 0x88 is 200) when not NULL. */
static int wait_answer(int fd, uint32_t sid, int goaway, int ms,
                       uint8_t *hpack0) {
  static uint8_t buf[1 << 17];
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
      if ((id == sid && (buf[3] == 1 || buf[3] == 3)) ||
          (goaway && buf[3] == 7)) {
        if (hpack0 != NULL && buf[3] == 1 && len > 0) {
          *hpack0 = buf[9];
        }
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

/* Waits until |fd| got some bytes (the server's SETTINGS: it accepted). */
static void wait_served(int fd) {
  struct pollfd pfd = {fd, POLLIN, 0};
  assert_int_equal(poll(&pfd, 1, WAIT_MS), 1);
}

/* ---- The gate and routes ---------------------------------------------------- */

static void test_gate(void **state) {
  static const char *const proto[] = {"content-type", "application/proto",
                                      NULL};
  static const char *const good[] = {"content-type", "application/proto",
                                     "x-access-token", "s3cret", NULL};
  static const char *const grpc_refused[] = {
      "content-type", "application/grpc", "te", "trailers", "x-refuse", "1",
      NULL};
  static const char *const connect_refused[] = {
      "content-type", "application/json", "x-refuse", "1", NULL};
  static const char *const evil[] = {"content-type", "application/proto",
                                     "x-access-token", "s3cret", "host",
                                     "evil.example", NULL};
  conch_server_opts *o = gated_opts();
  fixture fx;
  h2_resp r;
  int port;
  (void)state;

  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  /* No token: refused before the method is known, unknown paths too. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", proto, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 401);
  assert_string_equal(r.ctype, "application/json");
  assert_int_equal(r.len, sizeof(unauthorized) - 1);
  assert_memory_equal(r.body, unauthorized, r.len);
  assert_int_equal(atomic_load(&last_passed), 0);
  assert_int_equal(atomic_load(&last_uid), -1);
  assert_string_equal(last_authority, "127.0.0.1");
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", "/no.Such/Method", proto, NULL, 0,
                              &r),
                   0);
  assert_int_equal(r.status, 401);
  h2_resp_free(&r);

  /* The token: the method answers (an empty Request is a valid one);
     an unknown method is now 404. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", good, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/proto");
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", "/no.Such/Method", good, NULL, 0,
                              &r),
                   0);
  assert_int_equal(r.status, 404);
  h2_resp_free(&r);

  /* A plain answer with headers of the gate's own. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", evil, NULL, 0, &r),
                   0);
  assert_int_equal(r.status, 403);
  assert_string_equal(r.ctype, "text/plain; charset=utf-8");
  assert_non_null(strstr(r.extra, "x-why: rebinding\n"));
  assert_int_equal(r.len, 10);
  h2_resp_free(&r);

  /* A refusal with a code, in the request's protocol. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc_refused, NULL, 0,
                              &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.extra, "grpc-status: 7\n"));
  assert_non_null(strstr(r.extra, "grpc-message: refused by the gate\n"));
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", connect_refused,
                              (const uint8_t *)"{}", 2, &r),
                   0);
  assert_int_equal(r.status, 403);
  assert_non_null(strstr((const char *)r.body, "permission_denied"));
  assert_non_null(strstr((const char *)r.body, "refused by the gate"));
  h2_resp_free(&r);

  /* The route: through the gate, no token needed, any method. */
  assert_int_equal(h2_request(port, "GET", "/health", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 204);
  assert_int_equal(r.len, 0);
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "HEAD", "/health", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 204);
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", "/health", proto, NULL, 0, &r), 0);
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.extra, "allow: GET, HEAD\n"));
  h2_resp_free(&r);

  /* conn_passed: a route does not pass the connection, a method does. */
  {
    h2_conn *c;
    h2_resp r1, r2, r3;
    assert_int_equal(h2_open(&c, port), 0);
    assert_true(h2_submit(c, "GET", "/health", NULL, NULL, 0, &r1) > 0);
    assert_int_equal(h2_run(c, WAIT_MS), 0);
    assert_int_equal(atomic_load(&last_passed), 0);
    assert_true(h2_submit(c, "POST", SVC "Unary", good, NULL, 0, &r2) > 0);
    assert_int_equal(h2_run(c, WAIT_MS), 0);
    assert_int_equal(atomic_load(&last_passed), 0);
    assert_true(h2_submit(c, "POST", SVC "Unary", proto, NULL, 0, &r3) > 0);
    assert_int_equal(h2_run(c, WAIT_MS), 0);
    assert_int_equal(atomic_load(&last_passed), 1);
    assert_int_equal(r3.status, 401);
    h2_resp_free(&r1);
    h2_resp_free(&r2);
    h2_resp_free(&r3);
    h2_close(c);
  }
  fx_stop(&fx);
}

/* Over a Unix socket the gate sees the peer's uid; conch's client takes a
   401 for unauthenticated; send_packed goes out in either codec. */
static void test_gate_unix_and_packed(void **state) {
  conch_server_opts *o = gated_opts();
  fixture fx;
  (void)state;

  start_with(&fx, o, 1);
  conch_server_opts_free(o);
  for (int json = 0; json < 2; json++) {
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call_opts co = CONCH_CALL_OPTS_INIT;
    conch_client_opts *copts;
    conch_client *c;
    conch_metadata *md;
    ProtobufCMessage *out = NULL;
    conch_status st;

    assert_int_equal(conch_client_opts_new(&copts), 0);
    assert_int_equal(conch_client_opts_set_codec(
                         copts, json ? CONCH_CODEC_JSON : CONCH_CODEC_PROTO),
                     0);
    assert_int_equal(conch_client_new(&c, fx.url, copts), 0);
    conch_client_opts_free(copts);
    conch_status_init(&st);
    assert_int_not_equal(
        conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL),
        0);
    assert_int_equal(st.code, CONCH_CODE_UNAUTHENTICATED);
    assert_int_equal(atomic_load(&last_uid), (long)getuid());
    conch_status_clear(&st);

    assert_int_equal(conch_metadata_new(&md, NULL), 0);
    assert_int_equal(conch_metadata_add_str(md, "x-access-token", "s3cret"),
                     0);
    co.headers = md;
    conch_status_init(&st);
    atomic_store(&packed_queued, 0);
    assert_int_equal(
        conch_unary_sync(c, &m_packed, &co, &req.base, &out, &st, NULL, NULL),
        0);
    Conchtest__V1__Response *resp = (Conchtest__V1__Response *)out;
    assert_int_equal(resp->payload.len, 6);
    assert_memory_equal(resp->payload.data, "packed", 6);
    /* Connect unary: the body waits for the finish, all of it queued
       (8 proto bytes; the JSON form is longer). */
    assert_true(atomic_load(&packed_queued) >= 8);
    conch_message_free(c, out);
    conch_status_clear(&st);
    conch_metadata_free(md);
    conch_client_free(c);
  }
  fx_stop(&fx);
}

/* ---- Connections ------------------------------------------------------------ */

static atomic_int filter_runs;
static atomic_int filter_refuse;
static atomic_long filter_uid = -2;
static atomic_long filter_pid = -2;

static int filter(const conch_server_peer *p, void *user_data) {
  (void)user_data;
  atomic_fetch_add(&filter_runs, 1);
  atomic_store(&filter_uid, p->uid);
  atomic_store(&filter_pid, p->pid);
  return !atomic_load(&filter_refuse);
}

static void test_accept_filter(void **state) {
  conch_server_opts *o;
  fixture fx, fu;
  conch_client *c;
  int fd;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_accept_filter(o, filter, NULL), 0);
  fx_start(&fx, o, 0);
  fx_start(&fu, o, 1);
  conch_server_opts_free(o);

  atomic_store(&filter_refuse, 1);
  fd = tcp_open(conch_server_port(fx.s));
  assert_true(fd >= 0);
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  close(fd);
  assert_int_equal(atomic_load(&filter_uid), -1);

  atomic_store(&filter_refuse, 0);
  {
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call_opts co = CONCH_CALL_OPTS_INIT;
    ProtobufCMessage *out = NULL;
    conch_status st;
    assert_int_equal(conch_client_new(&c, fu.url, NULL), 0);
    conch_status_init(&st);
    assert_int_equal(
        conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL),
        0);
    conch_message_free(c, out);
    conch_status_clear(&st);
    conch_client_free(c);
    assert_int_equal(atomic_load(&filter_uid), (long)getuid());
    assert_int_equal(atomic_load(&filter_pid), (long)getpid());
  }
  fx_stop(&fx);
  fx_stop(&fu);
}

/* At the limit a newcomer takes the place of the oldest stranger; a
   connection that passed the gate keeps its place. */
static void test_max_conns(void **state) {
  static const char *const good[] = {"content-type", "application/proto",
                                     "x-access-token", "s3cret", NULL};
  conch_server_opts *o = gated_opts();
  fixture fx;
  h2_conn *a;
  h2_resp r;
  int port, b;
  (void)state;

  assert_int_equal(conch_server_opts_set_max_conns(o, 2), 0);
  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  assert_int_equal(h2_open(&a, port), 0);
  assert_true(h2_submit(a, "POST", SVC "Unary", good, NULL, 0, &r) > 0);
  assert_int_equal(h2_run(a, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
  b = h2_bare(port);
  wait_served(b);
  /* A third: b (a stranger) goes, a stays. */
  assert_int_equal(h2_request(port, "GET", "/health", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 204);
  h2_resp_free(&r);
  assert_int_equal(wait_closed(b, WAIT_MS), 1);
  close(b);
  assert_true(h2_submit(a, "POST", SVC "Unary", good, NULL, 0, &r) > 0);
  assert_int_equal(h2_run(a, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
  h2_close(a);
  fx_stop(&fx);
}

/* The header timeout: a stranger's connection and an open header block
   are cut off; a connection that passed the gate outlives it. */
static void test_header_timeout(void **state) {
  static const char *const good[] = {"content-type", "application/proto",
                                     "x-access-token", "s3cret", NULL};
  conch_server_opts *o = gated_opts();
  uint8_t block[256];
  size_t n = request_block(SVC "Unary", "application/proto", block,
                           sizeof(block));
  fixture fx;
  h2_conn *a;
  h2_resp r;
  long long t0;
  int port, fd;
  (void)state;

  assert_int_equal(conch_server_opts_set_header_timeout(o, 300), 0);
  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  t0 = conch_now_ms();
  fd = tcp_open(port); /* says nothing at all */
  assert_true(fd >= 0);
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  print_message("silent stranger closed after %lld ms\n", conch_now_ms() - t0);
  close(fd);

  t0 = conch_now_ms();
  fd = h2_bare(port); /* HEADERS without END_HEADERS, then nothing */
  assert_int_equal(frame_send(fd, 1, 0x1, 1, block, n), 0);
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  print_message("open header block closed after %lld ms\n",
                conch_now_ms() - t0);
  close(fd);

  /* A refused request does not keep a stranger's connection: the window
     is 0, so its 401 can never be sent, and still it goes. */
  {
    static const uint8_t no_window[6] = {0, 4, 0, 0, 0, 0};
    static const char *const kv[] = {":method", "POST", ":scheme", "http",
                                     ":path", SVC "Unary", ":authority",
                                     "127.0.0.1"};
    nghttp2_hd_deflater *d;
    nghttp2_nv nv[4];
    ssize_t bn;
    for (size_t i = 0; i < 4; i++) {
      nv[i].name = (uint8_t *)kv[2 * i];
      nv[i].namelen = strlen(kv[2 * i]);
      nv[i].value = (uint8_t *)kv[2 * i + 1];
      nv[i].valuelen = strlen(kv[2 * i + 1]);
      nv[i].flags = NGHTTP2_NV_FLAG_NONE;
    }
    assert_int_equal(nghttp2_hd_deflate_new(&d, 4096), 0);
    bn = nghttp2_hd_deflate_hd(d, block, sizeof(block), nv, 4);
    nghttp2_hd_deflate_del(d);
    assert_true(bn > 0);
    fd = tcp_open(port);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL),
                     (ssize_t)(sizeof(preface) - 1));
    assert_int_equal(frame_send(fd, 4, 0, 0, no_window, sizeof(no_window)),
                     0);
    assert_int_equal(frame_send(fd, 1, 0x5, 1, block, (size_t)bn), 0);
    assert_int_equal(wait_closed(fd, WAIT_MS), 1);
    close(fd);
  }

  /* Passed the gate: the header timeout is no idle limit for it. */
  assert_int_equal(h2_open(&a, port), 0);
  assert_true(h2_submit(a, "POST", SVC "Unary", good, NULL, 0, &r) > 0);
  assert_int_equal(h2_run(a, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
  h2_run(a, 1200); /* four header timeouts (and the close delay) */
  assert_true(h2_submit(a, "POST", SVC "Unary", good, NULL, 0, &r) > 0);
  assert_int_equal(h2_run(a, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
  h2_close(a);
  fx_stop(&fx);
}

/* The body timeout: a unary request whose body never ends is answered
   deadline_exceeded (HTTP 504 in Connect), a client-stream message that
   stalls halfway too (gRPC: a HEADERS frame with the trailers). */
static void test_body_timeout(void **state) {
  conch_server_opts *o = gated_opts();
  uint8_t block[256];
  uint8_t h0 = 0;
  fixture fx;
  long long t0;
  size_t n;
  int port, fd;
  (void)state;

  assert_int_equal(conch_server_opts_set_body_timeout(o, 300), 0);
  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  n = request_block(SVC "Unary", "application/proto", block, sizeof(block));
  t0 = conch_now_ms();
  fd = h2_bare(port);
  assert_int_equal(frame_send(fd, 1, 0x4, 1, block, n), 0);
  assert_int_equal(frame_send(fd, 0, 0, 1, "\x0a", 1), 0);
  assert_int_equal(wait_answer(fd, 1, 0, WAIT_MS, &h0), 1);
  print_message("unary body answered after %lld ms\n", conch_now_ms() - t0);
  /* HPACK static table: 0x88 is ":status: 200"; a 504 is literal. */
  assert_int_not_equal(h0, 0x88);
  close(fd);

  n = request_block(SVC "ClientStream", "application/grpc", block,
                    sizeof(block));
  t0 = conch_now_ms();
  fd = h2_bare(port);
  assert_int_equal(frame_send(fd, 1, 0x4, 1, block, n), 0);
  /* One whole (empty) message, then the first bytes of the next. */
  assert_int_equal(frame_send(fd, 0, 0, 1, "\0\0\0\0\0\0\0\0\0\x10", 10), 0);
  assert_int_equal(wait_answer(fd, 1, 0, WAIT_MS, NULL), 1);
  print_message("client-stream message answered after %lld ms\n",
                conch_now_ms() - t0);
  close(fd);
  fx_stop(&fx);
}

/* Buffered request bytes: over the server's total the call ends
   (resource_exhausted: HTTP 429 in Connect); over a connection's share
   the connection ends (GOAWAY). */
static void test_buffer_limits(void **state) {
  static uint8_t chunk[16000];
  conch_server_opts *o = gated_opts();
  uint8_t block[256];
  fixture fx;
  size_t n;
  int port, fd;
  (void)state;

  assert_int_equal(conch_server_opts_set_buffer_limits(o, 40000, 20000), 0);
  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  n = request_block(SVC "Unary", "application/proto", block, sizeof(block));
  fd = h2_bare(port);
  assert_int_equal(frame_send(fd, 1, 0x4, 1, block, n), 0);
  for (int i = 0; i < 2; i++) {
    (void)frame_send(fd, 0, 0, 1, chunk, sizeof(chunk));
  }
  assert_int_equal(wait_answer(fd, 1, 0, WAIT_MS, NULL), 1);
  close(fd);
  fx_stop(&fx);

  o = gated_opts();
  assert_int_equal(conch_server_opts_set_buffer_limits(o, 20000, 0), 0);
  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);
  fd = h2_bare(port);
  assert_int_equal(frame_send(fd, 1, 0x4, 1, block, n), 0);
  assert_int_equal(frame_send(fd, 1, 0x4, 3, block, n), 0);
  (void)frame_send(fd, 0, 0, 1, chunk, sizeof(chunk));
  (void)frame_send(fd, 0, 0, 3, chunk, sizeof(chunk));
  assert_int_equal(wait_answer(fd, 0, 1, WAIT_MS, NULL), 7);
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  close(fd);
  fx_stop(&fx);
}

/* Out of descriptors: a client waiting in the backlog is accepted with the
   descriptor held in reserve and closed at once instead of hanging; once
   descriptors are back, the server serves again. */
static void test_emfile_shed(void **state) {
  struct rlimit old, low;
  struct sockaddr_in sa;
  int fill[256];
  size_t nfill = 0;
  int maxfd = 0, fd;
  DIR *d;
  struct dirent *e;
  fixture fx;
  h2_resp r;
  (void)state;

  fx_start(&fx, NULL, 0);
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
    /* valgrind keeps descriptors of its own up there and refuses. */
    print_message("cannot lower RLIMIT_NOFILE (%s): skipped\n",
                  strerror(errno));
    close(fd);
    fx_stop(&fx);
    skip();
  }
  /* Fill the gaps below: no descriptor is left for accept(). */
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
  assert_int_equal(wait_closed(fd, WAIT_MS), 1);
  close(fd);
  for (size_t i = 0; i < nfill; i++) {
    close(fill[i]);
  }
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  /* Served again once the listener's rest is over (a client that comes
     while the server still sheds is turned away too: try again). */
  {
    long long t0 = conch_now_ms();
    int rv;
    while ((rv = h2_request(conch_server_port(fx.s), "POST", SVC "Unary",
                            (const char *const[]){"content-type",
                                                  "application/proto", NULL},
                            NULL, 0, &r)) != 0 &&
           conch_now_ms() - t0 < WAIT_MS) {
      h2_resp_free(&r);
    }
    assert_int_equal(rv, 0);
  }
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);
  fx_stop(&fx);
}

/* The client shuts its write side after its request: it is still
   answered, and then the connection closes. */
static void test_half_close(void **state) {
  static const char *const proto[] = {"content-type", "application/proto",
                                      NULL};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  uint8_t body[64];
  size_t n;
  fixture fx;
  h2_conn *c;
  h2_resp r;
  (void)state;

  fx_start(&fx, NULL, 0);
  req.payload.data = (uint8_t *)"half";
  req.payload.len = 4;
  n = conchtest__v1__request__pack(&req, body);
  assert_int_equal(h2_open(&c, conch_server_port(fx.s)), 0);
  assert_true(h2_submit(c, "POST", SVC "Unary", proto, body, n, &r) > 0);
  assert_int_equal(h2_shutdown_write(c), 0);
  assert_int_equal(h2_run(c, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(r.body);
  assert_non_null(memmem(r.body, r.len, "half", 4));
  assert_int_equal(wait_closed(h2_fd(c), WAIT_MS), 1);
  h2_resp_free(&r);
  h2_close(c);
  fx_stop(&fx);
}

/* A low-water mark: a server stream queues far past the send buffer's
   default (its buffer never refuses), asks to hear when it is down to
   128 KiB, and on_send_ready comes then, once. */
#define FLOOD_MSG 65536
#define FLOOD_HIGH (1024 * 1024)
#define FLOOD_LOW (128 * 1024)
static atomic_int flood_sent, flood_ready;
static atomic_long flood_seen = -1;

static void flood_call(conch_rpc *rpc, void *ud) { (void)rpc, (void)ud; }
static void flood_half_close(conch_rpc *rpc, void *ud) {
  static uint8_t msg[FLOOD_MSG];
  (void)ud;
  while (conch_rpc_queued(rpc) <= FLOOD_HIGH) {
    assert_int_equal(conch_rpc_send_raw(rpc, msg, sizeof(msg)), 0);
    atomic_fetch_add(&flood_sent, 1);
  }
  assert_int_equal(conch_rpc_notify_drained(rpc, FLOOD_LOW), 0);
}
static void flood_ready_cb(conch_rpc *rpc, void *ud) {
  (void)ud;
  atomic_fetch_add(&flood_ready, 1);
  atomic_store(&flood_seen, (long)conch_rpc_queued(rpc));
  (void)conch_rpc_finish(rpc, NULL);
}

static void test_notify_drained(void **state) {
  static const char *const hdrs[] = {"content-type",
                                     "application/connect+proto", NULL};
  static const conch_method m_flood = {"/policy.Test/Flood",
                                       CONCH_STREAM_SERVER, NULL, NULL,
                                       CONCH_IDEMPOTENCY_UNKNOWN};
  const conch_server_handler fh = {flood_call, NULL, NULL, flood_half_close,
                                   NULL, flood_ready_cb};
  conch_server_opts *o;
  fixture fx;
  h2_resp r;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_send_buffer(o, SIZE_MAX), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  fx_pause(&fx);
  assert_int_equal(conch_server_add_method(fx.s, &m_flood, &fh, NULL), 0);
  fx_resume(&fx);
  assert_int_equal(h2_request(conch_server_port(fx.s), "POST",
                              "/policy.Test/Flood", hdrs,
                              (const uint8_t *)"\0\0\0\0\0", 5, &r),
                   0);
  assert_int_equal(r.status, 200);
  print_message("flood: %d sent, %zu bytes received, ready %d at %ld\n",
                atomic_load(&flood_sent), r.len, atomic_load(&flood_ready),
                atomic_load(&flood_seen));
  assert_true(atomic_load(&flood_sent) >= FLOOD_HIGH / FLOOD_MSG);
  assert_int_equal(atomic_load(&flood_ready), 1);
  assert_true(atomic_load(&flood_seen) >= 0);
  assert_true(atomic_load(&flood_seen) <= FLOOD_LOW);
  /* Every message, then the end-stream message. */
  assert_true(r.len > (size_t)atomic_load(&flood_sent) * (5 + FLOOD_MSG));
  h2_resp_free(&r);
  fx_stop(&fx);
}

/* Answers as connect-go (and a Go mux before it) gives them: the path
   before the method before the content type, Allow and Accept-Post,
   charset=utf-8 echoed, connect-go's texts for bad timeouts, protocol
   versions and compressions, unimplemented for a unary request with zero
   or two messages (the request is handed over when it ended, as
   connect-go reads it), connect-go's decoding texts. */
static void connect_go_error(int port, const char *path,
                             const char *const *hdrs, const char *body,
                             int status, const char *code, const char *msg) {
  char c[64], m[256];
  h2_resp r;
  assert_int_equal(h2_request(port, "POST", path, hdrs, (const uint8_t *)body,
                              strlen(body), &r),
                   0);
  assert_int_equal(r.status, status);
  connect_error(&r, 0, c, sizeof(c), m, sizeof(m));
  assert_string_equal(c, code);
  if (strcmp(m, msg) != 0) {
    fail_msg("message \"%s\", not \"%s\"", m, msg);
  }
  h2_resp_free(&r);
}

static void test_connect_go_answers(void **state) {
  static const char *const xml[] = {"content-type", "text/xml", NULL};
  static const char *const proto[] = {"content-type", "application/proto",
                                      NULL};
  static const char *const utf8[] = {"content-type",
                                     "application/json; charset=utf-8", NULL};
  static const char *const latin1[] = {"content-type",
                                       "application/json; charset=latin1",
                                       NULL};
  static const char *const v2[] = {"content-type", "application/json",
                                   "connect-protocol-version", "2", NULL};
  static const char *const tmo_bad[] = {"content-type", "application/json",
                                        "connect-timeout-ms", "abc", NULL};
  static const char *const tmo_long[] = {"content-type", "application/json",
                                         "connect-timeout-ms", "12345678901",
                                         NULL};
  static const char *const tmo_zero[] = {"content-type", "application/json",
                                         "connect-timeout-ms", "0", NULL};
  static const char *const grpc_tmo[] = {"content-type", "application/grpc",
                                         "grpc-timeout", "1x", NULL};
  static const char *const grpc_lz4[] = {"content-type", "application/grpc",
                                         "grpc-encoding", "lz4", NULL};
  static const char *const grpc[] = {"content-type", "application/grpc", NULL};
  static const uint8_t two[10] = {0};
  fixture fx;
  h2_resp r;
  int port;
  (void)state;

  fx_start(&fx, NULL, 0);
  port = conch_server_port(fx.s);

  /* The path first: 404 whatever the method and content type. */
  assert_int_equal(h2_request(port, "PUT", "/no.Such/M", xml, NULL, 0, &r), 0);
  assert_int_equal(r.status, 404);
  assert_string_equal(r.ctype, "text/plain; charset=utf-8");
  assert_int_equal(r.len, 19);
  assert_memory_equal(r.body, "404 page not found\n", 19);
  h2_resp_free(&r);
  /* Then the method: 405 with what the method takes. */
  assert_int_equal(h2_request(port, "PUT", SVC "Unary", proto, NULL, 0, &r), 0);
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.extra, "allow: GET, POST\n"));
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(port, "GET", SVC "ServerStream", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.extra, "allow: POST\n"));
  h2_resp_free(&r);
  /* Then the content type: 415 with what the method's kind takes. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", xml, NULL, 0, &r), 0);
  assert_int_equal(r.status, 415);
  assert_non_null(strstr(r.extra, "accept-post: application/json, "
                                  "application/json; charset=utf-8, "
                                  "application/proto"));
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(port, "POST", SVC "ServerStream", proto, NULL, 0, &r), 0);
  assert_int_equal(r.status, 415);
  assert_non_null(strstr(r.extra, "accept-post: application/connect+json, "
                                  "application/connect+json; charset=utf-8, "
                                  "application/connect+proto"));
  h2_resp_free(&r);
  assert_int_equal(
      h2_request(port, "POST", SVC "Unary", latin1, (const uint8_t *)"{}", 2,
                 &r),
      0);
  assert_int_equal(r.status, 415);
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", utf8,
                              (const uint8_t *)"{}", 2, &r),
                   0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "application/json; charset=utf-8");
  h2_resp_free(&r);

  connect_go_error(port, SVC "Unary", v2, "{}", 400, "invalid_argument",
                   "connect-protocol-version must be \"1\": got \"2\"");
  connect_go_error(port, SVC "Unary", tmo_bad, "{}", 400, "invalid_argument",
                   "parse timeout: strconv.ParseInt: parsing \"abc\": "
                   "invalid syntax");
  connect_go_error(port, SVC "Unary", tmo_long, "{}", 400, "invalid_argument",
                   "parse timeout: \"12345678901\" has >10 digits");
  connect_go_error(port, SVC "Unary", tmo_zero, "{}", 504,
                   "deadline_exceeded", "context deadline exceeded");

  /* Decoding: connect-go's texts; proto3 strings must be UTF-8. */
  {
    static const char *const json[] = {"content-type", "application/json",
                                       NULL};
    connect_go_error(port, SVC "Unary", json, "", 400, "invalid_argument",
                     "unmarshal into conchtest.v1.Request: zero-length "
                     "payload is not a valid JSON object");
    connect_go_error(port, SVC "Unary", proto, "\xff\xff", 400,
                     "invalid_argument",
                     "unmarshal into conchtest.v1.Request: invalid "
                     "wire-format data");
    connect_go_error(port, SVC "Unary", proto, "\x2a\x03\x12\x01\xff", 400,
                     "invalid_argument",
                     "unmarshal into conchtest.v1.Request: proto: field "
                     "conchtest.v1.ErrorSpec.message contains invalid UTF-8");
    /* A NUL inside a string would cut the C string short without a word
       (a path, a command): refused, in proto and in JSON alike. */
    {
      static const uint8_t nul[] = {0x2a, 0x05, 0x12, 0x03, 'a', 0x00, 'b'};
      char c[64], m[256];
      assert_int_equal(h2_request(port, "POST", SVC "Unary", proto, nul,
                                  sizeof(nul), &r),
                       0);
      assert_int_equal(r.status, 400);
      connect_error(&r, 0, c, sizeof(c), m, sizeof(m));
      assert_string_equal(c, "invalid_argument");
      assert_string_equal(m, "unmarshal into conchtest.v1.Request: proto: "
                             "field conchtest.v1.ErrorSpec.message contains "
                             "a NUL byte, which this server cannot take in "
                             "a string");
      h2_resp_free(&r);
    }
    connect_go_error(port, SVC "Unary", json,
                     "{\"error\": {\"message\": \"a\\u0000b\"}}", 400,
                     "invalid_argument",
                     "unmarshal into conchtest.v1.Request: syntax error (line "
                     "1:32): \\u0000 is not allowed without JSON_ALLOW_NUL "
                     "near '\"a\\u0000b\"'");
  }

  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc_tmo, two, 5, &r),
                   0);
  assert_non_null(strstr(r.extra, "grpc-status: 3\n"));
  assert_non_null(strstr(r.extra, "grpc-message: malformed grpc-timeout: "));
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc_lz4, two, 5, &r),
                   0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  assert_non_null(strstr(r.extra, "supported encodings are gzip"));
  h2_resp_free(&r);
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc, NULL, 0, &r),
                   0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  assert_non_null(
      strstr(r.extra, "grpc-message: unary request has zero messages\n"));
  h2_resp_free(&r);
  /* Two: refused before the handler sees the first (it would answer). */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc, two, 10, &r),
                   0);
  assert_non_null(strstr(r.extra, "grpc-status: 12\n"));
  assert_non_null(
      strstr(r.extra, "grpc-message: unary request has multiple messages\n"));
  h2_resp_free(&r);
  /* The request ends inside a message. */
  assert_int_equal(h2_request(port, "POST", SVC "Unary", grpc, two, 7, &r),
                   0);
  assert_non_null(strstr(r.extra, "grpc-status: 3\n"));
  assert_non_null(
      strstr(r.extra, "grpc-message: protocol error: incomplete envelope\n"));
  h2_resp_free(&r);
  fx_stop(&fx);
}

/* compress_min: small messages go out plain, large ones compressed (a
   Connect unary response says so in Content-Encoding; a stream message in
   its envelope flags). */
static void test_compress_min(void **state) {
  static const char *const unary_hdrs[] = {"content-type", "application/proto",
                                           "accept-encoding", "gzip", NULL};
  static const char *const grpc_hdrs[] = {"content-type", "application/grpc",
                                          "grpc-accept-encoding", "gzip",
                                          NULL};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_server_opts *o;
  uint8_t body[64], env[69];
  size_t n;
  fixture fx;
  h2_resp r;
  int port;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_compress_min_bytes(o, 1024), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  for (int big = 0; big < 2; big++) {
    req.response_size = big ? 4000 : 100;
    n = conchtest__v1__request__pack(&req, body);
    assert_int_equal(
        h2_request(port, "POST", SVC "Unary", unary_hdrs, body, n, &r), 0);
    assert_int_equal(r.status, 200);
    if (big) {
      assert_non_null(strstr(r.extra, "content-encoding: gzip\n"));
      assert_true(r.len < 4000);
    } else {
      assert_null(strstr(r.extra, "content-encoding"));
      assert_true(r.len > 100);
    }
    h2_resp_free(&r);

    req.response_count = 1;
    n = conchtest__v1__request__pack(&req, env + 5);
    env[0] = 0;
    env[1] = env[2] = env[3] = 0;
    env[4] = (uint8_t)n;
    assert_int_equal(h2_request(port, "POST", SVC "ServerStream", grpc_hdrs,
                                env, 5 + n, &r),
                     0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.extra, "grpc-encoding: gzip\n"));
    assert_true(r.len > 5);
    assert_int_equal(r.body[0], big ? 1 : 0);
    h2_resp_free(&r);
    req.response_count = 0;
  }
  fx_stop(&fx);
}

/* Over HTTP/1.1 (bridged into the same dispatch) the gate and the plain
   routes answer alike: a stranger gets the gate's 401, /health its 204,
   and the token lets the call through. */
static void h1_exchange(int port, const char *req, char *out, size_t cap) {
  int fd = tcp_open(port);
  size_t have = 0;
  long long t0 = conch_now_ms();

  assert_true(fd >= 0);
  assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL),
                   (ssize_t)strlen(req));
  /* The answer, up to the end of its body (Content-Length) or EOF. */
  while (have < cap - 1 && conch_now_ms() - t0 < WAIT_MS) {
    struct pollfd pfd = {fd, POLLIN, 0};
    ssize_t n;
    const char *end, *cl;
    if (poll(&pfd, 1, 200) <= 0) {
      continue;
    }
    n = recv(fd, out + have, cap - 1 - have, 0);
    if (n <= 0) {
      break;
    }
    have += (size_t)n;
    out[have] = '\0';
    end = strstr(out, "\r\n\r\n");
    cl = strcasestr(out, "content-length: ");
    if (end != NULL && cl != NULL &&
        have >= (size_t)(end + 4 - out) + strtoul(cl + 16, NULL, 10)) {
      break;
    }
  }
  out[have] = '\0';
  close(fd);
}

static void test_gate_h1(void **state) {
  conch_server_opts *o = gated_opts();
  char out[4096];
  fixture fx;
  int port;
  (void)state;

  start_with(&fx, o, 0);
  conch_server_opts_free(o);
  port = conch_server_port(fx.s);

  h1_exchange(port,
              "POST " SVC "Unary HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
              out, sizeof(out));
  assert_true(strncmp(out, "HTTP/1.1 401", 12) == 0);
  assert_non_null(strstr(out, unauthorized));
  h1_exchange(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", out,
              sizeof(out));
  assert_true(strncmp(out, "HTTP/1.1 204", 12) == 0);
  h1_exchange(port,
              "POST " SVC "Unary HTTP/1.1\r\nHost: evil.example\r\n"
              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
              out, sizeof(out));
  assert_true(strncmp(out, "HTTP/1.1 403", 12) == 0);
  assert_non_null(strcasestr(out, "x-why: rebinding"));
  h1_exchange(port,
              "POST " SVC "Unary HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              "X-Access-Token: s3cret\r\n"
              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
              out, sizeof(out));
  assert_true(strncmp(out, "HTTP/1.1 200", 12) == 0);
  assert_string_equal(last_authority, "127.0.0.1");
  fx_stop(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gate),
      cmocka_unit_test(test_gate_unix_and_packed),
      cmocka_unit_test(test_accept_filter),
      cmocka_unit_test(test_max_conns),
      cmocka_unit_test(test_header_timeout),
      cmocka_unit_test(test_body_timeout),
      cmocka_unit_test(test_buffer_limits),
      cmocka_unit_test(test_emfile_shed),
      cmocka_unit_test(test_half_close),
      cmocka_unit_test(test_notify_drained),
      cmocka_unit_test(test_connect_go_answers),
      cmocka_unit_test(test_compress_min),
      cmocka_unit_test(test_gate_h1),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
