/* conch serve: the interfaces between the serve_*.c modules.

   serve_loop.c     epoll, timers
   serve_main.c     options, listening socket, signals, lifetime, shutdown
   serve_call.c     the server core (conch/server.h) configured and driven
                    from our loop; who gets in (token, Host, /health, Unix
                    peers); its calls as srv_stream for the service
   serve_service.c  the process.Process RPCs
   serve_fs.c       the filesystem.Filesystem RPCs (serve_fs.h)
   serve_fs_watch.c its watchers: WatchDir and the polling ones
   serve_proc.c     running processes: output, stdin, reaping, retention
   serve_spawn.c    users, environment rules, fork/exec
   serve_config.c   the options' defaults, envd's cwd rules (fuzz_serve
                    runs on these too)
   serve_util.c     our list, byte queue, timer heap and int-keyed table
                    (serve_util.h)
   serve_keeper.c   the process that kills our groups if we are killed

   Everything runs on one thread.  Objects that a callback may end (a
   connection, a process) are not freed at once: they are marked dead and
   freed between two loop turns, so that no event of the current turn can
   reach freed memory. */
#ifndef CONCH_SERVE_H
#define CONCH_SERVE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/server.h>
#include <conch/status.h>

#include "process/process.pb-c.h"
#include "serve_util.h"

/* ---- The loop (serve_loop.c) -------------------------------------------- */

typedef struct srv_watch srv_watch;
typedef void (*srv_watch_cb)(srv_watch *w, uint32_t events);

/* One fd in the epoll set.  Level-triggered. */
struct srv_watch {
  int fd;
  uint32_t events; /* EPOLLIN/EPOLLOUT wanted; 0 = not in the set */
  srv_watch_cb cb;
};

/* Timers: srv_timer and its heap are serve_util.h's. */
typedef struct srv_loop {
  int epfd;
  srv_heap heap;
} srv_loop;

/* The loop's clock, ms: CLOCK_MONOTONIC, or the one srv_clock_set() gave. */
int64_t srv_now_ms(void);
/* For tests (fuzz_serve): srv_now_ms() reads |now| (with |ud|) from here
   on, and srv_core_start() gives the core the same clock, so that every
   timer runs on it; NULL goes back to CLOCK_MONOTONIC. */
void srv_clock_set(int64_t (*now)(void *ud), void *ud);
/* Whether srv_clock_set() gave a clock. */
int srv_clock_injected(void);
int srv_loop_init(srv_loop *l);
void srv_loop_clear(srv_loop *l);
void srv_watch_init(srv_watch *w, int fd, srv_watch_cb cb);
/* Sets the events wanted on |w|: 0 takes the fd out of the set (also so
   that EPOLLHUP on an fd we do not want to read stops waking us). */
int srv_watch_set(srv_loop *l, srv_watch *w, uint32_t events);
void srv_timer_init(srv_timer *t, srv_timer_cb cb);
int srv_timer_armed(const srv_timer *t);
int srv_timer_arm(srv_loop *l, srv_timer *t, int64_t when);
void srv_timer_cancel(srv_loop *l, srv_timer *t);
/* Ms until the next timer (capped at |max_ms|), 0 when one is due. */
int srv_loop_timeout(const srv_loop *l, int max_ms);
/* Waits up to |max_ms|, runs the ready watchers, then the due timers.
   Returns 0 or -1 (epoll failed). */
int srv_loop_poll(srv_loop *l, int max_ms);

/* ---- Configuration and the server (serve_main.c) ------------------------- */

enum { SRV_MAX_ALLOW = 16 };

typedef struct srv_config {
  const char *listen; /* HOST:PORT or unix:PATH */
  const char *tls_cert;
  const char *tls_key;
  const char *access_token; /* NULL: none required */
  /* A TCP listener without a token: only requests whose Host/:authority is
     a loopback name (DNS rebinding). */
  int host_check;
  /* Unix socket peers (SO_PEERCRED) accepted besides our euid and root. */
  uid_t allow_uids[SRV_MAX_ALLOW];
  size_t nallow_uids;
  /* Users processes may run as besides the server's own; "*" any. */
  const char *allow_users[SRV_MAX_ALLOW];
  size_t nallow_users;
  int64_t retention_ms;  /* how long an ended process can be re-attached */
  size_t max_message;    /* largest request message, after inflation */
  size_t conn_buffered;  /* request bytes one connection may hold */
  uint32_t max_streams;  /* SETTINGS_MAX_CONCURRENT_STREAMS */
  size_t out_high;       /* a subscriber over this pauses its process */
  size_t out_low;        /* ... until it is back under this */
  size_t stdin_high;     /* queued stdin that pauses StreamInput */
  size_t compress_min;   /* smallest response message gzipped */
  int64_t kill_grace_ms; /* SIGTERM to SIGKILL at shutdown */
  size_t max_conns;
  int signal_pid_only;    /* envd's way: signals and deadlines to the pid,
                             piped children in our process group */
  int64_t idle_ms;        /* a connection with no request in progress */
  int64_t header_ms;      /* handshake, preface and request headers; also the
                             idle limit before a first authenticated request */
  int64_t body_ms;        /* one request message, from its first byte */
  size_t max_procs;       /* processes held: running, and ended ones retained */
  size_t max_buffered;    /* request bytes all connections may hold */
  size_t stdin_total;     /* stdin queued for all processes */
  int64_t spawn_delay_ms; /* hidden, for tests: children wait before exec */
  const char *workdir;    /* --workdir: the cwd of a request that names none */
  const char *default_user; /* --user: the user of a request that names
                               none (NULL: the server's own) */
  size_t fs_max_watchers;  /* WatchDir streams and polling watchers */
  size_t fs_max_events;    /* events a polling watcher holds untaken */
  int64_t fs_idle_ms;      /* a polling watcher not asked this long goes */
} srv_config;

typedef struct srv_server srv_server;
typedef struct srv_stream srv_stream;
typedef struct srv_proc srv_proc;

struct srv_server {
  srv_config cfg;
  srv_loop loop;
  const conch_mem *mem;
  conch_server *core; /* serves the connections (serve_call.c) */
  srv_timer core_t;   /* its timer */
  struct core_watch *core_watches; /* its fds */
  struct core_watch *dead_watches; /* ... no longer watched, to free */
  srv_stream *dead_streams;        /* calls over, to free after the turn */
  srv_watch sig_w;
  srv_watch stdin_w;
  srv_link procs;  /* running and retained, newest last */
  srv_link dead_procs;
  uint64_t next_serial;
  uid_t euid;
  int stopping;    /* 1 once shutdown began */
  int hard_killed; /* SIGKILL went out */
  srv_timer stop_t;
  int keeper_on;      /* a keeper runs (serve_keeper.c) */
  int keeper_fd;      /* ... and this is its pipe */
  struct srv_reaper *reaper; /* the groups and their ends (serve_reap.c) */
  /* Starts waiting for their fork, a few per loop turn (serve_service.c;
     set up on first use). */
  srv_link spawn_q;
  srv_timer spawn_t;
  size_t nqueued;
  size_t queued_bytes; /* their StartRequests, packed */
  struct srv_fs *fs;   /* the filesystem service (serve_fs.c) */
};

/* conch serve's exit statuses (tools/conch/README.md, conch.1 and
   `conch serve --help` list them).  Every refusal says why on stderr. */
enum srv_exit {
  SRV_EXIT_OK = 0,     /* stopped: a signal, stdin's end (--stop), --help */
  SRV_EXIT_FAILED = 1, /* the system: out of descriptors, memory or
                          processes (epoll, signalfd, the keeper), stdout
                          closed or the LISTENING line not written, or the
                          loop failing while serving */
  SRV_EXIT_USAGE = 2,  /* the command line or a file it names: an unknown
                          option, a bad value, options that exclude each
                          other, a --listen that is neither HOST:PORT nor
                          unix:PATH, --workdir, --user, --allow-user, the
                          access token or its file, the TLS files */
  SRV_EXIT_UNSAFE = 3, /* TCP without a token: not loopback, or no
                          --no-token */
  SRV_EXIT_LISTEN = 4, /* could not listen: the address is in use, not
                          this machine's or does not resolve, permission,
                          the socket's directory missing, a non-socket at
                          the path, the runtime directory not private */
  SRV_EXIT_TAKEN = 5   /* another conch serve serves that Unix socket (the
                          loser of two CLIs' auto-start) */
};

/* Fills |cfg| with conch serve's defaults (serve_config.c), the listener
   NULL: the private Unix socket. */
void srv_config_defaults(srv_config *cfg);
/* Begins the shutdown (signal, stdin closed). */
void srv_server_stop(srv_server *srv);
/* Whether processes may run as |name| (uid |uid|): the server's own user,
   or one the operator allowed (--allow-user). */
int srv_user_allowed(const srv_server *srv, const char *name, uid_t uid);
/* Whether |authority| (Host or :authority, NULL when absent) passes the
   host check of cfg.host_check. */
int srv_authority_ok(const srv_server *srv, const char *authority);

/* ---- The keeper (serve_keeper.c) ----------------------------------------- */

/* Starts the process that kills our process groups if we are killed.
   Returns 0 or -1 (none then). */
int srv_keeper_start(srv_server *srv);

/* ---- Process groups (serve_reap.c) -------------------------------------- */

/* Follows child |pid| (forked, not reaped): its exit goes to
   srv_proc_reaped(); once its group is empty, srv_proc_group_gone().
   With |own| (it leads a session of its own) its zombie is kept until no
   process of that session is left, so that its id stays ours.  The
   keeper hears of the group.  Returns 0, or an errno when it is not
   followed (ENOMEM; EMFILE/ENFILE; ENOSYS: no pidfd_open, Linux < 5.3). */
int srv_reap_track(srv_server *srv, pid_t pid, int own);
/* SIGCHLD: children ended; looked at once the loop turn's events ran. */
void srv_reap_children(srv_server *srv);
/* Takes in now what srv_reap_children() would look at later (before a
   signal to a group whose leader ended: is anything left of it). */
void srv_reap_sync(srv_server *srv);
/* Shutdown: signals the groups whose leader ended and that are not
   empty. */
void srv_reap_signal_all(srv_server *srv, int sig);
/* The final reap took |pid| (waitpid(-1)). */
void srv_reap_forget(srv_server *srv, pid_t pid);
/* Frees it all (the keeper is told nothing). */
void srv_reap_free(srv_server *srv);

/* ---- Calls (serve_call.c) -------------------------------------------------- */

enum srv_shape { SRV_UNARY = 0, SRV_SERVER_STREAM = 1, SRV_CLIENT_STREAM = 2 };
/* The protocol of a request, from its content type. */
enum srv_proto { SRV_CONNECT = 0, SRV_GRPC = 1, SRV_GRPC_WEB = 2 };

typedef struct srv_method {
  const char *path;
  int shape;
  const ProtobufCMessageDescriptor *input;
  /* The response message (what srv_rpc_send_packed() is handed). */
  const ProtobufCMessageDescriptor *output;
  /* Unary and server streams: the request.  Client streams: each request
     message.  |msg| is owned by the stream until the call returns. */
  void (*on_message)(srv_stream *st, ProtobufCMessage *msg);
  /* Client streams: the client half-closed. */
  void (*on_end)(srv_stream *st);
} srv_method;

/* The user a request runs as (Authorization: Basic, else the server's). */
typedef struct srv_user {
  uid_t uid;
  gid_t gid;
  char *name;
  char *home;
  gid_t *groups;
  int ngroups;
} srv_user;

enum { SRV_HDR_MAX = 64 * 1024 };
/* The StartRequests of all processes held (running and retained) are
   what List sends back: they may total this much, so that a List stays
   under 4 MiB, the receive limit of gRPC and conch clients by default. */
enum { SRV_CONFIG_BUDGET = 3 * 1024 * 1024 };

struct srv_stream {
  conch_rpc *rpc; /* NULL once the call is over */
  srv_server *srv;
  const srv_method *m;
  int json;         /* the JSON codec (else proto) */
  int finished;     /* over for the service; freed after the loop turn */
  srv_stream *dead_next;
  int64_t timeout_ms; /* Connect-Timeout-Ms or grpc-timeout, 0: none */
  int64_t keepalive_ms;
  srv_timer keepalive_t;
  srv_user user;
  /* Service state. */
  srv_proc *proc;     /* subscribed to, or waiting on its stdin */
  srv_link sub_link;  /* proc->subs */
  int over;           /* counted in proc->nover */
  srv_link wait_link; /* proc->waiters (SendInput, StreamInput end) */
  uint64_t wait_until;
  srv_link in_link;      /* proc->in_paused */
  uint64_t input_serial; /* StreamInput: the selected process, 0 = none */
  srv_proc *starting;    /* Start: its process, until the exec report */
  srv_link spawn_link;   /* srv->spawn_q: waiting for its fork */
  Process__StartRequest *spawn_req; /* ... with its request (a copy) */
  char *spawn_cwd;                  /* ... and resolved cwd */
};

/* Puts the core's part of |srv| (no core, no watches, its timer unarmed)
   in the state srv_core_free() takes: before anything that can fail. */
void srv_core_init(srv_server *srv);
/* Makes the core, registers the service's methods, listens on
   |listen_fd| (taken; -1: none, connections are adopted) and hooks the
   core into the loop.  Returns 0, or the exit status that fits the
   failure (SRV_EXIT_USAGE for the TLS files, else SRV_EXIT_FAILED),
   said on stderr. */
int srv_core_start(srv_server *srv, int listen_fd);
/* The user of a request: Authorization: Basic (as Go's BasicAuth reads
   it), else --user, else the server's own.  Returns 0, or a code with a
   message in |err|. */
conch_code srv_request_user(srv_server *srv, const conch_metadata *md,
                            srv_user *u, char *err, size_t errlen);
/* Keepalive-Ping-Interval |v| (NULL: absent) in |*ms|, which keeps its
   value when |v| is absent or not a number (as envd); zero or negative is
   refused (envd crashes): returns -1 with a message in |err|, else 0. */
int srv_parse_keepalive(const char *v, int64_t *ms, char *err, size_t errlen);
/* Frees the calls and watches let go of in the last loop turn. */
void srv_core_collect(srv_server *srv);
/* Frees the core (its calls end first). */
void srv_core_free(srv_server *srv);
void srv_stream_free(srv_stream *st);

/* For the service.  Queues one response message (streams) or the response
   (unary).  Returns 0 or -1 (out of memory; the stream is reset). */
int srv_rpc_send(srv_stream *st, const ProtobufCMessage *msg);
/* Queues an already serialized response message (stream shapes only). */
int srv_rpc_send_packed(srv_stream *st, const uint8_t *p, size_t len);
/* Ends the call: |code| 0 ends a stream well (a unary call must have sent
   its response); otherwise the error, with a printf-style message. */
void srv_rpc_finish(srv_stream *st, conch_code code, const char *fmt, ...)
    CONCH_PRINTF(3, 4);
void srv_rpc_vfinish(srv_stream *st, conch_code code, const char *fmt,
                     va_list ap);
/* Pause or resume reading the request (flow control). */
void srv_rpc_pause_input(srv_stream *st, int paused);
srv_server *srv_rpc_server(const srv_stream *st);
/* Bytes queued for the client and not yet taken by nghttp2. */
size_t srv_rpc_queued(const srv_stream *st);

/* ---- /files (serve_files.c) ------------------------------------------------ */

/* Registers envd's /files (GET download, POST upload) on srv->core.
   Returns what conch_server_add_http() returns. */
int srv_files_register(srv_server *srv);

/* ---- The service (serve_service.c) --------------------------------------- */

const srv_method *srv_service_route(const char *path);
/* The |i|th method of the service, NULL past the last. */
const srv_method *srv_service_method(size_t i);
/* The stream is going away: drop what the service holds for it. */
void srv_service_stream_gone(srv_stream *st);
/* The keepalive interval passed without data. */
void srv_service_keepalive(srv_stream *st);

/* ---- The filesystem service (serve_fs.c) ----------------------------------- */

/* Registers filesystem.Filesystem on srv->core (its typed stubs).
   Returns 0 or a CONCH_ERR_*. */
int srv_fs_start(srv_server *srv);
/* Ends every watcher (the calls are gone). */
void srv_fs_free(srv_server *srv);
/* Go's filepath.Clean, in place (no "//", ".", or ".."). */
void srv_path_clean(char *path);
/* |a| "/" |b|, cleaned (malloc'd), or NULL. */
char *srv_path_join(const char *a, const char *b);

/* ---- Processes (serve_proc.c) -------------------------------------------- */

struct srv_proc {
  srv_link link; /* srv->procs or srv->dead_procs */
  srv_server *srv;
  uint64_t serial;
  pid_t pid;
  Process__StartRequest *req; /* as the client sent it */
  const char *tag;            /* inside |req|, or NULL */
  int pty;
  srv_watch out_w; /* stdout pipe, or the PTY master */
  srv_watch err_w; /* stderr pipe */
  srv_watch in_w;  /* stdin pipe (not used for a PTY) */
  long out_left;   /* after the reap: bytes still to read, -1 = to EOF */
  long err_left;
  int in_open;  /* input accepted: stdin pipe open, or a PTY */
  int in_close; /* CloseStdin: close once the queue is written */
  srv_buf in_q;
  uint64_t in_queued;  /* bytes ever queued */
  uint64_t in_written; /* bytes ever written */
  srv_link subs;
  size_t nover;
  int paused;
  srv_link waiters;
  srv_link in_paused;
  int reaped;     /* the leader exited (its zombie may be kept) */
  int group_held; /* its group id is still ours: leader or members left */
  int group_killed; /* SIGKILL went to the whole group: all of it is dying */
  int wstatus;
  int ended;
  uint8_t *end_msg; /* the packed StartResponse holding the EndEvent */
  size_t end_len;
  srv_timer deadline_t; /* SIGKILL to its group; may outlive the leader */
  srv_timer settle_t;   /* PTY: output still in the kernel at the reap */
  srv_timer retain_t;
  int dead;
  /* Forked, exec not yet reported: invisible to the RPCs (as in envd,
     whose process exists for them once cmd.Start() returned), its output
     left in the pipes, counted against the process cap. */
  int starting;
  srv_watch rep_w;     /* the exec report pipe, while starting */
  srv_stream *starter; /* the Start stream, NULL once it went away */
  char *start_cwd;     /* for the text of a failed start */
};

typedef struct srv_spawned {
  pid_t pid;
  int out_fd;    /* stdout, or the PTY master */
  int err_fd;    /* -1 for a PTY */
  int in_fd;     /* -1 when stdin is off, or for a PTY */
  int report_fd; /* the exec report (non-blocking): EOF at exec, or errno */
} srv_spawned;

/* Takes ownership of |req|, |cwd| and the fds.  The process starts in
   the starting state: once its exec report says exec happened, |starter|
   (if still there) gets srv_service_started(); if exec failed it gets
   srv_service_start_failed() and the process is forgotten.  Returns 0,
   or an errno when it cannot be followed (|req|, |cwd| and the fds are
   then still the caller's). */
int srv_proc_add(srv_server *srv, Process__StartRequest *req, char *cwd,
                 const srv_spawned *sp, srv_stream *starter, srv_proc **out);
srv_proc *srv_proc_find(srv_server *srv, const Process__ProcessSelector *sel);
srv_proc *srv_proc_by_serial(srv_server *srv, uint64_t serial);
void srv_proc_subscribe(srv_proc *p, srv_stream *st);
void srv_proc_unsubscribe(srv_stream *st);
/* A subscriber's queue fell under the low-water mark. */
void srv_proc_sub_drained(srv_stream *st);
/* Queues input; the caller checked the kind.  Returns 0, or -1 when the
   queue is full. */
int srv_proc_write_input(srv_proc *p, const uint8_t *data, size_t len);
/* Makes |st| wait until the input queued so far is written; its
   on_written then runs (now, if nothing is pending). */
void srv_proc_wait_input(srv_proc *p, srv_stream *st);
void srv_proc_unwait(srv_stream *st);
void srv_proc_close_input(srv_proc *p);
/* The deadline of the process's group; after the leader's end it still
   reaches what is left of the group (none with cfg.signal_pid_only). */
void srv_proc_set_deadline(srv_proc *p, int64_t timeout_ms);
/* Signals what |p| started: its process group (and, for a PTY, the job
   groups of its session: one look at /proc); only the pid with
   cfg.signal_pid_only.  After the leader's exit, what is left of its
   group (its id is ours while anything is: serve_reap.c).  Returns 1 when
   signalled, 0 when nothing is left, or -1 with errno. */
int srv_proc_kill(srv_proc *p, int sig);
/* The leader |pid| exited with |wstatus|. */
void srv_proc_reaped(srv_server *srv, pid_t pid, int wstatus);
/* Nothing is left of the group of |pid|, and its id is not ours any more
   (after srv_proc_reaped()). */
void srv_proc_group_gone(srv_server *srv, pid_t pid);
void srv_proc_free(srv_proc *p);
/* Forgets the oldest ended process.  Returns 0, or -1 if none is held. */
int srv_proc_drop_ended(srv_server *srv);
/* Shutdown: signal every process group (also with cfg.signal_pid_only);
   |sig| SIGTERM or SIGKILL. */
void srv_proc_signal_all(srv_server *srv, int sig);
/* Go's name of signal |sig| ("killed", "segmentation fault", ...), as
   EndEvent.status says it, or NULL past the last one. */
const char *srv_signal_name(int sig);
int srv_proc_running(const srv_server *srv);

/* Service hooks the process code calls. */
void srv_service_input_done(srv_stream *st, int err, const char *what);
/* The Start of |p| on |st|: exec happened (StartEvent, subscribe), or it
   failed with |code| and |msg|. */
void srv_service_started(srv_stream *st, srv_proc *p);
void srv_service_start_failed(srv_stream *st, conch_code code, const char *msg);

/* ---- Spawning (serve_spawn.c) -------------------------------------------- */

/* 0; -1 unknown user; -2 out of memory. */
int srv_user_lookup(const char *name, srv_user *u);
int srv_user_by_uid(uid_t uid, srv_user *u);
void srv_user_clear(srv_user *u);
/* envd's cwd rules (serve_config.c): the path a request's |cwd| names for
   |u| (its home when empty, "~" and relative paths under it; "~user" is
   refused), not looked at.  Returns 0 with |*out| (malloc'd), or a code
   with a message in |err|. */
conch_code srv_cwd_path(const char *cwd, const srv_user *u, char **out,
                        char *err, size_t errlen);
/* srv_cwd_path(), then a path that does not exist is refused.  Returns 0
   with |*out| (malloc'd), or a code with a message in |err|. */
conch_code srv_resolve_cwd(const char *cwd, const srv_user *u, char **out,
                           char *err, size_t errlen);
/* Forks the request as |u|, to exec in a session of its own (with
   |envd_groups|, only a PTY child, as envd does); the child first waits
   |delay_ms| (tests).  Does not wait for the exec: |out->report_fd| tells
   (srv_spawn_report()).  Returns 0, or a code with a message in |err|
   (a failure before the fork). */
conch_code srv_spawn(const Process__StartRequest *req, const srv_user *u,
                     int switch_user, int envd_groups, const char *cwd,
                     int64_t delay_ms, srv_spawned *out, char *err,
                     size_t errlen);
/* Reads an exec report: -1 not yet (EAGAIN), 0 exec happened (EOF), or
   the errno with which the child failed before it. */
int srv_spawn_report(int fd);
/* The code and envd's text of a start that failed with |err|. */
conch_code srv_spawn_error(const Process__StartRequest *req, const char *cwd,
                           int err, char *buf, size_t len);

#endif
