/* `conch cp SRC DST`: files between here and the sandbox over envd's
   /files (conch_files_read_fd, conch_files_write_fd), one side written
   :PATH (scp's host:path, the host given by --url), the other a local
   path or "-" (stdin, stdout); -r for directories.  Everything streams
   through the library's bounded buffers: a file of any size is never
   held in memory.  On a terminal (stderr) a progress line shows each
   file's bytes, share and rate. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <conch/files.h>

#include "cli.h"

enum { CP_RECURSIVE };

typedef struct cp_ctx {
  conch_sandbox *sb;
  int bar; /* a progress line on stderr */
  const char *name;
  int64_t start_ms, last_ms;
  int drawn;
} cp_ctx;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void human(double v, char *out, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  snprintf(out, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
}

static void draw(cp_ctx *c, uint64_t done, int64_t total, int last) {
  char d[32], r[32];
  int64_t t = now_ms();
  double secs = (double)(t - c->start_ms) / 1000.0;
  if (!last && t - c->last_ms < 100) {
    return;
  }
  c->last_ms = t;
  human((double)done, d, sizeof(d));
  human(secs > 0.001 ? (double)done / secs : 0, r, sizeof(r));
  if (total > 0) {
    fprintf(stderr, "\r%-40.40s %3d%% %10s %10s/s", c->name,
            (int)(done * 100 / (uint64_t)total), d, r);
  } else {
    fprintf(stderr, "\r%-40.40s      %10s %10s/s", c->name, d, r);
  }
  c->drawn = 1;
  if (last) {
    fputc('\n', stderr);
    c->drawn = 0;
  }
}

static void on_progress(uint64_t done, int64_t total, void *ud) {
  draw(ud, done, total, 0);
}

static conch_files_io_opts io_opts(cp_ctx *c, const char *name) {
  conch_files_io_opts o = CONCH_FILES_IO_OPTS_INIT;
  c->name = name;
  c->start_ms = now_ms();
  c->last_ms = 0;
  c->drawn = 0;
  if (c->bar) {
    o.progress = on_progress;
    o.progress_ud = c;
  }
  return o;
}

static void bar_end(cp_ctx *c, int ok, uint64_t bytes, int64_t total) {
  if (c->bar && ok) {
    draw(c, bytes, total, 1);
  } else if (c->drawn) {
    fputc('\n', stderr);
    c->drawn = 0;
  }
}

static const char *base_name(const char *p) {
  size_t n = strlen(p);
  const char *b;
  while (n > 1 && p[n - 1] == '/') {
    n--;
  }
  b = p + n;
  while (b > p && b[-1] != '/') {
    b--;
  }
  return b;
}

/* |dir|/|name| (without a doubled '/'), or NULL when out of memory. */
static char *join(const char *dir, const char *name, size_t nlen) {
  size_t dl = strlen(dir);
  char *s = malloc(dl + nlen + 2);
  if (s == NULL) {
    return NULL;
  }
  memcpy(s, dir, dl);
  if (dl > 0 && dir[dl - 1] != '/') {
    s[dl++] = '/';
  }
  memcpy(s + dl, name, nlen);
  s[dl + nlen] = '\0';
  return s;
}

static int local_fail(const char *path, int err) {
  return cli_fail_local(CLI_EXIT_INVALID, CONCH_CODE_INVALID_ARGUMENT,
                        "conch cp", NULL, 0, "%s: %s", path, strerror(err));
}

/* ---- Upload ------------------------------------------------------------- */

static int up_file(cp_ctx *c, const char *src, const char *dst) {
  conch_files_io_opts o = io_opts(c, src);
  conch_status st;
  struct stat sbuf;
  int fd = strcmp(src, "-") == 0 ? 0 : open(src, O_RDONLY | O_CLOEXEC);
  int rv;
  if (fd < 0) {
    return local_fail(src, errno);
  }
  conch_status_init(&st);
  rv = conch_files_write_fd(c->sb, dst, fd, &o, &st);
  if (rv == 0) {
    bar_end(c, 1, fstat(fd, &sbuf) == 0 ? (uint64_t)sbuf.st_size : 0,
            fstat(fd, &sbuf) == 0 && S_ISREG(sbuf.st_mode) ? sbuf.st_size : -1);
  } else {
    bar_end(c, 0, 0, 0);
    rv = rv == CONCH_ERR_IO ? local_fail(src, errno)
                            : cli_rpc_fail("cp", rv, &st);
  }
  conch_status_clear(&st);
  if (fd != 0) {
    close(fd);
  }
  return rv;
}

static int remote_mkdir(cp_ctx *c, const char *path) {
  conch_status st;
  int rv;
  conch_status_init(&st);
  rv = conch_files_mkdir(c->sb, path, NULL, NULL, &st);
  if (rv == CONCH_ERR_RPC && st.code == CONCH_CODE_ALREADY_EXISTS) {
    rv = 0;
  } else if (rv != 0) {
    rv = cli_rpc_fail("cp", rv, &st);
  }
  conch_status_clear(&st);
  return rv;
}

static int up_tree(cp_ctx *c, const char *src, const char *dst) {
  struct stat sbuf;
  DIR *d;
  struct dirent *de;
  int rv;
  if (lstat(src, &sbuf) != 0) {
    return local_fail(src, errno);
  }
  if (!S_ISDIR(sbuf.st_mode)) {
    if (S_ISREG(sbuf.st_mode)) {
      return up_file(c, src, dst);
    }
    cli_note("cp: skipped '%s' (not a regular file or directory)", src);
    return 0;
  }
  rv = remote_mkdir(c, dst);
  if (rv != 0) {
    return rv;
  }
  d = opendir(src);
  if (d == NULL) {
    return local_fail(src, errno);
  }
  while (rv == 0 && (errno = 0, de = readdir(d)) != NULL) {
    char *s, *t;
    size_t n = strlen(de->d_name);
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
      continue;
    }
    s = join(src, de->d_name, n);
    t = join(dst, de->d_name, n);
    rv = s != NULL && t != NULL ? up_tree(c, s, t) : local_fail(src, ENOMEM);
    free(s);
    free(t);
  }
  closedir(d);
  return rv;
}

/* ---- Download ----------------------------------------------------------- */

static int down_file(cp_ctx *c, const char *src, const char *dst) {
  conch_files_io_opts o = io_opts(c, src);
  conch_status st;
  struct stat sbuf;
  int existed = 0, fd, rv;
  if (strcmp(dst, "-") == 0) {
    fd = 1;
  } else {
    existed = stat(dst, &sbuf) == 0;
    fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return local_fail(dst, errno);
    }
  }
  conch_status_init(&st);
  rv = conch_files_read_fd(c->sb, src, fd, &o, &st);
  if (rv == 0) {
    off_t end = fd != 1 ? lseek(fd, 0, SEEK_CUR) : 0;
    bar_end(c, 1, end > 0 ? (uint64_t)end : 0, end > 0 ? end : -1);
  } else {
    int eno = errno;
    bar_end(c, 0, 0, 0);
    if (fd != 1 && !existed) {
      unlink(dst); /* nothing half-made left behind */
    }
    rv = rv == CONCH_ERR_IO ? (fd == 1 ? cli_fail_output("stdout", eno, 0, NULL)
                                       : local_fail(dst, eno))
                            : cli_rpc_fail("cp", rv, &st);
  }
  conch_status_clear(&st);
  if (fd != 1 && close(fd) != 0 && rv == 0) {
    rv = local_fail(dst, errno);
  }
  return rv;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const conch_entry_info *)a)->path,
                ((const conch_entry_info *)b)->path);
}

/* The directory |src| (its entry |top|) into the local |dst|: the whole
   tree listed at once (entries sorted, so a directory comes before what
   is in it), then each file read. */
static int down_tree(cp_ctx *c, const conch_entry_info *top, const char *dst) {
  conch_entry_info *v = NULL;
  conch_status st;
  size_t n = 0, i, plen = strlen(top->path);
  int rv;
  if (mkdir(dst, 0755) != 0 && errno != EEXIST) {
    return local_fail(dst, errno);
  }
  conch_status_init(&st);
  rv = conch_files_list(c->sb, top->path, 1000, NULL, &v, &n, &st);
  if (rv != 0) {
    rv = cli_rpc_fail("cp", rv, &st);
    conch_status_clear(&st);
    return rv;
  }
  conch_status_clear(&st);
  if (n > 1) {
    qsort(v, n, sizeof(*v), by_path);
  }
  for (i = 0; i < n && rv == 0; i++) {
    const conch_entry_info *e = &v[i];
    const char *rel = e->path + plen;
    char *local;
    if (strncmp(e->path, top->path, plen) != 0 || rel[0] != '/') {
      continue; /* not below the listed directory: not ours to copy */
    }
    local = join(dst, rel + 1, strlen(rel + 1));
    if (local == NULL) {
      rv = local_fail(dst, ENOMEM);
      break;
    }
    if (e->type == CONCH_FILE_DIRECTORY && e->symlink_target == NULL) {
      if (mkdir(local, 0755) != 0 && errno != EEXIST) {
        rv = local_fail(local, errno);
      }
    } else if (e->type == CONCH_FILE_REGULAR && e->symlink_target == NULL) {
      rv = down_file(c, e->path, local);
    } else {
      cli_note("cp: skipped ':%s' (not a regular file or directory)", e->path);
    }
    free(local);
  }
  conch_entries_free(v, n);
  return rv;
}

/* ---- The command -------------------------------------------------------- */

int conch_cli_cp(cli_globals *g, int argc, char **argv) {
  cp_ctx c;
  conch_status st;
  conch_entry_info *e = NULL;
  const char *val, *src, *dst;
  char *target = NULL;
  int a = 1, k, rv, recursive = 0, up;

  while ((k = cli_next("cp", cli_cp_opts, g, argc, argv, &a, &val)) >= 0) {
    recursive = 1; /* -r, its only option */
  }
  if (k == CLI_ERROR) {
    return CLI_EXIT_USAGE;
  }
  if (argc - a != 2) {
    return cli_usage_error("cp", "takes two operands, SRC and DST");
  }
  src = argv[a];
  dst = argv[a + 1];
  if ((src[0] == ':') == (dst[0] == ':')) {
    return cli_usage_fail("cp",
                          "one of SRC and DST is a sandbox path (:PATH), the "
                          "other a local path or -");
  }
  up = dst[0] == ':';
  if (recursive && (strcmp(src, "-") == 0 || strcmp(dst, "-") == 0)) {
    return cli_usage_fail("cp", "-r copies a directory: not to or from -");
  }
  memset(&c, 0, sizeof(c));
  c.bar = isatty(2) && !cli_json_errors();
  rv = cli_open_sandbox(g, &c.sb);
  if (rv != 0) {
    return rv;
  }
  conch_status_init(&st);
  if (up) {
    struct stat sbuf;
    const char *rdst = dst + 1;
    int is_dir_src =
        strcmp(src, "-") != 0 && stat(src, &sbuf) == 0 && S_ISDIR(sbuf.st_mode);
    if (is_dir_src && !recursive) {
      rv = cli_fail_local(CLI_EXIT_INVALID, CONCH_CODE_INVALID_ARGUMENT,
                          "conch cp", "use -r to copy a directory", 0,
                          "%s is a directory", src);
      goto out;
    }
    /* Into a directory that is there (or DST/): DST/NAME, as cp does. */
    if (rdst[0] == '\0' || rdst[strlen(rdst) - 1] == '/' ||
        (conch_files_stat(c.sb, rdst, NULL, &e, &st) == 0 &&
         e->type == CONCH_FILE_DIRECTORY)) {
      if (strcmp(src, "-") == 0) {
        rv = cli_usage_fail("cp", "- into a directory: name the file");
        goto out;
      }
      target = join(rdst, base_name(src), strlen(base_name(src)));
    } else {
      target = join("", rdst, strlen(rdst));
    }
    conch_status_clear(&st);
    conch_status_init(&st);
    if (target == NULL) {
      rv = local_fail(src, ENOMEM);
    } else {
      rv = is_dir_src ? up_tree(&c, src, target) : up_file(&c, src, target);
    }
  } else {
    struct stat sbuf;
    const char *rsrc = src + 1;
    rv = conch_files_stat(c.sb, rsrc, NULL, &e, &st);
    if (rv != 0) {
      rv = cli_rpc_fail("cp", rv, &st);
      goto out;
    }
    if (e->type == CONCH_FILE_DIRECTORY && !recursive) {
      rv = cli_fail_local(CLI_EXIT_INVALID, CONCH_CODE_INVALID_ARGUMENT,
                          "conch cp", "use -r to copy a directory", 0,
                          ":%s is a directory", rsrc);
      goto out;
    }
    if (strcmp(dst, "-") != 0 && stat(dst, &sbuf) == 0 &&
        S_ISDIR(sbuf.st_mode)) {
      const char *b = base_name(e->path);
      target = join(dst, b, strlen(b));
    } else {
      target = join("", dst, strlen(dst));
    }
    if (target == NULL) {
      rv = local_fail(dst, ENOMEM);
    } else if (e->type == CONCH_FILE_DIRECTORY) {
      rv = down_tree(&c, e, target);
    } else {
      rv = down_file(&c, e->path, target);
    }
  }
out:
  free(target);
  conch_entry_free(e);
  conch_status_clear(&st);
  conch_sandbox_free(c.sb);
  return rv;
}
