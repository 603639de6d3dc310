/* Test peers: fork+exec a Node.js server script, read its port. */
#include "peer.h"
#include "wait.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEER_START_TIMEOUT_MS 120000 /* Node on a loaded 2-core machine */
#define PEER_STOP_TIMEOUT_MS 5000
#define PEER_LINE_MAX 512
#define PEER_MAX_CLOSE_FD 65536

static const char listening[] = "LISTENING ";

static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

static int set_cloexec(int fd) {
  int flags = fcntl(fd, F_GETFD);
  return flags < 0 ? -1 : fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

/* Waits for |pid| up to |timeout_ms| (negative: forever).  Returns 1 when
   reaped (|status| set), 0 on timeout, -1 when there is nothing to wait
   for (ECHILD). */
static int wait_child(pid_t pid, int *status, long timeout_ms) {
  long long deadline = conch_now_ms() + timeout_ms;
  for (;;) {
    pid_t r = waitpid(pid, status, timeout_ms < 0 ? 0 : WNOHANG);
    if (r == pid) {
      return 1;
    }
    if (r < 0 && errno != EINTR) {
      return -1;
    }
    if (r == 0) {
      if (conch_now_ms() >= deadline) {
        return 0;
      }
      conch_sleep_ms(10);
    }
  }
}

static void describe_status(int status) {
  if (WIFEXITED(status)) {
    fprintf(stderr, "exited with status %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    fprintf(stderr, "was killed by signal %d", WTERMSIG(status));
  } else {
    fprintf(stderr, "stopped");
  }
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void run_child(const char *const *argv, int in_fd, int out_fd,
                      pid_t parent, long max_fd) {
  sigset_t none;
  int fd;

  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) {
    _exit(127); /* the parent is already gone */
  }
  if (dup2(in_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0) {
    _exit(127);
  }
  /* Keep nothing of the test process but stdio. */
  for (fd = STDERR_FILENO + 1; fd < max_fd; fd++) {
    close(fd);
  }
  /* Signal dispositions set to "ignore" and blocked signals survive exec;
     node must see SIGTERM and SIGINT. */
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(argv[0], (char *const *)argv);
  {
    static const char msg[] = "conch_peer: exec of node failed\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
  }
  _exit(127);
}

/* Parses "LISTENING <port>" (or "LISTENING unix:PATH", `conch serve` on a
   Unix socket: port 0); returns the port or -1. */
static int parse_listening(const char *line) {
  const char *digits;
  char *end;
  long port;

  if (strncmp(line, listening, sizeof listening - 1) != 0) {
    return -1;
  }
  digits = line + sizeof listening - 1;
  if (strncmp(digits, "unix:/", 6) == 0) {
    return 0;
  }
  if (*digits < '0' || *digits > '9') {
    return -1;
  }
  errno = 0;
  port = strtol(digits, &end, 10);
  if (errno != 0 || *end != '\0' || port < 1 || port > 65535) {
    return -1;
  }
  return (int)port;
}

/* Reads the child's stdout until the LISTENING line, EOF or the deadline.
   Other lines are copied to stderr.  Returns the port, or -1 (EOF or
   error) or -2 (timeout). */
static int read_port(int fd, const char *script) {
  char line[PEER_LINE_MAX];
  size_t len = 0;
  long long deadline = conch_now_ms() + PEER_START_TIMEOUT_MS;

  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    long long left = deadline - conch_now_ms();
    char buf[256];
    ssize_t n;
    ssize_t i;
    int r;

    if (left <= 0) {
      return -2;
    }
    r = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      return -1;
    }
    if (r == 0) {
      continue;
    }
    n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      return -1;
    }
    if (n == 0) {
      return -1;
    }
    for (i = 0; i < n; i++) {
      int port;

      if (buf[i] != '\n') {
        if (len < sizeof line - 1) {
          line[len++] = buf[i];
        }
        continue;
      }
      if (len > 0 && line[len - 1] == '\r') {
        len--;
      }
      line[len] = '\0';
      len = 0;
      port = parse_listening(line);
      if (port >= 0) {
        return port;
      }
      fprintf(stderr, "conch_peer: %s: %s\n", script, line);
    }
  }
}

int conch_peer_start_argv(conch_peer *p, const char *const *argv) {
  const char *prog = argv[0];
  const char *script = argv[1] != NULL ? argv[1] : "";
  int in_pipe[2] = {-1, -1};
  int out_pipe[2] = {-1, -1};
  long max_fd;
  pid_t parent = getpid();
  pid_t pid;
  int port;
  int status;

  p->pid = -1;
  p->port = 0;
  p->stdin_fd = -1;
  max_fd = sysconf(_SC_OPEN_MAX);
  if (max_fd < 0 || max_fd > PEER_MAX_CLOSE_FD) {
    max_fd = PEER_MAX_CLOSE_FD;
  }
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0 ||
      set_cloexec(in_pipe[1]) != 0 || set_cloexec(out_pipe[0]) != 0) {
    fprintf(stderr, "conch_peer: pipe: %s\n", strerror(errno));
    goto fail;
  }
  fflush(NULL); /* no stdio buffer is written twice */
  pid = fork();
  if (pid < 0) {
    fprintf(stderr, "conch_peer: fork: %s\n", strerror(errno));
    goto fail;
  }
  if (pid == 0) {
    run_child(argv, in_pipe[0], out_pipe[1], parent, max_fd);
  }
  close_fd(&in_pipe[0]);
  close_fd(&out_pipe[1]);
  p->pid = pid;
  p->stdin_fd = in_pipe[1];
  in_pipe[1] = -1;

  port = read_port(out_pipe[0], script);
  close_fd(&out_pipe[0]);
  if (port >= 0) {
    p->port = port;
    return 0;
  }
  if (port == -2) {
    fprintf(stderr, "conch_peer: %s %s: no LISTENING line within %d s\n",
            prog, script, PEER_START_TIMEOUT_MS / 1000);
    conch_peer_stop(p);
    return -1;
  }
  /* EOF: the child is exiting or already gone; tell how. */
  close_fd(&p->stdin_fd);
  if (wait_child(pid, &status, PEER_STOP_TIMEOUT_MS) == 1) {
    fprintf(stderr, "conch_peer: %s %s ", prog, script);
    describe_status(status);
    fprintf(stderr, " before printing LISTENING\n");
    p->pid = -1;
  } else {
    fprintf(stderr, "conch_peer: %s %s closed stdout without LISTENING\n",
            prog, script);
    conch_peer_stop(p);
  }
  return -1;

fail:
  close_fd(&in_pipe[0]);
  close_fd(&in_pipe[1]);
  close_fd(&out_pipe[0]);
  close_fd(&out_pipe[1]);
  return -1;
}

int conch_peer_start(conch_peer *p, const char *script,
                     const char *const *extra_args) {
  const char *node = getenv("CONCH_NODE");
  const char **argv;
  size_t nextra = 0;
  size_t i;
  int rv;

  if (node == NULL || node[0] == '\0') {
    node = "node";
  }
  while (extra_args != NULL && extra_args[nextra] != NULL) {
    nextra++;
  }
  argv = calloc(nextra + 3, sizeof *argv);
  if (argv == NULL) {
    fprintf(stderr, "conch_peer: out of memory\n");
    p->pid = -1;
    p->port = 0;
    p->stdin_fd = -1;
    return -1;
  }
  argv[0] = node;
  argv[1] = script;
  for (i = 0; i < nextra; i++) {
    argv[2 + i] = extra_args[i];
  }
  argv[2 + nextra] = NULL;
  rv = conch_peer_start_argv(p, argv);
  free(argv);
  return rv;
}

int conch_peer_stop_status(conch_peer *p, long wait_ms) {
  int status = 0;
  int rv;

  if (p->pid <= 0) {
    close_fd(&p->stdin_fd);
    p->port = 0;
    return -1;
  }
  kill(p->pid, SIGTERM);
  if (wait_child(p->pid, &status, wait_ms) == 1) {
    rv = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  } else {
    kill(p->pid, SIGKILL);
    wait_child(p->pid, &status, -1);
    rv = -1;
  }
  close_fd(&p->stdin_fd);
  p->pid = -1;
  p->port = 0;
  return rv;
}

void conch_peer_stop(conch_peer *p) {
  int status;

  if (p->pid > 0) {
    kill(p->pid, SIGTERM);
    close_fd(&p->stdin_fd);
    if (wait_child(p->pid, &status, PEER_STOP_TIMEOUT_MS) == 0) {
      fprintf(stderr, "conch_peer: pid %ld ignored SIGTERM; killing it\n",
              (long)p->pid);
      kill(p->pid, SIGKILL);
      wait_child(p->pid, &status, -1);
    }
  }
  close_fd(&p->stdin_fd);
  p->pid = -1;
  p->port = 0;
}

int conch_peer_have_modules(const char *dir, const char *const *names) {
  for (; *names != NULL; names++) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, *names);
    if (access(path, F_OK) != 0) {
      printf("SKIP: %s is not installed in %s (npm ci in tests/)\n", *names,
             dir);
      return 0;
    }
  }
  return 1;
}
