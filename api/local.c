/* The local server: the private runtime directory and its socket, and the
   start of a detached `conch serve` there (conch/local.h).  Shared by the
   sandbox (url NULL), the CLI and `conch serve` itself. */
#define _GNU_SOURCE /* flock, syscall, NSIG */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <conch/local.h>

#include "api_int.h"
#include "sock.h"

extern char **environ;

/* Room for the directory, a socket path (sun_path is 108 bytes), an
   executable's path and a message. */
#define DIR_MAX 256
#define SOCK_MAX 128
#define EXE_MAX 4096
#define MSG_MAX (EXE_MAX + 512)

static void fail(conch_status *st, conch_code code, int err, const char *msg) {
  conch__sb_fail(st, code, err, msg);
}

/* Opens the runtime directory (creating it), its path in |path|.  Returns
   an O_DIRECTORY descriptor or a negative CONCH_ERR_* with |st| set. */
static int rundir_open(char *path, size_t cap, conch_status *st) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  const char *tmp = getenv("TMPDIR");
  char msg[MSG_MAX];
  struct stat sb;
  int n, fd;

  /* XDG_RUNTIME_DIR is the user's own (a sudo shell may keep another
     user's): use it only then. */
  if (xdg != NULL && xdg[0] == '/' && stat(xdg, &sb) == 0 &&
      S_ISDIR(sb.st_mode) && sb.st_uid == geteuid()) {
    n = snprintf(path, cap, "%s/conch", xdg);
  } else {
    n = snprintf(path, cap, "%s/conch-%ld",
                 tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", (long)geteuid());
  }
  if (n < 0 || (size_t)n >= cap) {
    fail(st, CONCH_CODE_FAILED_PRECONDITION, CONCH_ERR_LIMIT,
         "the runtime directory's path is too long (XDG_RUNTIME_DIR or "
         "TMPDIR)");
    return CONCH_ERR_LIMIT;
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    snprintf(msg, sizeof(msg), "cannot create %s: %s", path, strerror(errno));
    fail(st, CONCH_CODE_FAILED_PRECONDITION, CONCH_ERR_IO, msg);
    return CONCH_ERR_IO;
  }
  fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    snprintf(msg, sizeof(msg), "cannot open %s: %s%s", path, strerror(errno),
             errno == ELOOP || errno == ENOTDIR ? " (not a directory)" : "");
    fail(st, CONCH_CODE_FAILED_PRECONDITION, CONCH_ERR_IO, msg);
    return CONCH_ERR_IO;
  }
  if (fstat(fd, &sb) != 0 || sb.st_uid != geteuid() ||
      (sb.st_mode & 077) != 0) {
    snprintf(msg, sizeof(msg),
             "%s is not a private directory of ours (owner uid %ld, mode "
             "%03o; want uid %ld, mode 0700): remove it, or set "
             "XDG_RUNTIME_DIR",
             path, (long)sb.st_uid, (unsigned)(sb.st_mode & 0777),
             (long)geteuid());
    fail(st, CONCH_CODE_FAILED_PRECONDITION, CONCH_ERR_IO, msg);
    close(fd);
    return CONCH_ERR_IO;
  }
  return fd;
}

int conch_local_dir(char *buf, size_t cap, conch_status *st) {
  int fd;
  if (buf == NULL) {
    return CONCH_ERR_INVALID;
  }
  fd = rundir_open(buf, cap, st);
  if (fd < 0) {
    return fd;
  }
  close(fd);
  return 0;
}

/* The socket's path after the directory's (|dir| holds the directory). */
static int socket_path(const char *dir, char *buf, size_t cap,
                       conch_status *st) {
  char msg[MSG_MAX];
  int n = snprintf(buf, cap, "%s/%s", dir, CONCH_LOCAL_SOCKET_NAME);
  if (n < 0 || (size_t)n >= cap ||
      (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
    snprintf(msg, sizeof(msg), "%s/%s: the path is too long for a socket", dir,
             CONCH_LOCAL_SOCKET_NAME);
    fail(st, CONCH_CODE_FAILED_PRECONDITION, CONCH_ERR_LIMIT, msg);
    return CONCH_ERR_LIMIT;
  }
  return 0;
}

int conch_local_socket(char *buf, size_t cap, conch_status *st) {
  char dir[DIR_MAX];
  int rv;
  if (buf == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = conch_local_dir(dir, sizeof(dir), st);
  if (rv != 0) {
    return rv;
  }
  return socket_path(dir, buf, cap, st);
}

/* The address of |path|; 0, or -1 when it does not fit. */
static int unix_addr(const char *path, struct sockaddr_un *a) {
  size_t n = path != NULL ? strlen(path) : 0;
  memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  if (n == 0 || n >= sizeof(a->sun_path)) {
    return -1;
  }
  memcpy(a->sun_path, path, n);
  return 0;
}

/* Async-signal-safe: used in the forked waiter too. */
static int answers(const struct sockaddr_un *a) {
  return conch__sock_probe((const struct sockaddr *)a, sizeof(*a));
}

int conch_local_answers(const char *path) {
  struct sockaddr_un a;
  if (unix_addr(path, &a) != 0) {
    return 0;
  }
  return answers(&a);
}

/* ---- Starting the server ------------------------------------------------ */

/* The executable to start, resolved to a path in |out|.  Returns 0 or -1
   with |st| set. */
static int find_exe(const char *exe, char *out, size_t cap, conch_status *st) {
  char msg[MSG_MAX];
  const char *path, *p;
  int from_env = 0;

  if (exe == NULL || exe[0] == '\0') {
    exe = getenv("CONCH_SERVE_EXE");
    from_env = exe != NULL && exe[0] != '\0';
    if (!from_env) {
      exe = CONCH_LOCAL_SERVE_EXE;
    }
  }
  if (strchr(exe, '/') != NULL) {
    int n = snprintf(out, cap, "%s", exe);
    if (n < 0 || (size_t)n >= cap) {
      errno = ENAMETOOLONG;
    }
    if (n < 0 || (size_t)n >= cap || access(out, X_OK) != 0) {
      snprintf(msg, sizeof(msg), "cannot start the local server: %s%s: %s", exe,
               from_env ? " (CONCH_SERVE_EXE)" : "",
               errno == ENOENT ? "no such file" : strerror(errno));
      fail(st, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT, msg);
      return -1;
    }
    return 0;
  }
  path = getenv("PATH");
  for (p = path != NULL ? path : ""; p != NULL && *p != '\0';) {
    const char *colon = strchr(p, ':');
    size_t len = colon != NULL ? (size_t)(colon - p) : strlen(p);
    int n;
    if (len > 0) {
      n = snprintf(out, cap, "%.*s/%s", (int)len, p, exe);
      if (n > 0 && (size_t)n < cap && access(out, X_OK) == 0) {
        struct stat sb;
        if (stat(out, &sb) == 0 && S_ISREG(sb.st_mode)) {
          return 0;
        }
      }
    }
    p = colon != NULL ? colon + 1 : NULL;
  }
  snprintf(msg, sizeof(msg),
           "cannot start the local server: no %s%s in PATH (set "
           "CONCH_SERVE_EXE to the conch executable, or name it)",
           exe, from_env ? " (CONCH_SERVE_EXE)" : "");
  fail(st, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT, msg);
  return -1;
}

/* The environment of the server: ours without CONCH_TOKEN.  NULL when out
   of memory. */
static char **server_env(const conch_mem *m) {
  size_t n = 0, i, k = 0;
  char **env;
  while (environ != NULL && environ[n] != NULL) {
    n++;
  }
  env = api_calloc(m, n + 1, sizeof(*env));
  if (env == NULL) {
    return NULL;
  }
  for (i = 0; i < n; i++) {
    if (strncmp(environ[i], "CONCH_TOKEN=", 12) != 0) {
      env[k++] = environ[i];
    }
  }
  env[k] = NULL;
  return env;
}

/* |fd| moved above the standard descriptors (so that dup2 onto 0-2 in the
   child clears close-on-exec).  Returns the new fd or -1. */
static int above_stdio(int fd) {
  int n;
  if (fd < 0 || fd > 2) {
    return fd;
  }
  n = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return n;
}

/* Opens serve.log in |dirfd| for appending: our own regular file, never
   through a symlink. */
static int open_log(int dirfd, const char *dir, conch_status *st) {
  char msg[MSG_MAX];
  struct stat sb;
  int fd = openat(
      dirfd, "serve.log",
      O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
  int err = errno;
  if (fd >= 0 &&
      (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid())) {
    close(fd);
    fd = -1;
    err = EPERM;
  }
  if (fd < 0) {
    snprintf(msg, sizeof(msg), "%s/serve.log: %s", dir,
             err == ELOOP   ? "a symlink (refused)"
             : err == EPERM ? "not a regular file of ours (refused)"
                            : strerror(err));
    fail(st, CONCH_CODE_FAILED_PRECONDITION, CONCH_ERR_IO, msg);
    return -1;
  }
  return above_stdio(fd);
}

/* What the waiter tells by its exit code. */
enum {
  W_ANSWERS = 0, /* a server answers */
  W_GAVE_UP = 1, /* ours exited without answering, and no other runs */
  W_TIMEOUT = 2, /* nothing answered in time */
  W_NO_EXEC = 3, /* the exec failed */
  W_NO_FORK = 4  /* the server could not be forked */
};

/* Everything the children need, made before the fork: after it only
   async-signal-safe calls are made (the caller may have threads). */
typedef struct start_plan {
  const char *exe;
  char *const *argv;
  char **envp;
  int log_fd;
  int null_fd;
  struct sockaddr_un addr;
  const char *lock_path;
  long timeout_ms;
} start_plan;

static long mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether a server holds the socket's lock (starting, or serving). */
static int locked(const char *lock_path) {
  int fd = open(lock_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  int held;
  if (fd < 0) {
    return 0;
  }
  held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

/* The server: a session of its own, default signals, stdin /dev/null, the
   log on stdout and stderr, no other descriptor. */
static void exec_server(const start_plan *pl) {
  struct sigaction sa;
  sigset_t none;
  int sig;

  setsid();
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) {
      sigaction(sig, &sa, NULL);
    }
  }
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (dup2(pl->null_fd, STDIN_FILENO) < 0 ||
      dup2(pl->log_fd, STDOUT_FILENO) < 0 ||
      dup2(pl->log_fd, STDERR_FILENO) < 0) {
    _exit(127);
  }
  syscall(SYS_close_range, 3u, ~0u, 0u);
  if (chdir("/") != 0) {
    _exit(127);
  }
  execve(pl->exe, pl->argv, pl->envp);
  _exit(127);
}

/* The intermediate process: starts the server (which init inherits once
   this exits) and waits for it to answer, as the exit code tells. */
static void waiter(const start_plan *pl) {
  long until = mono_ms() + pl->timeout_ms;
  struct timespec pace = {0, 20 * 1000 * 1000};
  pid_t srv = fork();
  int ws;

  if (srv < 0) {
    _exit(W_NO_FORK);
  }
  if (srv == 0) {
    exec_server(pl);
  }
  for (;;) {
    if (answers(&pl->addr)) {
      _exit(W_ANSWERS);
    }
    if (srv > 0 && waitpid(srv, &ws, WNOHANG) == srv) {
      if (WIFEXITED(ws) && WEXITSTATUS(ws) == 127) {
        _exit(W_NO_EXEC);
      }
      srv = 0; /* it gave up: another server may hold the lock */
    }
    if (srv == 0 && !locked(pl->lock_path) && !answers(&pl->addr)) {
      _exit(W_GAVE_UP);
    }
    if (mono_ms() >= until) {
      _exit(W_TIMEOUT);
    }
    nanosleep(&pace, NULL);
  }
}

/* Forks the waiter and reaps it.  Returns its W_* code, or -1 when it
   could not be forked or was reaped by someone else. */
static int run_waiter(const start_plan *pl, int *fork_err) {
  pid_t w = fork();
  int ws;
  if (w < 0) {
    *fork_err = errno;
    return W_NO_FORK;
  }
  if (w == 0) {
    waiter(pl);
  }
  for (;;) {
    pid_t r = waitpid(w, &ws, 0);
    if (r == w) {
      return WIFEXITED(ws) ? WEXITSTATUS(ws) : W_GAVE_UP;
    }
    if (r < 0 && errno != EINTR) {
      /* SIGCHLD ignored, or the caller's handler reaped it. */
      return -1;
    }
  }
}

static int start_server(const char *exe, long timeout_ms, int dirfd,
                        const char *dir, const char *sock, conch_status *st) {
  const conch_mem *m = conch_mem_default();
  char path[EXE_MAX], listen[SOCK_MAX + 8], lock[SOCK_MAX + 8], msg[MSG_MAX];
  char *argv[5];
  start_plan pl;
  int code, fork_err = EAGAIN, rv = CONCH_ERR_CONNECT;

  if (find_exe(exe, path, sizeof(path), st) != 0) {
    return CONCH_ERR_CONNECT;
  }
  memset(&pl, 0, sizeof(pl));
  snprintf(listen, sizeof(listen), "unix:%s", sock);
  snprintf(lock, sizeof(lock), "%s.lock", sock);
  argv[0] = (char *)CONCH_LOCAL_SERVE_EXE;
  argv[1] = (char *)"serve";
  argv[2] = (char *)"--listen";
  argv[3] = listen;
  argv[4] = NULL;
  pl.exe = path;
  pl.argv = argv;
  pl.lock_path = lock;
  pl.timeout_ms = timeout_ms > 0 ? timeout_ms : CONCH_LOCAL_START_TIMEOUT_MS;
  unix_addr(sock, &pl.addr);
  pl.log_fd = open_log(dirfd, dir, st);
  if (pl.log_fd < 0) {
    return CONCH_ERR_IO;
  }
  pl.null_fd = above_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
  pl.envp = server_env(m);
  if (pl.null_fd < 0 || pl.envp == NULL) {
    fail(st, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
         "cannot start the local server: out of memory or descriptors");
    rv = CONCH_ERR_NOMEM;
    goto out;
  }
  code = run_waiter(&pl, &fork_err);
  if (code == W_ANSWERS || (code < 0 && answers(&pl.addr))) {
    rv = 0;
    goto out;
  }
  switch (code) {
  case W_TIMEOUT:
    snprintf(msg, sizeof(msg),
             "the local server did not answer on %s within %ld ms (see "
             "%s/serve.log)",
             sock, pl.timeout_ms, dir);
    break;
  case W_NO_EXEC:
    snprintf(msg, sizeof(msg),
             "cannot start the local server: %s could not be run (see "
             "%s/serve.log)",
             path, dir);
    break;
  case W_NO_FORK:
    snprintf(msg, sizeof(msg), "cannot start the local server: fork: %s",
             strerror(fork_err));
    break;
  default:
    snprintf(msg, sizeof(msg),
             "the local server did not start (%s serve --listen unix:%s; see "
             "%s/serve.log)",
             path, sock, dir);
    break;
  }
  fail(st, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT, msg);
out:
  close(pl.log_fd);
  if (pl.null_fd >= 0) {
    close(pl.null_fd);
  }
  api_free(m, pl.envp);
  return rv;
}

int conch_local_serve(const char *exe, long timeout_ms, char *buf, size_t cap,
                      conch_status *st) {
  char dir[DIR_MAX];
  int dirfd, rv;

  if (buf == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (cap > 0) {
    buf[0] = '\0';
  }
  dirfd = rundir_open(dir, sizeof(dir), st);
  if (dirfd < 0) {
    return dirfd;
  }
  rv = socket_path(dir, buf, cap, st);
  if (rv == 0 && !conch_local_answers(buf)) {
    rv = start_server(exe, timeout_ms, dirfd, dir, buf, st);
  }
  close(dirfd);
  return rv;
}
