/* A call (call.c): its structure, how it ends, and the entry points the
   session feeds its response through.  Private to the runtime. */
#ifndef CONCH_CALL_INT_H
#define CONCH_CALL_INT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/call.h>
#include <conch/client.h>
#include <conch/export.h>
#include <conch/status.h>

#include "buf.h"
#include "envelope.h"
#include "list.h"
#include "metadata_int.h"
#include "timer.h"

struct conch_conn; /* conn_int.h */

/* Attempts of one call at most, retried or hedged (gRPC's cap). */
#define CONCH__ATTEMPTS_MAX 5

/* A response's compression: a compression id (conch_comp_opts), or: */
#define CONCH_ENC_IDENTITY CONCH_COMPRESSION_IDENTITY
#define CONCH_ENC_UNSUPPORTED (-1)

/* Response headers the runtime reads, found as they arrive (call.c) so
   that nothing looks them up by name: */
enum {
  CONCH_H_CTYPE, /* content-type */
  CONCH_H_CENC,  /* content-encoding */
  CONCH_H_CCENC, /* connect-content-encoding */
  CONCH_H_GENC,  /* grpc-encoding */
  CONCH_H_N
};

/* A received message waiting in pull mode: decoded, or (when it came
   compressed) kept as received and decoded when taken, so that what waits
   is bounded by the flow-control window and not by its inflated size. */
typedef struct conch_qmsg {
  ProtobufCMessage *msg; /* NULL: see |gz| */
  uint8_t *gz;           /* compressed payload, validated on arrival */
  size_t gzlen;
  size_t wire; /* bytes of stream window it holds */
  int plain;   /* |gz| is the payload as received, not compressed and not
                  yet decoded (conch_unary_async() calls: unary_raw) */
} conch_qmsg;

struct conch_call {
  conch_client *client;
  struct conch_conn *conn;
  const conch_method *method;
  conch_call_handler h;
  void *user_data;
  int32_t stream_id; /* 0 until submitted */

  conch_link client_link; /* client->calls */
  conch_link conn_link;   /* conn->calls */
  conch_link queue_link;  /* conn->queue */
  conch_link done_link;   /* client->done: on_close to deliver */
  conch_link ready_link;  /* client->ready: on_send_ready to deliver */

  conch_timer deadline;
  int64_t deadline_at; /* 0 = none */

  conch_metadata req_headers;
  int send_comp; /* compression id */

  /* Sending. */
  conch_buf sendbuf; /* wire bytes not yet given to nghttp2 */
  /* Of one-message calls (unary, server streaming) the request stays in
     |sendbuf| until the response begins, with |sent| bytes of it given to
     nghttp2: a stream the server refused unprocessed can then be sent
     again.  Streaming requests drop bytes as they go. */
  size_t sent;
  size_t stream_sent;       /* streaming requests: bytes given to nghttp2 */
  unsigned retried : 1;     /* the one transparent retry was used */
  unsigned nsent;           /* messages queued */
  unsigned send_closed : 1; /* close_send called */
  unsigned submitted : 1;   /* HEADERS given to nghttp2 */
  int64_t submitted_at;     /* ... at this conch__client_now(), 0 before */
  unsigned deferred : 1;    /* data source returned DEFERRED */
  unsigned want_send_ready : 1;
  unsigned unary_compressed : 1; /* Connect unary body is send_comp */
  unsigned get : 1;              /* Connect unary as GET: no body */

  /* Receiving. */
  int http_status;
  int blk;                        /* kind of the header block being received */
  size_t blk_bytes;               /* its size so far, as HTTP/2 counts it */
  unsigned headers_done : 1;      /* final response headers seen */
  unsigned remote_ended : 1;      /* END_STREAM received */
  unsigned got_end : 1;           /* end-stream / trailers seen */
  unsigned got_trailers_only : 1; /* END_STREAM on the response headers */
  unsigned got_http_trailers : 1; /* a trailing HEADERS block arrived */
  unsigned body_over : 1;         /* unary body beyond the limit */
  unsigned moved_headers : 1;     /* trailers-only: headers became trailers */
  size_t body_bytes;              /* response body bytes seen */
  int resp_enc;                   /* compression id or CONCH_ENC_UNSUPPORTED */
  conch_metadata headers;
  uint32_t hpos[CONCH_H_N]; /* 1 + index in |headers| of the first CONCH_H_*
                               field, 0 when none */
  conch_metadata trailers;
  conch_metadata gfields[2]; /* gRPC status fields: [0] headers, [1] trailers */
  conch_env_reader reader;
  conch_buf body;    /* Connect unary body, error bodies */
  /* A Connect unary body that lies whole in the bytes being fed, not copied
     (yet): the input is the connection's until the feed returns, when
     conch__proto_settle() copies what is still lent into |body|. */
  const uint8_t *body_lent;
  size_t body_lent_len;
  conch_link lent_link; /* in the client's |lent| while |body_lent| is set */
  unsigned nrecv;    /* messages received */
  size_t unconsumed; /* stream-window bytes not yet credited back */
  unsigned paused : 1; /* conch_call_pause(): no credit goes back */

  /* Pull mode. */
  unsigned pull : 1;
  conch_qmsg *q;
  size_t qhead, qlen, qcap;
  size_t held;      /* stream-window bytes held by queued messages */
  conch_buf rawq;   /* raw pull: [u32 len][u32 hold][bytes]... */
  conch_buf rawcur; /* the raw message last returned */

  /* End. */
  unsigned finished : 1;    /* status final */
  unsigned closed_cb : 1;   /* on_close delivered */
  unsigned user_freed : 1;  /* conch_call_free called */
  unsigned in_handler;      /* depth of handlers of this call running */
  unsigned stream_live : 1; /* nghttp2 still knows the stream */
  conch_status status;
  struct conch_call *spare_next; /* in client->spare_calls once released */
  unsigned auto_free : 1;        /* conch_call_opts.auto_free */
  size_t msg_size; /* of the message being pushed to a handler, else 0 */
  conch_unary_done unary_done; /* conch_unary_async() calls */
  unsigned unary_raw : 1; /* they keep the response as received, to decode
                             it into the arena when done runs */
  conch_stub_unary_done stub_done; /* conch_stub_unary_async(): */
  conch_stub_fn stub_fn;           /* runs this typed callback */
  conch_stub_stream_msg stub_msg;   /* conch_stub_stream_async(): */
  conch_stub_fn stub_msg_fn;        /* each message, */
  conch_stub_stream_done stub_sdone; /* the end (with stub_fn) */
  struct conch_http_x *http; /* a plain HTTP exchange, NULL for an RPC */
  struct conch_icept_run *ir; /* the interceptors' run (intercept.h), NULL
                                 when the client has none */

  /* Retries by policy (retry.c). */
  const struct conch_retry_policy *rp; /* NULL: none */
  conch_timer retry_timer;             /* the backoff */
  double backoff_bound;                /* ms; 0 before the first */
  unsigned attempts;                   /* 1 + retries so far */
  unsigned committed : 1;   /* this attempt's end is the call's */
  unsigned hdrs_held : 1;   /* headers held back (hold_headers in call.c) */
  unsigned retry_wait : 1;  /* between attempts (the backoff is over once
                               |retry_timer| is no longer armed) */
  unsigned ending : 1;      /* call_end is emitting held headers */

  /* Hedging (hedge.c): a parent's attempts are kids of their own. */
  const struct conch_hedge_policy *hp; /* the parent's policy, or NULL */
  struct conch_call *kids[CONCH__ATTEMPTS_MAX]; /* live kids (NULL: gone) */
  struct conch_call *winner;           /* the kid whose response it takes */
  unsigned hedge_queued : 1;           /* the parent passed its start */
  unsigned hedge_stop : 1;             /* no further attempt may start */
  unsigned hedge_kid : 1;              /* this is a kid (user_data: parent) */
};

/* ---- Plain HTTP exchanges ---------------------------------------------

   A request that is not an RPC (envd's /files) on the client's own
   connections, HTTP/1.1 or HTTP/2 alike: a call whose protocol layer
   (protocol.c) writes |verb| and |target| (path and query, below the
   client's path prefix) with the caller's headers, sends the bytes given
   to conch_call_send_raw() as the body as they are (a streamed body:
   conch_call_close_send() ends it; CONCH_ERR_AGAIN and on_send_ready as
   for a stream), and hands the response body to on_raw_message as it
   arrives, credited back to the server when the handler returns (or
   later: conch_call_pause()).  The call ends OK once the whole response
   arrived, whatever its HTTP status (conch__http_status()): what a
   status means is the caller's. */
typedef struct conch_http_x {
  conch_method method; /* path = target, a raw bidi method */
  char *verb;          /* "GET", "POST", ... (GET and HEAD: no body) */
  char *ctype;         /* the request's content-type, or NULL */
} conch_http_x;

/* Starts a plain HTTP exchange; |ctype| may be NULL, |opts| and |handler|
   as for conch_call_start() (on_raw_message gets the body).  Returns as
   conch_call_start(). */
int conch__http_start(conch_client *c, const char *verb, const char *target,
                      const char *ctype, const conch_call_opts *opts,
                      const conch_call_handler *handler, void *user_data,
                      conch_call **out);
/* The response's HTTP status, 0 before its head arrived. */
int conch__http_status(const conch_call *call);

/* Starts a call bound to no connection, as if its request had gone out:
   tests and fuzz targets drive its response side with
   conch__call_on_header() & co.  Returns as conch_call_start(). */
int conch__call_new_detached(conch_client *c, const conch_method *method,
                             const conch_call_opts *opts,
                             const conch_call_handler *handler, void *user_data,
                             conch_call **out);
/* Checks the request metadata: a bad entry ends the call with internal
   (non-zero returned). */
int conch__call_check_headers(conch_call *call);
/* Queues a call just made on a connection (or ends it when there is
   none). */
void conch__call_queue(conch_call *call);
/* Ends |call| with |code| unless it already ended (first error wins). */
void conch__call_fail(conch_call *call, conch_code code, int local_err,
                      const char *fmt, ...) CONCH_PRINTF(4, 5);
/* Ends |call| with its current status (OK unless set). */
void conch__call_finish(conch_call *call);
/* Sets the call's status from |st| (moved: |st| is left OK) and ends it. */
void conch__call_end_with(conch_call *call, conch_status *st);
/* Runs on_close handlers of finished calls and releases freed ones. */
void conch__client_run_done(conch_client *c);
/* The deadline timer of |call| fired. */
void conch__call_on_deadline(conch_call *call);
/* Releases |call|'s memory once the user freed it, on_close ran and
   nghttp2 let go.  Returns non-zero when released. */
int conch__call_maybe_release(conch_call *call);
/* Releases a call unconditionally: kept as a spare for the next call
   (call.c) or freed. */
void conch__call_destroy(conch_call *call);
/* Frees the released calls |c| keeps for reuse (client.c, at the end). */
void conch__call_spares_free(conch_client *c);

/* Received response parts (from the session's callbacks). */
int conch__call_on_header(conch_call *call, const uint8_t *name, size_t nlen,
                          const uint8_t *value, size_t vlen, int trailer);
void conch__call_on_headers_done(conch_call *call, int end_stream);
void conch__call_on_data(conch_call *call, const uint8_t *data, size_t len);
void conch__call_on_remote_end(conch_call *call);
void conch__call_on_stream_close(conch_call *call, uint32_t h2err);

/* The request bytes waiting to be given to the session, and where. */
size_t conch__call_send_pending(const conch_call *call);
const uint8_t *conch__call_send_head(const conch_call *call);
/* The session took |n| of them. */
void conch__call_sent(conch_call *call, size_t n);
/* Whether the call may be submitted now (a Connect unary call waits for
   its message). */
int conch__call_ready_to_submit(const conch_call *call);
/* When the request went out (conch__client_now()), 0 while it is queued. */
int64_t conch__call_sent_ms(const conch_call *call);

/* Delivers one response message: |p| is its payload as received,
   compressed with the response's compression (resp_enc) when
   |compressed|.  Returns 0, or non-zero when the call ended. */
int conch__call_deliver(conch_call *call, const uint8_t *p, size_t len,
                        int compressed);
/* Takes the one queued response of a finished pull-mode unary call, as
   conch_call_recv() does, except that a response kept as received
   (unary_raw) is decoded only now: into the client's arena when it is not
   in use (|*in_arena| set: the message is borrowed until
   conch__arena_reset(), and |*payload|, which it may point into, must be
   freed after that), else as conch_call_recv() would.  Returns 0,
   CONCH_ERR_CODEC (the response does not decode; |err| says why) or what
   conch_call_recv() returns. */
int conch__call_take_unary(conch_call *call, ProtobufCMessage **msg,
                           int *in_arena, uint8_t **payload, char *err,
                           size_t errlen);
/* Inflates into the client's inflate buffer, capped by the receive limit;
   ends the call on failure (naming |what|) and returns non-zero. */
int conch__call_inflate(conch_call *call, const uint8_t *p, size_t n,
                        const char *what);
/* Lets go of an inflate buffer grown large by one message. */
void conch__client_shrink_inflbuf(conch_client *c);
/* The value of the first response header |which| (CONCH_H_*), NUL
   terminated, or NULL when there is none. */
const char *conch__call_header(const conch_call *call, int which);
/* Runs on_headers with the client's recursion guard. */
void conch__call_emit_headers(conch_call *call);

/* Retries (retry.c): the attempt is over and another follows; the call
   lets go of its stream (it waits for the close when it is still open). */
void conch__call_park(conch_call *call);
/* Sends the call again: a fresh response side, the kept request. */
void conch__call_resend(conch_call *call);
/* A kid of hedging |parent|: its request a copy of the parent's, its
   deadline what is left of the parent's, |attempt| (1-based) its place;
   queued on a connection.  Returns 0 with |*out| set (it may already have
   ended, e.g. without a connection: its on_close follows), or
   CONCH_ERR_NOMEM / CONCH_ERR_TIMEOUT (no time left). */
int conch__call_kid(conch_call *parent, unsigned attempt,
                    const conch_call_handler *h, conch_call **out);

#endif
