/* conchtest.v1.TestService served by the server core (conch/server.h) on
   a thread of its own, for the tests of tests/server_core and the peer
   that connect-node calls (peer.c).  The service:

   - Unary echoes the payload (or response_size bytes of a pattern), the
     request header x-echo (in request_headers) and the timeout it saw;
     response_headers / response_trailers are sent; error ends the call
     with that code, message and details; a verified client certificate
     is reported in the response headers x-peer-subject
     (conch_rpc_peer_cert_subject()) and x-peer-der-len (the length of
     conch_rpc_peer_cert_der());
   - ServerStream sends response_count such responses, then error if set;
   - ClientStream counts messages and payload bytes; a first message with
     delay_ms pauses the requests (conch_rpc_pause) until released;
   - Bidi echoes each message as it comes; one with error ends the call;
   - /conchtest.v1.Raw/Echo (a raw bidi method) echoes bytes;
   - delay_ms > 0 holds the call (ServerStream: after one response) until
     the client cancels, its deadline passes, or the test releases it
     (the response "late", then OK). */
#ifndef CONCH_TEST_SVC_H
#define CONCH_TEST_SVC_H

#include <pthread.h>
#include <stdatomic.h>

#include <conch/conch.h>
#include <conch/server.h>

#include "conchtest/v1/test.pb-c.h"

#define SVC "/conchtest.v1.TestService/"

extern const conch_method m_unary, m_sstream, m_cstream, m_bidi, m_raw,
    m_unimpl;

#define MAX_HELD 16

typedef struct fixture {
  conch_server *s;
  pthread_t thread;
  atomic_int stop;
  atomic_int shutdown_req;
  atomic_int shutdown_done;
  atomic_int release; /* finish the held calls */
  atomic_int held;    /* calls the service holds without answering */
  atomic_int cancels;
  atomic_int last_cancel_code;
  atomic_int idle;
  atomic_int again; /* sends refused with CONCH_ERR_AGAIN */
  atomic_int calls_live; /* conch_server_calls() as last seen */
  conch_rpc *held_rpc[MAX_HELD];
  int tolerant; /* sends may fail (a failing allocator) */
  int health;   /* serves grpc.health.v1 (fx_start_health) */
  atomic_int ncalls; /* calls the service began */
  char url[128];
  char sock[108];
} fixture;

/* Starts a server with |opts| (NULL: defaults) on 127.0.0.1:0 or, with
   |use_unix|, a Unix socket; fx->url is a client URL for it. */
void fx_start(fixture *fx, conch_server_opts *opts, int use_unix);
/* The same, returning what failed (0: started) instead of aborting;
   fx->tolerant is kept (set it before). */
int fx_try_start(fixture *fx, conch_server_opts *opts, int use_unix);
/* fx_start, serving grpc.health.v1 too (conch_server_add_health). */
void fx_start_health(fixture *fx, conch_server_opts *opts, int use_unix);
/* Stops the server thread (the server stays, for the caller to use on
   this thread), and starts it again. */
void fx_pause(fixture *fx);
void fx_resume(fixture *fx);
/* Stops the thread and frees the server. */
void fx_stop(fixture *fx);

/* "x-rev", a custom compression: the bytes reversed, each xor 0x5a, after
   a 2-byte mark; decoding refuses input without the mark.  Its user_data
   is |count| (may be NULL), which counts the runs of each direction. */
typedef struct svc_xr_count {
  atomic_int comp, decomp;
} svc_xr_count;
conch_compressor svc_xr_compressor(svc_xr_count *count);

/* A self-signed P-256 certificate for CN=localhost with the
   subjectAltName |san|, made by openssl in |dir| (a mkdtemp() template,
   filled in); |cert| and |key|, of |cap| bytes each, receive the paths of
   its cert.pem and key.pem.  Returns 0 or -1. */
int svc_make_cert(char *dir, const char *san, char *cert, char *key,
                  size_t cap);

#endif
