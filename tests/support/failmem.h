/* A failing allocator for tests: allocation number N (counting from 0 since
   the last failmem_fail_at()) fails, every other one succeeds, and live
   blocks are counted so a test can assert that nothing leaked. */
#ifndef CONCH_TEST_FAILMEM_H
#define CONCH_TEST_FAILMEM_H

#include <stddef.h>

#include <conch/mem.h>

/* Fail allocation |n| (and only that one); (size_t)-1 never fails. */
void failmem_fail_at(size_t n);
/* Non-zero if the planned failure has happened since failmem_fail_at(). */
int failmem_fired(void);
/* Allocations made since failmem_fail_at(). */
size_t failmem_count(void);
/* Blocks allocated through the hooks and not yet freed. */
long failmem_live_blocks(void);
/* The hooks (static storage). */
const conch_mem *failmem_hooks(void);

#endif
