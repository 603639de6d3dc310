/* conch/reflect.h against a grpc-js server (@grpc/grpc-js with
   @grpc/reflection, tests/cli/grpcjs_server.mjs) over gRPC on h2c:
   - serving only v1alpha, with a v1 that answers unimplemented and counts
     its streams (--reflection v1alpha-counted): a conch_reflect asks v1
     once, falls back to v1alpha and keeps to it for every later request
     (list, a symbol, another symbol, a file); a new conch_reflect asks v1
     again; the files it fetched (protobufjs' descriptors, with relative
     type names) build with conch/dynamic.h and carry a call;
   - the same with each stream ended by the server after one answer: each
     request on a new stream, v1alpha's;
   - serving v1 and v1alpha: v1, and no stream of the counted kind.
   Exits 77 (skipped) when tests/node_modules has not the peers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <conch/descriptor.h>
#include <conch/dynamic.h>
#include <conch/reflect.h>

#include "peer.h"
#include "svc.h"

static conch_client *grpc_client(const conch_peer *p) {
  conch_client_opts *o;
  conch_client *c;
  char url[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", p->port);
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, CONCH_PROTOCOL_GRPC), 0);
  assert_int_equal(conch_client_new(&c, url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static void start(conch_peer *p, const char *mode) {
  const char *const args[] = {PROTO_DIR, "--reflection", mode, NULL};
  assert_int_equal(conch_peer_start(p, GRPCJS_SERVER, args), 0);
}

/* The v1 streams the peer has seen: the index of a Unary's response. */
static unsigned v1_streams(conch_client *c) {
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  conch_status st;
  unsigned n;
  conch_status_init(&st);
  if (conch_unary_sync(c, &m_unary, NULL, &req.base, &resp, &st, NULL,
                       NULL) != 0) {
    fail_msg("Unary: %s", conch_status_message(&st));
  }
  n = ((Conchtest__V1__Response *)resp)->index;
  conch_message_free(c, resp);
  conch_status_clear(&st);
  return n;
}

static int has_service(const conch_reflect *r, const char *name) {
  size_t i;
  for (i = 0; i < conch_reflect_n_services(r); i++) {
    if (strcmp(conch_reflect_service(r, i), name) == 0) {
      return 1;
    }
  }
  return 0;
}

static void test_v1alpha_only(void **state) {
  conch_peer p;
  conch_client *c;
  conch_reflect *r = NULL, *r2 = NULL;
  conch_fileset *fs = NULL;
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  const conch_method *m = NULL;
  conch_status st;
  (void)state;

  start(&p, "v1alpha-counted");
  c = grpc_client(&p);
  assert_int_equal(v1_streams(c), 0);
  conch_status_init(&st);
  assert_int_equal(conch_reflect_new(&r, c, NULL), 0);
  assert_int_equal(conch_reflect_list(r, &st), 0);
  assert_int_equal(conch_reflect_version(r), 0);
  assert_true(has_service(r, "conchtest.v1.TestService"));
  assert_int_equal(v1_streams(c), 1);

  /* Later requests go to v1alpha at once. */
  assert_int_equal(conch_fileset_new(&fs, NULL), 0);
  assert_int_equal(
      conch_reflect_symbol(r, "conchtest.v1.TestService", fs, &st), 0);
  assert_true(conch_fileset_n_files(fs) >= 1);
  assert_int_equal(conch_reflect_symbol(r, "no.Such", fs, &st),
                   CONCH_ERR_RPC);
  assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
  assert_int_equal(conch_reflect_symbol(r, ".conchtest.v1.Request", fs, &st),
                   0);
  assert_int_equal(conch_reflect_file(r, conch_fileset_file_at(fs, 0)->name,
                                      fs, &st),
                   0);
  assert_int_equal(conch_reflect_list(r, &st), 0);
  assert_int_equal(conch_reflect_version(r), 0);
  assert_int_equal(v1_streams(c), 1);

  /* protobufjs' descriptors (relative type names) build, and call. */
  assert_int_equal(conch_descpool_new(&pool, NULL), 0);
  assert_int_equal(conch_fileset_to_pool(fs, pool), 0);
  assert_int_equal(conch_dynamic_new(&dyn, pool, NULL), 0);
  if (conch_dynamic_method(dyn, "conchtest.v1.TestService/Unary", &m) != 0) {
    fail_msg("%s", conch_dynamic_error(dyn));
  }
  {
    static const char in[] = "{\"payload\":\"aGk=\"}";
    uint8_t *pb = NULL;
    size_t pl = 0, jl = 0;
    char *out = NULL;
    ProtobufCMessage *req = NULL, *resp = NULL;
    assert_int_equal(conch_dynamic_json_to_pb(dyn, m->input, in,
                                              sizeof(in) - 1, &pb, &pl, &st),
                     0);
    req = protobuf_c_message_unpack(m->input, NULL, pl, pb);
    assert_non_null(req);
    if (conch_unary_sync(c, m, NULL, req, &resp, &st, NULL, NULL) != 0) {
      fail_msg("dynamic Unary: %s", conch_status_message(&st));
    }
    conch_dynamic_buf_free(dyn, pb);
    pb = NULL;
    {
      size_t n = protobuf_c_message_get_packed_size(resp);
      uint8_t *buf = malloc(n > 0 ? n : 1);
      assert_non_null(buf);
      protobuf_c_message_pack(resp, buf);
      assert_int_equal(conch_dynamic_pb_to_json(dyn, m->output, buf, n, &out,
                                                &jl, &st),
                       0);
      free(buf);
    }
    /* index 1: the one v1 stream so far. */
    assert_string_equal(out, "{\"payload\":\"aGk=\",\"index\":1}");
    conch_dynamic_buf_free(dyn, out);
    protobuf_c_message_free_unpacked(req, NULL);
    conch_message_free(c, resp);
  }

  /* The choice is per conch_reflect: a new one asks v1 again. */
  assert_int_equal(conch_reflect_new(&r2, c, NULL), 0);
  assert_int_equal(conch_reflect_version(r2), -1);
  assert_int_equal(conch_reflect_list(r2, &st), 0);
  assert_int_equal(conch_reflect_version(r2), 0);
  assert_int_equal(v1_streams(c), 2);

  conch_status_clear(&st);
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
  conch_fileset_free(fs);
  conch_reflect_free(r2);
  conch_reflect_free(r);
  conch_client_free(c);
  conch_peer_stop(&p);
}

/* A server that ends each stream after its answer: the next request goes
   on a new stream, to v1alpha at once. */
static void test_oneshot(void **state) {
  conch_peer p;
  conch_client *c;
  conch_reflect *r = NULL;
  conch_fileset *fs = NULL;
  conch_status st;
  (void)state;

  start(&p, "v1alpha-oneshot");
  c = grpc_client(&p);
  conch_status_init(&st);
  assert_int_equal(conch_reflect_new(&r, c, NULL), 0);
  assert_int_equal(conch_reflect_list(r, &st), 0);
  assert_int_equal(conch_reflect_version(r), 0);
  assert_int_equal(conch_fileset_new(&fs, NULL), 0);
  if (conch_reflect_symbol(r, "conchtest.v1.TestService", fs, &st) != 0) {
    fail_msg("symbol after the stream ended: %s", conch_status_message(&st));
  }
  assert_int_equal(conch_reflect_symbol(r, "conchtest.v1.Response", fs, &st),
                   0);
  assert_int_equal(conch_reflect_list(r, &st), 0);
  assert_true(has_service(r, "conchtest.v1.TestService"));
  assert_int_equal(conch_reflect_version(r), 0);
  assert_int_equal(v1_streams(c), 1);
  conch_status_clear(&st);
  conch_fileset_free(fs);
  conch_reflect_free(r);
  conch_client_free(c);
  conch_peer_stop(&p);
}

static void test_both(void **state) {
  conch_peer p;
  conch_client *c;
  conch_reflect *r = NULL;
  conch_status st;
  (void)state;

  start(&p, "both");
  c = grpc_client(&p);
  conch_status_init(&st);
  assert_int_equal(conch_reflect_new(&r, c, NULL), 0);
  assert_int_equal(conch_reflect_list(r, &st), 0);
  assert_int_equal(conch_reflect_version(r), 1);
  assert_true(has_service(r, "conchtest.v1.TestService"));
  conch_status_clear(&st);
  conch_reflect_free(r);
  conch_client_free(c);
  conch_peer_stop(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_v1alpha_only),
      cmocka_unit_test(test_oneshot),
      cmocka_unit_test(test_both),
  };
  static const char *const need[] = {"@grpc/grpc-js", "@grpc/proto-loader",
                                     "@grpc/reflection", NULL};
  if (!conch_peer_have_modules(NODE_MODULES, need)) {
    return 77;
  }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
