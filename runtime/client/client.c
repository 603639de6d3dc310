/* The client: target, options, timers, and the three ways of driving I/O
   (hooks, pull, blocking turns). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <conch/conch.h>

#include "balance.h"
#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "compress.h"
#include "conn_int.h"
#include "list.h"
#include "mem_int.h"
#include "opts_int.h"
#include "protocol.h"
#include "resolve_int.h"
#include "retry.h"
#include "sock.h"
#include "timer.h"
#include "tls.h"
#include "url.h"

int64_t conch__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t conch__client_now(const conch_client *c) {
  return c->o.clock != NULL ? c->o.clock(c->o.clock_ud) : conch__now_ms();
}

double conch__client_random01(conch_client *c) {
  if (c->o.backoff_random != NULL) {
    double r = c->o.backoff_random(c->o.backoff_random_ud);
    return r >= 0.0 && r < 1.0 ? r : 0.5;
  }
  c->rng ^= c->rng >> 12;
  c->rng ^= c->rng << 25;
  c->rng ^= c->rng >> 27;
  return (double)((c->rng * 2685821657736338717ull) >> 11) /
         9007199254740992.0; /* 2^53 */
}

/* ---- Version ------------------------------------------------------------ */

static const conch_version_info version_info = {
    2,
    (CONCH_VERSION_MAJOR << 16) | (CONCH_VERSION_MINOR << 8) |
        CONCH_VERSION_PATCH,
    CONCH_VERSION_STRING,
    (CONCH_WITH_SERVER ? CONCH_FEATURE_SERVER : 0) |
        (CONCH_WITH_BROTLI ? CONCH_FEATURE_BROTLI : 0) |
        (CONCH_WITH_ZSTD ? CONCH_FEATURE_ZSTD : 0) |
        (CONCH_WITH_SNAPPY ? CONCH_FEATURE_SNAPPY : 0) |
        (CONCH_WITH_JSON ? CONCH_FEATURE_JSON : 0)};

const conch_version_info *conch_version(void) { return &version_info; }

/* ---- protobuf-c allocators -------------------------------------------- */

static void *pb_alloc(void *ud, size_t n) { return conch__malloc(ud, n); }
static void pb_free(void *ud, void *p) { conch__free(ud, p); }

/* The arena hands out memory for messages that handlers only borrow; it is
   reset, not freed, after each one.  Requests that do not fit get blocks of
   their own, and the next reset grows the main block to hold them all, so a
   steady stream of messages allocates nothing. */
#define ARENA_ALIGN 16

static void *arena_alloc(void *ud, size_t n) {
  conch_client *c = ud;
  size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  void *p;

  if (need >= n && c->arena_cap - c->arena_used >= need) {
    p = c->arena + c->arena_used;
    c->arena_used += need;
    return p;
  }
  if (c->arena_nextra == c->arena_extracap) {
    size_t cap = c->arena_extracap ? c->arena_extracap * 2 : 8;
    void **x = conch__realloc(c->mem, c->arena_extra, cap * sizeof(void *));
    if (x == NULL) {
      return NULL;
    }
    c->arena_extra = x;
    c->arena_extracap = cap;
  }
  p = conch__malloc(c->mem, n);
  if (p == NULL) {
    return NULL;
  }
  c->arena_extra[c->arena_nextra++] = p;
  c->arena_over += need;
  return p;
}

static void arena_free(void *ud, void *p) {
  (void)ud;
  (void)p;
}

void conch__arena_reset(conch_client *c) {
  size_t i;
  for (i = 0; i < c->arena_nextra; i++) {
    conch__free(c->mem, c->arena_extra[i]);
  }
  c->arena_nextra = 0;
  if (c->arena_over > 0) {
    size_t cap = c->arena_cap + c->arena_over;
    /* A cap of 1 MiB keeps one outsized message from pinning memory. */
    if (cap <= (1u << 20)) {
      uint8_t *p = conch__realloc(c->mem, c->arena, cap);
      if (p != NULL) {
        c->arena = p;
        c->arena_cap = cap;
      }
    }
    c->arena_over = 0;
  }
  c->arena_used = 0;
}

/* ---- URL ---------------------------------------------------------------- */

static int parse_url(conch_client *c, const char *url) {
  conch_url u;
  int rv = conch__url_parse(url, c->mem, &u);

  if (rv != 0) {
    return rv;
  }
  c->tls = u.tls;
  c->host = u.host;
  c->port = u.port;
  c->authority = u.authority;
  c->prefix = u.prefix;
  c->unix_path = u.unix_path;
  if (c->unix_path == NULL && c->o.unix_path != NULL) {
    c->unix_path = conch__strdup(c->mem, c->o.unix_path);
    if (c->unix_path == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  if (c->unix_path != NULL) {
    c->target = conch__strdup(c->mem, c->unix_path);
  } else {
    size_t n = strlen(c->host) + strlen(c->port) + 4;
    c->target = conch__malloc(c->mem, n);
    if (c->target != NULL) {
      snprintf(c->target, n, strchr(c->host, ':') != NULL ? "[%s]:%s" : "%s:%s",
               c->host, c->port);
    }
  }
  return c->target != NULL ? 0 : CONCH_ERR_NOMEM;
}

/* ---- Client lifecycle -------------------------------------------------- */

static void client_release(conch_client *c) {
  const conch_mem *mem = c->mem;
  conch_mem saved = *mem;

  if (c->wake_fd >= 0) {
    close(c->wake_fd);
  }
  conch__tls_ctx_free(c->tls_ctx);
  conch__comps_clear(&c->comps);
  conch__proto_client_free(c);
  conch__call_spares_free(c);
  conch__pbdec_cache_clear(&c->pbdec);
  conch__buf_free(&c->scratch, mem);
  conch__buf_free(&c->inflbuf, mem);
  conch__arena_reset(c);
  conch__free(mem, c->arena);
  conch__free(mem, c->arena_extra);
  conch__heap_free(&c->timers, mem);
  conch__lb_free(c);
  conch__free(mem, c->host);
  conch__free(mem, c->port);
  conch__free(mem, c->authority);
  conch__free(mem, c->target);
  conch__free(mem, c->prefix);
  conch__free(mem, c->unix_path);
  conch__free(mem, c->user_agent);
  conch__opts_clear(&c->o, mem);
  /* |mem| points into |c|: free with a copy. */
  conch__free(&saved, c);
}

static int make_tls_ctx(conch_client *c) {
  conch_tls_config cfg;
  char err[256];
  int rv;

  conch__tls_material_config(&c->o.tls_mat, &cfg);
  cfg.insecure_skip_verify = !c->o.tls_verify;
  /* gRPC needs HTTP/2 whatever the setting (with CONCH_HTTP_1_1 its calls
     fail before connecting). */
  if (c->o.protocol != CONCH_PROTOCOL_GRPC) {
    if (c->o.http_version == CONCH_HTTP_AUTO) {
      cfg.alpn = CONCH_TLS_ALPN_ANY;
    } else if (c->o.http_version == CONCH_HTTP_1_1) {
      cfg.alpn = CONCH_TLS_ALPN_H1;
    }
  }
  err[0] = '\0';
  rv = conch__tls_ctx_new(&c->tls_ctx, c->mem, &cfg, err, sizeof(err));
  return rv;
}

int conch_client_keepalive_default(conch_client *c, long interval_ms,
                                   long timeout_ms) {
  if (c == NULL || interval_ms < 0 || timeout_ms < 0 ||
      (interval_ms > 0 && interval_ms < 1000)) {
    return CONCH_ERR_INVALID;
  }
  if (!c->o.keepalive_set) {
    c->o.keepalive_ms = interval_ms;
    c->o.keepalive_timeout_ms = timeout_ms > 0 ? timeout_ms : 20000;
  }
  return 0;
}

/* ---- The endpoint its connections see (conn_int.h) ---------------------- */

static int64_t ep_now(const conch_endpoint *ep) {
  return conch__client_now(CONCH_CONTAINER(ep, const conch_client, ep));
}

static void ep_kick(conch_endpoint *ep) {
  conch__client_kick(CONCH_CONTAINER(ep, conch_client, ep));
}

static void ep_watch(conch_endpoint *ep, int fd, unsigned *watched,
                     unsigned want) {
  conch__client_watch(CONCH_CONTAINER(ep, conch_client, ep), fd, watched,
                      want);
}

static int ep_timer_arm(conch_endpoint *ep, conch_timer *t, int64_t when) {
  conch__timer_arm(CONCH_CONTAINER(ep, conch_client, ep), t, when);
  return t->idx != SIZE_MAX ? 0 : CONCH_ERR_NOMEM;
}

static void ep_timer_disarm(conch_endpoint *ep, conch_timer *t) {
  conch__timer_disarm(CONCH_CONTAINER(ep, conch_client, ep), t);
}

static void ep_fed(conch_endpoint *ep) {
  conch__proto_settle(CONCH_CONTAINER(ep, conch_client, ep));
}

static const conch_endpoint_ops client_ep_ops = {ep_now,
                                                 ep_kick,
                                                 ep_watch,
                                                 ep_timer_arm,
                                                 ep_timer_disarm,
                                                 conch__conn_start_session,
                                                 conch__filter_tls_fail,
                                                 ep_fed};

int conch_client_new(conch_client **out, const char *url,
                     const conch_client_opts *opts) {
  conch_client_opts defaults;
  const conch_client_opts *o = opts;
  conch_client *c;
  int rv;

  if (out == NULL || url == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (o == NULL) {
    conch__opts_defaults(&defaults);
    o = &defaults;
  }
  c = conch__calloc(&o->mem, 1, sizeof(*c));
  if (c == NULL) {
    return CONCH_ERR_NOMEM;
  }
  c->o.mem = o->mem;
  c->mem = &c->o.mem;
  c->wake_fd = -1;
  c->hook_timer = -2;
  conch__list_init(&c->conns);
  conch__list_init(&c->calls);
  conch__list_init(&c->lent);
  conch__list_init(&c->done);
  conch__list_init(&c->ep.dirty);
  conch__list_init(&c->ready);
  conch__list_init(&c->alarms);
  conch__comps_init(&c->comps, c->mem);
  rv = conch__opts_copy(&c->o, o, c->mem);
  if (rv != 0) {
    c->o.mem = o->mem;
    goto fail;
  }
  c->o.mem = o->mem; /* the copy took the struct from |o| anyway */
  c->pb_alloc.alloc = pb_alloc;
  c->pb_alloc.free = pb_free;
  c->pb_alloc.allocator_data = (void *)c->mem;
  c->pbdec.mem = c->mem;
  c->arena_alloc.alloc = arena_alloc;
  c->arena_alloc.free = arena_free;
  c->arena_alloc.allocator_data = c;
  c->rng = (uint64_t)conch__now_ms() * 0x9e3779b97f4a7c15ull ^
           (uint64_t)(uintptr_t)c;
  if (c->rng == 0) {
    c->rng = 1;
  }
  conch__retry_client_init(c);
  rv = parse_url(c, url);
  if (rv == 0) {
    rv = conch__lb_init(c);
  }
  if (rv != 0) {
    goto fail;
  }
  c->user_agent =
      conch__strdup(c->mem, c->o.user_agent ? c->o.user_agent
                                            : "conch/" CONCH_VERSION_STRING);
  if (c->user_agent == NULL) {
    rv = CONCH_ERR_NOMEM;
    goto fail;
  }
  c->h1 = c->o.http_version == CONCH_HTTP_1_1;
  if (c->tls) {
    rv = make_tls_ctx(c);
    if (rv != 0) {
      goto fail;
    }
  }
  c->ep.ops = &client_ep_ops;
  c->ep.mem = c->mem;
  c->ep.transport =
      c->o.transport.open != NULL ? &c->o.transport : &conch__sock_transport;
  c->ep.tls_ctx = c->tls_ctx;
  c->ep.tls_name = c->host;
  c->ep.target = c->target;
  /* 16 full reads a turn. */
  c->ep.read_budget = 16 * (size_t)CONCH_CONN_READ_BUF;
  c->ep.stamp_reads = 1;
  c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wake_fd < 0) {
    rv = errno == ENOMEM ? CONCH_ERR_NOMEM : CONCH_ERR_IO;
    goto fail;
  }
  *out = c;
  return 0;

fail:
  client_release(c);
  return rv;
}

void conch_client_free(conch_client *c) {
  conch_link *l;

  if (c == NULL || c->depth > 0) {
    return;
  }
  c->depth++;
  /* End every running call: on_close runs now, as documented. */
  for (l = c->calls.next; l != &c->calls; l = l->next) {
    conch_call *call = CONCH_CONTAINER(l, conch_call, client_link);
    if (!call->finished) {
      conch__call_fail(call, CONCH_CODE_CANCELED, CONCH_ERR_CANCELED,
                       "client freed");
    }
  }
  c->depth--;
  conch__client_run_done(c);
  while (!conch__list_empty(&c->conns)) {
    conch_conn *conn = CONCH_CONTAINER(c->conns.next, conch_conn, link);
    conch__conn_free(conn);
  }
  conch__resolve_client_free(c);
  while (!conch__list_empty(&c->calls)) {
    conch_call *call = CONCH_CONTAINER(c->calls.next, conch_call, client_link);
    conch__call_destroy(call);
  }
  while (!conch__list_empty(&c->alarms)) {
    conch_alarm *a = CONCH_CONTAINER(c->alarms.next, conch_alarm, link);
    conch__list_remove(&a->link);
    conch__timer_disarm(c, &a->t);
    conch__free(c->mem, a);
  }
  if (c->hooked && c->wake_watched) {
    c->hooks.watch(c->wake_fd, CONCH_IO_REMOVE, c->hooks.user_data);
  }
  client_release(c);
}

const conch_mem *conch_client_mem(const conch_client *c) {
  return c != NULL ? c->mem : conch_mem_default();
}

conch_protocol conch_client_protocol(const conch_client *c) {
  return c->o.protocol;
}

conch_codec conch_client_codec(const conch_client *c) { return c->o.codec; }

/* ---- Timers ------------------------------------------------------------- */

void conch__timer_disarm(conch_client *c, conch_timer *t) {
  conch__heap_remove(&c->timers, t);
}

/* The heap array grows in conch__timer_reserve() at call start, so arming
   never fails there. */
int conch__timer_reserve(conch_client *c, size_t extra) {
  return conch__heap_reserve(&c->timers, c->mem, extra);
}

void conch__timer_arm(conch_client *c, conch_timer *t, int64_t when) {
  /* Without memory (none reserved) the timer stays unarmed, as before. */
  (void)conch__heap_insert(&c->timers, c->mem, t, when);
}

static void fire_alarm(conch_client *c, conch_timer *t) {
  conch_alarm *a = CONCH_CONTAINER(t, conch_alarm, t);
  conch__list_remove(&a->link);
  a->firing = 1;
  a->cb(c, a->user_data);
  conch__free(c->mem, a);
}

/* Fires the alarms at the top of the heap that were due at |now|, before
   the turn's I/O: what the caller scheduled for a moment that passed while
   the loop was busy (a cancel 5 ms after a send) happens before what
   arrived later, as with libuv's timers-before-poll.  Deadlines and
   keepalives wait for the I/O, which may hold the answer. */
static void run_due_alarms(conch_client *c, int64_t now) {
  conch_timer *t;
  while ((t = conch__heap_top(&c->timers)) != NULL && t->when <= now &&
         t->kind == CONCH_TIMER_ALARM) {
    conch__timer_disarm(c, t);
    fire_alarm(c, t);
  }
}

static void run_timers(conch_client *c, int64_t now) {
  conch_timer *t;
  while ((t = conch__heap_top(&c->timers)) != NULL && t->when <= now) {
    conch__timer_disarm(c, t);
    switch (t->kind) {
    case CONCH_TIMER_CALL_DEADLINE:
      conch__call_on_deadline(CONCH_CONTAINER(t, conch_call, deadline));
      break;
    case CONCH_TIMER_CALL_RETRY:
      conch__retry_on_timer(CONCH_CONTAINER(t, conch_call, retry_timer));
      break;
    case CONCH_TIMER_CONN_CONNECT:
      conch__conn_on_timeout(CONCH_CONTAINER(t, conch_conn, connect_timer));
      break;
    case CONCH_TIMER_CONN_KEEPALIVE:
      conch__conn_on_keepalive(CONCH_CONTAINER(t, conch_conn, keepalive_timer));
      break;
    case CONCH_TIMER_ALARM:
      fire_alarm(c, t);
      break;
    default:
      break;
    }
  }
}

/* ---- Driving ------------------------------------------------------------ */

long conch_client_timeout_ms(conch_client *c) {
  int64_t d;
  if (c == NULL) {
    return -1;
  }
  if (!conch__list_empty(&c->done) || !conch__list_empty(&c->ep.dirty) ||
      !conch__list_empty(&c->ready)) {
    return 0;
  }
  if (c->timers.n == 0) {
    return -1;
  }
  d = c->timers.t[0]->when - conch__client_now(c);
  if (d <= 0) {
    return 0;
  }
  return d > 0x7fffffff ? 0x7fffffff : (long)d;
}

/* Tells the hooks about the timer when it changed.  Called at the end of
   each turn and after API calls made outside a turn. */
void conch__client_kick(conch_client *c) {
  long t;
  if (!c->hooked || c->depth > 0) {
    return;
  }
  t = conch_client_timeout_ms(c);
  /* A pending timeout of 0 is always re-reported: the loop may have run the
     previous one already. */
  if (t != c->hook_timer || t == 0) {
    c->hook_timer = t;
    c->hooks.timer(t, c->hooks.user_data);
  }
}

/* Ends a turn: delivers on_close handlers and flushes output until both
   settle (flushing may fail connections, which finishes more calls). */
static void turn_end(conch_client *c) {
  int rounds;
  for (rounds = 0; rounds < 64; rounds++) {
    if (conch__list_empty(&c->done) && conch__list_empty(&c->ep.dirty) &&
        conch__list_empty(&c->ready)) {
      break;
    }
    conch__client_run_done(c);
    while (!conch__list_empty(&c->ep.dirty)) {
      conch_conn *conn = CONCH_CONTAINER(c->ep.dirty.next, conch_conn,
                                         dirty);
      conch__list_remove(&conn->dirty);
      conn->flush_pending = 0;
      conch__conn_flush(conn);
    }
  }
}

void conch__client_turn(conch_client *c) {
  if (c->depth > 0) {
    return; /* the turn under way flushes */
  }
  c->depth++;
  turn_end(c);
  c->depth--;
  conch__client_kick(c);
}

static void drain_wakeup(conch_client *c) {
  uint64_t v;
  ssize_t n = read(c->wake_fd, &v, sizeof(v));
  (void)n;
  conch__resolve_drain(c);
  if (c->wake_cb != NULL) {
    c->wake_cb(c, c->wake_ud);
  }
}

static conch_conn *conn_by_fd(conch_client *c, int fd) {
  conch_link *l;
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    if (conn->fd == fd) {
      return conn;
    }
  }
  return NULL;
}

static void dispatch_fd(conch_client *c, int fd, unsigned events) {
  conch_conn *conn;
  if (fd == c->wake_fd) {
    drain_wakeup(c);
    return;
  }
  conn = conn_by_fd(c, fd);
  if (conn != NULL) {
    conch__conn_on_io(conn, events);
  }
}

int conch_client_on_io(conch_client *c, int fd, unsigned events) {
  if (c == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (c->depth > 0) {
    return CONCH_ERR_RECURSIVE;
  }
  c->depth++;
  dispatch_fd(c, fd, events);
  run_timers(c, conch__client_now(c));
  turn_end(c);
  c->depth--;
  conch__client_kick(c);
  return 0;
}

int conch_client_on_timer(conch_client *c) {
  if (c == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (c->depth > 0) {
    return CONCH_ERR_RECURSIVE;
  }
  c->depth++;
  c->hook_timer = -2; /* the timer fired: any new value must be reported */
  run_timers(c, conch__client_now(c));
  turn_end(c);
  c->depth--;
  conch__client_kick(c);
  return 0;
}

static unsigned conn_events(const conch_conn *conn) { return conn->watched; }

size_t conch_client_pollfds(conch_client *c, struct pollfd *fds, size_t nfds) {
  size_t n = 0;
  conch_link *l;

  if (c == NULL || c->depth > 0) {
    return 0;
  }
  if (n < nfds) {
    fds[n].fd = c->wake_fd;
    fds[n].events = POLLIN;
    fds[n].revents = 0;
  }
  n++;
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    unsigned ev = conn_events(conn);
    if (conn->fd < 0 || ev == 0) {
      continue;
    }
    if (n < nfds) {
      fds[n].fd = conn->fd;
      fds[n].events = (short)(((ev & CONCH_IO_READ) ? POLLIN : 0) |
                              ((ev & CONCH_IO_WRITE) ? POLLOUT : 0));
      fds[n].revents = 0;
    }
    n++;
  }
  return n;
}

int conch_client_process(conch_client *c, const struct pollfd *fds,
                         size_t nfds) {
  size_t i;
  if (c == NULL || (fds == NULL && nfds > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (c->depth > 0) {
    return CONCH_ERR_RECURSIVE;
  }
  c->depth++;
  run_due_alarms(c, conch__client_now(c));
  for (i = 0; i < nfds; i++) {
    unsigned ev = 0;
    if (fds[i].revents == 0) {
      continue;
    }
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      ev |= CONCH_IO_READ;
    }
    if (fds[i].revents & (POLLOUT | POLLERR)) {
      ev |= CONCH_IO_WRITE;
    }
    dispatch_fd(c, fds[i].fd, ev);
  }
  run_timers(c, conch__client_now(c));
  turn_end(c);
  c->depth--;
  return 0;
}

int conch_client_run(conch_client *c, long timeout_ms) {
  struct pollfd stackfds[16];
  struct pollfd *fds = stackfds;
  size_t n;
  long t;
  int rv;

  if (c == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (c->depth > 0) {
    return CONCH_ERR_RECURSIVE;
  }
  if (c->hooked) {
    return CONCH_ERR_STATE;
  }
  n = conch_client_pollfds(c, stackfds, 16);
  if (n > 16) {
    fds = conch__malloc(c->mem, n * sizeof(*fds));
    if (fds == NULL) {
      return CONCH_ERR_NOMEM;
    }
    conch_client_pollfds(c, fds, n);
  }
  t = conch_client_timeout_ms(c);
  if (timeout_ms >= 0 && (t < 0 || timeout_ms < t)) {
    t = timeout_ms;
  }
  rv = poll(fds, (nfds_t)n, t > 0x7fffffff ? 0x7fffffff : (int)t);
  if (rv < 0 && errno != EINTR) {
    rv = CONCH_ERR_IO;
  } else {
    rv = conch_client_process(c, fds, rv > 0 ? n : 0);
  }
  if (fds != stackfds) {
    conch__free(c->mem, fds);
  }
  return rv;
}

/* Reports the watch set of |fd| to the hooks when it changed. */
void conch__client_watch(conch_client *c, int fd, unsigned *watched,
                         unsigned want) {
  if (*watched == want) {
    return;
  }
  *watched = want;
  if (c->hooked && fd >= 0) {
    if (c->hooks.watch(fd, want == 0 ? CONCH_IO_REMOVE : want,
                       c->hooks.user_data) != 0 &&
        want != 0) {
      /* The loop cannot watch this fd: the connection is of no use. */
      conch_conn *conn = conn_by_fd(c, fd);
      if (conn != NULL) {
        conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_IO,
                         "the event loop refused to watch fd %d", fd);
      }
    }
  }
}

int conch_client_set_io_hooks(conch_client *c, const conch_io_hooks *hooks) {
  conch_link *l;

  if (c == NULL ||
      (hooks != NULL && (hooks->watch == NULL || hooks->timer == NULL))) {
    return CONCH_ERR_INVALID;
  }
  if (c->depth > 0) {
    return CONCH_ERR_RECURSIVE;
  }
  if (c->hooked) {
    /* Withdraw everything from the old hooks. */
    c->hooks.watch(c->wake_fd, CONCH_IO_REMOVE, c->hooks.user_data);
    for (l = c->conns.next; l != &c->conns; l = l->next) {
      conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
      if (conn->fd >= 0 && conn->watched != 0) {
        c->hooks.watch(conn->fd, CONCH_IO_REMOVE, c->hooks.user_data);
      }
    }
    c->hooks.timer(-1, c->hooks.user_data);
    c->hooked = 0;
  }
  if (hooks == NULL) {
    return 0;
  }
  c->hooks = *hooks;
  c->hooked = 1;
  c->hook_timer = -2;
  c->hooks.watch(c->wake_fd, CONCH_IO_READ, c->hooks.user_data);
  c->wake_watched = CONCH_IO_READ;
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    if (conn->fd >= 0 && conn->watched != 0) {
      c->hooks.watch(conn->fd, conn->watched, c->hooks.user_data);
    }
  }
  conch__client_kick(c);
  return 0;
}

int conch_client_wakeup(conch_client *c) {
  uint64_t one = 1;
  if (c == NULL) {
    return CONCH_ERR_INVALID;
  }
  /* eventfd writes are atomic and the fd lives as long as |c|. */
  if (write(c->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
    return CONCH_ERR_IO;
  }
  return 0;
}

int conch_client_set_wakeup_cb(conch_client *c,
                               void (*cb)(conch_client *c, void *user_data),
                               void *user_data) {
  if (c == NULL) {
    return CONCH_ERR_INVALID;
  }
  c->wake_cb = cb;
  c->wake_ud = user_data;
  return 0;
}

/* ---- Alarms ------------------------------------------------------------- */

int conch_client_alarm(conch_client *c, long ms,
                       void (*cb)(conch_client *c, void *user_data),
                       void *user_data, conch_alarm **out) {
  conch_alarm *a;
  if (c == NULL || cb == NULL || ms < 0) {
    return CONCH_ERR_INVALID;
  }
  if (conch__timer_reserve(c, 1) != 0) {
    return CONCH_ERR_NOMEM;
  }
  a = conch__calloc(c->mem, 1, sizeof(*a));
  if (a == NULL) {
    return CONCH_ERR_NOMEM;
  }
  a->t.idx = SIZE_MAX;
  a->t.kind = CONCH_TIMER_ALARM;
  a->client = c;
  a->cb = cb;
  a->user_data = user_data;
  conch__list_push(&c->alarms, &a->link);
  conch__timer_arm(c, &a->t, conch__client_now(c) + ms);
  conch__client_kick(c);
  if (out != NULL) {
    *out = a;
  }
  return 0;
}

void conch_alarm_cancel(conch_alarm *a) {
  if (a == NULL || a->firing) {
    return;
  }
  conch__list_remove(&a->link);
  conch__timer_disarm(a->client, &a->t);
  conch__free(a->client->mem, a);
}
