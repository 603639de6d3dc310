/* conformance-client: the interfaces between its modules.

   main.c     options, signals, the poll loop over stdin and every client,
              the size-delimited framing of stdin and stdout, the clients
   rpc.c      one ClientCompatRequest: checks, the call's script (sends,
              delays, cancels), and its ClientCompatResponse
   methods.c  the six ConformanceService methods through their generated
              typed stubs

   Everything runs on one thread.  An RPC ends in its on_close handler,
   where its result is written; the RPC itself is freed between two loop
   turns, since the typed stubs retain its handler struct until on_close
   has returned. */
#ifndef CC_H
#define CC_H

#include <stddef.h>
#include <stdint.h>

#include <conch/conch.h>

#include "conformance/v1/client_compat.pb-c.h"
#include "conformance/v1/service.conch.h"

typedef struct cc_app cc_app;
typedef struct cc_rpc cc_rpc;

/* ---- main.c ------------------------------------------------------------- */

/* Returns the client for |req|'s connection settings (protocol, host, port,
   TLS material, compression, receive limit), making it on first use; calls
   with equal settings share it and its connections.  On failure returns
   NULL with a reason in |err| (|errlen| bytes). */
conch_client *
cc_app_client(cc_app *app,
              const Connectrpc__Conformance__V1__ClientCompatRequest *req,
              char *err, size_t errlen);

/* Writes |resp| to stdout, size-delimited.  Returns 0; when stdout is
   gone (the runner is) the process ends here, as on SIGTERM. */
int cc_app_write(cc_app *app,
                 const Connectrpc__Conformance__V1__ClientCompatResponse *resp);

/* Hands a finished |rpc| back: it is freed after the current loop turn. */
void cc_app_retire(cc_app *app, cc_rpc *rpc);

/* ---- rpc.c -------------------------------------------------------------- */

/* Runs |req| (which the RPC takes over; it is freed with the RPC).  Every
   request ends in exactly one response on stdout, written either here (a
   request that cannot be run) or when the call ends.  Returns the RPC, or
   NULL when it is already finished (nothing to retire). */
cc_rpc *cc_rpc_run(cc_app *app,
                   Connectrpc__Conformance__V1__ClientCompatRequest *req);

/* Frees |rpc| (its call was freed when it ended). */
void cc_rpc_free(cc_rpc *rpc);

/* Writes a ClientErrorResult for |test_name| (the request could not be
   run).  Returns as cc_app_write(). */
int cc_write_error(cc_app *app, const char *test_name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* What rpc.c needs of a typed method adapter; methods.c calls back into
   these from the typed handlers. */
void cc_rpc_on_payload(
    cc_rpc *rpc, const Connectrpc__Conformance__V1__ConformancePayload *p);
void cc_rpc_on_send_ready(cc_rpc *rpc);
void cc_rpc_on_close(cc_rpc *rpc, conch_call *call, const conch_status *status,
                     const conch_metadata *trailers);

/* ---- methods.c ---------------------------------------------------------- */

/* The handler structs of the typed stubs, one per method; an RPC holds the
   one of its method, retained by the stubs until on_close has returned. */
typedef union cc_handlers {
  Connectrpc__Conformance__V1__ConformanceService__Unary_Handler unary;
  Connectrpc__Conformance__V1__ConformanceService__ServerStream_Handler
      server_stream;
  Connectrpc__Conformance__V1__ConformanceService__ClientStream_Handler
      client_stream;
  Connectrpc__Conformance__V1__ConformanceService__BidiStream_Handler bidi;
  Connectrpc__Conformance__V1__ConformanceService__Unimplemented_Handler
      unimplemented;
  Connectrpc__Conformance__V1__ConformanceService__IdempotentUnary_Handler
      idempotent_unary;
} cc_handlers;

/* One ConformanceService method, driven through its typed stubs. */
typedef struct cc_method {
  /* The generated descriptor: path, shape, request and response types. */
  const conch_method *method;
  /* Starts the call with typed handlers in |h| (user data |rpc|); unary
     and server-streaming methods send |first| (of the method's request
     type) with it.  Returns as the typed _start function. */
  int (*start)(conch_client *c, const conch_call_opts *opts, cc_handlers *h,
               cc_rpc *rpc, const ProtobufCMessage *first, conch_call **out);
  /* Client streaming and bidi: the typed _send and _close_send; NULL for
     the other shapes. */
  int (*send)(conch_call *call, const ProtobufCMessage *msg);
  int (*close_send)(conch_call *call);
} cc_method;

/* The method named |name| (e.g. "Unary"), or NULL. */
const cc_method *cc_method_find(const char *name);

/* The conch_compression for the suite's Compression enum value, or -1
   when conch has none. */
int cc_compression(int suite);

#endif /* CC_H */
