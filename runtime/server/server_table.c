/* The server's method table (server.c's conch_server_add_method,
   conch_server_add_route, conch_server_add_http and the lookups
   server_rpc.c makes per request): an open-addressing hash of the paths. */
#include <stdint.h>
#include <string.h>

#include "mem_int.h"
#include "server_int.h"

/* The method table is found through an open-addressing hash of the paths
   (linear probing, at most half full): a lookup costs the same with 5
   methods as with hundreds.  Up to SRV_SCAN_METHODS methods a scan is
   cheaper, and is used (the hash is kept all the same).  The hash takes
   the path 8 bytes at a time (a multiply and a shift per word); the paths
   are the server's own, so a weak spot in it could slow only its own
   lookups. */
#define SRV_SCAN_METHODS 4

static uint32_t path_hash(const char *p) {
  size_t n = strlen(p);
  uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15u;
  uint64_t w;

  for (; n >= 8; n -= 8, p += 8) {
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdu;
    h ^= h >> 32;
  }
  for (w = 0; n > 0; n--) {
    w = (w << 8) | (unsigned char)p[n - 1];
  }
  h = (h ^ w) * 0xff51afd7ed558ccdu;
  return (uint32_t)(h ^ (h >> 32));
}

static srv_method *find_method(conch_server *s, const char *path) {
  size_t mask = s->cap_slots - 1;
  size_t i;

  if (s->nmethods <= SRV_SCAN_METHODS) {
    for (i = 0; i < s->nmethods; i++) {
      if (strcmp(s->methods[i].path, path) == 0) {
        return &s->methods[i];
      }
    }
    return NULL;
  }
  for (i = path_hash(path) & mask; s->slots[i] != 0; i = (i + 1) & mask) {
    srv_method *m = &s->methods[s->slots[i] - 1];
    if (strcmp(m->path, path) == 0) {
      return m;
    }
  }
  return NULL;
}

/* Makes the hash room for |n| methods (|cap| slots, a power of two at
   least 2n) and fills it from the table.  Returns 0 or CONCH_ERR_NOMEM
   (the old hash kept). */
static int rehash(conch_server *s, size_t n) {
  size_t cap = 16;
  uint32_t *t;

  while (cap < 2 * n) {
    cap *= 2;
  }
  if (cap == s->cap_slots) {
    return 0;
  }
  t = conch__calloc(s->ep.mem, cap, sizeof(*t));
  if (t == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (size_t k = 0; k < s->nmethods; k++) {
    size_t i = path_hash(s->methods[k].path) & (cap - 1);
    while (t[i] != 0) {
      i = (i + 1) & (cap - 1);
    }
    t[i] = (uint32_t)(k + 1);
  }
  conch__free(s->ep.mem, s->slots);
  s->slots = t;
  s->cap_slots = cap;
  return 0;
}

srv_method *conch__srv_find_method(conch_server *s, const char *path);
srv_method *conch__srv_find_method(conch_server *s, const char *path) {
  return find_method(s, path);
}

srv_route *conch__srv_find_route(conch_server *s, const char *path) {
  for (size_t i = 0; i < s->nroutes; i++) {
    if (strcmp(s->routes[i].path, path) == 0) {
      return &s->routes[i];
    }
  }
  return NULL;
}

srv_http_route *conch__srv_find_http(conch_server *s, const char *path) {
  for (size_t i = 0; i < s->nhttps; i++) {
    if (strcmp(s->https[i].path, path) == 0) {
      return &s->https[i];
    }
  }
  return NULL;
}

/* A path a method, route or HTTP handler has. */
static int path_taken(conch_server *s, const char *path) {
  return find_method(s, path) != NULL ||
         conch__srv_find_route(s, path) != NULL ||
         conch__srv_find_http(s, path) != NULL;
}

int conch_server_add_http(conch_server *s, const char *path,
                          const conch_http_handler *handler, void *user_data) {
  srv_http_route *t;
  char *copy;

  if (s == NULL || path == NULL || handler == NULL ||
      handler->on_request == NULL || path[0] != '/' || path_taken(s, path)) {
    return CONCH_ERR_INVALID;
  }
  copy = conch__strdup(s->ep.mem, path);
  if (copy == NULL) {
    return CONCH_ERR_NOMEM;
  }
  /* Exchanges copy their handler: the table may move at any time. */
  t = conch__realloc(s->ep.mem, s->https, (s->nhttps + 1) * sizeof(*t));
  if (t == NULL) {
    conch__free(s->ep.mem, copy);
    return CONCH_ERR_NOMEM;
  }
  s->https = t;
  t[s->nhttps].path = copy;
  t[s->nhttps].h = *handler;
  t[s->nhttps].user_data = user_data;
  s->nhttps++;
  return 0;
}

int conch_server_add_route(conch_server *s, const char *path,
                           conch_server_route_fn fn, void *user_data) {
  srv_route *t;
  char *copy;

  if (s == NULL || path == NULL || fn == NULL || path[0] != '/' ||
      path_taken(s, path)) {
    return CONCH_ERR_INVALID;
  }
  copy = conch__strdup(s->ep.mem, path);
  if (copy == NULL) {
    return CONCH_ERR_NOMEM;
  }
  /* Calls never point into this table: it may move at any time. */
  t = conch__realloc(s->ep.mem, s->routes, (s->nroutes + 1) * sizeof(*t));
  if (t == NULL) {
    conch__free(s->ep.mem, copy);
    return CONCH_ERR_NOMEM;
  }
  s->routes = t;
  t[s->nroutes].path = copy;
  t[s->nroutes].fn = fn;
  t[s->nroutes].user_data = user_data;
  s->nroutes++;
  return 0;
}

int conch_server_add_method(conch_server *s, const conch_method *method,
                            const conch_server_handler *handler,
                            void *user_data) {
  srv_method *m;

  if (s == NULL || method == NULL || handler == NULL ||
      handler->on_call == NULL || method->path == NULL ||
      (handler->on_recv_ready != NULL &&
       (handler->on_message != NULL || handler->on_raw_message != NULL)) ||
      method->path[0] != '/' || (unsigned)method->kind > CONCH_STREAM_BIDI ||
      path_taken(s, method->path)) {
    return CONCH_ERR_INVALID;
  }
  if (s->nmethods == s->cap_methods) {
    size_t cap = s->cap_methods != 0 ? s->cap_methods * 2 : 8;
    srv_method *t;
    /* Calls point into the table: it may not move while any runs. */
    if (s->ncalls > 0) {
      return CONCH_ERR_STATE;
    }
    t = conch__realloc(s->ep.mem, s->methods, cap * sizeof(*t));
    if (t == NULL) {
      return CONCH_ERR_NOMEM;
    }
    s->methods = t;
    s->cap_methods = cap;
    for (size_t i = 0; i < s->nmethods; i++) {
      s->methods[i].m.path = s->methods[i].path;
    }
  }
  if (s->nmethods >= UINT32_MAX - 1 || rehash(s, s->nmethods + 1) != 0) {
    return CONCH_ERR_NOMEM;
  }
  m = &s->methods[s->nmethods];
  memset(m, 0, sizeof(*m));
  m->path = conch__strdup(s->ep.mem, method->path);
  if (m->path == NULL) {
    return CONCH_ERR_NOMEM;
  }
  m->m = *method;
  m->m.path = m->path;
  m->h = *handler;
  m->user_data = user_data;
  {
    size_t mask = s->cap_slots - 1;
    size_t i = path_hash(m->path) & mask;
    while (s->slots[i] != 0) {
      i = (i + 1) & mask;
    }
    s->slots[i] = (uint32_t)(s->nmethods + 1);
  }
  s->nmethods++;
  return 0;
}
