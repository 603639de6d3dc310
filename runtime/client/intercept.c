/* The client's interceptor chains (conch/interceptor.h): registration, a
   call's run through its start hooks (deferred or not), the message,
   header and close hooks, and the calls interceptors use. */
#include <stdint.h>
#include <string.h>

#include <conch/interceptor.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "intercept.h"
#include "mem_int.h"
#include "protocol.h"
#include "status_int.h"

int conch_client_opts_add_interceptor(conch_client_opts *opts,
                                      const conch_call_interceptor *ic) {
  conch_call_interceptor *dst;
  size_t n;
  if (opts == NULL || ic == NULL || ic->struct_size < sizeof(size_t)) {
    return CONCH_ERR_INVALID;
  }
  if (opts->nicept >= CONCH_INTERCEPTORS_MAX) {
    return CONCH_ERR_LIMIT;
  }
  dst = &opts->icept[opts->nicept];
  memset(dst, 0, sizeof(*dst));
  n = ic->struct_size < sizeof(*dst) ? ic->struct_size : sizeof(*dst);
  memcpy(dst, ic, n);
  dst->struct_size = sizeof(*dst);
  opts->nicept++;
  return 0;
}

/* Hooks run as handlers do: a call freed from one is released later. */
static void hook_enter(conch_call *call) { call->in_handler++; }

static void hook_leave(conch_call *call) {
  call->in_handler--;
  if (call->in_handler == 0 && call->user_freed && !call->finished) {
    conch__call_fail(call, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                     "call freed by the application");
  }
}

static const conch_call_interceptor *chain(const conch_call *call) {
  return call->client->o.icept;
}

/* The send hooks, outermost first.  Returns 0 or CONCH_ERR_STATE (the
   call ended). */
static int send_hooks(conch_call *call, const uint8_t **p, size_t *n) {
  const conch_call_interceptor *ics = chain(call);
  conch_icept_run *ir = call->ir;
  unsigned k;
  for (k = 0; k < ir->n; k++) {
    int r;
    if (ics[k].on_send == NULL) {
      continue;
    }
    hook_enter(call);
    r = ics[k].on_send(call, p, n, &ir->state[k], ics[k].user_data);
    hook_leave(call);
    if (r != 0 && !call->finished) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_STATE,
                       "an interceptor refused a request message");
    }
    if (call->finished) {
      return CONCH_ERR_STATE;
    }
  }
  return 0;
}

/* Frames a held message (the chain passed): as send_bytes would, but no
   one waits for the result, so a failure ends the call. */
static void frame_held(conch_call *call, const uint8_t *p, size_t n) {
  int rv;
  if (send_hooks(call, &p, &n) != 0) {
    return;
  }
  rv = conch__proto_frame_message(call, p, n);
  if (rv != 0 && !call->finished) {
    conch__call_fail(call,
                     rv == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                           : CONCH_CODE_INTERNAL,
                     rv, "cannot queue a request message held by an "
                         "interceptor");
  }
}

/* The chain passed: the metadata is checked, the call queued, and what
   was held goes out. */
static void chain_passed(conch_call *call) {
  conch_icept_run *ir = call->ir;
  size_t off = 0;
  ir->started = 1;
  if (conch__call_check_headers(call) != 0) {
    return; /* ended with internal */
  }
  conch__call_queue(call);
  while (!call->finished && off < conch__buf_size(&ir->held)) {
    const uint8_t *h = conch__buf_head(&ir->held) + off;
    uint32_t len;
    memcpy(&len, h, sizeof(len));
    off += sizeof(len) + len;
    frame_held(call, h + sizeof(len), len);
  }
  conch__buf_free(&ir->held, call->client->mem);
  if (!call->finished && call->conn != NULL) {
    conch__conn_resume(call->conn, call);
  }
}

/* Runs the start hooks from the first not yet entered. */
static void chain_run(conch_call *call) {
  const conch_call_interceptor *ics = chain(call);
  conch_icept_run *ir = call->ir;
  while (ir->entered < ir->n) {
    unsigned k = ir->entered;
    int r = CONCH_ICEPT_NEXT;
    if (call->finished) {
      return;
    }
    ir->entered++;
    if (ics[k].on_start != NULL) {
      ir->in_start = 1;
      ir->resumed = 0;
      hook_enter(call);
      r = ics[k].on_start(call, &call->req_headers, &ir->state[k],
                          ics[k].user_data);
      hook_leave(call);
      ir->in_start = 0;
    }
    if (call->finished) {
      return;
    }
    if (r == CONCH_ICEPT_DEFER && !ir->resumed) {
      ir->deferred = 1;
      return;
    }
  }
  if (!call->finished) {
    chain_passed(call);
  }
}

int conch__icept_start(conch_call *call) {
  conch_client *c = call->client;
  unsigned n = c->o.nicept;
  size_t size = sizeof(conch_icept_run) + (n > 1 ? n - 1 : 0) * sizeof(void *);
  conch_icept_run *ir = call->ir; /* a spare call's, of this client */
  if (ir != NULL) {
    memset(ir, 0, size);
  } else {
    ir = conch__calloc(c->mem, 1, size);
    if (ir == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  ir->n = n;
  call->ir = ir;
  chain_run(call);
  if (ir->deferred) {
    conch__client_kick(c); /* its deadline runs meanwhile: tell the loop */
  }
  return 0;
}

int conch_call_icept_resume(conch_call *call) {
  conch_icept_run *ir;
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  ir = call->ir;
  if (ir == NULL || call->finished) {
    return CONCH_ERR_STATE;
  }
  if (ir->in_start && !ir->resumed) {
    ir->resumed = 1; /* from inside the hook that is about to defer */
    return 0;
  }
  if (!ir->deferred) {
    return CONCH_ERR_STATE;
  }
  ir->deferred = 0;
  chain_run(call);
  return 0;
}

int conch__icept_send(conch_call *call, const uint8_t **p, size_t *n,
                      size_t high_water) {
  conch_icept_run *ir = call->ir;
  uint32_t len;
  int rv;
  if (ir->started) {
    return send_hooks(call, p, n);
  }
  if (conch__buf_size(&ir->held) >= high_water) {
    call->want_send_ready = 1;
    return CONCH_ERR_AGAIN;
  }
  if (*n > UINT32_MAX - sizeof(len)) {
    return CONCH_ERR_LIMIT;
  }
  len = (uint32_t)*n;
  rv = conch__buf_reserve(&ir->held, call->client->mem, sizeof(len) + len);
  if (rv == 0) {
    rv = conch__buf_append(&ir->held, call->client->mem, &len, sizeof(len));
  }
  if (rv == 0) {
    rv = conch__buf_append(&ir->held, call->client->mem, *p, len);
  }
  if (rv != 0) {
    return rv; /* send_bytes ends a one-message call */
  }
  return 1;
}

int conch__icept_recv(conch_call *call, const uint8_t **p, size_t *n) {
  const conch_call_interceptor *ics = chain(call);
  conch_icept_run *ir = call->ir;
  unsigned k = ir->entered;
  while (k-- > 0) {
    int r;
    if (ics[k].on_recv == NULL) {
      continue;
    }
    hook_enter(call);
    r = ics[k].on_recv(call, p, n, &ir->state[k], ics[k].user_data);
    hook_leave(call);
    if (r != 0 && !call->finished) {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_STATE,
                       "an interceptor refused a response message");
    }
    if (call->finished) {
      return 1;
    }
  }
  return 0;
}

void conch__icept_headers(conch_call *call) {
  const conch_call_interceptor *ics = chain(call);
  conch_icept_run *ir = call->ir;
  unsigned k = ir->entered;
  while (k-- > 0 && !call->finished) {
    if (ics[k].on_headers != NULL) {
      hook_enter(call);
      ics[k].on_headers(call, &call->headers, &ir->state[k],
                        ics[k].user_data);
      hook_leave(call);
    }
  }
}

void conch__icept_close(conch_call *call) {
  const conch_call_interceptor *ics = chain(call);
  conch_icept_run *ir = call->ir;
  unsigned k = ir->entered;
  if (ir->closed) {
    return;
  }
  ir->closed = 1;
  ir->deferred = 0;
  while (k-- > 0) {
    if (ics[k].on_close != NULL) {
      call->in_handler++; /* a free from here waits for on_close */
      ics[k].on_close(call, &call->status, &call->trailers, &ir->state[k],
                      ics[k].user_data);
      call->in_handler--;
    }
  }
}

void conch__icept_done(conch_call *call) {
  conch_icept_run *ir = call->ir;
  if (!ir->closed && ir->entered > 0) {
    conch__icept_close(call); /* cannot happen: every call ends first */
  }
  ir->closed = 1;
  conch__buf_free(&ir->held, call->client->mem);
}

void conch__icept_drop(conch_call *call) {
  if (call->ir != NULL) {
    conch__free(call->client->mem, call->ir);
    call->ir = NULL;
  }
}

/* ---- For interceptors (and anyone) -------------------------------------- */

int conch_call_abort(conch_call *call, conch_code code, const char *message) {
  if (call == NULL || code == CONCH_CODE_OK || (int)code < 0 ||
      code > CONCH_CODE_UNAUTHENTICATED) {
    return CONCH_ERR_INVALID;
  }
  conch__call_fail(call, code, CONCH_ERR_RPC, "%s",
                   message != NULL ? message : conch_code_name(code));
  return 0;
}

const conch_method *conch_call_method(const conch_call *call) {
  return call != NULL ? call->method : NULL;
}

long conch_call_timeout_left(const conch_call *call) {
  int64_t left;
  if (call == NULL || call->deadline_at == 0) {
    return -1;
  }
  left = call->deadline_at - conch__client_now(call->client);
  return left > 0 ? (long)left : 0;
}

int conch_call_shorten_deadline(conch_call *call, long timeout_ms) {
  conch_client *c;
  int64_t at, grace = 0;
  if (call == NULL || timeout_ms <= 0) {
    return CONCH_ERR_INVALID;
  }
  if (call->submitted || call->finished) {
    return CONCH_ERR_STATE;
  }
  c = call->client;
  at = conch__client_now(c) + timeout_ms;
  if (call->deadline_at != 0) {
    if (at >= call->deadline_at) {
      return 0;
    }
    if (call->deadline.idx != SIZE_MAX) {
      grace = call->deadline.when - call->deadline_at;
    }
  }
  if (conch__timer_reserve(c, 1) != 0) {
    return CONCH_ERR_NOMEM;
  }
  call->deadline_at = at;
  conch__timer_arm(c, &call->deadline, at + grace);
  conch__client_kick(c);
  return 0;
}
