/* conch/dynamic.h: descriptors built at run time from FileDescriptorProtos
   against protoc-c's generated ones.  A message packed with the generated
   descriptor unpacks with the built one and packs back to the same bytes;
   the JSON codec writes and reads both the same.  The schemas: the JSON
   codec's test types (every field kind, maps, oneofs, proto3 optional,
   proto2 defaults and required, the well-known types; a FileDescriptorSet
   protoc writes at build time, DYN_FDSET), process.proto and the gRPC
   health and reflection files the library embeds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/descriptor.h>
#include <conch/dynamic.h>
#include <conch/status.h>

#include "failmem.h"
#include "mem_int.h"
#include "pbjson.h"
#include "conchtest/v1/test.pb-c.h"
#include "process/process.pb-c.h"
#include "process/process.conch.h"
#include "grpc/health/v1/health.conch.h"
#include "grpc/reflection/v1/reflection.conch.h"
#include "pbjson/types.pb-c.c"
#include "pbjson/types2.pb-c.c"
#include "google/protobuf/any.pb-c.c"
#include "google/protobuf/duration.pb-c.c"
#include "google/protobuf/empty.pb-c.c"
#include "google/protobuf/field_mask.pb-c.c"
#include "google/protobuf/struct.pb-c.c"
#include "google/protobuf/timestamp.pb-c.c"
#include "google/protobuf/wrappers.pb-c.c"

/* ---- The FileDescriptorSet protoc wrote --------------------------------- */

#define MAX_FILES 32
static uint8_t *g_fds;
static size_t g_fds_len;
static conch_file_descriptor g_files[MAX_FILES];
static const conch_file_descriptor *g_deps[MAX_FILES][MAX_FILES + 1];
static char g_names[MAX_FILES][256];
static size_t g_nfiles;

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  int s;
  *v = 0;
  for (s = 0; s < 64 && *p < end; s += 7) {
    uint8_t c = *(*p)++;
    *v |= (uint64_t)(c & 0x7f) << s;
    if ((c & 0x80) == 0) {
      return 0;
    }
  }
  return -1;
}

/* The length-delimited fields |num| of |p|, one by one. */
static int next_ld(const uint8_t **p, const uint8_t *end, uint32_t num,
                   const uint8_t **data, size_t *len) {
  while (*p < end) {
    uint64_t key, v;
    if (varint(p, end, &key) != 0) {
      return -1;
    }
    switch (key & 7) {
    case 0:
      if (varint(p, end, &v) != 0) {
        return -1;
      }
      break;
    case 1:
      *p += 8;
      break;
    case 5:
      *p += 4;
      break;
    case 2:
      if (varint(p, end, &v) != 0 || v > (uint64_t)(end - *p)) {
        return -1;
      }
      if ((key >> 3) == num) {
        *data = *p;
        *len = (size_t)v;
        *p += v;
        return 1;
      }
      *p += v;
      break;
    default:
      return -1;
    }
  }
  return 0;
}

static void load_fds(void) {
  FILE *f = fopen(DYN_FDSET, "rb");
  const uint8_t *p, *end, *fp;
  size_t fl, i;
  long n;

  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  g_fds = malloc((size_t)n);
  assert_non_null(g_fds);
  assert_int_equal(fread(g_fds, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  g_fds_len = (size_t)n;
  p = g_fds;
  end = g_fds + g_fds_len;
  while (next_ld(&p, end, 1, &fp, &fl) == 1) {
    const uint8_t *q = fp, *s;
    size_t sl;
    assert_true(g_nfiles < MAX_FILES);
    assert_int_equal(next_ld(&q, fp + fl, 1, &s, &sl), 1);
    memcpy(g_names[g_nfiles], s, sl);
    g_names[g_nfiles][sl] = '\0';
    g_files[g_nfiles].name = g_names[g_nfiles];
    g_files[g_nfiles].data = fp;
    g_files[g_nfiles].len = fl;
    g_files[g_nfiles].deps = g_deps[g_nfiles];
    g_nfiles++;
  }
  /* Imports come first in the set (--include_imports). */
  for (i = 0; i < g_nfiles; i++) {
    const uint8_t *q = g_files[i].data, *s;
    size_t sl, nd = 0, j;
    while (next_ld(&q, g_files[i].data + g_files[i].len, 3, &s, &sl) == 1) {
      for (j = 0; j < g_nfiles; j++) {
        if (strlen(g_names[j]) == sl && memcmp(g_names[j], s, sl) == 0) {
          g_deps[i][nd++] = &g_files[j];
        }
      }
    }
    g_deps[i][nd] = NULL;
  }
  assert_true(g_nfiles >= 3);
}

static conch_descpool *pool_all(const conch_mem *mem) {
  conch_descpool *pool = NULL;
  size_t i;
  if (conch_descpool_new(&pool, mem) != 0) {
    return NULL;
  }
  for (i = 0; i < g_nfiles; i++) {
    if (conch_descpool_add(pool, &g_files[i]) != 0) {
      conch_descpool_free(pool);
      return NULL;
    }
  }
  if (conch_descpool_add(pool, &conch_file_process_2fprocess_2eproto) != 0 ||
      conch_descpool_add(
          pool, &conch_file_grpc_2fhealth_2fv1_2fhealth_2eproto) != 0 ||
      conch_descpool_add(
          pool, &conch_file_grpc_2freflection_2fv1_2freflection_2eproto) != 0) {
    conch_descpool_free(pool);
    return NULL;
  }
  return pool;
}

/* ---- Round trips -----------------------------------------------------------
 */

typedef struct fixture {
  conch_descpool *pool;
  conch_dynamic *dyn;
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof(*fx));
  if (fx == NULL) {
    return -1;
  }
  fx->pool = pool_all(NULL);
  if (fx->pool == NULL || conch_dynamic_new(&fx->dyn, fx->pool, NULL) != 0) {
    return -1;
  }
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  conch_dynamic_free(fx->dyn);
  conch_descpool_free(fx->pool);
  free(fx);
  return 0;
}

/* The static side's Any types. */
static const ProtobufCMessageDescriptor *static_resolve(const char *url,
                                                        void *ud) {
  static const ProtobufCMessageDescriptor *const all[] = {
      &pbjsontest__scalars__descriptor, &pbjsontest__maps__descriptor,
      &pbjsontest__repeats__descriptor};
  const char *name = strrchr(url, '/');
  size_t i;
  (void)ud;
  for (i = 0; name != NULL && i < sizeof(all) / sizeof(all[0]); i++) {
    if (strcmp(all[i]->name, name + 1) == 0) {
      return all[i];
    }
  }
  return NULL;
}
static const conch_pbjson_opts g_sopts = {static_resolve, NULL};

static char *json_of(const ProtobufCMessage *m) {
  conch_buf b;
  char err[256];
  char *s;
  memset(&b, 0, sizeof(b));
  if (conch__pbjson_encode_ex(m, &g_sopts, NULL, &b, err, sizeof(err)) != 0) {
    fail_msg("encode %s: %s", m->descriptor->name, err);
  }
  s = malloc(conch__buf_size(&b) + 1);
  assert_non_null(s);
  memcpy(s, conch__buf_head(&b), conch__buf_size(&b));
  s[conch__buf_size(&b)] = '\0';
  conch__buf_free(&b, conch_mem_default());
  return s;
}

/* |json| as a |sd| message, both ways, static and dynamic alike. */
static void roundtrip(fixture *fx, const ProtobufCMessageDescriptor *sd,
                      const char *json) {
  const ProtobufCMessageDescriptor *dd = NULL;
  ProtobufCMessage *ms = NULL, *md;
  char err[256];
  uint8_t *bs, *bd, *bj = NULL;
  size_t ns, nd, nj = 0;
  char *js, *jd, *jt = NULL;
  size_t nt = 0;
  conch_status st;

  conch_status_init(&st);
  assert_int_equal(conch_dynamic_message(fx->dyn, sd->name, &dd), 0);
  assert_non_null(dd);
  assert_string_equal(dd->name, sd->name);
  assert_int_equal(dd->n_fields, sd->n_fields);
  if (conch__pbjson_decode_ex(sd, (const uint8_t *)json, strlen(json), &g_sopts,
                              NULL, &ms, err, sizeof(err)) != 0) {
    fail_msg("decode %s: %s", json, err);
  }
  ns = protobuf_c_message_get_packed_size(ms);
  bs = malloc(ns + 1);
  assert_int_equal(protobuf_c_message_pack(ms, bs), ns);
  js = json_of(ms);

  /* Static bytes, dynamic unpack, the same bytes and JSON back. */
  md = protobuf_c_message_unpack(dd, NULL, ns, bs);
  assert_non_null(md);
  nd = protobuf_c_message_get_packed_size(md);
  assert_int_equal(nd, ns);
  bd = malloc(nd + 1);
  assert_int_equal(protobuf_c_message_pack(md, bd), nd);
  assert_memory_equal(bd, bs, ns);
  jd = json_of(md);
  assert_string_equal(jd, js);

  /* The API, both ways. */
  if (conch_dynamic_json_to_pb(fx->dyn, dd, json, strlen(json), &bj, &nj,
                               &st) != 0) {
    fail_msg("json_to_pb %s: %s", json, conch_status_message(&st));
  }
  assert_int_equal(nj, ns);
  assert_memory_equal(bj, bs, ns);
  assert_int_equal(conch_dynamic_pb_to_json(fx->dyn, dd, bs, ns, &jt, &nt, &st),
                   0);
  assert_int_equal(nt, strlen(js));
  assert_string_equal(jt, js);

  conch_dynamic_buf_free(fx->dyn, bj);
  conch_dynamic_buf_free(fx->dyn, jt);
  free(js);
  free(jd);
  free(bs);
  free(bd);
  protobuf_c_message_free_unpacked(md, NULL);
  protobuf_c_message_free_unpacked(ms, NULL);
  conch_status_clear(&st);
}

static void test_scalars(void **state) {
  fixture *fx = *state;
  roundtrip(fx, &pbjsontest__scalars__descriptor, "{}");
  roundtrip(fx, &pbjsontest__scalars__descriptor,
            "{\"i32\":-5,\"i64\":\"-9000000000\",\"u32\":4000000000,"
            "\"u64\":\"18000000000000000000\",\"s32\":-7,\"s64\":\"-8\","
            "\"f32\":9,\"f64\":\"10\",\"sf32\":-11,\"sf64\":\"-12\","
            "\"fl\":1.5,\"db\":-2.25,\"b\":true,\"s\":\"h\\u00e9llo\","
            "\"by\":\"AAEC/w==\",\"color\":\"COLOR_NEGATIVE\","
            "\"child\":{\"i32\":1,\"child\":{\"s\":\"deep\"}},"
            "\"snakeCaseName\":\"x\",\"name2x\":3,\"Leading\":\"l\"}");
  roundtrip(fx, &pbjsontest__scalars__descriptor,
            "{\"db\":\"NaN\",\"fl\":\"-Infinity\",\"color\":7}");
}

static void test_repeats(void **state) {
  fixture *fx = *state;
  roundtrip(fx, &pbjsontest__repeats__descriptor,
            "{\"i32\":[1,-2,3],\"i64\":[\"1\",\"-2\"],\"u32\":[0,4294967295],"
            "\"u64\":[\"5\"],\"s64\":[\"-1\",\"1\"],\"fl\":[0.5,1],"
            "\"db\":[1e300],\"b\":[true,false,true],\"s\":[\"a\",\"\"],"
            "\"by\":[\"\",\"AQ==\"],\"color\":[\"COLOR_RED\",2,-1],"
            "\"msg\":[{},{\"i32\":4}]}");
}

static void test_maps(void **state) {
  fixture *fx = *state;
  roundtrip(
      fx, &pbjsontest__maps__descriptor,
      "{\"ss\":{\"a\":\"b\",\"c\":\"\"},\"is\":{\"-1\":\"m\",\"2\":\"t\"},"
      "\"ll\":{\"9000000000\":\"-1\"},\"ub\":{\"7\":\"AA==\"},"
      "\"bc\":{\"true\":\"COLOR_GREEN\",\"false\":0},"
      "\"sm\":{\"k\":{\"s\":\"v\"}},\"sd\":{\"-3\":2.5},"
      "\"fb\":{\"1\":true},\"uf\":{\"2\":0.25},"
      "\"nested\":{\"-5\":{\"ss\":{\"x\":\"y\"}}}}");
}

static void test_oneofs(void **state) {
  fixture *fx = *state;
  const char *const cases[] = {
      "{\"num\":0}",
      "{\"str\":\"s\",\"optI32\":0,\"optS\":\"\"}",
      "{\"msg\":{\"i32\":1},\"optMsg\":{},\"optColor\":\"COLOR_RED\"}",
      "{\"raw\":\"AQID\",\"optDb\":0,\"optB\":false,\"optBy\":\"\"}",
      "{\"color\":\"COLOR_GREEN\",\"optI64\":\"-1\"}",
      "{\"dbl\":-0.5}"};
  size_t i;
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    roundtrip(fx, &pbjsontest__oneofs__descriptor, cases[i]);
  }
}

static void test_wkt(void **state) {
  fixture *fx = *state;
  roundtrip(fx, &pbjsontest__wkt__descriptor,
            "{\"ts\":\"2024-02-29T12:00:00.5Z\",\"dur\":\"-1.000001s\","
            "\"dbl\":1.5,\"flt\":2,\"i64\":\"3\",\"u64\":\"4\",\"i32\":5,"
            "\"u32\":6,\"bo\":true,\"str\":\"s\",\"by\":\"AQ==\","
            "\"st\":{\"a\":[1,null,{\"b\":false}]},\"val\":\"v\","
            "\"lv\":[1,\"x\"],\"nv\":null,\"fm\":\"a.bC,d\",\"empty\":{},"
            "\"any\":{\"@type\":\"type.googleapis.com/pbjsontest.Scalars\","
            "\"i32\":7},\"vals\":[null,1],\"vmap\":{\"k\":[]},"
            "\"anys\":[{\"@type\":"
            "\"type.googleapis.com/google.protobuf.Duration\","
            "\"value\":\"2s\"}],\"tmap\":{\"t\":\"1970-01-01T00:00:00Z\"},"
            "\"durs\":[\"0s\"],\"i32s\":[1,2],\"oNull\":null,"
            "\"optNull\":null,\"nulls\":[null],\"child\":{\"oTs\":"
            "\"2000-01-01T00:00:00Z\"}}");
}

static void test_proto2(void **state) {
  fixture *fx = *state;
  const ProtobufCMessageDescriptor *dd = NULL;
  ProtobufCMessage *m;
  uint8_t buf[4096];
  roundtrip(fx, &pbjsontest2__p2__descriptor, "{\"r\":1}");
  roundtrip(fx, &pbjsontest2__p2__descriptor,
            "{\"a\":0,\"s\":\"\",\"r\":-1,\"by\":\"AQ==\",\"ri\":[1,2],"
            "\"child\":{\"r\":2},\"mode\":\"MODE_B\",\"d\":0,\"m\":{\"k\":1}}");
  /* Defaults, as the generated __init sets them. */
  assert_int_equal(conch_dynamic_message(fx->dyn, "pbjsontest2.P2", &dd), 0);
  assert_true(dd->sizeof_message <= sizeof(buf));
  assert_int_equal(conch_dynamic_message_init(dd, buf), 0);
  m = (ProtobufCMessage *)buf;
  {
    const ProtobufCFieldDescriptor *s =
        protobuf_c_message_descriptor_get_field_by_name(dd, "s");
    const ProtobufCFieldDescriptor *dv =
        protobuf_c_message_descriptor_get_field_by_name(dd, "d");
    const ProtobufCFieldDescriptor *mo =
        protobuf_c_message_descriptor_get_field_by_name(dd, "mode");
    assert_non_null(s);
    assert_string_equal(*(char **)(buf + s->offset), "dflt");
    assert_true(*(double *)(buf + dv->offset) == 1.5);
    assert_int_equal(*(int *)(buf + mo->offset), 1); /* MODE_A, the first */
  }
  assert_ptr_equal(m->descriptor, dd);
  /* A message without its required field does not unpack. */
  assert_null(
      protobuf_c_message_unpack(dd, NULL, 2, (const uint8_t *)"\x08\x01"));
}

static void test_process_and_methods(void **state) {
  fixture *fx = *state;
  const conch_method *m = NULL;
  const ProtobufCEnumDescriptor *ed = NULL;
  conch_status st;
  uint8_t *b = NULL;
  size_t n = 0;

  conch_status_init(&st);
  roundtrip(fx, &process__start_request__descriptor,
            "{\"process\":{\"cmd\":\"/bin/ls\",\"args\":[\"-l\"],"
            "\"envs\":{\"A\":\"1\"},\"cwd\":\"/\"},\"pty\":{\"size\":"
            "{\"cols\":80,\"rows\":24}},\"tag\":\"t\",\"stdin\":false}");
  roundtrip(fx, &process__process_event__descriptor,
            "{\"data\":{\"stdout\":\"aGk=\"}}");

  assert_int_equal(conch_dynamic_method(fx->dyn, "process.Process/Start", &m),
                   0);
  assert_string_equal(m->path, "/process.Process/Start");
  assert_int_equal(m->kind, CONCH_STREAM_SERVER);
  assert_string_equal(m->input->name, "process.StartRequest");
  assert_string_equal(m->output->name, "process.StartResponse");
  assert_int_equal(
      conch_dynamic_method(fx->dyn, "/process.Process/StreamInput", &m), 0);
  assert_int_equal(m->kind, CONCH_STREAM_CLIENT);
  assert_int_equal(conch_dynamic_method(fx->dyn, "process.Process.List", &m),
                   0);
  assert_int_equal(m->kind, CONCH_STREAM_UNARY);
  assert_int_equal(
      conch_dynamic_method(
          fx->dyn, "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
          &m),
      0);
  assert_int_equal(m->kind, CONCH_STREAM_BIDI);
  assert_int_equal(
      conch_dynamic_method(fx->dyn, "grpc.health.v1.Health/Watch", &m), 0);
  assert_int_equal(m->kind, CONCH_STREAM_SERVER);
  assert_int_equal(conch_dynamic_enum(fx->dyn, "pbjsontest.Color", &ed), 0);
  assert_int_equal(ed->n_values, 4);
  assert_int_equal(ed->values[0].value, -1);

  assert_int_equal(conch_dynamic_method(fx->dyn, "process.Process/Nope", &m),
                   CONCH_ERR_INVALID);
  assert_null(m);
  assert_non_null(strstr(conch_dynamic_error(fx->dyn), "Nope"));
  assert_int_equal(conch_dynamic_method(fx->dyn, "process.Nope/List", &m),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_method(fx->dyn, "nodots", &m),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_method(fx->dyn, "process.StartRequest/X", &m),
                   CONCH_ERR_INVALID);

  /* Bad JSON: invalid_argument naming the field. */
  assert_int_equal(conch_dynamic_method(fx->dyn, "process.Process/Start", &m),
                   0);
  assert_int_equal(conch_dynamic_json_to_pb(fx->dyn, m->input,
                                            "{\"process\":{\"cmd\":5}}", 21, &b,
                                            &n, &st),
                   CONCH_ERR_CODEC);
  assert_null(b);
  assert_int_equal(st.code, CONCH_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(conch_status_message(&st), "cmd"));
  assert_int_equal(
      conch_dynamic_json_to_pb(fx->dyn, m->input, "{", 1, &b, &n, &st),
      CONCH_ERR_CODEC);
  assert_int_equal(st.code, CONCH_CODE_INVALID_ARGUMENT);
  /* Bytes that are not the message. */
  {
    char *j = NULL;
    assert_int_equal(conch_dynamic_pb_to_json(fx->dyn, m->input,
                                              (const uint8_t *)"\x0a\x05", 2,
                                              &j, &n, &st),
                     CONCH_ERR_CODEC);
    assert_null(j);
    assert_int_equal(st.code, CONCH_CODE_INVALID_ARGUMENT);
  }
  conch_status_clear(&st);
}

static void test_conchtest(void **state) {
  fixture *fx = *state;
  const conch_method *m = NULL;
  roundtrip(
      fx, &conchtest__v1__request__descriptor,
      "{\"payload\":\"aGVsbG8=\",\"responseCount\":3,"
      "\"responseSize\":10,\"delayMs\":1,\"error\":{\"code\":5,"
      "\"message\":\"m\",\"details\":[{\"type\":\"t\",\"value\":\"AA==\"}]},"
      "\"responseHeaders\":[{\"name\":\"a\",\"values\":[\"Yg==\"]}],"
      "\"responseTrailers\":[]}");
  roundtrip(fx, &conchtest__v1__response__descriptor,
            "{\"payload\":\"\",\"index\":4,\"timeoutMs\":\"-1\","
            "\"messageCount\":2,\"totalBytes\":\"99\",\"sha256\":\"AQI=\"}");
  assert_int_equal(
      conch_dynamic_method(fx->dyn, "conchtest.v1.TestService/Bidi", &m), 0);
  assert_int_equal(m->kind, CONCH_STREAM_BIDI);
  {
    /* Built once: the message the method reached is the one looked up. */
    const ProtobufCMessageDescriptor *rq = NULL;
    assert_int_equal(
        conch_dynamic_message(fx->dyn, "conchtest.v1.Request", &rq), 0);
    assert_ptr_equal(rq, m->input);
  }
}

/* ---- Hostile descriptors ---------------------------------------------------
 */

typedef struct w {
  uint8_t b[4096];
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

/* A FieldDescriptorProto. */
static void field(w *msg, const char *name, int num, int label, int type,
                  const char *type_name) {
  w f = {{0}, 0};
  w_str(&f, 1, name);
  w_int(&f, 3, (uint64_t)(int64_t)num);
  w_int(&f, 4, (uint64_t)label);
  w_int(&f, 5, (uint64_t)type);
  if (type_name != NULL) {
    w_str(&f, 6, type_name);
  }
  w_sub(msg, 2, &f);
}

/* Builds "h.M" from a file of one or two messages and expects |want|. */
static void expect(const w *m1, const w *m2, const char *syntax, int want,
                   const char *why) {
  w file = {{0}, 0};
  conch_file_descriptor fd;
  static const conch_file_descriptor *const nodeps[] = {NULL};
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  const ProtobufCMessageDescriptor *md = (const void *)1;

  w_str(&file, 1, "h.proto");
  w_str(&file, 2, "h");
  w_sub(&file, 4, m1);
  if (m2 != NULL) {
    w_sub(&file, 4, m2);
  }
  w_str(&file, 12, syntax);
  fd.name = "h.proto";
  fd.data = file.b;
  fd.len = file.n;
  fd.deps = nodeps;
  assert_int_equal(conch_descpool_new(&pool, NULL), 0);
  if (conch_descpool_add(pool, &fd) != 0) {
    /* The pool refuses what it cannot index: a refusal too. */
    assert_int_not_equal(want, 0);
    conch_descpool_free(pool);
    return;
  }
  assert_int_equal(conch_dynamic_new(&dyn, pool, NULL), 0);
  assert_int_equal(conch_dynamic_message(dyn, "h.M", &md), want);
  if (want != 0) {
    assert_null(md);
    if (strstr(conch_dynamic_error(dyn), why) == NULL) {
      fail_msg("error \"%s\" lacks \"%s\"", conch_dynamic_error(dyn), why);
    }
    /* Nothing of it stays: the same failure again. */
    assert_int_equal(conch_dynamic_message(dyn, "h.M", &md), want);
  } else {
    assert_non_null(md);
  }
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
}

static void test_hostile(void **state) {
  w m = {{0}, 0}, m2 = {{0}, 0};
  (void)state;

  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 11, ".h.Nope");
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "h.Nope");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 5, NULL);
  field(&m, "b", 1, 1, 5, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "used twice");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 5, NULL);
  field(&m, "a", 2, 1, 5, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "declared twice");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 0, 1, 5, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "field number");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 536870912, 1, 5, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "field number");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 10, ".h.M");
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID, "groups");

  /* Relative type names (protobufjs writes them; @grpc/reflection serves
     them) resolve as protoc resolves them: nested first, then outwards. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 11, "M");
  expect(&m, NULL, "proto3", 0, NULL);
  memset(&m, 0, sizeof(m));
  memset(&m2, 0, sizeof(m2));
  {
    w nested = {{0}, 0};
    w_str(&nested, 1, "N");
    w_sub(&m, 3, &nested);
  }
  w_str(&m, 1, "M");
  field(&m, "n", 1, 1, 11, "N");   /* h.M.N */
  field(&m, "o", 2, 1, 11, "O");   /* h.O */
  field(&m, "p", 3, 1, 11, "h.O"); /* h.O, from the package */
  w_str(&m2, 1, "O");
  expect(&m, &m2, "proto3", 0, NULL);
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 11, "Nope");
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "\"Nope\" is not found");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 14, ".h.M"); /* a message used as an enum */
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "not a");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 9, 5, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "label");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 99, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "type");

  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "a", 1, 1, 5, NULL);
  expect(&m, NULL, "editions", CONCH_ERR_INVALID, "syntax");

  /* Required fields in a cycle: M needs N needs M. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field(&m, "n", 1, 2, 11, ".h.N");
  w_str(&m2, 1, "N");
  field(&m2, "m", 1, 2, 11, ".h.M");
  expect(&m, &m2, "proto2", CONCH_ERR_INVALID, "cycle");
  /* An optional link breaks it; recursion through optional fields is fine. */
  memset(&m2, 0, sizeof(m2));
  w_str(&m2, 1, "N");
  field(&m2, "m", 1, 1, 11, ".h.M");
  expect(&m, &m2, "proto2", 0, "");

  /* A field that is not a FieldDescriptorProto. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  w_bytes(&m, 2, "\xff\xff", 2);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "M");

  /* Enum default naming no value. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  {
    w f = {{0}, 0};
    w_str(&f, 1, "x");
    w_int(&f, 3, 1);
    w_int(&f, 4, 1);
    w_int(&f, 5, 5);
    w_str(&f, 7, "12abc");
    w_sub(&m, 2, &f);
  }
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID, "default");
}

/* A chain of 300 messages, each holding the next: deeper than the builder
   goes (refused, not a stack overflow); and a message of 70000 fields. */
static void test_hostile_sizes(void **state) {
  static uint8_t file[1 << 22];
  size_t fn = 0;
  conch_file_descriptor fd;
  static const conch_file_descriptor *const nodeps[] = {NULL};
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  const ProtobufCMessageDescriptor *md = NULL;
  w hdr = {{0}, 0};
  int i;
  (void)state;

  w_str(&hdr, 1, "deep.proto");
  w_str(&hdr, 2, "h");
  w_str(&hdr, 12, "proto3");
  memcpy(file, hdr.b, hdr.n);
  fn = hdr.n;
  for (i = 0; i < 300; i++) {
    w m = {{0}, 0};
    w wrap = {{0}, 0};
    char name[32], next[32];
    snprintf(name, sizeof(name), "M%d", i);
    snprintf(next, sizeof(next), ".h.M%d", i + 1);
    w_str(&m, 1, name);
    field(&m, "n", 1, 1, 11, i < 299 ? next : ".h.M0");
    w_sub(&wrap, 4, &m);
    memcpy(file + fn, wrap.b, wrap.n);
    fn += wrap.n;
  }
  /* M_BIG: 70000 int32 fields. */
  {
    static uint8_t big[1 << 21];
    size_t bn = 0;
    w nm = {{0}, 0};
    w_str(&nm, 1, "Big");
    memcpy(big, nm.b, nm.n);
    bn = nm.n;
    for (i = 1; i <= 70000; i++) {
      w f = {{0}, 0};
      char fname[16];
      snprintf(fname, sizeof(fname), "f%d", i);
      field(&f, fname, i, 1, 5, NULL);
      memcpy(big + bn, f.b, f.n);
      bn += f.n;
    }
    file[fn++] = 4 << 3 | 2;
    {
      size_t v = bn;
      do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        file[fn++] = (uint8_t)(c | (v != 0 ? 0x80 : 0));
      } while (v != 0);
    }
    memcpy(file + fn, big, bn);
    fn += bn;
  }
  fd.name = "deep.proto";
  fd.data = file;
  fd.len = fn;
  fd.deps = nodeps;
  assert_int_equal(conch_descpool_new(&pool, NULL), 0);
  assert_int_equal(conch_descpool_add(pool, &fd), 0);
  assert_int_equal(conch_dynamic_new(&dyn, pool, NULL), 0);
  assert_int_equal(conch_dynamic_message(dyn, "h.M0", &md), CONCH_ERR_INVALID);
  assert_non_null(strstr(conch_dynamic_error(dyn), "deeper"));
  /* The chain loops back to M0: from anywhere in it, too deep. */
  assert_int_equal(conch_dynamic_message(dyn, "h.M250", &md),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_message(dyn, "h.Big", &md), CONCH_ERR_INVALID);
  assert_non_null(strstr(conch_dynamic_error(dyn), "fields"));
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
}

/* The set protoc wrote, as conch --schema or a reflection answer gives
   it: whole, and file by file in reverse (imports after the files that
   import them). */
static void test_fileset(void **state) {
  fixture fx;
  conch_fileset *fs = NULL, *rev = NULL;
  size_t i, n;
  (void)state;

  memset(&fx, 0, sizeof(fx));
  assert_int_equal(conch_fileset_new(&fs, NULL), 0);
  assert_int_equal(conch_fileset_add_set(fs, g_fds, g_fds_len), 0);
  n = conch_fileset_n_files(fs);
  assert_int_equal(n, g_nfiles);
  assert_int_equal(conch_fileset_add_set(fs, g_fds, g_fds_len), 0);
  assert_int_equal(conch_fileset_n_files(fs), n); /* the same files again */
  assert_null(conch_fileset_file_at(fs, n));
  assert_int_equal(conch_descpool_new(&fx.pool, NULL), 0);
  assert_int_equal(conch_fileset_to_pool(fs, fx.pool), 0);
  assert_int_equal(conch_dynamic_new(&fx.dyn, fx.pool, NULL), 0);
  roundtrip(&fx, &pbjsontest__scalars__descriptor, "{\"i32\":1,\"s\":\"x\"}");
  roundtrip(&fx, &pbjsontest__wkt__descriptor,
            "{\"any\":{\"@type\":\"type.googleapis.com/pbjsontest.Maps\","
            "\"ss\":{\"a\":\"b\"}},\"ts\":\"1970-01-01T00:00:01Z\"}");
  conch_dynamic_free(fx.dyn);
  conch_descpool_free(fx.pool);

  assert_int_equal(conch_fileset_new(&rev, NULL), 0);
  for (i = n; i-- > 0;) {
    const conch_file_descriptor *f = conch_fileset_file_at(fs, i);
    assert_int_equal(conch_fileset_add_file(rev, f->data, f->len), 0);
  }
  assert_int_equal(conch_descpool_new(&fx.pool, NULL), 0);
  assert_int_equal(conch_fileset_to_pool(rev, fx.pool), 0);
  assert_int_equal(conch_dynamic_new(&fx.dyn, fx.pool, NULL), 0);
  roundtrip(&fx, &pbjsontest2__p2__descriptor, "{\"r\":3,\"m\":{\"k\":2}}");
  roundtrip(&fx, &conchtest__v1__request__descriptor, "{\"responseCount\":2}");
  conch_dynamic_free(fx.dyn);
  conch_descpool_free(fx.pool);

  /* Not a set, not a file. */
  assert_int_equal(conch_fileset_add_set(rev, (const uint8_t *)"\x0a\x05", 2),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_fileset_add_file(rev, (const uint8_t *)"\x10\x01", 2),
                   CONCH_ERR_INVALID); /* no name */
  assert_int_equal(conch_fileset_add_file(NULL, NULL, 0), CONCH_ERR_INVALID);
  assert_int_equal(conch_fileset_n_files(rev), n);
  conch_fileset_free(rev);
  conch_fileset_free(fs);
  conch_fileset_free(NULL);
}

/* The failing allocator over the set, the pool and a build. */
static void test_fileset_failmem(void **state) {
  size_t i;
  int done = 0;
  (void)state;
  for (i = 0; !done && i < 100000; i++) {
    conch_fileset *fs = NULL;
    conch_descpool *pool = NULL;
    conch_dynamic *dyn = NULL;
    const ProtobufCMessageDescriptor *md = NULL;
    int rc;

    failmem_fail_at(i);
    rc = conch_fileset_new(&fs, failmem_hooks());
    if (rc == 0) {
      rc = conch_fileset_add_set(fs, g_fds, g_fds_len);
    }
    if (rc == 0) {
      rc = conch_descpool_new(&pool, failmem_hooks());
    }
    if (rc == 0) {
      rc = conch_fileset_to_pool(fs, pool);
    }
    if (rc == 0) {
      rc = conch_dynamic_new(&dyn, pool, failmem_hooks());
    }
    if (rc == 0) {
      rc = conch_dynamic_message(dyn, "pbjsontest.Maps", &md);
    }
    if (rc != 0) {
      assert_int_equal(rc, CONCH_ERR_NOMEM);
      assert_true(failmem_fired());
    } else {
      done = !failmem_fired();
    }
    conch_dynamic_free(dyn);
    conch_descpool_free(pool);
    conch_fileset_free(fs);
    failmem_fail_at((size_t)-1);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  assert_true(done);
}

/* Failed lookups and unresolvable Any types keep no memory: a type that
   is in the pool but fails late (its last field names no type), a name
   that is not there, an Any of an unknown type, a thousand times each. */
static void test_failures_keep_nothing(void **state) {
  static const conch_file_descriptor *const nodeps[] = {NULL};
  conch_file_descriptor fd;
  w file = {{0}, 0}, m = {{0}, 0};
  conch_descpool *pool = NULL, *good;
  conch_dynamic *dyn = NULL, *gdyn = NULL;
  const ProtobufCMessageDescriptor *md = NULL, *wkt = NULL;
  conch_status st;
  long live;
  int i;
  static const char js[] =
      "{\"any\":{\"@type\":\"type.googleapis.com/x.Nope\"}}";
  (void)state;

  w_str(&m, 1, "M");
  for (i = 1; i <= 20; i++) {
    char name[16];
    snprintf(name, sizeof(name), "field_%d", i);
    field(&m, name, i, 1, 9, NULL);
  }
  field(&m, "last", 21, 1, 11, ".h.Nope");
  w_str(&file, 1, "h.proto");
  w_str(&file, 2, "h");
  w_sub(&file, 4, &m);
  w_str(&file, 12, "proto3");
  fd.name = "h.proto";
  fd.data = file.b;
  fd.len = file.n;
  fd.deps = nodeps;
  conch_status_init(&st);
  failmem_fail_at((size_t)-1);
  assert_int_equal(conch_descpool_new(&pool, failmem_hooks()), 0);
  assert_int_equal(conch_descpool_add(pool, &fd), 0);
  assert_int_equal(conch_dynamic_new(&dyn, pool, failmem_hooks()), 0);
  good = pool_all(failmem_hooks());
  assert_non_null(good);
  assert_int_equal(conch_dynamic_new(&gdyn, good, failmem_hooks()), 0);
  assert_int_equal(conch_dynamic_message(gdyn, "pbjsontest.Wkt", &wkt), 0);
  live = failmem_live_blocks();
  for (i = 0; i < 1000; i++) {
    uint8_t *b = NULL;
    size_t n = 0;
    assert_int_equal(conch_dynamic_message(dyn, "h.M", &md), CONCH_ERR_INVALID);
    assert_int_equal(conch_dynamic_message(gdyn, "pbjsontest.Nope", &md),
                     CONCH_ERR_INVALID);
    assert_int_equal(
        conch_dynamic_json_to_pb(gdyn, wkt, js, sizeof(js) - 1, &b, &n, &st),
        CONCH_ERR_CODEC);
  }
  assert_non_null(strstr(conch_status_message(&st), "x.Nope"));
  assert_int_equal(failmem_live_blocks(), live);
  conch_status_clear(&st);
  conch_dynamic_free(gdyn);
  conch_descpool_free(good);
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_args(void **state) {
  fixture *fx = *state;
  const ProtobufCMessageDescriptor *md = NULL;
  conch_dynamic *d = NULL;
  (void)state;
  assert_int_equal(conch_dynamic_new(NULL, fx->pool, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_new(&d, NULL, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_message(fx->dyn, NULL, &md),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_message(fx->dyn, "process.Process", &md),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_message(fx->dyn, ".process.ListRequest", &md),
                   0);
  assert_int_equal(conch_dynamic_message_init(NULL, NULL), CONCH_ERR_INVALID);
  conch_dynamic_free(NULL);
}

/* Every allocation of a build fails in turn: an error, no leak, and the
   builder still works afterwards. */
static void test_failmem(void **state) {
  size_t i;
  int done = 0;
  (void)state;
  for (i = 0; !done && i < 100000; i++) {
    conch_descpool *pool;
    conch_dynamic *dyn = NULL;
    const conch_method *m = NULL;
    const ProtobufCMessageDescriptor *md = NULL;
    uint8_t *b = NULL;
    char *j = NULL;
    size_t n = 0;
    conch_status st;
    int rc;

    conch_status_init(&st);
    failmem_fail_at((size_t)-1);
    pool = pool_all(failmem_hooks());
    assert_non_null(pool);
    failmem_fail_at(i);
    rc = conch_dynamic_new(&dyn, pool, failmem_hooks());
    if (rc == 0) {
      rc = conch_dynamic_method(dyn, "process.Process/Start", &m);
      if (rc == 0) {
        rc = conch_dynamic_message(dyn, "pbjsontest.Wkt", &md);
      }
      if (rc == 0) {
        static const char js[] =
            "{\"any\":{\"@type\":\"type.googleapis.com/pbjsontest.Maps\","
            "\"ss\":{\"a\":\"b\"}},\"st\":{\"x\":[1]}}";
        rc = conch_dynamic_json_to_pb(dyn, md, js, sizeof(js) - 1, &b, &n, &st);
      }
      if (rc == 0) {
        rc = conch_dynamic_pb_to_json(dyn, md, b, n, &j, &n, &st);
      }
      if (rc != 0) {
        if (rc != CONCH_ERR_NOMEM) {
          fprintf(stderr, "at %zu: %d %s / %s\n", i, rc,
                  conch_dynamic_error(dyn), conch_status_message(&st));
        }
        assert_true(failmem_fired());
        assert_int_equal(rc, CONCH_ERR_NOMEM);
      } else {
        done = !failmem_fired();
        if (done) {
          assert_non_null(strstr(j, "pbjsontest.Maps"));
        }
      }
      conch_dynamic_buf_free(dyn, b);
      conch_dynamic_buf_free(dyn, j);
    } else {
      assert_int_equal(rc, CONCH_ERR_NOMEM);
    }
    conch_dynamic_free(dyn);
    conch_status_clear(&st);
    failmem_fail_at((size_t)-1);
    conch_descpool_free(pool);
    assert_int_equal(failmem_live_blocks(), 0);
  }
  assert_true(done);
}

/* ---- json_name, bytes defaults, extensions, services -------------------- */

/* A FieldDescriptorProto with a json_name (NULL: none) and a default
   (NULL: none). */
static void field_x(w *msg, uint32_t in, const char *name, int num, int label,
                    int type, const char *json, const char *def) {
  w f = {{0}, 0};
  w_str(&f, 1, name);
  w_int(&f, 3, (uint64_t)(int64_t)num);
  w_int(&f, 4, (uint64_t)label);
  w_int(&f, 5, (uint64_t)type);
  if (def != NULL) {
    w_str(&f, 7, def);
  }
  if (json != NULL) {
    w_str(&f, 10, json);
  }
  w_sub(msg, in, &f);
}

/* A builder over one file "h.proto" (package h) with |m| (and, not NULL,
   the file-level extension |ext|). */
typedef struct one {
  w file;
  conch_file_descriptor fd;
  conch_descpool *pool;
  conch_dynamic *dyn;
} one;

static void one_open(one *o, const w *m, const w *ext, const char *syntax) {
  static const conch_file_descriptor *const nodeps[] = {NULL};
  memset(o, 0, sizeof(*o));
  w_str(&o->file, 1, "h.proto");
  w_str(&o->file, 2, "h");
  w_sub(&o->file, 4, m);
  if (ext != NULL) {
    w_sub(&o->file, 7, ext);
  }
  w_str(&o->file, 12, syntax);
  o->fd.name = "h.proto";
  o->fd.data = o->file.b;
  o->fd.len = o->file.n;
  o->fd.deps = nodeps;
  assert_int_equal(conch_descpool_new(&o->pool, NULL), 0);
  assert_int_equal(conch_descpool_add(o->pool, &o->fd), 0);
  assert_int_equal(conch_dynamic_new(&o->dyn, o->pool, NULL), 0);
}

static void one_close(one *o) {
  conch_dynamic_free(o->dyn);
  conch_descpool_free(o->pool);
}

/* |json| through the type "h.M" to protobuf and back: |want| out. */
static void json_via(one *o, const char *json, const char *want) {
  const ProtobufCMessageDescriptor *md = NULL;
  uint8_t *pb = NULL;
  size_t pl = 0, jl = 0;
  char *out = NULL;
  conch_status st;
  conch_status_init(&st);
  assert_int_equal(conch_dynamic_message(o->dyn, "h.M", &md), 0);
  if (conch_dynamic_json_to_pb(o->dyn, md, json, strlen(json), &pb, &pl,
                               &st) != 0) {
    fail_msg("%s: %s", json, conch_status_message(&st));
  }
  assert_int_equal(conch_dynamic_pb_to_json(o->dyn, md, pb, pl, &out, &jl,
                                            NULL),
                   0);
  assert_string_equal(out, want);
  conch_dynamic_buf_free(o->dyn, pb);
  conch_dynamic_buf_free(o->dyn, out);
  conch_status_clear(&st);
}

static void test_json_name(void **state) {
  w m = {{0}, 0};
  one o;
  (void)state;

  w_str(&m, 1, "M");
  field_x(&m, 2, "foo_bar", 1, 1, 9, "fb", NULL);         /* custom */
  field_x(&m, 2, "plain_name", 2, 1, 5, "plainName", NULL); /* derived */
  field_x(&m, 2, "list", 3, 3, 5, "Items", NULL);
  one_open(&o, &m, NULL, "proto3");
  /* Written with the json_name, read with it or the proto name. */
  json_via(&o, "{\"fb\":\"v\",\"plainName\":2,\"Items\":[1,2]}",
           "{\"fb\":\"v\",\"plainName\":2,\"Items\":[1,2]}");
  json_via(&o, "{\"foo_bar\":\"w\",\"plain_name\":3,\"list\":[4]}",
           "{\"fb\":\"w\",\"plainName\":3,\"Items\":[4]}");
  /* The derived name is not the field's json name any more: dropped as an
     unknown field (protojson's DiscardUnknown). */
  json_via(&o, "{\"fooBar\":\"z\"}", "{}");
  one_close(&o);

  /* proto3: two fields of one JSON name are refused, as protoc refuses
     them: derived or given, and derived ones even when one is given. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "foo_bar", 1, 1, 9, NULL, NULL);
  field_x(&m, 2, "fooBar", 2, 1, 9, NULL, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "JSON name \"fooBar\"");
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "a", 1, 1, 9, "b", NULL);
  field_x(&m, 2, "b", 2, 1, 9, NULL, NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "JSON name \"b\"");
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "foo_bar", 1, 1, 9, "q", NULL);
  field_x(&m, 2, "fooBar", 2, 1, 9, "fooBar", NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "JSON name \"fooBar\"");
  /* proto2: two custom json_names clashing are refused there too (protoc
     refuses them; a clash with a derived name only warns). */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "a", 1, 1, 9, "x", NULL);
  field_x(&m, 2, "b", 2, 1, 9, "x", NULL);
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID,
         "fields a and b have one JSON name \"x\"");

  /* A json_name JSON would have to escape is refused. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "q", 1, 1, 9, "a\"b", NULL);
  expect(&m, NULL, "proto3", CONCH_ERR_INVALID, "json_name");
}

/* |pb| (|n| bytes) of "h.M" in JSON: |want|. */
static void pb_json(one *o, const uint8_t *pb, size_t n, const char *want) {
  const ProtobufCMessageDescriptor *md = NULL;
  char *out = NULL;
  size_t jl = 0;
  assert_int_equal(conch_dynamic_message(o->dyn, "h.M", &md), 0);
  assert_int_equal(conch_dynamic_pb_to_json(o->dyn, md, pb, n, &out, &jl, NULL),
                   0);
  assert_string_equal(out, want);
  conch_dynamic_buf_free(o->dyn, out);
}

/* proto2 allows two fields of one JSON name (protoc's LEGACY_BEST_EFFORT).
   In JSON, as protojson: the name is the field's declared first (not the
   lower number); the others read by their proto name only, and are
   written with it where it reads back to them, else with their JSON
   name, as protojson writes them. */
static void test_json_name_proto2(void **state) {
  static const uint8_t f1[] = {0x0a, 0x01, 'a'}, f2[] = {0x12, 0x01, 'b'};
  w m = {{0}, 0};
  one o;
  (void)state;

  /* fooBar (2) declared before foo_bar (1): "fooBar" is field 2's. */
  w_str(&m, 1, "M");
  field_x(&m, 2, "fooBar", 2, 1, 9, NULL, NULL);
  field_x(&m, 2, "foo_bar", 1, 1, 9, NULL, NULL);
  one_open(&o, &m, NULL, "proto2");
  json_via(&o, "{\"fooBar\":\"x\"}", "{\"fooBar\":\"x\"}");
  pb_json(&o, f2, sizeof(f2), "{\"fooBar\":\"b\"}");
  /* foo_bar, shadowed, is written and read by its proto name. */
  pb_json(&o, f1, sizeof(f1), "{\"foo_bar\":\"a\"}");
  json_via(&o, "{\"foo_bar\":\"y\",\"fooBar\":\"x\"}",
           "{\"foo_bar\":\"y\",\"fooBar\":\"x\"}");
  one_close(&o);

  /* foo_bar (1) declared first owns "fooBar", and fooBar's proto name is
     that JSON name: field 2 cannot be read from JSON, and is written as
     protojson writes it. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "foo_bar", 1, 1, 9, "fooBar", NULL);
  field_x(&m, 2, "fooBar", 2, 1, 9, "fooBar", NULL);
  one_open(&o, &m, NULL, "proto2");
  json_via(&o, "{\"fooBar\":\"x\"}", "{\"fooBar\":\"x\"}");
  json_via(&o, "{\"foo_bar\":\"z\"}", "{\"fooBar\":\"z\"}");
  pb_json(&o, f2, sizeof(f2), "{\"fooBar\":\"b\"}");
  one_close(&o);

  /* A custom name against a derived one: allowed in proto2; "b" is a's. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "a", 1, 1, 9, "b", NULL);
  field_x(&m, 2, "b", 2, 1, 9, NULL, NULL);
  field_x(&m, 2, "c_d", 3, 1, 9, "e", NULL);
  field_x(&m, 2, "e", 4, 1, 9, NULL, NULL);
  one_open(&o, &m, NULL, "proto2");
  json_via(&o, "{\"b\":\"x\"}", "{\"b\":\"x\"}");
  json_via(&o, "{\"a\":\"y\"}", "{\"b\":\"y\"}");
  pb_json(&o, f2, sizeof(f2), "{\"b\":\"b\"}");
  json_via(&o, "{\"e\":\"p\"}", "{\"e\":\"p\"}");
  json_via(&o, "{\"c_d\":\"q\"}", "{\"e\":\"q\"}");
  one_close(&o);
}

static void test_bytes_default(void **state) {
  w m = {{0}, 0};
  one o;
  const ProtobufCMessageDescriptor *md = NULL;
  const ProtobufCFieldDescriptor *f;
  const ProtobufCBinaryData *b;
  ProtobufCMessage *msg;
  static const uint8_t want[] = {'a', 1, 2, 0xff, '\\', '"', '\n', '?', 'z'};
  uint8_t buf[256];
  char *json = NULL;
  size_t jl = 0;
  (void)state;

  w_str(&m, 1, "M");
  /* protoc's CEscape: octal, hex, the named escapes. */
  field_x(&m, 2, "b", 1, 1, 12, NULL, "a\\001\\x02\\377\\\\\\\"\\n\\?z");
  field_x(&m, 2, "e", 2, 1, 12, NULL, "");
  one_open(&o, &m, NULL, "proto2");
  assert_int_equal(conch_dynamic_message(o.dyn, "h.M", &md), 0);
  f = protobuf_c_message_descriptor_get_field(md, 1);
  assert_non_null(f->default_value);
  b = f->default_value;
  assert_int_equal(b->len, sizeof(want));
  assert_memory_equal(b->data, want, sizeof(want));
  b = protobuf_c_message_descriptor_get_field(md, 2)->default_value;
  assert_non_null(b);
  assert_int_equal(b->len, 0);
  /* A message made here, and one unpacked from nothing, have it. */
  assert_true(md->sizeof_message <= sizeof(buf));
  assert_int_equal(conch_dynamic_message_init(md, buf), 0);
  b = (const ProtobufCBinaryData *)(const void *)(buf + f->offset);
  assert_int_equal(b->len, sizeof(want));
  assert_memory_equal(b->data, want, sizeof(want));
  msg = protobuf_c_message_unpack(md, NULL, 0, (const uint8_t *)"");
  assert_non_null(msg);
  b = (const ProtobufCBinaryData *)(const void *)((const uint8_t *)msg +
                                                  f->offset);
  assert_int_equal(b->len, sizeof(want));
  assert_memory_equal(b->data, want, sizeof(want));
  protobuf_c_message_free_unpacked(msg, NULL); /* the default stays ours */
  /* Not set: not in the JSON (proto2 presence). */
  assert_int_equal(
      conch_dynamic_pb_to_json(o.dyn, md, (const uint8_t *)"", 0, &json, &jl,
                               NULL),
      0);
  assert_string_equal(json, "{}");
  conch_dynamic_buf_free(o.dyn, json);
  one_close(&o);

  /* Escapes protoc would not write. */
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "b", 1, 1, 12, NULL, "\\q");
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID, "bad bytes default");
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "b", 1, 1, 12, NULL, "\\400");
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID, "bad bytes default");
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "b", 1, 1, 12, NULL, "x\\");
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID, "bad bytes default");
  memset(&m, 0, sizeof(m));
  w_str(&m, 1, "M");
  field_x(&m, 2, "b", 1, 1, 12, NULL, "\\xg");
  expect(&m, NULL, "proto2", CONCH_ERR_INVALID, "bad bytes default");
}

static void test_extensions(void **state) {
  w m = {{0}, 0}, range = {{0}, 0}, ext = {{0}, 0};
  one o;
  const ProtobufCMessageDescriptor *md = NULL;
  ProtobufCMessage *msg;
  /* a = 1, then the extension 100 = 7, unknown to the built type. */
  static const uint8_t wire[] = {0x08, 0x01, 0xa0, 0x06, 0x07};
  uint8_t back[16];
  uint8_t *pb = NULL;
  size_t pl = 0, jl = 0;
  char *json = NULL;
  conch_status st;
  static const char ext_json[] = "{\"a\":1,\"[h.e]\":5}";
  (void)state;

  w_str(&m, 1, "M");
  field_x(&m, 2, "a", 1, 1, 5, NULL, NULL);
  w_int(&range, 1, 100);
  w_int(&range, 2, 201);
  w_sub(&m, 5, &range); /* extensions 100 to 200; */
  w_str(&ext, 1, "e");
  w_str(&ext, 2, ".h.M"); /* extend M { optional int32 e = 100; } */
  w_int(&ext, 3, 100);
  w_int(&ext, 4, 1);
  w_int(&ext, 5, 5);
  one_open(&o, &m, &ext, "proto2");
  assert_int_equal(conch_dynamic_message(o.dyn, "h.M", &md), 0);
  /* Not built: the extension is no message and no field of M. */
  assert_int_equal(conch_dynamic_message(o.dyn, "h.e", &md),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_message(o.dyn, "h.M", &md), 0);
  assert_int_equal(md->n_fields, 1);
  /* In protobuf its bytes pass through, as unknown fields do. */
  msg = protobuf_c_message_unpack(md, NULL, sizeof(wire), wire);
  assert_non_null(msg);
  assert_int_equal(protobuf_c_message_get_packed_size(msg), sizeof(wire));
  assert_int_equal(protobuf_c_message_pack(msg, back), sizeof(wire));
  assert_memory_equal(back, wire, sizeof(wire));
  protobuf_c_message_free_unpacked(msg, NULL);
  /* JSON: not written; a key "[h.e]" is refused, clearly. */
  assert_int_equal(conch_dynamic_pb_to_json(o.dyn, md, wire, sizeof(wire),
                                            &json, &jl, NULL),
                   0);
  assert_string_equal(json, "{\"a\":1}");
  conch_dynamic_buf_free(o.dyn, json);
  conch_status_init(&st);
  assert_int_equal(conch_dynamic_json_to_pb(o.dyn, md, ext_json,
                                            strlen(ext_json), &pb, &pl, &st),
                   CONCH_ERR_UNSUPPORTED);
  assert_null(pb);
  assert_int_equal(st.code, CONCH_CODE_UNIMPLEMENTED);
  assert_non_null(strstr(conch_status_message(&st), "extensions"));
  conch_status_clear(&st);
  one_close(&o);
}

static void test_service_methods(void **state) {
  fixture *fx = *state;
  const conch_method *m = (const void *)1;
  static const char *const names[] = {
      "/process.Process/List",       "/process.Process/Connect",
      "/process.Process/Start",      "/process.Process/Update",
      "/process.Process/StreamInput", "/process.Process/SendInput",
      "/process.Process/SendSignal", "/process.Process/CloseStdin"};
  size_t i;

  for (i = 0; i < 8; i++) {
    assert_int_equal(
        conch_dynamic_service_method(fx->dyn, ".process.Process", i, &m), 0);
    assert_string_equal(m->path, names[i]);
  }
  assert_int_equal(conch_dynamic_service_method(fx->dyn, "process.Process", 4,
                                                &m),
                   0);
  assert_int_equal(m->kind, CONCH_STREAM_CLIENT);
  assert_int_equal(conch_dynamic_service_method(fx->dyn, "process.Process", 8,
                                                &m),
                   CONCH_ERR_EOF);
  assert_null(m);
  assert_int_equal(conch_dynamic_service_method(fx->dyn, "process.Nope", 0,
                                                &m),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_service_method(fx->dyn,
                                                "process.StartRequest", 0, &m),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_service_method(NULL, "process.Process", 0,
                                                &m),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_dynamic_service_method(fx->dyn, NULL, 0, &m),
                   CONCH_ERR_INVALID);
}

static void test_fileset_json(void **state) {
  static const char set[] =
      "{\"file\":[{\"name\":\"e.proto\",\"package\":\"e\",\"syntax\":"
      "\"proto3\",\"messageType\":[{\"name\":\"M\",\"field\":[{\"name\":"
      "\"payload\",\"number\":1,\"label\":\"LABEL_OPTIONAL\",\"type\":"
      "\"TYPE_BYTES\",\"jsonName\":\"data\"},{\"name\":\"n\",\"number\":2,"
      "\"label\":\"LABEL_REPEATED\",\"type\":\"TYPE_ENUM\",\"typeName\":"
      "\".e.E\"}]}],\"enumType\":[{\"name\":\"E\",\"value\":[{\"name\":"
      "\"E_ZERO\",\"number\":0},{\"name\":\"E_ONE\",\"number\":1}]}],"
      "\"service\":[{\"name\":\"S\",\"method\":[{\"name\":\"Do\","
      "\"inputType\":\".e.M\",\"outputType\":\".e.M\","
      "\"serverStreaming\":true}]}]}]}";
  conch_fileset *fs = NULL;
  conch_descpool *pool = NULL;
  conch_dynamic *dyn = NULL;
  const conch_method *m = NULL;
  uint8_t *pb = NULL;
  size_t pl = 0, jl = 0;
  char *json = NULL;
  static const char in[] = "{\"data\":\"aGk=\",\"n\":[\"E_ONE\",0]}";
  (void)state;

  assert_int_equal(conch_fileset_new(&fs, NULL), 0);
  assert_int_equal(conch_fileset_add_set_json(fs, set, strlen(set)), 0);
  assert_int_equal(conch_fileset_n_files(fs), 1);
  assert_string_equal(conch_fileset_file_at(fs, 0)->name, "e.proto");
  assert_int_equal(conch_descpool_new(&pool, NULL), 0);
  assert_int_equal(conch_fileset_to_pool(fs, pool), 0);
  assert_int_equal(conch_dynamic_new(&dyn, pool, NULL), 0);
  assert_int_equal(conch_dynamic_method(dyn, "e.S/Do", &m), 0);
  assert_int_equal(m->kind, CONCH_STREAM_SERVER);
  assert_int_equal(conch_dynamic_json_to_pb(dyn, m->input, in, strlen(in), &pb,
                                            &pl, NULL),
                   0);
  assert_int_equal(
      conch_dynamic_pb_to_json(dyn, m->output, pb, pl, &json, &jl, NULL), 0);
  assert_string_equal(json, "{\"data\":\"aGk=\",\"n\":[\"E_ONE\",\"E_ZERO\"]}");
  conch_dynamic_buf_free(dyn, pb);
  conch_dynamic_buf_free(dyn, json);
  conch_dynamic_free(dyn);
  conch_descpool_free(pool);

  /* JSON that is no FileDescriptorSet: refused, the set unchanged. */
  assert_int_equal(conch_fileset_add_set_json(fs, "{\"file\":3}", 10),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_fileset_add_set_json(fs, "[", 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_fileset_add_set_json(fs, "{\"file\":[{}]}", 13),
                   CONCH_ERR_INVALID); /* a file without a name */
  assert_int_equal(conch_fileset_add_set_json(NULL, "{}", 2),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_fileset_add_set_json(fs, "{}", 2), 0); /* none */
  assert_int_equal(conch_fileset_n_files(fs), 1);
  conch_fileset_free(fs);

  /* The failing allocator: every failure clean, then a success. */
  {
    size_t k;
    int done = 0;
    for (k = 0; !done && k < 100000; k++) {
      int rc;
      failmem_fail_at(k);
      rc = conch_fileset_new(&fs, failmem_hooks());
      if (rc == 0) {
        rc = conch_fileset_add_set_json(fs, set, strlen(set));
        conch_fileset_free(fs);
        fs = NULL;
      }
      if (failmem_fired()) {
        assert_int_equal(rc, CONCH_ERR_NOMEM);
      } else {
        assert_int_equal(rc, 0);
        done = 1;
      }
      failmem_fail_at((size_t)-1);
      assert_int_equal(failmem_live_blocks(), 0);
    }
    assert_true(done);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_scalars, setup, teardown),
      cmocka_unit_test_setup_teardown(test_repeats, setup, teardown),
      cmocka_unit_test_setup_teardown(test_maps, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oneofs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wkt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_proto2, setup, teardown),
      cmocka_unit_test_setup_teardown(test_process_and_methods, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_conchtest, setup, teardown),
      cmocka_unit_test(test_hostile),
      cmocka_unit_test(test_hostile_sizes),
      cmocka_unit_test_setup_teardown(test_args, setup, teardown),
      cmocka_unit_test(test_failmem),
      cmocka_unit_test(test_failures_keep_nothing),
      cmocka_unit_test(test_fileset),
      cmocka_unit_test(test_fileset_failmem),
      cmocka_unit_test(test_json_name),
      cmocka_unit_test(test_json_name_proto2),
      cmocka_unit_test(test_bytes_default),
      cmocka_unit_test(test_extensions),
      cmocka_unit_test_setup_teardown(test_service_methods, setup, teardown),
      cmocka_unit_test(test_fileset_json),
  };
  load_fds();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
