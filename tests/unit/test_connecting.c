/* A call's deadline while its connection is still being made: a TCP
   connect that never completes (the listener's accept queue is full, so
   the kernel drops the SYNs) and a TLS handshake that never completes (a
   listener that never accepts: the kernel finishes TCP, nobody answers
   the ClientHello).  Both must end the call deadline_exceeded at the
   deadline, not wait for the connect timeout, and leave the client
   usable. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "list.h"

/* A listener on 127.0.0.1 with |backlog|; its port in |*port|. */
static int listener(int backlog, int *port) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0);

  assert_true(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, backlog), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* Fills the accept queue of the listener on |port|: connects (never
   accepted) until one no longer completes.  The sockets go to |fds|;
   returns how many. */
static int fill_queue(int port, int *fds, int max) {
  struct sockaddr_in sa;
  int n = 0;

  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons((uint16_t)port);
  while (n < max) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int rv;

    assert_true(fd >= 0);
    fds[n++] = fd;
    rv = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rv != 0 && errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};

      if (poll(&p, 1, 200) == 0) {
        return n; /* this one hangs: the queue is full */
      }
    }
  }
  return n;
}

/* The state of the client's one connection. */
static int conn_state(conch_client *c) {
  conch_link *l = c->conns.next;

  assert_true(l != &c->conns);
  return (int)((conch_conn *)(void *)((char *)l - offsetof(conch_conn, link)))
      ->state;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  conch_status *out = ud;
  (void)call;
  (void)trailers;
  conch_status_copy(out, st, NULL);
}

/* One unary call with a |timeout_ms| deadline to |url|; its status in
   |st|, the time it took in the return value. */
static int64_t call_once(conch_client *c, long timeout_ms, conch_status *st) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call_handler h = {NULL, NULL, NULL, NULL, on_close};
  conch_method m = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL, NULL, 0};
  conch_call *call;
  int64_t t0 = conch__now_ms();

  opts.timeout_ms = timeout_ms;
  assert_int_equal(conch_call_start(c, &m, &opts, &h, st, &call), 0);
  assert_int_equal(conch_call_send_raw(call, (const uint8_t *)"", 0), 0);
  while (!conch_call_done(call)) {
    assert_int_equal(conch_client_run(c, 1000), 0);
    assert_true(conch__now_ms() - t0 < 5000);
  }
  conch__client_run_done(c);
  conch_call_free(call);
  return conch__now_ms() - t0;
}

static void test_deadline_during_tcp_connect(void **state) {
  int fds[64];
  int port, lfd, n, i;
  conch_client *c;
  conch_client_opts *o;
  conch_status st;
  char url[64];
  int64_t took;
  (void)state;

  lfd = listener(0, &port);
  n = fill_queue(port, fds, 64);
  assert_true(n < 64); /* a connect now hangs */
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
  assert_int_equal(conch_client_opts_new(&o), 0);
  conch_client_opts_set_connect_timeout(o, 10000);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  conch_status_init(&st);
  took = call_once(c, 300, &st);
  assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(took >= 290 && took < 2000);
  assert_int_equal(conn_state(c), CONCH_CONN_CONNECTING); /* still */
  conch_status_clear(&st);
  /* Again on the same client: still the deadline, not a stale error. */
  conch_status_init(&st);
  took = call_once(c, 200, &st);
  assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(took >= 190 && took < 2000);
  conch_status_clear(&st);
  conch_client_free(c);
  for (i = 0; i < n; i++) {
    close(fds[i]);
  }
  close(lfd);
}

static void test_deadline_during_tls_handshake(void **state) {
  int port, lfd;
  conch_client *c;
  conch_client_opts *o;
  conch_status st;
  char url[64];
  int64_t took;
  (void)state;

  lfd = listener(16, &port); /* TCP completes; nobody speaks TLS */
  snprintf(url, sizeof(url), "https://127.0.0.1:%d", port);
  assert_int_equal(conch_client_opts_new(&o), 0);
  conch_client_opts_set_connect_timeout(o, 10000);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  conch_status_init(&st);
  took = call_once(c, 300, &st);
  assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(took >= 290 && took < 2000);
  assert_int_equal(conn_state(c), CONCH_CONN_HANDSHAKE); /* still */
  conch_status_clear(&st);
  conch_client_free(c);
  close(lfd);
}

/* ---- Time from the client's own clock ---------------------------------- */

static int64_t sim_now = 5000000;
static long sim_timer = -1;

static int64_t sim_clock(void *ud) {
  (void)ud;
  return sim_now;
}

static int sim_watch(int fd, unsigned events, void *ud) {
  (void)fd;
  (void)events;
  (void)ud;
  return 0;
}

static int sim_set_timer(long ms, void *ud) {
  (void)ud;
  sim_timer = ms;
  return 0;
}

/* A 60 s deadline passes in simulated time, at once in real time: the
   hooks are told the timer by the client's clock, and the call ends when
   that clock says so, not before. */
static void test_deadline_by_the_clients_clock(void **state) {
  int port, lfd = listener(16, &port); /* TCP completes; nobody speaks */
  conch_io_hooks hooks = {sim_watch, sim_set_timer, NULL};
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call_handler h = {NULL, NULL, NULL, NULL, on_close};
  conch_method m = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL, NULL, 0};
  conch_client_opts *o;
  conch_client *c;
  conch_call *call;
  conch_status st;
  char url[64];
  int64_t t0 = conch__now_ms();
  (void)state;

  snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_clock(o, sim_clock, NULL), 0);
  assert_int_equal(conch_client_opts_set_connect_timeout(o, 600000), 0);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  assert_int_equal(conch_client_set_io_hooks(c, &hooks), 0);
  conch_status_init(&st);
  opts.timeout_ms = 60000;
  assert_int_equal(conch_call_start(c, &m, &opts, &h, &st, &call), 0);
  assert_int_equal(conch_call_send_raw(call, (const uint8_t *)"", 0), 0);
  assert_int_equal(conch_client_on_timer(c), 0); /* a turn: it connects */
  assert_true(sim_timer > 59000 && sim_timer <= 60000);
  sim_now += 59999;
  assert_int_equal(conch_client_on_timer(c), 0);
  assert_false(conch_call_done(call));
  assert_true(sim_timer >= 0 && sim_timer <= 1);
  sim_now += 1;
  assert_int_equal(conch_client_on_timer(c), 0);
  assert_true(conch_call_done(call));
  assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(conch__now_ms() - t0 < 30000); /* not a minute of real time */
  conch_call_free(call);
  conch_status_clear(&st);
  conch_client_free(c);
  close(lfd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deadline_during_tcp_connect),
      cmocka_unit_test(test_deadline_during_tls_handshake),
      cmocka_unit_test(test_deadline_by_the_clients_clock),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
