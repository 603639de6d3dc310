/* Target URLs (url.h). */
#include "url.h"

#include <stdio.h>
#include <string.h>

#include <conch/client.h>
#include <conch/status.h>

#include "mem_int.h"

void conch__url_clear(conch_url *u, const conch_mem *mem) {
  conch__free(mem, u->host);
  conch__free(mem, u->port);
  conch__free(mem, u->authority);
  conch__free(mem, u->prefix);
  conch__free(mem, u->unix_path);
  memset(u, 0, sizeof(*u));
}

static int parse_unix(const char *path, const conch_mem *mem, conch_url *u) {
  size_t n = strlen(path);

  if (n == 0 || n >= CONCH_UNIX_PATH_MAX) {
    return CONCH_ERR_URL;
  }
  u->unix_path = conch__strdup(mem, path);
  u->host = conch__strdup(mem, "localhost");
  u->port = conch__strdup(mem, "80");
  u->authority = conch__strdup(mem, "localhost");
  u->prefix = conch__strdup(mem, "");
  if (u->unix_path == NULL || u->host == NULL || u->port == NULL ||
      u->authority == NULL || u->prefix == NULL) {
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

static int parse_http(const char *url, const conch_mem *mem, conch_url *u) {
  const char *p, *start, *host, *host_end, *auth_end;
  char port[24] = ""; /* room gcc -O0 can prove */
  size_t n, i;

  if (strncmp(url, "http://", 7) == 0) {
    u->tls = 0;
    start = url + 7;
  } else if (strncmp(url, "https://", 8) == 0) {
    u->tls = 1;
    start = url + 8;
  } else {
    return CONCH_ERR_URL;
  }
  p = host = start;
  if (*p == '[') {
    host = p + 1;
    host_end = strchr(host, ']');
    if (host_end == NULL || host_end == host) {
      return CONCH_ERR_URL;
    }
    p = host_end + 1;
  } else {
    while (*p != '\0' && *p != ':' && *p != '/' && *p != '?' && *p != '#') {
      if (*p == '@') {
        return CONCH_ERR_URL; /* no userinfo */
      }
      p++;
    }
    host_end = p;
    if (host_end == host) {
      return CONCH_ERR_URL;
    }
  }
  if (*p == ':') {
    const char *digits = ++p;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
      v = v * 10 + (*p - '0');
      if (v > 65535) {
        return CONCH_ERR_URL;
      }
      p++;
    }
    if (p == digits || v == 0) {
      return CONCH_ERR_URL;
    }
    snprintf(port, sizeof(port), "%ld", v); /* leading zeros dropped */
  }
  auth_end = p;
  if (*p != '\0' && *p != '/') {
    return CONCH_ERR_URL; /* query or fragment */
  }
  for (i = 0; host + i < host_end; i++) {
    if ((unsigned char)host[i] <= 0x20 || host[i] == '/' || host[i] == '%') {
      return CONCH_ERR_URL;
    }
  }
  /* The prefix keeps no trailing slash: method paths bring their own. */
  n = strlen(p);
  while (n > 0 && p[n - 1] == '/') {
    n--;
  }
  for (i = 0; i < n; i++) {
    if ((unsigned char)p[i] <= 0x20 || (unsigned char)p[i] >= 0x7f ||
        p[i] == '?' || p[i] == '#') {
      return CONCH_ERR_URL;
    }
  }
  u->host = conch__strndup(mem, host, (size_t)(host_end - host));
  u->port = conch__strdup(mem, port[0] != '\0' ? port : u->tls ? "443" : "80");
  u->authority = conch__strndup(mem, start, (size_t)(auth_end - start));
  u->prefix = conch__strndup(mem, p, n);
  if (u->host == NULL || u->port == NULL || u->authority == NULL ||
      u->prefix == NULL) {
    return CONCH_ERR_NOMEM;
  }
  return 0;
}

int conch__url_parse(const char *url, const conch_mem *mem, conch_url *out) {
  int rv;

  memset(out, 0, sizeof(*out));
  if (url == NULL) {
    return CONCH_ERR_URL;
  }
  rv = strncmp(url, "unix:", 5) == 0 ? parse_unix(url + 5, mem, out)
                                     : parse_http(url, mem, out);
  if (rv != 0) {
    conch__url_clear(out, mem);
  }
  return rv;
}
