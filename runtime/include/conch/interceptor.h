/*
 * conch - a Connect/gRPC client for C
 *
 * interceptor.h: chains of interceptors around calls, on the client
 * (every call of a client) and on the server (every handler, or the
 * handlers of one service).
 *
 * ---- Design ----------------------------------------------------------------
 *
 * What others do.  connect-go's Interceptor wraps a function: WrapUnary
 * takes the next UnaryFunc and returns one, WrapStreamingClient and
 * WrapStreamingHandler wrap the stream's connection (Send, Receive,
 * headers), so one interceptor is a closure around the rest of the chain
 * and runs on the goroutine of the call.  grpc-go has the same two shapes
 * (unary and stream interceptors, chained, first outermost).  gRPC's C
 * core has no closures to wrap: a channel is a stack of filters, each a
 * table of functions called for every batch of operations going down
 * (send metadata, send message, close) and every one coming up (receive
 * metadata, message, status), each filter with per-call storage the
 * stack allocates, and a filter that wants to wait (an auth token to
 * fetch) keeps the batch and passes it on later from its own callback.
 *
 * conch's core is callbacks on a loop the application drives, never
 * blocking: a "next" to call and wait for does not exist, so the shape
 * here is grpc core's, flattened: an interceptor is a table of optional
 * hooks plus a user_data, copied into the options at registration, and
 * the runtime walks the chain at each point of a call:
 *
 *   start      the method (conch_call_method(), conch_rpc_method()), the
 *              request metadata (may add, change, remove), the deadline
 *              (may shorten it);  outermost first
 *   message    each message: on its way towards the handler (the
 *              client's requests, the server's requests) outermost first,
 *              on its way back (responses) innermost first
 *   headers    the response headers (client: as received; server: before
 *              they are sent);  innermost first
 *   close      the final status (may change it) and trailers;  innermost
 *              first, so that the outermost has the last word, as a
 *              wrapper that sees the result of "next" would
 *
 * Order: the first interceptor registered is the outermost (it sees the
 * request first and the result last), as in connect-go and grpc-go.
 *
 * Messages are the serialized bytes (the codec's output, before
 * compression and framing; after decompression coming in), not decoded
 * messages: (1) they exist for every method, raw ones (no descriptors)
 * and plain exchanges included, and for both codecs, while a decoded
 * message exists only on some paths (a pull-mode unary response is kept
 * as received and decoded later, a raw method never is); (2) an
 * interceptor that does not read messages costs nothing: there is no
 * decoding done for it; (3) one that wants fields decodes with the
 * method's descriptors (protobuf_c_message_unpack()), and one that
 * changes a message hands back other bytes, which works the same for raw
 * and typed methods.  Message hooks are optional: logging, auth and
 * metrics need none of them.
 *
 * Deferring.  A start hook returns CONCH_ICEPT_DEFER to hold the call
 * where it is (nothing is sent; messages the application sends meanwhile
 * wait, unseen by the interceptors after it, up to the send buffer's
 * high-water mark) and later, on the loop's thread, calls
 * conch_call_icept_resume() (conch_rpc_icept_resume()) exactly once: the
 * chain goes on with the next interceptor.  That is how a token is
 * fetched asynchronously.  The deadline runs while a call waits.  Under
 * the blocking layer the only loop is the client's own, so a deferring
 * interceptor must be resumed from something that loop runs: the
 * handler of another call of the same client (the token fetched with an
 * RPC: its on_close resumes the held call) or the deadline.
 *
 * Short-circuit.  Any hook but close may end the call with a status of
 * its choosing: conch_call_abort() on the client, conch_rpc_finish() on
 * the server (no handler runs when it happens at start).  Then it
 * returns non-zero (a message hook) or anything (start): the chain stops.
 *
 * Exactly once.  The close hook of every interceptor whose start was
 * reached (the one that deferred or ended the call included; those after
 * a short-circuit never saw the call and get nothing) runs exactly once
 * per call, whatever ends it: the response's end, cancel, deadline,
 * transport failure, out of memory, short-circuit, the client's or
 * server's free.  It runs when the status becomes final, before anyone
 * can read it (conch_call_status(), the blocking layer, on_close), so a
 * status it changes is the status everybody sees.  That may be inside
 * conch_call_cancel(), conch_call_free(), conch_call_start() (a
 * short-circuit), or a turn of the loop: a close hook records and
 * changes the status, and must not start, cancel or free calls itself
 * (schedule that for later).  It is the place to free per-call state.
 *
 * Per-call state.  Every hook gets |state|, a pointer slot of this
 * interceptor for this call, NULL at start; what it holds is the
 * interceptor's (allocate at start, free at close).
 *
 * Zero cost when none: a client or server without interceptors allocates
 * nothing more per call and tests one pointer at each hook site.  A call
 * of a client with interceptors allocates one block for the chain's
 * state (out of memory: conch_call_start() returns CONCH_ERR_NOMEM and
 * no hook runs).
 *
 * The blocking layer (conch_unary_sync() & co) and the generated stubs
 * sit on the same calls, so interceptors see their calls unchanged.
 *
 * Where each half differs.  Client: on_start runs inside
 * conch_call_start() (never a handler there: on_close still comes on a
 * later turn); response headers are read only (the runtime has already
 * read what it needs from them); plain HTTP exchanges (envd's /files) are
 * not RPCs and pass no interceptor.  Server: registration is on the
 * server (every method, or one service's), a call's chain is fixed when
 * its headers end; the handler's on_call is the chain's innermost step,
 * so a short-circuit (conch_rpc_finish() in on_call) means the handler
 * never hears of the call, not even on_cancel; a deferred push-mode call
 * has its requests paused (conch_rpc_pause()) until the chain passes; a
 * pull-mode handler takes each request from the bytes as received (the
 * hooks see them, but changed bytes reach only push-mode handlers);
 * responses of a conch_rpc_send_from() source pass no on_send.
 */
#ifndef CONCH_INTERCEPTOR_H
#define CONCH_INTERCEPTOR_H

#include <stddef.h>
#include <stdint.h>

#include <conch/call.h>
#include <conch/client.h>
#include <conch/export.h>
#include <conch/metadata.h>
#include <conch/server.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** At most this many interceptors on one client, or on one server's chain
    (all methods plus those of any one service). */
#define CONCH_INTERCEPTORS_MAX 8

/** What a start hook returns. */
enum {
  CONCH_ICEPT_NEXT = 0, /**< go on with the next interceptor */
  CONCH_ICEPT_DEFER = 1 /**< hold the call: the interceptor resumes it */
};

/* ---- Client ------------------------------------------------------------- */

/**
 * One interceptor of a client's calls.  Every hook may be NULL.  |state|
 * is this interceptor's slot for this call (NULL at first).  Hooks run on
 * the thread that drives the client.
 */
typedef struct conch_call_interceptor {
  size_t struct_size;
  /** The call starts (inside conch_call_start(), before anything is
      sent): |headers| is the request metadata, to change at will (checked
      after the chain: a bad entry ends the call with internal).  The
      deadline: conch_call_timeout_left(), conch_call_shorten_deadline().
      Returns CONCH_ICEPT_NEXT or CONCH_ICEPT_DEFER; may end the call
      with conch_call_abort(). */
  int (*on_start)(conch_call *call, conch_metadata *headers, void **state,
                  void *user_data);
  /** A request message, serialized, on its way out (outermost first).  To
      change it, point |*data| and |*len| at other bytes, which must stay
      valid until the hook runs again for this call or its on_close.
      Returns 0; non-zero after ending the call with conch_call_abort()
      (else the call ends with internal): the message is not sent. */
  int (*on_send)(conch_call *call, const uint8_t **data, size_t *len,
                 void **state, void *user_data);
  /** A response message, serialized (decompressed), before the
      application gets it (innermost first).  Changes and returns as for
      on_send; a non-zero return drops the message and ends the call. */
  int (*on_recv)(conch_call *call, const uint8_t **data, size_t *len,
                 void **state, void *user_data);
  /** The response headers arrived (innermost first), before on_headers;
      not for a trailers-only response.  Read only: the runtime has
      already read what it needs from them. */
  void (*on_headers)(conch_call *call, const conch_metadata *headers,
                     void **state, void *user_data);
  /** The status is final (innermost first): may change |status|
      (conch_status_setf() with status->mem) and |trailers|.  Exactly once; see the
      design notes for where it may run and what it must not do. */
  void (*on_close)(conch_call *call, conch_status *status,
                   conch_metadata *trailers, void **state, void *user_data);
  void *user_data;
} conch_call_interceptor;

#define CONCH_CALL_INTERCEPTOR_INIT                                            \
  { sizeof(conch_call_interceptor), NULL, NULL, NULL, NULL, NULL, NULL }

/**
 * Appends |ic| (copied) to the chain of every call of the clients made
 * from |opts|: the first added is the outermost.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, |struct_size| too small)
 * or CONCH_ERR_LIMIT (CONCH_INTERCEPTORS_MAX already).
 */
CONCH_EXTERN int conch_client_opts_add_interceptor(
    conch_client_opts *opts, const conch_call_interceptor *ic);

/**
 * Goes on with a call whose start hook returned CONCH_ICEPT_DEFER: the
 * next interceptor's start, then the request goes out.  Once per
 * deferral, on the thread that drives the client; a call that ended
 * meanwhile (its deadline passed, it was canceled: its on_close told the
 * interceptor) must not be resumed.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL) or CONCH_ERR_STATE (not deferred).
 */
CONCH_EXTERN int conch_call_icept_resume(conch_call *call);

/**
 * Ends |call| with |code| and |message| (may be NULL), origin local,
 * unless it has already ended: an interceptor's short-circuit.  Usable
 * anywhere on the thread that drives the client; on_close follows as for
 * any end.  Returns 0, CONCH_ERR_INVALID (NULL |call|, |code| OK or not a
 * code).
 */
CONCH_EXTERN int conch_call_abort(conch_call *call, conch_code code,
                                  const char *message);

/** The method of |call| (its path: "/pkg.Service/Method"). */
CONCH_EXTERN const conch_method *conch_call_method(const conch_call *call);

/**
 * Milliseconds left until |call|'s deadline (0 when it passed), or -1 when
 * it has none.
 */
CONCH_EXTERN long conch_call_timeout_left(const conch_call *call);

/**
 * Moves |call|'s deadline to |timeout_ms| from now when that is sooner
 * than the one it has (or it has none).  Only before the request went out
 * (in on_start or while deferred): the deadline travels in its headers.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL, |timeout_ms| <= 0) or
 * CONCH_ERR_STATE (the request went out, or the call ended).
 */
CONCH_EXTERN int conch_call_shorten_deadline(conch_call *call,
                                             long timeout_ms);

/* ---- Server ------------------------------------------------------------- */

/** The longest service name conch_server_add_service_interceptor() takes. */
#define CONCH_INTERCEPTOR_SERVICE_MAX 127

/**
 * One interceptor of a server's calls.  Every hook may be NULL.  Hooks run
 * on the thread that drives the server, in its turn (or inside
 * conch_rpc_icept_resume()).  The handler is the innermost: on_call runs
 * once the chain passed; requests reach the handler after every on_recv,
 * responses go out after every on_send.
 */
typedef struct conch_rpc_interceptor {
  size_t struct_size;
  /** A call arrived, before the handler's on_call: |headers| is the
      request metadata (conch_rpc_request_headers(), here writable), the
      method conch_rpc_method(), the deadline conch_rpc_timeout_ms() and
      conch_rpc_shorten_deadline().  Returns CONCH_ICEPT_NEXT or
      CONCH_ICEPT_DEFER (requests wait meanwhile); a short-circuit ends
      the call with conch_rpc_finish() (the handler never hears of it). */
  int (*on_call)(conch_rpc *rpc, conch_metadata *headers, void **state,
                 void *user_data);
  /** A request message, serialized (decompressed), outermost first; as
      the client's on_send: other bytes, or non-zero after
      conch_rpc_finish() (else the call ends with internal). */
  int (*on_recv)(conch_rpc *rpc, const uint8_t **data, size_t *len,
                 void **state, void *user_data);
  /** A response message, serialized (before compression), innermost
      first; as on_recv.  (Not for the responses of conch_rpc_send_from()
      sources.)  With such a hook installed, responses are serialized into
      a buffer of their own (not straight into the call's output). */
  int (*on_send)(conch_rpc *rpc, const uint8_t **data, size_t *len,
                 void **state, void *user_data);
  /** The call ends (innermost first), exactly once: |status| is what the
      client will be told (may be changed, conch_status_setf() with
      status->mem), |trailers| the response trailers (may be changed).  A
      call that ends without an answer (the client canceled it, its
      connection went, the server was freed) gets canceled, and nothing
      more is sent.  Must not finish, send or free; free the state here. */
  void (*on_close)(conch_rpc *rpc, conch_status *status,
                   conch_metadata *trailers, void **state, void *user_data);
  void *user_data;
} conch_rpc_interceptor;

#define CONCH_RPC_INTERCEPTOR_INIT                                             \
  { sizeof(conch_rpc_interceptor), NULL, NULL, NULL, NULL, NULL }

/**
 * Appends |ic| (copied) to the chain of every call of |s|: the first added
 * (of both kinds) is the outermost.  Add before serving.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, |struct_size| too small),
 * CONCH_ERR_LIMIT (CONCH_INTERCEPTORS_MAX already) or
 * CONCH_ERR_UNSUPPORTED (a build without the server).
 */
CONCH_EXTERN int conch_server_add_interceptor(conch_server *s,
                                              const conch_rpc_interceptor *ic);

/**
 * conch_server_add_interceptor() for the calls of one service only:
 * |service| is its full name ("pkg.Service"; copied).  Returns as it,
 * CONCH_ERR_INVALID also for an empty |service| or one longer than
 * CONCH_INTERCEPTOR_SERVICE_MAX.
 */
CONCH_EXTERN int
conch_server_add_service_interceptor(conch_server *s, const char *service,
                                     const conch_rpc_interceptor *ic);

/**
 * Goes on with a call whose on_call hook returned CONCH_ICEPT_DEFER (the
 * next interceptor, then the handler's on_call, inside this function).
 * Once per deferral; a call that ended meanwhile (its on_close told the
 * interceptor) must not be resumed.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL) or CONCH_ERR_STATE (not deferred).
 */
CONCH_EXTERN int conch_rpc_icept_resume(conch_rpc *rpc);

/**
 * Moves |rpc|'s deadline to |timeout_ms| from now when that is sooner
 * than the one it has (or it has none).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL, |timeout_ms| <= 0), CONCH_ERR_STATE
 * (the call ended) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_rpc_shorten_deadline(conch_rpc *rpc, long timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_INTERCEPTOR_H */
