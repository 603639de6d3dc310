/* The HTTP/2 session of a connection (session.h, conch__h2_ops):
   nghttp2, its callbacks, the stream operations calls use (submit,
   consume, resume, reset), the feed of received plaintext and the
   keepalive decision.  No descriptors and no clock: frames leave through
   the filter (conch__filter_write, written out by conn.c), bytes come in
   through |feed|, and the time is passed in. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "filter.h"
#include "list.h"
#include "pool.h"
#include "protocol.h"
#include "session.h"
#include "wire.h"

/* ---- nghttp2 callbacks ------------------------------------------------- */

/* The call of stream |id|.  A frame's callbacks (begin, each header, the
   end; each DATA chunk) ask for the same stream in a row: the last answer
   is kept, as stream ids are never reused in a session, until the stream
   is forgotten (forget_stream()). */
static conch_call *stream_call(conch_conn *conn, int32_t id) {
  if (id != conn->h2_last_id || id == 0) {
    conn->h2_last_call = nghttp2_session_get_stream_user_data(conn->h2, id);
    conn->h2_last_id = id;
  }
  return conn->h2_last_call;
}

static void forget_stream(conch_conn *conn, int32_t id) {
  nghttp2_session_set_stream_user_data(conn->h2, id, NULL);
  if (conn->h2_last_id == id) {
    conn->h2_last_id = 0;
    conn->h2_last_call = NULL;
  }
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame,
                            void *ud) {
  conch_conn *conn = ud;
  conch_call *call;
  (void)s;
  if (frame->hd.type != NGHTTP2_HEADERS) {
    return 0;
  }
  call = stream_call(conn, frame->hd.stream_id);
  if (call != NULL) {
    conch__call_on_header(call, NULL, 0, NULL, 0, -1);
  }
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame,
                     const uint8_t *name, size_t namelen, const uint8_t *value,
                     size_t valuelen, uint8_t flags, void *ud) {
  conch_conn *conn = ud;
  conch_call *call;
  (void)s;
  (void)flags;
  if (frame->hd.type != NGHTTP2_HEADERS) {
    return 0;
  }
  call = stream_call(conn, frame->hd.stream_id);
  if (call == NULL) {
    return 0;
  }
  if (conch__call_on_header(call, name, namelen, value, valuelen, 0) != 0) {
    /* The call has failed (e.g. header list too large): reset the stream. */
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame,
                         void *ud) {
  conch_conn *conn = ud;
  conch_call *call;
  (void)s;

  switch (frame->hd.type) {
  case NGHTTP2_HEADERS:
    call = stream_call(conn, frame->hd.stream_id);
    if (call != NULL) {
      conch__call_on_headers_done(
          call, (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
    }
    break;
  case NGHTTP2_DATA:
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
      call = stream_call(conn, frame->hd.stream_id);
      if (call != NULL) {
        conch__call_on_remote_end(call);
      }
    }
    break;
  case NGHTTP2_SETTINGS:
    if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !conn->peer_settings) {
      /* Calls wait for this: until the server has said how many streams
         it takes, requests sent beyond its limit would be refused. */
      conn->peer_settings = 1;
      conch__conn_client(conn)->peer_max_streams = nghttp2_session_get_remote_settings(
          conn->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
      conch__conn_mark_dirty(conn);
    }
    break;
  case NGHTTP2_PING:
    if (frame->hd.flags & NGHTTP2_FLAG_ACK) {
      conn->ping_sent = 0;
    }
    break;
  case NGHTTP2_GOAWAY:
    if (frame->goaway.error_code == NGHTTP2_ENHANCE_YOUR_CALM &&
        frame->goaway.opaque_data_len == 14 &&
        memcmp(frame->goaway.opaque_data, "too_many_pings", 14) == 0 &&
        conch__conn_client(conn)->o.keepalive_ms > 0) {
      /* The server finds our pings too frequent: back off for the
         connections to come (gRPC's rule). */
      conch__conn_client(conn)->o.keepalive_ms *= 2;
    }
    conn->goaway = 1;
    if (frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      snprintf(conn->errmsg, sizeof(conn->errmsg),
               "server sent GOAWAY (error code %u)",
               (unsigned)frame->goaway.error_code);
    } else {
      snprintf(conn->errmsg, sizeof(conn->errmsg), "server sent GOAWAY");
    }
    conn->fail_code = CONCH_CODE_UNAVAILABLE;
    /* Calls not yet sent go to another connection. */
    while (!conch__list_empty(&conn->queue)) {
      conch__pool_requeue(
          CONCH_CONTAINER(conn->queue.next, conch_call, queue_link));
    }
    break;
  default:
    break;
  }
  return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id,
                         const uint8_t *data, size_t len, void *ud) {
  conch_conn *conn = ud;
  conch_call *call;
  (void)flags;

  /* The connection window is returned at once; the stream window follows
     the application (call.c), which is what bounds memory per stream. */
  if (nghttp2_session_consume_connection(s, len) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE; /* out of memory */
  }
  call = stream_call(conn, id);
  if (call == NULL || call->finished) {
    if (nghttp2_session_consume_stream(s, id, len) != 0) {
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
  }
  conch__call_on_data(call, data, len);
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t err,
                           void *ud) {
  conch_conn *conn = ud;
  conch_call *call = stream_call(conn, id);
  (void)s;

  if (call == NULL) {
    return 0;
  }
  forget_stream(conn, id);
  conch__conn_stream_closed(conn, call, err);
  return 0;
}

static int on_error(nghttp2_session *s, int lib_error, const char *msg,
                    size_t len, void *ud) {
  conch_conn *conn = ud;
  (void)s;
  (void)lib_error;
  /* Kept to explain a session that later dies. */
  snprintf(conn->errmsg, sizeof(conn->errmsg), "HTTP/2: %.*s",
           (int)(len > 200 ? 200 : len), msg);
  return 0;
}

static ssize_t data_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t length, uint32_t *flags,
                         nghttp2_data_source *source, void *ud) {
  conch_call *call = source->ptr;
  size_t n = conch__call_send_pending(call);
  (void)s;
  (void)id;
  (void)buf;
  (void)ud;

  if (call->finished && !call->send_closed) {
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n == 0) {
    if (call->send_closed) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    call->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
  }
  if (n > length) {
    n = length;
  } else if (call->send_closed) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  return (ssize_t)n;
}

static int send_data(nghttp2_session *s, nghttp2_frame *frame,
                     const uint8_t *framehd, size_t length,
                     nghttp2_data_source *source, void *ud) {
  conch_conn *conn = ud;
  conch_call *call = source->ptr;
  (void)s;
  (void)frame; /* we never pad */

  /* The payload goes from the call's buffer to the output: one copy. */
  if (conch__filter_write(conn, framehd, 9) != 0 ||
      conch__filter_write(conn, conch__call_send_head(call), length) != 0) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  conch__call_sent(call, length);
  return 0;
}

/* ---- nghttp2's memory ---------------------------------------------------- */

/* nghttp2 allocates a few small blocks for every stream (the stream, its
   outbound frames) and frees them when it closes.  Freed blocks of up to
   512 bytes are kept per connection, by size class, for the next streams:
   a steady load of calls allocates nothing.  Each block starts with a
   header saying its class and size. */
#define SPARE_CLASSES 4
#define SPARE_KEEP 256 /* blocks kept per class: 2 per stream, 128 streams */

typedef union spare_hdr {
  struct {
    size_t cls;  /* class, or SPARE_CLASSES: not kept */
    size_t size; /* usable bytes */
  } h;
  max_align_t align;
} spare_hdr;

static const size_t spare_size[SPARE_CLASSES] = {64, 128, 256, 512};

static void *h2_malloc(size_t size, void *ud) {
  conch_conn *conn = ud;
  const conch_mem *mem = conch__conn_client(conn)->mem;
  size_t cls = 0;
  spare_hdr *h;
  while (cls < SPARE_CLASSES && size > spare_size[cls]) {
    cls++;
  }
  if (cls < SPARE_CLASSES && conn->h2_spare[cls] != NULL) {
    h = conn->h2_spare[cls];
    memcpy(&conn->h2_spare[cls], h + 1, sizeof(void *));
    conn->h2_nspare[cls]--;
    return h + 1;
  }
  if (cls < SPARE_CLASSES) {
    size = spare_size[cls];
  } else if (size > SIZE_MAX - sizeof(*h)) {
    return NULL;
  }
  h = mem->malloc(sizeof(*h) + size, mem->user_data);
  if (h == NULL) {
    return NULL;
  }
  h->h.cls = cls;
  h->h.size = size;
  return h + 1;
}

static void h2_mfree(void *p, void *ud) {
  conch_conn *conn = ud;
  const conch_mem *mem = conch__conn_client(conn)->mem;
  spare_hdr *h;
  size_t cls;
  if (p == NULL) {
    return;
  }
  h = (spare_hdr *)p - 1;
  cls = h->h.cls;
  if (cls < SPARE_CLASSES && conn->h2_nspare[cls] < SPARE_KEEP) {
    memcpy(p, &conn->h2_spare[cls], sizeof(void *));
    conn->h2_spare[cls] = h;
    conn->h2_nspare[cls]++;
    return;
  }
  mem->free(h, mem->user_data);
}

static void *h2_calloc(size_t n, size_t size, void *ud) {
  void *p;
  if (size != 0 && n > SIZE_MAX / size) {
    return NULL;
  }
  p = h2_malloc(n * size, ud);
  if (p != NULL) {
    memset(p, 0, n * size);
  }
  return p;
}

static void *h2_realloc(void *p, size_t size, void *ud) {
  spare_hdr *h;
  void *q;
  if (p == NULL) {
    return h2_malloc(size, ud);
  }
  h = (spare_hdr *)p - 1;
  if (size <= h->h.size) {
    return p;
  }
  q = h2_malloc(size, ud);
  if (q == NULL) {
    return NULL;
  }
  memcpy(q, p, h->h.size);
  h2_mfree(p, ud);
  return q;
}

/* Frees the blocks kept (once the session is gone). */
static void h2_spare_drain(conch_conn *conn) {
  const conch_mem *mem = conch__conn_client(conn)->mem;
  size_t cls;
  for (cls = 0; cls < SPARE_CLASSES; cls++) {
    while (conn->h2_spare[cls] != NULL) {
      spare_hdr *h = conn->h2_spare[cls];
      memcpy(&conn->h2_spare[cls], h + 1, sizeof(void *));
      mem->free(h, mem->user_data);
    }
    conn->h2_nspare[cls] = 0;
  }
}

/* ---- Setup ------------------------------------------------------------- */

/* The largest DATA frame we let a server send (SETTINGS_MAX_FRAME_SIZE;
   the default is 16 KiB).  A message inside one frame reaches the envelope
   reader in one piece when one read holds the frame (conn.c), and is then
   decoded where it lies; one split over frames of 16 KiB is always copied
   to be put together.  Servers that size frames by this setting (Go's
   net/http2, which envd and connect-go use; nghttp2 with a read-length
   callback) send a 64 KiB message as one frame; the others keep sending
   16 KiB.  Larger frames cost us nothing (nghttp2 does not buffer DATA);
   flow control still bounds what a stream holds. */
#define H2_MAX_FRAME ((uint32_t)1 << 20)

/* Through wire.c's one session setup (conch__h2_session_new()). */
static int h2_start(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_h2_setup h;
  nghttp2_mem mem;

  /* Over c->mem, keeping small blocks for reuse. */
  mem.mem_user_data = conn;
  mem.malloc = h2_malloc;
  mem.free = h2_mfree;
  mem.calloc = h2_calloc;
  mem.realloc = h2_realloc;

  memset(&h, 0, sizeof(h));
  h.h2_mem = &mem;
  h.begin_headers = on_begin_headers;
  h.header = on_header;
  h.frame_recv = on_frame_recv;
  h.data_chunk = on_data_chunk;
  h.stream_close = on_stream_close;
  h.error = on_error;
  h.send_data = send_data;
  h.manual_window = 1;
  /* Until the server's SETTINGS arrive, assume what Go and grpc-go do. */
  h.peer_max_streams = 100;
  /* ENABLE_PUSH 0, then these (the options hold them >= 65535, > 0). */
  h.stream_window = c->o.stream_window;
  h.max_header_list = c->o.max_header_list;
  h.max_frame = H2_MAX_FRAME;
  h.conn_window = c->o.conn_window;
  conn->h2_last_id = 0;
  conn->h2_last_call = NULL;
  return conch__h2_session_new(&conn->h2, &h, conn);
}

/* ---- Streams ----------------------------------------------------------- */

static int submit_call(conch_conn *conn, conch_call *call, int64_t now) {
  conch_client *c = conch__conn_client(conn);
  nghttp2_nv nva[64];
  nghttp2_data_provider prd;
  conch_buf store = CONCH_BUF_INIT;
  long n;
  int32_t id;
  int empty;

  n = conch__proto_request_headers(call, nva, 64, &store);
  if (n < 0) {
    conch__buf_free(&store, c->mem);
    return (int)n; /* the call failed, saying why */
  }
  prd.source.ptr = call;
  prd.read_callback = data_read;
  /* A GET has its request in the URL: HEADERS with END_STREAM.  Its
     sendbuf stays, so that a transparent retry builds the same URL.  A
     request that is whole and empty (a Connect unary call of an empty
     message) ends with its HEADERS too, as a body-less POST: no DATA
     frame to schedule and send. */
  empty = call->get ||
          (call->send_closed && conch__call_send_pending(call) == 0);
  id = nghttp2_submit_request(conn->h2, NULL, nva, (size_t)n,
                              empty ? NULL : &prd, call);
  conch__buf_free(&store, c->mem);
  if (id < 0) {
    if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) {
      /* Stream ids ran out: this connection takes no more calls. */
      conn->goaway = 1;
      conch__call_fail(call, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                       "connection out of stream ids");
    } else {
      conch__call_fail(call, CONCH_CODE_INTERNAL, CONCH_ERR_SESSION,
                       "cannot submit request: %s", nghttp2_strerror(id));
    }
    return CONCH_ERR_SESSION;
  }
  call->stream_id = id;
  if (conn->h2_last_id == id) {
    conn->h2_last_id = 0; /* asked about before it was ours */
  }
  call->submitted = 1;
  call->submitted_at = now;
  call->stream_live = 1;
  conn->active++;
  conch__conn_mark_dirty(conn);
  return 0;
}

static void h2_submit(conch_conn *conn, int64_t now) {
  uint32_t max;
  conch_link *l, *next;

  if (conn->state != CONCH_CONN_READY || conn->goaway || !conn->peer_settings) {
    return;
  }
  max = nghttp2_session_get_remote_settings(
      conn->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
  for (l = conn->queue.next; l != &conn->queue && conn->active < max;
       l = next) {
    conch_call *call = CONCH_CONTAINER(l, conch_call, queue_link);
    next = l->next;
    if (!conch__call_ready_to_submit(call)) {
      continue; /* a Connect unary call waits for its message */
    }
    conch__list_remove(&call->queue_link);
    submit_call(conn, call, now);
  }
}

/* nghttp2 reports only out-of-memory as fatal from these calls; a session
   that cannot queue a WINDOW_UPDATE or RST_STREAM would stall its streams,
   so the connection goes. */
static void check_fatal(conch_conn *conn, int rv) {
  if (nghttp2_is_fatal(rv)) {
    conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "HTTP/2 session error: %s", nghttp2_strerror(rv));
  }
}

static void h2_resume(conch_conn *conn, conch_call *call) {
  if (call->submitted && call->stream_live && call->deferred &&
      conn->h2 != NULL) {
    call->deferred = 0;
    check_fatal(conn, nghttp2_session_resume_data(conn->h2, call->stream_id));
  }
  conch__conn_mark_dirty(conn);
}

static void h2_consume(conch_conn *conn, conch_call *call, size_t n) {
  if (n == 0 || conn->h2 == NULL || !call->stream_live) {
    return;
  }
  check_fatal(conn,
              nghttp2_session_consume_stream(conn->h2, call->stream_id, n));
  conch__conn_mark_dirty(conn);
}

static void h2_reset(conch_conn *conn, conch_call *call, uint32_t h2err) {
  if (!call->submitted || !call->stream_live || conn->h2 == NULL) {
    return;
  }
  check_fatal(conn, nghttp2_submit_rst_stream(conn->h2, NGHTTP2_FLAG_NONE,
                                              call->stream_id, h2err));
  conch__conn_mark_dirty(conn);
}

/* ---- The connection's side --------------------------------------------- */

/* nghttp2 1.52 has only the ssize_t API (mem_send2/mem_recv2 came in
   1.60); keep the casts in one place. */
static long h2_mem_send(nghttp2_session *s, const uint8_t **data) {
  return (long)nghttp2_session_mem_send(s, data);
}
static long h2_mem_recv(nghttp2_session *s, const uint8_t *in, size_t n) {
  return (long)nghttp2_session_mem_recv(s, in, n);
}

static void h2_free(conch_conn *conn) {
  if (conn->h2 != NULL) {
    nghttp2_session_del(conn->h2);
    conn->h2 = NULL;
  }
  h2_spare_drain(conn);
}

/* An http:// target with CONCH_HTTP_AUTO is tried with HTTP/2 (prior
   knowledge) first.  No request goes out before the server's SETTINGS
   (h2_submit), so when the first byte back is the 'H' of an
   HTTP/1.x status line instead (no HTTP/2 frame can start with 0x48: its
   length would exceed any SETTINGS_MAX_FRAME_SIZE the server could have
   announced before saying anything), nothing was sent but the preface:
   the client switches to HTTP/1.1 for good, and the calls waiting here
   move to new connections.  The cost is the round trip of the first
   connection, once per client.  gRPC cannot do that: its calls fail,
   saying why. */
static int h1_fallback(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_link *l;

  if (c->o.protocol == CONCH_PROTOCOL_GRPC) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_PROTO,
                     "%s speaks HTTP/1.x, not HTTP/2, and gRPC needs "
                     "HTTP/2 (Connect and gRPC-Web work over HTTP/1.1)",
                     c->target);
    return CONCH_ERR_PROTO;
  }
  c->h1 = 1;
  conn->goaway = 1; /* the pool must not pick this one again */
  while ((l = conn->calls.next) != &conn->calls) {
    conch__pool_requeue(CONCH_CONTAINER(l, conch_call, conn_link));
  }
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                   "%s speaks HTTP/1.x: retried over HTTP/1.1", c->target);
  return CONCH_ERR_CONNECT;
}

/* Hands plaintext to nghttp2.  Returns 0 or fails the connection. */
static int h2_feed(conch_conn *conn, const uint8_t *p, size_t n) {
  long rv;
  if (!conn->seen_bytes && n > 0) {
    conn->seen_bytes = 1;
    if (p[0] == 'H' && conch__filter_alpn_h2(conn) < 0 &&
        !conn->peer_settings &&
        conch__conn_client(conn)->o.http_version == CONCH_HTTP_AUTO) {
      return h1_fallback(conn);
    }
  }
  rv = h2_mem_recv(conn->h2, p, n);
  if (conn->state == CONCH_CONN_DEAD) {
    return CONCH_ERR_CONNECT;
  }
  if (rv < 0) {
    conch__conn_fail(conn, CONCH_CODE_INTERNAL, CONCH_ERR_PROTO,
                     "HTTP/2 protocol error from %s: %s", conch__conn_client(conn)->target,
                     nghttp2_strerror((int)rv));
    return CONCH_ERR_PROTO;
  }
  return 0;
}

static int h2_want_read(const conch_conn *conn) {
  (void)conn;
  return 1; /* flow control bounds what comes in */
}

static void h2_on_close(conch_conn *conn, int err, int writing) {
  const char *target = conch__conn_client(conn)->target;
  if (writing) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "write to %s failed: %s", target, strerror(err));
  } else if (err != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "read from %s failed: %s", target, strerror(err));
  } else {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "connection closed by %s%s%s", target,
                     conn->errmsg[0] ? " after " : "", conn->errmsg);
  }
}

static int h2_send(conch_conn *conn) {
  while (conch__filter_out_size(conn) < CONCH_OUT_HIGH_WATER) {
    const uint8_t *data;
    long n = h2_mem_send(conn->h2, &data);
    if (n < 0) {
      conch__conn_fail(conn, CONCH_CODE_INTERNAL, CONCH_ERR_SESSION,
                       "HTTP/2 session error: %s", nghttp2_strerror((int)n));
      return -1;
    }
    if (n == 0) {
      break;
    }
    if (conch__filter_write(conn, data, (size_t)n) != 0) {
      conch__conn_fail(conn, CONCH_CODE_INTERNAL, CONCH_ERR_NOMEM,
                       "out of memory writing to the connection");
      return -1;
    }
  }
  return 0;
}

static int h2_want_write(const conch_conn *conn) {
  return conn->h2 != NULL && nghttp2_session_want_write(conn->h2);
}

static int h2_over(const conch_conn *conn) {
  return conn->h2 != NULL && !nghttp2_session_want_read(conn->h2) &&
         !nghttp2_session_want_write(conn->h2);
}

static long h2_capacity(const conch_conn *conn) {
  if (conn->h2 == NULL || !conn->peer_settings) {
    return -1;
  }
  return (long)nghttp2_session_get_remote_settings(
      conn->h2, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

static int h2_sent_all(const conch_conn *conn, const conch_call *call) {
  return conn->h2 != NULL && nghttp2_session_get_stream_local_close(
                                 conn->h2, call->stream_id) == 1;
}

static void h2_forget(conch_conn *conn, conch_call *call) {
  if (conn->h2 != NULL) {
    forget_stream(conn, call->stream_id);
  }
}

/* gRPC's keepalive: a PING after |keepalive_ms| without a byte from the
   server while calls are open; the connection is dead when no byte comes
   back within |keepalive_timeout_ms|. */
static conch_keepalive h2_keepalive(const conch_conn *conn, int64_t now,
                                    int64_t *next) {
  const conch_client_opts *o = &conch__conn_client(conn)->o;
  long interval = o->keepalive_ms;

  if (conn->state != CONCH_CONN_READY || interval <= 0) {
    return CONCH_KA_OFF;
  }
  /* A PING is outstanding until something arrives after it. */
  if (conn->ping_sent != 0 && conn->last_read <= conn->ping_sent) {
    if (now - conn->ping_sent >= o->keepalive_timeout_ms) {
      return CONCH_KA_DEAD;
    }
    *next = conn->ping_sent + o->keepalive_timeout_ms;
    return CONCH_KA_WAIT;
  }
  if (now - conn->last_read < interval) {
    *next = conn->last_read + interval; /* recent traffic */
    return CONCH_KA_WAIT;
  }
  if (conch__list_empty(&conn->calls)) {
    /* Nothing to keep alive: no pings without calls, as gRPC clients
       default to. */
    *next = now + interval;
    return CONCH_KA_WAIT;
  }
  *next = now + o->keepalive_timeout_ms;
  return CONCH_KA_PING;
}

static int h2_ping(conch_conn *conn) {
  return nghttp2_submit_ping(conn->h2, NGHTTP2_FLAG_NONE, NULL) != 0
             ? CONCH_ERR_NOMEM
             : 0;
}

const conch_session_ops conch__h2_ops = {
    .name = "HTTP/2",
    .start = h2_start,
    .free = h2_free,
    .submit = h2_submit,
    .resume = h2_resume,
    .consume = h2_consume,
    .reset = h2_reset,
    .feed = h2_feed,
    .want_read = h2_want_read,
    .on_close = h2_on_close,
    .send = h2_send,
    .want_write = h2_want_write,
    .over = h2_over,
    .keepalive = h2_keepalive,
    .ping = h2_ping,
    .capacity = h2_capacity,
    .sent_all = h2_sent_all,
    .forget = h2_forget,
};
