/* The services the server core serves by itself, on the generated code of
   proto/grpc/ (gen/grpc/, compiled into libconch):
    - the descriptors of the files registered (conch_server_add_file()),
      which every generated _register() adds;
    - server reflection, grpc.reflection.v1 and v1alpha (the same messages
      on the wire: v1alpha is served with v1's), from those descriptors;
    - health, grpc.health.v1: Check, List and Watch, with the statuses the
      application sets, every one NOT_SERVING once the server shuts down.
   They are ordinary methods of the server: every protocol and codec the
   core serves carries them. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <conch/descriptor.h>
#include <conch/server.h>

#include "grpc/health/v1/health.conch.h"
#include "grpc/reflection/v1/reflection.conch.h"
#include "list.h"
#include "mem_int.h"
#include "server_int.h"

/* Finishes |rpc| with |code| and a message (OK: none). */
static void finish(conch_rpc *rpc, conch_code code, const char *fmt, ...)
    CONCH_PRINTF(3, 4);
static void finish(conch_rpc *rpc, conch_code code, const char *fmt, ...) {
  conch_server *s = conch_rpc_server(rpc);
  conch_status st;
  va_list ap;

  conch_status_init(&st);
  if (code != CONCH_CODE_OK) {
    va_start(ap, fmt);
    if (conch_status_vsetf(&st, s->ep.mem, code, fmt, ap) != 0) {
      st.code = code; /* without its message */
    }
    va_end(ap);
  }
  (void)conch_rpc_finish(rpc, &st);
  conch_status_clear(&st);
}

/* ---- Descriptors ------------------------------------------------------- */

int conch_server_add_file(conch_server *s, const conch_file_descriptor *fd) {
  if (s == NULL || fd == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->files == NULL) {
    int rv = conch_descpool_new(&s->files, s->ep.mem);
    if (rv != 0) {
      return rv;
    }
  }
  return conch_descpool_add(s->files, fd);
}

const conch_descpool *conch_server_files(const conch_server *s) {
  return s != NULL ? s->files : NULL;
}

/* ---- Reflection -------------------------------------------------------- */

typedef Grpc__Reflection__V1__ServerReflectionRequest refl_req;
typedef Grpc__Reflection__V1__ServerReflectionResponse refl_resp;

/* A response packed and waiting for room in the call's send buffer. */
typedef struct refl_out {
  conch_link link;
  size_t len;
  uint8_t data[];
} refl_out;

typedef struct refl_call {
  conch_link out; /* refl_out, oldest first */
  int paused;     /* by us, while responses wait */
  int ending;     /* the requests ended: finish once the responses are out */
} refl_call;

/* The reflection method of v1alpha: v1's messages under v1alpha's path. */
static const conch_method refl_v1alpha = {
    .path = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    .kind = CONCH_STREAM_BIDI,
    .input = &grpc__reflection__v1__server_reflection_request__descriptor,
    .output = &grpc__reflection__v1__server_reflection_response__descriptor,
    .idempotency = CONCH_IDEMPOTENCY_UNKNOWN,
};

static void refl_call_free(conch_server *s, refl_call *c) {
  while (!conch__list_empty(&c->out)) {
    conch_link *l = c->out.next;
    conch__list_remove(l);
    conch__free(s->ep.mem, CONCH_CONTAINER(l, refl_out, link));
  }
  conch__free(s->ep.mem, c);
}

/* Ends the call with |code| after a failure of ours. */
static void refl_fail(conch_rpc *rpc, conch_code code, const char *what) {
  refl_call *c = conch_rpc_data(rpc);
  conch_rpc_set_data(rpc, NULL);
  refl_call_free(conch_rpc_server(rpc), c);
  finish(rpc, code, "server reflection: %s", what);
}

/* Sends what waits, oldest first, until the send buffer is full.  Returns
   0, or -1 when the call was ended. */
static int refl_flush(conch_rpc *rpc, refl_call *c) {
  while (!conch__list_empty(&c->out)) {
    refl_out *o = CONCH_CONTAINER(c->out.next, refl_out, link);
    int rv = conch_rpc_send_packed(rpc, o->data, o->len);
    if (rv == CONCH_ERR_AGAIN) {
      if (!c->paused && conch_rpc_pause(rpc) == 0) {
        c->paused = 1;
      }
      return 0;
    }
    if (rv != 0) {
      refl_fail(rpc, CONCH_CODE_INTERNAL, "cannot send a response");
      return -1;
    }
    conch__list_remove(&o->link);
    conch__free(conch_rpc_server(rpc)->ep.mem, o);
  }
  if (c->paused && conch_rpc_resume(rpc) == 0) {
    c->paused = 0;
  }
  return 0;
}

/* The files to send for |fd|: it first, then every file it imports,
   transitively, each once.  Returns how many (at most |cap|). */
static size_t closure(const conch_file_descriptor *fd,
                      const conch_file_descriptor **v, size_t cap) {
  size_t n = 0, i;

  if (cap == 0) {
    return 0;
  }
  v[n++] = fd;
  for (i = 0; i < n; i++) {
    size_t d;
    for (d = 0; v[i]->deps != NULL && v[i]->deps[d] != NULL; d++) {
      const conch_file_descriptor *dep = v[i]->deps[d];
      size_t j;
      for (j = 0; j < n && v[j] != dep && strcmp(v[j]->name, dep->name) != 0;
           j++) {
      }
      if (j == n && n < cap) {
        v[n++] = dep;
      }
    }
  }
  return n;
}

/* The names of the services |s| serves, each once, in the order
   registered: "pkg.Svc" of "/pkg.Svc/Method" (v1alpha's reflection
   aside: clients that ask it do not need it listed, and listing it would
   send them looking for a schema it does not have of its own).  Returns how many, or -1
   when out of memory; |*out| is the caller's (one block). */
static long service_names(conch_server *s, Grpc__Reflection__V1__ServiceResponse **out_v,
                          Grpc__Reflection__V1__ServiceResponse ***out_p,
                          char **out_names) {
  size_t total = 0, n = 0, i;
  char *names, *at;
  Grpc__Reflection__V1__ServiceResponse *v;
  Grpc__Reflection__V1__ServiceResponse **p;

  for (i = 0; i < s->nmethods; i++) {
    total += strlen(s->methods[i].path) + 1;
  }
  names = conch__malloc(s->ep.mem, total + 1);
  v = conch__calloc(s->ep.mem, s->nmethods + 1, sizeof(*v));
  p = conch__calloc(s->ep.mem, s->nmethods + 1, sizeof(*p));
  if (names == NULL || v == NULL || p == NULL) {
    conch__free(s->ep.mem, names);
    conch__free(s->ep.mem, v);
    conch__free(s->ep.mem, p);
    return -1;
  }
  at = names;
  for (i = 0; i < s->nmethods; i++) {
    const char *path = s->methods[i].path + 1;
    const char *slash = strchr(path, '/');
    size_t len = slash != NULL ? (size_t)(slash - path) : strlen(path), j;
    for (j = 0; j < n; j++) {
      if (strlen(v[j].name) == len && memcmp(v[j].name, path, len) == 0) {
        break;
      }
    }
    if (j < n || len == 0) {
      continue;
    }
    if (s->methods[i].m.input == refl_v1alpha.input &&
        strcmp(s->methods[i].path, refl_v1alpha.path) == 0) {
      continue; /* our alias of v1, whose schema is v1's: not listed */
    }
    memcpy(at, path, len);
    at[len] = '\0';
    grpc__reflection__v1__service_response__init(&v[n]);
    v[n].name = at;
    p[n] = &v[n];
    at += len + 1;
    n++;
  }
  *out_v = v;
  *out_p = p;
  *out_names = names;
  return (long)n;
}

/* Answers one request: packs the response and queues it.  0, or
   CONCH_ERR_NOMEM. */
static int refl_answer(conch_rpc *rpc, refl_call *c, const refl_req *req) {
  conch_server *s = conch_rpc_server(rpc);
  refl_resp resp = GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
  Grpc__Reflection__V1__FileDescriptorResponse fdr =
      GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
  Grpc__Reflection__V1__ExtensionNumberResponse enr =
      GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
  Grpc__Reflection__V1__ListServiceResponse lsr =
      GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
  Grpc__Reflection__V1__ErrorResponse err =
      GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
  const conch_file_descriptor *fd = NULL, **files = NULL;
  ProtobufCBinaryData *blobs = NULL;
  Grpc__Reflection__V1__ServiceResponse *svc = NULL, **svcp = NULL;
  char *names = NULL, errbuf[320];
  int32_t *numbers = NULL;
  refl_out *o;
  size_t len, nfiles, i;
  int rv = CONCH_ERR_NOMEM;

  resp.valid_host = req->host != NULL ? req->host : (char *)"";
  resp.original_request = (refl_req *)(uintptr_t)req;
  errbuf[0] = '\0';
  switch (req->message_request_case) {
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
    fd = conch_descpool_file(s->files, req->file_by_filename);
    if (fd == NULL) {
      snprintf(errbuf, sizeof(errbuf), "file not found: %.256s",
               req->file_by_filename);
    }
    break;
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
    fd = conch_descpool_symbol(s->files, req->file_containing_symbol, NULL);
    if (fd == NULL) {
      snprintf(errbuf, sizeof(errbuf), "symbol not found: %.256s",
               req->file_containing_symbol);
    }
    break;
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION: {
    const Grpc__Reflection__V1__ExtensionRequest *x =
        req->file_containing_extension;
    if (x != NULL && x->containing_type != NULL) {
      fd = conch_descpool_extension(s->files, x->containing_type,
                                    x->extension_number);
    }
    if (fd == NULL) {
      snprintf(errbuf, sizeof(errbuf), "extension not found: %.256s(%ld)",
               x != NULL && x->containing_type != NULL ? x->containing_type
                                                       : "",
               x != NULL ? (long)x->extension_number : 0L);
    }
    break;
  }
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE: {
    const char *t = req->all_extension_numbers_of_type;
    conch_symbol_kind kind = 0;
    if (conch_descpool_symbol(s->files, t, &kind) == NULL ||
        kind != CONCH_SYMBOL_MESSAGE) {
      snprintf(errbuf, sizeof(errbuf), "type not found: %.256s", t);
      break;
    }
    len = conch_descpool_extension_numbers(s->files, t, NULL, 0);
    numbers = conch__calloc(s->ep.mem, len + 1, sizeof(*numbers));
    if (numbers == NULL) {
      goto out;
    }
    conch_descpool_extension_numbers(s->files, t, numbers, len);
    enr.base_type_name = (char *)(uintptr_t)(t[0] == '.' ? t + 1 : t);
    enr.n_extension_number = len;
    enr.extension_number = numbers;
    resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
    resp.all_extension_numbers_response = &enr;
    break;
  }
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES: {
    long n = service_names(s, &svc, &svcp, &names);
    if (n < 0) {
      goto out;
    }
    lsr.n_service = (size_t)n;
    lsr.service = svcp;
    resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
    resp.list_services_response = &lsr;
    break;
  }
  default:
    err.error_code = CONCH_CODE_INVALID_ARGUMENT;
    err.error_message = (char *)"the request names no question";
    resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    resp.error_response = &err;
    break;
  }
  if (fd != NULL) {
    nfiles = conch_descpool_n_files(s->files);
    files = conch__calloc(s->ep.mem, nfiles + 1, sizeof(*files));
    blobs = conch__calloc(s->ep.mem, nfiles + 1, sizeof(*blobs));
    if (files == NULL || blobs == NULL) {
      goto out;
    }
    nfiles = closure(fd, files, nfiles + 1);
    for (i = 0; i < nfiles; i++) {
      blobs[i].data = (uint8_t *)(uintptr_t)files[i]->data;
      blobs[i].len = files[i]->len;
    }
    fdr.n_file_descriptor_proto = nfiles;
    fdr.file_descriptor_proto = blobs;
    resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    resp.file_descriptor_response = &fdr;
  } else if (errbuf[0] != '\0') {
    err.error_code = CONCH_CODE_NOT_FOUND;
    err.error_message = errbuf;
    resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    resp.error_response = &err;
  }
  len = protobuf_c_message_get_packed_size(&resp.base);
  o = conch__malloc(s->ep.mem, sizeof(*o) + len);
  if (o == NULL) {
    goto out;
  }
  o->len = protobuf_c_message_pack(&resp.base, o->data);
  conch__list_push(&c->out, &o->link);
  rv = 0;
out:
  conch__free(s->ep.mem, files);
  conch__free(s->ep.mem, blobs);
  conch__free(s->ep.mem, svc);
  conch__free(s->ep.mem, svcp);
  conch__free(s->ep.mem, names);
  conch__free(s->ep.mem, numbers);
  return rv;
}

static void refl_on_call(conch_rpc *rpc, void *user_data) {
  conch_server *s = conch_rpc_server(rpc);
  refl_call *c = conch__calloc(s->ep.mem, 1, sizeof(*c));
  (void)user_data;

  if (c == NULL) {
    finish(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "server reflection: out of memory");
    return;
  }
  conch__list_init(&c->out);
  conch_rpc_set_data(rpc, c);
}

static void refl_on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                            void *user_data) {
  refl_call *c = conch_rpc_data(rpc);
  int was_empty;
  (void)user_data;

  if (c == NULL) {
    return;
  }
  was_empty = conch__list_empty(&c->out);
  if (refl_answer(rpc, c, (const refl_req *)msg) != 0) {
    refl_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  if (was_empty) {
    (void)refl_flush(rpc, c);
  }
}

static void refl_on_send_ready(conch_rpc *rpc, void *user_data) {
  refl_call *c = conch_rpc_data(rpc);
  (void)user_data;
  if (c != NULL) {
    (void)refl_flush(rpc, c);
  }
}

static void refl_on_half_close(conch_rpc *rpc, void *user_data) {
  refl_call *c = conch_rpc_data(rpc);
  (void)user_data;
  if (c == NULL) {
    return;
  }
  if (!conch__list_empty(&c->out)) {
    /* Responses still wait: end once they are out (on_send_ready). */
    c->ending = 1;
    return;
  }
  conch_rpc_set_data(rpc, NULL);
  refl_call_free(conch_rpc_server(rpc), c);
  finish(rpc, CONCH_CODE_OK, NULL);
}

static void refl_on_cancel(conch_rpc *rpc, const conch_status *status,
                           void *user_data) {
  refl_call *c = conch_rpc_data(rpc);
  (void)status;
  (void)user_data;
  if (c != NULL) {
    conch_rpc_set_data(rpc, NULL);
    refl_call_free(conch_rpc_server(rpc), c);
  }
}

static void refl_on_ready(conch_rpc *rpc, void *user_data) {
  refl_call *c = conch_rpc_data(rpc);
  int ending;

  if (c == NULL) {
    return;
  }
  ending = c->ending;
  refl_on_send_ready(rpc, user_data);
  c = conch_rpc_data(rpc);
  if (ending && c != NULL && conch__list_empty(&c->out)) {
    conch_rpc_set_data(rpc, NULL);
    refl_call_free(conch_rpc_server(rpc), c);
    finish(rpc, CONCH_CODE_OK, NULL);
  }
}

static const conch_server_handler refl_handler = {
    .on_call = refl_on_call,
    .on_message = refl_on_message,
    .on_half_close = refl_on_half_close,
    .on_cancel = refl_on_cancel,
    .on_send_ready = refl_on_ready,
};

int conch_server_add_reflection(conch_server *s) {
  int rv;

  if (s == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->reflection) {
    return 0;
  }
  rv = conch_server_add_method(
      s, &grpc__reflection__v1__server_reflection__server_reflection_info__method,
      &refl_handler, NULL);
  if (rv == 0) {
    rv = conch_server_add_method(s, &refl_v1alpha, &refl_handler, NULL);
  }
  if (rv == 0) {
    rv = conch_server_add_file(
        s, &conch_file_grpc_2freflection_2fv1_2freflection_2eproto);
  }
  if (rv == 0) {
    s->reflection = 1;
  }
  return rv;
}

/* ---- Health ------------------------------------------------------------ */

typedef Grpc__Health__V1__HealthCheckRequest health_req;
typedef Grpc__Health__V1__HealthCheckResponse health_resp;

typedef struct health_entry {
  char *name;
  conch_health_status status;
} health_entry;

struct srv_health {
  health_entry *v;
  size_t n, cap;
  conch_link watchers; /* health_watch */
};

typedef struct health_watch {
  conch_link link;
  conch_rpc *rpc;
  char *service; /* NULL until the request came */
  int sent;      /* the status last sent, -1: none */
  int blocked;   /* a send was refused: on_send_ready sends the latest */
} health_watch;

static health_entry *health_find(struct srv_health *h, const char *name) {
  size_t i;
  for (i = 0; i < h->n; i++) {
    if (strcmp(h->v[i].name, name) == 0) {
      return &h->v[i];
    }
  }
  return NULL;
}

/* The status reported for |name|: SERVICE_UNKNOWN when it is not known,
   NOT_SERVING for every known one once the server shuts down. */
static conch_health_status health_of(conch_server *s, const char *name) {
  health_entry *e = health_find(s->health, name);
  if (e == NULL) {
    return CONCH_HEALTH_SERVICE_UNKNOWN;
  }
  return s->shutting ? CONCH_HEALTH_NOT_SERVING : e->status;
}

static void watch_free(conch_server *s, health_watch *w) {
  conch__list_remove(&w->link);
  conch__free(s->ep.mem, w->service);
  conch__free(s->ep.mem, w);
}

/* Sends the watched status when it changed.  Returns 0, or -1 when the
   call was ended. */
static int watch_push(conch_server *s, health_watch *w) {
  health_resp resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  conch_health_status now;
  int rv;

  if (w->service == NULL || w->blocked) {
    return 0;
  }
  now = health_of(s, w->service);
  if ((int)now == w->sent) {
    return 0;
  }
  resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)now;
  rv = conch_rpc_send(w->rpc, &resp.base);
  if (rv == CONCH_ERR_AGAIN) {
    w->blocked = 1;
    return 0;
  }
  if (rv != 0) {
    conch_rpc *rpc = w->rpc;
    watch_free(s, w);
    conch_rpc_set_data(rpc, NULL);
    finish(rpc, CONCH_CODE_INTERNAL, "health: cannot send the status");
    return -1;
  }
  w->sent = (int)now;
  return 0;
}

static void health_notify(conch_server *s) {
  conch_link *l, *next;
  for (l = s->health->watchers.next; l != &s->health->watchers; l = next) {
    next = l->next;
    (void)watch_push(s, CONCH_CONTAINER(l, health_watch, link));
  }
}

static void check_on_call(conch_rpc *rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
}

static void check_on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                             void *user_data) {
  conch_server *s = conch_rpc_server(rpc);
  const health_req *req = (const health_req *)msg;
  health_resp resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  conch_health_status st = health_of(s, req->service);
  (void)user_data;

  if (st == CONCH_HEALTH_SERVICE_UNKNOWN) {
    finish(rpc, CONCH_CODE_NOT_FOUND, "unknown service: %.256s", req->service);
    return;
  }
  resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)st;
  if (conch_rpc_send(rpc, &resp.base) != 0) {
    finish(rpc, CONCH_CODE_INTERNAL, "health: cannot send the status");
    return;
  }
  finish(rpc, CONCH_CODE_OK, NULL);
}

#define HEALTH_LIST_MAX 100

static void list_on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                            void *user_data) {
  conch_server *s = conch_rpc_server(rpc);
  struct srv_health *h = s->health;
  Grpc__Health__V1__HealthListResponse resp =
      GRPC__HEALTH__V1__HEALTH_LIST_RESPONSE__INIT;
  Grpc__Health__V1__HealthListResponse__StatusesEntry *ents, **entp;
  health_resp *vals;
  size_t i;
  int rv;
  (void)msg;
  (void)user_data;

  if (h->n > HEALTH_LIST_MAX) {
    finish(rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
           "health: %zu services, more than the %d a list holds", h->n,
           HEALTH_LIST_MAX);
    return;
  }
  ents = conch__calloc(s->ep.mem, h->n + 1, sizeof(*ents));
  entp = conch__calloc(s->ep.mem, h->n + 1, sizeof(*entp));
  vals = conch__calloc(s->ep.mem, h->n + 1, sizeof(*vals));
  if (ents == NULL || entp == NULL || vals == NULL) {
    conch__free(s->ep.mem, ents);
    conch__free(s->ep.mem, entp);
    conch__free(s->ep.mem, vals);
    finish(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "health: out of memory");
    return;
  }
  for (i = 0; i < h->n; i++) {
    grpc__health__v1__health_list_response__statuses_entry__init(&ents[i]);
    grpc__health__v1__health_check_response__init(&vals[i]);
    vals[i].status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)
        health_of(s, h->v[i].name);
    ents[i].key = h->v[i].name;
    ents[i].value = &vals[i];
    entp[i] = &ents[i];
  }
  resp.n_statuses = h->n;
  resp.statuses = entp;
  rv = conch_rpc_send(rpc, &resp.base);
  conch__free(s->ep.mem, ents);
  conch__free(s->ep.mem, entp);
  conch__free(s->ep.mem, vals);
  if (rv != 0) {
    finish(rpc, CONCH_CODE_INTERNAL, "health: cannot send the list");
    return;
  }
  finish(rpc, CONCH_CODE_OK, NULL);
}

static void watch_on_call(conch_rpc *rpc, void *user_data) {
  conch_server *s = conch_rpc_server(rpc);
  health_watch *w = conch__calloc(s->ep.mem, 1, sizeof(*w));
  (void)user_data;

  if (w == NULL) {
    finish(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "health: out of memory");
    return;
  }
  w->rpc = rpc;
  w->sent = -1;
  conch__list_push(&s->health->watchers, &w->link);
  conch_rpc_set_data(rpc, w);
}

static void watch_on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                             void *user_data) {
  conch_server *s = conch_rpc_server(rpc);
  health_watch *w = conch_rpc_data(rpc);
  const health_req *req = (const health_req *)msg;
  (void)user_data;

  if (w == NULL) {
    return;
  }
  w->service = conch__strdup(s->ep.mem, req->service);
  if (w->service == NULL) {
    watch_free(s, w);
    conch_rpc_set_data(rpc, NULL);
    finish(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "health: out of memory");
    return;
  }
  if (watch_push(s, w) == 0 && s->shutting) {
    /* Told NOT_SERVING (or unknown): the stream ends, or it would hold
       the drain up. */
    watch_free(s, w);
    conch_rpc_set_data(rpc, NULL);
    finish(rpc, CONCH_CODE_UNAVAILABLE, "the server is shutting down");
  }
}

static void watch_on_send_ready(conch_rpc *rpc, void *user_data) {
  health_watch *w = conch_rpc_data(rpc);
  (void)user_data;
  if (w != NULL) {
    w->blocked = 0;
    (void)watch_push(conch_rpc_server(rpc), w);
  }
}

static void watch_on_cancel(conch_rpc *rpc, const conch_status *status,
                            void *user_data) {
  health_watch *w = conch_rpc_data(rpc);
  (void)status;
  (void)user_data;
  if (w != NULL) {
    conch_rpc_set_data(rpc, NULL);
    watch_free(conch_rpc_server(rpc), w);
  }
}

static const conch_server_handler check_handler = {
    .on_call = check_on_call,
    .on_message = check_on_message,
};
static const conch_server_handler list_handler = {
    .on_call = check_on_call,
    .on_message = list_on_message,
};
static const conch_server_handler watch_handler = {
    .on_call = watch_on_call,
    .on_message = watch_on_message,
    .on_send_ready = watch_on_send_ready,
    .on_cancel = watch_on_cancel,
};

static int health_state(conch_server *s) {
  if (s->health == NULL) {
    s->health = conch__calloc(s->ep.mem, 1, sizeof(*s->health));
    if (s->health == NULL) {
      return CONCH_ERR_NOMEM;
    }
    conch__list_init(&s->health->watchers);
  }
  return 0;
}

static int health_put(conch_server *s, const char *service,
                      conch_health_status status) {
  struct srv_health *h = s->health;
  health_entry *e = health_find(h, service);

  if (e == NULL) {
    char *name;
    if (h->n == h->cap) {
      size_t cap = h->cap > 0 ? 2 * h->cap : 8;
      health_entry *v = conch__realloc(s->ep.mem, h->v, cap * sizeof(*v));
      if (v == NULL) {
        return CONCH_ERR_NOMEM;
      }
      h->v = v;
      h->cap = cap;
    }
    name = conch__strdup(s->ep.mem, service);
    if (name == NULL) {
      return CONCH_ERR_NOMEM;
    }
    e = &h->v[h->n++];
    e->name = name;
  }
  e->status = status;
  return 0;
}

int conch_server_add_health(conch_server *s) {
  int rv;

  if (s == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->health != NULL && s->health_served) {
    return 0;
  }
  rv = health_state(s);
  if (rv != 0) {
    return rv;
  }
  if (health_find(s->health, "") == NULL) {
    rv = health_put(s, "", CONCH_HEALTH_SERVING);
    if (rv != 0) {
      return rv;
    }
  }
  rv = conch_server_add_method(s, &grpc__health__v1__health__check__method,
                               &check_handler, NULL);
  if (rv == 0) {
    rv = conch_server_add_method(s, &grpc__health__v1__health__list__method,
                                 &list_handler, NULL);
  }
  if (rv == 0) {
    rv = conch_server_add_method(s, &grpc__health__v1__health__watch__method,
                                 &watch_handler, NULL);
  }
  if (rv == 0) {
    rv = conch_server_add_file(s, &conch_file_grpc_2fhealth_2fv1_2fhealth_2eproto);
  }
  if (rv == 0) {
    s->health_served = 1;
  }
  return rv;
}

int conch_server_health_set(conch_server *s, const char *service,
                            conch_health_status status) {
  int rv;

  if (s == NULL || service == NULL ||
      (status != CONCH_HEALTH_SERVING && status != CONCH_HEALTH_NOT_SERVING &&
       status != CONCH_HEALTH_UNKNOWN)) {
    return CONCH_ERR_INVALID;
  }
  rv = conch_server_add_health(s);
  if (rv == 0) {
    rv = health_put(s, service, status);
  }
  if (rv == 0) {
    health_notify(s);
  }
  return rv;
}

void conch__srv_svc_shutdown(conch_server *s) {
  conch_link *l, *next;

  if (s->health == NULL) {
    return;
  }
  /* Every watcher hears NOT_SERVING, and its stream ends: a watch would
     otherwise hold the drain up for as long as the client keeps it. */
  for (l = s->health->watchers.next; l != &s->health->watchers; l = next) {
    health_watch *w = CONCH_CONTAINER(l, health_watch, link);
    conch_rpc *rpc = w->rpc;
    next = l->next;
    if (w->service == NULL) {
      continue; /* its request is not there yet: on_message ends it */
    }
    w->blocked = 0;
    if (watch_push(s, w) != 0) {
      continue;
    }
    watch_free(s, w);
    conch_rpc_set_data(rpc, NULL);
    finish(rpc, CONCH_CODE_UNAVAILABLE, "the server is shutting down");
  }
}

void conch__srv_svc_free(conch_server *s) {
  size_t i;

  conch_descpool_free(s->files);
  s->files = NULL;
  if (s->health != NULL) {
    while (!conch__list_empty(&s->health->watchers)) {
      watch_free(s, CONCH_CONTAINER(s->health->watchers.next, health_watch,
                                    link));
    }
    for (i = 0; i < s->health->n; i++) {
      conch__free(s->ep.mem, s->health->v[i].name);
    }
    conch__free(s->ep.mem, s->health->v);
    conch__free(s->ep.mem, s->health);
    s->health = NULL;
  }
}
