/* conch call: any RPC of any server, in JSON, as grpcurl and buf curl do.
   The schema comes from the server's reflection (conch/reflect.h) or from
   --schema files; the types are built at run time (conch/dynamic.h) and
   the messages go as raw bytes (conch_call_send_raw), converted from and
   to JSON here.  Requests are read as a stream of JSON values (-d), each
   sent as soon as it is complete; responses are printed as they arrive,
   one JSON object per line. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <conch/conch.h>
#include <conch/descriptor.h>
#include <conch/dynamic.h>
#include <conch/reflect.h>

#include "cli.h"

#define CMD "call"
#define MAX_MSG (64u << 20) /* one request message, as JSON */
#define MAX_SCHEMAS 64
#define MAX_PATHS 16

/* In the order of main.c's cli_call_opts. */
enum {
  O_DATA,
  O_HEADER,
  O_SCHEMA,
  O_PROTO_PATH,
  O_MAX_TIME,
  O_SVC_CONFIG,
  O_LB,
  O_TARGET
};

typedef struct opts {
  const char *data; /* -d */
  const char *headers[64];
  size_t nheaders;
  const char *schemas[MAX_SCHEMAS];
  size_t nschemas;
  const char *paths[MAX_PATHS];
  size_t npaths;
  long max_ms; /* 0: none */
  const char *svc_config; /* --service-config, as given */
  int lb;                 /* --lb: a conch_lb_policy */
  const char *targets[64]; /* --target */
  size_t ntargets;
  char *ops[3]; /* the operands, among the options anywhere */
  int nops;
} opts;

/* A source of JSON values: a buffer, refilled from |fd| (-1: none). */
typedef struct jsrc {
  int fd;
  int eof;
  char *buf;
  size_t len, cap, pos;
  /* The scan of an incomplete value from |pos|. */
  size_t scan;
  int depth, in_str, esc;
  size_t count; /* values taken */
} jsrc;

typedef struct ctx {
  cli_globals *g;
  opts o;
  conch_client *c;
  conch_sandbox *sb; /* no --url: the local server's, which owns |c| */
  conch_metadata *md;
  conch_descpool *pool;
  conch_fileset *fs;
  conch_dynamic *dyn;
  conch_reflect *refl;
  int json_codec;
  /* The call. */
  const conch_method *m; /* typed, from dyn */
  conch_method raw;      /* the same without descriptors */
  conch_call *call;
  int closed;
  int send_blocked;
  int out_failed; /* errno + 1 of a failed write to stdout */
  int bad_response;
  conch_status st;
  size_t nresp;
} ctx;

/* ---- Failures ------------------------------------------------------------ */

static int fail_lib(const char *what, int rv) {
  return cli_fail_local(rv == CONCH_ERR_NOMEM ? CLI_EXIT_EXHAUSTED
                                              : CLI_EXIT_RPC,
                        rv == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                                              : CONCH_CODE_INTERNAL,
                        "conch call", NULL, 0, "%s: %s", what,
                        conch_strerror(rv));
}

/* A reflection call that failed: a server without reflection
   (unimplemented) gets the hint of --schema, one that refuses the
   protocol's media type (415: grpc-js and most gRPC servers take gRPC
   only) the hint of --protocol. */
static int fail_reflection(const conch_status *st) {
  if (st->code == CONCH_CODE_UNIMPLEMENTED) {
    return cli_fail_local(cli_exit_code(st->code), st->code, "conch call",
                          "conch call: give the schema with --schema FILE", 0,
                          "the server has no reflection: %s",
                          conch_status_message(st));
  }
  if (st->origin == CONCH_ORIGIN_HTTP && st->http_status == 415) {
    return cli_fail_local(cli_exit_code(st->code), st->code, "conch call",
                          "conch call: the server may take another protocol: "
                          "try --protocol grpc (or grpc-web)",
                          0, "%s", conch_status_message(st));
  }
  return cli_fail_status(st, NULL, 0);
}

/* A schema that does not have what was asked for: not_found (252). */
static int fail_schema(ctx *x, const char *what) {
  return cli_fail_local(CLI_EXIT_NOT_FOUND, CONCH_CODE_NOT_FOUND, "conch call",
                        x->o.nschemas > 0
                            ? "the --schema files do not declare it"
                            : "the server's reflection does not know it",
                        0, "%s: %s", what,
                        x->dyn != NULL ? conch_dynamic_error(x->dyn) : "");
}

/* The status of a failed call, with its details decoded where the schema
   knows their types (text mode; --json-errors prints them as Connect
   does, base64). */
static int fail_call(ctx *x, const conch_status *st) {
  int code = cli_fail_status(st, NULL, 0);
  size_t k;
  if (!cli_json_errors() && x->dyn != NULL) {
    for (k = 0; k < st->ndetails; k++) {
      const conch_error_detail *d = &st->details[k];
      const char *t = d->type_url != NULL ? strrchr(d->type_url, '/') : NULL;
      const ProtobufCMessageDescriptor *md = NULL;
      char *json = NULL;
      size_t jl = 0;
      t = t != NULL ? t + 1 : (d->type_url != NULL ? d->type_url : "");
      if (conch_dynamic_message(x->dyn, t, &md) == 0 &&
          conch_dynamic_pb_to_json(x->dyn, md, d->value, d->len, &json, &jl,
                                   NULL) == 0) {
        fprintf(stderr, "conch: detail %s: %s\n", t, json);
      } else {
        fprintf(stderr, "conch: detail %s (%zu bytes)\n", t, d->len);
      }
      conch_dynamic_buf_free(x->dyn, json);
    }
    fflush(stderr);
  }
  return code;
}

/* ---- Options ------------------------------------------------------------- */

static int parse_seconds(const char *v, long *ms) {
  char *end;
  double s;
  errno = 0;
  s = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(s >= 0) || s > 1e8) {
    return cli_usage_fail(CMD, "--max-time wants seconds, got '%s'", v);
  }
  *ms = s == 0 ? 0 : (long)(s * 1000 + 0.5);
  if (s > 0 && *ms == 0) {
    *ms = 1;
  }
  return 0;
}

static int parse_opts(cli_globals *g, int argc, char **argv, int *i,
                      opts *o) {
  const char *v;
  int k;
  memset(o, 0, sizeof(*o));
  for (;;) {
    k = cli_next(CMD, cli_call_opts, g, argc, argv, i, &v);
    if (k == CLI_END && *i < argc) {
      /* An operand ("--" was skipped: all the rest are). */
      if (o->nops == 3) {
        return cli_usage_error(CMD, "too many operands");
      }
      o->ops[o->nops++] = argv[(*i)++];
      if (*i > 1 && strcmp(argv[*i - 2], "--") == 0) {
        while (*i < argc) {
          if (o->nops == 3) {
            return cli_usage_error(CMD, "too many operands");
          }
          o->ops[o->nops++] = argv[(*i)++];
        }
      }
      continue;
    }
    if (k < 0) {
      break;
    }
    switch (k) {
    case O_DATA:
      if (o->data != NULL) {
        return cli_usage_fail(CMD, "-d given twice (one -d carries every "
                                   "message: a stream of JSON values)");
      }
      o->data = v;
      break;
    case O_HEADER:
      if (o->nheaders == sizeof(o->headers) / sizeof(o->headers[0])) {
        return cli_usage_fail(CMD, "too many -H");
      }
      o->headers[o->nheaders++] = v;
      break;
    case O_SCHEMA:
      if (o->nschemas == MAX_SCHEMAS) {
        return cli_usage_fail(CMD, "too many --schema");
      }
      o->schemas[o->nschemas++] = v;
      break;
    case O_PROTO_PATH:
      if (o->npaths == MAX_PATHS) {
        return cli_usage_fail(CMD, "too many --proto-path");
      }
      o->paths[o->npaths++] = v;
      break;
    case O_MAX_TIME:
      if (parse_seconds(v, &o->max_ms) != 0) {
        return CLI_EXIT_USAGE;
      }
      break;
    case O_SVC_CONFIG:
      o->svc_config = v;
      break;
    case O_LB:
      if (strcmp(v, "pick_first") == 0) {
        o->lb = CONCH_LB_PICK_FIRST;
      } else if (strcmp(v, "round_robin") == 0) {
        o->lb = CONCH_LB_ROUND_ROBIN;
      } else {
        return cli_usage_fail(CMD, "--lb wants pick_first or round_robin, "
                                   "got '%s'", v);
      }
      break;
    case O_TARGET:
      if (o->ntargets == sizeof(o->targets) / sizeof(o->targets[0])) {
        return cli_usage_fail(CMD, "too many --target");
      }
      o->targets[o->ntargets++] = v;
      break;
    default:
      return CLI_EXIT_USAGE;
    }
  }
  return k == CLI_ERROR ? CLI_EXIT_USAGE : 0;
}

/* "Name: value" into |md|. */
static int add_header(conch_metadata *md, const char *h) {
  const char *colon = strchr(h, ':');
  char name[256];
  size_t nl;
  int rv;
  if (colon == NULL || colon == h || (size_t)(colon - h) >= sizeof(name)) {
    return cli_usage_fail(CMD, "-H '%s': want 'Name: value'", h);
  }
  nl = (size_t)(colon - h);
  while (nl > 0 && (h[nl - 1] == ' ' || h[nl - 1] == '\t')) {
    nl--;
  }
  memcpy(name, h, nl);
  name[nl] = '\0';
  colon++;
  while (*colon == ' ' || *colon == '\t') {
    colon++;
  }
  rv = conch_metadata_add_str(md, name, colon);
  if (rv == CONCH_ERR_HEADER || rv == CONCH_ERR_INVALID) {
    return cli_usage_fail(CMD, "-H '%s': %s", h,
                          "not a header name ([0-9A-Za-z_.-]) with a "
                          "printable value");
  }
  return rv != 0 ? fail_lib("-H", rv) : 0;
}

/* ---- Files --------------------------------------------------------------- */

/* The whole of |path| (or stdin for "-") into |*out|, |*len| bytes, with a
   NUL after them.  Returns 0 or the exit code after a message. */
static int slurp(const char *path, int fd, char **out, size_t *len,
                 size_t max) {
  char *buf = NULL;
  size_t n = 0, cap = 0;
  int own = fd < 0;
  if (own && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    return cli_fail_local(CLI_EXIT_NOT_FOUND, CONCH_CODE_NOT_FOUND,
                          "conch call", NULL, 0, "%s: %s", path,
                          strerror(errno));
  }
  for (;;) {
    ssize_t r;
    if (n + 65536 + 1 > cap) {
      char *nb;
      cap = cap == 0 ? 65536 + 1 : cap * 2;
      nb = realloc(buf, cap);
      if (nb == NULL) {
        free(buf);
        if (own) {
          close(fd);
        }
        return fail_lib(path, CONCH_ERR_NOMEM);
      }
      buf = nb;
    }
    r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r < 0) {
      int e = errno;
      free(buf);
      if (own) {
        close(fd);
      }
      return cli_fail_local(CLI_EXIT_INVALID, CONCH_CODE_INVALID_ARGUMENT,
                            "conch call", NULL, 0, "%s: %s", path,
                            strerror(e));
    }
    if (r == 0) {
      break;
    }
    n += (size_t)r;
    if (n > max) {
      free(buf);
      if (own) {
        close(fd);
      }
      return cli_usage_fail(CMD, "%s: over %zu MiB", path, max >> 20);
    }
  }
  if (own) {
    close(fd);
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* protoc --include_imports on a .proto file: its FileDescriptorSet. */
static int run_protoc(ctx *x, const char *file, char **out, size_t *len) {
  char tmpl[] = "/tmp/conch-call-XXXXXX";
  const char *argv[8 + 2 * MAX_PATHS];
  char outarg[64], dirarg[4200];
  int fd = mkstemp(tmpl), status = 0, rc;
  size_t n = 0, k;
  const char *slash = strrchr(file, '/');
  pid_t pid;

  if (fd < 0) {
    return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_INTERNAL, "conch call",
                          NULL, 0, "a temporary file: %s", strerror(errno));
  }
  snprintf(outarg, sizeof(outarg), "--descriptor_set_out=%s", tmpl);
  argv[n++] = "protoc";
  argv[n++] = "--include_imports";
  argv[n++] = outarg;
  for (k = 0; k < x->o.npaths; k++) {
    argv[n++] = "-I";
    argv[n++] = x->o.paths[k];
  }
  if (x->o.npaths == 0) {
    /* The file's own folder, as protoc's users mostly mean. */
    snprintf(dirarg, sizeof(dirarg), "-I%.*s",
             slash != NULL ? (int)(slash - file) + (slash == file) : 1,
             slash != NULL ? file : ".");
    argv[n++] = dirarg;
  }
  argv[n++] = file;
  argv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if (pid == 0) {
    dup2(2, 1); /* protoc's messages to our stderr */
    execvp("protoc", (char *const *)argv);
    fprintf(stderr, "conch call: protoc: %s\n", strerror(errno));
    _exit(127);
  }
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    close(fd);
    unlink(tmpl);
    if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      return cli_usage_fail(CMD,
                            "--schema %s: a .proto file needs protoc, which "
                            "was not found (or give a FileDescriptorSet: "
                            "protoc --include_imports -o FILE, buf build -o "
                            "FILE)",
                            file);
    }
    return cli_usage_fail(CMD, "--schema %s: protoc failed", file);
  }
  rc = slurp(tmpl, fd, out, len, 1u << 30);
  close(fd);
  unlink(tmpl);
  return rc;
}

/* The --schema files into the pool, or the reflection client. */
static int load_schemas(ctx *x) {
  size_t k;
  for (k = 0; k < x->o.nschemas; k++) {
    const char *f = x->o.schemas[k];
    char *data = NULL;
    size_t len = 0, p = 0;
    int rc = ends_with(f, ".proto") ? run_protoc(x, f, &data, &len)
                                    : slurp(f, -1, &data, &len, 1u << 30);
    if (rc != 0) {
      return rc;
    }
    while (p < len && (data[p] == ' ' || data[p] == '\n' || data[p] == '\r' ||
                       data[p] == '\t')) {
      p++;
    }
    if (p < len && data[p] == '{') {
      rc = conch_fileset_add_set_json(x->fs, data + p, len - p);
    } else {
      rc = conch_fileset_add_set(x->fs, (const uint8_t *)data, len);
    }
    free(data);
    if (rc == CONCH_ERR_NOMEM) {
      return fail_lib(f, rc);
    }
    if (rc != 0) {
      return cli_usage_fail(CMD,
                            "--schema %s: not a FileDescriptorSet (binary or "
                            "JSON) nor a .proto file: %s",
                            f, conch_strerror(rc));
    }
  }
  return 0;
}

/* The pool from the set, and a fresh builder over it. */
static int rebuild(ctx *x) {
  int rv;
  conch_dynamic_free(x->dyn);
  x->dyn = NULL;
  conch_descpool_free(x->pool);
  x->pool = NULL;
  if ((rv = conch_descpool_new(&x->pool, NULL)) != 0 ||
      (rv = conch_fileset_to_pool(x->fs, x->pool)) != 0 ||
      (rv = conch_dynamic_new(&x->dyn, x->pool, NULL)) != 0) {
    return fail_lib("the schema", rv);
  }
  return 0;
}

/* The files that declare |symbol|, from the server when no --schema. */
static int need_symbol(ctx *x, const char *symbol) {
  conch_status st;
  int rv;
  if (x->o.nschemas > 0) {
    return 0;
  }
  conch_status_init(&st);
  rv = conch_reflect_symbol(x->refl, symbol, x->fs, &st);
  if (rv == CONCH_ERR_RPC) {
    int code = fail_reflection(&st);
    conch_status_clear(&st);
    return code;
  }
  conch_status_clear(&st);
  if (rv != 0) {
    return fail_lib("reflection", rv);
  }
  return rebuild(x);
}

/* ---- list and describe --------------------------------------------------- */

/* A varint or length-delimited field of a FileDescriptorProto. */
typedef struct wf {
  uint32_t num;
  int wt;
  const uint8_t *data;
  size_t len;
} wf;

static int wire_next(const uint8_t **p, const uint8_t *end, wf *f) {
  uint64_t key = 0, v = 0;
  int s;
  if (*p >= end) {
    return 0;
  }
  for (s = 0; *p < end && s < 64; s += 7) {
    key |= (uint64_t)(**p & 0x7f) << s;
    if ((*(*p)++ & 0x80) == 0) {
      break;
    }
  }
  f->num = (uint32_t)(key >> 3);
  f->wt = (int)(key & 7);
  f->data = NULL;
  f->len = 0;
  switch (f->wt) {
  case 0:
    while (*p < end && (*(*p)++ & 0x80) != 0) {
    }
    return 1;
  case 1:
    if (end - *p < 8) {
      return -1;
    }
    *p += 8;
    return 1;
  case 5:
    if (end - *p < 4) {
      return -1;
    }
    *p += 4;
    return 1;
  case 2:
    for (s = 0; *p < end && s < 64; s += 7) {
      v |= (uint64_t)(**p & 0x7f) << s;
      if ((*(*p)++ & 0x80) == 0) {
        break;
      }
    }
    if (v > (uint64_t)(end - *p)) {
      return -1;
    }
    f->data = *p;
    f->len = (size_t)v;
    *p += v;
    return 1;
  default:
    return -1;
  }
}

/* Whether |name| is among the |n| strings of |v|. */
static int seen(char **v, size_t n, const char *name) {
  size_t i;
  for (i = 0; i < n; i++) {
    if (strcmp(v[i], name) == 0) {
      return 1;
    }
  }
  return 0;
}

/* The services the --schema files declare, one a line. */
static int list_schema_services(ctx *x) {
  size_t i, n = conch_fileset_n_files(x->fs), nout = 0;
  char **out = NULL;
  int rc = 0;
  for (i = 0; i < n && rc == 0; i++) {
    const conch_file_descriptor *fd = conch_fileset_file_at(x->fs, i);
    const uint8_t *p = fd->data, *end = fd->data + fd->len;
    char pkg[1024] = "";
    wf f;
    while (wire_next(&p, end, &f) == 1) {
      if (f.num == 2 && f.wt == 2 && f.len < sizeof(pkg)) {
        memcpy(pkg, f.data, f.len);
        pkg[f.len] = '\0';
      }
    }
    p = fd->data;
    while (rc == 0 && wire_next(&p, end, &f) == 1) {
      const uint8_t *q = f.data, *qe = f.data + f.len;
      wf g;
      if (f.num != 6 || f.wt != 2) {
        continue;
      }
      while (wire_next(&q, qe, &g) == 1) {
        if (g.num == 1 && g.wt == 2) {
          char full[2048];
          char **nv;
          snprintf(full, sizeof(full), "%s%s%.*s", pkg, pkg[0] ? "." : "",
                   (int)(g.len < 1000 ? g.len : 1000), (const char *)g.data);
          if (seen(out, nout, full)) {
            break;
          }
          nv = realloc(out, (nout + 1) * sizeof(*nv));
          if (nv == NULL || (nv[nout] = strdup(full)) == NULL) {
            if (nv != NULL) {
              out = nv;
            }
            rc = fail_lib("list", CONCH_ERR_NOMEM);
            break;
          }
          out = nv;
          nout++;
          break;
        }
      }
    }
  }
  for (i = 0; i < nout; i++) {
    if (rc == 0) {
      printf("%s\n", out[i]);
    }
    free(out[i]);
  }
  free(out);
  return rc;
}

static const char *kind_in(conch_stream_kind k) {
  return k == CONCH_STREAM_CLIENT || k == CONCH_STREAM_BIDI ? "stream " : "";
}
static const char *kind_out(conch_stream_kind k) {
  return k == CONCH_STREAM_SERVER || k == CONCH_STREAM_BIDI ? "stream " : "";
}

/* The methods of |svc|: "pkg.Svc/Method" lines, or (|rpc|) .proto's
   rpc lines. */
static int print_methods(ctx *x, const char *svc, int rpc) {
  size_t i;
  for (i = 0;; i++) {
    const conch_method *m = NULL;
    int rv = conch_dynamic_service_method(x->dyn, svc, i, &m);
    if (rv == CONCH_ERR_EOF) {
      return 0;
    }
    if (rv != 0) {
      return rv == CONCH_ERR_NOMEM ? fail_lib(svc, rv) : fail_schema(x, svc);
    }
    if (rpc) {
      printf("  rpc %s(%s.%s) returns (%s.%s);\n", strrchr(m->path, '/') + 1,
             kind_in(m->kind), m->input->name, kind_out(m->kind),
             m->output->name);
    } else {
      printf("%s\n", m->path + 1);
    }
  }
}

static const char *type_name(const ProtobufCFieldDescriptor *f) {
  static const char *const names[] = {
      "int32",  "sint32", "sfixed32", "int64",  "sint64", "sfixed64",
      "uint32", "fixed32", "uint64",  "fixed64", "float", "double",
      "bool",   "enum",   "string",   "bytes",  "message"};
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    return ((const ProtobufCMessageDescriptor *)f->descriptor)->name;
  }
  if (f->type == PROTOBUF_C_TYPE_ENUM) {
    return ((const ProtobufCEnumDescriptor *)f->descriptor)->name;
  }
  return (unsigned)f->type < sizeof(names) / sizeof(names[0]) ? names[f->type]
                                                              : "?";
}

/* The members of |f|'s oneof (fields that share its case member). */
static unsigned oneof_members(const ProtobufCMessageDescriptor *md,
                              const ProtobufCFieldDescriptor *f) {
  unsigned i, n = 0;
  for (i = 0; i < md->n_fields; i++) {
    n += (md->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0 &&
         md->fields[i].quantifier_offset == f->quantifier_offset;
  }
  return n;
}

static void print_message(const ProtobufCMessageDescriptor *md) {
  unsigned i;
  printf("message %s {\n", md->name);
  for (i = 0; i < md->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &md->fields[i];
    int in_oneof = (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0;
    /* A oneof of one member: proto3's `optional` (its synthetic oneof). */
    int optional3 = in_oneof && oneof_members(md, f) == 1;
    const char *label = f->label == PROTOBUF_C_LABEL_REPEATED  ? "repeated "
                        : f->label == PROTOBUF_C_LABEL_REQUIRED ? "required "
                        : optional3                             ? "optional "
                        : in_oneof                              ? ""
                        : f->label == PROTOBUF_C_LABEL_OPTIONAL ? "optional "
                                                                : "";
    printf("  %s%s%s %s = %u;%s\n", label,
           f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_ENUM
               ? "."
               : "",
           type_name(f), f->name, f->id,
           in_oneof && !optional3 ? " // in a oneof" : "");
  }
  printf("}\n");
}

static int describe(ctx *x, const char *symbol) {
  conch_symbol_kind kind = 0;
  const conch_file_descriptor *fd;
  const char *s = symbol[0] == '.' ? symbol + 1 : symbol;
  int rc;

  if ((rc = need_symbol(x, s)) != 0) {
    return rc;
  }
  fd = conch_descpool_symbol(x->pool, s, &kind);
  if (fd == NULL) {
    return cli_fail_local(CLI_EXIT_NOT_FOUND, CONCH_CODE_NOT_FOUND,
                          "conch call", NULL, 0, "%s: no such symbol", s);
  }
  printf("// %s, in %s\n", s, fd->name);
  switch (kind) {
  case CONCH_SYMBOL_SERVICE:
    printf("service %s {\n", s);
    if ((rc = print_methods(x, s, 1)) != 0) {
      return rc;
    }
    printf("}\n");
    return 0;
  case CONCH_SYMBOL_METHOD: {
    const conch_method *m;
    if (conch_dynamic_method(x->dyn, s, &m) != 0) {
      return fail_schema(x, s);
    }
    printf("rpc %s(%s.%s) returns (%s.%s);\n", s, kind_in(m->kind),
           m->input->name, kind_out(m->kind), m->output->name);
    return 0;
  }
  case CONCH_SYMBOL_MESSAGE: {
    const ProtobufCMessageDescriptor *md;
    if (conch_dynamic_message(x->dyn, s, &md) != 0) {
      return fail_schema(x, s);
    }
    print_message(md);
    return 0;
  }
  case CONCH_SYMBOL_ENUM: {
    const ProtobufCEnumDescriptor *ed;
    unsigned i;
    if (conch_dynamic_enum(x->dyn, s, &ed) != 0) {
      return fail_schema(x, s);
    }
    printf("enum %s {\n", ed->name);
    for (i = 0; i < ed->n_values; i++) {
      printf("  %s = %d;\n", ed->values[i].name, ed->values[i].value);
    }
    printf("}\n");
    return 0;
  }
  default: {
    static const char *const what[] = {"",       "message",    "field",
                                       "enum",   "enum value", "service",
                                       "method", "extension"};
    printf("%s %s\n", (unsigned)kind < 8 ? what[kind] : "symbol", s);
    return 0;
  }
  }
}

/* ---- JSON values --------------------------------------------------------- */

/* Scans |s| from its saved place: 1 with the next value at
   [*start, *start + *len), 0 when more input is needed (or, at the end,
   none is left), -1 when the input is not JSON values. */
static int next_value(jsrc *s, size_t *start, size_t *len) {
  size_t i;
  if (s->depth == 0 && !s->in_str) {
    while (s->pos < s->len &&
           (s->buf[s->pos] == ' ' || s->buf[s->pos] == '\n' ||
            s->buf[s->pos] == '\r' || s->buf[s->pos] == '\t' ||
            s->buf[s->pos] == ',')) {
      s->pos++;
    }
    s->scan = s->pos;
  }
  if (s->pos >= s->len) {
    return 0;
  }
  i = s->scan;
  if (s->depth == 0 && !s->in_str && i == s->pos) {
    char c = s->buf[i];
    if (c == '}' || c == ']') {
      return -1;
    }
    if (c != '{' && c != '[' && c != '"') {
      /* A bare scalar: up to white space or the end. */
      while (i < s->len && strchr(" \n\r\t,{[\"", s->buf[i]) == NULL) {
        i++;
      }
      if (i == s->len && !s->eof) {
        s->scan = i;
        return 0;
      }
      *start = s->pos;
      *len = i - s->pos;
      s->pos = s->scan = i;
      return 1;
    }
  }
  for (; i < s->len; i++) {
    char c = s->buf[i];
    if (s->in_str) {
      if (s->esc) {
        s->esc = 0;
      } else if (c == '\\') {
        s->esc = 1;
      } else if (c == '"') {
        s->in_str = 0;
        if (s->depth == 0) {
          break;
        }
      }
      continue;
    }
    if (c == '"') {
      s->in_str = 1;
    } else if (c == '{' || c == '[') {
      s->depth++;
    } else if (c == '}' || c == ']') {
      if (--s->depth == 0) {
        break;
      }
      if (s->depth < 0) {
        return -1;
      }
    }
  }
  if (i == s->len) {
    s->scan = i;
    return 0;
  }
  *start = s->pos;
  *len = i + 1 - s->pos;
  s->pos = s->scan = i + 1;
  return 1;
}

/* Reads what |s->fd| has (one read).  Returns 0, or the exit code. */
static int fill(jsrc *s) {
  ssize_t r;
  if (s->pos > 0 && s->pos == s->len) {
    s->len = s->pos = s->scan = 0;
  } else if (s->pos > 0 && s->pos >= s->cap / 2) {
    memmove(s->buf, s->buf + s->pos, s->len - s->pos);
    s->len -= s->pos;
    s->scan -= s->pos;
    s->pos = 0;
  }
  if (s->cap - s->len < 65536) {
    size_t nc = s->cap == 0 ? 131072 : s->cap * 2;
    char *nb;
    if (s->len - s->pos > MAX_MSG) {
      return cli_usage_fail(CMD, "a request message over %u MiB",
                            MAX_MSG >> 20);
    }
    nb = realloc(s->buf, nc);
    if (nb == NULL) {
      return fail_lib("-d", CONCH_ERR_NOMEM);
    }
    s->buf = nb;
    s->cap = nc;
  }
  do {
    r = read(s->fd, s->buf + s->len, s->cap - s->len);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    return cli_fail_local(CLI_EXIT_INVALID, CONCH_CODE_INVALID_ARGUMENT,
                          "conch call", NULL, 0, "reading -d: %s",
                          strerror(errno));
  }
  if (r == 0) {
    s->eof = 1;
  }
  s->len += (size_t)r;
  return 0;
}

static int src_open(jsrc *s, const char *data) {
  memset(s, 0, sizeof(*s));
  s->fd = -1;
  if (data == NULL) {
    s->eof = 1;
    return 0;
  }
  if (data[0] == '@') {
    if (strcmp(data, "@-") == 0) {
      s->fd = 0;
      return 0;
    }
    s->fd = open(data + 1, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
      return cli_fail_local(CLI_EXIT_NOT_FOUND, CONCH_CODE_NOT_FOUND,
                            "conch call", NULL, 0, "-d %s: %s", data,
                            strerror(errno));
    }
    return 0;
  }
  s->len = s->cap = strlen(data);
  s->buf = malloc(s->len + 1);
  if (s->buf == NULL) {
    return fail_lib("-d", CONCH_ERR_NOMEM);
  }
  memcpy(s->buf, data, s->len + 1);
  s->eof = 1;
  return 0;
}

static void src_close(jsrc *s) {
  if (s->fd > 0) {
    close(s->fd);
  }
  free(s->buf);
}

/* The next value, reading as needed (blocking): 1, 0 at the end, or -1
   after a message with the exit code in |*rc|. */
static int take_blocking(jsrc *s, size_t *start, size_t *len, int *rc) {
  for (;;) {
    int k = next_value(s, start, len);
    if (k == 1) {
      s->count++;
      return 1;
    }
    if (k < 0) {
      *rc = cli_usage_fail(CMD, "-d: message %zu is not JSON", s->count + 1);
      return -1;
    }
    if (s->eof) {
      if (s->pos < s->len) {
        *rc = cli_usage_fail(CMD, "-d: message %zu is cut short",
                             s->count + 1);
        return -1;
      }
      return 0;
    }
    if ((*rc = fill(s)) != 0) {
      return -1;
    }
  }
}

/* ---- The call ------------------------------------------------------------ */

/* One request message from JSON: sent, or the exit code.  CONCH_ERR_AGAIN
   comes back as -1 (send it again once the call has room). */
static int send_json(ctx *x, const char *json, size_t len, size_t nth) {
  uint8_t *pb = NULL;
  size_t pl = 0;
  conch_status st;
  int rv;

  conch_status_init(&st);
  rv = conch_dynamic_json_to_pb(x->dyn, x->m->input, json, len, &pb, &pl,
                                &st);
  if (rv != 0) {
    int code = cli_fail_local(
        rv == CONCH_ERR_NOMEM ? CLI_EXIT_EXHAUSTED : CLI_EXIT_USAGE,
        rv == CONCH_ERR_NOMEM ? CONCH_CODE_RESOURCE_EXHAUSTED
                              : CONCH_CODE_INVALID_ARGUMENT,
        "conch call", NULL, 0, "-d: message %zu is not a %s: %s", nth,
        x->m->input->name,
        st.code != CONCH_CODE_OK ? conch_status_message(&st)
                                 : conch_strerror(rv));
    conch_status_clear(&st);
    return code;
  }
  if (x->json_codec) {
    /* The canonical JSON of what was read, checked against the type. */
    char *js = NULL;
    size_t jl = 0;
    rv = conch_dynamic_pb_to_json(x->dyn, x->m->input, pb, pl, &js, &jl,
                                  NULL);
    if (rv == 0) {
      rv = conch_call_send_raw(x->call, js, jl);
    }
    conch_dynamic_buf_free(x->dyn, js);
  } else {
    rv = conch_call_send_raw(x->call, pb, pl);
  }
  conch_dynamic_buf_free(x->dyn, pb);
  if (rv == CONCH_ERR_AGAIN) {
    return -1;
  }
  if (rv == CONCH_ERR_STATE) {
    return 0; /* the call ended: its status says why */
  }
  return rv != 0 ? fail_lib("sending", rv) : 0;
}

static void on_raw(conch_call *call, const uint8_t *data, size_t len,
                   void *ud) {
  ctx *x = ud;
  char *json = NULL;
  size_t jl = 0;
  int rv;
  uint8_t *pb = NULL;
  size_t pl = 0;

  if (x->out_failed || x->bad_response) {
    return;
  }
  if (x->json_codec) {
    rv = conch_dynamic_json_to_pb(x->dyn, x->m->output, (const char *)data,
                                  len, &pb, &pl, NULL);
    if (rv == 0) {
      rv = conch_dynamic_pb_to_json(x->dyn, x->m->output, pb, pl, &json, &jl,
                                    NULL);
    }
    conch_dynamic_buf_free(x->dyn, pb);
  } else {
    rv = conch_dynamic_pb_to_json(x->dyn, x->m->output, data, len, &json,
                                  &jl, NULL);
  }
  if (rv != 0) {
    x->bad_response = rv;
    conch_call_cancel(call);
    return;
  }
  x->nresp++;
  if (fwrite(json, 1, jl, stdout) != jl || fputc('\n', stdout) == EOF ||
      fflush(stdout) != 0) {
    x->out_failed = errno + 1;
    conch_call_cancel(call);
  }
  conch_dynamic_buf_free(x->dyn, json);
}

static void on_ready(conch_call *call, void *ud) {
  ctx *x = ud;
  (void)call;
  x->send_blocked = 0;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  ctx *x = ud;
  (void)call;
  (void)trailers;
  if (conch_status_copy(&x->st, st, NULL) != 0) {
    x->st.code = st->code;
    x->st.origin = st->origin;
  }
  x->closed = 1;
}

/* Drives the client (and reads |src| when |reading|) until the call ended.
   Returns 0 or the exit code of a local failure (the call canceled). */
static int drive(ctx *x, jsrc *src) {
  char *pending = NULL; /* a message refused with CONCH_ERR_AGAIN */
  size_t plen = 0;
  int half_closed = 0, rc = 0;

  while (!x->closed) {
    struct pollfd fds[64];
    size_t n, want;
    long t;
    int use_src;

    /* Feed the call what the input has. */
    while (rc == 0 && !half_closed && !x->send_blocked) {
      size_t st = 0, ln = 0;
      int k;
      if (pending != NULL) {
        k = send_json(x, pending, plen, src->count);
        if (k == -1) {
          x->send_blocked = 1;
          break;
        }
        free(pending);
        pending = NULL;
        rc = k;
        continue;
      }
      k = next_value(src, &st, &ln);
      if (k < 0) {
        rc = cli_usage_fail(CMD, "-d: message %zu is not JSON",
                            src->count + 1);
        break;
      }
      if (k == 0) {
        if (src->eof) {
          if (src->pos < src->len) {
            rc = cli_usage_fail(CMD, "-d: message %zu is cut short",
                                src->count + 1);
            break;
          }
          conch_call_close_send(x->call);
          half_closed = 1;
        }
        break;
      }
      src->count++;
      k = send_json(x, src->buf + st, ln, src->count);
      if (k == -1) {
        pending = malloc(ln > 0 ? ln : 1);
        if (pending == NULL) {
          rc = fail_lib("-d", CONCH_ERR_NOMEM);
          break;
        }
        memcpy(pending, src->buf + st, ln);
        plen = ln;
        x->send_blocked = 1;
        break;
      }
      rc = k;
    }
    if (rc != 0) {
      conch_call_cancel(x->call);
      while (!x->closed && conch_client_run(x->c, 1000) == 0) {
      }
      break;
    }
    use_src = !half_closed && !x->send_blocked && pending == NULL &&
              !src->eof && src->fd >= 0;
    want = conch_client_pollfds(x->c, fds + use_src,
                                sizeof(fds) / sizeof(fds[0]) - 1);
    n = want < sizeof(fds) / sizeof(fds[0]) - 1
            ? want
            : sizeof(fds) / sizeof(fds[0]) - 1;
    if (use_src) {
      fds[0].fd = src->fd;
      fds[0].events = POLLIN;
      fds[0].revents = 0;
    }
    t = conch_client_timeout_ms(x->c);
    if (poll(fds, n + use_src, t < 0 ? -1 : (int)(t > 60000 ? 60000 : t)) <
            0 &&
        errno != EINTR) {
      rc = fail_lib("poll", CONCH_ERR_IO);
      conch_call_cancel(x->call);
      continue;
    }
    if (use_src && fds[0].revents != 0 && (rc = fill(src)) != 0) {
      conch_call_cancel(x->call);
      continue;
    }
    if (conch_client_process(x->c, fds + use_src, n) == CONCH_ERR_NOMEM) {
      rc = fail_lib("the client", CONCH_ERR_NOMEM);
      conch_call_cancel(x->call);
    }
  }
  free(pending);
  return rc;
}

static int do_call(ctx *x, const char *name) {
  static const conch_call_handler h = {NULL, NULL, on_raw, on_ready,
                                       on_close};
  conch_call_opts co = CONCH_CALL_OPTS_INIT;
  char svc[4200];
  const char *sep = strchr(name[0] == '/' ? name + 1 : name, '/');
  jsrc src;
  int rc, rv;

  if (name[0] == '/') {
    name++;
  }
  if (sep == NULL) {
    sep = strrchr(name, '.');
  }
  if (sep == NULL || (size_t)(sep - name) >= sizeof(svc)) {
    return cli_usage_fail(CMD, "'%s' is not a method (pkg.Service/Method)",
                          name);
  }
  memcpy(svc, name, (size_t)(sep - name));
  svc[sep - name] = '\0';
  if ((rc = need_symbol(x, svc)) != 0) {
    return rc;
  }
  rv = conch_dynamic_method(x->dyn, name, &x->m);
  if (rv != 0) {
    return rv == CONCH_ERR_NOMEM ? fail_lib(name, rv) : fail_schema(x, name);
  }
  x->raw = *x->m;
  x->raw.input = NULL;
  x->raw.output = NULL;
  if ((rc = src_open(&src, x->o.data)) != 0) {
    return rc;
  }
  co.headers = x->md;
  co.timeout_ms = x->o.max_ms;
  if ((rv = conch_call_start(x->c, &x->raw, &co, &h, x, &x->call)) != 0) {
    src_close(&src);
    return fail_lib("starting the call", rv);
  }
  if (x->m->kind == CONCH_STREAM_UNARY || x->m->kind == CONCH_STREAM_SERVER) {
    /* One message: all of the input, read before it goes. */
    size_t st = 0, ln = 0, st2, ln2;
    int k = x->o.data == NULL ? 1 : take_blocking(&src, &st, &ln, &rc);
    if (k == 1 && x->o.data == NULL) {
      rc = send_json(x, "{}", 2, 1);
    } else if (k == 1) {
      int k2 = take_blocking(&src, &st2, &ln2, &rc);
      if (k2 == 1) {
        rc = cli_usage_fail(CMD, "%s takes one request message, -d has more",
                            name);
      } else if (k2 == 0) {
        rc = send_json(x, src.buf + st, ln, 1);
      }
    } else if (k == 0) {
      rc = cli_usage_fail(CMD, "-d holds no request message");
    }
    src_close(&src);
    memset(&src, 0, sizeof(src));
    src.fd = -1;
    src.eof = 1;
    if (rc == -1) {
      rc = 0; /* unary sends are never refused for room */
    }
    if (rc != 0) {
      conch_call_cancel(x->call);
    }
  }
  if (rc == 0) {
    rc = drive(x, &src);
  } else {
    while (!x->closed && conch_client_run(x->c, 1000) == 0) {
    }
  }
  src_close(&src);
  conch_call_free(x->call);
  x->call = NULL;
  if (rc != 0) {
    return rc;
  }
  if (x->out_failed) {
    return cli_fail_output("stdout", x->out_failed - 1, 0,
                           "the call was canceled");
  }
  if (x->bad_response) {
    return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_INTERNAL, "conch call",
                          NULL, 0, "response %zu is not a %s: %s",
                          x->nresp + 1, x->m->output->name,
                          conch_strerror(x->bad_response));
  }
  if (x->st.code != CONCH_CODE_OK) {
    return fail_call(x, &x->st);
  }
  return 0;
}

/* ---- The command --------------------------------------------------------- */

/* --service-config: the JSON itself, or @FILE. */
static int service_config(conch_client_opts *co, const char *v) {
  char err[256], *text = NULL;
  size_t len = 0;
  int rv;
  if (v[0] == '@') {
    rv = slurp(v + 1, -1, &text, &len, 1u << 20);
    if (rv != 0) {
      return rv;
    }
  }
  rv = conch_client_opts_set_service_config(co, text != NULL ? text : v, err,
                                            sizeof(err));
  free(text);
  if (rv == CONCH_ERR_INVALID) {
    return cli_usage_fail(CMD, "--service-config: %s", err);
  }
  return rv != 0 ? fail_lib("--service-config", rv) : 0;
}

static int open_client(ctx *x) {
  conch_client_opts *co = NULL;
  int rv;
  cli_globals *g = x->g;

  if (g->url == NULL) {
    if (x->o.svc_config != NULL || x->o.lb != 0 || x->o.ntargets > 0) {
      return cli_usage_fail(CMD, "--service-config, --lb and --target need "
                                 "--url (the local server is one address)");
    }
    /* The local server, started when none answers, as every command. */
    rv = cli_open_sandbox(g, &x->sb);
    if (rv != 0) {
      return rv;
    }
    x->c = conch_sandbox_native(x->sb);
    x->json_codec = g->codec == CONCH_CODEC_JSON;
    return 0;
  }
  if (g->cacert != NULL && access(g->cacert, R_OK) != 0) {
    return cli_usage_fail(NULL, "--cacert %s: %s", g->cacert,
                          errno == ENOENT ? "no such file" : strerror(errno));
  }
  if ((rv = conch_client_opts_new(&co)) != 0) {
    return fail_lib("client options", rv);
  }
  if ((g->cacert != NULL &&
       conch_client_opts_set_ca_file(co, g->cacert) != 0) ||
      conch_client_opts_set_http_version(
          co, (conch_http_version)g->http_version) != 0 ||
      conch_client_opts_set_protocol(co, (conch_protocol)g->protocol) != 0 ||
      conch_client_opts_set_codec(co, (conch_codec)g->codec) != 0) {
    conch_client_opts_free(co);
    return cli_fail_local(CLI_EXIT_RPC, CONCH_CODE_INTERNAL, NULL, NULL, 0,
                          "cannot set the client's options");
  }
  if (x->o.svc_config != NULL && (rv = service_config(co, x->o.svc_config))) {
    conch_client_opts_free(co);
    return rv;
  }
  if ((x->o.lb != 0 &&
       conch_client_opts_set_lb_policy(co, (conch_lb_policy)x->o.lb) != 0) ||
      (x->o.ntargets > 0 &&
       conch_client_opts_set_targets(co, x->o.targets, x->o.ntargets) != 0)) {
    conch_client_opts_free(co);
    return cli_usage_fail(CMD, "--target: each one IP:PORT, [IPv6]:PORT or "
                               "unix:PATH (no host names)");
  }
  x->json_codec = g->codec == CONCH_CODEC_JSON;
  rv = conch_client_new(&x->c, g->url, co);
  conch_client_opts_free(co);
  if (rv == CONCH_ERR_TLS && g->cacert != NULL) {
    return cli_usage_fail(NULL, "--cacert %s: %s", g->cacert,
                          conch_strerror(rv));
  }
  if (rv != 0) {
    return cli_usage_fail(NULL, "--url %s: %s", g->url, conch_strerror(rv));
  }
  return 0;
}

int conch_cli_call(cli_globals *g, int argc, char **argv) {
  ctx x;
  int i = 1, rc;
  size_t k;
  const char *op;

  memset(&x, 0, sizeof(x));
  x.g = g;
  conch_status_init(&x.st);
  if ((rc = parse_opts(g, argc, argv, &i, &x.o)) != 0) {
    return rc;
  }
  if (x.o.nops == 0) {
    return cli_usage_error(CMD, "which method? (pkg.Service/Method, list or "
                                "describe)");
  }
  op = x.o.ops[0];
  if ((strcmp(op, "list") == 0 && x.o.nops > 2) ||
      (strcmp(op, "describe") == 0 && x.o.nops != 2) ||
      (strcmp(op, "list") != 0 && strcmp(op, "describe") != 0 &&
       x.o.nops != 1)) {
    return cli_usage_error(CMD, strcmp(op, "describe") == 0
                                    ? "describe takes one SYMBOL"
                                    : "too many operands");
  }
  if ((rc = open_client(&x)) != 0) {
    goto out;
  }
  if ((rc = conch_metadata_new(&x.md, NULL)) != 0) {
    rc = fail_lib("headers", rc);
    goto out;
  }
  if (g->token != NULL &&
      (rc = conch_metadata_add_str(x.md, "x-access-token", g->token)) != 0) {
    rc = cli_usage_fail(NULL, "the access token is not a header value");
    goto out;
  }
  for (k = 0; k < x.o.nheaders; k++) {
    if ((rc = add_header(x.md, x.o.headers[k])) != 0) {
      goto out;
    }
  }
  if ((rc = conch_fileset_new(&x.fs, NULL)) != 0) {
    rc = fail_lib("schema", rc);
    goto out;
  }
  if (x.o.nschemas > 0) {
    if ((rc = load_schemas(&x)) != 0 || (rc = rebuild(&x)) != 0) {
      goto out;
    }
  } else {
    conch_call_opts ro = CONCH_CALL_OPTS_INIT;
    ro.headers = x.md;
    ro.timeout_ms = x.o.max_ms;
    if ((rc = conch_reflect_new(&x.refl, x.c, &ro)) != 0) {
      rc = fail_lib("reflection", rc);
      goto out;
    }
  }
  if (strcmp(op, "list") == 0 && x.o.nops == 1) {
    if (x.refl == NULL) {
      rc = list_schema_services(&x);
    } else {
      conch_status st;
      conch_status_init(&st);
      rc = conch_reflect_list(x.refl, &st);
      if (rc == CONCH_ERR_RPC) {
        rc = fail_reflection(&st);
      } else if (rc != 0) {
        rc = fail_lib("reflection", rc);
      } else {
        for (k = 0; k < conch_reflect_n_services(x.refl); k++) {
          printf("%s\n", conch_reflect_service(x.refl, k));
        }
      }
      conch_status_clear(&st);
    }
  } else if (strcmp(op, "list") == 0) {
    const char *svc = x.o.ops[1][0] == '.' ? x.o.ops[1] + 1 : x.o.ops[1];
    rc = need_symbol(&x, svc);
    if (rc == 0) {
      rc = print_methods(&x, svc, 0);
    }
  } else if (strcmp(op, "describe") == 0) {
    rc = describe(&x, x.o.ops[1]);
  } else {
    rc = do_call(&x, op);
  }
out:
  conch_reflect_free(x.refl);
  conch_dynamic_free(x.dyn);
  conch_descpool_free(x.pool);
  conch_fileset_free(x.fs);
  conch_metadata_free(x.md);
  if (x.sb != NULL) {
    conch_sandbox_free(x.sb); /* and its client */
  } else {
    conch_client_free(x.c);
  }
  conch_status_clear(&x.st);
  return rc;
}
