/* A raw HTTP/1.1 client for the tests of the servers' HTTP/1.1 side
   (tests/server/test_serve_h1.c: conch serve; tests/server_core/
   test_server_h1.c: the server core).  It shares no code with either
   server's parser: it writes the bytes a test gives it and reads a
   response the simple way (status line, header block, then a body by
   Content-Length, chunked with trailers, or up to EOF), so what it accepts
   is what RFC 9112 says and nothing the servers' own code decides.

   Reads wait on a deadline (a test passes a generous one, CONCH_WAIT_MS
   or its own); a read that fails says why on stderr (timeout, EOF,
   malformed status line or chunk) with what was buffered, and returns -1,
   so the test's assert names the line and the log names the cause.
   Send and connect failures are cmocka assertion failures.  The buffer
   and the descriptor are the test's to look at (|len| after a response
   says nothing more arrived; |fd| for setsockopt or shutdown). */
#ifndef CONCH_TEST_H1RAW_H
#define CONCH_TEST_H1RAW_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define H1RAW_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define H1RAW_PRINTF(a, b)
#endif

/* One connection and what was read on it but not yet taken. */
typedef struct h1raw {
  int fd;
  uint8_t *buf;
  size_t len;
  size_t cap;
  int eof; /* the peer closed (or reset) */
} h1raw;

/* A response. */
typedef struct h1raw_resp {
  int status;
  char head[16384]; /* header lines after the status line, each ending
                       in CRLF (cut if longer) */
  uint8_t *body;    /* NUL-terminated past |len|; NULL when empty */
  size_t len;
  size_t cap;          /* of |body|: it grows by doubling, so a long stream read
                          chunk by chunk is not copied over and over */
  int chunked;         /* the body came in chunks */
  int nchunks;         /* how many (the last, empty one not counted) */
  char trailers[1024]; /* trailer lines, each ending in CRLF */
} h1raw_resp;

/* Connects to 127.0.0.1:|port| (TCP_NODELAY) or to the Unix socket at
   |path|.  Asserts on failure. */
h1raw *h1raw_open(int port);
h1raw *h1raw_open_unix(const char *path);
/* Closes and frees |c| (NULL is ignored). */
void h1raw_close(h1raw *c);

/* Writes all of |p| (asserts that the peer took it). */
void h1raw_send(h1raw *c, const void *p, size_t n);
/* Writes a formatted request text (up to 4 KiB). */
void h1raw_sendf(h1raw *c, const char *fmt, ...) H1RAW_PRINTF(2, 3);
/* Sends a POST of |body| with Content-Length, Host and Content-Type;
   |extra| (NULL for none) is more header lines, each ending in CRLF. */
void h1raw_post(h1raw *c, const char *path, const char *ctype,
                const char *extra, const uint8_t *body, size_t len);

/* Reads what arrives within |ms| into the buffer: 1 got bytes, 0 EOF (or
   reset), -1 nothing arrived. */
int h1raw_fill(h1raw *c, int ms);
/* Takes the first |n| buffered bytes away. */
void h1raw_drop(h1raw *c, size_t n);
/* Waits until |n| bytes are buffered, or (|line|) a whole CRLF-ended line.
   Returns the count to take, or 0 at EOF or when |deadline| (conch_now_ms()
   time) passed. */
size_t h1raw_want(h1raw *c, size_t n, int line, long long deadline);
/* 1 once the peer closed within |ms| (0 when it is still open then). */
int h1raw_at_eof(h1raw *c, int ms);

/* The value of header |name| (case-insensitive; leading blanks skipped),
   copied into |out| (cut to |outlen| - 1), or NULL when it is absent. */
const char *h1raw_header(const h1raw_resp *r, const char *name, char *out,
                         size_t outlen);

/* The status line and headers into |r| (cleared first).  0 or -1. */
int h1raw_read_head(h1raw *c, h1raw_resp *r, int ms);
/* One chunk of a chunked body appended to |r->body|: its size, 0 after
   the last chunk and the trailers, -1 on error or timeout. */
long h1raw_read_chunk(h1raw *c, h1raw_resp *r, int ms);
/* A whole response into |r| (h1raw_resp_free() it after).  |head_req|:
   the request was HEAD (no body whatever the headers say).  A body with
   neither Content-Length nor chunked runs to EOF.  0 or -1. */
int h1raw_read_resp(h1raw *c, h1raw_resp *r, int head_req, int ms);
/* Frees |r|'s body (|r| may be read into again). */
void h1raw_resp_free(h1raw_resp *r);

/* Sends |req| (|len| bytes) on a connection of its own to 127.0.0.1:|port|
   and fails the test unless the answer has status |status| and
   Connection: close, and the server then closes the connection. */
void h1raw_assert_refused(int port, const char *req, size_t len, int status);

#endif
