/* protobuf-c's naming, byte for byte: each function names the helper of
   protoc-c/c_helpers.cc (protobuf-c 1.4.1) it reproduces. */
#include "names.h"

#include <string.h>

static int is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static int is_lower(char c) { return c >= 'a' && c <= 'z'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* CamelToLower.  protoc-c uses isupper() in the C locale, so only ASCII
   letters count. */
void sg_camel_to_lower(sg_buf *out, const char *name) {
  int was_upper = 1; /* no '_' before a leading capital */
  for (; *name != '\0'; name++) {
    int up = is_upper(*name);
    if (up) {
      if (!was_upper) {
        sg_buf_putc(out, '_');
      }
      sg_buf_putc(out, (char)(*name - 'A' + 'a'));
    } else {
      sg_buf_putc(out, *name);
    }
    was_upper = up;
  }
}

/* ToCamel. */
void sg_to_camel(sg_buf *out, const char *name) {
  int next_upper = 1;
  for (; *name != '\0'; name++) {
    if (*name == '_') {
      next_upper = 1;
    } else if (next_upper) {
      sg_buf_putc(out, is_lower(*name) ? (char)(*name - 'a' + 'A') : *name);
      next_upper = 0;
    } else {
      sg_buf_putc(out, *name);
    }
  }
}

/* OverrideFullName, then the split on '.' of FullNameToLower/FullNameToC:
   calls |piece| for each non-empty part. */
static void each_piece(sg_buf *out, const sg_scope *scope, const char *full,
                       void (*piece)(sg_buf *, const char *)) {
  sg_buf name, part;
  const char *p, *dot;
  int first = 1;

  sg_buf_init(&name);
  sg_buf_init(&part);
  if (scope->c_package != NULL) {
    size_t plen = strlen(scope->package);
    sg_buf_puts(&name, scope->c_package);
    if (plen == 0) {
      sg_buf_putc(&name, '.');
    }
    /* protoc-c cuts the package's length off the full name. */
    sg_buf_puts(&name, strlen(full) >= plen ? full + plen : "");
  } else {
    sg_buf_puts(&name, full);
  }
  if (name.oom) {
    out->oom = 1;
  }
  for (p = sg_buf_str(&name);; p = dot + 1) {
    dot = strchr(p, '.');
    sg_buf_reset(&part);
    sg_buf_add(&part, p, dot != NULL ? (size_t)(dot - p) : strlen(p));
    if (part.oom) {
      out->oom = 1;
    }
    if (part.len > 0) {
      if (!first) {
        sg_buf_puts(out, "__");
      }
      piece(out, sg_buf_str(&part));
      first = 0;
    }
    if (dot == NULL) {
      break;
    }
  }
  sg_buf_free(&name);
  sg_buf_free(&part);
}

void sg_full_lower(sg_buf *out, const sg_scope *scope, const char *full) {
  each_piece(out, scope, full, sg_camel_to_lower);
}

void sg_full_c(sg_buf *out, const sg_scope *scope, const char *full) {
  each_piece(out, scope, full, sg_to_camel);
}

/* FilenameIdentifier. */
void sg_file_ident(sg_buf *out, const char *filename) {
  for (; *filename != '\0'; filename++) {
    char c = *filename;
    if (is_upper(c) || is_lower(c) || is_digit(c)) {
      sg_buf_putc(out, c);
    } else {
      sg_buf_printf(out, "_%x", (unsigned)(unsigned char)c);
    }
  }
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* StripProto. */
void sg_strip_proto(sg_buf *out, const char *filename) {
  size_t n = strlen(filename);
  if (ends_with(filename, ".protodevel")) {
    n -= strlen(".protodevel");
  } else if (ends_with(filename, ".proto")) {
    n -= strlen(".proto");
  }
  sg_buf_add(out, filename, n);
}

int sg_is_ident(const char *s) {
  if (s == NULL || !(is_upper(*s) || is_lower(*s) || *s == '_')) {
    return 0;
  }
  for (s++; *s != '\0'; s++) {
    if (!(is_upper(*s) || is_lower(*s) || is_digit(*s) || *s == '_')) {
      return 0;
    }
  }
  return 1;
}

int sg_is_dotted(const char *s, int allow_empty) {
  if (s == NULL) {
    return 0;
  }
  if (*s == '\0') {
    return allow_empty;
  }
  for (;;) {
    const char *p = s;
    if (!(is_upper(*p) || is_lower(*p) || *p == '_')) {
      return 0;
    }
    for (p++; is_upper(*p) || is_lower(*p) || is_digit(*p) || *p == '_'; p++) {
    }
    if (*p == '\0') {
      return 1;
    }
    if (*p != '.') {
      return 0;
    }
    s = p + 1;
  }
}

int sg_is_c_keyword(const char *s) {
  static const char *const keywords[] = {
      "auto",       "break",     "case",           "char",
      "const",      "continue",  "default",        "do",
      "double",     "else",      "enum",           "extern",
      "float",      "for",       "goto",           "if",
      "inline",     "int",       "long",           "register",
      "restrict",   "return",    "short",          "signed",
      "sizeof",     "static",    "struct",         "switch",
      "typedef",    "union",     "unsigned",       "void",
      "volatile",   "while",     "_Alignas",       "_Alignof",
      "_Atomic",    "_Bool",     "_Complex",       "_Generic",
      "_Imaginary", "_Noreturn", "_Static_assert", "_Thread_local"};
  size_t i;
  for (i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++) {
    if (strcmp(s, keywords[i]) == 0) {
      return 1;
    }
  }
  return 0;
}
