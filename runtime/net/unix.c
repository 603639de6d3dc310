/* Unix domain sockets: connecting to a path instead of host:port, and
   checking who answers (SO_PEERCRED) before anything is sent.  The socket
   itself is the transport's (sock.c). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_int.h"
#include "conn_int.h"
#include "sock.h"
#include "unix_int.h"

void conch__unix_connect(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  const conch_transport *t = conch__transport(c);
  struct sockaddr_un sa;
  size_t n = strlen(c->unix_path);
  int fd;

  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  if (n >= sizeof(sa.sun_path)) { /* checked by the setter and the URL */
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "socket path too long: %s", c->unix_path);
    return;
  }
  memcpy(sa.sun_path, c->unix_path, n);
  fd = t->open(t->user_data, (const struct sockaddr *)&sa, sizeof(sa));
  if (fd < 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "cannot connect to %s: %s", c->unix_path,
                     fd == -EAGAIN ? "the server's backlog is full"
                                   : strerror(-fd));
    return;
  }
  conn->fd = fd;
  conn->state = CONCH_CONN_CONNECTING;
  conch__conn_update_watch(conn);
}

int conch__unix_peer_check(conch_conn *conn) {
  conch_client *c = conch__conn_client(conn);
  const char *path = conn->peer_name != NULL ? conn->peer_name : c->unix_path;
  long uid = 0;
  int err;

  if (c->o.unix_peer_any || !conch__transport_is_own(c)) {
    return 0; /* a transport of the caller's owns its peers */
  }
  err = conch__sock_peer_uid(conn->fd, &uid);
  if (err != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "%s: cannot read the server's credentials: %s", path,
                     strerror(err));
    return -1;
  }
  if (uid != (long)geteuid() && uid != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "%s: the server's uid %ld is neither ours nor root",
                     path, uid);
    return -1;
  }
  return 0;
}
