/* The client's interceptor chains (intercept.c, conch/interceptor.h): a
   call's run through them.  Private to the runtime. */
#ifndef CONCH_INTERCEPT_H
#define CONCH_INTERCEPT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

struct conch_call;

/* One call's place in its client's chain: allocated at start only when
   the client has interceptors (call->ir), freed with the call. */
typedef struct conch_icept_run {
  unsigned n;            /* interceptors of the client */
  unsigned entered;      /* on_start reached for [0, entered) */
  unsigned deferred : 1; /* interceptor entered-1 holds the call */
  unsigned in_start : 1; /* a start hook is running */
  unsigned resumed : 1;  /* resumed from inside the deferring hook */
  unsigned started : 1;  /* the chain passed: the call is queued */
  unsigned closed : 1;   /* the close hooks ran */
  conch_buf held;        /* messages sent while held: [u32 len][bytes]... */
  void *state[1];        /* n slots (allocated as many) */
} conch_icept_run;

/* Starts a call made by conch_call_start() through its client's chain:
   allocates its run (CONCH_ERR_NOMEM: the caller destroys the call, no
   hook ran), runs the start hooks, then checks the request metadata and
   queues the call, unless a hook deferred or ended it.  Returns 0. */
int conch__icept_start(struct conch_call *call);
/* A message on its way out (send_bytes): 0 with |*p|, |*n| to frame (the
   hooks ran); 1: held until the chain passes (accounted as queued); or an
   error (CONCH_ERR_AGAIN: the held messages are over the high-water
   mark; CONCH_ERR_STATE: a hook ended the call; CONCH_ERR_NOMEM). */
int conch__icept_send(struct conch_call *call, const uint8_t **p, size_t *n,
                      size_t high_water);
/* A response message, decompressed, before delivery: may point |*p|,
   |*n| at other bytes.  Returns 0, or non-zero when the call ended. */
int conch__icept_recv(struct conch_call *call, const uint8_t **p, size_t *n);
/* The response headers arrived. */
void conch__icept_headers(struct conch_call *call);
/* The status just became final (call_end): the close hooks, once. */
void conch__icept_close(struct conch_call *call);
/* A call is being released: the close hooks if they never ran, the held
   messages freed.  The block stays with the call (call->ir, freed with
   its memory): a spare call reuses it. */
void conch__icept_done(struct conch_call *call);
/* Frees the block a spare call brought along, for a call that passes no
   interceptor (plain HTTP exchanges, detached calls). */
void conch__icept_drop(struct conch_call *call);

#endif
