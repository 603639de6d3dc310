/* One client connection: a non-blocking socket, TLS (OpenSSL on the fd) or
   cleartext, and an nghttp2 server session driven by mem_recv/mem_send.
   The protocol is HTTP/2 when TLS chose ALPN h2 or the first bytes are the
   HTTP/2 preface (prior knowledge), HTTP/1.1 otherwise: then serve_h1.c
   stands between the socket and the session.  Output is produced once per
   loop turn for every connection that has something to say
   (srv_conn_flush_all), and only while the socket takes it: a client that
   does not read stops getting DATA, which is what back-pressures the
   processes. */
#include "serve.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>

#define CONN_READ_CHUNK 16384
#define CONN_READ_BUDGET (1024 * 1024)
#define CONN_CLOSE_MS 1000 /* after an idle GOAWAY, before the close */
#define CONN_STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (16 << 20)

enum { IO_AGAIN = SRV_IO_AGAIN, IO_ERROR = SRV_IO_ERROR };

static void conn_idle(srv_timer *t);
static void conn_on_io(srv_watch *w, uint32_t events);

/* ---- nghttp2 callbacks -------------------------------------------------- */

static srv_stream *stream_of(nghttp2_session *s, int32_t id) {
  return nghttp2_session_get_stream_user_data(s, id);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f,
                            void *user_data) {
  srv_conn *c = user_data;
  srv_stream *st;

  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  st = srv_rpc_stream_new(c, f->hd.stream_id);
  if (st == NULL) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st);
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user_data) {
  srv_stream *st = stream_of(s, f->hd.stream_id);

  (void)flags;
  (void)user_data;
  /* Request trailers carry nothing the Connect protocol uses. */
  if (st == NULL || f->hd.type != NGHTTP2_HEADERS ||
      f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  return srv_rpc_header(st, name, namelen, value, valuelen);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f,
                         void *user_data) {
  srv_stream *st;

  (void)user_data;
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) {
    return 0;
  }
  st = stream_of(s, f->hd.stream_id);
  if (st == NULL) {
    return 0;
  }
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
    srv_rpc_headers_done(st);
  }
  if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    srv_rpc_request_end(st);
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user_data) {
  srv_stream *st = stream_of(s, id);

  (void)flags;
  (void)user_data;
  if (st == NULL) {
    nghttp2_session_consume(s, id, len);
    return 0;
  }
  srv_rpc_data(st, data, len);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code,
                           void *user_data) {
  srv_stream *st = stream_of(s, id);

  (void)code;
  (void)user_data;
  if (st != NULL) {
    nghttp2_session_set_stream_user_data(s, id, NULL);
    srv_rpc_stream_free(st);
  }
  return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f,
                         void *user_data) {
  srv_stream *st;

  (void)user_data;
  if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
    return 0;
  }
  st = stream_of(s, f->hd.stream_id);
  if (st == NULL) {
    return 0;
  }
  st->sent_end = 1;
  /* We answered before the request ended (an error): ask the client to
     stop sending rather than reading what nobody wants. */
  if (!st->req_done) {
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                              NGHTTP2_NO_ERROR);
  }
  return 0;
}

static int session_new(srv_conn *c) {
  conch_h2_setup s;

  memset(&s, 0, sizeof(s));
  s.server = 1;
  s.begin_headers = on_begin_headers;
  s.header = on_header;
  s.frame_recv = on_frame_recv;
  s.data_chunk = on_data_chunk;
  s.stream_close = on_stream_close;
  s.frame_send = on_frame_send;
  /* Window credit goes back only as requests are used (StreamInput into a
     process that does not read its stdin stalls its client). */
  s.manual_window = 1;
  s.max_streams = c->srv->cfg.max_streams;
  s.stream_window = CONN_STREAM_WINDOW;
  s.max_header_list = SRV_HDR_MAX;
  s.conn_window = CONN_WINDOW;
  return conch__h2_session_new(&c->h2, &s, c) != 0 ? -1 : 0;
}

/* ---- Lifecycle ----------------------------------------------------------- */

int srv_conn_accept(srv_server *srv, int fd) {
  srv_conn *c = calloc(1, sizeof(*c));
  int rv;

  if (c == NULL) {
    close(fd);
    return -1;
  }
  c->srv = srv;
  conch__list_init(&c->streams);
  srv_watch_init(&c->w, fd, conn_on_io);
  srv_timer_init(&c->idle_t, conn_idle);
  conch__list_push(&srv->conns, &c->link);
  srv->nconns++;
  rv = session_new(c);
  if (rv != 0) {
    goto fail;
  }
  if (srv->tls != NULL) {
    c->ssl = SSL_new(srv->tls);
    if (c->ssl == NULL || SSL_set_fd(c->ssl, fd) != 1) {
      goto fail;
    }
    SSL_set_accept_state(c->ssl);
    c->handshaking = 1;
  }
  /* The handshake, the preface and the first request have header_ms. */
  if (srv_watch_set(&srv->loop, &c->w, EPOLLIN) != 0 ||
      srv_timer_arm(&srv->loop, &c->idle_t,
                    srv_now_ms() + srv->cfg.header_ms) != 0) {
    goto fail;
  }
  srv_conn_kick(c);
  return 0;

fail:
  ERR_clear_error();
  srv_conn_close(c);
  return -1;
}

void srv_conn_close(srv_conn *c) {
  srv_server *srv = c->srv;

  if (c->dead) {
    return;
  }
  c->dead = 1;
  srv_watch_set(&srv->loop, &c->w, 0);
  srv_timer_cancel(&srv->loop, &c->idle_t);
  conch__list_remove(&c->flush_link);
  /* The streams go now, so that no process writes to them any more; the
     session itself is freed after this loop turn. */
  while (!conch__list_empty(&c->streams)) {
    srv_stream *st = CONCH_CONTAINER(c->streams.next, srv_stream, link);

    if (c->h2 != NULL) {
      nghttp2_session_set_stream_user_data(c->h2, st->id, NULL);
    }
    srv_rpc_stream_free(st);
  }
  conch__list_remove(&c->link);
  srv->nconns--;
  conch__list_push(&srv->dead_conns, &c->link);
}

void srv_conn_free(srv_conn *c) {
  conch__list_remove(&c->link);
  srv_h1_free(c);
  nghttp2_session_del(c->h2);
  if (c->ssl != NULL) {
    SSL_free(c->ssl);
  }
  if (c->w.fd >= 0) {
    close(c->w.fd);
  }
  free(c->wbuf);
  free(c);
}

/* The idle timer.  Over HTTP/2 it runs while the connection has no
   stream: header_ms from the accept (TLS handshake, preface, first
   request), then srv_conn_idle_ms() from the end of each last stream.  A
   stream whose headers or body are late has its own timer (serve_rpc.c),
   and a stream that is only answered (a long process with no output) is
   never cut.  Over HTTP/1.1, serve_h1.c arms it likewise. */
static void conn_idle(srv_timer *t) {
  srv_conn *c = CONCH_CONTAINER(t, srv_conn, idle_t);

  /* An HTTP/2 client is told first (GOAWAY: no request of its was lost),
     and cut off if it does not go. */
  if (c->h1 == NULL && c->sniffed == 1 && !c->handshaking && !c->idle_closing &&
      conch__list_empty(&c->streams)) {
    c->idle_closing = 1;
    if (nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR) == 0 &&
        srv_timer_arm(&c->srv->loop, &c->idle_t,
                      srv_now_ms() + CONN_CLOSE_MS) == 0) {
      srv_conn_kick(c);
      return;
    }
  }
  srv_conn_close(c);
}

int64_t srv_conn_idle_ms(const srv_conn *c) {
  const srv_config *cfg = &c->srv->cfg;

  /* Until a request shows the token, a connection is a stranger's: it
     may not hold a slot any longer than it takes to send the headers. */
  if (!c->authed && cfg->header_ms < cfg->idle_ms) {
    return cfg->header_ms;
  }
  return cfg->idle_ms;
}

void srv_conn_streams_changed(srv_conn *c) {
  srv_loop *l = &c->srv->loop;

  if (c->dead || c->h1 != NULL || c->idle_closing) {
    return;
  }
  if (!conch__list_empty(&c->streams)) {
    srv_timer_cancel(l, &c->idle_t);
    return;
  }
  if (c->rd_eof) {
    srv_conn_kick(c); /* conn_flush() closes it once the output is out */
    return;
  }
  if (srv_timer_arm(l, &c->idle_t, srv_now_ms() + srv_conn_idle_ms(c)) != 0) {
    srv_conn_kick(c);
  }
}

void srv_conn_shed(srv_server *srv, int listen_fd) {
  int i;

  if (srv->spare_fd < 0) {
    return;
  }
  close(srv->spare_fd);
  for (i = 0; i < 64; i++) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0) {
      break;
    }
    close(fd);
  }
  srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

int srv_conn_evict(srv_server *srv) {
  conch_link *l;

  for (l = srv->conns.next; l != &srv->conns; l = l->next) {
    srv_conn *c = CONCH_CONTAINER(l, srv_conn, link);

    if (!c->authed && conch__list_empty(&c->streams)) {
      srv_conn_close(c);
      return 0;
    }
  }
  return -1;
}

void srv_conn_kick(srv_conn *c) {
  if (!c->dead && !conch__linked(&c->flush_link)) {
    conch__list_push(&c->srv->flush, &c->flush_link);
  }
}

void srv_conn_goaway(srv_conn *c) {
  if (c->dead || c->h2 == NULL) {
    return;
  }
  if (c->h1 != NULL) {
    srv_h1_goaway(c);
    return;
  }
  nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(c->h2),
                        NGHTTP2_NO_ERROR, NULL, 0);
  srv_conn_kick(c);
}

void srv_conn_consume(srv_conn *c, int32_t id, size_t n) {
  if (!c->dead && n > 0) {
    nghttp2_session_consume(c->h2, id, n);
    srv_conn_kick(c);
  }
}

/* ---- Socket and TLS I/O -------------------------------------------------- */

static int tls_error(srv_conn *c, int r) {
  int e = SSL_get_error(c->ssl, r);

  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    return IO_AGAIN;
  }
  ERR_clear_error();
  return IO_ERROR;
}

/* Returns 1 when the handshake is done, 0 when it waits, -1 on failure. */
static int tls_handshake(srv_conn *c) {
  int r = SSL_do_handshake(c->ssl);
  const unsigned char *alpn = NULL;
  unsigned int alpnlen = 0;

  if (r == 1) {
    c->handshaking = 0;
    /* ALPN decides; a client without ALPN is sniffed like cleartext. */
    SSL_get0_alpn_selected(c->ssl, &alpn, &alpnlen);
    if (alpnlen == 2 && memcmp(alpn, "h2", 2) == 0) {
      c->sniffed = 1;
    } else if (alpnlen == 8 && memcmp(alpn, "http/1.1", 8) == 0) {
      c->sniffed = 2;
      if (srv_h1_start(c) != 0) {
        return -1;
      }
    }
    return 1;
  }
  return tls_error(c, r) == IO_AGAIN ? 0 : -1;
}

/* Bytes read, 0 at EOF, IO_AGAIN or IO_ERROR. */
static ssize_t conn_recv(srv_conn *c, uint8_t *buf, size_t len) {
  ssize_t n;

  if (c->ssl == NULL) {
    n = read(c->w.fd, buf, len);
    if (n >= 0) {
      return n;
    }
    return errno == EAGAIN || errno == EINTR ? IO_AGAIN : IO_ERROR;
  }
  n = SSL_read(c->ssl, buf, (int)len);
  if (n > 0) {
    return n;
  }
  if (SSL_get_error(c->ssl, (int)n) == SSL_ERROR_ZERO_RETURN) {
    return 0;
  }
  return tls_error(c, (int)n);
}

ssize_t srv_conn_send(srv_conn *c, const uint8_t *p, size_t len) {
  ssize_t n;

  if (c->ssl == NULL) {
    n = send(c->w.fd, p, len, MSG_NOSIGNAL);
    if (n >= 0) {
      return n;
    }
    return errno == EAGAIN || errno == EINTR ? IO_AGAIN : IO_ERROR;
  }
  n = SSL_write(c->ssl, p, (int)(len > INT32_MAX ? INT32_MAX : len));
  return n > 0 ? n : tls_error(c, (int)n);
}

/* ---- Reading ------------------------------------------------------------- */

static void conn_deliver(srv_conn *c, const uint8_t *p, size_t n) {
  ssize_t rv;

  if (n == 0 || c->dead) {
    return;
  }
  if (c->h1 != NULL) {
    if (srv_h1_feed(c, p, n) != 0) {
      srv_conn_close(c);
    }
    return;
  }
  rv = nghttp2_session_mem_recv(c->h2, p, n);
  if (rv < 0) {
    srv_conn_close(c);
    return;
  }
  srv_conn_kick(c);
}

static void conn_feed(srv_conn *c, const uint8_t *p, size_t n) {
  static const uint8_t magic[4] = {'P', 'R', 'I', ' '};

  if (!c->sniffed) {
    size_t k = n < 4 - c->nsniff ? n : 4 - c->nsniff;
    int h2;

    memcpy(c->sniff + c->nsniff, p, k);
    c->nsniff += k;
    p += k;
    n -= k;
    h2 = memcmp(c->sniff, magic, c->nsniff) == 0;
    if (h2 && c->nsniff < 4) {
      return; /* "PR": could still be either */
    }
    /* Anything but the HTTP/2 preface is HTTP/1.1 (curl without
       --http2-prior-knowledge, undici, a browser). */
    c->sniffed = h2 ? 1 : 2;
    if (!h2 && srv_h1_start(c) != 0) {
      srv_conn_close(c);
      return;
    }
    conn_deliver(c, c->sniff, c->nsniff);
  }
  conn_deliver(c, p, n);
}

/* The client shut its write side (shutdown(SHUT_WR), or TLS close_notify):
   what it asked is still answered, as HTTP/1.1 and HTTP/2 both allow; the
   connection closes once that is done. */
static void conn_eof(srv_conn *c) {
  conch_link *l;

  if (c->rd_eof || c->handshaking || !c->sniffed) {
    srv_conn_close(c);
    return;
  }
  c->rd_eof = 1;
  srv_timer_cancel(&c->srv->loop, &c->idle_t);
  if (c->h1 != NULL) {
    srv_h1_eof(c);
    srv_conn_kick(c);
    return;
  }
  /* A request still being received can never end: reset it. */
  for (l = c->streams.next; l != &c->streams; l = l->next) {
    srv_stream *st = CONCH_CONTAINER(l, srv_stream, link);

    if (!st->req_done) {
      nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, st->id,
                                NGHTTP2_CANCEL);
    }
  }
  srv_conn_kick(c);
}

static void conn_read(srv_conn *c, uint32_t events) {
  uint8_t buf[CONN_READ_CHUNK];
  size_t total = 0;

  if (c->rd_eof && c->h1 == NULL) {
    /* Nothing more to read; a hang-up means the peer is gone for good. */
    if ((events & (EPOLLHUP | EPOLLERR)) != 0) {
      srv_conn_close(c);
    }
    return;
  }
  while (!c->dead) {
    size_t want = sizeof(buf);
    ssize_t n;

    if (c->handshaking) {
      int r = tls_handshake(c);

      if (r < 0) {
        srv_conn_close(c);
      }
      if (r <= 0) {
        return;
      }
    }
    /* HTTP/1.1 reads only as far ahead as it may (what TLS decrypted
       already is taken, though: epoll would not tell of it). */
    if (c->h1 != NULL) {
      size_t room = srv_h1_room(c);

      if (room == 0 && c->ssl != NULL && SSL_pending(c->ssl) > 0) {
        room = (size_t)SSL_pending(c->ssl);
      }
      if (room == 0) {
        /* Not watching EPOLLIN, but a hang-up is reported anyway: the
           peer is gone for good. */
        if ((events & (EPOLLHUP | EPOLLERR)) != 0) {
          srv_conn_close(c);
        }
        return;
      }
      want = room < want ? room : want;
    }
    n = conn_recv(c, buf, want);
    if (n == IO_AGAIN) {
      return;
    }
    if (n == 0) {
      conn_eof(c);
      return;
    }
    if (n < 0) {
      srv_conn_close(c);
      return;
    }
    conn_feed(c, buf, (size_t)n);
    total += (size_t)n;
    /* Cleartext: let the others have a turn (epoll reports the rest).
       TLS may hold decrypted bytes epoll cannot see, so read it dry. */
    if (c->ssl == NULL && total >= CONN_READ_BUDGET) {
      return;
    }
  }
}

/* ---- Writing ------------------------------------------------------------- */

/* Writes the pending bytes.  Returns 1 when all went, 0 when the socket is
   full, -1 on error. */
static int write_pending(srv_conn *c) {
  while (c->woff < c->wlen) {
    ssize_t n = srv_conn_send(c, c->wbuf + c->woff, c->wlen - c->woff);

    if (n == IO_AGAIN) {
      return 0;
    }
    if (n < 0) {
      return -1;
    }
    c->woff += (size_t)n;
  }
  c->woff = c->wlen = 0;
  return 1;
}

static int keep_pending(srv_conn *c, const uint8_t *p, size_t n) {
  uint8_t *b = realloc(c->wbuf, n);

  if (b == NULL) {
    return -1;
  }
  memcpy(b, p, n);
  c->wbuf = b;
  c->wlen = n;
  c->woff = 0;
  return 0;
}

/* Moves what nghttp2 has to send onto the socket, as long as it takes it.
   Returns 0, or -1 when the connection must close. */
static int conn_produce(srv_conn *c) {
  int rv;

  if (c->handshaking) {
    int r = tls_handshake(c);

    if (r <= 0) {
      return r;
    }
  }
  if (c->h1 != NULL) {
    return srv_h1_produce(c);
  }
  rv = write_pending(c);
  if (rv <= 0) {
    return rv;
  }
  /* Our SETTINGS wait for the client's first bytes: an HTTP/1 client must
     not get HTTP/2 frames for an answer. */
  if (!c->sniffed) {
    return 0;
  }
  for (;;) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(c->h2, &data);
    ssize_t w;

    if (n < 0) {
      return -1;
    }
    if (n == 0) {
      break;
    }
    w = srv_conn_send(c, data, (size_t)n);
    if (w == IO_AGAIN) {
      w = 0;
    }
    if (w < 0) {
      return -1;
    }
    if (w < n) {
      return keep_pending(c, data + w, (size_t)(n - w));
    }
  }
  if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2)) {
    return -1; /* GOAWAY exchanged, or a fatal session error */
  }
  return 0;
}

static void conn_update_watch(srv_conn *c) {
  uint32_t ev = c->h1 != NULL ? srv_h1_events(c) : c->rd_eof ? 0 : EPOLLIN;

  /* Half-closed: not reading, but a hang-up should still end it (epoll
     reports EPOLLHUP whether asked or not, but only for an fd in the
     set). */
  if (ev == 0 && c->rd_eof) {
    ev = EPOLLHUP;
  }

  if (c->wlen > c->woff) {
    ev |= EPOLLOUT;
  }
  if (c->ssl != NULL && SSL_want_write(c->ssl)) {
    ev |= EPOLLOUT;
  }
  if (srv_watch_set(&c->srv->loop, &c->w, ev) != 0) {
    srv_conn_close(c);
  }
}

static void conn_flush(srv_conn *c) {
  int rv = conn_produce(c);

  if (rv != 0) {
    srv_conn_close(c);
    return;
  }
  /* Half-closed HTTP/2: every answer is out. */
  if (c->rd_eof && c->h1 == NULL && conch__list_empty(&c->streams) &&
      c->wlen == c->woff && !nghttp2_session_want_write(c->h2)) {
    srv_conn_close(c);
    return;
  }
  conn_update_watch(c);
}

void srv_conn_flush_all(srv_server *srv) {
  while (!conch__list_empty(&srv->flush)) {
    srv_conn *c = CONCH_CONTAINER(srv->flush.next, srv_conn, flush_link);

    conch__list_remove(&c->flush_link);
    conn_flush(c);
  }
}

static void conn_on_io(srv_watch *w, uint32_t events) {
  srv_conn *c = CONCH_CONTAINER(w, srv_conn, w);

  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) {
    conn_read(c, events);
  }
  srv_conn_kick(c);
}
