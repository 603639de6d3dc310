/* Fuzz target: the "br" decoder (runtime/compress/compress.c), as comp_target.h
   describes. */
#define COMP_ID CONCH_COMPRESSION_BR
#include "comp_target.h"
