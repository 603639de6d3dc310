/*
 * conch - a Connect/gRPC client for C
 *
 * process.h: running processes in a sandbox through the process.Process
 * service of the E2B sandbox daemon (envd), or `conch serve`.
 *
 * A sandbox is a target (URL, token, default user and timeouts).  On it:
 *
 *  - conch_run() runs a command to completion and returns its output in a
 *    conch_exec_result (streamed = 0), each stream bounded (its first
 *    CONCH_MAX_OUTPUT_DEFAULT bytes by default; .truncated says when more
 *    was dropped).  A non-zero exit is a result, not an error.
 *  - conch_stream() returns a conch_process handle: conch_process_next()
 *    yields tagged chunks (stdout, stderr, pty) as they arrive, ordered
 *    within each stream (not across them); conch_process_wait() returns the
 *    result (streamed = 1, no buffers); conch_process_close() is the only
 *    way to release the handle and, if the process still runs, ends it
 *    (SIGTERM, a grace period, then SIGKILL), whatever state the caller is
 *    in.  Freeing the sandbox closes every open handle the same way.
 *  - conch_start() (background), conch_list(), conch_kill(), stdin,
 *    conch_connect() (re-attach), and PTYs.
 *
 * Every blocking function has an asynchronous form that runs on the
 * sandbox's client loop (conch_sandbox_native(), driven with the functions
 * of conch/io.h); one thread can keep thousands of processes going.  The
 * blocking forms drive that loop themselves: do not mix them with hooks.
 *
 * Errors: functions return 0 or a negative CONCH_ERR_*.  CONCH_ERR_RPC means
 * the RPC failed; the conch_status passed in (initialised by the caller,
 * may be NULL) then holds its Connect code and message, e.g. unavailable
 * when the sandbox cannot be reached, not_found for an unknown pid,
 * deadline_exceeded when the process outlived its timeout.
 *
 * Thread safety: a sandbox and its handles belong to one thread at a time.
 */
#ifndef CONCH_PROCESS_H
#define CONCH_PROCESS_H

#include <stddef.h>
#include <stdint.h>

#include <conch/conch.h>

#ifdef __cplusplus
extern "C" {
#endif

/** envd's address, where E2B's SDKs look for it in debug mode.  Not the
    default of a sandbox: a NULL url is the local server's private socket
    (conch/local.h), as for the CLI. */
#define CONCH_SANDBOX_DEFAULT_URL "http://127.0.0.1:49983"

/** conch_sandbox_opts.keepalive_ms by default: a dead or frozen server ends
    open streams with unavailable within 3 x 10 s + 5 s = 35 s. */
#define CONCH_KEEPALIVE_DEFAULT_MS 10000

/**
 * How much output conch_run() keeps of each of stdout and stderr by
 * default (conch_sandbox_opts.max_output_bytes): 16 MiB.  Generous for
 * what a caller reads whole (a build log, a test run; a model's context
 * takes far less), and finite: a runaway loop or a `cat` of a large file
 * costs at most 64 MiB per run (stdout, stderr and text), the same order as
 * the largest message conch serve takes (16 MiB).  Output of any size is
 * better streamed (conch_stream()) or written to a file.
 */
#define CONCH_MAX_OUTPUT_DEFAULT ((size_t)16 << 20)

/** conch_proc_opts / conch_sandbox_opts.max_output_bytes: keep everything
    (the behaviour before the limit existed). */
#define CONCH_OUTPUT_UNLIMITED ((size_t)-1)

typedef struct conch_sandbox conch_sandbox;
typedef struct conch_process conch_process;

/** What a sandbox supports.  envd and `conch serve` support all of it. */
enum {
  /** Output streamed as it is produced (conch_stream, conch_connect). */
  CONCH_CAP_STREAMING = 1u << 0,
  /** Ordered stdin streams (conch_stdin_open: client streaming). */
  CONCH_CAP_STDIN_STREAM = 1u << 1,
  /** Pseudo-terminals. */
  CONCH_CAP_PTY = 1u << 2,
  CONCH_CAP_ALL = 0x7u
};

/**
 * Process trees.  Ending a process (conch_process_close(), a lifetime,
 * conch_kill()) must end what it started too.  `conch serve` signals each
 * process's whole group itself and says so (a `conch-signals: group`
 * header on its Start and Connect answers).  envd signals the pid only, so
 * a shell's children outlive it.  There, by default, a piped process
 * (never a PTY: envd gives those a session, whose hangup ends the
 * foreground group) starts under a small leader: `/bin/sh -c <script> --
 * GRACE MODE CMD ARGS...`, which runs CMD under GNU timeout in a process
 * group of its own with a watcher beside it (api/tree.c says how).  Then:
 *  - SIGTERM (or HUP) reaches the whole group; what is left of it is
 *    SIGKILLed after the sandbox's kill_grace_ms (members that trap TERM,
 *    even once CMD ended) by the leader itself.  INT and QUIT (which only
 *    a process in the sandbox can send: SendSignal has TERM and KILL)
 *    reach the group too, but what is left once CMD has ended (a shell's
 *    background jobs ignore both) stays; a close sends its own
 *    SIGKILL of the pid 500 ms after that, so that it never ends the
 *    leader before the leader's KILL of the group;
 *  - SIGKILL of the pid (conch_kill, the server's deadline) SIGKILLs the
 *    group at once (the watcher sees the leader end while CMD lives);
 *  - the pid reported (conch_process_pid(), the start, conch_list()) is the
 *    one to signal; conch_list() shows CMD and its arguments, not the
 *    leader; the exit code (0-255) and a death by signal are CMD's own;
 *    stdin, env, cwd, user and re-attach behave as without it;
 *  - a normal end of CMD leaves its background children alone, as the
 *    server would.
 * It needs GNU timeout (coreutils), mkfifo and a writable ${TMPDIR:-/tmp}
 * in the sandbox: without them CONCH_TREE_AUTO runs CMD as without the
 * leader, CONCH_TREE_ON fails it (exit 125, the reason on stderr).  Before
 * the first Start or Connect answer of a sandbox the server's way is not
 * known: that first process starts under the leader, which on a server
 * that already gave it a group of its own just execs CMD.
 * A SIGKILL of the leader in its first milliseconds, before its watcher
 * runs, is covered too: the watcher, started anyway, finds timeout gone and
 * KILLs the group (0 trees left of 60 KILLed as soon as `conch start`
 * returned; 2 of 20 before the watcher was told timeout's pid).
 * Not covered: descendants that call setsid() (or otherwise leave the
 * group); the watcher itself killed; a core dump (the status says the signal, not
 * "(core dumped)", and timeout writes a line on stderr).  Cost: two more
 * processes per command (timeout and the watcher), a few ms at the start.
 */
enum {
  /** The sandbox's choice (in a sandbox's options: CONCH_TREE in the
      environment, else CONCH_TREE_AUTO). */
  CONCH_TREE_DEFAULT = 0,
  /** The leader unless the server said it signals groups itself; without
      the tools in the sandbox, none. */
  CONCH_TREE_AUTO = 1,
  /** Never the leader. */
  CONCH_TREE_OFF = 2,
  /** Always the leader (on a server that gives every process its own
      group it just execs CMD); without the tools the process fails. */
  CONCH_TREE_ON = 3
};

/**
 * Sandbox options.  Initialise with CONCH_SANDBOX_OPTS_INIT; fields outside
 * |struct_size| are not read.  Strings and metadata are copied.
 */
typedef struct conch_sandbox_opts {
  size_t struct_size;
  /** Where envd listens: "http://HOST:PORT", "https://...", or
      "unix:PATH" for a Unix socket (conch_client_new()); so does an http://
      URL with conch_client_opts_set_unix_socket() in |client_opts|.
      NULL = the local server, the CLI's default: `conch serve` on the
      private per-user socket (conch_local_socket(), conch/local.h), which
      must answer when the sandbox is created unless |autostart| starts it
      (else conch_sandbox_open() fails with unavailable, naming the socket
      and how to start a server there). */
  const char *url;
  /** Sent as X-Access-Token when not NULL. */
  const char *access_token;
  /** Default user for processes (Authorization: Basic); NULL = the
      server's default user. */
  const char *user;
  /** Extra metadata for every request (e.g. E2b-Sandbox-Id), or NULL. */
  const conch_metadata *headers;
  /** Default lifetime of processes started by run, stream and pty: 0 =
      60000 ms, -1 = none.  Enforced by the server (envd kills the process
      at its deadline). */
  long timeout_ms;
  /** Time allowed for unary calls and for a process to report its start:
      0 = 60000 ms, -1 = none. */
  long request_timeout_ms;
  /** conch_process_close(): time between SIGTERM and SIGKILL; 0 = 2000 ms. */
  long kill_grace_ms;
  /** What the target supports (CONCH_CAP_*); 0 = CONCH_CAP_ALL. */
  unsigned capabilities;
  /** Protocol, TLS and transport options for the client; NULL = defaults.
      Copied. */
  const conch_client_opts *client_opts;
  /**
   * Liveness of long-lived streams (run, stream, pty, connect, stdin
   * streams), in ms: 0 = 10000, -1 = off.  With it, a dead or silent peer
   * (a server frozen with SIGSTOP, a vanished host) ends every open stream
   * with unavailable instead of a hang, at the latest 3 x keepalive_ms +
   * 5000 ms (35 s by default) after the stream last received anything:
   *  - Start and Connect send Keepalive-Ping-Interval (keepalive_ms in
   *    seconds, rounded up): envd and `conch serve` then send a keepalive
   *    event on a stream that had nothing else to say for that long, and a
   *    stream that hears nothing for the bound above is taken for dead.
   *    This works over HTTP/1.1 and through proxies too.
   *  - HTTP/2 PING keepalive (conch_client_opts_set_keepalive) with this
   *    interval and a timeout of 2 x keepalive_ms, unless |client_opts| set
   *    keepalive itself (on or off): a connection that reads nothing for
   *    3 x keepalive_ms fails with all its calls.
   *  - A stdin stream whose writes or close make no progress for the bound
   *    ends with unavailable (the server took nothing for that long).
   * The blocking forms measure silence while they wait; asynchronous
   * handles on the loop, which the caller must keep driving.  -1 turns all
   * of it off (Keepalive-Ping-Interval is then 50, as the SDKs send): for a
   * server that ignores Keepalive-Ping-Interval, whose quiet processes
   * would otherwise be taken for a dead server.
   */
  long keepalive_ms;
  /** With |url| NULL: non-zero starts the local server when nothing
      answers on its socket, as the CLI does (conch_local_serve(): detached,
      no zombie, no descriptor of the caller's, stdin /dev/null, output to
      serve.log); conch_sandbox_open() then blocks until it answers, at most
      |request_timeout_ms| (0 or -1: CONCH_LOCAL_START_TIMEOUT_MS).  0 (the
      default): nothing is started.  Ignored with a |url|. */
  int autostart;
  /** The `conch` executable |autostart| runs: a path, or a name looked up
      in PATH; NULL = $CONCH_SERVE_EXE, else `conch` in PATH.  Copied (used
      only while the sandbox is created). */
  const char *serve_exe;
  /** The output conch_run() and conch_run_async() keep of each process,
      per stream (conch_proc_opts.max_output_bytes): 0 =
      CONCH_MAX_OUTPUT_DEFAULT, CONCH_OUTPUT_UNLIMITED = no limit. */
  size_t max_output_bytes;
  /** Whether piped processes start under the tree leader (CONCH_TREE_*,
      see "Process trees" above): CONCH_TREE_DEFAULT (0) = the value of
      CONCH_TREE in the environment ("off", "on" or "auto"; anything else
      makes conch_sandbox_open() fail with CONCH_ERR_INVALID), else
      CONCH_TREE_AUTO. */
  int tree;
  void *reserved[3];
} conch_sandbox_opts;

#define CONCH_SANDBOX_OPTS_INIT                                                \
  {                                                                            \
    sizeof(conch_sandbox_opts), NULL, NULL, NULL, NULL, 0, 0, 0, 0, NULL, 0,   \
        0, NULL, 0, 0, {                                                       \
      0                                                                        \
    }                                                                          \
  }

/**
 * Creates a sandbox handle.  With a |url| no connection is made until the
 * first call.  With |url| NULL (the local server) the private socket is
 * found and its directory checked (conch_local_socket()), and a server must
 * answer there: one already running, or one |autostart| started.
 *
 * Returns 0; CONCH_ERR_INVALID, CONCH_ERR_URL, CONCH_ERR_TLS or
 * CONCH_ERR_NOMEM; with |url| NULL also CONCH_ERR_IO or CONCH_ERR_LIMIT
 * (the runtime directory is not usable) and CONCH_ERR_CONNECT (no local
 * server answers, or it could not be started): conch_sandbox_open() says
 * why.
 */
CONCH_EXTERN int conch_sandbox_new(conch_sandbox **out,
                                   const conch_sandbox_opts *opts);

/**
 * conch_sandbox_new() that says why it failed: |st| (initialised by the
 * caller; may be NULL) gets a status when it returns CONCH_ERR_IO,
 * CONCH_ERR_LIMIT or CONCH_ERR_CONNECT: failed_precondition for a runtime
 * directory that is not private ("/tmp/conch-0 is not a private directory
 * of ours (...): remove it, or set XDG_RUNTIME_DIR"), unavailable when no
 * local server answers ("no local server answers on
 * /run/user/1000/conch/serve.sock: start one with `conch serve` (it listens
 * there by default), or set conch_sandbox_opts.autostart") or it did not
 * start (naming its log, serve.log in the same directory).
 *
 * Returns as conch_sandbox_new().
 */
CONCH_EXTERN int conch_sandbox_open(conch_sandbox **out,
                                    const conch_sandbox_opts *opts,
                                    conch_status *st);

/**
 * Closes every process handle still open (each as conch_process_close()
 * does, all at once: SIGTERM, the grace period, SIGKILL) and frees the
 * sandbox.  Blocks while it does so.  NULL is accepted.
 */
CONCH_EXTERN void conch_sandbox_free(conch_sandbox *sb);

/**
 * The sandbox's RPC client, for the generated process.Process stubs
 * (gen/process/process.conch.h) and for driving the loop of the
 * asynchronous forms.  Borrowed; lives as long as |sb|.
 */
CONCH_EXTERN conch_client *conch_sandbox_native(conch_sandbox *sb);

/** The sandbox's CONCH_CAP_* flags. */
CONCH_EXTERN unsigned conch_sandbox_capabilities(const conch_sandbox *sb);

/* ---- Options and results ------------------------------------------------ */

/** One environment variable. */
typedef struct conch_env {
  const char *name;
  const char *value;
} conch_env;

/**
 * Options of a process.  Initialise with CONCH_PROC_OPTS_INIT; fields
 * outside |struct_size| are not read.  Everything is copied.
 */
typedef struct conch_proc_opts {
  size_t struct_size;
  /** The program (looked up in PATH by the server's shell). */
  const char *cmd;
  /** Its arguments, not including the program itself. */
  const char *const *args;
  size_t nargs;
  /** Environment added to the server's defaults (last one wins). */
  const conch_env *env;
  size_t nenv;
  /** Working directory; NULL = the user's home.  "~" is expanded. */
  const char *cwd;
  /** User to run as; NULL = the sandbox's default. */
  const char *user;
  /** A tag to find the process by (conch_connect, conch_kill). */
  const char *tag;
  /** Non-zero: stdin is a pipe for conch_process_send_stdin(); zero:
      /dev/null. */
  int stdin_enabled;
  /** Both non-zero: the process runs on a pseudo-terminal of this size and
      its output comes as CONCH_CHUNK_PTY. */
  uint32_t pty_cols;
  uint32_t pty_rows;
  /** Lifetime: 0 = the default (the sandbox's for run, stream and pty,
      none for start), -1 = none, else ms.  Enforced by the server. */
  long timeout_ms;
  /** Time allowed for the process to report its start: 0 = the
      sandbox's, -1 = none. */
  long request_timeout_ms;
  /** conch_run() only: called with each piece of output as it arrives
      (borrowed bytes), all of it, whatever |max_output_bytes| keeps.  May
      be NULL. */
  void (*on_stdout)(const uint8_t *data, size_t len, void *user_data);
  void (*on_stderr)(const uint8_t *data, size_t len, void *user_data);
  void *user_data;
  /**
   * conch_run() and conch_run_async(): the most bytes of each of stdout
   * and stderr the result keeps (PTY output counts as stdout).  0 = the
   * sandbox's (conch_sandbox_opts.max_output_bytes, by default
   * CONCH_MAX_OUTPUT_DEFAULT), CONCH_OUTPUT_UNLIMITED = all of it.  Each
   * stream keeps its first bytes up to the limit; the rest is still read
   * from the server (the process never blocks on a full buffer, and its
   * end and exit code arrive as usual) but dropped, and the result says so
   * (conch_exec_result.truncated, out_dropped, err_dropped).  |text| keeps
   * exactly the bytes kept of both, in arrival order: at most twice the
   * limit.  Memory held for a run's output is therefore at most 4 x the
   * limit (stdout, stderr and text).
   */
  size_t max_output_bytes;
  /** The tree leader for this process (CONCH_TREE_*): CONCH_TREE_DEFAULT
      (0) = the sandbox's.  Never used for a PTY. */
  int tree;
  void *reserved[6];
} conch_proc_opts;

#define CONCH_PROC_OPTS_INIT                                                   \
  {                                                                            \
    sizeof(conch_proc_opts), NULL, NULL, 0, NULL, 0, NULL, NULL, NULL, 0, 0,   \
        0, 0, 0, NULL, NULL, NULL, 0, 0, {                                     \
      0                                                                        \
    }                                                                          \
  }

/**
 * How a process ended and what it wrote.  Caller-allocated;
 * conch_exec_result_clear() frees what it holds.
 */
typedef struct conch_exec_result {
  uint32_t pid;
  /** Non-zero once the server reported the end (EndEvent). */
  int ended;
  /** The exit status; -1 when the process was killed by a signal or its
      end is unknown. */
  int exit_code;
  /** Non-zero when the process exited (rather than being killed). */
  int exited;
  /** The server's words: "exit status 1", "signal: killed", ...; NULL when
      the end is unknown. */
  char *status;
  /** The end's error text (absent on exit 0): NULL when none. */
  char *error;
  /** Output, when not streamed (conch_run): stdout, stderr, and both
      together in arrival order.  Empty (NULL, 0) when |streamed|. */
  uint8_t *out;
  size_t out_len;
  uint8_t *err;
  size_t err_len;
  uint8_t *text;
  size_t text_len;
  /** Non-zero when the output was streamed to the caller, so the buffers
      above are empty by construction, not because there was no output. */
  int streamed;
  /** Bytes of stdout and of stderr past conch_proc_opts.max_output_bytes:
      read and dropped, not in |out|, |err| or |text| (which hold each
      stream's first bytes).  0 when nothing was dropped. */
  size_t out_dropped;
  size_t err_dropped;
  /** CONCH_TRUNCATED_STDOUT and/or CONCH_TRUNCATED_STDERR when that
      stream's output went past the limit (its *_dropped is then non-zero,
      and |text| lacks those bytes too); 0 when everything was kept. */
  unsigned truncated;
  void *reserved[1];
} conch_exec_result;

/** conch_exec_result.truncated: stdout (or PTY output) was cut. */
#define CONCH_TRUNCATED_STDOUT 1u
/** conch_exec_result.truncated: stderr was cut. */
#define CONCH_TRUNCATED_STDERR 2u

/** Sets |r| empty. */
CONCH_EXTERN void conch_exec_result_init(conch_exec_result *r);
/** Frees what |r| holds and sets it empty.  NULL is accepted. */
CONCH_EXTERN void conch_exec_result_clear(conch_exec_result *r);

/** Which output a chunk is. */
typedef enum conch_chunk_stream {
  CONCH_CHUNK_STDOUT = 1,
  CONCH_CHUNK_STDERR = 2,
  CONCH_CHUNK_PTY = 3
} conch_chunk_stream;

/** A piece of output.  |data| is borrowed (see where it comes from). */
typedef struct conch_chunk {
  conch_chunk_stream stream;
  const uint8_t *data;
  size_t len;
} conch_chunk;

/** Picks a process: by |tag| when it is not NULL, else by |pid|. */
typedef struct conch_selector {
  uint32_t pid;
  const char *tag;
} conch_selector;

/* ---- Running ------------------------------------------------------------ */

/**
 * Runs a process to its end and collects its output into |res|
 * (initialised by the caller; conch_exec_result_clear() after), each
 * stream up to |o->max_output_bytes| (by default the sandbox's, 16 MiB):
 * past it the output goes on being read and is dropped, and
 * |res->truncated| says which stream was cut.  Output callbacks of |o| run
 * as output arrives, with all of it.  A non-zero exit is a result.
 *
 * Returns 0 (the process ended; see |res|), CONCH_ERR_RPC (the RPC failed:
 * |st| says why; |res| holds what arrived, and the process was ended if it
 * might still run), CONCH_ERR_INVALID, CONCH_ERR_RECURSIVE or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_run(conch_sandbox *sb, const conch_proc_opts *o,
                           conch_exec_result *res, conch_status *st);

/**
 * Starts a process whose output the caller reads with conch_process_next().
 * Checks CONCH_CAP_STREAMING before anything is sent (missing:
 * CONCH_ERR_CAPABILITY).  Returns once the server reported the start (the
 * pid is known), with |*out| set; release it with conch_process_close().
 *
 * Returns 0, CONCH_ERR_CAPABILITY, CONCH_ERR_RPC (|st| says why: e.g.
 * invalid_argument for a missing cwd, unauthenticated for an unknown user;
 * nothing is left running), CONCH_ERR_INVALID, CONCH_ERR_RECURSIVE or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_stream(conch_sandbox *sb, const conch_proc_opts *o,
                              conch_process **out, conch_status *st);

/**
 * Opens a pseudo-terminal process: conch_stream() with a PTY of
 * |o->pty_cols| x |o->pty_rows| (default 80 x 24), `/bin/bash -i -l` when
 * |o->cmd| is NULL, and TERM=xterm-256color, LANG and LC_ALL=C.UTF-8 added
 * to the environment.  Needs CONCH_CAP_PTY.  Returns as conch_stream().
 */
CONCH_EXTERN int conch_pty_open(conch_sandbox *sb, const conch_proc_opts *o,
                                conch_process **out, conch_status *st);

/**
 * Starts a process in the background and returns once its pid is known.
 * It keeps running after this returns (by default without a time limit);
 * use conch_kill(), or conch_connect() to follow it.
 * Returns 0, CONCH_ERR_RPC, CONCH_ERR_INVALID, CONCH_ERR_RECURSIVE or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_start(conch_sandbox *sb, const conch_proc_opts *o,
                             uint32_t *pid, conch_status *st);

/** conch_connect() flag: closing the handle leaves the process running. */
#define CONCH_CONNECT_DETACHED 1u

/**
 * Re-attaches to a running (or recently ended) process: a handle as from
 * conch_stream(), whose output starts with what the process writes from
 * now on.  Unless |flags| has CONCH_CONNECT_DETACHED, closing the handle
 * ends the process, as for conch_stream().  Needs CONCH_CAP_STREAMING.
 * Returns as conch_stream(); not_found when no such process is known.
 */
CONCH_EXTERN int conch_connect(conch_sandbox *sb, const conch_selector *sel,
                               unsigned flags, conch_process **out,
                               conch_status *st);

/* ---- Process handles ---------------------------------------------------- */

/** The process id. */
CONCH_EXTERN uint32_t conch_process_pid(const conch_process *p);

/**
 * The next chunk of output, blocking until one arrives.  |chunk->data| is
 * borrowed until the next call on |p|.  KeepAlive events are skipped.  A
 * server that sends nothing (not even keepalives) for the liveness bound
 * (conch_sandbox_opts.keepalive_ms) ends the stream with unavailable.
 *
 * Returns 0 (a chunk), CONCH_ERR_EOF (the process ended and all its output
 * was read: conch_process_wait() gives the end), CONCH_ERR_RPC (the stream
 * failed; conch_process_status() says why), CONCH_ERR_STATE (an
 * asynchronous handle), CONCH_ERR_RECURSIVE.
 */
CONCH_EXTERN int conch_process_next(conch_process *p, conch_chunk *chunk);

/**
 * Waits for the end, reading and discarding unread output, and fills |res|
 * (initialised by the caller) with streamed = 1 and empty buffers.
 * Idempotent.  Returns 0, CONCH_ERR_RPC (the stream failed: |st| says why;
 * |res| has what is known), CONCH_ERR_RECURSIVE or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_process_wait(conch_process *p, conch_exec_result *res,
                                    conch_status *st);

/**
 * The only release of |p|.  If the process may still run (its end was not
 * reported), it is ended: SIGTERM, then SIGKILL once the sandbox's grace
 * period has passed (the server enforces this too, should the client go
 * away), and the end is awaited.  Works after a finished iteration, an early
 * break, an error or a passed deadline alike.  Blocks.  |p| is freed in
 * every case.
 *
 * Returns 0 (the process is known to have ended), or CONCH_ERR_RPC when its
 * end could not be confirmed (the sandbox was unreachable).  With liveness
 * on, each call of the close (the signal, the wait for the end) gets no more
 * than the liveness bound, so a dead or frozen server does not hang it; a
 * server that resumes later still ends the process at its lifetime
 * (timeout_ms), as servers do not end a process whose stream went away.
 * NULL is accepted (returns 0).
 */
CONCH_EXTERN int conch_process_close(conch_process *p);

/** The status of the process's stream once it ended, else NULL. */
CONCH_EXTERN const conch_status *conch_process_status(const conch_process *p);

/**
 * Sends |signal| (SIGTERM or SIGKILL) to the process.  Blocking.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |p|, or a process whose start was not
 * reported); CONCH_ERR_NOMEM; CONCH_ERR_RPC (|st| says why, e.g. not_found
 * once it ended).
 */
CONCH_EXTERN int conch_process_signal(conch_process *p, int signal,
                                      conch_status *st);

/**
 * Writes to the process's stdin (or its terminal, for a PTY).
 *
 * Returns as conch_process_signal().
 */
CONCH_EXTERN int conch_process_send_stdin(conch_process *p, const void *data,
                                          size_t len, conch_status *st);

/**
 * Closes the process's stdin (not for PTYs: send Ctrl-D, 0x04).
 *
 * Returns as conch_process_signal().
 */
CONCH_EXTERN int conch_process_close_stdin(conch_process *p, conch_status *st);

/**
 * Resizes the process's terminal.
 *
 * Returns as conch_process_signal().
 */
CONCH_EXTERN int conch_process_resize(conch_process *p, uint32_t cols,
                                      uint32_t rows, conch_status *st);

/* ---- By pid or tag ------------------------------------------------------ */

/** A running process as conch_list() reports it.  Everything is owned by
    the list (conch_process_list_free()). */
typedef struct conch_process_info {
  uint32_t pid;
  char *tag; /* NULL when none */
  char *cmd;
  char **args;
  size_t nargs;
  conch_env *env; /* as sent at start; strings owned */
  size_t nenv;
  char *cwd; /* NULL when not set */
} conch_process_info;

/**
 * Lists running processes into |*list| (|*n| entries).
 *
 * Returns 0; CONCH_ERR_INVALID (a NULL argument); CONCH_ERR_NOMEM;
 * CONCH_ERR_RPC (|st| says why).
 */
CONCH_EXTERN int conch_list(conch_sandbox *sb, conch_process_info **list,
                            size_t *n, conch_status *st);

/** Frees a list from conch_list().  NULL is accepted. */
CONCH_EXTERN void conch_process_list_free(conch_process_info *list, size_t n);

/** Sends |signal| (SIGTERM 15 or SIGKILL 9) to a process.  Other signals
    are refused by the server (unimplemented).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |sb|, a selector with neither pid nor
 * tag); CONCH_ERR_NOMEM; CONCH_ERR_RPC (|st| says why: not_found,
 * unimplemented for another signal, ...).
 */
CONCH_EXTERN int conch_kill(conch_sandbox *sb, const conch_selector *sel,
                            int signal, conch_status *st);

/**
 * Writes to a process's stdin (or terminal, for a PTY process).
 *
 * Returns as conch_kill(); CONCH_ERR_INVALID also for NULL |data| with |len|
 * > 0.
 */
CONCH_EXTERN int conch_send_stdin(conch_sandbox *sb, const conch_selector *sel,
                                  const void *data, size_t len,
                                  conch_status *st);

/**
 * Closes a process's stdin.
 *
 * Returns as conch_kill().
 */
CONCH_EXTERN int conch_close_stdin(conch_sandbox *sb, const conch_selector *sel,
                                   conch_status *st);

/**
 * Writes to a PTY process's terminal.
 *
 * Returns as conch_send_stdin().
 */
CONCH_EXTERN int conch_pty_send(conch_sandbox *sb, const conch_selector *sel,
                                const void *data, size_t len, conch_status *st);

/**
 * Resizes a PTY process's terminal.
 *
 * Returns as conch_kill(); CONCH_ERR_INVALID also for 0 columns or rows.
 */
CONCH_EXTERN int conch_pty_resize(conch_sandbox *sb, const conch_selector *sel,
                                  uint32_t cols, uint32_t rows,
                                  conch_status *st);

/** An ordered stdin stream (StreamInput: one client-streaming call). */
typedef struct conch_stdin conch_stdin;

/** Opens a stdin stream to a (non-PTY) process.  Needs
    CONCH_CAP_STDIN_STREAM.  Blocks until the server accepted it.
 *
 * Returns 0 with |*out| set; CONCH_ERR_INVALID (a NULL argument or an empty
 * selector); CONCH_ERR_CAPABILITY (the sandbox cannot stream stdin);
 * CONCH_ERR_NOMEM; CONCH_ERR_RPC (|st| says why).
 */
CONCH_EXTERN int conch_stdin_open(conch_sandbox *sb, const conch_selector *sel,
                                  conch_stdin **out, conch_status *st);

/** Opens an ordered input stream to a PTY process's terminal (keystrokes
    in order).  Needs CONCH_CAP_STDIN_STREAM.  Write and close it as a stdin
    stream.
 *
 * Returns as conch_stdin_open().
 */
CONCH_EXTERN int conch_pty_input_open(conch_sandbox *sb,
                                      const conch_selector *sel,
                                      conch_stdin **out, conch_status *st);

/** Queues |data| for the process's stdin, in order.  Blocks only while the
    send buffer is full, and no longer than the liveness bound: a server
    that takes nothing for that long ends the stream with unavailable.
    Returns 0, CONCH_ERR_RPC (the stream ended: conch_stdin_close() says
    why), CONCH_ERR_INVALID or CONCH_ERR_NOMEM. */
CONCH_EXTERN int conch_stdin_write(conch_stdin *in, const void *data,
                                   size_t len);

/** Ends the stream, waits for the server's answer (no longer than the
    liveness bound) and frees |in|.  Returns 0, CONCH_ERR_RPC (|st| says
    why: unavailable when the server did not answer in time) or
    CONCH_ERR_STATE (an asynchronous stream: conch_stdin_end() and
    conch_stdin_free()). */
CONCH_EXTERN int conch_stdin_close(conch_stdin *in, conch_status *st);

/** Events of an asynchronous stdin stream (conch_stdin_open_async()), on
    the sandbox's client loop.  Both may be NULL. */
typedef struct conch_stdin_handler {
  /** conch_stdin_send() returned CONCH_ERR_AGAIN before: there is room
      again. */
  void (*on_ready)(conch_stdin *in, void *user_data);
  /** The stream ended, exactly once for every opened stream: after
      conch_stdin_end() with OK once the server took everything, or on a
      failure (|st| says why: not_found for a process that is gone,
      internal for one without stdin, unavailable, canceled when it was
      freed first).  |in| stays valid until conch_stdin_free(), which may
      be called from here. */
  void (*on_end)(conch_stdin *in, const conch_status *st, void *user_data);
} conch_stdin_handler;

/**
 * An ordered stdin stream without blocking (|pty| 0: stdin, as
 * conch_stdin_open(); 1: a PTY's terminal, as conch_pty_input_open()):
 * the StreamInput call starts at once and |h| reports its end.  Writes are
 * conch_stdin_send(), in order; conch_stdin_end() ends it; the handle is
 * released with conch_stdin_free().  |h| is copied.  Liveness is the
 * connection's (HTTP/2 PINGs, conch_sandbox_opts.keepalive_ms).
 *
 * Returns 0 with |*out| set (on_end runs exactly once, later, never inside
 * this call); CONCH_ERR_INVALID (a NULL argument or an empty selector);
 * CONCH_ERR_CAPABILITY (CONCH_CAP_STDIN_STREAM missing); CONCH_ERR_NOMEM.
 * On failure no handler runs.
 */
CONCH_EXTERN int conch_stdin_open_async(conch_sandbox *sb,
                                        const conch_selector *sel, int pty,
                                        const conch_stdin_handler *h,
                                        void *user_data, conch_stdin **out);

/**
 * Queues |data| (copied) on an asynchronous stream, after what was queued
 * before.  Never blocks.
 *
 * Returns 0; CONCH_ERR_AGAIN (the send buffer is over its high-water mark:
 * nothing was queued, on_ready follows); CONCH_ERR_RPC (the stream ended:
 * on_end says or said why); CONCH_ERR_STATE (after conch_stdin_end(), or a
 * blocking stream); CONCH_ERR_INVALID (NULL |in|, or NULL |data| with |len|
 * > 0); CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_stdin_send(conch_stdin *in, const void *data,
                                  size_t len);

/**
 * Ends an asynchronous stream once what was queued went out: on_end
 * follows with the server's answer.
 *
 * Returns 0; CONCH_ERR_STATE (ended already, or a blocking stream);
 * CONCH_ERR_INVALID (NULL |in|).
 */
CONCH_EXTERN int conch_stdin_end(conch_stdin *in);

/**
 * Releases an asynchronous stream.  One that has not ended is canceled
 * first: its on_end runs (canceled) before this returns, and a
 * conch_stdin_free() from inside that on_end does nothing.  From inside
 * its own on_end the release happens once the handler returns.  NULL is
 * accepted.
 */
CONCH_EXTERN void conch_stdin_free(conch_stdin *in);

/* ---- Asynchronous forms -------------------------------------------------

   Every function below that takes a |done| keeps one contract: a non-zero
   return means |done| never runs; 0 means it runs exactly once, later,
   on the thread that drives the sandbox's client, never inside the call
   that was given it. */

/**
 * Events of an asynchronous process, on the sandbox's client loop.  Every
 * member may be NULL.  Pointers are borrowed until the handler returns.
 */
typedef struct conch_process_handler {
  /** The server reported the start. */
  void (*on_start)(conch_process *p, uint32_t pid, void *user_data);
  /** Output arrived. */
  void (*on_chunk)(conch_process *p, const conch_chunk *chunk, void *user_data);
  /** The stream ended: exactly once for every started process.  |st| is
      OK when the process's end was reported.  |p| may be closed here. */
  void (*on_end)(conch_process *p, const conch_exec_result *res,
                 const conch_status *st, void *user_data);
} conch_process_handler;

/**
 * conch_run() on the loop: output is collected into the result given to
 * on_end (streamed = 0; bounded by max_output_bytes as for conch_run(),
 * its buffers borrowed until on_end returns) and also passed, all of it,
 * to on_chunk.  |h| is copied.
 * Returns 0 with |*out| set (release it with conch_process_close() or
 * conch_process_close_async(), also after on_end), CONCH_ERR_INVALID or
 * CONCH_ERR_NOMEM (no handler runs).
 */
CONCH_EXTERN int conch_run_async(conch_sandbox *sb, const conch_proc_opts *o,
                                 const conch_process_handler *h,
                                 void *user_data, conch_process **out);

/** conch_stream() on the loop: output goes to on_chunk only (streamed = 1).
    Returns as conch_run_async(), or CONCH_ERR_CAPABILITY. */
CONCH_EXTERN int conch_stream_async(conch_sandbox *sb, const conch_proc_opts *o,
                                    const conch_process_handler *h,
                                    void *user_data, conch_process **out);

/** conch_pty_open() on the loop.  Returns as conch_stream_async(). */
CONCH_EXTERN int conch_pty_open_async(conch_sandbox *sb,
                                      const conch_proc_opts *o,
                                      const conch_process_handler *h,
                                      void *user_data, conch_process **out);

/** conch_connect() on the loop.  Returns as conch_stream_async(). */
CONCH_EXTERN int conch_connect_async(conch_sandbox *sb,
                                     const conch_selector *sel, unsigned flags,
                                     const conch_process_handler *h,
                                     void *user_data, conch_process **out);

/**
 * Back-pressure for an asynchronous handle whose reader queues output and
 * falls behind: the server is given no more flow-control credit for this
 * process's stream, so it stops sending once about one stream window
 * (4 MiB by default) is out, and the process blocks on its full pipe as it
 * would under a slow terminal.  Output already received still reaches
 * on_chunk (a window of wire bytes, which compressed may hold more).  The silence bound (keepalive) is not judged while paused and
 * counts again from conch_process_resume().  Idempotent.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL, or a handle of the blocking API,
 * whose conch_process_next() already reads only as fast as its caller).
 */
CONCH_EXTERN int conch_process_pause(conch_process *p);

/** Ends conch_process_pause().  Returns as conch_process_pause(). */
CONCH_EXTERN int conch_process_resume(conch_process *p);

/**
 * conch_process_close() on the loop: |done| (may be NULL) runs once |p| is
 * released, with 0 or CONCH_ERR_RPC as conch_process_close() returns.
 *
 * Returns 0: |done| then runs exactly once, from the loop, never inside
 * this call.  Otherwise |done| never runs: CONCH_ERR_INVALID (NULL |p|),
 * CONCH_ERR_STATE (|p| is already closing: its first close's |done|
 * stands) or CONCH_ERR_NOMEM (nothing was done; |p| stays open).
 */
CONCH_EXTERN int conch_process_close_async(
    conch_process *p, void (*done)(int rv, void *user_data), void *user_data);

/**
 * conch_kill() on the loop: |done| runs with the status.
 *
 * Returns 0 (|done| runs later, once); CONCH_ERR_INVALID (NULL |sb|, an empty
 * selector) or CONCH_ERR_NOMEM (|done| never runs).
 */
CONCH_EXTERN int
conch_kill_async(conch_sandbox *sb, const conch_selector *sel, int signal,
                 void (*done)(const conch_status *st, void *user_data),
                 void *user_data);

/** conch_list() on the loop: |done| runs once with the list (borrowed
    until it returns; NULL on error) and the status.
 *
 * Returns 0 (|done| runs later, once); CONCH_ERR_INVALID (NULL |sb| or
 * |done|) or CONCH_ERR_NOMEM (|done| never runs).
 */
CONCH_EXTERN int conch_list_async(conch_sandbox *sb,
                                  void (*done)(const conch_process_info *list,
                                               size_t n, const conch_status *st,
                                               void *user_data),
                                  void *user_data);

/** conch_send_stdin() (|pty| 0) or conch_pty_send() (|pty| 1) on the loop;
    |data| is copied.  |done| (may be NULL) runs with the status.
 *
 * Returns as conch_kill_async(); CONCH_ERR_INVALID also for NULL |data| with
 * |len| > 0.
 */
CONCH_EXTERN int
conch_send_stdin_async(conch_sandbox *sb, const conch_selector *sel,
                       const void *data, size_t len, int pty,
                       void (*done)(const conch_status *st, void *user_data),
                       void *user_data);

/**
 * conch_close_stdin() on the loop.
 *
 * Returns as conch_kill_async().
 */
CONCH_EXTERN int
conch_close_stdin_async(conch_sandbox *sb, const conch_selector *sel,
                        void (*done)(const conch_status *st, void *user_data),
                        void *user_data);

/**
 * conch_pty_resize() on the loop.
 *
 * Returns as conch_kill_async(); CONCH_ERR_INVALID also for 0 columns or
 * rows.
 */
CONCH_EXTERN int conch_pty_resize_async(
    conch_sandbox *sb, const conch_selector *sel, uint32_t cols, uint32_t rows,
    void (*done)(const conch_status *st, void *user_data), void *user_data);

/** conch_start() on the loop: |done| runs once, with the pid (0 on error)
    and the status; the process then runs on without a handle.
 *
 * Returns 0 (|done| runs later, once) or what conch_run_async() returns
 * (|done| never runs).
 */
CONCH_EXTERN int conch_start_async(conch_sandbox *sb, const conch_proc_opts *o,
                                   void (*done)(uint32_t pid,
                                                const conch_status *st,
                                                void *user_data),
                                   void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_PROCESS_H */
