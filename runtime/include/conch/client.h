/*
 * conch - a Connect/gRPC client for C
 *
 * client.h: a client is one target URL and the connections to it.
 *
 * Thread safety: a client and everything hanging off it (calls, metadata it
 * handed out) is used by one thread at a time; the library takes no locks.
 * The one exception is conch_client_wakeup().  Run many clients in many
 * threads to use many cores.
 */
#ifndef CONCH_CLIENT_H
#define CONCH_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <conch/export.h>
#include <conch/mem.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct conch_client conch_client;
typedef struct conch_client_opts conch_client_opts;

/** Wire protocols; all share one core. */
typedef enum conch_protocol {
  CONCH_PROTOCOL_CONNECT = 0,
  CONCH_PROTOCOL_GRPC = 1,
  CONCH_PROTOCOL_GRPC_WEB = 2
} conch_protocol;

/** Message codecs (CONNECT_PROTOCOL.md 0): how messages are serialized. */
typedef enum conch_codec {
  /** Protobuf binary: application/proto, application/connect+proto,
      application/grpc, application/grpc-web+proto. */
  CONCH_CODEC_PROTO = 0,
  /** Canonical proto3 JSON: application/json, application/connect+json,
      application/grpc+json, application/grpc-web+json. */
  CONCH_CODEC_JSON = 1
} conch_codec;

struct ProtobufCMessageDescriptor;

/**
 * Finds the message type of a google.protobuf.Any for the JSON codec:
 * |type_url| is the Any's whole type_url ("type.googleapis.com/pkg.Msg").
 * Returns its descriptor (valid for the client's life), or NULL when
 * unknown.
 */
typedef const struct ProtobufCMessageDescriptor *(*conch_json_resolver)(
    const char *type_url, void *user_data);

/**
 * Message compressions.  Every client knows the built-in ones below; more
 * can be registered (conch_client_opts_add_compression()), and those get
 * ids from CONCH_COMPRESSION_CUSTOM_FIRST on.  An id is what the send
 * compression setters and conch_call_opts.send_compression take.  br,
 * zstd and snappy are in a libconch built with their libraries
 * (CONCH_WITH_BROTLI, _ZSTD, _SNAPPY in conch/features.h); without one,
 * naming it to a setter returns CONCH_ERR_UNSUPPORTED, it is never
 * advertised, a response in it ends the call with internal, and its name
 * is free for conch_client_opts_add_compression().
 */
typedef enum conch_compression {
  /** In per-call options: use the client's setting. */
  CONCH_COMPRESSION_DEFAULT = -1,
  /** "identity": no compression. */
  CONCH_COMPRESSION_IDENTITY = 0,
  /** "gzip": one gzip member (RFC 1952) per message, zlib. */
  CONCH_COMPRESSION_GZIP = 1,
  /** "br": a brotli stream (RFC 7932), libbrotli. */
  CONCH_COMPRESSION_BR = 2,
  /** "zstd": a zstd frame (RFC 8878), libzstd. */
  CONCH_COMPRESSION_ZSTD = 3,
  /** "deflate": the zlib format (RFC 1950, with its header and Adler-32),
      as HTTP's and gRPC's "deflate"; not raw deflate. */
  CONCH_COMPRESSION_DEFLATE = 4,
  /** "snappy": the snappy framing (stream) format: a stream identifier
      chunk, then compressed or uncompressed chunks of at most 64 KiB with
      masked CRC-32C; not raw snappy blocks.  libsnappy. */
  CONCH_COMPRESSION_SNAPPY = 5
} conch_compression;

/** HTTP versions a client may speak (conch_client_opts_set_http_version). */
typedef enum conch_http_version {
  /** http:// tries HTTP/2 with prior knowledge and falls back to HTTP/1.1
      when the server answers in HTTP/1.x; https:// offers ALPN "h2" and
      "http/1.1" and speaks what the server picks. */
  CONCH_HTTP_AUTO = 0,
  /** HTTP/1.1 for both schemes (https:// offers only ALPN "http/1.1"). */
  CONCH_HTTP_1_1 = 1,
  /** HTTP/2 only: a TLS server that does not select "h2" is an error. */
  CONCH_HTTP_2 = 2
} conch_http_version;

/**
 * Creates client options with the defaults: Connect protocol, proto codec,
 * no send
 * compression, gzip accepted, compress-min-bytes 0, receive limit 4 MiB,
 * no send limit, stream window 4 MiB, connection window 16 MiB, header list
 * limit 256 KiB, connect timeout 30 s, TLS peer verification on with the
 * system CA store.  Returns 0, CONCH_ERR_INVALID or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_new(conch_client_opts **out);

/** Frees |opts|.  NULL is accepted. */
CONCH_EXTERN void conch_client_opts_free(conch_client_opts *opts);

/**
 * The allocator for the client and everything it creates.  The struct is
 * copied; its functions and |user_data| are retained for the client's life.
 * NULL restores the C library.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, or a |mem| with a NULL
 * function).
 */
CONCH_EXTERN int conch_client_opts_set_mem(conch_client_opts *opts,
                                           const conch_mem *mem);

/**
 * The wire protocol.  Default CONCH_PROTOCOL_CONNECT.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts| or an unknown protocol).
 */
CONCH_EXTERN int conch_client_opts_set_protocol(conch_client_opts *opts,
                                                conch_protocol protocol);

/**
 * The codec of request and response messages.  Default CONCH_CODEC_PROTO.
 * With CONCH_CODEC_JSON messages travel as canonical proto3 JSON (as
 * connect-go's and connect-es's JSON codecs write them; unknown fields in
 * responses are ignored), a Connect GET carries its uncompressed request
 * percent-encoded in the query (encoding=json), and a response in the other
 * codec ends the call with internal.  The receive and send limits apply to
 * the JSON bytes.  Raw methods (NULL descriptors) pass their bytes through
 * untouched; only the content type says JSON.  Error details stay binary
 * (google.protobuf.Any) in every codec.  Returns 0, CONCH_ERR_INVALID (an
 * unknown codec) or CONCH_ERR_UNSUPPORTED (CONCH_CODEC_JSON in a libconch
 * built without the JSON codec, CONCH_WITH_JSON 0; Connect's error JSON
 * is read all the same).
 */
CONCH_EXTERN int conch_client_opts_set_codec(conch_client_opts *opts,
                                             conch_codec codec);

/**
 * The resolver the JSON codec uses for google.protobuf.Any fields, and
 * |user_data| for it; NULL (the default) for none.  Any of the well-known
 * types (google.protobuf.*) needs none: a URL the resolver does not know
 * whose name is a well-known type resolves to a built-in descriptor.  An
 * Any of any other type that does not resolve cannot be written or read:
 * the send fails, or the response ends the call, with internal.  The
 * resolver runs on the thread that drives the client.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_json_resolver(conch_client_opts *opts,
                                                     conch_json_resolver fn,
                                                     void *user_data);

/**
 * Compression of request messages: a conch_compression or the id of a
 * registered one.  Default identity.  Messages shorter than the
 * compress-min-bytes threshold are sent uncompressed.  The send
 * compression is always advertised as accepted too (first, when the
 * accepted list lacks it): a server may answer in it.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts| or an unknown compression) or
 * CONCH_ERR_UNSUPPORTED (a built-in one this libconch was built without).
 */
CONCH_EXTERN int conch_client_opts_set_send_compression(conch_client_opts *opts,
                                                        conch_compression c);

/**
 * The same by name: "identity", "gzip", "br", "zstd", "deflate", "snappy"
 * or a registered name (case-insensitive).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts| or |name|, or an unknown
 * name) or CONCH_ERR_UNSUPPORTED (a built-in one this libconch was built
 * without).
 */
CONCH_EXTERN int
conch_client_opts_set_send_compression_name(conch_client_opts *opts,
                                            const char *name);

/**
 * The compressions advertised as accepted for responses, most preferred
 * first: a comma-separated list of names ("zstd,br,gzip"; spaces around
 * names are ignored; "" or NULL advertises none, which is identity only).
 * Sent as accept-encoding (Connect unary), connect-accept-encoding
 * (Connect streams) or grpc-accept-encoding (gRPC, gRPC-Web), without
 * q-values.  "identity" is always accepted and never listed; duplicates
 * are dropped.  Default "gzip".  A response in any compression the client
 * knows is decoded whether or not it was advertised; one in a compression
 * it does not know ends the call with internal.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts|, an unknown or malformed
 * name) or CONCH_ERR_UNSUPPORTED (a built-in one this libconch was built
 * without); |opts| is unchanged on error.
 */
CONCH_EXTERN int
conch_client_opts_set_accept_compression(conch_client_opts *opts,
                                         const char *names);

/**
 * Whether gzip responses are accepted (advertised).  Default 1.  On adds
 * gzip to the end of the accepted list when it is missing; off removes it.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN CONCH_DEPRECATED_FOR(conch_client_opts_set_accept_compression) int
conch_client_opts_set_accept_gzip(conch_client_opts *opts, int on);

/**
 * The level a compression compresses with; -1 (the default) is the
 * codec's own default.  Ranges: gzip and deflate 0..9 (zlib; default 6),
 * br 0..11 (brotli quality; default 5, as brotli's 11 is very slow),
 * zstd 1..22 (default 3), snappy and identity none (only -1); a
 * registered compression gets any level >= -1 passed to its compress
 * function.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts|, an unknown |id|, or a level
 * outside its range) or CONCH_ERR_UNSUPPORTED (a built-in one this
 * libconch was built without).
 */
CONCH_EXTERN int conch_client_opts_set_compression_level(conch_client_opts *opts,
                                                         int id, int level);

/** Most compressions a client options object can register. */
#define CONCH_COMPRESSION_CUSTOM_MAX 10
/** The id of the first registered compression. */
#define CONCH_COMPRESSION_CUSTOM_FIRST 6
/** Longest compression name, in bytes. */
#define CONCH_COMPRESSION_NAME_MAX 32

/**
 * Where a compression writes its output (opaque; valid only during the
 * compress or decompress call it was given to).
 */
typedef struct conch_compress_out conch_compress_out;

/**
 * Appends |len| bytes of output.  Decompressing, the sink counts what was
 * written against the receive limit (the limit applies to the decoded
 * size): write in pieces as they are decoded, and stop and return what
 * this returned as soon as it fails.
 *
 * Returns 0, CONCH_ERR_LIMIT (the output passed the receive limit; nothing
 * of this piece was kept), CONCH_ERR_NOMEM, or CONCH_ERR_INVALID (NULL
 * |out|, or NULL |data| with |len| > 0).
 */
CONCH_EXTERN int conch_compress_out_write(conch_compress_out *out,
                                          const void *data, size_t len);

/**
 * A compression of the caller's own, registered by name.  Initialise with
 * CONCH_COMPRESSOR_INIT; the library reads only what falls inside
 * |struct_size|.
 */
typedef struct conch_compressor {
  size_t struct_size;
  /** Its name on the wire: 1..CONCH_COMPRESSION_NAME_MAX characters of an
      HTTP token (letters, digits, "!#$%&'*+-.^_`|~"), no other
      compression's (case-insensitive), not "identity".  Copied. */
  const char *name;
  /**
   * Compresses |len| bytes at |in| (len may be 0) into one self-contained
   * unit the peer's decompressor reads whole, written through |out|.
   * |level| is the level set for it (-1: none set).  Returns 0,
   * CONCH_ERR_NOMEM, or CONCH_ERR_COMPRESSION; any other return is taken
   * as CONCH_ERR_COMPRESSION.  Either way the send fails with internal
   * (resource_exhausted for NOMEM) and nothing of the message is sent.
   */
  int (*compress)(void *user_data, int level, const uint8_t *in, size_t len,
                  conch_compress_out *out);
  /**
   * Decompresses |len| (> 0) bytes at |in|, one message as received,
   * writing the result through |out| in pieces (so that the receive limit
   * stops a decompression bomb early).  Returns 0, CONCH_ERR_COMPRESSION
   * (corrupt or truncated input: the call ends with internal),
   * CONCH_ERR_NOMEM, or the error conch_compress_out_write() returned
   * (CONCH_ERR_LIMIT: the call ends with resource_exhausted).  Once the
   * sink reported CONCH_ERR_LIMIT that is the outcome whatever this
   * returns; any other return is taken as CONCH_ERR_COMPRESSION.
   */
  int (*decompress)(void *user_data, const uint8_t *in, size_t len,
                    conch_compress_out *out);
  /** Passed to both; retained for the life of the options and of every
      client made from them. */
  void *user_data;
  void *reserved[4];
} conch_compressor;

#define CONCH_COMPRESSOR_INIT                                                  \
  {                                                                            \
    sizeof(conch_compressor), NULL, NULL, NULL, NULL, { 0 }                    \
  }

/**
 * Registers a compression of the caller's own on |opts|, under |comp|->name
 * (the struct and the name are copied; the functions and user_data are
 * retained).  Clients made from |opts| then decode it in responses, and
 * may send with it or advertise it (by id or name, through the setters
 * above).  Its functions run on the thread that drives the client, one
 * call at a time per client; they may run for several clients at once.
 * |id| (may be NULL) receives its id, CONCH_COMPRESSION_CUSTOM_FIRST and
 * up in the order of registration.  The name of a built-in compression
 * the build lacks is free ("zstd" without CONCH_WITH_ZSTD).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts| or |comp|, a |struct_size|
 * too small, a NULL function, or a bad or taken name), or CONCH_ERR_LIMIT
 * (CONCH_COMPRESSION_CUSTOM_MAX are registered already).
 */
CONCH_EXTERN int conch_client_opts_add_compression(conch_client_opts *opts,
                                                   const conch_compressor *comp,
                                                   int *id);

/**
 * Messages below |bytes| are not compressed.  Default 0.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int
conch_client_opts_set_compress_min_bytes(conch_client_opts *opts, size_t bytes);

/** The longest URL (path and query) a Connect GET may have; a longer one
    goes as POST.  0 (default): no limit.  Proxies and CDNs often refuse
    request lines over 8 KiB; 4096 is safe.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_get_max_url(conch_client_opts *opts,
                                                   size_t bytes);

/**
 * zlib level for gzip, -1 (default, 6) or 0..9; the same as
 * conch_client_opts_set_compression_level() for CONCH_COMPRESSION_GZIP.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |level| outside -1..9).
 */
CONCH_EXTERN int conch_client_opts_set_gzip_level(conch_client_opts *opts,
                                                  int level);

/**
 * Largest response message accepted, after decompression; 0 = no limit.
 * A larger one ends the call with resource_exhausted before it is buffered.
 * Default 4 MiB.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_recv_limit(conch_client_opts *opts,
                                                  size_t bytes);

/**
 * Largest request message sent, after compression; 0 = no limit (the
 * envelope format caps at 4 GiB - 1).  A larger one fails the call with
 * resource_exhausted; nothing of it is sent.  Default 0.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_send_limit(conch_client_opts *opts,
                                                  size_t bytes);

/**
 * HTTP/2 flow-control windows.  Defaults 4 MiB (stream), 16 MiB (conn).
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, a window under 65535 or over
 * 2^31-1).
 */
CONCH_EXTERN int conch_client_opts_set_windows(conch_client_opts *opts,
                                               uint32_t stream_window,
                                               uint32_t conn_window);

/**
 * Largest response header (or trailer) list accepted.  Default 256 KiB.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |bytes| under 1024).
 */
CONCH_EXTERN int conch_client_opts_set_max_header_list(conch_client_opts *opts,
                                                       uint32_t bytes);

/**
 * Size of the connection pool.  Calls are multiplexed on a connection up
 * to the server's SETTINGS_MAX_CONCURRENT_STREAMS; beyond that a new
 * connection opens, up to |n|; when all are full, calls wait for a slot on
 * the least loaded one (their deadlines running).  Default 1: one
 * connection, calls beyond the limit wait; over HTTP/1.1 (one call per
 * connection) the default is 16.  1..1024.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |n| outside 1..1024).
 */
CONCH_EXTERN int conch_client_opts_set_max_connections(conch_client_opts *opts,
                                                       int n);

/**
 * The HTTP version.  Default CONCH_HTTP_AUTO: "http://" URLs speak HTTP/2
 * with prior knowledge (h2c), and a server that answers in HTTP/1.x
 * instead is spoken to in HTTP/1.1 (see below); "https://" URLs offer ALPN
 * "h2" and "http/1.1" and use what the server selects (no ALPN at all
 * counts as HTTP/1.1).  CONCH_HTTP_2 keeps to HTTP/2: a TLS server that
 * does not select "h2" fails the connection (unavailable), and so does a
 * cleartext server that does not speak h2c.  CONCH_HTTP_1_1 speaks
 * HTTP/1.1 for both schemes.
 *
 * Finding out over cleartext costs nothing extra with an HTTP/2 server and
 * one round trip, once per client, with an HTTP/1.x one: no request is
 * sent on a new connection before the server's first bytes (its SETTINGS)
 * arrive; when those are an HTTP/1.x status line (the server's answer to
 * the HTTP/2 preface), that connection is dropped, the client remembers
 * that the target speaks HTTP/1.1, and the waiting calls go out over
 * HTTP/1.1 on new connections without failing.  gRPC calls, which need
 * HTTP/2, then fail with unavailable, saying why.
 *
 * Over HTTP/1.1:
 *  - Connect and gRPC-Web work for every call shape.  Bidi streams work
 *    half-duplex (send everything, close, read); a server may also answer
 *    while the request streams, but that is up to the server.
 *  - gRPC needs HTTP/2 trailers: with CONCH_HTTP_1_1 every gRPC call ends
 *    with unimplemented; with CONCH_HTTP_AUTO a gRPC client still offers
 *    only "h2" over TLS.
 *  - A connection carries one call at a time, and is kept alive for the
 *    next one when the response was complete and neither side said
 *    "Connection: close".  Concurrent calls open more connections: the
 *    pool holds conch_client_opts_set_max_connections() of them, or 16
 *    when that was not set.
 *  - A request that got no response byte on a reused connection that the
 *    server closed (the keep-alive race) is retried once on a new one,
 *    like a refused HTTP/2 stream.
 *  - Canceling a call, or its deadline, closes its connection: HTTP/1.1
 *    cannot abandon one request otherwise.
 *  - Keepalive (PING) does not exist in HTTP/1.1: the keepalive setting
 *    does nothing there.  Flow-control windows still bound what is read
 *    ahead of a slow consumer.
 *  - Requests whose body is at hand when they are sent (up to about 1 MiB;
 *    unary and server-streaming calls) carry Content-Length; others are
 *    sent chunked.
 *
 * Returns 0 or CONCH_ERR_INVALID.
 */
CONCH_EXTERN int conch_client_opts_set_http_version(conch_client_opts *opts,
                                                    conch_http_version v);

/**
 * Name resolution.  A host that is an IP address is used as it is; a
 * host name is looked up without blocking the thread that drives the
 * client: by default with getaddrinfo() on a few threads of the client's
 * own (at most 8 at once, only while lookups are pending; the rest wait
 * their turn), or by the caller's resolver set here (uv_getaddrinfo(), a
 * c-ares channel, a cache...).  The lookup starts when a connection is
 * needed, at the end of a turn of the client, never inside one of its
 * callbacks into nghttp2; the connect timeout counts from its start, and
 * a call's deadline covers it as it covers connecting.  Each new
 * connection looks the name up again (no cache); with a load-balancing
 * policy (conch_client_opts_set_lb_policy()) the client looks it up once
 * and keeps every address it answered, looking it up again as that
 * function says.
 *
 * |start| begins looking up |host| (without brackets) and |port| (a
 * number, as text) for |req| and returns 0, or non-zero when it cannot
 * (the connection then fails with unavailable, and no answer may follow).
 * After 0, the resolver calls conch_resolve_done(req, ...) exactly once,
 * on the thread that drives the client: from inside |start| itself, or
 * later from its own loop.  |cancel| (may be NULL) tells that the client
 * no longer wants the answer (the connection failed or the client was
 * freed); conch_resolve_done() must still be called once for |req|, and
 * may then come after the client is freed.
 */
typedef struct conch_resolve_req conch_resolve_req;
typedef struct conch_resolver {
  int (*start)(conch_resolve_req *req, const char *host, const char *port,
               void *user_data);
  void (*cancel)(conch_resolve_req *req, void *user_data);
  void *user_data;
} conch_resolver;

/**
 * Uses |r| (copied) to look host names up; NULL restores the default.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, or |r| without |start|).
 */
CONCH_EXTERN int conch_client_opts_set_resolver(conch_client_opts *opts,
                                                const conch_resolver *r);

struct addrinfo;

/**
 * The answer to |req|: the addresses in |res| (a getaddrinfo() list, read
 * and copied here: its IPv4 and IPv6 entries are tried in order), or, with
 * |res| NULL or holding none, a failure described by |error| (may be
 * NULL), with which the connection fails (unavailable).  |req| is invalid
 * afterwards.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |req|).
 */
CONCH_EXTERN int conch_resolve_done(conch_resolve_req *req,
                                    const struct addrinfo *res,
                                    const char *error);

/**
 * The clock the client reads for deadlines, timeouts and keepalive:
 * |now_ms| returns milliseconds that never go back (any origin), called on
 * the driving thread with |user_data|.  NULL (the default) is
 * CLOCK_MONOTONIC.  For simulations and tests that move time themselves:
 * conch_client_run() still waits in real time, so such a caller drives the
 * client with hooks (conch_client_set_io_hooks) and calls
 * conch_client_on_timer() when its own time reaches the timer it was told.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_clock(conch_client_opts *opts,
                                             int64_t (*now_ms)(void *user_data),
                                             void *user_data);

/**
 * Time allowed for TCP connect plus TLS handshake.  Default 30000 ms.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |ms| <= 0).
 */
CONCH_EXTERN int conch_client_opts_set_connect_timeout(conch_client_opts *opts,
                                                       long ms);

/**
 * Keepalive: after |interval_ms| without anything read on a connection that
 * has calls running, a PING is sent; without its ACK within |timeout_ms| the
 * connection is taken for dead and its calls end with unavailable.
 * |interval_ms| 0 (the default) turns it off; otherwise it is at least
 * 1000 ms (gRPC clamps to 10 s; servers may answer pings more often than
 * every few minutes with GOAWAY ENHANCE_YOUR_CALM "too_many_pings", after
 * which the client doubles its interval for new connections).
 * |timeout_ms| 0 means 20000.  HTTP/1.1 has no PING: there the setting does
 * nothing.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, a negative value,
 * |interval_ms| between 1 and 999).
 */
CONCH_EXTERN int conch_client_opts_set_keepalive(conch_client_opts *opts,
                                                 long interval_ms,
                                                 long timeout_ms);

/**
 * The user-agent header.  Copied.  Default "conch/<version>".
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|); CONCH_ERR_HEADER (a byte
 * outside printable ASCII, nothing changed); CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_user_agent(conch_client_opts *opts,
                                                  const char *ua);

/**
 * Trust the CA certificates in the PEM file |path| instead of the system
 * store.  Copied.  NULL restores the system store.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|) or CONCH_ERR_NOMEM. The file is
 * read when a connection is made, not here.
 */
CONCH_EXTERN int conch_client_opts_set_ca_file(conch_client_opts *opts,
                                               const char *path);

/**
 * Trust the CA certificates in the PEM text |pem| (|len| bytes, copied).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|, or NULL |pem| with |len| > 0) or
 * CONCH_ERR_NOMEM. The PEM is parsed when a connection is made, not here.
 */
CONCH_EXTERN int conch_client_opts_set_ca_pem(conch_client_opts *opts,
                                              const char *pem, size_t len);

/**
 * Present a client certificate: PEM files |cert_path| and |key_path|
 * (copied; |key_path| NULL = the key is in |cert_path|).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|, a key without a certificate) or
 * CONCH_ERR_NOMEM. The files are read when a connection is made, not here.
 */
CONCH_EXTERN int conch_client_opts_set_client_cert_file(conch_client_opts *opts,
                                                        const char *cert_path,
                                                        const char *key_path);

/**
 * Present a client certificate given as PEM text (copied).
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|, a certificate without a key or a
 * key without a certificate) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_client_cert_pem(conch_client_opts *opts,
                                                       const char *cert,
                                                       size_t cert_len,
                                                       const char *key,
                                                       size_t key_len);

/**
 * Verify the server certificate chain and its name (DNS name or IP SAN).
 * Default 1.  Turning it off is for tests only.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_tls_verify(conch_client_opts *opts,
                                                  int on);

/** The longest Unix socket path, plus one (sun_path of Linux). */
#define CONCH_UNIX_PATH_MAX 108

/**
 * Connect to the Unix domain socket at |path| instead of the URL's host and
 * port (as curl's CURLOPT_UNIX_SOCKET_PATH): the URL still gives the scheme
 * (http:// h2c, https:// TLS over the socket, its host checked against the
 * certificate), the :authority / Host and the path prefix.  |path| is a
 * file system path of 1 to CONCH_UNIX_PATH_MAX - 1 bytes, copied; NULL
 * goes back to TCP.  A "unix:" URL (conch_client_new()) does the same.
 *
 * Once connected, the server's credentials (SO_PEERCRED) are checked: its
 * effective uid must be the client's or root's, else the connection fails
 * with unavailable (CONCH_ERR_CONNECT, "peer uid N is neither ours nor
 * root") and nothing is sent; conch_client_opts_set_unix_peer_any() lifts
 * the check.  Returns 0, CONCH_ERR_INVALID (NULL |opts|, empty or too long
 * |path|) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_unix_socket(conch_client_opts *opts,
                                                   const char *path);

/**
 * |on| 1: accept a Unix socket server of any uid (see
 * conch_client_opts_set_unix_socket()).  Default 0.  Returns 0 or
 * CONCH_ERR_INVALID.
 */
CONCH_EXTERN int conch_client_opts_set_unix_peer_any(conch_client_opts *opts,
                                                     int on);

/* ---- Load balancing ----------------------------------------------------- */

/** How a client spreads calls over the addresses of its target
 * (conch_client_opts_set_lb_policy). */
typedef enum conch_lb_policy {
  /** Today's behaviour, and the default: one pool of connections, each new
   * connection looks the host up again and tries its addresses in order;
   * no per-address state, no backoff. */
  CONCH_LB_NONE = 0,
  /** gRPC's pick_first: the addresses of the target (every one the name
   * resolves to, or the static targets), in order; calls go to the first
   * one that connects and stay there while its connection lives; when it
   * fails, calls not sent yet move to the next address that is not
   * backing off. */
  CONCH_LB_PICK_FIRST = 1,
  /** gRPC's round_robin: the client connects to every address (at the
   * first call, when a lookup adds one, and again at the first call after
   * an address's backoff once its connection went), and each call goes to
   * the next address in turn whose connection is up and has room (and,
   * with a health check, that is serving); only while none is up does a
   * call wait on one still connecting.  An address that does not answer
   * its connect takes no calls while another is up. */
  CONCH_LB_ROUND_ROBIN = 2
} conch_lb_policy;

/**
 * The load-balancing policy.  With CONCH_LB_PICK_FIRST or
 * CONCH_LB_ROUND_ROBIN the client keeps per-address state: a host name is
 * looked up once (then again when every address is failing, and at most
 * every 30 s while calls are made), each address has connections of its
 * own (up to conch_client_opts_set_max_connections() per address) and its
 * own reconnect backoff (conch_client_opts_set_backoff()): after a failed
 * connection attempt the address takes no new connection until its backoff
 * has passed.  While every address is backing off, new calls fail at once
 * with unavailable ("all N addresses of TARGET are failing ..."), as
 * gRPC's calls that do not wait for ready.  Calls waiting on a connection
 * that fails before sending them move to another address; calls already
 * sent end with the connection's error (refused streams are sent again, as
 * always); so do calls waiting on the connections of an address whose
 * health check turns NOT_SERVING.  Setting static targets (conch_client_opts_set_targets()) or a
 * health check without a policy means CONCH_LB_PICK_FIRST.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, an unknown policy).
 */
CONCH_EXTERN int conch_client_opts_set_lb_policy(conch_client_opts *opts,
                                                 conch_lb_policy policy);

/**
 * A static list of |n| addresses for the client's target instead of
 * looking the URL's host up: each "IPv4:port", "[IPv6]:port" or
 * "unix:PATH" (a Unix domain socket, with the peer check of
 * conch_client_opts_set_unix_socket()).  The URL still gives the scheme,
 * the :authority / Host (and the TLS name) and the path prefix.  Copied;
 * |n| 0 (|targets| may then be NULL) removes the list.  Without a policy
 * set, the client uses CONCH_LB_PICK_FIRST over the list.  1..1024
 * addresses.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts|, NULL |targets| with |n| > 0,
 * more than 1024, or an entry that is not one of the forms above: a host
 * name, a missing or bad port (1..65535), an empty or too long socket
 * path; nothing changed) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_targets(conch_client_opts *opts,
                                               const char *const *targets,
                                               size_t n);

/**
 * The reconnect backoff of each address, as gRPC's connection backoff:
 * after the first failed attempt an address waits |initial_ms|, and each
 * further failure multiplies the wait by |multiplier|, up to |max_ms|;
 * each wait is spread by +/- |jitter| of itself at random.  The wait counts
 * from the start of the failed attempt; an address whose connection became
 * ready starts again from |initial_ms|.  Defaults 1000 ms, 1.6, 0.2 and
 * 120000 ms.  Only with a policy (conch_client_opts_set_lb_policy()).
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |initial_ms| < 1,
 * |multiplier| < 1, |jitter| outside 0..1, |max_ms| < |initial_ms|).
 */
CONCH_EXTERN int conch_client_opts_set_backoff(conch_client_opts *opts,
                                               long initial_ms,
                                               double multiplier,
                                               double jitter, long max_ms);

/**
 * The random numbers of the backoff's jitter: |fn| returns a number in
 * [0, 1) each time it is called with |user_data|, on the driving thread.
 * NULL (the default) is a generator of the client's own.  For tests that
 * need exact reconnect times (with conch_client_opts_set_clock()).
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_client_opts_set_backoff_random(
    conch_client_opts *opts, double (*fn)(void *user_data), void *user_data);

/**
 * Health-aware picking: each address with a ready connection is watched
 * with grpc.health.v1.Health/Watch for |service| ("" is the server as a
 * whole; copied), a server-streaming call on that connection, in the
 * client's protocol.  While the last status it reported is not SERVING
 * (NOT_SERVING, SERVICE_UNKNOWN, UNKNOWN) the address takes no new calls;
 * calls already on it go on; when it reports SERVING again it takes calls
 * again.  Before its first answer an address counts as serving (no call
 * waits for the watch), and so does one whose server does not serve health
 * (the Watch ends with unimplemented), as in gRPC.  When the Watch ends
 * otherwise, the next ready connection of the address starts a new one.
 * When no address is serving, calls fail at once with unavailable, saying
 * so.  Without a policy set this means CONCH_LB_PICK_FIRST.  NULL (the
 * default) turns it off.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts|, |service| over 1024 bytes) or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_opts_set_health_check(conch_client_opts *opts,
                                                    const char *service);

/**
 * Creates a client for |url|: "http://host[:port][/prefix]" (h2c with prior
 * knowledge) or "https://host[:port][/prefix]" (TLS, ALPN h2 or http/1.1;
 * see conch_client_opts_set_http_version()).  Hosts may be
 * names, IPv4 literals or bracketed IPv6 literals.  "unix:PATH" is h2c
 * (or HTTP/1.1 when set) over the Unix domain socket PATH (the rest of the
 * URL, no prefix), with :authority "localhost" and the peer check of
 * conch_client_opts_set_unix_socket(); it overrides a socket path set in
 * |opts|.  |opts| may be NULL for
 * the defaults; it is copied and may be freed afterwards.  No connection is
 * made until the first call.
 *
 * Returns 0, CONCH_ERR_INVALID, CONCH_ERR_URL, CONCH_ERR_TLS (bad CA or
 * certificate material), CONCH_ERR_IO (no wakeup descriptor) or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_client_new(conch_client **out, const char *url,
                                  const conch_client_opts *opts);

/**
 * Frees |c| and every call made on it.  Calls still running end with
 * canceled, and their on_close runs before this returns.  Afterwards no call
 * handle of |c| may be used or freed.  NULL is accepted.  From inside a
 * callback of |c| it does nothing; use it after the callback returned.
 */
CONCH_EXTERN void conch_client_free(conch_client *c);

/**
 * Turns keepalive on for |c| as conch_client_opts_set_keepalive() would,
 * unless the options |c| was made with chose a keepalive setting themselves
 * (on or off): for libraries that take a caller's options and want PINGs by
 * default.  Applies to connections opened afterwards; call it before the
 * first call.  Returns 0 (applied or left as the caller chose) or
 * CONCH_ERR_INVALID.
 */
CONCH_EXTERN int conch_client_keepalive_default(conch_client *c,
                                                long interval_ms,
                                                long timeout_ms);

/** The allocator of |c|: never NULL. */
CONCH_EXTERN const conch_mem *conch_client_mem(const conch_client *c);

/** Returns the protocol of |c|. */
CONCH_EXTERN conch_protocol conch_client_protocol(const conch_client *c);

/** Returns the codec of |c|. */
CONCH_EXTERN conch_codec conch_client_codec(const conch_client *c);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_CLIENT_H */
