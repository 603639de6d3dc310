/* `conch serve` fed a client's bytes: the HTTP/2 session, the request
   headers, Connect bodies and envelopes, gzip, protobuf and the checks of
   every RPC.  The bytes go over a socketpair into a connection of the
   server core (runtime/server*.c, adopted with conch_server_adopt()),
   configured and driven as conch serve does it (tools/conch: serve_call.c,
   serve_service.c, serve_proc.c, serve_loop.c) by the loop below.  Input
   that does not start with the HTTP/2 preface is HTTP/1.1 (the core's
   server_h1.c: libhttp-parser, then an in-memory HTTP/2 client session
   into the same server session); the h1_* seeds are such.

   Nothing here may run a command, switch users or touch the file system,
   whatever the input asks for:
   - serve_spawn.c is not linked; srv_spawn(), srv_user_*() and
     srv_resolve_cwd() are fakes.  A process is a few pipes (a socketpair
     for a PTY) whose other ends this file plays: it echoes stdin to stdout
     like cat and ends at EOF on stdin or on a signal, or at once when its
     command is "true" (exit 0), "false" (exit 1) or "crash" (SIGSEGV).
     "sleep" never reads its input, "noin" closes it at once, "bg" exits
     at once but leaves its output open (a grandchild holds it) until the
     run ends, "fail" cannot start, and "noexec" forks but its exec fails
     (the exec report, read in the loop, says ENOENT).  Users are root (0), user
   (1000) and nobody.
   - kill() is wrapped (-Wl,--wrap=kill): a signal to a fake process ends
     it; a signal to any other pid, or to a pid after its reap, aborts.  Fake
   pids lie above the kernel's PID_MAX_LIMIT (1 << 22), so not even the real
   kill() could reach a process with them.
   - The server, its core and conch serve's loop alike, runs on a clock of
   this file's own (srv_clock_set(), which hands it to the core through
   conch_server_opts_set_clock()).  With a step, the clock moves that much
   each turn the client sends a piece, and the timers that fall due run,
   so that the core's header, body and idle timeouts and conch serve's
   keepalives and deadlines fire between the pieces; once the input is used
   up, the armed timers are run earliest first, the clock jumping to each
   (deadlines, keepalives, retention, the idle timeout, the linger).

   Every run starts with four processes, for requests to find:
     1073741825  "cat", tag "web", stdin a pipe
     1073741826  "cat", tag "tty", a PTY of 80x24
     1073741827  "true", tag "old": it has ended and is retained
     1073741828  "cat", tag "quiet", stdin off
   New ones take the next free of the 8 pids from 1073741825 on, round
   robin, so a pid is reused once its process was reaped.

   Input: byte 0 holds flags, byte 1 the clock's step per piece sent
   (byte / 64: none, 10 ms, 1 s, 30 s), the rest is what the client sends.
     bit 0     --access-token tok
     bit 1     small limits (1 KiB messages, 8 KiB held per connection,
               2 KiB of stdin before StreamInput pauses, ...)
     bit 2     the server runs as root (else as uid 1000)
     bits 3-4  the client writes all at once, or 7, 64 or 512 bytes at a
               time with a server turn in between
     bit 5     a small socket buffer on the server side (partial writes)
     bit 6     the client goes away before its processes end
     bit 7     then the server shuts down (GOAWAY, SIGTERM to all)
   Whatever the input, the run must end with no memory or descriptor
   leaked, no signal to a process the server did not start, and the
   server idle once its input is used up (not spinning). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int __wrap_kill(pid_t pid, int sig);

#define FAKE_PID_BASE (1 << 30)
#define FAKE_SLOTS 8
#define TURNS_MAX 20000 /* a server still busy after this many spins */
#define TIMERS_MAX 16   /* timers run per time jump */

enum {
  F_TOKEN = 1,
  F_SMALL = 2,
  F_ROOT = 4,
  F_SNDBUF = 32,
  F_LEAVE = 64,
  F_STOP = 128
};

/* ---- Fake processes ------------------------------------------------------
 */

enum { KID_FREE = 0, KID_RUNNING, KID_EXITING };

typedef struct fake_kid {
  int state;
  int pty;
  int deaf;    /* "sleep": never reads its input */
  int bg;      /* "bg": its output outlives it */
  int in;      /* its stdin (read end), or -1 */
  int out;     /* its stdout (write end), or its side of the PTY */
  int err;     /* its stderr (write end), or -1 */
  int wstatus; /* once it is KID_EXITING */
} fake_kid;

static srv_server srv;
static fake_kid kids[FAKE_SLOTS];
static unsigned next_slot;
static int client = -1;
/* Output ends of exited "bg" processes, held by their grandchildren. */
static int held[2 * FAKE_SLOTS * 4];
static size_t nheld;

static pid_t kid_pid(const fake_kid *k) {
  return FAKE_PID_BASE + 1 + (pid_t)(k - kids);
}

static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

static void kid_exit(fake_kid *k, int wstatus) {
  if (k->state == KID_RUNNING) {
    k->state = KID_EXITING;
    k->wstatus = wstatus;
  }
}

/* One turn of cat: what came in goes out (what does not fit is lost). */
static int kid_echo(fake_kid *k) {
  uint8_t buf[4096];
  int from = k->pty ? k->out : k->in;
  ssize_t n;
  ssize_t w;

  if (from < 0 || k->deaf) {
    return 0;
  }
  n = read(from, buf, sizeof(buf));
  if (n > 0) {
    w = write(k->out, buf, (size_t)n);
    (void)w;
    return 1;
  }
  if (n == 0) {
    kid_exit(k, 0);
    return 1;
  }
  return 0;
}

/* What the children did this turn; the exited ones are reaped, as the
   SIGCHLD handler of serve_main.c would. */
static int kids_step(void) {
  int busy = 0;
  size_t i;

  for (i = 0; i < FAKE_SLOTS; i++) {
    fake_kid *k = &kids[i];

    if (k->state == KID_RUNNING) {
      busy |= kid_echo(k);
    }
    if (k->state == KID_EXITING) {
      if (k->bg && nheld + 2 <= sizeof(held) / sizeof(held[0])) {
        held[nheld++] = k->out;
        held[nheld++] = k->err;
        k->out = k->err = -1;
      }
      close_fd(&k->in);
      close_fd(&k->out);
      close_fd(&k->err);
      k->state = KID_FREE;
      srv_proc_reaped(&srv, kid_pid(k), k->wstatus);
      /* No grandchildren: the group ends with its leader. */
      srv_proc_group_gone(&srv, kid_pid(k));
      busy = 1;
    }
  }
  return busy;
}

int __wrap_kill(pid_t pid, int sig) {
  pid_t who = pid < 0 ? -pid : pid;
  fake_kid *k;

  if (who <= FAKE_PID_BASE || who > FAKE_PID_BASE + FAKE_SLOTS) {
    fprintf(stderr, "fuzz_serve: kill(%d, %d): not a process of ours\n",
            (int)pid, sig);
    abort();
  }
  k = &kids[who - FAKE_PID_BASE - 1];
  /* The server must never signal a pid it reaped: it may be someone
     else's by now.  A group may outlive its leader (shutdown signals the
     groups of ended processes too). */
  if (k->state == KID_FREE && pid < 0) {
    errno = ESRCH;
    return -1;
  }
  if (k->state == KID_FREE) {
    fprintf(stderr, "fuzz_serve: kill(%d, %d) after the reap\n", (int)pid, sig);
    abort();
  }
  if (sig != 0) {
    kid_exit(k, sig);
  }
  return 0;
}

/* ---- Fakes of serve_spawn.c ----------------------------------------------
 */

static const struct fake_user {
  const char *name;
  uid_t uid;
  const char *home;
} fake_users[] = {
    {"root", 0, "/root"},
    {"user", 1000, "/home/user"},
    {"nobody", 65534, "/nonexistent"},
};

static int user_fill(const struct fake_user *f, srv_user *u) {
  memset(u, 0, sizeof(*u));
  u->uid = f->uid;
  u->gid = f->uid;
  u->name = strdup(f->name);
  u->home = strdup(f->home);
  u->groups = malloc(sizeof(*u->groups));
  if (u->name == NULL || u->home == NULL || u->groups == NULL) {
    srv_user_clear(u);
    return -2;
  }
  u->groups[0] = f->uid;
  u->ngroups = 1;
  return 0;
}

int srv_user_lookup(const char *name, srv_user *u) {
  size_t i;

  memset(u, 0, sizeof(*u));
  for (i = 0; i < sizeof(fake_users) / sizeof(fake_users[0]); i++) {
    if (strcmp(fake_users[i].name, name) == 0) {
      return user_fill(&fake_users[i], u);
    }
  }
  return -1;
}

int srv_user_by_uid(uid_t uid, srv_user *u) {
  size_t i;

  memset(u, 0, sizeof(*u));
  for (i = 0; i < sizeof(fake_users) / sizeof(fake_users[0]); i++) {
    if (fake_users[i].uid == uid) {
      return user_fill(&fake_users[i], u);
    }
  }
  return -1;
}

/* ---- Fakes of serve_reap.c ------------------------------------------------
 */

int srv_reap_track(srv_server *s, pid_t pid, int own) {
  (void)s;
  (void)pid;
  (void)own;
  return 0;
}

void srv_reap_sync(srv_server *s) { (void)s; }

void srv_user_clear(srv_user *u) {
  free(u->name);
  free(u->home);
  free(u->groups);
  memset(u, 0, sizeof(*u));
}

/* serve_spawn.c's srv_resolve_cwd() without the file system: the same
   rules (srv_cwd_path(), conch_serve_core's), then a path naming
   "missing" does not exist and every other one does. */
conch_code srv_resolve_cwd(const char *cwd, const srv_user *u, char **out,
                           char *err, size_t errlen) {
  char *path;
  conch_code code = srv_cwd_path(cwd, u, &path, err, errlen);

  if (code != CONCH_CODE_OK) {
    return code;
  }
  if (strstr(path, "missing") != NULL) {
    snprintf(err, errlen, "cwd '%s' does not exist", path);
    free(path);
    return CONCH_CODE_INVALID_ARGUMENT;
  }
  *out = path;
  return CONCH_CODE_OK;
}

static fake_kid *kid_slot(void) {
  size_t i;

  for (i = 0; i < FAKE_SLOTS; i++) {
    fake_kid *k = &kids[(next_slot + i) % FAKE_SLOTS];

    if (k->state == KID_FREE) {
      next_slot = (unsigned)(k - kids) + 1;
      return k;
    }
  }
  return NULL;
}

/* A pipe whose ends go to the server (|mine|) and the child (|theirs|):
   |reader| says whether the server reads it.  One page of capacity, so
   that little input fills it. */
static int fake_pipe(int reader, int *mine, int *theirs) {
  int p[2];

  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    return -1;
  }
  fcntl(p[0], F_SETPIPE_SZ, 4096);
  *mine = reader ? p[0] : p[1];
  *theirs = reader ? p[1] : p[0];
  return 0;
}

static int kid_start(fake_kid *k, const Process__StartRequest *req,
                     srv_spawned *sp) {
  int stdin_on =
      req->_stdin_case != PROCESS__START_REQUEST___STDIN_STDIN || req->stdin;
  int s[2];

  memset(k, 0, sizeof(*k));
  k->in = k->out = k->err = -1;
  sp->in_fd = sp->out_fd = sp->err_fd = -1;
  k->pty = req->_pty_case == PROCESS__START_REQUEST___PTY_PTY;
  if (k->pty) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, s) !=
        0) {
      return -1;
    }
    sp->out_fd = s[0];
    k->out = s[1];
    /* Input queues up when the "terminal" does not read. */
    setsockopt(s[0], SOL_SOCKET, SO_SNDBUF, &(int){4096}, sizeof(int));
    return 0;
  }
  if (fake_pipe(1, &sp->out_fd, &k->out) != 0 ||
      fake_pipe(1, &sp->err_fd, &k->err) != 0 ||
      (stdin_on && fake_pipe(0, &sp->in_fd, &k->in) != 0)) {
    return -1;
  }
  return 0;
}

conch_code srv_spawn_error(const Process__StartRequest *req, const char *cwd,
                           int err, char *buf, size_t len) {
  (void)cwd;
  snprintf(buf, len, "error starting process '%s': fork/exec /bin/sh: %s",
           req->process != NULL ? req->process->cmd : "", strerror(err));
  return CONCH_CODE_INVALID_ARGUMENT;
}

int srv_spawn_report(int fd) {
  int err = 0;
  ssize_t n = read(fd, &err, sizeof(err));

  if (n < 0 && errno == EAGAIN) {
    return -1;
  }
  return n == (ssize_t)sizeof(err) && err > 0 ? err : 0;
}

/* The exec report: EOF at once (exec happened), or for "noexec" the
   errno of an exec that failed (the kid then exits 127). */
static int fake_report(const char *cmd, srv_spawned *out) {
  int p[2];
  int e = ENOENT;
  ssize_t w = 0;

  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    return -1;
  }
  if (strcmp(cmd, "noexec") == 0) {
    w = write(p[1], &e, sizeof(e));
  }
  (void)w;
  close(p[1]);
  out->report_fd = p[0];
  return 0;
}

conch_code srv_spawn(const Process__StartRequest *req, const srv_user *u,
                     int switch_user, int envd_groups, const char *cwd,
                     int64_t delay_ms, srv_spawned *out, char *err,
                     size_t errlen) {
  const char *cmd = req->process != NULL ? req->process->cmd : "";
  fake_kid *k;
  ssize_t w;

  (void)u;
  (void)switch_user;
  (void)envd_groups;
  (void)cwd;
  (void)delay_ms;
  out->report_fd = -1;
  k = strcmp(cmd, "fail") != 0 ? kid_slot() : NULL;
  if (k == NULL) {
    snprintf(err, errlen,
             "error starting process '%s': fork/exec /bin/sh: no such file "
             "or directory",
             cmd);
    return CONCH_CODE_INVALID_ARGUMENT;
  }
  if (kid_start(k, req, out) != 0 || fake_report(cmd, out) != 0) {
    close_fd(&k->in);
    close_fd(&k->out);
    close_fd(&k->err);
    close_fd(&out->in_fd);
    close_fd(&out->out_fd);
    close_fd(&out->err_fd);
    snprintf(err, errlen, "error starting process '%s': %s", cmd,
             strerror(errno));
    return CONCH_CODE_INVALID_ARGUMENT;
  }
  k->state = KID_RUNNING;
  out->pid = kid_pid(k);
  /* Something to read before any input. */
  w = write(k->out, cmd, strlen(cmd));
  w = write(k->err >= 0 ? k->err : k->out, "\n", 1);
  (void)w;
  if (strcmp(cmd, "true") == 0) {
    kid_exit(k, 0);
  } else if (strcmp(cmd, "false") == 0) {
    kid_exit(k, 1 << 8);
  } else if (strcmp(cmd, "crash") == 0) {
    kid_exit(k, SIGSEGV | WCOREFLAG);
  } else if (strcmp(cmd, "sleep") == 0) {
    k->deaf = 1;
  } else if (strcmp(cmd, "noin") == 0) {
    close_fd(&k->in);
  } else if (strcmp(cmd, "noexec") == 0) {
    kid_exit(k, 127 << 8);
  } else if (strcmp(cmd, "bg") == 0) {
    k->bg = 1;
    kid_exit(k, 0);
  }
  return CONCH_CODE_OK;
}

/* ---- The server ------------------------------------------------------------
 */

static int is_h1; /* the input is no HTTP/2 */

static void collect(void) {
  srv_core_collect(&srv);
  while (!srv_list_empty(&srv.dead_procs)) {
    srv_proc_free(SRV_CONTAINER(srv.dead_procs.next, srv_proc, link));
  }
}

#ifndef TRACE_OUT
#define TRACE_OUT(p, n)
#endif
static int drain(void) {
  uint8_t buf[65536];
  int got = 0;

  ssize_t n;

  while (client >= 0 && (n = read(client, buf, sizeof(buf))) > 0) {
    TRACE_OUT(buf, n);
    got = 1;
  }
  return got;
}

static int64_t clock_ms;   /* the server's clock */
static int64_t clock_step; /* ... added by a turn that sends a piece */

static int64_t fake_now(void *ud) {
  (void)ud;
  return clock_ms;
}

/* Runs conch serve's timers that are due (the core's among them), one at
   a time as srv_loop_poll() does.  Returns whether any ran. */
static int due_timers(void) {
  srv_timer *t;
  int ran = 0;

  while ((t = srv_heap_top(&srv.loop.heap)) != NULL && t->when <= clock_ms) {
    srv_timer_cancel(&srv.loop, t);
    t->cb(t);
    ran = 1;
  }
  return ran;
}

/* One loop turn as serve_main.c runs it; with |tick| (a turn after a
   piece went) the clock moves a step first and the timers due run, else
   only the core's work for the next turn (its timer at 0).  Returns
   whether anything happened. */
static int turn_at(int tick) {
  struct epoll_event evs[64];
  int busy = 0;
  int n;
  int i;

  if (tick && clock_step != 0) {
    clock_ms += clock_step;
    busy |= due_timers();
  }
  collect();
  n = epoll_wait(srv.loop.epfd, evs, 64, 0);
  for (i = 0; i < n; i++) {
    srv_watch *w = evs[i].data.ptr;

    if (w->events != 0) {
      w->cb(w, evs[i].events);
      busy = 1;
    }
  }
  busy |= kids_step();
  /* The core's work for the next turn (timer 0), not its deadlines. */
  if (srv_timer_armed(&srv.core_t) && srv.core_t.when <= srv_now_ms()) {
    srv_timer_cancel(&srv.loop, &srv.core_t);
    (void)conch_server_on_timer(srv.core);
    busy = 1;
  }
  collect();
  busy |= drain();
  return busy;
}

static int turn(void) { return turn_at(0); }

static void settle(void) {
  int i;

  for (i = 0; i < TURNS_MAX; i++) {
    if (!turn()) {
      return;
    }
  }
  fprintf(stderr, "fuzz_serve: the server is still busy after %d turns\n",
          TURNS_MAX);
  abort();
}

/* Time jumps to the next timer, |n| times at most. */
static void run_timers(int n) {
  srv_timer *t;

  while (n-- > 0 && (t = srv_heap_top(&srv.loop.heap)) != NULL) {
    if (t->when > clock_ms) {
      clock_ms = t->when;
    }
    srv_timer_cancel(&srv.loop, t);
    t->cb(t);
    settle();
  }
}

/* What srv_server_stop() does to connections and processes. */
static void stop(void) {
  (void)conch_server_shutdown(srv.core);
  srv_proc_signal_all(&srv, SIGTERM);
  settle();
}

static void client_leave(void) {
  close_fd(&client);
  settle();
}

static void feed(const uint8_t *p, size_t n, size_t chunk) {
  int stuck = 0;

  while (n > 0 && client >= 0 && !conch_server_idle(srv.core)) {
    ssize_t w = send(client, p, n < chunk ? n : chunk, MSG_NOSIGNAL);

    if (w < 0 && errno != EAGAIN && errno != EINTR) {
      return; /* the server closed the connection */
    }
    if (w > 0) {
      p += w;
      n -= (size_t)w;
      stuck = 0;
    }
    if (!turn_at(w > 0) && w <= 0 && ++stuck > 100) {
      /* HTTP/1.1 reads only a bounded way ahead of the request being
         answered (pipelining behind a stream that does not end): the
         rest of the input is dropped.  HTTP/2 always reads. */
      if (is_h1) {
        return;
      }
      fprintf(stderr, "fuzz_serve: the server stopped reading\n");
      abort();
    }
  }
}

static void add_proc(const char *cmd, const char *tag, int pty, int stdin_on) {
  Process__StartRequest req = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
  Process__PTY pt = PROCESS__PTY__INIT;
  Process__PTY__Size sz = PROCESS__PTY__SIZE__INIT;
  Process__StartRequest *copy;
  uint8_t buf[256];
  size_t len;
  srv_spawned sp;
  srv_proc *p;
  char err[256];

  cfg.cmd = (char *)cmd;
  req.process = &cfg;
  req._tag_case = PROCESS__START_REQUEST___TAG_TAG;
  req.tag = (char *)tag;
  if (pty) {
    sz.cols = 80;
    sz.rows = 24;
    pt.size = &sz;
    req._pty_case = PROCESS__START_REQUEST___PTY_PTY;
    req.pty = &pt;
  }
  req._stdin_case = PROCESS__START_REQUEST___STDIN_STDIN;
  req.stdin = stdin_on;
  /* The server frees the request as protobuf-c allocated it. */
  len = protobuf_c_message_pack(&req.base, buf);
  copy = (Process__StartRequest *)protobuf_c_message_unpack(
      &process__start_request__descriptor, NULL, len, buf);
  if (copy == NULL) {
    abort();
  }
  if (srv_spawn(copy, NULL, 0, 0, "/", 0, &sp, err, sizeof(err)) !=
          CONCH_CODE_OK ||
      srv_proc_add(&srv, copy, NULL, &sp, NULL, &p) != 0) {
    abort();
  }
}

static void server_init(unsigned flags) {
  srv_config *cfg = &srv.cfg;
  size_t i;

  memset(&srv, 0, sizeof(srv));
  /* conch serve's defaults, with a TCP listener in place of the private
     Unix socket. */
  srv_config_defaults(cfg);
  cfg->listen = "127.0.0.1:0";
  if (flags & F_TOKEN) {
    cfg->access_token = "tok";
  }
  /* --allow-user '*': requests may name other users, as before that
     option existed (the seeds do).  The Host check (a TCP listener
     without a token) stays off: the seeds say "Host: x". */
  cfg->allow_users[0] = "*";
  cfg->nallow_users = 1;
  if (flags & F_SMALL) {
    cfg->max_message = 1024;
    cfg->conn_buffered = 8192;
    cfg->max_streams = 4;
    cfg->out_high = 4096;
    cfg->out_low = 1024;
    cfg->stdin_high = 2048;
    cfg->compress_min = 16;
    cfg->max_procs = 4;
    cfg->max_buffered = 16384;
    cfg->stdin_total = 4096;
  }
  srv.mem = conch_mem_default();
  srv.euid = (flags & F_ROOT) ? 0 : 1000;
  srv_list_init(&srv.procs);
  srv_list_init(&srv.dead_procs);
  srv_watch_init(&srv.sig_w, -1, NULL);
  srv_watch_init(&srv.stdin_w, -1, NULL);
  srv_core_init(&srv);
  srv_clock_set(fake_now, NULL);
  if (srv_loop_init(&srv.loop) != 0 || srv_core_start(&srv, -1) != 0) {
    abort();
  }
  for (i = 0; i < FAKE_SLOTS; i++) {
    kids[i].state = KID_FREE;
    kids[i].in = kids[i].out = kids[i].err = -1;
  }
  next_slot = 0;
}

static void server_clear(void) {
  size_t i;

  srv_core_free(&srv);
  while (!srv_list_empty(&srv.procs)) {
    srv_proc *p = SRV_CONTAINER(srv.procs.next, srv_proc, link);

    srv_list_remove(&p->link);
    srv_list_push(&srv.dead_procs, &p->link);
  }
  collect();
  for (i = 0; i < FAKE_SLOTS; i++) {
    close_fd(&kids[i].in);
    close_fd(&kids[i].out);
    close_fd(&kids[i].err);
  }
  while (nheld > 0) {
    close_fd(&held[--nheld]);
  }
  srv_loop_clear(&srv.loop);
}

/* The lowest free descriptor: the same before and after a run, unless
   the run leaked one. */
static int lowest_fd(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0) {
    abort();
  }
  close(fd);
  return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t chunks[4] = {SIZE_MAX, 7, 64, 512};
  static int once;
  unsigned flags;
  int fd0;
  int sv[2];
  size_t i;

  if (size < 2) {
    return 0;
  }
  if (!once) {
    once = 1;
    signal(SIGPIPE, SIG_IGN); /* as serve_main.c */
  }
  flags = data[0];
  clock_ms = 1000000;
  clock_step = (int64_t[]){0, 10, 1000, 30000}[data[1] / 64];
  fd0 = lowest_fd();
  server_init(flags);
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) !=
      0) {
    abort();
  }
  if (flags & F_SNDBUF) {
    int small = 4096;

    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  }
  client = sv[1];
  add_proc("cat", "web", 0, 1);
  add_proc("cat", "tty", 1, 1);
  add_proc("true", "old", 0, 1);
  add_proc("cat", "quiet", 0, 0);
  is_h1 = size < 6 || memcmp(data + 2, "PRI ", 4) != 0;
  if (conch_server_adopt(srv.core, sv[0], NULL) != 0) {
    abort();
  }
  settle();
  feed(data + 2, size - 2, chunks[(flags >> 3) & 3]);
  settle();
  if (flags & F_LEAVE) {
    client_leave();
  }
  if (flags & F_STOP) {
    stop();
  }
  run_timers(TIMERS_MAX);
  for (i = 0; i < FAKE_SLOTS; i++) {
    kid_exit(&kids[i], SIGKILL);
  }
  settle();
  run_timers(TIMERS_MAX);
  client_leave();
  server_clear();
  if (lowest_fd() != fd0) {
    fprintf(stderr, "fuzz_serve: a descriptor leaked\n");
    abort();
  }
  return 0;
}
