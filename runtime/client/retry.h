/* Retries by policy (retry.c, conch/retry.h): the policy table of the
   options, the choice of another attempt when one ends, its backoff and
   the throttle.  Private to the runtime. */
#ifndef CONCH_RETRY_INT_H
#define CONCH_RETRY_INT_H

#include <stddef.h>

#include <conch/call.h>
#include <conch/mem.h>
#include <conch/retry.h>

struct conch_client;
struct conch_client_opts;

/* One entry of the options' table: a name ("" every method, "pkg.Svc",
   "pkg.Svc/Method") and its policy, validated. */
typedef struct conch_retry_entry {
  char *name;
  int hedge; /* 1: |h| is the policy, else |p| */
  conch_retry_policy p;
  conch_hedge_policy h;
} conch_retry_entry;

#define CONCH__RETRY_MAX_NAMES 64
#define CONCH__RETRY_BUFFER_DEFAULT (256u << 10)

/* Copies the table of |src| into |dst| with |mem| (the strings and the
   array).  Returns 0 or CONCH_ERR_NOMEM (|dst| then has none). */
int conch__retry_table_copy(struct conch_client_opts *dst,
                            const struct conch_client_opts *src,
                            const conch_mem *mem);
void conch__retry_table_clear(struct conch_client_opts *o,
                              const conch_mem *mem);

/* The entry for calls of |m| on |c|, or NULL. */
const conch_retry_entry *conch__retry_lookup(const struct conch_client *c,
                                             const conch_method *m);
/* Whether calls of |m| may be hedged by |hp| (conch/retry.h). */
int conch__hedge_applies(const conch_hedge_policy *hp, const conch_method *m);

/* Sets up the client's throttle from its options. */
void conch__retry_client_init(struct conch_client *c);

/* The attempt of |call| (which has a policy) ended
   with the status it holds: returns 1 when another attempt follows (the
   call is then waiting for its backoff, and for its old stream to close),
   0 when this end is the call's. */
int conch__retry_next(conch_call *call);
/* A call of a policy ended OK: the throttle gains. */
void conch__retry_success(struct conch_client *c);
/* An attempt failed with a code of its policy: the throttle pays; returns
   whether further attempts may start. */
int conch__retry_throttle_fail(struct conch_client *c);
/* The grpc-retry-pushback-ms of |trailers|: 1 with |*ms|, 0 when absent,
   -1 when it says not to try again. */
int conch__retry_pushback(const conch_metadata *trailers, long *ms);

/* Hedging (hedge.c).  The parent call (the application's) has no stream:
   its attempts are calls of their own ("kids"), whose winner's response it
   takes. */
/* The parent passed its start, or its request was queued: the first
   attempt goes once both happened. */
void conch__hedge_kick(conch_call *parent);
/* The parent's hedging delay passed. */
void conch__hedge_on_timer(conch_call *parent);
/* A kid's message (inflated): given to the parent.  Returns non-zero when
   the kid ended. */
int conch__hedge_msg(conch_call *kid, const uint8_t *p, size_t len);
/* The parent ends: its kids are canceled and let go. */
void conch__hedge_end(conch_call *parent);
/* The parent's reader took messages: a paused winner may go on. */
void conch__hedge_resume(conch_call *parent);
/* The backoff timer of a waiting call fired. */
void conch__retry_on_timer(conch_call *call);
/* The stream of a waiting call's last attempt closed. */
void conch__retry_stream_gone(conch_call *call);

#endif
