/*
 * conch - a Connect/gRPC client for C
 *
 * reflect.h: a client of gRPC server reflection
 * (grpc.reflection.v1.ServerReflection, falling back to v1alpha for a
 * server that does not serve v1), for the schemas of servers whose types
 * are known only at run time: the files it answers with go into a
 * conch_fileset (dynamic.h), from which conch_dynamic builds descriptors.
 *
 * Blocking: each function drives the client on the calling thread (the
 * *_sync layer of call.h) until the server answered, so it must not be
 * called from a callback of the client.  One reflection stream is kept
 * open for the requests of a conch_reflect and reopened after it ended.
 * The server's answers are trusted only as bytes: whatever they carry is
 * checked when the files are built (conch_fileset_add_file(),
 * conch_dynamic_*).
 */
#ifndef CONCH_REFLECT_H
#define CONCH_REFLECT_H

#include <stddef.h>

#include <conch/call.h>
#include <conch/client.h>
#include <conch/dynamic.h>
#include <conch/export.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct conch_reflect conch_reflect;

/**
 * A reflection client on |c| (retained: it must outlive the result).
 * |opts| (may be NULL) is copied and used for each reflection stream: its
 * headers (still borrowed: they must live as long as the result) go with
 * every request, its timeout_ms bounds each stream.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out| or |c|) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_reflect_new(conch_reflect **out, conch_client *c,
                                   const conch_call_opts *opts);

/** Ends the open stream, if any, and frees |r|.  NULL is accepted. */
CONCH_EXTERN void conch_reflect_free(conch_reflect *r);

/**
 * Asks for the names of the services the server serves; read them with
 * conch_reflect_n_services() and conch_reflect_service().
 *
 * Returns 0; CONCH_ERR_RPC (the server refused or the stream failed:
 * |st|, when not NULL, receives the status; unimplemented from both v1
 * and v1alpha means no reflection, and its message says so, the server's
 * own words after) or CONCH_ERR_NOMEM.  The service that answered first
 * (v1, else v1alpha after v1's unimplemented) is the one |r| asks from
 * then on (conch_reflect_version()).
 */
CONCH_EXTERN int conch_reflect_list(conch_reflect *r, conch_status *st);

/** The number of names of the last conch_reflect_list(), and the |i|th
    (NULL past the end; valid until the next call on |r|). */
CONCH_EXTERN size_t conch_reflect_n_services(const conch_reflect *r);
CONCH_EXTERN const char *conch_reflect_service(const conch_reflect *r,
                                               size_t i);

/**
 * Adds to |fs| the file that declares |symbol| ("pkg.Svc", "pkg.Svc.Method",
 * "pkg.Msg", a leading '.' accepted) and every file it imports, directly
 * or not, asking for those the answer lacked by name.  An import the
 * server does not have (not_found) is left out, as conch_fileset_to_pool()
 * leaves it (the well-known types are compiled in).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL argument, an answer that is not a
 * FileDescriptorProto); CONCH_ERR_RPC (|st|: not_found for an unknown
 * symbol, or the stream's status) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_reflect_symbol(conch_reflect *r, const char *symbol,
                                      conch_fileset *fs, conch_status *st);

/**
 * The same for the file named |filename| ("pkg/x.proto").
 *
 * Returns as conch_reflect_symbol().
 */
CONCH_EXTERN int conch_reflect_file(conch_reflect *r, const char *filename,
                                    conch_fileset *fs, conch_status *st);

/**
 * Which reflection service answered |r|'s requests.
 *
 * Returns 1 for grpc.reflection.v1, 0 for v1alpha, -1 before any answer
 * (and for NULL).
 */
CONCH_EXTERN int conch_reflect_version(const conch_reflect *r);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_REFLECT_H */
