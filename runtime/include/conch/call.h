/*
 * conch - a Connect/gRPC client for C
 *
 * call.h: RPCs of all four shapes over one API.
 *
 * A call is started with conch_call_start(), fed with conch_call_send() and
 * conch_call_close_send(), and ends exactly once: its on_close handler runs
 * with the final conch_status.  Responses arrive either pushed (on_message)
 * or pulled (conch_call_recv()) when no message handler is set.  The caller
 * owns the call handle and releases it with conch_call_free(), also after
 * the call has ended; calls started with conch_call_opts.auto_free or by
 * conch_unary_async() (one callback with response and status) or
 * conch_stub_stream_async() (the typed server-streaming _async() of
 * generated stubs) free themselves.
 */
#ifndef CONCH_CALL_H
#define CONCH_CALL_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/client.h>
#include <conch/export.h>
#include <conch/metadata.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The four RPC shapes. */
typedef enum conch_stream_kind {
  CONCH_STREAM_UNARY = 0,
  CONCH_STREAM_CLIENT = 1,
  CONCH_STREAM_SERVER = 2,
  CONCH_STREAM_BIDI = 3
} conch_stream_kind;

/** MethodOptions.idempotency_level of the .proto. */
typedef enum conch_idempotency {
  CONCH_IDEMPOTENCY_UNKNOWN = 0,
  CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS = 1,
  CONCH_IDEMPOTENCY_IDEMPOTENT = 2
} conch_idempotency;

/**
 * Describes one RPC method.  Generated stubs provide one per method; static
 * storage is typical.  Retained by calls for their lifetime.
 */
typedef struct conch_method {
  /** "/package.Service/Method" (no package: "/Service/Method"). */
  const char *path;
  conch_stream_kind kind;
  /** protobuf-c descriptors; NULL means raw bytes (conch_call_send_raw(),
      on_raw_message, conch_call_recv_raw()). */
  const ProtobufCMessageDescriptor *input;
  const ProtobufCMessageDescriptor *output;
  conch_idempotency idempotency;
} conch_method;

typedef struct conch_call conch_call;

/**
 * Per-call options.  Initialise with CONCH_CALL_OPTS_INIT; the library reads
 * only the fields that fall inside |struct_size|.
 */
typedef struct conch_call_opts {
  size_t struct_size;
  /** Deadline, from the start of the call; 0 = none.  Sent as
      Connect-Timeout-Ms / grpc-timeout and enforced here. */
  long timeout_ms;
  /** Request metadata, copied at start.  May be NULL. */
  const conch_metadata *headers;
  /** Compression of request messages: CONCH_COMPRESSION_DEFAULT (the
      client's), a conch_compression, or the id of a compression registered
      on the client's options; any other value makes the start fail with
      CONCH_ERR_INVALID. */
  int send_compression;
  /** How long past the deadline the client waits before ending the call
      itself; 0 = not at all.  For servers that act on the deadline and
      report it (envd ends a process at its deadline and sends its end):
      the server's answer then arrives before the local timer fires. */
  long deadline_grace_ms;
  /** 1: a Connect unary call of a method marked NO_SIDE_EFFECTS goes as
      an HTTP GET, its request in the query (cacheable by HTTP caches);
      any other call ignores it and goes as POST, and so does a request
      whose URL would pass the client's limit
      (conch_client_opts_set_get_max_url()). */
  int http_get;
  /** 1: the call frees itself once its on_close returns (or at the end,
      when it has no on_close), as if conch_call_free() were called there;
      the application then never calls conch_call_free() and must not use
      the call after on_close.  For push-mode calls driven by a loop, not
      for the blocking functions (*_sync), which read the call after it
      ended.  Without it a finished call's memory stays until
      conch_call_free() or conch_client_free(). */
  int auto_free;
  void *reserved[6];
} conch_call_opts;

#define CONCH_CALL_OPTS_INIT                                                   \
  {                                                                            \
    sizeof(conch_call_opts), 0, NULL, CONCH_COMPRESSION_DEFAULT, 0, 0, 0,      \
    { 0 }                                                                      \
  }

/**
 * What a call reports.  Every member may be NULL.  All pointers passed to a
 * handler are borrowed until it returns.  Handlers run on the thread that
 * drives the client, never from inside conch_call_start().
 */
typedef struct conch_call_handler {
  /** Response headers arrived (not for a trailers-only response). */
  void (*on_headers)(conch_call *call, const conch_metadata *headers,
                     void *user_data);
  /** A response message of a typed method. */
  void (*on_message)(conch_call *call, const ProtobufCMessage *msg,
                     void *user_data);
  /** A response message of a raw method (output descriptor NULL). */
  void (*on_raw_message)(conch_call *call, const uint8_t *data, size_t len,
                         void *user_data);
  /** The send buffer has room again after a send returned CONCH_ERR_AGAIN. */
  void (*on_send_ready)(conch_call *call, void *user_data);
  /** The call ended.  Runs exactly once for every started call.  |trailers|
      is never NULL.  The call may be freed from here. */
  void (*on_close)(conch_call *call, const conch_status *status,
                   const conch_metadata *trailers, void *user_data);
} conch_call_handler;

/**
 * Starts a call of |method| on |c|.  |opts| may be NULL.  |handler| is copied;
 * NULL means pull mode with no completion handler.  |user_data| is passed to
 * every handler.  On success |*out| is the call and the request headers go
 * out on the next loop turn; for every started call on_close runs exactly
 * once.  Problems of the RPC itself (bad request metadata, deadline, failed
 * connection) are reported through on_close, not here.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, bad |opts|) or
 * CONCH_ERR_NOMEM; on failure no handler ever runs.
 */
CONCH_EXTERN int conch_call_start(conch_client *c, const conch_method *method,
                                  const conch_call_opts *opts,
                                  const conch_call_handler *handler,
                                  void *user_data, conch_call **out);

/**
 * Queues |msg| (serialized now; |msg| is borrowed for the call only).  Unary
 * and server-streaming calls take exactly one message, which also
 * half-closes them; if it cannot be queued the call ends (with
 * resource_exhausted when memory ran out).
 *
 * Returns 0; CONCH_ERR_AGAIN if the send buffer is over its high-water mark
 * (nothing queued; on_send_ready follows); CONCH_ERR_STATE after
 * close_send, after a unary request, or once the call ended (the status says
 * why); CONCH_ERR_INVALID (wrong message type); CONCH_ERR_LIMIT (over the send
 * limit: the call ends with resource_exhausted); CONCH_ERR_CODEC or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_call_send(conch_call *call, const ProtobufCMessage *msg);

/**
 * conch_call_send() for raw methods: |data| is a serialized message.
 *
 * Returns what conch_call_send() returns; CONCH_ERR_INVALID also for a method
 * that is not raw, or |data| NULL with |len| > 0.
 */
CONCH_EXTERN int conch_call_send_raw(conch_call *call, const void *data,
                                     size_t len);

/**
 * Half-closes the request stream: no more messages.  The response may still
 * be streaming.  Returns 0 or CONCH_ERR_STATE (already closed).
 */
CONCH_EXTERN int conch_call_close_send(conch_call *call);

/**
 * Cancels the call: RST_STREAM CANCEL is sent and the call ends with
 * canceled, unless it has already ended.  Messages delivered before stay
 * delivered.  on_close runs on the next loop turn.  Returns 0.
 */
CONCH_EXTERN int conch_call_cancel(conch_call *call);

/**
 * Back-pressure for a reader with a queue of its own (push mode, or pull
 * mode taking messages faster than it can use them): from now on no
 * flow-control credit goes back to the server for |call|'s responses, so
 * that it stops sending once it used its window (the stream window of
 * conch_client_opts_set_windows(), 4 MiB by default; over HTTP/1.1 the
 * client stops reading the connection at the same bound).  What was
 * already received is still delivered.  The bound is in wire bytes: over
 * a compressed response the messages it holds may decode to more.
 * Idempotent; a call that ends lets go of its window all the same.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |call|).
 */
CONCH_EXTERN int conch_call_pause(conch_call *call);

/**
 * Ends conch_call_pause(): the credit held back goes to the server at once.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |call|).
 */
CONCH_EXTERN int conch_call_resume(conch_call *call);

/**
 * Whether |call| is paused (conch_call_pause()).
 *
 * Returns 1 while it is, else 0 (also for NULL).
 */
CONCH_EXTERN int conch_call_paused(const conch_call *call);

/**
 * Frees |call|.  A call that has not ended is canceled first, and its
 * on_close runs before this returns.  From inside one of the call's own
 * handlers the release is deferred until the handler returns.  NULL is
 * accepted.
 */
CONCH_EXTERN void conch_call_free(conch_call *call);

/**
 * Pull mode (no on_message/on_raw_message handler): takes the next response
 * message.  On 0, |*msg| is owned by the caller, to be released with
 * conch_message_free().  Flow-control credit is returned as messages are
 * taken, so an unread call slows its sender.
 *
 * Returns 0; CONCH_ERR_AGAIN (none yet); CONCH_ERR_EOF (the call ended OK
 * and every message was taken); CONCH_ERR_RPC (ended with an error, every
 * message before it taken: see conch_call_status()); CONCH_ERR_STATE (push
 * mode or a raw method).
 */
CONCH_EXTERN int conch_call_recv(conch_call *call, ProtobufCMessage **msg);

/**
 * conch_call_recv() for raw methods.  |*data| is borrowed until the next
 * recv on |call| or its release.
 *
 * Returns 0 (|*data| and |*len| set) or what conch_call_recv() returns;
 * CONCH_ERR_STATE also for a method that is not raw; CONCH_ERR_NOMEM when
 * memory for the message ran out (it stays queued).
 */
CONCH_EXTERN int conch_call_recv_raw(conch_call *call, const uint8_t **data,
                                     size_t *len);

/** Frees a message returned by conch_call_recv() or a *_sync function. */
CONCH_EXTERN void conch_message_free(conch_client *c, ProtobufCMessage *msg);

/**
 * Non-zero once the call has ended.
 *
 * Returns 1 or 0 (0 for NULL).
 */
CONCH_EXTERN int conch_call_done(const conch_call *call);

/** The final status once ended, else NULL.  Borrowed from |call|. */
CONCH_EXTERN const conch_status *conch_call_status(const conch_call *call);

/** Response headers (empty until they arrive).  Borrowed, never NULL. */
CONCH_EXTERN const conch_metadata *conch_call_headers(const conch_call *call);

/** Response trailers (empty until the end).  Borrowed, never NULL. */
CONCH_EXTERN const conch_metadata *conch_call_trailers(const conch_call *call);

/** The |user_data| given at start. */
CONCH_EXTERN void *conch_call_user_data(const conch_call *call);

/** The client of |call|. */
CONCH_EXTERN conch_client *conch_call_client(const conch_call *call);

/**
 * Inside on_message or on_raw_message: the size in bytes of the message
 * being delivered, serialized as the codec produced it (after
 * decompression).  0 outside those handlers, in pull mode, and for NULL.
 */
CONCH_EXTERN size_t conch_call_message_size(const conch_call *call);

/* ---- Unary in one callback --------------------------------------------- */

/**
 * The end of a conch_unary_async() call, all in one: |resp| is the response
 * (NULL when the call failed), |status| the final status (code OK exactly
 * when |resp| is not NULL), |headers| and |trailers| the response metadata
 * (never NULL; empty when none arrived).  Everything passed is borrowed
 * until done returns: copy what must outlive it (conch_status_copy(),
 * conch_metadata_append(); a message with protobuf_c_message_pack() or
 * by field).  Runs on the thread that drives the client.
 */
typedef void (*conch_unary_done)(const ProtobufCMessage *resp,
                                 const conch_status *status,
                                 const conch_metadata *headers,
                                 const conch_metadata *trailers,
                                 void *user_data);

/**
 * Starts a unary call of |method| with request |req| (serialized now;
 * borrowed for this call only) and reports its end through |done|, once,
 * with |user_data|.  |opts| may be NULL; its auto_free is implied: the call
 * frees itself when |done| returns, and the application never frees it.
 *
 * |out| may be NULL.  When not, |*out| is the call, for conch_call_cancel()
 * and the getters only (never conch_call_free()), valid until |done|
 * returns; NULL when the start fails.
 *
 * On 0, |done| runs exactly once, on a later turn of the client's loop,
 * never from inside this function, also when the request could not be
 * queued (the status then says why: resource_exhausted for memory,
 * canceled otherwise).  On any other return |done| never runs and no call
 * exists.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |c|, |method|, |req| or |done|, a
 * method that is not unary or not typed, bad |opts|) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_unary_async(conch_client *c, const conch_method *method,
                                   const conch_call_opts *opts,
                                   const ProtobufCMessage *req,
                                   conch_unary_done done, void *user_data,
                                   conch_call **out);

/* ---- Blocking layer: poll loops on the calling thread ------------------ */

/**
 * Sends |msg|, driving the client while the send buffer is full.  Returns as
 * conch_call_send() but never CONCH_ERR_AGAIN.
 */
CONCH_EXTERN int conch_call_send_sync(conch_call *call,
                                      const ProtobufCMessage *msg);

/**
 * Receives the next message (pull mode), driving the client until one is
 * ready or the call ends.  Returns as conch_call_recv() but never
 * CONCH_ERR_AGAIN.
 */
CONCH_EXTERN int conch_call_recv_sync(conch_call *call, ProtobufCMessage **msg);

/**
 * Drives the client until |call| has ended.  Unread messages stay queued.
 * Returns 0 when the status is OK, CONCH_ERR_RPC otherwise.
 */
CONCH_EXTERN int conch_call_wait_sync(conch_call *call);

/**
 * A whole unary call.  On 0, |*resp| is owned by the caller
 * (conch_message_free()).  On CONCH_ERR_RPC, |st| (initialised by the
 * caller; may be NULL) holds the status and |*resp| is NULL.  |headers| and
 * |trailers|, when not NULL, receive the response metadata (appended).
 *
 * Returns 0, CONCH_ERR_RPC, CONCH_ERR_INVALID, CONCH_ERR_RECURSIVE or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_unary_sync(conch_client *c, const conch_method *method,
                                  const conch_call_opts *opts,
                                  const ProtobufCMessage *req,
                                  ProtobufCMessage **resp, conch_status *st,
                                  conch_metadata *headers,
                                  conch_metadata *trailers);

/* ---- For generated stubs ----------------------------------------------
 * What protoc-gen-conch's typed wrappers are made of.  Hand-written code
 * may use them too, but the typed wrappers are the friendlier door.
 */

/**
 * Starts a call of |method| and, when |req| is not NULL (unary and
 * server-streaming calls), sends it at once.  |table| is used only when
 * |handlers| is not NULL: |handlers| becomes its user_data, read-only (the
 * runtime hands it back and never writes through it).  With no handlers
 * the call is in pull mode.
 *
 * A request the call could not take ends the call: with no handlers the
 * call is freed and the error returned; with handlers it ends canceled
 * and its on_close runs once, as for any call.  A call that ended before
 * its request went out (CONCH_ERR_STATE, CONCH_ERR_LIMIT from the send)
 * is returned in |*out| with 0: its status says why.
 *
 * Returns 0 (|*out| set), or what conch_call_start() or conch_call_send()
 * return.
 */
CONCH_EXTERN int conch_stub_start(conch_client *c, const conch_method *method,
                                  const conch_call_opts *opts,
                                  const conch_call_handler *table,
                                  const void *handlers,
                                  const ProtobufCMessage *req,
                                  conch_call **out);

/**
 * conch_call_recv(), or conch_call_recv_sync() when |sync|, that hands
 * out only a message of the descriptor |type|: any other (a call struct
 * made by hand for another method) is freed and CONCH_ERR_INVALID
 * returned.  |*msg| is NULL on any error.
 *
 * Returns 0 or what conch_call_recv() (conch_call_recv_sync()) returns;
 * CONCH_ERR_INVALID for a NULL |msg| or a message of another type.
 */
CONCH_EXTERN int conch_stub_recv(conch_call *call,
                                 const ProtobufCMessageDescriptor *type,
                                 int sync, ProtobufCMessage **msg);

/**
 * Ends the requests of a client-streaming |call| (if not ended before),
 * takes its one response and waits for the call's end, so that the
 * status is final when it returns.  A call that ended OK without a
 * response is CONCH_ERR_PROTO; one that failed is CONCH_ERR_RPC (its
 * status says why) and |*msg| is NULL.
 */
CONCH_EXTERN int
conch_stub_close_and_recv(conch_call *call,
                          const ProtobufCMessageDescriptor *type,
                          ProtobufCMessage **msg);

/** Any function, as generated stubs pass their typed callbacks through the
    runtime (cast back to its own type before it is called). */
typedef void (*conch_stub_fn)(void);

/** What runs a typed |done| of conch_stub_unary_async(): it casts |done|
    back and calls it with the response as its type. */
typedef void (*conch_stub_unary_done)(const ProtobufCMessage *resp,
                                      const conch_status *status,
                                      const conch_metadata *headers,
                                      const conch_metadata *trailers,
                                      conch_stub_fn done, void *user_data);

/**
 * conch_unary_async() for typed wrappers: at the end, |trampoline| runs
 * once with |done| and |user_data|, as conch_unary_async() runs its
 * callback.  A NULL |trampoline| or |done| is CONCH_ERR_INVALID.
 *
 * Returns what conch_unary_async() returns.
 */
CONCH_EXTERN int conch_stub_unary_async(conch_client *c,
                                        const conch_method *method,
                                        const conch_call_opts *opts,
                                        const ProtobufCMessage *req,
                                        conch_stub_unary_done trampoline,
                                        conch_stub_fn done, void *user_data,
                                        conch_call **out);

/** What runs a typed |on_message| of conch_stub_stream_async(): it casts
    |on_message| back and calls it with the message as its type. */
typedef void (*conch_stub_stream_msg)(const ProtobufCMessage *msg,
                                      conch_stub_fn on_message,
                                      void *user_data);

/** What runs a typed |done| of conch_stub_stream_async(). */
typedef void (*conch_stub_stream_done)(const conch_status *status,
                                       const conch_metadata *headers,
                                       const conch_metadata *trailers,
                                       conch_stub_fn done, void *user_data);

/**
 * A whole server-streaming call without blocking, for typed wrappers: the
 * request |req| goes out at once; every response runs |msg_trampoline|
 * with |on_message| (the response borrowed until it returns), and the end
 * runs |done_trampoline| with |done| exactly once, never from inside this
 * function, after which the call frees itself.  All run with |user_data|
 * on the thread that drives |c|.  |out| may be NULL; otherwise |*out| is
 * the call, for conch_call_cancel() and the getters only (never
 * conch_call_free()), until |done| returns.
 *
 * Returns 0 (|done| will run), CONCH_ERR_INVALID (a NULL |c|, |req| or
 * callback, a method that is not server streaming or a request of another
 * type) or CONCH_ERR_NOMEM; on failure nothing runs.
 */
CONCH_EXTERN int conch_stub_stream_async(
    conch_client *c, const conch_method *method, const conch_call_opts *opts,
    const ProtobufCMessage *req, conch_stub_stream_msg msg_trampoline,
    conch_stub_fn on_message, conch_stub_stream_done done_trampoline,
    conch_stub_fn done, void *user_data, conch_call **out);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_CALL_H */
