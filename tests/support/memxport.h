/* An in-memory transport (conch/transport.h) for tests and fuzzers: the
   test plays the server's bytes, reads what the client wrote, and drives
   the client itself (io hooks, conch_client_on_io/on_timer) on a clock of
   its own.  No sockets, no threads, no real time: a run is deterministic.

   Use: memx_init(&m); memx_setup(&m, opts) before conch_client_new (sets
   the transport and the clock); memx_attach(&m, c) after (sets the hooks);
   then memx_pump(&m) to let the client act on what is ready, memx_feed()
   to give it the server's bytes, memx_advance() to move time. */
#ifndef CONCH_TEST_MEMXPORT_H
#define CONCH_TEST_MEMXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <conch/conch.h>

#define MEMX_MAX_CONNS 64

/* One connection the client opened. */
typedef struct memx_conn {
  int handle;    /* what the client watches (not a real fd) */
  int open;      /* 0 once the client closed it */
  unsigned watched;         /* what the client asked to watch */
  uint8_t *in;              /* server -> client, not read yet */
  size_t in_len, in_off;
  uint8_t *out;             /* client -> server, not taken yet */
  size_t out_len, out_cap;
  size_t out_total;         /* every byte the client ever wrote */
  int eof;                  /* after |in|, the end of the stream */
  int read_err;             /* errno the next read fails with, or 0 */
  int write_err;            /* errno the next write fails with, or 0 */
  int write_block;          /* writes take nothing (EAGAIN): a peer that
                               does not read */
  int connect_err;          /* connect_result's answer (0: connected) */
  struct sockaddr_storage addr; /* what the client connected to */
  socklen_t addrlen;
} memx_conn;

typedef struct memx {
  conch_client *client;
  memx_conn *conns[MEMX_MAX_CONNS];
  int nconns;
  int refuse; /* errno every open fails with, or 0 */
  int opens;  /* open() calls, failed ones included */
  /* Called on each open() (may be NULL): returns an errno the open fails
     with at once, or 0 and may set |*connect_err| (connect_result's later
     answer). */
  int (*on_open)(struct memx *m, const struct sockaddr *sa, socklen_t len,
                 int *connect_err);
  void *on_open_ud;
  int64_t now;          /* the client's clock, in ms */
  int64_t timer_due;    /* when the client wants on_timer, or -1 */
} memx;

void memx_init(memx *m);
/* Frees the connections' buffers (after conch_client_free). */
void memx_clear(memx *m);
/* Sets |m| as the transport and clock of clients made with |opts|. */
void memx_setup(memx *m, conch_client_opts *opts);
/* Sets |m|'s io hooks on |c| (made with memx_setup's options). */
void memx_attach(memx *m, conch_client *c);
/* The last connection opened, or NULL. */
memx_conn *memx_last(memx *m);
/* Queues |n| bytes from the server on |mc|. */
void memx_feed(memx_conn *mc, const void *p, size_t n);
/* Forgets what the client wrote on |mc| so far. */
void memx_drain(memx_conn *mc);
/* Lets the client handle what is ready (bytes, room, a due timer), until
   nothing more is; at most |rounds| rounds. */
void memx_pump(memx *m, int rounds);
/* Moves the clock |ms| ahead and pumps. */
void memx_advance(memx *m, int64_t ms);

#endif
