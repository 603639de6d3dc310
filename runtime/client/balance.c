/* Load balancing across the addresses of a client's target.

   Without a policy (CONCH_LB_NONE, the default) c->lb is NULL and the pool
   is what it always was: conch__conn_get (pool.c) looks at the client's
   connections and opens a new one when needed, and each new connection
   looks the host up and tries its addresses in order (conn.c).  The only
   cost to that path is one test of c->lb per call.

   With a policy (pick_first or round_robin) or static targets, c->lb holds
   the target's addresses, one conch_lb_addr each:

   - the address, and its name for messages;
   - its reconnect backoff (gRPC's connection backoff: initial, multiplier,
     jitter, max): |attempt_at| is when the last connection attempt began,
     |retry_at| when the next may begin, |backoff_ms| the wait before
     jitter that the next failure multiplies;
   - how many connections it has (each conch_conn points to its address,
     conn->lba; a removed address lives until its last connection goes).

   A call picks (conch__lb_pick): pick_first tries the address calls stick
   to (the one whose connection last became ready), then the others in
   order; round_robin keeps a connection to every address (rr_warm: all of
   them at the first call, and each again once its backoff allows, at the
   next call), takes the next address in turn whose connection is up and
   has room, and only when none is up starts after the address the last
   call took, as below (an address that does not answer its connect takes
   no calls while another is up).  An
   address backing off is passed over; the first one left gives a
   connection with room (conch__pool_find, the same rules as the pool
   without balancing, per address) or opens a new one, on which the call
   waits like any other.  When every address is backing off the call fails
   at once with unavailable, naming the last error and when the next
   attempt may come (gRPC's fail-fast calls).

   A connection that fails (conch__lb_conn_failed, from conch__conn_fail)
   before its server said anything puts its address in backoff; one that
   heard from the server resets it.  The calls waiting in its queue were
   never sent: they move to what the pool picks now (another address, or
   fail with the message above); so do those waiting on the connections
   of an address whose health Watch says NOT_SERVING.  Calls already sent
   end with the
   connection's error; refused streams are sent again as before (call.c).

   A host name is looked up by a placeholder connection (lb->resolver, in
   CONCH_CONN_RESOLVING as any connection of the pool without balancing,
   so the connect timeout, the resolver and the call deadlines work as
   they always did): calls made before the first answer wait in its
   queue, and the answer (conch__lb_resolved) replaces the address list
   (addresses that stay keep their backoff and connections) and hands the
   waiting calls to the picker.  The name is looked up again when every
   address is failing and in the background while calls are made, each at
   most every CONCH__LB_RERESOLVE_MS. */
#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "balance.h"
#include "grpc/health/v1/health.pb-c.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "list.h"
#include "mem_int.h"
#include "pool.h"
#include "resolve_int.h"
#include "status_int.h"

typedef struct conch_lb_addr {
  conch_addr addr;
  char name[CONCH_UNIX_PATH_MAX + 8]; /* "1.2.3.4:80", "[::1]:80", "unix:/p" */
  int64_t attempt_at;                 /* the last connection attempt began */
  int64_t retry_at;                   /* no new attempt before (0: any time) */
  double backoff_ms;                  /* the last wait before jitter; 0: none */
  size_t nconns;                      /* connections tied to it */
  int removed; /* gone from the last lookup: freed with its last connection */
  int mark;    /* merging a lookup's answer */
  /* The health check (conch_client_opts_set_health_check). */
  int not_serving;   /* the last Watch answer was not SERVING */
  conch_call *watch; /* the Watch under way, on one of its connections */
  int has_conn;      /* rr_warm's scratch: a connection that takes calls */
} conch_lb_addr;

typedef struct conch_lb {
  conch_lb_policy policy;
  conch_lb_addr **addrs;
  size_t naddrs;
  size_t rr_next;         /* round_robin: where the next pick starts */
  conch_lb_addr *current; /* pick_first: the address calls stick to */
  /* round_robin: an address may lack a connection (rr_warm), to be seen
     to at the first pick from |warm_at| on (0: the next). */
  int warm;
  int64_t warm_at;
  int dns;                /* the host is a name, looked up (again) */
  conch_conn *resolver;   /* the connection holding the lookup under way */
  conch_conn *pin;        /* while a Watch starts: the connection it takes */
  int64_t resolved_at;    /* when the last answer came */
  char last_err[256];     /* the last connection failure, for messages */
} conch_lb;

/* ---- Targets ------------------------------------------------------------ */

static void addr_name(conch_addr *a, char *out, size_t cap) {
  char ip[INET6_ADDRSTRLEN];
  if (a->family == AF_UNIX) {
    const struct sockaddr_un *u = (const struct sockaddr_un *)&a->sa;
    snprintf(out, cap, "unix:%s", u->sun_path);
  } else if (a->family == AF_INET6) {
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&a->sa;
    inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
    snprintf(out, cap, "[%s]:%u", ip, (unsigned)ntohs(s6->sin6_port));
  } else {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)&a->sa;
    inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
    snprintf(out, cap, "%s:%u", ip, (unsigned)ntohs(s4->sin_port));
  }
}

static int parse_port(const char *p, uint16_t *out) {
  unsigned long v = 0;
  if (*p == '\0') {
    return -1;
  }
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9' || v > 65535) {
      return -1;
    }
    v = v * 10 + (unsigned long)(*p - '0');
  }
  if (v == 0 || v > 65535) {
    return -1;
  }
  *out = (uint16_t)v;
  return 0;
}

int conch__lb_parse_target(const char *s, conch_addr *out) {
  char host[INET6_ADDRSTRLEN + 1];
  const char *colon;
  uint16_t port;
  size_t n;

  memset(out, 0, sizeof(*out));
  if (strncmp(s, "unix:", 5) == 0) {
    struct sockaddr_un *u = (struct sockaddr_un *)&out->sa;
    n = strlen(s + 5);
    if (n == 0 || n >= sizeof(u->sun_path) || n >= CONCH_UNIX_PATH_MAX) {
      return CONCH_ERR_INVALID;
    }
    u->sun_family = AF_UNIX;
    memcpy(u->sun_path, s + 5, n);
    out->family = AF_UNIX;
    out->len = (socklen_t)sizeof(*u);
    return 0;
  }
  if (s[0] == '[') {
    const char *end = strchr(s, ']');
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out->sa;
    if (end == NULL || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host)) {
      return CONCH_ERR_INVALID;
    }
    n = (size_t)(end - s - 1);
    memcpy(host, s + 1, n);
    host[n] = '\0';
    if (parse_port(end + 2, &port) != 0 ||
        inet_pton(AF_INET6, host, &s6->sin6_addr) != 1) {
      return CONCH_ERR_INVALID;
    }
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    out->family = AF_INET6;
    out->len = (socklen_t)sizeof(*s6);
    return 0;
  }
  colon = strchr(s, ':');
  if (colon == NULL || strchr(colon + 1, ':') != NULL ||
      (size_t)(colon - s) >= sizeof(host)) {
    return CONCH_ERR_INVALID;
  }
  n = (size_t)(colon - s);
  memcpy(host, s, n);
  host[n] = '\0';
  {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&out->sa;
    if (parse_port(colon + 1, &port) != 0 ||
        inet_pton(AF_INET, host, &s4->sin_addr) != 1) {
      return CONCH_ERR_INVALID;
    }
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    out->family = AF_INET;
    out->len = (socklen_t)sizeof(*s4);
  }
  return 0;
}

/* ---- Addresses ---------------------------------------------------------- */

static conch_lb_addr *addr_new(conch_client *c, const conch_addr *a) {
  conch_lb_addr *la = conch__calloc(c->mem, 1, sizeof(*la));
  if (la != NULL) {
    la->addr = *a;
    addr_name(&la->addr, la->name, sizeof(la->name));
  }
  return la;
}

static int addr_same(const conch_addr *a, const conch_addr *b) {
  return a->family == b->family && a->len == b->len &&
         memcmp(&a->sa, &b->sa, a->len) == 0;
}

/* Closes |conn| when its address left the list and it carries no call. */
static void close_if_retired(conch_conn *conn) {
  if (conn->lba->removed && conn->ncalls == 0 &&
      conn->state != CONCH_CONN_DEAD) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "%s is no longer an address of the target",
                     conn->lba->name);
  }
}

/* |a| left the address list: its Watch ends, its idle connections close
   now and the others once their last call ended (conch__lb_conn_idle). */
static void retire(conch_client *c, conch_lb_addr *a) {
  conch_link *l;
  if (a->watch != NULL) {
    conch_call *w = a->watch;
    a->watch = NULL;
    conch_call_cancel(w);
  }
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    if (conn->lba == a) {
      close_if_retired(conn);
    }
  }
}

void conch__lb_conn_idle(conch_conn *conn) { close_if_retired(conn); }

/* Replaces the address list with |n| addresses: those already known stay
   (their backoff and connections), the others are added, and the ones
   gone are freed (or once their last connection goes).  0, or
   CONCH_ERR_NOMEM with the list unchanged. */
static int set_addrs(conch_client *c, const conch_addr *addrs, size_t n) {
  conch_lb *lb = c->lb;
  conch_lb_addr **list;
  size_t i, j;

  list = conch__calloc(c->mem, n, sizeof(*list));
  if (list == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (j = 0; j < lb->naddrs; j++) {
    lb->addrs[j]->mark = 0;
  }
  for (i = 0; i < n; i++) {
    for (j = 0; j < lb->naddrs; j++) {
      if (!lb->addrs[j]->mark && addr_same(&lb->addrs[j]->addr, &addrs[i])) {
        list[i] = lb->addrs[j];
        list[i]->mark = 1;
        break;
      }
    }
    if (list[i] == NULL) {
      list[i] = addr_new(c, &addrs[i]);
      if (list[i] == NULL) {
        for (j = 0; j < i; j++) {
          if (list[j]->mark == 2) { /* made here */
            conch__free(c->mem, list[j]);
          }
        }
        conch__free(c->mem, list);
        return CONCH_ERR_NOMEM;
      }
      list[i]->mark = 2; /* new */
    }
  }
  for (j = 0; j < lb->naddrs; j++) {
    conch_lb_addr *old = lb->addrs[j];
    if (old->mark == 0) {
      if (lb->current == old) {
        lb->current = NULL;
      }
      if (old->nconns == 0) {
        conch__free(c->mem, old);
      } else {
        old->removed = 1;
        retire(c, old);
      }
    }
  }
  conch__free(c->mem, lb->addrs);
  lb->addrs = list;
  lb->naddrs = n;
  lb->rr_next = 0;
  lb->warm = 1;
  lb->warm_at = 0;
  return 0;
}

/* ---- Backoff ------------------------------------------------------------ */

/* An attempt on |a| failed: the next may start one backoff after this one
   started.  The first wait is the initial backoff itself, later ones are
   multiplied and spread by the jitter (gRPC's connection backoff). */
static void backoff_step(conch_client *c, conch_lb_addr *a) {
  const conch_client_opts *o = &c->o;
  double wait;
  if (a->backoff_ms <= 0) {
    a->backoff_ms = (double)o->backoff_initial_ms;
    wait = a->backoff_ms;
  } else {
    a->backoff_ms *= o->backoff_multiplier;
    if (a->backoff_ms > (double)o->backoff_max_ms) {
      a->backoff_ms = (double)o->backoff_max_ms;
    }
    wait =
        a->backoff_ms * (1.0 + o->backoff_jitter * (2.0 * conch__client_random01(c) - 1.0));
  }
  if (wait < 0) {
    wait = 0;
  }
  a->retry_at = a->attempt_at + (int64_t)wait;
}

/* ---- Lifecycle ---------------------------------------------------------- */

int conch__lb_init(conch_client *c) {
  conch_lb *lb;
  conch_status st;
  conch_addr *addrs = NULL;
  size_t n = 0, i;
  int rv = 0;

  if (c->o.lb_policy == CONCH_LB_NONE && c->o.ntargets == 0 &&
      c->o.health_service == NULL) {
    return 0;
  }
  lb = conch__calloc(c->mem, 1, sizeof(*lb));
  if (lb == NULL) {
    return CONCH_ERR_NOMEM;
  }
  c->lb = lb;
  lb->policy =
      c->o.lb_policy != CONCH_LB_NONE ? c->o.lb_policy : CONCH_LB_PICK_FIRST;
  if (c->o.ntargets > 0) {
    n = c->o.ntargets;
    addrs = conch__calloc(c->mem, n, sizeof(*addrs));
    if (addrs == NULL) {
      return CONCH_ERR_NOMEM;
    }
    for (i = 0; i < n; i++) {
      (void)conch__lb_parse_target(c->o.targets[i], &addrs[i]); /* checked */
    }
  } else if (c->unix_path != NULL) {
    char t[CONCH_UNIX_PATH_MAX + 8];
    n = 1;
    addrs = conch__calloc(c->mem, 1, sizeof(*addrs));
    if (addrs == NULL) {
      return CONCH_ERR_NOMEM;
    }
    snprintf(t, sizeof(t), "unix:%s", c->unix_path);
    (void)conch__lb_parse_target(t, addrs); /* the URL checked its length */
  } else {
    long got;
    conch_status_init(&st);
    got = conch__resolve_numeric_addrs(c, &addrs, &st);
    rv = st.local_err;
    conch_status_clear(&st);
    if (got < 0 && rv == CONCH_ERR_NOMEM) {
      return rv;
    }
    if (got <= 0) {
      /* A name (or what the lookup at the first call will explain). */
      lb->dns = 1;
      return 0;
    }
    n = (size_t)got;
  }
  rv = set_addrs(c, addrs, n);
  conch__free(c->mem, addrs);
  return rv;
}

void conch__lb_free(conch_client *c) {
  conch_lb *lb = c->lb;
  size_t i;
  if (lb == NULL) {
    return;
  }
  for (i = 0; i < lb->naddrs; i++) {
    conch__free(c->mem, lb->addrs[i]);
  }
  conch__free(c->mem, lb->addrs);
  conch__free(c->mem, lb);
  c->lb = NULL;
}

void conch__lb_attach(conch_conn *conn, conch_lb_addr *a) {
  conn->lba = a;
  conn->peer_name = a->name;
  a->nconns++;
  a->attempt_at = conch__client_now(conch__conn_client(conn));
}

/* ---- Health ------------------------------------------------------------- */

/* Moves the calls waiting in |conn|'s queue (never sent) to what the pool
   picks now; its address's Watch stays, to end with the connection.  The
   queue is taken whole first: a call may be picked for |conn| again (it
   still takes calls), and then waits there as before. */
static void move_queued(conch_conn *conn) {
  conch_call *watch = conn->lba != NULL ? conn->lba->watch : NULL;
  conch_link moving;
  conch__list_init(&moving);
  while (!conch__list_empty(&conn->queue)) {
    conch_call *q = CONCH_CONTAINER(conn->queue.next, conch_call, queue_link);
    conch__list_remove(&q->queue_link);
    conch__list_push(&moving, &q->queue_link);
  }
  if (watch != NULL && conch__linked(&watch->queue_link) &&
      watch->conn == conn) {
    conch__list_remove(&watch->queue_link);
    conch__list_push(&conn->queue, &watch->queue_link);
  }
  while (!conch__list_empty(&moving)) {
    conch__pool_requeue(CONCH_CONTAINER(moving.next, conch_call, queue_link));
  }
}


static const conch_method health_watch = {
    "/grpc.health.v1.Health/Watch", CONCH_STREAM_SERVER,
    &grpc__health__v1__health_check_request__descriptor,
    &grpc__health__v1__health_check_response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

/* The address whose Watch |call| is, or NULL (it was removed by a lookup,
   or the call is over). */
static conch_lb_addr *watched(conch_client *c, const conch_call *call) {
  size_t i;
  for (i = 0; c->lb != NULL && i < c->lb->naddrs; i++) {
    if (c->lb->addrs[i]->watch == call) {
      return c->lb->addrs[i];
    }
  }
  return NULL;
}

static void on_health(conch_call *call, const ProtobufCMessage *msg,
                      void *user_data) {
  conch_client *c = user_data;
  conch_lb_addr *a = watched(c, call);
  int was;
  if (a != NULL) {
    was = a->not_serving;
    a->not_serving =
        ((const Grpc__Health__V1__HealthCheckResponse *)msg)->status !=
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    if (a->not_serving && !was) {
      /* The calls still waiting on its connections (never sent: no room
         yet, or not connected) go where the pool picks now. */
      conch_link *l, *next;
      for (l = c->conns.next; l != &c->conns; l = next) {
        conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
        next = l->next;
        if (conn->lba == a) {
          move_queued(conn);
        }
      }
    }
  }
}

static void on_health_end(conch_call *call, const conch_status *st,
                          const conch_metadata *trailers, void *user_data) {
  conch_lb_addr *a = watched(user_data, call);
  (void)trailers;
  (void)st;
  if (a != NULL) {
    /* Unimplemented: the server has no health service, its addresses
       serve (gRPC's rule).  Otherwise the connection went (or the server
       is draining, its connection under GOAWAY): serving until the next
       connection's Watch says, else an address not serving would never
       get the connection that could tell it is back. */
    a->watch = NULL;
    a->not_serving = 0;
  }
}

static const conch_call_handler health_handler = {NULL, on_health, NULL, NULL,
                                                  on_health_end};

/* Starts the Watch of |conn|'s address on |conn|.  Without memory the
   address goes unwatched (serving) until its next connection. */
static void watch_start(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_lb_addr *a = conn->lba;
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call *call = NULL;
  int rv;

  if (a->watch != NULL || a->removed) {
    return;
  }
  opts.auto_free = 1;
  c->lb->pin = conn;
  rv = conch_call_start(c, &health_watch, &opts, &health_handler, c, &call);
  c->lb->pin = NULL;
  if (rv != 0) {
    return;
  }
  a->watch = call;
  req.service = c->o.health_service;
  rv = conch_call_send(call, &req.base);
  if (rv == 0) {
    rv = conch_call_close_send(call);
    rv = rv == CONCH_ERR_STATE ? 0 : rv; /* one message half-closed it */
  }
  if (rv != 0) {
    /* The call ends by itself (its on_close clears a->watch). */
    if (a->watch == call) {
      conch_call_cancel(call);
    }
  }
}

void conch__lb_conn_ready(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_lb *lb = c->lb;
  if (conn->lba != NULL && lb->policy == CONCH_LB_PICK_FIRST) {
    lb->current = conn->lba;
  }
  if (conn->lba != NULL && c->o.health_service != NULL) {
    watch_start(conn);
  }
}

void conch__lb_conn_gone(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_lb_addr *a = conn->lba;
  if (c->lb != NULL && c->lb->resolver == conn) {
    c->lb->resolver = NULL;
  }
  conn->lb_resolver = 0;
  if (a == NULL) {
    return;
  }
  conn->lba = NULL;
  conn->peer_name = NULL;
  a->nconns--;
  c->lb->warm = 1; /* round_robin: it may need another (rr_warm) */
  c->lb->warm_at = 0;
  if (a->removed && a->nconns == 0) {
    conch__free(c->mem, a);
  }
}

void conch__lb_conn_failed(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_lb *lb = c->lb;
  conch_lb_addr *a = conn->lba;

  if (conn->lb_resolver) {
    if (lb->resolver == conn) {
      lb->resolver = NULL; /* its calls end with its error */
    }
    return;
  }
  if (a == NULL) {
    return;
  }
  if (conn->seen_bytes) {
    a->backoff_ms = 0; /* it worked: the next failure starts afresh */
    a->retry_at = 0;
  } else {
    backoff_step(c, a);
  }
  if (lb->current == a) {
    lb->current = NULL;
  }
  lb->warm = 1;
  lb->warm_at = 0;
  snprintf(lb->last_err, sizeof(lb->last_err), "%s", conn->errmsg);
  move_queued(conn);
}

/* ---- Lookups ------------------------------------------------------------ */

static void rr_warm(conch_client *c, int64_t now);

/* Starts looking the host up again, on a placeholder connection that
   waiting calls may queue on.  Returns it, or NULL with |st| set. */
static conch_conn *start_lookup(conch_client *c, conch_status *st) {
  conch_conn *conn = conch__conn_new(c, st);
  if (conn != NULL && conn->state == CONCH_CONN_RESOLVING) {
    conn->lb_resolver = 1;
    c->lb->resolver = conn;
  }
  return conn;
}

/* The same in the background (the addresses known keep taking calls),
   when none is under way and the last answer is |min_ms| old. */
static void lookup_again(conch_client *c, int64_t now, int64_t min_ms) {
  conch_lb *lb = c->lb;
  conch_status ignored;
  if (!lb->dns || lb->resolver != NULL || now - lb->resolved_at < min_ms) {
    return;
  }
  conch_status_init(&ignored);
  (void)start_lookup(c, &ignored); /* out of memory: try at the next call */
  conch_status_clear(&ignored);
}

void conch__lb_resolved(conch_conn *conn, conch_addr *addrs, size_t n,
                        const char *err) {
  conch_client *c = conch__conn_client(conn);
  conch_lb *lb = c->lb;
  int rv;

  if (lb->resolver == conn) {
    lb->resolver = NULL;
  }
  conn->lb_resolver = 0;
  if (n == 0) {
    conch__free(c->mem, addrs);
    if (lb->naddrs > 0 && conch__list_empty(&conn->queue)) {
      /* A lookup in the background failed: the addresses known stay. */
      lb->resolved_at = conch__client_now(c);
    }
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_RESOLVE,
                     "cannot resolve %s: %s", c->host,
                     err != NULL && err[0] != '\0' ? err
                                                   : "no IPv4 or IPv6 address");
    return;
  }
  rv = set_addrs(c, addrs, n);
  conch__free(c->mem, addrs);
  if (rv != 0) {
    conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory taking the addresses of %s", c->host);
    return;
  }
  lb->resolved_at = conch__client_now(c);
  if (lb->policy == CONCH_LB_ROUND_ROBIN) {
    rr_warm(c, lb->resolved_at); /* new addresses connect now */
  }
  move_queued(conn);
  /* Without calls: freed at the end of the turn. */
  conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_RESOLVE,
                   "looked %s up", c->host);
}

/* ---- Picking ------------------------------------------------------------ */

/* A connection to |a| for a new call, opening one when needed; NULL with
   |*st| and |*nomem| set when out of memory, or NULL alone when the
   address cannot take it now (not serving, backing off, or failed at
   once). */
static conch_conn *try_addr(conch_client *c, conch_lb_addr *a, int64_t now,
                            conch_status *st, int *nomem) {
  conch_conn *conn;
  if (a->not_serving) {
    return NULL;
  }
  conn = conch__pool_find(c, a);
  if (conn != NULL) {
    return conn; /* a live connection takes calls even while another
                    attempt of its address backs off */
  }
  if (a->retry_at > now) {
    return NULL;
  }
  conn = conch__conn_new_at(c, a, &a->addr, st);
  if (conn == NULL) {
    *nomem = 1;
    return NULL;
  }
  if (conn->state == CONCH_CONN_DEAD) {
    return NULL; /* failed at once: backing off now, freed this turn */
  }
  return conn;
}

/* round_robin keeps a connection to every address it may use (gRPC's
   round_robin connects to all of them): each address without one, not
   backing off and not known not serving gets one now; those backing off
   at the first pick after their backoff (lb->warm_at).  Without memory
   the next pick tries again. */
static void rr_warm(conch_client *c, int64_t now) {
  conch_lb *lb = c->lb;
  conch_link *l;
  int64_t next = INT64_MAX;
  size_t i, n = lb->naddrs;
  conch_status ignored;

  lb->warm = 0;
  for (i = 0; i < n; i++) {
    lb->addrs[i]->has_conn = 0;
  }
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    if (conn->lba != NULL && conn->state != CONCH_CONN_DEAD &&
        !conn->goaway && !conn->closing) {
      conn->lba->has_conn = 1;
    }
  }
  for (i = 0; i < n && lb->naddrs == n; i++) {
    conch_lb_addr *a = lb->addrs[i];
    if (a->has_conn || a->not_serving) {
      continue;
    }
    if (a->retry_at > now) {
      lb->warm = 1;
      next = a->retry_at < next ? a->retry_at : next;
      continue;
    }
    conch_status_init(&ignored);
    if (conch__conn_new_at(c, a, &a->addr, &ignored) == NULL) {
      lb->warm = 1; /* out of memory: at the next pick */
      next = now;
    } else if (a->retry_at > now) { /* failed at once: backing off now */
      lb->warm = 1;
      next = a->retry_at < next ? a->retry_at : next;
    }
    conch_status_clear(&ignored);
  }
  lb->warm_at = next == INT64_MAX ? 0 : next;
}

/* round_robin's first choice: the next address in turn whose connection is
   up and has room. */
static conch_conn *rr_ready(conch_client *c) {
  conch_lb *lb = c->lb;
  size_t i, n = lb->naddrs;
  for (i = 0; i < n; i++) {
    size_t k = (lb->rr_next + i) % n;
    conch_conn *conn;
    if (lb->addrs[k]->not_serving) {
      continue;
    }
    conn = conch__pool_find_ready(c, lb->addrs[k]);
    if (conn != NULL) {
      lb->rr_next = (k + 1) % n;
      return conn;
    }
  }
  return NULL;
}

conch_conn *conch__lb_pick(conch_client *c, conch_status *st) {
  conch_lb *lb = c->lb;
  int64_t now = conch__client_now(c), next = INT64_MAX;
  conch_conn *conn;
  int nomem = 0;
  size_t i, n;

  if (lb->pin != NULL) {
    return lb->pin; /* a health Watch, on the connection it watches */
  }
  if (lb->naddrs == 0) {
    /* The first lookup (or one after a failed one): calls wait for its
       answer. */
    return lb->resolver != NULL ? lb->resolver : start_lookup(c, st);
  }
  lookup_again(c, now, CONCH__LB_RERESOLVE_MS);
  if (lb->policy == CONCH_LB_ROUND_ROBIN) {
    if (lb->warm && now >= lb->warm_at) {
      rr_warm(c, now);
    }
    conn = lb->naddrs > 0 ? rr_ready(c) : NULL;
    if (conn != NULL) {
      return conn;
    }
    /* None is up: wait on one connecting, in turn (a burst at start-up
       is spread as the connections will be), or open one. */
  }
  n = lb->naddrs;
  if (lb->policy == CONCH_LB_PICK_FIRST && lb->current != NULL) {
    conn = try_addr(c, lb->current, now, st, &nomem);
    if (conn != NULL || nomem) {
      return conn;
    }
  }
  for (i = 0; i < n && i < lb->naddrs; i++) {
    size_t k = lb->policy == CONCH_LB_ROUND_ROBIN ? (lb->rr_next + i) % n : i;
    conch_lb_addr *a = lb->addrs[k];
    conn = try_addr(c, a, now, st, &nomem);
    if (conn != NULL || nomem) {
      if (lb->policy == CONCH_LB_ROUND_ROBIN) {
        lb->rr_next = (k + 1) % n;
      }
      return conn;
    }
    if (lb->naddrs != n) {
      break; /* a failure re-resolved: start again at the next call */
    }
  }
  for (i = 0; i < lb->naddrs; i++) {
    if (lb->addrs[i]->retry_at < next) {
      next = lb->addrs[i]->retry_at;
    }
  }
  /* Every address is failing: the name may point elsewhere now. */
  lookup_again(c, now, c->o.backoff_initial_ms);
  for (i = 0; i < lb->naddrs; i++) {
    if (lb->addrs[i]->not_serving) {
      break;
    }
  }
  if (i < lb->naddrs) {
    size_t down = 0;
    for (i = 0; i < lb->naddrs; i++) {
      down += lb->addrs[i]->not_serving;
    }
    conch__status_set(st, c->mem, CONCH_CODE_UNAVAILABLE, CONCH_ORIGIN_LOCAL,
                      CONCH_ERR_CONNECT,
                      "no address of %s takes calls: %zu of %zu are not "
                      "serving (health check of \"%s\"), the others are "
                      "failing (last: %s)",
                      c->target, down, lb->naddrs, c->o.health_service,
                      lb->last_err[0] != '\0' ? lb->last_err : "none");
    return NULL;
  }
  conch__status_set(
      st, c->mem, CONCH_CODE_UNAVAILABLE, CONCH_ORIGIN_LOCAL, CONCH_ERR_CONNECT,
      "all %zu addresses of %s are failing (last: %s); the "
      "next attempt in %lld ms",
      lb->naddrs, c->target, lb->last_err[0] != '\0' ? lb->last_err : "none",
      (long long)(next > now ? next - now : 0));
  return NULL;
}
