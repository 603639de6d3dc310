/* Unit tests for runtime/base/metadata.c: validation, lookup, removal and
   compaction, appending, "-bin" decoding of received values, reserved
   names (CONNECT_PROTOCOL.md 3.5, 7), and allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <conch/status.h>

#include "failmem.h"
#include "metadata_int.h"

static void assert_pair(const conch_metadata *md, size_t i, const char *name,
                        const void *value, size_t len) {
  const char *n;
  const uint8_t *v;
  size_t l;

  assert_int_equal(conch_metadata_at(md, i, &n, &v, &l), 0);
  assert_string_equal(n, name);
  assert_int_equal(l, len);
  if (len > 0) {
    assert_memory_equal(v, value, len);
  }
  /* Every value is NUL-terminated. */
  assert_int_equal(v[l], 0);
}

static void test_new_free(void **state) {
  conch_metadata *md = NULL;

  (void)state;
  assert_int_equal(conch_metadata_new(NULL, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_non_null(md);
  assert_int_equal(conch_metadata_count(md), 0);
  assert_int_equal(conch_metadata_count(NULL), 0);
  assert_null(conch_metadata_get(md, "a", NULL));
  assert_int_equal(conch_metadata_find(md, "a", 0), -1);
  assert_int_equal(conch_metadata_at(md, 0, NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  conch_metadata_free(md);
  conch_metadata_free(NULL);

  failmem_fail_at(0);
  md = NULL;
  assert_int_equal(conch_metadata_new(&md, failmem_hooks()), CONCH_ERR_NOMEM);
  assert_null(md);
  failmem_fail_at((size_t)-1);
  assert_int_equal(conch_metadata_new(&md, failmem_hooks()), 0);
  assert_int_equal(conch_metadata_add_str(md, "a", "b"), 0);
  conch_metadata_free(md);
  assert_int_equal(failmem_live_blocks(), 0);
}

static void test_add_validation(void **state) {
  conch_metadata *md;
  char name[300];
  size_t len;
  int c;

  (void)state;
  assert_int_equal(conch_metadata_new(&md, NULL), 0);

  /* Arguments. */
  assert_int_equal(conch_metadata_add(NULL, "a", "b", 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_add(md, NULL, "b", 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_add(md, "a", NULL, 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_add_str(md, "a", NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_add(md, "a", NULL, 0), 0);
  assert_pair(md, 0, "a", NULL, 0);

  /* Names: [0-9A-Za-z_.-], 1..255, stored lowercase. */
  assert_int_equal(conch_metadata_add_str(md, "X-Custom_Header.9", "v"), 0);
  assert_pair(md, 1, "x-custom_header.9", "v", 1);
  assert_int_equal(conch_metadata_add_str(md, "", "v"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "a b", "v"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, ":path", "v"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "a/b", "v"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "a:b", "v"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "caf\xc3\xa9", "v"),
                   CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "a\tb", "v"), CONCH_ERR_HEADER);
  memset(name, 'n', sizeof(name));
  name[255] = '\0';
  assert_int_equal(conch_metadata_add_str(md, name, "v"), 0);
  name[255] = 'n';
  name[256] = '\0';
  assert_int_equal(conch_metadata_add_str(md, name, "v"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_count(md), 3);

  /* Text values: printable ASCII and TAB only. */
  assert_int_equal(conch_metadata_add_str(md, "t", " ~\tall printable !"), 0);
  assert_int_equal(conch_metadata_add_str(md, "t", "a\rb"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "t", "a\nb"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add(md, "t", "a\0b", 3), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "t", "\x7f"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "t", "\x80"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "t", "\xe2\x98\xba"),
                   CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add_str(md, "t", "\x1b"), CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_count(md), 4);

  /* "-bin" values: any bytes, also with an uppercase suffix. */
  assert_int_equal(conch_metadata_add(md, "x-bin", "\0\r\n\xff", 4), 0);
  assert_pair(md, 4, "x-bin", "\0\r\n\xff", 4);
  assert_int_equal(conch_metadata_add(md, "Y-BIN", "\x01", 1), 0);
  assert_pair(md, 5, "y-bin", "\x01", 1);
  /* "-bin" must be a suffix. */
  assert_int_equal(conch_metadata_add(md, "x-bin-not", "\x01", 1),
                   CONCH_ERR_HEADER);
  assert_int_equal(conch_metadata_add(md, "xbin", "\x01", 1), CONCH_ERR_HEADER);

  /* Each name character, one by one. */
  for (c = 1; c < 256; ++c) {
    int ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
             (c >= 'A' && c <= 'Z') || c == '-' || c == '_' || c == '.';
    name[0] = (char)c;
    name[1] = '\0';
    assert_int_equal(conch_metadata_add_str(md, name, "v"),
                     ok ? 0 : CONCH_ERR_HEADER);
  }
  /* And each text value byte. */
  for (c = 0; c < 256; ++c) {
    uint8_t v = (uint8_t)c;
    int ok = (c >= 0x20 && c <= 0x7e) || c == '\t';
    assert_int_equal(conch_metadata_add(md, "v", &v, 1),
                     ok ? 0 : CONCH_ERR_HEADER);
  }
  /* Reserved names are the sender's business, not the list's. */
  assert_int_equal(conch_metadata_add_str(md, "grpc-status", "0"), 0);
  assert_non_null(conch_metadata_get(md, "GRPC-STATUS", &len));
  assert_int_equal(len, 1);
  conch_metadata_free(md);
}

static void test_get_find(void **state) {
  conch_metadata *md;
  const char *v;
  size_t len;

  (void)state;
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "Foo", "1"), 0);
  assert_int_equal(conch_metadata_add_str(md, "bar", "x"), 0);
  assert_int_equal(conch_metadata_add_str(md, "FOO", "2"), 0);
  assert_int_equal(conch_metadata_add_str(md, "foo", "3"), 0);

  v = conch_metadata_get(md, "fOo", &len);
  assert_non_null(v);
  assert_string_equal(v, "1");
  assert_int_equal(len, 1);
  assert_string_equal(conch_metadata_get(md, "BAR", NULL), "x");
  len = 99;
  assert_null(conch_metadata_get(md, "baz", &len));
  assert_int_equal(len, 0);
  assert_null(conch_metadata_get(md, "fo", NULL));
  assert_null(conch_metadata_get(md, "fooo", NULL));
  assert_null(conch_metadata_get(md, NULL, NULL));
  assert_null(conch_metadata_get(NULL, "foo", NULL));

  /* The values of one name, in order. */
  assert_int_equal(conch_metadata_find(md, "FOO", 0), 0);
  assert_int_equal(conch_metadata_find(md, "foo", 1), 2);
  assert_int_equal(conch_metadata_find(md, "foo", 3), 3);
  assert_int_equal(conch_metadata_find(md, "foo", 4), -1);
  assert_int_equal(conch_metadata_find(md, "foo", 1000), -1);
  assert_int_equal(conch_metadata_find(md, NULL, 0), -1);
  assert_int_equal(conch_metadata_find(NULL, "foo", 0), -1);
  assert_pair(md, 2, "foo", "2", 1);
  assert_pair(md, 3, "foo", "3", 1);
  assert_int_equal(conch_metadata_at(md, 4, NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_at(NULL, 0, NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_at(md, 0, NULL, NULL, NULL), 0);
  conch_metadata_free(md);
}

static void test_remove_reset(void **state) {
  conch_metadata *md;
  size_t i, cap = 0;
  char v[64];

  (void)state;
  assert_int_equal(conch_metadata_new(&md, NULL), 0);
  assert_int_equal(conch_metadata_add_str(md, "a", "1"), 0);
  assert_int_equal(conch_metadata_add_str(md, "b", "2"), 0);
  assert_int_equal(conch_metadata_add_str(md, "A", "3"), 0);
  assert_int_equal(conch_metadata_add_str(md, "c", "4"), 0);
  assert_int_equal(conch_metadata_add_str(md, "a", "5"), 0);
  assert_int_equal(conch_metadata_remove(md, "A"), 3);
  assert_int_equal(conch_metadata_count(md), 2);
  assert_pair(md, 0, "b", "2", 1);
  assert_pair(md, 1, "c", "4", 1);
  assert_int_equal(conch_metadata_remove(md, "a"), 0);
  assert_int_equal(conch_metadata_remove(md, NULL), 0);
  assert_int_equal(conch_metadata_remove(NULL, "a"), 0);
  /* Garbage is gone: only "b\0" "2\0" "c\0" "4\0" remain. */
  assert_int_equal(md->strings.len, 8);
  assert_int_equal(conch_metadata_add_str(md, "d", "6"), 0);
  assert_pair(md, 2, "d", "6", 1);
  assert_int_equal(conch_metadata_remove(md, "b"), 1);
  assert_pair(md, 0, "c", "4", 1);
  assert_pair(md, 1, "d", "6", 1);

  /* Adding and removing forever keeps the memory bounded. */
  for (i = 0; i < 20000; ++i) {
    snprintf(v, sizeof(v), "value number %zu", i);
    assert_int_equal(conch_metadata_add_str(md, "churn", v), 0);
    assert_int_equal(conch_metadata_add_str(md, "keep", v), 0);
    assert_int_equal(conch_metadata_remove(md, "churn"), 1);
    assert_int_equal(conch_metadata_remove(md, "keep"), 1);
    if (i == 100) {
      cap = md->strings.cap;
    }
  }
  assert_int_equal(md->strings.cap, cap);
  assert_true(md->cap <= 8);
  assert_int_equal(conch_metadata_count(md), 2);
  assert_pair(md, 0, "c", "4", 1);
  assert_pair(md, 1, "d", "6", 1);

  conch_metadata_reset(md);
  conch_metadata_reset(NULL);
  assert_int_equal(conch_metadata_count(md), 0);
  assert_null(conch_metadata_get(md, "c", NULL));
  assert_int_equal(conch_metadata_add_str(md, "e", "7"), 0);
  assert_pair(md, 0, "e", "7", 1);
  conch_metadata_free(md);
}

static void test_append(void **state) {
  conch_metadata *a, *b;
  size_t i;

  (void)state;
  assert_int_equal(conch_metadata_new(&a, NULL), 0);
  assert_int_equal(conch_metadata_new(&b, NULL), 0);
  assert_int_equal(conch_metadata_add_str(a, "x", "1"), 0);
  assert_int_equal(conch_metadata_add_str(b, "y", "2"), 0);
  assert_int_equal(conch_metadata_add(b, "z-bin", "\0\1", 2), 0);
  assert_int_equal(conch_metadata_append(a, b), 0);
  assert_int_equal(conch_metadata_count(a), 3);
  assert_pair(a, 0, "x", "1", 1);
  assert_pair(a, 1, "y", "2", 1);
  assert_pair(a, 2, "z-bin", "\0\1", 2);
  assert_int_equal(conch_metadata_count(b), 2);

  /* Onto itself, large enough to move the buffers. */
  for (i = 0; i < 6; ++i) {
    assert_int_equal(conch_metadata_append(a, a), 0);
  }
  assert_int_equal(conch_metadata_count(a), 3 * 64);
  for (i = 0; i < 3 * 64; i += 3) {
    assert_pair(a, i, "x", "1", 1);
    assert_pair(a, i + 1, "y", "2", 1);
    assert_pair(a, i + 2, "z-bin", "\0\1", 2);
  }
  /* An empty source. */
  conch_metadata_reset(b);
  assert_int_equal(conch_metadata_append(a, b), 0);
  assert_int_equal(conch_metadata_count(a), 3 * 64);
  assert_int_equal(conch_metadata_append(NULL, b), CONCH_ERR_INVALID);
  assert_int_equal(conch_metadata_append(a, NULL), CONCH_ERR_INVALID);
  conch_metadata_free(a);
  conch_metadata_free(b);
}

static void test_add_wire(void **state) {
  conch_metadata md;

  (void)state;
  conch__metadata_init(&md, NULL);
  /* Text: no validation beyond HTTP/2's, name lowercased. */
  assert_int_equal(conch__metadata_add_wire(&md, "X-Foo", 5, "a,b \x80", 5), 0);
  assert_pair(&md, 0, "x-foo", "a,b \x80", 5);

  /* Binary: padded, unpadded, comma-separated with optional spaces. */
  assert_int_equal(conch__metadata_add_wire(&md, "A-Bin", 5, "AQID", 4), 0);
  assert_pair(&md, 1, "a-bin", "\x01\x02\x03", 3);
  assert_int_equal(conch__metadata_add_wire(&md, "a-bin", 5, "AQ==", 4), 0);
  assert_pair(&md, 2, "a-bin", "\x01", 1);
  assert_int_equal(conch__metadata_add_wire(&md, "a-bin", 5, "AQ", 2), 0);
  assert_pair(&md, 3, "a-bin", "\x01", 1);
  assert_int_equal(
      conch__metadata_add_wire(&md, "b-bin", 5, "AAEC,AwQ=, BQ ,\tBgc", 19), 0);
  assert_int_equal(conch_metadata_count(&md), 8);
  assert_pair(&md, 4, "b-bin", "\x00\x01\x02", 3);
  assert_pair(&md, 5, "b-bin", "\x03\x04", 2);
  assert_pair(&md, 6, "b-bin", "\x05", 1);
  assert_pair(&md, 7, "b-bin", "\x06\x07", 2);
  /* Empty value and empty elements are empty byte strings. */
  assert_int_equal(conch__metadata_add_wire(&md, "c-bin", 5, "", 0), 0);
  assert_pair(&md, 8, "c-bin", NULL, 0);
  assert_int_equal(conch__metadata_add_wire(&md, "d-bin", 5, "AQ,,Ag", 6), 0);
  assert_int_equal(conch_metadata_count(&md), 12);
  assert_pair(&md, 9, "d-bin", "\x01", 1);
  assert_pair(&md, 10, "d-bin", NULL, 0);
  assert_pair(&md, 11, "d-bin", "\x02", 1);
  conch__metadata_clear(&md);

  /* Anything invalid keeps the whole value verbatim, as one pair. */
  conch__metadata_init(&md, NULL);
  assert_int_equal(conch__metadata_add_wire(&md, "e-bin", 5, "!!!!", 4), 0);
  assert_pair(&md, 0, "e-bin", "!!!!", 4);
  assert_int_equal(conch__metadata_add_wire(&md, "e-bin", 5, "AQID,A", 6), 0);
  assert_pair(&md, 1, "e-bin", "AQID,A", 6);
  assert_int_equal(conch__metadata_add_wire(&md, "e-bin", 5, "A-_B", 4), 0);
  assert_pair(&md, 2, "e-bin", "A-_B", 4);
  assert_int_equal(conch__metadata_add_wire(&md, "e-bin", 5, "AQ=", 3), 0);
  assert_pair(&md, 3, "e-bin", "AQ=", 3);
  assert_int_equal(conch__metadata_add_wire(&md, "e-bin", 5, "AQ=,AQ", 6), 0);
  assert_pair(&md, 4, "e-bin", "AQ=,AQ", 6);
  assert_int_equal(conch_metadata_count(&md), 5);

  /* Raw: no decoding even for "-bin". */
  assert_int_equal(conch__metadata_add_raw(&md, "F-Bin", 5, "AQID", 4), 0);
  assert_pair(&md, 5, "f-bin", "AQID", 4);
  /* Only |name_len| bytes of the name count. */
  assert_int_equal(conch__metadata_add_raw(&md, "g-binary", 5, "v", 1), 0);
  assert_pair(&md, 6, "g-bin", "v", 1);
  conch__metadata_clear(&md);
  conch__metadata_clear(NULL);
}

/* Received names are lowercased whatever their length and wherever the
   capitals sit (the check goes eight bytes at a time), and bytes past
   ASCII are kept as they are. */
static void test_wire_lowercase(void **state) {
  static const char *const in[] = {
      "x-lowercase-already-long", "X", "abcdefgH", "abcdefghI",
      "abcdefghijklmnoZ", "@[`{", "a\x80" "B\xff" "z-name-long", "ZZZZZZZZZZZZZZZZ",
  };
  static const char *const out[] = {
      "x-lowercase-already-long", "x", "abcdefgh", "abcdefghi",
      "abcdefghijklmnoz", "@[`{", "a\x80" "b\xff" "z-name-long", "zzzzzzzzzzzzzzzz",
  };
  conch_metadata md;
  size_t i;
  (void)state;
  conch__metadata_init(&md, NULL);
  for (i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
    assert_int_equal(
        conch__metadata_add_wire(&md, in[i], strlen(in[i]), "v", 1), 0);
    assert_pair(&md, i, out[i], "v", 1);
  }
  conch__metadata_clear(&md);
}

static void test_name_value_ok(void **state) {
  char name[257];

  (void)state;
  assert_true(conch__metadata_name_ok("x-custom_1.2", 12));
  assert_false(conch__metadata_name_ok("X-Custom", 8));
  assert_false(conch__metadata_name_ok("", 0));
  assert_false(conch__metadata_name_ok("a b", 3));
  assert_false(conch__metadata_name_ok(":path", 5));
  memset(name, 'a', sizeof(name));
  assert_true(conch__metadata_name_ok(name, 255));
  assert_false(conch__metadata_name_ok(name, 256));

  assert_true(conch__metadata_value_ok((const uint8_t *)"", 0));
  assert_true(conch__metadata_value_ok((const uint8_t *)" a\t~", 4));
  assert_false(conch__metadata_value_ok((const uint8_t *)"a\r", 2));
  assert_false(conch__metadata_value_ok((const uint8_t *)"\n", 1));
  assert_false(conch__metadata_value_ok((const uint8_t *)"\0", 1));
  assert_false(conch__metadata_value_ok((const uint8_t *)"\x7f", 1));
  assert_false(conch__metadata_value_ok((const uint8_t *)"\xc3\xa9", 2));

  assert_true(conch__metadata_is_bin("x-bin", 5));
  assert_true(conch__metadata_is_bin("X-BIN", 5));
  assert_true(conch__metadata_is_bin("-bin", 4));
  assert_false(conch__metadata_is_bin("bin", 3));
  assert_false(conch__metadata_is_bin("xbin", 4));
  assert_false(conch__metadata_is_bin("x-bin2", 6));
  assert_false(conch__metadata_is_bin("x-binary", 5 + 3));
  assert_true(conch__metadata_is_bin("x-binary", 5));
}

static void test_reserved(void **state) {
  static const char *const reserved[] = {
      ":path",
      ":authority",
      ":",
      "connection",
      "keep-alive",
      "proxy-connection",
      "transfer-encoding",
      "upgrade",
      "te",
      "host",
      "content-type",
      "content-length",
      "content-encoding",
      "accept-encoding",
      "connect-protocol-version",
      "connect-timeout-ms",
      "connect-content-encoding",
      "connect-accept-encoding",
      "connect-",
      "trailer-connect-x",
      "grpc-timeout",
      "grpc-encoding",
      "grpc-accept-encoding",
      "grpc-status",
      "grpc-message",
      "grpc-status-details-bin",
      "grpc-message-type",
      "grpc-previous-rpc-attempts",
      "x-user-agent",
      "x-grpc-web",
      "Content-Type",
      "GRPC-Status",
  };
  static const char *const allowed[] = {
      "user-agent",
      "x-custom",
      "authorization",
      "trailer-x-custom",
      "tea",
      "t",
      "hosts",
      "x-host",
      "grpc",
      "connect",
      "content-typ",
      "content-types",
      "x-grpc-web-extra",
      "my-grpc-status",
      "accept",
      "x-bin",
  };
  size_t i;

  (void)state;
  for (i = 0; i < sizeof(reserved) / sizeof(reserved[0]); ++i) {
    if (!conch__metadata_reserved(reserved[i], strlen(reserved[i]))) {
      fail_msg("%s should be reserved", reserved[i]);
    }
  }
  for (i = 0; i < sizeof(allowed) / sizeof(allowed[0]); ++i) {
    if (conch__metadata_reserved(allowed[i], strlen(allowed[i]))) {
      fail_msg("%s should be allowed", allowed[i]);
    }
  }
  /* Only |len| bytes count. */
  assert_true(conch__metadata_reserved("tease", 2));
  assert_false(conch__metadata_reserved("te", 1));
}

/* Each step must either succeed or fail with NOMEM and change nothing. */
static void test_oom(void **state) {
  conch_metadata *md, *src;
  size_t n, count, len;
  char many[100 * 5];
  int rv, step;

  (void)state;
  /* 100 elements: the lists must grow while they are being added. */
  for (n = 0; n < 100; ++n) {
    memcpy(many + n * 5, "AQID,", 5);
  }
  many[sizeof(many) - 1] = '\0';
  assert_int_equal(conch_metadata_new(&src, NULL), 0);
  for (n = 0; n < 40; ++n) {
    assert_int_equal(
        conch_metadata_add_str(src, "a-rather-long-name-for-a-header",
                               "and a value that is not short either"),
        0);
  }
  for (step = 0; step < 4; ++step) {
    for (n = 0;; ++n) {
      failmem_fail_at((size_t)-1);
      assert_int_equal(conch_metadata_new(&md, failmem_hooks()), 0);
      assert_int_equal(conch_metadata_add_str(md, "first", "1"), 0);
      failmem_fail_at(n);
      switch (step) {
      case 0:
        rv = conch_metadata_append(md, src);
        break;
      case 1:
        rv = conch__metadata_add_wire(md, "x-bin", 5, many, strlen(many));
        break;
      case 2:
        rv = conch__metadata_add_wire(md, "x-bin", 5, "AQID,***", 8);
        break;
      default:
        rv = 0;
        for (count = 0; count < 100 && rv == 0; ++count) {
          rv = conch_metadata_add_str(md, "k", "some value to fill space");
        }
        break;
      }
      if (!failmem_fired()) {
        assert_int_equal(rv, 0);
        if (step == 1) {
          assert_int_equal(conch_metadata_count(md), 101);
        }
        conch_metadata_free(md);
        assert_int_equal(failmem_live_blocks(), 0);
        break;
      }
      assert_int_equal(rv, CONCH_ERR_NOMEM);
      if (step != 3) {
        assert_int_equal(conch_metadata_count(md), 1);
      }
      assert_string_equal(conch_metadata_get(md, "first", &len), "1");
      /* Still usable. */
      failmem_fail_at((size_t)-1);
      assert_int_equal(conch_metadata_add_str(md, "after", "2"), 0);
      assert_string_equal(conch_metadata_get(md, "after", NULL), "2");
      conch_metadata_free(md);
      assert_int_equal(failmem_live_blocks(), 0);
    }
  }
  conch_metadata_free(src);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_free),
      cmocka_unit_test(test_add_validation),
      cmocka_unit_test(test_get_find),
      cmocka_unit_test(test_remove_reset),
      cmocka_unit_test(test_append),
      cmocka_unit_test(test_add_wire),
      cmocka_unit_test(test_wire_lowercase),
      cmocka_unit_test(test_name_value_ok),
      cmocka_unit_test(test_reserved),
      cmocka_unit_test(test_oom),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
