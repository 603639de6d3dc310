/* The header of a .proto file's stubs (sg_emit_header()): the guide,
   the client's and the server's declarations with their manual. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_int.h"

/* ---- Header ------------------------------------------------------------ */

/* The names of the guide, as a table of short lines. */
static const char *const guide_names[] = {
    "  p__s__m__method  the method descriptor (path, stream kind, types,",
    "                   idempotency_level), for conch_call_*()",
    "  P__S__M_Call     a started call: its conch_call |base|, typed",
    "  P__S__M_Handler  typed handlers for push delivery",
    "  p__s__m_start()  starts a call (with its request, for unary and",
    "                   server streaming)",
    "  p__s__m_recv()   takes the next response in pull mode;",
    "                   p__s__m_recv_sync() blocks for it",
    "  p__s__m_sync()   a whole unary call, blocking",
    "  p__s__m_async()  a whole unary call, its end reported to one",
    "                   P__S__M_Done callback; for server streaming,",
    "                   each response to a P__S__M_OnMessage callback",
    "                   and the end to P__S__M_Done",
    "  p__s__m_send()   sends a request (client streaming, bidi);",
    "                   p__s__m_send_sync() blocks while the buffer is",
    "                   full",
    "  p__s__m_close_send()  ends the requests (client streaming, bidi)",
    "  p__s__m_close_and_recv_sync()  ends the requests and blocks for",
    "                   the response (client streaming)",
    "  P__S__M_Rpc      a call as its server handles it: its conch_rpc",
    "                   |base|, typed",
    "  P__S__M_Server   the server's typed handlers of the method",
    "  p__s__m_rpc_send()  sends a response (server side);",
    "                   p__s__m_rpc_finish() ends the call with a status",
    "  p__s__m_rpc_stream()  sends the responses a P__S__M_Next source",
    "                   returns, as the client takes them (server side;",
    "                   server streaming, bidi); p__s__m_rpc_wake()",
    "                   when a source that had none has one again",
    "  p__s__m_rpc_recv()  takes the next request in pull mode (server",
    "                   side; client streaming, bidi)",
    NULL};

static void guide_para(sg_buf *b, const char *text) {
  sg_buf_puts(b, " *\n");
  wrap_text(b, " * ", " * ", text);
}

/* The header's first comment: the manual of every stub in it. */
static void file_guide(sg_buf *b, const sg_file *f) {
  const char *const *line;
  sg_buf t;

  sg_buf_init(&t);
  sg_buf_printf(&t,
                "Typed conch stubs for the services of %s, on protobuf-c's "
                "%s.pb-c.h and the conch runtime (conch/call.h for clients, "
                "conch/server.h for servers).",
                f->name, f->base);
  if (t.oom) {
    b->oom = 1;
  }
  sg_buf_puts(b, "/*\n");
  wrap_text(b, " * ", " * ", sg_buf_str(&t));
  sg_buf_free(&t);
  guide_para(b, "For method M of service S in package p, in protobuf-c's "
                "naming (p__s__m itself is protobuf-c's service stub, so "
                "ours add a suffix):");
  sg_buf_puts(b, " *\n");
  for (line = guide_names; *line != NULL; line++) {
    sg_buf_printf(b, " * %s\n", *line);
  }
  guide_para(b, "and service S has p__s__methods[], its methods in .proto "
                "order and then NULL, p__s__n_methods, P__S_Handlers (a "
                "server's table: each method's P__S__M_Server and one "
                "user_data) and p__s__register(), which serves the table on "
                "a conch_server.  What a shape does not have is not "
                "generated, so misuse does not compile.");
  guide_para(b, "Ownership: requests are borrowed for the call of the "
                "function (they are serialized at once).  A response from "
                "_recv(), _recv_sync(), _sync() or _close_and_recv_sync() is "
                "the caller's, to free with conch_message_free(client, "
                "&msg->base); one given to a handler or an _OnMessage or _Done callback is "
                "borrowed until it returns.  A call started with _start() is "
                "the caller's, to free with conch_call_free(call.base); one "
                "of _async() frees itself after its _Done callback.  On the server, a request "
                "given to a handler is borrowed until it returns, a "
                "response given to _rpc_send() is borrowed for that call, "
                "and the server frees its calls.");
  guide_para(b, "Functions return 0 or a negative CONCH_ERR_* "
                "(conch/status.h); the outcome of the RPC itself is a "
                "conch_status.  Handlers run on the thread that drives the "
                "client, and on_close runs exactly once per started call.  "
                "Where one of these names is taken already (by protobuf-c's "
                "code or an earlier method), the method's prefixes get a "
                "trailing '_', and its comment says so.");
  sg_buf_puts(b, " */\n");
}

static void header_descriptor(sg_buf *b, const names *n) {
  const sg_method *m = n->m;
  doc d;

  doc_open(&d, b);
  switch (m->kind) {
  case SG_UNARY:
    doc_para(&d, "%s, unary: one %s in, one %s out.", m->path + 1, n->req,
             n->resp);
    break;
  case SG_SERVER:
    doc_para(&d, "%s, server streaming: one %s in, a stream of %s out.",
             m->path + 1, n->req, n->resp);
    break;
  case SG_CLIENT:
    doc_para(&d, "%s, client streaming: a stream of %s in, one %s out.",
             m->path + 1, n->req, n->resp);
    break;
  case SG_BIDI:
    doc_para(&d,
             "%s, bidirectional streaming: a stream of %s in, a stream of "
             "%s out.",
             m->path + 1, n->req, n->resp);
    break;
  }
  if (m->leading != NULL) {
    doc_verbatim(&d, m->leading);
  }
  if (m->trailing != NULL) {
    doc_verbatim(&d, m->trailing);
  }
  if (m->idempotency == 1) {
    doc_para(&d, "idempotency_level = NO_SIDE_EFFECTS: the call changes "
                 "nothing on the server, so it is safe to repeat (Connect "
                 "may send it as an HTTP GET).");
  } else if (m->idempotency == 2) {
    doc_para(&d, "idempotency_level = IDEMPOTENT: repeating the call has "
                 "the effect of making it once.");
  }
  if (m->deprecated) {
    doc_para(&d, "Deprecated in the .proto.");
  }
  if (m->taken != NULL) {
    doc_para(&d,
             "C names: the prefixes of this method are %s and %s, with a "
             "trailing '_', because %s is taken by %s.",
             m->lower, m->camel, m->taken, m->taken_by);
  }
  doc_para(&d, "The method descriptor, for the untyped functions of "
               "conch/call.h.");
  doc_close(&d);
  sg_buf_printf(b, "extern const conch_method %s__method;\n", n->B);
}

static void header_types(sg_buf *b, const names *n, decl *dl) {
  const sg_method *m = n->m;
  doc d;

  doc_open(&d, b);
  doc_para(&d,
           "A call of %s: a typed view of the runtime's handle |base|.  Use "
           "|base| with the rest of conch/call.h (conch_call_cancel(), "
           "conch_call_status(), conch_call_headers(), "
           "conch_call_wait_sync(), ...) and free it with "
           "conch_call_free(call.base), also after the call ended.",
           m->path + 1);
  doc_close(&d);
  sg_buf_printf(b, "typedef struct %s {\n  conch_call *base;\n} %s;\n",
                CALL_T(n), CALL_T(n));

  doc_open(&d, b);
  doc_para(&d,
           "Handlers of one %s call; any member may be NULL.  Without "
           "on_message the call is in pull mode: take responses with "
           "%s_recv().  Retained: the struct must stay valid and unchanged "
           "until on_close has returned (conch_call_user_data() of the call "
           "returns it).  Handlers run on the thread that drives the "
           "client, never inside %s_start(); what they receive is borrowed "
           "until they return.",
           m->path + 1, n->B, n->B);
  doc_close(&d);
  sg_buf_printf(b, "typedef struct %s {\n", HANDLER_T(n));
  member_doc(b, "Response headers arrived (not for a trailers-only "
                "response).");
  member_fn(b, dl, "on_headers", CALL_T(n), "call", "conch_metadata", "headers",
            NULL);
  member_doc(b, m->kind == SG_UNARY || m->kind == SG_CLIENT ? "The response."
                                                            : "A response.");
  member_fn(b, dl, "on_message", CALL_T(n), "call", n->resp, "msg", NULL);
  if (is_stream_in(m)) {
    member_doc(b, "The send buffer has room again after a send returned "
                  "CONCH_ERR_AGAIN.");
    member_fn(b, dl, "on_send_ready", CALL_T(n), "call", NULL);
  }
  member_doc(b, "The call ended with |status|; runs exactly once for every "
                "started call.  |trailers| is never NULL.  The call may be "
                "freed from here.");
  member_fn(b, dl, "on_close", CALL_T(n), "call", "conch_status", "status",
            "conch_metadata", "trailers", NULL);
  member_doc(b, "Passed to every handler.");
  sg_buf_printf(b, "  void *user_data;\n} %s;\n", HANDLER_T(n));
}

static void header_start(sg_buf *b, const names *n, decl *dl) {
  const sg_method *m = n->m;
  doc d;

  doc_open(&d, b);
  if (is_stream_in(m)) {
    doc_para(&d,
             "Starts a call of %s on |client|; send the requests with "
             "%s_send() and end them with %s_close_send().  |opts| may be "
             "NULL.  |handler| is retained (see %s); NULL means pull mode "
             "without handlers.  On 0, |*out| is the call.  Failures of "
             "the RPC itself (connection, deadline) end the call with a "
             "status instead.",
             m->path + 1, n->B, n->B, HANDLER_T(n));
    doc_para(&d, "Returns 0, CONCH_ERR_INVALID (a NULL |client| or |out|, "
                 "bad |opts|) or CONCH_ERR_NOMEM; then nothing was started "
                 "and no handler runs.");
  } else {
    doc_para(&d,
             "Starts a call of %s on |client| with the request |req| "
             "(serialized here, borrowed for this call only), which also "
             "ends the requests.  |opts| may be NULL.  |handler| is "
             "retained (see %s); NULL means pull mode without handlers.  "
             "On 0, |*out| is the call.  Failures of the RPC itself "
             "(connection, deadline, a request over the send limit) end "
             "the call with a status instead.",
             m->path + 1, HANDLER_T(n));
    doc_para(&d, "Returns 0, CONCH_ERR_INVALID (a NULL |client|, |req| or "
                 "|out|, bad |opts|), CONCH_ERR_CODEC or CONCH_ERR_NOMEM; "
                 "then nothing was started and no handler runs.  Once a "
                 "call with handlers exists, a request that cannot be "
                 "queued ends it as canceled instead.");
  }
  doc_close(&d);
  proto_start(dl, n);
  decl_end(b, dl, "", ");");
}

static void header_sync(sg_buf *b, const names *n, decl *dl) {
  doc d;

  doc_open(&d, b);
  doc_para(&d,
           "Calls %s and waits for the answer, driving |client| on this "
           "thread.  |req| is borrowed; |opts| may be NULL.  On 0, |*resp| "
           "is the response, the caller's to free with "
           "conch_message_free(); otherwise it is NULL.  |status| "
           "(initialised with conch_status_init(); may be NULL) receives "
           "the status of the RPC; |headers| and |trailers|, when not NULL, "
           "receive the response metadata (appended).",
           n->m->path + 1);
  doc_para(&d, "Returns 0, CONCH_ERR_RPC (see |status|), CONCH_ERR_INVALID, "
               "CONCH_ERR_RECURSIVE (called from a handler of |client|) or "
               "CONCH_ERR_NOMEM.");
  doc_close(&d);
  proto_sync(dl, n);
  decl_end(b, dl, "", ");");
}

static void header_async(sg_buf *b, const names *n, decl *dl) {
  doc d;

  doc_open(&d, b);
  doc_para(&d,
           "The end of a %s_async() call, in one callback: |resp| is the "
           "response, NULL exactly when |status| is not OK; |headers| and "
           "|trailers| (never NULL) the response metadata.  All are "
           "borrowed until the callback returns.",
           n->B);
  doc_close(&d);
  done_typedef(b, n, dl);

  doc_open(&d, b);
  doc_para(&d,
           "Calls %s without blocking: |done| runs exactly once with "
           "|user_data| on the thread that drives |client|, never from "
           "inside this function, and the call frees itself when it "
           "returns.  |req| is borrowed; |opts| may be NULL.  |out| may be "
           "NULL; otherwise |*out| is the call, for conch_call_cancel() "
           "and the getters only (never conch_call_free()), until |done| "
           "returns.",
           n->m->path + 1);
  doc_para(&d, "Returns 0 (|done| will run), CONCH_ERR_INVALID (a NULL "
               "|client|, |req| or |done|) or CONCH_ERR_NOMEM; on failure "
               "|done| never runs.");
  doc_close(&d);
  proto_async(dl, n);
  decl_end(b, dl, "", ");");
}

static void header_stream_async(sg_buf *b, const names *n, decl *dl) {
  doc d;

  doc_open(&d, b);
  doc_para(&d,
           "One response of a %s_async() call: |msg| is borrowed until the "
           "callback returns.",
           n->B);
  doc_close(&d);
  decl_start(dl, "typedef void (*%s_OnMessage)(", n->m->camel);
  decl_add(dl, "const %s *msg", n->resp);
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "", ");");

  doc_open(&d, b);
  doc_para(&d,
           "The end of a %s_async() call: |status|, and |headers| and "
           "|trailers| (never NULL) the response metadata, all borrowed "
           "until the callback returns.",
           n->B);
  doc_close(&d);
  done_typedef(b, n, dl);

  doc_open(&d, b);
  doc_para(&d,
           "Calls %s without blocking: |on_message| runs for each response "
           "and then |done| exactly once, all with |user_data| on the "
           "thread that drives |client| and never from inside this "
           "function; the call frees itself when |done| returns.  |req| is "
           "borrowed; |opts| may be NULL.  |out| may be NULL; otherwise "
           "|*out| is the call, for conch_call_cancel() and the getters "
           "only (never conch_call_free()), until |done| returns.",
           n->m->path + 1);
  doc_para(&d, "Returns 0 (|done| will run), CONCH_ERR_INVALID (a NULL "
               "|client|, |req|, |on_message| or |done|) or "
               "CONCH_ERR_NOMEM; on failure nothing runs.");
  doc_close(&d);
  proto_async(dl, n);
  decl_end(b, dl, "", ");");
}

static void header_recv(sg_buf *b, const names *n, decl *dl) {
  doc d;

  doc_open(&d, b);
  doc_para(&d,
           "Pull mode: takes the next response of |call| without blocking.  "
           "On 0, |*msg| is the caller's, to free with "
           "conch_message_free(); otherwise it is NULL.  Responses not "
           "taken hold the server back (flow control).");
  doc_para(&d, "Returns 0; CONCH_ERR_AGAIN (none yet: drive the client); "
               "CONCH_ERR_EOF (the call ended OK and every response was "
               "taken); CONCH_ERR_RPC (it ended with an error: "
               "conch_call_status(call.base)); CONCH_ERR_STATE (the call has "
               "an on_message handler); CONCH_ERR_INVALID.");
  doc_close(&d);
  proto_take(dl, n, "_recv", "msg");
  decl_end(b, dl, "", ");");

  doc_open(&d, b);
  doc_para(&d,
           "%s_recv(), driving the client on this thread until a response "
           "is ready or the call ends: never CONCH_ERR_AGAIN, and "
           "CONCH_ERR_RECURSIVE when called from a handler.",
           n->B);
  doc_close(&d);
  proto_take(dl, n, "_recv_sync", "msg");
  decl_end(b, dl, "", ");");
}

static void header_send(sg_buf *b, const names *n, decl *dl) {
  doc d;

  doc_open(&d, b);
  doc_para(&d, "Queues the request |msg| on |call| (serialized here, "
               "borrowed for this call only).");
  doc_para(&d, "Returns 0; CONCH_ERR_AGAIN (the send buffer is full: "
               "nothing was queued, on_send_ready follows); CONCH_ERR_STATE "
               "(after close_send, or once the call ended: its status says "
               "why); CONCH_ERR_LIMIT (over the send limit: the call ends "
               "with resource_exhausted); CONCH_ERR_INVALID, CONCH_ERR_CODEC "
               "or CONCH_ERR_NOMEM.");
  doc_close(&d);
  proto_send(dl, n, "_send");
  decl_end(b, dl, "", ");");

  doc_open(&d, b);
  doc_para(&d,
           "%s_send(), driving the client on this thread while the send "
           "buffer is full: never CONCH_ERR_AGAIN, and CONCH_ERR_RECURSIVE "
           "when called from a handler.",
           n->B);
  doc_close(&d);
  proto_send(dl, n, "_send_sync");
  decl_end(b, dl, "", ");");

  doc_open(&d, b);
  doc_para(&d,
           "Ends the requests of |call|: no %s_send() after it.  Responses "
           "may still arrive.  Returns 0, CONCH_ERR_STATE (already ended) or "
           "CONCH_ERR_INVALID.",
           n->B);
  doc_close(&d);
  proto_call(dl, n, "_close_send");
  decl_end(b, dl, "", ");");
}

static void header_close_and_recv(sg_buf *b, const names *n, decl *dl) {
  doc d;

  doc_open(&d, b);
  doc_para(&d, "Ends the requests of |call| (unless they already ended), "
               "then waits, driving the client on this thread, for the "
               "response and the end of the call.  Pull mode only.  On 0, "
               "|*resp| is the caller's, to free with conch_message_free(); "
               "otherwise it is NULL.");
  doc_para(&d, "Returns 0; CONCH_ERR_RPC (the call failed: "
               "conch_call_status(call.base)); CONCH_ERR_PROTO (it ended OK "
               "without a response); CONCH_ERR_STATE (the call has an "
               "on_message handler); CONCH_ERR_RECURSIVE (called from a "
               "handler); CONCH_ERR_INVALID.");
  doc_close(&d);
  proto_take(dl, n, "_close_and_recv_sync", "resp");
  decl_end(b, dl, "", ");");
}

/* ---- Server half ------------------------------------------------------- */

/* member_doc() of a formatted text. */
static void member_docf(sg_buf *b, const char *fmt, ...) SG_PRINTF(2, 3);

static void member_docf(sg_buf *b, const char *fmt, ...) {
  sg_buf t;
  va_list ap;

  sg_buf_init(&t);
  va_start(ap, fmt);
  sg_buf_vprintf(&t, fmt, ap);
  va_end(ap);
  if (t.oom) {
    b->oom = 1;
  } else {
    member_doc(b, sg_buf_str(&t));
  }
  sg_buf_free(&t);
}
int is_stream_out(const sg_method *m) {
  return m->kind == SG_SERVER || m->kind == SG_BIDI;
}

static void header_server(sg_buf *b, const names *n, decl *dl) {
  const sg_method *m = n->m;
  doc d;

  doc_open(&d, b);
  doc_para(&d,
           "A call of %s as its server handles it: a typed view of the "
           "server's handle |base|.  Use |base| with the rest of "
           "conch/server.h (conch_rpc_request_headers(), "
           "conch_rpc_response_trailers(), conch_rpc_set_data(), ...).  It "
           "is the handler's from the first handler that receives it until "
           "%s_rpc_finish() or on_cancel; the server frees it.",
           m->path + 1, n->B);
  doc_close(&d);
  sg_buf_printf(b, "typedef struct %s {\n  conch_rpc *base;\n} %s;\n",
                RPC_T(n), RPC_T(n));

  doc_open(&d, b);
  doc_para(&d,
           "The server's handlers of %s, its member of the service's "
           "handler table.  Set means %s; unset, the method answers "
           "unimplemented.  Other members may be NULL.  Handlers run on the "
           "thread that drives the server; what they receive is borrowed "
           "until they return, and their |user_data| is the table's.",
           m->path + 1,
           is_stream_in(m)
               ? "on_message, on_half_close or on_recv_ready is not NULL"
               : "on_request is not NULL");
  doc_close(&d);
  sg_buf_printf(b, "typedef struct %s {\n", SERVER_T(n));
  if (is_stream_in(m)) {
    member_doc(b, "A request message.");
    member_fn(b, dl, "on_message", RPC_T(n), "rpc", n->req, "msg", NULL);
    member_docf(b,
                "The client sent its last request.  Answer with %s%s_rpc_"
                "send() and end with %s_rpc_finish(), here or later (or "
                "earlier).",
                m->kind == SG_CLIENT ? "one " : "", n->B, n->B);
    member_fn(b, dl, "on_half_close", RPC_T(n), "rpc", NULL);
    member_docf(b,
                "Set: pull mode.  The handler takes the requests with "
                "%s_rpc_recv(); on_message must be NULL (the service's "
                "_register() refuses the table otherwise) and on_half_close "
                "is not called (the end is %s_rpc_recv()'s CONCH_ERR_EOF).  "
                "Runs when the call arrives, and after %s_rpc_recv() "
                "returned CONCH_ERR_AGAIN once a request or the end is "
                "there.",
                n->B, n->B, n->B);
    member_fn(b, dl, "on_recv_ready", RPC_T(n), "rpc", NULL);
  } else {
    member_docf(b,
                "The request.  Answer with %s %s_rpc_send() and end with "
                "%s_rpc_finish(), here or later.",
                m->kind == SG_UNARY ? "one" : "any number of", n->B, n->B);
    member_fn(b, dl, "on_request", RPC_T(n), "rpc", n->req, "req", NULL);
  }
  if (is_stream_out(m)) {
    member_docf(b,
                "The send buffer has room again after %s_rpc_send() "
                "returned CONCH_ERR_AGAIN: send the refused response again "
                "(not with %s_rpc_stream()).",
                n->B, n->B);
    member_fn(b, dl, "on_send_ready", RPC_T(n), "rpc", NULL);
  }
  member_doc(b, "The call ended before the handler finished it: |status| "
                "says why (canceled, deadline_exceeded, a broken limit).  "
                "|rpc| must not be used once this returns.");
  member_fn(b, dl, "on_cancel", RPC_T(n), "rpc", "conch_status", "status",
            NULL);
  sg_buf_printf(b, "} %s;\n", SERVER_T(n));

  doc_open(&d, b);
  if (m->kind == SG_UNARY || m->kind == SG_CLIENT) {
    doc_para(&d,
             "Queues the response |msg| of |rpc| (serialized here, borrowed "
             "for this call only).  The call takes one response.");
  } else {
    doc_para(&d,
             "Queues the response |msg| of |rpc| (serialized here, borrowed "
             "for this call only).  While the send buffer is full, "
             "responses are refused with CONCH_ERR_AGAIN (nothing queued) "
             "and on_send_ready says when to send it again: a stream "
             "finished OK after a refused response that was not sent again "
             "ends with internal, not OK.  %s_rpc_stream() is the easier "
             "way: it never refuses.",
             n->B);
  }
  doc_para(&d,
           "Returns what conch_rpc_send() returns: 0, CONCH_ERR_AGAIN, "
           "CONCH_ERR_INVALID (NULL |msg| or |rpc.base|), "
           "CONCH_ERR_STATE (finished, %s), CONCH_ERR_CODEC, "
           "CONCH_ERR_LIMIT or CONCH_ERR_NOMEM.",
           is_stream_out(m) ? "or while a source sends"
                            : "or a second response where one is taken");
  doc_close(&d);
  proto_rpc(dl, n, "_send");
  decl_add(dl, "const %s *msg", n->resp);
  decl_end(b, dl, "", ");");

  if (is_stream_out(m)) {
    doc_open(&d, b);
    doc_para(&d,
             "A source of the responses of %s, for %s_rpc_stream(): "
             "returns the next response of |rpc| (the source's: it must "
             "stay valid until the source runs again or the call ends), "
             "or NULL, either after ending the stream with "
             "%s_rpc_finish() (here, with any status), or when it has "
             "none now (then %s_rpc_wake() when it has).  |user_data| is "
             "what _rpc_stream() was given.",
             m->path + 1, n->B, n->B, n->B);
    doc_close(&d);
    if (strlen("typedef const  *(*_Next)(") + strlen(n->resp) +
            strlen(m->camel) <=
        WIDTH) {
      decl_start(dl, "typedef const %s *(*%s_Next)(", n->resp, m->camel);
      decl_add(dl, "%s rpc", RPC_T(n));
      decl_add(dl, "void *user_data");
      decl_end(b, dl, "", ");");
    } else {
      /* Too long for one line: broken where clang-format breaks it. */
      const char *params[2];
      sg_buf rpc_param;
      sg_buf_init(&rpc_param);
      sg_buf_printf(&rpc_param, "%s rpc", RPC_T(n));
      b->oom |= rpc_param.oom;
      params[0] = sg_buf_str(&rpc_param);
      params[1] = "void *user_data";
      sg_buf_printf(b, "typedef const %s *(\n    *%s_Next)(\n    ", n->resp,
                    m->camel);
      pack(b, 4, params, 2, ");");
      sg_buf_puts(b, ");\n");
      sg_buf_free(&rpc_param);
    }

    doc_open(&d, b);
    doc_para(&d, "Sends the responses of |rpc| that |next| returns, as "
                 "conch_rpc_send_from(): the server calls |next| (with "
                 "|user_data|, on its own turns, never from inside this "
                 "function) whenever the send buffer has room, so the stream "
                 "goes as fast as the client reads and at most the send buffer "
                 "(at most 1 MiB) waits in memory.  Nothing is refused: the "
                 "handler sees neither CONCH_ERR_AGAIN nor on_send_ready.  The "
                 "stream ends when |next| finishes the call (or the handler "
                 "does, or on_cancel runs); a response that cannot be sent "
                 "ends the call with internal, through on_cancel.  Requests "
                 "go on arriving as before.");
    doc_para(&d, "Returns 0, CONCH_ERR_INVALID (NULL |next| or |rpc.base|), "
                 "CONCH_ERR_STATE (the call is not the handler's any more, "
                 "or has a source already) or CONCH_ERR_NOMEM.");
    doc_close(&d);
    proto_rpc(dl, n, "_stream");
    decl_add(dl, "%s_Next next", m->camel);
    decl_add(dl, "void *user_data");
    decl_end(b, dl, "", ");");

    doc_open(&d, b);
    doc_para(&d,
             "The source of |rpc| (%s_rpc_stream()) has a response again "
             "after it returned NULL without finishing: it runs on the "
             "server's next turn.",
             n->B);
    doc_para(&d, "Returns 0, CONCH_ERR_INVALID (NULL |rpc.base|) or "
                 "CONCH_ERR_STATE (no source, or the call is not the "
                 "handler's any more).");
    doc_close(&d);
    proto_rpc(dl, n, "_wake");
    decl_end(b, dl, "", ");");
  }

  if (is_stream_in(m)) {
    doc_open(&d, b);
    doc_para(&d,
             "Pull mode (on_recv_ready set): takes the next request of "
             "|rpc|, checked as it arrived (a bad one ended the call "
             "through on_cancel).  On 0, |*msg| is the caller's, to free "
             "with conch_server_message_free(conch_rpc_server(rpc.base), "
             "&(*msg)->base); it may outlive the call.  Requests not taken "
             "wait, and hold the client back (flow control).");
    doc_para(&d, "Returns what conch_rpc_recv() returns: 0, "
                 "CONCH_ERR_AGAIN (none yet: on_recv_ready follows), "
                 "CONCH_ERR_EOF (the client ended its requests and each "
                 "was taken), CONCH_ERR_INVALID (NULL |msg| or "
                 "|rpc.base|), CONCH_ERR_STATE (push mode, or the call is "
                 "not the handler's any more) or CONCH_ERR_NOMEM (the "
                 "request stays queued).");
    doc_close(&d);
    proto_rpc(dl, n, "_recv");
    decl_add(dl, "%s **msg", n->req);
    decl_end(b, dl, "", ");");
  }

  doc_open(&d, b);
  doc_para(&d, "Ends |rpc| with |status| (NULL: OK), as conch_rpc_finish(): "
               "the handler gives |rpc| up.");
  doc_para(&d, "Returns 0, CONCH_ERR_INVALID (NULL |rpc.base|, a code "
               "outside 0..16) or CONCH_ERR_STATE (finished already).");
  doc_close(&d);
  proto_rpc(dl, n, "_finish");
  decl_add(dl, "const conch_status *status");
  decl_end(b, dl, "", ");");
}

/* The service's handler table and its registration, after its methods. */
static void header_register(sg_buf *b, const sg_service *s, decl *dl) {
  doc d;
  size_t i;
  sg_buf t;

  sg_buf_init(&t);
  sg_buf_printf(&t, "%s: server", s->full);
  if (t.oom) {
    b->oom = 1;
  }
  sg_buf_putc(b, '\n');
  rule(b, '-', sg_buf_str(&t));
  sg_buf_free(&t);
  doc_open(&d, b);
  doc_para(&d,
           "The handlers of a server of %s: one member per method, in "
           ".proto order, and the |user_data| every handler receives.  "
           "Start from {0} (every method unimplemented) and set what the "
           "server implements.",
           s->full);
  doc_close(&d);
  sg_buf_printf(b, "typedef struct %s {\n", s->handlers);
  for (i = 0; i < s->nmethods; i++) {
    const sg_method *m = &s->methods[i];
    member_docf(b, "%s.", m->path + 1);
    sg_buf_printf(b, "  %s_Server %s;\n", m->camel, m->member);
  }
  member_doc(b, "Passed to every handler.");
  sg_buf_printf(b, "  void *user_data;\n} %s;\n", s->handlers);

  doc_open(&d, b);
  doc_para(&d,
           "Registers the %zu method%s of %s on |server| "
           "(conch_server_add_method()) with |handlers|, which is retained: "
           "it must stay valid and unchanged until the server is freed.  A "
           "method whose member is unset answers every call with "
           "unimplemented.  Then adds %s, the descriptors of the file, for "
           "server reflection (conch_server_add_file()).  Register before "
           "serving.",
           s->nmethods, s->nmethods == 1 ? "" : "s", s->full, s->fdesc);
  doc_para(&d, "Returns 0, CONCH_ERR_INVALID (a NULL |server| or "
               "|handlers|, or a method registered on |server| already), "
               "CONCH_ERR_STATE (calls are running and the server's table "
               "is full) or CONCH_ERR_NOMEM.  Methods registered before a "
               "failure stay registered.");
  doc_close(&d);
  decl_start(dl, "int %s(", s->reg);
  decl_add(dl, "conch_server *server");
  decl_add(dl, "const %s *handlers", s->handlers);
  decl_end(b, dl, "", ");");
}

static int header_method(sg_buf *b, const sg_method *m, decl *dl) {
  names n;
  int rv = 0;

  names_init(&n, m);
  if (names_oom(&n)) {
    names_free(&n);
    return -1;
  }
  sg_buf_putc(b, '\n');
  rule(b, '-', m->path + 1);
  header_descriptor(b, &n);
  header_types(b, &n, dl);
  header_start(b, &n, dl);
  if (m->kind == SG_UNARY) {
    header_sync(b, &n, dl);
    header_async(b, &n, dl);
  }
  if (m->kind == SG_SERVER) {
    header_stream_async(b, &n, dl);
  }
  if (is_stream_in(m)) {
    header_send(b, &n, dl);
  }
  header_recv(b, &n, dl);
  if (m->kind == SG_CLIENT) {
    header_close_and_recv(b, &n, dl);
  }
  header_server(b, &n, dl);
  names_free(&n);
  return rv;
}

static int header_service(sg_buf *b, const sg_service *s, decl *dl) {
  doc d;
  size_t i;

  sg_buf_putc(b, '\n');
  rule(b, '=', s->full);
  doc_open(&d, b);
  doc_para(&d, "The methods of service %s, in .proto order, then NULL.",
           s->full);
  if (s->leading != NULL) {
    doc_verbatim(&d, s->leading);
  }
  if (s->trailing != NULL) {
    doc_verbatim(&d, s->trailing);
  }
  if (s->deprecated) {
    doc_para(&d, "Deprecated in the .proto.");
  }
  if (s->taken != NULL) {
    doc_para(&d,
             "C names: %s, %s, %s and %s have a trailing '_' because %s is "
             "taken by %s.",
             s->table, s->count, s->handlers, s->reg, s->taken, s->taken_by);
  }
  doc_close(&d);
  sg_buf_printf(b, "extern const conch_method *const %s[%zu];\n", s->table,
                s->nmethods + 1);
  doc_open(&d, b);
  doc_para(&d, "The number of methods of %s: %zu.", s->full, s->nmethods);
  doc_close(&d);
  sg_buf_printf(b, "extern const size_t %s;\n", s->count);
  for (i = 0; i < s->nmethods; i++) {
    if (header_method(b, &s->methods[i], dl) != 0) {
      return -1;
    }
  }
  header_register(b, s, dl);
  return 0;
}

/* The file's descriptors, for reflection and dynamic clients. */
static void header_fdesc(sg_buf *b, const sg_file *f) {
  doc d;

  sg_buf_putc(b, '\n');
  rule(b, '=', "Descriptors");
  doc_open(&d, b);
  doc_para(&d,
           "%s as a serialized google.protobuf.FileDescriptorProto "
           "(without its source info), with the files it imports, "
           "transitively: what server reflection serves "
           "(conch_server_add_file(), which each service's _register() "
           "calls) and what a client may read the schema from "
           "(conch/descriptor.h).",
           f->name);
  doc_close(&d);
  sg_buf_printf(b, "extern const conch_file_descriptor %s;\n", f->fdesc);
}

int sg_emit_header(sg_buf *b, const sg_file *f) {
  decl dl;
  size_t i;
  int rv = 0;

  sg_buf_init(&dl.text);
  dl.n = 0;
  sg_buf_printf(b,
                "/* Generated by protoc-gen-conch.  DO NOT EDIT! */\n"
                "/* Generated from: %s */\n\n",
                f->name);
  file_guide(b, f);
  sg_buf_printf(b,
                "#ifndef CONCH_%s__INCLUDED\n"
                "#define CONCH_%s__INCLUDED\n\n"
                "#include <stddef.h>\n\n"
                "#include <conch/call.h>\n"
                "#include <conch/descriptor.h>\n"
                "#include <conch/server.h>\n\n"
                "#include \"%s.pb-c.h\"\n\n"
                "#ifdef __cplusplus\n"
                "extern \"C\" {\n"
                "#endif\n",
                f->ident, f->ident, f->base);
  if (f->nservices == 0) {
    sg_buf_printf(b, "\n/* %s declares no services. */\n", f->name);
  }
  for (i = 0; i < f->nservices && rv == 0; i++) {
    rv = header_service(b, &f->services[i], &dl);
  }
  header_fdesc(b, f);
  sg_buf_printf(b,
                "\n#ifdef __cplusplus\n"
                "}\n"
                "#endif\n\n"
                "#endif /* CONCH_%s__INCLUDED */\n",
                f->ident);
  sg_buf_free(&dl.text);
  return rv != 0 || b->oom ? -1 : 0;
}
