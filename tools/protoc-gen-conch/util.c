/* Buffers, arena and hash map of the stub generator. */
#include "util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sg_buf -------------------------------------------------------------- */

void sg_buf_init(sg_buf *b) { memset(b, 0, sizeof(*b)); }

void sg_buf_free(sg_buf *b) {
  free(b->data);
  sg_buf_init(b);
}

void sg_buf_reset(sg_buf *b) {
  b->len = 0;
  if (b->data != NULL) {
    b->data[0] = '\0';
  }
}

/* Makes room for |n| more bytes plus the NUL. */
static int reserve(sg_buf *b, size_t n) {
  size_t cap;
  char *p;

  if (b->oom) {
    return -1;
  }
  if (n < b->cap - b->len && b->data != NULL) {
    return 0;
  }
  if (n > SIZE_MAX / 2 - b->len - 1) {
    b->oom = 1;
    return -1;
  }
  cap = b->cap > 0 ? b->cap : 256;
  while (cap - b->len <= n) {
    cap *= 2;
  }
  p = realloc(b->data, cap);
  if (p == NULL) {
    b->oom = 1;
    return -1;
  }
  b->data = p;
  b->cap = cap;
  return 0;
}

void sg_buf_add(sg_buf *b, const char *s, size_t n) {
  if (reserve(b, n) != 0) {
    return;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void sg_buf_puts(sg_buf *b, const char *s) { sg_buf_add(b, s, strlen(s)); }

void sg_buf_putc(sg_buf *b, char c) { sg_buf_add(b, &c, 1); }

void sg_buf_vprintf(sg_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  int n;

  va_copy(ap2, ap);
  n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) {
    b->oom = 1;
    return;
  }
  if (reserve(b, (size_t)n) != 0) {
    return;
  }
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void sg_buf_printf(sg_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sg_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

const char *sg_buf_str(const sg_buf *b) {
  return b->data != NULL ? b->data : "";
}

/* ---- sg_arena ------------------------------------------------------------ */

#define ARENA_BLOCK 16384

struct sg_arena_block {
  sg_arena_block *next;
  size_t used;
  size_t cap;
  max_align_t data[]; /* aligned for anything */
};

void sg_arena_init(sg_arena *a) { a->head = NULL; }

void sg_arena_free(sg_arena *a) {
  sg_arena_block *b = a->head;
  while (b != NULL) {
    sg_arena_block *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
}

void *sg_arena_alloc(sg_arena *a, size_t n) {
  const size_t align = sizeof(max_align_t);
  sg_arena_block *b = a->head;
  size_t cap;
  void *p;

  if (n > SIZE_MAX - align - sizeof(sg_arena_block)) {
    return NULL;
  }
  n = (n + align - 1) / align * align;
  if (b == NULL || b->cap - b->used < n) {
    /* Big requests get a block of their own; the current block stays
       current so its free space is not lost. */
    cap = n > ARENA_BLOCK / 4 ? n : ARENA_BLOCK;
    b = malloc(sizeof(*b) + cap);
    if (b == NULL) {
      return NULL;
    }
    b->used = 0;
    b->cap = cap;
    if (n > ARENA_BLOCK / 4 && a->head != NULL) {
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = a->head;
      a->head = b;
    }
  }
  p = (char *)b->data + b->used;
  b->used += n;
  return p;
}

void *sg_arena_calloc(sg_arena *a, size_t n, size_t size) {
  void *p;
  if (size != 0 && n > SIZE_MAX / size) {
    return NULL;
  }
  p = sg_arena_alloc(a, n * size);
  if (p != NULL) {
    memset(p, 0, n * size);
  }
  return p;
}

char *sg_arena_strndup(sg_arena *a, const char *s, size_t n) {
  char *p;
  if (n == SIZE_MAX) {
    return NULL;
  }
  p = sg_arena_alloc(a, n + 1);
  if (p != NULL) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

char *sg_arena_strdup(sg_arena *a, const char *s) {
  return sg_arena_strndup(a, s, strlen(s));
}

char *sg_arena_printf(sg_arena *a, const char *fmt, ...) {
  va_list ap;
  int n;
  char *p;

  va_start(ap, fmt);
  n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    return NULL;
  }
  p = sg_arena_alloc(a, (size_t)n + 1);
  if (p == NULL) {
    return NULL;
  }
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

/* ---- sg_map -------------------------------------------------------------- */

void sg_map_init(sg_map *m, sg_arena *arena) {
  memset(m, 0, sizeof(*m));
  m->arena = arena;
}

void sg_map_free(sg_map *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = 0;
  m->n = 0;
}

static size_t hash(const char *s) {
  uint64_t h = 14695981039346656037u; /* FNV-1a */
  for (; *s != '\0'; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211u;
  }
  return (size_t)h;
}

static sg_map_slot *find(const sg_map *m, const char *key) {
  size_t i = hash(key) & (m->cap - 1);
  for (;;) {
    sg_map_slot *s = &m->slots[i];
    if (s->key == NULL || strcmp(s->key, key) == 0) {
      return s;
    }
    i = (i + 1) & (m->cap - 1);
  }
}

int sg_map_get(const sg_map *m, const char *key, void **value) {
  sg_map_slot *s;
  if (m->cap == 0) {
    return 0;
  }
  s = find(m, key);
  if (s->key == NULL) {
    return 0;
  }
  *value = s->value;
  return 1;
}

static int grow(sg_map *m) {
  size_t cap = m->cap > 0 ? m->cap * 2 : 64;
  sg_map_slot *old = m->slots;
  size_t oldcap = m->cap;
  size_t i;

  if (cap > SIZE_MAX / sizeof(*old)) {
    return -1;
  }
  m->slots = calloc(cap, sizeof(*old));
  if (m->slots == NULL) {
    m->slots = old;
    return -1;
  }
  m->cap = cap;
  for (i = 0; i < oldcap; i++) {
    if (old[i].key != NULL) {
      *find(m, old[i].key) = old[i];
    }
  }
  free(old);
  return 0;
}

int sg_map_add(sg_map *m, const char *key, void *value) {
  sg_map_slot *s;

  /* Kept at most half full, so probing always ends on an empty slot. */
  if ((m->n + 1) * 2 > m->cap && grow(m) != 0) {
    return -1;
  }
  s = find(m, key);
  if (s->key != NULL) {
    return 0;
  }
  s->key = sg_arena_strdup(m->arena, key);
  if (s->key == NULL) {
    return -1;
  }
  s->value = value;
  m->n++;
  return 1;
}
