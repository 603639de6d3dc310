/* Test peers: spawn a server (a Node.js script such as
   tests/interop/node/server.mjs, or `conch serve`) and learn the port it
   listens on.  The one spawner of every suite: nothing else forks a peer.

   The script must print a line "LISTENING <port>" to stdout once it accepts
   connections, and exit when its stdin reaches EOF or on SIGTERM.  The
   child's stdin is a pipe whose write end only this process holds, so the
   peer goes away with us even if we crash; it also gets PR_SET_PDEATHSIG
   SIGTERM (which fires when the thread that called conch_peer_start()
   exits, so call it from a thread that outlives the peer).  Its stderr is
   ours. */
#ifndef CONCH_TEST_PEER_H
#define CONCH_TEST_PEER_H

#include <sys/types.h>

typedef struct conch_peer {
  pid_t pid;    /* the node process; -1 when none */
  int port; /* the port from its LISTENING line (0: "LISTENING unix:PATH") */
  int stdin_fd; /* write end of its stdin (close-on-exec); -1 when none */
} conch_peer;

/* Runs `$CONCH_NODE script extra_args...` (CONCH_NODE unset or empty:
   "node", looked up in PATH) and waits up to 120 s for its LISTENING line.
   |extra_args| is a NULL-terminated list, or NULL for none.  Returns 0 with
   |p| filled in, or -1 after printing why on stderr, with the child (if
   any) killed and reaped and |p| set to pid -1, port 0, stdin_fd -1.  The
   child's stdout is closed once the line has been read: the script must
   print nothing else there. */
int conch_peer_start(conch_peer *p, const char *script,
                     const char *const *extra_args);

/* The same for any program: argv[0] (looked up in PATH) with argv[1..],
   NULL-terminated. */
int conch_peer_start_argv(conch_peer *p, const char *const *argv);

/* Sends SIGTERM, closes stdin_fd, waits up to 5 s for the exit, then
   SIGKILLs and reaps it.  Safe to call twice and on a failed start. */
void conch_peer_stop(conch_peer *p);

/* For a peer whose exit status is under test (conch serve): sends SIGTERM,
   keeps stdin open and waits up to |wait_ms| for the exit, then closes
   stdin.  Returns the exit status (0..255), 128+signal, or -1 when it had to
   be SIGKILLed or there was no peer. */
int conch_peer_stop_status(conch_peer *p, long wait_ms);

/* Whether every package of |names| (NULL-terminated) is installed in the
   node_modules folder |dir|; prints which one is not ("SKIP: ...", for a
   test that then exits 77) and returns 0 when one is missing. */
int conch_peer_have_modules(const char *dir, const char *const *names);

#endif
