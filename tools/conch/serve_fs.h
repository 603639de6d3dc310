/* Internals of the filesystem service, shared by serve_fs.c (paths, the
   user's filesystem identity, entries and the unary RPCs) and
   serve_fs_watch.c (WatchDir and the polling watchers). */
#ifndef CONCH_SERVE_FS_H
#define CONCH_SERVE_FS_H

#include <stddef.h>
#include <sys/types.h>

#include "serve.h"

#include "filesystem/filesystem.conch.h"

/* Directories deeper than this are not descended into by Remove. */
#define FS_MAX_DEPTH 4096

typedef struct fs_wdref fs_wdref;
typedef struct fs_sub fs_sub;
typedef struct fs_hidden fs_hidden;

typedef struct srv_fs {
  srv_server *srv;
  Filesystem__Filesystem_Handlers h;
  srv_link watchers; /* every fs_watcher */
  size_t nwatchers;
  /* The inotify instance all watchers share (fd -1 while none is), its
     watch descriptors (wd -> fs_wdref), and the copy of one descriptor's
     watchers an event goes to, and that event's directory and full path
     (built once for all the watchers that watch it by the same name;
     serve_fs_watch.c). */
  srv_watch in_w;
  srv_itab wdtab;
  fs_sub *snap;
  size_t capsnap;
  char *evdir, *evfull;
  size_t capevdir, capevfull;
  /* The names of the temporary files /files writes uploads into, whose
     events no watcher sees (srv_fs_hide()). */
  fs_hidden *hidden;
  gid_t *groups; /* the server's own supplementary groups */
  int ngroups;
} srv_fs;

/* An EntryInfo and the memory it points into, freed by entry_clear(). */
typedef struct fs_entry {
  Filesystem__EntryInfo e;
  Google__Protobuf__Timestamp mtime;
  char perms[24];
  char owner[64];
  char group[64];
  char *name;
  char *path;
  char *target;
  Filesystem__EntryInfo__MetadataEntry *md;
  Filesystem__EntryInfo__MetadataEntry **mdp;
  char *xattrs; /* the names and values md points into */
} fs_entry;

/* Go's text of errno |e| in |buf| (lower case first); returns |buf|. */
const char *srv_fs_go_err(int e, char *buf, size_t n);

/* The Connect code of errno |e|, |other| for the unmapped ones. */
conch_code srv_fs_errno_code(int e, conch_code other);

/* Takes |u|'s filesystem identity (a root server acting for another
   user).  Returns 0 or -1 with errno. */
int srv_fs_as_user(const srv_server *srv, const srv_user *u);

/* Gives the server's own identity back after srv_fs_as_user(). */
void srv_fs_as_server(const srv_server *srv, const srv_user *u);

/* The EntryInfo of |path| in |x| (freed by srv_fs_entry_clear()).
   Returns 0 or an errno. */
int srv_fs_entry_info(const char *path, fs_entry *x);
void srv_fs_entry_clear(fs_entry *x);
/* Only the metadata of |path| (its user.e2b.* xattrs) into |x|'s
   e.metadata, best effort; freed by srv_fs_entry_clear(). */
void srv_fs_entry_metadata(fs_entry *x, const char *path);

/* Ends |rpc| with |code| and the formatted message. */
void CONCH_PRINTF(3, 4)
    srv_fs_fail(conch_rpc *rpc, conch_code code, const char *fmt, ...);

/* Sends the one response of a unary call and ends it. */
void srv_fs_reply(conch_rpc *rpc, const ProtobufCMessage *msg);

/* The request's user (its filesystem identity taken on) and the resolved
   |in| in |*path|.  Returns 0, or -1 with the call answered and the user
   given back. */
int srv_fs_begin_path(srv_server *srv, conch_rpc *rpc, srv_user *u,
                      const char *in, char **path);

/* The names in |dir|, sorted, in |*out|.  Returns the count, or -1 with
   errno. */
ssize_t srv_fs_read_names(const char *dir, char ***out);

/* ---- serve_fs_watch.c ---- */

/* Sets the handlers of WatchDir and the polling watchers in |h|. */
void srv_fs_watch_handlers(Filesystem__Filesystem_Handlers *h);

/* Frees every watcher of |fs| (their calls are gone with the core). */
void srv_fs_watchers_free(srv_fs *fs);

/* The temporary file |path| (an upload's, renamed into place once whole)
   is the server's own business: no watcher sees its events (envd writes
   in place, so its watchers see only the file itself).  Best effort: out
   of memory, it is not hidden.  Matched by the last name, which has a
   random part. */
void srv_fs_hide(srv_server *srv, const char *path);
/* |path| is renamed or removed: its events already queued are still
   hidden, until the watchers' queue has been read to its end (at once,
   in this call: the queued events are handed on from here, unless there
   are more than a turn's reads of them). */
void srv_fs_unhide(srv_server *srv, const char *path);

#endif
