/* The canned ListResponse of the benchmark servers: see list_fixture.h. */
#include "list_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "process/process.pb-c.h"

void bench_list_build(uint8_t out[LIST_BYTES], const char *prog) {
  Process__ListResponse r = PROCESS__LIST_RESPONSE__INIT;
  Process__ProcessInfo info[3], *pinfo[3];
  Process__ProcessConfig cfg[3];
  Process__ProcessConfig__EnvsEntry env[3][2], *penv[3][2];
  static char *args[] = {"-c", "sleep 1000; echo done"};
  static char tag[LIST_BYTES];
  size_t i, n;

  for (i = 0; i < 3; i++) {
    process__process_info__init(&info[i]);
    process__process_config__init(&cfg[i]);
    process__process_config__envs_entry__init(&env[i][0]);
    process__process_config__envs_entry__init(&env[i][1]);
    env[i][0].key = "PATH";
    env[i][0].value = "/usr/local/bin:/usr/bin:/bin";
    env[i][1].key = "HOME";
    env[i][1].value = "/home/user";
    penv[i][0] = &env[i][0];
    penv[i][1] = &env[i][1];
    cfg[i].cmd = "/bin/bash";
    cfg[i].n_args = 2;
    cfg[i].args = args;
    cfg[i].n_envs = 2;
    cfg[i].envs = penv[i];
    cfg[i]._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
    cfg[i].cwd = "/home/user/project";
    info[i].config = &cfg[i];
    info[i].pid = 4000 + (uint32_t)i * 17;
    info[i]._tag_case = PROCESS__PROCESS_INFO___TAG_TAG;
    info[i].tag = "worker";
    pinfo[i] = &info[i];
  }
  r.n_processes = 3;
  r.processes = pinfo;
  for (n = 0; n < sizeof(tag) - 1; n++) {
    memset(tag, 't', n);
    tag[n] = '\0';
    info[2].tag = tag;
    if (process__list_response__get_packed_size(&r) == LIST_BYTES) {
      break;
    }
  }
  if (process__list_response__get_packed_size(&r) != LIST_BYTES) {
    fprintf(stderr, "%s: cannot size the List response (%zu)\n", prog,
            process__list_response__get_packed_size(&r));
    exit(1);
  }
  process__list_response__pack(&r, out);
}
