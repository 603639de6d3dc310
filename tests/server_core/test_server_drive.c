/* Driving the server core the other ways: io hooks (an external loop that
   only knows what the hooks told it), connections handed over with
   conch_server_adopt() (a socket pair whose other end the client gets
   through its transport), the server's allocator hooks, and the API's
   refusals.  Each case runs a server thread of its own and calls it with
   conch's client. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>

#include "memxport.h"
#include "support.h" /* tests/server: raw HTTP/2 helpers */
#include "svc.h"
#include "loop_calls.h"
#include "wait.h"

/* ---- A loop driven by the hooks alone -------------------------------------- */

#define LOOP_FDS 64

typedef struct hook_loop {
  int fd[LOOP_FDS];
  unsigned ev[LOOP_FDS];
  int n;
  long long due; /* -1: no timer */
  int watch_calls, timer_calls;
} hook_loop;

static int hl_watch(int fd, unsigned events, void *ud) {
  hook_loop *l = ud;
  int i;
  l->watch_calls++;
  for (i = 0; i < l->n; i++) {
    if (l->fd[i] == fd) {
      break;
    }
  }
  if (events & CONCH_IO_REMOVE) {
    if (i < l->n) {
      l->fd[i] = l->fd[l->n - 1];
      l->ev[i] = l->ev[l->n - 1];
      l->n--;
    }
    return 0;
  }
  if (i == l->n) {
    if (l->n == LOOP_FDS) {
      return -1;
    }
    l->n++;
  }
  l->fd[i] = fd;
  l->ev[i] = events;
  return 0;
}

static int hl_timer(long ms, void *ud) {
  hook_loop *l = ud;
  l->timer_calls++;
  l->due = ms < 0 ? -1 : conch_now_ms() + ms;
  return 0;
}

typedef struct hooked {
  conch_server *s;
  hook_loop loop;
  atomic_int stop;
  atomic_int calls_live;
  pthread_t thread;
  char url[64];
} hooked;

static void *hooked_thread(void *arg) {
  hooked *h = arg;
  while (!atomic_load(&h->stop)) {
    struct pollfd p[LOOP_FDS];
    int n = h->loop.n, t = 20;
    for (int i = 0; i < n; i++) {
      p[i].fd = h->loop.fd[i];
      p[i].events = (short)(((h->loop.ev[i] & CONCH_IO_READ) ? POLLIN : 0) |
                            ((h->loop.ev[i] & CONCH_IO_WRITE) ? POLLOUT : 0));
      p[i].revents = 0;
    }
    if (h->loop.due >= 0) {
      long long d = h->loop.due - conch_now_ms();
      t = d < 0 ? 0 : (d < t ? (int)d : t);
    }
    int rv = poll(p, (nfds_t)n, t);
    if (rv < 0 && errno != EINTR) {
      abort();
    }
    for (int i = 0; i < n && rv > 0; i++) {
      unsigned ev = 0;
      if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        ev |= CONCH_IO_READ;
      }
      if (p[i].revents & POLLOUT) {
        ev |= CONCH_IO_WRITE;
      }
      if (ev != 0 && conch_server_on_io(h->s, p[i].fd, ev) != 0) {
        abort();
      }
    }
    if (h->loop.due >= 0 && conch_now_ms() >= h->loop.due) {
      h->loop.due = -1;
      if (conch_server_on_timer(h->s) != 0) {
        abort();
      }
    }
    atomic_store(&h->calls_live, (int)conch_server_calls(h->s));
  }
  return NULL;
}

/* Runs a server (made by svc.c's fixture, not started) under hooks. */
static void test_hooks(void **state) {
  fixture fx;
  hooked h;
  conch_io_hooks hooks = {hl_watch, hl_timer, NULL};
  (void)state;

  /* The fixture's server and service, driven here instead. */
  fx_start(&fx, NULL, 0);
  fx_pause(&fx);

  memset(&h, 0, sizeof(h));
  h.s = fx.s;
  h.loop.due = -1;
  hooks.user_data = &h.loop;
  assert_int_equal(conch_server_set_io_hooks(h.s, &hooks), 0);
  assert_true(h.loop.n == 1); /* the listener */
  snprintf(h.url, sizeof(h.url), "http://127.0.0.1:%d", conch_server_port(h.s));
  assert_int_equal(pthread_create(&h.thread, NULL, hooked_thread, &h), 0);

  /* Per protocol a unary call, a server stream and a deadline, which
     needs the timer hook. */
  loop_calls(h.url, "hooked");
  atomic_store(&h.stop, 1);
  pthread_join(h.thread, NULL);
  assert_true(h.loop.timer_calls > 0);
  assert_int_equal(conch_server_on_io(NULL, 0, 0), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_set_io_hooks(h.s, NULL), 0);
  assert_int_equal(h.loop.n, 0); /* everything was REMOVEd */
  conch_server_free(h.s);
}

/* ---- Adopted connections ---------------------------------------------------- */

typedef struct pair_xport {
  int client_end;
  int opens;
} pair_xport;

static int px_open(void *ud, const struct sockaddr *a, socklen_t l) {
  pair_xport *p = ud;
  (void)a;
  (void)l;
  p->opens++;
  return p->opens == 1 ? p->client_end : -ECONNREFUSED;
}
static int px_result(void *ud, int h) {
  (void)ud;
  (void)h;
  return 0;
}
static long px_read(void *ud, int h, void *buf, size_t len) {
  (void)ud;
  ssize_t n = read(h, buf, len);
  return n >= 0 ? (long)n : -(long)errno;
}
static long px_write(void *ud, int h, const void *buf, size_t len) {
  (void)ud;
  ssize_t n = send(h, buf, len, MSG_NOSIGNAL);
  return n >= 0 ? (long)n : -(long)errno;
}
static void px_close(void *ud, int h) {
  (void)ud;
  close(h);
}

static int calls_gone(void *arg) {
  return atomic_load(&((fixture *)arg)->calls_live) == 0;
}

static void test_adopt(void **state) {
  fixture fx;
  int sv[2];
  pair_xport px = {0, 0};
  conch_transport t = {px_open, px_result, px_read, px_write, px_close, &px};
  conch_client_opts *o;
  conch_client *c;
  conch_call *call;
  ProtobufCMessage *m;
  (void)state;

  fx_start(&fx, NULL, 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  px.client_end = sv[0];
  fx_pause(&fx); /* the server is used by one thread at a time */
  assert_int_equal(conch_server_adopt(fx.s, -1, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_adopt(fx.s, sv[1], NULL), 0);
  fx_resume(&fx);

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_transport(o, &t), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC), 0);
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", o), 0);
  conch_client_opts_free(o);
  assert_int_equal(conch_call_start(c, &m_bidi, NULL, NULL, NULL, &call), 0);
  for (uint32_t i = 0; i < 3; i++) {
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    req.payload.data = (uint8_t *)"pair";
    req.payload.len = 4;
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    assert_int_equal(conch_call_recv_sync(call, &m), 0);
    assert_int_equal(((Conchtest__V1__Response *)m)->index, i);
    conch_message_free(c, m);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), CONCH_ERR_EOF);
  conch_call_free(call);
  assert_int_equal(px.opens, 1);
  conch_client_free(c); /* closes its end: the server drops the connection */
  assert_true(conch_wait_until(calls_gone, &fx, CONCH_WAIT_MS));
  fx_stop(&fx);
}

static int held_one(void *arg) {
  return atomic_load(&((fixture *)arg)->held) >= 1;
}

/* conch_server_free() with a call a handler holds: the handler gets
   on_cancel (canceled) before it returns, and the client sees the
   connection go. */
static void test_free_with_call(void **state) {
  fixture fx;
  conch_client *c;
  conch_call *call;
  ProtobufCMessage *m;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  (void)state;

  fx_start(&fx, NULL, 0);
  assert_int_equal(conch_client_new(&c, fx.url, NULL), 0);
  req.delay_ms = 1;
  assert_int_equal(conch_call_start(c, &m_sstream, NULL, NULL, NULL, &call), 0);
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), 0);
  conch_message_free(c, m);
  assert_true(conch_wait_until(held_one, &fx, CONCH_WAIT_MS));
  fx_stop(&fx);
  assert_int_equal(atomic_load(&fx.cancels), 1);
  assert_int_equal(atomic_load(&fx.last_cancel_code), CONCH_CODE_CANCELED);
  assert_int_equal(conch_call_wait_sync(call), CONCH_ERR_RPC);
  assert_int_equal(conch_call_status(call)->code, CONCH_CODE_UNAVAILABLE);
  conch_call_free(call);
  conch_client_free(c);
}

static int idle_server(void *arg) {
  return atomic_load(&((fixture *)arg)->idle);
}

/* The idle timeout closes a connection without calls; the client opens
   a new one for its next call. */
static void test_idle_timeout(void **state) {
  fixture fx;
  conch_server_opts *o;
  conch_client *c;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *out = NULL;
  conch_status st;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_idle_timeout(o, -1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_idle_timeout(o, 100), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  assert_int_equal(conch_client_new(&c, fx.url, NULL), 0);
  conch_status_init(&st);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(
        conch_unary_sync(c, &m_unary, NULL, &req.base, &out, &st, NULL, NULL),
        0);
    conch_message_free(c, out);
    /* The server closes the connection by itself. */
    assert_true(conch_wait_until(idle_server, &fx, CONCH_WAIT_MS));
  }
  conch_client_free(c);
  fx_stop(&fx);
}

/* ---- The server's clock -------------------------------------------------- */

typedef struct fake_clock {
  int64_t now;
  int reads;
} fake_clock;

static int64_t fc_now(void *ud) {
  fake_clock *fc = ud;
  fc->reads++;
  return fc->now;
}

/* A client that connected and says nothing: reads find no bytes. */
static long silent_read(void *ud, int h, void *buf, size_t len) {
  (void)ud;
  (void)h;
  (void)buf;
  (void)len;
  return -EAGAIN;
}
static long silent_write(void *ud, int h, const void *buf, size_t len) {
  (void)ud;
  (void)h;
  (void)buf;
  return (long)len;
}
static void silent_close(void *ud, int h) {
  (void)h;
  (*(int *)ud)++;
}

/* The timers run on the clock the options name: a silent connection's
   timeout (the idle one, 1 s, under the header one) fires when that clock
   passes it, not before, whatever the real one does, and
   conch_server_timeout_ms() counts down on it. */
static void test_injected_clock(void **state) {
  fake_clock fc = {1000000, 0};
  int closed = 0;
  conch_server_transport t = {silent_read, silent_write, silent_close, NULL};
  conch_server_opts *o;
  conch_server *s;
  (void)state;

  t.user_data = &closed;
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_clock(NULL, fc_now, &fc),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_clock(o, fc_now, &fc), 0);
  assert_int_equal(conch_server_opts_set_idle_timeout(o, 1000), 0);
  assert_int_equal(conch_server_new(&s, o), 0);
  conch_server_opts_free(o);
  assert_int_equal(conch_server_adopt(s, 3, &t), 0);
  assert_true(fc.reads > 0); /* the timer was armed by the fake clock */
  assert_int_equal(conch_server_on_io(s, 3, CONCH_IO_READ), 0);
  assert_int_equal(conch_server_timeout_ms(s), 1000);

  fc.now += 400;
  assert_int_equal(conch_server_timeout_ms(s), 600);
  assert_int_equal(conch_server_on_timer(s), 0);
  assert_int_equal(closed, 0);

  /* Real time passing changes nothing. */
  usleep(20 * 1000);
  assert_int_equal(conch_server_timeout_ms(s), 600);

  fc.now += 599;
  assert_int_equal(conch_server_on_timer(s), 0);
  assert_int_equal(closed, 0);
  assert_int_equal(conch_server_timeout_ms(s), 1);

  fc.now += 1;
  assert_int_equal(conch_server_timeout_ms(s), 0);
  assert_int_equal(conch_server_on_timer(s), 0);
  assert_int_equal(closed, 1); /* said nothing: closed, not told GOAWAY */
  assert_true(conch_server_idle(s));
  conch_server_free(s);
}

/* ---- In memory: both ends through transports of their own ------------------ */

/* The server's end of a memx connection: it reads what the client wrote
   and writes what the client will read. */
static long mx_read(void *ud, int h, void *buf, size_t len) {
  memx_conn *mc = ud;
  size_t n = mc->out_len < len ? mc->out_len : len;
  (void)h;
  if (n == 0) {
    return mc->open ? -EAGAIN : 0;
  }
  memcpy(buf, mc->out, n);
  memmove(mc->out, mc->out + n, mc->out_len - n);
  mc->out_len -= n;
  return (long)n;
}
/* How much one write takes: an adopted transport may take little at a
   time without being full (the server then writes again at once). */
static size_t mx_take = SIZE_MAX;
static long mx_write(void *ud, int h, const void *buf, size_t len) {
  (void)h;
  if (len > mx_take) {
    len = mx_take;
  }
  memx_feed(ud, buf, len);
  return (long)len;
}
static int mx_closed;
static void mx_close(void *ud, int h) {
  (void)ud;
  (void)h;
  mx_closed++;
}

typedef struct mx_result {
  int closed;
  conch_code code;
  char payload[16];
} mx_result;

static void mx_on_message(conch_call *call, const ProtobufCMessage *msg,
                          void *ud) {
  const Conchtest__V1__Response *r = (const Conchtest__V1__Response *)msg;
  mx_result *res = ud;
  (void)call;
  snprintf(res->payload, sizeof(res->payload), "%.*s", (int)r->payload.len,
           (const char *)r->payload.data);
}
static void mx_on_close(conch_call *call, const conch_status *st,
                        const conch_metadata *trailers, void *ud) {
  mx_result *res = ud;
  (void)call;
  (void)trailers;
  res->closed = 1;
  res->code = st->code;
}

/* No sockets, no threads: the test moves every byte, so a run is the
   same every time.  |take|: mx_take; returns the most rounds a call
   took. */
static int run_in_memory(size_t take) {
  fixture fx;
  int most = 0;
  memx m;
  conch_client_opts *o;
  conch_client *c;
  memx_conn *mc = NULL;
  conch_server_transport st = {mx_read, mx_write, mx_close, NULL};
  const conch_call_handler h = {NULL, mx_on_message, NULL, NULL, mx_on_close};

  mx_take = take;
  mx_closed = 0;
  fx_start(&fx, NULL, 0);
  fx_pause(&fx); /* this thread drives the server from here on */
  memx_init(&m);
  assert_int_equal(conch_client_opts_new(&o), 0);
  memx_setup(&m, o);
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", o), 0);
  conch_client_opts_free(o);
  memx_attach(&m, c);

  for (int i = 0; i < 3; i++) { /* three calls on the one connection */
    conch_call *call;
    mx_result res = {0};
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call_opts co = CONCH_CALL_OPTS_INIT;

    co.timeout_ms = 60000;
    req.payload.data = (uint8_t *)"in memory";
    req.payload.len = 9;
    assert_int_equal(conch_call_start(c, &m_unary, &co, &h, &res, &call), 0);
    assert_int_equal(conch_call_send(call, &req.base), 0);
    int round;
    for (round = 0; round < 200 && !res.closed; round++) {
      memx_pump(&m, 10);
      mc = memx_last(&m);
      if (mc != NULL && st.user_data == NULL) {
        st.user_data = mc;
        assert_int_equal(conch_server_adopt(fx.s, mc->handle, &st), 0);
      }
      if (st.user_data != NULL) {
        assert_int_equal(conch_server_on_io(fx.s, mc->handle,
                                            CONCH_IO_READ | CONCH_IO_WRITE),
                         0);
      }
    }
    assert_true(res.closed);
    assert_int_equal(res.code, CONCH_CODE_OK);
    assert_string_equal(res.payload, "in memory");
    conch_call_free(call);
    most = round > most ? round : most;
  }
  assert_int_equal(m.opens, 1);
  conch_client_free(c);
  /* The client closed its end: the server sees the end and lets go. */
  assert_int_equal(conch_server_on_io(fx.s, mc->handle, CONCH_IO_READ), 0);
  assert_int_equal(mx_closed, 1);
  assert_int_equal(conch_server_idle(fx.s), 1);
  memx_clear(&m);
  conch_server_free(fx.s);
  mx_take = SIZE_MAX;
  return most;
}

static void test_in_memory(void **state) {
  (void)state;
  (void)run_in_memory(SIZE_MAX);
}

/* A transport that takes 3 bytes a write: the server writes again at
   once, as it did before its output moved onto filter.c (conch_filter),
   so a call takes no more turns than with one that takes everything;
   one write per turn would need dozens (a response is over 100 bytes). */
static void test_in_memory_short_writes(void **state) {
  int whole, shorts;
  (void)state;

  whole = run_in_memory(SIZE_MAX);
  shorts = run_in_memory(3);
  assert_true(whole > 0 && whole < 10);
  assert_int_equal(shorts, whole);
}

/* Refusals that change nothing. */
static void test_api_refusals(void **state) {
  conch_server_opts *o;
  conch_server *s;
  conch_method bad = m_unary;
  const conch_server_handler none = {NULL, NULL, NULL, NULL, NULL};
  (void)state;

  assert_int_equal(conch_server_opts_new(NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_compression(o, "gzip,nope"),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_compression(o, " zstd , gzip"), 0);
  assert_int_equal(conch_server_opts_set_max_header_list(o, 10),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_max_streams(o, 0), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_json_resolver(NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_json_resolver(o, NULL, NULL), 0);
  assert_int_equal(conch_server_new(&s, o), 0);
  conch_server_opts_free(o);
  assert_int_equal(conch_server_add_method(s, &m_unary, &none, NULL),
                   CONCH_ERR_INVALID);
  bad.path = "no-slash";
  assert_int_equal(conch_server_add_method(s, &bad, &none, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_listen(s, "127.0.0.1"), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_listen(s, "999.0.0.1:0"), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_listen(s, "127.0.0.1:70000"),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_listen(s, "localhost:0"), 0);
  assert_true(conch_server_port(s) > 0);
  assert_int_equal(conch_server_idle(s), 1);
  assert_int_equal(conch_server_shutdown(s), 0);
  assert_int_equal(conch_server_listen(s, "127.0.0.1:0"), CONCH_ERR_STATE);
  assert_int_equal(conch_server_run(s, 0), 0);
  conch_server_free(s);
  conch_server_free(NULL);
}

/* The connection policy under hooks: the header timeout's timer, a
   half-closed connection (no longer watched for reading) answered late by
   a deadline, and the listener's rest after a descriptor shortage (it is
   REMOVEd from the loop and watched again). */
static void test_hooks_policy(void **state) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  conch_io_hooks hooks = {hl_watch, hl_timer, NULL};
  static const char *const hdrs[] = {"content-type", "application/proto",
                                     "connect-timeout-ms", "300", NULL};
  conch_server_opts *o;
  struct rlimit old, low;
  struct sockaddr_in sa;
  int fill[256];
  size_t nfill = 0;
  int maxfd = 0, fd, port, rv;
  uint8_t body[32];
  size_t n;
  long long t0;
  DIR *d;
  struct dirent *e;
  fixture fx;
  hooked h;
  h2_conn *c;
  h2_resp r;
  (void)state;

  assert_int_equal(conch_server_opts_new(&o), 0);
  assert_int_equal(conch_server_opts_set_header_timeout(o, 300), 0);
  fx_start(&fx, o, 0);
  conch_server_opts_free(o);
  fx_pause(&fx);
  memset(&h, 0, sizeof(h));
  h.s = fx.s;
  h.loop.due = -1;
  hooks.user_data = &h.loop;
  assert_int_equal(conch_server_set_io_hooks(h.s, &hooks), 0);
  assert_int_equal(pthread_create(&h.thread, NULL, hooked_thread, &h), 0);
  port = conch_server_port(h.s);

  fd = tcp_open(port); /* a silent stranger */
  assert_true(fd >= 0);
  assert_int_equal(wait_closed(fd, 15000), 1);
  close(fd);

  req.delay_ms = 1; /* held until the deadline */
  n = conchtest__v1__request__pack(&req, body);
  assert_int_equal(h2_open(&c, port), 0);
  assert_true(h2_submit(c, "POST", SVC "Unary", hdrs, body, n, &r) > 0);
  assert_int_equal(h2_shutdown_write(c), 0);
  assert_int_equal(h2_run(c, 15000), 0);
  assert_int_equal(r.status, 504);
  assert_int_equal(wait_closed(h2_fd(c), 15000), 1);
  h2_resp_free(&r);
  h2_close(c);

  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  d = opendir("/proc/self/fd");
  assert_non_null(d);
  while ((e = readdir(d)) != NULL) {
    maxfd = atoi(e->d_name) > maxfd ? atoi(e->d_name) : maxfd;
  }
  closedir(d);
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)maxfd + 1;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
    /* valgrind keeps descriptors of its own up there and refuses. */
    print_message("cannot lower RLIMIT_NOFILE (%s): the shortage skipped\n",
                  strerror(errno));
    close(fd);
    atomic_store(&h.stop, 1);
    pthread_join(h.thread, NULL);
    assert_int_equal(conch_server_set_io_hooks(h.s, NULL), 0);
    conch_server_free(h.s);
    skip();
  }
  while (nfill < 256 && (fill[nfill] = open("/dev/null", O_RDONLY)) >= 0) {
    nfill++;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(wait_closed(fd, 15000), 1);
  close(fd);
  for (size_t i = 0; i < nfill; i++) {
    close(fill[i]);
  }
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
  req.delay_ms = 0;
  n = conchtest__v1__request__pack(&req, body);
  t0 = conch_now_ms();
  while ((rv = h2_request(port, "POST", SVC "Unary", hdrs, body, n, &r)) != 0 &&
         conch_now_ms() - t0 < 15000) {
    h2_resp_free(&r); /* arrived while the server still shed: again */
  }
  assert_int_equal(rv, 0);
  assert_int_equal(r.status, 200);
  h2_resp_free(&r);

  atomic_store(&h.stop, 1);
  pthread_join(h.thread, NULL);
  assert_int_equal(conch_server_set_io_hooks(h.s, NULL), 0);
  assert_int_equal(h.loop.n, 0);
  conch_server_free(h.s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hooks),
      cmocka_unit_test(test_adopt),
      cmocka_unit_test(test_api_refusals),
      cmocka_unit_test(test_free_with_call),
      cmocka_unit_test(test_idle_timeout),
      cmocka_unit_test(test_injected_clock),
      cmocka_unit_test(test_in_memory),
      cmocka_unit_test(test_in_memory_short_writes),
      cmocka_unit_test(test_hooks_policy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
