/* A field's default value and its JSON name, for the builder of
   dynamic.c (conch/dynamic.h): proto2 defaults as
   FieldDescriptorProto.default_value writes them, and [json_name]s, the
   derived ones dropped and the custom ones kept for the JSON codec. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <conch/dynamic.h>

#include "dynamic_int.h"
#include "jsonname.h"
#include "mem_int.h"

/* A bytes field's default as FieldDescriptorProto.default_value writes it:
   C-escaped, as protoc's CEscape (\n \r \t \" \' \\ \? \a \b \f \v,
   octal \NNN of 1 to 3 digits, hex \xH and \xHH).  In the arena, or NULL
   with an error. */
static const void *bytes_default(conch_dynamic *d, const char *msg,
                                 const ProtobufCFieldDescriptor *fd,
                                 const uint8_t *s, size_t sl, int *rc) {
  ProtobufCBinaryData *b = conch__dyn_alloc(d, sizeof(*b));
  uint8_t *out = conch__dyn_alloc(d, sl > 0 ? sl : 1);
  size_t i = 0, n = 0;

  if (b == NULL || out == NULL) {
    *rc = conch__dyn_nomem(d);
    return NULL;
  }
  while (i < sl) {
    uint8_t c = s[i++];
    if (c != '\\') {
      out[n++] = c;
      continue;
    }
    if (i == sl) {
      goto bad;
    }
    c = s[i++];
    switch (c) {
    case 'n':
      out[n++] = '\n';
      break;
    case 'r':
      out[n++] = '\r';
      break;
    case 't':
      out[n++] = '\t';
      break;
    case 'a':
      out[n++] = '\a';
      break;
    case 'b':
      out[n++] = '\b';
      break;
    case 'f':
      out[n++] = '\f';
      break;
    case 'v':
      out[n++] = '\v';
      break;
    case '"':
    case '\'':
    case '\\':
    case '?':
      out[n++] = c;
      break;
    case 'x':
    case 'X': {
      unsigned v = 0, k;
      for (k = 0; k < 2 && i < sl; k++, i++) {
        uint8_t h = s[i];
        unsigned dv = h >= '0' && h <= '9'   ? (unsigned)(h - '0')
                      : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                      : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
                                             : 16u;
        if (dv == 16) {
          break;
        }
        v = v * 16 + dv;
      }
      if (k == 0) {
        goto bad;
      }
      out[n++] = (uint8_t)v;
      break;
    }
    default:
      if (c >= '0' && c <= '7') {
        unsigned v = (unsigned)(c - '0'), k;
        for (k = 1; k < 3 && i < sl && s[i] >= '0' && s[i] <= '7'; k++, i++) {
          v = v * 8 + (unsigned)(s[i] - '0');
        }
        if (v > 0xff) {
          goto bad;
        }
        out[n++] = (uint8_t)v;
        break;
      }
      goto bad;
    }
  }
  b->data = out;
  b->len = n;
  *rc = 0;
  return b;
bad:
  *rc = conch__dyn_fail(d, CONCH_ERR_INVALID,
                        "%.300s.%.100s: bad bytes default", msg, fd->name);
  return NULL;
}

/* A proto2 default's value in the arena, or NULL with an error. */
const void *conch__dyn_default(conch_dynamic *d, const char *msg,
                               const ProtobufCFieldDescriptor *fd,
                               const uint8_t *s, size_t sl, int *rc) {
  char buf[128];
  char *end = NULL;
  void *v;

  *rc = 0;
  if (fd->type == PROTOBUF_C_TYPE_STRING) {
    v = conch__dyn_strndup(d, (const char *)s, sl);
    if (v == NULL) {
      *rc = conch__dyn_nomem(d);
    }
    return v;
  }
  if (fd->type == PROTOBUF_C_TYPE_BYTES) {
    return bytes_default(d, msg, fd, s, sl, rc);
  }
  if (sl >= sizeof(buf)) {
    goto bad;
  }
  memcpy(buf, s, sl);
  buf[sl] = '\0';
  v = conch__dyn_alloc(d, 8);
  if (v == NULL) {
    *rc = conch__dyn_nomem(d);
    return NULL;
  }
  errno = 0;
  switch (fd->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32: {
    long long x = strtoll(buf, &end, 0);
    if (x < INT32_MIN || x > INT32_MAX) {
      goto bad;
    }
    *(int32_t *)v = (int32_t)x;
    break;
  }
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32: {
    unsigned long long x = strtoull(buf, &end, 0);
    if (x > UINT32_MAX || buf[0] == '-') {
      goto bad;
    }
    *(uint32_t *)v = (uint32_t)x;
    break;
  }
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    *(int64_t *)v = (int64_t)strtoll(buf, &end, 0);
    break;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (buf[0] == '-') {
      goto bad;
    }
    *(uint64_t *)v = (uint64_t)strtoull(buf, &end, 0);
    break;
  case PROTOBUF_C_TYPE_FLOAT:
    *(float *)v = strtof(buf, &end);
    errno = 0;
    break;
  case PROTOBUF_C_TYPE_DOUBLE:
    *(double *)v = strtod(buf, &end);
    errno = 0;
    break;
  case PROTOBUF_C_TYPE_BOOL:
    if (strcmp(buf, "true") == 0) {
      *(protobuf_c_boolean *)v = 1;
    } else if (strcmp(buf, "false") != 0) {
      goto bad;
    }
    end = buf + sl;
    break;
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value_by_name(fd->descriptor, buf);
    if (ev == NULL) {
      goto bad;
    }
    *(int *)v = ev->value;
    end = buf + sl;
    break;
  }
  default:
    goto bad;
  }
  if (errno != 0 || end == buf || *end != '\0') {
    goto bad;
  }
  return v;
bad:
  *rc = conch__dyn_fail(d, CONCH_ERR_INVALID,
                        "%.300s.%.100s: bad default value", msg, fd->name);
  return NULL;
}

const char conch__dyn_json_mark[] = "conch_dynamic json_name";

/* A field's JSON name, with where it was declared. */
typedef struct jname {
  const char *s;
  size_t decl;
} jname;

static int cmp_jname(const void *a, const void *b) {
  const jname *x = a, *y = b;
  int c = strcmp(x->s, y->s);
  if (c != 0) {
    return c;
  }
  return x->decl < y->decl ? -1 : x->decl > y->decl;
}

/* Whether the sorted |v| (|n|) has |s| as the name of a group's first
   field, one that owns the name in JSON. */
static int owns(const jname *v, size_t n, const char *s) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(v[mid].s, s) < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && strcmp(v[lo].s, s) == 0;
}

static int ident(const char *s) {
  for (; *s != '\0'; s++) {
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || *s == '_')) {
      return 0;
    }
  }
  return 1;
}

/* One pass over the sorted |v|: the first clash refused (|custom_only|:
   only one between two custom names), or 0.  A name declared twice is left
   to the builder, which refuses it as such. */
static int clash(conch_dynamic *d, const char *msg,
                 const ProtobufCFieldDescriptor *fields, const jname *v,
                 size_t nf, int custom_only) {
  size_t i;
  for (i = 1; i < nf; i++) {
    const ProtobufCFieldDescriptor *a = &fields[v[i - 1].decl],
                                   *b = &fields[v[i].decl];
    if (strcmp(v[i - 1].s, v[i].s) != 0 || strcmp(a->name, b->name) == 0 ||
        (custom_only && (a->reserved2 == NULL || b->reserved2 == NULL))) {
      continue;
    }
    return conch__dyn_fail(d, CONCH_ERR_INVALID,
                           "%.300s: fields %.100s and %.100s have one "
                           "JSON name \"%.100s\"",
                           msg, a->name, b->name, v[i].s);
  }
  return 0;
}

int conch__dyn_json_names(conch_dynamic *d, const char *msg,
                          ProtobufCFieldDescriptor *fields, size_t nf,
                          int proto3) {
  jname *def, *eff;
  char *buf;
  size_t i, total = 0, at = 0;
  int rc = 0;

  if (nf < 2) {
    return 0;
  }
  for (i = 0; i < nf; i++) {
    total += strlen(fields[i].name) + 1;
  }
  def = conch__malloc(&d->mem, nf * sizeof(*def));
  eff = conch__malloc(&d->mem, nf * sizeof(*eff));
  buf = conch__malloc(&d->mem, total);
  if (def == NULL || eff == NULL || buf == NULL) {
    rc = conch__dyn_nomem(d);
    goto out;
  }
  for (i = 0; i < nf; i++) {
    def[i].s = buf + at;
    def[i].decl = i;
    at += conch__json_name(fields[i].name, buf + at) + 1;
    eff[i].s = fields[i].reserved2 != NULL ? (const char *)fields[i].reserved2
                                           : def[i].s;
    eff[i].decl = i;
  }
  qsort(def, nf, sizeof(*def), cmp_jname);
  qsort(eff, nf, sizeof(*eff), cmp_jname);
  if (proto3) {
    /* protoc: the derived names, then those in effect. */
    if ((rc = clash(d, msg, fields, def, nf, 0)) == 0) {
      rc = clash(d, msg, fields, eff, nf, 0);
    }
    goto out;
  }
  /* proto2 (protoc's LEGACY_BEST_EFFORT): two custom names clashing are
     refused; a clash with a derived name only warned about there. */
  if ((rc = clash(d, msg, fields, eff, nf, 1)) != 0) {
    goto out;
  }
  /* The field declared first owns a name in JSON (protojson's ByJSONName);
     the others are shadowed: read only through their proto name, which
     they are written with when it reaches them (no owner has it as its
     JSON name), else with their JSON name, as protojson writes it. */
  {
    size_t nown = 0;
    const char *prev = NULL;
    for (i = 0; i < nf; i++) {
      if (prev == NULL || strcmp(prev, eff[i].s) != 0) {
        prev = eff[i].s;
        eff[nown++] = eff[i];
      } else {
        /* the shadowed ones, marked; named below once the owners are
           known */
        fields[eff[i].decl].reserved3 = (void *)(uintptr_t)msg;
      }
    }
    for (i = 0; i < nf && rc == 0; i++) {
      ProtobufCFieldDescriptor *f = &fields[i];
      char *jn;
      if (f->reserved3 == NULL) {
        continue;
      }
      if (ident(f->name) && !owns(eff, nown, f->name)) {
        f->reserved3 = (void *)(uintptr_t)f->name;
        continue;
      }
      if (f->reserved2 != NULL) {
        f->reserved3 = f->reserved2;
        continue;
      }
      jn = conch__dyn_alloc(d, strlen(f->name) + 1);
      if (jn == NULL) {
        rc = conch__dyn_nomem(d);
        break;
      }
      (void)conch__json_name(f->name, jn);
      f->reserved3 = jn;
    }
  }
out:
  conch__free(&d->mem, def);
  conch__free(&d->mem, eff);
  conch__free(&d->mem, buf);
  return rc;
}

/* A [json_name = ...] that is not the derived one, kept for the JSON codec
   (pbjson_int.h, conch__pbj_custom_name()). */
int conch__dyn_json_name(conch_dynamic *d, dmsg *dm, const char *msg,
                         ProtobufCFieldDescriptor *fd, const pfield *pf) {
  size_t k;
  char *jn;
  if (conch__json_name_eq(fd->name, (const char *)pf->json, pf->jl)) {
    return 0;
  }
  if (pf->jl > MAX_NAME) {
    goto bad;
  }
  for (k = 0; k < pf->jl; k++) {
    if (pf->json[k] < 0x20 || pf->json[k] > 0x7e || pf->json[k] == '"' ||
        pf->json[k] == '\\') {
      goto bad;
    }
  }
  jn = conch__dyn_strndup(d, (const char *)pf->json, pf->jl);
  if (jn == NULL) {
    return conch__dyn_nomem(d);
  }
  (void)dm;
  fd->reserved2 = jn;
  return 0;
bad:
  return conch__dyn_fail(d, CONCH_ERR_INVALID,
                         "%.300s.%.100s: a json_name JSON cannot "
                         "carry unescaped",
                         msg, fd->name);
}
