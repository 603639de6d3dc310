/* The process.Process RPCs, with envd's codes and messages
   (shared/ENVD.md, "envd behaviour, RPC by RPC"). */
#include "serve.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static void svc_list(srv_stream *st, ProtobufCMessage *m);
static void svc_start(srv_stream *st, ProtobufCMessage *m);
static void svc_connect(srv_stream *st, ProtobufCMessage *m);
static void svc_update(srv_stream *st, ProtobufCMessage *m);
static void svc_stream_input(srv_stream *st, ProtobufCMessage *m);
static void svc_stream_input_end(srv_stream *st);
static void svc_send_input(srv_stream *st, ProtobufCMessage *m);
static void svc_send_signal(srv_stream *st, ProtobufCMessage *m);
static void svc_close_stdin(srv_stream *st, ProtobufCMessage *m);
static void spawn_turn(srv_timer *t);

#define SVC "/process.Process/"

static const srv_method methods[] = {
    {SVC "List", SRV_UNARY, &process__list_request__descriptor,
     &process__list_response__descriptor, svc_list, NULL},
    {SVC "Start", SRV_SERVER_STREAM, &process__start_request__descriptor,
     &process__start_response__descriptor, svc_start, NULL},
    {SVC "Connect", SRV_SERVER_STREAM, &process__connect_request__descriptor,
     &process__connect_response__descriptor, svc_connect, NULL},
    {SVC "Update", SRV_UNARY, &process__update_request__descriptor,
     &process__update_response__descriptor, svc_update, NULL},
    {SVC "StreamInput", SRV_CLIENT_STREAM,
     &process__stream_input_request__descriptor,
     &process__stream_input_response__descriptor, svc_stream_input,
     svc_stream_input_end},
    {SVC "SendInput", SRV_UNARY, &process__send_input_request__descriptor,
     &process__send_input_response__descriptor, svc_send_input, NULL},
    {SVC "SendSignal", SRV_UNARY, &process__send_signal_request__descriptor,
     &process__send_signal_response__descriptor, svc_send_signal, NULL},
    {SVC "CloseStdin", SRV_UNARY, &process__close_stdin_request__descriptor,
     &process__close_stdin_response__descriptor, svc_close_stdin, NULL},
};

const srv_method *srv_service_method(size_t i) {
  return i < sizeof(methods) / sizeof(methods[0]) ? &methods[i] : NULL;
}

const srv_method *srv_service_route(const char *path) {
  size_t i;

  for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
    if (strcmp(methods[i].path, path) == 0) {
      return &methods[i];
    }
  }
  return NULL;
}

static void spawn_unqueue(srv_stream *st);

void srv_service_stream_gone(srv_stream *st) {
  if (srv_linked(&st->spawn_link)) {
    spawn_unqueue(st); /* gone before its fork: nothing was started */
  }
  if (st->starting != NULL) {
    /* A Start that goes away before the exec: the process runs on
       unwatched (as after a StartEvent), or is forgotten if exec fails. */
    st->starting->starter = NULL;
    st->starting = NULL;
  }
  srv_proc_unsubscribe(st);
  srv_proc_unwait(st);
  srv_list_remove(&st->in_link);
}

/* ---- Events ----------------------------------------------------------------
 */

/* StartResponse and ConnectResponse are the same on the wire. */
static void send_event(srv_stream *st, Process__ProcessEvent *ev) {
  Process__StartResponse r = PROCESS__START_RESPONSE__INIT;

  r.event = ev;
  srv_rpc_send(st, &r.base);
}

static void send_start_event(srv_stream *st, pid_t pid) {
  Process__ProcessEvent__StartEvent se =
      PROCESS__PROCESS_EVENT__START_EVENT__INIT;
  Process__ProcessEvent ev;

  process__process_event__init(&ev);
  se.pid = (uint32_t)pid;
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_START;
  ev.start = &se;
  send_event(st, &ev);
}

void srv_service_keepalive(srv_stream *st) {
  Process__ProcessEvent__KeepAlive ka =
      PROCESS__PROCESS_EVENT__KEEP_ALIVE__INIT;
  Process__ProcessEvent ev;

  if (st->proc == NULL || st->finished) {
    return;
  }
  process__process_event__init(&ev);
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_KEEPALIVE;
  ev.keepalive = &ka;
  send_event(st, &ev);
  srv_timer_arm(&srv_rpc_server(st)->loop, &st->keepalive_t,
                srv_now_ms() + st->keepalive_ms);
}

/* ---- Finding the process ------------------------------------------------- */

static void not_found(srv_stream *st, const Process__ProcessSelector *sel) {
  if (sel->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_PID) {
    srv_rpc_finish(st, CONCH_CODE_NOT_FOUND, "process with pid %u not found",
                   sel->pid);
  } else {
    srv_rpc_finish(st, CONCH_CODE_NOT_FOUND, "process with tag %s not found",
                   sel->tag);
  }
}

static srv_proc *find(srv_stream *st, const Process__ProcessSelector *sel,
                      int ended_ok) {
  srv_proc *p;

  if (sel == NULL ||
      (sel->selector_case != PROCESS__PROCESS_SELECTOR__SELECTOR_PID &&
       sel->selector_case != PROCESS__PROCESS_SELECTOR__SELECTOR_TAG)) {
    srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED,
                   "invalid input type *process.ProcessSelector");
    return NULL;
  }
  p = srv_proc_find(srv_rpc_server(st), sel);
  if (p != NULL && (ended_ok || !p->ended)) {
    return p;
  }
  not_found(st, sel);
  return NULL;
}

/* ---- List ------------------------------------------------------------------
 */

static void svc_list(srv_stream *st, ProtobufCMessage *m) {
  srv_server *srv = srv_rpc_server(st);
  Process__ListResponse resp = PROCESS__LIST_RESPONSE__INIT;
  Process__ProcessInfo *infos;
  Process__ProcessInfo **ptrs;
  size_t n = 0;
  srv_link *l;

  (void)m;
  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

    n += !p->ended && !p->starting;
  }
  infos = calloc(n + 1, sizeof(*infos));
  ptrs = calloc(n + 1, sizeof(*ptrs));
  if (infos == NULL || ptrs == NULL) {
    free(infos);
    free(ptrs);
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (l = srv->procs.next; l != &srv->procs; l = l->next) {
    srv_proc *p = SRV_CONTAINER(l, srv_proc, link);
    Process__ProcessInfo *info = &infos[resp.n_processes];

    if (p->ended || p->starting) {
      continue;
    }
    process__process_info__init(info);
    info->config = p->req->process;
    info->pid = (uint32_t)p->pid;
    if (p->tag != NULL) {
      info->_tag_case = PROCESS__PROCESS_INFO___TAG_TAG;
      info->tag = (char *)p->tag;
    }
    ptrs[resp.n_processes++] = info;
  }
  resp.processes = ptrs;
  srv_rpc_send(st, &resp.base);
  free(infos);
  free(ptrs);
}

/* ---- Start -----------------------------------------------------------------
 */

/* The request outlives the call (List shows it as sent): an owned copy. */
static Process__StartRequest *copy_request(const Process__StartRequest *req) {
  size_t len = protobuf_c_message_get_packed_size(&req->base);
  uint8_t *buf = malloc(len > 0 ? len : 1);
  ProtobufCMessage *copy;

  if (buf == NULL) {
    return NULL;
  }
  protobuf_c_message_pack(&req->base, buf);
  copy = protobuf_c_message_unpack(&process__start_request__descriptor, NULL,
                                   len, buf);
  free(buf);
  return (Process__StartRequest *)copy;
}

/* Room for one more process: at most max_procs held, and their
   configurations within SRV_CONFIG_BUDGET; ended ones make room first,
   oldest first.  Returns 0, or -1 (answered resource_exhausted). */
static int admit(srv_stream *st, const Process__StartRequest *req) {
  srv_server *srv = srv_rpc_server(st);
  size_t need = protobuf_c_message_get_packed_size(&req->base);

  for (;;) {
    size_t n = 0;
    size_t running = 0;
    size_t held = 0;
    srv_link *l;

    for (l = srv->procs.next; l != &srv->procs; l = l->next) {
      srv_proc *p = SRV_CONTAINER(l, srv_proc, link);

      n++;
      running += !p->ended;
      held += protobuf_c_message_get_packed_size(&p->req->base);
    }
    /* Starts waiting for their fork count too. */
    n += srv->nqueued;
    running += srv->nqueued;
    held += srv->queued_bytes;
    if (n < srv->cfg.max_procs && held + need <= SRV_CONFIG_BUDGET) {
      return 0;
    }
    if (srv_proc_drop_ended(srv) == 0) {
      continue;
    }
    if (running >= srv->cfg.max_procs) {
      srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                     "too many processes: %zu running, the limit is %zu",
                     running, srv->cfg.max_procs);
    } else {
      srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                     "process configurations too large: %zu bytes held "
                     "and %zu more asked, the limit is %d",
                     held, need, SRV_CONFIG_BUDGET);
    }
    return -1;
  }
}

/* Forks at most this many children per loop turn: a fork costs about a
   millisecond (page tables copied, then copy-on-write faults), so a burst
   of Starts is spread over turns and other requests are answered in
   between (README: Processes). */
#define SPAWN_BATCH 8

static void spawn_queue_init(srv_server *srv) {
  if (srv->spawn_q.next == NULL) {
    srv_list_init(&srv->spawn_q);
    srv_timer_init(&srv->spawn_t, spawn_turn);
  }
}

static void spawn_unqueue(srv_stream *st) {
  srv_server *srv = srv_rpc_server(st);

  srv_list_remove(&st->spawn_link);
  srv->nqueued--;
  srv->queued_bytes -= protobuf_c_message_get_packed_size(&st->spawn_req->base);
  protobuf_c_message_free_unpacked(&st->spawn_req->base, NULL);
  st->spawn_req = NULL;
  free(st->spawn_cwd);
  st->spawn_cwd = NULL;
}

/* Forks the Start of |st|; srv_service_started() or _start_failed()
   answers it once the exec report is in. */
static void spawn_one(srv_stream *st, Process__StartRequest *copy, char *cwd) {
  srv_server *srv = srv_rpc_server(st);
  srv_spawned sp;
  srv_proc *p;
  char err[1024];
  conch_code code;
  int e;

  if (srv->stopping) {
    free(cwd);
    protobuf_c_message_free_unpacked(&copy->base, NULL);
    srv_rpc_finish(st, CONCH_CODE_UNAVAILABLE, "server is shutting down");
    return;
  }
  code = srv_spawn(copy, &st->user, srv->euid == 0, srv->cfg.signal_pid_only,
                   cwd, srv->cfg.spawn_delay_ms, &sp, err, sizeof(err));
  if (code != CONCH_CODE_OK) {
    free(cwd);
    protobuf_c_message_free_unpacked(&copy->base, NULL);
    srv_rpc_finish(st, code, "%s", err);
    return;
  }
  e = srv_proc_add(srv, copy, cwd, &sp, st, &p);
  if (e != 0) {
    /* Cannot track it: do not leave it running unseen. */
    kill(-sp.pid, SIGKILL);
    kill(sp.pid, SIGKILL); /* not a group leader with --signal-pid-only */
    close(sp.report_fd);
    if (sp.in_fd >= 0) {
      close(sp.in_fd);
    }
    if (sp.err_fd >= 0) {
      close(sp.err_fd);
    }
    close(sp.out_fd);
    free(cwd);
    protobuf_c_message_free_unpacked(&copy->base, NULL);
    if (e == ENOSYS) {
      srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                     "cannot follow the process: pidfd_open is not "
                     "available (Linux 5.3 or later is needed)");
    } else {
      srv_rpc_finish(st,
                     e == ENOMEM || e == EMFILE || e == ENFILE
                         ? CONCH_CODE_RESOURCE_EXHAUSTED
                         : CONCH_CODE_INTERNAL,
                     "cannot follow the process: %s", strerror(e));
    }
    return;
  }
  /* The lifetime counts from here (the queue holds a Start for a few
     turns at most), the wait for the exec included. */
  if (st->timeout_ms > 0) {
    srv_proc_set_deadline(p, st->timeout_ms);
  }
}

static void spawn_turn(srv_timer *t) {
  srv_server *srv = SRV_CONTAINER(t, srv_server, spawn_t);
  int n;

  for (n = 0; n < SPAWN_BATCH && !srv_list_empty(&srv->spawn_q); n++) {
    srv_stream *st = SRV_CONTAINER(srv->spawn_q.next, srv_stream, spawn_link);
    Process__StartRequest *copy = st->spawn_req;
    char *cwd = st->spawn_cwd;

    st->spawn_req = NULL; /* ownership passes on, unqueue frees nothing */
    st->spawn_cwd = NULL;
    srv_list_remove(&st->spawn_link);
    srv->nqueued--;
    srv->queued_bytes -= protobuf_c_message_get_packed_size(&copy->base);
    spawn_one(st, copy, cwd);
  }
  /* The rest in a later turn, after the events that came meanwhile. */
  if (!srv_list_empty(&srv->spawn_q)) {
    srv_timer_arm(&srv->loop, &srv->spawn_t, srv_now_ms() + 1);
  }
}

static void svc_start(srv_stream *st, ProtobufCMessage *m) {
  Process__StartRequest *req = (Process__StartRequest *)m;
  srv_server *srv = srv_rpc_server(st);
  const Process__ProcessConfig *cfg = req->process;
  const char *cwd_in = NULL;
  Process__StartRequest *copy;
  char err[1024];
  char *cwd = NULL;
  conch_code code;

  /* Not root: only our own user can be had (documented in README.md). */
  if (srv->euid != 0 && st->user.uid != srv->euid) {
    srv_rpc_finish(st, CONCH_CODE_PERMISSION_DENIED,
                   "cannot run as user '%s': conch serve is not running as "
                   "root",
                   st->user.name);
    return;
  }
  if (!srv_user_allowed(srv, st->user.name, st->user.uid)) {
    srv_rpc_finish(st, CONCH_CODE_PERMISSION_DENIED,
                   "cannot run as user '%s': conch serve runs processes as "
                   "its own user only (see --allow-user)",
                   st->user.name);
    return;
  }
  spawn_queue_init(srv);
  if (admit(st, req) != 0) {
    return;
  }
  if (cfg != NULL && cfg->_cwd_case == PROCESS__PROCESS_CONFIG___CWD_CWD) {
    cwd_in = cfg->cwd;
  }
  if ((cwd_in == NULL || cwd_in[0] == '\0') && srv->cfg.workdir != NULL) {
    cwd_in = srv->cfg.workdir; /* --workdir */
  }
  code = srv_resolve_cwd(cwd_in, &st->user, &cwd, err, sizeof(err));
  if (code != CONCH_CODE_OK) {
    srv_rpc_finish(st, code, "%s", err);
    return;
  }
  copy = copy_request(req);
  if (copy == NULL) {
    free(cwd);
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  /* Forked by spawn_turn(), after this turn's other requests. */
  st->spawn_req = copy;
  st->spawn_cwd = cwd;
  srv_list_push(&srv->spawn_q, &st->spawn_link);
  srv->nqueued++;
  srv->queued_bytes += protobuf_c_message_get_packed_size(&copy->base);
  if (!srv_timer_armed(&srv->spawn_t)) {
    srv_timer_arm(&srv->loop, &srv->spawn_t, srv_now_ms());
  }
}

void srv_service_started(srv_stream *st, srv_proc *p) {
  send_start_event(st, p->pid);
  srv_proc_subscribe(p, st);
}

void srv_service_start_failed(srv_stream *st, conch_code code,
                              const char *msg) {
  srv_rpc_finish(st, code, "%s", msg);
}

/* ---- Connect ---------------------------------------------------------------
 */

static void svc_connect(srv_stream *st, ProtobufCMessage *m) {
  Process__ConnectRequest *req = (Process__ConnectRequest *)m;
  srv_proc *p = find(st, req->process, 1);

  if (p == NULL) {
    return;
  }
  send_start_event(st, p->pid);
  if (p->ended) {
    /* What is left of its group still gets the deadline (README). */
    if (st->timeout_ms > 0) {
      srv_proc_set_deadline(p, st->timeout_ms);
    }
    if (p->end_msg != NULL) {
      srv_rpc_send_packed(st, p->end_msg, p->end_len);
    }
    srv_rpc_finish(st, CONCH_CODE_OK, NULL);
    return;
  }
  /* The deadline of a Connect is the process's lifetime from now on. */
  if (st->timeout_ms > 0) {
    srv_proc_set_deadline(p, st->timeout_ms);
  }
  srv_proc_subscribe(p, st);
}

/* ---- Update ----------------------------------------------------------------
 */

static void svc_update(srv_stream *st, ProtobufCMessage *m) {
  Process__UpdateRequest *req = (Process__UpdateRequest *)m;
  Process__UpdateResponse resp = PROCESS__UPDATE_RESPONSE__INIT;
  srv_proc *p = find(st, req->process, 0);
  struct winsize ws;

  if (p == NULL) {
    return;
  }
  if (req->_pty_case == PROCESS__UPDATE_REQUEST___PTY_PTY && req->pty != NULL) {
    if (!p->pty || p->out_w.fd < 0) {
      srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                     "error resizing tty: tty not assigned to process");
      return;
    }
    memset(&ws, 0, sizeof(ws));
    if (req->pty->size != NULL) {
      ws.ws_col = (unsigned short)req->pty->size->cols;
      ws.ws_row = (unsigned short)req->pty->size->rows;
    }
    if (ioctl(p->out_w.fd, TIOCSWINSZ, &ws) != 0) {
      srv_rpc_finish(st, CONCH_CODE_INTERNAL, "error resizing tty: %s",
                     strerror(errno));
      return;
    }
  }
  srv_rpc_send(st, &resp.base);
}

/* ---- Input ------------------------------------------------------------------
 */

/* Checks |in| against the process; on success |data|/|len| is the input. */
static int input_check(srv_stream *st, srv_proc *p,
                       const Process__ProcessInput *in,
                       const ProtobufCBinaryData **data) {
  if (in == NULL || (in->input_case != PROCESS__PROCESS_INPUT__INPUT_STDIN &&
                     in->input_case != PROCESS__PROCESS_INPUT__INPUT_PTY)) {
    srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED, "invalid input type <nil>");
    return -1;
  }
  if (in->input_case == PROCESS__PROCESS_INPUT__INPUT_PTY) {
    if (!p->pty) {
      srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                     "error writing to tty: tty not assigned to process — "
                     "input should be written to the stdin, not the tty");
      return -1;
    }
    *data = &in->pty;
  } else {
    if (p->pty) {
      srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                     "error writing to stdin: tty assigned to process — "
                     "input should be written to the pty, not the stdin");
      return -1;
    }
    *data = &in->stdin;
  }
  if (!p->in_open) {
    srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                   "error writing to %s: stdin not enabled or closed",
                   p->pty ? "tty" : "stdin");
    return -1;
  }
  return 0;
}

static int write_input(srv_stream *st, srv_proc *p,
                       const ProtobufCBinaryData *data) {
  if (srv_proc_write_input(p, data->data, data->len) != 0) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED,
                   "error writing to %s: input queue of process %d is full",
                   p->pty ? "tty" : "stdin", (int)p->pid);
    return -1;
  }
  return 0;
}

void srv_service_input_done(srv_stream *st, int err, const char *what) {
  if (err != 0) {
    srv_rpc_finish(st, CONCH_CODE_INTERNAL, "error writing to %s: write: %s",
                   what, strerror(err));
    return;
  }
  if (st->m->shape == SRV_UNARY) {
    Process__SendInputResponse resp = PROCESS__SEND_INPUT_RESPONSE__INIT;

    srv_rpc_send(st, &resp.base);
  } else {
    Process__StreamInputResponse resp = PROCESS__STREAM_INPUT_RESPONSE__INIT;

    srv_rpc_send(st, &resp.base);
    srv_rpc_finish(st, CONCH_CODE_OK, NULL);
  }
}

static void svc_send_input(srv_stream *st, ProtobufCMessage *m) {
  Process__SendInputRequest *req = (Process__SendInputRequest *)m;
  const ProtobufCBinaryData *data;
  srv_proc *p = find(st, req->process, 0);

  if (p == NULL || input_check(st, p, req->input, &data) != 0 ||
      write_input(st, p, data) != 0) {
    return;
  }
  /* Answered once the bytes are in the pipe, as envd's blocking write. */
  srv_proc_wait_input(p, st);
}

static void stream_input_data(srv_stream *st,
                              const Process__StreamInputRequest *req) {
  srv_server *srv = srv_rpc_server(st);
  const ProtobufCBinaryData *data;
  srv_proc *p;

  if (st->input_serial == 0) {
    srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                   "error writing to stdin: no process selected: the first "
                   "message must be a start event");
    return;
  }
  p = srv_proc_by_serial(srv, st->input_serial);
  if (p == NULL || p->ended || p->dead) {
    srv_rpc_finish(st, CONCH_CODE_INTERNAL,
                   "error writing to stdin: stdin not enabled or closed");
    return;
  }
  if (input_check(st, p, req->data != NULL ? req->data->input : NULL, &data) !=
          0 ||
      write_input(st, p, data) != 0) {
    return;
  }
  /* Stop taking more from the client while the child does not read. */
  if (srv_buf_size(&p->in_q) > srv->cfg.stdin_high &&
      !srv_linked(&st->in_link)) {
    srv_rpc_pause_input(st, 1);
    srv_list_push(&p->in_paused, &st->in_link);
  }
}

static void svc_stream_input(srv_stream *st, ProtobufCMessage *m) {
  Process__StreamInputRequest *req = (Process__StreamInputRequest *)m;
  srv_proc *p;

  switch (req->event_case) {
  case PROCESS__STREAM_INPUT_REQUEST__EVENT_START:
    p = find(st, req->start != NULL ? req->start->process : NULL, 0);
    if (p != NULL) {
      st->input_serial = p->serial;
    }
    return;
  case PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA:
    stream_input_data(st, req);
    return;
  case PROCESS__STREAM_INPUT_REQUEST__EVENT_KEEPALIVE:
    return;
  default:
    srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED, "invalid event type <nil>");
  }
}

static void svc_stream_input_end(srv_stream *st) {
  srv_proc *p = NULL;

  srv_list_remove(&st->in_link);
  if (st->input_serial != 0) {
    p = srv_proc_by_serial(srv_rpc_server(st), st->input_serial);
  }
  if (p == NULL || p->ended || p->dead) {
    srv_service_input_done(st, 0, "stdin");
    return;
  }
  srv_proc_wait_input(p, st);
}

/* ---- Signals and stdin ----------------------------------------------------
 */

static void svc_send_signal(srv_stream *st, ProtobufCMessage *m) {
  Process__SendSignalRequest *req = (Process__SendSignalRequest *)m;
  Process__SendSignalResponse resp = PROCESS__SEND_SIGNAL_RESPONSE__INIT;
  srv_proc *p = find(st, req->process, 1);
  int sig;
  int n;

  if (p == NULL) {
    return;
  }
  if (p->ended && req->signal != PROCESS__SIGNAL__SIGNAL_SIGKILL &&
      req->signal != PROCESS__SIGNAL__SIGNAL_SIGTERM) {
    not_found(st, req->process); /* as before: the lookup fails first */
    return;
  }
  if (req->signal == PROCESS__SIGNAL__SIGNAL_SIGKILL) {
    sig = SIGKILL;
  } else if (req->signal == PROCESS__SIGNAL__SIGNAL_SIGTERM) {
    sig = SIGTERM;
  } else if (req->signal == PROCESS__SIGNAL__SIGNAL_UNSPECIFIED) {
    srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED,
                   "invalid signal: SIGNAL_UNSPECIFIED");
    return;
  } else {
    srv_rpc_finish(st, CONCH_CODE_UNIMPLEMENTED, "invalid signal: %d",
                   (int)req->signal);
    return;
  }
  /* The whole group.  Once reaped the pid may belong to someone else:
     only members still found in its session are signalled.  An ended
     process is not_found (as envd) unless some of its group is left. */
  n = srv_proc_kill(p, sig);
  if (n < 0) {
    srv_rpc_finish(st, CONCH_CODE_INTERNAL, "error sending signal: %s",
                   strerror(errno));
    return;
  }
  if (n == 0 && p->ended) {
    not_found(st, req->process);
    return;
  }
  srv_rpc_send(st, &resp.base);
}

static void svc_close_stdin(srv_stream *st, ProtobufCMessage *m) {
  Process__CloseStdinRequest *req = (Process__CloseStdinRequest *)m;
  Process__CloseStdinResponse resp = PROCESS__CLOSE_STDIN_RESPONSE__INIT;
  srv_proc *p = find(st, req->process, 0);

  if (p == NULL) {
    return;
  }
  if (p->pty) {
    srv_rpc_finish(st, CONCH_CODE_UNKNOWN,
                   "error closing stdin: cannot close stdin for PTY process "
                   "— send Ctrl+D (0x04) instead");
    return;
  }
  srv_proc_close_input(p);
  srv_rpc_send(st, &resp.base);
}
