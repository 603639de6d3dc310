/* Internals of conch_status: every mapping to a Connect code lives in
   status.c. */
#ifndef CONCH_STATUS_INT_H
#define CONCH_STATUS_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <conch/metadata.h>
#include <conch/status.h>

/* Sets |st| unless it already holds an error (the first error wins).  The
   message is formatted with vsnprintf; if it cannot be allocated the status
   still gets its code, with a NULL message.  Returns 1 if |st| was set, 0 if
   an earlier error was kept. */
int conch__status_set(conch_status *st, const conch_mem *mem, conch_code code,
                      conch_origin origin, int local_err, const char *fmt, ...)
    CONCH_PRINTF(6, 7);
int conch__status_vset(conch_status *st, const conch_mem *mem, conch_code code,
                       conch_origin origin, int local_err, const char *fmt,
                       va_list ap);

/* Appends one detail to |st|.  |type| is a message name or a type URL: one
   without '/' gets "type.googleapis.com/" in front.  Returns 0 or
   CONCH_ERR_NOMEM (|st| unchanged). */
int conch__status_add_detail(conch_status *st, const conch_mem *mem,
                             const char *type, size_t type_len,
                             const uint8_t *value, size_t len);

/* HTTP status -> code, for any protocol (CONNECT_PROTOCOL.md 5.2). */
conch_code conch__code_from_http(int http_status);

/* The code a local failure (CONCH_ERR_*) maps to: CONNECT/IO/TLS/RESOLVE ->
   unavailable, TIMEOUT -> deadline_exceeded, CANCELED -> canceled, LIMIT ->
   resource_exhausted, everything else -> internal. */
conch_code conch__code_from_err(int err);

/* A received RST_STREAM error code -> code (5.4).  NO_ERROR gives
   CONCH_CODE_OK: the caller decides whether the response was complete.
   CANCEL gives deadline_exceeded when |deadline_passed|. */
conch_code conch__code_from_rst(uint32_t h2_error, int deadline_passed);

/* Fills |st| (which must be OK) from a Connect unary error response
   (1.3 step 3): |body| is the already-decompressed body (may be empty) and
   |json_ctype| says whether the content type was application/json.  Falls
   back to the HTTP status mapping as the spec requires; a valid body code
   beats the status.  Returns 0 or CONCH_ERR_NOMEM (then |st| still holds a
   code). */
int conch__connect_unary_error(conch_status *st, const conch_mem *mem,
                               int http_status, int json_ctype,
                               const uint8_t *body, size_t len);

/* Parses a Connect end-stream JSON block (2.2).  An "error" member (not
   null) sets |st| with origin SERVER; its code missing, null or unknown
   gives unknown.  "metadata" pairs are appended to |trailers| (via
   conch__metadata_add_wire, so "-bin" values are decoded).  Returns 0,
   CONCH_ERR_PROTO (not a JSON object, or a member of the wrong type: the
   caller reports internal) or CONCH_ERR_NOMEM. */
int conch__connect_end_stream(const uint8_t *json, size_t len,
                              const conch_mem *mem, conch_status *st,
                              conch_metadata *trailers);

/* Percent-decodes a grpc-message value into a new NUL-terminated string.
   Invalid sequences are kept verbatim.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__grpc_message_decode(const char *in, size_t len, const conch_mem *mem,
                               char **out);

/* Percent-encodes |in| for grpc-message (bytes < 0x20, > 0x7E and '%' as
   %XX, uppercase).  Returns 0 or CONCH_ERR_NOMEM. */
int conch__grpc_message_encode(const char *in, size_t len, const conch_mem *mem,
                               char **out);

/* Decodes grpc-status-details-bin (base64 of google.rpc.Status) into |st|:
   code, message and details replace what |st| held (origin SERVER).
   Returns 0, CONCH_ERR_PROTO (bad base64 or protobuf) or CONCH_ERR_NOMEM. */
int conch__grpc_status_details(const char *b64, size_t len,
                               const conch_mem *mem, conch_status *st);

/* Parses a grpc-status value: plain decimal without leading zeros.  Returns
   0..16, or -1 if unparsable or out of range. */
int conch__grpc_status_parse(const char *v, size_t len);

#endif
