/* The server core (conch/server.h) fed a client's bytes over HTTP/2: the
   input goes, after the HTTP/2 client preface, into one connection (see
   server_target.h for the methods, the input's layout and what must
   hold).  fuzz_server_h1 does the same for HTTP/1.x. */
#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#include "server_target.h"
