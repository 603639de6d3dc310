/* conch: the command-line tool.  One table of options per command (and one
   of global options) drives the parser (cli_next), `conch --help` and
   `conch COMMAND --help`; tests/cli/test_docs.sh checks that the man page
   (conch.1) and the bash completion name every option they print.  The
   process commands live in cli.c, the local server in serve_*.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <conch/conch.h>

#include "cli.h"
#include "commands.h"

/* ---- Global options ------------------------------------------------------ */

enum {
  G_URL,
  G_TOKEN,
  G_TOKEN_FILE,
  G_USER,
  G_TIMEOUT,
  G_CACERT,
  G_HTTP1,
  G_HTTP2,
  G_PROTOCOL,
  G_CODEC,
  G_JSON_ERRORS,
  G_COUNT
};

static const cli_opt global_opts[] = {
    {"--url", "URL", "CONCH_URL",
     "the server: http[s]://HOST[:PORT] or unix:PATH (default: the local "
     "server on a private Unix socket, started when none answers)"},
    {"--token", "TOKEN", "CONCH_TOKEN",
     "the access token (X-Access-Token); blanked from the command line at "
     "start, but ps may see it before: CONCH_TOKEN or --token-file is "
     "better"},
    {"--token-file", "FILE", "CONCH_TOKEN_FILE",
     "read the access token from the first line of FILE"},
    {"--user", "USER", "CONCH_USER",
     "the user processes run as and files are handled as (default: the "
     "server's default user)"},
    {"--timeout", "SEC", "CONCH_TIMEOUT",
     "lifetime of processes started by run, start and pty; the server kills "
     "them after it (run's default: 60, pty's: 3600, start's: none; 0 = "
     "none)"},
    {"--cacert", "FILE", "CONCH_CACERT",
     "PEM CA certificates to verify an https:// server with (default: the "
     "system's)"},
    {"--http1.1", NULL, NULL,
     "speak HTTP/1.1 only (CONCH_HTTP=1.1); default auto: h2c for http://, "
     "falling back to HTTP/1.1 once for a server that answers in HTTP/1.x, "
     "ALPN for https://"},
    {"--http2", NULL, NULL, "speak HTTP/2 only (CONCH_HTTP=2)"},
    {"--protocol", "connect|grpc|grpc-web", "CONCH_PROTOCOL",
     "the RPC protocol (default connect; conch serve and envd speak all "
     "three; grpc needs HTTP/2)"},
    {"--codec", "proto|json", "CONCH_CODEC",
     "the message codec (default proto)"},
    {"--json-errors", NULL, "CONCH_JSON_ERRORS",
     "report a failure of conch as one JSON object on a line of stderr: code, "
     "grpc_code, message, details, retryable, exit_code, origin (the "
     "variable: 1)"},
    {NULL, NULL, NULL, NULL}};

int cli_usage_fail(const char *cmd, const char *fmt, ...) {
  char msg[1024], prefix[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(prefix, sizeof(prefix), "conch%s%s", cmd != NULL ? " " : "",
           cmd != NULL ? cmd : "");
  return cli_fail_local(CLI_EXIT_USAGE, CONCH_CODE_INVALID_ARGUMENT, prefix,
                        NULL, 0, "%s", msg);
}

static int pick(const char *from, const char *v, const char *const *names,
                int n) {
  char list[256];
  size_t used = 0;
  int k;
  for (k = 0; k < n; k++) {
    if (strcmp(v, names[k]) == 0) {
      return k;
    }
  }
  list[0] = '\0';
  for (k = 0; k < n && used < sizeof(list); k++) {
    int w = snprintf(list + used, sizeof(list) - used, "%s %s",
                     k == 0 ? "" : ",", names[k]);
    used += w > 0 ? (size_t)w : 0;
  }
  cli_usage_fail(NULL, "%s: '%s' is not one of%s", from, v, list);
  return -1;
}

/* The first line of |path| (the access token), without its line end, in
   memory of its own; NULL after a message. */
static char *read_token_file(const char *path, const char *from) {
  char buf[4097];
  size_t n = 0;
  ssize_t r;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  char *nl;

  if (fd < 0) {
    cli_usage_fail(NULL, "%s %s: %s", from, path, strerror(errno));
    return NULL;
  }
  while (n < sizeof(buf) - 1) {
    r = read(fd, buf + n, sizeof(buf) - 1 - n);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      break;
    }
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  nl = strpbrk(buf, "\r\n");
  if (nl != NULL) {
    *nl = '\0';
  } else if (n == sizeof(buf) - 1) {
    cli_usage_fail(NULL, "%s %s: the token is over 4 KiB", from, path);
    return NULL;
  }
  if (buf[0] == '\0') {
    cli_usage_fail(NULL, "%s %s: no token on its first line", from, path);
    return NULL;
  }
  nl = strdup(buf);
  memset(buf, 0, sizeof(buf));
  if (nl == NULL) {
    cli_usage_fail(NULL, "out of memory");
  }
  return nl;
}

/* The token's own copy (--token, --token-file): the last one given wins;
   wiped and freed as conch exits. */
static char *owned_token;

static int own_token(cli_globals *g, char *t) {
  if (owned_token != NULL) {
    memset(owned_token, 0, strlen(owned_token));
    free(owned_token);
  }
  owned_token = t;
  g->token = t;
  return t != NULL ? 0 : -1;
}

/* Applies global option |k| with |v|; |from| names where it came from (the
   option or its variable).  Returns 0 or -1 after a message. */
static int global_set(cli_globals *g, int k, const char *v, const char *from) {
  static const char *const protocols[] = {"connect", "grpc", "grpc-web"};
  static const char *const codecs[] = {"proto", "json"};
  char *end;
  long s;
  int x;

  switch (k) {
  case G_URL:
    g->url = v[0] != '\0' ? v : NULL;
    return 0;
  case G_TOKEN:
    /* A copy: the command line's is blanked (cli_next). */
    if (own_token(g, strdup(v)) != 0) {
      cli_usage_fail(NULL, "out of memory");
      return -1;
    }
    return 0;
  case G_TOKEN_FILE:
    return own_token(g, read_token_file(v, from));
  case G_JSON_ERRORS:
    /* The variable: any value but 0 turns it on (the option has none);
       nothing turns it off once on (main() looked first). */
    if (v == NULL || strcmp(v, "0") != 0) {
      cli_set_json_errors(1);
    }
    return 0;
  case G_USER:
    g->user = v;
    return 0;
  case G_CACERT:
    g->cacert = v;
    return 0;
  case G_TIMEOUT:
    errno = 0;
    s = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || s < 0 || s > 100000000L) {
      cli_usage_fail(NULL, "%s wants seconds, got '%s'", from, v);
      return -1;
    }
    g->timeout_ms = s == 0 ? -1 : s * 1000; /* 0: no limit */
    return 0;
  case G_HTTP1:
    g->http_version = CONCH_HTTP_1_1;
    return 0;
  case G_HTTP2:
    g->http_version = CONCH_HTTP_2;
    return 0;
  case G_PROTOCOL:
    x = pick(from, v, protocols, 3);
    if (x < 0) {
      return -1;
    }
    g->protocol = x == 0   ? CONCH_PROTOCOL_CONNECT
                  : x == 1 ? CONCH_PROTOCOL_GRPC
                           : CONCH_PROTOCOL_GRPC_WEB;
    return 0;
  case G_CODEC:
    x = pick(from, v, codecs, 2);
    if (x < 0) {
      return -1;
    }
    g->codec = x == 0 ? CONCH_CODEC_PROTO : CONCH_CODEC_JSON;
    return 0;
  default:
    return -1;
  }
}

/* The CONCH_* variables; the command line overrides them. */
static int globals_from_env(cli_globals *g) {
  static const char *const versions[] = {"auto", "1.1", "2"};
  const char *v;
  int k;

  for (k = 0; k < G_COUNT; k++) {
    if (global_opts[k].env != NULL &&
        (v = getenv(global_opts[k].env)) != NULL && v[0] != '\0' &&
        global_set(g, k, v, global_opts[k].env) != 0) {
      return -1;
    }
  }
  v = getenv("CONCH_HTTP");
  if (v != NULL && v[0] != '\0') {
    k = pick("CONCH_HTTP", v, versions, 3);
    if (k < 0) {
      return -1;
    }
    g->http_version = k == 0 ? CONCH_HTTP_AUTO
                      : k == 1 ? CONCH_HTTP_1_1
                               : CONCH_HTTP_2;
  }
  return 0;
}

static const cli_opt *find(const cli_opt *opts, const char *a, size_t n) {
  for (; opts != NULL && opts->name != NULL; opts++) {
    if (strlen(opts->name) == n && strncmp(opts->name, a, n) == 0) {
      return opts;
    }
  }
  return NULL;
}

int cli_next(const char *cmd, const cli_opt *opts, cli_globals *g, int argc,
             char **argv, int *i, const char **val) {
  while (*i < argc) {
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    size_t n = eq != NULL && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a)
                                                       : strlen(a);
    const cli_opt *o;
    const char *v = NULL;

    if (strcmp(a, "--") == 0) {
      ++*i;
      return CLI_END;
    }
    if (a[0] != '-' || a[1] == '\0') {
      return CLI_END;
    }
    o = find(opts, a, n);
    if (o == NULL) {
      o = find(global_opts, a, n);
    }
    if (o == NULL) {
      cli_usage_fail(cmd, "unknown option '%.*s' (conch %s%s--help)", (int)n, a,
                     cmd != NULL ? cmd : "", cmd != NULL ? " " : "");
      return CLI_ERROR;
    }
    if (o->arg != NULL) {
      if (a[n] == '=') {
        v = a + n + 1;
      } else if (*i + 1 < argc) {
        v = argv[++*i];
      } else {
        cli_usage_fail(cmd, "%s needs a value (%s)", o->name, o->arg);
        return CLI_ERROR;
      }
    } else if (a[n] == '=') {
      cli_usage_fail(cmd, "%s takes no value", o->name);
      return CLI_ERROR;
    }
    ++*i;
    if (o >= global_opts && o < global_opts + G_COUNT) {
      int k = (int)(o - global_opts);
      if (global_set(g, k, v, o->name) != 0) {
        return CLI_ERROR;
      }
      if (k == G_TOKEN) {
        /* Out of /proc/PID/cmdline (ps) from now on; it was there until
           now, which is why CONCH_TOKEN and --token-file are better. */
        memset(argv[*i - 1] + (v - argv[*i - 1]), 'x', strlen(v));
      }
      continue;
    }
    *val = v;
    return (int)(o - opts);
  }
  return CLI_END;
}

/* ---- Commands ------------------------------------------------------------ */

const cli_opt cli_run_opts[] = {
    {"--cwd", "DIR", NULL,
     "working directory (default: the server's --workdir, else the user's "
     "home)"},
    {"--env", "NAME=VALUE", NULL, "an environment variable (repeatable)"},
    {"--tag", "TAG", NULL, "a tag to find the process by (@TAG)"},
    {"--stdin", NULL, NULL, "forward this stdin to the process"},
    {"--max-output", "BYTES", NULL,
     "show at most BYTES (K, M, G: KiB, MiB, GiB) of each of stdout and "
     "stderr; the rest is read and dropped, the process runs on to its end "
     "and exit status, and a note on stderr says how much was not shown"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_start_opts[] = {
    {"--cwd", "DIR", NULL,
     "working directory (default: the server's --workdir, else the user's "
     "home)"},
    {"--env", "NAME=VALUE", NULL, "an environment variable (repeatable)"},
    {"--tag", "TAG", NULL, "a tag to find the process by (@TAG)"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_ps_opts[] = {
    {"--json", NULL, NULL,
     "one JSON object per line per process: pid, tag, cmd, args, env, cwd"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_kill_opts[] = {
    {"--signal", "TERM|KILL", NULL, "the signal (default KILL); also -s"},
    {"-s", "TERM|KILL", NULL, "the same as --signal"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_none_opts[] = {{NULL, NULL, NULL, NULL}};

/* In the order of cli_files.c's LS_* and W_*. */
const cli_opt cli_ls_opts[] = {
    {"-l", NULL, NULL,
     "long: permissions, owner, group, size, modified time, name (and a "
     "symlink's target)"},
    {"--depth", "N", NULL,
     "list N levels down (default 1: the directory's own entries); deeper "
     "entries are named from the listed directory, a/b/c"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_mkdir_opts[] = {
    {"-p", NULL, NULL,
     "no error when the directory is there already (missing parents are "
     "made either way)"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_watch_opts[] = {
    {"-r", NULL, NULL,
     "recursive: the directories below DIR too, and those made later"},
    {"--json", NULL, NULL,
     "one JSON object per line per event: type, name"},
    {NULL, NULL, NULL, NULL}};

const cli_opt cli_cp_opts[] = {
    {"-r", NULL, NULL,
     "recursive: copy a directory with everything in it (regular files and "
     "directories; anything else is skipped with a note)"},
    {NULL, NULL, NULL, NULL}};

/* In the order of cli_call.c's O_*. */
const cli_opt cli_call_opts[] = {
    {"-d", "JSON|@FILE|@-", NULL,
     "the request as JSON (default {}); @FILE or @- (stdin): a stream of "
     "JSON messages for client and bidi streams, each sent as soon as it is "
     "read"},
    {"-H", "'NAME: VALUE'", NULL,
     "a request header (repeatable), sent on the reflection calls too"},
    {"--schema", "FILE", NULL,
     "the schema instead of server reflection (repeatable): a "
     "FileDescriptorSet, binary or JSON (protoc --include_imports -o, buf "
     "build -o), or a .proto file (through protoc)"},
    {"--proto-path", "DIR", NULL,
     "where protoc finds a .proto --schema and its imports (repeatable; "
     "default: the file's folder)"},
    {"--max-time", "SEC", NULL,
     "the deadline of each RPC, reflection's included (default: none)"},
    {"--service-config", "JSON|@FILE", NULL,
     "a gRPC service config: the retryPolicy or hedgingPolicy of its "
     "methodConfig entries and its retryThrottling apply to the call (with "
     "--url)"},
    {"--lb", "pick_first|round_robin", NULL,
     "spread the calls over every address --url's host resolves to (or the "
     "--target list), with a backoff per address (with --url)"},
    {"--target", "IP:PORT|[IPv6]:PORT|unix:PATH", NULL,
     "a static address instead of looking --url's host up (repeatable; "
     "pick_first unless --lb says otherwise); --url still gives the scheme, "
     "the authority and the path prefix"},
    {NULL, NULL, NULL, NULL}};

static const cli_opt serve_opts_doc[] = {{NULL, NULL, NULL, NULL}};

typedef struct command {
  const char *name;
  int (*run)(cli_globals *g, int argc, char **argv);
  const char *operands; /* after the options */
  const char *summary;
  const char *text; /* what it does */
  const cli_opt *opts;
  const char *example;
} command;

/* conch serve checks its own output (serve_main.c). */
static int ran_serve;

static int serve(cli_globals *g, int argc, char **argv) {
  int i;
  (void)g;
  ran_serve = 1;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--stop") == 0) {
      return conch_cli_serve_stop();
    }
  }
  return conch_cmd_serve(argc, argv);
}

static const command commands[] = {
    {"run", conch_cli_run, "[--] CMD [ARG...]",
     "run a command, streaming its output",
     "Runs CMD with its ARGs (no shell: use sh -c '...') and streams its\n"
     "stdout and stderr here.  Exits with its exit status, 128+N when a\n"
     "signal N ended it, or conch's own code when conch failed (conch\n"
     "--help: 124 when it reached its lifetime, 255 when the server was\n"
     "not reached or lost, ...).  The server kills it after its lifetime\n"
     "(60 s unless --timeout says otherwise).  Ctrl-C ends it, and so does\n"
     "an output that cannot be written (exit 249).",
     cli_run_opts, "conch run --env GREETING=hi -- sh -c 'echo $GREETING'"},
    {"start", conch_cli_start, "[--] CMD [ARG...]",
     "start a command in the background",
     "Starts CMD and prints its pid; `conch attach`, `conch kill` and\n"
     "`conch ps` find it by pid or @TAG.  No lifetime unless --timeout.",
     cli_start_opts, "conch start --tag web -- python3 -m http.server 8000"},
    {"ps", conch_cli_ps, "", "list running processes",
     "Lists the running processes: pid, tag and the command line, quoted\n"
     "the way a shell reads it back.",
     cli_ps_opts, "conch ps --json"},
    {"kill", conch_cli_kill, "PID|@TAG", "send SIGTERM or SIGKILL to a process",
     "Sends SIGKILL (or SIGTERM) to a process and its process group.",
     cli_kill_opts, "conch kill --signal TERM @web"},
    {"attach", conch_cli_attach, "PID|@TAG", "re-attach to a process's output",
     "Streams a running process's output from now on; Ctrl-C leaves it\n"
     "running.",
     cli_none_opts, "conch attach @web"},
    {"pty", conch_cli_pty, "[--] [CMD [ARG...]]", "an interactive terminal",
     "Opens a terminal running CMD (default: the user's login shell) and\n"
     "connects this terminal to it; it ends when CMD exits, or after its\n"
     "lifetime (3600 s unless --timeout says otherwise).  Refuses (exit 2)\n"
     "when stdin is not a terminal: run --stdin gives a command piped\n"
     "input.",
     cli_none_opts, "conch pty -- bash -l"},
    {"cp", conch_cli_cp, "SRC DST", "copy files to or from the sandbox",
     "Copies SRC to DST, one of them a sandbox path :PATH (as scp's\n"
     "host:path, the host given by --url), the other a local path, or -\n"
     "for stdin or stdout.  Into a directory that is there (or a DST\n"
     "ending in /) the copy takes SRC's name, as cp does; parent\n"
     "directories in the sandbox are made.  Files stream: none is held in\n"
     "memory, whatever its size.  A progress line shows on stderr when it\n"
     "is a terminal.  Exits 252 when SRC is not there, 253 when it is a\n"
     "directory without -r or DST cannot be written.",
     cli_cp_opts, "conch cp -r ./src :/tmp/project"},
    {"ls", conch_cli_ls, "[:PATH]", "list a sandbox directory",
     "Lists the directory PATH in the sandbox (default \":\": the user's\n"
     "home), one entry per line, directories with a trailing '/'.  A\n"
     "sandbox path is written :PATH (as scp's host:path, the host given by\n"
     "--url), absolute or relative to the user's home.  Exits 252 when\n"
     "PATH is not there, 253 when it is not a directory.",
     cli_ls_opts, "conch ls -l --depth 2 :/tmp"},
    {"stat", conch_cli_stat, ":PATH", "show a sandbox path's entry",
     "Prints the entry at PATH, one 'key: value' line each: path, name,\n"
     "type (file, dir, symlink; a symlink shows its target's type and a\n"
     "symlink_target line), size, mode, permissions, owner, group and the\n"
     "modified time (RFC 3339, UTC).  Exits 252 when nothing is there.",
     cli_none_opts, "conch stat :~/.bashrc"},
    {"mkdir", conch_cli_mkdir, ":PATH...", "make sandbox directories",
     "Makes each directory PATH, with its missing parents.  A directory\n"
     "that is there already is an error (already_exists, exit 254) unless\n"
     "-p is given; anything else in the way always is (exit 253).",
     cli_mkdir_opts, "conch mkdir -p :/tmp/out/logs"},
    {"mv", conch_cli_mv, ":SRC :DST", "move or rename a sandbox path",
     "Moves SRC to DST (a rename: DST names the new path, not a directory\n"
     "to move into).  Exits 252 when SRC is not there.",
     cli_none_opts, "conch mv :/tmp/a.txt :/tmp/b.txt"},
    {"rm", conch_cli_rm, ":PATH...", "remove sandbox paths",
     "Removes each PATH, a directory with everything in it, as envd does\n"
     "(no -r needed; nothing there is no error).  / is refused.",
     cli_none_opts, "conch rm :/tmp/out"},
    {"watch", conch_cli_watch, ":DIR", "print a sandbox directory's events",
     "Watches the directory DIR and prints one line per event, 'TYPE NAME'\n"
     "(TYPE: create, write, remove, rename, chmod; NAME relative to DIR),\n"
     "as it happens, until Ctrl-C (exit 128+N for signal N) or the server\n"
     "ends the watch.  A line 'conch: watching DIR' on stderr says when it\n"
     "has begun.",
     cli_watch_opts, "conch watch -r --json :/tmp/out"},
    {"call", conch_cli_call, "METHOD | list [SERVICE] | describe SYMBOL",
     "call any RPC of a server, in JSON",
     "Calls METHOD (pkg.Service/Method) of the server --url names (the\n"
     "local server without one, as every command), with\n"
     "the request given as JSON (-d), and prints each response as one line\n"
     "of JSON as it arrives; any of the four stream shapes.  The schema\n"
     "comes from the server's reflection (grpc.reflection.v1, else\n"
     "v1alpha) unless --schema gives it.  `list` prints the services,\n"
     "`list SERVICE` its methods, `describe SYMBOL` a service, method,\n"
     "message or enum.  A failed call exits as any RPC failure (252\n"
     "not_found, 253 invalid_argument, ...: conch --help), its error\n"
     "details decoded on stderr when the schema has their types\n"
     "(--json-errors: as Connect's JSON, base64).",
     cli_call_opts,
     "conch --url http://127.0.0.1:49983 call process.Process/List"},
    {"serve", serve, "", "run the local envd-compatible process server",
     "(conch serve --help)", serve_opts_doc, "conch serve --listen unix:S"},
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* "  --name ARG  help", the help wrapped at 78 columns. */
static void print_opts(FILE *f, const cli_opt *o) {
  for (; o->name != NULL; o++) {
    char head[64];
    const char *h = o->help;
    int col;

    snprintf(head, sizeof(head), "  %s%s%s", o->name, o->arg ? " " : "",
             o->arg ? o->arg : "");
    fputs(head, f);
    col = (int)strlen(head);
    if (col > 27) {
      fputs("\n", f);
      col = 0;
    }
    fprintf(f, "%*s", 28 - col, "");
    col = 28;
    while (*h != '\0') {
      size_t w = strcspn(h, " ");
      if (col > 28 && col + 1 + (int)w > 78) {
        fprintf(f, "\n%28s", "");
        col = 28;
      } else if (col > 28) {
        fputc(' ', f);
        col++;
      }
      fwrite(h, 1, w, f);
      col += (int)w;
      h += w;
      while (*h == ' ') {
        h++;
      }
    }
    if (o->env != NULL) {
      fprintf(f, "\n%28s[%s]", "", o->env);
    }
    fputc('\n', f);
  }
}

static void print_env(FILE *f) {
  fprintf(f,
          "\nenvironment: the [CONCH_*] variables above, and\n"
          "  CONCH_HTTP=auto|1.1|2     the HTTP version (--http1.1, --http2)\n"
          "  CONCH_KEEPALIVE=SEC|off   liveness (default 10): a server silent "
          "for\n"
          "                            3 x SEC + 5 s ends a stream with "
          "unavailable\n"
          "  CONCH_TREE=auto|on|off    the tree leader (default auto): on a "
          "server\n"
          "                            that signals the pid only (envd), "
          "commands run\n"
          "                            under a leader that ends their whole "
          "tree\n");
}

static void print_exit(FILE *f) {
  fprintf(f,
          "\nexit status: run, attach and pty exit with the process's status "
          "(128+N\nwhen signal N ended it); a failure of conch itself exits "
          "with\n"
          "  2    a usage error (an option, operand or CONCH_* value)\n"
          "  124  deadline_exceeded: the process reached its lifetime, or a "
          "call its\n       time limit\n"
          "  249  conch could not write to stdout or stderr (the process, if "
          "any,\n       was ended)\n"
          "  250  resource_exhausted   251  unauthenticated, "
          "permission_denied\n"
          "  252  not_found   253  invalid_argument, failed_precondition, "
          "out_of_range\n"
          "  254  another RPC failure\n"
          "  255  unavailable: the server could not be reached, or was lost\n"
          "--json-errors tells the two apart: a failure of conch always ends "
          "stderr\nwith its JSON object, the process's own status never "
          "does.\n");
}

static void usage(FILE *f) {
  size_t i;
  fprintf(f, "usage: conch [global options] COMMAND [options] [operands]\n"
             "\ncommands:\n");
  for (i = 0; i < NCOMMANDS; i++) {
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
  }
  fprintf(f, "\nglobal options (before or after the command):\n");
  print_opts(f, global_opts);
  fprintf(f, "  --help                    this text; conch COMMAND --help "
             "tells more\n"
             "  --version                 conch's version\n");
  print_env(f);
  print_exit(f);
  fprintf(f, "\nexample:\n  conch --url http://127.0.0.1:49983 run -- uname "
             "-a\n");
}

static void command_usage(FILE *f, const command *c) {
  fprintf(f, "usage: conch %s%s%s%s\n\n%s\n", c->name,
          c->opts[0].name != NULL ? " [options]" : "",
          c->operands[0] != '\0' ? " " : "", c->operands, c->text);
  if (c->opts[0].name != NULL) {
    fprintf(f, "\noptions:\n");
    print_opts(f, c->opts);
  }
  fprintf(f, "\nglobal options:\n");
  print_opts(f, global_opts);
  print_env(f);
  fprintf(f, "\nexample:\n  %s\n", c->example);
}

int cli_usage_error(const char *cmd, const char *why) {
  char line[256], prefix[64];
  size_t k;
  line[0] = '\0';
  for (k = 0; k < NCOMMANDS; k++) {
    if (strcmp(commands[k].name, cmd) == 0) {
      snprintf(line, sizeof(line), "usage: conch %s%s%s%s  (conch %s --help)",
               commands[k].name,
               commands[k].opts[0].name != NULL ? " [options]" : "",
               commands[k].operands[0] != '\0' ? " " : "", commands[k].operands,
               commands[k].name);
    }
  }
  snprintf(prefix, sizeof(prefix), "conch %s", cmd);
  return cli_fail_local(CLI_EXIT_USAGE, CONCH_CODE_INVALID_ARGUMENT, prefix,
                        line[0] != '\0' ? line : NULL, 0, "%s",
                        why != NULL ? why : "bad operands");
}

static const command *lookup(const char *name) {
  size_t k;
  for (k = 0; k < NCOMMANDS; k++) {
    if (strcmp(name, commands[k].name) == 0) {
      return &commands[k];
    }
  }
  return NULL;
}

/* Whether --json-errors is among the options of the command line (before
   the command and after it, up to its first operand), so that an error met
   before the parser reaches it is reported its way too. */
static int wants_json_errors(int argc, char **argv) {
  const command *c = NULL;
  int j;
  for (j = 1; j < argc && strcmp(argv[j], "--") != 0; j++) {
    const char *a = argv[j];
    size_t n = strncmp(a, "--", 2) == 0 ? strcspn(a, "=") : strlen(a);
    const cli_opt *o;
    if (a[0] != '-' || a[1] == '\0') {
      if (c != NULL) {
        break; /* the command's first operand */
      }
      c = lookup(a);
      if (c == NULL || c->run == serve) {
        break;
      }
      continue;
    }
    if (strcmp(a, "--json-errors") == 0) {
      return 1;
    }
    o = find(global_opts, a, n);
    if (o == NULL && c != NULL) {
      o = find(c->opts, a, n);
    }
    if (o != NULL && o->arg != NULL && a[n] != '=') {
      j++; /* its value */
    }
  }
  return 0;
}

static int run_main(int argc, char **argv);

int main(int argc, char **argv) {
  const char *env = getenv("CONCH_JSON_ERRORS");
  int rc;
  if (wants_json_errors(argc, argv) ||
      (env != NULL && env[0] != '\0' && strcmp(env, "0") != 0)) {
    cli_set_json_errors(1);
  }
  /* A reader that went away is a write error with a message (249), not a
     silent death: conch serve ignores it too, and resets it for the
     processes it spawns. */
  signal(SIGPIPE, SIG_IGN);
  rc = run_main(argc, argv);
  if (owned_token != NULL) {
    memset(owned_token, 0, strlen(owned_token));
    free(owned_token);
  }
  return ran_serve ? rc : cli_finish_output(rc);
}

static int run_main(int argc, char **argv) {
  cli_globals g;
  const command *c;
  const char *v;
  int i = 1, j;

  memset(&g, 0, sizeof(g));
  if (globals_from_env(&g) != 0) {
    return 2;
  }
  /* --help and --version anywhere before the command. */
  for (j = 1; j < argc && argv[j][0] == '-' && strcmp(argv[j], "--") != 0;
       j++) {
    const cli_opt *o = find(global_opts, argv[j], strcspn(argv[j], "="));
    if (strcmp(argv[j], "-h") == 0 || strcmp(argv[j], "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(argv[j], "--version") == 0) {
      printf("conch %s\n", conch_version()->version_str);
      return 0;
    }
    if (o != NULL && o->arg != NULL && strchr(argv[j], '=') == NULL) {
      j++;
    }
  }
  if (cli_next(NULL, NULL, &g, argc, argv, &i, &v) == CLI_ERROR) {
    return 2;
  }
  if (i >= argc) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[i], "help") == 0) {
    c = i + 1 < argc ? lookup(argv[i + 1]) : NULL;
    if (c != NULL && c->run == serve) {
      char *a[] = {argv[i + 1], (char *)"--help", NULL};
      ran_serve = 1;
      return conch_cmd_serve(2, a);
    }
    if (c != NULL) {
      command_usage(stdout, c);
    } else {
      usage(stdout);
    }
    return 0;
  }
  if (strcmp(argv[i], "version") == 0) {
    printf("conch %s\n", conch_version()->version_str);
    return 0;
  }
  c = lookup(argv[i]);
  if (c == NULL) {
    return cli_usage_fail(NULL, "unknown command '%s' (conch --help)", argv[i]);
  }
  if (c->run != serve) {
    for (j = i + 1; j < argc && strcmp(argv[j], "--") != 0; j++) {
      if (strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0) {
        command_usage(stdout, c);
        return 0;
      }
    }
  }
  return c->run(&g, argc - i, argv + i);
}
