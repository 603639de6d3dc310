/*
 * conch - a Connect/gRPC client for C
 *
 * local.h: the local server, `conch serve` on the private per-user socket.
 *
 * The CLI without --url, `conch serve` without --listen, and a sandbox
 * whose conch_sandbox_opts.url is NULL all meet on one Unix socket,
 * CONCH_LOCAL_SOCKET_NAME in the user's private runtime directory:
 *
 *   $XDG_RUNTIME_DIR/conch    when XDG_RUNTIME_DIR is an absolute path to a
 *                             directory owned by the effective uid (a sudo
 *                             shell may keep another user's);
 *   ${TMPDIR:-/tmp}/conch-<euid>   otherwise.
 *
 * The directory is created with mode 0700 when missing, then opened without
 * following symlinks and checked through the descriptor: it must be a
 * directory owned by the effective uid with no access for group or others.
 * One that another user planted in a shared /tmp (or a symlink) is refused
 * with a message saying so, never used.  The socket itself is made 0600 by
 * the server, which serves only its own uid and root; the client checks the
 * other way round (the server must be ours or root's,
 * conch_client_opts_set_unix_socket()).
 *
 * conch_local_serve() starts `conch serve` there when nothing answers: the
 * CLI does so on every command, a sandbox when asked to
 * (conch_sandbox_opts.autostart).  The server it starts is nobody's child:
 * it is started through an intermediate process that the caller reaps before
 * the function returns (no zombie is left to the caller, whose SIGCHLD
 * handling is not disturbed), in a session of its own (the caller's
 * terminal signals do not reach it), with the signal mask and dispositions
 * reset, no descriptor of the caller's but stdin on /dev/null (never a pipe
 * the caller might close: `conch serve` stops when a piped stdin reaches
 * EOF) and stdout and stderr appended to `serve.log` in the directory
 * (opened without following symlinks, checked to be the user's own regular
 * file), its cwd "/", and CONCH_TOKEN removed from its environment (the
 * socket's peer check is the guard).  It runs until `conch serve --stop`,
 * a signal or a reboot; the socket's lock file (serve.sock.lock) makes sure
 * one server serves it, however many callers start one at once.
 *
 * Thread safety: these functions keep no state; they may run on any thread.
 * conch_local_serve() forks: in the child processes it calls only
 * async-signal-safe functions, so a multithreaded caller is safe.
 */
#ifndef CONCH_LOCAL_H
#define CONCH_LOCAL_H

#include <stddef.h>

#include <conch/export.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The socket's name in the runtime directory. */
#define CONCH_LOCAL_SOCKET_NAME "serve.sock"

/** The executable conch_local_serve() starts when it is given none and
    CONCH_SERVE_EXE is not set: looked up in PATH. */
#define CONCH_LOCAL_SERVE_EXE "conch"

/** How long conch_local_serve() waits for a server it started to answer,
    when given 0. */
#define CONCH_LOCAL_START_TIMEOUT_MS 60000

/**
 * The private runtime directory (see the top of this file): found, created
 * when missing, and checked.  Its path goes to |buf| (room for |cap| bytes,
 * NUL included).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |buf|); CONCH_ERR_LIMIT (the path does
 * not fit); CONCH_ERR_IO (it cannot be created or opened, or it is not a
 * private directory of ours).  On failure |st| (initialised by the caller;
 * may be NULL) gets code failed_precondition and a message naming the
 * directory and the remedy ("... is not a private directory of ours (owner
 * uid 65534, mode 0777; want uid 0, mode 0700): remove it, or set
 * XDG_RUNTIME_DIR").
 */
CONCH_EXTERN int conch_local_dir(char *buf, size_t cap, conch_status *st);

/**
 * The path of the local server's socket: conch_local_dir() followed by
 * "/" CONCH_LOCAL_SOCKET_NAME, checked to fit a Unix socket address.
 *
 * Returns as conch_local_dir(); CONCH_ERR_LIMIT also for a path too long
 * for a socket (|st| says so).
 */
CONCH_EXTERN int conch_local_socket(char *buf, size_t cap, conch_status *st);

/**
 * Whether a server answers on the Unix socket |path|: a connection is made
 * and closed at once (nothing is sent).  Does not block beyond the connect
 * of a Unix socket.
 *
 * Returns 1 (it answers) or 0 (nothing listens there, or |path| is NULL or
 * too long).
 */
CONCH_EXTERN int conch_local_answers(const char *path);

/**
 * Makes sure a local server answers on the private socket, starting one
 * when none does: `|exe| serve --listen unix:SOCKET`, detached as described
 * at the top of this file.  Waits until it answers, or until it exited
 * without answering (and no other server started meanwhile holds the
 * socket's lock), or |timeout_ms| (0: CONCH_LOCAL_START_TIMEOUT_MS) passed.
 * Blocks for that long at most; when a server already answers, returns at
 * once without starting anything.
 *
 * |exe| is the `conch` executable: a path (containing a '/'), or a name
 * looked up in PATH.  NULL: the value of CONCH_SERVE_EXE in the
 * environment when set and not empty, else CONCH_LOCAL_SERVE_EXE looked up
 * in PATH.  It must be executable.
 *
 * The socket's path goes to |buf| (room |cap|) in every case where it is
 * known, so the caller can name it.
 *
 * Returns 0 (a server answers); CONCH_ERR_INVALID (NULL |buf|);
 * CONCH_ERR_LIMIT, CONCH_ERR_IO (as conch_local_socket(); also serve.log not
 * a regular file of ours, or a symlink); CONCH_ERR_CONNECT (no executable
 * was found, it could not be started, it exited without answering, or it
 * did not answer in time; |st| gets code unavailable and a message saying
 * which, naming the log); CONCH_ERR_NOMEM.  |st| may be NULL.
 */
CONCH_EXTERN int conch_local_serve(const char *exe, long timeout_ms, char *buf,
                                   size_t cap, conch_status *st);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_LOCAL_H */
