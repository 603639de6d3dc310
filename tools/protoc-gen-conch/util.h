/* protoc-gen-conch: a growable text buffer, an arena for the strings of one
   run, and a string-keyed hash map.  Plugin internals carry the prefix sg_
   (stub generator); nothing here is linked into libconch. */
#ifndef SG_UTIL_H
#define SG_UTIL_H

#include <stdarg.h>
#include <stddef.h>

#if defined(__GNUC__)
#define SG_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SG_SENTINEL __attribute__((sentinel))
#else
#define SG_PRINTF(a, b)
#define SG_SENTINEL
#endif

/* Output text.  Errors are sticky: after a failed allocation every append
   is a no-op and |oom| stays set, so a writer checks once at the end
   instead of after each of hundreds of appends. */
typedef struct sg_buf {
  char *data; /* NUL-terminated once anything was added */
  size_t len;
  size_t cap;
  int oom;
} sg_buf;

void sg_buf_init(sg_buf *b);
void sg_buf_free(sg_buf *b);
void sg_buf_reset(sg_buf *b);
void sg_buf_add(sg_buf *b, const char *s, size_t n);
void sg_buf_puts(sg_buf *b, const char *s);
void sg_buf_putc(sg_buf *b, char c);
void sg_buf_printf(sg_buf *b, const char *fmt, ...) SG_PRINTF(2, 3);
void sg_buf_vprintf(sg_buf *b, const char *fmt, va_list ap);
/* The text so far; "" when empty.  Borrowed until the next change. */
const char *sg_buf_str(const sg_buf *b);

/* Every string of the model lives here and goes at once with
   sg_arena_free(). */
typedef struct sg_arena_block sg_arena_block;
typedef struct sg_arena {
  sg_arena_block *head;
} sg_arena;

void sg_arena_init(sg_arena *a);
void sg_arena_free(sg_arena *a);
/* Returns NULL when out of memory. */
void *sg_arena_alloc(sg_arena *a, size_t n);
void *sg_arena_calloc(sg_arena *a, size_t n, size_t size);
char *sg_arena_strdup(sg_arena *a, const char *s);
char *sg_arena_strndup(sg_arena *a, const char *s, size_t n);
char *sg_arena_printf(sg_arena *a, const char *fmt, ...) SG_PRINTF(2, 3);

/* Open addressing, keys compared as strings.  Keys are copied into the
   arena given at init; values are the caller's. */
typedef struct sg_map_slot {
  const char *key;
  void *value;
} sg_map_slot;

typedef struct sg_map {
  sg_arena *arena;
  sg_map_slot *slots;
  size_t cap; /* a power of two, or 0 */
  size_t n;
} sg_map;

void sg_map_init(sg_map *m, sg_arena *arena);
void sg_map_free(sg_map *m);
/* Returns the value of |key| in |*value| and 1, or 0 when absent. */
int sg_map_get(const sg_map *m, const char *key, void **value);
/* Adds |key| if absent.  Returns 1 when added, 0 when it was there already
   (nothing changes), -1 when out of memory. */
int sg_map_add(sg_map *m, const char *key, void *value);

#endif
