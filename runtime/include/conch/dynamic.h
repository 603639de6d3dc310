/*
 * conch - a Connect/gRPC client for C
 *
 * dynamic.h: messages of types known only at run time.  From the
 * FileDescriptorProtos of a conch_descpool (descriptor.h), builds protobuf-c
 * descriptors (ProtobufCMessageDescriptor, ProtobufCEnumDescriptor) and
 * conch_method values, so that protobuf-c's pack and unpack, the calls of
 * call.h and the proto3 JSON codec work on them as on generated code.
 *
 * What is built: fields of every scalar kind, strings, bytes, enums and
 * messages (recursive ones too), repeated fields (packed as the file's
 * syntax and [packed] say), oneofs (members share storage, as protoc-c lays
 * them out), proto3 `optional` (its synthetic oneof), maps (the repeated
 * entry messages protoc lowers them to), proto2 defaults (bytes too, from
 * protoc's C escapes) and required fields.  A field's [json_name = ...]
 * is its JSON name both ways (read: that or the proto name, as protojson
 * does).  Two fields of one JSON name are refused in proto3, as protoc
 * refuses them; proto2 allows them (two custom names excepted), and then,
 * as protojson reads them, the field declared first owns the name and the
 * others are read by their proto name only; they are written with it when
 * it reads back to them, else with their JSON name.  Well-known types
 * (google.protobuf.Timestamp, Any, ...) are, in a build with the JSON codec,
 * the runtime's compiled-in descriptors, whether or not the pool has their
 * files.  Not built: groups, files of syntax "editions", and extensions: a file
 * that declares them and messages with extension ranges build, an extension's
 * value passes through protobuf as an unknown field does (unpack and pack keep
 * its bytes), the JSON written leaves it out and JSON read with an extension's
 * key ("[pkg.ext]") fails with CONCH_ERR_UNSUPPORTED (unimplemented).
 *
 * Type names in the files are fully qualified (".pkg.Msg") as protoc writes
 * them, or relative as protobufjs writes them (@grpc/reflection serves
 * those): a relative name is looked up as protoc resolves it, in the scope
 * that names it (a message's nested types first), then in each enclosing
 * one.
 *
 * Memory: a conch_dynamic owns one arena from which every descriptor it
 * built comes; they stay valid until conch_dynamic_free().  Types are built
 * when first looked up, with every type they reach.  A lookup that fails
 * adds nothing that later lookups see and keeps none of the memory it
 * took (a server may look up names its clients send).  A conch_dynamic is not
 * thread-safe; the descriptors it returned may be read from any thread.
 *
 * Messages of these types have no message_init function (protobuf-c's
 * init takes no descriptor): protobuf_c_message_unpack() initialises them
 * itself; to make one by hand use conch_dynamic_message_init().
 */
#ifndef CONCH_DYNAMIC_H
#define CONCH_DYNAMIC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/call.h>
#include <conch/descriptor.h>
#include <conch/export.h>
#include <conch/mem.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct conch_dynamic conch_dynamic;

/**
 * Creates a builder over |pool| (retained: it must outlive the builder and
 * not change while in use), allocating with |mem| (NULL: the C library;
 * copied).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out| or |pool|) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_dynamic_new(conch_dynamic **out,
                                   const conch_descpool *pool,
                                   const conch_mem *mem);

/** Frees |dyn| and every descriptor it built.  NULL is accepted. */
CONCH_EXTERN void conch_dynamic_free(conch_dynamic *dyn);

/** Why the last call on |dyn| failed ("" after a success).  Never NULL;
    valid until the next call on |dyn|. */
CONCH_EXTERN const char *conch_dynamic_error(const conch_dynamic *dyn);

/**
 * The descriptor of the message type |name| ("pkg.Msg", a leading '.'
 * accepted) into |*out|.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL argument; no such message in the pool;
 * a bad descriptor in what it reaches: an unresolved or relative type name,
 * a duplicate field number or name, a field number out of 1..2^29-1, a
 * group, required message fields that form a cycle, more than 65535 fields
 * or enum values, a name over 4096 bytes, an unparsable file; the reason
 * in conch_dynamic_error()) or CONCH_ERR_NOMEM.  On error |*out| is NULL.
 */
CONCH_EXTERN int conch_dynamic_message(conch_dynamic *dyn, const char *name,
                                       const ProtobufCMessageDescriptor **out);

/**
 * The descriptor of the enum type |name| ("pkg.Enum") into |*out|.
 *
 * Returns as conch_dynamic_message().
 */
CONCH_EXTERN int conch_dynamic_enum(conch_dynamic *dyn, const char *name,
                                    const ProtobufCEnumDescriptor **out);

/**
 * The method |name| into |*out|: "pkg.Svc/Method", "/pkg.Svc/Method" or
 * "pkg.Svc.Method"; its path, stream kind, idempotency level and the
 * descriptors of its input and output types, ready for conch_call_start().
 *
 * Returns as conch_dynamic_message() (no such service or method:
 * CONCH_ERR_INVALID).
 */
CONCH_EXTERN int conch_dynamic_method(conch_dynamic *dyn, const char *name,
                                      const conch_method **out);

/**
 * The |i|th method (from 0, in .proto order) of the service |service|
 * ("pkg.Svc", a leading '.' accepted) into |*out|, as
 * conch_dynamic_method() builds it: for listing a service's methods.
 *
 * Returns 0; CONCH_ERR_EOF (|i| is past the last method);
 * CONCH_ERR_INVALID (as conch_dynamic_message(): no such service, a bad
 * descriptor) or CONCH_ERR_NOMEM.  On error |*out| is NULL.
 */
CONCH_EXTERN int conch_dynamic_service_method(conch_dynamic *dyn,
                                              const char *service, size_t i,
                                              const conch_method **out);

/**
 * Initialises |msg| (|d|->sizeof_message bytes) as an empty message of the
 * type |d|, defaults set: what a generated *__init() does, for any
 * descriptor.
 *
 * Returns 0, or CONCH_ERR_INVALID (NULL argument, not a message
 * descriptor).
 */
CONCH_EXTERN int conch_dynamic_message_init(const ProtobufCMessageDescriptor *d,
                                            void *msg);

/**
 * Reads |len| bytes of proto3 JSON as a message of type |d| (built by
 * |dyn|, or any protobuf-c descriptor) and serializes it into |*out|
 * (|*outlen| bytes, allocated with the builder's allocator; free it with
 * conch_dynamic_buf_free()).  google.protobuf.Any values resolve through
 * |dyn|.  |st| (may be NULL) receives invalid_argument with the reason,
 * which names the field, when the JSON does not fit the type (its message
 * allocated with the C library, as it may outlive |dyn|).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL argument); CONCH_ERR_CODEC (bad JSON;
 * |st| says why); CONCH_ERR_LIMIT (over the JSON codec's value limit);
 * CONCH_ERR_UNSUPPORTED (built without the JSON codec, or an extension's
 * key in a message built here) or CONCH_ERR_NOMEM.
 * On error |*out| is NULL.
 */
CONCH_EXTERN int conch_dynamic_json_to_pb(conch_dynamic *dyn,
                                          const ProtobufCMessageDescriptor *d,
                                          const char *json, size_t len,
                                          uint8_t **out, size_t *outlen,
                                          conch_status *st);

/**
 * Reads |len| bytes of protobuf as a message of type |d| and writes its
 * canonical proto3 JSON into |*out|, NUL-terminated (|*outlen| bytes
 * without the NUL; free it with conch_dynamic_buf_free()).  |st| (may be
 * NULL) receives the reason of a failure: invalid_argument when the bytes
 * are not a |d| message, internal when the message cannot be written as
 * JSON (a string that is not UTF-8, ...).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL argument); CONCH_ERR_CODEC;
 * CONCH_ERR_UNSUPPORTED (built without the JSON codec) or CONCH_ERR_NOMEM.
 * On error |*out| is NULL.
 */
CONCH_EXTERN int conch_dynamic_pb_to_json(conch_dynamic *dyn,
                                          const ProtobufCMessageDescriptor *d,
                                          const uint8_t *pb, size_t len,
                                          char **out, size_t *outlen,
                                          conch_status *st);

/** Frees what conch_dynamic_json_to_pb() or conch_dynamic_pb_to_json()
    returned.  NULL is accepted. */
CONCH_EXTERN void conch_dynamic_buf_free(conch_dynamic *dyn, void *p);

/**
 * Files that arrive at run time, for a pool: a FileDescriptorSet (protoc
 * --descriptor_set_out, buf build -o) or the serialized
 * FileDescriptorProtos a server reflection answer carries, copied and held
 * as conch_file_descriptor values whose imports are linked by name.  The
 * set must outlive every pool it was added to.
 */
typedef struct conch_fileset conch_fileset;

/**
 * Creates an empty set allocating with |mem| (NULL: the C library; copied).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out|) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_fileset_new(conch_fileset **out, const conch_mem *mem);

/** Frees |fs| and the files it holds.  NULL is accepted. */
CONCH_EXTERN void conch_fileset_free(conch_fileset *fs);

/**
 * Adds a copy of one serialized FileDescriptorProto.  A file whose name
 * the set has already is skipped (the first one stays).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL argument; bytes that are not protobuf
 * or have no file name; more than 65535 files) or CONCH_ERR_NOMEM; on error
 * the set is unchanged.
 */
CONCH_EXTERN int conch_fileset_add_file(conch_fileset *fs, const uint8_t *fdp,
                                        size_t len);

/**
 * Adds every file of a serialized FileDescriptorSet, as
 * conch_fileset_add_file() each.
 *
 * Returns as conch_fileset_add_file(); on error the files added before the
 * bad one stay.
 */
CONCH_EXTERN int conch_fileset_add_set(conch_fileset *fs, const uint8_t *set,
                                       size_t len);

/**
 * Adds every file of a FileDescriptorSet written as proto3 JSON (protoc's
 * and buf's JSON form: {"file": [{"name": ..., "messageType": ...}]}), read
 * with the types of google/protobuf/descriptor.proto compiled into the
 * library, as conch_fileset_add_set().
 *
 * Returns as conch_fileset_add_set(); CONCH_ERR_INVALID also for JSON that
 * is not a FileDescriptorSet, CONCH_ERR_UNSUPPORTED in a build without the
 * JSON codec.
 */
CONCH_EXTERN int conch_fileset_add_set_json(conch_fileset *fs,
                                            const char *json, size_t len);

/** The number of files in |fs|, and the |i|th (NULL past the end). */
CONCH_EXTERN size_t conch_fileset_n_files(const conch_fileset *fs);
CONCH_EXTERN const conch_file_descriptor *
conch_fileset_file_at(const conch_fileset *fs, size_t i);

/**
 * Links each file's imports to the files of |fs| by name (an import the
 * set lacks is left out: the types it declares then fail to resolve when
 * built, except the well-known types a JSON build has compiled in) and adds
 * every file to |pool| (conch_descpool_add()).  Call it again after adding
 * more files.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, or as conch_descpool_add())
 * or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_fileset_to_pool(conch_fileset *fs, conch_descpool *pool);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_DYNAMIC_H */
