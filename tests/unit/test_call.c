/* The response side of calls, without a network: detached calls fed
   headers, bodies, END_STREAM and resets as nghttp2 would deliver them.
   The cases follow the Connect client suites of the conformance tests
   (CONNECT_PROTOCOL.md 9.2 C.11-C.14) and the status rules of 1.3 and 2.3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>

#include "base64.h"
#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>

#include "buf.h"
#include "call_int.h"
#include "client_int.h"
#include "compress.h"
#include "envelope.h"
#include "gzip.h"
#include "list.h"
#include "protocol.h"

/* Messages for the JSON codec cases (compiled here, as test_pbjson does). */
#include "google/protobuf/any.pb-c.c"
#include "google/protobuf/duration.pb-c.c"
#include "google/protobuf/empty.pb-c.c"
#include "google/protobuf/field_mask.pb-c.c"
#include "google/protobuf/struct.pb-c.c"
#include "google/protobuf/timestamp.pb-c.c"
#include "google/protobuf/wrappers.pb-c.c"
#include "pbjson/types.pb-c.c"

typedef struct result {
  int closes;
  int headers;
  int messages;
  size_t last_len;
  uint8_t last[64];
  conch_status st;
  conch_metadata *trailers;
} result;

static void on_headers(conch_call *call, const conch_metadata *md, void *ud) {
  result *r = ud;
  (void)call;
  (void)md;
  r->headers++;
}

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  result *r = ud;
  (void)call;
  r->messages++;
  r->last_len = n;
  memcpy(r->last, p, n < sizeof(r->last) ? n : sizeof(r->last));
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  result *r = ud;
  (void)call;
  r->closes++;
  conch_status_copy(&r->st, st, NULL);
  conch_metadata_append(r->trailers, trailers);
}

static const conch_call_handler handler = {on_headers, NULL, on_raw, NULL,
                                           on_close};

static conch_client *client;      /* Connect */
static conch_client *grpc_client; /* gRPC */
static conch_client *web_client;  /* gRPC-Web */

/* Time as the tests move it: the clients read this clock. */
static int64_t fake_now = 1000000;

static int64_t fake_clock(void *ud) {
  (void)ud;
  return fake_now;
}

static conch_client *make(conch_protocol p) {
  conch_client_opts *o;
  conch_client *c = NULL;
  if (conch_client_opts_new(&o) != 0) {
    return NULL;
  }
  conch_client_opts_set_protocol(o, p);
  conch_client_opts_set_clock(o, fake_clock, NULL);
  conch_client_new(&c, "http://127.0.0.1:1", o);
  conch_client_opts_free(o);
  return c;
}

static int setup(void **state) {
  (void)state;
  client = make(CONCH_PROTOCOL_CONNECT);
  grpc_client = make(CONCH_PROTOCOL_GRPC);
  web_client = make(CONCH_PROTOCOL_GRPC_WEB);
  return client != NULL && grpc_client != NULL && web_client != NULL ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  conch_client_free(client);
  conch_client_free(grpc_client);
  conch_client_free(web_client);
  return 0;
}

typedef struct fixture {
  conch_call *call;
  conch_client *c;
  result r;
  conch_method m;
} fixture;

static void begin_on(fixture *f, conch_client *c, conch_stream_kind kind,
                     long timeout_ms) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  memset(f, 0, sizeof(*f));
  conch_status_init(&f->r.st);
  assert_int_equal(conch_metadata_new(&f->r.trailers, NULL), 0);
  f->m.path = "/t.v1.T/M";
  f->m.kind = kind;
  opts.timeout_ms = timeout_ms;
  f->c = c;
  assert_int_equal(
      conch__call_new_detached(c, &f->m, &opts, &handler, &f->r, &f->call), 0);
}

static void begin(fixture *f, conch_stream_kind kind, long timeout_ms) {
  begin_on(f, client, kind, timeout_ms);
}

static void hdr(fixture *f, const char *name, const char *value) {
  assert_int_equal(conch__call_on_header(f->call, (const uint8_t *)name,
                                         strlen(name), (const uint8_t *)value,
                                         strlen(value), 0),
                   0);
}

/* A response header block: ":status", content-type (NULL: none), more
   name/value pairs, NULL-terminated. */
static void response(fixture *f, const char *status, const char *ctype,
                     int end_stream, ...) {
  va_list ap;
  const char *n;
  conch__call_on_header(f->call, NULL, 0, NULL, 0, 0);
  hdr(f, ":status", status);
  if (ctype != NULL) {
    hdr(f, "content-type", ctype);
  }
  va_start(ap, end_stream);
  while ((n = va_arg(ap, const char *)) != NULL) {
    hdr(f, n, va_arg(ap, const char *));
  }
  va_end(ap);
  conch__call_on_headers_done(f->call, end_stream);
}

static void body(fixture *f, const void *p, size_t n) {
  conch__call_on_data(f->call, p, n);
}

static void body_str(fixture *f, const char *s) { body(f, s, strlen(s)); }

static void env(fixture *f, uint8_t flags, const void *p, size_t n) {
  uint8_t prefix[5];
  conch__env_write_prefix(prefix, flags, (uint32_t)n);
  body(f, prefix, 5);
  body(f, p, n);
}

static void env_str(fixture *f, uint8_t flags, const char *s) {
  env(f, flags, s, strlen(s));
}

static void end(fixture *f) { conch__call_on_remote_end(f->call); }

/* Delivers on_close and checks the code; returns the result. */
static result *finish(fixture *f, conch_code want) {
  conch__client_run_done(f->c);
  assert_int_equal(f->r.closes, 1);
  if (f->r.st.code != want) {
    fail_msg("got %s (%s), want %s", conch_code_name(f->r.st.code),
             conch_status_message(&f->r.st), conch_code_name(want));
  }
  return &f->r;
}

static void done(fixture *f) {
  conch_call_free(f->call);
  assert_int_equal(f->r.closes, 1);
  conch_status_clear(&f->r.st);
  conch_metadata_free(f->r.trailers);
}

static size_t gz(const char *s, uint8_t *out, size_t cap) {
  conch_buf b = CONCH_BUF_INIT;
  conch_gzip g;
  size_t n;
  conch__gzip_init(&g, conch_mem_default());
  assert_int_equal(
      conch__gzip_deflate(&g, -1, (const uint8_t *)s, strlen(s), &b), 0);
  n = conch__buf_size(&b);
  assert_true(n <= cap);
  memcpy(out, conch__buf_head(&b), n);
  conch__buf_free(&b, conch_mem_default());
  conch__gzip_clear(&g);
  return n;
}

/* ---- Connect unary ------------------------------------------------------ */

static void test_unary_ok_and_empty(void **state) {
  fixture f;
  (void)state;
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/proto", 0, "trailer-x-custom-trailer", "v",
           NULL);
  end(&f);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.messages, 1); /* the empty message */
  assert_int_equal(f.r.last_len, 0);
  assert_int_equal(f.r.headers, 1);
  assert_string_equal(
      conch_metadata_get(f.r.trailers, "x-custom-trailer", NULL), "v");
  assert_null(conch_metadata_get(conch_call_headers(f.call),
                                 "trailer-x-custom-trailer", NULL));
  done(&f);

  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/proto; charset=utf-8", 0, NULL);
  body(&f, "\x0a\x02", 2);
  body(&f, "ok", 2);
  end(&f);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.last_len, 4);
  assert_memory_equal(f.r.last, "\x0a\x02ok", 4);
  done(&f);
}

static void test_unary_gzip_body(void **state) {
  fixture f;
  uint8_t z[128];
  size_t n = gz("hello gzip", z, sizeof(z));
  (void)state;
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/proto", 0, "content-encoding", "gzip", NULL);
  body(&f, z, n);
  end(&f);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.last_len, 10);
  assert_memory_equal(f.r.last, "hello gzip", 10);
  done(&f);

  /* A body that claims gzip but is not. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/proto", 0, "content-encoding", "gzip", NULL);
  body(&f, "nope", 4);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
}

static void test_unary_unexpected(void **state) {
  fixture f;
  (void)state;
  /* Not an application/ type at all. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "image/jpeg", 0, NULL);
  body(&f, "\xff\xd8", 2);
  end(&f);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* The wrong codec. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/json", 0, NULL);
  body_str(&f, "{}");
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* An encoding we do not know. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/proto", 0, "content-encoding", "foo", NULL);
  body(&f, "x", 1);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* No content type. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", NULL, 1, NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
}

static void test_unary_errors(void **state) {
  fixture f;
  uint8_t z[256];
  size_t n;
  (void)state;
  /* A proto body on an error status is ignored. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "403", "application/proto", 0, NULL);
  body(&f, "\x0a\x02ok", 4);
  end(&f);
  finish(&f, CONCH_CODE_PERMISSION_DENIED);
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_HTTP);
  assert_int_equal(f.r.st.http_status, 403);
  assert_int_equal(f.r.messages, 0);
  done(&f);
  /* A valid body code beats the status. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "422", "application/json", 0, NULL);
  body_str(&f, "{\"code\":\"out_of_range\",\"message\":\"m\"}");
  end(&f);
  finish(&f, CONCH_CODE_OUT_OF_RANGE);
  assert_string_equal(f.r.st.message, "m");
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_SERVER);
  done(&f);
  /* A null code falls back to the status, keeping the message. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "401", "application/json; charset=utf-8", 0, NULL);
  body_str(&f, "{\"code\":null,\"message\":\"who?\"}");
  end(&f);
  finish(&f, CONCH_CODE_UNAUTHENTICATED);
  assert_string_equal(f.r.st.message, "who?");
  done(&f);
  /* A gzip error body with details. */
  n = gz("{\"code\":\"resource_exhausted\",\"message\":\"slow down\","
         "\"details\":[{\"type\":\"a.b.C\",\"value\":\"AQI\",\"debug\":1}]}",
         z, sizeof(z));
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "429", "application/json", 0, "content-encoding", "gzip", NULL);
  body(&f, z, n);
  end(&f);
  finish(&f, CONCH_CODE_RESOURCE_EXHAUSTED);
  assert_int_equal(f.r.st.ndetails, 1);
  assert_string_equal(f.r.st.details[0].type_url, "type.googleapis.com/a.b.C");
  assert_int_equal(f.r.st.details[0].len, 2);
  done(&f);
  /* Bare statuses map by the table. */
  {
    static const struct {
      const char *status;
      conch_code code;
    } map[] = {
        {"400", CONCH_CODE_INTERNAL},    {"404", CONCH_CODE_UNIMPLEMENTED},
        {"418", CONCH_CODE_UNKNOWN},     {"502", CONCH_CODE_UNAVAILABLE},
        {"503", CONCH_CODE_UNAVAILABLE}, {"504", CONCH_CODE_UNAVAILABLE},
        {"800", CONCH_CODE_UNKNOWN}};
    size_t i;
    for (i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
      begin(&f, CONCH_STREAM_UNARY, 0);
      response(&f, map[i].status, NULL, 1, NULL);
      finish(&f, map[i].code);
      done(&f);
    }
  }
}

static void test_informational_skipped(void **state) {
  fixture f;
  (void)state;
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "100", NULL, 0, NULL);
  response(&f, "200", "application/proto", 0, NULL);
  body(&f, "\x0a\x02ok", 4);
  end(&f);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.headers, 1);
  done(&f);
  /* A 1xx that ends the stream is broken. */
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "103", NULL, 1, NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
}

static void test_unary_limit(void **state) {
  conch_client_opts *o;
  conch_client *small;
  conch_call *call;
  conch_method m = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL, NULL, 0};
  result r;
  uint8_t big[200];
  (void)state;

  memset(&r, 0, sizeof(r));
  conch_status_init(&r.st);
  assert_int_equal(conch_metadata_new(&r.trailers, NULL), 0);
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_recv_limit(o, 100), 0);
  assert_int_equal(conch_client_new(&small, "http://127.0.0.1:1", o), 0);
  conch_client_opts_free(o);
  assert_int_equal(
      conch__call_new_detached(small, &m, NULL, &handler, &r, &call), 0);
  conch__call_on_header(call, NULL, 0, NULL, 0, 0);
  conch__call_on_header(call, (const uint8_t *)":status", 7,
                        (const uint8_t *)"200", 3, 0);
  conch__call_on_headers_done(call, 0);
  memset(big, 0, sizeof(big));
  conch__call_on_data(call, big, sizeof(big));
  /* Ended at once, before END_STREAM. */
  assert_true(conch_call_done(call));
  assert_int_equal(conch_call_status(call)->code,
                   CONCH_CODE_RESOURCE_EXHAUSTED);
  conch_call_free(call);
  conch_status_clear(&r.st);
  conch_metadata_free(r.trailers);
  conch_client_free(small);
}

/* ---- Connect streams ---------------------------------------------------- */

#define STREAM_CT "application/connect+proto"

static void test_stream_ok_empty_and_metadata(void **state) {
  fixture f;
  (void)state;
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env(&f, 0, "", 0);
  env_str(&f, 2,
          "{\"metadata\":{\"x-custom-trailer\":[\"a\",\"b\"],"
          "\"x-bin\":[\"AAE\"]}}");
  end(&f);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.messages, 1);
  assert_int_equal(f.r.last_len, 0);
  assert_int_equal(conch_metadata_count(f.r.trailers), 3);
  done(&f);
  /* {"error": null} is success. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env_str(&f, 2, "{\"error\":null}");
  end(&f);
  finish(&f, CONCH_CODE_OK);
  done(&f);
}

static void test_stream_errors(void **state) {
  fixture f;
  uint8_t z[256];
  size_t n;
  (void)state;
  /* An error after messages: the messages stay delivered. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env(&f, 0, "a", 1);
  env(&f, 0, "b", 1);
  env_str(&f, 2, "{\"error\":{\"code\":\"aborted\",\"message\":\"m\"}}");
  end(&f);
  finish(&f, CONCH_CODE_ABORTED);
  assert_int_equal(f.r.messages, 2);
  done(&f);
  /* Missing or unknown code in the end-stream error: unknown. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env_str(&f, 2, "{\"error\":{\"message\":\"no code\"}}");
  end(&f);
  finish(&f, CONCH_CODE_UNKNOWN);
  assert_string_equal(f.r.st.message, "no code");
  done(&f);
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env_str(&f, 2, "{\"error\":{\"code\":\"foobar\"}}");
  end(&f);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* A compressed end-stream (flags 0x03). */
  n = gz("{\"error\":{\"code\":\"failed_precondition\",\"details\":[{\"type\":"
         "\"x.Y\",\"value\":\"\"}],\"extra\":true}}",
         z, sizeof(z));
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, "connect-content-encoding", "gzip", NULL);
  env(&f, 3, z, n);
  end(&f);
  finish(&f, CONCH_CODE_FAILED_PRECONDITION);
  assert_int_equal(f.r.st.ndetails, 1);
  done(&f);
  /* A non-200 status: a body that is not JSON is not read. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "503", "text/plain", 0, NULL);
  finish(&f, CONCH_CODE_UNAVAILABLE);
  done(&f);
  /* A JSON error body gives its message (a 401's, as on unary calls); the
     code stays the HTTP status's, as connect-go's. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "401", "application/json", 0, NULL);
  body_str(&f, "{\"code\":\"unauthenticated\",\"message\":\"bad token\"}");
  end(&f);
  finish(&f, CONCH_CODE_UNAUTHENTICATED);
  assert_string_equal(f.r.st.message, "bad token");
  assert_int_equal(f.r.st.http_status, 401);
  assert_int_equal(f.r.messages, 0);
  done(&f);
  begin(&f, CONCH_STREAM_BIDI, 0);
  response(&f, "403", "application/json", 0, NULL);
  body_str(&f, "{\"code\":\"out_of_range\",\"message\":\"nope\"}");
  end(&f);
  finish(&f, CONCH_CODE_PERMISSION_DENIED);
  assert_string_equal(f.r.st.message, "nope");
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_HTTP);
  done(&f);
  /* A JSON body that does not parse: the status's code and text. */
  begin(&f, CONCH_STREAM_CLIENT, 0);
  response(&f, "401", "application/json", 0, NULL);
  body_str(&f, "{\"code\":");
  end(&f);
  finish(&f, CONCH_CODE_UNAUTHENTICATED);
  assert_string_equal(f.r.st.message, "HTTP status 401 Unauthorized");
  done(&f);
  /* An error with no body at all. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "401", "application/json", 1, NULL);
  end(&f);
  finish(&f, CONCH_CODE_UNAUTHENTICATED);
  done(&f);
}

static void test_stream_unexpected(void **state) {
  fixture f;
  (void)state;
  /* No end-stream: the message first, then internal. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env(&f, 0, "m", 1);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  assert_int_equal(f.r.messages, 1);
  done(&f);
  /* Truncated envelope. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  body(&f,
       "\x00\x00\x00\x00\x0a"
       "abc",
       8);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* Bytes after the end-stream message. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env_str(&f, 2, "{}");
  body(&f, "\0", 1);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* The JSON codec in reply to proto. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/connect+json", 0, NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* Not a Connect streaming type. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/proto", 0, NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* A compressed message without an encoding. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, "connect-content-encoding", "identity",
           NULL);
  env(&f, 1, "x", 1);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* An encoding we do not know. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 0, "connect-content-encoding", "foo", NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* Trailers-only style: headers with END_STREAM and no body. */
  begin(&f, CONCH_STREAM_SERVER, 0);
  response(&f, "200", STREAM_CT, 1, NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
}

static void test_client_stream_cardinality(void **state) {
  fixture f;
  (void)state;
  begin(&f, CONCH_STREAM_CLIENT, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env_str(&f, 2, "{\"code\":\"this is not an error\"}");
  end(&f);
  finish(&f, CONCH_CODE_UNIMPLEMENTED); /* no message */
  done(&f);
  begin(&f, CONCH_STREAM_CLIENT, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env(&f, 0, "a", 1);
  env(&f, 0, "b", 1);
  env_str(&f, 2, "{}");
  end(&f);
  finish(&f, CONCH_CODE_UNIMPLEMENTED); /* two messages */
  assert_int_equal(f.r.messages, 1);    /* the second is never delivered */
  done(&f);
  /* An end-stream error wins over cardinality. */
  begin(&f, CONCH_STREAM_CLIENT, 0);
  response(&f, "200", STREAM_CT, 0, NULL);
  env(&f, 0, "a", 1);
  env(&f, 0, "b", 1);
  env_str(&f, 2, "{\"error\":{\"code\":\"not_found\"}}");
  end(&f);
  finish(&f, CONCH_CODE_NOT_FOUND);
  done(&f);
}

/* ---- Resets and deadlines ----------------------------------------------- */

static void test_resets(void **state) {
  fixture f;
  static const struct {
    uint32_t err;
    conch_code code;
  } map[] = {{NGHTTP2_PROTOCOL_ERROR, CONCH_CODE_INTERNAL},
             {NGHTTP2_INTERNAL_ERROR, CONCH_CODE_INTERNAL},
             {NGHTTP2_REFUSED_STREAM, CONCH_CODE_UNAVAILABLE},
             {NGHTTP2_CANCEL, CONCH_CODE_CANCELED},
             {NGHTTP2_ENHANCE_YOUR_CALM, CONCH_CODE_RESOURCE_EXHAUSTED},
             {NGHTTP2_INADEQUATE_SECURITY, CONCH_CODE_PERMISSION_DENIED},
             {NGHTTP2_HTTP_1_1_REQUIRED, CONCH_CODE_INTERNAL},
             {NGHTTP2_NO_ERROR, CONCH_CODE_INTERNAL}};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
    begin(&f, CONCH_STREAM_BIDI, 0);
    response(&f, "200", STREAM_CT, 0, NULL);
    env(&f, 0, "a", 1);
    conch__call_on_stream_close(f.call, map[i].err);
    finish(&f, map[i].code);
    assert_int_equal(f.r.messages, 1);
    done(&f);
  }
  /* CANCEL once our own deadline has passed is the deadline. */
  begin(&f, CONCH_STREAM_BIDI, 1);
  fake_now += 1; /* the deadline passes */
  conch__call_on_stream_close(f.call, NGHTTP2_CANCEL);
  finish(&f, CONCH_CODE_DEADLINE_EXCEEDED);
  done(&f);
}

static void test_cancel_is_final(void **state) {
  fixture f;
  (void)state;
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/proto", 0, NULL);
  assert_int_equal(conch_call_cancel(f.call), 0);
  /* A response arriving after the cancel does not turn it into success. */
  body(&f, "\x0a\x02ok", 4);
  end(&f);
  finish(&f, CONCH_CODE_CANCELED);
  assert_int_equal(f.r.messages, 0);
  done(&f);
}

static void test_bad_request_metadata(void **state) {
  conch_metadata *md;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_method m = {"/t.v1.T/M", CONCH_STREAM_UNARY, NULL, NULL, 0};
  static const char *reserved[] = {"content-type", "te",
                                   "grpc-timeout", "connect-timeout-ms",
                                   "host",         "trailer-connect-x",
                                   "x-grpc-web"};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
    result r;
    conch_call *call;
    memset(&r, 0, sizeof(r));
    conch_status_init(&r.st);
    assert_int_equal(conch_metadata_new(&r.trailers, NULL), 0);
    assert_int_equal(conch_metadata_new(&md, NULL), 0);
    assert_int_equal(conch_metadata_add_str(md, reserved[i], "v"), 0);
    opts.headers = md;
    assert_int_equal(conch_call_start(client, &m, &opts, &handler, &r, &call),
                     0);
    /* Ended before anything went out: no connection was even made. */
    assert_true(conch_call_done(call));
    assert_int_equal(conch_call_status(call)->code, CONCH_CODE_INTERNAL);
    assert_int_equal(conch_call_status(call)->local_err, CONCH_ERR_HEADER);
    assert_true(conch__list_empty(&client->conns));
    conch__client_run_done(client);
    assert_int_equal(r.closes, 1);
    conch_call_free(call);
    conch_metadata_free(md);
    conch_status_clear(&r.st);
    conch_metadata_free(r.trailers);
  }
}

/* ---- Connect GET --------------------------------------------------------- */

/* The value of header |name| among the |n| entries of |nva|, as a string
   in |out|; NULL when absent. */
static const char *nv_get(const nghttp2_nv *nva, long n, const char *name,
                          char *out, size_t cap) {
  long i;
  for (i = 0; i < n; i++) {
    if (nva[i].namelen == strlen(name) &&
        memcmp(nva[i].name, name, nva[i].namelen) == 0) {
      size_t len = nva[i].valuelen < cap - 1 ? nva[i].valuelen : cap - 1;
      memcpy(out, nva[i].value, len);
      out[len] = 0;
      return out;
    }
  }
  return NULL;
}

/* Builds the request headers of a unary call carrying |msg| with
   http_get set; *|get| tells whether it became a GET. */
static long get_headers(conch_client *c, conch_idempotency idem,
                        const char *msg, nghttp2_nv *nva, conch_buf *store,
                        fixture *f) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  long n;

  memset(f, 0, sizeof(*f));
  conch_status_init(&f->r.st);
  assert_int_equal(conch_metadata_new(&f->r.trailers, NULL), 0);
  f->m.path = "/t.v1.T/Get";
  f->m.kind = CONCH_STREAM_UNARY;
  f->m.idempotency = idem;
  f->c = c;
  opts.http_get = 1;
  assert_int_equal(
      conch__call_new_detached(c, &f->m, &opts, &handler, &f->r, &f->call), 0);
  assert_int_equal(
      conch__proto_frame_message(f->call, (const uint8_t *)msg, strlen(msg)),
      0);
  n = conch__proto_request_headers(f->call, nva, 64, store);
  assert_true(n > 0);
  return n;
}

static void get_done(fixture *f, conch_buf *store) {
  conch__buf_free(store, conch_mem_default());
  conch_call_cancel(f->call);
  conch__client_run_done(f->c);
  done(f);
}

static void test_connect_get(void **state) {
  static const char msg[] = "\x01\xfb\xff?&=+/ message";
  nghttp2_nv nva[64];
  conch_buf store = CONCH_BUF_INIT;
  conch_client_opts *o;
  conch_client *gz_client, *capped, *grpc;
  char v[512], want[512], b64[128];
  fixture f;
  long n;
  (void)state;

  /* Identity: the message in the query as unpadded URL-safe base64, in
     connect-go's parameter order; no body headers. */
  n = get_headers(client, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS, msg, nva, &store,
                  &f);
  b64[conch__b64_encode((const uint8_t *)msg, strlen(msg), CONCH_B64_URL,
                        b64)] = 0;
  snprintf(want, sizeof(want),
           "/t.v1.T/Get?connect=v1&base64=1&encoding=proto&message=%s", b64);
  assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "GET");
  assert_string_equal(nv_get(nva, n, ":path", v, sizeof(v)), want);
  assert_null(strchr(b64, '=')); /* unpadded */
  assert_null(nv_get(nva, n, "content-type", v, sizeof(v)));
  assert_null(nv_get(nva, n, "connect-protocol-version", v, sizeof(v)));
  assert_null(nv_get(nva, n, "content-encoding", v, sizeof(v)));
  assert_string_equal(nv_get(nva, n, "accept-encoding", v, sizeof(v)), "gzip");
  assert_true(f.call->get);
  get_done(&f, &store);

  /* A method that may have side effects goes as POST. */
  n = get_headers(client, CONCH_IDEMPOTENCY_IDEMPOTENT, msg, nva, &store, &f);
  assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "POST");
  assert_string_equal(nv_get(nva, n, ":path", v, sizeof(v)), "/t.v1.T/Get");
  assert_string_equal(nv_get(nva, n, "content-type", v, sizeof(v)),
                      "application/proto");
  get_done(&f, &store);

  /* gzip: compression=gzip in the query, not content-encoding. */
  assert_int_equal(conch_client_opts_new(&o), 0);
  conch_client_opts_set_send_compression(o, CONCH_COMPRESSION_GZIP);
  assert_int_equal(conch_client_new(&gz_client, "http://127.0.0.1:1", o), 0);
  conch_client_opts_set_send_compression(o, CONCH_COMPRESSION_IDENTITY);
  /* "/t.v1.T/Get" (11) + query (44) + 22 base64 characters for the 16
     bytes of |msg| = 77 bytes: one over. */
  conch_client_opts_set_get_max_url(o, 76);
  assert_int_equal(conch_client_new(&capped, "http://127.0.0.1:1", o), 0);
  conch_client_opts_set_get_max_url(o, 0);
  conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC);
  assert_int_equal(conch_client_new(&grpc, "http://127.0.0.1:1", o), 0);
  conch_client_opts_free(o);

  n = get_headers(gz_client, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS, msg, nva,
                  &store, &f);
  assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "GET");
  assert_non_null(strstr(nv_get(nva, n, ":path", v, sizeof(v)),
                         "?connect=v1&base64=1&compression=gzip"
                         "&encoding=proto&message=H4sI")); /* gzip magic */
  assert_null(nv_get(nva, n, "content-encoding", v, sizeof(v)));
  get_done(&f, &store);

  /* Over the URL limit: POST after all, with its body headers. */
  n = get_headers(capped, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS, msg, nva, &store,
                  &f);
  assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "POST");
  assert_string_equal(nv_get(nva, n, ":path", v, sizeof(v)), "/t.v1.T/Get");
  assert_string_equal(nv_get(nva, n, "content-type", v, sizeof(v)),
                      "application/proto");
  assert_false(f.call->get);
  get_done(&f, &store);
  /* A short message fits. */
  n = get_headers(capped, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS, "x", nva, &store,
                  &f);
  assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "GET");
  get_done(&f, &store);

  /* GET is the Connect protocol's only. */
  n = get_headers(grpc, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS, msg, nva, &store,
                  &f);
  assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "POST");
  get_done(&f, &store);

  conch_client_free(gz_client);
  conch_client_free(capped);
  conch_client_free(grpc);
}

/* ---- gRPC --------------------------------------------------------------- */

/* A trailer block (HEADERS with END_STREAM after the body). */
static void trailers(fixture *f, ...) {
  va_list ap;
  const char *n;
  conch__call_on_header(f->call, NULL, 0, NULL, 0, 0);
  va_start(ap, f);
  while ((n = va_arg(ap, const char *)) != NULL) {
    hdr(f, n, va_arg(ap, const char *));
  }
  va_end(ap);
  conch__call_on_headers_done(f->call, 1);
}

static void test_grpc_basic(void **state) {
  fixture f;
  (void)state;
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc+proto", 0, "x-h", "1", NULL);
  env(&f, 0, "\x0a\x02ok", 4);
  trailers(&f, "grpc-status", "0", "x-custom-trailer", "t", NULL);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.messages, 1);
  assert_string_equal(
      conch_metadata_get(f.r.trailers, "x-custom-trailer", NULL), "t");
  /* grpc-status is the protocol's: not surfaced as a trailer. */
  assert_null(conch_metadata_get(f.r.trailers, "grpc-status", NULL));
  done(&f);
  /* Status with a percent-encoded message. */
  begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  trailers(&f, "grpc-status", "9", "grpc-message", "bad%20%E2%98%BA%zz", NULL);
  finish(&f, CONCH_CODE_FAILED_PRECONDITION);
  assert_string_equal(f.r.st.message, "bad \xe2\x98\xba%zz");
  assert_int_equal(f.r.st.origin, CONCH_ORIGIN_SERVER);
  done(&f);
}

/* ---- Request header templates and call reuse ---------------------------- */

/* Headers of a new gRPC call of |path| (with |md| as request metadata and
   |timeout_ms|), into |nva|; returns the count. */
static long tmpl_headers(fixture *f, const char *path, conch_metadata *md,
                         long timeout_ms, nghttp2_nv *nva, conch_buf *store) {
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  long n;
  memset(f, 0, sizeof(*f));
  conch_status_init(&f->r.st);
  assert_int_equal(conch_metadata_new(&f->r.trailers, NULL), 0);
  f->m.path = path;
  f->m.kind = CONCH_STREAM_UNARY;
  f->c = grpc_client;
  opts.headers = md;
  opts.timeout_ms = timeout_ms;
  assert_int_equal(conch__call_new_detached(grpc_client, &f->m, &opts,
                                            &handler, &f->r, &f->call),
                   0);
  n = conch__proto_request_headers(f->call, nva, 64, store);
  assert_true(n > 0);
  return n;
}

static int nv_count(const nghttp2_nv *nva, long n, const char *name) {
  long i;
  int k = 0;
  for (i = 0; i < n; i++) {
    k += nva[i].namelen == strlen(name) &&
         memcmp(nva[i].name, name, nva[i].namelen) == 0;
  }
  return k;
}

static void test_request_header_templates(void **state) {
  nghttp2_nv a[64], b[64];
  conch_buf store = CONCH_BUF_INIT;
  conch_metadata *md;
  char path[32], v[128];
  fixture f;
  long na, nb, i;
  (void)state;

  /* Two calls of one method share the constant headers: same strings, not
     copied by nghttp2. */
  snprintf(path, sizeof(path), "/t.v1.T/Tmpl");
  na = tmpl_headers(&f, path, NULL, 0, a, &store);
  assert_string_equal(nv_get(a, na, ":path", v, sizeof(v)), "/t.v1.T/Tmpl");
  assert_string_equal(nv_get(a, na, ":method", v, sizeof(v)), "POST");
  assert_string_equal(nv_get(a, na, "content-type", v, sizeof(v)),
                      "application/grpc");
  assert_string_equal(nv_get(a, na, "te", v, sizeof(v)), "trailers");
  assert_int_equal(nv_count(a, na, "user-agent"), 1);
  assert_int_equal(conch__buf_size(&store), 0); /* nothing built per call */
  for (i = 0; i < na; i++) {
    assert_true(a[i].flags & NGHTTP2_NV_FLAG_NO_COPY_NAME);
    assert_true(a[i].flags & NGHTTP2_NV_FLAG_NO_COPY_VALUE);
  }
  get_done(&f, &store);
  nb = tmpl_headers(&f, path, NULL, 0, b, &store);
  assert_int_equal(na, nb);
  for (i = 0; i < na; i++) {
    assert_ptr_equal(a[i].name, b[i].name);
    assert_ptr_equal(a[i].value, b[i].value);
  }
  get_done(&f, &store);

  /* The key is the path's text, not its address: a caller may reuse one
     buffer for several methods. */
  snprintf(path, sizeof(path), "/t.v1.T/Other");
  nb = tmpl_headers(&f, path, NULL, 0, b, &store);
  assert_string_equal(nv_get(b, nb, ":path", v, sizeof(v)), "/t.v1.T/Other");
  get_done(&f, &store);

  /* Per-call parts come after, copied by nghttp2: the deadline, the
     caller's metadata, and the caller's user-agent instead of ours. */
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "user-agent", "mine/1"), 0);
  assert_int_equal(conch_metadata_add_str(md, "x-a", "1"), 0);
  snprintf(path, sizeof(path), "/t.v1.T/Tmpl");
  nb = tmpl_headers(&f, path, md, 5000, b, &store);
  assert_int_equal(nv_count(b, nb, "user-agent"), 1);
  assert_string_equal(nv_get(b, nb, "user-agent", v, sizeof(v)), "mine/1");
  assert_string_equal(nv_get(b, nb, "x-a", v, sizeof(v)), "1");
  assert_string_equal(nv_get(b, nb, "grpc-timeout", v, sizeof(v)), "5000m");
  assert_string_equal(nv_get(b, nb, "content-type", v, sizeof(v)),
                      "application/grpc");
  for (i = 0; i < nb; i++) {
    int per_call = (b[i].namelen == 10 && memcmp(b[i].name, "user-agent", 10) == 0) ||
                   (b[i].namelen == 3 && memcmp(b[i].name, "x-a", 3) == 0) ||
                   (b[i].namelen == 12 && memcmp(b[i].name, "grpc-timeout", 12) == 0);
    assert_int_equal(b[i].flags == NGHTTP2_NV_FLAG_NONE, per_call);
  }
  get_done(&f, &store);
  conch_metadata_free(md);
}

/* A released call is reused for the next one: nothing of the old call's
   response may show in the new one. */
static void test_call_reuse(void **state) {
  fixture f;
  conch_call *old;
  (void)state;
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, "x-old", "1", NULL);
  env(&f, 0, "\x0a\x02ok", 4);
  trailers(&f, "grpc-status", "5", "grpc-message", "gone", "x-t", "t", NULL);
  finish(&f, CONCH_CODE_NOT_FOUND);
  old = f.call;
  done(&f);
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  assert_ptr_equal(f.call, old); /* the spare came back */
  assert_int_equal(conch_metadata_count(conch_call_headers(f.call)), 0);
  assert_int_equal(conch_metadata_count(conch_call_trailers(f.call)), 0);
  assert_false(conch_call_done(f.call));
  response(&f, "200", "application/grpc", 0, NULL);
  env(&f, 0, "\x0a\x02ok", 4);
  trailers(&f, "grpc-status", "0", NULL);
  finish(&f, CONCH_CODE_OK);
  assert_null(conch_metadata_get(conch_call_headers(f.call), "x-old", NULL));
  assert_null(conch_metadata_get(f.r.trailers, "x-t", NULL));
  assert_null(f.r.st.message);
  done(&f);
}

/* on_raw_message sees the size of the message it handles. */
static size_t seen_size;
static void size_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  (void)p;
  (void)ud;
  assert_int_equal(conch_call_message_size(call), n);
  seen_size = conch_call_message_size(call);
}

static int auto_closes;
static void auto_close(conch_call *call, const conch_status *st,
                       const conch_metadata *trailers, void *ud) {
  (void)st;
  (void)trailers;
  (void)ud;
  assert_false(conch__call_maybe_release(call)); /* not inside on_close */
  auto_closes++;
}

static void test_message_size_and_auto_free(void **state) {
  static const conch_call_handler h = {NULL, NULL, size_raw, NULL,
                                       auto_close};
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_method m = {"/t.v1.T/M", CONCH_STREAM_SERVER, NULL, NULL, 0};
  conch_call *call;
  uint8_t prefix[5], payload[300];
  int i;
  (void)state;

  memset(payload, 'p', sizeof(payload));
  opts.auto_free = 1;
  assert_int_equal(
      conch__call_new_detached(grpc_client, &m, &opts, &h, NULL, &call), 0);
  assert_int_equal(conch_call_message_size(call), 0);
  assert_int_equal(conch_call_message_size(NULL), 0);
  conch__call_on_header(call, NULL, 0, NULL, 0, 0);
  conch__call_on_header(call, (const uint8_t *)":status", 7,
                        (const uint8_t *)"200", 3, 0);
  conch__call_on_header(call, (const uint8_t *)"content-type", 12,
                        (const uint8_t *)"application/grpc", 16, 0);
  conch__call_on_headers_done(call, 0);
  for (i = 1; i <= 2; i++) {
    conch__env_write_prefix(prefix, 0, (uint32_t)(100 * i));
    conch__call_on_data(call, prefix, 5);
    conch__call_on_data(call, payload, (size_t)(100 * i));
    assert_int_equal(seen_size, (size_t)(100 * i));
    assert_int_equal(conch_call_message_size(call), 0); /* outside it */
  }
  conch__call_on_header(call, NULL, 0, NULL, 0, 0);
  conch__call_on_header(call, (const uint8_t *)"grpc-status", 11,
                        (const uint8_t *)"0", 1, 0);
  conch__call_on_headers_done(call, 1);
  /* on_close ran once and the call released itself: it is the client's
     spare now (ASan and valgrind see no leak and no double free; the test
     never calls conch_call_free). */
  auto_closes = 0;
  conch__client_run_done(grpc_client);
  assert_int_equal(auto_closes, 1);
  assert_ptr_equal(grpc_client->spare_calls, call);
}

static void test_grpc_trailers_only(void **state) {
  fixture f;
  (void)state;
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 1, "grpc-status", "5", "grpc-message",
           "gone", "x-custom", "a", "x-custom", "b", NULL);
  finish(&f, CONCH_CODE_NOT_FOUND);
  assert_string_equal(f.r.st.message, "gone");
  /* Everything but content-type is a trailer. */
  assert_int_equal(conch_metadata_count(f.r.trailers), 2);
  assert_null(conch_metadata_get(conch_call_headers(f.call), "x-custom", NULL));
  assert_int_equal(f.r.headers, 0);
  done(&f);
}

static void test_grpc_unexpected(void **state) {
  fixture f;
  (void)state;
  /* A trailer block overrides grpc-status in the headers. */
  begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc", 0, "grpc-status", "8", NULL);
  trailers(&f, "grpc-status", "9", NULL);
  finish(&f, CONCH_CODE_FAILED_PRECONDITION);
  done(&f);
  /* A body and no trailers: internal, whatever the headers said. */
  begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc", 0, "grpc-status", "9", NULL);
  env(&f, 0, "x", 1);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* Trailers without grpc-status. */
  begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  trailers(&f, "x-y", "z", NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* Unparsable grpc-status. */
  begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  trailers(&f, "grpc-status", "017", NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* Cardinality of unary and client-stream. */
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  trailers(&f, "grpc-status", "0", NULL);
  finish(&f, CONCH_CODE_UNIMPLEMENTED);
  done(&f);
  begin_on(&f, grpc_client, CONCH_STREAM_CLIENT, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  env(&f, 0, "a", 1);
  env(&f, 0, "b", 1);
  trailers(&f, "grpc-status", "0", NULL);
  finish(&f, CONCH_CODE_UNIMPLEMENTED);
  done(&f);
  /* Content types. */
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "image/jpeg", 0, NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc+json", 0, NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc-web", 0, NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* Encodings. */
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, "grpc-encoding", "foo", NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  env(&f, 1, "x", 1);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* The Connect end-stream flag means nothing in gRPC. */
  begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  env_str(&f, 2, "{}");
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* HTTP status first, even with a grpc-status. */
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "504", "application/grpc", 1, "grpc-status", "0", NULL);
  finish(&f, CONCH_CODE_UNAVAILABLE);
  done(&f);
}

static void test_grpc_status_details(void **state) {
  fixture f;
  /* google.rpc.Status{code: 7, message: "no", details: [Any{type_url:
     "type.googleapis.com/x.Y", value: "\x01"}]} */
  static const uint8_t pb[] = {
      0x08, 0x07, 0x12, 0x02, 'n', 'o', 0x1a, 0x1c, 0x0a, 0x17, 't',  'y',
      'p',  'e',  '.',  'g',  'o', 'o', 'g',  'l',  'e',  'a',  'p',  'i',
      's',  '.',  'c',  'o',  'm', '/', 'x',  '.',  'Y',  0x12, 0x01, 0x01};
  char b64[128];
  size_t n = conch__b64_encode(pb, sizeof(pb), CONCH_B64_STD, b64);
  (void)state;
  b64[n] = '\0';
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  trailers(&f, "grpc-status", "7", "grpc-message", "no",
           "grpc-status-details-bin", b64, NULL);
  finish(&f, CONCH_CODE_PERMISSION_DENIED);
  assert_int_equal(f.r.st.ndetails, 1);
  assert_string_equal(f.r.st.details[0].type_url, "type.googleapis.com/x.Y");
  done(&f);
  /* Bad details: internal. */
  begin_on(&f, grpc_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  trailers(&f, "grpc-status", "7", "grpc-status-details-bin", "!!!", NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
}

/* ---- gRPC-Web ------------------------------------------------------------ */

static void test_grpc_web_trailers(void **state) {
  fixture f;
  uint8_t z[128];
  size_t n;
  (void)state;
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 0, NULL);
  env(&f, 0, "a", 1);
  env_str(&f, 0x80,
          "Grpc-Status: 0\r\nx-Custom-Trailer:  v1 \r\n"
          "x-custom-trailer: v2\r\n");
  end(&f);
  finish(&f, CONCH_CODE_OK);
  assert_int_equal(f.r.messages, 1);
  {
    long i = conch_metadata_find(f.r.trailers, "x-custom-trailer", 0);
    const char *nm;
    const uint8_t *v;
    size_t len;
    assert_true(i >= 0);
    assert_int_equal(conch_metadata_at(f.r.trailers, (size_t)i, &nm, &v, &len),
                     0);
    assert_string_equal((const char *)v, "v1");
    i = conch_metadata_find(f.r.trailers, "x-custom-trailer", (size_t)i + 1);
    assert_true(i >= 0);
  }
  done(&f);
  /* LF line ends, a message, a non-OK status. */
  begin_on(&f, web_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc-web", 0, NULL);
  env_str(&f, 0x80, "grpc-status: 3\ngRPC-Message: bad%20arg\n");
  end(&f);
  finish(&f, CONCH_CODE_INVALID_ARGUMENT);
  assert_string_equal(f.r.st.message, "bad arg");
  done(&f);
  /* A compressed trailers frame (0x81). */
  n = gz("grpc-status: 0\r\n", z, sizeof(z));
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 0, "grpc-encoding", "gzip",
           NULL);
  env(&f, 0x81, z, n);
  end(&f);
  finish(&f, CONCH_CODE_OK);
  done(&f);
  /* Trailers-only: headers with the status, no body. */
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 1, "grpc-status", "14",
           "x-t", "1", NULL);
  finish(&f, CONCH_CODE_UNAVAILABLE);
  assert_string_equal(conch_metadata_get(f.r.trailers, "x-t", NULL), "1");
  done(&f);
  /* Header 8 + frame 9 gives 9. */
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 0, "grpc-status", "8",
           NULL);
  env_str(&f, 0x80, "grpc-status: 9\r\n");
  end(&f);
  finish(&f, CONCH_CODE_FAILED_PRECONDITION);
  done(&f);
}

static void test_grpc_web_unexpected(void **state) {
  fixture f;
  (void)state;
  /* Messages but no trailers frame. */
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 0, NULL);
  env(&f, 0, "a", 1);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* No status in the frame. */
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 0, NULL);
  env_str(&f, 0x80, "x: y\r\n");
  end(&f);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  /* Bytes after the trailers frame. */
  begin_on(&f, web_client, CONCH_STREAM_SERVER, 0);
  response(&f, "200", "application/grpc-web+proto", 0, NULL);
  env_str(&f, 0x80, "grpc-status: 0\r\n");
  env(&f, 0, "late", 4);
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  /* Unary OK with no message (body trailers) and trailers-only. */
  begin_on(&f, web_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc-web+proto", 0, NULL);
  env_str(&f, 0x80, "grpc-status: 0\r\n");
  end(&f);
  finish(&f, CONCH_CODE_UNIMPLEMENTED);
  done(&f);
  begin_on(&f, web_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc-web+proto", 1, "grpc-status", "0",
           NULL);
  finish(&f, CONCH_CODE_UNIMPLEMENTED);
  done(&f);
  /* The wrong family / codec. */
  begin_on(&f, web_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc", 0, NULL);
  finish(&f, CONCH_CODE_UNKNOWN);
  done(&f);
  begin_on(&f, web_client, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/grpc-web+json", 0, NULL);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
}

/* ---- JSON codec --------------------------------------------------------- */

#if CONCH_WITH_JSON

typedef struct jresult {
  int closes;
  int messages;
  char s[64]; /* Scalars.s of the last message */
  int32_t i32;
  conch_status st;
} jresult;

static void j_on_message(conch_call *call, const ProtobufCMessage *m,
                         void *ud) {
  jresult *r = ud;
  const Pbjsontest__Scalars *sc = (const Pbjsontest__Scalars *)m;
  (void)call;
  r->messages++;
  snprintf(r->s, sizeof(r->s), "%s", sc->s);
  r->i32 = sc->i32;
}

static void j_on_close(conch_call *call, const conch_status *st,
                       const conch_metadata *trailers, void *ud) {
  jresult *r = ud;
  (void)call;
  (void)trailers;
  r->closes++;
  conch_status_copy(&r->st, st, NULL);
}

static const conch_call_handler j_push = {NULL, j_on_message, NULL, NULL,
                                          j_on_close};
static const conch_call_handler j_pull = {NULL, NULL, NULL, NULL, j_on_close};

static const conch_method j_methods[] = {
    {"/t.v1.T/U", CONCH_STREAM_UNARY, &pbjsontest__scalars__descriptor,
     &pbjsontest__scalars__descriptor, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS},
    {"/t.v1.T/C", CONCH_STREAM_CLIENT, &pbjsontest__scalars__descriptor,
     &pbjsontest__scalars__descriptor, CONCH_IDEMPOTENCY_UNKNOWN},
    {"/t.v1.T/S", CONCH_STREAM_SERVER, &pbjsontest__scalars__descriptor,
     &pbjsontest__scalars__descriptor, CONCH_IDEMPOTENCY_UNKNOWN},
    {"/t.v1.T/B", CONCH_STREAM_BIDI, &pbjsontest__scalars__descriptor,
     &pbjsontest__scalars__descriptor, CONCH_IDEMPOTENCY_UNKNOWN},
    {"/t.v1.T/A", CONCH_STREAM_UNARY, &google__protobuf__any__descriptor,
     &google__protobuf__any__descriptor, CONCH_IDEMPOTENCY_UNKNOWN},
};

static const ProtobufCMessageDescriptor *resolve_scalars(const char *url,
                                                         void *ud) {
  (void)ud;
  return strcmp(url, "type.googleapis.com/pbjsontest.Scalars") == 0
             ? &pbjsontest__scalars__descriptor
             : NULL;
}

static conch_client *make_json(conch_protocol p, int gzip, int resolver) {
  conch_client_opts *o;
  conch_client *c = NULL;
  if (conch_client_opts_new(&o) != 0) {
    return NULL;
  }
  conch_client_opts_set_protocol(o, p);
  assert_int_equal(conch_client_opts_set_codec(o, CONCH_CODEC_JSON), 0);
  assert_int_equal(conch_client_opts_set_codec(o, (conch_codec)2),
                   CONCH_ERR_INVALID);
  if (gzip) {
    conch_client_opts_set_send_compression(o, CONCH_COMPRESSION_GZIP);
  }
  if (resolver) {
    assert_int_equal(
        conch_client_opts_set_json_resolver(o, resolve_scalars, NULL), 0);
  }
  conch_client_new(&c, "http://127.0.0.1:1", o);
  conch_client_opts_free(o);
  assert_non_null(c);
  assert_int_equal(conch_client_codec(c), CONCH_CODEC_JSON);
  return c;
}

typedef struct jfixture {
  fixture f; /* f.r is unused: results go to |jr| */
  jresult jr;
} jfixture;

static void jbegin(jfixture *j, conch_client *c, const conch_method *m,
                   int pull) {
  memset(j, 0, sizeof(*j));
  conch_status_init(&j->jr.st);
  j->f.c = c;
  assert_int_equal(conch__call_new_detached(c, m, NULL,
                                            pull ? &j_pull : &j_push, &j->jr,
                                            &j->f.call),
                   0);
}

static jresult *jfinish(jfixture *j, conch_code want) {
  conch__client_run_done(j->f.c);
  assert_int_equal(j->jr.closes, 1);
  if (j->jr.st.code != want) {
    fail_msg("got %s (%s), want %s", conch_code_name(j->jr.st.code),
             conch_status_message(&j->jr.st), conch_code_name(want));
  }
  return &j->jr;
}

static void jdone(jfixture *j) {
  conch_call_free(j->f.call);
  conch_status_clear(&j->jr.st);
}

static void test_json_connect_unary(void **state) {
  conch_client *c = make_json(CONCH_PROTOCOL_CONNECT, 0, 0);
  jfixture j;
  ProtobufCMessage *m;
  (void)state;

  /* JSON to a JSON request, with the charset connect servers add. */
  jbegin(&j, c, &j_methods[0], 0);
  response(&j.f, "200", "application/json; charset=utf-8", 0, NULL);
  body_str(&j.f, "{\"s\":\"ok\",\"i32\":7,\"unknownField\":[1]}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_int_equal(j.jr.messages, 1);
  assert_string_equal(j.jr.s, "ok");
  assert_int_equal(j.jr.i32, 7);
  jdone(&j);

  /* Pulled. */
  jbegin(&j, c, &j_methods[0], 1);
  response(&j.f, "200", "application/json", 0, NULL);
  body_str(&j.f, "{\"i32\":\"-3\"}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_int_equal(conch_call_recv(j.f.call, &m), 0);
  assert_int_equal(((Pbjsontest__Scalars *)m)->i32, -3);
  conch_message_free(c, m);
  jdone(&j);

  /* Proto to a JSON request: the wrong codec. */
  jbegin(&j, c, &j_methods[0], 0);
  response(&j.f, "200", "application/proto", 0, NULL);
  body(&j.f, "\x08\x07", 2);
  end(&j.f);
  assert_non_null(strstr(
      conch_status_message(&jfinish(&j, CONCH_CODE_INTERNAL)->st), "(json)"));
  assert_int_equal(j.jr.messages, 0);
  jdone(&j);

  /* Not JSON of the type: internal, saying why. */
  jbegin(&j, c, &j_methods[0], 0);
  response(&j.f, "200", "application/json", 0, NULL);
  body_str(&j.f, "{\"i32\":\"x\"}");
  end(&j.f);
  assert_non_null(strstr(
      conch_status_message(&jfinish(&j, CONCH_CODE_INTERNAL)->st), "i32"));
  jdone(&j);
  jbegin(&j, c, &j_methods[0], 1);
  response(&j.f, "200", "application/json", 0, NULL);
  body_str(&j.f, "\x08\x07");
  end(&j.f);
  jfinish(&j, CONCH_CODE_INTERNAL);
  jdone(&j);

  /* Errors are JSON in every codec, as before. */
  jbegin(&j, c, &j_methods[0], 0);
  response(&j.f, "404", "application/json", 0, NULL);
  body_str(&j.f, "{\"code\":\"not_found\",\"message\":\"m\"}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_NOT_FOUND);
  jdone(&j);
  conch_client_free(c);
}

/* An envelope of |s| gzipped. */
static void env_gz(fixture *f, const char *s) {
  uint8_t z[256];
  size_t n = gz(s, z, sizeof(z));
  env(f, 1, z, n);
}

static void test_json_connect_stream(void **state) {
  conch_client *c = make_json(CONCH_PROTOCOL_CONNECT, 0, 0);
  jfixture j;
  ProtobufCMessage *m;
  (void)state;

  jbegin(&j, c, &j_methods[2], 0);
  response(&j.f, "200", "application/connect+json", 0, NULL);
  env_str(&j.f, 0, "{\"s\":\"a\"}");
  env_str(&j.f, 0, "{\"s\":\"b\"}");
  env_str(&j.f, 2, "{}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_int_equal(j.jr.messages, 2);
  assert_string_equal(j.jr.s, "b");
  jdone(&j);

  /* Pulled, gzip: kept compressed until taken, checked on arrival. */
  jbegin(&j, c, &j_methods[3], 1);
  response(&j.f, "200", "application/connect+json", 0,
           "connect-content-encoding", "gzip", NULL);
  env_gz(&j.f, "{\"s\":\"zipped\"}");
  env_str(&j.f, 2, "{}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_int_equal(conch_call_recv(j.f.call, &m), 0);
  assert_string_equal(((Pbjsontest__Scalars *)m)->s, "zipped");
  conch_message_free(c, m);
  assert_int_equal(conch_call_recv(j.f.call, &m), CONCH_ERR_EOF);
  jdone(&j);
  jbegin(&j, c, &j_methods[3], 1);
  response(&j.f, "200", "application/connect+json", 0,
           "connect-content-encoding", "gzip", NULL);
  env_gz(&j.f, "{\"s\":1}");
  jfinish(&j, CONCH_CODE_INTERNAL);
  assert_int_equal(conch_call_recv(j.f.call, &m), CONCH_ERR_RPC);
  jdone(&j);

  /* The proto form of the stream type. */
  jbegin(&j, c, &j_methods[3], 0);
  response(&j.f, "200", "application/connect+proto", 0, NULL);
  jfinish(&j, CONCH_CODE_INTERNAL);
  jdone(&j);
  /* Not Connect at all. */
  jbegin(&j, c, &j_methods[3], 0);
  response(&j.f, "200", "application/json", 0, NULL);
  jfinish(&j, CONCH_CODE_UNKNOWN);
  jdone(&j);
  conch_client_free(c);
}

static void test_json_grpc(void **state) {
  conch_client *g = make_json(CONCH_PROTOCOL_GRPC, 0, 0);
  conch_client *w = make_json(CONCH_PROTOCOL_GRPC_WEB, 0, 0);
  static const char *const bad_grpc[] = {"application/grpc",
                                         "application/grpc+proto"};
  static const char *const bad_web[] = {"application/grpc-web",
                                        "application/grpc-web+proto"};
  jfixture j;
  size_t i;
  (void)state;

  jbegin(&j, g, &j_methods[0], 0);
  response(&j.f, "200", "application/grpc+json", 0, NULL);
  env_str(&j.f, 0, "{\"s\":\"g\"}");
  trailers(&j.f, "grpc-status", "0", NULL);
  jfinish(&j, CONCH_CODE_OK);
  assert_string_equal(j.jr.s, "g");
  jdone(&j);

  jbegin(&j, w, &j_methods[1], 0);
  response(&j.f, "200", "application/grpc-web+json", 0, NULL);
  env_str(&j.f, 0, "{\"s\":\"w\"}");
  env_str(&j.f, 0x80, "grpc-status: 0\r\n");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_string_equal(j.jr.s, "w");
  jdone(&j);

  for (i = 0; i < 2; i++) {
    jbegin(&j, g, &j_methods[0], 0);
    response(&j.f, "200", bad_grpc[i], 0, NULL);
    jfinish(&j, CONCH_CODE_INTERNAL);
    jdone(&j);
    jbegin(&j, w, &j_methods[0], 0);
    response(&j.f, "200", bad_web[i], 0, NULL);
    jfinish(&j, CONCH_CODE_INTERNAL);
    jdone(&j);
  }
  /* A message that is not JSON. */
  jbegin(&j, g, &j_methods[3], 0);
  response(&j.f, "200", "application/grpc+json", 0, NULL);
  env_str(&j.f, 0, "\x0a\x01g");
  jfinish(&j, CONCH_CODE_INTERNAL);
  jdone(&j);
  conch_client_free(g);
  conch_client_free(w);
}

/* The request side: content types, the JSON body, GET. */
static void test_json_requests(void **state) {
  static const struct {
    conch_protocol p;
    int m;
    const char *ctype;
  } cases[] = {
      {CONCH_PROTOCOL_CONNECT, 0, "application/json"},
      {CONCH_PROTOCOL_CONNECT, 3, "application/connect+json"},
      {CONCH_PROTOCOL_GRPC, 0, "application/grpc+json"},
      {CONCH_PROTOCOL_GRPC_WEB, 1, "application/grpc-web+json"},
  };
  Pbjsontest__Scalars sc = PBJSONTEST__SCALARS__INIT;
  nghttp2_nv nva[64];
  conch_buf store = CONCH_BUF_INIT;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  char v[512];
  jfixture j;
  size_t i;
  long n;
  (void)state;

  sc.s = "a b&c";
  sc.i32 = 1;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    conch_client *c = make_json(cases[i].p, 0, 0);
    const uint8_t *body_at;
    size_t blen;
    jbegin(&j, c, &j_methods[cases[i].m], 0);
    assert_int_equal(conch_call_send(j.f.call, &sc.base), 0);
    n = conch__proto_request_headers(j.f.call, nva, 64, &store);
    assert_true(n > 0);
    assert_string_equal(nv_get(nva, n, "content-type", v, sizeof(v)),
                        cases[i].ctype);
    body_at = conch__call_send_head(j.f.call);
    blen = conch__call_send_pending(j.f.call);
    if (!(cases[i].p == CONCH_PROTOCOL_CONNECT && cases[i].m == 0)) {
      assert_int_equal(body_at[0], 0); /* envelope flags */
      body_at += 5;
      blen -= 5;
    }
    assert_int_equal(blen, strlen("{\"i32\":1,\"s\":\"a b&c\"}"));
    assert_memory_equal(body_at, "{\"i32\":1,\"s\":\"a b&c\"}", blen);
    conch__buf_free(&store, conch_mem_default());
    conch_call_cancel(j.f.call);
    conch__client_run_done(c);
    jdone(&j);
    conch_client_free(c);
  }

  /* GET: uncompressed JSON percent-encoded, no base64=1. */
  {
    conch_client *c = make_json(CONCH_PROTOCOL_CONNECT, 0, 0);
    conch_client *cz = make_json(CONCH_PROTOCOL_CONNECT, 1, 0);
    opts.http_get = 1;
    memset(&j, 0, sizeof(j));
    conch_status_init(&j.jr.st);
    j.f.c = c;
    assert_int_equal(conch__call_new_detached(c, &j_methods[0], &opts, &j_push,
                                              &j.jr, &j.f.call),
                     0);
    assert_int_equal(conch_call_send(j.f.call, &sc.base), 0);
    n = conch__proto_request_headers(j.f.call, nva, 64, &store);
    assert_string_equal(nv_get(nva, n, ":method", v, sizeof(v)), "GET");
    assert_string_equal(nv_get(nva, n, ":path", v, sizeof(v)),
                        "/t.v1.T/U?connect=v1&encoding=json&message="
                        "%7B%22i32%22%3A1%2C%22s%22%3A%22a%20b%26c%22%7D");
    assert_null(nv_get(nva, n, "content-type", v, sizeof(v)));
    conch__buf_free(&store, conch_mem_default());
    conch_call_cancel(j.f.call);
    conch__client_run_done(c);
    jdone(&j);

    /* Compressed: base64=1 as for proto. */
    memset(&j, 0, sizeof(j));
    conch_status_init(&j.jr.st);
    j.f.c = cz;
    assert_int_equal(conch__call_new_detached(cz, &j_methods[0], &opts, &j_push,
                                              &j.jr, &j.f.call),
                     0);
    assert_int_equal(conch_call_send(j.f.call, &sc.base), 0);
    n = conch__proto_request_headers(j.f.call, nva, 64, &store);
    assert_non_null(strstr(nv_get(nva, n, ":path", v, sizeof(v)),
                           "?connect=v1&base64=1&compression=gzip"
                           "&encoding=json&message=H4sI"));
    conch__buf_free(&store, conch_mem_default());
    conch_call_cancel(j.f.call);
    conch__client_run_done(cz);
    jdone(&j);
    conch_client_free(c);
    conch_client_free(cz);
  }
}

/* google.protobuf.Any: well-known types without a resolver, others only
   with one; an unresolvable type is a clear internal error both ways. */
static void test_json_any(void **state) {
  conch_client *plain = make_json(CONCH_PROTOCOL_CONNECT, 0, 0);
  conch_client *res = make_json(CONCH_PROTOCOL_CONNECT, 0, 1);
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  Pbjsontest__Scalars sc = PBJSONTEST__SCALARS__INIT;
  uint8_t packed[64];
  ProtobufCMessage *m;
  jfixture j;
  (void)state;

  sc.i32 = 5;
  any.type_url = "type.googleapis.com/pbjsontest.Scalars";
  any.value.data = packed;
  any.value.len = protobuf_c_message_pack(&sc.base, packed);

  /* Without a resolver: refused, the call ends with internal. */
  jbegin(&j, plain, &j_methods[4], 0);
  assert_int_equal(conch_call_send(j.f.call, &any.base), CONCH_ERR_CODEC);
  assert_non_null(strstr(
      conch_status_message(&jfinish(&j, CONCH_CODE_INTERNAL)->st), "JSON"));
  jdone(&j);
  /* A well-known type needs none. */
  jbegin(&j, plain, &j_methods[4], 1);
  any.type_url = "type.googleapis.com/google.protobuf.Empty";
  any.value.len = 0;
  assert_int_equal(conch_call_send(j.f.call, &any.base), 0);
  response(&j.f, "200", "application/json", 0, NULL);
  body_str(&j.f, "{\"@type\":\"type.googleapis.com/google.protobuf."
                 "Duration\",\"value\":\"1.5s\"}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_int_equal(conch_call_recv(j.f.call, &m), 0);
  assert_string_equal(((Google__Protobuf__Any *)m)->type_url,
                      "type.googleapis.com/google.protobuf.Duration");
  conch_message_free(plain, m);
  jdone(&j);
  /* An unknown type in a response. */
  jbegin(&j, plain, &j_methods[4], 0);
  response(&j.f, "200", "application/json", 0, NULL);
  body_str(&j.f, "{\"@type\":\"type.googleapis.com/pbjsontest.Scalars\","
                 "\"i32\":5}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_INTERNAL);
  jdone(&j);

  /* With the resolver, both ways. */
  any.type_url = "type.googleapis.com/pbjsontest.Scalars";
  any.value.len = protobuf_c_message_pack(&sc.base, packed);
  jbegin(&j, res, &j_methods[4], 1);
  assert_int_equal(conch_call_send(j.f.call, &any.base), 0);
  {
    char sent[128];
    size_t sl = conch__call_send_pending(j.f.call);
    assert_true(sl < sizeof(sent));
    memcpy(sent, conch__call_send_head(j.f.call), sl);
    sent[sl] = '\0';
    assert_non_null(strstr(sent, "\"i32\":5"));
  }
  response(&j.f, "200", "application/json", 0, NULL);
  body_str(&j.f, "{\"@type\":\"type.googleapis.com/pbjsontest.Scalars\","
                 "\"i32\":6}");
  end(&j.f);
  jfinish(&j, CONCH_CODE_OK);
  assert_int_equal(conch_call_recv(j.f.call, &m), 0);
  {
    Google__Protobuf__Any *a = (Google__Protobuf__Any *)m;
    Pbjsontest__Scalars *got =
        pbjsontest__scalars__unpack(NULL, a->value.len, a->value.data);
    assert_non_null(got);
    assert_int_equal(got->i32, 6);
    pbjsontest__scalars__free_unpacked(got, NULL);
  }
  conch_message_free(res, m);
  jdone(&j);
  conch_client_free(plain);
  conch_client_free(res);
}

#else /* !CONCH_WITH_JSON */

#define SKIP_WITHOUT_JSON(name)                                                \
  static void name(void **state) {                                             \
    (void)state;                                                               \
    skip();                                                                    \
  }
SKIP_WITHOUT_JSON(test_json_connect_unary)
SKIP_WITHOUT_JSON(test_json_connect_stream)
SKIP_WITHOUT_JSON(test_json_grpc)
SKIP_WITHOUT_JSON(test_json_requests)
SKIP_WITHOUT_JSON(test_json_any)

#endif /* CONCH_WITH_JSON */

/* Whether the JSON codec is in the build, as the options and the version
   say; without it the client refuses it, and a JSON response to a proto
   request is the usual codec mismatch, while Connect's error JSON is
   still read. */
static void test_json_built_or_not(void **state) {
  conch_client_opts *o;
  fixture f;
  (void)state;

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_codec(o, CONCH_CODEC_JSON),
                   CONCH_WITH_JSON ? 0 : CONCH_ERR_UNSUPPORTED);
  assert_int_equal(conch_client_opts_set_codec(o, CONCH_CODEC_PROTO), 0);
  conch_client_opts_free(o);
  assert_int_equal((conch_version()->features & CONCH_FEATURE_JSON) != 0,
                   CONCH_WITH_JSON);
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "200", "application/json", 0, NULL);
  body_str(&f, "{}");
  end(&f);
  finish(&f, CONCH_CODE_INTERNAL);
  done(&f);
  begin(&f, CONCH_STREAM_UNARY, 0);
  response(&f, "404", "application/json", 0, NULL);
  body_str(&f, "{\"code\":\"not_found\",\"message\":\"no such thing\"}");
  end(&f);
  finish(&f, CONCH_CODE_NOT_FOUND);
  assert_string_equal(conch_status_message(&f.r.st), "no such thing");
  done(&f);
}

/* |s| compressed with compression |id| into |out| (cap bytes). */
static size_t zip(int id, const char *s, uint8_t *out, size_t cap) {
  conch_comp_opts co;
  conch_comps cs;
  conch_buf b = CONCH_BUF_INIT;
  size_t n;
  conch__comp_opts_defaults(&co);
  conch__comps_init(&cs, conch_mem_default());
  assert_int_equal(conch__comp_compress(&cs, &co, id, (const uint8_t *)s,
                                        strlen(s), &b),
                   0);
  n = conch__buf_size(&b);
  assert_true(n <= cap);
  memcpy(out, conch__buf_head(&b), n);
  conch__buf_free(&b, conch_mem_default());
  conch__comps_clear(&cs);
  return n;
}

/* The accepted list of test_compressions: two the build has. */
#if CONCH_WITH_ZSTD && CONCH_WITH_BROTLI
#define ACCEPT_1 "zstd"
#define ACCEPT_2 "br"
#else
#define ACCEPT_1 "deflate"
#define ACCEPT_2 "gzip"
#endif
#define ACCEPT_IN ACCEPT_1 ", " ACCEPT_2
#define ACCEPT_OUT ACCEPT_1 "," ACCEPT_2

/* Every built-in compression through calls of each protocol: responses
   decoded from the declared encoding, a compressed end-stream, corrupt
   data internal (naming the compression), the decoded size against the
   receive limit; and the request headers that name and advertise it. */
static void test_compressions(void **state) {
  static const struct {
    int id;
    const char *name;
  } comps[] = {{CONCH_COMPRESSION_GZIP, "gzip"},
               {CONCH_COMPRESSION_BR, "br"},
               {CONCH_COMPRESSION_ZSTD, "zstd"},
               {CONCH_COMPRESSION_DEFLATE, "deflate"},
               {CONCH_COMPRESSION_SNAPPY, "snappy"}};
  static const char text[] = "hello, compressed world";
  nghttp2_nv nva[64];
  conch_buf store = CONCH_BUF_INIT;
  char v[512], want[64];
  uint8_t z[256];
  size_t i, n;
  fixture f;
  long nh;
  (void)state;

  for (i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
    const char *name = comps[i].name;
    conch_client_opts *o;
    conch_client *c, *g, *small;
    conch_comp_opts co;

    conch__comp_opts_defaults(&co);
    if (!conch__comp_valid(&co, comps[i].id)) {
      continue; /* not in this build (unit/test_compress covers that) */
    }

    n = zip(comps[i].id, text, z, sizeof(z));
    /* Connect unary: the body in content-encoding. */
    begin(&f, CONCH_STREAM_UNARY, 0);
    response(&f, "200", "application/proto", 0, "content-encoding", name,
             NULL);
    body(&f, z, n);
    end(&f);
    finish(&f, CONCH_CODE_OK);
    assert_int_equal(f.r.last_len, strlen(text));
    assert_memory_equal(f.r.last, text, strlen(text));
    done(&f);
    /* Connect stream: flagged envelopes and a compressed end-stream. */
    begin(&f, CONCH_STREAM_SERVER, 0);
    response(&f, "200", STREAM_CT, 0, "connect-content-encoding", name, NULL);
    env(&f, 1, z, n);
    env(&f, 0, text, strlen(text)); /* any message may go uncompressed */
    {
      uint8_t ze[64];
      size_t ne = zip(comps[i].id, "{}", ze, sizeof(ze));
      env(&f, 3, ze, ne);
    }
    end(&f);
    finish(&f, CONCH_CODE_OK);
    assert_int_equal(f.r.messages, 2);
    done(&f);
    /* gRPC. */
    begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
    response(&f, "200", "application/grpc", 0, "grpc-encoding", name, NULL);
    env(&f, 1, z, n);
    trailers(&f, "grpc-status", "0", NULL);
    finish(&f, CONCH_CODE_OK);
    assert_int_equal(f.r.last_len, strlen(text));
    assert_memory_equal(f.r.last, text, strlen(text));
    done(&f);
    /* Not what it claims to be. */
    begin_on(&f, grpc_client, CONCH_STREAM_SERVER, 0);
    response(&f, "200", "application/grpc", 0, "grpc-encoding", name, NULL);
    env(&f, 1, "\x01not compressed at all", 22);
    finish(&f, CONCH_CODE_INTERNAL);
    snprintf(want, sizeof(want), "invalid %s data", name);
    assert_non_null(strstr(conch_status_message(&f.r.st), want));
    done(&f);

    /* The receive limit is on the decoded size: 23 bytes decoded pass a
       limit of 23 and not one of 22, whatever the wire size. */
    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_recv_limit(o, strlen(text) - 1), 0);
    assert_int_equal(conch_client_new(&small, "http://127.0.0.1:1", o), 0);
    conch_client_opts_free(o);
    begin_on(&f, small, CONCH_STREAM_SERVER, 0);
    response(&f, "200", STREAM_CT, 0, "connect-content-encoding", name, NULL);
    env(&f, 1, z, n);
    finish(&f, CONCH_CODE_RESOURCE_EXHAUSTED);
    done(&f);
    conch_client_free(small);

    /* Request headers: the send compression named and advertised first,
       then the accepted list. */
    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_send_compression_name(o, name), 0);
    assert_int_equal(conch_client_opts_set_accept_compression(o, ACCEPT_IN), 0);
    assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", o), 0);
    assert_int_equal(conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC),
                     0);
    assert_int_equal(conch_client_new(&g, "http://127.0.0.1:1", o), 0);
    conch_client_opts_free(o);
    if (strcmp(name, ACCEPT_1) == 0 || strcmp(name, ACCEPT_2) == 0) {
      snprintf(want, sizeof(want), "%s", ACCEPT_OUT); /* listed already */
    } else {
      snprintf(want, sizeof(want), "%s,%s", name, ACCEPT_OUT);
    }
    /* Connect unary: the body compressed, content-encoding. */
    begin_on(&f, c, CONCH_STREAM_UNARY, 0);
    assert_int_equal(conch__proto_frame_message(f.call, (const uint8_t *)text,
                                                strlen(text)),
                     0);
    nh = conch__proto_request_headers(f.call, nva, 64, &store);
    assert_true(nh > 0);
    assert_string_equal(nv_get(nva, nh, "content-encoding", v, sizeof(v)),
                        name);
    assert_string_equal(nv_get(nva, nh, "accept-encoding", v, sizeof(v)),
                        want);
    conch__buf_free(&store, conch_mem_default());
    conch_call_cancel(f.call);
    conch__client_run_done(c);
    done(&f);
    /* Connect stream. */
    begin_on(&f, c, CONCH_STREAM_BIDI, 0);
    nh = conch__proto_request_headers(f.call, nva, 64, &store);
    assert_string_equal(
        nv_get(nva, nh, "connect-content-encoding", v, sizeof(v)), name);
    assert_string_equal(
        nv_get(nva, nh, "connect-accept-encoding", v, sizeof(v)), want);
    conch__buf_free(&store, conch_mem_default());
    conch_call_cancel(f.call);
    conch__client_run_done(c);
    done(&f);
    /* gRPC; a per-call identity overrides the client's compression. */
    begin_on(&f, g, CONCH_STREAM_BIDI, 0);
    nh = conch__proto_request_headers(f.call, nva, 64, &store);
    assert_string_equal(nv_get(nva, nh, "grpc-encoding", v, sizeof(v)), name);
    assert_string_equal(nv_get(nva, nh, "grpc-accept-encoding", v, sizeof(v)),
                        want);
    conch__buf_free(&store, conch_mem_default());
    conch_call_cancel(f.call);
    conch__client_run_done(g);
    done(&f);
    {
      conch_call_opts opts = CONCH_CALL_OPTS_INIT;
      conch_call *call;
      opts.send_compression = CONCH_COMPRESSION_IDENTITY;
      memset(&f, 0, sizeof(f));
      f.m.path = "/t.v1.T/M";
      f.m.kind = CONCH_STREAM_BIDI;
      assert_int_equal(
          conch__call_new_detached(g, &f.m, &opts, NULL, NULL, &call), 0);
      nh = conch__proto_request_headers(call, nva, 64, &store);
      assert_null(nv_get(nva, nh, "grpc-encoding", v, sizeof(v)));
      assert_string_equal(nv_get(nva, nh, "grpc-accept-encoding", v, sizeof(v)),
                          ACCEPT_OUT);
      conch__buf_free(&store, conch_mem_default());
      conch_call_free(call);
      conch__client_run_done(g);
      /* An id nothing is registered under. */
      opts.send_compression = CONCH_COMPRESSION_CUSTOM_FIRST;
      assert_int_equal(
          conch__call_new_detached(g, &f.m, &opts, NULL, NULL, &call),
          CONCH_ERR_INVALID);
    }
    conch_client_free(c);
    conch_client_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_ok_and_empty),
      cmocka_unit_test(test_unary_gzip_body),
      cmocka_unit_test(test_compressions),
      cmocka_unit_test(test_unary_unexpected),
      cmocka_unit_test(test_unary_errors),
      cmocka_unit_test(test_informational_skipped),
      cmocka_unit_test(test_unary_limit),
      cmocka_unit_test(test_stream_ok_empty_and_metadata),
      cmocka_unit_test(test_stream_errors),
      cmocka_unit_test(test_stream_unexpected),
      cmocka_unit_test(test_client_stream_cardinality),
      cmocka_unit_test(test_resets),
      cmocka_unit_test(test_cancel_is_final),
      cmocka_unit_test(test_bad_request_metadata),
      cmocka_unit_test(test_connect_get),
      cmocka_unit_test(test_grpc_basic),
      cmocka_unit_test(test_grpc_trailers_only),
      cmocka_unit_test(test_request_header_templates),
      cmocka_unit_test(test_call_reuse),
      cmocka_unit_test(test_message_size_and_auto_free),
      cmocka_unit_test(test_grpc_unexpected),
      cmocka_unit_test(test_grpc_status_details),
      cmocka_unit_test(test_grpc_web_trailers),
      cmocka_unit_test(test_grpc_web_unexpected),
      cmocka_unit_test(test_json_connect_unary),
      cmocka_unit_test(test_json_connect_stream),
      cmocka_unit_test(test_json_grpc),
      cmocka_unit_test(test_json_requests),
      cmocka_unit_test(test_json_any),
      cmocka_unit_test(test_json_built_or_not),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
