/* Starting a process the way envd does: as `/bin/sh -c 'exec "$@"' -- cmd
   args` (an unknown command is then the shell's "not found" on stderr and
   exit 127, not a start error), with envd's environment (PATH, HOME, USER,
   LOGNAME, then the request's envs, the last one winning) and its cwd
   rules, as the requested user.  Each child leads its own session and
   process group (with --signal-pid-only, as envd: only PTY children).  A
   failure between fork and exec comes back through a close-on-exec pipe, as
   Go's os/exec does it; unlike Go we do not wait on that pipe here: the
   caller watches it in the loop (EOF: exec happened), so a slow exec never
   holds up the other clients. */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pty.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PATH                                                           \
  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ---- Users ----------------------------------------------------------------
 */

static int user_fill(const struct passwd *pw, srv_user *u) {
  int n = 32;

  memset(u, 0, sizeof(*u));
  u->uid = pw->pw_uid;
  u->gid = pw->pw_gid;
  u->name = strdup(pw->pw_name);
  u->home = strdup(pw->pw_dir);
  if (u->name == NULL || u->home == NULL) {
    srv_user_clear(u);
    return -2;
  }
  /* Supplementary groups are looked up here: initgroups() in the child
     would read /etc/group between fork and exec. */
  for (;;) {
    gid_t *g = realloc(u->groups, (size_t)n * sizeof(*g));
    int want = n;

    if (g == NULL) {
      srv_user_clear(u);
      return -2;
    }
    u->groups = g;
    if (getgrouplist(u->name, u->gid, u->groups, &want) >= 0) {
      u->ngroups = want;
      return 0;
    }
    if (want <= n) {
      n *= 2;
    } else {
      n = want;
    }
    if (n > 65536) {
      u->ngroups = 0;
      return 0;
    }
  }
}

static int user_get(const char *name, uid_t uid, srv_user *u) {
  struct passwd pw;
  struct passwd *res = NULL;
  char buf[16384];
  int rv;

  memset(u, 0, sizeof(*u));
  if (name != NULL) {
    rv = getpwnam_r(name, &pw, buf, sizeof(buf), &res);
  } else {
    rv = getpwuid_r(uid, &pw, buf, sizeof(buf), &res);
  }
  if (rv != 0 || res == NULL) {
    return -1;
  }
  return user_fill(res, u);
}

int srv_user_lookup(const char *name, srv_user *u) {
  return user_get(name, 0, u);
}

int srv_user_by_uid(uid_t uid, srv_user *u) { return user_get(NULL, uid, u); }

void srv_user_clear(srv_user *u) {
  free(u->name);
  free(u->home);
  free(u->groups);
  memset(u, 0, sizeof(*u));
}

/* ---- cwd ------------------------------------------------------------------
 */

conch_code srv_resolve_cwd(const char *cwd, const srv_user *u, char **out,
                           char *err, size_t errlen) {
  struct stat sb;
  char *path;
  conch_code code = srv_cwd_path(cwd, u, &path, err, errlen);

  if (code != CONCH_CODE_OK) {
    return code;
  }
  if (stat(path, &sb) != 0 && errno == ENOENT) {
    snprintf(err, errlen, "cwd '%s' does not exist", path);
    free(path);
    return CONCH_CODE_INVALID_ARGUMENT;
  }
  *out = path;
  return CONCH_CODE_OK;
}

/* ---- Environment -----------------------------------------------------------
 */

typedef struct env_list {
  char **v;
  size_t n;
  size_t cap;
} env_list;

static void env_free(env_list *e) {
  size_t i;

  for (i = 0; i < e->n; i++) {
    free(e->v[i]);
  }
  free(e->v);
}

/* Adds KEY=VALUE; a key already there gets the new value (the last one
   wins, as with Go's exec and envd). */
static int env_put(env_list *e, const char *key, const char *value) {
  size_t nk = strlen(key);
  size_t nv = strlen(value);
  char *s = malloc(nk + nv + 2);
  size_t i;

  if (s == NULL) {
    return -1;
  }
  memcpy(s, key, nk);
  s[nk] = '=';
  memcpy(s + nk + 1, value, nv + 1);
  for (i = 0; i < e->n; i++) {
    if (strncmp(e->v[i], s, nk + 1) == 0) {
      free(e->v[i]);
      e->v[i] = s;
      return 0;
    }
  }
  if (e->n + 2 > e->cap) {
    size_t cap = e->cap == 0 ? 16 : e->cap * 2;
    char **v = realloc(e->v, cap * sizeof(*v));

    if (v == NULL) {
      free(s);
      return -1;
    }
    e->v = v;
    e->cap = cap;
  }
  e->v[e->n++] = s;
  e->v[e->n] = NULL;
  return 0;
}

static int env_build(env_list *e, const Process__StartRequest *req,
                     const srv_user *u) {
  const char *path = getenv("PATH");
  const Process__ProcessConfig *cfg = req->process;
  size_t i;
  int rv = 0;

  memset(e, 0, sizeof(*e));
  rv |= env_put(e, "PATH", path != NULL ? path : DEFAULT_PATH);
  rv |= env_put(e, "HOME", u->home);
  rv |= env_put(e, "USER", u->name);
  rv |= env_put(e, "LOGNAME", u->name);
  for (i = 0; cfg != NULL && i < cfg->n_envs; i++) {
    rv |= env_put(e, cfg->envs[i]->key, cfg->envs[i]->value);
  }
  return rv != 0 ? -1 : 0;
}

/* ---- fork/exec -------------------------------------------------------------
 */

typedef struct child_plan {
  const char *const *argv;
  char *const *envp;
  const char *cwd;
  const srv_user *user;
  int switch_user;
  int fds[3];       /* become 0, 1, 2 */
  int pty;          /* fds[] is the PTY slave: make it the controlling tty */
  int setsid;       /* a session (and group) of its own */
  int report;       /* write end of the error pipe */
  pid_t server;     /* our pid, to notice that we died before prctl() */
  int64_t delay_ms; /* tests: wait this long before exec */
} child_plan;

static void child_fail(const child_plan *c, int err) {
  ssize_t n = write(c->report, &err, sizeof(err));

  (void)n;
  _exit(127);
}

/* Between fork and exec: async-signal-safe calls only. */
static void child_run(const child_plan *c) {
  sigset_t none;
  int moved[3];
  int i;

  if (c->setsid && setsid() < 0) {
    child_fail(c, errno);
  }
  if (c->pty && ioctl(c->fds[0], TIOCSCTTY, 0) != 0) {
    child_fail(c, errno);
  }
  /* Lift the sources above 2 first, so no dup2 overwrites another. */
  for (i = 0; i < 3; i++) {
    moved[i] = fcntl(c->fds[i], F_DUPFD_CLOEXEC, 3);
    if (moved[i] < 0) {
      child_fail(c, errno);
    }
  }
  for (i = 0; i < 3; i++) {
    if (dup2(moved[i], i) < 0) {
      child_fail(c, errno);
    }
  }
  if (c->switch_user) {
    if (setgroups((size_t)c->user->ngroups, c->user->groups) != 0 ||
        setgid(c->user->gid) != 0 || setuid(c->user->uid) != 0) {
      child_fail(c, errno);
    }
  }
  /* Dies with the server (kill -9 too).  After setuid(), which clears it;
     a set-user-ID program run later clears it as well. */
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != c->server) {
    _exit(127);
  }
  if (chdir(c->cwd) != 0) {
    child_fail(c, errno);
  }
  /* The server blocks the signals it reads from a signalfd and ignores
     SIGPIPE; both would be inherited. */
  for (i = 1; i < NSIG; i++) {
    signal(i, SIG_DFL);
  }
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* Descriptors a library opened without O_CLOEXEC stay out of the child;
     failing this (old kernel) is harmless, ours are all close-on-exec. */
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (c->delay_ms > 0) {
    struct timespec ts;

    ts.tv_sec = (time_t)(c->delay_ms / 1000);
    ts.tv_nsec = (long)(c->delay_ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  execve(c->argv[0], (char *const *)c->argv, c->envp);
  child_fail(c, errno);
}

static const char **make_argv(const Process__StartRequest *req) {
  const Process__ProcessConfig *cfg = req->process;
  size_t nargs = cfg != NULL ? cfg->n_args : 0;
  const char **argv = calloc(nargs + 6, sizeof(*argv));
  size_t i;

  if (argv == NULL) {
    return NULL;
  }
  argv[0] = "/bin/sh";
  argv[1] = "-c";
  argv[2] = "exec \"$@\"";
  argv[3] = "--";
  argv[4] = cfg != NULL ? cfg->cmd : "";
  for (i = 0; i < nargs; i++) {
    argv[5 + i] = cfg->args[i];
  }
  return argv;
}

static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);

  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

typedef struct spawn_fds {
  int child[3];  /* the child's 0, 1, 2 (the same slave thrice for a PTY) */
  int parent[3]; /* our ends: stdin writer, stdout reader, stderr reader */
  int report[2];
} spawn_fds;

static void fds_close(spawn_fds *f) {
  int i;

  for (i = 0; i < 3; i++) {
    close_fd(&f->child[i]);
    close_fd(&f->parent[i]);
  }
  close_fd(&f->report[0]);
  close_fd(&f->report[1]);
}

static int open_pty(spawn_fds *f, const Process__StartRequest *req) {
  struct winsize ws;
  int master;
  int slave;

  memset(&ws, 0, sizeof(ws));
  if (req->pty != NULL && req->pty->size != NULL) {
    ws.ws_col = (unsigned short)req->pty->size->cols;
    ws.ws_row = (unsigned short)req->pty->size->rows;
  }
  if (openpty(&master, &slave, NULL, NULL, &ws) != 0) {
    return -1;
  }
  fcntl(master, F_SETFD, FD_CLOEXEC);
  fcntl(slave, F_SETFD, FD_CLOEXEC);
  f->parent[1] = master;
  f->child[0] = slave;
  f->child[1] = slave;
  f->child[2] = slave;
  return set_nonblock(master);
}

static int open_pipes(spawn_fds *f, const Process__StartRequest *req) {
  int stdin_on =
      req->_stdin_case != PROCESS__START_REQUEST___STDIN_STDIN || req->stdin;
  int p[2];
  int i;

  for (i = 1; i < 3; i++) {
    if (pipe2(p, O_CLOEXEC) != 0) {
      return -1;
    }
    f->parent[i] = p[0];
    f->child[i] = p[1];
  }
  if (stdin_on) {
    if (pipe2(p, O_CLOEXEC) != 0) {
      return -1;
    }
    f->child[0] = p[0];
    f->parent[0] = p[1];
  } else {
    f->child[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (f->child[0] < 0) {
      return -1;
    }
  }
  for (i = 0; i < 3; i++) {
    if (f->parent[i] >= 0 && set_nonblock(f->parent[i]) != 0) {
      return -1;
    }
  }
  return 0;
}

/* The text of a failed start, as envd words it. */
static void start_error(const Process__StartRequest *req, const char *cwd,
                        int err, char *buf, size_t len) {
  const Process__ProcessConfig *cfg = req->process;
  char cmd[512];
  size_t used;
  size_t i;
  char why[256];

  snprintf(cmd, sizeof(cmd), "%s", cfg != NULL ? cfg->cmd : "");
  for (i = 0; cfg != NULL && i < cfg->n_args; i++) {
    used = strlen(cmd);
    snprintf(cmd + used, sizeof(cmd) - used, " %s", cfg->args[i]);
  }
  snprintf(why, sizeof(why), "%s", strerror(err));
  if (why[0] >= 'A' && why[0] <= 'Z') {
    why[0] = (char)(why[0] - 'A' + 'a'); /* Go's errno texts */
  }
  if (req->_pty_case == PROCESS__START_REQUEST___PTY_PTY) {
    unsigned cols = 0;
    unsigned rows = 0;

    if (req->pty != NULL && req->pty->size != NULL) {
      cols = req->pty->size->cols;
      rows = req->pty->size->rows;
    }
    snprintf(buf, len,
             "error starting pty with command '%s' in dir '%s' with '%u' "
             "cols and '%u' rows: fork/exec /bin/sh: %s",
             cmd, cwd, cols, rows, why);
    return;
  }
  snprintf(buf, len, "error starting process '%s': fork/exec /bin/sh: %s", cmd,
           why);
}

/* Out of descriptors, processes or memory is the server's state, not a
   fault in the request. */
static conch_code start_code(int err) {
  if (err < 0 || err == EMFILE || err == ENFILE || err == EAGAIN ||
      err == ENOMEM) {
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  }
  return CONCH_CODE_INVALID_ARGUMENT;
}

conch_code srv_spawn_error(const Process__StartRequest *req, const char *cwd,
                           int err, char *buf, size_t len) {
  start_error(req, cwd, err, buf, len);
  return start_code(err);
}

int srv_spawn_report(int fd) {
  int err = 0;
  ssize_t n;

  do {
    n = read(fd, &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) {
    return -1;
  }
  /* An errno is written whole (4 bytes < PIPE_BUF); anything else is the
     EOF of a successful exec (or of a child killed before it). */
  return n == (ssize_t)sizeof(err) && err > 0 ? err : 0;
}

conch_code srv_spawn(const Process__StartRequest *req, const srv_user *u,
                     int switch_user, int envd_groups, const char *cwd,
                     int64_t delay_ms, srv_spawned *out, char *err,
                     size_t errlen) {
  spawn_fds f = {{-1, -1, -1}, {-1, -1, -1}, {-1, -1}};
  int pty = req->_pty_case == PROCESS__START_REQUEST___PTY_PTY;
  const char **argv = make_argv(req);
  env_list env;
  child_plan plan;
  pid_t pid;
  int rv;
  int e;

  rv = env_build(&env, req, u);
  if (argv == NULL || rv != 0) {
    snprintf(err, errlen, "out of memory");
    e = -1;
    goto done;
  }
  rv = pty ? open_pty(&f, req) : open_pipes(&f, req);
  if (rv != 0 || pipe2(f.report, O_CLOEXEC) != 0 ||
      set_nonblock(f.report[0]) != 0) {
    e = errno;
    goto fail;
  }
  plan.argv = argv;
  plan.envp = env.v;
  plan.cwd = cwd;
  plan.user = u;
  plan.switch_user = switch_user;
  memcpy(plan.fds, f.child, sizeof(plan.fds));
  plan.pty = pty;
  /* envd: a PTY child gets a session, a piped one stays in our group. */
  plan.setsid = pty || !envd_groups;
  plan.report = f.report[1];
  plan.server = getpid();
  plan.delay_ms = delay_ms;
  pid = fork();
  if (pid < 0) {
    e = errno;
    goto fail;
  }
  if (pid == 0) {
    child_run(&plan);
  }
  /* The child has its ends: ours close now (the report's write end too,
     so that the child's exec is our EOF). */
  out->pid = pid;
  out->in_fd = f.parent[0];
  out->out_fd = f.parent[1];
  out->err_fd = f.parent[2];
  out->report_fd = f.report[0];
  f.parent[0] = f.parent[1] = f.parent[2] = -1;
  f.report[0] = -1;
  if (pty) {
    f.child[1] = f.child[2] = -1; /* one slave fd, closed once below */
  }
  e = 0;
  goto done;

fail:
  start_error(req, cwd, e, err, errlen);
  if (pty) {
    f.child[1] = f.child[2] = -1;
  }
done:
  fds_close(&f);
  free(argv);
  env_free(&env);
  if (e == 0) {
    return CONCH_CODE_OK;
  }
  return start_code(e);
}
