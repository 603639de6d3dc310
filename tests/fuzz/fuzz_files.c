/* `conch serve`'s /files (tools/conch/serve_files.c) fed a client's bytes:
   the query (path, username, signature, signature_expiration), the token,
   both upload encodings (application/octet-stream and multipart/form-data,
   either gzip'd), downloads, HTTP/1.1 keep-alive and chunked bodies, the
   errors (400, 401, 404, 507).  The harness is fuzz_serve.c's, whole (the
   server core on a socketpair, fake processes and users, the input's flag
   byte: see there), with one difference: /files writes real files, so the
   process first confines itself, once:

   - a mount namespace of its own (unshare; a user namespace first when
     it is not root) with a fresh tmpfs of TMPFS_SIZE on /tmp, /var/tmp
     and /dev/shm: what an upload writes lands there and goes with the
     process, and a large upload fills it (507, ENOSPC);
   - every other mount of the namespace read-only first (mount_setattr,
     recursive), and the process drops to nobody (65534) when it was root:
     nothing outside those tmpfs can be written whatever path an input
     names, while the rest stays readable (the replay of the corpus needs
     it).  Not root, the read-only tree is the whole guard: without it
     the target refuses to run.
   - except libFuzzer's own scratch folders: its first corpus folder
     (where new inputs go) and the folder of -artifact_prefix (crashes),
     seen in LLVMFuzzerInitialize's arguments.  Each is bound, writable,
     over its own path inside the namespace (under the new /tmp too), and
     handed to nobody when root drops to it, so a run is given its folders
     as any other fuzzer's: `fuzz_files -artifact_prefix=W/ W CORPUS`.
     An input may write there as well (it names the path): scratch, the
     runner's to throw away.

   Between inputs the tmpfs are emptied, so each input starts from the same
   tree.  A process that cannot confine itself stops with a message
   instead of fuzzing a server that could write anywhere.

   Input: as fuzz_serve (byte 0 the flags, byte 1 the clock's step, the
   rest what the client sends);
   the seeds in corpus/files are HTTP/1.1 requests to /files. */
#define LLVMFuzzerTestOneInput fuzz_serve_one_input
#include "fuzz_serve.c"
#undef LLVMFuzzerTestOneInput

#include <ftw.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/syscall.h>

/* linux/mount.h's, which does not mix with sys/mount.h everywhere. */
struct fz_mount_attr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#define FZ_MOUNT_ATTR_RDONLY 0x1
#define FZ_AT_RECURSIVE 0x8000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* libFuzzer's scratch folders, kept writable (see above). */
#define MAX_KEEP 2
static char *keep[MAX_KEEP];
static int nkeep;

static void keep_dir(const char *path, size_t n) {
  struct stat sb;
  char *d;
  char *real;
  if (nkeep == MAX_KEEP || n == 0 || (d = strndup(path, n)) == NULL) {
    return;
  }
  real = realpath(d, NULL);
  free(d);
  if (real == NULL || stat(real, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    free(real);
    return;
  }
  for (int i = 0; i < nkeep; i++) {
    if (strcmp(keep[i], real) == 0) {
      free(real);
      return;
    }
  }
  keep[nkeep++] = real;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  int corpus = 0;
  for (int i = 1; i < *argc; i++) {
    const char *a = (*argv)[i];
    if (strncmp(a, "-artifact_prefix=", 17) == 0) {
      const char *v = a + 17, *slash = strrchr(v, '/');
      if (slash != NULL) {
        keep_dir(v, slash == v ? 1 : (size_t)(slash - v));
      }
    } else if (a[0] != '-' && !corpus) {
      corpus = 1; /* the first folder: new inputs */
      keep_dir(a, strlen(a));
    }
  }
  return 0;
}

static void die(const char *what);

/* mkdir -p |path| (inside the namespace). */
static void make_path(const char *path) {
  char *d = strdup(path);
  if (d == NULL) {
    die("strdup");
  }
  for (char *p = d + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      (void)mkdir(d, 0755);
      *p = c;
      if (c == '\0') {
        break;
      }
    }
  }
  free(d);
}

#define TMPFS_SIZE "size=1m,nr_inodes=256" /* small: a full disk is easy */

static const char *const jails[] = {"/tmp", "/var/tmp", "/dev/shm"};

static void die(const char *what) {
  fprintf(stderr, "fuzz_files: cannot confine the server (%s: %s)\n", what,
          strerror(errno));
  abort();
}

/* Writes |s| to /proc/self/|name| (a user namespace's maps). */
static void proc_write(const char *name, const char *s) {
  char path[64];
  int fd;
  snprintf(path, sizeof(path), "/proc/self/%s", name);
  fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s)) {
    die(path);
  }
  close(fd);
}

static void confine(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  size_t i;

  if (uid != 0) {
    char map[64];
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      die("unshare");
    }
    proc_write("setgroups", "deny");
    snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)uid);
    proc_write("uid_map", map);
    snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)gid);
    proc_write("gid_map", map);
  } else if (unshare(CLONE_NEWNS) != 0) {
    die("unshare");
  }
  if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    die("mount --make-rprivate /");
  }
  {
    struct fz_mount_attr ma;
    memset(&ma, 0, sizeof(ma));
    ma.attr_set = FZ_MOUNT_ATTR_RDONLY;
    if (syscall(SYS_mount_setattr, -1, "/", FZ_AT_RECURSIVE, &ma, sizeof(ma)) !=
            0 &&
        uid != 0) {
      die("mount_setattr / read-only");
    }
  }
  int kfd[MAX_KEEP];
  for (int k = 0; k < nkeep; k++) {
    kfd[k] = open(keep[k], O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (kfd[k] < 0) {
      die(keep[k]);
    }
  }
  for (i = 0; i < sizeof(jails) / sizeof(jails[0]); i++) {
    if (mount("fuzz_files", jails[i], "tmpfs", MS_NOSUID | MS_NODEV,
              TMPFS_SIZE ",mode=1777") != 0) {
      die(jails[i]);
    }
  }
  for (int k = 0; k < nkeep; k++) {
    char from[64];
    struct fz_mount_attr ma;
    snprintf(from, sizeof(from), "/proc/self/fd/%d", kfd[k]);
    make_path(keep[k]);
    if (mount(from, keep[k], NULL, MS_BIND, NULL) != 0) {
      die(keep[k]);
    }
    memset(&ma, 0, sizeof(ma));
    ma.attr_clr = FZ_MOUNT_ATTR_RDONLY;
    if (syscall(SYS_mount_setattr, -1, keep[k], 0, &ma, sizeof(ma)) != 0 &&
        errno != ENOSYS) {
      die(keep[k]);
    }
    if (uid == 0 && chown(keep[k], 65534, 65534) != 0) {
      die(keep[k]);
    }
    close(kfd[k]);
  }
  if (uid == 0) {
    /* Root could write anywhere: nobody can write only the tmpfs. */
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) {
      die("setuid nobody");
    }
  }
}

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw) {
  (void)sb;
  (void)flag;
  if (ftw->level > 0) {
    remove(path);
  }
  return 0;
}

/* Empties the tmpfs: the next input starts from nothing. */
static void clean(void) {
  size_t i;
  for (i = 0; i < sizeof(jails) / sizeof(jails[0]); i++) {
    /* Not into libFuzzer's folders, mounts of their own. */
    nftw(jails[i], rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int confined;
  if (!confined) {
    confine();
    confined = 1;
  }
  fuzz_serve_one_input(data, size);
  clean();
  return 0;
}
