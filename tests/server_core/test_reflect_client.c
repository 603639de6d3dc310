/* conch/reflect.h, the reflection client, against the server core's
   reflection (conch_server_add_reflection()) over Connect, gRPC and
   gRPC-Web: list, the file of a symbol with its imports (asked for by
   name when the answer lacks them; one nobody has left out), a file by name, not_found answers
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

/* ---- Imports the answer lacks ------------------------------------------ */

typedef struct w {
  uint8_t b[512];
  size_t n;
} w;

static void w_varint(w *o, uint64_t v) {
  do {
    uint8_t c = (uint8_t)(v & 0x7f);
    v >>= 7;
    o->b[o->n++] = (uint8_t)(c | (v != 0 ? 0x80 : 0));
  } while (v != 0);
}
static void w_int(w *o, uint32_t num, uint64_t v) {
  w_varint(o, (uint64_t)num << 3);
  w_varint(o, v);
}
static void w_bytes(w *o, uint32_t num, const void *p, size_t n) {
  w_varint(o, (uint64_t)num << 3 | 2);
  w_varint(o, n);
  memcpy(o->b + o->n, p, n);
  o->n += n;
}
static void w_str(w *o, uint32_t num, const char *s) {
  w_bytes(o, num, s, strlen(s));
}
static void w_sub(w *o, uint32_t num, const w *sub) {
  w_bytes(o, num, sub->b, sub->n);
}

/* b.proto imports a.proto (and missing.proto, which nobody has), but is
   registered without them linked: the server answers for t.S with b.proto
   alone, and the client asks for a.proto by name. */
static void test_imports(void **state) {
  static const conch_file_descriptor *const none[] = {NULL};
  static w fa, fb;
  w ma = {{0}, 0}, mb = {{0}, 0}, fld = {{0}, 0}, svc = {{0}, 0},
    mth = {{0}, 0};
  conch_file_descriptor da = {"a.proto", NULL, 0, none},
                        db = {"b.proto", NULL, 0, none};
  fixture fx;
  conch_client *c;
  conch_reflect *r = NULL;
  conch_fileset *fs = NULL;
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  const conch_method *m = NULL;
  conch_status st;
  (void)state;

  memset(&fa, 0, sizeof(fa));
  memset(&fb, 0, sizeof(fb));
  w_str(&ma, 1, "A");
  w_str(&fa, 1, "a.proto");
  w_str(&fa, 2, "t");
  w_sub(&fa, 4, &ma);
  w_str(&fa, 12, "proto3");
  w_str(&fld, 1, "a");
  w_int(&fld, 3, 1);
  w_int(&fld, 4, 1);
  w_int(&fld, 5, 11);
  w_str(&fld, 6, ".t.A");
  w_str(&mb, 1, "B");
  w_sub(&mb, 2, &fld);
  w_str(&mth, 1, "M");
  w_str(&mth, 2, ".t.B");
  w_str(&mth, 3, ".t.B");
  w_str(&svc, 1, "S");
  w_sub(&svc, 2, &mth);
  w_str(&fb, 1, "b.proto");
  w_str(&fb, 2, "t");
  w_str(&fb, 3, "a.proto");
  w_str(&fb, 3, "missing.proto");
  w_sub(&fb, 4, &mb);
  w_sub(&fb, 6, &svc);
  w_str(&fb, 12, "proto3");
  da.data = fa.b;
  da.len = fa.n;
  db.data = fb.b;
  db.len = fb.n;

  memset(&fx, 0, sizeof(fx));
  fx_start(&fx, NULL, 0);
  fx_pause(&fx);
  assert_int_equal(conch_server_add_reflection(fx.s), 0);
  assert_int_equal(conch_server_add_file(fx.s, &da), 0);
  assert_int_equal(conch_server_add_file(fx.s, &db), 0);
  fx_resume(&fx);

  c = client_for(&fx, &variants[0]);
  assert_int_equal(conch_reflect_new(&r, c, NULL), 0);
  assert_int_equal(conch_fileset_new(&fs, NULL), 0);
  conch_status_init(&st);
  assert_int_equal(conch_reflect_symbol(r, "t.S", fs, &st), 0);
  assert_int_equal(conch_fileset_n_files(fs), 2);
  assert_true(has(fs, "b.proto") && has(fs, "a.proto"));
  /* Asked once: the one nobody has is remembered. */
  assert_int_equal(conch_reflect_symbol(r, "t.B", fs, &st), 0);
  assert_int_equal(conch_fileset_n_files(fs), 2);
  conch_status_clear(&st);
  assert_int_equal(conch_descpool_new(&pool, NULL), 0);
  assert_int_equal(conch_fileset_to_pool(fs, pool), 0);
  assert_int_equal(conch_dynamic_new(&dyn, pool, NULL), 0);
  assert_int_equal(conch_dynamic_method(dyn, "t.S/M", &m), 0);
  assert_string_equal(m->input->fields[0].name, "a");
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
  conch_fileset_free(fs);
  conch_reflect_free(r);
  conch_client_free(c);
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
  /* Said once for both names, with the server's own words. */
  assert_non_null(strstr(conch_status_message(&st),
                         "neither grpc.reflection.v1.ServerReflection nor "
                         "grpc.reflection.v1alpha.ServerReflection is served"));
  assert_non_null(strstr(conch_status_message(&st), "is served ("));
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
      cmocka_unit_test(test_imports),
      cmocka_unit_test(test_no_reflection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
