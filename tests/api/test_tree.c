/* The client's tree leader (conch/process.h, "Process trees") against
   `conch serve --signal-pid-only`, the stand-in for envd, which signals the
   pid only: it must be transparent (exit codes 0-255 and deaths by every
   signal exactly as without it, List showing the caller's command, stdin
   and PTYs unchanged, a clear failure when asked for without its tools)
   and must end whole trees (the leader SIGKILLed, a TERM-trapping
   grandchild at the grace, 100 trees at once), checked in /proc.

   Processes carry marks of their own on their command lines (`sleep
   7792CCN<pid>`), so that two runs at once never count each other's. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <conch/process.h>

#include "peer.h"
#include "process/process.conch.h"
#include "process/process.pb-c.h"
#include "wait.h"

#define WAIT_MS 20000
#define GRACE_MS 1500

static conch_peer pid_only; /* --signal-pid-only */
static conch_peer groups;   /* signals groups itself */
static char pid_only_url[64], groups_url[64];

static int start_server(conch_peer *p, char *u, size_t n, int pid_only_mode) {
  const char *argv[] = {
      CONCH_BIN,     "serve",      "--listen",
      "127.0.0.1:0", "--no-token", pid_only_mode ? "--signal-pid-only" : NULL,
      NULL};
  if (conch_peer_start_argv(p, argv) != 0) {
    return -1;
  }
  snprintf(u, n, "http://127.0.0.1:%d", p->port);
  return 0;
}

static int group_setup(void **state) {
  (void)state;
  unsetenv("CONCH_TREE");
  if (start_server(&pid_only, pid_only_url, sizeof(pid_only_url), 1) != 0) {
    return -1;
  }
  return start_server(&groups, groups_url, sizeof(groups_url), 0);
}

static int group_teardown(void **state) {
  (void)state;
  conch_peer_stop(&pid_only);
  conch_peer_stop(&groups);
  return 0;
}

static conch_sandbox *sandbox_at(const char *u, int tree) {
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_sandbox *sb;
  o.url = u;
  o.kill_grace_ms = GRACE_MS;
  o.tree = tree;
  assert_int_equal(conch_sandbox_new(&sb, &o), 0);
  return sb;
}

static const char *run_mark(const char *base) {
  static char bufs[16][32];
  static unsigned next;
  char *b = bufs[next++ % 16];
  snprintf(b, sizeof(bufs[0]), "%s%07ld", base, (long)getpid());
  return b;
}

/* Live processes whose command line contains |mark|. */
static int count_marked(const char *mark) {
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
    if ((f = fopen(path, "r")) == NULL) {
      continue;
    }
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i < len; i++) {
      buf[i] = buf[i] == '\0' ? ' ' : buf[i];
    }
    buf[len] = '\0';
    if (strstr(buf, mark) == NULL) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    if ((f = fopen(path, "r")) == NULL) {
      continue;
    }
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (p == NULL || (p = strrchr(buf, ')')) == NULL || p[2] == 'Z' ||
        p[2] == 'X') {
      continue;
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
  return count_marked(w->mark) >= w->want;
}

static int marked_none(void *arg) {
  return count_marked(((marked_wait *)arg)->mark) == 0;
}

static void wait_marked(const char *mark, int want) {
  marked_wait w = {mark, want};
  if (!conch_wait_until(marked_at_least, &w, WAIT_MS)) {
    fail_msg("%s: %d processes did not all start", mark, want);
  }
}

/* Waits for the marked processes to be gone; returns the ms from |t0|
   (fails if some outlive WAIT_MS). */
static long gone_after(const char *what, const char *mark, int64_t t0) {
  marked_wait w = {mark, 0};
  long ms;
  if (!conch_wait_until(marked_none, &w, WAIT_MS)) {
    fail_msg("%s: %d processes left %d s after the signal", what,
             count_marked(mark), WAIT_MS / 1000);
  }
  ms = (long)(conch_now_ms() - t0);
  printf("  %-48s leaks 0, last descendant dead after %ld ms\n", what, ms);
  fflush(stdout);
  return ms;
}

/* `sh -c SCRIPT`. */
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

static void run_ok(conch_sandbox *sb, conch_proc_opts *o,
                   conch_exec_result *r) {
  conch_status st;
  conch_status_init(&st);
  conch_exec_result_init(r);
  if (conch_run(sb, o, r, &st) != 0) {
    fail_msg("run failed: %s", st.message != NULL ? st.message : "?");
  }
  conch_status_clear(&st);
}

static int same_str(const char *a, const char *b) {
  return (a == NULL && b == NULL) ||
         (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The result with and without the leader, and with it, must be the
   same in every field the caller sees. */
static void assert_same_result(const char *what, const conch_exec_result *a,
                               const conch_exec_result *b) {
  if (a->exit_code != b->exit_code || a->exited != b->exited ||
      !same_str(a->status, b->status) || !same_str(a->error, b->error) ||
      a->out_len != b->out_len || a->err_len != b->err_len ||
      (a->out_len > 0 && memcmp(a->out, b->out, a->out_len) != 0) ||
      (a->err_len > 0 && memcmp(a->err, b->err, a->err_len) != 0)) {
    fail_msg("%s: with the leader %d/%d '%s' out %zu err %zu '%.*s', "
             "without %d/%d '%s' out %zu err %zu '%.*s'",
             what, a->exit_code, a->exited, a->status ? a->status : "-",
             a->out_len, a->err_len, (int)a->err_len,
             a->err ? (const char *)a->err : "", b->exit_code, b->exited,
             b->status ? b->status : "-", b->out_len, b->err_len,
             (int)b->err_len, b->err ? (const char *)b->err : "");
  }
}

/* ---- Transparency ------------------------------------------------------- */

static void test_exit_codes(void **state) {
  conch_sandbox *on = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_sandbox *off = sandbox_at(pid_only_url, CONCH_TREE_OFF);
  int code;
  (void)state;
  for (code = 0; code < 256; code++) {
    conch_exec_result a, b;
    shell s;
    char what[64];
    sh(&s, "echo out; echo err >&2; exit %d", code);
    run_ok(on, &s.o, &a);
    run_ok(off, &s.o, &b);
    snprintf(what, sizeof(what), "exit %d", code);
    assert_same_result(what, &a, &b);
    assert_int_equal(a.exit_code, code);
    assert_true(a.exited);
    conch_exec_result_clear(&a);
    conch_exec_result_clear(&b);
  }
  printf("  exit codes 0-255: the same code, status and output as without "
         "the leader\n");
  conch_sandbox_free(on);
  conch_sandbox_free(off);
}

static void test_signals(void **state) {
  conch_sandbox *on = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_sandbox *off = sandbox_at(pid_only_url, CONCH_TREE_OFF);
  int sig, n = 0;
  (void)state;
  for (sig = 1; sig < 32; sig++) {
    conch_exec_result a, b;
    shell s;
    char what[64];
    /* Those that do not end a process by default. */
    if (sig == SIGCHLD || sig == SIGCONT || sig == SIGSTOP || sig == SIGTSTP ||
        sig == SIGTTIN || sig == SIGTTOU || sig == SIGURG || sig == SIGWINCH) {
      continue;
    }
    /* No core file either way, so that the status does not depend on
       the core limit. */
    sh(&s, "ulimit -c 0; echo before; kill -%d $$; echo after", sig);
    run_ok(on, &s.o, &a);
    run_ok(off, &s.o, &b);
    snprintf(what, sizeof(what), "signal %d", sig);
    assert_same_result(what, &a, &b);
    assert_false(a.exited);
    assert_int_equal(a.exit_code, -1);
    conch_exec_result_clear(&a);
    conch_exec_result_clear(&b);
    n++;
  }
  printf("  %d signals: the same death, status and output as without the "
         "leader\n",
         n);
  conch_sandbox_free(on);
  conch_sandbox_free(off);
}

static void test_unknown_command(void **state) {
  conch_sandbox *on = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_sandbox *off = sandbox_at(pid_only_url, CONCH_TREE_OFF);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  conch_exec_result a, b;
  (void)state;
  o.cmd = "conch-no-such-command";
  run_ok(on, &o, &a);
  run_ok(off, &o, &b);
  assert_same_result("unknown command", &a, &b);
  assert_int_equal(a.exit_code, 127);
  conch_exec_result_clear(&a);
  conch_exec_result_clear(&b);
  conch_sandbox_free(on);
  conch_sandbox_free(off);
}

static void test_stdin(void **state) {
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  conch_process *p;
  conch_exec_result r;
  conch_status st;
  conch_chunk c;
  char got[64] = {0};
  size_t n = 0;
  int rv;
  (void)state;
  conch_status_init(&st);
  o.cmd = "cat";
  o.stdin_enabled = 1;
  assert_int_equal(conch_stream(sb, &o, &p, &st), 0);
  assert_int_equal(conch_process_send_stdin(p, "hello tree\n", 11, &st), 0);
  assert_int_equal(conch_process_close_stdin(p, &st), 0);
  while ((rv = conch_process_next(p, &c)) == 0) {
    if (c.stream == CONCH_CHUNK_STDOUT && n + c.len < sizeof(got)) {
      memcpy(got + n, c.data, c.len);
      n += c.len;
    }
  }
  assert_int_equal(rv, CONCH_ERR_EOF);
  conch_exec_result_init(&r);
  assert_int_equal(conch_process_wait(p, &r, &st), 0);
  assert_string_equal(got, "hello tree\n");
  assert_int_equal(r.exit_code, 0);
  conch_exec_result_clear(&r);
  conch_process_close(p);
  /* stdin off: /dev/null, so cat ends at once. */
  o.stdin_enabled = 0;
  run_ok(sb, &o, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(r.out_len, 0);
  conch_exec_result_clear(&r);
  conch_sandbox_free(sb);
}

/* List (and so `conch ps`) shows the caller's command, the pid is the one
   to signal, env and cwd are as sent. */
static void test_list_shows_the_command(void **state) {
  const char *m = run_mark("7792101");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  const char *args[2] = {"600", m};
  conch_env env[1] = {{"CONCH_TREE_TEST", "1"}};
  conch_process_info *list;
  conch_selector sel = {0, NULL};
  conch_status st;
  uint32_t pid;
  size_t n, i;
  int found = 0;
  (void)state;
  conch_status_init(&st);
  o.cmd = "sleep";
  o.args = args;
  o.nargs = 2;
  o.env = env;
  o.nenv = 1;
  o.cwd = "/tmp";
  o.tag = m;
  assert_int_equal(conch_start(sb, &o, &pid, &st), 0);
  assert_int_equal(conch_list(sb, &list, &n, &st), 0);
  for (i = 0; i < n; i++) {
    if (list[i].pid != pid) {
      continue;
    }
    found = 1;
    assert_string_equal(list[i].cmd, "sleep");
    assert_int_equal(list[i].nargs, 2);
    assert_string_equal(list[i].args[0], "600");
    assert_string_equal(list[i].args[1], m);
    assert_string_equal(list[i].tag, m);
    assert_string_equal(list[i].cwd, "/tmp");
    assert_int_equal(list[i].nenv, 1);
    assert_string_equal(list[i].env[0].name, "CONCH_TREE_TEST");
  }
  conch_process_list_free(list, n);
  assert_true(found);
  /* The reported pid is the one to signal: TERM ends the tree. */
  sel.pid = pid;
  assert_int_equal(conch_kill(sb, &sel, SIGTERM, &st), 0);
  gone_after("List, then SendSignal TERM", m, conch_now_ms());
  conch_sandbox_free(sb);
}

/* Refused without its tools when forced; run without them on auto. */
static void test_missing_tools(void **state) {
  conch_sandbox *on = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_sandbox *dflt = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  const char *args[1] = {"ran"};
  conch_env env[1] = {{"PATH", "/nonexistent"}};
  conch_exec_result r;
  (void)state;
  o.cmd = "/bin/echo";
  o.args = args;
  o.nargs = 1;
  o.env = env;
  o.nenv = 1;
  run_ok(on, &o, &r);
  assert_int_equal(r.exit_code, 125);
  assert_int_equal(r.out_len, 0);
  assert_non_null(r.err);
  assert_non_null(memmem(r.err, r.err_len, "GNU timeout", 11));
  conch_exec_result_clear(&r);
  run_ok(dflt, &o, &r);
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(r.out_len, 4);
  assert_memory_equal(r.out, "ran\n", 4);
  conch_exec_result_clear(&r);
  conch_sandbox_free(on);
  conch_sandbox_free(dflt);
}

/* /proc/PID/stat: process group, session and terminal's foreground
   group. */
static int proc_ids(uint32_t pid, long *pgrp, long *session, long *tpgid) {
  char path[64], buf[1024], *p;
  FILE *f;
  long ppid, tty;
  char state;
  snprintf(path, sizeof(path), "/proc/%u/stat", pid);
  if ((f = fopen(path, "r")) == NULL) {
    return -1;
  }
  p = fgets(buf, sizeof(buf), f);
  fclose(f);
  if (p == NULL || (p = strrchr(buf, ')')) == NULL ||
      sscanf(p + 2, "%c %ld %ld %ld %ld %ld", &state, &ppid, pgrp, session,
             &tty, tpgid) != 6) {
    return -1;
  }
  return 0;
}

/* A PTY never gets the leader: its process leads its session and is the
   terminal's foreground group, as without it (job control inside works as
   it did), and List shows it as sent. */
static void test_pty_unchanged(void **state) {
  const char *m = run_mark("7792102");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_ON);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  const char *args[2] = {"-c", NULL};
  char script[128];
  conch_process *p;
  conch_process_info *list;
  conch_status st;
  long pgrp = 0, sess = 0, tpgid = 0;
  size_t n, i;
  uint32_t pid;
  int found = 0;
  (void)state;
  conch_status_init(&st);
  snprintf(script, sizeof(script), "sleep 600 %s", m);
  args[1] = script;
  o.cmd = "/bin/sh";
  o.args = args;
  o.nargs = 2;
  o.pty_cols = 80;
  o.pty_rows = 24;
  assert_int_equal(conch_pty_open(sb, &o, &p, &st), 0);
  pid = conch_process_pid(p);
  wait_marked(m, 1);
  assert_int_equal(proc_ids(pid, &pgrp, &sess, &tpgid), 0);
  assert_int_equal(pgrp, (long)pid);
  assert_int_equal(sess, (long)pid);
  assert_int_equal(tpgid, (long)pid);
  assert_int_equal(conch_list(sb, &list, &n, &st), 0);
  for (i = 0; i < n; i++) {
    if (list[i].pid == pid) {
      found = 1;
      assert_string_equal(list[i].cmd, "/bin/sh");
      assert_int_equal(list[i].nargs, 2);
      assert_string_equal(list[i].args[1], script);
    }
  }
  conch_process_list_free(list, n);
  assert_true(found);
  assert_int_equal(conch_process_close(p), 0);
  gone_after("PTY closed", m, conch_now_ms());
  conch_sandbox_free(sb);
}

/* The server's own List answer (not unwrapped), and its headers. */
static Process__ListResponse *raw_list(conch_sandbox *sb, conch_metadata *h) {
  Process__ListRequest req = PROCESS__LIST_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  conch_status st;
  conch_status_init(&st);
  assert_int_equal(conch_unary_sync(conch_sandbox_native(sb),
                                    &process__process__list__method, NULL,
                                    &req.base, &resp, &st, h, NULL),
                   0);
  return (Process__ListResponse *)resp;
}

static const Process__ProcessConfig *raw_config(Process__ListResponse *lr,
                                                uint32_t pid) {
  size_t i;
  for (i = 0; i < lr->n_processes; i++) {
    if (lr->processes[i]->pid == pid) {
      return lr->processes[i]->config;
    }
  }
  fail_msg("pid %u is not in the server's List", pid);
  return NULL;
}

/* conch serve says it signals groups (not with --signal-pid-only); a
   sandbox starts its first process under the leader (the server's way is
   not known yet; the leader just execs there) and the next ones without. */
static void test_group_server(void **state) {
  const char *m = run_mark("7792103");
  conch_sandbox *sb = sandbox_at(groups_url, CONCH_TREE_AUTO);
  conch_sandbox *po = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  const char *args[2] = {"600", m};
  const Process__ProcessConfig *cfg;
  Process__ListResponse *lr;
  conch_metadata *h;
  conch_selector sel = {0, NULL};
  conch_status st;
  uint32_t first, second;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(conch_metadata_new(&h, NULL), 0);
  lr = raw_list(po, h);
  assert_null(conch_metadata_get(h, "conch-signals", NULL));
  conch_message_free(conch_sandbox_native(po), &lr->base);
  conch_metadata_free(h);
  o.cmd = "sleep";
  o.args = args;
  o.nargs = 2;
  assert_int_equal(conch_start(sb, &o, &first, &st), 0);
  assert_int_equal(conch_start(sb, &o, &second, &st), 0);
  wait_marked(m, 2);
  assert_int_equal(conch_metadata_new(&h, NULL), 0);
  lr = raw_list(sb, h);
  assert_string_equal(conch_metadata_get(h, "conch-signals", NULL), "group");
  conch_metadata_free(h);
  cfg = raw_config(lr, first);
  assert_string_equal(cfg->cmd, "/bin/sh");
  assert_int_equal(cfg->n_args, 8);
  assert_string_equal(cfg->args[5], "sleep");
  cfg = raw_config(lr, second);
  assert_string_equal(cfg->cmd, "sleep");
  assert_int_equal(cfg->n_args, 2);
  conch_message_free(conch_sandbox_native(sb), &lr->base);
  sel.pid = first;
  assert_int_equal(conch_kill(sb, &sel, SIGTERM, &st), 0);
  sel.pid = second;
  assert_int_equal(conch_kill(sb, &sel, SIGTERM, &st), 0);
  gone_after("group-signalling server, SendSignal TERM", m, conch_now_ms());
  conch_sandbox_free(sb);
  conch_sandbox_free(po);
}

/* ---- Trees ----------------------------------------------------------- */

#define TREE "sleep 600 %s & (sleep 600 %s & wait) & sleep 600 %s; true"

static void test_leader_killed(void **state) {
  const char *m = run_mark("7792201");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_selector sel = {0, NULL};
  conch_status st;
  shell s;
  int64_t t;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(conch_start(sb, sh(&s, TREE, m, m, m), &sel.pid, &st), 0);
  wait_marked(m, 6); /* the leader, sh, a subshell, three sleeps */
  t = conch_now_ms();
  assert_int_equal(conch_kill(sb, &sel, SIGKILL, &st), 0);
  gone_after("the leader SIGKILLed (SendSignal KILL)", m, t);
  conch_sandbox_free(sb);
}

/* The leader SIGKILLed as soon as its start was answered, before its
   watcher could run: the watcher, started anyway, finds timeout gone and
   KILLs the group (it read its parent from $PPID before, which is the
   server's once timeout is gone: 2 trees of 20 were left). */
static void test_leader_killed_at_once(void **state) {
  enum { N = 20 };
  const char *m = run_mark("7792204");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_status st;
  shell s;
  int64_t t;
  int i;
  (void)state;
  conch_status_init(&st);
  t = conch_now_ms();
  for (i = 0; i < N; i++) {
    conch_selector sel = {0, NULL};
    assert_int_equal(conch_start(sb, sh(&s, TREE, m, m, m), &sel.pid, &st), 0);
    assert_int_equal(conch_kill(sb, &sel, SIGKILL, &st), 0);
  }
  gone_after("20 leaders SIGKILLed at once after their start", m, t);
  conch_sandbox_free(sb);
}

static void test_deadline(void **state) {
  const char *m = run_mark("7792202");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_exec_result r;
  shell s;
  int64_t t0 = conch_now_ms();
  long ms;
  (void)state;
  sh(&s, TREE, m, m, m);
  s.o.timeout_ms = 1500;
  conch_exec_result_init(&r);
  {
    conch_status st;
    conch_status_init(&st);
    assert_int_equal(conch_run(sb, &s.o, &r, &st), CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
    conch_status_clear(&st);
  }
  conch_exec_result_clear(&r);
  ms = gone_after("Start deadline 1500 ms (a KILL of the pid)", m, t0);
  assert_true(ms >= 1500);
  conch_sandbox_free(sb);
}

static void test_trapping_grandchild(void **state) {
  const char *m = run_mark("7792203");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_selector sel = {0, NULL};
  conch_status st;
  shell s;
  int64_t t;
  long ms;
  (void)state;
  conch_status_init(&st);
  assert_int_equal(
      conch_start(sb,
                  sh(&s,
                     "(trap '' TERM; sleep 600 %s; : %s) & sleep 600 %s; true",
                     m, m, m),
                  &sel.pid, &st),
      0);
  wait_marked(m, 5); /* the leader, sh, the subshell and two sleeps */
  t = conch_now_ms();
  assert_int_equal(conch_kill(sb, &sel, SIGTERM, &st), 0);
  ms = gone_after("TERM-trapping grandchild (grace 1500 ms)", m, t);
  /* Not before the grace: TERM alone does not end it. */
  assert_true(ms >= GRACE_MS - 100);
  conch_sandbox_free(sb);
}

/* A TERM to the group at the very start of CMD (CMD sends it itself,
   after leaving a TERM-ignoring member behind): the watcher must already
   catch TERM then.  It did not: it was started beside CMD, so a TERM that
   came before its trap killed it, and the member outlived the grace for
   good (under load, test_trapping_grandchild's TERM did that). */
static void test_term_at_start(void **state) {
  const char *m = run_mark("7792205");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_exec_result r;
  shell s;
  int64_t t;
  long ms;
  int i;
  (void)state;
  for (i = 0; i < 5; i++) {
    t = conch_now_ms();
    run_ok(sb,
           sh(&s,
              "trap '' TERM; (sleep 600 %s; : %s) >/dev/null 2>&1 & "
              "trap - TERM; kill -s TERM 0; sleep 600 %s",
              m, m, m),
           &r);
    assert_false(r.exited);
    assert_string_equal(r.status, "signal: terminated");
    conch_exec_result_clear(&r);
    ms = gone_after("TERM to the group as CMD starts (grace 1500 ms)", m, t);
    assert_true(ms >= GRACE_MS - 100);
  }
  conch_sandbox_free(sb);
}

typedef struct many {
  int started, failed, killed;
} many;

static void many_started(uint32_t pid, const conch_status *st, void *ud) {
  many *m = ud;
  (void)pid;
  if (st->code == CONCH_CODE_OK) {
    m->started++;
  } else {
    m->failed++;
  }
}

static void many_killed(const conch_status *st, void *ud) {
  many *m = ud;
  if (st->code == CONCH_CODE_OK) {
    m->killed++;
  } else {
    m->failed++;
  }
}

static int list_pids(conch_sandbox *sb, const char *mark, uint32_t *pids,
                     int cap) {
  conch_process_info *list;
  conch_status st;
  size_t n, i, k;
  int got = 0;
  conch_status_init(&st);
  assert_int_equal(conch_list(sb, &list, &n, &st), 0);
  for (i = 0; i < n; i++) {
    for (k = 0; k < list[i].nargs; k++) {
      if (strstr(list[i].args[k], mark) != NULL && got < cap) {
        pids[got++] = list[i].pid;
        break;
      }
    }
  }
  conch_process_list_free(list, n);
  return got;
}

static void test_hundred_trees(void **state) {
  const char *m = run_mark("7792204");
  conch_sandbox *sb = sandbox_at(pid_only_url, CONCH_TREE_AUTO);
  conch_client *c = conch_sandbox_native(sb);
  uint32_t pids[100];
  many st = {0, 0, 0};
  shell s;
  int i, n;
  int64_t t, t0;
  (void)state;
  sh(&s, "sleep 600 %s & sleep 600 %s; true", m, m);
  for (i = 0; i < 100; i++) {
    assert_int_equal(conch_start_async(sb, &s.o, many_started, &st), 0);
  }
  t0 = conch_now_ms();
  while (st.started + st.failed < 100 && conch_now_ms() - t0 < 4 * WAIT_MS) {
    assert_int_equal(conch_client_run(c, 100), 0);
  }
  assert_int_equal(st.started, 100);
  wait_marked(m, 400); /* each: the leader, sh, two sleeps */
  n = list_pids(sb, m, pids, 100);
  assert_int_equal(n, 100);
  t = conch_now_ms();
  for (i = 0; i < n; i++) {
    conch_selector sel = {pids[i], NULL};
    assert_int_equal(conch_kill_async(sb, &sel, SIGTERM, many_killed, &st), 0);
  }
  while (st.killed + st.failed < 100 && conch_now_ms() - t < WAIT_MS) {
    assert_int_equal(conch_client_run(c, 100), 0);
  }
  assert_int_equal(st.killed, 100);
  gone_after("100 trees, SendSignal TERM to each at once", m, t);
  conch_sandbox_free(sb);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exit_codes),
      cmocka_unit_test(test_signals),
      cmocka_unit_test(test_unknown_command),
      cmocka_unit_test(test_stdin),
      cmocka_unit_test(test_list_shows_the_command),
      cmocka_unit_test(test_missing_tools),
      cmocka_unit_test(test_pty_unchanged),
      cmocka_unit_test(test_group_server),
      cmocka_unit_test(test_leader_killed),
      cmocka_unit_test(test_leader_killed_at_once),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_trapping_grandchild),
      cmocka_unit_test(test_term_at_start),
      cmocka_unit_test(test_hundred_trees),
  };
  if (argc > 1) {
    cmocka_set_test_filter(argv[1]);
  }
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
