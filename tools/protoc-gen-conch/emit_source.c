/* The source of a .proto file's stubs (sg_emit_source()): method
   descriptors, the trampolines, the client's and the server's functions,
   registration and the embedded file descriptors. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_int.h"

static const char *const kind_names[] = {
    "CONCH_STREAM_UNARY", "CONCH_STREAM_CLIENT", "CONCH_STREAM_SERVER",
    "CONCH_STREAM_BIDI"};

static const char *const idempotency_names[] = {
    "CONCH_IDEMPOTENCY_UNKNOWN", "CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS",
    "CONCH_IDEMPOTENCY_IDEMPOTENT"};

/* ---- Source ------------------------------------------------------------ */

static void source_descriptor(sg_buf *b, const sg_method *m) {
  sg_buf_printf(b,
                "const conch_method %s__method = {\n"
                "    .path = \"%s\",\n"
                "    .kind = %s,\n"
                "    .input = &%s__descriptor,\n"
                "    .output = &%s__descriptor,\n"
                "    .idempotency = %s,\n"
                "};\n",
                m->lower, m->path, kind_names[m->kind], m->in->lower,
                m->out->lower, idempotency_names[m->idempotency]);
}

/* What the trampolines of one side of a method share: runtime handlers
   "static void <p><k>_<event>(<self>, ...)" that forward to the typed
   handler h-><member><dot><event> of the table |h_t| passed as their
   user_data. */
typedef struct side {
  char p;
  size_t k;
  const char *self;    /* "conch_call *call" */
  const char *var;     /* "call" */
  const char *h_t;     /* the handler table's type */
  const char *typed_t; /* the typed view of |var| */
  const char *member;  /* the method's member of the table, or "" */
  const char *dot;     /* "." after a member, or "" */
} side;

/* The head of a trampoline of |ev| and its locals h and typed; its
   parameters after |self| are "const <type> *<name>" pairs up to a NULL. */
static void tramp_open(sg_buf *b, decl *dl, const side *sd, const char *ev,
                       ...) SG_SENTINEL;
static void tramp_forward(sg_buf *b, decl *dl, const side *sd, const char *ev,
                          int always, const char *msg_t, ...) SG_SENTINEL;

static void tramp_open(sg_buf *b, decl *dl, const side *sd, const char *ev,
                       ...) {
  va_list ap;
  decl_start(dl, "static void %c%zu_%s(", sd->p, sd->k, ev);
  decl_add(dl, "%s", sd->self);
  va_start(ap, ev);
  decl_vconst(dl, ap);
  va_end(ap);
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "", ") {");
  sg_buf_printf(b,
                "  const %s *h = user_data;\n"
                "  %s typed = {%s};\n\n",
                sd->h_t, sd->typed_t, sd->var);
}

/* The rest of a trampoline: the call of the typed handler of |ev| (when it
   is set, unless |always|) with typed, "(const <msg_t> *)msg" unless
   |msg_t| is NULL, the arguments up to a NULL and h->user_data. */
static void tramp_forward(sg_buf *b, decl *dl, const side *sd, const char *ev,
                          int always, const char *msg_t, ...) {
  const char *arg;
  va_list ap;
  if (!always) {
    sg_buf_printf(b, "  if (h->%s%s%s != NULL) {\n", sd->member, sd->dot, ev);
  }
  decl_start(dl, "h->%s%s%s(", sd->member, sd->dot, ev);
  decl_add(dl, "typed");
  if (msg_t != NULL) {
    decl_add(dl, "(const %s *)msg", msg_t);
  }
  va_start(ap, msg_t);
  while ((arg = va_arg(ap, const char *)) != NULL) {
    decl_add(dl, "%s", arg);
  }
  va_end(ap);
  decl_add(dl, "h->user_data");
  decl_end(b, dl, always ? "  " : "    ", ");");
  sg_buf_puts(b, always ? "}\n\n" : "  }\n}\n\n");
}

/* The trampolines: runtime handlers that forward to the typed ones. */
static void source_trampolines(sg_buf *b, const names *n, decl *dl) {
  const sg_method *m = n->m;
  size_t k = m->index;

  side sd = {'m', k, "conch_call *call", "call", HANDLER_T(n), CALL_T(n), "",
             ""};

  sg_buf_putc(b, '\n');
  tramp_open(b, dl, &sd, "on_headers", "conch_metadata", "headers", NULL);
  tramp_forward(b, dl, &sd, "on_headers", 0, NULL, "headers", NULL);

  tramp_open(b, dl, &sd, "on_message", "ProtobufCMessage", "msg", NULL);
  sg_buf_puts(b, "  /* Installed only with h->on_message.  |msg| is the base "
                 "of a\n"
                 "     message of the method's output type. */\n");
  tramp_forward(b, dl, &sd, "on_message", 1, n->resp, NULL);

  if (is_stream_in(m)) {
    tramp_open(b, dl, &sd, "on_send_ready", NULL);
    tramp_forward(b, dl, &sd, "on_send_ready", 0, NULL, NULL);
  }

  tramp_open(b, dl, &sd, "on_close", "conch_status", "status",
             "conch_metadata", "trailers", NULL);
  tramp_forward(b, dl, &sd, "on_close", 0, NULL, "status", "trailers", NULL);

  /* Push and pull differ only in on_message, which the runtime reads at
     start to choose the mode. */
  sg_buf_printf(b,
                "static const conch_call_handler m%zu_push = {\n"
                "    .on_headers = m%zu_on_headers,\n"
                "    .on_message = m%zu_on_message,\n",
                k, k, k);
  if (is_stream_in(m)) {
    sg_buf_printf(b, "    .on_send_ready = m%zu_on_send_ready,\n", k);
  }
  sg_buf_printf(b,
                "    .on_close = m%zu_on_close,\n"
                "};\n\n"
                "static const conch_call_handler m%zu_pull = {\n"
                "    .on_headers = m%zu_on_headers,\n",
                k, k, k);
  if (is_stream_in(m)) {
    sg_buf_printf(b, "    .on_send_ready = m%zu_on_send_ready,\n", k);
  }
  sg_buf_printf(b,
                "    .on_close = m%zu_on_close,\n"
                "};\n",
                k);
}

/* "<head>client, &<B>__method, opts": a call of the runtime for the
   method. */
static void runtime_call(decl *dl, const names *n, const char *head) {
  decl_start(dl, "%s", head);
  decl_add(dl, "client");
  decl_add(dl, "&%s__method", n->B);
  decl_add(dl, "opts");
}

static void source_start(sg_buf *b, const names *n, decl *dl) {
  const sg_method *m = n->m;
  size_t k = m->index;

  sg_buf_putc(b, '\n');
  proto_start(dl, n);
  decl_end(b, dl, "", ") {");
  sg_buf_printf(b,
                "  const conch_call_handler *table = &m%zu_pull;\n\n"
                "  if (%sout == NULL) {\n"
                "    return CONCH_ERR_INVALID;\n"
                "  }\n"
                "  if (handler != NULL && handler->on_message != NULL) {\n"
                "    table = &m%zu_push;\n"
                "  }\n",
                k, is_stream_in(m) ? "" : "req == NULL || ", k);
  runtime_call(dl, n, "return conch_stub_start(");
  decl_add(dl, "table");
  decl_add(dl, "handler");
  decl_add(dl, is_stream_in(m) ? "NULL" : "&req->base");
  decl_add(dl, "&out->base");
  decl_end(b, dl, "  ", ");");
  sg_buf_puts(b, "}\n");
}

static void source_sync(sg_buf *b, const names *n, decl *dl) {
  sg_buf_putc(b, '\n');
  proto_sync(dl, n);
  decl_end(b, dl, "", ") {");
  sg_buf_puts(b, "  ProtobufCMessage *m = NULL;\n"
                 "  int rv;\n\n"
                 "  if (resp == NULL) {\n"
                 "    return CONCH_ERR_INVALID;\n"
                 "  }\n"
                 "  *resp = NULL;\n"
                 "  if (req == NULL) {\n"
                 "    return CONCH_ERR_INVALID;\n"
                 "  }\n");
  runtime_call(dl, n, "rv = conch_unary_sync(");
  decl_add(dl, "&req->base");
  decl_add(dl, "&m");
  decl_add(dl, "status");
  decl_add(dl, "headers");
  decl_add(dl, "trailers");
  decl_end(b, dl, "  ", ");");
  sg_buf_printf(b,
                "  *resp = (%s *)m; /* m is the base of one */\n"
                "  return rv;\n"
                "}\n",
                n->resp);
}

/* _async() of a unary method or a server stream, and the callbacks that
   turn the runtime's untyped ones into the method's. */
static void source_async(sg_buf *b, const names *n, decl *dl) {
  size_t k = n->m->index;
  int stream = n->m->kind == SG_SERVER;

  sg_buf_putc(b, '\n');
  if (stream) {
    decl_start(dl, "static void m%zu_message(", k);
    decl_add(dl, "const ProtobufCMessage *msg");
    decl_add(dl, "conch_stub_fn on_message");
    decl_add(dl, "void *user_data");
    decl_end(b, dl, "", ") {");
    sg_buf_puts(b, "  /* on_message was cast from this method's _OnMessage "
                   "type; msg is the\n     base of its response type. */\n");
    decl_start(dl, "((%s_OnMessage)on_message)(", n->m->camel);
    decl_add(dl, "(const %s *)msg", n->resp);
    decl_add(dl, "user_data");
    decl_end(b, dl, "  ", ");");
    sg_buf_puts(b, "}\n\n");
  }
  decl_start(dl, "static void m%zu_done(", k);
  if (!stream) {
    decl_add(dl, "const ProtobufCMessage *resp");
  }
  decl_end_params(dl);
  decl_add(dl, "conch_stub_fn done");
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "", ") {");
  if (stream) {
    sg_buf_puts(b, "  /* done was cast from this method's _Done type. */\n");
  } else {
    sg_buf_puts(b, "  /* done was cast from this method's _Done type; resp, "
                   "when not NULL,\n     is the base of its response type. "
                   "*/\n");
  }
  decl_start(dl, "((%s_Done)done)(", n->m->camel);
  if (!stream) {
    decl_add(dl, "(const %s *)resp", n->resp);
  }
  decl_add(dl, "status");
  decl_add(dl, "headers");
  decl_add(dl, "trailers");
  decl_add(dl, "user_data");
  decl_end(b, dl, "  ", ");");
  sg_buf_puts(b, "}\n\n");
  proto_async(dl, n);
  decl_end(b, dl, "", ") {");
  runtime_call(dl, n,
               stream ? "return conch_stub_stream_async("
                      : "return conch_stub_unary_async(");
  decl_add(dl, "req != NULL ? &req->base : NULL");
  if (stream) {
    decl_add(dl, "m%zu_message", k);
    decl_add(dl, "(conch_stub_fn)on_message");
  }
  decl_add(dl, "m%zu_done", k);
  decl_add(dl, "(conch_stub_fn)done");
  decl_add(dl, "user_data");
  decl_add(dl, "out");
  decl_end(b, dl, "  ", ");");
  sg_buf_puts(b, "}\n");
}

/* _recv(), _recv_sync() and _close_and_recv_sync() share one body. */
static void source_take(sg_buf *b, const names *n, decl *dl, const char *suffix,
                        const char *param, const char *how) {
  sg_buf_putc(b, '\n');
  proto_take(dl, n, suffix, param);
  decl_end(b, dl, "", ") {");
  sg_buf_printf(b,
                "  ProtobufCMessage *m = NULL;\n"
                "  int rv;\n\n"
                "  if (%s == NULL) {\n"
                "    return CONCH_ERR_INVALID;\n"
                "  }\n",
                param);
  decl_start(dl, "rv = %s(", how);
  decl_add(dl, "call.base");
  decl_add(dl, "&%s", RESP_DESC(n));
  if (strcmp(how, "conch_stub_recv") == 0) {
    decl_add(dl, "%s", strcmp(suffix, "_recv") == 0 ? "0" : "1");
  }
  decl_add(dl, "&m");
  decl_end(b, dl, "  ", ");");
  sg_buf_printf(b,
                "  *%s = (%s *)m;\n"
                "  return rv;\n"
                "}\n",
                param, n->resp);
}

static void source_send(sg_buf *b, const names *n, decl *dl) {
  static const char *const fn[] = {"_send", "conch_call_send", "_send_sync",
                                   "conch_call_send_sync"};
  size_t i;

  for (i = 0; i < 4; i += 2) {
    sg_buf_putc(b, '\n');
    proto_send(dl, n, fn[i]);
    decl_end(b, dl, "", ") {");
    sg_buf_printf(b,
                  "  if (msg == NULL) {\n"
                  "    return CONCH_ERR_INVALID;\n"
                  "  }\n"
                  "  return %s(call.base, &msg->base);\n"
                  "}\n",
                  fn[i + 1]);
  }
  sg_buf_putc(b, '\n');
  proto_call(dl, n, "_close_send");
  decl_end(b, dl, "", ") {");
  sg_buf_puts(b, "  return conch_call_close_send(call.base);\n}\n");
}

/* The server's trampolines: conch_server_handler members that forward to
   the typed handlers of the table (the method's user_data). */
static void source_server(sg_buf *b, const names *n, const sg_service *s,
                          decl *dl) {
  const sg_method *m = n->m;
  size_t k = m->index;
  const char *mb = m->member;
  side sd = {'s', k, "conch_rpc *rpc", "rpc", s->handlers, RPC_T(n), mb, "."};

  sg_buf_putc(b, '\n');
  decl_start(dl, "static void s%zu_on_call(", k);
  decl_add(dl, "conch_rpc *rpc");
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "", ") {");
  sg_buf_printf(b, "  const %s *h = user_data;\n\n", s->handlers);
  if (is_stream_in(m)) {
    /* "  if (h->" "X.on_message == NULL && h->" "X.on_half_close == NULL) {"
       fits in WIDTH, or breaks after the "&&" as clang-format does. */
    if (2 * strlen(mb) + 60 <= WIDTH) {
      sg_buf_printf(b,
                    "  if (h->%s.on_message == NULL && "
                    "h->%s.on_half_close == NULL) {\n",
                    mb, mb);
    } else {
      sg_buf_printf(b,
                    "  if (h->%s.on_message == NULL &&\n"
                    "      h->%s.on_half_close == NULL) {\n",
                    mb, mb);
    }
  } else {
    sg_buf_printf(b, "  if (h->%s.on_request == NULL) {\n", mb);
  }
  sg_buf_puts(b, "    conch_status st;\n\n"
                 "    conch_status_init(&st);\n"
                 "    st.code = CONCH_CODE_UNIMPLEMENTED;\n"
                 "    (void)conch_rpc_finish(rpc, &st);\n"
                 "  }\n"
                 "}\n\n");

  tramp_open(b, dl, &sd, "on_message", "ProtobufCMessage", "msg", NULL);
  sg_buf_puts(b, "  /* |msg| is the base of a message of the method's input "
                 "type. */\n");
  tramp_forward(b, dl, &sd, is_stream_in(m) ? "on_message" : "on_request", 0,
                n->req, NULL);

  if (is_stream_in(m)) {
    tramp_open(b, dl, &sd, "on_half_close", NULL);
    tramp_forward(b, dl, &sd, "on_half_close", 0, NULL, NULL);
  }
  if (is_stream_out(m)) {
    tramp_open(b, dl, &sd, "on_send_ready", NULL);
    tramp_forward(b, dl, &sd, "on_send_ready", 0, NULL, NULL);
  }

  tramp_open(b, dl, &sd, "on_cancel", "conch_status", "status", NULL);
  tramp_forward(b, dl, &sd, "on_cancel", 0, NULL, "status", NULL);

  if (is_stream_in(m)) {
    /* Pull mode: on_recv_ready is the call's start too. */
    tramp_open(b, dl, &sd, "on_recv_ready", NULL);
    sg_buf_printf(b, "  /* Installed only with h->%s.on_recv_ready. */\n",
                  mb);
    tramp_forward(b, dl, &sd, "on_recv_ready", 1, NULL, NULL);
    sg_buf_printf(b,
                  "static const conch_server_handler s%zu_pull_handler = {\n"
                  "    .on_call = s%zu_on_recv_ready,\n"
                  "    .on_cancel = s%zu_on_cancel,\n",
                  k, k, k);
    if (is_stream_out(m)) {
      sg_buf_printf(b, "    .on_send_ready = s%zu_on_send_ready,\n", k);
    }
    sg_buf_printf(b, "    .on_recv_ready = s%zu_on_recv_ready,\n};\n\n", k);
  }

  sg_buf_printf(b,
                "static const conch_server_handler s%zu_handler = {\n"
                "    .on_call = s%zu_on_call,\n"
                "    .on_message = s%zu_on_message,\n",
                k, k, k);
  if (is_stream_in(m)) {
    sg_buf_printf(b, "    .on_half_close = s%zu_on_half_close,\n", k);
  }
  sg_buf_printf(b, "    .on_cancel = s%zu_on_cancel,\n", k);
  if (is_stream_out(m)) {
    sg_buf_printf(b, "    .on_send_ready = s%zu_on_send_ready,\n", k);
  }
  sg_buf_puts(b, "};\n\n");

  proto_rpc(dl, n, "_send");
  decl_add(dl, "const %s *msg", n->resp);
  decl_end(b, dl, "", ") {");
  sg_buf_puts(b, "  if (msg == NULL) {\n"
                 "    return CONCH_ERR_INVALID;\n"
                 "  }\n"
                 "  return conch_rpc_send(rpc.base, &msg->base);\n"
                 "}\n\n");
  if (is_stream_out(m)) {
    decl_start(dl, "static const ProtobufCMessage *s%zu_next(", k);
    decl_add(dl, "conch_rpc *rpc");
    decl_add(dl, "const conch_rpc_source *src");
    decl_end(b, dl, "", ") {");
    sg_buf_puts(b, "  /* src->typed was cast from this method's _Next type. "
                   "*/\n");
    assign(b, "%s_Next next", "(%s_Next)src->typed", m->camel, m->camel);
    sg_buf_printf(b, "  %s typed = {rpc};\n", RPC_T(n));
    assign(b, "const %s *msg", "next(typed, src->user_data)", n->resp, NULL);
    sg_buf_puts(b, "\n  return msg != NULL ? &msg->base : NULL;\n}\n\n");

    proto_rpc(dl, n, "_stream");
    decl_add(dl, "%s_Next next", m->camel);
    decl_add(dl, "void *user_data");
    decl_end(b, dl, "", ") {");
    sg_buf_printf(b,
                  "  conch_rpc_source src;\n\n"
                  "  if (next == NULL) {\n"
                  "    return CONCH_ERR_INVALID;\n"
                  "  }\n"
                  "  src.next = s%zu_next;\n"
                  "  src.user_data = user_data;\n"
                  "  src.typed = (conch_stub_fn)next;\n"
                  "  return conch_rpc_send_from(rpc.base, &src);\n"
                  "}\n\n",
                  k);
    /* Short enough, clang-format keeps it on one line. */
    if (strlen("int _rpc_wake( rpc) { return conch_rpc_wake(rpc.base); }") +
            strlen(n->B) + strlen(RPC_T(n)) <=
        WIDTH) {
      sg_buf_printf(b,
                    "int %s_rpc_wake(%s rpc) { return "
                    "conch_rpc_wake(rpc.base); }\n\n",
                    n->B, RPC_T(n));
    } else {
      proto_rpc(dl, n, "_wake");
      decl_end(b, dl, "", ") {");
      sg_buf_puts(b, "  return conch_rpc_wake(rpc.base);\n}\n\n");
    }
  }
  if (is_stream_in(m)) {
    proto_rpc(dl, n, "_recv");
    decl_add(dl, "%s **msg", n->req);
    decl_end(b, dl, "", ") {");
    sg_buf_printf(b,
                  "  ProtobufCMessage *m = NULL;\n"
                  "  int rv;\n\n"
                  "  if (msg == NULL) {\n"
                  "    return CONCH_ERR_INVALID;\n"
                  "  }\n"
                  "  rv = conch_rpc_recv(rpc.base, &m);\n"
                  "  /* |m| is NULL or a message of the method's input "
                  "type. */\n"
                  "  *msg = (%s *)m;\n"
                  "  return rv;\n"
                  "}\n\n",
                  n->req);
  }
  proto_rpc(dl, n, "_finish");
  decl_add(dl, "const conch_status *status");
  decl_end(b, dl, "", ") {");
  sg_buf_puts(b, "  return conch_rpc_finish(rpc.base, status);\n}\n");
}

static void source_register(sg_buf *b, const sg_service *s, decl *dl) {
  size_t i;

  sg_buf_putc(b, '\n');
  decl_start(dl, "int %s(", s->reg);
  decl_add(dl, "conch_server *server");
  decl_add(dl, "const %s *handlers", s->handlers);
  decl_end(b, dl, "", ") {");
  if (s->nmethods == 0) {
    sg_buf_printf(b,
                  "  if (server == NULL || handlers == NULL) {\n"
                  "    return CONCH_ERR_INVALID;\n"
                  "  }\n"
                  "  return conch_server_add_file(server, &%s);\n"
                  "}\n",
                  s->fdesc);
    return;
  }
  sg_buf_puts(b, "  /* The server hands |handlers| back to the trampolines "
                 "as their\n"
                 "     user_data, which is not const; they never write "
                 "through it. */\n"
                 "  void *ud = (void *)(uintptr_t)handlers;\n"
                 "  int rv;\n\n"
                 "  if (server == NULL || handlers == NULL) {\n"
                 "    return CONCH_ERR_INVALID;\n"
                 "  }\n");
  /* A member in pull mode and push mode at once: refused before any
     method is registered. */
  for (i = 0; i < s->nmethods; i++) {
    const sg_method *m = &s->methods[i];
    if (is_stream_in(m)) {
      sg_buf_printf(b,
                    "  if (handlers->%s.on_recv_ready != NULL &&\n"
                    "      handlers->%s.on_message != NULL) {\n"
                    "    return CONCH_ERR_INVALID; /* pull and push */\n"
                    "  }\n",
                    m->member, m->member);
    }
  }
  for (i = 0; i < s->nmethods; i++) {
    const sg_method *m = &s->methods[i];
    const char *ind = "  ";
    if (is_stream_in(m)) {
      sg_buf_printf(b, "  if (handlers->%s.on_recv_ready != NULL) {\n",
                    m->member);
      decl_start(dl, "rv = conch_server_add_method(");
      decl_add(dl, "server");
      decl_add(dl, "&%s__method", m->lower);
      decl_add(dl, "&s%zu_pull_handler", m->index);
      decl_add(dl, "ud");
      decl_end(b, dl, "    ", ");");
      sg_buf_puts(b, "  } else {\n");
      ind = "    ";
    }
    decl_start(dl, "rv = conch_server_add_method(");
    decl_add(dl, "server");
    decl_add(dl, "&%s__method", m->lower);
    decl_add(dl, "&s%zu_handler", m->index);
    decl_add(dl, "ud");
    decl_end(b, dl, ind, ");");
    if (is_stream_in(m)) {
      sg_buf_puts(b, "  }\n");
    }
    sg_buf_puts(b, "  if (rv != 0) {\n"
                   "    return rv;\n"
                   "  }\n");
  }
  sg_buf_printf(b, "  return conch_server_add_file(server, &%s);\n}\n",
                s->fdesc);
}

static int source_method(sg_buf *b, const sg_service *s, const sg_method *m,
                         decl *dl) {
  names n;

  names_init(&n, m);
  if (names_oom(&n)) {
    names_free(&n);
    return -1;
  }
  sg_buf_putc(b, '\n');
  rule(b, '-', m->path + 1);
  sg_buf_putc(b, '\n');
  source_descriptor(b, m);
  source_trampolines(b, &n, dl);
  source_start(b, &n, dl);
  if (m->kind == SG_UNARY) {
    source_sync(b, &n, dl);
  }
  if (m->kind == SG_UNARY || m->kind == SG_SERVER) {
    source_async(b, &n, dl);
  }
  if (is_stream_in(m)) {
    source_send(b, &n, dl);
  }
  source_take(b, &n, dl, "_recv", "msg", "conch_stub_recv");
  source_take(b, &n, dl, "_recv_sync", "msg", "conch_stub_recv");
  if (m->kind == SG_CLIENT) {
    source_take(b, &n, dl, "_close_and_recv_sync", "resp",
                "conch_stub_close_and_recv");
  }
  source_server(b, &n, s, dl);
  names_free(&n);
  return 0;
}

static int source_service(sg_buf *b, const sg_service *s, decl *dl) {
  size_t i;

  sg_buf_putc(b, '\n');
  rule(b, '=', s->full);
  for (i = 0; i < s->nmethods; i++) {
    if (source_method(b, s, &s->methods[i], dl) != 0) {
      return -1;
    }
  }
  sg_buf_printf(b, "\nconst conch_method *const %s[%zu] = {\n", s->table,
                s->nmethods + 1);
  for (i = 0; i < s->nmethods; i++) {
    sg_buf_printf(b, "    &%s__method,\n", s->methods[i].lower);
  }
  sg_buf_printf(b,
                "    NULL,\n"
                "};\n\n"
                "const size_t %s = %zu;\n",
                s->count, s->nmethods);
  source_register(b, s, dl);
  return 0;
}

/* ---- Descriptors ------------------------------------------------------- */

/* Writes |len| bytes as the body of a uint8_t array, 12 a line. */
static void byte_lines(sg_buf *b, const uint8_t *p, size_t len) {
  size_t i;

  for (i = 0; i < len; i++) {
    sg_buf_printf(b, "%s0x%02x,", i % 12 == 0 ? "    " : " ", p[i]);
    if (i % 12 == 11 || i + 1 == len) {
      sg_buf_putc(b, '\n');
    }
  }
}

/* The files whose descriptors a source holds, in the order written. */
typedef struct fdset {
  const sg_file **v;
  size_t n, cap;
} fdset;

/* One file's descriptor: its bytes, its imports and the struct, named
   fd<index> (static) or, for the file of the source (|index| SIZE_MAX), by
   its exported name; its imports come first, each file once. */
static int fdesc_one(sg_buf *b, const sg_file *f, size_t index, fdset *set) {
  Conch__Plugin__FileDescriptorProto copy;
  char sym[32];
  uint8_t *bytes;
  size_t len, i;
  size_t *dep_ix;

  dep_ix = calloc(f->ndeps + 1, sizeof(*dep_ix));
  if (dep_ix == NULL) {
    return -1;
  }
  for (i = 0; i < f->ndeps; i++) {
    size_t j;
    for (j = 0; j < set->n && set->v[j] != f->deps[i]; j++) {
    }
    if (j == set->n) {
      if (set->n == set->cap) {
        size_t cap = set->cap > 0 ? 2 * set->cap : 8;
        const sg_file **v = realloc(set->v, cap * sizeof(*v));
        if (v == NULL) {
          free(dep_ix);
          return -1;
        }
        set->v = v;
        set->cap = cap;
      }
      set->v[set->n++] = f->deps[i];
      if (fdesc_one(b, f->deps[i], j, set) != 0) {
        free(dep_ix);
        return -1;
      }
    }
    dep_ix[i] = j;
  }
  if (index == (size_t)-1) {
    snprintf(sym, sizeof(sym), "fdself");
  } else {
    snprintf(sym, sizeof(sym), "fd%zu", index);
  }
  copy = *f->pb;
  copy.source_code_info = NULL; /* comments and spans: not for the wire */
  len = conch__plugin__file_descriptor_proto__get_packed_size(&copy);
  bytes = malloc(len > 0 ? len : 1);
  if (bytes == NULL) {
    free(dep_ix);
    return -1;
  }
  conch__plugin__file_descriptor_proto__pack(&copy, bytes);
  sg_buf_printf(b, "\n/* %s */\nstatic const uint8_t %s_bytes[%zu] = {\n",
                f->name, sym, len);
  byte_lines(b, bytes, len);
  free(bytes);
  sg_buf_printf(b,
                "};\n\n"
                "static const conch_file_descriptor *const %s_deps[%zu] = {\n",
                sym, f->ndeps + 1);
  for (i = 0; i < f->ndeps; i++) {
    sg_buf_printf(b, "    &fd%zu,\n", dep_ix[i]);
  }
  free(dep_ix);
  sg_buf_puts(b, "    NULL,\n};\n\n");
  if (index == (size_t)-1) {
    sg_buf_printf(b, "const conch_file_descriptor %s = {\n", f->fdesc);
  } else {
    sg_buf_printf(b, "static const conch_file_descriptor %s = {\n", sym);
  }
  sg_buf_printf(b,
                "    .name = \"%s\",\n"
                "    .data = %s_bytes,\n"
                "    .len = sizeof(%s_bytes),\n"
                "    .deps = %s_deps,\n"
                "};\n",
                f->name, sym, sym, sym);
  return 0;
}

/* The descriptor of |f| and of every file it imports, transitively. */
static int source_fdesc(sg_buf *b, const sg_file *f) {
  fdset set = {NULL, 0, 0};
  int rv;

  sg_buf_putc(b, '\n');
  rule(b, '=', "Descriptors");
  rv = fdesc_one(b, f, (size_t)-1, &set);
  free(set.v);
  return rv;
}

int sg_emit_source(sg_buf *b, const sg_file *f) {
  decl dl;
  size_t i;
  int rv = 0;

  sg_buf_init(&dl.text);
  dl.n = 0;
  sg_buf_printf(b,
                "/* Generated by protoc-gen-conch.  DO NOT EDIT! */\n"
                "/* Generated from: %s */\n\n"
                "#include <stdint.h>\n\n"
                "#include \"%s.conch.h\"\n",
                f->name, f->base);
  for (i = 0; i < f->nservices && rv == 0; i++) {
    rv = source_service(b, &f->services[i], &dl);
  }
  if (rv == 0) {
    rv = source_fdesc(b, f);
  }
  sg_buf_free(&dl.text);
  return rv != 0 || b->oom ? -1 : 0;
}
