/* Retries by policy (conch/retry.h): the options' table of policies and
   the service config that fills it, the choice made when an attempt ends,
   the backoff, the throttle.  The call's side (what it keeps of its
   request, when it commits, how it is sent again) is call.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "call_int.h"
#include "client_int.h"
#include "conn_int.h"
#include "json.h"
#include "mem_int.h"
#include "opts_int.h"
#include "retry.h"
#include "timer.h"
#include "wire.h"

/* ---- The table ---------------------------------------------------------- */

/* Options own their strings with libc (opts.c's opts_mem). */
static const conch_mem *table_mem(void) { return conch_mem_default(); }

void conch__retry_table_clear(conch_client_opts *o, const conch_mem *mem) {
  size_t i;
  for (i = 0; i < o->nretry; i++) {
    conch__free(mem, o->retry[i].name);
  }
  conch__free(mem, o->retry);
  o->retry = NULL;
  o->nretry = 0;
}

int conch__retry_table_copy(conch_client_opts *dst,
                            const conch_client_opts *src,
                            const conch_mem *mem) {
  size_t i;
  dst->retry = NULL;
  dst->nretry = 0;
  if (src->nretry == 0) {
    return 0;
  }
  dst->retry = conch__calloc(mem, src->nretry, sizeof(*dst->retry));
  if (dst->retry == NULL) {
    return CONCH_ERR_NOMEM;
  }
  for (i = 0; i < src->nretry; i++) {
    dst->retry[i] = src->retry[i];
    dst->retry[i].name = conch__strdup(mem, src->retry[i].name);
    dst->nretry = i + 1;
    if (dst->retry[i].name == NULL) {
      conch__retry_table_clear(dst, mem);
      return CONCH_ERR_NOMEM;
    }
  }
  return 0;
}

static int policy_ok(const conch_retry_policy *p) {
  return p->max_attempts >= 2 && p->initial_backoff_ms > 0 &&
         p->max_backoff_ms > 0 && p->backoff_multiplier > 0.0 &&
         p->backoff_multiplier <= 1e6 && p->retryable_codes != 0 &&
         (p->retryable_codes & CONCH_RETRY_CODE(CONCH_CODE_OK)) == 0 &&
         (p->retryable_codes >> 17) == 0;
}

static int name_ok(const char *name) {
  const char *slash = strchr(name, '/');
  return name[0] != '/' && (slash == NULL || strchr(slash + 1, '/') == NULL);
}

/* Sets (a retry policy |p| or a hedging policy |h|) or removes (both
   NULL) the entry of |name| in |o|. */
static int table_set(conch_client_opts *o, const char *name,
                     const conch_retry_policy *p,
                     const conch_hedge_policy *h) {
  const conch_mem *mem = table_mem();
  size_t i;
  for (i = 0; i < o->nretry && strcmp(o->retry[i].name, name) != 0; i++) {
  }
  if (p == NULL && h == NULL) {
    if (i < o->nretry) {
      conch__free(mem, o->retry[i].name);
      o->retry[i] = o->retry[o->nretry - 1];
      o->nretry--;
    }
    return 0;
  }
  if (i == o->nretry) {
    conch_retry_entry *t;
    char *copy;
    if (o->nretry == CONCH__RETRY_MAX_NAMES) {
      return CONCH_ERR_INVALID;
    }
    copy = conch__strdup(mem, name);
    if (copy == NULL) {
      return CONCH_ERR_NOMEM;
    }
    t = conch__realloc(mem, o->retry, (o->nretry + 1) * sizeof(*t));
    if (t == NULL) {
      conch__free(mem, copy);
      return CONCH_ERR_NOMEM;
    }
    o->retry = t;
    t[i].name = copy;
    o->nretry++;
  }
  memset(&o->retry[i].p, 0, sizeof(o->retry[i].p));
  memset(&o->retry[i].h, 0, sizeof(o->retry[i].h));
  o->retry[i].hedge = h != NULL;
  if (h != NULL) {
    o->retry[i].h = *h;
  } else {
    o->retry[i].p = *p;
  }
  return 0;
}

/* What both setters do first: |opts| and |*name| checked (NULL is ""),
   and |policy| (NULL, or a versioned struct whose struct_size comes
   first) copied into |dst|, |size| bytes in this build.  Returns 0 or
   CONCH_ERR_INVALID. */
static int setter_begin(const conch_client_opts *opts, const char **name,
                        const void *policy, void *dst, size_t size) {
  if (opts == NULL) {
    return CONCH_ERR_INVALID;
  }
  if (*name == NULL) {
    *name = "";
  }
  if (!name_ok(*name)) {
    return CONCH_ERR_INVALID;
  }
  if (policy != NULL) {
    size_t given, n;
    memcpy(&given, policy, sizeof(given));
    n = given < size ? given : size;
    if (n < sizeof(size_t)) {
      return CONCH_ERR_INVALID;
    }
    memcpy(dst, policy, n);
    memcpy(dst, &size, sizeof(size));
  }
  return 0;
}

static int cap_attempts(int n) {
  return n > CONCH__ATTEMPTS_MAX ? CONCH__ATTEMPTS_MAX : n;
}

static int hedge_ok(const conch_hedge_policy *h) {
  return h->max_attempts >= 2 && h->hedging_delay_ms >= 0 &&
         (h->non_fatal_codes & CONCH_RETRY_CODE(CONCH_CODE_OK)) == 0 &&
         (h->non_fatal_codes >> 17) == 0;
}

int conch_client_opts_set_retry(conch_client_opts *opts, const char *name,
                                const conch_retry_policy *policy) {
  conch_retry_policy p = CONCH_RETRY_POLICY_INIT;
  if (setter_begin(opts, &name, policy, &p, sizeof(p)) != 0) {
    return CONCH_ERR_INVALID;
  }
  if (policy == NULL) {
    return table_set(opts, name, NULL, NULL);
  }
  if (!policy_ok(&p)) {
    return CONCH_ERR_INVALID;
  }
  p.max_attempts = cap_attempts(p.max_attempts);
  if (p.buffer_bytes == 0) {
    p.buffer_bytes = CONCH__RETRY_BUFFER_DEFAULT;
  }
  return table_set(opts, name, &p, NULL);
}

int conch_client_opts_set_hedge(conch_client_opts *opts, const char *name,
                                const conch_hedge_policy *policy) {
  conch_hedge_policy h = CONCH_HEDGE_POLICY_INIT;
  if (setter_begin(opts, &name, policy, &h, sizeof(h)) != 0) {
    return CONCH_ERR_INVALID;
  }
  if (policy == NULL) {
    return table_set(opts, name, NULL, NULL);
  }
  if (!hedge_ok(&h)) {
    return CONCH_ERR_INVALID;
  }
  h.max_attempts = cap_attempts(h.max_attempts);
  return table_set(opts, name, NULL, &h);
}

int conch_client_opts_set_retry_throttle(conch_client_opts *opts,
                                         int max_tokens, double token_ratio) {
  if (opts == NULL || max_tokens < 0 || max_tokens > 1000) {
    return CONCH_ERR_INVALID;
  }
  if (max_tokens == 0) {
    opts->retry_max_tokens = 0;
    opts->retry_token_ratio = 0;
    return 0;
  }
  if (!(token_ratio > 0.0) || token_ratio > (double)max_tokens) {
    return CONCH_ERR_INVALID;
  }
  opts->retry_max_tokens = max_tokens;
  /* Thousandths, as gRPC reads it. */
  opts->retry_token_ratio = (int)(token_ratio * 1000.0);
  if (opts->retry_token_ratio == 0) {
    opts->retry_token_ratio = 1;
  }
  return 0;
}

/* ---- The service config ------------------------------------------------- */

typedef struct sc_parse {
  const uint8_t *p;
  size_t n;
  char *err;
  size_t errlen;
  conch_client_opts staged; /* only its retry table and throttle */
} sc_parse;

static int sc_fail(sc_parse *s, const char *msg) {
  if (s->err != NULL && s->errlen > 0) {
    size_t k = strlen(msg);
    if (k >= s->errlen) {
      k = s->errlen - 1;
    }
    memcpy(s->err, msg, k);
    s->err[k] = '\0';
  }
  return CONCH_ERR_INVALID;
}

static double sc_number(const sc_parse *s, size_t at) {
  return strtod((const char *)s->p + at, NULL);
}

/* Whether |v| (within +/- 2^53) is a whole number; libm is not needed. */
static int whole(double v) {
  return v >= -9007199254740992.0 && v <= 9007199254740992.0 &&
         v == (double)(long long)v;
}

/* A string of at most |cap| - 1 bytes into |out|; -1 when it is longer. */
static int sc_string(const sc_parse *s, size_t at, char *out, size_t cap) {
  if (conch__json_strlen(s->p, at) >= cap) {
    return -1;
  }
  conch__json_string(s->p, at, out);
  return 0;
}

/* A protobuf Duration in JSON ("1.5s") in milliseconds, rounded up; -1
   when it is not one. */
static long sc_duration(const sc_parse *s, size_t at) {
  char buf[64], *end;
  double v;
  if (conch__json_kind(s->p, at) != CONCH_JSON_STRING ||
      sc_string(s, at, buf, sizeof(buf)) != 0) {
    return -1;
  }
  v = strtod(buf, &end);
  if (end == buf || strcmp(end, "s") != 0 || !(v >= 0.0) || v > 3.15e8) {
    return -1;
  }
  {
    double ms = v * 1000.0;
    long r = (long)ms;
    return (double)r < ms ? r + 1 : r; /* rounded up */
  }
}

static int sc_code(const sc_parse *s, size_t at, uint32_t *bits) {
  int code = -1;
  if (conch__json_kind(s->p, at) == CONCH_JSON_NUMBER) {
    double v = sc_number(s, at);
    if (v >= 0 && v <= 16 && whole(v)) {
      code = (int)v;
    }
  } else if (conch__json_kind(s->p, at) == CONCH_JSON_STRING) {
    char buf[32];
    int c;
    if (sc_string(s, at, buf, sizeof(buf)) == 0) {
      for (c = 0; c <= 16; c++) {
        if (strcasecmp(buf, conch_code_name((conch_code)c)) == 0) {
          code = c;
        }
      }
    }
  }
  if (code < 0) {
    return -1;
  }
  *bits |= CONCH_RETRY_CODE(code);
  return 0;
}

/* |what|.maxAttempts: an integer of 2 or more, capped as the setters do. */
static int sc_attempts(sc_parse *s, size_t at, const char *what, int *out) {
  double v = conch__json_kind(s->p, at) == CONCH_JSON_NUMBER
                 ? sc_number(s, at)
                 : -1;
  char msg[96];
  /* Past 2^53 every double is whole (and capped below): only a fraction
     below it is refused. */
  if (!(v >= 2) || (v <= 9007199254740992.0 && !whole(v))) {
    snprintf(msg, sizeof(msg), "%s.maxAttempts must be an integer of 2 or "
             "more", what);
    return sc_fail(s, msg);
  }
  *out = v > CONCH__ATTEMPTS_MAX ? CONCH__ATTEMPTS_MAX : (int)v;
  return 0;
}

/* |what|.|member|: an array of codes (names or numbers), or'ed into
   |*bits|; OK is refused. */
static int sc_codes(sc_parse *s, size_t at, const char *what,
                    const char *member, uint32_t *bits) {
  size_t e = at, v;
  char msg[128];
  if (conch__json_kind(s->p, at) != CONCH_JSON_ARRAY) {
    snprintf(msg, sizeof(msg), "%s.%s is not an array", what, member);
    return sc_fail(s, msg);
  }
  while (conch__json_element(s->p, s->n, &e, &v)) {
    if (sc_code(s, v, bits) != 0) {
      snprintf(msg, sizeof(msg), "%s.%s: unknown status code", what, member);
      return sc_fail(s, msg);
    }
  }
  if (*bits & CONCH_RETRY_CODE(CONCH_CODE_OK)) {
    snprintf(msg, sizeof(msg), "%s.%s cannot hold OK", what, member);
    return sc_fail(s, msg);
  }
  return 0;
}

static int sc_policy(sc_parse *s, size_t at, conch_retry_policy *p) {
  size_t it = at, key, val;
  if (conch__json_kind(s->p, at) != CONCH_JSON_OBJECT) {
    return sc_fail(s, "retryPolicy is not an object");
  }
  while (conch__json_member(s->p, s->n, &it, &key, &val)) {
    int kind = conch__json_kind(s->p, val);
    int rv = 0;
    if (conch__json_string_is(s->p, key, "maxAttempts")) {
      rv = sc_attempts(s, val, "retryPolicy", &p->max_attempts);
    } else if (conch__json_string_is(s->p, key, "initialBackoff")) {
      p->initial_backoff_ms = sc_duration(s, val);
      if (p->initial_backoff_ms <= 0) {
        return sc_fail(s, "retryPolicy.initialBackoff must be a duration "
                          "above 0 (\"0.1s\")");
      }
    } else if (conch__json_string_is(s->p, key, "maxBackoff")) {
      p->max_backoff_ms = sc_duration(s, val);
      if (p->max_backoff_ms <= 0) {
        return sc_fail(s, "retryPolicy.maxBackoff must be a duration above 0 "
                          "(\"1s\")");
      }
    } else if (conch__json_string_is(s->p, key, "backoffMultiplier")) {
      double v = kind == CONCH_JSON_NUMBER ? sc_number(s, val) : -1;
      if (!(v > 0) || v > 1e6) {
        return sc_fail(s, "retryPolicy.backoffMultiplier must be a number "
                          "above 0");
      }
      p->backoff_multiplier = v;
    } else if (conch__json_string_is(s->p, key, "retryableStatusCodes")) {
      rv = sc_codes(s, val, "retryPolicy", "retryableStatusCodes",
                    &p->retryable_codes);
    }
    if (rv != 0) {
      return rv;
    }
  }
  if (p->max_attempts == 0 || p->initial_backoff_ms == 0 ||
      p->max_backoff_ms == 0 || p->backoff_multiplier == 0.0 ||
      p->retryable_codes == 0) {
    return sc_fail(s, "retryPolicy needs maxAttempts, initialBackoff, "
                      "maxBackoff, backoffMultiplier and a non-empty "
                      "retryableStatusCodes");
  }
  return 0;
}

/* The names of a methodConfig entry, each set to |p| or |h|. */
static int sc_names(sc_parse *s, size_t at, const conch_retry_policy *p,
                    const conch_hedge_policy *h) {
  size_t e = at, v;
  if (conch__json_kind(s->p, at) != CONCH_JSON_ARRAY) {
    return sc_fail(s, "methodConfig.name is not an array");
  }
  while (conch__json_element(s->p, s->n, &e, &v)) {
    char service[512] = "", method[256] = "", name[770];
    size_t it = v, key, val;
    int rv;
    if (conch__json_kind(s->p, v) != CONCH_JSON_OBJECT) {
      return sc_fail(s, "methodConfig.name holds something not an object");
    }
    while (conch__json_member(s->p, s->n, &it, &key, &val)) {
      int is_s = conch__json_string_is(s->p, key, "service");
      int is_m = conch__json_string_is(s->p, key, "method");
      if (!is_s && !is_m) {
        continue;
      }
      if (conch__json_kind(s->p, val) != CONCH_JSON_STRING ||
          sc_string(s, val, is_s ? service : method,
                    is_s ? sizeof(service) : sizeof(method)) != 0 ||
          strchr(is_s ? service : method, '/') != NULL) {
        return sc_fail(s, "methodConfig.name: service and method must be "
                          "short strings without '/'");
      }
    }
    if (service[0] == '\0' && method[0] != '\0') {
      return sc_fail(s, "methodConfig.name: a method needs its service");
    }
    snprintf(name, sizeof(name), "%s%s%s", service, method[0] ? "/" : "",
             method);
    rv = table_set(&s->staged, name, p, h);
    if (rv == CONCH_ERR_INVALID) {
      return sc_fail(s, "more than 64 names with a retry policy");
    }
    if (rv != 0) {
      return rv;
    }
  }
  return 0;
}

static int sc_hedge(sc_parse *s, size_t at, conch_hedge_policy *h) {
  size_t it = at, key, val;
  int have_max = 0;
  if (conch__json_kind(s->p, at) != CONCH_JSON_OBJECT) {
    return sc_fail(s, "hedgingPolicy is not an object");
  }
  while (conch__json_member(s->p, s->n, &it, &key, &val)) {
    int rv = 0;
    if (conch__json_string_is(s->p, key, "maxAttempts")) {
      rv = sc_attempts(s, val, "hedgingPolicy", &h->max_attempts);
      have_max = 1;
    } else if (conch__json_string_is(s->p, key, "hedgingDelay")) {
      h->hedging_delay_ms = sc_duration(s, val);
      if (h->hedging_delay_ms < 0) {
        return sc_fail(s, "hedgingPolicy.hedgingDelay must be a duration "
                          "(\"0.1s\")");
      }
    } else if (conch__json_string_is(s->p, key, "nonFatalStatusCodes")) {
      rv = sc_codes(s, val, "hedgingPolicy", "nonFatalStatusCodes",
                    &h->non_fatal_codes);
    }
    if (rv != 0) {
      return rv;
    }
  }
  if (!have_max) {
    return sc_fail(s, "hedgingPolicy needs maxAttempts");
  }
  return 0;
}

static int sc_method_configs(sc_parse *s, size_t at) {
  size_t e = at, v;
  if (conch__json_kind(s->p, at) != CONCH_JSON_ARRAY) {
    return sc_fail(s, "methodConfig is not an array");
  }
  while (conch__json_element(s->p, s->n, &e, &v)) {
    conch_retry_policy p = CONCH_RETRY_POLICY_INIT;
    conch_hedge_policy h = CONCH_HEDGE_POLICY_INIT;
    size_t it = v, key, val, names = 0;
    int have = 0, hedge = 0, rv;
    if (conch__json_kind(s->p, v) != CONCH_JSON_OBJECT) {
      return sc_fail(s, "methodConfig holds something not an object");
    }
    while (conch__json_member(s->p, s->n, &it, &key, &val)) {
      if (conch__json_string_is(s->p, key, "retryPolicy")) {
        rv = sc_policy(s, val, &p);
        if (rv != 0) {
          return rv;
        }
        have = 1;
      } else if (conch__json_string_is(s->p, key, "hedgingPolicy")) {
        rv = sc_hedge(s, val, &h);
        if (rv != 0) {
          return rv;
        }
        hedge = 1;
      } else if (conch__json_string_is(s->p, key, "name")) {
        names = val;
      }
    }
    if (have && hedge) {
      return sc_fail(s, "a methodConfig has both a retryPolicy and a "
                        "hedgingPolicy");
    }
    if (!have && !hedge) {
      continue;
    }
    p.buffer_bytes = CONCH__RETRY_BUFFER_DEFAULT;
    if (names == 0) {
      return sc_fail(s, "a methodConfig with a policy has no name");
    }
    rv = sc_names(s, names, have ? &p : NULL, hedge ? &h : NULL);
    if (rv != 0) {
      return rv;
    }
  }
  return 0;
}

static int sc_throttle(sc_parse *s, size_t at) {
  size_t it = at, key, val;
  double maxt = -1, ratio = -1;
  if (conch__json_kind(s->p, at) != CONCH_JSON_OBJECT) {
    return sc_fail(s, "retryThrottling is not an object");
  }
  while (conch__json_member(s->p, s->n, &it, &key, &val)) {
    double v = conch__json_kind(s->p, val) == CONCH_JSON_NUMBER
                   ? sc_number(s, val)
                   : -1;
    if (conch__json_string_is(s->p, key, "maxTokens")) {
      maxt = v;
    } else if (conch__json_string_is(s->p, key, "tokenRatio")) {
      ratio = v;
    }
  }
  if (!(maxt >= 1 && maxt <= 1000) || !whole(maxt) ||
      conch_client_opts_set_retry_throttle(&s->staged, (int)maxt, ratio) !=
          0) {
    return sc_fail(s, "retryThrottling needs maxTokens (1..1000) and "
                      "tokenRatio (above 0)");
  }
  return 0;
}

int conch_client_opts_set_service_config(conch_client_opts *opts,
                                         const char *json, char *err,
                                         size_t errlen) {
  sc_parse s;
  size_t root, it, key, val, i;
  int rv = 0;

  if (err != NULL && errlen > 0) {
    err[0] = '\0';
  }
  memset(&s, 0, sizeof(s));
  s.err = err;
  s.errlen = errlen;
  if (opts == NULL || json == NULL) {
    return sc_fail(&s, "no options or no service config");
  }
  s.p = (const uint8_t *)json;
  s.n = strlen(json);
  if (conch__json_check(s.p, s.n, &root) != 0) {
    return sc_fail(&s, "the service config is not valid JSON");
  }
  if (conch__json_kind(s.p, root) != CONCH_JSON_OBJECT) {
    return sc_fail(&s, "the service config is not a JSON object");
  }
  it = root;
  while (rv == 0 && conch__json_member(s.p, s.n, &it, &key, &val)) {
    if (conch__json_string_is(s.p, key, "methodConfig")) {
      rv = sc_method_configs(&s, val);
    } else if (conch__json_string_is(s.p, key, "retryThrottling")) {
      rv = sc_throttle(&s, val);
    }
  }
  if (rv == 0) {
    /* Everything read: the options take it, on top of what they had. */
    for (i = 0; i < s.staged.nretry && rv == 0; i++) {
      const conch_retry_entry *e = &s.staged.retry[i];
      rv = table_set(opts, e->name, e->hedge ? NULL : &e->p,
                     e->hedge ? &e->h : NULL);
    }
    if (rv == CONCH_ERR_INVALID) {
      rv = sc_fail(&s, "more than 64 names with a retry policy");
    }
    if (rv == 0 && s.staged.retry_max_tokens > 0) {
      opts->retry_max_tokens = s.staged.retry_max_tokens;
      opts->retry_token_ratio = s.staged.retry_token_ratio;
    }
  }
  conch__retry_table_clear(&s.staged, table_mem());
  return rv;
}

/* ---- Choosing ----------------------------------------------------------- */

int conch__hedge_applies(const conch_hedge_policy *hp, const conch_method *m) {
  return (m->kind == CONCH_STREAM_UNARY || m->kind == CONCH_STREAM_SERVER) &&
         (m->idempotency != CONCH_IDEMPOTENCY_UNKNOWN || hp->non_idempotent);
}

const conch_retry_entry *conch__retry_lookup(const conch_client *c,
                                             const conch_method *m) {
  const conch_client_opts *o = &c->o;
  const conch_retry_entry *best = NULL;
  const char *path, *slash;
  size_t slen, i;
  int rank = 0;

  if (o->nretry == 0 || m->path == NULL || m->path[0] != '/') {
    return NULL;
  }
  path = m->path + 1;
  slash = strchr(path, '/');
  slen = slash != NULL ? (size_t)(slash - path) : strlen(path);
  for (i = 0; i < o->nretry; i++) {
    const char *name = o->retry[i].name;
    int r = 0;
    if (name[0] == '\0') {
      r = 1;
    } else if (strcmp(name, path) == 0) {
      r = 3;
    } else if (strlen(name) == slen && strncmp(name, path, slen) == 0) {
      r = 2;
    }
    if (r > rank) {
      rank = r;
      best = &o->retry[i];
    }
  }
  return best;
}

void conch__retry_client_init(conch_client *c) {
  c->retry_tokens = c->o.retry_max_tokens * 1000;
}

void conch__retry_success(conch_client *c) {
  int max = c->o.retry_max_tokens * 1000;
  if (max > 0) {
    c->retry_tokens += c->o.retry_token_ratio;
    if (c->retry_tokens > max) {
      c->retry_tokens = max;
    }
  }
}

int conch__retry_throttle_fail(conch_client *c) {
  int max = c->o.retry_max_tokens * 1000;
  if (max == 0) {
    return 1;
  }
  c->retry_tokens -= 1000;
  if (c->retry_tokens < 0) {
    c->retry_tokens = 0;
  }
  return c->retry_tokens > max / 2;
}

/* Local ends that another attempt cannot mend: the application's doing
   (cancel, free), the client's limits and memory, bad input. */
static int local_final(const conch_status *st) {
  if (st->origin != CONCH_ORIGIN_LOCAL) {
    return 0;
  }
  switch (st->local_err) {
  case CONCH_ERR_CONNECT:
  case CONCH_ERR_IO:
  case CONCH_ERR_TLS:
  case CONCH_ERR_RESOLVE:
  case CONCH_ERR_PROTO:
  case CONCH_ERR_SESSION:
  case CONCH_ERR_TIMEOUT: /* a connect timeout; the deadline is checked */
    return 0;
  default:
    return 1;
  }
}

/* The server's grpc-retry-pushback-ms (negative or not a number: do not
   try again). */
int conch__retry_pushback(const conch_metadata *trailers, long *ms) {
  size_t len = 0;
  const char *v =
      conch_metadata_get(trailers, "grpc-retry-pushback-ms", &len);
  int64_t n;
  if (v == NULL) {
    return 0;
  }
  /* Digits only, as Connect-Timeout-Ms (wire.c reads both). */
  if (len > 9 || conch__connect_timeout_parse(v, len, &n) != 0) {
    return -1;
  }
  *ms = (long)n;
  return 1;
}

int conch__retry_next(conch_call *call) {
  const conch_retry_policy *rp = call->rp;
  conch_client *c = call->client;
  const conch_status *st = &call->status;
  long delay = 0;
  int64_t now;
  int pb;

  if (call->retry_wait) {
    return 0; /* ended while it waited: by the application or the deadline */
  }
  if (st->code == CONCH_CODE_OK || call->user_freed || call->http != NULL ||
      (rp->retryable_codes & CONCH_RETRY_CODE(st->code)) == 0 ||
      local_final(st)) {
    return 0;
  }
  /* A retryable failure costs a token even when no attempt can follow (it
     committed, or it was the last): the throttle counts the server's
     failures, not the client's retries (gRPC's order). */
  if (!conch__retry_throttle_fail(c) || call->committed ||
      call->attempts >= (unsigned)rp->max_attempts) {
    return 0;
  }
  if (call->method->idempotency == CONCH_IDEMPOTENCY_UNKNOWN &&
      !rp->non_idempotent && call->submitted) {
    return 0; /* the server may have acted on it */
  }
  pb = conch__retry_pushback(&call->trailers, &delay);
  if (pb < 0) {
    return 0;
  }
  if (pb == 0) {
    double bound = call->backoff_bound > 0 ? call->backoff_bound
                                           : (double)rp->initial_backoff_ms;
    delay = (long)(conch__client_random01(c) * bound);
    bound *= rp->backoff_multiplier;
    call->backoff_bound = bound < (double)rp->max_backoff_ms
                              ? bound
                              : (double)rp->max_backoff_ms;
  }
  now = conch__client_now(c);
  if (call->deadline_at != 0 && now + delay >= call->deadline_at) {
    return 0; /* the next attempt could not start in time */
  }
  call->retry_wait = 1;
  /* What ends the call while it waits (a cancel, the deadline) says so. */
  conch_status_clear(&call->status);
  call->status.mem = c->mem;
  /* Armed first: a stream that closes inside the park (HTTP/1.1) waits
     for it (maybe_resend). */
  conch__timer_arm(c, &call->retry_timer, now + delay);
  conch__call_park(call);
  return 1;
}

/* Once the backoff is over (the timer is disarmed before it fires) and the
   last attempt's stream is gone. */
static void maybe_resend(conch_call *call) {
  if (call->retry_wait && call->retry_timer.idx == SIZE_MAX &&
      !call->stream_live) {
    conch__call_resend(call);
  }
}

void conch__retry_on_timer(conch_call *call) {
  if (call->hp != NULL) {
    conch__hedge_on_timer(call);
    return;
  }
  maybe_resend(call);
}

void conch__retry_stream_gone(conch_call *call) { maybe_resend(call); }
