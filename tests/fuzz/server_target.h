/* The body of fuzz_server.c and fuzz_server_h1.c, each of which defines
   PREFACE (what goes before the input's bytes: the HTTP/2 client preface,
   or nothing for HTTP/1.x) and includes this: the server core fed a
   client's bytes through a server transport of this file's own into one
   connection, in pieces whose sizes the input chooses.  Raw methods of
   the four stream kinds echo what they get; a message that starts with
   'E' ends its call with an error with a detail, one that starts with 'H'
   is held by its handler until the server is freed, one that starts with
   'P' pauses its call.  Whatever the input: nothing crashes, every call a
   handler saw ends for it exactly once, the connection closes once the
   input has ended and the handlers let go of what they held or paused
   (an HTTP/1.1 server stops reading behind a call its handler holds, as
   Go's does, so it may only see the end after that), and the server frees
   everything (the sanitizer builds check the leaks).

   The server runs on a clock of this file's own (conch_server_opts_set_
   clock) that moves a fixed step per turn; with a step, the client sends
   one piece per turn (a slow client), so that the server's timers
   (header, body and idle timeouts, call deadlines, the linger and close
   delays) fire between the input's pieces.

   Input: byte 0 picks the piece size (1 + byte % 64, 0: all at once) and
   the clock's step per turn (byte / 64: none, 10 ms, 1 s, 30 s); the rest
   is what the client sends after PREFACE. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/conch.h>
#include <conch/server.h>

#include "fuzz.h"

static const conch_method methods[] = {
    {"/f.v1.F/Unary", CONCH_STREAM_UNARY, NULL, NULL,
     CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS},
    {"/f.v1.F/Server", CONCH_STREAM_SERVER, NULL, NULL,
     CONCH_IDEMPOTENCY_UNKNOWN},
    {"/f.v1.F/Client", CONCH_STREAM_CLIENT, NULL, NULL,
     CONCH_IDEMPOTENCY_UNKNOWN},
    {"/f.v1.F/Bidi", CONCH_STREAM_BIDI, NULL, NULL, CONCH_IDEMPOTENCY_UNKNOWN},
};

typedef struct feed {
  const uint8_t *p;
  size_t n;
  size_t piece;
  int closed;
  long calls; /* on_call minus ends seen by handlers */
  int64_t now;  /* the server's clock, ms */
  int64_t step; /* ... added each turn */
  int sent;     /* with a step: this turn's piece went */
  conch_rpc *kept[64]; /* held ('H') or paused ('P') */
  size_t nkept;
} feed;

static void keep(feed *f, conch_rpc *rpc) {
  for (size_t i = 0; i < f->nkept; i++) {
    if (f->kept[i] == rpc) {
      return;
    }
  }
  f->kept[f->nkept++] = rpc;
}

static void unkeep(feed *f, conch_rpc *rpc) {
  for (size_t i = 0; i < f->nkept; i++) {
    if (f->kept[i] == rpc) {
      f->kept[i] = f->kept[--f->nkept];
      return;
    }
  }
}

static long f_read(void *ud, int h, void *buf, size_t len) {
  feed *f = ud;
  size_t n = f->n < len ? f->n : len;
  (void)h;
  if (f->n == 0) {
    return 0; /* the end: the client is gone */
  }
  if (f->step != 0 && f->sent) {
    return -EAGAIN; /* the next piece comes next turn */
  }
  f->sent = 1;
  if (f->piece > 0 && n > f->piece) {
    n = f->piece;
  }
  memcpy(buf, f->p, n);
  f->p += n;
  f->n -= n;
  return (long)n;
}

static long f_write(void *ud, int h, const void *buf, size_t len) {
  (void)ud;
  (void)h;
  (void)buf;
  return (long)len; /* the answer goes nowhere */
}

static void f_close(void *ud, int h) {
  feed *f = ud;
  (void)h;
  f->closed++;
}

static int64_t f_now(void *ud) {
  return ((feed *)ud)->now;
}

/* One turn of the server's loop, one clock step later. */
static void f_turn(conch_server *s, feed *f) {
  f->now += f->step;
  f->sent = 0;
  if (conch_server_on_io(s, 3, CONCH_IO_READ | CONCH_IO_WRITE) != 0) {
    abort();
  }
}

static void on_call(conch_rpc *rpc, void *ud) {
  feed *f = ud;
  (void)rpc;
  f->calls++;
}

static void end(conch_rpc *rpc, conch_code code) {
  feed *f = conch_rpc_user_data(rpc);
  conch_status st;
  conch_error_detail d = {"type.googleapis.com/f.v1.Detail",
                          (uint8_t *)"\x08\x01", 2};
  conch_status_init(&st);
  st.code = code;
  if (code != CONCH_CODE_OK) {
    st.message = "fuzz \xff%\r\n";
    st.details = &d;
    st.ndetails = 1;
  }
  if (conch_rpc_finish(rpc, &st) != 0) {
    abort();
  }
  unkeep(f, rpc);
  f->calls--;
}

static void on_raw(conch_rpc *rpc, const uint8_t *p, size_t n, void *ud) {
  feed *f = ud;
  if (conch_rpc_data(rpc) != NULL) {
    return; /* held */
  }
  if (n > 0 && p[0] == 'E') {
    end(rpc, CONCH_CODE_FAILED_PRECONDITION);
    return;
  }
  if (n > 0 && p[0] == 'H' && f->nkept < 64) {
    conch_rpc_set_data(rpc, rpc);
    keep(f, rpc);
    return;
  }
  if (n > 0 && p[0] == 'P' && f->nkept < 64 && conch_rpc_pause(rpc) == 0) {
    keep(f, rpc);
  }
  conch_metadata_add_str(conch_rpc_response_trailers(rpc), "x-t", "1");
  (void)conch_rpc_send_raw(rpc, p, n);
}

static void on_half_close(conch_rpc *rpc, void *ud) {
  (void)ud;
  if (conch_rpc_data(rpc) == NULL) {
    end(rpc, CONCH_CODE_OK);
  }
}

static void on_cancel(conch_rpc *rpc, const conch_status *st, void *ud) {
  feed *f = ud;
  (void)rpc;
  if (st->code == CONCH_CODE_OK) {
    abort();
  }
  unkeep(f, rpc);
  f->calls--;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char preface[] = PREFACE;
  const conch_server_handler h = {on_call, NULL, on_raw, on_half_close,
                                  on_cancel, NULL};
  conch_server_transport t = {f_read, f_write, f_close, NULL};
  conch_server_opts *o;
  conch_server *s;
  feed f;
  uint8_t *buf;

  if (size == 0) {
    return 0;
  }
  buf = malloc(sizeof(preface) - 1 + size - 1 + 1);
  if (buf == NULL) {
    return 0;
  }
  memcpy(buf, preface, sizeof(preface) - 1);
  memcpy(buf + sizeof(preface) - 1, data + 1, size - 1);
  memset(&f, 0, sizeof(f));
  f.p = buf;
  f.n = sizeof(preface) - 1 + size - 1;
  f.piece = data[0] == 0 ? 0 : 1 + data[0] % 64;
  f.now = 1000000;
  f.step = (int64_t[]){0, 10, 1000, 30000}[data[0] / 64];
  t.user_data = &f;

  if (conch_server_opts_new(&o) != 0) {
    abort();
  }
  (void)conch_server_opts_set_recv_limit(o, 1 << 16);
  (void)conch_server_opts_set_max_header_list(o, 4096);
  (void)conch_server_opts_set_send_buffer(o, 1024);
  (void)conch_server_opts_set_clock(o, f_now, &f);
  if (conch_server_new(&s, o) != 0) {
    abort();
  }
  conch_server_opts_free(o);
  for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
    if (conch_server_add_method(s, &methods[i], &h, &f) != 0) {
      abort();
    }
  }
  if (conch_server_adopt(s, 3, &t) != 0) {
    abort();
  }
  /* Each turn reads one piece at least; the end of the input is the end
     of the stream, after which the connection closes. */
  for (size_t turns = 0; f.closed == 0 && turns < 100000; turns++) {
    f_turn(s, &f);
  }
  /* Still open: the handlers let go (a call may end while another is let
     go: each is taken from the list first), then it must close. */
  while (f.closed == 0 && f.nkept > 0) {
    conch_rpc *rpc = f.kept[--f.nkept];
    (void)conch_rpc_resume(rpc);
    if (conch_rpc_data(rpc) != NULL) {
      conch_rpc_set_data(rpc, NULL);
      f.kept[f.nkept++] = rpc; /* end() takes it out */
      end(rpc, CONCH_CODE_OK);
    }
    for (size_t turns = 0; f.closed == 0 && turns < 100000; turns++) {
      f_turn(s, &f);
    }
  }
  if (f.closed != 1 || !conch_server_idle(s)) {
    abort();
  }
  conch_server_free(s);
  if (f.calls != 0) {
    abort(); /* a call a handler saw did not end for it exactly once */
  }
  free(buf);
  return 0;
}
