/* conch_client_wakeup() is the one thread-safe call: several threads hammer
   it while the owner thread drives the client.  Every wakeup is seen (they
   may be folded), none is lost after the last one, and the callback runs
   only on the driving thread.  CI also runs this under ThreadSanitizer. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <conch/conch.h>

enum { THREADS = 4, PER_THREAD = 2000 };

typedef struct shared {
  conch_client *c;
  pthread_t owner;
  int runs;          /* loop thread only */
  int wrong_thread;  /* loop thread only */
  int stop_seen;     /* loop thread only */
  int stop;          /* set by main after joining, read in the callback */
} shared;

static void on_wake(conch_client *c, void *ud) {
  shared *s = ud;
  (void)c;
  s->runs++;
  if (!pthread_equal(pthread_self(), s->owner)) {
    s->wrong_thread++;
  }
  if (s->stop) {
    s->stop_seen = 1;
  }
}

static void *hammer(void *arg) {
  shared *s = arg;
  int i;
  for (i = 0; i < PER_THREAD; i++) {
    assert_int_equal(conch_client_wakeup(s->c), 0);
  }
  return NULL;
}

static void test_wakeup_from_threads(void **state) {
  shared s = {0};
  pthread_t t[THREADS];
  int i;
  (void)state;

  assert_int_equal(conch_client_new(&s.c, "http://127.0.0.1:1", NULL), 0);
  s.owner = pthread_self();
  assert_int_equal(conch_client_set_wakeup_cb(s.c, on_wake, &s), 0);
  for (i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_create(&t[i], NULL, hammer, &s), 0);
  }
  /* Drive while they hammer; a turn with nothing to do times out. */
  for (i = 0; i < 50; i++) {
    assert_int_equal(conch_client_run(s.c, 5), 0);
  }
  for (i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
  }
  /* One more wakeup after everything: it must wake the loop. */
  s.stop = 1;
  assert_int_equal(conch_client_wakeup(s.c), 0);
  for (i = 0; i < 100 && !s.stop_seen; i++) {
    assert_int_equal(conch_client_run(s.c, 1000), 0);
  }
  assert_int_equal(s.stop_seen, 1);
  assert_int_equal(s.wrong_thread, 0);
  assert_true(s.runs >= 1 && s.runs <= THREADS * PER_THREAD + 1);
  /* Nothing pending: a turn now just times out. */
  {
    int before = s.runs;
    assert_int_equal(conch_client_run(s.c, 10), 0);
    assert_int_equal(s.runs, before);
  }
  conch_client_free(s.c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wakeup_from_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
