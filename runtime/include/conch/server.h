/*
 * conch - a Connect/gRPC client for C
 *
 * server.h: the server core.  A conch_server answers Connect, gRPC and
 * gRPC-Web calls (proto and JSON codecs, all four stream kinds) over
 * HTTP/2 and HTTP/1.1, in cleartext or TLS, on TCP or Unix sockets it
 * listens on, or on connections the caller accepted and hands over (with a
 * transport of its own, e.g. in memory).
 *
 *  - Cleartext: a connection whose first bytes are the HTTP/2 preface
 *    speaks HTTP/2 (h2c with prior knowledge); anything else is read as
 *    HTTP/1.x.  TLS (conch_server_opts_set_tls()): ALPN "h2" or
 *    "http/1.1" decides, and without ALPN the first bytes do.
 *  - HTTP/1.1 carries Connect (unary, GET and streams) and gRPC-Web, as
 *    connect-go serves them: keep-alive, pipelined requests (answered in
 *    order), chunked request and response bodies, Expect: 100-continue,
 *    Connection: close, HTTP/1.0.  A gRPC request over HTTP/1.1 is
 *    answered too, its trailers as chunked trailers (which few clients
 *    read: gRPC is an HTTP/2 protocol).
 *    A request the HTTP/1.1 layer cannot take is answered there, and the
 *    connection closes: malformed (400), a method other than GET, HEAD
 *    and POST (405), a target over 8 KiB (414), a header section over
 *    32 KiB or 100 fields (431), HTTP/2.0 in a request line (505), an
 *    expectation other than 100-continue (417).
 *
 * `conch serve` (tools/conch/serve_call.c) is built on this core.  Event
 * loops: adapters/libuv.h and adapters/libevent.h drive a server as they
 * drive a client (conch_uv_attach_server(), conch_event_attach_server()).
 * Typed handler tables for a service come from protoc-gen-conch (the
 * server half of every *.conch.h: <service>_Handlers and
 * <service>__register()).
 *
 * The shape follows the client (client.h, call.h, io.h):
 *
 *  - Options: conch_server_opts_new() and its setters, then
 *    conch_server_new().  The allocator hooks (conch_mem) cover the
 *    server, nghttp2, zlib & co and protobuf-c.
 *  - Methods: conch_server_add_method() registers a conch_method (the
 *    struct generated stubs already provide) with a conch_server_handler.
 *    A unary method marked CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS also takes
 *    Connect GET requests (the request in the query: encoding, message,
 *    base64, compression); GET of any other method is 405, as in
 *    connect-go.
 *  - Calls: for every request to a registered method, on_call runs with a
 *    conch_rpc.  The handler answers with conch_rpc_send() (any number of
 *    messages for server and bidi streams, one for unary and client
 *    streams) and ends with conch_rpc_finish() and a conch_status (error
 *    details included).  Request messages arrive through on_message (or
 *    on_raw_message for raw methods), the end of the requests through
 *    on_half_close; or, for a handler with on_recv_ready (pull mode), the
 *    handler takes them with conch_rpc_recv() when it wants them.
 *  - Every call the handler saw ends for it exactly once: either the
 *    handler finishes it (conch_rpc_finish() returned 0), or on_cancel
 *    runs (the client canceled, the deadline passed, the request broke a
 *    limit or the protocol, the connection was lost, the drain timeout
 *    passed, or the server was freed).  After either, |rpc| must not be
 *    used again.
 *  - Before a method: a gate (conch_server_opts_set_gate()) sees every
 *    request and may refuse it; plain routes (conch_server_add_route())
 *    answer paths that are no RPC, such as a health check, and plain HTTP
 *    handlers (conch_server_add_http()) stream requests and responses of
 *    their own (file up- and downloads).  Connections
 *    are filtered (accept filter), limited (conch_server_opts_set_max_conns()),
 *    timed (header, body and idle timeouts) and held to a budget of
 *    buffered request bytes (see "Limits" below).
 *  - Driving: as a client is driven (io.h): io hooks with
 *    conch_server_on_io() / conch_server_on_timer(), or pull with
 *    conch_server_pollfds() / conch_server_timeout_ms() /
 *    conch_server_process(), or blocking turns with conch_server_run().
 *
 * Limits.  A server is bounded from the start, with the options' defaults
 * (conch_server_new(s, NULL) included), so that a server exposed to
 * strangers cannot be held or filled by them:
 *
 *    header timeout   10 s   a connection must send a request header
 *                            block (after its TLS handshake and preface)
 *                            within it, and each header block must end
 *                            within it: idle prefaces and slowloris
 *                            headers are cut off
 *    body timeout     60 s   a unary request body, or each message of a
 *                            stream, once begun, must arrive within it
 *    idle timeout     60 s   a connection without a call gets GOAWAY
 *    connections      1024   past it (or when accept() runs out of
 *                            descriptors), an idle connection makes room
 *                            for the new one
 *    buffered bytes   32 MiB of requests held per connection, 64 MiB in
 *                            all, of which the last eighth is kept for
 *                            small requests (which, past the total, take
 *                            the place of the largest holders)
 *    receive limit    4 MiB  per request message
 *
 * Each has its setter, which documents it.  0 turns a limit or timeout
 * off: a server without limits (only for trusted peers, e.g. a benchmark)
 * sets 0 through conch_server_opts_set_header_timeout(), _body_timeout(),
 * _idle_timeout(), _max_conns() and _buffer_limits(0, 0), and
 * conch_server_opts_set_recv_limit(0).  conch serve sets its own values
 * (tools/conch/serve_call.c).  conch_server_stats_get() shows what the
 * limits hold and what they shed.
 *
 * Streams that end early.  conch_rpc_send() refuses a response while the
 * call's send buffer is full (CONCH_ERR_AGAIN: nothing was queued), and a
 * handler that stops there and finishes would tell the client OK about a
 * stream it cut short.  So a response refused and not sent again by the
 * finish makes an OK finish end the call with internal instead (see
 * conch_rpc_finish()).  The easy way to send a stream is to let the server
 * pull the responses from a source as the client takes them:
 * conch_rpc_send_from() (typed in the stubs: p__s__m_rpc_stream()), which
 * never refuses and ends the call when the source says so; the handler
 * that sends by itself waits for on_send_ready after CONCH_ERR_AGAIN and
 * sends the refused response again (examples/greet/greet_server.c shows
 * both).
 *
 * Thread safety: a server and everything hanging off it (calls, their
 * metadata) is used by one thread at a time; the library takes no locks.
 * Handlers run on that thread during the server's turns (on_io, on_timer,
 * process, run, and conch_server_free()), never from inside the conch_rpc_*
 * functions.
 *
 * A libconch built without the server (CONCH_WITH_SERVER 0 in
 * conch/features.h, no CONCH_FEATURE_SERVER in conch_version()->features)
 * still has every function below, so that code written against this
 * header (the server half of generated stubs, the adapters) links; none
 * can make a server: conch_server_opts_new() and conch_server_new() return
 * CONCH_ERR_UNSUPPORTED with |*out| NULL, and so does every other function
 * that returns a CONCH_ERR_*.  Likewise a build without the JSON codec
 * answers JSON requests 415, and one without br, zstd or snappy does not
 * accept those (conch/features.h).
 */
#ifndef CONCH_SERVER_H
#define CONCH_SERVER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include <conch/call.h>
#include <conch/client.h>
#include <conch/descriptor.h>
#include <conch/export.h>
#include <conch/features.h>
#include <conch/io.h>
#include <conch/mem.h>
#include <conch/metadata.h>
#include <conch/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct conch_server conch_server;
typedef struct conch_server_opts conch_server_opts;
typedef struct conch_rpc conch_rpc;

/**
 * Creates server options with the defaults: the C library's allocator,
 * receive limit 4 MiB per message (after decompression), header list
 * limit 64 KiB, 100 concurrent streams per connection, gzip, br, zstd,
 * deflate and snappy accepted (those of them the build has; identity
 * always), response messages of 1 KiB and more compressed in the request's
 * compression when the client accepts it (smaller ones go out plain:
 * conch_server_opts_set_compress_min_bytes()); and the limits at the top
 * of this file: header
 * timeout 10 s, body timeout 60 s, idle timeout 60 s, at most 1024
 * connections, 32 MiB of buffered request bytes per connection and 64 MiB
 * in all.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out|), CONCH_ERR_NOMEM, or
 * CONCH_ERR_UNSUPPORTED (a libconch built without the server; |*out| is
 * then NULL).
 */
CONCH_EXTERN int conch_server_opts_new(conch_server_opts **out);
/** Frees |opts|.  NULL is accepted. */
CONCH_EXTERN void conch_server_opts_free(conch_server_opts *opts);
/**
 * The allocator for the server and everything it creates (copied; its
 * functions and user_data are retained for the server's life).  NULL
 * restores the C library.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, or a |mem| with a NULL
 * function).
 */
CONCH_EXTERN int conch_server_opts_set_mem(conch_server_opts *opts,
                                           const conch_mem *mem);
/**
 * Largest request message accepted, after decompression (the compressed
 * size counts too); 0 = no limit.  A larger one ends the call with
 * resource_exhausted before it is buffered.  Default 4 MiB.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_recv_limit(conch_server_opts *opts,
                                                  size_t bytes);
/**
 * Largest request header list accepted (names and values plus 32 bytes a
 * field, as HTTP/2 counts), advertised as SETTINGS_MAX_HEADER_LIST_SIZE.
 * A call with a larger one ends with resource_exhausted before its
 * handler sees it.  Default 64 KiB.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |bytes| under 1024).
 */
CONCH_EXTERN int conch_server_opts_set_max_header_list(conch_server_opts *opts,
                                                       uint32_t bytes);
/**
 * SETTINGS_MAX_CONCURRENT_STREAMS of each connection.  Default 100.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |n| 0).
 */
CONCH_EXTERN int conch_server_opts_set_max_streams(conch_server_opts *opts,
                                                   uint32_t n);
/**
 * The send buffer of each call: once this many bytes of its responses
 * wait to be sent, conch_rpc_send() returns CONCH_ERR_AGAIN (one message
 * is always taken when nothing waits, whatever its size).  Default
 * 256 KiB.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, |bytes| 0).
 */
CONCH_EXTERN int conch_server_opts_set_send_buffer(conch_server_opts *opts,
                                                   size_t bytes);
/**
 * Connections without a call for |ms| get GOAWAY and close (a client
 * opens a new one when it needs one).  Default 60000 (60 s); 0: they
 * stay however long they are idle.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, negative |ms|).
 */
CONCH_EXTERN int conch_server_opts_set_idle_timeout(conch_server_opts *opts,
                                                    long ms);
/**
 * The clock the server reads for deadlines, timeouts (idle, header, body,
 * drain) and its other timers: |now_ms| returns milliseconds that never go
 * back (any origin), called on the driving thread with |user_data|.  NULL
 * (the default) is CLOCK_MONOTONIC.  For simulations and tests that move
 * time themselves: conch_server_run() still waits in real time, so such a
 * caller drives the server with hooks (conch_server_set_io_hooks) and
 * calls conch_server_on_timer() when its own time reaches the timer it was
 * told.  The Date header of HTTP/1.1 answers stays on the wall clock.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_clock(conch_server_opts *opts,
                                             int64_t (*now_ms)(void *user_data),
                                             void *user_data);
/**
 * How long conch_server_shutdown() lets calls run: when |ms| have passed,
 * every call a handler still holds ends (the handler gets on_cancel with
 * unavailable, the client unavailable "the server is shutting down"), and
 * after |ms| more every connection still open is closed.  0 (the default)
 * waits for the handlers however long they take.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, negative |ms|).
 */
CONCH_EXTERN int conch_server_opts_set_drain_timeout(conch_server_opts *opts,
                                                     long ms);
/**
 * The compressions accepted in requests and used for responses: a
 * comma-separated list of built-in names and names registered with
 * conch_server_opts_add_compression() ("gzip,zstd"; "" or NULL:
 * identity only), most preferred first.  A request in a compression
 * outside the list ends with unimplemented.  Default
 * "gzip,br,zstd,deflate,snappy", less those the build lacks.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts|, an unknown or malformed
 * name) or CONCH_ERR_UNSUPPORTED (a built-in this libconch was built
 * without, e.g. "br" without CONCH_WITH_BROTLI); |opts| unchanged on
 * error.
 */
CONCH_EXTERN int conch_server_opts_set_compression(conch_server_opts *opts,
                                                   const char *names);
/**
 * Serve TLS: every connection of the server (each listener's and every
 * adopted one, whatever its transport) speaks TLS with the certificate
 * chain in the PEM file |cert_file| and the private key in the PEM file
 * |key_file| (NULL: the key is in |cert_file|).  A server serves either
 * TLS or cleartext; for both, run two servers.  TLS 1.2 or newer; under
 * TLS 1.2 only ECDHE/DHE key exchange with AEAD suites (which are also
 * the ones HTTP/2 allows); no renegotiation.  ALPN selects "h2" when the
 * client offers it, else "http/1.1"; a client offering neither gets the
 * no_application_protocol alert, and one without ALPN is served as
 * cleartext is (HTTP/2 with prior knowledge, else HTTP/1.1).  Client
 * certificates are asked for only with conch_server_opts_set_tls_client_ca*()
 * (they are kept when this changes).  The files are read now, to check them,
 * and again by conch_server_new().  |cert_file| NULL turns TLS off.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|, a key without certificate);
 * CONCH_ERR_TLS (a file cannot be read or parsed, the key does not match
 * the certificate, an encrypted key: conch_server_opts_tls_error() says
 * which; TLS is then off) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_opts_set_tls(conch_server_opts *opts,
                                           const char *cert_file,
                                           const char *key_file);
/**
 * conch_server_opts_set_tls() with PEM text (copied): the certificate
 * chain |cert| and the key |key| (NULL: in |cert|); a length 0 means
 * NUL-terminated.  |cert| NULL turns TLS off.
 *
 * Returns what conch_server_opts_set_tls() returns.
 */
CONCH_EXTERN int conch_server_opts_set_tls_pem(conch_server_opts *opts,
                                               const char *cert,
                                               size_t cert_len,
                                               const char *key,
                                               size_t key_len);
/**
 * Client certificates (mutual TLS): trust the CA certificates in the PEM
 * file |path| to verify them.  Setting a CA (this or
 * conch_server_opts_set_tls_client_ca_pem(), or both: both are trusted)
 * makes the server ask every TLS client for a certificate, names these CAs
 * as the acceptable issuers, and verify the chain (issuer, validity
 * dates, key usage for client authentication) against them only, never
 * against the system store.  A certificate that does not verify ends the
 * handshake with OpenSSL's alert for the reason (unknown_ca,
 * certificate_expired, bad_certificate, unsupported_certificate...); so
 * does a missing one while certificates are required
 * (conch_server_opts_set_tls_client_cert_required(), the default):
 * certificate_required under TLS 1.3, handshake_failure under TLS 1.2.
 * The name in the certificate is not checked: a handler decides what a
 * verified subject may do (conch_rpc_peer_cert_subject()).  Copied; the
 * file is read now, to check it, and again by conch_server_new().  NULL
 * drops the file's CAs.  A server with CAs but without TLS is refused by
 * conch_server_new().
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|); CONCH_ERR_TLS (the file
 * cannot be read or holds no certificate: conch_server_opts_tls_error()
 * says which; the previous file stays) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_opts_set_tls_client_ca_file(
    conch_server_opts *opts, const char *path);
/**
 * conch_server_opts_set_tls_client_ca_file() with PEM text (|len| bytes,
 * 0: NUL-terminated; copied): one or more certificates.  NULL drops the
 * PEM's CAs.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |opts|); CONCH_ERR_TLS (no
 * certificate, or one that does not parse: conch_server_opts_tls_error()
 * says which; the previous PEM stays) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_opts_set_tls_client_ca_pem(
    conch_server_opts *opts, const char *pem, size_t len);
/**
 * With client CAs set: |required| non-zero (the default) ends the
 * handshake of a client that sends no certificate; 0 lets it in without
 * one (conch_rpc_peer_cert_subject() is then NULL), while a certificate
 * that is sent must still verify.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_tls_client_cert_required(
    conch_server_opts *opts, int required);
/** Why the last conch_server_opts_set_tls*() failed ("" when it did not;
    never NULL). */
CONCH_EXTERN const char *conch_server_opts_tls_error(
    const conch_server_opts *opts);

/**
 * Response messages under |bytes| go out uncompressed even when a
 * compression was negotiated (a Connect unary response then has no
 * Content-Encoding; a stream message is sent with its envelope's
 * compressed flag clear); compressing a few bytes costs more than it
 * saves.  Default 1024, as connect-es's servers; 0: every message is
 * compressed (connect-go's default).
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_compress_min_bytes(
    conch_server_opts *opts, size_t bytes);

/* ---- Requests before their method: the gate and plain routes ----------- */

/** A request as the gate and plain routes see it, once its header block
    ended and before the server looks its method up.  Borrowed: valid
    while the hook runs. */
typedef struct conch_server_request {
  const char *method;    /**< :method ("POST", "GET", ...; "" if absent) */
  const char *path;      /**< :path without the query ("" if absent) */
  const char *authority; /**< :authority, else Host; NULL if neither */
  /** The peer's uid on a Unix socket (SO_PEERCRED), -1 otherwise. */
  long peer_uid;
  /** 1 when an earlier request of the same connection passed the gate
      (to a method path, not a plain route), 0 otherwise. */
  int conn_passed;
  const void *impl_; /**< the server's; do not touch */
} conch_server_request;

/**
 * The first value of request header |name| (lower case; protocol headers
 * such as content-type included, pseudo-headers not), or NULL.
 */
CONCH_EXTERN const char *conch_server_request_header(
    const conch_server_request *req, const char *name);

/** A plain HTTP answer (no RPC protocol): a status, an optional content
    type and body, and extra headers.  Borrowed until the hook returns
    (the server copies it). */
typedef struct conch_server_reply {
  int status;               /**< 200..599 */
  const char *content_type; /**< NULL: none */
  const void *body;         /**< NULL or |body_len| bytes (not for HEAD) */
  size_t body_len;
  /** NULL, or name, value, name, value, ..., NULL (lower-case names). */
  const char *const *headers;
} conch_server_reply;

/** What the gate decides about a refused request: either a plain HTTP
    answer (|reply.status| set), or an RPC error with |code| and |message|
    in the request's protocol (a Connect unary error under the code's HTTP
    status when the content type names no protocol).  Zeroed before the
    gate runs; a refusal that sets neither is permission_denied. */
typedef struct conch_server_verdict {
  conch_code code;
  const char *message; /**< NULL: none; copied */
  conch_server_reply reply;
} conch_server_verdict;

/** Sees every request before anything else is checked (its :method, its
    path even when no method or route has it, its content type): returns 0
    to let it pass, or non-zero to refuse it as |v| says.  A request that
    passes to a path other than a plain route marks its connection as
    passed (conch_server_request.conn_passed, and see
    conch_server_opts_set_max_conns() and _set_header_timeout()).  Runs on
    the server's thread, like handlers. */
typedef int (*conch_server_gate_fn)(const conch_server_request *req,
                                    conch_server_verdict *v, void *user_data);
/**
 * Sets the gate (NULL: none; every request passes).
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_gate(conch_server_opts *opts,
                                            conch_server_gate_fn gate,
                                            void *user_data);

/* ---- Connections: who, how many, how long ------------------------------- */

/** A connection accepted from a listener, before it is served. */
typedef struct conch_server_peer {
  int fd;      /**< the accepted socket */
  int is_unix; /**< from a Unix socket listener */
  long uid;    /**< Unix socket: the peer's credentials (SO_PEERCRED), */
  long gid;    /**< -1 when unknown or on TCP */
  long pid;
} conch_server_peer;

/** Returns non-zero to serve |peer|, 0 to close it at once. */
typedef int (*conch_server_accept_fn)(const conch_server_peer *peer,
                                      void *user_data);
/**
 * Sets a filter on accepted connections (NULL: every one is served).
 * Connections handed over with conch_server_adopt() do not pass it.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_accept_filter(
    conch_server_opts *opts, conch_server_accept_fn fn, void *user_data);
/**
 * At most |n| connections: default 1024; 0: no limit (but see below).  A
 * connection accepted at the limit takes the place of the oldest one that
 * has neither passed the gate nor a call in progress, or, on a server
 * without a gate (where every request passes), of the oldest one without
 * a call in progress; when there is none, the new one is closed.
 *
 * Whatever the limit, when accept() runs out of descriptors (EMFILE,
 * ENFILE), the same connection (or one already closing) is closed at once
 * and the new client takes its descriptor, so that idle connections
 * cannot lock clients out of a process with few descriptors.  When there
 * is none, or accept() runs out of memory, the clients waiting in the
 * listener's backlog are accepted with a descriptor held in reserve and
 * closed at once, so that they fail now instead of hanging, and the
 * listener rests 100 ms.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_max_conns(conch_server_opts *opts,
                                                 size_t n);
/**
 * The header timeout, default 10000 (10 s); 0: none.  A request's header
 * block must end within |ms| of its first frame, or its connection closes
 * (no other stream can go on while it is open).  It is also the idle
 * limit of a connection that has not passed the gate yet (from the
 * accept, so its TLS handshake and preface included, and after each call
 * ends): a stranger holds a connection no longer than it takes to send a
 * request (the idle timeout, when shorter, applies).  Without a gate, a
 * connection passes with its first request to a method.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, negative |ms|).
 */
CONCH_EXTERN int conch_server_opts_set_header_timeout(conch_server_opts *opts,
                                                      long ms);
/**
 * The body timeout, default 60000 (60 s); 0: none.  The request of a
 * unary or server-streaming call must be complete within |ms| of its
 * headers, and
 * each request message of a client or bidi stream within |ms| of its
 * first byte (not counting time the handler keeps the call paused).
 * Otherwise the call ends with deadline_exceeded (the handler gets
 * on_cancel), or, when it was answered already, its stream is reset.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|, negative |ms|).
 */
CONCH_EXTERN int conch_server_opts_set_body_timeout(conch_server_opts *opts,
                                                    long ms);
/**
 * Limits on request bytes held in memory (a Connect unary body, a message
 * partly received, bytes held for a paused call): at most |per_conn| on
 * one connection (more ends the connection: GOAWAY ENHANCE_YOUR_CALM) and
 * |total| on all of them.  Defaults 32 MiB and 64 MiB; 0 means no limit.
 *
 * The total is one budget for everyone, and a few clients filling it must
 * not starve the rest, so its last eighth is kept for small calls: a call
 * holding more than 64 KiB (or more than a 16th of |total|) ends with
 * resource_exhausted when it would take the total past seven eighths, and
 * the calls that came first go on; a small call may use the whole total.
 * Should small calls fill the reserve too (many held unfinished), a small
 * call that would go past |total| takes the place of the calls holding the
 * most, largest first, as long as they hold more than it does (they end
 * with resource_exhausted: their handlers get on_cancel, their clients
 * "server busy"); with none, it ends itself.  Small requests (a listing,
 * a signal, a teardown) therefore get through however the budget was
 * filled, and no more than |total| is ever held.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_buffer_limits(conch_server_opts *opts,
                                                     size_t per_conn,
                                                     size_t total);
/**
 * Registers a compression of the caller's own (conch_compressor, as the
 * client's conch_client_opts_add_compression(): the struct and name are
 * copied, the functions and user_data retained for the life of |opts| and
 * of every server made from it) and adds it to the end of the accepted
 * list: requests in it are decompressed (within the receive limit), and
 * responses use it when the request came in it, or when it is the first
 * of the client's accepted list that the server takes.  A later
 * conch_server_opts_set_compression() may name it elsewhere in the list
 * or leave it out.  Its functions run on the thread that drives the
 * server, one call at a time per server.  |id| (may be NULL) receives its
 * id, CONCH_COMPRESSION_CUSTOM_FIRST and up in the order of registration.
 *
 * The name of a built-in compression the build lacks is free ("br"
 * without CONCH_WITH_BROTLI: a brotli of the caller's may take it).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |opts| or |comp|, a |struct_size|
 * too small, a NULL function, or a bad or taken name), or CONCH_ERR_LIMIT
 * (CONCH_COMPRESSION_CUSTOM_MAX are registered already).
 */
CONCH_EXTERN int conch_server_opts_add_compression(conch_server_opts *opts,
                                                   const conch_compressor *comp,
                                                   int *id);

/**
 * The resolver the JSON codec uses for google.protobuf.Any fields of
 * requests and responses, and |user_data| for it; NULL (the default) for
 * none.  As the client's (conch_client_opts_set_json_resolver()): the
 * well-known types (google.protobuf.*) need none; an Any of any other
 * type that does not resolve cannot be read or written: such a request
 * ends its call with invalid_argument, and conch_rpc_send() of such a
 * response returns CONCH_ERR_CODEC.  The resolver runs on the thread that
 * drives the server; the descriptors it returns must stay valid for the
 * server's life.  Without the JSON codec (CONCH_WITH_JSON 0) it is kept
 * and never used: JSON requests are answered 415.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |opts|).
 */
CONCH_EXTERN int conch_server_opts_set_json_resolver(conch_server_opts *opts,
                                                     conch_json_resolver fn,
                                                     void *user_data);

/** What a registered method does with its calls.  Every member but
    on_call may be NULL.  Pointers passed in are borrowed until the
    handler returns. */
typedef struct conch_server_handler {
  /** A call arrived: its method, headers and deadline are known, no
      message has been delivered yet.  Keep |rpc|; answer now or later. */
  void (*on_call)(conch_rpc *rpc, void *user_data);
  /** A request message of a typed method, decoded (borrowed: freed when
      this returns).  The one request of a unary or server-streaming call
      comes once the request ended (a second message is refused first,
      as connect-go does), right before on_half_close. */
  void (*on_message)(conch_rpc *rpc, const ProtobufCMessage *msg,
                     void *user_data);
  /** A request message of a raw method (input descriptor NULL), as
      received after decompression. */
  void (*on_raw_message)(conch_rpc *rpc, const uint8_t *data, size_t len,
                         void *user_data);
  /** The client sent its last message (for unary and server-streaming
      calls: right after the one request message). */
  void (*on_half_close)(conch_rpc *rpc, void *user_data);
  /** The call ended before the handler finished it: |status| says why
      (canceled: the client canceled it or its connection went away;
      deadline_exceeded: the deadline passed, and the client is told so;
      resource_exhausted, invalid_argument, internal: its request broke a
      limit or the protocol, and the client is told so).  |rpc| must not
      be used once this returns (the server frees it when its stream is
      gone). */
  void (*on_cancel)(conch_rpc *rpc, const conch_status *status,
                    void *user_data);
  /** The send buffer has room again after conch_rpc_send() returned
      CONCH_ERR_AGAIN.  Runs once per such refusal, on the server's turn
      (never from inside conch_rpc_send()). */
  void (*on_send_ready)(conch_rpc *rpc, void *user_data);
  /** Set: pull mode, the handler takes the request messages
      (conch_rpc_recv(), conch_rpc_recv_raw()): on_message and
      on_raw_message must be NULL, and on_half_close is not called (the
      end is conch_rpc_recv()'s CONCH_ERR_EOF).  Runs when a
      message or the end of the requests is there after conch_rpc_recv()
      returned CONCH_ERR_AGAIN, once per such refusal, on the server's turn
      (never from inside conch_rpc_recv()). */
  void (*on_recv_ready)(conch_rpc *rpc, void *user_data);
} conch_server_handler;

/**
 * Creates a server.  |opts| may be NULL for the defaults; it is copied.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |out|, client CAs without TLS),
 * CONCH_ERR_TLS (the TLS certificate, key or client CAs of |opts| cannot
 * be loaded any more) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_new(conch_server **out,
                                  const conch_server_opts *opts);
/**
 * Frees |s|: listeners and connections are closed at once (no GOAWAY: use
 * conch_server_shutdown() first for that), and every call a handler still
 * holds gets on_cancel (canceled) before this returns.  NULL is accepted.
 * From inside a handler of |s| it does nothing.
 */
CONCH_EXTERN void conch_server_free(conch_server *s);
/**
 * Registers |method| (copied, with its path; the descriptors are retained)
 * with |handler| (copied) and |user_data| (passed to every handler).
 * Descriptors NULL mean a raw method (on_raw_message, conch_rpc_send_raw()).
 * Register before serving: the table may have to grow, which it cannot
 * while calls run.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, a path that does not start
 * with '/', a handler without on_call or with on_recv_ready and
 * on_message or on_raw_message, an unknown stream kind, or a path
 * registered already), CONCH_ERR_STATE (the table is full and calls are
 * running) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_add_method(conch_server *s,
                                         const conch_method *method,
                                         const conch_server_handler *handler,
                                         void *user_data);
/** Answers a plain route: fills |reply| (zeroed before; a status of 0
    is 500). */
typedef void (*conch_server_route_fn)(const conch_server_request *req,
                                      conch_server_reply *reply,
                                      void *user_data);
/**
 * Answers requests to |path| (exactly, the query aside; any :method) with
 * plain HTTP from |fn|, e.g. a health check, instead of a method.  The
 * gate sees them first; a request body is not read.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, a path that does not start
 * with '/', a path taken by a method or route) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_add_route(conch_server *s, const char *path,
                                        conch_server_route_fn fn,
                                        void *user_data);
/* ---- Plain HTTP handlers: streamed requests and responses --------------- */

/** One plain HTTP exchange (conch_server_add_http()): a request to the
    handler's path and the response the handler streams back.  Valid from
    on_request until the handler gives it up (conch_http_end()) or
    on_cancel returns. */
typedef struct conch_http conch_http;

/** What a plain HTTP handler is told.  Every function runs on the server's
    turn, never from inside a conch_http_*() function; copied by
    conch_server_add_http(). */
typedef struct conch_http_handler {
  /** The request's head arrived (conch_http_method(), _path(), _query(),
      _header() tell it).  Required.  The handler may answer at once
      (conch_http_respond(), _end()) or later, from any of its hooks. */
  void (*on_request)(conch_http *h, void *user_data);
  /** |len| bytes of the request body (borrowed for the call; HTTP/1.1
      chunked framing removed, chunks joined in order).  While the handler
      keeps the exchange paused (conch_http_pause()) nothing more comes
      and the client is held to its flow-control window (HTTP/2: 1 MiB;
      HTTP/1.1: 64 KiB, and the connection is not read).  NULL: the body
      is read and dropped. */
  void (*on_body)(conch_http *h, const uint8_t *data, size_t len,
                  void *user_data);
  /** The request body ended (after its last on_body).  May be NULL. */
  void (*on_end)(conch_http *h, void *user_data);
  /** A conch_http_write() was refused (CONCH_ERR_AGAIN) and the response
      has room again.  May be NULL. */
  void (*on_send_ready)(conch_http *h, void *user_data);
  /** The exchange ended before conch_http_end(): the client reset the
      stream or closed the connection, the body timeout passed, the buffer
      budget shed it, the server shuts down or is freed.  |h| is gone when
      this returns.  May be NULL. */
  void (*on_cancel)(conch_http *h, void *user_data);
} conch_http_handler;

/**
 * Serves requests to |path| (exactly, the query aside; GET, HEAD and POST
 * over HTTP/1.1, any method over HTTP/2) with |handler|, streamed both
 * ways with back-pressure, over HTTP/2 and HTTP/1.1 alike.  The gate sees
 * them first (a request it passes here does not mark its connection as
 * passed).  Request bodies reach on_body as they arrive, each chunk once
 * (the body timeout of conch_server_opts_set_body_timeout() runs from
 * chunk to chunk while the exchange is not paused; paused bytes count
 * against the buffer limits).  The response is a head
 * (conch_http_respond()), body bytes (conch_http_write(), refused while
 * the response holds its budget: a client that stops reading holds at
 * most that much of the server's memory), and the end (conch_http_end()).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, no on_request, a path that
 * does not start with '/', a path taken by a method, route or handler) or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_add_http(conch_server *s, const char *path,
                                       const conch_http_handler *handler,
                                       void *user_data);
/** :method ("GET", "POST", ...). */
CONCH_EXTERN const char *conch_http_method(const conch_http *h);
/** :path without the query. */
CONCH_EXTERN const char *conch_http_path(const conch_http *h);
/** The query after '?', as sent (percent-escapes kept), or "" when there
    is none. */
CONCH_EXTERN const char *conch_http_query(const conch_http *h);
/** The first value of request header |name| (lower case; pseudo-headers
    not), or NULL.  Over HTTP/1.1 Host is :authority, and Content-Length
    and connection-specific fields are not headers. */
CONCH_EXTERN const char *conch_http_header(const conch_http *h,
                                           const char *name);
/** The number of request headers of |h|, every one conch_http_header()
    finds (0 for NULL). */
CONCH_EXTERN size_t conch_http_header_count(const conch_http *h);
/**
 * Gives the |i|-th request header, in no promised order: |*name| (lower
 * case) and |*value| (NUL-terminated, |*len| bytes before the NUL), each
 * pointer NULL to skip it, borrowed until the exchange ends.  A header sent
 * twice is two entries.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |h|, |i| out of range).
 */
CONCH_EXTERN int conch_http_header_at(const conch_http *h, size_t i,
                                      const char **name, const char **value,
                                      size_t *len);
/** The peer's uid on a Unix socket (SO_PEERCRED), -1 otherwise. */
CONCH_EXTERN long conch_http_peer_uid(const conch_http *h);
/** The server of |h|. */
CONCH_EXTERN conch_server *conch_http_server(const conch_http *h);
/** The |user_data| given with the handler. */
CONCH_EXTERN void *conch_http_user_data(const conch_http *h);
/** A pointer of the handler's own, kept with |h| (NULL at first). */
CONCH_EXTERN void conch_http_set_data(conch_http *h, void *data);
/** What conch_http_set_data() stored. */
CONCH_EXTERN void *conch_http_data(const conch_http *h);
/**
 * Stops delivering the request body (see on_body); on_end waits too.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL) or CONCH_ERR_STATE (given up).
 */
CONCH_EXTERN int conch_http_pause(conch_http *h);
/**
 * Delivers what waited and goes on, on the server's next turn.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL) or CONCH_ERR_STATE (given up).
 */
CONCH_EXTERN int conch_http_resume(conch_http *h);
/**
 * Sends the response head: |status| (200..599) and |headers| (NULL, or
 * name, value, ..., NULL; lower-case names, copied).  A content-length
 * among them is a promise: more bytes are refused by conch_http_write()
 * and fewer make conch_http_end() reset the stream (HTTP/1.1: the
 * connection closes), so that a client never takes a cut response for a
 * whole one; HTTP/1.1 sends it as Content-Length, else the body is
 * chunked when it does not end within the turn.  |body| 0: the response
 * has no body (it ends with the head; conch_http_end() is still owed).
 * A HEAD request gets no body whatever is written.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |h|, a status outside 200..599, a
 * header without value, a content-length that is no number);
 * CONCH_ERR_STATE (responded already, or given up) or CONCH_ERR_NOMEM
 * (nothing sent).
 */
CONCH_EXTERN int conch_http_respond(conch_http *h, int status,
                                    const char *const *headers, int body);
/**
 * Queues |len| body bytes (copied).  While the bytes queued and not yet
 * taken by the connection reach the response budget (the send buffer of
 * conch_server_opts_set_send_buffer(), at most 256 KiB), writes are
 * refused with CONCH_ERR_AGAIN and on_send_ready follows; one write is
 * always taken whole when there is room, so write in pieces of a size of
 * your choice (e.g. 64 KiB).
 *
 * Returns 0; CONCH_ERR_AGAIN (nothing queued); CONCH_ERR_INVALID (NULL
 * |h|, NULL |data| with |len| > 0, past the declared content-length);
 * CONCH_ERR_STATE (no head yet, a response without body, or given up) or
 * CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_http_write(conch_http *h, const void *data,
                                  size_t len);
/** Body bytes of |h| queued and not yet taken by the connection; 0 for
    NULL. */
CONCH_EXTERN size_t conch_http_queued(const conch_http *h);
/**
 * Ends the response (what is queued still goes out) and gives |h| up: no
 * hook of it runs again, and the server frees it.  A request body still
 * coming is read and dropped (within bounds, as for an early RPC
 * answer).  Without conch_http_respond() before, the response is a 500.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL) or CONCH_ERR_STATE (given up).
 */
CONCH_EXTERN int conch_http_end(conch_http *h);

/**
 * Listens on |addr|: "HOST:PORT" (an IPv4 literal, "[v6]:PORT" or
 * "localhost"; port 0 picks a free one, see conch_server_port()) or
 * "unix:PATH" (a Unix socket; an existing socket file at PATH is replaced).
 * Connections speak HTTP/2 or HTTP/1.1, in TLS when the options say so
 * (see the top of this file).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, an address that does not
 * parse), CONCH_ERR_STATE (after conch_server_shutdown()), CONCH_ERR_IO
 * (socket, bind or listen failed; errno is kept) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_listen(conch_server *s, const char *addr);
/**
 * Listens on |fd|, a socket the caller bound and set listening (TCP or
 * Unix; made non-blocking).  The server owns it from then on (it closes
 * it), also when this fails.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |s|, negative |fd|, or too many
 * listeners), CONCH_ERR_STATE (after conch_server_shutdown()) or
 * CONCH_ERR_IO.
 */
CONCH_EXTERN int conch_server_listen_fd(conch_server *s, int fd);
/**
 * Returns the TCP port of the first TCP listener, or 0 when there is none.
 */
CONCH_EXTERN int conch_server_port(const conch_server *s);

/** A connection the caller accepted, moved through hooks of its own.
    The hooks behave as those of a client transport (transport.h). */
typedef struct conch_server_transport {
  /** Reads at most |len| bytes: how many (> 0), 0 at the end of the
      stream, -EAGAIN when none now, another negative errno on error. */
  long (*read)(void *user_data, int handle, void *buf, size_t len);
  /** Writes at most |len| bytes: how many were taken (> 0), -EAGAIN when
      none fit now, another negative errno on error.  No SIGPIPE. */
  long (*write)(void *user_data, int handle, const void *buf, size_t len);
  /** The server is done with |handle| (it stopped watching it before). */
  void (*close)(void *user_data, int handle);
  void *user_data;
} conch_server_transport;

/**
 * Serves a connection that is already established: |handle| is a
 * connected socket (|t| NULL: the server reads, writes and closes it; it
 * is made non-blocking) or a handle of transport |t| (copied; its
 * user_data must outlive the connection).  As with client transports, a
 * handle that is not a real descriptor is driven by the caller with
 * conch_server_on_io(s, handle, CONCH_IO_READ | CONCH_IO_WRITE) and io
 * hooks.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |s|, negative |handle|, a hook
 * missing in |t|), CONCH_ERR_STATE (after conch_server_shutdown()) or
 * CONCH_ERR_NOMEM (the handle is not taken: the caller closes it).
 */
CONCH_EXTERN int conch_server_adopt(conch_server *s, int handle,
                                    const conch_server_transport *t);

/**
 * Graceful shutdown: the listeners close, every connection gets GOAWAY
 * naming the last stream the server processed (streams the client opened
 * before it still run; later ones are ignored, and clients retry them
 * elsewhere), and a connection closes once its calls are done and its
 * bytes sent.  conch_server_idle() tells when all are.  Calls a handler
 * holds keep their connection open until it finishes them, or until the
 * drain timeout (conch_server_opts_set_drain_timeout()) ends them.  May be
 * called from handlers; a second call does nothing more.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL |s|).
 */
CONCH_EXTERN int conch_server_shutdown(conch_server *s);
/**
 * Returns 1 when the server has no connection open (after a shutdown:
 * fully drained), 0 otherwise (0 for NULL).
 */
CONCH_EXTERN int conch_server_idle(const conch_server *s);
/**
 * Returns the number of calls the server holds (started and not yet
 * freed).
 */
CONCH_EXTERN size_t conch_server_calls(const conch_server *s);

/** What a server holds and what its limits did (conch_server_stats_get()).
    Members are only ever added at the end. */
typedef struct conch_server_stats {
  size_t conns;         /**< connections open */
  size_t calls;         /**< calls held (conch_server_calls()) */
  size_t buffered;      /**< request bytes held in memory now: what the
                             buffer limits count */
  size_t buffered_peak; /**< the most |buffered| has been */
  uint64_t shed_calls;  /**< calls ended to make room for a smaller request
                             (conch_server_opts_set_buffer_limits()) */
  uint64_t shed_conns;  /**< connections closed to make room for a new one
                             (the connection limit, or no descriptor) */
} conch_server_stats;

/**
 * Fills |out| (|size| bytes of it: sizeof(conch_server_stats) of the
 * caller's header) with the server's figures.  Like every function of a
 * server, on the thread that drives it.
 *
 * Returns 0 or CONCH_ERR_INVALID (NULL argument).
 */
CONCH_EXTERN int conch_server_stats_get(const conch_server *s,
                                        conch_server_stats *out, size_t size);

/* ---- Driving: the same three ways as a client (io.h) --------------------- */

/**
 * Switches |s| to hook mode (see conch_io_hooks; the timer hook asks for
 * conch_server_on_timer()).  The struct is copied; NULL switches back to
 * pull mode.
 *
 * Returns 0, CONCH_ERR_INVALID or CONCH_ERR_RECURSIVE.
 */
CONCH_EXTERN int conch_server_set_io_hooks(conch_server *s,
                                           const conch_io_hooks *hooks);
/**
 * Reports that |fd| (a listener or a connection) is ready for |events|.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |s|) or CONCH_ERR_RECURSIVE (from a
 * handler: nothing done).
 */
CONCH_EXTERN int conch_server_on_io(conch_server *s, int fd, unsigned events);
/**
 * Reports that the timer set through the hooks fired.
 *
 * Returns 0; CONCH_ERR_INVALID (NULL |s|) or CONCH_ERR_RECURSIVE.
 */
CONCH_EXTERN int conch_server_on_timer(conch_server *s);
/**
 * Fills |fds| (room for |nfds|) with what the server wants polled and
 * returns how many entries it needs (one per listener and connection).
 */
CONCH_EXTERN size_t conch_server_pollfds(conch_server *s, struct pollfd *fds,
                                         size_t nfds);
/**
 * Milliseconds until the server next needs attention without fd activity
 * (a deadline), 0 if it has work pending now, -1 if it waits only on fds.
 */
CONCH_EXTERN long conch_server_timeout_ms(conch_server *s);
/**
 * Processes poll(2) results for |fds| (as filled by conch_server_pollfds())
 * and any deadlines that are due.
 *
 * Returns 0, CONCH_ERR_INVALID or CONCH_ERR_RECURSIVE; failures of a
 * connection end its calls, not this.
 */
CONCH_EXTERN int conch_server_process(conch_server *s, const struct pollfd *fds,
                                      size_t nfds);
/**
 * One turn of a blocking loop: poll for at most |timeout_ms| (-1: until
 * something happens), then process.
 *
 * Returns 0, CONCH_ERR_INVALID, CONCH_ERR_RECURSIVE, CONCH_ERR_IO (poll
 * failed) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_run(conch_server *s, long timeout_ms);

/* ---- Schemas, reflection and health -------------------------------------- */

/**
 * Adds |fd| and the files it imports (retained: generated descriptors are
 * static data) to the server's descriptor pool, which server reflection
 * answers from.  Every generated _register() calls it with its file
 * (conch_file_<ident> of the *.conch.h); call it for files whose services
 * are registered otherwise (raw methods, conch_server_add_method()).
 * A file already there is skipped.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, bytes that are not a
 * FileDescriptorProto) or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_add_file(conch_server *s,
                                       const conch_file_descriptor *fd);
/** The server's descriptor pool (NULL before the first file).  Borrowed:
    valid until the server is freed. */
CONCH_EXTERN const conch_descpool *conch_server_files(const conch_server *s);
/**
 * Serves server reflection: grpc.reflection.v1.ServerReflection and
 * grpc.reflection.v1alpha.ServerReflection (ServerReflectionInfo, a bidi
 * stream: one response per request, in order) over every protocol and
 * codec the server speaks, from the descriptor pool: list_services (the
 * services of the methods registered, v1 included, v1alpha not: its
 * schema is v1's), file_by_filename,
 * file_containing_symbol (services, methods, messages, fields, enums,
 * enum values, extensions), file_containing_extension and
 * all_extension_numbers_of_type, each file with every file it imports.
 * What is not found gets an error_response with not_found, and the stream
 * goes on.  A second call does nothing.  Register before serving.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |s|, or a method of reflection
 * registered already by the caller), CONCH_ERR_STATE or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_add_reflection(conch_server *s);

/** A service's status, as grpc.health.v1 reports it. */
typedef enum conch_health_status {
  CONCH_HEALTH_UNKNOWN = 0,
  CONCH_HEALTH_SERVING = 1,
  CONCH_HEALTH_NOT_SERVING = 2,
  CONCH_HEALTH_SERVICE_UNKNOWN = 3 /**< reported only, never set */
} conch_health_status;

/**
 * Serves grpc.health.v1.Health: Check (not_found for a service never
 * set), List (every service set, at most 100, else resource_exhausted)
 * and Watch (the status now, then each change; SERVICE_UNKNOWN for a
 * service not set yet, and the stream waits), with the statuses set by
 * conch_server_health_set(); the server as a whole ("") is SERVING unless
 * set otherwise.  Once conch_server_shutdown() runs, every service reports
 * NOT_SERVING, and each Watch is sent NOT_SERVING and ends with
 * unavailable (it would hold the drain up otherwise).  Check and List also
 * take Connect GET requests.  A second call does nothing.  Register before
 * serving.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |s|, or a method of health registered
 * already by the caller), CONCH_ERR_STATE or CONCH_ERR_NOMEM.
 */
CONCH_EXTERN int conch_server_add_health(conch_server *s);
/**
 * Sets the status of |service| ("pkg.Svc", or "" for the server as a
 * whole; copied) to CONCH_HEALTH_SERVING, _NOT_SERVING or _UNKNOWN, and
 * tells its watchers.  Serves health first when it is not served yet
 * (conch_server_add_health()).  On the thread that drives the server.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL argument, another status) or what
 * conch_server_add_health() returns.
 */
CONCH_EXTERN int conch_server_health_set(conch_server *s, const char *service,
                                         conch_health_status status);

/* ---- One call ------------------------------------------------------------- */

/** The method of |rpc| (as registered; the path is the server's copy). */
CONCH_EXTERN const conch_method *conch_rpc_method(const conch_rpc *rpc);
/** The protocol the client speaks. */
CONCH_EXTERN conch_protocol conch_rpc_protocol(const conch_rpc *rpc);
/** The codec of its messages. */
CONCH_EXTERN conch_codec conch_rpc_codec(const conch_rpc *rpc);
/** Request metadata (application headers; the protocol's own headers are
    left out).  Borrowed until the call ends; never NULL. */
CONCH_EXTERN const conch_metadata *conch_rpc_request_headers(
    const conch_rpc *rpc);
/** Milliseconds left until the call's deadline (0 when it has passed), or
    -1 when the client set none. */
CONCH_EXTERN long conch_rpc_timeout_ms(const conch_rpc *rpc);
/** How many attempts of this call came before it, as its client says
    (grpc-previous-rpc-attempts, conch/retry.h): 0 for a first attempt or
    a client that does not say. */
CONCH_EXTERN unsigned conch_rpc_previous_attempts(const conch_rpc *rpc);
/** Response headers to send: add to them before the first message or the
    finish.  Borrowed; never NULL. */
CONCH_EXTERN conch_metadata *conch_rpc_response_headers(conch_rpc *rpc);
/** Response trailers to send at the finish.  Borrowed; never NULL. */
CONCH_EXTERN conch_metadata *conch_rpc_response_trailers(conch_rpc *rpc);
/** The |user_data| given with the method. */
CONCH_EXTERN void *conch_rpc_user_data(const conch_rpc *rpc);
/** A pointer of the handler's own, kept with |rpc| (NULL at first). */
CONCH_EXTERN void conch_rpc_set_data(conch_rpc *rpc, void *data);
/** What conch_rpc_set_data() stored. */
CONCH_EXTERN void *conch_rpc_data(const conch_rpc *rpc);
/** The server of |rpc|. */
CONCH_EXTERN conch_server *conch_rpc_server(const conch_rpc *rpc);
/** The subject of the client certificate the call's connection presented
    and the server verified (conch_server_opts_set_tls_client_ca_file()),
    as RFC 2253 text, most specific first: "CN=alice,O=Example".  NULL
    when the connection has none (cleartext, no CAs set, or an optional
    certificate not sent).  Borrowed until the call ends. */
CONCH_EXTERN const char *conch_rpc_peer_cert_subject(const conch_rpc *rpc);
/** That certificate (the leaf only) in DER, |*len| bytes (|len| may be
    NULL), for anything the subject does not tell (SANs, fingerprint: parse
    it with a library of your choice).  NULL (|*len| 0) when there is none.
    Borrowed until the call ends. */
CONCH_EXTERN const uint8_t *conch_rpc_peer_cert_der(const conch_rpc *rpc,
                                                    size_t *len);

/**
 * Queues the response message |msg| (serialized now in the call's codec,
 * compressed as negotiated; borrowed for the call only).  The response
 * headers go out with the first message (for Connect unary, with the
 * finish).  Unary and client-streaming calls take one message.  While
 * the call's bytes not yet sent reach the send buffer size
 * (conch_server_opts_set_send_buffer()), further messages are refused
 * with CONCH_ERR_AGAIN, and on_send_ready tells when to go on: a client
 * that reads slowly slows its handler instead of filling memory.
 *
 * Returns 0; CONCH_ERR_AGAIN (the send buffer is full: nothing queued,
 * on_send_ready follows; send it again then, or the call cannot finish
 * OK: see conch_rpc_finish()); CONCH_ERR_INVALID (NULL argument, a message
 * of another type, a raw method); CONCH_ERR_STATE (after the finish, a
 * second message of a unary or client-streaming call, while a source
 * sends: conch_rpc_send_from()); CONCH_ERR_CODEC (it cannot be
 * serialized, e.g. JSON of an Any whose type is unknown); CONCH_ERR_LIMIT
 * (over the 4 GiB envelope limit) or CONCH_ERR_NOMEM.  A failed send
 * changes nothing.
 */
CONCH_EXTERN int conch_rpc_send(conch_rpc *rpc, const ProtobufCMessage *msg);
/**
 * conch_rpc_send() for raw methods: |data| is a serialized message.
 *
 * Returns what conch_rpc_send() returns; CONCH_ERR_INVALID also for a
 * typed method or NULL |data| with |len| > 0.
 */
CONCH_EXTERN int conch_rpc_send_raw(conch_rpc *rpc, const void *data,
                                    size_t len);
/**
 * conch_rpc_send() of a message already serialized in protobuf's binary
 * form (|data|, |len|) on a typed method: sent as it is with the proto
 * codec; with JSON it is decoded and sent as JSON.  The server does not
 * check that proto bytes are a valid message.
 *
 * Returns what conch_rpc_send() returns; CONCH_ERR_INVALID also for a raw
 * method, NULL |data| with |len| > 0, or (JSON) bytes that do not decode
 * as the output message.
 */
CONCH_EXTERN int conch_rpc_send_packed(conch_rpc *rpc, const void *data,
                                       size_t len);
/**
 * The bytes of |rpc|'s responses queued and not yet handed to the
 * connection (what the send buffer limit counts); 0 for NULL.
 */
CONCH_EXTERN size_t conch_rpc_queued(const conch_rpc *rpc);
/**
 * Pull mode (the method's handler has on_recv_ready): takes the next
 * request message, decoded (its envelope, size limit, decompression and
 * decoding were checked as it arrived: a bad one ended the call then,
 * through on_cancel).  On 0, |*msg| is the caller's, to be freed with
 * conch_server_message_free().  Messages not taken wait as received, and
 * the bytes after them wait too, their HTTP/2 stream window not returned:
 * a handler that takes nothing slows its client (as conch_rpc_pause()).
 *
 * Returns 0; CONCH_ERR_AGAIN (none yet: on_recv_ready follows);
 * CONCH_ERR_EOF (the client ended its requests and every message was
 * taken); CONCH_ERR_INVALID (NULL argument); CONCH_ERR_STATE (push mode,
 * a raw method, or the call is not the handler's any more);
 * CONCH_ERR_NOMEM (the message stays queued).
 */
CONCH_EXTERN int conch_rpc_recv(conch_rpc *rpc, ProtobufCMessage **msg);
/**
 * conch_rpc_recv() for raw methods: |*data| (|*len| bytes, decompressed)
 * is borrowed until the next recv on |rpc| or the call's end.
 *
 * Returns what conch_rpc_recv() returns; CONCH_ERR_STATE also for a typed
 * method.
 */
CONCH_EXTERN int conch_rpc_recv_raw(conch_rpc *rpc, const uint8_t **data,
                                    size_t *len);
/** Frees a message conch_rpc_recv() returned on a call of |s| (it may
    outlive the call).  NULL |msg| is accepted. */
CONCH_EXTERN void conch_server_message_free(conch_server *s,
                                            ProtobufCMessage *msg);
/**
 * Asks for on_send_ready once (on the server's turn, never from inside
 * this function) when the
 * bytes of |rpc| queued (conch_rpc_queued()) are |low| or fewer: a
 * low-water mark, for a handler that bounds its own output (e.g. stops
 * reading a source while a client is |high| bytes behind, with a send
 * buffer large enough never to refuse).  A second call replaces the
 * first.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |rpc|) or CONCH_ERR_STATE (the call
 * is not the handler's any more).
 */
CONCH_EXTERN int conch_rpc_notify_drained(conch_rpc *rpc, size_t low);
/**
 * Stops delivering request messages of |rpc|: their bytes wait, and since
 * their HTTP/2 stream window is not returned, the client can send no more
 * than that window (1 MiB) ahead; its sends then wait.  A pause acts
 * between reads: messages already read in the same chunk of bytes as the
 * one being handled are still delivered.  on_half_close waits too.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |rpc|) or CONCH_ERR_STATE (the call
 * is not the handler's any more, or is in pull mode).
 */
CONCH_EXTERN int conch_rpc_pause(conch_rpc *rpc);
/**
 * Delivers what waited and goes on, on the server's next turn (never from
 * inside this function).
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |rpc|) or CONCH_ERR_STATE.
 */
CONCH_EXTERN int conch_rpc_resume(conch_rpc *rpc);
/** Where conch_rpc_send_from() takes a call's responses from.  Copied by
    it. */
typedef struct conch_rpc_source conch_rpc_source;
struct conch_rpc_source {
  /** Returns the next response of |rpc| (the source's: it must stay valid
      until next runs again, or the call ends; it is serialized right
      after next returns), or NULL: after ending the stream with
      conch_rpc_finish() (any status, here in next), or when the source
      has no response now (the stream waits until conch_rpc_wake()).
      Runs on the server's turn, never from inside a conch_rpc_*()
      function, again and again while the call's send buffer has room. */
  const ProtobufCMessage *(*next)(conch_rpc *rpc, const conch_rpc_source *src);
  void *user_data;
  /** For a typed wrapper: a function of its own type that |next| casts
      back and calls (the stubs' p__s__m_rpc_stream() keeps the handler's
      typed source here).  NULL otherwise. */
  conch_stub_fn typed;
};

/**
 * Streams the responses of |rpc| (a server-streaming or bidi call of a
 * typed method) from |src|: from now on the server asks the source for
 * the next response whenever the call's send buffer has room (the send
 * buffer size of conch_server_opts_set_send_buffer(), at most 1 MiB; one
 * response at least when nothing waits), so the stream goes exactly as
 * fast as the client reads, and at most that budget (and one response)
 * waits in memory.  Nothing is ever refused: the handler sees neither
 * CONCH_ERR_AGAIN nor on_send_ready.  The stream ends when the source
 * finishes the call (inside next, or the handler from elsewhere), or when
 * the call ends otherwise (on_cancel: the source is not called again).  A
 * response that cannot be sent (CONCH_ERR_CODEC, CONCH_ERR_LIMIT,
 * CONCH_ERR_NOMEM, another type) ends the call with internal, through
 * on_cancel.  While the source runs, conch_rpc_send() and its kin return
 * CONCH_ERR_STATE; the request side (on_message, pause, pull mode) goes on
 * as before.
 *
 * Returns 0 (the first response is asked for on the server's next turn,
 * never from inside this function); CONCH_ERR_INVALID (NULL argument or
 * |src->next|, a raw method, a unary or client-streaming method),
 * CONCH_ERR_STATE (the call is not the handler's any more, or has a
 * source already) or CONCH_ERR_NOMEM (nothing changed).
 */
CONCH_EXTERN int conch_rpc_send_from(conch_rpc *rpc,
                                     const conch_rpc_source *src);
/**
 * The source of |rpc| (conch_rpc_send_from()) has responses again after
 * its next returned NULL: it is asked on the server's next turn.  Calling
 * it while the source is not waiting does nothing.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |rpc|) or CONCH_ERR_STATE (no source,
 * or the call is not the handler's any more).
 */
CONCH_EXTERN int conch_rpc_wake(conch_rpc *rpc);

/**
 * Ends the call with |status| (NULL: OK; copied, details included): the
 * trailers (gRPC), the end-stream message (Connect streams), the trailer
 * frame (gRPC-Web) or the whole response (Connect unary: an error is the
 * Connect error JSON under the code's HTTP status) go out with the
 * response trailers.  A unary or client-streaming call finished OK without
 * a message ends with internal instead (the client needs one).  So does a
 * stream finished OK while a response was refused (conch_rpc_send() said
 * CONCH_ERR_AGAIN) and no send succeeded since: the client would take a
 * stream cut short for a whole one.  A handler that sends by itself waits
 * for on_send_ready and sends the refused response again before it
 * finishes; conch_rpc_send_from() never refuses.  The
 * handler gives |rpc| up: the server frees it once the response is sent
 * (or the stream is gone); no handler of it runs again.
 *
 * Returns 0, CONCH_ERR_INVALID (NULL |rpc|, a code outside 0..16) or
 * CONCH_ERR_STATE (finished already).  On CONCH_ERR_NOMEM the call still
 * ends (the client gets internal, or the stream is reset) and |rpc| is
 * gone as after 0.
 */
CONCH_EXTERN int conch_rpc_finish(conch_rpc *rpc, const conch_status *status);

#ifdef __cplusplus
}
#endif

#endif /* CONCH_SERVER_H */
