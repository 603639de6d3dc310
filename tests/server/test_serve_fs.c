/* conch serve, filesystem.Filesystem through our own client (the typed
   stubs): Stat, MakeDir, Move, ListDir with depth, Remove, WatchDir and the
   polling watchers, envd's codes for bad paths, `..` and symlinks, the
   request's user (as root: another user's permissions decide), and the
   watchers' bounds (10,000 asked, the cap given, none outliving its
   stream or its budget). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include "filesystem/filesystem.conch.h"
#include "support.h"

/* More than the kernel's 128 inotify instances per user: the server's
   watchers share one. */
#define MAX_WATCHERS 300
#define MAX_EVENTS 50
#define IDLE_MS 3000

static serve_peer srv;
static conch_client *cli;
static char top[64]; /* the tests' directory */

static int group_setup(void **state) {
  static char idle[32], nw[32], ne[32];
  static const char *args[16];
  size_t i = 0;

  (void)state;
  snprintf(top, sizeof(top), "/tmp/conch-fs-XXXXXX");
  if (mkdtemp(top) == NULL) {
    return -1;
  }
  chmod(top, 0755);
  snprintf(idle, sizeof(idle), "%d", IDLE_MS);
  snprintf(nw, sizeof(nw), "%d", MAX_WATCHERS);
  snprintf(ne, sizeof(ne), "%d", MAX_EVENTS);
  args[i++] = "--allow-user";
  args[i++] = "nobody";
  args[i++] = "--workdir";
  args[i++] = top;
  args[i++] = "--watcher-idle-ms";
  args[i++] = idle;
  args[i++] = "--max-watchers";
  args[i++] = nw;
  args[i++] = "--max-watcher-events";
  args[i++] = ne;
  args[i] = NULL;
  if (serve_start(&srv, args) != 0) {
    return -1;
  }
  cli = client_new(srv.url);
  return cli != NULL ? 0 : -1;
}

static int group_teardown(void **state) {
  char cmd[128];
  int rv;

  (void)state;
  conch_client_free(cli);
  rv = serve_stop(&srv, 10000);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
  if (system(cmd) != 0) {
    return -1;
  }
  return rv == 0 ? 0 : -1;
}

/* ---- Helpers ------------------------------------------------------------- */

static char *tpath(const char *fmt, ...) CONCH_PRINTF(1, 2);
static char *tpath(const char *fmt, ...) {
  static char bufs[8][1024];
  static int k;
  char *b = bufs[k++ % 8];
  size_t n;
  va_list ap;

  n = (size_t)snprintf(b, sizeof(bufs[0]), "%s/", top);
  va_start(ap, fmt);
  vsnprintf(b + n, sizeof(bufs[0]) - n, fmt, ap);
  va_end(ap);
  return b;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

/* Call options with Authorization: Basic for |user| (NULL: none) and
   Keepalive-Ping-Interval |ka| (NULL: none); free |*md| after. */
static conch_call_opts opts_for(const char *user, const char *ka,
                                conch_metadata **md) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  static const char tab[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

  assert_int_equal(conch_metadata_new(md, NULL), 0);
  if (user != NULL) {
    char raw[128], enc[200], auth[220];
    size_t n, o2 = 0;

    snprintf(raw, sizeof(raw), "%s:", user);
    n = strlen(raw);
    for (size_t i = 0; i < n; i += 3) {
      unsigned v = (unsigned char)raw[i] << 16;
      if (i + 1 < n) {
        v |= (unsigned char)raw[i + 1] << 8;
      }
      if (i + 2 < n) {
        v |= (unsigned char)raw[i + 2];
      }
      enc[o2++] = tab[(v >> 18) & 63];
      enc[o2++] = tab[(v >> 12) & 63];
      enc[o2++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
      enc[o2++] = i + 2 < n ? tab[v & 63] : '=';
    }
    enc[o2] = '\0';
    snprintf(auth, sizeof(auth), "Basic %s", enc);
    conch_metadata_add_str(*md, "authorization", auth);
  }
  if (ka != NULL) {
    conch_metadata_add_str(*md, "keepalive-ping-interval", ka);
  }
  o.headers = *md;
  o.timeout_ms = 60000;
  return o;
}

static char last_msg[2048];

static void free_msg(void *m) {
  if (m != NULL) {
    conch_message_free(cli, (ProtobufCMessage *)m);
  }
}

/* One unary call through a typed stub as |user|: rpc_begin() sets up its
   options and status, the test calls the stub with |o| and |st|, and
   rpc_end() returns the code, keeps the message in last_msg and frees
   the response unless told to |keep| it (the caller's |*out|). */
typedef struct rpc {
  conch_metadata *md;
  conch_call_opts o;
  conch_status st;
} rpc;

static void rpc_begin(rpc *c, const char *user) {
  c->o = opts_for(user, NULL, &c->md);
  conch_status_init(&c->st);
}

static conch_code rpc_end(rpc *c, void *resp, int keep) {
  conch_code code = c->st.code;

  conch_metadata_free(c->md);
  snprintf(last_msg, sizeof(last_msg), "%s",
           c->st.message != NULL ? c->st.message : "");
  conch_status_clear(&c->st);
  if (!keep) {
    free_msg(resp);
  }
  return code;
}

/* Stat as |user|: the code; the entry in |*out| (free with free_msg). */
static conch_code stat_as(const char *user, const char *path,
                          Filesystem__StatResponse **out) {
  Filesystem__StatRequest req = FILESYSTEM__STAT_REQUEST__INIT;
  Filesystem__StatResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, user);
  req.path = (char *)path;
  (void)filesystem__filesystem__stat_sync(cli, &c.o, &req, &resp, &c.st, NULL,
                                          NULL);
  if (out != NULL) {
    *out = resp;
  }
  return rpc_end(&c, resp, out != NULL);
}

static conch_code mkdir_as(const char *user, const char *path,
                           Filesystem__MakeDirResponse **out) {
  Filesystem__MakeDirRequest req = FILESYSTEM__MAKE_DIR_REQUEST__INIT;
  Filesystem__MakeDirResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, user);
  req.path = (char *)path;
  (void)filesystem__filesystem__make_dir_sync(cli, &c.o, &req, &resp, &c.st,
                                              NULL, NULL);
  if (out != NULL) {
    *out = resp;
  }
  return rpc_end(&c, resp, out != NULL);
}

static conch_code move_as(const char *user, const char *src, const char *dst,
                          Filesystem__MoveResponse **out) {
  Filesystem__MoveRequest req = FILESYSTEM__MOVE_REQUEST__INIT;
  Filesystem__MoveResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, user);
  req.source = (char *)src;
  req.destination = (char *)dst;
  (void)filesystem__filesystem__move_sync(cli, &c.o, &req, &resp, &c.st, NULL,
                                          NULL);
  if (out != NULL) {
    *out = resp;
  }
  return rpc_end(&c, resp, out != NULL);
}

static conch_code list_as(const char *user, const char *path, uint32_t depth,
                          Filesystem__ListDirResponse **out) {
  Filesystem__ListDirRequest req = FILESYSTEM__LIST_DIR_REQUEST__INIT;
  Filesystem__ListDirResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, user);
  req.path = (char *)path;
  req.depth = depth;
  (void)filesystem__filesystem__list_dir_sync(cli, &c.o, &req, &resp, &c.st,
                                              NULL, NULL);
  if (out != NULL) {
    *out = resp;
  }
  return rpc_end(&c, resp, out != NULL);
}

static conch_code remove_as(const char *user, const char *path) {
  Filesystem__RemoveRequest req = FILESYSTEM__REMOVE_REQUEST__INIT;
  Filesystem__RemoveResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, user);
  req.path = (char *)path;
  (void)filesystem__filesystem__remove_sync(cli, &c.o, &req, &resp, &c.st, NULL,
                                            NULL);
  return rpc_end(&c, resp, 0);
}

/* CreateWatcher: the code; the id copied to |id|. */
static conch_code create_watcher(const char *path, int recursive, char *id,
                                 size_t idlen) {
  Filesystem__CreateWatcherRequest req =
      FILESYSTEM__CREATE_WATCHER_REQUEST__INIT;
  Filesystem__CreateWatcherResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, NULL);
  req.path = (char *)path;
  req.recursive = recursive;
  (void)filesystem__filesystem__create_watcher_sync(cli, &c.o, &req, &resp,
                                                    &c.st, NULL, NULL);
  if (id != NULL) {
    snprintf(id, idlen, "%s", resp != NULL ? resp->watcher_id : "");
  }
  return rpc_end(&c, resp, 0);
}

static conch_code get_events(const char *id,
                             Filesystem__GetWatcherEventsResponse **out) {
  Filesystem__GetWatcherEventsRequest req =
      FILESYSTEM__GET_WATCHER_EVENTS_REQUEST__INIT;
  Filesystem__GetWatcherEventsResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, NULL);
  req.watcher_id = (char *)id;
  (void)filesystem__filesystem__get_watcher_events_sync(cli, &c.o, &req, &resp,
                                                        &c.st, NULL, NULL);
  if (out != NULL) {
    *out = resp;
  }
  return rpc_end(&c, resp, out != NULL);
}

static conch_code remove_watcher(const char *id) {
  Filesystem__RemoveWatcherRequest req =
      FILESYSTEM__REMOVE_WATCHER_REQUEST__INIT;
  Filesystem__RemoveWatcherResponse *resp = NULL;
  rpc c;

  rpc_begin(&c, NULL);
  req.watcher_id = (char *)id;
  (void)filesystem__filesystem__remove_watcher_sync(cli, &c.o, &req, &resp,
                                                    &c.st, NULL, NULL);
  return rpc_end(&c, resp, 0);
}

#define assert_code(expr, want)                                                \
  do {                                                                         \
    conch_code got_ = (expr);                                                  \
    if (got_ != (want)) {                                                      \
      fail_msg("%s: code %d, want %d (%s)", #expr, (int)got_, (int)(want),     \
               last_msg);                                                      \
    }                                                                          \
  } while (0)

/* ---- Stat ---------------------------------------------------------------- */

static void test_stat(void **state) {
  Filesystem__StatResponse *r;
  char want[1100];

  (void)state;
  write_file(tpath("f.txt"), "hello");
  chmod(tpath("f.txt"), 0640);
  assert_int_equal(symlink(tpath("f.txt"), tpath("link")), 0);
  assert_int_equal(symlink(tpath("nowhere"), tpath("dangling")), 0);

  assert_code(stat_as(NULL, tpath("f.txt"), &r), CONCH_CODE_OK);
  assert_string_equal(r->entry->name, "f.txt");
  assert_string_equal(r->entry->path, tpath("f.txt"));
  assert_int_equal(r->entry->type, FILESYSTEM__FILE_TYPE__FILE_TYPE_FILE);
  assert_int_equal(r->entry->size, 5);
  assert_int_equal(r->entry->mode, 0640);
  assert_string_equal(r->entry->permissions, "-rw-r-----");
  assert_string_equal(r->entry->owner, "root");
  assert_string_equal(r->entry->group, "root");
  assert_non_null(r->entry->modified_time);
  assert_true(r->entry->modified_time->seconds > 1600000000);
  assert_int_equal(r->entry->_symlink_target_case, 0);
  free_msg(r);

  /* A symlink: its own permissions string, its target's type and mode. */
  assert_code(stat_as(NULL, tpath("link"), &r), CONCH_CODE_OK);
  assert_int_equal(r->entry->type, FILESYSTEM__FILE_TYPE__FILE_TYPE_FILE);
  assert_int_equal(r->entry->mode, 0640);
  assert_string_equal(r->entry->permissions, "Lrwxrwxrwx");
  assert_int_equal(r->entry->_symlink_target_case,
                   FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET);
  assert_string_equal(r->entry->symlink_target, tpath("f.txt"));
  free_msg(r);
  assert_code(stat_as(NULL, tpath("dangling"), &r), CONCH_CODE_OK);
  assert_int_equal(r->entry->type,
                   FILESYSTEM__FILE_TYPE__FILE_TYPE_UNSPECIFIED);
  assert_string_equal(r->entry->symlink_target, tpath("dangling"));
  free_msg(r);

  /* A directory, the sticky bit as Go writes it. */
  assert_code(stat_as(NULL, "/tmp", &r), CONCH_CODE_OK);
  assert_int_equal(r->entry->type,
                   FILESYSTEM__FILE_TYPE__FILE_TYPE_DIRECTORY);
  assert_string_equal(r->entry->permissions, "dtrwxrwxrwx");
  assert_string_equal(r->entry->name, "tmp");
  free_msg(r);
  assert_code(stat_as(NULL, "/", &r), CONCH_CODE_OK);
  assert_string_equal(r->entry->name, "/");
  free_msg(r);

  /* The user.e2b.* xattrs, where the filesystem has user xattrs (said
     when it has not: the test then checks none of it). */
  if (setxattr(tpath("f.txt"), "user.e2b.color", "blue", 4, 0) != 0) {
    assert_true(errno == ENOTSUP || errno == EOPNOTSUPP);
    printf("note: no user xattrs on %s (%s): metadata not checked\n",
           tpath("f.txt"), strerror(errno));
  } else {
    setxattr(tpath("f.txt"), "user.other", "x", 1, 0);
    assert_code(stat_as(NULL, tpath("f.txt"), &r), CONCH_CODE_OK);
    assert_int_equal(r->entry->n_metadata, 1);
    assert_string_equal(r->entry->metadata[0]->key, "color");
    assert_string_equal(r->entry->metadata[0]->value, "blue");
    free_msg(r);
  }

  /* Paths as envd resolves them: "" is --workdir, relative under home,
     `~` home, `~user` refused, ".." resolved. */
  assert_code(stat_as(NULL, "", &r), CONCH_CODE_OK);
  assert_string_equal(r->entry->path, top);
  free_msg(r);
  assert_code(stat_as(NULL, "~", &r), CONCH_CODE_OK);
  assert_string_equal(r->entry->path, "/root");
  free_msg(r);
  assert_code(stat_as(NULL, "../tmp", &r), CONCH_CODE_OK);
  assert_string_equal(r->entry->path, "/tmp");
  free_msg(r);
  assert_code(stat_as(NULL, "~nobody/x", NULL), CONCH_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(last_msg, "cannot expand user-specific home dir"));
  assert_code(stat_as(NULL, tpath("none"), NULL), CONCH_CODE_NOT_FOUND);
  snprintf(want, sizeof(want), "file not found: lstat %s: no such file",
           tpath("none"));
  assert_non_null(strstr(last_msg, want));
  assert_code(stat_as(NULL, tpath("f.txt/x"), NULL), CONCH_CODE_INTERNAL);
  assert_code(stat_as("no-such-user-here", tpath("f.txt"), NULL),
              CONCH_CODE_UNAUTHENTICATED);
  assert_string_equal(last_msg, "invalid username: 'no-such-user-here'");
  /* A user the operator did not allow. */
  assert_code(stat_as("daemon", tpath("f.txt"), NULL),
              CONCH_CODE_PERMISSION_DENIED);
}

/* ---- MakeDir, Move -------------------------------------------------------- */

static void test_make_dir(void **state) {
  Filesystem__MakeDirResponse *r;

  (void)state;
  assert_code(mkdir_as(NULL, tpath("m/a/b"), &r), CONCH_CODE_OK);
  assert_int_equal(r->entry->type,
                   FILESYSTEM__FILE_TYPE__FILE_TYPE_DIRECTORY);
  assert_string_equal(r->entry->name, "b");
  assert_string_equal(r->entry->path, tpath("m/a/b"));
  free_msg(r);
  assert_code(mkdir_as(NULL, tpath("m/a/b"), NULL),
              CONCH_CODE_ALREADY_EXISTS);
  assert_non_null(strstr(last_msg, "directory already exists"));
  write_file(tpath("m/file"), "x");
  assert_code(mkdir_as(NULL, tpath("m/file"), NULL),
              CONCH_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(last_msg, "not a directory"));
  /* Under a file: envd's internal. */
  assert_code(mkdir_as(NULL, tpath("m/file/sub"), NULL), CONCH_CODE_INTERNAL);
}

static void test_move(void **state) {
  Filesystem__MoveResponse *r;
  struct stat sb;

  (void)state;
  write_file(tpath("mv-src"), "abc");
  assert_code(move_as(NULL, tpath("mv-src"), tpath("mv/new/dst"), &r),
              CONCH_CODE_OK);
  assert_string_equal(r->entry->path, tpath("mv/new/dst"));
  assert_int_equal(r->entry->size, 3);
  free_msg(r);
  assert_int_equal(stat(tpath("mv-src"), &sb), -1);
  assert_code(move_as(NULL, tpath("mv-src"), tpath("mv/x"), NULL),
              CONCH_CODE_NOT_FOUND);
  assert_non_null(strstr(last_msg, "source file not found"));
  /* A directory onto a non-empty one. */
  assert_int_equal(mkdir(tpath("mv/full"), 0755), 0);
  write_file(tpath("mv/full/x"), "x");
  assert_int_equal(mkdir(tpath("mv/d"), 0755), 0);
  assert_code(move_as(NULL, tpath("mv/d"), tpath("mv/full"), NULL),
              CONCH_CODE_INTERNAL);
}

/* ---- ListDir ------------------------------------------------------------- */

static void test_list_dir(void **state) {
  Filesystem__ListDirResponse *r;

  (void)state;
  assert_int_equal(mkdir(tpath("ls"), 0755), 0);
  assert_int_equal(mkdir(tpath("ls/b"), 0755), 0);
  assert_int_equal(mkdir(tpath("ls/b/c"), 0755), 0);
  write_file(tpath("ls/a"), "1");
  write_file(tpath("ls/b/c/deep"), "2");
  write_file(tpath("ls/b/x"), "3");
  assert_int_equal(symlink(tpath("ls/b"), tpath("ls/lb")), 0);

  assert_code(list_as(NULL, tpath("ls"), 0, &r), CONCH_CODE_OK);
  assert_int_equal(r->n_entries, 3); /* depth 0 is 1 */
  assert_string_equal(r->entries[0]->name, "a");
  assert_string_equal(r->entries[1]->name, "b");
  assert_string_equal(r->entries[2]->name, "lb");
  assert_int_equal(r->entries[2]->type,
                   FILESYSTEM__FILE_TYPE__FILE_TYPE_DIRECTORY);
  free_msg(r);

  assert_code(list_as(NULL, tpath("ls"), 2, &r), CONCH_CODE_OK);
  /* a, b, b/c, b/x, lb: the symlink not followed. */
  assert_int_equal(r->n_entries, 5);
  assert_string_equal(r->entries[2]->path, tpath("ls/b/c"));
  assert_string_equal(r->entries[3]->path, tpath("ls/b/x"));
  free_msg(r);
  assert_code(list_as(NULL, tpath("ls"), 100, &r), CONCH_CODE_OK);
  assert_int_equal(r->n_entries, 6);
  free_msg(r);

  /* Through a symlink: the paths under the path asked for. */
  assert_code(list_as(NULL, tpath("ls/lb/"), 1, &r), CONCH_CODE_OK);
  assert_int_equal(r->n_entries, 2);
  assert_string_equal(r->entries[0]->path, tpath("ls/lb/c"));
  free_msg(r);

  assert_code(list_as(NULL, tpath("ls/a"), 1, NULL),
              CONCH_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(last_msg, "path is not a directory"));
  assert_code(list_as(NULL, tpath("ls/none"), 1, NULL), CONCH_CODE_NOT_FOUND);
  assert_int_equal(symlink(tpath("loop2"), tpath("loop1")), 0);
  assert_int_equal(symlink(tpath("loop1"), tpath("loop2")), 0);
  assert_code(list_as(NULL, tpath("loop1"), 1, NULL),
              CONCH_CODE_FAILED_PRECONDITION);
  assert_non_null(strstr(last_msg, "cyclic symlink"));
}

/* ---- Remove -------------------------------------------------------------- */

static void test_remove(void **state) {
  struct stat sb;

  (void)state;
  assert_int_equal(mkdir(tpath("rm"), 0755), 0);
  assert_int_equal(mkdir(tpath("rm/d"), 0755), 0);
  assert_int_equal(mkdir(tpath("rm/d/e"), 0755), 0);
  write_file(tpath("rm/d/e/f"), "x");
  assert_int_equal(mkdir(tpath("rm-keep"), 0755), 0);
  write_file(tpath("rm-keep/precious"), "x");
  /* A symlink into another tree: removed, not followed. */
  assert_int_equal(symlink(tpath("rm-keep"), tpath("rm/d/escape")), 0);

  assert_code(remove_as(NULL, tpath("rm/d")), CONCH_CODE_OK);
  assert_int_equal(lstat(tpath("rm/d"), &sb), -1);
  assert_int_equal(stat(tpath("rm-keep/precious"), &sb), 0);
  /* Nothing there is no error (RemoveAll). */
  assert_code(remove_as(NULL, tpath("rm/d")), CONCH_CODE_OK);
  assert_code(remove_as(NULL, tpath("rm/.")), CONCH_CODE_INTERNAL);
  assert_code(remove_as(NULL, "/"), CONCH_CODE_INVALID_ARGUMENT);
  assert_code(remove_as(NULL, "/tmp/../"), CONCH_CODE_INVALID_ARGUMENT);
  assert_int_equal(stat("/tmp", &sb), 0);
}

/* ---- Users --------------------------------------------------------------- */

static void test_users(void **state) {
  Filesystem__MakeDirResponse *m;
  Filesystem__StatResponse *r;
  struct stat sb;

  (void)state;
  if (getuid() != 0) {
    skip(); /* only a root server acts as other users */
  }
  assert_int_equal(mkdir(tpath("private"), 0700), 0);
  write_file(tpath("private/secret"), "s");
  assert_int_equal(mkdir(tpath("open"), 0777), 0);
  assert_int_equal(chmod(tpath("open"), 0777), 0); /* past the umask */
  assert_int_equal(symlink(tpath("private"), tpath("open/into-private")), 0);

  /* What nobody may not see, it does not see: by path, by `..`, through
     a symlink. */
  assert_code(stat_as("nobody", tpath("private/secret"), NULL),
              CONCH_CODE_PERMISSION_DENIED);
  assert_code(stat_as("nobody", tpath("open/../private/secret"), NULL),
              CONCH_CODE_PERMISSION_DENIED);
  assert_code(list_as("nobody", tpath("open/into-private"), 1, NULL),
              CONCH_CODE_PERMISSION_DENIED);
  assert_code(list_as("nobody", "/root", 1, NULL),
              CONCH_CODE_PERMISSION_DENIED);
  assert_code(remove_as("nobody", tpath("private/secret")),
              CONCH_CODE_PERMISSION_DENIED);
  assert_int_equal(stat(tpath("private/secret"), &sb), 0);
  assert_code(mkdir_as("nobody", tpath("private/x"), NULL),
              CONCH_CODE_PERMISSION_DENIED);
  assert_code(move_as("nobody", tpath("private/secret"), tpath("open/s"),
                      NULL),
              CONCH_CODE_PERMISSION_DENIED);
  /* The link itself is visible; a listing of the open directory skips
     nothing of its own. */
  assert_code(stat_as("nobody", tpath("open/into-private"), &r),
              CONCH_CODE_OK);
  free_msg(r);

  /* What nobody makes is nobody's. */
  assert_code(mkdir_as("nobody", tpath("open/mine/sub"), &m), CONCH_CODE_OK);
  assert_string_equal(m->entry->owner, "nobody");
  free_msg(m);
  assert_int_equal(stat(tpath("open/mine"), &sb), 0);
  assert_int_not_equal(sb.st_uid, 0);
  /* And root, right after, is root again. */
  assert_code(mkdir_as(NULL, tpath("open/root-made"), &m), CONCH_CODE_OK);
  assert_string_equal(m->entry->owner, "root");
  free_msg(m);
  assert_code(stat_as(NULL, tpath("private/secret"), NULL), CONCH_CODE_OK);
}

/* ---- WatchDir -------------------------------------------------------------- */

typedef struct watch_state {
  Filesystem__Filesystem__WatchDir_Call call;
  int nstart, nkeepalive;
  char names[64][256];
  int types[64];
  int n;
  int ended;
  conch_code code;
} watch_state;

/* Takes what arrived; returns 1 when the stream ended. */
static int watch_pump(watch_state *ws, long ms) {
  int64_t until = conch_now_ms() + ms;

  while (!ws->ended && conch_now_ms() < until) {
    Filesystem__WatchDirResponse *m = NULL;
    int rv = filesystem__filesystem__watch_dir_recv(ws->call, &m);

    if (rv == CONCH_ERR_AGAIN) {
      (void)conch_client_run(cli, 50);
      continue;
    }
    if (rv != 0) {
      ws->ended = 1;
      ws->code = conch_call_status(ws->call.base)->code;
      break;
    }
    if (m->event_case == FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_START) {
      ws->nstart++;
    } else if (m->event_case ==
               FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_KEEPALIVE) {
      ws->nkeepalive++;
    } else if (m->event_case ==
                   FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_FILESYSTEM &&
               ws->n < 64) {
      snprintf(ws->names[ws->n], sizeof(ws->names[0]), "%s",
               m->filesystem->name);
      ws->types[ws->n++] = m->filesystem->type;
    }
    conch_message_free(cli, &m->base);
    return 0;
  }
  return ws->ended;
}

static int has_event(const watch_state *ws, const char *name, int type) {
  for (int i = 0; i < ws->n; i++) {
    if (strcmp(ws->names[i], name) == 0 && ws->types[i] == type) {
      return 1;
    }
  }
  return 0;
}

static void watch_start(watch_state *ws, const char *path, int recursive,
                        const char *ka) {
  Filesystem__WatchDirRequest req = FILESYSTEM__WATCH_DIR_REQUEST__INIT;
  conch_metadata *md;
  conch_call_opts o = opts_for(NULL, ka, &md);

  memset(ws, 0, sizeof(*ws));
  o.timeout_ms = 0;
  req.path = (char *)path;
  req.recursive = recursive;
  assert_int_equal(filesystem__filesystem__watch_dir_start(cli, &o, &req, NULL,
                                                           &ws->call),
                   0);
  conch_metadata_free(md);
}

static void wait_event(watch_state *ws, const char *name, int type) {
  int64_t until = conch_now_ms() + 30000;

  while (!has_event(ws, name, type) && !ws->ended &&
         conch_now_ms() < until) {
    watch_pump(ws, 200);
  }
  if (!has_event(ws, name, type)) {
    fail_msg("no event %d for %s (%d events, ended %d)", type, name, ws->n,
             ws->ended);
  }
}

static int watch_started(const watch_state *ws) { return ws->nstart > 0; }
static int watch_ended(const watch_state *ws) { return ws->ended; }
static int watch_two_keepalives(const watch_state *ws) {
  return ws->nkeepalive >= 2;
}

/* Pumps |ws| until |done| holds or the stream ends (30 s at the most). */
static void watch_until(watch_state *ws, int (*done)(const watch_state *)) {
  int64_t until = conch_now_ms() + 30000;

  while (!done(ws) && !ws->ended && conch_now_ms() < until) {
    watch_pump(ws, 200);
  }
}

static void test_watch_dir(void **state) {
  static const struct {
    const char *path; /* under top */
    const char *ka;   /* keepalive-ping-interval, NULL: none */
    conch_code code;
  } bad[] = {
      {"w/none", NULL, CONCH_CODE_NOT_FOUND},
      {"w/file", NULL, CONCH_CODE_INVALID_ARGUMENT},
      {"w", "0", CONCH_CODE_INVALID_ARGUMENT},
  };
  watch_state ws;
  int fd;

  (void)state;
  assert_int_equal(mkdir(tpath("w"), 0755), 0);
  assert_int_equal(mkdir(tpath("w/old"), 0755), 0);
  watch_start(&ws, tpath("w"), 1, "1");
  watch_until(&ws, watch_started);
  assert_int_equal(ws.nstart, 1);

  write_file(tpath("w/f"), "x");
  wait_event(&ws, "f", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
  wait_event(&ws, "f", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_WRITE);
  chmod(tpath("w/f"), 0600);
  wait_event(&ws, "f", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CHMOD);
  rename(tpath("w/f"), tpath("w/g"));
  wait_event(&ws, "f", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_RENAME);
  wait_event(&ws, "g", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
  unlink(tpath("w/g"));
  wait_event(&ws, "g", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_REMOVE);
  /* Recursive: a directory that was there, and one made since. */
  write_file(tpath("w/old/in-old"), "x");
  wait_event(&ws, "old/in-old", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
  assert_int_equal(mkdir(tpath("w/new"), 0755), 0);
  wait_event(&ws, "new", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
  fd = open(tpath("w/new/in-new"), O_CREAT | O_WRONLY, 0644);
  assert_true(fd >= 0);
  close(fd);
  wait_event(&ws, "new/in-new", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
  /* Keepalives every second without events. */
  watch_until(&ws, watch_two_keepalives);
  assert_true(ws.nkeepalive >= 2);
  assert_int_equal(ws.ended, 0);
  conch_call_cancel(ws.call.base);
  conch_call_free(ws.call.base);

  /* Errors before the StartEvent: no such path, a file, a keepalive
     interval of 0. */
  write_file(tpath("w/file"), "x");
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    watch_start(&ws, tpath("%s", bad[i].path), 0, bad[i].ka);
    watch_until(&ws, watch_ended);
    if (ws.code != bad[i].code || ws.nstart != 0) {
      fail_msg("WatchDir %s (keepalive %s): code %d after %d starts, want %d",
               bad[i].path, bad[i].ka != NULL ? bad[i].ka : "none",
               (int)ws.code, ws.nstart, (int)bad[i].code);
    }
    conch_call_free(ws.call.base);
  }
}

/* ---- Polling watchers -------------------------------------------------------- */

static int events_have(const Filesystem__GetWatcherEventsResponse *r,
                       const char *name, int type) {
  for (size_t i = 0; i < r->n_events; i++) {
    if (strcmp(r->events[i]->name, name) == 0 &&
        (int)r->events[i]->type == type) {
      return 1;
    }
  }
  return 0;
}

static void test_polling(void **state) {
  Filesystem__GetWatcherEventsResponse *r;
  char id[64];
  int64_t until;
  int seen = 0;

  (void)state;
  assert_int_equal(mkdir(tpath("p"), 0755), 0);
  assert_code(create_watcher(tpath("p"), 0, id, sizeof(id)), CONCH_CODE_OK);
  assert_int_equal(id[0], 'w');
  write_file(tpath("p/a"), "x");
  until = conch_now_ms() + 30000;
  while (!seen && conch_now_ms() < until) {
    assert_code(get_events(id, &r), CONCH_CODE_OK);
    seen = events_have(r, "a", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
    free_msg(r);
    if (!seen) {
      usleep(50000);
    }
  }
  assert_true(seen);
  assert_code(remove_watcher(id), CONCH_CODE_OK);
  assert_code(get_events(id, NULL), CONCH_CODE_NOT_FOUND);
  assert_non_null(strstr(last_msg, "not found"));
  assert_code(remove_watcher(id), CONCH_CODE_NOT_FOUND);
  assert_code(get_events("w-no-such", NULL), CONCH_CODE_NOT_FOUND);
  assert_code(create_watcher(tpath("p/none"), 0, NULL, 0),
              CONCH_CODE_NOT_FOUND);
  assert_code(create_watcher(tpath("p/a"), 0, NULL, 0),
              CONCH_CODE_INVALID_ARGUMENT);

  /* Past its event budget a watcher stops, and says so. */
  assert_code(create_watcher(tpath("p"), 0, id, sizeof(id)), CONCH_CODE_OK);
  for (int i = 0; i < MAX_EVENTS * 2; i++) {
    char name[32];
    snprintf(name, sizeof(name), "p/many-%d", i);
    write_file(tpath("%s", name), "x");
  }
  until = conch_now_ms() + 30000;
  for (;;) {
    conch_code c;
    usleep(100000);
    c = get_events(id, NULL);
    if (c == CONCH_CODE_RESOURCE_EXHAUSTED) {
      break;
    }
    /* Events taken in time make room: not the case here, as they all
       come at once; but a slow kernel may split them. */
    assert_code(c, CONCH_CODE_OK);
    assert_true(conch_now_ms() < until);
    for (int i = 0; i < MAX_EVENTS; i++) {
      char name[32];
      snprintf(name, sizeof(name), "p/more-%d-%lld", i,
               (long long)conch_now_ms());
      write_file(tpath("%s", name), "x");
    }
  }
  assert_non_null(strstr(last_msg, "not taken"));
  assert_code(get_events(id, NULL), CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_code(remove_watcher(id), CONCH_CODE_OK);

  /* Not asked for IDLE_MS: gone. */
  assert_code(create_watcher(tpath("p"), 0, id, sizeof(id)), CONCH_CODE_OK);
  until = conch_now_ms() + 60000;
  while (get_events(id, NULL) == CONCH_CODE_OK && conch_now_ms() < until) {
    usleep((IDLE_MS + 1000) * 1000);
  }
  assert_code(get_events(id, NULL), CONCH_CODE_NOT_FOUND);
}

/* ---- Bounds ------------------------------------------------------------------ */

/* A WatchDir client that stops reading is ended once more than its bound
   (2 MiB) is queued for it, with envd's overflow error; a watcher of the
   same directory that reads goes on, unharmed by the shared inotify
   queue. */
static void test_watch_slow_reader(void **state) {
  static const char *const hdrs[] = {"content-type",
                                     "application/connect+proto",
                                     "connect-protocol-version", "1", NULL};
  Filesystem__WatchDirRequest req = FILESYSTEM__WATCH_DIR_REQUEST__INIT;
  char name[256], path[512], last[256], code[64], msg[256];
  watch_state ws;
  h2_resp slow;
  h2_conn *hc;
  uint8_t *body;
  size_t len;
  int nfiles = 0;

  (void)state;
  assert_int_equal(mkdir(tpath("slow"), 0755), 0);
  req.path = tpath("slow");
  body = envelope(0, &req.base, &len);
  assert_non_null(body);
  assert_int_equal(h2_open(&hc, srv.port), 0);
  assert_true(h2_submit(hc, "POST", "/filesystem.Filesystem/WatchDir", hdrs,
                        body, len, &slow) > 0);
  (void)h2_run(hc, 300); /* the request out; then it is not read */
  watch_start(&ws, tpath("slow"), 0, NULL);
  watch_until(&ws, watch_started);
  assert_int_equal(ws.nstart, 1);
  /* 12 batches of 500 files made and removed, 240-byte names: about
     3 MiB of events for each watcher.  Each batch waits for the reading
     watcher to have it all, so the kernel's queue never fills. */
  for (int b = 0; b < 12; b++) {
    int64_t until = conch_now_ms() + 60000;

    for (int i = 0; i < 500; i++, nfiles++) {
      int fd;

      snprintf(name, sizeof(name), "%0240d", nfiles);
      snprintf(path, sizeof(path), "%s/%s", tpath("slow"), name);
      fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
      assert_true(fd >= 0);
      close(fd);
      assert_int_equal(unlink(path), 0);
    }
    memcpy(last, name, sizeof(last));
    while (!ws.ended && conch_now_ms() < until) {
      Filesystem__WatchDirResponse *m = NULL;
      int rv = filesystem__filesystem__watch_dir_recv(ws.call, &m);
      int done = 0;

      if (rv == CONCH_ERR_AGAIN) {
        (void)conch_client_run(cli, 50);
        continue;
      }
      if (rv != 0) {
        ws.ended = 1;
        break;
      }
      done = m->event_case ==
                 FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_FILESYSTEM &&
             m->filesystem->type == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_REMOVE &&
             strcmp(m->filesystem->name, last) == 0;
      conch_message_free(cli, &m->base);
      if (done) {
        break;
      }
    }
    assert_false(ws.ended);
    assert_true(conch_now_ms() < until);
  }
  /* The slow one, read at last: what was queued, then its end. */
  assert_int_equal(h2_run(hc, 60000), 0);
  assert_int_equal(slow.status, 200);
  connect_error(&slow, 1, code, sizeof(code), msg, sizeof(msg));
  assert_string_equal(code, "internal");
  assert_string_equal(msg,
                      "watcher error: fsnotify: queue or buffer overflow");
  assert_true(slow.len > (2u << 20));
  assert_true(slow.len < (3u << 20));
  /* The reading one goes on. */
  write_file(tpath("slow/after"), "a");
  wait_event(&ws, "after", FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE);
  conch_call_cancel(ws.call.base);
  conch_call_free(ws.call.base);
  h2_resp_free(&slow);
  h2_close(hc);
  free(body);
}

/* The server's open inotify descriptors. */
static int server_inotify_fds(void) { return proc_fds_of(srv.pid, "inotify"); }

/* Polls the watchers |ids| until each has had a create event of |name|
   (the events before it taken too). */
static void wait_all_saw(char (*ids)[64], int n, const char *name) {
  static unsigned char seen[MAX_WATCHERS];
  int64_t until = conch_now_ms() + 60000;
  int left = n;

  memset(seen, 0, sizeof(seen));
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      Filesystem__GetWatcherEventsResponse *r = NULL;

      if (seen[i]) {
        continue;
      }
      assert_code(get_events(ids[i], &r), CONCH_CODE_OK);
      for (size_t j = 0; j < r->n_events; j++) {
        if (r->events[j]->type == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE &&
            strcmp(r->events[j]->name, name) == 0) {
          seen[i] = 1;
          left--;
          break;
        }
      }
      conch_message_free(cli, &r->base);
    }
    if (left > 0) {
      if (conch_now_ms() > until) {
        fail_msg("%d of %d watchers did not see %s", left, n, name);
      }
      conch_sleep_ms(20);
    }
  }
}

static void test_many_watchers(void **state) {
  static char ids[MAX_WATCHERS][64];
  watch_state ws;
  int ok = 0, refused = 0;
  int64_t until;

  (void)state;
  assert_int_equal(mkdir(tpath("many"), 0755), 0);
  /* One held by a stream, then 10,000 asked for. */
  watch_start(&ws, tpath("many"), 1, NULL);
  watch_until(&ws, watch_started);
  assert_int_equal(ws.nstart, 1);
  for (int i = 0; i < 10000; i++) {
    char id[64];
    conch_code c;

    /* Asked for now and then, so that none expires (IDLE_MS) meanwhile. */
    if (i % 200 == 199) {
      for (int j = 0; j < ok; j++) {
        assert_code(get_events(ids[j], NULL), CONCH_CODE_OK);
      }
    }
    c = create_watcher(tpath("many"), 1, id, sizeof(id));

    if (c == CONCH_CODE_OK) {
      assert_true(ok < MAX_WATCHERS);
      snprintf(ids[ok++], sizeof(ids[0]), "%s", id);
    } else {
      assert_code(c, CONCH_CODE_RESOURCE_EXHAUSTED);
      refused++;
    }
  }
  assert_int_equal(ok, MAX_WATCHERS - 1);
  assert_int_equal(refused, 10000 - (MAX_WATCHERS - 1));
  assert_non_null(strstr(last_msg, "too many watchers"));
  assert_int_equal(server_inotify_fds(), 1);
  /* Each of them sees a new subdirectory, watches it (the same wd for
     all), and sees what is made in it. */
  assert_int_equal(mkdir(tpath("many/sub"), 0755), 0);
  wait_all_saw(ids, ok, "sub");
  write_file(tpath("many/sub/f"), "f");
  wait_all_saw(ids, ok, "sub/f");
  /* The stream's watcher goes with the stream. */
  conch_call_cancel(ws.call.base);
  conch_call_free(ws.call.base);
  until = conch_now_ms() + 30000;
  while (create_watcher(tpath("many"), 0, ids[ok], sizeof(ids[0])) !=
             CONCH_CODE_OK &&
         conch_now_ms() < until) {
    (void)conch_client_run(cli, 50);
  }
  assert_int_equal(ids[ok][0], 'w');
  ok++;
  for (int i = 0; i < ok; i++) {
    assert_code(remove_watcher(ids[i]), CONCH_CODE_OK);
  }
  assert_code(create_watcher(tpath("many"), 0, ids[0], sizeof(ids[0])),
              CONCH_CODE_OK);
  assert_code(remove_watcher(ids[0]), CONCH_CODE_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stat),         cmocka_unit_test(test_make_dir),
      cmocka_unit_test(test_move),         cmocka_unit_test(test_list_dir),
      cmocka_unit_test(test_remove),       cmocka_unit_test(test_users),
      cmocka_unit_test(test_watch_dir),    cmocka_unit_test(test_polling),
      cmocka_unit_test(test_many_watchers),
      cmocka_unit_test(test_watch_slow_reader),
  };

  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
