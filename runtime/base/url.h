/* Target URLs (url.c): "http://HOST[:PORT][/PREFIX]",
   "https://HOST[:PORT][/PREFIX]" and "unix:PATH".  Private to the runtime;
   fuzzed by tests/fuzz/fuzz_url.c. */
#ifndef CONCH_URL_H
#define CONCH_URL_H

#include <conch/mem.h>

typedef struct conch_url {
  int tls;         /* https */
  char *host;      /* without brackets; "localhost" for unix: */
  char *port;      /* 1..65535 in decimal without leading zeros; the
                      scheme's default when absent */
  char *authority; /* host[:port] as written in the URL */
  char *prefix;    /* path prefix without a trailing '/': "" or "/x" */
  char *unix_path; /* unix: URLs only, else NULL */
} conch_url;

/* Parses |url| into |out|, its strings allocated with |mem|.  Refused: any
   other scheme, userinfo, an empty host, a host with spaces, controls, '/'
   or '%', an unclosed or empty IPv6 bracket, a port that is empty, 0, not
   all digits or over 65535, a query or fragment, a prefix with bytes
   outside printable ASCII, a unix: path that is empty or of
   CONCH_UNIX_PATH_MAX bytes or more.  Returns 0, CONCH_ERR_URL or
   CONCH_ERR_NOMEM; on error |out| holds nothing to free. */
int conch__url_parse(const char *url, const conch_mem *mem, conch_url *out);

/* Frees the strings of |u| (allocated with |mem|) and zeroes it. */
void conch__url_clear(conch_url *u, const conch_mem *mem);

#endif
