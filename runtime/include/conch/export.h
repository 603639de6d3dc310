/*
 * conch - a Connect/gRPC client for C
 *
 * export.h: symbol visibility and small attribute macros.
 */
#ifndef CONCH_EXPORT_H
#define CONCH_EXPORT_H

/* The library is built with -fvisibility=hidden; only declarations marked
   CONCH_EXTERN are part of the ABI. */
#if defined(CONCH_BUILDING_LIBRARY) && defined(__GNUC__)
#define CONCH_EXTERN __attribute__((visibility("default")))
#else
#define CONCH_EXTERN
#endif

#if defined(__GNUC__)
#define CONCH_DEPRECATED_FOR(f) __attribute__((deprecated("use " #f)))
#define CONCH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define CONCH_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define CONCH_DEPRECATED_FOR(f)
#define CONCH_PRINTF(a, b)
#define CONCH_WARN_UNUSED
#endif

#endif /* CONCH_EXPORT_H */
