/* conch serve on the server core (conch/server.h): the core serves the
   connections (HTTP/2, HTTP/1.1, TLS; Connect, gRPC, gRPC-Web), this file
   only configures it from srv_config, drives it from our epoll loop (io
   hooks), lets requests in as envd does (the access token, the Host check
   against DNS rebinding, GET /health) and turns its calls into the
   srv_stream the service works with (the user of Authorization: Basic,
   Keepalive-Ping-Interval, the request's timeout). */
#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include <conch/base64.h>

#include "process/process.conch.h"

#define DEFAULT_KEEPALIVE_MS 90000
#define MAX_KEEPALIVE_S 1000000000LL

static const char unauthorized_body[] =
    "{\"code\":401,\"message\":\"unauthorized access, please provide a valid "
    "access token or method signing if supported\"}\n";

/* ---- Driving the core from our loop --------------------------------------- */

typedef struct core_watch {
  srv_watch w;
  srv_server *srv;
  struct core_watch *next; /* srv->core_watches, or srv->dead_watches */
} core_watch;

static void on_core_io(srv_watch *w, uint32_t events) {
  core_watch *cw = SRV_CONTAINER(w, core_watch, w);
  unsigned ev = 0;

  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    ev |= CONCH_IO_READ;
  }
  if (events & EPOLLOUT) {
    ev |= CONCH_IO_WRITE;
  }
  (void)conch_server_on_io(cw->srv->core, w->fd, ev);
}

static int hook_watch(int fd, unsigned events, void *ud) {
  srv_server *srv = ud;
  core_watch **pp = &srv->core_watches;
  core_watch *cw;

  while (*pp != NULL && (*pp)->w.fd != fd) {
    pp = &(*pp)->next;
  }
  cw = *pp;
  if (events & CONCH_IO_REMOVE) {
    if (cw != NULL) {
      srv_watch_set(&srv->loop, &cw->w, 0);
      *pp = cw->next;
      cw->next = srv->dead_watches; /* freed after this loop turn */
      srv->dead_watches = cw;
    }
    return 0;
  }
  if (cw == NULL) {
    cw = calloc(1, sizeof(*cw));
    if (cw == NULL) {
      return -1;
    }
    srv_watch_init(&cw->w, fd, on_core_io);
    cw->srv = srv;
    cw->next = srv->core_watches;
    srv->core_watches = cw;
  }
  return srv_watch_set(&srv->loop, &cw->w,
                       ((events & CONCH_IO_READ) ? EPOLLIN : 0) |
                           ((events & CONCH_IO_WRITE) ? EPOLLOUT : 0));
}

static void on_core_timer(srv_timer *t) {
  srv_server *srv = SRV_CONTAINER(t, srv_server, core_t);
  (void)conch_server_on_timer(srv->core);
}

static int hook_timer(long ms, void *ud) {
  srv_server *srv = ud;

  if (ms < 0) {
    srv_timer_cancel(&srv->loop, &srv->core_t);
    return 0;
  }
  return srv_timer_arm(&srv->loop, &srv->core_t, srv_now_ms() + ms);
}

/* ---- Who gets in ----------------------------------------------------------- */

static int token_ok(const char *got, const char *want) {
  size_t n = strlen(want);
  return got != NULL && strlen(got) == n && CRYPTO_memcmp(got, want, n) == 0;
}

static int is_health(const conch_server_request *req) {
  return strcmp(req->path, "/health") == 0 &&
         (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0);
}

/* envd lets GET and POST /files past the token: they take a signature
   instead, checked by the handler (serve_files.c). */
static int is_files(const conch_server_request *req) {
  return strcmp(req->path, "/files") == 0 &&
         (strcmp(req->method, "GET") == 0 || strcmp(req->method, "POST") == 0);
}

/* envd's order: the Host check, then the token (not for the health
   check). */
static int gate(const conch_server_request *req, conch_server_verdict *v,
                void *ud) {
  srv_server *srv = ud;

  if (srv->cfg.host_check && !srv_authority_ok(srv, req->authority)) {
    static const char body[] =
        "403 forbidden: the Host is not a loopback name\n";
    v->reply.status = 403;
    v->reply.content_type = "text/plain; charset=utf-8";
    v->reply.body = body;
    v->reply.body_len = sizeof(body) - 1;
    return 1;
  }
  if (srv->cfg.access_token != NULL && !is_health(req) && !is_files(req) &&
      !token_ok(conch_server_request_header(req, "x-access-token"),
                srv->cfg.access_token)) {
    v->reply.status = 401;
    v->reply.content_type = "application/json; charset=utf-8";
    v->reply.body = unauthorized_body;
    v->reply.body_len = sizeof(unauthorized_body) - 1;
    return 1;
  }
  return 0;
}

static void health(const conch_server_request *req, conch_server_reply *r,
                   void *ud) {
  static const char body[] = "404 page not found\n";
  (void)ud;
  if (is_health(req)) {
    r->status = 204;
    return;
  }
  r->status = 404;
  r->content_type = "text/plain; charset=utf-8";
  r->body = body;
  r->body_len = sizeof(body) - 1;
}

/* A Unix socket peer must be us, root, or a uid the operator allowed. */
static int peer_filter(const conch_server_peer *p, void *ud) {
  static unsigned long refused;
  srv_server *srv = ud;

  if (!p->is_unix) {
    return 1;
  }
  if (p->uid == (long)srv->euid || p->uid == 0) {
    return 1;
  }
  for (size_t i = 0; i < srv->cfg.nallow_uids; i++) {
    if ((long)srv->cfg.allow_uids[i] == p->uid) {
      return 1;
    }
  }
  /* Said once, then every 1000th: a peer may not fill the log. */
  if (refused++ % 1000 == 0) {
    fprintf(stderr,
            "conch serve: refused a connection from uid %ld (pid %ld); "
            "--allow-uid lets a uid in\n",
            p->uid, p->pid);
  }
  return 0;
}

/* ---- Calls ------------------------------------------------------------------- */

srv_server *srv_rpc_server(const srv_stream *st) { return st->srv; }

size_t srv_rpc_queued(const srv_stream *st) {
  return st->rpc != NULL ? conch_rpc_queued(st->rpc) : 0;
}

static void on_keepalive(srv_timer *t) {
  srv_service_keepalive(SRV_CONTAINER(t, srv_stream, keepalive_t));
}

/* The call is over for the service: what it holds for it goes now, the
   struct after this loop turn. */
static void stream_done(srv_stream *st) {
  srv_server *srv = st->srv;

  if (st->finished) {
    return;
  }
  st->finished = 1;
  srv_service_stream_gone(st);
  srv_timer_cancel(&srv->loop, &st->keepalive_t);
  st->dead_next = srv->dead_streams;
  srv->dead_streams = st;
}

void srv_stream_free(srv_stream *st) {
  srv_user_clear(&st->user);
  free(st);
}

void srv_rpc_vfinish(srv_stream *st, conch_code code, const char *fmt,
                     va_list ap) {
  conch_rpc *rpc = st->rpc;
  conch_status status;

  if (st->finished || rpc == NULL) {
    return;
  }
  st->rpc = NULL;
  stream_done(st);
  conch_status_init(&status);
  if (code != CONCH_CODE_OK) {
    (void)conch_status_vsetf(&status, st->srv->mem, code,
                             fmt != NULL ? fmt : "", ap);
  }
  (void)conch_rpc_finish(rpc, &status);
  conch_status_clear(&status);
}

void srv_rpc_finish(srv_stream *st, conch_code code, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  srv_rpc_vfinish(st, code, fmt, ap);
  va_end(ap);
}

static void after_send(srv_stream *st, int rv) {
  if (rv != 0) {
    srv_rpc_finish(st, CONCH_CODE_RESOURCE_EXHAUSTED, "cannot send: %s",
                   conch_strerror(rv));
    return;
  }
  if (st->m->shape == SRV_UNARY) {
    srv_rpc_finish(st, CONCH_CODE_OK, NULL);
    return;
  }
  /* A subscriber over the high-water mark pauses its process (serve_proc.c)
     until its queue is back under the low one. */
  if (conch_rpc_queued(st->rpc) > st->srv->cfg.out_high) {
    (void)conch_rpc_notify_drained(st->rpc, st->srv->cfg.out_low);
  }
}

int srv_rpc_send(srv_stream *st, const ProtobufCMessage *msg) {
  int rv;

  if (st->finished || st->rpc == NULL) {
    return 0;
  }
  if (msg->descriptor == st->m->output) {
    rv = conch_rpc_send(st->rpc, msg);
  } else {
    /* Connect answers with StartResponses: ConnectResponse is the same
       message on the wire. */
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n > 0 ? n : 1);
    if (b == NULL) {
      rv = CONCH_ERR_NOMEM;
    } else {
      rv = conch_rpc_send_packed(st->rpc, b,
                                 protobuf_c_message_pack(msg, b));
      free(b);
    }
  }
  after_send(st, rv);
  return rv != 0 ? -1 : 0;
}

int srv_rpc_send_packed(srv_stream *st, const uint8_t *p, size_t len) {
  int rv;

  if (st->finished || st->rpc == NULL) {
    return 0;
  }
  rv = conch_rpc_send_packed(st->rpc, p, len);
  after_send(st, rv);
  return rv != 0 ? -1 : 0;
}

void srv_rpc_pause_input(srv_stream *st, int paused) {
  if (st->rpc != NULL && !st->finished) {
    (void)(paused ? conch_rpc_pause(st->rpc) : conch_rpc_resume(st->rpc));
  }
}

/* Authorization: Basic base64("user:password"), as Go's BasicAuth reads it:
   anything else means "no user given". */
static char *basic_user(const char *auth) {
  static const char prefix[] = "Basic ";
  uint8_t *raw, *colon;
  size_t n, rawlen;
  char *user;

  if (auth == NULL || strncasecmp(auth, prefix, sizeof(prefix) - 1) != 0) {
    return NULL;
  }
  auth += sizeof(prefix) - 1;
  n = strlen(auth);
  raw = malloc(conch_base64_decoded_max(n) + 1);
  if (raw == NULL) {
    return NULL;
  }
  if (conch_base64_decode(auth, n, 0, raw, &rawlen) != 0 ||
      (colon = memchr(raw, ':', rawlen)) == NULL) {
    free(raw);
    return NULL;
  }
  user = malloc((size_t)(colon - raw) + 1);
  if (user != NULL) {
    memcpy(user, raw, (size_t)(colon - raw));
    user[colon - raw] = '\0';
  }
  free(raw);
  return user;
}

conch_code srv_request_user(srv_server *srv, const conch_metadata *md,
                            srv_user *u, char *err, size_t errlen) {
  char *name = basic_user(conch_metadata_get(md, "authorization", NULL));
  int rv;

  if (name == NULL && srv->cfg.default_user != NULL) {
    rv = srv_user_lookup(srv->cfg.default_user, u);
  } else if (name == NULL) {
    rv = srv_user_by_uid(srv->euid, u);
  } else {
    rv = srv_user_lookup(name, u);
    if (rv == -1) {
      snprintf(err, errlen, "invalid username: '%s'", name);
    }
    free(name);
  }
  if (rv == -1) {
    if (name == NULL) {
      snprintf(err, errlen, "invalid default user");
    }
    return CONCH_CODE_UNAUTHENTICATED;
  }
  if (rv != 0) {
    snprintf(err, errlen, "out of memory");
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  }
  return CONCH_CODE_OK;
}

int srv_parse_keepalive(const char *v, int64_t *ms, char *err,
                        size_t errlen) {
  char *end;
  long long s;

  if (v == NULL) {
    return 0;
  }
  errno = 0;
  s = strtoll(v, &end, 10);
  if (end == v || *end != '\0' || (errno != 0 && s != LLONG_MIN)) {
    return 0;
  }
  if (s <= 0) {
    snprintf(err, errlen,
             "invalid Keepalive-Ping-Interval '%s': must be a positive "
             "number of seconds",
             v);
    return -1;
  }
  *ms = (s > MAX_KEEPALIVE_S ? MAX_KEEPALIVE_S : s) * 1000;
  return 0;
}

/* Keepalive-Ping-Interval, seconds, for the server streams of Process. */
static int parse_keepalive(srv_stream *st, const char *v, char *err,
                           size_t errlen) {
  if (st->m->shape != SRV_SERVER_STREAM) {
    return 0;
  }
  return srv_parse_keepalive(v, &st->keepalive_ms, err, errlen);
}

static void on_call(conch_rpc *rpc, void *ud) {
  srv_server *srv = ud;
  const conch_metadata *md = conch_rpc_request_headers(rpc);
  srv_stream *st = calloc(1, sizeof(*st));
  char err[512];
  conch_code code;
  long tmo;

  if (st == NULL) {
    conch_status s;
    conch_status_init(&s);
    s.code = CONCH_CODE_RESOURCE_EXHAUSTED;
    (void)conch_rpc_finish(rpc, &s);
    return;
  }
  st->rpc = rpc;
  st->srv = srv;
  st->m = srv_service_route(conch_rpc_method(rpc)->path);
  st->json = conch_rpc_codec(rpc) == CONCH_CODEC_JSON;
  st->keepalive_ms = DEFAULT_KEEPALIVE_MS;
  srv_timer_init(&st->keepalive_t, on_keepalive);
  conch_rpc_set_data(rpc, st);
  /* Clients need no tree leader of their own here (conch/process.h,
     "Process trees"): every process's group is signalled, unless envd's
     way was asked for. */
  if (!srv->cfg.signal_pid_only) {
    (void)conch_metadata_add_str(conch_rpc_response_headers(rpc),
                                 "conch-signals", "group");
  }
  tmo = conch_rpc_timeout_ms(rpc);
  st->timeout_ms = tmo > 0 ? tmo : 0;
  code = srv_request_user(srv, md, &st->user, err, sizeof(err));
  if (code != CONCH_CODE_OK) {
    srv_rpc_finish(st, code, "%s", err);
    return;
  }
  if (parse_keepalive(st, conch_metadata_get(md, "keepalive-ping-interval",
                                             NULL),
                      err, sizeof(err)) != 0) {
    srv_rpc_finish(st, CONCH_CODE_INVALID_ARGUMENT, "%s", err);
  }
}

static void on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                       void *ud) {
  srv_stream *st = conch_rpc_data(rpc);
  (void)ud;

  if (st != NULL && !st->finished) {
    st->m->on_message(st, (ProtobufCMessage *)msg);
  }
}

static void on_half_close(conch_rpc *rpc, void *ud) {
  srv_stream *st = conch_rpc_data(rpc);
  (void)ud;

  if (st != NULL && !st->finished && st->m->on_end != NULL) {
    st->m->on_end(st);
  }
}

static void on_cancel(conch_rpc *rpc, const conch_status *status, void *ud) {
  srv_stream *st = conch_rpc_data(rpc);
  (void)status;
  (void)ud;

  if (st != NULL) {
    st->rpc = NULL;
    stream_done(st);
  }
}

static void on_send_ready(conch_rpc *rpc, void *ud) {
  srv_stream *st = conch_rpc_data(rpc);
  (void)ud;

  if (st != NULL && !st->finished && st->over) {
    srv_proc_sub_drained(st);
  }
}

/* ---- The server ---------------------------------------------------------------- */

void srv_core_init(srv_server *srv) {
  srv->core = NULL;
  srv->core_watches = NULL;
  srv->dead_watches = NULL;
  srv->dead_streams = NULL;
  srv->fs = NULL;
  srv_timer_init(&srv->core_t, on_core_timer);
}

static int core_fail(const char *what, int rv) {
  fprintf(stderr, "conch serve: %s: %s\n", what, conch_strerror(rv));
  return SRV_EXIT_FAILED;
}

/* The core's clock when srv_clock_set() gave one: the loop's. */
static int64_t core_clock(void *ud) {
  (void)ud;
  return srv_now_ms();
}

int srv_core_start(srv_server *srv, int listen_fd) {
  static const conch_server_handler h = {on_call,   on_message,
                                         NULL,      on_half_close,
                                         on_cancel, on_send_ready};
  const srv_config *cfg = &srv->cfg;
  conch_server_opts *o;
  conch_io_hooks hooks;
  int status = SRV_EXIT_FAILED;
  int rv;

  rv = conch_server_opts_new(&o);
  if (rv != 0) {
    core_fail("the server's options", rv);
    goto fail;
  }
  /* Every limit of the core is set here from conch serve's own
     configuration (serve_main.c), so that changes of the core's defaults
     (conch/server.h, "Limits") do not change conch serve.  The buffer
     budget keeps its last eighth for small requests (a List, a
     SendSignal, the teardown of conch_process_close()), which therefore
     get through however many unfinished bodies fill the rest. */
  rv = conch_server_opts_set_recv_limit(o, cfg->max_message);
  rv |= conch_server_opts_set_max_streams(o, cfg->max_streams);
  rv |= conch_server_opts_set_send_buffer(o, SIZE_MAX);
  rv |= conch_server_opts_set_idle_timeout(o, (long)cfg->idle_ms);
  rv |= conch_server_opts_set_header_timeout(o, (long)cfg->header_ms);
  rv |= conch_server_opts_set_body_timeout(o, (long)cfg->body_ms);
  rv |= conch_server_opts_set_buffer_limits(o, cfg->conn_buffered,
                                            cfg->max_buffered);
  rv |= conch_server_opts_set_max_conns(o, cfg->max_conns);
  rv |= conch_server_opts_set_compression(o, "gzip");
  rv |= conch_server_opts_set_compress_min_bytes(o, cfg->compress_min);
  rv |= conch_server_opts_set_gate(o, gate, srv);
  rv |= conch_server_opts_set_accept_filter(o, peer_filter, srv);
  if (srv_clock_injected()) {
    rv |= conch_server_opts_set_clock(o, core_clock, NULL);
  }
  if (rv != 0) {
    /* Or'ed codes: only "failed" is sure. */
    fprintf(stderr, "conch serve: the server's options could not be set\n");
  } else if (cfg->tls_cert != NULL) {
    rv = conch_server_opts_set_tls(o, cfg->tls_cert, cfg->tls_key);
    if (rv == CONCH_ERR_TLS) {
      fprintf(stderr, "conch serve: TLS: %s\n", conch_server_opts_tls_error(o));
      status = SRV_EXIT_USAGE;
    } else if (rv != 0) {
      core_fail("TLS", rv);
    }
  }
  if (rv == 0) {
    rv = conch_server_new(&srv->core, o);
    if (rv != 0) {
      core_fail("the server", rv);
    }
  }
  conch_server_opts_free(o);
  if (rv != 0) {
    goto fail;
  }
  for (size_t i = 0; srv_service_method(i) != NULL; i++) {
    const srv_method *m = srv_service_method(i);
    conch_method cm;
    memset(&cm, 0, sizeof(cm));
    cm.path = m->path;
    cm.kind = m->shape == SRV_UNARY           ? CONCH_STREAM_UNARY
              : m->shape == SRV_SERVER_STREAM ? CONCH_STREAM_SERVER
                                              : CONCH_STREAM_CLIENT;
    cm.input = m->input;
    cm.output = m->output;
    rv = conch_server_add_method(srv->core, &cm, &h, srv);
    if (rv != 0) {
      core_fail(m->path, rv);
      goto fail;
    }
  }
  rv = srv_fs_start(srv);
  if (rv != 0) {
    core_fail("filesystem.Filesystem", rv);
    goto fail;
  }
  /* Reflection (buf curl --reflect, grpcurl) from process.proto's
     descriptors, and gRPC health: SERVING until the shutdown, when the
     core turns every service NOT_SERVING. */
  rv = conch_server_add_file(srv->core, &conch_file_process_2fprocess_2eproto);
  if (rv == 0) {
    rv = conch_server_add_reflection(srv->core);
  }
  if (rv == 0) {
    rv = conch_server_health_set(srv->core, "process.Process",
                                 CONCH_HEALTH_SERVING);
  }
  if (rv == 0) {
    rv = conch_server_health_set(srv->core, "filesystem.Filesystem",
                                 CONCH_HEALTH_SERVING);
  }
  if (rv != 0) {
    core_fail("reflection and health", rv);
    goto fail;
  }
  rv = conch_server_add_route(srv->core, "/health", health, srv);
  if (rv != 0) {
    core_fail("/health", rv);
    goto fail;
  }
  rv = srv_files_register(srv);
  if (rv != 0) {
    core_fail("/files", rv);
    goto fail;
  }
  if (listen_fd >= 0) {
    rv = conch_server_listen_fd(srv->core, listen_fd);
    if (rv != 0) {
      return core_fail("the listening socket", rv); /* the core closed it */
    }
  }
  hooks.watch = hook_watch;
  hooks.timer = hook_timer;
  hooks.user_data = srv;
  rv = conch_server_set_io_hooks(srv->core, &hooks);
  return rv != 0 ? core_fail("the server's loop", rv) : 0;

fail:
  /* Not handed to the core yet (srv->core, if made, is freed by
     srv_core_free()). */
  if (listen_fd >= 0) {
    close(listen_fd);
  }
  return status;
}

void srv_core_collect(srv_server *srv) {
  while (srv->dead_streams != NULL) {
    srv_stream *st = srv->dead_streams;
    srv->dead_streams = st->dead_next;
    srv_stream_free(st);
  }
  while (srv->dead_watches != NULL) {
    core_watch *cw = srv->dead_watches;
    srv->dead_watches = cw->next;
    free(cw);
  }
}

void srv_core_free(srv_server *srv) {
  conch_server_free(srv->core); /* every call gets on_cancel */
  srv->core = NULL;
  srv_fs_free(srv);
  srv_core_collect(srv);
  while (srv->core_watches != NULL) {
    core_watch *cw = srv->core_watches;
    srv->core_watches = cw->next;
    srv_watch_set(&srv->loop, &cw->w, 0);
    free(cw);
  }
  srv_timer_cancel(&srv->loop, &srv->core_t);
}
