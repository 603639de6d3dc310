/* The client (client.c): its structure, its clock, its timers and the
   turn that flushes connections and delivers finished calls.  Private to
   the runtime. */
#ifndef CONCH_CLIENT_INT_H
#define CONCH_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/client.h>
#include <conch/io.h>
#include <conch/mem.h>

#include "buf.h"
#include "compress.h"
#include "conn_int.h"
#include "list.h"
#include "opts_int.h"
#include "pbdec.h"
#include "timer.h"

struct conch_tls_ctx; /* tls.h */
struct resolver_pool; /* resolve.c */
struct conch_lb;      /* balance.c */

struct conch_client {
  conch_endpoint ep;              /* what its connections see of it */
  conch_client_opts o;            /* o.mem is the allocator */
  const conch_mem *mem;           /* &o.mem */
  ProtobufCAllocator pb_alloc;    /* over mem: messages handed to users */
  ProtobufCAllocator arena_alloc; /* over |arena|: borrowed messages */
  conch_pbdec_cache pbdec;        /* what pbdec.c knows of descriptors */
  /* The response content-type last parsed, and what it parsed to: a
     server sends the same one every time (protocol.c). */
  char ct_last[48];
  size_t ct_last_len; /* 0: none */
  int ct_last_family, ct_last_codec, ct_last_params;
  int tls;                        /* https */
  char *host;                     /* without brackets */
  char *port;
  char *authority; /* host[:port] as in the URL */
  char *target;    /* for messages: "host:port", "[v6]:port" or the socket */
  char *prefix;    /* path prefix, "" or "/x" */
  char *unix_path; /* a Unix socket to connect to (opts or "unix:" URL) */
  char *user_agent;
  struct conch_tls_ctx *tls_ctx;

  conch_link conns;
  conch_link calls;
  conch_link lent; /* calls with a body lent by the input being fed */
  conch_link done;  /* finished calls whose on_close is pending */
  conch_link ready; /* calls whose on_send_ready is due */
  conch_link alarms;
  size_t peer_max_streams; /* the server's stream limit, once one said it */
  int h1; /* connections speak HTTP/1.1 (forced, ALPN, or found out) */

  conch_heap timers;

  conch_comps comps;
  struct conch_hdr_tmpl *hdr_tmpls; /* constant request headers (protocol.c) */
  struct conch_call *spare_calls;   /* released calls kept for reuse */
  size_t nspare;
  conch_buf scratch; /* request serialization */
  conch_buf inflbuf; /* decompressed responses */

  /* Arena for borrowed messages in push mode: reset after each handler. */
  uint8_t *arena;
  size_t arena_cap;
  size_t arena_used;
  size_t arena_over;  /* bytes that did not fit, to size the next block */
  void **arena_extra; /* overflow blocks */
  size_t arena_nextra;
  size_t arena_extracap;

  /* I/O driving. */
  conch_io_hooks hooks;
  int hooked;
  long hook_timer; /* last value reported, -2 none */
  int wake_fd;
  unsigned wake_watched;
  void (*wake_cb)(conch_client *, void *);
  void *wake_ud;
  unsigned depth;                      /* > 0 while the client is dispatching */
  struct resolver_pool *resolver_pool; /* the default resolver's threads */
  struct conch_lb *lb; /* per-address state with a policy (balance.c) */
  int retry_tokens;    /* the retry throttle, in thousandths (retry.c) */
  uint64_t rng;        /* the backoffs' jitter without the caller's */
};

struct conch_alarm {
  conch_timer t;
  conch_link link; /* client->alarms */
  conch_client *client;
  void (*cb)(conch_client *, void *);
  void *user_data;
  int firing;
};

/* The client that owns |conn| (a client's connection). */
static inline conch_client *conch__conn_client(const conch_conn *conn) {
  return CONCH_CONTAINER(conn->ep, conch_client, ep);
}

/* CLOCK_MONOTONIC in ms. */
int64_t conch__now_ms(void);
/* The client's clock (conch_client_opts_set_clock), in ms. */
int64_t conch__client_now(const conch_client *c);
/* A number in [0, 1) for the backoffs' jitter (reconnects, retries): the
   caller's generator (conch_client_opts_set_backoff_random), else the
   client's own xorshift64*. */
double conch__client_random01(conch_client *c);

/* Timers. */
void conch__timer_arm(conch_client *c, conch_timer *t, int64_t when);
void conch__timer_disarm(conch_client *c, conch_timer *t);
/* Room for |extra| more timers.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__timer_reserve(conch_client *c, size_t extra);

/* Asks for a turn soon (wakes the loop when outside one). */
void conch__client_kick(conch_client *c);
/* Ends a turn now when outside one (answers from the caller's loop). */
void conch__client_turn(conch_client *c);
/* Tells the hooks what to watch on |fd| when it changed (|*watched|). */
void conch__client_watch(conch_client *c, int fd, unsigned *watched,
                         unsigned want);
/* Releases the borrowed messages of the last handler. */
void conch__arena_reset(conch_client *c);

#endif
