/* Load balancing across the addresses of a client's target (balance.c):
   per-address state, backoff and the policies.  Private to the runtime. */
#ifndef CONCH_BALANCE_H
#define CONCH_BALANCE_H

#include <stddef.h>

#include <conch/client.h>
#include <conch/status.h>

#include "conn_int.h"

#define CONCH__LB_MAX_TARGETS 1024
/* The longest service name a health check watches. */
#define CONCH__LB_MAX_SERVICE 1024
/* A host name is looked up again at most this often while calls are made
   (and when every address is failing), as gRPC's DNS resolver. */
#define CONCH__LB_RERESOLVE_MS 30000

struct conch_lb_addr; /* balance.c */

/* Parses a static target ("1.2.3.4:80", "[::1]:80", "unix:/path") into
   |out|.  0, or CONCH_ERR_INVALID. */
int conch__lb_parse_target(const char *s, conch_addr *out);
/* Sets c->lb up when the options ask for a policy or targets (else leaves
   it NULL: the pool as it always was).  0 or CONCH_ERR_NOMEM. */
int conch__lb_init(conch_client *c);
/* Frees c->lb (after every connection was freed). */
void conch__lb_free(conch_client *c);
/* The connection for a new call (conch__conn_get with c->lb set). */
conch_conn *conch__lb_pick(conch_client *c, conch_status *st);
/* Ties a new connection to |a| (conn.c, before it connects). */
void conch__lb_attach(conch_conn *conn, struct conch_lb_addr *a);
/* The connection's session started (it is READY). */
void conch__lb_conn_ready(conch_conn *conn);
/* The connection failed (state already DEAD, calls still bound): its
   address backs off when it never heard from the server, and its calls
   not sent yet move to another address. */
void conch__lb_conn_failed(conch_conn *conn);
/* The connection's last call let go of it. */
void conch__lb_conn_idle(conch_conn *conn);
/* The connection is being freed. */
void conch__lb_conn_gone(conch_conn *conn);
/* The lookup held by |conn| (conn->lb_resolver) answered |n| addresses
   (taken: freed here), or none with |err|. */
void conch__lb_resolved(conch_conn *conn, conch_addr *addrs, size_t n,
                        const char *err);

#endif
