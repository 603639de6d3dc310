/* Hedging (conch/retry.h): the application's call (the parent) has no
   stream of its own; each attempt is a call of its own (a kid, made by
   conch__call_kid with the parent's request), started at once, then one
   every hedging delay while none has won, or at once after a non-fatal
   failure.  The first kid whose response begins (headers, a message, or an
   OK end) wins: the others are canceled, and the parent takes the winner's
   headers, messages (decoded by the parent, into its handlers or its pull
   queue) and end.  A kid is let go (conch_call_free) in its on_close, or
   when the parent ends; a kid let go by its parent no longer points to it
   (user_data NULL). */
#include <stdint.h>
#include <string.h>

#include "call_int.h"
#include "client_int.h"
#include "retry.h"
#include "timer.h"

#define KIDS_MAX CONCH__ATTEMPTS_MAX

static conch_call *parent_of(const conch_call *kid) {
  return kid->user_data; /* NULL once its parent let it go */
}

static unsigned live_kids(const conch_call *parent) {
  unsigned i, n = 0;
  for (i = 0; i < KIDS_MAX; i++) {
    n += parent->kids[i] != NULL;
  }
  return n;
}

/* Lets |kid| go: canceled (its on_close runs, to nobody), freed. */
static void drop_kid(conch_call *parent, conch_call *kid) {
  unsigned i;
  for (i = 0; i < KIDS_MAX; i++) {
    if (parent->kids[i] == kid) {
      parent->kids[i] = NULL;
    }
  }
  kid->user_data = NULL;
  conch_call_free(kid);
}

static void kid_headers(conch_call *kid, const conch_metadata *h, void *ud);
static void kid_close(conch_call *kid, const conch_status *st,
                      const conch_metadata *trailers, void *ud);

static const conch_call_handler kid_handler = {kid_headers, NULL, NULL, NULL,
                                               kid_close};

/* Ends the parent with a kid's end: its trailers and |st| (copied). */
static void parent_end(conch_call *parent, const conch_status *st,
                       const conch_metadata *trailers) {
  conch_status copy;
  conch_status_init(&copy);
  if (conch_metadata_append(&parent->trailers, trailers) != 0 ||
      conch_status_copy(&copy, st, parent->client->mem) != 0) {
    conch__call_fail(parent, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory ending a hedged call");
    return;
  }
  conch__call_end_with(parent, &copy);
}

/* Starts the next attempt, if the policy and the throttle allow one.
   Returns non-zero when one started. */
static int launch(conch_call *parent) {
  const conch_hedge_policy *hp = parent->hp;
  conch_call *kid = NULL;
  unsigned i;
  int rv;

  if (parent->finished || parent->winner != NULL || parent->hedge_stop ||
      parent->attempts >= (unsigned)hp->max_attempts) {
    return 0;
  }
  for (i = 0; i < KIDS_MAX && parent->kids[i] != NULL; i++) {
  }
  if (i == KIDS_MAX) {
    return 0;
  }
  rv = conch__call_kid(parent, parent->attempts + 1, &kid_handler, &kid);
  if (rv != 0) {
    if (live_kids(parent) == 0) {
      if (rv == CONCH_ERR_TIMEOUT) {
        conch__call_fail(parent, CONCH_CODE_DEADLINE_EXCEEDED,
                         CONCH_ERR_TIMEOUT, "deadline exceeded");
      } else {
        conch__call_fail(parent, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                         "out of memory starting an attempt");
      }
    }
    parent->hedge_stop = 1;
    return 0;
  }
  parent->kids[i] = kid;
  parent->attempts++;
  if (parent->attempts < (unsigned)hp->max_attempts) {
    conch__timer_arm(parent->client, &parent->retry_timer,
                     conch__client_now(parent->client) + hp->hedging_delay_ms);
  } else {
    conch__timer_disarm(parent->client, &parent->retry_timer);
  }
  return 1;
}

void conch__hedge_kick(conch_call *parent) {
  if (parent->hedge_queued && parent->send_closed && parent->nsent > 0 &&
      parent->attempts == 0 && !parent->finished) {
    launch(parent);
  }
}

void conch__hedge_on_timer(conch_call *parent) {
  if (parent->hedge_queued) {
    launch(parent);
  }
}

/* |kid|'s response began first: the others go; the parent takes its
   headers.  Returns 0, or non-zero when the parent ended meanwhile. */
static int win(conch_call *parent, conch_call *kid) {
  unsigned i;
  parent->winner = kid;
  conch__timer_disarm(parent->client, &parent->retry_timer);
  for (i = 0; i < KIDS_MAX; i++) {
    conch_call *other = parent->kids[i];
    if (other != NULL && other != kid) {
      drop_kid(parent, other);
    }
  }
  parent->http_status = kid->http_status;
  if (conch_metadata_append(&parent->headers, &kid->headers) != 0) {
    conch__call_fail(parent, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory storing response headers");
    return 1;
  }
  conch__call_emit_headers(parent);
  return parent->finished;
}

static void kid_headers(conch_call *kid, const conch_metadata *h, void *ud) {
  conch_call *parent = ud;
  (void)h;
  if (parent == NULL || parent->winner != NULL) {
    return;
  }
  (void)win(parent, kid);
}

int conch__hedge_msg(conch_call *kid, const uint8_t *p, size_t len) {
  conch_call *parent = parent_of(kid);
  if (parent == NULL) {
    conch__call_fail(kid, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                     "another attempt won");
    return 1;
  }
  if (parent->winner == NULL && win(parent, kid) != 0) {
    return kid->finished;
  }
  if (parent->winner != kid) {
    return 0;
  }
  kid->in_handler++; /* the parent's handlers may let it go */
  (void)conch__call_deliver(parent, p, len, 0);
  kid->in_handler--;
  if (!parent->finished && parent->pull &&
      parent->held > parent->client->o.stream_window) {
    conch_call_pause(kid); /* what waits in the parent stays bounded */
  }
  if (kid->in_handler == 0 && kid->user_freed) {
    conch__call_fail(kid, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                     "call freed by the application");
  }
  return kid->finished;
}

void conch__hedge_resume(conch_call *parent) {
  conch_call *w = parent->winner;
  if (w != NULL && conch_call_paused(w) &&
      parent->held <= parent->client->o.stream_window / 2) {
    conch_call_resume(w);
  }
}

static void kid_close(conch_call *kid, const conch_status *st,
                      const conch_metadata *trailers, void *ud) {
  conch_call *parent = ud;
  conch_client *c = kid->client;
  const conch_hedge_policy *hp;
  long pushback = 0;
  int pb;

  if (parent == NULL) {
    conch_call_free(kid); /* let go by its parent */
    return;
  }
  hp = parent->hp;
  if (parent->winner == NULL && st->code == CONCH_CODE_OK) {
    /* An OK end without headers (a trailers-only OK): it won. */
    if (win(parent, kid) != 0) {
      drop_kid(parent, kid);
      return;
    }
  }
  if (parent->winner == kid) {
    parent_end(parent, st, trailers);
    drop_kid(parent, kid);
    return;
  }
  /* A loser's failure. */
  drop_kid(parent, kid);
  if ((hp->non_fatal_codes & CONCH_RETRY_CODE(st->code)) == 0 ||
      st->code == CONCH_CODE_CANCELED) {
    parent_end(parent, st, trailers); /* fatal (the others go in call_end) */
    return;
  }
  if (!conch__retry_throttle_fail(c)) {
    parent->hedge_stop = 1;
  }
  pb = conch__retry_pushback(trailers, &pushback);
  if (pb < 0) {
    parent->hedge_stop = 1;
  }
  if (!parent->hedge_stop) {
    if (pb > 0) {
      conch__timer_arm(c, &parent->retry_timer,
                       conch__client_now(c) + pushback);
    } else {
      (void)launch(parent); /* non-fatal: the next one now */
    }
  }
  if (!parent->finished && live_kids(parent) == 0 &&
      (parent->hedge_stop ||
       parent->attempts >= (unsigned)hp->max_attempts)) {
    /* Nothing left to wait for: the last failure is the call's. */
    parent_end(parent, st, trailers);
  }
}

void conch__hedge_end(conch_call *parent) {
  unsigned i;
  conch__timer_disarm(parent->client, &parent->retry_timer);
  for (i = 0; i < KIDS_MAX; i++) {
    if (parent->kids[i] != NULL) {
      drop_kid(parent, parent->kids[i]);
    }
  }
  parent->winner = NULL;
}
