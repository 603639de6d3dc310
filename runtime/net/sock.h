/* The one owner of sockets (sock.c): the client's default transport, TCP
   and Unix, the server's listeners, accepted connections and peer
   credentials, and the local server's liveness probe (api/local.c).  Depends on the public headers only. */
#ifndef CONCH_SOCK_H
#define CONCH_SOCK_H

#include <conch/transport.h>

/* Non-blocking, close-on-exec sockets; TCP_NODELAY for TCP. */
extern const conch_transport conch__sock_transport;

/* The uid of the process at the other end of Unix socket |fd|: 0 and
   |*uid|, or an errno value. */
int conch__sock_peer_uid(int fd, long *uid);

/* The credentials of the process at the other end of Unix socket |fd|
   (SO_PEERCRED): 0 and |*uid|, |*gid|, |*pid|, or an errno value (nothing
   written). */
int conch__sock_peer_cred(int fd, long *uid, long *gid, long *pid);

/* A listening socket (non-blocking, close-on-exec, backlog 128) bound to
   |addr| (|len| bytes; AF_INET, AF_INET6 with SO_REUSEADDR, or AF_UNIX):
   its descriptor, or a negative errno value (errno is set to it too). */
int conch__sock_listen(const struct sockaddr *addr, socklen_t len);

/* The next connection waiting on listener |lfd|, non-blocking and
   close-on-exec, with TCP_NODELAY when |tcp|: its descriptor, or a negative
   errno value (-EAGAIN: none waits; -EMFILE/-ENFILE: out of descriptors). */
int conch__sock_accept(int lfd, int tcp);

/* The address family of socket |fd| (AF_UNIX, AF_INET, ...), or a negative
   errno value (not a socket). */
int conch__sock_family(int fd);

/* The local port of TCP socket |fd| (0 when it has none or is not TCP). */
int conch__sock_port(int fd);

/* Shuts the write side of socket |fd| (the peer reads the end). */
void conch__sock_shutdown_write(int fd);

/* 1 when a listener at |addr| (|len| bytes) takes a connection now: a
   blocking stream socket connects and is closed at once; 0 otherwise.
   Async-signal-safe (a forked child may probe). */
int conch__sock_probe(const struct sockaddr *addr, socklen_t len);

#endif
