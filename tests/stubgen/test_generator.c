/* protoc-gen-conch's generator driven directly: protobuf-c's naming rules,
   whole requests as protoc sends them (the committed outputs must come
   out, twice the same), and inputs it must refuse with an error rather
   than crash on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "names.h"
#include "requests.h"
#include "stubgen.h"

/* ---- Failing allocations ------------------------------------------------- */

/* The test links with --wrap=malloc,calloc,realloc, so every allocation of
   the generator (and of this file) comes through here; |fail_at| >= 0
   makes that allocation fail. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static long fail_at = -1;
static long allocs;
static int fired;

static int should_fail(void) {
  if (fail_at >= 0 && allocs++ == fail_at) {
    fired = 1;
    return 1;
  }
  return 0;
}

void *__wrap_malloc(size_t n) {
  return should_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size) {
  return should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n) {
  return should_fail() ? NULL : __real_realloc(p, n);
}

/* ---- Naming -------------------------------------------------------------- */

static void expect_fn(void (*fn)(sg_buf *, const char *), const char *in,
                      const char *out) {
  sg_buf b;
  sg_buf_init(&b);
  fn(&b, in);
  assert_false(b.oom);
  assert_string_equal(sg_buf_str(&b), out);
  sg_buf_free(&b);
}

static void expect_full(void (*fn)(sg_buf *, const sg_scope *, const char *),
                        const char *package, const char *c_package,
                        const char *full, const char *out) {
  sg_scope s;
  sg_buf b;
  s.package = package;
  s.c_package = c_package;
  sg_buf_init(&b);
  fn(&b, &s, full);
  assert_string_equal(sg_buf_str(&b), out);
  sg_buf_free(&b);
}

static void test_names(void **state) {
  (void)state;
  /* protoc-c's CamelToLower: '_' only where a capital follows a
     non-capital. */
  expect_fn(sg_camel_to_lower, "StartRequest", "start_request");
  expect_fn(sg_camel_to_lower, "PTY", "pty");
  expect_fn(sg_camel_to_lower, "HTTPServer", "httpserver");
  expect_fn(sg_camel_to_lower, "getHTTP", "get_http");
  expect_fn(sg_camel_to_lower, "Get_Thing", "get__thing");
  expect_fn(sg_camel_to_lower, "_x", "_x");
  expect_fn(sg_camel_to_lower, "a1B", "a1_b");
  /* ToCamel: underscores go, the letter after them is raised. */
  expect_fn(sg_to_camel, "start_request", "StartRequest");
  expect_fn(sg_to_camel, "Get_Thing", "GetThing");
  expect_fn(sg_to_camel, "x__y", "XY");
  expect_fn(sg_to_camel, "PTY", "PTY");
  expect_fn(sg_to_camel, "_", "");
  expect_fn(sg_file_ident, "process/process.proto",
            "process_2fprocess_2eproto");
  expect_fn(sg_strip_proto, "a/b.proto", "a/b");
  expect_fn(sg_strip_proto, "a/b.protodevel", "a/b");
  expect_fn(sg_strip_proto, "a/b.txt", "a/b.txt");

  expect_full(sg_full_lower, "process", NULL, "process.ProcessEvent.DataEvent",
              "process__process_event__data_event");
  expect_full(sg_full_c, "process", NULL, "process.ProcessEvent.DataEvent",
              "Process__ProcessEvent__DataEvent");
  expect_full(sg_full_lower, "", NULL, "Ping.Inner", "ping__inner");
  /* (pb_c_file).c_package replaces the package. */
  expect_full(sg_full_lower, "a.b", "x.y", "a.b.Msg", "x__y__msg");
  expect_full(sg_full_c, "a.b", "x.y", "a.b.Msg.Sub", "X__Y__Msg__Sub");
  expect_full(sg_full_lower, "", "x", "Msg", "x__msg");

  assert_true(sg_is_ident("_a1"));
  assert_false(sg_is_ident("1a"));
  assert_false(sg_is_ident(""));
  assert_false(sg_is_ident("a-b"));
  assert_true(sg_is_dotted("a.b_c.D", 0));
  assert_true(sg_is_dotted("", 1));
  assert_false(sg_is_dotted("", 0));
  assert_false(sg_is_dotted("a..b", 0));
  assert_false(sg_is_dotted("a.", 0));
  assert_true(sg_is_c_keyword("register"));
  assert_false(sg_is_c_keyword("Register"));
}

/* ---- Whole requests ------------------------------------------------------ */

static Conch__Plugin__CodeGeneratorRequest *load(const char *path) {
  size_t len;
  uint8_t *buf = sg_read_file(path, &len);
  Conch__Plugin__CodeGeneratorRequest *req;
  assert_non_null(buf);
  req = conch__plugin__code_generator_request__unpack(NULL, len, buf);
  free(buf);
  assert_non_null(req);
  return req;
}

static void expect_file(const sg_result *res, const char *name,
                        const char *path) {
  size_t i, len;
  uint8_t *want = sg_read_file(path, &len);
  assert_non_null(want);
  for (i = 0; i < res->nfiles; i++) {
    if (strcmp(res->files[i].name, name) == 0) {
      assert_int_equal(res->files[i].len, len);
      assert_memory_equal(res->files[i].content, want, len);
      free(want);
      return;
    }
  }
  fail_msg("no output %s", name);
}

static void same_result(const sg_result *a, const sg_result *b) {
  size_t i;
  assert_int_equal(a->nfiles, b->nfiles);
  for (i = 0; i < a->nfiles; i++) {
    assert_string_equal(a->files[i].name, b->files[i].name);
    assert_int_equal(a->files[i].len, b->files[i].len);
    assert_memory_equal(a->files[i].content, b->files[i].content,
                        a->files[i].len);
  }
}

/* process.proto as it is, with proto3 `optional` (the committed stubs were
   made from the oneof rewrite; the stubs do not depend on fields). */
static void test_process(void **state) {
  Conch__Plugin__CodeGeneratorRequest *req = load(SG_REQUESTS "/process.req");
  sg_result a, b;
  (void)state;

  assert_int_equal(sg_generate(req, &a), 0);
  assert_null(a.error);
  assert_int_equal(a.nfiles, 2);
  expect_file(&a, "process/process.conch.h",
              CONCH_SOURCE_DIR "/gen/process/process.conch.h");
  expect_file(&a, "process/process.conch.c",
              CONCH_SOURCE_DIR "/gen/process/process.conch.c");
  assert_int_equal(sg_generate(req, &b), 0);
  same_result(&a, &b);
  sg_result_free(&a);
  sg_result_free(&b);
  conch__plugin__code_generator_request__free_unpacked(req, NULL);
}

static void test_stubgen(void **state) {
  Conch__Plugin__CodeGeneratorRequest *req = load(SG_REQUESTS "/stubgen.req");
  sg_result a;
  (void)state;

  assert_int_equal(sg_generate(req, &a), 0);
  assert_null(a.error);
  assert_int_equal(a.nfiles, 6);
  expect_file(&a, "stubgen.conch.h", SG_GOLDEN "/stubgen.conch.h");
  expect_file(&a, "stubgen/nested/v1/nested.conch.c",
              SG_GOLDEN "/stubgen/nested/v1/nested.conch.c");
  sg_result_free(&a);
  conch__plugin__code_generator_request__free_unpacked(req, NULL);
}

/* ---- Refused inputs ------------------------------------------------------ */

static void expect_error(const Conch__Plugin__CodeGeneratorRequest *req,
                         const char *part) {
  sg_result res;
  assert_int_equal(sg_generate(req, &res), 0);
  assert_non_null(res.error);
  if (strstr(res.error, part) == NULL) {
    fail_msg("error \"%s\" lacks \"%s\"", res.error, part);
  }
  assert_int_equal(res.nfiles, 0);
  sg_result_free(&res);
}

static void test_refused(void **state) {
  Conch__Plugin__CodeGeneratorRequest *req = load(SG_REQUESTS "/stubgen.req");
  Conch__Plugin__FileDescriptorProto *f = NULL;
  Conch__Plugin__MethodDescriptorProto *m;
  char *save, *save2;
  size_t i;
  (void)state;

  for (i = 0; i < req->n_proto_file; i++) {
    if (strcmp(req->proto_file[i]->name, "stubgen.proto") == 0) {
      f = req->proto_file[i];
    }
  }
  assert_non_null(f);
  m = f->service[0]->method[0];

  save = req->parameter;
  req->parameter = "verbose";
  expect_error(req, "takes no options");
  req->parameter = save;

  save = req->file_to_generate[0];
  req->file_to_generate[0] = "missing.proto";
  expect_error(req, "missing.proto: not among the files");
  req->file_to_generate[0] = save;

  save = m->input_type;
  m->input_type = ".NoSuchType";
  expect_error(req, "unknown message type .NoSuchType");
  m->input_type = NULL;
  expect_error(req, "has no input or output type");
  m->input_type = save;

  save = m->name;
  m->name = "Un-ary";
  expect_error(req, "invalid method name");
  m->name = save;

  save = f->service[1]->name;
  f->service[1]->name = "";
  expect_error(req, "invalid service name");
  f->service[1]->name = save;

  save = f->message_type[0]->name;
  f->message_type[0]->name = "Ping.X";
  expect_error(req, "invalid message name");
  f->message_type[0]->name = "Pong"; /* now defined twice */
  expect_error(req, "message Pong is defined twice");
  f->message_type[0]->name = save;

  save = f->package;
  f->package = "a..b";
  expect_error(req, "invalid package name");
  f->package = save;

  /* A file name that would break #include or a comment. */
  save = f->name;
  save2 = req->file_to_generate[0];
  f->name = "a\"b.proto";
  req->file_to_generate[0] = f->name;
  expect_error(req, "unusable file name");
  f->name = "x*/y.proto";
  req->file_to_generate[0] = f->name;
  expect_error(req, "unusable file name");
  f->name = save;
  req->file_to_generate[0] = save2;

  save = req->file_to_generate[1];
  req->file_to_generate[1] = req->file_to_generate[0];
  expect_error(req, "named twice");
  req->file_to_generate[1] = save;

  /* Still good after the round trip through all of this. */
  {
    sg_result res;
    assert_int_equal(sg_generate(req, &res), 0);
    assert_null(res.error);
    sg_result_free(&res);
  }
  conch__plugin__code_generator_request__free_unpacked(req, NULL);
}

/* A request built by hand: one file, |n| nested messages. */
typedef struct hand {
  Conch__Plugin__CodeGeneratorRequest req;
  Conch__Plugin__FileDescriptorProto file;
  Conch__Plugin__FileDescriptorProto *files[1];
  char *gen[1];
  Conch__Plugin__DescriptorProto msgs[200];
  Conch__Plugin__DescriptorProto *nested[200];
} hand;

static void hand_init(hand *h, size_t depth) {
  size_t i;
  memset(h, 0, sizeof(*h));
  conch__plugin__code_generator_request__init(&h->req);
  conch__plugin__file_descriptor_proto__init(&h->file);
  h->file.name = "hand/made.proto";
  h->files[0] = &h->file;
  h->gen[0] = "hand/made.proto";
  h->req.n_proto_file = 1;
  h->req.proto_file = h->files;
  h->req.n_file_to_generate = 1;
  h->req.file_to_generate = h->gen;
  for (i = 0; i < depth && i < 200; i++) {
    conch__plugin__descriptor_proto__init(&h->msgs[i]);
    h->msgs[i].name = "N";
    h->nested[i] = &h->msgs[i];
    if (i > 0) {
      h->msgs[i - 1].n_nested_type = 1;
      h->msgs[i - 1].nested_type = &h->nested[i];
    }
  }
  if (depth > 0) {
    h->file.n_message_type = 1;
    h->file.message_type = &h->nested[0];
  }
}

static void test_hand_made(void **state) {
  Conch__Plugin__FileOptions opts = CONCH__PLUGIN__FILE_OPTIONS__INIT;
  Conch__Plugin__ProtobufCFileOptions pbc =
      CONCH__PLUGIN__PROTOBUF_CFILE_OPTIONS__INIT;
  hand *h = malloc(sizeof(*h));
  sg_result res;
  (void)state;

  /* No services: both files, saying so. */
  hand_init(h, 3);
  assert_int_equal(sg_generate(&h->req, &res), 0);
  assert_null(res.error);
  assert_int_equal(res.nfiles, 2);
  assert_string_equal(res.files[0].name, "hand/made.conch.h");
  assert_non_null(strstr(res.files[0].content, "declares no services"));
  assert_string_equal(res.files[1].name, "hand/made.conch.c");
  sg_result_free(&res);

  /* Deeper than the generator walks. */
  hand_init(h, 200);
  expect_error(&h->req, "nested deeper than");

  /* protoc-c writes nothing for a no_generate file; neither do we. */
  hand_init(h, 1);
  pbc.has_no_generate = 1;
  pbc.no_generate = 1;
  opts.pb_c_file = &pbc;
  h->file.options = &opts;
  assert_int_equal(sg_generate(&h->req, &res), 0);
  assert_null(res.error);
  assert_int_equal(res.nfiles, 0);
  sg_result_free(&res);

  pbc.no_generate = 0;
  pbc.c_package = "not valid";
  expect_error(&h->req, "invalid (pb_c_file).c_package");
  free(h);
}

/* Each allocation of a whole run fails in turn: the run reports it (-1)
   and frees everything (LeakSanitizer and valgrind watch). */
static void test_every_allocation_fails(void **state) {
  Conch__Plugin__CodeGeneratorRequest *req = load(SG_REQUESTS "/stubgen.req");
  long n;
  (void)state;

  for (n = 0;; n++) {
    sg_result res;
    int rv;
    allocs = 0;
    fired = 0;
    fail_at = n;
    rv = sg_generate(req, &res);
    fail_at = -1;
    sg_result_free(&res);
    if (!fired) {
      assert_int_equal(rv, 0);
      break;
    }
    assert_int_equal(rv, -1);
  }
  assert_true(n > 100);
  conch__plugin__code_generator_request__free_unpacked(req, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_process),
      cmocka_unit_test(test_stubgen),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_hand_made),
      cmocka_unit_test(test_every_allocation_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
