/* Name resolution off the loop (resolve.c).  Private to the runtime. */
#ifndef CONCH_RESOLVE_INT_H
#define CONCH_RESOLVE_INT_H

#include <conch/client.h>
#include <conch/status.h>

struct conch_conn; /* conn_int.h */
struct conch_addr; /* conn_int.h */

/* The addresses of the client's host when it is an IP address: how many
   (|*out| allocated with the client's allocator), 0 when it is a name to
   look up, -1 with |st| set on an error. */
long conch__resolve_numeric_addrs(conch_client *c, struct conch_addr **out,
                                  conch_status *st);

/* Fills |conn->addrs| when the host is an address: 0; 1 when it is a name
   to look up; -1 with |st| set on an error. */
int conch__resolve_numeric(struct conch_conn *conn, conch_status *st);
/* Starts the lookup of a RESOLVING connection (end of turn only). */
void conch__resolve_start(struct conch_conn *conn);
/* Applies an answer that arrived: connects, or fails the connection. */
void conch__resolve_apply(struct conch_conn *conn);
/* The connection no longer wants its lookup (failed, freed). */
void conch__resolve_abandon(struct conch_conn *conn);
/* Hands the default resolver's answers to their connections. */
void conch__resolve_drain(conch_client *c);
/* Detaches the default resolver's threads from a client being freed. */
void conch__resolve_client_free(conch_client *c);

#endif
