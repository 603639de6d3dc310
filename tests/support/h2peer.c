/* The scripted HTTP/2 server: see h2peer.h. */
#include "h2peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static h2peer_stream *track(h2peer *h, int32_t id) {
  h2peer_stream *st = h2peer_find(h, id);
  if (st == NULL && h->nstreams < H2PEER_MAX_STREAMS) {
    st = &h->streams[h->nstreams++];
    memset(st, 0, sizeof(*st));
    st->id = id;
  }
  return st;
}

h2peer_stream *h2peer_find(h2peer *h, int32_t id) {
  int i;
  for (i = 0; i < h->nstreams; i++) {
    if (h->streams[i].id == id) {
      return &h->streams[i];
    }
  }
  return NULL;
}

static int on_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
  h2peer *h = ud;
  h2peer_stream *st;
  (void)s;
  switch (f->hd.type) {
  case NGHTTP2_SETTINGS:
    if (f->hd.flags & NGHTTP2_FLAG_ACK) {
      h->settings_acked = 1;
    } else {
      h->settings++;
    }
    break;
  case NGHTTP2_PING:
    if (!(f->hd.flags & NGHTTP2_FLAG_ACK)) {
      h->pings++;
    }
    break;
  case NGHTTP2_GOAWAY:
    h->goaways++;
    break;
  case NGHTTP2_WINDOW_UPDATE:
    if (f->hd.stream_id == 0) {
      h->conn_credit += (uint32_t)f->window_update.window_size_increment;
    } else if ((st = h2peer_find(h, f->hd.stream_id)) != NULL) {
      st->credit += (uint32_t)f->window_update.window_size_increment;
    }
    break;
  case NGHTTP2_RST_STREAM:
    if ((st = h2peer_find(h, f->hd.stream_id)) != NULL) {
      st->reset = 1;
      st->rst = f->rst_stream.error_code;
    }
    break;
  case NGHTTP2_HEADERS:
    if (f->headers.cat == NGHTTP2_HCAT_REQUEST) {
      track(h, f->hd.stream_id);
    }
    break;
  default:
    break;
  }
  if (f->hd.type == NGHTTP2_DATA &&
      (st = h2peer_find(h, f->hd.stream_id)) != NULL) {
    st->data_frames++;
  }
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 &&
      (st = h2peer_find(h, f->hd.stream_id)) != NULL) {
    st->ended = 1;
  }
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
                     const uint8_t *name, size_t nlen, const uint8_t *value,
                     size_t vlen, uint8_t flags, void *ud) {
  h2peer_stream *st;
  (void)s;
  (void)flags;
  if (f->hd.type == NGHTTP2_HEADERS && nlen == 5 &&
      memcmp(name, ":path", 5) == 0 &&
      (st = track(ud, f->hd.stream_id)) != NULL) {
    snprintf(st->path, sizeof(st->path), "%.*s", (int)vlen,
             (const char *)value);
  }
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *ud) {
  h2peer_stream *st = h2peer_find(ud, id);
  (void)s;
  (void)flags;
  (void)data;
  if (st != NULL) {
    st->data_in += len;
  }
  return 0;
}

static ssize_t frame_len(nghttp2_session *s, uint8_t type, int32_t id,
                         int32_t stream_window, int32_t conn_window,
                         uint32_t max_frame, void *ud) {
  h2peer *h = ud;
  uint32_t n = h->max_frame != 0 ? h->max_frame : 16384;
  (void)s;
  (void)type;
  (void)id;
  (void)stream_window;
  (void)conn_window;
  /* nghttp2 keeps the result within the windows. */
  return (ssize_t)(n < max_frame ? n : max_frame);
}

void h2peer_new2(h2peer *h, memx_conn *mc, const nghttp2_settings_entry *iv,
                 size_t niv, int flags) {
  nghttp2_session_callbacks *cb;
  nghttp2_option *opt;

  memset(h, 0, sizeof(*h));
  h->mc = mc;
  if (nghttp2_session_callbacks_new(&cb) != 0 ||
      nghttp2_option_new(&opt) != 0) {
    abort();
  }
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_data_source_read_length_callback(cb,
                                                                 frame_len);
  nghttp2_option_set_no_auto_ping_ack(opt, (flags & H2PEER_NO_PING_ACK) != 0);
  nghttp2_option_set_no_auto_window_update(
      opt, (flags & H2PEER_NO_WINDOW_UPDATE) != 0);
  if (nghttp2_session_server_new2(&h->s, cb, h, opt) != 0 ||
      nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, niv) != 0) {
    abort();
  }
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
}

void h2peer_new(h2peer *h, memx_conn *mc, uint32_t max_streams, int flags) {
  nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                               max_streams};
  h2peer_new2(h, mc, &iv, 1, flags);
}

void h2peer_free(h2peer *h) { nghttp2_session_del(h->s); }

void h2peer_read(h2peer *h) {
  ssize_t n;
  if (h->dead || h->mc->out_len == 0) {
    return;
  }
  n = nghttp2_session_mem_recv(h->s, h->mc->out, h->mc->out_len);
  if (n != (ssize_t)h->mc->out_len) {
    if (!h->lenient) {
      fprintf(stderr, "h2peer: the client's bytes are not HTTP/2: %s\n",
              nghttp2_strerror((int)n));
      abort();
    }
    h->dead = 1;
    h->mc->eof = 1;
    return;
  }
  memx_drain(h->mc);
}

void h2peer_io(h2peer *h) {
  const uint8_t *p;
  ssize_t n;
  h2peer_read(h);
  if (h->dead) {
    return;
  }
  while ((n = nghttp2_session_mem_send(h->s, &p)) > 0) {
    memx_feed(h->mc, p, (size_t)n);
  }
  if (n < 0) {
    abort();
  }
}

void h2peer_exchange(memx *m, h2peer *h) {
  int i;
  for (i = 0; i < 16; i++) {
    h2peer_io(h);
    memx_pump(m, 16);
  }
}

const char *const h2peer_keep_open[] = {NULL};

static void submit_trailers(nghttp2_session *s, int32_t id,
                            const char *const *t) {
  nghttp2_nv tv[8];
  size_t k;
  for (k = 0; k < 8 && t[2 * k] != NULL; k++) {
    tv[k].name = (uint8_t *)t[2 * k];
    tv[k].namelen = strlen(t[2 * k]);
    tv[k].value = (uint8_t *)t[2 * k + 1];
    tv[k].valuelen = strlen(t[2 * k + 1]);
    tv[k].flags = 0;
  }
  if (nghttp2_submit_trailer(s, id, tv, k) != 0) {
    abort();
  }
}

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *ud) {
  h2peer_stream *st = src->ptr;
  size_t n = st->body_len - st->body_off;
  (void)ud;
  if (n == 0 && st->trailers == h2peer_keep_open) {
    return NGHTTP2_ERR_DEFERRED; /* the stream stays open */
  }
  if (n > len) {
    n = len;
  }
  memcpy(buf, st->body + st->body_off, n);
  st->body_off += n;
  if (st->body_off == st->body_len && st->trailers != h2peer_keep_open) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (st->trailers != NULL) {
      /* As nghttp2 wants it: from here, with the DATA not ending. */
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      submit_trailers(s, id, st->trailers);
    }
  }
  return (ssize_t)n;
}

void h2peer_reply(h2peer *h, int32_t id, const char *ctype, const void *body,
                  size_t n, const char *const *trailers) {
  h2peer_stream *st = h2peer_find(h, id);
  nghttp2_nv nv[2] = {
      {(uint8_t *)":status", (uint8_t *)"200", 7, 3, 0},
      {(uint8_t *)"content-type", (uint8_t *)ctype, 12, strlen(ctype), 0},
  };
  nghttp2_data_provider prd;

  if (st == NULL) {
    abort();
  }
  st->body = body;
  st->body_len = n;
  st->body_off = 0;
  st->trailers = trailers;
  prd.source.ptr = st;
  prd.read_callback = body_read;
  if (nghttp2_submit_response(h->s, id, nv, 2, &prd) != 0) {
    abort();
  }
}

void h2peer_consume(h2peer *h, int32_t id, size_t n) {
  if (nghttp2_session_consume(h->s, id, n) != 0) {
    abort();
  }
}
