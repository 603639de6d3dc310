/* conch serve spawns without blocking its loop: the exec report of a child
   is watched in the loop, and the Start is answered once it says exec
   happened (or failed).  `--spawn-delay-ms N` (hidden, for tests) makes
   every child wait N ms before its exec: the one deterministic way to make
   a spawn slow.  While children wait, List, other Starts, Connect and the
   deadlines must go on; whatever happens to a process meanwhile (its Start
   reset, its deadline, the server's shutdown, the process cap) must come
   out right. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "envelope.h"
#include "support.h"

#define SVC "/process.Process/"
#define WAIT_MS 15000 /* generous: a loaded 2-core machine */
#define DELAY_MS 3000 /* each child of |slow| waits this long before exec */
#define DELAY_ARG "3000"

static serve_peer slow;  /* --spawn-delay-ms DELAY_MS */
static serve_peer quick; /* no delay */

/* The marker of case |base| in this run: |base| then our pid in 7 digits
   (sleep takes "600.730012345"), so that two runs of the suite at once (CI
   and a developer, two worktrees) never count or wait for each other's
   processes.  sleep_mark() is the command line "sleep <marker>".  The
   strings live until 32 more are made. */
static char *mark_buf(void) {
  static char bufs[32][256];
  static unsigned next;
  return bufs[next++ % 32];
}

static const char *mark(const char *base) {
  char *b = mark_buf();
  snprintf(b, 256, "%s%07ld", base, (long)getpid());
  return b;
}

static const char *sleep_mark(const char *base) {
  char *b = mark_buf();
  snprintf(b, 256, "sleep %s%07ld", base, (long)getpid());
  return b;
}

static int group_setup(void **state) {
  static const char *const slow_args[] = {"--spawn-delay-ms", DELAY_ARG,
                                          "--max-processes", "16", NULL};

  (void)state;
  if (serve_start(&slow, slow_args) != 0 || serve_start(&quick, NULL) != 0) {
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  int a;
  int b;

  (void)state;
  a = serve_stop(&slow, 10000);
  b = serve_stop(&quick, 10000);
  return a == 0 && b == 0 ? 0 : -1;
}

/* ---- Raw Starts: submitted without waiting for their answer -------------- */

static const char *const stream_hdrs[] = {"content-type",
                                          "application/connect+proto", NULL};

/* Request bodies, which must outlive their submission. */
static uint8_t *bodies[64];
static size_t nbodies;

static void free_bodies(void) {
  while (nbodies > 0) {
    free(bodies[--nbodies]);
  }
}

/* Submits a Start of |cmd| (args NULL-terminated) on |c|.  |tag| and |cwd|
   may be NULL; |timeout| NULL or Connect-Timeout-Ms. */
static int32_t raw_start(h2_conn *c, h2_resp *r, const char *tag,
                         const char *cwd, const char *timeout, const char *cmd,
                         ...) {
  Process__StartRequest req = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
  const char *hdrs[] = {"content-type", "application/connect+proto",
                        "connect-timeout-ms", timeout, NULL};
  char *args[16];
  va_list ap;
  uint8_t *env;
  size_t len;
  int32_t id;

  va_start(ap, cmd);
  while (cfg.n_args < 16 && (args[cfg.n_args] = va_arg(ap, char *)) != NULL) {
    cfg.n_args++;
  }
  va_end(ap);
  cfg.cmd = (char *)cmd;
  cfg.args = args;
  if (cwd != NULL) {
    cfg._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
    cfg.cwd = (char *)cwd;
  }
  req.process = &cfg;
  if (tag != NULL) {
    req._tag_case = PROCESS__START_REQUEST___TAG_TAG;
    req.tag = (char *)tag;
  }
  env = envelope(0, &req.base, &len);
  assert_non_null(env);
  memset(r, 0, sizeof(*r));
  assert_true(nbodies < sizeof(bodies) / sizeof(bodies[0]));
  bodies[nbodies++] = env;
  id = h2_submit(c, "POST", SVC "Start", timeout != NULL ? hdrs : stream_hdrs,
                 env, len, r);
  assert_true(id > 0);
  return id;
}

/* Drives |c| for up to |ms| (whether or not everything is done). */
static void pump(h2_conn *c, int ms) { (void)h2_run(c, ms); }

/* The pid of the StartEvent that opens a Start's body, or 0. */
static pid_t started_pid(const h2_resp *r) {
  Process__StartResponse *m;
  pid_t pid = 0;
  size_t n;

  if (r->len < CONCH_ENV_PREFIX || r->body[0] != 0) {
    return 0;
  }
  n = ((size_t)r->body[1] << 24) | ((size_t)r->body[2] << 16) |
      ((size_t)r->body[3] << 8) | r->body[4];
  if (n + CONCH_ENV_PREFIX > r->len) {
    return 0;
  }
  m = process__start_response__unpack(NULL, n, r->body + CONCH_ENV_PREFIX);
  if (m != NULL && m->event != NULL &&
      m->event->event_case == PROCESS__PROCESS_EVENT__EVENT_START) {
    pid = (pid_t)m->event->start->pid;
  }
  process__start_response__free_unpacked(m, NULL);
  return pid;
}

/* Polls List until a process tagged |tag| is there; its pid, or 0. */
static pid_t wait_listed(conch_client *c, const char *tag) {
  long long t0 = conch_now_ms();

  while (conch_now_ms() - t0 < WAIT_MS) {
    Process__ListResponse *l = NULL;
    pid_t pid = 0;
    size_t i;

    assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
    for (i = 0; i < l->n_processes; i++) {
      if (l->processes[i]->tag != NULL &&
          strcmp(l->processes[i]->tag, tag) == 0) {
        pid = (pid_t)l->processes[i]->pid;
      }
    }
    conch_message_free(c, &l->base);
    if (pid != 0) {
      return pid;
    }
    conch_sleep_ms(20);
  }
  return 0;
}

/* Polls until no process of the server runs (List is empty). */
static void wait_no_procs(conch_client *c) {
  long long t0 = conch_now_ms();
  size_t n;

  do {
    Process__ListResponse *l = NULL;

    assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
    n = l->n_processes;
    conch_message_free(c, &l->base);
    if (n > 0) {
      conch_sleep_ms(20);
    }
  } while (n > 0 && conch_now_ms() - t0 < WAIT_MS);
  assert_int_equal(n, 0);
}

/* ---- The loop goes on while children wait for their exec ---------------- */

enum { NSTORM = 6 };

static void test_loop_free_while_spawning(void **state) {
  conch_client *c = client_new(slow.url);
  h2_resp rs[NSTORM];
  run_result r;
  Process__ListResponse *l = NULL;
  conch_call *call;
  h2_conn *hc;
  long long t0;
  long long t_list;
  long long t_start;
  pid_t pid;
  char code[64];
  char msg[256];
  int i;
  int done;

  (void)state;
  assert_int_equal(h2_open(&hc, slow.port), 0);
  for (i = 0; i < NSTORM; i++) {
    raw_start(hc, &rs[i], NULL, NULL, NULL, "true", NULL);
  }
  pump(hc, 100); /* the requests are out */
  t0 = conch_now_ms();
  /* A List on another connection: answered at once, and without the
     processes that have not reached their exec (envd lists a process once
     it started). */
  assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
  t_list = conch_now_ms() - t0;
  print_message("List while %d spawns wait %d ms: %lld ms\n", NSTORM, DELAY_MS,
                t_list);
  assert_true(t_list < DELAY_MS / 2);
  assert_int_equal(l->n_processes, 0);
  conch_message_free(c, &l->base);
  for (i = 0; i < NSTORM; i++) {
    assert_int_equal(started_pid(&rs[i]), 0); /* none answered yet */
  }
  /* Another Start: answered one delay after its request, not after the
     others' delays (the old loop: NSTORM + 1 delays). */
  call = start_call(c, NULL, &r, &pid, "true", NULL);
  t_start = conch_now_ms() - t0;
  print_message("another Start answered after %lld ms\n", t_start);
  assert_non_null(call);
  assert_true(t_start < 2 * DELAY_MS);
  drain_call(c, call, &r);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.exit_code, 0);
  conch_call_free(call);
  /* The storm's Starts all complete: StartEvent ... EndEvent, no error. */
  do {
    pump(hc, 100);
    for (done = 0, i = 0; i < NSTORM; i++) {
      done += rs[i].done;
    }
  } while (done < NSTORM && conch_now_ms() - t0 < WAIT_MS);
  print_message("%d Starts done after %lld ms\n", done, conch_now_ms() - t0);
  assert_int_equal(done, NSTORM);
  assert_true(conch_now_ms() - t0 < 3 * DELAY_MS);
  for (i = 0; i < NSTORM; i++) {
    assert_true(started_pid(&rs[i]) > 0);
    connect_error(&rs[i], 1, code, sizeof(code), msg, sizeof(msg));
    assert_string_equal(code, "");
    h2_resp_free(&rs[i]);
  }
  h2_close(hc);
  free_bodies();
  conch_client_free(c);
}

/* ---- Errors found only by the child keep envd's codes and texts --------- */

static void test_exec_errors(void **state) {
  conch_client *c = client_new(quick.url);
  start_opts o = {0};
  run_result r;
  pid_t pid;
  int i;

  (void)state;
  /* A cwd that exists but is no directory: chdir() fails in the child. */
  o.cwd = "/etc/passwd";
  assert_null(start_call(c, &o, &r, &pid, "true", NULL));
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  assert_string_equal(r.message, "error starting process 'true': fork/exec "
                                 "/bin/sh: not a directory");
  o.pty_cols = 80;
  o.pty_rows = 24;
  assert_null(start_call(c, &o, &r, &pid, "echo", "a b", NULL));
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  assert_string_equal(r.message,
                      "error starting pty with command 'echo a b' in dir "
                      "'/etc/passwd' with '80' cols and '24' rows: fork/exec "
                      "/bin/sh: not a directory");
  /* Failed starts leave nothing behind, and the server goes on. */
  for (i = 0; i < 20; i++) {
    o.pty_cols = o.pty_rows = 0;
    assert_null(start_call(c, &o, &r, &pid, "true", NULL));
    assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  }
  wait_no_procs(c);
  conch_client_free(c);
}

/* Output that the child writes at once (before the server has read the
   report) still follows the StartEvent, on every run. */
static void test_output_right_after_exec(void **state) {
  conch_client *c = client_new(quick.url);
  run_result r;
  int i;

  (void)state;
  for (i = 0; i < 40; i++) {
    memset(&r, 0, sizeof(r));
    run_cmd(c, NULL, &r, "sh", "-c", "echo out; echo err >&2", NULL);
    assert_int_equal(r.code, CONCH_CODE_OK);
    assert_int_equal(r.nstart, 1);
    assert_string_equal(r.out, "out\n");
    assert_string_equal(r.err, "err\n");
    assert_int_equal(r.has_end, 1);
    assert_int_equal(r.exit_code, 0);
  }
  conch_client_free(c);
}

/* ---- What can happen to a process before its exec ------------------------ */

/* Its Start reset: the process still starts (as after a StartEvent, closing
   the stream does not end it) and can be found and killed.  Before the
   exec it is not found (it has not started for the RPCs). */
static void test_start_reset_while_spawning(void **state) {
  conch_client *c = client_new(slow.url);
  h2_resp rs;
  h2_resp rf;
  run_result r;
  conch_call *call;
  h2_conn *hc;
  pid_t pid;
  char msg[256];
  int32_t id;

  (void)state;
  assert_int_equal(proc_count_cmdline(sleep_mark("600.73")), 0);
  assert_int_equal(h2_open(&hc, slow.port), 0);
  id = raw_start(hc, &rs, "reset1", NULL, NULL, "sleep", mark("600.73"), NULL);
  /* And one whose exec fails, reset too. */
  raw_start(hc, &rf, "reset2", "/etc/passwd", NULL, "true", NULL);
  pump(hc, 100);
  assert_int_equal(h2_rst(hc, id), 0);
  assert_int_equal(h2_rst(hc, h2_last_id(hc)), 0);
  pump(hc, 100);
  /* Not started yet: Connect and SendSignal by its tag find nothing. */
  call = connect_call(c, 0, "reset1", 5000, NULL);
  assert_non_null(call);
  memset(&r, 0, sizeof(r));
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_int_equal(r.code, CONCH_CODE_NOT_FOUND);
  assert_string_equal(r.message, "process with tag reset1 not found");
  assert_int_equal(send_signal(c, 0, "reset1", 9, msg, sizeof(msg)),
                   CONCH_CODE_NOT_FOUND);
  assert_string_equal(msg, "process with tag reset1 not found");
  /* Once exec happened it is listed, runs, and is ours to kill. */
  pid = wait_listed(c, "reset1");
  assert_true(pid > 0);
  note_pid(pid);
  /* Listed once /bin/sh is exec'd; sleep is its own exec after that. */
  assert_true(proc_wait_count(sleep_mark("600.73"), 1, WAIT_MS, NULL) >= 0);
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  wait_no_procs(c);
  assert_int_equal(proc_count_cmdline(sleep_mark("600.73")), 0);
  h2_resp_free(&rs);
  h2_resp_free(&rf);
  h2_close(hc);
  free_bodies();
  conch_client_free(c);
}

/* A burst of Starts reset as soon as they are sent (the resets in the same
   write): those reset before their fork never run, the others run to
   their end; the server answers on. */
static void test_burst_reset(void **state) {
  conch_client *c = client_new(quick.url);
  h2_resp rs[40];
  run_result r;
  h2_conn *hc;
  int32_t ids[40];
  int i;

  (void)state;
  assert_int_equal(h2_open(&hc, quick.port), 0);
  for (i = 0; i < 40; i++) {
    ids[i] =
        raw_start(hc, &rs[i], NULL, NULL, NULL, "sh", "-c", "echo x", NULL);
  }
  for (i = 0; i < 40; i++) {
    assert_int_equal(h2_rst(hc, ids[i]), 0);
  }
  pump(hc, 500);
  h2_close(hc);
  free_bodies();
  for (i = 0; i < 40; i++) {
    h2_resp_free(&rs[i]);
  }
  memset(&r, 0, sizeof(r));
  run_cmd(c, NULL, &r, "echo", "still here", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.out, "still here\n");
  wait_no_procs(c);
  conch_client_free(c);
}

/* The deadline of a Start passes before the exec: the stream ends with
   deadline_exceeded at the deadline (not after the exec), and the child is
   killed before it ever runs the command. */
static void test_deadline_while_spawning(void **state) {
  conch_client *c = client_new(slow.url);
  start_opts o = {0};
  run_result r;
  long long t0;
  long long t;
  pid_t pid;

  (void)state;
  assert_int_equal(proc_count_cmdline(sleep_mark("600.74")), 0);
  o.timeout_ms = 500;
  t0 = conch_now_ms();
  assert_null(start_call(c, &o, &r, &pid, "sleep", mark("600.74"), NULL));
  t = conch_now_ms() - t0;
  print_message("deadline 500 ms, spawn delay %d ms: answered after %lld "
                "ms, %d %s\n",
                DELAY_MS, t, (int)r.code, r.message);
  assert_int_equal(r.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(t < DELAY_MS - 500);
  /* Past the delay the command never ran: nothing left. */
  t0 = conch_now_ms();
  while (conch_now_ms() - t0 < DELAY_MS + 1000) {
    assert_int_equal(proc_count_cmdline(sleep_mark("600.74")), 0);
    conch_sleep_ms(50);
  }
  wait_no_procs(c);
  conch_client_free(c);
}

/* Children waiting for their exec count against --max-processes. */
static void test_cap_counts_spawning(void **state) {
  static const char *const args[] = {"--spawn-delay-ms", DELAY_ARG,
                                     "--max-processes", "2", NULL};
  serve_peer p;
  conch_client *c;
  h2_resp rs[2];
  run_result r;
  h2_conn *hc;
  long long t0;
  pid_t pid;
  int i;
  int done;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);
  assert_int_equal(h2_open(&hc, p.port), 0);
  raw_start(hc, &rs[0], NULL, NULL, NULL, "true", NULL);
  raw_start(hc, &rs[1], NULL, NULL, NULL, "true", NULL);
  t0 = conch_now_ms();
  pump(hc, 100);
  assert_null(start_call(c, NULL, &r, &pid, "true", NULL));
  print_message("3rd Start after %lld ms: %d %s\n", conch_now_ms() - t0,
                (int)r.code, r.message);
  assert_int_equal(r.code, CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_string_equal(r.message,
                      "too many processes: 2 running, the limit is 2");
  assert_true(conch_now_ms() - t0 < DELAY_MS);
  do {
    pump(hc, 100);
    done = rs[0].done + rs[1].done;
  } while (done < 2 && conch_now_ms() - t0 < WAIT_MS);
  assert_int_equal(done, 2);
  for (i = 0; i < 2; i++) {
    assert_true(started_pid(&rs[i]) > 0);
    h2_resp_free(&rs[i]);
  }
  h2_close(hc);
  free_bodies();
  conch_client_free(c);
  assert_int_equal(serve_stop(&p, 10000), 0);
}

/* The server stops while a child waits for its exec: it exits in time,
   and the command never runs. */
static void test_shutdown_while_spawning(void **state) {
  static const char *const args[] = {"--spawn-delay-ms", "4000", NULL};
  serve_peer p;
  h2_resp rs;
  h2_conn *hc;
  long long t0;

  (void)state;
  assert_int_equal(proc_count_cmdline(sleep_mark("600.76")), 0);
  assert_int_equal(serve_start(&p, args), 0);
  assert_int_equal(h2_open(&hc, p.port), 0);
  raw_start(hc, &rs, NULL, NULL, NULL, "sleep", mark("600.76"), NULL);
  pump(hc, 300);
  t0 = conch_now_ms();
  assert_int_equal(serve_stop(&p, 10000), 0);
  print_message("stopped after %lld ms\n", conch_now_ms() - t0);
  t0 = conch_now_ms();
  while (conch_now_ms() - t0 < 5000) {
    assert_int_equal(proc_count_cmdline(sleep_mark("600.76")), 0);
    conch_sleep_ms(50);
  }
  h2_resp_free(&rs);
  h2_close(hc);
  free_bodies();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loop_free_while_spawning),
      cmocka_unit_test(test_exec_errors),
      cmocka_unit_test(test_output_right_after_exec),
      cmocka_unit_test(test_start_reset_while_spawning),
      cmocka_unit_test(test_burst_reset),
      cmocka_unit_test(test_deadline_while_spawning),
      cmocka_unit_test(test_cap_counts_spawning),
      cmocka_unit_test(test_shutdown_while_spawning),
  };

  if (getenv("SERVE_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
