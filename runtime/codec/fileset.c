/* conch/dynamic.h: conch_fileset, FileDescriptorProtos that arrive at run
   time (a FileDescriptorSet, a reflection answer), linked by name and
   added to a pool. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/dynamic.h>
#include <conch/features.h>

#include "buf.h"
#include "dynamic_int.h"
#include "fileset_int.h"
#include "json.h"
#include "mem_int.h"
#include "pbjson.h"
#if CONCH_WITH_JSON
#include "pbjson_int.h"
#endif

/* ---- Files that arrive at run time --------------------------------------- */

#define MAX_SET_FILES 65535

typedef struct set_file {
  conch_file_descriptor fd;
  uint8_t *data;
  char *name;
  const conch_file_descriptor **deps; /* NULL-terminated, linked late */
  size_t ndeps;                       /* imports declared */
} set_file;

struct conch_fileset {
  conch_mem mem;
  set_file **files;
  size_t n, cap;
};

int conch_fileset_new(conch_fileset **out, const conch_mem *mem) {
  conch_fileset *fs;
  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  if (mem == NULL) {
    mem = conch_mem_default();
  }
  fs = conch__calloc(mem, 1, sizeof(*fs));
  if (fs == NULL) {
    return CONCH_ERR_NOMEM;
  }
  fs->mem = *mem;
  *out = fs;
  return 0;
}

static void set_file_free(const conch_mem *mem, set_file *f) {
  if (f != NULL) {
    conch__free(mem, f->data);
    conch__free(mem, f->name);
    conch__free(mem, f->deps);
    conch__free(mem, f);
  }
}

void conch_fileset_free(conch_fileset *fs) {
  size_t i;
  if (fs == NULL) {
    return;
  }
  for (i = 0; i < fs->n; i++) {
    set_file_free(&fs->mem, fs->files[i]);
  }
  conch__free(&fs->mem, fs->files);
  conch__free(&fs->mem, fs);
}

static set_file *set_find(const conch_fileset *fs, const uint8_t *name,
                          size_t nl) {
  size_t i;
  for (i = 0; i < fs->n; i++) {
    if (name_eq(name, nl, fs->files[i]->name, strlen(fs->files[i]->name))) {
      return fs->files[i];
    }
  }
  return NULL;
}

int conch_fileset_add_file(conch_fileset *fs, const uint8_t *fdp, size_t len) {
  const uint8_t *s = NULL;
  size_t sl = 0, ndeps = 0;
  set_file *f;
  rd r;
  fld fl;
  int rc;

  if (fs == NULL || (fdp == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  r = rd_of(fdp, len);
  while ((rc = conch__pbw_next(&r, &fl)) == 1) {
    ndeps += fl.num == 3 && fl.wt == 2;
  }
  if (rc < 0 || conch__dyn_get_str(fdp, len, 1, &s, &sl) != 1 || sl == 0 ||
      memchr(s, '\0', sl) != NULL) {
    return CONCH_ERR_INVALID;
  }
  if (set_find(fs, s, sl) != NULL) {
    return 0;
  }
  if (fs->n == MAX_SET_FILES) {
    return CONCH_ERR_INVALID;
  }
  if (fs->n == fs->cap) {
    size_t cap = fs->cap != 0 ? fs->cap * 2 : 16;
    set_file **nf = conch__realloc(&fs->mem, fs->files, cap * sizeof(*nf));
    if (nf == NULL) {
      return CONCH_ERR_NOMEM;
    }
    fs->files = nf;
    fs->cap = cap;
  }
  f = conch__calloc(&fs->mem, 1, sizeof(*f));
  if (f == NULL) {
    return CONCH_ERR_NOMEM;
  }
  f->data = conch__malloc(&fs->mem, len > 0 ? len : 1);
  f->name = conch__strndup(&fs->mem, (const char *)s, sl);
  f->deps = conch__calloc(&fs->mem, ndeps + 1, sizeof(*f->deps));
  if (f->data == NULL || f->name == NULL || f->deps == NULL) {
    set_file_free(&fs->mem, f);
    return CONCH_ERR_NOMEM;
  }
  if (len > 0) {
    memcpy(f->data, fdp, len);
  }
  f->ndeps = ndeps;
  f->fd.name = f->name;
  f->fd.data = f->data;
  f->fd.len = len;
  f->fd.deps = f->deps;
  fs->files[fs->n++] = f;
  return 0;
}

int conch_fileset_add_set(conch_fileset *fs, const uint8_t *set, size_t len) {
  rd r;
  fld f;
  int rc;
  if (fs == NULL || (set == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  r = rd_of(set, len);
  while ((rc = conch__pbw_next(&r, &f)) == 1) {
    if (f.num == 1 && f.wt == 2) {
      int arc = conch_fileset_add_file(fs, f.data, f.len);
      if (arc != 0) {
        return arc;
      }
    }
  }
  return rc < 0 ? CONCH_ERR_INVALID : 0;
}

int conch_fileset_add_set_json(conch_fileset *fs, const char *json,
                               size_t len) {
  static const conch_file_descriptor desc = {
      "google/protobuf/descriptor.proto", NULL, 0, NULL};
  conch_file_descriptor d = desc;
  const ProtobufCMessageDescriptor *md = NULL;
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  uint8_t *pb = NULL;
  size_t pl = 0;
  int rc;

  if (fs == NULL || (json == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  d.data = conch__descriptor_proto_fdp;
  d.len = conch__descriptor_proto_fdp_len;
  {
    static const conch_file_descriptor *const none[] = {NULL};
    d.deps = none;
  }
  if ((rc = conch_descpool_new(&pool, &fs->mem)) == 0 &&
      (rc = conch_descpool_add(pool, &d)) == 0 &&
      (rc = conch_dynamic_new(&dyn, pool, &fs->mem)) == 0 &&
      (rc = conch_dynamic_message(dyn, "google.protobuf.FileDescriptorSet",
                                  &md)) == 0 &&
      (rc = conch_dynamic_json_to_pb(dyn, md, json, len, &pb, &pl, NULL)) ==
          0) {
    rc = conch_fileset_add_set(fs, pb, pl);
  }
  if (rc == CONCH_ERR_CODEC || rc == CONCH_ERR_LIMIT) {
    rc = CONCH_ERR_INVALID;
  }
#if CONCH_WITH_JSON
  if (rc == CONCH_ERR_UNSUPPORTED) {
    rc = CONCH_ERR_INVALID; /* an extension's key ("[x]"): not a set */
  }
#endif
  conch_dynamic_buf_free(dyn, pb);
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
  return rc;
}

size_t conch_fileset_n_files(const conch_fileset *fs) {
  return fs != NULL ? fs->n : 0;
}

const conch_file_descriptor *conch_fileset_file_at(const conch_fileset *fs,
                                                   size_t i) {
  return fs != NULL && i < fs->n ? &fs->files[i]->fd : NULL;
}

int conch_fileset_to_pool(conch_fileset *fs, conch_descpool *pool) {
  size_t i;
  if (fs == NULL || pool == NULL) {
    return CONCH_ERR_INVALID;
  }
  for (i = 0; i < fs->n; i++) {
    set_file *f = fs->files[i];
    size_t k = 0;
    rd r = rd_of(f->data, f->fd.len);
    fld fl;
    while (conch__pbw_next(&r, &fl) == 1 && k < f->ndeps) {
      set_file *dep;
      if (fl.num != 3 || fl.wt != 2) {
        continue;
      }
      dep = set_find(fs, fl.data, fl.len);
      if (dep != NULL && dep != f) {
        f->deps[k++] = &dep->fd;
      }
    }
    f->deps[k] = NULL;
  }
  for (i = 0; i < fs->n; i++) {
    int rc = conch_descpool_add(pool, &fs->files[i]->fd);
    if (rc != 0) {
      return rc;
    }
  }
  return 0;
}
