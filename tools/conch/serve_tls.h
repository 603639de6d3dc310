/* Server-side TLS for conch serve (the runtime's tls.h is client-only). */
#ifndef CONCH_SERVE_TLS_H
#define CONCH_SERVE_TLS_H

#include <openssl/ssl.h>

/* A context serving |cert| (PEM chain) and |key| (PEM) with ALPN h2
   (preferred) and http/1.1.  NULL after printing why on stderr. */
SSL_CTX *srv_tls_new(const char *cert, const char *key);

#endif
