/* The option setters both roles have (base/optset.h): each one's refused
   values and accepted edges, for the client (conch_client_opts_*) and the
   server (conch_server_opts_*), through the public setters and against the
   ranges their headers document.  A refused value returns
   CONCH_ERR_INVALID and leaves the option as it was; an accepted one is
   stored as given.  A change to one role's range (or to the shared check)
   fails here, naming the setter and the value. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <conch/conch.h>
#include <conch/server.h>

#include "opts_int.h"
#include "server_int.h"

/* |call| returns 0 and |field| is then |want|. */
#define ACCEPTS(call, field, want)                                             \
  do {                                                                         \
    int rv_ = (call);                                                          \
    if (rv_ != 0) {                                                            \
      fail_msg("%s: refused (%d), should accept", #call, rv_);                 \
    }                                                                          \
    if ((field) != (want)) {                                                   \
      fail_msg("%s: stored something else", #call);                            \
    }                                                                          \
  } while (0)

/* |call| returns CONCH_ERR_INVALID and |field| is unchanged. */
#define REFUSES(call, field)                                                   \
  do {                                                                         \
    unsigned char before_[sizeof(field)];                                      \
    int rv_;                                                                   \
    memcpy(before_, &(field), sizeof(field));                                  \
    rv_ = (call);                                                              \
    if (rv_ != CONCH_ERR_INVALID) {                                            \
      fail_msg("%s: returned %d, should refuse (CONCH_ERR_INVALID)", #call,    \
               rv_);                                                           \
    }                                                                          \
    if (memcmp(before_, &(field), sizeof(field)) != 0) {                       \
      fail_msg("%s: refused but changed the option", #call);                   \
    }                                                                          \
  } while (0)

typedef struct roles {
  conch_client_opts *c;
  conch_server_opts *s;
} roles;

static int setup(void **state) {
  roles *r = test_calloc(1, sizeof(*r));
  assert_int_equal(conch_client_opts_new(&r->c), 0);
  assert_int_equal(conch_server_opts_new(&r->s), 0);
  *state = r;
  return 0;
}

static int teardown(void **state) {
  roles *r = *state;
  conch_client_opts_free(r->c);
  conch_server_opts_free(r->s);
  test_free(r);
  return 0;
}

/* The defaults each header documents, where the roles share a kind. */
static void test_defaults(void **state) {
  roles *r = *state;

  /* Receive limit: the same in both roles. */
  assert_int_equal(r->c->recv_limit, 4u << 20);
  assert_int_equal(r->s->recv_limit, 4u << 20);
  /* Header lists: the roles differ (client 256 KiB, server 64 KiB). */
  assert_int_equal(r->c->max_header_list, 256u << 10);
  assert_int_equal(r->s->max_header_list, 64u << 10);
  /* Compression threshold: the client compresses every message it was
     told to (0), the server responses of 1 KiB and more. */
  assert_int_equal(r->c->compress_min_bytes, 0);
  assert_int_equal(r->s->compress_min, 1024);
  assert_null(r->c->clock);
  assert_null(r->s->clock);
  assert_null(r->c->json_resolve);
  assert_null(r->s->json_resolve);
  /* Timeouts: the client's connect 30 s; the server's header 10 s, body and
     idle 60 s, drain 0 (none). */
  assert_int_equal(r->c->connect_timeout_ms, 30000);
  assert_int_equal(r->s->header_ms, 10000);
  assert_int_equal(r->s->body_ms, 60000);
  assert_int_equal(r->s->idle_ms, 60000);
  assert_int_equal(r->s->drain_ms, 0);
  /* Connections: the client's pool 1, the server's bound 1024. */
  assert_int_equal(r->c->max_conns, 1);
  assert_int_equal(r->s->max_conns, 1024);
}

/* Every shared setter refuses NULL options in both roles. */
static void test_null_opts(void **state) {
  (void)state;
  assert_int_equal(conch_client_opts_set_mem(NULL, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_mem(NULL, NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_recv_limit(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_recv_limit(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_send_limit(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_get_max_url(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_compress_min_bytes(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_compress_min_bytes(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_max_header_list(NULL, 4096),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_max_header_list(NULL, 4096),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_windows(NULL, 1 << 20, 1 << 20),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_max_streams(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_send_buffer(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_connect_timeout(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_idle_timeout(NULL, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_drain_timeout(NULL, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_header_timeout(NULL, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_body_timeout(NULL, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_max_connections(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_max_conns(NULL, 1), CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_buffer_limits(NULL, 1, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_clock(NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_clock(NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_json_resolver(NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_json_resolver(NULL, NULL, NULL),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_accept_compression(NULL, "gzip"),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_opts_set_compression(NULL, "gzip"),
                   CONCH_ERR_INVALID);
}

static void *fake_malloc(size_t n, void *ud) {
  (void)n;
  (void)ud;
  return NULL;
}
static void fake_free(void *p, void *ud) {
  (void)p;
  (void)ud;
}
static void *fake_calloc(size_t n, size_t m, void *ud) {
  (void)n;
  (void)m;
  (void)ud;
  return NULL;
}
static void *fake_realloc(void *p, size_t n, void *ud) {
  (void)p;
  (void)n;
  (void)ud;
  return NULL;
}

/* The allocator: each NULL function refused, a whole one copied, NULL the
   C library's; the same in both roles. */
static void test_mem(void **state) {
  roles *r = *state;
  static int ud;
  const conch_mem whole = {&ud, fake_malloc, fake_free, fake_calloc,
                           fake_realloc};
  int i;

  for (i = 0; i < 4; i++) {
    conch_mem m = whole;
    switch (i) {
    case 0:
      m.malloc = NULL;
      break;
    case 1:
      m.free = NULL;
      break;
    case 2:
      m.calloc = NULL;
      break;
    default:
      m.realloc = NULL;
      break;
    }
    REFUSES(conch_client_opts_set_mem(r->c, &m), r->c->mem);
    REFUSES(conch_server_opts_set_mem(r->s, &m), r->s->mem);
  }
  assert_int_equal(conch_client_opts_set_mem(r->c, &whole), 0);
  assert_memory_equal(&r->c->mem, &whole, sizeof(whole));
  assert_int_equal(conch_server_opts_set_mem(r->s, &whole), 0);
  assert_memory_equal(&r->s->mem, &whole, sizeof(whole));
  /* A refused one after a good one leaves the good one. */
  {
    conch_mem bad = whole;
    bad.free = NULL;
    REFUSES(conch_client_opts_set_mem(r->c, &bad), r->c->mem);
    REFUSES(conch_server_opts_set_mem(r->s, &bad), r->s->mem);
  }
  assert_int_equal(conch_client_opts_set_mem(r->c, NULL), 0);
  assert_memory_equal(&r->c->mem, conch_mem_default(), sizeof(conch_mem));
  assert_int_equal(conch_server_opts_set_mem(r->s, NULL), 0);
  assert_memory_equal(&r->s->mem, conch_mem_default(), sizeof(conch_mem));
}

/* Message sizes: any size_t, 0 included (no limit), in both roles. */
static void test_sizes(void **state) {
  roles *r = *state;
  static const size_t edges[] = {0, 1, 1023, 1024, SIZE_MAX - 1, SIZE_MAX};
  size_t i;

  for (i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
    size_t v = edges[i];
    ACCEPTS(conch_client_opts_set_recv_limit(r->c, v), r->c->recv_limit, v);
    ACCEPTS(conch_server_opts_set_recv_limit(r->s, v), r->s->recv_limit, v);
    ACCEPTS(conch_client_opts_set_compress_min_bytes(r->c, v),
            r->c->compress_min_bytes, v);
    ACCEPTS(conch_server_opts_set_compress_min_bytes(r->s, v),
            r->s->compress_min, v);
    ACCEPTS(conch_client_opts_set_send_limit(r->c, v), r->c->send_limit, v);
    ACCEPTS(conch_client_opts_set_get_max_url(r->c, v), r->c->get_max_url, v);
    ACCEPTS(conch_server_opts_set_buffer_limits(r->s, v, SIZE_MAX - v),
            r->s->conn_buffered, v);
    assert_true(r->s->max_buffered == SIZE_MAX - v);
  }
  /* The server's send buffer is another kind: 0 would take no message. */
  REFUSES(conch_server_opts_set_send_buffer(r->s, 0), r->s->send_buffer);
  ACCEPTS(conch_server_opts_set_send_buffer(r->s, 1), r->s->send_buffer, 1);
  ACCEPTS(conch_server_opts_set_send_buffer(r->s, SIZE_MAX), r->s->send_buffer,
          SIZE_MAX);
  REFUSES(conch_server_opts_set_send_buffer(r->s, 0), r->s->send_buffer);
}

/* Header lists: under 1024 refused, 1024 up to UINT32_MAX taken, in both
   roles (the defaults differ: test_defaults). */
static void test_header_list(void **state) {
  roles *r = *state;
  static const uint32_t refused[] = {0, 1, 1023};
  static const uint32_t accepted[] = {1024, 1025, 1u << 20, UINT32_MAX};
  size_t i;

  for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    REFUSES(conch_client_opts_set_max_header_list(r->c, refused[i]),
            r->c->max_header_list);
    REFUSES(conch_server_opts_set_max_header_list(r->s, refused[i]),
            r->s->max_header_list);
  }
  for (i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
    ACCEPTS(conch_client_opts_set_max_header_list(r->c, accepted[i]),
            r->c->max_header_list, accepted[i]);
    ACCEPTS(conch_server_opts_set_max_header_list(r->s, accepted[i]),
            r->s->max_header_list, accepted[i]);
  }
  /* Refused after a set: the set value stays. */
  REFUSES(conch_client_opts_set_max_header_list(r->c, 1023),
          r->c->max_header_list);
  REFUSES(conch_server_opts_set_max_header_list(r->s, 1023),
          r->s->max_header_list);
}

/* The client's windows (65535..2^31-1 each, both checked before either is
   set) and the server's stream count (at least 1). */
static void test_windows_streams(void **state) {
  roles *r = *state;
  static const uint32_t refused[] = {0, 1, 65534, 0x80000000u, UINT32_MAX};
  static const uint32_t ok[] = {65535, 65536, 0x7ffffffeu, 0x7fffffffu};
  size_t i, j;

  for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    for (j = 0; j < sizeof(ok) / sizeof(ok[0]); j++) {
      REFUSES(conch_client_opts_set_windows(r->c, refused[i], ok[j]),
              r->c->stream_window);
      REFUSES(conch_client_opts_set_windows(r->c, refused[i], ok[j]),
              r->c->conn_window);
      REFUSES(conch_client_opts_set_windows(r->c, ok[j], refused[i]),
              r->c->stream_window);
      REFUSES(conch_client_opts_set_windows(r->c, ok[j], refused[i]),
              r->c->conn_window);
    }
  }
  for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    uint32_t other = ok[sizeof(ok) / sizeof(ok[0]) - 1 - i];
    ACCEPTS(conch_client_opts_set_windows(r->c, ok[i], other),
            r->c->stream_window, ok[i]);
    assert_int_equal(r->c->conn_window, other);
  }
  REFUSES(conch_server_opts_set_max_streams(r->s, 0), r->s->max_streams);
  ACCEPTS(conch_server_opts_set_max_streams(r->s, 1), r->s->max_streams, 1);
  ACCEPTS(conch_server_opts_set_max_streams(r->s, UINT32_MAX),
          r->s->max_streams, UINT32_MAX);
  REFUSES(conch_server_opts_set_max_streams(r->s, 0), r->s->max_streams);
}

/* Timeouts: the client's connect timeout refuses 0 and below; the server's
   (idle, drain, header, body) refuse only negative values, 0 being none. */
static void test_timeouts(void **state) {
  roles *r = *state;
  static const long negative[] = {LONG_MIN, LONG_MIN + 1, -1000, -1};
  static const long positive[] = {1, 999, 1000, LONG_MAX - 1, LONG_MAX};
  size_t i;

  for (i = 0; i < sizeof(negative) / sizeof(negative[0]); i++) {
    long v = negative[i];
    REFUSES(conch_client_opts_set_connect_timeout(r->c, v),
            r->c->connect_timeout_ms);
    REFUSES(conch_server_opts_set_idle_timeout(r->s, v), r->s->idle_ms);
    REFUSES(conch_server_opts_set_drain_timeout(r->s, v), r->s->drain_ms);
    REFUSES(conch_server_opts_set_header_timeout(r->s, v), r->s->header_ms);
    REFUSES(conch_server_opts_set_body_timeout(r->s, v), r->s->body_ms);
  }
  /* 0: the roles differ. */
  REFUSES(conch_client_opts_set_connect_timeout(r->c, 0),
          r->c->connect_timeout_ms);
  ACCEPTS(conch_server_opts_set_idle_timeout(r->s, 0), r->s->idle_ms, 0);
  ACCEPTS(conch_server_opts_set_drain_timeout(r->s, 0), r->s->drain_ms, 0);
  ACCEPTS(conch_server_opts_set_header_timeout(r->s, 0), r->s->header_ms, 0);
  ACCEPTS(conch_server_opts_set_body_timeout(r->s, 0), r->s->body_ms, 0);
  for (i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
    long v = positive[i];
    ACCEPTS(conch_client_opts_set_connect_timeout(r->c, v),
            r->c->connect_timeout_ms, v);
    ACCEPTS(conch_server_opts_set_idle_timeout(r->s, v), r->s->idle_ms, v);
    ACCEPTS(conch_server_opts_set_drain_timeout(r->s, v), r->s->drain_ms, v);
    ACCEPTS(conch_server_opts_set_header_timeout(r->s, v), r->s->header_ms, v);
    ACCEPTS(conch_server_opts_set_body_timeout(r->s, v), r->s->body_ms, v);
  }
  REFUSES(conch_client_opts_set_connect_timeout(r->c, 0),
          r->c->connect_timeout_ms);
  REFUSES(conch_server_opts_set_idle_timeout(r->s, -1), r->s->idle_ms);
}

/* Connections: the client's pool 1..1024 (max_conns_set only when taken),
   the server's bound any size_t (0: none). */
static void test_connections(void **state) {
  roles *r = *state;
  static const int refused[] = {INT_MIN, -1, 0, 1025, INT_MAX};
  static const size_t bounds[] = {0, 1, 1024, 1025, SIZE_MAX};
  size_t i;

  for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    REFUSES(conch_client_opts_set_max_connections(r->c, refused[i]),
            r->c->max_conns);
    assert_int_equal(r->c->max_conns_set, 0);
  }
  ACCEPTS(conch_client_opts_set_max_connections(r->c, 1), r->c->max_conns, 1);
  assert_int_equal(r->c->max_conns_set, 1);
  ACCEPTS(conch_client_opts_set_max_connections(r->c, 1024), r->c->max_conns,
          1024);
  REFUSES(conch_client_opts_set_max_connections(r->c, 1025), r->c->max_conns);
  for (i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
    ACCEPTS(conch_server_opts_set_max_conns(r->s, bounds[i]), r->s->max_conns,
            bounds[i]);
  }
}

static int64_t clock_a(void *ud) {
  (void)ud;
  return 1;
}

static const struct ProtobufCMessageDescriptor *resolver_a(const char *url,
                                                           void *ud) {
  (void)url;
  (void)ud;
  return NULL;
}

/* Hooks: a clock or resolver keeps its user_data; NULL drops both, in both
   roles. */
static void test_hooks(void **state) {
  roles *r = *state;
  static int ud;

  assert_int_equal(conch_client_opts_set_clock(r->c, clock_a, &ud), 0);
  assert_ptr_equal(r->c->clock, clock_a);
  assert_ptr_equal(r->c->clock_ud, &ud);
  assert_int_equal(conch_server_opts_set_clock(r->s, clock_a, &ud), 0);
  assert_ptr_equal(r->s->clock, clock_a);
  assert_ptr_equal(r->s->clock_ud, &ud);
  assert_int_equal(conch_client_opts_set_clock(r->c, NULL, &ud), 0);
  assert_null(r->c->clock);
  assert_null(r->c->clock_ud);
  assert_int_equal(conch_server_opts_set_clock(r->s, NULL, &ud), 0);
  assert_null(r->s->clock);
  assert_null(r->s->clock_ud);

  assert_int_equal(conch_client_opts_set_json_resolver(r->c, resolver_a, &ud),
                   0);
  assert_ptr_equal(r->c->json_resolve, resolver_a);
  assert_ptr_equal(r->c->json_resolve_ud, &ud);
  assert_int_equal(conch_server_opts_set_json_resolver(r->s, resolver_a, &ud),
                   0);
  assert_ptr_equal(r->s->json_resolve, resolver_a);
  assert_ptr_equal(r->s->json_resolve_ud, &ud);
  assert_int_equal(conch_client_opts_set_json_resolver(r->c, NULL, &ud), 0);
  assert_null(r->c->json_resolve);
  assert_null(r->c->json_resolve_ud);
  assert_int_equal(conch_server_opts_set_json_resolver(r->s, NULL, &ud), 0);
  assert_null(r->s->json_resolve);
  assert_null(r->s->json_resolve_ud);
}

/* The accepted compressions (one parser, conch__comp_set_accept): unknown
   names refused by both roles, the list unchanged; an empty name in the
   list skipped by the client, refused by the server; a trailing comma
   taken by both (it ends the list). */
static void test_compression_lists(void **state) {
  roles *r = *state;
  static const char *const both_refuse[] = {"nope", "gzip,nope", "gzip;q=1"};
  static const char *const empty_names[] = {"gzip,,deflate", ",gzip",
                                            "gzip, ,deflate"};
  size_t i;

  for (i = 0; i < sizeof(both_refuse) / sizeof(both_refuse[0]); i++) {
    REFUSES(conch_client_opts_set_accept_compression(r->c, both_refuse[i]),
            r->c->comp);
    REFUSES(conch_server_opts_set_compression(r->s, both_refuse[i]),
            r->s->comp);
  }
  for (i = 0; i < sizeof(empty_names) / sizeof(empty_names[0]); i++) {
    assert_int_equal(conch_client_opts_set_accept_compression(r->c, "deflate"),
                     0);
    assert_int_equal(
        conch_client_opts_set_accept_compression(r->c, empty_names[i]), 0);
    assert_int_equal(r->c->comp.accept[0], CONCH_COMPRESSION_GZIP);
    REFUSES(conch_server_opts_set_compression(r->s, empty_names[i]),
            r->s->comp);
  }
  assert_int_equal(conch_client_opts_set_accept_compression(r->c, "gzip,"), 0);
  assert_int_equal(r->c->comp.naccept, 1);
  assert_int_equal(conch_server_opts_set_compression(r->s, "gzip,"), 0);
  assert_int_equal(r->s->comp.naccept, 1);
  /* "" and NULL: identity only, in both roles. */
  assert_int_equal(conch_client_opts_set_accept_compression(r->c, ""), 0);
  assert_int_equal(r->c->comp.naccept, 0);
  assert_int_equal(conch_server_opts_set_compression(r->s, NULL), 0);
  assert_int_equal(r->s->comp.naccept, 0);
  assert_int_equal(conch_client_opts_set_accept_compression(r->c, "gzip"), 0);
  assert_int_equal(r->c->comp.naccept, 1);
  assert_int_equal(conch_server_opts_set_compression(r->s, " deflate , gzip"),
                   0);
  assert_int_equal(r->s->comp.naccept, 2);
  assert_int_equal(r->s->comp.accept[0], CONCH_COMPRESSION_DEFLATE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
      cmocka_unit_test(test_null_opts),
      cmocka_unit_test_setup_teardown(test_mem, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_header_list, setup, teardown),
      cmocka_unit_test_setup_teardown(test_windows_streams, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timeouts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_connections, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hooks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compression_lists, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
