/* Transports: how a client's connections move bytes.
 *
 * By default a client opens non-blocking TCP sockets (or a Unix socket, see
 * conch_client_opts_set_unix_socket) itself.  A caller or a test can give
 * it a transport of its own: an in-memory pipe, a socket it set up with
 * options of its own, a proxy.  The client then never calls socket(),
 * connect(), recv(), send() or close() for its connections; it calls these
 * hooks, on the thread that drives it.
 *
 * The handle a transport returns from open() is what the client watches:
 * conch_client_run(), conch_client_pollfds() and conch_client_process()
 * poll(2) it, and the io hooks (conch_client_set_io_hooks) are told about
 * it.  For those it must be a real descriptor whose readiness means what a
 * socket's does (readable: read() has bytes or the end; writable: write()
 * takes bytes; e.g. a socket, a pipe or an eventfd).  A transport without
 * such a descriptor returns any non-negative number unique among the
 * client's open connections, and its caller drives the client itself: hooks
 * (so the client never polls) and conch_client_on_io(client, handle,
 * CONCH_IO_READ | CONCH_IO_WRITE) whenever the transport has bytes or room.
 * TLS (https) runs above the transport: its bytes are TLS records.
 */
#ifndef CONCH_TRANSPORT_H
#define CONCH_TRANSPORT_H

#include <stddef.h>
#include <sys/socket.h>

#include <conch/client.h>
#include <conch/export.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct conch_transport {
  /* Starts a connection to |addr| (|addrlen| bytes: AF_INET or AF_INET6,
     one of the host's addresses in the order the client tries them, or
     AF_UNIX for a client set to a Unix socket).  Must not block.  Returns
     the handle (>= 0) of a connection connected or in progress, or a
     negative errno value (e.g. -ECONNREFUSED): the client then tries the
     host's next address, and the last failure ends the connection with its
     strerror() text (unavailable). */
  int (*open)(void *user_data, const struct sockaddr *addr,
              socklen_t addrlen);
  /* Once the handle was reported writable (or readable): 0 when the
     connection is established, EINPROGRESS (or EALREADY) while it is not
     yet, another errno value when it failed (the client closes the handle
     and tries the next address). */
  int (*connect_result)(void *user_data, int handle);
  /* Reads at most |len| bytes into |buf|.  Returns how many (> 0), 0 at the
     end of the stream (the peer closed), -EAGAIN when nothing is there now
     (the client waits for readability), or another negative errno value (a
     read error: the connection fails with its strerror() text). */
  long (*read)(void *user_data, int handle, void *buf, size_t len);
  /* Writes at most |len| bytes of |buf|.  Returns how many were taken
     (> 0; fewer than |len| means full: the client waits for writability),
     -EAGAIN when none fit now, or another negative errno value (the
     connection fails).  Must not raise SIGPIPE. */
  long (*write)(void *user_data, int handle, const void *buf, size_t len);
  /* Ends the connection; the client stopped watching |handle| before. */
  void (*close)(void *user_data, int handle);
  void *user_data; /* passed to every hook */
} conch_transport;

/**
 * Connections of clients made with |opts| use |t| (copied; its user_data
 * must outlive those clients) instead of the client's own sockets.  NULL
 * (the default) is the client's own TCP and Unix sockets.  All five hooks
 * are required.  With a transport of its own, a client set to a Unix socket
 * does not check the server's credentials (conch_client_opts_set_unix_peer_any
 * is implied): the transport owns its peers.
 *
 * Returns 0, or CONCH_ERR_INVALID (NULL |opts|, or a hook missing in |t|:
 * nothing changed).
 */
CONCH_EXTERN int conch_client_opts_set_transport(conch_client_opts *opts,
                                                 const conch_transport *t);

#ifdef __cplusplus
}
#endif

#endif
