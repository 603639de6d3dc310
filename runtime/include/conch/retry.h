/*
 * conch/retry.h: retries by policy, as gRPC's service config defines them.
 *
 * A call whose attempt ends with one of the policy's retryable codes is
 * sent again, after a backoff, up to the policy's number of attempts, as
 * long as the attempt is not committed and the retry is safe:
 *
 *  - Committed: an attempt commits once something of its response reached
 *    the application (headers on on_headers, a message) or its request
 *    outgrew the policy's buffer; from then on its end is the call's end.
 *    A gRPC trailers-only response and a Connect error commit nothing, so
 *    they are retried; the headers of a Connect stream and of any gRPC-Web
 *    call (over HTTP/1.1 it has no trailers-only form) are held until the
 *    first message or the end, so that an error before any message is
 *    retried too (on_headers then runs once, for the attempt that
 *    commits).
 *  - Safe: the method is marked IDEMPOTENT or NO_SIDE_EFFECTS
 *    (idempotency_level in its .proto; conch_method.idempotency), or the
 *    attempt never left this client (no byte of it was sent), or the policy
 *    says |non_idempotent| (what gRPC does for any method in the config).
 *  - The call's deadline runs across all attempts; a backoff that would
 *    end past it is not started.  Each attempt carries the time left.
 *  - A server's grpc-retry-pushback-ms trailer replaces the backoff (a
 *    negative or malformed value: no retry), as in gRPC.
 *  - With a throttle (conch_client_opts_set_retry_throttle()) every
 *    attempt that fails with a retryable code costs a token and every call
 *    that ends OK gives back |token_ratio|; no retry starts while the
 *    tokens are at or below half their maximum.
 *
 * Attempts after the first carry grpc-previous-rpc-attempts (the number
 * of attempts before), and conch_call_attempts() tells how many a call
 * made.  Interceptors (conch/interceptor.h) see the call once, around all
 * of its attempts.  Streams the server refused unprocessed are retried
 * once more without a policy (gRPC's transparent retry); that retry is
 * not counted as an attempt.
 *
 * Hedging (conch_client_opts_set_hedge(), gRPC's hedgingPolicy) sends the
 * request again, without waiting for the failure of the attempts before:
 * the first attempt at once, another each |hedging_delay_ms| while none
 * has committed, up to |max_attempts| in all; an attempt that fails with
 * one of |non_fatal_codes| makes the next start at once, any other failure
 * ends the call with it; the first attempt whose response headers (or
 * first message, or OK end) arrive wins and the others are canceled.  For
 * unary and server-streaming methods marked IDEMPOTENT or NO_SIDE_EFFECTS
 * (or any with |non_idempotent|); other calls make one attempt.  The
 * throttle counts a failed hedge as a failed attempt, and stops new
 * hedges; a pushback trailer delays the next hedge (negative: none more).
 * A name has a retry policy or a hedging policy, not both: setting one
 * replaces the other.
 */
#ifndef CONCH_RETRY_H
#define CONCH_RETRY_H

#include <stddef.h>
#include <stdint.h>

#include <conch/client.h>
#include <conch/export.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

struct conch_call;

/** A retry policy (gRPC's retryPolicy).  Initialise with
    CONCH_RETRY_POLICY_INIT. */
typedef struct conch_retry_policy {
  size_t struct_size;
  /** Attempts in all, the first included: 2 or more; more than 5 is taken
      as 5, as gRPC does. */
  int max_attempts;
  /** The first backoff is random in [0, |initial_backoff_ms|); each
      further one's bound is the previous bound times |backoff_multiplier|,
      at most |max_backoff_ms|.  Both > 0, multiplier > 0. */
  long initial_backoff_ms;
  long max_backoff_ms;
  double backoff_multiplier;
  /** The codes that make another attempt, as bits: CONCH_RETRY_CODE(c).
      Not empty; CONCH_CODE_OK is not allowed. */
  uint32_t retryable_codes;
  /** 1: methods not marked idempotent are retried too.  0 (default): only
      when no byte of the attempt was sent. */
  int non_idempotent;
  /** Request bytes kept for another attempt; a call whose request grows
      past it commits.  0: 256 KiB; at most 512 KiB are kept whatever it
      says (half the send buffer, conch_call_send()). */
  size_t buffer_bytes;
} conch_retry_policy;

#define CONCH_RETRY_CODE(code) (1u << (unsigned)(code))

#define CONCH_RETRY_POLICY_INIT                                                \
  { sizeof(conch_retry_policy), 0, 0, 0, 0.0, 0, 0, 0 }

/**
 * Sets the retry policy of the calls to |name|: "pkg.Service/Method" (one
 * method), "pkg.Service" (every method of the service) or "" or NULL
 * (every method); the most specific name that has one applies, fixed at
 * each call's start.  |policy| is copied; NULL removes the policy of
 * |name|.  At most 64 names.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts|, a policy out of range, a
 * name with a leading '/' or more than one '/') or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_retry(conch_client_opts *opts,
                                             const char *name,
                                             const conch_retry_policy *policy);

/** A hedging policy (gRPC's hedgingPolicy).  Initialise with
    CONCH_HEDGE_POLICY_INIT. */
typedef struct conch_hedge_policy {
  size_t struct_size;
  /** Attempts in all: 2 or more; more than 5 is taken as 5. */
  int max_attempts;
  /** Between the starts of two attempts while none has failed; 0: all at
      once. */
  long hedging_delay_ms;
  /** Codes after which the next attempt starts at once
      (CONCH_RETRY_CODE(c) bits; may be empty; not OK). */
  uint32_t non_fatal_codes;
  /** 1: methods not marked idempotent are hedged too. */
  int non_idempotent;
} conch_hedge_policy;

#define CONCH_HEDGE_POLICY_INIT { sizeof(conch_hedge_policy), 0, 0, 0, 0 }

/**
 * Sets the hedging policy of the calls to |name| (as
 * conch_client_opts_set_retry(), whose policy for |name| it replaces);
 * NULL removes it.
 *
 * Returns 0, CONCH_ERR_INVALID or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_hedge(conch_client_opts *opts,
                                             const char *name,
                                             const conch_hedge_policy *policy);

/**
 * The retry throttle (gRPC's retryThrottling): a client starts with
 * |max_tokens| tokens (1..1000); an attempt that fails with a retryable
 * code costs one, a call that ends OK gives |token_ratio| (0 < ratio <= |max_tokens|, read to three
 * decimals); retries stop while the tokens are at or below
 * |max_tokens| / 2.  |max_tokens| 0 turns it off (the default).
 *
 * Returns 0 or CONCH_ERR_INVALID.
 */
CONCH_EXTERN int conch_client_opts_set_retry_throttle(conch_client_opts *opts,
                                                      int max_tokens,
                                                      double token_ratio);

/**
 * Reads a gRPC service config (JSON): the retryPolicy or hedgingPolicy of
 * each methodConfig entry (its names: {"service": S, "method": M}, M or both
 * may be missing or empty) and retryThrottling, as
 * conch_client_opts_set_retry() and conch_client_opts_set_retry_throttle()
 * would set them, and hedgingPolicy as conch_client_opts_set_hedge().
 * Durations are strings such as "0.5s"; codes are names ("UNAVAILABLE") or
 * numbers.  Other members (timeout, loadBalancingConfig, ...) are
 * ignored.  On error nothing is set and |err|
 * (|errlen| bytes, may be NULL) says what is wrong.
 *
 * Returns 0, CONCH_ERR_INVALID or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_service_config(conch_client_opts *opts,
                                                      const char *json,
                                                      char *err,
                                                      size_t errlen);

/** The attempts |call| made so far: 1 for a call that was never retried
    or hedged (transparent retries of refused streams do not count), 0 for
    NULL (and for a hedged call before its request was sent). */
CONCH_EXTERN unsigned conch_call_attempts(const struct conch_call *call);

#ifdef __cplusplus
}
#endif

#endif
