/* The HTTP/2 session of a connection (session.c) and the stream
   operations calls use.  Private to the runtime. */
#ifndef CONCH_SESSION_H
#define CONCH_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include <conch/call.h>

struct conch_conn; /* conn_int.h */

/* Creates |conn|'s nghttp2 session and queues its SETTINGS.  Returns 0,
   CONCH_ERR_NOMEM or CONCH_ERR_SESSION. */
int conch__session_start(struct conch_conn *conn);
/* Submits queued calls while slots are free. */
void conch__conn_submit_queued(struct conch_conn *conn);
/* Sets up and submits the request HEADERS (+ data source) of |call|.
   Returns 0 or fails the call. */
int conch__conn_submit(struct conch_conn *conn, conch_call *call);
/* The call's stream has new data to send. */
void conch__conn_resume(struct conch_conn *conn, conch_call *call);
/* Returns |n| bytes of window credit for |call|'s stream. */
void conch__conn_consume(struct conch_conn *conn, conch_call *call, size_t n);
/* Resets the stream of |call| with |h2err| and detaches the call. */
void conch__conn_reset(struct conch_conn *conn, conch_call *call,
                       uint32_t h2err);

#endif
