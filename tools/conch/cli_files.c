/* The conch CLI's file commands: ls, stat, mkdir, mv, rm, watch, on the
   files API (conch/files.h).  A sandbox path is written :PATH, as scp's
   host:path with the host given by --url; PATH is absolute or relative to
   the user's home (":" alone is the home directory). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <conch/files.h>

#include "cli.h"

/* The :PATH operand argv[i] of |cmd|: the path after the colon, or NULL
   after a usage error. */
static const char *sandbox_path(const char *cmd, int argc, char **argv,
                                int i) {
  if (i >= argc) {
    cli_usage_error(cmd, "a sandbox path (:PATH) is missing");
    return NULL;
  }
  if (argv[i][0] != ':') {
    cli_usage_fail(cmd,
                   "'%s' is not a sandbox path: write it :PATH (:%s), as "
                   "scp's host:path with the host given by --url",
                   argv[i], argv[i]);
    return NULL;
  }
  return argv[i] + 1;
}

/* A failed call: its status (exit code by its Connect code), or what the
   library returned. */
static int fail(const char *what, int rv, const conch_status *st) {
  return cli_rpc_fail(what, rv, st);
}

/* The modified time as "YYYY-MM-DD HH:MM" in local time (ls -l). */
static void put_mtime_short(FILE *f, const conch_entry_info *e) {
  char buf[32];
  time_t t = (time_t)e->mtime_sec;
  struct tm tm;
  if (localtime_r(&t, &tm) == NULL ||
      strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm) == 0) {
    snprintf(buf, sizeof(buf), "%lld", (long long)e->mtime_sec);
  }
  fputs(buf, f);
}

/* The modified time in RFC 3339, UTC, with nanoseconds (stat). */
static void put_mtime_full(FILE *f, const conch_entry_info *e) {
  char buf[40];
  time_t t = (time_t)e->mtime_sec;
  struct tm tm;
  if (gmtime_r(&t, &tm) == NULL ||
      strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
    fprintf(f, "%lld", (long long)e->mtime_sec);
    return;
  }
  fprintf(f, "%s.%09dZ", buf, (int)e->mtime_nsec);
}

/* ---- ls ----------------------------------------------------------------- */

enum { LS_LONG, LS_DEPTH };

/* How long the common directory prefix of |v|'s paths is: the directory
   of the shallowest entry, with its '/'.  At depth 1 each name is then its
   path's last component; deeper, "a/b/c" relative to the listed
   directory. */
static size_t listed_prefix(const conch_entry_info *v, size_t n) {
  size_t i, best = 0, slashes_best = (size_t)-1;
  for (i = 0; i < n; i++) {
    size_t k, s = 0;
    for (k = 0; v[i].path[k] != '\0'; k++) {
      s += v[i].path[k] == '/';
    }
    if (s < slashes_best) {
      const char *last = strrchr(v[i].path, '/');
      slashes_best = s;
      best = last != NULL ? (size_t)(last - v[i].path) + 1 : 0;
    }
  }
  return best;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const conch_entry_info *)a)->path,
                ((const conch_entry_info *)b)->path);
}

int conch_cli_ls(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_entry_info *v;
  conch_status st;
  const char *val, *path = "";
  size_t n, i, pre;
  int a = 1, k, rv, llong = 0;
  unsigned long depth = 1;

  while ((k = cli_next("ls", cli_ls_opts, g, argc, argv, &a, &val)) >= 0) {
    if (k == LS_LONG) {
      llong = 1;
    } else {
      char *end;
      errno = 0;
      depth = strtoul(val, &end, 10);
      if (errno != 0 || end == val || *end != '\0' || val[0] == '-' ||
          depth < 1 || depth > 1000) {
        return cli_usage_fail("ls", "--depth %s: not a number from 1 to 1000",
                              val);
      }
    }
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  if (a < argc) {
    path = sandbox_path("ls", argc, argv, a);
    if (path == NULL) {
      return CLI_EXIT_USAGE;
    }
    a++;
  }
  if (a != argc) {
    return cli_usage_error("ls", "takes one sandbox path");
  }
  rv = cli_open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  rv = conch_files_list(sb, path, (uint32_t)depth, NULL, &v, &n, &st);
  if (rv != 0) {
    rv = fail("ls", rv, &st);
    conch_status_clear(&st);
    conch_sandbox_free(sb);
    return rv;
  }
  if (n > 1) {
    qsort(v, n, sizeof(*v), by_path);
  }
  pre = listed_prefix(v, n);
  for (i = 0; i < n; i++) {
    const conch_entry_info *e = &v[i];
    const char *name = strlen(e->path) > pre ? e->path + pre : e->name;
    if (llong) {
      printf("%s %-8s %-8s %10lld ", e->permissions, e->owner, e->group,
             (long long)e->size);
      put_mtime_short(stdout, e);
      printf(" %s%s", name, e->type == CONCH_FILE_DIRECTORY ? "/" : "");
      if (e->symlink_target != NULL) {
        printf(" -> %s", e->symlink_target);
      }
      putchar('\n');
    } else {
      printf("%s%s\n", name, e->type == CONCH_FILE_DIRECTORY ? "/" : "");
    }
  }
  conch_entries_free(v, n);
  conch_sandbox_free(sb);
  return 0;
}

/* ---- stat --------------------------------------------------------------- */

int conch_cli_stat(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_entry_info *e;
  conch_status st;
  const char *val, *path;
  int a = 1, k, rv;

  while ((k = cli_next("stat", cli_none_opts, g, argc, argv, &a, &val)) >= 0) {
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  path = sandbox_path("stat", argc, argv, a);
  if (path == NULL) {
    return CLI_EXIT_USAGE;
  }
  if (a + 1 != argc) {
    return cli_usage_error("stat", "takes one sandbox path");
  }
  rv = cli_open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  rv = conch_files_stat(sb, path, NULL, &e, &st);
  if (rv != 0) {
    rv = fail("stat", rv, &st);
    conch_status_clear(&st);
    conch_sandbox_free(sb);
    return rv;
  }
  printf("path: %s\nname: %s\ntype: %s\nsize: %lld\nmode: %04o\n"
         "permissions: %s\nowner: %s\ngroup: %s\nmodified: ",
         e->path, e->name, conch_file_type_name(e->type), (long long)e->size,
         (unsigned)(e->mode & 07777), e->permissions, e->owner, e->group);
  put_mtime_full(stdout, e);
  putchar('\n');
  if (e->symlink_target != NULL) {
    printf("symlink_target: %s\n", e->symlink_target);
  }
  for (size_t i = 0; i < e->n_metadata; i++) {
    printf("metadata.%s: %s\n", e->metadata[i].key, e->metadata[i].value);
  }
  conch_entry_free(e);
  conch_sandbox_free(sb);
  return 0;
}

/* ---- mkdir, mv, rm ------------------------------------------------------ */

/* The :PATH operands from argv[a] on, at least one; 0 or the exit code. */
static int paths_check(const char *cmd, int argc, char **argv, int a) {
  int i;
  if (a >= argc) {
    return cli_usage_error(cmd, "a sandbox path (:PATH) is missing");
  }
  for (i = a; i < argc; i++) {
    if (sandbox_path(cmd, argc, argv, i) == NULL) {
      return CLI_EXIT_USAGE;
    }
  }
  return 0;
}

int conch_cli_mkdir(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_status st;
  const char *val;
  int a = 1, k, rv, parents = 0, i;

  while ((k = cli_next("mkdir", cli_mkdir_opts, g, argc, argv, &a, &val)) >=
         0) {
    parents = 1; /* -p, its only option */
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  rv = paths_check("mkdir", argc, argv, a);
  if (rv != 0) {
    return rv;
  }
  rv = cli_open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  for (i = a; i < argc && rv == 0; i++) {
    const char *path = argv[i] + 1;
    rv = conch_files_mkdir(sb, path, NULL, NULL, &st);
    if (rv == CONCH_ERR_RPC && parents &&
        st.code == CONCH_CODE_ALREADY_EXISTS) {
      /* -p: envd says already_exists of a directory only (a file in the
         way is invalid_argument), so this one is there as asked. */
      rv = 0;
      conch_status_clear(&st);
      conch_status_init(&st);
    }
    if (rv != 0) {
      rv = fail("mkdir", rv, &st);
    }
  }
  conch_status_clear(&st);
  conch_sandbox_free(sb);
  return rv;
}

int conch_cli_mv(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_status st;
  const char *val;
  int a = 1, k, rv;

  while ((k = cli_next("mv", cli_none_opts, g, argc, argv, &a, &val)) >= 0) {
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  if (argc - a != 2) {
    return cli_usage_error("mv", "takes two sandbox paths, :SRC and :DST");
  }
  rv = paths_check("mv", argc, argv, a);
  if (rv != 0) {
    return rv;
  }
  rv = cli_open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  rv = conch_files_move(sb, argv[a] + 1, argv[a + 1] + 1, NULL, NULL, &st);
  if (rv != 0) {
    rv = fail("mv", rv, &st);
  }
  conch_status_clear(&st);
  conch_sandbox_free(sb);
  return rv;
}

int conch_cli_rm(cli_globals *g, int argc, char **argv) {
  conch_sandbox *sb;
  conch_status st;
  const char *val;
  int a = 1, k, rv, i;

  while ((k = cli_next("rm", cli_none_opts, g, argc, argv, &a, &val)) >= 0) {
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  rv = paths_check("rm", argc, argv, a);
  if (rv != 0) {
    return rv;
  }
  rv = cli_open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  for (i = a; i < argc && rv == 0; i++) {
    rv = conch_files_remove(sb, argv[i] + 1, NULL, &st);
    if (rv != 0) {
      rv = fail("rm", rv, &st);
    }
  }
  conch_status_clear(&st);
  conch_sandbox_free(sb);
  return rv;
}

/* ---- watch -------------------------------------------------------------- */

enum { W_RECURSIVE, W_JSON };

static volatile sig_atomic_t watch_signal;
static void on_watch_signal(int sig) { watch_signal = sig; }

int conch_cli_watch(cli_globals *g, int argc, char **argv) {
  static const int ending[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
  struct sigaction sa;
  conch_sandbox *sb;
  conch_watch *w;
  conch_status st;
  const char *val, *path;
  unsigned flags = 0;
  int a = 1, k, rv, json = 0;
  size_t s;

  while ((k = cli_next("watch", cli_watch_opts, g, argc, argv, &a, &val)) >=
         0) {
    if (k == W_RECURSIVE) {
      flags |= CONCH_WATCH_RECURSIVE;
    } else {
      json = 1;
    }
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  path = sandbox_path("watch", argc, argv, a);
  if (path == NULL) {
    return CLI_EXIT_USAGE;
  }
  if (a + 1 != argc) {
    return cli_usage_error("watch", "takes one sandbox directory");
  }
  rv = cli_open_sandbox(g, &sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  rv = conch_files_watch(sb, path, flags, NULL, &w, &st);
  if (rv != 0) {
    rv = fail("watch", rv, &st);
    conch_status_clear(&st);
    conch_sandbox_free(sb);
    return rv;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_watch_signal;
  sigemptyset(&sa.sa_mask);
  for (s = 0; s < sizeof(ending) / sizeof(ending[0]); s++) {
    sigaction(ending[s], &sa, NULL);
  }
  /* Watching from here on: a line on stderr says so (for a script that
     waits for it before it changes the directory). */
  if (json) {
    fprintf(stderr, "conch: watching %s\n", path[0] != '\0' ? path : "~");
  } else {
    fprintf(stderr, "conch: watching %s (Ctrl-C ends)\n",
            path[0] != '\0' ? path : "~");
  }
  fflush(stderr);
  for (;;) {
    conch_fs_event ev;
    if (watch_signal != 0) {
      rv = 128 + (int)watch_signal;
      break;
    }
    /* Short waits: a signal is seen within 200 ms. */
    rv = conch_watch_next(w, &ev, 200);
    if (rv == CONCH_ERR_TIMEOUT) {
      continue;
    }
    if (rv == CONCH_ERR_EOF) {
      rv = 0;
      break;
    }
    if (rv == CONCH_ERR_RPC) {
      rv = fail("watch", rv, conch_watch_status(w));
      break;
    }
    if (rv != 0) {
      rv = fail("watch", rv, NULL);
      break;
    }
    if (json) {
      fputs("{\"type\":", stdout);
      cli_json_string(stdout, conch_fs_event_name(ev.type), 1);
      fputs(",\"name\":", stdout);
      cli_json_string(stdout, ev.name, 1);
      fputs("}\n", stdout);
    } else {
      printf("%s %s\n", conch_fs_event_name(ev.type), ev.name);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
      rv = cli_fail_output("stdout", errno, 0, "the watch was ended");
      break;
    }
  }
  conch_watch_close(w);
  conch_status_clear(&st);
  conch_sandbox_free(sb);
  return rv;
}
