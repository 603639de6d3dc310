/* The in-memory echo server: see memsrv.h. */
#include "memsrv.h"

#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

typedef struct bytes {
  uint8_t *p;
  size_t off, len, cap; /* unread data is p[off..len) */
} bytes;

typedef struct stream {
  int32_t id;
  int streaming;         /* application/connect+... */
  int req_ended;         /* END_STREAM from the client */
  int out_eof;           /* |out| holds the rest of the response */
  char ctype[64];        /* the request's Content-Type */
  char enc[32];          /* its (Connect-)Content-Encoding, or "" */
  bytes in;              /* unary: the body; streaming: a partial envelope */
  bytes out;             /* response body not sent yet */
  struct stream *next;
} stream;

struct memsrv {
  nghttp2_session *s;
  memx_conn *mc;
  stream *streams;
  int requests;
  int dead;
  size_t fed; /* bytes ever queued for the client */
  char last_enc[32]; /* the encoding of the last request that had one */
  char last_auth[64]; /* the authorization of the last request with one */
};

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) {
    abort();
  }
  return p;
}

static void bytes_add(bytes *b, const uint8_t *p, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    uint8_t *q;
    while (cap < b->len + n) {
      cap *= 2;
    }
    q = realloc(b->p, cap);
    if (q == NULL) {
      abort();
    }
    b->p = q;
    b->cap = cap;
  }
  if (n > 0) {
    memcpy(b->p + b->len, p, n);
    b->len += n;
  }
}

static stream *find(memsrv *m, int32_t id) {
  stream *st;
  for (st = m->streams; st != NULL; st = st->next) {
    if (st->id == id) {
      return st;
    }
  }
  return NULL;
}

static void copy_value(char *dst, size_t cap, const uint8_t *v, size_t n) {
  if (n >= cap) {
    n = cap - 1;
  }
  memcpy(dst, v, n);
  dst[n] = '\0';
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  stream *st = src->ptr;
  size_t n = st->out.len - st->out.off;
  (void)s;
  (void)id;
  (void)ud;
  if (n == 0) {
    if (st->out_eof) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n > len) {
    n = len;
  }
  memcpy(buf, st->out.p + st->out.off, n);
  st->out.off += n;
  if (st->out.off == st->out.len && st->out_eof) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return (ssize_t)n;
}

/* Sends the response head, with the body to come from |st->out|. */
static void respond(memsrv *m, stream *st) {
  nghttp2_nv nv[3];
  size_t n = 0;
  nghttp2_data_provider prd;
  const char *enc_name = st->streaming ? "connect-content-encoding"
                                        : "content-encoding";
#define NV(k, v)                                                              \
  nv[n].name = (uint8_t *)(k), nv[n].namelen = strlen(k),                     \
  nv[n].value = (uint8_t *)(v), nv[n].valuelen = strlen(v),                   \
  nv[n].flags = NGHTTP2_NV_FLAG_NONE, n++
  NV(":status", "200");
  NV("content-type", st->ctype);
  if (st->enc[0] != '\0') {
    NV(enc_name, st->enc);
  }
#undef NV
  prd.source.ptr = st;
  prd.read_callback = body_read;
  if (nghttp2_submit_response(m->s, st->id, nv, n, &prd) != 0) {
    abort();
  }
}

/* Moves the complete envelopes of a streaming request to its response. */
static void echo_envelopes(memsrv *m, stream *st) {
  while (st->in.len - st->in.off >= 5) {
    const uint8_t *h = st->in.p + st->in.off;
    size_t n = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 |
               h[4];
    if (st->in.len - st->in.off < 5 + n) {
      break;
    }
    bytes_add(&st->out, h, 5 + n);
    st->in.off += 5 + n;
  }
  nghttp2_session_resume_data(m->s, st->id);
}

static void request_ended(memsrv *m, stream *st) {
  static const uint8_t end[] = {2, 0, 0, 0, 2, '{', '}'};
  st->req_ended = 1;
  if (st->streaming) {
    bytes_add(&st->out, end, sizeof(end));
    st->out_eof = 1;
    nghttp2_session_resume_data(m->s, st->id);
  } else {
    bytes_add(&st->out, st->in.p, st->in.len);
    st->out_eof = 1;
    respond(m, st);
  }
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f,
                            void *ud) {
  memsrv *m = ud;
  stream *st;
  (void)s;
  if (f->hd.type != NGHTTP2_HEADERS ||
      f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  st = xmalloc(sizeof(*st));
  memset(st, 0, sizeof(*st));
  st->id = f->hd.stream_id;
  st->next = m->streams;
  m->streams = st;
  m->requests++;
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *ud) {
  stream *st = find(ud, f->hd.stream_id);
  (void)s;
  (void)flags;
  if (st == NULL) {
    return 0;
  }
  if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
    copy_value(st->ctype, sizeof(st->ctype), value, vlen);
    st->streaming = vlen > 20 && memcmp(value, "application/connect+", 20) == 0;
  } else if ((nlen == 16 && memcmp(name, "content-encoding", 16) == 0) ||
             (nlen == 24 && memcmp(name, "connect-content-encoding", 24) == 0)) {
    copy_value(st->enc, sizeof(st->enc), value, vlen);
    memcpy(((memsrv *)ud)->last_enc, st->enc, sizeof(st->enc));
  } else if (nlen == 13 && memcmp(name, "authorization", 13) == 0) {
    copy_value(((memsrv *)ud)->last_auth, sizeof(((memsrv *)ud)->last_auth),
               value, vlen);
  }
  return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f,
                         void *ud) {
  memsrv *m = ud;
  stream *st;
  (void)s;
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) {
    return 0;
  }
  st = find(m, f->hd.stream_id);
  if (st == NULL) {
    return 0;
  }
  if (f->hd.type == NGHTTP2_HEADERS && st->streaming) {
    respond(m, st); /* streaming answers as messages come */
  }
  if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 && !st->req_ended) {
    request_ended(m, st);
  }
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id,
                   const uint8_t *p, size_t n, void *ud) {
  memsrv *m = ud;
  stream *st = find(m, id);
  (void)s;
  (void)flags;
  if (st == NULL) {
    return 0;
  }
  bytes_add(&st->in, p, n);
  if (st->streaming) {
    echo_envelopes(m, st);
  }
  return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t err, void *ud) {
  memsrv *m = ud;
  stream **pp;
  (void)s;
  (void)err;
  for (pp = &m->streams; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->id == id) {
      stream *st = *pp;
      *pp = st->next;
      free(st->in.p);
      free(st->out.p);
      free(st);
      break;
    }
  }
  return 0;
}

memsrv *memsrv_new(memx_conn *mc) {
  memsrv *m = xmalloc(sizeof(*m));
  nghttp2_session_callbacks *cb;
  memset(m, 0, sizeof(*m));
  m->mc = mc;
  if (nghttp2_session_callbacks_new(&cb) != 0) {
    abort();
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb,
                                                          on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
  if (nghttp2_session_server_new(&m->s, cb, m) != 0 ||
      nghttp2_submit_settings(m->s, NGHTTP2_FLAG_NONE, NULL, 0) != 0) {
    abort();
  }
  nghttp2_session_callbacks_del(cb);
  return m;
}

void memsrv_free(memsrv *m) {
  if (m == NULL) {
    return;
  }
  nghttp2_session_del(m->s); /* runs no callbacks: free what is left */
  while (m->streams != NULL) {
    stream *st = m->streams;
    m->streams = st->next;
    free(st->in.p);
    free(st->out.p);
    free(st);
  }
  free(m);
}

int memsrv_io(memsrv *m) {
  const uint8_t *p;
  ssize_t n;
  if (m->dead) {
    return -1;
  }
  if (m->mc->out_len > 0) {
    n = nghttp2_session_mem_recv(m->s, m->mc->out, m->mc->out_len);
    memx_drain(m->mc);
    if (n < 0) {
      m->dead = 1;
      m->mc->eof = 1;
      return -1;
    }
  }
  while ((n = nghttp2_session_mem_send(m->s, &p)) > 0) {
    memx_feed(m->mc, p, (size_t)n);
    m->fed += (size_t)n;
  }
  if (n < 0) {
    m->dead = 1;
    m->mc->eof = 1;
    return -1;
  }
  if (!m->mc->open) { /* the client hung up */
    m->dead = 1;
  }
  return 0;
}

int memsrv_requests(const memsrv *m) { return m->requests; }

const char *memsrv_last_encoding(const memsrv *m) { return m->last_enc; }

const char *memsrv_last_authorization(const memsrv *m) {
  return m->last_auth;
}

void memsrv_exchange(memsrv *m, memx *x, int rounds) {
  int i;
  for (i = 0; i < rounds; i++) {
    size_t before = m->mc->out_total + m->fed;
    memsrv_io(m);
    memx_pump(x, 16);
    if (m->mc->out_total + m->fed == before) {
      break; /* nobody said anything */
    }
  }
}
