/* envd's /files in conch serve (a plain HTTP handler of the core,
   conch_server_add_http()): GET downloads a file, POST uploads one
   (application/octet-stream, the path in the query) or many
   (multipart/form-data, each part named "file" with its path as filename
   unless the query gives one), either possibly gzip'd (Content-Encoding),
   and answers the written entries as JSON: [{"path","name","type":"file"}].

   As envd: the query's path, username, signature and signature_expiration;
   X-Access-Token or a signature when the server has a token (the gate lets
   /files through and this file checks); paths relative to the user's home
   ("~" expanded, ".." resolved); 400 bad path or body, 401 bad user or
   signature, 404 no such file, 507 a full disk (ENOSPC), errors as
   {"code":N,"message":"..."}; parent directories made.  Metadata: each
   X-Metadata-KEY header of an upload becomes the xattr user.e2b.KEY (key
   lower-cased, the first value of a repeated one) of every file written,
   the whole set (a replaced file keeps none of its old ones), and the
   entries answered carry the metadata read back from the file ("metadata",
   left out when none: a file system without user xattrs keeps the body
   and drops the metadata, as envd).

   Different from envd, on purpose: an upload goes to a temporary file next
   to its target and is renamed into place once whole, so a failed or cut
   upload leaves the old file (or none), never half a file (envd truncates
   the target first); the mode of a file replaced is kept.  A gzip body may
   not inflate past GZ_RATIO times its compressed size plus GZ_SLACK (a
   decompression bomb is a 400, not a full disk: so is a gzip body of more than 64 MiB of zeros).  Downloads ignore Range
   and Accept-Encoding (always the whole file, identity).

   Everything streams: request bytes go to disk as they come (inflated
   through a fixed buffer), the multipart reader keeps no data
   (serve_multipart.c), a download is read PIECE bytes at a time as the
   client takes them.  File I/O blocks the loop, as local disk does. */
#include "serve.h"
#include "serve_fs.h"
#include "serve_multipart.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <zlib.h>

#include <conch/base64.h>

#define PIECE (64 * 1024)
#define GZ_RATIO 100ULL /* far past what real data compresses to */
#define GZ_SLACK (64ULL * 1024 * 1024)
#define MAX_ENTRIES 100000
#define META_HDR "x-metadata-" /* X-Metadata-KEY: VALUE, lower-cased */
#define META_XATTR "user.e2b."

enum { UP_NONE = 0, UP_RAW, UP_MULTIPART };

/* One X-Metadata pair of an upload, pointing into the request's
   headers; |at| is the header's index. */
typedef struct files_meta {
  const char *name; /* the header's name (x-metadata-KEY) */
  const char *v;
  size_t vl;
  size_t at;
} files_meta;

typedef struct files_x {
  srv_server *srv;
  conch_http *h;
  int post;
  int answered;     /* the answer went out, or goes: nothing more to do */
  int ended;        /* conch_http_end() was called: freed by settle() */
  char *shown;      /* multipart: the path of the part being written */
  size_t pend;      /* download: bytes in |piece| not yet taken */
  srv_user user;
  char *qpath;      /* the query's path (decoded), NULL if absent */
  /* Upload. */
  int kind;
  int gz;
  int zinit;
  int zdone;
  z_stream zs;
  uint64_t zin, zout;
  srv_mp mp;
  int skip;        /* the current part is not a file */
  int fd;          /* the temporary file being written, or -1 */
  char *tmp;
  char *target;
  srv_buf resp;  /* the JSON entries so far */
  char **written;  /* their paths (envd refuses a second part to one) */
  size_t nwritten;
  files_meta *meta; /* the X-Metadata pairs, one per key (meta_check) */
  size_t nmeta;
  /* Download. */
  int dfd;
  uint64_t left;
  uint8_t *piece;
} files_x;

/* ---- Answers --------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at |s| (NUL-terminated), 0 when
   there is none (overlong forms, surrogates, past U+10FFFF). */
static size_t utf8_len(const unsigned char *s) {
  size_t n, i;
  unsigned min, cp;
  if (s[0] >= 0xc2 && s[0] <= 0xdf) {
    n = 2, min = 0x80, cp = s[0] & 0x1fu;
  } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
    n = 3, min = 0x800, cp = s[0] & 0x0fu;
  } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
    n = 4, min = 0x10000, cp = s[0] & 0x07u;
  } else {
    return 0;
  }
  for (i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) {
      return 0; /* also the NUL at the end */
    }
    cp = (cp << 6) | (s[i] & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return n;
}

/* |s| as a JSON string; a byte that is not UTF-8 (a file name the OS
   allows) as U+FFFD, as envd's encoding/json writes it: the answer stays
   JSON (RFC 8259), which clients check. */
static void json_str(srv_buf *b, const conch_mem *mem, const char *s) {
  static const char hex[] = "0123456789abcdef";
  (void)srv_buf_append(b, mem, "\"", 1);
  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    char e[6];
    if (c >= 0x80) {
      size_t k = utf8_len((const unsigned char *)s);
      if (k == 0) {
        (void)srv_buf_append(b, mem, "\\ufffd", 6);
      } else {
        (void)srv_buf_append(b, mem, s, k);
        s += k - 1;
      }
    } else if (c == '"' || c == '\\') {
      e[0] = '\\';
      e[1] = (char)c;
      (void)srv_buf_append(b, mem, e, 2);
    } else if (c < 0x20) {
      memcpy(e, "\\u00", 4);
      e[4] = hex[c >> 4];
      e[5] = hex[c & 15];
      (void)srv_buf_append(b, mem, e, 6);
    } else {
      (void)srv_buf_append(b, mem, s, 1);
    }
  }
  (void)srv_buf_append(b, mem, "\"", 1);
}

static void answer(files_x *x, int status, const srv_buf *body,
                   const char *ctype) {
  char len[32];
  const char *hdrs[] = {"content-type", ctype, "content-length", len, NULL};
  snprintf(len, sizeof(len), "%zu", srv_buf_size(body));
  x->answered = 1;
  if (conch_http_respond(x->h, status, hdrs, 1) == 0 &&
      srv_buf_size(body) > 0) {
    /* Small: always taken (the queue is empty). */
    (void)conch_http_write(x->h, srv_buf_head(body), srv_buf_size(body));
  }
  x->ended = 1;
  (void)conch_http_end(x->h);
}

static void fail(files_x *x, int status, const char *fmt, ...)
    CONCH_PRINTF(3, 4);
static void fail(files_x *x, int status, const char *fmt, ...) {
  const conch_mem *mem = x->srv->mem;
  srv_buf b = SRV_BUF_INIT;
  char msg[1536];
  char head[32];
  va_list ap;

  if (x->answered) {
    return;
  }
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(head, sizeof(head), "{\"code\":%d,\"message\":", status);
  (void)srv_buf_append(&b, mem, head, strlen(head));
  json_str(&b, mem, msg);
  (void)srv_buf_append(&b, mem, "}\n", 2);
  answer(x, status, &b, "application/json; charset=utf-8");
  srv_buf_free(&b, mem);
}

/* ---- The query --------------------------------------------------------------- */

static int hexv(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The first value of |key| in the query, decoded as Go's url.ParseQuery
   does ('+' is a space).  Returns 1 (|*out| malloc'd), 0 absent, -1 a bad
   escape. */
static int query_get(const char *q, const char *key, char **out) {
  size_t klen = strlen(key);
  while (q != NULL && *q != '\0') {
    const char *end = strchr(q, '&');
    size_t n = end != NULL ? (size_t)(end - q) : strlen(q);
    if (n >= klen && strncmp(q, key, klen) == 0 &&
        (n == klen || q[klen] == '=')) {
      const char *v = n == klen ? q + n : q + klen + 1;
      size_t vn = n == klen ? 0 : n - klen - 1;
      char *d = malloc(vn + 1);
      size_t k = 0;
      if (d == NULL) {
        return -1;
      }
      for (size_t i = 0; i < vn; i++) {
        if (v[i] == '%') {
          if (i + 2 >= vn || hexv(v[i + 1]) < 0 || hexv(v[i + 2]) < 0) {
            free(d);
            return -1;
          }
          d[k++] = (char)(hexv(v[i + 1]) * 16 + hexv(v[i + 2]));
          i += 2;
        } else {
          d[k++] = v[i] == '+' ? ' ' : v[i];
        }
      }
      d[k] = '\0';
      if (memchr(d, '\0', k) != NULL) {
        free(d);
        return -1; /* no NUL in a path or name */
      }
      *out = d;
      return 1;
    }
    q = end != NULL ? end + 1 : NULL;
  }
  return 0;
}

/* envd's signing: "v1_" and the unpadded base64 of SHA-256 over
   path:operation:username:token[:expiration]. */
static int signature_ok(const srv_server *srv, const char *path,
                        const char *op, const char *user, const char *exp,
                        const char *got) {
  const char *tok = srv->cfg.access_token;
  size_t n = strlen(path) + strlen(op) + strlen(user) + strlen(tok) +
             (exp != NULL ? strlen(exp) : 0) + 8;
  char *s = malloc(n);
  unsigned char md[SHA256_DIGEST_LENGTH];
  char want[3 + 64];
  size_t w;
  int ok;

  if (s == NULL) {
    return 0;
  }
  if (exp != NULL) {
    snprintf(s, n, "%s:%s:%s:%s:%s", path, op, user, tok, exp);
  } else {
    snprintf(s, n, "%s:%s:%s:%s", path, op, user, tok);
  }
  SHA256((const unsigned char *)s, strlen(s), md);
  OPENSSL_cleanse(s, n);
  free(s);
  memcpy(want, "v1_", 3);
  w = 3 + conch_base64_encode(md, sizeof(md), 0, want + 3);
  ok = strlen(got) == w && CRYPTO_memcmp(got, want, w) == 0;
  return ok;
}

/* Token or signature (envd's validateSigning).  Returns 0, or answered. */
static int check_access(files_x *x, const char *q, const char *path,
                        const char *user) {
  const srv_server *srv = x->srv;
  const char *tok = conch_http_header(x->h, "x-access-token");
  char *sig = NULL, *exp = NULL;
  int rv;

  if (srv->cfg.access_token == NULL) {
    return 0;
  }
  if (tok != NULL && tok[0] != '\0') {
    size_t n = strlen(srv->cfg.access_token);
    if (strlen(tok) != n || CRYPTO_memcmp(tok, srv->cfg.access_token, n) != 0) {
      fail(x, 401, "access token present in header but does not match");
      return -1;
    }
    return 0;
  }
  if (query_get(q, "signature", &sig) != 1) {
    free(sig);
    fail(x, 401, "missing signature query parameter");
    return -1;
  }
  rv = query_get(q, "signature_expiration", &exp);
  if (rv < 0) {
    free(sig);
    fail(x, 400, "invalid signature_expiration");
    return -1;
  }
  if (exp != NULL) {
    char *end;
    errno = 0;
    long long e = strtoll(exp, &end, 10);
    if (exp[0] == '\0' || *end != '\0' || errno != 0) {
      fail(x, 400, "Invalid format for parameter signature_expiration");
      rv = -1;
    } else if (!signature_ok(srv, path, x->post ? "write" : "read", user, exp,
                             sig)) {
      fail(x, 401, "invalid signature");
      rv = -1;
    } else if (e < (long long)time(NULL)) {
      fail(x, 401, "signature is already expired");
      rv = -1;
    } else {
      rv = 0;
    }
  } else if (!signature_ok(srv, path, x->post ? "write" : "read", user, NULL,
                           sig)) {
    fail(x, 401, "invalid signature");
    rv = -1;
  } else {
    rv = 0;
  }
  free(sig);
  free(exp);
  return rv;
}

/* The user: the query's username, else Authorization: Basic, else
   --user, else the server's own; the rules of Start for who may be had. */
static int resolve_user(files_x *x, const char *name) {
  srv_server *srv = x->srv;
  int rv;

  if (name != NULL) {
    rv = srv_user_lookup(name, &x->user);
  } else if (srv->cfg.default_user != NULL) {
    name = srv->cfg.default_user;
    rv = srv_user_lookup(name, &x->user);
  } else {
    rv = srv_user_by_uid(srv->euid, &x->user);
  }
  if (rv == -1) {
    fail(x, 401, "error looking up user '%s': user: unknown user %s",
         name != NULL ? name : "", name != NULL ? name : "");
    return -1;
  }
  if (rv != 0) {
    fail(x, 500, "out of memory");
    return -1;
  }
  if ((srv->euid != 0 && x->user.uid != srv->euid) ||
      !srv_user_allowed(srv, x->user.name, x->user.uid)) {
    fail(x, 401,
         "cannot act as user '%s': conch serve %s (see --allow-user)",
         x->user.name,
         srv->euid != 0 ? "is not running as root" : "does not allow it");
    return -1;
  }
  return 0;
}

/* ---- Paths --------------------------------------------------------------- */

/* envd's ExpandAndResolve: "" is --workdir (if set), "~" and "~/" the
   home, an absolute path stays as given, a relative one is joined to the
   home and cleaned ("." and ".." resolved, as Go's filepath.Abs).
   Returns a malloc'd path, or NULL with |err| set. */
static char *resolve_path(files_x *x, const char *in, char *err, size_t cap) {
  const char *home = x->user.home != NULL ? x->user.home : "/";
  char *joined, *out;
  size_t n;

  if (in[0] == '\0' && x->srv->cfg.workdir != NULL) {
    in = x->srv->cfg.workdir;
  }
  if (in[0] == '~') {
    if (in[1] != '\0' && in[1] != '/' && in[1] != '\\') {
      snprintf(err, cap,
               "failed to expand path '%s' for user '%s': cannot expand "
               "user-specific home dir",
               in, x->user.name);
      return NULL;
    }
    in++;
  } else if (in[0] == '/') {
    return strdup(in);
  }
  n = strlen(home) + strlen(in) + 2;
  joined = malloc(n);
  out = malloc(n + 1);
  if (joined == NULL || out == NULL) {
    free(joined);
    free(out);
    snprintf(err, cap, "out of memory");
    return NULL;
  }
  snprintf(joined, n, "%s/%s", home, in);
  /* Clean: components, "." dropped, ".." pops. */
  size_t o = 0;
  const char *p = joined;
  while (*p != '\0') {
    const char *s;
    size_t len;
    while (*p == '/') {
      p++;
    }
    s = p;
    while (*p != '\0' && *p != '/') {
      p++;
    }
    len = (size_t)(p - s);
    if (len == 0 || (len == 1 && s[0] == '.')) {
      continue;
    }
    if (len == 2 && s[0] == '.' && s[1] == '.') {
      while (o > 0 && out[o - 1] != '/') {
        o--;
      }
      if (o > 0) {
        o--;
      }
      continue;
    }
    out[o++] = '/';
    memcpy(out + o, s, len);
    o += len;
  }
  if (o == 0) {
    out[o++] = '/';
  }
  out[o] = '\0';
  free(joined);
  return out;
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s != NULL && s[1] != '\0' ? s + 1 : p;
}

/* Makes the parent directories of |path| (0755, owned by the user when we
   are root).  Returns 0, or -1 with |err| set (and errno). */
static int ensure_dirs(files_x *x, const char *path, char *err, size_t cap) {
  char *d = strdup(path);
  char *slash;
  struct stat st;

  if (d == NULL) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  slash = strrchr(d, '/');
  if (slash == NULL || slash == d) {
    free(d);
    return 0;
  }
  *slash = '\0';
  for (char *p = d + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (stat(d, &st) != 0) {
        if (errno != ENOENT || mkdir(d, 0755) != 0) {
          int e = errno;
          snprintf(err, cap, "error ensuring directories: failed to create "
                   "directory: mkdir %s: %s", d, strerror(e));
          free(d);
          errno = e;
          return -1;
        }
        if (x->srv->euid == 0) {
          (void)chown(d, x->user.uid, x->user.gid);
        }
      } else if (!S_ISDIR(st.st_mode)) {
        snprintf(err, cap, "error ensuring directories: path is a file: %s",
                 d);
        free(d);
        errno = ENOTDIR;
        return -1;
      }
      *p = c;
      if (c == '\0') {
        break;
      }
    }
  }
  free(d);
  return 0;
}

/* ---- Writing one file ------------------------------------------------------ */

static void file_abort(files_x *x) {
  if (x->fd >= 0) {
    close(x->fd);
    x->fd = -1;
  }
  if (x->tmp != NULL) {
    (void)unlink(x->tmp);
    srv_fs_unhide(x->srv, x->tmp);
    free(x->tmp);
    x->tmp = NULL;
  }
  free(x->target);
  x->target = NULL;
}

static int file_open_as(files_x *x, char *path);

/* The HTTP status of a failed create or rename: 507 on a full disk, else
   500 (envd's for a file it cannot open; the message says "permission
   denied" when the user may not, which the API maps to
   permission_denied). */
static int create_status(int e) {
  return e == ENOSPC || e == EDQUOT ? 507 : 500;
}

/* Opens a temporary file for |path| (resolved), as the request's user: a
   root server writing for another user makes the directories, the file
   and its rename into place with that user's permission checks, so a
   user writes nowhere it could not write itself.  Returns 0 or
   answered. */
static int file_open(files_x *x, char *path) {
  int rv;
  if (srv_fs_as_user(x->srv, &x->user) != 0) {
    fail(x, 500, "cannot act as user '%s'", x->user.name);
    free(path);
    return -1;
  }
  rv = file_open_as(x, path);
  srv_fs_as_server(x->srv, &x->user);
  return rv;
}

static int file_open_as(files_x *x, char *path) {
  char err[1024];
  struct stat st;
  char *real = NULL;
  const char *dest = path;
  mode_t mode;
  int have = 0;

  if (ensure_dirs(x, path, err, sizeof(err)) != 0) {
    int e = errno;
    fail(x, create_status(e), "%s", err);
    free(path);
    return -1;
  }
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
    /* envd writes through a symlink: so do we, to what it points at. */
    real = realpath(path, NULL);
    if (real != NULL) {
      dest = real;
    }
  }
  if (stat(dest, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fail(x, 400, "path is a directory: %s", path);
      free(real);
      free(path);
      return -1;
    }
    have = 1;
  } else if (errno != ENOENT) {
    fail(x, 500, "error getting file info: stat %s: %s", path,
         strerror(errno));
    free(real);
    free(path);
    return -1;
  }
  size_t n = strlen(dest) + 32;
  x->tmp = malloc(n);
  if (x->tmp == NULL) {
    fail(x, 500, "out of memory");
    free(real);
    free(path);
    return -1;
  }
  {
    const char *slash = strrchr(dest, '/');
    int dl = slash != NULL ? (int)(slash - dest) : 0;
    snprintf(x->tmp, n, "%.*s/.%s.conch-XXXXXX", dl, dest,
             slash != NULL ? slash + 1 : dest);
  }
  x->fd = mkostemp(x->tmp, O_CLOEXEC);
  if (x->fd < 0) {
    int e = errno;
    free(x->tmp);
    x->tmp = NULL;
    fail(x, create_status(e),
         e == ENOSPC ? "not enough inodes available: open %s: %s"
                     : "error opening file: open %s: %s",
         path, strerror(e));
    free(real);
    free(path);
    return -1;
  }
  srv_fs_hide(x->srv, x->tmp);
  /* A new file gets 0666 less the umask, as envd's; one replaced keeps
     its mode (and owner, for root). */
  if (have) {
    mode = st.st_mode & 07777;
    (void)fchmod(x->fd, mode);
  } else {
    mode_t um = umask(0);
    umask(um);
    (void)fchmod(x->fd, 0666 & ~um);
  }
  if (x->srv->euid == 0) {
    (void)fchown(x->fd, have ? st.st_uid : x->user.uid,
                 have ? st.st_gid : x->user.gid);
  }
  x->target = real != NULL ? real : NULL;
  if (real != NULL) {
    /* Report the path asked for; rename onto the symlink's target. */
    free(path);
    path = NULL;
  } else {
    x->target = path;
  }
  (void)path;
  return 0;
}

static int file_write(files_x *x, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(x->fd, p, n);
    if (k < 0 && errno == EINTR) {
      continue;
    }
    if (k < 0) {
      int e = errno;
      const char *t = x->target;
      file_abort(x);
      if (e == ENOSPC || e == EDQUOT) {
        fail(x, 507, "not enough disk space available");
      } else {
        fail(x, 500, "error writing file: write %s: %s", t != NULL ? t : "",
             strerror(e));
      }
      return -1;
    }
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* ---- Metadata (X-Metadata-KEY headers, user.e2b.KEY xattrs) ------------- */

static int meta_by_name(const void *a, const void *b) {
  const files_meta *x = a, *y = b;
  int c = strcmp(x->name, y->name);

  return c != 0 ? c : (x->at > y->at) - (x->at < y->at);
}

static int meta_by_at(const void *a, const void *b) {
  const files_meta *x = a, *y = b;

  return (x->at > y->at) - (x->at < y->at);
}

/* Collects the upload's X-Metadata pairs into x->meta: not empty, one per
   key (a repeat is dropped, the first value wins), in the request's
   order; sorted to find the repeats, so a request with many headers
   costs n log n.  Then refuses what no xattr can hold (a name past
   XATTR_NAME_MAX, a value past XATTR_SIZE_MAX) before anything is
   written.  Returns 0 or answered. */
static int meta_check(files_x *x) {
  size_t n = conch_http_header_count(x->h);
  size_t m = 0;

  for (size_t i = 0; i < n; i++) {
    const char *name, *v;
    size_t vl;

    if (conch_http_header_at(x->h, i, &name, &v, &vl) != 0 ||
        strncmp(name, META_HDR, sizeof(META_HDR) - 1) != 0 ||
        name[sizeof(META_HDR) - 1] == '\0') {
      continue;
    }
    if (x->meta == NULL) {
      x->meta = calloc(n - i, sizeof(*x->meta));
      if (x->meta == NULL) {
        fail(x, 500, "out of memory");
        return -1;
      }
    }
    x->meta[m].name = name;
    x->meta[m].v = v;
    x->meta[m].vl = vl;
    x->meta[m].at = i;
    m++;
  }
  if (m > 1) {
    size_t k = 1;

    qsort(x->meta, m, sizeof(*x->meta), meta_by_name);
    for (size_t i = 1; i < m; i++) {
      if (strcmp(x->meta[i].name, x->meta[k - 1].name) != 0) {
        x->meta[k++] = x->meta[i];
      }
    }
    m = k;
    qsort(x->meta, m, sizeof(*x->meta), meta_by_at);
  }
  x->nmeta = m;
  for (size_t i = 0; i < m; i++) {
    const char *key = x->meta[i].name + sizeof(META_HDR) - 1;

    if (sizeof(META_XATTR) - 1 + strlen(key) > 255) {
      fail(x, 400, "invalid metadata: key '%.64s...' is longer than %zu bytes",
           key, 255 - (sizeof(META_XATTR) - 1));
      return -1;
    }
    if (x->meta[i].vl > 65536) {
      fail(x, 400, "invalid metadata: the value of '%.64s' is longer than "
                   "65536 bytes", key);
      return -1;
    }
  }
  return 0;
}

/* Puts the upload's metadata on the file being written.  Returns 0 or
   answered (the temporary file removed). */
static int meta_write(files_x *x) {
  char name[256];

  for (size_t i = 0; i < x->nmeta; i++) {
    int e;

    (void)snprintf(name, sizeof(name), "%s%s", META_XATTR,
                   x->meta[i].name + sizeof(META_HDR) - 1);
    if (fsetxattr(x->fd, name, x->meta[i].v, x->meta[i].vl, 0) == 0) {
      continue;
    }
    e = errno;
    if (e == ENOTSUP || e == EOPNOTSUPP) {
      return 0; /* kept without metadata, as envd; the answer shows none */
    }
    close(x->fd);
    x->fd = -1;
    file_abort(x);
    if (e == ENOSPC || e == EDQUOT) {
      fail(x, 507, "not enough space for file metadata: %s", strerror(e));
    } else {
      fail(x, 500, "error writing file metadata: %s", strerror(e));
    }
    return -1;
  }
  return 0;
}

/* ,"metadata":{...} of |path| as it is on disk, nothing when it has none. */
static void meta_json(files_x *x, const char *path) {
  const conch_mem *mem = x->srv->mem;
  fs_entry fe;

  memset(&fe, 0, sizeof(fe));
  srv_fs_entry_metadata(&fe, path); /* no stat, no owner lookup */
  for (size_t i = 0; i < fe.e.n_metadata; i++) {
    (void)srv_buf_append(&x->resp, mem, i == 0 ? ",\"metadata\":{" : ",",
                         i == 0 ? 13 : 1);
    json_str(&x->resp, mem, fe.e.metadata[i]->key);
    (void)srv_buf_append(&x->resp, mem, ":", 1);
    json_str(&x->resp, mem, fe.e.metadata[i]->value);
  }
  if (fe.e.n_metadata > 0) {
    (void)srv_buf_append(&x->resp, mem, "}", 1);
  }
  srv_fs_entry_clear(&fe);
}

/* The file is whole: renamed into place, listed.  |shown| is the path
   the entry names.  Returns 0 or answered. */
static int file_done(files_x *x, const char *shown) {
  const conch_mem *mem = x->srv->mem;
  char **w;

  if (meta_write(x) != 0) {
    return -1;
  }
  if (close(x->fd) != 0) {
    int e = errno;
    x->fd = -1;
    file_abort(x);
    fail(x, e == ENOSPC ? 507 : 500, e == ENOSPC
                                         ? "not enough disk space available"
                                         : "error writing file: %s",
         strerror(e));
    return -1;
  }
  x->fd = -1;
  if (srv_fs_as_user(x->srv, &x->user) != 0) {
    file_abort(x);
    fail(x, 500, "cannot act as user '%s'", x->user.name);
    return -1;
  }
  if (rename(x->tmp, x->target) != 0) {
    int e = errno;
    file_abort(x);
    srv_fs_as_server(x->srv, &x->user);
    fail(x, create_status(e), "error writing file: rename: %s", strerror(e));
    return -1;
  }
  srv_fs_as_server(x->srv, &x->user);
  srv_fs_unhide(x->srv, x->tmp);
  free(x->tmp);
  x->tmp = NULL;
  w = realloc(x->written, (x->nwritten + 1) * sizeof(*w));
  if (w == NULL || x->nwritten >= MAX_ENTRIES) {
    free(w == NULL ? NULL : NULL);
    if (w != NULL) {
      x->written = w;
    }
    fail(x, 500, "too many files in one upload");
    return -1;
  }
  x->written = w;
  w[x->nwritten] = strdup(shown);
  if (w[x->nwritten] == NULL) {
    fail(x, 500, "out of memory");
    return -1;
  }
  x->nwritten++;
  (void)srv_buf_append(&x->resp, mem, srv_buf_size(&x->resp) > 0 ? "," : "[",
                          1);
  (void)srv_buf_append(&x->resp, mem, "{\"path\":", 8);
  json_str(&x->resp, mem, shown);
  (void)srv_buf_append(&x->resp, mem, ",\"name\":", 8);
  json_str(&x->resp, mem, base_name(shown));
  (void)srv_buf_append(&x->resp, mem, ",\"type\":\"file\"", 14);
  meta_json(x, x->target);
  (void)srv_buf_append(&x->resp, mem, "}", 1);
  free(x->target);
  x->target = NULL;
  return 0;
}

/* ---- Upload bodies ---------------------------------------------------------- */

static int mp_part(void *ud, const char *name, const char *filename,
                   int has_filename) {
  files_x *x = ud;
  char err[1024];
  char *path;

  x->skip = strcmp(name, "file") != 0;
  if (x->skip) {
    return 0;
  }
  if (x->qpath == NULL && !has_filename) {
    fail(x, 400,
         "error getting multipart custom part file name: filename not found "
         "in Content-Disposition header");
    return 1;
  }
  path = resolve_path(x, x->qpath != NULL ? x->qpath : filename, err,
                      sizeof(err));
  if (path == NULL) {
    fail(x, 400, "error resolving path: %s", err);
    return 1;
  }
  for (size_t i = 0; i < x->nwritten; i++) {
    if (strcmp(x->written[i], path) == 0) {
      fail(x, 400,
           "you cannot upload multiple files to the same path '%s' in one "
           "upload request, only the first specified file was uploaded",
           path);
      free(path);
      return 1;
    }
  }
  free(x->shown);
  x->shown = strdup(path);
  if (x->shown == NULL) {
    free(path);
    fail(x, 500, "out of memory");
    return 1;
  }
  return file_open(x, path) != 0 ? 1 : 0;
}

static int mp_data(void *ud, const uint8_t *p, size_t n) {
  files_x *x = ud;
  if (x->skip) {
    return 0;
  }
  return file_write(x, p, n) != 0 ? 1 : 0;
}

static int mp_end(void *ud) {
  files_x *x = ud;
  if (x->skip) {
    return 0;
  }
  return file_done(x, x->shown) != 0 ? 1 : 0;
}

static const srv_mp_cb mp_cbs = {mp_part, mp_data, mp_end};

/* Body bytes after inflation. */
static int up_bytes(files_x *x, const uint8_t *p, size_t n) {
  if (x->kind == UP_RAW) {
    return file_write(x, p, n);
  }
  int rv = srv_mp_feed(&x->mp, p, n, &mp_cbs, x);
  if (rv == SRV_MP_BAD) {
    fail(x, 500, "error reading form: multipart: %s", x->mp.err);
  }
  return rv == SRV_MP_OK ? 0 : -1;
}

static void files_body(conch_http *h, const uint8_t *p, size_t n, void *ud) {
  files_x *x = conch_http_data(h);
  uint8_t out[PIECE];
  (void)ud;

  if (x == NULL || x->answered) {
    return;
  }
  if (!x->gz) {
    (void)up_bytes(x, p, n);
    return;
  }
  x->zin += n;
  x->zs.next_in = (Bytef *)p;
  x->zs.avail_in = (uInt)n;
  while (x->zs.avail_in > 0 && !x->answered) {
    int zr;
    if (x->zdone) {
      /* Go's gzip reader goes on to a next member; trailing bytes that
         are no gzip member are an error. */
      if (inflateReset(&x->zs) != Z_OK) {
        fail(x, 500, "out of memory");
        return;
      }
      x->zdone = 0;
    }
    x->zs.next_out = out;
    x->zs.avail_out = sizeof(out);
    zr = inflate(&x->zs, Z_NO_FLUSH);
    if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR) {
      fail(x, 400, "error decompressing request body: gzip: invalid data");
      return;
    }
    size_t got = sizeof(out) - x->zs.avail_out;
    x->zout += got;
    if (x->zout > x->zin * GZ_RATIO + GZ_SLACK) {
      fail(x, 400,
           "error decompressing request body: inflates past %llu times its "
           "size (a decompression bomb?)",
           (unsigned long long)GZ_RATIO);
      return;
    }
    if (got > 0 && up_bytes(x, out, got) != 0) {
      return;
    }
    if (zr == Z_STREAM_END) {
      x->zdone = 1;
    }
    if (zr == Z_BUF_ERROR && got == 0) {
      break;
    }
  }
  /* Output still pending inside zlib with no input left. */
  while (!x->answered && !x->zdone) {
    x->zs.next_out = out;
    x->zs.avail_out = sizeof(out);
    int zr = inflate(&x->zs, Z_NO_FLUSH);
    size_t got = sizeof(out) - x->zs.avail_out;
    if (got == 0) {
      break;
    }
    x->zout += got;
    if (x->zout > x->zin * GZ_RATIO + GZ_SLACK) {
      fail(x, 400,
           "error decompressing request body: inflates past %llu times its "
           "size (a decompression bomb?)",
           (unsigned long long)GZ_RATIO);
      return;
    }
    if (up_bytes(x, out, got) != 0) {
      return;
    }
    if (zr == Z_STREAM_END) {
      x->zdone = 1;
    }
  }
}

static void files_end(conch_http *h, void *ud) {
  files_x *x = conch_http_data(h);
  const conch_mem *mem;
  (void)ud;

  if (x == NULL || x->answered || !x->post) {
    return;
  }
  mem = x->srv->mem;
  if (x->gz && !x->zdone) {
    file_abort(x);
    fail(x, 400, "error decompressing request body: unexpected EOF");
    return;
  }
  if (x->kind == UP_RAW) {
    if (file_done(x, x->shown) != 0) {
      return;
    }
  } else if (srv_mp_finish(&x->mp) != 0) {
    file_abort(x);
    fail(x, 500, "error reading form: multipart: %s", x->mp.err);
    return;
  }
  if (srv_buf_size(&x->resp) == 0) {
    (void)srv_buf_append(&x->resp, mem, "[", 1);
  }
  (void)srv_buf_append(&x->resp, mem, "]\n", 2);
  answer(x, 200, &x->resp, "application/json");
}

/* ---- Download ----------------------------------------------------------------- */

static const char *type_by_ext(const char *path) {
  static const char *const t[] = {
      ".css", "text/css; charset=utf-8", ".gif", "image/gif",
      ".htm", "text/html; charset=utf-8", ".html", "text/html; charset=utf-8",
      ".jpeg", "image/jpeg", ".jpg", "image/jpeg",
      ".js", "text/javascript; charset=utf-8", ".json", "application/json",
      ".mjs", "text/javascript; charset=utf-8", ".pdf", "application/pdf",
      ".png", "image/png", ".svg", "image/svg+xml", ".wasm",
      "application/wasm", ".webp", "image/webp", ".xml",
      "text/xml; charset=utf-8", ".txt", "text/plain; charset=utf-8",
      ".md", "text/markdown; charset=utf-8", ".csv", "text/csv; charset=utf-8",
      ".gz", "application/gzip", ".zip", "application/zip", ".tar",
      "application/x-tar", ".py", "text/x-python; charset=utf-8", NULL};
  const char *b = base_name(path);
  const char *dot = strrchr(b, '.');
  if (dot == NULL) {
    return NULL;
  }
  for (size_t i = 0; t[i] != NULL; i += 2) {
    if (strcasecmp(dot, t[i]) == 0) {
      return t[i + 1];
    }
  }
  return NULL;
}

/* Go's DetectContentType, in short: a few signatures, then text or not. */
static const char *sniff(const uint8_t *p, size_t n) {
  if (n >= 5 && memcmp(p, "%PDF-", 5) == 0) {
    return "application/pdf";
  }
  if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) {
    return "image/png";
  }
  if (n >= 3 && memcmp(p, "\xff\xd8\xff", 3) == 0) {
    return "image/jpeg";
  }
  if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) {
    return "image/gif";
  }
  if (n >= 4 && memcmp(p, "PK\x03\x04", 4) == 0) {
    return "application/zip";
  }
  if (n >= 3 && memcmp(p, "\x1f\x8b\x08", 3) == 0) {
    return "application/x-gzip";
  }
  for (size_t i = 0; i < n; i++) {
    uint8_t c = p[i];
    if (c <= 0x08 || c == 0x0b || (c >= 0x0e && c <= 0x1a) ||
        (c >= 0x1c && c <= 0x1f)) {
      return "application/octet-stream";
    }
  }
  return "text/plain; charset=utf-8";
}

/* Go's mime.FormatMediaType("inline", {"filename": name}). */
static void disposition(const char *name, char *out, size_t cap) {
  static const char tspecials[] = "()<>@,;:\\\"/[]?= ";
  int token = name[0] != '\0', ascii = 1;
  size_t o;

  for (const char *p = name; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (c >= 0x80) {
      ascii = 0;
    }
    if (c <= ' ' || c >= 0x7f || strchr(tspecials, c) != NULL) {
      token = 0;
    }
  }
  if (token) {
    snprintf(out, cap, "inline; filename=%s", name);
    return;
  }
  if (ascii) {
    o = (size_t)snprintf(out, cap, "inline; filename=\"");
    for (const char *p = name; *p != '\0' && o + 3 < cap; p++) {
      if (*p == '"' || *p == '\\') {
        out[o++] = '\\';
      }
      out[o++] = *p;
    }
    if (o + 2 <= cap) {
      out[o++] = '"';
    }
    out[o < cap ? o : cap - 1] = '\0';
    return;
  }
  o = (size_t)snprintf(out, cap, "inline; filename*=utf-8''");
  for (const unsigned char *p = (const unsigned char *)name;
       *p != '\0' && o + 4 < cap; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
        (*p >= '0' && *p <= '9') || strchr("!#$&+-.^_`|~", *p) != NULL) {
      out[o++] = (char)*p;
    } else {
      o += (size_t)snprintf(out + o, cap - o, "%%%02X", *p);
    }
  }
  out[o < cap ? o : cap - 1] = '\0';
}

static void down_pump(conch_http *h, void *ud) {
  files_x *x = conch_http_data(h);
  (void)ud;

  if (x == NULL || x->ended || x->dfd < 0) {
    return;
  }
  while (x->left > 0 || x->pend > 0) {
    if (x->pend == 0) {
      size_t want = x->left < PIECE ? (size_t)x->left : PIECE;
      ssize_t k = read(x->dfd, x->piece, want);
      if (k < 0 && errno == EINTR) {
        continue;
      }
      if (k <= 0) {
        break; /* shrank or failed: the stream is cut (the length was sent) */
      }
      x->pend = (size_t)k;
      x->left -= (uint64_t)k;
    }
    int rv = conch_http_write(h, x->piece, x->pend);
    if (rv == CONCH_ERR_AGAIN) {
      return; /* on_send_ready: the same piece again */
    }
    if (rv != 0) {
      break;
    }
    x->pend = 0;
  }
  x->ended = 1;
  (void)conch_http_end(h);
}

static void download(files_x *x) {
  char err[1024];
  char *path = resolve_path(x, x->qpath != NULL ? x->qpath : "", err,
                            sizeof(err));
  struct stat st;
  char len[32], lm[64], disp[1536];
  const char *ctype;
  uint8_t head[512];
  ssize_t hn;
  struct tm tm;

  if (path == NULL) {
    fail(x, 400, "error expanding and resolving path '%s': %s",
         x->qpath != NULL ? x->qpath : "", err);
    return;
  }
  /* The file is looked up and opened as the request's user (a root
     server reading for "nobody" must not hand out root's 0600 files), as
     the Filesystem RPCs are; what is read from the descriptor after needs
     no identity. */
  if (srv_fs_as_user(x->srv, &x->user) != 0) {
    fail(x, 500, "cannot act as user '%s'", x->user.name);
    free(path);
    return;
  }
  if (stat(path, &st) != 0) {
    int e = errno;
    srv_fs_as_server(x->srv, &x->user);
    if (e == ENOENT || e == ENOTDIR) {
      fail(x, 404, "path '%s' does not exist", path);
    } else {
      fail(x, 500, "error checking if path exists '%s': %s", path,
           strerror(e));
    }
    free(path);
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    srv_fs_as_server(x->srv, &x->user);
    fail(x, 400, "path '%s' is a directory", path);
    free(path);
    return;
  }
  x->dfd = open(path, O_RDONLY | O_CLOEXEC);
  {
    int e = x->dfd < 0 || fstat(x->dfd, &st) != 0 ? errno : 0;
    srv_fs_as_server(x->srv, &x->user);
    if (e != 0) {
      fail(x, 500, "error opening file '%s': %s", path, strerror(e));
      free(path);
      return;
    }
  }
  x->piece = malloc(PIECE);
  if (x->piece == NULL) {
    fail(x, 500, "out of memory");
    free(path);
    return;
  }
  ctype = type_by_ext(x->qpath != NULL ? x->qpath : path);
  if (ctype == NULL) {
    hn = pread(x->dfd, head, sizeof(head), 0);
    ctype = sniff(head, hn > 0 ? (size_t)hn : 0);
  }
  x->left = (uint64_t)st.st_size;
  snprintf(len, sizeof(len), "%llu", (unsigned long long)x->left);
  gmtime_r(&st.st_mtime, &tm);
  strftime(lm, sizeof(lm), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  disposition(base_name(x->qpath != NULL && x->qpath[0] != '\0' ? x->qpath
                                                                 : path),
              disp, sizeof(disp));
  free(path);
  const char *hdrs[] = {"accept-ranges", "bytes", "content-disposition", disp,
                        "content-length", len, "content-type", ctype,
                        "last-modified", lm, "vary", "Accept-Encoding",
                        NULL};
  x->answered = 1;
  if (conch_http_respond(x->h, 200, hdrs, 1) != 0 ||
      strcmp(conch_http_method(x->h), "HEAD") == 0) {
    x->ended = 1;
    (void)conch_http_end(x->h);
    return;
  }
  down_pump(x->h, NULL);
}

/* ---- The exchange ------------------------------------------------------------ */

static void files_free(files_x *x) {
  if (x == NULL) {
    return;
  }
  file_abort(x);
  if (x->zinit) {
    inflateEnd(&x->zs);
  }
  if (x->dfd >= 0) {
    close(x->dfd);
  }
  free(x->piece);
  for (size_t i = 0; i < x->nwritten; i++) {
    free(x->written[i]);
  }
  free(x->written);
  free(x->meta);
  srv_buf_free(&x->resp, x->srv->mem);
  free(x->qpath);
  free(x->shown);
  srv_user_clear(&x->user);
  free(x);
}

/* At the end of each hook: an exchange we ended is freed (no hook of it
   runs again). */
static void settle(conch_http *h) {
  files_x *x = conch_http_data(h);
  if (x != NULL && x->ended) {
    conch_http_set_data(h, NULL);
    files_free(x);
  }
}

static void files_cancel(conch_http *h, void *ud) {
  (void)ud;
  files_free(conch_http_data(h));
  conch_http_set_data(h, NULL);
}

static void request(conch_http *h, void *ud) {
  srv_server *srv = ud;
  const char *q = conch_http_query(h);
  const char *method = conch_http_method(h);
  files_x *x = calloc(1, sizeof(*x));
  char *uname = NULL;
  int rv;

  if (x == NULL) {
    (void)conch_http_end(h); /* 500 */
    return;
  }
  x->srv = srv;
  x->h = h;
  x->fd = -1;
  x->dfd = -1;
  conch_http_set_data(h, x);
  x->post = strcmp(method, "POST") == 0;
  if (!x->post && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    static const char *const allow[] = {"allow", "GET, POST",
                                        "content-type",
                                        "text/plain; charset=utf-8", NULL};
    x->answered = 1;
    x->ended = 1;
    (void)conch_http_respond(h, 405, allow, 0);
    (void)conch_http_end(h);
    return;
  }
  rv = query_get(q, "path", &x->qpath);
  if (rv >= 0) {
    rv = query_get(q, "username", &uname);
  }
  if (rv < 0) {
    fail(x, 400, "invalid query: a bad escape, or a NUL");
    free(uname);
    return;
  }
  if (check_access(x, q, x->qpath != NULL ? x->qpath : "",
                   uname != NULL ? uname : "") != 0 ||
      resolve_user(x, uname) != 0) {
    free(uname);
    return;
  }
  free(uname);
  if (!x->post) {
    download(x);
    return;
  }
  /* Upload: the encoding, then the content type. */
  const char *enc = conch_http_header(h, "content-encoding");
  if (enc != NULL && enc[0] != '\0' && strcasecmp(enc, "identity") != 0) {
    if (strncasecmp(enc, "gzip", 4) != 0 ||
        (enc[4] != '\0' && enc[4] != ';' && enc[4] != ' ')) {
      fail(x, 400,
           "error decompressing request body: unsupported Content-Encoding: "
           "%s, supported: [gzip]",
           enc);
      return;
    }
    if (inflateInit2(&x->zs, 16 + MAX_WBITS) != Z_OK) {
      fail(x, 500, "out of memory");
      return;
    }
    x->zinit = 1;
    x->gz = 1;
  }
  if (meta_check(x) != 0) {
    return;
  }
  const char *ct = conch_http_header(h, "content-type");
  char mt[64];
  size_t ml = 0;
  if (ct != NULL) {
    while (ct[ml] != '\0' && ct[ml] != ';' && ct[ml] != ' ' &&
           ml + 1 < sizeof(mt)) {
      mt[ml] = ct[ml];
      ml++;
    }
  }
  mt[ml] = '\0';
  if (strcasecmp(mt, "application/octet-stream") == 0) {
    char err[1024];
    char *path;
    x->kind = UP_RAW;
    if (x->qpath == NULL) {
      fail(x, 400, "path query parameter is required for raw body upload");
      return;
    }
    path = resolve_path(x, x->qpath, err, sizeof(err));
    if (path == NULL) {
      fail(x, 400, "error resolving path: %s", err);
      return;
    }
    x->shown = strdup(path);
    if (x->shown == NULL) {
      free(path);
      fail(x, 500, "out of memory");
      return;
    }
    (void)file_open(x, path);
    return;
  }
  if (strncasecmp(mt, "multipart/", 10) == 0) {
    x->kind = UP_MULTIPART;
    if (srv_mp_init(&x->mp, ct) != 0) {
      fail(x, 500, "error parsing multipart form: %s", x->mp.err);
    }
    return;
  }
  fail(x, 400,
       "unsupported content type: %s, expected multipart/form-data or "
       "application/octet-stream",
       ct != NULL ? ct : "");
}

static void files_request(conch_http *h, void *ud) {
  request(h, ud);
  settle(h);
}

static void files_body_hook(conch_http *h, const uint8_t *p, size_t n,
                            void *ud) {
  files_body(h, p, n, ud);
  settle(h);
}

static void files_end_hook(conch_http *h, void *ud) {
  files_end(h, ud);
  settle(h);
}

static void files_ready(conch_http *h, void *ud) {
  down_pump(h, ud);
  settle(h);
}

int srv_files_register(srv_server *srv) {
  const conch_http_handler hd = {files_request, files_body_hook,
                                 files_end_hook, files_ready, files_cancel};
  return conch_server_add_http(srv->core, "/files", &hd, srv);
}
