/* conch serve over HTTP/1.1, as envd serves its clients: raw sockets (the
   HTTP/1.1 client of tests/support/h1raw.h, independent of the server's
   parser) and curl --http1.1.  Unary calls (Content-Length and chunked bodies),
   a Start stream read chunk by chunk while the process runs, StreamInput with a
   chunked body, keep-alive, pipelining, Expect: 100-continue, malformed and
   oversized requests, HTTP/1.0, /health, the access token, a client leaving
   mid-stream, a slow reader, TLS with ALPN http/1.1, and shutdown with HTTP/1.1
   connections open. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "h1raw.h"
#include "support.h"

#define SVC "/process.Process/"
#define WAIT_MS 10000

static serve_peer srv; /* defaults */
static serve_peer tok; /* --access-token secret */

static int group_setup(void **state) {
  static const char *const tok_args[] = {"--access-token", "secret", NULL};

  (void)state;
  if (serve_start(&srv, NULL) != 0 || serve_start(&tok, tok_args) != 0) {
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  int a;
  int b;

  (void)state;
  a = serve_stop(&srv, 10000);
  b = serve_stop(&tok, 10000);
  return a == 0 && b == 0 ? 0 : -1;
}

/* ---- process.Process messages -------------------------------------------
 */

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  uint8_t *p;

  *len = protobuf_c_message_get_packed_size(m);
  p = malloc(*len + 1);
  assert_non_null(p);
  protobuf_c_message_pack(m, p);
  return p;
}

/* A StartRequest envelope for argv (NULL-terminated), with |tag|. */
static uint8_t *start_env(size_t *len, const char *tag, char **argv) {
  Process__StartRequest req = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
  size_t n = 0;

  while (argv[n + 1] != NULL) {
    n++;
  }
  cfg.cmd = argv[0];
  cfg.n_args = n;
  cfg.args = argv + 1;
  req.process = &cfg;
  if (tag != NULL) {
    req._tag_case = PROCESS__START_REQUEST___TAG_TAG;
    req.tag = (char *)tag;
  }
  return envelope(0, &req.base, len);
}

static uint8_t *signal_req(size_t *len, pid_t pid, int sig) {
  Process__SendSignalRequest req = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector sel = PROCESS__PROCESS_SELECTOR__INIT;

  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = (uint32_t)pid;
  req.process = &sel;
  req.signal = (Process__Signal)sig;
  return pack(&req.base, len);
}

/* What a Start stream delivered so far. */
typedef struct events {
  pid_t pid;
  char out[65536];
  size_t outlen;
  int ended;
  char status[128];
  int end_stream; /* the end-stream envelope arrived */
  char end_json[256];
  size_t used; /* body bytes decoded */
} events;

/* Decodes the complete envelopes of |r->body| past |ev->used|. */
static void decode(events *ev, const h1raw_resp *r) {
  while (r->len - ev->used >= 5) {
    const uint8_t *p = r->body + ev->used;
    size_t n = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) |
               ((size_t)p[3] << 8) | p[4];
    Process__StartResponse *m;

    if (r->len - ev->used < 5 + n) {
      return;
    }
    ev->used += 5 + n;
    if (p[0] & 2) {
      ev->end_stream = 1;
      snprintf(ev->end_json, sizeof(ev->end_json), "%.*s", (int)n, p + 5);
      continue;
    }
    m = process__start_response__unpack(NULL, n, p + 5);
    assert_non_null(m);
    assert_non_null(m->event);
    switch (m->event->event_case) {
    case PROCESS__PROCESS_EVENT__EVENT_START:
      ev->pid = (pid_t)m->event->start->pid;
      note_pid(ev->pid);
      break;
    case PROCESS__PROCESS_EVENT__EVENT_DATA:
      if (m->event->data->output_case ==
              PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT &&
          ev->outlen + m->event->data->stdout.len < sizeof(ev->out)) {
        memcpy(ev->out + ev->outlen, m->event->data->stdout.data,
               m->event->data->stdout.len);
        ev->outlen += m->event->data->stdout.len;
        ev->out[ev->outlen] = '\0';
      }
      break;
    case PROCESS__PROCESS_EVENT__EVENT_END:
      ev->ended = 1;
      snprintf(ev->status, sizeof(ev->status), "%s", m->event->end->status);
      break;
    default:
      break;
    }
    process__start_response__free_unpacked(m, NULL);
  }
}

/* Sends a Start on |c| and reads up to its StartEvent. */
static void start_on(h1raw *c, h1raw_resp *r, events *ev, const char *tag,
                     char **argv) {
  size_t len;
  uint8_t *env = start_env(&len, tag, argv);
  char v[64];

  memset(ev, 0, sizeof(*ev));
  h1raw_post(c, SVC "Start", "application/connect+proto", NULL, env, len);
  free(env);
  assert_int_equal(h1raw_read_head(c, r, WAIT_MS), 0);
  assert_int_equal(r->status, 200);
  assert_non_null(h1raw_header(r, "transfer-encoding", v, sizeof(v)));
  assert_string_equal(v, "chunked");
  assert_null(h1raw_header(r, "content-length", v, sizeof(v)));
  assert_non_null(h1raw_header(r, "content-type", v, sizeof(v)));
  assert_string_equal(v, "application/connect+proto");
  r->chunked = 1;
  while (ev->pid == 0) {
    assert_true(h1raw_read_chunk(c, r, WAIT_MS) > 0);
    decode(ev, r);
  }
}

/* Reads the rest of a Start stream. */
static void finish_stream(h1raw *c, h1raw_resp *r, events *ev) {
  long n;

  do {
    n = h1raw_read_chunk(c, r, WAIT_MS);
    assert_true(n >= 0);
    decode(ev, r);
  } while (n > 0);
  assert_true(ev->end_stream);
}

static int unary(int port, const char *path, const char *extra,
                 const uint8_t *body, size_t len, h1raw_resp *r) {
  h1raw *c = h1raw_open(port);
  int rv;

  h1raw_post(c, path, "application/proto", extra, body, len);
  rv = h1raw_read_resp(c, r, 0, WAIT_MS);
  h1raw_close(c);
  return rv;
}

static void kill_pid(pid_t pid) {
  size_t len;
  uint8_t *req = signal_req(&len, pid, PROCESS__SIGNAL__SIGNAL_SIGKILL);
  h1raw_resp r;

  assert_int_equal(unary(srv.port, SVC "SendSignal", NULL, req, len, &r), 0);
  assert_int_equal(r.status, 200);
  free(req);
  h1raw_resp_free(&r);
}

static void assert_health(int port) {
  h1raw *c = h1raw_open(port);
  h1raw_resp r;

  h1raw_sendf(c, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  h1raw_close(c);
}

/* ---- Tests ----------------------------------------------------------------
 */

static void test_health_keepalive(void **state) {
  h1raw *c = h1raw_open(srv.port);
  h1raw_resp r;
  char v[64];

  (void)state;
  h1raw_sendf(c, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  assert_null(h1raw_header(&r, "connection", v, sizeof(v)));
  /* An IMF-fixdate, e.g. "Mon, 30 Nov 2026 15:00:31 GMT" (RFC 9110). */
  assert_non_null(h1raw_header(&r, "date", v, sizeof(v)));
  assert_int_equal(strlen(v), 29);
  assert_string_equal(v + 25, " GMT");
  h1raw_sendf(c, "HEAD /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 1, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  /* The third request on the same connection. */
  h1raw_post(c, SVC "List", "application/proto", NULL, NULL, 0);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(h1raw_header(&r, "content-length", v, sizeof(v)));
  assert_int_equal((size_t)strtoul(v, NULL, 10), r.len);
  h1raw_resp_free(&r);
  /* Routing and Connect errors come through as over HTTP/2. */
  h1raw_sendf(c, "GET " SVC "List HTTP/1.1\r\nHost: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 405);
  assert_non_null(h1raw_header(&r, "allow", v, sizeof(v)));
  assert_string_equal(v, "POST");
  h1raw_post(c, "/nope", "application/proto", NULL, NULL, 0);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 404);
  h1raw_resp_free(&r);
  h1raw_post(c, SVC "List", "text/plain", NULL, NULL, 0);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 415);
  h1raw_resp_free(&r);
  assert_false(h1raw_at_eof(c, 100));
  h1raw_close(c);
}

static void test_unary_list_and_signal(void **state) {
  char *argv[] = {"sleep", "30", NULL};
  h1raw *a = h1raw_open(srv.port);
  h1raw_resp sr;
  h1raw_resp r;
  events ev;
  Process__ListResponse *list;
  uint8_t *req;
  size_t len;
  size_t i;
  int found = 0;
  char v[64];

  (void)state;
  start_on(a, &sr, &ev, "h1-sleep", argv);
  assert_true(ev.pid > 0);
  /* List, binary proto, on another connection. */
  assert_int_equal(unary(srv.port, SVC "List", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 200);
  assert_non_null(h1raw_header(&r, "content-type", v, sizeof(v)));
  assert_string_equal(v, "application/proto");
  list = process__list_response__unpack(NULL, r.len, r.body);
  assert_non_null(list);
  for (i = 0; i < list->n_processes; i++) {
    if ((pid_t)list->processes[i]->pid == ev.pid) {
      found = 1;
      assert_string_equal(list->processes[i]->tag, "h1-sleep");
      assert_string_equal(list->processes[i]->config->cmd, "sleep");
    }
  }
  assert_true(found);
  process__list_response__free_unpacked(list, NULL);
  h1raw_resp_free(&r);
  /* SendSignal SIGKILL: the stream on the first connection ends. */
  req = signal_req(&len, ev.pid, PROCESS__SIGNAL__SIGNAL_SIGKILL);
  assert_int_equal(unary(srv.port, SVC "SendSignal", NULL, req, len, &r), 0);
  free(req);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 0);
  h1raw_resp_free(&r);
  finish_stream(a, &sr, &ev);
  assert_true(ev.ended);
  assert_string_equal(ev.status, "signal: killed");
  assert_string_equal(ev.end_json, "{}");
  h1raw_resp_free(&sr);
  /* A Connect error of a unary call: HTTP status and JSON. */
  req = signal_req(&len, ev.pid, PROCESS__SIGNAL__SIGNAL_SIGKILL);
  h1raw_post(a, SVC "SendSignal", "application/proto", NULL, req, len);
  free(req);
  assert_int_equal(h1raw_read_resp(a, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 404);
  assert_non_null(h1raw_header(&r, "content-type", v, sizeof(v)));
  assert_string_equal(v, "application/json");
  assert_non_null(strstr((char *)r.body, "\"not_found\""));
  h1raw_resp_free(&r);
  h1raw_close(a);
}

static void test_stream_live(void **state) {
  char *argv[] = {"sh", "-c", "echo a; sleep 1; echo b", NULL};
  h1raw *c = h1raw_open(srv.port);
  h1raw_resp r;
  events ev;
  long long t_a = 0;
  long long t_end;

  (void)state;
  start_on(c, &r, &ev, NULL, argv);
  /* "a" arrives while the process still sleeps. */
  while (strstr(ev.out, "a") == NULL) {
    assert_true(h1raw_read_chunk(c, &r, WAIT_MS) > 0);
    decode(&ev, &r);
  }
  t_a = conch_now_ms();
  assert_false(ev.ended);
  assert_string_equal(ev.out, "a\n");
  finish_stream(c, &r, &ev);
  t_end = conch_now_ms();
  assert_string_equal(ev.out, "a\nb\n");
  assert_true(ev.ended);
  assert_string_equal(ev.status, "exit status 0");
  assert_true(t_end - t_a >= 700);
  /* Chunks as the messages were produced (b, the EndEvent and the
     end-stream message may share one). */
  assert_true(r.nchunks >= 2);
  h1raw_resp_free(&r);
  assert_false(h1raw_at_eof(c, 50));
  h1raw_close(c);
}

/* The bytes of |p| as chunks of |step|, with an extension and trailers. */
static void send_chunked(h1raw *c, const uint8_t *p, size_t n, size_t step) {
  while (n > 0) {
    size_t k = n < step ? n : step;

    h1raw_sendf(c, "%zx;ext=1\r\n", k);
    h1raw_send(c, p, k);
    h1raw_send(c, "\r\n", 2);
    p += k;
    n -= k;
    conch_sleep_ms(20);
  }
  h1raw_sendf(c, "0\r\nX-Trailer: t\r\n\r\n");
}

static uint8_t *si_start_env(size_t *len, pid_t pid) {
  Process__StreamInputRequest m = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__StartEvent st =
      PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;
  Process__ProcessSelector sel = PROCESS__PROCESS_SELECTOR__INIT;

  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = (uint32_t)pid;
  st.process = &sel;
  m.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
  m.start = &st;
  return envelope(0, &m.base, len);
}

static uint8_t *si_data_env(size_t *len, const char *data) {
  Process__StreamInputRequest m = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__DataEvent de =
      PROCESS__STREAM_INPUT_REQUEST__DATA_EVENT__INIT;
  Process__ProcessInput in = PROCESS__PROCESS_INPUT__INIT;

  in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
  in.stdin.data = (uint8_t *)data;
  in.stdin.len = strlen(data);
  de.input = &in;
  m.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA;
  m.data = &de;
  return envelope(0, &m.base, len);
}

/* A StreamInput body: start, then one data event. */
static uint8_t *stream_input(size_t *len, pid_t pid, const char *data) {
  size_t la;
  size_t lb;
  uint8_t *ea = si_start_env(&la, pid);
  uint8_t *eb = si_data_env(&lb, data);
  uint8_t *out = malloc(la + lb);

  assert_non_null(out);
  memcpy(out, ea, la);
  memcpy(out + la, eb, lb);
  free(ea);
  free(eb);
  *len = la + lb;
  return out;
}

/* |p| as one chunk: size line, bytes, CRLF. */
static uint8_t *as_chunk(const uint8_t *p, size_t n, size_t *len) {
  uint8_t *out = malloc(n + 32);
  int k;

  assert_non_null(out);
  k = snprintf((char *)out, 32, "%zx\r\n", n);
  memcpy(out + k, p, n);
  memcpy(out + (size_t)k + n, "\r\n", 2);
  *len = (size_t)k + n + 2;
  return out;
}

static void test_chunked_request(void **state) {
  char *argv[] = {"cat", NULL};
  h1raw *a = h1raw_open(srv.port);
  h1raw *b = h1raw_open(srv.port);
  h1raw_resp sr;
  h1raw_resp r;
  events ev;
  uint8_t *body;
  size_t len;

  (void)state;
  start_on(a, &sr, &ev, NULL, argv);
  /* StreamInput (a client stream), its body chunked and sent in pieces
     split inside the envelopes. */
  body = stream_input(&len, ev.pid, "hello over h1\n");
  h1raw_sendf(b, "POST " SVC "StreamInput HTTP/1.1\r\nHost: localhost\r\n"
                 "Content-Type: application/connect+proto\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n");
  send_chunked(b, body, len, 7);
  free(body);
  assert_int_equal(h1raw_read_resp(b, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h1raw_resp_free(&r);
  while (strstr(ev.out, "hello over h1\n") == NULL) {
    assert_true(h1raw_read_chunk(a, &sr, WAIT_MS) > 0);
    decode(&ev, &sr);
  }
  /* A unary call with a chunked body, on the same connection. */
  body = signal_req(&len, ev.pid, PROCESS__SIGNAL__SIGNAL_SIGKILL);
  h1raw_sendf(b, "POST " SVC "SendSignal HTTP/1.1\r\nHost: localhost\r\n"
                 "Content-Type: application/proto\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n");
  send_chunked(b, body, len, 3);
  free(body);
  assert_int_equal(h1raw_read_resp(b, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h1raw_resp_free(&r);
  finish_stream(a, &sr, &ev);
  assert_string_equal(ev.status, "signal: killed");
  h1raw_resp_free(&sr);
  h1raw_close(a);
  h1raw_close(b);
}

static void test_pipelining(void **state) {
  char *argv[] = {"sh", "-c", "sleep 0.5; echo x", NULL};
  h1raw *c = h1raw_open(srv.port);
  size_t len;
  uint8_t *env = start_env(&len, NULL, argv);
  char head[512];
  uint8_t *all;
  size_t n;
  h1raw_resp r;
  events ev;
  int hn;
  static const char rest[] =
      "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
      "POST " SVC "List HTTP/1.1\r\nHost: localhost\r\n"
      "Content-Type: application/proto\r\nContent-Length: 0\r\n\r\n"
      "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";

  (void)state;
  /* Three requests behind a stream, in one write: each waits its turn. */
  hn = snprintf(head, sizeof(head),
                "POST " SVC "Start HTTP/1.1\r\nHost: localhost\r\n"
                "Content-Type: application/connect+proto\r\n"
                "Content-Length: %zu\r\n\r\n",
                len);
  n = (size_t)hn + len + sizeof(rest) - 1;
  all = malloc(n);
  assert_non_null(all);
  memcpy(all, head, (size_t)hn);
  memcpy(all + hn, env, len);
  memcpy(all + (size_t)hn + len, rest, sizeof(rest) - 1);
  h1raw_send(c, all, n);
  free(all);
  free(env);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  memset(&ev, 0, sizeof(ev));
  decode(&ev, &r);
  assert_string_equal(ev.out, "x\n");
  assert_true(ev.ended && ev.end_stream);
  h1raw_resp_free(&r);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  h1raw_resp_free(&r);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  assert_int_equal(c->len, 0);
  h1raw_close(c);
}

static void test_expect_continue(void **state) {
  h1raw *c = h1raw_open(srv.port);
  size_t len;
  uint8_t *req = signal_req(&len, 4000000, PROCESS__SIGNAL__SIGNAL_SIGKILL);
  h1raw_resp r;

  (void)state;
  h1raw_sendf(c,
              "POST " SVC "SendSignal HTTP/1.1\r\nHost: localhost\r\n"
              "Content-Type: application/proto\r\nContent-Length: %zu\r\n"
              "Expect: 100-continue\r\n\r\n",
              len);
  assert_int_equal(h1raw_read_head(c, &r, WAIT_MS), 0);
  assert_int_equal(r.status, 100);
  h1raw_send(c, req, len);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 404);
  assert_non_null(strstr((char *)r.body, "process with pid 4000000 not found"));
  h1raw_resp_free(&r);
  /* Refused before the body: no 100, and the body that follows anyway is
     read and dropped; the connection goes on. */
  h1raw_sendf(
      c,
      "POST /nope HTTP/1.1\r\nHost: localhost\r\nContent-Length: %zu\r\n"
      "Expect: 100-continue\r\n\r\n",
      len);
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 404);
  h1raw_resp_free(&r);
  h1raw_send(c, req, len);
  h1raw_sendf(c, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  /* An expectation we do not know. */
  h1raw_sendf(c, "POST " SVC
                 "List HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n"
                 "Expect: magic\r\n\r\n");
  assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 417);
  h1raw_resp_free(&r);
  assert_true(h1raw_at_eof(c, WAIT_MS));
  free(req);
  h1raw_close(c);
}

#define REFUSED(s, status)                                                     \
  h1raw_assert_refused(srv.port, s, sizeof(s) - 1, status)

static void test_malformed(void **state) {
  (void)state;
  REFUSED("\x01\x02 garbage\r\n\r\n", 400);
  REFUSED("GET /health HTTP/1.1\r\n\r\n", 400); /* no Host */
  REFUSED("GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
  REFUSED("GET /health HTTP/1.1\r\nHost: localhost\r\nBad Name: v\r\n\r\n",
          400);
  REFUSED("POST " SVC "List HTTP/1.1\r\nHost: localhost\r\n"
          "Transfer-Encoding: chunked\r\n\r\nzz\r\n",
          400);
  REFUSED("POST " SVC
          "List HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n"
          "Content-Length: 2\r\n\r\nab",
          400);
  REFUSED("GET health HTTP/1.1\r\nHost: localhost\r\n\r\n", 400);
  REFUSED("FOO /health HTTP/1.1\r\nHost: localhost\r\n\r\n", 405);
  REFUSED(
      "PUT /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n",
      405);
  REFUSED("CONNECT example.com:443 HTTP/1.1\r\nHost: localhost\r\n\r\n", 405);
  REFUSED("GET /health HTTP/2.0\r\nHost: localhost\r\n\r\n", 505);
  REFUSED("GET /health HTTP/1.0\r\n\r\n", 204);
  REFUSED(
      "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
      204);
  /* HTTP/1.0 keep-alive, with a length. */
  {
    h1raw *c = h1raw_open(srv.port);
    h1raw_resp r;
    char v[64];

    h1raw_sendf(c,
                "POST " SVC "List HTTP/1.0\r\nConnection: keep-alive\r\n"
                "Content-Type: application/proto\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(h1raw_read_resp(c, &r, 0, WAIT_MS), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(h1raw_header(&r, "connection", v, sizeof(v)));
    assert_string_equal(v, "keep-alive");
    h1raw_resp_free(&r);
    assert_false(h1raw_at_eof(c, 100));
    h1raw_close(c);
  }
  assert_health(srv.port);
}

static void test_oversized(void **state) {
  size_t n = 48 * 1024;
  char *big = malloc(n + 256);
  size_t k;
  int i;

  (void)state;
  assert_non_null(big);
  k = (size_t)snprintf(big, 256,
                       "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: ");
  memset(big + k, 'a', n);
  k += n;
  memcpy(big + k, "\r\n\r\n", 4);
  h1raw_assert_refused(srv.port, big, k + 4, 431);
  /* Too many fields. */
  k = (size_t)snprintf(big, 256, "GET /health HTTP/1.1\r\nHost: localhost\r\n");
  for (i = 0; i < 120; i++) {
    k += (size_t)snprintf(big + k, 32, "X-%d: y\r\n", i);
  }
  memcpy(big + k, "\r\n", 2);
  h1raw_assert_refused(srv.port, big, k + 2, 431);
  /* A request line past 8 KiB. */
  memcpy(big, "GET /", 5);
  memset(big + 5, 'a', 9000);
  k = 5 + 9000;
  k += (size_t)snprintf(big + k, 64, " HTTP/1.1\r\nHost: localhost\r\n\r\n");
  h1raw_assert_refused(srv.port, big, k, 414);
  free(big);
  assert_health(srv.port);
}

static void test_access_token(void **state) {
  h1raw_resp r;
  char v[128];

  (void)state;
  assert_int_equal(unary(tok.port, SVC "List", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 401);
  assert_non_null(h1raw_header(&r, "content-type", v, sizeof(v)));
  assert_string_equal(v, "application/json; charset=utf-8");
  assert_non_null(strstr((char *)r.body, "unauthorized access"));
  h1raw_resp_free(&r);
  assert_int_equal(
      unary(tok.port, SVC "List", "X-Access-Token: wrong\r\n", NULL, 0, &r), 0);
  assert_int_equal(r.status, 401);
  h1raw_resp_free(&r);
  assert_int_equal(
      unary(tok.port, SVC "List", "X-Access-Token: secret\r\n", NULL, 0, &r),
      0);
  assert_int_equal(r.status, 200);
  h1raw_resp_free(&r);
  assert_health(tok.port);
}

static void test_client_leaves_mid_stream(void **state) {
  char *argv[] = {"sh", "-c", "echo a; sleep 30", NULL};
  h1raw *c = h1raw_open(srv.port);
  h1raw_resp r;
  events ev;
  Process__ListResponse *list;
  size_t i;
  int found = 0;

  (void)state;
  start_on(c, &r, &ev, "h1-leave", argv);
  while (strstr(ev.out, "a") == NULL) {
    assert_true(h1raw_read_chunk(c, &r, WAIT_MS) > 0);
    decode(&ev, &r);
  }
  h1raw_resp_free(&r);
  h1raw_close(c);
  conch_sleep_ms(200);
  /* The process runs on, the server serves on. */
  assert_true(conch_proc_alive(ev.pid));
  assert_int_equal(unary(srv.port, SVC "List", NULL, NULL, 0, &r), 0);
  assert_int_equal(r.status, 200);
  list = process__list_response__unpack(NULL, r.len, r.body);
  assert_non_null(list);
  for (i = 0; i < list->n_processes; i++) {
    found |= (pid_t)list->processes[i]->pid == ev.pid;
  }
  process__list_response__free_unpacked(list, NULL);
  h1raw_resp_free(&r);
  assert_true(found);
  kill_pid(ev.pid);
  assert_health(srv.port);
}

static void test_slow_reader(void **state) {
  char *argv[] = {"cat", "/dev/urandom", NULL};
  h1raw *c = h1raw_open(srv.port);
  h1raw_resp r;
  events ev;
  long rss0 = proc_rss_kb(srv.pid);
  long rss1;
  long long w1 = 0;
  long long w2;
  long long got = 0;
  int rcv = 64 * 1024;
  int i;

  (void)state;
  setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
  start_on(c, &r, &ev, NULL, argv);
  h1raw_resp_free(&r);
  /* We read nothing more: the socket fills, the server's window to the
     bridge does too, and the writer blocks in write(2). */
  w2 = proc_wchar(ev.pid);
  for (i = 0; i < 40; i++) {
    w1 = w2;
    conch_sleep_ms(500);
    w2 = proc_wchar(ev.pid);
    if (w1 == w2 && w1 > 0) {
      break;
    }
  }
  rss1 = proc_rss_kb(srv.pid);
  fprintf(stderr,
          "h1 slow reader: writer at %lld then %lld bytes; server RSS %ld -> "
          "%ld KiB\n",
          w1, w2, rss0, rss1);
  assert_true(w1 > 0);
  assert_true(w1 == w2);
  assert_true(w1 < 16LL << 20);
  assert_true(rss1 - rss0 < 32 * 1024);
  /* Reading again lets it go on. */
  while (got < 4 << 20) {
    assert_int_equal(h1raw_fill(c, WAIT_MS), 1);
    got += (long long)c->len;
    c->len = 0;
  }
  assert_true(wait_wchar_above(ev.pid, w2, CONCH_WAIT_MS));
  h1raw_close(c);
  kill_pid(ev.pid);
}

/* StreamInput into a process that never reads its stdin: the server stops
   taking the body, and so does the socket; what it accepted is bounded. */
static void test_slow_writer(void **state) {
  char *argv[] = {"sleep", "30", NULL};
  h1raw *a = h1raw_open(srv.port);
  h1raw *b = h1raw_open(srv.port);
  h1raw_resp sr;
  h1raw_resp r;
  events ev;
  char *data = malloc(60001);
  uint8_t *env;
  uint8_t *frame;
  size_t len;
  size_t flen;
  size_t off = 0;
  long rss0 = proc_rss_kb(srv.pid);
  long rss1;
  long long sent = 0;
  long long last = conch_now_ms();
  int snd = 64 * 1024;

  (void)state;
  assert_non_null(data);
  memset(data, 'i', 60000);
  data[60000] = '\0';
  start_on(a, &sr, &ev, NULL, argv);
  setsockopt(b->fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
  h1raw_sendf(b, "POST " SVC "StreamInput HTTP/1.1\r\nHost: localhost\r\n"
                 "Content-Type: application/connect+proto\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n");
  env = si_start_env(&len, ev.pid);
  frame = as_chunk(env, len, &flen);
  h1raw_send(b, frame, flen);
  free(env);
  free(frame);
  /* Data events of 60000 bytes, a chunk each, until the socket stops
     taking them for a second. */
  env = si_data_env(&len, data);
  frame = as_chunk(env, len, &flen);
  free(env);
  free(data);
  fcntl(b->fd, F_SETFL, O_NONBLOCK);
  while (conch_now_ms() - last < 1000 && sent < 256LL << 20) {
    ssize_t w = send(b->fd, frame + off, flen - off, MSG_NOSIGNAL);

    if (w > 0) {
      sent += w;
      off = (off + (size_t)w) % flen;
      last = conch_now_ms();
    } else {
      assert_true(w < 0 && errno == EAGAIN);
      conch_sleep_ms(20);
    }
  }
  rss1 = proc_rss_kb(srv.pid);
  fprintf(stderr,
          "h1 slow writer: %lld bytes accepted; server RSS %ld -> %ld KiB\n",
          sent, rss0, rss1);
  assert_true(sent < 32LL << 20);
  assert_true(rss1 - rss0 < 32 * 1024);
  /* The process goes: the call ends with an error (its stdin is gone) in
     the middle of the body, and the connection closes after it. */
  kill_pid(ev.pid);
  finish_stream(a, &sr, &ev);
  h1raw_resp_free(&sr);
  fcntl(b->fd, F_SETFL, 0);
  assert_int_equal(h1raw_read_resp(b, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 200);
  assert_true(r.len > 5);
  assert_non_null(strstr((char *)r.body + 5, "\"error\""));
  h1raw_resp_free(&r);
  free(frame);
  h1raw_close(a);
  h1raw_close(b);
  assert_health(srv.port);
}

/* ---- curl --http1.1 --------------------------------------------------------
 */

static int sh(const char *fmt, ...) CONCH_PRINTF(1, 2);
static int sh(const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  int rv;

  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  rv = system(cmd);
  if (rv != 0) {
    fprintf(stderr, "failed (%d): %s\n", rv, cmd);
  }
  return rv;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;

  if (f == NULL) {
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  if (len != NULL) {
    *len = (size_t)n;
  }
  return buf;
}

static void spit(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");

  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  fclose(f);
}

static void test_curl(void **state) {
  char dir[] = "/tmp/conch-serve-h1-XXXXXX";
  char path[256];
  char *argv[] = {"echo", "over curl", NULL};
  const char *base = srv.url;
  uint8_t *env;
  size_t len;
  char *out;
  h1raw_resp r;
  events ev;

  (void)state;
  assert_non_null(mkdtemp(dir));
  /* Unary, and keep-alive across two URLs of one curl. */
  assert_int_equal(sh("curl -sS --http1.1 -o %s/list -w '%%{http_code} "
                      "%%{http_version}\\n' -H 'Content-Type: "
                      "application/proto' --data-binary '' %s" SVC "List "
                      "-o %s/list2 %s" SVC "List "
                      ">%s/codes 2>/dev/null",
                      dir, base, dir, base, dir),
                   0);
  snprintf(path, sizeof(path), "%s/codes", dir);
  out = slurp(path, NULL);
  assert_string_equal(out, "200 1.1\n200 1.1\n");
  free(out);
  assert_int_equal(sh("curl -sS -v --http1.1 -o /dev/null %s/health "
                      "-o /dev/null %s/health 2>&1 | grep -qi "
                      "'Re-using existing connection'",
                      base, base),
                   0);
  /* A Start stream; its request body chunked, with 100-continue. */
  env = start_env(&len, NULL, argv);
  snprintf(path, sizeof(path), "%s/start.req", dir);
  spit(path, env, len);
  free(env);
  assert_int_equal(
      sh("curl -sS -v --http1.1 -N -H 'Content-Type: "
         "application/connect+proto' -H 'Transfer-Encoding: chunked' -H "
         "'Expect: 100-continue' --data-binary @%s/start.req -o %s/start.out "
         "%s" SVC "Start 2>%s/start.err",
         dir, dir, base, dir),
      0);
  assert_int_equal(
      sh("grep -q '^< HTTP/1.1 100 Continue' %s/start.err && grep -q '^< "
         "Transfer-Encoding: chunked' %s/start.err",
         dir, dir),
      0);
  snprintf(path, sizeof(path), "%s/start.out", dir);
  memset(&r, 0, sizeof(r));
  memset(&ev, 0, sizeof(ev));
  r.body = (uint8_t *)slurp(path, &r.len);
  assert_non_null(r.body);
  decode(&ev, &r);
  assert_string_equal(ev.out, "over curl\n");
  assert_true(ev.ended && ev.end_stream);
  h1raw_resp_free(&r);
  /* /health and the token server's 401. */
  assert_int_equal(sh("test \"$(curl -s --http1.1 -o /dev/null -w "
                      "'%%{http_code}' %s/health)\" = 204",
                      base),
                   0);
  assert_int_equal(sh("test \"$(curl -s --http1.1 -o /dev/null -w "
                      "'%%{http_code}' -H 'Content-Type: application/proto' "
                      "--data-binary '' %s" SVC "List)\" = 401",
                      tok.url),
                   0);
  assert_int_equal(sh("rm -rf %s", dir), 0);
}

static void test_tls_alpn(void **state) {
  char dir[] = "/tmp/conch-serve-h1tls-XXXXXX";
  char cert[128];
  char key[128];
  char path[160];
  const char *args[5];
  serve_peer p;
  char *out;

  (void)state;
  assert_non_null(mkdtemp(dir));
  assert_int_equal(sh("sh " CONCH_SOURCE_DIR "/tests/interop/node/"
                      "make-certs.sh %s >/dev/null 2>&1",
                      dir),
                   0);
  snprintf(cert, sizeof(cert), "%s/server.pem", dir);
  snprintf(key, sizeof(key), "%s/server.key", dir);
  args[0] = "--tls-cert";
  args[1] = cert;
  args[2] = "--tls-key";
  args[3] = key;
  args[4] = NULL;
  assert_int_equal(serve_start(&p, args), 0);
  /* ALPN http/1.1; h2 preferred when offered; no ALPN at all is HTTP/1.1
     (or HTTP/2 with prior knowledge). */
  assert_int_equal(
      sh("for v in --http1.1 --http2 '--http1.1 --no-alpn' "
         "'--http2-prior-knowledge --no-alpn'; do curl -sS $v --cacert "
         "%s/ca.pem -o /dev/null -w '%%{http_code} %%{http_version}\\n' -H "
         "'Content-Type: application/proto' --data-binary '' "
         "%s" SVC "List; done >%s/codes",
         dir, p.url, dir),
      0);
  snprintf(path, sizeof(path), "%s/codes", dir);
  out = slurp(path, NULL);
  assert_string_equal(out, "200 1.1\n200 2\n200 1.1\n200 2\n");
  free(out);
  assert_int_equal(sh("test \"$(curl -s --http1.1 --cacert %s/ca.pem -o "
                      "/dev/null -w '%%{http_code}' %s/health %s/health)\" "
                      "= 204204",
                      dir, p.url, p.url),
                   0);
  assert_int_equal(serve_stop(&p, 10000), 0);
  assert_int_equal(sh("rm -rf %s", dir), 0);
}

/* SIGTERM with HTTP/1.1 connections open: an idle keep-alive one is
   closed at once, a stream ends (its process terminated) and then its
   connection, and the server exits 0. */
static void test_shutdown(void **state) {
  char *argv[] = {"sleep", "30", NULL};
  serve_peer p;
  h1raw *idle;
  h1raw *busy;
  h1raw_resp r;
  events ev;
  long long t0;

  (void)state;
  assert_int_equal(serve_start(&p, NULL), 0);
  idle = h1raw_open(p.port);
  h1raw_sendf(idle, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  assert_int_equal(h1raw_read_resp(idle, &r, 0, WAIT_MS), 0);
  assert_int_equal(r.status, 204);
  busy = h1raw_open(p.port);
  start_on(busy, &r, &ev, NULL, argv);
  t0 = conch_now_ms();
  kill(p.pid, SIGTERM);
  assert_true(h1raw_at_eof(idle, WAIT_MS));
  finish_stream(busy, &r, &ev);
  assert_string_equal(ev.status, "signal: terminated");
  h1raw_resp_free(&r);
  assert_true(h1raw_at_eof(busy, WAIT_MS));
  assert_int_equal(serve_stop(&p, 10000), 0);
  assert_true(conch_now_ms() - t0 < 8000);
  h1raw_close(idle);
  h1raw_close(busy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health_keepalive),
      cmocka_unit_test(test_unary_list_and_signal),
      cmocka_unit_test(test_stream_live),
      cmocka_unit_test(test_chunked_request),
      cmocka_unit_test(test_pipelining),
      cmocka_unit_test(test_expect_continue),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_oversized),
      cmocka_unit_test(test_access_token),
      cmocka_unit_test(test_client_leaves_mid_stream),
      cmocka_unit_test(test_slow_reader),
      cmocka_unit_test(test_slow_writer),
      cmocka_unit_test(test_curl),
      cmocka_unit_test(test_tls_alpn),
      cmocka_unit_test(test_shutdown),
  };

  if (getenv("SERVE_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
