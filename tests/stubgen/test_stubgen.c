/* Stubs made by protoc-gen-conch from tests/stubgen/proto, called end to end
   against the connect-node peer (tests/interop/node/stubgen.mjs): every
   shape through its typed functions, blocking and driven, pull and push,
   nested and imported types, a file without a package, and the names that
   had to dodge collisions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "peer.h"
#include "stubgen.conch.h"
#include "stubgen/nested/v1/nested.conch.h"
#include "stubgen/renamed.conch.h"

static conch_peer peer;
static char url[64];

static int group_setup(void **state) {
  (void)state;
  if (conch_peer_start(&peer, CONCH_SOURCE_DIR "/tests/interop/node/server.mjs",
                       NULL) != 0) {
    fprintf(stderr, "cannot start the connect-node server; run `npm ci` in "
                    "tests/interop/node\n");
    return -1;
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", peer.port);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  conch_peer_stop(&peer);
  return 0;
}

static conch_client *new_client(void) {
  conch_client *c = NULL;
  assert_int_equal(conch_client_new(&c, url, NULL), 0);
  return c;
}

static Ping ping(const char *text) {
  Ping p = PING__INIT;
  p.text = (char *)text; /* protobuf-c's strings are not const */
  return p;
}

/* ---- Tables and descriptors --------------------------------------------- */

static void test_tables(void **state) {
  (void)state;
  assert_int_equal(echo__n_methods, 6);
  assert_ptr_equal(echo__methods[0], &echo__unary__method);
  assert_ptr_equal(echo__methods[5], &echo__put__method);
  assert_null(echo__methods[6]);
  assert_string_equal(echo__unary__method.path, "/Echo/Unary");
  assert_int_equal(echo__unary__method.kind, CONCH_STREAM_UNARY);
  assert_int_equal(echo__server_stream__method.kind, CONCH_STREAM_SERVER);
  assert_int_equal(echo__client_stream__method.kind, CONCH_STREAM_CLIENT);
  assert_int_equal(echo__bidi__method.kind, CONCH_STREAM_BIDI);
  assert_ptr_equal(echo__unary__method.input, &ping__descriptor);
  assert_ptr_equal(echo__unary__method.output, &pong__descriptor);
  assert_ptr_equal(echo__lookup__method.input, &ping__inner__descriptor);
  assert_ptr_equal(echo__lookup__method.output,
                   &ping__inner__deeper__descriptor);
  assert_int_equal(echo__unary__method.idempotency, CONCH_IDEMPOTENCY_UNKNOWN);
  assert_int_equal(echo__lookup__method.idempotency,
                   CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS);
  assert_int_equal(echo__put__method.idempotency, CONCH_IDEMPOTENCY_IDEMPOTENT);

  /* switch__methods is protobuf-c's stub for Switch/Methods. */
  assert_int_equal(switch___n_methods, 10);
  assert_ptr_equal(switch___methods[0], &switch__get___method);
  assert_ptr_equal(switch___methods[6], &switch__methods__method);
  assert_null(switch___methods[10]);
  assert_string_equal(switch__get_thing___method.path, "/Switch/GetThing");
  assert_string_equal(switch__get__thing__method.path, "/Switch/Get_Thing");

  assert_int_equal(stubgen__nested__v1__deep__n_methods, 4);
  assert_string_equal(stubgen__nested__v1__deep__bidi__method.path,
                      "/stubgen.nested.v1.Deep/Bidi");
  assert_ptr_equal(stubgen__nested__v1__deep__client_stream__method.input,
                   &ping__descriptor);
  assert_int_equal(stubgen__nested__v1__static__mirror__method.idempotency,
                   CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS);

  /* c_package moves the C names, not the wire names. */
  assert_string_equal(alt__names__notes__take__method.path,
                      "/stubgen.renamed.Notes/Take");
  assert_ptr_equal(alt__names__notes__watch__method.input,
                   &alt__names__note__descriptor);
}

/* ---- Unary -------------------------------------------------------------- */

static void test_unary_sync(void **state) {
  conch_client *c = new_client();
  Ping req = ping("hello");
  Pong *resp = NULL;
  conch_metadata *hdrs, *trls;
  conch_status st;
  (void)state;

  assert_int_equal(conch_metadata_new(&hdrs, NULL), 0);
  assert_int_equal(conch_metadata_new(&trls, NULL), 0);
  conch_status_init(&st);
  assert_int_equal(echo__unary_sync(c, NULL, &req, &resp, &st, hdrs, trls), 0);
  assert_int_equal(st.code, CONCH_CODE_OK);
  assert_string_equal(resp->text, "hello");
  assert_string_equal(resp->method, "Unary");
  assert_string_equal(resp->http_method, "POST");
  assert_non_null(conch_metadata_get(hdrs, "content-type", NULL));
  conch_message_free(c, &resp->base);

  /* Without the optional outputs. */
  assert_int_equal(echo__put_sync(c, NULL, &req, &resp, NULL, NULL, NULL), 0);
  assert_string_equal(resp->method, "Put");
  conch_message_free(c, &resp->base);

  /* An error. */
  req.fail_code = CONCH_CODE_NOT_FOUND;
  req.text = "no such ping";
  assert_int_equal(echo__unary_sync(c, NULL, &req, &resp, &st, NULL, NULL),
                   CONCH_ERR_RPC);
  assert_null(resp);
  assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
  assert_string_equal(st.message, "no such ping");
  conch_status_clear(&st);

  /* Arguments. */
  assert_int_equal(echo__unary_sync(c, NULL, NULL, &resp, NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(echo__unary_sync(c, NULL, &req, NULL, NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  conch_metadata_free(hdrs);
  conch_metadata_free(trls);
  conch_client_free(c);
}

/* What the typed handlers saw. */
typedef struct seen {
  int headers;
  int messages;
  int closes;
  int send_ready;
  conch_code code;
  char text[256];
  unsigned last_index;
  unsigned seen;
  void *call_base;
  void *handler;
} seen;

static void add_text(seen *s, const char *t) {
  if (s->text[0] != '\0') {
    strncat(s->text, "|", sizeof(s->text) - strlen(s->text) - 1);
  }
  strncat(s->text, t, sizeof(s->text) - strlen(s->text) - 1);
}

static void unary_headers(Echo__Unary_Call call, const conch_metadata *md,
                          void *user_data) {
  seen *s = user_data;
  assert_non_null(md);
  s->headers++;
  s->call_base = call.base;
}

static void unary_message(Echo__Unary_Call call, const Pong *msg,
                          void *user_data) {
  seen *s = user_data;
  assert_ptr_equal(call.base, s->call_base);
  s->messages++;
  add_text(s, msg->text);
  s->handler = conch_call_user_data(call.base);
}

static void unary_close(Echo__Unary_Call call, const conch_status *st,
                        const conch_metadata *trailers, void *user_data) {
  seen *s = user_data;
  (void)call;
  assert_non_null(trailers);
  s->closes++;
  s->code = st->code;
}

static void run_until_closed(conch_client *c, const seen *s) {
  while (s->closes == 0) {
    assert_int_equal(conch_client_run(c, 1000), 0);
  }
}

/* ---- Unary, one callback (_async) -------------------------------------- */

typedef struct async_seen {
  int runs;
  int inside; /* set while _async() runs: done must not run then */
  int ran_inside;
  conch_code code;
  char text[64];
  char message[64];
  int had_headers;
} async_seen;

static void unary_done(const Pong *resp, const conch_status *st,
                       const conch_metadata *headers,
                       const conch_metadata *trailers, void *user_data) {
  async_seen *a = user_data;
  a->runs++;
  a->ran_inside |= a->inside;
  a->code = st->code;
  assert_non_null(trailers);
  a->had_headers = conch_metadata_get(headers, "content-type", NULL) != NULL;
  assert_true((resp != NULL) == (st->code == CONCH_CODE_OK));
  if (resp != NULL) {
    assert_ptr_equal(resp->base.descriptor, &pong__descriptor);
    snprintf(a->text, sizeof(a->text), "%s|%s", resp->text, resp->method);
  }
  snprintf(a->message, sizeof(a->message), "%s", conch_status_message(st));
}

/* Drives |c| until done ran, for up to 20 s. */
static void run_until_done(conch_client *c, const async_seen *a) {
  int i;
  for (i = 0; i < 20 && a->runs == 0; i++) {
    assert_int_equal(conch_client_run(c, 1000), 0);
  }
  assert_int_equal(a->runs, 1);
}

static void test_unary_async(void **state) {
  conch_client *c = new_client();
  Ping req = ping("async");
  async_seen a = {0};
  conch_call *call = NULL;
  (void)state;

  a.inside = 1;
  assert_int_equal(echo__unary_async(c, NULL, &req, unary_done, &a, &call), 0);
  a.inside = 0;
  assert_non_null(call);
  req.text = "changed after start"; /* serialized already */
  run_until_done(c, &a);
  assert_int_equal(a.ran_inside, 0);
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_string_equal(a.text, "async|Unary");
  assert_true(a.had_headers);

  /* An error from the server: no response, the status says why. */
  memset(&a, 0, sizeof(a));
  req.fail_code = CONCH_CODE_NOT_FOUND;
  req.text = "no such ping";
  assert_int_equal(echo__unary_async(c, NULL, &req, unary_done, &a, NULL), 0);
  run_until_done(c, &a);
  assert_int_equal(a.code, CONCH_CODE_NOT_FOUND);
  assert_string_equal(a.message, "no such ping");
  assert_string_equal(a.text, "");

  /* Arguments: done never runs. */
  memset(&a, 0, sizeof(a));
  call = (conch_call *)&a;
  assert_int_equal(echo__unary_async(c, NULL, NULL, unary_done, &a, &call),
                   CONCH_ERR_INVALID);
  assert_null(call);
  assert_int_equal(echo__unary_async(c, NULL, &req, NULL, &a, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(echo__unary_async(NULL, NULL, &req, unary_done, &a, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_run(c, 0), 0);
  assert_int_equal(a.runs, 0);
  conch_client_free(c);
}

static void test_unary_push(void **state) {
  conch_client *c = new_client();
  Ping req = ping("pushed");
  seen s = {0};
  Echo__Unary_Handler h = {0};
  Echo__Unary_Call call;
  (void)state;

  h.on_headers = unary_headers;
  h.on_message = unary_message;
  h.on_close = unary_close;
  h.user_data = &s;
  assert_int_equal(echo__unary_start(c, NULL, &req, &h, &call), 0);
  req.text = "changed after start"; /* serialized already */
  run_until_closed(c, &s);
  assert_int_equal(s.headers, 1);
  assert_int_equal(s.messages, 1);
  assert_int_equal(s.closes, 1);
  assert_int_equal(s.code, CONCH_CODE_OK);
  assert_string_equal(s.text, "pushed");
  assert_ptr_equal(s.handler, &h);
  /* Push mode: nothing to pull. */
  {
    Pong *m = (Pong *)1;
    assert_int_equal(echo__unary_recv(call, &m), CONCH_ERR_STATE);
    assert_null(m);
  }
  conch_call_free(call.base);

  /* Only on_close: pull mode with a completion handler. */
  memset(&s, 0, sizeof(s));
  h.on_headers = NULL;
  h.on_message = NULL;
  req.text = "pulled";
  assert_int_equal(echo__unary_start(c, NULL, &req, &h, &call), 0);
  run_until_closed(c, &s);
  assert_int_equal(s.code, CONCH_CODE_OK);
  {
    Pong *m = NULL;
    assert_int_equal(echo__unary_recv(call, &m), 0);
    assert_string_equal(m->text, "pulled");
    conch_message_free(c, &m->base);
    assert_int_equal(echo__unary_recv(call, &m), CONCH_ERR_EOF);
    assert_null(m);
  }
  conch_call_free(call.base);

  /* No handler at all, blocking receive. */
  {
    Pong *m = NULL;
    assert_int_equal(echo__unary_start(c, NULL, &req, NULL, &call), 0);
    assert_int_equal(echo__unary_recv_sync(call, &m), 0);
    assert_string_equal(m->text, "pulled");
    conch_message_free(c, &m->base);
    assert_int_equal(conch_call_wait_sync(call.base), 0);
    conch_call_free(call.base);
  }
  assert_int_equal(echo__unary_start(c, NULL, NULL, NULL, &call),
                   CONCH_ERR_INVALID);
  assert_int_equal(echo__unary_start(c, NULL, &req, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(echo__unary_start(NULL, NULL, &req, &h, &call),
                   CONCH_ERR_INVALID);
  conch_client_free(c);
}

/* A NO_SIDE_EFFECTS method with nested message types. */
static void test_lookup(void **state) {
  conch_client *c = new_client();
  Ping__Inner in = PING__INNER__INIT;
  Ping__Inner__Deeper deeper = PING__INNER__DEEPER__INIT;
  Ping__Inner__Deeper *out = NULL;
  (void)state;

  deeper.level = 41;
  in.deeper = &deeper;
  assert_int_equal(echo__lookup_sync(c, NULL, &in, &out, NULL, NULL, NULL), 0);
  assert_int_equal(out->level, 42);
  conch_message_free(c, &out->base);
  conch_client_free(c);
}

/* ---- Server streaming --------------------------------------------------- */

static void test_server_stream_pull(void **state) {
  conch_client *c = new_client();
  Ping req = ping("tick");
  Echo__ServerStream_Call call;
  Pong *m;
  unsigned n = 0;
  int rv;
  (void)state;

  req.count = 5;
  assert_int_equal(echo__server_stream_start(c, NULL, &req, NULL, &call), 0);
  while ((rv = echo__server_stream_recv_sync(call, &m)) == 0) {
    assert_int_equal(m->index, n);
    assert_string_equal(m->text, "tick");
    n++;
    conch_message_free(c, &m->base);
  }
  assert_int_equal(rv, CONCH_ERR_EOF);
  assert_int_equal(n, 5);
  assert_int_equal(conch_call_wait_sync(call.base), 0);
  conch_call_free(call.base);

  /* Responses, then an error. */
  req.count = 2;
  req.fail_code = CONCH_CODE_ABORTED;
  n = 0;
  assert_int_equal(echo__server_stream_start(c, NULL, &req, NULL, &call), 0);
  while ((rv = echo__server_stream_recv_sync(call, &m)) == 0) {
    n++;
    conch_message_free(c, &m->base);
  }
  assert_int_equal(rv, CONCH_ERR_RPC);
  assert_int_equal(n, 2);
  assert_int_equal(conch_call_status(call.base)->code, CONCH_CODE_ABORTED);
  conch_call_free(call.base);
  conch_client_free(c);
}

static void stream_message(Echo__ServerStream_Call call, const Pong *msg,
                           void *user_data) {
  seen *s = user_data;
  (void)call;
  assert_int_equal(msg->index, (unsigned)s->messages);
  s->messages++;
}

static void stream_close(Echo__ServerStream_Call call, const conch_status *st,
                         const conch_metadata *trailers, void *user_data) {
  seen *s = user_data;
  (void)trailers;
  s->closes++;
  s->code = st->code;
  conch_call_free(call.base); /* allowed from on_close */
}

static void test_server_stream_push(void **state) {
  conch_client *c = new_client();
  Ping req = ping("tock");
  Echo__ServerStream_Handler h = {0};
  Echo__ServerStream_Call call;
  seen s = {0};
  (void)state;

  req.count = 20;
  h.on_message = stream_message;
  h.on_close = stream_close;
  h.user_data = &s;
  assert_int_equal(echo__server_stream_start(c, NULL, &req, &h, &call), 0);
  run_until_closed(c, &s);
  assert_int_equal(s.messages, 20);
  assert_int_equal(s.code, CONCH_CODE_OK);
  conch_client_free(c);
}

/* ---- Server streaming, one callback per event (_async) ------------------ */

typedef struct stream_seen {
  int messages, dones;
  int inside; /* set while _async() runs: nothing may run then */
  int ran_inside;
  int out_of_order; /* a message after done, or with the wrong index */
  conch_code code;
  char message[64];
  int had_headers;
} stream_seen;

static void async_message(const Pong *msg, void *user_data) {
  stream_seen *a = user_data;
  a->ran_inside |= a->inside;
  assert_ptr_equal(msg->base.descriptor, &pong__descriptor);
  if (a->dones != 0 || msg->index != (unsigned)a->messages) {
    a->out_of_order = 1;
  }
  a->messages++;
}

static void async_done(const conch_status *st, const conch_metadata *headers,
                       const conch_metadata *trailers, void *user_data) {
  stream_seen *a = user_data;
  a->ran_inside |= a->inside;
  a->dones++;
  a->code = st->code;
  assert_non_null(trailers);
  a->had_headers = conch_metadata_get(headers, "content-type", NULL) != NULL;
  snprintf(a->message, sizeof(a->message), "%s", conch_status_message(st));
}

/* Drives |c| until done ran, for up to 20 s. */
static void run_until_stream_done(conch_client *c, const stream_seen *a) {
  int i;
  for (i = 0; i < 20 && a->dones == 0; i++) {
    assert_int_equal(conch_client_run(c, 1000), 0);
  }
  assert_int_equal(a->dones, 1);
}

static void test_server_stream_async(void **state) {
  conch_client *c = new_client();
  Ping req = ping("async-tick");
  stream_seen a = {0};
  conch_call *call = NULL;
  (void)state;

  req.count = 7;
  a.inside = 1;
  assert_int_equal(echo__server_stream_async(c, NULL, &req, async_message,
                                             async_done, &a, &call),
                   0);
  a.inside = 0;
  assert_non_null(call);
  run_until_stream_done(c, &a);
  assert_int_equal(a.ran_inside, 0);
  assert_int_equal(a.out_of_order, 0);
  assert_int_equal(a.messages, 7);
  assert_int_equal(a.code, CONCH_CODE_OK);
  assert_true(a.had_headers);

  /* Responses, then an error: the status says why. */
  memset(&a, 0, sizeof(a));
  req.count = 2;
  req.fail_code = CONCH_CODE_ABORTED;
  req.text = "stream aborted";
  assert_int_equal(echo__server_stream_async(c, NULL, &req, async_message,
                                             async_done, &a, NULL),
                   0);
  run_until_stream_done(c, &a);
  assert_int_equal(a.messages, 2);
  assert_int_equal(a.out_of_order, 0);
  assert_int_equal(a.code, CONCH_CODE_ABORTED);
  assert_string_equal(a.message, "stream aborted");

  /* Canceled through |out|: done runs once, canceled. */
  memset(&a, 0, sizeof(a));
  req.count = 3;
  req.fail_code = 0;
  assert_int_equal(echo__server_stream_async(c, NULL, &req, async_message,
                                             async_done, &a, &call),
                   0);
  conch_call_cancel(call);
  run_until_stream_done(c, &a);
  assert_int_equal(a.code, CONCH_CODE_CANCELED);

  /* Arguments: nothing runs. */
  memset(&a, 0, sizeof(a));
  call = (conch_call *)&a;
  assert_int_equal(echo__server_stream_async(c, NULL, NULL, async_message,
                                             async_done, &a, &call),
                   CONCH_ERR_INVALID);
  assert_null(call);
  assert_int_equal(
      echo__server_stream_async(c, NULL, &req, NULL, async_done, &a, NULL),
      CONCH_ERR_INVALID);
  assert_int_equal(
      echo__server_stream_async(c, NULL, &req, async_message, NULL, &a, NULL),
      CONCH_ERR_INVALID);
  assert_int_equal(echo__server_stream_async(NULL, NULL, &req, async_message,
                                             async_done, &a, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_run(c, 0), 0);
  assert_int_equal(a.dones + a.messages, 0);
  conch_client_free(c);
}

/* ---- Client streaming --------------------------------------------------- */

static void test_client_stream_sync(void **state) {
  conch_client *c = new_client();
  Echo__ClientStream_Call call;
  Pong *resp = NULL;
  char buf[16];
  int i;
  (void)state;

  assert_int_equal(echo__client_stream_start(c, NULL, NULL, &call), 0);
  for (i = 0; i < 4; i++) {
    Ping req = ping(buf);
    snprintf(buf, sizeof(buf), "p%d", i);
    assert_int_equal(echo__client_stream_send_sync(call, &req), 0);
  }
  assert_int_equal(echo__client_stream_close_and_recv_sync(call, &resp), 0);
  assert_string_equal(resp->text, "p0,p1,p2,p3");
  assert_int_equal(resp->seen, 4);
  conch_message_free(c, &resp->base);
  assert_int_equal(conch_call_status(call.base)->code, CONCH_CODE_OK);
  /* The requests have ended. */
  {
    Ping req = ping("late");
    assert_int_equal(echo__client_stream_send(call, &req), CONCH_ERR_STATE);
    assert_int_equal(echo__client_stream_close_send(call), CONCH_ERR_STATE);
  }
  conch_call_free(call.base);

  /* close_send first, then close_and_recv_sync; and a failure. */
  assert_int_equal(echo__client_stream_start(c, NULL, NULL, &call), 0);
  {
    Ping req = ping("boom");
    req.fail_code = CONCH_CODE_FAILED_PRECONDITION;
    assert_int_equal(echo__client_stream_send(call, &req), 0);
  }
  assert_int_equal(echo__client_stream_close_send(call), 0);
  assert_int_equal(echo__client_stream_close_and_recv_sync(call, &resp),
                   CONCH_ERR_RPC);
  assert_null(resp);
  assert_int_equal(conch_call_status(call.base)->code,
                   CONCH_CODE_FAILED_PRECONDITION);
  conch_call_free(call.base);
  conch_client_free(c);
}

static void gather_message(Switch__Gather_Call call, const Pong *msg,
                           void *user_data) {
  seen *s = user_data;
  (void)call;
  s->messages++;
  s->seen = msg->seen;
  add_text(s, msg->method);
}

static void gather_close(Switch__Gather_Call call, const conch_status *st,
                         const conch_metadata *trailers, void *user_data) {
  seen *s = user_data;
  (void)call;
  (void)trailers;
  s->closes++;
  s->code = st->code;
}

static void test_client_stream_push(void **state) {
  conch_client *c = new_client();
  Switch__Gather_Handler h = {0};
  Switch__Gather_Call call;
  seen s = {0};
  int i;
  (void)state;

  h.on_message = gather_message;
  h.on_close = gather_close;
  h.user_data = &s;
  assert_int_equal(switch__gather_start(c, NULL, &h, &call), 0);
  for (i = 1; i <= 10; i++) {
    Struct st = STRUCT__INIT;
    st.int_ = i;
    st.text = "s";
    assert_int_equal(switch__gather_send(call, &st), 0);
  }
  assert_int_equal(switch__gather_close_send(call), 0);
  run_until_closed(c, &s);
  assert_int_equal(s.code, CONCH_CODE_OK);
  assert_int_equal(s.messages, 1);
  assert_int_equal(s.seen, 55);
  assert_string_equal(s.text, "Gather");
  {
    Pong *m = NULL;
    /* Push mode. */
    assert_int_equal(switch__gather_close_and_recv_sync(call, &m),
                     CONCH_ERR_STATE);
    assert_null(m);
  }
  conch_call_free(call.base);
  conch_client_free(c);
}

/* ---- Bidi --------------------------------------------------------------- */

static void test_bidi_pull(void **state) {
  conch_client *c = new_client();
  Echo__Bidi_Call call;
  Pong *m;
  char buf[16];
  unsigned i;
  (void)state;

  assert_int_equal(echo__bidi_start(c, NULL, NULL, &call), 0);
  for (i = 0; i < 10; i++) {
    Ping req = ping(buf);
    snprintf(buf, sizeof(buf), "b%u", i);
    assert_int_equal(echo__bidi_send(call, &req), 0);
    /* The answer comes before the next request goes. */
    assert_int_equal(echo__bidi_recv_sync(call, &m), 0);
    assert_int_equal(m->index, i);
    assert_string_equal(m->text, buf);
    conch_message_free(c, &m->base);
  }
  assert_int_equal(echo__bidi_close_send(call), 0);
  assert_int_equal(echo__bidi_recv_sync(call, &m), CONCH_ERR_EOF);
  assert_null(m);
  conch_call_free(call.base);
  conch_client_free(c);
}

/* Ping-pong from inside the handlers: each response triggers the next
   request through the typed call the handler receives. */
typedef struct rally {
  seen s;
  unsigned rounds;
  char buf[16];
} rally;

static void rally_message(Switch__Put__Call call, const Pong *msg,
                          void *user_data) {
  rally *r = user_data;
  Ping next = ping(r->buf);
  r->s.messages++;
  r->s.last_index = msg->index;
  assert_string_equal(msg->method, "Put");
  if ((unsigned)r->s.messages == r->rounds) {
    assert_int_equal(switch__put__close_send(call), 0);
    return;
  }
  snprintf(r->buf, sizeof(r->buf), "r%d", r->s.messages);
  assert_int_equal(switch__put__send(call, &next), 0);
}

static void rally_close(Switch__Put__Call call, const conch_status *st,
                        const conch_metadata *trailers, void *user_data) {
  rally *r = user_data;
  (void)call;
  (void)trailers;
  r->s.closes++;
  r->s.code = st->code;
}

static void rally_send_ready(Switch__Put__Call call, void *user_data) {
  rally *r = user_data;
  (void)call;
  r->s.send_ready++;
}

static void test_bidi_push(void **state) {
  conch_client *c = new_client();
  Switch__Put__Handler h = {0};
  Switch__Put__Call call;
  rally r;
  (void)state;

  memset(&r, 0, sizeof(r));
  r.rounds = 25;
  snprintf(r.buf, sizeof(r.buf), "r0");
  h.on_message = rally_message;
  h.on_send_ready = rally_send_ready;
  h.on_close = rally_close;
  h.user_data = &r;
  assert_int_equal(switch__put__start(c, NULL, &h, &call), 0);
  {
    Ping first = ping(r.buf);
    assert_int_equal(switch__put__send(call, &first), 0);
  }
  run_until_closed(c, &r.s);
  assert_int_equal(r.s.code, CONCH_CODE_OK);
  assert_int_equal(r.s.messages, 25);
  assert_int_equal(r.s.last_index, 24);
  conch_call_free(call.base);
  conch_client_free(c);
}

/* ---- Names that dodged collisions ---------------------------------------- */

static void expect_method(conch_client *c, int rv, Pong *resp,
                          const char *name) {
  assert_int_equal(rv, 0);
  assert_string_equal(resp->method, name);
  conch_message_free(c, &resp->base);
}

static void test_switch_names(void **state) {
  conch_client *c = new_client();
  Ping req = ping("x");
  Pong *resp = NULL;
  int rv;
  (void)state;

  rv = switch__get__sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "Get");
  rv = switch__get_sync_sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "GetSync");
  rv = switch__fetch_recv_sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "FetchRecv");
  rv = switch__put_send_sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "PutSend");
  rv = switch__methods_sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "Methods");
  rv = switch__get__thing_sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "Get_Thing");
  rv = switch__get_thing__sync(c, NULL, &req, &resp, NULL, NULL, NULL);
  expect_method(c, rv, resp, "GetThing");

  /* Fetch is server streaming with the prefix switch__fetch_. */
  {
    Switch__Fetch__Call call;
    unsigned n = 0;
    req.count = 3;
    assert_int_equal(switch__fetch__start(c, NULL, &req, NULL, &call), 0);
    while ((rv = switch__fetch__recv_sync(call, &resp)) == 0) {
      assert_string_equal(resp->method, "Fetch");
      n++;
      conch_message_free(c, &resp->base);
    }
    assert_int_equal(rv, CONCH_ERR_EOF);
    assert_int_equal(n, 3);
    conch_call_free(call.base);
  }
  conch_client_free(c);
}

/* ---- A nested package and imported types --------------------------------- */

static void test_deep(void **state) {
  conch_client *c = new_client();
  Stubgen__Nested__V1__Outer__Middle__Inner in =
      STUBGEN__NESTED__V1__OUTER__MIDDLE__INNER__INIT;
  Stubgen__Nested__V1__Outer__Middle mid =
      STUBGEN__NESTED__V1__OUTER__MIDDLE__INIT;
  Stubgen__Nested__V1__Outer outer = STUBGEN__NESTED__V1__OUTER__INIT;
  Stubgen__Nested__V1__Outer *o = NULL;
  Stubgen__Nested__V1__Outer__Middle__Inner *i = NULL;
  Stubgen__Nested__V1__Deep__ServerStream_Call ss;
  Stubgen__Nested__V1__Deep__ClientStream_Call cs;
  Stubgen__Nested__V1__Deep__Bidi_Call bd;
  Stubgen__Nested__V1__Outer__Middle *m = NULL;
  Pong *p = NULL;
  unsigned n = 0;
  int rv;
  (void)state;

  in.text = "deep";
  in.register_ = 7;
  assert_int_equal(
      stubgen__nested__v1__deep__unary_sync(c, NULL, &in, &o, NULL, NULL, NULL),
      0);
  assert_int_equal(o->count, 1);
  assert_string_equal(o->middle->inner->text, "deep");
  assert_int_equal(o->middle->inner->register_, 7);
  conch_message_free(c, &o->base);

  mid.inner = &in;
  outer.middle = &mid;
  outer.count = 3;
  assert_int_equal(stubgen__nested__v1__deep__server_stream_start(
                       c, NULL, &outer, NULL, &ss),
                   0);
  while ((rv = stubgen__nested__v1__deep__server_stream_recv_sync(ss, &i)) ==
         0) {
    char want[16];
    snprintf(want, sizeof(want), "deep%u", n);
    assert_string_equal(i->text, want);
    assert_int_equal(i->register_, (int32_t)n);
    n++;
    conch_message_free(c, &i->base);
  }
  assert_int_equal(rv, CONCH_ERR_EOF);
  assert_int_equal(n, 3);
  conch_call_free(ss.base);

  /* A request type from the file without a package. */
  assert_int_equal(
      stubgen__nested__v1__deep__client_stream_start(c, NULL, NULL, &cs), 0);
  {
    Ping a = ping("a"), b = ping("b");
    assert_int_equal(stubgen__nested__v1__deep__client_stream_send(cs, &a), 0);
    assert_int_equal(stubgen__nested__v1__deep__client_stream_send(cs, &b), 0);
  }
  assert_int_equal(
      stubgen__nested__v1__deep__client_stream_close_and_recv_sync(cs, &m), 0);
  assert_string_equal(m->inner->text, "a,b");
  assert_int_equal(m->inner->register_, 2);
  conch_message_free(c, &m->base);
  conch_call_free(cs.base);

  assert_int_equal(stubgen__nested__v1__deep__bidi_start(c, NULL, NULL, &bd),
                   0);
  assert_int_equal(stubgen__nested__v1__deep__bidi_send_sync(bd, &in), 0);
  assert_int_equal(stubgen__nested__v1__deep__bidi_recv_sync(bd, &p), 0);
  assert_string_equal(p->text, "deep");
  assert_int_equal(p->index, 0);
  conch_message_free(c, &p->base);
  assert_int_equal(stubgen__nested__v1__deep__bidi_close_send(bd), 0);
  assert_int_equal(stubgen__nested__v1__deep__bidi_recv_sync(bd, &p),
                   CONCH_ERR_EOF);
  conch_call_free(bd.base);

  /* The second service of the file. */
  assert_int_equal(stubgen__nested__v1__static__mirror_sync(c, NULL, &outer, &o,
                                                            NULL, NULL, NULL),
                   0);
  assert_int_equal(o->count, 3);
  assert_string_equal(o->middle->inner->text, "deep");
  conch_message_free(c, &o->base);
  conch_client_free(c);
}

/* The stubs do not care about the wire protocol: the same calls over gRPC
   and gRPC-Web. */
static void test_protocols(void **state) {
  static const conch_protocol protocols[] = {CONCH_PROTOCOL_GRPC,
                                             CONCH_PROTOCOL_GRPC_WEB};
  size_t i;
  (void)state;

  for (i = 0; i < sizeof(protocols) / sizeof(protocols[0]); i++) {
    conch_client_opts *o;
    conch_client *c;
    Ping req = ping("over the wire");
    Pong *resp = NULL;
    Echo__Bidi_Call call;
    conch_status st;

    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_protocol(o, protocols[i]), 0);
    assert_int_equal(conch_client_new(&c, url, o), 0);
    conch_client_opts_free(o);

    assert_int_equal(echo__unary_sync(c, NULL, &req, &resp, NULL, NULL, NULL),
                     0);
    assert_string_equal(resp->text, "over the wire");
    conch_message_free(c, &resp->base);

    assert_int_equal(echo__bidi_start(c, NULL, NULL, &call), 0);
    assert_int_equal(echo__bidi_send(call, &req), 0);
    assert_int_equal(echo__bidi_recv_sync(call, &resp), 0);
    assert_int_equal(resp->index, 0);
    conch_message_free(c, &resp->base);
    assert_int_equal(echo__bidi_close_send(call), 0);
    assert_int_equal(echo__bidi_recv_sync(call, &resp), CONCH_ERR_EOF);
    conch_call_free(call.base);

    req.fail_code = CONCH_CODE_PERMISSION_DENIED;
    conch_status_init(&st);
    assert_int_equal(echo__unary_sync(c, NULL, &req, &resp, &st, NULL, NULL),
                     CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_PERMISSION_DENIED);
    conch_status_clear(&st);
    conch_client_free(c);
  }
}

/* A call struct made by hand for another method cannot hand out a message
   of the wrong type. */
static void test_wrong_call(void **state) {
  conch_client *c = new_client();
  Ping req = ping("typed");
  Echo__Unary_Call call;
  Echo__Lookup_Call other;
  Ping__Inner__Deeper *d = NULL;
  (void)state;

  assert_int_equal(echo__unary_start(c, NULL, &req, NULL, &call), 0);
  other.base = call.base;
  assert_int_equal(echo__lookup_recv_sync(other, &d), CONCH_ERR_INVALID);
  assert_null(d);
  conch_call_free(call.base);
  conch_client_free(c);
}

/* The program of examples/greet, which the README shows, against the
   peer's greet.v1.Greeter. */
static void test_example(void **state) {
#ifdef SG_GREET_BIN
  char cmd[512], out[512];
  size_t n;
  FILE *p;
  (void)state;

  snprintf(cmd, sizeof(cmd), "%s %s world", SG_GREET_BIN, url);
  p = popen(cmd, "r");
  assert_non_null(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  assert_int_equal(pclose(p), 0);
  assert_string_equal(out, "Hello, world!\n"
                           "Hello, world!\n"
                           "Hi, world!\n"
                           "Good day, world!\n");
#else
  (void)state;
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tables),
      cmocka_unit_test(test_unary_sync),
      cmocka_unit_test(test_unary_push),
      cmocka_unit_test(test_unary_async),
      cmocka_unit_test(test_lookup),
      cmocka_unit_test(test_server_stream_pull),
      cmocka_unit_test(test_server_stream_push),
      cmocka_unit_test(test_server_stream_async),
      cmocka_unit_test(test_client_stream_sync),
      cmocka_unit_test(test_client_stream_push),
      cmocka_unit_test(test_bidi_pull),
      cmocka_unit_test(test_bidi_push),
      cmocka_unit_test(test_switch_names),
      cmocka_unit_test(test_deep),
      cmocka_unit_test(test_protocols),
      cmocka_unit_test(test_wrong_call),
      cmocka_unit_test(test_example),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
