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

#include <conch/mem.h>

#include "buf.h"

struct conch_conn; /* conn_int.h */
struct conch_tls;  /* tls.h */

/* The filter of one connection, client's or server's: TLS over memory or
   nothing, and the bytes waiting for the transport.  The functions on it
   below are role-free; the conch_conn ones further down add what a client
   connection does around them (failing it, its session). */
typedef struct conch_filter {
  struct conch_tls *tls; /* NULL: cleartext */
  conch_buf out;         /* the bytes for the transport, without TLS */
  const conch_mem *mem;
} conch_filter;

/* Queues |n| plaintext bytes for the transport (encrypted under TLS).
   Returns 0 or a CONCH_ERR_*. */
int conch__filter_queue(conch_filter *f, const uint8_t *p, size_t n);
/* The bytes waiting for the transport, in order: sets |*p|, returns how
   many. */
size_t conch__filter_pending(conch_filter *f, const uint8_t **p);
/* The transport took |n| of them. */
void conch__filter_taken(conch_filter *f, size_t n);
/* Writes what waits through |put| (a transport's: a count, -EAGAIN or
   another negative errno) on |fd|, until it is all out or the transport
   takes less than it was offered.  Returns 0 (all of it went),
   CONCH_FILTER_SHORT (the last write took a part), CONCH_FILTER_BLOCKED
   (-EAGAIN), CONCH_FILTER_ZERO (it took nothing and said no error), or
   the negative errno of a failed write (-EINTR among them: conn.c's
   write-out, conch__conn_write, reads those for both roles). */
#define CONCH_FILTER_SHORT 1
#define CONCH_FILTER_BLOCKED 2
#define CONCH_FILTER_ZERO 3
long conch__filter_send(conch_filter *f,
                        long (*put)(void *, int, const void *, size_t),
                        void *user_data, int fd);
/* (TLS only) Hands the plaintext TLS decrypted to |feed| through |buf| (|cap|
   bytes), at most |room(ud)| bytes at a time while that is not 0 (|room|
   NULL: no limit), until |feed| returns non-zero.  Returns 0 (TLS needs
   more input), CONCH_FILTER_HELD (room is 0 and TLS still holds some),
   CONCH_ERR_EOF (close_notify), what |feed| returned, or another
   CONCH_ERR_* (TLS failed). */
#define CONCH_FILTER_HELD 2
int conch__filter_pump(conch_filter *f, uint8_t *buf, size_t cap,
                       size_t (*room)(void *ud),
                       int (*feed)(void *ud, const uint8_t *p, size_t n),
                       void *ud);
/* Frees TLS and the output buffer. */
void conch__filter_clear(conch_filter *f);

/* ---- A client connection's filter (conch_conn.filter) ---------------- */

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
/* The client's reading of a TLS failure: the connection fails. */
void conch__filter_tls_fail(struct conch_conn *conn);
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
