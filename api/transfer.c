/* The contents of files (conch/files.h): envd's /files over a plain HTTP
   exchange of the runtime (conch__http_start(), call_int.h), GET to read
   and a multipart/form-data POST to write, streamed both ways.

   A read hands each piece of the response body to the sink as it arrives;
   the runtime credits it back to the server when the handler returns, so
   what waits is bounded by the stream window.  A write asks its source
   for PIECE bytes at a time and queues them on the call until the call's
   send buffer is over its mark (CONCH_ERR_AGAIN), then waits for
   on_send_ready: memory stays at about the send buffer's mark. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <conch/files.h>

#include "api_int.h"
#include "buf.h"
#include "json.h"

#define PIECE (64 * 1024)
#define ERR_BODY_MAX                                                           \
  (16 * 1024) /* of an error answer, kept for its message                      \
               */

/* The runtime's plain HTTP exchanges (runtime/client/call_int.h). */
int conch__http_start(conch_client *c, const char *verb, const char *target,
                      const char *ctype, const conch_call_opts *opts,
                      const conch_call_handler *handler, void *user_data,
                      conch_call **out);
int conch__http_status(const conch_call *call);

typedef struct conch_files_xfer {
  conch_sandbox *sb;
  conch_call *call;
  int write;
  /* Options. */
  conch_files_progress progress;
  void *progress_ud;
  /* Read: where bytes go. */
  conch_files_sink sink;
  void *sink_ud;
  /* Write: where they come from; |piece| holds what the call refused. */
  conch_files_source source;
  void *source_ud;
  uint8_t *piece;
  size_t plen;
  int in_head; /* |piece| holds the part's head */
  int src_end; /* the source said end: the epilogue is queued */
  char epilogue[80];
  int64_t total; /* -1 unknown */
  uint64_t moved;
  /* The silence bound: |idle_ms| (0 = none) since |last_ms|, the last
     time a byte moved; the alarm that judges it. */
  long idle_ms;
  int64_t last_ms;
  conch_alarm *alarm;
  int silent;
  /* Outcome. */
  int http;      /* the response's status, 0 before */
  int local;     /* a local error that stopped it (CONCH_ERR_*), 0 none */
  char *errbody; /* an error answer's body, up to ERR_BODY_MAX */
  size_t errlen;
  int done;
  int rv;
  conch_status st;
  /* Write: where the answer's entries go (NULL: not read), the answer so
     far, whether it went past ANSWER_MAX. */
  const conch_file_meta *meta;
  size_t n_meta;
  conch_entry_info **written;
  size_t *n_written;
  conch_buf ans;
  int ans_over;                /* 1 past ANSWER_MAX, 2 out of memory */
  conch_files_io_done on_done; /* async */
  void *done_ud;
  /* conch_files_*_start(): a read paused, a write whose source said
     later (the silence bound does not run while either holds). */
  int paused;
  int later;
} xfer;

/* ---- The request -------------------------------------------------------- */

static int pct_append(char *out, size_t cap, size_t *n, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (; *s != '\0'; s++) {
    unsigned char ch = (unsigned char)*s;
    int plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
                ch == '_' || ch == '~' || ch == '/';
    if (*n + 4 > cap) {
      return -1;
    }
    if (plain) {
      out[(*n)++] = (char)ch;
    } else {
      out[(*n)++] = '%';
      out[(*n)++] = hex[ch >> 4];
      out[(*n)++] = hex[ch & 15];
    }
  }
  out[*n] = '\0';
  return 0;
}

/* "/files?path=..[&username=..]" into a new string. */
static char *files_target(const conch_mem *m, const char *path,
                          const char *user) {
  size_t cap = 32 + 3 * strlen(path) + (user != NULL ? 3 * strlen(user) : 0);
  char *t = api_malloc(m, cap);
  size_t n = 0;
  if (t == NULL) {
    return NULL;
  }
  memcpy(t, "/files?path=", 12);
  n = 12;
  t[n] = '\0';
  if (pct_append(t, cap, &n, path) != 0 ||
      (user != NULL &&
       (n + 10 >= cap || (memcpy(t + n, "&username=", 10), n += 10, 0) != 0 ||
        pct_append(t, cap, &n, user) != 0))) {
    api_free(m, t);
    return NULL;
  }
  return t;
}

/* A boundary no content is likely to hold: 24 bytes of the clock, the
   address of the transfer and a counter, in hex. */
static void make_boundary(const xfer *x, char *out, size_t cap) {
  static unsigned counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(out, cap, "conch%08lx%08lx%08lx%04x", (unsigned long)ts.tv_sec,
           (unsigned long)ts.tv_nsec, (unsigned long)(uintptr_t)x,
           ++counter & 0xffffu);
}

/* The last component of |path|, with what a quoted string cannot hold
   replaced. */
static void part_name(const char *path, char *out, size_t cap) {
  const char *b = strrchr(path, '/');
  size_t i, n;
  b = b != NULL ? b + 1 : path;
  if (*b == '\0') {
    b = "file";
  }
  n = strlen(b);
  if (n >= cap) {
    n = cap - 1;
  }
  for (i = 0; i < n; i++) {
    char ch = b[i];
    out[i] = (ch == '"' || ch == '\\' || (unsigned char)ch < 0x20) ? '_' : ch;
  }
  out[n] = '\0';
}

/* ---- A write's metadata and its answer ---------------------------------- */

#define META_KEY_MAX 200
#define META_VALUE_MAX 65536
#define ANSWER_MAX (1024 * 1024)

static int tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

/* Refuses what cannot go as an X-Metadata-KEY header (see files.h).
   Returns 0 or CONCH_ERR_HEADER with |st| (may be NULL) saying which. */
static int meta_check(const conch_files_io_opts *o, conch_status *st) {
  const char *why = NULL;
  size_t i, j, bad = 0;
  if (o->n_metadata > 0 && o->metadata == NULL) {
    conch__sb_fail(st, CONCH_CODE_INVALID_ARGUMENT, CONCH_ERR_HEADER,
                   "invalid metadata: n_metadata without metadata");
    return CONCH_ERR_HEADER;
  }
  for (i = 0; i < o->n_metadata && why == NULL; i++) {
    const char *k = o->metadata[i].key, *v = o->metadata[i].value;
    size_t kl = k != NULL ? strlen(k) : 0;
    bad = i;
    if (k == NULL || v == NULL) {
      why = "a NULL key or value";
    } else if (kl == 0 || kl > META_KEY_MAX) {
      why = "a key must be 1 to 200 bytes";
    } else {
      for (j = 0; j < kl && why == NULL; j++) {
        if (!tchar((unsigned char)k[j])) {
          why = "a key may hold only an HTTP token's characters (no space, "
                "':', CR, LF or control character)";
        }
      }
      for (j = 0; v[j] != '\0' && why == NULL; j++) {
        unsigned char c = (unsigned char)v[j];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
          why = "a value may hold no control character but tab (no CR or "
                "LF)";
        }
      }
      if (why == NULL && j > META_VALUE_MAX) {
        why = "a value must be at most 65536 bytes";
      }
      for (j = 0; j < i && why == NULL; j++) {
        if (strcasecmp(o->metadata[j].key, k) == 0) {
          why = "a key given twice (keys are not case sensitive)";
        }
      }
    }
  }
  if (why != NULL) {
    if (st != NULL) {
      const char *k = o->metadata[bad].key;
      char shown[65];
      /* The key as it can be shown: what is not printable as '?'. */
      for (j = 0; k != NULL && k[j] != '\0' && j < sizeof(shown) - 1; j++) {
        unsigned char c = (unsigned char)k[j];
        shown[j] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
      }
      shown[k != NULL ? j : 0] = '\0';
      conch_status_clear(st);
      conch_status_setf(st, conch_mem_default(), CONCH_CODE_INVALID_ARGUMENT,
                        "invalid metadata #%zu ('%s'): %s", bad,
                        k != NULL ? shown : "(null)", why);
      st->local_err = CONCH_ERR_HEADER;
    }
    return CONCH_ERR_HEADER;
  }
  return 0;
}

/* Adds "x-metadata-KEY: VALUE" (KEY lower-cased) for each pair. */
static int meta_headers(conch_metadata *md, const conch_file_meta *meta,
                        size_t n_meta) {
  char name[16 + META_KEY_MAX];
  for (size_t i = 0; i < n_meta; i++) {
    const char *k = meta[i].key;
    size_t n = strlen(k), j;
    memcpy(name, "x-metadata-", 11);
    for (j = 0; j < n; j++) {
      char c = k[j];
      name[11 + j] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    name[11 + n] = '\0';
    if (conch_metadata_add_str(md, name, meta[i].value) != 0) {
      return CONCH_ERR_NOMEM;
    }
  }
  return 0;
}

/* The upload's answer, envd's [{"path":..,"name":..,"type":"file",
   "metadata":{..}}, ..], read with the runtime's JSON reader (json.h:
   checked whole first, RFC 8259, strings valid UTF-8); unknown members
   skipped, a repeated path, name or type: the last. */

/* The string at |at| into a new NUL-terminated one in |*out| (what was
   there freed).  0, -1 not a string, CONCH_ERR_NOMEM. */
static int jstr(const uint8_t *p, size_t at, char **out) {
  char *s;
  if (conch__json_kind(p, at) != CONCH_JSON_STRING) {
    return -1;
  }
  s = api_malloc(conch_mem_default(), conch__json_strlen(p, at) + 1);
  if (s == NULL) {
    return CONCH_ERR_NOMEM;
  }
  conch__json_string(p, at, s);
  api_free(conch_mem_default(), *out);
  *out = s;
  return 0;
}

/* The object at |at| (string values) as |e|'s metadata.  On failure what
   |e| holds is freed by the caller. */
static int jmeta(const uint8_t *p, size_t n, size_t at, conch_entry_info *e) {
  size_t it = at, key, value, cnt = 0;
  int rv = 0;
  if (conch__json_kind(p, at) != CONCH_JSON_OBJECT) {
    return -1;
  }
  while (conch__json_member(p, n, &it, &key, &value)) {
    cnt++;
  }
  if (cnt == 0) {
    return 0;
  }
  e->metadata = api_calloc(conch_mem_default(), cnt, sizeof(*e->metadata));
  if (e->metadata == NULL) {
    return CONCH_ERR_NOMEM;
  }
  it = at;
  while (rv == 0 && conch__json_member(p, n, &it, &key, &value)) {
    conch_file_meta *kv = &e->metadata[e->n_metadata++];
    rv = jstr(p, key, &kv->key);
    if (rv == 0) {
      rv = jstr(p, value, &kv->value);
    }
  }
  return rv;
}

/* The entry at |at|; on failure what |e| holds is freed by the caller. */
static int jentry(const uint8_t *p, size_t n, size_t at, conch_entry_info *e) {
  size_t it = at, key, value;
  char *type = NULL;
  int rv = 0;
  if (conch__json_kind(p, at) != CONCH_JSON_OBJECT) {
    return -1;
  }
  while (rv == 0 && conch__json_member(p, n, &it, &key, &value)) {
    if (conch__json_string_is(p, key, "path")) {
      rv = jstr(p, value, &e->path);
    } else if (conch__json_string_is(p, key, "name")) {
      rv = jstr(p, value, &e->name);
    } else if (conch__json_string_is(p, key, "type")) {
      rv = jstr(p, value, &type);
    } else if (conch__json_string_is(p, key, "metadata") &&
               e->metadata == NULL) {
      rv = jmeta(p, n, value, e);
    }
  }
  if (type != NULL) {
    e->type = strcmp(type, "file") == 0        ? CONCH_FILE_REGULAR
              : strcmp(type, "dir") == 0       ? CONCH_FILE_DIRECTORY
              : strcmp(type, "directory") == 0 ? CONCH_FILE_DIRECTORY
              : strcmp(type, "symlink") == 0   ? CONCH_FILE_SYMLINK
                                               : CONCH_FILE_UNKNOWN;
    api_free(conch_mem_default(), type);
  }
  return rv;
}

static char *empty_if_null(char *s, int *nomem) {
  if (s == NULL) {
    s = conch__api_strdup(conch_mem_default(), "");
    if (s == NULL) {
      *nomem = 1;
    }
  }
  return s;
}

/* The answer's entries into |*out|, |*n|.  0, -1 malformed or
   CONCH_ERR_NOMEM. */
static int answer_parse(const char *body, size_t len, conch_entry_info **out,
                        size_t *n) {
  const conch_mem *m = conch_mem_default();
  const uint8_t *p = (const uint8_t *)body;
  conch_entry_info *arr;
  size_t root, it, v, cnt = 0, i = 0;
  int rv = 0;
  *out = NULL;
  *n = 0;
  if (conch__json_check(p, len, &root) != 0 ||
      conch__json_kind(p, root) != CONCH_JSON_ARRAY) {
    return -1;
  }
  for (it = root; conch__json_element(p, len, &it, &v);) {
    cnt++;
  }
  if (cnt == 0) {
    return 0;
  }
  arr = api_calloc(m, cnt, sizeof(*arr));
  if (arr == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (it = root; rv == 0 && conch__json_element(p, len, &it, &v); i++) {
    rv = jentry(p, len, v, &arr[i]);
  }
  for (i = 0; rv == 0 && i < cnt; i++) {
    int nomem = 0;
    conch_entry_info *e = &arr[i];
    e->name = empty_if_null(e->name, &nomem);
    e->path = empty_if_null(e->path, &nomem);
    e->permissions = empty_if_null(e->permissions, &nomem);
    e->owner = empty_if_null(e->owner, &nomem);
    e->group = empty_if_null(e->group, &nomem);
    if (nomem) {
      rv = CONCH_ERR_NOMEM;
    }
  }
  if (rv != 0) {
    conch_entries_free(arr, cnt);
    return rv;
  }
  *out = arr;
  *n = cnt;
  return 0;
}

/* ---- Ending ------------------------------------------------------------- */

/* The first bytes of a body that is not JSON, as a status message may
   show them: valid UTF-8 kept, control characters and invalid bytes as
   '?', at most about |max| bytes ("..." after when cut). */
static void body_shown(const char *body, size_t len, size_t max, char *out,
                       size_t cap) {
  const unsigned char *b = (const unsigned char *)body;
  size_t i = 0, n = 0;
  while (i < len && i < max && n + 5 < cap) {
    size_t k = b[i] < 0x80 ? 1 : conch__utf8_seq(b + i, len - i);
    if (k <= 1) {
      out[n++] = b[i] < 0x20 || b[i] >= 0x7f ? '?' : (char)b[i];
      i++;
    } else {
      memcpy(out + n, b + i, k);
      n += k;
      i += k;
    }
  }
  if (i < len) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
}

/* The message of an error answer into |out|: envd's
   {"code":N,"message":"..."} (read with json.h, the whole body checked:
   its top-level "message", the last when repeated, cut to |cap| at a
   character's end); for a body that is JSON without a message, or none,
   the HTTP status; for one that is not JSON, the status and the body's
   first bytes. */
static void error_message(int http, const char *body, size_t len, char *out,
                          size_t cap) {
  const uint8_t *p = (const uint8_t *)body;
  size_t root, it, key, value, msg = 0;
  int found = 0;
  if (body == NULL || len == 0) {
    snprintf(out, cap, "HTTP %d from /files", http);
    return;
  }
  if (conch__json_check(p, len, &root) != 0) {
    char shown[128];
    body_shown(body, len, 64, shown, sizeof(shown));
    snprintf(out, cap, "HTTP %d from /files, with a body that is not JSON: %s",
             http, shown);
    return;
  }
  it = root;
  if (conch__json_kind(p, root) == CONCH_JSON_OBJECT) {
    while (conch__json_member(p, len, &it, &key, &value)) {
      if (conch__json_string_is(p, key, "message") &&
          conch__json_kind(p, value) == CONCH_JSON_STRING &&
          conch__json_strlen(p, value) > 0) {
        msg = value;
        found = 1;
      }
    }
  }
  if (!found) {
    snprintf(out, cap, "HTTP %d from /files", http);
    return;
  }
  {
    size_t n = conch__json_strlen(p, msg);
    char *full = api_malloc(conch_mem_default(), n + 1);
    if (full == NULL) {
      snprintf(out, cap, "HTTP %d from /files", http);
      return;
    }
    conch__json_string(p, msg, full);
    if (n >= cap) {
      /* Cut at a character's end: back over continuation bytes. */
      n = cap - 1;
      while (n > 0 && ((unsigned char)full[n] & 0xc0) == 0x80) {
        n--;
      }
    }
    memcpy(out, full, n);
    out[n] = '\0';
    api_free(conch_mem_default(), full);
  }
}

static conch_code code_of(int http, const char *msg) {
  switch (http) {
  case 400:
    return CONCH_CODE_INVALID_ARGUMENT;
  case 401:
    return CONCH_CODE_UNAUTHENTICATED;
  case 403:
    return CONCH_CODE_PERMISSION_DENIED;
  case 404:
    return CONCH_CODE_NOT_FOUND;
  case 409:
    return CONCH_CODE_ALREADY_EXISTS;
  case 429:
  case 502:
  case 503:
  case 504:
    return CONCH_CODE_UNAVAILABLE;
  case 507:
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  default:
    /* envd answers a file it may not open with a 500 saying so. */
    if (msg != NULL && strstr(msg, "permission denied") != NULL) {
      return CONCH_CODE_PERMISSION_DENIED;
    }
    return http >= 500 ? CONCH_CODE_INTERNAL : CONCH_CODE_UNKNOWN;
  }
}

/* The upload's answer into the caller's |written|: a failure to read it
   fails the call. */
static void answer_settle(xfer *x) {
  int rv = x->ans_over == 2 ? CONCH_ERR_NOMEM
           : x->ans_over    ? -1
                         : answer_parse((const char *)x->ans.data, x->ans.len,
                                        x->written, x->n_written);
  if (rv == CONCH_ERR_NOMEM) {
    x->rv = rv;
    conch__sb_fail(&x->st, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                   "out of memory reading the upload's answer");
  } else if (rv != 0) {
    x->rv = CONCH_ERR_PROTO;
    conch__sb_fail(&x->st, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                   x->ans_over ? "the upload's answer is over 1 MiB"
                               : "the upload's answer is not a JSON array "
                                 "of entries");
  }
}

/* Settles |x| from the call's end: the first of a local error, a failed
   exchange, an HTTP error. */
static void settle(xfer *x, const conch_status *cs) {
  if (x->silent) {
    x->rv = CONCH_ERR_RPC;
    conch__sb_silent(&x->st, x->idle_ms);
  } else if (x->local != 0) {
    x->rv = x->local;
    conch__sb_fail(&x->st, CONCH_CODE_CANCELED, x->local,
                   "transfer stopped (by its callback or canceled)");
  } else if (cs->code != CONCH_CODE_OK) {
    x->rv = CONCH_ERR_RPC;
    conch__sb_status(&x->st, cs);
  } else if (x->http < 200 || x->http > 299) {
    char msg[512];
    const char *m = msg;
    error_message(x->http, x->errbody, x->errlen, msg, sizeof(msg));
    x->rv = CONCH_ERR_RPC;
    conch_status_setf(&x->st, conch_mem_default(), code_of(x->http, m), "%s",
                      m);
    x->st.http_status = x->http;
    x->st.origin = CONCH_ORIGIN_HTTP;
  } else {
    x->rv = 0;
    if (x->written != NULL) {
      answer_settle(x);
    }
  }
}

static void xfer_free(xfer *x) {
  const conch_mem *m = x->sb->mem;
  conch_alarm_cancel(x->alarm);
  api_free(m, x->piece);
  api_free(m, x->errbody);
  conch__buf_free(&x->ans, m);
  conch_status_clear(&x->st);
  api_free(m, x);
}

static void stop(xfer *x, int err) {
  if (x->local == 0) {
    x->local = err;
  }
  conch_call_cancel(x->call);
}

/* ---- The silence bound -------------------------------------------------- */

static void idle_check(conch_client *c, void *ud);

/* A byte moved: the silence starts again. */
static void touch(xfer *x) { x->last_ms = conch__api_now_ms(); }

static void idle_arm(xfer *x, long ms) {
  if (conch_client_alarm(x->sb->client, ms, idle_check, x, &x->alarm) != 0) {
    x->alarm = NULL; /* out of memory: the transfer goes on unbounded */
  }
}

/* The alarm at the end of the bound: a transfer silent for all of it is
   stopped (settle() says why), else the alarm waits for the rest. */
static void idle_check(conch_client *c, void *ud) {
  xfer *x = ud;
  int64_t quiet = conch__api_now_ms() - x->last_ms;
  (void)c;
  x->alarm = NULL;
  if (x->done || x->local != 0 || x->silent) {
    return;
  }
  if (x->paused || x->later) {
    touch(x); /* the caller holds it, not the server */
    quiet = 0;
  }
  if (quiet < x->idle_ms) {
    idle_arm(x, (long)(x->idle_ms - quiet));
    return;
  }
  x->silent = 1;
  conch_call_cancel(x->call);
}

/* ---- The call's handlers ------------------------------------------------ */

static void on_headers(conch_call *call, const conch_metadata *h, void *ud) {
  xfer *x = ud;
  touch(x);
  x->http = conch__http_status(call);
  if (!x->write && x->http >= 200 && x->http <= 299) {
    const char *len = conch_metadata_get(h, "content-length", 0);
    if (len != NULL) {
      char *e;
      long long v = strtoll(len, &e, 10);
      if (*e == '\0' && v >= 0) {
        x->total = v;
      }
    }
  }
}

static void on_body(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  xfer *x = ud;
  (void)call;
  touch(x);
  if (x->http == 0) {
    x->http = conch__http_status(call);
  }
  if (x->local != 0) {
    return;
  }
  if (x->write || x->http < 200 || x->http > 299) {
    /* An upload's answer (its entries) or an error's: only an error's is
       read, for its message, and only so much of it. */
    if (x->http >= 200 && x->http <= 299) {
      if (x->written != NULL && !x->ans_over) {
        if (n > ANSWER_MAX - x->ans.len) {
          x->ans_over = 1;
        } else if (conch__buf_append(&x->ans, x->sb->mem, p, n) != 0) {
          x->ans_over = 2; /* out of memory: the answer is not read */
        }
      }
      return;
    }
    if (x->errbody == NULL) {
      x->errbody = api_malloc(x->sb->mem, ERR_BODY_MAX + 1);
      if (x->errbody == NULL) {
        return; /* the status speaks without it */
      }
    }
    if (n > ERR_BODY_MAX - x->errlen) {
      n = ERR_BODY_MAX - x->errlen;
    }
    memcpy(x->errbody + x->errlen, p, n);
    x->errlen += n;
    x->errbody[x->errlen] = '\0';
    return;
  }
  if (x->sink(p, n, x->sink_ud) != 0) {
    stop(x, CONCH_ERR_CANCELED);
    return;
  }
  touch(x); /* the time in the sink was ours, not the server's silence */
  x->moved += n;
  if (x->progress != NULL) {
    x->progress(x->moved, x->total, x->progress_ud);
  }
}

/* Queues bytes from the source until the call's buffer is full or the
   contents end. */
static void pump(xfer *x) {
  while (x->local == 0 && !conch_call_done(x->call)) {
    int rv;
    if (x->plen == 0 && !x->src_end) {
      long got = x->source(x->piece, PIECE, x->source_ud);
      if (got == CONCH_FILES_SOURCE_LATER && x->on_done != NULL) {
        x->later = 1;
        return; /* conch_files_xfer_resume() */
      }
      if (got < 0) {
        stop(x, CONCH_ERR_CANCELED);
        return;
      }
      touch(x); /* nor was the time in the source */
      if (got == 0) {
        x->src_end = 1;
        memcpy(x->piece, x->epilogue, strlen(x->epilogue));
        x->plen = strlen(x->epilogue);
      } else {
        x->plen = (size_t)got;
      }
    }
    if (x->plen == 0) {
      conch_call_close_send(x->call);
      return;
    }
    rv = conch_call_send_raw(x->call, x->piece, x->plen);
    if (rv == CONCH_ERR_AGAIN) {
      return; /* on_send_ready */
    }
    if (rv != 0) {
      return; /* the call ended: its end says why */
    }
    touch(x); /* queued: the call takes bytes only as the server does */
    if (x->in_head) {
      x->in_head = 0; /* the part's head is not the file's */
    } else if (!x->src_end) {
      x->moved += x->plen;
      if (x->progress != NULL) {
        x->progress(x->moved, x->total, x->progress_ud);
      }
    }
    x->plen = 0;
    if (x->src_end) {
      conch_call_close_send(x->call);
      return;
    }
  }
}

static void on_send_ready(conch_call *call, void *ud) {
  (void)call;
  pump(ud);
}

static void on_close(conch_call *call, const conch_status *cs,
                     const conch_metadata *trailers, void *ud) {
  xfer *x = ud;
  (void)trailers;
  if (x->http == 0) {
    x->http = conch__http_status(call);
  }
  conch_alarm_cancel(x->alarm);
  x->alarm = NULL;
  settle(x, cs);
  x->done = 1;
  if (x->on_done != NULL) {
    x->on_done(x->rv, &x->st, x->moved, x->done_ud);
    xfer_free(x);
  }
}

/* ---- Starting ----------------------------------------------------------- */

/* A refusal before anything is sent: CONCH_ERR_INVALID, with |st| (may
   be NULL) invalid_argument saying why. */
static int refuse(conch_status *st, const char *why) {
  conch__sb_fail(st, CONCH_CODE_INVALID_ARGUMENT, CONCH_ERR_INVALID, why);
  return CONCH_ERR_INVALID;
}

static int nomem(conch_status *st) {
  conch__sb_fail(st, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                 "out of memory starting the transfer");
  return CONCH_ERR_NOMEM;
}

/* A new transfer (a write when |write|) with |opts| (checked: what is
   refused says why in |st|, which may be NULL). */
static int xfer_new(conch_sandbox *sb, const conch_files_io_opts *opts,
                    int write, conch_status *st, xfer **out) {
  conch_files_io_opts o = CONCH_FILES_IO_OPTS_INIT;
  xfer *x;
  if (opts != NULL) {
    size_t n = opts->struct_size < sizeof(o) ? opts->struct_size : sizeof(o);
    if (n < sizeof(size_t)) {
      return refuse(st, "opts.struct_size is too small (use "
                        "CONCH_FILES_IO_OPTS_INIT)");
    }
    memcpy(&o, opts, n);
    if (o.timeout_ms < 0) {
      return refuse(st, "opts.timeout_ms is negative");
    }
    if (o.idle_timeout_ms < -1) {
      return refuse(st, "opts.idle_timeout_ms is below -1");
    }
  }
  if (write) {
    int rv = meta_check(&o, st);
    if (rv != 0) {
      return rv;
    }
    if ((o.written == NULL) != (o.n_written == NULL)) {
      return refuse(st, "opts.written and opts.n_written go together (both "
                        "set or both NULL)");
    }
  }
  x = api_calloc(sb->mem, 1, sizeof(*x));
  if (x == NULL) {
    return nomem(st);
  }
  x->sb = sb;
  x->write = write;
  if (write) {
    x->meta = o.metadata;
    x->n_meta = o.n_metadata;
    x->written = o.written;
    x->n_written = o.n_written;
    if (x->written != NULL) {
      *x->written = NULL;
      *x->n_written = 0;
    }
  }
  x->progress = o.progress;
  x->progress_ud = o.progress_ud;
  x->total = -1;
  x->idle_ms = o.idle_timeout_ms == 0   ? sb->silence_ms
               : o.idle_timeout_ms < 0 ? 0
                                       : o.idle_timeout_ms;
  conch_status_init(&x->st);
  *out = x;
  return 0;
}

/* Starts the exchange of |x| (sink or source set).  Returns 0 or an
   error (|st|, may be NULL, says why), with |x| still the caller's either
   way. */
static int xfer_start(xfer *x, const char *path,
                      const conch_files_io_opts *opts, int auto_free,
                      conch_status *st) {
  conch_sandbox *sb = x->sb;
  const char *user = opts != NULL ? opts->user : NULL;
  conch_call_handler h = {0};
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  char ctype[96], boundary[48];
  char *target;
  conch_metadata *md;
  int rv;

  h.on_headers = on_headers;
  h.on_raw_message = on_body;
  h.on_send_ready = on_send_ready;
  h.on_close = on_close;
  co.timeout_ms = opts != NULL ? opts->timeout_ms : 0;
  co.auto_free = auto_free;
  target = files_target(sb->mem, path, user);
  md = conch__sb_headers(sb, user, 0);
  if (x->write) {
    x->piece = api_malloc(sb->mem, PIECE);
    if (md != NULL && meta_headers(md, x->meta, x->n_meta) != 0) {
      conch_metadata_free(md);
      md = NULL;
    }
  }
  if (target == NULL || md == NULL || (x->write && x->piece == NULL)) {
    api_free(sb->mem, target);
    conch_metadata_free(md);
    return nomem(st);
  }
  co.headers = md;
  if (x->write) {
    char name[200];
    int k;
    make_boundary(x, boundary, sizeof(boundary));
    snprintf(ctype, sizeof(ctype), "multipart/form-data; boundary=%s",
             boundary);
    part_name(path, name, sizeof(name));
    k = snprintf((char *)x->piece, PIECE,
                 "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                 "filename=\"%s\"\r\nContent-Type: application/octet-stream"
                 "\r\n\r\n",
                 boundary, name);
    x->plen = (size_t)k; /* the part's head goes first */
    x->in_head = 1;
    snprintf(x->epilogue, sizeof(x->epilogue), "\r\n--%s--\r\n", boundary);
  }
  rv = conch__http_start(sb->client, x->write ? "POST" : "GET", target,
                         x->write ? ctype : NULL, &co, &h, x, &x->call);
  api_free(sb->mem, target);
  conch_metadata_free(md);
  if (rv == CONCH_ERR_NOMEM) {
    return nomem(st);
  }
  if (rv != 0) {
    char msg[160];
    snprintf(msg, sizeof(msg), "the transfer of %.64s could not start: %s",
             path, conch_strerror(rv));
    conch__sb_fail(st,
                   rv == CONCH_ERR_INVALID ? CONCH_CODE_INVALID_ARGUMENT
                                           : CONCH_CODE_UNAVAILABLE,
                   rv, msg);
    return rv;
  }
  touch(x);
  if (x->idle_ms > 0) {
    idle_arm(x, x->idle_ms);
  }
  if (x->write) {
    pump(x);
  }
  return 0;
}

/* Runs |x| to its end and returns its result (|x| freed). */
static int xfer_run(xfer *x, const char *path, const conch_files_io_opts *opts,
                    conch_status *st) {
  int rv = xfer_start(x, path, opts, 0, st);
  if (rv == 0) {
    rv = conch__sb_drive(x->sb, &x->done);
    if (rv == 0) {
      rv = x->rv;
      conch__sb_status(st, &x->st);
    }
    conch_call_free(x->call);
  }
  xfer_free(x);
  return rv;
}

static int check(conch_sandbox *sb, const char *path, conch_status *st) {
  return sb == NULL     ? refuse(st, "no sandbox (NULL)")
         : path == NULL ? refuse(st, "no path (NULL)")
                        : 0;
}

int conch_files_read_cb(conch_sandbox *sb, const char *path,
                        conch_files_sink sink, void *sink_ud,
                        const conch_files_io_opts *opts, conch_status *st) {
  xfer *x;
  int rv = check(sb, path, st);
  if (rv == 0 && sink == NULL) {
    rv = refuse(st, "no sink (NULL)");
  }
  if (rv == 0) {
    rv = xfer_new(sb, opts, 0, st, &x);
  }
  if (rv != 0) {
    return rv;
  }
  x->sink = sink;
  x->sink_ud = sink_ud;
  return xfer_run(x, path, opts, st);
}

int conch_files_write_cb(conch_sandbox *sb, const char *path,
                         conch_files_source source, void *source_ud,
                         const conch_files_io_opts *opts, conch_status *st) {
  xfer *x;
  int rv = check(sb, path, st);
  if (rv == 0 && source == NULL) {
    rv = refuse(st, "no source (NULL)");
  }
  if (rv == 0) {
    rv = xfer_new(sb, opts, 1, st, &x);
  }
  if (rv != 0) {
    return rv;
  }
  x->source = source;
  x->source_ud = source_ud;
  return xfer_run(x, path, opts, st);
}

/* The blocking forms over the callback ones.  |errno_out| carries an I/O
   error out of the callback (the sink's or source's non-zero). */

typedef struct membuf {
  const conch_mem *m;
  conch_buf out; /* read */
  size_t len;    /* write: the bytes of |src| */
  int nomem;
  const uint8_t *src; /* write */
  size_t off;
  int fd;
  int eno;
} membuf;

static int mem_sink(const uint8_t *d, size_t n, void *ud) {
  membuf *b = ud;
  /* One byte more than the data: the NUL conch_files_read() promises. */
  if (conch__buf_reserve(&b->out, b->m, n + 1) != 0) {
    b->nomem = 1;
    return -1;
  }
  return conch__buf_append(&b->out, b->m, d, n);
}

int conch_files_read(conch_sandbox *sb, const char *path,
                     const conch_files_io_opts *opts, uint8_t **data,
                     size_t *len, conch_status *st) {
  membuf b;
  int rv;
  if (data == NULL || len == NULL) {
    return refuse(st, "no place for the contents (data or len NULL)");
  }
  memset(&b, 0, sizeof(b));
  b.m = conch_mem_default();
  rv = conch_files_read_cb(sb, path, mem_sink, &b, opts, st);
  if (rv == CONCH_ERR_CANCELED && b.nomem) {
    rv = CONCH_ERR_NOMEM;
    conch__sb_fail(st, CONCH_CODE_RESOURCE_EXHAUSTED, rv,
                   "out of memory reading the file");
  }
  if (rv == 0 && conch__buf_reserve(&b.out, b.m, 1) != 0) {
    rv = CONCH_ERR_NOMEM; /* an empty file still gets its NUL */
  }
  if (rv != 0) {
    conch__buf_free(&b.out, b.m);
    return rv;
  }
  b.out.data[b.out.len] = '\0'; /* off is 0: nothing is consumed */
  *data = b.out.data;
  *len = b.out.len;
  return 0;
}

void conch_files_data_free(uint8_t *data) {
  api_free(conch_mem_default(), data);
}

static int fd_sink(const uint8_t *d, size_t n, void *ud) {
  membuf *b = ud;
  while (n > 0) {
    ssize_t w = write(b->fd, d, n);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      b->eno = errno;
      return -1;
    }
    d += w;
    n -= (size_t)w;
  }
  return 0;
}

static long fd_source(uint8_t *buf, size_t cap, void *ud) {
  membuf *b = ud;
  for (;;) {
    ssize_t r = read(b->fd, buf, cap);
    if (r >= 0) {
      return (long)r;
    }
    if (errno != EINTR) {
      b->eno = errno;
      return -1;
    }
  }
}

/* A callback that failed on an I/O error: CONCH_ERR_IO with errno. */
static int io_result(int rv, const membuf *b, conch_status *st) {
  if (rv == CONCH_ERR_CANCELED && b->eno != 0) {
    conch__sb_fail(st, CONCH_CODE_INTERNAL, CONCH_ERR_IO, strerror(b->eno));
    errno = b->eno;
    return CONCH_ERR_IO;
  }
  return rv;
}

int conch_files_read_fd(conch_sandbox *sb, const char *path, int fd,
                        const conch_files_io_opts *opts, conch_status *st) {
  membuf b;
  if (fd < 0) {
    return refuse(st, "a negative file descriptor");
  }
  memset(&b, 0, sizeof(b));
  b.fd = fd;
  return io_result(conch_files_read_cb(sb, path, fd_sink, &b, opts, st), &b,
                   st);
}

static long mem_source(uint8_t *buf, size_t cap, void *ud) {
  membuf *b = ud;
  size_t n = b->len - b->off;
  if (n > cap) {
    n = cap;
  }
  if (n > 0) {
    memcpy(buf, b->src + b->off, n);
  }
  b->off += n;
  return (long)n;
}

/* A write whose size is known: the progress callback's total. */
static int write_sized(conch_sandbox *sb, const char *path,
                       conch_files_source src, membuf *b, int64_t total,
                       const conch_files_io_opts *opts, conch_status *st) {
  xfer *x;
  int rv = check(sb, path, st);
  if (rv == 0) {
    rv = xfer_new(sb, opts, 1, st, &x);
  }
  if (rv != 0) {
    return rv;
  }
  x->source = src;
  x->source_ud = b;
  x->total = total;
  return io_result(xfer_run(x, path, opts, st), b, st);
}

int conch_files_write(conch_sandbox *sb, const char *path, const void *data,
                      size_t len, const conch_files_io_opts *opts,
                      conch_status *st) {
  membuf b;
  if (data == NULL && len > 0) {
    return refuse(st, "no data (NULL) for a length above 0");
  }
  memset(&b, 0, sizeof(b));
  b.src = data;
  b.len = len;
  return write_sized(sb, path, mem_source, &b, (int64_t)len, opts, st);
}

int conch_files_write_fd(conch_sandbox *sb, const char *path, int fd,
                         const conch_files_io_opts *opts, conch_status *st) {
  struct stat sbuf;
  int64_t total = -1;
  membuf b;
  if (fd < 0) {
    return refuse(st, "a negative file descriptor");
  }
  if (fstat(fd, &sbuf) == 0 && S_ISREG(sbuf.st_mode)) {
    off_t at = lseek(fd, 0, SEEK_CUR);
    total = (int64_t)sbuf.st_size - (at > 0 ? (int64_t)at : 0);
  }
  memset(&b, 0, sizeof(b));
  b.fd = fd;
  return write_sized(sb, path, fd_source, &b, total, opts, st);
}

/* ---- Asynchronous forms ------------------------------------------------- */

int conch_files_read_async(conch_sandbox *sb, const char *path,
                           conch_files_sink sink, void *sink_ud,
                           const conch_files_io_opts *opts,
                           conch_files_io_done done, void *user_data) {
  conch_files_xfer *x;
  return conch_files_read_start(sb, path, sink, sink_ud, opts, done, user_data,
                                &x, NULL);
}

/* The start of an asynchronous transfer: a read into |sink|, or a write
   (|write|) from |source|. */
static int xfer_begin(conch_sandbox *sb, const char *path, int write,
                      conch_files_sink sink, conch_files_source source,
                      void *cb_ud, const conch_files_io_opts *opts,
                      conch_files_io_done done, void *user_data,
                      conch_files_xfer **out, conch_status *st) {
  xfer *x;
  int rv;
  if (out == NULL) {
    return refuse(st, "no place for the transfer's handle (out NULL)");
  }
  *out = NULL;
  rv = check(sb, path, st);
  if (rv == 0 && (write ? source == NULL : sink == NULL)) {
    rv = refuse(st, write ? "no source (NULL)" : "no sink (NULL)");
  }
  if (rv == 0 && done == NULL) {
    rv = refuse(st, "no done callback (NULL)");
  }
  if (rv == 0) {
    rv = xfer_new(sb, opts, write, st, &x);
  }
  if (rv != 0) {
    return rv;
  }
  if (write) {
    x->source = source;
    x->source_ud = cb_ud;
  } else {
    x->sink = sink;
    x->sink_ud = cb_ud;
  }
  x->on_done = done;
  x->done_ud = user_data;
  rv = xfer_start(x, path, opts, 1, st);
  if (rv != 0) {
    xfer_free(x);
  } else {
    *out = x;
  }
  return rv;
}

int conch_files_read_start(conch_sandbox *sb, const char *path,
                           conch_files_sink sink, void *sink_ud,
                           const conch_files_io_opts *opts,
                           conch_files_io_done done, void *user_data,
                           conch_files_xfer **out, conch_status *st) {
  return xfer_begin(sb, path, 0, sink, NULL, sink_ud, opts, done, user_data,
                    out, st);
}

int conch_files_write_async(conch_sandbox *sb, const char *path,
                            conch_files_source source, void *source_ud,
                            const conch_files_io_opts *opts,
                            conch_files_io_done done, void *user_data) {
  conch_files_xfer *x;
  return conch_files_write_start(sb, path, source, source_ud, opts, done,
                                 user_data, &x, NULL);
}

int conch_files_write_start(conch_sandbox *sb, const char *path,
                            conch_files_source source, void *source_ud,
                            const conch_files_io_opts *opts,
                            conch_files_io_done done, void *user_data,
                            conch_files_xfer **out, conch_status *st) {
  return xfer_begin(sb, path, 1, NULL, source, source_ud, opts, done, user_data,
                    out, st);
}

int conch_files_xfer_pause(conch_files_xfer *x) {
  if (x == NULL || x->write) {
    return CONCH_ERR_INVALID;
  }
  if (!x->paused && !x->done) {
    x->paused = 1;
    conch_call_pause(x->call);
  }
  return 0;
}

int conch_files_xfer_resume(conch_files_xfer *x) {
  if (x == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (x->paused) {
    x->paused = 0;
    touch(x);
    conch_call_resume(x->call);
  }
  if (x->later) {
    x->later = 0;
    touch(x);
    pump(x);
  }
  return 0;
}

void conch_files_xfer_cancel(conch_files_xfer *x) {
  if (x != NULL && !x->done) {
    stop(x, CONCH_ERR_CANCELED);
  }
}
