/* runtime/codec/pbdec.c: the one-pass decoder must give, for every input it
   takes, the message protobuf-c gives for the same bytes, and must take the
   ordinary ones (otherwise it saves nothing).  Inputs are random messages
   of the test protos (every scalar type, packed and unpacked repeats, maps,
   oneofs, proto2 presence), some with unknown or repeated fields, long
   varints, and some then damaged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pbdec.h"
#include "process/process.pb-c.h"

/* The test protos' protoc-c output, compiled here (as test_pbjson does). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "google/protobuf/any.pb-c.c"
#include "google/protobuf/duration.pb-c.c"
#include "google/protobuf/empty.pb-c.c"
#include "google/protobuf/field_mask.pb-c.c"
#include "google/protobuf/struct.pb-c.c"
#include "google/protobuf/timestamp.pb-c.c"
#include "google/protobuf/wrappers.pb-c.c"
#include "pbjson/types.pb-c.c"
#include "pbjson/types2.pb-c.c"
#pragma GCC diagnostic pop

/* An allocator that frees everything at once, as the client's arena. */
static void *blocks[4096];
static size_t nblocks;

static void *t_alloc(void *ud, size_t n) {
  (void)ud;
  if (nblocks == sizeof(blocks) / sizeof(blocks[0])) {
    return NULL;
  }
  blocks[nblocks] = malloc(n);
  return blocks[nblocks] != NULL ? blocks[nblocks++] : NULL;
}

static void t_free(void *ud, void *p) {
  (void)ud;
  (void)p;
}

static ProtobufCAllocator arena = {t_alloc, t_free, NULL};

/* Kept across the whole run, as a client keeps it: every test message
   type goes through it, colliding slots included. */
static conch_pbdec_cache pcache;

static void arena_reset(void) {
  while (nblocks > 0) {
    free(blocks[--nblocks]);
  }
}

static uint64_t rs = 0x9e3779b97f4a7c15u;

static uint64_t rnd64(void) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return rs;
}

static unsigned rnd(unsigned n) { return (unsigned)(rnd64() % n); }

typedef struct gbuf {
  uint8_t b[8192];
  size_t n;
} gbuf;

static void put(gbuf *g, uint8_t c) {
  if (g->n < sizeof(g->b)) {
    g->b[g->n++] = c;
  }
}

static void put_varint(gbuf *g, uint64_t v, int pad) {
  while (v >= 0x80) {
    put(g, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  if (pad) { /* a longer encoding of the same value */
    put(g, (uint8_t)(v | 0x80));
    put(g, 0);
  } else {
    put(g, (uint8_t)v);
  }
}

static uint64_t rnd_value(void) {
  switch (rnd(5)) {
  case 0:
    return 0;
  case 1:
    return rnd(3);
  case 2:
    return rnd(300);
  case 3:
    return (uint64_t)-(int64_t)(rnd(5) + 1);
  default:
    return rnd64();
  }
}

static void put_len(gbuf *g, const gbuf *in) {
  size_t i;
  put_varint(g, in->n, rnd(16) == 0);
  for (i = 0; i < in->n; i++) {
    put(g, in->b[i]);
  }
}

static void gen_msg(gbuf *g, const ProtobufCMessageDescriptor *d, int depth);

static void gen_scalar(gbuf *g, ProtobufCType t) {
  unsigned i;
  switch (t) {
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT:
    for (i = 0; i < 4; i++) {
      put(g, (uint8_t)rnd64());
    }
    break;
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    for (i = 0; i < 8; i++) {
      put(g, (uint8_t)rnd64());
    }
    break;
  default:
    put_varint(g, rnd_value(), rnd(16) == 0);
  }
}

static int wire(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_FLOAT:
    return 5;
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 1;
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_BYTES:
  case PROTOBUF_C_TYPE_MESSAGE:
    return 2;
  default:
    return 0;
  }
}

static void gen_field(gbuf *g, const ProtobufCFieldDescriptor *f, int depth) {
  gbuf *in;
  unsigned i, n;
  int w = wire(f->type);
  if (f->label == PROTOBUF_C_LABEL_REPEATED && w != 2 && rnd(2) == 0) {
    in = calloc(1, sizeof(*in)); /* packed */
    n = rnd(5);
    for (i = 0; i < n; i++) {
      gen_scalar(in, f->type);
    }
    put_varint(g, (uint64_t)f->id << 3 | 2, 0);
    put_len(g, in);
    free(in);
    return;
  }
  put_varint(g, (uint64_t)f->id << 3 | (unsigned)w, rnd(32) == 0);
  if (w != 2) {
    gen_scalar(g, f->type);
    return;
  }
  in = calloc(1, sizeof(*in));
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    if (depth < 4) {
      gen_msg(in, f->descriptor, depth + 1);
    }
  } else {
    n = rnd(12);
    for (i = 0; i < n; i++) {
      put(in, (uint8_t)(rnd(4) == 0 ? rnd64() : 'a' + rnd(26)));
    }
  }
  put_len(g, in);
  free(in);
}

static void gen_msg(gbuf *g, const ProtobufCMessageDescriptor *d, int depth) {
  unsigned k, n = rnd(depth == 0 ? 12 : 6);
  for (k = 0; k < n && d->n_fields > 0; k++) {
    if (rnd(40) == 0) { /* a field the descriptor does not know */
      put_varint(g, (uint64_t)(d->fields[d->n_fields - 1].id + 1 + rnd(3)) << 3,
                 0);
      put_varint(g, rnd_value(), 0);
      continue;
    }
    gen_field(g, &d->fields[rnd(d->n_fields)], depth);
  }
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  uint8_t *b;
  *len = protobuf_c_message_get_packed_size(m);
  b = malloc(*len + 1);
  assert_non_null(b);
  protobuf_c_message_pack(m, b);
  return b;
}

/* Decodes |p| both ways.  Returns 1 when pbdec took it (and then agreed
   with protobuf-c), 0 when it left it. */
static int check(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                 size_t len) {
  ProtobufCMessage *a = conch__pb_decode(d, &arena, p, len, &pcache);
  ProtobufCMessage *b = protobuf_c_message_unpack(d, NULL, len, p);
  int took = a != NULL;
  if (a != NULL) {
    size_t la, lb;
    uint8_t *pa, *pb;
    assert_non_null(b); /* never accepts what protobuf-c refuses */
    pa = pack(a, &la);
    pb = pack(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(pa, pb, la);
    free(pa);
    free(pb);
  }
  if (b != NULL) {
    protobuf_c_message_free_unpacked(b, NULL);
  }
  arena_reset();
  return took;
}

static const ProtobufCMessageDescriptor *const descs[] = {
    &pbjsontest__scalars__descriptor,     &pbjsontest__repeats__descriptor,
    &pbjsontest__maps__descriptor,        &pbjsontest__oneofs__descriptor,
    &pbjsontest2__p2__descriptor,         &pbjsontest2__p2__mentry__descriptor,
    &process__list_response__descriptor,
    &process__start_response__descriptor, &process__start_request__descriptor,
};

static void test_random_agree(void **state) {
  unsigned i, iters = getenv("CONCH_PBDEC_ITERS")
                          ? (unsigned)strtoul(getenv("CONCH_PBDEC_ITERS"),
                                              NULL, 10)
                          : 40000;
  unsigned took = 0, plain = 0;
  gbuf *g = malloc(sizeof(*g));
  (void)state;
  assert_non_null(g);
  for (i = 0; i < iters; i++) {
    const ProtobufCMessageDescriptor *d = descs[rnd(sizeof(descs) /
                                                    sizeof(descs[0]))];
    unsigned m;
    g->n = 0;
    gen_msg(g, d, 0);
    took += (unsigned)check(d, g->b, g->n);
    plain++;
    /* The same, damaged. */
    for (m = rnd(3) + 1; m > 0 && g->n > 0; m--) {
      switch (rnd(3)) {
      case 0:
        g->b[rnd((unsigned)g->n)] ^= (uint8_t)(1u << rnd(8));
        break;
      case 1:
        g->n = rnd((unsigned)g->n);
        break;
      default:
        g->b[rnd((unsigned)g->n)] = (uint8_t)rnd64();
      }
    }
    check(d, g->b, g->n);
  }
  free(g);
  /* Most undamaged messages are ordinary (no unknown field, no message
     given twice, proto3): pbdec must take them. */
  assert_true(took > plain / 3);
}

/* The List response of the benchmarks: taken, equal to protobuf-c's. */
static void test_list(void **state) {
  Process__ListResponse r = PROCESS__LIST_RESPONSE__INIT;
  Process__ProcessInfo info = PROCESS__PROCESS_INFO__INIT, *pi = &info;
  Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
  Process__ProcessConfig__EnvsEntry env = PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT,
                                    *pe = &env;
  char *args[] = {"-c", "true", "a", "b", "c", "d", "e", "f", "g"};
  uint8_t *b;
  size_t len;
  (void)state;
  env.key = "PATH";
  env.value = "/bin";
  cfg.cmd = "/bin/sh";
  cfg.n_args = 9; /* past two doublings of the array */
  cfg.args = args;
  cfg.n_envs = 1;
  cfg.envs = &pe;
  cfg._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
  cfg.cwd = "/tmp";
  info.config = &cfg;
  info.pid = 77;
  r.n_processes = 1;
  r.processes = &pi;
  b = pack(&r.base, &len);
  assert_int_equal(check(&process__list_response__descriptor, b, len), 1);
  free(b);
}

/* bytes fields point into the input instead of being copied. */
static void test_bytes_borrowed(void **state) {
  Pbjsontest__Scalars s = PBJSONTEST__SCALARS__INIT, *out;
  uint8_t data[40], *b;
  size_t len;
  (void)state;
  memset(data, 'x', sizeof(data));
  s.by.data = data;
  s.by.len = sizeof(data);
  s.s = "str";
  b = pack(&s.base, &len);
  out = (Pbjsontest__Scalars *)conch__pb_decode(&pbjsontest__scalars__descriptor,
                                                &arena, b, len, NULL);
  assert_non_null(out);
  assert_int_equal(out->by.len, sizeof(data));
  assert_true(out->by.data > b && out->by.data < b + len);
  assert_string_equal(out->s, "str");
  arena_reset();
  /* Empty input: the empty message. */
  out = (Pbjsontest__Scalars *)conch__pb_decode(&pbjsontest__scalars__descriptor,
                                                &arena, NULL, 0, &pcache);
  assert_non_null(out);
  assert_int_equal(out->i32, 0);
  arena_reset();
  free(b);
}

/* What it leaves to protobuf-c: unknown fields, a message given twice,
   proto2 required fields. */
static void test_left_alone(void **state) {
  static const uint8_t unknown[] = {0xf8, 0x07, 0x01};   /* field 127 */
  static const uint8_t twice[] = {0x8a, 0x01, 0x00, 0x8a, 0x01, 0x00}; /* 17 */
  static const uint8_t p2[] = {0x18, 0x01};
  (void)state;
  assert_null(conch__pb_decode(&pbjsontest__scalars__descriptor, &arena,
                               unknown, sizeof(unknown), &pcache));
  assert_null(conch__pb_decode(&pbjsontest__scalars__descriptor, &arena, twice,
                               sizeof(twice), NULL));
  assert_null(
      conch__pb_decode(&pbjsontest2__p2__descriptor, &arena, p2, sizeof(p2),
                       NULL));
  assert_int_equal(check(&pbjsontest__scalars__descriptor, twice, sizeof(twice)),
                   0);
  arena_reset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_list),
      cmocka_unit_test(test_bytes_borrowed),
      cmocka_unit_test(test_left_alone),
      cmocka_unit_test(test_random_agree),
  };
  int rv = cmocka_run_group_tests(tests, NULL, NULL);
  conch__pbdec_cache_clear(&pcache);
  return rv;
}
