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
     the target refuses to run.  libFuzzer's crash files cannot be written
     either: give -artifact_prefix=/tmp/ and copy them out of the run, or
     replay a crash with fuzz_serve (same input format).

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
  for (i = 0; i < sizeof(jails) / sizeof(jails[0]); i++) {
    if (mount("fuzz_files", jails[i], "tmpfs", MS_NOSUID | MS_NODEV,
              TMPFS_SIZE ",mode=1777") != 0) {
      die(jails[i]);
    }
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
    nftw(jails[i], rm_one, 16, FTW_DEPTH | FTW_PHYS);
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
