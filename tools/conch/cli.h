/* The conch CLI: its options (one table, main.c, drives parsing, `--help`,
   and through tests/cli/test_docs.sh the man page and the completion) and
   its process commands (cli.c). */
#ifndef CONCH_CLI_H
#define CONCH_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <conch/conch.h>
#include <conch/process.h>

/* Exit codes of the CLI's own failures (README.md's "Exit codes").  run,
   attach and pty otherwise exit with the process's own status (0-255,
   128+N for signal N), which may be any of these too: --json-errors tells
   them apart. */
#define CLI_EXIT_USAGE 2 /* a bad option, operand or CONCH_* value */
#define CLI_EXIT_DEADLINE                                                      \
  124                       /* deadline_exceeded: the lifetime, as timeout(1) */
#define CLI_EXIT_OUTPUT 249 /* conch could not write to stdout or stderr */
#define CLI_EXIT_EXHAUSTED 250 /* resource_exhausted */
#define CLI_EXIT_DENIED 251    /* unauthenticated, permission_denied */
#define CLI_EXIT_NOT_FOUND 252 /* not_found */
#define CLI_EXIT_INVALID                                                       \
  253 /* invalid_argument, failed_precondition, out_of_range */
#define CLI_EXIT_RPC 254 /* any other RPC failure */
#define CLI_EXIT_UNAVAILABLE                                                   \
  255 /* unavailable: the server was not reached or kept (ssh's 255) */

/* Options that apply to every command (before or after its name), or the
   CONCH_* variables that stand in for them. */
typedef struct cli_globals {
  const char *url;    /* NULL: the local server, started when needed */
  const char *token;  /* X-Access-Token (a copy: argv's is blanked) */
  const char *user;   /* user to run as */
  long timeout_ms;    /* process lifetime; 0 = the default, -1 = none */
  const char *cacert; /* CA file for https */
  int http_version;   /* CONCH_HTTP_*; 0 = auto */
  int protocol;       /* CONCH_PROTOCOL_* */
  int codec;          /* CONCH_CODEC_* */
} cli_globals;

/* One option of a table ending with a NULL name. */
typedef struct cli_opt {
  const char *name; /* "--cwd" */
  const char *arg;  /* its value's name ("DIR"), or NULL for a flag */
  const char *env;  /* the CONCH_* variable that stands in for it, or NULL */
  const char *help;
} cli_opt;

#define CLI_END (-1)   /* argv[*i] is the first operand ("--" skipped) */
#define CLI_ERROR (-2) /* a message is on stderr */

/* The next option of |cmd| from argv[*i] on: its index in |opts| with its
   value in |*val| (NULL for a flag).  Global options met on the way are
   applied to |g|.  "--cwd" with no value, or an option that neither table
   knows, is an error that names it. */
int cli_next(const char *cmd, const cli_opt *opts, cli_globals *g, int argc,
             char **argv, int *i, const char **val);

/* Prints `conch CMD --help` to stderr with |why| first (a usage error).
   Returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *why);
/* A usage error "conch[ CMD]: <message>" (|cmd| may be NULL).  Returns
   CLI_EXIT_USAGE. */
int cli_usage_fail(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- Failures and output (cli_err.c) ---------------------------------- */

/* --json-errors / CONCH_JSON_ERRORS: every failure as one JSON object on
   a line of its own on stderr, instead of text. */
void cli_set_json_errors(int on);
int cli_json_errors(void);
/* The CLI_EXIT_* of an RPC failure with |code|. */
int cli_exit_code(conch_code code);
/* Whether a retry of the same command may succeed (gRPC's guidance). */
int cli_retryable(const conch_status *st);
/* Reports an RPC failure, with a |hint| line (or NULL) and the process's
   |pid| when one was started (0: none).  Returns its CLI_EXIT_*. */
int cli_fail_status(const conch_status *st, const char *hint, uint32_t pid);
/* Reports a failure of conch itself: "|prefix|: <message>" (NULL prefix:
   "conch"), given the Connect |code| that names its kind in JSON, with
   |hint| (or NULL) on a line after it.  Returns |exit_code|. */
int cli_fail_local(int exit_code, conch_code code, const char *prefix,
                   const char *hint, uint32_t pid, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* A failed write of output to |stream| ("stdout", "stderr") with errno
   |err| (0 or -1: unknown); |what| says what follows from it (or NULL).
   Returns CLI_EXIT_OUTPUT. */
int cli_fail_output(const char *stream, int err, uint32_t pid,
                    const char *what);
/* A note on a line of its own on stderr ("conch: ..."), as text in
   either mode: not a failure. */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The remote process's stderr passed through: where conch's own line
   must start. */
void cli_stderr_passed(const uint8_t *p, size_t n);
/* |s| as a JSON string; |strict|: bytes that are not UTF-8 become
   U+FFFD (else they pass through as they came). */
void cli_json_string(FILE *f, const char *s, int strict);
/* Flushes and closes stdout, checks stderr: a write that failed ends with
   a message and CLI_EXIT_OUTPUT when |rc| is 0.  Returns the exit code. */
int cli_finish_output(int rc);

/* Each takes the arguments from its own name on and returns the exit
   status. */
int conch_cli_run(cli_globals *g, int argc, char **argv);
int conch_cli_start(cli_globals *g, int argc, char **argv);
int conch_cli_ps(cli_globals *g, int argc, char **argv);
int conch_cli_kill(cli_globals *g, int argc, char **argv);
int conch_cli_attach(cli_globals *g, int argc, char **argv);
int conch_cli_pty(cli_globals *g, int argc, char **argv);
/* The file commands (cli_files.c). */
int conch_cli_ls(cli_globals *g, int argc, char **argv);
int conch_cli_stat(cli_globals *g, int argc, char **argv);
int conch_cli_mkdir(cli_globals *g, int argc, char **argv);
int conch_cli_mv(cli_globals *g, int argc, char **argv);
int conch_cli_rm(cli_globals *g, int argc, char **argv);
int conch_cli_watch(cli_globals *g, int argc, char **argv);
/* cp (cli_cp.c). */
int conch_cli_cp(cli_globals *g, int argc, char **argv);
/* call (cli_call.c): any RPC of any server, in JSON. */
int conch_cli_call(cli_globals *g, int argc, char **argv);
/* The sandbox of |g| (cli.c): 0 with |*sb| set, or the exit code after a
   message. */
int cli_open_sandbox(cli_globals *g, conch_sandbox **sb);
/* Reports a failed call of |what|: its status when |rv| is CONCH_ERR_RPC
   (the exit code of its Connect code), else the library's error.  Returns
   the exit code. */
int cli_rpc_fail(const char *what, int rv, const conch_status *st);
/* `conch serve --stop`: ends the background server the CLI started. */
int conch_cli_serve_stop(void);

/* The option tables of the commands (main.c). */
extern const cli_opt cli_run_opts[];
extern const cli_opt cli_start_opts[];
extern const cli_opt cli_ps_opts[];
extern const cli_opt cli_kill_opts[];
extern const cli_opt cli_none_opts[];
extern const cli_opt cli_ls_opts[];
extern const cli_opt cli_mkdir_opts[];
extern const cli_opt cli_watch_opts[];
extern const cli_opt cli_cp_opts[];
extern const cli_opt cli_call_opts[];

#endif
