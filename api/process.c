/* Process handles: Start and Connect streams turned into tagged chunks and
   an exec result, blocking and asynchronous, and the close that always
   ends the remote process. */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "process_int.h"

/* Fields added into reserved slots: the structs keep their size (ABI). */
_Static_assert(sizeof(conch_exec_result) ==
                   offsetof(conch_exec_result, out_dropped) +
                       4 * sizeof(void *),
               "conch_exec_result changed size");
_Static_assert(sizeof(conch_proc_opts) ==
                   offsetof(conch_proc_opts, max_output_bytes) +
                       8 * sizeof(void *),
               "conch_proc_opts changed size");
_Static_assert(sizeof(conch_sandbox_opts) ==
                   offsetof(conch_sandbox_opts, autostart) +
                       7 * sizeof(void *),
               "conch_sandbox_opts changed size");
_Static_assert(offsetof(conch_proc_opts, tree) ==
                   offsetof(conch_proc_opts, max_output_bytes) +
                       sizeof(size_t),
               "conch_proc_opts.tree is not in the first reserved slot");
_Static_assert(offsetof(conch_sandbox_opts, tree) ==
                   offsetof(conch_sandbox_opts, max_output_bytes) +
                       sizeof(size_t),
               "conch_sandbox_opts.tree is not in the first reserved slot");

/* Past the lifetime it sent, a process stream waits this much longer for
   the server's own report of the end before giving up locally. */
#define LIFETIME_GRACE_MS 5000

typedef enum proc_kind {
  PK_RUN,
  PK_STREAM,
  PK_START,
  PK_PTY,
  PK_CONNECT
} proc_kind;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Results ------------------------------------------------------------ */

void conch_exec_result_init(conch_exec_result *r) {
  memset(r, 0, sizeof(*r));
  r->exit_code = -1;
}

void conch_exec_result_clear(conch_exec_result *r) {
  const conch_mem *m = conch_mem_default();
  if (r == NULL) {
    return;
  }
  api_free(m, r->status);
  api_free(m, r->error);
  api_free(m, r->out);
  api_free(m, r->err);
  api_free(m, r->text);
  conch_exec_result_init(r);
}

/* The result's view of what was dropped. */
static void set_truncation(conch_exec_result *dst, const conch__output *o) {
  dst->out_dropped = o->out_dropped;
  dst->err_dropped = o->err_dropped;
  dst->truncated = (o->out_dropped > 0 ? CONCH_TRUNCATED_STDOUT : 0u) |
                   (o->err_dropped > 0 ? CONCH_TRUNCATED_STDERR : 0u);
}

/* Copies what is known of the end into |dst| (streamed: no buffers). */
static int copy_end(conch_exec_result *dst, const conch_process *p,
                    int with_output) {
  const conch_mem *m = conch_mem_default();
  conch_exec_result_clear(dst);
  dst->pid = p->pid;
  dst->ended = p->res.ended;
  dst->exit_code = p->res.exit_code;
  dst->exited = p->res.exited;
  dst->streamed = !with_output;
  if (with_output) {
    set_truncation(dst, &p->output);
  }
  if (p->res.status != NULL) {
    dst->status = conch__api_strdup(m, p->res.status);
  }
  if (p->res.error != NULL) {
    dst->error = conch__api_strdup(m, p->res.error);
  }
  if ((p->res.status != NULL && dst->status == NULL) ||
      (p->res.error != NULL && dst->error == NULL)) {
    return CONCH_ERR_NOMEM;
  }
  if (with_output) {
    const conch__obuf *bufs[3] = {&p->output.out, &p->output.err,
                                  &p->output.text};
    uint8_t **ptrs[3] = {&dst->out, &dst->err, &dst->text};
    size_t *lens[3] = {&dst->out_len, &dst->err_len, &dst->text_len};
    int i;
    for (i = 0; i < 3; i++) {
      if (bufs[i]->len == 0) {
        continue;
      }
      *ptrs[i] = api_malloc(m, bufs[i]->len);
      if (*ptrs[i] == NULL) {
        return CONCH_ERR_NOMEM;
      }
      memcpy(*ptrs[i], bufs[i]->p, bufs[i]->len);
      *lens[i] = bufs[i]->len;
    }
  }
  return 0;
}

/* conch_run(): hands the collected output over to |dst| (no copy; a
   run's output may be large), after copy_end() filled in the rest. */
static void take_output(conch_exec_result *dst, conch_process *p) {
  uint8_t **ptrs[3] = {&dst->out, &dst->err, &dst->text};
  size_t *lens[3] = {&dst->out_len, &dst->err_len, &dst->text_len};
  conch__obuf *bufs[3] = {&p->output.out, &p->output.err, &p->output.text};
  int i;
  set_truncation(dst, &p->output);
  for (i = 0; i < 3; i++) {
    const conch_mem *m = conch_mem_default();
    api_free(m, *ptrs[i]);
    *ptrs[i] = bufs[i]->len > 0 ? bufs[i]->p : NULL;
    *lens[i] = bufs[i]->len;
    if (bufs[i]->len == 0) {
      api_free(m, bufs[i]->p);
    }
    bufs[i]->p = NULL;
    bufs[i]->len = bufs[i]->cap = 0;
  }
}

/* ---- Events ------------------------------------------------------------- */

static const Process__ProcessEvent *event_of(const conch_process *p,
                                             const ProtobufCMessage *msg) {
  if (p->is_connect) {
    return ((const Process__ConnectResponse *)msg)->event;
  }
  return ((const Process__StartResponse *)msg)->event;
}

static void set_status(conch_process *p, conch_code code, const char *msg) {
  if (p->st.code != CONCH_CODE_OK) {
    return;
  }
  conch__sb_fail(&p->st, code, CONCH_ERR_PROTO, msg);
}

void conch__proc_record_end(conch_process *p,
                            const Process__ProcessEvent__EndEvent *e) {
  const conch_mem *m = conch_mem_default();
  if (p->ended) {
    return;
  }
  p->ended = 1;
  p->res.ended = 1;
  p->res.exit_code = e->exit_code;
  p->res.exited = e->exited;
  if (e->status != NULL) {
    p->res.status = conch__api_strdup(m, e->status);
  }
  if (e->_error_case == PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR &&
      e->error != NULL) {
    p->res.error = conch__api_strdup(m, e->error);
  }
}

/* The first start a sandbox sees tells how its server signals: groups
   (`conch-signals: group`, conch serve) or, without the header, the pid
   only (envd). */
static void note_signals(conch_process *p) {
  conch_sandbox *sb = p->sb;
  const char *v;
  if (sb->signals_known || p->call == NULL) {
    return;
  }
  v = conch_metadata_get(conch_call_headers(p->call), CONCH__SIGNALS_HEADER,
                         NULL);
  sb->signals_known = 1;
  sb->signals_group = v != NULL && strcmp(v, "group") == 0;
}

/* Handles one event.  Returns 1 when |chunk| holds output for the caller,
   0 when there is nothing to pass on, -1 on a protocol error (|st| set). */
static int proc_event(conch_process *p, const Process__ProcessEvent *ev,
                      conch_chunk *chunk) {
  const Process__ProcessEvent__DataEvent *d;
  if (ev == NULL) {
    return 0;
  }
  if (!p->started) {
    if (ev->event_case != PROCESS__PROCESS_EVENT__EVENT_START ||
        ev->start == NULL) {
      set_status(p, CONCH_CODE_INTERNAL,
                 "the server's first event was not the process start");
      return -1;
    }
    p->started = 1;
    p->pid = ev->start->pid;
    p->res.pid = p->pid;
    note_signals(p);
    return 0;
  }
  switch (ev->event_case) {
  case PROCESS__PROCESS_EVENT__EVENT_DATA:
    d = ev->data;
    if (d == NULL) {
      return 0;
    }
    switch (d->output_case) {
    case PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT:
      chunk->stream = CONCH_CHUNK_STDOUT;
      chunk->data = d->stdout.data;
      chunk->len = d->stdout.len;
      break;
    case PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR:
      chunk->stream = CONCH_CHUNK_STDERR;
      chunk->data = d->stderr.data;
      chunk->len = d->stderr.len;
      break;
    case PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY:
      chunk->stream = CONCH_CHUNK_PTY;
      chunk->data = d->pty.data;
      chunk->len = d->pty.len;
      break;
    default:
      return 0;
    }
    if (chunk->data == NULL) {
      chunk->data = (const uint8_t *)"";
    }
    if (p->collect &&
        conch__output_add(&p->output, chunk->stream == CONCH_CHUNK_STDERR,
                          chunk->data, chunk->len) != 0) {
      set_status(p, CONCH_CODE_RESOURCE_EXHAUSTED,
                 "out of memory collecting output");
      return -1;
    }
    if (chunk->stream == CONCH_CHUNK_STDERR) {
      if (p->on_err != NULL) {
        p->on_err(chunk->data, chunk->len, p->out_ud);
      }
    } else if (p->on_out != NULL) {
      p->on_out(chunk->data, chunk->len, p->out_ud);
    }
    return 1;
  case PROCESS__PROCESS_EVENT__EVENT_END:
    if (ev->end != NULL) {
      conch__proc_record_end(p, ev->end);
    }
    return 0;
  default: /* keepalives, a repeated start */
    return 0;
  }
}

/* The stream is over: settle its status. */
static void stream_over(conch_process *p, const conch_status *call_st) {
  if (p->done) {
    return;
  }
  p->done = 1;
  if (call_st != NULL && call_st->code != CONCH_CODE_OK &&
      p->st.code == CONCH_CODE_OK) {
    conch_status_copy(&p->st, call_st, NULL);
  }
  if (p->st.code == CONCH_CODE_OK && !p->ended) {
    set_status(p, CONCH_CODE_UNKNOWN,
               p->started ? "the process stream ended without an end event"
                          : "the process stream ended before the start");
  }
}

static void tell_end(conch_process *p) {
  if (p->end_told || p->h.on_end == NULL) {
    p->end_told = 1;
    return;
  }
  p->end_told = 1;
  {
    conch_exec_result r;
    conch_exec_result_init(&r);
    copy_end(&r, p, 0);
    if (p->collect) {
      /* Lent, not copied: borrowed until on_end returns. */
      r.streamed = 0;
      set_truncation(&r, &p->output);
      r.out = p->output.out.p;
      r.out_len = p->output.out.len;
      r.err = p->output.err.p;
      r.err_len = p->output.err.len;
      r.text = p->output.text.p;
      r.text_len = p->output.text.len;
    }
    p->in_handler++;
    p->h.on_end(p, &r, &p->st, p->ud);
    r.out = r.err = r.text = NULL;
    conch_exec_result_clear(&r);
    conch__proc_leave_handler(p);
  }
}

/* ---- Push mode (asynchronous handles) ----------------------------------- */

static void push_msg(conch_call *call, const ProtobufCMessage *msg, void *ud) {
  conch_process *p = ud;
  conch_chunk chunk;
  int was_started = p->started, r;

  if (p->detaching) {
    return;
  }
  p->last_rx = now_ms();
  r = proc_event(p, event_of(p, msg), &chunk);
  if (r < 0) {
    conch_call_cancel(call);
    return;
  }
  if (!was_started && p->started) {
    conch_alarm_cancel(p->start_alarm);
    p->start_alarm = NULL;
    if (p->closing) {
      conch__proc_kill_started(p); /* closed before the start: end it now */
      return;
    }
    if (p->h.on_start != NULL && !p->start_told) {
      p->start_told = 1;
      p->in_handler++;
      p->h.on_start(p, p->pid, p->ud);
      conch__proc_leave_handler(p);
      return;
    }
  }
  if (r == 1 && p->h.on_chunk != NULL && !p->closing) {
    p->in_handler++;
    p->h.on_chunk(p, &chunk, p->ud);
    conch__proc_leave_handler(p);
  }
}

static void push_close(conch_call *call, const conch_status *st,
                       const conch_metadata *trailers, void *ud) {
  conch_process *p = ud;
  (void)call;
  (void)trailers;
  p->call_open = 0; /* the runtime's last word on this call */
  conch_alarm_cancel(p->live_alarm);
  p->live_alarm = NULL;
  if (p->detaching) {
    if (p->free_when_closed) {
      conch__proc_free(p);
    }
    return;
  }
  conch_alarm_cancel(p->start_alarm);
  p->start_alarm = NULL;
  stream_over(p, st);
  if (p->closing) {
    if (!p->started) {
      conch__proc_close_unstarted(p);
    }
    return;
  }
  tell_end(p);
}

static const conch_call_handler push_handler = {NULL, push_msg, NULL, NULL,
                                                push_close};

/* The stream heard nothing for the sandbox's silence bound: it ends with
   unavailable (the server is gone, frozen or cut off). */
static void live_fail(conch_process *p) {
  if (p->st.code == CONCH_CODE_OK) {
    conch__sb_silent(&p->st, p->sb->silence_ms);
  }
  if (p->call != NULL) {
    conch_call_cancel(p->call);
  }
}

static void live_check(conch_client *c, void *ud);

/* Since when the stream's silence counts: its last message, but not from
   before its request went out (a call queued behind others, HTTP/1.1 or
   no stream free, has not been sent, so not answered).  0: still queued. */
static int64_t live_since(const conch_process *p) {
  int64_t sent = p->call != NULL ? conch__call_sent_ms(p->call) : 0;
  if (sent == 0) {
    return 0;
  }
  return sent > p->last_rx ? sent : p->last_rx;
}

static void live_arm(conch_process *p, int64_t due) {
  int64_t now = now_ms();
  p->live_due = due;
  if (conch_client_alarm(p->sb->client, due > now ? (long)(due - now) : 0,
                         live_check, p, &p->live_alarm) != 0) {
    p->live_alarm = NULL; /* out of memory: PINGs still watch HTTP/2 */
  }
}

/* Asynchronous handles: the alarm at the end of the silence bound.  An
   alarm that runs late (the loop was not driven) gives the loop one more
   second to read what may be waiting before it judges. */
static void live_check(conch_client *c, void *ud) {
  conch_process *p = ud;
  int64_t now = now_ms(), bound = p->sb->silence_ms, since;
  (void)c;
  p->live_alarm = NULL;
  if (p->done || p->call == NULL || p->detaching || p->closing) {
    return;
  }
  if (conch_call_paused(p->call)) {
    live_arm(p, now + bound); /* the silence is ours: it is not judged */
    return;
  }
  since = live_since(p);
  if (since == 0) {
    live_arm(p, now + bound); /* not sent yet */
  } else if (now - since < bound) {
    live_arm(p, since + bound);
  } else if (now - p->live_due > 1000) {
    live_arm(p, now + 1000);
  } else {
    live_fail(p);
  }
}

int conch_process_pause(conch_process *p) {
  if (p == NULL || !p->async) {
    return CONCH_ERR_INVALID;
  }
  return p->call != NULL ? conch_call_pause(p->call) : 0;
}

int conch_process_resume(conch_process *p) {
  if (p == NULL || !p->async) {
    return CONCH_ERR_INVALID;
  }
  if (p->call == NULL || !conch_call_paused(p->call)) {
    return 0;
  }
  p->last_rx = now_ms(); /* the silence bound counts from here */
  return conch_call_resume(p->call);
}

static void start_timeout(conch_client *c, void *ud) {
  conch_process *p = ud;
  (void)c;
  p->start_alarm = NULL;
  if (!p->started && p->call != NULL) {
    set_status(p, CONCH_CODE_DEADLINE_EXCEEDED,
               "the process did not report its start in time");
    conch_call_cancel(p->call);
  }
}

/* ---- Starting ----------------------------------------------------------- */

/* The Start request from |o|; the pieces live in |s|. */
typedef struct start_parts {
  Process__StartRequest req;
  Process__ProcessConfig cfg;
  Process__PTY pty;
  Process__PTY__Size size;
  Process__ProcessConfig__EnvsEntry *entries;
  Process__ProcessConfig__EnvsEntry **envs;
  conch__tree_argv tree;
} start_parts;

/* Whether |o| starts under the tree leader. */
static int use_tree(const conch_sandbox *sb, const conch_proc_opts *o) {
  int mode = o->tree != CONCH_TREE_DEFAULT ? o->tree : sb->tree;
  if (o->pty_cols != 0 && o->pty_rows != 0) {
    return 0; /* a PTY has a session of its own */
  }
  if (mode == CONCH_TREE_ON) {
    return 1;
  }
  return mode == CONCH_TREE_AUTO &&
         !(sb->signals_known && sb->signals_group);
}

static int build_start(const conch_sandbox *sb, const conch_proc_opts *o,
                       start_parts *s) {
  const conch_mem *m = sb->mem;
  size_t i;
  process__start_request__init(&s->req);
  process__process_config__init(&s->cfg);
  s->entries = NULL;
  s->envs = NULL;
  s->tree.args = NULL;
  s->cfg.cmd = (char *)o->cmd;
  s->cfg.args = (char **)o->args;
  s->cfg.n_args = o->nargs;
  if (use_tree(sb, o)) {
    int mode = o->tree != CONCH_TREE_DEFAULT ? o->tree : sb->tree;
    if (conch__tree_wrap(m, sb->kill_grace_ms, mode == CONCH_TREE_ON, o->cmd,
                         o->args, o->nargs, &s->tree) != 0) {
      return CONCH_ERR_NOMEM;
    }
    s->cfg.cmd = "/bin/sh";
    s->cfg.args = (char **)s->tree.args;
    s->cfg.n_args = s->tree.nargs;
  }
  if (o->nenv > 0) {
    s->entries = api_calloc(m, o->nenv, sizeof(*s->entries));
    s->envs = api_calloc(m, o->nenv, sizeof(*s->envs));
    if (s->entries == NULL || s->envs == NULL) {
      api_free(m, s->entries);
      api_free(m, s->envs);
      api_free(m, s->tree.args);
      return CONCH_ERR_NOMEM;
    }
    for (i = 0; i < o->nenv; i++) {
      process__process_config__envs_entry__init(&s->entries[i]);
      s->entries[i].key = (char *)o->env[i].name;
      s->entries[i].value = (char *)o->env[i].value;
      s->envs[i] = &s->entries[i];
    }
    s->cfg.envs = s->envs;
    s->cfg.n_envs = o->nenv;
  }
  if (o->cwd != NULL) {
    s->cfg._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
    s->cfg.cwd = (char *)o->cwd;
  }
  s->req.process = &s->cfg;
  if (o->tag != NULL) {
    s->req._tag_case = PROCESS__START_REQUEST___TAG_TAG;
    s->req.tag = (char *)o->tag;
  }
  s->req._stdin_case = PROCESS__START_REQUEST___STDIN_STDIN;
  s->req.stdin = o->stdin_enabled != 0;
  if (o->pty_cols != 0 && o->pty_rows != 0) {
    process__pty__init(&s->pty);
    process__pty__size__init(&s->size);
    s->size.cols = o->pty_cols;
    s->size.rows = o->pty_rows;
    s->pty.size = &s->size;
    s->req._pty_case = PROCESS__START_REQUEST___PTY_PTY;
    s->req.pty = &s->pty;
  }
  return 0;
}

static void parts_free(const conch_mem *m, start_parts *s) {
  api_free(m, s->entries);
  api_free(m, s->envs);
  api_free(m, (void *)s->tree.args);
}

static int read_opts(const conch_proc_opts *in, conch_proc_opts *o) {
  conch_proc_opts d = CONCH_PROC_OPTS_INIT;
  size_t n;
  *o = d;
  if (in == NULL) {
    return 0;
  }
  n = in->struct_size < sizeof(*o) ? in->struct_size : sizeof(*o);
  if (n < sizeof(size_t)) {
    return CONCH_ERR_INVALID;
  }
  memcpy(o, in, n);
  o->struct_size = sizeof(*o);
  if (o->timeout_ms < -1 || o->request_timeout_ms < -1 || o->tree < 0 ||
      o->tree > CONCH_TREE_ON ||
      (o->nargs > 0 && o->args == NULL) || (o->nenv > 0 && o->env == NULL)) {
    return CONCH_ERR_INVALID;
  }
  return 0;
}

/* Starts the Start (or Connect) call of a new handle. */
static int proc_begin(conch_sandbox *sb, proc_kind kind,
                      const conch_proc_opts *o, const conch_selector *sel,
                      int async, const conch_process_handler *h, void *ud,
                      conch_process **out) {
  conch_process *p;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  long life, reqto;
  int rv;

  p = api_calloc(sb->mem, 1, sizeof(*p));
  if (p == NULL) {
    return CONCH_ERR_NOMEM;
  }
  p->sb = sb;
  p->mem = sb->mem;
  p->async = async != 0;
  p->collect = kind == PK_RUN;
  conch__output_init(&p->output, conch_mem_default(),
                     o != NULL && o->max_output_bytes != 0 ? o->max_output_bytes
                                                           : sb->max_output);
  p->own = kind != PK_START;
  p->is_connect = kind == PK_CONNECT;
  p->pty = o != NULL && o->pty_cols != 0 && o->pty_rows != 0;
  conch_exec_result_init(&p->res);
  conch_status_init(&p->st);
  if (h != NULL) {
    p->h = *h;
  }
  p->ud = ud;
  if (o != NULL && kind == PK_RUN) {
    p->on_out = o->on_stdout;
    p->on_err = o->on_stderr;
    p->out_ud = o->user_data;
  }
  if (o != NULL && o->tag != NULL) {
    p->tag = conch__api_strdup(sb->mem, o->tag);
    if (p->tag == NULL) {
      api_free(sb->mem, p);
      return CONCH_ERR_NOMEM;
    }
  }
  /* Lifetime, sent as the deadline and enforced by the server. */
  life = o != NULL ? o->timeout_ms : 0;
  if (life == 0) {
    life = kind == PK_START || kind == PK_CONNECT ? -1 : sb->timeout_ms;
  }
  reqto = o != NULL && o->request_timeout_ms != 0 ? o->request_timeout_ms
                                                  : sb->request_timeout_ms;
  md = conch__sb_headers(sb, o != NULL ? o->user : NULL, 1);
  if (md == NULL) {
    conch__proc_free(p);
    return CONCH_ERR_NOMEM;
  }
  co.headers = md;
  co.timeout_ms = life > 0 ? life : 0;
  co.deadline_grace_ms = life > 0 ? LIFETIME_GRACE_MS : 0;
  rv = conch_call_start(sb->client,
                        kind == PK_CONNECT ? &process__process__connect__method
                                           : &process__process__start__method,
                        &co, async ? &push_handler : NULL, p, &p->call);
  p->call_open = rv == 0 && async;
  conch_metadata_free(md);
  if (rv != 0) {
    conch__proc_free(p);
    return rv;
  }
  p->link.next = sb->procs.next;
  p->link.prev = &sb->procs;
  sb->procs.next->prev = &p->link;
  sb->procs.next = &p->link;
  if (kind == PK_CONNECT) {
    Process__ConnectRequest req = PROCESS__CONNECT_REQUEST__INIT;
    Process__ProcessSelector ps;
    conch__sb_selector(sel, &ps);
    req.process = &ps;
    rv = conch_call_send(p->call, &req.base);
  } else {
    start_parts parts;
    rv = build_start(sb, o, &parts);
    if (rv == 0) {
      p->tree = parts.tree.args != NULL;
      rv = conch_call_send(p->call, &parts.req.base);
      parts_free(sb->mem, &parts);
    }
  }
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch__proc_free(p);
    return rv;
  }
  p->last_rx = now_ms();
  if (async && sb->silence_ms > 0) {
    live_arm(p, p->last_rx + sb->silence_ms);
  }
  if (reqto > 0) {
    p->start_by = now_ms() + reqto;
    if (async && conch_client_alarm(sb->client, reqto, start_timeout, p,
                                    &p->start_alarm) != 0) {
      conch__proc_free(p);
      return CONCH_ERR_NOMEM;
    }
  }
  *out = p;
  return 0;
}

/* Pull mode: the next message of the stream, driving the loop while none
   is there, within the start deadline (until the start) and the silence
   bound (measured from when this wait began: a caller that did not read
   for a while is not a silent server; nor from before the request went
   out).  Returns as conch_call_recv(), never
   CONCH_ERR_AGAIN; CONCH_ERR_RPC with |p->st| set when a bound passed. */
static int pull_recv(conch_process *p, ProtobufCMessage **msg) {
  conch_client *c = p->sb->client;
  int64_t since = now_ms(), bound = p->sb->silence_ms;
  for (;;) {
    long wait = -1;
    int64_t now;
    int rv = conch_call_recv(p->call, msg);
    if (rv == 0) {
      p->last_rx = now_ms();
      return 0;
    }
    if (rv != CONCH_ERR_AGAIN) {
      return rv;
    }
    now = now_ms();
    if (!p->started && p->start_by != 0) {
      int64_t left = p->start_by - now;
      if (left <= 0) {
        set_status(p, CONCH_CODE_DEADLINE_EXCEEDED,
                   "the process did not report its start in time");
        conch_call_cancel(p->call);
        return CONCH_ERR_RPC;
      }
      wait = (long)left;
    }
    if (bound > 0) {
      int64_t sent = conch__call_sent_ms(p->call);
      int64_t from = sent > since ? sent : since;
      int64_t left = sent == 0 ? bound : from + bound - now;
      if (left <= 0) {
        live_fail(p);
        return CONCH_ERR_RPC;
      }
      if (wait < 0 || left < wait) {
        wait = (long)left;
      }
    }
    rv = conch_client_run(c, wait);
    if (rv != 0) {
      return rv;
    }
  }
}

/* Pull mode: waits for the start event.  On failure |st| says why. */
static int wait_start(conch_process *p, conch_status *st) {
  conch_client *c = p->sb->client;
  for (;;) {
    ProtobufCMessage *msg;
    int rv = pull_recv(p, &msg);
    if (rv == 0) {
      conch_chunk chunk;
      int r = proc_event(p, event_of(p, msg), &chunk);
      conch_message_free(c, msg);
      if (r < 0) {
        conch_call_cancel(p->call);
        break;
      }
      if (p->started) {
        return 0;
      }
      continue;
    }
    if (rv == CONCH_ERR_EOF || rv == CONCH_ERR_RPC) {
      break;
    }
    return rv;
  }
  stream_over(p, conch_call_status(p->call));
  conch__sb_status(st, &p->st);
  return CONCH_ERR_RPC;
}

/* ---- Blocking API ------------------------------------------------------- */

static int check_sb(conch_sandbox *sb, const conch_proc_opts *o) {
  return sb != NULL && o != NULL && o->cmd != NULL;
}

static int blocking_begin(conch_sandbox *sb, proc_kind kind,
                          const conch_proc_opts *o, const conch_selector *sel,
                          conch_process **out, conch_status *st) {
  conch_process *p;
  int rv = proc_begin(sb, kind, o, sel, 0, NULL, NULL, &p);
  if (rv != 0) {
    return rv;
  }
  rv = wait_start(p, st);
  if (rv != 0) {
    /* Nothing reported a start; make sure nothing runs (a tag still
       reaches it) and release. */
    conch_process_close(p);
    return rv;
  }
  *out = p;
  return 0;
}

int conch_stream(conch_sandbox *sb, const conch_proc_opts *o,
                 conch_process **out, conch_status *st) {
  conch_proc_opts oo;
  int rv;
  if (!check_sb(sb, o) || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!(sb->caps & CONCH_CAP_STREAMING) ||
      (o->struct_size >= offsetof(conch_proc_opts, pty_rows) + 4 &&
       o->pty_cols != 0 && o->pty_rows != 0 && !(sb->caps & CONCH_CAP_PTY))) {
    return CONCH_ERR_CAPABILITY;
  }
  rv = read_opts(o, &oo);
  if (rv != 0) {
    return rv;
  }
  return blocking_begin(sb, oo.pty_cols && oo.pty_rows ? PK_PTY : PK_STREAM,
                        &oo, NULL, out, st);
}

/* PTY defaults: the SDK's interactive login shell and terminal. */
typedef struct pty_defaults {
  conch_proc_opts o;
  const char *args[2];
  conch_env *env;
} pty_defaults;

static int pty_prepare(conch_sandbox *sb, const conch_proc_opts *in,
                       pty_defaults *d) {
  static const conch_env extra[3] = {
      {"TERM", "xterm-256color"}, {"LANG", "C.UTF-8"}, {"LC_ALL", "C.UTF-8"}};
  size_t i;
  int rv = read_opts(in, &d->o);
  if (rv != 0) {
    return rv;
  }
  if (d->o.cmd == NULL) {
    d->o.cmd = "/bin/bash";
    d->args[0] = "-i";
    d->args[1] = "-l";
    d->o.args = d->args;
    d->o.nargs = 2;
  }
  if (d->o.pty_cols == 0 || d->o.pty_rows == 0) {
    d->o.pty_cols = 80;
    d->o.pty_rows = 24;
  }
  d->env = api_calloc(sb->mem, d->o.nenv + 3, sizeof(conch_env));
  if (d->env == NULL) {
    return CONCH_ERR_NOMEM;
  }
  /* The terminal settings first: the caller's own env wins. */
  for (i = 0; i < 3; i++) {
    d->env[i] = extra[i];
  }
  for (i = 0; i < d->o.nenv; i++) {
    d->env[3 + i] = d->o.env[i];
  }
  d->o.env = d->env;
  d->o.nenv += 3;
  return 0;
}

int conch_pty_open(conch_sandbox *sb, const conch_proc_opts *o,
                   conch_process **out, conch_status *st) {
  pty_defaults d;
  int rv;
  if (sb == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if ((sb->caps & (CONCH_CAP_STREAMING | CONCH_CAP_PTY)) !=
      (CONCH_CAP_STREAMING | CONCH_CAP_PTY)) {
    return CONCH_ERR_CAPABILITY;
  }
  rv = pty_prepare(sb, o, &d);
  if (rv != 0) {
    return rv;
  }
  rv = blocking_begin(sb, PK_PTY, &d.o, NULL, out, st);
  api_free(sb->mem, d.env);
  return rv;
}

int conch_start(conch_sandbox *sb, const conch_proc_opts *o, uint32_t *pid,
                conch_status *st) {
  conch_proc_opts oo;
  conch_process *p;
  int rv;
  if (!check_sb(sb, o) || pid == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = read_opts(o, &oo);
  if (rv != 0) {
    return rv;
  }
  rv = blocking_begin(sb, PK_START, &oo, NULL, &p, st);
  if (rv != 0) {
    return rv;
  }
  *pid = p->pid;
  /* Not owned: closing only lets go of the stream; the process runs on. */
  conch_process_close(p);
  return 0;
}

int conch_connect(conch_sandbox *sb, const conch_selector *sel, unsigned flags,
                  conch_process **out, conch_status *st) {
  conch_process *p;
  int rv;
  if (sb == NULL || sel == NULL || out == NULL ||
      (sel->tag == NULL && sel->pid == 0)) {
    return CONCH_ERR_INVALID;
  }
  if (!(sb->caps & CONCH_CAP_STREAMING)) {
    return CONCH_ERR_CAPABILITY;
  }
  rv = proc_begin(sb, PK_CONNECT, NULL, sel, 0, NULL, NULL, &p);
  if (rv != 0) {
    return rv;
  }
  p->own = !(flags & CONCH_CONNECT_DETACHED);
  if (sel->tag != NULL) {
    p->tag = conch__api_strdup(sb->mem, sel->tag);
  }
  rv = wait_start(p, st);
  if (rv != 0) {
    p->own = 0; /* not ours to end: it was never reached */
    conch_process_close(p);
    return rv;
  }
  *out = p;
  return 0;
}

uint32_t conch_process_pid(const conch_process *p) {
  return p != NULL ? p->pid : 0;
}

const conch_status *conch_process_status(const conch_process *p) {
  return p != NULL && p->done ? &p->st : NULL;
}

static int end_code(const conch_process *p) {
  return p->ended && p->st.code == CONCH_CODE_OK ? CONCH_ERR_EOF
                                                 : CONCH_ERR_RPC;
}

int conch_process_next(conch_process *p, conch_chunk *chunk) {
  conch_client *c;
  if (p == NULL || chunk == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (p->async || p->closing) {
    return CONCH_ERR_STATE;
  }
  c = p->sb->client;
  if (p->cur != NULL) {
    conch_message_free(c, p->cur);
    p->cur = NULL;
  }
  for (;;) {
    ProtobufCMessage *msg;
    int rv, r;
    if (p->done) {
      return end_code(p);
    }
    rv = pull_recv(p, &msg);
    if (rv == CONCH_ERR_EOF || rv == CONCH_ERR_RPC) {
      stream_over(p, conch_call_status(p->call));
      continue;
    }
    if (rv != 0) {
      return rv;
    }
    r = proc_event(p, event_of(p, msg), chunk);
    if (r == 1) {
      p->cur = msg; /* the chunk points into it */
      return 0;
    }
    conch_message_free(c, msg);
    if (r < 0) {
      conch_call_cancel(p->call);
      stream_over(p, NULL);
    }
  }
}

int conch_process_wait(conch_process *p, conch_exec_result *res,
                       conch_status *st) {
  int rv;
  if (p == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (p->async) {
    while (!p->done) {
      rv = conch_client_run(p->sb->client, -1);
      if (rv != 0) {
        return rv;
      }
    }
  } else {
    conch_chunk chunk;
    do {
      rv = conch_process_next(p, &chunk);
    } while (rv == 0);
    if (rv != CONCH_ERR_EOF && rv != CONCH_ERR_RPC) {
      return rv;
    }
  }
  if (res != NULL && copy_end(res, p, p->collect) != 0) {
    return CONCH_ERR_NOMEM;
  }
  if (p->ended && p->st.code == CONCH_CODE_OK) {
    return 0;
  }
  conch__sb_status(st, &p->st);
  return CONCH_ERR_RPC;
}

int conch_run(conch_sandbox *sb, const conch_proc_opts *o,
              conch_exec_result *res, conch_status *st) {
  conch_proc_opts oo;
  conch_process *p;
  conch_chunk chunk;
  int rv, crv;
  if (!check_sb(sb, o) || res == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = read_opts(o, &oo);
  if (rv != 0) {
    return rv;
  }
  rv = blocking_begin(sb, PK_RUN, &oo, NULL, &p, st);
  if (rv != 0) {
    return rv;
  }
  do {
    rv = conch_process_next(p, &chunk);
  } while (rv == 0);
  if (rv == CONCH_ERR_EOF || rv == CONCH_ERR_RPC) {
    int cr = copy_end(res, p, 0);
    take_output(res, p);
    res->streamed = 0;
    if (cr != 0) {
      rv = cr;
    } else if (rv == CONCH_ERR_EOF) {
      rv = 0;
    } else {
      conch__sb_status(st, &p->st);
    }
  }
  /* Ends the process too if the stream broke before its end. */
  crv = conch_process_close(p);
  (void)crv;
  return rv;
}

/* ---- Per-handle calls --------------------------------------------------- */

static conch_selector self_sel(const conch_process *p) {
  conch_selector s = {p->pid, NULL};
  return s;
}

int conch_process_signal(conch_process *p, int signal, conch_status *st) {
  conch_selector s;
  if (p == NULL || !p->started) {
    return CONCH_ERR_INVALID;
  }
  s = self_sel(p);
  return conch_kill(p->sb, &s, signal, st);
}

int conch_process_send_stdin(conch_process *p, const void *data, size_t len,
                             conch_status *st) {
  conch_selector s;
  if (p == NULL || !p->started) {
    return CONCH_ERR_INVALID;
  }
  s = self_sel(p);
  return p->pty ? conch_pty_send(p->sb, &s, data, len, st)
                : conch_send_stdin(p->sb, &s, data, len, st);
}

int conch_process_close_stdin(conch_process *p, conch_status *st) {
  conch_selector s;
  if (p == NULL || !p->started) {
    return CONCH_ERR_INVALID;
  }
  s = self_sel(p);
  return conch_close_stdin(p->sb, &s, st);
}

int conch_process_resize(conch_process *p, uint32_t cols, uint32_t rows,
                         conch_status *st) {
  conch_selector s;
  if (p == NULL || !p->started) {
    return CONCH_ERR_INVALID;
  }
  s = self_sel(p);
  return conch_pty_resize(p->sb, &s, cols, rows, st);
}

/* ---- Asynchronous starts ------------------------------------------------ */

int conch_run_async(conch_sandbox *sb, const conch_proc_opts *o,
                    const conch_process_handler *h, void *user_data,
                    conch_process **out) {
  conch_proc_opts oo;
  int rv;
  if (!check_sb(sb, o) || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = read_opts(o, &oo);
  if (rv != 0) {
    return rv;
  }
  return proc_begin(sb, PK_RUN, &oo, NULL, 1, h, user_data, out);
}

int conch_stream_async(conch_sandbox *sb, const conch_proc_opts *o,
                       const conch_process_handler *h, void *user_data,
                       conch_process **out) {
  conch_proc_opts oo;
  int rv;
  if (!check_sb(sb, o) || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!(sb->caps & CONCH_CAP_STREAMING)) {
    return CONCH_ERR_CAPABILITY;
  }
  rv = read_opts(o, &oo);
  if (rv != 0) {
    return rv;
  }
  return proc_begin(sb, oo.pty_cols && oo.pty_rows ? PK_PTY : PK_STREAM, &oo,
                    NULL, 1, h, user_data, out);
}

int conch_pty_open_async(conch_sandbox *sb, const conch_proc_opts *o,
                         const conch_process_handler *h, void *user_data,
                         conch_process **out) {
  pty_defaults d;
  int rv;
  if (sb == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if ((sb->caps & (CONCH_CAP_STREAMING | CONCH_CAP_PTY)) !=
      (CONCH_CAP_STREAMING | CONCH_CAP_PTY)) {
    return CONCH_ERR_CAPABILITY;
  }
  rv = pty_prepare(sb, o, &d);
  if (rv != 0) {
    return rv;
  }
  rv = proc_begin(sb, PK_PTY, &d.o, NULL, 1, h, user_data, out);
  api_free(sb->mem, d.env);
  return rv;
}

int conch_connect_async(conch_sandbox *sb, const conch_selector *sel,
                        unsigned flags, const conch_process_handler *h,
                        void *user_data, conch_process **out) {
  int rv;
  if (sb == NULL || sel == NULL || out == NULL ||
      (sel->tag == NULL && sel->pid == 0)) {
    return CONCH_ERR_INVALID;
  }
  if (!(sb->caps & CONCH_CAP_STREAMING)) {
    return CONCH_ERR_CAPABILITY;
  }
  rv = proc_begin(sb, PK_CONNECT, NULL, sel, 1, h, user_data, out);
  if (rv == 0) {
    (*out)->own = !(flags & CONCH_CONNECT_DETACHED);
    if (sel->tag != NULL) {
      (*out)->tag = conch__api_strdup(sb->mem, sel->tag);
    }
  }
  return rv;
}

/* conch_start() on the loop: the handle lives until the start is known. */
typedef struct start_ctx {
  void (*done)(uint32_t, const conch_status *, void *);
  void *ud;
  const conch_mem *mem;
  int told;
} start_ctx;

static void start_ctx_free(int rv, void *ud) {
  start_ctx *s = ud;
  (void)rv;
  api_free(s->mem, s);
}

static void started_bg(conch_process *p, uint32_t pid, void *ud) {
  start_ctx *s = ud;
  conch_status ok;
  conch_status_init(&ok);
  s->told = 1;
  s->done(pid, &ok, s->ud);
  conch_process_close_async(p, start_ctx_free, s); /* not owned: detaches */
}

static void start_failed_bg(conch_process *p, const conch_exec_result *r,
                            const conch_status *st, void *ud) {
  start_ctx *s = ud;
  (void)r;
  if (!s->told) {
    s->told = 1;
    s->done(0, st, s->ud);
    conch_process_close_async(p, start_ctx_free, s);
  }
}

int conch_start_async(conch_sandbox *sb, const conch_proc_opts *o,
                      void (*done)(uint32_t pid, const conch_status *st,
                                   void *user_data),
                      void *user_data) {
  static const conch_process_handler h = {started_bg, NULL, start_failed_bg};
  conch_proc_opts oo;
  conch_process *p;
  start_ctx *s;
  int rv;
  if (!check_sb(sb, o) || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = read_opts(o, &oo);
  if (rv != 0) {
    return rv;
  }
  s = api_calloc(sb->mem, 1, sizeof(*s));
  if (s == NULL) {
    return CONCH_ERR_NOMEM;
  }
  s->done = done;
  s->ud = user_data;
  s->mem = sb->mem;
  rv = proc_begin(sb, PK_START, &oo, NULL, 1, &h, s, &p);
  if (rv != 0) {
    api_free(sb->mem, s);
  }
  return rv;
}
