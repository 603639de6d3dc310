/* Client construction: URLs, options, version, and the driving API's
   argument checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "failmem.h"
#include <conch/conch.h>

#include "call_int.h"
#include "client_int.h"

static void check_url(const char *url, int tls, const char *host,
                      const char *port, const char *authority,
                      const char *prefix) {
  conch_client *c;
  assert_int_equal(conch_client_new(&c, url, NULL), 0);
  assert_int_equal(c->tls, tls);
  assert_string_equal(c->host, host);
  assert_string_equal(c->port, port);
  assert_string_equal(c->authority, authority);
  assert_string_equal(c->prefix, prefix);
  conch_client_free(c);
}

/* How messages name the target. */
static void check_target(const char *url, const char *target) {
  conch_client *c;
  assert_int_equal(conch_client_new(&c, url, NULL), 0);
  assert_string_equal(c->target, target);
  conch_client_free(c);
}

static void test_urls(void **state) {
  (void)state;
  check_target("http://[::1]:49983", "[::1]:49983");
  check_target("https://example.com/x", "example.com:443");
  check_target("http://h:008080", "h:8080");
  check_target("unix:/run/conch/serve.sock", "/run/conch/serve.sock");
  check_url("http://127.0.0.1:8080", 0, "127.0.0.1", "8080", "127.0.0.1:8080",
            "");
  check_url("http://localhost", 0, "localhost", "80", "localhost", "");
  check_url("https://example.com", 1, "example.com", "443", "example.com",
            "");
  check_url("https://example.com/", 1, "example.com", "443", "example.com",
            "");
  check_url("https://example.com:8443/api/v1/", 1, "example.com", "8443",
            "example.com:8443", "/api/v1");
  check_url("http://[::1]:49983", 0, "::1", "49983", "[::1]:49983", "");
  /* The port in canonical digits; the authority as written. */
  check_url("http://h:008080", 0, "h", "8080", "h:008080", "");
  check_url("https://[2001:db8::1]", 1, "2001:db8::1", "443", "[2001:db8::1]",
            "");
}

static void test_bad_urls(void **state) {
  static const char *bad[] = {
      "", "ftp://x", "http://", "http://:80", "http://host:", "http://host:0",
      "http://host:65536", "http://host:12ab", "http://user@host",
      "http://host/path?query", "http://host#frag", "http://[::1",
      "http://[]:80", "http://ho st", "https//host", "HTTP://host"};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    conch_client *c = (conch_client *)1;
    int rv = conch_client_new(&c, bad[i], NULL);
    if (rv != CONCH_ERR_URL) {
      fail_msg("'%s' gave %d", bad[i], rv);
    }
    assert_ptr_equal(c, (conch_client *)1); /* untouched on failure */
  }
  assert_int_equal(conch_client_new(NULL, "http://x", NULL), CONCH_ERR_INVALID);
}

static void test_opts(void **state) {
  conch_client_opts *o;
  conch_client *c;
  (void)state;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_gzip_level(o, 10), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_gzip_level(o, 9), 0);
  assert_int_equal(conch_client_opts_set_windows(o, 1000, 1 << 20),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_windows(o, 1u << 31, 1 << 20),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_windows(o, 1 << 20, 1 << 24), 0);
  assert_int_equal(conch_client_opts_set_connect_timeout(o, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_user_agent(o, "bad\r\nua"),
                   CONCH_ERR_HEADER);
  assert_int_equal(conch_client_opts_set_user_agent(o, "mine/1.0"), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, (conch_protocol)7),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_send_compression(o, 42),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_client_cert_file(o, NULL, "k"),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_ca_pem(o, NULL, 3),
                   CONCH_ERR_INVALID);
  /* A missing CA file is refused when the client is made, with TLS. */
  assert_int_equal(conch_client_opts_set_ca_file(o, "/nonexistent/ca.pem"), 0);
  assert_int_equal(conch_client_new(&c, "https://h", o), CONCH_ERR_TLS);
  /* ... and ignored for cleartext. */
  assert_int_equal(conch_client_new(&c, "http://h", o), 0);
  assert_string_equal(c->user_agent, "mine/1.0");
  assert_int_equal(c->o.stream_window, 1 << 20);
  conch_client_free(c);
  conch_client_opts_free(o);
  conch_client_opts_free(NULL);
}

/* Unix sockets: the "unix:" URL and the option (over an http:// URL). */
static void test_unix_socket(void **state) {
  char longpath[CONCH_UNIX_PATH_MAX + 8];
  conch_client_opts *o;
  conch_client *c = NULL;
  (void)state;
  assert_int_equal(conch_client_new(&c, "unix:/run/x/serve.sock", NULL), 0);
  assert_string_equal(c->unix_path, "/run/x/serve.sock");
  assert_string_equal(c->authority, "localhost");
  assert_string_equal(c->prefix, "");
  assert_int_equal(c->tls, 0);
  conch_client_free(c);
  c = (conch_client *)1;
  assert_int_equal(conch_client_new(&c, "unix:", NULL), CONCH_ERR_URL);
  memset(longpath, 'a', sizeof(longpath));
  memcpy(longpath, "unix:/", 6);
  longpath[5 + CONCH_UNIX_PATH_MAX] = '\0'; /* one byte over */
  assert_int_equal(conch_client_new(&c, longpath, NULL), CONCH_ERR_URL);
  longpath[5 + CONCH_UNIX_PATH_MAX - 1] = '\0'; /* the longest */
  assert_int_equal(conch_client_new(&c, longpath, NULL), 0);
  conch_client_free(c);

  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_unix_socket(o, ""), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_unix_socket(o, longpath + 4),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_unix_socket(NULL, "/s"),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_unix_peer_any(NULL, 1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_opts_set_unix_socket(o, "/tmp/a.sock"), 0);
  assert_int_equal(conch_client_opts_set_unix_peer_any(o, 1), 0);
  assert_int_equal(conch_client_new(&c, "http://box:8080/p", o), 0);
  assert_string_equal(c->unix_path, "/tmp/a.sock");
  assert_string_equal(c->authority, "box:8080");
  assert_string_equal(c->prefix, "/p");
  assert_int_equal(c->o.unix_peer_any, 1);
  conch_client_free(c);
  /* The URL's path wins over the option's. */
  assert_int_equal(conch_client_new(&c, "unix:/b.sock", o), 0);
  assert_string_equal(c->unix_path, "/b.sock");
  conch_client_free(c);
  assert_int_equal(conch_client_opts_set_unix_socket(o, NULL), 0);
  assert_int_equal(conch_client_new(&c, "http://box", o), 0);
  assert_null(c->unix_path);
  conch_client_free(c);
  conch_client_opts_free(o);
}

static void test_version_and_strerror(void **state) {
  const conch_version_info *v = conch_version();
  int rv;
  (void)state;
  assert_true(v->age >= 2);
  assert_string_equal(v->version_str, CONCH_VERSION_STRING);
  /* The modules built, as conch/features.h says them. */
  assert_int_equal((v->features & CONCH_FEATURE_SERVER) != 0,
                   CONCH_WITH_SERVER);
  assert_int_equal((v->features & CONCH_FEATURE_BROTLI) != 0,
                   CONCH_WITH_BROTLI);
  assert_int_equal((v->features & CONCH_FEATURE_ZSTD) != 0, CONCH_WITH_ZSTD);
  assert_int_equal((v->features & CONCH_FEATURE_SNAPPY) != 0,
                   CONCH_WITH_SNAPPY);
  assert_int_equal((v->features & CONCH_FEATURE_JSON) != 0, CONCH_WITH_JSON);
  for (rv = 0; rv >= -30; rv--) {
    assert_non_null(conch_strerror(rv));
  }
  assert_non_null(conch_strerror(CONCH_ERR_FATAL));
  assert_non_null(conch_strerror(12345));
}

static void test_driving_arguments(void **state) {
  conch_client *c;
  struct pollfd fds[4];
  (void)state;
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", NULL), 0);
  /* Idle: only the wakeup fd, no timer. */
  assert_int_equal(conch_client_pollfds(c, fds, 4), 1);
  assert_int_equal(conch_client_pollfds(c, NULL, 0), 1);
  assert_int_equal(conch_client_timeout_ms(c), -1);
  assert_int_equal(conch_client_process(c, NULL, 0), 0);
  assert_int_equal(conch_client_run(c, 0), 0);
  assert_int_equal(conch_client_on_timer(NULL), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_set_io_hooks(c, &(conch_io_hooks){NULL, NULL,
                                                                  NULL}),
                   CONCH_ERR_INVALID);
  conch_client_free(c);
  conch_client_free(NULL);
}

/* Arguments of conch_client_keepalive_default (its effect, PINGs on unless
   the caller's options chose, is measured against a frozen server in
   tests/api/test_teardown.c). */
static void test_keepalive_default(void **state) {
  conch_client_opts *o;
  conch_client *c;
  (void)state;
  assert_int_equal(conch_client_keepalive_default(NULL, 1000, 0),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", NULL), 0);
  assert_int_equal(conch_client_keepalive_default(c, 999, 0), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_keepalive_default(c, -1, 0), CONCH_ERR_INVALID);
  assert_int_equal(conch_client_keepalive_default(c, 1000, -1),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_client_keepalive_default(c, 10000, 10000), 0);
  assert_int_equal(conch_client_keepalive_default(c, 0, 0), 0);
  conch_client_free(c);
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_keepalive(o, 0, 0), 0);
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", o), 0);
  assert_int_equal(conch_client_keepalive_default(c, 5000, 0), 0);
  conch_client_free(c);
  conch_client_opts_free(o);
}

static void test_new_survives_every_oom(void **state) {
  size_t n;
  static const char *const urls[] = {"http://example.com:80/prefix",
                                     "unix:/other.sock"};
  size_t u;
  (void)state;
  for (u = 0; u < 2; u++) {
    for (n = 0;; n++) {
      conch_client_opts *o;
      conch_client *c = NULL;
      int rv;
      assert_int_equal(conch_client_opts_new(&o), 0);
      assert_int_equal(conch_client_opts_set_mem(o, failmem_hooks()), 0);
      assert_int_equal(conch_client_opts_set_user_agent(o, "x/1"), 0);
      assert_int_equal(conch_client_opts_set_unix_socket(o, "/s.sock"), 0);
      failmem_fail_at(n);
      rv = conch_client_new(&c, urls[u], o);
      conch_client_opts_free(o);
      if (rv == 0) {
        conch_client_free(c);
      } else {
        assert_int_equal(rv, CONCH_ERR_NOMEM);
      }
      assert_int_equal(failmem_live_blocks(), 0);
      if (!failmem_fired()) {
        assert_int_equal(rv, 0);
        break;
      }
    }
  }
  failmem_fail_at((size_t)-1);
}

typedef struct alarm_log {
  int fired[4];
  conch_alarm *self;
} alarm_log;

static void alarm_cb(conch_client *c, void *ud) {
  int *slot = ud;
  (void)c;
  (*slot)++;
}

static void alarm_cancels_itself(conch_client *c, void *ud) {
  alarm_log *log = ud;
  (void)c;
  log->fired[3]++;
  conch_alarm_cancel(log->self); /* a no-op from inside */
}

static void test_alarms(void **state) {
  conch_client *c;
  alarm_log log;
  conch_alarm *a1, *a2;
  int64_t t0 = conch__now_ms();
  (void)state;
  memset(&log, 0, sizeof(log));
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", NULL), 0);
  assert_int_equal(conch_client_alarm(c, 80, alarm_cb, &log.fired[0], &a1), 0);
  assert_int_equal(conch_client_alarm(c, 20, alarm_cb, &log.fired[1], NULL), 0);
  assert_int_equal(conch_client_alarm(c, 40, alarm_cb, &log.fired[2], &a2), 0);
  assert_int_equal(conch_client_alarm(c, 0, alarm_cancels_itself, &log,
                                      &log.self),
                   0);
  assert_int_equal(conch_client_timeout_ms(c), 0);
  conch_alarm_cancel(a2);
  while (log.fired[0] == 0) {
    assert_int_equal(conch_client_run(c, -1), 0);
  }
  assert_true(conch__now_ms() - t0 >= 80);
  assert_int_equal(log.fired[0], 1);
  assert_int_equal(log.fired[1], 1);
  assert_int_equal(log.fired[2], 0); /* canceled */
  assert_int_equal(log.fired[3], 1);
  assert_int_equal(conch_client_timeout_ms(c), -1);
  /* Pending alarms are freed with the client, without running. */
  assert_int_equal(conch_client_alarm(c, 100000, alarm_cb, &log.fired[0], NULL),
                   0);
  conch_client_free(c);
  assert_int_equal(log.fired[0], 1);
}

static void on_close_count(conch_call *call, const conch_status *st,
                           const conch_metadata *t, void *ud) {
  int *n = ud;
  (void)call;
  (void)t;
  assert_int_equal(st->code, CONCH_CODE_DEADLINE_EXCEEDED);
  (*n)++;
}

static void test_deadline_grace(void **state) {
  conch_client *c;
  conch_call *call;
  conch_call_opts opts = CONCH_CALL_OPTS_INIT;
  conch_call_handler h = {NULL, NULL, NULL, NULL, on_close_count};
  conch_method m = {"/t.v1.T/M", CONCH_STREAM_SERVER, NULL, NULL, 0};
  int closes = 0;
  int64_t t0;
  (void)state;
  assert_int_equal(conch_client_new(&c, "http://127.0.0.1:1", NULL), 0);
  opts.timeout_ms = 30;
  opts.deadline_grace_ms = 1500;
  t0 = conch__now_ms();
  assert_int_equal(conch__call_new_detached(c, &m, &opts, &h, &closes, &call),
                   0);
  /* The deadline passes, the grace has not: the call is still open (a
     turn that returned before the grace's end proves it; on a machine
     stalled past the grace there is nothing to check). */
  assert_int_equal(conch_client_run(c, 100), 0);
  if (conch__now_ms() - t0 < 1530) {
    assert_int_equal(closes, 0);
    assert_false(conch_call_done(call));
  }
  while (closes == 0) {
    assert_int_equal(conch_client_run(c, -1), 0);
  }
  assert_true(conch__now_ms() - t0 >= 1530);
  conch_call_free(call);
  conch_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_urls),
      cmocka_unit_test(test_bad_urls),
      cmocka_unit_test(test_opts),
      cmocka_unit_test(test_unix_socket),
      cmocka_unit_test(test_version_and_strerror),
      cmocka_unit_test(test_driving_arguments),
      cmocka_unit_test(test_keepalive_default),
      cmocka_unit_test(test_new_survives_every_oom),
      cmocka_unit_test(test_alarms),
      cmocka_unit_test(test_deadline_grace),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
