/* Sandboxes: the target, its defaults and headers, and the unary RPCs of
   process.Process (List, SendSignal, SendInput, CloseStdin, Update). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <conch/local.h>

#include "api_int.h"

/* ---- Sandbox ------------------------------------------------------------ */

/* "Basic " + base64("<user>:"), padded as HTTP Basic requires. */
static char *basic_auth(const conch_mem *mem, const char *user) {
  static const char tbl[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t n = strlen(user) + 1, i, o = 6;
  char *out = api_malloc(mem, 6 + (n + 2) / 3 * 4 + 1);
  if (out == NULL) {
    return NULL;
  }
  memcpy(out, "Basic ", 6);
  for (i = 0; i < n; i += 3) {
    uint32_t v = 0;
    size_t k, take = n - i < 3 ? n - i : 3;
    for (k = 0; k < 3; k++) {
      uint8_t b = 0;
      if (k < take) {
        b = (uint8_t)(i + k < n - 1 ? user[i + k] : ':');
      }
      v = (v << 8) | b;
    }
    out[o++] = tbl[(v >> 18) & 63];
    out[o++] = tbl[(v >> 12) & 63];
    out[o++] = take > 1 ? tbl[(v >> 6) & 63] : '=';
    out[o++] = take > 2 ? tbl[v & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

static long or_default(long v, long dflt) { return v == 0 ? dflt : v; }

/* url NULL: the local server's socket as a "unix:" URL in |url|, once a
   server answers there (or |o->autostart| started one). */
static int local_url(const conch_sandbox_opts *o, char *url, size_t cap,
                     conch_status *st) {
  char sock[128], msg[400];
  int rv;

  if (o->autostart) {
    rv = conch_local_serve(
        o->serve_exe, o->request_timeout_ms > 0 ? o->request_timeout_ms : 0,
        sock, sizeof(sock), st);
  } else {
    rv = conch_local_socket(sock, sizeof(sock), st);
    if (rv == 0 && !conch_local_answers(sock)) {
      snprintf(msg, sizeof(msg),
               "no local server answers on %s: start one with `conch serve` "
               "(it listens there by default), or set "
               "conch_sandbox_opts.autostart",
               sock);
      conch__sb_fail(st, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT, msg);
      rv = CONCH_ERR_CONNECT;
    }
  }
  if (rv == 0) {
    snprintf(url, cap, "unix:%s", sock);
  }
  return rv;
}

int conch_sandbox_new(conch_sandbox **out, const conch_sandbox_opts *opts) {
  return conch_sandbox_open(out, opts, NULL);
}

int conch_sandbox_open(conch_sandbox **out, const conch_sandbox_opts *opts,
                       conch_status *st) {
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_sandbox *sb;
  const conch_mem *mem;
  char local[140];
  int rv;

  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (opts != NULL) {
    size_t n = opts->struct_size < sizeof(o) ? opts->struct_size : sizeof(o);
    if (n < sizeof(size_t)) {
      return CONCH_ERR_INVALID;
    }
    memcpy(&o, opts, n);
  }
  if (o.timeout_ms < -1 || o.request_timeout_ms < -1 || o.kill_grace_ms < 0 ||
      o.keepalive_ms < -1 || (o.keepalive_ms > 0 && o.keepalive_ms < 1000)) {
    return CONCH_ERR_INVALID;
  }
  if (o.tree == CONCH_TREE_DEFAULT) {
    const char *env = getenv("CONCH_TREE");
    o.tree = conch__tree_parse(env);
    if (o.tree < 0) {
      char msg[160];
      snprintf(msg, sizeof(msg),
               "CONCH_TREE must be off, on or auto, not '%.80s'", env);
      conch__sb_fail(st, CONCH_CODE_INVALID_ARGUMENT, CONCH_ERR_INVALID, msg);
      return CONCH_ERR_INVALID;
    }
  } else if (o.tree < CONCH_TREE_AUTO || o.tree > CONCH_TREE_ON) {
    return CONCH_ERR_INVALID;
  }
  if (o.url == NULL) {
    rv = local_url(&o, local, sizeof(local), st);
    if (rv != 0) {
      return rv;
    }
  }
  sb = api_calloc(conch_mem_default(), 1, sizeof(*sb));
  if (sb == NULL) {
    return CONCH_ERR_NOMEM;
  }
  sb->procs.prev = sb->procs.next = &sb->procs;
  sb->watches.prev = sb->watches.next = &sb->watches;
  rv = conch_client_new(&sb->client, o.url != NULL ? o.url : local,
                        o.client_opts);
  if (rv != 0) {
    api_free(conch_mem_default(), sb);
    return rv;
  }
  mem = conch_client_mem(sb->client);
  sb->mem = mem;
  sb->timeout_ms = or_default(o.timeout_ms, 60000);
  sb->request_timeout_ms = or_default(o.request_timeout_ms, 60000);
  sb->kill_grace_ms = or_default(o.kill_grace_ms, 2000);
  sb->keepalive_ms = or_default(o.keepalive_ms, CONCH_KEEPALIVE_DEFAULT_MS);
  /* Three intervals without a word, plus slack: room for a server whose
     loop is busy for a while (conch serve spawning a thousand processes
     under sanitizers stalls for 20 s) without waiting forever. */
  sb->silence_ms = sb->keepalive_ms > 0 ? 3 * sb->keepalive_ms + 5000 : 0;
  sb->caps = o.capabilities != 0 ? o.capabilities : CONCH_CAP_ALL;
  sb->tree = o.tree;
  sb->max_output =
      o.max_output_bytes != 0 ? o.max_output_bytes : CONCH_MAX_OUTPUT_DEFAULT;
  /* HTTP/2 PINGs, unless the caller's client options chose otherwise. */
  rv = sb->keepalive_ms > 0
           ? conch_client_keepalive_default(sb->client, sb->keepalive_ms,
                                            2 * sb->keepalive_ms)
           : 0;
  if (rv == 0) {
    rv = conch_metadata_new(&sb->base, mem);
  }
  if (rv == 0 && o.headers != NULL) {
    rv = conch_metadata_append(sb->base, o.headers);
  }
  if (rv == 0 && o.access_token != NULL) {
    rv = conch_metadata_add_str(sb->base, "x-access-token", o.access_token);
  }
  if (rv == 0 && o.user != NULL) {
    sb->auth = basic_auth(mem, o.user);
    if (sb->auth == NULL) {
      rv = CONCH_ERR_NOMEM;
    }
  }
  if (rv != 0) {
    conch_metadata_free(sb->base);
    api_free(mem, sb->auth);
    conch_client_free(sb->client);
    api_free(conch_mem_default(), sb);
    return rv;
  }
  *out = sb;
  return 0;
}

void conch_sandbox_free(conch_sandbox *sb) {
  if (sb == NULL) {
    return;
  }
  conch__proc_close_all(sb);
  conch__files_close_all(sb);
  conch_metadata_free(sb->base);
  api_free(sb->mem, sb->auth);
  conch_client_free(sb->client);
  api_free(conch_mem_default(), sb);
}

conch_client *conch_sandbox_native(conch_sandbox *sb) {
  return sb != NULL ? sb->client : NULL;
}

unsigned conch_sandbox_capabilities(const conch_sandbox *sb) {
  return sb != NULL ? sb->caps : 0;
}

/* ---- Helpers ------------------------------------------------------------ */

conch_metadata *conch__sb_headers(conch_sandbox *sb, const char *user,
                                  int keepalive) {
  conch_metadata *md;
  int rv;
  if (conch_metadata_new(&md, sb->mem) != 0) {
    return NULL;
  }
  rv = conch_metadata_append(md, sb->base);
  if (rv == 0 && user != NULL) {
    char *auth = basic_auth(sb->mem, user);
    rv = auth != NULL ? conch_metadata_add_str(md, "authorization", auth)
                      : CONCH_ERR_NOMEM;
    api_free(sb->mem, auth);
  } else if (rv == 0 && sb->auth != NULL) {
    rv = conch_metadata_add_str(md, "authorization", sb->auth);
  }
  if (rv == 0 && keepalive) {
    /* The server sends a keepalive event after this many seconds without
       output: liveness for the stream, and idle streams kept open through
       proxies.  Off: what the SDKs send. */
    char secs[24];
    snprintf(secs, sizeof(secs), "%ld",
             sb->keepalive_ms > 0 ? (sb->keepalive_ms + 999) / 1000 : 50L);
    rv = conch_metadata_add_str(md, "keepalive-ping-interval", secs);
  }
  if (rv != 0) {
    conch_metadata_free(md);
    return NULL;
  }
  return md;
}

void conch__sb_selector(const conch_selector *sel,
                        Process__ProcessSelector *out) {
  process__process_selector__init(out);
  if (sel->tag != NULL) {
    out->selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_TAG;
    out->tag = (char *)sel->tag;
  } else {
    out->selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
    out->pid = sel->pid;
  }
}

void conch__sb_status(conch_status *st, const conch_status *src) {
  if (st != NULL && src != NULL) {
    conch_status_copy(st, src, NULL);
  }
}

void conch__sb_fail(conch_status *st, conch_code code, int err,
                    const char *msg) {
  conch_status s;
  if (st == NULL) {
    return;
  }
  conch_status_init(&s);
  s.code = code;
  s.origin = CONCH_ORIGIN_LOCAL;
  s.local_err = err;
  s.message = (char *)msg;
  conch_status_copy(st, &s, NULL);
}

int64_t conch__api_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void conch__sb_silent(conch_status *st, long ms) {
  char msg[160];
  snprintf(msg, sizeof(msg),
           "the server said nothing for %ld ms (keepalive): it is gone, "
           "frozen or unreachable",
           ms);
  conch__sb_fail(st, CONCH_CODE_UNAVAILABLE, CONCH_ERR_TIMEOUT, msg);
}

int conch__sb_drive(conch_sandbox *sb, const int *flag) {
  while (!*flag) {
    int rv = conch_client_run(sb->client, -1);
    if (rv != 0) {
      return rv;
    }
  }
  return 0;
}

static conch_call_opts call_opts(conch_sandbox *sb, conch_metadata *md) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  o.headers = md;
  o.timeout_ms = sb->request_timeout_ms > 0 ? sb->request_timeout_ms : 0;
  return o;
}

int conch__sb_unary(conch_sandbox *sb, const conch_method *m,
                    const ProtobufCMessage *req, const char *user,
                    ProtobufCMessage **resp, conch_status *st) {
  conch_metadata *md = conch__sb_headers(sb, user, 0);
  conch_call_opts o;
  conch_status local;
  int rv;

  *resp = NULL;
  if (md == NULL) {
    return CONCH_ERR_NOMEM;
  }
  o = call_opts(sb, md);
  conch_status_init(&local);
  rv = conch_unary_sync(sb->client, m, &o, req, resp, &local, NULL, NULL);
  conch_metadata_free(md);
  if (rv == CONCH_ERR_RPC) {
    conch__sb_status(st, &local);
  }
  conch_status_clear(&local);
  return rv;
}

typedef struct unary_ctx {
  void (*done)(const conch_status *, const ProtobufCMessage *, void *);
  void *ud;
  const conch_mem *mem;
} unary_ctx;

/* Pull mode: the response (if any) is taken once the call has ended and
   lent to |done|. */
static void unary_close(conch_call *call, const conch_status *st,
                        const conch_metadata *trailers, void *ud) {
  unary_ctx *u = ud;
  ProtobufCMessage *m = NULL;
  (void)trailers;
  if (st->code == CONCH_CODE_OK && conch_call_recv(call, &m) != 0) {
    m = NULL;
  }
  u->done(st, m, u->ud);
  conch_message_free(conch_call_client(call), m);
  api_free(u->mem, u);
  conch_call_free(call);
}

int conch__sb_unary_async(conch_sandbox *sb, const conch_method *m,
                          const ProtobufCMessage *req,
                          void (*done)(const conch_status *st,
                                       const ProtobufCMessage *resp, void *ud),
                          void *ud) {
  return conch__sb_unary_async_to(sb, m, req, 0, done, ud);
}

int conch__sb_unary_async_to(conch_sandbox *sb, const conch_method *m,
                             const ProtobufCMessage *req, long timeout_ms,
                             void (*done)(const conch_status *st,
                                          const ProtobufCMessage *resp,
                                          void *ud),
                             void *ud) {
  return conch__sb_unary_async_as(sb, m, req, timeout_ms, NULL, done, ud);
}

int conch__sb_unary_async_as(conch_sandbox *sb, const conch_method *m,
                             const ProtobufCMessage *req, long timeout_ms,
                             const char *user,
                             void (*done)(const conch_status *st,
                                          const ProtobufCMessage *resp,
                                          void *ud),
                             void *ud) {
  static const conch_call_handler h = {NULL, NULL, NULL, NULL, unary_close};
  conch_metadata *md = conch__sb_headers(sb, user, 0);
  unary_ctx *u = api_calloc(sb->mem, 1, sizeof(*u));
  conch_call_opts o;
  conch_call *call;
  int rv;

  if (md == NULL || u == NULL) {
    conch_metadata_free(md);
    api_free(sb->mem, u);
    return CONCH_ERR_NOMEM;
  }
  u->done = done;
  u->ud = ud;
  u->mem = sb->mem;
  o = call_opts(sb, md);
  if (timeout_ms > 0) {
    o.timeout_ms = timeout_ms;
  }
  rv = conch_call_start(sb->client, m, &o, &h, u, &call);
  conch_metadata_free(md);
  if (rv != 0) {
    api_free(sb->mem, u);
    return rv;
  }
  rv = conch_call_send(call, req);
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch_call_cancel(call); /* on_close still runs, with canceled */
  }
  return 0;
}

/* ---- By pid or tag ------------------------------------------------------ */

static int check_sel(const conch_selector *sel) {
  return sel != NULL && (sel->tag != NULL || sel->pid != 0);
}

int conch_kill(conch_sandbox *sb, const conch_selector *sel, int signal,
               conch_status *st) {
  Process__SendSignalRequest req = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector ps;
  ProtobufCMessage *resp;
  int rv;
  if (sb == NULL || !check_sel(sel)) {
    return CONCH_ERR_INVALID;
  }
  conch__sb_selector(sel, &ps);
  req.process = &ps;
  req.signal = (Process__Signal)signal;
  rv = conch__sb_unary(sb, &process__process__send_signal__method, &req.base,
                       NULL, &resp, st);
  conch_message_free(sb->client, resp);
  return rv;
}

/* Status-only asynchronous calls (kill, stdin, resize). */
typedef struct kill_ctx {
  void (*done)(const conch_status *, void *);
  void *ud;
  const conch_mem *mem;
} kill_ctx;

static void kill_done(const conch_status *st, const ProtobufCMessage *resp,
                      void *ud) {
  kill_ctx *k = ud;
  (void)resp;
  if (k->done != NULL) {
    k->done(st, k->ud);
  }
  api_free(k->mem, k);
}

int conch_kill_async(conch_sandbox *sb, const conch_selector *sel, int signal,
                     void (*done)(const conch_status *st, void *user_data),
                     void *user_data) {
  Process__SendSignalRequest req = PROCESS__SEND_SIGNAL_REQUEST__INIT;
  Process__ProcessSelector ps;
  kill_ctx *k;
  int rv;
  if (sb == NULL || !check_sel(sel)) {
    return CONCH_ERR_INVALID;
  }
  k = api_calloc(sb->mem, 1, sizeof(*k));
  if (k == NULL) {
    return CONCH_ERR_NOMEM;
  }
  k->done = done;
  k->ud = user_data;
  k->mem = sb->mem;
  conch__sb_selector(sel, &ps);
  req.process = &ps;
  req.signal = (Process__Signal)signal;
  rv = conch__sb_unary_async(sb, &process__process__send_signal__method,
                             &req.base, kill_done, k);
  if (rv != 0) {
    api_free(sb->mem, k);
  }
  return rv;
}

/* The requests of the selector calls, built on the caller's stack. */
typedef struct sel_req {
  Process__ProcessSelector ps;
  Process__ProcessInput in;
  Process__PTY pty;
  Process__PTY__Size size;
  union {
    Process__SendInputRequest send;
    Process__CloseStdinRequest close;
    Process__UpdateRequest update;
  } r;
} sel_req;

static const ProtobufCMessage *input_req(sel_req *q, const conch_selector *sel,
                                         const void *data, size_t len,
                                         int pty) {
  conch__sb_selector(sel, &q->ps);
  process__process_input__init(&q->in);
  if (pty) {
    q->in.input_case = PROCESS__PROCESS_INPUT__INPUT_PTY;
    q->in.pty.data = (uint8_t *)data;
    q->in.pty.len = len;
  } else {
    q->in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
    q->in.stdin.data = (uint8_t *)data;
    q->in.stdin.len = len;
  }
  process__send_input_request__init(&q->r.send);
  q->r.send.process = &q->ps;
  q->r.send.input = &q->in;
  return &q->r.send.base;
}

static const ProtobufCMessage *close_req(sel_req *q,
                                         const conch_selector *sel) {
  conch__sb_selector(sel, &q->ps);
  process__close_stdin_request__init(&q->r.close);
  q->r.close.process = &q->ps;
  return &q->r.close.base;
}

static const ProtobufCMessage *resize_req(sel_req *q, const conch_selector *sel,
                                          uint32_t cols, uint32_t rows) {
  conch__sb_selector(sel, &q->ps);
  process__pty__init(&q->pty);
  process__pty__size__init(&q->size);
  q->size.cols = cols;
  q->size.rows = rows;
  q->pty.size = &q->size;
  process__update_request__init(&q->r.update);
  q->r.update.process = &q->ps;
  q->r.update._pty_case = PROCESS__UPDATE_REQUEST___PTY_PTY;
  q->r.update.pty = &q->pty;
  return &q->r.update.base;
}

static int unary_blocking(conch_sandbox *sb, const conch_method *m,
                          const ProtobufCMessage *req, conch_status *st) {
  ProtobufCMessage *resp;
  int rv = conch__sb_unary(sb, m, req, NULL, &resp, st);
  conch_message_free(sb->client, resp);
  return rv;
}

static int status_async(conch_sandbox *sb, const conch_method *m,
                        const ProtobufCMessage *req,
                        void (*done)(const conch_status *, void *),
                        void *user_data) {
  kill_ctx *k = api_calloc(sb->mem, 1, sizeof(*k));
  int rv;
  if (k == NULL) {
    return CONCH_ERR_NOMEM;
  }
  k->done = done;
  k->ud = user_data;
  k->mem = sb->mem;
  rv = conch__sb_unary_async(sb, m, req, kill_done, k);
  if (rv != 0) {
    api_free(sb->mem, k);
  }
  return rv;
}

static int input_args_ok(conch_sandbox *sb, const conch_selector *sel,
                         const void *data, size_t len) {
  return sb != NULL && check_sel(sel) && (data != NULL || len == 0);
}

int conch_send_stdin(conch_sandbox *sb, const conch_selector *sel,
                     const void *data, size_t len, conch_status *st) {
  sel_req q;
  if (!input_args_ok(sb, sel, data, len)) {
    return CONCH_ERR_INVALID;
  }
  return unary_blocking(sb, &process__process__send_input__method,
                        input_req(&q, sel, data, len, 0), st);
}

int conch_pty_send(conch_sandbox *sb, const conch_selector *sel,
                   const void *data, size_t len, conch_status *st) {
  sel_req q;
  if (!input_args_ok(sb, sel, data, len)) {
    return CONCH_ERR_INVALID;
  }
  return unary_blocking(sb, &process__process__send_input__method,
                        input_req(&q, sel, data, len, 1), st);
}

int conch_close_stdin(conch_sandbox *sb, const conch_selector *sel,
                      conch_status *st) {
  sel_req q;
  if (sb == NULL || !check_sel(sel)) {
    return CONCH_ERR_INVALID;
  }
  return unary_blocking(sb, &process__process__close_stdin__method,
                        close_req(&q, sel), st);
}

int conch_pty_resize(conch_sandbox *sb, const conch_selector *sel,
                     uint32_t cols, uint32_t rows, conch_status *st) {
  sel_req q;
  if (sb == NULL || !check_sel(sel) || cols == 0 || rows == 0) {
    return CONCH_ERR_INVALID;
  }
  return unary_blocking(sb, &process__process__update__method,
                        resize_req(&q, sel, cols, rows), st);
}

int conch_send_stdin_async(conch_sandbox *sb, const conch_selector *sel,
                           const void *data, size_t len, int pty,
                           void (*done)(const conch_status *st,
                                        void *user_data),
                           void *user_data) {
  sel_req q;
  if (!input_args_ok(sb, sel, data, len)) {
    return CONCH_ERR_INVALID;
  }
  return status_async(sb, &process__process__send_input__method,
                      input_req(&q, sel, data, len, pty != 0), done, user_data);
}

int conch_close_stdin_async(conch_sandbox *sb, const conch_selector *sel,
                            void (*done)(const conch_status *st,
                                         void *user_data),
                            void *user_data) {
  sel_req q;
  if (sb == NULL || !check_sel(sel)) {
    return CONCH_ERR_INVALID;
  }
  return status_async(sb, &process__process__close_stdin__method,
                      close_req(&q, sel), done, user_data);
}

int conch_pty_resize_async(
    conch_sandbox *sb, const conch_selector *sel, uint32_t cols, uint32_t rows,
    void (*done)(const conch_status *st, void *user_data), void *user_data) {
  sel_req q;
  if (sb == NULL || !check_sel(sel) || cols == 0 || rows == 0) {
    return CONCH_ERR_INVALID;
  }
  return status_async(sb, &process__process__update__method,
                      resize_req(&q, sel, cols, rows), done, user_data);
}

/* ---- List --------------------------------------------------------------- */

char *conch__api_strdup(const conch_mem *m, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = api_malloc(m, n);
  if (p != NULL) {
    memcpy(p, s, n);
  }
  return p;
}

/* Lists handed to the caller use the C library's allocator. */
#define LM conch_mem_default()

static char *dup_or_null(const char *s) {
  return s != NULL ? conch__api_strdup(LM, s) : NULL;
}

void conch_process_list_free(conch_process_info *list, size_t n) {
  size_t i, k;
  if (list == NULL) {
    return;
  }
  for (i = 0; i < n; i++) {
    conch_process_info *p = &list[i];
    api_free(LM, p->tag);
    api_free(LM, p->cmd);
    api_free(LM, p->cwd);
    for (k = 0; k < p->nargs; k++) {
      api_free(LM, p->args[k]);
    }
    api_free(LM, p->args);
    for (k = 0; k < p->nenv; k++) {
      api_free(LM, (char *)p->env[k].name);
      api_free(LM, (char *)p->env[k].value);
    }
    api_free(LM, p->env);
  }
  api_free(LM, list);
}

static int copy_info(conch_process_info *dst, const Process__ProcessInfo *src) {
  const Process__ProcessConfig *cfg = src->config;
  size_t k, skip = 0;
  const char *cmd;
  char *const *args;
  size_t nargs;
  dst->pid = src->pid;
  if (src->_tag_case == PROCESS__PROCESS_INFO___TAG_TAG) {
    dst->tag = dup_or_null(src->tag);
    if (dst->tag == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  if (cfg == NULL) {
    return 0;
  }
  /* The tree leader's own arguments are not the caller's business. */
  cmd = cfg->cmd;
  args = cfg->args;
  nargs = cfg->n_args;
  if (conch__tree_unwrap(cmd, args, nargs, &skip)) {
    cmd = args[skip];
    args += skip + 1;
    nargs -= skip + 1;
  }
  dst->cmd = dup_or_null(cmd);
  if (cmd != NULL && dst->cmd == NULL) {
    return CONCH_ERR_NOMEM;
  }
  if (cfg->_cwd_case == PROCESS__PROCESS_CONFIG___CWD_CWD) {
    dst->cwd = dup_or_null(cfg->cwd);
    if (dst->cwd == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  if (nargs > 0) {
    dst->args = api_calloc(LM, nargs, sizeof(char *));
    if (dst->args == NULL) {
      return CONCH_ERR_NOMEM;
    }
    for (k = 0; k < nargs; k++) {
      dst->args[k] = conch__api_strdup(LM, args[k]);
      if (dst->args[k] == NULL) {
        return CONCH_ERR_NOMEM;
      }
      dst->nargs++;
    }
  }
  if (cfg->n_envs > 0) {
    dst->env = api_calloc(LM, cfg->n_envs, sizeof(conch_env));
    if (dst->env == NULL) {
      return CONCH_ERR_NOMEM;
    }
    for (k = 0; k < cfg->n_envs; k++) {
      dst->env[k].name = conch__api_strdup(LM, cfg->envs[k]->key);
      dst->env[k].value = conch__api_strdup(LM, cfg->envs[k]->value);
      dst->nenv++;
      if (dst->env[k].name == NULL || dst->env[k].value == NULL) {
        return CONCH_ERR_NOMEM;
      }
    }
  }
  return 0;
}

/* Converts a ListResponse into a list for the caller. */
static int to_list(const Process__ListResponse *lr, conch_process_info **list,
                   size_t *n) {
  conch_process_info *out;
  size_t i;
  int rv;
  out = api_calloc(LM, lr->n_processes > 0 ? lr->n_processes : 1, sizeof(*out));
  if (out == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (i = 0; i < lr->n_processes; i++) {
    rv = copy_info(&out[i], lr->processes[i]);
    if (rv != 0) {
      conch_process_list_free(out, i + 1);
      return rv;
    }
  }
  *list = out;
  *n = lr->n_processes;
  return 0;
}

int conch_list(conch_sandbox *sb, conch_process_info **list, size_t *n,
               conch_status *st) {
  Process__ListRequest req = PROCESS__LIST_REQUEST__INIT;
  ProtobufCMessage *resp;
  int rv;

  if (sb == NULL || list == NULL || n == NULL) {
    return CONCH_ERR_INVALID;
  }
  *list = NULL;
  *n = 0;
  rv = conch__sb_unary(sb, &process__process__list__method, &req.base, NULL,
                       &resp, st);
  if (rv != 0) {
    return rv;
  }
  rv = to_list((const Process__ListResponse *)resp, list, n);
  conch_message_free(sb->client, resp);
  return rv;
}

typedef struct list_ctx {
  void (*done)(const conch_process_info *, size_t, const conch_status *,
               void *);
  void *ud;
  const conch_mem *mem;
} list_ctx;

static void list_done(const conch_status *st, const ProtobufCMessage *resp,
                      void *ud) {
  list_ctx *l = ud;
  conch_process_info *list = NULL;
  size_t n = 0;
  if (st->code == CONCH_CODE_OK && resp != NULL &&
      to_list((const Process__ListResponse *)resp, &list, &n) != 0) {
    conch_status nomem;
    conch_status_init(&nomem);
    nomem.code = CONCH_CODE_RESOURCE_EXHAUSTED;
    nomem.origin = CONCH_ORIGIN_LOCAL;
    nomem.local_err = CONCH_ERR_NOMEM;
    l->done(NULL, 0, &nomem, l->ud);
  } else {
    l->done(list, n, st, l->ud);
  }
  conch_process_list_free(list, n);
  api_free(l->mem, l);
}

int conch_list_async(conch_sandbox *sb,
                     void (*done)(const conch_process_info *list, size_t n,
                                  const conch_status *st, void *user_data),
                     void *user_data) {
  Process__ListRequest req = PROCESS__LIST_REQUEST__INIT;
  list_ctx *l;
  int rv;
  if (sb == NULL || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  l = api_calloc(sb->mem, 1, sizeof(*l));
  if (l == NULL) {
    return CONCH_ERR_NOMEM;
  }
  l->done = done;
  l->ud = user_data;
  l->mem = sb->mem;
  rv = conch__sb_unary_async(sb, &process__process__list__method, &req.base,
                             list_done, l);
  if (rv != 0) {
    api_free(sb->mem, l);
  }
  return rv;
}
