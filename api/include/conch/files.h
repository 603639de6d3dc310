/*
 * conch - a Connect/gRPC client for C
 *
 * files.h: the files of a sandbox through the filesystem.Filesystem service
 * of the E2B sandbox daemon (envd), or `conch serve`, on a conch_sandbox
 * (conch/process.h).
 *
 *  - conch_files_stat(), conch_files_list() (to a depth),
 *    conch_files_mkdir(), conch_files_move(), conch_files_remove() and
 *    conch_files_exists(): one call each, blocking.  Entries come back as
 *    conch_entry_info, freed with conch_entry_free() or
 *    conch_entries_free().
 *  - conch_files_read() and conch_files_write() (and their _fd, _cb and
 *    _async forms) move a file's contents over envd's /files endpoint,
 *    streamed through bounded memory, with progress.  A write can carry
 *    metadata and hand back the entries the server wrote
 *    (conch_files_io_opts.metadata, .written); conch_files_read_start()
 *    and conch_files_write_start() give an asynchronous transfer's handle,
 *    for back-pressure (conch_files_xfer_pause(), a source's
 *    CONCH_FILES_SOURCE_LATER) and cancelling.
 *  - conch_files_watch() returns a conch_watch handle over WatchDir:
 *    conch_watch_next() yields the directory's events as they come;
 *    conch_watch_close() is the only way to release the handle and always
 *    ends the watch on the server.  Freeing the sandbox closes every open
 *    watch the same way.
 *
 * Paths are the server's: absolute, or relative to the user's home
 * directory ("~" too).  |user| is the user the call runs as: NULL = the
 * sandbox's default user (conch_sandbox_opts.user, else the server's).
 *
 * Errors: functions return 0 or a negative CONCH_ERR_*.  CONCH_ERR_RPC
 * means the RPC failed; the conch_status passed in (initialised by the
 * caller, may be NULL) then holds its Connect code and message, as envd
 * gives them: not_found (no such path), already_exists (mkdir of a path
 * that is there), invalid_argument (e.g. listing a file, a depth out of
 * range), permission_denied, unavailable when the sandbox cannot be
 * reached.
 *
 * The unary calls have asynchronous forms (conch_files_*_async) that run
 * on the sandbox's client loop, as the Process API's do; the watch is
 * blocking only so far.
 *
 * Thread safety: as conch/process.h (a sandbox and its handles belong to
 * one thread at a time).
 */
#ifndef CONCH_FILES_H
#define CONCH_FILES_H

#include <stddef.h>
#include <stdint.h>

#include <conch/conch.h>
#include <conch/process.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The type of an entry (filesystem.FileType). */
typedef enum conch_file_type {
  CONCH_FILE_UNKNOWN = 0,
  CONCH_FILE_REGULAR = 1,
  CONCH_FILE_DIRECTORY = 2,
  CONCH_FILE_SYMLINK = 3
} conch_file_type;

/** One pair of an entry's metadata. */
typedef struct conch_file_meta {
  char *key;   /**< the xattr's name without "user.e2b." */
  char *value; /**< its value (UTF-8, as envd answers them) */
} conch_file_meta;

/** One entry (filesystem.EntryInfo).  Strings are never NULL except
    |symlink_target|. */
typedef struct conch_entry_info {
  char *name;             /**< the last component of |path| */
  /** The type; for a symlink, as envd does it, its target's type (a
      symlink whose target is not there: CONCH_FILE_UNKNOWN, as conch serve
      answers). */
  conch_file_type type;
  char *path;             /**< absolute, as the server resolved it */
  int64_t size;           /**< bytes */
  uint32_t mode;          /**< st_mode's permission and type bits */
  char *permissions;      /**< "-rw-r--r--", as ls prints them */
  char *owner;            /**< user name (or number) */
  char *group;            /**< group name (or number) */
  int64_t mtime_sec;      /**< modified time, seconds since the epoch */
  int32_t mtime_nsec;     /**< and nanoseconds */
  /** A symlink's target, resolved to an absolute path (the link's own
      path when it does not resolve); NULL for what is not a symlink. */
  char *symlink_target;
  /** The entry's user-defined metadata, as envd keeps it: its
      `user.e2b.*` extended attributes (followed through a symlink), the
      prefix taken off, in the server's order; |n_metadata| pairs, NULL
      when there are none (or the file system has no user xattrs). */
  conch_file_meta *metadata;
  size_t n_metadata;
} conch_entry_info;

/** The value of the metadata |key| of |e|, NULL when it has none. */
CONCH_EXTERN const char *conch_entry_meta(const conch_entry_info *e,
                                          const char *key);

/** Frees one entry (NULL is accepted). */
CONCH_EXTERN void conch_entry_free(conch_entry_info *e);

/** Frees the array of |n| entries conch_files_list() returned (NULL is
    accepted). */
CONCH_EXTERN void conch_entries_free(conch_entry_info *entries, size_t n);

/** The name of a type: "file", "dir", "symlink" or "unknown". */
CONCH_EXTERN const char *conch_file_type_name(conch_file_type t);

/**
 * Stats |path| (a symlink itself: see conch_entry_info.type).  On 0 |*out| is the
 * caller's (conch_entry_free()).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument), CONCH_ERR_NOMEM or
 * CONCH_ERR_RPC (not_found when there is nothing at |path|).
 */
CONCH_EXTERN int conch_files_stat(conch_sandbox *sb, const char *path,
                                  const char *user, conch_entry_info **out,
                                  conch_status *st);

/**
 * Whether something is at |path|: |*exists| 1 or 0 (not_found is an
 * answer, not an error; other failures, e.g. a path through a file, are
 * errors as envd gives them).  Returns as conch_files_stat().
 */
CONCH_EXTERN int conch_files_exists(conch_sandbox *sb, const char *path,
                                    const char *user, int *exists,
                                    conch_status *st);

/**
 * Lists the directory |path|: its entries, and with |depth| > 1 theirs
 * to that depth (0 = 1, the directory's own entries).  On 0 |*out| is an
 * array of |*n| entries, the caller's (conch_entries_free()); NULL when
 * |*n| is 0.
 *
 * Returns as conch_files_stat(); CONCH_ERR_RPC with invalid_argument when
 * |path| is not a directory.
 */
CONCH_EXTERN int conch_files_list(conch_sandbox *sb, const char *path,
                                  uint32_t depth, const char *user,
                                  conch_entry_info **out, size_t *n,
                                  conch_status *st);

/**
 * Makes the directory |path| and its missing parents.  |out| may be NULL;
 * else on 0 |*out| is the new directory's entry (conch_entry_free()).
 *
 * Returns as conch_files_stat(); CONCH_ERR_RPC with already_exists when
 * a directory is at |path| already, invalid_argument when something else
 * is.
 */
CONCH_EXTERN int conch_files_mkdir(conch_sandbox *sb, const char *path,
                                   const char *user, conch_entry_info **out,
                                   conch_status *st);

/**
 * Moves (renames) |src| to |dst|.  |out| may be NULL; else on 0 |*out| is
 * the entry at |dst| (conch_entry_free()).  Returns as conch_files_stat().
 */
CONCH_EXTERN int conch_files_move(conch_sandbox *sb, const char *src,
                                  const char *dst, const char *user,
                                  conch_entry_info **out, conch_status *st);

/**
 * Removes |path|, a directory with everything in it.  Nothing at |path|
 * is no error (envd's RemoveAll); "/" is refused (invalid_argument).
 * Returns as conch_files_stat().
 */
CONCH_EXTERN int conch_files_remove(conch_sandbox *sb, const char *path,
                                    const char *user, conch_status *st);

/* ---- Asynchronous forms ------------------------------------------------- */

/** The end of an asynchronous stat, mkdir or move: the entry (borrowed
    until the callback returns; NULL on error) and the status. */
typedef void (*conch_files_entry_done)(const conch_entry_info *entry,
                                       const conch_status *st,
                                       void *user_data);

/** The end of an asynchronous list: |n| entries (borrowed until the
    callback returns; NULL when there are none or on error). */
typedef void (*conch_files_list_done)(const conch_entry_info *entries,
                                      size_t n, const conch_status *st,
                                      void *user_data);

/** The end of an asynchronous remove. */
typedef void (*conch_files_status_done)(const conch_status *st,
                                        void *user_data);

/**
 * conch_files_stat() on the loop (conch_sandbox_native(), driven with
 * conch/io.h): |done| runs once, later, never from inside this function.
 *
 * Returns 0 (|done| will run); CONCH_ERR_INVALID (a NULL |sb|, |path| or
 * |done|) or CONCH_ERR_NOMEM (|done| never runs).
 */
CONCH_EXTERN int conch_files_stat_async(conch_sandbox *sb, const char *path,
                                        const char *user,
                                        conch_files_entry_done done,
                                        void *user_data);

/** conch_files_list() on the loop.  Returns as conch_files_stat_async(). */
CONCH_EXTERN int conch_files_list_async(conch_sandbox *sb, const char *path,
                                        uint32_t depth, const char *user,
                                        conch_files_list_done done,
                                        void *user_data);

/** conch_files_mkdir() on the loop.  Returns as conch_files_stat_async(). */
CONCH_EXTERN int conch_files_mkdir_async(conch_sandbox *sb, const char *path,
                                         const char *user,
                                         conch_files_entry_done done,
                                         void *user_data);

/** conch_files_move() on the loop.  Returns as conch_files_stat_async();
    CONCH_ERR_INVALID also for a NULL |dst|. */
CONCH_EXTERN int conch_files_move_async(conch_sandbox *sb, const char *src,
                                        const char *dst, const char *user,
                                        conch_files_entry_done done,
                                        void *user_data);

/** conch_files_remove() on the loop.  Returns as
    conch_files_stat_async(). */
CONCH_EXTERN int conch_files_remove_async(conch_sandbox *sb, const char *path,
                                          const char *user,
                                          conch_files_status_done done,
                                          void *user_data);

/* ---- Reading and writing contents ------------------------------------- */

/*
 * The contents of a file move over envd's plain HTTP endpoint /files on
 * the sandbox's own connections (HTTP/2 or HTTP/1.1, as its RPCs): a read
 * is GET /files?path=..&username=.., a write POST /files with the bytes as
 * one multipart/form-data part (what every envd takes), streamed both
 * ways: whatever the size, what is held in memory is bounded (the
 * client's stream window for a read, about 1 MiB of send buffer for a
 * write), and a slow consumer slows the server down instead of growing a
 * buffer.  A write makes the missing parent directories and replaces the
 * file (conch serve renames it into place once whole; envd writes it in
 * place).
 *
 * Errors are envd's HTTP statuses, with envd's message: 400 (a bad path,
 * e.g. a directory) invalid_argument, 401 (unknown user, bad signature or
 * token) unauthenticated, 403 permission_denied, 404 (no such file)
 * not_found, 507 (a full disk) resource_exhausted, others as Connect maps
 * HTTP statuses; the function then returns CONCH_ERR_RPC and the status's
 * http_status is envd's.  What is refused before anything is sent
 * (CONCH_ERR_INVALID, CONCH_ERR_HEADER: invalid_argument; CONCH_ERR_NOMEM:
 * resource_exhausted) also says why in the status, local_err the code.
 */

/** Progress of a transfer: |done| bytes of the file's contents moved so
    far, of |total| (-1 when not known: a write from a callback or a pipe,
    a read whose server sent no length).  Runs on the thread driving the
    sandbox, at most once per piece. */
typedef void (*conch_files_progress)(uint64_t done, int64_t total,
                                     void *user_data);

/** Options of a read or a write.  Initialise with
    CONCH_FILES_IO_OPTS_INIT; fields past |struct_size| are not read. */
typedef struct conch_files_io_opts {
  size_t struct_size;
  /** The user the file is read or written as; NULL = the sandbox's
      default user. */
  const char *user;
  /** Called as bytes move; NULL = none. */
  conch_files_progress progress;
  void *progress_ud;
  /** A bound on the whole transfer in ms; 0 = none (the sandbox's
      request timeout does not apply: a large file may take long). */
  long timeout_ms;
  /** A bound on silence in ms: a transfer during which no byte moves
      (none arrives on a read, the server takes none on a write) for this
      long ends: the call returns CONCH_ERR_RPC, the status says
      unavailable with local_err CONCH_ERR_TIMEOUT, as the commands API's
      streams end on silence (a server frozen or gone mid-body).  Time
      spent in the caller's sink or source does not count.  0 = the
      sandbox's silence bound (conch_sandbox_opts.keepalive_ms: 3 x
      keepalive + 5000 ms, none when keepalive is -1), -1 = none. */
  long idle_timeout_ms;
  /** A write's metadata: |n_metadata| pairs, sent as envd's
      `X-Metadata-KEY: VALUE` headers, which the server keeps as the
      file's `user.e2b.KEY` extended attributes (the whole set: a file
      replaced keeps none of its old ones).  Header names are not case
      sensitive: conch serve keeps the key lower-cased (this side sends it
      so).  A key is 1 to 200 bytes of an HTTP token (letters, digits and
      !#$%&'*+-.^_`|~: no space, ':', CR or LF); a value at most 65536
      bytes with no control character but tab (no CR, LF or NUL).  Anything
      else, or a key given twice, is refused before anything is sent:
      CONCH_ERR_HEADER, the status invalid_argument naming the pair.
      Reads ignore it. */
  const conch_file_meta *metadata;
  size_t n_metadata;
  /** A write's answer: when |written| is not NULL, on 0 |*written| is the
      array of the |*n_written| entries the server says it wrote (one for
      these calls; NULL when it lists none), the caller's to free with
      conch_entries_free().  The answer has only |name|, |path|, |type| and
      |metadata| (as the server read them back from the file: none on a
      file system without user xattrs, or from a server that keeps none);
      the other strings are "", the numbers 0.  An answer that is not
      envd's JSON, or past 1 MiB, fails the call with CONCH_ERR_PROTO
      (status internal; the file is written).  For
      conch_files_write_async() the two pointers must stay valid until
      its |done| runs; they are set before it.  Reads ignore them. */
  conch_entry_info **written;
  size_t *n_written;
  void *reserved[3];
} conch_files_io_opts;

#define CONCH_FILES_IO_OPTS_INIT                                               \
  {                                                                            \
    sizeof(conch_files_io_opts), NULL, NULL, NULL, 0, 0, NULL, 0, NULL, NULL,  \
    {                                                                          \
      0                                                                        \
    }                                                                          \
  }

/** Where a read's bytes go: |len| (> 0) bytes, borrowed until it returns.
    Returns 0 to go on; anything else stops the read, which then returns
    CONCH_ERR_CANCELED. */
typedef int (*conch_files_sink)(const uint8_t *data, size_t len,
                                void *user_data);

/** Where a write's bytes come from: puts up to |cap| bytes into |buf|.
    Returns how many (0 = the end of the contents), or a negative value to
    stop the write, which then returns CONCH_ERR_CANCELED and leaves the
    file as the server leaves a cut upload (conch serve: untouched). */
typedef long (*conch_files_source)(uint8_t *buf, size_t cap,
                                   void *user_data);

/**
 * Reads the file |path| into memory.  |opts| may be NULL.  On 0 |*data|
 * (NUL-terminated past |*len|, for text; never NULL) is the caller's, to
 * free with conch_files_data_free().
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument), CONCH_ERR_NOMEM or
 * CONCH_ERR_RPC (see above: not_found when there is no such file).
 */
CONCH_EXTERN int conch_files_read(conch_sandbox *sb, const char *path,
                                  const conch_files_io_opts *opts,
                                  uint8_t **data, size_t *len,
                                  conch_status *st);

/** Frees what conch_files_read() returned (NULL is accepted). */
CONCH_EXTERN void conch_files_data_free(uint8_t *data);

/**
 * Reads the file |path| into the descriptor |fd| (written from its
 * current position, write() retried on EINTR and short writes).
 * Returns as conch_files_read(); CONCH_ERR_IO when writing |fd| failed
 * (errno says why; the read stops).
 */
CONCH_EXTERN int conch_files_read_fd(conch_sandbox *sb, const char *path,
                                     int fd, const conch_files_io_opts *opts,
                                     conch_status *st);

/**
 * Reads the file |path| into |sink| (called with each piece as it
 * arrives).  Returns as conch_files_read(); CONCH_ERR_CANCELED when
 * |sink| stopped it.
 */
CONCH_EXTERN int conch_files_read_cb(conch_sandbox *sb, const char *path,
                                     conch_files_sink sink, void *sink_ud,
                                     const conch_files_io_opts *opts,
                                     conch_status *st);

/**
 * Writes |len| bytes of |data| (NULL when |len| is 0) as the file |path|.
 * Returns 0, CONCH_ERR_INVALID, CONCH_ERR_NOMEM or CONCH_ERR_RPC (see
 * above: invalid_argument when |path| is a directory, resource_exhausted
 * on a full disk).
 */
CONCH_EXTERN int conch_files_write(conch_sandbox *sb, const char *path,
                                   const void *data, size_t len,
                                   const conch_files_io_opts *opts,
                                   conch_status *st);

/**
 * Writes what |fd| reads (from its current position to its end) as the
 * file |path|.  Returns as conch_files_write(); CONCH_ERR_IO when reading
 * |fd| failed (errno says why).
 */
CONCH_EXTERN int conch_files_write_fd(conch_sandbox *sb, const char *path,
                                      int fd, const conch_files_io_opts *opts,
                                      conch_status *st);

/**
 * Writes what |source| gives as the file |path|.  Returns as
 * conch_files_write(); CONCH_ERR_CANCELED when |source| stopped it.
 */
CONCH_EXTERN int conch_files_write_cb(conch_sandbox *sb, const char *path,
                                      conch_files_source source,
                                      void *source_ud,
                                      const conch_files_io_opts *opts,
                                      conch_status *st);

/** The end of an asynchronous read or write: |rv| is what the blocking
    form would have returned, |st| its status (borrowed), |bytes| the
    contents moved. */
typedef void (*conch_files_io_done)(int rv, const conch_status *st,
                                    uint64_t bytes, void *user_data);

/**
 * conch_files_read_cb() on the loop (conch_sandbox_native()): |sink| runs
 * for each piece and |done| once at the end, never from inside this
 * function.  |sink| runs on the loop and should not block for long.
 *
 * Returns 0 (|done| will run), CONCH_ERR_INVALID (a NULL |sb|, |path|,
 * |sink| or |done|) or CONCH_ERR_NOMEM (|done| never runs).
 */
CONCH_EXTERN int conch_files_read_async(conch_sandbox *sb, const char *path,
                                        conch_files_sink sink, void *sink_ud,
                                        const conch_files_io_opts *opts,
                                        conch_files_io_done done,
                                        void *user_data);

/**
 * conch_files_write_cb() on the loop: |source| is asked for bytes when the
 * send buffer has room, and should not block for long.  Returns as
 * conch_files_read_async().
 */
CONCH_EXTERN int conch_files_write_async(conch_sandbox *sb, const char *path,
                                         conch_files_source source,
                                         void *source_ud,
                                         const conch_files_io_opts *opts,
                                         conch_files_io_done done,
                                         void *user_data);

/** An asynchronous transfer started with conch_files_read_start() or
    conch_files_write_start(): for pausing, resuming and cancelling it.
    Valid until its |done| returns (libconch frees it then). */
typedef struct conch_files_xfer conch_files_xfer;

/**
 * conch_files_read_async() that also gives the transfer's handle in |*out|
 * (not NULL), for back-pressure: a consumer with a queue of its own calls
 * conch_files_xfer_pause() when it holds enough and
 * conch_files_xfer_resume() once it took it: while paused no credit goes
 * back to the server (conch_call_pause()), what it holds is at most a
 * stream window more, and the silence bound does not run.
 *
 * Returns 0 (|done| will run; |st| untouched) or, nothing sent and |done|
 * never running, |*out| NULL (when |out| is not NULL) and the conch_status
 * |st| (initialised by the caller, may be NULL) saying why:
 * CONCH_ERR_INVALID (invalid_argument: a NULL |sb|, |path|, |sink|, |done|
 * or |out|, bad |opts|), CONCH_ERR_NOMEM (resource_exhausted), another
 * error of the client's (unavailable: the request could not be started).
 */
CONCH_EXTERN int conch_files_read_start(conch_sandbox *sb, const char *path,
                                        conch_files_sink sink, void *sink_ud,
                                        const conch_files_io_opts *opts,
                                        conch_files_io_done done,
                                        void *user_data, conch_files_xfer **out,
                                        conch_status *st);

/** What a source of conch_files_write_start() returns when it has nothing
    yet (the contents go on): the write waits, the silence bound not
    running, until conch_files_xfer_resume() asks it again. */
#define CONCH_FILES_SOURCE_LATER (-5L)

/**
 * conch_files_write_async() that also gives the transfer's handle: its
 * |source| may answer CONCH_FILES_SOURCE_LATER (a source fed by another
 * party, e.g. an asynchronous iterator), after which the write waits for
 * conch_files_xfer_resume().  Returns as conch_files_read_start(), and
 * also CONCH_ERR_HEADER (invalid_argument naming the pair) for metadata
 * refused (conch_files_io_opts.metadata).
 */
CONCH_EXTERN int conch_files_write_start(
    conch_sandbox *sb, const char *path, conch_files_source source,
    void *source_ud, const conch_files_io_opts *opts, conch_files_io_done done,
    void *user_data, conch_files_xfer **out, conch_status *st);

/** Holds a read's credit back (see conch_files_read_start()).  Idempotent.
    Returns 0 or CONCH_ERR_INVALID (NULL, or a write). */
CONCH_EXTERN int conch_files_xfer_pause(conch_files_xfer *x);

/** Ends a pause of a read, or asks a write's source again after it said
    CONCH_FILES_SOURCE_LATER (at once, from inside this call).
    Returns 0 or CONCH_ERR_INVALID (NULL). */
CONCH_EXTERN int conch_files_xfer_resume(conch_files_xfer *x);

/** Stops the transfer: its |done| runs on a later turn of the loop with
    CONCH_ERR_CANCELED (unless it had ended already: then as it ended).  A
    write cut so leaves the file as the server leaves a cut upload.
    Idempotent; NULL is accepted. */
CONCH_EXTERN void conch_files_xfer_cancel(conch_files_xfer *x);

/* ---- Watching a directory ---------------------------------------------- */

typedef struct conch_watch conch_watch;

/** What happened (filesystem.EventType). */
typedef enum conch_fs_event_type {
  CONCH_FS_EVENT_UNKNOWN = 0,
  CONCH_FS_EVENT_CREATE = 1,
  CONCH_FS_EVENT_WRITE = 2,
  CONCH_FS_EVENT_REMOVE = 3,
  CONCH_FS_EVENT_RENAME = 4,
  CONCH_FS_EVENT_CHMOD = 5
} conch_fs_event_type;

/** The name of an event type: "create", "write", "remove", "rename",
    "chmod" or "unknown". */
CONCH_EXTERN const char *conch_fs_event_name(conch_fs_event_type t);

/** One event.  Borrowed from the handle until the next conch_watch_next()
    or conch_watch_close(). */
typedef struct conch_fs_event {
  conch_fs_event_type type;
  /** The path of what changed, relative to the watched directory. */
  const char *name;
  /** The entry as it is after the event, when the watch asked for entries
      (CONCH_WATCH_ENTRY) and the server had one; else NULL. */
  const conch_entry_info *entry;
} conch_fs_event;

/** conch_files_watch() flags. */
enum {
  /** Also the directories below |path|, and those made later. */
  CONCH_WATCH_RECURSIVE = 1u << 0,
  /** Events carry the entry (conch_fs_event.entry). */
  CONCH_WATCH_ENTRY = 1u << 1
};

/**
 * Watches the directory |path| (CONCH_WATCH_* |flags|).  Returns once the
 * server is watching (its start event), within the sandbox's request
 * timeout: what happens in the directory after this returns is reported.
 * On 0 |*out| is the caller's, released with conch_watch_close().
 *
 * The stream is kept alive as the Process API's are (keepalive_ms of the
 * sandbox): a server that says nothing, keepalives included, for the
 * silence bound ends the watch with unavailable.
 *
 * Returns 0, CONCH_ERR_INVALID, CONCH_ERR_NOMEM or CONCH_ERR_RPC
 * (not_found, invalid_argument for a path that is not a directory, ...).
 */
CONCH_EXTERN int conch_files_watch(conch_sandbox *sb, const char *path,
                                   unsigned flags, const char *user,
                                   conch_watch **out, conch_status *st);

/**
 * The next event, waiting at most |timeout_ms| (-1 = as long as it takes,
 * within the silence bound; 0 = what is there after one turn of the loop
 * that does not wait).  |ev| is borrowed until the next call or the close.
 * The silence bound counts from the last message of the server (keepalives
 * included) across calls that end in CONCH_ERR_TIMEOUT, so that a caller
 * polling with short timeouts still learns of a server gone silent; a
 * call after one that returned an event starts it anew (not reading for a
 * while is the caller's silence, not the server's).
 *
 * Returns 0 (|*ev| set); CONCH_ERR_TIMEOUT (nothing in |timeout_ms|: the
 * watch goes on); CONCH_ERR_EOF (the server ended the watch cleanly);
 * CONCH_ERR_RPC (it ended with an error, conch_watch_status() says which;
 * also when the server fell silent); CONCH_ERR_INVALID.  After EOF or RPC
 * every further call returns the same.
 */
CONCH_EXTERN int conch_watch_next(conch_watch *w, conch_fs_event *ev,
                                  long timeout_ms);

/** How the watch ended (code OK while it runs).  Borrowed from |w|. */
CONCH_EXTERN const conch_status *conch_watch_status(const conch_watch *w);

/** Ends the watch (the server stops watching) and frees the handle.  NULL
    is accepted. */
CONCH_EXTERN void conch_watch_close(conch_watch *w);

#ifdef __cplusplus
}
#endif

#endif
