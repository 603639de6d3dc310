/* Waiting in tests (see wait.h). */
#include "wait.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define POLL_MIN_MS 1
#define POLL_MAX_MS 10

long long conch_now_ms(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void conch_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int conch_wait_until(int (*pred)(void *arg), void *arg, long limit_ms) {
  long long deadline = conch_now_ms() + limit_ms;
  long pause = POLL_MIN_MS;

  for (;;) {
    if (pred(arg)) {
      return 1;
    }
    if (conch_now_ms() >= deadline) {
      return pred(arg) ? 1 : 0;
    }
    conch_sleep_ms(pause);
    if (pause < POLL_MAX_MS) {
      pause *= 2;
    }
  }
}

int conch_proc_alive(pid_t pid) {
  char path[64];
  char buf[1024];
  FILE *f;
  char *rp;

  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  rp = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
  fclose(f);
  return rp != NULL && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

static int proc_gone(void *arg) { return !conch_proc_alive(*(pid_t *)arg); }

int conch_proc_gone_within(pid_t pid, long limit_ms) {
  return conch_wait_until(proc_gone, &pid, limit_ms);
}
