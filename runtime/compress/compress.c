/* The compression registry: names, accepted lists, and dispatch to the
   built-in codecs or to those registered by the caller.  br, zstd and
   snappy are each left out of a build without their library
   (CONCH_WITH_BROTLI, _ZSTD, _SNAPPY): their ids and names are then not
   valid here, so nothing sends, advertises or decodes them, and a caller
   who names one hears CONCH_ERR_UNSUPPORTED. */
#include "compress.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

#include <conch/status.h>

#include "mem_int.h"

static const char *const builtin_names[CONCH__COMP_NBUILTIN] = {
    "identity", "gzip", "br", "zstd", "deflate", "snappy"};

/* Which built-in ids this build has (CONCH_WITH_BROTLI, _ZSTD, _SNAPPY). */
static const unsigned char builtin_built[CONCH__COMP_NBUILTIN] = {
    1, 1, CONCH_WITH_BROTLI, CONCH_WITH_ZSTD, 1, CONCH_WITH_SNAPPY};

/* Decoded output grows by what is out so far (doubling), at least this
   much per step. */
#define COMP_STEP_MIN ((size_t)16 << 10)

void conch__comp_opts_defaults(conch_comp_opts *o) {
  size_t i;

  memset(o, 0, sizeof(*o));
  o->send = CONCH_COMPRESSION_IDENTITY;
  o->accept[0] = CONCH_COMPRESSION_GZIP;
  o->naccept = 1;
  for (i = 0; i < CONCH__COMP_MAX; i++) {
    o->level[i] = -1;
  }
}

int conch__comp_valid(const conch_comp_opts *o, int id) {
  return id >= 0 && (id < CONCH__COMP_NBUILTIN
                         ? builtin_built[id]
                         : (size_t)id < CONCH__COMP_NBUILTIN + o->ncustom);
}

int conch__comp_check(const conch_comp_opts *o, int id) {
  if (conch__comp_valid(o, id)) {
    return 0;
  }
  return id >= 0 && id < CONCH__COMP_NBUILTIN ? CONCH_ERR_UNSUPPORTED
                                              : CONCH_ERR_INVALID;
}

const char *conch__comp_name(const conch_comp_opts *o, int id) {
  if (id < CONCH__COMP_NBUILTIN) {
    return builtin_names[id];
  }
  return o->custom[id - CONCH__COMP_NBUILTIN].name;
}

static int name_is(const char *n, const char *name, size_t len) {
  return strlen(n) == len && strncasecmp(n, name, len) == 0;
}

int conch__comp_lookup(const conch_comp_opts *o, const char *name, size_t len) {
  int id;

  /* A built-in this build lacks is not there: its name is free for a
     registered compression of the caller's. */
  for (id = 0; id < CONCH__COMP_NBUILTIN + (int)o->ncustom; id++) {
    if (conch__comp_valid(o, id) &&
        name_is(conch__comp_name(o, id), name, len)) {
      return id;
    }
  }
  return -1;
}

int conch__comp_find(const conch_comp_opts *o, const char *name, size_t len,
                     int *id) {
  int i = conch__comp_lookup(o, name, len);

  if (i >= 0) {
    *id = i;
    return 0;
  }
  for (i = 0; i < CONCH__COMP_NBUILTIN; i++) {
    if (name_is(builtin_names[i], name, len)) {
      return CONCH_ERR_UNSUPPORTED; /* known, not built */
    }
  }
  return CONCH_ERR_INVALID;
}

static int token_char(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') ||
         (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

int conch__comp_add_custom(conch_comp_opts *o, const conch_compressor *comp,
                           int *id) {
  conch_comp_custom *cc;
  size_t len, i;

  if (comp == NULL ||
      comp->struct_size < offsetof(conch_compressor, user_data) +
                              sizeof(comp->user_data) ||
      comp->name == NULL || comp->compress == NULL ||
      comp->decompress == NULL) {
    return CONCH_ERR_INVALID;
  }
  len = strlen(comp->name);
  if (len == 0 || len > CONCH_COMPRESSION_NAME_MAX ||
      conch__comp_lookup(o, comp->name, len) >= 0) {
    return CONCH_ERR_INVALID;
  }
  for (i = 0; i < len; i++) {
    if (!token_char((unsigned char)comp->name[i])) {
      return CONCH_ERR_INVALID;
    }
  }
  if (o->ncustom == CONCH_COMPRESSION_CUSTOM_MAX) {
    return CONCH_ERR_LIMIT;
  }
  cc = &o->custom[o->ncustom];
  memcpy(cc->name, comp->name, len + 1);
  cc->compress = comp->compress;
  cc->decompress = comp->decompress;
  cc->user_data = comp->user_data;
  if (id != NULL) {
    *id = CONCH__COMP_NBUILTIN + (int)o->ncustom;
  }
  o->ncustom++;
  return 0;
}

static int is_blank(char ch) { return ch == ' ' || ch == '\t'; }

int conch__comp_set_accept(conch_comp_opts *o, const char *names,
                           int strict) {
  uint8_t ids[CONCH__COMP_MAX];
  size_t n = 0;
  const char *p = names;

  while (p != NULL && *p != '\0') {
    size_t len;
    int id;
    while (is_blank(*p)) {
      p++;
    }
    len = strcspn(p, ",");
    while (len > 0 && is_blank(p[len - 1])) {
      len--;
    }
    if (len > 0 || strict) {
      int rv = conch__comp_find(o, p, len, &id);
      if (rv != 0) {
        return rv;
      }
      if (id != CONCH_COMPRESSION_IDENTITY && memchr(ids, id, n) == NULL) {
        ids[n++] = (uint8_t)id;
      }
    }
    p += strcspn(p, ",");
    if (*p == ',') {
      p++;
    }
  }
  memcpy(o->accept, ids, n);
  o->naccept = n;
  return 0;
}

static size_t put_name(char *out, size_t at, const char *n) {
  size_t len = strlen(n);

  if (at > 0) {
    out[at++] = ',';
  }
  memcpy(out + at, n, len);
  return at + len;
}

void conch__comp_accept_builtins(conch_comp_opts *o) {
  static const uint8_t order[] = {
      CONCH_COMPRESSION_GZIP, CONCH_COMPRESSION_BR, CONCH_COMPRESSION_ZSTD,
      CONCH_COMPRESSION_DEFLATE, CONCH_COMPRESSION_SNAPPY};
  size_t i;

  o->naccept = 0;
  for (i = 0; i < sizeof(order); i++) {
    if (builtin_built[order[i]]) {
      o->accept[o->naccept++] = order[i];
    }
  }
}

size_t conch__comp_accept_value(const conch_comp_opts *o, int send,
                                char out[CONCH__COMP_ACCEPT_MAX]) {
  size_t at = 0;
  size_t i;

  if (send != CONCH_COMPRESSION_IDENTITY &&
      memchr(o->accept, send, o->naccept) == NULL) {
    at = put_name(out, at, conch__comp_name(o, send));
  }
  for (i = 0; i < o->naccept; i++) {
    at = put_name(out, at, conch__comp_name(o, o->accept[i]));
  }
  return at;
}

void conch__comps_init(conch_comps *cs, const conch_mem *mem) {
  memset(cs, 0, sizeof(*cs));
  cs->mem = mem;
  conch__gzip_init(&cs->gz, mem);
  conch__gzip_init_zlib(&cs->zl, mem);
}

void conch__comps_clear(conch_comps *cs) {
  conch__gzip_clear(&cs->gz);
  conch__gzip_clear(&cs->zl);
#if CONCH_WITH_ZSTD
  conch__zstd_free(cs->zs, cs->mem);
#endif
#if CONCH_WITH_SNAPPY
  conch__snappy_free(cs->sn, cs->mem);
#endif
  cs->zs = NULL;
  cs->sn = NULL;
}

int conch__comp_room(conch_buf *out, const conch_mem *mem, size_t done,
                     size_t max_out, size_t cap, size_t *room) {
  size_t step = done < COMP_STEP_MIN ? COMP_STEP_MIN : done;
  size_t allowed = SIZE_MAX;
  int rv;

  if (max_out != 0) {
    allowed = max_out - done; /* done <= max_out here */
    if (allowed < SIZE_MAX) {
      allowed++;
    }
    if (step > allowed) {
      step = allowed;
    }
  }
  if (out->cap == out->len) {
    rv = conch__buf_reserve(out, mem, step);
    if (rv != 0) {
      return rv;
    }
  }
  *room = out->cap - out->len;
  if (*room > allowed) {
    *room = allowed;
  }
  if (*room > cap) {
    *room = cap;
  }
  return 0;
}

/* ---- Registered compressions -------------------------------------------- */

struct conch_compress_out {
  conch_buf *buf;
  const conch_mem *mem;
  size_t base;    /* size of |buf| before this run */
  size_t max_out; /* 0: none */
  int err;        /* first failure reported to the codec */
};

int conch_compress_out_write(conch_compress_out *out, const void *data,
                             size_t len) {
  size_t done;
  int rv;

  if (out == NULL || (data == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (out->err != 0) {
    return out->err;
  }
  done = conch__buf_size(out->buf) - out->base;
  if (out->max_out != 0 && len > out->max_out - done) {
    out->err = CONCH_ERR_LIMIT;
    return out->err;
  }
  rv = conch__buf_append(out->buf, out->mem, data, len);
  if (rv != 0) {
    out->err = rv;
  }
  return rv;
}

static int custom_result(int rv, const conch_compress_out *sink) {
  if (sink->err != 0) {
    return sink->err;
  }
  if (rv == 0 || rv == CONCH_ERR_NOMEM || rv == CONCH_ERR_LIMIT) {
    return rv;
  }
  return CONCH_ERR_COMPRESSION;
}

static int custom_run(const conch_comp_custom *cc, const conch_mem *mem,
                      int level, int decode, const uint8_t *in, size_t n,
                      size_t max_out, conch_buf *out) {
  conch_compress_out sink;
  int rv;

  sink.buf = out;
  sink.mem = mem;
  sink.base = conch__buf_size(out);
  sink.max_out = decode ? max_out : 0;
  sink.err = 0;
  rv = decode ? cc->decompress(cc->user_data, in, n, &sink)
              : cc->compress(cc->user_data, level, in, n, &sink);
  rv = custom_result(rv, &sink);
  if (rv == CONCH_ERR_LIMIT && !decode) {
    rv = CONCH_ERR_COMPRESSION; /* no limit was set: a bad return */
  }
  return rv;
}

/* ---- Dispatch ----------------------------------------------------------- */

int conch__comp_compress(conch_comps *cs, const conch_comp_opts *o, int id,
                         const uint8_t *in, size_t n, conch_buf *out) {
  size_t keep = conch__buf_size(out);
  int level = o->level[id];
  int rv;

  switch (id) {
  case CONCH_COMPRESSION_GZIP:
    return conch__gzip_deflate(&cs->gz, level, in, n, out);
  case CONCH_COMPRESSION_DEFLATE:
    return conch__gzip_deflate(&cs->zl, level, in, n, out);
#if CONCH_WITH_BROTLI
  case CONCH_COMPRESSION_BR:
    rv = conch__br_compress(cs->mem, level, in, n, out);
    break;
#endif
#if CONCH_WITH_ZSTD
  case CONCH_COMPRESSION_ZSTD:
    rv = conch__zstd_compress(&cs->zs, cs->mem, level, in, n, out);
    break;
#endif
#if CONCH_WITH_SNAPPY
  case CONCH_COMPRESSION_SNAPPY:
    rv = conch__snappy_compress(&cs->sn, cs->mem, in, n, out);
    break;
#endif
  default:
    if (!conch__comp_valid(o, id) || id == CONCH_COMPRESSION_IDENTITY) {
      return CONCH_ERR_INVALID;
    }
    rv = custom_run(&o->custom[id - CONCH__COMP_NBUILTIN], cs->mem, level, 0,
                    in, n, 0, out);
    break;
  }
  if (rv != 0) {
    out->len = out->off + keep;
  }
  return rv;
}

int conch__comp_decompress(conch_comps *cs, const conch_comp_opts *o, int id,
                           const uint8_t *in, size_t n, size_t max_out,
                           conch_buf *out) {
  size_t keep = conch__buf_size(out);
  int rv;

  if (n == 0) {
    return CONCH_ERR_COMPRESSION; /* callers never decode empty content */
  }
  switch (id) {
  case CONCH_COMPRESSION_GZIP:
    return conch__gzip_inflate(&cs->gz, in, n, max_out, out);
  case CONCH_COMPRESSION_DEFLATE:
    return conch__gzip_inflate(&cs->zl, in, n, max_out, out);
#if CONCH_WITH_BROTLI
  case CONCH_COMPRESSION_BR:
    rv = conch__br_decompress(cs->mem, in, n, max_out, out);
    break;
#endif
#if CONCH_WITH_ZSTD
  case CONCH_COMPRESSION_ZSTD:
    rv = conch__zstd_decompress(&cs->zs, cs->mem, in, n, max_out, out);
    break;
#endif
#if CONCH_WITH_SNAPPY
  case CONCH_COMPRESSION_SNAPPY:
    rv = conch__snappy_decompress(&cs->sn, cs->mem, in, n, max_out, out);
    break;
#endif
  default:
    if (!conch__comp_valid(o, id) || id == CONCH_COMPRESSION_IDENTITY) {
      return CONCH_ERR_INVALID;
    }
    rv = custom_run(&o->custom[id - CONCH__COMP_NBUILTIN], cs->mem, -1, 1, in,
                    n, max_out, out);
    break;
  }
  if (rv != 0) {
    out->len = out->off + keep;
  }
  return rv;
}
