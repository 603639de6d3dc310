/* conch serve's own small data structures (tools/conch/serve_util.h): the
   timer heap against a plain array under random arming, re-arming and
   cancelling; the byte queue against a plain copy under random appends
   and consumes (and that a queue that keeps being drained stays small);
   the intrusive list; the int-keyed table against a plain array under
   random puts and deletes, keys chosen to collide. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serve_util.h"

enum { NT = 200 };

static uint32_t rnd_state = 12345;
static uint32_t rnd(void) {
  rnd_state = rnd_state * 1103515245u + 12345u;
  return rnd_state >> 8;
}

static void nop(srv_timer *t) { (void)t; }

static void test_heap(void **state) {
  static srv_timer t[NT];
  static int64_t want[NT]; /* -1: not armed */
  srv_heap h = {NULL, 0, 0};
  size_t i, round;
  (void)state;

  for (i = 0; i < NT; i++) {
    t[i].when = 0;
    t[i].idx = SIZE_MAX;
    t[i].cb = nop;
    want[i] = -1;
  }
  for (round = 0; round < 20000; round++) {
    i = rnd() % NT;
    if (rnd() % 3 == 0) {
      srv_heap_remove(&h, &t[i]);
      want[i] = -1;
    } else {
      int64_t when = (int64_t)(rnd() % 1000);

      assert_int_equal(srv_heap_insert(&h, &t[i], when), 0);
      want[i] = when;
    }
    if (round % 97 == 0) {
      /* Take the earliest few out, in order, as the loop does. */
      int64_t last = -1;
      int k;

      for (k = 0; k < 5 && srv_heap_top(&h) != NULL; k++) {
        srv_timer *top = srv_heap_top(&h);
        size_t j, armed = 0;

        for (j = 0; j < NT; j++) {
          if (want[j] >= 0) {
            armed++;
            assert_true(top->when <= want[j]);
          }
        }
        assert_int_equal(armed, h.n);
        assert_true(top->when >= last);
        last = top->when;
        srv_heap_remove(&h, top);
        assert_int_equal(top->idx, SIZE_MAX);
        want[top - t] = -1;
      }
    }
  }
  for (i = 0; i < NT; i++) {
    assert_int_equal(t[i].idx != SIZE_MAX, want[i] >= 0);
    assert_true(want[i] < 0 || t[i].when == want[i]);
  }
  srv_heap_free(&h);
  assert_null(h.t);
}

static void test_buf(void **state) {
  const conch_mem *mem = conch_mem_default();
  srv_buf b = SRV_BUF_INIT;
  static uint8_t ref[1 << 16], chunk[4096];
  size_t rlen = 0, i, round, peak = 0;
  uint8_t next = 0;
  (void)state;

  assert_null(srv_buf_head(&b));
  assert_int_equal(srv_buf_append(&b, mem, chunk, 0), 0);
  for (round = 0; round < 5000; round++) {
    size_t n = rnd() % sizeof(chunk);

    if (rlen + n <= sizeof(ref) && rnd() % 2 == 0) {
      for (i = 0; i < n; i++) {
        chunk[i] = next++;
      }
      assert_int_equal(srv_buf_append(&b, mem, chunk, n), 0);
      memcpy(ref + rlen, chunk, n);
      rlen += n;
    } else {
      n = rlen == 0 ? 0 : rnd() % (rlen + 1);
      srv_buf_consume(&b, n);
      memmove(ref, ref + n, rlen - n);
      rlen -= n;
    }
    assert_int_equal(srv_buf_size(&b), rlen);
    if (rlen > 0) {
      assert_memory_equal(srv_buf_head(&b), ref, rlen);
    }
    if (b.cap > peak) {
      peak = b.cap;
    }
  }
  /* Never more than twice what was held at once, rounded to a power. */
  assert_true(peak <= 2 * sizeof(ref));
  srv_buf_reset(&b);
  assert_int_equal(srv_buf_size(&b), 0);
  srv_buf_free(&b, mem);
  assert_null(b.data);
  assert_int_equal(b.cap, 0);
}

typedef struct item {
  int v;
  srv_link link;
} item;

static void test_list(void **state) {
  srv_link head;
  item it[4] = {{0, {NULL, NULL}},
                {1, {NULL, NULL}},
                {2, {NULL, NULL}},
                {3, {NULL, NULL}}};
  srv_link *l;
  int i, want[] = {0, 2, 3};
  (void)state;

  srv_list_init(&head);
  assert_true(srv_list_empty(&head));
  for (i = 0; i < 4; i++) {
    assert_false(srv_linked(&it[i].link));
    srv_list_push(&head, &it[i].link);
    assert_true(srv_linked(&it[i].link));
  }
  srv_list_remove(&it[1].link);
  srv_list_remove(&it[1].link); /* twice: nothing */
  assert_false(srv_linked(&it[1].link));
  i = 0;
  for (l = head.next; l != &head; l = l->next) {
    assert_int_equal(SRV_CONTAINER(l, item, link)->v, want[i++]);
  }
  assert_int_equal(i, 3);
  srv_list_remove(&it[0].link);
  srv_list_remove(&it[2].link);
  srv_list_remove(&it[3].link);
  assert_true(srv_list_empty(&head));
}

static void test_itab(void **state) {
  enum { NK = 500 };
  static int vals[NK];
  static int in[NK]; /* key i*64 is in the table */
  srv_itab t = {NULL, 0, 0};
  size_t n = 0;

  (void)state;
  for (int round = 0; round < 20000; round++) {
    int k = (int)(rnd() % NK);

    if (in[k]) {
      assert_ptr_equal(srv_itab_get(&t, k * 64), &vals[k]);
      srv_itab_del(&t, k * 64);
      in[k] = 0;
      n--;
    } else {
      assert_null(srv_itab_get(&t, k * 64));
      srv_itab_del(&t, k * 64); /* not there: nothing */
      assert_int_equal(srv_itab_put(&t, k * 64, &vals[k]), 0);
      in[k] = 1;
      n++;
    }
    assert_int_equal(t.n, n);
    if (round % 1000 == 0) {
      size_t seen = 0;
      for (int i = 0; i < NK; i++) {
        void *v = srv_itab_get(&t, i * 64);
        assert_ptr_equal(v, in[i] ? &vals[i] : NULL);
        assert_null(srv_itab_get(&t, i * 64 + 1));
      }
      for (size_t i = 0; i < t.cap; i++) {
        seen += t.slot[i].val != NULL;
      }
      assert_int_equal(seen, n);
      assert_true(t.n * 2 <= t.cap);
    }
  }
  srv_itab_free(&t);
  assert_null(srv_itab_get(&t, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_heap),
      cmocka_unit_test(test_buf),
      cmocka_unit_test(test_list),
      cmocka_unit_test(test_itab),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
