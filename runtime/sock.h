/* The client's own sockets (sock.c): the default transport, TCP and Unix.
   Depends on the public headers only. */
#ifndef CONCH_SOCK_H
#define CONCH_SOCK_H

#include <conch/transport.h>

/* Non-blocking, close-on-exec sockets; TCP_NODELAY for TCP. */
extern const conch_transport conch__sock_transport;

/* The uid of the process at the other end of Unix socket |fd|: 0 and
   |*uid|, or an errno value. */
int conch__sock_peer_uid(int fd, long *uid);

#endif
