/* protoc-gen-conch's emitter, in three files: emit.c (layout, doc
   comments, declarations and the names of a method), emit_header.c (the
   header, the manual of the stubs) and emit_source.c (the source).  What
   they share. */
#ifndef SG_EMIT_INT_H
#define SG_EMIT_INT_H

#include <stdarg.h>
#include <stddef.h>

#include "gen_int.h"

#define WIDTH 80
/* A doc block of paragraphs.  Each paragraph is formatted, wrapped and set
   apart by an empty " *" line. */
typedef struct doc {
  sg_buf *out;
  sg_buf para;
  int n;
} doc;

/* A declaration being put together: its head ("int f(") and parameters,
   kept NUL-separated in one buffer. */
typedef struct decl {
  sg_buf text;
  size_t off[12];
  size_t n;
} decl;

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

#define CALL_T(n) sg_buf_str(&(n)->call_t)
#define HANDLER_T(n) sg_buf_str(&(n)->handler_t)
#define RESP_DESC(n) sg_buf_str(&(n)->resp_desc)
#define RPC_T(n) sg_buf_str(&(n)->rpc_t)
#define SERVER_T(n) sg_buf_str(&(n)->server_t)

int is_stream_in(const sg_method *m);

/* Lays out |n| parameters packed from column |align|, where the first one
   starts; writes them to |b| unless it is NULL.  Returns the lines used. */
size_t pack(sg_buf *b, size_t align, const char *const *params, size_t n,
            const char *close);

/* "  <lhs> = <rhs>;" in a function body (|lhs| and |rhs| formats with one
   %s each, filled with |a1| and, when not NULL, |a2|), broken after the
   '=' when it does not fit, as clang-format breaks it. */
void assign(sg_buf *b, const char *lhs, const char *rhs, const char *a1,
            const char *a2);

/* Word-wraps |text| into lines of at most WIDTH columns, each starting with
   |first| (the first line) or |rest|.  Runs of spaces inside a line are
   kept (two after a full stop); at a break they go. */
void wrap_text(sg_buf *b, const char *first, const char *rest,
               const char *text);

void doc_open(doc *d, sg_buf *out);

void doc_para(doc *d, const char *fmt, ...) SG_PRINTF(2, 3);

/* A .proto comment as its own paragraph, line by line as written, with the
   indentation common to its lines removed. */
void doc_verbatim(doc *d, const char *text);

void doc_close(doc *d);

/* A one-paragraph doc comment of a struct member, in the layout of
   conch/call.h: continued under its text, closed on its last line. */
void member_doc(sg_buf *b, const char *text);

/* A rule comment, "---- title ----...", filling the line (a title too
   long for the line gets no fill). */
void rule(sg_buf *b, char fill, const char *title);

void decl_start(decl *d, const char *fmt, ...) SG_PRINTF(2, 3);

void decl_add(decl *d, const char *fmt, ...) SG_PRINTF(2, 3);

void decl_end(sg_buf *b, decl *d, const char *indent, const char *close);

/* Adds a parameter "const <type> *<name>" for each pair of strings in |ap|,
   up to a NULL type. */
void decl_vconst(decl *d, va_list ap);

void member_fn(sg_buf *b, decl *dl, const char *ev, const char *self_t,
               const char *self, ...) SG_SENTINEL;

void names_init(names *n, const sg_method *m);

int names_oom(const names *n);

void names_free(names *n);

void proto_start(decl *dl, const names *n);

void proto_sync(decl *dl, const names *n);

/* _async() of a unary method or, with on_message, a server stream. */
void proto_async(decl *dl, const names *n);

/* "int <B><suffix>(<Call> call". */
void proto_call(decl *dl, const names *n, const char *suffix);

/* _recv(), _recv_sync() and _close_and_recv_sync(): the response comes out
   through |param|. */
void proto_take(decl *dl, const names *n, const char *suffix,
                const char *param);

/* _send() and _send_sync(). */
void proto_send(decl *dl, const names *n, const char *suffix);

/* "int <B>_rpc<suffix>(<Rpc> rpc". */
void proto_rpc(decl *dl, const names *n, const char *suffix);

/* The parameters of the end of a call: its status and metadata. */
void decl_end_params(decl *dl);

/* The typedef of _async()'s done callback; a unary one gets the response
   too. */
void done_typedef(sg_buf *b, const names *n, decl *dl);

/* Whether the server streams responses (and so needs on_send_ready). */
int is_stream_out(const sg_method *m);

#endif
