/* Fuzz target: the "zstd" decoder (runtime/compress/compress.c), as comp_target.h
   describes. */
#define COMP_ID CONCH_COMPRESSION_ZSTD
#include "comp_target.h"
