/* The options a client is made from (opts.c).  Private to the runtime. */
#ifndef CONCH_OPTS_INT_H
#define CONCH_OPTS_INT_H

#include <stddef.h>
#include <stdint.h>

#include <conch/client.h>
#include <conch/interceptor.h>
#include <conch/mem.h>
#include <conch/transport.h>

#include "compress.h"
#include "tls.h"

struct conch_client_opts {
  conch_mem mem;
  conch_protocol protocol;
  conch_codec codec;
  conch_json_resolver json_resolve; /* JSON codec: Any types; may be NULL */
  void *json_resolve_ud;
  conch_comp_opts comp; /* send, accepted list, levels, registered */
  size_t compress_min_bytes;
  size_t get_max_url; /* 0: no limit */
  size_t recv_limit;
  size_t send_limit;
  uint32_t stream_window;
  uint32_t conn_window;
  uint32_t max_header_list;
  long connect_timeout_ms;
  long keepalive_ms; /* 0: off; doubled after "too_many_pings" */
  int max_conns;     /* connections in the pool, >= 1 */
  int max_conns_set; /* set by the user (else HTTP/1.1 uses H1_POOL) */
  conch_http_version http_version;
  long keepalive_timeout_ms;
  int keepalive_set; /* conch_client_opts_set_keepalive() was called */
  char *user_agent;
  conch_tls_material tls_mat; /* CA, client certificate and key */
  int tls_verify;
  conch_resolver resolver;           /* start NULL: the default (resolve.c) */
  int64_t (*clock)(void *user_data); /* NULL: CLOCK_MONOTONIC */
  void *clock_ud;
  char *unix_path;   /* connect to this Unix socket instead of host:port */
  int unix_peer_any; /* 0: the socket's server must be our euid or root */
  conch_transport transport; /* open NULL: the client's own (sock.c) */
  /* Load balancing (balance.c). */
  conch_lb_policy lb_policy; /* CONCH_LB_NONE: one pool, no per-address state */
  char **targets;            /* static addresses, as given; or NULL */
  size_t ntargets;
  long backoff_initial_ms;
  double backoff_multiplier;
  double backoff_jitter;
  long backoff_max_ms;
  double (*backoff_random)(void *user_data); /* NULL: the client's own */
  void *backoff_random_ud;
  char *health_service; /* grpc.health.v1 Watch of each address; or NULL */
  /* Interceptors of every call (intercept.c), the first outermost. */
  conch_call_interceptor icept[CONCH_INTERCEPTORS_MAX];
  unsigned nicept;
  /* Retries (retry.c). */
  struct conch_retry_entry *retry; /* policies by name */
  size_t nretry;
  int retry_max_tokens;  /* the throttle; 0: off */
  int retry_token_ratio; /* thousandths */
};

/* Copies |src| into |dst|, duplicating strings with |mem|. */
int conch__opts_copy(conch_client_opts *dst, const conch_client_opts *src,
                     const conch_mem *mem);
/* Frees the strings of |o|, allocated with |mem|. */
void conch__opts_clear(conch_client_opts *o, const conch_mem *mem);
void conch__opts_defaults(conch_client_opts *o);

#endif
