/* The server core (conch/server.h) serving conchtest.v1.TestService to
   conch's own client: every protocol and codec, the four stream kinds,
   metadata, errors with details, deadlines, cancellation, size limits,
   unknown methods and graceful shutdown.  The server runs on a thread of
   its own (conch_server_run); the client uses the blocking API on the
   test's thread.  Nothing sleeps to wait: conditions are polled. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "svc.h"
#include "wait.h"

/* ---- Client side ---------------------------------------------------------- */

typedef struct variant {
  conch_protocol proto;
  conch_codec codec;
  const char *comp; /* send compression */
} variant;

static const variant variants[] = {
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, "identity"},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON, "gzip"},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, "zstd"},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO, "identity"},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_JSON, "gzip"},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO, "br"},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO, "gzip"},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_JSON, "identity"},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO, "snappy"},
};
#define NVARIANTS (sizeof(variants) / sizeof(variants[0]))

static conch_client *client_for_accept(const fixture *fx, const variant *v,
                                       const char *accept) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
  assert_int_equal(conch_client_opts_set_send_compression_name(o, v->comp), 0);
  assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_2), 0);
  if (accept != NULL) {
    assert_int_equal(conch_client_opts_set_accept_compression(o, accept), 0);
  }
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static conch_client *client_for(const fixture *fx, const variant *v) {
  return client_for_accept(fx, v, NULL);
}

static const char *vname(const variant *v) {
  static char b[64];
  snprintf(b, sizeof(b), "%s/%s/%s",
           v->proto == CONCH_PROTOCOL_CONNECT ? "connect"
           : v->proto == CONCH_PROTOCOL_GRPC  ? "grpc"
                                              : "grpc-web",
           v->codec == CONCH_CODEC_JSON ? "json" : "proto", v->comp);
  return b;
}

static void unary_ok(const fixture *fx, const variant *v) {
  conch_client *c = client_for(fx, v);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__Header h = CONCHTEST__V1__HEADER__INIT, t = h;
  Conchtest__V1__Header *hp = &h, *tp = &t;
  ProtobufCBinaryData hv = {2, (uint8_t *)"h1"}, tv = {3, (uint8_t *)"\x00\x01\x02"};
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md, *rh, *rt;
  ProtobufCMessage *out = NULL;
  conch_status st;
  uint8_t payload[3000];

  for (size_t i = 0; i < sizeof(payload); i++) {
    payload[i] = (uint8_t)(i % 13);
  }
  req.payload.data = payload;
  req.payload.len = sizeof(payload);
  h.name = "x-resp";
  h.n_values = 1;
  h.values = &hv;
  t.name = "x-trl-bin";
  t.n_values = 1;
  t.values = &tv;
  req.n_response_headers = 1;
  req.response_headers = &hp;
  req.n_response_trailers = 1;
  req.response_trailers = &tp;
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-echo", "hello"), 0);
  assert_int_equal(conch_metadata_new(&rh, NULL), 0);
  assert_int_equal(conch_metadata_new(&rt, NULL), 0);
  co.headers = md;
  co.timeout_ms = 60000;
  conch_status_init(&st);
  int rv = conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, rh, rt);
  if (rv != 0) {
    fail_msg("%s: %s", vname(v), conch_status_message(&st));
  }
  Conchtest__V1__Response *r = (Conchtest__V1__Response *)out;
  assert_int_equal(r->payload.len, sizeof(payload));
  assert_memory_equal(r->payload.data, payload, sizeof(payload));
  assert_int_equal(r->n_request_headers, 1);
  assert_string_equal(r->request_headers[0]->name, "x-echo");
  assert_memory_equal(r->request_headers[0]->values[0].data, "hello", 5);
  assert_true(r->timeout_ms > 50000 && r->timeout_ms <= 60000);
  assert_string_equal(conch_metadata_get(rh, "x-resp", NULL), "h1");
  size_t tl = 0;
  const char *tval = conch_metadata_get(rt, "x-trl-bin", &tl);
  assert_non_null(tval);
  assert_int_equal(tl, 3);
  assert_memory_equal(tval, "\x00\x01\x02", 3);
  conch_message_free(c, out);
  conch_metadata_free(md);
  conch_metadata_free(rh);
  conch_metadata_free(rt);
  conch_status_clear(&st);
  conch_client_free(c);
}

static void server_stream_ok(const fixture *fx, const variant *v) {
  conch_client *c = client_for(fx, v);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *m;
  uint32_t n = 0;
  int rv;

  req.response_count = 5;
  req.response_size = 40000; /* past one DATA frame */
  assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call),
                   0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  while ((rv = conch_call_recv_sync(call, &m)) == 0) {
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->index, n);
    assert_int_equal(r->payload.len, 40000);
    assert_int_equal(r->payload.data[39999], (uint8_t)(39999 * 7));
    n++;
    conch_message_free(c, m);
  }
  if (rv != CONCH_ERR_EOF) {
    fail_msg("%s: %s", vname(v), conch_status_message(conch_call_status(call)));
  }
  assert_int_equal(n, 5);
  conch_call_free(call);
  conch_client_free(c);
}

static void client_stream_ok(const fixture *fx, const variant *v) {
  conch_client *c = client_for(fx, v);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *m;
  uint8_t buf[1000] = {0};

  req.payload.data = buf;
  assert_int_equal(conch_call_start(c, &m_cstream, NULL, NULL, NULL, &call),
                   0);
  for (int i = 0; i < 10; i++) {
    req.payload.len = 100 * (size_t)i;
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  if (conch_call_recv_sync(call, &m) != 0) {
    fail_msg("%s: %s", vname(v), conch_status_message(conch_call_status(call)));
  }
  Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
  assert_int_equal(r->message_count, 10);
  assert_int_equal(r->total_bytes, 4500);
  conch_message_free(c, m);
  assert_int_equal(conch_call_wait_sync(call), 0);
  conch_call_free(call);
  conch_client_free(c);
}

static void bidi_ok(const fixture *fx, const variant *v) {
  conch_client *c = client_for(fx, v);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *m;
  char text[32];

  assert_int_equal(conch_call_start(c, &m_bidi, NULL, NULL, NULL, &call), 0);
  for (uint32_t i = 0; i < 4; i++) { /* ping-pong: one answer per request */
    snprintf(text, sizeof(text), "ping %u", i);
    req.payload.data = (uint8_t *)text;
    req.payload.len = strlen(text);
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    if (conch_call_recv_sync(call, &m) != 0) {
      fail_msg("%s: %s", vname(v),
               conch_status_message(conch_call_status(call)));
    }
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->index, i);
    assert_int_equal(r->payload.len, strlen(text));
    assert_memory_equal(r->payload.data, text, strlen(text));
    conch_message_free(c, m);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), CONCH_ERR_EOF);
  conch_call_free(call);
  conch_client_free(c);
}

/* |close_first|: a bidi client half-closes before it reads (else the
   error comes while its request stream is still open). */
static void error_details(const fixture *fx, const variant *v,
                          const conch_method *method, int close_first) {
  conch_client *c = client_for(fx, v);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  Conchtest__V1__ErrorSpec e = CONCHTEST__V1__ERROR_SPEC__INIT;
  Conchtest__V1__ErrorDetail d = CONCHTEST__V1__ERROR_DETAIL__INIT;
  Conchtest__V1__ErrorDetail *dp = &d;
  conch_call *call;
  ProtobufCMessage *m;
  const conch_status *st;

  e.code = CONCH_CODE_FAILED_PRECONDITION;
  e.message = "not now: 100% busy\n";
  d.type = "type.googleapis.com/conchtest.v1.ErrorDetail";
  d.value.data = (uint8_t *)"\x0a\x03xyz";
  d.value.len = 5;
  e.n_details = 1;
  e.details = &dp;
  req.error = &e;
  req.response_count = 2;
  assert_int_equal(conch_call_start(c, method, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  if (method->kind == CONCH_STREAM_BIDI && close_first) {
    assert_int_equal(conch_call_close_send(call), 0);
  }
  int n = 0, rv;
  while ((rv = conch_call_recv_sync(call, &m)) == 0) {
    n++;
    conch_message_free(c, m);
  }
  assert_int_equal(rv, CONCH_ERR_RPC);
  assert_int_equal(n, method->kind == CONCH_STREAM_SERVER ? 2 : 0);
  st = conch_call_status(call);
  if (st->code != CONCH_CODE_FAILED_PRECONDITION) {
    fail_msg("%s %s: %d %s", vname(v), method->path, st->code,
             conch_status_message(st));
  }
  assert_int_equal(st->origin, CONCH_ORIGIN_SERVER);
  assert_string_equal(conch_status_message(st), "not now: 100% busy\n");
  assert_int_equal(st->ndetails, 1);
  assert_string_equal(st->details[0].type_url,
                      "type.googleapis.com/conchtest.v1.ErrorDetail");
  assert_int_equal(st->details[0].len, 5);
  assert_memory_equal(st->details[0].value, "\x0a\x03xyz", 5);
  conch_call_free(call);
  conch_client_free(c);
}

static void expect_code(const fixture *fx, const variant *v,
                        const conch_method *m, const conch_call_opts *co,
                        const Conchtest__V1__Request *req, conch_code want) {
  conch_client *c = client_for(fx, v);
  ProtobufCMessage *out = NULL;
  conch_status st;

  conch_status_init(&st);
  assert_int_equal(conch_unary_sync(c, m, co, &req->base, &out, &st, NULL,
                                    NULL),
                   CONCH_ERR_RPC);
  if (st.code != want) {
    fail_msg("%s %s: want %s, got %s: %s", vname(v), m->path,
             conch_code_name(want), conch_code_name(st.code),
             conch_status_message(&st));
  }
  conch_status_clear(&st);
  conch_client_free(c);
}

/* ---- Tests ---------------------------------------------------------------- */

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof(*fx));
  fx_start(fx, NULL, 0);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  fx_stop(fx);
  free(fx);
  return 0;
}

static int no_calls_left(void *arg) {
  fixture *fx = arg;
  return atomic_load(&fx->calls_live) == 0;
}

/* |check| in every variant. */
static void for_variants(void **state,
                         void (*check)(const fixture *, const variant *)) {
  for (size_t i = 0; i < NVARIANTS; i++) {
    check(*state, &variants[i]);
  }
}

static void test_unary(void **state) { for_variants(state, unary_ok); }

static void test_server_stream(void **state) {
  for_variants(state, server_stream_ok);
}

static void test_client_stream(void **state) {
  for_variants(state, client_stream_ok);
}

static void test_bidi(void **state) { for_variants(state, bidi_ok); }

static void test_error_details(void **state) {
  for (size_t i = 0; i < NVARIANTS; i++) {
    error_details(*state, &variants[i], &m_unary, 0);
    error_details(*state, &variants[i], &m_sstream, 0);
    error_details(*state, &variants[i], &m_bidi, 1);
    error_details(*state, &variants[i], &m_bidi, 0);
  }
  assert_true(conch_wait_until(no_calls_left, *state, CONCH_WAIT_MS));
}

static void test_unknown_method(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  for (size_t i = 0; i < NVARIANTS; i++) {
    expect_code(*state, &variants[i], &m_unimpl, NULL, &req,
                CONCH_CODE_UNIMPLEMENTED);
  }
}

/* Many methods (the lookup is a hash of the paths): registered while the
   server serves nothing, unary and bidi, each call reaches its own handler (the raw
   response is the index it was registered with), the old methods still
   work, a path registered already is refused, and paths next to the
   registered ones are unknown. */
#define MANY 300

static void many_half_close(conch_rpc *rpc, void *user_data) {
  char b[16];
  int n = snprintf(b, sizeof(b), "%d", (int)(intptr_t)user_data);
  if (conch_rpc_send_raw(rpc, b, (size_t)n) != 0 ||
      conch_rpc_finish(rpc, NULL) != 0) {
    conch_status st;
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    (void)conch_rpc_finish(rpc, &st);
  }
}

static void many_on_call(conch_rpc *rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
}

static void test_many_methods(void **state) {
  fixture *fx = *state;
  const conch_server_handler h = {.on_call = many_on_call,
                                  .on_half_close = many_half_close};
  static char paths[MANY][40];
  conch_method m = {0};
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;

  fx_pause(fx);
  for (int i = 0; i < MANY; i++) {
    snprintf(paths[i], sizeof(paths[i]), "/many.v1.Svc/M%d", i);
    m.path = paths[i];
    m.kind = i % 2 == 0 ? CONCH_STREAM_UNARY : CONCH_STREAM_BIDI;
    assert_int_equal(conch_server_add_method(fx->s, &m, &h,
                                             (void *)(intptr_t)i),
                     0);
  }
  m.path = paths[MANY / 2];
  assert_int_equal(conch_server_add_method(fx->s, &m, &h, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_method(fx->s, &m_unary, &h, NULL),
                   CONCH_ERR_INVALID);
  fx_resume(fx);

  for (size_t v = 0; v < NVARIANTS; v++) {
    conch_client *c = client_for(fx, &variants[v]);
    for (int i = (int)v; i < MANY; i += 37) {
      conch_call *call;
      const uint8_t *p;
      size_t n;
      char want[16];
      m.path = paths[i];
      m.kind = i % 2 == 0 ? CONCH_STREAM_UNARY : CONCH_STREAM_BIDI;
      assert_int_equal(conch_call_start(c, &m, NULL, NULL, NULL, &call), 0);
      assert_int_equal(conch_call_send_raw(call, "x", 1), 0);
      if (m.kind == CONCH_STREAM_BIDI) { /* a unary call's send ends it */
        assert_int_equal(conch_call_close_send(call), 0);
      }
      while (conch_call_recv_raw(call, &p, &n) == CONCH_ERR_AGAIN) {
        assert_int_equal(conch_client_run(c, 50), 0);
      }
      snprintf(want, sizeof(want), "%d", i);
      assert_int_equal(n, strlen(want));
      assert_memory_equal(p, want, n);
      assert_int_equal(conch_call_wait_sync(call), 0);
      conch_call_free(call);
    }
    conch_client_free(c);
  }
  unary_ok(fx, &variants[0]);
  {
    conch_method unknown = m_unary;
    unknown.path = "/many.v1.Svc/M300";
    expect_code(fx, &variants[3], &unknown, NULL, &req,
                CONCH_CODE_UNIMPLEMENTED);
    unknown.path = "/many.v1.Svc/M";
    expect_code(fx, &variants[3], &unknown, NULL, &req,
                CONCH_CODE_UNIMPLEMENTED);
  }
}

/* A registered compression on the server: requests in it are decoded,
   responses are sent in it, in every protocol and codec; a request in a
   custom compression the server does not know gets unimplemented. */
static void test_custom_compression(void **state) {
  static svc_xr_count srv, cli;
  conch_compressor xr = svc_xr_compressor(&srv);
  conch_server_opts *so;
  fixture fx;
  int id = -1;
  (void)state;

  assert_int_equal(conch_server_opts_new(&so), 0);
  assert_int_equal(conch_server_opts_add_compression(NULL, &xr, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_add_compression(so, &xr, &id), 0);
  assert_int_equal(id, CONCH_COMPRESSION_CUSTOM_FIRST);
  assert_int_equal(conch_server_opts_add_compression(so, &xr, NULL),
                   CONCH_ERR_INVALID); /* the name is taken */
  assert_int_equal(conch_server_opts_set_compression(so, "x-rev, gzip"), 0);
  /* Every response compressed, however small (the default leaves those
     under 1 KiB plain). */
  assert_int_equal(conch_server_opts_set_compress_min_bytes(so, 0), 0);
  fx_start(&fx, so, 0);
  conch_server_opts_free(so);

  for (size_t v = 0; v < NVARIANTS; v++) {
    for (int other = 0; other < 2; other++) {
      conch_compressor cx = svc_xr_compressor(&cli);
      Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
      ProtobufCMessage *out = NULL;
      conch_client_opts *o;
      conch_client *c;
      conch_status st;
      uint8_t payload[500];
      int c0 = atomic_load(&cli.comp), d0 = atomic_load(&cli.decomp);
      int sc0 = atomic_load(&srv.comp), sd0 = atomic_load(&srv.decomp);
      int rv;

      cx.name = other ? "x-other" : "x-rev";
      assert_int_equal(conch_client_opts_new(&o), 0);
      assert_int_equal(conch_client_opts_set_protocol(o, variants[v].proto), 0);
      assert_int_equal(conch_client_opts_set_codec(o, variants[v].codec), 0);
      assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_2), 0);
      assert_int_equal(conch_client_opts_add_compression(o, &cx, NULL), 0);
      assert_int_equal(conch_client_opts_set_send_compression_name(o, cx.name),
                       0);
      assert_int_equal(conch_client_new(&c, fx.url, o), 0);
      conch_client_opts_free(o);
      memset(payload, 'p', sizeof(payload));
      req.payload.data = payload;
      req.payload.len = sizeof(payload);
      conch_status_init(&st);
      rv = conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL,
                            NULL);
      if (other) {
        assert_int_equal(rv, CONCH_ERR_RPC);
        assert_int_equal(st.code, CONCH_CODE_UNIMPLEMENTED);
        assert_int_equal(atomic_load(&srv.decomp), sd0);
      } else {
        Conchtest__V1__Response *r = (Conchtest__V1__Response *)out;
        if (rv != 0) {
          fail_msg("%s: %s", vname(&variants[v]), conch_status_message(&st));
        }
        assert_int_equal(r->payload.len, sizeof(payload));
        assert_memory_equal(r->payload.data, payload, sizeof(payload));
        /* Each side compressed once and decoded what the other sent (the
           client in pull mode twice: on arrival, and at the recv). */
        assert_int_equal(atomic_load(&cli.comp), c0 + 1);
        assert_int_equal(atomic_load(&srv.decomp), sd0 + 1);
        assert_int_equal(atomic_load(&srv.comp), sc0 + 1);
        assert_true(atomic_load(&cli.decomp) > d0);
        conch_message_free(c, out);
      }
      conch_status_clear(&st);
      conch_client_free(c);
    }
  }
  fx_stop(&fx);
}

/* Pull mode: handlers with on_recv_ready take their requests with
   conch_rpc_recv() (typed client stream and unary; Connect unary too) or
   conch_rpc_recv_raw() (a raw bidi echo), in every protocol, codec and
   compression, and over HTTP/1.1; pause/resume are refused for them, and a handler with both
   on_recv_ready and on_message is refused. */
typedef struct pull_st {
  uint32_t count;
  uint64_t bytes;
} pull_st;

static atomic_int pull_pause_refused;

static void pull_end(conch_rpc *rpc, pull_st *st, int rv) {
  Conchtest__V1__Response r = CONCHTEST__V1__RESPONSE__INIT;
  conch_status bad;

  if (rv != CONCH_ERR_EOF) {
    conch_status_init(&bad);
    bad.code = CONCH_CODE_INTERNAL;
    (void)conch_rpc_finish(rpc, &bad);
  } else if (conch_rpc_method(rpc)->input == NULL) {
    (void)conch_rpc_finish(rpc, NULL);
  } else {
    r.message_count = st->count;
    r.total_bytes = st->bytes;
    if (conch_rpc_send(rpc, &r.base) != 0 ||
        conch_rpc_finish(rpc, NULL) != 0) {
      conch_status_init(&bad);
      bad.code = CONCH_CODE_INTERNAL;
      (void)conch_rpc_finish(rpc, &bad);
    }
  }
  free(st);
}

/* Takes what is there; AGAIN: on_recv_ready comes back here. */
static void pull_take_all(conch_rpc *rpc, void *user_data) {
  pull_st *st = conch_rpc_data(rpc);
  int rv;
  (void)user_data;

  for (;;) {
    if (conch_rpc_method(rpc)->input == NULL) {
      const uint8_t *p;
      size_t n;
      rv = conch_rpc_recv_raw(rpc, &p, &n);
      if (rv == 0 && conch_rpc_send_raw(rpc, p, n) != 0) {
        rv = CONCH_ERR_STATE;
      }
    } else {
      ProtobufCMessage *m;
      rv = conch_rpc_recv(rpc, &m);
      if (rv == 0) {
        st->count++;
        st->bytes += ((Conchtest__V1__Request *)m)->payload.len;
        conch_server_message_free(conch_rpc_server(rpc), m);
      }
    }
    if (rv == CONCH_ERR_AGAIN) {
      return;
    }
    if (rv != 0) {
      pull_end(rpc, st, rv);
      return;
    }
  }
}

static void pull_on_call(conch_rpc *rpc, void *user_data) {
  pull_st *st = calloc(1, sizeof(*st));
  if (conch_rpc_pause(rpc) == CONCH_ERR_STATE &&
      conch_rpc_resume(rpc) == CONCH_ERR_STATE) {
    atomic_fetch_add(&pull_pause_refused, 1);
  }
  conch_rpc_set_data(rpc, st);
  pull_take_all(rpc, user_data);
}

static void pull_on_cancel(conch_rpc *rpc, const conch_status *st,
                           void *user_data) {
  (void)st;
  (void)user_data;
  free(conch_rpc_data(rpc));
}

static const conch_method m_pull_cstream = {
    "/pull.v1.Svc/Count", CONCH_STREAM_CLIENT,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_pull_unary = {
    "/pull.v1.Svc/One", CONCH_STREAM_UNARY,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_pull_raw = {"/pull.v1.Svc/Raw", CONCH_STREAM_BIDI,
                                        NULL, NULL, CONCH_IDEMPOTENCY_UNKNOWN};

static void pull_never(conch_rpc *rpc, const ProtobufCMessage *m,
                       void *user_data) {
  (void)rpc;
  (void)m;
  (void)user_data;
  fail_msg("on_message of a refused handler ran");
}

static void test_pull(void **state) {
  fixture *fx = *state;
  conch_server_handler h = {.on_call = pull_on_call,
                            .on_cancel = pull_on_cancel,
                            .on_recv_ready = pull_take_all};
  conch_server_handler both = h;
  int calls = 0;

  both.on_message = pull_never;
  fx_pause(fx);
  assert_int_equal(conch_server_add_method(fx->s, &m_pull_cstream, &both, fx),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_add_method(fx->s, &m_pull_cstream, &h, fx), 0);
  assert_int_equal(conch_server_add_method(fx->s, &m_pull_unary, &h, fx), 0);
  assert_int_equal(conch_server_add_method(fx->s, &m_pull_raw, &h, fx), 0);
  fx_resume(fx);

  for (size_t v = 0; v < NVARIANTS; v++) {
    conch_client *c = client_for(fx, &variants[v]);
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    Conchtest__V1__Response *r;
    ProtobufCMessage *m;
    conch_call *call;
    conch_status st;
    static uint8_t buf[3000];

    /* A client stream of 30 messages, 0..2900 bytes. */
    req.payload.data = buf;
    assert_int_equal(
        conch_call_start(c, &m_pull_cstream, NULL, NULL, NULL, &call), 0);
    for (int i = 0; i < 30; i++) {
      req.payload.len = 100 * (size_t)i;
      assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    }
    assert_int_equal(conch_call_close_send(call), 0);
    if (conch_call_recv_sync(call, &m) != 0) {
      fail_msg("%s: %s", vname(&variants[v]),
               conch_status_message(conch_call_status(call)));
    }
    r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->message_count, 30);
    assert_int_equal(r->total_bytes, 43500);
    conch_message_free(c, m);
    assert_int_equal(conch_call_wait_sync(call), 0);
    conch_call_free(call);
    calls++;

    /* Unary (for Connect, the unary protocol). */
    req.payload.len = sizeof(buf);
    conch_status_init(&st);
    if (conch_unary_sync(c, &m_pull_unary, NULL, &req.base, &m, &st, NULL,
                         NULL) != 0) {
      fail_msg("%s: %s", vname(&variants[v]), conch_status_message(&st));
    }
    r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->message_count, 1);
    assert_int_equal(r->total_bytes, sizeof(buf));
    conch_message_free(c, m);
    conch_status_clear(&st);
    calls++;

    /* Raw bidi: each message echoed as it is taken. */
    assert_int_equal(conch_call_start(c, &m_pull_raw, NULL, NULL, NULL, &call),
                     0);
    for (int k = 0; k < 3; k++) {
      const uint8_t *p;
      size_t n;
      memset(buf, 'a' + k, 100);
      assert_int_equal(conch_call_send_raw(call, buf, 100 - (size_t)k), 0);
      while (conch_call_recv_raw(call, &p, &n) == CONCH_ERR_AGAIN) {
        assert_int_equal(conch_client_run(c, 50), 0);
      }
      assert_int_equal(n, 100 - (size_t)k);
      assert_memory_equal(p, buf, n);
    }
    assert_int_equal(conch_call_close_send(call), 0);
    assert_int_equal(conch_call_wait_sync(call), 0);
    conch_call_free(call);
    calls++;
    conch_client_free(c);
  }
  /* Over HTTP/1.1 (Connect and gRPC-Web): the same calls. */
  for (int w = 0; w < 2; w++) {
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    Conchtest__V1__Response *r;
    ProtobufCMessage *m;
    conch_client_opts *o;
    conch_client *c;
    conch_call *call;
    conch_status st;
    static uint8_t buf[3000];

    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_protocol(
                         o, w == 0 ? CONCH_PROTOCOL_CONNECT
                                   : CONCH_PROTOCOL_GRPC_WEB),
                     0);
    assert_int_equal(conch_client_opts_set_http_version(o, CONCH_HTTP_1_1), 0);
    assert_int_equal(conch_client_new(&c, fx->url, o), 0);
    conch_client_opts_free(o);
    req.payload.data = buf;
    assert_int_equal(
        conch_call_start(c, &m_pull_cstream, NULL, NULL, NULL, &call), 0);
    for (int i = 0; i < 30; i++) {
      req.payload.len = 100 * (size_t)i;
      assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    }
    assert_int_equal(conch_call_close_send(call), 0);
    if (conch_call_recv_sync(call, &m) != 0) {
      fail_msg("h1 %d: %s", w, conch_status_message(conch_call_status(call)));
    }
    r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->message_count, 30);
    assert_int_equal(r->total_bytes, 43500);
    conch_message_free(c, m);
    assert_int_equal(conch_call_wait_sync(call), 0);
    conch_call_free(call);
    calls++;
    req.payload.len = sizeof(buf);
    conch_status_init(&st);
    if (conch_unary_sync(c, &m_pull_unary, NULL, &req.base, &m, &st, NULL,
                         NULL) != 0) {
      fail_msg("h1 %d: %s", w, conch_status_message(&st));
    }
    r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->message_count, 1);
    assert_int_equal(r->total_bytes, sizeof(buf));
    conch_message_free(c, m);
    conch_status_clear(&st);
    calls++;
    conch_client_free(c);
  }
  assert_int_equal(atomic_load(&pull_pause_refused), calls);
}

/* Pull mode holds its client back: a handler that takes nothing leaves
   the bytes after the first message unacknowledged, so the client's sends
   block; once it takes them (here from the test's thread, the server's
   thread stopped), everything arrives. */
static atomic_int lazy_go;
static conch_rpc *_Atomic lazy_rpc;

static void lazy_ready(conch_rpc *rpc, void *user_data) {
  if (!atomic_load(&lazy_go)) {
    atomic_store(&lazy_rpc, rpc); /* owed no more on_recv_ready: it waits */
    return;
  }
  pull_take_all(rpc, user_data);
}

static void lazy_on_call(conch_rpc *rpc, void *user_data) {
  conch_rpc_set_data(rpc, calloc(1, sizeof(pull_st)));
  lazy_ready(rpc, user_data);
}

static void test_pull_backpressure(void **state) {
  fixture *fx = *state;
  const conch_server_handler h = {.on_call = lazy_on_call,
                                  .on_cancel = pull_on_cancel,
                                  .on_recv_ready = lazy_ready};
  static const conch_method m_lazy = {
      "/pull.v1.Svc/Lazy", CONCH_STREAM_CLIENT,
      &conchtest__v1__request__descriptor,
      &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};

  fx_pause(fx);
  assert_int_equal(conch_server_add_method(fx->s, &m_lazy, &h, fx), 0);
  fx_resume(fx);
  for (size_t i = 0; i < NVARIANTS; i++) {
    if (strcmp(variants[i].comp, "identity") != 0) {
      continue; /* compressed, the zeros would never fill a window */
    }
    conch_client *c = client_for_accept(fx, &variants[i], "");
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    static uint8_t chunk[10000];
    conch_call *call;
    ProtobufCMessage *m;
    int sent = 0, blocked = 0, rv;

    atomic_store(&lazy_go, 0);
    atomic_store(&lazy_rpc, NULL);
    assert_int_equal(conch_call_start(c, &m_lazy, NULL, NULL, NULL, &call), 0);
    req.payload.data = chunk;
    req.payload.len = sizeof(chunk);
    long long end = conch_now_ms() + CONCH_WAIT_MS;
    while (sent < 400 && conch_now_ms() < end) {
      rv = conch_call_send(call, &req.base);
      if (rv == CONCH_ERR_AGAIN) {
        blocked = 1; /* the window and the client's buffer are full */
        break;
      }
      assert_int_equal(rv, 0);
      sent++;
      assert_int_equal(conch_client_run(c, 0), 0);
    }
    if (!blocked) {
      fail_msg("%s: sent %d, never blocked", vname(&variants[i]), sent);
    }
    /* The handler has the call and takes nothing. */
    end = conch_now_ms() + CONCH_WAIT_MS;
    while (atomic_load(&lazy_rpc) == NULL && conch_now_ms() < end) {
      assert_int_equal(conch_client_run(c, 20), 0);
    }
    assert_non_null(atomic_load(&lazy_rpc));
    fx_pause(fx);
    atomic_store(&lazy_go, 1);
    pull_take_all(atomic_load(&lazy_rpc), fx);
    fx_resume(fx);
    while (sent < 400) {
      assert_int_equal(conch_call_send_sync(call, &req.base), 0);
      sent++;
    }
    assert_int_equal(conch_call_close_send(call), 0);
    if (conch_call_recv_sync(call, &m) != 0) {
      fail_msg("%s: %s", vname(&variants[i]),
               conch_status_message(conch_call_status(call)));
    }
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->message_count, 400);
    assert_int_equal(r->total_bytes, 400 * sizeof(chunk));
    conch_message_free(c, m);
    assert_int_equal(conch_call_wait_sync(call), 0);
    conch_call_free(call);
    conch_client_free(c);
  }
}

typedef struct count_wait {
  fixture *fx;
  int want;
} count_wait;

static int cancels_reach(void *arg) {
  count_wait *w = arg;
  return atomic_load(&w->fx->cancels) >= w->want;
}

static int held_reach(void *arg) {
  count_wait *w = arg;
  return atomic_load(&w->fx->held) >= w->want;
}

/* The server's deadline: it answers deadline_exceeded before the client's
   own timer (given a grace period) and tells the handler. */
static void test_deadline(void **state) {
  fixture *fx = *state;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;

  req.delay_ms = 1; /* held */
  co.timeout_ms = 200;
  co.deadline_grace_ms = 30000;
  for (size_t i = 0; i < NVARIANTS; i += 3) {
    count_wait w = {fx, atomic_load(&fx->cancels) + 1};
    expect_code(fx, &variants[i], &m_unary, &co, &req,
                CONCH_CODE_DEADLINE_EXCEEDED);
    assert_true(conch_wait_until(cancels_reach, &w, CONCH_WAIT_MS));
    assert_int_equal(atomic_load(&fx->last_cancel_code),
                     CONCH_CODE_DEADLINE_EXCEEDED);
  }
  assert_int_equal(atomic_load(&fx->held), 0);
  assert_true(conch_wait_until(no_calls_left, fx, CONCH_WAIT_MS));
}

/* The client cancels: RST_STREAM reaches the handler as on_cancel. */
static void test_cancel(void **state) {
  fixture *fx = *state;
  for (size_t i = 0; i < NVARIANTS; i += 3) {
    conch_client *c = client_for(fx, &variants[i]);
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call *call;
    ProtobufCMessage *m;
    count_wait h = {fx, 1};
    count_wait w = {fx, atomic_load(&fx->cancels) + 1};

    req.delay_ms = 1;
    assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call),
                     0);
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    assert_int_equal(conch_call_recv_sync(call, &m), 0); /* the first one */
    conch_message_free(c, m);
    assert_true(conch_wait_until(held_reach, &h, CONCH_WAIT_MS));
    assert_int_equal(conch_call_cancel(call), 0);
    assert_int_equal(conch_call_wait_sync(call), CONCH_ERR_RPC);
    assert_int_equal(conch_call_status(call)->code, CONCH_CODE_CANCELED);
    assert_true(conch_wait_until(cancels_reach, &w, CONCH_WAIT_MS));
    assert_int_equal(atomic_load(&fx->last_cancel_code), CONCH_CODE_CANCELED);
    assert_int_equal(atomic_load(&fx->held), 0);
    conch_call_free(call);
    conch_client_free(c);
  }
  assert_true(conch_wait_until(no_calls_left, fx, CONCH_WAIT_MS));
}

static void test_too_big(void **state) {
  fixture fx;
  conch_server_opts *o;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  static uint8_t payload[70000];

  (void)state;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_recv_limit(o, 65536), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  req.payload.data = payload;
  req.payload.len = sizeof(payload);
  for (size_t i = 0; i < NVARIANTS; i++) {
    expect_code(&fx, &variants[i], &m_unary, NULL, &req,
                CONCH_CODE_RESOURCE_EXHAUSTED);
  }
  /* A compression bomb: small on the wire, over the limit inflated. */
  static uint8_t zeros[1 << 20];
  req.payload.data = zeros;
  req.payload.len = sizeof(zeros);
  expect_code(&fx, &variants[1], &m_unary, NULL, &req,
              CONCH_CODE_RESOURCE_EXHAUSTED);
  expect_code(&fx, &variants[6], &m_unary, NULL, &req,
              CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_true(conch_wait_until(no_calls_left, &fx, CONCH_WAIT_MS));
  fx_stop(&fx);
}

/* Connect GET: conch's client sends a side-effect-free unary call as GET
   when asked (the raw HTTP/2 tests in node/ check the method itself). */
static void test_connect_get(void **state) {
  for (size_t i = 0; i < 3; i++) { /* the Connect variants */
    conch_client *c = client_for(*state, &variants[i]);
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call_opts co = CONCH_CALL_OPTS_INIT;
    ProtobufCMessage *out = NULL;
    conch_status st;

    assert_int_equal(variants[i].proto, CONCH_PROTOCOL_CONNECT);
    co.http_get = 1;
    req.payload.data = (uint8_t *)"get me";
    req.payload.len = 6;
    conch_status_init(&st);
    if (conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL,
                         NULL) != 0) {
      fail_msg("%s: %s", vname(&variants[i]), conch_status_message(&st));
    }
    assert_memory_equal(((Conchtest__V1__Response *)out)->payload.data,
                        "get me", 6);
    conch_message_free(c, out);
    conch_client_free(c);
  }
}

/* A raw method: bytes pass through untouched in every protocol and codec
   (the codec only names the content type). */
static void test_raw(void **state) {
  for (size_t i = 0; i < NVARIANTS; i++) {
    conch_client *c = client_for(*state, &variants[i]);
    conch_call *call;
    const uint8_t *p;
    size_t n;
    uint8_t msg[100];

    assert_int_equal(conch_call_start(c, &m_raw, NULL, NULL, NULL, &call), 0);
    for (int k = 0; k < 3; k++) {
      for (size_t j = 0; j < sizeof(msg); j++) {
        msg[j] = (uint8_t)(j * (size_t)(k + 1));
      }
      assert_int_equal(conch_call_send_raw(call, msg, sizeof(msg) - (size_t)k),
                       0);
      while (conch_call_recv_raw(call, &p, &n) == CONCH_ERR_AGAIN) {
        assert_int_equal(conch_client_run(c, 50), 0);
      }
      assert_int_equal(n, sizeof(msg) - (size_t)k);
      assert_memory_equal(p, msg, n);
    }
    assert_int_equal(conch_call_send_raw(call, "", 0), 0); /* empty is fine */
    while (conch_call_recv_raw(call, &p, &n) == CONCH_ERR_AGAIN) {
      assert_int_equal(conch_client_run(c, 50), 0);
    }
    assert_int_equal(n, 0);
    assert_int_equal(conch_call_close_send(call), 0);
    assert_int_equal(conch_call_wait_sync(call), 0);
    conch_call_free(call);
    conch_client_free(c);
  }
}

/* Request headers over the server's limit: resource_exhausted, and the
   handler never sees the call. */
static void test_header_limit(void **state) {
  fixture fx;
  conch_server_opts *o;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  char big[3000];
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_max_header_list(o, 2048), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  memset(big, 'v', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-big", big), 0);
  co.headers = md;
  for (size_t i = 0; i < NVARIANTS; i += 3) {
    expect_code(&fx, &variants[i], &m_unary, &co, &req,
                CONCH_CODE_RESOURCE_EXHAUSTED);
  }
  conch_metadata_free(md);
  assert_int_equal(atomic_load(&fx.cancels), 0);
  fx_stop(&fx);
}

/* conch_rpc_pause(): the paused handler gets nothing more (svc.c checks
   at the release), the client's sends stop at the stream window, and
   after conch_rpc_resume() everything arrives. */
static void test_pause(void **state) {
  fixture *fx = *state;
  for (size_t i = 0; i < NVARIANTS; i++) {
    if (strcmp(variants[i].comp, "identity") != 0) {
      continue; /* compressed, the zeros would never fill a window */
    }
    conch_client *c = client_for_accept(fx, &variants[i], "");
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call *call;
    ProtobufCMessage *m;
    count_wait h = {fx, 1};
    static uint8_t chunk[10000];
    int sent = 0, blocked = 0, rv;

    assert_int_equal(conch_call_start(c, &m_cstream, NULL, NULL, NULL, &call),
                     0);
    req.delay_ms = 1;
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    /* The client must run for its request to go out. */
    long long until = conch_now_ms() + CONCH_WAIT_MS;
    while (!held_reach(&h) && conch_now_ms() < until) {
      assert_int_equal(conch_client_run(c, 20), 0);
    }
    assert_true(held_reach(&h));
    req.delay_ms = 0;
    req.payload.data = chunk;
    req.payload.len = sizeof(chunk);
    long long end = conch_now_ms() + CONCH_WAIT_MS;
    while (sent < 400 && conch_now_ms() < end) {
      rv = conch_call_send(call, &req.base);
      if (rv == CONCH_ERR_AGAIN) {
        blocked = 1; /* the window and the client's buffer are full */
        break;
      }
      assert_int_equal(rv, 0);
      sent++;
      assert_int_equal(conch_client_run(c, 0), 0);
    }
    if (!blocked) fail_msg("sent %d, never blocked", sent);
    assert_true(sent < 400);
    atomic_store(&fx->release, 1); /* svc.c resumes it */
    while (sent < 400) {
      assert_int_equal(conch_call_send_sync(call, &req.base), 0);
      sent++;
    }
    assert_int_equal(conch_call_close_send(call), 0);
    assert_int_equal(conch_call_recv_sync(call, &m), 0);
    Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
    assert_int_equal(r->message_count, 401);
    assert_int_equal(r->total_bytes, 400 * sizeof(chunk));
    conch_message_free(c, m);
    assert_int_equal(conch_call_wait_sync(call), 0);
    conch_call_free(call);
    conch_client_free(c);
  }
}

static int again_seen(void *arg) {
  return atomic_load(&((fixture *)arg)->again) > 0;
}

/* A client that does not read: the handler's sends are refused with
   CONCH_ERR_AGAIN once the send buffer is full, and on_send_ready resumes
   them as the client reads; nothing is lost or reordered. */
static void test_backpressure(void **state) {
  fixture *fx = *state;
  for (size_t i = 0; i < NVARIANTS; i++) {
    if (strcmp(variants[i].comp, "identity") != 0) {
      continue; /* compressed, the pattern shrinks to nothing */
    }
    conch_client *c = client_for_accept(fx, &variants[i], "");
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call *call;
    ProtobufCMessage *m;
    uint32_t n = 0;
    int rv;

    atomic_store(&fx->again, 0);
    req.response_count = 40;
    req.response_size = 200000; /* 8 MB in all, past every window */
    assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call),
                     0);
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    /* Drive the client without taking messages until the server holds
       back. */
    while (!again_seen(fx)) {
      assert_int_equal(conch_client_run(c, 50), 0);
    }
    while ((rv = conch_call_recv_sync(call, &m)) == 0) {
      Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
      assert_int_equal(r->index, n);
      assert_int_equal(r->payload.len, 200000);
      assert_int_equal(r->payload.data[123456], (uint8_t)(123456 * 7));
      n++;
      conch_message_free(c, m);
    }
    assert_int_equal(rv, CONCH_ERR_EOF);
    assert_int_equal(n, 40);
    conch_call_free(call);
    conch_client_free(c);
  }
}

static int shutdown_done(void *arg) {
  return atomic_load(&((fixture *)arg)->shutdown_done);
}

static int server_idle(void *arg) {
  return atomic_load(&((fixture *)arg)->idle);
}

/* GOAWAY with a call in flight: the call completes, new connections are
   refused, and the server ends up with no connection. */
static void test_graceful_shutdown(void **state) {
  fixture fx;
  (void)state;

  fx_start(&fx, NULL, 1); /* on a Unix socket */
  conch_client *c = client_for(&fx, &variants[3]);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *m;
  count_wait h = {&fx, 1};

  req.delay_ms = 1;
  assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), 0);
  conch_message_free(c, m);
  assert_true(conch_wait_until(held_reach, &h, CONCH_WAIT_MS));

  atomic_store(&fx.shutdown_req, 1);
  assert_true(conch_wait_until(shutdown_done, &fx, CONCH_WAIT_MS));
  assert_int_equal(atomic_load(&fx.idle), 0); /* the call holds it open */

  /* A new client cannot connect any more. */
  Conchtest__V1__Request r2 = CONCHTEST__V1__REQUEST__INIT;
  expect_code(&fx, &variants[0], &m_unary, NULL, &r2, CONCH_CODE_UNAVAILABLE);

  /* The call in flight still completes. */
  atomic_store(&fx.release, 1);
  assert_int_equal(conch_call_recv_sync(call, &m), 0);
  Conchtest__V1__Response *r = (Conchtest__V1__Response *)m;
  assert_int_equal(r->payload.len, 4);
  assert_memory_equal(r->payload.data, "late", 4);
  conch_message_free(c, m);
  assert_int_equal(conch_call_recv_sync(call, &m), CONCH_ERR_EOF);
  conch_call_free(call);
  assert_true(conch_wait_until(server_idle, &fx, CONCH_WAIT_MS));
  assert_int_equal(atomic_load(&fx.cancels), 0);
  conch_client_free(c);
  fx_stop(&fx);
}

/* A drain timeout: the call a handler holds past it ends with
   unavailable, for the handler and the client, and the server drains. */
static void test_drain_timeout(void **state) {
  fixture fx;
  conch_server_opts *o;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_drain_timeout(o, -1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_drain_timeout(o, 200), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  conch_client *c = client_for(&fx, &variants[6]); /* gRPC-Web */
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *m;
  count_wait h = {&fx, 1};
  count_wait w = {&fx, 1};

  req.delay_ms = 1;
  assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), 0);
  conch_message_free(c, m);
  assert_true(conch_wait_until(held_reach, &h, CONCH_WAIT_MS));
  atomic_store(&fx.shutdown_req, 1);
  assert_int_equal(conch_call_recv_sync(call, &m), CONCH_ERR_RPC);
  assert_int_equal(conch_call_status(call)->code, CONCH_CODE_UNAVAILABLE);
  assert_string_equal(conch_status_message(conch_call_status(call)),
                      "the server is shutting down");
  assert_true(conch_wait_until(cancels_reach, &w, CONCH_WAIT_MS));
  assert_int_equal(atomic_load(&fx.last_cancel_code), CONCH_CODE_UNAVAILABLE);
  conch_call_free(call);
  assert_true(conch_wait_until(server_idle, &fx, CONCH_WAIT_MS));
  conch_client_free(c);
  fx_stop(&fx);
}

/* What is not an RPC this server serves: wrong content type, a Connect
   streaming content type for a unary method.  Read by the client as the
   HTTP status maps (415: unknown for Connect, internal for gRPC). */
static void test_unary_refuses_stream_kind(void **state) {
  fixture *fx = *state;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_method wrong = m_unary;
  /* A client that thinks Unary is server-streaming speaks Connect
     streaming to it: 415. */
  wrong.kind = CONCH_STREAM_SERVER;
  conch_client *c = client_for(fx, &variants[0]);
  conch_call *call;
  ProtobufCMessage *m;
  assert_int_equal(conch_call_start(c, &wrong, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), CONCH_ERR_RPC);
  assert_int_equal(conch_call_status(call)->http_status, 415);
  conch_call_free(call);
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unary, setup, teardown),
      cmocka_unit_test_setup_teardown(test_server_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_client_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bidi, setup, teardown),
      cmocka_unit_test_setup_teardown(test_error_details, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_method, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many_methods, setup, teardown),
      cmocka_unit_test(test_custom_compression),
      cmocka_unit_test_setup_teardown(test_pull, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pull_backpressure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_backpressure, setup, teardown),
      cmocka_unit_test_setup_teardown(test_connect_get, setup, teardown),
      cmocka_unit_test_setup_teardown(test_raw, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pause, setup, teardown),
      cmocka_unit_test(test_header_limit),
      cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unary_refuses_stream_kind, setup,
                                      teardown),
      cmocka_unit_test(test_too_big),
      cmocka_unit_test(test_graceful_shutdown),
      cmocka_unit_test(test_drain_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
