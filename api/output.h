/* The output conch_run() and conch_run_async() keep: stdout, stderr and
   both together in arrival order, each stream bounded.  A stream keeps its
   first |limit| bytes; a chunk that crosses the limit is cut, and what
   comes after is counted and dropped (the stream itself goes on being
   read, so the process never blocks on it).  |text| holds exactly the
   bytes kept of both streams, in the order they arrived, so it is at most
   twice the limit.  Buffers grow by doubling but never past what the
   limit lets them hold. */
#ifndef CONCH_API_OUTPUT_H
#define CONCH_API_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>

typedef struct conch__obuf {
  uint8_t *p;
  size_t len;
  size_t cap;
} conch__obuf;

typedef struct conch__output {
  const conch_mem *mem;
  size_t limit; /* per stream; SIZE_MAX: none */
  conch__obuf out, err, text;
  size_t out_dropped, err_dropped;
} conch__output;

/* Empty, keeping at most |limit| bytes of each stream (0 is a limit of
   nothing kept; SIZE_MAX none), allocating with |mem|. */
void conch__output_init(conch__output *o, const conch_mem *mem, size_t limit);
/* Frees the buffers and empties |o| (its limit stays). */
void conch__output_clear(conch__output *o);
/* Adds a chunk of stdout (|is_err| 0) or stderr.  Returns 0, or
   CONCH_ERR_NOMEM with nothing of the chunk kept in either buffer (the
   bytes are then counted as dropped). */
int conch__output_add(conch__output *o, int is_err, const uint8_t *p, size_t n);

#endif
