/* The generated SERVER stubs of tests/stubgen/proto/stubgen.proto (Echo)
   serving conch's own client, which calls through the generated CLIENT
   stubs: every stream kind, in Connect, gRPC and gRPC-Web (proto) and
   Connect JSON, an unset member answering unimplemented, an error status,
   and the registration's refusals.  The server runs on a thread of its
   own (conch_server_run); the client blocks on the test's thread. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stubgen.conch.h"

#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);    \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* ---- The server: Echo on the generated stubs ----------------------------- */

static void unary(Echo__Unary_Rpc rpc, const Ping *req, void *user_data) {
  Pong pong = PONG__INIT;
  atomic_int *served = user_data;

  pong.text = req->text;
  pong.method = "Unary";
  CHECK(echo__unary_rpc_send(rpc, &pong) == 0);
  CHECK(echo__unary_rpc_finish(rpc, NULL) == 0);
  atomic_fetch_add(served, 1);
}

static void server_stream(Echo__ServerStream_Rpc rpc, const Ping *req,
                          void *user_data) {
  Pong pong = PONG__INIT;
  uint32_t i;

  (void)user_data;
  pong.method = "ServerStream";
  pong.text = req->text;
  for (i = 0; i < req->count; i++) {
    pong.index = i;
    CHECK(echo__server_stream_rpc_send(rpc, &pong) == 0);
  }
  CHECK(echo__server_stream_rpc_finish(rpc, NULL) == 0);
}

/* Client streaming and bidi count their requests in the call's data. */
static uintptr_t seen_of(conch_rpc *rpc) {
  return (uintptr_t)conch_rpc_data(rpc);
}

static void cs_message(Echo__ClientStream_Rpc rpc, const Ping *msg,
                       void *user_data) {
  (void)user_data;
  CHECK(strcmp(msg->text, "part") == 0);
  conch_rpc_set_data(rpc.base, (void *)(seen_of(rpc.base) + 1));
}

static void cs_half_close(Echo__ClientStream_Rpc rpc, void *user_data) {
  Pong pong = PONG__INIT;

  (void)user_data;
  pong.method = "ClientStream";
  pong.seen = (uint32_t)seen_of(rpc.base);
  CHECK(echo__client_stream_rpc_send(rpc, &pong) == 0);
  /* One response only: a second is refused. */
  CHECK(echo__client_stream_rpc_send(rpc, &pong) == CONCH_ERR_STATE);
  CHECK(echo__client_stream_rpc_finish(rpc, NULL) == 0);
}

static void bidi_message(Echo__Bidi_Rpc rpc, const Ping *msg, void *user_data) {
  Pong pong = PONG__INIT;
  uintptr_t n = seen_of(rpc.base);

  (void)user_data;
  pong.method = "Bidi";
  pong.text = msg->text;
  pong.index = (uint32_t)n;
  conch_rpc_set_data(rpc.base, (void *)(n + 1));
  CHECK(echo__bidi_rpc_send(rpc, &pong) == 0);
}

static void bidi_half_close(Echo__Bidi_Rpc rpc, void *user_data) {
  (void)user_data;
  CHECK(echo__bidi_rpc_finish(rpc, NULL) == 0);
}

static void put(Echo__Put_Rpc rpc, const Ping *req, void *user_data) {
  conch_status st;

  (void)req;
  (void)user_data;
  conch_status_init(&st);
  st.code = CONCH_CODE_FAILED_PRECONDITION;
  CHECK(echo__put_rpc_finish(rpc, &st) == 0);
}

typedef struct fixture {
  conch_server *s;
  pthread_t thread;
  atomic_int stop;
  atomic_int served;
  char url[64];
} fixture;

static void *server_thread(void *arg) {
  fixture *fx = arg;
  while (!atomic_load(&fx->stop)) {
    CHECK(conch_server_run(fx->s, 20) == 0);
  }
  return NULL;
}

/* ---- The client: the generated client stubs ------------------------------ */

static conch_client *client_new(const fixture *fx, conch_protocol proto,
                                conch_codec codec) {
  conch_client_opts *o;
  conch_client *c;

  CHECK(conch_client_opts_new(&o) == 0);
  CHECK(conch_client_opts_set_protocol(o, proto) == 0);
  CHECK(conch_client_opts_set_codec(o, codec) == 0);
  CHECK(conch_client_opts_set_http_version(o, CONCH_HTTP_2) == 0);
  CHECK(conch_client_new(&c, fx->url, o) == 0);
  conch_client_opts_free(o);
  return c;
}

static void call_every_kind(conch_client *c) {
  Ping ping = PING__INIT;
  Pong *pong = NULL;
  conch_status st;
  uint32_t i;

  /* Unary. */
  conch_status_init(&st);
  ping.text = "hello";
  CHECK(echo__unary_sync(c, NULL, &ping, &pong, &st, NULL, NULL) == 0);
  CHECK(strcmp(pong->text, "hello") == 0);
  CHECK(strcmp(pong->method, "Unary") == 0);
  conch_message_free(c, &pong->base);
  conch_status_clear(&st);

  /* Server streaming: |count| responses, then the end. */
  {
    Echo__ServerStream_Call call;
    ping.count = 5;
    CHECK(echo__server_stream_start(c, NULL, &ping, NULL, &call) == 0);
    for (i = 0; i < 5; i++) {
      CHECK(echo__server_stream_recv_sync(call, &pong) == 0);
      CHECK(pong->index == i);
      CHECK(strcmp(pong->method, "ServerStream") == 0);
      conch_message_free(c, &pong->base);
    }
    CHECK(echo__server_stream_recv_sync(call, &pong) == CONCH_ERR_EOF);
    CHECK(pong == NULL);
    conch_call_free(call.base);
  }

  /* Client streaming: three requests, one response counting them. */
  {
    Echo__ClientStream_Call call;
    ping.text = "part";
    CHECK(echo__client_stream_start(c, NULL, NULL, &call) == 0);
    for (i = 0; i < 3; i++) {
      CHECK(echo__client_stream_send_sync(call, &ping) == 0);
    }
    CHECK(echo__client_stream_close_and_recv_sync(call, &pong) == 0);
    CHECK(pong->seen == 3);
    CHECK(strcmp(pong->method, "ClientStream") == 0);
    conch_message_free(c, &pong->base);
    conch_call_free(call.base);
  }

  /* Bidi: one response per request, in turn. */
  {
    Echo__Bidi_Call call;
    char text[16];
    CHECK(echo__bidi_start(c, NULL, NULL, &call) == 0);
    for (i = 0; i < 4; i++) {
      snprintf(text, sizeof(text), "b%u", (unsigned)i);
      ping.text = text;
      CHECK(echo__bidi_send_sync(call, &ping) == 0);
      CHECK(echo__bidi_recv_sync(call, &pong) == 0);
      CHECK(pong->index == i);
      CHECK(strcmp(pong->text, text) == 0);
      conch_message_free(c, &pong->base);
    }
    CHECK(echo__bidi_close_send(call) == 0);
    CHECK(echo__bidi_recv_sync(call, &pong) == CONCH_ERR_EOF);
    conch_call_free(call.base);
  }

  /* An unset member: unimplemented. */
  {
    Ping__Inner in = PING__INNER__INIT;
    Ping__Inner__Deeper *deeper = NULL;
    conch_status_init(&st);
    CHECK(echo__lookup_sync(c, NULL, &in, &deeper, &st, NULL, NULL) ==
          CONCH_ERR_RPC);
    CHECK(st.code == CONCH_CODE_UNIMPLEMENTED);
    CHECK(deeper == NULL);
    conch_status_clear(&st);
  }

  /* A handler's error status reaches the client. */
  conch_status_init(&st);
  ping.text = "x";
  CHECK(echo__put_sync(c, NULL, &ping, &pong, &st, NULL, NULL) ==
        CONCH_ERR_RPC);
  CHECK(st.code == CONCH_CODE_FAILED_PRECONDITION);
  conch_status_clear(&st);
}

int main(void) {
  static fixture fx;
  Echo_Handlers h = {0};
  static const struct {
    conch_protocol proto;
    conch_codec codec;
  } variants[] = {
      {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO},
      {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON},
      {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO},
  };
  size_t v;

  h.unary.on_request = unary;
  h.server_stream.on_request = server_stream;
  h.client_stream.on_message = cs_message;
  h.client_stream.on_half_close = cs_half_close;
  h.bidi.on_message = bidi_message;
  h.bidi.on_half_close = bidi_half_close;
  h.put.on_request = put;
  h.user_data = &fx.served;

  CHECK(conch_server_new(&fx.s, NULL) == 0);
  /* The registration's refusals. */
  CHECK(echo__register(NULL, &h) == CONCH_ERR_INVALID);
  CHECK(echo__register(fx.s, NULL) == CONCH_ERR_INVALID);
  CHECK(echo__register(fx.s, &h) == 0);
  CHECK(echo__register(fx.s, &h) == CONCH_ERR_INVALID); /* registered */
  CHECK(conch_server_listen(fx.s, "127.0.0.1:0") == 0);
  snprintf(fx.url, sizeof(fx.url), "http://127.0.0.1:%d",
           conch_server_port(fx.s));
  CHECK(pthread_create(&fx.thread, NULL, server_thread, &fx) == 0);

  for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
    conch_client *c = client_new(&fx, variants[v].proto, variants[v].codec);
    call_every_kind(c);
    conch_client_free(c);
  }
  CHECK(atomic_load(&fx.served) ==
        (int)(sizeof(variants) / sizeof(variants[0])));

  atomic_store(&fx.stop, 1);
  CHECK(pthread_join(fx.thread, NULL) == 0);
  conch_server_free(fx.s);
  printf("server stubs: every kind in %zu protocol/codec variants\n",
         sizeof(variants) / sizeof(variants[0]));
  return 0;
}
