/* The server core serving conchtest.v1.TestService (svc.h) for peers that
   are not C (node/): listens on 127.0.0.1:0, prints "LISTENING <port>",
   and shuts down gracefully when its stdin closes. */
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>

#include "svc.h"

int main(void) {
  fixture fx;
  char buf[64];

  fx_start(&fx, NULL, 0);
  printf("LISTENING %d\n", conch_server_port(fx.s));
  fflush(stdout);
  while (read(0, buf, sizeof(buf)) > 0) {
  }
  atomic_store(&fx.shutdown_req, 1);
  while (!atomic_load(&fx.idle) || !atomic_load(&fx.shutdown_done)) {
    usleep(10000); /* pacing the watch, not a wait for a condition */
  }
  fx_stop(&fx);
  return 0;
}
