/* Fuzz target: target URLs (runtime/base/url.c).  The bytes, up to the first
   NUL, are a URL.  What parses must hold together: the host is non-empty
   and free of spaces, controls, '/' and '%'; the port is 1..65535 in
   digits; the authority is the URL's own text after the scheme; the prefix
   has no trailing '/', no '?' or '#', only printable ASCII; a unix: URL
   keeps its path whole.  Then it is parsed again under a failing allocator
   at every allocation, which must fail cleanly (no leak: LSan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <conch/client.h>
#include <conch/status.h>

#include "fuzz.h"
#include "url.h"

static int fail_at; /* the allocation that fails (1-based), 0: none */
static int allocs;

static void *f_malloc(size_t n, void *ud) {
  (void)ud;
  if (fail_at != 0 && ++allocs == fail_at) {
    return NULL;
  }
  return malloc(n);
}
static void *f_calloc(size_t k, size_t n, void *ud) {
  (void)ud;
  if (fail_at != 0 && ++allocs == fail_at) {
    return NULL;
  }
  return calloc(k, n);
}
static void *f_realloc(void *p, size_t n, void *ud) {
  (void)ud;
  if (fail_at != 0 && ++allocs == fail_at) {
    return NULL;
  }
  return realloc(p, n);
}
static void f_free(void *p, void *ud) {
  (void)ud;
  free(p);
}

static const conch_mem fmem = {NULL, f_malloc, f_free, f_calloc, f_realloc};

static void check(const char *url, const conch_url *u) {
  size_t i, n;
  long port = 0;
  const char *after;

  if (strncmp(url, "unix:", 5) == 0) {
    CHECK(u->unix_path != NULL && strcmp(u->unix_path, url + 5) == 0);
    CHECK(strlen(u->unix_path) > 0 &&
          strlen(u->unix_path) < CONCH_UNIX_PATH_MAX);
    CHECK(!u->tls);
    return;
  }
  CHECK(u->unix_path == NULL);
  CHECK(u->tls == (strncmp(url, "https://", 8) == 0));
  after = url + (u->tls ? 8 : 7);
  n = strlen(u->host);
  CHECK(n > 0);
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)u->host[i];
    CHECK(ch > 0x20 && ch != '/' && ch != '%');
  }
  n = strlen(u->port);
  CHECK(n > 0 && n <= 5 && u->port[0] != '0');
  for (i = 0; i < n; i++) {
    CHECK(u->port[i] >= '0' && u->port[i] <= '9');
    port = port * 10 + (u->port[i] - '0');
  }
  CHECK(port >= 1 && port <= 65535);
  n = strlen(u->authority);
  CHECK(strncmp(after, u->authority, n) == 0);
  CHECK(after[n] == '\0' || after[n] == '/');
  CHECK(strncmp(after + n, u->prefix, strlen(u->prefix)) == 0);
  n = strlen(u->prefix);
  CHECK(n == 0 || (u->prefix[0] == '/' && u->prefix[n - 1] != '/'));
  for (i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)u->prefix[i];
    CHECK(ch > 0x20 && ch < 0x7f && ch != '?' && ch != '#');
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = malloc(size + 1);
  conch_url u;
  int rv, k;

  if (url == NULL) {
    return 0;
  }
  memcpy(url, data, size);
  url[size] = '\0';
  fail_at = 0;
  rv = conch__url_parse(url, &fmem, &u);
  CHECK(rv == 0 || rv == CONCH_ERR_URL);
  if (rv == 0) {
    check(url, &u);
    conch__url_clear(&u, &fmem);
    /* Every allocation failing in turn: NOMEM, nothing left behind. */
    for (k = 1; k <= 8; k++) {
      fail_at = k;
      allocs = 0;
      rv = conch__url_parse(url, &fmem, &u);
      CHECK(rv == 0 || rv == CONCH_ERR_NOMEM);
      if (rv == 0) {
        conch__url_clear(&u, &fmem);
        break;
      }
      CHECK(u.host == NULL && u.unix_path == NULL);
    }
  }
  free(url);
  return 0;
}
