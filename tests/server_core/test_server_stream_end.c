/* A server stream that ends early must not say OK (conch/server.h,
   "Streams that end early"):

   - a handler that sends 100,000 responses in a loop, stops at the first
     CONCH_ERR_AGAIN and finishes OK: the client gets internal, not OK;
   - the same handler after waiting for on_send_ready and sending the
     refused response again: all 100,000, then OK;
   - a source (conch_rpc_send_from()): all 100,000 arrive in order, then
     OK, with at most the send buffer queued; a bidi source that waits for
     requests (conch_rpc_wake()); what a source may not do.

   conch's own client is the peer, in several protocols; the server runs
   on a thread of its own (svc.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "svc.h"

#define COUNT 100000

static const conch_method m_naive = {
    "/streamend.Test/Naive", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_careful = {
    "/streamend.Test/Careful", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_source = {
    "/streamend.Test/Source", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_echo = {"/streamend.Test/Echo", CONCH_STREAM_BIDI,
                                    &conchtest__v1__request__descriptor,
                                    &conchtest__v1__response__descriptor,
                                    CONCH_IDEMPOTENCY_UNKNOWN};

/* What the handlers saw (they run on the server's thread). */
static atomic_int refusals;       /* CONCH_ERR_AGAIN from conch_rpc_send() */
static atomic_int send_while_src; /* conch_rpc_send() during a source */
static atomic_size_t most_queued; /* conch_rpc_queued() seen by a source */
static atomic_int sources_freed;

/* One stream's state: the responses to send and the one being sent. */
typedef struct stream {
  uint32_t count;
  uint32_t next;
  Conchtest__V1__Response resp;
  /* Echo: requests received and not answered yet, and the end. */
  uint32_t pending;
  int ended;
} stream;

static stream *stream_new(uint32_t count) {
  stream *st = calloc(1, sizeof(*st));
  Conchtest__V1__Response init = CONCHTEST__V1__RESPONSE__INIT;
  assert_non_null(st);
  st->resp = init;
  st->count = count;
  return st;
}

static void stream_free(conch_rpc *rpc) {
  free(conch_rpc_data(rpc));
  conch_rpc_set_data(rpc, NULL);
  atomic_fetch_add(&sources_freed, 1);
}

static void on_call(conch_rpc *rpc, void *ud) {
  (void)ud;
  conch_rpc_set_data(rpc, NULL);
}

static void on_cancel(conch_rpc *rpc, const conch_status *st, void *ud) {
  (void)st;
  (void)ud;
  if (conch_rpc_data(rpc) != NULL) {
    stream_free(rpc);
  }
}

static uint32_t requested(const ProtobufCMessage *msg) {
  return ((const Conchtest__V1__Request *)msg)->response_count;
}

/* The footgun: a loop that stops at the first refusal and finishes. */
static void naive_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                          void *ud) {
  Conchtest__V1__Response r = CONCHTEST__V1__RESPONSE__INIT;
  uint32_t n = requested(msg);
  (void)ud;

  for (uint32_t i = 0; i < n; i++) {
    r.index = i;
    if (conch_rpc_send(rpc, &r.base) != 0) {
      atomic_fetch_add(&refusals, 1);
      break;
    }
  }
  (void)conch_rpc_finish(rpc, NULL);
}

/* Sending by hand, done right: on a refusal, wait for on_send_ready and
   send the same response again. */
static void careful_pump(conch_rpc *rpc) {
  stream *st = conch_rpc_data(rpc);

  while (st->next < st->count) {
    st->resp.index = st->next;
    if (conch_rpc_send(rpc, &st->resp.base) != 0) {
      return; /* CONCH_ERR_AGAIN: on_send_ready follows */
    }
    st->next++;
  }
  stream_free(rpc);
  assert_int_equal(conch_rpc_finish(rpc, NULL), 0);
}

static void careful_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                            void *ud) {
  (void)ud;
  conch_rpc_set_data(rpc, stream_new(requested(msg)));
  careful_pump(rpc);
}

static void careful_ready(conch_rpc *rpc, void *ud) {
  (void)ud;
  careful_pump(rpc);
}

/* A source: the server asks for each response as there is room. */
static const ProtobufCMessage *count_next(conch_rpc *rpc,
                                          const conch_rpc_source *src) {
  stream *st = src->user_data;
  size_t q = conch_rpc_queued(rpc);

  if (q > atomic_load(&most_queued)) {
    atomic_store(&most_queued, q);
  }
  if (st->next == st->count) {
    stream_free(rpc);
    assert_int_equal(conch_rpc_finish(rpc, NULL), 0);
    return NULL;
  }
  st->resp.index = st->next++;
  return &st->resp.base;
}

static void source_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                           void *ud) {
  Conchtest__V1__Response r = CONCHTEST__V1__RESPONSE__INIT;
  stream *st = stream_new(requested(msg));
  conch_rpc_source src = {count_next, st, NULL};
  (void)ud;

  conch_rpc_set_data(rpc, st);
  assert_int_equal(conch_rpc_send_from(rpc, &src), 0);
  assert_int_equal(conch_rpc_send_from(rpc, &src), CONCH_ERR_STATE);
  if (conch_rpc_send(rpc, &r.base) == CONCH_ERR_STATE) {
    atomic_fetch_add(&send_while_src, 1);
  }
}

/* Bidi: one response per request, as they come; the source waits between
   them, and the handler wakes it. */
static const ProtobufCMessage *echo_next(conch_rpc *rpc,
                                         const conch_rpc_source *src) {
  stream *st = src->user_data;

  if (st->pending == 0) {
    if (st->ended) {
      stream_free(rpc);
      assert_int_equal(conch_rpc_finish(rpc, NULL), 0);
    }
    return NULL; /* nothing now */
  }
  st->pending--;
  st->resp.index = st->next++;
  return &st->resp.base;
}

static void echo_call(conch_rpc *rpc, void *ud) {
  stream *st = stream_new(0);
  conch_rpc_source src = {echo_next, st, NULL};
  (void)ud;

  conch_rpc_set_data(rpc, st);
  assert_int_equal(conch_rpc_wake(rpc), CONCH_ERR_STATE); /* no source */
  assert_int_equal(conch_rpc_send_from(rpc, &src), 0);
}

static void echo_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                         void *ud) {
  stream *st = conch_rpc_data(rpc);
  (void)msg;
  (void)ud;
  st->pending++;
  assert_int_equal(conch_rpc_wake(rpc), 0);
}

static void echo_half_close(conch_rpc *rpc, void *ud) {
  stream *st = conch_rpc_data(rpc);
  (void)ud;
  st->ended = 1;
  assert_int_equal(conch_rpc_wake(rpc), 0);
}

/* What conch_rpc_send_from() refuses. */
static void refuse_call(conch_rpc *rpc, void *ud) {
  conch_rpc_source src = {count_next, NULL, NULL};
  conch_rpc_source none = {NULL, NULL, NULL};
  (void)ud;
  if (conch_rpc_send_from(NULL, &src) == CONCH_ERR_INVALID &&
      conch_rpc_send_from(rpc, NULL) == CONCH_ERR_INVALID &&
      conch_rpc_send_from(rpc, &none) == CONCH_ERR_INVALID &&
      conch_rpc_send_from(rpc, &src) == CONCH_ERR_INVALID /* unary */ &&
      conch_rpc_wake(NULL) == CONCH_ERR_INVALID) {
    conch_status st;
    conch_status_init(&st);
    st.code = CONCH_CODE_FAILED_PRECONDITION;
    st.message = "refused as it should be";
    (void)conch_rpc_finish(rpc, &st);
    return;
  }
  (void)conch_rpc_finish(rpc, NULL);
}

static const conch_method m_refuse = {
    "/streamend.Test/Refuse", CONCH_STREAM_UNARY,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

static int group_setup(void **state) {
  static fixture fx;
  const conch_server_handler naive = {on_call, naive_message, NULL,
                                      NULL,    on_cancel,     NULL};
  const conch_server_handler careful = {on_call,   careful_message, NULL, NULL,
                                        on_cancel, careful_ready};
  const conch_server_handler source = {on_call, source_message, NULL,
                                       NULL,    on_cancel,      NULL};
  const conch_server_handler echo = {echo_call,       echo_message, NULL,
                                     echo_half_close, on_cancel,    NULL};
  const conch_server_handler refuse = {refuse_call, NULL, NULL,
                                       NULL,        NULL, NULL};

  fx_start(&fx, NULL, 0);
  fx_pause(&fx);
  assert_int_equal(conch_server_add_method(fx.s, &m_naive, &naive, NULL), 0);
  assert_int_equal(conch_server_add_method(fx.s, &m_careful, &careful, NULL),
                   0);
  assert_int_equal(conch_server_add_method(fx.s, &m_source, &source, NULL), 0);
  assert_int_equal(conch_server_add_method(fx.s, &m_echo, &echo, NULL), 0);
  assert_int_equal(conch_server_add_method(fx.s, &m_refuse, &refuse, NULL), 0);
  fx_resume(&fx);
  *state = &fx;
  return 0;
}

static int group_teardown(void **state) {
  fx_stop(*state);
  return 0;
}

typedef struct variant {
  conch_protocol proto;
  conch_codec codec;
  const char *name;
} variant;

static const variant variants[] = {
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, "connect/proto"},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO, "grpc/proto"},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_JSON, "grpc-web/json"},
};

static conch_client *client_for(const fixture *fx, const variant *v) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

/* Calls |m| for |count| responses: how many arrived, in order (the index
   of each is checked), and the status. */
static uint32_t call_stream(const fixture *fx, const variant *v,
                            const conch_method *m, uint32_t count,
                            conch_code *code, char *msg, size_t msglen) {
  conch_client *c = client_for(fx, v);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_call *call;
  ProtobufCMessage *r;
  uint32_t n = 0;
  int rv;

  req.response_count = count;
  assert_int_equal(conch_call_start(c, m, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  while ((rv = conch_call_recv_sync(call, &r)) == 0) {
    assert_int_equal(((Conchtest__V1__Response *)r)->index, n);
    n++;
    conch_message_free(c, r);
  }
  /* The end: EOF after OK, CONCH_ERR_RPC after an error. */
  assert_true(rv == CONCH_ERR_EOF || rv == CONCH_ERR_RPC);
  *code = conch_call_status(call)->code;
  snprintf(msg, msglen, "%s", conch_status_message(conch_call_status(call)));
  conch_call_free(call);
  conch_client_free(c);
  return n;
}

/* The loop that stops at CONCH_ERR_AGAIN and finishes: the client learns
   that the stream was cut short. */
static void test_naive_loop_is_not_ok(void **state) {
  for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    conch_code code;
    char msg[512];
    int before = atomic_load(&refusals);
    uint32_t n = call_stream(*state, &variants[i], &m_naive, COUNT, &code, msg,
                             sizeof(msg));
    print_message("%s: %u of %u, then %s: %s\n", variants[i].name, n, COUNT,
                  conch_code_name(code), msg);
    assert_true(atomic_load(&refusals) > before); /* it did stop early */
    assert_true(n < COUNT);
    assert_int_equal(code, CONCH_CODE_INTERNAL);
    assert_non_null(strstr(msg, "CONCH_ERR_AGAIN"));
  }
}

static void test_careful_loop(void **state) {
  for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    conch_code code;
    char msg[512];
    uint32_t n = call_stream(*state, &variants[i], &m_careful, COUNT, &code,
                             msg, sizeof(msg));
    assert_int_equal(n, COUNT);
    assert_int_equal(code, CONCH_CODE_OK);
  }
}

static void test_source(void **state) {
  int freed = atomic_load(&sources_freed);
  for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    conch_code code;
    char msg[512];
    uint32_t n = call_stream(*state, &variants[i], &m_source, COUNT, &code, msg,
                             sizeof(msg));
    print_message("%s: %u of %u, then %s; at most %zu bytes queued\n",
                  variants[i].name, n, COUNT, conch_code_name(code),
                  (size_t)atomic_load(&most_queued));
    assert_int_equal(n, COUNT);
    assert_int_equal(code, CONCH_CODE_OK);
  }
  /* A source is asked only while the send buffer (256 KiB) has room. */
  assert_true(atomic_load(&most_queued) < 256 * 1024);
  assert_int_equal(atomic_load(&send_while_src), 3);
  assert_int_equal(atomic_load(&sources_freed) - freed, 3);
  {
    conch_code code;
    char msg[512];
    assert_int_equal(call_stream(*state, &variants[0], &m_source, 0, &code, msg,
                                 sizeof(msg)),
                     0);
    assert_int_equal(code, CONCH_CODE_OK);
  }
}

/* A bidi source answers each request as it comes, waiting between them. */
static void test_source_waits(void **state) {
  for (size_t i = 0; i < 2; i++) {
    conch_client *c = client_for(*state, &variants[i]);
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call *call;
    ProtobufCMessage *r;
    uint32_t n = 0;
    int rv;

    assert_int_equal(conch_call_start(c, &m_echo, NULL, NULL, NULL, &call), 0);
    for (uint32_t k = 0; k < 50; k++) {
      assert_int_equal(conch_call_send_sync(call, &req.base), 0);
      assert_int_equal(conch_call_recv_sync(call, &r), 0);
      assert_int_equal(((Conchtest__V1__Response *)r)->index, k);
      conch_message_free(c, r);
      n++;
    }
    assert_int_equal(conch_call_close_send(call), 0);
    rv = conch_call_recv_sync(call, &r);
    assert_int_equal(rv, CONCH_ERR_EOF);
    assert_int_equal(conch_call_status(call)->code, CONCH_CODE_OK);
    assert_int_equal(n, 50);
    conch_call_free(call);
    conch_client_free(c);
  }
}

static void test_source_refusals(void **state) {
  conch_client *c = client_for(*state, &variants[0]);
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  conch_status st;

  conch_status_init(&st);
  assert_int_equal(
      conch_unary_sync(c, &m_refuse, NULL, &req.base, &resp, &st, NULL, NULL),
      CONCH_ERR_RPC);
  assert_int_equal(st.code, CONCH_CODE_FAILED_PRECONDITION);
  conch_status_clear(&st);
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_naive_loop_is_not_ok),
      cmocka_unit_test(test_careful_loop),
      cmocka_unit_test(test_source),
      cmocka_unit_test(test_source_waits),
      cmocka_unit_test(test_source_refusals),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
