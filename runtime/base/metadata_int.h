/* Internals of conch_metadata, shared by the call and protocol code. */
#ifndef CONCH_METADATA_INT_H
#define CONCH_METADATA_INT_H

#include <stddef.h>
#include <stdint.h>

#include <conch/metadata.h>

#include "buf.h"

typedef struct conch_md_entry {
  uint32_t name_off; /* into |strings|; NUL-terminated */
  uint32_t name_len;
  uint32_t value_off; /* NUL-terminated too */
  uint32_t value_len;
} conch_md_entry;

struct conch_metadata {
  const conch_mem *mem;
  conch_md_entry *ents;
  size_t n;
  size_t cap;
  conch_buf strings; /* names and values, each followed by a NUL */
};

/* For metadata embedded in another struct (no allocation until used). */
void conch__metadata_init(conch_metadata *md, const conch_mem *mem);
void conch__metadata_clear(conch_metadata *md);

/* Appends a pair received from the wire: no validation beyond what HTTP/2
   already did; the name is lowercased.  For a name ending in "-bin" the
   value is split on ',' and each element base64-decoded into its own pair;
   if any element is not valid base64 the whole value is kept verbatim as one
   pair.  Returns 0 or CONCH_ERR_NOMEM (nothing added). */
int conch__metadata_add_wire(conch_metadata *md, const char *name,
                             size_t name_len, const char *value,
                             size_t value_len);

/* Appends a pair as given, lowercasing the name, without any decoding or
   validation.  Returns 0 or CONCH_ERR_NOMEM. */
int conch__metadata_add_raw(conch_metadata *md, const char *name,
                            size_t name_len, const void *value,
                            size_t value_len);

/* Non-zero when |name| is a valid metadata name to send: 1..255 bytes of
   [0-9a-z_.-] (lowercase only: callers lowercase first). */
int conch__metadata_name_ok(const char *name, size_t len);

/* Non-zero when |value| may be sent as a text (non "-bin") value:
   bytes 0x20..0x7E and TAB. */
int conch__metadata_value_ok(const uint8_t *value, size_t len);

/* Non-zero when |name| (lowercase) belongs to the protocol and may not be
   sent as application metadata: pseudo-headers, connection-specific fields,
   te, host, content-type/-length/-encoding, accept-encoding, connect-*,
   trailer-connect-*, grpc-*, x-user-agent, x-grpc-web. */
int conch__metadata_reserved(const char *name, size_t len);

/* Non-zero when |name| ends in "-bin". */
int conch__metadata_is_bin(const char *name, size_t len);

#endif
