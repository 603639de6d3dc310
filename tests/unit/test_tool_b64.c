/* The conch tool's own base64 (tools/conch/b64.c): RFC 4648 vectors with
   and without padding, the decoder's rules, and agreement with the
   runtime's encoder and decoder for every length up to 300. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "b64.h"
#include "base64.h"

static void check_encode(const char *in, const char *padded) {
  char out[64];
  size_t n = strlen(in), w, plen = strlen(padded), ulen = plen;

  while (ulen > 0 && padded[ulen - 1] == '=') {
    ulen--;
  }
  assert_int_equal(b64_encoded_len(n, 1), plen);
  w = b64_encode((const uint8_t *)in, n, 1, out);
  assert_int_equal(w, plen);
  assert_memory_equal(out, padded, plen);
  assert_int_equal(b64_encoded_len(n, 0), ulen);
  w = b64_encode((const uint8_t *)in, n, 0, out);
  assert_int_equal(w, ulen);
  assert_memory_equal(out, padded, ulen);
}

/* Decodes |s|; |want| NULL expects an error. */
static void check_decode(const char *s, const char *want) {
  uint8_t out[64];
  size_t n = strlen(s), outlen = 777;
  int rv = b64_decode(s, n, out, &outlen);

  if (want == NULL) {
    if (rv != -1) {
      fail_msg("\"%s\" decoded, expected an error", s);
    }
    assert_int_equal(outlen, 777);
    return;
  }
  if (rv != 0) {
    fail_msg("\"%s\" rejected", s);
  }
  assert_int_equal(outlen, strlen(want));
  assert_true(outlen <= b64_decoded_max(n));
  assert_memory_equal(out, want, outlen);
}

static void test_rfc_vectors(void **state) {
  (void)state;
  check_encode("", "");
  check_encode("f", "Zg==");
  check_encode("fo", "Zm8=");
  check_encode("foo", "Zm9v");
  check_encode("foob", "Zm9vYg==");
  check_encode("fooba", "Zm9vYmE=");
  check_encode("foobar", "Zm9vYmFy");
  check_decode("", "");
  check_decode("Zg==", "f");
  check_decode("Zg", "f");
  check_decode("Zm8=", "fo");
  check_decode("Zm8", "fo");
  check_decode("Zm9vYmFy", "foobar");
  check_decode("dXNlcjpwYXNz", "user:pass");
}

static void test_decode_errors(void **state) {
  (void)state;
  check_decode("Z", NULL);         /* 1 mod 4 */
  check_decode("Zm9vY", NULL);     /* 1 mod 4 */
  check_decode("Zg=", NULL);       /* padding only on whole quads */
  check_decode("Z===", NULL);      /* at most two '=' */
  check_decode("Zm=v", NULL);      /* '=' in the middle */
  check_decode("Zm9v-_==", NULL);  /* the URL alphabet is not ours */
  check_decode("Zm9 v", NULL);     /* no blanks */
  check_decode("Zm9v\x80g==", NULL);
}

/* The tool's and the runtime's base64 agree on every length, both ways. */
static void test_same_as_runtime(void **state) {
  uint8_t in[300], back[300];
  char a[512], b[512];
  size_t n, i;
  (void)state;

  for (i = 0; i < sizeof(in); i++) {
    in[i] = (uint8_t)(i * 151u + 7u);
  }
  for (n = 0; n <= sizeof(in); n++) {
    size_t wa = b64_encode(in, n, 0, a);
    size_t wb = conch__b64_encode(in, n, CONCH_B64_STD, b);
    size_t la = 0, lb = 0;

    assert_int_equal(wa, wb);
    assert_memory_equal(a, b, wa);
    assert_int_equal(b64_decoded_max(wa), conch__b64_decoded_max(wa));
    assert_int_equal(b64_decode(a, wa, back, &la), 0);
    assert_int_equal(la, n);
    assert_memory_equal(back, in, n);
    wa = b64_encode(in, n, 1, a);
    assert_int_equal(wa % 4, 0);
    assert_int_equal(b64_decode(a, wa, back, &la), 0);
    assert_int_equal(conch__b64_decode(a, wa, CONCH_B64_STD, back, &lb), 0);
    assert_int_equal(la, n);
    assert_int_equal(lb, n);
    assert_memory_equal(back, in, n);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rfc_vectors),
      cmocka_unit_test(test_decode_errors),
      cmocka_unit_test(test_same_as_runtime),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
