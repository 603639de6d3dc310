/* proto3 JSON for protobuf-c messages (pbjson.h): what the encoder
   (pbjson_enc.c) and the decoder (pbjson_dec.c) share about descriptors.
   Behaviour follows protojson (encoding/protojson of protobuf-go), which
   connect-go and so envd use; where it and protobuf-es disagree, protojson
   wins.  The well-known types live in pbjson_wkt.c. */
#include "pbjson_int.h"

#include <string.h>

static const char *const type_names[] = {
    "int32",  "sint32",  "sfixed32", "int64",   "sint64", "sfixed64",
    "uint32", "fixed32", "uint64",   "fixed64", "float",  "double",
    "bool",   "enum",    "string",   "bytes",   "message"};

const char *conch__pbj_type_name(ProtobufCType t) {
  return (unsigned)t < sizeof(type_names) / sizeof(type_names[0])
             ? type_names[t]
             : "?";
}

/* Storage of one value of |t|: a singular field, or a repeated element. */
size_t conch__pbj_elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
    return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(ProtobufCMessage *);
  default:
    return 4; /* 32-bit integers, float, enum */
  }
}

/* Whether |short_name| is protoc's MapEntryName of the field |field|: the
   field name in CamelCase (first letter and each one after '_' upper-cased,
   the '_' dropped) followed by "Entry". */
static int entry_name_eq(const char *field, const char *short_name) {
  int first = 1;
  char c;

  /* The JSON name, its first letter upper-cased too. */
  while ((c = conch__json_name_next(&field)) != '\0') {
    if (first && c >= 'a' && c <= 'z') {
      c = (char)(c - 'a' + 'A');
    }
    first = 0;
    if (*short_name != c) {
      return 0;
    }
    short_name++;
  }
  return strcmp(short_name, "Entry") == 0;
}

/* protobuf-c has no map flag: protoc lowers map<K, V> name = N to a
   repeated field of the nested message <Parent>.<CamelName>Entry whose
   fields are K key = 1 and V value = 2.  That shape is the test.  (A
   message written by hand in exactly that shape and used as a repeated
   field of that name is taken for a map too: protobuf-c's descriptors
   cannot tell the two apart.) */
int conch__pbj_is_map(const ProtobufCMessageDescriptor *parent,
                      const ProtobufCFieldDescriptor *f) {
  const ProtobufCMessageDescriptor *e = f->descriptor;
  size_t pn;

  if (f->label != PROTOBUF_C_LABEL_REPEATED ||
      f->type != PROTOBUF_C_TYPE_MESSAGE || e == NULL || e->n_fields != 2 ||
      e->fields[0].id != 1 || e->fields[1].id != 2 ||
      strcmp(e->fields[0].name, "key") != 0 ||
      strcmp(e->fields[1].name, "value") != 0 ||
      e->fields[0].label == PROTOBUF_C_LABEL_REPEATED ||
      e->fields[1].label == PROTOBUF_C_LABEL_REPEATED) {
    return 0;
  }
  switch (e->fields[0].type) {
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE:
  case PROTOBUF_C_TYPE_ENUM:
  case PROTOBUF_C_TYPE_BYTES:
  case PROTOBUF_C_TYPE_MESSAGE:
    return 0;
  default:
    break;
  }
  if (!entry_name_eq(f->name, e->short_name)) {
    return 0;
  }
  pn = strlen(parent->name);
  return strncmp(e->name, parent->name, pn) == 0 && e->name[pn] == '.' &&
         strcmp(e->name + pn + 1, e->short_name) == 0;
}

/* Kinds of map keys (pbjson_int.h). */
int conch__pbj_key_kind(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_STRING:
    return 0;
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return 1;
  default:
    return 2;
  }
}
