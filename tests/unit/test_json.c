/* The tree-less JSON reader (runtime/base/json.c) that Connect's error and
   end-stream JSON is read with: what it accepts and refuses, the walks
   over accepted text (members, elements, repeated keys), string decoding
   (escapes, surrogate pairs, UTF-8), the nesting limit.  Where the JSON
   codec is built (CONCH_WITH_JSON), jansson is the oracle as well: every
   case, and some hundred thousand mutations of them, must be accepted or
   refused by both alike and decode to the same values.  Two differences
   are known and left out of the comparison: jansson refuses a number
   beyond a double (the reader reads numbers by syntax alone), and it
   takes a NUL byte right after a number ("[1\0]"), which is no JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <conch/features.h>
#include <conch/status.h>

#include "json.h"

#if CONCH_WITH_JSON
#include <jansson.h>
#endif

static int check(const char *s, size_t n) {
  return conch__json_check((const uint8_t *)s, n, NULL);
}

static int check_str(const char *s) { return check(s, strlen(s)); }

static const char *const good[] = {
    "{}",
    " {} ",
    "\t\r\n[]\n",
    "0",
    "-0",
    "-0.5e+10",
    "1E3",
    "123456789012345678901234567890",
    "1e999", /* syntax only (jansson: overflow) */
    "true",
    "false",
    "null",
    "\"\"",
    "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"",
    "\"\\u00e9\\u20AC\\ud83d\\ude00\"",
    "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
    "{\"a\":[1,2,{\"b\":null}],\"c\":\"d\"}",
    "[[[[[]]]]]",
    "{\"a\":1,\"a\":2}",
    "[\"\x7f\"]",
};

static const char *const bad[] = {
    "",
    " ",
    "{",
    "}",
    "[",
    "[1,]",
    "[,1]",
    "{\"a\"}",
    "{\"a\":}",
    "{\"a\":1,}",
    "{a:1}",
    "{1:1}",
    "[1 2]",
    "{} {}",
    "01",
    "-",
    "1.",
    ".5",
    "1e",
    "1e+",
    "+1",
    "0x1",
    "NaN",
    "tru",
    "truex",
    "nul",
    "\"abc",
    "\"\\x\"",
    "\"\\u12\"",
    "\"\\u0000\"",          /* a C string cannot hold it */
    "\"\\ud83d\"",          /* a lone high surrogate */
    "\"\\ude00\"",          /* a lone low surrogate */
    "\"\\ud83d\\u0041\"",   /* a high surrogate and no low one */
    "\"\x01\"",             /* a control character */
    "\"\xc3\"",             /* truncated UTF-8 */
    "\"\xc0\xaf\"",         /* overlong */
    "\"\xed\xa0\x80\"",     /* an encoded surrogate */
    "\"\xf4\x90\x80\x80\"", /* past U+10FFFF */
    "\xef\xbb\xbf{}",       /* a byte order mark */
    "[1]x",
};

static void test_accepts_and_refuses(void **state) {
  size_t i, root = 99;
  (void)state;

  for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    if (check_str(good[i]) != 0) {
      fail_msg("refused: %s", good[i]);
    }
  }
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (check_str(bad[i]) != CONCH_ERR_PROTO) {
      fail_msg("accepted: %s", bad[i]);
    }
  }
  /* A NUL byte is no white space, inside or after the text. */
  assert_int_equal(check("{}\0", 3), CONCH_ERR_PROTO);
  assert_int_equal(check("\"a\0b\"", 5), CONCH_ERR_PROTO);
  assert_int_equal(conch__json_check((const uint8_t *)"  [1]", 5, &root), 0);
  assert_int_equal(root, 2);
  assert_int_equal(conch__json_kind((const uint8_t *)"  [1]", root),
                   CONCH_JSON_ARRAY);
}

/* |depth| arrays inside each other, with |inner| at the bottom. */
static char *nest(size_t depth, const char *inner) {
  size_t n = strlen(inner);
  char *s = malloc(2 * depth + n + 1);
  assert_non_null(s);
  memset(s, '[', depth);
  memcpy(s + depth, inner, n);
  memset(s + depth + n, ']', depth);
  s[2 * depth + n] = '\0';
  return s;
}

static void test_depth(void **state) {
  char *s;
  (void)state;

  /* 2048 levels of values: 2048 arrays, or 2047 and a number in them. */
  s = nest(CONCH_JSON_MAX_DEPTH, "");
  assert_int_equal(check_str(s), 0);
  free(s);
  s = nest(CONCH_JSON_MAX_DEPTH - 1, "1");
  assert_int_equal(check_str(s), 0);
  free(s);
  s = nest(CONCH_JSON_MAX_DEPTH, "1");
  assert_int_equal(check_str(s), CONCH_ERR_PROTO);
  free(s);
  s = nest(CONCH_JSON_MAX_DEPTH + 1, "");
  assert_int_equal(check_str(s), CONCH_ERR_PROTO);
  free(s);
  /* Deep but shallow enough, with objects: fine, and fast. */
  s = nest(1000, "{\"a\":{\"b\":[]}}");
  assert_int_equal(check_str(s), 0);
  free(s);
}

static void test_walks(void **state) {
  static const char t[] =
      " { \"code\" : \"a\" , \"n\":[1, -2.5e3 ,\"x\",{\"k\":[]},[],true] ,"
      "\"code\":\"b\\u0041\",\"e\":{}}";
  const uint8_t *p = (const uint8_t *)t;
  size_t n = sizeof(t) - 1, root, it, key, v, ait, e;
  char buf[16];
  int members = 0, elems = 0;
  const char *last = NULL;
  (void)state;

  assert_int_equal(conch__json_check(p, n, &root), 0);
  assert_int_equal(conch__json_kind(p, root), CONCH_JSON_OBJECT);
  it = root;
  while (conch__json_member(p, n, &it, &key, &v)) {
    members++;
    assert_int_equal(conch__json_kind(p, key), CONCH_JSON_STRING);
    if (conch__json_string_is(p, key, "code")) {
      assert_true(conch__json_strlen(p, v) < sizeof(buf));
      conch__json_string(p, v, buf);
      last = members == 1 ? "a" : "bA";
      assert_string_equal(buf, last);
    } else if (conch__json_string_is(p, key, "n")) {
      static const int kinds[] = {CONCH_JSON_NUMBER, CONCH_JSON_NUMBER,
                                  CONCH_JSON_STRING, CONCH_JSON_OBJECT,
                                  CONCH_JSON_ARRAY,  CONCH_JSON_TRUE};
      ait = v;
      while (conch__json_element(p, n, &ait, &e)) {
        assert_true(elems < 6);
        assert_int_equal(conch__json_kind(p, e), kinds[elems]);
        elems++;
      }
      /* Past the end it stays at the end. */
      assert_false(conch__json_element(p, n, &ait, &e));
    } else {
      assert_true(conch__json_string_is(p, key, "e"));
      ait = v;
      assert_false(conch__json_member(p, n, &ait, &key, &e));
    }
  }
  assert_int_equal(members, 4);
  assert_int_equal(elems, 6);
  assert_string_equal(last, "bA");
  assert_false(conch__json_member(p, n, &it, &key, &v));
}

static void test_strings(void **state) {
  static const struct {
    const char *json;
    const char *want;
  } cases[] = {
      {"\"\"", ""},
      {"\"plain\"", "plain"},
      {"\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t"},
      {"\"\\u0041\\u00e9\\u20ac\"", "A\xc3\xa9\xe2\x82\xac"},
      {"\"\\uD83D\\uDE00!\"", "\xf0\x9f\x98\x80!"},
      {"\"\\udbff\\udfff\"", "\xf4\x8f\xbf\xbf"},
      {"\"\xe2\x98\xba \xf0\x9f\x98\x88\"", "\xe2\x98\xba \xf0\x9f\x98\x88"},
      {"\"\\u007f\\u0080\\u07ff\\u0800\\uffff\"",
       "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf"},
  };
  char out[64];
  size_t i;
  (void)state;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const uint8_t *p = (const uint8_t *)cases[i].json;
    size_t len;
    assert_int_equal(check_str(cases[i].json), 0);
    len = conch__json_strlen(p, 0);
    assert_int_equal(len, strlen(cases[i].want));
    assert_int_equal(conch__json_string(p, 0, out), len);
    assert_string_equal(out, cases[i].want);
    assert_true(conch__json_string_is(p, 0, cases[i].want));
  }
  /* Equality with a literal: a prefix, a longer one, an escaped form. */
  assert_false(conch__json_string_is((const uint8_t *)"\"cod\"", 0, "code"));
  assert_false(conch__json_string_is((const uint8_t *)"\"codes\"", 0, "code"));
  assert_true(
      conch__json_string_is((const uint8_t *)"\"c\\u006fde\"", 0, "code"));
}

#if CONCH_WITH_JSON

/* ---- jansson as the oracle ----------------------------------------------- */

/* Whether the value at |at| of |p| is what jansson made of it. */
static int same(const uint8_t *p, size_t n, size_t at, const json_t *j) {
  size_t it, key, v, count = 0;
  char *k;

  switch (conch__json_kind(p, at)) {
  case CONCH_JSON_OBJECT:
    if (!json_is_object(j)) {
      return 0;
    }
    it = at;
    while (conch__json_member(p, n, &it, &key, &v)) {
      count++;
    }
    if (count != json_object_size(j)) {
      return 1; /* a repeated key: jansson kept the last, nothing to match */
    }
    it = at;
    while (conch__json_member(p, n, &it, &key, &v)) {
      int ok;
      k = malloc(conch__json_strlen(p, key) + 1);
      assert_non_null(k);
      conch__json_string(p, key, k);
      ok = same(p, n, v, json_object_get(j, k));
      free(k);
      if (!ok) {
        return 0;
      }
    }
    return 1;
  case CONCH_JSON_ARRAY:
    if (!json_is_array(j)) {
      return 0;
    }
    it = at;
    while (conch__json_element(p, n, &it, &v)) {
      if (!same(p, n, v, json_array_get(j, count++))) {
        return 0;
      }
    }
    return count == json_array_size(j);
  case CONCH_JSON_STRING: {
    size_t len = conch__json_strlen(p, at);
    char *s;
    int ok;
    if (!json_is_string(j) || json_string_length(j) != len) {
      return 0;
    }
    s = malloc(len + 1);
    assert_non_null(s);
    conch__json_string(p, at, s);
    ok = memcmp(s, json_string_value(j), len) == 0;
    free(s);
    return ok;
  }
  case CONCH_JSON_NUMBER:
    return json_is_number(j);
  case CONCH_JSON_TRUE:
    return json_is_true(j);
  case CONCH_JSON_FALSE:
    return json_is_false(j);
  default:
    return json_is_null(j);
  }
}

/* Both accept |p| alike, and read the same values.  Returns 1 when it was
   compared (not a number out of jansson's range). */
static size_t accepted; /* of the texts compared */

static int agree(const uint8_t *p, size_t n) {
  json_error_t err;
  json_t *j = json_loadb((const char *)p, n,
                         JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
  size_t root;
  int mine = conch__json_check(p, n, &root);

  if (j == NULL && strstr(err.text, "overflow") != NULL) {
    return 0;
  }
  if (j != NULL && mine != 0 && memchr(p, 0, n) != NULL) {
    /* jansson takes a NUL byte right after a number ("[1\0]"); a NUL is
       no JSON white space. */
    json_decref(j);
    return 0;
  }
  if ((mine == 0) != (j != NULL)) {
    size_t i;
    for (i = 0; i < n; i++) {
      print_message("%02x", p[i]);
    }
    print_message("\n");
    fail_msg("%s: %.*s (jansson: %s)", mine == 0 ? "accepted" : "refused",
             (int)(n > 200 ? 200 : n), (const char *)p,
             j == NULL ? err.text : "fine");
  }
  if (j != NULL && !same(p, n, root, j)) {
    fail_msg("read otherwise than jansson: %.*s", (int)(n > 200 ? 200 : n),
             (const char *)p);
  }
  accepted += j != NULL;
  json_decref(j);
  return 1;
}

static void test_as_jansson(void **state) {
  static const char *const seeds[] = {
      "{\"error\":{\"code\":\"internal\",\"message\":\"m\\u00e9\",\"details\":"
      "[{\"type\":\"a.B\",\"value\":\"AQID\",\"debug\":{\"k\":[1,2.5e-3]}}]},"
      "\"metadata\":{\"x\":[\"\\ud83d\\ude00\",\"b\"]}}",
      "[true,false,null,-0,12.5E+2,\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]",
      "\"\xe2\x98\xba \xf0\x9f\x98\x88\xc3\xa9\"",
  };
  static const uint8_t alphabet[] = "{}[],:\"\\u0123456789abcdefABCDEF.eE+- "
                                    "tfnrl\x00\x01\x7f\x80\xc3\xa9\xed\xf0\xff";
  uint32_t x = 2463534242u;
  uint8_t buf[512];
  size_t i, k, compared = 0, runs = 0;
  char *deep;
  (void)state;

  for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    compared += (size_t)agree((const uint8_t *)good[i], strlen(good[i]));
  }
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    compared += (size_t)agree((const uint8_t *)bad[i], strlen(bad[i]));
  }
  deep = nest(CONCH_JSON_MAX_DEPTH, "");
  agree((const uint8_t *)deep, strlen(deep));
  free(deep);
  deep = nest(CONCH_JSON_MAX_DEPTH, "1");
  agree((const uint8_t *)deep, strlen(deep));
  free(deep);
  /* Mutations: a few bytes replaced, inserted or dropped. */
  for (k = 0; k < 200000; k++) {
    const char *seed = seeds[k % (sizeof(seeds) / sizeof(seeds[0]))];
    size_t n = strlen(seed), edits, e;
    memcpy(buf, seed, n);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    edits = 1 + x % 3;
    for (e = 0; e < edits; e++) {
      size_t at;
      uint8_t c;
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      at = (x >> 8) % (n + 1);
      c = alphabet[(x >> 20) % (sizeof(alphabet) - 1)];
      switch (x % 3) {
      case 0:
        if (at < n) {
          buf[at] = c;
        }
        break;
      case 1:
        if (n < sizeof(buf)) {
          memmove(buf + at + 1, buf + at, n - at);
          buf[at] = c;
          n++;
        }
        break;
      default:
        if (at < n) {
          memmove(buf + at, buf + at + 1, n - at - 1);
          n--;
        }
        break;
      }
    }
    compared += (size_t)agree(buf, n);
    runs++;
  }
  print_message(
      "%zu texts compared with jansson (of %zu), %zu valid\n", compared,
      runs + sizeof(good) / sizeof(good[0]) + sizeof(bad) / sizeof(bad[0]),
      accepted);
  /* Both kinds, plenty of each. */
  assert_true(compared > runs / 2);
  assert_true(accepted > compared / 20 && accepted < compared - compared / 20);
}

#else

static void test_as_jansson(void **state) {
  (void)state;
  skip(); /* no oracle in a build without jansson */
}

#endif /* CONCH_WITH_JSON */

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_accepts_and_refuses),
      cmocka_unit_test(test_depth),
      cmocka_unit_test(test_walks),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_as_jansson),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
