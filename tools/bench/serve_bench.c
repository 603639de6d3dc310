/* Workloads for process servers (tools/bench/serve.sh), driven through
   conch's commands API so that the client is the same for every server:

     serve-bench output URL BYTES       one process writing BYTES to stdout
                                        (head -c BYTES /dev/zero), read
                                        through conch_stream()
     serve-bench spawn URL N CONC       N processes (/bin/true) run with
                                        conch_run_async(), CONC at a time
     serve-bench storm URL N            N Starts of /bin/true at once while
                                        another process (own connection)
                                        calls List in a loop: List latency
                                        during the storm

   Prints one JSON line: the units done (bytes or calls), wall seconds and
   this client's CPU seconds (storm: Starts per second and the List
   latencies in ms). */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <conch/conch.h>
#include <conch/process.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static conch_sandbox *sandbox(const char *url) {
  conch_sandbox_opts o = CONCH_SANDBOX_OPTS_INIT;
  conch_sandbox *sb;

  o.url = url;
  o.timeout_ms = -1; /* measured, not limited */
  o.request_timeout_ms = -1;
  if (conch_sandbox_new(&sb, &o) != 0) {
    fprintf(stderr, "serve-bench: cannot make a sandbox for %s\n", url);
    exit(1);
  }
  return sb;
}

static int bench_output(const char *url, unsigned long long bytes) {
  conch_sandbox *sb = sandbox(url);
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  char count[32];
  const char *args[3];
  conch_process *p;
  conch_chunk c;
  conch_status st;
  unsigned long long got = 0;
  double t0, c0;
  int rv;

  snprintf(count, sizeof(count), "%llu", bytes);
  args[0] = "-c";
  args[1] = count;
  args[2] = "/dev/zero";
  o.cmd = "head";
  o.args = args;
  o.nargs = 3;
  conch_status_init(&st);
  t0 = now_s();
  c0 = cpu_s();
  if (conch_stream(sb, &o, &p, &st) != 0) {
    fprintf(stderr, "serve-bench: stream: %s\n", conch_status_message(&st));
    return 1;
  }
  while ((rv = conch_process_next(p, &c)) == 0) {
    got += c.len;
  }
  conch_process_close(p);
  if (rv != CONCH_ERR_EOF || got != bytes) {
    fprintf(stderr, "serve-bench: got %llu of %llu bytes (%s)\n", got, bytes,
            conch_strerror(rv));
    return 1;
  }
  printf("{\"bytes\":%llu,\"seconds\":%.6f,\"cpu_seconds\":%.6f}\n", got,
         now_s() - t0, cpu_s() - c0);
  conch_status_clear(&st);
  conch_sandbox_free(sb);
  return 0;
}

typedef struct spawn_state {
  conch_sandbox *sb;
  conch_proc_opts o;
  int started, ended, ok, n;
} spawn_state;

static void spawn_one(spawn_state *s);

static void spawn_end(conch_process *p, const conch_exec_result *res,
                      const conch_status *st, void *ud) {
  spawn_state *s = ud;

  s->ended++;
  if (st->code == CONCH_CODE_OK && res->exit_code == 0) {
    s->ok++;
  }
  conch_process_close_async(p, NULL, NULL);
  if (s->started < s->n) {
    spawn_one(s);
  }
}

static void spawn_one(spawn_state *s) {
  static const conch_process_handler h = {NULL, NULL, spawn_end};
  conch_process *p;

  if (conch_run_async(s->sb, &s->o, &h, s, &p) != 0) {
    fprintf(stderr, "serve-bench: conch_run_async failed\n");
    exit(1);
  }
  s->started++;
}

static int bench_spawn(const char *url, int n, int conc) {
  spawn_state s;
  conch_client *c;
  double t0, c0;
  int i;

  memset(&s, 0, sizeof(s));
  s.sb = sandbox(url);
  s.o = (conch_proc_opts)CONCH_PROC_OPTS_INIT;
  s.o.cmd = "/bin/true";
  s.n = n;
  c = conch_sandbox_native(s.sb);
  t0 = now_s();
  c0 = cpu_s();
  for (i = 0; i < conc && i < n; i++) {
    spawn_one(&s);
  }
  while (s.ended < n) {
    if (conch_client_run(c, 1000) != 0) {
      fprintf(stderr, "serve-bench: client loop failed\n");
      return 1;
    }
  }
  if (s.ok != n) {
    fprintf(stderr, "serve-bench: %d of %d processes failed\n", n - s.ok, n);
    return 1;
  }
  printf("{\"calls\":%d,\"seconds\":%.6f,\"cpu_seconds\":%.6f}\n", n,
         now_s() - t0, cpu_s() - c0);
  conch_sandbox_free(s.sb);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a;
  double y = *(const double *)b;

  return x < y ? -1 : x > y;
}

/* The List side of a storm: Lists until |stop_fd| is readable, one every
   |pace_ms| (0: back to back), then writes "count p50 p90 max" (ms) to
   |out_fd|. */
static int storm_lister(const char *url, int stop_fd, int out_fd,
                        int pace_ms) {
  conch_sandbox *sb = sandbox(url);
  size_t cap = 1 << 16;
  double *lat = malloc(cap * sizeof(*lat));
  size_t n = 0;
  char line[128];
  int len;
  ssize_t w;

  for (;;) {
    struct pollfd pfd = {stop_fd, POLLIN, 0};
    conch_process_info *list = NULL;
    size_t nl = 0;
    conch_status st;
    double t0;

    if (poll(&pfd, 1, pace_ms) > 0) {
      break;
    }
    t0 = now_s();
    if (conch_list(sb, &list, &nl, &st) != 0) {
      fprintf(stderr, "serve-bench: List failed: %s\n",
              st.message != NULL ? st.message : "?");
      conch_status_clear(&st);
      return 1;
    }
    conch_process_list_free(list, nl);
    if (n < cap) {
      lat[n++] = (now_s() - t0) * 1000.0;
    }
  }
  qsort(lat, n, sizeof(*lat), cmp_double);
  len = snprintf(line, sizeof(line), "%zu %.3f %.3f %.3f", n,
                 n > 0 ? lat[n / 2] : 0.0, n > 0 ? lat[n * 9 / 10] : 0.0,
                 n > 0 ? lat[n - 1] : 0.0);
  w = write(out_fd, line, (size_t)len);
  (void)w;
  free(lat);
  conch_sandbox_free(sb);
  return 0;
}

static int bench_storm(const char *url, int n) {
  int stop[2];
  int res[2];
  char line[128] = {0};
  size_t nlist = 0;
  double p50 = 0, p90 = 0, pmax = 0;
  spawn_state s;
  double t0;
  double secs;
  pid_t kid;
  ssize_t r;
  int ws;
  int i;

  if (pipe(stop) != 0 || pipe(res) != 0) {
    return 1;
  }
  fflush(stdout);
  kid = fork();
  if (kid == 0) {
    close(stop[1]);
    close(res[0]);
    _exit(storm_lister(url, stop[0], res[1], 0));
  }
  close(stop[0]);
  close(res[1]);
  memset(&s, 0, sizeof(s));
  s.sb = sandbox(url);
  s.o = (conch_proc_opts)CONCH_PROC_OPTS_INIT;
  s.o.cmd = "/bin/true";
  s.n = n;
  t0 = now_s();
  for (i = 0; i < n; i++) {
    spawn_one(&s);
  }
  while (s.ended < n) {
    if (conch_client_run(conch_sandbox_native(s.sb), 1000) != 0) {
      fprintf(stderr, "serve-bench: client loop failed\n");
      return 1;
    }
  }
  secs = now_s() - t0;
  close(stop[1]);
  r = read(res[0], line, sizeof(line) - 1);
  waitpid(kid, &ws, 0);
  if (r <= 0 ||
      sscanf(line, "%zu %lf %lf %lf", &nlist, &p50, &p90, &pmax) != 4) {
    fprintf(stderr, "serve-bench: no List figures\n");
    return 1;
  }
  if (s.ok != n) {
    fprintf(stderr, "serve-bench: %d of %d processes failed\n", n - s.ok, n);
    return 1;
  }
  printf("{\"calls\":%d,\"seconds\":%.6f,\"starts_per_s\":%.1f,"
         "\"lists\":%zu,\"list_p50_ms\":%.3f,\"list_p90_ms\":%.3f,"
         "\"list_max_ms\":%.3f}\n",
         n, secs, n / secs, nlist, p50, p90, pmax);
  conch_sandbox_free(s.sb);
  return 0;
}

/* utime + stime of |pid| in clock ticks, or -1. */
static long long cpu_ticks(pid_t pid) {
  char path[64];
  char buf[1024];
  unsigned long long ut, st;
  FILE *f;
  char *rp;

  snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
  f = fopen(path, "r");
  if (f == NULL) {
    return -1;
  }
  rp = fgets(buf, sizeof(buf), f) != NULL ? strrchr(buf, ')') : NULL;
  fclose(f);
  /* After "(comm)": state ppid pgrp session tty tpgid flags minflt
     cminflt majflt cmajflt utime stime. */
  if (rp == NULL ||
      sscanf(rp + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
             &ut, &st) != 2) {
    return -1;
  }
  return (long long)(ut + st);
}

/* The lister of storm_lister() in a child, a List every 20 ms (its own
   cost stays out of the server's CPU figures); returns its pid, the write
   end that stops it in |*stop_w|, its result's read end in |*res_r|. */
static pid_t lister_start(const char *url, int *stop_w, int *res_r) {
  int stop[2];
  int res[2];
  pid_t kid;

  if (pipe(stop) != 0 || pipe(res) != 0) {
    exit(1);
  }
  fflush(stdout);
  kid = fork();
  if (kid == 0) {
    close(stop[1]);
    close(res[0]);
    _exit(storm_lister(url, stop[0], res[1], 20));
  }
  close(stop[0]);
  close(res[1]);
  *stop_w = stop[1];
  *res_r = res[0];
  return kid;
}

static int lister_stop(pid_t kid, int stop_w, int res_r, size_t *n,
                       double *pmax) {
  char line[128] = {0};
  double p50, p90;
  ssize_t r;
  int ws;

  close(stop_w);
  r = read(res_r, line, sizeof(line) - 1);
  close(res_r);
  waitpid(kid, &ws, 0);
  if (r <= 0 || sscanf(line, "%zu %lf %lf %lf", n, &p50, &p90, pmax) != 4) {
    fprintf(stderr, "serve-bench: no List figures\n");
    return -1;
  }
  return 0;
}

static void nap_ms(long ms) {
  struct timespec ts;

  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&ts, NULL);
}

static int bench_expire(const char *url, int n, long retain_ms,
                        pid_t server) {
  spawn_state s;
  conch_client *c;
  double t_end;
  long long t0, t1, last;
  size_t nlist = 0;
  double pmax = 0;
  int stop_w, res_r;
  pid_t kid;
  int i;

  memset(&s, 0, sizeof(s));
  s.sb = sandbox(url);
  s.o = (conch_proc_opts)CONCH_PROC_OPTS_INIT;
  s.o.cmd = "/bin/true";
  s.o.timeout_ms = 3600000; /* a lifetime, as conch run gives */
  s.n = n;
  c = conch_sandbox_native(s.sb);
  for (i = 0; i < 50 && i < n; i++) {
    spawn_one(&s);
  }
  while (s.ended < n) {
    if (conch_client_run(c, 1000) != 0) {
      fprintf(stderr, "serve-bench: client loop failed\n");
      return 1;
    }
  }
  if (s.ok != n) {
    fprintf(stderr, "serve-bench: %d of %d processes failed\n", n - s.ok, n);
    return 1;
  }
  t_end = now_s();
  kid = lister_start(url, &stop_w, &res_r);
  t0 = cpu_ticks(server);
  /* Past the retention, until the server's CPU stands still for 1 s. */
  while (now_s() - t_end < (double)retain_ms / 1000.0 + 1.0) {
    nap_ms(100);
  }
  last = cpu_ticks(server);
  for (i = 0; i < 600; i++) {
    nap_ms(1000);
    t1 = cpu_ticks(server);
    if (t1 - last <= 3) {
      break;
    }
    last = t1;
  }
  t1 = cpu_ticks(server);
  if (lister_stop(kid, stop_w, res_r, &nlist, &pmax) != 0) {
    return 1;
  }
  printf("{\"retained\":%d,\"expiry_ticks\":%lld,\"lists\":%zu,"
         "\"list_max_ms\":%.3f,\"window_s\":%.1f}\n",
         n, t1 - t0, nlist, pmax, now_s() - t_end);
  conch_sandbox_free(s.sb);
  return 0;
}

/* Live processes whose command line is |cmdline|. */
static int count_cmdline(const char *cmdline) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int n = 0;

  if (d == NULL) {
    return -1;
  }
  while ((e = readdir(d)) != NULL) {
    char path[300];
    char buf[256];
    size_t len;
    size_t i;
    FILE *f;

    if (e->d_name[0] < '1' || e->d_name[0] > '9') {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i + 1 < len; i++) {
      buf[i] = buf[i] == '\0' ? ' ' : buf[i];
    }
    buf[len] = '\0';
    n += strcmp(buf, cmdline) == 0;
  }
  closedir(d);
  return n;
}

static void tree_closed(int rv, void *ud) {
  (void)rv;
  ++*(int *)ud;
}

static int bench_trees(const char *url, int n) {
  static const conch_process_handler h = {NULL, NULL, NULL};
  conch_sandbox *sb = sandbox(url);
  conch_client *c = conch_sandbox_native(sb);
  conch_process **ps = calloc((size_t)n, sizeof(*ps));
  conch_proc_opts o = CONCH_PROC_OPTS_INIT;
  char marker[64];
  char script[160];
  const char *args[2];
  size_t nlist = 0;
  double pmax = 0;
  double t0, secs;
  int stop_w, res_r;
  int closed = 0;
  pid_t kid;
  int i;

  snprintf(marker, sizeof(marker), "sleep 600.%ld", (long)getpid());
  snprintf(script, sizeof(script),
           "sh -c 'trap \"\" TERM; %s' & wait", marker);
  args[0] = "-c";
  args[1] = script;
  o.cmd = "/bin/sh";
  o.args = args;
  o.nargs = 2;
  for (i = 0; i < n; i++) {
    if (conch_stream_async(sb, &o, &h, NULL, &ps[i]) != 0) {
      fprintf(stderr, "serve-bench: conch_stream_async failed\n");
      return 1;
    }
  }
  t0 = now_s();
  while (count_cmdline(marker) < n) {
    if (conch_client_run(c, 10) != 0 || now_s() - t0 > 120) {
      fprintf(stderr, "serve-bench: the trees did not start\n");
      return 1;
    }
  }
  kid = lister_start(url, &stop_w, &res_r);
  t0 = now_s();
  for (i = 0; i < n; i++) {
    conch_process_close_async(ps[i], tree_closed, &closed);
  }
  while (closed < n || count_cmdline(marker) > 0) {
    if (conch_client_run(c, 5) != 0 || now_s() - t0 > 120) {
      fprintf(stderr, "serve-bench: the trees did not end\n");
      return 1;
    }
  }
  secs = now_s() - t0;
  if (lister_stop(kid, stop_w, res_r, &nlist, &pmax) != 0) {
    return 1;
  }
  printf("{\"trees\":%d,\"all_gone_s\":%.3f,\"lists\":%zu,"
         "\"list_max_ms\":%.3f}\n",
         n, secs, nlist, pmax);
  free(ps);
  conch_sandbox_free(sb);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "output") == 0) {
    return bench_output(argv[2], strtoull(argv[3], NULL, 10));
  }
  if (argc == 5 && strcmp(argv[1], "spawn") == 0) {
    return bench_spawn(argv[2], atoi(argv[3]), atoi(argv[4]));
  }
  if (argc == 6 && strcmp(argv[1], "expire") == 0) {
    return bench_expire(argv[2], atoi(argv[3]), atol(argv[4]),
                        (pid_t)atol(argv[5]));
  }
  if (argc == 4 && strcmp(argv[1], "trees") == 0) {
    return bench_trees(argv[2], atoi(argv[3]));
  }
  if (argc == 4 && strcmp(argv[1], "storm") == 0) {
    return bench_storm(argv[2], atoi(argv[3]));
  }
  fprintf(stderr, "usage: serve-bench output URL BYTES\n"
                  "       serve-bench spawn URL N CONC\n"
                  "       serve-bench storm URL N\n"
                  "       serve-bench expire URL N RETAIN_MS SERVER_PID\n"
                  "       serve-bench trees URL N\n");
  return 2;
}
