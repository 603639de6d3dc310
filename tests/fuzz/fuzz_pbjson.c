/* Fuzz target: the proto3 JSON codec (runtime/pbjson*.c).  The bytes are
   decoded as every process.proto request message (and, for the types that
   process.proto lacks, as the unit test's messages: all scalars, maps of
   every key type, oneofs, proto2 presence, fields of every well-known type,
   and some well-known types at the top), with a resolver for Any that knows
   the test messages.  Whatever decodes must encode; the encoding must
   decode again to the same encoding; and the message must survive
   protobuf-c's own pack and unpack unchanged.  Failures abort(). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/status.h>

#include "mem_int.h"
#include "pbjson.h"
#include "process/process.pb-c.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "pbjson/types.pb-c.c"
#include "pbjson/types2.pb-c.c"
#include "google/protobuf/any.pb-c.c"
#include "google/protobuf/duration.pb-c.c"
#include "google/protobuf/empty.pb-c.c"
#include "google/protobuf/field_mask.pb-c.c"
#include "google/protobuf/struct.pb-c.c"
#include "google/protobuf/timestamp.pb-c.c"
#include "google/protobuf/wrappers.pb-c.c"
#pragma GCC diagnostic pop

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descriptors[] = {
    &process__list_request__descriptor,
    &process__start_request__descriptor,
    &process__connect_request__descriptor,
    &process__update_request__descriptor,
    &process__stream_input_request__descriptor,
    &process__send_input_request__descriptor,
    &process__send_signal_request__descriptor,
    &process__close_stdin_request__descriptor,
    &process__start_response__descriptor,
    &process__list_response__descriptor,
    &pbjsontest__scalars__descriptor,
    &pbjsontest__repeats__descriptor,
    &pbjsontest__maps__descriptor,
    &pbjsontest__oneofs__descriptor,
    &pbjsontest2__p2__descriptor,
    &pbjsontest__wkt__descriptor,
    &google__protobuf__any__descriptor,
    &google__protobuf__value__descriptor,
    &google__protobuf__timestamp__descriptor,
    &google__protobuf__duration__descriptor,
    &google__protobuf__field_mask__descriptor,
};

/* Any's types: the test messages by the name after the last '/'; the
   well-known types are left to the codec's built-in descriptors, except
   Value and Any, which resolve to the compiled copies above (both paths
   get exercised). */
static const ProtobufCMessageDescriptor *resolve(const char *url, void *ud) {
  const char *name = strrchr(url, '/');
  size_t i;

  (void)ud;
  name = name != NULL ? name + 1 : url;
  for (i = 0; i < sizeof(descriptors) / sizeof(descriptors[0]); i++) {
    if (strcmp(descriptors[i]->name, name) == 0 &&
        descriptors[i] != &google__protobuf__timestamp__descriptor &&
        descriptors[i] != &google__protobuf__duration__descriptor &&
        descriptors[i] != &google__protobuf__field_mask__descriptor) {
      return descriptors[i];
    }
  }
  return NULL;
}

static const conch_pbjson_opts opts = {resolve, NULL};

static void die(const char *what, const ProtobufCMessageDescriptor *d,
                const char *a, const char *b) {
  fprintf(stderr, "fuzz_pbjson: %s (%s)\n  %s\n  %s\n", what, d->name,
          a != NULL ? a : "", b != NULL ? b : "");
  abort();
}

/* The encoding of |m| as a NUL-terminated string (malloc'd). */
static char *encode(const ProtobufCMessage *m, const char *ctx) {
  conch_buf b = CONCH_BUF_INIT;
  char err[256];
  char *s;
  int rv = conch__pbjson_encode_ex(m, &opts, NULL, &b, err, sizeof(err));

  if (rv != 0) {
    /* Anything decoded is UTF-8, within the depth limit, has resolvable
       Anys, valid times and field masks and finite Values: encoding cannot
       fail but for memory. */
    die("encode failed", m->descriptor, err, ctx);
  }
  s = malloc(conch__buf_size(&b) + 1);
  if (s == NULL) {
    abort();
  }
  if (conch__buf_size(&b) > 0) {
    memcpy(s, conch__buf_head(&b), conch__buf_size(&b));
  }
  s[conch__buf_size(&b)] = '\0';
  conch__buf_free(&b, conch_mem_default());
  return s;
}

/* protojson writes a NullValue field as null whatever its number, and null
   reads back as 0, which a field without presence then leaves out: the
   one loss allowed ({"nv":1} -> {"nv":null} -> {}).  The shorter text
   must then be stable. */
static int nullvalue_lossy(const ProtobufCMessageDescriptor *d, const char *s1,
                           const char *s2) {
  ProtobufCMessage *m = NULL;
  char err[256];
  char *s3;
  int same;

  if (strstr(s1, "\"nv\":null") == NULL || strlen(s2) >= strlen(s1) ||
      conch__pbjson_decode_ex(d, (const uint8_t *)s2, strlen(s2), &opts, NULL,
                              &m, err, sizeof(err)) != 0) {
    return 0;
  }
  s3 = encode(m, s2);
  same = strcmp(s2, s3) == 0;
  free(s3);
  protobuf_c_message_free_unpacked(m, NULL);
  return same;
}

static void one(const ProtobufCMessageDescriptor *d, const uint8_t *data,
                size_t size) {
  ProtobufCMessage *m = NULL;
  ProtobufCMessage *m2 = NULL;
  ProtobufCMessage *m3;
  char err[256];
  char *s1;
  char *s2;
  char *s3;
  uint8_t *bin;
  size_t n;
  int rv;

  rv =
      conch__pbjson_decode_ex(d, data, size, &opts, NULL, &m, err, sizeof(err));
  if (rv != 0) {
    if (m != NULL || err[0] == '\0' ||
        (rv != CONCH_ERR_CODEC && rv != CONCH_ERR_NOMEM)) {
      die("bad failure", d, err, NULL);
    }
    return;
  }
  s1 = encode(m, "first encode");
  rv = conch__pbjson_decode_ex(d, (const uint8_t *)s1, strlen(s1), &opts, NULL,
                               &m2, err, sizeof(err));
  if (rv != 0) {
    die("own output does not decode", d, s1, err);
  }
  s2 = encode(m2, s1);
  if (strcmp(s1, s2) != 0 && !nullvalue_lossy(d, s1, s2)) {
    die("round trip changed the message", d, s1, s2);
  }
  /* protobuf-c's binary form of the decoded message holds the same. */
  n = protobuf_c_message_get_packed_size(m);
  bin = malloc(n > 0 ? n : 1);
  if (bin == NULL || protobuf_c_message_pack(m, bin) != n) {
    abort();
  }
  m3 = protobuf_c_message_unpack(d, NULL, n, bin);
  if (m3 == NULL) {
    die("packed form does not unpack", d, s1, NULL);
  }
  s3 = encode(m3, s1);
  if (strcmp(s1, s3) != 0) {
    die("binary round trip changed the message", d, s1, s3);
  }
  free(s1);
  free(s2);
  free(s3);
  free(bin);
  protobuf_c_message_free_unpacked(m, NULL);
  protobuf_c_message_free_unpacked(m2, NULL);
  protobuf_c_message_free_unpacked(m3, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t i;

  for (i = 0; i < sizeof(descriptors) / sizeof(descriptors[0]); i++) {
    one(descriptors[i], data, size);
  }
  return 0;
}
