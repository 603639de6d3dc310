/* Plain HTTP handlers of the server core (conch_server_add_http()): a
   request to a handler's path becomes an exchange, a conch_rpc without a
   method (rpc->http), so that it has the stream, timers, held bytes and
   budget of a call; server_rpc.c hands it here where an RPC would go to
   the protocols.  Over HTTP/1.1 the exchange is the same: the head and
   body go through the call's sink (srv_sink), which is server_h1.c's.

   Bounded both ways: the request body goes to on_body as the session
   hands it over, and is credited back (HTTP/2's stream window; HTTP/1.1:
   the parser reads on) only once the handler took it (a paused exchange
   holds at most the window); the response body waits in rpc->out,
   refused past the budget (http_room()), and the session takes it from
   there as the client reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem_int.h"
#include "server_int.h"

/* The most response bytes an exchange queues. */
#define SRV_HTTP_OUT_MAX (256 * 1024)

static const conch_mem *http_mem(const conch_rpc *rpc) {
  return rpc->conn->s->ep.mem;
}

static size_t http_room(const conch_rpc *rpc) {
  size_t room = rpc->conn->s->o.send_buffer;
  return room < SRV_HTTP_OUT_MAX ? room : SRV_HTTP_OUT_MAX;
}

/* The handler holds |h|. */
static int held(const conch_http *h) {
  return h != NULL && h->rpc != NULL && h->rpc->state == SRV_RPC_USER;
}

/* The handler lets go of the exchange. */
static void give_up(conch_rpc *rpc) {
  rpc->state = SRV_RPC_DONE;
  conch__srv_timer_disarm(rpc->conn->s, &rpc->recv);
  conch__srv_conn_idle(rpc->conn);
}

static void reset(conch_rpc *rpc, uint32_t code) {
  rpc->sink->reset(rpc, code);
  conch__srv_conn_kick(rpc->conn);
}

int conch__srv_http_start(conch_rpc *rpc, const srv_http_route *route) {
  conch_http *h = conch__calloc(http_mem(rpc), 1, sizeof(*h));

  if (h == NULL) {
    return CONCH_ERR_NOMEM;
  }
  h->rpc = rpc;
  h->h = route->h;
  h->user_data = route->user_data;
  h->clen = -1;
  h->head = strcmp(rpc->mname, "HEAD") == 0;
  rpc->http = h;
  rpc->state = SRV_RPC_USER;
  conch__srv_conn_idle(rpc->conn);
  conch__srv_rpc_recv_update(rpc);
  h->h.on_request(h, h->user_data);
  return 0;
}

void conch__srv_http_body(conch_rpc *rpc, const uint8_t *p, size_t n) {
  conch_http *h = rpc->http;

  if (h->h.on_body != NULL && n > 0) {
    h->h.on_body(h, p, n, h->user_data);
  }
}

void conch__srv_http_eof(conch_rpc *rpc) {
  conch_http *h = rpc->http;

  conch__srv_rpc_recv_update(rpc);
  if (h->h.on_end != NULL) {
    h->h.on_end(h, h->user_data);
  }
}

void conch__srv_http_cancel(conch_rpc *rpc) {
  conch_http *h = rpc->http;

  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  give_up(rpc);
  if (h->h.on_cancel != NULL) {
    h->h.on_cancel(h, h->user_data);
  }
}

/* A plain answer without body (the exchange given up already). */
static int submit_status(conch_rpc *rpc, int status) {
  const conch_mem *mem = http_mem(rpc);
  char st[4];
  srv_hb hb = {0};
  int rv;

  (void)snprintf(st, sizeof(st), "%03d", status);
  conch__srv_hb_raw(&hb, mem, ":status", st);
  conch__srv_hb_raw(&hb, mem, "content-length", "0");
  rv = conch__srv_rpc_submit(rpc, &hb, 0);
  conch__srv_hb_clear(&hb, mem);
  return rv;
}

void conch__srv_http_fail(conch_rpc *rpc, conch_code code) {
  conch_http *h = rpc->http;
  int status = code == CONCH_CODE_DEADLINE_EXCEEDED      ? 408
               : code == CONCH_CODE_RESOURCE_EXHAUSTED ||
                       code == CONCH_CODE_UNAVAILABLE
                   ? 503
                   : 500;

  if (rpc->state != SRV_RPC_USER) {
    return;
  }
  conch__srv_http_cancel(rpc);
  if (h->responded || submit_status(rpc, status) != 0) {
    reset(rpc, NGHTTP2_INTERNAL_ERROR);
    return;
  }
  conch__srv_conn_kick(rpc->conn);
}

int conch__srv_http_ready(conch_rpc *rpc) {
  conch_http *h = rpc->http;

  if (rpc->state != SRV_RPC_USER || !h->want_ready ||
      conch__buf_size(&rpc->out) >= http_room(rpc)) {
    return 0;
  }
  h->want_ready = 0;
  if (h->h.on_send_ready != NULL) {
    h->h.on_send_ready(h, h->user_data);
  }
  return 1;
}

void conch__srv_http_free(conch_rpc *rpc) {
  if (rpc->http != NULL) {
    conch__free(http_mem(rpc), rpc->http);
    rpc->http = NULL;
  }
}

/* ---- Public ---------------------------------------------------------------- */

const char *conch_http_method(const conch_http *h) {
  return h != NULL ? h->rpc->mname : NULL;
}

const char *conch_http_path(const conch_http *h) {
  if (h == NULL) {
    return NULL;
  }
  return h->rpc->path != NULL ? h->rpc->path : "";
}

const char *conch_http_query(const conch_http *h) {
  if (h == NULL) {
    return NULL;
  }
  return h->rpc->query != NULL ? h->rpc->query : "";
}

const char *conch_http_header(const conch_http *h, const char *name) {
  const char *v;

  if (h == NULL || name == NULL) {
    return NULL;
  }
  v = conch_metadata_get(&h->rpc->proto_md, name, NULL);
  return v != NULL ? v : conch_metadata_get(&h->rpc->req_md, name, NULL);
}

size_t conch_http_header_count(const conch_http *h) {
  return h != NULL ? conch_metadata_count(&h->rpc->proto_md) +
                         conch_metadata_count(&h->rpc->req_md)
                   : 0;
}

int conch_http_header_at(const conch_http *h, size_t i, const char **name,
                         const char **value, size_t *len) {
  const uint8_t *v;
  size_t np;
  int rv;

  if (h == NULL) {
    return CONCH_ERR_INVALID;
  }
  np = conch_metadata_count(&h->rpc->proto_md);
  rv = i < np ? conch_metadata_at(&h->rpc->proto_md, i, name, &v, len)
              : conch_metadata_at(&h->rpc->req_md, i - np, name, &v, len);
  if (rv == 0 && value != NULL) {
    *value = (const char *)v;
  }
  return rv;
}

long conch_http_peer_uid(const conch_http *h) {
  return h != NULL ? h->rpc->conn->peer_uid : -1;
}

conch_server *conch_http_server(const conch_http *h) {
  return h != NULL ? h->rpc->conn->s : NULL;
}

void *conch_http_user_data(const conch_http *h) {
  return h != NULL ? h->user_data : NULL;
}

void conch_http_set_data(conch_http *h, void *data) {
  if (h != NULL) {
    h->data = data;
  }
}

void *conch_http_data(const conch_http *h) {
  return h != NULL ? h->data : NULL;
}

int conch_http_pause(conch_http *h) {
  if (h == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!held(h)) {
    return CONCH_ERR_STATE;
  }
  h->rpc->paused = 1;
  conch__srv_rpc_recv_update(h->rpc);
  return 0;
}

int conch_http_resume(conch_http *h) {
  conch_rpc *rpc;

  if (h == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!held(h)) {
    return CONCH_ERR_STATE;
  }
  rpc = h->rpc;
  if (rpc->paused) {
    rpc->paused = 0;
    rpc->resumed = 1;
    conch__srv_conn_kick(rpc->conn); /* outside a turn: asks for one */
  }
  return 0;
}

/* A content-length value: digits only, at most 18 of them. */
static int parse_length(const char *v, int64_t *out) {
  int64_t n = 0;
  size_t i;

  for (i = 0; v[i] != '\0'; i++) {
    if (v[i] < '0' || v[i] > '9' || i >= 18) {
      return -1;
    }
    n = n * 10 + (v[i] - '0');
  }
  if (i == 0) {
    return -1;
  }
  *out = n;
  return 0;
}

static int header_ok(const char *s) {
  for (; *s != '\0'; s++) {
    if (*s == '\r' || *s == '\n') {
      return 0;
    }
  }
  return 1;
}

int conch_http_respond(conch_http *h, int status, const char *const *headers,
                       int body) {
  const conch_mem *mem;
  conch_rpc *rpc;
  srv_hb hb = {0};
  size_t count = 0;
  int64_t clen = -1;
  char st[4];
  int rv;

  if (h == NULL || status < 200 || status > 599) {
    return CONCH_ERR_INVALID;
  }
  if (!held(h) || h->responded) {
    return CONCH_ERR_STATE;
  }
  rpc = h->rpc;
  mem = http_mem(rpc);
  for (; headers != NULL && headers[count] != NULL; count += 2) {
    const char *name = headers[count];
    const char *value = headers[count + 1];
    if (value == NULL || name[0] == '\0' || name[0] == ':' ||
        !header_ok(name) || !header_ok(value)) {
      return CONCH_ERR_INVALID;
    }
    if (strcmp(name, "content-length") == 0 &&
        parse_length(value, &clen) != 0) {
      return CONCH_ERR_INVALID;
    }
  }
  (void)snprintf(st, sizeof(st), "%03d", status);
  conch__srv_hb_raw(&hb, mem, ":status", st);
  for (size_t i = 0; i < count; i += 2) {
    conch__srv_hb_raw(&hb, mem, headers[i], headers[i + 1]);
  }
  /* Without a body nothing may be promised but nothing. */
  h->body = body && !h->head;
  if (!body) {
    clen = clen > 0 ? -1 : clen;
  }
  /* The session copies the names and values. */
  rv = conch__srv_rpc_submit(rpc, &hb, h->body);
  conch__srv_hb_clear(&hb, mem);
  if (rv != 0) {
    return rv;
  }
  h->responded = 1;
  h->clen = h->head ? -1 : clen;
  conch__srv_conn_kick(rpc->conn);
  return 0;
}

int conch_http_write(conch_http *h, const void *data, size_t len) {
  conch_rpc *rpc;

  if (h == NULL || (data == NULL && len > 0)) {
    return CONCH_ERR_INVALID;
  }
  if (!held(h) || !h->responded || (!h->body && !h->head)) {
    return CONCH_ERR_STATE;
  }
  if (h->head) {
    return 0; /* HEAD: nothing goes out */
  }
  if (h->clen >= 0 && h->sent + len > (uint64_t)h->clen) {
    return CONCH_ERR_INVALID;
  }
  rpc = h->rpc;
  if (conch__buf_size(&rpc->out) >= http_room(rpc)) {
    h->want_ready = 1;
    return CONCH_ERR_AGAIN;
  }
  if (len == 0) {
    return 0;
  }
  if (conch__buf_append(&rpc->out, http_mem(rpc), data, len) != 0) {
    return CONCH_ERR_NOMEM;
  }
  h->sent += len;
  conch__srv_rpc_resume(rpc);
  conch__srv_conn_kick(rpc->conn);
  return 0;
}

size_t conch_http_queued(const conch_http *h) {
  return h != NULL ? conch__buf_size(&h->rpc->out) : 0;
}

int conch_http_end(conch_http *h) {
  conch_rpc *rpc;

  if (h == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (!held(h)) {
    return CONCH_ERR_STATE;
  }
  rpc = h->rpc;
  give_up(rpc);
  if (!h->responded) {
    if (submit_status(rpc, 500) != 0) {
      reset(rpc, NGHTTP2_INTERNAL_ERROR);
    }
    conch__srv_conn_kick(rpc->conn);
    return 0;
  }
  if (h->clen >= 0 && h->sent != (uint64_t)h->clen) {
    /* Fewer bytes than promised: the client must not take it whole. */
    reset(rpc, NGHTTP2_INTERNAL_ERROR);
    return 0;
  }
  rpc->out_end = 1;
  conch__srv_rpc_resume(rpc);
  conch__srv_conn_kick(rpc->conn);
  return 0;
}
