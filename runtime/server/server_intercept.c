/* The server's interceptor chains (conch/interceptor.h): registration, a
   call's run through its on_call hooks (deferred or not) to the
   handler's on_call, the message hooks and the exactly-once close. */
#include <stdint.h>
#include <string.h>

#include <conch/interceptor.h>

#include "mem_int.h"
#include "server_int.h"
#include "status_int.h"

/* One call's place in the chain: the interceptors that apply to its
   method (indexes into s->icept), their per-call state, how far on_call
   got. */
typedef struct srv_icept_run {
  unsigned n;                                /* of them */
  unsigned char idx[CONCH_INTERCEPTORS_MAX]; /* which, outermost first */
  unsigned entered;      /* on_call reached for [0, entered) */
  unsigned deferred : 1; /* interceptor entered-1 holds the call */
  unsigned in_call : 1;  /* an on_call hook is running */
  unsigned resumed : 1;  /* resumed from inside the deferring hook */
  unsigned passed : 1;   /* the handler had on_call */
  unsigned paused : 1;   /* the chain paused the requests */
  unsigned closed : 1;   /* the close hooks ran */
  unsigned sends : 1;    /* some on_send hook */
  void *state[CONCH_INTERCEPTORS_MAX];
} srv_icept_run;

static int add(conch_server *s, const char *svc,
               const conch_rpc_interceptor *ic) {
  conch_rpc_interceptor *dst;
  size_t n;
  if (s == NULL || ic == NULL || ic->struct_size < sizeof(size_t)) {
    return CONCH_ERR_INVALID;
  }
  if (s->nicept >= CONCH_INTERCEPTORS_MAX) {
    return CONCH_ERR_LIMIT;
  }
  dst = &s->icept[s->nicept];
  memset(dst, 0, sizeof(*dst));
  n = ic->struct_size < sizeof(*dst) ? ic->struct_size : sizeof(*dst);
  memcpy(dst, ic, n);
  dst->struct_size = sizeof(*dst);
  memcpy(s->icept_svc[s->nicept], svc, strlen(svc) + 1); /* checked */
  s->nicept++;
  return 0;
}

int conch_server_add_interceptor(conch_server *s,
                                 const conch_rpc_interceptor *ic) {
  return add(s, "", ic);
}

int conch_server_add_service_interceptor(conch_server *s, const char *service,
                                         const conch_rpc_interceptor *ic) {
  size_t n;
  if (service == NULL) {
    return CONCH_ERR_INVALID;
  }
  n = strlen(service);
  if (n == 0 || n > CONCH_INTERCEPTOR_SERVICE_MAX) {
    return CONCH_ERR_INVALID;
  }
  return add(s, service, ic);
}

/* Whether interceptor |k| of |s| applies to the method at |path|
   ("/pkg.Service/Method"). */
static int applies(const conch_server *s, unsigned k, const char *path) {
  const char *svc = s->icept_svc[k];
  size_t n = strlen(svc);
  return n == 0 || (path[0] == '/' && strncmp(path + 1, svc, n) == 0 &&
                    path[1 + n] == '/');
}

static const conch_rpc_interceptor *ic_at(const conch_rpc *rpc, unsigned i) {
  return &rpc->conn->s->icept[rpc->ir->idx[i]];
}

static void handler_call(conch_rpc *rpc) {
  rpc->method->h.on_call(rpc, rpc->method->user_data);
}

/* Runs the on_call hooks from the first not yet entered, then the
   handler's. */
static void chain_run(conch_rpc *rpc) {
  srv_icept_run *ir = rpc->ir;
  while (ir->entered < ir->n) {
    const conch_rpc_interceptor *ic = ic_at(rpc, ir->entered);
    unsigned k = ir->entered;
    int r = CONCH_ICEPT_NEXT;
    if (rpc->state != SRV_RPC_USER) {
      return;
    }
    ir->entered++;
    if (ic->on_call != NULL) {
      ir->in_call = 1;
      ir->resumed = 0;
      r = ic->on_call(rpc, &rpc->req_md, &ir->state[k], ic->user_data);
      ir->in_call = 0;
    }
    if (rpc->state != SRV_RPC_USER) {
      return; /* short-circuit: finished (the close hooks ran) */
    }
    if (r == CONCH_ICEPT_DEFER && !ir->resumed) {
      ir->deferred = 1;
      if (!rpc->paused && conch_rpc_pause(rpc) == 0) {
        ir->paused = 1; /* requests wait for the handler */
      }
      return;
    }
  }
  ir->passed = 1;
  if (ir->paused) {
    ir->paused = 0;
    (void)conch_rpc_resume(rpc);
  }
  handler_call(rpc);
}

void conch__srv_icept_call(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  const char *path = rpc->method->m.path;
  unsigned char idx[CONCH_INTERCEPTORS_MAX];
  unsigned k, n = 0, sends = 0;
  srv_icept_run *ir;

  for (k = 0; k < s->nicept; k++) {
    if (applies(s, k, path)) {
      idx[n++] = (unsigned char)k;
      sends |= s->icept[k].on_send != NULL;
    }
  }
  if (n == 0) {
    handler_call(rpc);
    return;
  }
  ir = conch__calloc(s->ep.mem, 1, sizeof(*ir));
  if (ir == NULL) {
    conch_status st;
    conch_status_init(&st);
    (void)conch__status_set(&st, conch__srv_rpc_mem(rpc),
                            CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ORIGIN_LOCAL,
                            CONCH_ERR_NOMEM, "out of memory");
    conch__srv_rpc_end(rpc, &st); /* the handler never hears of it */
    conch_status_clear(&st);
    return;
  }
  ir->n = n;
  ir->sends = sends != 0;
  memcpy(ir->idx, idx, n);
  rpc->ir = ir;
  chain_run(rpc);
}

int conch_rpc_icept_resume(conch_rpc *rpc) {
  srv_icept_run *ir;
  if (rpc == NULL) {
    return CONCH_ERR_INVALID;
  }
  ir = rpc->ir;
  if (ir == NULL || rpc->state != SRV_RPC_USER || ir->passed) {
    return CONCH_ERR_STATE;
  }
  if (ir->in_call && !ir->resumed) {
    ir->resumed = 1;
    return 0;
  }
  if (!ir->deferred) {
    return CONCH_ERR_STATE;
  }
  ir->deferred = 0;
  chain_run(rpc);
  return 0;
}

int conch__srv_icept_passed(const conch_rpc *rpc) {
  return rpc->ir == NULL || rpc->ir->passed;
}

int conch__srv_icept_sends(const conch_rpc *rpc) {
  return rpc->ir != NULL && rpc->ir->sends;
}

/* Ends the call with internal after a hook refused a message. */
static void refused(conch_rpc *rpc, const char *what) {
  if (rpc->state == SRV_RPC_USER) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_INTERNAL,
                        "an interceptor refused a %s message", what);
  }
}

int conch__srv_icept_recv(conch_rpc *rpc, const uint8_t **p, size_t *n) {
  srv_icept_run *ir = rpc->ir;
  unsigned i;
  for (i = 0; i < ir->entered; i++) {
    const conch_rpc_interceptor *ic = ic_at(rpc, i);
    if (ic->on_recv != NULL &&
        ic->on_recv(rpc, p, n, &ir->state[i], ic->user_data) != 0) {
      refused(rpc, "request");
    }
    if (rpc->state != SRV_RPC_USER) {
      return 1;
    }
  }
  return 0;
}

int conch__srv_icept_send(conch_rpc *rpc, const uint8_t **p, size_t *n) {
  srv_icept_run *ir = rpc->ir;
  unsigned i = ir->entered;
  while (i-- > 0) {
    const conch_rpc_interceptor *ic = ic_at(rpc, i);
    if (ic->on_send != NULL &&
        ic->on_send(rpc, p, n, &ir->state[i], ic->user_data) != 0) {
      refused(rpc, "response");
    }
    if (rpc->state != SRV_RPC_USER) {
      return CONCH_ERR_STATE;
    }
  }
  return 0;
}

/* The close hooks, innermost first, on |st|. */
static void close_hooks(conch_rpc *rpc, conch_status *st) {
  srv_icept_run *ir = rpc->ir;
  unsigned i = ir->entered;
  ir->closed = 1;
  ir->deferred = 0;
  while (i-- > 0) {
    const conch_rpc_interceptor *ic = ic_at(rpc, i);
    if (ic->on_close != NULL) {
      ic->on_close(rpc, st, &rpc->trl_md, &ir->state[i], ic->user_data);
    }
  }
}

const conch_status *conch__srv_icept_end(conch_rpc *rpc,
                                         const conch_status *st,
                                         conch_status *mine) {
  if (rpc->ir->closed) {
    return st;
  }
  conch_status_init(mine);
  if (conch_status_copy(mine, st, conch__srv_rpc_mem(rpc)) != 0) {
    /* No memory for the copy: the hooks see the code alone. */
    conch_status_clear(mine);
    conch_status_init(mine);
    mine->code = st->code;
    mine->origin = st->origin;
  }
  close_hooks(rpc, mine);
  return mine;
}

void conch__srv_icept_free(conch_rpc *rpc) {
  srv_icept_run *ir = rpc->ir;
  if (!ir->closed) {
    conch_status st;
    conch_status_init(&st);
    st.code = CONCH_CODE_CANCELED;
    st.origin = CONCH_ORIGIN_LOCAL;
    st.local_err = CONCH_ERR_CANCELED;
    close_hooks(rpc, &st);
    conch_status_clear(&st);
  }
  conch__free(rpc->conn->s->ep.mem, ir);
  rpc->ir = NULL;
}

int conch_rpc_shorten_deadline(conch_rpc *rpc, long timeout_ms) {
  conch_server *s;
  int64_t at;
  if (rpc == NULL || timeout_ms <= 0) {
    return CONCH_ERR_INVALID;
  }
  if (rpc->state != SRV_RPC_USER) {
    return CONCH_ERR_STATE;
  }
  s = rpc->conn->s;
  at = conch__srv_now(s) + timeout_ms;
  if (rpc->deadline >= 0 && at >= rpc->deadline) {
    return 0;
  }
  if (conch__srv_timer_arm(s, &rpc->timer, at) != 0) {
    return CONCH_ERR_NOMEM;
  }
  rpc->deadline = at;
  return 0;
}
