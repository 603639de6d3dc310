/* From the model to C text: the header, which is the manual of the stubs
   (emit_header.c), and the source (emit_source.c); this file holds what
   both use (emit_int.h): the layout, doc comments, declarations being put
   together and the names of a method.  Output is laid out as clang-format
   (LLVM, 80 columns, 2-space indent) would lay it out, for the common
   cases. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_int.h"

int is_stream_in(const sg_method *m) {
  return m->kind == SG_CLIENT || m->kind == SG_BIDI;
}

/* ---- Layout ------------------------------------------------------------ */

static void spaces(sg_buf *b, size_t n) {
  while (n-- > 0) {
    sg_buf_putc(b, ' ');
  }
}
size_t pack(sg_buf *b, size_t align, const char *const *params, size_t n,
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
void assign(sg_buf *b, const char *lhs, const char *rhs, const char *a1,
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
void wrap_text(sg_buf *b, const char *first, const char *rest,
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

void doc_open(doc *d, sg_buf *out) {
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

void doc_para(doc *d, const char *fmt, ...) {
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
void doc_verbatim(doc *d, const char *text) {
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

void doc_close(doc *d) {
  sg_buf_puts(d->out, " */\n");
  sg_buf_free(&d->para);
}
void member_doc(sg_buf *b, const char *text) {
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
void rule(sg_buf *b, char fill, const char *title) {
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

static void decl_vadd(decl *d, const char *fmt, va_list ap) {
  if (d->n == sizeof(d->off) / sizeof(d->off[0])) {
    d->text.oom = 1; /* more parameters than any stub has: a bug */
    return;
  }
  d->off[d->n++] = d->text.len;
  sg_buf_vprintf(&d->text, fmt, ap);
  sg_buf_putc(&d->text, '\0');
}

void decl_start(decl *d, const char *fmt, ...) {
  va_list ap;
  sg_buf_reset(&d->text);
  d->n = 0;
  va_start(ap, fmt);
  decl_vadd(d, fmt, ap);
  va_end(ap);
}

void decl_add(decl *d, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  decl_vadd(d, fmt, ap);
  va_end(ap);
}

void decl_end(sg_buf *b, decl *d, const char *indent, const char *close) {
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
void decl_vconst(decl *d, va_list ap) {
  const char *type;
  while ((type = va_arg(ap, const char *)) != NULL) {
    const char *name = va_arg(ap, const char *);
    decl_add(d, "const %s *%s", type, name);
  }
}

/* A member "void (*<ev>)(<self_t> <self>, const <type> *<name>...,
   void *user_data);" of a handler table; the pairs end with a NULL. */

void member_fn(sg_buf *b, decl *dl, const char *ev, const char *self_t,
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

void names_init(names *n, const sg_method *m) {
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

int names_oom(const names *n) {
  return n->call_t.oom || n->handler_t.oom || n->resp_desc.oom ||
         n->rpc_t.oom || n->server_t.oom;
}

void names_free(names *n) {
  sg_buf_free(&n->call_t);
  sg_buf_free(&n->handler_t);
  sg_buf_free(&n->resp_desc);
  sg_buf_free(&n->rpc_t);
  sg_buf_free(&n->server_t);
}

/* The functions' heads, which the header declares and the source defines:
   each proto_*() starts |dl| for decl_end() to close. */

/* "int <B><suffix>(conch_client *client, const conch_call_opts *opts". */
static void proto_client(decl *dl, const names *n, const char *suffix) {
  decl_start(dl, "int %s%s(", n->B, suffix);
  decl_add(dl, "conch_client *client");
  decl_add(dl, "const conch_call_opts *opts");
}

void proto_start(decl *dl, const names *n) {
  proto_client(dl, n, "_start");
  if (!is_stream_in(n->m)) {
    decl_add(dl, "const %s *req", n->req);
  }
  decl_add(dl, "const %s *handler", HANDLER_T(n));
  decl_add(dl, "%s *out", CALL_T(n));
}

void proto_sync(decl *dl, const names *n) {
  proto_client(dl, n, "_sync");
  decl_add(dl, "const %s *req", n->req);
  decl_add(dl, "%s **resp", n->resp);
  decl_add(dl, "conch_status *status");
  decl_add(dl, "conch_metadata *headers");
  decl_add(dl, "conch_metadata *trailers");
}
void proto_async(decl *dl, const names *n) {
  proto_client(dl, n, "_async");
  decl_add(dl, "const %s *req", n->req);
  if (n->m->kind == SG_SERVER) {
    decl_add(dl, "%s_OnMessage on_message", n->m->camel);
  }
  decl_add(dl, "%s_Done done", n->m->camel);
  decl_add(dl, "void *user_data");
  decl_add(dl, "conch_call **out");
}
void proto_call(decl *dl, const names *n, const char *suffix) {
  decl_start(dl, "int %s%s(", n->B, suffix);
  decl_add(dl, "%s call", CALL_T(n));
}
void proto_take(decl *dl, const names *n, const char *suffix,
                const char *param) {
  proto_call(dl, n, suffix);
  decl_add(dl, "%s **%s", n->resp, param);
}
void proto_send(decl *dl, const names *n, const char *suffix) {
  proto_call(dl, n, suffix);
  decl_add(dl, "const %s *msg", n->req);
}
void proto_rpc(decl *dl, const names *n, const char *suffix) {
  decl_start(dl, "int %s_rpc%s(", n->B, suffix);
  decl_add(dl, "%s rpc", RPC_T(n));
}
void decl_end_params(decl *dl) {
  decl_add(dl, "const conch_status *status");
  decl_add(dl, "const conch_metadata *headers");
  decl_add(dl, "const conch_metadata *trailers");
}
void done_typedef(sg_buf *b, const names *n, decl *dl) {
  decl_start(dl, "typedef void (*%s_Done)(", n->m->camel);
  if (n->m->kind == SG_UNARY) {
    decl_add(dl, "const %s *resp", n->resp);
  }
  decl_end_params(dl);
  decl_add(dl, "void *user_data");
  decl_end(b, dl, "", ");");
}
