/* Fuzz target: the "deflate" decoder (runtime/compress/compress.c), as comp_target.h
   describes. */
#define COMP_ID CONCH_COMPRESSION_DEFLATE
#include "comp_target.h"
