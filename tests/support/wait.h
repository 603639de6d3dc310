/* Waiting in tests: a monotonic clock, and polling for a condition.

   Tests must pass on a loaded 2-core machine, so a test never sleeps a
   fixed time and then asserts what it hopes happened meanwhile: it polls
   the condition with conch_wait_until() and a generous limit
   (CONCH_WAIT_MS unless a case needs its own).  The shell suites have the
   same in tests/support/wait.sh. */
#ifndef CONCH_TEST_WAIT_H
#define CONCH_TEST_WAIT_H

#include <sys/types.h>

/* The default limit of a wait for something that should happen soon. */
#define CONCH_WAIT_MS 20000

/* Milliseconds of CLOCK_MONOTONIC. */
long long conch_now_ms(void);

/* Sleeps |ms| milliseconds (restarted on EINTR).  For pacing a poll loop
   or a load generator, never as a wait for a condition. */
void conch_sleep_ms(long ms);

/* Calls |pred(arg)| until it returns non-zero, every few milliseconds, for
   up to |limit_ms|.  Returns 1 when it held (it is called once more after
   the limit, so a slow machine never fails a condition that holds), 0 when
   it never did. */
int conch_wait_until(int (*pred)(void *arg), void *arg, long limit_ms);

/* 1 while |pid| is in the OS process table and not a zombie. */
int conch_proc_alive(pid_t pid);

/* Waits up to |limit_ms| for |pid| to be gone (or a zombie).  Returns 1
   when it is, 0 when it still runs. */
int conch_proc_gone_within(pid_t pid, long limit_ms);

#endif
