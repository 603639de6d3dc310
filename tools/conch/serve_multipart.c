/* The multipart/form-data reader of /files (serve_multipart.h). */
#include "serve_multipart.h"

#include <string.h>
#include <strings.h>

#define SRV_MP_PARTS_MAX 100000

enum {
  ST_PRE = 0, /* the preamble: looking for the first delimiter */
  ST_AFTER,   /* a delimiter was read: "--", or padding then CRLF */
  ST_DASH,    /* ... one '-' of the close delimiter */
  ST_CR,      /* ... CR, LF must follow */
  ST_HEAD,    /* the part's header lines */
  ST_BODY,    /* its data */
  ST_END,     /* after the close delimiter: the epilogue, ignored */
  ST_BAD
};

static int bad(srv_mp *m, const char *why) {
  m->err = why;
  m->state = ST_BAD;
  return SRV_MP_BAD;
}

static int is_space(int c) { return c == ' ' || c == '\t'; }

int srv_mp_param(const char *v, const char *key, char *out, size_t cap) {
  size_t klen = strlen(key);
  const char *p = strchr(v, ';');

  while (p != NULL && *p == ';') {
    const char *k, *ke;
    size_t n = 0;
    int quoted;

    p++;
    while (is_space(*p)) {
      p++;
    }
    k = p;
    while (*p != '\0' && *p != '=' && *p != ';') {
      p++;
    }
    ke = p;
    while (ke > k && is_space(ke[-1])) {
      ke--;
    }
    if (*p != '=') {
      continue; /* a parameter without value */
    }
    p++;
    while (is_space(*p)) {
      p++;
    }
    quoted = *p == '"';
    int want = (size_t)(ke - k) == klen && strncasecmp(k, key, klen) == 0;
    if (quoted) {
      p++;
      while (*p != '\0' && *p != '"') {
        char c = *p++;
        if (c == '\\') {
          if (*p == '\0') {
            return -1;
          }
          c = *p++;
        }
        if (want) {
          if (n + 1 >= cap) {
            return -1;
          }
          out[n++] = c;
        }
      }
      if (*p != '"') {
        return -1; /* unterminated */
      }
      p++;
      while (is_space(*p)) {
        p++;
      }
    } else {
      const char *s = p;
      while (*p != '\0' && *p != ';') {
        p++;
      }
      const char *e = p;
      while (e > s && is_space(e[-1])) {
        e--;
      }
      if (want) {
        if ((size_t)(e - s) + 1 > cap) {
          return -1;
        }
        memcpy(out, s, (size_t)(e - s));
        n = (size_t)(e - s);
      }
    }
    if (want) {
      out[n] = '\0';
      return 1;
    }
    if (*p != '\0' && *p != ';') {
      return -1; /* junk after a quoted value */
    }
  }
  return 0;
}

int srv_mp_init(srv_mp *m, const char *ct) {
  char b[SRV_MP_BOUNDARY_MAX + 1];
  size_t n;

  memset(m, 0, sizeof(*m));
  if (ct == NULL || strncasecmp(ct, "multipart/", 10) != 0) {
    m->err = "not a multipart content type";
    return -1;
  }
  if (srv_mp_param(ct, "boundary", b, sizeof(b)) != 1) {
    m->err = "no multipart boundary";
    return -1;
  }
  n = strlen(b);
  if (n == 0 || strpbrk(b, "\r\n") != NULL) {
    m->err = "bad multipart boundary";
    return -1;
  }
  memcpy(m->delim, "\r\n--", 4);
  memcpy(m->delim + 4, b, n);
  m->dlen = 4 + n;
  m->state = ST_PRE;
  m->match = 2; /* the body may begin with the delimiter, without CRLF */
  return 0;
}

/* One header line (CRLF removed) of the current part. */
static int head_line(srv_mp *m) {
  const char *colon;
  const char *v;
  int rv;

  m->line[m->llen] = '\0';
  colon = memchr(m->line, ':', m->llen);
  if (colon == NULL || colon == m->line) {
    return bad(m, "malformed part header");
  }
  if ((size_t)(colon - m->line) != 19 ||
      strncasecmp(m->line, "content-disposition", 19) != 0) {
    return SRV_MP_OK;
  }
  v = colon + 1;
  while (is_space(*v)) {
    v++;
  }
  rv = srv_mp_param(v, "name", m->name, sizeof(m->name));
  if (rv < 0) {
    return bad(m, "malformed Content-Disposition");
  }
  rv = srv_mp_param(v, "filename", m->filename, sizeof(m->filename));
  if (rv < 0) {
    return bad(m, "malformed Content-Disposition");
  }
  m->has_filename = rv == 1;
  return SRV_MP_OK;
}

/* Data (or delimiter) bytes from |p|: in the body they go to on_data, in
   the preamble nowhere.  Returns how many were taken, and sets |*rv|. */
static size_t scan(srv_mp *m, const uint8_t *p, size_t n, const srv_mp_cb *cb,
                   void *ud, int *rv) {
  int body = m->state == ST_BODY;
  size_t i = 0;

  *rv = SRV_MP_OK;
  while (i < n) {
    if (m->match == 0) {
      /* Data runs to the next CR that begins the delimiter (or as much
         of it as this input holds); a CR that does not is data too, so
         that a body of random bytes (a CR every 256 bytes) goes out in
         one piece per input, not one write per CR. */
      size_t end = i;
      for (;;) {
        const uint8_t *cr = memchr(p + end, '\r', n - end);
        size_t left;
        if (cr == NULL) {
          end = n;
          break;
        }
        end = (size_t)(cr - p);
        left = n - end < m->dlen ? n - end : m->dlen;
        if (memcmp(cr, m->delim, left) == 0) {
          break;
        }
        end++;
      }
      if (end > i && body && cb->on_data(ud, p + i, end - i) != 0) {
        *rv = SRV_MP_STOP;
        return end;
      }
      i = end;
      if (i < n) {
        m->match = 1;
        i++;
      }
      continue;
    }
    if (p[i] == (uint8_t)m->delim[m->match]) {
      i++;
      if (++m->match == m->dlen) {
        m->match = 0;
        if (m->in_part) {
          m->in_part = 0;
          if (cb->on_part_end(ud) != 0) {
            *rv = SRV_MP_STOP;
          }
        }
        m->state = ST_AFTER;
        return i;
      }
      continue;
    }
    /* Not the delimiter after all: what matched was data.  It holds no CR
       past its first byte, so a delimiter can only begin at p[i]. */
    if (body && cb->on_data(ud, (const uint8_t *)m->delim, m->match) != 0) {
      m->match = 0;
      *rv = SRV_MP_STOP;
      return i;
    }
    m->match = 0;
  }
  return i;
}

int srv_mp_feed(srv_mp *m, const uint8_t *p, size_t n, const srv_mp_cb *cb,
                void *ud) {
  size_t i = 0;

  while (i < n) {
    uint8_t c;
    int rv;

    switch (m->state) {
    case ST_PRE:
    case ST_BODY:
      i += scan(m, p + i, n - i, cb, ud, &rv);
      if (rv != SRV_MP_OK) {
        m->state = ST_BAD;
        m->err = "stopped";
        return rv;
      }
      break;
    case ST_AFTER:
      c = p[i++];
      if (c == '-') {
        m->state = ST_DASH;
      } else if (c == '\r') {
        m->state = ST_CR;
      } else if (!is_space(c)) {
        return bad(m, "malformed multipart delimiter");
      }
      break;
    case ST_DASH:
      if (p[i++] != '-') {
        return bad(m, "malformed multipart delimiter");
      }
      m->state = ST_END;
      break;
    case ST_CR:
      if (p[i++] != '\n') {
        return bad(m, "malformed multipart delimiter");
      }
      if (++m->parts > SRV_MP_PARTS_MAX) {
        return bad(m, "too many parts");
      }
      m->state = ST_HEAD;
      m->llen = 0;
      m->head = 0;
      m->name[0] = m->filename[0] = '\0';
      m->has_filename = 0;
      break;
    case ST_HEAD:
      c = p[i++];
      if (++m->head > SRV_MP_HEAD_MAX) {
        return bad(m, "part headers too large");
      }
      if (c == '\n' && m->llen > 0 && m->line[m->llen - 1] == '\r') {
        m->llen--;
        if (m->llen == 0) {
          m->state = ST_BODY;
          m->match = 0;
          m->in_part = 1;
          if (cb->on_part(ud, m->name, m->filename, m->has_filename) != 0) {
            m->state = ST_BAD;
            m->err = "stopped";
            return SRV_MP_STOP;
          }
          break;
        }
        if (head_line(m) != SRV_MP_OK) {
          return SRV_MP_BAD;
        }
        m->llen = 0;
        break;
      }
      if (m->llen + 1 >= sizeof(m->line)) {
        return bad(m, "part header line too long");
      }
      m->line[m->llen++] = (char)c;
      break;
    case ST_END:
      return SRV_MP_OK; /* the epilogue */
    default:
      return SRV_MP_BAD;
    }
  }
  return SRV_MP_OK;
}

int srv_mp_finish(srv_mp *m) {
  if (m->state == ST_END) {
    return 0;
  }
  if (m->state != ST_BAD) {
    m->err = "unexpected end of the multipart body";
  }
  return -1;
}
