/* conch serve, process.Process through our own client: output, exit
   statuses, environment and cwd rules, stdin, signals, re-attach, tags,
   List, PTY, keepalive, retention, deadlines, users, back-pressure, and no
   process left behind. */
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

#include "support.h"

static serve_peer srv;

static int group_setup(void **state) {
  /* test_users runs as other users (a root server switches). */
  static const char *const args[] = {"--allow-user", "*", NULL};

  (void)state;
  return serve_start(&srv, args);
}

static int group_teardown(void **state) {
  size_t n;
  const pid_t *pids = noted_pids(&n);
  pid_t first = 0;
  int left;
  int rv;

  (void)state;
  /* Before the server goes: nothing of ours may still run but what the
     tests left on purpose (none). */
  left = proc_leftovers(srv.pid, pids, n, &first);
  if (left != 0) {
    fprintf(stderr, "%d process(es) left running, e.g. pid %ld\n", left,
            (long)first);
  }
  rv = serve_stop(&srv, 10000);
  if (rv != 0) {
    fprintf(stderr, "conch serve exited with %d\n", rv);
  }
  return left == 0 && rv == 0 ? 0 : -1;
}

/* ---- Output and exit ---------------------------------------------------- */

static void test_echo(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;

  (void)state;
  run_cmd(c, NULL, &r, "echo", "hello", "world", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.nstart, 1);
  assert_true(r.pid > 0);
  assert_string_equal(r.out, "hello world\n");
  assert_int_equal(r.errlen, 0);
  assert_true(r.has_end);
  assert_int_equal(r.exit_code, 0);
  assert_true(r.exited);
  assert_string_equal(r.status, "exit status 0");
  assert_false(r.has_error);
  conch_client_free(c);
}

static void test_exit_codes(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;

  (void)state;
  run_cmd(c, NULL, &r, "sh", "-c", "echo out; echo err >&2; exit 3", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.out, "out\n");
  assert_string_equal(r.err, "err\n");
  assert_int_equal(r.exit_code, 3);
  assert_true(r.exited);
  assert_string_equal(r.status, "exit status 3");
  assert_true(r.has_error);
  assert_string_equal(r.error, "exit status 3");

  run_cmd(c, NULL, &r, "sh", "-c", "kill -SEGV $$", NULL);
  assert_int_equal(r.exit_code, -1);
  assert_false(r.exited);
  assert_true(strncmp(r.status, "signal: segmentation fault", 26) == 0);
  conch_client_free(c);
}

static void test_unknown_command(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;

  (void)state;
  run_cmd(c, NULL, &r, "no-such-command-conch", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.nstart, 1);
  assert_int_equal(r.exit_code, 127);
  assert_string_equal(r.status, "exit status 127");
  assert_non_null(strstr(r.err, "no-such-command-conch"));
  conch_client_free(c);
}

static void test_big_output(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;

  (void)state;
  /* 8 MiB through the pipe, in DataEvents of at most 32 KiB. */
  run_cmd(c, NULL, &r, "head", "-c", "8388608", "/dev/zero", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.total, 8388608);
  assert_true(r.ndata >= 8388608 / 32768);
  assert_int_equal(r.exit_code, 0);
  conch_client_free(c);
}

/* ---- Environment, cwd -------------------------------------------------- */

static void test_env(void **state) {
  static const char *const envs[] = {"FOO", "bar", "HOME", "/tmp/home-over",
                                     NULL};
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  char want[256];

  (void)state;
  o.envs = envs;
  run_cmd(c, &o, &r, "sh", "-c",
          "echo \"$FOO|$HOME|$USER|$LOGNAME|${PATH:+path}|$CONCH_NOPE\"", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  snprintf(want, sizeof(want), "bar|/tmp/home-over|%s|%s|path|\n",
           getuid() == 0 ? "root" : getenv("USER"),
           getuid() == 0 ? "root" : getenv("USER"));
  if (getuid() == 0) {
    assert_string_equal(r.out, want);
  }
  /* Only envd's variables: nothing else of the server's leaks. */
  run_cmd(c, NULL, &r, "sh", "-c", "env | cut -d= -f1 | sort | tr '\\n' ' '",
          NULL);
  assert_string_equal(r.out, "HOME LOGNAME PATH PWD USER ");
  conch_client_free(c);
}

static void test_cwd(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  char home[1024];

  (void)state;
  run_cmd(c, NULL, &r, "sh", "-c", "pwd; echo $HOME", NULL);
  /* Empty cwd: the home directory. */
  sscanf(r.out, "%1023s", home);
  assert_non_null(strstr(r.out + strlen(home) + 1, home));

  o.cwd = "/tmp";
  run_cmd(c, &o, &r, "pwd", NULL);
  assert_string_equal(r.out, "/tmp\n");

  o.cwd = "~";
  run_cmd(c, &o, &r, "sh", "-c", "test \"$(pwd)\" = \"$HOME\" && echo ok",
          NULL);
  assert_string_equal(r.out, "ok\n");

  o.cwd = "/no/such/dir";
  run_cmd(c, &o, &r, "pwd", NULL);
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  assert_string_equal(r.message, "cwd '/no/such/dir' does not exist");

  o.cwd = "no-such-relative";
  run_cmd(c, &o, &r, "pwd", NULL);
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(r.message, "/no-such-relative' does not exist"));

  o.cwd = "~someone/x";
  run_cmd(c, &o, &r, "pwd", NULL);
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(r.message, "cannot expand user-specific home dir"));
  conch_client_free(c);
}

/* ---- stdin --------------------------------------------------------------- */

static void test_stdin_on_off(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  char msg[512];

  (void)state;
  /* stdin unset: a pipe we write and close (the sleep keeps the process
     there for the checks after the close). */
  call = start_call(c, NULL, &r, &pid, "sh", "-c", "cat; sleep 0.5", NULL);
  assert_non_null(call);
  assert_int_equal(send_input(c, pid, NULL, 0, "abc", 3, 0, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  assert_int_equal(send_input(c, pid, NULL, 0, "def\n", 4, 0, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  assert_int_equal(close_stdin(c, pid, msg, sizeof(msg)), CONCH_CODE_OK);
  /* Idempotent; then writing is an error. */
  assert_int_equal(close_stdin(c, pid, msg, sizeof(msg)), CONCH_CODE_OK);
  assert_int_equal(send_input(c, pid, NULL, 0, "x", 1, 0, msg, sizeof(msg)),
                   CONCH_CODE_INTERNAL);
  assert_string_equal(msg,
                      "error writing to stdin: stdin not enabled or closed");
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.out, "abcdef\n");
  assert_int_equal(r.exit_code, 0);

  /* stdin false: /dev/null, and input is refused. */
  o.stdin_mode = 2;
  call =
      start_call(c, &o, &r, &pid, "sh", "-c", "sleep 0.3; cat; echo eof", NULL);
  assert_non_null(call);
  assert_int_equal(send_input(c, pid, NULL, 0, "x", 1, 0, msg, sizeof(msg)),
                   CONCH_CODE_INTERNAL);
  assert_string_equal(msg,
                      "error writing to stdin: stdin not enabled or closed");
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.out, "eof\n");

  /* stdin true. */
  o.stdin_mode = 1;
  call = start_call(c, &o, &r, &pid, "head", "-c", "2", NULL);
  assert_non_null(call);
  assert_int_equal(send_input(c, pid, NULL, 0, "hi", 2, 0, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.out, "hi");
  conch_client_free(c);
}

static void test_input_errors(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  char msg[512];

  (void)state;
  call = start_call(c, NULL, &r, &pid, "cat", NULL);
  assert_non_null(call);
  /* No input at all. */
  assert_int_equal(send_input(c, pid, NULL, 0, NULL, 0, 1, msg, sizeof(msg)),
                   CONCH_CODE_UNIMPLEMENTED);
  assert_string_equal(msg, "invalid input type <nil>");
  /* PTY input to a pipe process. */
  assert_int_equal(send_input(c, pid, NULL, 1, "x", 1, 0, msg, sizeof(msg)),
                   CONCH_CODE_INTERNAL);
  assert_true(strncmp(msg,
                      "error writing to tty: tty not assigned to "
                      "process",
                      47) == 0);
  /* Unknown pid and tag. */
  assert_int_equal(send_input(c, 999999, NULL, 0, "x", 1, 0, msg, sizeof(msg)),
                   CONCH_CODE_NOT_FOUND);
  assert_string_equal(msg, "process with pid 999999 not found");
  assert_int_equal(send_input(c, 0, "no-tag", 0, "x", 1, 0, msg, sizeof(msg)),
                   CONCH_CODE_NOT_FOUND);
  assert_string_equal(msg, "process with tag no-tag not found");
  /* Update on a pipe process. */
  assert_int_equal(update_pty(c, pid, 80, 24, msg, sizeof(msg)),
                   CONCH_CODE_INTERNAL);
  assert_string_equal(msg, "error resizing tty: tty not assigned to process");
  assert_int_equal(close_stdin(c, pid, msg, sizeof(msg)), CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  conch_client_free(c);
}

static void stream_input_send(conch_call *call, int kind, pid_t pid,
                              const char *data) {
  Process__StreamInputRequest req = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__StartEvent se =
      PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;
  Process__StreamInputRequest__DataEvent de =
      PROCESS__STREAM_INPUT_REQUEST__DATA_EVENT__INIT;
  Process__StreamInputRequest__KeepAlive ka =
      PROCESS__STREAM_INPUT_REQUEST__KEEP_ALIVE__INIT;
  Process__ProcessSelector sel;
  Process__ProcessInput in;

  process__stream_input_request__init(&req);
  process__process_selector__init(&sel);
  process__process_input__init(&in);
  sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  sel.pid = (uint32_t)pid;
  in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
  in.stdin.data = (uint8_t *)data;
  in.stdin.len = data != NULL ? strlen(data) : 0;
  if (kind == 1) {
    se.process = &sel;
    req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
    req.start = &se;
  } else if (kind == 2) {
    de.input = &in;
    req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA;
    req.data = &de;
  } else if (kind == 3) {
    req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_KEEPALIVE;
    req.keepalive = &ka;
  }
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
}

static void test_stream_input(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  conch_call *in;
  pid_t pid;
  int i;

  (void)state;
  call = start_call(c, NULL, &r, &pid, "cat", NULL);
  assert_non_null(call);
  assert_int_equal(conch_call_start(c, &m_stream_input, NULL, NULL, NULL, &in),
                   0);
  stream_input_send(in, 1, pid, NULL);
  for (i = 0; i < 100; i++) {
    stream_input_send(in, 2, pid, i % 10 == 9 ? "9\n" : "x");
    if (i % 50 == 0) {
      stream_input_send(in, 3, pid, NULL);
    }
  }
  conch_call_close_send(in);
  assert_int_equal(conch_call_wait_sync(in), 0);
  conch_call_free(in);
  assert_int_equal(close_stdin(c, pid, NULL, 0), CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  /* In order: ten lines of "xxxxxxxxx9". */
  assert_int_equal(r.outlen, 110);
  assert_string_equal(r.out + 99, "xxxxxxxxx9\n");

  /* Data before start: internal (envd crashes). */
  assert_int_equal(conch_call_start(c, &m_stream_input, NULL, NULL, NULL, &in),
                   0);
  stream_input_send(in, 2, pid, "x");
  conch_call_close_send(in);
  assert_int_equal(conch_call_wait_sync(in), CONCH_ERR_RPC);
  assert_int_equal(conch_call_status(in)->code, CONCH_CODE_INTERNAL);
  conch_call_free(in);

  /* An event that is none of the three. */
  assert_int_equal(conch_call_start(c, &m_stream_input, NULL, NULL, NULL, &in),
                   0);
  stream_input_send(in, 0, pid, NULL);
  conch_call_close_send(in);
  assert_int_equal(conch_call_wait_sync(in), CONCH_ERR_RPC);
  assert_int_equal(conch_call_status(in)->code, CONCH_CODE_UNIMPLEMENTED);
  assert_string_equal(conch_call_status(in)->message,
                      "invalid event type <nil>");
  conch_call_free(in);
  conch_client_free(c);
}

/* ---- Signals ---------------------------------------------------------------
 */

static void test_signals(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  char msg[512];

  (void)state;
  call = start_call(c, NULL, &r, &pid, "sleep", "30", NULL);
  assert_non_null(call);
  assert_int_equal(send_signal(c, pid, NULL, 0, msg, sizeof(msg)),
                   CONCH_CODE_UNIMPLEMENTED);
  assert_string_equal(msg, "invalid signal: SIGNAL_UNSPECIFIED");
  assert_int_equal(send_signal(c, pid, NULL, 2, msg, sizeof(msg)),
                   CONCH_CODE_UNIMPLEMENTED);
  assert_int_equal(send_signal(c, pid, NULL, 15, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.exit_code, -1);
  assert_false(r.exited);
  assert_string_equal(r.status, "signal: terminated");
  assert_string_equal(r.error, "signal: terminated");

  call = start_call(c, NULL, &r, &pid, "sleep", "30", NULL);
  assert_non_null(call);
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: killed");
  assert_false(conch_proc_alive(pid));

  /* A grandchild holding the pipe does not keep the stream open. */
  call = start_call(c, NULL, &r, &pid, "sh", "-c", "sleep 30 & exec sleep 30",
                    NULL);
  assert_non_null(call);
  assert_int_equal(send_signal(c, pid, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: killed");
  /* ... and the group's KILL took the background sleep too. */
  {
    long long t0 = conch_now_ms();

    while (proc_leftovers(0, &pid, 1, NULL) != 0 &&
           conch_now_ms() - t0 < 20000) {
      conch_sleep_ms(10);
    }
    assert_int_equal(proc_leftovers(0, &pid, 1, NULL), 0);
  }
  assert_int_equal(send_signal(c, 999999, NULL, 9, msg, sizeof(msg)),
                   CONCH_CODE_NOT_FOUND);
  conch_client_free(c);
}

/* ---- Re-attach, tags, List
 * ---------------------------------------------------- */

static void test_reattach(void **state) {
  conch_client *a = client_new(srv.url);
  conch_client *b = client_new(srv.url);
  conch_client *d = client_new(srv.url);
  start_opts o = {0};
  run_result ra;
  run_result rb;
  run_result rd;
  conch_call *start;
  conch_call *by_pid;
  conch_call *by_tag;
  ProtobufCMessage *m;
  pid_t pid;
  char msg[256];

  (void)state;
  o.tag = "reattach-tag";
  start = start_call(a, &o, &ra, &pid, "sh", "-c", "read x; echo got $x", NULL);
  assert_non_null(start);
  by_pid = connect_call(b, pid, NULL, 0, NULL);
  by_tag = connect_call(d, 0, "reattach-tag", 0, NULL);
  memset(&rb, 0, sizeof(rb));
  memset(&rd, 0, sizeof(rd));
  /* Both see the StartEvent before the input goes in. */
  assert_int_equal(conch_call_recv_sync(by_pid, &m), 0);
  assert_int_equal(((Process__ConnectResponse *)m)->event->start->pid,
                   (uint32_t)pid);
  conch_message_free(b, m);
  assert_int_equal(conch_call_recv_sync(by_tag, &m), 0);
  assert_int_equal(((Process__ConnectResponse *)m)->event->start->pid,
                   (uint32_t)pid);
  conch_message_free(d, m);
  assert_int_equal(send_input(a, pid, NULL, 0, "hi\n", 3, 0, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  drain_call(a, start, &ra);
  drain_call(b, by_pid, &rb);
  drain_call(d, by_tag, &rd);
  assert_string_equal(ra.out, "got hi\n");
  assert_string_equal(rb.out, "got hi\n");
  assert_string_equal(rd.out, "got hi\n");
  assert_true(rb.has_end && rd.has_end);
  assert_string_equal(rd.status, "exit status 0");
  conch_call_free(start);
  conch_call_free(by_pid);
  conch_call_free(by_tag);

  /* A client that goes away leaves the process running. */
  start =
      start_call(a, &o, &ra, &pid, "sh", "-c", "read x; echo late $x", NULL);
  assert_non_null(start);
  conch_call_free(start);
  conch_client_free(a);
  conch_sleep_ms(200);
  assert_true(conch_proc_alive(pid));
  by_tag = connect_call(d, 0, "reattach-tag", 0, NULL);
  assert_int_equal(conch_call_recv_sync(by_tag, &m), 0);
  conch_message_free(d, m);
  assert_int_equal(
      send_input(b, 0, "reattach-tag", 0, "x\n", 2, 0, msg, sizeof(msg)),
      CONCH_CODE_OK);
  memset(&rd, 0, sizeof(rd));
  drain_call(d, by_tag, &rd);
  conch_call_free(by_tag);
  assert_string_equal(rd.out, "late x\n");
  conch_client_free(b);
  conch_client_free(d);
}

static void test_list(void **state) {
  static const char *const envs[] = {"A", "1", NULL};
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  Process__ListResponse *l = NULL;
  run_result r;
  conch_call *call;
  pid_t pid;
  size_t i;
  int found = 0;

  (void)state;
  o.tag = "listed";
  o.cwd = "/tmp";
  o.envs = envs;
  call = start_call(c, &o, &r, &pid, "sleep", "30", NULL);
  assert_non_null(call);
  assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
  for (i = 0; i < l->n_processes; i++) {
    const Process__ProcessInfo *p = l->processes[i];

    if (p->pid != (uint32_t)pid) {
      continue;
    }
    found = 1;
    assert_string_equal(p->tag, "listed");
    assert_string_equal(p->config->cmd, "sleep");
    assert_int_equal(p->config->n_args, 1);
    assert_string_equal(p->config->args[0], "30");
    assert_string_equal(p->config->cwd, "/tmp");
    assert_int_equal(p->config->n_envs, 1);
    assert_string_equal(p->config->envs[0]->key, "A");
  }
  assert_true(found);
  conch_message_free(c, &l->base);
  assert_int_equal(send_signal(c, pid, NULL, 9, NULL, 0), CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  /* Ended processes are not listed. */
  assert_int_equal(list_procs(c, &l), CONCH_CODE_OK);
  for (i = 0; i < l->n_processes; i++) {
    assert_int_not_equal(l->processes[i]->pid, (uint32_t)pid);
  }
  conch_message_free(c, &l->base);
  conch_client_free(c);
}

static void test_retention_30s(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  run_result rc;
  conch_call *call;

  (void)state;
  run_cmd(c, NULL, &r, "sh", "-c", "exit 4", NULL);
  assert_int_equal(r.exit_code, 4);
  /* Ended a moment ago: StartEvent and the EndEvent again. */
  call = connect_call(c, r.pid, NULL, 0, NULL);
  memset(&rc, 0, sizeof(rc));
  drain_call(c, call, &rc);
  conch_call_free(call);
  assert_int_equal(rc.code, CONCH_CODE_OK);
  assert_int_equal(rc.nstart, 1);
  assert_int_equal(rc.pid, r.pid);
  assert_true(rc.has_end);
  assert_int_equal(rc.exit_code, 4);
  assert_string_equal(rc.status, "exit status 4");
  conch_client_free(c);
}

/* ---- PTY
 * --------------------------------------------------------------------- */

static int wait_output(conch_client *c, conch_call *call, run_result *r,
                       const char *want) {
  long long deadline = conch_now_ms() + 10000;

  while (strstr(r->out, want) == NULL && conch_now_ms() < deadline) {
    ProtobufCMessage *m;

    if (conch_call_recv_sync(call, &m) != 0) {
      return -1;
    }
    {
      const Process__ProcessEvent *ev = ((Process__StartResponse *)m)->event;

      if (ev->event_case == PROCESS__PROCESS_EVENT__EVENT_DATA) {
        size_t n = ev->data->pty.len;

        if (r->outlen + n >= sizeof(r->out)) {
          n = sizeof(r->out) - 1 - r->outlen;
        }
        memcpy(r->out + r->outlen, ev->data->pty.data, n);
        r->outlen += n;
        r->out[r->outlen] = '\0';
        assert_int_equal(ev->data->output_case,
                         PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY);
      }
    }
    conch_message_free(c, m);
  }
  return strstr(r->out, want) != NULL ? 0 : -1;
}

static void test_pty(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  char msg[512];

  (void)state;
  o.pty_cols = 100;
  o.pty_rows = 30;
  o.timeout_ms = 30000; /* fail, not hang */
  call = start_call(c, &o, &r, &pid, "sh", NULL);
  assert_non_null(call);
  assert_int_equal(
      send_input(c, pid, NULL, 1, "stty size; tty\n", 15, 0, msg, sizeof(msg)),
      CONCH_CODE_OK);
  assert_int_equal(wait_output(c, call, &r, "30 100"), 0);
  assert_int_equal(wait_output(c, call, &r, "/dev/pts/"), 0);
  assert_int_equal(update_pty(c, pid, 120, 40, msg, sizeof(msg)),
                   CONCH_CODE_OK);
  assert_int_equal(
      send_input(c, pid, NULL, 1, "stty size\n", 10, 0, msg, sizeof(msg)),
      CONCH_CODE_OK);
  assert_int_equal(wait_output(c, call, &r, "40 120"), 0);
  /* Stdin input and CloseStdin are for pipes only. */
  assert_int_equal(send_input(c, pid, NULL, 0, "x", 1, 0, msg, sizeof(msg)),
                   CONCH_CODE_INTERNAL);
  assert_true(
      strncmp(msg, "error writing to stdin: tty assigned to process", 47) == 0);
  assert_int_equal(close_stdin(c, pid, msg, sizeof(msg)), CONCH_CODE_UNKNOWN);
  assert_true(
      strncmp(msg, "error closing stdin: cannot close stdin for PTY", 47) == 0);
  /* Ctrl-D ends the shell; the last output still arrives. */
  assert_int_equal(send_input(c, pid, NULL, 1, "echo bye-bye\n\x04", 14, 0, msg,
                              sizeof(msg)),
                   CONCH_CODE_OK);
  {
    run_result rest;

    memset(&rest, 0, sizeof(rest));
    drain_call(c, call, &rest);
    assert_true(rest.has_end);
    assert_int_equal(rest.exit_code, 0);
    assert_true(strstr(rest.out, "bye-bye") != NULL ||
                strstr(r.out, "bye-bye") != NULL);
  }
  conch_call_free(call);
  conch_client_free(c);
}

/* ---- Keepalive, deadlines
 * ------------------------------------------------------- */

static void test_keepalive(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;

  (void)state;
  o.keepalive = "1";
  run_cmd(c, &o, &r, "sleep", "3.5", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_true(r.nkeepalive >= 2);

  /* Data resets the interval (else one would come after 2 s). */
  o.keepalive = "2";
  run_cmd(c, &o, &r, "sh", "-c",
          "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.3; done", NULL);
  assert_int_equal(r.nkeepalive, 0);

  o.keepalive = "0";
  run_cmd(c, &o, &r, "true", NULL);
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  o.keepalive = "-5";
  run_cmd(c, &o, &r, "true", NULL);
  assert_int_equal(r.code, CONCH_CODE_INVALID_ARGUMENT);
  /* Not a number: the default (90 s), no error. */
  o.keepalive = "soon";
  call = start_call(c, &o, &r, &pid, "true", NULL);
  assert_non_null(call);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_int_equal(r.nkeepalive, 0);
  conch_client_free(c);
}

static void test_deadline(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;
  conch_call *call;
  pid_t pid;
  long long t0 = conch_now_ms();

  (void)state;
  o.timeout_ms = 700;
  call = start_call(c, &o, &r, &pid, "sleep", "30", NULL);
  assert_non_null(call);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_int_equal(r.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(conch_now_ms() - t0 < 5000);
  assert_true(conch_proc_gone_within(pid, CONCH_WAIT_MS));

  /* The client goes away right after the start: the deadline still kills. */
  o.timeout_ms = 800;
  call = start_call(c, &o, &r, &pid, "sleep", "30", NULL);
  assert_non_null(call);
  conch_call_free(call);
  assert_true(conch_proc_alive(pid));
  /* Well before `sleep 30` could end on its own. */
  assert_true(conch_proc_gone_within(pid, CONCH_WAIT_MS));
  /* ... and re-attaching tells how it ended. */
  call = connect_call(c, pid, NULL, 0, NULL);
  memset(&r, 0, sizeof(r));
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_true(r.has_end);
  assert_string_equal(r.status, "signal: killed");

  /* A Connect deadline becomes the process's lifetime. */
  call = start_call(c, NULL, &r, &pid, "sleep", "30", NULL);
  assert_non_null(call);
  conch_call_free(call);
  call = connect_call(c, pid, NULL, 600, NULL);
  memset(&r, 0, sizeof(r));
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_int_equal(r.code, CONCH_CODE_DEADLINE_EXCEEDED);
  assert_true(conch_proc_gone_within(pid, CONCH_WAIT_MS));
  conch_client_free(c);
}

/* ---- Users
 * -------------------------------------------------------------------- */

static void test_users(void **state) {
  conch_client *c = client_new(srv.url);
  start_opts o = {0};
  run_result r;

  (void)state;
  o.user = "no-such-user-conch";
  run_cmd(c, &o, &r, "id", "-u", NULL);
  assert_int_equal(r.code, CONCH_CODE_UNAUTHENTICATED);
  assert_string_equal(r.message, "invalid username: 'no-such-user-conch'");
  if (getuid() != 0) {
    o.user = "nobody";
    run_cmd(c, &o, &r, "id", "-u", NULL);
    assert_int_equal(r.code, CONCH_CODE_PERMISSION_DENIED);
    conch_client_free(c);
    return;
  }
  o.user = "nobody";
  o.cwd = "/tmp";
  run_cmd(c, &o, &r, "sh", "-c", "id -u; echo $USER $HOME", NULL);
  assert_int_equal(r.code, CONCH_CODE_OK);
  assert_string_equal(r.out, "65534\nnobody /nonexistent\n");
  o.user = "root";
  run_cmd(c, &o, &r, "id", "-u", NULL);
  assert_string_equal(r.out, "0\n");
  conch_client_free(c);
}

/* ---- Back-pressure
 * ------------------------------------------------------------- */

static void test_slow_reader(void **state) {
  conch_client *c = client_new(srv.url);
  run_result r;
  conch_call *call;
  pid_t pid;
  long rss0 = proc_rss_kb(srv.pid);
  long rss1;
  long long w1;
  long long w2;
  int i;

  (void)state;
  /* Random bytes: gzip must not shrink what the windows hold. */
  call = start_call(c, NULL, &r, &pid, "cat", "/dev/urandom", NULL);
  assert_non_null(call);
  /* We read nothing: the windows fill, the server stops reading, and
     the writer blocks in write(2).  How long that takes depends on the
     machine's load: wait until the writer has stood still for half a
     second (or give up after 20 s, which fails below). */
  w2 = proc_wchar(pid);
  for (i = 0; i < 40; i++) {
    w1 = w2;
    conch_sleep_ms(500);
    w2 = proc_wchar(pid);
    if (w1 == w2 && w1 > 0) {
      break;
    }
  }
  rss1 = proc_rss_kb(srv.pid);
  fprintf(stderr,
          "slow reader: writer at %lld then %lld bytes; server RSS "
          "%ld -> %ld KiB\n",
          w1, w2, rss0, rss1);
  assert_true(w1 > 0);
  assert_true(w1 == w2);
  assert_true(w1 < 64LL << 20);
  assert_true(rss1 - rss0 < 64 * 1024);
  /* Reading again lets it go on. */
  for (i = 0; i < 200; i++) {
    ProtobufCMessage *m;

    assert_int_equal(conch_call_recv_sync(call, &m), 0);
    conch_message_free(c, m);
  }
  assert_true(wait_wchar_above(pid, w2, CONCH_WAIT_MS));
  assert_int_equal(send_signal(c, pid, NULL, 9, NULL, 0), CONCH_CODE_OK);
  drain_call(c, call, &r);
  conch_call_free(call);
  assert_string_equal(r.status, "signal: killed");
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_echo),
      cmocka_unit_test(test_exit_codes),
      cmocka_unit_test(test_unknown_command),
      cmocka_unit_test(test_big_output),
      cmocka_unit_test(test_env),
      cmocka_unit_test(test_cwd),
      cmocka_unit_test(test_stdin_on_off),
      cmocka_unit_test(test_input_errors),
      cmocka_unit_test(test_stream_input),
      cmocka_unit_test(test_signals),
      cmocka_unit_test(test_reattach),
      cmocka_unit_test(test_list),
      cmocka_unit_test(test_retention_30s),
      cmocka_unit_test(test_pty),
      cmocka_unit_test(test_keepalive),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_users),
      cmocka_unit_test(test_slow_reader),
  };

  if (getenv("SERVE_TEST_FILTER") != NULL) {
    cmocka_set_test_filter(getenv("SERVE_TEST_FILTER"));
  }
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
