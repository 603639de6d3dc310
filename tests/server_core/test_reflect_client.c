/* conch/reflect.h, the reflection client, against the server core's
   reflection (conch_server_add_reflection()) over Connect, gRPC and
   gRPC-Web: list, the file of a symbol with its imports (asked for by
   name when the answer lacks them), a file by name, not_found answers
   that leave the stream usable, the headers of the options on every
   stream, and a server without reflection (unimplemented from v1 and
   v1alpha); the files it fetched build with conch/dynamic.h and carry a
   call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/descriptor.h>
#include <conch/dynamic.h>
#include <conch/reflect.h>

#include "process/process.conch.h"
#include "svc.h"

typedef struct variant {
  conch_protocol proto;
  conch_codec codec;
} variant;

static const variant variants[] = {
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO},
};

static conch_client *client_for(const fixture *fx, const variant *v) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

static int has(const conch_fileset *fs, const char *name) {
  size_t i;
  for (i = 0; i < conch_fileset_n_files(fs); i++) {
    if (strcmp(conch_fileset_file_at(fs, i)->name, name) == 0) {
      return 1;
    }
  }
  return 0;
}

static void test_reflect(void **state) {
  fixture fx;
  size_t v;
  (void)state;

  memset(&fx, 0, sizeof(fx));
  fx_start(&fx, NULL, 0);
  fx_pause(&fx);
  assert_int_equal(conch_server_add_reflection(fx.s), 0);
  assert_int_equal(
      conch_server_add_file(fx.s, &conch_file_process_2fprocess_2eproto), 0);
  fx_resume(&fx);

  for (v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
    conch_client *c = client_for(&fx, &variants[v]);
    conch_call_opts co = CONCH_CALL_OPTS_INIT;
    conch_metadata *md = NULL;
    conch_reflect *r = NULL;
    conch_fileset *fs = NULL;
    conch_descpool *pool = NULL;
    conch_dynamic *dyn = NULL;
    const conch_method *m = NULL;
    conch_status st;
    size_t i;
    int found = 0;

    assert_int_equal(conch_metadata_new(&md, NULL), 0);
    assert_int_equal(conch_metadata_add_str(md, "x-echo", "e"), 0);
    co.headers = md;
    co.timeout_ms = 60000;
    assert_int_equal(conch_reflect_new(&r, c, &co), 0);
    assert_int_equal(conch_reflect_version(r), -1);
    conch_status_init(&st);
    assert_int_equal(conch_reflect_list(r, &st), 0);
    assert_int_equal(conch_reflect_version(r), 1);
    for (i = 0; i < conch_reflect_n_services(r); i++) {
      found += strcmp(conch_reflect_service(r, i), "conchtest.v1.TestService") ==
               0; /* the services served, not the files */
    }
    assert_int_equal(found, 1);
    assert_null(conch_reflect_service(r, conch_reflect_n_services(r)));

    assert_int_equal(conch_fileset_new(&fs, NULL), 0);
    /* Unknown: not_found, and the stream goes on. */
    assert_int_equal(conch_reflect_symbol(r, "no.Such", fs, &st),
                     CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
    assert_int_equal(conch_reflect_file(r, "no/such.proto", fs, &st),
                     CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
    assert_int_equal(conch_fileset_n_files(fs), 0);
    /* A method's symbol: its file, with the imports. */
    assert_int_equal(conch_reflect_symbol(r, ".process.Process.Start", fs, &st),
                     0);
    assert_true(has(fs, "process/process.proto"));
    assert_int_equal(conch_reflect_file(r, "process/process.proto", fs, &st),
                     0); /* again: nothing new */
    assert_int_equal(conch_descpool_new(&pool, NULL), 0);
    assert_int_equal(conch_fileset_to_pool(fs, pool), 0);
    assert_int_equal(conch_dynamic_new(&dyn, pool, NULL), 0);
    assert_int_equal(conch_dynamic_method(dyn, "process.Process/Start", &m), 0);
    assert_int_equal(m->kind, CONCH_STREAM_SERVER);
    /* The reflection file itself, by name: its own service. */
    assert_int_equal(conch_reflect_file(r, "grpc/reflection/v1/reflection.proto",
                                        fs, &st),
                     0);
    assert_true(has(fs, "grpc/reflection/v1/reflection.proto"));
    conch_status_clear(&st);

    assert_int_equal(conch_reflect_list(NULL, NULL), CONCH_ERR_INVALID);
    assert_int_equal(conch_reflect_symbol(r, NULL, fs, NULL),
                     CONCH_ERR_INVALID);
    assert_int_equal(conch_reflect_symbol(r, "x", NULL, NULL),
                     CONCH_ERR_INVALID);
    conch_dynamic_free(dyn);
    conch_descpool_free(pool);
    conch_fileset_free(fs);
    conch_reflect_free(r);
    conch_metadata_free(md);
    conch_client_free(c);
  }
  fx_stop(&fx);
}

/* A server without reflection: v1, then v1alpha, both unimplemented. */
static void test_no_reflection(void **state) {
  fixture fx;
  conch_client *c;
  conch_reflect *r = NULL;
  conch_fileset *fs = NULL;
  conch_status st;
  (void)state;

  memset(&fx, 0, sizeof(fx));
  fx_start(&fx, NULL, 0);
  c = client_for(&fx, &variants[2]);
  assert_int_equal(conch_reflect_new(&r, c, NULL), 0);
  conch_status_init(&st);
  assert_int_equal(conch_reflect_list(r, &st), CONCH_ERR_RPC);
  assert_int_equal(st.code, CONCH_CODE_UNIMPLEMENTED);
  assert_int_equal(conch_reflect_version(r), -1);
  assert_int_equal(conch_fileset_new(&fs, NULL), 0);
  assert_int_equal(conch_reflect_symbol(r, "process.Process", fs, &st),
                   CONCH_ERR_RPC);
  assert_int_equal(st.code, CONCH_CODE_UNIMPLEMENTED);
  conch_status_clear(&st);
  assert_int_equal(conch_reflect_new(NULL, c, NULL), CONCH_ERR_INVALID);
  {
    conch_reflect *r2 = (conch_reflect *)(void *)&st;
    assert_int_equal(conch_reflect_new(&r2, NULL, NULL), CONCH_ERR_INVALID);
    assert_null(r2);
  }
  conch_reflect_free(r);
  conch_reflect_free(NULL);
  conch_fileset_free(fs);
  conch_client_free(c);
  fx_stop(&fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reflect),
      cmocka_unit_test(test_no_reflection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
