/* A scripted HTTP/2 server on one in-memory connection (memxport.h), for
   the tests of the client's HTTP/2 session: nghttp2's server session,
   driven by the test, which records what the client sent (its SETTINGS,
   streams, DATA bytes, WINDOW_UPDATE credit, RST_STREAM, PING) and answers
   only when told to (h2peer_reply(), or nghttp2_submit_*() on |s|).  It
   allocates with malloc, never through the client's hooks, so a
   failing-allocator test counts the client's blocks only.  memsrv.h is
   the echo server for tests that need answers rather than control. */
#ifndef CONCH_TEST_H2PEER_H
#define CONCH_TEST_H2PEER_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "memxport.h"

#define H2PEER_MAX_STREAMS 16

/* h2peer_new() flags. */
enum {
  H2PEER_NO_PING_ACK = 1,     /* never answer a PING: a silent peer */
  H2PEER_NO_WINDOW_UPDATE = 2 /* credit the client's DATA only on
                                 h2peer_consume() */
};

typedef struct h2peer_stream {
  int32_t id;
  int ended;      /* the request's END_STREAM arrived */
  size_t data_in; /* request DATA bytes received */
  int data_frames; /* request DATA frames received, empty ones too */
  uint32_t rst;   /* RST_STREAM code from the client, if |reset| */
  int reset;
  uint64_t credit; /* WINDOW_UPDATE increments from the client */
  char path[64];
  const uint8_t *body; /* the response body being served (borrowed) */
  size_t body_len, body_off;
  const char *const *trailers; /* sent after the body (borrowed) */
} h2peer_stream;

typedef struct h2peer {
  nghttp2_session *s;
  memx_conn *mc;
  int settings;         /* SETTINGS frames from the client, ACKs aside */
  int settings_acked;   /* the client acknowledged ours */
  int pings;            /* PINGs from the client (not ACKs) */
  int goaways;          /* GOAWAYs from the client */
  uint64_t conn_credit; /* connection WINDOW_UPDATE increments */
  h2peer_stream streams[H2PEER_MAX_STREAMS]; /* in the order they came */
  int nstreams;
  int lenient; /* a client in trouble may send nonsense: stop reading */
  /* Largest DATA payload sent, within the client's SETTINGS_MAX_FRAME_SIZE
     (as Go's server sizes frames); 0: 16 KiB, nghttp2's own choice. */
  uint32_t max_frame;
  int dead;
} h2peer;

/* A server on |mc| (the client's preface may be waiting) whose SETTINGS
   allow |max_streams| streams; |flags| is H2PEER_*.  Queued, not sent:
   h2peer_io() sends it. */
void h2peer_new(h2peer *h, memx_conn *mc, uint32_t max_streams, int flags);
/* The same with SETTINGS of the caller's. */
void h2peer_new2(h2peer *h, memx_conn *mc, const nghttp2_settings_entry *iv,
                 size_t niv, int flags);
void h2peer_free(h2peer *h);
/* Reads what the client wrote; writes what the server has queued. */
void h2peer_io(h2peer *h);
/* Reads what the client wrote, writes nothing. */
void h2peer_read(h2peer *h);
/* Server and client take turns until neither has anything to say. */
void h2peer_exchange(memx *m, h2peer *h);
/* The record of stream |id|, or NULL. */
h2peer_stream *h2peer_find(h2peer *h, int32_t id);
/* Answers stream |id|: :status 200, |ctype|, then |body| (|n| bytes,
   borrowed until sent) and END_STREAM, as the client's window allows.
   |trailers| (NULL-terminated name/value pairs, borrowed until sent; may
   be NULL) follow the body as a HEADERS frame that ends the stream;
   h2peer_keep_open instead leaves the stream open after the body. */
extern const char *const h2peer_keep_open[];
void h2peer_reply(h2peer *h, int32_t id, const char *ctype, const void *body,
                  size_t n, const char *const *trailers);
/* Returns |n| bytes of the client's DATA on |id| as window credit (with
   H2PEER_NO_WINDOW_UPDATE). */
void h2peer_consume(h2peer *h, int32_t id, size_t n);

#endif
