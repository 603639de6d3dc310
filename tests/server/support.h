/* Helpers for the conch serve tests: spawning the server, a raw HTTP/2
   client for requests our client would never send, process.Process calls
   through our client, and looks at the OS process table. */
#ifndef CONCH_SERVE_TEST_SUPPORT_H
#define CONCH_SERVE_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <conch/conch.h>

#include "process/process.pb-c.h"
#include "wait.h" /* conch_now_ms, conch_wait_until, conch_proc_alive */

/* ---- The server -----------------------------------------------------------
 */

typedef struct serve_peer {
  pid_t pid;
  int port;
  int stdin_fd; /* write end of its stdin; closing it stops the server */
  char url[64]; /* http://127.0.0.1:<port> (https:// with TLS) */
} serve_peer;

/* Runs `conch serve --listen 127.0.0.1:0 extra...` (CONCH_SERVE_BIN; with
   --no-token unless |extra| gives a token) through conch_peer_start_argv
   (tests/support/peer.h: the 120 s start-up allowance) and waits for its
   LISTENING line.  Returns 0 or -1 (printed why). */
int serve_start(serve_peer *p, const char *const *extra);
/* SIGTERM, then waits up to |wait_ms|.  Returns the exit status (0..255),
   128+signal, or -1 if it had to be SIGKILLed. */
int serve_stop(serve_peer *p, int wait_ms);

/* ---- Process table ---------------------------------------------------------
 */

/* Processes (not zombies) whose parent is |ppid| or whose process group is
   one of |pgids|.  Returns the count; the first of them in |first|. */
int proc_leftovers(pid_t ppid, const pid_t *pgids, size_t n, pid_t *first);
/* Live processes whose command line (args joined by spaces) is |cmdline|. */
int proc_count_cmdline(const char *cmdline);
/* Polls until exactly |want| processes run |cmdline|.  Returns the ms it
   took, or -1 after |limit_ms| (with the count left in |*left|, which may
   be NULL). */
long proc_wait_count(const char *cmdline, int want, long limit_ms, int *left);
/* The descriptors of |pid| whose /proc link target holds |kind| ("pidfd",
   "inotify"), or -1 when its fd folder cannot be read. */
int proc_fds_of(pid_t pid, const char *kind);
/* VmRSS of |pid| in KiB, or -1. */
long proc_rss_kb(pid_t pid);
/* wchar of /proc/pid/io, or -1. */
long long proc_wchar(pid_t pid);
/* syscr of /proc/pid/io (read(2) calls made), or -1. */
long long proc_syscr(pid_t pid);
/* Waits up to |limit_ms| for |pid| to have written more than |above| bytes
   (wchar).  Returns 1 when it has, 0 when not. */
int wait_wchar_above(pid_t pid, long long above, long limit_ms);
/* Records a pid started through the server (for the leftovers check). */
void note_pid(pid_t pid);
const pid_t *noted_pids(size_t *n);

/* ---- Raw HTTP/2
 * --------------------------------------------------------------- */

typedef struct h2_resp {
  int status; /* 0 if none */
  char ctype[128];
  char extra[256]; /* "name: value\n" of a few headers we check */
  uint8_t *body;
  size_t len;
  uint32_t rst; /* RST_STREAM code + 1, 0 if none */
  int done;
} h2_resp;

typedef struct h2_conn h2_conn;

int h2_open(h2_conn **out, int port);
/* h2_open, advertising SETTINGS_MAX_FRAME_SIZE |max_frame| and 1 MiB
   windows (stream and connection): the server may then send large DATA
   frames. */
int h2_open_big(h2_conn **out, int port, uint32_t max_frame);
/* The DATA frames received so far: how many had a payload, the largest. */
void h2_data_frames(const h2_conn *c, int *n, size_t *largest);
/* Submits a request; |hdrs| is NULL or name, value, ..., NULL. */
int h2_submit(h2_conn *c, const char *method, const char *path,
              const char *const *hdrs, const uint8_t *body, size_t len,
              h2_resp *resp);
/* Drives the connection until every submitted request is done, the
   connection ends, or |ms| passes.  Returns 0 when all are done. */
int h2_run(h2_conn *c, int ms);
int h2_rst(h2_conn *c, int32_t id);
int h2_last_id(h2_conn *c);
void h2_close(h2_conn *c);
int h2_fd(h2_conn *c);
/* Sends what the session has queued, then shutdown(SHUT_WR); later frames
   (a SETTINGS ack, window updates) are dropped.  Returns 0 or -1. */
int h2_shutdown_write(h2_conn *c);
/* A blocking TCP connection to 127.0.0.1:|port|, or -1. */
int tcp_open(int port);
/* Reads and drops what |fd| receives until the peer closes it (1) or |ms|
   passes (0). */
int wait_closed(int fd, int ms);
void h2_resp_free(h2_resp *r);
/* One request on its own connection.  Returns 0 when it completed. */
int h2_request(int port, const char *method, const char *path,
               const char *const *hdrs, const uint8_t *body, size_t len,
               h2_resp *resp);
/* A Connect envelope around |msg|: malloc'd, length in |len|. */
uint8_t *envelope(uint8_t flags, const ProtobufCMessage *msg, size_t *len);
/* The "code" / "message" of a Connect error JSON (unary body, or the
   end-stream envelope at the end of a stream body); "" if absent. */
void connect_error(const h2_resp *r, int stream, char *code, size_t codelen,
                   char *msg, size_t msglen);
/* Fails the test unless |r| carries the Connect error |code| ("": none)
   and, when |msg| is not NULL, exactly the message |msg|. */
void assert_connect_error(const h2_resp *r, int stream, const char *code,
                          const char *msg);

/* ---- process.Process through our client
 * --------------------------------------- */

extern const conch_method m_list, m_start, m_connect, m_update, m_stream_input,
    m_send_input, m_send_signal, m_close_stdin;

conch_client *client_new(const char *url);

/* What a Start or Connect stream delivered. */
typedef struct run_result {
  pid_t pid;
  int nstart;
  int nkeepalive;
  int ndata;
  char out[65536]; /* stdout or pty, NUL-terminated, truncated */
  size_t outlen;
  char err[16384];
  size_t errlen;
  size_t total; /* all output bytes */
  int has_end;
  int exit_code;
  int exited;
  char status[128];
  int has_error;
  char error[128];
  conch_code code; /* the RPC's status */
  char message[512];
} run_result;

/* Options of a Start. */
typedef struct start_opts {
  const char *user; /* Authorization: Basic */
  const char *cwd;
  const char *const *envs; /* k, v, ..., NULL */
  const char *tag;
  int stdin_mode;         /* 0 unset, 1 true, 2 false */
  int pty_cols, pty_rows; /* pty when cols > 0 */
  long timeout_ms;
  const char *keepalive; /* Keepalive-Ping-Interval */
} start_opts;

/* Starts cmd args... (NULL-terminated) and returns the call once the
   first event (StartEvent) arrived, with the pid in |*pid|; NULL and the
   status in |res| if the call failed first. */
conch_call *start_call(conch_client *c, const start_opts *o, run_result *res,
                       pid_t *pid, const char *cmd, ...);
/* Connect by pid (tag NULL) or tag. */
conch_call *connect_call(conch_client *c, pid_t pid, const char *tag,
                         long timeout_ms, const char *keepalive);
/* Reads the stream to its end into |res| (accumulating). */
void drain_call(conch_client *c, conch_call *call, run_result *res);
/* Start + drain. */
void run_cmd(conch_client *c, const start_opts *o, run_result *res,
             const char *cmd, ...);

/* Unary calls; return the code, message copied into |msg|. */
conch_code send_signal(conch_client *c, pid_t pid, const char *tag, int sig,
                       char *msg, size_t msglen);
conch_code send_input(conch_client *c, pid_t pid, const char *tag, int pty,
                      const void *data, size_t len, int no_input, char *msg,
                      size_t msglen);
conch_code close_stdin(conch_client *c, pid_t pid, char *msg, size_t msglen);
conch_code update_pty(conch_client *c, pid_t pid, int cols, int rows, char *msg,
                      size_t msglen);
/* List; |resp| to be freed with conch_message_free. */
conch_code list_procs(conch_client *c, Process__ListResponse **resp);

#endif
