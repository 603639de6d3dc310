/* The conch CLI's process commands: run, start, ps, kill, attach, pty, on
   the commands/Process API.  With no URL they talk to the local server on
   the private Unix socket of the user's runtime directory, starting
   `conch serve` in the background when none answers. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <conch/local.h>
#include <conch/process.h>

#include "cli.h"
#include "serve.h"

/* ---- Small helpers ------------------------------------------------------ */

static volatile sig_atomic_t got_signal;
static volatile sig_atomic_t got_winch;

static void on_signal(int sig) { got_signal = sig; }
static void on_winch(int sig) {
  (void)sig;
  got_winch = 1;
}

/* Every signal a terminal user sends to end a program: Ctrl-C (INT),
   Ctrl-\ (QUIT), kill (TERM) and a closed terminal (HUP).  Each ends a
   streamed process as its handle's close does; the CLI then exits 128+N. */
static void catch_signals(void) {
  static const int ending[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
  struct sigaction sa;
  size_t i;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (i = 0; i < sizeof(ending) / sizeof(ending[0]); i++) {
    sigaction(ending[i], &sa, NULL);
  }
  sa.sa_handler = on_winch;
  sigaction(SIGWINCH, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
}

/* The options of this run, for the hints of errors. */
static const cli_globals *opts_used;

/* Reports a failed RPC as "conch: code: message" (or its JSON), with a
   hint where the cause is likely ours: gRPC or gRPC-Web against a
   Connect-only server (it answers them 415), HTTP/2 against an HTTP/1.1
   one.  |hint| (or NULL) stands otherwise.  Returns the exit code. */
static int status_fail(const conch_status *st, const char *hint, uint32_t pid) {
  const char *msg = conch_status_message(st);
  char h[200];
  if (opts_used != NULL && opts_used->protocol != CONCH_PROTOCOL_CONNECT &&
      strstr(msg, "415") != NULL) {
    snprintf(h, sizeof(h),
             "the server does not take --protocol %s (it speaks connect only)",
             opts_used->protocol == CONCH_PROTOCOL_GRPC ? "grpc" : "grpc-web");
    hint = h;
  }
  if (opts_used != NULL && opts_used->http_version == CONCH_HTTP_2 &&
      strstr(msg, "SETTINGS frame") != NULL) {
    hint = "the server does not speak HTTP/2 without TLS (h2c): leave out "
           "--http2";
  }
  return cli_fail_status(st, hint, pid);
}

/* A failed call: its status, or what the library returned. */
static int rpc_fail(const char *what, int rv, const conch_status *st) {
  if (rv == CONCH_ERR_RPC && st != NULL) {
    return status_fail(st, NULL, 0);
  }
  if (rv == CONCH_ERR_CAPABILITY) {
    return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_UNIMPLEMENTED, NULL, NULL, 0,
                          "%s: the sandbox does not support it", what);
  }
  if (rv == CONCH_ERR_NOMEM) {
    return cli_fail_local(CLI_EXIT_EXHAUSTED, CONCH_CODE_RESOURCE_EXHAUSTED,
                          NULL, NULL, 0, "%s: %s", what, conch_strerror(rv));
  }
  return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_INTERNAL, NULL, NULL, 0,
                        "%s: %s", what, conch_strerror(rv));
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes all of |p| to |fd|.  Returns 0 or the errno of the failed write
   (EPIPE: the reader went away; ENOSPC: a full disk or /dev/full). */
static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno != 0 ? errno : EIO;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* 128 + N for a status "signal: <name>[ (core dumped)]", as a shell
   reports a child killed by signal N. */
static int signal_exit(const char *status) {
  static const char core[] = " (core dumped)";
  size_t len;
  int i;
  if (status == NULL || strncmp(status, "signal: ", 8) != 0) {
    return 1;
  }
  status += 8;
  len = strlen(status);
  if (len > sizeof(core) - 1 &&
      strcmp(status + len - (sizeof(core) - 1), core) == 0) {
    len -= sizeof(core) - 1;
  }
  for (i = 1; srv_signal_name(i) != NULL; i++) {
    const char *name = srv_signal_name(i);
    if (strlen(name) == len && strncmp(name, status, len) == 0) {
      return 128 + i;
    }
  }
  if (len > 7 && strncmp(status, "signal ", 7) == 0) {
    char *end;
    long n = strtol(status + 7, &end, 10);
    if (end == status + len && n > 0 && n < 128) {
      return 128 + (int)n;
    }
  }
  return 128 + SIGKILL; /* unknown words: "killed" is what envd reports most */
}

static int exit_code_of(const conch_exec_result *r) {
  if (r->exit_code >= 0) {
    return r->exit_code > 255 ? 255 : r->exit_code;
  }
  return signal_exit(r->status);
}

/* ---- The local server --------------------------------------------------- */

/* The CLI and its background server meet on a Unix socket in the private
   runtime directory (conch/local.h: the library's discovery, shared with
   sandboxes whose url is NULL): nobody else can create or replace it, the
   server serves only our uid and root (SO_PEERCRED), and the runtime checks
   that the server is ours or root's (conch_client_opts_set_unix_socket). */

/* The socket's path, or -1 after saying why. */
static int local_socket(char *sock, size_t cap) {
  conch_status st;
  int rv;

  conch_status_init(&st);
  rv = conch_local_socket(sock, cap, &st);
  if (rv != 0) {
    fprintf(stderr, "conch: %s\n",
            st.code != CONCH_CODE_OK ? conch_status_message(&st)
                                     : conch_strerror(rv));
  }
  conch_status_clear(&st);
  return rv != 0 ? -1 : 0;
}

/* A connected socket to the local server, or -1. */
static int local_connect(const char *sock) {
  struct sockaddr_un a;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  if (fd < 0) {
    return -1;
  }
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, sock, strlen(sock));
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* `conch serve --stop`: the pid comes from the socket itself (SO_PEERCRED of
   the listener), pinned with a pidfd while the connection shows the server
   alive, so no stale file can make us signal another process. */
int conch_cli_serve_stop(void) {
  char sock[128];
  struct ucred cred;
  socklen_t len = sizeof(cred);
  struct pollfd pf;
  int fd, pidfd, rv = 1;
  int64_t t0;

  if (local_socket(sock, sizeof(sock)) != 0) {
    return 1;
  }
  fd = local_connect(sock);
  if (fd < 0) {
    fprintf(stderr, "conch: no background server (nothing answers on %s)\n",
            sock);
    return 1;
  }
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      cred.pid <= 1 || (cred.uid != geteuid() && cred.uid != 0)) {
    fprintf(stderr, "conch: %s: not a server of ours\n", sock);
    goto out;
  }
  pidfd = (int)syscall(SYS_pidfd_open, (pid_t)cred.pid, 0);
  pf.fd = fd;
  pf.events = POLLRDHUP; /* not POLLIN: the server may greet us */
  pf.revents = 0;
  if (pidfd < 0 || poll(&pf, 1, 0) < 0 ||
      (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    /* No pidfd, or the connection already ended: the server may be gone
       and its pid reused; signal nothing. */
    fprintf(stderr, "conch: the background server (pid %ld) is going away\n",
            (long)cred.pid);
    if (pidfd >= 0) {
      close(pidfd);
    }
    goto out;
  }
  if (syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, NULL, 0) != 0) {
    fprintf(stderr, "conch: cannot stop pid %ld: %s\n", (long)cred.pid,
            strerror(errno));
    close(pidfd);
    goto out;
  }
  /* The pidfd turns readable when the process has exited. */
  t0 = now_ms();
  pf.fd = pidfd;
  pf.events = POLLIN;
  while (now_ms() - t0 < 20000 && poll(&pf, 1, 100) == 0) {
  }
  close(pidfd);
  rv = 0;
out:
  close(fd);
  return rv;
}

/* ---- Sandbox ------------------------------------------------------------ */

/* CONCH_KEEPALIVE: the liveness interval in seconds, or "off". */
static int keepalive_from_env(long *ms) {
  const char *v = getenv("CONCH_KEEPALIVE");
  char *end;
  long s;
  if (v == NULL || v[0] == '\0') {
    return 0;
  }
  if (strcmp(v, "off") == 0) {
    *ms = -1;
    return 0;
  }
  errno = 0;
  s = strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || s < 1 || s > 86400) {
    cli_usage_fail(
        NULL, "CONCH_KEEPALIVE must be seconds (1-86400) or off, not '%s'", v);
    return -1;
  }
  *ms = s * 1000;
  return 0;
}

/* CONCH_TREE: the tree leader (conch/process.h, "Process trees"). */
static int tree_from_env(int *tree) {
  const char *v = getenv("CONCH_TREE");
  if (v == NULL || v[0] == '\0' || strcmp(v, "auto") == 0) {
    *tree = CONCH_TREE_AUTO;
  } else if (strcmp(v, "off") == 0) {
    *tree = CONCH_TREE_OFF;
  } else if (strcmp(v, "on") == 0) {
    *tree = CONCH_TREE_ON;
  } else {
    cli_usage_fail(NULL, "CONCH_TREE must be off, on or auto, not '%s'", v);
    return -1;
  }
  return 0;
}

/* A URL the client refused: what it likely meant. */
static int bad_url(const char *url, int rv) {
  char hint[300];
  if (rv == CONCH_ERR_URL && strstr(url, "://") == NULL &&
      strncmp(url, "unix:", 5) != 0) {
    snprintf(hint, sizeof(hint),
             "conch: a URL needs its scheme: --url http://%s (or https://, "
             "or unix:PATH)",
             url);
    return cli_fail_local(CLI_EXIT_USAGE, CONCH_CODE_INVALID_ARGUMENT, NULL,
                          hint, 0, "--url %s: %s", url, conch_strerror(rv));
  }
  return cli_fail_local(CLI_EXIT_USAGE, CONCH_CODE_INVALID_ARGUMENT, NULL, NULL,
                        0, "%s: %s", url, conch_strerror(rv));
}

/* Returns 0 with |*sb| set, or the exit code after a message. */
static int open_sandbox(cli_globals *g, conch_sandbox **sb) {
  conch_sandbox_opts so = CONCH_SANDBOX_OPTS_INIT;
  conch_client_opts *co = NULL;
  conch_status st;
  int rv;

  if (keepalive_from_env(&so.keepalive_ms) != 0 ||
      tree_from_env(&so.tree) != 0) {
    return CLI_EXIT_USAGE;
  }
  if (g->cacert != NULL && access(g->cacert, R_OK) != 0) {
    return cli_usage_fail(NULL, "--cacert %s: %s", g->cacert,
                          errno == ENOENT ? "no such file" : strerror(errno));
  }
  if (conch_client_opts_new(&co) != 0) {
    return rpc_fail("client options", CONCH_ERR_NOMEM, NULL);
  }
  /* No URL: the library's local server, started here (this very
     executable) when nothing answers. */
  so.url = g->url;
  so.autostart = 1;
  so.serve_exe = "/proc/self/exe";
  so.access_token = g->token;
  so.user = g->user;
  if (g->timeout_ms != 0) {
    so.timeout_ms = g->timeout_ms;
  }
  if ((g->cacert != NULL &&
       conch_client_opts_set_ca_file(co, g->cacert) != 0) ||
      conch_client_opts_set_http_version(
          co, (conch_http_version)g->http_version) != 0 ||
      conch_client_opts_set_protocol(co, (conch_protocol)g->protocol) != 0 ||
      conch_client_opts_set_codec(co, (conch_codec)g->codec) != 0) {
    conch_client_opts_free(co);
    return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_INTERNAL, NULL, NULL, 0,
                          "cannot set the client's options");
  }
  so.client_opts = co;
  opts_used = g;
  conch_status_init(&st);
  rv = conch_sandbox_open(sb, &so, &st);
  conch_client_opts_free(co);
  if (rv == CONCH_ERR_TLS && g->cacert != NULL) {
    return cli_usage_fail(NULL, "--cacert %s: %s", g->cacert,
                          conch_strerror(rv));
  }
  if (rv == CONCH_ERR_URL || rv == CONCH_ERR_INVALID) {
    return bad_url(so.url, rv);
  }
  if (rv != 0) {
    if (st.code != CONCH_CODE_OK) {
      rv = status_fail(&st, NULL, 0);
    } else {
      rv = rpc_fail(so.url != NULL ? so.url : "local", rv, NULL);
    }
    conch_status_clear(&st);
    return rv;
  }
  conch_status_clear(&st);
  return 0;
}

int cli_open_sandbox(cli_globals *g, conch_sandbox **sb) {
  return open_sandbox(g, sb);
}

int cli_rpc_fail(const char *what, int rv, const conch_status *st) {
  return rpc_fail(what, rv, st);
}

/* The PID|@TAG operand of |cmd|: 0, or a usage error that names it. */
static int parse_selector(const char *cmd, int argc, char **argv, int i,
                          conch_selector *sel) {
  const char *arg = i < argc ? argv[i] : NULL;
  char why[200];
  char *end;
  unsigned long v;
  sel->pid = 0;
  sel->tag = NULL;
  if (arg == NULL) {
    return cli_usage_error(cmd, "which process? (a pid, or @TAG)");
  }
  if (argc > i + 1) {
    snprintf(why, sizeof(why), "one process at a time, not '%s' too",
             argv[i + 1]);
    return cli_usage_error(cmd, why);
  }
  if (arg[0] == '@') {
    if (arg[1] == '\0') {
      return cli_usage_error(cmd, "'@' names no tag (@TAG)");
    }
    sel->tag = arg + 1;
    return 0;
  }
  errno = 0;
  v = strtoul(arg, &end, 10);
  if (errno != 0 || *end != '\0' || end == arg || arg[0] == '-' ||
      arg[0] == '+' || v == 0 || v > 0xffffffffUL) {
    snprintf(why, sizeof(why), "'%.100s' is not a pid (1-4294967295) or @TAG",
             arg);
    return cli_usage_error(cmd, why);
  }
  sel->pid = (uint32_t)v;
  return 0;
}

/* ---- Process options ---------------------------------------------------- */

typedef struct proc_args {
  conch_proc_opts o;
  conch_env env[64];
  int use_stdin;
  int limit_output; /* run --max-output */
  unsigned long long max_output;
} proc_args;

/* BYTES of --max-output: a number with an optional K, M or G (KiB, MiB,
   GiB).  Returns 0, or -1 after a message. */
static int parse_bytes(const char *cmd, const char *name, const char *v,
                       unsigned long long *out) {
  char *end;
  unsigned long long n, mul = 1;
  errno = 0;
  n = strtoull(v, &end, 10);
  if (end != v && (*end == 'K' || *end == 'k')) {
    mul = 1ULL << 10;
  } else if (end != v && (*end == 'M' || *end == 'm')) {
    mul = 1ULL << 20;
  } else if (end != v && (*end == 'G' || *end == 'g')) {
    mul = 1ULL << 30;
  }
  if (mul > 1) {
    end++;
    if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0) {
      end += strlen(end);
    }
  }
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-' ||
      n > ~0ULL / mul) {
    cli_usage_fail(cmd,
                   "%s wants a size in bytes (a number, K, M or G), not "
                   "'%s'",
                   name, v);
    return -1;
  }
  *out = n * mul;
  return 0;
}

static int parse_proc(cli_globals *g, int argc, char **argv, proc_args *pa,
                      const char *cmd) {
  conch_proc_opts d = CONCH_PROC_OPTS_INIT;
  const cli_opt *opts = strcmp(cmd, "run") == 0 ? cli_run_opts : cli_start_opts;
  const char *v;
  int i = 1, k;

  pa->o = d;
  pa->use_stdin = 0;
  pa->limit_output = 0;
  pa->max_output = 0;
  while ((k = cli_next(cmd, opts, g, argc, argv, &i, &v)) >= 0) {
    const char *name = opts[k].name;
    if (strcmp(name, "--cwd") == 0) {
      pa->o.cwd = v;
    } else if (strcmp(name, "--tag") == 0) {
      pa->o.tag = v;
    } else if (strcmp(name, "--env") == 0) {
      char *kv = argv[i - 1] + (v - argv[i - 1]); /* ours to cut */
      char *eq = strchr(kv, '=');
      if (eq == NULL || eq == kv || pa->o.nenv == 64) {
        cli_usage_fail(cmd, "--env needs NAME=VALUE, got '%s'", kv);
        return -1;
      }
      *eq = '\0';
      pa->env[pa->o.nenv].name = kv;
      pa->env[pa->o.nenv].value = eq + 1;
      pa->o.nenv++;
    } else if (strcmp(name, "--stdin") == 0) {
      pa->use_stdin = 1;
    } else if (strcmp(name, "--max-output") == 0) {
      if (parse_bytes(cmd, name, v, &pa->max_output) != 0) {
        return -1;
      }
      pa->limit_output = 1;
    }
  }
  if (k == CLI_ERROR) {
    return -1;
  }
  if (i >= argc) {
    cli_usage_error(cmd, "no command to run");
    return -1;
  }
  pa->o.env = pa->env;
  pa->o.cmd = argv[i];
  pa->o.args = (const char *const *)argv + i + 1;
  pa->o.nargs = (size_t)(argc - i - 1);
  pa->o.stdin_enabled = pa->use_stdin;
  return 0;
}

/* ---- Streaming a process to this terminal ------------------------------- */

typedef struct session {
  conch_sandbox *sb;
  conch_process *p;
  conch_stdin *in; /* forwarding our stdin */
  int forward;     /* forward stdin at all */
  int pty;         /* stdin goes to a terminal, raw */
  int started;
  int ended;
  int out_broken; /* a write to our stdout failed: its errno */
  int err_broken; /* ... to our stderr */
  int exit_code;
  conch_status st;
  long lifetime_ms;          /* the process's, when we started it; else 0 */
  const char *lifetime_dflt; /* "run's default" when it is one; else NULL */
  /* run --max-output: what is shown of each stream. */
  int limit_output;
  unsigned long long max_output;
  unsigned long long shown[2], dropped[2];
} session;

static void s_start(conch_process *p, uint32_t pid, void *ud) {
  session *s = ud;
  (void)p;
  (void)pid;
  s->started = 1;
}

static void s_chunk(conch_process *p, const conch_chunk *c, void *ud) {
  session *s = ud;
  int is_err = c->stream == CONCH_CHUNK_STDERR;
  size_t n = c->len;
  int err;
  (void)p;
  if (s->out_broken != 0 || s->err_broken != 0) {
    return; /* the loop stops at its next turn */
  }
  if (s->limit_output) {
    unsigned long long room = s->max_output - s->shown[is_err];
    if (n > room) {
      s->dropped[is_err] += n - room;
      n = (size_t)room;
    }
    s->shown[is_err] += n;
  }
  err = write_all(is_err ? STDERR_FILENO : STDOUT_FILENO, c->data, n);
  if (err != 0) {
    *(is_err ? &s->err_broken : &s->out_broken) = err;
  } else if (is_err) {
    cli_stderr_passed(c->data, n);
  }
}

static void s_end(conch_process *p, const conch_exec_result *r,
                  const conch_status *st, void *ud) {
  session *s = ud;
  (void)p;
  s->ended = 1;
  conch_status_copy(&s->st, st, NULL);
  s->exit_code = st->code == CONCH_CODE_OK ? exit_code_of(r) : 0;
}

static void resize_to_terminal(session *s) {
  struct winsize ws;
  conch_status st;
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) {
    return;
  }
  conch_status_init(&st);
  conch_process_resize(s->p, ws.ws_col, ws.ws_row, &st);
  conch_status_clear(&st);
}

/* Runs the loop until the process ends or we are told to stop.  Returns the
   exit status for the CLI. */
static int pump(session *s) {
  conch_client *c = conch_sandbox_native(s->sb);
  int stdin_open = s->forward;

  while (!s->ended) {
    struct pollfd fds[16];
    size_t n = conch_client_pollfds(c, fds, 15);
    size_t in_slot;
    long t = conch_client_timeout_ms(c);
    int rv;

    if (n > 15) {
      n = 15; /* more connections than slots: the rest wait a turn */
    }
    in_slot = n;
    if (got_signal || s->out_broken != 0 || s->err_broken != 0) {
      break;
    }
    if (got_winch && s->pty && s->started) {
      got_winch = 0;
      resize_to_terminal(s);
    }
    if (stdin_open && s->started && s->in == NULL) {
      conch_selector sel = {conch_process_pid(s->p), NULL};
      conch_status st;
      conch_status_init(&st);
      rv = s->pty ? conch_pty_input_open(s->sb, &sel, &s->in, &st)
                  : conch_stdin_open(s->sb, &sel, &s->in, &st);
      conch_status_clear(&st);
      if (rv != 0) {
        stdin_open = 0;
      }
      continue; /* the open ran the loop */
    }
    if (stdin_open && s->in != NULL) {
      fds[n].fd = STDIN_FILENO;
      fds[n].events = POLLIN;
      fds[n].revents = 0;
      n++;
    }
    rv = poll(fds, (nfds_t)n, t < 0 || t > 1000 ? 1000 : (int)t);
    if (rv < 0 && errno != EINTR) {
      return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_INTERNAL, NULL, NULL,
                            conch_process_pid(s->p), "poll: %s",
                            strerror(errno));
    }
    if (rv > 0 && in_slot < n && fds[in_slot].revents != 0) {
      uint8_t buf[32768];
      ssize_t r = read(STDIN_FILENO, buf, sizeof(buf));
      if (r > 0) {
        if (conch_stdin_write(s->in, buf, (size_t)r) != 0) {
          stdin_open = 0;
        }
      } else if (r < 0 && errno == EIO) {
        got_signal = SIGHUP; /* our terminal is gone: as its hangup */
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        conch_status st;
        conch_status_init(&st);
        stdin_open = 0;
        conch_stdin_close(s->in, &st);
        s->in = NULL;
        if (!s->pty) {
          conch_process_close_stdin(s->p, &st);
        }
        conch_status_clear(&st);
      }
    }
    conch_client_process(c, fds, rv > 0 ? in_slot : 0);
  }
  if (s->in != NULL) {
    conch_status st;
    conch_status_init(&st);
    conch_stdin_close(s->in, &st);
    conch_status_clear(&st);
    s->in = NULL;
  }
  if (s->out_broken != 0 || s->err_broken != 0) {
    /* The output has nowhere to go: the process ends with its handle, as
       when the user interrupts it. */
    return cli_fail_output(s->out_broken != 0 ? "stdout" : "stderr",
                           s->out_broken != 0 ? s->out_broken : s->err_broken,
                           conch_process_pid(s->p),
                           s->ended ? NULL : "the process is ended");
  }
  if (!s->ended) {
    /* Interrupted: a streamed process ends with its handle. */
    return 128 + got_signal;
  }
  if (s->st.code != CONCH_CODE_OK) {
    char hint[300];
    const char *h = NULL;
    if (s->st.code == CONCH_CODE_DEADLINE_EXCEEDED && s->lifetime_ms > 0) {
      snprintf(hint, sizeof(hint),
               "the process reached its lifetime of %ld s%s%s%s and was "
               "killed; --timeout SEC (or CONCH_TIMEOUT) sets another, 0 none",
               s->lifetime_ms / 1000, s->lifetime_dflt != NULL ? " (" : "",
               s->lifetime_dflt != NULL ? s->lifetime_dflt : "",
               s->lifetime_dflt != NULL ? ")" : "");
      h = hint;
    } else if (s->st.code == CONCH_CODE_DEADLINE_EXCEEDED) {
      h = "the process reached the lifetime it was started with and was "
          "killed";
    }
    return status_fail(&s->st, h, conch_process_pid(s->p));
  }
  for (int k = 0; k < 2; k++) {
    if (s->dropped[k] > 0) {
      cli_note("%s cut at --max-output %llu bytes: %llu more were read and "
               "not shown",
               k == 0 ? "stdout" : "stderr", s->max_output, s->dropped[k]);
    }
  }
  return s->exit_code;
}

static const conch_process_handler session_handler = {s_start, s_chunk, s_end};

static int finish_session(session *s, int code) {
  int rv = conch_process_close(s->p);
  (void)rv;
  conch_status_clear(&s->st);
  conch_sandbox_free(s->sb);
  return code;
}

int conch_cli_run(cli_globals *g, int argc, char **argv) {
  proc_args pa;
  session s;
  int rv;

  if (parse_proc(g, argc, argv, &pa, "run") != 0) {
    return CLI_EXIT_USAGE;
  }
  memset(&s, 0, sizeof(s));
  conch_status_init(&s.st);
  rv = open_sandbox(g, &s.sb);
  if (rv != 0) {
    return rv;
  }
  catch_signals();
  s.forward = pa.use_stdin;
  s.limit_output = pa.limit_output;
  s.max_output = pa.max_output;
  s.lifetime_ms = g->timeout_ms == 0 ? 60000 : g->timeout_ms;
  s.lifetime_dflt = g->timeout_ms == 0 ? "run's default" : NULL;
  rv = conch_stream_async(s.sb, &pa.o, &session_handler, &s, &s.p);
  if (rv != 0) {
    rv = rpc_fail("run", rv, NULL);
    conch_sandbox_free(s.sb);
    return rv;
  }
  return finish_session(&s, pump(&s));
}

int conch_cli_attach(cli_globals *g, int argc, char **argv) {
  conch_selector sel;
  session s;
  int rv;

  const char *v;
  int i = 1, k;

  while ((k = cli_next("attach", cli_none_opts, g, argc, argv, &i, &v)) >= 0) {
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  if (parse_selector("attach", argc, argv, i, &sel) != 0) {
    return CLI_EXIT_USAGE;
  }
  memset(&s, 0, sizeof(s));
  conch_status_init(&s.st);
  rv = open_sandbox(g, &s.sb);
  if (rv != 0) {
    return rv;
  }
  catch_signals();
  /* Detached: leaving (Ctrl-C) lets the process run on, as the SDKs'
     connect does; `conch kill` ends it. */
  rv = conch_connect_async(s.sb, &sel, CONCH_CONNECT_DETACHED, &session_handler,
                           &s, &s.p);
  if (rv != 0) {
    rv = rpc_fail("attach", rv, NULL);
    conch_sandbox_free(s.sb);
    return rv;
  }
  return finish_session(&s, pump(&s));
}

/* pty's lifetime unless --timeout says otherwise: an interactive session
   outlives run's 60 s, but one whose terminal went away without a word
   (the CLI killed, the host gone) must not run on for good. */
#define PTY_LIFETIME_MS 3600000L

int conch_cli_pty(cli_globals *g, int argc, char **argv) {
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  struct termios saved, raw;
  struct winsize ws;
  session s;
  int rv, code;

  const char *v;
  int i = 1, k;

  while ((k = cli_next("pty", cli_none_opts, g, argc, argv, &i, &v)) >= 0) {
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  /* A terminal needs one here: without it the remote shell waits for
     keystrokes that never come (ssh refuses likewise). */
  if (!isatty(STDIN_FILENO)) {
    return cli_fail_local(
        CLI_EXIT_USAGE, CONCH_CODE_INVALID_ARGUMENT, "conch pty",
        "conch pty: `conch run --stdin -- CMD` gives a command this input "
        "without a terminal",
        0, "stdin is not a terminal: a pseudo-terminal needs one");
  }
  if (i < argc) {
    o.cmd = argv[i];
    o.args = (const char *const *)argv + i + 1;
    o.nargs = (size_t)(argc - i - 1);
  }
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    o.pty_cols = ws.ws_col;
    o.pty_rows = ws.ws_row;
  }
  o.timeout_ms = g->timeout_ms != 0 ? g->timeout_ms : PTY_LIFETIME_MS;
  memset(&s, 0, sizeof(s));
  s.lifetime_ms = o.timeout_ms;
  s.lifetime_dflt = g->timeout_ms == 0 ? "pty's default" : NULL;
  conch_status_init(&s.st);
  rv = open_sandbox(g, &s.sb);
  if (rv != 0) {
    return rv;
  }
  catch_signals();
  s.forward = 1;
  s.pty = 1;
  rv = conch_pty_open_async(s.sb, &o, &session_handler, &s, &s.p);
  if (rv != 0) {
    rv = rpc_fail("pty", rv, NULL);
    conch_sandbox_free(s.sb);
    return rv;
  }
  if (tcgetattr(STDIN_FILENO, &saved) == 0) {
    raw = saved;
    cfmakeraw(&raw);
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    code = pump(&s);
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  } else {
    code = pump(&s);
  }
  return finish_session(&s, code);
}

int conch_cli_start(cli_globals *g, int argc, char **argv) {
  proc_args pa;
  conch_sandbox *sb;
  conch_status st;
  uint32_t pid;
  int rv;

  if (parse_proc(g, argc, argv, &pa, "start") != 0) {
    return CLI_EXIT_USAGE;
  }
  rv = open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  if (g->timeout_ms != 0) {
    pa.o.timeout_ms = g->timeout_ms;
  }
  conch_status_init(&st);
  rv = conch_start(sb, &pa.o, &pid, &st);
  if (rv != 0) {
    rv = rpc_fail("start", rv, &st);
    conch_status_clear(&st);
    conch_sandbox_free(sb);
    return rv;
  }
  conch_sandbox_free(sb);
  /* The pid is all a script has of the process: it must arrive. */
  errno = 0;
  if (printf("%u\n", pid) < 0 || fflush(stdout) != 0) {
    char what[100];
    snprintf(what, sizeof(what),
             "the process runs on as pid %u, not written out", pid);
    return cli_fail_output("stdout", errno != 0 ? errno : -1, pid, what);
  }
  return 0;
}

/* |w| as a POSIX shell reads it back: bare when it holds only characters
   no shell treats specially, else in single quotes ('\'' for a quote). */
static void put_shell_word(FILE *f, const char *w) {
  static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
                             "WXYZ0123456789_@%+=:,./-";
  if (w[0] != '\0' && strspn(w, safe) == strlen(w)) {
    fputs(w, f);
    return;
  }
  fputc('\'', f);
  for (; *w != '\0'; w++) {
    if (*w == '\'') {
      fputs("'\\''", f);
    } else {
      fputc(*w, f);
    }
  }
  fputc('\'', f);
}

/* |s| as a JSON string.  Bytes that are not UTF-8 pass through as they
   came (the server sent them as protobuf strings, which are UTF-8). */
static void put_json_string(FILE *f, const char *s) {
  cli_json_string(f, s, 0);
}

static void put_json_process(FILE *f, const conch_process_info *p) {
  size_t k;
  fprintf(f, "{\"pid\":%u,\"tag\":", p->pid);
  if (p->tag != NULL) {
    put_json_string(f, p->tag);
  } else {
    fputs("null", f);
  }
  fputs(",\"cmd\":", f);
  put_json_string(f, p->cmd);
  fputs(",\"args\":[", f);
  for (k = 0; k < p->nargs; k++) {
    if (k > 0) {
      fputc(',', f);
    }
    put_json_string(f, p->args[k]);
  }
  fputs("],\"env\":{", f);
  for (k = 0; k < p->nenv; k++) {
    if (k > 0) {
      fputc(',', f);
    }
    put_json_string(f, p->env[k].name);
    fputc(':', f);
    put_json_string(f, p->env[k].value);
  }
  fputs("},\"cwd\":", f);
  if (p->cwd != NULL) {
    put_json_string(f, p->cwd);
  } else {
    fputs("null", f);
  }
  fputs("}\n", f);
}

int conch_cli_ps(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_process_info *list;
  conch_status st;
  const char *v;
  size_t n, i, k;
  int json = 0, a = 1, rv;

  while ((rv = cli_next("ps", cli_ps_opts, g, argc, argv, &a, &v)) >= 0) {
    json = 1; /* --json, its only option */
  }
  if (rv == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  if (a != argc) {
    return cli_usage_error("ps", "takes no operands");
  }
  rv = open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  rv = conch_list(sb, &list, &n, &st);
  if (rv != 0) {
    rv = rpc_fail("ps", rv, &st);
    conch_status_clear(&st);
    conch_sandbox_free(sb);
    return rv;
  }
  if (!json) {
    printf("%-8s %-16s %s\n", "PID", "TAG", "COMMAND");
  }
  for (i = 0; i < n; i++) {
    if (json) {
      put_json_process(stdout, &list[i]);
      continue;
    }
    printf("%-8u %-16s ", list[i].pid, list[i].tag != NULL ? list[i].tag : "-");
    put_shell_word(stdout, list[i].cmd != NULL ? list[i].cmd : "");
    for (k = 0; k < list[i].nargs; k++) {
      putchar(' ');
      put_shell_word(stdout, list[i].args[k]);
    }
    printf("\n");
  }
  conch_process_list_free(list, n);
  conch_sandbox_free(sb);
  return 0;
}

int conch_cli_kill(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_selector sel;
  conch_status st;
  const char *v;
  int sig = SIGKILL, i = 1, k, rv;

  while ((k = cli_next("kill", cli_kill_opts, g, argc, argv, &i, &v)) >= 0) {
    if (strcmp(v, "TERM") == 0 || strcmp(v, "SIGTERM") == 0 ||
        strcmp(v, "15") == 0) {
      sig = SIGTERM;
    } else if (strcmp(v, "KILL") == 0 || strcmp(v, "SIGKILL") == 0 ||
               strcmp(v, "9") == 0) {
      sig = SIGKILL;
    } else {
      return cli_usage_fail("kill", "only TERM and KILL can be sent, not '%s'",
                            v);
    }
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  if (parse_selector("kill", argc, argv, i, &sel) != 0) {
    return CLI_EXIT_USAGE;
  }
  rv = open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  rv = conch_kill(sb, &sel, sig, &st);
  if (rv != 0) {
    rv = rpc_fail("kill", rv, &st);
  }
  conch_status_clear(&st);
  conch_sandbox_free(sb);
  return rv;
}
