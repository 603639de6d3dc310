/* conch's side of the benchmarks (tools/bench/run.sh runs it against the
   connect-node server, next to a connect-node client doing the same).

     conch-bench unary  URL CONCURRENCY SECONDS PAYLOAD_BYTES
     conch-bench stream URL SECONDS MESSAGE_BYTES
     conch-bench idle   URL STREAMS

   unary: CONCURRENCY unary calls kept in flight on one connection for
   SECONDS; stream: one server stream of MESSAGE_BYTES messages read for
   SECONDS; idle: STREAMS open server streams, to measure memory per stream.
   Prints one JSON line: calls or bytes, seconds, and the CPU time this
   process used (user + system). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <conch/conch.h>

#include "conchtest/v1/test.pb-c.h"

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
  if (conch_client_new(&s.c, url, NULL) != 0) {
    return 1;
  }
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
  conch_client_opts *o;
  Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
  stream_state s = {0, 0, 0};
  conch_call *call;
  double t0, c0, t1, c1;

  conch_client_opts_new(&o);
  conch_client_opts_set_recv_limit(o, bytes + 1024);
  if (conch_client_new(&c, url, o) != 0) {
    return 1;
  }
  conch_client_opts_free(o);
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

  if (conch_client_new(&c, url, NULL) != 0) {
    return 1;
  }
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

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "unary") == 0) {
    return bench_unary(argv[2], atoi(argv[3]), atof(argv[4]),
                       (size_t)atol(argv[5]));
  }
  if (argc == 5 && strcmp(argv[1], "stream") == 0) {
    return bench_stream(argv[2], atof(argv[3]), (size_t)atol(argv[4]));
  }
  if (argc == 4 && strcmp(argv[1], "idle") == 0) {
    return bench_idle(argv[2], atoi(argv[3]));
  }
  fprintf(stderr, "usage: conch-bench unary URL CONC SECS BYTES | "
                  "stream URL SECS BYTES | idle URL STREAMS\n");
  return 2;
}
