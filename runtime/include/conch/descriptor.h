/*
 * conch - a Connect/gRPC client for C
 *
 * descriptor.h: schemas at run time.  protoc-gen-conch embeds the
 * serialized google.protobuf.FileDescriptorProto of each .proto it
 * generates (conch_file_<ident> in every *.conch.h, with the files it
 * imports), and a pool indexes such files by name and by the symbols they
 * declare: what server reflection answers from (conch_server_add_file(),
 * conch_server_add_reflection() in server.h), and what a client reads a
 * schema from.
 *
 * Symbols are full names without the leading dot, as reflection spells
 * them: "pkg.Msg", "pkg.Msg.Nested", "pkg.Msg.field", "pkg.Enum",
 * "pkg.VALUE" (enum values are scoped to the enum's parent, as in
 * protobuf), "pkg.Svc", "pkg.Svc.Method", and extensions "pkg.ext" (also
 * found by their extendee and number).
 */
#ifndef CONCH_DESCRIPTOR_H
#define CONCH_DESCRIPTOR_H

#include <stddef.h>
#include <stdint.h>

#include <conch/export.h>
#include <conch/mem.h>

#ifdef __cplusplus
extern "C" {
#endif

/** One .proto file's descriptor, as generated code embeds it (static data:
    nothing in it is ever freed). */
typedef struct conch_file_descriptor conch_file_descriptor;
struct conch_file_descriptor {
  const char *name;    /**< "process/process.proto" */
  const uint8_t *data; /**< serialized google.protobuf.FileDescriptorProto */
  size_t len;
  /** The files it imports, in .proto order, then NULL. */
  const conch_file_descriptor *const *deps;
};

/** What a symbol names. */
typedef enum conch_symbol_kind {
  CONCH_SYMBOL_MESSAGE = 1,
  CONCH_SYMBOL_FIELD = 2,
  CONCH_SYMBOL_ENUM = 3,
  CONCH_SYMBOL_ENUM_VALUE = 4,
  CONCH_SYMBOL_SERVICE = 5,
  CONCH_SYMBOL_METHOD = 6,
  CONCH_SYMBOL_EXTENSION = 7
} conch_symbol_kind;

typedef struct conch_descpool conch_descpool;

/**
 * Creates an empty pool; |mem| NULL for the C library's allocator (copied).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out|) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_descpool_new(conch_descpool **out, const conch_mem *mem);
/** Frees |pool| (not the descriptors it indexed).  NULL is accepted. */
CONCH_EXTERN void conch_descpool_free(conch_descpool *pool);
/**
 * Adds |fd| and the files it imports, transitively (retained, not copied:
 * they must outlive the pool, as generated ones do).  A file whose name is
 * in the pool already is skipped, with its imports: the first one stays.
 * A symbol declared twice keeps its first file.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL argument, a file whose bytes are not
 * a FileDescriptorProto, imports nested deeper than 64; nothing of that
 * file is added) or CONCH_ERR_NOMEM (the files added before stay).
 */
CONCH_EXTERN int conch_descpool_add(conch_descpool *pool,
                                    const conch_file_descriptor *fd);
/** The file named |name| ("process/process.proto"), or NULL. */
CONCH_EXTERN const conch_file_descriptor *conch_descpool_file(
    const conch_descpool *pool, const char *name);
/** The file that declares |symbol| (a leading '.' is accepted), or NULL;
    |kind| (may be NULL) receives what it is. */
CONCH_EXTERN const conch_file_descriptor *conch_descpool_symbol(
    const conch_descpool *pool, const char *symbol, conch_symbol_kind *kind);
/** The file that declares the extension |number| of message |extendee|
    ("pkg.Msg"), or NULL. */
CONCH_EXTERN const conch_file_descriptor *conch_descpool_extension(
    const conch_descpool *pool, const char *extendee, int32_t number);
/** Fills |out| (room for |n|) with the numbers of the extensions of
    |extendee| the pool knows, in the order added, and returns how many
    there are (which may be more than |n|). */
CONCH_EXTERN size_t conch_descpool_extension_numbers(
    const conch_descpool *pool, const char *extendee, int32_t *out, size_t n);
/** The number of files in the pool, and the |i|th (in the order added,
    each after its imports; NULL past the end). */
CONCH_EXTERN size_t conch_descpool_n_files(const conch_descpool *pool);
CONCH_EXTERN const conch_file_descriptor *conch_descpool_file_at(
    const conch_descpool *pool, size_t i);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_DESCRIPTOR_H */
