/* Descriptors built at run time (conch/dynamic.h).  The FileDescriptorProto
   bytes of the pool are read with a small wire reader of our own (the
   runtime has no descriptor.proto types); what is built is laid out as
   protoc-c lays out generated structs, in an arena owned by the builder. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/dynamic.h>
#include <conch/features.h>

#include "buf.h"
#include "dynamic_int.h"
#include "json.h"
#include "mem_int.h"
#include "pbjson.h"
#if CONCH_WITH_JSON
#include "pbjson_int.h"
#endif

#define MAX_FIELDS 65535
#define MAX_DEPTH_BUILD 200
#define MAX_FIELD_NUMBER 536870911

void *conch__dyn_alloc(conch_dynamic *d, size_t n) {
  chunk *c = d->chunks;
  void *p;

  n = (n + 15) & ~(size_t)15;
  if (n == 0) {
    n = 16;
  }
  if (c == NULL || c->cap - c->used < n) {
    size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
    if (cap > SIZE_MAX - CHUNK_HDR) {
      return NULL;
    }
    c = conch__malloc(&d->mem, CHUNK_HDR + cap);
    if (c == NULL) {
      return NULL;
    }
    c->cap = cap;
    c->used = 0;
    c->next = d->chunks;
    d->chunks = c;
  }
  p = (char *)c + CHUNK_HDR + c->used;
  c->used += n;
  memset(p, 0, n);
  return p;
}

char *conch__dyn_strndup(conch_dynamic *d, const char *s, size_t n) {
  char *p = conch__dyn_alloc(d, n + 1);
  if (p != NULL) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

int conch__dyn_fail(conch_dynamic *d, int rc, const char *fmt, ...) {
  va_list ap;
  if (d->err[0] == '\0') { /* the innermost reason stays */
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof(d->err), fmt, ap);
    va_end(ap);
  }
  return rc;
}

int conch__dyn_nomem(conch_dynamic *d) {
  return conch__dyn_fail(d, CONCH_ERR_NOMEM, "out of memory");
}
/* ---- Names built so far -------------------------------------------------- */

static unsigned hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s != '\0'; s++) {
    h = (h ^ (uint8_t)*s) * 16777619u;
  }
  return h % NBUCKETS;
}

static entry *find(conch_dynamic *d, const char *name, ent_kind kind) {
  entry *e;
  for (e = d->buckets[hash(name)]; e != NULL; e = e->next) {
    if (e->kind == kind && strcmp(e->name, name) == 0) {
      return e;
    }
  }
  return NULL;
}

static int add(conch_dynamic *d, const char *name, ent_kind kind,
               const void *ptr) {
  entry *e = conch__dyn_alloc(d, sizeof(*e));
  unsigned h = hash(name);
  if (e == NULL) {
    return conch__dyn_nomem(d);
  }
  e->name = name;
  e->kind = kind;
  e->ptr = ptr;
  e->gen = d->gen;
  e->next = d->buckets[h];
  d->buckets[h] = e;
  return 0;
}

/* Forgets what the failed lookup of generation |gen| added, and gives
   back the arena it used: nothing older points into it. */
static void rollback(conch_dynamic *d) {
  size_t i;
  for (i = 0; i < NBUCKETS; i++) {
    entry **pp = &d->buckets[i];
    while (*pp != NULL) {
      if ((*pp)->gen == d->gen) {
        *pp = (*pp)->next;
      } else {
        pp = &(*pp)->next;
      }
    }
  }
  while (d->chunks != d->mark_chunk) {
    chunk *c = d->chunks;
    d->chunks = c->next;
    conch__free(&d->mem, c);
  }
  if (d->chunks != NULL) {
    d->chunks->used = d->mark_used;
  }
}

/* ---- The wire (dynamic_int.h) ------------------------------------------ */

int conch__dyn_get_str(const uint8_t *p, size_t n, uint32_t num,
                       const uint8_t **s, size_t *sl) {
  rd r = rd_of(p, n);
  fld f;
  int rc, found = 0;
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    if (f.num == num && f.wt == 2) {
      *s = f.data;
      *sl = f.len;
      found = 1;
    }
  }
  return rc < 0 ? -1 : found;
}

static int get_varint(const uint8_t *p, size_t n, uint32_t num, uint64_t *v) {
  rd r = rd_of(p, n);
  fld f;
  int rc, found = 0;
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    if (f.num == num && f.wt == 0) {
      *v = f.v;
      found = 1;
    }
  }
  return rc < 0 ? -1 : found;
}

/* ---- Finding a declaration in its file ----------------------------------- */

typedef struct decl {
  const uint8_t *data; /* DescriptorProto, EnumDescriptorProto, ... */
  size_t len;
  int proto3;
  char pkg[MAX_NAME + 1];
} decl;

/* The file's package and syntax into |out|; -1 when it is not parsable or
   is of a syntax not built here. */
static int file_info(conch_dynamic *d, const conch_file_descriptor *fd,
                     decl *out) {
  const uint8_t *s = NULL;
  size_t sl = 0;
  int rc;

  out->pkg[0] = '\0';
  rc = conch__dyn_get_str(fd->data, fd->len, 2, &s, &sl);
  if (rc < 0) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%s: not a FileDescriptorProto", fd->name);
  }
  if (rc == 1) {
    if (sl > MAX_NAME) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID, "%s: package name too long",
                             fd->name);
    }
    memcpy(out->pkg, s, sl);
    out->pkg[sl] = '\0';
  }
  out->proto3 = 0;
  if (conch__dyn_get_str(fd->data, fd->len, 12, &s, &sl) == 1) {
    if (name_eq(s, sl, "proto3", 6)) {
      out->proto3 = 1;
    } else if (!name_eq(s, sl, "proto2", 6) && sl != 0) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%s: syntax \"%.*s\" is not supported", fd->name,
                             (int)(sl > 40 ? 40 : sl), (const char *)s);
    }
  }
  return 0;
}

/* Finds the declaration of |name| (full, no leading dot) in |fd|: a
   message (|kind| CONCH_SYMBOL_MESSAGE), an enum or a service. */
static int locate(conch_dynamic *d, const conch_file_descriptor *fd,
                  const char *name, conch_symbol_kind kind, decl *out) {
  const uint8_t *p = fd->data;
  size_t n = fd->len;
  const char *rest = name;
  size_t pl;
  uint32_t list_top, list_nested;
  int rc = file_info(d, fd, out);

  if (rc != 0) {
    return rc;
  }
  pl = strlen(out->pkg);
  if (pl > 0) {
    if (strncmp(name, out->pkg, pl) != 0 || name[pl] != '.') {
      return conch__dyn_fail(d, CONCH_ERR_INVALID, "%s: not in package %s",
                             name, out->pkg);
    }
    rest = name + pl + 1;
  }
  switch (kind) {
  case CONCH_SYMBOL_MESSAGE:
    list_top = 4;
    list_nested = 3;
    break;
  case CONCH_SYMBOL_ENUM:
    list_top = 5;
    list_nested = 4;
    break;
  default:
    list_top = 6;
    list_nested = 0;
    break;
  }
  /* Each component but the last names a message. */
  for (;;) {
    const char *dot = strchr(rest, '.');
    size_t cl = dot != NULL ? (size_t)(dot - rest) : strlen(rest);
    uint32_t want = dot != NULL ? (p == fd->data ? 4u : 3u)
                                : (p == fd->data ? list_top : list_nested);
    rd r = rd_of(p, n);
    fld f;
    int found = 0;

    if (dot == NULL && want == 0) {
      break; /* services are not nested */
    }
    while ((rc = conch__pbw_next(&r, &f)) == 1) {
      const uint8_t *s = NULL;
      size_t sl = 0;
      if (f.num != want || f.wt != 2) {
        continue;
      }
      if (conch__dyn_get_str(f.data, f.len, 1, &s, &sl) == 1 &&
          name_eq(s, sl, rest, cl)) {
        p = f.data;
        n = f.len;
        found = 1;
        break;
      }
    }
    if (rc < 0) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%s: not a FileDescriptorProto", fd->name);
    }
    if (!found) {
      break;
    }
    if (dot == NULL) {
      out->data = p;
      out->len = n;
      return 0;
    }
    rest = dot + 1;
  }
  return conch__dyn_fail(d, CONCH_ERR_INVALID, "%s: not declared in %s", name,
                         fd->name);
}

/* The file of |name| if it declares a |kind|. */
static int lookup(conch_dynamic *d, const char *name, conch_symbol_kind kind,
                  decl *out) {
  conch_symbol_kind k = 0;
  const conch_file_descriptor *fd = conch_descpool_symbol(d->pool, name, &k);
  static const char *const what[] = {"",       "message",    "field",
                                     "enum",   "enum value", "service",
                                     "method", "extension"};

  if (fd == NULL) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: unknown type", name);
  }
  if (k != kind) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: a %s, not a %s", name,
                           (unsigned)k < 8 ? what[k] : "?", what[kind]);
  }
  return locate(d, fd, name, kind, out);
}

/* ---- Enums ----------------------------------------------------------------
 */

static int cmp_value(const void *a, const void *b) {
  const ProtobufCEnumValue *x = a, *y = b;
  return x->value < y->value ? -1 : x->value > y->value;
}

static int cmp_value_index(const void *a, const void *b) {
  const ProtobufCEnumValueIndex *x = a, *y = b;
  return strcmp(x->name, y->name);
}

static const char *short_of(const char *full) {
  const char *dot = strrchr(full, '.');
  return dot != NULL ? dot + 1 : full;
}

/* Whether the |n| bytes at |s| are a protobuf identifier, as protoc
   checks symbol names: letters, digits and '_', not starting with a
   digit. */
static int symbol_ok(const uint8_t *s, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint8_t c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
          (i > 0 && c >= '0' && c <= '9'))) {
      return 0;
    }
  }
  return n > 0;
}

static int build_enum(conch_dynamic *d, const char *name,
                      const ProtobufCEnumDescriptor **out) {
  entry *e = find(d, name, ENT_ENUM);
  ProtobufCEnumDescriptor *ed;
  ProtobufCEnumValue *vals;
  ProtobufCEnumValueIndex *byname;
  ProtobufCIntRange *ranges;
  decl dc;
  rd r;
  fld f;
  size_t nv = 0, i, nu, nr;
  int rc;
  char *full;

  if (e != NULL) {
    *out = e->ptr;
    return 0;
  }
  if ((rc = lookup(d, name, CONCH_SYMBOL_ENUM, &dc)) != 0) {
    return rc;
  }
  r = rd_of(dc.data, dc.len);
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    nv += f.num == 2 && f.wt == 2;
  }
  if (nv > MAX_FIELDS) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: more than %d values",
                           name, MAX_FIELDS);
  }
  ed = conch__dyn_alloc(d, sizeof(*ed));
  full = conch__dyn_strndup(d, name, strlen(name));
  vals = conch__dyn_alloc(d, (nv + 1) * sizeof(*vals));
  byname = conch__dyn_alloc(d, (nv + 1) * sizeof(*byname));
  ranges = conch__dyn_alloc(d, (nv + 1) * sizeof(*ranges));
  if (ed == NULL || full == NULL || vals == NULL || byname == NULL ||
      ranges == NULL) {
    return conch__dyn_nomem(d);
  }
  r = rd_of(dc.data, dc.len);
  i = 0;
  while (conch__pbw_next(&r, &f) == 1) {
    const uint8_t *s = NULL;
    size_t sl = 0;
    uint64_t num = 0;
    if (f.num != 2 || f.wt != 2) {
      continue;
    }
    if (conch__dyn_get_str(f.data, f.len, 1, &s, &sl) != 1 || sl == 0 ||
        sl > MAX_NAME || get_varint(f.data, f.len, 2, &num) < 0) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: a value without a name", name);
    }
    if (!symbol_ok(s, sl)) {
      /* JSON writes the name as it is: it must be one protoc accepts. */
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: a value name that is not an identifier",
                             name);
    }
    vals[i].name = conch__dyn_strndup(d, (const char *)s, sl);
    if (vals[i].name == NULL) {
      return conch__dyn_nomem(d);
    }
    vals[i].c_name = vals[i].name;
    vals[i].value = (int)(int32_t)(uint32_t)num;
    i++;
  }
  /* Sorted by number (stable for aliases: the first name declared stays),
     one per number; every name in the index. */
  for (i = 0; i < nv; i++) {
    byname[i].name = vals[i].name;
    byname[i].index = (unsigned)i; /* fixed below */
  }
  {
    /* A stable sort by number: insertion, fine for enum sizes. */
    size_t j;
    for (i = 1; i < nv; i++) {
      ProtobufCEnumValue v = vals[i];
      for (j = i; j > 0 && cmp_value(&vals[j - 1], &v) > 0; j--) {
        vals[j] = vals[j - 1];
      }
      vals[j] = v;
    }
  }
  for (i = 0, nu = 0; i < nv; i++) {
    if (nu == 0 || vals[nu - 1].value != vals[i].value) {
      vals[nu++] = vals[i];
    }
  }
  /* Each name's number, by reading the declarations again, then that
     number's index among the unique ones. */
  r = rd_of(dc.data, dc.len);
  i = 0;
  while (conch__pbw_next(&r, &f) == 1) {
    const uint8_t *s = NULL;
    size_t sl = 0, lo = 0, hi = nu;
    uint64_t num = 0;
    int v;
    if (f.num != 2 || f.wt != 2) {
      continue;
    }
    (void)conch__dyn_get_str(f.data, f.len, 1, &s, &sl);
    (void)get_varint(f.data, f.len, 2, &num);
    v = (int)(int32_t)(uint32_t)num;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (vals[mid].value < v) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    byname[i].index = (unsigned)lo;
    i++;
  }
  qsort(byname, nv, sizeof(*byname), cmp_value_index);
  for (i = 1; i < nv; i++) {
    if (strcmp(byname[i - 1].name, byname[i].name) == 0) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: value %.200s declared twice", name,
                             byname[i].name);
    }
  }
  for (i = 0, nr = 0; i < nu; i++) {
    if (i == 0 || vals[i].value != vals[i - 1].value + 1 ||
        vals[i - 1].value == INT32_MAX) {
      ranges[nr].start_value = vals[i].value;
      ranges[nr].orig_index = (int)i;
      nr++;
    }
  }
  ranges[nr].start_value = 0;
  ranges[nr].orig_index = (int)nu;
  ed->magic = PROTOBUF_C__ENUM_DESCRIPTOR_MAGIC;
  ed->name = full;
  ed->short_name = short_of(full);
  ed->c_name = full;
  ed->package_name = conch__dyn_strndup(d, dc.pkg, strlen(dc.pkg));
  if (ed->package_name == NULL) {
    return conch__dyn_nomem(d);
  }
  ed->n_values = (unsigned)nu;
  ed->values = vals;
  ed->n_value_names = (unsigned)nv;
  ed->values_by_name = byname;
  ed->n_value_ranges = (unsigned)nr;
  ed->value_ranges = ranges;
  if ((rc = add(d, full, ENT_ENUM, ed)) != 0) {
    return rc;
  }
  *out = ed;
  return 0;
}

/* The first value an enum declares: a proto2 enum field's default. */
static int enum_first(conch_dynamic *d, const ProtobufCEnumDescriptor *ed,
                      int *out) {
  decl dc;
  rd r;
  fld f;
  int rc = lookup(d, ed->name, CONCH_SYMBOL_ENUM, &dc);
  *out = 0;
  if (rc != 0) {
    return rc;
  }
  r = rd_of(dc.data, dc.len);
  while (conch__pbw_next(&r, &f) == 1) {
    uint64_t num = 0;
    if (f.num == 2 && f.wt == 2) {
      (void)get_varint(f.data, f.len, 2, &num);
      *out = (int)(int32_t)(uint32_t)num;
      break;
    }
  }
  return 0;
}

/* ---- Messages ------------------------------------------------------------ */

static int parse_field(const uint8_t *p, size_t n, pfield *pf) {
  rd r = rd_of(p, n);
  fld f;
  int rc;

  memset(pf, 0, sizeof(*pf));
  pf->oneof = -1;
  pf->packed = -1;
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    switch (f.num) {
    case 1:
      if (f.wt == 2) {
        pf->name = f.data;
        pf->nl = f.len;
      }
      break;
    case 3:
      pf->number = f.v;
      break;
    case 4:
      pf->label = f.v;
      break;
    case 5:
      pf->type = f.v;
      break;
    case 6:
      if (f.wt == 2) {
        pf->type_name = f.data;
        pf->tnl = f.len;
      }
      break;
    case 7:
      if (f.wt == 2) {
        pf->def = f.data;
        pf->dl = f.len;
        pf->has_def = 1;
      }
      break;
    case 8:
      if (f.wt == 2) {
        uint64_t v;
        if (get_varint(f.data, f.len, 2, &v) == 1) {
          pf->packed = v != 0;
        }
        if (get_varint(f.data, f.len, 3, &v) == 1) {
          pf->deprecated = v != 0;
        }
      }
      break;
    case 9:
      if (f.wt == 0) {
        pf->oneof = (int64_t)(f.v & 0x7fffffff);
      }
      break;
    case 10:
      if (f.wt == 2) {
        pf->json = f.data;
        pf->jl = f.len;
      }
      break;
    default:
      break;
    }
  }
  return rc < 0 ? -1 : 0;
}

static const ProtobufCType type_map[19] = {0,
                                           PROTOBUF_C_TYPE_DOUBLE,
                                           PROTOBUF_C_TYPE_FLOAT,
                                           PROTOBUF_C_TYPE_INT64,
                                           PROTOBUF_C_TYPE_UINT64,
                                           PROTOBUF_C_TYPE_INT32,
                                           PROTOBUF_C_TYPE_FIXED64,
                                           PROTOBUF_C_TYPE_FIXED32,
                                           PROTOBUF_C_TYPE_BOOL,
                                           PROTOBUF_C_TYPE_STRING,
                                           0, /* group */
                                           PROTOBUF_C_TYPE_MESSAGE,
                                           PROTOBUF_C_TYPE_BYTES,
                                           PROTOBUF_C_TYPE_UINT32,
                                           PROTOBUF_C_TYPE_ENUM,
                                           PROTOBUF_C_TYPE_SFIXED32,
                                           PROTOBUF_C_TYPE_SFIXED64,
                                           PROTOBUF_C_TYPE_SINT32,
                                           PROTOBUF_C_TYPE_SINT64};

static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  default:
    return 4;
  }
}

static size_t align_up(size_t off, size_t a) {
  return (off + a - 1) & ~(a - 1);
}

static size_t align_of(size_t size) { return size >= 8 ? 8 : size; }

static int is_packable(ProtobufCType t) {
  return t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_BYTES &&
         t != PROTOBUF_C_TYPE_MESSAGE;
}

static int cmp_field_id(const void *a, const void *b) {
  const ProtobufCFieldDescriptor *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_field_name(const void *a, const void *b) {
  const ProtobufCFieldDescriptor *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

static int build_message(conch_dynamic *d, const char *name,
                         const ProtobufCMessageDescriptor **out);

/* The full name (no leading '.', in the arena) of the type |tn| named in
   the scope |scope| ("pkg.Msg"): |tn| itself when fully qualified
   (".pkg.T", as protoc writes them), else, as protoc resolves a relative
   name, the first message or enum of the pool among scope.tn, then each
   enclosing scope's, then tn (protobufjs' descriptors, which @grpc/reflection
   serves, name types so).  NULL with *rc set when there is none. */
static char *resolve_type(conch_dynamic *d, const char *scope,
                          const uint8_t *tn, size_t tnl, int *rc) {
  size_t sl = strlen(scope);
  char *buf;

  if (tnl == 0 || tnl > MAX_NAME || memchr(tn, '\0', tnl) != NULL ||
      (tnl == 1 && tn[0] == '.')) {
    *rc = conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: bad type name", scope);
    return NULL;
  }
  if (tn[0] == '.') {
    buf = conch__dyn_strndup(d, (const char *)tn + 1, tnl - 1);
    if (buf == NULL) {
      *rc = conch__dyn_nomem(d);
    }
    return buf;
  }
  buf = conch__dyn_alloc(d, sl + tnl + 2);
  if (buf == NULL) {
    *rc = conch__dyn_nomem(d);
    return NULL;
  }
  for (;;) {
    conch_symbol_kind k = 0;
    size_t at = 0;
    if (sl > 0) {
      memcpy(buf, scope, sl);
      buf[sl] = '.';
      at = sl + 1;
    }
    memcpy(buf + at, tn, tnl);
    buf[at + tnl] = '\0';
    if (conch_descpool_symbol(d->pool, buf, &k) != NULL &&
        (k == CONCH_SYMBOL_MESSAGE || k == CONCH_SYMBOL_ENUM)) {
      return buf;
    }
    if (sl == 0) {
      break;
    }
    while (sl > 0 && scope[sl - 1] != '.') {
      sl--;
    }
    if (sl > 0) {
      sl--; /* the '.' */
    }
  }
  *rc = conch__dyn_fail(d, CONCH_ERR_INVALID,
                        "%.300s: type \"%.*s\" is not found from there", scope,
                        (int)(tnl > 200 ? 200 : tnl), (const char *)tn);
  return NULL;
}

/* The type |tn| (".pkg.Msg", or relative to |msg|) of a field of |msg|,
   into |fd|. */
static int field_type(conch_dynamic *d, const char *msg,
                      ProtobufCFieldDescriptor *fd, const uint8_t *tn,
                      size_t tnl) {
  char *name; /* in the arena: this frame is on every level of a build */
  int rc = 0;

  name = resolve_type(d, msg, tn, tnl, &rc);
  if (name == NULL) {
    return rc;
  }
  if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
    const ProtobufCMessageDescriptor *md = NULL;
    rc = build_message(d, name, &md);
    fd->descriptor = md;
  } else {
    const ProtobufCEnumDescriptor *ed = NULL;
    rc = build_enum(d, name, &ed);
    fd->descriptor = ed;
  }
  return rc;
}

static int build_fields(conch_dynamic *d, dmsg *dm, const decl *dc) {
  const char *name = dm->md.name;
  rd r;
  fld f;
  size_t nf = 0, noneof = 0, i;
  ProtobufCFieldDescriptor *fields;
  const ProtobufCFieldDescriptor **byname;
  unsigned *sorted;
  ProtobufCIntRange *ranges;
  size_t *oneof_case, *oneof_slot, off, nr;
  int rc;

  r = rd_of(dc->data, dc->len);
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    nf += f.num == 2 && f.wt == 2;
    noneof += f.num == 8 && f.wt == 2;
  }
  if (rc < 0) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%.300s: not a DescriptorProto", name);
  }
  if (nf > MAX_FIELDS || noneof > MAX_FIELDS) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: more than %d fields",
                           name, MAX_FIELDS);
  }
  fields = conch__dyn_alloc(d, (nf + 1) * sizeof(*fields));
  sorted = conch__dyn_alloc(d, (nf + 1) * sizeof(*sorted));
  ranges = conch__dyn_alloc(d, (nf + 1) * sizeof(*ranges));
  oneof_case = conch__dyn_alloc(d, (noneof + 1) * sizeof(size_t));
  oneof_slot = conch__dyn_alloc(d, (noneof + 1) * sizeof(size_t));
  if (fields == NULL || sorted == NULL || ranges == NULL ||
      oneof_case == NULL || oneof_slot == NULL) {
    return conch__dyn_nomem(d);
  }
  for (i = 0; i < noneof; i++) {
    oneof_case[i] = SIZE_MAX;
  }
  off = sizeof(ProtobufCMessage);
  r = rd_of(dc->data, dc->len);
  i = 0;
  while (conch__pbw_next(&r, &f) == 1) {
    ProtobufCFieldDescriptor *fd = &fields[i];
    pfield pf;
    ProtobufCType t;
    size_t es;

    if (f.num != 2 || f.wt != 2) {
      continue;
    }
    if (parse_field(f.data, f.len, &pf) != 0 || pf.nl == 0 ||
        pf.nl > MAX_NAME || memchr(pf.name, '\0', pf.nl) != NULL) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: a field without a name", name);
    }
    if (!symbol_ok(pf.name, pf.nl)) {
      /* Its JSON name comes from it, written as it is. */
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: a field name that is not an identifier",
                             name);
    }
    fd->name = conch__dyn_strndup(d, (const char *)pf.name, pf.nl);
    if (fd->name == NULL) {
      return conch__dyn_nomem(d);
    }
    if (pf.jl > 0 && (rc = conch__dyn_json_name(d, dm, name, fd, &pf)) != 0) {
      return rc;
    }
    if (pf.number < 1 || pf.number > MAX_FIELD_NUMBER) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s.%.100s: field number %llu", name, fd->name,
                             (unsigned long long)pf.number);
    }
    fd->id = (uint32_t)pf.number;
    if (pf.type == 10) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s.%.100s: groups are not supported", name,
                             fd->name);
    }
    if (pf.type < 1 || pf.type > 18) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s.%.100s: bad type %llu", name, fd->name,
                             (unsigned long long)pf.type);
    }
    t = type_map[pf.type];
    fd->type = t;
    if (pf.label < 1 || pf.label > 3) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s.%.100s: bad label %llu", name, fd->name,
                             (unsigned long long)pf.label);
    }
    if (pf.oneof >= 0 && ((size_t)pf.oneof >= noneof || pf.label != 1)) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s.%.100s: bad oneof index", name, fd->name);
    }
    if (t == PROTOBUF_C_TYPE_MESSAGE || t == PROTOBUF_C_TYPE_ENUM) {
      if ((rc = field_type(d, name, fd, pf.type_name, pf.tnl)) != 0) {
        return rc;
      }
    }
    if (pf.deprecated) {
      fd->flags |= PROTOBUF_C_FIELD_FLAG_DEPRECATED;
    }
    es = elem_size(t);
    if (pf.label == 3) {
      fd->label = PROTOBUF_C_LABEL_REPEATED;
      off = align_up(off, sizeof(size_t));
      fd->quantifier_offset = (unsigned)off;
      off += sizeof(size_t);
      off = align_up(off, sizeof(void *));
      fd->offset = (unsigned)off;
      off += sizeof(void *);
      if (is_packable(t) && (dc->proto3 ? pf.packed != 0 : pf.packed == 1)) {
        fd->flags |= PROTOBUF_C_FIELD_FLAG_PACKED;
      }
    } else if (pf.oneof >= 0) {
      size_t o = (size_t)pf.oneof;
      fd->label =
          dc->proto3 ? PROTOBUF_C_LABEL_NONE : PROTOBUF_C_LABEL_OPTIONAL;
      fd->flags |= PROTOBUF_C_FIELD_FLAG_ONEOF;
      if (oneof_case[o] == SIZE_MAX) {
        off = align_up(off, sizeof(uint32_t));
        oneof_case[o] = off;
        off += sizeof(uint32_t);
        off = align_up(off, 8);
        oneof_slot[o] = off;
        off +=
            sizeof(ProtobufCBinaryData) > 8 ? sizeof(ProtobufCBinaryData) : 8;
      }
      fd->quantifier_offset = (unsigned)oneof_case[o];
      fd->offset = (unsigned)oneof_slot[o];
    } else {
      if (pf.label == 2) {
        fd->label = PROTOBUF_C_LABEL_REQUIRED;
      } else if (dc->proto3) {
        fd->label = PROTOBUF_C_LABEL_NONE;
      } else {
        fd->label = PROTOBUF_C_LABEL_OPTIONAL;
        if (t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_MESSAGE) {
          off = align_up(off, sizeof(protobuf_c_boolean));
          fd->quantifier_offset = (unsigned)off;
          off += sizeof(protobuf_c_boolean);
        }
      }
      off = align_up(off, align_of(es));
      fd->offset = (unsigned)off;
      off += es;
      if (pf.has_def && !dc->proto3) {
        fd->default_value = conch__dyn_default(d, name, fd, pf.def, pf.dl, &rc);
        if (rc != 0) {
          return rc;
        }
      } else if (t == PROTOBUF_C_TYPE_STRING && dc->proto3) {
        fd->default_value = &protobuf_c_empty_string;
      } else if (t == PROTOBUF_C_TYPE_ENUM && !dc->proto3) {
        int *v = conch__dyn_alloc(d, sizeof(int));
        if (v == NULL) {
          return conch__dyn_nomem(d);
        }
        if ((rc = enum_first(d, fd->descriptor, v)) != 0) {
          return rc;
        }
        fd->default_value = v;
      }
    }
    if (off > 0x7fffffff) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: too large", name);
    }
    i++;
  }
  nf = i;
  if ((rc = conch__dyn_json_names(d, name, fields, nf, dc->proto3)) != 0) {
    return rc;
  }
  qsort(fields, nf, sizeof(*fields), cmp_field_id);
  for (i = 1; i < nf; i++) {
    if (fields[i - 1].id == fields[i].id) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: field number %u used twice", name,
                             fields[i].id);
    }
  }
  byname = conch__dyn_alloc(d, (nf + 1) * sizeof(*byname));
  if (byname == NULL) {
    return conch__dyn_nomem(d);
  }
  for (i = 0; i < nf; i++) {
    byname[i] = &fields[i];
  }
  qsort(byname, nf, sizeof(*byname), cmp_field_name);
  for (i = 0; i < nf; i++) {
    sorted[i] = (unsigned)(byname[i] - fields);
  }
  for (i = 1; i < nf; i++) {
    if (strcmp(fields[sorted[i - 1]].name, fields[sorted[i]].name) == 0) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: field %.100s declared twice", name,
                             fields[sorted[i]].name);
    }
  }
  for (i = 0, nr = 0; i < nf; i++) {
    if (i == 0 || fields[i].id != fields[i - 1].id + 1) {
      ranges[nr].start_value = (int)fields[i].id;
      ranges[nr].orig_index = (int)i;
      nr++;
    }
  }
  ranges[nr].start_value = 0;
  ranges[nr].orig_index = (int)nf;
  dm->md.sizeof_message = align_up(off, 8);
  dm->md.n_fields = (unsigned)nf;
  dm->md.fields = fields;
  dm->md.fields_sorted_by_name = sorted;
  dm->md.n_field_ranges = (unsigned)nr;
  dm->md.field_ranges = ranges;
  return 0;
}

/* The message |name| from its declaration, read into |dc|. */
static int build_declared(conch_dynamic *d, const char *name, decl *dc,
                          const ProtobufCMessageDescriptor **out) {
  dmsg *dm;
  char *full;
  int rc;

  if ((rc = lookup(d, name, CONCH_SYMBOL_MESSAGE, dc)) != 0) {
    return rc;
  }
  dm = conch__dyn_alloc(d, sizeof(*dm));
  full = conch__dyn_strndup(d, name, strlen(name));
  if (dm == NULL || full == NULL) {
    return conch__dyn_nomem(d);
  }
  dm->md.magic = PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC;
  /* Built here: custom json names, extension keys (pbjson_int.h). */
  dm->md.reserved1 = (void *)(uintptr_t)conch__dyn_json_mark;
  dm->md.name = full;
  dm->md.short_name = short_of(full);
  dm->md.c_name = full;
  dm->md.package_name = conch__dyn_strndup(d, dc->pkg, strlen(dc->pkg));
  dm->md.sizeof_message = sizeof(ProtobufCMessage);
  dm->md.field_ranges = conch__dyn_alloc(d, sizeof(ProtobufCIntRange));
  dm->gen = d->gen;
  if (dm->md.package_name == NULL || dm->md.field_ranges == NULL) {
    return conch__dyn_nomem(d);
  }
  if ((rc = add(d, full, ENT_MSG, dm)) != 0) {
    return rc;
  }
  d->depth++;
  rc = build_fields(d, dm, dc);
  d->depth--;
  if (rc != 0) {
    return rc;
  }
  *out = &dm->md;
  return 0;
}

static int build_message(conch_dynamic *d, const char *name,
                         const ProtobufCMessageDescriptor **out) {
  entry *e = find(d, name, ENT_MSG);
  decl *dc;
  int rc;

  if (e == NULL) {
    e = find(d, name, ENT_BUILTIN);
  }
  if (e != NULL) {
    *out = e->ptr;
    return 0;
  }
#if CONCH_WITH_JSON
  if (strncmp(name, "google.protobuf.", 16) == 0 && strlen(name) < 200) {
    char url[256];
    const ProtobufCMessageDescriptor *b;
    snprintf(url, sizeof(url), "/%s", name);
    b = conch__pbj_resolve_url(NULL, url);
    if (b != NULL) {
      if ((rc = add(d, b->name, ENT_BUILTIN, b)) != 0) {
        return rc;
      }
      *out = b;
      return 0;
    }
  }
#endif
  if (d->depth >= MAX_DEPTH_BUILD) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%.300s: types nested deeper than %d", name,
                           MAX_DEPTH_BUILD);
  }
  /* On the heap, not in the arena: it is only needed while this type's
     fields are built. */
  dc = conch__malloc(&d->mem, sizeof(*dc));
  if (dc == NULL) {
    return conch__dyn_nomem(d);
  }
  rc = build_declared(d, name, dc, out);
  conch__free(&d->mem, dc);
  return rc;
}
/* Whether the required message fields from |dm| come back to a message on
   the path: such a message has no finite value. */
static int required_cycle(conch_dynamic *d, dmsg *dm, int depth) {
  unsigned i;
  if (dm->mark == 2) {
    return 0;
  }
  if (dm->mark == 1 || depth > MAX_DEPTH_BUILD * 4) {
    return 1;
  }
  dm->mark = 1;
  for (i = 0; i < dm->md.n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &dm->md.fields[i];
    const ProtobufCMessageDescriptor *sub = f->descriptor;
    entry *e;
    if (f->label != PROTOBUF_C_LABEL_REQUIRED ||
        f->type != PROTOBUF_C_TYPE_MESSAGE || sub == NULL) {
      continue;
    }
    e = find(d, sub->name, ENT_MSG);
    if (e != NULL && e->ptr == (const void *)sub &&
        required_cycle(d, (dmsg *)(uintptr_t)e->ptr, depth + 1)) {
      return 1;
    }
  }
  dm->mark = 2;
  return 0;
}

static int check_new(conch_dynamic *d) {
  size_t i;
  entry *e;
  for (i = 0; i < NBUCKETS; i++) {
    for (e = d->buckets[i]; e != NULL; e = e->next) {
      if (e->gen == d->gen && e->kind == ENT_MSG &&
          required_cycle(d, (dmsg *)(uintptr_t)e->ptr, 0)) {
        return conch__dyn_fail(d, CONCH_ERR_INVALID,
                               "%.300s: its required fields form a cycle",
                               e->name);
      }
    }
  }
  return 0;
}

/* ---- The API ------------------------------------------------------------- */

int conch_dynamic_new(conch_dynamic **out, const conch_descpool *pool,
                      const conch_mem *mem) {
  conch_dynamic *d;
  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  if (pool == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (mem == NULL) {
    mem = conch_mem_default();
  }
  d = conch__calloc(mem, 1, sizeof(*d));
  if (d == NULL) {
    return CONCH_ERR_NOMEM;
  }
  d->mem = *mem;
  d->pool = pool;
  *out = d;
  return 0;
}

void conch_dynamic_free(conch_dynamic *d) {
  chunk *c, *next;
  if (d == NULL) {
    return;
  }
  for (c = d->chunks; c != NULL; c = next) {
    next = c->next;
    conch__free(&d->mem, c);
  }
  conch__free(&d->mem, d);
}

const char *conch_dynamic_error(const conch_dynamic *d) {
  return d != NULL ? d->err : "no builder";
}

/* One lookup: a new generation, forgotten when it fails. */
static int begin(conch_dynamic *d, const char **name) {
  d->err[0] = '\0';
  d->gen++;
  d->depth = 0;
  d->mark_chunk = d->chunks;
  d->mark_used = d->chunks != NULL ? d->chunks->used : 0;
  if (**name == '.') {
    (*name)++;
  }
  if (strlen(*name) > MAX_NAME) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID, "name too long");
  }
  return 0;
}

static int end(conch_dynamic *d, int rc) {
  if (rc == 0) {
    rc = check_new(d);
  }
  if (rc != 0) {
    rollback(d);
  }
  return rc;
}

int conch_dynamic_message(conch_dynamic *d, const char *name,
                          const ProtobufCMessageDescriptor **out) {
  int rc;
  if (out != NULL) {
    *out = NULL;
  }
  if (d == NULL || name == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if ((rc = begin(d, &name)) != 0) {
    return rc;
  }
  rc = end(d, build_message(d, name, out));
  if (rc != 0) {
    *out = NULL;
  }
  return rc;
}

int conch_dynamic_enum(conch_dynamic *d, const char *name,
                       const ProtobufCEnumDescriptor **out) {
  int rc;
  if (out != NULL) {
    *out = NULL;
  }
  if (d == NULL || name == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if ((rc = begin(d, &name)) != 0) {
    return rc;
  }
  rc = end(d, build_enum(d, name, out));
  if (rc != 0) {
    *out = NULL;
  }
  return rc;
}

static int build_method(conch_dynamic *d, const char *name,
                        const conch_method **out) {
  char svc[MAX_NAME + 1];
  const char *sep = strchr(name, '/'), *mname;
  size_t sl;
  entry *e;
  decl dc;
  rd r;
  fld f;
  int rc;

  if (sep == NULL) {
    sep = strrchr(name, '.');
  }
  if (sep == NULL || sep == name || sep[1] == '\0' || strchr(sep + 1, '/')) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%.300s: not a method name (pkg.Service/Method)",
                           name);
  }
  sl = (size_t)(sep - name);
  memcpy(svc, name, sl);
  svc[sl] = '\0';
  mname = sep + 1;
  {
    char key[2 * MAX_NAME + 4];
    snprintf(key, sizeof(key), "%s/%s", svc, mname);
    if ((e = find(d, key, ENT_METHOD)) != NULL) {
      *out = e->ptr;
      return 0;
    }
  }
  if ((rc = lookup(d, svc, CONCH_SYMBOL_SERVICE, &dc)) != 0) {
    return rc;
  }
  r = rd_of(dc.data, dc.len);
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    const uint8_t *s, *in = NULL, *outn = NULL, *opt = NULL;
    size_t nl = 0, inl = 0, outl = 0, optl = 0;
    uint64_t cs = 0, ss = 0, idem = 0;
    conch_method *m;
    char *path, *tn;
    size_t pl;
    if (f.num != 2 || f.wt != 2 ||
        conch__dyn_get_str(f.data, f.len, 1, &s, &nl) != 1 ||
        !name_eq(s, nl, mname, strlen(mname))) {
      continue;
    }
    if (conch__dyn_get_str(f.data, f.len, 2, &in, &inl) != 1 ||
        conch__dyn_get_str(f.data, f.len, 3, &outn, &outl) != 1 || inl < 1 ||
        outl < 1 || inl > MAX_NAME || outl > MAX_NAME) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: bad input or output type", name);
    }
    (void)get_varint(f.data, f.len, 5, &cs);
    (void)get_varint(f.data, f.len, 6, &ss);
    if (conch__dyn_get_str(f.data, f.len, 4, &opt, &optl) == 1) {
      (void)get_varint(opt, optl, 34, &idem);
    }
    m = conch__dyn_alloc(d, sizeof(*m));
    pl = strlen(svc) + strlen(mname) + 3;
    path = conch__dyn_alloc(d, pl);
    if (m == NULL || path == NULL) {
      return conch__dyn_nomem(d);
    }
    snprintf(path, pl, "/%s/%s", svc, mname);
    m->path = path;
    m->kind = cs ? (ss ? CONCH_STREAM_BIDI : CONCH_STREAM_CLIENT)
                 : (ss ? CONCH_STREAM_SERVER : CONCH_STREAM_UNARY);
    m->idempotency =
        idem <= 2 ? (conch_idempotency)idem : CONCH_IDEMPOTENCY_UNKNOWN;
    if ((tn = resolve_type(d, svc, in, inl, &rc)) == NULL ||
        (rc = build_message(d, tn, &m->input)) != 0) {
      return rc;
    }
    if ((tn = resolve_type(d, svc, outn, outl, &rc)) == NULL ||
        (rc = build_message(d, tn, &m->output)) != 0) {
      return rc;
    }
    if ((rc = add(d, path + 1, ENT_METHOD, m)) != 0) {
      return rc;
    }
    *out = m;
    return 0;
  }
  if (rc < 0) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%.300s: not a ServiceDescriptorProto", svc);
  }
  return conch__dyn_fail(d, CONCH_ERR_INVALID, "%.300s: no method %.200s", svc,
                         mname);
}

int conch_dynamic_method(conch_dynamic *d, const char *name,
                         const conch_method **out) {
  int rc;
  if (out != NULL) {
    *out = NULL;
  }
  if (d == NULL || name == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (*name == '/') {
    name++;
  }
  if ((rc = begin(d, &name)) != 0) {
    return rc;
  }
  rc = end(d, build_method(d, name, out));
  if (rc != 0) {
    *out = NULL;
  }
  return rc;
}

/* The name of the |i|th method of |svc| into |mname|: 0, CONCH_ERR_EOF
   past the last one. */
static int nth_method(conch_dynamic *d, const char *svc, size_t i, char *mname,
                      size_t cap) {
  decl dc;
  rd r;
  fld f;
  int rc;

  if ((rc = lookup(d, svc, CONCH_SYMBOL_SERVICE, &dc)) != 0) {
    return rc;
  }
  r = rd_of(dc.data, dc.len);
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    const uint8_t *s = NULL;
    size_t nl = 0;
    if (f.num != 2 || f.wt != 2) {
      continue;
    }
    if (i-- > 0) {
      continue;
    }
    if (conch__dyn_get_str(f.data, f.len, 1, &s, &nl) != 1 || nl == 0 ||
        nl >= cap || memchr(s, '/', nl) != NULL) {
      return conch__dyn_fail(d, CONCH_ERR_INVALID,
                             "%.300s: a method without a good name", svc);
    }
    memcpy(mname, s, nl);
    mname[nl] = '\0';
    return 0;
  }
  if (rc < 0) {
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%.300s: not a ServiceDescriptorProto", svc);
  }
  return CONCH_ERR_EOF;
}

int conch_dynamic_service_method(conch_dynamic *d, const char *service,
                                 size_t i, const conch_method **out) {
  char full[2 * MAX_NAME + 4], mname[MAX_NAME + 1];
  int rc;
  if (out != NULL) {
    *out = NULL;
  }
  if (d == NULL || service == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if ((rc = begin(d, &service)) != 0) {
    return rc;
  }
  rc = nth_method(d, service, i, mname, sizeof(mname));
  if (rc == 0) {
    snprintf(full, sizeof(full), "%s/%s", service, mname);
    rc = build_method(d, full, out);
  }
  if (rc == CONCH_ERR_EOF) {
    rollback(d);
    return rc;
  }
  rc = end(d, rc);
  if (rc != 0) {
    *out = NULL;
  }
  return rc;
}

int conch_dynamic_message_init(const ProtobufCMessageDescriptor *md,
                               void *msg) {
  unsigned i;
  if (md == NULL || msg == NULL ||
      md->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC) {
    return CONCH_ERR_INVALID;
  }
  if (md->message_init != NULL) {
    md->message_init(msg);
    return 0;
  }
  memset(msg, 0, md->sizeof_message);
  ((ProtobufCMessage *)msg)->descriptor = md;
  for (i = 0; i < md->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &md->fields[i];
    void *p = (char *)msg + f->offset;
    if (f->default_value == NULL || f->label == PROTOBUF_C_LABEL_REPEATED ||
        (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
      continue;
    }
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE: {
      const void *dv = f->default_value;
      memcpy(p, &dv, sizeof(dv));
      break;
    }
    case PROTOBUF_C_TYPE_BYTES:
      memcpy(p, f->default_value, sizeof(ProtobufCBinaryData));
      break;
    default:
      memcpy(p, f->default_value, elem_size(f->type));
      break;
    }
  }
  return 0;
}
