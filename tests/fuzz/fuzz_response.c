/* The response side of a call, fed from fuzz input: status and headers,
   body chunks at any split, trailers, END_STREAM and stream resets, for
   Connect unary and streaming calls in push and pull mode.  Whatever the
   input, the call must end exactly once with a valid code and leak
   nothing.

   Input: byte 0 picks the shape (bits 0-1), pull mode (bit 2), a typed or
   raw method (bit 3), the receive limit (bits 4-5) and the protocol (bits
   6-7: Connect, gRPC, gRPC-Web, Connect); byte 1 bit 0 says whether the
   response declares gzip; then operations until the input ends:
     0 name-len name value-len value   a header of the current block
     1                                 a header block begins
     2 flag                            the block ends (flag & 1: END_STREAM)
     3 len-hi len-lo bytes             a DATA chunk
     4                                 END_STREAM on DATA
     5 b0 b1 b2 b3                     RST_STREAM with that error code
     6                                 the application cancels */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "call_int.h"
#include "process/process.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct seen {
  int closes;
  int messages;
  conch_code code;
} seen;

static void on_msg(conch_call *call, const ProtobufCMessage *m, void *ud) {
  seen *s = ud;
  (void)call;
  (void)m;
  s->messages++;
}

static void on_raw(conch_call *call, const uint8_t *p, size_t n, void *ud) {
  seen *s = ud;
  (void)call;
  (void)p;
  (void)n;
  s->messages++;
}

static void on_close(conch_call *call, const conch_status *st,
                     const conch_metadata *t, void *ud) {
  seen *s = ud;
  (void)call;
  (void)t;
  s->closes++;
  s->code = st->code;
  if ((int)st->code < 0 || st->code > CONCH_CODE_UNAUTHENTICATED) {
    abort();
  }
  if (st->code != CONCH_CODE_OK && conch_status_message(st) == NULL) {
    abort();
  }
}

static conch_client *clients[4][3];

static conch_client *client_for(unsigned limit_sel, unsigned proto) {
  static const size_t limits[4] = {4u << 20, 16, 1024, 0};
  if (clients[limit_sel][proto] == NULL) {
    conch_client_opts *o;
    if (conch_client_opts_new(&o) != 0) {
      abort();
    }
    conch_client_opts_set_recv_limit(o, limits[limit_sel]);
    conch_client_opts_set_protocol(o, (conch_protocol)proto);
    if (conch_client_new(&clients[limit_sel][proto], "http://127.0.0.1:1",
                         o) != 0) {
      abort();
    }
    conch_client_opts_free(o);
  }
  return clients[limit_sel][proto];
}

static void drain(conch_call *call, int typed, seen *s) {
  for (;;) {
    int rv;
    if (typed) {
      ProtobufCMessage *m;
      rv = conch_call_recv(call, &m);
      if (rv == 0) {
        s->messages++;
        conch_message_free(conch_call_client(call), m);
        continue;
      }
    } else {
      const uint8_t *p;
      size_t n;
      rv = conch_call_recv_raw(call, &p, &n);
      if (rv == 0) {
        s->messages++;
        continue;
      }
    }
    return;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const conch_stream_kind kinds[4] = {
      CONCH_STREAM_UNARY, CONCH_STREAM_CLIENT, CONCH_STREAM_SERVER,
      CONCH_STREAM_BIDI};
  conch_method m;
  conch_call_handler h;
  conch_client *c;
  conch_call *call;
  seen s;
  size_t i = 2;
  int pull, typed, gzip;
  unsigned proto;

  if (size < 2) {
    return 0;
  }
  pull = (data[0] >> 2) & 1;
  typed = (data[0] >> 3) & 1;
  proto = (data[0] >> 6) % 3;
  gzip = data[1] & 1;
  c = client_for((data[0] >> 4) & 3, proto);
  memset(&m, 0, sizeof(m));
  m.path = "/process.Process/Start";
  m.kind = kinds[data[0] & 3];
  if (typed) {
    m.input = &process__start_request__descriptor;
    m.output = &process__start_response__descriptor;
  }
  memset(&h, 0, sizeof(h));
  h.on_close = on_close;
  if (!pull) {
    h.on_message = on_msg;
    h.on_raw_message = on_raw;
  }
  memset(&s, 0, sizeof(s));
  if (conch__call_new_detached(c, &m, NULL, &h, &s, &call) != 0) {
    abort();
  }
  /* Most inputs should get past the headers: start a response block. */
  conch__call_on_header(call, NULL, 0, NULL, 0, 0);
  conch__call_on_header(call, (const uint8_t *)":status", 7,
                        (const uint8_t *)"200", 3, 0);
  {
    static const char *const ctypes[3][2] = {
        {"application/proto", "application/connect+proto"},
        {"application/grpc", "application/grpc"},
        {"application/grpc-web+proto", "application/grpc-web+proto"}};
    static const char *const encs[3][2] = {
        {"content-encoding", "connect-content-encoding"},
        {"grpc-encoding", "grpc-encoding"},
        {"grpc-encoding", "grpc-encoding"}};
    int streaming = m.kind != CONCH_STREAM_UNARY;
    const char *ct = ctypes[proto][streaming];
    const char *en = encs[proto][streaming];
    conch__call_on_header(call, (const uint8_t *)"content-type", 12,
                          (const uint8_t *)ct, strlen(ct), 0);
    if (gzip) {
      conch__call_on_header(call, (const uint8_t *)en, strlen(en),
                            (const uint8_t *)"gzip", 4, 0);
    }
  }
  while (i < size && !conch_call_done(call)) {
    uint8_t op = data[i++] % 7;
    if (op == 0) {
      size_t nl, vl;
      if (i >= size) {
        break;
      }
      nl = data[i++];
      if (i + nl >= size) {
        break;
      }
      vl = data[i + nl];
      if (i + nl + 1 + vl > size) {
        break;
      }
      conch__call_on_header(call, data + i, nl, data + i + nl + 1, vl, 0);
      i += nl + 1 + vl;
    } else if (op == 1) {
      conch__call_on_header(call, NULL, 0, NULL, 0, 0);
    } else if (op == 2) {
      int end = i < size ? data[i++] & 1 : 0;
      conch__call_on_headers_done(call, end);
    } else if (op == 3) {
      size_t n;
      if (i + 2 > size) {
        break;
      }
      n = ((size_t)data[i] << 8) | data[i + 1];
      i += 2;
      if (n > size - i) {
        n = size - i;
      }
      conch__call_on_data(call, data + i, n);
      i += n;
    } else if (op == 4) {
      conch__call_on_remote_end(call);
    } else if (op == 5) {
      uint32_t e = 0;
      size_t k;
      for (k = 0; k < 4 && i < size; k++) {
        e = (e << 8) | data[i++];
      }
      conch__call_on_stream_close(call, e);
    } else {
      conch_call_cancel(call);
    }
    if (pull) {
      drain(call, typed, &s);
    }
  }
  conch__client_run_done(c);
  if (pull) {
    drain(call, typed, &s);
  }
  /* Ended or not, freeing it delivers on_close exactly once. */
  conch_call_free(call);
  if (s.closes != 1) {
    abort();
  }
  if (s.code == CONCH_CODE_OK &&
      (m.kind == CONCH_STREAM_UNARY || m.kind == CONCH_STREAM_CLIENT) &&
      s.messages != 1) {
    abort();
  }
  return 0;
}
