/* A pool of FileDescriptorProtos (conch/descriptor.h): files by name,
   symbols by full name, extensions by extendee and number.  The bytes are
   read with the codec's small wire reader (pbwire.h, defined here; the
   runtime has no descriptor.proto types): only names, imports and
   extension numbers are taken from them. */
#include <string.h>

#include <conch/descriptor.h>
#include <conch/status.h>

#include "mem_int.h"
#include "pbwire.h"

#define MAX_DEPTH 64

typedef struct sym_entry {
  char *name; /* NULL: free slot */
  const conch_file_descriptor *fd;
  conch_symbol_kind kind;
} sym_entry;

typedef struct ext_entry {
  char *extendee;
  int32_t number;
  const conch_file_descriptor *fd;
} ext_entry;

struct conch_descpool {
  conch_mem mem;
  const conch_file_descriptor **files;
  size_t nfiles, files_cap;
  sym_entry *syms; /* open addressing; cap a power of two */
  size_t nsyms, syms_cap;
  ext_entry *exts;
  size_t nexts, exts_cap;
};

/* ---- The wire (pbwire.h) ------------------------------------------------ */

static int rd_varint(rd *r, uint64_t *out) {
  uint64_t v = 0;
  int shift;
  for (shift = 0; shift < 64; shift += 7) {
    uint8_t c;
    if (r->p == r->end) {
      return -1;
    }
    c = *r->p++;
    v |= (uint64_t)(c & 0x7f) << shift;
    if ((c & 0x80) == 0) {
      *out = v;
      return 0;
    }
  }
  return -1;
}

int conch__pbw_next(rd *r, fld *f) {
  uint64_t key;
  if (r->p == r->end) {
    return 0;
  }
  if (rd_varint(r, &key) != 0 || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
    return -1;
  }
  f->num = (uint32_t)(key >> 3);
  f->wt = (int)(key & 7);
  f->data = NULL;
  f->len = 0;
  f->v = 0;
  switch (f->wt) {
  case 0:
    return rd_varint(r, &f->v) == 0 ? 1 : -1;
  case 1:
    if ((size_t)(r->end - r->p) < 8) {
      return -1;
    }
    r->p += 8;
    return 1;
  case 2:
    if (rd_varint(r, &f->v) != 0 || f->v > (uint64_t)(r->end - r->p)) {
      return -1;
    }
    f->data = r->p;
    f->len = (size_t)f->v;
    r->p += f->len;
    return 1;
  case 5:
    if ((size_t)(r->end - r->p) < 4) {
      return -1;
    }
    r->p += 4;
    return 1;
  default:
    return -1; /* groups: descriptor.proto has none */
  }
}

/* ---- What one file declares, gathered before it is committed ---------- */

typedef struct pending_sym {
  char *name;
  conch_symbol_kind kind;
} pending_sym;

typedef struct gather {
  conch_descpool *pool;
  pending_sym *syms;
  size_t nsyms, cap;
  ext_entry *exts;
  size_t nexts, ecap;
  int nomem;
} gather;

/* "scope.name" (or "name" in the root scope), NUL-terminated. */
static char *join(gather *g, const char *scope, const uint8_t *name,
                  size_t len) {
  size_t sl = strlen(scope);
  char *s = conch__malloc(&g->pool->mem, sl + 1 + len + 1);
  if (s == NULL) {
    g->nomem = 1;
    return NULL;
  }
  memcpy(s, scope, sl);
  if (sl > 0) {
    s[sl++] = '.';
  }
  memcpy(s + sl, name, len);
  s[sl + len] = '\0';
  return s;
}

static int add_pending(gather *g, char *name, conch_symbol_kind kind) {
  if (name == NULL) {
    return -1;
  }
  if (g->nsyms == g->cap) {
    size_t cap = g->cap > 0 ? 2 * g->cap : 32;
    pending_sym *v = conch__realloc(&g->pool->mem, g->syms, cap * sizeof(*v));
    if (v == NULL) {
      conch__free(&g->pool->mem, name);
      g->nomem = 1;
      return -1;
    }
    g->syms = v;
    g->cap = cap;
  }
  g->syms[g->nsyms].name = name;
  g->syms[g->nsyms].kind = kind;
  g->nsyms++;
  return 0;
}

/* The name (field 1) of a message's bytes; NULL/0 when absent. */
static int name_of(const uint8_t *p, size_t len, const uint8_t **name,
                   size_t *nlen) {
  rd r = {p, p + len};
  fld f;
  int rv;
  *name = NULL;
  *nlen = 0;
  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    if (f.num == 1 && f.wt == 2) {
      *name = f.data;
      *nlen = f.len;
    }
  }
  if (rv < 0 || *name == NULL || *nlen == 0 ||
      memchr(*name, '\0', *nlen) != NULL) {
    return -1;
  }
  return 0;
}

/* A FieldDescriptorProto: a field of |scope|, or an extension declared in
   it (|ext|). */
static int gather_field(gather *g, const char *scope, const uint8_t *p,
                        size_t len, int ext) {
  rd r = {p, p + len};
  fld f;
  const uint8_t *name = NULL, *extendee = NULL;
  size_t nlen = 0, elen = 0;
  int32_t number = 0;
  int rv;

  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    if (f.num == 1 && f.wt == 2) {
      name = f.data;
      nlen = f.len;
    } else if (f.num == 2 && f.wt == 2) {
      extendee = f.data;
      elen = f.len;
    } else if (f.num == 3 && f.wt == 0) {
      number = (int32_t)(uint32_t)f.v;
    }
  }
  if (rv < 0 || name == NULL || nlen == 0 || memchr(name, '\0', nlen) != NULL) {
    return -1;
  }
  if (add_pending(g, join(g, scope, name, nlen),
                  ext ? CONCH_SYMBOL_EXTENSION : CONCH_SYMBOL_FIELD) != 0) {
    return -1;
  }
  if (ext) {
    ext_entry *e;
    if (extendee == NULL || elen == 0 || memchr(extendee, '\0', elen) != NULL) {
      return -1;
    }
    if (extendee[0] == '.') { /* protoc writes them fully qualified */
      extendee++;
      elen--;
    }
    if (g->nexts == g->ecap) {
      size_t cap = g->ecap > 0 ? 2 * g->ecap : 8;
      ext_entry *v = conch__realloc(&g->pool->mem, g->exts, cap * sizeof(*v));
      if (v == NULL) {
        g->nomem = 1;
        return -1;
      }
      g->exts = v;
      g->ecap = cap;
    }
    e = &g->exts[g->nexts];
    e->extendee = conch__strndup(&g->pool->mem, (const char *)extendee, elen);
    if (e->extendee == NULL) {
      g->nomem = 1;
      return -1;
    }
    e->number = number;
    e->fd = NULL;
    g->nexts++;
  }
  return 0;
}

static int gather_enum(gather *g, const char *scope, const uint8_t *p,
                       size_t len) {
  rd r = {p, p + len};
  fld f;
  const uint8_t *name;
  size_t nlen;
  char *full;
  int rv;

  if (name_of(p, len, &name, &nlen) != 0) {
    return -1;
  }
  full = join(g, scope, name, nlen);
  if (add_pending(g, full, CONCH_SYMBOL_ENUM) != 0) {
    return -1;
  }
  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    if (f.num == 2 && f.wt == 2) {
      const uint8_t *vn;
      size_t vl;
      if (name_of(f.data, f.len, &vn, &vl) != 0 ||
          add_pending(g, join(g, scope, vn, vl), CONCH_SYMBOL_ENUM_VALUE) !=
              0) {
        return -1;
      }
    }
  }
  return rv < 0 ? -1 : 0;
}

static int gather_message(gather *g, const char *scope, const uint8_t *p,
                          size_t len, int depth) {
  rd r = {p, p + len};
  fld f;
  const uint8_t *name;
  size_t nlen;
  char *full;
  int rv;

  if (depth > MAX_DEPTH || name_of(p, len, &name, &nlen) != 0) {
    return -1;
  }
  full = join(g, scope, name, nlen);
  if (add_pending(g, full, CONCH_SYMBOL_MESSAGE) != 0) {
    return -1;
  }
  /* |full| is owned by the pending list now, which outlives this walk. */
  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    if (f.wt != 2) {
      continue;
    }
    if (f.num == 2 || f.num == 6) {
      rv = gather_field(g, full, f.data, f.len, f.num == 6);
    } else if (f.num == 3) {
      rv = gather_message(g, full, f.data, f.len, depth + 1);
    } else if (f.num == 4) {
      rv = gather_enum(g, full, f.data, f.len);
    } else {
      rv = 0;
    }
    if (rv != 0) {
      return -1;
    }
  }
  return rv < 0 ? -1 : 0;
}

static int gather_service(gather *g, const char *scope, const uint8_t *p,
                          size_t len) {
  rd r = {p, p + len};
  fld f;
  const uint8_t *name;
  size_t nlen;
  char *full;
  int rv;

  if (name_of(p, len, &name, &nlen) != 0) {
    return -1;
  }
  full = join(g, scope, name, nlen);
  if (add_pending(g, full, CONCH_SYMBOL_SERVICE) != 0) {
    return -1;
  }
  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    if (f.num == 2 && f.wt == 2) {
      const uint8_t *mn;
      size_t ml;
      if (name_of(f.data, f.len, &mn, &ml) != 0 ||
          add_pending(g, join(g, full, mn, ml), CONCH_SYMBOL_METHOD) != 0) {
        return -1;
      }
    }
  }
  return rv < 0 ? -1 : 0;
}

/* Reads the whole file into |g|.  0 or -1. */
static int gather_file(gather *g, const conch_file_descriptor *fd) {
  rd r = {fd->data, fd->data + fd->len};
  fld f;
  char *pkg = NULL;
  int rv;

  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    if (f.num == 2 && f.wt == 2) {
      conch__free(&g->pool->mem, pkg);
      pkg = conch__strndup(&g->pool->mem, (const char *)f.data, f.len);
      if (pkg == NULL) {
        g->nomem = 1;
        return -1;
      }
    }
  }
  if (rv < 0) {
    conch__free(&g->pool->mem, pkg);
    return -1;
  }
  r.p = fd->data;
  while ((rv = conch__pbw_next(&r, &f)) > 0) {
    const char *scope = pkg != NULL ? pkg : "";
    if (f.wt != 2) {
      continue;
    }
    if (f.num == 4) {
      rv = gather_message(g, scope, f.data, f.len, 0);
    } else if (f.num == 5) {
      rv = gather_enum(g, scope, f.data, f.len);
    } else if (f.num == 6) {
      rv = gather_service(g, scope, f.data, f.len);
    } else if (f.num == 7) {
      rv = gather_field(g, scope, f.data, f.len, 1);
    } else {
      rv = 0;
    }
    if (rv != 0) {
      break;
    }
  }
  conch__free(&g->pool->mem, pkg);
  return rv == 0 ? 0 : -1;
}

static void gather_free(gather *g) {
  size_t i;
  for (i = 0; i < g->nsyms; i++) {
    conch__free(&g->pool->mem, g->syms[i].name);
  }
  for (i = 0; i < g->nexts; i++) {
    conch__free(&g->pool->mem, g->exts[i].extendee);
  }
  conch__free(&g->pool->mem, g->syms);
  conch__free(&g->pool->mem, g->exts);
}

/* ---- The tables -------------------------------------------------------- */

static size_t hash(const char *s) {
  size_t h = 2166136261u;
  while (*s != '\0') {
    h = (h ^ (unsigned char)*s++) * 16777619u;
  }
  return h;
}

static sym_entry *sym_slot(const conch_descpool *pool, const char *name) {
  size_t mask, i;
  if (pool->syms_cap == 0) {
    return NULL;
  }
  mask = pool->syms_cap - 1;
  for (i = hash(name) & mask;; i = (i + 1) & mask) {
    sym_entry *e = &pool->syms[i];
    if (e->name == NULL || strcmp(e->name, name) == 0) {
      return e;
    }
  }
}

/* Room for |more| symbols at a load of at most a half. */
static int sym_reserve(conch_descpool *pool, size_t more) {
  size_t cap = pool->syms_cap > 0 ? pool->syms_cap : 64, i;
  sym_entry *old = pool->syms, *v;
  size_t oldcap = pool->syms_cap;

  while ((pool->nsyms + more) * 2 > cap) {
    cap *= 2;
  }
  if (cap == pool->syms_cap) {
    return 0;
  }
  v = conch__calloc(&pool->mem, cap, sizeof(*v));
  if (v == NULL) {
    return -1;
  }
  pool->syms = v;
  pool->syms_cap = cap;
  for (i = 0; i < oldcap; i++) {
    if (old[i].name != NULL) {
      *sym_slot(pool, old[i].name) = old[i];
    }
  }
  conch__free(&pool->mem, old);
  return 0;
}

static int add_one(conch_descpool *pool, const conch_file_descriptor *fd) {
  gather g;
  size_t i;

  if (fd->name == NULL || (fd->data == NULL && fd->len > 0)) {
    return CONCH_ERR_INVALID;
  }
  memset(&g, 0, sizeof(g));
  g.pool = pool;
  if (gather_file(&g, fd) != 0) {
    int nomem = g.nomem;
    gather_free(&g);
    return nomem ? CONCH_ERR_NOMEM : CONCH_ERR_INVALID;
  }
  if (pool->nfiles == pool->files_cap) {
    size_t cap = pool->files_cap > 0 ? 2 * pool->files_cap : 8;
    const conch_file_descriptor **v =
        conch__realloc(&pool->mem, pool->files, cap * sizeof(*v));
    if (v == NULL) {
      gather_free(&g);
      return CONCH_ERR_NOMEM;
    }
    pool->files = v;
    pool->files_cap = cap;
  }
  if (pool->nexts + g.nexts > pool->exts_cap) {
    size_t cap = pool->exts_cap > 0 ? pool->exts_cap : 8;
    ext_entry *v;
    while (cap < pool->nexts + g.nexts) {
      cap *= 2;
    }
    v = conch__realloc(&pool->mem, pool->exts, cap * sizeof(*v));
    if (v == NULL) {
      gather_free(&g);
      return CONCH_ERR_NOMEM;
    }
    pool->exts = v;
    pool->exts_cap = cap;
  }
  if (sym_reserve(pool, g.nsyms) != 0) {
    gather_free(&g);
    return CONCH_ERR_NOMEM;
  }
  /* Nothing fails from here on. */
  pool->files[pool->nfiles++] = fd;
  for (i = 0; i < g.nsyms; i++) {
    sym_entry *e = sym_slot(pool, g.syms[i].name);
    if (e->name != NULL) {
      conch__free(&pool->mem, g.syms[i].name); /* the first one stays */
    } else {
      e->name = g.syms[i].name;
      e->fd = fd;
      e->kind = g.syms[i].kind;
      pool->nsyms++;
    }
  }
  for (i = 0; i < g.nexts; i++) {
    g.exts[i].fd = fd;
    pool->exts[pool->nexts++] = g.exts[i];
  }
  conch__free(&pool->mem, g.syms);
  conch__free(&pool->mem, g.exts);
  return 0;
}

static int add_tree(conch_descpool *pool, const conch_file_descriptor *fd,
                    int depth) {
  size_t i;
  int rv;

  if (fd->name == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (conch_descpool_file(pool, fd->name) != NULL) {
    return 0;
  }
  if (depth > MAX_DEPTH) {
    return CONCH_ERR_INVALID;
  }
  for (i = 0; fd->deps != NULL && fd->deps[i] != NULL; i++) {
    rv = add_tree(pool, fd->deps[i], depth + 1);
    if (rv != 0) {
      return rv;
    }
  }
  return add_one(pool, fd);
}

/* ---- The API ----------------------------------------------------------- */

int conch_descpool_new(conch_descpool **out, const conch_mem *mem) {
  conch_descpool *pool;

  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  if (mem == NULL) {
    mem = conch_mem_default();
  }
  pool = conch__calloc(mem, 1, sizeof(*pool));
  if (pool == NULL) {
    return CONCH_ERR_NOMEM;
  }
  pool->mem = *mem;
  *out = pool;
  return 0;
}

void conch_descpool_free(conch_descpool *pool) {
  conch_mem mem;
  size_t i;

  if (pool == NULL) {
    return;
  }
  mem = pool->mem;
  for (i = 0; i < pool->syms_cap; i++) {
    conch__free(&mem, pool->syms[i].name);
  }
  for (i = 0; i < pool->nexts; i++) {
    conch__free(&mem, pool->exts[i].extendee);
  }
  conch__free(&mem, pool->syms);
  conch__free(&mem, pool->exts);
  conch__free(&mem, pool->files);
  conch__free(&mem, pool);
}

int conch_descpool_add(conch_descpool *pool, const conch_file_descriptor *fd) {
  if (pool == NULL || fd == NULL) {
    return CONCH_ERR_INVALID;
  }
  return add_tree(pool, fd, 0);
}

const conch_file_descriptor *conch_descpool_file(const conch_descpool *pool,
                                                 const char *name) {
  size_t i;
  if (pool == NULL || name == NULL) {
    return NULL;
  }
  /* Few files (tens): a scan is cheaper than keeping a second table. */
  for (i = 0; i < pool->nfiles; i++) {
    if (strcmp(pool->files[i]->name, name) == 0) {
      return pool->files[i];
    }
  }
  return NULL;
}

const conch_file_descriptor *conch_descpool_symbol(const conch_descpool *pool,
                                                   const char *symbol,
                                                   conch_symbol_kind *kind) {
  const sym_entry *e;
  if (pool == NULL || symbol == NULL) {
    return NULL;
  }
  if (symbol[0] == '.') {
    symbol++;
  }
  e = sym_slot(pool, symbol);
  if (e == NULL || e->name == NULL) {
    return NULL;
  }
  if (kind != NULL) {
    *kind = e->kind;
  }
  return e->fd;
}

const conch_file_descriptor *
conch_descpool_extension(const conch_descpool *pool, const char *extendee,
                         int32_t number) {
  size_t i;
  if (pool == NULL || extendee == NULL) {
    return NULL;
  }
  if (extendee[0] == '.') {
    extendee++;
  }
  for (i = 0; i < pool->nexts; i++) {
    if (pool->exts[i].number == number &&
        strcmp(pool->exts[i].extendee, extendee) == 0) {
      return pool->exts[i].fd;
    }
  }
  return NULL;
}

size_t conch_descpool_extension_numbers(const conch_descpool *pool,
                                        const char *extendee, int32_t *out,
                                        size_t n) {
  size_t i, k = 0;
  if (pool == NULL || extendee == NULL) {
    return 0;
  }
  if (extendee[0] == '.') {
    extendee++;
  }
  for (i = 0; i < pool->nexts; i++) {
    if (strcmp(pool->exts[i].extendee, extendee) == 0) {
      if (out != NULL && k < n) {
        out[k] = pool->exts[i].number;
      }
      k++;
    }
  }
  return k;
}

size_t conch_descpool_n_files(const conch_descpool *pool) {
  return pool != NULL ? pool->nfiles : 0;
}

const conch_file_descriptor *conch_descpool_file_at(const conch_descpool *pool,
                                                    size_t i) {
  return pool != NULL && i < pool->nfiles ? pool->files[i] : NULL;
}
