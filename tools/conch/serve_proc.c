/* Running processes.  Each has its output fds in the loop (two pipes, or a
   PTY master), a stdin queue written without blocking, and the streams
   subscribed to it (the Start stream and any Connect streams).  One read
   is one DataEvent, sent to every subscriber; with none it is dropped, as
   envd does (no replay).  When a subscriber has more than out_high bytes
   queued the process's fds leave the loop until it drains, so the child
   blocks in write(2): a slow reader slows the process, and memory stays
   bounded.

   A process ends (EndEvent) once it is reaped and its output is closed.
   Output is read to EOF, except that after the reap only the bytes then in
   the pipe are read: a background grandchild holding the pipe does not keep
   the process alive (envd closes the pipes after the reap too).  Ended
   processes stay for cfg.retention_ms so that a late Connect still gets
   StartEvent + EndEvent. */
#include "serve.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PIPE_CHUNK (32 * 1024) /* envd's stdChunkSize */
#define PTY_CHUNK (16 * 1024)  /* envd's ptyChunkSize */
#define INPUT_MAX (16u << 20)  /* queued stdin per process */
#define PTY_SETTLE_MS 100      /* PTY output still in the kernel at reap */

static void on_out(srv_watch *w, uint32_t events);
static void on_err(srv_watch *w, uint32_t events);
static void on_in(srv_watch *w, uint32_t events);
static void on_report(srv_watch *w, uint32_t events);
static void on_deadline(srv_timer *t);
static void on_retained(srv_timer *t);
static void on_settled(srv_timer *t);
static void proc_maybe_end(srv_proc *p);
static void flush_input(srv_proc *p);

/* Go's names for the signals (syscall.Signal.String() on Linux), which
   envd puts into EndEvent.status as "signal: <name>"; the CLI reads them
   back (serve.h). */
static const char *const signal_names[] = {
    NULL,
    "hangup",
    "interrupt",
    "quit",
    "illegal instruction",
    "trace/breakpoint trap",
    "aborted",
    "bus error",
    "floating point exception",
    "killed",
    "user defined signal 1",
    "segmentation fault",
    "user defined signal 2",
    "broken pipe",
    "alarm clock",
    "terminated",
    "stack fault",
    "child exited",
    "continued",
    "stopped (signal)",
    "stopped",
    "stopped (tty input)",
    "stopped (tty output)",
    "urgent I/O condition",
    "CPU time limit exceeded",
    "file size limit exceeded",
    "virtual timer expired",
    "profiling timer expired",
    "window changed",
    "I/O possible",
    "power failure",
    "bad system call",
};

const char *srv_signal_name(int sig) {
  return sig > 0 && (size_t)sig < sizeof(signal_names) / sizeof(signal_names[0])
             ? signal_names[sig]
             : NULL;
}

/* ---- Interest in the fds --------------------------------------------------
 */

static size_t in_pending(const srv_proc *p) {
  return srv_buf_size(&p->in_q);
}

static void proc_watch(srv_proc *p) {
  srv_loop *l = &p->srv->loop;
  uint32_t out_ev = 0;
  uint32_t err_ev = 0;
  uint32_t in_ev = 0;

  if (p->starting) {
    return; /* its output waits in the pipes for the Start stream */
  }
  if (p->out_w.fd >= 0) {
    out_ev = p->paused ? 0 : EPOLLIN;
    if (p->pty && in_pending(p) > 0) {
      out_ev |= EPOLLOUT;
    }
  }
  if (p->err_w.fd >= 0 && !p->paused) {
    err_ev = EPOLLIN;
  }
  if (p->in_w.fd >= 0 && in_pending(p) > 0) {
    in_ev = EPOLLOUT;
  }
  /* A failure here (no memory for epoll) leaves the fd as it was; the
     process still ends when reaped. */
  srv_watch_set(l, &p->out_w, out_ev);
  srv_watch_set(l, &p->err_w, err_ev);
  srv_watch_set(l, &p->in_w, in_ev);
}

static void close_watch(srv_proc *p, srv_watch *w) {
  if (w->fd < 0) {
    return;
  }
  srv_watch_set(&p->srv->loop, w, 0);
  close(w->fd);
  w->fd = -1;
}

/* ---- Creation and lookup --------------------------------------------------
 */

static void proc_discard(srv_proc *p) {
  if (p->dead) {
    return;
  }
  p->dead = 1;
  srv_list_remove(&p->link);
  srv_list_push(&p->srv->dead_procs, &p->link);
}

int srv_proc_drop_ended(srv_server *srv) {
  srv_link *l;

  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    if (p->ended) {
      proc_discard(p);
      return 0;
    }
  }
  return -1;
}

int srv_proc_add(srv_server *srv, Process__StartRequest *req, char *cwd,
                 const srv_spawned *sp, srv_stream *starter, srv_proc **out) {
  srv_proc *p = calloc(1, sizeof(*p));
  srv_link *l;
  int e;

  if (p == NULL) {
    return ENOMEM;
  }
  srv_watch_init(&p->rep_w, sp->report_fd, on_report);
  if (srv_watch_set(&srv->loop, &p->rep_w, EPOLLIN) != 0) {
    e = errno != 0 ? errno : ENOMEM;
    free(p);
    return e;
  }
  /* Its end, its group's, and the keeper's note (serve_reap.c). */
  e = srv_reap_track(srv, sp->pid,
                     req->_pty_case == PROCESS__START_REQUEST___PTY_PTY ||
                         !srv->cfg.signal_pid_only);
  if (e != 0) {
    srv_watch_set(&srv->loop, &p->rep_w, 0);
    free(p);
    return e;
  }
  p->group_held = 1;
  /* The pid is ours now: an ended process that had it is forgotten. */
  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *old = SRV_CONTAINER(l, srv_proc, link);

    if (old->pid == sp->pid && old->ended) {
      l = l->prev;
      proc_discard(old);
    }
  }
  p->srv = srv;
  p->serial = ++srv->next_serial;
  p->pid = sp->pid;
  p->req = req;
  if (req->_tag_case == PROCESS__START_REQUEST___TAG_TAG) {
    p->tag = req->tag;
  }
  p->pty = req->_pty_case == PROCESS__START_REQUEST___PTY_PTY;
  srv_watch_init(&p->out_w, sp->out_fd, on_out);
  srv_watch_init(&p->err_w, sp->err_fd, on_err);
  srv_watch_init(&p->in_w, sp->in_fd, on_in);
  p->in_open = p->pty || sp->in_fd >= 0;
  p->out_left = p->err_left = -1;
  srv_list_init(&p->subs);
  srv_list_init(&p->waiters);
  srv_list_init(&p->in_paused);
  srv_timer_init(&p->deadline_t, on_deadline);
  srv_timer_init(&p->settle_t, on_settled);
  srv_timer_init(&p->retain_t, on_retained);
  p->starting = 1;
  p->start_cwd = cwd;
  p->starter = starter;
  if (starter != NULL) {
    starter->starting = p;
  }
  srv_list_push(&srv->procs, &p->link);
  *out = p;
  return 0;
}

/* The exec report is in: exec happened (EOF), or the child failed before
   it and exits 127 (it is reaped as any child, unknown by then). */
static void proc_started(srv_proc *p, int err) {
  srv_server *srv = p->srv;
  srv_stream *st = p->starter;

  close_watch(p, &p->rep_w);
  p->starting = 0;
  if (st != NULL) {
    st->starting = NULL;
    p->starter = NULL;
  }
  if (err != 0) {
    char msg[1024];
    conch_code code =
        srv_spawn_error(p->req, p->start_cwd, err, msg, sizeof(msg));

    srv_timer_cancel(&srv->loop, &p->deadline_t);
    proc_discard(p); /* the reaper still follows its end */
    if (st != NULL) {
      srv_service_start_failed(st, code, msg);
    }
    return;
  }
  free(p->start_cwd);
  p->start_cwd = NULL;
  if (st != NULL) {
    srv_service_started(st, p);
  }
  proc_watch(p);
}

static void on_report(srv_watch *w, uint32_t events) {
  srv_proc *p = SRV_CONTAINER(w, srv_proc, rep_w);
  int err;

  (void)events;
  if (!p->starting || p->dead) {
    return;
  }
  err = srv_spawn_report(w->fd);
  if (err >= 0) {
    proc_started(p, err);
  }
}

srv_proc *srv_proc_by_serial(srv_server *srv, uint64_t serial) {
  srv_link *l;

  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    if (p->serial == serial && !p->starting) {
      return p;
    }
  }
  return NULL;
}

/* By pid; by tag the newest running one, else the newest ended one. */
srv_proc *srv_proc_find(srv_server *srv, const Process__ProcessSelector *sel) {
  srv_proc *ended = NULL;
  srv_link *l;

  for (l = srv->procs.prev; l != &srv->procs; l = l->prev) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    if (p->starting) {
      continue; /* not started yet, as far as the RPCs know */
    }
    if (sel->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_PID) {
      if (p->pid == (pid_t)sel->pid) {
        return p;
      }
      continue;
    }
    if (p->tag == NULL || strcmp(p->tag, sel->tag) != 0) {
      continue;
    }
    if (!p->ended) {
      return p;
    }
    if (ended == NULL) {
      ended = p;
    }
  }
  return ended;
}

int srv_proc_running(const srv_server *srv) {
  const srv_link *l;
  int n = 0;

  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    const srv_proc *p = SRV_CONTAINER(l, const srv_proc, link);

    n += !p->reaped;
  }
  return n;
}

/* ---- Signalling a process's tree -------------------------------------------
 */

/* Each child calls setsid(), so its pid P is also its process group and
   session id, and P stays ours while anything of that group or session is
   left (serve_reap.c keeps the leader's zombie until then): kill(-P)
   reaches our group and nobody else's, at the cost of that group.  A PTY
   shell's job groups are other groups of session P: only /proc knows
   them. */

typedef struct proc_stat {
  char state;
  long ppid;
  long pgrp;
  long sid;
} proc_stat;

static int read_stat(long pid, proc_stat *ps) {
  char path[64];
  char buf[512];
  FILE *f;
  char *rp;

  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  f = fopen(path, "re");
  if (f == NULL) {
    return -1;
  }
  rp = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
  fclose(f);
  /* "pid (comm) state ppid pgrp session ..."; comm may hold anything. */
  if (rp == NULL || sscanf(rp + 1, " %c %ld %ld %ld", &ps->state, &ps->ppid,
                           &ps->pgrp, &ps->sid) != 4) {
    return -1;
  }
  return 0;
}

#define MAX_JOB_GROUPS 64

/* Signals the members of session |sid| (ours) found in /proc that are
   outside group |sid|: a shell's job groups, each group once. */
static void session_signal(pid_t sid, int sig) {
  pid_t done[MAX_JOB_GROUPS];
  size_t ndone = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;

  if (d == NULL) {
    return;
  }
  while ((e = readdir(d)) != NULL) {
    long pid;
    proc_stat ps;
    size_t i;

    if (e->d_name[0] < '1' || e->d_name[0] > '9') {
      continue;
    }
    pid = strtol(e->d_name, NULL, 10);
    if (read_stat(pid, &ps) != 0 || ps.sid != (long)sid ||
        ps.pgrp == (long)sid || ps.state == 'Z' || ps.state == 'X') {
      continue;
    }
    for (i = 0; i < ndone && done[i] != (pid_t)ps.pgrp; i++) {
    }
    if (i < ndone) {
      continue;
    }
    /* A group in our session: its id is held by our members. */
    if (ndone < MAX_JOB_GROUPS) {
      done[ndone++] = (pid_t)ps.pgrp;
      kill(-(pid_t)ps.pgrp, sig);
    } else {
      kill((pid_t)pid, sig);
    }
  }
  closedir(d);
}

static int proc_kill(srv_proc *p, int sig, int groups) {
  if (!groups) {
    if (p->reaped) {
      return 0; /* the pid may be someone else's now */
    }
    return kill(p->pid, sig) == 0 ? 1 : -1;
  }
  if (p->reaped && p->group_held) {
    srv_reap_sync(p->srv); /* its last members may have ended just now */
  }
  /* A group KILLed whole has nobody left to signal once its leader ended:
     the rest is dying (a KILLed process cannot fork), though a loaded
     machine may take a while to let it go and tell us. */
  if (!p->group_held || (p->reaped && p->group_killed)) {
    return 0;
  }
  /* Atomic against forks in the group (the kernel sees to that).  A child
     not yet through setsid() is no group yet: its pid. */
  if (kill(-p->pid, sig) != 0) {
    if (p->reaped || kill(p->pid, sig) != 0) {
      return -1;
    }
  } else if (sig == SIGKILL) {
    p->group_killed = 1;
  }
  if (p->pty && sig != 0) {
    session_signal(p->pid, sig); /* job control's groups */
  }
  return 1;
}

int srv_proc_kill(srv_proc *p, int sig) {
  return proc_kill(p, sig, !p->srv->cfg.signal_pid_only);
}

static int cmp_pid(const void *a, const void *b) {
  pid_t x = *(const pid_t *)a;
  pid_t y = *(const pid_t *)b;

  return x < y ? -1 : x > y;
}

/* Signals, in one pass over /proc, the processes of the sessions |sids|
   (sorted, all ours), each by its pid: for shutdown, where more passes
   follow. */
static void sessions_signal(const pid_t *sids, size_t n, int sig) {
  DIR *d = opendir("/proc");
  struct dirent *e;

  if (d == NULL) {
    return;
  }
  while ((e = readdir(d)) != NULL) {
    long pid;
    proc_stat ps;
    pid_t sid;

    if (e->d_name[0] < '1' || e->d_name[0] > '9') {
      continue;
    }
    pid = strtol(e->d_name, NULL, 10);
    if (read_stat(pid, &ps) != 0 || ps.state == 'Z' || ps.state == 'X') {
      continue;
    }
    sid = (pid_t)ps.sid;
    if (bsearch(&sid, sids, n, sizeof(*sids), cmp_pid) != NULL) {
      kill((pid_t)pid, sig);
    }
  }
  closedir(d);
}

void srv_proc_signal_all(srv_server *srv, int sig) {
  pid_t *sids;
  size_t n = 0;
  srv_link *l;

  /* Whole groups, ended processes too: a grandchild may have outlived its
     parent.  Even a pid-only server kills its groups at shutdown.  Groups
     still ours: kill(-pid); the sessions of PTYs and of ended leaders
     (members outside the group) in one pass over /proc, however many
     processes there are. */
  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    if (p->group_held && kill(-p->pid, sig) != 0 && !p->reaped) {
      kill(p->pid, sig);
    }
    n++;
  }
  sids = malloc((n > 0 ? n : 1) * sizeof(*sids));
  if (sids == NULL) {
    return;
  }
  n = 0;
  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    if (p->group_held && (p->pty || p->reaped)) {
      sids[n++] = p->pid;
    }
  }
  if (n > 0) {
    qsort(sids, n, sizeof(*sids), cmp_pid);
    sessions_signal(sids, n, sig);
  }
  free(sids);
}

void srv_proc_free(srv_proc *p) {
  srv_server *srv = p->srv;

  srv_timer_cancel(&srv->loop, &p->deadline_t);
  srv_timer_cancel(&srv->loop, &p->settle_t);
  srv_timer_cancel(&srv->loop, &p->retain_t);
  if (p->starter != NULL) {
    p->starter->starting = NULL;
  }
  free(p->start_cwd);
  close_watch(p, &p->rep_w);
  close_watch(p, &p->out_w);
  close_watch(p, &p->err_w);
  close_watch(p, &p->in_w);
  while (!srv_list_empty(&p->subs)) {
    srv_stream *st = SRV_CONTAINER(p->subs.next, srv_stream, sub_link);

    srv_proc_unsubscribe(st);
  }
  while (!srv_list_empty(&p->waiters)) {
    srv_stream *st = SRV_CONTAINER(p->waiters.next, srv_stream, wait_link);

    srv_proc_unwait(st);
  }
  while (!srv_list_empty(&p->in_paused)) {
    srv_list_remove(p->in_paused.next);
  }
  srv_buf_free(&p->in_q, srv->mem);
  free(p->end_msg);
  protobuf_c_message_free_unpacked(&p->req->base, NULL);
  srv_list_remove(&p->link);
  free(p);
}

/* ---- Subscribers and back-pressure --------------------------------------- */

static void set_paused(srv_proc *p, int paused) {
  if (p->paused != paused) {
    p->paused = paused;
    proc_watch(p);
  }
}

void srv_proc_subscribe(srv_proc *p, srv_stream *st) {
  st->proc = p;
  srv_list_push(&p->subs, &st->sub_link);
  srv_timer_arm(&p->srv->loop, &st->keepalive_t,
                srv_now_ms() + st->keepalive_ms);
}

void srv_proc_unsubscribe(srv_stream *st) {
  srv_proc *p = st->proc;

  if (p == NULL || !srv_linked(&st->sub_link)) {
    return;
  }
  srv_list_remove(&st->sub_link);
  srv_timer_cancel(&p->srv->loop, &st->keepalive_t);
  if (st->over) {
    st->over = 0;
    p->nover--;
    set_paused(p, p->nover > 0);
  }
  if (!srv_linked(&st->wait_link)) {
    st->proc = NULL;
  }
}

void srv_proc_sub_drained(srv_stream *st) {
  srv_proc *p = st->proc;

  if (p == NULL || !st->over) {
    return;
  }
  st->over = 0;
  p->nover--;
  set_paused(p, p->nover > 0);
}

/* Sends one packed StartResponse to every subscriber. */
static void broadcast(srv_proc *p, const uint8_t *msg, size_t len,
                      int is_data) {
  srv_server *srv = p->srv;
  int64_t now = srv_now_ms();
  srv_link *l;
  srv_link *next;

  for (l = p->subs.next; l != &p->subs; l = next) {
    srv_stream *st = SRV_CONTAINER(l, srv_stream, sub_link);

    next = l->next;
    srv_rpc_send_packed(st, msg, len);
    if (is_data) {
      srv_timer_arm(&srv->loop, &st->keepalive_t, now + st->keepalive_ms);
    }
    if (!st->over && srv_rpc_queued(st) > srv->cfg.out_high) {
      st->over = 1;
      p->nover++;
    }
  }
  set_paused(p, p->nover > 0);
}

static void emit_data(srv_proc *p, int kind, const uint8_t *buf, size_t n) {
  Process__ProcessEvent__DataEvent de;
  Process__ProcessEvent ev;
  Process__StartResponse r = PROCESS__START_RESPONSE__INIT;
  uint8_t *packed;
  size_t len;

  if (srv_list_empty(&p->subs)) {
    return; /* nobody listens: envd drops it too */
  }
  process__process_event__data_event__init(&de);
  process__process_event__init(&ev);
  de.output_case = (Process__ProcessEvent__DataEvent__OutputCase)kind;
  de.stdout.data = (uint8_t *)buf; /* the union's members share layout */
  de.stdout.len = n;
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
  ev.data = &de;
  r.event = &ev;
  len = protobuf_c_message_get_packed_size(&r.base);
  packed = malloc(len);
  if (packed == NULL) {
    return;
  }
  protobuf_c_message_pack(&r.base, packed);
  broadcast(p, packed, len, 1);
  free(packed);
}

/* ---- Output -------------------------------------------------------------- */

static void close_output(srv_proc *p, srv_watch *w) {
  if (w == &p->out_w && p->pty) {
    /* The master is the PTY input too. */
    p->in_open = 0;
    srv_buf_reset(&p->in_q);
  }
  close_watch(p, w);
  proc_maybe_end(p);
}

static void read_output(srv_proc *p, srv_watch *w, int kind, long *left) {
  uint8_t buf[PIPE_CHUNK];
  size_t cap = p->pty ? PTY_CHUNK : PIPE_CHUNK;
  ssize_t n;

  if (*left >= 0 && (size_t)*left < cap) {
    cap = (size_t)*left;
  }
  if (cap == 0) {
    close_output(p, w);
    return;
  }
  n = read(w->fd, buf, cap);
  if (n > 0) {
    if (*left >= 0) {
      *left -= n;
    }
    emit_data(p, kind, buf, (size_t)n);
    if (*left == 0) {
      close_output(p, w);
    }
    return;
  }
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    return;
  }
  /* EOF, or EIO from a PTY master whose slave side is closed. */
  close_output(p, w);
}

static void on_out(srv_watch *w, uint32_t events) {
  srv_proc *p = SRV_CONTAINER(w, srv_proc, out_w);

  if ((events & EPOLLOUT) != 0 && p->pty) {
    flush_input(p);
  }
  if (w->fd >= 0 && !p->paused &&
      (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
    read_output(p, w,
                p->pty ? PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY
                       : PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT,
                &p->out_left);
  }
}

static void on_err(srv_watch *w, uint32_t events) {
  srv_proc *p = SRV_CONTAINER(w, srv_proc, err_w);

  if (!p->paused && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
    read_output(p, w, PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR,
                &p->err_left);
  }
}

/* After the reap: what is in the pipe now is the rest of the output. */
static void limit_output(srv_proc *p, srv_watch *w, long *left) {
  int avail = 0;

  if (w->fd < 0) {
    return;
  }
  if (ioctl(w->fd, FIONREAD, &avail) != 0 || avail < 0) {
    avail = 0;
  }
  *left = avail;
  if (avail == 0) {
    close_output(p, w);
  }
}

/* ---- Input ----------------------------------------------------------------
 */

static int input_fd(const srv_proc *p) {
  return p->pty ? p->out_w.fd : p->in_w.fd;
}

static void notify_waiters(srv_proc *p, int err) {
  srv_link *l;
  srv_link *next;

  for (l = p->waiters.next; l != &p->waiters; l = next) {
    srv_stream *st = SRV_CONTAINER(l, srv_stream, wait_link);

    next = l->next;
    if (err == 0 && st->wait_until > p->in_written) {
      continue;
    }
    srv_proc_unwait(st);
    srv_service_input_done(st, err, p->pty ? "tty" : "stdin");
  }
}

static void resume_inputs(srv_proc *p) {
  while (!srv_list_empty(&p->in_paused) &&
         in_pending(p) <= p->srv->cfg.stdin_high / 2) {
    srv_stream *st = SRV_CONTAINER(p->in_paused.next, srv_stream, in_link);

    srv_list_remove(&st->in_link);
    srv_rpc_pause_input(st, 0);
  }
}

static void input_fail(srv_proc *p, int err) {
  srv_buf_reset(&p->in_q);
  p->in_written = p->in_queued;
  if (!p->pty) {
    close_watch(p, &p->in_w);
    p->in_open = 0;
  }
  notify_waiters(p, err);
  resume_inputs(p);
  proc_watch(p);
}

static void flush_input(srv_proc *p) {
  int fd = input_fd(p);

  while (in_pending(p) > 0 && fd >= 0) {
    ssize_t n = write(fd, srv_buf_head(&p->in_q), in_pending(p));

    if (n > 0) {
      srv_buf_consume(&p->in_q, (size_t)n);
      p->in_written += (uint64_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      break;
    }
    input_fail(p, n < 0 ? errno : EPIPE);
    return;
  }
  if (in_pending(p) == 0 && p->in_close && !p->pty) {
    close_watch(p, &p->in_w);
  }
  notify_waiters(p, 0);
  resume_inputs(p);
  proc_watch(p);
}

static void on_in(srv_watch *w, uint32_t events) {
  srv_proc *p = SRV_CONTAINER(w, srv_proc, in_w);

  (void)events;
  flush_input(p);
}

/* Stdin queued for every process. */
static size_t in_pending_all(const srv_server *srv) {
  const srv_link *l;
  size_t n = 0;

  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    n += in_pending(SRV_CONTAINER(l, const srv_proc, link));
  }
  return n;
}

int srv_proc_write_input(srv_proc *p, const uint8_t *data, size_t len) {
  if (len == 0) {
    return 0;
  }
  if (in_pending(p) + len > INPUT_MAX ||
      in_pending_all(p->srv) + len > p->srv->cfg.stdin_total ||
      srv_buf_append(&p->in_q, p->srv->mem, data, len) != 0) {
    return -1;
  }
  p->in_queued += len;
  flush_input(p);
  return 0;
}

void srv_proc_wait_input(srv_proc *p, srv_stream *st) {
  st->wait_until = p->in_queued;
  if (p->in_written >= st->wait_until) {
    srv_service_input_done(st, 0, p->pty ? "tty" : "stdin");
    return;
  }
  st->proc = p;
  srv_list_push(&p->waiters, &st->wait_link);
}

void srv_proc_unwait(srv_stream *st) {
  if (!srv_linked(&st->wait_link)) {
    return;
  }
  srv_list_remove(&st->wait_link);
  if (!srv_linked(&st->sub_link)) {
    st->proc = NULL;
  }
}

void srv_proc_close_input(srv_proc *p) {
  if (p->pty || !p->in_open) {
    return;
  }
  p->in_open = 0;
  p->in_close = 1;
  if (in_pending(p) == 0) {
    close_watch(p, &p->in_w);
  }
}

/* ---- The end ----------------------------------------------------------------
 */

static void end_texts(int ws, Process__ProcessEvent__EndEvent *e, char *status,
                      size_t len) {
  if (WIFEXITED(ws)) {
    e->exit_code = WEXITSTATUS(ws);
    e->exited = 1;
    snprintf(status, len, "exit status %d", WEXITSTATUS(ws));
  } else {
    int sig = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
    size_t nsig = sizeof(signal_names) / sizeof(signal_names[0]);

    e->exit_code = -1;
    e->exited = 0;
    if (sig > 0 && (size_t)sig < nsig) {
      snprintf(status, len, "signal: %s%s", signal_names[sig],
               WCOREDUMP(ws) ? " (core dumped)" : "");
    } else {
      snprintf(status, len, "signal: signal %d", sig);
    }
  }
  e->status = status;
  if (!e->exited || e->exit_code != 0) {
    e->_error_case = PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR;
    e->error = status;
  }
}

static int pack_end(srv_proc *p) {
  Process__ProcessEvent__EndEvent ee;
  Process__ProcessEvent ev;
  Process__StartResponse r = PROCESS__START_RESPONSE__INIT;
  char status[128];

  process__process_event__end_event__init(&ee);
  process__process_event__init(&ev);
  end_texts(p->wstatus, &ee, status, sizeof(status));
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_END;
  ev.end = &ee;
  r.event = &ev;
  p->end_len = protobuf_c_message_get_packed_size(&r.base);
  p->end_msg = malloc(p->end_len);
  if (p->end_msg == NULL) {
    return -1;
  }
  protobuf_c_message_pack(&r.base, p->end_msg);
  return 0;
}

static void proc_maybe_end(srv_proc *p) {
  srv_server *srv = p->srv;

  if (!p->reaped || p->ended || p->out_w.fd >= 0 || p->err_w.fd >= 0) {
    return;
  }
  p->ended = 1;
  close_watch(p, &p->in_w);
  p->in_open = 0;
  input_fail(p, EPIPE);
  if (pack_end(p) != 0) {
    p->end_len = 0;
  }
  while (!srv_list_empty(&p->subs)) {
    srv_stream *st = SRV_CONTAINER(p->subs.next, srv_stream, sub_link);

    if (p->end_msg != NULL) {
      srv_rpc_send_packed(st, p->end_msg, p->end_len);
    }
    srv_proc_unsubscribe(st);
    srv_rpc_finish(
        st, p->end_msg != NULL ? CONCH_CODE_OK : CONCH_CODE_RESOURCE_EXHAUSTED,
        NULL);
  }
  srv_timer_arm(&srv->loop, &p->retain_t, srv_now_ms() + srv->cfg.retention_ms);
}

static void on_settled(srv_timer *t) {
  srv_proc *p = SRV_CONTAINER(t, srv_proc, settle_t);

  limit_output(p, &p->out_w, &p->out_left);
  proc_maybe_end(p);
}

void srv_proc_reaped(srv_server *srv, pid_t pid, int wstatus) {
  srv_link *l;
  srv_proc *p = NULL;

  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *q = SRV_CONTAINER(l, srv_proc, link);

    if (q->pid == pid && !q->reaped) {
      p = q;
      break;
    }
  }
  if (p == NULL) {
    return; /* an orphaned grandchild (we are a subreaper), or a child
               whose exec failed */
  }
  if (p->starting) {
    /* The report came in before the exit; the child is gone, so the
       read does not wait.  A failed exec forgets the process. */
    int err = srv_spawn_report(p->rep_w.fd);

    proc_started(p, err > 0 ? err : 0);
    if (p->dead) {
      return;
    }
  }
  p->reaped = 1;
  p->wstatus = wstatus;
  /* A deadline stays for what is left of the group (policy in README). */
  if (srv->cfg.signal_pid_only) {
    srv_timer_cancel(&srv->loop, &p->deadline_t);
  }
  if (!p->pty) {
    input_fail(p, EPIPE); /* nobody reads the stdin pipe any more */
    limit_output(p, &p->err_w, &p->err_left);
    limit_output(p, &p->out_w, &p->out_left);
    proc_maybe_end(p);
    return;
  }
  if (p->out_w.fd < 0) {
    proc_maybe_end(p); /* the master saw EIO before the reap */
    return;
  }
  /* A PTY hands output on through a kernel work queue: give it a moment
     before trusting FIONREAD. */
  srv_timer_arm(&srv->loop, &p->settle_t, srv_now_ms() + PTY_SETTLE_MS);
}

static void on_deadline(srv_timer *t) {
  srv_proc *p = SRV_CONTAINER(t, srv_proc, deadline_t);

  srv_proc_kill(p, SIGKILL);
  /* Retention waited for this deadline (on_retained). */
  if (p->ended && !srv_timer_armed(&p->retain_t)) {
    proc_discard(p);
  }
}

void srv_proc_set_deadline(srv_proc *p, int64_t timeout_ms) {
  /* After the exit only a group-signalling server has a use for it, and
     only while the group has members. */
  if (!p->reaped || (!p->srv->cfg.signal_pid_only && p->group_held)) {
    srv_timer_arm(&p->srv->loop, &p->deadline_t, srv_now_ms() + timeout_ms);
  }
}

static void on_retained(srv_timer *t) {
  srv_proc *p = SRV_CONTAINER(t, srv_proc, retain_t);

  /* A deadline still due for members of the group keeps the entry (and
     its end) until it fires, or until the group is empty
     (srv_proc_group_gone()). */
  if (srv_timer_armed(&p->deadline_t) && p->group_held) {
    return;
  }
  proc_discard(p);
}

void srv_proc_group_gone(srv_server *srv, pid_t pid) {
  srv_link *l;

  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    if (p->pid == pid && p->group_held) {
      p->group_held = 0;
      /* Nothing left for a deadline to reach. */
      srv_timer_cancel(&srv->loop, &p->deadline_t);
      if (p->ended && !srv_timer_armed(&p->retain_t)) {
        proc_discard(p); /* its retention waited for the deadline */
      }
      return;
    }
  }
}
