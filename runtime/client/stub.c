/* The parts every generated stub shares (conch/call.h, "For generated
   stubs"): protoc-gen-conch's typed wrappers call these instead of
   carrying their own copies. */
#include <conch/conch.h>
#include <protobuf-c/protobuf-c.h>

#include "call_int.h"
#include "client_int.h"
#include "mem_int.h"
#include "status_int.h"

int conch_stub_start(conch_client *c, const conch_method *method,
                     const conch_call_opts *opts,
                     const conch_call_handler *table, const void *handlers,
                     const ProtobufCMessage *req, conch_call **out) {
  /* The runtime only hands user_data back, so const is dropped through
     a union: no cast for a compiler to warn about. */
  union {
    const void *in;
    void *out;
  } ud;
  conch_call *call;
  int rv;

  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  if (handlers == NULL) {
    table = NULL; /* pull mode */
  }
  ud.in = handlers;
  rv = conch_call_start(c, method, opts, table, ud.out, &call);
  if (rv != 0) {
    return rv;
  }
  if (req != NULL) {
    rv = conch_call_send(call, req);
  }
  /* CONCH_ERR_STATE, CONCH_ERR_LIMIT: the call has ended already and its
     status says why.  Any other error leaves a call that can never send
     its request. */
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    if (handlers == NULL) {
      conch_call_free(call);
      return rv;
    }
    /* Its on_close is due exactly once, and a failed start must not
       leave it unrun: the call ends canceled instead. */
    conch_call_cancel(call);
  }
  *out = call;
  return 0;
}

int conch_stub_recv(conch_call *call, const ProtobufCMessageDescriptor *type,
                    int sync, ProtobufCMessage **msg) {
  ProtobufCMessage *m = NULL;
  int rv;

  if (msg == NULL) {
    return CONCH_ERR_INVALID;
  }
  *msg = NULL;
  rv = sync ? conch_call_recv_sync(call, &m) : conch_call_recv(call, &m);
  if (rv != 0) {
    return rv;
  }
  if (m->descriptor != type) {
    conch_message_free(conch_call_client(call), m);
    return CONCH_ERR_INVALID;
  }
  *msg = m;
  return 0;
}

int conch_stub_close_and_recv(conch_call *call,
                              const ProtobufCMessageDescriptor *type,
                              ProtobufCMessage **msg) {
  ProtobufCMessage *m;
  int rv;

  if (msg == NULL) {
    return CONCH_ERR_INVALID;
  }
  *msg = NULL;
  rv = conch_call_close_send(call);
  if (rv != 0 && rv != CONCH_ERR_STATE) { /* STATE: closed before */
    return rv;
  }
  rv = conch_stub_recv(call, type, 1, &m);
  if (rv == CONCH_ERR_EOF) {
    return CONCH_ERR_PROTO; /* ended OK, but without its response */
  }
  if (rv != 0) {
    return rv;
  }
  rv = conch_call_wait_sync(call);
  if (rv != 0) {
    conch_message_free(conch_call_client(call), m);
    return rv;
  }
  *msg = m;
  return 0;
}

/* ---- conch_unary_async ---------------------------------------------------
   A pull-mode call with only on_close: the one response waits in the
   call's queue and is taken there, so message, status and metadata reach
   |done| together and nothing is copied or allocated beyond the call. */

static void unary_close(conch_call *call, const conch_status *status,
                        const conch_metadata *trailers, void *user_data) {
  conch_client *c = call->client;
  ProtobufCMessage *resp = NULL;
  conch_status local;
  const conch_status *st = status;
  uint8_t *payload = NULL;
  int in_arena = 0;
  int rv;

  conch_status_init(&local);
  if (status->code == CONCH_CODE_OK) {
    char err[256];
    rv = conch__call_take_unary(call, &resp, &in_arena, &payload, err,
                                sizeof(err));
    if (rv == CONCH_ERR_CODEC) {
      /* Kept as received (unary_raw) and decoded only now. */
      conch__status_set(&local, c->mem, CONCH_CODE_INTERNAL,
                        CONCH_ORIGIN_LOCAL, CONCH_ERR_CODEC,
                        "cannot decode %s%s%s", call->method->output->name,
                        err[0] ? ": " : "", err);
      st = &local;
    } else if (rv != 0) {
      /* The message of a finished call decodes late only when it arrived
         compressed: memory is all that can fail.  An OK unary call without
         a message is ended with an error by the runtime and never gets
         here; it is reported, not trusted. */
      int nomem = rv == CONCH_ERR_NOMEM;
      conch__status_set(&local, c->mem,
                        nomem ? CONCH_CODE_RESOURCE_EXHAUSTED
                              : CONCH_CODE_INTERNAL,
                        CONCH_ORIGIN_LOCAL, nomem ? rv : CONCH_ERR_PROTO, "%s",
                        nomem ? "out of memory decoding the response"
                              : "unary response without a message");
      st = &local;
    }
  }
  if (call->stub_done != NULL) {
    call->stub_done(resp, st, &call->headers, trailers, call->stub_fn,
                    user_data);
  } else {
    call->unary_done(resp, st, &call->headers, trailers, user_data);
  }
  if (in_arena) {
    conch__arena_reset(c);
    conch__free(c->mem, payload);
  } else {
    conch_message_free(c, resp);
  }
  conch_status_clear(&local);
}

/* Either |done| or |stub_done| with |stub_fn|. */
static int unary_async(conch_client *c, const conch_method *method,
                       const conch_call_opts *opts,
                       const ProtobufCMessage *req, conch_unary_done done,
                       conch_stub_unary_done stub_done, conch_stub_fn stub_fn,
                       void *user_data, conch_call **out) {
  static const conch_call_handler table = {NULL, NULL, NULL, NULL,
                                           unary_close};
  conch_call *call;
  int rv;

  if (out != NULL) {
    *out = NULL;
  }
  if (c == NULL || method == NULL || req == NULL ||
      (done == NULL && (stub_done == NULL || stub_fn == NULL)) ||
      method->kind != CONCH_STREAM_UNARY || method->input == NULL ||
      method->output == NULL || req->descriptor != method->input) {
    return CONCH_ERR_INVALID;
  }
  rv = conch_call_start(c, method, opts, &table, user_data, &call);
  if (rv != 0) {
    return rv;
  }
  /* on_close never runs inside conch_call_start() or conch_call_send():
     setting these now is in time. */
  call->unary_done = done;
  call->stub_done = stub_done;
  call->stub_fn = stub_fn;
  call->auto_free = 1;
  call->unary_raw = 1;
  rv = conch_call_send(call, req);
  /* CONCH_ERR_STATE, CONCH_ERR_LIMIT: the call has ended and its status
     says why.  NOMEM ended it with resource_exhausted; anything else
     leaves a call that can never send its request: it ends canceled.
     Either way done runs once, later. */
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch_call_cancel(call);
  }
  if (out != NULL) {
    *out = call;
  }
  return 0;
}

int conch_unary_async(conch_client *c, const conch_method *method,
                      const conch_call_opts *opts, const ProtobufCMessage *req,
                      conch_unary_done done, void *user_data,
                      conch_call **out) {
  return unary_async(c, method, opts, req, done, NULL, NULL, user_data, out);
}

int conch_stub_unary_async(conch_client *c, const conch_method *method,
                           const conch_call_opts *opts,
                           const ProtobufCMessage *req,
                           conch_stub_unary_done trampoline,
                           conch_stub_fn done, void *user_data,
                           conch_call **out) {
  if (trampoline == NULL || done == NULL) {
    if (out != NULL) {
      *out = NULL;
    }
    return CONCH_ERR_INVALID;
  }
  return unary_async(c, method, opts, req, NULL, trampoline, done, user_data,
                     out);
}

/* ---- conch_stub_stream_async ---------------------------------------------
   A push-mode server-streaming call: each message goes to its typed
   callback as it is decoded (borrowed, as any handler's), the end to
   another; the call frees itself after it. */

static void stream_message(conch_call *call, const ProtobufCMessage *msg,
                           void *user_data) {
  call->stub_msg(msg, call->stub_msg_fn, user_data);
}

static void stream_close(conch_call *call, const conch_status *status,
                         const conch_metadata *trailers, void *user_data) {
  call->stub_sdone(status, &call->headers, trailers, call->stub_fn, user_data);
}

int conch_stub_stream_async(conch_client *c, const conch_method *method,
                            const conch_call_opts *opts,
                            const ProtobufCMessage *req,
                            conch_stub_stream_msg msg_trampoline,
                            conch_stub_fn on_message,
                            conch_stub_stream_done done_trampoline,
                            conch_stub_fn done, void *user_data,
                            conch_call **out) {
  static const conch_call_handler table = {NULL, stream_message, NULL, NULL,
                                           stream_close};
  conch_call *call;
  int rv;

  if (out != NULL) {
    *out = NULL;
  }
  if (c == NULL || method == NULL || req == NULL || msg_trampoline == NULL ||
      on_message == NULL || done_trampoline == NULL || done == NULL ||
      method->kind != CONCH_STREAM_SERVER || method->input == NULL ||
      method->output == NULL || req->descriptor != method->input) {
    return CONCH_ERR_INVALID;
  }
  rv = conch_call_start(c, method, opts, &table, user_data, &call);
  if (rv != 0) {
    return rv;
  }
  /* No handler runs inside conch_call_start() or conch_call_send():
     setting these now is in time. */
  call->stub_msg = msg_trampoline;
  call->stub_msg_fn = on_message;
  call->stub_sdone = done_trampoline;
  call->stub_fn = done;
  call->auto_free = 1;
  rv = conch_call_send(call, req); /* its only request: sending ends them */
  /* As in unary_async(): a call that cannot send its request ends, and
     done runs once, later. */
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch_call_cancel(call);
  }
  if (out != NULL) {
    *out = call;
  }
  return 0;
}
