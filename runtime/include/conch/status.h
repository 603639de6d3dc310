/*
 * conch - a Connect/gRPC client for C
 *
 * status.h: the two error channels.
 *
 * 1. Return codes.  Every fallible function returns 0 or one of the negative
 *    CONCH_ERR_* values below.  A failed call changes nothing.  Codes at or
 *    below CONCH_ERR_FATAL leave the object good only for its _free function.
 *    Numbers are never reused.
 * 2. One conch_status per RPC outcome: the Connect code, a message, error
 *    details, the HTTP status and where the status came from.
 */
#ifndef CONCH_STATUS_H
#define CONCH_STATUS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <conch/export.h>
#include <conch/mem.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Return codes.  Append-only; a retired number is never given out again. */
enum {
  /** An argument is invalid (NULL where not allowed, out of range). */
  CONCH_ERR_INVALID = -1,
  /** An allocation failed. */
  CONCH_ERR_NOMEM = -2,
  /** The RPC ended with a non-OK status; see the conch_status. */
  CONCH_ERR_RPC = -3,
  /** The object is not in a state that allows this operation (for example
      sending on a call after close_send). */
  CONCH_ERR_STATE = -4,
  /** Nothing can be done now without blocking: no message is ready yet, or
      the send buffer is full.  Try again after the client made progress. */
  CONCH_ERR_AGAIN = -5,
  /** A function that drives or frees the client was called from one of the
      client's own callbacks. */
  CONCH_ERR_RECURSIVE = -6,
  /** A stream has ended normally: no more messages. */
  CONCH_ERR_EOF = -7,
  /** A system call failed (socket, poll, eventfd, ...). */
  CONCH_ERR_IO = -8,
  /** TLS setup or handshake failed. */
  CONCH_ERR_TLS = -9,
  /** Bytes from the peer broke the protocol (framing, HTTP/2, JSON). */
  CONCH_ERR_PROTO = -10,
  /** A size limit was exceeded (message, header list, inflated size). */
  CONCH_ERR_LIMIT = -11,
  /** The deadline passed. */
  CONCH_ERR_TIMEOUT = -12,
  /** The operation was canceled. */
  CONCH_ERR_CANCELED = -13,
  /** Invalid compressed data (corrupt or truncated), in any compression;
      CONCH_ERR_COMPRESSION is the same code. */
  CONCH_ERR_GZIP = -14,
  CONCH_ERR_COMPRESSION = -14,
  /** A metadata name or value is not allowed (CR/LF, uppercase-only rules,
      reserved names). */
  CONCH_ERR_HEADER = -15,
  /** The target URL cannot be used. */
  CONCH_ERR_URL = -16,
  /** Host name resolution failed. */
  CONCH_ERR_RESOLVE = -17,
  /** The connection could not be established or was lost. */
  CONCH_ERR_CONNECT = -18,
  /** A message could not be serialized or parsed by protobuf-c. */
  CONCH_ERR_CODEC = -19,
  /** The requested feature is not supported by the peer or the build. */
  CONCH_ERR_UNSUPPORTED = -20,
  /** The server lacks a capability the operation needs (api/). */
  CONCH_ERR_CAPABILITY = -21,
  /** Codes at or below this value are fatal for the object they came from. */
  CONCH_ERR_FATAL = -900,
  /** The HTTP/2 session failed beyond repair. */
  CONCH_ERR_SESSION = -901
};

/**
 * Returns a static, human-readable description of the return code |rv|.
 * Never NULL, also for unknown values.
 */
CONCH_EXTERN const char *conch_strerror(int rv);

/** RPC status codes: the same numbers as gRPC, the names of Connect. */
typedef enum conch_code {
  CONCH_CODE_OK = 0,
  CONCH_CODE_CANCELED = 1,
  CONCH_CODE_UNKNOWN = 2,
  CONCH_CODE_INVALID_ARGUMENT = 3,
  CONCH_CODE_DEADLINE_EXCEEDED = 4,
  CONCH_CODE_NOT_FOUND = 5,
  CONCH_CODE_ALREADY_EXISTS = 6,
  CONCH_CODE_PERMISSION_DENIED = 7,
  CONCH_CODE_RESOURCE_EXHAUSTED = 8,
  CONCH_CODE_FAILED_PRECONDITION = 9,
  CONCH_CODE_ABORTED = 10,
  CONCH_CODE_OUT_OF_RANGE = 11,
  CONCH_CODE_UNIMPLEMENTED = 12,
  CONCH_CODE_INTERNAL = 13,
  CONCH_CODE_UNAVAILABLE = 14,
  CONCH_CODE_DATA_LOSS = 15,
  CONCH_CODE_UNAUTHENTICATED = 16
} conch_code;

/**
 * Returns the Connect name of |code| ("canceled", "deadline_exceeded", ...),
 * "ok" for CONCH_CODE_OK, or NULL for a value outside 0..16.
 */
CONCH_EXTERN const char *conch_code_name(conch_code code);

/**
 * Parses a Connect code name of |len| bytes.  Returns the code (1..16), or -1
 * if |name| is not one of the 16 Connect names ("ok" is not a wire name).
 */
CONCH_EXTERN int conch_code_parse(const char *name, size_t len);

/** Where a status came from. */
typedef enum conch_origin {
  /** The code is OK. */
  CONCH_ORIGIN_NONE = 0,
  /** The server sent it: an error body, end-stream message or grpc-status. */
  CONCH_ORIGIN_SERVER = 1,
  /** Inferred from a non-200 HTTP status without a usable error body. */
  CONCH_ORIGIN_HTTP = 2,
  /** Made by this client; |local_err| says why. */
  CONCH_ORIGIN_LOCAL = 3
} conch_origin;

/**
 * One error detail: a protobuf message (usually a google.protobuf.Any
 * payload) given as a type URL and the serialized bytes.
 */
typedef struct conch_error_detail {
  /** Full type URL, "type.googleapis.com/<message name>".  NUL-terminated. */
  char *type_url;
  /** The serialized message. */
  uint8_t *value;
  size_t len;
} conch_error_detail;

/**
 * Outcome of one RPC.  Caller-allocated: conch_status_init() before use,
 * conch_status_clear() after.  Only |message| and |details| are allocated,
 * with the allocator recorded in |mem|.
 */
typedef struct conch_status {
  conch_code code;
  conch_origin origin;
  /** HTTP status of the response, 0 if no response headers were seen. */
  int http_status;
  /** The CONCH_ERR_* behind a local status, 0 otherwise. */
  int local_err;
  /** UTF-8 text, owned by the status, may be NULL (also when an allocation
      failed while making the status). */
  char *message;
  conch_error_detail *details;
  size_t ndetails;
  /** Private: the allocator that owns |message| and |details|. */
  const conch_mem *mem;
  void *reserved[4];
} conch_status;

/** Sets |st| to OK with nothing allocated. */
CONCH_EXTERN void conch_status_init(conch_status *st);

/** Frees what |st| owns and sets it to OK.  NULL is accepted. */
CONCH_EXTERN void conch_status_clear(conch_status *st);

/**
 * Copies |src| into |dst| (which is cleared first), allocating with |mem|
 * (NULL: the C library).  Returns 0 or CONCH_ERR_NOMEM; on failure |dst| has
 * the code and origin of |src| but no message or details.
 */
CONCH_EXTERN int conch_status_copy(conch_status *dst, const conch_status *src,
                                   const conch_mem *mem);

/**
 * Returns the message of |st|, or the name of its code when there is none.
 * Never NULL.
 */
CONCH_EXTERN const char *conch_status_message(const conch_status *st);

/**
 * Sets |st| to |code| with a message made from |fmt| and the arguments
 * after it, with the C library's printf conversions (|fmt| NULL: no
 * message), for a status of your own: a server handler's answer, a failure
 * to report.  What |st| held is freed first; the message is
 * allocated with |mem| (NULL: the C library) and freed by
 * conch_status_clear().  The origin is CONCH_ORIGIN_LOCAL.  Returns 0,
 * CONCH_ERR_INVALID (|st| NULL or |code| outside 0..16: |st| unchanged) or
 * CONCH_ERR_NOMEM (|st| has the code, without a message).
 */
CONCH_EXTERN int conch_status_setf(conch_status *st, const conch_mem *mem,
                                   conch_code code, const char *fmt, ...)
    CONCH_PRINTF(4, 5);

/**
 * conch_status_setf() with a va_list.  Returns as conch_status_setf().
 */
CONCH_EXTERN int conch_status_vsetf(conch_status *st, const conch_mem *mem,
                                    conch_code code, const char *fmt,
                                    va_list ap) CONCH_PRINTF(4, 0);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_STATUS_H */
