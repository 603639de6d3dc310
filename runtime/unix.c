/* Unix domain sockets: connecting to a path instead of host:port, and
   checking who answers (SO_PEERCRED) before anything is sent. */
#define _GNU_SOURCE /* struct ucred */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

void conch__unix_connect(conch_conn *conn) {
  conch_client *c = conn->client;
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
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "cannot connect to %s: %s", c->unix_path, strerror(errno));
    return;
  }
  /* A Unix connect completes at once or fails; EAGAIN is a full backlog. */
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 &&
      errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "cannot connect to %s: %s", c->unix_path,
                     err == EAGAIN ? "the server's backlog is full"
                                   : strerror(err));
    return;
  }
  conn->fd = fd;
  conn->state = CONCH_CONN_CONNECTING;
  conch__conn_update_watch(conn);
}

int conch__unix_peer_check(conch_conn *conn) {
  conch_client *c = conn->client;
  struct ucred cred;
  socklen_t len = sizeof(cred);

  if (c->o.unix_peer_any) {
    return 0;
  }
  if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "%s: cannot read the server's credentials: %s",
                     c->unix_path, strerror(errno));
    return -1;
  }
  if (cred.uid != geteuid() && cred.uid != 0) {
    conch__conn_fail(conn, CONCH_CODE_UNAVAILABLE, CONCH_ERR_CONNECT,
                     "%s: the server's uid %ld is neither ours nor root",
                     c->unix_path, (long)cred.uid);
    return -1;
  }
  return 0;
}
