/* The filter between a connection's transport and its session
   (filter.c), as curl's connection filters: bytes read from the transport
   go in (ciphertext under TLS), plaintext goes to the session; what the
   session writes comes out as the bytes for the transport.  No
   descriptors and no clock: conn.c does the reading and writing.  Private
   to the runtime. */
#ifndef CONCH_FILTER_H
#define CONCH_FILTER_H

#include <stddef.h>
#include <stdint.h>

struct conch_conn; /* conn_int.h */

/* The session stops producing output once this much waits for the
   transport, and resumes when it drains.  Bounds memory with big messages
   and windows. */
#define CONCH_OUT_HIGH_WATER (1u << 20)

/* From conch__filter_open() and conch__filter_recv(): the TLS handshake
   (if any) is done, the session may start. */
#define CONCH_FILTER_SECURE 1

/* A connected transport: starts TLS when the client uses it.  Returns
   CONCH_FILTER_SECURE (no TLS, or the handshake is done), 0 (the
   handshake is under way) or a negative CONCH_ERR_* with the connection
   failed. */
int conch__filter_open(struct conch_conn *conn);
/* |n| bytes read from the transport (|n| may be 0: hand over what
   waits).  Returns 0, CONCH_FILTER_SECURE when the handshake just ended
   (start the session, then call again with no bytes for the plaintext
   that followed), or non-zero when the connection failed or its session
   settled on the transport's end. */
int conch__filter_recv(struct conch_conn *conn, const uint8_t *p, size_t n);
/* 1 when TLS negotiated "h2" by ALPN, 0 when it did not, -1 without TLS. */
int conch__filter_alpn_h2(const struct conch_conn *conn);
/* Queues |n| plaintext bytes of the session for the transport.  Returns 0
   or a CONCH_ERR_*. */
int conch__filter_write(struct conch_conn *conn, const uint8_t *p, size_t n);
/* The bytes waiting for the transport, in order: sets |*p|, returns how
   many. */
size_t conch__filter_out_peek(struct conch_conn *conn, const uint8_t **p);
/* The transport took |n| of them. */
void conch__filter_out_consume(struct conch_conn *conn, size_t n);
/* How many bytes wait for the transport. */
size_t conch__filter_out_size(struct conch_conn *conn);
/* Frees TLS and the output buffer. */
void conch__filter_free(struct conch_conn *conn);

#endif
