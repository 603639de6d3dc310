/* The generated SERVER stubs of tests/stubgen/proto/stubgen.proto (Echo)
   serving conch's own client, which calls through the generated CLIENT
   stubs: every stream kind, in Connect, gRPC and gRPC-Web (proto) and
   Connect JSON, an unset member answering unimplemented, an error status,
   and the registration's refusals; then a server stream paced by the send
   buffer (typed on_send_ready), a canceled bidi call (typed on_cancel),
   and a renamed service (stubgen/renamed.proto's Desk).  A second server
   takes the requests of client streaming and bidi in pull mode (typed
   on_recv_ready and _rpc_recv()), for the same calls; a table with both
   on_recv_ready and on_message is refused.  A third serves ServerStream
   and Bidi from typed sources (_rpc_stream(), _rpc_wake()): the same
   calls, and a stream of 100,000 responses through a small send buffer,
   all of them and then OK.  The server runs
   on a thread of its own (conch_server_run); the client blocks on the
   test's thread.  Conditions are polled with a generous limit. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stubgen.conch.h"
#include "stubgen/renamed.conch.h"
#include "wait.h"

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

/* A server stream's progress, kept with its call: responses go out until
   the send buffer is full, and on_send_ready goes on. */
typedef struct stream_state {
  uint32_t next, count;
  char *text;
} stream_state;

static atomic_int send_ready_runs;
static atomic_int cancels;
static atomic_int last_cancel_code;
static atomic_int holding;

static void stream_free(stream_state *st) {
  free(st->text);
  free(st);
}

static void stream_pump(Echo__ServerStream_Rpc rpc) {
  stream_state *st = conch_rpc_data(rpc.base);
  Pong pong = PONG__INIT;
  int rv;

  pong.method = "ServerStream";
  pong.text = st->text;
  while (st->next < st->count) {
    pong.index = st->next;
    rv = echo__server_stream_rpc_send(rpc, &pong);
    if (rv == CONCH_ERR_AGAIN) {
      return; /* on_send_ready follows */
    }
    CHECK(rv == 0);
    st->next++;
  }
  stream_free(st);
  CHECK(echo__server_stream_rpc_finish(rpc, NULL) == 0);
}

static void server_stream(Echo__ServerStream_Rpc rpc, const Ping *req,
                          void *user_data) {
  stream_state *st = calloc(1, sizeof(*st));

  (void)user_data;
  CHECK(st != NULL);
  st->count = req->count;
  st->text = strdup(req->text);
  CHECK(st->text != NULL);
  conch_rpc_set_data(rpc.base, st);
  stream_pump(rpc);
}

static void server_stream_ready(Echo__ServerStream_Rpc rpc, void *user_data) {
  (void)user_data;
  atomic_fetch_add(&send_ready_runs, 1);
  stream_pump(rpc);
}

static void server_stream_cancel(Echo__ServerStream_Rpc rpc,
                                 const conch_status *status, void *user_data) {
  (void)status;
  (void)user_data;
  stream_free(conch_rpc_data(rpc.base));
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
  if (strcmp(msg->text, "hold") == 0) {
    atomic_store(&holding, 1); /* no answer: the client cancels */
    return;
  }
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

static void bidi_cancel(Echo__Bidi_Rpc rpc, const conch_status *status,
                        void *user_data) {
  (void)rpc;
  (void)user_data;
  atomic_store(&last_cancel_code, (int)status->code);
  atomic_fetch_add(&cancels, 1);
}

/* Desk/Close of stubgen/renamed.proto: prefixes with a trailing '_'. */
/* ---- The same Echo with typed sources --------------------------------------
 */

/* A source's state: ServerStream's count, or Bidi's requests not answered
   yet; |pong| is the response being sent (valid until the source runs
   again). */
typedef struct source_state {
  uint32_t next, count;
  char *text;
  Pong pong;
  char *queue[8];
  size_t head, n;
  int ended;
  char *last; /* the text of the response being sent (Bidi) */
} source_state;

static atomic_int sources_done;

static void source_free(source_state *st) {
  free(st->text);
  free(st->last);
  while (st->n > 0) {
    free(st->queue[st->head]);
    st->head = (st->head + 1) % 8;
    st->n--;
  }
  free(st);
}

static const Pong *ss_next(Echo__ServerStream_Rpc rpc, void *user_data) {
  source_state *st = user_data;
  Pong init = PONG__INIT;

  if (st->next == st->count) {
    source_free(st);
    conch_rpc_set_data(rpc.base, NULL);
    atomic_fetch_add(&sources_done, 1);
    CHECK(echo__server_stream_rpc_finish(rpc, NULL) == 0);
    return NULL;
  }
  st->pong = init;
  st->pong.method = "ServerStream";
  st->pong.text = st->text;
  st->pong.index = st->next++;
  return &st->pong;
}

static void ss_request(Echo__ServerStream_Rpc rpc, const Ping *req,
                       void *user_data) {
  source_state *st = calloc(1, sizeof(*st));
  Pong pong = PONG__INIT;

  (void)user_data;
  CHECK(st != NULL);
  st->count = req->count;
  st->text = strdup(req->text);
  CHECK(st->text != NULL);
  conch_rpc_set_data(rpc.base, st);
  CHECK(echo__server_stream_rpc_stream(rpc, NULL, st) == CONCH_ERR_INVALID);
  CHECK(echo__server_stream_rpc_wake(rpc) == CONCH_ERR_STATE);
  CHECK(echo__server_stream_rpc_stream(rpc, ss_next, st) == 0);
  /* The source sends now: by hand is refused. */
  CHECK(echo__server_stream_rpc_send(rpc, &pong) == CONCH_ERR_STATE);
  CHECK(echo__server_stream_rpc_stream(rpc, ss_next, st) == CONCH_ERR_STATE);
}

static void ss_cancel(Echo__ServerStream_Rpc rpc, const conch_status *status,
                      void *user_data) {
  (void)status;
  (void)user_data;
  if (conch_rpc_data(rpc.base) != NULL) {
    source_free(conch_rpc_data(rpc.base));
  }
}

/* Bidi: each request answered as it comes; between them the source has
   nothing and waits for _rpc_wake(). */
static const Pong *sb_next(Echo__Bidi_Rpc rpc, void *user_data) {
  source_state *st = user_data;
  Pong init = PONG__INIT;

  free(st->last); /* the previous response went out */
  st->last = NULL;
  if (st->n == 0) {
    if (st->ended) {
      source_free(st);
      conch_rpc_set_data(rpc.base, NULL);
      atomic_fetch_add(&sources_done, 1);
      CHECK(echo__bidi_rpc_finish(rpc, NULL) == 0);
    }
    return NULL;
  }
  st->last = st->queue[st->head];
  st->head = (st->head + 1) % 8;
  st->n--;
  st->pong = init;
  st->pong.method = "Bidi";
  st->pong.text = st->last;
  st->pong.index = st->next++;
  return &st->pong;
}

static source_state *sb_state(Echo__Bidi_Rpc rpc) {
  source_state *st = conch_rpc_data(rpc.base);
  if (st == NULL) {
    st = calloc(1, sizeof(*st));
    CHECK(st != NULL);
    conch_rpc_set_data(rpc.base, st);
    CHECK(echo__bidi_rpc_stream(rpc, sb_next, st) == 0);
  }
  return st;
}

static void sb_message(Echo__Bidi_Rpc rpc, const Ping *msg, void *user_data) {
  source_state *st = sb_state(rpc);

  (void)user_data;
  CHECK(st->n < 8);
  st->queue[(st->head + st->n) % 8] = strdup(msg->text);
  CHECK(st->queue[(st->head + st->n) % 8] != NULL);
  st->n++;
  CHECK(echo__bidi_rpc_wake(rpc) == 0);
}

static void sb_half_close(Echo__Bidi_Rpc rpc, void *user_data) {
  source_state *st = sb_state(rpc);

  (void)user_data;
  st->ended = 1;
  CHECK(echo__bidi_rpc_wake(rpc) == 0);
}

static void sb_cancel(Echo__Bidi_Rpc rpc, const conch_status *status,
                      void *user_data) {
  (void)status;
  (void)user_data;
  if (conch_rpc_data(rpc.base) != NULL) {
    source_free(conch_rpc_data(rpc.base));
  }
}

static void desk_close(Alt__Names__Desk__Close__Rpc rpc,
                       const Alt__Names__Note *req, void *user_data) {
  Alt__Names__Note note = ALT__NAMES__NOTE__INIT;
  (void)user_data;
  note.text = req->text;
  CHECK(alt__names__desk__close__rpc_send(rpc, &note) == 0);
  CHECK(alt__names__desk__close__rpc_finish(rpc, NULL) == 0);
}

/* Pull mode: the same answers, the requests taken with _rpc_recv().  The
   tables keep on_half_close set: pull mode must not call it (it would send
   a second response, refused). */
static atomic_int pulled;

static void pull_cs(Echo__ClientStream_Rpc rpc, void *user_data) {
  Ping *msg;
  int rv;

  while ((rv = echo__client_stream_rpc_recv(rpc, &msg)) == 0) {
    atomic_fetch_add(&pulled, 1);
    cs_message(rpc, msg, user_data);
    conch_server_message_free(conch_rpc_server(rpc.base), &msg->base);
  }
  CHECK(msg == NULL);
  if (rv == CONCH_ERR_EOF) {
    cs_half_close(rpc, user_data);
  } else {
    CHECK(rv == CONCH_ERR_AGAIN); /* on_recv_ready comes back */
  }
}

static void pull_bidi(Echo__Bidi_Rpc rpc, void *user_data) {
  Ping *msg;
  int rv;

  while ((rv = echo__bidi_rpc_recv(rpc, &msg)) == 0) {
    atomic_fetch_add(&pulled, 1);
    bidi_message(rpc, msg, user_data);
    conch_server_message_free(conch_rpc_server(rpc.base), &msg->base);
  }
  if (rv == CONCH_ERR_EOF) {
    bidi_half_close(rpc, user_data);
  } else {
    CHECK(rv == CONCH_ERR_AGAIN);
  }
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

/* Starts |fx|'s server (conch_server_new() done, methods registered) on
   127.0.0.1:0, on a thread of its own. */
static void fixture_serve(fixture *fx) {
  CHECK(conch_server_listen(fx->s, "127.0.0.1:0") == 0);
  snprintf(fx->url, sizeof(fx->url), "http://127.0.0.1:%d",
           conch_server_port(fx->s));
  CHECK(pthread_create(&fx->thread, NULL, server_thread, fx) == 0);
}

static void fixture_stop(fixture *fx) {
  atomic_store(&fx->stop, 1);
  CHECK(pthread_join(fx->thread, NULL) == 0);
  conch_server_free(fx->s);
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

/* A server stream of many responses through a small send buffer: all
   arrive, in order, and the handler was paced by on_send_ready. */
static void paced_stream(conch_client *c) {
  Echo__ServerStream_Call call;
  Ping ping = PING__INIT;
  Pong *pong = NULL;
  char text[512];
  uint32_t i;

  memset(text, 'p', sizeof(text) - 1);
  text[sizeof(text) - 1] = '\0';
  ping.text = text;
  ping.count = 2000;
  /* A deadline, so that a stream that stalls fails instead of hanging. */
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  opts.timeout_ms = CONCH_WAIT_MS;
  CHECK(echo__server_stream_start(c, &opts, &ping, NULL, &call) == 0);
  for (i = 0; i < 2000; i++) {
    CHECK(echo__server_stream_recv_sync(call, &pong) == 0);
    CHECK(pong->index == i);
    CHECK(strcmp(pong->text, text) == 0);
    conch_message_free(c, &pong->base);
  }
  CHECK(echo__server_stream_recv_sync(call, &pong) == CONCH_ERR_EOF);
  conch_call_free(call.base);
  CHECK(atomic_load(&send_ready_runs) > 0);
}

/* 100,000 responses from a typed source through a 4 KiB send buffer: all
   of them, in order, and then OK. */
static void sourced_stream(conch_client *c) {
  Echo__ServerStream_Call call;
  Ping ping = PING__INIT;
  Pong *pong = NULL;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  uint32_t i;

  ping.text = "s";
  ping.count = 100000;
  opts.timeout_ms = CONCH_WAIT_MS;
  CHECK(echo__server_stream_start(c, &opts, &ping, NULL, &call) == 0);
  for (i = 0; i < 100000; i++) {
    CHECK(echo__server_stream_recv_sync(call, &pong) == 0);
    CHECK(pong->index == i);
    conch_message_free(c, &pong->base);
  }
  CHECK(echo__server_stream_recv_sync(call, &pong) == CONCH_ERR_EOF);
  CHECK(conch_call_status(call.base)->code == CONCH_CODE_OK);
  conch_call_free(call.base);
}

static int is_holding(void *arg) {
  (void)arg;
  return atomic_load(&holding);
}

static int cancel_seen(void *arg) {
  (void)arg;
  return atomic_load(&cancels) > 0;
}

/* A bidi call the server holds, canceled by the client: the typed
   on_cancel runs with canceled. */
static void canceled_bidi(conch_client *c) {
  Echo__Bidi_Call call;
  Ping ping = PING__INIT;
  Pong *pong = NULL;

  ping.text = "hold";
  CHECK(echo__bidi_start(c, NULL, NULL, &call) == 0);
  CHECK(echo__bidi_send_sync(call, &ping) == 0);
  /* Drive the client until the server holds the call (up to ~20 s). */
  for (int turns = 0; !is_holding(NULL); turns++) {
    CHECK(turns < CONCH_WAIT_MS / 20);
    CHECK(conch_client_run(c, 20) == 0);
  }
  CHECK(conch_call_cancel(call.base) == 0);
  CHECK(echo__bidi_recv_sync(call, &pong) == CONCH_ERR_RPC);
  CHECK(conch_call_status(call.base)->code == CONCH_CODE_CANCELED);
  conch_call_free(call.base);
  /* Drive the client so that its RST_STREAM goes out (up to ~20 s). */
  for (int turns = 0; !cancel_seen(NULL); turns++) {
    CHECK(turns < CONCH_WAIT_MS / 20);
    CHECK(conch_client_run(c, 20) == 0);
  }
  CHECK(atomic_load(&last_cancel_code) == CONCH_CODE_CANCELED);
}

/* Desk (stubgen/renamed.proto): its names carry a trailing '_'. */
static void renamed(conch_client *c) {
  Alt__Names__Note note = ALT__NAMES__NOTE__INIT;
  Alt__Names__Note *resp = NULL;
  conch_status st;

  conch_status_init(&st);
  note.text = "renamed";
  CHECK(alt__names__desk__close__sync(c, NULL, &note, &resp, &st, NULL, NULL) ==
        0);
  CHECK(strcmp(resp->text, "renamed") == 0);
  conch_message_free(c, &resp->base);
  /* Open is unset. */
  CHECK(alt__names__desk__open_sync(c, NULL, &note, &resp, &st, NULL, NULL) ==
        CONCH_ERR_RPC);
  CHECK(st.code == CONCH_CODE_UNIMPLEMENTED);
  conch_status_clear(&st);
}

int main(void) {
  static fixture fx, pfx, sfx;
  Echo_Handlers h = {0}, ph, both, sh;
  Alt__Names__Desk_Handlers desk = {0};
  conch_server_opts *o;
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
  h.server_stream.on_send_ready = server_stream_ready;
  h.server_stream.on_cancel = server_stream_cancel;
  h.bidi.on_cancel = bidi_cancel;
  desk.close_.on_request = desk_close;
  h.client_stream.on_message = cs_message;
  h.client_stream.on_half_close = cs_half_close;
  h.bidi.on_message = bidi_message;
  h.bidi.on_half_close = bidi_half_close;
  h.put.on_request = put;
  h.user_data = &fx.served;

  /* A small send buffer, so that long streams wait for on_send_ready. */
  CHECK(conch_server_opts_new(&o) == 0);
  CHECK(conch_server_opts_set_send_buffer(o, 4096) == 0);
  CHECK(conch_server_new(&fx.s, o) == 0);
  conch_server_opts_free(o);
  /* The registration's refusals. */
  CHECK(echo__register(NULL, &h) == CONCH_ERR_INVALID);
  CHECK(echo__register(fx.s, NULL) == CONCH_ERR_INVALID);
  CHECK(echo__register(fx.s, &h) == 0);
  CHECK(echo__register(fx.s, &h) == CONCH_ERR_INVALID); /* registered */
  CHECK(alt__names__desk__register(fx.s, &desk) == 0);
  fixture_serve(&fx);

  /* The pull-mode server: the same table, client streaming and bidi
     taken with _rpc_recv().  Pull and push at once is refused before
     any method is registered (the right table then registers). */
  ph = h;
  ph.client_stream.on_message = NULL;
  ph.client_stream.on_recv_ready = pull_cs;
  ph.bidi.on_message = NULL;
  ph.bidi.on_recv_ready = pull_bidi;
  ph.user_data = &pfx.served;
  both = ph;
  both.bidi.on_message = bidi_message;
  CHECK(conch_server_new(&pfx.s, NULL) == 0);
  CHECK(echo__register(pfx.s, &both) == CONCH_ERR_INVALID);
  both = ph;
  both.client_stream.on_message = cs_message;
  CHECK(echo__register(pfx.s, &both) == CONCH_ERR_INVALID);
  CHECK(echo__register(pfx.s, &ph) == 0);
  fixture_serve(&pfx);

  /* The typed sources: ServerStream and Bidi. */
  sh = h;
  sh.server_stream.on_request = ss_request;
  sh.server_stream.on_send_ready = NULL;
  sh.server_stream.on_cancel = ss_cancel;
  sh.bidi.on_message = sb_message;
  sh.bidi.on_half_close = sb_half_close;
  sh.bidi.on_cancel = sb_cancel;
  sh.user_data = &sfx.served;
  CHECK(conch_server_opts_new(&o) == 0);
  CHECK(conch_server_opts_set_send_buffer(o, 4096) == 0);
  CHECK(conch_server_new(&sfx.s, o) == 0);
  conch_server_opts_free(o);
  CHECK(echo__register(sfx.s, &sh) == 0);
  fixture_serve(&sfx);

  for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
    conch_client *c = client_new(&fx, variants[v].proto, variants[v].codec);
    call_every_kind(c);
    conch_client_free(c);
    c = client_new(&pfx, variants[v].proto, variants[v].codec);
    call_every_kind(c);
    conch_client_free(c);
    c = client_new(&sfx, variants[v].proto, variants[v].codec);
    call_every_kind(c);
    conch_client_free(c);
  }
  /* Each variant: one ServerStream and one Bidi source ran to the end. */
  CHECK(atomic_load(&sources_done) ==
        2 * (int)(sizeof(variants) / sizeof(variants[0])));
  {
    conch_client *c = client_new(&sfx, CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO);
    sourced_stream(c);
    conch_client_free(c);
  }
  /* Each variant: 3 client-streaming and 4 bidi requests pulled. */
  CHECK(atomic_load(&pulled) ==
        7 * (int)(sizeof(variants) / sizeof(variants[0])));
  {
    conch_client *c =
        client_new(&fx, CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO);
    paced_stream(c);
    canceled_bidi(c);
    renamed(c);
    conch_client_free(c);
  }
  CHECK(atomic_load(&fx.served) ==
        (int)(sizeof(variants) / sizeof(variants[0])));

  CHECK(atomic_load(&pfx.served) ==
        (int)(sizeof(variants) / sizeof(variants[0])));

  fixture_stop(&fx);
  fixture_stop(&pfx);
  fixture_stop(&sfx);
  printf("server stubs: every kind in %zu protocol/codec variants, push and "
         "pull mode (%d requests pulled), typed sources (%d streams); a "
         "paced stream (on_send_ready %d times), 100,000 responses from a "
         "source, a canceled call, a renamed service\n",
         sizeof(variants) / sizeof(variants[0]), atomic_load(&pulled),
         atomic_load(&sources_done), atomic_load(&send_ready_runs));
  return 0;
}
