/* What conch serve's main (serve_main.c) and its spawning code
   (serve_spawn.c) decide by rule alone, here so that fuzz_serve, which
   links neither (they start processes), runs on the same: the
   configuration's defaults and envd's rules for a process's cwd. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_config_defaults(srv_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->listen = NULL; /* the private Unix socket (default_listen) */
  cfg->retention_ms = 30000;
  cfg->max_message = 16u << 20;
  cfg->conn_buffered = 64u << 20;
  cfg->max_streams = 1000;
  cfg->out_high = 256 * 1024;
  cfg->out_low = 64 * 1024;
  cfg->stdin_high = 1u << 20;
  cfg->compress_min = 1024;
  cfg->kill_grace_ms = 2000;
  cfg->max_conns = 4096;
  cfg->idle_ms = 60000;
  cfg->header_ms = 10000;
  cfg->body_ms = 60000;
  cfg->max_procs = 1024;
  cfg->max_buffered = 128u << 20;
  cfg->stdin_total = 64u << 20;
  cfg->fs_max_watchers = 100;
  cfg->fs_max_events = 10000;
  cfg->fs_idle_ms = 600000;
}

conch_code srv_cwd_path(const char *cwd, const srv_user *u, char **out,
                        char *err, size_t errlen) {
  char *path;

  if (cwd == NULL || cwd[0] == '\0') {
    path = strdup(u->home);
  } else if (cwd[0] == '~') {
    if (cwd[1] != '\0' && cwd[1] != '/') {
      snprintf(err, errlen,
               "failed to expand path '%s' for user '%s': cannot expand "
               "user-specific home dir",
               cwd, u->name);
      return CONCH_CODE_INVALID_ARGUMENT;
    }
    path = srv_path_join(u->home, cwd + 1);
  } else if (cwd[0] == '/') {
    path = strdup(cwd);
  } else {
    path = srv_path_join(u->home, cwd);
  }
  if (path == NULL) {
    snprintf(err, errlen, "out of memory");
    return CONCH_CODE_RESOURCE_EXHAUSTED;
  }
  *out = path;
  return CONCH_CODE_OK;
}
