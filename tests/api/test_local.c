/* The local server as a library user meets it (conch/local.h): a sandbox
   whose url is NULL reaches `conch serve` on the private per-user socket,
   the one the CLI uses; with autostart it starts one there when nothing
   answers (detached: not our child, its own session, stdin /dev/null, none
   of our descriptors, no zombie left to us), once however many threads ask
   at the same time; without it, or when the start fails, the error is
   unavailable and says where and what to do.  Each case runs in a fresh
   XDG_RUNTIME_DIR of its own and ends the servers it made. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <conch/local.h>
#include <conch/process.h>

#include "peer.h"
#include "wait.h"

static char top[256];
static char xdg[PATH_MAX];
static int case_no;

/* A fresh XDG_RUNTIME_DIR for the case. */
static int case_setup(void **state) {
  (void)state;
  snprintf(xdg, sizeof(xdg), "%s/xdg%d", top, ++case_no);
  if (mkdir(xdg, 0700) != 0) {
    return -1;
  }
  setenv("XDG_RUNTIME_DIR", xdg, 1);
  unsetenv("CONCH_SERVE_EXE");
  return 0;
}

/* The pid of the server that runs our processes: their parent. */
static long server_pid(conch_sandbox *sb) {
  const char *argv[] = {"-c", "echo $PPID"};
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  conch_exec_result r;
  conch_status st;
  long pid;

  o.cmd = "/bin/sh";
  o.args = argv;
  o.nargs = 2;
  conch_exec_result_init(&r);
  conch_status_init(&st);
  assert_int_equal(conch_run(sb, &o, &r, &st), 0);
  assert_int_equal(r.exit_code, 0);
  assert_true(r.out_len > 0 && r.out_len < 20);
  pid = strtol((const char *)r.out, NULL, 10);
  conch_exec_result_clear(&r);
  conch_status_clear(&st);
  assert_true(pid > 1);
  return pid;
}

/* Field |n| (1-based, after the command's name) of /proc/PID/stat. */
static long stat_field(long pid, int n) {
  char path[64], buf[1024], *p;
  FILE *f;
  int i;
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  f = fopen(path, "r");
  assert_non_null(f);
  p = fgets(buf, sizeof(buf), f);
  fclose(f);
  assert_non_null(p);
  p = strrchr(buf, ')');
  assert_non_null(p);
  p += 2; /* the state, field 3 */
  for (i = 3; i < n; i++) {
    p = strchr(p, ' ');
    assert_non_null(p);
    p++;
  }
  return strtol(p, NULL, 10);
}

static void stop_server(long pid) {
  assert_int_equal(kill((pid_t)pid, SIGTERM), 0);
  assert_true(conch_proc_gone_within((pid_t)pid, CONCH_WAIT_MS));
}

static void open_local(conch_sandbox **sb, int autostart, const char *exe) {
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_status st;
  int rv;
  o.autostart = autostart;
  o.serve_exe = exe;
  conch_status_init(&st);
  rv = conch_sandbox_open(sb, &o, &st);
  if (rv != 0) {
    fprintf(stderr, "conch_sandbox_open: %s: %s\n", conch_strerror(rv),
            conch_status_message(&st));
  }
  assert_int_equal(rv, 0);
  conch_status_clear(&st);
}

/* ---- A server that runs already ----------------------------------------- */

static void test_running_server(void **state) {
  const char *argv[] = {CONCH_BIN, "serve", NULL};
  char sock[128], want[PATH_MAX + 32];
  conch_peer peer;
  conch_sandbox *sb;
  conch_status st;
  (void)state;

  /* `conch serve` without --listen: the private socket. */
  assert_int_equal(conch_peer_start_argv(&peer, argv), 0);
  conch_status_init(&st);
  assert_int_equal(conch_local_socket(sock, sizeof(sock), &st), 0);
  snprintf(want, sizeof(want), "%s/conch/serve.sock", xdg);
  assert_string_equal(sock, want);
  assert_true(conch_local_answers(sock));

  open_local(&sb, 0, NULL);
  assert_int_equal(server_pid(sb), peer.pid);
  conch_sandbox_free(sb);
  /* With autostart on, nothing is started: the running one answers. */
  open_local(&sb, 1, "/nonexistent/conch");
  assert_int_equal(server_pid(sb), peer.pid);
  conch_sandbox_free(sb);
  conch_peer_stop(&peer);
}

/* ---- Auto-start --------------------------------------------------------- */

/* Whether process |pid| holds a descriptor that is |link| (readlink of
   /proc/PID/fd/N). */
static int holds_fd(long pid, const char *link) {
  char path[64], got[PATH_MAX];
  int fd, found = 0;
  for (fd = 0; fd < 1024; fd++) {
    ssize_t n;
    snprintf(path, sizeof(path), "/proc/%ld/fd/%d", pid, fd);
    n = readlink(path, got, sizeof(got) - 1);
    if (n < 0) {
      continue;
    }
    got[n] = '\0';
    found |= strcmp(got, link) == 0;
  }
  return found;
}

static void fd_link(long pid, int fd, char *out, size_t cap) {
  char path[64];
  ssize_t n;
  snprintf(path, sizeof(path), "/proc/%ld/fd/%d", pid, fd);
  n = readlink(path, out, cap - 1);
  assert_true(n > 0);
  out[n] = '\0';
}

static void test_autostart(void **state) {
  char sock[128], link[PATH_MAX], ours[64], log[PATH_MAX + 32];
  conch_sandbox *sb;
  conch_status st;
  int leak[2], ws;
  long srv;
  (void)state;

  conch_status_init(&st);
  assert_int_equal(conch_local_socket(sock, sizeof(sock), &st), 0);
  assert_false(conch_local_answers(sock));
  /* A descriptor without close-on-exec: the server must not get it. */
  assert_int_equal(pipe(leak), 0);
  fd_link(getpid(), leak[0], ours, sizeof(ours));

  open_local(&sb, 1, CONCH_BIN);
  assert_true(conch_local_answers(sock));
  srv = server_pid(sb);
  conch_sandbox_free(sb);

  /* Detached: not our child, a session of its own, nothing of ours. */
  assert_true(stat_field(srv, 4) != (long)getpid()); /* ppid */
  assert_int_equal(stat_field(srv, 6), srv);         /* session */
  assert_int_equal(waitpid(-1, &ws, WNOHANG), -1);   /* no child, no zombie */
  assert_int_equal(errno, ECHILD);
  fd_link(srv, 0, link, sizeof(link));
  assert_string_equal(link, "/dev/null");
  snprintf(log, sizeof(log), "%s/conch/serve.log", xdg);
  fd_link(srv, 1, link, sizeof(link));
  assert_string_equal(link, log);
  fd_link(srv, 2, link, sizeof(link));
  assert_string_equal(link, log);
  assert_false(holds_fd(srv, ours));
  close(leak[0]);
  close(leak[1]);

  /* A second sandbox finds it; nothing new is started. */
  open_local(&sb, 1, CONCH_BIN);
  assert_int_equal(server_pid(sb), srv);
  conch_sandbox_free(sb);
  stop_server(srv);
  assert_false(conch_local_answers(sock));
}

/* CONCH_SERVE_EXE, then `conch` in PATH. */
static void test_autostart_lookup(void **state) {
  char dir[PATH_MAX], *slash, *old_path;
  conch_sandbox *sb;
  long srv;
  (void)state;

  setenv("CONCH_SERVE_EXE", CONCH_BIN, 1);
  open_local(&sb, 1, NULL);
  srv = server_pid(sb);
  conch_sandbox_free(sb);
  stop_server(srv);
  unsetenv("CONCH_SERVE_EXE");

  snprintf(dir, sizeof(dir), "%s", CONCH_BIN);
  slash = strrchr(dir, '/');
  assert_non_null(slash);
  *slash = '\0';
  old_path = getenv("PATH") != NULL ? strdup(getenv("PATH")) : NULL;
  setenv("PATH", dir, 1);
  open_local(&sb, 1, NULL);
  srv = server_pid(sb);
  conch_sandbox_free(sb);
  stop_server(srv);
  if (old_path != NULL) {
    setenv("PATH", old_path, 1);
    free(old_path);
  }
}

typedef struct racer {
  long srv;
  int rv;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_sandbox *sb;
  o.autostart = 1;
  o.serve_exe = CONCH_BIN;
  r->rv = conch_sandbox_open(&sb, &o, NULL);
  if (r->rv == 0) {
    r->srv = server_pid(sb);
    conch_sandbox_free(sb);
  }
  return NULL;
}

/* Threads of one process racing to start it (fork from a multithreaded
   process): one server wins the socket's lock, all use it. */
static void test_autostart_race(void **state) {
  pthread_t t[4];
  racer r[4];
  char log[PATH_MAX + 32], line[512];
  FILE *f;
  int i, listening = 0;
  (void)state;

  memset(r, 0, sizeof(r));
  for (i = 0; i < 4; i++) {
    assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
  }
  for (i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
  }
  for (i = 0; i < 4; i++) {
    assert_int_equal(r[i].rv, 0);
    assert_int_equal(r[i].srv, r[0].srv);
  }
  snprintf(log, sizeof(log), "%s/conch/serve.log", xdg);
  f = fopen(log, "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    listening += strncmp(line, "LISTENING ", 10) == 0;
  }
  fclose(f);
  assert_int_equal(listening, 1);
  stop_server(r[0].srv);
}

/* ---- Failures ----------------------------------------------------------- */

static void expect_failure(int autostart, const char *exe, int want_rv,
                           conch_code want_code, const char *const *words) {
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_sandbox *sb = NULL;
  conch_status st;
  int i;
  o.autostart = autostart;
  o.serve_exe = exe;
  conch_status_init(&st);
  assert_int_equal(conch_sandbox_open(&sb, &o, &st), want_rv);
  assert_null(sb);
  assert_int_equal(st.code, want_code);
  for (i = 0; words[i] != NULL; i++) {
    if (strstr(conch_status_message(&st), words[i]) == NULL) {
      fail_msg("'%s' not in '%s'", words[i], conch_status_message(&st));
    }
  }
  conch_status_clear(&st);
  /* conch_sandbox_new() fails the same way. */
  assert_int_equal(conch_sandbox_new(&sb, &o), want_rv);
}

static void test_autostart_off(void **state) {
  char sock[PATH_MAX + 32];
  const char *words[] = {sock, "conch serve", "autostart", NULL};
  (void)state;
  snprintf(sock, sizeof(sock), "%s/conch/serve.sock", xdg);
  expect_failure(0, NULL, CONCH_ERR_CONNECT, CONCH_CODE_UNAVAILABLE, words);
}

static void test_no_executable(void **state) {
  const char *named[] = {"/nonexistent/conch", "no such file", NULL};
  const char *env[] = {"/nonexistent/env-conch", "CONCH_SERVE_EXE", NULL};
  const char *path[] = {"no conch in PATH", "CONCH_SERVE_EXE", NULL};
  char *old_path = getenv("PATH") != NULL ? strdup(getenv("PATH")) : NULL;
  (void)state;

  expect_failure(1, "/nonexistent/conch", CONCH_ERR_CONNECT,
                 CONCH_CODE_UNAVAILABLE, named);
  setenv("CONCH_SERVE_EXE", "/nonexistent/env-conch", 1);
  expect_failure(1, NULL, CONCH_ERR_CONNECT, CONCH_CODE_UNAVAILABLE, env);
  unsetenv("CONCH_SERVE_EXE");
  setenv("PATH", "/nonexistent", 1);
  expect_failure(1, NULL, CONCH_ERR_CONNECT, CONCH_CODE_UNAVAILABLE, path);
  if (old_path != NULL) {
    setenv("PATH", old_path, 1);
    free(old_path);
  }
}

/* An executable that exits at once: "did not start", naming the log, and
   no wait for the timeout. */
static void test_server_gives_up(void **state) {
  char log[PATH_MAX + 32];
  const char *words[] = {"did not start", log, NULL};
  long long t0 = conch_now_ms();
  (void)state;
  snprintf(log, sizeof(log), "%s/conch/serve.log", xdg);
  expect_failure(1, "/bin/false", CONCH_ERR_CONNECT, CONCH_CODE_UNAVAILABLE,
                 words);
  assert_true(conch_now_ms() - t0 < 30000);
  assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

/* A runtime directory another user could have planted: refused, said why,
   nothing started. */
static void test_planted_dir(void **state) {
  char dir[PATH_MAX + 16];
  const char *words[] = {dir, "not a private directory", "XDG_RUNTIME_DIR",
                         NULL};
  (void)state;
  snprintf(dir, sizeof(dir), "%s/conch", xdg);
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  expect_failure(1, CONCH_BIN, CONCH_ERR_IO, CONCH_CODE_FAILED_PRECONDITION,
                 words);
  expect_failure(0, NULL, CONCH_ERR_IO, CONCH_CODE_FAILED_PRECONDITION, words);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_running_server, case_setup),
      cmocka_unit_test_setup(test_autostart, case_setup),
      cmocka_unit_test_setup(test_autostart_lookup, case_setup),
      cmocka_unit_test_setup(test_autostart_race, case_setup),
      cmocka_unit_test_setup(test_autostart_off, case_setup),
      cmocka_unit_test_setup(test_no_executable, case_setup),
      cmocka_unit_test_setup(test_server_gives_up, case_setup),
      cmocka_unit_test_setup(test_planted_dir, case_setup),
  };
  char tmpl[] = "/tmp/conch-local-XXXXXX";
  int rv;
  if (mkdtemp(tmpl) == NULL) {
    return 1;
  }
  snprintf(top, sizeof(top), "%s", tmpl);
  rv = cmocka_run_group_tests(tests, NULL, NULL);
  if (fork() == 0) {
    execlp("rm", "rm", "-rf", top, (char *)NULL);
    _exit(127);
  }
  wait(NULL);
  return rv;
}
