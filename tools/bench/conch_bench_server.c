/* conch-bench-server: the server core (conch/server.h) under
   tools/bench/compare_server.sh.  A benchmark peer, not a test.

     conch-bench-server [--extra-methods N] [--compress-min N]
                        [--list-pad N] | --write-list FILE

   Serves process.Process on 127.0.0.1 (h2c; a free port, printed as
   "LISTENING <port>") through the generated stubs (process.conch.h):
   - List (unary): always the same ListResponse of 485 bytes, the one
     bench-server sends (built the same way), decoded once at start and
     serialized for every call, as a real handler would;
   - Start (server stream): for a process "bench" with args COUNT BYTES
     (conch-bench's bulk and setup), COUNT DataEvents of BYTES stdout bytes,
     then OK, as bench-server; for any other, one StartEvent, then the
     stream stays open and idle until the client cancels it (memory per
     idle stream).
   Exits on SIGTERM or SIGINT.  --write-list FILE writes the canned
   response's bytes to FILE and exits (the other servers read them).
   --extra-methods N registers N more methods (raw, never called) before
   process.Process's nine: the cost of finding a method among many.
   --compress-min N sets conch_server_opts_set_compress_min_bytes() (0:
   compress every response the client accepts compressed).  --list-pad N
   makes List's response N bytes longer (the last process's tag; a large
   unary response). */
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/conch.h>
#include <conch/server.h>

#include "process/process.conch.h"
#include "list_fixture.h"
#include "process/process.pb-c.h"


static volatile sig_atomic_t stopping;
static uint8_t list_bytes[LIST_BYTES];
static Process__ListResponse *list_resp;

static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

static void on_list(Process__Process__List_Rpc rpc,
                    const Process__ListRequest *req, void *user_data) {
  conch_status st;
  (void)req;
  (void)user_data;

  if (process__process__list_rpc_send(rpc, list_resp) != 0) {
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    process__process__list_rpc_finish(rpc, &st);
    return;
  }
  process__process__list_rpc_finish(rpc, NULL);
}

/* A stream of |left| DataEvents of the same stdout bytes (a Start of
   "bench" with args COUNT BYTES, as bench-server's), then OK. */
typedef struct feed {
  struct feed *next; /* the feeds under way, for on_cancel */
  conch_rpc *rpc;
  long left;
  Process__StartResponse resp;
  Process__ProcessEvent ev;
  Process__ProcessEvent__DataEvent data;
  uint8_t *bytes;
} feed;

static feed *feeds;

static void feed_free(feed *f) {
  feed **pp = &feeds;
  while (*pp != f) {
    pp = &(*pp)->next;
  }
  *pp = f->next;
  free(f->bytes);
  free(f);
}

static const Process__StartResponse *feed_next(Process__Process__Start_Rpc rpc,
                                               void *ud) {
  feed *f = ud;
  if (f->left == 0) {
    feed_free(f);
    process__process__start_rpc_finish(rpc, NULL);
    return NULL;
  }
  f->left--;
  return &f->resp;
}

static void on_start_cancel(Process__Process__Start_Rpc rpc,
                            const conch_status *st, void *user_data) {
  feed *f;
  (void)st;
  (void)user_data;
  for (f = feeds; f != NULL && f->rpc != rpc.base; f = f->next) {
  }
  if (f != NULL) {
    feed_free(f);
  }
}

/* Starts |rpc|'s feed when |req| asks for one; 0 when it does not. */
static int start_feed(Process__Process__Start_Rpc rpc,
                      const Process__StartRequest *req) {
  const Process__ProcessConfig *cfg = req->process;
  long count, bytes;
  feed *f;
  if (cfg == NULL || cfg->cmd == NULL || strcmp(cfg->cmd, "bench") != 0 ||
      cfg->n_args != 2 || (count = atol(cfg->args[0])) < 0 ||
      (bytes = atol(cfg->args[1])) < 0 || bytes > (16l << 20) ||
      (f = calloc(1, sizeof(*f))) == NULL) {
    return 0;
  }
  f->bytes = malloc((size_t)bytes + 1);
  if (f->bytes == NULL) {
    free(f);
    return 0;
  }
  memset(f->bytes, 'x', (size_t)bytes);
  f->rpc = rpc.base;
  f->left = count;
  process__start_response__init(&f->resp);
  process__process_event__init(&f->ev);
  process__process_event__data_event__init(&f->data);
  f->data.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
  f->data.stdout.data = f->bytes;
  f->data.stdout.len = (size_t)bytes;
  f->ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
  f->ev.data = &f->data;
  f->resp.event = &f->ev;
  f->next = feeds;
  feeds = f;
  if (process__process__start_rpc_stream(rpc, feed_next, f) != 0) {
    conch_status st;
    feed_free(f);
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    process__process__start_rpc_finish(rpc, &st);
  }
  return 1;
}

/* A Start of "bench" COUNT BYTES: that many DataEvents (start_feed()).
   Any other: one StartEvent, then nothing until the client cancels: the
   call stays the server's (the server owns the rpc). */
static void on_start(Process__Process__Start_Rpc rpc,
                     const Process__StartRequest *req, void *user_data) {
  Process__StartResponse resp = PROCESS__START_RESPONSE__INIT;
  Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
  Process__ProcessEvent__StartEvent start =
      PROCESS__PROCESS_EVENT__START_EVENT__INIT;
  conch_status st;
  (void)user_data;

  if (start_feed(rpc, req)) {
    return;
  }

  start.pid = 4242;
  ev.event_case = PROCESS__PROCESS_EVENT__EVENT_START;
  ev.start = &start;
  resp.event = &ev;
  if (process__process__start_rpc_send(rpc, &resp) != 0) {
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    process__process__start_rpc_finish(rpc, &st);
  }
}

static void on_extra(conch_rpc *rpc, void *user_data) {
  (void)user_data;
  (void)conch_rpc_finish(rpc, NULL);
}

static int add_extra(conch_server *s, long n) {
  static const conch_server_handler h = {.on_call = on_extra};
  char path[64];
  int rv = 0;

  for (long i = 0; i < n && rv == 0; i++) {
    conch_method m = {0};
    snprintf(path, sizeof(path), "/bench.Extra/Method%ld", i);
    m.path = path;
    m.kind = CONCH_STREAM_UNARY;
    rv = conch_server_add_method(s, &m, &h, NULL);
  }
  return rv;
}

static int write_list(const char *path) {
  FILE *f = fopen(path, "wb");
  int ok;

  if (f == NULL) {
    perror(path);
    return 1;
  }
  ok = fwrite(list_bytes, 1, LIST_BYTES, f) == LIST_BYTES;
  ok = (fclose(f) == 0) && ok;
  return !ok;
}

/* CONCH_BENCH_ICEPT=1: every call passes one interceptor, a metrics one
   (calls counted by final code: a close hook), to measure what a chain
   costs (tools/bench/icept.sh). */
static long icept_codes[17];

static void icept_close(conch_rpc *rpc, conch_status *st, conch_metadata *t,
                        void **state, void *ud) {
  (void)rpc;
  (void)t;
  (void)state;
  (void)ud;
  if ((unsigned)st->code < 17) {
    icept_codes[st->code]++;
  }
}

static int add_icept(conch_server *s) {
  const char *e = getenv("CONCH_BENCH_ICEPT");
  conch_rpc_interceptor ic = CONCH_RPC_INTERCEPTOR_INIT;
  if (e == NULL || strcmp(e, "1") != 0) {
    return 0;
  }
  ic.on_close = icept_close;
  return conch_server_add_interceptor(s, &ic);
}

int main(int argc, char **argv) {
  static const Process__Process_Handlers h = {
      .list = {.on_request = on_list},
      .start = {.on_request = on_start, .on_cancel = on_start_cancel},
  };
  conch_server *s;
  conch_server_opts *o = NULL;
  long extra = 0, cmin = -1, pad = 0;
  char *end;
  int rv;

  bench_list_build(list_bytes, "conch-bench-server");
  if (argc == 3 && strcmp(argv[1], "--write-list") == 0) {
    return write_list(argv[2]);
  }
  for (int i = 1; i < argc; i += 2) {
    long *v = NULL, max = LONG_MAX;
    if (i + 1 < argc && strcmp(argv[i], "--extra-methods") == 0) {
      v = &extra;
      max = 100000;
    } else if (i + 1 < argc && strcmp(argv[i], "--compress-min") == 0) {
      v = &cmin;
    } else if (i + 1 < argc && strcmp(argv[i], "--list-pad") == 0) {
      v = &pad;
      max = 16 * 1024 * 1024;
    }
    if (v == NULL || (*v = strtol(argv[i + 1], &end, 10), *end != '\0') ||
        *v < 0 || *v > max) {
      fprintf(stderr,
              "usage: %s [--extra-methods N] [--compress-min N] "
              "[--list-pad N] | --write-list FILE\n",
              argv[0]);
      return 2;
    }
  }
  list_resp = process__list_response__unpack(NULL, LIST_BYTES, list_bytes);
  if (list_resp == NULL) {
    return 1;
  }
  if (pad > 0) {
    /* A large response: the last process's tag grows by |pad| bytes of
       a pattern that gzip cannot shrink much (xorshift, printable). */
    char *tag = malloc((size_t)pad + 1);
    uint32_t x = 2463534242u;
    if (tag == NULL) {
      return 1;
    }
    for (long i = 0; i < pad; i++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      tag[i] = (char)('!' + x % 94);
    }
    tag[pad] = '\0';
    list_resp->processes[2]->tag = tag; /* kept until exit */
  }
  if (cmin >= 0 &&
      (conch_server_opts_new(&o) != 0 ||
       conch_server_opts_set_compress_min_bytes(o, (size_t)cmin) != 0)) {
    conch_server_opts_free(o);
    return 1;
  }
  rv = conch_server_new(&s, o);
  conch_server_opts_free(o);
  if (rv != 0) {
    return 1;
  }
  rv = add_extra(s, extra);
  if (rv == 0) {
    rv = add_icept(s);
  }
  if (rv == 0) {
    rv = process__process__register(s, &h);
  }
  if (rv == 0) {
    rv = conch_server_listen(s, "127.0.0.1:0");
  }
  if (rv != 0) {
    fprintf(stderr, "conch-bench-server: %s\n", conch_strerror(rv));
    conch_server_free(s);
    return 1;
  }
  printf("LISTENING %d\n", conch_server_port(s));
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  while (!stopping) {
    rv = conch_server_run(s, 200); /* a signal also ends the poll early */
    if (rv != 0) {
      fprintf(stderr, "conch-bench-server: %s\n", conch_strerror(rv));
      break;
    }
  }
  conch_server_free(s);
  process__list_response__free_unpacked(list_resp, NULL);
  return rv != 0;
}
