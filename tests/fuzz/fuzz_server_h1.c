/* The server core's HTTP/1.1 side (runtime/server/server_h1.c: the request
   parser and the bridge into the HTTP/2 session) fed a client's bytes:
   the input goes as is (anything but the HTTP/2 preface is read as
   HTTP/1.x) into one connection (see server_target.h for the methods, the
   input's layout and what must hold).  fuzz_server does the same after
   the preface, for HTTP/2.  Seeds: corpus/server_h1 (pipelined unary
   calls, chunked client streams, Expect: 100-continue, Connect GET, held
   and paused calls, malformed and oversized requests; *_t and *_T: the
   same sent one piece per turn with the clock stepping 1 s and 30 s, so
   that the header, body and idle timeouts cut them off). */
#define PREFACE ""
#include "server_target.h"
