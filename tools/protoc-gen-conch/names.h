/* protoc-gen-conch: protobuf-c 1.4.1's C naming rules (protoc-c/c_helpers.cc),
   so that generated stubs name the types protobuf-c generates and extend
   its `package__service__method` scheme. */
#ifndef SG_NAMES_H
#define SG_NAMES_H

#include "util.h"

/* "StartRequest" -> "start_request", "PTY" -> "pty", "getHTTP" ->
   "get_http" (CamelToLower: '_' before an upper-case letter that follows a
   lower-case one). */
void sg_camel_to_lower(sg_buf *out, const char *name);

/* "start_request" -> "StartRequest" (ToCamel: drop '_', upper-case the
   letter after it and the first one). */
void sg_to_camel(sg_buf *out, const char *name);

/* A full name ("process.ProcessEvent.DataEvent") with protobuf-c's
   c_package override applied: |package| is the file's package, |c_package|
   the file's (pb_c_file).c_package or NULL. */
typedef struct sg_scope {
  const char *package;
  const char *c_package;
} sg_scope;

/* process__process_event__data_event (FullNameToLower). */
void sg_full_lower(sg_buf *out, const sg_scope *scope, const char *full);

/* Process__ProcessEvent__DataEvent (FullNameToC). */
void sg_full_c(sg_buf *out, const sg_scope *scope, const char *full);

/* "process/process.proto" -> "process_2fprocess_2eproto": letters and
   digits kept, anything else '_' and its hex code. */
void sg_file_ident(sg_buf *out, const char *filename);

/* The file name without ".proto" (or ".protodevel"). */
void sg_strip_proto(sg_buf *out, const char *filename);

/* Non-zero when |s| is a protobuf identifier: [A-Za-z_][A-Za-z0-9_]*. */
int sg_is_ident(const char *s);

/* Non-zero when |s| is a dotted name of identifiers ("a.b.C"); |allow_empty|
   accepts "". */
int sg_is_dotted(const char *s, int allow_empty);

/* Non-zero for the keywords of C11. */
int sg_is_c_keyword(const char *s);

#endif
