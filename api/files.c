/* The files API (conch/files.h): filesystem.Filesystem's unary methods on
   the sandbox's unary helper, and WatchDir as a pull-mode handle. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <conch/files.h>

#include "api_int.h"
#include "filesystem/filesystem.conch.h"
#include "filesystem/filesystem.pb-c.h"

/* ---- Entries ------------------------------------------------------------ */

static void entry_clear(conch_entry_info *e) {
  const conch_mem *m = conch_mem_default();
  api_free(m, e->name);
  api_free(m, e->path);
  api_free(m, e->permissions);
  api_free(m, e->owner);
  api_free(m, e->group);
  api_free(m, e->symlink_target);
  for (size_t i = 0; i < e->n_metadata; i++) {
    api_free(m, e->metadata[i].key);
    api_free(m, e->metadata[i].value);
  }
  api_free(m, e->metadata);
  memset(e, 0, sizeof(*e));
}

const char *conch_entry_meta(const conch_entry_info *e, const char *key) {
  if (e == NULL || key == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < e->n_metadata; i++) {
    if (strcmp(e->metadata[i].key, key) == 0) {
      return e->metadata[i].value;
    }
  }
  return NULL;
}

static char *dup_or_empty(const char *s);

/* The wire's metadata map into |e| (pairs without a key skipped). */
static int meta_from(conch_entry_info *e, const Filesystem__EntryInfo *in) {
  const conch_mem *m = conch_mem_default();
  if (in->n_metadata == 0) {
    return 0;
  }
  e->metadata = api_calloc(m, in->n_metadata, sizeof(*e->metadata));
  if (e->metadata == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (size_t i = 0; i < in->n_metadata; i++) {
    const Filesystem__EntryInfo__MetadataEntry *kv = in->metadata[i];
    conch_file_meta *o = &e->metadata[e->n_metadata];
    if (kv == NULL || kv->key == NULL) {
      continue;
    }
    o->key = dup_or_empty(kv->key);
    o->value = dup_or_empty(kv->value);
    e->n_metadata++; /* counted first: entry_clear() frees what there is */
    if (o->key == NULL || o->value == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  if (e->n_metadata == 0) {
    api_free(m, e->metadata);
    e->metadata = NULL;
  }
  return 0;
}

void conch_entry_free(conch_entry_info *e) {
  if (e != NULL) {
    entry_clear(e);
    api_free(conch_mem_default(), e);
  }
}

void conch_entries_free(conch_entry_info *entries, size_t n) {
  size_t i;
  if (entries == NULL) {
    return;
  }
  for (i = 0; i < n; i++) {
    entry_clear(&entries[i]);
  }
  api_free(conch_mem_default(), entries);
}

const char *conch_file_type_name(conch_file_type t) {
  switch (t) {
  case CONCH_FILE_REGULAR:
    return "file";
  case CONCH_FILE_DIRECTORY:
    return "dir";
  case CONCH_FILE_SYMLINK:
    return "symlink";
  default:
    return "unknown";
  }
}

const char *conch_fs_event_name(conch_fs_event_type t) {
  switch (t) {
  case CONCH_FS_EVENT_CREATE:
    return "create";
  case CONCH_FS_EVENT_WRITE:
    return "write";
  case CONCH_FS_EVENT_REMOVE:
    return "remove";
  case CONCH_FS_EVENT_RENAME:
    return "rename";
  case CONCH_FS_EVENT_CHMOD:
    return "chmod";
  default:
    return "unknown";
  }
}

static char *dup_or_empty(const char *s) {
  return conch__api_strdup(conch_mem_default(), s != NULL ? s : "");
}

/* Fills |e| from the wire's entry; on failure |e| is left cleared. */
static int entry_from(conch_entry_info *e, const Filesystem__EntryInfo *in) {
  memset(e, 0, sizeof(*e));
  e->name = dup_or_empty(in->name);
  e->path = dup_or_empty(in->path);
  e->permissions = dup_or_empty(in->permissions);
  e->owner = dup_or_empty(in->owner);
  e->group = dup_or_empty(in->group);
  if (in->_symlink_target_case ==
          FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET &&
      in->symlink_target != NULL) {
    e->symlink_target = dup_or_empty(in->symlink_target);
    if (e->symlink_target == NULL) {
      entry_clear(e);
      return CONCH_ERR_NOMEM;
    }
  }
  if (e->name == NULL || e->path == NULL || e->permissions == NULL ||
      e->owner == NULL || e->group == NULL || meta_from(e, in) != 0) {
    entry_clear(e);
    return CONCH_ERR_NOMEM;
  }
  switch (in->type) {
  case FILESYSTEM__FILE_TYPE__FILE_TYPE_FILE:
    e->type = CONCH_FILE_REGULAR;
    break;
  case FILESYSTEM__FILE_TYPE__FILE_TYPE_DIRECTORY:
    e->type = CONCH_FILE_DIRECTORY;
    break;
  case FILESYSTEM__FILE_TYPE__FILE_TYPE_SYMLINK:
    e->type = CONCH_FILE_SYMLINK;
    break;
  default:
    e->type = CONCH_FILE_UNKNOWN;
    break;
  }
  e->size = in->size;
  e->mode = in->mode;
  if (in->modified_time != NULL) {
    e->mtime_sec = in->modified_time->seconds;
    e->mtime_nsec = in->modified_time->nanos;
  }
  return 0;
}

/* |*out| (when |out| is not NULL) a new copy of |in|.  A response without
   an entry is the server's fault: internal, said so. */
static int entry_out(conch_entry_info **out, const Filesystem__EntryInfo *in,
                     conch_status *st) {
  conch_entry_info *e;
  int rv;
  if (out == NULL) {
    return 0;
  }
  *out = NULL;
  if (in == NULL) {
    conch__sb_fail(st, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                   "the server answered without an entry");
    return CONCH_ERR_RPC;
  }
  e = api_calloc(conch_mem_default(), 1, sizeof(*e));
  if (e == NULL) {
    return CONCH_ERR_NOMEM;
  }
  rv = entry_from(e, in);
  if (rv != 0) {
    api_free(conch_mem_default(), e);
    return rv;
  }
  *out = e;
  return 0;
}

/* ---- Unary methods ------------------------------------------------------ */

int conch_files_stat(conch_sandbox *sb, const char *path, const char *user,
                     conch_entry_info **out, conch_status *st) {
  Filesystem__StatRequest req = FILESYSTEM__STAT_REQUEST__INIT;
  ProtobufCMessage *resp;
  int rv;
  if (sb == NULL || path == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  req.path = (char *)path;
  rv = conch__sb_unary(sb, &filesystem__filesystem__stat__method, &req.base,
                       user, &resp, st);
  if (rv == 0) {
    rv = entry_out(out, ((Filesystem__StatResponse *)resp)->entry, st);
  }
  conch_message_free(sb->client, resp);
  return rv;
}

int conch_files_exists(conch_sandbox *sb, const char *path, const char *user,
                       int *exists, conch_status *st) {
  Filesystem__StatRequest req = FILESYSTEM__STAT_REQUEST__INIT;
  ProtobufCMessage *resp;
  conch_status local;
  int rv;
  if (sb == NULL || path == NULL || exists == NULL) {
    return CONCH_ERR_INVALID;
  }
  *exists = 0;
  req.path = (char *)path;
  conch_status_init(&local);
  rv = conch__sb_unary(sb, &filesystem__filesystem__stat__method, &req.base,
                       user, &resp, &local);
  conch_message_free(sb->client, resp);
  if (rv == 0) {
    *exists = 1;
  } else if (rv == CONCH_ERR_RPC && local.code == CONCH_CODE_NOT_FOUND) {
    rv = 0;
  } else if (rv == CONCH_ERR_RPC) {
    conch__sb_status(st, &local);
  }
  conch_status_clear(&local);
  return rv;
}

int conch_files_list(conch_sandbox *sb, const char *path, uint32_t depth,
                     const char *user, conch_entry_info **out, size_t *n,
                     conch_status *st) {
  Filesystem__ListDirRequest req = FILESYSTEM__LIST_DIR_REQUEST__INIT;
  Filesystem__ListDirResponse *lr;
  ProtobufCMessage *resp;
  conch_entry_info *arr = NULL;
  size_t i;
  int rv;
  if (sb == NULL || path == NULL || out == NULL || n == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  *n = 0;
  req.path = (char *)path;
  req.depth = depth;
  rv = conch__sb_unary(sb, &filesystem__filesystem__list_dir__method,
                       &req.base, user, &resp, st);
  if (rv != 0) {
    return rv;
  }
  lr = (Filesystem__ListDirResponse *)resp;
  if (lr->n_entries > 0) {
    arr = api_calloc(conch_mem_default(), lr->n_entries, sizeof(*arr));
    if (arr == NULL) {
      rv = CONCH_ERR_NOMEM;
    }
  }
  for (i = 0; rv == 0 && i < lr->n_entries; i++) {
    rv = entry_from(&arr[i], lr->entries[i]);
  }
  if (rv == 0) {
    *out = arr;
    *n = lr->n_entries;
  } else {
    conch_entries_free(arr, i);
  }
  conch_message_free(sb->client, resp);
  return rv;
}

int conch_files_mkdir(conch_sandbox *sb, const char *path, const char *user,
                      conch_entry_info **out, conch_status *st) {
  Filesystem__MakeDirRequest req = FILESYSTEM__MAKE_DIR_REQUEST__INIT;
  ProtobufCMessage *resp;
  int rv;
  if (sb == NULL || path == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (out != NULL) {
    *out = NULL;
  }
  req.path = (char *)path;
  rv = conch__sb_unary(sb, &filesystem__filesystem__make_dir__method,
                       &req.base, user, &resp, st);
  if (rv == 0) {
    rv = entry_out(out, ((Filesystem__MakeDirResponse *)resp)->entry, st);
  }
  conch_message_free(sb->client, resp);
  return rv;
}

int conch_files_move(conch_sandbox *sb, const char *src, const char *dst,
                     const char *user, conch_entry_info **out,
                     conch_status *st) {
  Filesystem__MoveRequest req = FILESYSTEM__MOVE_REQUEST__INIT;
  ProtobufCMessage *resp;
  int rv;
  if (sb == NULL || src == NULL || dst == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (out != NULL) {
    *out = NULL;
  }
  req.source = (char *)src;
  req.destination = (char *)dst;
  rv = conch__sb_unary(sb, &filesystem__filesystem__move__method, &req.base,
                       user, &resp, st);
  if (rv == 0) {
    rv = entry_out(out, ((Filesystem__MoveResponse *)resp)->entry, st);
  }
  conch_message_free(sb->client, resp);
  return rv;
}

int conch_files_remove(conch_sandbox *sb, const char *path, const char *user,
                       conch_status *st) {
  Filesystem__RemoveRequest req = FILESYSTEM__REMOVE_REQUEST__INIT;
  ProtobufCMessage *resp;
  int rv;
  if (sb == NULL || path == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.path = (char *)path;
  rv = conch__sb_unary(sb, &filesystem__filesystem__remove__method, &req.base,
                       user, &resp, st);
  conch_message_free(sb->client, resp);
  return rv;
}

/* ---- Asynchronous forms ------------------------------------------------- */

enum { FA_STAT, FA_MKDIR, FA_MOVE, FA_LIST, FA_REMOVE };

typedef struct fa_ctx {
  int kind;
  conch_files_entry_done entry_done;
  conch_files_list_done list_done;
  conch_files_status_done status_done;
  void *ud;
} fa_ctx;

/* A local status for what went wrong here after the server answered. */
static void fa_local(conch_status *s, int rv) {
  conch_status_init(s);
  s->code = rv == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                  : CONCH_CODE_INTERNAL;
  s->origin = CONCH_ORIGIN_LOCAL;
  s->local_err = rv;
  s->message = (char *)(rv == CONCH_ERR_NOMEM
                            ? "out of memory for the answer"
                            : "the server answered without an entry");
}

static const Filesystem__EntryInfo *fa_entry(int kind,
                                             const ProtobufCMessage *m) {
  switch (kind) {
  case FA_STAT:
    return ((const Filesystem__StatResponse *)m)->entry;
  case FA_MKDIR:
    return ((const Filesystem__MakeDirResponse *)m)->entry;
  default:
    return ((const Filesystem__MoveResponse *)m)->entry;
  }
}

static void fa_done(const conch_status *st, const ProtobufCMessage *resp,
                    void *ud) {
  fa_ctx *c = ud;
  conch_status local;
  int ok = st->code == CONCH_CODE_OK && resp != NULL;

  if (c->kind == FA_REMOVE) {
    c->status_done(st, c->ud);
  } else if (c->kind == FA_LIST) {
    const Filesystem__ListDirResponse *lr =
        ok ? (const Filesystem__ListDirResponse *)resp : NULL;
    conch_entry_info *arr = NULL;
    size_t i = 0;
    int rv = 0;
    if (lr != NULL && lr->n_entries > 0) {
      arr = api_calloc(conch_mem_default(), lr->n_entries, sizeof(*arr));
      rv = arr == NULL ? CONCH_ERR_NOMEM : 0;
      for (; rv == 0 && i < lr->n_entries; i++) {
        rv = entry_from(&arr[i], lr->entries[i]);
      }
    }
    if (!ok) {
      c->list_done(NULL, 0, st, c->ud);
    } else if (rv != 0) {
      fa_local(&local, rv);
      c->list_done(NULL, 0, &local, c->ud);
    } else {
      c->list_done(arr, lr->n_entries, st, c->ud);
    }
    conch_entries_free(arr, i);
  } else {
    const Filesystem__EntryInfo *in = ok ? fa_entry(c->kind, resp) : NULL;
    conch_entry_info e;
    int rv = in != NULL ? entry_from(&e, in) : CONCH_ERR_PROTO;
    if (!ok) {
      c->entry_done(NULL, st, c->ud);
    } else if (rv != 0) {
      fa_local(&local, rv);
      c->entry_done(NULL, &local, c->ud);
    } else {
      c->entry_done(&e, st, c->ud);
      entry_clear(&e);
    }
  }
  api_free(conch_mem_default(), c);
}

static int fa_start(conch_sandbox *sb, const conch_method *m,
                    const ProtobufCMessage *req, const char *user, fa_ctx *c) {
  int rv;
  fa_ctx *h = api_calloc(conch_mem_default(), 1, sizeof(*h));
  if (h == NULL) {
    return CONCH_ERR_NOMEM;
  }
  *h = *c;
  rv = conch__sb_unary_async_as(sb, m, req, 0, user, fa_done, h);
  if (rv != 0) {
    api_free(conch_mem_default(), h);
  }
  return rv;
}

int conch_files_stat_async(conch_sandbox *sb, const char *path,
                           const char *user, conch_files_entry_done done,
                           void *user_data) {
  Filesystem__StatRequest req = FILESYSTEM__STAT_REQUEST__INIT;
  fa_ctx c = {FA_STAT, NULL, NULL, NULL, NULL};
  if (sb == NULL || path == NULL || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.path = (char *)path;
  c.entry_done = done;
  c.ud = user_data;
  return fa_start(sb, &filesystem__filesystem__stat__method, &req.base, user,
                  &c);
}

int conch_files_list_async(conch_sandbox *sb, const char *path,
                           uint32_t depth, const char *user,
                           conch_files_list_done done, void *user_data) {
  Filesystem__ListDirRequest req = FILESYSTEM__LIST_DIR_REQUEST__INIT;
  fa_ctx c = {FA_LIST, NULL, NULL, NULL, NULL};
  if (sb == NULL || path == NULL || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.path = (char *)path;
  req.depth = depth;
  c.list_done = done;
  c.ud = user_data;
  return fa_start(sb, &filesystem__filesystem__list_dir__method, &req.base,
                  user, &c);
}

int conch_files_mkdir_async(conch_sandbox *sb, const char *path,
                            const char *user, conch_files_entry_done done,
                            void *user_data) {
  Filesystem__MakeDirRequest req = FILESYSTEM__MAKE_DIR_REQUEST__INIT;
  fa_ctx c = {FA_MKDIR, NULL, NULL, NULL, NULL};
  if (sb == NULL || path == NULL || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.path = (char *)path;
  c.entry_done = done;
  c.ud = user_data;
  return fa_start(sb, &filesystem__filesystem__make_dir__method, &req.base,
                  user, &c);
}

int conch_files_move_async(conch_sandbox *sb, const char *src,
                           const char *dst, const char *user,
                           conch_files_entry_done done, void *user_data) {
  Filesystem__MoveRequest req = FILESYSTEM__MOVE_REQUEST__INIT;
  fa_ctx c = {FA_MOVE, NULL, NULL, NULL, NULL};
  if (sb == NULL || src == NULL || dst == NULL || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.source = (char *)src;
  req.destination = (char *)dst;
  c.entry_done = done;
  c.ud = user_data;
  return fa_start(sb, &filesystem__filesystem__move__method, &req.base, user,
                  &c);
}

int conch_files_remove_async(conch_sandbox *sb, const char *path,
                             const char *user, conch_files_status_done done,
                             void *user_data) {
  Filesystem__RemoveRequest req = FILESYSTEM__REMOVE_REQUEST__INIT;
  fa_ctx c = {FA_REMOVE, NULL, NULL, NULL, NULL};
  if (sb == NULL || path == NULL || done == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.path = (char *)path;
  c.status_done = done;
  c.ud = user_data;
  return fa_start(sb, &filesystem__filesystem__remove__method, &req.base,
                  user, &c);
}

/* ---- WatchDir ----------------------------------------------------------- */

struct conch_watch {
  conch_plink link; /* in the sandbox's watches */
  conch_sandbox *sb;
  conch_call *call;
  ProtobufCMessage *cur; /* the message the last event points into */
  conch_entry_info entry; /* the last event's entry, when it had one */
  int has_entry;
  int done; /* the stream is over: |st| says how */
  /* Liveness: the server has been silent since |quiet_since| (the last
     message, or the start of a wait that did not follow a timeout of
     ours: a caller that did not read for a while is not a silent
     server, one that polls with short timeouts still waits). */
  int64_t quiet_since;
  int timed_out; /* the last conch_watch_next() ended in a timeout */
  conch_status st;
};

static void watch_unlink(conch_watch *w) {
  w->link.prev->next = w->link.next;
  w->link.next->prev = w->link.prev;
  w->link.prev = w->link.next = &w->link;
}

static void watch_drop_cur(conch_watch *w) {
  if (w->cur != NULL) {
    conch_message_free(w->sb->client, w->cur);
    w->cur = NULL;
  }
  if (w->has_entry) {
    entry_clear(&w->entry);
    w->has_entry = 0;
  }
}

static void watch_set(conch_watch *w, conch_code code, int err,
                      const char *msg) {
  conch_status_clear(&w->st);
  conch__sb_fail(&w->st, code, err, msg);
  w->done = 1;
}

/* The stream ended (or we ended it): |w->st| from the call's status unless
   already set. */
static void watch_over(conch_watch *w) {
  if (!w->done) {
    const conch_status *cs = conch_call_status(w->call);
    conch_status_clear(&w->st);
    if (cs != NULL) {
      conch_status_copy(&w->st, cs, NULL);
    }
    w->done = 1;
  }
}

static int watch_end_code(const conch_watch *w) {
  return w->st.code == CONCH_CODE_OK ? CONCH_ERR_EOF : CONCH_ERR_RPC;
}

/* The next message, driving the loop at most |timeout_ms| (-1: without
   limit; the loop is run at least once, without waiting) and no longer
   than the silence bound counted from |w->quiet_since|.  Returns 0,
   CONCH_ERR_TIMEOUT, CONCH_ERR_EOF, CONCH_ERR_RPC (|w->done| set for these
   two), or a loop error. */
static int watch_recv(conch_watch *w, ProtobufCMessage **msg, long timeout_ms) {
  int64_t since = conch__api_now_ms(), bound = w->sb->silence_ms;
  int ran = 0;
  for (;;) {
    long wait = -1;
    int64_t now;
    int rv = conch_call_recv(w->call, msg);
    if (rv == 0) {
      w->quiet_since = conch__api_now_ms();
      return 0;
    }
    if (rv == CONCH_ERR_EOF || rv == CONCH_ERR_RPC) {
      watch_over(w);
      return watch_end_code(w);
    }
    if (rv != CONCH_ERR_AGAIN) {
      return rv;
    }
    now = conch__api_now_ms();
    if (timeout_ms >= 0) {
      int64_t left = since + timeout_ms - now;
      wait = left > 0 ? (long)left : 0;
      if (left <= 0 && ran) {
        return CONCH_ERR_TIMEOUT;
      }
    }
    if (bound > 0) {
      int64_t left = w->quiet_since + bound - now;
      if (left <= 0 && ran) {
        conch_status_clear(&w->st);
        if (conch__call_sent_ms(w->call) == 0) {
          /* Never sent: no connection had room (over HTTP/1.1 each watch
             holds one of the pool's), not a silent server. */
          conch__sb_fail(&w->st, CONCH_CODE_RESOURCE_EXHAUSTED,
                         CONCH_ERR_TIMEOUT,
                         "the watch found no free connection to go out on "
                         "(every one is held, e.g. by other watches over "
                         "HTTP/1.1: see conch_client_opts_set_max_"
                         "connections)");
        } else {
          conch__sb_silent(&w->st, (long)bound);
        }
        w->done = 1;
        conch_call_cancel(w->call);
        return CONCH_ERR_RPC;
      }
      if (left < 0) {
        left = 0;
      }
      if (wait < 0 || left < wait) {
        wait = (long)left;
      }
    }
    rv = conch_client_run(w->sb->client, wait);
    ran = 1;
    if (rv != 0) {
      return rv;
    }
  }
}

int conch_files_watch(conch_sandbox *sb, const char *path, unsigned flags,
                      const char *user, conch_watch **out, conch_status *st) {
  Filesystem__WatchDirRequest req = FILESYSTEM__WATCH_DIR_REQUEST__INIT;
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  conch_metadata *md;
  conch_watch *w;
  int64_t start_by;
  int rv;

  if (sb == NULL || path == NULL || out == NULL ||
      (flags & ~(unsigned)(CONCH_WATCH_RECURSIVE | CONCH_WATCH_ENTRY)) != 0) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  w = api_calloc(conch_mem_default(), 1, sizeof(*w));
  if (w == NULL) {
    return CONCH_ERR_NOMEM;
  }
  w->sb = sb;
  w->link.prev = w->link.next = &w->link;
  conch_status_init(&w->st);
  md = conch__sb_headers(sb, user, 1);
  if (md == NULL) {
    api_free(conch_mem_default(), w);
    return CONCH_ERR_NOMEM;
  }
  co.headers = md;
  rv = conch_call_start(sb->client, &filesystem__filesystem__watch_dir__method,
                        &co, NULL, w, &w->call);
  conch_metadata_free(md);
  if (rv != 0) {
    api_free(conch_mem_default(), w);
    return rv;
  }
  req.path = (char *)path;
  req.recursive = (flags & CONCH_WATCH_RECURSIVE) != 0;
  req.include_entry = (flags & CONCH_WATCH_ENTRY) != 0;
  rv = conch_call_send(w->call, &req.base);
  if (rv == 0) {
    rv = conch_call_close_send(w->call);
  }
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch_call_free(w->call);
    api_free(conch_mem_default(), w);
    return rv;
  }
  /* Linked now, so that a sandbox freed from here on closes it. */
  w->link.next = &sb->watches;
  w->link.prev = sb->watches.prev;
  sb->watches.prev->next = &w->link;
  sb->watches.prev = &w->link;
  /* The start event, within the request timeout. */
  w->quiet_since = conch__api_now_ms();
  start_by = sb->request_timeout_ms > 0
                 ? conch__api_now_ms() + sb->request_timeout_ms
                 : 0;
  for (;;) {
    ProtobufCMessage *msg;
    Filesystem__WatchDirResponse *r;
    long left = -1;
    if (start_by != 0) {
      int64_t l = start_by - conch__api_now_ms();
      left = l > 0 ? (long)l : 0;
    }
    rv = watch_recv(w, &msg, left);
    if (rv == CONCH_ERR_TIMEOUT) {
      watch_set(w, CONCH_CODE_DEADLINE_EXCEEDED, CONCH_ERR_TIMEOUT,
                "the server did not start the watch in time");
      rv = CONCH_ERR_RPC;
    } else if (rv == CONCH_ERR_EOF) {
      watch_set(w, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                "the server ended the watch before it started");
      rv = CONCH_ERR_RPC;
    }
    if (rv != 0) {
      if (rv == CONCH_ERR_RPC) {
        conch__sb_status(st, &w->st);
      }
      conch_watch_close(w);
      return rv;
    }
    r = (Filesystem__WatchDirResponse *)msg;
    if (r->event_case == FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_START) {
      conch_message_free(sb->client, msg);
      break;
    }
    /* A keepalive (or an event, which the server does not send before
       its start) before the start: read on. */
    conch_message_free(sb->client, msg);
  }
  *out = w;
  return 0;
}

int conch_watch_next(conch_watch *w, conch_fs_event *ev, long timeout_ms) {
  int64_t deadline;
  if (w == NULL || ev == NULL) {
    return CONCH_ERR_INVALID;
  }
  watch_drop_cur(w);
  memset(ev, 0, sizeof(*ev));
  if (!w->timed_out) {
    w->quiet_since = conch__api_now_ms();
  }
  w->timed_out = 0;
  deadline = timeout_ms >= 0 ? conch__api_now_ms() + timeout_ms : 0;
  for (;;) {
    ProtobufCMessage *msg;
    Filesystem__WatchDirResponse *r;
    Filesystem__FilesystemEvent *fe;
    int rv;
    if (w->done) {
      return watch_end_code(w);
    }
    if (timeout_ms >= 0) {
      int64_t left = deadline - conch__api_now_ms();
      timeout_ms = left > 0 ? (long)left : 0;
    }
    rv = watch_recv(w, &msg, timeout_ms);
    if (rv != 0) {
      w->timed_out = rv == CONCH_ERR_TIMEOUT;
      return rv;
    }
    r = (Filesystem__WatchDirResponse *)msg;
    if (r->event_case != FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_FILESYSTEM ||
        r->filesystem == NULL) {
      conch_message_free(w->sb->client, msg); /* keepalive, start */
      continue;
    }
    fe = r->filesystem;
    if (fe->_entry_case == FILESYSTEM__FILESYSTEM_EVENT___ENTRY_ENTRY &&
        fe->entry != NULL) {
      rv = entry_from(&w->entry, fe->entry);
      if (rv != 0) {
        conch_message_free(w->sb->client, msg);
        return rv;
      }
      w->has_entry = 1;
      ev->entry = &w->entry;
    }
    w->cur = msg;
    ev->name = fe->name != NULL ? fe->name : "";
    ev->type = fe->type >= 1 && fe->type <= 5 ? (conch_fs_event_type)fe->type
                                              : CONCH_FS_EVENT_UNKNOWN;
    return 0;
  }
}

const conch_status *conch_watch_status(const conch_watch *w) {
  return w != NULL ? &w->st : NULL;
}

void conch_watch_close(conch_watch *w) {
  if (w == NULL) {
    return;
  }
  watch_drop_cur(w);
  watch_unlink(w);
  /* Canceled if still open: RST_STREAM (HTTP/2) or the connection's end
     (HTTP/1.1) tells the server, which stops watching. */
  conch_call_free(w->call);
  /* The cancel is queued: a turn of the loop (without waiting) writes it
     now, not at the sandbox's next call, which may never come. */
  (void)conch_client_run(w->sb->client, 0);
  conch_status_clear(&w->st);
  api_free(conch_mem_default(), w);
}

void conch__files_close_all(conch_sandbox *sb) {
  while (sb->watches.next != &sb->watches) {
    conch_watch *w = (conch_watch *)(void *)((char *)sb->watches.next -
                                             offsetof(conch_watch, link));
    conch_watch_close(w);
  }
}
