/* conch._conch: the engine of the Python package, libconch through the
   CPython API.

   One type wraps a conch_sandbox (Sandbox), one an operation on it (Op: a
   process handle of run, stream, pty, start or connect; or a unary call).
   Every operation runs on libconch's asynchronous forms; libconch's
   callbacks are plain C and only record what happened (a chunk queued, the
   start, the end, the close) and put the Op on the sandbox's ready list.
   Python is reached only after libconch returned, in one pass over that
   list (dispatch), which resolves asyncio futures and drops references:
   no Python code ever runs inside libconch, and no libconch call is made
   from one of its own callbacks.

   Two ways to drive a sandbox:
    - asyncio: the client's io hooks turn into loop.add_reader/add_writer
      and loop.call_later on the running loop (uvloop too); each readiness
      or timer event calls conch_client_on_io/on_timer, then dispatch.  No
      thread, no polling, and the GIL is kept (nothing blocks).
    - blocking: the calling thread drives the client with
      conch_client_run() until what it waits for happened, the GIL released
      for every turn and signals checked between turns (Ctrl-C ends the
      wait; the caller's teardown then closes the process).  Threads share
      a sandbox through a fair lock; one waiting for it wakes the driver
      (conch_client_wakeup) so that it hands over after its turn.

   Teardown is libconch's: conch_process_close_async() (SIGTERM, the grace
   period, SIGKILL, bounded by the liveness bound), the path of
   conch_process_close(). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <conch/conch.h>
#include <conch/files.h>
#include <conch/local.h>
#include <conch/process.h>

/* ---- Module state: the Python classes of conch/_types.py, _errors.py ----- */

static PyObject *ExecResult_cls;
static PyObject *OutputChunk_cls;
static PyObject *ProcessInfo_cls;
static PyObject *Error_cls;
static PyObject *CapabilityNotSupported_cls;
static PyObject *error_by_code[17];
static PyObject *END; /* what Op.pop() returns at the end of the output */

static PyObject *s_stdout, *s_stderr, *s_pty, *s_done, *s_set_result,
    *s_set_exception, *s_create_future, *s_add_reader, *s_add_writer,
    *s_remove_reader, *s_remove_writer, *s_call_later, *s_call_soon, *s_cancel;

/* ---- Errors -------------------------------------------------------------- */

/* The exception for |st|, carrying |result| (may be NULL). */
static PyObject *error_from_status(const conch_status *st, PyObject *result) {
  PyObject *cls, *details, *exc;
  size_t i;
  cls = st->code > 0 && st->code <= 16 && error_by_code[st->code] != NULL
            ? error_by_code[st->code]
            : Error_cls;
  details = PyList_New((Py_ssize_t)st->ndetails);
  if (details == NULL) {
    return NULL;
  }
  for (i = 0; i < st->ndetails; i++) {
    PyObject *d = Py_BuildValue("(sy#)", st->details[i].type_url,
                                (const char *)st->details[i].value,
                                (Py_ssize_t)st->details[i].len);
    if (d == NULL) {
      Py_DECREF(details);
      return NULL;
    }
    PyList_SET_ITEM(details, (Py_ssize_t)i, d);
  }
  exc =
      PyObject_CallFunction(cls, "sOOi", conch_status_message(st), details,
                            result != NULL ? result : Py_None, st->http_status);
  Py_DECREF(details);
  return exc;
}

/* The exception for a failed libconch call that is not an RPC failure. */
static PyObject *error_from_rv(int rv, const char *what) {
  conch_status st;
  PyObject *exc;
  if (rv == CONCH_ERR_NOMEM) {
    return PyObject_CallFunction(PyExc_MemoryError, "s", what);
  }
  if (rv == CONCH_ERR_INVALID) {
    return PyObject_CallFunction(PyExc_ValueError, "ss", what,
                                 conch_strerror(rv));
  }
  if (rv == CONCH_ERR_CAPABILITY) {
    return PyObject_CallFunction(
        CapabilityNotSupported_cls, "sOOi",
        "the sandbox does not support it (conch_sandbox_opts.capabilities)",
        Py_None, Py_None, 0);
  }
  conch_status_init(&st);
  st.code =
      rv == CONCH_ERR_CONNECT ? CONCH_CODE_UNAVAILABLE : CONCH_CODE_UNKNOWN;
  st.message = (char *)conch_strerror(rv);
  exc = error_from_status(&st, NULL);
  return exc;
}

static void raise_exc(PyObject *exc) {
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
}

/* ---- A fair lock for threads sharing a blocking sandbox ------------------ */

typedef struct ticket_lock {
  pthread_mutex_t m;
  pthread_cond_t c;
  unsigned long next, serving;
} ticket_lock;

static void tl_init(ticket_lock *l) {
  pthread_mutex_init(&l->m, NULL);
  pthread_cond_init(&l->c, NULL);
  l->next = l->serving = 0;
}

static void tl_destroy(ticket_lock *l) {
  pthread_mutex_destroy(&l->m);
  pthread_cond_destroy(&l->c);
}

static void tl_lock(ticket_lock *l) {
  unsigned long t;
  pthread_mutex_lock(&l->m);
  t = l->next++;
  while (t != l->serving) {
    pthread_cond_wait(&l->c, &l->m);
  }
  pthread_mutex_unlock(&l->m);
}

/* Takes the lock if nobody holds or waits for it.  Returns 1 when taken. */
static int tl_trylock(ticket_lock *l) {
  int ok;
  pthread_mutex_lock(&l->m);
  ok = l->next == l->serving;
  if (ok) {
    l->next++;
  }
  pthread_mutex_unlock(&l->m);
  return ok;
}

static void tl_unlock(ticket_lock *l) {
  pthread_mutex_lock(&l->m);
  l->serving++;
  pthread_cond_broadcast(&l->c);
  pthread_mutex_unlock(&l->m);
}

/* Others are waiting for the lock. */
static int tl_contended(ticket_lock *l) {
  int w;
  pthread_mutex_lock(&l->m);
  w = l->next - l->serving > 1;
  pthread_mutex_unlock(&l->m);
  return w;
}

/* ---- Objects ------------------------------------------------------------- */

typedef struct Op Op;

typedef struct watch_ent {
  int fd;
  unsigned events;
} watch_ent;

typedef struct SandboxObject {
  PyObject_HEAD conch_sandbox *sb;
  conch_client *c;
  int async;
  int closed;
  PyObject *loop;
  PyObject *on_read, *on_write, *on_timer; /* bound methods, for the loop */
  PyObject *timer;                         /* the loop's TimerHandle */
  watch_ent *watches;
  size_t nwatch, capwatch;
  Op *ready; /* ops whose state changed, for dispatch */
  Op *open;  /* ops that hold a libconch handle (doubly linked) */
  size_t nopen;
  int lock_ready;
  ticket_lock lock; /* blocking mode */
  PyObject *weakrefs;
} SandboxObject;

enum op_kind {
  OK_RUN,
  OK_STREAM,
  OK_PTY,
  OK_START,
  OK_CONNECT,
  OK_UNARY,
  OK_STDIN,
  OK_FILES, /* a files call: stat, list, mkdir, move, remove */
  OK_READ,  /* a file's contents, streamed in */
  OK_WRITE  /* a file's contents, streamed out */
};

/* Kinds that end with unary_done (no process). */
#define ONE_SHOT(k)                                                            \
  ((k) == OK_UNARY || (k) == OK_STDIN || (k) == OK_FILES || (k) == OK_READ ||  \
   (k) == OK_WRITE)

/* A queued chunk of output. */
typedef struct chunk {
  struct chunk *next;
  int stream;
  size_t len;
  uint8_t data[];
} chunk;

struct Op {
  PyObject_HEAD SandboxObject *sbo; /* strong */
  int kind;
  conch_process *p; /* until the close is done */
  conch_stdin *in;  /* OK_STDIN: until its end */
  unsigned stdin_ready : 1;
  uint32_t pid;
  unsigned started : 1;
  unsigned ended : 1;   /* on_end ran: |res| and |st| are final */
  unsigned closing : 1; /* conch_process_close_async() was called */
  unsigned closed : 1;  /* its done ran (or nothing to close) */
  unsigned discard : 1; /* wait(): output is dropped */
  unsigned paused : 1;  /* the queue is past Q_HIGH: the server waits */
  unsigned in_ready : 1;
  unsigned held : 1; /* the sandbox holds a reference (handle open) */
  unsigned unary_done : 1;
  unsigned is_list : 1;
  int close_rv;
  conch_exec_result res;
  conch_status st;
  chunk *qhead, *qtail;
  size_t qbytes;
  /* OK_READ: the pieces as bytes objects, made once from libconch's
     piece (the only copy), a ring of |rq_n| from |rq_head|. */
  PyObject **rq;
  size_t rq_cap, rq_head, rq_n;
  /* A unary call's answer: a list for List. */
  conch_process_info *list;
  size_t nlist;
  /* Files: the answer's entries (OK_FILES: a malloc'd copy; OK_WRITE:
     libconch's, |ents_out|), the transfer (until its done), a write's
     piece in flight. */
  conch_entry_info *ents, *ents_out;
  size_t nents;
  conch_files_xfer *fx;
  uint8_t *wbuf, *wnext; /* the piece in flight; the next one's room */
  size_t wlen, woff, wcap, wnext_cap;
  unsigned weof : 1;
  unsigned nomem : 1;
  uint64_t moved;
  /* Futures (asyncio). */
  PyObject *f_start, *f_data, *f_end, *f_close;
  Op *ready_next;
  Op *open_prev, *open_next;
};

static PyTypeObject SandboxType;
static PyTypeObject OpType;

/* ---- The ready list and dispatch ----------------------------------------- */

static void mark_ready(Op *op) {
  if (!op->in_ready) {
    op->in_ready = 1;
    Py_INCREF(op); /* deferred in blocking mode: see below */
    op->ready_next = op->sbo->ready;
    op->sbo->ready = op;
  }
}

/* In blocking mode libconch's callbacks run without the GIL: they may not
   touch reference counts.  mark_ready() is only called with the GIL held
   in async mode; in blocking mode the handlers use mark_ready_nogil(),
   and dispatch takes the reference semantics into account. */
static void mark_ready_nogil(Op *op) {
  if (!op->in_ready) {
    op->in_ready = 1;
    op->ready_next = op->sbo->ready;
    op->sbo->ready = op;
  }
}

static void mark(Op *op) {
  if (op->sbo->async) {
    mark_ready(op);
  } else {
    mark_ready_nogil(op);
  }
}

static PyObject *make_result(const conch_exec_result *r);
static PyObject *make_list(const conch_process_info *l, size_t n);
static PyObject *make_entries(const conch_entry_info *e, size_t n);
static void entries_free_raw(conch_entry_info *e, size_t n);

/* Resolves |*fut| with |val| (stolen) or |exc| (stolen), unless it was
   cancelled; clears |*fut|. */
static void resolve(PyObject **fut, PyObject *val, PyObject *exc) {
  PyObject *f = *fut, *done, *r;
  *fut = NULL;
  if (f == NULL) {
    Py_XDECREF(val);
    Py_XDECREF(exc);
    return;
  }
  if (val == NULL && exc == NULL) {
    /* Making the value failed: the exception in flight goes instead. */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    exc = v != NULL ? v : PyObject_CallFunction(PyExc_MemoryError, NULL);
  }
  done = PyObject_CallMethodNoArgs(f, s_done);
  if (done == Py_False) {
    r = exc != NULL ? PyObject_CallMethodOneArg(f, s_set_exception, exc)
                    : PyObject_CallMethodOneArg(f, s_set_result, val);
    if (r == NULL) {
      PyErr_WriteUnraisable(f);
    }
    Py_XDECREF(r);
  } else if (done == NULL) {
    PyErr_WriteUnraisable(f);
  }
  Py_XDECREF(done);
  Py_XDECREF(val);
  Py_XDECREF(exc);
  Py_DECREF(f);
}

static PyObject *op_end_value(Op *op, PyObject **exc);

static void op_unhold(Op *op);

/* One op's state changed: tell its futures. */
static void dispatch_op(Op *op) {
  if (op->f_start != NULL && (op->started || op->ended)) {
    if (op->started) {
      resolve(&op->f_start, PyLong_FromUnsignedLong(op->pid), NULL);
    } else {
      resolve(&op->f_start, NULL, error_from_status(&op->st, NULL));
    }
  }
  if (op->f_data != NULL &&
      (op->qhead != NULL || op->rq_n > 0 || op->ended || op->stdin_ready)) {
    Py_INCREF(Py_None);
    resolve(&op->f_data, Py_None, NULL);
  }
  if (op->f_end != NULL &&
      (ONE_SHOT(op->kind) ? op->unary_done
                          : op->ended && (op->kind != OK_RUN || op->closed))) {
    PyObject *exc = NULL, *val = op_end_value(op, &exc);
    resolve(&op->f_end, val, exc);
  }
  if (op->f_close != NULL && op->closed) {
    resolve(&op->f_close, PyLong_FromLong(op->close_rv), NULL);
  }
  if (op->closed && op->held) {
    op_unhold(op);
  }
}

/* Runs with the GIL, after every libconch turn. */
static void dispatch(SandboxObject *s) {
  while (s->ready != NULL) {
    Op *op = s->ready;
    s->ready = op->ready_next;
    op->ready_next = NULL;
    op->in_ready = 0;
    if (!s->async) {
      Py_INCREF(op); /* the blocking handlers took no reference */
    }
    dispatch_op(op);
    Py_DECREF(op);
  }
}

/* ---- The sandbox's list of open handles ---------------------------------- */

static void op_hold(Op *op) {
  SandboxObject *s = op->sbo;
  op->held = 1;
  Py_INCREF(op);
  op->open_prev = NULL;
  op->open_next = s->open;
  if (s->open != NULL) {
    s->open->open_prev = op;
  }
  s->open = op;
  s->nopen++;
}

static void op_unhold(Op *op) {
  SandboxObject *s = op->sbo;
  if (!op->held) {
    return;
  }
  op->held = 0;
  if (op->open_prev != NULL) {
    op->open_prev->open_next = op->open_next;
  } else {
    s->open = op->open_next;
  }
  if (op->open_next != NULL) {
    op->open_next->open_prev = op->open_prev;
  }
  op->open_prev = op->open_next = NULL;
  s->nopen--;
  Py_DECREF(op);
}

/* ---- libconch's callbacks (plain C) -------------------------------------- */

/* Back-pressure: a reader that lets more than Q_HIGH bytes of output queue
   up pauses the process's stream (conch_process_pause: the server stops
   after one stream window more), and taking it down to Q_LOW resumes it;
   so a slow `async for` holds a bounded amount, and the process blocks on
   its pipe as under a slow terminal. */
#define Q_HIGH (1u << 20)
#define Q_LOW (256u << 10)

/* After chunks were taken: resumes a paused stream whose queue is low
   again.  On the loop's thread, or with the sandbox's lock held. */
static void q_relieve(Op *op) {
  if (op->paused && op->qbytes <= Q_LOW) {
    op->paused = 0;
    if (op->p != NULL) {
      (void)conch_process_resume(op->p);
    }
    if (op->fx != NULL) {
      (void)conch_files_xfer_resume(op->fx);
    }
  }
}

static void chunks_free(Op *op) {
  chunk *c = op->qhead;
  while (c != NULL) {
    chunk *n = c->next;
    PyMem_RawFree(c);
    c = n;
  }
  op->qhead = op->qtail = NULL;
  op->qbytes = 0;
}

static void h_start(conch_process *p, uint32_t pid, void *ud) {
  Op *op = ud;
  (void)p;
  op->started = 1;
  op->pid = pid;
  mark(op);
}

/* Queues a copy of |n| bytes of |stream| for pop().  0, or -1 out of
   memory. */
static int q_push(Op *op, int stream, const uint8_t *d, size_t n) {
  chunk *c = PyMem_RawMalloc(sizeof(*c) + n);
  if (c == NULL) {
    return -1;
  }
  c->next = NULL;
  c->stream = stream;
  c->len = n;
  memcpy(c->data, d, n);
  if (op->qtail != NULL) {
    op->qtail->next = c;
  } else {
    op->qhead = c;
  }
  op->qtail = c;
  op->qbytes += n;
  return 0;
}

static void h_chunk(conch_process *p, const conch_chunk *ck, void *ud) {
  Op *op = ud;
  if (op->kind == OK_RUN || op->discard) {
    return; /* run collects in libconch; wait() drops */
  }
  if (q_push(op, (int)ck->stream, ck->data, ck->len) != 0) {
    /* Out of memory: the stream cannot be delivered whole; end it. */
    if (op->st.code == CONCH_CODE_OK) {
      op->st.code = CONCH_CODE_RESOURCE_EXHAUSTED;
      op->st.origin = CONCH_ORIGIN_LOCAL;
      op->st.local_err = CONCH_ERR_NOMEM;
    }
    return;
  }
  if (!op->paused && op->qbytes >= Q_HIGH && conch_process_pause(p) == 0) {
    op->paused = 1;
  }
  mark(op);
}

static void h_closed(int rv, void *ud) {
  Op *op = ud;
  op->closed = 1;
  op->close_rv = rv;
  op->p = NULL;
  mark(op);
}

static void copy_result(conch_exec_result *dst, const conch_exec_result *src) {
  conch_exec_result_clear(dst);
  *dst = *src;
  /* Deep: the strings and buffers are borrowed until on_end returns. */
  dst->status = NULL;
  dst->error = NULL;
  dst->out = dst->err = dst->text = NULL;
  dst->out_len = dst->err_len = dst->text_len = 0;
#define DUP(field, lenf)                                                       \
  if (src->field != NULL && src->lenf > 0) {                                   \
    dst->field = malloc(src->lenf);                                            \
    if (dst->field != NULL) {                                                  \
      memcpy(dst->field, src->field, src->lenf);                               \
      dst->lenf = src->lenf;                                                   \
    }                                                                          \
  }
  DUP(out, out_len)
  DUP(err, err_len)
  DUP(text, text_len)
#undef DUP
  if (src->status != NULL) {
    dst->status = strdup(src->status);
  }
  if (src->error != NULL) {
    dst->error = strdup(src->error);
  }
}

static void h_end(conch_process *p, const conch_exec_result *res,
                  const conch_status *st, void *ud) {
  Op *op = ud;
  copy_result(&op->res, res);
  if (op->st.code == CONCH_CODE_OK) {
    conch_status_copy(&op->st, st, NULL);
  }
  op->ended = 1;
  if (res->pid != 0) {
    op->pid = res->pid;
  }
  if (op->kind == OK_RUN && !op->closing) {
    /* run returns once the handle is released (and, if the stream broke,
       once the process was ended). */
    op->closing = 1;
    if (conch_process_close_async(p, h_closed, op) != 0) {
      op->closed = 1; /* no memory: released with the sandbox */
    }
  }
  mark(op);
}

static const conch_process_handler handler = {h_start, h_chunk, h_end};

/* start(): the process runs on without a handle. */
static void h_started(uint32_t pid, const conch_status *st, void *ud) {
  Op *op = ud;
  if (pid != 0) {
    op->started = 1;
    op->pid = pid;
  } else {
    conch_status_copy(&op->st, st, NULL);
  }
  op->ended = 1;
  op->res.ended = pid != 0;
  op->closed = 1;
  mark(op);
}

/* ---- Driving ------------------------------------------------------------- */

/* Blocking mode: drives the client until |cond(op)| holds.  Called with the
   GIL; releases it for every turn.  Returns 0, or -1 with a Python
   exception (a signal handler raised, e.g. KeyboardInterrupt) or a
   libconch failure. */
static int drive_x(SandboxObject *s, int (*cond)(Op *op), Op *op, int signals) {
  int rv = 0;
  PyThreadState *ts = PyEval_SaveThread();
  if (!tl_trylock(&s->lock)) {
    conch_client_wakeup(s->c); /* a driver in poll hands over */
    tl_lock(&s->lock);
  }
  for (;;) {
    PyEval_RestoreThread(ts);
    dispatch(s);
    if (cond(op)) {
      break;
    }
    if (signals && PyErr_CheckSignals() != 0) {
      rv = -1;
      break;
    }
    ts = PyEval_SaveThread();
    if (tl_contended(&s->lock)) {
      tl_unlock(&s->lock);
      tl_lock(&s->lock);
    }
    rv = conch_client_run(s->c, -1);
    if (rv != 0) {
      PyEval_RestoreThread(ts);
      PyErr_Format(PyExc_RuntimeError, "conch: driving the client: %s",
                   conch_strerror(rv));
      rv = -1;
      break;
    }
  }
  tl_unlock(&s->lock);
  return rv;
}

static int drive(SandboxObject *s, int (*cond)(Op *op), Op *op) {
  return drive_x(s, cond, op, 1);
}

/* Runs |stmt| on the sandbox's client: directly on the loop (async), or
   under the sandbox's lock with the GIL released (blocking), after waking
   a thread that drives it so that it hands over. */
#define LOCKED(s, stmt)                                                        \
  do {                                                                         \
    if ((s)->async) {                                                          \
      stmt;                                                                    \
    } else {                                                                   \
      Py_BEGIN_ALLOW_THREADS if (!tl_trylock(&(s)->lock)) {                    \
        conch_client_wakeup((s)->c); /* the driver hands over */               \
        tl_lock(&(s)->lock);                                                   \
      }                                                                        \
      stmt;                                                                    \
      tl_unlock(&(s)->lock);                                                   \
      Py_END_ALLOW_THREADS                                                     \
    }                                                                          \
  } while (0)

/* ---- io hooks: the asyncio loop ------------------------------------------ */

static watch_ent *watch_find(SandboxObject *s, int fd) {
  size_t i;
  for (i = 0; i < s->nwatch; i++) {
    if (s->watches[i].fd == fd) {
      return &s->watches[i];
    }
  }
  return NULL;
}

static int loop_call(SandboxObject *s, PyObject *name, int fd, PyObject *cb) {
  PyObject *r, *pyfd = PyLong_FromLong(fd);
  if (pyfd == NULL) {
    return -1;
  }
  r = cb != NULL
          ? PyObject_CallMethodObjArgs(s->loop, name, pyfd, cb, pyfd, NULL)
          : PyObject_CallMethodObjArgs(s->loop, name, pyfd, NULL);
  Py_DECREF(pyfd);
  if (r == NULL) {
    return -1;
  }
  Py_DECREF(r);
  return 0;
}

static int hook_watch(int fd, unsigned events, void *ud) {
  SandboxObject *s = ud;
  watch_ent *w = watch_find(s, fd);
  unsigned old = w != NULL ? w->events : 0, want;
  int rv = 0;

  want =
      events & CONCH_IO_REMOVE ? 0 : events & (CONCH_IO_READ | CONCH_IO_WRITE);
  if (w == NULL && want != 0) {
    if (s->nwatch == s->capwatch) {
      size_t cap = s->capwatch ? 2 * s->capwatch : 8;
      watch_ent *n = PyMem_Realloc(s->watches, cap * sizeof(*n));
      if (n == NULL) {
        return -1;
      }
      s->watches = n;
      s->capwatch = cap;
    }
    w = &s->watches[s->nwatch++];
    w->fd = fd;
    w->events = 0;
  }
  if ((want & CONCH_IO_READ) && !(old & CONCH_IO_READ)) {
    rv |= loop_call(s, s_add_reader, fd, s->on_read);
  } else if (!(want & CONCH_IO_READ) && (old & CONCH_IO_READ)) {
    rv |= loop_call(s, s_remove_reader, fd, NULL);
  }
  if ((want & CONCH_IO_WRITE) && !(old & CONCH_IO_WRITE)) {
    rv |= loop_call(s, s_add_writer, fd, s->on_write);
  } else if (!(want & CONCH_IO_WRITE) && (old & CONCH_IO_WRITE)) {
    rv |= loop_call(s, s_remove_writer, fd, NULL);
  }
  if (w != NULL) {
    if (want == 0) {
      *w = s->watches[--s->nwatch];
    } else {
      w->events = want;
    }
  }
  if (rv != 0) {
    PyErr_WriteUnraisable((PyObject *)s);
    return -1;
  }
  return 0;
}

static int hook_timer(long ms, void *ud) {
  SandboxObject *s = ud;
  PyObject *h;
  if (s->timer != NULL) {
    PyObject *r = PyObject_CallMethodNoArgs(s->timer, s_cancel);
    Py_XDECREF(r);
    Py_CLEAR(s->timer);
  }
  if (ms < 0) {
    return 0;
  }
  if (ms == 0) {
    h = PyObject_CallMethodOneArg(s->loop, s_call_soon, s->on_timer);
  } else {
    PyObject *delay = PyFloat_FromDouble((double)ms / 1000.0);
    h = delay != NULL ? PyObject_CallMethodObjArgs(s->loop, s_call_later, delay,
                                                   s->on_timer, NULL)
                      : NULL;
    Py_XDECREF(delay);
  }
  if (h == NULL) {
    PyErr_WriteUnraisable((PyObject *)s);
    return -1;
  }
  s->timer = h;
  return 0;
}

static PyObject *sb_on_io(SandboxObject *s, PyObject *arg, unsigned ev) {
  int fd = (int)PyLong_AsLong(arg);
  if (fd == -1 && PyErr_Occurred()) {
    return NULL;
  }
  if (s->c != NULL) {
    conch_client_on_io(s->c, fd, ev);
    dispatch(s);
  }
  Py_RETURN_NONE;
}

static PyObject *sb_on_read(SandboxObject *s, PyObject *arg) {
  return sb_on_io(s, arg, CONCH_IO_READ);
}

static PyObject *sb_on_write(SandboxObject *s, PyObject *arg) {
  return sb_on_io(s, arg, CONCH_IO_WRITE);
}

static PyObject *sb_on_timer(SandboxObject *s, PyObject *noargs) {
  (void)noargs;
  Py_CLEAR(s->timer);
  if (s->c != NULL) {
    conch_client_on_timer(s->c);
    dispatch(s);
  }
  Py_RETURN_NONE;
}

/* ---- Sandbox ------------------------------------------------------------- */

static int parse_headers(PyObject *h, conch_metadata **out) {
  Py_ssize_t i, n;
  PyObject *seq;
  *out = NULL;
  if (h == NULL || h == Py_None) {
    return 0;
  }
  seq = PySequence_Fast(h, "headers: a sequence of (name, value) pairs");
  if (seq == NULL) {
    return -1;
  }
  if (conch_metadata_new(out, NULL) != 0) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  n = PySequence_Fast_GET_SIZE(seq);
  for (i = 0; i < n; i++) {
    const char *k, *v;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ss", &k, &v)) {
      Py_DECREF(seq);
      return -1;
    }
    if (conch_metadata_add_str(*out, k, v) != 0) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "headers: bad header %s", k);
      return -1;
    }
  }
  Py_DECREF(seq);
  return 0;
}

static int sb_init(SandboxObject *s, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {
      "url",           "access_token", "user",
      "headers",       "timeout_ms",   "request_timeout_ms",
      "kill_grace_ms", "keepalive_ms", "capabilities",
      "protocol",      "http_version", "codec",
      "cacert",        "autostart",    "serve_exe",
      "loop",          "tree",         "service_config",
      NULL};
  const char *url = NULL, *token = NULL, *user = NULL, *cacert = NULL,
             *serve_exe = NULL, *service_config = NULL;
  PyObject *headers = NULL, *loop = Py_None;
  long timeout_ms = 0, request_timeout_ms = 0, kill_grace_ms = 0,
       keepalive_ms = 0;
  unsigned int caps = 0;
  int protocol = 0, http_version = 0, codec = 0, autostart = 0, tree = 0, rv;
  conch_sandbox_opts so = CONCH_SANDBOX_OPTS_INIT;
  conch_client_opts *co = NULL;
  conch_metadata *md = NULL;
  conch_status st;

  if (s->sb != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Sandbox already initialised");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(
          args, kw, "|zzzOllllIiiizpzOiz", kwlist, &url, &token, &user,
          &headers, &timeout_ms, &request_timeout_ms, &kill_grace_ms,
          &keepalive_ms, &caps, &protocol, &http_version, &codec, &cacert,
          &autostart, &serve_exe, &loop, &tree, &service_config)) {
    return -1;
  }
  if (tree < CONCH_TREE_DEFAULT || tree > CONCH_TREE_ON) {
    PyErr_SetString(PyExc_ValueError, "tree: one of the CONCH_TREE_* values");
    return -1;
  }
  if (parse_headers(headers, &md) != 0) {
    return -1;
  }
  if (conch_client_opts_new(&co) != 0 ||
      conch_client_opts_set_protocol(co, (conch_protocol)protocol) != 0 ||
      conch_client_opts_set_http_version(
          co, (conch_http_version)http_version) != 0 ||
      conch_client_opts_set_codec(co, (conch_codec)codec) != 0 ||
      (cacert != NULL && conch_client_opts_set_ca_file(co, cacert) != 0)) {
    conch_client_opts_free(co);
    conch_metadata_free(md);
    PyErr_SetString(PyExc_ValueError,
                    "bad client options (protocol, http_version, codec or "
                    "cacert)");
    return -1;
  }
  if (service_config != NULL) {
    char err[256];
    rv = conch_client_opts_set_service_config(co, service_config, err,
                                              sizeof(err));
    if (rv != 0) {
      conch_client_opts_free(co);
      conch_metadata_free(md);
      if (rv == CONCH_ERR_NOMEM) {
        PyErr_NoMemory();
      } else {
        PyErr_Format(PyExc_ValueError, "service_config: %s", err);
      }
      return -1;
    }
  }
  so.url = url;
  so.access_token = token;
  so.user = user;
  so.headers = md;
  so.timeout_ms = timeout_ms;
  so.request_timeout_ms = request_timeout_ms;
  so.kill_grace_ms = kill_grace_ms;
  so.keepalive_ms = keepalive_ms;
  so.capabilities = caps;
  so.client_opts = co;
  so.autostart = autostart;
  so.serve_exe = serve_exe;
  so.tree = tree;
  conch_status_init(&st);
  Py_BEGIN_ALLOW_THREADS rv = conch_sandbox_open(&s->sb, &so, &st);
  Py_END_ALLOW_THREADS conch_client_opts_free(co);
  conch_metadata_free(md);
  if (rv != 0) {
    s->sb = NULL;
    raise_exc(st.code != CONCH_CODE_OK ? error_from_status(&st, NULL)
                                       : error_from_rv(rv, "Sandbox"));
    conch_status_clear(&st);
    return -1;
  }
  conch_status_clear(&st);
  s->c = conch_sandbox_native(s->sb);
  tl_init(&s->lock);
  s->lock_ready = 1;
  if (loop != Py_None) {
    conch_io_hooks hooks;
    s->async = 1;
    Py_INCREF(loop);
    s->loop = loop;
    s->on_read = PyObject_GetAttrString((PyObject *)s, "_on_read");
    s->on_write = PyObject_GetAttrString((PyObject *)s, "_on_write");
    s->on_timer = PyObject_GetAttrString((PyObject *)s, "_on_timer");
    if (s->on_read == NULL || s->on_write == NULL || s->on_timer == NULL) {
      return -1;
    }
    hooks.watch = hook_watch;
    hooks.timer = hook_timer;
    hooks.user_data = s;
    if (conch_client_set_io_hooks(s->c, &hooks) != 0) {
      PyErr_SetString(PyExc_RuntimeError, "cannot set the io hooks");
      return -1;
    }
  }
  return 0;
}

static int sb_check(SandboxObject *s) {
  if (s->sb == NULL || s->closed) {
    PyErr_SetString(PyExc_RuntimeError, "the sandbox is closed");
    return -1;
  }
  return 0;
}

/* Frees the libconch sandbox: every handle still open is closed first (the
   caller closed them already: close_all). */
static void sb_free_native(SandboxObject *s) {
  conch_sandbox *sb = s->sb;
  if (sb == NULL) {
    return;
  }
  s->closed = 1;
  if (s->async) {
    conch_sandbox_free(sb); /* hooks run: remove_reader/writer */
    s->sb = NULL;
    s->c = NULL;
    if (s->timer != NULL) {
      PyObject *r = PyObject_CallMethodNoArgs(s->timer, s_cancel);
      Py_XDECREF(r);
      Py_CLEAR(s->timer);
    }
  } else {
    Py_BEGIN_ALLOW_THREADS tl_lock(&s->lock);
    conch_sandbox_free(sb);
    tl_unlock(&s->lock);
    Py_END_ALLOW_THREADS s->sb = NULL;
    s->c = NULL;
  }
  /* Whatever the free released: its ops are closed now. */
  {
    Op *op = s->open;
    while (op != NULL) {
      op->closed = 1;
      op->p = NULL;
      op->fx = NULL;
      if (ONE_SHOT(op->kind) && !op->unary_done) {
        op->unary_done = 1;
        op->ended = 1;
        op->stdin_ready = 1;
        if (op->st.code == CONCH_CODE_OK) {
          op->st.code = CONCH_CODE_CANCELED;
          op->st.origin = CONCH_ORIGIN_LOCAL;
        }
      }
      mark(op);
      op = op->open_next;
    }
  }
  PyErr_Clear();
  dispatch(s);
}

static void sb_dealloc(SandboxObject *s) {
  PyObject_GC_UnTrack(s);
  if (s->weakrefs != NULL) {
    PyObject_ClearWeakRefs((PyObject *)s);
  }
  if (s->sb != NULL) {
    /* Closes what is still open, blocking (the loop may be gone). */
    if (s->async) {
      conch_client_set_io_hooks(s->c, NULL);
      s->async = 0;
      Py_CLEAR(s->timer);
    }
    Py_BEGIN_ALLOW_THREADS conch_sandbox_free(s->sb);
    Py_END_ALLOW_THREADS s->sb = NULL;
  }
  Py_CLEAR(s->loop);
  Py_CLEAR(s->on_read);
  Py_CLEAR(s->on_write);
  Py_CLEAR(s->on_timer);
  Py_CLEAR(s->timer);
  PyMem_Free(s->watches);
  if (s->lock_ready) {
    tl_destroy(&s->lock);
  }
  Py_TYPE(s)->tp_free((PyObject *)s);
}

static int sb_traverse(SandboxObject *s, visitproc visit, void *arg) {
  Py_VISIT(s->loop);
  Py_VISIT(s->on_read);
  Py_VISIT(s->on_write);
  Py_VISIT(s->on_timer);
  Py_VISIT(s->timer);
  return 0;
}

static int sb_clear(SandboxObject *s) {
  Py_CLEAR(s->on_read);
  Py_CLEAR(s->on_write);
  Py_CLEAR(s->on_timer);
  return 0;
}

/* ---- Ops: making them ---------------------------------------------------- */

static Op *op_new(SandboxObject *s, int kind) {
  Op *op = PyObject_GC_New(Op, &OpType);
  if (op == NULL) {
    return NULL;
  }
  memset((char *)op + sizeof(PyObject), 0, sizeof(Op) - sizeof(PyObject));
  Py_INCREF(s);
  op->sbo = s;
  op->kind = kind;
  conch_exec_result_init(&op->res);
  conch_status_init(&op->st);
  PyObject_GC_Track(op);
  return op;
}

/* The end of a Sandbox method that started |op| (|rv| its start's
   return): the op, held while it is open; or, when the start failed, the
   op dropped and the exception raised: |st|'s when it says why (may be
   NULL), else |rv|'s naming |what|. */
static PyObject *op_started(Op *op, int rv, const char *what,
                            const conch_status *st) {
  if (rv != 0) {
    op->closed = 1;
    op->p = NULL;
    Py_DECREF(op);
    raise_exc(st != NULL && st->code != CONCH_CODE_OK
                  ? error_from_status(st, NULL)
                  : error_from_rv(rv, what));
    return NULL;
  }
  op_hold(op);
  return (PyObject *)op;
}

/* The options of a process, from Python values; the strings borrow from
   the Python objects (alive for the call). */
typedef struct popts {
  conch_proc_opts o;
  const char **args;
  conch_env *env;
  PyObject *keep; /* references that the borrowed strings need */
} popts;

static void popts_clear(popts *po) {
  PyMem_Free(po->args);
  PyMem_Free(po->env);
  Py_XDECREF(po->keep);
}

static int popts_fill(popts *po, PyObject *cmd, PyObject *args, PyObject *env,
                      PyObject *cwd, PyObject *user, PyObject *tag,
                      int stdin_on, unsigned cols, unsigned rows,
                      long timeout_ms, long request_timeout_ms) {
  Py_ssize_t i, n;
  conch_proc_opts d = CONCH_PROC_OPTS_INIT;
  memset(po, 0, sizeof(*po));
  po->o = d;
  po->keep = PyList_New(0);
  if (po->keep == NULL) {
    return -1;
  }
#define STR(obj, dst)                                                          \
  if ((obj) != NULL && (obj) != Py_None) {                                     \
    dst = PyUnicode_AsUTF8(obj);                                               \
    if (dst == NULL) {                                                         \
      return -1;                                                               \
    }                                                                          \
  }
  STR(cmd, po->o.cmd)
  STR(cwd, po->o.cwd)
  STR(user, po->o.user)
  STR(tag, po->o.tag)
  if (args != NULL && args != Py_None) {
    PyObject *seq = PySequence_Fast(args, "args: a sequence of str");
    if (seq == NULL || PyList_Append(po->keep, seq) != 0) {
      Py_XDECREF(seq);
      return -1;
    }
    Py_DECREF(seq);
    n = PySequence_Fast_GET_SIZE(seq);
    po->args = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (po->args == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    for (i = 0; i < n; i++) {
      PyObject *a = PySequence_Fast_GET_ITEM(seq, i);
      if (!PyUnicode_Check(a)) {
        PyErr_SetString(PyExc_TypeError, "args: every argument must be a str");
        return -1;
      }
      po->args[i] = PyUnicode_AsUTF8(a);
      if (po->args[i] == NULL) {
        return -1;
      }
    }
    po->o.args = po->args;
    po->o.nargs = (size_t)n;
  }
  if (env != NULL && env != Py_None) {
    PyObject *items = PyMapping_Items(env);
    if (items == NULL || PyList_Append(po->keep, items) != 0) {
      Py_XDECREF(items);
      return -1;
    }
    Py_DECREF(items);
    n = PyList_GET_SIZE(items);
    po->env = PyMem_Calloc((size_t)n + 1, sizeof(conch_env));
    if (po->env == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    for (i = 0; i < n; i++) {
      PyObject *kv = PyList_GET_ITEM(items, i);
      PyObject *k = PyTuple_GET_ITEM(kv, 0), *v = PyTuple_GET_ITEM(kv, 1);
      if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "env: names and values must be str");
        return -1;
      }
      po->env[i].name = PyUnicode_AsUTF8(k);
      po->env[i].value = PyUnicode_AsUTF8(v);
      if (po->env[i].name == NULL || po->env[i].value == NULL) {
        return -1;
      }
    }
    po->o.env = po->env;
    po->o.nenv = (size_t)n;
  }
#undef STR
  po->o.stdin_enabled = stdin_on;
  po->o.pty_cols = cols;
  po->o.pty_rows = rows;
  po->o.timeout_ms = timeout_ms;
  po->o.request_timeout_ms = request_timeout_ms;
  return 0;
}

/* Sandbox.process(kind, cmd, args, env, cwd, user, tag, stdin, cols, rows,
   timeout_ms, request_timeout_ms[, tree]) -> Op: starts run, stream, pty or
   start; |tree| is a CONCH_TREE_* value (default CONCH_TREE_DEFAULT: the
   sandbox's). */
static PyObject *sb_process(SandboxObject *s, PyObject *args) {
  const char *kind;
  PyObject *cmd, *pargs, *env, *cwd, *user, *tag;
  int stdin_on, rv = 0;
  unsigned cols, rows;
  long timeout_ms, request_timeout_ms;
  int tree = 0;
  popts po;
  Op *op;
  int k;

  if (!PyArg_ParseTuple(args, "sOOOOOOpIIll|i", &kind, &cmd, &pargs, &env, &cwd,
                        &user, &tag, &stdin_on, &cols, &rows, &timeout_ms,
                        &request_timeout_ms, &tree)) {
    return NULL;
  }
  if (tree < CONCH_TREE_DEFAULT || tree > CONCH_TREE_ON) {
    PyErr_SetString(PyExc_ValueError, "tree: one of the CONCH_TREE_* values");
    return NULL;
  }
  if (sb_check(s) != 0) {
    return NULL;
  }
  if (strcmp(kind, "run") == 0) {
    k = OK_RUN;
  } else if (strcmp(kind, "stream") == 0) {
    k = OK_STREAM;
  } else if (strcmp(kind, "pty") == 0) {
    k = OK_PTY;
  } else if (strcmp(kind, "start") == 0) {
    k = OK_START;
  } else {
    PyErr_Format(PyExc_ValueError, "unknown kind %s", kind);
    return NULL;
  }
  if (popts_fill(&po, cmd, pargs, env, cwd, user, tag, stdin_on, cols, rows,
                 timeout_ms, request_timeout_ms) != 0) {
    popts_clear(&po);
    return NULL;
  }
  po.o.tree = tree;
  op = op_new(s, k);
  if (op == NULL) {
    popts_clear(&po);
    return NULL;
  }
  LOCKED(s, {
    switch (k) {
    case OK_RUN:
      rv = conch_run_async(s->sb, &po.o, &handler, op, &op->p);
      break;
    case OK_STREAM:
      rv = conch_stream_async(s->sb, &po.o, &handler, op, &op->p);
      break;
    case OK_START:
      rv = conch_start_async(s->sb, &po.o, h_started, op);
      break;
    default:
      rv = conch_pty_open_async(s->sb, &po.o, &handler, op, &op->p);
      break;
    }
  });
  popts_clear(&po);
  return op_started(op, rv, kind, NULL);
}

/* Sandbox.connect(pid, tag, detached) -> Op. */
static PyObject *sb_connect(SandboxObject *s, PyObject *args) {
  unsigned int pid;
  PyObject *tag;
  int detached, rv = 0;
  conch_selector sel = {0, NULL};
  Op *op;
  if (!PyArg_ParseTuple(args, "IOp", &pid, &tag, &detached)) {
    return NULL;
  }
  if (sb_check(s) != 0) {
    return NULL;
  }
  sel.pid = pid;
  if (tag != Py_None) {
    sel.tag = PyUnicode_AsUTF8(tag);
    if (sel.tag == NULL) {
      return NULL;
    }
  }
  op = op_new(s, OK_CONNECT);
  if (op == NULL) {
    return NULL;
  }
  LOCKED(s, rv = conch_connect_async(s->sb, &sel,
                                     detached ? CONCH_CONNECT_DETACHED : 0,
                                     &handler, op, &op->p));
  return op_started(op, rv, "connect", NULL);
}

/* Unary calls: the op is held (for the callback) until the answer. */
static void h_unary(const conch_status *st, void *ud) {
  Op *op = ud;
  conch_status_copy(&op->st, st, NULL);
  op->unary_done = 1;
  op->closed = 1;
  mark(op);
}

static void h_list(const conch_process_info *list, size_t n,
                   const conch_status *st, void *ud) {
  Op *op = ud;
  size_t i;
  conch_status_copy(&op->st, st, NULL);
  if (st->code == CONCH_CODE_OK && n > 0) {
    /* Kept as is: conch_process_info owns its strings; copy the array by
       value and steal nothing (the list is freed by libconch): we convert
       at dispatch, so copy deeply now. */
    op->list = calloc(n, sizeof(*op->list));
    if (op->list != NULL) {
      for (i = 0; i < n; i++) {
        const conch_process_info *src = &list[i];
        conch_process_info *d = &op->list[i];
        size_t k;
        d->pid = src->pid;
        d->tag = src->tag != NULL ? strdup(src->tag) : NULL;
        d->cmd = src->cmd != NULL ? strdup(src->cmd) : NULL;
        d->cwd = src->cwd != NULL ? strdup(src->cwd) : NULL;
        d->args = src->nargs ? calloc(src->nargs, sizeof(char *)) : NULL;
        for (k = 0; d->args != NULL && k < src->nargs; k++) {
          d->args[k] = strdup(src->args[k]);
          d->nargs++;
        }
        d->env = src->nenv ? calloc(src->nenv, sizeof(conch_env)) : NULL;
        for (k = 0; d->env != NULL && k < src->nenv; k++) {
          d->env[k].name = strdup(src->env[k].name);
          d->env[k].value = strdup(src->env[k].value);
          d->nenv++;
        }
      }
      op->nlist = n;
    }
  }
  op->unary_done = 1;
  op->closed = 1;
  mark(op);
}

/* Sandbox.unary(what, pid, tag, ...) -> Op: list, kill, stdin, close_stdin,
   resize. */
static PyObject *sb_unary(SandboxObject *s, PyObject *args) {
  const char *what;
  unsigned int pid = 0, a = 0, b = 0;
  PyObject *tag = Py_None;
  Py_buffer data = {0};
  conch_selector sel = {0, NULL};
  int rv = 0, pty = 0;
  Op *op;

  if (!PyArg_ParseTuple(args, "s|IOy*IIp", &what, &pid, &tag, &data, &a, &b,
                        &pty)) {
    return NULL;
  }
  if (sb_check(s) != 0) {
    PyBuffer_Release(&data);
    return NULL;
  }
  sel.pid = pid;
  if (tag != Py_None) {
    sel.tag = PyUnicode_AsUTF8(tag);
    if (sel.tag == NULL) {
      PyBuffer_Release(&data);
      return NULL;
    }
  }
  op = op_new(s, OK_UNARY);
  if (op == NULL) {
    PyBuffer_Release(&data);
    return NULL;
  }
  LOCKED(s, {
    if (strcmp(what, "list") == 0) {
      op->is_list = 1;
      rv = conch_list_async(s->sb, h_list, op);
    } else if (strcmp(what, "kill") == 0) {
      rv = conch_kill_async(s->sb, &sel, (int)a, h_unary, op);
    } else if (strcmp(what, "stdin") == 0) {
      rv = conch_send_stdin_async(s->sb, &sel, data.buf, (size_t)data.len, pty,
                                  h_unary, op);
    } else if (strcmp(what, "close_stdin") == 0) {
      rv = conch_close_stdin_async(s->sb, &sel, h_unary, op);
    } else if (strcmp(what, "resize") == 0) {
      rv = conch_pty_resize_async(s->sb, &sel, a, b, h_unary, op);
    } else {
      rv = CONCH_ERR_INVALID;
    }
  });
  PyBuffer_Release(&data);
  return op_started(op, rv, what, NULL);
}

/* Ordered stdin streams. */
static void h_stdin_ready(conch_stdin *in, void *ud) {
  Op *op = ud;
  (void)in;
  op->stdin_ready = 1;
  mark(op);
}

static void h_stdin_end(conch_stdin *in, const conch_status *st, void *ud) {
  Op *op = ud;
  conch_status_copy(&op->st, st, NULL);
  op->ended = 1;
  op->unary_done = 1;
  op->closed = 1;
  op->in = NULL;
  conch_stdin_free(in); /* allowed here; ignored inside a free */
  mark(op);
}

static const conch_stdin_handler stdin_handler = {h_stdin_ready, h_stdin_end};

/* Sandbox.stdin_open(pid, tag, pty) -> Op. */
static PyObject *sb_stdin_open(SandboxObject *s, PyObject *args) {
  unsigned int pid;
  PyObject *tag;
  int pty, rv = 0;
  conch_selector sel = {0, NULL};
  Op *op;
  if (!PyArg_ParseTuple(args, "IOp", &pid, &tag, &pty)) {
    return NULL;
  }
  if (sb_check(s) != 0) {
    return NULL;
  }
  sel.pid = pid;
  if (tag != Py_None) {
    sel.tag = PyUnicode_AsUTF8(tag);
    if (sel.tag == NULL) {
      return NULL;
    }
  }
  op = op_new(s, OK_STDIN);
  if (op == NULL) {
    return NULL;
  }
  LOCKED(s, rv = conch_stdin_open_async(s->sb, &sel, pty, &stdin_handler, op,
                                        &op->in));
  return op_started(op, rv, "stdin stream", NULL);
}

/* Sandbox.close_all() -> None: starts the close of every open handle (all
   at once: SIGTERMs together, one grace period).  The caller then waits
   for open_count to reach 0 (Op close futures). */
static PyObject *sb_close_all(SandboxObject *s, PyObject *noargs) {
  PyObject *ops;
  Op *op;
  (void)noargs;
  ops = PyList_New(0);
  if (ops == NULL) {
    return NULL;
  }
  for (op = s->open; op != NULL; op = op->open_next) {
    if (PyList_Append(ops, (PyObject *)op) != 0) {
      Py_DECREF(ops);
      return NULL;
    }
  }
  return ops;
}

static PyObject *sb_free(SandboxObject *s, PyObject *noargs) {
  (void)noargs;
  sb_free_native(s);
  Py_RETURN_NONE;
}

static PyObject *sb_get_caps(SandboxObject *s, void *c) {
  (void)c;
  return PyLong_FromUnsignedLong(
      s->sb != NULL ? conch_sandbox_capabilities(s->sb) : 0);
}

static PyObject *sb_get_nopen(SandboxObject *s, void *c) {
  (void)c;
  return PyLong_FromSize_t(s->nopen);
}

static PyObject *sb_get_closed(SandboxObject *s, void *c) {
  (void)c;
  return PyBool_FromLong(s->sb == NULL || s->closed);
}

/* ---- Files (conch/files.h) ----------------------------------------------- */

/* An entry as the tuple conch/_files.py makes an EntryInfo of: (name,
   type, path, size, mode, permissions, owner, group, mtime_sec,
   mtime_nsec, symlink_target, metadata dict). */
/* A name from the server (a file's, a user's) as os.fsdecode() makes one
   of the bytes the OS gives: what is not UTF-8 as lone surrogates
   ('surrogateescape'), so that fsencode() (PyUnicode_FSConverter, the
   paths these functions take) gives the same bytes back.  NULL stays
   None. */
static PyObject *fs_name(const char *s) {
  if (s == NULL) {
    Py_RETURN_NONE;
  }
  return PyUnicode_DecodeFSDefaultAndSize(s, (Py_ssize_t)strlen(s));
}

static PyObject *make_entry(const conch_entry_info *e) {
  PyObject *meta = PyDict_New(), *t;
  size_t i;
  if (meta == NULL) {
    return NULL;
  }
  for (i = 0; i < e->n_metadata; i++) {
    PyObject *k = fs_name(e->metadata[i].key);
    PyObject *v = PyUnicode_DecodeUTF8(e->metadata[i].value,
                                       (Py_ssize_t)strlen(e->metadata[i].value),
                                       "replace");
    if (k == NULL || v == NULL || PyDict_SetItem(meta, k, v) != 0) {
      Py_XDECREF(k);
      Py_XDECREF(v);
      Py_DECREF(meta);
      return NULL;
    }
    Py_DECREF(k);
    Py_DECREF(v);
  }
  t = Py_BuildValue("(NsNLksNNliNN)", fs_name(e->name),
                    conch_file_type_name(e->type), fs_name(e->path),
                    (long long)e->size, (unsigned long)e->mode, e->permissions,
                    fs_name(e->owner), fs_name(e->group), (long)e->mtime_sec,
                    (int)e->mtime_nsec, fs_name(e->symlink_target), meta);
  return t;
}

static PyObject *make_entries(const conch_entry_info *e, size_t n) {
  PyObject *l = PyList_New((Py_ssize_t)n);
  size_t i;
  if (l == NULL) {
    return NULL;
  }
  for (i = 0; i < n; i++) {
    PyObject *t = make_entry(&e[i]);
    if (t == NULL) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, (Py_ssize_t)i, t);
  }
  return l;
}

static void entries_free_raw(conch_entry_info *e, size_t n) {
  size_t i, k;
  if (e == NULL) {
    return;
  }
  for (i = 0; i < n; i++) {
    free(e[i].name);
    free(e[i].path);
    free(e[i].permissions);
    free(e[i].owner);
    free(e[i].group);
    free(e[i].symlink_target);
    for (k = 0; k < e[i].n_metadata; k++) {
      free(e[i].metadata[k].key);
      free(e[i].metadata[k].value);
    }
    free(e[i].metadata);
  }
  free(e);
}

/* |*d| = a copy of |s| (NULL stays NULL).  0, or -1 out of memory. */
static int dup0(char **d, const char *s) {
  *d = s != NULL ? strdup(s) : NULL;
  return s != NULL && *d == NULL ? -1 : 0;
}

/* A deep copy of |n| entries with malloc (freed by entries_free_raw), or
   NULL when out of memory (nothing kept). */
static conch_entry_info *entries_copy(const conch_entry_info *src, size_t n) {
  conch_entry_info *d = calloc(n != 0 ? n : 1, sizeof(*d));
  size_t i, k;
  int bad = d == NULL;
  for (i = 0; i < n && !bad; i++) {
    const conch_entry_info *e = &src[i];
    d[i] = *e;
    d[i].metadata = NULL;
    d[i].n_metadata = 0;
    bad = dup0(&d[i].name, e->name) | dup0(&d[i].path, e->path) |
          dup0(&d[i].permissions, e->permissions) |
          dup0(&d[i].owner, e->owner) | dup0(&d[i].group, e->group) |
          dup0(&d[i].symlink_target, e->symlink_target);
    if (!bad && e->n_metadata > 0) {
      d[i].metadata = calloc(e->n_metadata, sizeof(conch_file_meta));
      bad = d[i].metadata == NULL;
    }
    for (k = 0; k < e->n_metadata && !bad; k++) {
      bad = dup0(&d[i].metadata[k].key, e->metadata[k].key) |
            dup0(&d[i].metadata[k].value, e->metadata[k].value);
      d[i].n_metadata++;
    }
  }
  if (bad) {
    entries_free_raw(d, d != NULL ? i : 0);
    return NULL;
  }
  return d;
}

static void fs_keep(Op *op, const conch_entry_info *e, size_t n,
                    const conch_status *st) {
  conch_status_copy(&op->st, st, NULL);
  if (st->code == CONCH_CODE_OK && e != NULL && n > 0) {
    op->ents = entries_copy(e, n);
    if (op->ents == NULL) {
      conch_status_clear(&op->st);
      op->st.code = CONCH_CODE_RESOURCE_EXHAUSTED;
      op->st.origin = CONCH_ORIGIN_LOCAL;
      op->st.local_err = CONCH_ERR_NOMEM;
    } else {
      op->nents = n;
    }
  }
  op->unary_done = 1;
  op->ended = 1;
  op->closed = 1;
  mark(op);
}

static void h_fs_entry(const conch_entry_info *e, const conch_status *st,
                       void *ud) {
  fs_keep(ud, e, e != NULL ? 1 : 0, st);
}

static void h_fs_list(const conch_entry_info *e, size_t n,
                      const conch_status *st, void *ud) {
  fs_keep(ud, e, n, st);
}

static void h_fs_status(const conch_status *st, void *ud) {
  fs_keep(ud, NULL, 0, st);
}

/* A path argument as os.fsencode() makes bytes of it (str, bytes or
   os.PathLike; a str's lone surrogates back to the bytes fs_name() made
   them of): an O& converter into a bytes object, NULL for None. */
static int fs_path_opt(PyObject *o, void *out) {
  if (o == Py_None) {
    *(PyObject **)out = NULL;
    return 1;
  }
  return PyUnicode_FSConverter(o, out);
}

/* Sandbox.fs(what, path, user=None, dst=None, depth=0) -> Op: stat, list,
   mkdir, move, remove.  Its end: a list of entry tuples (empty for
   remove). */
static PyObject *sb_fs(SandboxObject *s, PyObject *args) {
  const char *what, *path, *user = NULL, *dst = NULL;
  PyObject *pb = NULL, *db = NULL, *res;
  unsigned int depth = 0;
  int rv;
  Op *op;
  if (!PyArg_ParseTuple(args, "sO&|zO&I", &what, PyUnicode_FSConverter, &pb,
                        &user, fs_path_opt, &db, &depth)) {
    return NULL;
  }
  op = sb_check(s) == 0 ? op_new(s, OK_FILES) : NULL;
  if (op == NULL) {
    Py_DECREF(pb);
    Py_XDECREF(db);
    return NULL;
  }
  path = PyBytes_AS_STRING(pb);
  dst = db != NULL ? PyBytes_AS_STRING(db) : NULL;
  LOCKED(s, {
    if (strcmp(what, "stat") == 0) {
      rv = conch_files_stat_async(s->sb, path, user, h_fs_entry, op);
    } else if (strcmp(what, "list") == 0) {
      rv = conch_files_list_async(s->sb, path, depth, user, h_fs_list, op);
    } else if (strcmp(what, "mkdir") == 0) {
      rv = conch_files_mkdir_async(s->sb, path, user, h_fs_entry, op);
    } else if (strcmp(what, "move") == 0) {
      rv = dst != NULL
               ? conch_files_move_async(s->sb, path, dst, user, h_fs_entry, op)
               : CONCH_ERR_INVALID;
    } else if (strcmp(what, "remove") == 0) {
      rv = conch_files_remove_async(s->sb, path, user, h_fs_status, op);
    } else {
      rv = CONCH_ERR_INVALID;
    }
  });
  res = op_started(op, rv, what, NULL);
  Py_DECREF(pb);
  Py_XDECREF(db);
  return res;
}

/* A read's ring of bytes objects: |b| (its reference) at the end.  With
   the GIL.  0, or -1 out of memory. */
static int rq_push(Op *op, PyObject *b) {
  if (op->rq_n == op->rq_cap) {
    size_t cap = op->rq_cap != 0 ? 2 * op->rq_cap : 16, i;
    PyObject **nq = PyMem_RawMalloc(cap * sizeof(*nq));
    if (nq == NULL) {
      return -1;
    }
    for (i = 0; i < op->rq_n; i++) {
      nq[i] = op->rq[(op->rq_head + i) % op->rq_cap];
    }
    PyMem_RawFree(op->rq);
    op->rq = nq;
    op->rq_cap = cap;
    op->rq_head = 0;
  }
  op->rq[(op->rq_head + op->rq_n) % op->rq_cap] = b;
  op->rq_n++;
  op->qbytes += (size_t)PyBytes_GET_SIZE(b);
  return 0;
}

/* The first of the ring (its reference), NULL when empty.  Under the
   sandbox's lock (blocking) or on the loop. */
static PyObject *rq_pop(Op *op) {
  PyObject *b;
  if (op->rq_n == 0) {
    return NULL;
  }
  b = op->rq[op->rq_head];
  op->rq_head = (op->rq_head + 1) % op->rq_cap;
  op->rq_n--;
  op->qbytes -= (size_t)PyBytes_GET_SIZE(b);
  return b;
}

/* Takes the ring out of |op| (what it held: |*q|, |*cap|, |*head|, |*n|),
   for rq_release() with the GIL.  Under the lock or on the loop. */
static void rq_take(Op *op, PyObject ***q, size_t *cap, size_t *head,
                    size_t *n) {
  *q = op->rq;
  *cap = op->rq_cap;
  *head = op->rq_head;
  *n = op->rq_n;
  op->rq = NULL;
  op->rq_cap = op->rq_head = op->rq_n = 0;
  if (op->kind == OK_READ) {
    op->qbytes = 0;
  }
}

static void rq_release(PyObject **q, size_t cap, size_t head, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    Py_DECREF(q[(head + i) % cap]);
  }
  PyMem_RawFree(q);
}

/* Reads: each piece made a bytes object at once (the one copy: pop()
   hands that object on), the transfer paused past Q_HIGH; the op's close
   cancels it.  libconch calls it with the sandbox's lock held and, in
   blocking mode, without the GIL: it takes the GIL for the object (the
   order the driver takes them in too: lock, then GIL; nothing waits for
   the lock holding the GIL). */
static int h_fs_sink(const uint8_t *d, size_t n, void *ud) {
  Op *op = ud;
  PyGILState_STATE g;
  PyObject *b;
  int bad = 0;
  if (op->closing) {
    return -1;
  }
  g = PyGILState_Ensure();
  b = PyBytes_FromStringAndSize((const char *)d, (Py_ssize_t)n);
  if (b == NULL || rq_push(op, b) != 0) {
    Py_XDECREF(b);
    PyErr_Clear();
    bad = 1;
  }
  PyGILState_Release(g);
  if (bad) {
    op->nomem = 1;
    return -1;
  }
  if (!op->paused && op->qbytes >= Q_HIGH && op->fx != NULL &&
      conch_files_xfer_pause(op->fx) == 0) {
    op->paused = 1;
  }
  mark(op);
  return 0;
}

/* Writes: the source gives what feed() left in |wbuf|; when it is empty
   and the contents go on, "later" (feed() resumes it). */
static long h_fs_source(uint8_t *buf, size_t cap, void *ud) {
  Op *op = ud;
  size_t k;
  if (op->closing) {
    return -1;
  }
  if (op->woff < op->wlen) {
    k = op->wlen - op->woff;
    if (k > cap) {
      k = cap;
    }
    memcpy(buf, op->wbuf + op->woff, k);
    op->woff += k;
    if (op->woff == op->wlen) {
      op->stdin_ready = 1; /* room for the next piece */
      mark(op);
    }
    return (long)k;
  }
  if (op->weof) {
    return 0;
  }
  op->stdin_ready = 1;
  mark(op);
  return CONCH_FILES_SOURCE_LATER;
}

static void h_fs_done(int rv, const conch_status *st, uint64_t bytes,
                      void *ud) {
  Op *op = ud;
  conch_status_copy(&op->st, st, NULL);
  if (rv != 0 && op->st.code == CONCH_CODE_OK) {
    op->st.code = CONCH_CODE_UNKNOWN;
    op->st.local_err = rv;
  }
  if (op->nomem) {
    conch_status_clear(&op->st);
    op->st.code = CONCH_CODE_RESOURCE_EXHAUSTED;
    op->st.origin = CONCH_ORIGIN_LOCAL;
    op->st.local_err = CONCH_ERR_NOMEM;
  }
  op->moved = bytes;
  op->fx = NULL;
  op->unary_done = 1;
  op->ended = 1;
  op->closed = 1;
  op->stdin_ready = 1;
  mark(op);
}

/* Sandbox.fs_read(path, user=None) -> Op: pop() gives bytes, END at the
   end. */
static PyObject *sb_fs_read(SandboxObject *s, PyObject *args) {
  const char *user = NULL;
  conch_files_io_opts o = CONCH_FILES_IO_OPTS_INIT;
  conch_status st;
  PyObject *pb = NULL, *res;
  int rv;
  Op *op;
  if (!PyArg_ParseTuple(args, "O&|z", PyUnicode_FSConverter, &pb, &user)) {
    return NULL;
  }
  o.user = user;
  op = sb_check(s) == 0 ? op_new(s, OK_READ) : NULL;
  if (op == NULL) {
    Py_DECREF(pb);
    return NULL;
  }
  conch_status_init(&st);
  LOCKED(s, rv = conch_files_read_start(s->sb, PyBytes_AS_STRING(pb), h_fs_sink,
                                        op, &o, h_fs_done, op, &op->fx, &st));
  res = op_started(op, rv, "read", &st);
  conch_status_clear(&st);
  Py_DECREF(pb);
  return res;
}

/* Sandbox.fs_write(path, user=None, metadata=None) -> Op: feed(bytes),
   feed_end(); its end: the written entries. */
static PyObject *fs_write_at(SandboxObject *s, const char *path,
                             const char *user, PyObject *meta) {
  conch_files_io_opts o = CONCH_FILES_IO_OPTS_INIT;
  conch_file_meta *pairs = NULL;
  conch_status st;
  PyObject *res;
  Py_ssize_t n = 0, i;
  int rv;
  Op *op;
  if (meta != Py_None) {
    n = PySequence_Size(meta);
    if (n < 0) {
      return NULL;
    }
    pairs = PyMem_Calloc(n != 0 ? (size_t)n : 1, sizeof(*pairs));
    if (pairs == NULL) {
      return PyErr_NoMemory();
    }
    for (i = 0; i < n; i++) {
      PyObject *kv = PySequence_GetItem(meta, i);
      const char *k = NULL, *v = NULL;
      /* Borrowed from |meta|'s str objects (alive for the call). */
      if (kv != NULL) {
        (void)PyArg_ParseTuple(kv, "ss", &k, &v);
        Py_DECREF(kv);
      }
      if (k == NULL || v == NULL) {
        PyMem_Free(pairs);
        if (!PyErr_Occurred()) {
          PyErr_SetString(PyExc_TypeError, "metadata: (str, str) pairs");
        }
        return NULL;
      }
      pairs[i].key = (char *)k;
      pairs[i].value = (char *)v;
    }
  }
  o.user = user;
  o.metadata = pairs;
  o.n_metadata = (size_t)n;
  op = op_new(s, OK_WRITE);
  if (op == NULL) {
    PyMem_Free(pairs);
    return NULL;
  }
  o.written = &op->ents_out;
  o.n_written = &op->nents;
  conch_status_init(&st);
  LOCKED(s, rv = conch_files_write_start(s->sb, path, h_fs_source, op, &o,
                                         h_fs_done, op, &op->fx, &st));
  PyMem_Free(pairs);
  res = op_started(op, rv, "write", &st);
  conch_status_clear(&st);
  return res;
}

static PyObject *sb_fs_write(SandboxObject *s, PyObject *args) {
  const char *user = NULL;
  PyObject *pb = NULL, *meta = Py_None, *res = NULL;
  if (!PyArg_ParseTuple(args, "O&|zO", PyUnicode_FSConverter, &pb, &user,
                        &meta)) {
    return NULL;
  }
  if (sb_check(s) == 0) {
    res = fs_write_at(s, PyBytes_AS_STRING(pb), user, meta);
  }
  Py_DECREF(pb);
  return res;
}

/* A write's state under the sandbox's lock: -1 ended, 0 the piece in
   flight still going, 1 room for the next. */
static int feed_room(Op *op) {
  if (op->ended || op->fx == NULL) {
    return -1;
  }
  return op->woff < op->wlen ? 0 : 1;
}

/* Op.feed(data) -> True (taken), False (the last piece is still going:
   wait_data() and feed again), None (the write ended: wait_end() says
   how). */
static PyObject *op_feed(Op *op, PyObject *arg) {
  Py_buffer b;
  int r = 0;
  if (op->kind != OK_WRITE) {
    PyErr_SetString(PyExc_TypeError, "not a write");
    return NULL;
  }
  if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) != 0) {
    return NULL;
  }
  /* Copied only once there is room (the source reads |wbuf| on the loop,
     so the copy goes to |wnext|, swapped in); the two buffers are kept
     for the next pieces. */
  LOCKED(op->sbo, r = feed_room(op));
  if (r == 1 && op->wnext_cap < (size_t)b.len) {
    uint8_t *nb = PyMem_RawRealloc(op->wnext, (size_t)b.len);
    if (nb == NULL) {
      PyBuffer_Release(&b);
      return PyErr_NoMemory();
    }
    op->wnext = nb;
    op->wnext_cap = (size_t)b.len;
  }
  if (r == 1 && b.len > 0) {
    memcpy(op->wnext, b.buf, (size_t)b.len);
  }
  PyBuffer_Release(&b);
  if (r == 1) {
    LOCKED(op->sbo, {
      r = feed_room(op);
      if (r == 1) {
        uint8_t *t = op->wbuf;
        size_t tc = op->wcap;
        op->wbuf = op->wnext;
        op->wcap = op->wnext_cap;
        op->wnext = t;
        op->wnext_cap = tc;
        op->wlen = (size_t)b.len;
        op->woff = 0;
        op->stdin_ready = 0;
        (void)conch_files_xfer_resume(op->fx);
      }
    });
  }
  if (r < 0) {
    Py_RETURN_NONE;
  }
  return PyBool_FromLong(r);
}

/* Op.feed_end(): the contents are whole (once what was fed went). */
static PyObject *op_feed_end(Op *op, PyObject *noargs) {
  (void)noargs;
  LOCKED(op->sbo, {
    op->weof = 1;
    if (op->fx != NULL && op->woff >= op->wlen) {
      (void)conch_files_xfer_resume(op->fx);
    }
  });
  Py_RETURN_NONE;
}

/* A watch (conch_watch), blocking only (libconch's watch is): next() in
   slices, signals checked between them. */
typedef struct WatchObject {
  PyObject_HEAD SandboxObject *sbo;
  conch_watch *w;
  int ended;
} WatchObject;

static PyTypeObject WatchType;

static PyObject *sb_fs_watch(SandboxObject *s, PyObject *args) {
  const char *user = NULL;
  PyObject *pb = NULL;
  int recursive = 0, rv;
  conch_status st;
  conch_watch *w = NULL;
  WatchObject *wo;
  if (!PyArg_ParseTuple(args, "O&|zp", PyUnicode_FSConverter, &pb, &user,
                        &recursive)) {
    return NULL;
  }
  if (sb_check(s) != 0) {
    Py_DECREF(pb);
    return NULL;
  }
  if (s->async) {
    Py_DECREF(pb);
    PyErr_SetString(PyExc_RuntimeError,
                    "a watch needs a blocking sandbox (libconch's is)");
    return NULL;
  }
  conch_status_init(&st);
  LOCKED(s, rv = conch_files_watch(s->sb, PyBytes_AS_STRING(pb),
                                   CONCH_WATCH_ENTRY |
                                       (recursive ? CONCH_WATCH_RECURSIVE : 0),
                                   user, &w, &st));
  Py_DECREF(pb);
  if (rv != 0) {
    raise_exc(rv == CONCH_ERR_RPC ? error_from_status(&st, NULL)
                                  : error_from_rv(rv, "watch"));
    conch_status_clear(&st);
    return NULL;
  }
  conch_status_clear(&st);
  wo = PyObject_New(WatchObject, &WatchType);
  if (wo == NULL) {
    LOCKED(s, conch_watch_close(w));
    return NULL;
  }
  Py_INCREF(s);
  wo->sbo = s;
  wo->w = w;
  wo->ended = 0;
  return (PyObject *)wo;
}

/* The watch is gone with its sandbox (conch_sandbox_free closed it). */
static int watch_alive(WatchObject *wo) {
  if (wo->w != NULL && (wo->sbo->sb == NULL || wo->sbo->closed)) {
    wo->w = NULL;
  }
  return wo->w != NULL;
}

/* Watch.next(timeout_ms) -> (type, name, entry tuple or None); None when
   nothing came in |timeout_ms| (-1: wait); END at the end; raises how it
   ended on an error. */
static PyObject *watch_next(WatchObject *wo, PyObject *args) {
  long timeout = -1, slice;
  int rv = 0;
  conch_fs_event ev;
  PyObject *ent;
  if (!PyArg_ParseTuple(args, "|l", &timeout)) {
    return NULL;
  }
  if (!watch_alive(wo)) {
    if (wo->ended) {
      Py_INCREF(END);
      return END;
    }
    PyErr_SetString(PyExc_RuntimeError, "the watch is closed");
    return NULL;
  }
  for (;;) {
    slice = timeout < 0 || timeout > 200 ? 200 : timeout;
    LOCKED(wo->sbo, rv = conch_watch_next(wo->w, &ev, slice));
    if (rv != CONCH_ERR_TIMEOUT) {
      break;
    }
    if (PyErr_CheckSignals() != 0) {
      return NULL;
    }
    if (timeout >= 0) {
      timeout -= slice;
      if (timeout <= 0) {
        Py_RETURN_NONE;
      }
    }
  }
  if (rv == CONCH_ERR_EOF) {
    wo->ended = 1;
    Py_INCREF(END);
    return END;
  }
  if (rv == CONCH_ERR_RPC) {
    wo->ended = 1;
    raise_exc(error_from_status(conch_watch_status(wo->w), NULL));
    return NULL;
  }
  if (rv != 0) {
    raise_exc(error_from_rv(rv, "watch"));
    return NULL;
  }
  if (ev.entry != NULL) {
    ent = make_entry(ev.entry);
    if (ent == NULL) {
      return NULL;
    }
  } else {
    Py_INCREF(Py_None);
    ent = Py_None;
  }
  return Py_BuildValue("(sNN)", conch_fs_event_name(ev.type),
                       fs_name(ev.name != NULL ? ev.name : ""), ent);
}

/* Watch.close(): ends the watch on the server.  Idempotent. */
static PyObject *watch_close(WatchObject *wo, PyObject *noargs) {
  (void)noargs;
  if (watch_alive(wo)) {
    conch_watch *w = wo->w;
    wo->w = NULL;
    LOCKED(wo->sbo, conch_watch_close(w));
  }
  Py_RETURN_NONE;
}

static PyObject *watch_get_closed(WatchObject *wo, void *c) {
  (void)c;
  return PyBool_FromLong(!watch_alive(wo));
}

static void watch_dealloc(WatchObject *wo) {
  if (watch_alive(wo)) {
    conch_watch *w = wo->w;
    wo->w = NULL;
    LOCKED(wo->sbo, conch_watch_close(w));
  }
  Py_CLEAR(wo->sbo);
  PyObject_Free(wo);
}

static PyMethodDef watch_methods[] = {
    {"next", (PyCFunction)watch_next, METH_VARARGS,
     "next(timeout_ms=-1) -> (type, name, entry) | None | END"},
    {"close", (PyCFunction)watch_close, METH_NOARGS, "ends the watch"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef watch_getset[] = {
    {"closed", (getter)watch_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject WatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "conch._conch.Watch",
    .tp_basicsize = sizeof(WatchObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)watch_dealloc,
    .tp_methods = watch_methods,
    .tp_getset = watch_getset,
    .tp_doc = "A watch of a directory (conch_watch)."};

static PyMethodDef sb_methods[] = {
    {"process", (PyCFunction)sb_process, METH_VARARGS,
     "process(kind, cmd, args, env, cwd, user, tag, stdin, cols, rows, "
     "timeout_ms, request_timeout_ms[, tree]) -> Op"},
    {"connect", (PyCFunction)sb_connect, METH_VARARGS,
     "connect(pid, tag, detached) -> Op"},
    {"stdin_open", (PyCFunction)sb_stdin_open, METH_VARARGS,
     "stdin_open(pid, tag, pty) -> Op: an ordered stdin stream"},
    {"unary", (PyCFunction)sb_unary, METH_VARARGS,
     "unary(what, pid=0, tag=None, data=b'', a=0, b=0, pty=False) -> Op"},
    {"open_ops", (PyCFunction)sb_close_all, METH_NOARGS,
     "the ops that hold a handle"},
    {"free", (PyCFunction)sb_free, METH_NOARGS, "frees the native sandbox"},
    {"fs", (PyCFunction)sb_fs, METH_VARARGS,
     "fs(what, path, user=None, dst=None, depth=0) -> Op"},
    {"fs_read", (PyCFunction)sb_fs_read, METH_VARARGS,
     "fs_read(path, user=None) -> Op"},
    {"fs_write", (PyCFunction)sb_fs_write, METH_VARARGS,
     "fs_write(path, user=None, metadata=None) -> Op"},
    {"fs_watch", (PyCFunction)sb_fs_watch, METH_VARARGS,
     "fs_watch(path, user=None, recursive=False) -> Watch"},
    {"_on_read", (PyCFunction)sb_on_read, METH_O, NULL},
    {"_on_write", (PyCFunction)sb_on_write, METH_O, NULL},
    {"_on_timer", (PyCFunction)sb_on_timer, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef sb_getset[] = {
    {"capabilities", (getter)sb_get_caps, NULL, NULL, NULL},
    {"open_count", (getter)sb_get_nopen, NULL, NULL, NULL},
    {"closed", (getter)sb_get_closed, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject SandboxType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "conch._conch.Sandbox",
    .tp_basicsize = sizeof(SandboxObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sb_init,
    .tp_dealloc = (destructor)sb_dealloc,
    .tp_traverse = (traverseproc)sb_traverse,
    .tp_clear = (inquiry)sb_clear,
    .tp_methods = sb_methods,
    .tp_getset = sb_getset,
    .tp_weaklistoffset = offsetof(SandboxObject, weakrefs),
    .tp_doc = "A libconch sandbox (the engine of conch.AsyncSandbox and "
              "conch.Sandbox)."};

/* ---- Ops: results -------------------------------------------------------- */

static PyObject *bytes_or_empty(const uint8_t *p, size_t n) {
  return PyBytes_FromStringAndSize(n > 0 ? (const char *)p : "", (Py_ssize_t)n);
}

static PyObject *make_result(const conch_exec_result *r) {
  PyObject *out = bytes_or_empty(r->out, r->out_len);
  PyObject *err = bytes_or_empty(r->err, r->err_len);
  PyObject *text = bytes_or_empty(r->text, r->text_len);
  PyObject *res = NULL;
  if (out != NULL && err != NULL && text != NULL) {
    res = PyObject_CallFunction(
        ExecResult_cls, "kiOOOOOOzz", (unsigned long)r->pid, r->exit_code, out,
        err, text, r->streamed ? Py_True : Py_False,
        r->exited ? Py_True : Py_False, r->ended ? Py_True : Py_False,
        r->status, r->error);
  }
  Py_XDECREF(out);
  Py_XDECREF(err);
  Py_XDECREF(text);
  return res;
}

static PyObject *str_list(char **v, size_t n) {
  PyObject *t = PyTuple_New((Py_ssize_t)n);
  size_t i;
  if (t == NULL) {
    return NULL;
  }
  for (i = 0; i < n; i++) {
    PyObject *s =
        PyUnicode_DecodeUTF8(v[i] != NULL ? v[i] : "",
                             (Py_ssize_t)strlen(v[i] ? v[i] : ""), "replace");
    if (s == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
  }
  return t;
}

static PyObject *make_list(const conch_process_info *l, size_t n) {
  PyObject *out = PyList_New(0);
  size_t i, k;
  if (out == NULL) {
    return NULL;
  }
  for (i = 0; i < n; i++) {
    PyObject *args = str_list(l[i].args, l[i].nargs), *env = PyDict_New(),
             *info = NULL;
    for (k = 0; env != NULL && k < l[i].nenv; k++) {
      PyObject *v = PyUnicode_DecodeUTF8(
          l[i].env[k].value ? l[i].env[k].value : "",
          (Py_ssize_t)strlen(l[i].env[k].value ? l[i].env[k].value : ""),
          "replace");
      if (v == NULL ||
          PyDict_SetItemString(env, l[i].env[k].name ? l[i].env[k].name : "",
                               v) != 0) {
        Py_XDECREF(v);
        Py_CLEAR(env);
        break;
      }
      Py_DECREF(v);
    }
    if (args != NULL && env != NULL) {
      info = PyObject_CallFunction(ProcessInfo_cls, "kzzOOz",
                                   (unsigned long)l[i].pid, l[i].tag, l[i].cmd,
                                   args, env, l[i].cwd);
    }
    Py_XDECREF(args);
    Py_XDECREF(env);
    if (info == NULL || PyList_Append(out, info) != 0) {
      Py_XDECREF(info);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(info);
  }
  return out;
}

static void list_free(conch_process_info *l, size_t n) {
  size_t i, k;
  for (i = 0; l != NULL && i < n; i++) {
    free(l[i].tag);
    free(l[i].cmd);
    free(l[i].cwd);
    for (k = 0; k < l[i].nargs; k++) {
      free(l[i].args[k]);
    }
    free(l[i].args);
    for (k = 0; k < l[i].nenv; k++) {
      free((char *)l[i].env[k].name);
      free((char *)l[i].env[k].value);
    }
    free(l[i].env);
  }
  free(l);
}

/* The end of |op|: its value (new reference) or NULL with |*exc| set to
   the exception to raise. */
static PyObject *op_end_value(Op *op, PyObject **exc) {
  PyObject *res;
  *exc = NULL;
  if (ONE_SHOT(op->kind)) {
    if (op->st.code != CONCH_CODE_OK) {
      *exc = error_from_status(&op->st, NULL);
      if (*exc == NULL) {
        *exc = PyObject_CallFunction(PyExc_MemoryError, NULL);
      }
      return NULL;
    }
    if (op->is_list) {
      return op->list != NULL ? make_list(op->list, op->nlist) : PyList_New(0);
    }
    if (op->kind == OK_FILES) {
      return make_entries(op->ents, op->ents != NULL ? op->nents : 0);
    }
    if (op->kind == OK_WRITE) {
      return make_entries(op->ents_out, op->ents_out != NULL ? op->nents : 0);
    }
    if (op->kind == OK_READ) {
      return PyLong_FromUnsignedLongLong(op->moved);
    }
    Py_RETURN_NONE;
  }
  res = make_result(&op->res);
  if (res == NULL) {
    return NULL;
  }
  if (op->st.code == CONCH_CODE_OK && op->res.ended) {
    return res;
  }
  *exc = error_from_status(&op->st, res);
  Py_DECREF(res);
  if (*exc == NULL) {
    *exc = PyObject_CallFunction(PyExc_MemoryError, NULL);
  }
  return NULL;
}

/* ---- Ops: methods -------------------------------------------------------- */

/* Whether future |f| is done (cancelled, most likely). */
static int fut_done(PyObject *f) {
  PyObject *d = PyObject_CallMethodNoArgs(f, s_done);
  int r = d == Py_True;
  if (d == NULL) {
    PyErr_Clear();
  }
  Py_XDECREF(d);
  return r;
}

#define FUTURE_METHOD(name, slot)                                              \
  static PyObject *name(Op *op, PyObject *noargs) {                            \
    PyObject *f;                                                               \
    (void)noargs;                                                              \
    if (op->slot != NULL && !fut_done(op->slot)) {                             \
      Py_INCREF(op->slot);                                                     \
      return op->slot;                                                         \
    }                                                                          \
    Py_CLEAR(op->slot); /* cancelled: a new one */                             \
    f = PyObject_CallMethodNoArgs(op->sbo->loop, s_create_future);             \
    if (f == NULL) {                                                           \
      return NULL;                                                             \
    }                                                                          \
    op->slot = f;                                                              \
    Py_INCREF(f);                                                              \
    mark_ready(op);                                                            \
    dispatch(op->sbo);                                                         \
    return f;                                                                  \
  }

FUTURE_METHOD(op_start_future, f_start)
FUTURE_METHOD(op_data_future, f_data)
FUTURE_METHOD(op_end_future_raw, f_end)
FUTURE_METHOD(op_close_future_raw, f_close)

static int c_started(Op *op) { return op->started || op->ended; }
static int c_data(Op *op) {
  return op->qhead != NULL || op->rq_n > 0 || op->ended || op->stdin_ready;
}
static int c_end(Op *op) {
  return ONE_SHOT(op->kind) ? op->unary_done
                            : op->ended && (op->kind != OK_RUN || op->closed);
}
static int c_closed(Op *op) { return op->closed; }

/* Blocking: the pid once started, or raises. */
static PyObject *op_wait_start(Op *op, PyObject *noargs) {
  (void)noargs;
  if (drive(op->sbo, c_started, op) != 0) {
    return NULL;
  }
  if (op->started) {
    return PyLong_FromUnsignedLong(op->pid);
  }
  raise_exc(error_from_status(&op->st, NULL));
  return NULL;
}

static PyObject *op_wait_data(Op *op, PyObject *noargs) {
  (void)noargs;
  if (drive(op->sbo, c_data, op) != 0) {
    return NULL;
  }
  Py_RETURN_NONE;
}

static void drop_queue(Op *op) {
  PyObject **q;
  size_t cap, head, n;
  if (!op->sbo->async) {
    LOCKED(op->sbo, {
      chunks_free(op);
      rq_take(op, &q, &cap, &head, &n);
      q_relieve(op);
    });
  } else {
    chunks_free(op);
    rq_take(op, &q, &cap, &head, &n);
    q_relieve(op);
  }
  rq_release(q, cap, head, n); /* with the GIL */
}

/* The end: drops unread output, for wait(). */
static PyObject *op_end_future(Op *op, PyObject *noargs) {
  op->discard = 1;
  drop_queue(op);
  return op_end_future_raw(op, noargs);
}

static PyObject *op_wait_end(Op *op, PyObject *noargs) {
  PyObject *exc = NULL, *val;
  (void)noargs;
  op->discard = 1;
  drop_queue(op);
  if (drive(op->sbo, c_end, op) != 0) {
    return NULL;
  }
  val = op_end_value(op, &exc);
  if (val == NULL && exc != NULL) {
    raise_exc(exc);
  }
  return val;
}

/* Starts the close (once).  Returns 0 or -1 with an exception. */
static int op_begin_close(Op *op) {
  int rv = 0;
  if (op->closing || op->closed || op->kind == OK_UNARY ||
      op->kind == OK_START || op->kind == OK_FILES) {
    return 0; /* no handle: it ends by itself (or with the sandbox) */
  }
  if (op->kind == OK_READ || op->kind == OK_WRITE) {
    /* Cancelled: its done closes the op on a later turn. */
    op->closing = 1;
    LOCKED(op->sbo, conch_files_xfer_cancel(op->fx));
    return 0;
  }
  if (op->kind == OK_STDIN) {
    /* Cancels a stream not ended: its on_end runs inside the free. */
    op->closing = 1;
    LOCKED(op->sbo, conch_stdin_free(op->in));
    return 0;
  }
  op->closing = 1;
  if (op->p == NULL) {
    op->closed = 1;
    mark(op);
    return 0;
  }
  LOCKED(op->sbo, rv = conch_process_close_async(op->p, h_closed, op));
  if (rv != 0) {
    op->closing = 0;
    raise_exc(error_from_rv(rv, "close"));
    return -1;
  }
  return 0;
}

/* A future resolved with the close's result (0: the end is known;
   CONCH_ERR_RPC: it could not be confirmed), starting the close. */
static PyObject *op_close_future(Op *op, PyObject *noargs) {
  if (op_begin_close(op) != 0) {
    return NULL;
  }
  return op_close_future_raw(op, noargs);
}

/* Blocking close: returns the close's result.  Signals do not stop a
   close (it is bounded by the grace period and the liveness bound): one
   raised meanwhile (KeyboardInterrupt) is raised once it is done. */
static PyObject *op_close(Op *op, PyObject *noargs) {
  (void)noargs;
  if (op_begin_close(op) != 0) {
    return NULL;
  }
  if (!op->sbo->async && drive(op->sbo, c_closed, op) != 0) {
    PyObject *t, *v, *tb;
    int rv;
    PyErr_Fetch(&t, &v, &tb);
    rv = drive_x(op->sbo, c_closed, op, 0);
    PyErr_Restore(t, v, tb);
    (void)rv;
    return NULL;
  }
  return PyLong_FromLong(op->close_rv);
}

/* Non-blocking close for finalizers: starts it, nothing waits. */
static PyObject *op_close_nowait(Op *op, PyObject *noargs) {
  (void)noargs;
  if (op->sbo->sb == NULL) {
    Py_RETURN_NONE;
  }
  if (op_begin_close(op) != 0) {
    return NULL;
  }
  Py_RETURN_NONE;
}

/* Op.stdin_send(data) -> True (queued) or False (the buffer is full:
   wait for data_future()/wait_data() and send again); raises once the
   stream failed. */
static PyObject *op_stdin_send(Op *op, PyObject *arg) {
  Py_buffer b;
  int rv = 0;
  if (op->kind != OK_STDIN) {
    PyErr_SetString(PyExc_TypeError, "not a stdin stream");
    return NULL;
  }
  if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) != 0) {
    return NULL;
  }
  if (op->in == NULL) {
    rv = CONCH_ERR_RPC;
  } else {
    LOCKED(op->sbo, {
      rv = conch_stdin_send(op->in, b.buf, (size_t)b.len);
      if (rv == CONCH_ERR_AGAIN) {
        op->stdin_ready = 0;
      }
    });
  }
  PyBuffer_Release(&b);
  if (rv == 0) {
    Py_RETURN_TRUE;
  }
  if (rv == CONCH_ERR_AGAIN) {
    Py_RETURN_FALSE;
  }
  if (rv == CONCH_ERR_RPC) {
    /* The stream ended: its status, once on_end told it, else None (the
       caller waits for the end to learn why). */
    if (op->ended) {
      raise_exc(error_from_status(&op->st, NULL));
      return NULL;
    }
    Py_RETURN_NONE;
  }
  if (rv == CONCH_ERR_STATE) {
    PyErr_SetString(PyExc_RuntimeError, "the stdin stream was closed");
    return NULL;
  }
  raise_exc(error_from_rv(rv, "stdin"));
  return NULL;
}

static PyObject *op_stdin_end(Op *op, PyObject *noargs) {
  int rv = 0;
  (void)noargs;
  if (op->kind != OK_STDIN) {
    PyErr_SetString(PyExc_TypeError, "not a stdin stream");
    return NULL;
  }
  if (op->in != NULL && !op->ended) {
    LOCKED(op->sbo, rv = conch_stdin_end(op->in));
  }
  (void)rv; /* ended already: the end's status tells */
  Py_RETURN_NONE;
}

/* The next chunk: an OutputChunk; None when none is queued yet; END once
   the output ended; raises the stream's error once every chunk before it
   was taken. */
static PyObject *op_pop(Op *op, PyObject *noargs) {
  chunk *c = NULL;
  PyObject *data, *r;
  int async = op->sbo->async;
  (void)noargs;
  if (op->kind == OK_READ) {
    /* The bytes object the sink made, handed on as it is. */
    int ended = 0;
    data = NULL;
    if (!async) {
      LOCKED(op->sbo, {
        data = rq_pop(op);
        ended = op->ended; /* with the pop: nothing queued after it */
        q_relieve(op);
      });
    } else {
      data = rq_pop(op);
      ended = op->ended;
      q_relieve(op);
    }
    if (data != NULL) {
      return data;
    }
    if (!ended) {
      Py_RETURN_NONE;
    }
    if (op->st.code == CONCH_CODE_OK) {
      Py_INCREF(END);
      return END;
    }
    raise_exc(error_from_status(&op->st, NULL));
    return NULL;
  }
  if (!async) {
    LOCKED(op->sbo, {
      c = op->qhead;
      if (c != NULL) {
        op->qhead = c->next;
        if (op->qhead == NULL) {
          op->qtail = NULL;
        }
        op->qbytes -= c->len;
        q_relieve(op);
      }
    });
  } else {
    c = op->qhead;
    if (c != NULL) {
      op->qhead = c->next;
      if (op->qhead == NULL) {
        op->qtail = NULL;
      }
      op->qbytes -= c->len;
      q_relieve(op);
    }
  }
  if (c == NULL) {
    if (!op->ended) {
      Py_RETURN_NONE;
    }
    if (op->st.code == CONCH_CODE_OK && op->res.ended) {
      Py_INCREF(END);
      return END;
    }
    {
      PyObject *res = make_result(&op->res);
      if (res == NULL) {
        return NULL;
      }
      raise_exc(error_from_status(&op->st, res));
      Py_DECREF(res);
      return NULL;
    }
  }
  data = PyBytes_FromStringAndSize((const char *)c->data, (Py_ssize_t)c->len);
  if (data == NULL) {
    PyMem_RawFree(c);
    return NULL;
  }
  r = PyObject_CallFunctionObjArgs(OutputChunk_cls,
                                   c->stream == CONCH_CHUNK_STDERR ? s_stderr
                                   : c->stream == CONCH_CHUNK_PTY  ? s_pty
                                                                   : s_stdout,
                                   data, NULL);
  Py_DECREF(data);
  PyMem_RawFree(c);
  return r;
}

static PyObject *op_get_pid(Op *op, void *c) {
  (void)c;
  return PyLong_FromUnsignedLong(op->pid);
}

static PyObject *op_get_flag(Op *op, void *c) {
  const char *w = c;
  long v = 0;
  if (strcmp(w, "started") == 0) {
    v = op->started;
  } else if (strcmp(w, "ended") == 0) {
    v = op->ended;
  } else if (strcmp(w, "closed") == 0) {
    v = op->closed;
  } else if (strcmp(w, "closing") == 0) {
    v = op->closing || op->closed;
  }
  return PyBool_FromLong(v);
}

static PyObject *op_get_is_process(Op *op, void *c) {
  (void)c;
  return PyBool_FromLong(op->kind != OK_UNARY && op->kind != OK_START &&
                         op->kind != OK_FILES && op->kind != OK_READ &&
                         op->kind != OK_WRITE);
}

static PyObject *op_get_queued(Op *op, void *c) {
  (void)c;
  return PyLong_FromSize_t(op->qbytes);
}

static void op_dealloc(Op *op) {
  PyObject_GC_UnTrack(op);
  /* Held while the handle is open, so |p| is released here. */
  chunks_free(op);
  rq_release(op->rq, op->rq_cap, op->rq_head, op->rq_n);
  conch_exec_result_clear(&op->res);
  conch_status_clear(&op->st);
  list_free(op->list, op->nlist);
  entries_free_raw(op->ents, op->ents != NULL ? op->nents : 0);
  conch_entries_free(op->ents_out, op->ents_out != NULL ? op->nents : 0);
  PyMem_RawFree(op->wbuf);
  PyMem_RawFree(op->wnext);
  Py_CLEAR(op->f_start);
  Py_CLEAR(op->f_data);
  Py_CLEAR(op->f_end);
  Py_CLEAR(op->f_close);
  Py_CLEAR(op->sbo);
  PyObject_GC_Del(op);
}

static int op_traverse(Op *op, visitproc visit, void *arg) {
  Py_VISIT(op->sbo);
  Py_VISIT(op->f_start);
  Py_VISIT(op->f_data);
  Py_VISIT(op->f_end);
  Py_VISIT(op->f_close);
  return 0;
}

static int op_clear(Op *op) {
  Py_CLEAR(op->f_start);
  Py_CLEAR(op->f_data);
  Py_CLEAR(op->f_end);
  Py_CLEAR(op->f_close);
  return 0;
}

static PyMethodDef op_methods[] = {
    {"start_future", (PyCFunction)op_start_future, METH_NOARGS, NULL},
    {"data_future", (PyCFunction)op_data_future, METH_NOARGS, NULL},
    {"end_future", (PyCFunction)op_end_future, METH_NOARGS, NULL},
    {"result_future", (PyCFunction)op_end_future_raw, METH_NOARGS, NULL},
    {"close_future", (PyCFunction)op_close_future, METH_NOARGS, NULL},
    {"wait_start", (PyCFunction)op_wait_start, METH_NOARGS, NULL},
    {"wait_data", (PyCFunction)op_wait_data, METH_NOARGS, NULL},
    {"wait_end", (PyCFunction)op_wait_end, METH_NOARGS, NULL},
    {"close", (PyCFunction)op_close, METH_NOARGS, NULL},
    {"close_nowait", (PyCFunction)op_close_nowait, METH_NOARGS, NULL},
    {"pop", (PyCFunction)op_pop, METH_NOARGS, NULL},
    {"stdin_send", (PyCFunction)op_stdin_send, METH_O, NULL},
    {"stdin_end", (PyCFunction)op_stdin_end, METH_NOARGS, NULL},
    {"feed", (PyCFunction)op_feed, METH_O, NULL},
    {"feed_end", (PyCFunction)op_feed_end, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef op_getset[] = {
    {"pid", (getter)op_get_pid, NULL, NULL, NULL},
    {"started", (getter)op_get_flag, NULL, NULL, "started"},
    {"ended", (getter)op_get_flag, NULL, NULL, "ended"},
    {"closed", (getter)op_get_flag, NULL, NULL, "closed"},
    {"closing", (getter)op_get_flag, NULL, NULL, "closing"},
    {"queued_bytes", (getter)op_get_queued, NULL, NULL, NULL},
    {"is_process", (getter)op_get_is_process, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject OpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "conch._conch.Op",
    .tp_basicsize = sizeof(Op),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)op_dealloc,
    .tp_traverse = (traverseproc)op_traverse,
    .tp_clear = (inquiry)op_clear,
    .tp_methods = op_methods,
    .tp_getset = op_getset,
    .tp_doc = "One operation on a sandbox (a process handle or a unary "
              "call)."};

/* ---- Module -------------------------------------------------------------- */

static PyObject *mod_register(PyObject *m, PyObject *args) {
  PyObject *errs;
  int i;
  (void)m;
  if (!PyArg_ParseTuple(args, "OOOOOO", &ExecResult_cls, &OutputChunk_cls,
                        &ProcessInfo_cls, &Error_cls,
                        &CapabilityNotSupported_cls, &errs)) {
    return NULL;
  }
  Py_INCREF(ExecResult_cls);
  Py_INCREF(OutputChunk_cls);
  Py_INCREF(ProcessInfo_cls);
  Py_INCREF(Error_cls);
  Py_INCREF(CapabilityNotSupported_cls);
  for (i = 1; i <= 16; i++) {
    PyObject *cls = PyDict_GetItemString(errs, conch_code_name((conch_code)i));
    Py_XINCREF(cls);
    error_by_code[i] = cls;
  }
  Py_RETURN_NONE;
}

static PyObject *mod_local_socket(PyObject *m, PyObject *noargs) {
  char buf[256];
  conch_status st;
  int rv;
  (void)m;
  (void)noargs;
  conch_status_init(&st);
  rv = conch_local_socket(buf, sizeof(buf), &st);
  if (rv != 0) {
    raise_exc(error_from_status(&st, NULL));
    conch_status_clear(&st);
    return NULL;
  }
  return PyUnicode_FromString(buf);
}

static PyMethodDef mod_methods[] = {
    {"_register", mod_register, METH_VARARGS, NULL},
    {"local_socket", mod_local_socket, METH_NOARGS,
     "local_socket() -> str: the private socket of the local server"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_conch",
                                    "The engine of conch: libconch.", -1,
                                    mod_methods};

PyMODINIT_FUNC PyInit__conch(void);
PyMODINIT_FUNC PyInit__conch(void) {
  PyObject *m;
#define INTERN(var, text)                                                      \
  var = PyUnicode_InternFromString(text);                                      \
  if (var == NULL) {                                                           \
    return NULL;                                                               \
  }
  INTERN(s_stdout, "stdout")
  INTERN(s_stderr, "stderr")
  INTERN(s_pty, "pty")
  INTERN(s_done, "done")
  INTERN(s_set_result, "set_result")
  INTERN(s_set_exception, "set_exception")
  INTERN(s_create_future, "create_future")
  INTERN(s_add_reader, "add_reader")
  INTERN(s_add_writer, "add_writer")
  INTERN(s_remove_reader, "remove_reader")
  INTERN(s_remove_writer, "remove_writer")
  INTERN(s_call_later, "call_later")
  INTERN(s_call_soon, "call_soon")
  INTERN(s_cancel, "cancel")
#undef INTERN
  if (PyType_Ready(&SandboxType) < 0 || PyType_Ready(&OpType) < 0 ||
      PyType_Ready(&WatchType) < 0) {
    return NULL;
  }
  m = PyModule_Create(&moddef);
  if (m == NULL) {
    return NULL;
  }
  END = PyUnicode_InternFromString("<end>");
  Py_INCREF(&SandboxType);
  Py_INCREF(&OpType);
  if (PyModule_AddObject(m, "Sandbox", (PyObject *)&SandboxType) != 0 ||
      PyModule_AddObject(m, "Op", (PyObject *)&OpType) != 0 ||
      PyModule_AddObject(m, "END", END) != 0 ||
      PyModule_AddIntConstant(m, "CAP_STREAMING", CONCH_CAP_STREAMING) != 0 ||
      PyModule_AddIntConstant(m, "CAP_STDIN_STREAM", CONCH_CAP_STDIN_STREAM) !=
          0 ||
      PyModule_AddIntConstant(m, "CAP_PTY", CONCH_CAP_PTY) != 0 ||
      PyModule_AddIntConstant(m, "TREE_DEFAULT", CONCH_TREE_DEFAULT) != 0 ||
      PyModule_AddIntConstant(m, "TREE_AUTO", CONCH_TREE_AUTO) != 0 ||
      PyModule_AddIntConstant(m, "TREE_OFF", CONCH_TREE_OFF) != 0 ||
      PyModule_AddIntConstant(m, "TREE_ON", CONCH_TREE_ON) != 0 ||
      PyModule_AddIntConstant(m, "ERR_RPC", CONCH_ERR_RPC) != 0) {
    Py_DECREF(m);
    return NULL;
  }
  Py_INCREF(END);
  return m;
}
