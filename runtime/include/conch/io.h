/*
 * conch - a Connect/gRPC client for C
 *
 * io.h: driving a client's I/O.  The client owns its sockets, never the
 * loop.  Drive it in one of three ways:
 *
 *  1. Hooks: conch_client_set_io_hooks(); the client says which fds to watch
 *     and when to fire a timer, the caller's loop reports back through
 *     conch_client_on_io() and conch_client_on_timer().
 *  2. Pull: conch_client_pollfds() + conch_client_timeout_ms() before each
 *     poll(2), then conch_client_process() with the results.
 *  3. Blocking: conch_client_run() (one poll turn), used by every *_sync
 *     function on the calling thread.  No hidden threads.
 *
 * Re-entrancy: callbacks may start, send on, cancel and free calls.  Driving
 * the client (on_io, on_timer, process, run, pollfds) from one of its own
 * callbacks returns CONCH_ERR_RECURSIVE.
 */
#ifndef CONCH_IO_H
#define CONCH_IO_H

#include <poll.h>
#include <stddef.h>

#include <conch/client.h>
#include <conch/export.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  CONCH_IO_READ = 1,
  CONCH_IO_WRITE = 2,
  /** The fd is going away: stop watching it.  Always reported before the
      client closes an fd it asked to watch. */
  CONCH_IO_REMOVE = 4
};

/** Hooks for an external event loop. */
typedef struct conch_io_hooks {
  /**
   * Watch |fd| for |events| (CONCH_IO_READ|CONCH_IO_WRITE), replacing what
   * was asked for |fd| before, or stop watching it (CONCH_IO_REMOVE).  Only
   * changes are reported.  Return 0, or non-zero if the loop cannot watch the
   * fd (the affected calls then fail with unavailable).
   */
  int (*watch)(int fd, unsigned events, void *user_data);
  /**
   * Call conch_client_on_timer() in |ms| milliseconds, replacing any timer
   * set before; -1 cancels it, 0 means as soon as possible.
   */
  int (*timer)(long ms, void *user_data);
  void *user_data;
} conch_io_hooks;

/**
 * Switches |c| to hook mode.  The hooks are called at once for every fd the
 * client already has and for its timer.  The struct is copied.  NULL switches
 * back to pull mode (each fd is reported REMOVE first).
 * Returns 0, CONCH_ERR_INVALID or CONCH_ERR_RECURSIVE.
 */
CONCH_EXTERN int conch_client_set_io_hooks(conch_client *c,
                                           const conch_io_hooks *hooks);

/**
 * Reports that |fd| is ready for |events| (CONCH_IO_READ|CONCH_IO_WRITE).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |c|) or CONCH_ERR_RECURSIVE (called from
 * inside one of the client's callbacks: nothing done).
 */
CONCH_EXTERN int conch_client_on_io(conch_client *c, int fd, unsigned events);

/**
 * Reports that the timer set through the hooks fired.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |c|) or CONCH_ERR_RECURSIVE (called from
 * inside one of the client's callbacks: nothing done).
 */
CONCH_EXTERN int conch_client_on_timer(conch_client *c);

/**
 * Fills |fds| (room for |nfds|) with what the client wants polled and
 * returns how many entries it needs; if that is more than |nfds|, only
 * |nfds| were written.  The client needs at most one per connection plus
 * one for its wakeup fd.
 */
CONCH_EXTERN size_t conch_client_pollfds(conch_client *c, struct pollfd *fds,
                                         size_t nfds);

/**
 * Milliseconds until the client next needs attention without fd activity,
 * 0 if it has work pending now, -1 if it waits only on fds.
 */
CONCH_EXTERN long conch_client_timeout_ms(conch_client *c);

/**
 * Processes poll(2) results for |fds| (as filled by conch_client_pollfds(),
 * with revents set) and any timers that are due.  Returns 0,
 * CONCH_ERR_RECURSIVE or CONCH_ERR_NOMEM; failures of a connection are
 * reported to its calls, not here.
 */
CONCH_EXTERN int conch_client_process(conch_client *c, const struct pollfd *fds,
                                      size_t nfds);

/**
 * One turn of a blocking loop: poll for at most |timeout_ms| (-1: no limit
 * of its own; the client's timers still apply), then process.  Returns 0,
 * CONCH_ERR_RECURSIVE, CONCH_ERR_IO or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_run(conch_client *c, long timeout_ms);

/**
 * Wakes the thread that drives |c|: its loop returns from poll and the
 * wakeup callback runs on it.  Thread safety: this function may be called
 * from any thread at any time while |c| exists.
 */
CONCH_EXTERN int conch_client_wakeup(conch_client *c);

/**
 * Sets the function run on the driving thread after conch_client_wakeup().
 * Several wakeups may be folded into one run.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |c|).
 */
CONCH_EXTERN int conch_client_set_wakeup_cb(conch_client *c,
                                            void (*cb)(conch_client *c,
                                                       void *user_data),
                                            void *user_data);

/** A one-shot timer on a client's loop. */
typedef struct conch_alarm conch_alarm;

/**
 * Runs |cb| on the thread that drives |c| once |ms| milliseconds have
 * passed (0: on the next turn).  The alarm is owned by the client: it is
 * freed after |cb| returns, by conch_alarm_cancel(), or by
 * conch_client_free() (then |cb| never runs).  |out| may be NULL when the
 * alarm will not be canceled.  Returns 0, CONCH_ERR_INVALID or
 * CONCH_ERR_NOMEM (then |cb| never runs).  In conch_client_process() (and
 * so conch_client_run() and the blocking calls) an alarm that was due when
 * the turn began runs before the turn's I/O is handled: a cancel scheduled
 * for a moment the loop spent busy comes before data that arrived later.
 */
CONCH_EXTERN int conch_client_alarm(conch_client *c, long ms,
                                    void (*cb)(conch_client *c,
                                               void *user_data),
                                    void *user_data, conch_alarm **out);

/**
 * Cancels |a| before it fired: its callback will not run and it is freed.
 * From inside its own callback it does nothing.  NULL is accepted.
 */
CONCH_EXTERN void conch_alarm_cancel(conch_alarm *a);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_IO_H */
