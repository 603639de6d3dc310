/* The six ConformanceService methods through their generated typed stubs
   (gen/conformance/v1/service.conch.h).  The runner picks the method at
   run time, so each method gets a small adapter: its typed _start with
   typed handlers that forward to rpc.c, and for the client-streaming and
   bidi methods its typed _send and _close_send.  The request messages
   were unpacked with the method's own request descriptor (rpc.c checks
   that), so the casts to the typed request below are to the message's
   real type. */
#include <string.h>

#include "cc.h"

/* Shorter names for the generated ones. */
#define SVC(x) connectrpc__conformance__v1__conformance_service__##x
typedef Connectrpc__Conformance__V1__ConformanceService__Unary_Call UnaryCall;
typedef Connectrpc__Conformance__V1__ConformanceService__ServerStream_Call
    ServerStreamCall;
typedef Connectrpc__Conformance__V1__ConformanceService__ClientStream_Call
    ClientStreamCall;
typedef Connectrpc__Conformance__V1__ConformanceService__BidiStream_Call
    BidiCall;
typedef Connectrpc__Conformance__V1__ConformanceService__Unimplemented_Call
    UnimplementedCall;
typedef Connectrpc__Conformance__V1__ConformanceService__IdempotentUnary_Call
    IdempotentCall;

/* ---- Unary -------------------------------------------------------------- */

static void unary_message(UnaryCall call,
                          const Connectrpc__Conformance__V1__UnaryResponse *msg,
                          void *user_data) {
  (void)call;
  cc_rpc_on_payload(user_data, msg->payload);
}

static void unary_close(UnaryCall call, const conch_status *status,
                        const conch_metadata *trailers, void *user_data) {
  cc_rpc_on_close(user_data, call.base, status, trailers);
}

static int unary_start(conch_client *c, const conch_call_opts *opts,
                       cc_handlers *h, cc_rpc *rpc,
                       const ProtobufCMessage *first, conch_call **out) {
  UnaryCall call = {NULL};
  int rv;
  memset(&h->unary, 0, sizeof(h->unary));
  h->unary.on_message = unary_message;
  h->unary.on_close = unary_close;
  h->unary.user_data = rpc;
  rv = SVC(unary_start)(
      c, opts, (const Connectrpc__Conformance__V1__UnaryRequest *)first,
      &h->unary, &call);
  *out = call.base;
  return rv;
}

/* ---- ServerStream ------------------------------------------------------- */

static void server_stream_message(
    ServerStreamCall call,
    const Connectrpc__Conformance__V1__ServerStreamResponse *msg,
    void *user_data) {
  (void)call;
  cc_rpc_on_payload(user_data, msg->payload);
}

static void server_stream_close(ServerStreamCall call,
                                const conch_status *status,
                                const conch_metadata *trailers,
                                void *user_data) {
  cc_rpc_on_close(user_data, call.base, status, trailers);
}

static int server_stream_start(conch_client *c, const conch_call_opts *opts,
                               cc_handlers *h, cc_rpc *rpc,
                               const ProtobufCMessage *first,
                               conch_call **out) {
  ServerStreamCall call = {NULL};
  int rv;
  memset(&h->server_stream, 0, sizeof(h->server_stream));
  h->server_stream.on_message = server_stream_message;
  h->server_stream.on_close = server_stream_close;
  h->server_stream.user_data = rpc;
  rv = SVC(server_stream_start)(
      c, opts, (const Connectrpc__Conformance__V1__ServerStreamRequest *)first,
      &h->server_stream, &call);
  *out = call.base;
  return rv;
}

/* ---- ClientStream ------------------------------------------------------- */

static void client_stream_message(
    ClientStreamCall call,
    const Connectrpc__Conformance__V1__ClientStreamResponse *msg,
    void *user_data) {
  (void)call;
  cc_rpc_on_payload(user_data, msg->payload);
}

static void client_stream_ready(ClientStreamCall call, void *user_data) {
  (void)call;
  cc_rpc_on_send_ready(user_data);
}

static void client_stream_close(ClientStreamCall call,
                                const conch_status *status,
                                const conch_metadata *trailers,
                                void *user_data) {
  cc_rpc_on_close(user_data, call.base, status, trailers);
}

static int client_stream_start(conch_client *c, const conch_call_opts *opts,
                               cc_handlers *h, cc_rpc *rpc,
                               const ProtobufCMessage *first,
                               conch_call **out) {
  ClientStreamCall call = {NULL};
  int rv;
  (void)first;
  memset(&h->client_stream, 0, sizeof(h->client_stream));
  h->client_stream.on_message = client_stream_message;
  h->client_stream.on_send_ready = client_stream_ready;
  h->client_stream.on_close = client_stream_close;
  h->client_stream.user_data = rpc;
  rv = SVC(client_stream_start)(c, opts, &h->client_stream, &call);
  *out = call.base;
  return rv;
}

static int client_stream_send(conch_call *base, const ProtobufCMessage *msg) {
  ClientStreamCall call = {base};
  return SVC(client_stream_send)(
      call, (const Connectrpc__Conformance__V1__ClientStreamRequest *)msg);
}

static int client_stream_close_send(conch_call *base) {
  ClientStreamCall call = {base};
  return SVC(client_stream_close_send)(call);
}

/* ---- BidiStream --------------------------------------------------------- */

static void
bidi_message(BidiCall call,
             const Connectrpc__Conformance__V1__BidiStreamResponse *msg,
             void *user_data) {
  (void)call;
  cc_rpc_on_payload(user_data, msg->payload);
}

static void bidi_ready(BidiCall call, void *user_data) {
  (void)call;
  cc_rpc_on_send_ready(user_data);
}

static void bidi_close(BidiCall call, const conch_status *status,
                       const conch_metadata *trailers, void *user_data) {
  cc_rpc_on_close(user_data, call.base, status, trailers);
}

static int bidi_start(conch_client *c, const conch_call_opts *opts,
                      cc_handlers *h, cc_rpc *rpc,
                      const ProtobufCMessage *first, conch_call **out) {
  BidiCall call = {NULL};
  int rv;
  (void)first;
  memset(&h->bidi, 0, sizeof(h->bidi));
  h->bidi.on_message = bidi_message;
  h->bidi.on_send_ready = bidi_ready;
  h->bidi.on_close = bidi_close;
  h->bidi.user_data = rpc;
  rv = SVC(bidi_stream_start)(c, opts, &h->bidi, &call);
  *out = call.base;
  return rv;
}

static int bidi_send(conch_call *base, const ProtobufCMessage *msg) {
  BidiCall call = {base};
  return SVC(bidi_stream_send)(
      call, (const Connectrpc__Conformance__V1__BidiStreamRequest *)msg);
}

static int bidi_close_send(conch_call *base) {
  BidiCall call = {base};
  return SVC(bidi_stream_close_send)(call);
}

/* ---- Unimplemented ------------------------------------------------------ */

static void unimplemented_message(
    UnimplementedCall call,
    const Connectrpc__Conformance__V1__UnimplementedResponse *msg,
    void *user_data) {
  (void)call;
  (void)msg;
  /* The response type has no payload: report an empty one. */
  cc_rpc_on_payload(user_data, NULL);
}

static void unimplemented_close(UnimplementedCall call,
                                const conch_status *status,
                                const conch_metadata *trailers,
                                void *user_data) {
  cc_rpc_on_close(user_data, call.base, status, trailers);
}

static int unimplemented_start(conch_client *c, const conch_call_opts *opts,
                               cc_handlers *h, cc_rpc *rpc,
                               const ProtobufCMessage *first,
                               conch_call **out) {
  UnimplementedCall call = {NULL};
  int rv;
  memset(&h->unimplemented, 0, sizeof(h->unimplemented));
  h->unimplemented.on_message = unimplemented_message;
  h->unimplemented.on_close = unimplemented_close;
  h->unimplemented.user_data = rpc;
  rv = SVC(unimplemented_start)(
      c, opts, (const Connectrpc__Conformance__V1__UnimplementedRequest *)first,
      &h->unimplemented, &call);
  *out = call.base;
  return rv;
}

/* ---- IdempotentUnary ---------------------------------------------------- */

static void idempotent_message(
    IdempotentCall call,
    const Connectrpc__Conformance__V1__IdempotentUnaryResponse *msg,
    void *user_data) {
  (void)call;
  cc_rpc_on_payload(user_data, msg->payload);
}

static void idempotent_close(IdempotentCall call, const conch_status *status,
                             const conch_metadata *trailers, void *user_data) {
  cc_rpc_on_close(user_data, call.base, status, trailers);
}

static int idempotent_start(conch_client *c, const conch_call_opts *opts,
                            cc_handlers *h, cc_rpc *rpc,
                            const ProtobufCMessage *first, conch_call **out) {
  IdempotentCall call = {NULL};
  int rv;
  memset(&h->idempotent_unary, 0, sizeof(h->idempotent_unary));
  h->idempotent_unary.on_message = idempotent_message;
  h->idempotent_unary.on_close = idempotent_close;
  h->idempotent_unary.user_data = rpc;
  rv = SVC(idempotent_unary_start)(
      c, opts,
      (const Connectrpc__Conformance__V1__IdempotentUnaryRequest *)first,
      &h->idempotent_unary, &call);
  *out = call.base;
  return rv;
}

/* ---- The table ---------------------------------------------------------- */

static const cc_method methods[] = {
    {&SVC(unary__method), unary_start, NULL, NULL},
    {&SVC(server_stream__method), server_stream_start, NULL, NULL},
    {&SVC(client_stream__method), client_stream_start, client_stream_send,
     client_stream_close_send},
    {&SVC(bidi_stream__method), bidi_start, bidi_send, bidi_close_send},
    {&SVC(unimplemented__method), unimplemented_start, NULL, NULL},
    {&SVC(idempotent_unary__method), idempotent_start, NULL, NULL},
};

const cc_method *cc_method_find(const char *name) {
  size_t i;
  for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
    /* Paths are "/connectrpc.conformance.v1.ConformanceService/<Method>". */
    const char *slash = strrchr(methods[i].method->path, '/');
    if (slash != NULL && strcmp(slash + 1, name) == 0) {
      return &methods[i];
    }
  }
  return NULL;
}
