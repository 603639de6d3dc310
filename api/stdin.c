/* Ordered stdin streams: one StreamInput call (client streaming), a start
   message naming the process, then data messages in order. */
#include <string.h>

#include "api_int.h"

struct conch_stdin {
  conch_sandbox *sb;
  conch_call *call;
  int pty;         /* input goes to the terminal */
  int live_failed; /* the server took nothing for the silence bound */
  conch_status st; /* then: why */
  /* Asynchronous streams (conch_stdin_open_async). */
  conch_stdin_handler h;
  void *ud;
  unsigned async : 1;
  unsigned ended : 1;      /* on_close ran */
  unsigned closed : 1;     /* conch_stdin_end() was called */
  unsigned freeing : 1;    /* conch_stdin_free() runs */
  unsigned free_after : 1; /* freed from inside on_end */
  unsigned in_end : 1;
};

/* Liveness: the server made no progress on the stream for the bound. */
static int silent(conch_stdin *in) {
  in->live_failed = 1;
  conch__sb_silent(&in->st, in->sb->silence_ms);
  conch_call_cancel(in->call);
  return CONCH_ERR_RPC;
}

/* Drives the loop for at most |left| ms (-1: no bound). */
static int run_for(conch_stdin *in, int64_t since) {
  long wait = -1;
  if (in->sb->silence_ms > 0) {
    int64_t left = since + in->sb->silence_ms - conch__api_now_ms();
    if (left <= 0) {
      return silent(in);
    }
    wait = (long)left;
  }
  return conch_client_run(in->sb->client, wait);
}

/* Sends |req|, driving the loop while the send buffer is full, for no
   longer than the silence bound. */
static int send_event(conch_stdin *in, Process__StreamInputRequest *req) {
  int64_t since = conch__api_now_ms();
  for (;;) {
    int rv = conch_call_send(in->call, &req->base);
    if (rv != CONCH_ERR_AGAIN) {
      return rv;
    }
    rv = run_for(in, since);
    if (rv != 0) {
      return rv;
    }
  }
}

/* Waits for the end of the call, for no longer than the silence bound. */
static int wait_end(conch_stdin *in) {
  int64_t since = conch__api_now_ms();
  while (!conch_call_done(in->call)) {
    if (run_for(in, since) != 0) {
      break;
    }
  }
  return conch_call_wait_sync(in->call); /* a cancel ends it at once */
}

static void in_status(const conch_stdin *in, conch_status *st) {
  conch__sb_status(st, in->live_failed ? &in->st : conch_call_status(in->call));
}

static void in_free(conch_stdin *in) {
  conch_call_free(in->call);
  conch_status_clear(&in->st);
  api_free(in->sb->mem, in);
}

static int input_open(conch_sandbox *sb, const conch_selector *sel, int pty,
                      conch_stdin **out, conch_status *st) {
  Process__StreamInputRequest req = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__StartEvent start =
      PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;
  Process__ProcessSelector ps;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  conch_stdin *in;
  int rv;

  if (sb == NULL || sel == NULL || out == NULL ||
      (sel->tag == NULL && sel->pid == 0)) {
    return CONCH_ERR_INVALID;
  }
  if (!(sb->caps & CONCH_CAP_STDIN_STREAM)) {
    return CONCH_ERR_CAPABILITY;
  }
  in = api_calloc(sb->mem, 1, sizeof(*in));
  md = conch__sb_headers(sb, NULL, 0);
  if (in == NULL || md == NULL) {
    api_free(sb->mem, in);
    conch_metadata_free(md);
    return CONCH_ERR_NOMEM;
  }
  in->sb = sb;
  in->pty = pty;
  conch_status_init(&in->st);
  co.headers = md;
  rv = conch_call_start(sb->client, &process__process__stream_input__method,
                        &co, NULL, NULL, &in->call);
  conch_metadata_free(md);
  if (rv != 0) {
    api_free(sb->mem, in);
    return rv;
  }
  conch__sb_selector(sel, &ps);
  start.process = &ps;
  req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
  req.start = &start;
  rv = send_event(in, &req);
  if (rv == 0 && conch_call_done(in->call)) {
    rv = CONCH_ERR_RPC; /* refused at once (e.g. not_found) */
  }
  if (rv != 0) {
    if (rv == CONCH_ERR_RPC || conch_call_done(in->call)) {
      conch_call_wait_sync(in->call);
      in_status(in, st);
      rv = CONCH_ERR_RPC;
    }
    in_free(in);
    return rv;
  }
  *out = in;
  return 0;
}

/* ---- Asynchronous streams ------------------------------------------------ */

static void async_free(conch_stdin *in);

static void async_ready(conch_call *call, void *ud) {
  conch_stdin *in = ud;
  (void)call;
  if (!in->ended && in->h.on_ready != NULL) {
    in->h.on_ready(in, in->ud);
  }
}

static void async_close(conch_call *call, const conch_status *st,
                        const conch_metadata *trailers, void *ud) {
  conch_stdin *in = ud;
  (void)call;
  (void)trailers;
  in->ended = 1;
  if (in->h.on_end != NULL) {
    in->in_end = 1;
    in->h.on_end(in, st, in->ud);
    in->in_end = 0;
  }
  if (in->free_after) {
    async_free(in);
  }
}

static void async_free(conch_stdin *in) {
  conch_call *call = in->call;
  in->call = NULL;
  conch_call_free(call); /* deferred when inside the call's handler */
  conch_status_clear(&in->st);
  api_free(in->sb->mem, in);
}

int conch_stdin_open_async(conch_sandbox *sb, const conch_selector *sel,
                           int pty, const conch_stdin_handler *h,
                           void *user_data, conch_stdin **out) {
  static const conch_call_handler ch = {NULL, NULL, NULL, async_ready,
                                        async_close};
  Process__StreamInputRequest req = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__StartEvent start =
      PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;
  Process__ProcessSelector ps;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  conch_stdin *in;
  int rv;

  if (sb == NULL || sel == NULL || out == NULL ||
      (sel->tag == NULL && sel->pid == 0)) {
    return CONCH_ERR_INVALID;
  }
  if (!(sb->caps & CONCH_CAP_STDIN_STREAM)) {
    return CONCH_ERR_CAPABILITY;
  }
  in = api_calloc(sb->mem, 1, sizeof(*in));
  md = conch__sb_headers(sb, NULL, 0);
  if (in == NULL || md == NULL) {
    api_free(sb->mem, in);
    conch_metadata_free(md);
    return CONCH_ERR_NOMEM;
  }
  in->sb = sb;
  in->pty = pty != 0;
  in->async = 1;
  if (h != NULL) {
    in->h = *h;
  }
  in->ud = user_data;
  conch_status_init(&in->st);
  co.headers = md;
  rv = conch_call_start(sb->client, &process__process__stream_input__method,
                        &co, &ch, in, &in->call);
  conch_metadata_free(md);
  if (rv != 0) {
    api_free(sb->mem, in);
    return rv;
  }
  conch__sb_selector(sel, &ps);
  start.process = &ps;
  req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
  req.start = &start;
  rv = conch_call_send(in->call, &req.base);
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch_call_cancel(in->call); /* on_close still runs, with canceled */
  }
  *out = in;
  return 0;
}

/* The data message of |data| for |in|, sent now. */
static int send_data(conch_stdin *in, const void *data, size_t len,
                     int blocking) {
  Process__StreamInputRequest req = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__DataEvent ev =
      PROCESS__STREAM_INPUT_REQUEST__DATA_EVENT__INIT;
  Process__ProcessInput input = PROCESS__PROCESS_INPUT__INIT;
  if (in->pty) {
    input.input_case = PROCESS__PROCESS_INPUT__INPUT_PTY;
    input.pty.data = (uint8_t *)data;
    input.pty.len = len;
  } else {
    input.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
    input.stdin.data = (uint8_t *)data;
    input.stdin.len = len;
  }
  ev.input = &input;
  req.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA;
  req.data = &ev;
  return blocking ? send_event(in, &req) : conch_call_send(in->call, &req.base);
}

int conch_stdin_send(conch_stdin *in, const void *data, size_t len) {
  int rv;
  if (in == NULL || (data == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (!in->async || in->closed) {
    return CONCH_ERR_STATE;
  }
  if (in->ended) {
    return CONCH_ERR_RPC;
  }
  rv = send_data(in, data, len, 0);
  if (rv == CONCH_ERR_STATE && conch_call_done(in->call)) {
    return CONCH_ERR_RPC;
  }
  return rv;
}

int conch_stdin_end(conch_stdin *in) {
  if (in == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!in->async || in->closed || in->ended) {
    return CONCH_ERR_STATE;
  }
  in->closed = 1;
  return conch_call_close_send(in->call) == 0 ? 0 : CONCH_ERR_STATE;
}

void conch_stdin_free(conch_stdin *in) {
  if (in == NULL || !in->async || in->freeing) {
    return;
  }
  if (in->in_end) {
    in->free_after = 1;
    return;
  }
  in->freeing = 1;
  async_free(in);
}

/* ---- Blocking streams --------------------------------------------------- */

int conch_stdin_open(conch_sandbox *sb, const conch_selector *sel,
                     conch_stdin **out, conch_status *st) {
  return input_open(sb, sel, 0, out, st);
}

int conch_pty_input_open(conch_sandbox *sb, const conch_selector *sel,
                         conch_stdin **out, conch_status *st) {
  return input_open(sb, sel, 1, out, st);
}

int conch_stdin_write(conch_stdin *in, const void *data, size_t len) {
  int rv;
  if (in == NULL || (data == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (in->async) {
    return CONCH_ERR_STATE;
  }
  if (in->live_failed) {
    return CONCH_ERR_RPC;
  }
  rv = send_data(in, data, len, 1);
  if (rv == CONCH_ERR_STATE && conch_call_done(in->call)) {
    return CONCH_ERR_RPC; /* the server ended the stream: see close */
  }
  return rv;
}

int conch_stdin_close(conch_stdin *in, conch_status *st) {
  int rv;
  if (in == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (in->async) {
    return CONCH_ERR_STATE;
  }
  conch_call_close_send(in->call);
  rv = wait_end(in);
  if (rv == CONCH_ERR_RPC) {
    in_status(in, st);
  }
  {
    /* The empty StreamInputResponse, if any. */
    ProtobufCMessage *m;
    while (conch_call_recv(in->call, &m) == 0) {
      conch_message_free(in->sb->client, m);
    }
  }
  in_free(in);
  return rv;
}
