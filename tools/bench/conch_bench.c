/* conch's side of the benchmarks (tools/bench/run.sh runs it against the
   connect-node server, next to a connect-node client doing the same).

     conch-bench unary  URL CONCURRENCY SECONDS PAYLOAD_BYTES
     conch-bench stream URL SECONDS MESSAGE_BYTES
     conch-bench idle   URL STREAMS
     conch-bench [--protocol connect|grpc] list  URL CONC CALLS
     conch-bench [--protocol connect|grpc] setup URL CONC STREAMS
     conch-bench [--protocol connect|grpc] listasync|setupasync URL CONC N
     conch-bench [--protocol connect|grpc] bulk  URL MESSAGES BYTES
     (--http1 before the workload: the client speaks HTTP/1.1)

   unary: CONCURRENCY unary calls kept in flight on one connection for
   SECONDS; stream: one server stream of MESSAGE_BYTES messages read for
   SECONDS; idle: STREAMS open server streams, to measure memory per stream.
   Those four use the interop test service (tools/bench/run.sh).

   list, setup and bulk run against tools/bench/bench_server.c
   (tools/bench/compare.sh), a fixed amount of work each: CALLS unary
   process.Process/List calls with CONC in flight; STREAMS server streams of
   process.Process/Start of one 64-byte message each, CONC open at a time;
   one stream of MESSAGES messages of BYTES stdout bytes.  listasync and
   setupasync do list's and setup's work through the typed one-callback
   stubs (process__process__list_async(), process__process__start_async()),
   the calls freeing themselves.  With
   CONCH_BENCH_ALLOCS=1 in the environment the client counts its allocations
   (conch_mem hooks), split into nghttp2's and the rest (conch's own, with
   protobuf-c's arena), and reports them per call or stream.

   Prints one JSON line: calls or bytes, seconds, and the CPU time this
   process used (user + system). */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <conch/conch.h>
#include <conch/retry.h>

#include <nghttp2/nghttp2.h>

#include "conchtest/v1/test.pb-c.h"
#include "process/process.conch.h"
#include "process/process.pb-c.h"

#define SVC "/conchtest.v1.TestService/"

static const conch_method m_unary = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};
static const conch_method m_server = {
    SVC "ServerStream", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  if (f == NULL) {
    return -1;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) {
      v = strtol(line + 6, NULL, 10);
    }
  }
  fclose(f);
  return v;
}

static conch_client *pc_client(const char *url, size_t recv_limit);

typedef struct unary_state {
  conch_client *c;
  Conchtest__V1__Request req;
  double deadline;
  long done;
  long errors;
  int inflight;
} unary_state;

static void start_unary(unary_state *s);

static void unary_close(conch_call *call, const conch_status *st,
                        const conch_metadata *trailers, void *ud) {
  unary_state *s = ud;
  (void)trailers;
  if (st->code == CONCH_CODE_OK) {
    s->done++;
  } else {
    s->errors++;
  }
  s->inflight--;
  conch_call_free(call);
  if (now_s() < s->deadline) {
    start_unary(s);
  }
}

static void unary_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  (void)call;
  (void)m;
  (void)ud;
}

static const conch_call_handler unary_h = {NULL, unary_msg, NULL, NULL,
                                           unary_close};

static void start_unary(unary_state *s) {
  conch_call *call;
  if (conch_call_start(s->c, &m_unary, NULL, &unary_h, s, &call) != 0 ||
      conch_call_send(call, &s->req.base) != 0) {
    fprintf(stderr, "cannot start a call\n");
    exit(1);
  }
  s->inflight++;
}

static int bench_unary(const char *url, int conc, double secs, size_t bytes) {
  unary_state s;
  uint8_t *payload = calloc(1, bytes + 1);
  double t0, c0, t1, c1;
  int i;

  memset(&s, 0, sizeof(s));
  conchtest__v1__request__init(&s.req);
  s.req.payload.data = payload;
  s.req.payload.len = bytes;
  s.c = pc_client(url, 0);
  /* Warm up the connection first. */
  s.deadline = now_s();
  start_unary(&s);
  while (s.inflight > 0) {
    conch_client_run(s.c, -1);
  }
  s.done = s.errors = 0;
  t0 = now_s();
  c0 = cpu_s();
  s.deadline = t0 + secs;
  for (i = 0; i < conc; i++) {
    start_unary(&s);
  }
  while (s.inflight > 0) {
    conch_client_run(s.c, -1);
  }
  t1 = now_s();
  c1 = cpu_s();
  printf("{\"mode\":\"unary\",\"calls\":%ld,\"errors\":%ld,\"seconds\":%.3f,"
         "\"cpu_seconds\":%.3f}\n",
         s.done, s.errors, t1 - t0, c1 - c0);
  conch_client_free(s.c);
  free(payload);
  return s.errors > 0;
}

typedef struct stream_state {
  double bytes;
  double deadline;
  int closed;
} stream_state;

static void stream_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  stream_state *s = ud;
  s->bytes += (double)((const Conchtest__V1__Response *)m)->payload.len;
  if (now_s() >= s->deadline) {
    conch_call_cancel(call);
  }
}

static void stream_close(conch_call *call, const conch_status *st,
                         const conch_metadata *trailers, void *ud) {
  stream_state *s = ud;
  (void)call;
  (void)st;
  (void)trailers;
  s->closed = 1;
}

static const conch_call_handler stream_h = {NULL, stream_msg, NULL, NULL,
                                            stream_close};

static int bench_stream(const char *url, double secs, size_t bytes) {
  conch_client *c;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  stream_state s = {0, 0, 0};
  conch_call *call;
  double t0, c0, t1, c1;

  c = pc_client(url, bytes + 1024);
  req.response_count = 1000000000;
  req.response_size = (uint32_t)bytes;
  t0 = now_s();
  c0 = cpu_s();
  s.deadline = t0 + secs;
  if (conch_call_start(c, &m_server, NULL, &stream_h, &s, &call) != 0 ||
      conch_call_send(call, &req.base) != 0) {
    return 1;
  }
  while (!s.closed) {
    conch_client_run(c, -1);
  }
  t1 = now_s();
  c1 = cpu_s();
  printf("{\"mode\":\"stream\",\"bytes\":%.0f,\"seconds\":%.3f,"
         "\"cpu_seconds\":%.3f}\n",
         s.bytes, t1 - t0, c1 - c0);
  conch_call_free(call);
  conch_client_free(c);
  return 0;
}

static int bench_idle(const char *url, int n) {
  conch_client *c;
  conch_call **calls = calloc((size_t)n, sizeof(*calls));
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  long rss0, rss1;
  double t0;
  int i;

  c = pc_client(url, 0);
  /* One call first, so the connection's own memory is not counted. */
  req.response_count = 1;
  if (conch_call_start(c, &m_server, NULL, NULL, NULL, &calls[0]) != 0 ||
      conch_call_send(calls[0], &req.base) != 0 ||
      conch_call_wait_sync(calls[0]) != 0) {
    return 1;
  }
  conch_call_free(calls[0]);
  rss0 = rss_kib();
  req.response_count = 1;
  req.delay_ms = 600000; /* the streams stay open, waiting */
  for (i = 0; i < n; i++) {
    if (conch_call_start(c, &m_server, NULL, NULL, NULL, &calls[i]) != 0 ||
        conch_call_send(calls[i], &req.base) != 0) {
      return 1;
    }
  }
  t0 = now_s();
  while (now_s() - t0 < 2.0) {
    conch_client_run(c, 100);
  }
  rss1 = rss_kib();
  printf("{\"mode\":\"idle\",\"streams\":%d,\"rss_kib_delta\":%ld}\n", n,
         rss1 - rss0);
  for (i = 0; i < n; i++) {
    conch_call_free(calls[i]);
  }
  free(calls);
  conch_client_free(c);
  return 0;
}

/* ---- Workloads against bench-server (compare.sh) ------------------------ */

static conch_protocol protocol = CONCH_PROTOCOL_CONNECT;
static int http1; /* --http1 */

/* Allocation counting: calls of the hooks whose caller lies in libnghttp2's
   mapping are nghttp2's, the rest conch's (with protobuf-c's arena). */
static uintptr_t h2_lo, h2_hi;
static long n_allocs_h2, n_allocs_own;

static int find_h2(struct dl_phdr_info *info, size_t size, void *ud) {
  uintptr_t want = (uintptr_t)ud, lo = UINTPTR_MAX, hi = 0;
  int i;
  (void)size;
  for (i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type != PT_LOAD) {
      continue;
    }
    if (a < lo) {
      lo = a;
    }
    if (a + ph->p_memsz > hi) {
      hi = a + ph->p_memsz;
    }
  }
  if (want >= lo && want < hi) {
    h2_lo = lo;
    h2_hi = hi;
    return 1;
  }
  return 0;
}

static void count_alloc(uintptr_t ra) {
  if (ra >= h2_lo && ra < h2_hi) {
    n_allocs_h2++;
  } else {
    n_allocs_own++;
  }
}

static void *cnt_malloc(size_t n, void *ud) {
  (void)ud;
  count_alloc((uintptr_t)__builtin_return_address(0));
  return malloc(n);
}

static void cnt_free(void *p, void *ud) {
  (void)ud;
  free(p);
}

static void *cnt_calloc(size_t k, size_t n, void *ud) {
  (void)ud;
  count_alloc((uintptr_t)__builtin_return_address(0));
  return calloc(k, n);
}

static void *cnt_realloc(void *p, size_t n, void *ud) {
  (void)ud;
  count_alloc((uintptr_t)__builtin_return_address(0));
  return realloc(p, n);
}

static const conch_mem counting_mem = {NULL, cnt_malloc, cnt_free, cnt_calloc,
                                       cnt_realloc};

static int counting(void) {
  const char *e = getenv("CONCH_BENCH_ALLOCS");
  return e != NULL && strcmp(e, "1") == 0;
}

/* CONCH_BENCH_LB=pick_first|round_robin: the URL's host:port (an IPv4
   address) as the one static target of that policy (tools/bench/lb.sh). */
static void lb_setup(conch_client_opts *o, const char *url) {
  const char *e = getenv("CONCH_BENCH_LB");
  const char *t[1];
  conch_lb_policy p;
  if (e == NULL || e[0] == '\0') {
    return;
  }
  p = strcmp(e, "round_robin") == 0 ? CONCH_LB_ROUND_ROBIN
                                    : CONCH_LB_PICK_FIRST;
  t[0] = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
  if (conch_client_opts_set_lb_policy(o, p) != 0 ||
      conch_client_opts_set_targets(o, t, 1) != 0) {
    fprintf(stderr, "conch-bench: CONCH_BENCH_LB: bad target %s\n", t[0]);
    exit(1);
  }
}

/* CONCH_BENCH_ICEPT=1: every call passes one interceptor, a metrics one
   (calls counted by final code: a start and a close hook), to measure
   what a chain costs (tools/bench/icept.sh). */
static long icept_codes[17];

static int icept_start(conch_call *call, conch_metadata *h, void **state,
                       void *ud) {
  (void)call;
  (void)h;
  (void)state;
  (void)ud;
  return CONCH_ICEPT_NEXT;
}

static void icept_close(conch_call *call, conch_status *st, conch_metadata *t,
                        void **state, void *ud) {
  (void)call;
  (void)t;
  (void)state;
  (void)ud;
  if ((unsigned)st->code < 17) {
    icept_codes[st->code]++;
  }
}

static int intercepting(void) {
  const char *e = getenv("CONCH_BENCH_ICEPT");
  return e != NULL && strcmp(e, "1") == 0;
}

/* CONCH_BENCH_RETRY=1: a retry policy (conch/retry.h) for every method,
   to measure what one costs when nothing fails (tools/bench/retry.sh). */
static int retrying(void) {
  const char *e = getenv("CONCH_BENCH_RETRY");
  return e != NULL && strcmp(e, "1") == 0;
}

static conch_client *pc_client(const char *url, size_t recv_limit) {
  conch_client *c;
  conch_client_opts *o;
  if (conch_client_opts_new(&o) != 0 ||
      conch_client_opts_set_protocol(o, protocol) != 0 ||
      (http1 && conch_client_opts_set_http_version(o, CONCH_HTTP_1_1) != 0) ||
      (recv_limit > 0 &&
       conch_client_opts_set_recv_limit(o, recv_limit) != 0)) {
    fprintf(stderr, "cannot make client options\n");
    exit(1);
  }
  if (intercepting()) {
    conch_call_interceptor ic = CONCH_CALL_INTERCEPTOR_INIT;
    ic.on_start = icept_start;
    ic.on_close = icept_close;
    if (conch_client_opts_add_interceptor(o, &ic) != 0) {
      fprintf(stderr, "cannot add the interceptor\n");
      exit(1);
    }
  }
  if (retrying()) {
    /* A policy for every method; nothing fails, so it costs what keeping
       the request until the answer and the checks at the end cost. */
    conch_retry_policy rp = CONCH_RETRY_POLICY_INIT;
    rp.max_attempts = 3;
    rp.initial_backoff_ms = 10;
    rp.max_backoff_ms = 100;
    rp.backoff_multiplier = 2;
    rp.retryable_codes = CONCH_RETRY_CODE(CONCH_CODE_UNAVAILABLE);
    if (conch_client_opts_set_retry(o, NULL, &rp) != 0) {
      fprintf(stderr, "cannot set the retry policy\n");
      exit(1);
    }
  }
  if (counting()) {
    dl_iterate_phdr(find_h2, (void *)(uintptr_t)&nghttp2_version);
    conch_client_opts_set_mem(o, &counting_mem);
  }
  lb_setup(o, url);
  if (conch_client_new(&c, url, o) != 0) {
    fprintf(stderr, "cannot make a client of %s\n", url);
    exit(1);
  }
  conch_client_opts_free(o);
  return c;
}

typedef struct pc_state {
  conch_client *c;
  const conch_method *m;
  const ProtobufCMessage *req;
  long total, started, done, errors;
  double bytes;
  int async; /* through the typed _async() stubs */
} pc_state;

static void pc_start(pc_state *s);

static void pc_list_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  pc_state *s = ud;
  (void)call;
  if (((const Process__ListResponse *)m)->n_processes != 3) {
    s->errors++;
  }
}

static void pc_start_msg(conch_call *call, const ProtobufCMessage *m,
                         void *ud) {
  const Process__StartResponse *r = (const Process__StartResponse *)m;
  pc_state *s = ud;
  (void)call;
  if (r->event != NULL && r->event->data != NULL) {
    s->bytes += (double)r->event->data->stdout.len;
  }
}

/* Counts a call that ended with |st|. */
static void pc_count(pc_state *s, const conch_status *st) {
  if (st->code == CONCH_CODE_OK) {
    s->done++;
  } else {
    if (s->errors == 0) {
      fprintf(stderr, "call failed: %s\n", st->message ? st->message : "");
    }
    s->errors++;
  }
}

static void pc_close(conch_call *call, const conch_status *st,
                     const conch_metadata *trailers, void *ud) {
  pc_state *s = ud;
  (void)trailers;
  pc_count(s, st); /* |st| is the call's: before freeing it */
  conch_call_free(call);
  pc_start(s);
}

static const conch_call_handler pc_list_h = {NULL, pc_list_msg, NULL, NULL,
                                             pc_close};
static const conch_call_handler pc_start_h = {NULL, pc_start_msg, NULL, NULL,
                                              pc_close};

/* The same through the typed one-callback stubs (listasync, setupasync):
   the calls free themselves. */
static void pc_ended(pc_state *s, const conch_status *st) {
  pc_count(s, st);
  pc_start(s);
}

static void pc_list_done(const Process__ListResponse *resp,
                         const conch_status *st, const conch_metadata *headers,
                         const conch_metadata *trailers, void *ud) {
  pc_state *s = ud;
  (void)headers;
  (void)trailers;
  if (resp != NULL && resp->n_processes != 3) {
    s->errors++;
  }
  pc_ended(s, st);
}

static void pc_start_event(const Process__StartResponse *r, void *ud) {
  pc_start_msg(NULL, &r->base, ud);
}

static void pc_start_done(const conch_status *st, const conch_metadata *headers,
                          const conch_metadata *trailers, void *ud) {
  (void)headers;
  (void)trailers;
  pc_ended(ud, st);
}

static void pc_start(pc_state *s) {
  conch_call *call;
  int rv;
  if (s->started >= s->total) {
    return;
  }
  s->started++;
  if (s->async) {
    if (s->m == &process__process__list__method) {
      rv = process__process__list_async(
          s->c, NULL, (const Process__ListRequest *)s->req, pc_list_done, s,
          NULL);
    } else {
      rv = process__process__start_async(
          s->c, NULL, (const Process__StartRequest *)s->req, pc_start_event,
          pc_start_done, s, NULL);
    }
    if (rv != 0) {
      fprintf(stderr, "cannot start a call\n");
      exit(1);
    }
    return;
  }
  if (conch_call_start(s->c, s->m, NULL,
                       s->m == &process__process__list__method ? &pc_list_h
                                                                : &pc_start_h,
                       s, &call) != 0 ||
      conch_call_send(call, s->req) != 0) {
    fprintf(stderr, "cannot start a call\n");
    exit(1);
  }
}

static int pc_run(const char *mode, const char *url, long a, long b) {
  Process__ListRequest lreq = PROCESS__LIST_REQUEST__INIT;
  Process__StartRequest sreq = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
  char arg0[32], arg1[32];
  char *args[2] = {arg0, arg1};
  pc_state s;
  long conc, i, a0 = 0, a1 = 0;
  double t0, c0, t1, c1;
  const char *unit = "calls";
  int bulk = strcmp(mode, "bulk") == 0;

  memset(&s, 0, sizeof(s));
  s.c = pc_client(url, bulk ? (size_t)b + 1024 : 0);
  cfg.cmd = "bench";
  cfg.n_args = 2;
  cfg.args = args;
  sreq.process = &cfg;
  /* Warm up the connection with one List call. */
  s.m = &process__process__list__method;
  s.req = &lreq.base;
  s.total = 1;
  pc_start(&s);
  while (s.done + s.errors < 1) {
    conch_client_run(s.c, -1);
  }
  if (s.errors > 0) {
    return 1;
  }
  memset(&s.total, 0, sizeof(s) - offsetof(pc_state, total));
  s.async = strcmp(mode, "listasync") == 0 || strcmp(mode, "setupasync") == 0;
  if (strcmp(mode, "list") == 0 || strcmp(mode, "listasync") == 0) {
    conc = a;
    s.total = b;
  } else if (strcmp(mode, "setup") == 0 || strcmp(mode, "setupasync") == 0) {
    s.m = &process__process__start__method;
    s.req = &sreq.base;
    snprintf(arg0, sizeof(arg0), "1");
    snprintf(arg1, sizeof(arg1), "64");
    conc = a;
    s.total = b;
    unit = "streams";
  } else {
    s.m = &process__process__start__method;
    s.req = &sreq.base;
    snprintf(arg0, sizeof(arg0), "%ld", a);
    snprintf(arg1, sizeof(arg1), "%ld", b);
    conc = 1;
    s.total = 1;
    unit = "bytes";
  }
  a0 = n_allocs_own;
  a1 = n_allocs_h2;
  t0 = now_s();
  c0 = cpu_s();
  for (i = 0; i < conc; i++) {
    pc_start(&s);
  }
  while (s.done + s.errors < s.total) {
    conch_client_run(s.c, -1);
  }
  t1 = now_s();
  c1 = cpu_s();
  printf("{\"mode\":\"%s\",\"%s\":%.0f,\"errors\":%ld,\"seconds\":%.3f,"
         "\"cpu_seconds\":%.3f",
         mode, unit, bulk ? s.bytes : (double)s.done, s.errors, t1 - t0,
         c1 - c0);
  if (counting()) {
    printf(",\"allocs_own\":%.2f,\"allocs_nghttp2\":%.2f",
           (double)(n_allocs_own - a0) / (double)s.total,
           (double)(n_allocs_h2 - a1) / (double)s.total);
  }
  printf("}\n");
  conch_client_free(s.c);
  return s.errors > 0;
}

/* Per-target cost: |n| clients of |url| (each its own target: options,
   connection, session, templates, plans), each making one List call to
   the end, all kept open.  Prints the RSS they added per target. */
static int targets_run(const char *url, long n) {
  Process__ListRequest lreq = PROCESS__LIST_REQUEST__INIT;
  pc_state *s = calloc((size_t)n, sizeof(pc_state));
  long i, errors = 0, r0;
  double c0, c1;
  if (s == NULL) {
    return 1;
  }
  r0 = rss_kib();
  c0 = cpu_s();
  for (i = 0; i < n; i++) {
    s[i].c = pc_client(url, 0);
    s[i].m = &process__process__list__method;
    s[i].req = &lreq.base;
    s[i].total = 1;
    pc_start(&s[i]);
    while (s[i].done + s[i].errors < 1) {
      conch_client_run(s[i].c, -1);
    }
    errors += s[i].errors;
  }
  c1 = cpu_s();
  printf("{\"mode\":\"targets\",\"targets\":%ld,\"errors\":%ld,"
         "\"rss_kib_per_target\":%.1f,\"cpu_seconds\":%.3f}\n",
         n, errors, (double)(rss_kib() - r0) / (double)n, c1 - c0);
  for (i = 0; i < n; i++) {
    conch_client_free(s[i].c);
  }
  free(s);
  return errors > 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--protocol") == 0) {
    if (strcmp(argv[2], "grpc") == 0) {
      protocol = CONCH_PROTOCOL_GRPC;
    } else if (strcmp(argv[2], "connect") != 0) {
      fprintf(stderr, "conch-bench: unknown protocol %s\n", argv[2]);
      return 2;
    }
    argc -= 2;
    argv += 2;
  }
  if (argc > 1 && strcmp(argv[1], "--http1") == 0) {
    http1 = 1;
    argc--;
    argv++;
  }
  if (argc == 5 && (strcmp(argv[1], "list") == 0 ||
                    strcmp(argv[1], "listasync") == 0 ||
                    strcmp(argv[1], "setup") == 0 ||
                    strcmp(argv[1], "setupasync") == 0 ||
                    strcmp(argv[1], "bulk") == 0)) {
    return pc_run(argv[1], argv[2], atol(argv[3]), atol(argv[4]));
  }
  if (argc == 6 && strcmp(argv[1], "unary") == 0) {
    return bench_unary(argv[2], atoi(argv[3]), atof(argv[4]),
                       (size_t)atol(argv[5]));
  }
  if (argc == 5 && strcmp(argv[1], "stream") == 0) {
    return bench_stream(argv[2], atof(argv[3]), (size_t)atol(argv[4]));
  }
  if (argc == 4 && strcmp(argv[1], "targets") == 0) {
    return targets_run(argv[2], atol(argv[3]));
  }
  if (argc == 4 && strcmp(argv[1], "idle") == 0) {
    return bench_idle(argv[2], atoi(argv[3]));
  }
  fprintf(stderr, "usage: conch-bench [--protocol connect|grpc] "
                  "unary URL CONC SECS BYTES | stream URL SECS BYTES | "
                  "idle URL STREAMS | list URL CONC CALLS | "
                  "setup URL CONC STREAMS | bulk URL MESSAGES BYTES | "
                  "targets URL N\n");
  return 2;
}
