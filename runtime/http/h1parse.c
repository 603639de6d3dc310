/* The HTTP/1.1 front end (h1parse.h): libhttp-parser's callbacks turned
   into a head with its fields, body bytes and an end.  Field names and
   values are collected in one buffer (|hb|) as offsets, because a field
   may arrive in pieces across feeds; the list handed over points into it. */
#include "h1parse.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

#include "wire.h"

struct conch_h1p_off {
  size_t noff, nlen, voff, vlen; /* in |hb| */
};

/* RFC 9110 5.6.2 token characters, lowercased; 0 for any other byte. */
#define TOK_ROW(c)                                                             \
  [c] = c, [c + 1] = c + 1, [c + 2] = c + 2, [c + 3] = c + 3, [c + 4] = c + 4, \
  [c + 5] = c + 5, [c + 6] = c + 6, [c + 7] = c + 7, [c + 8] = c + 8,          \
  [c + 9] = c + 9
static const uint8_t tok[256] = {
    TOK_ROW('0'),  TOK_ROW('a'), TOK_ROW('k'), ['u'] = 'u', ['v'] = 'v',
    ['w'] = 'w',   ['x'] = 'x',  ['y'] = 'y',  ['z'] = 'z', ['A'] = 'a',
    ['B'] = 'b',   ['C'] = 'c',  ['D'] = 'd',  ['E'] = 'e', ['F'] = 'f',
    ['G'] = 'g',   ['H'] = 'h',  ['I'] = 'i',  ['J'] = 'j', ['K'] = 'k',
    ['L'] = 'l',   ['M'] = 'm',  ['N'] = 'n',  ['O'] = 'o', ['P'] = 'p',
    ['Q'] = 'q',   ['R'] = 'r',  ['S'] = 's',  ['T'] = 't', ['U'] = 'u',
    ['V'] = 'v',   ['W'] = 'w',  ['X'] = 'x',  ['Y'] = 'y', ['Z'] = 'z',
    ['!'] = '!',   ['#'] = '#',  ['$'] = '$',  ['%'] = '%', ['&'] = '&',
    ['\''] = '\'', ['*'] = '*',  ['+'] = '+',  ['-'] = '-', ['.'] = '.',
    ['^'] = '^',   ['_'] = '_',  ['`'] = '`',  ['|'] = '|', ['~'] = '~'};
#undef TOK_ROW

#define H1P_MAX_FIELDS 1000

static conch_h1p *of(http_parser *hp) { return hp->data; }

/* Lowercases the name |p| in place; whether it is a token (RFC 9110
   5.6.2). */
static int name_lower(uint8_t *p, size_t n) {
  size_t i;
  if (n == 0) {
    return 0;
  }
  for (i = 0; i < n; i++) {
    uint8_t c = tok[p[i]];
    if (c == 0) {
      return 0;
    }
    p[i] = c;
  }
  return 1;
}

/* Visible characters, obs-text and inner blanks (RFC 9110 5.5).  Eight
   bytes at a time while none is below 0x20 or 0x7f (the bytes of a word
   with one are looked at one by one: HTAB is allowed). */
static int value_ok(const uint8_t *p, size_t n) {
  const uint64_t ones = 0x0101010101010101u;
  const uint64_t highs = 0x8080808080808080u;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    uint64_t d;
    memcpy(&w, p + i, 8);
    d = w ^ (ones * 0x7f);
    if ((((w - ones * 0x20) & ~w) | ((d - ones) & ~d)) & highs) {
      break;
    }
  }
  for (; i < n; i++) {
    if ((p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f) {
      return 0;
    }
  }
  return 1;
}

static int hb_append(conch_h1p *p, const char *at, size_t len) {
  if (conch__buf_size(&p->hb) + conch__buf_size(&p->url) + len > p->max_head) {
    p->over = 1;
    return -1;
  }
  if (p->hb.cap - p->hb.len >= len && len > 0) { /* the common case */
    memcpy(p->hb.data + p->hb.len, at, len);
    p->hb.len += len;
    return 0;
  }
  if (conch__buf_append(&p->hb, p->mem, at, len) != 0) {
    p->nomem = 1;
    return -1;
  }
  return 0;
}

static void block_reset(conch_h1p *p) {
  conch__buf_reset(&p->hb);
  p->noffs = 0;
  p->in_value = 0;
}

static void trim(const uint8_t **v, size_t *n) {
  while (*n > 0 && ((*v)[0] == ' ' || (*v)[0] == '\t')) {
    (*v)++;
    (*n)--;
  }
  while (*n > 0 && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t')) {
    (*n)--;
  }
}

static int name_is(const uint8_t *name, size_t n, const char *lower) {
  return strlen(lower) == n && memcmp(name, lower, n) == 0;
}

/* RFC 9110 7.6.1: the fields a Connection field names are the
   connection's, not the message's: out of the |*n| built.  The names in
   |hb| are lowercased; the options are matched without case. */
static void drop_named(conch_h1p *p, const uint8_t *base, size_t *n) {
  size_t i, j, k;

  for (i = 0; i < p->noffs; i++) {
    const struct conch_h1p_off *f = &p->offs[i];
    const uint8_t *v = base + f->voff;
    size_t vlen = f->vlen;
    size_t at = 0;

    if (!name_is(base + f->noff, f->nlen, "connection") || !value_ok(v, vlen)) {
      continue;
    }
    while (at < vlen) { /* #connection-option, blanks around commas */
      const uint8_t *o = v + at;
      size_t olen = 0;
      while (at + olen < vlen && o[olen] != ',') {
        olen++;
      }
      at += olen + 1;
      trim(&o, &olen);
      if (olen == 0) {
        continue;
      }
      for (j = 0, k = 0; j < *n; j++) {
        const conch_h1_field *fl = &p->fields[j];
        if (fl->nlen == olen &&
            strncasecmp((const char *)fl->name, (const char *)o, olen) == 0) {
          continue;
        }
        p->fields[k++] = *fl;
      }
      *n = k;
    }
  }
}

/* The fields of the block read so far, as HTTP/2 sees them (h1parse.h);
   sets |*n|.  Names are lowercased in place. */
static const conch_h1_field *build_fields(conch_h1p *p, size_t *n) {
  uint8_t *base = conch__buf_head(&p->hb);
  size_t i, k = 0;
  int chunked = (p->p.flags & F_CHUNKED) != 0;
  int named = 0; /* a Connection field was seen */

  *n = 0;
  p->ninvalid = 0;
  if (p->noffs == 0) {
    return p->fields;
  }
  for (i = 0; i < p->noffs; i++) {
    const struct conch_h1p_off *f = &p->offs[i];
    uint8_t *name = base + f->noff;
    const uint8_t *v = base + f->voff;
    size_t vlen = f->vlen;
    trim(&v, &vlen);
    if (!name_lower(name, f->nlen) || !value_ok(v, vlen)) {
      p->ninvalid++;
      continue;
    }
    if (conch__h1_hop_by_hop(name, f->nlen)) {
      named |= f->nlen == 10 && memcmp(name, "connection", 10) == 0;
      continue;
    }
    if (chunked && f->nlen == 14 && memcmp(name, "content-length", 14) == 0) {
      continue;
    }
    p->fields[k].name = name;
    p->fields[k].nlen = f->nlen;
    p->fields[k].value = vlen > 0 ? v : (const uint8_t *)"";
    p->fields[k].vlen = vlen;
    k++;
  }
  if (named && k > 0) {
    drop_named(p, base, &k);
  }
  *n = k;
  return p->fields;
}

/* ---- libhttp-parser callbacks ------------------------------------------ */

static int on_message_begin(http_parser *hp) {
  conch_h1p *p = of(hp);
  p->started = 1;
  p->head_done = 0;
  p->skip_1xx = 0;
  block_reset(p);
  conch__buf_reset(&p->url);
  return 0;
}

static int on_url(http_parser *hp, const char *at, size_t len) {
  conch_h1p *p = of(hp);
  if (conch__buf_size(&p->hb) + conch__buf_size(&p->url) + len > p->max_head) {
    p->over = 1;
    return -1;
  }
  if (conch__buf_append(&p->url, p->mem, at, len) != 0) {
    p->nomem = 1;
    return -1;
  }
  return 0;
}

static int field_add(conch_h1p *p) {
  if (p->noffs == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 16;
    struct conch_h1p_off *o;
    conch_h1_field *f;
    if (cap > H1P_MAX_FIELDS) {
      p->over = 1;
      return -1;
    }
    o = conch__realloc(p->mem, p->offs, cap * sizeof(*o));
    if (o == NULL) {
      p->nomem = 1;
      return -1;
    }
    p->offs = o;
    f = conch__realloc(p->mem, p->fields, cap * sizeof(*f));
    if (f == NULL) {
      p->nomem = 1;
      return -1;
    }
    p->fields = f;
    p->cap = cap;
  }
  memset(&p->offs[p->noffs], 0, sizeof(p->offs[0]));
  p->offs[p->noffs].noff = conch__buf_size(&p->hb);
  p->noffs++;
  return 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t len) {
  conch_h1p *p = of(hp);
  if ((p->noffs == 0 || p->in_value) && field_add(p) != 0) {
    return -1;
  }
  p->in_value = 0;
  p->offs[p->noffs - 1].nlen += len;
  return hb_append(p, at, len);
}

static int on_header_value(http_parser *hp, const char *at, size_t len) {
  conch_h1p *p = of(hp);
  struct conch_h1p_off *f;
  if (p->noffs == 0) {
    return -1;
  }
  f = &p->offs[p->noffs - 1];
  if (!p->in_value) {
    p->in_value = 1;
    f->voff = conch__buf_size(&p->hb);
    f->vlen = 0;
  }
  f->vlen += len;
  return hb_append(p, at, len);
}

static int on_headers_complete(http_parser *hp) {
  conch_h1p *p = of(hp);
  conch_h1_head h;

  if (p->head_done) {
    return 0; /* chunked trailers end here in some versions */
  }
  if (hp->type == HTTP_RESPONSE) {
    if (hp->status_code / 100 == 1) {
      if (hp->status_code == 101) {
        return -1; /* no upgrade was asked for */
      }
      p->skip_1xx = 1; /* 100 Continue & co: the final response follows */
      block_reset(p);
      return 0;
    }
    if (hp->status_code < 200 || hp->status_code > 999) {
      return -1;
    }
  }
  memset(&h, 0, sizeof(h));
  h.status = hp->type == HTTP_RESPONSE ? (int)hp->status_code : 0;
  if (hp->type == HTTP_REQUEST) {
    h.method = http_method_str((enum http_method)hp->method);
    h.url = conch__buf_size(&p->url) > 0 ? conch__buf_head(&p->url)
                                         : (const uint8_t *)"";
    h.url_len = conch__buf_size(&p->url);
  }
  h.version_minor = hp->http_minor;
  h.chunked = (hp->flags & F_CHUNKED) != 0;
  h.length = h.chunked || hp->content_length == ULLONG_MAX
                 ? UINT64_MAX
                 : (uint64_t)hp->content_length;
  if (hp->type == HTTP_RESPONSE) {
    h.body = !(hp->status_code == 204 || hp->status_code == 304 ||
               (!h.chunked && hp->content_length == 0));
  } else {
    h.body = h.chunked || (h.length != UINT64_MAX && h.length > 0);
  }
  h.fields = build_fields(p, &h.nfields);
  h.ninvalid = p->ninvalid;
  p->head_done = 1;
  if (p->cbs->on_head(p->ud, &h) != 0) {
    p->stopped = 1;
    return -1;
  }
  block_reset(p); /* what follows is the trailers */
  return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len) {
  conch_h1p *p = of(hp);
  if (p->skip_1xx) {
    return 0;
  }
  if (p->cbs->on_body(p->ud, (const uint8_t *)at, len) != 0) {
    p->stopped = 1;
    return -1;
  }
  return 0;
}

static int on_message_complete(http_parser *hp) {
  conch_h1p *p = of(hp);
  const conch_h1_field *t;
  size_t nt;

  if (p->skip_1xx) {
    p->skip_1xx = 0;
    p->head_done = 0;
    block_reset(p);
    return 0;
  }
  t = build_fields(p, &nt);
  p->started = 0;
  p->ended = 1;
  if (p->cbs->on_end(p->ud, t, nt, http_should_keep_alive(hp) != 0) != 0) {
    p->stopped = 1;
    return -1;
  }
  /* Whatever follows is the next message's: the caller decides. */
  http_parser_pause(hp, 1);
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- API --------------------------------------------------------------- */

void conch__h1p_init(conch_h1p *p, int request, const conch_mem *mem,
                     size_t max_head, const conch_h1p_cbs *cbs, void *ud) {
  memset(p, 0, sizeof(*p));
  http_parser_init(&p->p, request ? HTTP_REQUEST : HTTP_RESPONSE);
  p->p.data = p;
  p->mem = mem;
  p->max_head = max_head;
  p->cbs = cbs;
  p->ud = ud;
}

void conch__h1p_free(conch_h1p *p) {
  conch__buf_free(&p->hb, p->mem);
  conch__buf_free(&p->url, p->mem);
  conch__free(p->mem, p->offs);
  conch__free(p->mem, p->fields);
  p->offs = NULL;
  p->fields = NULL;
  p->noffs = p->cap = 0;
}

conch_h1p_result conch__h1p_feed(conch_h1p *p, const uint8_t *data, size_t n,
                                 size_t *used) {
  size_t done;
  enum http_errno e;

  *used = 0;
  if (p->ended) {
    /* The previous message ended: the parser is paused before this one. */
    p->ended = 0;
    http_parser_pause(&p->p, 0);
  }
  done = http_parser_execute(&p->p, &settings, (const char *)data, n);
  *used = done;
  e = HTTP_PARSER_ERRNO(&p->p);
  if (p->nomem) {
    return CONCH_H1P_NOMEM;
  }
  if (p->over || e == HPE_HEADER_OVERFLOW) {
    return CONCH_H1P_LIMIT;
  }
  if (p->stopped) {
    return CONCH_H1P_STOP;
  }
  if (p->ended) {
    return CONCH_H1P_DONE;
  }
  if (e == HPE_OK && done == n) {
    return CONCH_H1P_MORE;
  }
  return CONCH_H1P_BAD;
}

int conch__h1p_in_message(const conch_h1p *p) { return p->started; }

int conch__h1p_head_done(const conch_h1p *p) {
  return p->head_done && !p->skip_1xx;
}

const char *conch__h1p_error(const conch_h1p *p) {
  return http_errno_description(HTTP_PARSER_ERRNO(&p->p));
}
