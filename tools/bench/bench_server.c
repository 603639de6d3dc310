/* A neutral, canned HTTP/2 (h2c, prior knowledge) server for the client
   benchmarks of tools/bench/compare.sh: conch, gRPC C++ and h2load all run
   against this one process, so what differs is the client only.

     bench-server [PORT] [h1]   (default 0: any free port)

   With "h1" it speaks HTTP/1.1 instead (keep-alive, one request at a time
   per connection, as envd): unary responses with Content-Length, streams
   chunked, one chunk per write buffer, as Go's net/http sends them.

   Prints "listening PORT" on stdout once it accepts connections.  It knows
   two methods of process.Process, each for Connect and gRPC (chosen by the
   request's content-type):

   - /process.Process/List (unary): always the same ListResponse of 485
     bytes (13 messages: 3 processes, each with a config and 2 env entries).
   - /process.Process/Start (server stream): StartRequest.process.args[0] is
     the number of messages, args[1] the stdout bytes of each (default 1 and
     65536); every message is a StartResponse carrying a DataEvent.

   Anything else gets an "unimplemented" status.  Responses are prepared once;
   the server does no per-request protobuf work beyond decoding a StartRequest.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>
#include <nghttp2/nghttp2.h>

#include "list_fixture.h"
#include "process/process.pb-c.h"

#define MAX_CONNS 64
#define MAX_BODY 4096

enum { K_CONNECT_UNARY, K_CONNECT_STREAM, K_GRPC };

typedef struct bstream {
  int32_t id;
  int kind;
  int method; /* 0 unknown, 1 List, 2 Start */
  char ctype[64];
  uint8_t body[MAX_BODY];
  size_t body_len;
  /* response body: |head|, then |msg| |count| times, then |tail| */
  const uint8_t *head;
  size_t head_len;
  uint8_t *msg; /* owned */
  size_t msg_len;
  long count;
  const uint8_t *tail;
  size_t tail_len;
  size_t off; /* offset in the current piece */
  int piece;  /* 0 head, 1 msgs, 2 tail, 3 done */
  int grpc_trailers;
  struct bstream *next;
} bstream;

typedef struct bconn {
  int fd;
  nghttp2_session *h2; /* NULL: HTTP/1.1 */
  http_parser hp;
  bstream *cur;   /* HTTP/1.1: the request being read or answered */
  int ctype_next; /* the header value being read is content-type */
  int answering;
  int head_sent, chunked;
  bstream *streams;
  uint8_t out[65536];
  size_t out_len, out_off;
} bconn;

static uint8_t list_msg[LIST_BYTES];
static uint8_t list_grpc[5 + LIST_BYTES];
static const uint8_t connect_end[] = {0x02, 0, 0, 0, 2, '{', '}'};

static void put_envelope(uint8_t *p, uint8_t flags, size_t n) {
  p[0] = flags;
  p[1] = (uint8_t)(n >> 24);
  p[2] = (uint8_t)(n >> 16);
  p[3] = (uint8_t)(n >> 8);
  p[4] = (uint8_t)n;
}

/* The canned ListResponse (list_fixture.c), enveloped for gRPC too. */
static void build_list(void) {
  bench_list_build(list_msg, "bench-server");
  put_envelope(list_grpc, 0, LIST_BYTES);
  memcpy(list_grpc + 5, list_msg, LIST_BYTES);
}

/* One StartResponse{event{data{stdout: |bytes| x 'o'}}}, enveloped. */
static uint8_t *build_event(size_t bytes, size_t *len) {
  Process__StartResponse r = PROCESS__START_RESPONSE__INIT;
  Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
  Process__ProcessEvent__DataEvent d = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
  uint8_t *data = malloc(bytes + 1), *out;
  size_t n;

  memset(data, 'o', bytes);
  d.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
  d.stdout.data = data;
  d.stdout.len = bytes;
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
  ev.data = &d;
  r.event = &ev;
  n = process__start_response__get_packed_size(&r);
  out = malloc(5 + n);
  put_envelope(out, 0, n);
  process__start_response__pack(&r, out + 5);
  free(data);
  *len = 5 + n;
  return out;
}

static bstream *find_stream(bconn *c, int32_t id) {
  bstream *s;
  for (s = c->streams; s != NULL; s = s->next) {
    if (s->id == id) {
      return s;
    }
  }
  return NULL;
}

static void free_stream(bconn *c, bstream *s) {
  bstream **pp;
  for (pp = &c->streams; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  }
  free(s->msg);
  free(s);
}

static ssize_t read_body(nghttp2_session *h2, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  bstream *s = src->ptr;
  size_t done = 0;
  (void)h2;
  (void)id;
  (void)ud;
  while (done < len && s->piece < 3) {
    const uint8_t *p;
    size_t plen, k;
    if (s->piece == 0) {
      p = s->head;
      plen = s->head_len;
    } else if (s->piece == 1) {
      if (s->count <= 0) {
        s->piece = 2;
        s->off = 0;
        continue;
      }
      p = s->msg;
      plen = s->msg_len;
    } else {
      p = s->tail;
      plen = s->tail_len;
    }
    k = plen - s->off;
    if (k > len - done) {
      k = len - done;
    }
    memcpy(buf + done, p + s->off, k);
    done += k;
    s->off += k;
    if (s->off == plen) {
      s->off = 0;
      if (s->piece == 1 && --s->count > 0) {
        continue;
      }
      s->piece++;
    }
  }
  if (s->piece == 3) {
    if (s->grpc_trailers) {
      nghttp2_nv t[] = {{(uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
                         NGHTTP2_NV_FLAG_NONE}};
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      nghttp2_submit_trailer(h2, id, t, 1);
    } else {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
  }
  return (ssize_t)done;
}

#define NV(n, v)                                                             \
  {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                 \
   NGHTTP2_NV_FLAG_NONE}

/* Sets |s|'s response body up (the pieces read_body() takes) and returns
   its content-type; for an unknown method, *status is 404 (Connect) or the
   gRPC status goes in the headers (*status 0, no body). */
static const char *prepare(bstream *s, int *status) {
  const char *ct = s->kind == K_CONNECT_UNARY ? "application/proto"
                   : s->kind == K_CONNECT_STREAM
                       ? "application/connect+proto"
                       : s->ctype;
  *status = 200;
  if (s->method == 0) {
    if (s->kind == K_GRPC) {
      *status = 0;
    } else {
      static const char e[] = "{\"code\":\"unimplemented\"}";
      *status = 404;
      s->head = (const uint8_t *)e;
      s->head_len = sizeof(e) - 1;
      s->piece = 0;
      ct = "application/json";
    }
    return ct;
  }
  s->grpc_trailers = s->kind == K_GRPC;
  if (s->method == 1) {
    if (s->kind == K_CONNECT_UNARY) {
      s->head = list_msg;
      s->head_len = LIST_BYTES;
    } else if (s->kind == K_GRPC) {
      s->head = list_grpc;
      s->head_len = sizeof(list_grpc);
    } else {
      s->head = list_grpc;
      s->head_len = sizeof(list_grpc);
      s->tail = connect_end;
      s->tail_len = sizeof(connect_end);
    }
  } else {
    const uint8_t *b = s->body + 5;
    size_t blen = s->body_len >= 5 ? s->body_len - 5 : 0;
    Process__StartRequest *req;
    long count = 1, bytes = 65536;
    if (s->kind == K_CONNECT_UNARY) {
      b = s->body;
      blen = s->body_len;
    }
    req = process__start_request__unpack(NULL, blen, b);
    if (req != NULL && req->process != NULL) {
      if (req->process->n_args > 0) {
        count = atol(req->process->args[0]);
      }
      if (req->process->n_args > 1) {
        bytes = atol(req->process->args[1]);
      }
    }
    process__start_request__free_unpacked(req, NULL);
    s->msg = build_event((size_t)bytes, &s->msg_len);
    s->count = count;
    if (s->kind == K_CONNECT_STREAM) {
      s->tail = connect_end;
      s->tail_len = sizeof(connect_end);
    }
  }
  s->piece = 0;
  return ct;
}

static void respond(nghttp2_session *h2, bstream *s) {
  nghttp2_data_provider dp;
  int status;
  const char *ct = prepare(s, &status);
  nghttp2_nv hd[] = {NV(":status", status == 404 ? "404" : "200"),
                     NV("content-type", ct)};

  if (status == 0) {
    nghttp2_nv t[] = {NV(":status", "200"), NV("content-type", ct),
                      NV("grpc-status", "12")};
    nghttp2_submit_response(h2, s->id, t, 3, NULL);
    return;
  }
  dp.source.ptr = s;
  dp.read_callback = read_body;
  nghttp2_submit_response(h2, s->id, hd, 2, &dp);
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f,
                            void *ud) {
  bconn *c = ud;
  bstream *s;
  (void)h2;
  if (f->hd.type != NGHTTP2_HEADERS ||
      f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  s = calloc(1, sizeof(*s));
  if (s == NULL) {
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  s->id = f->hd.stream_id;
  s->kind = K_CONNECT_UNARY;
  s->next = c->streams;
  c->streams = s;
  return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f,
                     const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud) {
  bstream *s = find_stream(ud, f->hd.stream_id);
  (void)h2;
  (void)flags;
  if (s == NULL) {
    return 0;
  }
  if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
    if (valuelen == 21 && memcmp(value, "/process.Process/List", 21) == 0) {
      s->method = 1;
    } else if (valuelen == 22 &&
               memcmp(value, "/process.Process/Start", 22) == 0) {
      s->method = 2;
    }
  } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0 &&
             valuelen < sizeof(s->ctype)) {
    memcpy(s->ctype, value, valuelen);
    s->ctype[valuelen] = '\0';
    if (strncmp(s->ctype, "application/grpc", 16) == 0) {
      s->kind = K_GRPC;
    } else if (strncmp(s->ctype, "application/connect+", 20) == 0) {
      s->kind = K_CONNECT_STREAM;
    }
  }
  return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id,
                   const uint8_t *data, size_t len, void *ud) {
  bstream *s = find_stream(ud, id);
  (void)h2;
  (void)flags;
  if (s != NULL && s->body_len + len <= MAX_BODY) {
    memcpy(s->body + s->body_len, data, len);
    s->body_len += len;
  }
  return 0;
}

static int on_frame(nghttp2_session *h2, const nghttp2_frame *f, void *ud) {
  bstream *s;
  if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
      !(f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    return 0;
  }
  s = find_stream(ud, f->hd.stream_id);
  if (s != NULL) {
    respond(h2, s);
  }
  return 0;
}

static int on_close(nghttp2_session *h2, int32_t id, uint32_t code,
                    void *ud) {
  bstream *s = find_stream(ud, id);
  (void)h2;
  (void)code;
  if (s != NULL) {
    free_stream(ud, s);
  }
  return 0;
}

/* ---- HTTP/1.1 ------------------------------------------------------------ */

static int h1_begin(http_parser *hp) {
  bconn *c = hp->data;
  bstream *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    return -1;
  }
  s->kind = K_CONNECT_UNARY;
  c->cur = s;
  c->answering = 0;
  c->head_sent = 0;
  return 0;
}

static int h1_url(http_parser *hp, const char *at, size_t len) {
  bconn *c = hp->data;
  if (len == 21 && memcmp(at, "/process.Process/List", 21) == 0) {
    c->cur->method = 1;
  } else if (len == 22 && memcmp(at, "/process.Process/Start", 22) == 0) {
    c->cur->method = 2;
  }
  return 0;
}

static int h1_field(http_parser *hp, const char *at, size_t len) {
  bconn *c = hp->data;
  c->ctype_next = len == 12 && strncasecmp(at, "content-type", 12) == 0;
  return 0;
}

static int h1_value(http_parser *hp, const char *at, size_t len) {
  bconn *c = hp->data;
  bstream *s = c->cur;
  if (c->ctype_next && len < sizeof(s->ctype)) {
    memcpy(s->ctype, at, len);
    s->ctype[len] = '\0';
    if (strncmp(s->ctype, "application/connect+", 20) == 0) {
      s->kind = K_CONNECT_STREAM;
    }
  }
  return 0;
}

static int h1_body(http_parser *hp, const char *at, size_t len) {
  bconn *c = hp->data;
  bstream *s = c->cur;
  if (s->body_len + len <= MAX_BODY) {
    memcpy(s->body + s->body_len, at, len);
    s->body_len += len;
  }
  return 0;
}

static int h1_complete(http_parser *hp) {
  bconn *c = hp->data;
  int status;
  const char *ct = prepare(c->cur, &status);
  size_t total =
      c->cur->head_len +
      (size_t)(c->cur->count > 0 ? c->cur->count : 0) * c->cur->msg_len +
      c->cur->tail_len;
  int n;
  c->chunked = c->cur->method == 2;
  n = snprintf((char *)c->out + c->out_len, sizeof(c->out) - c->out_len,
               "HTTP/1.1 %s\r\ncontent-type: %s\r\n",
               status == 404 ? "404 Not Found" : "200 OK", ct);
  c->out_len += (size_t)n;
  n = c->chunked
          ? snprintf((char *)c->out + c->out_len, sizeof(c->out) - c->out_len,
                     "transfer-encoding: chunked\r\n\r\n")
          : snprintf((char *)c->out + c->out_len, sizeof(c->out) - c->out_len,
                     "content-length: %zu\r\n\r\n", total);
  c->out_len += (size_t)n;
  c->answering = 1;
  http_parser_pause(hp, 1); /* one request at a time */
  return 0;
}

static const http_parser_settings h1_settings = {
    .on_message_begin = h1_begin,
    .on_url = h1_url,
    .on_header_field = h1_field,
    .on_header_value = h1_value,
    .on_body = h1_body,
    .on_message_complete = h1_complete,
};

/* Fills the output with the response being answered. */
static void h1_fill(bconn *c) {
  bstream *s = c->cur;
  while (s != NULL && c->answering && c->out_len + 64 < sizeof(c->out)) {
    uint32_t flags = 0;
    nghttp2_data_source src;
    size_t room = sizeof(c->out) - c->out_len - 10, n;
    src.ptr = s;
    if (s->piece < 3) {
      uint8_t *at = c->out + c->out_len + (c->chunked ? 8 : 0);
      n = (size_t)read_body(NULL, 0, at, room, &flags, &src, NULL);
      if (c->chunked && n > 0) {
        char hd[24];
        snprintf(hd, sizeof(hd), "%06zx\r\n", n);
        memcpy(c->out + c->out_len, hd, 8);
        c->out_len += 8 + n;
        memcpy(c->out + c->out_len, "\r\n", 2);
        c->out_len += 2;
      } else {
        c->out_len += n;
      }
      continue;
    }
    if (c->chunked) {
      memcpy(c->out + c->out_len, "0\r\n\r\n", 5);
      c->out_len += 5;
    }
    free(s->msg);
    free(s);
    c->cur = NULL;
    c->answering = 0;
    http_parser_pause(&c->hp, 0);
  }
}

static int h1_io(bconn *c, short revents) {
  uint8_t buf[65536];
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    while (!c->answering) {
      ssize_t n = read(c->fd, buf, sizeof(buf));
      size_t done;
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        return -1;
      }
      if (n < 0) {
        break;
      }
      done = http_parser_execute(&c->hp, &h1_settings, (const char *)buf,
                                 (size_t)n);
      if (HTTP_PARSER_ERRNO(&c->hp) != HPE_OK &&
          HTTP_PARSER_ERRNO(&c->hp) != HPE_PAUSED) {
        return -1;
      }
      if (done != (size_t)n) {
        return -1; /* pipelined: the benchmark clients do not */
      }
    }
  }
  for (;;) {
    ssize_t w;
    if (c->out_off == c->out_len) {
      c->out_off = c->out_len = 0;
      h1_fill(c);
      if (c->out_len == 0) {
        return 0;
      }
    }
    w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
    if (w < 0) {
      if (errno == EAGAIN) {
        return 0;
      }
      if (errno != EINTR) {
        return -1;
      }
    } else {
      c->out_off += (size_t)w;
    }
    if (c->out_off == c->out_len && !c->answering) {
      /* answered: read the next request */
      return h1_io(c, POLLIN);
    }
  }
}

static void conn_free(bconn *c) {
  while (c->streams != NULL) {
    free_stream(c, c->streams);
  }
  if (c->cur != NULL) {
    free(c->cur->msg);
    free(c->cur);
  }
  if (c->h2 != NULL) {
    nghttp2_session_del(c->h2);
  }
  close(c->fd);
  free(c);
}

static int h1_mode;

/* DATA frames as large as the client allows (its SETTINGS_MAX_FRAME_SIZE)
   and the windows have room for, as Go's net/http2 server sends them;
   nghttp2 alone stops at 16 KiB whatever the client says. */
static ssize_t frame_len(nghttp2_session *h2, uint8_t type, int32_t id,
                         int32_t stream_window, int32_t conn_window,
                         uint32_t max_frame, void *ud) {
  int32_t n = stream_window < conn_window ? stream_window : conn_window;
  (void)h2;
  (void)type;
  (void)id;
  (void)ud;
  if (n < 1) {
    n = 1;
  }
  return (uint32_t)n < max_frame ? n : (ssize_t)max_frame;
}

static bconn *conn_new(int fd) {
  nghttp2_session_callbacks *cbs;
  nghttp2_settings_entry iv[2] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
  bconn *c = calloc(1, sizeof(*c));
  int one = 1;

  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  c->fd = fd;
  if (h1_mode) {
    http_parser_init(&c->hp, HTTP_REQUEST);
    c->hp.data = c;
    return c;
  }
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs,
                                                          on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);
  nghttp2_session_callbacks_set_data_source_read_length_callback(cbs,
                                                                 frame_len);
  nghttp2_session_server_new(&c->h2, cbs, c);
  nghttp2_session_callbacks_del(cbs);
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2);
  nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, 1 << 24);
  return c;
}

/* Reads what there is and writes what fits; 0, or -1 to drop |c|. */
static int conn_io(bconn *c, short revents) {
  uint8_t buf[65536];
  if (c->h2 == NULL) {
    return h1_io(c, revents);
  }
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    for (;;) {
      ssize_t n = read(c->fd, buf, sizeof(buf));
      if (n > 0) {
        if (nghttp2_session_mem_recv(c->h2, buf, (size_t)n) < 0) {
          return -1;
        }
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        return -1;
      }
      if (errno == EAGAIN) {
        break;
      }
    }
  }
  for (;;) {
    if (c->out_off == c->out_len) {
      const uint8_t *p;
      ssize_t n;
      c->out_off = c->out_len = 0;
      while (c->out_len < sizeof(c->out)) {
        n = nghttp2_session_mem_send(c->h2, &p);
        if (n < 0) {
          return -1;
        }
        if (n == 0) {
          break;
        }
        if ((size_t)n > sizeof(c->out) - c->out_len) {
          /* does not fit: write what is buffered, then this */
          ssize_t w;
          size_t off = 0;
          while (c->out_off < c->out_len) {
            w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
              return -1;
            }
            if (w > 0) {
              c->out_off += (size_t)w;
            } else {
              struct pollfd pf = {c->fd, POLLOUT, 0};
              poll(&pf, 1, -1);
            }
          }
          c->out_off = c->out_len = 0;
          while (off < (size_t)n) {
            w = write(c->fd, p + off, (size_t)n - off);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
              return -1;
            }
            if (w > 0) {
              off += (size_t)w;
            } else {
              struct pollfd pf = {c->fd, POLLOUT, 0};
              poll(&pf, 1, -1);
            }
          }
          continue;
        }
        memcpy(c->out + c->out_len, p, (size_t)n);
        c->out_len += (size_t)n;
      }
      if (c->out_len == 0) {
        break;
      }
    }
    {
      ssize_t w = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
      if (w < 0) {
        if (errno == EAGAIN) {
          break;
        }
        if (errno != EINTR) {
          return -1;
        }
      } else {
        c->out_off += (size_t)w;
      }
    }
  }
  if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2) &&
      c->out_off == c->out_len) {
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct sockaddr_in sa;
  socklen_t salen = sizeof(sa);
  struct pollfd pfd[MAX_CONNS + 1];
  bconn *conns[MAX_CONNS];
  int lfd, one = 1, n = 0, i;

  signal(SIGPIPE, SIG_IGN);
  build_list();
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons((uint16_t)(argc > 1 ? atoi(argv[1]) : 0));
  h1_mode = argc > 2 && strcmp(argv[2], "h1") == 0;
  if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(lfd, 64) != 0 ||
      getsockname(lfd, (struct sockaddr *)&sa, &salen) != 0) {
    perror("bench-server");
    return 1;
  }
  printf("listening %d\n", ntohs(sa.sin_port));
  fflush(stdout);
  for (;;) {
    pfd[0].fd = lfd;
    pfd[0].events = n < MAX_CONNS ? POLLIN : 0;
    for (i = 0; i < n; i++) {
      pfd[i + 1].fd = conns[i]->fd;
      pfd[i + 1].events = POLLIN;
      if ((conns[i]->h2 != NULL && nghttp2_session_want_write(conns[i]->h2)) ||
          conns[i]->out_off < conns[i]->out_len || conns[i]->answering) {
        pfd[i + 1].events |= POLLOUT;
      }
    }
    if (poll(pfd, (nfds_t)n + 1, -1) < 0) {
      continue;
    }
    for (i = n - 1; i >= 0; i--) {
      if (pfd[i + 1].revents != 0 && conn_io(conns[i], pfd[i + 1].revents) != 0) {
        conn_free(conns[i]);
        conns[i] = conns[--n];
      }
    }
    if (pfd[0].revents & POLLIN) {
      int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
      if (fd >= 0) {
        conns[n] = conn_new(fd);
        if (conn_io(conns[n], 0) == 0) {
          n++;
        } else {
          conn_free(conns[n]);
        }
      }
    }
  }
}
