/* From the model to C text: the header, which is the manual of the stubs,
   and the source.  Output is laid out as clang-format (LLVM, 80 columns,
   2-space indent) would lay it out, for the common cases. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_int.h"

#define WIDTH 80

static const char *const kind_names[] = {
    "CONCH_STREAM_UNARY", "CONCH_STREAM_CLIENT", "CONCH_STREAM_SERVER",
    "CONCH_STREAM_BIDI"};

static const char *const idempotency_names[] = {
    "CONCH_IDEMPOTENCY_UNKNOWN", "CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS",
    "CONCH_IDEMPOTENCY_IDEMPOTENT"};

static int is_stream_in(const sg_method *m) {
  return m->kind == SG_CLIENT || m->kind == SG_BIDI;
}

/* ---- Layout ------------------------------------------------------------ */

static void spaces(sg_buf *b, size_t n) {
  while (n-- > 0) {
    sg_buf_putc(b, ' ');
  }
}

/* Lays out |n| parameters packed from column |align|, where the first one
   starts; writes them to |b| unless it is NULL.  Returns the lines used. */
static size_t pack(sg_buf *b, size_t align, const char *const *params, size_t n,
                   const char *close) {
  size_t lines = 1, col = align, i;

  for (i = 0; i < n; i++) {
    size_t need = strlen(params[i]) + (i + 1 == n ? strlen(close) : 1);
    if (i > 0) {
      if (col + 1 + need <= WIDTH) {
        if (b != NULL) {
          sg_buf_putc(b, ' ');
        }
        col++;
      } else {
        if (b != NULL) {
          sg_buf_putc(b, '\n');
          spaces(b, align);
        }
        col = align;
        lines++;
      }
    }
    if (b != NULL) {
      sg_buf_printf(b, "%s%s", params[i], i + 1 == n ? "" : ",");
    }
    col += strlen(params[i]) + (i + 1 == n ? 0 : 1);
  }
  return lines;
}

/* Writes |head| (which ends in '('), the |n| parameters and |close| the
   way clang-format lays them out, near enough: on one line if they fit;
   else, for an assignment, broken after the '=' if the rest then fits;
   else packed and aligned after the '(', unless a parameter does not fit
   there or a break after the '(' (indented by 4) saves three lines. */
static void wrap(sg_buf *b, const char *indent, const char *head,
                 const char *const *params, size_t n, const char *close) {
  size_t col = strlen(indent) + strlen(head);
  size_t total = col + strlen(close);
  const char *eq;
  size_t i;
  int broken = 0;

  for (i = 0; i < n; i++) {
    total += strlen(params[i]) + (i > 0 ? 2 : 0);
  }
  if (total <= WIDTH) {
    sg_buf_puts(b, indent);
    sg_buf_puts(b, head);
    for (i = 0; i < n; i++) {
      sg_buf_printf(b, "%s%s", i > 0 ? ", " : "", params[i]);
    }
    sg_buf_printf(b, "%s\n", close);
    return;
  }
  eq = strstr(head, " = ");
  if (eq != NULL &&
      strlen(indent) + 4 + strlen(eq + 3) + total - col <= WIDTH) {
    /* "x = f(...)": clang-format breaks after the '=' when the call then
       fits on one line. */
    sg_buf_puts(b, indent);
    sg_buf_add(b, head, (size_t)(eq - head) + 2);
    sg_buf_putc(b, '\n');
    spaces(b, strlen(indent) + 4);
    sg_buf_puts(b, eq + 3);
    for (i = 0; i < n; i++) {
      sg_buf_printf(b, "%s%s", i > 0 ? ", " : "", params[i]);
    }
    sg_buf_printf(b, "%s\n", close);
    return;
  }
  sg_buf_puts(b, indent);
  sg_buf_puts(b, head);
  for (i = 0; i < n; i++) {
    if (col + strlen(params[i]) + (i + 1 == n ? strlen(close) : 1) > WIDTH) {
      broken = 1;
    }
  }
  if (!broken && n > 0) {
    size_t aligned = pack(NULL, col, params, n, close);
    size_t after = 1 + pack(NULL, strlen(indent) + 4, params, n, close);
    broken = aligned >= after + 3;
  }
  if (broken) {
    col = strlen(indent) + 4;
    sg_buf_putc(b, '\n');
    spaces(b, col);
  }
  pack(b, col, params, n, close);
  sg_buf_printf(b, "%s\n", close);
}

/* "  <lhs> = <rhs>;" in a function body (|lhs| and |rhs| formats with one
   %s each, filled with |a1| and, when not NULL, |a2|), broken after the
   '=' when it does not fit, as clang-format breaks it. */
static void assign(sg_buf *b, const char *lhs, const char *rhs, const char *a1,
                   const char *a2) {
  sg_buf l, r;
  sg_buf_init(&l);
  sg_buf_init(&r);
  sg_buf_printf(&l, lhs, a1);
  if (a2 != NULL) {
    sg_buf_printf(&r, rhs, a2);
  } else {
    sg_buf_puts(&r, rhs);
  }
  if (l.oom || r.oom) {
    b->oom = 1;
  } else if (2 + l.len + 3 + r.len + 1 <= WIDTH) {
    sg_buf_printf(b, "  %s = %s;\n", sg_buf_str(&l), sg_buf_str(&r));
  } else {
    sg_buf_printf(b, "  %s =\n      %s;\n", sg_buf_str(&l), sg_buf_str(&r));
  }
  sg_buf_free(&l);
  sg_buf_free(&r);
}

/* Word-wraps |text| into lines of at most WIDTH columns, each starting with
   |first| (the first line) or |rest|.  Runs of spaces inside a line are
   kept (two after a full stop); at a break they go. */
static void wrap_text(sg_buf *b, const char *first, const char *rest,
                      const char *text) {
  const char *lead = first;
  size_t col = 0;
  int start = 1;

  while (*text != '\0') {
    const char *w = text, *e;
    size_t gap = 0, wl;
    while (*w == ' ') {
      w++;
      gap++;
    }
    if (*w == '\0') {
      break;
    }
    for (e = w; *e != '\0' && *e != ' '; e++) {
    }
    wl = (size_t)(e - w);
    if (!start && col + gap + wl > WIDTH) {
      sg_buf_putc(b, '\n');
      start = 1;
    }
    if (start) {
      sg_buf_puts(b, lead);
      col = strlen(lead);
      lead = rest;
      start = 0;
    } else {
      spaces(b, gap);
      col += gap;
    }
    sg_buf_add(b, w, wl);
    col += wl;
    text = e;
  }
  if (!start) {
    sg_buf_putc(b, '\n');
  }
}

/* A doc block of paragraphs.  Each paragraph is formatted, wrapped and set
   apart by an empty " *" line. */
typedef struct doc {
  sg_buf *out;
  sg_buf para;
  int n;
} doc;

static void doc_open(doc *d, sg_buf *out) {
  d->out = out;
  d->n = 0;
  sg_buf_init(&d->para);
  sg_buf_puts(out, "\n/**\n");
}

static void doc_gap(doc *d) {
  if (d->n++ > 0) {
    sg_buf_puts(d->out, " *\n");
  }
}

static void doc_para(doc *d, const char *fmt, ...) SG_PRINTF(2, 3);

static void doc_para(doc *d, const char *fmt, ...) {
  va_list ap;
  sg_buf_reset(&d->para);
  va_start(ap, fmt);
  sg_buf_vprintf(&d->para, fmt, ap);
  va_end(ap);
  if (d->para.oom) {
    d->out->oom = 1;
  }
  doc_gap(d);
  wrap_text(d->out, " * ", " * ", sg_buf_str(&d->para));
}

/* Appends one line of a .proto comment, made safe inside a C comment:
   no comment delimiters, no trigraphs ("??/" would splice lines), no
   control characters, no trailing blanks or backslash. */
static void safe_line(sg_buf *b, const char *s, size_t n) {
  size_t start = b->len, i;
  for (i = 0; i < n; i++) {
    char c = s[i];
    char prev = b->len > start ? b->data[b->len - 1] : '\0';
    if (c == '\t') {
      c = ' ';
    } else if ((unsigned char)c < 0x20 || c == 0x7f) {
      continue;
    }
    if ((prev == '*' && c == '/') || (prev == '/' && c == '*') ||
        (prev == '?' && c == '?')) {
      sg_buf_putc(b, ' ');
    }
    sg_buf_putc(b, c);
  }
  while (b->len > start &&
         (b->data[b->len - 1] == ' ' || b->data[b->len - 1] == '\\')) {
    b->data[--b->len] = '\0';
  }
}

/* A .proto comment as its own paragraph, line by line as written, with the
   indentation common to its lines removed. */
static void doc_verbatim(doc *d, const char *text) {
  const char *p, *nl;
  size_t strip = (size_t)-1;
  int any = 0, blank = 0;

  for (p = text; *p != '\0'; p = *nl != '\0' ? nl + 1 : nl) {
    size_t lead = 0;
    nl = strchr(p, '\n');
    if (nl == NULL) {
      nl = p + strlen(p);
    }
    while (p + lead < nl && (p[lead] == ' ' || p[lead] == '\t')) {
      lead++;
    }
    if (p + lead < nl && p[lead] != '\r' && lead < strip) {
      strip = lead;
    }
  }
  if (strip == (size_t)-1) {
    return; /* only blank lines */
  }
  for (p = text; *p != '\0'; p = *nl != '\0' ? nl + 1 : nl) {
    nl = strchr(p, '\n');
    if (nl == NULL) {
      nl = p + strlen(p);
    }
    sg_buf_reset(&d->para);
    if ((size_t)(nl - p) > strip) {
      safe_line(&d->para, p + strip, (size_t)(nl - p) - strip);
    }
    if (d->para.len == 0) {
      blank = any; /* inner blank lines are kept, outer ones dropped */
      continue;
    }
    if (!any) {
      doc_gap(d);
    } else if (blank) {
      sg_buf_puts(d->out, " *\n");
    }
    any = 1;
    blank = 0;
    sg_buf_printf(d->out, " * %s\n", sg_buf_str(&d->para));
  }
  if (d->para.oom) {
    d->out->oom = 1;
  }
}

static void doc_close(doc *d) {
  sg_buf_puts(d->out, " */\n");
  sg_buf_free(&d->para);
}

/* A one-paragraph doc comment of a struct member, in the layout of
   conch/call.h: continued under its text, closed on its last line. */
static void member_doc(sg_buf *b, const char *text) {
  sg_buf t;
  const char *last;

  sg_buf_init(&t);
  wrap_text(&t, "  /** ", "      ", text);
  if (t.oom || t.len == 0) {
    b->oom = 1;
    sg_buf_free(&t);
    return;
  }
  t.data[--t.len] = '\0'; /* the final newline */
  last = strrchr(t.data, '\n');
  last = last != NULL ? last + 1 : t.data;
  sg_buf_puts(b, t.data);
  if (strlen(last) + 3 <= WIDTH) {
    sg_buf_puts(b, " */\n");
  } else {
    sg_buf_puts(b, "\n      */\n");
  }
  sg_buf_free(&t);
}

/* A rule comment, "---- title ----...", filling the line (a title too
   long for the line gets no fill). */
static void rule(sg_buf *b, char fill, const char *title) {
  size_t n = strlen(title) + 13; /* the rule without its fill */
  sg_buf_printf(b, "/* %c%c%c%c %s", fill, fill, fill, fill, title);
  if (n < WIDTH) {
    sg_buf_putc(b, ' ');
    while (n++ < WIDTH) {
      sg_buf_putc(b, fill);
    }
  }
  sg_buf_puts(b, " */\n");
}

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

/* A declaration being put together: its head ("int f(") and parameters,
   kept NUL-separated in one buffer. */
typedef struct decl {
  sg_buf text;
  size_t off[12];
  size_t n;
} decl;

static void decl_vadd(decl *d, const char *fmt, va_list ap) {
  if (d->n == sizeof(d->off) / sizeof(d->off[0])) {
    d->text.oom = 1; /* more parameters than any stub has: a bug */
    return;
  }
  d->off[d->n++] = d->text.len;
  sg_buf_vprintf(&d->text, fmt, ap);
  sg_buf_putc(&d->text, '\0');
}

static void decl_start(decl *d, const char *fmt, ...) SG_PRINTF(2, 3);
static void decl_add(decl *d, const char *fmt, ...) SG_PRINTF(2, 3);

static void decl_start(decl *d, const char *fmt, ...) {
  va_list ap;
  sg_buf_reset(&d->text);
  d->n = 0;
  va_start(ap, fmt);
  decl_vadd(d, fmt, ap);
  va_end(ap);
}

static void decl_add(decl *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  decl_vadd(d, fmt, ap);
  va_end(ap);
}

static void decl_end(sg_buf *b, decl *d, const char *indent,
                     const char *close) {
  const char *params[12];
  size_t i;
  if (d->text.oom || d->n == 0) {
    b->oom = 1;
    return;
  }
  for (i = 1; i < d->n; i++) {
    params[i - 1] = d->text.data + d->off[i];
  }
  wrap(b, indent, d->text.data + d->off[0], params, d->n - 1, close);
}

/* Adds a parameter "const <type> *<name>" for each pair of strings in |ap|,
   up to a NULL type. */
static void decl_vconst(decl *d, va_list ap) {
  const char *type;
  while ((type = va_arg(ap, const char *)) != NULL) {
    const char *name = va_arg(ap, const char *);
    decl_add(d, "const %s *%s", type, name);
  }
}

/* A member "void (*<ev>)(<self_t> <self>, const <type> *<name>...,
   void *user_data);" of a handler table; the pairs end with a NULL. */
static void member_fn(sg_buf *b, decl *dl, const char *ev, const char *self_t,
                      const char *self, ...) SG_SENTINEL;

static void member_fn(sg_buf *b, decl *dl, const char *ev, const char *self_t,
                      const char *self, ...) {
  va_list ap;
  decl_start(dl, "void (*%s)(", ev);
  decl_add(dl, "%s %s", self_t, self);
  va_start(ap, self);
  decl_vconst(dl, ap);
  va_end(ap);
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "  ", ");");
}

/* Everything a method's code refers to. */
typedef struct names {
  const sg_method *m;
  const char *B;    /* prefix of functions */
  const char *req;  /* request type */
  const char *resp; /* response type */
  sg_buf call_t;    /* the call type */
  sg_buf handler_t; /* the handler type */
  sg_buf resp_desc; /* the response descriptor */
  sg_buf rpc_t;     /* the server's call type */
  sg_buf server_t;  /* the server's handlers of the method */
} names;

static void names_init(names *n, const sg_method *m) {
  n->m = m;
  n->B = m->lower;
  n->req = m->in->c_name;
  n->resp = m->out->c_name;
  sg_buf_init(&n->call_t);
  sg_buf_init(&n->handler_t);
  sg_buf_init(&n->resp_desc);
  sg_buf_init(&n->rpc_t);
  sg_buf_init(&n->server_t);
  sg_buf_printf(&n->rpc_t, "%s_Rpc", m->camel);
  sg_buf_printf(&n->server_t, "%s_Server", m->camel);
  sg_buf_printf(&n->call_t, "%s_Call", m->camel);
  sg_buf_printf(&n->handler_t, "%s_Handler", m->camel);
  sg_buf_printf(&n->resp_desc, "%s__descriptor", m->out->lower);
}

static int names_oom(const names *n) {
  return n->call_t.oom || n->handler_t.oom || n->resp_desc.oom ||
         n->rpc_t.oom || n->server_t.oom;
}

static void names_free(names *n) {
  sg_buf_free(&n->call_t);
  sg_buf_free(&n->handler_t);
  sg_buf_free(&n->resp_desc);
  sg_buf_free(&n->rpc_t);
  sg_buf_free(&n->server_t);
}

#define CALL_T(n) sg_buf_str(&(n)->call_t)
#define HANDLER_T(n) sg_buf_str(&(n)->handler_t)
#define RESP_DESC(n) sg_buf_str(&(n)->resp_desc)
#define RPC_T(n) sg_buf_str(&(n)->rpc_t)
#define SERVER_T(n) sg_buf_str(&(n)->server_t)

/* The functions' heads, which the header declares and the source defines:
   each proto_*() starts |dl| for decl_end() to close. */

/* "int <B><suffix>(conch_client *client, const conch_call_opts *opts". */
static void proto_client(decl *dl, const names *n, const char *suffix) {
  decl_start(dl, "int %s%s(", n->B, suffix);
  decl_add(dl, "conch_client *client");
  decl_add(dl, "const conch_call_opts *opts");
}

static void proto_start(decl *dl, const names *n) {
  proto_client(dl, n, "_start");
  if (!is_stream_in(n->m)) {
    decl_add(dl, "const %s *req", n->req);
  }
  decl_add(dl, "const %s *handler", HANDLER_T(n));
  decl_add(dl, "%s *out", CALL_T(n));
}

static void proto_sync(decl *dl, const names *n) {
  proto_client(dl, n, "_sync");
  decl_add(dl, "const %s *req", n->req);
  decl_add(dl, "%s **resp", n->resp);
  decl_add(dl, "conch_status *status");
  decl_add(dl, "conch_metadata *headers");
  decl_add(dl, "conch_metadata *trailers");
}

/* _async() of a unary method or, with on_message, a server stream. */
static void proto_async(decl *dl, const names *n) {
  proto_client(dl, n, "_async");
  decl_add(dl, "const %s *req", n->req);
  if (n->m->kind == SG_SERVER) {
    decl_add(dl, "%s_OnMessage on_message", n->m->camel);
  }
  decl_add(dl, "%s_Done done", n->m->camel);
  decl_add(dl, "void *user_data");
  decl_add(dl, "conch_call **out");
}

/* "int <B><suffix>(<Call> call". */
static void proto_call(decl *dl, const names *n, const char *suffix) {
  decl_start(dl, "int %s%s(", n->B, suffix);
  decl_add(dl, "%s call", CALL_T(n));
}

/* _recv(), _recv_sync() and _close_and_recv_sync(): the response comes out
   through |param|. */
static void proto_take(decl *dl, const names *n, const char *suffix,
                       const char *param) {
  proto_call(dl, n, suffix);
  decl_add(dl, "%s **%s", n->resp, param);
}

/* _send() and _send_sync(). */
static void proto_send(decl *dl, const names *n, const char *suffix) {
  proto_call(dl, n, suffix);
  decl_add(dl, "const %s *msg", n->req);
}

/* "int <B>_rpc<suffix>(<Rpc> rpc". */
static void proto_rpc(decl *dl, const names *n, const char *suffix) {
  decl_start(dl, "int %s_rpc%s(", n->B, suffix);
  decl_add(dl, "%s rpc", RPC_T(n));
}

/* The parameters of the end of a call: its status and metadata. */
static void decl_end_params(decl *dl) {
  decl_add(dl, "const conch_status *status");
  decl_add(dl, "const conch_metadata *headers");
  decl_add(dl, "const conch_metadata *trailers");
}

/* The typedef of _async()'s done callback; a unary one gets the response
   too. */
static void done_typedef(sg_buf *b, const names *n, decl *dl) {
  decl_start(dl, "typedef void (*%s_Done)(", n->m->camel);
  if (n->m->kind == SG_UNARY) {
    decl_add(dl, "const %s *resp", n->resp);
  }
  decl_end_params(dl);
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "", ");");
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

/* Whether the server streams responses (and so needs on_send_ready). */
static int is_stream_out(const sg_method *m) {
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
