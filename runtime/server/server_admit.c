/* What a call may take: the gate and the plain routes that answer before
   a method is looked for, the request body's timer, and the budget of
   request bytes buffered for all calls (who is shed when it is full). */
#include <stdio.h>
#include <string.h>

#include "server_int.h"
#include "status_int.h"
#include "wire.h"

/* ---- The gate and plain routes ---------------------------------------------- */

const char *conch_server_request_header(const conch_server_request *req,
                                        const char *name) {
  const conch_rpc *rpc;
  const char *v;

  if (req == NULL || name == NULL || req->impl_ == NULL) {
    return NULL;
  }
  rpc = req->impl_;
  v = conch_metadata_get(&rpc->proto_md, name, NULL);
  return v != NULL ? v : conch_metadata_get(&rpc->req_md, name, NULL);
}

static void put_status(char *b, int status) {
  b[0] = (char)('0' + status / 100);
  b[1] = (char)('0' + status / 10 % 10);
  b[2] = (char)('0' + status % 10);
  b[3] = '\0';
}

/* Answers with plain HTTP: |r|'s status, content type, headers and body
   (none for HEAD). */
static void rpc_reply(conch_rpc *rpc, const conch_server_reply *r) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  int status = r->status >= 200 && r->status <= 599 ? r->status : 500;
  int head = strcmp(rpc->mname, "HEAD") == 0;
  size_t blen = r->body != NULL ? r->body_len : 0;
  char st[4], num[24];
  srv_hb h = {0};
  int rv = 0;

  rpc->state = SRV_RPC_DONE;
  conch__srv_timer_disarm(rpc->conn->s, &rpc->recv);
  conch__srv_conn_idle(rpc->conn);
  put_status(st, status);
  conch__srv_hb_str(&h, mem, ":status", st);
  if (r->content_type != NULL) {
    conch__srv_hb_str(&h, mem, "content-type", r->content_type);
  }
  if (status != 204 && status != 304) {
    (void)snprintf(num, sizeof(num), "%zu", blen);
    conch__srv_hb_str(&h, mem, "content-length", num);
  }
  for (size_t i = 0; r->headers != NULL && r->headers[i] != NULL &&
                     r->headers[i + 1] != NULL;
       i += 2) {
    conch__srv_hb_str(&h, mem, r->headers[i], r->headers[i + 1]);
  }
  if (head || status == 204 || status == 304) {
    blen = 0;
  }
  if (blen > 0) {
    rv = conch__buf_append(&rpc->out, mem, r->body, blen);
  }
  rpc->out_end = 1;
  if (rv == 0) {
    rv = conch__srv_rpc_submit(rpc, &h, blen > 0);
  }
  if (rv != 0) {
    rpc->sink->reset(rpc, NGHTTP2_INTERNAL_ERROR);
  }
  conch__srv_hb_clear(&h, mem);
}

/* The gate refused the call: a plain answer, or an RPC error in the
   request's protocol (a Connect unary error when none is named). */
static void rpc_refuse(conch_rpc *rpc, const conch_server_verdict *v) {
  const char *ct = conch__srv_proto_hdr(rpc, "content-type");
  conch_status st;
  conch_ctype t;
  conch_code code = v->code;

  if (v->reply.status != 0) {
    rpc_reply(rpc, &v->reply);
    return;
  }
  rpc->wire = SRV_CONNECT_UNARY;
  if (ct != NULL && conch__ctype_parse(ct, strlen(ct), &t) == 0 &&
      t.codec != CONCH_CT_OTHER) {
    rpc->wire = t.family == CONCH_CT_CONNECT          ? SRV_CONNECT_UNARY
                : t.family == CONCH_CT_CONNECT_STREAM ? SRV_CONNECT_STREAM
                : t.family == CONCH_CT_GRPC           ? SRV_GRPC
                                                      : SRV_GRPC_WEB;
    rpc->json = t.codec == CONCH_CT_JSON;
  }
  if (code <= CONCH_CODE_OK || code > CONCH_CODE_UNAUTHENTICATED) {
    code = CONCH_CODE_PERMISSION_DENIED;
  }
  conch_status_init(&st);
  (void)conch__status_set(&st, conch__srv_rpc_mem(rpc), code,
                          CONCH_ORIGIN_LOCAL, 0, "%s",
                          v->message != NULL ? v->message : "");
  conch__srv_rpc_end(rpc, &st);
  conch_status_clear(&st);
}

/* The gate, then plain routes.  Returns 0 when the request goes on to its
   method. */
int conch__srv_rpc_gate(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  conch_server_request req;
  srv_route *route;
  srv_http_route *http;

  memset(&req, 0, sizeof(req));
  req.method = rpc->mname;
  req.path = rpc->path != NULL ? rpc->path : "";
  req.authority = rpc->authority != NULL ? rpc->authority
                                         : conch__srv_proto_hdr(rpc, "host");
  req.peer_uid = rpc->conn->peer_uid;
  req.conn_passed = rpc->conn->passed;
  req.impl_ = rpc;
  if (s->o.gate != NULL) {
    conch_server_verdict v;
    memset(&v, 0, sizeof(v));
    if (s->o.gate(&req, &v, s->o.gate_ud) != 0) {
      rpc_refuse(rpc, &v);
      return -1;
    }
  }
  http = conch__srv_find_http(s, req.path);
  if (http != NULL) {
    if (conch__srv_http_start(rpc, http) != 0) {
      conch_server_reply r;
      memset(&r, 0, sizeof(r));
      r.status = 503;
      rpc_reply(rpc, &r);
    }
    return -1;
  }
  route = conch__srv_find_route(s, req.path);
  if (route != NULL) {
    conch_server_reply r;
    memset(&r, 0, sizeof(r));
    route->fn(&req, &r, route->user_data);
    rpc_reply(rpc, &r);
    return -1;
  }
  if (!rpc->conn->passed) {
    rpc->conn->passed = 1;
    conch__srv_conn_idle(rpc->conn);
  }
  return 0;
}

/* ---- Request timeouts and held bytes --------------------------------------- */

/* The body timer runs while the client owes bytes: the whole request of a
   unary or server-streaming call, each message of the other kinds from
   its first byte; not while the handler keeps the call paused. */
void conch__srv_rpc_recv_update(conch_rpc *rpc) {
  conch_server *s = rpc->conn->s;
  conch_stream_kind k;
  int want;

  if (!rpc->headers_in || s->o.body_ms == 0 || rpc->discarding) {
    return; /* a discarding call has its own timer */
  }
  k = rpc->method != NULL ? rpc->method->m.kind : CONCH_STREAM_UNARY;
  if (rpc->state != SRV_RPC_USER || rpc->half_closed || rpc->paused ||
      rpc->eos_held) {
    want = 0;
  } else if (rpc->http != NULL) {
    want = 1; /* rearmed by each chunk (rpc_data) */
  } else if (k == CONCH_STREAM_UNARY || k == CONCH_STREAM_SERVER ||
             rpc->wire == SRV_CONNECT_UNARY) {
    want = 1;
  } else {
    want = !conch__env_reader_at_boundary(&rpc->env);
  }
  if (!want) {
    conch__srv_timer_disarm(s, &rpc->recv);
  } else if (rpc->recv.idx == SIZE_MAX &&
             conch__srv_timer_arm(s, &rpc->recv,
                                  conch__srv_now(s) + s->o.body_ms) != 0) {
    conch__srv_rpc_fail(rpc, CONCH_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
}

void conch__srv_rpc_recv_expired(conch_rpc *rpc) {
  srv_conn *conn = rpc->conn;

  if (rpc->discarding) {
    /* Answered long ago, and the client still has not ended its side. */
    rpc->sink->reset(rpc, NGHTTP2_NO_ERROR);
    return;
  }

  if (!rpc->headers_in) {
    /* A header block that never ends blocks the whole connection
       (nothing but CONTINUATION may follow it). */
    conch__srv_conn_close(conn);
    return;
  }
  if (rpc->state != SRV_RPC_USER) {
    rpc->sink->reset(rpc, NGHTTP2_CANCEL);
    return;
  }
  conch__srv_rpc_fail(rpc, CONCH_CODE_DEADLINE_EXCEEDED,
                      "request message not received within %ld ms",
                      conn->s->o.body_ms);
}

/* Request bytes |rpc| holds now. */
static size_t rpc_held(const conch_rpc *rpc) {
  return conch__buf_size(&rpc->body) + conch__buf_size(&rpc->held) +
         conch__buf_size(&rpc->env.body) + rpc->env.prefix_len;
}

/* Drops the request bytes of a call that ends. */
static void rpc_drop_held(conch_rpc *rpc) {
  const conch_mem *mem = conch__srv_rpc_mem(rpc);
  conch__buf_free(&rpc->body, mem);
  conch__buf_free(&rpc->held, mem);
  conch__buf_free(&rpc->env.body, mem);
  rpc->env.prefix_len = 0;
}

/* The server's budget of buffered request bytes is one for everyone, and
   small requests (a listing, a signal, the teardown of a process) must
   get through however it was filled.  A call that holds at most
   SRV_SMALL_HOLD (and at most a 16th of the budget) is small: it may use
   the whole budget, while larger ones may fill only SRV_RESERVE_DIV - 1
   of its SRV_RESERVE_DIV parts.  Should small calls fill the rest too
   (many of them held unfinished), a small call past the budget takes the
   place of the calls that hold the most. */
#define SRV_SMALL_HOLD (64 * 1024)
#define SRV_RESERVE_DIV 8

static size_t small_hold(const conch_server *s) {
  size_t k = s->o.max_buffered / 16;
  return k < SRV_SMALL_HOLD ? k : SRV_SMALL_HOLD;
}

/* The call that holds the most request bytes, other than |self|, or NULL.
   Runs only past the budget; connections that hold no more than the best
   so far are skipped whole. */
static conch_rpc *largest_holder(conch_server *s, const conch_rpc *self) {
  conch_rpc *best = NULL;

  for (conch_link *c = s->conns.next; c != &s->conns; c = c->next) {
    srv_conn *conn = CONCH_CONTAINER(c, srv_conn, link);
    if (conn->buffered == 0 ||
        (best != NULL && conn->buffered <= best->counted)) {
      continue;
    }
    for (conch_link *l = conn->rpcs.next; l != &conn->rpcs; l = l->next) {
      conch_rpc *r = CONCH_CONTAINER(l, conch_rpc, link);
      if (r != self && r->counted > 0 &&
          (best == NULL || r->counted > best->counted)) {
        best = r;
      }
    }
  }
  return best;
}

/* Ends |v| (resource_exhausted) and lets go of the request bytes it
   holds, to make room for a smaller request. */
static void shed_call(conch_rpc *v) {
  srv_conn *vc = v->conn;
  conch_server *s = vc->s;
  size_t held = v->counted;
  size_t unread = conch__buf_size(&v->held); /* their window still out */

  rpc_drop_held(v);
  s->buffered -= v->counted;
  vc->buffered -= v->counted;
  v->counted = 0;
  s->shed_calls++;
  if (unread > 0) {
    v->sink->consumed(v, unread);
  }
  conch__srv_rpc_fail(
      v, CONCH_CODE_RESOURCE_EXHAUSTED,
      "server busy: this request held the most (%zu bytes) when "
      "requests being received reached %zu bytes, and a smaller one "
      "took its place",
      held, s->o.max_buffered);
}

/* Counts what |rpc| holds against the limits: past the server's, a small
   call takes the place of the largest holders, a larger one ends
   (resource_exhausted); past its connection's, the connection ends. */
void conch__srv_rpc_count(conch_rpc *rpc) {
  srv_conn *conn = rpc->conn;
  conch_server *s = conn->s;
  size_t now = rpc_held(rpc);
  size_t max = s->o.max_buffered;

  if (now > rpc->counted && max > 0) {
    int small = now <= small_hold(s);
    size_t cap = small ? max : max - max / SRV_RESERVE_DIV;
    conch_rpc *v;
    while (small && s->buffered - rpc->counted + now > cap &&
           (v = largest_holder(s, rpc)) != NULL && v->counted > now) {
      shed_call(v);
    }
    if (s->buffered - rpc->counted + now > cap) {
      rpc_drop_held(rpc);
      now = 0;
      conch__srv_rpc_fail(
          rpc, CONCH_CODE_RESOURCE_EXHAUSTED,
          "server busy: requests being received hold more than %zu "
          "bytes",
          small ? max : cap);
    }
  }
  s->buffered = s->buffered - rpc->counted + now;
  conn->buffered = conn->buffered - rpc->counted + now;
  rpc->counted = now;
  if (s->buffered > s->buffered_peak) {
    s->buffered_peak = s->buffered;
  }
  if (s->o.conn_buffered > 0 && conn->buffered > s->o.conn_buffered &&
      !conch__srv_conn_dead(conn)) {
    rpc->sink->overflow(rpc);
  }
}
