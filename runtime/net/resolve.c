/* Name resolution that never blocks the loop.

   A connection to a host name starts in CONCH_CONN_RESOLVING.  The lookup
   is started at the end of the turn (conch__conn_flush), never from inside
   an nghttp2 callback, by the client's resolver: the caller's own
   (conch_client_opts_set_resolver: uv_getaddrinfo, a c-ares channel, a
   cache) or the default one here, getaddrinfo() on a few threads.  Its
   answer comes back through conch_resolve_done() on the driving thread and
   is applied at the end of that turn.  The connect timer is armed before
   the lookup starts, so the connect timeout covers resolution, and so does
   a call's deadline (calls wait on the connection as they wait for its
   TCP connect).  Numeric hosts are converted at once, without a lookup.

   Why threads and not c-ares by default: getaddrinfo() is what every other
   program on the machine uses (nsswitch: /etc/hosts, systemd-resolved,
   mDNS, LDAP, ...), and c-ares reads only /etc/hosts and resolv.conf.  The
   threads exist only while lookups are pending (at most DEFAULT_WORKERS at
   once; the rest queue), so a client that only ever connects to addresses
   has none.  A caller that wants c-ares, or no threads, plugs it in.

   Requests can outlive their client (a lookup still running when the
   client is freed), so they and the default resolver's state are allocated
   with the C library, as getaddrinfo() allocates its answers anyway. */
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "client_int.h"
#include "conn_int.h"
#include "mem_int.h"
#include "resolve_int.h"
#include "status_int.h"

#define DEFAULT_WORKERS 8

struct conch_resolve_req {
  conch_conn *conn;  /* NULL once the client no longer wants the answer */
  conch_addr *addrs; /* the answer, until applied (client allocator) */
  size_t naddrs;
  int answered;
  char error[160];
  /* The default resolver's bookkeeping. */
  struct conch_resolve_req *next;
  struct addrinfo *res;
  int gai_rv;
  char *host;
  char *port;
};

/* ---- Addresses ---------------------------------------------------------- */

/* Copies the TCP-usable addresses of |ai| into |*out| (client allocator).
   Returns how many, or -1 when out of memory. */
static long copy_addrs(conch_client *c, const struct addrinfo *ai,
                       conch_addr **out) {
  const struct addrinfo *p;
  size_t n = 0;
  conch_addr *a;

  *out = NULL;
  for (p = ai; p != NULL; p = p->ai_next) {
    if ((p->ai_family == AF_INET || p->ai_family == AF_INET6) &&
        p->ai_addr != NULL && p->ai_addrlen <= sizeof(a->sa)) {
      n++;
    }
  }
  if (n == 0) {
    return 0;
  }
  a = conch__calloc(c->mem, n, sizeof(*a));
  if (a == NULL) {
    return -1;
  }
  n = 0;
  for (p = ai; p != NULL; p = p->ai_next) {
    if ((p->ai_family == AF_INET || p->ai_family == AF_INET6) &&
        p->ai_addr != NULL && p->ai_addrlen <= sizeof(a->sa)) {
      a[n].family = p->ai_family;
      a[n].len = p->ai_addrlen;
      memcpy(&a[n].sa, p->ai_addr, p->ai_addrlen);
      n++;
    }
  }
  *out = a;
  return (long)n;
}

static void lookup_hints(struct addrinfo *h, int numeric) {
  memset(h, 0, sizeof(*h));
  h->ai_family = AF_UNSPEC;
  h->ai_socktype = SOCK_STREAM;
  h->ai_protocol = IPPROTO_TCP;
  h->ai_flags = numeric ? AI_NUMERICHOST | AI_NUMERICSERV : AI_ADDRCONFIG;
}

long conch__resolve_numeric_addrs(conch_client *c, conch_addr **out,
                                  conch_status *st) {
  struct addrinfo hints;
  struct addrinfo *res = NULL;
  long n;
  int rv;

  *out = NULL;
  lookup_hints(&hints, 1);
  rv = getaddrinfo(c->host, c->port, &hints, &res);
  if (rv == EAI_NONAME) {
    return 0; /* a name: look it up */
  }
  if (rv != 0) {
    conch__status_set(st, c->mem, CONCH_CODE_UNAVAILABLE, CONCH_ORIGIN_LOCAL,
                      CONCH_ERR_RESOLVE, "cannot resolve %s: %s", c->host,
                      gai_strerror(rv));
    return -1;
  }
  n = copy_addrs(c, res, out);
  freeaddrinfo(res);
  if (n <= 0) {
    conch__status_set(
        st, c->mem,
        n < 0 ? CONCH_CODE_RESOURCE_EXHAUSTED : CONCH_CODE_UNAVAILABLE,
        CONCH_ORIGIN_LOCAL, n < 0 ? CONCH_ERR_NOMEM : CONCH_ERR_RESOLVE,
        n < 0 ? "out of memory" : "cannot resolve %s", c->host);
    return -1;
  }
  return n;
}

int conch__resolve_numeric(conch_conn *conn, conch_status *st) {
  long n = conch__resolve_numeric_addrs(conch__conn_client(conn), &conn->addrs,
                                        st);
  if (n <= 0) {
    return n < 0 ? -1 : 1;
  }
  conn->naddrs = (size_t)n;
  return 0;
}

/* ---- The default resolver: getaddrinfo() on threads ---------------------- */

typedef struct resolver_pool {
  pthread_mutex_t mu;
  conch_client *client; /* NULL once freed: answers are dropped */
  conch_resolve_req *queue, *queue_tail; /* waiting for a worker */
  conch_resolve_req *done;               /* answered, for the loop */
  int workers;                           /* threads running */
  int refs;                              /* the client + each worker */
} resolver_pool;

static void req_release(conch_resolve_req *req) {
  if (req->res != NULL) {
    freeaddrinfo(req->res);
  }
  free(req->host); /* conch-allow: see the top of the file */
  free(req->port); /* conch-allow */
  free(req);       /* conch-allow */
}

static void pool_unref_locked(resolver_pool *p, int *gone) {
  *gone = --p->refs == 0;
}

static void pool_free(resolver_pool *p) {
  pthread_mutex_destroy(&p->mu);
  free(p); /* conch-allow */
}

static void *worker(void *arg) {
  resolver_pool *p = arg;
  int gone;

  pthread_mutex_lock(&p->mu);
  for (;;) {
    conch_resolve_req *req = p->queue;
    struct addrinfo hints;

    if (req == NULL) {
      break;
    }
    p->queue = req->next;
    if (p->queue == NULL) {
      p->queue_tail = NULL;
    }
    req->next = NULL;
    pthread_mutex_unlock(&p->mu);
    lookup_hints(&hints, 0);
    req->gai_rv = getaddrinfo(req->host, req->port, &hints, &req->res);
    if (req->gai_rv != 0) {
      req->res = NULL;
    }
    pthread_mutex_lock(&p->mu);
    if (p->client != NULL) {
      req->next = p->done;
      p->done = req;
      conch_client_wakeup(p->client);
    } else {
      req_release(req); /* the client went: nobody wants it */
    }
  }
  p->workers--;
  pool_unref_locked(p, &gone);
  pthread_mutex_unlock(&p->mu);
  if (gone) {
    pool_free(p);
  }
  return NULL;
}

static int default_start(conch_resolve_req *req, const char *host,
                         const char *port, void *user_data) {
  conch_client *c = user_data;
  resolver_pool *p = c->resolver_pool;
  int rv = 0;

  if (p == NULL) {
    p = calloc(1, sizeof(*p)); /* conch-allow */
    if (p == NULL || pthread_mutex_init(&p->mu, NULL) != 0) {
      free(p); /* conch-allow */
      return CONCH_ERR_NOMEM;
    }
    p->client = c;
    p->refs = 1;
    c->resolver_pool = p;
  }
  req->host = strdup(host);
  req->port = strdup(port);
  if (req->host == NULL || req->port == NULL) {
    return CONCH_ERR_NOMEM;
  }
  pthread_mutex_lock(&p->mu);
  if (p->queue_tail != NULL) {
    p->queue_tail->next = req;
  } else {
    p->queue = req;
  }
  p->queue_tail = req;
  if (p->workers < DEFAULT_WORKERS) {
    pthread_t t;
    pthread_attr_t attr;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker, p) == 0) {
      p->workers++;
      p->refs++;
    } else if (p->workers == 0) {
      /* No thread at all: take the request back. */
      p->queue = p->queue_tail = NULL;
      rv = CONCH_ERR_NOMEM;
    }
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&p->mu);
  return rv;
}

void conch__resolve_drain(conch_client *c) {
  resolver_pool *p = c->resolver_pool;
  conch_resolve_req *list;

  if (p == NULL) {
    return;
  }
  pthread_mutex_lock(&p->mu);
  list = p->done;
  p->done = NULL;
  pthread_mutex_unlock(&p->mu);
  while (list != NULL) {
    conch_resolve_req *req = list;
    char err[128];

    list = req->next;
    req->next = NULL;
    if (req->gai_rv != 0) {
      snprintf(err, sizeof(err), "%s", gai_strerror(req->gai_rv));
    }
    conch_resolve_done(req, req->res, req->gai_rv != 0 ? err : NULL);
  }
}

/* ---- Requests ----------------------------------------------------------- */

void conch__resolve_start(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  conch_resolve_req *req;
  int rv;

  conn->resolve_started = 1;
  req = calloc(1, sizeof(*req)); /* conch-allow: may outlive the client */
  if (req == NULL) {
    conch__conn_fail(conn, CONCH_CODE_RESOURCE_EXHAUSTED, CONCH_ERR_NOMEM,
                     "out of memory resolving %s", c->host);
    return;
  }
  req->conn = conn;
  conn->resolving = req;
  if (c->o.resolver.start != NULL) {
    rv = c->o.resolver.start(req, c->host, c->port, c->o.resolver.user_data);
  } else {
    rv = default_start(req, c->host, c->port, c);
  }
  if (rv != 0) {
    /* Refused at once: no answer follows. */
    conn->resolving = NULL;
    req_release(req);
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_RESOLVE,
                     "cannot resolve %s: the resolver refused the lookup (%s)",
                     c->host, conch_strerror(rv));
  }
}

void conch__resolve_apply(conch_conn *conn) {
  conch_resolve_req *req = conn->resolving;
  conch_client *c = conch__conn_client(conn);

  if (req == NULL || !req->answered) {
    return;
  }
  conn->resolving = NULL;
  if (conn->lb_resolver) {
    /* The balancer's lookup: the addresses are its (balance.c). */
    conch_addr *addrs = req->addrs;
    req->addrs = NULL;
    conch__lb_resolved(conn, addrs, req->naddrs, req->error);
    req_release(req);
    return;
  }
  conn->addrs = req->addrs;
  conn->naddrs = req->naddrs;
  req->addrs = NULL;
  if (conn->naddrs == 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_RESOLVE,
                     "cannot resolve %s: %s", c->host,
                     req->error[0] != '\0' ? req->error
                                           : "no IPv4 or IPv6 address");
  }
  req_release(req);
  if (conn->state == CONCH_CONN_RESOLVING) {
    conch__conn_connect(conn);
  }
}

void conch__resolve_abandon(conch_conn *conn) {
  conch_resolve_req *req = conn->resolving;
  conch_client *c = conch__conn_client(conn);

  if (req == NULL) {
    return;
  }
  conn->resolving = NULL;
  if (req->answered) {
    /* Answered, not applied: nobody else holds it. */
    conch__free(c->mem, req->addrs);
    req_release(req);
    return;
  }
  req->conn = NULL;
  if (c->o.resolver.start != NULL && c->o.resolver.cancel != NULL) {
    c->o.resolver.cancel(req, c->o.resolver.user_data);
  }
}

void conch__resolve_client_free(conch_client *c) {
  resolver_pool *p = c->resolver_pool;
  int gone;

  if (p == NULL) {
    return;
  }
  c->resolver_pool = NULL;
  pthread_mutex_lock(&p->mu);
  p->client = NULL;
  /* Answered, never drained: their connections are gone already. */
  while (p->done != NULL) {
    conch_resolve_req *req = p->done;
    p->done = req->next;
    req_release(req);
  }
  pool_unref_locked(p, &gone);
  pthread_mutex_unlock(&p->mu);
  if (gone) {
    pool_free(p);
  }
}

int conch_resolve_done(conch_resolve_req *req, const struct addrinfo *res,
                       const char *error) {
  conch_conn *conn;
  conch_client *c;
  long n;

  if (req == NULL) {
    return CONCH_ERR_INVALID;
  }
  conn = req->conn;
  if (conn == NULL) {
    req_release(req); /* abandoned: the answer is not wanted */
    return 0;
  }
  if (req->answered) {
    return CONCH_ERR_STATE;
  }
  c = conch__conn_client(conn);
  req->answered = 1;
  n = res != NULL ? copy_addrs(c, res, &req->addrs) : 0;
  if (n < 0) {
    snprintf(req->error, sizeof(req->error), "out of memory");
    n = 0;
  } else if (n == 0) {
    snprintf(req->error, sizeof(req->error), "%s",
             error != NULL ? error : "no IPv4 or IPv6 address");
  }
  req->naddrs = (size_t)n;
  /* Applied at the end of this turn, or of one run now. */
  conch__conn_mark_dirty(conn);
  conch__client_turn(c);
  return 0;
}
