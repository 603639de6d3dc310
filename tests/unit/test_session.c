/* The client's HTTP/2 session (runtime/http/session.c) without sockets, peers
   or real time: the in-memory transport (tests/support/memxport.c)
   carries the bytes, a scripted nghttp2 server (tests/support/h2peer.c)
   plays the peer and records every frame the client sends, and time is
   the transport's clock.  Covered: the SETTINGS the client sends and the
   ones it obeys (no request before the server's, its stream limit, a
   later raise), flow control both ways (the stream window follows the
   application, the connection window is returned at once, a message
   larger than the window, messages in large DATA frames handed on from the
   read buffer), RST_STREAM from the server (each code's
   status) and from the client (cancel), refused streams sent again once,
   GOAWAY draining (streams above its last id go elsewhere, the ones below
   finish, the connection closes after them), PING keepalive with an
   answering peer and GOAWAY too_many_pings, a stalled stream that holds
   no other back (want_read), output held at the high-water mark while
   the transport takes nothing, and every allocation failing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <nghttp2/nghttp2.h>

#include "client_int.h"
#include "conn_int.h"
#include "envelope.h"
#include "failmem.h"
#include "filter.h"
#include "h2peer.h"
#include "list.h"
#include "memxport.h"
#include "session.h"

#define URL "http://127.0.0.1:8080"
#define PROTO "application/proto"
#define STREAM "application/connect+proto"

typedef struct result {
  int closes;
  int msgs;
  conch_code code;
  char msg[256];
} result;

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  result *r = ud;
  (void)call;
  (void)p;
  (void)n;
  r->msgs++;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  result *r = ud;
  (void)call;
  (void)t;
  r->closes++;
  r->code = st->code;
  snprintf(r->msg, sizeof(r->msg), "%s", conch_status_message(st));
}

static const conch_call_handler handler = {NULL, NULL, on_raw, NULL, on_close};
static const conch_method unary = {"/t.v1.T/U", CONCH_STREAM_UNARY, NULL, NULL,
                                   0};
static const conch_method sstream = {"/t.v1.T/S", CONCH_STREAM_SERVER, NULL,
                                     NULL, 0};
static const conch_method cstream = {"/t.v1.T/C", CONCH_STREAM_CLIENT, NULL,
                                     NULL, 0};

/* Windows 0: the defaults. */
static conch_client *client_with(memx *m, uint32_t swin, uint32_t cwin,
                                 long keepalive_ms, const conch_mem *mem) {
  conch_client_opts *o;
  conch_client *c = NULL;
  int rv;
  memx_init(m);
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(m, o);
  if (swin != 0) {
    assert_int_equal(conch_client_opts_set_windows(o, swin, cwin), 0);
  }
  if (keepalive_ms > 0) {
    assert_int_equal(conch_client_opts_set_keepalive(o, keepalive_ms, 500), 0);
  }
  if (mem != NULL) {
    assert_int_equal(conch_client_opts_set_mem(o, mem), 0);
  }
  rv = conch_client_new(&c, URL, o);
  conch_client_opts_free(o);
  if (rv != 0) {
    return NULL;
  }
  memx_attach(m, c);
  return c;
}

static conch_client *client(memx *m) { return client_with(m, 0, 0, 0, NULL); }

/* Starts a call of |me| with |r| (NULL: pull mode, no handler); one
   message "hi" for the one-message shapes. */
static conch_call *start(conch_client *c, const conch_method *me, result *r) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_call *call;
  o.timeout_ms = 600000;
  if (r != NULL) {
    memset(r, 0, sizeof(*r));
  }
  assert_int_equal(
      conch_call_start(c, me, &o, r != NULL ? &handler : NULL, r, &call), 0);
  if (me->kind == CONCH_STREAM_UNARY || me->kind == CONCH_STREAM_SERVER) {
    assert_int_equal(conch_call_send_raw(call, "hi", 2), 0);
  }
  return call;
}

static conch_conn *conn_of(conch_client *c, int i) {
  conch_link *l = c->conns.next;
  for (; i > 0 && l != &c->conns; i--) {
    l = l->next;
  }
  assert_true(l != &c->conns);
  return CONCH_CONTAINER(l, conch_conn, link);
}

/* A Connect stream body: |n| messages of |size| bytes of 'x', then the
   end-stream message "{}".  Freed by the caller. */
static uint8_t *stream_body(size_t n, size_t size, size_t *len) {
  size_t i, at = 0;
  uint8_t *b = malloc(n * (size + 5) + 7);
  assert_non_null(b);
  for (i = 0; i < n; i++) {
    conch__env_write_prefix(b + at, 0, (uint32_t)size);
    memset(b + at + 5, 'x', size);
    at += size + 5;
  }
  conch__env_write_prefix(b + at, CONCH_ENV_END_STREAM, 2);
  memcpy(b + at + 5, "{}", 2);
  *len = at + 7;
  return b;
}

/* ---- SETTINGS --------------------------------------------------------- */

static void test_settings(void **state) {
  memx m;
  h2peer h;
  result r[5];
  conch_call *calls[5];
  conch_client *c = client_with(&m, 1u << 20, 8u << 20, 0, NULL);
  conch_conn *conn;
  nghttp2_settings_entry raise = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 10};
  int i;
  (void)state;

  calls[0] = start(c, &unary, &r[0]);
  memx_pump(&m, 16);
  conn = conn_of(c, 0);
  assert_ptr_equal(conn->ops, &conch__h2_ops);
  assert_int_equal(conn->ops->capacity(conn), -1); /* not known yet */
  h2peer_new(&h, memx_last(&m), 2, 0);
  /* The server reads the preface and says nothing: the client's SETTINGS
     are there, its request is not (it waits for the server's). */
  h2peer_read(&h);
  memx_pump(&m, 16);
  h2peer_read(&h);
  assert_int_equal(h.settings, 1);
  assert_int_equal(h.nstreams, 0);
  assert_int_equal(nghttp2_session_get_remote_settings(
                       h.s, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE),
                   1u << 20);
  assert_int_equal(
      nghttp2_session_get_remote_settings(h.s, NGHTTP2_SETTINGS_ENABLE_PUSH),
      0);
  assert_int_equal(nghttp2_session_get_remote_settings(
                       h.s, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE),
                   c->o.max_header_list);
  /* Large DATA frames welcome: a message in one frame is not copied. */
  assert_int_equal(nghttp2_session_get_remote_settings(
                       h.s, NGHTTP2_SETTINGS_MAX_FRAME_SIZE),
                   1u << 20);
  /* The connection window, raised by WINDOW_UPDATE at once. */
  assert_int_equal(h.conn_credit, (8u << 20) - 65535);
  assert_int_equal(nghttp2_session_get_remote_window_size(h.s), 8u << 20);

  /* The server's SETTINGS: the request goes, within its limit of 2. */
  for (i = 1; i < 3; i++) {
    calls[i] = start(c, &unary, &r[i]);
  }
  h2peer_exchange(&m, &h);
  assert_true(h.settings_acked);
  assert_int_equal(conn->ops->capacity(conn), 2);
  assert_int_equal(c->peer_max_streams, 2);
  assert_int_equal(h.nstreams, 2);
  assert_int_equal(m.opens, 1); /* the third waits here */
  h2peer_reply(&h, h.streams[0].id, PROTO, "a", 1, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r[0].closes, 1);
  assert_int_equal(r[0].code, CONCH_CODE_OK);
  assert_int_equal(h.nstreams, 3); /* a slot freed: the third went */
  /* A later SETTINGS raises the limit: more streams at once. */
  assert_int_equal(nghttp2_submit_settings(h.s, NGHTTP2_FLAG_NONE, &raise, 1),
                   0);
  h2peer_exchange(&m, &h);
  for (i = 3; i < 5; i++) {
    calls[i] = start(c, &unary, &r[i]);
  }
  h2peer_exchange(&m, &h);
  assert_int_equal(conn->ops->capacity(conn), 10);
  assert_int_equal(h.nstreams, 5); /* 4 open at once, over the old 2 */
  assert_int_equal(m.opens, 1);
  for (i = 1; i < 5; i++) {
    h2peer_reply(&h, h.streams[i].id, PROTO, "b", 1, NULL);
  }
  h2peer_exchange(&m, &h);
  for (i = 0; i < 5; i++) {
    assert_int_equal(r[i].code, CONCH_CODE_OK);
    conch_call_free(calls[i]);
  }
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* A Connect unary request of an empty message is a body-less POST: its
   HEADERS end the stream and no DATA frame follows (nothing to schedule);
   one with a body still sends it. */
static void test_empty_request_no_data(void **state) {
  memx m;
  h2peer h;
  result r[2];
  conch_call *calls[2];
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_client *c = client(&m);
  h2peer_stream *st;
  (void)state;

  memset(r, 0, sizeof(r));
  assert_int_equal(conch_call_start(c, &unary, &o, &handler, &r[0], &calls[0]),
                   0);
  assert_int_equal(conch_call_send_raw(calls[0], "", 0), 0);
  calls[1] = start(c, &unary, &r[1]);
  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 10, 0);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 2);
  st = &h.streams[0];
  assert_true(st->ended);
  assert_int_equal(st->data_frames, 0);
  assert_int_equal(st->data_in, 0);
  st = &h.streams[1];
  assert_true(st->ended);
  assert_int_equal(st->data_frames, 1);
  assert_int_equal(st->data_in, 2);
  h2peer_reply(&h, h.streams[0].id, PROTO, "a", 1, NULL);
  h2peer_reply(&h, h.streams[1].id, PROTO, "b", 1, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r[0].closes, 1);
  assert_int_equal(r[0].code, CONCH_CODE_OK);
  assert_int_equal(r[0].msgs, 1);
  assert_int_equal(r[1].code, CONCH_CODE_OK);
  conch_call_free(calls[0]);
  conch_call_free(calls[1]);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* ---- Flow control ---------------------------------------------------- */

/* Receiving: a pull-mode call that takes nothing gets a stream window's
   worth and no more; the connection window comes back at once; each
   message taken returns its credit, until the whole stream is in. */
static void test_receive_window(void **state) {
  memx m;
  h2peer h;
  conch_client *c = client_with(&m, 65535, 1u << 20, 0, NULL);
  conch_call *call = start(c, &sstream, NULL);
  size_t len, got = 0, n;
  uint8_t *body = stream_body(32, 16384, &len);
  h2peer_stream *st;
  const uint8_t *p;
  int i;
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 1);
  st = &h.streams[0];
  h2peer_reply(&h, st->id, STREAM, body, len, NULL);
  h2peer_exchange(&m, &h);
  /* Nothing taken: one window's worth served, no stream credit back. */
  assert_true(st->body_off > 0);
  assert_true(st->body_off <= 65535);
  assert_int_equal(st->credit, 0);
  assert_true(conn_of(c, 0)->ops->want_read(conn_of(c, 0)));
  /* Taking messages lets the rest in. */
  for (i = 0; i < 1000; i++) {
    int rv;
    while ((rv = conch_call_recv_raw(call, &p, &n)) == 0) {
      assert_int_equal(n, 16384);
      got++;
    }
    if (rv == CONCH_ERR_EOF) {
      break;
    }
    assert_int_equal(rv, CONCH_ERR_AGAIN);
    h2peer_exchange(&m, &h);
  }
  assert_true(conch_call_done(call));
  assert_int_equal(got, 32);
  assert_int_equal(st->body_off, len);
  assert_true(st->credit >= len - 65535);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
  free(body);
}

/* A push-mode call paused by its reader: what fits in the stream window
   is still delivered, no stream credit goes back, so the server stops;
   resumed, the credit held back goes out at once and the rest comes in. */
static void test_push_paused(void **state) {
  memx m;
  h2peer h;
  conch_client *c = client_with(&m, 65535, 1u << 20, 0, NULL);
  result r;
  conch_call *call = start(c, &sstream, &r);
  size_t len, off;
  uint8_t *body = stream_body(32, 16384, &len);
  h2peer_stream *st;
  int i;
  (void)state;

  assert_int_equal(conch_call_pause(NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_call_pause(call), 0);
  assert_int_equal(conch_call_pause(call), 0); /* idempotent */
  assert_int_equal(conch_call_paused(call), 1);
  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  st = &h.streams[0];
  h2peer_reply(&h, st->id, STREAM, body, len, NULL);
  for (i = 0; i < 4; i++) {
    h2peer_exchange(&m, &h);
  }
  /* One window's worth, delivered; nothing credited back. */
  off = st->body_off;
  assert_true(off > 0 && off <= 65535);
  assert_int_equal(st->credit, 0);
  assert_int_equal(r.msgs, (int)(off / (16384 + 5)));
  assert_false(conch_call_done(call));
  h2peer_exchange(&m, &h);
  assert_int_equal(st->body_off, off); /* it stays stopped */
  /* Resumed: everything comes in. */
  assert_int_equal(conch_call_resume(call), 0);
  assert_int_equal(conch_call_paused(call), 0);
  for (i = 0; i < 1000 && !conch_call_done(call); i++) {
    h2peer_exchange(&m, &h);
  }
  assert_true(conch_call_done(call));
  assert_int_equal(r.msgs, 32);
  assert_int_equal(st->body_off, len);
  assert_int_equal(r.code, CONCH_CODE_OK);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
  free(body);
}

/* A message larger than the stream window still arrives: the window
   credit of a message being assembled is returned as it comes in. */
static void test_message_over_window(void **state) {
  memx m;
  h2peer h;
  conch_client *c = client_with(&m, 65535, 1u << 20, 0, NULL);
  conch_call *call = start(c, &sstream, NULL);
  size_t len, n;
  uint8_t *body = stream_body(1, 300000, &len);
  const uint8_t *p;
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  h2peer_reply(&h, h.streams[0].id, STREAM, body, len, NULL);
  h2peer_exchange(&m, &h);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.streams[0].body_off, len);
  assert_int_equal(conch_call_recv_raw(call, &p, &n), 0);
  assert_int_equal(n, 300000);
  assert_int_equal(conch_call_recv_raw(call, &p, &n), CONCH_ERR_EOF);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
  free(body);
}

/* Where a push-mode handler found its messages. */
typedef struct where {
  const conch_conn *conn;
  int in_place; /* in the connection's read buffer: not copied */
  int copied;
  size_t bytes;
} where;

static void on_raw_where(conch_call *call, const uint8_t *p, size_t n,
                         void *ud) {
  where *w = ud;
  (void)call;
  if (p >= w->conn->rbuf && p + n <= w->conn->rbuf + w->conn->rcap) {
    w->in_place++;
  } else {
    w->copied++;
  }
  w->bytes += n;
}

static const conch_call_handler where_handler = {NULL, NULL, on_raw_where,
                                                 NULL, NULL};

/* One call of |me| (request "hi") answered with |body| (|len| bytes of
   |ctype|) by a server whose DATA frames are at most |max_frame| (0: 16
   KiB); |w| says where the handler found the bytes.  Returns the call's
   code. */
static conch_code serve_where(const conch_method *me, const char *ctype,
                              const uint8_t *body, size_t len,
                              uint32_t max_frame, where *w) {
  memx m;
  h2peer h;
  conch_client *c = client(&m);
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  conch_call *call;
  conch_code code;
  int i;

  memset(w, 0, sizeof(*w));
  assert_int_equal(conch_call_start(c, me, &o, &where_handler, w, &call), 0);
  assert_int_equal(conch_call_send_raw(call, "hi", 2), 0);
  memx_pump(&m, 16);
  w->conn = conn_of(c, 0);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h.max_frame = max_frame;
  h2peer_exchange(&m, &h);
  assert_int_equal(
      nghttp2_session_get_remote_settings(h.s, NGHTTP2_SETTINGS_MAX_FRAME_SIZE),
      1u << 20);
  h2peer_reply(&h, h.streams[0].id, ctype, body, len, NULL);
  for (i = 0; i < 100 && !conch_call_done(call); i++) {
    h2peer_exchange(&m, &h);
  }
  assert_true(conch_call_done(call));
  code = conch_call_status(call)->code;
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
  return code;
}

/* Messages that arrive whole in one read reach the handler where they lie
   in the read buffer: the server sends DATA frames as large as the
   client's SETTINGS_MAX_FRAME_SIZE allows (as Go's does).  Split over
   16 KiB frames, each is put together once. */
static void test_large_frames_in_place(void **state) {
  uint32_t frames[2] = {1u << 20, 0};
  size_t len;
  uint8_t *body = stream_body(3, 65536, &len);
  (void)state;

  for (int k = 0; k < 2; k++) {
    where w;
    (void)serve_where(&sstream, STREAM, body, len, frames[k], &w);
    assert_int_equal(w.bytes, 3 * 65536);
    if (frames[k] != 0) {
      assert_int_equal(w.in_place, 3);
      assert_int_equal(w.copied, 0);
    } else {
      assert_int_equal(w.in_place, 0);
      assert_int_equal(w.copied, 3);
    }
  }
  free(body);
}

/* The same for a Connect unary response (no envelope: the body is the
   message): a body that arrives whole in one DATA frame is decoded where
   it lies; over 16 KiB frames it is put together once. */
static void test_unary_body_in_place(void **state) {
  uint32_t frames[2] = {1u << 20, 0};
  uint8_t *body = malloc(65536);
  (void)state;

  assert_non_null(body);
  for (int i = 0; i < 65536; i++) {
    body[i] = (uint8_t)(i * 7);
  }
  for (int k = 0; k < 2; k++) {
    where w;
    assert_int_equal(serve_where(&unary, PROTO, body, 65536, frames[k], &w),
                     CONCH_CODE_OK);
    assert_int_equal(w.bytes, 65536);
    assert_int_equal(w.in_place + w.copied, 1);
    assert_int_equal(w.in_place, frames[k] != 0 ? 1 : 0);
  }
  free(body);
}

/* Sending: the client keeps to the server's stream window (16 KiB) and
   goes on as the server credits what it read. */
static void test_send_window(void **state) {
  nghttp2_settings_entry iv[2] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16384}};
  static uint8_t big[100000];
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &cstream, &r);
  h2peer_stream *st;
  size_t seen = 0;
  int i;
  (void)state;

  memset(big, 'y', sizeof(big));
  assert_int_equal(conch_call_send_raw(call, big, sizeof(big)), 0);
  assert_int_equal(conch_call_close_send(call), 0);
  memx_pump(&m, 16);
  h2peer_new2(&h, memx_last(&m), iv, 2, H2PEER_NO_WINDOW_UPDATE);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 1);
  st = &h.streams[0];
  assert_int_equal(st->data_in, 16384); /* the window, exactly */
  assert_false(st->ended);
  for (i = 0; i < 100 && !st->ended; i++) {
    assert_true(st->data_in - seen <= 16384);
    h2peer_consume(&h, st->id, st->data_in - seen);
    seen = st->data_in;
    h2peer_exchange(&m, &h);
  }
  assert_true(st->ended);
  assert_int_equal(st->data_in, sizeof(big) + 5);
  h2peer_reply(&h, st->id, STREAM, "\x02\x00\x00\x00\x02{}", 7, NULL);
  h2peer_exchange(&m, &h);
  /* A client stream answered with no message: unimplemented, as the
     protocol says, which is the session's business done right. */
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_UNIMPLEMENTED);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* ---- RST_STREAM ------------------------------------------------------- */

static void test_resets(void **state) {
  static const struct {
    uint32_t err;
    conch_code code;
    const char *msg;
  } cases[] = {
      {NGHTTP2_CANCEL, CONCH_CODE_CANCELED, "CANCEL"},
      {NGHTTP2_ENHANCE_YOUR_CALM, CONCH_CODE_RESOURCE_EXHAUSTED,
       "ENHANCE_YOUR_CALM"},
      {NGHTTP2_INTERNAL_ERROR, CONCH_CODE_INTERNAL, "INTERNAL_ERROR"},
      {NGHTTP2_INADEQUATE_SECURITY, CONCH_CODE_PERMISSION_DENIED,
       "INADEQUATE_SECURITY"},
      {NGHTTP2_NO_ERROR, CONCH_CODE_INTERNAL,
       "closed before the response was complete"},
  };
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m);
  conch_call *call;
  size_t i;
  (void)state;

  call = start(c, &unary, &r);
  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  h2peer_reply(&h, h.streams[0].id, PROTO, "ok", 2, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.code, CONCH_CODE_OK);
  conch_call_free(call);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int n0 = h.nstreams;
    call = start(c, &sstream, &r);
    h2peer_exchange(&m, &h);
    assert_int_equal(h.nstreams, n0 + 1);
    assert_int_equal(nghttp2_submit_rst_stream(h.s, NGHTTP2_FLAG_NONE,
                                               h.streams[n0].id, cases[i].err),
                     0);
    h2peer_exchange(&m, &h);
    assert_int_equal(r.closes, 1);
    if (r.code != cases[i].code || strstr(r.msg, cases[i].msg) == NULL) {
      fail_msg("RST_STREAM 0x%x: %s (%s)", (unsigned)cases[i].err,
               conch_code_name(r.code), r.msg);
    }
    assert_int_equal(h.nstreams, n0 + 1); /* not sent again */
    conch_call_free(call);
  }
  /* The client's cancel resets its stream with CANCEL. */
  {
    int n0 = h.nstreams;
    call = start(c, &sstream, &r);
    h2peer_exchange(&m, &h);
    assert_int_equal(conch_call_cancel(call), 0);
    h2peer_exchange(&m, &h);
    assert_int_equal(r.code, CONCH_CODE_CANCELED);
    assert_true(h.streams[n0].reset);
    assert_int_equal(h.streams[n0].rst, NGHTTP2_CANCEL);
    conch_call_free(call);
  }
  assert_true(conn_of(c, 0)->state == CONCH_CONN_READY); /* one stream each */
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* REFUSED_STREAM: not processed, so sent again, once. */
static void test_refused_retried_once(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &unary, &r);
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 1);
  assert_int_equal(nghttp2_submit_rst_stream(h.s, NGHTTP2_FLAG_NONE,
                                             h.streams[0].id,
                                             NGHTTP2_REFUSED_STREAM),
                   0);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.closes, 0);
  assert_int_equal(h.nstreams, 2); /* the same request on a new stream */
  assert_string_equal(h.streams[1].path, "/t.v1.T/U");
  assert_true(h.streams[1].ended);
  assert_int_equal(h.streams[1].data_in, 2);
  h2peer_reply(&h, h.streams[1].id, PROTO, "ok", 2, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.code, CONCH_CODE_OK);
  conch_call_free(call);

  /* Refused twice: the second one stands. */
  call = start(c, &unary, &r);
  h2peer_exchange(&m, &h);
  assert_int_equal(nghttp2_submit_rst_stream(h.s, NGHTTP2_FLAG_NONE,
                                             h.streams[2].id,
                                             NGHTTP2_REFUSED_STREAM),
                   0);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 4);
  assert_int_equal(nghttp2_submit_rst_stream(h.s, NGHTTP2_FLAG_NONE,
                                             h.streams[3].id,
                                             NGHTTP2_REFUSED_STREAM),
                   0);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_UNAVAILABLE);
  assert_non_null(strstr(r.msg, "refused"));
  assert_int_equal(h.nstreams, 4);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* ---- GOAWAY ------------------------------------------------------------ */

static void test_goaway_drains(void **state) {
  memx m;
  h2peer h1, h2;
  result r[4];
  conch_call *calls[4];
  int i;
  conch_client *c = client(&m);
  (void)state;

  for (i = 0; i < 3; i++) {
    calls[i] = start(c, &unary, &r[i]);
  }
  memx_pump(&m, 16);
  h2peer_new(&h1, m.conns[0], 100, 0);
  h2peer_exchange(&m, &h1);
  assert_int_equal(h1.nstreams, 3);
  /* The server will finish streams 1 and 3, not 5. */
  assert_int_equal(nghttp2_submit_goaway(h1.s, NGHTTP2_FLAG_NONE,
                                         h1.streams[1].id, NGHTTP2_NO_ERROR,
                                         NULL, 0),
                   0);
  h2peer_exchange(&m, &h1);
  /* Stream 5 was not processed: it went to a new connection, as does a
     call started now. */
  assert_int_equal(m.opens, 2);
  assert_int_equal(r[2].closes, 0);
  calls[3] = start(c, &unary, &r[3]);
  memx_pump(&m, 16);
  h2peer_new(&h2, m.conns[1], 100, 0);
  h2peer_exchange(&m, &h2);
  assert_int_equal(h2.nstreams, 2);
  assert_int_equal(h1.nstreams, 3); /* nothing new on the old one */
  /* The old connection drains: its two streams finish there. */
  assert_true(m.conns[0]->open);
  h2peer_reply(&h1, h1.streams[0].id, PROTO, "a", 1, NULL);
  h2peer_exchange(&m, &h1);
  assert_true(m.conns[0]->open); /* one to go */
  h2peer_reply(&h1, h1.streams[1].id, PROTO, "b", 1, NULL);
  h2peer_exchange(&m, &h1);
  assert_int_equal(r[0].code, CONCH_CODE_OK);
  assert_int_equal(r[1].code, CONCH_CODE_OK);
  assert_false(m.conns[0]->open); /* drained and closed */
  for (i = 0; i < 2; i++) {
    h2peer_reply(&h2, h2.streams[i].id, PROTO, "c", 1, NULL);
  }
  h2peer_exchange(&m, &h2);
  for (i = 0; i < 4; i++) {
    assert_int_equal(r[i].closes, 1);
    assert_int_equal(r[i].code, CONCH_CODE_OK);
    conch_call_free(calls[i]);
  }
  assert_true(m.conns[1]->open);
  conch_client_free(c);
  h2peer_free(&h1);
  h2peer_free(&h2);
  memx_clear(&m);
}

/* ---- PING ------------------------------------------------------------ */

/* A peer that answers: PINGs go out at each idle interval while a call is
   open and never kill the connection; none without calls; a GOAWAY
   "too_many_pings" doubles the interval (gRPC's rule). */
static void test_ping_answered(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client_with(&m, 0, 0, 1000, NULL);
  conch_call *call = start(c, &sstream, &r);
  conch_conn *conn;
  int i;
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  conn = conn_of(c, 0);
  for (i = 1; i <= 3; i++) {
    memx_advance(&m, 1000);
    h2peer_io(&h); /* reads the PING, answers it */
    assert_int_equal(h.pings, i);
    memx_pump(&m, 16);
    assert_int_equal(conn->ping_sent, 0); /* the answer counted */
  }
  memx_advance(&m, 600); /* past a PING timeout: nothing outstanding */
  assert_int_equal(r.closes, 0);
  h2peer_reply(&h, h.streams[0].id, STREAM, "\x02\x00\x00\x00\x02{}", 7, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.code, CONCH_CODE_OK);
  conch_call_free(call);
  for (i = 0; i < 5; i++) {
    memx_advance(&m, 1000);
    h2peer_io(&h);
  }
  assert_int_equal(h.pings, 3); /* no calls, no pings */
  assert_int_equal(c->o.keepalive_ms, 1000);
  assert_int_equal(nghttp2_submit_goaway(h.s, NGHTTP2_FLAG_NONE, 0,
                                         NGHTTP2_ENHANCE_YOUR_CALM,
                                         (const uint8_t *)"too_many_pings", 14),
                   0);
  h2peer_exchange(&m, &h);
  assert_int_equal(c->o.keepalive_ms, 2000);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* ---- Back-pressure ------------------------------------------------------ */

/* A stream whose window is full (a pull-mode call that takes nothing)
   stops only itself: the session still reads, and another call on the
   same connection completes.  The connection window is no larger than
   the stream's, so it must have come back at once (on_data_chunk) for
   the other answer to fit. */
static void test_stalled_stream_holds_no_other(void **state) {
  memx m;
  h2peer h;
  result r;
  conch_client *c = client_with(&m, 65535, 65535, 0, NULL);
  conch_call *stalled = start(c, &sstream, NULL), *other;
  size_t len;
  uint8_t *body = stream_body(64, 16384, &len);
  conch_conn *conn;
  (void)state;

  memx_pump(&m, 16);
  h2peer_new(&h, memx_last(&m), 100, 0);
  h2peer_exchange(&m, &h);
  h2peer_reply(&h, h.streams[0].id, STREAM, body, len, NULL);
  h2peer_exchange(&m, &h);
  conn = conn_of(c, 0);
  assert_true(h.streams[0].body_off <= 65535);
  assert_true(conn->ops->want_read(conn));
  other = start(c, &unary, &r);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 2);
  h2peer_reply(&h, h.streams[1].id, PROTO, "ok", 2, NULL);
  h2peer_exchange(&m, &h);
  assert_int_equal(r.closes, 1);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_false(conch_call_done(stalled));
  assert_true(h.streams[0].body_off <= 65535);
  assert_true(h.conn_credit >= h.streams[0].body_off);
  assert_int_equal(h.streams[0].credit, 0);
  conch_call_free(other);
  conch_call_free(stalled);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
  free(body);
}

/* A transport that takes nothing: the session stops moving output into
   the filter at the high-water mark, the call's buffer fills and says
   CONCH_ERR_AGAIN; once writes go through, every byte arrives. */
static void test_output_high_water(void **state) {
  nghttp2_settings_entry iv[2] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0x7fffffff}};
  static uint8_t chunk[65536];
  memx m;
  h2peer h;
  result r;
  conch_client *c = client(&m);
  conch_call *call = start(c, &cstream, &r);
  conch_conn *conn;
  size_t sent = 0;
  int i, rv = 0;
  (void)state;

  memset(chunk, 'z', sizeof(chunk));
  memx_pump(&m, 16);
  h2peer_new2(&h, memx_last(&m), iv, 2, 0);
  assert_int_equal(nghttp2_submit_window_update(h.s, NGHTTP2_FLAG_NONE, 0,
                                                0x7fffffff - 65535),
                   0);
  h2peer_exchange(&m, &h);
  assert_int_equal(h.nstreams, 1);
  conn = conn_of(c, 0);
  m.conns[0]->write_block = 1;
  for (i = 0; i < 1000; i++) {
    rv = conch_call_send_raw(call, chunk, sizeof(chunk));
    if (rv != 0) {
      break;
    }
    sent += sizeof(chunk) + 5;
    memx_pump(&m, 16);
  }
  assert_int_equal(rv, CONCH_ERR_AGAIN);
  /* Held: at the mark, and at most one frame past it. */
  assert_true(conch__filter_out_size(conn) >= CONCH_OUT_HIGH_WATER);
  assert_true(conch__filter_out_size(conn) <= CONCH_OUT_HIGH_WATER + 16384 + 9);
  assert_true(sent < 2 * CONCH_OUT_HIGH_WATER + (4u << 20));
  m.conns[0]->write_block = 0;
  for (i = 0; i < 1000 && h.streams[0].data_in < sent; i++) {
    h2peer_exchange(&m, &h);
  }
  assert_int_equal(h.streams[0].data_in, sent);
  assert_int_equal(conch_call_close_send(call), 0);
  h2peer_exchange(&m, &h);
  assert_true(h.streams[0].ended);
  conch_call_free(call);
  conch_client_free(c);
  h2peer_free(&h);
  memx_clear(&m);
}

/* ---- Every allocation failing ------------------------------------------ */

static int acceptable(conch_code code) {
  return code == CONCH_CODE_OK || code == CONCH_CODE_CANCELED ||
         code == CONCH_CODE_RESOURCE_EXHAUSTED || code == CONCH_CODE_INTERNAL ||
         code == CONCH_CODE_UNAVAILABLE;
}

/* One run: a unary call answered, a stream call reset by the server, a
   GOAWAY, a stream window's worth of DATA, a PING; on a client whose
   every allocation goes through failmem.  Returns 0 when all went as
   without failures. */
static int oom_run(void) {
  memx m;
  h2peer h;
  result ru, rs;
  conch_client *c;
  conch_call *u = NULL, *s = NULL;
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  size_t len;
  uint8_t *body = stream_body(8, 4096, &len);
  int rv = 0;

  memset(&ru, 0, sizeof(ru));
  memset(&rs, 0, sizeof(rs));
  c = client_with(&m, 65535, 1u << 20, 1000, failmem_hooks());
  if (c == NULL) {
    free(body);
    return CONCH_ERR_NOMEM;
  }
  o.timeout_ms = 600000;
  if (conch_call_start(c, &unary, &o, &handler, &ru, &u) != 0 ||
      conch_call_send_raw(u, "hi", 2) != 0 ||
      conch_call_start(c, &sstream, &o, &handler, &rs, &s) != 0 ||
      conch_call_send_raw(s, "hi", 2) != 0) {
    rv = CONCH_ERR_NOMEM;
    goto out;
  }
  memx_pump(&m, 16);
  if (memx_last(&m) == NULL) {
    rv = CONCH_ERR_NOMEM;
    goto out;
  }
  h2peer_new(&h, memx_last(&m), 100, 0);
  h.lenient = 1;
  h2peer_exchange(&m, &h);
  if (h.nstreams == 2) {
    h2peer_reply(&h, h.streams[0].id, PROTO, "ok", 2, NULL);
    /* The messages without the end-stream one: the stream stays open. */
    h2peer_reply(&h, h.streams[1].id, STREAM, body, len - 7, h2peer_keep_open);
    h2peer_exchange(&m, &h);
    memx_advance(&m, 1000);
    h2peer_exchange(&m, &h);
    if (!h.dead) {
      (void)nghttp2_submit_rst_stream(h.s, NGHTTP2_FLAG_NONE, h.streams[1].id,
                                      NGHTTP2_CANCEL);
      (void)nghttp2_submit_goaway(h.s, NGHTTP2_FLAG_NONE, h.streams[1].id,
                                  NGHTTP2_NO_ERROR, NULL, 0);
    }
    h2peer_exchange(&m, &h);
  }
  if (ru.closes != 1 || ru.code != CONCH_CODE_OK || rs.msgs != 8 ||
      rs.code != CONCH_CODE_CANCELED || h.pings != 1) {
    rv = CONCH_ERR_RPC;
  }
  /* Memory ran out somewhere: each call ended as such a failure ends
     one, or is still waiting (the server answered what it saw). */
  assert_true(ru.closes == 0 || acceptable(ru.code));
  assert_true(rs.closes == 0 || acceptable(rs.code));
  h2peer_free(&h);
out:
  conch_call_free(u);
  conch_call_free(s);
  conch_client_free(c);
  memx_clear(&m);
  free(body);
  return rv;
}

static void test_every_allocation_failing(void **state) {
  long live0 = failmem_live_blocks();
  size_t n;
  int rv;
  (void)state;

  failmem_fail_at((size_t)-1);
  assert_int_equal(oom_run(), 0);
  for (n = 0;; n++) {
    failmem_fail_at(n);
    rv = oom_run();
    assert_int_equal(failmem_live_blocks(), live0);
    if (!failmem_fired()) {
      assert_int_equal(rv, 0);
      break;
    }
  }
  print_message("%zu allocations, each failed once\n", n);
  assert_true(n > 40);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_settings),
      cmocka_unit_test(test_empty_request_no_data),
      cmocka_unit_test(test_receive_window),
      cmocka_unit_test(test_push_paused),
      cmocka_unit_test(test_message_over_window),
      cmocka_unit_test(test_large_frames_in_place),
      cmocka_unit_test(test_unary_body_in_place),
      cmocka_unit_test(test_send_window),
      cmocka_unit_test(test_resets),
      cmocka_unit_test(test_refused_retried_once),
      cmocka_unit_test(test_goaway_drains),
      cmocka_unit_test(test_ping_answered),
      cmocka_unit_test(test_stalled_stream_holds_no_other),
      cmocka_unit_test(test_output_high_water),
      cmocka_unit_test(test_every_allocation_failing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
