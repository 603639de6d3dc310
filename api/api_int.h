/* Internals of the commands/Process API.  It uses only the runtime's public
   headers and the generated process.Process code. */
#ifndef CONCH_API_INT_H
#define CONCH_API_INT_H

#include <stddef.h>
#include <stdint.h>

#include <conch/conch.h>
#include <conch/process.h>

#include "process/process.conch.h"
#include "process/process.pb-c.h"

/* Allocation through a conch_mem (the library never calls malloc itself).
   What is handed to the caller to free with a conch_ function uses
   conch_mem_default(); a sandbox's own memory uses its client's. */
static inline void *api_malloc(const conch_mem *m, size_t n) {
  return m->malloc(n, m->user_data);
}
static inline void *api_calloc(const conch_mem *m, size_t k, size_t n) {
  return m->calloc(k, n, m->user_data);
}
static inline void api_free(const conch_mem *m, void *p) {
  if (p != NULL) {
    m->free(p, m->user_data);
  }
}
char *conch__api_strdup(const conch_mem *m, const char *s);

/* Doubly-linked list of open process handles. */
typedef struct conch_plink {
  struct conch_plink *prev;
  struct conch_plink *next;
} conch_plink;

struct conch_sandbox {
  conch_client *client;
  const conch_mem *mem;
  conch_metadata *base;    /* sent with every request */
  char *auth;              /* "Basic ..." for the default user, or NULL */
  long timeout_ms;         /* -1 none */
  long request_timeout_ms; /* -1 none */
  long kill_grace_ms;
  long keepalive_ms; /* -1 off */
  long silence_ms;   /* a stream silent this long is dead; 0 = off */
  size_t max_output; /* kept per stream by runs; SIZE_MAX: no limit */
  unsigned caps;
  int tree;                   /* CONCH_TREE_AUTO, _OFF or _ON */
  unsigned signals_known : 1; /* a Start/Connect answer was seen */
  unsigned signals_group : 1; /* ...and said `conch-signals: group` */
  conch_plink procs;          /* open handles */
  conch_plink watches;        /* open conch_watch handles (files.c) */
};

/* Request metadata for a call: the sandbox's, plus Authorization for
   |user| (NULL: the sandbox's default) and, for Start/Connect, the
   keepalive interval.  Returns NULL when out of memory. */
conch_metadata *conch__sb_headers(conch_sandbox *sb, const char *user,
                                  int keepalive);

/* Fills a protobuf selector from |sel|. */
void conch__sb_selector(const conch_selector *sel,
                        Process__ProcessSelector *out);

/* Copies |src| into |st| when |st| is not NULL. */
void conch__sb_status(conch_status *st, const conch_status *src);

/* Sets |st| (when not NULL) to a locally made status. */
void conch__sb_fail(conch_status *st, conch_code code, int err,
                    const char *msg);

/* A blocking unary call.  On 0 |*resp| is owned by the caller
   (conch_message_free). */
int conch__sb_unary(conch_sandbox *sb, const conch_method *m,
                    const ProtobufCMessage *req, const char *user,
                    ProtobufCMessage **resp, conch_status *st);

/* The same on the loop: |done| runs with the status and the response
   (borrowed), exactly once, unless this returns an error. */
int conch__sb_unary_async(conch_sandbox *sb, const conch_method *m,
                          const ProtobufCMessage *req,
                          void (*done)(const conch_status *st,
                                       const ProtobufCMessage *resp, void *ud),
                          void *ud);

/* conch__sb_unary_async() with its own timeout (ms; 0 = the sandbox's). */
int conch__sb_unary_async_to(conch_sandbox *sb, const conch_method *m,
                             const ProtobufCMessage *req, long timeout_ms,
                             void (*done)(const conch_status *st,
                                          const ProtobufCMessage *resp,
                                          void *ud),
                             void *ud);

/* conch__sb_unary_async_to() as |user| (NULL: the sandbox's default). */
int conch__sb_unary_async_as(conch_sandbox *sb, const conch_method *m,
                             const ProtobufCMessage *req, long timeout_ms,
                             const char *user,
                             void (*done)(const conch_status *st,
                                          const ProtobufCMessage *resp,
                                          void *ud),
                             void *ud);

/* Monotonic milliseconds. */
int64_t conch__api_now_ms(void);
/* When the request of |call| went out (the runtime's call.c; the clock of
   conch__api_now_ms()), 0 while the call waits in its connection's queue:
   the silence bound counts from there. */
int64_t conch__call_sent_ms(const conch_call *call);

/* The status of a stream found silent for |ms| (liveness). */
void conch__sb_silent(conch_status *st, long ms);

/* Closes every open handle (sandbox free). */
void conch__proc_close_all(conch_sandbox *sb);

/* ---- The tree leader (tree.c) ---- */

/* The response header by which a server says it signals process groups
   itself (conch serve), so the tree leader is not needed there. */
#define CONCH__SIGNALS_HEADER "conch-signals"

/* A wrapped command's arguments (cmd is "/bin/sh"); |args| is allocated,
   its strings borrowed (from the caller, the script, |grace|). */
typedef struct conch__tree_argv {
  const char **args;
  size_t nargs;
  char grace[48];
} conch__tree_argv;

/* The leader's script text. */
const char *conch__tree_script(void);

/* "off", "on", "auto" (or NULL/empty) to CONCH_TREE_*; -1 otherwise. */
int conch__tree_parse(const char *s);

/* Builds the leader's arguments for |cmd| |args| (|on|: refuse without the
   tools rather than run unprotected).  Returns 0 or CONCH_ERR_NOMEM. */
int conch__tree_wrap(const conch_mem *m, long grace_ms, int on,
                     const char *cmd, const char *const *args, size_t nargs,
                     conch__tree_argv *out);

/* Whether a process's config (|cmd|, |args|) is the leader's: then
   args[*skip] is the caller's command and the rest its arguments. */
int conch__tree_unwrap(const char *cmd, char *const *args, size_t nargs,
                       size_t *skip);

/* Closes every open watch (sandbox free). */
void conch__files_close_all(conch_sandbox *sb);

/* Runs the client until *flag becomes non-zero. */
int conch__sb_drive(conch_sandbox *sb, const int *flag);

#endif
