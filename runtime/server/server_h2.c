/* HTTP/2 for the server core: nghttp2's server session, its callbacks
   into the request entry points of server_rpc.c (conch__srv_rpc_open,
   header, headers_end, data, data_end, close), and the HTTP/2 response
   sink (conch__srv_h2_sink), whose data source hands out rpc->out.
   server_h1.c is the same for HTTP/1.1. */
#include <string.h>

#include "mem_int.h"
#include "server_int.h"
#include "wire.h"

/* A plain exchange's drained buffer larger than this is freed. */
#define SRV_HTTP_OUT_KEEP (256 * 1024)

static ssize_t rpc_read(nghttp2_session *h2, int32_t id, uint8_t *buf,
                        size_t len, uint32_t *flags, nghttp2_data_source *src,
                        void *user_data) {
  conch_rpc *rpc = src->ptr;
  size_t n = conch__buf_size(&rpc->out);
  (void)user_data;

  if (n > len) {
    n = len;
  }
  if (n > 0) {
    memcpy(buf, conch__buf_head(&rpc->out), n);
    conch__buf_consume(&rpc->out, n);
  }
  if (conch__buf_size(&rpc->out) == 0) {
    if (rpc->http != NULL && rpc->out.cap > SRV_HTTP_OUT_KEEP) {
      conch__buf_free(&rpc->out, conch__srv_rpc_mem(rpc));
    }
    if (rpc->out_end) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (rpc->trl.n > 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(h2, id, rpc->trl.nv, rpc->trl.n) != 0) {
          return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
      }
    } else if (n == 0) {
      rpc->deferred = 1;
      return NGHTTP2_ERR_DEFERRED;
    }
  }
  return (ssize_t)n;
}

/* ---- The HTTP/2 sink ---------------------------------------------------- */

static int h2_head(conch_rpc *rpc, srv_hb *h, int with_data) {
  nghttp2_data_provider prd;

  prd.source.ptr = rpc;
  prd.read_callback = rpc_read;
  return nghttp2_submit_response(rpc->conn->base.h2, rpc->id, h->nv, h->n,
                                 with_data ? &prd : NULL) != 0
             ? CONCH_ERR_NOMEM
             : 0;
}

static void h2_more(conch_rpc *rpc) {
  if (rpc->deferred) {
    rpc->deferred = 0;
    (void)nghttp2_session_resume_data(rpc->conn->base.h2, rpc->id);
  }
}

static void h2_reset(conch_rpc *rpc, uint32_t code) {
  (void)nghttp2_submit_rst_stream(rpc->conn->base.h2, NGHTTP2_FLAG_NONE,
                                  rpc->id, code);
}

static void h2_consumed(conch_rpc *rpc, size_t n) {
  (void)nghttp2_session_consume_stream(rpc->conn->base.h2, rpc->id, n);
}

static void h2_overflow(conch_rpc *rpc) {
  (void)nghttp2_session_terminate_session(rpc->conn->base.h2,
                                          NGHTTP2_ENHANCE_YOUR_CALM);
}

const srv_sink conch__srv_h2_sink = {h2_head, h2_more, h2_reset, h2_consumed,
                                     h2_overflow};

/* ---- nghttp2 callbacks ------------------------------------------------------ */

static conch_rpc *stream_rpc(nghttp2_session *h2, int32_t id) {
  return nghttp2_session_get_stream_user_data(h2, id);
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame,
                            void *user_data) {
  srv_conn *conn = user_data;
  conch_rpc *rpc;

  if (frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  rpc = conch__srv_rpc_open(conn, frame->hd.stream_id, &conch__srv_h2_sink);
  if (rpc == NULL) {
    (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                    NGHTTP2_INTERNAL_ERROR);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  nghttp2_session_set_stream_user_data(h2, frame->hd.stream_id, rpc);
  return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *user_data) {
  conch_rpc *rpc = stream_rpc(h2, frame->hd.stream_id);
  (void)flags;
  (void)user_data;

  if (rpc == NULL || rpc->state != SRV_RPC_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  if (conch__srv_rpc_header(rpc, name, namelen, value, valuelen) != 0) {
    (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                    NGHTTP2_INTERNAL_ERROR);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *user_data) {
  conch_rpc *rpc;
  (void)user_data;

  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) {
    return 0;
  }
  rpc = stream_rpc(h2, frame->hd.stream_id);
  if (rpc == NULL) {
    return 0;
  }
  if (frame->hd.type == NGHTTP2_HEADERS &&
      frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
      rpc->state == SRV_RPC_HEADERS) {
    conch__srv_rpc_headers_end(rpc);
  }
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    conch__srv_rpc_data_end(rpc);
  }
  return 0;
}

/* An answered request's rest, read and dropped before its stream is
   reset (on_frame_send()): at most this many bytes, for at most this
   long. */
#define SRV_DISCARD_MAX (1024 * 1024)
#define SRV_DISCARD_MS 5000

/* Request bytes of a paused call wait, their stream window not returned:
   the client can send no more than the window ahead. */
static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *user_data) {
  conch_rpc *rpc = stream_rpc(h2, id);
  (void)flags;
  (void)user_data;

  /* The connection window is returned at once, the stream's as the
     handler takes the bytes. */
  if (nghttp2_session_consume_connection(h2, len) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (rpc != NULL && rpc->discarding) {
    rpc->discarded += (uint32_t)len; /* at most one frame past the max */
    if (rpc->discarded > SRV_DISCARD_MAX) {
      (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, id,
                                      NGHTTP2_NO_ERROR);
    }
  } else if (rpc != NULL && conch__srv_rpc_data(rpc, data, len) != 0) {
    return 0; /* held: the window stays out */
  }
  if (nghttp2_session_consume_stream(h2, id, len) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  return 0;
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *frame,
                         void *user_data) {
  conch_rpc *rpc;
  (void)user_data;

  if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
      !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    return 0;
  }
  rpc = stream_rpc(h2, frame->hd.stream_id);
  if (rpc != NULL && !rpc->half_closed && !rpc->discarding) {
    /* The response is complete and the rest of the request is not wanted
       (a refusal, an error).  HTTP/2 lets the server reset the stream
       with NO_ERROR now, but clients that are still sending (curl)
       report the reset and drop the answer: the rest is read and dropped
       until the client ends its side, and the stream is reset only when
       it sends more than SRV_DISCARD_MAX or takes longer than
       SRV_DISCARD_MS (as an HTTP/1.1 connection reads the body after an
       early answer). */
    conch_server *s = rpc->conn->s;
    rpc->discarding = 1;
    conch__srv_timer_disarm(s, &rpc->recv);
    if (conch__srv_timer_arm(s, &rpc->recv,
                             conch__srv_now(s) + SRV_DISCARD_MS) != 0) {
      (void)nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE,
                                      frame->hd.stream_id, NGHTTP2_NO_ERROR);
    }
  }
  return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t error,
                           void *user_data) {
  conch_rpc *rpc = stream_rpc(h2, id);
  (void)user_data;

  if (rpc == NULL) {
    return 0;
  }
  nghttp2_session_set_stream_user_data(h2, id, NULL);
  conch__srv_rpc_close(rpc, error);
  return 0;
}

int conch__srv_session_new(srv_conn *conn) {
  conch_server *s = conn->s;
  conch_h2_setup h;

  memset(&h, 0, sizeof(h));
  h.server = 1;
  h.mem = s->ep.mem;
  h.begin_headers = on_begin_headers;
  h.header = on_header;
  h.frame_recv = on_frame_recv;
  h.frame_send = on_frame_send;
  h.data_chunk = on_data_chunk;
  h.stream_close = on_stream_close;
  h.max_streams = s->o.max_streams;
  h.max_header_list = s->o.max_header_list;
  h.stream_window = 1024 * 1024;
  h.manual_window = 1;
  h.big_frames = 1; /* a large message in one frame, as Go's net/http2 */
  return conch__h2_session_new(&conn->base.h2, &h, conn);
}

/* ---- The session (session.h's table) ------------------------------------- */

static int h2_start(conch_conn *c) {
  srv_conn *conn = conch__srv_conn_of(c);
  int rv = conch__srv_session_new(conn);
  if (rv == 0) {
    conch__srv_conn_dirty(conn); /* our SETTINGS go out on the next flush */
  }
  return rv;
}

static void h2_free(conch_conn *c) {
  nghttp2_session_del(c->h2);
  c->h2 = NULL;
}

static int h2_feed(conch_conn *c, const uint8_t *p, size_t n) {
  srv_conn *conn = conch__srv_conn_of(c);
  if (nghttp2_session_mem_recv(c->h2, p, n) < 0) {
    /* Garbage or a broken session: nghttp2 queued a GOAWAY when it
       could; send it, then close. */
    conch__srv_conn_finish(conn);
  }
  return conch__srv_conn_dead(conn) ? -1 : 0;
}

/* Nothing once the session failed (|fin|: nghttp2 takes no more). */
static size_t h2_room(const conch_conn *c) {
  return conch__srv_conn_of(c)->base.closing ? 0 : SRV_READ_CHUNK;
}

/* The client shut its write side (SHUT_WR): what it asked is still
   answered, as HTTP/2 allows; a request still being received can never
   end and is reset.  The connection closes once all is answered (or when
   a write fails: it is not watched for reading any more).  An adopted
   transport's EOF, a second one or a failure close it. */
static void h2_on_close(conch_conn *c, int err, int writing) {
  srv_conn *conn = conch__srv_conn_of(c);
  (void)writing;
  if (err != 0 || conn->rd_eof || conn->has_t) {
    conch__srv_conn_close(conn);
    return;
  }
  conn->rd_eof = 1;
  for (conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
    conch_rpc *rpc = CONCH_CONTAINER(l, conch_rpc, link);
    if (!rpc->half_closed) {
      (void)nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, rpc->id,
                                      NGHTTP2_CANCEL);
    }
  }
}

/* Frames into the filter until nghttp2 has none or 64 KiB wait (written
   before more are taken). */
static int h2_send(conch_conn *c) {
  srv_conn *conn = conch__srv_conn_of(c);
  for (;;) {
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(c->h2, &p);
    if (n < 0) {
      return -1;
    }
    if (n == 0) {
      return 0;
    }
    if (conch__srv_conn_out(conn, p, (size_t)n) != 0) {
      return -1;
    }
    if (conch__srv_conn_out_size(conn) >= 64 * 1024) {
      return 0;
    }
  }
}

/* Frames wait, and the connection is not closing (conn.c's write-out asks
   before producing). */
static int h2_want_write(const conch_conn *c) {
  const srv_conn *conn = conch__srv_conn_of(c);
  return !conn->base.closing && !conn->lingering &&
         nghttp2_session_want_write(c->h2);
}

/* Over once nothing is to be sent and nothing more is read: after
   GOAWAY, or half-closed with every call answered. */
static int h2_over(const conch_conn *c) {
  const srv_conn *conn = conch__srv_conn_of(c);
  return !nghttp2_session_want_write(c->h2) &&
         (!nghttp2_session_want_read(c->h2) ||
          (conn->rd_eof && conch__list_empty(&conn->rpcs)));
}

static void h2_goaway(conch_conn *c) {
  if (nghttp2_submit_goaway(c->h2, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(c->h2),
                            NGHTTP2_NO_ERROR, NULL, 0) != 0) {
    conch__srv_conn_close(conch__srv_conn_of(c));
  }
}

const conch_session_ops conch__srv_h2_ops = {
    .name = "HTTP/2",
    .start = h2_start,
    .free = h2_free,
    .submit = conch__srv_sess_submit,
    .resume = conch__srv_sess_call,
    .consume = conch__srv_sess_consume,
    .reset = conch__srv_sess_reset,
    .feed = h2_feed,
    .want_read = conch__srv_sess_want_read,
    .on_close = h2_on_close,
    .send = h2_send,
    .want_write = h2_want_write,
    .over = h2_over,
    .keepalive = conch__srv_sess_keepalive,
    .ping = conch__srv_sess_ping,
    .capacity = conch__srv_sess_capacity,
    .sent_all = conch__srv_sess_sent_all,
    .forget = conch__srv_sess_call,
    .room = h2_room,
    .goaway = h2_goaway,
};
