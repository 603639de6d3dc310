/* The private runtime directory: created with mode 0700, then opened
   without following symlinks and checked (owner, mode) through the
   descriptor, so that a directory or symlink another user planted in a
   shared /tmp is refused rather than used. */
#include "rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int conch_rundir_open(char *path, size_t cap, char *err, size_t errlen) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  const char *tmp = getenv("TMPDIR");
  struct stat sb;
  int n, fd;

  /* XDG_RUNTIME_DIR is the user's own (a sudo shell may keep another
     user's): use it only then. */
  if (xdg != NULL && xdg[0] == '/' && stat(xdg, &sb) == 0 &&
      S_ISDIR(sb.st_mode) && sb.st_uid == geteuid()) {
    n = snprintf(path, cap, "%s/conch", xdg);
  } else {
    n = snprintf(path, cap, "%s/conch-%ld",
                 tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", (long)geteuid());
  }
  if (n < 0 || (size_t)n >= cap) {
    snprintf(err, errlen, "runtime directory path too long");
    return -1;
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return -1;
  }
  fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open %s: %s%s", path, strerror(errno),
             errno == ELOOP || errno == ENOTDIR ? " (not a directory)" : "");
    return -1;
  }
  if (fstat(fd, &sb) != 0 || sb.st_uid != geteuid() ||
      (sb.st_mode & 077) != 0) {
    snprintf(err, errlen,
             "%s is not a private directory of ours (owner uid %ld, mode "
             "%03o; want uid %ld, mode 0700): remove it, or set "
             "XDG_RUNTIME_DIR",
             path, (long)sb.st_uid, (unsigned)(sb.st_mode & 0777),
             (long)geteuid());
    close(fd);
    return -1;
  }
  return fd;
}

int conch_rundir_openat(int dirfd, const char *name, int flags) {
  struct stat sb;
  int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600);

  if (fd < 0) {
    return -1;
  }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != geteuid()) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}
