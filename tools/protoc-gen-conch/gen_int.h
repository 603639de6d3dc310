/* protoc-gen-conch: the model shared by model.c (descriptors -> names) and
   emit.c (names -> C text). */
#ifndef SG_GEN_INT_H
#define SG_GEN_INT_H

#include "conch/plugin/plugin.pb-c.h"
#include "names.h"
#include "stubgen.h"
#include "util.h"

typedef Conch__Plugin__FileDescriptorProto sg_pb_file;
typedef Conch__Plugin__DescriptorProto sg_pb_message;
typedef Conch__Plugin__ServiceDescriptorProto sg_pb_service;
typedef Conch__Plugin__MethodDescriptorProto sg_pb_method;

/* The four shapes, with the values of conch_stream_kind. */
typedef enum sg_kind {
  SG_UNARY = 0,
  SG_CLIENT = 1,
  SG_SERVER = 2,
  SG_BIDI = 3
} sg_kind;

struct sg_file;

/* A message type, as protobuf-c names it. */
typedef struct sg_type {
  const char *full;   /* "process.StartRequest" */
  const char *c_name; /* "Process__StartRequest" */
  const char *lower;  /* "process__start_request" (+ "__descriptor") */
} sg_type;

typedef struct sg_method {
  const char *name; /* "Start" */
  const char *full; /* "process.Process.Start" */
  const char *path; /* "/process.Process/Start" */
  sg_kind kind;
  const sg_type *in;
  const sg_type *out;
  int idempotency; /* 0..2, conch_idempotency */
  int deprecated;
  const char *lower; /* "process__process__start": every function's prefix */
  const char *camel; /* "Process__Process__Start": every type's prefix */
  const char *member; /* "start": its member in the service's handlers */
  /* When the prefixes carry '_'s to dodge a collision: the name that was
     taken and what took it; NULL otherwise. */
  const char *taken;
  const char *taken_by;
  const char *leading; /* comments from the .proto, or NULL */
  const char *trailing;
  size_t index; /* in the file, names the static trampolines */
} sg_method;

typedef struct sg_service {
  const char *name;  /* "Process" */
  const char *full;  /* "process.Process" */
  const char *table; /* "process__process__methods" */
  const char *count; /* "process__process__n_methods" */
  const char *reg;   /* "process__process__register" */
  const char *handlers; /* "Process__Process_Handlers" */
  const char *fdesc; /* "conch_file_process_2fprocess_2eproto": its file's */
  const char *taken;
  const char *taken_by;
  int deprecated;
  const char *leading;
  const char *trailing;
  sg_method *methods;
  size_t nmethods;
} sg_service;

typedef struct sg_file {
  const sg_pb_file *pb;
  const char *name; /* "process/process.proto" */
  sg_scope scope;
  int no_generate;
  int generate;      /* named in file_to_generate */
  const char *base;  /* "process/process" */
  const char *ident; /* "process_2fprocess_2eproto" */
  const char *fdesc; /* "conch_file_process_2fprocess_2eproto" */
  sg_service *services;
  size_t nservices;
  /* Its imports, in .proto order (every file protoc sent has them). */
  struct sg_file **deps;
  size_t ndeps;
} sg_file;

/* Writes |f|'s header and source.  Returns 0 or -1 (out of memory). */
int sg_emit_header(sg_buf *out, const sg_file *f);
int sg_emit_source(sg_buf *out, const sg_file *f);

#endif
