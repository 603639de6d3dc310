/* The filesystem.Filesystem RPCs, as envd answers them (e2b-dev/infra
   packages/envd/internal/services/filesystem, read for its behaviour):
   Stat, MakeDir, Move, ListDir, Remove, WatchDir (a server stream on
   inotify) and the polling watchers (CreateWatcher, GetWatcherEvents,
   RemoveWatcher).  A normal service of the typed stubs
   (gen/filesystem/filesystem.conch.h) on the server core.  This file holds
   the paths, the user's identity, entries, the unary RPCs and the
   service; the watchers are serve_fs_watch.c's.

   Every RPC acts as the request's user, with the user rules of Start: a
   server that is not root acts as its own user only, a root server as
   the user it may run processes as (--user, --allow-user).  A root server
   takes the user's filesystem identity (setfsuid, setfsgid and the user's
   groups) for the call's system calls, so that the kernel decides what
   the user may see and change, and gives it back before the next event of
   the loop (everything runs on one thread).  Paths resolve as envd's: an
   empty one is --workdir or the home directory, `~` and `~/x` the home
   directory, a relative one under it. */
#include "serve_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

/* A ListDir answer larger than this is refused (resource_exhausted). */
#define FS_LIST_BYTES (16u << 20)
/* The xattr names and values read per entry. */
#define FS_XATTR_BYTES 65536
#define XATTR_PREFIX "user.e2b."

/* ---- Paths ------------------------------------------------------------------ */

void srv_path_clean(char *path) {
  size_t r = 0;
  size_t w = 0;
  int abs = path[0] == '/';
  size_t floor = abs ? 1 : 0;

  if (abs) {
    r = w = 1;
  }
  while (path[r] != '\0') {
    size_t n = strcspn(path + r, "/");
    int dotdot = n == 2 && path[r] == '.' && path[r + 1] == '.';

    if (n == 0 || (n == 1 && path[r] == '.') || (dotdot && w > floor)) {
      r += n + (path[r + n] == '/');
      if (dotdot) {
        w--; /* the '/' after the previous element */
        while (w > floor && path[w - 1] != '/') {
          w--;
        }
      }
      continue;
    }
    if (dotdot && abs) {
      r += n + (path[r + n] == '/'); /* "/.." is "/" */
      continue;
    }
    memmove(path + w, path + r, n);
    w += n;
    r += n;
    if (dotdot) {
      floor = w + 1; /* a leading ".." of a relative path stays */
    }
    if (path[r] == '/') {
      r++;
      path[w++] = '/';
    }
  }
  if (w > 1 && path[w - 1] == '/') {
    w--;
  }
  if (w == 0) {
    path[w++] = '.';
  }
  path[w] = '\0';
}

char *srv_path_join(const char *a, const char *b) {
  size_t na = strlen(a);
  size_t nb = strlen(b);
  char *p = malloc(na + nb + 2);

  if (p == NULL) {
    return NULL;
  }
  memcpy(p, a, na);
  p[na] = '/';
  memcpy(p + na + 1, b, nb + 1);
  srv_path_clean(p);
  return p;
}

/* envd's ExpandAndResolve: "" is --workdir (else the home directory), `~`
   and `~/x` are the home directory's, `~user` is refused, an absolute
   path stays as given (the kernel resolves its ".."), a relative one is
   joined to the home directory and cleaned. */
static conch_code resolve(const srv_server *srv, const srv_user *u,
                          const char *in, char **out, char *err,
                          size_t errlen) {
  char *p;

  if (in == NULL || in[0] == '\0') {
    in = srv->cfg.workdir != NULL ? srv->cfg.workdir : "";
  }
  if (in[0] == '~') {
    if (in[1] != '\0' && in[1] != '/') {
      snprintf(err, errlen,
               "failed to expand path '%s' for user '%s': cannot expand "
               "user-specific home dir",
               in, u->name);
      return CONCH_CODE_INVALID_ARGUMENT;
    }
    p = srv_path_join(u->home, in + 1);
  } else if (in[0] == '/') {
    p = strdup(in);
  } else {
    p = srv_path_join(u->home, in);
  }
  if (p == NULL) {
    snprintf(err, errlen, "out of memory");
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  }
  *out = p;
  return CONCH_CODE_OK;
}

/* Go's text of an errno: strerror, lower case first ("no such file or
   directory"). */
const char *srv_fs_go_err(int e, char *buf, size_t n) {
  snprintf(buf, n, "%s", strerror(e));
  if (buf[0] >= 'A' && buf[0] <= 'Z') {
    buf[0] = (char)(buf[0] - 'A' + 'a');
  }
  return buf;
}

/* The code of a failed system call: envd's (not_found, else |other|),
   and permission_denied for what the user may not do (envd, as root,
   rarely meets it). */
conch_code srv_fs_errno_code(int e, conch_code other) {
  if (e == ENOENT) {
    return CONCH_CODE_NOT_FOUND;
  }
  if (e == EACCES || e == EPERM || e == EROFS) {
    return CONCH_CODE_PERMISSION_DENIED;
  }
  if (e == ENOMEM || e == ENOSPC || e == EDQUOT || e == EMFILE ||
      e == ENFILE) {
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  }
  return other;
}

/* ---- The user's filesystem identity ----------------------------------------- */

/* Whether calls of |u| need the switch: a root server acting for another
   user. */
static int must_switch(const srv_server *srv, const srv_user *u) {
  return srv->euid == 0 && u->uid != 0;
}

/* Takes |u|'s filesystem identity.  Returns 0 or -1 (nothing changed). */
int srv_fs_as_user(const srv_server *srv, const srv_user *u) {
  if (!must_switch(srv, u)) {
    return 0;
  }
  /* The raw system call: this thread only, no signal to other threads. */
  if (syscall(SYS_setgroups, (size_t)u->ngroups, u->groups) != 0) {
    return -1;
  }
  (void)setfsgid(u->gid);
  (void)setfsuid(u->uid);
  if ((gid_t)setfsgid((gid_t)-1) != u->gid ||
      (uid_t)setfsuid((uid_t)-1) != u->uid) {
    (void)setfsuid(0);
    (void)setfsgid(0);
    (void)syscall(SYS_setgroups, (size_t)srv->fs->ngroups, srv->fs->groups);
    return -1;
  }
  return 0;
}

/* Gives the server's identity back; a server that cannot must not go on
   as someone else. */
void srv_fs_as_server(const srv_server *srv, const srv_user *u) {
  if (!must_switch(srv, u)) {
    return;
  }
  (void)setfsuid(0);
  (void)setfsgid(0);
  if (setfsuid((uid_t)-1) != 0 || setfsgid((gid_t)-1) != 0 ||
      syscall(SYS_setgroups, (size_t)srv->fs->ngroups, srv->fs->groups) !=
          0) {
    fprintf(stderr, "conch serve: cannot take its own identity back\n");
    abort();
  }
}

/* ---- Entries ------------------------------------------------------------------ */

/* Go's os.FileMode.String(): the type letters "dalTLDpSugct?" that apply,
   or "-", then rwxrwxrwx. */
static void mode_string(mode_t m, char out[24]) {
  size_t n = 0;
  const char *rwx = "rwxrwxrwx";

  if (S_ISDIR(m)) {
    out[n++] = 'd';
  }
  if (S_ISLNK(m)) {
    out[n++] = 'L';
  }
  if (S_ISBLK(m) || S_ISCHR(m)) {
    out[n++] = 'D';
  }
  if (S_ISFIFO(m)) {
    out[n++] = 'p';
  }
  if (S_ISSOCK(m)) {
    out[n++] = 'S';
  }
  if (m & S_ISUID) {
    out[n++] = 'u';
  }
  if (m & S_ISGID) {
    out[n++] = 'g';
  }
  if (S_ISCHR(m)) {
    out[n++] = 'c';
  }
  if (m & S_ISVTX) {
    out[n++] = 't';
  }
  if (n == 0) {
    out[n++] = '-';
  }
  for (int i = 0; i < 9; i++) {
    out[n++] = (m & (1u << (8 - i))) ? rwx[i] : '-';
  }
  out[n] = '\0';
}

static Filesystem__FileType file_type(mode_t m) {
  if (S_ISREG(m)) {
    return FILESYSTEM__FILE_TYPE__FILE_TYPE_FILE;
  }
  if (S_ISDIR(m)) {
    return FILESYSTEM__FILE_TYPE__FILE_TYPE_DIRECTORY;
  }
  if (S_ISLNK(m)) {
    return FILESYSTEM__FILE_TYPE__FILE_TYPE_SYMLINK;
  }
  return FILESYSTEM__FILE_TYPE__FILE_TYPE_UNSPECIFIED;
}

static int utf8_ok(const char *s, size_t n) {
  size_t i = 0;

  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t k;
    uint32_t cp;

    if (c < 0x80) {
      i++;
      continue;
    }
    if ((c & 0xe0) == 0xc0) {
      k = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      k = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      k = 3;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (i + k >= n) {
      return 0;
    }
    for (size_t j = 1; j <= k; j++) {
      unsigned char d = (unsigned char)s[i + j];
      if ((d & 0xc0) != 0x80) {
        return 0;
      }
      cp = (cp << 6) | (d & 0x3f);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) ||
        (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return 0;
    }
    i += k + 1;
  }
  return 1;
}


void srv_fs_entry_clear(fs_entry *x) {
  free(x->name);
  free(x->path);
  free(x->target);
  free(x->md);
  free(x->mdp);
  free(x->xattrs);
  memset(x, 0, sizeof(*x));
}

/* The user.e2b.* xattrs of |path| (following a symlink, as envd), best
   effort: none on any failure, non-UTF-8 ones skipped. */
void srv_fs_entry_metadata(fs_entry *x, const char *path) {
  char names[FS_XATTR_BYTES];
  ssize_t n = listxattr(path, names, sizeof(names));
  size_t cnt = 0, used = 0;
  char *buf;

  if (n <= 0) {
    return;
  }
  for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
    cnt += strncmp(names + i, XATTR_PREFIX, sizeof(XATTR_PREFIX) - 1) == 0;
  }
  if (cnt == 0) {
    return;
  }
  buf = malloc(2 * FS_XATTR_BYTES);
  x->md = calloc(cnt, sizeof(*x->md));
  x->mdp = calloc(cnt, sizeof(*x->mdp));
  if (buf == NULL || x->md == NULL || x->mdp == NULL) {
    free(buf);
    free(x->md);
    free(x->mdp);
    x->md = NULL;
    x->mdp = NULL;
    return;
  }
  x->xattrs = buf;
  for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
    const char *nm = names + i;
    size_t kl = strlen(nm) - (sizeof(XATTR_PREFIX) - 1);
    size_t room;
    ssize_t vl;
    char *k, *v;

    if (strncmp(nm, XATTR_PREFIX, sizeof(XATTR_PREFIX) - 1) != 0 ||
        used + kl + 2 >= 2 * FS_XATTR_BYTES) {
      continue;
    }
    k = buf + used;
    memcpy(k, nm + sizeof(XATTR_PREFIX) - 1, kl + 1);
    v = k + kl + 1;
    room = 2 * FS_XATTR_BYTES - used - kl - 2;
    vl = getxattr(path, nm, v, room);
    if (vl < 0 || !utf8_ok(k, kl) || !utf8_ok(v, (size_t)vl) ||
        memchr(v, '\0', (size_t)vl) != NULL) {
      continue;
    }
    v[vl] = '\0';
    used += kl + 1 + (size_t)vl + 1;
    filesystem__entry_info__metadata_entry__init(&x->md[x->e.n_metadata]);
    x->md[x->e.n_metadata].key = k;
    x->md[x->e.n_metadata].value = v;
    x->mdp[x->e.n_metadata] = &x->md[x->e.n_metadata];
    x->e.n_metadata++;
  }
  x->e.metadata = x->mdp;
}

/* envd's entryInfo(|path|): lstat'ed; a symlink has its target (resolved
   all the way, else itself) and the type and permission bits of what it
   points at (unspecified and 0 when that cannot be had).  Returns 0, or
   the errno of the lstat. */
int srv_fs_entry_info(const char *path, fs_entry *x) {
  struct stat sb, tb;
  struct passwd pw, *pwr = NULL;
  struct group gr, *grr = NULL;
  char buf[4096];
  const char *base;
  size_t n;

  memset(x, 0, sizeof(*x));
  if (lstat(path, &sb) != 0) {
    return errno;
  }
  filesystem__entry_info__init(&x->e);
  n = strlen(path);
  while (n > 1 && path[n - 1] == '/') {
    n--;
  }
  base = path + n;
  while (base > path && base[-1] != '/') {
    base--;
  }
  x->name = n == 1 && path[0] == '/' ? strdup("/")
                                     : strndup(base, (size_t)(path + n - base));
  x->path = strdup(path);
  if (x->name == NULL || x->path == NULL) {
    srv_fs_entry_clear(x);
    return ENOMEM;
  }
  x->e.name = x->name;
  x->e.path = x->path;
  x->e.size = (int64_t)sb.st_size;
  if (S_ISLNK(sb.st_mode)) {
    x->target = realpath(path, NULL);
    if (x->target == NULL) {
      x->target = strdup(path);
      if (x->target == NULL) {
        srv_fs_entry_clear(x);
        return ENOMEM;
      }
    }
    x->e._symlink_target_case =
        FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET;
    x->e.symlink_target = x->target;
    if (stat(x->target, &tb) == 0) {
      x->e.type = file_type(tb.st_mode);
      x->e.mode = (uint32_t)(tb.st_mode & 0777);
    }
  } else {
    x->e.type = file_type(sb.st_mode);
    x->e.mode = (uint32_t)(sb.st_mode & 0777);
  }
  mode_string(sb.st_mode, x->perms);
  x->e.permissions = x->perms;
  if (getpwuid_r(sb.st_uid, &pw, buf, sizeof(buf), &pwr) == 0 && pwr != NULL) {
    snprintf(x->owner, sizeof(x->owner), "%s", pwr->pw_name);
  } else {
    snprintf(x->owner, sizeof(x->owner), "%lu", (unsigned long)sb.st_uid);
  }
  if (getgrgid_r(sb.st_gid, &gr, buf, sizeof(buf), &grr) == 0 && grr != NULL) {
    snprintf(x->group, sizeof(x->group), "%s", grr->gr_name);
  } else {
    snprintf(x->group, sizeof(x->group), "%lu", (unsigned long)sb.st_gid);
  }
  x->e.owner = x->owner;
  x->e.group = x->group;
  if (sb.st_mtim.tv_sec != 0 || sb.st_mtim.tv_nsec != 0) {
    google__protobuf__timestamp__init(&x->mtime);
    x->mtime.seconds = (int64_t)sb.st_mtim.tv_sec;
    x->mtime.nanos = (int32_t)sb.st_mtim.tv_nsec;
    x->e.modified_time = &x->mtime;
  }
  srv_fs_entry_metadata(x, path);
  return 0;
}

/* ---- Calls -------------------------------------------------------------------- */

void CONCH_PRINTF(3, 4)
    srv_fs_fail(conch_rpc *rpc, conch_code code, const char *fmt, ...) {
  conch_status st;
  va_list ap;

  conch_status_init(&st);
  va_start(ap, fmt);
  (void)conch_status_vsetf(&st, NULL, code, fmt, ap);
  va_end(ap);
  (void)conch_rpc_finish(rpc, &st);
  conch_status_clear(&st);
}

/* Sends the one response of a unary call and ends it. */
void srv_fs_reply(conch_rpc *rpc, const ProtobufCMessage *msg) {
  int rv = conch_rpc_send(rpc, msg);

  if (rv != 0) {
    srv_fs_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "cannot send: %s",
         conch_strerror(rv));
    return;
  }
  (void)conch_rpc_finish(rpc, NULL);
}

/* The request's user, under Start's rules.  Returns 0, or -1 with the call
   answered. */
static int begin(srv_server *srv, conch_rpc *rpc, srv_user *u) {
  char err[512];
  conch_code code;

  memset(u, 0, sizeof(*u));
  code = srv_request_user(srv, conch_rpc_request_headers(rpc), u, err,
                          sizeof(err));
  if (code != CONCH_CODE_OK) {
    srv_fs_fail(rpc, code, "%s", err);
    return -1;
  }
  if (srv->euid != 0 && u->uid != srv->euid) {
    srv_fs_fail(rpc, CONCH_CODE_PERMISSION_DENIED,
         "cannot act as user '%s': conch serve is not running as root",
         u->name);
    srv_user_clear(u);
    return -1;
  }
  if (!srv_user_allowed(srv, u->name, u->uid)) {
    srv_fs_fail(rpc, CONCH_CODE_PERMISSION_DENIED,
         "cannot act as user '%s': conch serve acts as its own user only "
         "(see --allow-user)",
         u->name);
    srv_user_clear(u);
    return -1;
  }
  if (srv_fs_as_user(srv, u) != 0) {
    srv_fs_fail(rpc, CONCH_CODE_INTERNAL, "cannot act as user '%s': %s", u->name,
         strerror(errno));
    srv_user_clear(u);
    return -1;
  }
  return 0;
}

static void end(srv_server *srv, srv_user *u) {
  srv_fs_as_server(srv, u);
  srv_user_clear(u);
}

/* begin() and the resolved |in| in |*path|.  Returns 0, or -1 with the
   call answered and the user given back. */
int srv_fs_begin_path(srv_server *srv, conch_rpc *rpc, srv_user *u,
                      const char *in, char **path) {
  char err[PATH_MAX + 256];
  conch_code code;

  if (begin(srv, rpc, u) != 0) {
    return -1;
  }
  code = resolve(srv, u, in, path, err, sizeof(err));
  if (code != CONCH_CODE_OK) {
    srv_fs_fail(rpc, code, "%s", err);
    end(srv, u);
    return -1;
  }
  return 0;
}

/* Answers the failed srv_fs_entry_info(|path|) with envd's words. */
static void entry_fail(conch_rpc *rpc, const char *path, int e) {
  char eb[128];

  if (e == ENOENT) {
    srv_fs_fail(rpc, CONCH_CODE_NOT_FOUND, "file not found: lstat %s: %s", path,
         srv_fs_go_err(e, eb, sizeof(eb)));
  } else {
    srv_fs_fail(rpc, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "error getting file info: lstat %s: %s", path,
         srv_fs_go_err(e, eb, sizeof(eb)));
  }
}

/* ---- Stat ---------------------------------------------------------------------- */

static void on_stat(Filesystem__Filesystem__Stat_Rpc rpc,
                    const Filesystem__StatRequest *req, void *ud) {
  srv_server *srv = ud;
  Filesystem__StatResponse resp = FILESYSTEM__STAT_RESPONSE__INIT;
  srv_user u;
  fs_entry x;
  char *path;
  int e;

  if (srv_fs_begin_path(srv, rpc.base, &u, req->path, &path) != 0) {
    return;
  }
  e = srv_fs_entry_info(path, &x);
  end(srv, &u);
  if (e != 0) {
    entry_fail(rpc.base, path, e);
  } else {
    resp.entry = &x.e;
    srv_fs_reply(rpc.base, &resp.base);
    srv_fs_entry_clear(&x);
  }
  free(path);
}

/* ---- MakeDir and Move ------------------------------------------------------------- */

/* envd's EnsureDirs: each missing directory of |path|, from the top, made
   with 0755 (as the user: theirs).  Returns 0, or an errno with the
   failing step in |what|. */
static int ensure_dirs(const char *path, char *what, size_t n) {
  char *p = strdup(path);
  char eb[128];
  size_t i;

  if (p == NULL) {
    return ENOMEM;
  }
  for (i = 1;; i++) {
    char c = p[i];
    struct stat sb;

    if (c != '/' && c != '\0') {
      continue;
    }
    p[i] = '\0';
    if (stat(p, &sb) != 0) {
      int e = errno;
      if (e != ENOENT) {
        snprintf(what, n, "failed to stat directory: stat %s: %s", p,
                 srv_fs_go_err(e, eb, sizeof(eb)));
        free(p);
        return e;
      }
      if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        e = errno;
        snprintf(what, n, "failed to create directory: mkdir %s: %s", p,
                 srv_fs_go_err(e, eb, sizeof(eb)));
        free(p);
        return e;
      }
    } else if (!S_ISDIR(sb.st_mode)) {
      snprintf(what, n, "path is a file: %s", p);
      free(p);
      return ENOTDIR;
    }
    p[i] = c;
    if (c == '\0') {
      break;
    }
  }
  free(p);
  return 0;
}

static void on_make_dir(Filesystem__Filesystem__MakeDir_Rpc rpc,
                        const Filesystem__MakeDirRequest *req, void *ud) {
  srv_server *srv = ud;
  Filesystem__MakeDirResponse resp = FILESYSTEM__MAKE_DIR_RESPONSE__INIT;
  char what[PATH_MAX + 128], eb[128];
  struct stat sb;
  srv_user u;
  fs_entry x;
  char *path;
  int e;

  if (srv_fs_begin_path(srv, rpc.base, &u, req->path, &path) != 0) {
    return;
  }
  if (stat(path, &sb) == 0) {
    end(srv, &u);
    if (S_ISDIR(sb.st_mode)) {
      srv_fs_fail(rpc.base, CONCH_CODE_ALREADY_EXISTS,
           "directory already exists: %s", path);
    } else {
      srv_fs_fail(rpc.base, CONCH_CODE_INVALID_ARGUMENT,
           "path already exists but it is not a directory: %s", path);
    }
    free(path);
    return;
  }
  e = errno;
  if (e != ENOENT) {
    end(srv, &u);
    srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "error getting file info: stat %s: %s", path,
         srv_fs_go_err(e, eb, sizeof(eb)));
    free(path);
    return;
  }
  e = ensure_dirs(path, what, sizeof(what));
  if (e == 0) {
    e = srv_fs_entry_info(path, &x);
    end(srv, &u);
    if (e != 0) {
      entry_fail(rpc.base, path, e);
    } else {
      resp.entry = &x.e;
      srv_fs_reply(rpc.base, &resp.base);
      srv_fs_entry_clear(&x);
    }
  } else {
    end(srv, &u);
    /* envd: internal; what the user may not do is permission_denied. */
    srv_fs_fail(rpc.base,
         e == ENOENT ? CONCH_CODE_INTERNAL : srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "%s", what);
  }
  free(path);
}

static char *dir_of(const char *path) {
  char *d = strdup(path);
  char *slash;

  if (d == NULL) {
    return NULL;
  }
  srv_path_clean(d);
  slash = strrchr(d, '/');
  if (slash == d) {
    d[1] = '\0';
  } else if (slash != NULL) {
    *slash = '\0';
  } else {
    strcpy(d, ".");
  }
  return d;
}

static void on_move(Filesystem__Filesystem__Move_Rpc rpc,
                    const Filesystem__MoveRequest *req, void *ud) {
  srv_server *srv = ud;
  Filesystem__MoveResponse resp = FILESYSTEM__MOVE_RESPONSE__INIT;
  char what[PATH_MAX + 128], err[PATH_MAX + 256], eb[128];
  char *src, *dst = NULL, *dir;
  conch_code code;
  srv_user u;
  fs_entry x;
  int e;

  if (srv_fs_begin_path(srv, rpc.base, &u, req->source, &src) != 0) {
    return;
  }
  code = resolve(srv, &u, req->destination, &dst, err, sizeof(err));
  if (code != CONCH_CODE_OK) {
    end(srv, &u);
    srv_fs_fail(rpc.base, code, "%s", err);
    free(src);
    return;
  }
  dir = dir_of(dst);
  e = dir == NULL ? ENOMEM : ensure_dirs(dir, what, sizeof(what));
  free(dir);
  if (e != 0) {
    end(srv, &u);
    srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL), "%s",
         e == ENOMEM ? "out of memory" : what);
  } else if (rename(src, dst) != 0) {
    e = errno;
    end(srv, &u);
    if (e == ENOENT) {
      srv_fs_fail(rpc.base, CONCH_CODE_NOT_FOUND,
           "source file not found: rename %s %s: %s", src, dst,
           srv_fs_go_err(e, eb, sizeof(eb)));
    } else {
      srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
           "error renaming: rename %s %s: %s", src, dst,
           srv_fs_go_err(e, eb, sizeof(eb)));
    }
  } else {
    e = srv_fs_entry_info(dst, &x);
    end(srv, &u);
    if (e != 0) {
      entry_fail(rpc.base, dst, e);
    } else {
      resp.entry = &x.e;
      srv_fs_reply(rpc.base, &resp.base);
      srv_fs_entry_clear(&x);
    }
  }
  free(src);
  free(dst);
}

/* ---- ListDir ------------------------------------------------------------------- */

typedef struct fs_list {
  fs_entry *v;
  size_t n, cap;
  size_t bytes; /* packed so far */
  int err;      /* an errno that ends the walk */
  char errpath[PATH_MAX];
} fs_list;

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in |dir|, sorted (as Go's WalkDir reads them), in |*out|.
   Returns the count, or -1 with errno. */
ssize_t srv_fs_read_names(const char *dir, char ***out) {
  DIR *d = opendir(dir);
  char **v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;

  if (d == NULL) {
    return -1;
  }
  while ((errno = 0, de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
      continue;
    }
    if (n == cap) {
      size_t nc = cap == 0 ? 32 : cap * 2;
      char **nv = realloc(v, nc * sizeof(*v));
      if (nv == NULL) {
        goto nomem;
      }
      v = nv;
      cap = nc;
    }
    v[n] = strdup(de->d_name);
    if (v[n] == NULL) {
      goto nomem;
    }
    n++;
  }
  if (errno != 0) {
    int e = errno;
    closedir(d);
    for (size_t i = 0; i < n; i++) {
      free(v[i]);
    }
    free(v);
    errno = e;
    return -1;
  }
  closedir(d);
  if (n > 0) {
    qsort(v, n, sizeof(*v), name_cmp);
  }
  *out = v;
  return (ssize_t)n;

nomem:
  closedir(d);
  for (size_t i = 0; i < n; i++) {
    free(v[i]);
  }
  free(v);
  errno = ENOMEM;
  return -1;
}

/* Adds the entries under |walk| (a real directory) to |l|, named under
   |shown| (the path the client asked for), |left| levels deep. */
static void walk(fs_list *l, const char *walk_dir, const char *shown,
                 uint32_t left) {
  char **names = NULL;
  ssize_t n = srv_fs_read_names(walk_dir, &names);

  if (n < 0) {
    /* The top is checked before; an unreadable directory further down is
       listed without its contents. */
    if (errno == ENOMEM) {
      l->err = ENOMEM;
    }
    return;
  }
  for (ssize_t i = 0; i < n && l->err == 0; i++) {
    char *wp = srv_path_join(walk_dir, names[i]);
    char *sp = srv_path_join(shown, names[i]);
    fs_entry *x;
    int e;

    if (wp == NULL || sp == NULL) {
      free(wp);
      free(sp);
      l->err = ENOMEM;
      break;
    }
    if (l->n == l->cap) {
      size_t nc = l->cap == 0 ? 64 : l->cap * 2;
      fs_entry *nv = realloc(l->v, nc * sizeof(*nv));
      if (nv == NULL) {
        free(wp);
        free(sp);
        l->err = ENOMEM;
        break;
      }
      l->v = nv;
      l->cap = nc;
    }
    x = &l->v[l->n];
    e = srv_fs_entry_info(wp, x);
    if (e == ENOENT) {
      free(wp); /* gone meanwhile: skipped, as envd */
      free(sp);
      continue;
    }
    if (e != 0) {
      l->err = e;
      snprintf(l->errpath, sizeof(l->errpath), "%s", wp);
      free(wp);
      free(sp);
      break;
    }
    free(x->path);
    x->path = sp;
    x->e.path = sp;
    l->n++;
    l->bytes += protobuf_c_message_get_packed_size(&x->e.base) + 8;
    if (l->bytes > FS_LIST_BYTES) {
      l->err = EOVERFLOW;
      free(wp);
      break;
    }
    /* Go's WalkDir does not follow symlinks. */
    if (left > 1 && x->e._symlink_target_case !=
                        FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET &&
        x->e.type == FILESYSTEM__FILE_TYPE__FILE_TYPE_DIRECTORY) {
      walk(l, wp, sp, left - 1);
    }
    free(wp);
  }
  for (ssize_t i = 0; i < n; i++) {
    free(names[i]);
  }
  free(names);
}

static void on_list_dir(Filesystem__Filesystem__ListDir_Rpc rpc,
                        const Filesystem__ListDirRequest *req, void *ud) {
  srv_server *srv = ud;
  Filesystem__ListDirResponse resp = FILESYSTEM__LIST_DIR_RESPONSE__INIT;
  uint32_t depth = req->depth == 0 ? 1 : req->depth;
  Filesystem__EntryInfo **ptrs = NULL;
  char eb[128];
  fs_list l;
  struct stat sb;
  srv_user u;
  char *path, *real = NULL;
  int e, dfd;

  if (srv_fs_begin_path(srv, rpc.base, &u, req->path, &path) != 0) {
    return;
  }
  memset(&l, 0, sizeof(l));
  real = realpath(path, NULL);
  if (real == NULL) {
    e = errno;
    end(srv, &u);
    if (e == ENOENT || e == ENOTDIR) {
      srv_fs_fail(rpc.base, CONCH_CODE_NOT_FOUND, "path not found: lstat %s: %s",
           path, srv_fs_go_err(e, eb, sizeof(eb)));
    } else if (e == ELOOP) {
      srv_fs_fail(rpc.base, CONCH_CODE_FAILED_PRECONDITION,
           "cyclic symlink or chain >255 links at \"%s\"", path);
    } else {
      srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
           "error resolving symlink: %s: %s", path,
           srv_fs_go_err(e, eb, sizeof(eb)));
    }
    free(path);
    return;
  }
  if (stat(real, &sb) != 0) {
    e = errno;
    end(srv, &u);
    srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "directory not found: stat %s: %s", real, srv_fs_go_err(e, eb, sizeof(eb)));
    goto out;
  }
  if (!S_ISDIR(sb.st_mode)) {
    end(srv, &u);
    srv_fs_fail(rpc.base, CONCH_CODE_INVALID_ARGUMENT, "path is not a directory: %s",
         real);
    goto out;
  }
  /* Opened as the user (access() would ask with the real uid). */
  dfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    e = errno;
    end(srv, &u);
    srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "error reading directory %s: open %s: %s", real, real,
         srv_fs_go_err(e, eb, sizeof(eb)));
    goto out;
  }
  close(dfd);
  /* The requested path stays the base of the entries' paths, cleaned as
     Go's filepath.Join does. */
  srv_path_clean(path);
  walk(&l, real, path, depth);
  end(srv, &u);
  if (l.err == EOVERFLOW) {
    srv_fs_fail(rpc.base, CONCH_CODE_RESOURCE_EXHAUSTED,
         "error reading directory %s: the listing is larger than %u bytes; "
         "ask for a smaller depth",
         real, (unsigned)FS_LIST_BYTES);
    goto out;
  }
  if (l.err != 0) {
    srv_fs_fail(rpc.base, srv_fs_errno_code(l.err, CONCH_CODE_INTERNAL),
         "error reading directory %s: %s: %s", real,
         l.errpath[0] != '\0' ? l.errpath : real,
         srv_fs_go_err(l.err, eb, sizeof(eb)));
    goto out;
  }
  ptrs = calloc(l.n + 1, sizeof(*ptrs));
  if (ptrs == NULL) {
    srv_fs_fail(rpc.base, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < l.n; i++) {
    ptrs[i] = &l.v[i].e;
  }
  resp.n_entries = l.n;
  resp.entries = ptrs;
  srv_fs_reply(rpc.base, &resp.base);

out:
  for (size_t i = 0; i < l.n; i++) {
    srv_fs_entry_clear(&l.v[i]);
  }
  free(l.v);
  free(ptrs);
  free(real);
  free(path);
}

/* ---- Remove -------------------------------------------------------------------- */

/* Go's os.RemoveAll below |dirfd|/|name|: nothing there is no error;
   symlinks are removed, never followed (openat with O_NOFOLLOW, so a
   directory swapped for a symlink meanwhile is not entered).  Returns 0
   or an errno. */
static int remove_at(int pfd, const char *name, int depth) {
  int fd, e = 0;
  DIR *d;
  struct dirent *de;

  if (unlinkat(pfd, name, 0) == 0 || errno == ENOENT) {
    return 0;
  }
  if (errno != EISDIR && errno != EPERM) {
    return errno;
  }
  if (depth > FS_MAX_DEPTH) {
    return ELOOP;
  }
  fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? 0 : errno == ENOTDIR ? EPERM : errno;
  }
  d = fdopendir(fd);
  if (d == NULL) {
    e = errno;
    close(fd);
    return e;
  }
  /* Entries are removed while the directory is read: read it again until
     a pass removes nothing more. */
  for (;;) {
    int removed = 0;
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
      int r;
      if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
        continue;
      }
      r = remove_at(dirfd(d), de->d_name, depth + 1);
      if (r != 0) {
        e = r;
      } else {
        removed = 1;
      }
    }
    if (!removed || e != 0) {
      break;
    }
  }
  closedir(d);
  if (unlinkat(pfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return e != 0 ? e : errno;
  }
  return 0;
}

static void on_remove(Filesystem__Filesystem__Remove_Rpc rpc,
                      const Filesystem__RemoveRequest *req, void *ud) {
  srv_server *srv = ud;
  Filesystem__RemoveResponse resp = FILESYSTEM__REMOVE_RESPONSE__INIT;
  char *path, *dir = NULL, *base;
  char eb[128];
  size_t n;
  srv_user u;
  int e = 0, dfd;

  if (srv_fs_begin_path(srv, rpc.base, &u, req->path, &path) != 0) {
    return;
  }
  n = strlen(path);
  /* Go refuses a path whose last element is "." (RemoveAll). */
  if (strcmp(path, ".") == 0 ||
      (n >= 2 && path[n - 1] == '.' && path[n - 2] == '/')) {
    end(srv, &u);
    srv_fs_fail(rpc.base, CONCH_CODE_INTERNAL,
         "error removing file or directory: RemoveAll %s: invalid argument",
         path);
    free(path);
    return;
  }
  dir = strdup(path);
  if (dir != NULL) {
    srv_path_clean(dir);
  }
  if (dir != NULL && strcmp(dir, "/") == 0) {
    end(srv, &u);
    srv_fs_fail(rpc.base, CONCH_CODE_INVALID_ARGUMENT,
         "error removing file or directory: refusing to remove /");
    free(dir);
    free(path);
    return;
  }
  base = dir != NULL ? strrchr(dir, '/') : NULL;
  if (dir == NULL || base == NULL) {
    e = ENOMEM;
  } else {
    *base++ = '\0';
    dfd = open(dir[0] != '\0' ? dir : "/",
               O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
      e = errno == ENOENT || errno == ENOTDIR ? 0 : errno;
    } else {
      e = remove_at(dfd, base, 0);
      close(dfd);
    }
  }
  end(srv, &u);
  if (e != 0) {
    srv_fs_fail(rpc.base, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "error removing file or directory: unlinkat %s: %s", path,
         srv_fs_go_err(e, eb, sizeof(eb)));
  } else {
    srv_fs_reply(rpc.base, &resp.base);
  }
  free(dir);
  free(path);
}

/* ---- The service ---------------------------------------------------------------- */

int srv_fs_start(srv_server *srv) {
  srv_fs *fs = calloc(1, sizeof(*fs));
  int n;

  if (fs == NULL) {
    return CONCH_ERR_NOMEM;
  }
  fs->srv = srv;
  srv_list_init(&fs->watchers);
  srv_watch_init(&fs->in_w, -1, NULL);
  n = getgroups(0, NULL);
  if (n > 0) {
    fs->groups = calloc((size_t)n, sizeof(*fs->groups));
    if (fs->groups == NULL) {
      free(fs);
      return CONCH_ERR_NOMEM;
    }
    fs->ngroups = getgroups(n, fs->groups);
    if (fs->ngroups < 0) {
      fs->ngroups = 0;
    }
  }
  fs->h.stat.on_request = on_stat;
  fs->h.make_dir.on_request = on_make_dir;
  fs->h.move.on_request = on_move;
  fs->h.list_dir.on_request = on_list_dir;
  fs->h.remove.on_request = on_remove;
  srv_fs_watch_handlers(&fs->h);
  fs->h.user_data = srv;
  srv->fs = fs;
  return filesystem__filesystem__register(srv->core, &fs->h);
}

void srv_fs_free(srv_server *srv) {
  srv_fs *fs = srv->fs;

  if (fs == NULL) {
    return;
  }
  srv_fs_watchers_free(fs);
  free(fs->groups);
  free(fs);
  srv->fs = NULL;
}
