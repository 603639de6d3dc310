/* ADR-0019's awkward cases against `conch serve`, each checked in the OS
   process table (/proc), not only in the server's List: closing a handle
   ends the process AND everything it started, however the client ends the
   handle (break, error in a callback, another handle's cancel, a close or
   a dead client during the grace period, 100 handles at once), and a dead
   or frozen server ends every open handle with unavailable within the
   documented liveness bound.

   Each case marks its processes with numbers of its own on their command
   lines (`sleep 7791CCN<pid>`, C the case, pid the test's) and counts live
   processes that carry the mark: the shell, its subshells, children and
   grandchildren.  It prints the leak count and the time from the close to the
   death of the last descendant.  The tree cases need a server that signals
   whole process groups (tools/conch/README.md). */
#include <errno.h>
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <conch/process.h>

#include "peer.h"
#include "wait.h"

static conch_peer server;
static char url[64];
/* `test_teardown pid-only`: servers run with --signal-pid-only (envd's way:
   signals reach the pid only), so trees are ended by the client's tree
   leader (conch/process.h, "Process trees"), the default there.  With
   CONCH_TREE=off too the leaks are reported, not failed (a measurement of
   what the leader saves). */
static int pid_only;
static int leaks_fail = 1;

/* Every wait for a condition: generous, for a loaded 2-core machine. */
#define WAIT_MS 20000
/* The liveness interval of the dead/frozen server cases. */
#define KEEPALIVE_MS 1000
#define BOUND_MS (3 * KEEPALIVE_MS + 5000)
/* The lifetime of the processes of those cases. */
#define LIFETIME_MS 15000

static int start_server(conch_peer *p, char *u, size_t n) {
  const char *argv[] = {CONCH_BIN,    "serve",
                        "--listen",   "127.0.0.1:0",
                        "--no-token", pid_only ? "--signal-pid-only" : NULL,
                        NULL};
  if (conch_peer_start_argv(p, argv) != 0) {
    return -1;
  }
  snprintf(u, n, "http://127.0.0.1:%d", p->port);
  return 0;
}

static int group_setup(void **state) {
  (void)state;
  return start_server(&server, url, sizeof(url));
}

static int group_teardown(void **state) {
  (void)state;
  conch_peer_stop(&server);
  return 0;
}

/* ---- The OS process table ----------------------------------------------- */

/* The mark of case |base| in this run: |base| then our pid in 7 digits
   (no mark is a prefix of another), so that two runs of the suite at once
   (CI and a developer, two worktrees) never count or wait for each
   other's processes. */
static const char *run_mark(const char *base) {
  static char bufs[16][32];
  static unsigned next;
  char *b = bufs[next++ % 16];
  snprintf(b, sizeof(bufs[0]), "%s%07ld", base, (long)getpid());
  return b;
}

/* Live (not zombie) processes whose command line contains |mark|; their
   pids go to |pids| (up to |cap|) when not NULL. */
static int count_marked(const char *mark, pid_t *pids, int cap) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int n = 0;
  if (d == NULL) {
    return -1;
  }
  while ((e = readdir(d)) != NULL) {
    char path[300], buf[4096], *p;
    size_t len, i;
    FILE *f;
    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i < len; i++) {
      if (buf[i] == '\0') {
        buf[i] = ' ';
      }
    }
    buf[len] = '\0';
    if (strstr(buf, mark) == NULL) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (p == NULL || (p = strrchr(buf, ')')) == NULL || p[2] == 'Z' ||
        p[2] == 'X') {
      continue;
    }
    if (pids != NULL && n < cap) {
      pids[n] = (pid_t)atoi(e->d_name);
    }
    n++;
  }
  closedir(d);
  return n;
}

typedef struct marked_wait {
  const char *mark;
  int want;
} marked_wait;

static int marked_at_least(void *arg) {
  marked_wait *w = arg;
  return count_marked(w->mark, NULL, 0) >= w->want;
}

static int marked_none(void *arg) {
  return count_marked(((marked_wait *)arg)->mark, NULL, 0) == 0;
}

/* Waits until at least |want| marked processes run. */
static void wait_marked(const char *mark, int want) {
  marked_wait w = {mark, want};
  if (!conch_wait_until(marked_at_least, &w, WAIT_MS)) {
    fail_msg("%s: %d processes did not all start", mark, want);
  }
}

/* Waits up to WAIT_MS for the marked processes to be gone.  Prints the leak
   count and the time from |t_close| to the death of the last one, kills
   what is left (so later cases start clean), and returns the leak count. */
static int leaks_after(const char *what, const char *mark, int64_t t_close) {
  pid_t pids[256];
  int n, i;
  int64_t t_gone = -1;
  marked_wait w = {mark, 0};
  long left = (long)(t_close + WAIT_MS - conch_now_ms());
  if (conch_wait_until(marked_none, &w, left > 0 ? left : 0)) {
    t_gone = conch_now_ms();
  }
  n = count_marked(mark, pids, 256);
  if (t_gone >= 0) {
    printf("  %-44s leaks 0, close -> last descendant dead %lld ms\n", what,
           (long long)(t_gone - t_close));
  } else {
    printf("  %-44s leaks %d (still alive %d s after the close)\n", what, n,
           WAIT_MS / 1000);
  }
  for (i = 0; i < n && i < 5; i++) { /* what was left, to say why */
    char path[64], buf[256];
    size_t len, k;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pids[i]);
    if ((f = fopen(path, "r")) == NULL) {
      continue;
    }
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (k = 0; k < len; k++) {
      buf[k] = buf[k] == '\0' ? ' ' : buf[k];
    }
    buf[len] = '\0';
    printf("    left: %d %.160s\n", (int)pids[i], buf);
  }
  fflush(stdout);
  for (i = 0; i < n && i < 256; i++) {
    kill(pids[i], SIGKILL);
  }
  return n;
}

/* The cases' verdict: no process left (reported only in pid-only mode). */
static void no_leak(int n) {
  if (leaks_fail) {
    assert_int_equal(n, 0);
  }
}

/* ---- Helpers ------------------------------------------------------------ */

static conch_sandbox *sandbox_at(const char *u, long keepalive_ms,
                                 long grace_ms) {
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_sandbox *sb;
  o.url = u;
  o.kill_grace_ms = grace_ms;
  o.keepalive_ms = keepalive_ms;
  assert_int_equal(conch_sandbox_new(&sb, &o), 0);
  return sb;
}

static conch_sandbox *sandbox(void) { return sandbox_at(url, 0, 500); }

/* `sh -c SCRIPT` where SCRIPT is made with printf-style |fmt|. */
typedef struct shell {
  char script[1024];
  const char *argv[2];
  conch_proc_opts o;
} shell;

static conch_proc_opts *sh(shell *s, const char *fmt, ...) {
  conch_proc_opts d = CONCH_PROC_OPTS_INIT;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->script, sizeof(s->script), fmt, ap);
  va_end(ap);
  s->argv[0] = "-c";
  s->argv[1] = s->script;
  s->o = d;
  s->o.cmd = "/bin/sh";
  s->o.args = s->argv;
  s->o.nargs = 2;
  return &s->o;
}

/* A shell with two background children, a subshell with a grandchild and
   a nested shell with two more, printing a tick every 100 ms: seven marked
   processes besides the ticking sleeps. */
#define TREE                                                                   \
  "sleep %s1 & sleep %s2 & (sleep %s3 & wait) & sh -c 'sleep %s4 & sleep "     \
  "%s5; : %s' & while :; do echo tick; sleep 0.1; done"
#define TREE_N 6 /* 5 sleeps + the nested sh (subshells come and go) */

static conch_proc_opts *tree(shell *s, const char *m) {
  return sh(s, TREE, m, m, m, m, m, m);
}

/* ---- Cases -------------------------------------------------------------- */

static void test_break_early(void **state) {
  const char *m = run_mark("7791301");
  conch_sandbox *sb = sandbox();
  conch_process *p;
  conch_chunk c;
  conch_status st;
  shell s;
  int64_t t;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(conch_stream(sb, tree(&s, m), &p, &st), 0);
  assert_int_equal(conch_process_next(p, &c), 0); /* one chunk, then break */
  wait_marked(m, TREE_N);
  t = conch_now_ms();
  assert_int_equal(conch_process_close(p), 0);
  no_leak(leaks_after("break early", m, t));
  conch_sandbox_free(sb);
}

typedef struct cb_state {
  int closed;
  int rv;
  int chunks;
  int64_t t_close;
} cb_state;

static void cb_closed(int rv, void *ud) {
  cb_state *c = ud;
  c->closed = 1;
  c->rv = rv;
}

/* The callback "raises": it gives up on the handle from inside on_chunk. */
static void cb_chunk_raises(conch_process *p, const conch_chunk *chunk,
                            void *ud) {
  cb_state *c = ud;
  (void)chunk;
  c->chunks++;
  if (c->t_close == 0 && count_marked(run_mark("7791302"), NULL, 0) >= TREE_N) {
    c->t_close = conch_now_ms();
    conch_process_close_async(p, cb_closed, c);
  }
}

static void test_error_in_chunk_callback(void **state) {
  static const conch_process_handler h = {NULL, cb_chunk_raises, NULL};
  const char *m = run_mark("7791302");
  conch_sandbox *sb = sandbox();
  cb_state c = {0, -1, 0, 0};
  conch_process *p;
  shell s;
  int64_t t0 = conch_now_ms();
  (void)state;
  assert_int_equal(conch_stream_async(sb, tree(&s, m), &h, &c, &p), 0);
  while (!c.closed && conch_now_ms() - t0 < WAIT_MS) {
    assert_int_equal(conch_client_run(conch_sandbox_native(sb), 100), 0);
  }
  assert_true(c.closed);
  assert_int_equal(c.rv, 0);
  no_leak(leaks_after("error raised in a chunk callback", m, c.t_close));
  conch_sandbox_free(sb);
}

static void test_cancel_from_another_handle(void **state) {
  const char *m = run_mark("7791303");
  conch_sandbox *sb = sandbox(), *other = sandbox();
  conch_selector sel = {0, NULL};
  conch_process *p;
  conch_exec_result r;
  conch_status st;
  shell s;
  int64_t t;
  (void)state;
  conch_status_init(&st);
  conch_exec_result_init(&r);
  assert_int_equal(conch_stream(sb, tree(&s, m), &p, &st), 0);
  wait_marked(m, TREE_N);
  sel.pid = conch_process_pid(p);
  t = conch_now_ms();
  assert_int_equal(conch_kill(other, &sel, SIGTERM, &st), 0);
  assert_int_equal(conch_process_wait(p, &r, &st), 0);
  assert_string_equal(r.status, "signal: terminated");
  assert_int_equal(conch_process_close(p), 0);
  no_leak(leaks_after("cancel (TERM) from another handle", m, t));
  conch_exec_result_clear(&r);
  conch_sandbox_free(other);
  conch_sandbox_free(sb);
}

/* A tree whose every member ignores TERM: only the KILL after the grace
   period ends it. */
#define TRAPPED "trap '' TERM; " TREE

static void test_closed_during_grace(void **state) {
  const char *m = run_mark("7791304");
  conch_sandbox *sb = sandbox_at(url, 0, 3000);
  cb_state c = {0, -1, 0, 0};
  conch_process *p;
  conch_status st;
  shell s;
  int64_t t;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(conch_stream(sb, sh(&s, TRAPPED, m, m, m, m, m, m), &p, &st),
                   0);
  wait_marked(m, TREE_N);
  t = conch_now_ms();
  conch_process_close_async(p, cb_closed, &c);
  /* Into the grace period: TERM was sent (and ignored). */
  while (conch_now_ms() - t < 1000) {
    assert_int_equal(conch_client_run(conch_sandbox_native(sb), 100), 0);
  }
  assert_false(c.closed);
  assert_int_equal(count_marked(m, NULL, 0) >= TREE_N, 1);
  /* The sandbox goes while the handle is in its grace period. */
  conch_sandbox_free(sb);
  assert_true(c.closed);
  no_leak(leaks_after("sandbox freed during the grace period", m, t));
}

static void test_client_killed_during_grace(void **state) {
  const char *m = run_mark("7791305");
  int fds[2];
  pid_t child;
  char b;
  int64_t t;
  int status;
  (void)state;
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    conch_sandbox *sb;
    conch_process *p;
    conch_status st;
    shell s;
    close(fds[0]);
    sb = sandbox_at(url, 0, 5000);
    conch_status_init(&st);
    if (conch_stream(sb, sh(&s, TRAPPED, m, m, m, m, m, m), &p, &st) != 0) {
      _exit(1);
    }
    while (count_marked(m, NULL, 0) < TREE_N) {
      conch_sleep_ms(10);
    }
    conch_process_close_async(p, NULL, NULL);
    if (write(fds[1], "c", 1) != 1) {
      _exit(1);
    }
    for (;;) { /* in the grace period until killed */
      conch_client_run(conch_sandbox_native(sb), 100);
    }
  }
  close(fds[1]);
  assert_int_equal(read(fds[0], &b, 1), 1);
  close(fds[0]);
  conch_sleep_ms(300); /* let the TERM go out: the kill lands in the grace */
  t = conch_now_ms();
  kill(child, SIGKILL);
  assert_int_equal(waitpid(child, &status, 0), child);
  no_leak(leaks_after("client killed during the grace period", m, t));
}

static void test_trees_plain_and_trapping(void **state) {
  const char *m1 = run_mark("7791306"), *m2 = run_mark("7791307");
  conch_sandbox *sb = sandbox_at(url, 0, 2000);
  conch_process *p;
  conch_status st;
  shell s;
  int64_t t;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(conch_stream(sb, tree(&s, m1), &p, &st), 0);
  wait_marked(m1, TREE_N);
  t = conch_now_ms();
  assert_int_equal(conch_process_close(p), 0);
  no_leak(leaks_after("shell with children and grandchildren", m1, t));
  assert_int_equal(
      conch_stream(sb, sh(&s, TRAPPED, m2, m2, m2, m2, m2, m2), &p, &st), 0);
  wait_marked(m2, TREE_N);
  t = conch_now_ms();
  assert_int_equal(conch_process_close(p), 0);
  no_leak(leaks_after("the same trapping TERM (grace 2000 ms)", m2, t));
  conch_sandbox_free(sb);
}

static void test_hundred_handles(void **state) {
  enum { N = 100 };
  const char *m = run_mark("7791308");
  conch_sandbox *sb = sandbox();
  conch_process *p[N];
  conch_status st;
  shell s;
  int i;
  int64_t t;
  (void)state;
  conch_status_init(&st);
  for (i = 0; i < N; i++) {
    assert_int_equal(
        conch_stream(sb, sh(&s, "sleep %s1; : %s", m, m), &p[i], &st), 0);
  }
  wait_marked(m, 2 * N);
  t = conch_now_ms();
  conch_sandbox_free(sb);
  no_leak(leaks_after("100 handles freed by conch_sandbox_free", m, t));
}

/* ---- Dead and frozen servers -------------------------------------------- */

typedef struct end_state {
  int ended;
  conch_code code;
  int64_t t;
} end_state;

static void on_end_async(conch_process *p, const conch_exec_result *r,
                         const conch_status *st, void *ud) {
  end_state *e = ud;
  (void)p;
  (void)r;
  e->ended = 1;
  e->code = st->code;
  e->t = conch_now_ms();
}

/* Open handles of every long-lived kind on a server of its own: a blocking
   stream, an asynchronous one, a stdin stream; the server is then killed
   (kill -9) or frozen (SIGSTOP).  HTTP/1.1 when |h1|; HTTP/2 without
   PINGs when |no_ping| (the caller's client options turned them off, which
   the sandbox's default must not override). */
static void under_open_handles(int freeze, int h1, int no_ping, const char *m) {
  static const conch_process_handler h = {NULL, NULL, on_end_async};
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_client_opts *co = NULL;
  conch_peer srv;
  char u[64];
  conch_sandbox *sb;
  conch_process *pb, *pa, *pc;
  conch_stdin *in;
  conch_selector sel = {0, NULL};
  end_state ea = {0, CONCH_CODE_OK, 0};
  conch_chunk c;
  conch_status st;
  shell s;
  int rv, left;
  int64_t t0, tb;
  char what[96];

  assert_int_equal(start_server(&srv, u, sizeof(u)), 0);
  if (h1 || no_ping) {
    assert_int_equal(conch_client_opts_new(&co), 0);
  }
  if (h1) {
    assert_int_equal(conch_client_opts_set_http_version(co, CONCH_HTTP_1_1), 0);
  }
  if (no_ping) {
    assert_int_equal(conch_client_opts_set_keepalive(co, 0, 0), 0);
  }
  o.url = u;
  o.kill_grace_ms = 500;
  o.keepalive_ms = KEEPALIVE_MS;
  /* The lifetime is what still ends the processes once a frozen server
     runs again: the closes could not reach it, and a server (envd, conch
     serve) does not end a process when its stream goes away. */
  o.timeout_ms = LIFETIME_MS;
  o.client_opts = co;
  assert_int_equal(conch_sandbox_new(&sb, &o), 0);
  conch_client_opts_free(co);
  conch_status_init(&st);
  /* Quiet processes: only keepalive events come while they run. */
  assert_int_equal(conch_stream(sb, sh(&s, "sleep %s1; : %s", m, m), &pb, &st),
                   0);
  assert_int_equal(
      conch_stream_async(sb, sh(&s, "sleep %s2; : %s", m, m), &h, &ea, &pa), 0);
  sh(&s, "cat; : %s", m);
  s.o.stdin_enabled = 1;
  assert_int_equal(conch_stream(sb, &s.o, &pc, &st), 0);
  sel.pid = conch_process_pid(pc);
  assert_int_equal(conch_stdin_open(sb, &sel, &in, &st), 0);
  assert_int_equal(conch_stdin_write(in, "x", 1), 0);
  wait_marked(m, 5); /* 2 x (sh + sleep), the sh of cat */
  /* Quiet for longer than the bound: the keepalives keep them alive. */
  t0 = conch_now_ms();
  while (conch_now_ms() - t0 < BOUND_MS + 1000) {
    assert_int_equal(conch_client_run(conch_sandbox_native(sb), 100), 0);
  }
  assert_false(ea.ended);

  t0 = conch_now_ms();
  kill(srv.pid, freeze ? SIGSTOP : SIGKILL);
  rv = conch_process_next(pb, &c);
  tb = conch_now_ms();
  assert_int_equal(rv, CONCH_ERR_RPC);
  assert_int_equal(conch_process_status(pb)->code, CONCH_CODE_UNAVAILABLE);
  while (!ea.ended && conch_now_ms() - t0 < WAIT_MS) {
    assert_int_equal(conch_client_run(conch_sandbox_native(sb), 100), 0);
  }
  assert_true(ea.ended);
  assert_int_equal(ea.code, CONCH_CODE_UNAVAILABLE);
  printf("  %s server, HTTP/%s%s: blocking handle unavailable after %lld ms, "
         "asynchronous after %lld ms (bound %d ms)\n",
         freeze ? "frozen" : "killed", h1 ? "1.1" : "2",
         no_ping ? " without PINGs" : "", (long long)(tb - t0),
         (long long)(ea.t - t0), BOUND_MS);
  assert_true(tb - t0 <= BOUND_MS + 2000);
  assert_true(ea.t - t0 <= BOUND_MS + 2000);
  if (freeze && !h1 && !no_ping) {
    /* PINGs found it (3 x KEEPALIVE_MS), before the stream's bound. */
    assert_true(tb - t0 < BOUND_MS - 1000);
  } else if (freeze) {
    /* No PINGs: the keepalive events' bound did. */
    assert_true(tb - t0 >= BOUND_MS - 500);
  }
  /* The stdin stream: writes go nowhere, the close is bounded. */
  t0 = conch_now_ms();
  rv = conch_stdin_write(in, "y", 1);
  if (rv == 0) {
    rv = conch_stdin_close(in, &st);
  } else {
    conch_stdin_close(in, &st);
  }
  assert_int_equal(rv, CONCH_ERR_RPC);
  assert_true(conch_now_ms() - t0 <= BOUND_MS + 2000);
  conch_status_clear(&st);
  /* Closing tries to end the processes, all at once; the server cannot
     answer, and each try is bounded by the liveness bound. */
  t0 = conch_now_ms();
  conch_sandbox_free(sb);
  tb = conch_now_ms() - t0;
  printf("  closing the 3 handles (conch_sandbox_free) took %lld ms\n",
         (long long)tb);
  /* One bound for all: a server that answered nothing of a close gets no
     SIGKILL to wait out the bound again. */
  assert_true(tb <= BOUND_MS + 2000);
  snprintf(what, sizeof(what), "%s server, HTTP/%s",
           freeze ? "frozen, then SIGCONT," : "kill -9 of the",
           h1 ? "1.1" : "2");
  t0 = conch_now_ms();
  if (freeze) {
    /* Once it runs again, the lifetime (passed while it was frozen, or
       soon) ends the processes. */
    kill(srv.pid, SIGCONT);
    left = leaks_after(what, m, t0);
    conch_peer_stop(&srv);
    no_leak(left);
  } else {
    /* No client can reach them any more: only the server's own
       provisions (a parent-death signal, a subreaper) can end them.  Say
       what remains (leaks_after kills it), without failing on it. */
    conch_peer_stop(&srv);
    left = leaks_after(what, m, t0);
    printf("  (after kill -9 of the server, %d of its processes remain%s)\n",
           left, left > 0 ? ": no client can reach them" : "");
  }
}

/* A caller that neither reads nor drives the loop for longer than the
   bound is not a silent server: what the server sent meanwhile waits in the
   socket, and both handle kinds read it instead of failing. */
static void test_idle_caller_is_not_a_dead_server(void **state) {
  static const conch_process_handler h = {NULL, NULL, on_end_async};
  const char *m = run_mark("7791313");
  conch_sandbox *sb = sandbox_at(url, KEEPALIVE_MS, 500);
  conch_process *pb, *pa;
  end_state ea = {0, CONCH_CODE_OK, 0};
  conch_exec_result r;
  conch_status st;
  shell s;
  int64_t t0;
  (void)state;
  conch_status_init(&st);
  conch_exec_result_init(&r);
  assert_int_equal(conch_stream(sb, sh(&s, "sleep 9; echo %s", m), &pb, &st),
                   0);
  assert_int_equal(
      conch_stream_async(sb, sh(&s, "sleep 9; echo %s", m), &h, &ea, &pa), 0);
  assert_int_equal(conch_client_run(conch_sandbox_native(sb), 0), 0);
  conch_sleep_ms(BOUND_MS + 2000); /* no loop at all */
  t0 = conch_now_ms();
  while (!ea.ended && conch_now_ms() - t0 < WAIT_MS) {
    assert_int_equal(conch_client_run(conch_sandbox_native(sb), 100), 0);
  }
  assert_true(ea.ended);
  assert_int_equal(ea.code, CONCH_CODE_OK);
  assert_int_equal(conch_process_wait(pb, &r, &st), 0);
  assert_int_equal(r.exit_code, 0);
  conch_exec_result_clear(&r);
  assert_int_equal(conch_process_close(pb), 0);
  assert_int_equal(conch_process_close(pa), 0);
  conch_sandbox_free(sb);
}

static void test_server_frozen_h2(void **state) {
  (void)state;
  under_open_handles(1, 0, 0, run_mark("7791309"));
}

static void test_server_frozen_h2_no_ping(void **state) {
  (void)state;
  under_open_handles(1, 0, 1, run_mark("7791312"));
}

static void test_server_frozen_h1(void **state) {
  (void)state;
  under_open_handles(1, 1, 0, run_mark("7791310"));
}

static void test_server_killed(void **state) {
  (void)state;
  under_open_handles(0, 0, 0, run_mark("7791311"));
}

/* test_teardown [pid-only] handles|servers [FILTER]: the handle cases
   (the client ends handles) or the server cases (dead and frozen servers,
   each on a server of its own but the idle caller's); FILTER runs only the
   tests that match it (cmocka's filter).  With pid-only the server cases
   are those whose outcome depends on how the server signals: a frozen
   server's lifetime ends the trees only through the tree leader.  The
   others (no PINGs, HTTP/1.1, kill -9, the idle caller) test the client's
   liveness, the same whatever the server's signals reach. */
int main(int argc, char **argv) {
  int a = 1, servers;
  const struct CMUnitTest handles[] = {
      cmocka_unit_test(test_break_early),
      cmocka_unit_test(test_error_in_chunk_callback),
      cmocka_unit_test(test_cancel_from_another_handle),
      cmocka_unit_test(test_closed_during_grace),
      cmocka_unit_test(test_client_killed_during_grace),
      cmocka_unit_test(test_trees_plain_and_trapping),
      cmocka_unit_test(test_hundred_handles),
  };
  const struct CMUnitTest server_cases[] = {
      cmocka_unit_test(test_idle_caller_is_not_a_dead_server),
      cmocka_unit_test(test_server_frozen_h2),
      cmocka_unit_test(test_server_frozen_h2_no_ping),
      cmocka_unit_test(test_server_frozen_h1),
      cmocka_unit_test(test_server_killed),
  };
  const struct CMUnitTest server_cases_pid_only[] = {
      cmocka_unit_test(test_server_frozen_h2),
  };
  const char *tree = getenv("CONCH_TREE");
  if (argc > a && strcmp(argv[a], "pid-only") == 0) {
    pid_only = 1;
    leaks_fail = tree == NULL || strcmp(tree, "off") != 0;
    a++;
  }
  if (argc <= a ||
      (strcmp(argv[a], "handles") != 0 && strcmp(argv[a], "servers") != 0)) {
    fprintf(stderr, "usage: test_teardown [pid-only] handles|servers "
                    "[FILTER]\n");
    return 2;
  }
  servers = strcmp(argv[a++], "servers") == 0;
  if (argc > a) {
    cmocka_set_test_filter(argv[a]);
  }
  printf("server: conch serve%s\n",
         !pid_only    ? ""
         : leaks_fail ? " --signal-pid-only, the client's tree leader on"
                      : " --signal-pid-only, CONCH_TREE=off (leaks reported, "
                        "not failed)");
  if (!servers) {
    return cmocka_run_group_tests_name("handles", handles, group_setup,
                                       group_teardown);
  }
  if (pid_only) {
    return cmocka_run_group_tests_name("servers", server_cases_pid_only,
                                       group_setup, group_teardown);
  }
  return cmocka_run_group_tests_name("servers", server_cases, group_setup,
                                     group_teardown);
}
