/* An HTTP/2 echo server on an in-memory connection (memxport.h), for tests
   that need a peer answering real calls without sockets or Node.  It
   speaks the Connect protocol over nghttp2's server session:

   - unary (Content-Type application/proto or application/json): once the
     request ended, the response is the request body, with the request's
     Content-Encoding, so a compressed request comes back compressed;
   - streaming (application/connect+...): each complete envelope is sent
     back as it arrives, flags and all, under the request's
     Connect-Content-Encoding; when the request ends, an end-stream
     message ("{}") closes the response.

   The request messages of conchtest.v1 (payload = 1) therefore come back
   as Responses carrying the same payload.  The server allocates with
   malloc, never through the client's hooks, so a failing-allocator test
   counts the client's blocks only. */
#ifndef CONCH_TEST_MEMSRV_H
#define CONCH_TEST_MEMSRV_H

#include "memxport.h"

typedef struct memsrv memsrv;

/* A server for the client end |mc| (its preface may already be waiting).
   Aborts when out of memory. */
memsrv *memsrv_new(memx_conn *mc);
void memsrv_free(memsrv *s);
/* Reads what the client wrote and queues the server's answer on |mc|.
   Returns 0, or -1 once the client sent what is not HTTP/2 (the server
   then closes its end: EOF for the client). */
int memsrv_io(memsrv *s);
/* Requests that have begun (HEADERS received). */
int memsrv_requests(const memsrv *s);
/* The (Connect-)Content-Encoding of the last request that sent one, or "". */
const char *memsrv_last_encoding(const memsrv *s);
/* The authorization header of the last request that sent one, or "". */
const char *memsrv_last_authorization(const memsrv *s);

/* Runs server and client by turns until neither has anything to do (at
   most |rounds| turns each). */
void memsrv_exchange(memsrv *s, memx *m, int rounds);

#endif
