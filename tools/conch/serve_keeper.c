/* The keeper: a small process that outlives a server killed with SIGKILL
   and then kills the process groups it had running.

   The server forks it (twice, so that it is nobody's child here and no
   kill of our children reaches it) with the read end of a pipe, and
   writes it one int32 per change: +pid when a process starts (its pid is
   its group's id), -pid when its group is empty.  The server keeps the
   leader's zombie until then (serve_reap.c), so the id stays that group's
   for as long as the keeper holds it: a member that ignores TERM still
   dies with the server during a close's grace period.  The keeper leaves
   the server's session and ignores the signals a terminal or a shutdown
   sends; when the pipe reaches EOF (the server is gone, however it ended)
   it sends SIGKILL to every group it still knows (to the pid, for a
   process that leads no group) and exits.
   After a normal shutdown that list is empty.

   Together with the children's parent-death signal (serve_spawn.c) this
   makes a process tree die with the server: the leader by both, what
   stayed in its group by the keeper.  Not covered: descendants that left
   the group (setsid, or a shell's job groups on a PTY: the PTY's hangup
   signals only the foreground group), and everything if the keeper itself
   is killed. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct pid_set {
  pid_t *v;
  size_t n;
  size_t cap;
} pid_set;

static void set_add(pid_set *s, pid_t pid) {
  if (s->n == s->cap) {
    size_t cap = s->cap == 0 ? 64 : s->cap * 2;
    pid_t *v = realloc(s->v, cap * sizeof(*v));

    if (v == NULL) {
      return; /* that one is not covered */
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = pid;
}

static void set_remove(pid_set *s, pid_t pid) {
  size_t i;

  for (i = 0; i < s->n; i++) {
    if (s->v[i] == pid) {
      s->v[i] = s->v[--s->n];
      return;
    }
  }
}

static void keeper_run(int rfd) {
  static const int quiet[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM,
                              SIGPIPE, SIGUSR1, SIGUSR2};
  pid_set set = {NULL, 0, 0};
  int32_t rec[256];
  sigset_t none;
  size_t i;
  int fd;

  setsid();
  for (i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
    signal(quiet[i], SIG_IGN);
  }
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (dup2(rfd, 3) != 3) {
    _exit(1);
  }
  rfd = 3;
  close_range(4, ~0U, 0); /* the server's sockets and pipes */
  fd = open("/dev/null", O_RDWR);
  if (fd >= 0) {
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  for (;;) {
    ssize_t n = read(rfd, rec, sizeof(rec));

    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    /* Each record is one write of 4 bytes (atomic on a pipe). */
    for (i = 0; i < (size_t)n / sizeof(rec[0]); i++) {
      if (rec[i] > 0) {
        set_add(&set, (pid_t)rec[i]);
      } else if (rec[i] < 0) {
        set_remove(&set, (pid_t)-rec[i]);
      }
    }
  }
  for (i = 0; i < set.n; i++) {
    if (kill(-set.v[i], SIGKILL) != 0) {
      kill(set.v[i], SIGKILL);
    }
  }
  _exit(0);
}

int srv_keeper_start(srv_server *srv) {
  int p[2];
  pid_t mid;
  int ws;

  if (pipe2(p, O_CLOEXEC) != 0) {
    return -1;
  }
  mid = fork();
  if (mid < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (mid == 0) {
    pid_t k = fork();

    if (k == 0) {
      close(p[1]);
      keeper_run(p[0]);
    }
    _exit(k < 0 ? 1 : 0);
  }
  close(p[0]);
  while (waitpid(mid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0 ||
      fcntl(p[1], F_SETFL, O_NONBLOCK) != 0) {
    close(p[1]);
    return -1;
  }
  srv->keeper_fd = p[1];
  srv->keeper_on = 1;
  return 0;
}
