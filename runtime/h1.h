/* HTTP/1.1 (h1.c).  A connection in HTTP/1.1 mode keeps its nghttp2
   client session (session.c); the bridge is an in-memory nghttp2 server
   session that turns each stream into an HTTP/1.1 exchange on the wire.
   Private to the runtime. */
#ifndef CONCH_H1_H
#define CONCH_H1_H

#include "session.h"

/* The pool size for HTTP/1.1 when the user did not set one. */
#define CONCH_H1_POOL 16

/* HTTP/1.1's session operations. */
extern const conch_session_ops conch__h1_ops;

#endif
