/* TEMPORARY: the few wire-layer functions the server core needs, with the
   signatures of runtime/wire.h (branch `wire`), until that lands; then
   this file and server_wiretmp.c go and server_rpc.c includes wire.h. */
#ifndef CONCH_SERVER_WIRETMP_H
#define CONCH_SERVER_WIRETMP_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>
#include <conch/metadata.h>
#include <conch/status.h>

#include "buf.h"

enum { CONCH_TIMEOUT_SYNTAX = -1, CONCH_TIMEOUT_TOO_LONG = -2 };
int conch__connect_timeout_parse(const char *v, size_t len, int64_t *ms);
int conch__grpc_timeout_parse(const char *v, size_t len, int64_t *ms);

enum {
  CONCH_CT_CONNECT = 1,
  CONCH_CT_CONNECT_STREAM,
  CONCH_CT_GRPC,
  CONCH_CT_GRPC_WEB
};
enum { CONCH_CT_PROTO = 1, CONCH_CT_JSON, CONCH_CT_OTHER };
enum { CONCH_CT_NO_PARAMS = 0, CONCH_CT_UTF8, CONCH_CT_BAD_PARAMS };
typedef struct conch_ctype {
  int family;
  int codec;
  int params;
} conch_ctype;
int conch__ctype_parse(const char *v, size_t len, conch_ctype *out);
const char *conch__ctype_name(int family, int codec, int utf8);

int conch__connect_error_write(conch_buf *out, const conch_mem *mem,
                               const conch_status *st);
int conch__connect_end_write(conch_buf *out, const conch_mem *mem,
                             const conch_status *st,
                             const conch_metadata *trailers);

#endif
