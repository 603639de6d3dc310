/* The conch CLI's process commands (cli.c). */
#ifndef CONCH_CLI_H
#define CONCH_CLI_H

/* Options that come before the command. */
typedef struct cli_globals {
  const char *url;    /* NULL: the local server, started when needed */
  const char *token;  /* X-Access-Token */
  const char *user;   /* user to run as */
  long timeout_ms;    /* process lifetime; 0 = the default */
  const char *cacert; /* CA file for https */
} cli_globals;

/* Each takes the arguments from its own name on and returns the exit
   status. */
int conch_cli_run(const cli_globals *g, int argc, char **argv);
int conch_cli_start(const cli_globals *g, int argc, char **argv);
int conch_cli_ps(const cli_globals *g, int argc, char **argv);
int conch_cli_kill(const cli_globals *g, int argc, char **argv);
int conch_cli_attach(const cli_globals *g, int argc, char **argv);
int conch_cli_pty(const cli_globals *g, int argc, char **argv);
/* `conch serve --stop`: ends the background server the CLI started. */
int conch_cli_serve_stop(void);

#endif
