/*
 * conch - a Connect/gRPC client for C
 *
 * conch.h: the umbrella header.
 *
 * Conventions for the whole API:
 *  - Fallible functions return 0 or a negative CONCH_ERR_* (status.h).
 *  - Pointer arguments are borrowed for the call only; strings are copied.
 *    Anything retained longer says so.
 *  - Only functions named _new, _dup, _copy or _take hand out memory for the
 *    caller to free.  Free functions accept NULL.
 *  - Thread safety: a client and everything on it belongs to one thread at
 *    a time.  conch_client_wakeup() is the only thread-safe function.
 *  - There is no global state and no global initialisation.
 */
#ifndef CONCH_H
#define CONCH_H

#include <conch/export.h>
#include <conch/features.h>
#include <conch/mem.h>
#include <conch/status.h>
#include <conch/metadata.h>
#include <conch/client.h>
#include <conch/transport.h>
#include <conch/io.h>
#include <conch/call.h>
#include <conch/interceptor.h>
#include <conch/retry.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CONCH_VERSION_MAJOR 0
#define CONCH_VERSION_MINOR 1
#define CONCH_VERSION_PATCH 0
#define CONCH_VERSION_STRING "0.1.0"

/** Bits of conch_version_info.features: the modules a libconch was built
    with (conch/features.h says what each one's absence means). */
enum {
  CONCH_FEATURE_SERVER = 1 << 0, /* the server core, conch/server.h */
  CONCH_FEATURE_BROTLI = 1 << 1, /* the "br" compression */
  CONCH_FEATURE_ZSTD = 1 << 2,   /* the "zstd" compression */
  CONCH_FEATURE_SNAPPY = 1 << 3, /* the "snappy" compression */
  CONCH_FEATURE_JSON = 1 << 4    /* the JSON codec */
};

/** Version information of the library actually linked. */
typedef struct conch_version_info {
  /** Grows by one each time this struct gains a field: 2 since
      |features|. */
  int age;
  /** 0xMMmmpp. */
  int version_num;
  /** "0.1.0". */
  const char *version_str;
  /** CONCH_FEATURE_* bits of the modules this library has (age 2). */
  unsigned features;
} conch_version_info;

/** Returns static version information; never NULL. */
CONCH_EXTERN const conch_version_info *conch_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_H */
