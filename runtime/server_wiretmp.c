/* TEMPORARY stand-ins for wire.c (see server_wiretmp.h). */
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "base64.h"
#include "mem_int.h"
#include "metadata_int.h"
#include "server_wiretmp.h"

static int digits(const char *v, size_t len, size_t max, int64_t *out) {
  int64_t n = 0;
  if (len == 0 || len > max) {
    return len > max ? CONCH_TIMEOUT_TOO_LONG : CONCH_TIMEOUT_SYNTAX;
  }
  for (size_t i = 0; i < len; i++) {
    if (v[i] < '0' || v[i] > '9') {
      return CONCH_TIMEOUT_SYNTAX;
    }
    n = n * 10 + (v[i] - '0');
  }
  *out = n;
  return 0;
}

int conch__connect_timeout_parse(const char *v, size_t len, int64_t *ms) {
  return digits(v, len, 10, ms);
}

int conch__grpc_timeout_parse(const char *v, size_t len, int64_t *ms) {
  int64_t n;
  int rv;
  if (len < 2) {
    return CONCH_TIMEOUT_SYNTAX;
  }
  rv = digits(v, len - 1, 8, &n);
  if (rv != 0) {
    return rv;
  }
  switch (v[len - 1]) {
  case 'H': *ms = n * 3600000; return 0;
  case 'M': *ms = n * 60000; return 0;
  case 'S': *ms = n * 1000; return 0;
  case 'm': *ms = n; return 0;
  case 'u': *ms = (n + 999) / 1000; return 0;
  case 'n': *ms = (n + 999999) / 1000000; return 0;
  default: return CONCH_TIMEOUT_SYNTAX;
  }
}

int conch__ctype_parse(const char *v, size_t len, conch_ctype *out) {
  static const struct {
    const char *name;
    int family, codec;
  } t[] = {
      {"application/proto", CONCH_CT_CONNECT, CONCH_CT_PROTO},
      {"application/json", CONCH_CT_CONNECT, CONCH_CT_JSON},
      {"application/connect+proto", CONCH_CT_CONNECT_STREAM, CONCH_CT_PROTO},
      {"application/connect+json", CONCH_CT_CONNECT_STREAM, CONCH_CT_JSON},
      {"application/grpc", CONCH_CT_GRPC, CONCH_CT_PROTO},
      {"application/grpc+proto", CONCH_CT_GRPC, CONCH_CT_PROTO},
      {"application/grpc+json", CONCH_CT_GRPC, CONCH_CT_JSON},
      {"application/grpc-web", CONCH_CT_GRPC_WEB, CONCH_CT_PROTO},
      {"application/grpc-web+proto", CONCH_CT_GRPC_WEB, CONCH_CT_PROTO},
      {"application/grpc-web+json", CONCH_CT_GRPC_WEB, CONCH_CT_JSON},
  };
  size_t n = len;
  memset(out, 0, sizeof(*out));
  for (size_t i = 0; i < len; i++) {
    if (v[i] == ';') {
      n = i;
      out->params = CONCH_CT_BAD_PARAMS; /* good enough until wire.c */
      break;
    }
  }
  while (n > 0 && v[n - 1] == ' ') {
    n--;
  }
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
    if (strlen(t[i].name) == n && strncasecmp(v, t[i].name, n) == 0) {
      out->family = t[i].family;
      out->codec = t[i].codec;
      return 0;
    }
  }
  if (n > 12 && strncasecmp(v, "application/", 12) == 0) {
    out->family = CONCH_CT_CONNECT;
    out->codec = CONCH_CT_OTHER;
    if (n > 16 && strncasecmp(v, "application/grpc", 16) == 0) {
      out->family = v[16] == '-' ? CONCH_CT_GRPC_WEB : CONCH_CT_GRPC;
    } else if (n > 20 && strncasecmp(v, "application/connect+", 20) == 0) {
      out->family = CONCH_CT_CONNECT_STREAM;
    }
    return 0;
  }
  return -1;
}

const char *conch__ctype_name(int family, int codec, int utf8) {
  (void)utf8;
  int j = codec == CONCH_CT_JSON;
  switch (family) {
  case CONCH_CT_CONNECT: return j ? "application/json" : "application/proto";
  case CONCH_CT_CONNECT_STREAM:
    return j ? "application/connect+json" : "application/connect+proto";
  case CONCH_CT_GRPC: return j ? "application/grpc+json" : "application/grpc";
  case CONCH_CT_GRPC_WEB:
    return j ? "application/grpc-web+json" : "application/grpc-web+proto";
  default: return NULL;
  }
}

static json_t *b64(const uint8_t *p, size_t n, const conch_mem *mem) {
  char *s = conch__malloc(mem, conch__b64_encoded_len(n) + 1);
  json_t *j;
  if (s == NULL) {
    return NULL;
  }
  s[conch__b64_encode(p, n, CONCH_B64_STD, s)] = '\0';
  j = json_string(s);
  conch__free(mem, s);
  return j;
}

static json_t *error_obj(const conch_mem *mem, const conch_status *st) {
  json_t *o = json_object();
  json_t *d;
  if (o == NULL) {
    return NULL;
  }
  json_object_set_new(o, "code", json_string(conch_code_name(st->code)));
  if (st->message != NULL) {
    json_object_set_new(o, "message", json_string(st->message));
  }
  if (st->ndetails == 0) {
    return o;
  }
  d = json_array();
  for (size_t i = 0; d != NULL && i < st->ndetails; i++) {
    const char *t = st->details[i].type_url;
    const char *slash = strrchr(t, '/');
    json_t *e = json_object();
    if (e == NULL) {
      break;
    }
    json_object_set_new(e, "type", json_string(slash ? slash + 1 : t));
    json_object_set_new(e, "value",
                        b64(st->details[i].value, st->details[i].len, mem));
    json_array_append_new(d, e);
  }
  json_object_set_new(o, "details", d);
  return o;
}

static int dump(conch_buf *out, const conch_mem *mem, json_t *j) {
  size_t n;
  int rv;
  if (j == NULL) {
    return CONCH_ERR_NOMEM;
  }
  n = json_dumpb(j, NULL, 0, JSON_COMPACT);
  rv = n == 0 ? CONCH_ERR_NOMEM : conch__buf_reserve(out, mem, n);
  if (rv == 0) {
    out->len += json_dumpb(j, (char *)out->data + out->len, n, JSON_COMPACT);
  }
  json_decref(j);
  return rv;
}

int conch__connect_error_write(conch_buf *out, const conch_mem *mem,
                               const conch_status *st) {
  return dump(out, mem, error_obj(mem, st));
}

int conch__connect_end_write(conch_buf *out, const conch_mem *mem,
                             const conch_status *st,
                             const conch_metadata *trailers) {
  json_t *o = json_object();
  size_t n = conch_metadata_count(trailers);
  if (o == NULL) {
    return CONCH_ERR_NOMEM;
  }
  if (st != NULL && st->code != CONCH_CODE_OK) {
    json_object_set_new(o, "error", error_obj(mem, st));
  }
  if (n > 0) {
    json_t *md = json_object();
    for (size_t i = 0; md != NULL && i < n; i++) {
      const char *name;
      const uint8_t *v;
      size_t len;
      json_t *a;
      conch_metadata_at(trailers, i, &name, &v, &len);
      a = json_object_get(md, name);
      if (a == NULL) {
        a = json_array();
        json_object_set_new(md, name, a);
      }
      json_array_append_new(
          a, conch__metadata_is_bin(name, strlen(name))
                 ? b64(v, len, mem)
                 : json_stringn((const char *)v, len));
    }
    json_object_set_new(o, "metadata", md);
  }
  return dump(out, mem, o);
}
