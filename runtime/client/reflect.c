/* conch/reflect.h: a client of gRPC server reflection, on the generated
   messages of gen/grpc/reflection/v1 (v1alpha has the same ones on the
   wire) and the *_sync layer of call.h. */
#include <stdio.h>
#include <string.h>

#include <conch/call.h>
#include <conch/reflect.h>

#include "dynamic_int.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "mem_int.h"

typedef Grpc__Reflection__V1__ServerReflectionRequest refl_req;
typedef Grpc__Reflection__V1__ServerReflectionResponse refl_resp;

static const conch_method m_v1 = {
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    CONCH_STREAM_BIDI,
    &grpc__reflection__v1__server_reflection_request__descriptor,
    &grpc__reflection__v1__server_reflection_response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

static const conch_method m_v1alpha = {
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    CONCH_STREAM_BIDI,
    &grpc__reflection__v1__server_reflection_request__descriptor,
    &grpc__reflection__v1__server_reflection_response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

/* Imports to fetch or that the server lacks: names, each once. */
#define MAX_WALK 4096

struct conch_reflect {
  conch_client *c;
  const conch_mem *mem;
  conch_call_opts opts;
  conch_call *call;
  int version; /* -1 unknown, 1 v1, 0 v1alpha */
  int answered; /* the stream has answered once */
  char **names;
  size_t nnames;
  char **missing; /* imports the server does not have */
  size_t nmissing;
};

int conch_reflect_new(conch_reflect **out, conch_client *c,
                      const conch_call_opts *opts) {
  conch_reflect *r;
  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  *out = NULL;
  if (c == NULL) {
    return CONCH_ERR_INVALID;
  }
  r = conch__calloc(conch_client_mem(c), 1, sizeof(*r));
  if (r == NULL) {
    return CONCH_ERR_NOMEM;
  }
  r->c = c;
  r->mem = conch_client_mem(c);
  {
    conch_call_opts def = CONCH_CALL_OPTS_INIT;
    r->opts = def;
  }
  if (opts != NULL) {
    size_t n = opts->struct_size < sizeof(r->opts) ? opts->struct_size
                                                   : sizeof(r->opts);
    memcpy(&r->opts, opts, n);
    r->opts.struct_size = sizeof(r->opts);
  }
  r->opts.auto_free = 0; /* the streams are ours to free */
  r->version = -1;
  *out = r;
  return 0;
}

static void free_names(const conch_mem *mem, char **v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    conch__free(mem, v[i]);
  }
  conch__free(mem, v);
}

static void close_stream(conch_reflect *r) {
  if (r->call != NULL) {
    if (!conch_call_done(r->call)) {
      (void)conch_call_close_send(r->call);
      (void)conch_call_wait_sync(r->call);
    }
    conch_call_free(r->call);
    r->call = NULL;
  }
  r->answered = 0;
}

void conch_reflect_free(conch_reflect *r) {
  if (r == NULL) {
    return;
  }
  close_stream(r);
  free_names(r->mem, r->names, r->nnames);
  free_names(r->mem, r->missing, r->nmissing);
  conch__free(r->mem, r);
}

int conch_reflect_version(const conch_reflect *r) {
  return r != NULL ? r->version : -1;
}

static int set_status(const conch_reflect *r, conch_status *st,
                      conch_code code, const char *msg) {
  if (st != NULL) {
    conch_status_clear(st);
    conch_status_init(st);
    if (conch_status_setf(st, r->mem, code, "%s", msg) != 0) {
      st->code = code;
    }
    st->origin = CONCH_ORIGIN_SERVER;
  }
  return CONCH_ERR_RPC;
}

/* One request on the stream, its answer into |*resp|: 0, or
   CONCH_ERR_RPC with |st| (the stream is closed then), CONCH_ERR_NOMEM. */
static int ask(conch_reflect *r, refl_req *req, refl_resp **resp,
               conch_status *st) {
  int reopened = 0;
  *resp = NULL;
  for (;;) {
    ProtobufCMessage *m = NULL;
    const conch_status *cs;
    int rv;

    if (r->call == NULL) {
      rv = conch_call_start(r->c, r->version == 0 ? &m_v1alpha : &m_v1,
                            &r->opts, NULL, NULL, &r->call);
      if (rv != 0) {
        r->call = NULL;
        return rv;
      }
    }
    rv = conch_call_send_sync(r->call, &req->base);
    if (rv == 0) {
      rv = conch_call_recv_sync(r->call, &m);
    }
    if (rv == 0) {
      r->answered = 1;
      if (r->version < 0) {
        r->version = 1;
      }
      *resp = (refl_resp *)m;
      return 0;
    }
    if (rv == CONCH_ERR_NOMEM || rv == CONCH_ERR_CODEC ||
        rv == CONCH_ERR_LIMIT) {
      conch_call_cancel(r->call);
    }
    if (!conch_call_done(r->call)) {
      (void)conch_call_wait_sync(r->call);
    }
    cs = conch_call_status(r->call);
    if (cs != NULL && cs->code == CONCH_CODE_UNIMPLEMENTED && !r->answered &&
        r->version < 0) {
      /* No v1: the older name of the same service. */
      close_stream(r);
      r->version = 0;
      continue;
    }
    if (r->version == 0 && !r->answered) {
      r->version = -1; /* neither answered: try v1 first next time */
      if (cs != NULL && cs->code == CONCH_CODE_UNIMPLEMENTED) {
        /* Said once for both names, the server's words kept. */
        char msg[512];
        snprintf(msg, sizeof(msg),
                 "neither grpc.reflection.v1.ServerReflection nor "
                 "grpc.reflection.v1alpha.ServerReflection is served (%.300s)",
                 cs->message != NULL ? cs->message : "unimplemented");
        close_stream(r);
        return set_status(r, st, CONCH_CODE_UNIMPLEMENTED, msg);
      }
    }
    if (cs != NULL && cs->code != CONCH_CODE_OK) {
      if (st != NULL) {
        conch_status_clear(st);
        conch_status_init(st);
        if (conch_status_copy(st, cs, r->mem) != 0) {
          st->code = cs->code;
          st->origin = cs->origin;
        }
      }
      close_stream(r);
      return CONCH_ERR_RPC;
    }
    if (r->answered && !reopened) {
      /* The server ended, cleanly, a stream that answered before (one
         answer per stream): the request again on a new one, of the
         service that answered. */
      close_stream(r);
      reopened = 1;
      continue;
    }
    close_stream(r);
    return set_status(r, st, CONCH_CODE_UNKNOWN,
                      "the reflection stream ended without an answer");
  }
}

/* An error_response as a status. */
static int answer_error(conch_reflect *r, const refl_resp *resp,
                        conch_status *st) {
  const Grpc__Reflection__V1__ErrorResponse *e = resp->error_response;
  int code = e != NULL ? e->error_code : CONCH_CODE_UNKNOWN;
  if (code <= 0 || code > 16) {
    code = CONCH_CODE_UNKNOWN;
  }
  return set_status(r, st, (conch_code)code,
                    e != NULL && e->error_message != NULL &&
                            e->error_message[0] != '\0'
                        ? e->error_message
                        : "the server's reflection refused the request");
}

int conch_reflect_list(conch_reflect *r, conch_status *st) {
  refl_req req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
  refl_resp *resp = NULL;
  const Grpc__Reflection__V1__ListServiceResponse *l;
  char **names;
  size_t i, n;
  int rv;

  if (r == NULL) {
    return CONCH_ERR_INVALID;
  }
  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES;
  req.list_services = (char *)"*";
  if ((rv = ask(r, &req, &resp, st)) != 0) {
    return rv;
  }
  if (resp->message_response_case !=
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE) {
    rv = resp->message_response_case ==
                 GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE
             ? answer_error(r, resp, st)
             : set_status(r, st, CONCH_CODE_INTERNAL,
                          "the server answered list_services with something "
                          "else");
    conch_message_free(r->c, &resp->base);
    return rv;
  }
  l = resp->list_services_response;
  n = l != NULL ? l->n_service : 0;
  names = conch__calloc(r->mem, n > 0 ? n : 1, sizeof(*names));
  if (names == NULL) {
    conch_message_free(r->c, &resp->base);
    return CONCH_ERR_NOMEM;
  }
  for (i = 0; i < n; i++) {
    const char *s = l->service[i] != NULL && l->service[i]->name != NULL
                        ? l->service[i]->name
                        : "";
    names[i] = conch__strdup(r->mem, s);
    if (names[i] == NULL) {
      free_names(r->mem, names, i);
      conch_message_free(r->c, &resp->base);
      return CONCH_ERR_NOMEM;
    }
  }
  conch_message_free(r->c, &resp->base);
  free_names(r->mem, r->names, r->nnames);
  r->names = names;
  r->nnames = n;
  return 0;
}

size_t conch_reflect_n_services(const conch_reflect *r) {
  return r != NULL ? r->nnames : 0;
}

const char *conch_reflect_service(const conch_reflect *r, size_t i) {
  return r != NULL && i < r->nnames ? r->names[i] : NULL;
}

static int fs_has(const conch_fileset *fs, const uint8_t *name, size_t nl) {
  size_t i, n = conch_fileset_n_files(fs);
  for (i = 0; i < n; i++) {
    const conch_file_descriptor *f = conch_fileset_file_at(fs, i);
    if (f != NULL && name_eq(name, nl, f->name, strlen(f->name))) {
      return 1;
    }
  }
  return 0;
}

static int is_missing(const conch_reflect *r, const uint8_t *name,
                      size_t nl) {
  size_t i;
  for (i = 0; i < r->nmissing; i++) {
    if (name_eq(name, nl, r->missing[i], strlen(r->missing[i]))) {
      return 1;
    }
  }
  return 0;
}

/* The first import of a file of |fs| that neither |fs| nor the missing
   list has, copied into |buf|: 1, 0 none, -1 too long. */
static int next_import(const conch_reflect *r, const conch_fileset *fs,
                       char *buf, size_t cap) {
  size_t i, n = conch_fileset_n_files(fs);
  for (i = 0; i < n; i++) {
    const conch_file_descriptor *f = conch_fileset_file_at(fs, i);
    rd rr = rd_of(f->data, f->len);
    fld fl;
    while (conch__pbw_next(&rr, &fl) == 1) {
      if (fl.num != 3 || fl.wt != 2 || fs_has(fs, fl.data, fl.len) ||
          is_missing(r, fl.data, fl.len)) {
        continue;
      }
      if (fl.len >= cap) {
        return -1;
      }
      memcpy(buf, fl.data, fl.len);
      buf[fl.len] = '\0';
      return 1;
    }
  }
  return 0;
}

/* One file request (|by_name|: file_by_filename, else
   file_containing_symbol); the files of the answer go into |fs|. */
static int fetch(conch_reflect *r, const char *what, int by_name,
                 conch_fileset *fs, conch_status *st) {
  refl_req req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
  refl_resp *resp = NULL;
  const Grpc__Reflection__V1__FileDescriptorResponse *f;
  size_t i;
  int rv;

  if (by_name) {
    req.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
    req.file_by_filename = (char *)what;
  } else {
    req.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
    req.file_containing_symbol = (char *)what;
  }
  if ((rv = ask(r, &req, &resp, st)) != 0) {
    return rv;
  }
  if (resp->message_response_case !=
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE) {
    rv = resp->message_response_case ==
                 GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE
             ? answer_error(r, resp, st)
             : set_status(r, st, CONCH_CODE_INTERNAL,
                          "the server answered a file request with something "
                          "else");
    conch_message_free(r->c, &resp->base);
    return rv;
  }
  f = resp->file_descriptor_response;
  rv = 0;
  for (i = 0; f != NULL && i < f->n_file_descriptor_proto && rv == 0; i++) {
    rv = conch_fileset_add_file(fs, f->file_descriptor_proto[i].data,
                                f->file_descriptor_proto[i].len);
  }
  conch_message_free(r->c, &resp->base);
  return rv;
}

static int add_missing(conch_reflect *r, const char *name) {
  char **v;
  if (r->nmissing >= MAX_WALK) {
    return CONCH_ERR_LIMIT;
  }
  v = conch__realloc(r->mem, r->missing, (r->nmissing + 1) * sizeof(*v));
  if (v == NULL) {
    return CONCH_ERR_NOMEM;
  }
  r->missing = v;
  v[r->nmissing] = conch__strdup(r->mem, name);
  if (v[r->nmissing] == NULL) {
    return CONCH_ERR_NOMEM;
  }
  r->nmissing++;
  return 0;
}

/* |what|'s files, then the imports they lack, by name. */
static int walk(conch_reflect *r, const char *what, int by_name,
                conch_fileset *fs, conch_status *st) {
  char name[4097];
  int rv, k, asked = 0;

  if (r == NULL || what == NULL || fs == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!by_name && what[0] == '.') {
    what++;
  }
  if ((rv = fetch(r, what, by_name, fs, st)) != 0) {
    return rv;
  }
  while ((k = next_import(r, fs, name, sizeof(name))) == 1) {
    conch_status est;
    if (++asked > MAX_WALK) {
      return CONCH_ERR_LIMIT;
    }
    conch_status_init(&est);
    rv = fetch(r, name, 1, fs, &est);
    if (rv == CONCH_ERR_RPC && est.code == CONCH_CODE_NOT_FOUND) {
      rv = add_missing(r, name); /* left out, as conch_fileset_to_pool() */
    } else if (rv == CONCH_ERR_RPC && st != NULL) {
      conch_status_clear(st);
      *st = est;
      return rv;
    }
    conch_status_clear(&est);
    if (rv != 0) {
      return rv;
    }
  }
  return k < 0 ? CONCH_ERR_INVALID : 0;
}

int conch_reflect_symbol(conch_reflect *r, const char *symbol,
                         conch_fileset *fs, conch_status *st) {
  return walk(r, symbol, 0, fs, st);
}

int conch_reflect_file(conch_reflect *r, const char *filename,
                       conch_fileset *fs, conch_status *st) {
  return walk(r, filename, 1, fs, st);
}
