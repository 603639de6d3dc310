/* `conch serve`: options, the listening socket, signals and the server's
   lifetime.  SIGINT, SIGTERM and SIGHUP (and the end of stdin, when stdin
   is a pipe or a socket) begin the shutdown: no new connections, GOAWAY,
   SIGTERM to every process group, SIGKILL after the grace period, then
   every child reaped before exit. */
#include "commands.h"
#include "serve.h"
#include "serve_tls.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_LISTEN "127.0.0.1:49983" /* envd's port */
#define STOP_LINGER_MS 2000 /* after SIGKILL: let the last events out */
#define LOOP_MAX_WAIT_MS 1000

static const char usage_text[] =
    "usage: conch serve [--listen HOST:PORT] [--tls-cert FILE --tls-key "
    "FILE]\n"
    "                   [--access-token TOKEN]\n"
    "\n"
    "Runs a local envd-compatible process server (process.Process over the\n"
    "Connect protocol, HTTP/1.1 and HTTP/2).  Prints \"LISTENING <port>\"\n"
    "once ready.\n"
    "\n"
    "  --listen HOST:PORT    address to listen on (default " DEFAULT_LISTEN
    ";\n"
    "                        port 0 picks a free port)\n"
    "  --tls-cert FILE       serve TLS (ALPN h2, http/1.1) with this PEM\n"
    "                        certificate\n"
    "  --tls-key FILE        ... and this PEM key\n"
    "  --access-token TOKEN  require X-Access-Token: TOKEN (401 otherwise)\n";

static void config_defaults(srv_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->listen = DEFAULT_LISTEN;
  cfg->retention_ms = 30000;
  cfg->max_message = 16u << 20;
  cfg->conn_buffered = 64u << 20;
  cfg->max_streams = 1000;
  cfg->out_high = 256 * 1024;
  cfg->out_low = 64 * 1024;
  cfg->stdin_high = 1u << 20;
  cfg->compress_min = 1024;
  cfg->kill_grace_ms = 2000;
  cfg->max_conns = 4096;
  cfg->idle_ms = 60000;
  cfg->header_ms = 10000;
  cfg->body_ms = 60000;
  cfg->max_procs = 1024;
  cfg->max_buffered = 128u << 20;
  cfg->stdin_total = 64u << 20;
}

/* ---- Options ---------------------------------------------------------------
 */

static int parse_num(const char *opt, const char *v, long long min,
                     long long max, long long *out) {
  char *end;
  long long n;

  errno = 0;
  n = strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < min || n > max) {
    fprintf(stderr, "conch serve: %s: not a number in [%lld, %lld]: %s\n", opt,
            min, max, v);
    return -1;
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
  } else {
    return 1;
  }
  return 0;
}

static int set_option(srv_config *cfg, const char *name, const char *v) {
  if (strcmp(name, "--listen") == 0) {
    cfg->listen = v;
  } else if (strcmp(name, "--tls-cert") == 0) {
    cfg->tls_cert = v;
  } else if (strcmp(name, "--tls-key") == 0) {
    cfg->tls_key = v;
  } else if (strcmp(name, "--access-token") == 0) {
    cfg->access_token = v;
  } else {
    int rv = set_number(cfg, name, v);

    if (rv > 0) {
      fprintf(stderr, "conch serve: unknown option %s\n%s", name, usage_text);
    }
    return rv != 0 ? -1 : 0;
  }
  return 0;
}

/* Returns 0, 1 for --help, or -1. */
static int parse_args(int argc, char **argv, srv_config *cfg) {
  int i;

  for (i = 1; i < argc; i++) {
    char name[64];
    const char *arg = argv[i];
    const char *eq = strchr(arg, '=');
    const char *value;

    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      return 1;
    }
    if (strncmp(arg, "--", 2) != 0) {
      fprintf(stderr, "conch serve: unexpected argument %s\n%s", arg,
              usage_text);
      return -1;
    }
    if (eq != NULL) {
      snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
      value = eq + 1;
    } else {
      if (i + 1 >= argc) {
        fprintf(stderr, "conch serve: %s needs a value\n", arg);
        return -1;
      }
      snprintf(name, sizeof(name), "%s", arg);
      value = argv[++i];
    }
    if (set_option(cfg, name, value) != 0) {
      return -1;
    }
  }
  if ((cfg->tls_cert == NULL) != (cfg->tls_key == NULL)) {
    fprintf(stderr, "conch serve: --tls-cert and --tls-key go together\n");
    return -1;
  }
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

static int listen_on(const char *addr, int *port_out) {
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
    fprintf(stderr, "conch serve: --listen wants HOST:PORT, got %s\n", addr);
    return -1;
  }
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  rv = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
  if (rv != 0) {
    fprintf(stderr, "conch serve: %s: %s\n", addr, gai_strerror(rv));
    return -1;
  }
  fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 512) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0) {
    fprintf(stderr, "conch serve: listen on %s: %s\n", addr, strerror(errno));
    if (fd >= 0) {
      close(fd);
    }
    freeaddrinfo(res);
    return -1;
  }
  freeaddrinfo(res);
  *port_out =
      ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

static void on_listen(srv_watch *w, uint32_t events) {
  srv_server *srv = SRV_CONTAINER(w, srv_server, listen_w);
  int i;

  (void)events;
  for (i = 0; i < 64; i++) {
    int one = 1;
    int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0) {
      /* Out of descriptors or memory: the waiting clients are turned away
         at once rather than left hanging (srv_conn_shed), and the
         listening socket, still readable, rests a moment instead of
         spinning. */
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        srv_conn_shed(srv, w->fd);
        srv_watch_set(&srv->loop, w, 0);
        srv_timer_arm(&srv->loop, &srv->accept_t, srv_now_ms() + 100);
      }
      return;
    }
    if (srv->nconns >= srv->cfg.max_conns && srv_conn_evict(srv) != 0) {
      close(fd);
      continue;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    srv_conn_accept(srv, fd);
  }
}

static void on_accept_again(srv_timer *t) {
  srv_server *srv = SRV_CONTAINER(t, srv_server, accept_t);

  if (!srv->stopping) {
    srv_watch_set(&srv->loop, &srv->listen_w, EPOLLIN);
  }
}

/* ---- Signals, children, stdin ----------------------------------------------
 */

static void reap_children(srv_server *srv) {
  for (;;) {
    int ws;
    pid_t pid = waitpid(-1, &ws, WNOHANG);

    if (pid <= 0) {
      return;
    }
    srv_proc_reaped(srv, pid, ws);
  }
}

static void on_signal(srv_watch *w, uint32_t events) {
  srv_server *srv = SRV_CONTAINER(w, srv_server, sig_w);
  struct signalfd_siginfo si;

  (void)events;
  while (read(w->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    if (si.ssi_signo != SIGCHLD) {
      srv_server_stop(srv);
    }
  }
  reap_children(srv);
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
    kill_children(SIGKILL);
    srv_timer_arm(&srv->loop, &srv->stop_t, srv_now_ms() + STOP_LINGER_MS);
    return;
  }
  srv->stopping = 2; /* out of patience with the clients */
}

void srv_server_stop(srv_server *srv) {
  srv_link *l;

  if (srv->stopping) {
    return;
  }
  srv->stopping = 1;
  srv_watch_set(&srv->loop, &srv->listen_w, 0);
  close(srv->listen_w.fd);
  srv->listen_w.fd = -1;
  srv_watch_set(&srv->loop, &srv->stdin_w, 0);
  for (l = srv->conns.next; l != &srv->conns; l = l->next) {
    srv_conn_goaway(SRV_CONTAINER(l, srv_conn, link));
  }
  srv_proc_signal_all(srv, SIGTERM);
  kill_children(SIGTERM);
  srv_timer_arm(&srv->loop, &srv->stop_t,
                srv_now_ms() + srv->cfg.kill_grace_ms);
}

static int stop_done(const srv_server *srv) {
  if (srv->stopping == 2) {
    return 1;
  }
  return srv->stopping == 1 && srv_proc_running(srv) == 0 &&
         srv_list_empty(&srv->conns);
}

/* Frees what the last loop turn let go of. */
static void collect(srv_server *srv) {
  while (!srv_list_empty(&srv->dead_conns)) {
    srv_conn_free(SRV_CONTAINER(srv->dead_conns.next, srv_conn, link));
  }
  while (!srv_list_empty(&srv->dead_procs)) {
    srv_proc_free(SRV_CONTAINER(srv->dead_procs.next, srv_proc, link));
  }
}

/* Nothing may stay behind: kill what is left and reap it all. */
static void final_reap(srv_server *srv) {
  int64_t until = srv_now_ms() + 5000;

  srv_proc_signal_all(srv, SIGKILL);
  kill_children(SIGKILL);
  while (srv_now_ms() < until) {
    int ws;
    pid_t pid = waitpid(-1, &ws, WNOHANG);

    if (pid < 0) {
      return; /* ECHILD: no child left */
    }
    if (pid == 0) {
      struct timespec ts = {0, 10 * 1000 * 1000};

      kill_children(SIGKILL);
      nanosleep(&ts, NULL);
    }
  }
}

static void server_clear(srv_server *srv) {
  while (!srv_list_empty(&srv->conns)) {
    srv_conn_close(SRV_CONTAINER(srv->conns.next, srv_conn, link));
  }
  while (!srv_list_empty(&srv->procs)) {
    srv_proc *p = SRV_CONTAINER(srv->procs.next, srv_proc, link);

    srv_list_remove(&p->link);
    srv_list_push(&srv->dead_procs, &p->link);
  }
  collect(srv);
  if (srv->listen_w.fd >= 0) {
    close(srv->listen_w.fd);
  }
  if (srv->sig_w.fd >= 0) {
    close(srv->sig_w.fd);
  }
  if (srv->spare_fd >= 0) {
    close(srv->spare_fd);
  }
  if (srv->tls != NULL) {
    SSL_CTX_free(srv->tls);
  }
  conch__gzip_clear(&srv->gz);
  srv_loop_clear(&srv->loop);
}

static int server_init(srv_server *srv, int *port) {
  srv->mem = conch_mem_default();
  conch__gzip_init(&srv->gz, srv->mem);
  srv->euid = geteuid();
  srv_list_init(&srv->conns);
  srv_list_init(&srv->dead_conns);
  srv_list_init(&srv->flush);
  srv_list_init(&srv->procs);
  srv_list_init(&srv->dead_procs);
  srv_timer_init(&srv->stop_t, on_stop_timer);
  srv_timer_init(&srv->accept_t, on_accept_again);
  srv_watch_init(&srv->listen_w, -1, on_listen);
  srv_watch_init(&srv->sig_w, -1, on_signal);
  srv_watch_init(&srv->stdin_w, -1, on_stdin);
  srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (srv_loop_init(&srv->loop) != 0) {
    fprintf(stderr, "conch serve: epoll: %s\n", strerror(errno));
    return -1;
  }
  if (srv->cfg.tls_cert != NULL) {
    srv->tls = srv_tls_new(srv->cfg.tls_cert, srv->cfg.tls_key);
    if (srv->tls == NULL) {
      return -1;
    }
  }
  srv->listen_w.fd = listen_on(srv->cfg.listen, port);
  if (srv->listen_w.fd < 0) {
    return -1;
  }
  if (srv_watch_set(&srv->loop, &srv->listen_w, EPOLLIN) != 0 ||
      setup_signals(srv) != 0 || watch_stdin(srv) != 0) {
    fprintf(stderr, "conch serve: setup: %s\n", strerror(errno));
    return -1;
  }
  return 0;
}

static int run(srv_server *srv) {
  for (;;) {
    srv_conn_flush_all(srv);
    collect(srv);
    if (stop_done(srv)) {
      return 0;
    }
    if (srv_loop_poll(&srv->loop, LOOP_MAX_WAIT_MS) != 0) {
      fprintf(stderr, "conch serve: epoll_wait: %s\n", strerror(errno));
      return -1;
    }
  }
}

int conch_cmd_serve(int argc, char **argv) {
  srv_server srv;
  int port = 0;
  int rv;

  memset(&srv, 0, sizeof(srv));
  config_defaults(&srv.cfg);
  rv = parse_args(argc, argv, &srv.cfg);
  if (rv != 0) {
    if (rv > 0) {
      fputs(usage_text, stdout);
    }
    return rv > 0 ? 0 : 2;
  }
  rv = server_init(&srv, &port);
  if (rv == 0) {
    printf("LISTENING %d\n", port);
    fflush(stdout);
    rv = run(&srv);
  }
  final_reap(&srv);
  server_clear(&srv);
  return rv == 0 ? 0 : 1;
}
