/* The wire layer both halves share (wire.c): what a client and a server
   write and read the same way.  Timeouts (Connect-Timeout-Ms,
   grpc-timeout), RPC content types, the Connect error and end-stream JSON
   (writers; status.c has the readers), HTTP reason phrases, HTTP/1.1
   hop-by-hop fields and chunks, and nghttp2 session setup.  Private to
   the runtime and its in-tree tools; nothing here is ABI. */
#ifndef CONCH_WIRE_H
#define CONCH_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include <conch/mem.h>
#include <conch/metadata.h>
#include <conch/status.h>

#include "buf.h"

/* ---- Timeouts -------------------------------------------------------------- */

/* Room for a formatted timeout and its NUL (10 digits, or 8 and a unit). */
enum { CONCH_TIMEOUT_BUF = 12 };

/* Writes |v| in decimal at |out| (20 bytes at most, no NUL); returns its
   length. */
size_t conch__put_dec(char *out, unsigned long long v);
/* Connect-Timeout-Ms holds at most 10 digits. */
#define CONCH_CONNECT_TIMEOUT_MAX 9999999999LL

enum { CONCH_TIMEOUT_SYNTAX = -1, CONCH_TIMEOUT_TOO_LONG = -2 };

/* Connect-Timeout-Ms: 1 to 10 ASCII digits, nothing else (no sign, no
   blanks).  Returns 0 with |*ms|, CONCH_TIMEOUT_TOO_LONG (more than 10
   characters, whatever they are: connect-go's first check) or
   CONCH_TIMEOUT_SYNTAX. */
int conch__connect_timeout_parse(const char *v, size_t len, int64_t *ms);
/* Writes |ms| (0 to CONCH_CONNECT_TIMEOUT_MAX) with a NUL into |out|
   (CONCH_TIMEOUT_BUF bytes).  Returns its length, or -1 when |ms| does not
   fit (more than 10 digits means no limit worth sending). */
int conch__connect_timeout_format(int64_t ms, char out[CONCH_TIMEOUT_BUF]);

/* grpc-timeout: 1 to 8 ASCII digits and one unit of H M S m u n (gRPC's
   PROTOCOL-HTTP2).  Returns 0 with |*ms|, rounded up to whole
   milliseconds (so that 1n is not already over), or CONCH_TIMEOUT_SYNTAX
   (CONCH_TIMEOUT_TOO_LONG for more than 8 digits). */
int conch__grpc_timeout_parse(const char *v, size_t len, int64_t *ms);
/* Writes |ms| (>= 0) with a NUL into |out|: milliseconds while they fit in
   8 digits, then coarser units, truncating (never more than the time
   left), 99999999H at most.  Returns its length, or -1 for a negative
   |ms|. */
int conch__grpc_timeout_format(int64_t ms, char out[CONCH_TIMEOUT_BUF]);

/* ---- Content types --------------------------------------------------------- */

/* The protocol a content type names.  CONCH_CT_CONNECT is Connect unary
   (and any other "application/x": its codec is then CONCH_CT_OTHER). */
enum {
  CONCH_CT_CONNECT = 1,    /* application/proto, application/json */
  CONCH_CT_CONNECT_STREAM, /* application/connect+proto|json */
  CONCH_CT_GRPC,           /* application/grpc[+proto|json] */
  CONCH_CT_GRPC_WEB        /* application/grpc-web[+proto|json] */
};
/* The codec.  The bare gRPC forms are proto. */
enum { CONCH_CT_PROTO = 1, CONCH_CT_JSON, CONCH_CT_OTHER };
/* The parameters after the media type. */
enum {
  CONCH_CT_NO_PARAMS = 0,
  CONCH_CT_UTF8,      /* exactly one: charset=utf-8 (any case, quoted or not) */
  CONCH_CT_BAD_PARAMS /* any other parameter, or ones that do not parse */
};

typedef struct conch_ctype {
  int family; /* CONCH_CT_CONNECT... */
  int codec;  /* CONCH_CT_PROTO... */
  int params; /* CONCH_CT_NO_PARAMS... */
} conch_ctype;

/* Parses a Content-Type value of |len| bytes: the media type (blanks
   around it and case ignored), then "; name=value" parameters (token or
   quoted-string values, RFC 9110 5.6.6; one trailing ';' passes, as in
   Go's mime package).  Returns 0 with |*out|, or -1 when it is not an
   "application/" type (|*out| zeroed). */
int conch__ctype_parse(const char *v, size_t len, conch_ctype *out);
/* The content type that names |family| and |codec| (CONCH_CT_PROTO or
   CONCH_CT_JSON), with "; charset=utf-8" if |utf8|; static.  gRPC proto
   is the bare "application/grpc".  NULL for an unknown pair. */
const char *conch__ctype_name(int family, int codec, int utf8);

/* ---- Connect error and end-stream JSON (CONNECT_PROTOCOL.md 1.3, 2.2) ----- */

/* Appends the Connect error object of |st| to |out|:
   {"code":"not_found","message":"...","details":[{"type":"pkg.Msg",
   "value":"base64"}]}, message and details only when present.  Text that
   is not UTF-8 becomes U+FFFD.  |st->code| must not be OK.  Returns 0 or
   CONCH_ERR_NOMEM (|out| may hold part of it). */
int conch__connect_error_write(conch_buf *out, const conch_mem *mem,
                               const conch_status *st);
/* Appends a Connect end-stream message: {"error":{...}} unless |st| is OK
   (NULL: OK), then "metadata" with the pairs of |trailers| (NULL or empty:
   none), values of "-bin" names in base64.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__connect_end_write(conch_buf *out, const conch_mem *mem,
                             const conch_status *st,
                             const conch_metadata *trailers);

/* ---- HTTP ------------------------------------------------------------------ */

/* The reason phrase of |status| as RFC 9110 (and Go's net/http) words it,
   or NULL for a status it does not name. */
const char *conch__http_reason(int status);

/* The HTTP status of a Connect unary error with |code|
   (CONNECT_PROTOCOL.md 5.1, column 4); 500 for a code out of range. */
int conch__http_from_code(conch_code code);

/* Whether |name| (any case) is a connection-specific field of HTTP/1.1
   that HTTP/2 has none of (RFC 9113 8.2.2): Connection, Keep-Alive,
   Proxy-Connection, Transfer-Encoding, Upgrade, TE, Trailer,
   HTTP2-Settings. */
int conch__h1_hop_by_hop(const uint8_t *name, size_t len);

/* Room for a chunk head: 16 hex digits and CRLF. */
enum { CONCH_CHUNK_HEAD = 18 };
/* Writes the head of a chunk of |n| bytes ("1f4\r\n") into |out| and
   returns its length. */
size_t conch__h1_chunk_head(size_t n, char out[CONCH_CHUNK_HEAD]);
/* Appends |n| bytes as one chunk (head, data, CRLF) to |out|; nothing for
   n == 0, which would end the body.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__h1_chunk_append(conch_buf *out, const conch_mem *mem,
                           const uint8_t *p, size_t n);
/* The last chunk and the end of an empty trailer section. */
#define CONCH_CHUNK_LAST "0\r\n\r\n"

/* ---- nghttp2 sessions ------------------------------------------------------ */

/* The largest DATA frame a session with big_frames sends: a 64 KiB message
   and its envelope in one frame, which the peer can then decode where it
   lies.  nghttp2 grows the session's frame buffer to the largest frame it
   sent (copied DATA), so this is also what a connection that sent large
   messages keeps. */
#define CONCH__H2_SEND_FRAME_MAX (64u * 1024 + 1024)

/* nghttp2's allocator hooks from |mem| (the same five functions). */
void conch__h2_mem(nghttp2_mem *out, const conch_mem *mem);

/* One nghttp2 session: what every session of conch (client, server, the
   HTTP/1.1 bridges) sets, in one place.  Zero means "nghttp2's default"
   (or "not sent") for every number. */
typedef struct conch_h2_setup {
  int server;            /* a server session (else a client one) */
  const conch_mem *mem;  /* NULL: nghttp2's own allocator */
  /* nghttp2's allocator hooks as they are (copied), before |mem|: the
     client's, which keep small blocks per connection. */
  const nghttp2_mem *h2_mem;
  nghttp2_on_begin_headers_callback begin_headers;
  nghttp2_on_header_callback header;
  nghttp2_on_frame_recv_callback frame_recv;
  nghttp2_on_frame_send_callback frame_send;
  nghttp2_on_data_chunk_recv_callback data_chunk;
  nghttp2_on_stream_close_callback stream_close;
  nghttp2_error_callback2 error;
  nghttp2_send_data_callback send_data;
  /* DATA frames as large as the peer's SETTINGS_MAX_FRAME_SIZE and the
     windows allow, up to CONCH__H2_SEND_FRAME_MAX (0: nghttp2's 16384). */
  int big_frames;
  int manual_window;     /* no automatic WINDOW_UPDATE */
  int no_http_messaging; /* the peer is our own bridge */
  uint32_t peer_max_streams;     /* assumed until the peer's SETTINGS */
  size_t max_send_header_block;  /* largest header block we send */
  /* Our SETTINGS (always sent, with ENABLE_PUSH 0 from a client). */
  uint32_t max_streams;          /* MAX_CONCURRENT_STREAMS */
  uint32_t stream_window;        /* INITIAL_WINDOW_SIZE */
  uint32_t max_header_list;      /* MAX_HEADER_LIST_SIZE */
  uint32_t max_frame;            /* MAX_FRAME_SIZE (0: the default 16384) */
  uint32_t conn_window;          /* our connection window */
} conch_h2_setup;

/* Makes the session of |s| with |user_data| and queues its SETTINGS (and
   the connection window).  Returns 0, CONCH_ERR_NOMEM or
   CONCH_ERR_SESSION (*out is then NULL). */
int conch__h2_session_new(nghttp2_session **out, const conch_h2_setup *s,
                          void *user_data);

#endif
