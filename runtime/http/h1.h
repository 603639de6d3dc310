/* HTTP/1.1 for client connections (h1.c): a session of its own on the
   session table (session.h), reading responses with the HTTP/1.1 front
   end (h1parse.h).  Private to the runtime. */
#ifndef CONCH_H1_H
#define CONCH_H1_H

#include "session.h"

/* The pool size for HTTP/1.1 when the user did not set one. */
#define CONCH_H1_POOL 16

/* HTTP/1.1's session operations. */
extern const conch_session_ops conch__h1_ops;

#endif
