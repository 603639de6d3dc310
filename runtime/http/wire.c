/* The wire layer both halves share (wire.h). */
#include "wire.h"

#include <string.h>
#include <strings.h>

#include "base64.h"
#include "mem_int.h"
#include "pbjson.h"

/* ---- Timeouts -------------------------------------------------------------- */

/* Digits of |v| as a number; -1 when one is not a digit. */
static int64_t digits(const char *v, size_t len) {
  int64_t n = 0;
  size_t i;

  for (i = 0; i < len; i++) {
    if (v[i] < '0' || v[i] > '9') {
      return -1;
    }
    n = n * 10 + (v[i] - '0');
  }
  return n;
}

int conch__connect_timeout_parse(const char *v, size_t len, int64_t *ms) {
  int64_t n;

  if (len > 10) {
    return CONCH_TIMEOUT_TOO_LONG;
  }
  n = digits(v, len);
  if (len == 0 || n < 0) {
    return CONCH_TIMEOUT_SYNTAX;
  }
  *ms = n;
  return 0;
}

size_t conch__put_dec(char *out, unsigned long long v) {
  char tmp[20]; /* 2^64 - 1 has 20 digits */
  size_t k = 0;
  size_t n = 0;

  do {
    tmp[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (k > 0) {
    out[n++] = tmp[--k];
  }
  return n;
}

/* Writes |n| >= 0 in decimal, then |unit| if not NUL, then a NUL. */
static int put_num(int64_t n, char unit, char out[CONCH_TIMEOUT_BUF]) {
  int len = (int)conch__put_dec(out, (unsigned long long)n);

  if (unit != '\0') {
    out[len++] = unit;
  }
  out[len] = '\0';
  return len;
}

int conch__connect_timeout_format(int64_t ms, char out[CONCH_TIMEOUT_BUF]) {
  if (ms < 0 || ms > CONCH_CONNECT_TIMEOUT_MAX) {
    return -1;
  }
  return put_num(ms, '\0', out);
}

int conch__grpc_timeout_parse(const char *v, size_t len, int64_t *ms) {
  int64_t n;

  if (len < 2) {
    return CONCH_TIMEOUT_SYNTAX;
  }
  if (len > 9) {
    return CONCH_TIMEOUT_TOO_LONG;
  }
  n = digits(v, len - 1);
  if (n < 0) {
    return CONCH_TIMEOUT_SYNTAX;
  }
  switch (v[len - 1]) {
  case 'H':
    *ms = n * 3600000;
    return 0;
  case 'M':
    *ms = n * 60000;
    return 0;
  case 'S':
    *ms = n * 1000;
    return 0;
  case 'm':
    *ms = n;
    return 0;
  case 'u':
    *ms = (n + 999) / 1000;
    return 0;
  case 'n':
    *ms = (n + 999999) / 1000000;
    return 0;
  default:
    return CONCH_TIMEOUT_SYNTAX;
  }
}

int conch__grpc_timeout_format(int64_t ms, char out[CONCH_TIMEOUT_BUF]) {
  static const struct {
    int64_t per;
    char unit;
  } units[] = {{1, 'm'}, {1000, 'S'}, {60000, 'M'}, {3600000, 'H'}};
  size_t i;

  if (ms < 0) {
    return -1;
  }
  for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (ms / units[i].per <= 99999999) {
      return put_num(ms / units[i].per, units[i].unit, out);
    }
  }
  return put_num(99999999, 'H', out);
}

/* ---- Content types --------------------------------------------------------- */

/* HTTP token characters (RFC 9110 5.6.2), as Go's mime package takes
   them. */
static int is_token(int c) {
  return c > 0x20 && c < 0x7f && strchr("()<>@,;:\\\"/[]?=", c) == NULL;
}

static int is_blank(int c) { return c == ' ' || c == '\t'; }

static size_t skip_blank(const char *v, size_t i, size_t len) {
  while (i < len && is_blank((unsigned char)v[i])) {
    i++;
  }
  return i;
}

/* Whether v[0..n) equals |want| (lower case) in any case. */
static int ieq(const char *v, size_t n, const char *want) {
  return strlen(want) == n && strncasecmp(v, want, n) == 0;
}

static int codec_of(const char *v, size_t n) {
  if (ieq(v, n, "proto")) {
    return CONCH_CT_PROTO;
  }
  if (ieq(v, n, "json")) {
    return CONCH_CT_JSON;
  }
  return CONCH_CT_OTHER;
}

/* The media type v[0..n), blanks trimmed. */
static int media_type(const char *v, size_t n, conch_ctype *out) {
  static const struct {
    const char *prefix;
    int family;
  } plus[] = {{"application/connect+", CONCH_CT_CONNECT_STREAM},
              {"application/grpc-web+", CONCH_CT_GRPC_WEB},
              {"application/grpc+", CONCH_CT_GRPC}};
  size_t i;

  if (n < 12 || strncasecmp(v, "application/", 12) != 0) {
    return -1;
  }
  if (ieq(v, n, "application/grpc")) {
    out->family = CONCH_CT_GRPC;
    out->codec = CONCH_CT_PROTO;
    return 0;
  }
  if (ieq(v, n, "application/grpc-web")) {
    out->family = CONCH_CT_GRPC_WEB;
    out->codec = CONCH_CT_PROTO;
    return 0;
  }
  for (i = 0; i < sizeof(plus) / sizeof(plus[0]); i++) {
    size_t k = strlen(plus[i].prefix);

    if (n >= k && strncasecmp(v, plus[i].prefix, k) == 0) {
      out->family = plus[i].family;
      out->codec = codec_of(v + k, n - k);
      return 0;
    }
  }
  out->family = CONCH_CT_CONNECT;
  out->codec = codec_of(v + 12, n - 12);
  return 0;
}

/* One "; name=value" at v[*i]: sets |*utf8| when it is charset=utf-8.
   Returns 0, 1 at a lone trailing ';', or -1 when it does not parse. */
static int media_param(const char *v, size_t len, size_t *pi, int *utf8) {
  size_t i = skip_blank(v, *pi, len);
  size_t name;
  size_t namelen;
  char value[8];
  size_t vn = 0;
  int fits = 1;

  if (i >= len || v[i] != ';') {
    return -1;
  }
  i = skip_blank(v, i + 1, len);
  if (i == len) {
    *pi = i;
    return 1;
  }
  name = i;
  while (i < len && is_token((unsigned char)v[i])) {
    i++;
  }
  namelen = i - name;
  i = skip_blank(v, i, len);
  if (namelen == 0 || i >= len || v[i] != '=') {
    return -1;
  }
  i = skip_blank(v, i + 1, len);
  if (i < len && v[i] == '"') {
    for (i++;; i++) {
      if (i >= len) {
        return -1;
      }
      if (v[i] == '"') {
        break;
      }
      if (v[i] == '\\' && i + 1 < len) {
        i++;
      }
      if (vn < sizeof(value)) {
        value[vn++] = v[i];
      } else {
        fits = 0;
      }
    }
    i++;
  } else {
    size_t start = i;

    while (i < len && is_token((unsigned char)v[i])) {
      if (vn < sizeof(value)) {
        value[vn++] = v[i];
      } else {
        fits = 0;
      }
      i++;
    }
    if (i == start) {
      return -1;
    }
  }
  *utf8 = ieq(v + name, namelen, "charset") && fits && ieq(value, vn, "utf-8");
  *pi = i;
  return 0;
}

int conch__ctype_parse(const char *v, size_t len, conch_ctype *out) {
  size_t start = skip_blank(v, 0, len);
  size_t end = start;
  size_t i;
  int nparams = 0;
  int utf8 = 0;
  int bad = 0;

  memset(out, 0, sizeof(*out));
  while (end < len && v[end] != ';') {
    end++;
  }
  i = end;
  while (end > start && is_blank((unsigned char)v[end - 1])) {
    end--;
  }
  if (media_type(v + start, end - start, out) != 0) {
    memset(out, 0, sizeof(*out));
    return -1;
  }
  while (!bad && skip_blank(v, i, len) < len) {
    int one = 0;
    int rv = media_param(v, len, &i, &one);

    if (rv == 1) {
      break;
    }
    if (rv < 0 || !one || utf8) {
      bad = 1;
    }
    utf8 = one;
    nparams++;
  }
  out->params = bad        ? CONCH_CT_BAD_PARAMS
                : nparams ? CONCH_CT_UTF8
                          : CONCH_CT_NO_PARAMS;
  return 0;
}

const char *conch__ctype_name(int family, int codec, int utf8) {
  static const char *const names[4][3] = {
      {"application/proto", "application/json",
       "application/json; charset=utf-8"},
      {"application/connect+proto", "application/connect+json",
       "application/connect+json; charset=utf-8"},
      {"application/grpc", "application/grpc+json",
       "application/grpc+json; charset=utf-8"},
      {"application/grpc-web+proto", "application/grpc-web+json",
       "application/grpc-web+json; charset=utf-8"}};

  if (family < CONCH_CT_CONNECT || family > CONCH_CT_GRPC_WEB) {
    return NULL;
  }
  if (codec == CONCH_CT_PROTO) {
    return utf8 ? NULL : names[family - CONCH_CT_CONNECT][0];
  }
  if (codec == CONCH_CT_JSON) {
    return names[family - CONCH_CT_CONNECT][utf8 ? 2 : 1];
  }
  return NULL;
}

/* ---- Connect error and end-stream JSON ------------------------------------- */

typedef struct jw {
  conch_buf *out;
  const conch_mem *mem;
  int rv;
} jw;

static void put(jw *w, const void *p, size_t n) {
  if (w->rv == 0 && n > 0) {
    w->rv = conch__buf_append(w->out, w->mem, p, n);
  }
}

static void puts_(jw *w, const char *s) { put(w, s, strlen(s)); }

/* A JSON string: escapes, and U+FFFD for what is not UTF-8 (messages
   quote client input: user names, tags, paths). */
static void put_string(jw *w, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t i = 0;
  size_t run = 0;

  put(w, "\"", 1);
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t k;

    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      i++;
      run++;
      continue;
    }
    put(w, s + i - run, run);
    run = 0;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      put(w, e, 2);
      i++;
    } else if (c < 0x20) {
      /* The short forms where JSON has them, as jansson writes them. */
      static const char ctl[] = "\b\f\n\r\t";
      const char *at = c != 0 ? strchr(ctl, c) : NULL;
      char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};

      if (at != NULL) {
        e[1] = "bfnrt"[at - ctl];
        put(w, e, 2);
      } else {
        put(w, e, 6);
      }
      i++;
    } else if ((k = conch__utf8_seq((const unsigned char *)s + i, n - i)) ==
               0) {
      put(w, "\xEF\xBF\xBD", 3);
      i++;
    } else {
      put(w, s + i, k);
      i += k;
    }
  }
  put(w, s + i - run, run);
  put(w, "\"", 1);
}

static void put_b64(jw *w, const uint8_t *p, size_t n) {
  size_t len = conch__b64_encoded_len(n);

  put(w, "\"", 1);
  if (w->rv == 0 && len > 0) {
    w->rv = conch__buf_reserve(w->out, w->mem, len);
    if (w->rv == 0) {
      w->out->len += conch__b64_encode(p, n, CONCH_B64_STD,
                                       (char *)w->out->data + w->out->len);
    }
  }
  put(w, "\"", 1);
}

static void put_error(jw *w, const conch_status *st) {
  size_t i;

  puts_(w, "{\"code\":\"");
  puts_(w, conch_code_name(st->code));
  put(w, "\"", 1);
  if (st->message != NULL && st->message[0] != '\0') {
    puts_(w, ",\"message\":");
    put_string(w, st->message, strlen(st->message));
  }
  if (st->ndetails > 0) {
    puts_(w, ",\"details\":[");
    for (i = 0; i < st->ndetails; i++) {
      const conch_error_detail *d = &st->details[i];
      const char *slash = strrchr(d->type_url, '/');
      const char *type = slash != NULL ? slash + 1 : d->type_url;

      puts_(w, i > 0 ? ",{\"type\":" : "{\"type\":");
      put_string(w, type, strlen(type));
      puts_(w, ",\"value\":");
      put_b64(w, d->value, d->len);
      put(w, "}", 1);
    }
    put(w, "]", 1);
  }
  put(w, "}", 1);
}

int conch__connect_error_write(conch_buf *out, const conch_mem *mem,
                               const conch_status *st) {
  jw w = {out, mem, 0};

  put_error(&w, st);
  return w.rv;
}

static int is_bin(const char *name) {
  size_t n = strlen(name);

  return n >= 4 && strcasecmp(name + n - 4, "-bin") == 0;
}

int conch__connect_end_write(conch_buf *out, const conch_mem *mem,
                             const conch_status *st,
                             const conch_metadata *trailers) {
  jw w = {out, mem, 0};
  size_t n = conch_metadata_count(trailers);
  size_t i;
  size_t j;
  const char *sep = "";

  put(&w, "{", 1);
  if (st != NULL && st->code != CONCH_CODE_OK) {
    puts_(&w, "\"error\":");
    put_error(&w, st);
    sep = ",";
  }
  if (n > 0) {
    puts_(&w, sep);
    puts_(&w, "\"metadata\":{");
    /* One member per name, its values in order: names are compared
       case-insensitively, so each first occurrence gathers the rest. */
    for (i = 0; i < n; i++) {
      const char *name;
      const uint8_t *value;
      size_t len;
      int first = 1;

      conch_metadata_at(trailers, i, &name, &value, &len);
      if (conch_metadata_find(trailers, name, 0) != (long)i) {
        continue;
      }
      if (i > 0) {
        put(&w, ",", 1);
      }
      put_string(&w, name, strlen(name));
      puts_(&w, ":[");
      for (j = i; j < n; j++) {
        const char *nj;

        conch_metadata_at(trailers, j, &nj, &value, &len);
        if (strcasecmp(nj, name) != 0) {
          continue;
        }
        if (!first) {
          put(&w, ",", 1);
        }
        first = 0;
        if (is_bin(name)) {
          put_b64(&w, value, len);
        } else {
          put_string(&w, (const char *)value, len);
        }
      }
      put(&w, "]", 1);
    }
    put(&w, "}", 1);
  }
  put(&w, "}", 1);
  return w.rv;
}

/* ---- HTTP ------------------------------------------------------------------ */

const char *conch__http_reason(int status) {
  switch (status) {
  case 100:
    return "Continue";
  case 101:
    return "Switching Protocols";
  case 200:
    return "OK";
  case 201:
    return "Created";
  case 202:
    return "Accepted";
  case 204:
    return "No Content";
  case 206:
    return "Partial Content";
  case 301:
    return "Moved Permanently";
  case 302:
    return "Found";
  case 303:
    return "See Other";
  case 304:
    return "Not Modified";
  case 307:
    return "Temporary Redirect";
  case 308:
    return "Permanent Redirect";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 402:
    return "Payment Required";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 406:
    return "Not Acceptable";
  case 407:
    return "Proxy Authentication Required";
  case 408:
    return "Request Timeout";
  case 409:
    return "Conflict";
  case 410:
    return "Gone";
  case 411:
    return "Length Required";
  case 412:
    return "Precondition Failed";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 415:
    return "Unsupported Media Type";
  case 416:
    return "Range Not Satisfiable";
  case 417:
    return "Expectation Failed";
  case 418:
    return "I'm a teapot";
  case 421:
    return "Misdirected Request";
  case 422:
    return "Unprocessable Content";
  case 423:
    return "Locked";
  case 424:
    return "Failed Dependency";
  case 425:
    return "Too Early";
  case 426:
    return "Upgrade Required";
  case 428:
    return "Precondition Required";
  case 429:
    return "Too Many Requests";
  case 431:
    return "Request Header Fields Too Large";
  case 451:
    return "Unavailable For Legal Reasons";
  case 499:
    return "Client Closed Request"; /* nginx's; grpc-gateway maps CANCELED */
  case 500:
    return "Internal Server Error";
  case 501:
    return "Not Implemented";
  case 502:
    return "Bad Gateway";
  case 503:
    return "Service Unavailable";
  case 504:
    return "Gateway Timeout";
  case 505:
    return "HTTP Version Not Supported";
  case 506:
    return "Variant Also Negotiates";
  case 507:
    return "Insufficient Storage";
  case 508:
    return "Loop Detected";
  case 510:
    return "Not Extended";
  case 511:
    return "Network Authentication Required";
  default:
    return NULL;
  }
}

int conch__http_from_code(conch_code code) {
  static const int http[] = {200, 499, 500, 400, 504, 404, 409, 403, 429,
                             400, 409, 400, 501, 500, 503, 500, 401};

  if ((int)code < 0 || (size_t)code >= sizeof(http) / sizeof(http[0])) {
    return 500;
  }
  return http[code];
}

int conch__h1_hop_by_hop(const uint8_t *name, size_t len) {
  const char *n = (const char *)name;
  int c0 = len > 0 ? name[0] | 0x20 : 0; /* lowercased if a letter */

  /* By length and first letter: most names are none of these and cost a
     switch and a comparison (every field of every HTTP/1.1 message
     passes here). */
  switch (len) {
  case 2:
    return c0 == 't' && ieq(n, len, "te");
  case 7:
    return (c0 == 'u' && ieq(n, len, "upgrade")) ||
           (c0 == 't' && ieq(n, len, "trailer"));
  case 10:
    return (c0 == 'c' && ieq(n, len, "connection")) ||
           (c0 == 'k' && ieq(n, len, "keep-alive"));
  case 14:
    return c0 == 'h' && ieq(n, len, "http2-settings");
  case 16:
    return c0 == 'p' && ieq(n, len, "proxy-connection");
  case 17:
    return c0 == 't' && ieq(n, len, "transfer-encoding");
  default:
    return 0;
  }
}

size_t conch__h1_chunk_head(size_t n, char out[CONCH_CHUNK_HEAD]) {
  static const char hex[] = "0123456789abcdef";
  char tmp[16];
  size_t k = 0;
  size_t len = 0;

  do {
    tmp[k++] = hex[n & 15];
    n >>= 4;
  } while (n > 0);
  while (k > 0) {
    out[len++] = tmp[--k];
  }
  out[len++] = '\r';
  out[len++] = '\n';
  return len;
}

int conch__h1_chunk_append(conch_buf *out, const conch_mem *mem,
                           const uint8_t *p, size_t n) {
  char head[CONCH_CHUNK_HEAD];
  size_t hn;
  int rv;

  if (n == 0) {
    return 0;
  }
  hn = conch__h1_chunk_head(n, head);
  rv = conch__buf_reserve(out, mem, hn + n + 2);
  if (rv != 0) {
    return rv;
  }
  conch__buf_append(out, mem, head, hn);
  conch__buf_append(out, mem, p, n);
  conch__buf_append(out, mem, "\r\n", 2);
  return 0;
}

/* ---- nghttp2 sessions ------------------------------------------------------ */

void conch__h2_mem(nghttp2_mem *out, const conch_mem *mem) {
  /* conch_mem has nghttp2_mem's layout, field by field. */
  out->mem_user_data = mem->user_data;
  out->malloc = mem->malloc;
  out->free = mem->free;
  out->calloc = mem->calloc;
  out->realloc = mem->realloc;
}

/* A DATA frame as large as the windows, the peer's SETTINGS_MAX_FRAME_SIZE
   and CONCH__H2_SEND_FRAME_MAX allow (big_frames). */
static ssize_t frame_len(nghttp2_session *h2, uint8_t type, int32_t id,
                         int32_t conn_window, int32_t stream_window,
                         uint32_t peer_max, void *ud) {
  int32_t n = conn_window < stream_window ? conn_window : stream_window;
  (void)h2;
  (void)type;
  (void)id;
  (void)ud;
  if (peer_max > CONCH__H2_SEND_FRAME_MAX) {
    peer_max = CONCH__H2_SEND_FRAME_MAX;
  }
  if (n <= 0) {
    return 1; /* nghttp2 defers the stream itself; never 0 */
  }
  return (uint32_t)n < peer_max ? (ssize_t)n : (ssize_t)peer_max;
}

static void set_callbacks(nghttp2_session_callbacks *cbs,
                          const conch_h2_setup *s) {
  if (s->big_frames) {
    nghttp2_session_callbacks_set_data_source_read_length_callback(cbs,
                                                                   frame_len);
  }
  if (s->begin_headers != NULL) {
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs,
                                                            s->begin_headers);
  }
  if (s->header != NULL) {
    nghttp2_session_callbacks_set_on_header_callback(cbs, s->header);
  }
  if (s->frame_recv != NULL) {
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, s->frame_recv);
  }
  if (s->frame_send != NULL) {
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, s->frame_send);
  }
  if (s->data_chunk != NULL) {
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs,
                                                              s->data_chunk);
  }
  if (s->stream_close != NULL) {
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs,
                                                           s->stream_close);
  }
  if (s->error != NULL) {
    nghttp2_session_callbacks_set_error_callback2(cbs, s->error);
  }
  if (s->send_data != NULL) {
    nghttp2_session_callbacks_set_send_data_callback(cbs, s->send_data);
  }
}

static void set_options(nghttp2_option *opt, const conch_h2_setup *s) {
  if (s->manual_window) {
    nghttp2_option_set_no_auto_window_update(opt, 1);
  }
  if (s->no_http_messaging) {
    nghttp2_option_set_no_http_messaging(opt, 1);
  }
  if (s->peer_max_streams != 0) {
    nghttp2_option_set_peer_max_concurrent_streams(opt, s->peer_max_streams);
  }
  if (s->max_send_header_block != 0) {
    nghttp2_option_set_max_send_header_block_length(opt,
                                                    s->max_send_header_block);
  }
}

/* Our SETTINGS and connection window. */
static int send_settings(nghttp2_session *h2, const conch_h2_setup *s) {
  nghttp2_settings_entry iv[5];
  size_t n = 0;
  int rv;

  if (!s->server) {
    iv[n].settings_id = NGHTTP2_SETTINGS_ENABLE_PUSH;
    iv[n++].value = 0;
  }
  if (s->max_streams != 0) {
    iv[n].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
    iv[n++].value = s->max_streams;
  }
  if (s->stream_window != 0) {
    iv[n].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    iv[n++].value = s->stream_window;
  }
  if (s->max_header_list != 0) {
    iv[n].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
    iv[n++].value = s->max_header_list;
  }
  if (s->max_frame != 0) {
    iv[n].settings_id = NGHTTP2_SETTINGS_MAX_FRAME_SIZE;
    iv[n++].value = s->max_frame;
  }
  rv = nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, iv, n);
  if (rv == 0 && s->conn_window != 0) {
    rv = nghttp2_session_set_local_window_size(h2, NGHTTP2_FLAG_NONE, 0,
                                               (int32_t)s->conn_window);
  }
  return rv;
}

int conch__h2_session_new(nghttp2_session **out, const conch_h2_setup *s,
                          void *user_data) {
  nghttp2_session_callbacks *cbs;
  nghttp2_option *opt;
  nghttp2_mem mem;
  int own_mem = s->h2_mem != NULL || s->mem != NULL;
  int rv;

  *out = NULL;
  if (s->h2_mem != NULL) {
    mem = *s->h2_mem;
  } else if (s->mem != NULL) {
    conch__h2_mem(&mem, s->mem);
  }
  if (nghttp2_session_callbacks_new(&cbs) != 0) {
    return CONCH_ERR_NOMEM;
  }
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cbs);
    return CONCH_ERR_NOMEM;
  }
  set_callbacks(cbs, s);
  set_options(opt, s);
  if (s->server) {
    rv = nghttp2_session_server_new3(out, cbs, user_data, opt,
                                     own_mem ? &mem : NULL);
  } else {
    rv = nghttp2_session_client_new3(out, cbs, user_data, opt,
                                     own_mem ? &mem : NULL);
  }
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) {
    *out = NULL;
    return CONCH_ERR_NOMEM;
  }
  rv = send_settings(*out, s);
  if (rv != 0) {
    nghttp2_session_del(*out);
    *out = NULL;
    return nghttp2_is_fatal(rv) ? CONCH_ERR_NOMEM : CONCH_ERR_SESSION;
  }
  return 0;
}
