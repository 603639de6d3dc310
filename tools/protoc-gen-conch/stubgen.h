/* protoc-gen-conch: the generator proper, apart from protoc's pipes so that
   tests can drive it with a request of their own. */
#ifndef SG_STUBGEN_H
#define SG_STUBGEN_H

#include <stddef.h>

#include "conch/plugin/plugin.pb-c.h"

/* One output file: |name| relative to the --conch_out directory. */
typedef struct sg_file_out {
  char *name;
  char *content;
  size_t len;
} sg_file_out;

/* What a run produced: files, or an error in the .proto input (a message
   for protoc to print, naming the file and element). */
typedef struct sg_result {
  sg_file_out *files;
  size_t nfiles;
  char *error;
} sg_result;

/* Generates *.conch.h and *.conch.c for every file of |req| to generate.
   Returns 0 with |res| filled in (files, or |res->error|), or -1 when out
   of memory.  Free |res| with sg_result_free() either way.  The output
   depends on |req| only: the same request gives the same bytes. */
int sg_generate(const Conch__Plugin__CodeGeneratorRequest *req, sg_result *res);

void sg_result_free(sg_result *res);

#endif
