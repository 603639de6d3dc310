/* The parts every generated stub shares (conch/call.h, "For generated
   stubs"): protoc-gen-conch's typed wrappers call these instead of
   carrying their own copies. */
#include <conch/conch.h>
#include <protobuf-c/protobuf-c.h>

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
