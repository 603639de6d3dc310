/* runtime/codec/pbborrow.c: large bytes fields decoded in place must give the
   same message protobuf-c gives, with those fields pointing into the input,
   and leave every input it does not handle to protobuf-c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "pbborrow.h"
#include "process/process.pb-c.h"

static conch_buf scratch = CONCH_BUF_INIT;

/* A StartResponse{event{data{<out>: |n| bytes}}} packed into a new buffer. */
static uint8_t *pack_event(size_t n, int out, size_t *len) {
  Process__StartResponse r = PROCESS__START_RESPONSE__INIT;
  Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
  Process__ProcessEvent__DataEvent d = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
  uint8_t *data = malloc(n + 1), *buf;
  size_t i;
  for (i = 0; i < n; i++) {
    data[i] = (uint8_t)(i * 7);
  }
  if (out == 1) {
    d.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
    d.stdout.data = data;
    d.stdout.len = n;
  } else {
    d.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR;
    d.stderr.data = data;
    d.stderr.len = n;
  }
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
  ev.data = &d;
  r.event = &ev;
  *len = process__start_response__get_packed_size(&r);
  buf = malloc(*len);
  process__start_response__pack(&r, buf);
  free(data);
  return buf;
}

static Process__StartResponse *borrow(const uint8_t *p, size_t len) {
  return (Process__StartResponse *)conch__pb_unpack_borrow(
      &process__start_response__descriptor, NULL, p, len, &scratch,
      conch_mem_default());
}

static const ProtobufCBinaryData *out_of(const Process__StartResponse *r) {
  const Process__ProcessEvent__DataEvent *d = r->event->data;
  return d->output_case == PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT
             ? &d->stdout
             : &d->stderr;
}

static void test_same_message_borrowed(void **state) {
  static const size_t sizes[] = {0, 100, CONCH_BORROW_MIN - 1,
                                 CONCH_BORROW_MIN, 70000};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    int out;
    for (out = 1; out <= 2; out++) {
      size_t len;
      uint8_t *p = pack_event(sizes[i], out, &len);
      Process__StartResponse *want =
          process__start_response__unpack(NULL, len, p);
      Process__StartResponse *got = borrow(p, len);
      const ProtobufCBinaryData *w, *g;
      assert_non_null(want);
      assert_non_null(got);
      w = out_of(want);
      g = out_of(got);
      assert_int_equal(got->event->event_case, want->event->event_case);
      assert_int_equal(got->event->data->output_case,
                       want->event->data->output_case);
      assert_int_equal(g->len, w->len);
      if (w->len > 0) {
        assert_memory_equal(g->data, w->data, w->len);
      }
      /* In place from CONCH_BORROW_MIN up, copied below. */
      if (sizes[i] >= CONCH_BORROW_MIN) {
        assert_true(g->data > p && g->data + g->len <= p + len);
        /* Not protobuf-c's to free: out of the oneof before freeing. */
        got->event->data->output_case =
            PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT__NOT_SET;
      } else if (sizes[i] > 0) {
        assert_true(g->data < p || g->data >= p + len);
      }
      process__start_response__free_unpacked(want, NULL);
      process__start_response__free_unpacked(got, NULL);
      free(p);
    }
  }
}

/* Inputs left to protobuf-c: the answer is protobuf-c's. */
static void test_left_to_protobuf_c(void **state) {
  size_t len, i;
  uint8_t *p = pack_event(10000, 1, &len);
  uint8_t *twice = malloc(2 * len);
  Process__StartResponse *r;
  (void)state;

  /* Truncated anywhere: invalid, as protobuf-c says. */
  for (i = 0; i < len; i += 997) {
    Process__StartResponse *want = process__start_response__unpack(NULL, i, p);
    r = borrow(p, i);
    assert_int_equal(r == NULL, want == NULL);
    process__start_response__free_unpacked(want, NULL);
    process__start_response__free_unpacked(r, NULL);
  }
  /* The event twice (protobuf merges the two): protobuf-c decodes it, with
     copies. */
  memcpy(twice, p, len);
  memcpy(twice + len, p, len);
  r = borrow(twice, 2 * len);
  assert_non_null(r);
  assert_int_equal(out_of(r)->len, 10000);
  assert_true(out_of(r)->data < twice || out_of(r)->data >= twice + 2 * len);
  process__start_response__free_unpacked(r, NULL);
  /* A group's wire type where the event should be: invalid. */
  twice[0] = 0x0b;
  assert_null(borrow(twice, len));
  free(twice);
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_message_borrowed),
      cmocka_unit_test(test_left_to_protobuf_c),
  };
  int rv = cmocka_run_group_tests(tests, NULL, NULL);
  conch__buf_free(&scratch, conch_mem_default());
  return rv;
}
