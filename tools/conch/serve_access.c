/* Who may use the server: the users processes may run as, and the Host
   check of a TCP listener without a token. */
#include "serve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

int srv_user_allowed(const srv_server *srv, const char *name, uid_t uid) {
  size_t i;

  if (uid == srv->euid) {
    return 1;
  }
  if (name != NULL && srv->cfg.default_user != NULL &&
      strcmp(name, srv->cfg.default_user) == 0) {
    return 1; /* the operator's --user */
  }
  for (i = 0; i < srv->cfg.nallow_users; i++) {
    const char *a = srv->cfg.allow_users[i];

    if (strcmp(a, "*") == 0 || (name != NULL && strcmp(a, name) == 0)) {
      return 1;
    }
  }
  return 0;
}

static int all_digits(const char *s) {
  if (*s == '\0') {
    return 0;
  }
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9') {
      return 0;
    }
  }
  return 1;
}

/* A browser lured by DNS rebinding sends the attacker's name as Host; only
   names that always mean this machine pass. */
int srv_authority_ok(const srv_server *srv, const char *authority) {
  char host[256];
  const char *end;
  struct in_addr a4;
  struct in6_addr a6;
  size_t n;

  (void)srv;
  if (authority == NULL) {
    return 1; /* HTTP/1.0 without Host: no browser sends that */
  }
  if (authority[0] == '[') {
    end = strchr(authority, ']');
    if (end == NULL ||
        (end[1] != '\0' && (end[1] != ':' || !all_digits(end + 2)))) {
      return 0;
    }
    n = (size_t)(end - authority - 1);
    authority++;
  } else {
    end = strchr(authority, ':');
    if (end != NULL && !all_digits(end + 1)) {
      return 0;
    }
    n = end != NULL ? (size_t)(end - authority) : strlen(authority);
  }
  if (n == 0 || n >= sizeof(host)) {
    return 0;
  }
  memcpy(host, authority, n);
  host[n] = '\0';
  if (strcasecmp(host, "localhost") == 0 ||
      strcasecmp(host, "localhost.") == 0) {
    return 1;
  }
  if (inet_pton(AF_INET, host, &a4) == 1) {
    return (ntohl(a4.s_addr) >> 24) == 127;
  }
  if (inet_pton(AF_INET6, host, &a6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&a6) ||
           (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
  }
  return 0;
}
