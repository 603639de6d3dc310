/* Client options: an opaque object with typed setters. */
#include <stddef.h>
#include <string.h>

#include "balance.h"
#include "client_int.h"
#include "compress.h"
#include "mem_int.h"
#include "opts_int.h"
#include "optset.h"
#include "retry.h"

void conch__opts_defaults(conch_client_opts *o) {
  memset(o, 0, sizeof(*o));
  o->mem = *conch_mem_default();
  o->protocol = CONCH_PROTOCOL_CONNECT;
  o->codec = CONCH_CODEC_PROTO;
  conch__comp_opts_defaults(&o->comp);
  o->compress_min_bytes = 0;
  o->recv_limit = CONCH__RECV_LIMIT_DEFAULT;
  o->send_limit = 0;
  o->stream_window = 4u << 20;
  o->conn_window = 16u << 20;
  o->max_header_list = CONCH__CLIENT_HEADER_LIST_DEFAULT;
  o->connect_timeout_ms = 30000;
  o->max_conns = 1;
  o->tls_verify = 1;
  o->backoff_initial_ms = 1000;
  o->backoff_multiplier = 1.6;
  o->backoff_jitter = 0.2;
  o->backoff_max_ms = 120000;
}

/* Options own their strings: allocated with libc while the options object
   stands alone (whatever conch_client_opts_set_mem() says, since that
   allocator is for the client), and with the client's allocator in the copy
   a client keeps (conch__opts_copy). */
static const conch_mem *opts_mem(const conch_client_opts *o) {
  (void)o;
  return conch_mem_default();
}

static void free_targets(const conch_mem *mem, char **t, size_t n) {
  size_t i;
  for (i = 0; t != NULL && i < n; i++) {
    conch__free(mem, t[i]);
  }
  conch__free(mem, t);
}

/* A copy of |n| strings with |mem|, or NULL (out of memory). */
static char **copy_targets(const conch_mem *mem, const char *const *src,
                           size_t n) {
  char **t = conch__calloc(mem, n, sizeof(*t));
  size_t i;
  if (t == NULL) {
    return NULL;
  }
  for (i = 0; i < n; i++) {
    t[i] = conch__strdup(mem, src[i]);
    if (t[i] == NULL) {
      free_targets(mem, t, n);
      return NULL;
    }
  }
  return t;
}

void conch__opts_clear(conch_client_opts *o, const conch_mem *mem) {
  conch__free(mem, o->user_agent);
  conch__tls_material_clear(&o->tls_mat, mem);
  conch__free(mem, o->unix_path);
  o->unix_path = NULL;
  o->user_agent = NULL;
  free_targets(mem, o->targets, o->ntargets);
  conch__free(mem, o->health_service);
  o->health_service = NULL;
  conch__retry_table_clear(o, mem);
  o->targets = NULL;
  o->ntargets = 0;
}

static int dup_field(const conch_mem *mem, char **dst, const char *src,
                     size_t len) {
  if (src == NULL) {
    *dst = NULL;
    return 0;
  }
  *dst = conch__strndup(mem, src, len);
  return *dst == NULL ? CONCH_ERR_NOMEM : 0;
}

int conch__opts_copy(conch_client_opts *dst, const conch_client_opts *src,
                     const conch_mem *mem) {
  int rv = 0;

  *dst = *src;
  dst->user_agent = NULL;
  dst->unix_path = NULL;
  dst->targets = NULL;
  dst->ntargets = 0;
  dst->health_service = NULL;
  rv |= dup_field(mem, &dst->health_service, src->health_service,
                  src->health_service ? strlen(src->health_service) : 0);
  if (src->ntargets > 0) {
    dst->targets = copy_targets(mem, (const char *const *)src->targets,
                                src->ntargets);
    if (dst->targets == NULL) {
      rv = CONCH_ERR_NOMEM;
    } else {
      dst->ntargets = src->ntargets;
    }
  }
  rv |= dup_field(mem, &dst->unix_path, src->unix_path,
                  src->unix_path ? strlen(src->unix_path) : 0);
  rv |= dup_field(mem, &dst->user_agent, src->user_agent,
                  src->user_agent ? strlen(src->user_agent) : 0);
  rv |= conch__tls_material_copy(&dst->tls_mat, &src->tls_mat, mem);
  rv |= conch__retry_table_copy(dst, src, mem);
  if (rv != 0) {
    conch__opts_clear(dst, mem);
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

int conch_client_opts_new(conch_client_opts **out) {
  conch_client_opts *o;
  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  o = conch__malloc(conch_mem_default(), sizeof(*o));
  if (o == NULL) {
    return CONCH_ERR_NOMEM;
  }
  conch__opts_defaults(o);
  *out = o;
  return 0;
}

void conch_client_opts_free(conch_client_opts *opts) {
  if (opts == NULL) {
    return;
  }
  conch__opts_clear(opts, opts_mem(opts));
  conch__free(conch_mem_default(), opts);
}

int conch_client_opts_set_mem(conch_client_opts *opts, const conch_mem *mem) {
  /* Strings already set were made with the previous allocator; the options
     object itself always uses libc, so |mem| only applies to clients. */
  return conch__optset_mem(CONCH__OPT(opts, mem), mem);
}

int conch_client_opts_set_protocol(conch_client_opts *opts,
                                   conch_protocol protocol) {
  if (opts == NULL ||
      (protocol != CONCH_PROTOCOL_CONNECT && protocol != CONCH_PROTOCOL_GRPC &&
       protocol != CONCH_PROTOCOL_GRPC_WEB)) {
    return CONCH_ERR_INVALID;
  }
  opts->protocol = protocol;
  return 0;
}

int conch_client_opts_set_codec(conch_client_opts *opts, conch_codec codec) {
  if (opts == NULL ||
      (codec != CONCH_CODEC_PROTO && codec != CONCH_CODEC_JSON)) {
    return CONCH_ERR_INVALID;
  }
  if (codec == CONCH_CODEC_JSON && !CONCH_WITH_JSON) {
    return CONCH_ERR_UNSUPPORTED;
  }
  opts->codec = codec;
  return 0;
}

int conch_client_opts_set_json_resolver(conch_client_opts *opts,
                                        conch_json_resolver fn,
                                        void *user_data) {
  return conch__optset_resolver(CONCH__OPT(opts, json_resolve),
                                CONCH__OPT(opts, json_resolve_ud), fn,
                                user_data);
}

int conch_client_opts_set_send_compression(conch_client_opts *opts,
                                           conch_compression c) {
  int rv;

  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = conch__comp_check(&opts->comp, (int)c);
  if (rv != 0) {
    return rv;
  }
  opts->comp.send = (int)c;
  return 0;
}

int conch_client_opts_set_send_compression_name(conch_client_opts *opts,
                                                const char *name) {
  int id, rv;

  if (opts == NULL || name == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = conch__comp_find(&opts->comp, name, strlen(name), &id);
  if (rv != 0) {
    return rv;
  }
  opts->comp.send = id;
  return 0;
}

int conch_client_opts_set_accept_compression(conch_client_opts *opts,
                                             const char *names) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  /* Not strict, unlike the server's list: an empty name ("gzip,,br",
     ",gzip") is skipped.  A trailing comma ends the list in both. */
  return conch__comp_set_accept(&opts->comp, names, 0);
}

int conch_client_opts_set_accept_gzip(conch_client_opts *opts, int on) {
  conch_comp_opts *o;
  uint8_t *at;

  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  o = &opts->comp;
  at = memchr(o->accept, CONCH_COMPRESSION_GZIP, o->naccept);
  if (on && at == NULL) {
    o->accept[o->naccept++] = CONCH_COMPRESSION_GZIP;
  } else if (!on && at != NULL) {
    memmove(at, at + 1, o->naccept - (size_t)(at - o->accept) - 1);
    o->naccept--;
  }
  return 0;
}

static int level_ok(int id, int level) {
  if (level == -1) {
    return 1;
  }
  switch (id) {
  case CONCH_COMPRESSION_GZIP:
  case CONCH_COMPRESSION_DEFLATE:
    return level >= 0 && level <= 9;
  case CONCH_COMPRESSION_BR:
    return level >= 0 && level <= 11;
  case CONCH_COMPRESSION_ZSTD:
    return level >= 1 && level <= 22;
  case CONCH_COMPRESSION_IDENTITY:
  case CONCH_COMPRESSION_SNAPPY:
    return 0;
  default:
    return level >= -1;
  }
}

int conch_client_opts_set_compression_level(conch_client_opts *opts, int id,
                                            int level) {
  int rv;

  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = conch__comp_check(&opts->comp, id);
  if (rv != 0) {
    return rv;
  }
  if (!level_ok(id, level)) {
    return CONCH_ERR_INVALID;
  }
  opts->comp.level[id] = level;
  return 0;
}

int conch_client_opts_add_compression(conch_client_opts *opts,
                                      const conch_compressor *comp, int *id) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  /* Registered only: the client advertises it when its accepted list
     names it (the server's also adds it to the list it takes). */
  return conch__comp_add_custom(&opts->comp, comp, id);
}

int conch_client_opts_set_compress_min_bytes(conch_client_opts *opts,
                                             size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, compress_min_bytes), bytes, 0);
}

int conch_client_opts_set_get_max_url(conch_client_opts *opts, size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, get_max_url), bytes, 0);
}

int conch_client_opts_set_gzip_level(conch_client_opts *opts, int level) {
  if (opts == NULL || level < -1 || level > 9) {
    return CONCH_ERR_INVALID;
  }
  opts->comp.level[CONCH_COMPRESSION_GZIP] = level;
  return 0;
}

int conch_client_opts_set_recv_limit(conch_client_opts *opts, size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, recv_limit), bytes, 0);
}

int conch_client_opts_set_send_limit(conch_client_opts *opts, size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, send_limit), bytes, 0);
}

int conch_client_opts_set_windows(conch_client_opts *opts,
                                  uint32_t stream_window,
                                  uint32_t conn_window) {
  uint32_t s = 0, c = 0; /* both are checked before either is set */

  if (opts == NULL ||
      conch__optset_u32(&s, stream_window, CONCH__WINDOW_MIN,
                        CONCH__WINDOW_MAX) != 0 ||
      conch__optset_u32(&c, conn_window, CONCH__WINDOW_MIN,
                        CONCH__WINDOW_MAX) != 0) {
    return CONCH_ERR_INVALID;
  }
  opts->stream_window = s;
  opts->conn_window = c;
  return 0;
}

int conch_client_opts_set_max_header_list(conch_client_opts *opts,
                                          uint32_t bytes) {
  return conch__optset_u32(CONCH__OPT(opts, max_header_list), bytes,
                           CONCH__HEADER_LIST_MIN, UINT32_MAX);
}

int conch_client_opts_set_keepalive(conch_client_opts *opts, long interval_ms,
                                    long timeout_ms) {
  if (opts == NULL || interval_ms < 0 || timeout_ms < 0 ||
      (interval_ms > 0 && interval_ms < 1000)) {
    return CONCH_ERR_INVALID;
  }
  opts->keepalive_ms = interval_ms;
  opts->keepalive_timeout_ms = timeout_ms > 0 ? timeout_ms : 20000;
  opts->keepalive_set = 1;
  return 0;
}

int conch_client_opts_set_max_connections(conch_client_opts *opts, int n) {
  int rv = conch__optset_int(CONCH__OPT(opts, max_conns), n,
                             CONCH__CLIENT_CONNS_MIN, CONCH__CLIENT_CONNS_MAX);
  if (rv == 0) {
    opts->max_conns_set = 1;
  }
  return rv;
}

int conch_client_opts_set_http_version(conch_client_opts *opts,
                                       conch_http_version v) {
  if (opts == NULL ||
      (v != CONCH_HTTP_AUTO && v != CONCH_HTTP_1_1 && v != CONCH_HTTP_2)) {
    return CONCH_ERR_INVALID;
  }
  opts->http_version = v;
  return 0;
}

int conch_client_opts_set_connect_timeout(conch_client_opts *opts, long ms) {
  return conch__optset_ms(CONCH__OPT(opts, connect_timeout_ms), ms,
                          CONCH__CLIENT_CONNECT_TIMEOUT_MIN);
}

static int set_string(conch_client_opts *opts, char **field, const char *s,
                      size_t len) {
  char *copy = NULL;
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s != NULL) {
    copy = conch__strndup(opts_mem(opts), s, len);
    if (copy == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  conch__free(opts_mem(opts), *field);
  *field = copy;
  return 0;
}

int conch_client_opts_set_user_agent(conch_client_opts *opts, const char *ua) {
  size_t i, n;
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  n = ua != NULL ? strlen(ua) : 0;
  for (i = 0; i < n; i++) {
    if ((unsigned char)ua[i] < 0x20 || (unsigned char)ua[i] > 0x7e) {
      return CONCH_ERR_HEADER;
    }
  }
  return set_string(opts, &opts->user_agent, ua, n);
}

int conch_client_opts_set_ca_file(conch_client_opts *opts, const char *path) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  return conch__tls_material_set(opts_mem(opts), &opts->tls_mat.ca_file, NULL,
                                 path, path ? strlen(path) : 0);
}

int conch_client_opts_set_ca_pem(conch_client_opts *opts, const char *pem,
                                 size_t len) {
  if (opts == NULL || (pem == NULL && len != 0)) {
    return CONCH_ERR_INVALID;
  }
  return conch__tls_material_set(opts_mem(opts), &opts->tls_mat.ca_pem,
                                 &opts->tls_mat.ca_pem_len, pem, len);
}

int conch_client_opts_set_client_cert_file(conch_client_opts *opts,
                                           const char *cert_path,
                                           const char *key_path) {
  int rv;
  if (opts == NULL || (cert_path == NULL && key_path != NULL)) {
    return CONCH_ERR_INVALID;
  }
  rv = conch__tls_material_set(opts_mem(opts), &opts->tls_mat.cert_file, NULL,
                               cert_path, cert_path ? strlen(cert_path) : 0);
  if (rv != 0) {
    return rv;
  }
  return conch__tls_material_set(opts_mem(opts), &opts->tls_mat.key_file, NULL,
                                 key_path, key_path ? strlen(key_path) : 0);
}

int conch_client_opts_set_client_cert_pem(conch_client_opts *opts,
                                          const char *cert, size_t cert_len,
                                          const char *key, size_t key_len) {
  int rv;
  if (opts == NULL || (cert == NULL) != (key == NULL)) {
    return CONCH_ERR_INVALID;
  }
  rv = conch__tls_material_set(opts_mem(opts), &opts->tls_mat.cert_pem,
                               &opts->tls_mat.cert_pem_len, cert, cert_len);
  if (rv != 0) {
    return rv;
  }
  return conch__tls_material_set(opts_mem(opts), &opts->tls_mat.key_pem,
                                 &opts->tls_mat.key_pem_len, key, key_len);
}

int conch_client_opts_set_clock(conch_client_opts *opts,
                                int64_t (*now_ms)(void *user_data),
                                void *user_data) {
  return conch__optset_clock(CONCH__OPT(opts, clock),
                             CONCH__OPT(opts, clock_ud), now_ms, user_data);
}

int conch_client_opts_set_transport(conch_client_opts *opts,
                                    const conch_transport *t) {
  if (opts == NULL ||
      (t != NULL && (t->open == NULL || t->connect_result == NULL ||
                     t->read == NULL || t->write == NULL || t->close == NULL))) {
    return CONCH_ERR_INVALID;
  }
  if (t != NULL) {
    opts->transport = *t;
  } else {
    memset(&opts->transport, 0, sizeof(opts->transport));
  }
  return 0;
}

int conch_client_opts_set_resolver(conch_client_opts *opts,
                                   const conch_resolver *r) {
  if (opts == NULL || (r != NULL && r->start == NULL)) {
    return CONCH_ERR_INVALID;
  }
  if (r != NULL) {
    opts->resolver = *r;
  } else {
    memset(&opts->resolver, 0, sizeof(opts->resolver));
  }
  return 0;
}

int conch_client_opts_set_tls_verify(conch_client_opts *opts, int on) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->tls_verify = on != 0;
  return 0;
}

int conch_client_opts_set_unix_socket(conch_client_opts *opts,
                                      const char *path) {
  size_t n;
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  n = path != NULL ? strlen(path) : 0;
  if (path != NULL && (n == 0 || n >= CONCH_UNIX_PATH_MAX)) {
    return CONCH_ERR_INVALID;
  }
  return set_string(opts, &opts->unix_path, path, n);
}

int conch_client_opts_set_unix_peer_any(conch_client_opts *opts, int on) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->unix_peer_any = on != 0;
  return 0;
}

/* ---- Load balancing (balance.c) ----------------------------------------- */

int conch_client_opts_set_lb_policy(conch_client_opts *opts,
                                    conch_lb_policy policy) {
  if (opts == NULL || (policy != CONCH_LB_NONE &&
                       policy != CONCH_LB_PICK_FIRST &&
                       policy != CONCH_LB_ROUND_ROBIN)) {
    return CONCH_ERR_INVALID;
  }
  opts->lb_policy = policy;
  return 0;
}

int conch_client_opts_set_targets(conch_client_opts *opts,
                                  const char *const *targets, size_t n) {
  char **t = NULL;
  size_t i;
  if (opts == NULL || (targets == NULL && n > 0) || n > CONCH__LB_MAX_TARGETS) {
    return CONCH_ERR_INVALID;
  }
  for (i = 0; i < n; i++) {
    conch_addr a;
    if (targets[i] == NULL || conch__lb_parse_target(targets[i], &a) != 0) {
      return CONCH_ERR_INVALID;
    }
  }
  if (n > 0) {
    t = copy_targets(opts_mem(opts), targets, n);
    if (t == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  free_targets(opts_mem(opts), opts->targets, opts->ntargets);
  opts->targets = t;
  opts->ntargets = n;
  return 0;
}

int conch_client_opts_set_backoff(conch_client_opts *opts, long initial_ms,
                                  double multiplier, double jitter,
                                  long max_ms) {
  /* Written so that NaN fails every test. */
  if (opts == NULL || initial_ms < 1 || !(multiplier >= 1.0) ||
      !(multiplier <= 1e6) || !(jitter >= 0.0) || !(jitter <= 1.0) ||
      max_ms < initial_ms) {
    return CONCH_ERR_INVALID;
  }
  opts->backoff_initial_ms = initial_ms;
  opts->backoff_multiplier = multiplier;
  opts->backoff_jitter = jitter;
  opts->backoff_max_ms = max_ms;
  return 0;
}

int conch_client_opts_set_backoff_random(conch_client_opts *opts,
                                         double (*fn)(void *user_data),
                                         void *user_data) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->backoff_random = fn;
  opts->backoff_random_ud = fn != NULL ? user_data : NULL;
  return 0;
}

int conch_client_opts_set_health_check(conch_client_opts *opts,
                                       const char *service) {
  char *copy = NULL;
  if (opts == NULL ||
      (service != NULL && strlen(service) > CONCH__LB_MAX_SERVICE)) {
    return CONCH_ERR_INVALID;
  }
  if (service != NULL) {
    copy = conch__strdup(opts_mem(opts), service);
    if (copy == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  conch__free(opts_mem(opts), opts->health_service);
  opts->health_service = copy;
  return 0;
}
