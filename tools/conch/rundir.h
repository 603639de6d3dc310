/* The private per-user runtime directory the CLI and `conch serve` meet in
   (rundir.c). */
#ifndef CONCH_RUNDIR_H
#define CONCH_RUNDIR_H

#include <stddef.h>

/* Finds or creates the directory: $XDG_RUNTIME_DIR/conch when
   XDG_RUNTIME_DIR is a directory of ours, else ${TMPDIR:-/tmp}/conch-<euid>. It
   must be a real directory (not a symlink), owned by our euid, with no access
   for group or others. Returns an O_DIRECTORY descriptor of it (close-on-exec)
   with its path in |path|, or -1 with a message in |err|. */
int conch_rundir_open(char *path, size_t cap, char *err, size_t errlen);

/* Opens |name| in the directory |dirfd| without following a symlink, and
   checks that it is a regular file owned by our euid.  |flags| as open(2)
   (O_NOFOLLOW and O_CLOEXEC are added; with O_CREAT the mode is 0600).
   Returns the fd, or -1 with errno set (ELOOP for a symlink, EPERM for
   someone else's file or not a regular file). */
int conch_rundir_openat(int dirfd, const char *name, int flags);

#endif
