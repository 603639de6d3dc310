/* The one file that owns sockets: the client's default transport (TCP and
   Unix, non-blocking, close-on-exec), behind the conch_transport table
   (conch/transport.h), and the server's listeners, accepts and peer
   credentials.  conn.c, unix.c, server.c and api/local.c reach sockets
   only through it (scripts/check-source.sh holds the rest of runtime/ and
   api/ to that). */
#define _GNU_SOURCE /* struct ucred */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"

static int sock_open(void *ud, const struct sockaddr *addr, socklen_t len) {
  int one = 1;
  int fd;
  (void)ud;
  fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return -errno;
  }
  if (addr->sa_family != AF_UNIX) {
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  /* A Unix connect completes at once or fails (EAGAIN: a full backlog). */
  if (connect(fd, addr, len) != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

static int sock_connect_result(void *ud, int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  (void)ud;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    err = errno;
  }
  return err;
}

static long sock_read(void *ud, int fd, void *buf, size_t n) {
  (void)ud;
  for (;;) {
    ssize_t r = recv(fd, buf, n, 0);
    if (r >= 0) {
      return (long)r;
    }
    if (errno == EINTR) {
      continue;
    }
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

static long sock_write(void *ud, int fd, const void *buf, size_t n) {
  (void)ud;
  for (;;) {
    ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
    if (w >= 0) {
      return (long)w;
    }
    if (errno == EINTR) {
      continue;
    }
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  }
}

static void sock_close(void *ud, int fd) {
  (void)ud;
  close(fd);
}

const conch_transport conch__sock_transport = {
    sock_open, sock_connect_result, sock_read, sock_write, sock_close, NULL};

int conch__sock_peer_uid(int fd, long *uid) {
  long gid, pid;
  return conch__sock_peer_cred(fd, uid, &gid, &pid);
}

int conch__sock_peer_cred(int fd, long *uid, long *gid, long *pid) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return errno;
  }
  *uid = (long)cred.uid;
  *gid = (long)cred.gid;
  *pid = (long)cred.pid;
  return 0;
}

int conch__sock_listen(const struct sockaddr *addr, socklen_t len) {
  int one = 1;
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  0);
  if (fd < 0) {
    return -errno;
  }
  if (addr->sa_family != AF_UNIX) {
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (bind(fd, addr, len) != 0 || listen(fd, 128) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -e;
  }
  return fd;
}

int conch__sock_accept(int lfd, int tcp) {
  for (;;) {
    int one = 1;
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    }
    if (tcp) {
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
  }
}

int conch__sock_family(int fd) {
  struct sockaddr_storage a;
  socklen_t al = sizeof(a);
  if (getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
    return -errno;
  }
  return a.ss_family;
}

int conch__sock_port(int fd) {
  struct sockaddr_storage b;
  socklen_t bl = sizeof(b);
  if (getsockname(fd, (struct sockaddr *)&b, &bl) != 0) {
    return 0;
  }
  if (b.ss_family == AF_INET6) {
    return ntohs(((struct sockaddr_in6 *)&b)->sin6_port);
  }
  if (b.ss_family == AF_INET) {
    return ntohs(((struct sockaddr_in *)&b)->sin_port);
  }
  return 0;
}

void conch__sock_shutdown_write(int fd) {
  (void)shutdown(fd, SHUT_WR);
}

int conch__sock_probe(const struct sockaddr *addr, socklen_t len) {
  int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int ok;
  if (fd < 0) {
    return 0;
  }
  ok = connect(fd, addr, len) == 0;
  close(fd);
  return ok;
}
