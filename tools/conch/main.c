/* conch: the command-line tool.  main() reads the options that come before
   the command and dispatches; the process commands live in cli.c, the local
   server in serve_*.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/conch.h>

#include "cli.h"
#include "commands.h"

typedef struct command {
  const char *name;
  int (*run)(const cli_globals *g, int argc, char **argv);
  const char *summary;
} command;

static int serve(const cli_globals *g, int argc, char **argv) {
  int i;
  (void)g;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--stop") == 0) {
      return conch_cli_serve_stop();
    }
  }
  return conch_cmd_serve(argc, argv);
}

static const command commands[] = {
    {"run", conch_cli_run, "run a command, streaming its output"},
    {"start", conch_cli_start, "start a command in the background"},
    {"ps", conch_cli_ps, "list running processes"},
    {"kill", conch_cli_kill, "send SIGTERM or SIGKILL to a process"},
    {"attach", conch_cli_attach, "re-attach to a process's output"},
    {"pty", conch_cli_pty, "an interactive terminal"},
    {"serve", serve, "run the local envd-compatible process server"},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f) {
  size_t i;
  fprintf(f,
          "usage: conch [--url URL] [--token T] [--user U] [--timeout SEC]\n"
          "             [--cacert FILE] <command> [options]\n"
          "\n"
          "Without --url (or CONCH_URL) conch talks to the local server on\n"
          "127.0.0.1:49983, starting `conch serve` in the background when\n"
          "none answers; `conch serve --stop` ends it.  CONCH_TOKEN gives\n"
          "the access token.  CONCH_KEEPALIVE=SEC (default 10, or off):\n"
          "a server silent for 3 x SEC + 5 s ends a stream with unavailable.\n"
          "\ncommands:\n");
  for (i = 0; i < NCOMMANDS; i++) {
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
  }
  fprintf(f, "\n`conch <command> --help` tells more.\n");
}

/* The value of a global option, or exits with a usage error. */
static const char *value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "conch: %s needs a value\n", argv[*i]);
    exit(2);
  }
  return argv[++*i];
}

int main(int argc, char **argv) {
  cli_globals g;
  const char *name;
  size_t k;
  int i;

  memset(&g, 0, sizeof(g));
  g.url = getenv("CONCH_URL");
  g.token = getenv("CONCH_TOKEN");
  if (g.url != NULL && g.url[0] == '\0') {
    g.url = NULL;
  }
  for (i = 1; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--url") == 0) {
      g.url = value(argc, argv, &i);
    } else if (strcmp(a, "--token") == 0) {
      g.token = value(argc, argv, &i);
    } else if (strcmp(a, "--user") == 0) {
      g.user = value(argc, argv, &i);
    } else if (strcmp(a, "--cacert") == 0) {
      g.cacert = value(argc, argv, &i);
    } else if (strcmp(a, "--timeout") == 0) {
      const char *v = value(argc, argv, &i);
      char *end;
      long s;
      errno = 0;
      s = strtol(v, &end, 10);
      if (errno != 0 || *end != '\0' || s < 0 || s > 100000000L) {
        fprintf(stderr, "conch: --timeout wants seconds, got '%s'\n", v);
        return 2;
      }
      g.timeout_ms = s == 0 ? -1 : s * 1000; /* 0: no limit */
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--version") == 0) {
      printf("conch %s\n", conch_version()->version_str);
      return 0;
    } else {
      fprintf(stderr, "conch: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  name = argv[i];
  if (strcmp(name, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(name, "version") == 0) {
    printf("conch %s\n", conch_version()->version_str);
    return 0;
  }
  for (k = 0; k < NCOMMANDS; k++) {
    if (strcmp(name, commands[k].name) == 0) {
      int j;
      for (j = i + 1; j < argc && strcmp(argv[j], "--") != 0; j++) {
        if (strcmp(argv[j], "--help") == 0 && commands[k].run != serve) {
          printf("usage: conch %s ... (see conch --help and README.md)\n",
                 name);
          return 0;
        }
      }
      return commands[k].run(&g, argc - i, argv + i);
    }
  }
  fprintf(stderr, "conch: unknown command '%s'\n", name);
  usage(stderr);
  return 2;
}
