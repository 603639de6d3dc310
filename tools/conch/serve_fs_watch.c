/* WatchDir (a server stream on inotify) and the polling watchers
   (CreateWatcher, GetWatcherEvents, RemoveWatcher) of the
   filesystem.Filesystem service (serve_fs.c), as envd answers them.

   All the watchers of a server share one inotify instance (the kernel
   allows 128 per user, on a machine shared with everything else the user
   runs): a table maps each watch descriptor to the watchers that watch
   its directory (a directory watched by several has one descriptor,
   removed when the last of them lets go), and an event goes to each.

   Watchers are bounded: at most cfg.fs_max_watchers at a time (WatchDir
   streams and polling watchers together), a WatchDir stream whose client
   is more than WATCH_MAX bytes behind ends with internal (as envd's does
   when its inotify queue overflows; a shared queue cannot wait for the
   slowest reader), a polling watcher holds at
   most cfg.fs_max_events untaken events and FS_POLL_BYTES bytes of them
   (past that it stops with resource_exhausted, said by the next
   GetWatcherEvents) and goes after cfg.fs_idle_ms without a
   GetWatcherEvents.  A WatchDir watcher goes with its stream. */
#include "serve_fs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A WatchDir client this far behind is ended: about what the 1 MiB it
   was allowed before plus a full kernel queue (16,384 events) held. */
#define WATCH_MAX (2u << 20)
/* The packed events one polling watcher may hold. */
#define FS_POLL_BYTES (4u << 20)

typedef struct fs_watcher fs_watcher;

/* One watched directory of a watcher: its inotify wd and path. */
typedef struct fs_wd {
  int wd;
  char *path;
} fs_wd;

/* A pending event of a polling watcher: the packed FilesystemEvent. */
typedef struct fs_event {
  struct fs_event *next;
  size_t len;
  uint8_t data[];
} fs_event;

struct fs_watcher {
  srv_link link; /* fs->watchers */
  srv_fs *fs;
  int watching; /* its wds are in the table (until its end) */
  srv_user user;
  char *root; /* the watched path, as resolved */
  int recursive;
  int include_entry;
  fs_wd *wds;
  size_t nwds, capwds;
  /* WatchDir: its call, and the keepalive. */
  conch_rpc *rpc;
  int64_t keepalive_ms;
  srv_timer keepalive_t;
  /* Polling: the id, the events not taken, the end it met. */
  char id[48];
  fs_event *head, **tail;
  size_t nevents, event_bytes;
  conch_code err_code;
  char *err_msg;
  srv_timer idle_t;
};

/* ---- Watchers ------------------------------------------------------------------- */

#define IN_MASK                                                                \
  (IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_ATTRIB | IN_MODIFY |           \
   IN_MOVE_SELF | IN_DELETE | IN_DELETE_SELF | IN_EXCL_UNLINK)

static void watcher_free(fs_watcher *w);
static void on_inotify(srv_watch *sw, uint32_t events);
static void hidden_sweep(srv_fs *fs, int all);

/* ---- The shared instance and its table ------------------------------------ */

/* A watch descriptor and who watches it (each with its path for it, the
   watcher's own copy in its wds). */
typedef struct fs_sub {
  fs_watcher *w;
  const char *path;
} fs_sub;

struct fs_wdref {
  int wd;
  size_t nsubs, capsubs;
  fs_sub *subs;
};

static fs_wdref *wd_find(const srv_fs *fs, int wd) {
  return srv_itab_get(&fs->wdtab, wd);
}

/* The entry of |wd|, made if new.  NULL when out of memory. */
static fs_wdref *wd_ref(srv_fs *fs, int wd) {
  fs_wdref *r = wd_find(fs, wd);

  if (r != NULL) {
    return r;
  }
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    return NULL;
  }
  r->wd = wd;
  if (srv_itab_put(&fs->wdtab, wd, r) != 0) {
    free(r);
    return NULL;
  }
  return r;
}

/* Takes |r| out of the table and frees it. */
static void wd_drop(srv_fs *fs, fs_wdref *r) {
  srv_itab_del(&fs->wdtab, r->wd);
  free(r->subs);
  free(r);
}

static int sub_index(const fs_wdref *r, const fs_watcher *w) {
  for (size_t i = 0; i < r->nsubs; i++) {
    if (r->subs[i].w == w) {
      return (int)i;
    }
  }
  return -1;
}

/* |w| lets go of |wd|; the last one to removes the watch. */
static void wd_unsub(srv_fs *fs, fs_watcher *w, int wd) {
  fs_wdref *r = wd_find(fs, wd);
  int i;

  if (r == NULL || (i = sub_index(r, w)) < 0) {
    return;
  }
  r->subs[i] = r->subs[--r->nsubs];
  if (r->nsubs == 0) {
    (void)inotify_rm_watch(fs->in_w.fd, wd);
    wd_drop(fs, r);
  }
}

/* The shared instance, opened by the first watcher.  Returns 0 or an
   errno. */
static int inotify_open(srv_fs *fs) {
  int fd;

  if (fs->in_w.fd >= 0) {
    return 0;
  }
  fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    return errno;
  }
  srv_watch_init(&fs->in_w, fd, on_inotify);
  if (srv_watch_set(&fs->srv->loop, &fs->in_w, EPOLLIN) != 0) {
    int e = errno != 0 ? errno : ENOMEM;
    close(fd);
    fs->in_w.fd = -1;
    return e;
  }
  return 0;
}

/* Closed with the last watcher: an idle server holds no instance. */
static void inotify_close_idle(srv_fs *fs) {
  if (fs->nwatchers > 0 || fs->in_w.fd < 0) {
    return;
  }
  srv_watch_set(&fs->srv->loop, &fs->in_w, 0);
  close(fs->in_w.fd);
  fs->in_w.fd = -1;
  /* The table is empty: each watcher let go of its own. */
  srv_itab_free(&fs->wdtab);
  hidden_sweep(fs, 0);
}

/* |w| lets go of every directory it watches. */
static void watcher_unwatch(fs_watcher *w) {
  if (w->watching) {
    for (size_t i = 0; i < w->nwds; i++) {
      wd_unsub(w->fs, w, w->wds[i].wd);
    }
    w->watching = 0;
  }
  for (size_t i = 0; i < w->nwds; i++) {
    free(w->wds[i].path);
  }
  free(w->wds);
  w->wds = NULL;
  w->nwds = w->capwds = 0;
}

static void wd_forget(fs_watcher *w, int wd) {
  for (size_t i = 0; i < w->nwds; i++) {
    if (w->wds[i].wd == wd) {
      free(w->wds[i].path);
      w->wds[i] = w->wds[--w->nwds];
      return;
    }
  }
}

/* |v| (|*cap| elements of |size|, |n| used) with room for one more:
   itself, or moved and doubled (|*cap| updated).  NULL when out of
   memory (|v| is as it was). */
static void *room_for_one(void *v, size_t *cap, size_t n, size_t size) {
  size_t nc;
  void *nv;

  if (n < *cap) {
    return v;
  }
  nc = *cap == 0 ? 4 : *cap * 2;
  nv = realloc(v, nc * size);
  if (nv != NULL) {
    *cap = nc;
  }
  return nv;
}

/* |w| watches |path| by |wd| (just added to the instance).  Returns 0 or
   ENOMEM (then the watch is removed if nobody else has it). */
static int wd_sub(fs_watcher *w, int wd, const char *path) {
  srv_fs *fs = w->fs;
  fs_wdref *r = wd_ref(fs, wd);
  char *copy = NULL;
  fs_sub *subs;
  fs_wd *wds;

  if (r == NULL) {
    goto nomem;
  }
  if (sub_index(r, w) >= 0) {
    return 0; /* reached twice (a bind mount): watched once */
  }
  subs = room_for_one(r->subs, &r->capsubs, r->nsubs, sizeof(*subs));
  if (subs == NULL) {
    goto nomem;
  }
  r->subs = subs;
  wds = room_for_one(w->wds, &w->capwds, w->nwds, sizeof(*wds));
  if (wds == NULL) {
    goto nomem;
  }
  w->wds = wds;
  copy = strdup(path);
  if (copy == NULL) {
    goto nomem;
  }
  w->wds[w->nwds].wd = wd;
  w->wds[w->nwds].path = copy;
  w->nwds++;
  r->subs[r->nsubs].w = w;
  r->subs[r->nsubs].path = copy;
  r->nsubs++;
  return 0;

nomem:
  /* Nobody else has it (a new entry, or none made): the watch goes. */
  if (r == NULL || r->nsubs == 0) {
    (void)inotify_rm_watch(fs->in_w.fd, wd);
    if (r != NULL) {
      wd_drop(fs, r);
    }
  }
  return ENOMEM;
}

/* Adds |path| (and, recursive, the directories under it) to the watch.
   Returns 0 or an errno. */
static int watch_add(fs_watcher *w, const char *path, int depth) {
  int wd = inotify_add_watch(w->fs->in_w.fd, path, IN_MASK | IN_ONLYDIR);
  char **names = NULL;
  ssize_t n;

  if (wd < 0) {
    return errno;
  }
  if (wd_sub(w, wd, path) != 0) {
    return ENOMEM;
  }
  if (!w->recursive || depth > FS_MAX_DEPTH) {
    return 0;
  }
  n = srv_fs_read_names(path, &names);
  if (n < 0) {
    return errno == ENOMEM ? ENOMEM : 0; /* unreadable: its top only */
  }
  for (ssize_t i = 0; i < n; i++) {
    char *sub = srv_path_join(path, names[i]);
    struct stat sb;
    int e = 0;

    if (sub == NULL) {
      e = ENOMEM;
    } else if (lstat(sub, &sb) == 0 && S_ISDIR(sb.st_mode)) {
      e = watch_add(w, sub, depth + 1);
      if (e == ENOENT || e == EACCES || e == ENOTDIR) {
        e = 0; /* gone or closed to the user: not watched */
      }
    }
    free(sub);
    if (e != 0) {
      for (ssize_t j = i; j < n; j++) {
        free(names[j]);
      }
      free(names);
      return e;
    }
    free(names[i]);
  }
  free(names);
  return 0;
}

/* Ends the watcher with |code|: a WatchDir stream ends, a polling watcher
   stops watching and keeps the error for the next GetWatcherEvents. */
static void CONCH_PRINTF(3, 4)
    watcher_end(fs_watcher *w, conch_code code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (w->rpc != NULL) {
    conch_rpc *rpc = w->rpc;
    conch_rpc_set_data(rpc, NULL);
    w->rpc = NULL;
    watcher_free(w);
    srv_fs_fail(rpc, code, "%s", msg);
    return;
  }
  watcher_unwatch(w);
  if (w->err_msg == NULL) {
    w->err_code = code;
    w->err_msg = strdup(msg);
  }
}

/* Returns 0, or -1 when the watcher ended (and is freed). */
static int send_ws(fs_watcher *w, Filesystem__WatchDirResponse *r) {
  int rv = conch_rpc_send(w->rpc, &r->base);

  if (rv != 0) {
    watcher_end(w, CONCH_CODE_RESOURCE_EXHAUSTED, "cannot send: %s",
                conch_strerror(rv));
    return -1;
  }
  if (conch_rpc_queued(w->rpc) > WATCH_MAX) {
    watcher_end(w, CONCH_CODE_INTERNAL,
                "watcher error: fsnotify: queue or buffer overflow");
    return -1;
  }
  return 0;
}

static void on_watch_keepalive(srv_timer *t) {
  fs_watcher *w = SRV_CONTAINER(t, fs_watcher, keepalive_t);
  Filesystem__WatchDirResponse r = FILESYSTEM__WATCH_DIR_RESPONSE__INIT;
  Filesystem__WatchDirResponse__KeepAlive ka =
      FILESYSTEM__WATCH_DIR_RESPONSE__KEEP_ALIVE__INIT;
  srv_server *srv = w->fs->srv;

  r.event_case = FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_KEEPALIVE;
  r.keepalive = &ka;
  srv_timer_arm(&srv->loop, &w->keepalive_t, srv_now_ms() + w->keepalive_ms);
  (void)send_ws(w, &r);
}

/* One event: to the stream, or kept for GetWatcherEvents.  Returns 0, or
   -1 when the watcher ended. */
static int deliver(fs_watcher *w, Filesystem__FilesystemEvent *ev) {
  srv_server *srv = w->fs->srv;

  if (w->rpc != NULL) {
    Filesystem__WatchDirResponse r = FILESYSTEM__WATCH_DIR_RESPONSE__INIT;
    r.event_case = FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_FILESYSTEM;
    r.filesystem = ev;
    srv_timer_arm(&srv->loop, &w->keepalive_t,
                  srv_now_ms() + w->keepalive_ms);
    return send_ws(w, &r);
  } else {
    size_t n = protobuf_c_message_get_packed_size(&ev->base);
    fs_event *e;

    if (w->nevents >= srv->cfg.fs_max_events ||
        w->event_bytes + n > FS_POLL_BYTES) {
      watcher_end(w, CONCH_CODE_RESOURCE_EXHAUSTED,
                  "watcher %s: more than %zu events (or %u bytes) not taken; "
                  "call GetWatcherEvents more often",
                  w->id, srv->cfg.fs_max_events, (unsigned)FS_POLL_BYTES);
      return -1;
    }
    e = malloc(sizeof(*e) + n);
    if (e == NULL) {
      watcher_end(w, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return -1;
    }
    e->next = NULL;
    e->len = protobuf_c_message_pack(&ev->base, e->data);
    *w->tail = e;
    w->tail = &e->next;
    w->nevents++;
    w->event_bytes += n;
    return 0;
  }
}

/* fsnotify's operations of one inotify event, in envd's order. */
static int event_ops(uint32_t mask, Filesystem__EventType ops[5]) {
  int n = 0;

  if (mask & (IN_CREATE | IN_MOVED_TO)) {
    ops[n++] = FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE;
  }
  if (mask & (IN_MOVE_SELF | IN_MOVED_FROM)) {
    ops[n++] = FILESYSTEM__EVENT_TYPE__EVENT_TYPE_RENAME;
  }
  if (mask & IN_ATTRIB) {
    ops[n++] = FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CHMOD;
  }
  if (mask & IN_MODIFY) {
    ops[n++] = FILESYSTEM__EVENT_TYPE__EVENT_TYPE_WRITE;
  }
  if (mask & (IN_DELETE | IN_DELETE_SELF)) {
    ops[n++] = FILESYSTEM__EVENT_TYPE__EVENT_TYPE_REMOVE;
  }
  return n;
}

/* |full| relative to the watched root (Go's filepath.Rel: "." for the
   root itself). */
static const char *rel_name(const fs_watcher *w, const char *full) {
  size_t n = strlen(w->root);

  if (strcmp(full, w->root) == 0) {
    return ".";
  }
  if (strcmp(w->root, "/") == 0) {
    return full + 1;
  }
  if (strncmp(full, w->root, n) == 0 && full[n] == '/') {
    return full + n + 1;
  }
  return full;
}

/* ---- The server's own temporary files ------------------------------------ */

struct fs_hidden {
  fs_hidden *next;
  int retired; /* renamed or removed: dropped once the queue is read out */
  char name[];
};

static const char *last_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

void srv_fs_hide(srv_server *srv, const char *path) {
  srv_fs *fs = srv->fs;
  const char *name = last_name(path);
  size_t n = strlen(name) + 1;
  fs_hidden *h;

  if (fs == NULL || (h = malloc(sizeof(*h) + n)) == NULL) {
    return;
  }
  h->retired = 0;
  memcpy(h->name, name, n);
  h->next = fs->hidden;
  fs->hidden = h;
}

/* Frees the retired entries (|all|: every entry). */
static void hidden_sweep(srv_fs *fs, int all) {
  fs_hidden **pp = &fs->hidden;

  while (*pp != NULL) {
    fs_hidden *h = *pp;
    if (all || h->retired) {
      *pp = h->next;
      free(h);
    } else {
      pp = &h->next;
    }
  }
}

void srv_fs_unhide(srv_server *srv, const char *path) {
  srv_fs *fs = srv->fs;
  const char *name = last_name(path);

  if (fs == NULL) {
    return;
  }
  for (fs_hidden *h = fs->hidden; h != NULL; h = h->next) {
    if (!h->retired && strcmp(h->name, name) == 0) {
      h->retired = 1;
      break;
    }
  }
  if (fs->in_w.fd < 0) {
    hidden_sweep(fs, 0); /* nobody watches: no event to wait for */
  } else {
    /* Its events are queued by now: read them out here (one read when
       there is nothing else), so that a retired name does not wait for
       some later event of a watched directory, which may never come. */
    on_inotify(&fs->in_w, EPOLLIN);
  }
}

static int hidden(const srv_fs *fs, const struct inotify_event *ie) {
  if (fs->hidden == NULL || ie->len == 0) {
    return 0;
  }
  for (const fs_hidden *h = fs->hidden; h != NULL; h = h->next) {
    if (strcmp(h->name, ie->name) == 0) {
      return 1;
    }
  }
  return 0;
}

/* Grows |*buf| (|*cap|) to hold |n| bytes.  Returns 0 or -1. */
static int grow(char **buf, size_t *cap, size_t n) {
  char *nb;

  if (n <= *cap) {
    return 0;
  }
  nb = realloc(*buf, n);
  if (nb == NULL) {
    return -1;
  }
  *buf = nb;
  *cap = n;
  return 0;
}

/* The full path of |ie| in the directory named |dir|, built in |fs|'s
   buffers unless |again| (they hold |ie|'s path already) and that was for
   the same name (every watcher of one directory usually names it alike).
   NULL when out of memory. */
static const char *event_path(srv_fs *fs, const char *dir,
                              const struct inotify_event *ie, int again) {
  size_t nd = strlen(dir);
  size_t nn = ie->len > 0 ? strlen(ie->name) : 0;

  if (again && strcmp(fs->evdir, dir) == 0) {
    return fs->evfull;
  }
  if (grow(&fs->evdir, &fs->capevdir, nd + 1) != 0 ||
      grow(&fs->evfull, &fs->capevfull, nd + nn + 2) != 0) {
    return NULL;
  }
  memcpy(fs->evdir, dir, nd + 1);
  memcpy(fs->evfull, dir, nd + 1);
  if (nn > 0) {
    fs->evfull[nd] = '/';
    memcpy(fs->evfull + nd + 1, ie->name, nn + 1);
    srv_path_clean(fs->evfull); /* as srv_path_join() */
  }
  return fs->evfull;
}

/* One event, at |full|, of a directory |w| watches.  Returns 0, or -1
   when the watcher ended. */
static int handle_event(fs_watcher *w, const char *full,
                        const struct inotify_event *ie) {
  Filesystem__EventType ops[5];
  int nops, rv = 0;

  /* A watched subdirectory's own end is told by its parent's watch. */
  if ((ie->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) &&
      strcmp(full, w->root) != 0) {
    return 0;
  }
  /* Recursive: a new directory is watched too. */
  if (w->recursive && (ie->mask & IN_ISDIR) &&
      (ie->mask & (IN_CREATE | IN_MOVED_TO))) {
    int e;
    if (srv_fs_as_user(w->fs->srv, &w->user) == 0) {
      e = watch_add(w, full, 0);
      srv_fs_as_server(w->fs->srv, &w->user);
      if (e == ENOSPC || e == ENOMEM) {
        watcher_end(w, CONCH_CODE_RESOURCE_EXHAUSTED,
                    "watcher error: cannot watch %s: %s", full, strerror(e));
        return -1;
      }
    }
  }
  nops = event_ops(ie->mask, ops);
  for (int i = 0; i < nops && rv == 0; i++) {
    Filesystem__FilesystemEvent ev = FILESYSTEM__FILESYSTEM_EVENT__INIT;
    fs_entry x;
    int have = 0;

    ev.name = (char *)rel_name(w, full);
    ev.type = ops[i];
    if (w->include_entry &&
        (ops[i] == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE ||
         ops[i] == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_WRITE ||
         ops[i] == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CHMOD) &&
        srv_fs_as_user(w->fs->srv, &w->user) == 0) {
      have = srv_fs_entry_info(full, &x) == 0;
      srv_fs_as_server(w->fs->srv, &w->user);
      if (have) {
        ev._entry_case = FILESYSTEM__FILESYSTEM_EVENT___ENTRY_ENTRY;
        ev.entry = &x.e;
      }
    }
    rv = deliver(w, &ev);
    if (have) {
      srv_fs_entry_clear(&x);
    }
  }
  return rv;
}

/* The watchers of |ie|'s directory, copied: handling an event may end
   a watcher or add directories (the table changes).  Returns 0 (|*n|
   of them, maybe none), or -1 when out of memory. */
static int subs_of(srv_fs *fs, const struct inotify_event *ie, size_t *n) {
  fs_wdref *r = wd_find(fs, ie->wd);

  *n = 0;
  if (r == NULL || r->nsubs == 0) {
    return 0;
  }
  if (fs->capsnap < r->nsubs) {
    fs_sub *nv = realloc(fs->snap, r->nsubs * sizeof(*nv));
    if (nv == NULL) {
      return -1;
    }
    fs->snap = nv;
    fs->capsnap = r->nsubs;
  }
  memcpy(fs->snap, r->subs, r->nsubs * sizeof(*fs->snap));
  *n = r->nsubs;
  return 0;
}

/* No memory to hand |wd|'s event on: its watchers end, saying so, rather
   than go on with an event missing (each end takes its watcher out). */
static void on_no_memory(srv_fs *fs, int wd) {
  fs_wdref *r;

  while ((r = wd_find(fs, wd)) != NULL && r->nsubs > 0) {
    watcher_end(r->subs[r->nsubs - 1].w, CONCH_CODE_RESOURCE_EXHAUSTED,
                "watcher error: out of memory");
  }
}

/* The kernel dropped events: whose is not known, so every watcher ends
   (as each of envd's ends when its own queue overflows). */
static void on_overflow(srv_fs *fs) {
  srv_link *l = fs->watchers.next;

  while (l != &fs->watchers) {
    fs_watcher *w = SRV_CONTAINER(l, fs_watcher, link);

    l = l->next; /* |w| may be freed */
    if (w->watching) {
      watcher_end(w, CONCH_CODE_INTERNAL,
                  "watcher error: fsnotify: queue or buffer overflow");
    }
  }
}

/* The directory of |wd| is gone (removed, or on an unmounted
   filesystem): nobody watches it any more. */
static void on_ignored(srv_fs *fs, int wd) {
  fs_wdref *r = wd_find(fs, wd);

  if (r == NULL) {
    return; /* ours: removed by wd_unsub() */
  }
  for (size_t i = 0; i < r->nsubs; i++) {
    wd_forget(r->subs[i].w, wd);
  }
  wd_drop(fs, r);
}

static void dispatch(srv_fs *fs, const struct inotify_event *ie) {
  size_t n;

  if (ie->mask & IN_Q_OVERFLOW) {
    on_overflow(fs);
    return;
  }
  if (ie->mask & IN_IGNORED) {
    on_ignored(fs, ie->wd);
    return;
  }
  if (hidden(fs, ie)) {
    return;
  }
  if (subs_of(fs, ie, &n) != 0) {
    on_no_memory(fs, ie->wd);
    return;
  }
  for (size_t i = 0, built = 0; i < n; i++) {
    /* Only |fs->snap[i].w| itself can end while its event is handled; the
       others (and their paths) are still there.  The path is built once
       for the watchers that name the directory alike (|built|: the
       buffers hold this event's, not an earlier one's). */
    const char *full = event_path(fs, fs->snap[i].path, ie, built);
    built = full != NULL;
    if (full == NULL) {
      watcher_end(fs->snap[i].w, CONCH_CODE_RESOURCE_EXHAUSTED,
                  "out of memory");
      continue;
    }
    (void)handle_event(fs->snap[i].w, full, ie);
  }
}

static void on_inotify(srv_watch *sw, uint32_t events) {
  srv_fs *fs = SRV_CONTAINER(sw, srv_fs, in_w);
  char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  ssize_t n = 0;
  int rounds = 0;

  (void)events;
  /* A few reads per turn: a busy directory does not hold the loop. */
  while (rounds++ < 8 && fs->in_w.fd >= 0 &&
         (n = read(sw->fd, buf, sizeof(buf))) > 0) {
    for (ssize_t off = 0; off < n;) {
      const struct inotify_event *ie = (const void *)(buf + off);
      off += (ssize_t)(sizeof(*ie) + ie->len);
      dispatch(fs, ie);
    }
  }
  /* Read out: the events of the temporary files renamed or removed
     before this read (by this thread) are all behind us. */
  if (fs->in_w.fd < 0 || (n < 0 && errno == EAGAIN)) {
    hidden_sweep(fs, 0);
  }
}

static void watcher_free(fs_watcher *w) {
  srv_server *srv = w->fs->srv;
  srv_fs *fs = w->fs;
  fs_event *e = w->head;

  srv_list_remove(&w->link);
  fs->nwatchers--;
  srv_timer_cancel(&srv->loop, &w->keepalive_t);
  srv_timer_cancel(&srv->loop, &w->idle_t);
  watcher_unwatch(w);
  while (e != NULL) {
    fs_event *next = e->next;
    free(e);
    e = next;
  }
  free(w->err_msg);
  free(w->root);
  srv_user_clear(&w->user);
  if (w->rpc != NULL) {
    conch_rpc_set_data(w->rpc, NULL);
  }
  free(w);
  inotify_close_idle(fs);
}

static void on_idle(srv_timer *t) {
  watcher_free(SRV_CONTAINER(t, fs_watcher, idle_t));
}

/* Network filesystems whose events may never come (envd's list). */
static int network_mount(const char *path, int *err) {
  struct statfs sf;

  if (statfs(path, &sf) != 0) {
    *err = errno;
    return -1;
  }
  switch ((unsigned long)sf.f_type) {
  case 0x6969UL:     /* NFS */
  case 0xFF534D42UL: /* CIFS */
  case 0x517BUL:     /* SMB */
  case 0xFE534D42UL: /* SMB2 */
  case 0x65735546UL: /* FUSE */
    return 1;
  default:
    return 0;
  }
}

/* What WatchDir and CreateWatcher share: the checks, then a watcher
   watching.  The user's identity is on; it is given back, and |u| and
   |path| are taken (the watcher's, or freed).  Returns the watcher, or
   NULL with the call answered. */
static fs_watcher *watcher_new(srv_server *srv, conch_rpc *rpc, srv_user *u,
                               char *path, int recursive, int include_entry,
                               int allow_network) {
  srv_fs *fs = srv->fs;
  char eb[128];
  struct stat sb;
  fs_watcher *w = NULL;
  int e, net;

  if (stat(path, &sb) != 0) {
    e = errno;
    if (e == ENOENT) {
      srv_fs_fail(rpc, CONCH_CODE_NOT_FOUND, "path %s not found: stat %s: %s", path,
           path, srv_fs_go_err(e, eb, sizeof(eb)));
    } else {
      srv_fs_fail(rpc, srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
           "error statting path %s: stat %s: %s", path, path,
           srv_fs_go_err(e, eb, sizeof(eb)));
    }
    goto early;
  }
  if (!S_ISDIR(sb.st_mode)) {
    srv_fs_fail(rpc, CONCH_CODE_INVALID_ARGUMENT, "path %s not a directory", path);
    goto early;
  }
  if (!allow_network) {
    net = network_mount(path, &e);
    if (net < 0) {
      srv_fs_fail(rpc, CONCH_CODE_INTERNAL,
           "error checking mount status: failed to statfs %s: %s", path,
           srv_fs_go_err(e, eb, sizeof(eb)));
      goto early;
    }
    if (net) {
      srv_fs_fail(rpc, CONCH_CODE_INVALID_ARGUMENT,
           "cannot watch path on network filesystem: %s", path);
      goto early;
    }
  }
  if (fs->nwatchers >= srv->cfg.fs_max_watchers) {
    srv_fs_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
         "error creating watcher: too many watchers: %zu, the limit is %zu",
         fs->nwatchers, srv->cfg.fs_max_watchers);
    goto early;
  }
  w = calloc(1, sizeof(*w));
  if (w == NULL) {
    srv_fs_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    goto early;
  }
  w->fs = fs;
  w->tail = &w->head;
  w->recursive = recursive;
  w->include_entry = include_entry;
  w->keepalive_ms = 90000;
  srv_timer_init(&w->keepalive_t, on_watch_keepalive);
  srv_timer_init(&w->idle_t, on_idle);
  srv_list_push(&fs->watchers, &w->link);
  fs->nwatchers++;
  w->user = *u; /* taken over */
  memset(u, 0, sizeof(*u));
  w->root = path;
  e = inotify_open(fs);
  if (e != 0) {
    srv_fs_fail(rpc,
         e == EMFILE || e == ENFILE ? CONCH_CODE_RESOURCE_EXHAUSTED
                                    : CONCH_CODE_INTERNAL,
         "error creating watcher: inotify_init1: %s",
         srv_fs_go_err(e, eb, sizeof(eb)));
    goto fail;
  }
  w->watching = 1;
  e = watch_add(w, path, 0);
  if (e != 0) {
    srv_fs_fail(rpc,
         e == ENOSPC ? CONCH_CODE_RESOURCE_EXHAUSTED
                     : srv_fs_errno_code(e, CONCH_CODE_INTERNAL),
         "error adding path %s to watcher: %s", path,
         e == ENOSPC ? "no space left on device (the inotify watch limit)"
                     : srv_fs_go_err(e, eb, sizeof(eb)));
    goto fail;
  }
  srv_fs_as_server(srv, &w->user);
  return w;

fail:
  srv_fs_as_server(srv, &w->user);
  watcher_free(w);
  return NULL;

early:
  srv_fs_as_server(srv, u);
  srv_user_clear(u);
  free(path);
  return NULL;
}

static void on_watch_dir(Filesystem__Filesystem__WatchDir_Rpc rpc,
                         const Filesystem__WatchDirRequest *req, void *ud) {
  srv_server *srv = ud;
  Filesystem__WatchDirResponse r = FILESYSTEM__WATCH_DIR_RESPONSE__INIT;
  Filesystem__WatchDirResponse__StartEvent se =
      FILESYSTEM__WATCH_DIR_RESPONSE__START_EVENT__INIT;
  int64_t keepalive = 90000;
  char err[256];
  fs_watcher *w;
  srv_user u;
  char *path;

  if (srv_parse_keepalive(conch_metadata_get(conch_rpc_request_headers(
                                                 rpc.base),
                                             "keepalive-ping-interval", NULL),
                          &keepalive, err, sizeof(err)) != 0) {
    srv_fs_fail(rpc.base, CONCH_CODE_INVALID_ARGUMENT, "%s", err);
    return;
  }
  if (srv_fs_begin_path(srv, rpc.base, &u, req->path, &path) != 0) {
    return;
  }
  w = watcher_new(srv, rpc.base, &u, path, req->recursive,
                  req->include_entry, req->allow_network_mounts);
  if (w == NULL) {
    return;
  }
  w->rpc = rpc.base;
  w->keepalive_ms = keepalive;
  conch_rpc_set_data(rpc.base, w);
  r.event_case = FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_START;
  r.start = &se;
  srv_timer_arm(&srv->loop, &w->keepalive_t, srv_now_ms() + w->keepalive_ms);
  (void)send_ws(w, &r);
}

static void on_watch_cancel(Filesystem__Filesystem__WatchDir_Rpc rpc,
                            const conch_status *status, void *ud) {
  fs_watcher *w = conch_rpc_data(rpc.base);

  (void)status;
  (void)ud;
  if (w != NULL) {
    w->rpc = NULL;
    watcher_free(w);
  }
}

static fs_watcher *find_watcher(srv_fs *fs, const char *id) {
  for (srv_link *l = fs->watchers.next; l != &fs->watchers; l = l->next) {
    fs_watcher *w = SRV_CONTAINER(l, fs_watcher, link);
    if (w->rpc == NULL && w->id[0] != '\0' && strcmp(w->id, id) == 0) {
      return w;
    }
  }
  return NULL;
}

static void on_create_watcher(Filesystem__Filesystem__CreateWatcher_Rpc rpc,
                              const Filesystem__CreateWatcherRequest *req,
                              void *ud) {
  srv_server *srv = ud;
  Filesystem__CreateWatcherResponse resp =
      FILESYSTEM__CREATE_WATCHER_RESPONSE__INIT;
  uint8_t rnd[12];
  fs_watcher *w;
  srv_user u;
  char *path;

  if (srv_fs_begin_path(srv, rpc.base, &u, req->path, &path) != 0) {
    return;
  }
  w = watcher_new(srv, rpc.base, &u, path, req->recursive,
                  req->include_entry, req->allow_network_mounts);
  if (w == NULL) {
    return;
  }
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
    watcher_free(w);
    srv_fs_fail(rpc.base, CONCH_CODE_INTERNAL, "error creating watcher: getrandom");
    return;
  }
  w->id[0] = 'w';
  for (size_t i = 0; i < sizeof(rnd); i++) {
    snprintf(w->id + 1 + 2 * i, 3, "%02x", rnd[i]);
  }
  srv_timer_arm(&srv->loop, &w->idle_t, srv_now_ms() + srv->cfg.fs_idle_ms);
  resp.watcher_id = w->id;
  srv_fs_reply(rpc.base, &resp.base);
}

static void on_get_events(Filesystem__Filesystem__GetWatcherEvents_Rpc rpc,
                          const Filesystem__GetWatcherEventsRequest *req,
                          void *ud) {
  srv_server *srv = ud;
  Filesystem__GetWatcherEventsResponse resp =
      FILESYSTEM__GET_WATCHER_EVENTS_RESPONSE__INIT;
  fs_watcher *w = find_watcher(srv->fs, req->watcher_id);
  Filesystem__FilesystemEvent **evs;
  size_t n = 0;

  if (w == NULL) {
    srv_fs_fail(rpc.base, CONCH_CODE_NOT_FOUND, "watcher with id %s not found",
         req->watcher_id);
    return;
  }
  srv_timer_arm(&srv->loop, &w->idle_t, srv_now_ms() + srv->cfg.fs_idle_ms);
  /* Queued events first are taken first; past an end, only the error. */
  if (w->err_msg != NULL) {
    srv_fs_fail(rpc.base, w->err_code, "%s", w->err_msg);
    return;
  }
  evs = calloc(w->nevents + 1, sizeof(*evs));
  if (evs == NULL) {
    srv_fs_fail(rpc.base, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (fs_event *e = w->head; e != NULL; e = e->next) {
    evs[n] = filesystem__filesystem_event__unpack(NULL, e->len, e->data);
    if (evs[n] == NULL) {
      break;
    }
    n++;
  }
  if (n == w->nevents) {
    resp.n_events = n;
    resp.events = evs;
    srv_fs_reply(rpc.base, &resp.base);
    while (w->head != NULL) {
      fs_event *next = w->head->next;
      free(w->head);
      w->head = next;
    }
    w->tail = &w->head;
    w->nevents = 0;
    w->event_bytes = 0;
  } else {
    srv_fs_fail(rpc.base, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    filesystem__filesystem_event__free_unpacked(evs[i], NULL);
  }
  free(evs);
}

static void on_remove_watcher(Filesystem__Filesystem__RemoveWatcher_Rpc rpc,
                              const Filesystem__RemoveWatcherRequest *req,
                              void *ud) {
  srv_server *srv = ud;
  Filesystem__RemoveWatcherResponse resp =
      FILESYSTEM__REMOVE_WATCHER_RESPONSE__INIT;
  fs_watcher *w = find_watcher(srv->fs, req->watcher_id);

  if (w == NULL) {
    srv_fs_fail(rpc.base, CONCH_CODE_NOT_FOUND, "watcher with id %s not found",
         req->watcher_id);
    return;
  }
  watcher_free(w);
  srv_fs_reply(rpc.base, &resp.base);
}

/* ---- The service's part ------------------------------------------------------ */

void srv_fs_watch_handlers(Filesystem__Filesystem_Handlers *h) {
  h->watch_dir.on_request = on_watch_dir;
  h->watch_dir.on_cancel = on_watch_cancel;
  h->create_watcher.on_request = on_create_watcher;
  h->get_watcher_events.on_request = on_get_events;
  h->remove_watcher.on_request = on_remove_watcher;
}

void srv_fs_watchers_free(srv_fs *fs) {
  while (!srv_list_empty(&fs->watchers)) {
    fs_watcher *w = SRV_CONTAINER(fs->watchers.next, fs_watcher, link);
    w->rpc = NULL; /* the calls are gone with the core */
    watcher_free(w);
  }
  free(fs->snap);
  fs->snap = NULL;
  fs->capsnap = 0;
  free(fs->evdir);
  free(fs->evfull);
  fs->evdir = fs->evfull = NULL;
  fs->capevdir = fs->capevfull = 0;
  hidden_sweep(fs, 1);
}
