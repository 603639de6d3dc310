/* The HTTP/1.1 front end (h1parse.c): one libhttp-parser message parser,
   for either role.  It reads a response (client) or a request (server)
   off the plaintext byte stream and hands over its parts as they arrive:
   the head with its fields, the body (Content-Length, chunked, or up to
   the end of the connection, without copying: the bytes point into the
   input), the chunked trailers and the end with the keep-alive verdict.
   It stops at the end of each message, so that bytes after it (the next
   pipelined request of a client; unsolicited bytes after a response) stay
   with the caller.  No descriptors, no clock, no session: the HTTP/1.1
   session (h1.c; the server's in a later phase) owns the connection rules.

   The fields it hands over are HTTP/2's view of them: names lowercased,
   values trimmed of blanks, connection-specific fields (Connection,
   Transfer-Encoding & co., conch__h1_hop_by_hop(), and the fields a
   Connection field names, RFC 9110 7.6.1), fields with invalid
   names or values and a Content-Length beside chunked framing dropped.
   The head and the trailers together may hold |max_head| bytes of names
   and values.  Private to the runtime. */
#ifndef CONCH_H1PARSE_H
#define CONCH_H1PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>

#include <conch/export.h>

#include "buf.h"
#include "mem_int.h"

/* One field of a head or of the trailers. */
typedef struct conch_h1_field {
  const uint8_t *name; /* lowercase */
  size_t nlen;
  const uint8_t *value; /* "" when empty */
  size_t vlen;
} conch_h1_field;

/* A message head, valid during the callback. */
typedef struct conch_h1_head {
  int status;         /* responses: 200..999 (1xx are skipped) */
  const char *method; /* requests: "POST", ... */
  const uint8_t *url; /* requests: the request target */
  size_t url_len;
  int version_minor; /* HTTP/1.x */
  int chunked;       /* Transfer-Encoding: chunked */
  int body;          /* a body follows (else the message ends here) */
  uint64_t length;   /* Content-Length, or UINT64_MAX when none */
  const conch_h1_field *fields;
  size_t nfields;
  size_t ninvalid; /* fields dropped for an invalid name or value (a server
                      answers 400 for them, RFC 9112 5) */
} conch_h1_head;

/* What the parser calls back.  Each returns 0, or non-zero to stop: the
   feed then returns CONCH_H1P_STOP. */
typedef struct conch_h1p_cbs {
  /* The head of a message (the final one of a response: 100 Continue and
     other 1xx responses are passed over; 101 is an error). */
  int (*on_head)(void *ud, const conch_h1_head *head);
  /* |n| bytes of the body, pointing into the input. */
  int (*on_body)(void *ud, const uint8_t *p, size_t n);
  /* The message is complete: |trailers| (chunked only; |ntrailers| may be
     0) and whether the connection may carry another message
     (http_should_keep_alive: HTTP/1.1 without "Connection: close", or
     HTTP/1.0 with keep-alive). */
  int (*on_end)(void *ud, const conch_h1_field *trailers, size_t ntrailers,
                int keep_alive);
} conch_h1p_cbs;

/* How a feed ended. */
typedef enum conch_h1p_result {
  CONCH_H1P_MORE = 0, /* all bytes taken; the message goes on */
  CONCH_H1P_DONE,     /* a message ended (on_end ran); |*used| bytes of the
                         input were its own, the rest is the next one's */
  CONCH_H1P_STOP,     /* a callback asked to stop */
  CONCH_H1P_LIMIT,    /* the head or trailers passed |max_head| bytes */
  CONCH_H1P_NOMEM,    /* out of memory */
  CONCH_H1P_BAD       /* not HTTP/1.x, or a broken message */
} conch_h1p_result;

typedef struct conch_h1p {
  http_parser p;
  const conch_h1p_cbs *cbs;
  void *ud;
  const conch_mem *mem;
  size_t max_head;
  conch_buf hb; /* names and values of the head or trailers being read */
  conch_buf url;
  struct conch_h1p_off *offs; /* per field: offsets into |hb| */
  size_t noffs, cap;
  conch_h1_field *fields; /* built at the end of a block (cap entries) */
  unsigned in_value : 1;
  unsigned head_done : 1; /* the (final) head was handed over */
  unsigned skip_1xx : 1;  /* an interim response is being read */
  unsigned ended : 1;     /* on_end ran: pause here */
  unsigned stopped : 1;   /* a callback asked to stop */
  unsigned over : 1;      /* |max_head| passed */
  unsigned nomem : 1;
  unsigned started : 1; /* a byte of the current message was read */
  size_t ninvalid;      /* of the block built last */
} conch_h1p;

/* Starts a parser of responses (|request| 0) or requests (1). */
void conch__h1p_init(conch_h1p *p, int request, const conch_mem *mem,
                     size_t max_head, const conch_h1p_cbs *cbs, void *ud);
/* Frees what the parser holds; it may be initialized again. */
void conch__h1p_free(conch_h1p *p);
/* Reads |n| bytes (n 0: the connection ended, which ends a body that runs
   to the end of the connection).  Sets |*used| to the bytes taken.  After
   CONCH_H1P_DONE the next call begins a new message. */
conch_h1p_result conch__h1p_feed(conch_h1p *p, const uint8_t *data, size_t n,
                                 size_t *used);
/* Whether a byte of a message was read and its end was not. */
int conch__h1p_in_message(const conch_h1p *p);
/* Whether the (final) head of the current message was handed over. */
int conch__h1p_head_done(const conch_h1p *p);
/* Why the last feed returned CONCH_H1P_BAD. */
const char *conch__h1p_error(const conch_h1p *p);

#endif
