/* The bounded output of collected runs (api/output.h): each stream keeps
   its first |limit| bytes, a chunk across the limit is cut, the rest is
   counted; text holds exactly what was kept of both in arrival order;
   buffers never grow past what the limit lets them hold; a failed
   allocation keeps nothing of its chunk and leaks nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <conch/status.h>

#include "../../api/output.h"
#include "failmem.h"

static void add(conch__output *o, int is_err, const char *s) {
  assert_int_equal(conch__output_add(o, is_err, (const uint8_t *)s, strlen(s)),
                   0);
}

static void expect(const conch__obuf *b, const char *s) {
  assert_int_equal(b->len, strlen(s));
  if (b->len > 0) {
    assert_memory_equal(b->p, s, b->len);
  }
}

static void test_cut_at_limit(void **state) {
  conch__output o;
  (void)state;
  failmem_fail_at((size_t)-1);
  conch__output_init(&o, failmem_hooks(), 5);
  add(&o, 0, "abc");
  add(&o, 1, "E");
  add(&o, 0, "defg"); /* crosses the limit: "de" kept */
  add(&o, 0, "more");
  add(&o, 1, "RRRRRR"); /* "RRRR" kept */
  expect(&o.out, "abcde");
  expect(&o.err, "ERRRR");
  expect(&o.text, "abcEdeRRRR");
  assert_int_equal(o.out_dropped, 2 + 4);
  assert_int_equal(o.err_dropped, 2);
  assert_true(o.out.cap <= 5 && o.err.cap <= 5 && o.text.cap <= 10);
  conch__output_clear(&o);
  assert_int_equal(failmem_live_blocks(), 0);
  assert_int_equal(o.out.len + o.err.len + o.text.len, 0);
  assert_int_equal(o.out_dropped + o.err_dropped, 0);
  assert_int_equal(o.limit, 5); /* kept for reuse */
}

static void test_zero_and_unlimited(void **state) {
  conch__output o;
  static uint8_t big[100000];
  size_t i;
  (void)state;
  failmem_fail_at((size_t)-1);
  conch__output_init(&o, failmem_hooks(), 0);
  add(&o, 0, "x");
  add(&o, 1, "yy");
  assert_int_equal(o.out.len + o.err.len + o.text.len, 0);
  assert_null(o.out.p); /* nothing allocated for nothing kept */
  assert_int_equal(o.out_dropped, 1);
  assert_int_equal(o.err_dropped, 2);
  conch__output_clear(&o);

  conch__output_init(&o, failmem_hooks(), SIZE_MAX);
  for (i = 0; i < sizeof(big); i++) {
    big[i] = (uint8_t)i;
  }
  for (i = 0; i < 30; i++) {
    assert_int_equal(conch__output_add(&o, (int)(i & 1), big, sizeof(big)), 0);
  }
  assert_int_equal(o.out.len, 15 * sizeof(big));
  assert_int_equal(o.err.len, 15 * sizeof(big));
  assert_int_equal(o.text.len, 30 * sizeof(big));
  assert_memory_equal(o.text.p + 29 * sizeof(big), big, sizeof(big));
  assert_int_equal(o.out_dropped + o.err_dropped, 0);
  conch__output_clear(&o);
  assert_int_equal(failmem_live_blocks(), 0);
}

/* Growth by doubling stops at the limit: a 5 MB limit never asks for an
   8 MiB buffer. */
static void test_growth_capped(void **state) {
  conch__output o;
  static uint8_t chunk[32768];
  int i;
  (void)state;
  failmem_fail_at((size_t)-1);
  conch__output_init(&o, failmem_hooks(), 5000000);
  for (i = 0; i < 400; i++) {
    assert_int_equal(conch__output_add(&o, 0, chunk, sizeof(chunk)), 0);
  }
  assert_int_equal(o.out.len, 5000000);
  assert_int_equal(o.out.cap, 5000000);
  assert_int_equal(o.text.len, 5000000);
  assert_true(o.text.cap <= 10000000);
  assert_int_equal(o.out_dropped, 400 * sizeof(chunk) - 5000000);
  conch__output_clear(&o);
}

/* Every allocation fails in turn: the chunk is then kept nowhere (text
   and its stream agree), counted as dropped, and nothing leaks. */
static void test_nomem(void **state) {
  size_t n;
  (void)state;
  for (n = 0;; n++) {
    conch__output o;
    int rv, k, failed = 0;
    failmem_fail_at(n);
    conch__output_init(&o, failmem_hooks(), 100000);
    for (k = 0; k < 40; k++) {
      static const uint8_t c[5000];
      rv = conch__output_add(&o, k % 3 == 0, c, sizeof(c));
      assert_true(rv == 0 || rv == CONCH_ERR_NOMEM);
      failed += rv != 0;
    }
    assert_int_equal(o.out.len + o.err.len, o.text.len);
    assert_int_equal(o.out.len + o.err.len + o.out_dropped + o.err_dropped,
                     40 * 5000);
    conch__output_clear(&o);
    assert_int_equal(failmem_live_blocks(), 0);
    if (!failmem_fired()) {
      assert_int_equal(failed, 0);
      break;
    }
    assert_int_equal(failed, 1);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cut_at_limit),
      cmocka_unit_test(test_zero_and_unlimited),
      cmocka_unit_test(test_growth_capped),
      cmocka_unit_test(test_nomem),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
