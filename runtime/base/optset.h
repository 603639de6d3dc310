/* The option setters both roles have (conch_client_opts_* in
   client/opts.c, conch_server_opts_* in server/server_opts.c): one check
   and one store for each kind of option, and the limits of each kind side
   by side, the same in both roles unless a pair of names below says how
   they differ.  Private to the runtime.

   A setter passes the field it sets through CONCH__OPT(opts, field),
   which is NULL when |opts| is (no &opts->field of a NULL |opts|).  Every
   function here returns 0, or CONCH_ERR_INVALID for a NULL field or a
   refused value, leaving the field as it was. */
#ifndef CONCH_OPTSET_H
#define CONCH_OPTSET_H

#include <stddef.h>
#include <stdint.h>

#include <conch/client.h> /* conch_json_resolver */
#include <conch/mem.h>

#define CONCH__OPT(opts, field) ((opts) != NULL ? &(opts)->field : NULL)

/* ---- The limits --------------------------------------------------------

   Message sizes (set_recv_limit, both roles; the client's set_send_limit,
   _compress_min_bytes and _get_max_url; the server's
   _compress_min_bytes and _buffer_limits): any size, 0 is no limit (or,
   for compress_min_bytes, compress everything).  Receive limit 4 MiB by
   default in both roles.  The server's send buffer is another kind (the
   bytes a call may have waiting, not a message's size): 0 would take no
   message, so it is refused (CONCH__SEND_BUFFER_MIN). */
#define CONCH__RECV_LIMIT_DEFAULT ((size_t)4 << 20)
#define CONCH__SEND_BUFFER_MIN ((size_t)1)

/* Header lists (set_max_header_list, both roles; SETTINGS_MAX_HEADER_LIST_
   SIZE): at least 1 KiB, in both roles.  The defaults differ, as each
   header documents: the client takes 256 KiB of response headers and
   trailers, the server 64 KiB of request headers (it reads them from
   whoever connects). */
#define CONCH__HEADER_LIST_MIN 1024u
#define CONCH__CLIENT_HEADER_LIST_DEFAULT (256u << 10)
#define CONCH__SERVER_HEADER_LIST_DEFAULT (64u << 10)

/* HTTP/2 flow-control windows (the client's set_windows; the server has no
   setter, its stream window is a fixed 1 MiB in server_h2.c): at most
   2^31-1 (RFC 9113 6.9.1), at least the 64 KiB - 1 of the protocol's
   default, below which the peer would stall on a single frame.  The
   server's stream count (set_max_streams) is at least 1. */
#define CONCH__WINDOW_MIN 65535u
#define CONCH__WINDOW_MAX 0x7fffffffu
#define CONCH__MAX_STREAMS_MIN 1u

/* Timeouts in ms.  The server's (idle, drain, header, body) take 0 for
   none and refuse only negative values; the client's connect timeout has
   no "none" and refuses 0 too (client.h: |ms| <= 0). */
#define CONCH__SERVER_TIMEOUT_MIN 0L
#define CONCH__CLIENT_CONNECT_TIMEOUT_MIN 1L

/* Connections: the roles count different things.  The client's
   set_max_connections is the size of its pool, 1..1024 (an int); the
   server's set_max_conns a bound on those it holds, any size_t, 0 for
   none.  Both go through the checks below with their own range. */
#define CONCH__CLIENT_CONNS_MIN 1
#define CONCH__CLIENT_CONNS_MAX 1024

/* ---- Checks and stores -------------------------------------------------- */

/* |*field| = |v| when |min| <= |v|. */
int conch__optset_size(size_t *field, size_t v, size_t min);
/* |*field| = |v| when |min| <= |v| <= |max|. */
int conch__optset_u32(uint32_t *field, uint32_t v, uint32_t min, uint32_t max);
int conch__optset_int(int *field, int v, int min, int max);
/* |*field| = |ms| when |min| <= |ms|. */
int conch__optset_ms(long *field, long ms, long min);
/* The allocator: |mem| copied, or the C library's for NULL; one with a
   NULL function is refused. */
int conch__optset_mem(conch_mem *field, const conch_mem *mem);
/* A clock (NULL: CLOCK_MONOTONIC) and its user_data, which is dropped
   (NULL) with the clock. */
int conch__optset_clock(int64_t (**field)(void *user_data), void **ud,
                        int64_t (*now_ms)(void *user_data), void *user_data);
/* The JSON codec's resolver of Any types, its user_data likewise. */
int conch__optset_resolver(conch_json_resolver *field, void **ud,
                           conch_json_resolver fn, void *user_data);

#endif
