/* The pool: which connection a call goes to (conch__conn_get), how many
   calls a connection takes, and moving waiting calls between connections
   (GOAWAY, refused streams, the HTTP/1.1 fallback).  Opening a connection
   is conn.c's (conch__conn_new).  With a load-balancing policy the choice
   of address is balance.c's (see there), and the choice of a connection
   to that address is conch__pool_find's, by the same rules. */
#include "balance.h"
#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "h1.h"
#include "list.h"
#include "pool.h"
#include "session.h"
#include "status_int.h"

void conch__conn_bind(conch_conn *conn, conch_call *call) {
  call->conn = conn;
  conch__list_push(&conn->calls, &call->conn_link);
  conn->ncalls++;
}

void conch__conn_unbind(conch_call *call) {
  if (call->conn != NULL && conch__linked(&call->conn_link)) {
    call->conn->ncalls--;
  }
  conch__list_remove(&call->conn_link);
  call->conn = NULL;
}

/* How many calls |conn| takes at once: the server's limit once known,
   else what clients assume until its SETTINGS arrive. */
static size_t capacity(const conch_conn *conn) {
  if (conn->state == CONCH_CONN_READY) {
    long n = conn->ops->capacity(conn);
    if (n >= 0) {
      return (size_t)n;
    }
  } else if (conch__conn_client(conn)->h1) {
    return 1; /* HTTP/1.1 from the start: one exchange at a time */
  }
  /* Not known yet: what this server said on another connection, or what
     Go and grpc-go assume. */
  return conch__conn_client(conn)->peer_max_streams > 0 ? conch__conn_client(conn)->peer_max_streams
                                            : 100;
}

/* HTTP/1.1 carries one call per connection: without a size from the user
   the pool takes CONCH_H1_POOL of them. */
static int pool_limit(const conch_client *c) {
  if (c->h1 && !c->o.max_conns_set) {
    return CONCH_H1_POOL;
  }
  return c->o.max_conns;
}

conch_conn *conch__conn_get(conch_client *c, conch_status *st) {
  conch_conn *conn;

  if (c->o.protocol == CONCH_PROTOCOL_GRPC &&
      c->o.http_version == CONCH_HTTP_1_1) {
    conch__status_set(st, c->mem, CONCH_CODE_UNIMPLEMENTED, CONCH_ORIGIN_LOCAL,
                      CONCH_ERR_INVALID,
                      "gRPC needs HTTP/2, and the client is set to HTTP/1.1 "
                      "(use Connect or gRPC-Web over HTTP/1.1)");
    return NULL;
  }
  if (c->lb != NULL) {
    return conch__lb_pick(c, st);
  }
  /* Without a balancer no connection has an address record. */
  conn = conch__pool_find(c, NULL);
  return conn != NULL ? conn : conch__conn_new(c, st);
}

conch_conn *conch__pool_find(conch_client *c, const struct conch_lb_addr *a) {
  conch_link *l;
  conch_conn *conn, *least = NULL;
  int usable = 0;

  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conn = CONCH_CONTAINER(l, conch_conn, link);
    if (conn->lba != a || conn->state == CONCH_CONN_DEAD || conn->goaway ||
        conn->closing) {
      continue;
    }
    if (conn->ncalls < capacity(conn) || pool_limit(c) <= 1) {
      return conn;
    }
    usable++;
    if (least == NULL || conn->ncalls < least->ncalls) {
      least = conn;
    }
  }
  /* The pool is full: wait for a slot on the least loaded one. */
  return least != NULL && usable >= pool_limit(c) ? least : NULL;
}

conch_conn *conch__pool_find_ready(conch_client *c,
                                   const struct conch_lb_addr *a) {
  conch_link *l;
  for (l = c->conns.next; l != &c->conns; l = l->next) {
    conch_conn *conn = CONCH_CONTAINER(l, conch_conn, link);
    if (conn->lba == a && conn->state == CONCH_CONN_READY && !conn->goaway &&
        !conn->closing && conn->ncalls < capacity(conn)) {
      return conn;
    }
  }
  return NULL;
}

/* Moves a call waiting in a connection's queue to the connection the pool
   picks now. */
void conch__pool_requeue(conch_call *q) {
  conch_status st;
  conch_conn *other;
  conch__list_remove(&q->queue_link);
  conch__conn_unbind(q);
  conch_status_init(&st);
  other = conch__conn_get(q->client, &st);
  if (other == NULL) {
    conch__call_fail(q, st.code, st.local_err, "%s", conch_status_message(&st));
    conch_status_clear(&st);
    return;
  }
  conch__conn_bind(other, q);
  conch__list_push(&other->queue, &q->queue_link);
  conch__conn_mark_dirty(other);
}

/* The first connection found to speak HTTP/1.1 took every call made while
   it connected, but carries one at a time: the others go to the pool,
   which now opens connections for them. */
void conch__pool_rehome_queued(conch_conn *conn) {
  conch_link moved;
  conch__list_init(&moved);
  while (conn->queue.next != &conn->queue &&
         conn->queue.next->next != &conn->queue) {
    conch_call *q = CONCH_CONTAINER(conn->queue.prev, conch_call, queue_link);
    conch__list_remove(&q->queue_link);
    conch__list_push(&moved, &q->queue_link);
  }
  while (!conch__list_empty(&moved)) {
    conch__pool_requeue(CONCH_CONTAINER(moved.next, conch_call, queue_link));
  }
}

