/* "zstd": zstd frames (RFC 8878) with libzstd, over the client's
   allocator.  One compression and one decompression context per client,
   reset between messages. */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_createDCtx_advanced, customMem */
#include <zstd.h>
#include <zstd_errors.h>

#include <string.h>

#include <conch/status.h>

#include "compress.h"
#include "mem_int.h"

#define ZS_DEFAULT_LEVEL 3
#define ZS_MAX_LEVEL 22

/* The window a frame may ask for: 8 MiB covers every level up to 19 (the
   usual ceiling) whatever the content size; beyond that, no more than the
   receive limit (a window needs never exceed the decoded size), capped at
   zstd's default 128 MiB. */
#define ZS_WLOG_FLOOR 23
#define ZS_WLOG_CEIL 27

/* Contexts that grew past this (a large window, a high level) are freed
   after the message rather than kept for the client's life, as the
   client's decompression buffer is. */
#define ZS_KEEP_MAX ((size_t)4 << 20)

struct conch_zstd {
  ZSTD_CCtx *cctx;
  ZSTD_DCtx *dctx;
};

static void *zs_alloc(void *opaque, size_t size) {
  return conch__malloc(opaque, size);
}

static void zs_free(void *opaque, void *p) {
  conch__free(opaque, p);
}

static ZSTD_customMem zs_mem(const conch_mem *mem) {
  ZSTD_customMem m;
  m.customAlloc = zs_alloc;
  m.customFree = zs_free;
  m.opaque = (void *)mem;
  return m;
}

static int zs_get(struct conch_zstd **zs, const conch_mem *mem) {
  if (*zs == NULL) {
    *zs = conch__calloc(mem, 1, sizeof(**zs));
    if (*zs == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  return 0;
}

void conch__zstd_free(struct conch_zstd *zs, const conch_mem *mem) {
  if (zs == NULL) {
    return;
  }
  ZSTD_freeCCtx(zs->cctx);
  ZSTD_freeDCtx(zs->dctx);
  conch__free(mem, zs);
}

static int zs_err(size_t r) {
  return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation
             ? CONCH_ERR_NOMEM
             : CONCH_ERR_COMPRESSION;
}

int conch__zstd_compress(struct conch_zstd **zs, const conch_mem *mem,
                         int level, const uint8_t *in, size_t n,
                         conch_buf *out) {
  size_t bound, r;
  int rv;

  if (level == 0 || level < -1 || level > ZS_MAX_LEVEL) {
    return CONCH_ERR_INVALID;
  }
  rv = zs_get(zs, mem);
  if (rv != 0) {
    return rv;
  }
  if ((*zs)->cctx == NULL) {
    (*zs)->cctx = ZSTD_createCCtx_advanced(zs_mem(mem));
    if ((*zs)->cctx == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  bound = ZSTD_compressBound(n);
  if (ZSTD_isError(bound)) {
    return CONCH_ERR_COMPRESSION;
  }
  rv = conch__buf_reserve(out, mem, bound);
  if (rv != 0) {
    return rv;
  }
  ZSTD_CCtx_reset((*zs)->cctx, ZSTD_reset_session_and_parameters);
  r = ZSTD_CCtx_setParameter((*zs)->cctx, ZSTD_c_compressionLevel,
                             level < 0 ? ZS_DEFAULT_LEVEL : level);
  if (ZSTD_isError(r)) {
    return CONCH_ERR_COMPRESSION;
  }
  r = ZSTD_compress2((*zs)->cctx, out->data + out->len, out->cap - out->len,
                     in, n);
  if (ZSTD_isError(r)) {
    return zs_err(r);
  }
  out->len += r;
  if (ZSTD_sizeof_CCtx((*zs)->cctx) > ZS_KEEP_MAX) {
    ZSTD_freeCCtx((*zs)->cctx);
    (*zs)->cctx = NULL;
  }
  return 0;
}

static unsigned wlog_max(size_t max_out) {
  unsigned w = ZS_WLOG_FLOOR;

  if (max_out == 0) {
    return ZS_WLOG_CEIL;
  }
  while (w < ZS_WLOG_CEIL && ((size_t)1 << w) < max_out) {
    w++;
  }
  return w;
}

static int zs_dctx(struct conch_zstd *z, const conch_mem *mem,
                   size_t max_out) {
  size_t r;

  if (z->dctx == NULL) {
    z->dctx = ZSTD_createDCtx_advanced(zs_mem(mem));
    if (z->dctx == NULL) {
      return CONCH_ERR_NOMEM;
    }
  }
  ZSTD_DCtx_reset(z->dctx, ZSTD_reset_session_only);
  r = ZSTD_DCtx_setParameter(z->dctx, ZSTD_d_windowLogMax,
                             (int)wlog_max(max_out));
  return ZSTD_isError(r) ? CONCH_ERR_COMPRESSION : 0;
}

int conch__zstd_decompress(struct conch_zstd **zs, const conch_mem *mem,
                           const uint8_t *in, size_t n, size_t max_out,
                           conch_buf *out) {
  size_t base = conch__buf_size(out);
  ZSTD_inBuffer ib;
  ZSTD_outBuffer ob;
  size_t room, r, in_before;
  unsigned long long fcs; /* content size the current frame declares */
  size_t frame_out;       /* bytes it has produced */
  int rv;

  rv = zs_get(zs, mem);
  if (rv == 0) {
    rv = zs_dctx(*zs, mem, max_out);
  }
  if (rv != 0) {
    return rv;
  }
  ib.src = in;
  ib.size = n;
  ib.pos = 0;
  fcs = ZSTD_getFrameContentSize(in, n);
  frame_out = 0;
  for (;;) {
    rv = conch__comp_room(out, mem, conch__buf_size(out) - base, max_out,
                          SIZE_MAX, &room);
    if (rv != 0) {
      break;
    }
    ob.dst = out->data + out->len;
    ob.size = room;
    ob.pos = 0;
    in_before = ib.pos;
    r = ZSTD_decompressStream((*zs)->dctx, &ob, &ib);
    out->len += ob.pos;
    frame_out += ob.pos;
    if (max_out != 0 && conch__buf_size(out) - base > max_out) {
      rv = CONCH_ERR_LIMIT;
      break;
    }
    if (ZSTD_isError(r)) {
      rv = ZSTD_getErrorCode(r) == ZSTD_error_frameParameter_windowTooLarge
               ? CONCH_ERR_LIMIT
               : zs_err(r);
      break;
    }
    if (r == 0) {
      /* A frame ended and is all out.  libzstd checks the declared
         content size on some paths only (not when the output came in
         small steps): check it here, so the outcome never depends on
         the buffer sizes. */
      if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != ZSTD_CONTENTSIZE_ERROR &&
          fcs != frame_out) {
        rv = CONCH_ERR_COMPRESSION;
        break;
      }
      if (ib.pos == ib.size) {
        break; /* several frames may follow each other */
      }
      fcs = ZSTD_getFrameContentSize((const uint8_t *)in + ib.pos,
                                     ib.size - ib.pos);
      frame_out = 0;
      continue;
    }
    if (ob.pos == ob.size) {
      continue; /* output full: there may be more to flush */
    }
    if (ib.pos == ib.size) {
      rv = CONCH_ERR_COMPRESSION; /* the input stopped inside a frame */
      break;
    }
    if (ib.pos == in_before && ob.pos == 0 && r != 0) {
      rv = CONCH_ERR_COMPRESSION; /* no progress: never loop */
      break;
    }
  }
  if (rv != 0) {
    out->len = out->off + base;
    ZSTD_DCtx_reset((*zs)->dctx, ZSTD_reset_session_only);
  }
  if (ZSTD_sizeof_DCtx((*zs)->dctx) > ZS_KEEP_MAX) {
    ZSTD_freeDCtx((*zs)->dctx);
    (*zs)->dctx = NULL;
  }
  return rv;
}
