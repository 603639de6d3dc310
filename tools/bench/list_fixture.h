/* The canned process.ListResponse both benchmark servers answer List with
   (bench_server.c, conch_bench_server.c): three processes, the last one's
   tag padded so that the message is LIST_BYTES long. */
#ifndef CONCH_BENCH_LIST_FIXTURE_H
#define CONCH_BENCH_LIST_FIXTURE_H

#include <stdint.h>

#define LIST_BYTES 485

/* Writes the packed message to |out|; exits (naming |prog|) when it
   cannot be sized to LIST_BYTES. */
void bench_list_build(uint8_t out[LIST_BYTES], const char *prog);

#endif
