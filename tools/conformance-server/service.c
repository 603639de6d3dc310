/* connectrpc.conformance.v1.ConformanceService on conch's server core, as
   proto/conformance/v1/service.proto describes it (and as the reference
   server and tests/conformance/node/server.mjs behave):

   - Every method echoes a RequestInfo: the request headers (one Header per
     name, values in order), the deadline seen when the call arrived
     (milliseconds left; absent without one) and the requests as Any.
   - Unary, IdempotentUnary, ClientStream answer once the requests ended:
     no definition: a payload with only the RequestInfo; an error: that
     error at once, the RequestInfo appended to its details; data: the
     payload after response_delay_ms.  Headers and trailers as defined,
     with errors too.
   - ServerStream: one response per data item, each after the delay, the
     RequestInfo in the first; then the error, if any (RequestInfo
     appended when no response went out).
   - BidiStream: the first request carries the definition and full_duplex.
     Full duplex: each request is answered by the next item (after the
     delay; requests are held back meanwhile), echoing the requests since
     the previous response (the first with headers and deadline too); a
     request with no item left ends the reading.  Half duplex: every
     request is read first.  Items left go out next, then the error.
   - Unimplemented: unimplemented.
   - raw_response (reference server only) is not honoured.

   The delays run on the loop of main.c (cs_next_delay_ms(),
   cs_run_due()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cs.h"

typedef Connectrpc__Conformance__V1__Header Header;
typedef Connectrpc__Conformance__V1__ConformancePayload Payload;
typedef Connectrpc__Conformance__V1__ConformancePayload__RequestInfo Info;
typedef Connectrpc__Conformance__V1__UnaryResponseDefinition UnaryDef;
typedef Connectrpc__Conformance__V1__StreamResponseDefinition StreamDef;
typedef Connectrpc__Conformance__V1__Error Error;
typedef Google__Protobuf__Any Any;

#define TYPE_PREFIX "type.googleapis.com/"

enum kind { K_UNARY, K_SSTREAM, K_CSTREAM, K_BIDI, K_UNIMPL, K_IDEM };

/* Every response message of the service is { ConformancePayload payload =
   1; }: one layout, six descriptors. */
typedef struct any_response {
  ProtobufCMessage base;
  Payload *payload;
} any_response;

typedef struct call {
  struct call *prev, *next; /* the calls list */
  conch_rpc *rpc;
  enum kind kind;
  /* What the call saw when it arrived. */
  Header **hdrs;
  size_t nhdrs;
  long timeout_ms; /* -1: none */
  /* Requests (as Any) not yet echoed. */
  Any **reqs;
  size_t nreqs;
  /* The first request (owned) and its definition (inside it). */
  ProtobufCMessage *first;
  const UnaryDef *udef;
  const StreamDef *sdef;
  int full_duplex;
  size_t sent;      /* responses sent */
  int tail;         /* requests done: items left, then the end */
  int pending;      /* full duplex: a response to a request is due */
  int half_closed;  /* the client sent its last request */
  int delayed;      /* the delay of the next response has run */
  int armed;        /* waiting for |due| */
  long long due;    /* CLOCK_MONOTONIC ms */
} call;

static call *g_calls;

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n != 0 ? n : 1, size);
  if (p == NULL) {
    fprintf(stderr, "conformance-server: out of memory\n");
    exit(70);
  }
  return p;
}

static void *xrealloc(void *p, size_t size) {
  p = realloc(p, size != 0 ? size : 1);
  if (p == NULL) {
    fprintf(stderr, "conformance-server: out of memory\n");
    exit(70);
  }
  return p;
}

static char *xstrndup(const void *s, size_t n) {
  char *p = xcalloc(n + 1, 1);
  memcpy(p, s, n);
  return p;
}

static void free_any(Any *a) {
  free(a->type_url);
  free(a->value.data);
  free(a);
}

/* Packs |m| into a new Any. */
static Any *pack_any(const ProtobufCMessage *m) {
  Any *a = xcalloc(1, sizeof(*a));
  google__protobuf__any__init(a);
  size_t n = strlen(m->descriptor->name);
  a->type_url = xcalloc(sizeof(TYPE_PREFIX) + n, 1);
  memcpy(a->type_url, TYPE_PREFIX, sizeof(TYPE_PREFIX) - 1);
  memcpy(a->type_url + sizeof(TYPE_PREFIX) - 1, m->descriptor->name, n);
  a->value.len = protobuf_c_message_get_packed_size(m);
  a->value.data = xcalloc(a->value.len, 1);
  protobuf_c_message_pack(m, a->value.data);
  return a;
}

static void free_reqs(call *c) {
  for (size_t i = 0; i < c->nreqs; i++) {
    free_any(c->reqs[i]);
  }
  free(c->reqs);
  c->reqs = NULL;
  c->nreqs = 0;
}

static void call_free(call *c) {
  if (c->prev != NULL) {
    c->prev->next = c->next;
  } else {
    g_calls = c->next;
  }
  if (c->next != NULL) {
    c->next->prev = c->prev;
  }
  for (size_t i = 0; i < c->nhdrs; i++) {
    for (size_t j = 0; j < c->hdrs[i]->n_value; j++) {
      free(c->hdrs[i]->value[j]);
    }
    free(c->hdrs[i]->value);
    free(c->hdrs[i]->name);
    free(c->hdrs[i]);
  }
  free(c->hdrs);
  free_reqs(c);
  if (c->first != NULL) {
    protobuf_c_message_free_unpacked(c->first, NULL);
  }
  free(c);
}

/* The request headers, grouped by name in the order names first occur. */
static void snapshot_headers(call *c) {
  const conch_metadata *md = conch_rpc_request_headers(c->rpc);
  size_t n = conch_metadata_count(md);
  for (size_t i = 0; i < n; i++) {
    const char *name;
    const uint8_t *value;
    size_t len;
    if (conch_metadata_at(md, i, &name, &value, &len) != 0) {
      continue;
    }
    Header *h = NULL;
    for (size_t k = 0; k < c->nhdrs; k++) {
      if (strcmp(c->hdrs[k]->name, name) == 0) {
        h = c->hdrs[k];
        break;
      }
    }
    if (h == NULL) {
      h = xcalloc(1, sizeof(*h));
      connectrpc__conformance__v1__header__init(h);
      h->name = xstrndup(name, strlen(name));
      c->hdrs = xrealloc(c->hdrs, (c->nhdrs + 1) * sizeof(*c->hdrs));
      c->hdrs[c->nhdrs++] = h;
    }
    h->value = xrealloc(h->value, (h->n_value + 1) * sizeof(*h->value));
    h->value[h->n_value++] = xstrndup(value, len);
  }
}

static void add_headers(conch_metadata *md, Header **h, size_t n) {
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < h[i]->n_value; j++) {
      int rv = conch_metadata_add_str(md, h[i]->name, h[i]->value[j]);
      if (rv != 0) {
        fprintf(stderr, "conformance-server: header %s refused: %s\n",
                h[i]->name, conch_strerror(rv));
      }
    }
  }
}

/* The RequestInfo to echo: |full| with headers and deadline. */
static void fill_info(call *c, Info *info, int full) {
  connectrpc__conformance__v1__conformance_payload__request_info__init(info);
  if (full) {
    info->n_request_headers = c->nhdrs;
    info->request_headers = c->hdrs;
    if (c->timeout_ms >= 0) {
      info->_timeout_ms_case =
          CONNECTRPC__CONFORMANCE__V1__CONFORMANCE_PAYLOAD__REQUEST_INFO___TIMEOUT_MS_TIMEOUT_MS;
      info->timeout_ms = c->timeout_ms;
    }
  }
  info->n_requests = c->nreqs;
  info->requests = c->reqs;
}

/* Ends |c| with an internal error after a failed send (|rv|). */
static void fail(call *c, int rv) {
  conch_status st;
  conch_status_init(&st);
  st.code = CONCH_CODE_INTERNAL;
  char msg[128];
  snprintf(msg, sizeof(msg), "conformance-server: sending failed: %s",
           conch_strerror(rv));
  st.message = msg;
  conch_rpc_finish(c->rpc, &st);
  call_free(c);
}

static size_t n_items(const call *c) {
  if (c->kind == K_SSTREAM || c->kind == K_BIDI) {
    return c->sdef != NULL ? c->sdef->n_response_data : 0;
  }
  /* Unary kinds: one answer, unless the definition is an error. */
  return c->udef != NULL &&
                 c->udef->response_case ==
                     CONNECTRPC__CONFORMANCE__V1__UNARY_RESPONSE_DEFINITION__RESPONSE_ERROR
             ? 0
             : 1;
}

static uint32_t delay_of(const call *c) {
  if (c->sdef != NULL) {
    return c->sdef->response_delay_ms;
  }
  return c->udef != NULL ? c->udef->response_delay_ms : 0;
}

/* Sends response number c->sent.  Returns what conch_rpc_send() returns. */
static int send_item(call *c) {
  Payload p = CONNECTRPC__CONFORMANCE__V1__CONFORMANCE_PAYLOAD__INIT;
  Info info;
  any_response r;

  if (c->sdef != NULL) {
    p.data = c->sdef->response_data[c->sent];
  } else if (c->udef != NULL &&
             c->udef->response_case ==
                 CONNECTRPC__CONFORMANCE__V1__UNARY_RESPONSE_DEFINITION__RESPONSE_RESPONSE_DATA) {
    p.data = c->udef->response_data;
  }
  if (c->sent == 0) {
    fill_info(c, &info, 1);
    p.request_info = &info;
  } else if (c->pending) {
    fill_info(c, &info, 0); /* full duplex: the requests since */
    p.request_info = &info;
  }
  protobuf_c_message_init(conch_rpc_method(c->rpc)->output, &r);
  r.payload = &p;
  return conch_rpc_send(c->rpc, &r.base);
}

/* Ends |c| as its definition says, after the last response. */
static void finish(call *c) {
  const Error *e = NULL;
  if (c->sdef != NULL) {
    e = c->sdef->error;
  } else if (c->udef != NULL &&
             c->udef->response_case ==
                 CONNECTRPC__CONFORMANCE__V1__UNARY_RESPONSE_DEFINITION__RESPONSE_ERROR) {
    e = c->udef->error;
  }
  if (e == NULL) {
    int rv = conch_rpc_finish(c->rpc, NULL);
    if (rv != 0) {
      fprintf(stderr, "conformance-server: finish: %s\n", conch_strerror(rv));
    }
    call_free(c);
    return;
  }

  conch_status st;
  conch_status_init(&st);
  st.code = (conch_code)e->code;
  st.message = e->_message_case ==
                       CONNECTRPC__CONFORMANCE__V1__ERROR___MESSAGE_MESSAGE
                   ? e->message
                   : NULL;
  size_t nd = e->n_details + (c->sent == 0 ? 1 : 0);
  conch_error_detail *d = xcalloc(nd, sizeof(*d));
  for (size_t i = 0; i < e->n_details; i++) {
    d[i].type_url = e->details[i]->type_url;
    d[i].value = e->details[i]->value.data;
    d[i].len = e->details[i]->value.len;
  }
  Any *info_any = NULL;
  if (c->sent == 0) {
    /* No response carried the RequestInfo: the error does. */
    Info info;
    fill_info(c, &info, 1);
    info_any = pack_any(&info.base);
    d[e->n_details].type_url = info_any->type_url;
    d[e->n_details].value = info_any->value.data;
    d[e->n_details].len = info_any->value.len;
  }
  st.details = nd > 0 ? d : NULL;
  st.ndetails = nd;
  int rv = conch_rpc_finish(c->rpc, &st);
  if (rv == CONCH_ERR_INVALID) {
    /* A code outside 1..16: the call is still ours; end it as unknown. */
    st.code = CONCH_CODE_UNKNOWN;
    rv = conch_rpc_finish(c->rpc, &st);
  }
  if (rv != 0) {
    fprintf(stderr, "conformance-server: finish: %s\n", conch_strerror(rv));
  }
  free(d);
  if (info_any != NULL) {
    free_any(info_any);
  }
  call_free(c);
}

/* Goes on with |c| as far as it can now: responses (each after its delay),
   then the end.  |c| may be freed. */
static void step(call *c) {
  for (;;) {
    if (!c->tail && !c->pending) {
      return;
    }
    if (c->sent >= n_items(c)) {
      finish(c);
      return;
    }
    uint32_t delay = delay_of(c);
    if (delay > 0 && !c->delayed) {
      c->armed = 1;
      c->due = now_ms() + delay;
      c->delayed = 1;
      return;
    }
    int rv = send_item(c);
    if (rv == CONCH_ERR_AGAIN) {
      return; /* on_send_ready steps again */
    }
    if (rv != 0) {
      fail(c, rv);
      return;
    }
    c->delayed = 0;
    c->sent++;
    if (c->pending) {
      /* Full duplex: that answered the requests so far; read on. */
      c->pending = 0;
      free_reqs(c);
      conch_rpc_resume(c->rpc);
      if (!c->half_closed) {
        return;
      }
      c->tail = 1;
    }
  }
}

long cs_next_delay_ms(void) {
  long long best = -1;
  long long now = now_ms();
  for (call *c = g_calls; c != NULL; c = c->next) {
    if (!c->armed) {
      continue;
    }
    long long left = c->due > now ? c->due - now : 0;
    if (best < 0 || left < best) {
      best = left;
    }
  }
  return (long)best;
}

void cs_run_due(void) {
  long long now = now_ms();
  int again = 1;
  /* step() may free any call: restart the walk after each. */
  while (again) {
    again = 0;
    for (call *c = g_calls; c != NULL; c = c->next) {
      if (c->armed && c->due <= now) {
        c->armed = 0;
        step(c);
        again = 1;
        break;
      }
    }
  }
}

/* ---- Handlers ------------------------------------------------------------ */

static void on_call(conch_rpc *rpc, void *ud) {
  call *c = xcalloc(1, sizeof(*c));
  c->rpc = rpc;
  c->kind = (enum kind)(intptr_t)ud;
  c->timeout_ms = conch_rpc_timeout_ms(rpc);
  snapshot_headers(c);
  c->next = g_calls;
  if (g_calls != NULL) {
    g_calls->prev = c;
  }
  g_calls = c;
  conch_rpc_set_data(rpc, c);

  if (c->kind == K_UNIMPL) {
    conch_status st;
    conch_status_init(&st);
    st.code = CONCH_CODE_UNIMPLEMENTED;
    st.message = (char *)"connectrpc.conformance.v1.ConformanceService."
                         "Unimplemented is not implemented";
    conch_rpc_finish(rpc, &st);
    call_free(c);
  }
}

/* Takes the definition from the first request (a copy of it is kept). */
static void take_definition(call *c, const ProtobufCMessage *msg,
                            const Any *packed) {
  c->first = protobuf_c_message_unpack(msg->descriptor, NULL,
                                       packed->value.len, packed->value.data);
  if (c->first == NULL) {
    fprintf(stderr, "conformance-server: out of memory\n");
    exit(70);
  }
  Header **rh = NULL, **rt = NULL;
  size_t nrh = 0, nrt = 0;
  switch (c->kind) {
  case K_UNARY:
    c->udef = ((Connectrpc__Conformance__V1__UnaryRequest *)c->first)
                  ->response_definition;
    break;
  case K_IDEM:
    c->udef = ((Connectrpc__Conformance__V1__IdempotentUnaryRequest *)c->first)
                  ->response_definition;
    break;
  case K_CSTREAM:
    c->udef = ((Connectrpc__Conformance__V1__ClientStreamRequest *)c->first)
                  ->response_definition;
    break;
  case K_SSTREAM:
    c->sdef = ((Connectrpc__Conformance__V1__ServerStreamRequest *)c->first)
                  ->response_definition;
    break;
  case K_BIDI: {
    Connectrpc__Conformance__V1__BidiStreamRequest *b = (void *)c->first;
    c->sdef = b->response_definition;
    c->full_duplex = b->full_duplex;
    break;
  }
  default:
    break;
  }
  if (c->udef != NULL) {
    rh = c->udef->response_headers;
    nrh = c->udef->n_response_headers;
    rt = c->udef->response_trailers;
    nrt = c->udef->n_response_trailers;
  } else if (c->sdef != NULL) {
    rh = c->sdef->response_headers;
    nrh = c->sdef->n_response_headers;
    rt = c->sdef->response_trailers;
    nrt = c->sdef->n_response_trailers;
  }
  add_headers(conch_rpc_response_headers(c->rpc), rh, nrh);
  add_headers(conch_rpc_response_trailers(c->rpc), rt, nrt);
}

static void on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                       void *ud) {
  call *c = conch_rpc_data(rpc);
  (void)ud;
  if (c->tail) {
    return; /* full duplex, reading stopped: nothing more to answer */
  }
  Any *a = pack_any(msg);
  c->reqs = xrealloc(c->reqs, (c->nreqs + 1) * sizeof(*c->reqs));
  c->reqs[c->nreqs++] = a;
  if (c->first == NULL) {
    take_definition(c, msg, a);
  }
  if (c->kind != K_BIDI || !c->full_duplex) {
    return;
  }
  if (c->sent >= n_items(c)) {
    /* No item left for this request: stop reading, and end. */
    c->tail = 1;
    step(c);
    return;
  }
  c->pending = 1;
  conch_rpc_pause(rpc);
  step(c);
}

static void on_half_close(conch_rpc *rpc, void *ud) {
  call *c = conch_rpc_data(rpc);
  (void)ud;
  if (c->kind == K_BIDI && c->full_duplex) {
    c->half_closed = 1;
    if (c->pending || c->tail) {
      return;
    }
  }
  c->tail = 1;
  step(c);
}

static void on_cancel(conch_rpc *rpc, const conch_status *st, void *ud) {
  (void)st;
  (void)ud;
  call_free(conch_rpc_data(rpc));
}

static void on_send_ready(conch_rpc *rpc, void *ud) {
  (void)ud;
  step(conch_rpc_data(rpc));
}

int cs_register(conch_server *s) {
  static const struct {
    const conch_method *m;
    enum kind kind;
  } table[] = {
      {&connectrpc__conformance__v1__conformance_service__unary__method,
       K_UNARY},
      {&connectrpc__conformance__v1__conformance_service__server_stream__method,
       K_SSTREAM},
      {&connectrpc__conformance__v1__conformance_service__client_stream__method,
       K_CSTREAM},
      {&connectrpc__conformance__v1__conformance_service__bidi_stream__method,
       K_BIDI},
      {&connectrpc__conformance__v1__conformance_service__unimplemented__method,
       K_UNIMPL},
      {&connectrpc__conformance__v1__conformance_service__idempotent_unary__method,
       K_IDEM},
  };
  const conch_server_handler h = {
      .on_call = on_call,
      .on_message = on_message,
      .on_half_close = on_half_close,
      .on_cancel = on_cancel,
      .on_send_ready = on_send_ready,
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
    int rv = conch_server_add_method(s, table[i].m, &h,
                                     (void *)(intptr_t)table[i].kind);
    if (rv != 0) {
      return rv;
    }
  }
  /* The schema, for server reflection. */
  return conch_server_add_file(s,
                               &conch_file_conformance_2fv1_2fservice_2eproto);
}
