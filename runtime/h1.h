/* HTTP/1.1 (h1.c).  A connection in HTTP/1.1 mode keeps its nghttp2
   client session; the bridge is an in-memory nghttp2 server session that
   turns each stream into an HTTP/1.1 exchange on the socket.  Private to
   the runtime. */
#ifndef CONCH_H1_H
#define CONCH_H1_H

#include <stddef.h>
#include <stdint.h>

struct conch_conn; /* conn_int.h */
struct conch_h1;

/* The pool size for HTTP/1.1 when the user did not set one. */
#define CONCH_H1_POOL 16

/* Returns 0 or CONCH_ERR_NOMEM. */
int conch__h1_new(struct conch_conn *conn);
void conch__h1_free(struct conch_h1 *h);
/* Moves frames between the two sessions and request bytes to the socket.
   Returns 0, or non-zero when the connection failed. */
int conch__h1_pump(struct conch_conn *conn);
/* A DATA frame the client session hands out without copying (its send
   callback): header and payload go to the bridge.  Returns 0 or -1. */
int conch__h1_frame(struct conch_conn *conn, const uint8_t *hd,
                    const uint8_t *data, size_t len);
/* Plaintext read from the socket. */
void conch__h1_recv(struct conch_conn *conn, const uint8_t *p, size_t n);
/* The socket reached EOF or failed (|why|): settles the exchange. */
void conch__h1_on_close(struct conch_conn *conn, const char *why);
/* Whether the bridge takes more input from the socket now. */
int conch__h1_want_read(const struct conch_conn *conn);

#endif
