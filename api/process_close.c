/* The end of a process handle: its release (now, or after the handler
   that runs), and the close that always ends the remote process (SIGTERM,
   a watch for the end, SIGKILL after the grace period), one handle or
   every handle of a sandbox. */
#include <stddef.h>

#include "process_int.h"

/* The |done| of conch_process_close_async(), which never runs inside that
   call: an alarm made at the call (so that nothing can fail later) fires on
   the next turn, and whichever comes second, the alarm or the end of the
   close, runs |done|. */
typedef struct close_note {
  const conch_mem *mem;
  void (*done)(int rv, void *user_data);
  void *ud;
  int rv;
  unsigned closed : 1; /* the close finished: |rv| is final */
  unsigned fired : 1;  /* the alarm ran */
} close_note;

/* ---- Lifecycle ---------------------------------------------------------- */

static void plink_remove(conch_plink *l) {
  if (l->next != NULL) {
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
  }
}

static void drop_call(conch_process *p) {
  conch_alarm_cancel(p->live_alarm);
  p->live_alarm = NULL;
  if (p->call != NULL) {
    conch_call *call = p->call;
    p->detaching = 1; /* on_close may run inside conch_call_free */
    p->call = NULL;
    conch_call_free(call);
  }
}

void conch__proc_free(conch_process *p) {
  drop_call(p);
  if (p->call_open) {
    /* Freed from inside one of the call's handlers: the runtime still owes
       it its on_close, which finishes this (push_close). */
    p->free_when_closed = 1;
    return;
  }
  conch_alarm_cancel(p->start_alarm);
  p->start_alarm = NULL;
  conch_alarm_cancel(p->live_alarm);
  p->live_alarm = NULL;
  if (p->cur != NULL) {
    conch_message_free(p->sb->client, p->cur);
    p->cur = NULL;
  }
  plink_remove(&p->link);
  conch__output_clear(&p->output);
  api_free(p->mem, p->tag);
  conch_exec_result_clear(&p->res);
  conch_status_clear(&p->st);
  api_free(p->mem, p);
}

/* Ends a close: frees |p| (now or after the running handler) and reports. */
static void note_deliver(close_note *n) {
  void (*done)(int, void *) = n->done;
  void *ud = n->ud;
  int rv = n->rv;
  api_free(n->mem, n);
  done(rv, ud);
}

static void note_fired(conch_client *c, void *ud) {
  close_note *n = ud;
  (void)c;
  n->fired = 1;
  if (n->closed) {
    note_deliver(n);
  }
}

/* |p| is released; its close note learns |rv|. */
static void release_closed(conch_process *p, int rv) {
  close_note *n = p->note;
  p->note = NULL;
  conch__proc_free(p);
  if (n != NULL) {
    n->rv = rv;
    n->closed = 1;
    if (n->fired) {
      note_deliver(n);
    }
  }
}

static void close_finish(conch_process *p, int rv) {
  p->close_rv = rv;
  if (p->in_handler > 0) {
    p->release_pending = 1;
    return;
  }
  release_closed(p, rv);
}

void conch__proc_leave_handler(conch_process *p) {
  p->in_handler--;
  if (p->in_handler == 0 && p->release_pending) {
    release_closed(p, p->close_rv);
  }
}

/* ---- Closing ------------------------------------------------------------ */

static void maybe_done(conch_process *p) {
  if (p->pending == 0) {
    close_finish(p, p->close_rv);
  }
}

static void kill_after_grace(conch_process *p);

/* The watch ended on the client's clock, the grace and the silence bound
   past its deadline: a server that answered nothing of the close in that
   time (neither the SIGTERM nor the watch) is frozen or gone, and a SIGKILL
   would only wait out the same bound again (a handle's close, and
   conch_sandbox_free, stay within one bound).  A server that answered but
   let the deadline pass gets the SIGKILL. */
static void watch_timed_out(conch_process *p) {
  if (p->heard) {
    kill_after_grace(p);
  } else {
    p->close_rv = CONCH_ERR_RPC;
  }
}

/* An end of a call of the close: one the server gave counts as heard. */
static void heard_from(conch_process *p, const conch_status *st) {
  if (st->origin != CONCH_ORIGIN_LOCAL) {
    p->heard = 1;
  }
}

/* A signal's call ended. */
static void sig_end(conch_process *p, const conch_status *st) {
  p->pending--;
  /* not_found: already gone (and past retention). */
  if (st->code != CONCH_CODE_OK && st->code != CONCH_CODE_NOT_FOUND &&
      !p->ended) {
    p->close_rv = CONCH_ERR_RPC;
  }
  maybe_done(p);
}

static void sig_done(const conch_status *st, const ProtobufCMessage *resp,
                     void *ud) {
  conch_process *p = ud;
  (void)resp;
  heard_from(p, st);
  sig_end(p, st);
}

/* The SIGTERM's end: it may decide a watch that timed out meanwhile. */
static void term_done(const conch_status *st, const ProtobufCMessage *resp,
                      void *ud) {
  conch_process *p = ud;
  (void)resp;
  p->term_pending = 0;
  heard_from(p, st);
  if (p->await_term) {
    p->await_term = 0;
    watch_timed_out(p); /* first: its SIGKILL keeps |p| pending */
  }
  sig_end(p, st);
}

static void watch_headers(conch_call *call, const conch_metadata *headers,
                          void *ud) {
  conch_process *p = ud;
  (void)call;
  (void)headers;
  p->heard = 1;
}

static void watch_msg(conch_call *call, const ProtobufCMessage *msg, void *ud) {
  conch_process *p = ud;
  const Process__ProcessEvent *ev =
      ((const Process__ConnectResponse *)msg)->event;
  (void)call;
  p->heard = 1;
  if (ev != NULL && ev->event_case == PROCESS__PROCESS_EVENT__EVENT_END &&
      ev->end != NULL) {
    conch__proc_record_end(p, ev->end);
  }
}

static void watch_close(conch_call *call, const conch_status *st,
                        const conch_metadata *trailers, void *ud) {
  conch_process *p = ud;
  (void)trailers;
  conch_call_free(call);
  p->pending--;
  heard_from(p, st);
  if (p->ended || st->code == CONCH_CODE_NOT_FOUND) {
    p->ended = 1;
  } else if (st->code == CONCH_CODE_DEADLINE_EXCEEDED && !p->escalated) {
    /* The grace period passed without a reported end: kill outright, if
       the server is there to take it (watch_timed_out). */
    if (!p->heard && p->term_pending) {
      p->await_term = 1; /* the SIGTERM's answer decides (term_done) */
    } else {
      watch_timed_out(p);
    }
  } else {
    p->close_rv = CONCH_ERR_RPC;
  }
  maybe_done(p);
}

/* Time allowed to a call of a close: |dflt| (0: the sandbox's request
   timeout), but no more than the silence bound when liveness is on. */
static long close_bound(const conch_sandbox *sb, long dflt) {
  long t = dflt > 0 ? dflt : sb->request_timeout_ms;
  if (sb->silence_ms > 0 && (t <= 0 || t > sb->silence_ms)) {
    t = sb->silence_ms;
  }
  return t > 0 ? t : 0;
}

static int send_signal_async(conch_process *p, int sig) {
  Process__SendSignalRequest req = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector ps;
  conch_selector sel = {p->pid, p->started ? NULL : p->tag};
  int rv;
  conch__sb_selector(&sel, &ps);
  req.process = &ps;
  req.signal = (Process__Signal)sig;
  /* A server that does not answer a signal within the silence bound is
     not going to: closing stays bounded when it froze or went away. */
  rv = conch__sb_unary_async_to(p->sb, &process__process__send_signal__method,
                                &req.base, close_bound(p->sb, 0),
                                sig == 15 ? term_done : sig_done, p);
  if (rv == 0) {
    p->pending++;
    p->term_pending |= sig == 15;
  } else {
    p->close_rv = CONCH_ERR_RPC;
  }
  return rv;
}

/* A Connect that watches for the end of the process: its deadline is
   |timeout_ms| (envd kills the process at it), and the client waits up to
   |grace_ms| past it for the server's report.  Returns 0 (watch_close
   follows) or -1. */
static int start_watch(conch_process *p, long timeout_ms, long grace_ms) {
  static const conch_call_handler wh = {watch_headers, watch_msg, NULL, NULL,
                                        watch_close};
  conch_sandbox *sb = p->sb;
  Process__ConnectRequest req = PROCESS__CONNECT_REQUEST__INIT;
  Process__ProcessSelector ps;
  conch_selector sel = {p->pid, NULL};
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md = conch__sb_headers(sb, NULL, 0);
  conch_call *watch;

  if (md == NULL) {
    return -1;
  }
  co.headers = md;
  co.timeout_ms = timeout_ms;
  co.deadline_grace_ms = grace_ms;
  if (conch_call_start(sb->client, &process__process__connect__method, &co, &wh,
                       p, &watch) != 0) {
    conch_metadata_free(md);
    return -1;
  }
  conch_metadata_free(md);
  conch__sb_selector(&sel, &ps);
  req.process = &ps;
  p->pending++;
  conch_call_send(watch, &req.base);
  return 0;
}

/* The grace period passed: SIGKILL, and the end awaited once more, so that
   the close returns once the process is gone, not once the signal was
   sent. */
static void kill_after_grace(conch_process *p) {
  p->escalated = 1;
  send_signal_async(p, 9);
  if (p->started && start_watch(p, close_bound(p->sb, 0), 0) != 0) {
    p->close_rv = CONCH_ERR_RPC;
  }
}

/* How much later than the grace period the server's SIGKILL comes for a
   process under the tree leader: the leader KILLs the whole group at the
   grace itself (timeout -k), and a SIGKILL of the leader's pid at the
   same moment could win that race and end the leader first, leaving the
   group to its watcher alone. */
#define TREE_KILL_MARGIN_MS 500

/* SIGTERM now; a Connect whose deadline is the grace period watches for
   the end.  envd kills a process at the deadline of a Connect, so the
   SIGKILL happens even if this client goes away meanwhile. */
void conch__proc_kill_started(conch_process *p) {
  conch_sandbox *sb = p->sb;
  long wait = sb->request_timeout_ms > 0 ? sb->request_timeout_ms : 60000;
  long grace = sb->kill_grace_ms + (p->tree ? TREE_KILL_MARGIN_MS : 0);

  drop_call(p); /* the process runs on without this stream */
  send_signal_async(p, 15);
  if (start_watch(p, grace, close_bound(sb, wait)) != 0) {
    kill_after_grace(p);
    maybe_done(p);
  }
}

int conch_process_close_async(conch_process *p,
                              void (*done)(int rv, void *user_data),
                              void *user_data) {
  close_note *n = NULL;

  if (p == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (p->closing) {
    return CONCH_ERR_STATE;
  }
  if (done != NULL) {
    n = api_calloc(p->mem, 1, sizeof(*n));
    if (n == NULL) {
      return CONCH_ERR_NOMEM;
    }
    n->mem = p->mem;
    n->done = done;
    n->ud = user_data;
    if (conch_client_alarm(p->sb->client, 0, note_fired, n, NULL) != 0) {
      api_free(p->mem, n);
      return CONCH_ERR_NOMEM;
    }
  }
  p->closing = 1;
  p->note = n;
  if (p->cur != NULL) {
    conch_message_free(p->sb->client, p->cur);
    p->cur = NULL;
  }
  if (p->ended || !p->own) {
    close_finish(p, 0);
    return 0;
  }
  if (p->started) {
    conch__proc_kill_started(p);
    return 0;
  }
  /* Not started. */
  if (p->async && p->call != NULL && !conch_call_done(p->call)) {
    return 0; /* push_msg kills it when the start arrives; push_close ends */
  }
  conch__proc_close_unstarted(p);
  return 0;
}

/* The stream is over and never reported a start.  When the server said why
   (a refused cwd, an unknown user, not_found), nothing runs.  Otherwise a
   process may have started unseen: a tag still reaches it. */
void conch__proc_close_unstarted(conch_process *p) {
  drop_call(p);
  if (p->st.origin == CONCH_ORIGIN_SERVER) {
    close_finish(p, 0);
    return;
  }
  if (p->tag != NULL && !p->is_connect) {
    send_signal_async(p, 9); /* by tag: the pid was never learned */
    maybe_done(p);
    return;
  }
  close_finish(p, CONCH_ERR_RPC);
}

typedef struct close_wait {
  int done;
  int rv;
} close_wait;

static void close_waited(int rv, void *ud) {
  close_wait *w = ud;
  w->done = 1;
  w->rv = rv;
}

int conch_process_close(conch_process *p) {
  conch_sandbox *sb;
  close_wait w = {0, 0};
  int rv;
  if (p == NULL) {
    return 0;
  }
  sb = p->sb;
  conch_process_close_async(p, close_waited, &w);
  rv = conch__sb_drive(sb, &w.done);
  return rv != 0 ? rv : w.rv;
}

typedef struct close_all_ctx {
  int pending;
  int zero;
} close_all_ctx;

static void one_closed(int rv, void *ud) {
  close_all_ctx *c = ud;
  (void)rv;
  c->pending--;
  c->zero = c->pending == 0;
}

void conch__proc_close_all(conch_sandbox *sb) {
  close_all_ctx ctx = {0, 0};
  conch_plink *l, *next;
  for (l = sb->procs.next; l != &sb->procs; l = next) {
    conch_process *p =
        (conch_process *)(void *)((char *)l - offsetof(conch_process, link));
    next = l->next;
    if (!p->closing) {
      ctx.pending++;
      conch_process_close_async(p, one_closed, &ctx);
    }
  }
  ctx.zero = ctx.pending == 0;
  /* Every handle ends at once: SIGTERMs together, one grace period. */
  while (!ctx.zero || sb->procs.next != &sb->procs) {
    if (conch_client_run(sb->client, -1) != 0) {
      break;
    }
  }
  /* What could not be ended cleanly is released anyway; a handle whose
     call still owes an on_close goes when the client is freed. */
  while (sb->procs.next != &sb->procs) {
    conch_plink *h = sb->procs.next;
    conch_process *p =
        (conch_process *)(void *)((char *)h - offsetof(conch_process, link));
    plink_remove(&p->link);
    release_closed(p, CONCH_ERR_RPC);
  }
}
