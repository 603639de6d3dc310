/* Process groups: children's ends and reaping, without looking at the
   host's process table.

   Each child leads a session of its own (setsid; not a piped child of a
   --signal-pid-only server), so its pid P is also its process group and
   session id.  P stays ours only as long as the kernel holds it: while
   the leader lives or is an unreaped zombie, or while some process still
   has P as its group or session id.  So the leader's zombie is kept (its
   status read with WNOWAIT) until no process of session P is left; until
   then kill(-P) reaches our group and nobody else's, at the cost of that
   group alone, and the keeper (serve_keeper.c) holds P.

   What is left of a session once its leader is gone: the server is a
   subreaper, so every process of ours whose parent ended is our child,
   and a process of session P descends from P through processes of session
   P (a process that calls setsid() leaves it, and no one can join it from
   outside).  Each live process of session P therefore is, or descends
   from, a child of ours in session P other than the leader.  After a
   turn in which children ended (SIGCHLD), one read of our own children
   list (/proc/self/task/T/children) tells which held sessions still have
   such a child: its cost is our children, not the host's processes, and
   no deadline, retention or signal reads anything.

   A leader's end comes from its pidfd (readable at the exit), so that
   the zombies kept do not hide the others from waitid(). */
#include "serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct grp {
  pid_t pid;
  int own;    /* leads its session: the zombie is kept until it is empty */
  int exited; /* its status went to srv_proc_reaped() */
  int reaped; /* the zombie is gone */
  unsigned seen; /* the check that last found a member */
  srv_watch w;   /* the pidfd, until the exit */
  srv_server *srv;
  srv_link held_link; /* r->held: exited, zombie kept */
} grp;

struct srv_reaper {
  srv_server *srv;
  srv_itab tab; /* pid -> grp */
  srv_link held;
  srv_timer check_t;
  unsigned gen;
  pid_t *kids; /* the last children list read */
  size_t nkids;
  size_t kids_cap;
  char *buf;
  size_t buf_cap;
};

/* ---- The keeper's notes ---------------------------------------------------
 */

/* +pid: a group starts; -pid: it is empty and its id ours no more.  A
   full pipe loses the note (the keeper reads at once). */
static void keeper_note(srv_server *srv, pid_t pid, int running) {
  int32_t v = running ? (int32_t)pid : -(int32_t)pid;
  ssize_t n;

  if (srv->keeper_on) {
    n = write(srv->keeper_fd, &v, sizeof(v));
    (void)n;
  }
}

/* ---- The table ------------------------------------------------------------
 */

static grp *find(const struct srv_reaper *r, pid_t pid) {
  return r == NULL ? NULL : srv_itab_get(&r->tab, (int)pid);
}

/* ---- Ends ----------------------------------------------------------------- */

static void on_check(srv_timer *t);

static struct srv_reaper *reaper(srv_server *srv) {
  struct srv_reaper *r = srv->reaper;

  if (r == NULL) {
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
      return NULL;
    }
    r->srv = srv;
    srv_list_init(&r->held);
    srv_timer_init(&r->check_t, on_check);
    srv->reaper = r;
  }
  return r;
}

static void arm_check(srv_server *srv) {
  struct srv_reaper *r = srv->reaper;

  if (r != NULL && !srv_timer_armed(&r->check_t)) {
    srv_timer_arm(&srv->loop, &r->check_t, srv_now_ms());
  }
}

/* The group is empty (or not a session of its own): the zombie goes, the
   keeper forgets it, the process table hears of it. */
static void group_done(grp *g) {
  srv_server *srv = g->srv;
  pid_t pid = g->pid;

  if (g->exited && !g->reaped) {
    int ws;

    while (waitpid(pid, &ws, WNOHANG) < 0 && errno == EINTR) {
    }
  }
  if (g->w.fd >= 0) {
    srv_watch_set(&srv->loop, &g->w, 0);
    close(g->w.fd);
  }
  if (srv_linked(&g->held_link)) {
    srv_list_remove(&g->held_link);
  }
  srv_itab_del(&srv->reaper->tab, (int)g->pid);
  keeper_note(srv, pid, 0);
  free(g);
  srv_proc_group_gone(srv, pid);
}

static int wstatus_of(const siginfo_t *si) {
  switch (si->si_code) {
  case CLD_EXITED:
    return (si->si_status & 0xff) << 8;
  case CLD_KILLED:
    return si->si_status & 0x7f;
  case CLD_DUMPED:
    return (si->si_status & 0x7f) | 0x80;
  default:
    return 0;
  }
}

/* The leader's pidfd: it exited. */
static void on_exit_fd(srv_watch *w, uint32_t events) {
  grp *g = SRV_CONTAINER(w, grp, w);
  srv_server *srv = g->srv;
  siginfo_t si;
  int rv;

  (void)events;
  memset(&si, 0, sizeof(si));
  do {
    rv = waitid(P_PID, (id_t)g->pid, &si,
                WEXITED | WNOHANG | (g->own ? WNOWAIT : 0));
  } while (rv != 0 && errno == EINTR);
  if (rv == 0 && si.si_pid == 0) {
    return; /* not yet */
  }
  srv_watch_set(&srv->loop, w, 0);
  close(w->fd);
  w->fd = -1;
  g->exited = 1;
  g->reaped = rv != 0 || !g->own; /* ECHILD cannot be; then it is gone */
  srv_proc_reaped(srv, g->pid, rv == 0 ? wstatus_of(&si) : 0);
  if (g->reaped) {
    group_done(g);
    return;
  }
  srv_list_push(&srv->reaper->held, &g->held_link);
  arm_check(srv);
}

int srv_reap_track(srv_server *srv, pid_t pid, int own) {
  struct srv_reaper *r = reaper(srv);
  grp *g;
  int fd;

  if (r == NULL) {
    return ENOMEM;
  }
  g = calloc(1, sizeof(*g));
  if (g == NULL) {
    return ENOMEM;
  }
  /* Our child, not reaped: the pid cannot be anyone else's. */
  fd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) {
    int e = errno;
    free(g);
    return e;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  g->pid = pid;
  g->own = own;
  g->srv = srv;
  srv_list_init(&g->held_link);
  srv_watch_init(&g->w, fd, on_exit_fd);
  if (srv_watch_set(&srv->loop, &g->w, EPOLLIN) != 0) {
    int e = errno != 0 ? errno : ENOMEM;
    close(fd);
    free(g);
    return e;
  }
  if (srv_itab_put(&r->tab, (int)pid, g) != 0) {
    srv_watch_set(&srv->loop, &g->w, 0);
    close(fd);
    free(g);
    return ENOMEM;
  }
  keeper_note(srv, pid, 1);
  return 0;
}

/* ---- Who is left ----------------------------------------------------------
 */

/* Appends the pids in /proc/self/task/T/children of every thread T. */
static int read_children(struct srv_reaper *r) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;

  r->nkids = 0;
  if (d == NULL) {
    return -1;
  }
  while ((e = readdir(d)) != NULL) {
    char path[300];
    size_t len = 0;
    char *s;
    int fd;

    if (e->d_name[0] < '1' || e->d_name[0] > '9') {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/self/task/%s/children", e->d_name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      continue;
    }
    for (;;) {
      ssize_t n;

      if (len + 4096 > r->buf_cap) {
        size_t cap = r->buf_cap == 0 ? 16384 : r->buf_cap * 2;
        char *b = realloc(r->buf, cap);

        if (b == NULL) {
          break;
        }
        r->buf = b;
        r->buf_cap = cap;
      }
      n = read(fd, r->buf + len, r->buf_cap - len - 1);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      len += (size_t)n;
    }
    close(fd);
    if (r->buf == NULL) {
      continue;
    }
    r->buf[len] = '\0';
    for (s = r->buf; *s != '\0';) {
      char *end;
      long pid = strtol(s, &end, 10);

      if (end == s) {
        break;
      }
      s = end;
      if (r->nkids == r->kids_cap) {
        size_t cap = r->kids_cap == 0 ? 256 : r->kids_cap * 2;
        pid_t *k = realloc(r->kids, cap * sizeof(*k));

        if (k == NULL) {
          break;
        }
        r->kids = k;
        r->kids_cap = cap;
      }
      r->kids[r->nkids++] = (pid_t)pid;
    }
  }
  closedir(d);
  return 0;
}

/* The session of |pid| (field 6 of its stat), or -1. */
static long session_of(pid_t pid) {
  char path[64];
  char buf[512];
  char *rp;
  char state;
  long ppid, pgrp, sid;
  ssize_t n;
  int fd;

  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -1;
  }
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) {
    return -1;
  }
  buf[n] = '\0';
  /* "pid (comm) state ppid pgrp session ..."; comm may hold anything. */
  rp = strrchr(buf, ')');
  if (rp == NULL ||
      sscanf(rp + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &sid) != 4 ||
      state == 'Z' || state == 'X') {
    return -1;
  }
  return sid;
}

/* Reaps the children that are no leader of ours (they came to us when
   their parents ended), and lets go of the held groups none of our
   children belongs to any more. */
static void check(srv_server *srv) {
  struct srv_reaper *r = srv->reaper;
  srv_link *l;
  srv_link *next;
  size_t i;

  srv_timer_cancel(&srv->loop, &r->check_t);
  r->gen++;
  if (read_children(r) != 0) {
    return; /* no /proc: the groups stay held (signals still safe) */
  }
  for (i = 0; i < r->nkids; i++) {
    pid_t pid = r->kids[i];
    grp *g;
    long sid;
    int ws;

    if (find(r, pid) != NULL) {
      continue; /* a leader: its pidfd tells its end */
    }
    if (waitpid(pid, &ws, WNOHANG) == pid) {
      continue;
    }
    sid = session_of(pid);
    g = sid > 0 ? find(r, (pid_t)sid) : NULL;
    if (g != NULL) {
      g->seen = r->gen;
    }
  }
  for (l = r->held.next; l != &r->held; l = next) {
    grp *g = SRV_CONTAINER(l, grp, held_link);

    next = l->next;
    if (g->seen != r->gen) {
      group_done(g); /* takes out |g| only */
    }
  }
}

static void on_check(srv_timer *t) {
  struct srv_reaper *r = SRV_CONTAINER(t, struct srv_reaper, check_t);

  check(r->srv);
}

void srv_reap_children(srv_server *srv) {
  if (reaper(srv) != NULL) {
    arm_check(srv);
  }
}

void srv_reap_sync(srv_server *srv) {
  struct srv_reaper *r = srv->reaper;
  sigset_t pend;

  if (r == NULL) {
    return;
  }
  if (srv_timer_armed(&r->check_t) ||
      (sigpending(&pend) == 0 && sigismember(&pend, SIGCHLD))) {
    check(srv);
  }
}

void srv_reap_signal_all(srv_server *srv, int sig) {
  struct srv_reaper *r = srv->reaper;
  srv_link *l;

  if (r == NULL) {
    return;
  }
  for (l = r->held.next; l != &r->held; l = l->next) {
    kill(-SRV_CONTAINER(l, grp, held_link)->pid, sig);
  }
}

void srv_reap_forget(srv_server *srv, pid_t pid) {
  grp *g = find(srv->reaper, pid);

  if (g != NULL) {
    g->exited = 1;
    g->reaped = 1;
    group_done(g);
  }
}

void srv_reap_free(srv_server *srv) {
  struct srv_reaper *r = srv->reaper;
  size_t i;

  if (r == NULL) {
    return;
  }
  srv_timer_cancel(&srv->loop, &r->check_t);
  for (i = 0; i < r->tab.cap; i++) {
    grp *g = r->tab.slot[i].val;

    if (g != NULL) {
      if (g->w.fd >= 0) {
        srv_watch_set(&srv->loop, &g->w, 0);
        close(g->w.fd);
      }
      free(g);
    }
  }
  srv_itab_free(&r->tab);
  free(r->kids);
  free(r->buf);
  free(r);
  srv->reaper = NULL;
}
