/* The pool of a client's connections (pool.c): which connection a call
   goes to.  Private to the runtime. */
#ifndef CONCH_POOL_H
#define CONCH_POOL_H

#include <conch/call.h>
#include <conch/client.h>
#include <conch/status.h>

struct conch_conn;    /* conn_int.h */
struct conch_lb_addr; /* balance.c */

/* Binds |call| to |conn| (conn->calls) and unbinds it, keeping the count
   the pool balances on. */
void conch__conn_bind(struct conch_conn *conn, conch_call *call);
void conch__conn_unbind(conch_call *call);
/* Gets the connection for a new call: one that takes new streams and has
   room, else a new one while the pool may grow, else the least loaded.
   Returns NULL and sets |st| when none can be made. */
struct conch_conn *conch__conn_get(conch_client *c, conch_status *st);
/* The connection to |a| a new call takes (one with room, else the least
   loaded once the address has its share of connections), or NULL when one
   should be opened.  |a| is NULL without a load-balancing policy: every
   connection then has none. */
struct conch_conn *conch__pool_find(conch_client *c,
                                    const struct conch_lb_addr *a);
/* A connection to |a| that is up (READY, not going away) and has room for
   another call, or NULL (round_robin's first choice). */
struct conch_conn *conch__pool_find_ready(conch_client *c,
                                          const struct conch_lb_addr *a);
/* Moves |call|, waiting in a connection's queue, to the connection the
   pool picks now (failing it when none can be made). */
void conch__pool_requeue(conch_call *call);
/* The first connection found to speak HTTP/1.1 keeps one waiting call and
   gives the others back to the pool. */
void conch__pool_rehome_queued(struct conch_conn *conn);

#endif
