/* From protoc's descriptors to the names of the stubs: type lookup, the C
   names protobuf-c takes, our names with their collisions resolved, and
   the comments of the .proto. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_int.h"

/* Deeper message nesting is refused rather than walked recursively. */
#define MAX_NESTING 100
/* A method's prefix gets at most this many '_'s before we give up. */
#define MAX_RENAMES 64

typedef struct gen {
  const Conch__Plugin__CodeGeneratorRequest *req;
  sg_arena arena;
  sg_map files; /* file name -> sg_file * */
  sg_map types; /* message full name -> sg_type * */
  sg_map taken; /* C name -> what took it (const char *) */
  sg_file *fv;
  size_t nf;
  sg_buf err; /* the first error in the input */
  sg_buf tmp;
  int oom;
} gen;

/* Records the first problem of the input; returns -1 to unwind. */
static int fail(gen *g, const char *fmt, ...) SG_PRINTF(2, 3);

static int fail(gen *g, const char *fmt, ...) {
  va_list ap;
  if (g->err.len == 0) {
    va_start(ap, fmt);
    sg_buf_vprintf(&g->err, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int nomem(gen *g) {
  g->oom = 1;
  return -1;
}

/* Copies |b| into the arena; NULL when out of memory. */
static const char *keep(gen *g, sg_buf *b) {
  char *p;
  if (b->oom) {
    g->oom = 1;
    return NULL;
  }
  p = sg_arena_strdup(&g->arena, sg_buf_str(b));
  if (p == NULL) {
    g->oom = 1;
  }
  return p;
}

/* |a| + |sep| + |b|, without |sep| when |a| is empty.  NULL in, as left by
   a failed allocation before, gives NULL out. */
static const char *join(gen *g, const char *a, const char *sep, const char *b) {
  char *p = NULL;
  if (a != NULL && b != NULL) {
    p = sg_arena_printf(&g->arena, "%s%s%s", a, a[0] != '\0' ? sep : "", b);
  }
  if (p == NULL) {
    g->oom = 1;
  }
  return p;
}

static const char *full_lower(gen *g, const sg_scope *s, const char *full) {
  sg_buf_reset(&g->tmp);
  sg_full_lower(&g->tmp, s, full);
  return keep(g, &g->tmp);
}

static const char *full_c(gen *g, const sg_scope *s, const char *full) {
  sg_buf_reset(&g->tmp);
  sg_full_c(&g->tmp, s, full);
  return keep(g, &g->tmp);
}

/* File names go into #include lines and comments: refuse what would break
   either (quotes, backslashes, comment delimiters, trigraphs, controls). */
static int safe_file_name(const char *s) {
  if (s == NULL || *s == '\0') {
    return 0;
  }
  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c == '*' ||
        c == '?') {
      return 0;
    }
  }
  return 1;
}

/* ---- What protobuf-c takes --------------------------------------------- */

static int reserve(gen *g, const char *name, const char *by) {
  if (name == NULL || sg_map_add(&g->taken, name, (void *)by) < 0) {
    return nomem(g);
  }
  return 0;
}

/* Reserves |prefix| followed by each of |suffixes| (NULL-terminated). */
static int reserve_all(gen *g, const char *prefix, const char *const *suffixes,
                       const char *by) {
  for (; *suffixes != NULL; suffixes++) {
    if (reserve(g, join(g, prefix, "", *suffixes), by) != 0) {
      return -1;
    }
  }
  return 0;
}

static int walk_enum(gen *g, sg_file *f, const char *parent,
                     const Conch__Plugin__EnumDescriptorProto *e) {
  static const char *const c_sfx[] = {"", NULL};
  static const char *const lc_sfx[] = {"__descriptor", NULL};
  const char *full, *by;

  if (!sg_is_ident(e->name)) {
    return fail(g, "%s: invalid enum name in %s", f->name,
                parent[0] != '\0' ? parent : "the file");
  }
  full = join(g, parent, ".", e->name);
  if (full == NULL || f->no_generate) {
    return g->oom ? -1 : 0;
  }
  by = sg_arena_printf(&g->arena, "protobuf-c's code for enum %s", full);
  if (by == NULL) {
    return nomem(g);
  }
  if (reserve_all(g, full_c(g, &f->scope, full), c_sfx, by) != 0 ||
      reserve_all(g, full_lower(g, &f->scope, full), lc_sfx, by) != 0) {
    return -1;
  }
  return 0;
}

/* The case enum of each oneof: FullNameToC(oneof) + "Case". */
static int reserve_oneofs(gen *g, sg_file *f, const sg_type *t,
                          const sg_pb_message *m, const char *by) {
  size_t i;

  for (i = 0; i < m->n_oneof_decl; i++) {
    const char *name = m->oneof_decl[i]->name;
    const char *full, *c;
    if (!sg_is_ident(name)) {
      return fail(g, "%s: invalid oneof name in %s", f->name, t->full);
    }
    full = join(g, t->full, ".", name);
    c = full != NULL ? full_c(g, &f->scope, full) : NULL;
    if (c == NULL ||
        reserve(g, sg_arena_printf(&g->arena, "%sCase", c), by) != 0) {
      return nomem(g);
    }
  }
  return 0;
}

static int walk_message(gen *g, sg_file *f, const char *parent,
                        const sg_pb_message *m, int depth) {
  static const char *const c_sfx[] = {"", "_Closure", NULL};
  static const char *const lc_sfx[] = {
      "__init",   "__get_packed_size", "__pack",       "__pack_to_buffer",
      "__unpack", "__free_unpacked",   "__descriptor", NULL};
  sg_type *t;
  const char *by;
  size_t i;
  int rv;

  if (depth > MAX_NESTING) {
    return fail(g, "%s: messages nested deeper than %d", f->name, MAX_NESTING);
  }
  if (!sg_is_ident(m->name)) {
    return fail(g, "%s: invalid message name in %s", f->name,
                parent[0] != '\0' ? parent : "the file");
  }
  t = sg_arena_calloc(&g->arena, 1, sizeof(*t));
  if (t == NULL) {
    return nomem(g);
  }
  t->full = join(g, parent, ".", m->name);
  if (t->full == NULL) {
    return -1;
  }
  t->c_name = full_c(g, &f->scope, t->full);
  t->lower = full_lower(g, &f->scope, t->full);
  if (t->c_name == NULL || t->lower == NULL) {
    return -1;
  }
  rv = sg_map_add(&g->types, t->full, t);
  if (rv < 0) {
    return nomem(g);
  }
  if (rv == 0) {
    return fail(g, "%s: message %s is defined twice", f->name, t->full);
  }
  if (!f->no_generate) {
    by =
        sg_arena_printf(&g->arena, "protobuf-c's code for message %s", t->full);
    if (by == NULL) {
      return nomem(g);
    }
    if (reserve_all(g, t->c_name, c_sfx, by) != 0 ||
        reserve_all(g, t->lower, lc_sfx, by) != 0) {
      return -1;
    }
    rv = reserve_oneofs(g, f, t, m, by);
    if (rv != 0) {
      return rv;
    }
  }
  for (i = 0; i < m->n_nested_type; i++) {
    rv = walk_message(g, f, t->full, m->nested_type[i], depth + 1);
    if (rv != 0) {
      return rv;
    }
  }
  for (i = 0; i < m->n_enum_type; i++) {
    rv = walk_enum(g, f, t->full, m->enum_type[i]);
    if (rv != 0) {
      return rv;
    }
  }
  return 0;
}

static int walk_service(gen *g, sg_file *f, const sg_pb_service *s) {
  static const char *const c_sfx[] = {"_Service", "_ServiceDestroy", NULL};
  static const char *const lc_sfx[] = {"__init", "__descriptor", NULL};
  const char *full, *lower, *by;
  size_t i;

  if (!sg_is_ident(s->name)) {
    return fail(g, "%s: invalid service name", f->name);
  }
  full = join(g, f->scope.package, ".", s->name);
  if (full == NULL) {
    return -1;
  }
  lower = full_lower(g, &f->scope, full);
  by = sg_arena_printf(&g->arena, "protobuf-c's code for service %s", full);
  if (lower == NULL || by == NULL) {
    return nomem(g);
  }
  if (reserve_all(g, full_c(g, &f->scope, full), c_sfx, by) != 0 ||
      reserve_all(g, lower, lc_sfx, by) != 0) {
    return -1;
  }
  for (i = 0; i < s->n_method; i++) {
    const char *name = s->method[i]->name;
    if (!sg_is_ident(name)) {
      return fail(g, "%s: invalid method name in service %s", f->name, full);
    }
    /* protobuf-c's caller stub is lower__method, with the bare name. */
    sg_buf_reset(&g->tmp);
    sg_buf_printf(&g->tmp, "%s__", lower);
    sg_camel_to_lower(&g->tmp, name);
    by = sg_arena_printf(&g->arena, "protobuf-c's service stub for %s/%s", full,
                         name);
    if (by == NULL || reserve(g, keep(g, &g->tmp), by) != 0) {
      return nomem(g);
    }
  }
  return 0;
}

/* Registers the types of every file and reserves what protobuf-c names. */
static int walk_file(gen *g, sg_file *f) {
  const sg_pb_file *pb = f->pb;
  size_t i;
  int rv;

  for (i = 0; i < pb->n_message_type; i++) {
    rv = walk_message(g, f, f->scope.package, pb->message_type[i], 0);
    if (rv != 0) {
      return rv;
    }
  }
  for (i = 0; i < pb->n_enum_type; i++) {
    rv = walk_enum(g, f, f->scope.package, pb->enum_type[i]);
    if (rv != 0) {
      return rv;
    }
  }
  if (f->no_generate) {
    return 0;
  }
  for (i = 0; i < pb->n_service; i++) {
    rv = walk_service(g, f, pb->service[i]);
    if (rv != 0) {
      return rv;
    }
  }
  return 0;
}

/* ---- Our names --------------------------------------------------------- */

static const char *const all_fn[] = {"__method",   "_start",
                                     "_recv",      "_recv_sync",
                                     "_rpc_send",  "_rpc_finish",
                                     NULL};
static const char *const unary_fn[] = {"_sync", "_async", NULL};
static const char *const client_fn[] = {"_send", "_send_sync", "_close_send",
                                        "_close_and_recv_sync", "_rpc_recv",
                                        NULL};
static const char *const bidi_fn[] = {"_send",     "_send_sync",  "_close_send",
                                      "_rpc_recv", "_rpc_stream", "_rpc_wake",
                                      NULL};
static const char *const server_fn[] = {"_async", "_rpc_stream", "_rpc_wake",
                                        NULL};
static const char *const none[] = {NULL};
static const char *const all_types[] = {"_Call",   "_Handler", "_Rpc",
                                        "_Server", "_Done",    "_OnMessage",
                                        NULL};
/* Server streaming and bidi also have a typed source (_rpc_stream()). */
static const char *const stream_types[] = {"_Call",   "_Handler", "_Rpc",
                                           "_Server", "_Done",    "_OnMessage",
                                           "_Next",   NULL};

static const char *const *kind_fn(sg_kind k) {
  switch (k) {
  case SG_UNARY:
    return unary_fn;
  case SG_CLIENT:
    return client_fn;
  case SG_BIDI:
    return bidi_fn;
  case SG_SERVER:
    break;
  }
  return server_fn;
}

/* The first name of |prefix| + |suffixes| that is taken, or NULL. */
static const char *first_taken(gen *g, const char *prefix,
                               const char *const *suffixes, void **by) {
  for (; *suffixes != NULL; suffixes++) {
    const char *name = join(g, prefix, "", *suffixes);
    if (name == NULL) {
      return NULL;
    }
    if (sg_map_get(&g->taken, name, by)) {
      return name;
    }
  }
  return NULL;
}

/* Picks a free prefix pair (lower, camel): the given ones, else with one
   '_' more each time, the way protobuf-c frees a field named like a
   keyword.  Sets |*taken|/|*taken_by| to the first collision. */
static int pick_prefix(gen *g, const char **lower, const char **camel,
                       const char *const *lsfx1, const char *const *lsfx2,
                       const char *const *csfx, const char *what,
                       const char **taken, const char **taken_by) {
  const char *l = *lower, *c = *camel;
  int k;

  *taken = NULL;
  *taken_by = NULL;
  for (k = 0; k < MAX_RENAMES; k++) {
    void *by = NULL;
    const char *hit = first_taken(g, l, lsfx1, &by);
    if (hit == NULL && !g->oom) {
      hit = first_taken(g, l, lsfx2, &by);
    }
    if (hit == NULL && !g->oom && c != NULL) {
      hit = first_taken(g, c, csfx, &by);
    }
    if (g->oom) {
      return -1;
    }
    if (hit == NULL) {
      *lower = l;
      *camel = c;
      if (reserve_all(g, l, lsfx1, what) != 0 ||
          reserve_all(g, l, lsfx2, what) != 0 ||
          (c != NULL && reserve_all(g, c, csfx, what) != 0)) {
        return -1;
      }
      return 0;
    }
    if (*taken == NULL) {
      *taken = hit;
      *taken_by = by;
    }
    l = join(g, l, "", "_");
    c = c != NULL ? join(g, c, "", "_") : NULL;
    if (l == NULL || g->oom) {
      return -1;
    }
  }
  return fail(g, "%s: cannot find free C names", what);
}

static int build_method(gen *g, sg_file *f, sg_service *s,
                        const sg_pb_method *pm, sg_method *m) {
  const char *svc_lower, *what;
  void *v;

  m->name = pm->name;
  m->full = join(g, s->full, ".", pm->name);
  m->path = sg_arena_printf(&g->arena, "/%s/%s", s->full, pm->name);
  if (m->full == NULL || m->path == NULL) {
    return nomem(g);
  }
  if (pm->client_streaming) {
    m->kind = pm->server_streaming ? SG_BIDI : SG_CLIENT;
  } else {
    m->kind = pm->server_streaming ? SG_SERVER : SG_UNARY;
  }
  if (pm->input_type == NULL || pm->output_type == NULL) {
    return fail(g, "%s: method %s has no input or output type", f->name,
                m->full);
  }
  if (!sg_map_get(&g->types, pm->input_type + (pm->input_type[0] == '.'), &v)) {
    return fail(g, "%s: method %s: unknown message type %s", f->name, m->full,
                pm->input_type);
  }
  m->in = v;
  if (!sg_map_get(&g->types, pm->output_type + (pm->output_type[0] == '.'),
                  &v)) {
    return fail(g, "%s: method %s: unknown message type %s", f->name, m->full,
                pm->output_type);
  }
  m->out = v;
  if (pm->options != NULL) {
    if (pm->options->has_idempotency_level &&
        pm->options->idempotency_level >= 0 &&
        pm->options->idempotency_level <= 2) {
      m->idempotency = (int)pm->options->idempotency_level;
    }
    m->deprecated = pm->options->has_deprecated && pm->options->deprecated;
  }
  svc_lower = full_lower(g, &f->scope, s->full);
  if (svc_lower == NULL) {
    return -1;
  }
  sg_buf_reset(&g->tmp);
  sg_buf_printf(&g->tmp, "%s__", svc_lower);
  sg_camel_to_lower(&g->tmp, pm->name);
  m->lower = keep(g, &g->tmp);
  m->camel = full_c(g, &f->scope, m->full);
  what = sg_arena_printf(&g->arena, "the stubs of %s", m->path + 1);
  if (m->lower == NULL || m->camel == NULL || what == NULL) {
    return nomem(g);
  }
  if (pick_prefix(g, &m->lower, &m->camel, all_fn, kind_fn(m->kind),
                  m->kind == SG_SERVER || m->kind == SG_BIDI ? stream_types
                                                             : all_types,
                  what, &m->taken, &m->taken_by) != 0) {
    return -1;
  }
  /* The prefixes differ from each other's in the part after the service,
     so these members do too. */
  m->member = m->lower + strlen(svc_lower) + 2;
  return 0;
}

static int build_service(gen *g, sg_file *f, const sg_pb_service *ps,
                         sg_service *s, size_t *index) {
  static const char *const table_sfx[] = {"__methods", "__n_methods",
                                          "__register", NULL};
  static const char *const type_sfx[] = {"_Handlers", NULL};
  const char *lower, *camel, *what;
  size_t i;
  int rv;

  s->name = ps->name;
  s->full = join(g, f->scope.package, ".", ps->name);
  if (s->full == NULL) {
    return -1;
  }
  s->deprecated = ps->options != NULL && ps->options->has_deprecated &&
                  ps->options->deprecated;
  lower = full_lower(g, &f->scope, s->full);
  camel = full_c(g, &f->scope, s->full);
  what = sg_arena_printf(&g->arena, "the method table of %s", s->full);
  if (lower == NULL || camel == NULL || what == NULL) {
    return nomem(g);
  }
  rv = pick_prefix(g, &lower, &camel, table_sfx, none, type_sfx, what,
                   &s->taken, &s->taken_by);
  if (rv != 0) {
    return rv;
  }
  s->table = join(g, lower, "", "__methods");
  s->count = join(g, lower, "", "__n_methods");
  s->reg = join(g, lower, "", "__register");
  s->handlers = join(g, camel, "", "_Handlers");
  s->nmethods = ps->n_method;
  s->methods = sg_arena_calloc(&g->arena, ps->n_method + 1, sizeof(sg_method));
  if (s->table == NULL || s->count == NULL || s->reg == NULL ||
      s->handlers == NULL || s->methods == NULL) {
    return nomem(g);
  }
  for (i = 0; i < ps->n_method; i++) {
    s->methods[i].index = (*index)++;
    rv = build_method(g, f, s, ps->method[i], &s->methods[i]);
    if (rv != 0) {
      return rv;
    }
  }
  return 0;
}

/* Hands the comments of SourceCodeInfo to the services and methods they
   belong to: path [6, s] is service s, [6, s, 2, m] its method m. */
static void attach_comments(sg_file *f) {
  const Conch__Plugin__SourceCodeInfo *sci = f->pb->source_code_info;
  size_t i;

  if (sci == NULL) {
    return;
  }
  for (i = 0; i < sci->n_location; i++) {
    const Conch__Plugin__SourceCodeInfo__Location *loc = sci->location[i];
    const int32_t *p = loc->path;
    const char **lead = NULL, **trail = NULL;

    if (loc->n_path < 2 || p[0] != 6 || p[1] < 0 ||
        (size_t)p[1] >= f->nservices) {
      continue;
    }
    if (loc->n_path == 2) {
      lead = &f->services[p[1]].leading;
      trail = &f->services[p[1]].trailing;
    } else if (loc->n_path == 4 && p[2] == 2 && p[3] >= 0 &&
               (size_t)p[3] < f->services[p[1]].nmethods) {
      lead = &f->services[p[1]].methods[p[3]].leading;
      trail = &f->services[p[1]].methods[p[3]].trailing;
    } else {
      continue;
    }
    if (loc->leading_comments != NULL && *lead == NULL) {
      *lead = loc->leading_comments;
    }
    if (loc->trailing_comments != NULL && *trail == NULL) {
      *trail = loc->trailing_comments;
    }
  }
}

static int build_file(gen *g, sg_file *f) {
  size_t i, index = 0;
  int rv;

  sg_buf_reset(&g->tmp);
  sg_strip_proto(&g->tmp, f->name);
  f->base = keep(g, &g->tmp);
  sg_buf_reset(&g->tmp);
  sg_file_ident(&g->tmp, f->name);
  f->ident = keep(g, &g->tmp);
  f->fdesc = f->ident != NULL
                 ? sg_arena_printf(&g->arena, "conch_file_%s", f->ident)
                 : NULL;
  f->nservices = f->pb->n_service;
  f->services =
      sg_arena_calloc(&g->arena, f->nservices + 1, sizeof(sg_service));
  if (f->base == NULL || f->fdesc == NULL || f->services == NULL) {
    return nomem(g);
  }
  for (i = 0; i < f->nservices; i++) {
    rv = build_service(g, f, f->pb->service[i], &f->services[i], &index);
    if (rv != 0) {
      return rv;
    }
    f->services[i].fdesc = f->fdesc;
  }
  attach_comments(f);
  return 0;
}

/* ---- Files ------------------------------------------------------------- */

static int add_file(gen *g, const sg_pb_file *pb, sg_file *f) {
  const Conch__Plugin__ProtobufCFileOptions *pbc = NULL;
  int rv;

  if (!safe_file_name(pb->name)) {
    return fail(g, "unusable file name \"%s\"",
                pb->name != NULL ? pb->name : "");
  }
  f->pb = pb;
  f->name = pb->name;
  f->scope.package = pb->package != NULL ? pb->package : "";
  if (!sg_is_dotted(f->scope.package, 1)) {
    return fail(g, "%s: invalid package name", f->name);
  }
  if (pb->options != NULL) {
    pbc = pb->options->pb_c_file;
  }
  if (pbc != NULL && pbc->c_package != NULL) {
    if (!sg_is_dotted(pbc->c_package, 0)) {
      return fail(g, "%s: invalid (pb_c_file).c_package", f->name);
    }
    f->scope.c_package = pbc->c_package;
  }
  f->no_generate = pbc != NULL && pbc->has_no_generate && pbc->no_generate;
  rv = sg_map_add(&g->files, f->name, f);
  if (rv < 0) {
    return nomem(g);
  }
  if (rv == 0) {
    return fail(g, "%s: given twice", f->name);
  }
  return 0;
}

/* Resolves |f|'s imports among the files protoc sent (it sends every file
   an import names, before the file). */
static int link_deps(gen *g, sg_file *f) {
  size_t i;

  f->ndeps = f->pb->n_dependency;
  f->deps = sg_arena_calloc(&g->arena, f->ndeps + 1, sizeof(*f->deps));
  if (f->deps == NULL) {
    return nomem(g);
  }
  for (i = 0; i < f->ndeps; i++) {
    void *v;
    if (!sg_map_get(&g->files, f->pb->dependency[i], &v)) {
      return fail(g, "%s: imports %s, which protoc did not send", f->name,
                  f->pb->dependency[i]);
    }
    f->deps[i] = v;
  }
  return 0;
}

static int add_output(gen *g, sg_result *res, const char *base, const char *ext,
                      sg_buf *text) {
  sg_file_out *o = &res->files[res->nfiles];
  size_t n = strlen(base) + strlen(ext) + 1;

  (void)g;
  o->name = malloc(n);
  o->content = malloc(text->len + 1);
  if (o->name == NULL || o->content == NULL) {
    free(o->name);
    free(o->content);
    o->name = NULL;
    o->content = NULL;
    return -1;
  }
  snprintf(o->name, n, "%s%s", base, ext);
  memcpy(o->content, sg_buf_str(text), text->len + 1);
  o->len = text->len;
  res->nfiles++;
  return 0;
}

static int run(gen *g, sg_result *res) {
  const Conch__Plugin__CodeGeneratorRequest *req = g->req;
  sg_buf text;
  size_t i;
  int rv = 0;

  if (req->parameter != NULL && req->parameter[0] != '\0') {
    return fail(g, "protoc-gen-conch takes no options (got \"%s\")",
                req->parameter);
  }
  g->nf = req->n_proto_file;
  g->fv = sg_arena_calloc(&g->arena, g->nf + 1, sizeof(sg_file));
  if (g->fv == NULL) {
    return nomem(g);
  }
  for (i = 0; i < g->nf; i++) {
    rv = add_file(g, req->proto_file[i], &g->fv[i]);
    if (rv != 0) {
      return rv;
    }
  }
  for (i = 0; i < g->nf; i++) {
    rv = link_deps(g, &g->fv[i]);
    if (rv != 0) {
      return rv;
    }
  }
  for (i = 0; i < g->nf; i++) {
    rv = walk_file(g, &g->fv[i]);
    if (rv != 0) {
      return rv;
    }
  }
  /* Our names are handed out in the order of the command line, so that
     files generated together never share one. */
  for (i = 0; i < req->n_file_to_generate; i++) {
    void *v;
    sg_file *f;
    if (!sg_map_get(&g->files, req->file_to_generate[i], &v)) {
      return fail(g, "%s: not among the files protoc sent",
                  req->file_to_generate[i]);
    }
    f = v;
    if (f->generate) {
      return fail(g, "%s: named twice", f->name);
    }
    f->generate = 1;
    if (!f->no_generate) {
      rv = build_file(g, f);
      if (rv != 0) {
        return rv;
      }
    }
  }
  res->files = calloc(2 * req->n_file_to_generate + 1, sizeof(sg_file_out));
  if (res->files == NULL) {
    return nomem(g);
  }
  sg_buf_init(&text);
  for (i = 0; i < req->n_file_to_generate && rv == 0; i++) {
    void *v = NULL;
    const sg_file *f;
    sg_map_get(&g->files, req->file_to_generate[i], &v);
    f = v;
    if (f->no_generate) {
      continue; /* protoc-c writes nothing for it either */
    }
    sg_buf_reset(&text);
    rv = sg_emit_header(&text, f);
    if (rv == 0) {
      rv = add_output(g, res, f->base, ".conch.h", &text);
    }
    if (rv == 0) {
      sg_buf_reset(&text);
      rv = sg_emit_source(&text, f);
    }
    if (rv == 0) {
      rv = add_output(g, res, f->base, ".conch.c", &text);
    }
  }
  sg_buf_free(&text);
  if (rv != 0) {
    return nomem(g);
  }
  return 0;
}

int sg_generate(const Conch__Plugin__CodeGeneratorRequest *req,
                sg_result *res) {
  gen g;
  int rv;

  memset(res, 0, sizeof(*res));
  memset(&g, 0, sizeof(g));
  g.req = req;
  sg_arena_init(&g.arena);
  sg_map_init(&g.files, &g.arena);
  sg_map_init(&g.types, &g.arena);
  sg_map_init(&g.taken, &g.arena);
  sg_buf_init(&g.err);
  sg_buf_init(&g.tmp);

  rv = run(&g, res);
  if (rv != 0 && !g.oom) {
    res->error = malloc(g.err.len + 1);
    if (res->error == NULL || g.err.oom) {
      g.oom = 1;
    } else {
      memcpy(res->error, sg_buf_str(&g.err), g.err.len + 1);
    }
  }
  if (rv != 0) {
    /* An error leaves no files behind: protoc would not write them. */
    size_t i;
    for (i = 0; i < res->nfiles; i++) {
      free(res->files[i].name);
      free(res->files[i].content);
    }
    free(res->files);
    res->files = NULL;
    res->nfiles = 0;
  }
  sg_map_free(&g.files);
  sg_map_free(&g.types);
  sg_map_free(&g.taken);
  sg_buf_free(&g.err);
  sg_buf_free(&g.tmp);
  sg_arena_free(&g.arena);
  return g.oom ? -1 : 0;
}

void sg_result_free(sg_result *res) {
  size_t i;
  if (res == NULL) {
    return;
  }
  for (i = 0; i < res->nfiles; i++) {
    free(res->files[i].name);
    free(res->files[i].content);
  }
  free(res->files);
  free(res->error);
  memset(res, 0, sizeof(*res));
}
