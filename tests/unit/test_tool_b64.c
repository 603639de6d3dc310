/* The public base64 (conch/base64.h, what tools/conch uses): RFC 4648
   vectors with and without padding in both alphabets, the decoder's rules
   and arguments, and agreement with the runtime's own encoder and decoder
   for every length up to 300. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <conch/base64.h>
#include <conch/status.h>

#include "base64.h"

static void check_encode(const char *in, const char *padded) {
  char out[64];
  size_t n = strlen(in), w, plen = strlen(padded), ulen = plen;

  while (ulen > 0 && padded[ulen - 1] == '=') {
    ulen--;
  }
  assert_int_equal(conch_base64_encoded_len(n, CONCH_BASE64_PAD), plen);
  w = conch_base64_encode((const uint8_t *)in, n, CONCH_BASE64_PAD, out);
  assert_int_equal(w, plen);
  assert_memory_equal(out, padded, plen);
  assert_int_equal(conch_base64_encoded_len(n, 0), ulen);
  w = conch_base64_encode((const uint8_t *)in, n, 0, out);
  assert_int_equal(w, ulen);
  assert_memory_equal(out, padded, ulen);
}

/* Decodes |s|; |want| NULL expects an error. */
static void check_decode(const char *s, const char *want) {
  uint8_t out[64];
  size_t n = strlen(s), outlen = 777;
  int rv = conch_base64_decode(s, n, 0, out, &outlen);

  if (want == NULL) {
    if (rv != CONCH_ERR_PROTO) {
      fail_msg("\"%s\" decoded, expected an error", s);
    }
    assert_int_equal(outlen, 777);
    return;
  }
  if (rv != 0) {
    fail_msg("\"%s\" rejected", s);
  }
  assert_int_equal(outlen, strlen(want));
  assert_true(outlen <= conch_base64_decoded_max(n));
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

/* The URL-safe alphabet, padded and not, and the two alphabets apart. */
static void test_url_alphabet(void **state) {
  static const uint8_t in[] = {0xfb, 0xff, 0xbf, 0xfe};
  uint8_t out[16];
  char enc[16];
  size_t w, outlen = 0;
  (void)state;

  w = conch_base64_encode(in, sizeof(in), CONCH_BASE64_URL, enc);
  assert_int_equal(w, conch_base64_encoded_len(sizeof(in), CONCH_BASE64_URL));
  assert_int_equal(w, 6);
  assert_memory_equal(enc, "-_-__g", 6);
  w = conch_base64_encode(in, sizeof(in), CONCH_BASE64_URL | CONCH_BASE64_PAD,
                          enc);
  assert_int_equal(w, 8);
  assert_memory_equal(enc, "-_-__g==", 8);
  assert_int_equal(conch_base64_decode(enc, w, CONCH_BASE64_URL, out, &outlen),
                   0);
  assert_int_equal(outlen, sizeof(in));
  assert_memory_equal(out, in, sizeof(in));
  outlen = 777;
  assert_int_equal(conch_base64_decode(enc, w, 0, out, &outlen),
                   CONCH_ERR_PROTO);
  assert_int_equal(outlen, 777);
  w = conch_base64_encode(in, sizeof(in), 0, enc);
  assert_memory_equal(enc, "+/+//g", 6);
  assert_int_equal(conch_base64_decode(enc, w, CONCH_BASE64_URL, out, &outlen),
                   CONCH_ERR_PROTO);
  assert_int_equal(outlen, 777);
}

static void test_arguments(void **state) {
  uint8_t out[4];
  size_t outlen = 777;
  (void)state;

  assert_int_equal(conch_base64_decode(NULL, 0, 0, out, &outlen), 0);
  assert_int_equal(outlen, 0);
  assert_int_equal(conch_base64_decode(NULL, 4, 0, out, &outlen),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_base64_decode("Zg==", 4, 0, NULL, &outlen),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_base64_decode("Zg==", 4, 0, out, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_base64_encode(NULL, 0, CONCH_BASE64_PAD, NULL), 0);
  assert_int_equal(conch_base64_encoded_len(0, CONCH_BASE64_PAD), 0);
}

/* The public and the runtime's base64 agree on every length, both ways. */
static void test_same_as_runtime(void **state) {
  uint8_t in[300], back[300];
  char a[512], b[512];
  size_t n, i;
  (void)state;

  for (i = 0; i < sizeof(in); i++) {
    in[i] = (uint8_t)(i * 151u + 7u);
  }
  for (n = 0; n <= sizeof(in); n++) {
    size_t wa = conch_base64_encode(in, n, 0, a);
    size_t wb = conch__b64_encode(in, n, CONCH_B64_STD, b);
    size_t la = 0, lb = 0;

    assert_int_equal(wa, wb);
    assert_memory_equal(a, b, wa);
    assert_int_equal(conch_base64_decoded_max(wa), conch__b64_decoded_max(wa));
    assert_int_equal(conch_base64_decode(a, wa, 0, back, &la), 0);
    assert_int_equal(la, n);
    assert_memory_equal(back, in, n);
    wa = conch_base64_encode(in, n, CONCH_BASE64_PAD, a);
    assert_int_equal(wa % 4, 0);
    assert_int_equal(conch_base64_decode(a, wa, 0, back, &la), 0);
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
      cmocka_unit_test(test_url_alphabet),
      cmocka_unit_test(test_arguments),
      cmocka_unit_test(test_same_as_runtime),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
