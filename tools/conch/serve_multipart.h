/* A streaming multipart/form-data reader (RFC 7578, RFC 2046 5.1) for
   `conch serve`'s /files uploads: fed the body in pieces of any size, it
   hands out each part's name and filename once its headers end, then the
   part's data as it comes, without holding it.  Its memory is this
   struct: the boundary (at most 70 bytes, RFC 2046), and one header line
   (SRV_MP_LINE_MAX); a part's headers may total SRV_MP_HEAD_MAX.  A
   delimiter split across two feeds is found all the same: the bytes that
   might begin one are the delimiter's own prefix, so nothing is kept but
   how far it matched. */
#ifndef CONCH_SERVE_MULTIPART_H
#define CONCH_SERVE_MULTIPART_H

#include <stddef.h>
#include <stdint.h>

#define SRV_MP_BOUNDARY_MAX 70
#define SRV_MP_LINE_MAX 4096
#define SRV_MP_HEAD_MAX 16384
#define SRV_MP_VALUE_MAX 4096 /* name and filename, each */

typedef struct srv_mp_cb {
  /* A part begins: its Content-Disposition's name and filename ("" when
     absent; has_filename says whether filename was given).  Non-zero
     stops the reader (srv_mp_feed() returns SRV_MP_STOP). */
  int (*on_part)(void *ud, const char *name, const char *filename,
                 int has_filename);
  /* Data of the current part. */
  int (*on_data)(void *ud, const uint8_t *p, size_t n);
  /* The current part ended (its delimiter was read). */
  int (*on_part_end)(void *ud);
} srv_mp_cb;

enum {
  SRV_MP_OK = 0,
  SRV_MP_STOP = 1,  /* a callback said stop */
  SRV_MP_BAD = -1   /* malformed: srv_mp.err says why */
};

typedef struct srv_mp {
  char delim[4 + SRV_MP_BOUNDARY_MAX]; /* "\r\n--" boundary */
  size_t dlen;
  int state;
  size_t match;  /* bytes of |delim| matched */
  char line[SRV_MP_LINE_MAX];
  size_t llen;
  size_t head;   /* header bytes of this part so far */
  char name[SRV_MP_VALUE_MAX];
  char filename[SRV_MP_VALUE_MAX];
  int has_filename;
  int in_part;   /* on_part ran, on_part_end not yet */
  size_t parts;
  const char *err;
} srv_mp;

/* Reads the boundary from |content_type| ("multipart/form-data;
   boundary=..."; quoted or not).  Returns 0, or -1 with m->err set. */
int srv_mp_init(srv_mp *m, const char *content_type);
/* Feeds |n| body bytes.  Returns SRV_MP_OK, SRV_MP_STOP or SRV_MP_BAD;
   after anything but OK it must not be fed again. */
int srv_mp_feed(srv_mp *m, const uint8_t *p, size_t n, const srv_mp_cb *cb,
                void *ud);
/* The body ended: 0 when the close delimiter was read, else -1 (a
   truncated body) with m->err set. */
int srv_mp_finish(srv_mp *m);

/* A parameter of a header value such as Content-Disposition or
   Content-Type ("form-data; name=\"file\"; filename=a.txt"): the value of
   |key| (case-insensitive) unquoted into |out| (|cap| bytes with its NUL).
   Returns 1 found, 0 absent, -1 malformed or too long. */
int srv_mp_param(const char *value, const char *key, char *out, size_t cap);

#endif
