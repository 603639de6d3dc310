/* Fuzz target: the "snappy" decoder (runtime/compress/compress.c), as comp_target.h
   describes. */
#define COMP_ID CONCH_COMPRESSION_SNAPPY
#include "comp_target.h"
