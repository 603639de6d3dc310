/* The server's options (conch_server_opts_*, conch/server.h): their
   defaults and limits, compressions, TLS material, the gate and the accept
   filter.  conch_server_new() (server.c) copies them into the server and
   makes its TLS context with conch__srv_tls_config(). */
#include <string.h>

#include "mem_int.h"
#include "optset.h"
#include "server_int.h"

/* The bounds every server has unless its caller loosens them (server.h,
   "Limits"): a connection must say what it wants within the header
   timeout, a request body arrive within the body timeout, an idle
   connection go after the idle timeout; at most SRV_MAX_CONNS
   connections, and request bytes held in memory at most SRV_CONN_BUFFERED
   on one connection and SRV_MAX_BUFFERED on all of them. */
#define SRV_HEADER_MS 10000
#define SRV_BODY_MS 60000
#define SRV_IDLE_MS 60000
#define SRV_MAX_CONNS 1024
#define SRV_CONN_BUFFERED (32u * 1024 * 1024)
#define SRV_MAX_BUFFERED (64u * 1024 * 1024)
/* Response messages under this go out uncompressed (server.h,
   conch_server_opts_set_compress_min_bytes): connect-es's default.
   Compressing a message of a few hundred bytes costs more than the 485-byte
   unary call it is part of, and saves a few hundred bytes. */
#define SRV_COMPRESS_MIN 1024

/* ---- Options ------------------------------------------------------------ */

int conch_server_opts_new(conch_server_opts **out) {
  const conch_mem *mem = conch_mem_default();
  conch_server_opts *o;

  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  o = conch__calloc(mem, 1, sizeof(*o));
  if (o == NULL) {
    return CONCH_ERR_NOMEM;
  }
  o->mem = *mem;
  o->recv_limit = CONCH__RECV_LIMIT_DEFAULT; /* as the client's */
  o->send_buffer = 256 * 1024;
  o->max_header_list = CONCH__SERVER_HEADER_LIST_DEFAULT; /* optset.h */
  o->max_streams = 100;
  o->header_ms = SRV_HEADER_MS;
  o->body_ms = SRV_BODY_MS;
  o->idle_ms = SRV_IDLE_MS;
  o->max_conns = SRV_MAX_CONNS;
  o->conn_buffered = SRV_CONN_BUFFERED;
  o->max_buffered = SRV_MAX_BUFFERED;
  o->compress_min = SRV_COMPRESS_MIN;
  conch__comp_opts_defaults(&o->comp);
  conch__comp_accept_builtins(&o->comp); /* those this build has */
  *out = o;
  return 0;
}

static void tls_opts_clear(conch_server_opts *o) {
  const conch_mem *mem = conch_mem_default();

  conch_tls_material *m = &o->tls_mat;

  /* The client CAs stay. */
  (void)conch__tls_material_set(mem, &m->cert_file, NULL, NULL, 0);
  (void)conch__tls_material_set(mem, &m->key_file, NULL, NULL, 0);
  (void)conch__tls_material_set(mem, &m->cert_pem, &m->cert_pem_len, NULL, 0);
  (void)conch__tls_material_set(mem, &m->key_pem, &m->key_pem_len, NULL, 0);
  o->tls = 0;
}

void conch_server_opts_free(conch_server_opts *opts) {
  if (opts != NULL) {
    conch__tls_material_clear(&opts->tls_mat, conch_mem_default());
    conch__free(conch_mem_default(), opts);
  }
}

int conch_server_opts_set_mem(conch_server_opts *opts, const conch_mem *mem) {
  return conch__optset_mem(CONCH__OPT(opts, mem), mem);
}

int conch_server_opts_set_recv_limit(conch_server_opts *opts, size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, recv_limit), bytes, 0);
}

int conch_server_opts_set_send_buffer(conch_server_opts *opts, size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, send_buffer), bytes,
                            CONCH__SEND_BUFFER_MIN);
}

int conch_server_opts_set_idle_timeout(conch_server_opts *opts, long ms) {
  return conch__optset_ms(CONCH__OPT(opts, idle_ms), ms,
                          CONCH__SERVER_TIMEOUT_MIN);
}

int conch_server_opts_set_clock(conch_server_opts *opts,
                                int64_t (*now_ms)(void *user_data),
                                void *user_data) {
  return conch__optset_clock(CONCH__OPT(opts, clock),
                             CONCH__OPT(opts, clock_ud), now_ms, user_data);
}

int conch_server_opts_set_drain_timeout(conch_server_opts *opts, long ms) {
  return conch__optset_ms(CONCH__OPT(opts, drain_ms), ms,
                          CONCH__SERVER_TIMEOUT_MIN);
}

int conch_server_opts_set_max_header_list(conch_server_opts *opts,
                                          uint32_t bytes) {
  return conch__optset_u32(CONCH__OPT(opts, max_header_list), bytes,
                           CONCH__HEADER_LIST_MIN, UINT32_MAX);
}

int conch_server_opts_set_max_streams(conch_server_opts *opts, uint32_t n) {
  return conch__optset_u32(CONCH__OPT(opts, max_streams), n,
                           CONCH__MAX_STREAMS_MIN, UINT32_MAX);
}

int conch_server_opts_set_compression(conch_server_opts *opts,
                                      const char *names) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  /* Strict, unlike the client's list: an empty name ("gzip,,br",
     ",gzip") is a malformed one.  A trailing comma ends the list in
     both. */
  return conch__comp_set_accept(&opts->comp, names, 1);
}

int conch_server_opts_set_compress_min_bytes(conch_server_opts *opts,
                                             size_t bytes) {
  return conch__optset_size(CONCH__OPT(opts, compress_min), bytes, 0);
}

/* ---- TLS ---------------------------------------------------------------- */

void conch__srv_tls_config(const conch_server_opts *o,
                           conch_tls_config *cfg) {
  conch__tls_material_config(&o->tls_mat, cfg);
  cfg->alpn = CONCH_TLS_ALPN_ANY; /* h2, else http/1.1 */
  if (o->tls_mat.ca_file != NULL || o->tls_mat.ca_pem != NULL) {
    cfg->client_auth = o->tls_client_optional ? CONCH_TLS_CLIENT_OPTIONAL
                                              : CONCH_TLS_CLIENT_REQUIRED;
  }
}

/* Loads what |o| names once, so that a bad file or PEM is reported by the
   setter (and its reason by conch_server_opts_tls_error()). */
static int tls_opts_check(conch_server_opts *o) {
  conch_tls_config cfg;
  conch_tls_ctx *ctx = NULL;
  int rv;

  conch__srv_tls_config(o, &cfg);
  rv = conch__tls_server_ctx_new(&ctx, conch_mem_default(), &cfg, o->tls_err,
                                 sizeof(o->tls_err));
  conch__tls_ctx_free(ctx);
  if (rv != 0) {
    tls_opts_clear(o);
  }
  return rv;
}

int conch_server_opts_set_tls(conch_server_opts *opts, const char *cert_file,
                              const char *key_file) {
  if (opts == NULL || (cert_file == NULL && key_file != NULL)) {
    return CONCH_ERR_INVALID;
  }
  tls_opts_clear(opts);
  opts->tls_err[0] = '\0';
  if (cert_file == NULL) {
    return 0;
  }
  if (conch__tls_material_set(conch_mem_default(), &opts->tls_mat.cert_file,
                              NULL, cert_file, strlen(cert_file)) != 0 ||
      conch__tls_material_set(conch_mem_default(), &opts->tls_mat.key_file,
                              NULL, key_file,
                              key_file != NULL ? strlen(key_file) : 0) != 0) {
    tls_opts_clear(opts);
    return CONCH_ERR_NOMEM;
  }
  opts->tls = 1;
  return tls_opts_check(opts);
}

int conch_server_opts_set_tls_pem(conch_server_opts *opts, const char *cert,
                                  size_t cert_len, const char *key,
                                  size_t key_len) {
  if (opts == NULL || (cert == NULL && key != NULL)) {
    return CONCH_ERR_INVALID;
  }
  tls_opts_clear(opts);
  opts->tls_err[0] = '\0';
  if (cert == NULL) {
    return 0;
  }
  if (cert_len == 0) {
    cert_len = strlen(cert);
  }
  if (key != NULL && key_len == 0) {
    key_len = strlen(key);
  }
  if (conch__tls_material_set(conch_mem_default(), &opts->tls_mat.cert_pem,
                              &opts->tls_mat.cert_pem_len, cert,
                              cert_len) != 0 ||
      conch__tls_material_set(conch_mem_default(), &opts->tls_mat.key_pem,
                              &opts->tls_mat.key_pem_len, key, key_len) != 0) {
    tls_opts_clear(opts);
    return CONCH_ERR_NOMEM;
  }
  opts->tls = 1;
  return tls_opts_check(opts);
}

/* Replaces the CA text of |*slot| (file name or PEM) with |p| (|n| bytes,
   NULL: none) after checking that it loads. */
static int set_client_ca(conch_server_opts *opts, char **slot, size_t *lenp,
                         const char *p, size_t n, int is_file) {
  opts->tls_err[0] = '\0';
  if (p != NULL) {
    int rv = conch__tls_ca_check(is_file ? p : NULL, is_file ? NULL : p, n,
                                 opts->tls_err, sizeof(opts->tls_err));
    if (rv != 0) {
      return rv;
    }
  }
  return conch__tls_material_set(conch_mem_default(), slot, lenp, p, n);
}

int conch_server_opts_set_tls_client_ca_file(conch_server_opts *opts,
                                             const char *path) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  return set_client_ca(opts, &opts->tls_mat.ca_file, NULL, path,
                       path != NULL ? strlen(path) : 0, 1);
}

int conch_server_opts_set_tls_client_ca_pem(conch_server_opts *opts,
                                            const char *pem, size_t len) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (pem != NULL && len == 0) {
    len = strlen(pem);
  }
  return set_client_ca(opts, &opts->tls_mat.ca_pem, &opts->tls_mat.ca_pem_len,
                       pem, len, 0);
}

int conch_server_opts_set_tls_client_cert_required(conch_server_opts *opts,
                                                   int required) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->tls_client_optional = !required;
  return 0;
}

const char *conch_server_opts_tls_error(const conch_server_opts *opts) {
  return opts != NULL ? opts->tls_err : "";
}

int conch_server_opts_set_gate(conch_server_opts *opts,
                               conch_server_gate_fn gate, void *user_data) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->gate = gate;
  opts->gate_ud = user_data;
  return 0;
}

int conch_server_opts_set_accept_filter(conch_server_opts *opts,
                                        conch_server_accept_fn fn,
                                        void *user_data) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->accept_fn = fn;
  opts->accept_ud = user_data;
  return 0;
}

int conch_server_opts_set_max_conns(conch_server_opts *opts, size_t n) {
  /* Any bound, 0 none; not the client's pool size (optset.h). */
  return conch__optset_size(CONCH__OPT(opts, max_conns), n, 0);
}

int conch_server_opts_set_header_timeout(conch_server_opts *opts, long ms) {
  return conch__optset_ms(CONCH__OPT(opts, header_ms), ms,
                          CONCH__SERVER_TIMEOUT_MIN);
}

int conch_server_opts_set_body_timeout(conch_server_opts *opts, long ms) {
  return conch__optset_ms(CONCH__OPT(opts, body_ms), ms,
                          CONCH__SERVER_TIMEOUT_MIN);
}

int conch_server_opts_set_buffer_limits(conch_server_opts *opts,
                                        size_t per_conn, size_t total) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  opts->conn_buffered = per_conn; /* any sizes, 0 none */
  opts->max_buffered = total;
  return 0;
}

int conch_server_opts_add_compression(conch_server_opts *opts,
                                      const conch_compressor *comp, int *id) {
  int n, rv;

  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  rv = conch__comp_add_custom(&opts->comp, comp, &n);
  if (rv != 0) {
    return rv;
  }
  /* Room for every id: CONCH__COMP_MAX counts the custom ones. */
  opts->comp.accept[opts->comp.naccept++] = (uint8_t)n;
  if (id != NULL) {
    *id = n;
  }
  return 0;
}

int conch_server_opts_set_json_resolver(conch_server_opts *opts,
                                        conch_json_resolver fn,
                                        void *user_data) {
  return conch__optset_resolver(CONCH__OPT(opts, json_resolve),
                                CONCH__OPT(opts, json_resolve_ud), fn,
                                user_data);
}
