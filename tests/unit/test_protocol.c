/* The protocol layer (runtime/client/protocol.c) as a module, table by table,
   for each of Connect, gRPC and gRPC-Web, on calls bound to no
   connection (fed as a session would feed them) with a clock of the
   test's own.  Covered: the request headers each protocol writes (pseudo
   headers first, content type, protocol fields, accepted encodings, user
   agents, the caller's metadata with -bin values in base64), the timeout
   headers' formats and the deadline that passed before sending, message
   framing (envelopes, the compressed flag and its threshold, the send
   limit), the response content types each protocol takes or refuses and
   with which code, HTTP statuses without a body, response heads and
   trailers (trailers-only, grpc-message decoding, gRPC-Web trailer
   frames) becoming a status, and Connect error bodies (codes, details,
   compressed, the HTTP status's word for streams), the response
   envelopes each protocol takes (flags, order, count: a compressed one
   with no encoding, reserved or another protocol's flags, data after the
   end, a bad end-stream message, a client stream's count), envelopes cut
   at every byte, a declared length over the receive limit, and the
   predicates the sessions ask (gRPC status fields, which calls wait for
   their message before HEADERS).  unit/test_call.c
   goes through the same paths call by call; this file is the
   protocol's own matrix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>
#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "compress.h"
#include "envelope.h"
#include "protocol.h"

static int64_t now_ms = 5000000;

static int64_t test_clock(void *ud) {
  (void)ud;
  return now_ms;
}

static conch_client *make(conch_protocol p, const char *url,
                          const char *send_comp) {
  conch_client_opts *o;
  conch_client *c = NULL;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, p), 0);
  assert_int_equal(conch_client_opts_set_clock(o, test_clock, NULL), 0);
  assert_int_equal(conch_client_opts_set_user_agent(o, "ua/1"), 0);
  if (send_comp != NULL) {
    assert_int_equal(conch_client_opts_set_send_compression_name(o, send_comp),
                     0);
    assert_int_equal(conch_client_opts_set_compress_min_bytes(o, 4), 0);
  }
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

typedef struct result {
  int closes;
  int msgs;
  conch_status st;
} result;

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  result *r = ud;
  (void)call;
  (void)p;
  (void)n;
  r->msgs++;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  result *r = ud;
  (void)call;
  (void)t;
  r->closes++;
  conch_status_copy(&r->st, st, NULL);
}

static const conch_call_handler handler = {NULL, NULL, on_raw, NULL, on_close};

typedef struct fx {
  conch_client *c;
  conch_call *call;
  conch_method m;
  result r;
} fx;

static void begin(fx *f, conch_client *c, conch_stream_kind kind,
                  long timeout_ms, const conch_metadata *md) {
  conch_call_opts o = CONCH_CALL_OPTS_INIT;
  memset(f, 0, sizeof(*f));
  conch_status_init(&f->r.st);
  f->c = c;
  f->m.path = "/t.v1.T/M";
  f->m.kind = kind;
  o.timeout_ms = timeout_ms;
  o.headers = md;
  assert_int_equal(
      conch__call_new_detached(c, &f->m, &o, &handler, &f->r, &f->call), 0);
}

static void hdr(fx *f, const char *n, const char *v) {
  assert_int_equal(conch__call_on_header(f->call, (const uint8_t *)n, strlen(n),
                                         (const uint8_t *)v, strlen(v), 0),
                   0);
}

/* A header block (":status" first when |status| is not NULL), then
   name/value pairs up to NULL; |end| ends the stream with it. */
static void block(fx *f, const char *status, int end, ...) {
  va_list ap;
  const char *n;
  conch__call_on_header(f->call, NULL, 0, NULL, 0, -1);
  if (status != NULL) {
    hdr(f, ":status", status);
  }
  va_start(ap, end);
  while ((n = va_arg(ap, const char *)) != NULL) {
    hdr(f, n, va_arg(ap, const char *));
  }
  va_end(ap);
  conch__call_on_headers_done(f->call, end);
}

static void data(fx *f, const void *p, size_t n) {
  conch__call_on_data(f->call, p, n);
}

static void datas(fx *f, const char *s) { data(f, s, strlen(s)); }

static void env(fx *f, uint8_t flags, const void *p, size_t n) {
  uint8_t prefix[CONCH_ENV_PREFIX];
  conch__env_write_prefix(prefix, flags, (uint32_t)n);
  data(f, prefix, sizeof(prefix));
  data(f, p, n);
}

static void envs(fx *f, uint8_t flags, const char *s) {
  env(f, flags, s, strlen(s));
}

static void end(fx *f) { conch__call_on_remote_end(f->call); }

/* Runs on_close and returns the status (the call must have ended). */
static const conch_status *outcome(fx *f) {
  conch__client_run_done(f->c);
  assert_int_equal(f->r.closes, 1);
  return &f->r.st;
}

static void expect(fx *f, conch_code code, const char *msg_part) {
  const conch_status *st = outcome(f);
  if (st->code != code || (msg_part != NULL && strstr(conch_status_message(st),
                                                      msg_part) == NULL)) {
    fail_msg("got %s (%s), want %s (%s)", conch_code_name(st->code),
             conch_status_message(st), conch_code_name(code),
             msg_part != NULL ? msg_part : "");
  }
}

static void done(fx *f) {
  if (f->r.closes == 0) {
    conch_call_cancel(f->call);
    conch__client_run_done(f->c);
  }
  conch_call_free(f->call);
  conch__client_run_done(f->c);
  conch_status_clear(&f->r.st);
}

/* ---- Request headers ----------------------------------------------------- */

typedef struct hlist {
  nghttp2_nv nva[64];
  long n;
  conch_buf store;
} hlist;

static long build(fx *f, hlist *h) {
  memset(h, 0, sizeof(*h));
  h->n = conch__proto_request_headers(f->call, h->nva, 64, &h->store);
  return h->n;
}

static const char *get(const hlist *h, const char *name) {
  static char v[4][256];
  static int k;
  long i;
  for (i = 0; i < h->n; i++) {
    if (h->nva[i].namelen == strlen(name) &&
        memcmp(h->nva[i].name, name, h->nva[i].namelen) == 0) {
      char *out = v[k++ % 4];
      size_t len = h->nva[i].valuelen < 255 ? h->nva[i].valuelen : 255;
      memcpy(out, h->nva[i].value, len);
      out[len] = '\0';
      return out;
    }
  }
  return NULL;
}

static int count(const hlist *h, const char *name) {
  long i;
  int n = 0;
  for (i = 0; i < h->n; i++) {
    n += h->nva[i].namelen == strlen(name) &&
         memcmp(h->nva[i].name, name, h->nva[i].namelen) == 0;
  }
  return n;
}

static void hfree(hlist *h) { conch__buf_free(&h->store, conch_mem_default()); }

static void test_request_headers(void **state) {
  static const struct {
    conch_protocol p;
    conch_stream_kind kind;
    const char *ctype;
    const char *accept_name;
  } cases[] = {
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "application/proto",
       "accept-encoding"},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER, "application/connect+proto",
       "connect-accept-encoding"},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_BIDI, "application/connect+proto",
       "connect-accept-encoding"},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "application/grpc",
       "grpc-accept-encoding"},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_CLIENT, "application/grpc",
       "grpc-accept-encoding"},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_UNARY,
       "application/grpc-web+proto", "grpc-accept-encoding"},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_SERVER,
       "application/grpc-web+proto", "grpc-accept-encoding"},
  };
  conch_metadata *md;
  size_t i;
  (void)state;

  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-app", "v"), 0);
  assert_int_equal(conch_metadata_add(md, "x-raw-bin", "\x00\x01\xfe", 3), 0);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    conch_client *c = make(cases[i].p, "http://h.example:81/base", NULL);
    int connect = cases[i].p == CONCH_PROTOCOL_CONNECT;
    fx f;
    hlist h;
    long k;
    int regular = 0;

    begin(&f, c, cases[i].kind, 0, md);
    assert_true(build(&f, &h) > 0);
    /* Pseudo-headers first, as HTTP/2 wants them. */
    for (k = 0; k < h.n; k++) {
      if (h.nva[k].name[0] != ':') {
        regular = 1;
      } else {
        assert_false(regular);
      }
    }
    assert_string_equal(get(&h, ":method"), "POST");
    assert_string_equal(get(&h, ":scheme"), "http");
    assert_string_equal(get(&h, ":authority"), "h.example:81");
    assert_string_equal(get(&h, ":path"), "/base/t.v1.T/M");
    assert_string_equal(get(&h, "content-type"), cases[i].ctype);
    assert_string_equal(get(&h, cases[i].accept_name), "gzip");
    assert_int_equal(count(&h, "accept-encoding") +
                         count(&h, "connect-accept-encoding") +
                         count(&h, "grpc-accept-encoding"),
                     1);
    /* The protocol's own fields, each only where it belongs. */
    assert_int_equal(count(&h, "connect-protocol-version"), connect);
    if (connect) {
      assert_string_equal(get(&h, "connect-protocol-version"), "1");
    }
    assert_int_equal(count(&h, "te"), cases[i].p == CONCH_PROTOCOL_GRPC);
    if (cases[i].p == CONCH_PROTOCOL_GRPC) {
      assert_string_equal(get(&h, "te"), "trailers");
    }
    assert_string_equal(get(&h, "user-agent"), "ua/1");
    assert_int_equal(count(&h, "x-user-agent"),
                     cases[i].p == CONCH_PROTOCOL_GRPC_WEB);
    /* No deadline, no compression: no such headers. */
    assert_null(get(&h, "connect-timeout-ms"));
    assert_null(get(&h, "grpc-timeout"));
    assert_null(get(&h, "content-encoding"));
    assert_null(get(&h, "grpc-encoding"));
    assert_null(get(&h, "connect-content-encoding"));
    /* The caller's metadata; binary values in unpadded base64. */
    assert_string_equal(get(&h, "x-app"), "v");
    assert_string_equal(get(&h, "x-raw-bin"), "AAH+");
    hfree(&h);
    done(&f);
    conch_client_free(c);
  }
  /* The caller's own user-agent replaces the client's, never doubles it. */
  {
    conch_client *c = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
    fx f;
    hlist h;
    assert_int_equal(conch_metadata_add_str(md, "user-agent", "mine/2"), 0);
    begin(&f, c, CONCH_STREAM_UNARY, 0, md);
    assert_true(build(&f, &h) > 0);
    assert_int_equal(count(&h, "user-agent"), 1);
    assert_string_equal(get(&h, "user-agent"), "mine/2");
    hfree(&h);
    done(&f);
    conch_client_free(c);
  }
  conch_metadata_free(md);
}

/* The send compression is named where each protocol names it, and
   advertised first. */
static void test_request_compression(void **state) {
  static const struct {
    conch_protocol p;
    conch_stream_kind kind;
    const char *named;
    const char *accept;
  } cases[] = {
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "content-encoding",
       "accept-encoding"},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER, "connect-content-encoding",
       "connect-accept-encoding"},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "grpc-encoding",
       "grpc-accept-encoding"},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_BIDI, "grpc-encoding",
       "grpc-accept-encoding"},
  };
  size_t i;
  (void)state;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    conch_client *c = make(cases[i].p, "http://h:1", "deflate");
    fx f;
    hlist h;
    begin(&f, c, cases[i].kind, 0, NULL);
    /* Connect unary names its encoding only when the message was
       compressed: it is big enough (compress-min-bytes 4). */
    assert_int_equal(
        conch__proto_frame_message(f.call, (const uint8_t *)"hello", 5), 0);
    assert_true(build(&f, &h) > 0);
    assert_string_equal(get(&h, cases[i].named), "deflate");
    assert_string_equal(get(&h, cases[i].accept), "deflate,gzip");
    hfree(&h);
    done(&f);
    conch_client_free(c);
  }
}

static void test_timeouts(void **state) {
  static const struct {
    long ms;
    const char *connect; /* NULL: not sent */
    const char *grpc;
  } cases[] = {
      {1, "1", "1m"},
      {999, "999", "999m"},
      {1500, "1500", "1500m"},
      {99999999, "99999999", "99999999m"},
      {100000000, "100000000", "100000S"},
      {9999999999L, "9999999999", "9999999S"},
      {10000000000L, NULL, "10000000S"},
      {99999999000L, NULL, "99999999S"},
      {100000000000L, NULL, "1666666M"},
      {200000000000L, NULL, "3333333M"},
  };
  conch_client *cc = make(CONCH_PROTOCOL_CONNECT, "http://h:1", NULL);
  conch_client *gc = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
  conch_client *wc = make(CONCH_PROTOCOL_GRPC_WEB, "http://h:1", NULL);
  size_t i;
  fx f;
  hlist h;
  (void)state;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *v;
    begin(&f, cc, CONCH_STREAM_SERVER, cases[i].ms, NULL);
    assert_true(build(&f, &h) > 0);
    v = get(&h, "connect-timeout-ms");
    if (cases[i].connect == NULL) {
      assert_null(v);
    } else {
      assert_non_null(v);
      assert_string_equal(v, cases[i].connect);
    }
    assert_null(get(&h, "grpc-timeout"));
    hfree(&h);
    done(&f);
    begin(&f, gc, CONCH_STREAM_UNARY, cases[i].ms, NULL);
    assert_true(build(&f, &h) > 0);
    assert_string_equal(get(&h, "grpc-timeout"), cases[i].grpc);
    assert_null(get(&h, "connect-timeout-ms"));
    hfree(&h);
    done(&f);
    begin(&f, wc, CONCH_STREAM_UNARY, cases[i].ms, NULL);
    assert_true(build(&f, &h) > 0);
    assert_string_equal(get(&h, "grpc-timeout"), cases[i].grpc);
    hfree(&h);
    done(&f);
  }
  /* What is left is sent, not what was asked: 400 ms later, 600 ms. */
  begin(&f, gc, CONCH_STREAM_UNARY, 1000, NULL);
  now_ms += 400;
  assert_true(build(&f, &h) > 0);
  assert_string_equal(get(&h, "grpc-timeout"), "600m");
  hfree(&h);
  done(&f);
  /* Nothing left: the request is not sent, the call ends. */
  begin(&f, cc, CONCH_STREAM_UNARY, 1000, NULL);
  now_ms += 1000;
  assert_int_equal(build(&f, &h), CONCH_ERR_TIMEOUT);
  hfree(&h);
  expect(&f, CONCH_CODE_DEADLINE_EXCEEDED, "before the request was sent");
  done(&f);
  conch_client_free(cc);
  conch_client_free(gc);
  conch_client_free(wc);
}

/* ---- Framing ---------------------------------------------------------------
 */

static void test_framing(void **state) {
  conch_client *plain = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
  conch_client *comp = make(CONCH_PROTOCOL_CONNECT, "http://h:1", "gzip");
  conch_client_opts *o;
  conch_client *limited;
  const uint8_t *p;
  fx f;
  (void)state;

  /* An envelope: flags 0, big-endian length, the bytes. */
  begin(&f, plain, CONCH_STREAM_BIDI, 0, NULL);
  assert_int_equal(
      conch__proto_frame_message(f.call, (const uint8_t *)"abc", 3), 0);
  assert_int_equal(conch__buf_size(&f.call->sendbuf), 8);
  assert_memory_equal(conch__buf_head(&f.call->sendbuf), "\0\0\0\0\3abc", 8);
  done(&f);
  /* Connect unary: the bare message, compressed when big enough. */
  begin(&f, comp, CONCH_STREAM_UNARY, 0, NULL);
  assert_int_equal(
      conch__proto_frame_message(f.call, (const uint8_t *)"abc", 3), 0);
  assert_int_equal(conch__buf_size(&f.call->sendbuf), 3); /* under 4 */
  assert_false(f.call->unary_compressed);
  done(&f);
  begin(&f, comp, CONCH_STREAM_UNARY, 0, NULL);
  assert_int_equal(
      conch__proto_frame_message(f.call, (const uint8_t *)"abcd", 4), 0);
  assert_true(f.call->unary_compressed);
  p = conch__buf_head(&f.call->sendbuf);
  assert_int_equal(p[0], 0x1f); /* a gzip member */
  assert_int_equal(p[1], 0x8b);
  done(&f);
  /* A Connect stream: the compressed flag on the big one only. */
  begin(&f, comp, CONCH_STREAM_CLIENT, 0, NULL);
  assert_int_equal(conch__proto_frame_message(f.call, (const uint8_t *)"ab", 2),
                   0);
  assert_int_equal(
      conch__proto_frame_message(f.call, (const uint8_t *)"abcdefgh", 8), 0);
  p = conch__buf_head(&f.call->sendbuf);
  assert_int_equal(p[0], 0);
  assert_int_equal(p[7], CONCH_ENV_COMPRESSED);
  assert_int_equal(7 + 5 + p[11], conch__buf_size(&f.call->sendbuf));
  done(&f);
  /* The send limit counts what goes out; over it, nothing is queued. */
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_send_limit(o, 4), 0);
  assert_int_equal(conch_client_new(&limited, "http://h:1", o), 0);
  conch_client_opts_free(o);
  begin(&f, limited, CONCH_STREAM_CLIENT, 0, NULL);
  assert_int_equal(
      conch__proto_frame_message(f.call, (const uint8_t *)"abcd", 4), 0);
  assert_int_equal(
      conch__proto_frame_message(f.call, (const uint8_t *)"abcde", 5),
      CONCH_ERR_LIMIT);
  assert_int_equal(conch__buf_size(&f.call->sendbuf), 9);
  expect(&f, CONCH_CODE_RESOURCE_EXHAUSTED, "exceeds the send limit of 4");
  done(&f);
  conch_client_free(plain);
  conch_client_free(comp);
  conch_client_free(limited);
}

/* ---- Response content types ---------------------------------------------- */

/* A good response of |kind| on |c| with content type |ctype| (NULL: none),
   then the code it ended with. */
static conch_code answer_with(conch_client *c, conch_protocol p,
                              conch_stream_kind kind, const char *ctype) {
  static const char web_ok[] = "grpc-status: 0\r\n";
  fx f;
  conch_code code;

  begin(&f, c, kind, 0, NULL);
  if (ctype != NULL) {
    block(&f, "200", 0, "content-type", ctype, NULL);
  } else {
    block(&f, "200", 0, NULL);
  }
  if (p == CONCH_PROTOCOL_CONNECT && kind == CONCH_STREAM_UNARY) {
    data(&f, "ok", 2);
    end(&f);
  } else if (p == CONCH_PROTOCOL_CONNECT) {
    envs(&f, 0, "ok");
    envs(&f, CONCH_ENV_END_STREAM, "{}");
    end(&f);
  } else if (p == CONCH_PROTOCOL_GRPC) {
    envs(&f, 0, "ok");
    block(&f, NULL, 1, "grpc-status", "0", NULL);
  } else {
    envs(&f, 0, "ok");
    env(&f, CONCH_ENV_TRAILERS, web_ok, strlen(web_ok));
    end(&f);
  }
  code = outcome(&f)->code;
  done(&f);
  return code;
}

static void test_content_types(void **state) {
#define OK CONCH_CODE_OK
#define UNKNOWN CONCH_CODE_UNKNOWN
#define INTERNAL CONCH_CODE_INTERNAL
  static const struct {
    conch_protocol p;
    conch_stream_kind kind;
    const char *ctype;
    conch_code code;
  } cases[] = {
      /* Connect unary: application/proto, parameters ignored. */
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "application/proto", OK},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "Application/PROTO", OK},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY,
       "application/proto; charset=utf-8", OK},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "application/json",
       INTERNAL}, /* the other codec */
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "application/connect+proto",
       INTERNAL},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, "text/html", UNKNOWN},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_UNARY, NULL, UNKNOWN},
      /* Connect streams. */
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER, "application/connect+proto",
       OK},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER, "application/connect+json",
       INTERNAL},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER, "application/proto",
       UNKNOWN},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER, NULL, UNKNOWN},
      /* gRPC: the bare form is proto. */
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "application/grpc", OK},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "application/grpc+proto", OK},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "application/grpc+json",
       INTERNAL},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "application/grpc-web",
       UNKNOWN},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, "application/json", UNKNOWN},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_UNARY, NULL, UNKNOWN},
      /* gRPC-Web. */
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_UNARY, "application/grpc-web", OK},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_SERVER,
       "application/grpc-web+proto", OK},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_UNARY, "application/grpc-web+json",
       INTERNAL},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_UNARY, "application/grpc",
       UNKNOWN},
  };
#undef OK
#undef UNKNOWN
#undef INTERNAL
  conch_client *cl[3];
  size_t i;
  (void)state;

  cl[CONCH_PROTOCOL_CONNECT] = make(CONCH_PROTOCOL_CONNECT, "http://h:1", NULL);
  cl[CONCH_PROTOCOL_GRPC] = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
  cl[CONCH_PROTOCOL_GRPC_WEB] =
      make(CONCH_PROTOCOL_GRPC_WEB, "http://h:1", NULL);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    conch_code got =
        answer_with(cl[cases[i].p], cases[i].p, cases[i].kind, cases[i].ctype);
    if (got != cases[i].code) {
      fail_msg("case %zu (%s): %s, want %s", i,
               cases[i].ctype != NULL ? cases[i].ctype : "none",
               conch_code_name(got), conch_code_name(cases[i].code));
    }
  }
  for (i = 0; i < 3; i++) {
    conch_client_free(cl[i]);
  }
}

/* ---- HTTP statuses, heads and trailers -------------------------------- */

static void test_http_statuses(void **state) {
  static const struct {
    const char *status;
    conch_code code;
  } cases[] = {{"400", CONCH_CODE_INTERNAL},
               {"401", CONCH_CODE_UNAUTHENTICATED},
               {"403", CONCH_CODE_PERMISSION_DENIED},
               {"404", CONCH_CODE_UNIMPLEMENTED},
               {"429", CONCH_CODE_UNAVAILABLE},
               {"502", CONCH_CODE_UNAVAILABLE},
               {"503", CONCH_CODE_UNAVAILABLE},
               {"504", CONCH_CODE_UNAVAILABLE},
               {"418", CONCH_CODE_UNKNOWN},
               {"500", CONCH_CODE_UNKNOWN}};
  static const conch_protocol ps[] = {
      CONCH_PROTOCOL_CONNECT, CONCH_PROTOCOL_GRPC, CONCH_PROTOCOL_GRPC_WEB};
  static const conch_stream_kind kinds[] = {CONCH_STREAM_UNARY,
                                            CONCH_STREAM_SERVER};
  size_t i, k, j;
  (void)state;

  for (k = 0; k < 3; k++) {
    conch_client *c = make(ps[k], "http://h:1", NULL);
    for (j = 0; j < 2; j++) {
      for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fx f;
        const conch_status *st;
        char want[32];
        begin(&f, c, kinds[j], 0, NULL);
        block(&f, cases[i].status, 0, "content-type", "text/plain", NULL);
        data(&f, "no", 2);
        end(&f);
        st = outcome(&f);
        snprintf(want, sizeof(want), "HTTP status %s", cases[i].status);
        if (st->code != cases[i].code || st->origin != CONCH_ORIGIN_HTTP ||
            st->http_status != atoi(cases[i].status) ||
            strstr(conch_status_message(st), want) == NULL) {
          fail_msg("protocol %d kind %d HTTP %s: %s (%s)", (int)ps[k],
                   (int)kinds[j], cases[i].status, conch_code_name(st->code),
                   conch_status_message(st));
        }
        done(&f);
      }
    }
    conch_client_free(c);
  }
}

static void test_grpc_trailers(void **state) {
  conch_client *c = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
  fx f;
  (void)state;

  /* Status and percent-encoded message from the trailers. */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc", NULL);
  envs(&f, 0, "m");
  block(&f, NULL, 1, "grpc-status", "5", "grpc-message", "not%20here%21", NULL);
  expect(&f, CONCH_CODE_NOT_FOUND, NULL);
  assert_string_equal(f.r.st.message, "not here!");
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_SERVER);
  assert_int_equal(f.r.msgs, 1);
  done(&f);
  /* Trailers-only: one HEADERS block with END_STREAM. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "200", 1, "content-type", "application/grpc", "grpc-status", "7",
        "grpc-message", "denied", NULL);
  expect(&f, CONCH_CODE_PERMISSION_DENIED, "denied");
  done(&f);
  /* No grpc-status, a malformed one, one out of range. */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc", NULL);
  block(&f, NULL, 1, "x-other", "1", NULL);
  expect(&f, CONCH_CODE_UNKNOWN, "no grpc-status");
  done(&f);
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 1, "content-type", "application/grpc", "grpc-status", "x1",
        NULL);
  expect(&f, CONCH_CODE_UNKNOWN, "invalid grpc-status");
  done(&f);
  /* OK, but a unary response without its message. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc", NULL);
  block(&f, NULL, 1, "grpc-status", "0", NULL);
  expect(&f, CONCH_CODE_UNIMPLEMENTED, "0 messages");
  done(&f);
  /* The stream ended with no trailers, or inside a message. */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc", NULL);
  envs(&f, 0, "m");
  end(&f);
  expect(&f, CONCH_CODE_INTERNAL, "without trailers");
  done(&f);
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc", NULL);
  data(&f,
       "\0\0\0\0\x09"
       "abc",
       8);
  end(&f);
  expect(&f, CONCH_CODE_INTERNAL, "truncated");
  done(&f);
  /* grpc-status-details-bin that is not a google.rpc.Status. */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 1, "content-type", "application/grpc", "grpc-status", "3",
        "grpc-status-details-bin", "!!!", NULL);
  expect(&f, CONCH_CODE_INTERNAL, "grpc-status-details-bin");
  done(&f);
  conch_client_free(c);
}

static void test_grpc_web_trailers(void **state) {
  static const struct {
    const char *block; /* the trailers frame's body; NULL: no frame */
    conch_code code;
    const char *msg;
  } cases[] = {
      {"grpc-status: 3\r\ngrpc-message: bad%20arg\r\n",
       CONCH_CODE_INVALID_ARGUMENT, "bad arg"},
      {"Grpc-Status:0\nX-Trailer: t\n", CONCH_CODE_OK, NULL},
      {"grpc-status:  14  \r\n", CONCH_CODE_UNAVAILABLE, NULL},
      {"x-only: 1\r\n", CONCH_CODE_UNKNOWN, "no grpc-status"},
      {"grpc-status\r\n", CONCH_CODE_INTERNAL, "invalid gRPC-Web trailers"},
      {NULL, CONCH_CODE_INTERNAL, "without a trailers frame"},
  };
  conch_client *c = make(CONCH_PROTOCOL_GRPC_WEB, "http://h:1", NULL);
  size_t i;
  fx f;
  (void)state;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
    block(&f, "200", 0, "content-type", "application/grpc-web+proto", NULL);
    envs(&f, 0, "m");
    if (cases[i].block != NULL) {
      env(&f, CONCH_ENV_TRAILERS, cases[i].block, strlen(cases[i].block));
    }
    end(&f);
    expect(&f, cases[i].code, cases[i].msg);
    done(&f);
  }
  /* Trailers-only over gRPC-Web: the status in the head, no body. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc-web+proto",
        "grpc-status", "16", "grpc-message", "who", NULL);
  end(&f);
  expect(&f, CONCH_CODE_UNAUTHENTICATED, "who");
  done(&f);
  conch_client_free(c);
}

/* ---- Connect error bodies -------------------------------------------------
 */

static void test_connect_errors(void **state) {
  conch_client *c = make(CONCH_PROTOCOL_CONNECT, "http://h:1", NULL);
  static const char err[] =
      "{\"code\":\"resource_exhausted\",\"message\":\"slow down\","
      "\"details\":[{\"type\":\"x.v1.Retry\",\"value\":\"CAE\"}]}";
  conch_comp_opts co;
  conch_comps cs;
  conch_buf z = CONCH_BUF_INIT;
  fx f;
  (void)state;

  /* The body's code beats the HTTP status; details decoded. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "429", 0, "content-type", "application/json", NULL);
  data(&f, err, strlen(err));
  end(&f);
  expect(&f, CONCH_CODE_RESOURCE_EXHAUSTED, NULL);
  assert_string_equal(f.r.st.message, "slow down");
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_SERVER);
  assert_int_equal(f.r.st.http_status, 429);
  assert_int_equal(f.r.st.ndetails, 1);
  assert_string_equal(f.r.st.details[0].type_url,
                      "type.googleapis.com/x.v1.Retry");
  assert_int_equal(f.r.st.details[0].len, 2);
  assert_memory_equal(f.r.st.details[0].value, "\x08\x01", 2);
  done(&f);
  /* An unknown code: the HTTP status's, the body's message. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "503", 0, "content-type", "application/json", NULL);
  datas(&f, "{\"code\":\"nope\",\"message\":\"m\"}");
  end(&f);
  expect(&f, CONCH_CODE_UNAVAILABLE, NULL);
  assert_string_equal(f.r.st.message, "m");
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_HTTP);
  done(&f);
  /* JSON that is no error object, or not JSON at all: the HTTP status. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "404", 0, "content-type", "application/json", NULL);
  data(&f, "[1,2", 4);
  end(&f);
  expect(&f, CONCH_CODE_UNIMPLEMENTED, "HTTP status 404");
  done(&f);
  /* A compressed error body. */
  conch__comp_opts_defaults(&co);
  conch__comps_init(&cs, conch_mem_default());
  assert_int_equal(conch__comp_compress(&cs, &co, CONCH_COMPRESSION_GZIP,
                                        (const uint8_t *)err, strlen(err), &z),
                   0);
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "429", 0, "content-type", "application/json", "content-encoding",
        "gzip", NULL);
  data(&f, conch__buf_head(&z), conch__buf_size(&z));
  end(&f);
  expect(&f, CONCH_CODE_RESOURCE_EXHAUSTED, "slow down");
  done(&f);
  /* ... in an encoding the client does not know: the HTTP status. */
  begin(&f, c, CONCH_STREAM_UNARY, 0, NULL);
  block(&f, "429", 0, "content-type", "application/json", "content-encoding",
        "lz4", NULL);
  data(&f, conch__buf_head(&z), conch__buf_size(&z));
  end(&f);
  expect(&f, CONCH_CODE_UNAVAILABLE, "HTTP status 429");
  done(&f);
  conch__buf_free(&z, conch_mem_default());
  conch__comps_clear(&cs);
  /* A stream refused by HTTP: the code is the status's, the message the
     body's (connect-go does the same). */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "401", 0, "content-type", "application/json", NULL);
  datas(&f, "{\"code\":\"internal\",\"message\":\"token expired\"}");
  end(&f);
  expect(&f, CONCH_CODE_UNAUTHENTICATED, "token expired");
  done(&f);
  /* A stream's end-stream error. */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/connect+proto", NULL);
  envs(&f, 0, "m");
  envs(&f, CONCH_ENV_END_STREAM,
       "{\"error\":{\"code\":\"aborted\",\"message\":\"again\"}}");
  end(&f);
  expect(&f, CONCH_CODE_ABORTED, "again");
  assert_int_equal(f.r.msgs, 1);
  done(&f);
  /* Bytes after the end-stream message, and no end-stream at all. */
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/connect+proto", NULL);
  envs(&f, CONCH_ENV_END_STREAM, "{}");
  envs(&f, 0, "late");
  end(&f);
  expect(&f, CONCH_CODE_INTERNAL, "after the end-stream message");
  done(&f);
  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/connect+proto", NULL);
  envs(&f, 0, "m");
  end(&f);
  expect(&f, CONCH_CODE_INTERNAL, "without an end-stream message");
  done(&f);
  conch_client_free(c);
}

/* ---- Response envelopes -------------------------------------------------- */

/* One step of a scripted response body. */
enum { S_ENV = 1, S_RAW, S_TRAILERS, S_END };
typedef struct step {
  int op; /* S_ENV: an envelope of |flags| around |s|; S_RAW: the
             bytes of |s| (|n| of them); S_TRAILERS: a gRPC trailers
             block with grpc-status |s| (ends the stream); S_END:
             END_STREAM */
  uint8_t flags;
  const char *s;
  size_t n;
} step;

/* The steps and the table below read as rows. */
/* clang-format off */
#define ENV(fl, str) {S_ENV, (fl), (str), 0}
#define RAW(str) {S_RAW, 0, (str), sizeof(str) - 1}
#define TRAILERS(code) {S_TRAILERS, 0, (code), 0}
#define END {S_END, 0, NULL, 0}
#define COMP CONCH_ENV_COMPRESSED
#define ENDS CONCH_ENV_END_STREAM
#define WEBT CONCH_ENV_TRAILERS

static void run_steps(fx *f, const step *st, size_t nsteps) {
  size_t i;
  for (i = 0; i < nsteps && st[i].op != 0; i++) {
    if (f->call->finished) {
      break; /* the call ended: what follows is not read */
    }
    switch (st[i].op) {
    case S_ENV:
      envs(f, st[i].flags, st[i].s);
      break;
    case S_RAW:
      data(f, st[i].s, st[i].n);
      break;
    case S_TRAILERS:
      block(f, NULL, 1, "grpc-status", st[i].s, NULL);
      break;
    default:
      end(f);
      break;
    }
  }
}

/* The flags, order and count of the response envelopes of each protocol,
   and what each wrong one ends the call with. */
static void test_response_envelopes(void **state) {
  static const struct {
    conch_protocol p;
    conch_stream_kind kind;
    step steps[4];
    conch_code code;
    const char *msg; /* a part of the message; NULL: any */
    int msgs;        /* messages delivered before the end */
  } cases[] = {
      /* Connect streams: messages, then one end-stream message. */
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(0, "m"), ENV(ENDS, "{}"), END}, CONCH_CODE_OK, NULL, 1},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(COMP, "m"), ENV(ENDS, "{}"), END}, CONCH_CODE_INTERNAL,
       "response declared no encoding", 0},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(0x04, "m"), ENV(ENDS, "{}"), END}, CONCH_CODE_INTERNAL,
       "invalid envelope flags 0x04", 0},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(WEBT, "m"), ENV(ENDS, "{}"), END}, CONCH_CODE_INTERNAL,
       "invalid envelope flags 0x80", 0},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(ENDS, "{}"), ENV(0, "m"), END}, CONCH_CODE_INTERNAL,
       "data after the end-stream message", 0},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(0, "m"), RAW("\0\0\0\0\x09"
                         "abc"),
        END},
       CONCH_CODE_INTERNAL, "truncated envelope", 1},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(ENDS | COMP, "{}"), END}, CONCH_CODE_INTERNAL,
       "compressed end-stream message without a response encoding", 0},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(ENDS, "not json"), END}, CONCH_CODE_INTERNAL,
       "invalid end-stream message", 0},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_SERVER,
       {ENV(0, "m"),
        ENV(ENDS, "{\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}"),
        END},
       CONCH_CODE_NOT_FOUND, "gone", 1},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_CLIENT,
       {ENV(0, "a"), ENV(0, "b"), ENV(ENDS, "{}"), END},
       CONCH_CODE_UNIMPLEMENTED, "client-streaming response had 2 messages",
       1 /* the second is refused, not delivered */},
      {CONCH_PROTOCOL_CONNECT, CONCH_STREAM_CLIENT,
       {ENV(ENDS, "{}"), END}, CONCH_CODE_UNIMPLEMENTED,
       "client-streaming response had 0 messages", 0},
      /* gRPC: messages with flags 0 or 1 only, the status in trailers. */
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_SERVER,
       {ENV(0, "m"), ENV(0, "n"), TRAILERS("0")}, CONCH_CODE_OK, NULL, 2},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_SERVER,
       {ENV(COMP, "m"), TRAILERS("0")}, CONCH_CODE_INTERNAL,
       "response declared no encoding", 0},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_SERVER,
       {ENV(ENDS, "{}"), TRAILERS("0")}, CONCH_CODE_INTERNAL,
       "invalid envelope flags 0x02", 0},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_SERVER,
       {ENV(WEBT, "grpc-status: 0\r\n"), TRAILERS("0")}, CONCH_CODE_INTERNAL,
       "invalid envelope flags 0x80", 0},
      {CONCH_PROTOCOL_GRPC, CONCH_STREAM_CLIENT,
       {ENV(0, "a"), ENV(0, "b"), TRAILERS("0")}, CONCH_CODE_UNIMPLEMENTED,
       "client-streaming response had 2 messages, not one", 1},
      /* gRPC-Web: messages, then one trailers frame, then nothing. */
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_SERVER,
       {ENV(0, "m"), ENV(WEBT, "grpc-status: 0\r\n"), END}, CONCH_CODE_OK,
       NULL, 1},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_SERVER,
       {ENV(WEBT, "grpc-status: 0\r\n"), ENV(0, "m"), END},
       CONCH_CODE_INTERNAL, "data after the trailers", 0},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_SERVER,
       {ENV(WEBT | COMP, "grpc-status: 0\r\n"), END}, CONCH_CODE_INTERNAL,
       "response declared no encoding", 0},
      {CONCH_PROTOCOL_GRPC_WEB, CONCH_STREAM_SERVER,
       {ENV(ENDS, "{}"), END}, CONCH_CODE_INTERNAL,
       "invalid envelope flags 0x02", 0},
  };
  /* clang-format on */
  static const char *const ctypes[] = {
      [CONCH_PROTOCOL_CONNECT] = "application/connect+proto",
      [CONCH_PROTOCOL_GRPC] = "application/grpc",
      [CONCH_PROTOCOL_GRPC_WEB] = "application/grpc-web+proto",
  };
  conch_client *cs[3];
  size_t i;
  fx f;
  (void)state;

  cs[CONCH_PROTOCOL_CONNECT] = make(CONCH_PROTOCOL_CONNECT, "http://h:1", NULL);
  cs[CONCH_PROTOCOL_GRPC] = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
  cs[CONCH_PROTOCOL_GRPC_WEB] =
      make(CONCH_PROTOCOL_GRPC_WEB, "http://h:1", NULL);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const conch_status *st;

    begin(&f, cs[cases[i].p], cases[i].kind, 0, NULL);
    block(&f, "200", 0, "content-type", ctypes[cases[i].p], NULL);
    run_steps(&f, cases[i].steps, 4);
    st = outcome(&f);
    if (st->code != cases[i].code ||
        (cases[i].msg != NULL &&
         strstr(conch_status_message(st), cases[i].msg) == NULL) ||
        f.r.msgs != cases[i].msgs) {
      fail_msg("case %zu: got %s (%s) after %d messages, want %s (%s) after "
               "%d",
               i, conch_code_name(st->code), conch_status_message(st), f.r.msgs,
               conch_code_name(cases[i].code),
               cases[i].msg != NULL ? cases[i].msg : "", cases[i].msgs);
    }
    done(&f);
  }
  for (i = 0; i < 3; i++) {
    conch_client_free(cs[i]);
  }
}

/* Envelopes cut at every byte arrive whole, in order; one over the
   receive limit is refused by its declared length. */
static void test_response_pieces(void **state) {
  static const char stream[] = "\0\0\0\0\3abc"
                               "\0\0\0\0\0"
                               "\2\0\0\0\2{}";
  conch_client *c = make(CONCH_PROTOCOL_CONNECT, "http://h:1", NULL);
  conch_client_opts *o;
  conch_client *limited;
  size_t i;
  fx f;
  (void)state;

  begin(&f, c, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/connect+proto", NULL);
  for (i = 0; i < sizeof(stream) - 1; i++) {
    data(&f, stream + i, 1);
    assert_int_equal(f.r.closes, 0);
  }
  end(&f);
  expect(&f, CONCH_CODE_OK, NULL);
  assert_int_equal(f.r.msgs, 2); /* "abc" and the empty message */
  done(&f);

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC), 0);
  assert_int_equal(conch_client_opts_set_recv_limit(o, 4), 0);
  assert_int_equal(conch_client_new(&limited, "http://h:1", o), 0);
  conch_client_opts_free(o);
  begin(&f, limited, CONCH_STREAM_SERVER, 0, NULL);
  block(&f, "200", 0, "content-type", "application/grpc", NULL);
  envs(&f, 0, "abcd");
  data(&f, "\0\0\0\0\5", 5); /* declares 5: refused before its bytes */
  expect(&f, CONCH_CODE_RESOURCE_EXHAUSTED,
         "response message of 5 bytes exceeds the receive limit of 4 bytes");
  assert_int_equal(f.r.msgs, 1);
  done(&f);
  conch_client_free(limited);
  conch_client_free(c);
}

/* The small predicates the sessions ask protocol.c. */
static void test_predicates(void **state) {
  static const struct {
    const char *name;
    int is;
  } fields[] = {
      {"grpc-status", 1},
      {"grpc-message", 1},
      {"grpc-status-details-bin", 1},
      {"grpc-status-x", 0},
      {"grpc-statu", 0},
      {"Grpc-Status", 0}, /* sessions hand names lowercased */
      {"grpc-encoding", 0},
      {"", 0},
  };
  static const struct {
    conch_stream_kind kind;
    int waits;
  } kinds[] = {
      {CONCH_STREAM_UNARY, 1},
      {CONCH_STREAM_SERVER, 1},
      {CONCH_STREAM_CLIENT, 0},
      {CONCH_STREAM_BIDI, 0},
  };
  conch_client *c = make(CONCH_PROTOCOL_GRPC, "http://h:1", NULL);
  size_t i;
  fx f;
  (void)state;

  for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
    if (conch__grpc_status_field(fields[i].name, strlen(fields[i].name)) !=
        fields[i].is) {
      fail_msg("conch__grpc_status_field(\"%s\") is not %d", fields[i].name,
               fields[i].is);
    }
  }
  /* The length counts, not a NUL. */
  assert_false(conch__grpc_status_field("grpc-status", 4));
  for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    begin(&f, c, kinds[i].kind, 0, NULL);
    assert_int_equal(conch__proto_headers_wait_message(f.call), kinds[i].waits);
    done(&f);
  }
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_request_headers),
      cmocka_unit_test(test_request_compression),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_framing),
      cmocka_unit_test(test_content_types),
      cmocka_unit_test(test_http_statuses),
      cmocka_unit_test(test_grpc_trailers),
      cmocka_unit_test(test_grpc_web_trailers),
      cmocka_unit_test(test_connect_errors),
      cmocka_unit_test(test_response_envelopes),
      cmocka_unit_test(test_response_pieces),
      cmocka_unit_test(test_predicates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
