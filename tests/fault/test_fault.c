/* conch against a misbehaving server (tests/fault/server.mjs): every fault
   must end in the documented code, without a hang or a leak, and the
   client must stay usable afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "client_int.h"
#include "conn_int.h"
#include "list.h"
#include "peer.h"

#define MSG "\x0a\x02ok"

static conch_peer peer;
static char url[64];
static conch_peer small_peer; /* SETTINGS_MAX_CONCURRENT_STREAMS = 2 */
static conch_peer hole_peer;  /* answers nothing after its SETTINGS */
static char hole_url[64];
static char small_url[64];

static int group_setup(void **state) {
  (void)state;
  if (conch_peer_start(&peer, CONCH_SOURCE_DIR "/tests/fault/server.mjs",
                       NULL) != 0) {
    return -1;
  }
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", peer.port);
  {
    const char *args[] = {"--max-streams", "2", NULL};
    if (conch_peer_start(&small_peer,
                         CONCH_SOURCE_DIR "/tests/fault/server.mjs",
                         args) != 0) {
      return -1;
    }
    snprintf(small_url, sizeof(small_url), "http://127.0.0.1:%d",
             small_peer.port);
  }
  if (conch_peer_start(&hole_peer,
                       CONCH_SOURCE_DIR "/tests/fault/blackhole.mjs",
                       NULL) != 0) {
    return -1;
  }
  snprintf(hole_url, sizeof(hole_url), "http://127.0.0.1:%d", hole_peer.port);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  conch_peer_stop(&peer);
  conch_peer_stop(&small_peer);
  conch_peer_stop(&hole_peer);
  return 0;
}

typedef struct outcome {
  conch_code code;
  int messages;
  char message[256];
  int64_t elapsed_ms;
  int retryable_hint; /* message says the stream was not processed */
} outcome;

/* Runs |scenario| as a raw call of |kind| and collects what came back. */
static void run(conch_client *c, const char *scenario, conch_stream_kind kind,
                long timeout_ms, long cancel_after_ms, outcome *out) {
  char path[128];
  conch_method m;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call *call;
  const uint8_t *data;
  size_t len;
  int64_t t0 = conch__now_ms();
  int rv;

  snprintf(path, sizeof(path), "/conchfault.v1.Fault/%s", scenario);
  memset(&m, 0, sizeof(m));
  m.path = path;
  m.kind = kind;
  opts.timeout_ms = timeout_ms;
  memset(out, 0, sizeof(*out));
  assert_int_equal(conch_call_start(c, &m, &opts, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_raw(call, MSG, 4), 0);
  if (kind == CONCH_STREAM_BIDI || kind == CONCH_STREAM_CLIENT) {
    assert_int_equal(conch_call_close_send(call), 0);
  }
  for (;;) {
    rv = conch_call_recv_raw(call, &data, &len);
    if (rv == 0) {
      if (kind != CONCH_STREAM_UNARY) {
        assert_int_equal(len, 4);
        assert_memory_equal(data, MSG, 4);
      }
      out->messages++;
      continue;
    }
    if (rv != CONCH_ERR_AGAIN) {
      break;
    }
    if (cancel_after_ms > 0 && conch__now_ms() - t0 >= cancel_after_ms) {
      conch_call_cancel(call);
      cancel_after_ms = 0;
    }
    assert_int_equal(conch_client_run(c, 50), 0);
    /* Nothing may hang: every scenario ends well within this. */
    assert_true(conch__now_ms() - t0 < 15000);
  }
  assert_int_equal(conch_call_wait_sync(call),
                   rv == CONCH_ERR_EOF ? 0 : CONCH_ERR_RPC);
  out->code = conch_call_status(call)->code;
  snprintf(out->message, sizeof(out->message), "%s",
           conch_status_message(conch_call_status(call)));
  out->elapsed_ms = conch__now_ms() - t0;
  out->retryable_hint = strstr(out->message, "not processed") != NULL;
  conch_call_free(call);
}

/* An Echo right after a fault: the client recovered (reconnecting when
   the fault killed the connection). */
static void check_healthy(conch_client *c) {
  outcome o;
  run(c, "Echo", CONCH_STREAM_UNARY, 5000, 0, &o);
  assert_int_equal(o.code, CONCH_CODE_OK);
  assert_int_equal(o.messages, 1);
  run(c, "EchoStream", CONCH_STREAM_BIDI, 5000, 0, &o);
  assert_int_equal(o.code, CONCH_CODE_OK);
  assert_int_equal(o.messages, 1);
}

typedef struct fault_case {
  const char *scenario;
  conch_stream_kind kind;
  conch_code code;
  int min_messages; /* messages that must arrive before the error */
  long timeout_ms;
  long cancel_after_ms;
  long max_ms; /* must end within this */
} fault_case;

#define U CONCH_STREAM_UNARY
#define S CONCH_STREAM_SERVER

static const fault_case cases[] = {
    {"Echo", U, CONCH_CODE_OK, 1, 5000, 0, 3000},
    {"EchoStream", CONCH_STREAM_BIDI, CONCH_CODE_OK, 1, 5000, 0, 3000},
    {"WrongContentType", U, CONCH_CODE_UNKNOWN, 0, 5000, 0, 3000},
    {"WrongContentType", S, CONCH_CODE_UNKNOWN, 0, 5000, 0, 3000},
    {"WrongCodec", U, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"WrongCodec", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"UnaryErrorJson", U, CONCH_CODE_RESOURCE_EXHAUSTED, 0, 5000, 0, 3000},
    {"UnaryHtml503", U, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"Http400Stream", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"MissingEndStream", S, CONCH_CODE_INTERNAL, 1, 5000, 0, 3000},
    {"BytesAfterEndStream", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"TruncatedEnvelope", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"HugeLength", S, CONCH_CODE_RESOURCE_EXHAUSTED, 0, 10000, 0, 3000},
    {"BadGzip", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"UnknownFlag", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"EndStreamBadJson", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"EndStreamMetadataWrongType", S, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"StreamGzipBomb", S, CONCH_CODE_RESOURCE_EXHAUSTED, 0, 10000, 0, 5000},
    {"UnaryGzipBomb", U, CONCH_CODE_RESOURCE_EXHAUSTED, 0, 10000, 0, 5000},
    {"RstMidStream", S, CONCH_CODE_INTERNAL, 1, 5000, 0, 3000},
    {"RstMidStream", U, CONCH_CODE_INTERNAL, 0, 5000, 0, 3000},
    {"RstCancel", S, CONCH_CODE_CANCELED, 1, 5000, 0, 3000},
    {"RstCancel", U, CONCH_CODE_CANCELED, 0, 5000, 0, 3000},
    {"RstRefused", S, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"RstRefused", U, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"Goaway", S, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"Goaway", U, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"GoawayAfterHeaders", S, CONCH_CODE_UNAVAILABLE, 1, 5000, 0, 3000},
    {"GoawayAfterHeaders", U, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"CloseMidMessage", S, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"CloseMidMessage", U, CONCH_CODE_UNAVAILABLE, 0, 5000, 0, 3000},
    {"NeverAnswer", U, CONCH_CODE_DEADLINE_EXCEEDED, 0, 300, 0, 2000},
    {"NeverAnswer", S, CONCH_CODE_DEADLINE_EXCEEDED, 0, 300, 0, 2000},
    {"NeverAnswer", U, CONCH_CODE_CANCELED, 0, 0, 200, 2000},
    {"SlowHeaders", U, CONCH_CODE_DEADLINE_EXCEEDED, 0, 500, 0, 2500},
    {"SlowHeaders", S, CONCH_CODE_DEADLINE_EXCEEDED, 0, 500, 0, 2500},
    {"NoSuchScenario", U, CONCH_CODE_UNIMPLEMENTED, 0, 5000, 0, 3000},
};

static void test_faults(void **state) {
  conch_client *c;
  size_t i;
  (void)state;

  assert_int_equal(conch_client_new(&c, url, NULL), 0);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const fault_case *fc = &cases[i];
    outcome o;
    run(c, fc->scenario, fc->kind, fc->timeout_ms, fc->cancel_after_ms, &o);
    if (o.code != fc->code || o.messages < fc->min_messages ||
        o.elapsed_ms > fc->max_ms) {
      fail_msg("%s (%s): got %s '%s' after %d messages in %lld ms, want %s",
               fc->scenario, fc->kind == U ? "unary" : "stream",
               conch_code_name(o.code), o.message, o.messages,
               (long long)o.elapsed_ms, conch_code_name(fc->code));
    }
    {
      /* Messages read once: a connection's message once quoted itself. */
      const char *m = strstr(o.message, "connection closed by");
      if (m != NULL && strstr(m + 1, "connection closed by") != NULL) {
        fail_msg("%s: repeated message '%s'", fc->scenario, o.message);
      }
    }
    if (strcmp(fc->scenario, "RstRefused") == 0 ||
        strcmp(fc->scenario, "Goaway") == 0) {
      assert_true(o.retryable_hint);
    }
    check_healthy(c);
  }
  conch_client_free(c);
}

/* The same bytes at any receive limit: the bomb never inflates beyond the
   limit, whatever it is. */
static void test_bomb_limits(void **state) {
  size_t limits[] = {1, 1024, 1u << 20, 16u << 20};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
    conch_client_opts *o;
    conch_client *c;
    outcome out;
    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_recv_limit(o, limits[i]), 0);
    assert_int_equal(conch_client_new(&c, url, o), 0);
    conch_client_opts_free(o);
    run(c, "UnaryGzipBomb", U, 10000, 0, &out);
    assert_int_equal(out.code, CONCH_CODE_RESOURCE_EXHAUSTED);
    run(c, "StreamGzipBomb", S, 10000, 0, &out);
    assert_int_equal(out.code, CONCH_CODE_RESOURCE_EXHAUSTED);
    /* Inflation stopped at the limit: the buffer (which grows by
       doubling) never came near the 64 MiB of the bomb. */
    assert_true(c->inflbuf.cap <= 2 * limits[i] + (1u << 20));
    conch_client_free(c);
  }
}

/* Refused streams are sent once more when the whole request is at hand
   (gRPC's transparent retry); a second refusal is final. */
static conch_code keyed_call(conch_client *c, const char *scenario,
                             conch_stream_kind kind, const char *key,
                             int send_first, int *messages) {
  char path[128];
  conch_method m;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  conch_call *call;
  const uint8_t *data;
  size_t len;
  conch_code code;
  int rv;

  snprintf(path, sizeof(path), "/conchfault.v1.Fault/%s", scenario);
  memset(&m, 0, sizeof(m));
  m.path = path;
  m.kind = kind;
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-fault-key", key), 0);
  opts.headers = md;
  opts.timeout_ms = 5000;
  assert_int_equal(conch_call_start(c, &m, &opts, NULL, NULL, &call), 0);
  conch_metadata_free(md);
  if (send_first) {
    assert_int_equal(conch_call_send_raw(call, MSG, 4), 0);
  } else {
    /* Nothing but HEADERS until the stream has been answered. */
    int i;
    for (i = 0; i < 20; i++) {
      assert_int_equal(conch_client_run(c, 10), 0);
    }
    assert_int_equal(conch_call_send_raw(call, MSG, 4), 0);
  }
  if (kind == CONCH_STREAM_BIDI || kind == CONCH_STREAM_CLIENT) {
    conch_call_close_send(call);
  }
  *messages = 0;
  for (;;) {
    rv = conch_call_recv_raw(call, &data, &len);
    if (rv == 0) {
      (*messages)++;
      continue;
    }
    if (rv != CONCH_ERR_AGAIN) {
      break;
    }
    assert_int_equal(conch_client_run(c, 50), 0);
  }
  code = conch_call_status(call)->code;
  conch_call_free(call);
  return code;
}

static void test_transparent_retry(void **state) {
  conch_client *c;
  int n;
  (void)state;
  assert_int_equal(conch_client_new(&c, url, NULL), 0);
  /* One-message calls keep their request until answered. */
  assert_int_equal(keyed_call(c, "RefuseOnce", U, "u1", 1, &n), CONCH_CODE_OK);
  assert_int_equal(n, 1);
  assert_int_equal(keyed_call(c, "RefuseOnce", S, "s1", 1, &n), CONCH_CODE_OK);
  assert_int_equal(keyed_call(c, "GoawayOnce", U, "u2", 1, &n), CONCH_CODE_OK);
  assert_int_equal(keyed_call(c, "GoawayOnce", S, "s2", 1, &n), CONCH_CODE_OK);
  /* A stream that had sent nothing yet is retried too... */
  assert_int_equal(keyed_call(c, "RefuseOnce", CONCH_STREAM_BIDI, "b1", 0, &n),
                   CONCH_CODE_OK);
  /* ...one whose messages went out is not: they may have been read. */
  assert_int_equal(
      keyed_call(c, "GoawayOnce", CONCH_STREAM_CLIENT, "c1", 1, &n),
      CONCH_CODE_UNAVAILABLE);
  check_healthy(c);
  conch_client_free(c);
}

/* Keepalive: a peer that stops answering is found out even by a call
   without a deadline; a live peer's pings are answered and a slow call is
   left alone. */
static void test_keepalive(void **state) {
  conch_client_opts *o;
  conch_client *c;
  outcome out;
  (void)state;

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_keepalive(o, 500, 0),
                   CONCH_ERR_INVALID); /* under a second */
  assert_int_equal(conch_client_opts_set_keepalive(o, 1000, 600), 0);
  assert_int_equal(conch_client_new(&c, hole_url, o), 0);
  run(c, "Echo", U, 0, 0, &out);
  assert_int_equal(out.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(out.message, "keepalive"));
  assert_true(out.elapsed_ms >= 1500 && out.elapsed_ms < 4000);
  conch_client_free(c);

  assert_int_equal(conch_client_new(&c, url, o), 0);
  run(c, "SlowHeaders", U, 0, 0, &out); /* 5 s of silence, pings answered */
  assert_int_equal(out.code, CONCH_CODE_OK);
  conch_client_free(c);
  conch_client_opts_free(o);
}

/* Calls beyond the server's MAX_CONCURRENT_STREAMS wait their turn on the
   one connection, and their deadlines run while they wait. */
typedef struct waiter {
  int closes;
  conch_code code;
  int64_t at;
} waiter;

static void waiter_close(conch_call *call, const conch_status *st,
                         const conch_metadata *t, void *ud) {
  waiter *w = ud;
  (void)call;
  (void)t;
  w->closes++;
  w->code = st->code;
  w->at = conch__now_ms();
}

static void run_batch(conch_client *c, const char *scenario, long timeout_ms,
                      waiter *w, int n) {
  char path[128];
  conch_method m;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call_handler h = {NULL, NULL, NULL, NULL, waiter_close};
  conch_call *calls[8];
  int i, open;

  snprintf(path, sizeof(path), "/conchfault.v1.Fault/%s", scenario);
  memset(&m, 0, sizeof(m));
  m.path = path;
  m.kind = CONCH_STREAM_UNARY;
  opts.timeout_ms = timeout_ms;
  for (i = 0; i < n; i++) {
    memset(&w[i], 0, sizeof(w[i]));
    assert_int_equal(conch_call_start(c, &m, &opts, &h, &w[i], &calls[i]), 0);
    assert_int_equal(conch_call_send_raw(calls[i], MSG, 4), 0);
  }
  do {
    assert_int_equal(conch_client_run(c, 100), 0);
    for (open = 0, i = 0; i < n; i++) {
      open += w[i].closes == 0;
    }
  } while (open > 0);
  for (i = 0; i < n; i++) {
    conch_call_free(calls[i]);
  }
}

static void test_queued_calls(void **state) {
  conch_client *c;
  waiter w[6];
  int64_t t0;
  size_t nconns = 0;
  conch_link *l;
  int i;
  (void)state;

  assert_int_equal(conch_client_new(&c, small_url, NULL), 0);
  /* Six calls, two slots: all answered, in turn. */
  run_batch(c, "Echo", 0, w, 6);
  for (i = 0; i < 6; i++) {
    assert_int_equal(w[i].closes, 1);
    assert_int_equal(w[i].code, CONCH_CODE_OK);
  }
  /* Six slow calls with a 400 ms deadline: the four that never got a slot
     expire on time too. */
  t0 = conch__now_ms();
  run_batch(c, "SlowHeaders", 400, w, 6);
  for (i = 0; i < 6; i++) {
    assert_int_equal(w[i].code, CONCH_CODE_DEADLINE_EXCEEDED);
    assert_true(w[i].at - t0 >= 390 && w[i].at - t0 < 1500);
  }
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    nconns++;
  }
  assert_int_equal(nconns, 1);
  check_healthy(c);
  conch_client_free(c);
}

static size_t count_conns(conch_client *c) {
  size_t n = 0;
  conch_link *l;
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    n += conn->state != CONCH_CONN_DEAD;
  }
  return n;
}

/* With a pool, a full connection makes room on a new one. */
static void test_pool(void **state) {
  conch_client_opts *o;
  conch_client *c;
  waiter w[6];
  int64_t t0;
  int i;
  (void)state;

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_max_connections(o, 3), 0);
  assert_int_equal(conch_client_new(&c, small_url, o), 0);
  conch_client_opts_free(o);
  run_batch(c, "Echo", 0, w, 1); /* learns the limit of 2 */
  t0 = conch__now_ms();
  run_batch(c, "SlowHeaders", 400, w, 6);
  for (i = 0; i < 6; i++) {
    assert_int_equal(w[i].code, CONCH_CODE_DEADLINE_EXCEEDED);
    assert_true(w[i].at - t0 < 1500);
  }
  /* Two streams on each of three connections. */
  assert_int_equal(count_conns(c), 3);
  check_healthy(c);
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_faults),
      cmocka_unit_test(test_bomb_limits),
      cmocka_unit_test(test_queued_calls),
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_transparent_retry),
      cmocka_unit_test(test_keepalive),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
