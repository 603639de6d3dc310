/* Fuzz target: descriptors built at run time and the JSON codec over them
   (runtime/codec/dynamic.c, conch/dynamic.h).  The input is a big-endian 16-bit
   length N, N bytes taken as a FileDescriptorProto, and the rest taken as
   JSON and as protobuf.  The N bytes also go through conch_fileset as a
   FileDescriptorSet.  Every message and method the file declares (top
   level and one level nested) is built; for each message, the JSON is
   read; what reads must write, and what that writes must read back and
   write the same again.  Bad descriptors must be refused, never crash or
   leak.  Failures abort(). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/descriptor.h>
#include <conch/dynamic.h>
#include <conch/status.h>

#include "fuzz.h"

#define MAX_NAMES 16

typedef struct rd {
  const uint8_t *p, *end;
} rd;

static int varint(rd *r, uint64_t *v) {
  int s;
  *v = 0;
  for (s = 0; s < 64 && r->p < r->end; s += 7) {
    uint8_t c = *r->p++;
    *v |= (uint64_t)(c & 0x7f) << s;
    if ((c & 0x80) == 0) {
      return 0;
    }
  }
  return -1;
}

/* The next length-delimited field: 1, or 0 at the end or on bad bytes. */
static int next_ld(rd *r, uint32_t *num, const uint8_t **d, size_t *n) {
  while (r->p < r->end) {
    uint64_t key, v;
    if (varint(r, &key) != 0) {
      return 0;
    }
    switch (key & 7) {
    case 0:
      if (varint(r, &v) != 0) {
        return 0;
      }
      break;
    case 1:
    case 5: {
      size_t k = (key & 7) == 1 ? 8 : 4;
      if ((size_t)(r->end - r->p) < k) {
        return 0;
      }
      r->p += k;
      break;
    }
    case 2:
      if (varint(r, &v) != 0 || v > (uint64_t)(r->end - r->p)) {
        return 0;
      }
      *num = (uint32_t)(key >> 3);
      *d = r->p;
      *n = (size_t)v;
      r->p += v;
      return 1;
    default:
      return 0;
    }
  }
  return 0;
}

static int name_of(const uint8_t *p, size_t n, const uint8_t **s, size_t *sl) {
  rd r;
  uint32_t num;
  const uint8_t *d;
  size_t dl;
  r.p = p;
  r.end = p + n;
  while (next_ld(&r, &num, &d, &dl)) {
    if (num == 1) {
      *s = d;
      *sl = dl;
      return 1;
    }
  }
  return 0;
}

typedef struct names {
  char v[MAX_NAMES][512];
  int method[MAX_NAMES];
  size_t n;
} names;

static void add_name(names *ns, const char *scope, const uint8_t *s, size_t sl,
                     const char *sep, int method) {
  if (ns->n == MAX_NAMES || strlen(scope) + sl + 2 > sizeof(ns->v[0])) {
    return;
  }
  snprintf(ns->v[ns->n], sizeof(ns->v[0]), "%s%s%.*s", scope,
           scope[0] != '\0' ? sep : "", (int)sl, (const char *)s);
  ns->method[ns->n] = method;
  ns->n++;
}

static void gather(const uint8_t *p, size_t n, names *ns) {
  char pkg[256] = "";
  rd r;
  uint32_t num;
  const uint8_t *d, *s;
  size_t dl, sl;

  r.p = p;
  r.end = p + n;
  while (next_ld(&r, &num, &d, &dl)) {
    if (num == 2 && dl < sizeof(pkg)) {
      memcpy(pkg, d, dl);
      pkg[dl] = '\0';
    }
  }
  r.p = p;
  while (next_ld(&r, &num, &d, &dl)) {
    if ((num == 4 || num == 6) && name_of(d, dl, &s, &sl)) {
      size_t at = ns->n;
      rd q;
      uint32_t k;
      const uint8_t *e, *t;
      size_t el, tl;
      add_name(ns, pkg, s, sl, ".", 0);
      if (at == ns->n) {
        continue;
      }
      q.p = d;
      q.end = d + dl;
      while (next_ld(&q, &k, &e, &el)) {
        if (((num == 4 && k == 3) || (num == 6 && k == 2)) &&
            name_of(e, el, &t, &tl)) {
          char scope[512];
          snprintf(scope, sizeof(scope), "%s", ns->v[at]);
          add_name(ns, scope, t, tl, num == 6 ? "/" : ".", num == 6);
        }
      }
      if (num == 6) {
        ns->method[at] = -1; /* the service itself: not built */
      }
    }
  }
}

/* JSON -> protobuf -> JSON -> protobuf -> JSON: the last two agree. */
static void codec(conch_dynamic *dyn, const ProtobufCMessageDescriptor *md,
                  const uint8_t *rest, size_t rn) {
  uint8_t *b1 = NULL, *b2 = NULL;
  char *j1 = NULL, *j2 = NULL, *j0 = NULL;
  size_t n1, n2, m1, m2, m0;
  conch_status st;

  conch_status_init(&st);
  if (conch_dynamic_json_to_pb(dyn, md, (const char *)rest, rn, &b1, &n1,
                               &st) == 0) {
    int rc = conch_dynamic_pb_to_json(dyn, md, b1, n1, &j1, &m1, &st);
    CHECK(rc == 0 || rc == CONCH_ERR_CODEC);
    if (rc == 0) {
      CHECK(strlen(j1) == m1);
      CHECK(conch_dynamic_json_to_pb(dyn, md, j1, m1, &b2, &n2, &st) == 0);
      CHECK(conch_dynamic_pb_to_json(dyn, md, b2, n2, &j2, &m2, &st) == 0);
      CHECK(m1 == m2 && memcmp(j1, j2, m1) == 0);
    }
  } else {
    CHECK(b1 == NULL);
  }
  /* The same bytes as protobuf: anything but a crash. */
  if (conch_dynamic_pb_to_json(dyn, md, rest, rn, &j0, &m0, &st) == 0) {
    CHECK(strlen(j0) == m0);
  }
  conch_dynamic_buf_free(dyn, b1);
  conch_dynamic_buf_free(dyn, b2);
  conch_dynamic_buf_free(dyn, j0);
  conch_dynamic_buf_free(dyn, j1);
  conch_dynamic_buf_free(dyn, j2);
  conch_status_clear(&st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const conch_file_descriptor *const nodeps[] = {NULL};
  conch_file_descriptor fd;
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  names ns;
  size_t n, i;

  if (size < 2) {
    return 0;
  }
  n = (size_t)data[0] << 8 | data[1];
  if (n > size - 2) {
    n = size - 2;
  }
  fd.name = "fuzz.proto";
  fd.data = data + 2;
  fd.len = n;
  fd.deps = nodeps;
  /* The same bytes as a FileDescriptorSet (conch_fileset). */
  {
    conch_fileset *fs = NULL;
    conch_descpool *p2 = NULL;
    int rc;
    CHECK(conch_fileset_new(&fs, NULL) == 0);
    rc = conch_fileset_add_set(fs, fd.data, fd.len);
    CHECK(rc == 0 || rc == CONCH_ERR_INVALID);
    CHECK(conch_descpool_new(&p2, NULL) == 0);
    rc = conch_fileset_to_pool(fs, p2);
    CHECK(rc == 0 || rc == CONCH_ERR_INVALID);
    CHECK(conch_descpool_n_files(p2) <= conch_fileset_n_files(fs));
    conch_descpool_free(p2);
    conch_fileset_free(fs);
  }
  CHECK(conch_descpool_new(&pool, NULL) == 0);
  if (conch_descpool_add(pool, &fd) != 0) {
    conch_descpool_free(pool);
    return 0;
  }
  CHECK(conch_dynamic_new(&dyn, pool, NULL) == 0);
  memset(&ns, 0, sizeof(ns));
  gather(fd.data, fd.len, &ns);
  for (i = 0; i < ns.n; i++) {
    const ProtobufCMessageDescriptor *md = NULL;
    const conch_method *m = NULL;
    int rc;
    if (ns.method[i] == 1) {
      rc = conch_dynamic_method(dyn, ns.v[i], &m);
      CHECK(rc == 0 || rc == CONCH_ERR_INVALID);
      CHECK((rc == 0) == (m != NULL));
      if (rc == 0) {
        CHECK(m->input != NULL && m->output != NULL && m->path[0] == '/');
        codec(dyn, m->input, data + 2 + n, size - 2 - n);
      }
    } else if (ns.method[i] == 0) {
      rc = conch_dynamic_message(dyn, ns.v[i], &md);
      CHECK(rc == 0 || rc == CONCH_ERR_INVALID);
      CHECK((rc == 0) == (md != NULL));
      CHECK(conch_dynamic_error(dyn) != NULL);
      if (rc == 0) {
        codec(dyn, md, data + 2 + n, size - 2 - n);
      }
    }
  }
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
  return 0;
}
