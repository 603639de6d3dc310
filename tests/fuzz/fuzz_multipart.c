/* Fuzz target: the streaming multipart/form-data reader of `conch serve`'s
   /files (tools/conch/serve_multipart.c).  The first byte picks where the
   rest is cut: the input is a body under the boundary "XyZ" (a body, its
   Content-Type fixed).  The reader is run three ways: the body whole, cut
   at that point, and one byte at a time.  All three must agree on
   everything (the parts, their names and filenames, every data byte, the
   verdict), whatever the body: a delimiter split across reads is the
   same delimiter.  Data never exceeds the input, names stay within their
   bounds and NUL-terminated. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "serve_multipart.h"

typedef struct trace {
  uint64_t h;     /* a hash of every event, in order */
  size_t bytes;   /* data bytes */
  size_t parts;
  size_t ends;
  int in_part;
} trace;

static void mix(trace *t, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) {
    t->h = (t->h ^ b[i]) * 1099511628211ull;
  }
}

static int on_part(void *ud, const char *name, const char *filename,
                   int has_filename) {
  trace *t = ud;
  CHECK(!t->in_part);
  CHECK(strlen(name) < SRV_MP_VALUE_MAX);
  CHECK(strlen(filename) < SRV_MP_VALUE_MAX);
  t->in_part = 1;
  t->parts++;
  mix(t, "P", 1);
  mix(t, name, strlen(name) + 1);
  mix(t, filename, strlen(filename) + 1);
  mix(t, &has_filename, sizeof(has_filename));
  return 0;
}

/* Data is hashed as one stream per part: how it is cut does not count. */
static int on_data(void *ud, const uint8_t *p, size_t n) {
  trace *t = ud;
  CHECK(t->in_part);
  CHECK(n > 0);
  t->bytes += n;
  mix(t, p, n);
  return 0;
}

static int on_end(void *ud) {
  trace *t = ud;
  CHECK(t->in_part);
  t->in_part = 0;
  t->ends++;
  mix(t, "E", 1);
  return 0;
}

static const srv_mp_cb cbs = {on_part, on_data, on_end};

/* Feeds |p| in pieces at |cuts| (sorted offsets, |ncuts| of them); the
   verdict: 0 a whole body, 1 truncated, -1 malformed. */
static int run(const uint8_t *p, size_t n, const size_t *cuts, size_t ncuts,
               int step1, trace *t) {
  srv_mp m;
  size_t off = 0;
  int rv = SRV_MP_OK;

  memset(t, 0, sizeof(*t));
  t->h = 14695981039346656037ull;
  CHECK(srv_mp_init(&m, "multipart/form-data; boundary=\"XyZ\"") == 0);
  if (step1) {
    for (size_t i = 0; i < n && rv == SRV_MP_OK; i++) {
      rv = srv_mp_feed(&m, p + i, 1, &cbs, t);
    }
  } else {
    for (size_t c = 0; c <= ncuts && rv == SRV_MP_OK; c++) {
      size_t end = c < ncuts ? cuts[c] : n;
      rv = srv_mp_feed(&m, p + off, end - off, &cbs, t);
      off = end;
    }
  }
  CHECK(rv == SRV_MP_OK || rv == SRV_MP_BAD);
  if (rv == SRV_MP_BAD) {
    CHECK(m.err != NULL);
    return -1;
  }
  return srv_mp_finish(&m) == 0 ? 0 : 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  trace a, b, c;
  size_t cut;
  int va, vb, vc;
  char out[16];
  srv_mp m;

  if (size == 0) {
    return 0;
  }
  cut = data[0] % size;
  data++;
  size--;
  if (cut > size) {
    cut = size;
  }
  va = run(data, size, NULL, 0, 0, &a);
  vb = run(data, size, &cut, 1, 0, &b);
  vc = run(data, size, NULL, 0, 1, &c);
  CHECK(va == vb && vb == vc);
  CHECK(a.h == b.h && b.h == c.h);
  CHECK(a.bytes == b.bytes && b.bytes == c.bytes);
  CHECK(a.parts == c.parts && a.ends == c.ends);
  CHECK(a.bytes <= size);
  if (va == 0) {
    CHECK(a.parts == a.ends);
  }
  /* The parameter reader on the same bytes as a header value. */
  {
    char *v = malloc(size + 1);
    CHECK(v != NULL);
    memcpy(v, data, size);
    v[size] = '\0';
    int r = srv_mp_param(v, "name", out, sizeof(out));
    CHECK(r >= -1 && r <= 1);
    if (r == 1) {
      CHECK(strlen(out) < sizeof(out));
    }
    (void)srv_mp_init(&m, v);
    free(v);
  }
  return 0;
}
