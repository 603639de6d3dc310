/* conch serve, process trees (issue 10): SendSignal, the deadline (also one
   set by a Connect, also after the leader died), the client's close
   sequence (TERM, then a Connect whose deadline is the grace period) and
   server shutdown reach every descendant that stayed in the process's
   group; one that called setsid() is left alone by SendSignal; a PTY
   shell's job groups are reached too; and `--signal-pid-only` (envd's way)
   leaks the tree.  Every check looks at the OS process table.  Each case
   prints a MEASURE line: the time from the signal to the death of the last
   descendant, and how many were left. */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "support.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core machine */

static serve_peer srv;

static int group_setup(void **state) {
  (void)state;
  return serve_start(&srv, NULL);
}

static int group_teardown(void **state) {
  size_t n;
  const pid_t *pids = noted_pids(&n);
  pid_t first = 0;
  long long t0 = conch_now_ms();
  int left;
  int rv;

  (void)state;
  /* Polled: the last members of a group may still be on their way out. */
  while ((left = proc_leftovers(srv.pid, pids, n, &first)) != 0 &&
         conch_now_ms() - t0 < WAIT_MS) {
    conch_sleep_ms(10);
  }
  if (left != 0) {
    fprintf(stderr, "%d process(es) left running, e.g. pid %ld\n", left,
            (long)first);
  }
  rv = serve_stop(&srv, 10000);
  return left == 0 && rv == 0 ? 0 : -1;
}

/* ---- The process table ----------------------------------------------------
 */

/* The first live process whose command line is |cmdline|, or 0. */
static pid_t pid_of(const char *cmdline) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t found = 0;

  if (d == NULL) {
    return 0;
  }
  while (found == 0 && (e = readdir(d)) != NULL) {
    char path[300];
    char buf[512];
    FILE *f;
    size_t n;
    size_t i;
    pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);

    if (pid <= 0 || !conch_proc_alive(pid)) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i + 1 < n; i++) {
      buf[i] = buf[i] == '\0' ? ' ' : buf[i];
    }
    buf[n] = '\0';
    if (strcmp(buf, cmdline) == 0) {
      found = pid;
    }
  }
  closedir(d);
  return found;
}

/* Process group of |pid|, or -1. */
static long pgrp_of(pid_t pid) {
  char path[64];
  char buf[512];
  FILE *f;
  char *rp;
  char state;
  long ppid;
  long pgrp = -1;

  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return -1;
  }
  rp = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
  fclose(f);
  if (rp == NULL || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) {
    return -1;
  }
  return pgrp;
}

/* For a failure's message: our test processes as ps sees them. */
/* The marker of case |base| in this run: |base| then our pid in 7 digits
   (sleep takes "600.730012345"), so that two runs of the suite at once (CI
   and a developer, two worktrees) never count or wait for each other's
   processes.  sleep_mark() is the command line "sleep <marker>"; marked()
   is |cmd| with the pid after every "sleep 6NN.N" in it (shell commands).
   The strings live until 32 more are made. */
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

static const char *marked(const char *cmd) {
  char *b = mark_buf();
  size_t o = 0;
  while (*cmd != '\0' && o + 16 < 256) {
    if (strncmp(cmd, "sleep 6", 7) == 0) {
      size_t n = strspn(cmd + 6, "0123456789.");
      memcpy(b + o, cmd, 6 + n);
      o += 6 + n;
      cmd += 6 + n;
      o += (size_t)snprintf(b + o, 256 - o, "%07ld", (long)getpid());
    } else {
      b[o++] = *cmd++;
    }
  }
  b[o] = '\0';
  return b;
}

static void show_markers(void) {
  if (system("ps -eo pid,ppid,pgid,sid,stat,etimes,args | "
             "grep -e ' 6[01][0-9]\\.' -e conch >&2") != 0) {
    fprintf(stderr, "(ps failed)\n");
  }
}

/* Polls until no live process is in the groups |pids|.  Returns how many
   were left at the end. */
static int wait_groups_gone(const pid_t *pids, size_t n) {
  long long t0 = conch_now_ms();
  int left;

  while ((left = proc_leftovers(0, pids, n, NULL)) != 0 &&
         conch_now_ms() - t0 < WAIT_MS) {
    conch_sleep_ms(10);
  }
  return left;
}

/* A shell with two background children, one of them a shell with two
   grandchildren; every sleep runs |secs| (the case's marker). */
static conch_call *start_tree(conch_client *c, const start_opts *o,
                              run_result *r, pid_t *pid, const char *secs) {
  char script[256];
  char marker[64];
  conch_call *call;

  snprintf(script, sizeof(script),
           "sh -c 'sleep %s & sleep %s; :' & sleep %s & wait", secs, secs,
           secs);
  snprintf(marker, sizeof(marker), "sleep %s", secs);
  assert_int_equal(proc_count_cmdline(marker), 0); /* none from before */
  call = start_call(c, o, r, pid, "sh", "-c", script, NULL);
  assert_non_null(call);
  if (proc_wait_count(marker, 3, WAIT_MS, NULL) < 0) {
    show_markers();
    fail_msg("the tree of %s did not start", marker);
  }
  return call;
}

static void measure(const char *what, long ms, int left) {
  fprintf(stderr, "MEASURE %s: last descendant dead after %ld ms, %d left\n",
          what, ms, left);
}

/* ---- SendSignal -----------------------------------------------------------
 */

static void test_term_tree(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  long ms;
  int left = 0;
  char msg[256];

  (void)state;
  call = start_tree(c, NULL, &r, &pid, mark("601.1"));
  t0 = conch_now_ms();
  assert_int_equal(send_signal(c, pid, NULL, 15, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  proc_wait_count(sleep_mark("601.1"), 0, WAIT_MS, &left);
  ms = (long)(conch_now_ms() - t0);
  measure("SendSignal TERM, plain tree", ms, left);
  assert_int_equal(left, 0);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_true(r.has_end);
  assert_string_equal(r.status, "signal: terminated");
  assert_int_equal(wait_groups_gone(&pid, 1), 0);
  /* Ended with nothing left: not_found, as envd answers. */
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_NOT_FOUND);
  conch_client_free(c);
}

/* ---- The deadline ----------------------------------------------------------
 */

static void test_deadline_tree(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  int left = 0;

  (void)state;
  o.timeout_ms = 3000; /* room for the tree to start on a loaded host */
  t0 = conch_now_ms();
  call = start_tree(c, &o, &r, &pid, mark("601.2"));
  conch_call_free(call); /* the client goes: the deadline still holds */
  proc_wait_count(sleep_mark("601.2"), 0, WAIT_MS, &left);
  measure("Start deadline 3000 ms, plain tree (ms after the deadline)",
          (long)(conch_now_ms() - t0) - o.timeout_ms, left);
  assert_int_equal(left, 0);
  assert_int_equal(wait_groups_gone(&pid, 1), 0);
  conch_client_free(c);
}

/* The client's close: SendSignal TERM, then Connect with the grace period
   as its deadline (and SendSignal KILL if that passes without an end). */
static void close_sequence(conch_client *c, pid_t pid, long grace_ms,
                           run_result *r) {
  conch_call *call;
  char msg[256];

  assert_int_equal(send_signal(c, pid, NULL, 15, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  call = connect_call(c, pid, NULL, grace_ms, NULL);
  assert_non_null(call);
  memset(r, 0, sizeof(*r));
  drain_call(c, call, r);
  conch_call_free(call);
}

static void test_close_sequence_tree(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  int left = 0;

  (void)state;
  call = start_tree(c, NULL, &r, &pid, mark("601.3"));
  conch_call_free(call);
  t0 = conch_now_ms();
  close_sequence(c, pid, 2000, &r);
  assert_true(r.has_end);
  proc_wait_count(sleep_mark("601.3"), 0, WAIT_MS, &left);
  measure("close sequence (grace 2000 ms), plain tree",
          (long)(conch_now_ms() - t0), left);
  assert_int_equal(left, 0);
  assert_int_equal(wait_groups_gone(&pid, 1), 0);
  conch_client_free(c);
}

/* A grandchild that ignores TERM outlives the leader; the grace deadline
   the client set still kills it.  |late|: the Connect comes after the
   leader ended (the deadline is armed on the retained entry); otherwise
   the leader lingers 300 ms after TERM, so the deadline is armed on the
   running process and must survive the reap. */
static void trapping_case(int late) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  long ms;
  int left = 0;
  char msg[256];
  const char *marker = late ? sleep_mark("602.1") : sleep_mark("602.2");
  const char *script =
      marked(late ? "sh -c 'trap \"\" TERM; sleep 602.1' & wait"
                  : "trap 'sleep 0.3; exit 7' TERM; "
                    "sh -c 'trap \"\" TERM; sleep 602.2' & wait");

  call = start_call(c, NULL, &r, &pid, "sh", "-c", script, NULL);
  assert_non_null(call);
  assert_true(proc_wait_count(marker, 1, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  if (late) {
    assert_int_equal(send_signal(c, pid, NULL, 15, msg, sizeof(msg)),
                     CONCH_CODE_OK);
    drain_call(c, call, &r); /* the leader's end */
    assert_string_equal(r.status, "signal: terminated");
    assert_int_equal(proc_count_cmdline(marker), 1);
    /* Gone from List, but SendSignal still reaches its group's rest (TERM:
       ignored), and a Connect's deadline too. */
    assert_int_equal(send_signal(c, pid, NULL, 15, msg, sizeof(msg)),
                     CONCH_CODE_OK);
    close_sequence(c, pid, 2000, &r);
    assert_true(r.has_end);
    assert_string_equal(r.status, "signal: terminated");
  } else {
    close_sequence(c, pid, 2000, &r);
    assert_true(r.has_end);
    assert_string_equal(r.status, "exit status 7");
    drain_call(c, call, &r);
  }
  conch_call_free(call);
  /* The leader is gone; the trapping grandchild is not, yet (unless a
     stalled host let the grace pass meanwhile). */
  if (conch_now_ms() - t0 < 1500) {
    assert_int_equal(proc_count_cmdline(marker), 1);
  }
  proc_wait_count(marker, 0, WAIT_MS, &left);
  ms = (long)(conch_now_ms() - t0);
  measure(late ? "close sequence (grace 2000 ms), TERM-trapping grandchild, "
                 "Connect after the leader's end"
               : "close sequence (grace 2000 ms), TERM-trapping grandchild, "
                 "Connect before the leader's end",
          ms, left);
  assert_int_equal(left, 0);
  assert_true(ms >= 1500); /* the deadline did it, not the TERM */
  /* Nothing left: an ended process is not_found again. */
  assert_int_equal(wait_groups_gone(&pid, 1), 0);
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_NOT_FOUND);
  conch_client_free(c);
}

static void test_trapping_grandchild_late_connect(void **state) {
  (void)state;
  trapping_case(1);
}

static void test_trapping_grandchild_early_connect(void **state) {
  (void)state;
  trapping_case(0);
}

/* ---- What SendSignal leaves alone -------------------------------------------
 */

static void test_setsid_survives(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  pid_t escaped;
  char msg[256];

  (void)state;
  call = start_call(c, NULL, &r, &pid, "sh", "-c",
                    marked("setsid sleep 603.1 & sleep 603.2 & wait"), NULL);
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("603.1"), 1, WAIT_MS, NULL) >= 0);
  assert_true(proc_wait_count(sleep_mark("603.2"), 1, WAIT_MS, NULL) >= 0);
  escaped = pid_of(sleep_mark("603.1"));
  assert_true(escaped > 0);
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_true(proc_wait_count(sleep_mark("603.2"), 0, WAIT_MS, NULL) >= 0);
  /* It left the group on purpose: still running. */
  assert_true(conch_proc_alive(escaped));
  kill(escaped, SIGKILL);
  assert_true(proc_wait_count(sleep_mark("603.1"), 0, WAIT_MS, NULL) >= 0);
  conch_client_free(c);
}

/* ---- PTY: a shell's job groups --------------------------------------------
 */

static void test_pty_job_groups(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  pid_t job;
  long long t0;
  int left = 0;
  char msg[256];
  const char *line = marked("sleep 604.1 &\n");

  (void)state;
  o.pty_cols = 80;
  o.pty_rows = 24;
  call = start_call(c, &o, &r, &pid, "sh", "-i", NULL);
  assert_non_null(call);
  assert_int_equal(
      send_input(c, pid, NULL, 1, line, strlen(line), 0, msg, sizeof(msg)),
      CONCH_CODE_OK);
  assert_true(proc_wait_count(sleep_mark("604.1"), 1, WAIT_MS, NULL) >= 0);
  job = pid_of(sleep_mark("604.1"));
  /* Job control put it in a group of its own (same session). */
  assert_true(job > 0);
  assert_true(pgrp_of(job) != (long)pid);
  t0 = conch_now_ms();
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  proc_wait_count(sleep_mark("604.1"), 0, WAIT_MS, &left);
  measure("SendSignal KILL, PTY shell with a background job",
          (long)(conch_now_ms() - t0), left);
  assert_int_equal(left, 0);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: killed");
  conch_client_free(c);
}

/* ---- Many at once
 * ------------------------------------------------------------
 */

static void test_many_trees(void **state) {
  enum { N = 40 };
  conch_client *c = client_new(srv.url);
  conch_call *calls[N];
  pid_t pids[N];
  run_result r;
  long long t0;
  int left = 0;
  char msg[256];
  int i;

  (void)state;
  for (i = 0; i < N; i++) {
    calls[i] = start_call(c, NULL, &r, &pids[i], "sh", "-c",
                          marked("sleep 605.1 & sleep 605.1 & wait"), NULL);
    assert_non_null(calls[i]);
  }
  assert_true(proc_wait_count(sleep_mark("605.1"), 2 * N, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  for (i = 0; i < N; i++) {
    assert_int_equal(send_signal(c, pids[i], NULL, 15, msg, sizeof(msg)),
                     CONCH_CODE_OK);
  }
  proc_wait_count(sleep_mark("605.1"), 0, WAIT_MS, &left);
  measure("SendSignal TERM to 40 trees", (long)(conch_now_ms() - t0), left);
  assert_int_equal(left, 0);
  for (i = 0; i < N; i++) {
    drain_call(c, calls[i], &r);
    conch_call_free(calls[i]);
  }
  assert_int_equal(wait_groups_gone(pids, N), 0);
  conch_client_free(c);
}

/* ---- Shutdown, and envd's pid-only way
 * ---------------------------------------
 */

static void test_shutdown_tree(void **state) {
  static const char *const args[] = {"--kill-grace-ms", "1000", NULL};
  serve_peer p;
  conch_client *c;
  run_result r;
  conch_call *tree;
  conch_call *stubborn;
  pid_t pids[2];
  long long t0;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);
  tree = start_tree(c, NULL, &r, &pids[0], mark("606.1"));
  stubborn =
      start_call(c, NULL, &r, &pids[1], "sh", "-c",
                 marked("sh -c 'trap \"\" TERM; sleep 606.2' & wait"), NULL);
  assert_non_null(stubborn);
  assert_true(proc_wait_count(sleep_mark("606.2"), 1, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  assert_int_equal(serve_stop(&p, 15000), 0);
  measure("server shutdown (grace 1000 ms), tree + TERM-trapping grandchild",
          (long)(conch_now_ms() - t0),
          proc_count_cmdline(sleep_mark("606.1")) +
              proc_count_cmdline(sleep_mark("606.2")));
  conch_call_free(tree);
  conch_call_free(stubborn);
  conch_client_free(c);
  assert_int_equal(proc_count_cmdline(sleep_mark("606.1")), 0);
  assert_int_equal(proc_count_cmdline(sleep_mark("606.2")), 0);
  assert_int_equal(wait_groups_gone(pids, 2), 0);
}

/* The deadline is the whole group's lifetime: a background child of a
   shell that ended at once dies at the Start's deadline, even past the
   retention period (the entry waits for its deadline). */
static void test_deadline_outlives_retention(void **state) {
  static const char *const args[] = {"--retention-ms", "300", NULL};
  serve_peer p;
  conch_client *c;
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  long ms;
  int left = 0;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);
  o.timeout_ms = 4000;
  t0 = conch_now_ms();
  call = start_call(c, &o, &r, &pid, "sh", "-c", marked("sleep 612.1 &"), NULL);
  assert_non_null(call);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "exit status 0");
  assert_true(proc_wait_count(sleep_mark("612.1"), 1, WAIT_MS, NULL) >= 0);
  /* Past the retention, the entry is still there for its deadline. */
  conch_sleep_ms(600);
  if (conch_now_ms() - t0 < 2500) { /* well before the deadline */
    call = connect_call(c, pid, NULL, 0, NULL);
    memset(&r, 0, sizeof(r));
    drain_call(c, call, &r);
    conch_call_free(call);
    assert_true(r.has_end);
    assert_int_equal(proc_count_cmdline(sleep_mark("612.1")), 1);
  }
  proc_wait_count(sleep_mark("612.1"), 0, WAIT_MS, &left);
  ms = (long)(conch_now_ms() - t0);
  measure("Start deadline 4000 ms, background child of an ended shell, "
          "retention 300 ms (ms from Start)",
          ms, left);
  assert_int_equal(left, 0);
  assert_true(ms >= 3500);
  conch_client_free(c);
  assert_int_equal(serve_stop(&p, 15000), 0);
}

/* kill -9 of the server: the leaders die of their parent-death signal, the
   rest of their groups by the keeper (serve_keeper.c). */
static void test_server_killed(void **state) {
  serve_peer p;
  conch_client *c;
  start_opts o = {0};
  run_result r;
  conch_call *calls[3];
  pid_t pids[3];
  long long t0;
  int left = 0;
  int ws;

  (void)state;
  assert_int_equal(serve_start(&p, NULL), 0);
  c = client_new(p.url);
  calls[0] = start_tree(c, NULL, &r, &pids[0], mark("611.1"));
  calls[1] = start_call(c, NULL, &r, &pids[1], "sh", "-c",
                        marked("sh -c 'trap \"\" TERM HUP; sleep 611.2' & "
                               "wait"),
                        NULL);
  o.pty_cols = 80;
  o.pty_rows = 24;
  calls[2] = start_call(c, &o, &r, &pids[2], "sh", "-c",
                        marked("sleep 611.3 & sleep 611.3 & wait"), NULL);
  assert_non_null(calls[1]);
  assert_non_null(calls[2]);
  assert_true(proc_wait_count(sleep_mark("611.2"), 1, WAIT_MS, NULL) >= 0);
  assert_true(proc_wait_count(sleep_mark("611.3"), 2, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &ws, 0);
  p.pid = -1;
  close(p.stdin_fd);
  proc_wait_count(sleep_mark("611.1"), 0, WAIT_MS, &left);
  left += proc_count_cmdline(sleep_mark("611.2"));
  proc_wait_count(sleep_mark("611.2"), 0, WAIT_MS, NULL);
  proc_wait_count(sleep_mark("611.3"), 0, WAIT_MS, NULL);
  measure("server killed (SIGKILL): tree, TERM+HUP-ignoring grandchild, PTY "
          "tree",
          (long)(conch_now_ms() - t0),
          proc_count_cmdline(sleep_mark("611.1")) +
              proc_count_cmdline(sleep_mark("611.2")) +
              proc_count_cmdline(sleep_mark("611.3")));
  assert_int_equal(proc_count_cmdline(sleep_mark("611.1")), 0);
  assert_int_equal(proc_count_cmdline(sleep_mark("611.2")), 0);
  assert_int_equal(proc_count_cmdline(sleep_mark("611.3")), 0);
  assert_int_equal(wait_groups_gone(pids, 3), 0);
  conch_call_free(calls[0]);
  conch_call_free(calls[1]);
  conch_call_free(calls[2]);
  conch_client_free(c);
}

/* kill -9 of the server during a close's grace period (issue 21, item 4):
   the leader ended at the TERM, its TERM-ignoring grandchild waits for the
   grace's deadline, and the server dies first.  The keeper still holds the
   group (it forgot it at the leader's end before), so the grandchild dies
   with the server. */
static void test_server_killed_in_grace(void **state) {
  serve_peer p;
  conch_client *c;
  run_result r;
  conch_call *call;
  conch_call *grace;
  pid_t pid;
  pid_t stray;
  long long t0;
  int left = 0;
  int ws;
  char msg[256];
  const char *marker = sleep_mark("613.1");

  (void)state;
  assert_int_equal(serve_start(&p, NULL), 0);
  c = client_new(p.url);
  call = start_call(c, NULL, &r, &pid, "sh", "-c",
                    marked("sh -c 'trap \"\" TERM; sleep 613.1' & wait"), NULL);
  assert_non_null(call);
  assert_true(proc_wait_count(marker, 1, WAIT_MS, NULL) >= 0);
  /* The close: TERM, then a Connect whose deadline is the grace. */
  assert_int_equal(send_signal(c, pid, NULL, 15, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: terminated");
  grace = connect_call(c, pid, NULL, 60000, NULL);
  assert_non_null(grace);
  assert_int_equal(proc_count_cmdline(marker), 1);
  t0 = conch_now_ms();
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &ws, 0);
  p.pid = -1;
  close(p.stdin_fd);
  proc_wait_count(marker, 0, WAIT_MS, &left);
  measure("server killed (SIGKILL) in a close's grace, TERM-ignoring "
          "grandchild",
          (long)(conch_now_ms() - t0), left);
  stray = left != 0 ? pid_of(marker) : 0;
  if (stray > 0) {
    kill(stray, SIGKILL); /* not left behind by a failing run */
  }
  assert_int_equal(left, 0);
  conch_call_free(grace);
  conch_client_free(c);
}

/* The retention of processes that had a lifetime (as `conch run` gives)
   ends without a look at the host's processes (issue 21, item 1): the
   server's read(2) calls (syscr) over the expiry of N entries stay far
   under one per host process per entry.  Before, each expiry read the
   stat of every process on the host (kept above ~150 here by idle
   children of this test). */
static void test_expiry_reads_no_proc(void **state) {
  enum { N = 100, IDLE = 150 };
  static const char *const args[] = {"--retention-ms", "8000", NULL};
  serve_peer p;
  conch_client *c;
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pids[N];
  pid_t idle[IDLE];
  long long t_end;
  long long t0;
  long long reads0;
  long long reads;
  int retained = 0;
  int gone = 0;
  int i;

  (void)state;
  for (i = 0; i < IDLE; i++) {
    idle[i] = fork();
    assert_true(idle[i] >= 0);
    if (idle[i] == 0) {
      pause();
      _exit(0);
    }
  }
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);
  o.timeout_ms = 300000;
  t0 = conch_now_ms();
  for (i = 0; i < N; i++) {
    call = start_call(c, &o, &r, &pids[i], "true", NULL);
    assert_non_null(call);
    drain_call(c, call, &r);
    conch_call_free(call);
    assert_string_equal(r.status, "exit status 0");
  }
  t_end = conch_now_ms();
  reads0 = proc_syscr(p.pid);
  assert_true(reads0 >= 0);
  /* Those that ended within the last 6 s are surely still retained now
     (8 s): on a slow host not all of them. */
  retained = t_end - t0 < 6000 ? N : (int)(N * 6000 / (t_end - t0));
  /* The last one goes last: polled every second (a few reads each). */
  while (!gone && conch_now_ms() - t_end < 8000 + WAIT_MS) {
    conch_sleep_ms(1000);
    call = connect_call(c, pids[N - 1], NULL, 0, NULL);
    memset(&r, 0, sizeof(r));
    drain_call(c, call, &r);
    conch_call_free(call);
    gone = r.code == CONCH_CODE_NOT_FOUND;
  }
  reads = proc_syscr(p.pid) - reads0;
  fprintf(stderr,
          "MEASURE expiry of %d retained processes (of %d): %lld read(2) "
          "calls by the server\n",
          retained, N, reads);
  for (i = 0; i < IDLE; i++) {
    kill(idle[i], SIGKILL);
    waitpid(idle[i], NULL, 0);
  }
  assert_true(gone);
  assert_true(retained >= 10);
  assert_true(reads < 10 * (long long)retained + 500);
  conch_client_free(c);
  assert_int_equal(serve_stop(&p, 15000), 0);
}

static void test_pid_only_leaks(void **state) {
  static const char *const args[] = {"--signal-pid-only", NULL};
  serve_peer p;
  conch_client *c;
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  int left = 0;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);

  /* TERM: the leader dies, its three sleeps do not. */
  call = start_tree(c, NULL, &r, &pid, mark("607.1"));
  conch_call_free(call);
  close_sequence(c, pid, 1000, &r);
  assert_true(r.has_end);
  assert_string_equal(r.status, "signal: terminated");
  /* Past the grace: nothing more comes for them. */
  assert_true(proc_wait_count(sleep_mark("607.1"), 0, 2500, &left) < 0);
  measure("pid-only server, close sequence (grace 1000 ms), plain tree", -1,
          left);
  if (left != 3) {
    show_markers();
  }
  assert_int_equal(left, 3);

  /* The deadline: the same. */
  {
    start_opts o = {0};

    o.timeout_ms = 3000;
    call = start_tree(c, &o, &r, &pid, mark("607.2"));
    drain_call(c, call, &r);
    conch_call_free(call);
    assert_int_equal(r.code, CONCH_CODE_DEADLINE_EXCEEDED);
    t0 = conch_now_ms(); /* the leader was killed ... */
    while (conch_proc_alive(pid) && conch_now_ms() - t0 < WAIT_MS) {
      conch_sleep_ms(10);
    }
    assert_false(conch_proc_alive(pid));
    /* ... and nothing else is. */
    assert_true(proc_wait_count(sleep_mark("607.2"), 0, 1000, &left) < 0);
    measure("pid-only server, Start deadline 3000 ms, plain tree", -1, left);
    assert_int_equal(left, 3);
  }
  conch_client_free(c);
  /* Its shutdown still kills them. */
  assert_int_equal(serve_stop(&p, 15000), 0);
  assert_int_equal(proc_count_cmdline(sleep_mark("607.1")), 0);
  assert_int_equal(proc_count_cmdline(sleep_mark("607.2")), 0);
}

/* ---- The client's shield against a pid-only server (tree-leader.sh) --------
 */

static char *leader_text(void) {
  static char buf[8192];
  FILE *f = fopen(CONCH_SOURCE_DIR "/tools/conch/tree-leader.sh", "r");
  size_t n;

  assert_non_null(f);
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* Starts `sh -c <tree-leader> tree-leader 2 sh -c script`. */
static conch_call *start_led(conch_client *c, const start_opts *o,
                             run_result *r, pid_t *pid, const char *script) {
  return start_call(c, o, r, pid, "/bin/sh", "-c", leader_text(), "tree-leader",
                    "2", "sh", "-c", script, NULL);
}

static void test_leader_on_pid_only_server(void **state) {
  static const char *const args[] = {"--signal-pid-only", NULL};
  const char *tree =
      marked("sh -c 'sleep 608.1 & sleep 608.1; :' & sleep 608.1 & wait");
  serve_peer p;
  conch_client *c;
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  long ms;
  int left = 0;
  char msg[256];

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);

  /* The close sequence, plain tree: TERM is forwarded to the group. */
  call = start_led(c, NULL, &r, &pid, tree);
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("608.1"), 3, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  close_sequence(c, pid, 2000, &r);
  assert_true(r.has_end);
  assert_string_equal(r.status, "signal: terminated");
  proc_wait_count(sleep_mark("608.1"), 0, WAIT_MS, &left);
  measure("pid-only server + tree-leader, close sequence (grace 2000 ms), "
          "plain tree",
          (long)(conch_now_ms() - t0), left);
  assert_int_equal(left, 0);
  conch_call_free(call);

  /* A grandchild that ignores TERM: KILLed by the leader's grace timer,
     after the leader's end. */
  call = start_led(c, NULL, &r, &pid,
                   marked("sh -c 'trap \"\" TERM; sleep 608.2' & wait"));
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("608.2"), 1, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  close_sequence(c, pid, 2000, &r);
  assert_true(r.has_end);
  proc_wait_count(sleep_mark("608.2"), 0, WAIT_MS, &left);
  ms = (long)(conch_now_ms() - t0);
  measure("pid-only server + tree-leader, close sequence (grace 2000 ms), "
          "TERM-trapping grandchild",
          ms, left);
  assert_int_equal(left, 0);
  assert_true(ms >= 1500);
  conch_call_free(call);

  /* SendSignal KILL: the leader cannot forward it; its watcher sees it
     die and KILLs the group. */
  call =
      start_led(c, NULL, &r, &pid, marked("sleep 608.3 & sleep 608.3 & wait"));
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("608.3"), 2, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  proc_wait_count(sleep_mark("608.3"), 0, WAIT_MS, &left);
  measure("pid-only server + tree-leader, SendSignal KILL, 2 children",
          (long)(conch_now_ms() - t0), left);
  assert_int_equal(left, 0);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: killed");

  /* The Start deadline (SIGKILL to the leader): the same. */
  o.timeout_ms = 3000;
  call = start_led(c, &o, &r, &pid, marked("sleep 608.4 & sleep 608.4 & wait"));
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("608.4"), 2, WAIT_MS, NULL) >= 0);
  drain_call(c, call, &r); /* ends with the deadline, as the server's */
  conch_call_free(call);
  assert_int_equal(r.code, CONCH_CODE_DEADLINE_EXCEEDED);
  t0 = conch_now_ms();
  proc_wait_count(sleep_mark("608.4"), 0, WAIT_MS, &left);
  measure("pid-only server + tree-leader, Start deadline 3000 ms, 2 children "
          "(ms after the call's deadline)",
          (long)(conch_now_ms() - t0), left);
  assert_int_equal(left, 0);
  /* Nor do the leader's helpers stay (orphans come to the server). */
  t0 = conch_now_ms();
  while (proc_leftovers(p.pid, NULL, 0, NULL) != 0 &&
         conch_now_ms() - t0 < WAIT_MS) {
    conch_sleep_ms(10);
  }
  assert_int_equal(proc_leftovers(p.pid, NULL, 0, NULL), 0);

  /* What it keeps: exit codes, a death by signal, stdin, CloseStdin. */
  run_cmd(c, NULL, &r, "/bin/sh", "-c", leader_text(), "tree-leader", "2", "sh",
          "-c", "echo out; echo err >&2; exit 3", NULL);
  assert_string_equal(r.out, "out\n");
  assert_string_equal(r.err, "err\n");
  assert_int_equal(r.exit_code, 3);
  assert_string_equal(r.status, "exit status 3");
  run_cmd(c, NULL, &r, "/bin/sh", "-c", leader_text(), "tree-leader", "2", "sh",
          "-c", "kill -s TERM $$", NULL);
  assert_string_equal(r.status, "signal: terminated");
  run_cmd(c, NULL, &r, "/bin/sh", "-c", leader_text(), "tree-leader", "2",
          "nonexistent-command-608", NULL);
  assert_int_equal(r.exit_code, 127);
  call = start_led(c, NULL, &r, &pid, "cat; echo done");
  assert_non_null(call);
  assert_int_equal(
      send_input(c, pid, NULL, 0, "hello\n", 6, 0, msg, sizeof(msg)),
      CONCH_CODE_OK);
  assert_int_equal(close_stdin(c, pid, msg, sizeof(msg)), CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.out, "hello\ndone\n");
  assert_int_equal(r.exit_code, 0);
  conch_client_free(c);
  assert_int_equal(serve_stop(&p, 15000), 0);
  assert_int_equal(proc_count_cmdline(sleep_mark("608.1")), 0);
}

/* On a server that signals groups the leader steps aside (exec). */
static void test_leader_on_group_server(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  int left = 0;

  (void)state;
  call = start_led(c, NULL, &r, &pid,
                   marked("sh -c 'trap \"\" TERM; sleep 610.1' & "
                          "sleep 610.1 & wait"));
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("610.1"), 2, WAIT_MS, NULL) >= 0);
  close_sequence(c, pid, 1000, &r);
  assert_string_equal(r.status, "signal: terminated");
  proc_wait_count(sleep_mark("610.1"), 0, WAIT_MS, &left);
  assert_int_equal(left, 0);
  conch_call_free(call);
  run_cmd(c, NULL, &r, "/bin/sh", "-c", leader_text(), "tree-leader", "2", "sh",
          "-c", "exit 5", NULL);
  assert_string_equal(r.status, "exit status 5");
  conch_client_free(c);
}

/* envd gives a PTY process a session: when its leader dies, the kernel
   hangs up its foreground group (SIGHUP), so a shell's plain children go
   too, even on a pid-only server (no job control in `sh -c`). */
static void test_pty_on_pid_only_server(void **state) {
  static const char *const args[] = {"--signal-pid-only", NULL};
  serve_peer p;
  conch_client *c;
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0;
  int left = 0;

  (void)state;
  assert_int_equal(serve_start(&p, args), 0);
  c = client_new(p.url);
  o.pty_cols = 80;
  o.pty_rows = 24;
  call = start_call(c, &o, &r, &pid, "sh", "-c",
                    marked("sh -c 'sleep 609.1 & sleep 609.1; :' & "
                           "sleep 609.1 & wait"),
                    NULL);
  assert_non_null(call);
  assert_true(proc_wait_count(sleep_mark("609.1"), 3, WAIT_MS, NULL) >= 0);
  t0 = conch_now_ms();
  close_sequence(c, pid, 2000, &r);
  proc_wait_count(sleep_mark("609.1"), 0, 5000, &left);
  measure("pid-only server, PTY, close sequence (grace 2000 ms), plain tree "
          "(kernel SIGHUP)",
          (long)(conch_now_ms() - t0), left);
  conch_call_free(call);
  conch_client_free(c);
  assert_int_equal(serve_stop(&p, 15000), 0);
  assert_int_equal(left, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_term_tree),
      cmocka_unit_test(test_deadline_tree),
      cmocka_unit_test(test_close_sequence_tree),
      cmocka_unit_test(test_trapping_grandchild_late_connect),
      cmocka_unit_test(test_trapping_grandchild_early_connect),
      cmocka_unit_test(test_setsid_survives),
      cmocka_unit_test(test_pty_job_groups),
      cmocka_unit_test(test_many_trees),
      cmocka_unit_test(test_shutdown_tree),
      cmocka_unit_test(test_deadline_outlives_retention),
      cmocka_unit_test(test_server_killed),
      cmocka_unit_test(test_server_killed_in_grace),
      cmocka_unit_test(test_expiry_reads_no_proc),
      cmocka_unit_test(test_pid_only_leaks),
      cmocka_unit_test(test_leader_on_pid_only_server),
      cmocka_unit_test(test_leader_on_group_server),
      cmocka_unit_test(test_pty_on_pid_only_server),
  };

  if (getenv("SERVE_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
