/* The server core: the server, its listeners, connections and the three
   ways of driving (hooks, pull, blocking).  Its options live in
   server_opts.c, its method table in server_table.c, the calls themselves
   in server_rpc.c. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mem_int.h"
#include "server_int.h"
#include "sock.h"

#define SRV_CLOSE_MS 1000 /* after an idle GOAWAY, before the close */
/* Ciphertext held before OpenSSL: no more is read from the transport. */
#define SRV_TLS_IN_MAX (64 * 1024)
/* Bytes read from one connection in one turn (the rest waits: others get
   theirs). */
#define SRV_READ_BUDGET (1024 * 1024)

/* The sniffer's and HTTP/1.1's session tables (below). */
static const conch_session_ops srv_sniff_ops;
static const conch_session_ops srv_h1_ops;

/* ---- The endpoint its connections see (conn_int.h) ---------------------- */

static conch_server *ep_server(const conch_endpoint *ep) {
  return CONCH_CONTAINER(ep, conch_server, ep);
}

/* The server's clock (conch_server_opts_set_clock), in ms: every timer
   and deadline of the core reads it here (conch__srv_now). */
static int64_t ep_now(const conch_endpoint *ep) {
  const conch_server *s = ep_server(ep);
  struct timespec ts;
  if (s->o.clock != NULL) {
    return s->o.clock(s->o.clock_ud);
  }
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A turn soon: at once when inside one, else the hooks are asked for one
   (a pull-mode caller asks conch_server_timeout_ms(), which says 0). */
static void ep_kick(conch_endpoint *ep) {
  conch_server *s = ep_server(ep);
  s->pending = 1;
  if (s->has_hooks && !s->in_cb && s->hook_timer != 0) {
    s->hook_timer = 0;
    s->hooks.timer(0, s->hooks.user_data);
  }
}

/* Tells the hooks what to watch on |fd| (nothing: it is not watched);
   |*watched| changes only when they took it. */
static void ep_watch(conch_endpoint *ep, int fd, unsigned *watched,
                     unsigned want) {
  conch_server *s = ep_server(ep);
  if (!s->has_hooks || *watched == want) {
    return;
  }
  if (s->hooks.watch(fd, want != 0 ? want : CONCH_IO_REMOVE,
                     s->hooks.user_data) == 0) {
    *watched = want;
  }
}

static int ep_timer_arm(conch_endpoint *ep, conch_timer *t, int64_t when) {
  conch_server *s = ep_server(ep);
  return conch__heap_insert(&s->heap, s->ep.mem, t, when);
}

static void ep_timer_disarm(conch_endpoint *ep, conch_timer *t) {
  conch__heap_remove(&ep_server(ep)->heap, t);
}

static int ep_secure(conch_conn *c);
static void ep_tls_fail(conch_conn *c);

static const conch_endpoint_ops server_ep_ops = {
    ep_now,          ep_kick,   ep_watch,   ep_timer_arm,
    ep_timer_disarm, ep_secure, ep_tls_fail, NULL};

/* ---- Server ------------------------------------------------------------- */

static void *pb_alloc(void *ud, size_t n) { return conch__malloc(ud, n); }
static void pb_free(void *ud, void *p) { conch__free(ud, p); }

int conch_server_new(conch_server **out, const conch_server_opts *opts) {
  conch_server_opts *defaults = NULL;
  conch_server *s;
  int rv;

  if (out == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (opts == NULL) {
    rv = conch_server_opts_new(&defaults);
    if (rv != 0) {
      return rv;
    }
    opts = defaults;
  }
  s = conch__calloc(&opts->mem, 1, sizeof(*s));
  if (s == NULL) {
    conch_server_opts_free(defaults);
    return CONCH_ERR_NOMEM;
  }
  s->o = *opts;
  s->ep.mem = &s->o.mem;
  s->ep.ops = &server_ep_ops;
  s->ep.transport = &conch__sock_transport; /* adopted handles: their own */
  s->ep.target = "the server";
  s->ep.read_budget = SRV_READ_BUDGET;
  s->ep.drain_reads = 1;
  s->ep.retry_short = 1;
  conch__list_init(&s->ep.dirty);
  if (!opts->tls &&
      (opts->tls_mat.ca_file != NULL || opts->tls_mat.ca_pem != NULL)) {
    /* Client certificates asked for on a cleartext server: refuse rather
       than serve without them. */
    conch__free(&opts->mem, s);
    conch_server_opts_free(defaults);
    return CONCH_ERR_INVALID;
  }
  if (opts->tls) {
    conch_tls_config cfg;
    conch__srv_tls_config(opts, &cfg);
    rv = conch__tls_server_ctx_new(&s->ep.tls_ctx, s->ep.mem, &cfg,
                                   s->o.tls_err, sizeof(s->o.tls_err));
    if (rv != 0) {
      conch__free(&opts->mem, s);
      conch_server_opts_free(defaults);
      return rv;
    }
  }
  /* The strings stay the options'. */
  memset(&s->o.tls_mat, 0, sizeof(s->o.tls_mat));
  conch_server_opts_free(defaults);
  conch__comps_init(&s->comps, s->ep.mem);
  s->accept_len = conch__comp_accept_value(&s->o.comp,
                                           CONCH_COMPRESSION_IDENTITY,
                                           s->accept);
  s->pb_alloc.alloc = pb_alloc;
  s->pb_alloc.free = pb_free;
  s->pb_alloc.allocator_data = (void *)s->ep.mem;
  conch__list_init(&s->conns);
  s->hook_timer = -2;
  s->drain.idx = SIZE_MAX;
  s->drain.kind = SRV_TIMER_DRAIN;
  s->rest.idx = SIZE_MAX;
  s->rest.kind = SRV_TIMER_ACCEPT;
  s->spare_fd = -1;
  *out = s;
  return 0;
}

static void conn_free(srv_conn *conn);

static void close_listeners(conch_server *s) {
  for (size_t i = 0; i < s->nlisten; i++) {
    if (s->has_hooks && !s->resting) {
      s->hooks.watch(s->lfd[i], CONCH_IO_REMOVE, s->hooks.user_data);
    }
    close(s->lfd[i]);
  }
  s->nlisten = 0;
}

void conch_server_free(conch_server *s) {
  if (s == NULL || s->in_cb) {
    return;
  }
  close_listeners(s);
  s->in_cb = 1;
  while (!conch__list_empty(&s->conns)) {
    srv_conn *conn = CONCH_CONTAINER(s->conns.next, srv_conn, link);
    conch__srv_conn_drop_rpcs(conn);
    conn_free(conn);
  }
  s->in_cb = 0;
  conch__srv_svc_free(s);
  if (s->has_hooks && s->hook_timer != -1 && s->hook_timer != -2) {
    s->hooks.timer(-1, s->hooks.user_data);
  }
  for (size_t i = 0; i < s->nmethods; i++) {
    conch__free(s->ep.mem, s->methods[i].path);
  }
  conch__free(s->ep.mem, s->methods);
  for (size_t i = 0; i < s->nroutes; i++) {
    conch__free(s->ep.mem, s->routes[i].path);
  }
  conch__free(s->ep.mem, s->routes);
  for (size_t i = 0; i < s->nhttps; i++) {
    conch__free(s->ep.mem, s->https[i].path);
  }
  conch__free(s->ep.mem, s->https);
  if (s->spare_fd >= 0) {
    close(s->spare_fd);
  }
  conch__free(s->ep.mem, s->slots);
  conch__free(s->ep.mem, s->byfd);
  conch__heap_free(&s->heap, s->ep.mem);
  conch__comps_clear(&s->comps);
  conch__tls_ctx_free(s->ep.tls_ctx);
  conch__free(s->ep.mem, s);
}

/* ---- Listeners ---------------------------------------------------------- */

static int parse_inet(const char *addr, struct sockaddr_storage *ss,
                      socklen_t *len) {
  char host[64];
  const char *colon = strrchr(addr, ':');
  const char *h = addr;
  size_t hl;
  char *end;
  long port;

  if (colon == NULL) {
    return CONCH_ERR_INVALID;
  }
  hl = (size_t)(colon - addr);
  if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
    h = addr + 1;
    hl -= 2;
  }
  if (hl == 0 || hl >= sizeof(host)) {
    return CONCH_ERR_INVALID;
  }
  memcpy(host, h, hl);
  host[hl] = '\0';
  errno = 0;
  port = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535) {
    return CONCH_ERR_INVALID;
  }
  memset(ss, 0, sizeof(*ss));
  if (strcmp(host, "localhost") == 0) {
    memcpy(host, "127.0.0.1", 10);
  }
  if (h != addr) {
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) {
      return CONCH_ERR_INVALID;
    }
    *len = sizeof(*a6);
  } else {
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
      return CONCH_ERR_INVALID;
    }
    *len = sizeof(*a4);
  }
  return 0;
}

static int parse_unix(const char *path, struct sockaddr_storage *ss,
                      socklen_t *len) {
  struct sockaddr_un *un = (struct sockaddr_un *)ss;
  size_t n = strlen(path);

  if (n == 0 || n >= sizeof(un->sun_path)) {
    return CONCH_ERR_INVALID;
  }
  memset(ss, 0, sizeof(*ss));
  un->sun_family = AF_UNIX;
  memcpy(un->sun_path, path, n + 1);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
  return 0;
}

/* Takes listening socket |fd| (closed on failure). */
static int add_listener(conch_server *s, int fd, int is_unix) {
  if (!is_unix && s->port == 0) {
    s->port = conch__sock_port(fd);
  }
  /* The descriptor held in reserve for shedding (see accept_all()). */
  if (s->spare_fd < 0) {
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  s->lfd[s->nlisten] = fd;
  s->lunix[s->nlisten] = is_unix;
  s->nlisten++;
  if (s->has_hooks && !s->resting &&
      s->hooks.watch(fd, CONCH_IO_READ, s->hooks.user_data)) {
    s->nlisten--;
    close(fd);
    return CONCH_ERR_IO;
  }
  return 0;
}

int conch_server_listen(conch_server *s, const char *addr) {
  struct sockaddr_storage ss;
  socklen_t len;
  int is_unix, fd, rv;

  if (s == NULL || addr == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->shutting) {
    return CONCH_ERR_STATE;
  }
  if (s->nlisten == SRV_MAX_LISTENERS) {
    return CONCH_ERR_INVALID;
  }
  is_unix = strncmp(addr, "unix:", 5) == 0;
  rv = is_unix ? parse_unix(addr + 5, &ss, &len) : parse_inet(addr, &ss, &len);
  if (rv != 0) {
    return rv;
  }
  if (is_unix) {
    struct stat st;
    if (stat(addr + 5, &st) == 0 && S_ISSOCK(st.st_mode)) {
      unlink(addr + 5);
    }
  }
  fd = conch__sock_listen((const struct sockaddr *)&ss, len);
  if (fd < 0) {
    return CONCH_ERR_IO; /* errno says why */
  }
  return add_listener(s, fd, is_unix);
}

int conch_server_listen_fd(conch_server *s, int fd) {
  int fl, family;

  if (s == NULL || fd < 0) {
    if (fd >= 0) {
      close(fd);
    }
    return CONCH_ERR_INVALID;
  }
  if (s->shutting) {
    close(fd);
    return CONCH_ERR_STATE;
  }
  if (s->nlisten == SRV_MAX_LISTENERS) {
    close(fd);
    return CONCH_ERR_INVALID;
  }
  fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      (family = conch__sock_family(fd)) < 0) {
    close(fd);
    return CONCH_ERR_IO;
  }
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  return add_listener(s, fd, family == AF_UNIX);
}

int conch_server_port(const conch_server *s) {
  return s != NULL ? s->port : 0;
}

/* ---- Connections -------------------------------------------------------- */

/* Whether |conn| has a call in progress.  A connection that has not
   passed the gate does not count the calls the server answered itself
   (refused ones): their answers may never be read. */
static int conn_busy(const srv_conn *conn) {
  if (conn->passed) {
    return !conch__list_empty(&conn->rpcs);
  }
  for (const conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
    if (CONCH_CONTAINER(l, const conch_rpc, link)->state != SRV_RPC_DONE) {
      return 1;
    }
  }
  return 0;
}

void conch__srv_conn_idle(srv_conn *conn) {
  conch_server *s = conn->s;
  long ms = s->o.idle_ms;

  /* Until a request passes the gate, a connection is a stranger's: it may
     not hold a slot longer than it takes to send the headers. */
  if (!conn->passed && s->o.header_ms > 0 && (ms == 0 || s->o.header_ms < ms)) {
    ms = s->o.header_ms;
  }
  if (conn->goaway) {
    return; /* what is armed now cuts the connection off */
  }
  if (ms > 0 && !conn_busy(conn)) {
    /* Without room in the heap the connection just stays. */
    (void)conch__srv_timer_arm(s, &conn->idle, conch__srv_now(s) + ms);
  } else {
    conch__srv_timer_disarm(s, &conn->idle);
  }
}

/* HTTP/2 clients get GOAWAY, HTTP/1.1 ones "Connection: close" after
   what they asked; a connection that has not said what it speaks yet
   closes. */
static void conn_goaway(srv_conn *conn) {
  if (conn->goaway) {
    return;
  }
  /* The client is told first (no request of its is lost), and cut off
     if it does not go. */
  conn->goaway = 1;
  conn->base.ops->goaway(&conn->base);
  conch__srv_conn_dirty(conn);
}

static void conn_idle_expired(srv_conn *conn) {
  conch_server *s = conn->s;

  if (conn_busy(conn)) {
    return;
  }
  if (conn->goaway) {
    /* Told (GOAWAY) a while ago and still there: cut it off. */
    conch__srv_conn_close(conn);
    return;
  }
  conn_goaway(conn);
  if (!conch__srv_conn_dead(conn) &&
      conch__srv_timer_arm(s, &conn->idle, conch__srv_now(s) + SRV_CLOSE_MS) !=
          0) {
    conch__srv_conn_close(conn);
  }
}

/* ---- Connections by descriptor ------------------------------------------ */

/* An event names a descriptor: its connection is found in a table of
   open addressing (linear probing), not by walking them all. */
static size_t fd_home(int fd, size_t cap) {
  return ((uint32_t)fd * 2654435761u) & (cap - 1);
}

static void byfd_put(srv_conn **t, size_t cap, srv_conn *conn) {
  size_t i = fd_home(conn->base.fd, cap);
  while (t[i] != NULL) {
    i = (i + 1) & (cap - 1);
  }
  t[i] = conn;
}

static int byfd_add(conch_server *s, srv_conn *conn) {
  if ((s->nconns + 1) * 2 > s->byfd_cap) {
    size_t cap = s->byfd_cap != 0 ? s->byfd_cap * 2 : 64;
    srv_conn **t = conch__calloc(s->ep.mem, cap, sizeof(*t));
    if (t == NULL) {
      return CONCH_ERR_NOMEM;
    }
    for (size_t i = 0; i < s->byfd_cap; i++) {
      if (s->byfd[i] != NULL) {
        byfd_put(t, cap, s->byfd[i]);
      }
    }
    conch__free(s->ep.mem, s->byfd);
    s->byfd = t;
    s->byfd_cap = cap;
  }
  byfd_put(s->byfd, s->byfd_cap, conn);
  return 0;
}

static srv_conn *byfd_find(const conch_server *s, int fd) {
  if (s->byfd_cap == 0) {
    return NULL;
  }
  for (size_t i = fd_home(fd, s->byfd_cap); s->byfd[i] != NULL;
       i = (i + 1) & (s->byfd_cap - 1)) {
    if (s->byfd[i]->base.fd == fd) {
      return s->byfd[i];
    }
  }
  return NULL;
}

/* Takes |conn| out; the entries after it move up to where a probe from
   their home finds them. */
static void byfd_remove(conch_server *s, const srv_conn *conn) {
  size_t mask = s->byfd_cap - 1, i, j;

  if (s->byfd_cap == 0) {
    return;
  }
  for (i = fd_home(conn->base.fd, s->byfd_cap); s->byfd[i] != conn;
       i = (i + 1) & mask) {
    if (s->byfd[i] == NULL) {
      return; /* not in (a connection refused in conn_add) */
    }
  }
  s->byfd[i] = NULL;
  for (j = (i + 1) & mask; s->byfd[j] != NULL; j = (j + 1) & mask) {
    size_t k = fd_home(s->byfd[j]->base.fd, s->byfd_cap);
    /* |j|'s entry may fill the hole at |i| unless its home lies
       cyclically in (i, j]. */
    if (((j - k) & mask) >= ((j - i) & mask)) {
      s->byfd[i] = s->byfd[j];
      s->byfd[j] = NULL;
      i = j;
    }
  }
}

static void conn_free(srv_conn *conn) {
  conch_server *s = conn->s;

  byfd_remove(s, conn);
  conch__conn_close_fd(&conn->base);
  conch__srv_timer_disarm(s, &conn->idle);
  conch__srv_timer_disarm(s, &conn->linger);
  conn->base.ops->free(&conn->base);
  conch__filter_clear(&conn->base.filter);
  conch__list_remove(&conn->link);
  conch__list_remove(&conn->base.dirty);
  s->nconns--;
  s->ndead -= conch__srv_conn_dead(conn);
  conch__free(s->ep.mem, conn);
}

void conch__srv_conn_close(srv_conn *conn) {
  if (!conch__srv_conn_dead(conn)) {
    conn->base.state = CONCH_CONN_DEAD;
    conn->s->ndead++;
  }
  conch__srv_conn_dirty(conn);
}

static int conn_add(conch_server *s, int fd, const conch_server_transport *t) {
  srv_conn *conn = conch__calloc(s->ep.mem, 1, sizeof(*conn));
  int rv;

  if (conn == NULL) {
    return CONCH_ERR_NOMEM;
  }
  conn->s = s;
  conn->base.ep = &s->ep;
  conn->base.fd = fd;
  conn->base.filter.mem = s->ep.mem;
  /* No session yet: the first bytes (or ALPN) say which one. */
  conn->base.ops = &srv_sniff_ops;
  conn->base.state =
      s->ep.tls_ctx != NULL ? CONCH_CONN_HANDSHAKE : CONCH_CONN_READY;
  conn->base.connect_timer.idx = SIZE_MAX;
  conn->base.keepalive_timer.idx = SIZE_MAX;
  if (t != NULL) {
    /* The caller's: as a client transport that opens nothing. */
    conn->has_t = 1;
    conn->tr.read = t->read;
    conn->tr.write = t->write;
    conn->tr.close = t->close;
    conn->tr.user_data = t->user_data;
    conn->base.transport = &conn->tr;
  } else {
    /* A socket of ours: sock.c's reads and writes, the client's. */
    conn->base.transport = &conch__sock_transport;
  }
  /* Reads go through the server's buffers (no connection keeps bytes in
     them past its feed). */
  conn->base.rbuf = s->rbuf;
  conn->base.rcap = sizeof(s->rbuf);
  conn->base.pbuf = s->pbuf;
  conn->base.pcap = sizeof(s->pbuf);
  conch__list_init(&conn->rpcs);
  conn->idle.idx = SIZE_MAX;
  conn->idle.kind = SRV_TIMER_IDLE;
  conn->linger.idx = SIZE_MAX;
  conn->linger.kind = SRV_TIMER_LINGER;
  rv = 0;
  if (s->ep.tls_ctx != NULL) {
    rv = conch__tls_accept_new(&conn->base.filter.tls, s->ep.tls_ctx);
    conn->tls = conn->base.filter.tls;
  }
  if (rv != 0) {
    conch__free(s->ep.mem, conn);
    return rv;
  }
  if (byfd_add(s, conn) != 0) {
    conch__filter_clear(&conn->base.filter);
    conch__free(s->ep.mem, conn);
    return CONCH_ERR_NOMEM;
  }
  conn->peer_uid = -1;
  if (t == NULL && conch__sock_family(fd) == AF_UNIX) {
    long uid;
    if (conch__sock_peer_uid(fd, &uid) == 0) {
      conn->peer_uid = uid;
    }
  }
  conch__list_push(&s->conns, &conn->link);
  s->nconns++;
  conch__srv_conn_idle(conn);
  /* Nothing is sent before the client's first bytes (the TLS hello, the
     HTTP/2 preface or an HTTP/1.x request), but the hooks learn of the
     connection when it is settled: on this turn, or on one asked for
     when this is not one (conch_server_adopt() from the caller's loop). */
  conch__srv_conn_dirty(conn);
  return 0;
}

int conch_server_adopt(conch_server *s, int handle,
                       const conch_server_transport *t) {
  if (s == NULL || handle < 0 ||
      (t != NULL && (t->read == NULL || t->write == NULL || t->close == NULL))) {
    return CONCH_ERR_INVALID;
  }
  if (s->shutting) {
    return CONCH_ERR_STATE;
  }
  if (t == NULL) {
    int fl = fcntl(handle, F_GETFL);
    if (fl < 0 || fcntl(handle, F_SETFL, fl | O_NONBLOCK) != 0) {
      return CONCH_ERR_INVALID;
    }
  }
  return conn_add(s, handle, t);
}

/* Watches the listeners again (|on|) or stops (resting). */
static void watch_listeners(conch_server *s, int on) {
  if (!s->has_hooks) {
    return;
  }
  for (size_t i = 0; i < s->nlisten; i++) {
    s->hooks.watch(s->lfd[i], on ? CONCH_IO_READ : CONCH_IO_REMOVE,
                   s->hooks.user_data);
  }
}

/* Out of descriptors or memory: the clients waiting on |lfd| are accepted
   with the descriptor held in reserve and closed, so that they fail now
   instead of hanging in the backlog, and the listeners (still readable)
   rest a moment instead of spinning. */
static void shed(conch_server *s, int lfd) {
  if (s->spare_fd >= 0) {
    close(s->spare_fd);
    for (int i = 0; i < 64; i++) {
      int fd = conch__sock_accept(lfd, 0);
      if (fd < 0) {
        break;
      }
      conch__sock_transport.close(NULL, fd);
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (!s->resting &&
      conch__srv_timer_arm(s, &s->rest, conch__srv_now(s) + 100) == 0) {
    s->resting = 1;
    watch_listeners(s, 0);
  }
}

/* The connection to close to make room for a new one (at the connection
   limit, or out of descriptors): the oldest that has neither passed the
   gate nor a call in progress; on a server without a gate (where every
   request passes, so passing proves nothing), else the oldest without a
   call in progress.  NULL when there is none. */
static srv_conn *victim(conch_server *s) {
  srv_conn *idle = NULL;

  for (conch_link *l = s->conns.next; l != &s->conns; l = l->next) {
    srv_conn *conn = CONCH_CONTAINER(l, srv_conn, link);
    if (conch__srv_conn_dead(conn) || conn_busy(conn)) {
      continue;
    }
    if (!conn->passed) {
      return conn;
    }
    if (idle == NULL && s->o.gate == NULL) {
      idle = conn;
    }
  }
  return idle;
}

/* Out of descriptors: closes a connection now so that its descriptor
   takes the client waiting (one closing anyway first, else a victim()).
   Returns 0, or -1 if there is none. */
static int free_descriptor(conch_server *s) {
  srv_conn *v = NULL;

  for (conch_link *l = s->conns.next; l != &s->conns && v == NULL;
       l = l->next) {
    srv_conn *conn = CONCH_CONTAINER(l, srv_conn, link);
    if (conch__srv_conn_dead(conn)) {
      v = conn;
    }
  }
  if (v == NULL) {
    v = victim(s);
  }
  if (v == NULL) {
    return -1;
  }
  /* Outside every callback of |v|'s (this runs for a listener). */
  s->shed_conns++;
  conch__srv_conn_drop_rpcs(v);
  conn_free(v);
  return 0;
}

static size_t live_conns(const conch_server *s) { return s->nconns - s->ndead; }

static int peer_ok(conch_server *s, int fd, int is_unix) {
  conch_server_peer p;

  if (s->o.accept_fn == NULL) {
    return 1;
  }
  memset(&p, 0, sizeof(p));
  p.fd = fd;
  p.is_unix = is_unix;
  p.uid = p.gid = p.pid = -1;
  if (is_unix) {
    long uid, gid, pid;
    if (conch__sock_peer_cred(fd, &uid, &gid, &pid) == 0) {
      p.uid = uid;
      p.gid = gid;
      p.pid = pid;
    }
  }
  return s->o.accept_fn(&p, s->o.accept_ud) != 0;
}

static void accept_all(conch_server *s, int lfd, int is_unix) {
  for (int i = 0; i < 64 && !s->resting; i++) {
    int fd = conch__sock_accept(lfd, !is_unix);
    if (fd < 0) {
      int e = -fd;
      if (e == EMFILE || e == ENFILE) {
        /* The accept says so whether or not a client waits: room is made
           only for one that does. */
        struct pollfd pfd = {lfd, POLLIN, 0};
        if (poll(&pfd, 1, 0) != 1) {
          return;
        }
        if (free_descriptor(s) == 0) {
          continue; /* the client takes the descriptor of an idle one */
        }
      }
      if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        shed(s, lfd);
      }
      return; /* EAGAIN, or a failure that the next turn retries */
    }
    if (!peer_ok(s, fd, is_unix)) {
      close(fd);
      continue;
    }
    if (s->o.max_conns > 0 && live_conns(s) >= s->o.max_conns) {
      srv_conn *v = victim(s);
      if (v == NULL) {
        close(fd);
        continue;
      }
      conch__srv_conn_close(v); /* closed at the end of this turn */
      s->shed_conns++;
    }
    if (conn_add(s, fd, NULL) != 0) {
      close(fd);
    }
  }
}

/* ---- Bytes for the transport: through TLS or not ---- */

int conch__srv_conn_out(srv_conn *conn, const uint8_t *p, size_t n) {
  return conch__filter_queue(&conn->base.filter, p, n);
}

size_t conch__srv_conn_out_size(srv_conn *conn) {
  const uint8_t *p;
  return conch__filter_pending(&conn->base.filter, &p);
}

size_t conch__srv_date(char *out, size_t cap) {
  time_t now = time(NULL);
  struct tm tm;

  if (cap == 0 || gmtime_r(&now, &tm) == NULL) {
    if (cap > 0) {
      out[0] = '\0';
    }
    return 0;
  }
  return strftime(out, cap, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
}

/* ---- The sessions (session.h): the sniffer, HTTP/1.1, HTTP/2 ------------ */

/* The entries of the table a server's session does not use (a server
   starts no stream, credits no window of its own, pings no one and
   forgets nothing): trivial, so that a connection's code calls them
   whatever its role. */
void conch__srv_sess_submit(conch_conn *c, int64_t now) {
  (void)c;
  (void)now;
}
void conch__srv_sess_call(conch_conn *c, conch_call *call) {
  (void)c;
  (void)call;
}
void conch__srv_sess_consume(conch_conn *c, conch_call *call, size_t n) {
  (void)c;
  (void)call;
  (void)n;
}
void conch__srv_sess_reset(conch_conn *c, conch_call *call, uint32_t err) {
  (void)c;
  (void)call;
  (void)err;
}
conch_keepalive conch__srv_sess_keepalive(const conch_conn *c, int64_t now,
                                          int64_t *next) {
  (void)c;
  (void)now;
  (void)next;
  return CONCH_KA_OFF;
}
int conch__srv_sess_ping(conch_conn *c) {
  (void)c;
  return 0;
}
long conch__srv_sess_capacity(const conch_conn *c) {
  return (long)conch__srv_conn_of(c)->s->o.max_streams;
}
int conch__srv_sess_sent_all(const conch_conn *c, const conch_call *call) {
  (void)c;
  (void)call;
  return 1;
}

/* Puts session |ops| in the sniffer's place and starts it. */
static void conn_start(srv_conn *conn, const conch_session_ops *ops) {
  conn->base.ops = ops;
  if (ops->start(&conn->base) != 0) {
    /* Nothing to free (a start that fails leaves none); the sniffer's
       entries are safe on a connection with no session. */
    conn->base.ops = &srv_sniff_ops;
    conch__srv_conn_close(conn);
  }
}

/* The sniffer: until the first bytes (or ALPN) say what the client
   speaks.  Anything but the HTTP/2 preface is HTTP/1.x (curl without
   --http2-prior-knowledge, browsers, undici). */
static int sniff_feed(conch_conn *c, const uint8_t *p, size_t n) {
  static const uint8_t magic[4] = {'P', 'R', 'I', ' '};
  srv_conn *conn = conch__srv_conn_of(c);
  size_t k = n < 4 - conn->nsniff ? n : 4 - conn->nsniff;
  int h2;

  memcpy(conn->sniff + conn->nsniff, p, k);
  conn->nsniff += k;
  p += k;
  n -= k;
  h2 = memcmp(conn->sniff, magic, conn->nsniff) == 0;
  if (h2 && conn->nsniff < 4) {
    return 0; /* "PR": either still */
  }
  conn_start(conn, h2 ? &conch__srv_h2_ops : &srv_h1_ops);
  if (conch__srv_conn_dead(conn)) {
    return -1;
  }
  (void)c->ops->feed(c, conn->sniff, conn->nsniff);
  if (n == 0 || conch__srv_conn_dead(conn)) {
    return conch__srv_conn_dead(conn) ? -1 : 0;
  }
  return c->ops->feed(c, p, n);
}

static int sniff_start(conch_conn *c) {
  (void)c;
  return 0;
}
static void sniff_free(conch_conn *c) { (void)c; }
static size_t sniff_room(const conch_conn *c) {
  return conch__srv_conn_of(c)->base.closing ? 0 : SRV_READ_CHUNK;
}
/* EOF, or a failure, before a word: nothing to answer. */
static void sniff_on_close(conch_conn *c, int err, int writing) {
  (void)err;
  (void)writing;
  conch__srv_conn_close(conch__srv_conn_of(c));
}
static int sniff_send(conch_conn *c) {
  (void)c;
  return 0;
}
static int sniff_idle(const conch_conn *c) {
  (void)c;
  return 0;
}
/* Nothing asked yet: the connection closes. */
static void sniff_goaway(conch_conn *c) {
  conch__srv_conn_close(conch__srv_conn_of(c));
}

static const conch_session_ops srv_sniff_ops = {
    .name = "sniffing",
    .start = sniff_start,
    .free = sniff_free,
    .submit = conch__srv_sess_submit,
    .resume = conch__srv_sess_call,
    .consume = conch__srv_sess_consume,
    .reset = conch__srv_sess_reset,
    .feed = sniff_feed,
    .want_read = conch__srv_sess_want_read,
    .on_close = sniff_on_close,
    .send = sniff_send,
    .want_write = sniff_idle,
    .over = sniff_idle,
    .keepalive = conch__srv_sess_keepalive,
    .ping = conch__srv_sess_ping,
    .capacity = conch__srv_sess_capacity,
    .sent_all = conch__srv_sess_sent_all,
    .forget = conch__srv_sess_call,
    .room = sniff_room,
    .goaway = sniff_goaway,
};

/* HTTP/1.1: server_h1.c's session behind the table. */
static int h1_start(conch_conn *c) {
  return conch__srv_h1_start(conch__srv_conn_of(c));
}
static void h1_free(conch_conn *c) {
  conch__srv_h1_free(conch__srv_conn_of(c));
}
static int h1_feed(conch_conn *c, const uint8_t *p, size_t n) {
  srv_conn *conn = conch__srv_conn_of(c);
  if (conch__srv_h1_feed(conn, p, n) != 0) {
    conch__srv_conn_close(conn);
    return -1;
  }
  return 0;
}
static size_t h1_room(const conch_conn *c) {
  const srv_conn *conn = conch__srv_conn_of(c);
  return conn->base.closing ? 0 : conch__srv_h1_room(conn);
}
/* EOF: what was asked is answered; once lingering, EOF is what was
   waited for. */
static void h1_on_close(conch_conn *c, int err, int writing) {
  srv_conn *conn = conch__srv_conn_of(c);
  (void)writing;
  if (err == 0 && !conn->lingering) {
    conch__srv_h1_eof(conn);
  } else {
    conch__srv_conn_close(conn);
  }
}
/* Parses what was read ahead and writes the responses into the filter
   (not from a kick, which could start calls outside a turn: the write-out
   calls it only when h1_want_write() says so). */
static int h1_send(conch_conn *c) {
  return conch__srv_h1_produce(conch__srv_conn_of(c)) < 0 ? -1 : 0;
}
/* Responses may be produced until closing or lingering (not from a kick). */
static int h1_want_write(const conch_conn *c) {
  const srv_conn *conn = conch__srv_conn_of(c);
  return !conn->base.closing && !conn->lingering && !conn->kicking;
}
static int h1_over(const conch_conn *c) {
  return conch__srv_h1_done(conch__srv_conn_of(c)) ? CONCH_SESSION_LINGER : 0;
}
static void h1_goaway(conch_conn *c) {
  conch__srv_h1_goaway(conch__srv_conn_of(c));
}

static const conch_session_ops srv_h1_ops = {
    .name = "HTTP/1.1",
    .start = h1_start,
    .free = h1_free,
    .submit = conch__srv_sess_submit,
    .resume = conch__srv_sess_call,
    .consume = conch__srv_sess_consume,
    .reset = conch__srv_sess_reset,
    .feed = h1_feed,
    .want_read = conch__srv_sess_want_read,
    .on_close = h1_on_close,
    .send = h1_send,
    .want_write = h1_want_write,
    .over = h1_over,
    .keepalive = conch__srv_sess_keepalive,
    .ping = conch__srv_sess_ping,
    .capacity = conch__srv_sess_capacity,
    .sent_all = conch__srv_sess_sent_all,
    .forget = conch__srv_sess_call,
    .room = h1_room,
    .goaway = h1_goaway,
};

/* ---- Reading ------------------------------------------------------------ */

/* Whether to read from the transport now (the sessions' want_read): not
   once closing or half-closed; under TLS while it holds less than
   SRV_TLS_IN_MAX of ciphertext; in cleartext while the session has
   room. */
int conch__srv_sess_want_read(const conch_conn *c) {
  const srv_conn *conn = conch__srv_conn_of(c);
  if (conch__srv_conn_dead(conn) || conn->base.closing || conn->rd_eof) {
    return 0;
  }
  if (c->filter.tls != NULL) {
    return conch__tls_buffered(c->filter.tls) < SRV_TLS_IN_MAX;
  }
  return c->ops->room(c) > 0;
}

/* The endpoint's |secure| (conn.c): TLS's handshake is done.  ALPN
   decides; without ALPN the first bytes do, as in cleartext. */
static int ep_secure(conch_conn *c) {
  srv_conn *conn = conch__srv_conn_of(c);
  c->state = CONCH_CONN_READY;
  switch (conch__tls_alpn(c->filter.tls)) {
  case CONCH_TLS_PROTO_H2:
    conn_start(conn, &conch__srv_h2_ops);
    break;
  case CONCH_TLS_PROTO_H1:
    conn_start(conn, &srv_h1_ops);
    break;
  default:
    break;
  }
  return conch__srv_conn_dead(conn) ? -1 : 0;
}

/* The endpoint's |tls_fail|: in the handshake the alert goes out (if
   there is one) before the close; later the connection just closes. */
static void ep_tls_fail(conch_conn *c) {
  srv_conn *conn = conch__srv_conn_of(c);
  if (c->state == CONCH_CONN_HANDSHAKE) {
    conch__srv_conn_finish(conn);
  } else {
    conch__srv_conn_close(conn);
  }
}

/* ---- Writing -------------------------------------------------------------- */

/* Writes what waits for the transport and what the protocol has (conn.c's
   write-out, the endpoint retrying short writes; the sessions stop
   producing once closing or lingering, their |want_write|).  Returns 0, or
   -1 when the connection failed: a failed write, one that took nothing, or
   the session's. */
static int conn_flush(srv_conn *conn) {
  return conch__conn_write(&conn->base, 1) == 0 ? 0 : -1;
}

/* HTTP/1.1 is done: the write side closes (close_notify, then the
   socket's FIN when it is ours), and what the client still sends is read
   and dropped for a while, so that it reads the answer instead of a
   reset. */
#define SRV_LINGER_MS 2000

static void conn_linger(srv_conn *conn) {
  conch_server *s = conn->s;

  if (conn->lingering) {
    return;
  }
  conn->lingering = 1;
  if (conn->base.filter.tls != NULL) {
    (void)conch__tls_shutdown(conn->base.filter.tls);
  }
  if (conch__srv_timer_arm(s, &conn->linger,
                           conch__srv_now(s) + SRV_LINGER_MS) != 0) {
    conch__srv_conn_finish(conn);
  }
}

/* Tells the hooks what |conn| waits for (nothing: it is not watched). */
static void conn_watch(srv_conn *conn) {
  conch_server *s = conn->s;
  (void)s;
  conch__conn_update_watch(&conn->base);
}

/* Closes |conn| when it is dead or done, else tells the hooks what it
   waits for.  It is off the dirty list: what gives it work while it is
   settled puts it back, for the next turn. */
static void conn_settle(srv_conn *conn) {
  conch_server *s = conn->s;

  if (!conch__srv_conn_dead(conn)) {
    conch__srv_conn_resume(conn);
    conch__conn_pull(&conn->base); /* room may have opened */
  }
  /* Handlers told of room send more: flush again, a few rounds at most
     (the rest waits for the next turn). */
  for (int round = 0; !conch__srv_conn_dead(conn); round++) {
    if (conn_flush(conn) != 0) {
      conch__srv_conn_close(conn);
      break;
    }
    if (!conn->lingering &&
        conn->base.ops->over(&conn->base) == CONCH_SESSION_LINGER) {
      conn_linger(conn);
      continue;
    }
    if (round == 4) {
      conch__srv_conn_dirty(conn); /* more may be owed: on the next turn */
      break;
    }
    if (conch__srv_conn_ready(conn) == 0) {
      break;
    }
  }
  if (!conch__srv_conn_dead(conn) && conch__srv_conn_out_size(conn) == 0) {
    if (conn->base.closing) {
      conch__srv_conn_close(conn);
    } else if (!conn->lingering && conn->base.ops->over(&conn->base) == 1) {
      /* HTTP/2: after GOAWAY, or half-closed, and drained */
      conch__srv_conn_close(conn);
    } else if (conn->lingering && !conn->shut_wr) {
      conn->shut_wr = 1;
      if (!conn->has_t) {
        conch__sock_shutdown_write(conn->base.fd);
      }
    }
  }
  if (conch__srv_conn_dead(conn)) {
    conch__srv_conn_drop_rpcs(conn);
    conn_free(conn);
    return;
  }
  /* TLS holds bytes the connection has room for now: no descriptor will
     say so, so it is settled again on the next turn, which comes at
     once. */
  if (conn->base.tls_held && conn->base.ops->room(&conn->base) > 0) {
    conch__srv_conn_dirty(conn);
  }
  if (s->has_hooks) {
    conn_watch(conn);
  }
}

void conch__srv_conn_kick(srv_conn *conn) {
  conch_server *s = conn->s;

  conch__srv_conn_dirty(conn); /* settled at the end of this turn or the next */
  if (s->in_cb) {
    return;
  }
  s->in_cb = 1; /* nghttp2's callbacks may run: no driving from them */
  /* HTTP/1.1 moves requests into the session as it flushes, which could
     start calls: that waits for the turn (its send does nothing while
     |kicking|). */
  conn->kicking = 1;
  if (conn_flush(conn) != 0) {
    conch__srv_conn_close(conn);
  }
  conn->kicking = 0;
  s->in_cb = 0;
  /* What follows (closing, handlers) belongs to the turn it asked for. */
  if (s->has_hooks && !conch__srv_conn_dead(conn)) {
    conn_watch(conn);
  }
}

static void goaway_all(conch_server *s) {
  for (conch_link *l = s->conns.next; l != &s->conns; l = l->next) {
    conn_goaway(CONCH_CONTAINER(l, srv_conn, link));
  }
}

/* Every connection is settled on this turn (or the next one). */
static void dirty_all(conch_server *s) {
  for (conch_link *l = s->conns.next; l != &s->conns; l = l->next) {
    conch__srv_conn_dirty(CONCH_CONTAINER(l, srv_conn, link));
  }
}

int conch_server_shutdown(conch_server *s) {
  if (s == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->shutting) {
    return 0;
  }
  s->shutting = 1;
  if (s->o.drain_ms > 0 &&
      conch__srv_timer_arm(s, &s->drain, conch__srv_now(s) + s->o.drain_ms) !=
          0) {
    s->drain_stage = 1; /* no timer to be had: no grace either */
    for (conch_link *l = s->conns.next; l != &s->conns; l = l->next) {
      conch__srv_conn_fail_held(CONCH_CONTAINER(l, srv_conn, link));
    }
  }
  close_listeners(s);
  goaway_all(s);
  conch__srv_svc_shutdown(s);
  s->ep.ops->kick(&s->ep);
  return 0;
}

int conch_server_idle(const conch_server *s) {
  return s != NULL && s->nconns == 0;
}

size_t conch_server_calls(const conch_server *s) {
  return s != NULL ? s->ncalls : 0;
}

int conch_server_stats_get(const conch_server *s, conch_server_stats *out,
                           size_t size) {
  conch_server_stats st;

  if (s == NULL || out == NULL) {
    return CONCH_ERR_INVALID;
  }
  memset(&st, 0, sizeof(st));
  st.conns = s->nconns;
  st.calls = s->ncalls;
  st.buffered = s->buffered;
  st.buffered_peak = s->buffered_peak;
  st.shed_calls = s->shed_calls;
  st.shed_conns = s->shed_conns;
  memcpy(out, &st, size < sizeof(st) ? size : sizeof(st));
  return 0;
}

/* ---- Driving ------------------------------------------------------------ */

/* The drain timeout passed: first the calls handlers hold end, then (one
   timeout later) the connections still open close. */
static void drain_expired(conch_server *s, int64_t now) {
  s->drain_stage++;
  dirty_all(s);
  for (conch_link *l = s->conns.next; l != &s->conns; l = l->next) {
    srv_conn *conn = CONCH_CONTAINER(l, srv_conn, link);
    if (s->drain_stage == 1) {
      conch__srv_conn_fail_held(conn);
    } else {
      conch__srv_conn_close(conn);
    }
  }
  if (s->drain_stage == 1) {
    (void)conch__srv_timer_arm(s, &s->drain, now + s->o.drain_ms);
  }
}

static void run_timers(conch_server *s) {
  int64_t now = conch__srv_now(s);
  conch_timer *t;

  while ((t = conch__heap_top(&s->heap)) != NULL && t->when <= now) {
    conch__heap_remove(&s->heap, t);
    if (t->kind == SRV_TIMER_DRAIN) {
      drain_expired(s, now);
    } else if (t->kind == SRV_TIMER_ACCEPT) {
      s->resting = 0;
      watch_listeners(s, 1);
    } else if (t->kind == SRV_TIMER_RECV) {
      conch_rpc *rpc = CONCH_CONTAINER(t, conch_rpc, recv);
      conch__srv_conn_dirty(rpc->conn);
      conch__srv_rpc_recv_expired(rpc);
    } else if (t->kind == SRV_TIMER_IDLE) {
      srv_conn *conn = CONCH_CONTAINER(t, srv_conn, idle);
      conch__srv_conn_dirty(conn);
      conn_idle_expired(conn);
    } else if (t->kind == SRV_TIMER_LINGER) {
      conch__srv_conn_close(CONCH_CONTAINER(t, srv_conn, linger));
    } else {
      conch_rpc *rpc = CONCH_CONTAINER(t, conch_rpc, timer);
      conch__srv_conn_dirty(rpc->conn);
      conch__srv_rpc_deadline(rpc);
    }
  }
}

long conch_server_timeout_ms(conch_server *s) {
  conch_timer *t;
  int64_t d;

  if (s == NULL) {
    return -1;
  }
  if (s->pending || !conch__list_empty(&s->ep.dirty)) {
    return 0;
  }
  t = conch__heap_top(&s->heap);
  if (t == NULL) {
    return -1;
  }
  d = t->when - conch__srv_now(s);
  return d <= 0 ? 0 : (d > 0x7fffffff ? 0x7fffffff : (long)d);
}

/* The end of every turn: settle the connections that were given work
   (the dirty list; those given more while they are settled wait for the
   next turn, which comes at once), then the timer. */
static void turn_end(conch_server *s) {
  conch_link todo;

  s->pending = 0;
  if (s->shutting) {
    goaway_all(s);
  }
  conch__list_init(&todo);
  if (!conch__list_empty(&s->ep.dirty)) {
    todo.next = s->ep.dirty.next;
    todo.prev = s->ep.dirty.prev;
    todo.next->prev = &todo;
    todo.prev->next = &todo;
    conch__list_init(&s->ep.dirty);
  }
  while (!conch__list_empty(&todo)) {
    srv_conn *conn = CONCH_CONTAINER(todo.next, srv_conn, base.dirty);
    conch__list_remove(&conn->base.dirty);
    conn->base.flush_pending = 0;
    conn_settle(conn);
  }
  s->in_cb = 0;
  if (s->has_hooks) {
    long ms = conch_server_timeout_ms(s);
    if (ms != s->hook_timer) {
      s->hook_timer = ms;
      s->hooks.timer(ms, s->hooks.user_data);
    }
  }
}

static void handle_fd(conch_server *s, int fd, unsigned events) {
  srv_conn *conn;

  for (size_t i = 0; i < s->nlisten; i++) {
    if (s->lfd[i] == fd) {
      if (events & CONCH_IO_READ) {
        accept_all(s, fd, s->lunix[i]);
      }
      return;
    }
  }
  conn = byfd_find(s, fd);
  if (conn != NULL) {
    /* Read, or writable (the rest of its output goes), or hung up. */
    conch__srv_conn_dirty(conn);
    if ((events & CONCH_IO_READ) && !conch__srv_conn_dead(conn)) {
      conch__conn_on_readable(&conn->base);
    }
  }
}

int conch_server_set_io_hooks(conch_server *s, const conch_io_hooks *hooks) {
  if (s == NULL || (hooks != NULL && (hooks->watch == NULL ||
                                      hooks->timer == NULL))) {
    return CONCH_ERR_INVALID;
  }
  if (s->in_cb) {
    return CONCH_ERR_RECURSIVE;
  }
  if (s->has_hooks) {
    if (!s->resting) {
      watch_listeners(s, 0);
    }
    for (conch_link *l = s->conns.next; l != &s->conns; l = l->next) {
      srv_conn *conn = CONCH_CONTAINER(l, srv_conn, link);
      if (conn->base.watched != 0) {
        s->hooks.watch(conn->base.fd, CONCH_IO_REMOVE, s->hooks.user_data);
      }
      conn->base.watched = 0;
    }
  }
  s->has_hooks = hooks != NULL;
  if (hooks == NULL) {
    return 0;
  }
  s->hooks = *hooks;
  s->hook_timer = -2;
  if (!s->resting) {
    watch_listeners(s, 1);
  }
  s->in_cb = 1;
  dirty_all(s); /* each is watched anew */
  turn_end(s);
  return 0;
}

int conch_server_on_io(conch_server *s, int fd, unsigned events) {
  if (s == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->in_cb) {
    return CONCH_ERR_RECURSIVE;
  }
  s->in_cb = 1;
  handle_fd(s, fd, events);
  run_timers(s);
  turn_end(s);
  return 0;
}

int conch_server_on_timer(conch_server *s) {
  if (s == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->in_cb) {
    return CONCH_ERR_RECURSIVE;
  }
  s->in_cb = 1;
  s->hook_timer = -1; /* it fired */
  run_timers(s);
  turn_end(s);
  return 0;
}

size_t conch_server_pollfds(conch_server *s, struct pollfd *fds, size_t nfds) {
  size_t n = 0;

  if (s == NULL) {
    return 0;
  }
  for (size_t i = 0; i < s->nlisten; i++, n++) {
    if (n < nfds) {
      fds[n].fd = s->lfd[i];
      fds[n].events = s->resting ? 0 : POLLIN;
      fds[n].revents = 0;
    }
  }
  for (conch_link *l = s->conns.next; l != &s->conns; l = l->next, n++) {
    srv_conn *conn = CONCH_CONTAINER(l, srv_conn, link);
    if (n < nfds) {
      unsigned ev = conch__conn_events(&conn->base);
      fds[n].fd = conn->base.fd;
      fds[n].events = (short)(((ev & CONCH_IO_READ) ? POLLIN : 0) |
                              ((ev & CONCH_IO_WRITE) ? POLLOUT : 0));
      fds[n].revents = 0;
    }
  }
  return n;
}

/* Pull mode: a half-closed connection (not polled for reading) hung up. */
static void conn_hangup(conch_server *s, int fd) {
  srv_conn *conn = byfd_find(s, fd);
  if (conn != NULL && conn->rd_eof) {
    conch__srv_conn_close(conn);
  }
}

int conch_server_process(conch_server *s, const struct pollfd *fds,
                         size_t nfds) {
  if (s == NULL || (fds == NULL && nfds > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (s->in_cb) {
    return CONCH_ERR_RECURSIVE;
  }
  s->in_cb = 1;
  for (size_t i = 0; i < nfds; i++) {
    unsigned ev = 0;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      ev |= CONCH_IO_READ;
    }
    if (fds[i].revents & POLLOUT) {
      ev |= CONCH_IO_WRITE;
    }
    if (fds[i].revents & (POLLHUP | POLLERR)) {
      conn_hangup(s, fds[i].fd);
    }
    if (ev != 0) {
      handle_fd(s, fds[i].fd, ev);
    }
  }
  run_timers(s);
  turn_end(s);
  return 0;
}

int conch_server_run(conch_server *s, long timeout_ms) {
  struct pollfd stack[64];
  struct pollfd *fds = stack;
  size_t n;
  long t;
  int rv;

  if (s == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (s->in_cb) {
    return CONCH_ERR_RECURSIVE;
  }
  n = conch_server_pollfds(s, stack, 64);
  if (n > 64) {
    fds = conch__malloc(s->ep.mem, n * sizeof(*fds));
    if (fds == NULL) {
      return CONCH_ERR_NOMEM;
    }
    n = conch_server_pollfds(s, fds, n);
  }
  t = conch_server_timeout_ms(s);
  if (timeout_ms >= 0 && (t < 0 || timeout_ms < t)) {
    t = timeout_ms;
  }
  rv = poll(fds, (nfds_t)n, t > 0x7fffffff ? 0x7fffffff : (int)t);
  if (rv < 0 && errno != EINTR) {
    rv = CONCH_ERR_IO;
  } else {
    rv = conch_server_process(s, fds, rv > 0 ? n : 0);
  }
  if (fds != stack) {
    conch__free(s->ep.mem, fds);
  }
  return rv;
}
