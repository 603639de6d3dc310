/*
 * conch - a Connect/gRPC client for C
 *
 * metadata.h: request headers, response headers and trailers as ordered
 * multi-maps.
 */
#ifndef CONCH_METADATA_H
#define CONCH_METADATA_H

#include <stddef.h>
#include <stdint.h>

#include <conch/export.h>
#include <conch/mem.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * An ordered list of (name, value) pairs.  A name may repeat; the values of
 * one name keep their order.  Names are stored in lowercase and compared
 * case-insensitively.
 *
 * Values of names ending in "-bin" are binary: they are held decoded, sent
 * as unpadded standard base64, and decoded on receipt (padded or not, a
 * comma-separated field giving one value per element).  A received "-bin"
 * value that is not valid base64 is kept as it arrived.
 *
 * Every value is stored with a terminating NUL byte that |len| does not
 * count, so text values can be used as C strings.
 */
typedef struct conch_metadata conch_metadata;

/**
 * Creates an empty list in |*out|, allocating with |mem| (NULL: the C
 * library; retained, it must outlive the list).
 * Returns 0, CONCH_ERR_INVALID or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_metadata_new(conch_metadata **out, const conch_mem *mem);

/** Frees |md| and everything in it.  NULL is accepted. */
CONCH_EXTERN void conch_metadata_free(conch_metadata *md);

/**
 * Appends (|name|, |value|).  Both are copied.  |name| must be 1..255
 * characters from [0-9A-Za-z_.-] (uppercase is stored lowercased).  Unless
 * the name ends in "-bin", |value| must be printable ASCII (0x20-0x7E) or
 * TAB: CR, LF, NUL and other control bytes are refused.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument), CONCH_ERR_HEADER (name or
 * value refused; nothing is added) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_metadata_add(conch_metadata *md, const char *name,
                                    const void *value, size_t len);

/**
 * conch_metadata_add() with a NUL-terminated |value|.
 *
 * Returns what conch_metadata_add() returns; CONCH_ERR_INVALID also for a
 * NULL |value|.
 */
CONCH_EXTERN int conch_metadata_add_str(conch_metadata *md, const char *name,
                                        const char *value);

/** Returns the number of pairs in |md| (0 for NULL). */
CONCH_EXTERN size_t conch_metadata_count(const conch_metadata *md);

/**
 * Gives the |i|-th pair.  |*name| and |*value| are borrowed from |md| until
 * it is next changed or freed.  Returns 0 or CONCH_ERR_INVALID (|i| out of
 * range).
 */
CONCH_EXTERN int conch_metadata_at(const conch_metadata *md, size_t i,
                                   const char **name, const uint8_t **value,
                                   size_t *len);

/**
 * Returns the index of the first pair at or after |start| whose name equals
 * |name| (case-insensitively), or -1.
 */
CONCH_EXTERN long conch_metadata_find(const conch_metadata *md,
                                      const char *name, size_t start);

/**
 * Returns the first value of |name| (NUL-terminated, borrowed as in
 * conch_metadata_at()) and its length in |*len| if |len| is not NULL, or NULL
 * when |name| is absent.
 */
CONCH_EXTERN const char *conch_metadata_get(const conch_metadata *md,
                                            const char *name, size_t *len);

/** Removes every pair named |name|; returns how many were removed. */
CONCH_EXTERN size_t conch_metadata_remove(conch_metadata *md, const char *name);

/** Removes every pair; the memory is kept for reuse. */
CONCH_EXTERN void conch_metadata_reset(conch_metadata *md);

/**
 * Appends copies of all pairs of |src| to |dst|.  Returns 0,
 * CONCH_ERR_INVALID or CONCH_ERR_NOMEM (then |dst| is unchanged).
 */
CONCH_EXTERN int conch_metadata_append(conch_metadata *dst,
                                       const conch_metadata *src);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_METADATA_H */
