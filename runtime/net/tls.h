/* TLS for client connections, without I/O.  OpenSSL runs over an in-memory
   BIO: the connection code reads ciphertext from the socket and hands it to
   conch__tls_feed(), and writes to the socket what conch__tls_pending()
   shows, then reports it with conch__tls_consume().  This module never
   touches a file descriptor and never reads the clock.

   The BIO is our own rather than BIO_s_mem(): it reads from and appends to
   two conch_bufs, so ciphertext is copied once on the way in and once on
   the way out (as with BIO_s_mem), the pending output is handed out
   without a copy, and consuming it is free.

   A typical driver:

     feed(bytes read from the socket)
     handshake() until 0, then read() until CONCH_ERR_AGAIN
     write() what HTTP/2 produced
     while (pending(&p) > 0) { send p; consume(bytes sent) }

   Output can appear after any call except feed, pending, consume and error
   (alerts after a failure, key-update replies during read), so the driver
   checks pending() after each of them.

   Policy (CONNECT_PROTOCOL.md 10.1): TLS 1.2 or newer; under TLS 1.2 only
   ECDHE/DHE key exchange with AEAD ciphers; ALPN offers "h2" and the
   handshake fails unless the server selects it, unless the configuration
   also allows "http/1.1" (see conch_tls_config.alpn); no renegotiation.  A DNS
   host name goes into SNI and is checked against the certificate without
   partial wildcards ("f*.example.com"); an IP literal gets no SNI and is
   checked against the certificate's IP address SANs (9.1).

   Memory: the structs, the copied host name and both ciphertext buffers
   come from the conch_mem given to conch__tls_ctx_new().  OpenSSL allocates
   everything else (the SSL_CTX, each SSL with its record buffers of about
   50 KiB, certificates) with its own process-wide allocator.  OpenSSL 3.0
   has no per-object allocator hooks and we do not change global OpenSSL
   state, so those allocations bypass conch_mem.

   OpenSSL errors: each call that enters OpenSSL first empties the calling
   thread's OpenSSL error queue (SSL_get_error() needs that; it also drops
   anything the application left there) and empties it again when it
   fails, so a connection's message never carries another connection's
   errors and none are left behind.

   Threads: a context and the connections made from it are used by one
   thread at a time, like the client they belong to. */
#ifndef CONCH_TLS_H
#define CONCH_TLS_H

#include <stddef.h>
#include <stdint.h>

#include <conch/mem.h>

/* TLS settings of one client.  Every field is optional: a zeroed struct
   means "verify against the system CA store, no client certificate".
   Strings and PEM text are read during conch__tls_ctx_new() only. */
typedef struct conch_tls_config {
  /* Trusted CA certificates.  When neither ca_file nor ca_pem is set the
     system store is used (SSL_CTX_set_default_verify_paths).  When both are
     set, both are trusted. */
  const char *ca_file; /* path of a PEM file */
  const char *ca_pem;  /* PEM text */
  size_t ca_pem_len;   /* 0: |ca_pem| is NUL-terminated */
  /* Client certificate, presented when the server asks for one.  The
     certificate comes from cert_file or cert_pem (not both), followed by
     any intermediate certificates.  The private key comes from key_file or
     key_pem; when neither is set it is read from the certificate's PEM.
     Encrypted keys are not supported. */
  const char *cert_file;
  const char *key_file;
  const char *cert_pem;
  size_t cert_pem_len; /* 0: NUL-terminated */
  const char *key_pem;
  size_t key_pem_len; /* 0: NUL-terminated */
  /* Non-zero turns off all verification of the server: chain, expiry and
     host name.  For tests and self-signed development servers only.  The
     sense is inverted so that a zeroed struct is the safe default. */
  int insecure_skip_verify;
  /* ALPN: CONCH_TLS_ALPN_H2 (0, the default) offers "h2" and requires it;
     CONCH_TLS_ALPN_ANY offers "h2" and "http/1.1" and accepts either (or
     no ALPN, taken as HTTP/1.1); CONCH_TLS_ALPN_H1 offers only
     "http/1.1". */
  int alpn;
  /* Server side only: client certificates.  CONCH_TLS_CLIENT_NONE (0, the
     default) asks for none; _OPTIONAL asks, verifies one that is offered
     against ca_file/ca_pem and fails the handshake when it does not
     verify; _REQUIRED also fails it when none is offered.  The CAs are
     required (no system store) and are named to the client as the
     acceptable issuers. */
  int client_auth;
} conch_tls_config;

/* The TLS material an options object owns (client opts.c, server
   server_opts.c): copies of the caller's file names and PEM text, made
   with the allocator the owner passes.  Zeroed: none. */
typedef struct conch_tls_material {
  char *ca_file;
  char *ca_pem;
  size_t ca_pem_len;
  char *cert_file;
  char *key_file;
  char *cert_pem;
  size_t cert_pem_len;
  char *key_pem;
  size_t key_pem_len;
} conch_tls_material;

/* Replaces |*slot| with a copy of |n| bytes at |p| (NUL-terminated; NULL
   |p|: none) and sets |*lenp| (when not NULL) to its length.  Returns 0
   or CONCH_ERR_NOMEM (then |*slot| is unchanged). */
int conch__tls_material_set(const conch_mem *mem, char **slot, size_t *lenp,
                            const char *p, size_t n);
/* Frees every string of |m| (made with |mem|) and zeroes it. */
void conch__tls_material_clear(conch_tls_material *m, const conch_mem *mem);
/* |dst| becomes a copy of |src| made with |mem|.  Returns 0 or
   CONCH_ERR_NOMEM (then |dst| holds nothing). */
int conch__tls_material_copy(conch_tls_material *dst,
                             const conch_tls_material *src,
                             const conch_mem *mem);
/* Zeroes |cfg| and points its CA, certificate and key fields at |m|'s. */
void conch__tls_material_config(const conch_tls_material *m,
                                conch_tls_config *cfg);

enum {
  CONCH_TLS_CLIENT_NONE = 0,
  CONCH_TLS_CLIENT_OPTIONAL = 1,
  CONCH_TLS_CLIENT_REQUIRED = 2
};

enum { CONCH_TLS_ALPN_H2 = 0, CONCH_TLS_ALPN_ANY = 1, CONCH_TLS_ALPN_H1 = 2 };

/* The TLS context of one client (an SSL_CTX). */
typedef struct conch_tls_ctx conch_tls_ctx;

/* One TLS connection (an SSL and its ciphertext buffers). */
typedef struct conch_tls conch_tls;

/* Creates a context from |cfg| (NULL: all defaults).  |mem| (NULL: the C
   library) is retained until the context is destroyed.  On failure a
   NUL-terminated message naming what failed (the file, "ca_pem", the
   OpenSSL reason) is written to |err| (|errlen| bytes, may be 0), and
   |*out| is untouched.  Returns 0 or:
     CONCH_ERR_INVALID  |out| is NULL, or |cfg| contradicts itself (both
                        cert_file and cert_pem, a key without certificate)
     CONCH_ERR_TLS      a CA, certificate or key could not be loaded, or
                        the key does not match the certificate
     CONCH_ERR_NOMEM */
int conch__tls_ctx_new(conch_tls_ctx **out, const conch_mem *mem,
                       const conch_tls_config *cfg, char *err, size_t errlen);

/* Releases the caller's reference to |ctx|.  The context is destroyed when
   its last connection is freed, so connections may outlive this call.
   NULL is accepted. */
void conch__tls_ctx_free(conch_tls_ctx *ctx);

/* Creates a client connection to |host| on |ctx|.  |host| is a DNS name
   (one trailing dot is ignored), an IPv4 literal, or an IPv6 literal with
   or without brackets; it is copied.  A DNS name is sent as SNI and
   checked against the certificate's names; an IP literal is not sent and
   is checked against the certificate's IP address SANs.  Returns 0 or:
     CONCH_ERR_INVALID  an argument is NULL, |host| is empty, longer than
                        255 bytes, or "[...]" around something that is not
                        an IPv6 address
     CONCH_ERR_NOMEM */
int conch__tls_new(conch_tls **out, conch_tls_ctx *ctx, const char *host);

/* Frees |t| without sending anything (see conch__tls_shutdown()).  NULL is
   accepted. */
void conch__tls_free(conch_tls *t);

/* Appends |n| bytes of ciphertext received from the peer.  They are kept
   until a handshake or read call consumes them, so the caller bounds this
   buffer by not reading the socket faster than it reads plaintext.  After
   a failure the input is refused with the failure's code.  Returns 0,
   CONCH_ERR_NOMEM (nothing appended) or the stored failure code. */
int conch__tls_feed(conch_tls *t, const uint8_t *in, size_t n);

/* Advances the handshake with the input fed so far.  Returns:
     0                  done, and the server selected ALPN "h2".  Input fed
                        during the handshake may already hold application
                        data: call conch__tls_read() next.  Later calls
                        return 0 at once.
     CONCH_ERR_AGAIN    more input is needed: send the pending output,
                        then feed what the socket returns
     CONCH_ERR_TLS      the handshake failed (certificate verification,
                        protocol version, no shared cipher, an alert from
                        the server, a reply that is not TLS) or the server
                        did not select "h2"; see conch__tls_error().
                        Pending output may hold an alert worth sending
                        before closing.  Under TLS 1.3 the server checks a
                        client certificate after the client is done, so its
                        refusal shows up in the first conch__tls_read().
     CONCH_ERR_NOMEM
   Any error other than CONCH_ERR_AGAIN is final: every later call except
   pending, consume, error and free returns it again. */
int conch__tls_handshake(conch_tls *t);

/* Decrypts up to |cap| bytes of application data into |out|.  Returns the
   number of bytes (> 0), or:
     CONCH_ERR_AGAIN    no complete record is buffered (records that carry
                        no data, such as session tickets, are consumed)
     CONCH_ERR_EOF      the peer sent close_notify; returned again by later
                        calls
     CONCH_ERR_TLS      a corrupt record, an alert, or a protocol error; see
                        conch__tls_error().  Final, as for the handshake.
     CONCH_ERR_NOMEM    final
     CONCH_ERR_STATE    the handshake is not done
     CONCH_ERR_INVALID  |cap| is 0 */
long conch__tls_read(conch_tls *t, uint8_t *out, size_t cap);

/* Encrypts all |n| bytes of |in| and appends the records to the pending
   output.  The output buffer is not capped: the caller applies back
   pressure by looking at conch__tls_pending() before writing more.
   Returns 0, or:
     CONCH_ERR_STATE    the handshake is not done, or conch__tls_shutdown()
                        was called
     CONCH_ERR_TLS      final; see conch__tls_error()
     CONCH_ERR_NOMEM    final: part of the data may have been queued */
int conch__tls_write(conch_tls *t, const uint8_t *in, size_t n);

/* Queues a close_notify alert; later writes return CONCH_ERR_STATE and
   reads still work.  Calling it again does nothing.  Returns 0,
   CONCH_ERR_STATE (the handshake is not done), CONCH_ERR_TLS or
   CONCH_ERR_NOMEM (both final). */
int conch__tls_shutdown(conch_tls *t);

/* Sets |*p| to the ciphertext waiting to be sent and returns its length
   (|*p| is NULL when 0).  The bytes are not copied: |*p| stays valid until
   the next call on |t| other than conch__tls_pending() and
   conch__tls_error(). */
size_t conch__tls_pending(conch_tls *t, const uint8_t **p);

/* Marks the first |n| pending bytes as sent (n larger than the pending
   size is clamped).  Consumed space is reused, so memory stays near the
   most that was pending at once. */
void conch__tls_consume(conch_tls *t, size_t n);

/* The last failure as text: what failed, then OpenSSL's reasons, oldest
   first.  For example
     certificate verify failed: hostname mismatch (expected 'localhost')
     certificate verify failed: self-signed certificate in certificate
       chain (depth 1, subject '/CN=Other CA')
     handshake failed: sslv3 alert handshake failure (SSL alert number 40)
     handshake failed: the server did not answer with TLS: wrong version
       number
     server did not select ALPN h2 (no ALPN)
     read failed: tlsv13 alert certificate required (SSL alert number 116)
     read failed: decryption failed or bad record mac
   "" when nothing failed.  Never NULL; valid until |t| is freed. */
const char *conch__tls_error(const conch_tls *t);

/* Non-zero when the handshake selected ALPN "h2". */
int conch__tls_is_h2(const conch_tls *t);

/* What ALPN selected: CONCH_TLS_PROTO_H2, _H1 ("http/1.1") or _NONE (no
   ALPN, or |t| NULL). */
enum { CONCH_TLS_PROTO_NONE = 0, CONCH_TLS_PROTO_H2, CONCH_TLS_PROTO_H1 };
int conch__tls_alpn(const conch_tls *t);

/* Bytes fed and not yet read: ciphertext OpenSSL has not taken, and
   plaintext of a record it decrypted (a driver reads no more from its
   transport while this is large, and pulls more when it has room). */
size_t conch__tls_buffered(const conch_tls *t);

/* ---- The server side (server.c) ------------------------------------------

   A server context: the certificate chain and key of |cfg| (cert_file or
   cert_pem, key_file or key_pem or the key in the certificate's PEM;
   insecure_skip_verify is ignored; the CAs verify client certificates
   when |cfg->client_auth| asks for them), TLS 1.2 or
   newer with the suites of the client (ECDHE/DHE and AEAD under 1.2), no
   renegotiation or compression, the server's suite order.  ALPN: "h2"
   when the client offers it, else "http/1.1" unless |cfg->alpn| is
   CONCH_TLS_ALPN_H2; a client offering neither gets the
   no_application_protocol alert.  Connections from it are driven as the
   client's are (feed, handshake, read, write, pending, consume); their
   handshake never fails on ALPN (see conch__tls_alpn() afterwards).
   Returns what conch__tls_ctx_new() returns. */
int conch__tls_server_ctx_new(conch_tls_ctx **out, const conch_mem *mem,
                              const conch_tls_config *cfg, char *err,
                              size_t errlen);
/* A server connection on the server context |ctx|.  Returns 0,
   CONCH_ERR_INVALID (NULL argument, a client context) or
   CONCH_ERR_NOMEM. */
int conch__tls_accept_new(conch_tls **out, conch_tls_ctx *ctx);

/* Loads the CAs of |file| and |pem| (either may be NULL; |len| 0: |pem| is
   NUL-terminated) into a scratch store, to check them.  Returns 0,
   CONCH_ERR_TLS (|err| says why) or CONCH_ERR_NOMEM. */
int conch__tls_ca_check(const char *file, const char *pem, size_t len,
                        char *err, size_t errlen);

/* The client certificate of a server connection, once its handshake is
   done and it verified: the leaf's subject as RFC 2253 text
   ("CN=client,O=Example") and its DER encoding (|*len| bytes).  NULL
   (|*len| 0) when the client sent none or the context asks for none.
   Valid until |t| is freed. */
const char *conch__tls_peer_subject(const conch_tls *t);
const uint8_t *conch__tls_peer_der(const conch_tls *t, size_t *len);

#endif
