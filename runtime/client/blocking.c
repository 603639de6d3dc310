/* The blocking layer: poll(2) loops over the non-blocking API on the
   calling thread, as curl_easy_perform runs over multi. */
#include <protobuf-c/protobuf-c.h>

#include "call_int.h"
#include "client_int.h"

int conch_call_send_sync(conch_call *call, const ProtobufCMessage *msg) {
  int rv;
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  for (;;) {
    rv = conch_call_send(call, msg);
    if (rv != CONCH_ERR_AGAIN) {
      return rv;
    }
    rv = conch_client_run(call->client, -1);
    if (rv != 0) {
      return rv;
    }
  }
}

int conch_call_recv_sync(conch_call *call, ProtobufCMessage **msg) {
  int rv;
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  for (;;) {
    rv = conch_call_recv(call, msg);
    if (rv != CONCH_ERR_AGAIN) {
      return rv;
    }
    rv = conch_client_run(call->client, -1);
    if (rv != 0) {
      return rv;
    }
  }
}

int conch_call_wait_sync(conch_call *call) {
  int rv;
  if (call == NULL) {
    return CONCH_ERR_INVALID;
  }
  /* The status is final once the call ends; on_close follows in the same
     turn, so run until it was delivered. */
  while (!call->finished || !call->closed_cb) {
    rv = conch_client_run(call->client, -1);
    if (rv != 0) {
      return rv;
    }
  }
  return call->status.code == CONCH_CODE_OK ? 0 : CONCH_ERR_RPC;
}

int conch_unary_sync(conch_client *c, const conch_method *method,
                     const conch_call_opts *opts, const ProtobufCMessage *req,
                     ProtobufCMessage **resp, conch_status *st,
                     conch_metadata *headers, conch_metadata *trailers) {
  conch_call *call;
  ProtobufCMessage *msg = NULL;
  int rv;

  if (c == NULL || method == NULL || req == NULL || resp == NULL ||
      method->kind != CONCH_STREAM_UNARY) {
    return CONCH_ERR_INVALID;
  }
  *resp = NULL;
  if (c->depth > 0) {
    return CONCH_ERR_RECURSIVE;
  }
  rv = conch_call_start(c, method, opts, NULL, NULL, &call);
  if (rv != 0) {
    return rv;
  }
  rv = conch_call_send(call, req);
  if (rv != 0 && rv != CONCH_ERR_STATE && rv != CONCH_ERR_LIMIT) {
    conch_call_free(call);
    return rv;
  }
  rv = conch_call_recv_sync(call, &msg);
  if (rv == 0) {
    rv = conch_call_wait_sync(call);
  } else if (rv == CONCH_ERR_EOF) {
    /* Cannot happen for unary: an OK status carries one message. */
    rv = CONCH_ERR_RPC;
  }
  if (rv == CONCH_ERR_RPC || rv == 0) {
    if (st != NULL) {
      conch_status_copy(st, &call->status, NULL);
    }
    if (headers != NULL) {
      conch_metadata_append(headers, &call->headers);
    }
    if (trailers != NULL) {
      conch_metadata_append(trailers, &call->trailers);
    }
  }
  if (rv == 0) {
    *resp = msg;
    msg = NULL;
  }
  conch_message_free(c, msg);
  conch_call_free(call);
  return rv;
}
