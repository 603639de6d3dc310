/* Unit tests for runtime/filter.c's role-free half (conch_filter), the
   output both a client's connection and a server's write through:
   queueing in cleartext and conch__filter_send() against a transport
   that takes a little, nothing, or fails.  The TLS pump is tested with a
   live TLS pair in test_tls.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include <conch/conch.h>

#include "filter.h"

/* A transport whose write takes at most |take| bytes a call, or answers
   |err| (negative) once |ok_calls| calls have gone. */
typedef struct fake {
  uint8_t got[4096];
  size_t ngot;
  size_t take;
  long err;
  int ok_calls;
  int calls;
  int fd_seen;
} fake;

static long fake_put(void *ud, int fd, const void *p, size_t n) {
  fake *f = ud;
  f->calls++;
  f->fd_seen = fd;
  if (f->err != 0 && f->calls > f->ok_calls) {
    return f->err;
  }
  if (n > f->take) {
    n = f->take;
  }
  if (n > sizeof(f->got) - f->ngot) {
    n = sizeof(f->got) - f->ngot;
  }
  memcpy(f->got + f->ngot, p, n);
  f->ngot += n;
  return (long)n;
}

static void init(conch_filter *f) {
  memset(f, 0, sizeof(*f));
  f->mem = conch_mem_default();
}

static void test_queue_pending_taken(void **state) {
  conch_filter f;
  const uint8_t *p;
  (void)state;

  init(&f);
  assert_int_equal(conch__filter_pending(&f, &p), 0);
  assert_int_equal(conch__filter_queue(&f, (const uint8_t *)"hello ", 6), 0);
  assert_int_equal(conch__filter_queue(&f, (const uint8_t *)"world", 5), 0);
  assert_int_equal(conch__filter_pending(&f, &p), 11);
  assert_memory_equal(p, "hello world", 11);
  conch__filter_taken(&f, 6);
  assert_int_equal(conch__filter_pending(&f, &p), 5);
  assert_memory_equal(p, "world", 5);
  conch__filter_taken(&f, 5);
  assert_int_equal(conch__filter_pending(&f, &p), 0);
  conch__filter_clear(&f);
  conch__filter_clear(&f); /* twice is harmless */
}

static void test_send_all(void **state) {
  conch_filter f;
  fake t = {{0}, 0, SIZE_MAX, 0, 0, 0, -1};
  const uint8_t *p;
  (void)state;

  init(&f);
  assert_int_equal(conch__filter_send(&f, fake_put, &t, 7), 0);
  assert_int_equal(t.calls, 0); /* nothing to write: no call */
  assert_int_equal(conch__filter_queue(&f, (const uint8_t *)"abc", 3), 0);
  assert_int_equal(conch__filter_send(&f, fake_put, &t, 7), 0);
  assert_int_equal(t.fd_seen, 7);
  assert_int_equal(t.ngot, 3);
  assert_memory_equal(t.got, "abc", 3);
  assert_int_equal(conch__filter_pending(&f, &p), 0);
  conch__filter_clear(&f);
}

/* A transport that takes part: the rest waits, in order. */
static void test_send_partial(void **state) {
  conch_filter f;
  fake t = {{0}, 0, 4, 0, 0, 0, -1};
  const uint8_t *p;
  (void)state;

  init(&f);
  assert_int_equal(conch__filter_queue(&f, (const uint8_t *)"0123456789", 10),
                   0);
  assert_int_equal(conch__filter_send(&f, fake_put, &t, 1),
                   CONCH_FILTER_SHORT);
  assert_int_equal(t.ngot, 4);
  assert_int_equal(conch__filter_pending(&f, &p), 6);
  assert_memory_equal(p, "456789", 6);
  t.take = SIZE_MAX;
  assert_int_equal(conch__filter_send(&f, fake_put, &t, 1), 0);
  assert_int_equal(t.ngot, 10);
  assert_memory_equal(t.got, "0123456789", 10);
  conch__filter_clear(&f);
}

/* EAGAIN (EWOULDBLOCK): blocked, nothing lost; another errno, EINTR
   among them, is returned as it is (the roles read it differently); a
   write that takes 0 bytes and says nothing is ZERO.  Nothing is taken
   from the buffer in any of these. */
static void send_case(long err, size_t take, long want) {
  fake t = {{0}, 0, take, err, 0, 0, -1};
  conch_filter f;
  const uint8_t *p;

  init(&f);
  assert_int_equal(conch__filter_queue(&f, (const uint8_t *)"xy", 2), 0);
  assert_int_equal(conch__filter_send(&f, fake_put, &t, 1), want);
  assert_int_equal(t.calls, 1);
  assert_int_equal(conch__filter_pending(&f, &p), 2);
  assert_memory_equal(p, "xy", 2);
  conch__filter_clear(&f);
}

static void test_send_errors(void **state) {
  (void)state;
  send_case(-EAGAIN, SIZE_MAX, CONCH_FILTER_BLOCKED);
  send_case(-EWOULDBLOCK, SIZE_MAX, CONCH_FILTER_BLOCKED);
  send_case(-EINTR, SIZE_MAX, -EINTR);
  send_case(-ECONNRESET, SIZE_MAX, -ECONNRESET);
  send_case(-EPIPE, SIZE_MAX, -EPIPE);
  send_case(0, 0, CONCH_FILTER_ZERO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_queue_pending_taken),
      cmocka_unit_test(test_send_all),
      cmocka_unit_test(test_send_partial),
      cmocka_unit_test(test_send_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
