/* Calls whose types are built at run time (conch/dynamic.h), as `conch
   call` and embedders make them, against the server core: the conchtest
   service from a FileDescriptorSet protoc writes at build time (DYN_FDSET),
   and gRPC health from the files the server itself serves for reflection
   (conch_server_files()).  JSON in, a dynamic message on the wire over
   Connect, gRPC and gRPC-Web, JSON out: unary and server streaming. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/dynamic.h>

#include "svc.h"

typedef struct ctx {
  fixture fx;
  conch_fileset *fs;
  conch_descpool *pool;
  conch_dynamic *dyn;
  conch_dynamic *sdyn; /* over the server's own files */
} ctx;

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  uint8_t *b;
  long len;
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  fseek(f, 0, SEEK_SET);
  b = malloc((size_t)len);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static int setup(void **state) {
  ctx *cx = calloc(1, sizeof(*cx));
  uint8_t *set;
  size_t n;
  assert_non_null(cx);
  fx_start(&cx->fx, NULL, 0);
  fx_pause(&cx->fx);
  assert_int_equal(conch_server_add_reflection(cx->fx.s), 0);
  assert_int_equal(conch_server_add_health(cx->fx.s), 0);
  fx_resume(&cx->fx);
  set = read_all(DYN_FDSET, &n);
  assert_int_equal(conch_fileset_new(&cx->fs, NULL), 0);
  assert_int_equal(conch_fileset_add_set(cx->fs, set, n), 0);
  free(set);
  assert_int_equal(conch_descpool_new(&cx->pool, NULL), 0);
  assert_int_equal(conch_fileset_to_pool(cx->fs, cx->pool), 0);
  assert_int_equal(conch_dynamic_new(&cx->dyn, cx->pool, NULL), 0);
  assert_non_null(conch_server_files(cx->fx.s));
  assert_int_equal(
      conch_dynamic_new(&cx->sdyn, conch_server_files(cx->fx.s), NULL), 0);
  *state = cx;
  return 0;
}

static int teardown(void **state) {
  ctx *cx = *state;
  conch_dynamic_free(cx->sdyn);
  conch_dynamic_free(cx->dyn);
  conch_descpool_free(cx->pool);
  conch_fileset_free(cx->fs);
  fx_stop(&cx->fx);
  free(cx);
  return 0;
}

static const struct {
  conch_protocol proto;
  const char *name;
} variants[] = {{CONCH_PROTOCOL_CONNECT, "connect"},
                {CONCH_PROTOCOL_GRPC, "grpc"},
                {CONCH_PROTOCOL_GRPC_WEB, "grpc-web"}};

static conch_client *client(const ctx *cx, conch_protocol p) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, p), 0);
  assert_int_equal(conch_client_new(&c, cx->fx.url, o), 0);
  conch_client_opts_free(o);
  return c;
}

/* JSON -> a request message of |m|'s input type. */
static ProtobufCMessage *request(conch_dynamic *dyn, const conch_method *m,
                                 const char *json) {
  uint8_t *b = NULL;
  size_t n = 0;
  conch_status st;
  ProtobufCMessage *req;
  conch_status_init(&st);
  if (conch_dynamic_json_to_pb(dyn, m->input, json, strlen(json), &b, &n,
                               &st) != 0) {
    fail_msg("%s: %s", json, conch_status_message(&st));
  }
  req = protobuf_c_message_unpack(m->input, NULL, n, b);
  assert_non_null(req);
  conch_dynamic_buf_free(dyn, b);
  conch_status_clear(&st);
  return req;
}

/* A response message -> JSON (malloc'd). */
static char *response(conch_dynamic *dyn, const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg), jl = 0;
  uint8_t *b = malloc(n + 1);
  char *j = NULL, *out;
  conch_status st;
  conch_status_init(&st);
  assert_int_equal(protobuf_c_message_pack(msg, b), n);
  if (conch_dynamic_pb_to_json(dyn, msg->descriptor, b, n, &j, &jl, &st) != 0) {
    fail_msg("to JSON: %s", conch_status_message(&st));
  }
  out = strdup(j);
  conch_dynamic_buf_free(dyn, j);
  free(b);
  conch_status_clear(&st);
  return out;
}

static void test_unary(void **state) {
  ctx *cx = *state;
  const conch_method *m = NULL;
  size_t v;
  assert_int_equal(
      conch_dynamic_method(cx->dyn, "conchtest.v1.TestService/Unary", &m), 0);
  for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
    conch_client *c = client(cx, variants[v].proto);
    ProtobufCMessage *req = request(cx->dyn, m, "{\"payload\":\"aGk=\"}");
    ProtobufCMessage *resp = NULL;
    conch_status st;
    char *j;
    conch_status_init(&st);
    if (conch_unary_sync(c, m, NULL, req, &resp, &st, NULL, NULL) != 0) {
      fail_msg("%s: %s", variants[v].name, conch_status_message(&st));
    }
    assert_ptr_equal(resp->descriptor, m->output);
    j = response(cx->dyn, resp);
    if (strstr(j, "\"payload\":\"aGk=\"") == NULL) {
      fail_msg("%s: %s", variants[v].name, j);
    }
    free(j);
    conch_message_free(c, resp);
    protobuf_c_message_free_unpacked(req, NULL);
    conch_status_clear(&st);
    conch_client_free(c);
  }
}

static void test_server_stream(void **state) {
  ctx *cx = *state;
  const conch_method *m = NULL;
  size_t v;
  assert_int_equal(conch_dynamic_method(
                       cx->dyn, "conchtest.v1.TestService.ServerStream", &m),
                   0);
  assert_int_equal(m->kind, CONCH_STREAM_SERVER);
  for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
    conch_client *c = client(cx, variants[v].proto);
    ProtobufCMessage *req =
        request(cx->dyn, m, "{\"payload\":\"eA==\",\"responseCount\":3}");
    conch_call *call = NULL;
    ProtobufCMessage *msg;
    int rv, n = 0;
    assert_int_equal(conch_call_start(c, m, NULL, NULL, NULL, &call), 0);
    assert_int_equal(conch_call_send_sync(call, req), 0);
    while ((rv = conch_call_recv_sync(call, &msg)) == 0) {
      char *j = response(cx->dyn, msg);
      char want[64];
      if (n == 0) {
        snprintf(want, sizeof(want), "{\"payload\":\"eA==\"");
      } else {
        snprintf(want, sizeof(want), "\"index\":%d", n);
      }
      if (strstr(j, want) == NULL) {
        fail_msg("%s: response %d: %s", variants[v].name, n, j);
      }
      free(j);
      conch_message_free(c, msg);
      n++;
    }
    if (rv != CONCH_ERR_EOF) {
      fail_msg("%s: %s", variants[v].name,
               conch_status_message(conch_call_status(call)));
    }
    assert_int_equal(n, 3);
    conch_call_free(call);
    protobuf_c_message_free_unpacked(req, NULL);
    conch_client_free(c);
  }
}

/* Health, with the schema from the server's own reflection files. */
static void test_health_from_server_files(void **state) {
  ctx *cx = *state;
  const conch_method *m = NULL;
  conch_client *c = client(cx, CONCH_PROTOCOL_GRPC);
  ProtobufCMessage *req, *resp = NULL;
  conch_status st;
  char *j;

  conch_status_init(&st);
  if (conch_dynamic_method(cx->sdyn, "grpc.health.v1.Health/Check", &m) != 0) {
    fail_msg("%s", conch_dynamic_error(cx->sdyn));
  }
  req = request(cx->sdyn, m, "{\"service\":\"\"}");
  if (conch_unary_sync(c, m, NULL, req, &resp, &st, NULL, NULL) != 0) {
    fail_msg("%s", conch_status_message(&st));
  }
  j = response(cx->sdyn, resp);
  assert_string_equal(j, "{\"status\":\"SERVING\"}");
  free(j);
  conch_message_free(c, resp);
  protobuf_c_message_free_unpacked(req, NULL);
  conch_status_clear(&st);
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_server_stream),
      cmocka_unit_test(test_health_from_server_files),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
