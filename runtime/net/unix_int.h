/* Unix domain sockets (unix.c).  Private to the runtime. */
#ifndef CONCH_UNIX_INT_H
#define CONCH_UNIX_INT_H

struct conch_conn; /* conn_int.h */

/* Starts connecting |conn| to the client's socket path; like TCP, a
   failure leaves the connection dead with its message. */
void conch__unix_connect(struct conch_conn *conn);
/* Once connected: 0 when the peer is acceptable (our euid or root, unless
   the options allow any), else the connection is failed and -1. */
int conch__unix_peer_check(struct conch_conn *conn);

#endif
