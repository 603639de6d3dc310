/* The conch CLI: its options (one table, main.c, drives parsing, `--help`,
   and through tests/cli/test_docs.sh the man page and the completion) and
   its process commands (cli.c). */
#ifndef CONCH_CLI_H
#define CONCH_CLI_H

/* Options that apply to every command (before or after its name), or the
   CONCH_* variables that stand in for them. */
typedef struct cli_globals {
  const char *url;    /* NULL: the local server, started when needed */
  const char *token;  /* X-Access-Token */
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

/* Prints `conch CMD --help` to stderr with |why| first (a usage error). */
void cli_usage_error(const char *cmd, const char *why);

/* Each takes the arguments from its own name on and returns the exit
   status. */
int conch_cli_run(cli_globals *g, int argc, char **argv);
int conch_cli_start(cli_globals *g, int argc, char **argv);
int conch_cli_ps(cli_globals *g, int argc, char **argv);
int conch_cli_kill(cli_globals *g, int argc, char **argv);
int conch_cli_attach(cli_globals *g, int argc, char **argv);
int conch_cli_pty(cli_globals *g, int argc, char **argv);
/* `conch serve --stop`: ends the background server the CLI started. */
int conch_cli_serve_stop(void);

/* The option tables of the commands (main.c). */
extern const cli_opt cli_run_opts[];
extern const cli_opt cli_start_opts[];
extern const cli_opt cli_ps_opts[];
extern const cli_opt cli_kill_opts[];
extern const cli_opt cli_none_opts[];

#endif
