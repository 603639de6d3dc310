/* Connect, gRPC and gRPC-Web on a call (protocol.c): request headers and
   framing, response headers, body and end.  Private to the runtime. */
#ifndef CONCH_PROTOCOL_H
#define CONCH_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include <conch/call.h>

#include "buf.h"

/* Validates the response headers; may end the call. */
void conch__proto_on_headers(conch_call *call);
/* Response body bytes. */
void conch__proto_on_data(conch_call *call, const uint8_t *data, size_t len);
/* The input being fed is about to go: a Connect unary body still lent by
   it (conch_call.body_lent) is copied into the call's body, for every
   call of |c| that has one. */
void conch__proto_settle(struct conch_client *c);
/* |call| gives back a lent body without copying it (the body is dropped). */
void conch__proto_unlend(conch_call *call);
/* END_STREAM from the server: settles the status. */
void conch__proto_on_end(conch_call *call);
/* Serializes |msg| bytes (|n|) for the wire into |call->sendbuf|.
   Returns 0 or a CONCH_ERR_*. */
int conch__proto_frame_message(conch_call *call, const uint8_t *p, size_t n);
/* Non-zero for grpc-status, grpc-message and grpc-status-details-bin. */
int conch__grpc_status_field(const char *name, size_t len);
/* Whether a call of this shape must have its one message before HEADERS. */
int conch__proto_headers_wait_message(const conch_call *call);
/* Builds the request header list for |call| into |nva| (room for |cap|
   entries), with strings stored in |store|; the headers constant for the
   client and method come from a template (see conch_hdr_tmpl) and are
   flagged for nghttp2 not to copy.  Both sessions write their requests
   from it (HTTP/1.1 as text).  Returns the count, or a negative CONCH_ERR_*
   with the call failed, saying why. */
long conch__proto_request_headers(conch_call *call, nghttp2_nv *nva, size_t cap,
                                  conch_buf *store);
/* Frees the request header templates of |c|, after its sessions. */
void conch__proto_client_free(conch_client *c);

#endif
