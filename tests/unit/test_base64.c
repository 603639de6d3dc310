/* base64: RFC 4648 vectors, both alphabets, padding rules, every invalid
   character, and a bit-by-bit reference for all lengths up to 256. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <conch/status.h>

#include "base64.h"

static const char std_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char url_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Decodes |s| and expects |want| (NULL: expects CONCH_ERR_PROTO). */
static void check_decode(const char *s, int alphabet, const char *want) {
  size_t n = strlen(s);
  uint8_t out[64];
  size_t outlen = 12345;
  int rv;

  assert_true(conch__b64_decoded_max(n) <= sizeof(out));
  rv = conch__b64_decode(s, n, alphabet, out, &outlen);
  if (want == NULL) {
    if (rv != CONCH_ERR_PROTO) {
      fail_msg("\"%s\" (alphabet %d) decoded, expected an error", s, alphabet);
    }
    assert_int_equal(outlen, 12345); /* untouched on error */
    return;
  }
  if (rv != 0) {
    fail_msg("\"%s\" (alphabet %d) rejected: %d", s, alphabet, rv);
  }
  assert_int_equal(outlen, strlen(want));
  assert_true(outlen <= conch__b64_decoded_max(n));
  assert_memory_equal(out, want, outlen);
}

static void check_encode(const char *in, int alphabet, const char *want) {
  size_t n = strlen(in);
  char out[64];
  size_t len;

  memset(out, '#', sizeof(out));
  assert_int_equal(conch__b64_encoded_len(n), strlen(want));
  len = conch__b64_encode((const uint8_t *)in, n, alphabet, out);
  assert_int_equal(len, strlen(want));
  assert_memory_equal(out, want, len);
  assert_int_equal(out[len], '#'); /* no NUL, nothing past the end */
}

static void test_rfc4648_vectors(void **state) {
  /* RFC 4648 section 10, with the padding both removed and kept. */
  static const char *const v[][3] = {
      {"", "", ""},
      {"f", "Zg", "Zg=="},
      {"fo", "Zm8", "Zm8="},
      {"foo", "Zm9v", "Zm9v"},
      {"foob", "Zm9vYg", "Zm9vYg=="},
      {"fooba", "Zm9vYmE", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
    for (int a = CONCH_B64_STD; a <= CONCH_B64_URL; a++) {
      check_encode(v[i][0], a, v[i][1]);
      check_decode(v[i][1], a, v[i][0]);
      check_decode(v[i][2], a, v[i][0]);
    }
  }
}

static void test_alphabets_differ(void **state) {
  /* fb ff bf uses values 62 and 63 in every position. */
  static const char bin[] = "\xfb\xff\xbf";
  static const char bin2[] = "\xfb\xff";
  (void)state;
  check_encode(bin, CONCH_B64_STD, "+/+/");
  check_encode(bin, CONCH_B64_URL, "-_-_");
  check_encode(bin2, CONCH_B64_STD, "+/8");
  check_encode(bin2, CONCH_B64_URL, "-_8");
  check_decode("+/+/", CONCH_B64_STD, bin);
  check_decode("-_-_", CONCH_B64_URL, bin);
  check_decode("+/8=", CONCH_B64_STD, bin2);
  check_decode("-_8=", CONCH_B64_URL, bin2);
  /* Each alphabet rejects the other's two characters. */
  check_decode("-_-_", CONCH_B64_STD, NULL);
  check_decode("+/+/", CONCH_B64_URL, NULL);
  check_decode("AA-A", CONCH_B64_STD, NULL);
  check_decode("AA_A", CONCH_B64_STD, NULL);
  check_decode("AA+A", CONCH_B64_URL, NULL);
  check_decode("AA/A", CONCH_B64_URL, NULL);
}

static void test_lengths(void **state) {
  (void)state;
  assert_int_equal(conch__b64_encoded_len(0), 0);
  assert_int_equal(conch__b64_encoded_len(1), 2);
  assert_int_equal(conch__b64_encoded_len(2), 3);
  assert_int_equal(conch__b64_encoded_len(3), 4);
  assert_int_equal(conch__b64_encoded_len(4), 6);
  assert_int_equal(conch__b64_encoded_len(300), 400);
  assert_int_equal(conch__b64_decoded_max(0), 0);
  assert_int_equal(conch__b64_decoded_max(1), 0);
  assert_int_equal(conch__b64_decoded_max(2), 1);
  assert_int_equal(conch__b64_decoded_max(3), 2);
  assert_int_equal(conch__b64_decoded_max(4), 3);
  assert_int_equal(conch__b64_decoded_max(8), 6);
  assert_int_equal(conch__b64_decoded_max(400), 300);
  /* No overflow at the top of the range. */
  assert_true(conch__b64_decoded_max(SIZE_MAX) < SIZE_MAX);
}

/* Bit-by-bit reference, deliberately unlike the table-driven code. */
static size_t ref_encode(const uint8_t *in, size_t n, const char *chars,
                         char *out) {
  size_t bits = n * 8, o = 0;

  for (size_t b = 0; b < bits; b += 6) {
    unsigned v = 0;
    for (size_t k = 0; k < 6; k++) {
      size_t bit = b + k;
      v <<= 1;
      if (bit < bits && (in[bit / 8] & (0x80 >> (bit % 8))) != 0) {
        v |= 1;
      }
    }
    out[o++] = chars[v];
  }
  return o;
}

static void test_reference_all_lengths(void **state) {
  uint8_t in[256], dec[256];
  char enc[400], ref[400], padded[404];
  size_t len, rlen, dlen;
  (void)state;

  for (size_t i = 0; i < sizeof(in); i++) {
    in[i] = (uint8_t)(i * 167 + 13); /* every byte value, shuffled */
  }
  for (int a = CONCH_B64_STD; a <= CONCH_B64_URL; a++) {
    const char *chars = a == CONCH_B64_URL ? url_chars : std_chars;
    for (size_t n = 0; n <= sizeof(in); n++) {
      len = conch__b64_encode(in, n, a, enc);
      rlen = ref_encode(in, n, chars, ref);
      assert_int_equal(len, rlen);
      assert_int_equal(len, conch__b64_encoded_len(n));
      assert_memory_equal(enc, ref, len);

      assert_int_equal(conch__b64_decode(enc, len, a, dec, &dlen), 0);
      assert_int_equal(dlen, n);
      assert_memory_equal(dec, in, n);

      memcpy(padded, enc, len);
      while (len % 4 != 0) {
        padded[len++] = '=';
      }
      assert_int_equal(conch__b64_decode(padded, len, a, dec, &dlen), 0);
      assert_int_equal(dlen, n);
      assert_memory_equal(dec, in, n);
    }
  }
}

static void test_every_invalid_char(void **state) {
  (void)state;
  for (int a = CONCH_B64_STD; a <= CONCH_B64_URL; a++) {
    const char *chars = a == CONCH_B64_URL ? url_chars : std_chars;
    for (int c = 0; c < 256; c++) {
      if (memchr(chars, c, 64) != NULL) {
        continue;
      }
      /* In each position of a full quad and of 2- and 3-char tails,
         including a NUL byte (the length is explicit). */
      for (size_t len = 2; len <= 8; len++) {
        if (len % 4 == 1) {
          continue;
        }
        for (size_t pos = 0; pos < len; pos++) {
          char s[8];
          uint8_t out[8];
          size_t outlen = 777;
          memset(s, 'Q', sizeof(s));
          s[pos] = (char)c;
          if (c == '=' && len % 4 == 0 && pos == len - 1) {
            continue; /* valid padding ("QQQ="), tested elsewhere */
          }
          assert_int_equal(conch__b64_decode(s, len, a, out, &outlen),
                           CONCH_ERR_PROTO);
          assert_int_equal(outlen, 777);
        }
      }
    }
  }
}

static void test_bad_padding(void **state) {
  static const char *const bad[] = {
      "=",         "==",       "===",      "====",   "Zg=",      "Zg===",
      "Z===",      "Zm8==",    "Zm9v=",    "Zm9v==", "Zm9v====", "Zg==Zg==",
      "Zg==Zm9v",  "Z=g=",     "Zg=a",     "=Zg=",   "Zm=8",     "Zm9vYg=",
      "Zm9vYg===", "Zm9vY===", "Zm9v=Zg=",
  };
  (void)state;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    check_decode(bad[i], CONCH_B64_STD, NULL);
    check_decode(bad[i], CONCH_B64_URL, NULL);
  }
}

static void test_length_one_mod_four(void **state) {
  static const char *const bad[] = {"Z", "Zm9vY", "Zm9vYmFyZ", "A", "AAAAA"};
  (void)state;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    check_decode(bad[i], CONCH_B64_STD, NULL);
    check_decode(bad[i], CONCH_B64_URL, NULL);
  }
}

static void test_empty_and_lenient_tail(void **state) {
  uint8_t out[4];
  size_t outlen = 99;
  (void)state;
  assert_int_equal(conch__b64_decode("", 0, CONCH_B64_STD, out, &outlen), 0);
  assert_int_equal(outlen, 0);
  /* Non-zero unused bits in the last character are ignored, as Go's
     default decoder does: "Zh" and "Zg" both mean "f". */
  check_decode("Zh", CONCH_B64_STD, "f");
  check_decode("Zh==", CONCH_B64_STD, "f");
  check_decode("Zm9=", CONCH_B64_URL, "fo");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rfc4648_vectors),
      cmocka_unit_test(test_alphabets_differ),
      cmocka_unit_test(test_lengths),
      cmocka_unit_test(test_reference_all_lengths),
      cmocka_unit_test(test_every_invalid_char),
      cmocka_unit_test(test_bad_padding),
      cmocka_unit_test(test_length_one_mod_four),
      cmocka_unit_test(test_empty_and_lenient_tail),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
