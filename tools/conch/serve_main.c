/* `conch serve`: options, the listening socket, signals and the server's
   lifetime.  SIGINT, SIGTERM and SIGHUP (and the end of stdin, when stdin
   is a pipe or a socket) begin the shutdown: no new connections, GOAWAY,
   SIGTERM to every process group, SIGKILL after the grace period, then
   every child reaped before exit. */
#include "commands.h"
#include "serve.h"

#include <conch/local.h>

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STOP_LINGER_MS 2000 /* after SIGKILL: let the last events out */
#define LOOP_MAX_WAIT_MS 1000

static const char usage_text[] =
    "usage: conch serve [--listen unix:PATH | --listen HOST:PORT]\n"
    "                   [--access-token-file FILE | --no-token]\n"
    "                   [--tls-cert FILE --tls-key FILE]\n"
    "                   [--allow-uid UID]... [--allow-user NAME|*]...\n"
    "                   [--user NAME] [--workdir DIR]\n"
    "       conch serve --stop\n"
    "\n"
    "Runs a local envd-compatible process server (process.Process over the\n"
    "Connect protocol, HTTP/1.1 and HTTP/2).  Prints \"LISTENING <port>\"\n"
    "(\"LISTENING unix:PATH\" for a Unix socket) once ready.\n"
    "\n"
    "  --listen unix:PATH    a Unix socket (mode 0600); only peers of our uid\n"
    "                        or root (SO_PEERCRED) are served.  The default:\n"
    "                        unix:$XDG_RUNTIME_DIR/conch/serve.sock, else\n"
    "                        unix:${TMPDIR:-/tmp}/conch-<uid>/serve.sock\n"
    "  --listen HOST:PORT    TCP (port 0 picks a free port); needs a token\n"
    "                        or --no-token, and a token when HOST is not a\n"
    "                        loopback address\n"
    "  --access-token-file FILE  require X-Access-Token: <the file's first\n"
    "                        line> (401 otherwise); CONCH_TOKEN in the\n"
    "                        environment does the same\n"
    "  --access-token TOKEN  the same from the command line (other users\n"
    "                        may see it in ps before it is blanked)\n"
    "  --no-token            serve TCP on a loopback address without a\n"
    "                        token: every local user can run commands as\n"
    "                        this server's user (e2b SDK, E2B_DEBUG=true)\n"
    "  --tls-cert FILE       serve TLS (ALPN h2, http/1.1) with this PEM\n"
    "                        certificate\n"
    "  --tls-key FILE        ... and this PEM key\n"
    "  --allow-uid UID       also serve Unix socket peers of this uid\n"
    "  --allow-user NAME     let requests run processes as NAME (\"*\": any\n"
    "                        user); by default only as the server's user\n"
    "  --user NAME           run a request that names no user as NAME (the\n"
    "                        default: the server's own user); a server not\n"
    "                        running as root can only name itself\n"
    "  --workdir DIR         the cwd of a request that names none (the\n"
    "                        default: the user's home)\n"
    "  --stop                end the background server the CLI started\n"
    "\n"
    "Exit status: 0 stopped (a signal, the end of stdin); 1 the system failed\n"
    "(out of descriptors, memory or processes, stdout not writable); 2 a bad\n"
    "option, value or named file; 3 refused: TCP without a token; 4 could not\n"
    "listen (address in use, not ours, no such directory); 5 another conch\n"
    "serve serves that Unix socket.\n"
    "\n"
    "example: conch serve --listen 127.0.0.1:0 --no-token --workdir /tmp\n";

/* Token and listener options, resolved after parsing (serve_main.c). */
typedef struct listen_opts {
  char *token;            /* owned: from argv, a file or the environment */
  const char *token_file; /* --access-token-file */
  int token_argv;         /* --access-token given */
  int no_token;           /* --no-token */
} listen_opts;

static listen_opts lopts;

/* The exit status of the first failure (enum srv_exit). */
static int fail_status;

/* Says why on stderr, keeps |status| unless a failure came first, and
   returns -1. */
static int CONCH_PRINTF(2, 3) fail(int status, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  int n;

  /* One write: servers racing for one socket share their log, and a line
     written in pieces comes out with another's in the middle. */
  n = snprintf(line, sizeof(line), "conch serve: ");
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof(line) - 2) {
    n = (int)sizeof(line) - 2;
  }
  line[n++] = '\n';
  fflush(stderr);
  (void)!write(STDERR_FILENO, line, (size_t)n);
  if (fail_status == 0) {
    fail_status = status;
  }
  return -1;
}

static int check_listen(const char *listen);

/* |otherwise|, unless |err| says the system ran out of something. */
static int errno_status(int err, int otherwise) {
  return err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS ||
                 err == EAGAIN
             ? SRV_EXIT_FAILED
             : otherwise;
}

/* The Unix socket we bound, removed at exit if still ours. */
static struct {
  int lock_fd;
  char path[128];
  dev_t dev;
  ino_t ino;
  unsigned long refused; /* peers turned away */
} unix_l = {-1, "", 0, 0, 0};

/* ---- Options ---------------------------------------------------------------
 */

static int parse_num(const char *opt, const char *v, long long min,
                     long long max, long long *out) {
  char *end;
  long long n;

  errno = 0;
  n = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < min || n > max) {
    return fail(SRV_EXIT_USAGE, "%s: not a number in [%lld, %lld]: %s", opt,
                min, max, v);
  }
  *out = n;
  return 0;
}

/* The hidden options exist for the tests. */
static int set_number(srv_config *cfg, const char *name, const char *v) {
  long long n;

  if (strcmp(name, "--retention-ms") == 0) {
    if (parse_num(name, v, 0, 86400000LL, &n) != 0) {
      return -1;
    }
    cfg->retention_ms = n;
  } else if (strcmp(name, "--max-message-bytes") == 0) {
    if (parse_num(name, v, 1024, 1LL << 30, &n) != 0) {
      return -1;
    }
    cfg->max_message = (size_t)n;
  } else if (strcmp(name, "--idle-timeout-ms") == 0 ||
             strcmp(name, "--header-timeout-ms") == 0 ||
             strcmp(name, "--body-timeout-ms") == 0) {
    if (parse_num(name, v, 100, 86400000LL, &n) != 0) {
      return -1;
    }
    *(name[2] == 'i'   ? &cfg->idle_ms
      : name[2] == 'h' ? &cfg->header_ms
                       : &cfg->body_ms) = n;
  } else if (strcmp(name, "--max-processes") == 0) {
    if (parse_num(name, v, 1, 1000000, &n) != 0) {
      return -1;
    }
    cfg->max_procs = (size_t)n;
  } else if (strcmp(name, "--max-stdin-bytes") == 0) {
    if (parse_num(name, v, 1024, 1LL << 40, &n) != 0) {
      return -1;
    }
    cfg->stdin_total = (size_t)n;
  } else if (strcmp(name, "--max-buffered-bytes") == 0) {
    if (parse_num(name, v, 1024, 1LL << 40, &n) != 0) {
      return -1;
    }
    cfg->max_buffered = (size_t)n;
  } else if (strcmp(name, "--max-connections") == 0) {
    if (parse_num(name, v, 1, 1000000, &n) != 0) {
      return -1;
    }
    cfg->max_conns = (size_t)n;
  } else if (strcmp(name, "--kill-grace-ms") == 0) {
    if (parse_num(name, v, 0, 60000, &n) != 0) {
      return -1;
    }
    cfg->kill_grace_ms = n;
  } else if (strcmp(name, "--max-watchers") == 0) {
    if (parse_num(name, v, 1, 100000, &n) != 0) {
      return -1;
    }
    cfg->fs_max_watchers = (size_t)n;
  } else if (strcmp(name, "--max-watcher-events") == 0) {
    if (parse_num(name, v, 1, 1000000, &n) != 0) {
      return -1;
    }
    cfg->fs_max_events = (size_t)n;
  } else if (strcmp(name, "--watcher-idle-ms") == 0) {
    if (parse_num(name, v, 100, 86400000LL, &n) != 0) {
      return -1;
    }
    cfg->fs_idle_ms = n;
  } else if (strcmp(name, "--spawn-delay-ms") == 0) {
    /* Each child waits this long before its exec: the one way to make a
       spawn slow on purpose (tests of the loop during a spawn). */
    if (parse_num(name, v, 0, 600000, &n) != 0) {
      return -1;
    }
    cfg->spawn_delay_ms = n;
  } else {
    return 1;
  }
  return 0;
}

/* Repeatable options: --allow-uid, --allow-user. */
static int set_allow(srv_config *cfg, const char *name, const char *v) {
  if (strcmp(name, "--allow-uid") == 0) {
    long long n;

    if (cfg->nallow_uids == SRV_MAX_ALLOW) {
      return fail(SRV_EXIT_USAGE, "at most %d --allow-uid", SRV_MAX_ALLOW);
    }
    if (parse_num(name, v, 0, 0x7fffffffLL, &n) != 0) {
      return -1;
    }
    cfg->allow_uids[cfg->nallow_uids++] = (uid_t)n;
    return 0;
  }
  if (strcmp(name, "--allow-user") == 0) {
    if (cfg->nallow_users == SRV_MAX_ALLOW) {
      return fail(SRV_EXIT_USAGE, "at most %d --allow-user", SRV_MAX_ALLOW);
    }
    if (v[0] == '\0') {
      return fail(SRV_EXIT_USAGE, "--allow-user needs a user name or *");
    }
    cfg->allow_users[cfg->nallow_users++] = v;
    return 0;
  }
  return 1;
}

static int set_token(const char *v) {
  if (lopts.token_argv) {
    return fail(SRV_EXIT_USAGE, "--access-token given twice");
  }
  lopts.token_argv = 1;
  lopts.token = strdup(v);
  if (lopts.token == NULL) {
    return fail(SRV_EXIT_FAILED, "out of memory");
  }
  return 0;
}

static int set_option(srv_config *cfg, const char *name, const char *v) {
  int rv;

  if (strcmp(name, "--listen") == 0) {
    cfg->listen = v;
  } else if (strcmp(name, "--tls-cert") == 0) {
    cfg->tls_cert = v;
  } else if (strcmp(name, "--tls-key") == 0) {
    cfg->tls_key = v;
  } else if (strcmp(name, "--access-token") == 0) {
    return set_token(v);
  } else if (strcmp(name, "--access-token-file") == 0) {
    lopts.token_file = v;
  } else if (strcmp(name, "--workdir") == 0) {
    cfg->workdir = v;
  } else if (strcmp(name, "--user") == 0) {
    cfg->default_user = v;
  } else {
    rv = set_allow(cfg, name, v);
    if (rv <= 0) {
      return rv;
    }
    rv = set_number(cfg, name, v);
    if (rv > 0) {
      fail(SRV_EXIT_USAGE, "unknown option %s", name);
      fputs(usage_text, stderr);
    }
    return rv != 0 ? -1 : 0;
  }
  return 0;
}

/* A user this server can run processes as: it exists, and it is the
   server's own unless the server runs as root. */
static int check_user(const char *opt, const char *name) {
  srv_user u;
  int rv = srv_user_lookup(name, &u);

  if (rv == -2) {
    return fail(SRV_EXIT_FAILED, "%s %s: out of memory", opt, name);
  }
  if (rv != 0) {
    return fail(SRV_EXIT_USAGE, "%s %s: no such user", opt, name);
  }
  if (u.uid != geteuid() && geteuid() != 0) {
    srv_user_clear(&u);
    return fail(SRV_EXIT_USAGE,
                "%s %s: not running as root, this server can run processes "
                "as its own user only",
                opt, name);
  }
  srv_user_clear(&u);
  return 0;
}

/* --workdir must be an absolute directory, --user and --allow-user users
   this server can switch to ("*" aside). */
static int check_defaults(const srv_config *cfg) {
  struct stat sb;
  size_t i;

  if (cfg->workdir != NULL) {
    if (cfg->workdir[0] != '/') {
      return fail(SRV_EXIT_USAGE, "--workdir %s: not an absolute path",
                  cfg->workdir);
    }
    if (stat(cfg->workdir, &sb) != 0) {
      return fail(errno_status(errno, SRV_EXIT_USAGE), "--workdir %s: %s",
                  cfg->workdir, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode)) {
      return fail(SRV_EXIT_USAGE, "--workdir %s: not a directory",
                  cfg->workdir);
    }
  }
  if (cfg->default_user != NULL &&
      check_user("--user", cfg->default_user) != 0) {
    return -1;
  }
  for (i = 0; i < cfg->nallow_users; i++) {
    if (strcmp(cfg->allow_users[i], "*") != 0 &&
        check_user("--allow-user", cfg->allow_users[i]) != 0) {
      return -1;
    }
  }
  return 0;
}

/* Returns 0, 1 for --help, or -1. */
static int parse_args(int argc, char **argv, srv_config *cfg) {
  int i;

  for (i = 1; i < argc; i++) {
    char name[64];
    char *arg = argv[i];
    char *eq = strchr(arg, '=');
    char *value;

    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      return 1;
    }
    /* Hidden, for measurements: envd's pid-only signals (README). */
    if (strcmp(arg, "--signal-pid-only") == 0) {
      cfg->signal_pid_only = 1;
      continue;
    }
    if (strcmp(arg, "--no-token") == 0) {
      lopts.no_token = 1;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0) {
      fail(SRV_EXIT_USAGE, "unexpected argument %s", arg);
      fputs(usage_text, stderr);
      return -1;
    }
    if (eq != NULL) {
      snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
      value = eq + 1;
    } else {
      if (i + 1 >= argc) {
        return fail(SRV_EXIT_USAGE, "%s needs a value", arg);
      }
      snprintf(name, sizeof(name), "%s", arg);
      value = argv[++i];
    }
    if (set_option(cfg, name, value) != 0) {
      return -1;
    }
    if (strcmp(name, "--access-token") == 0) {
      /* Out of /proc/PID/cmdline (ps) from now on; it was there until now,
         which is why the file and the environment are better. */
      memset(value, 'x', strlen(value));
    }
  }
  if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL)) {
    return fail(SRV_EXIT_USAGE, "--tls-cert and --tls-key go together");
  }
  if (cfg->listen != NULL && check_listen(cfg->listen) != 0) {
    return -1;
  }
  if (check_defaults(cfg) != 0) {
    return -1;
  }
  return 0;
}

/* ---- The access token -------------------------------------------------------
 */

/* A token goes in a header: visible ASCII, no spaces. */
static int token_valid(const char *t, const char *from) {
  size_t i;

  if (t[0] == '\0') {
    fail(SRV_EXIT_USAGE, "the access token (%s) is empty", from);
    return 0;
  }
  for (i = 0; t[i] != '\0'; i++) {
    if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f) {
      fail(SRV_EXIT_USAGE,
           "the access token (%s) may hold only visible ASCII characters",
           from);
      return 0;
    }
  }
  return 1;
}

/* The first line of |path|, without its line end. */
static char *read_token_file(const char *path) {
  char buf[4097];
  size_t n = 0;
  ssize_t r;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  char *nl;

  if (fd < 0) {
    fail(errno_status(errno, SRV_EXIT_USAGE), "--access-token-file %s: %s",
         path, strerror(errno));
    return NULL;
  }
  while (n < sizeof(buf) - 1) {
    r = read(fd, buf + n, sizeof(buf) - 1 - n);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      /* A directory (EISDIR), or an I/O error: no token rather than a
         part of one. */
      fail(errno_status(errno, SRV_EXIT_USAGE), "--access-token-file %s: %s",
           path, strerror(errno));
      close(fd);
      memset(buf, 0, sizeof(buf));
      return NULL;
    }
    if (r == 0) {
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
    fail(SRV_EXIT_USAGE, "--access-token-file %s: the token is over 4 KiB",
         path);
    memset(buf, 0, sizeof(buf));
    return NULL;
  }
  nl = strdup(buf);
  memset(buf, 0, sizeof(buf));
  if (nl == NULL) {
    fail(SRV_EXIT_FAILED, "out of memory");
  }
  return nl;
}

/* --access-token-file, --access-token, then CONCH_TOKEN; --no-token keeps
   the environment's out. */
static int resolve_token(srv_config *cfg) {
  const char *env = getenv("CONCH_TOKEN");
  const char *from = "--access-token";

  if (lopts.token_file != NULL && lopts.token_argv) {
    return fail(SRV_EXIT_USAGE,
                "--access-token and --access-token-file exclude each other");
  }
  if (lopts.no_token && (lopts.token_file != NULL || lopts.token_argv)) {
    return fail(SRV_EXIT_USAGE,
                "--no-token and an access token exclude each other");
  }
  if (lopts.token_file != NULL) {
    lopts.token = read_token_file(lopts.token_file);
    if (lopts.token == NULL) {
      return -1;
    }
    from = lopts.token_file;
  } else if (!lopts.token_argv && !lopts.no_token && env != NULL) {
    lopts.token = strdup(env);
    if (lopts.token == NULL) {
      return fail(SRV_EXIT_FAILED, "out of memory");
    }
    from = "CONCH_TOKEN";
  }
  if (lopts.token != NULL && !token_valid(lopts.token, from)) {
    return -1;
  }
  cfg->access_token = lopts.token;
  return 0;
}

/* ---- Listening -------------------------------------------------------------
 */

/* "host:port", "[v6]:port" or ":port" (every address). */
static int split_hostport(const char *s, char *host, size_t hostlen,
                          const char **port) {
  const char *colon;
  size_t n;

  if (s[0] == '[') {
    const char *end = strchr(s, ']');

    if (end == NULL || end[1] != ':') {
      return -1;
    }
    n = (size_t)(end - s - 1);
    s++;
    colon = end + 1;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL) {
      return -1;
    }
    n = (size_t)(colon - s);
  }
  if (n >= hostlen) {
    return -1;
  }
  memcpy(host, s, n);
  host[n] = '\0';
  *port = colon + 1;
  return 0;
}

/* A port: 0 to 65535 in decimal digits. */
static int port_valid(const char *p) {
  size_t i;
  long v = 0;

  for (i = 0; p[i] != '\0'; i++) {
    if (p[i] < '0' || p[i] > '9' || i >= 5) {
      return 0;
    }
    v = v * 10 + (p[i] - '0');
  }
  return i > 0 && v <= 65535;
}

/* --listen's form, checked before anything is opened. */
static int check_listen(const char *listen) {
  char host[256];
  const char *port;

  if (strncmp(listen, "unix:", 5) == 0) {
    size_t n = strlen(listen + 5);

    size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;

    if (max > sizeof(unix_l.path) - 1) {
      max = sizeof(unix_l.path) - 1;
    }
    if (n == 0 || n > max) {
      return fail(SRV_EXIT_USAGE,
                  "--listen %s: the socket path is empty or longer than %zu "
                  "bytes",
                  listen, max);
    }
    return 0;
  }
  if (split_hostport(listen, host, sizeof(host), &port) != 0 ||
      !port_valid(port)) {
    return fail(SRV_EXIT_USAGE,
                "--listen wants HOST:PORT (PORT 0-65535, 0 picks a free "
                "one), [IPv6]:PORT or unix:PATH, got %s",
                listen);
  }
  return 0;
}

static int is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;

    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

    return IN6_IS_ADDR_LOOPBACK(a) ||
           (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
  return 0;
}

static const char *own_user_name(void) {
  struct passwd *pw = getpwuid(geteuid());

  return pw != NULL ? pw->pw_name : "this server's user";
}

/* Who may connect over TCP: with no token, only this machine (loopback),
   and only when the operator said --no-token. */
static int tcp_policy(srv_config *cfg, const char *addr,
                      const struct sockaddr *sa) {
  if (cfg->access_token != NULL) {
    if (!is_loopback(sa) && cfg->tls_cert == NULL) {
      fprintf(stderr,
              "conch serve: warning: %s is not a loopback address and there "
              "is no TLS: the access token crosses the network in clear "
              "(--tls-cert, --tls-key)\n",
              addr);
    }
    return 0;
  }
  if (!is_loopback(sa)) {
    return fail(SRV_EXIT_UNSAFE,
                "refusing to listen on %s without an access token: it is not "
                "a loopback address, so anyone who reaches it could run "
                "commands as %s.  Give a token (--access-token-file FILE or "
                "CONCH_TOKEN; better with --tls-cert/--tls-key), or listen on "
                "127.0.0.1",
                addr, own_user_name());
  }
  if (!lopts.no_token) {
    return fail(SRV_EXIT_UNSAFE,
                "a TCP listener needs an access token (--access-token-file "
                "FILE or CONCH_TOKEN), or --no-token to let every local user "
                "run commands as %s (the e2b SDK with E2B_DEBUG=true sends no "
                "token).  Without --listen, conch serve listens on a private "
                "Unix socket",
                own_user_name());
  }
  cfg->host_check = 1; /* DNS rebinding: browsers are local users too */
  return 0;
}

static int listen_tcp(srv_config *cfg, const char *addr, int *port_out) {
  struct addrinfo hints;
  struct addrinfo *res = NULL;
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof(ss);
  char host[256];
  const char *port;
  int one = 1;
  int fd;
  int rv;

  if (split_hostport(addr, host, sizeof(host), &port) != 0) {
    return fail(SRV_EXIT_USAGE, "--listen wants HOST:PORT or unix:PATH, got %s",
                addr); /* check_listen() said it already */
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  rv = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
  if (rv != 0) {
    return fail(rv == EAI_MEMORY ||
                        (rv == EAI_SYSTEM && errno_status(errno, 0) != 0)
                    ? SRV_EXIT_FAILED
                    : SRV_EXIT_LISTEN,
                "listen on %s: %s", addr,
                rv == EAI_SYSTEM ? strerror(errno) : gai_strerror(rv));
  }
  if (tcp_policy(cfg, addr, res->ai_addr) != 0) {
    freeaddrinfo(res);
    return -1;
  }
  fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 512) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0) {
    int err = errno;

    if (fd >= 0) {
      close(fd);
    }
    freeaddrinfo(res);
    return fail(errno_status(err, SRV_EXIT_LISTEN), "listen on %s: %s", addr,
                strerror(err));
  }
  freeaddrinfo(res);
  *port_out =
      ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* One server per socket path: a lock next to it, held for our life, so a
   socket left by a dead server can be replaced without racing a live
   one. */
static int lock_socket_path(const char *path) {
  char lock[sizeof(unix_l.path) + 8];
  struct stat sb;
  int fd;

  snprintf(lock, sizeof(lock), "%s.lock", path);
  fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd < 0) {
    return fail(errno_status(errno, SRV_EXIT_LISTEN),
                "listen on unix:%s: %s: %s", path, lock, strerror(errno));
  }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
    close(fd);
    return fail(SRV_EXIT_LISTEN,
                "listen on unix:%s: %s: not a regular file of ours", path,
                lock);
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;

    close(fd);
    if (err == EWOULDBLOCK) {
      return fail(SRV_EXIT_TAKEN, "another conch serve listens on unix:%s",
                  path);
    }
    return fail(errno_status(err, SRV_EXIT_LISTEN), "listen on unix:%s: %s: %s",
                path, lock, strerror(err));
  }
  return fd;
}

static int listen_unix(const char *path) {
  struct sockaddr_un sa;
  struct stat sb;
  size_t n = strlen(path);
  mode_t old;
  int fd;

  if (n == 0 || n >= sizeof(sa.sun_path) || n >= sizeof(unix_l.path)) {
    return fail(SRV_EXIT_USAGE, "unix:%s: the path is empty or too long",
                path); /* check_listen() said it already */
  }
  unix_l.lock_fd = lock_socket_path(path);
  if (unix_l.lock_fd < 0) {
    return -1;
  }
  if (lstat(path, &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode)) {
      return fail(SRV_EXIT_LISTEN,
                  "listen on unix:%s: it exists and is not a socket", path);
    }
    unlink(path); /* a dead server's: we hold the lock */
  }
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, n);
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return fail(errno_status(errno, SRV_EXIT_LISTEN),
                "listen on unix:%s: socket: %s", path, strerror(errno));
  }
  old = umask(0177); /* the socket is born 0600 */
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    int err = errno;

    umask(old);
    close(fd);
    return fail(errno_status(err, SRV_EXIT_LISTEN), "listen on unix:%s: %s",
                path, strerror(err));
  }
  umask(old);
  if (listen(fd, 512) != 0 || lstat(path, &sb) != 0) {
    int err = errno;

    close(fd);
    unlink(path);
    return fail(errno_status(err, SRV_EXIT_LISTEN), "listen on unix:%s: %s",
                path, strerror(err));
  }
  memcpy(unix_l.path, path, n + 1);
  unix_l.dev = sb.st_dev;
  unix_l.ino = sb.st_ino;
  return fd;
}

/* Removes our socket, unless another server replaced it meanwhile. */
static void unlisten_unix(void) {
  struct stat sb;

  if (unix_l.path[0] != '\0' && lstat(unix_l.path, &sb) == 0 &&
      sb.st_dev == unix_l.dev && sb.st_ino == unix_l.ino) {
    unlink(unix_l.path);
  }
  unix_l.path[0] = '\0';
  if (unix_l.lock_fd >= 0) {
    close(unix_l.lock_fd);
    unix_l.lock_fd = -1;
  }
}

/* The default listener: the private runtime directory's socket, the one the
   CLI looks for. */
static int default_listen(srv_config *cfg, char *buf, size_t cap) {
  char sock[128];
  conch_status st;
  int rv;

  conch_status_init(&st);
  rv = conch_local_socket(sock, sizeof(sock), &st);
  if (rv != 0) {
    fail(st.code == CONCH_CODE_RESOURCE_EXHAUSTED ? SRV_EXIT_FAILED
                                                  : SRV_EXIT_LISTEN,
         "%s", st.code != CONCH_CODE_OK ? conch_status_message(&st)
                                        : conch_strerror(rv));
    conch_status_clear(&st);
    return -1;
  }
  snprintf(buf, cap, "unix:%s", sock);
  cfg->listen = buf;
  return 0;
}

static int listen_on(srv_config *cfg, int *port_out) {
  if (strncmp(cfg->listen, "unix:", 5) == 0) {
    *port_out = 0;
    return listen_unix(cfg->listen + 5);
  }
  return listen_tcp(cfg, cfg->listen, port_out);
}

/* ---- Signals, children, stdin ----------------------------------------------
 */

static void on_signal(srv_watch *w, uint32_t events) {
  srv_server *srv = SRV_CONTAINER(w, srv_server, sig_w);
  struct signalfd_siginfo si;

  (void)events;
  while (read(w->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    if (si.ssi_signo != SIGCHLD) {
      srv_server_stop(srv);
    }
  }
  srv_reap_children(srv);
}

/* A pipe or socket on stdin that closes means our parent is gone. */
static void on_stdin(srv_watch *w, uint32_t events) {
  srv_server *srv = SRV_CONTAINER(w, srv_server, stdin_w);
  char buf[512];
  ssize_t n;

  (void)events;
  n = read(w->fd, buf, sizeof(buf));
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    srv_server_stop(srv);
  }
}

static int watch_stdin(srv_server *srv) {
  struct stat sb;

  if (fstat(STDIN_FILENO, &sb) != 0 ||
      (!S_ISFIFO(sb.st_mode) && !S_ISSOCK(sb.st_mode))) {
    return 0;
  }
  srv_watch_init(&srv->stdin_w, STDIN_FILENO, on_stdin);
  return srv_watch_set(&srv->loop, &srv->stdin_w, EPOLLIN);
}

static int setup_signals(srv_server *srv) {
  sigset_t set;
  int fd;

  signal(SIGPIPE, SIG_IGN);
  /* Inherited "ignore" would make the kernel reap our children for us,
     and their exit statuses would be lost. */
  signal(SIGCHLD, SIG_DFL);
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) {
    return -1;
  }
  fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    return -1;
  }
  srv_watch_init(&srv->sig_w, fd, on_signal);
  /* Orphaned grandchildren come to us, so that we reap them and can kill
     them at shutdown. */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  return srv_watch_set(&srv->loop, &srv->sig_w, EPOLLIN);
}

/* Children that left their process group (setsid) are still ours, as the
   subreaper: find them by their parent pid. */
static void kill_children(int sig) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t self = getpid();

  if (d == NULL) {
    return;
  }
  while ((e = readdir(d)) != NULL) {
    char path[300];
    char buf[512];
    FILE *f;
    char *rp;
    long ppid;

    if (e->d_name[0] < '0' || e->d_name[0] > '9') {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    rp = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
    fclose(f);
    /* "pid (comm) state ppid ..."; comm may hold anything but ')'. */
    if (rp != NULL && sscanf(rp + 1, " %*c %ld", &ppid) == 1 &&
        ppid == (long)self) {
      kill((pid_t)strtol(e->d_name, NULL, 10), sig);
    }
  }
  closedir(d);
}

/* ---- Shutdown ---------------------------------------------------------------
 */

static void on_stop_timer(srv_timer *t) {
  srv_server *srv = SRV_CONTAINER(t, srv_server, stop_t);

  if (!srv->hard_killed) {
    srv->hard_killed = 1;
    srv_proc_signal_all(srv, SIGKILL);
    srv_reap_signal_all(srv, SIGKILL);
    kill_children(SIGKILL);
    srv_timer_arm(&srv->loop, &srv->stop_t, srv_now_ms() + STOP_LINGER_MS);
    return;
  }
  srv->stopping = 2; /* out of patience with the clients */
}

void srv_server_stop(srv_server *srv) {
  if (srv->stopping) {
    return;
  }
  srv->stopping = 1;
  /* The listener closes, every connection gets GOAWAY. */
  (void)conch_server_shutdown(srv->core);
  unlisten_unix(); /* the path is free for the next server at once */
  srv_watch_set(&srv->loop, &srv->stdin_w, 0);
  srv_proc_signal_all(srv, SIGTERM);
  srv_reap_signal_all(srv, SIGTERM);
  kill_children(SIGTERM);
  srv_timer_arm(&srv->loop, &srv->stop_t,
                srv_now_ms() + srv->cfg.kill_grace_ms);
}

static int stop_done(const srv_server *srv) {
  if (srv->stopping == 2) {
    return 1;
  }
  return srv->stopping == 1 && srv_proc_running(srv) == 0 &&
         conch_server_idle(srv->core);
}

/* Frees what the last loop turn let go of. */
static void collect(srv_server *srv) {
  srv_core_collect(srv);
  while (!srv_list_empty(&srv->dead_procs)) {
    srv_proc_free(SRV_CONTAINER(srv->dead_procs.next, srv_proc, link));
  }
}

/* Nothing may stay behind: kill what is left and reap it all. */
static void final_reap(srv_server *srv) {
  int64_t until = srv_now_ms() + 5000;

  srv_proc_signal_all(srv, SIGKILL);
  srv_reap_signal_all(srv, SIGKILL);
  kill_children(SIGKILL);
  while (srv_now_ms() < until) {
    int ws;
    pid_t pid = waitpid(-1, &ws, WNOHANG);

    if (pid < 0) {
      return; /* ECHILD: no child left */
    }
    if (pid > 0) {
      srv_reap_forget(srv, pid); /* the keeper may forget its group */
    }
    if (pid == 0) {
      struct timespec ts = {0, 10 * 1000 * 1000};

      kill_children(SIGKILL);
      nanosleep(&ts, NULL);
    }
  }
}

/* Every part of |srv| in a state that server_clear() takes, so that a
   failure at any step of the start needs no other cleanup. */
static void server_preinit(srv_server *srv) {
  memset(srv, 0, sizeof(*srv));
  srv->mem = conch_mem_default();
  srv->euid = geteuid();
  srv->loop.epfd = -1; /* and an empty heap */
  srv_list_init(&srv->procs);
  srv_list_init(&srv->dead_procs);
  srv_timer_init(&srv->stop_t, on_stop_timer);
  srv_watch_init(&srv->sig_w, -1, on_signal);
  srv_watch_init(&srv->stdin_w, -1, on_stdin);
  srv->keeper_fd = -1;
  srv_core_init(srv);
}

static void server_clear(srv_server *srv) {
  srv_core_free(srv);
  while (!srv_list_empty(&srv->procs)) {
    srv_proc *p = SRV_CONTAINER(srv->procs.next, srv_proc, link);

    srv_list_remove(&p->link);
    srv_list_push(&srv->dead_procs, &p->link);
  }
  collect(srv);
  if (srv->sig_w.fd >= 0) {
    close(srv->sig_w.fd);
    srv->sig_w.fd = -1;
  }
  unlisten_unix();
  srv_reap_free(srv);
  if (srv->keeper_on) {
    close(srv->keeper_fd); /* EOF: the keeper exits (no group left) */
    srv->keeper_on = 0;
  }
  srv_loop_clear(&srv->loop);
}

/* Returns 0, or -1 with fail_status set. */
static int server_init(srv_server *srv, int *port) {
  int fd;
  int rv;

  if (srv_loop_init(&srv->loop) != 0) {
    return fail(SRV_EXIT_FAILED, "epoll: %s", strerror(errno));
  }
  fd = listen_on(&srv->cfg, port);
  if (fd < 0) {
    return -1;
  }
  rv = srv_core_start(srv, fd);
  if (rv != 0) {
    if (fail_status == 0) {
      fail_status = rv; /* said by srv_core_start() */
    }
    return -1;
  }
  /* Children die with us even on SIGKILL (serve_keeper.c).  Before we
     become a subreaper: the keeper must not be reparented to us.  Without
     it that promise would not hold: no start. */
  if (srv_keeper_start(srv) != 0) {
    return fail(SRV_EXIT_FAILED, "cannot start the keeper process: %s",
                strerror(errno));
  }
  if (setup_signals(srv) != 0 || watch_stdin(srv) != 0) {
    return fail(SRV_EXIT_FAILED, "signals and stdin: %s", strerror(errno));
  }
  return 0;
}

/* The LISTENING line: the one way a parent learns where we are, so not
   writing it whole is a failure, not a silent server. */
static int announce(int port) {
  int n;

  if (unix_l.path[0] != '\0') {
    n = printf("LISTENING unix:%s\n", unix_l.path);
  } else {
    n = printf("LISTENING %d\n", port);
  }
  if (n < 0 || fflush(stdout) != 0 || ferror(stdout)) {
    return fail(SRV_EXIT_FAILED, "writing the LISTENING line to stdout: %s",
                strerror(errno));
  }
  return 0;
}

static int run(srv_server *srv) {
  for (;;) {
    collect(srv);
    if (stop_done(srv)) {
      return 0;
    }
    if (srv_loop_poll(&srv->loop, LOOP_MAX_WAIT_MS) != 0) {
      return fail(SRV_EXIT_FAILED, "epoll_wait: %s", strerror(errno));
    }
  }
}

static void free_token(void) {
  if (lopts.token != NULL) {
    memset(lopts.token, 0, strlen(lopts.token));
    free(lopts.token);
  }
  memset(&lopts, 0, sizeof(lopts));
}

/* A closed stdin or stderr would hand its number to the first socket we
   open, and a message or the LISTENING line would go into it: /dev/null
   takes their place.  A closed stdout is refused (the LISTENING line would
   be lost). */
static int check_std_fds(void) {
  int fd;

  for (fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) {
      continue;
    }
    if (fd == STDOUT_FILENO) {
      return fail(SRV_EXIT_FAILED,
                  "stdout is closed: the LISTENING line cannot be written");
    }
    if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) {
      return fail(SRV_EXIT_FAILED, "/dev/null: %s", strerror(errno));
    }
  }
  return 0;
}

int conch_cmd_serve(int argc, char **argv) {
  srv_server srv;
  char listen_buf[256];
  int port = 0;
  int rv;

  fail_status = 0;
  server_preinit(&srv);
  srv_config_defaults(&srv.cfg);
  rv = check_std_fds();
  if (rv == 0) {
    rv = parse_args(argc, argv, &srv.cfg);
  }
  if (rv > 0) {
    free_token();
    if (fputs(usage_text, stdout) < 0 || fflush(stdout) != 0) {
      fail(SRV_EXIT_FAILED, "writing the help to stdout: %s", strerror(errno));
      return SRV_EXIT_FAILED;
    }
    return SRV_EXIT_OK;
  }
  if (rv == 0) {
    rv = resolve_token(&srv.cfg);
  }
  if (rv == 0 && srv.cfg.listen == NULL) {
    rv = default_listen(&srv.cfg, listen_buf, sizeof(listen_buf));
  }
  if (rv == 0) {
    rv = server_init(&srv, &port);
  }
  if (rv == 0) {
    rv = announce(port);
  }
  if (rv == 0) {
    /* Serving: processes may run from now on, and all must end. */
    rv = run(&srv);
    final_reap(&srv);
  }
  server_clear(&srv);
  free_token();
  if (rv != 0) {
    return fail_status != 0 ? fail_status : SRV_EXIT_FAILED;
  }
  return SRV_EXIT_OK;
}
