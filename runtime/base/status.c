/* Return codes, RPC codes and every mapping onto a Connect code: HTTP
   status, RST_STREAM, local errors, the Connect error and end-stream JSON,
   and the gRPC status trailers (CONNECT_PROTOCOL.md 1.3-1.4, 2.2-2.3,
   3.3-3.4, 5). */
#include "status_int.h"

#include <stdio.h>
#include <string.h>

#include "base64.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "json.h"
#include "wire.h"

static const char TYPE_PREFIX[] = "type.googleapis.com/";

static const char *const code_names[] = {
    "ok",
    "canceled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
};

const char *conch_strerror(int rv) {
  switch (rv) {
  case 0:
    return "success";
  case CONCH_ERR_INVALID:
    return "invalid argument";
  case CONCH_ERR_NOMEM:
    return "out of memory";
  case CONCH_ERR_RPC:
    return "RPC failed; see the status";
  case CONCH_ERR_STATE:
    return "operation not allowed in the current state";
  case CONCH_ERR_AGAIN:
    return "operation would block; try again";
  case CONCH_ERR_RECURSIVE:
    return "recursive call from a callback";
  case CONCH_ERR_EOF:
    return "end of stream";
  case CONCH_ERR_IO:
    return "system call failed";
  case CONCH_ERR_TLS:
    return "TLS error";
  case CONCH_ERR_PROTO:
    return "protocol error";
  case CONCH_ERR_LIMIT:
    return "size limit exceeded";
  case CONCH_ERR_TIMEOUT:
    return "deadline exceeded";
  case CONCH_ERR_CANCELED:
    return "operation canceled";
  case CONCH_ERR_GZIP:
    return "invalid compressed data";
  case CONCH_ERR_HEADER:
    return "metadata name or value not allowed";
  case CONCH_ERR_URL:
    return "invalid URL";
  case CONCH_ERR_RESOLVE:
    return "host name resolution failed";
  case CONCH_ERR_CONNECT:
    return "connection failed or lost";
  case CONCH_ERR_CODEC:
    return "message serialization failed";
  case CONCH_ERR_UNSUPPORTED:
    return "not supported";
  case CONCH_ERR_CAPABILITY:
    return "server lacks a required capability";
  case CONCH_ERR_FATAL:
    return "fatal error";
  case CONCH_ERR_SESSION:
    return "HTTP/2 session failed";
  default:
    return "unknown error code";
  }
}

const char *conch_code_name(conch_code code) {
  if ((int)code < 0 || (int)code > (int)CONCH_CODE_UNAUTHENTICATED) {
    return NULL;
  }
  return code_names[code];
}

int conch_code_parse(const char *name, size_t len) {
  int i;

  if (name == NULL) {
    return -1;
  }
  /* Starts at 1: "ok" never appears on the wire. */
  for (i = 1; i <= (int)CONCH_CODE_UNAUTHENTICATED; ++i) {
    if (strlen(code_names[i]) == len && memcmp(code_names[i], name, len) == 0) {
      return i;
    }
  }
  return -1;
}

static const conch_mem *mem_or_default(const conch_mem *mem) {
  return mem != NULL ? mem : conch_mem_default();
}

void conch_status_init(conch_status *st) {
  if (st == NULL) {
    return;
  }
  memset(st, 0, sizeof(*st));
  st->code = CONCH_CODE_OK;
  st->origin = CONCH_ORIGIN_NONE;
  st->message = NULL;
  st->details = NULL;
  st->mem = NULL;
}

/* Frees message and details, keeping the scalar fields. */
static void status_free_parts(conch_status *st) {
  const conch_mem *mem = mem_or_default(st->mem);
  size_t i;

  for (i = 0; i < st->ndetails; ++i) {
    conch__free(mem, st->details[i].type_url);
    conch__free(mem, st->details[i].value);
  }
  conch__free(mem, st->details);
  conch__free(mem, st->message);
  st->details = NULL;
  st->ndetails = 0;
  st->message = NULL;
}

void conch_status_clear(conch_status *st) {
  if (st == NULL) {
    return;
  }
  status_free_parts(st);
  conch_status_init(st);
}

/* The allocator for new parts of |st|: whichever owns what it already
   holds, else |mem|.  Mixing two allocators in one status would make
   conch_status_clear() free with the wrong one. */
static const conch_mem *status_mem(conch_status *st, const conch_mem *mem) {
  if (st->message == NULL && st->details == NULL) {
    st->mem = mem_or_default(mem);
  } else if (st->mem == NULL) {
    st->mem = conch_mem_default();
  }
  return st->mem;
}

/* Appends a detail whose type URL is |prefix| followed by |type|. */
static int status_push_detail(conch_status *st, const conch_mem *mem,
                              const char *prefix, size_t prefix_len,
                              const char *type, size_t type_len,
                              const uint8_t *value, size_t len) {
  conch_error_detail *details;
  char *type_url;
  uint8_t *copy;
  size_t n = st->ndetails;

  if (type_len > SIZE_MAX - 1 - prefix_len ||
      n >= SIZE_MAX / sizeof(*details) - 1) {
    return CONCH_ERR_NOMEM;
  }
  mem = status_mem(st, mem);
  type_url = conch__malloc(mem, prefix_len + type_len + 1);
  if (type_url == NULL) {
    return CONCH_ERR_NOMEM;
  }
  memcpy(type_url, prefix, prefix_len);
  if (type_len > 0) {
    memcpy(type_url + prefix_len, type, type_len);
  }
  type_url[prefix_len + type_len] = '\0';
  copy = conch__memdup(mem, value, len);
  if (copy == NULL) {
    conch__free(mem, type_url);
    return CONCH_ERR_NOMEM;
  }
  details = conch__realloc(mem, st->details, (n + 1) * sizeof(*details));
  if (details == NULL) {
    conch__free(mem, copy);
    conch__free(mem, type_url);
    return CONCH_ERR_NOMEM;
  }
  details[n].type_url = type_url;
  details[n].value = copy;
  details[n].len = len;
  st->details = details;
  st->ndetails = n + 1;
  return 0;
}

int conch__status_add_detail(conch_status *st, const conch_mem *mem,
                             const char *type, size_t type_len,
                             const uint8_t *value, size_t len) {
  if (type_len > 0 && memchr(type, '/', type_len) != NULL) {
    return status_push_detail(st, mem, "", 0, type, type_len, value, len);
  }
  return status_push_detail(st, mem, TYPE_PREFIX, sizeof(TYPE_PREFIX) - 1, type,
                            type_len, value, len);
}

int conch_status_copy(conch_status *dst, const conch_status *src,
                      const conch_mem *mem) {
  const conch_error_detail *d;
  size_t i;
  int rv;

  if (dst == NULL || src == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (dst == src) {
    return 0;
  }
  conch_status_clear(dst);
  dst->code = src->code;
  dst->origin = src->origin;
  dst->http_status = src->http_status;
  dst->local_err = src->local_err;
  dst->mem = mem_or_default(mem);
  if (src->message != NULL) {
    dst->message = conch__strdup(dst->mem, src->message);
    if (dst->message == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  for (i = 0; i < src->ndetails; ++i) {
    d = &src->details[i];
    /* Copied verbatim: no prefix even if the source lacks a '/'. */
    rv = status_push_detail(dst, dst->mem, "", 0, d->type_url,
                            strlen(d->type_url), d->value, d->len);
    if (rv != 0) {
      status_free_parts(dst);
      return rv;
    }
  }
  return 0;
}

const char *conch_status_message(const conch_status *st) {
  const char *name;

  if (st == NULL) {
    return "ok";
  }
  if (st->message != NULL && st->message[0] != '\0') {
    return st->message;
  }
  name = conch_code_name(st->code);
  return name != NULL ? name : "unknown";
}

static CONCH_PRINTF(2, 0) char *vformat(const conch_mem *mem, const char *fmt,
                                        va_list ap) {
  va_list aq;
  char *s;
  int n;

  va_copy(aq, ap);
  n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (n < 0) {
    return NULL;
  }
  s = conch__malloc(mem, (size_t)n + 1);
  if (s == NULL) {
    return NULL;
  }
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

int conch__status_vset(conch_status *st, const conch_mem *mem, conch_code code,
                       conch_origin origin, int local_err, const char *fmt,
                       va_list ap) {
  if (st->code != CONCH_CODE_OK) {
    return 0;
  }
  /* An OK status may still carry parts (an OK grpc-status-details-bin). */
  status_free_parts(st);
  mem = status_mem(st, mem);
  st->code = code;
  st->origin = origin;
  st->local_err = local_err;
  if (fmt != NULL) {
    st->message = vformat(mem, fmt, ap);
  }
  return 1;
}

int conch__status_set(conch_status *st, const conch_mem *mem, conch_code code,
                      conch_origin origin, int local_err, const char *fmt,
                      ...) {
  va_list ap;
  int rv;

  va_start(ap, fmt);
  rv = conch__status_vset(st, mem, code, origin, local_err, fmt, ap);
  va_end(ap);
  return rv;
}

int conch_status_vsetf(conch_status *st, const conch_mem *mem, conch_code code,
                       const char *fmt, va_list ap) {
  if (st == NULL || (int)code < 0 || (int)code > 16) {
    return CONCH_ERR_INVALID;
  }
  conch_status_clear(st); /* vset sets only an OK status */
  conch__status_vset(st, mem, code, CONCH_ORIGIN_LOCAL, 0, fmt, ap);
  return fmt != NULL && st->message == NULL ? CONCH_ERR_NOMEM : 0;
}

int conch_status_setf(conch_status *st, const conch_mem *mem, conch_code code,
                      const char *fmt, ...) {
  va_list ap;
  int rv;

  va_start(ap, fmt);
  rv = conch_status_vsetf(st, mem, code, fmt, ap);
  va_end(ap);
  return rv;
}

/* Moves the parts of |tmp| into |st| with the given code and origin,
   replacing what |st| held.  |tmp| is left empty. */
static void status_take(conch_status *st, conch_status *tmp, int code,
                        conch_origin origin) {
  status_free_parts(st);
  st->code = (conch_code)code;
  st->origin = origin;
  st->local_err = 0;
  st->message = tmp->message;
  st->details = tmp->details;
  st->ndetails = tmp->ndetails;
  st->mem = tmp->mem;
  conch_status_init(tmp);
}

conch_code conch__code_from_http(int http_status) {
  switch (http_status) {
  case 400:
    return CONCH_CODE_INTERNAL;
  case 401:
    return CONCH_CODE_UNAUTHENTICATED;
  case 403:
    return CONCH_CODE_PERMISSION_DENIED;
  case 404:
    return CONCH_CODE_UNIMPLEMENTED;
  case 429:
  case 502:
  case 503:
  case 504:
    return CONCH_CODE_UNAVAILABLE;
  default:
    return CONCH_CODE_UNKNOWN;
  }
}

conch_code conch__code_from_err(int err) {
  switch (err) {
  case CONCH_ERR_CONNECT:
  case CONCH_ERR_IO:
  case CONCH_ERR_TLS:
  case CONCH_ERR_RESOLVE:
    return CONCH_CODE_UNAVAILABLE;
  case CONCH_ERR_TIMEOUT:
    return CONCH_CODE_DEADLINE_EXCEEDED;
  case CONCH_ERR_CANCELED:
    return CONCH_CODE_CANCELED;
  case CONCH_ERR_LIMIT:
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  default:
    return CONCH_CODE_INTERNAL;
  }
}

conch_code conch__code_from_rst(uint32_t h2_error, int deadline_passed) {
  switch (h2_error) {
  case 0x0: /* NO_ERROR */
    return CONCH_CODE_OK;
  case 0x7: /* REFUSED_STREAM */
    return CONCH_CODE_UNAVAILABLE;
  case 0x8: /* CANCEL */
    return deadline_passed ? CONCH_CODE_DEADLINE_EXCEEDED : CONCH_CODE_CANCELED;
  case 0xb: /* ENHANCE_YOUR_CALM */
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  case 0xc: /* INADEQUATE_SECURITY */
    return CONCH_CODE_PERMISSION_DENIED;
  default:
    return CONCH_CODE_INTERNAL;
  }
}

/* Sets |st->message| to "HTTP status 503 Service Unavailable". */
static int set_http_message(conch_status *st, int http_status) {
  const char *reason = conch__http_reason(http_status);
  char buf[80];
  int n;

  if (reason != NULL) {
    n = snprintf(buf, sizeof(buf), "HTTP status %d %s", http_status, reason);
  } else {
    n = snprintf(buf, sizeof(buf), "HTTP status %d", http_status);
  }
  if (n < 0 || (size_t)n >= sizeof(buf)) {
    return 0;
  }
  st->message = conch__strndup(st->mem, buf, (size_t)n);
  if (st->message == NULL) {
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

/* The string at |at| of |p|, decoded into a new NUL-terminated block
   (|*len| its length), or NULL when out of memory. */
static char *json_dup(const uint8_t *p, size_t at, const conch_mem *mem,
                      size_t *len) {
  size_t n = conch__json_strlen(p, at);
  char *s = n < SIZE_MAX ? conch__malloc(mem, n + 1) : NULL;

  if (s != NULL) {
    *len = conch__json_string(p, at, s);
  }
  return s;
}

/* The value of the last member |name| of the object at |obj|, or
   (size_t)-1 (a repeated key: the last wins, as in jansson, Go and
   JavaScript). */
#define JSON_NONE ((size_t)-1)

static size_t json_get(const uint8_t *p, size_t n, size_t obj,
                       const char *name) {
  size_t it = obj, key, value, found = JSON_NONE;

  while (conch__json_member(p, n, &it, &key, &value)) {
    if (conch__json_string_is(p, key, name)) {
      found = value;
    }
  }
  return found;
}

static int json_is(const uint8_t *p, size_t at, int kind) {
  return at != JSON_NONE && conch__json_kind(p, at) == kind;
}

/* Present and not null. */
static int json_given(const uint8_t *p, size_t at) {
  return at != JSON_NONE && conch__json_kind(p, at) != CONCH_JSON_NULL;
}

/* Decodes one element of a "details" array into |tmp|.  Returns 0,
   CONCH_ERR_PROTO (the element is malformed) or CONCH_ERR_NOMEM. */
static int json_detail(const uint8_t *p, size_t n, size_t d,
                       const conch_mem *mem, conch_status *tmp) {
  size_t type, value, tlen, b64_len, len;
  char *t, *b64;
  uint8_t *raw = NULL;
  int rv;

  if (!json_is(p, d, CONCH_JSON_OBJECT)) {
    return CONCH_ERR_PROTO;
  }
  type = json_get(p, n, d, "type");
  value = json_get(p, n, d, "value");
  if (!json_is(p, type, CONCH_JSON_STRING) ||
      !json_is(p, value, CONCH_JSON_STRING)) {
    return CONCH_ERR_PROTO;
  }
  t = json_dup(p, type, mem, &tlen);
  b64 = json_dup(p, value, mem, &b64_len);
  if (t != NULL && b64 != NULL) {
    raw = conch__malloc(mem, conch__b64_decoded_max(b64_len) + 1);
  }
  if (raw == NULL) {
    rv = CONCH_ERR_NOMEM;
  } else if (conch__b64_decode(b64, b64_len, CONCH_B64_STD, raw, &len) != 0) {
    rv = CONCH_ERR_PROTO;
  } else {
    rv = conch__status_add_detail(tmp, mem, t, tlen, raw, len);
  }
  conch__free(mem, raw);
  conch__free(mem, b64);
  conch__free(mem, t);
  return rv;
}

/* Reads the Connect Error object (1.4) at |obj| into |tmp| (message and
   details) and |*code| (-1 when missing, null or unknown).  With |strict|
   (end-stream), a code, message or details member of the wrong type is an
   error; without it (unary), a mistyped code or message counts as absent.
   A malformed detail is always an error.  Returns 0, CONCH_ERR_PROTO or
   CONCH_ERR_NOMEM; |tmp| may hold parts on failure. */
static int json_error(const uint8_t *p, size_t n, size_t obj,
                      const conch_mem *mem, int strict, conch_status *tmp,
                      int *code) {
  size_t jcode, jmsg, jdetails, it, d, len;
  char name[32];
  int rv;

  *code = -1;
  jcode = json_get(p, n, obj, "code");
  jmsg = json_get(p, n, obj, "message");
  jdetails = json_get(p, n, obj, "details");
  if (json_is(p, jcode, CONCH_JSON_STRING)) {
    /* No code's name is this long: such a string is an unknown code. */
    if (conch__json_strlen(p, jcode) < sizeof(name)) {
      len = conch__json_string(p, jcode, name);
      *code = conch_code_parse(name, len);
    }
  } else if (strict && json_given(p, jcode)) {
    return CONCH_ERR_PROTO;
  }
  if (strict && json_given(p, jmsg) && !json_is(p, jmsg, CONCH_JSON_STRING)) {
    return CONCH_ERR_PROTO;
  }
  if (json_given(p, jdetails)) {
    if (!json_is(p, jdetails, CONCH_JSON_ARRAY)) {
      return CONCH_ERR_PROTO;
    }
    it = jdetails;
    while (conch__json_element(p, n, &it, &d)) {
      rv = json_detail(p, n, d, mem, tmp);
      if (rv != 0) {
        return rv;
      }
    }
  }
  /* An empty message counts as none: conch_status_message() then gives
     the code's name. */
  if (json_is(p, jmsg, CONCH_JSON_STRING) && conch__json_strlen(p, jmsg) > 0) {
    mem = status_mem(tmp, mem);
    tmp->message = json_dup(p, jmsg, mem, &len);
    if (tmp->message == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  return 0;
}

/* The status of a non-200 response without a usable error body. */
static int http_fallback(conch_status *st, const conch_mem *mem,
                         int http_status) {
  status_free_parts(st);
  status_mem(st, mem);
  st->code = conch__code_from_http(http_status);
  st->origin = CONCH_ORIGIN_HTTP;
  st->local_err = 0;
  st->http_status = http_status;
  return set_http_message(st, http_status);
}

int conch__connect_unary_error(conch_status *st, const conch_mem *mem,
                               int http_status, int json_ctype,
                               const uint8_t *body, size_t len) {
  conch_status tmp;
  size_t root;
  int code = -1, rv, fallback_rv;

  if (st->code != CONCH_CODE_OK) {
    return 0;
  }
  mem = mem_or_default(mem);
  if (!json_ctype || len == 0 || conch__json_check(body, len, &root) != 0 ||
      conch__json_kind(body, root) != CONCH_JSON_OBJECT) {
    return http_fallback(st, mem, http_status);
  }
  conch_status_init(&tmp);
  tmp.mem = mem;
  rv = json_error(body, len, root, mem, 0, &tmp, &code);
  if (rv != 0) {
    /* A malformed detail spoils the whole body (1.4); out of memory, the
       status code still has to be set. */
    conch_status_clear(&tmp);
    fallback_rv = http_fallback(st, mem, http_status);
    return rv == CONCH_ERR_NOMEM ? rv : fallback_rv;
  }
  if (code > 0) {
    status_take(st, &tmp, code, CONCH_ORIGIN_SERVER);
  } else {
    status_take(st, &tmp, (int)conch__code_from_http(http_status),
                CONCH_ORIGIN_HTTP);
  }
  st->http_status = http_status;
  /* A code inferred from the status deserves a message saying so. */
  if (st->origin == CONCH_ORIGIN_HTTP && st->message == NULL) {
    status_mem(st, mem);
    return set_http_message(st, http_status);
  }
  return 0;
}

/* Checks that |md| is an end-stream "metadata" object: every value an
   array of strings. */
static int json_metadata_ok(const uint8_t *p, size_t n, size_t md) {
  size_t it = md, key, vals, vit, v;

  if (!json_is(p, md, CONCH_JSON_OBJECT)) {
    return 0;
  }
  while (conch__json_member(p, n, &it, &key, &vals)) {
    if (!json_is(p, vals, CONCH_JSON_ARRAY)) {
      return 0;
    }
    vit = vals;
    while (conch__json_element(p, n, &vit, &v)) {
      if (!json_is(p, v, CONCH_JSON_STRING)) {
        return 0;
      }
    }
  }
  return 1;
}

/* Appends every pair of a checked "metadata" object to |trailers|, or
   nothing if an allocation fails.  A key given twice adds the values of
   both (they are header values; jansson kept the last). */
static int json_metadata_add(conch_metadata *trailers, const conch_mem *mem,
                             const uint8_t *p, size_t n, size_t md) {
  size_t n0 = trailers->n;
  size_t len0 = trailers->strings.len;
  size_t it = md, key, vals, vit, v, klen, vlen;
  char *k, *s;
  int rv = 0;

  while (rv == 0 && conch__json_member(p, n, &it, &key, &vals)) {
    k = json_dup(p, key, mem, &klen);
    if (k == NULL) {
      rv = CONCH_ERR_NOMEM;
      break;
    }
    vit = vals;
    while (rv == 0 && conch__json_element(p, n, &vit, &v)) {
      s = json_dup(p, v, mem, &vlen);
      rv = s == NULL ? CONCH_ERR_NOMEM
                     : conch__metadata_add_wire(trailers, k, klen, s, vlen);
      conch__free(mem, s);
    }
    conch__free(mem, k);
  }
  if (rv != 0) {
    /* Adding only appends, so cutting back restores the list. */
    trailers->n = n0;
    trailers->strings.len = len0;
  }
  return rv;
}

int conch__connect_end_stream(const uint8_t *json, size_t len,
                              const conch_mem *mem, conch_status *st,
                              conch_metadata *trailers) {
  conch_status tmp;
  size_t root, err, md;
  int code = -1, has_error, rv = 0;

  mem = mem_or_default(mem);
  if (conch__json_check(json, len, &root) != 0 ||
      conch__json_kind(json, root) != CONCH_JSON_OBJECT) {
    return CONCH_ERR_PROTO;
  }
  err = json_get(json, len, root, "error");
  md = json_get(json, len, root, "metadata");
  has_error = json_given(json, err);
  if ((has_error && !json_is(json, err, CONCH_JSON_OBJECT)) ||
      (json_given(json, md) && !json_metadata_ok(json, len, md))) {
    return CONCH_ERR_PROTO;
  }
  conch_status_init(&tmp);
  tmp.mem = mem;
  if (has_error) {
    rv = json_error(json, len, err, mem, 1, &tmp, &code);
  }
  if (rv == 0 && trailers != NULL && json_is(json, md, CONCH_JSON_OBJECT)) {
    rv = json_metadata_add(trailers, mem, json, len, md);
  }
  if (rv != 0) {
    conch_status_clear(&tmp);
    return rv;
  }
  if (has_error && st->code == CONCH_CODE_OK) {
    /* The response was a 200, so there is no HTTP status to fall back
       on (2.2). */
    status_take(st, &tmp, code > 0 ? code : (int)CONCH_CODE_UNKNOWN,
                CONCH_ORIGIN_SERVER);
  }
  conch_status_clear(&tmp);
  return 0;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;
}

int conch__grpc_message_decode(const char *in, size_t len, const conch_mem *mem,
                               char **out) {
  size_t i, o = 0;
  char *s;
  int hi, lo;

  mem = mem_or_default(mem);
  if (len == SIZE_MAX) {
    return CONCH_ERR_NOMEM;
  }
  s = conch__malloc(mem, len + 1);
  if (s == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (i = 0; i < len; ++i) {
    if (in[i] == '%' && len - i >= 3) {
      hi = hex_value(in[i + 1]);
      lo = hex_value(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        s[o++] = (char)(hi << 4 | lo);
        i += 2;
        continue;
      }
    }
    /* Not a valid escape: the spec wants the text kept, not an error. */
    s[o++] = in[i];
  }
  s[o] = '\0';
  *out = s;
  return 0;
}

static int needs_percent(unsigned char c) {
  return c < 0x20 || c > 0x7e || c == '%';
}

int conch__grpc_message_encode(const char *in, size_t len, const conch_mem *mem,
                               char **out) {
  static const char hex[] = "0123456789ABCDEF";
  size_t i, o = 0, n = 0;
  unsigned char c;
  char *s;

  mem = mem_or_default(mem);
  for (i = 0; i < len; ++i) {
    n += needs_percent((unsigned char)in[i]) ? 3 : 1;
  }
  if (len > (SIZE_MAX - 1) / 3) {
    return CONCH_ERR_NOMEM;
  }
  s = conch__malloc(mem, n + 1);
  if (s == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (i = 0; i < len; ++i) {
    c = (unsigned char)in[i];
    if (needs_percent(c)) {
      s[o++] = '%';
      s[o++] = hex[c >> 4];
      s[o++] = hex[c & 0xf];
    } else {
      s[o++] = (char)c;
    }
  }
  s[o] = '\0';
  *out = s;
  return 0;
}

int conch__grpc_status_parse(const char *v, size_t len) {
  int n = 0;
  size_t i;

  if (v == NULL || len == 0 || len > 2 || (len > 1 && v[0] == '0')) {
    return -1;
  }
  for (i = 0; i < len; ++i) {
    if (v[i] < '0' || v[i] > '9') {
      return -1;
    }
    n = n * 10 + (v[i] - '0');
  }
  return n <= (int)CONCH_CODE_UNAUTHENTICATED ? n : -1;
}

/* A minimal protobuf wire-format reader, enough for google.rpc.Status.
   Strict: truncated input, varints longer than 10 bytes, groups and
   invalid field numbers are errors. */
typedef struct pb_reader {
  const uint8_t *p;
  const uint8_t *end;
} pb_reader;

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

static int pb_varint(pb_reader *r, uint64_t *out) {
  uint64_t v = 0;
  unsigned shift;
  uint8_t b;

  for (shift = 0; shift < 64; shift += 7) {
    if (r->p == r->end) {
      return CONCH_ERR_PROTO;
    }
    b = *r->p++;
    /* The tenth byte holds bit 63 only. */
    if (shift == 63 && b > 1) {
      return CONCH_ERR_PROTO;
    }
    v |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *out = v;
      return 0;
    }
  }
  return CONCH_ERR_PROTO;
}

static int pb_bytes(pb_reader *r, const uint8_t **p, size_t *len) {
  uint64_t n;
  int rv;

  rv = pb_varint(r, &n);
  if (rv != 0) {
    return rv;
  }
  if (n > (uint64_t)(r->end - r->p)) {
    return CONCH_ERR_PROTO;
  }
  *p = r->p;
  *len = (size_t)n;
  r->p += n;
  return 0;
}

static int pb_key(pb_reader *r, uint32_t *field, int *wire_type) {
  uint64_t key;
  int rv;

  rv = pb_varint(r, &key);
  if (rv != 0) {
    return rv;
  }
  /* Field numbers are 1 .. 2^29 - 1. */
  if (key > UINT32_MAX || (key >> 3) == 0) {
    return CONCH_ERR_PROTO;
  }
  *field = (uint32_t)(key >> 3);
  *wire_type = (int)(key & 7);
  return 0;
}

static int pb_skip(pb_reader *r, int wire_type) {
  const uint8_t *p;
  uint64_t v;
  size_t len;

  switch (wire_type) {
  case PB_VARINT:
    return pb_varint(r, &v);
  case PB_I64:
  case PB_I32:
    len = wire_type == PB_I64 ? 8 : 4;
    if ((size_t)(r->end - r->p) < len) {
      return CONCH_ERR_PROTO;
    }
    r->p += len;
    return 0;
  case PB_LEN:
    return pb_bytes(r, &p, &len);
  default: /* groups (3, 4) and the undefined 6, 7 */
    return CONCH_ERR_PROTO;
  }
}

/* google.protobuf.Any {1: string type_url, 2: bytes value} into |tmp|. */
static int pb_any(const uint8_t *p, size_t len, const conch_mem *mem,
                  conch_status *tmp) {
  pb_reader r = {p, p + len};
  const uint8_t *type = NULL, *value = NULL;
  size_t type_len = 0, value_len = 0;
  uint32_t field;
  int wt, rv;

  while (r.p != r.end) {
    rv = pb_key(&r, &field, &wt);
    if (rv != 0) {
      return rv;
    }
    if (field == 1 || field == 2) {
      if (wt != PB_LEN) {
        return CONCH_ERR_PROTO;
      }
      /* A repeated scalar field: the last one wins. */
      rv = field == 1 ? pb_bytes(&r, &type, &type_len)
                      : pb_bytes(&r, &value, &value_len);
    } else {
      rv = pb_skip(&r, wt);
    }
    if (rv != 0) {
      return rv;
    }
  }
  /* type_url is handed out as a C string: a NUL would cut it short. */
  if (type_len > 0 && memchr(type, '\0', type_len) != NULL) {
    return CONCH_ERR_PROTO;
  }
  return conch__status_add_detail(tmp, mem, (const char *)type, type_len, value,
                                  value_len);
}

/* google.rpc.Status {1: int32 code, 2: string message, 3: repeated Any}. */
static int pb_rpc_status(const uint8_t *p, size_t len, const conch_mem *mem,
                         conch_status *tmp, int *code) {
  pb_reader r = {p, p + len};
  const uint8_t *msg = NULL, *sub;
  size_t msg_len = 0, sub_len;
  uint64_t v = 0;
  uint32_t field;
  int wt, rv;

  while (r.p != r.end) {
    rv = pb_key(&r, &field, &wt);
    if (rv != 0) {
      return rv;
    }
    switch (field) {
    case 1:
      rv = wt == PB_VARINT ? pb_varint(&r, &v) : CONCH_ERR_PROTO;
      break;
    case 2:
      rv = wt == PB_LEN ? pb_bytes(&r, &msg, &msg_len) : CONCH_ERR_PROTO;
      break;
    case 3:
      rv = wt == PB_LEN ? pb_bytes(&r, &sub, &sub_len) : CONCH_ERR_PROTO;
      if (rv == 0) {
        rv = pb_any(sub, sub_len, mem, tmp);
      }
      break;
    default:
      rv = pb_skip(&r, wt);
      break;
    }
    if (rv != 0) {
      return rv;
    }
  }
  /* int32 on the wire: a negative code arrives sign-extended, so only the
     low 32 bits matter; anything outside 0..16 is not a code we know. */
  *code = (uint32_t)v <= (uint32_t)CONCH_CODE_UNAUTHENTICATED
              ? (int)(uint32_t)v
              : (int)CONCH_CODE_UNKNOWN;
  if (msg_len > 0) {
    mem = status_mem(tmp, mem);
    tmp->message = conch__strndup(mem, (const char *)msg, msg_len);
    if (tmp->message == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  return 0;
}

int conch__grpc_status_details(const char *b64, size_t len,
                               const conch_mem *mem, conch_status *st) {
  conch_status tmp;
  uint8_t *raw;
  size_t raw_len;
  int code = CONCH_CODE_UNKNOWN, rv;

  mem = mem_or_default(mem);
  raw = conch__malloc(mem, conch__b64_decoded_max(len) + 1);
  if (raw == NULL) {
    return CONCH_ERR_NOMEM;
  }
  rv = conch__b64_decode(b64, len, CONCH_B64_STD, raw, &raw_len);
  if (rv != 0) {
    conch__free(mem, raw);
    return CONCH_ERR_PROTO;
  }
  conch_status_init(&tmp);
  tmp.mem = mem;
  rv = pb_rpc_status(raw, raw_len, mem, &tmp, &code);
  conch__free(mem, raw);
  if (rv != 0) {
    conch_status_clear(&tmp);
    return rv;
  }
  status_take(st, &tmp, code,
              code == CONCH_CODE_OK ? CONCH_ORIGIN_NONE : CONCH_ORIGIN_SERVER);
  return 0;
}
