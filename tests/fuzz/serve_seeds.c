/* Writes the seed corpus of fuzz_serve (corpus/serve/): what a client
   sends to `conch serve` for every RPC, good and bad, made by an nghttp2
   client session (preface, SETTINGS, HPACK-coded HEADERS, DATA, RST_STREAM,
   PING...) around protobuf-c requests in Connect envelopes.  Each file is
   fuzz_serve's flags byte and clock step byte (0: the clock stands, but
   for the timed_* seeds), then those bytes.  The pids are those of the
   processes fuzz_serve starts each run with (see there); the first Start
   of a run gets 1073741829.

     cmake --build BUILD --target serve_seeds
     BUILD/tests/fuzz/serve_seeds tests/fuzz/corpus/serve
     BUILD/tests/fuzz/serve_seeds --files tests/fuzz/corpus/files

   The second writes fuzz_files' HTTP/2 seeds (h2_*: /files over HTTP/2,
   the HTTP/1.1 ones beside them are written by hand).

   Not built by default, and not a fuzz_* name: scripts/test.sh runs every
   fuzz_* executable as a fuzzer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nghttp2/nghttp2.h>

#include "buf.h"
#include "envelope.h"
#include "gzip.h"
#include "process/process.pb-c.h"

#define SVC "/process.Process/"
#define PID_WEB 1073741825u
#define PID_TTY 1073741826u
#define PID_OLD 1073741827u
#define PID_QUIET 1073741828u
#define PID_NEW 1073741829u

enum {
  F_TOKEN = 1,
  F_SMALL = 2,
  F_ROOT = 4,
  F_SNDBUF = 32,
  F_LEAVE = 64,
  F_STOP = 128
};
enum { CHUNK_7 = 8, CHUNK_64 = 16, CHUNK_512 = 24 };

static const char *outdir;
/* The clock step byte of the seeds being written (fuzz_serve: / 64 picks
   none, 10 ms, 1 s or 30 s a piece). */
static uint8_t clock_step;
enum { STEP_10MS = 64, STEP_1S = 128, STEP_30S = 192 };
static conch_gzip gz;

static void die(const char *what) {
  fprintf(stderr, "serve_seeds: %s\n", what);
  exit(1);
}

/* ---- Messages ------------------------------------------------------------
 */

typedef struct bytes {
  uint8_t *p;
  size_t len;
} bytes;

static bytes cat(bytes a, bytes b) {
  bytes r;

  r.len = a.len + b.len;
  r.p = malloc(r.len + 1);
  if (r.p == NULL) {
    die("out of memory");
  }
  if (a.len > 0) {
    memcpy(r.p, a.p, a.len);
  }
  if (b.len > 0) {
    memcpy(r.p + a.len, b.p, b.len);
  }
  free(a.p);
  free(b.p);
  return r;
}

static bytes pack(const ProtobufCMessage *m) {
  bytes r;

  r.len = protobuf_c_message_get_packed_size(m);
  r.p = malloc(r.len + 1);
  if (r.p == NULL) {
    die("out of memory");
  }
  protobuf_c_message_pack(m, r.p);
  return r;
}

static bytes raw(const void *p, size_t n) {
  bytes r;

  r.len = n;
  r.p = malloc(n + 1);
  if (r.p == NULL) {
    die("out of memory");
  }
  memcpy(r.p, p, n);
  return r;
}

static bytes gzip(bytes in) {
  conch_buf out = CONCH_BUF_INIT;
  bytes r;

  if (conch__gzip_deflate(&gz, -1, in.p, in.len, &out) != 0) {
    die("gzip");
  }
  r = raw(conch__buf_head(&out), conch__buf_size(&out));
  conch__buf_free(&out, conch_mem_default());
  free(in.p);
  return r;
}

static bytes envelope(uint8_t flags, bytes payload) {
  uint8_t prefix[CONCH_ENV_PREFIX];

  conch__env_write_prefix(prefix, flags, (uint32_t)payload.len);
  return cat(raw(prefix, sizeof(prefix)), payload);
}

static bytes env_msg(const ProtobufCMessage *m) { return envelope(0, pack(m)); }

static Process__ProcessSelector sel_pid(uint32_t pid) {
  Process__ProcessSelector s = PROCESS__PROCESS_SELECTOR__INIT;

  s.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
  s.pid = pid;
  return s;
}

static Process__ProcessSelector sel_tag(const char *tag) {
  Process__ProcessSelector s = PROCESS__PROCESS_SELECTOR__INIT;

  s.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_TAG;
  s.tag = (char *)tag;
  return s;
}

/* A StartRequest: cmd, then optional parts. */
typedef struct start_spec {
  const char *cmd;
  const char *const *args; /* NULL-terminated */
  const char *const *envs; /* k, v, ..., NULL */
  const char *cwd;
  const char *tag;
  int stdin_mode; /* 0 unset, 1 true, 2 false */
  int cols, rows; /* a PTY when cols > 0 */
} start_spec;

static bytes start_req(const start_spec *sp) {
  Process__StartRequest req = PROCESS__START_REQUEST__INIT;
  Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
  Process__PTY pty = PROCESS__PTY__INIT;
  Process__PTY__Size size = PROCESS__PTY__SIZE__INIT;
  Process__ProcessConfig__EnvsEntry ent[8];
  Process__ProcessConfig__EnvsEntry *entp[8];
  size_t i;

  cfg.cmd = (char *)sp->cmd;
  for (i = 0; sp->args != NULL && sp->args[i] != NULL; i++) {
  }
  cfg.n_args = i;
  cfg.args = (char **)sp->args;
  for (i = 0; sp->envs != NULL && sp->envs[2 * i] != NULL && i < 8; i++) {
    process__process_config__envs_entry__init(&ent[i]);
    ent[i].key = (char *)sp->envs[2 * i];
    ent[i].value = (char *)sp->envs[2 * i + 1];
    entp[i] = &ent[i];
  }
  cfg.n_envs = i;
  cfg.envs = entp;
  if (sp->cwd != NULL) {
    cfg._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
    cfg.cwd = (char *)sp->cwd;
  }
  req.process = &cfg;
  if (sp->tag != NULL) {
    req._tag_case = PROCESS__START_REQUEST___TAG_TAG;
    req.tag = (char *)sp->tag;
  }
  if (sp->stdin_mode != 0) {
    req._stdin_case = PROCESS__START_REQUEST___STDIN_STDIN;
    req.stdin = sp->stdin_mode == 1;
  }
  if (sp->cols > 0) {
    size.cols = (uint32_t)sp->cols;
    size.rows = (uint32_t)sp->rows;
    pty.size = &size;
    req._pty_case = PROCESS__START_REQUEST___PTY_PTY;
    req.pty = &pty;
  }
  return pack(&req.base);
}

static bytes start_cmd(const char *cmd) {
  start_spec sp;

  memset(&sp, 0, sizeof(sp));
  sp.cmd = cmd;
  return start_req(&sp);
}

static bytes connect_req(Process__ProcessSelector s) {
  Process__ConnectRequest r = PROCESS__CONNECT_REQUEST__INIT;

  r.process = &s;
  return pack(&r.base);
}

static bytes update_req(Process__ProcessSelector s, int cols, int rows) {
  Process__UpdateRequest r = PROCESS__UPDATE_REQUEST__INIT;
  Process__PTY pty = PROCESS__PTY__INIT;
  Process__PTY__Size size = PROCESS__PTY__SIZE__INIT;

  r.process = &s;
  if (cols >= 0) {
    size.cols = (uint32_t)cols;
    size.rows = (uint32_t)rows;
    pty.size = &size;
    r._pty_case = PROCESS__UPDATE_REQUEST___PTY_PTY;
    r.pty = &pty;
  }
  return pack(&r.base);
}

/* |kind| 0 none, 1 stdin, 2 pty. */
static Process__ProcessInput input_of(int kind, const char *data) {
  Process__ProcessInput in = PROCESS__PROCESS_INPUT__INIT;

  if (kind == 1) {
    in.input_case = PROCESS__PROCESS_INPUT__INPUT_STDIN;
    in.stdin.data = (uint8_t *)data;
    in.stdin.len = strlen(data);
  } else if (kind == 2) {
    in.input_case = PROCESS__PROCESS_INPUT__INPUT_PTY;
    in.pty.data = (uint8_t *)data;
    in.pty.len = strlen(data);
  }
  return in;
}

static bytes send_input_req(Process__ProcessSelector s, int kind,
                            const char *data) {
  Process__SendInputRequest r = PROCESS__SEND_INPUT_REQUEST__INIT;
  Process__ProcessInput in = input_of(kind, data);

  r.process = &s;
  r.input = &in;
  return pack(&r.base);
}

static bytes si_start(Process__ProcessSelector s) {
  Process__StreamInputRequest r = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__StartEvent e =
      PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;

  e.process = &s;
  r.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
  r.start = &e;
  return env_msg(&r.base);
}

static bytes si_data(int kind, const char *data) {
  Process__StreamInputRequest r = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__DataEvent e =
      PROCESS__STREAM_INPUT_REQUEST__DATA_EVENT__INIT;
  Process__ProcessInput in = input_of(kind, data);

  e.input = &in;
  r.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA;
  r.data = &e;
  return env_msg(&r.base);
}

static bytes si_keepalive(void) {
  Process__StreamInputRequest r = PROCESS__STREAM_INPUT_REQUEST__INIT;
  Process__StreamInputRequest__KeepAlive e =
      PROCESS__STREAM_INPUT_REQUEST__KEEP_ALIVE__INIT;

  r.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_KEEPALIVE;
  r.keepalive = &e;
  return env_msg(&r.base);
}

static bytes signal_req(Process__ProcessSelector s, int sig) {
  Process__SendSignalRequest r = PROCESS__SEND_SIGNAL_REQUEST__INIT;

  r.process = &s;
  r.signal = (Process__Signal)sig;
  return pack(&r.base);
}

static bytes close_stdin_req(Process__ProcessSelector s) {
  Process__CloseStdinRequest r = PROCESS__CLOSE_STDIN_REQUEST__INIT;

  r.process = &s;
  return pack(&r.base);
}

static bytes none(void) { return raw("", 0); }

/* ---- HTTP/2 ----------------------------------------------------------------
 */

typedef struct body_src {
  bytes b;
  size_t off;
  size_t frame; /* most bytes per DATA frame; 0 = no limit */
  int end;      /* END_STREAM after the body */
  struct body_src *next;
} body_src;

typedef struct gen {
  nghttp2_session *s;
  bytes out;
  body_src *bodies;
} gen;

static gen g;

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf,
                         size_t len, uint32_t *flags, nghttp2_data_source *src,
                         void *ud) {
  body_src *b = src->ptr;
  size_t n = b->b.len - b->off;

  (void)s;
  (void)id;
  (void)ud;
  if (n > len) {
    n = len;
  }
  if (b->frame > 0 && n > b->frame) {
    n = b->frame;
  }
  if (n > 0) {
    memcpy(buf, b->b.p + b->off, n);
  }
  b->off += n;
  if (b->off == b->b.len) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!b->end) {
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
  }
  return (ssize_t)n;
}

static void flush(void) {
  for (;;) {
    const uint8_t *p;
    ssize_t n = nghttp2_session_mem_send(g.s, &p);

    if (n < 0) {
      die("mem_send");
    }
    if (n == 0) {
      return;
    }
    g.out = cat(g.out, raw(p, (size_t)n));
  }
}

/* |window|: the client's initial stream window (what the server may send
   on a stream before a WINDOW_UPDATE). */
static void begin_window(uint32_t window) {
  nghttp2_session_callbacks *cbs;
  nghttp2_settings_entry iv[2] = {
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};

  if (nghttp2_session_callbacks_new(&cbs) != 0 ||
      nghttp2_session_client_new(&g.s, cbs, NULL) != 0) {
    die("nghttp2");
  }
  nghttp2_session_callbacks_del(cbs);
  g.out = none();
  g.bodies = NULL;
  nghttp2_submit_settings(g.s, NGHTTP2_FLAG_NONE, iv, 2);
  /* Room for the server's answers on the connection too. */
  nghttp2_submit_window_update(g.s, NGHTTP2_FLAG_NONE, 0, 1 << 24);
  flush();
}

static void begin(void) { begin_window(1 << 20); }

/* A request; |body| NULL sends none (END_STREAM on HEADERS).  |hdrs| is
   name, value, ..., NULL.  Returns the stream id. */
static int32_t request_ex(const char *method, const char *path,
                          const char *const *hdrs, bytes *body, size_t frame,
                          int end) {
  nghttp2_nv nva[24];
  size_t n = 0;
  size_t i;
  nghttp2_data_provider prd;
  body_src *b = NULL;
  int32_t id;

#define NV(k, v)                                                               \
  do {                                                                         \
    nva[n].name = (uint8_t *)(k);                                              \
    nva[n].namelen = strlen(k);                                                \
    nva[n].value = (uint8_t *)(v);                                             \
    nva[n].valuelen = strlen(v);                                               \
    nva[n].flags = NGHTTP2_NV_FLAG_NONE;                                       \
    n++;                                                                       \
  } while (0)
  NV(":method", method);
  NV(":scheme", "http");
  NV(":authority", "127.0.0.1:49983");
  NV(":path", path);
  for (i = 0; hdrs != NULL && hdrs[i] != NULL && n < 24; i += 2) {
    NV(hdrs[i], hdrs[i + 1]);
  }
#undef NV
  if (body != NULL) {
    b = calloc(1, sizeof(*b));
    if (b == NULL) {
      die("out of memory");
    }
    b->b = *body;
    b->frame = frame;
    b->end = end;
    b->next = g.bodies;
    g.bodies = b;
    prd.source.ptr = b;
    prd.read_callback = body_read;
  }
  id = nghttp2_submit_request(g.s, NULL, nva, n, body != NULL ? &prd : NULL,
                              NULL);
  if (id < 0) {
    die("submit_request");
  }
  flush();
  return id;
}

/* An empty |body| is no DATA at all: END_STREAM comes on the HEADERS. */
static int32_t request(const char *method, const char *path,
                       const char *const *hdrs, bytes body) {
  if (body.len == 0) {
    free(body.p);
    return request_ex(method, path, hdrs, NULL, 0, 1);
  }
  return request_ex(method, path, hdrs, &body, 0, 1);
}

static void rst(int32_t id) {
  nghttp2_submit_rst_stream(g.s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  flush();
}

/* An HPACK integer with a 7-bit prefix (RFC 7541 5.1), H bit clear. */
static bytes hpack_int(size_t v) {
  uint8_t b[8];
  size_t n = 0;

  if (v < 127) {
    b[n++] = (uint8_t)v;
    return raw(b, n);
  }
  b[n++] = 127;
  v -= 127;
  while (v >= 128) {
    b[n++] = (uint8_t)(v % 128 + 128);
    v /= 128;
  }
  b[n++] = (uint8_t)v;
  return raw(b, n);
}

/* nghttp2 codes header strings with Huffman and the dynamic table, which
   byte mutations cannot see through.  Each HEADERS frame is coded again
   with plain literals never indexed (RFC 7541 6.2.2), so the fuzzer finds
   "gzip" or "connect-timeout-ms" as they are. */
static bytes plain_headers(bytes in) {
  nghttp2_hd_inflater *inf;
  bytes out = raw(in.p, 24); /* the preface */
  size_t off = 24;

  if (nghttp2_hd_inflate_new(&inf) != 0) {
    die("nghttp2");
  }
  while (off + 9 <= in.len) {
    const uint8_t *h = in.p + off;
    size_t len = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
    size_t pri = (h[4] & NGHTTP2_FLAG_PRIORITY) != 0 ? 5 : 0;
    bytes block = none();
    size_t at = 9 + pri;

    if (h[3] != NGHTTP2_HEADERS) {
      out = cat(out, raw(h, 9 + len));
      off += 9 + len;
      continue;
    }
    if ((h[4] & (NGHTTP2_FLAG_PADDED | NGHTTP2_FLAG_END_HEADERS)) !=
        NGHTTP2_FLAG_END_HEADERS) {
      die("HEADERS with padding or CONTINUATION");
    }
    for (;;) {
      nghttp2_nv nv;
      int fl = 0;
      ssize_t r =
          nghttp2_hd_inflate_hd2(inf, &nv, &fl, h + at, 9 + len - at, 1);

      if (r < 0) {
        die("HPACK");
      }
      at += (size_t)r;
      if (fl & NGHTTP2_HD_INFLATE_EMIT) {
        block = cat(block, raw("\x10", 1));
        block = cat(block, hpack_int(nv.namelen));
        block = cat(block, raw(nv.name, nv.namelen));
        block = cat(block, hpack_int(nv.valuelen));
        block = cat(block, raw(nv.value, nv.valuelen));
      }
      if (fl & NGHTTP2_HD_INFLATE_FINAL) {
        nghttp2_hd_inflate_end_headers(inf);
        break;
      }
    }
    {
      uint8_t fh[9];
      size_t n = pri + block.len;

      memcpy(fh, h, 9);
      fh[0] = (uint8_t)(n >> 16);
      fh[1] = (uint8_t)(n >> 8);
      fh[2] = (uint8_t)n;
      out = cat(out, raw(fh, 9));
      out = cat(out, raw(h + 9, pri));
      out = cat(out, block);
    }
    off += 9 + len;
  }
  nghttp2_hd_inflate_del(inf);
  free(in.p);
  return out;
}

static void finish(const char *name, uint8_t flags) {
  char path[4096];
  FILE *f;

  flush();
  g.out = plain_headers(g.out);
  snprintf(path, sizeof(path), "%s/%s", outdir, name);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(&flags, 1, 1, f) != 1 ||
      fwrite(&clock_step, 1, 1, f) != 1 ||
      fwrite(g.out.p, 1, g.out.len, f) != g.out.len || fclose(f) != 0) {
    die(path);
  }
  nghttp2_session_del(g.s);
  while (g.bodies != NULL) {
    body_src *b = g.bodies;

    g.bodies = b->next;
    free(b->b.p);
    free(b);
  }
  free(g.out.p);
}

/* Not HTTP/2 at all. */
static void raw_seed(const char *name, uint8_t flags, const char *text) {
  char path[4096];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", outdir, name);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(&flags, 1, 1, f) != 1 ||
      fwrite(&clock_step, 1, 1, f) != 1 ||
      fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0) {
    die(path);
  }
}

/* ---- The seeds -------------------------------------------------------------
 */

static const char *const unary[] = {"content-type", "application/proto",
                                    "connect-protocol-version", "1", NULL};
static const char *const stream[] = {"content-type",
                                     "application/connect+proto",
                                     "connect-protocol-version", "1", NULL};

static bytes env(bytes payload) { return envelope(0, payload); }

/* One seed of one request. */
static void one(const char *name, uint8_t flags, const char *method,
                const char *path, const char *const *hdrs, bytes body) {
  begin();
  request(method, path, hdrs, body);
  finish(name, flags);
}

static void seeds_start(void) {
  static const char *const hdrs[] = {"content-type",
                                     "application/connect+proto",
                                     "connect-timeout-ms",
                                     "60000",
                                     "keepalive-ping-interval",
                                     "1",
                                     "connect-accept-encoding",
                                     "gzip",
                                     "user-agent",
                                     "serve_seeds",
                                     NULL};
  static const char *const args[] = {"-n", "x", NULL};
  static const char *const envs[] = {"A", "1", "PATH", "/bin", "A", "2", NULL};
  start_spec sp;

  one("list", 0, "POST", SVC "List", unary, none());
  memset(&sp, 0, sizeof(sp));
  sp.cmd = "cat";
  sp.args = args;
  sp.envs = envs;
  sp.cwd = "~/work";
  sp.tag = "job";
  sp.stdin_mode = 1;
  one("start_cat", 0, "POST", SVC "Start", hdrs, env(start_req(&sp)));
  one("start_cat_root", F_ROOT, "POST", SVC "Start", hdrs, env(start_req(&sp)));
  one("start_true", 0, "POST", SVC "Start", stream, env(start_cmd("true")));
  one("start_false", 0, "POST", SVC "Start", stream, env(start_cmd("false")));
  one("start_crash", 0, "POST", SVC "Start", stream, env(start_cmd("crash")));
  one("start_fail", 0, "POST", SVC "Start", stream, env(start_cmd("fail")));
  one("start_noexec", 0, "POST", SVC "Start", stream, env(start_cmd("noexec")));
  one("start_empty", 0, "POST", SVC "Start", stream, env(none()));
  one("start_none", 0, "POST", SVC "Start", stream, none());
  memset(&sp, 0, sizeof(sp));
  sp.cmd = "sh";
  sp.cols = 100;
  sp.rows = 30;
  sp.tag = "t";
  one("start_pty", 0, "POST", SVC "Start", stream, env(start_req(&sp)));
  sp.cols = 0;
  sp.cwd = "missing/dir";
  one("start_cwd_missing", 0, "POST", SVC "Start", stream, env(start_req(&sp)));
  sp.cwd = "~bob/x";
  one("start_cwd_tilde_user", 0, "POST", SVC "Start", stream,
      env(start_req(&sp)));
  sp.cwd = "/tmp/../x/./y";
  sp.stdin_mode = 2;
  one("start_stdin_off", 0, "POST", SVC "Start", stream, env(start_req(&sp)));

  /* Two requests on a server stream, and a deadline. */
  begin();
  request("POST", SVC "Start", stream,
          cat(env(start_cmd("sleep")), env(start_cmd("sleep"))));
  finish("start_two_messages", 0);
  {
    static const char *const dl[] = {"content-type",
                                     "application/connect+proto",
                                     "connect-timeout-ms", "5", NULL};
    one("start_deadline", 0, "POST", SVC "Start", dl, env(start_cmd("sleep")));
  }
}

static void seeds_connect(void) {
  static const char *const dl[] = {"content-type",
                                   "application/connect+proto",
                                   "connect-timeout-ms",
                                   "100",
                                   "keepalive-ping-interval",
                                   "2",
                                   NULL};

  one("connect_pid", 0, "POST", SVC "Connect", dl,
      env(connect_req(sel_pid(PID_WEB))));
  one("connect_tag", 0, "POST", SVC "Connect", stream,
      env(connect_req(sel_tag("tty"))));
  one("connect_ended", 0, "POST", SVC "Connect", stream,
      env(connect_req(sel_tag("old"))));
  one("connect_unknown", 0, "POST", SVC "Connect", stream,
      env(connect_req(sel_pid(42))));
  {
    Process__ConnectRequest r = PROCESS__CONNECT_REQUEST__INIT;

    one("connect_no_selector", 0, "POST", SVC "Connect", stream,
        env(pack(&r.base)));
  }
}

static void seeds_unary(void) {
  one("update_pty", 0, "POST", SVC "Update", unary,
      update_req(sel_pid(PID_TTY), 120, 40));
  one("update_not_tty", 0, "POST", SVC "Update", unary,
      update_req(sel_pid(PID_WEB), 120, 40));
  one("update_nothing", 0, "POST", SVC "Update", unary,
      update_req(sel_tag("web"), -1, 0));
  one("send_input", 0, "POST", SVC "SendInput", unary,
      send_input_req(sel_pid(PID_WEB), 1, "hello\n"));
  one("send_input_pty", 0, "POST", SVC "SendInput", unary,
      send_input_req(sel_tag("tty"), 2, "ls\r"));
  one("send_input_wrong_kind", 0, "POST", SVC "SendInput", unary,
      send_input_req(sel_pid(PID_WEB), 2, "x"));
  one("send_input_stdin_off", 0, "POST", SVC "SendInput", unary,
      send_input_req(sel_tag("quiet"), 1, "x"));
  one("send_input_none", 0, "POST", SVC "SendInput", unary,
      send_input_req(sel_pid(PID_WEB), 0, ""));
  one("signal_term", 0, "POST", SVC "SendSignal", unary,
      signal_req(sel_pid(PID_WEB), 15));
  one("signal_kill_tag", 0, "POST", SVC "SendSignal", unary,
      signal_req(sel_tag("tty"), 9));
  one("signal_unspecified", 0, "POST", SVC "SendSignal", unary,
      signal_req(sel_pid(PID_WEB), 0));
  one("signal_other", 0, "POST", SVC "SendSignal", unary,
      signal_req(sel_pid(PID_WEB), 3));
  one("signal_ended", 0, "POST", SVC "SendSignal", unary,
      signal_req(sel_pid(PID_OLD), 9));
  one("close_stdin", 0, "POST", SVC "CloseStdin", unary,
      close_stdin_req(sel_pid(PID_WEB)));
  one("close_stdin_pty", 0, "POST", SVC "CloseStdin", unary,
      close_stdin_req(sel_pid(PID_TTY)));
  one("close_stdin_quiet", 0, "POST", SVC "CloseStdin", unary,
      close_stdin_req(sel_pid(PID_QUIET)));
  one("not_protobuf", 0, "POST", SVC "SendSignal", unary,
      raw("\xff\xff\xff", 3));
}

static void seeds_stream_input(void) {
  static const char *const gz_hdrs[] = {
      "content-type", "application/connect+proto", "connect-content-encoding",
      "gzip", NULL};
  bytes b;

  begin();
  b = cat(si_start(sel_pid(PID_WEB)), si_data(1, "one\n"));
  b = cat(b, si_keepalive());
  b = cat(b, si_data(1, "two\n"));
  request_ex("POST", SVC "StreamInput", stream, &b, 9, 1);
  finish("stream_input", 0);

  one("stream_input_pty", 0, "POST", SVC "StreamInput", stream,
      cat(si_start(sel_tag("tty")), si_data(2, "echo hi\r")));
  one("stream_input_no_start", 0, "POST", SVC "StreamInput", stream,
      si_data(1, "x"));
  one("stream_input_bad_envelope", 0, "POST", SVC "StreamInput", stream,
      raw("\x04\x00\x00\x00\x01x", 6));
  one("stream_input_partial", 0, "POST", SVC "StreamInput", stream,
      raw("\x00\x00\x00\x00\x09xy", 7));
  {
    Process__StreamInputRequest r = PROCESS__STREAM_INPUT_REQUEST__INIT;

    one("stream_input_no_event", 0, "POST", SVC "StreamInput", stream,
        env_msg(&r.base));
  }
  /* Compressed envelopes. */
  {
    Process__StreamInputRequest r = PROCESS__STREAM_INPUT_REQUEST__INIT;
    Process__StreamInputRequest__StartEvent e =
        PROCESS__STREAM_INPUT_REQUEST__START_EVENT__INIT;
    Process__ProcessSelector s = sel_pid(PID_WEB);

    e.process = &s;
    r.event_case = PROCESS__STREAM_INPUT_REQUEST__EVENT_START;
    r.start = &e;
    b = envelope(CONCH_ENV_COMPRESSED, gzip(pack(&r.base)));
    b = cat(b, si_data(1, "plain\n"));
    one("stream_input_gzip", 0, "POST", SVC "StreamInput", gz_hdrs, b);
  }
  /* Not a compressed stream, but a compressed envelope. */
  one("stream_input_gzip_undeclared", 0, "POST", SVC "StreamInput", stream,
      envelope(CONCH_ENV_COMPRESSED, gzip(none())));

  /* A process that does not read: StreamInput pauses, then is reset. */
  {
    char chunk[1001];
    int32_t id;
    int i;

    memset(chunk, 'x', 1000);
    chunk[1000] = '\0';
    begin();
    request("POST", SVC "Start", stream, env(start_cmd("sleep")));
    b = si_start(sel_pid(PID_NEW));
    for (i = 0; i < 8; i++) {
      b = cat(b, si_data(1, chunk));
    }
    id = request_ex("POST", SVC "StreamInput", stream, &b, 1024, 0);
    rst(id);
    request("POST", SVC "List", unary, none());
    finish("stream_input_paused_reset", F_SMALL);
  }
}

static void seeds_http(void) {
  static const char *const json[] = {"content-type", "application/json", NULL};
  static const char *const grpc[] = {"content-type", "application/grpc", NULL};
  static const char *const tok[] = {"content-type", "application/proto",
                                    "x-access-token", "tok", NULL};

  begin();
  request("GET", "/health", NULL, none());
  request("HEAD", "/health", NULL, none());
  request("POST", "/nope.Service/Method", unary, none());
  request("GET", SVC "List", unary, none());
  request("POST", SVC "List", json, raw("{}", 2));
  request("POST", SVC "List", grpc, none());
  request("POST", SVC "Start", unary, none());
  request("POST", SVC "List?x=1", unary, none());
  finish("http_errors", 0);

  begin();
  request("GET", "/health", NULL, none());
  request("POST", SVC "List", unary, none());
  request("POST", SVC "List", tok, none());
  finish("access_token", F_TOKEN);
}

static void seeds_headers(void) {
  static const char *const h[][5] = {
      {"connect-protocol-version", "2"},
      {"connect-timeout-ms", "12345678901"},
      {"connect-timeout-ms", "soon"},
      {"connect-timeout-ms", "0"},
      {"content-encoding", "br"},
      {"content-encoding", "identity"},
      {"accept-encoding", "br, gzip"},
      {"authorization", "Basic cm9vdDo="},     /* root: */
      {"authorization", "Basic bm9ib2R5Onh4"}, /* nobody:xx */
      {"authorization", "Basic Ym9iOg=="},     /* bob: */
      {"authorization", "Basic !!!"},
      {"authorization", "Bearer x"},
      {"authorization", "basic dXNlcg=="}, /* user (no colon) */
  };
  static const char *const ka[][2] = {
      {"keepalive-ping-interval", "-1"},
      {"keepalive-ping-interval", "x"},
      {"keepalive-ping-interval", "0"},
      {"keepalive-ping-interval", "99999999999999999999"}};
  size_t i;

  begin();
  for (i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
    const char *hdrs[] = {"content-type", "application/proto", h[i][0], h[i][1],
                          NULL};

    request("POST", SVC "List", hdrs, none());
  }
  finish("connect_headers", 0);

  begin();
  for (i = 0; i < sizeof(ka) / sizeof(ka[0]); i++) {
    const char *hdrs[] = {"content-type", "application/connect+proto", ka[i][0],
                          ka[i][1], NULL};

    request("POST", SVC "Connect", hdrs, env(connect_req(sel_pid(PID_WEB))));
  }
  {
    const char *hdrs[] = {"content-type", "application/connect+proto",
                          "connect-content-encoding", "br", NULL};

    request("POST", SVC "Start", hdrs, env(start_cmd("true")));
  }
  finish("stream_headers", 0);

  /* As root: Start as another user; not root: refused. */
  {
    static const char *const as_nobody[] = {
        "content-type", "application/connect+proto", "authorization",
        "Basic bm9ib2R5Og==", NULL};

    one("start_as_nobody", 0, "POST", SVC "Start", as_nobody,
        env(start_cmd("cat")));
    one("start_as_nobody_root", F_ROOT, "POST", SVC "Start", as_nobody,
        env(start_cmd("cat")));
  }
}

static void seeds_bodies(void) {
  static const char *const gz_unary[] = {"content-type",
                                         "application/proto",
                                         "content-encoding",
                                         "gzip",
                                         "accept-encoding",
                                         "gzip",
                                         NULL};
  static uint8_t big[4096];

  one("list_gzip", 0, "POST", SVC "List", gz_unary, gzip(none()));
  one("send_input_gzip", 0, "POST", SVC "SendInput", gz_unary,
      gzip(send_input_req(sel_pid(PID_WEB), 1, "zipped\n")));
  one("gzip_bad", 0, "POST", SVC "List", gz_unary, raw("\x1f\x8bxx", 4));
  memset(big, 'a', sizeof(big));
  one("gzip_over_limit", F_SMALL, "POST", SVC "List", gz_unary,
      gzip(raw(big, sizeof(big))));
  one("unary_over_limit", F_SMALL, "POST", SVC "List", unary,
      raw(big, sizeof(big)));
  one("envelope_over_limit", F_SMALL, "POST", SVC "Start", stream,
      raw("\x00\x00\x10\x00\x00", 5));
  /* The answer to List is gzipped past compress_min (16 with F_SMALL). */
  one("list_gzip_answer", F_SMALL, "POST", SVC "List", gz_unary, gzip(none()));
  /* Trailers after a unary body. */
  {
    nghttp2_nv tr = {(uint8_t *)"x-trailer", (uint8_t *)"1", 9, 1,
                     NGHTTP2_NV_FLAG_NONE};
    bytes b = send_input_req(sel_pid(PID_WEB), 1, "t");
    int32_t id;

    begin();
    id = request_ex("POST", SVC "SendInput", unary, &b, 0, 0);
    nghttp2_submit_trailer(g.s, id, &tr, 1);
    finish("trailers", 0);
  }
}

/* Several RPCs on one connection, as a client session would run them. */
static void seeds_session(void) {
  static const char *const slow[] = {"content-type",
                                     "application/connect+proto",
                                     "keepalive-ping-interval", "1", NULL};
  static const uint8_t flags[] = {
      0,       CHUNK_7, CHUNK_64,           CHUNK_512, F_SNDBUF,
      F_LEAVE, F_STOP,  F_SMALL | CHUNK_64, F_ROOT};
  static const char *const names[] = {
      "session",          "session_chunk7", "session_chunk64",
      "session_chunk512", "session_sndbuf", "session_leave",
      "session_stop",     "session_small",  "session_root"};
  size_t i;

  for (i = 0; i < sizeof(flags); i++) {
    begin();
    request_ex("POST", SVC "Start", slow, (bytes[]){env(start_cmd("cat"))}, 0,
               1);
    request("POST", SVC "Connect", slow, env(connect_req(sel_pid(PID_NEW))));
    request("POST", SVC "SendInput", unary,
            send_input_req(sel_pid(PID_NEW), 1, "ping\n"));
    request("POST", SVC "StreamInput", stream,
            cat(si_start(sel_pid(PID_NEW)), si_data(1, "more\n")));
    request("POST", SVC "List", unary, none());
    request("POST", SVC "Update", unary, update_req(sel_pid(PID_NEW), -1, 0));
    nghttp2_submit_ping(g.s, NGHTTP2_FLAG_NONE, NULL);
    request("POST", SVC "CloseStdin", unary, close_stdin_req(sel_pid(PID_NEW)));
    request("POST", SVC "SendSignal", unary, signal_req(sel_pid(PID_WEB), 9));
    finish(names[i], flags[i]);
  }

  /* A reset in the middle, and a GOAWAY. */
  begin();
  rst(request_ex("POST", SVC "Start", stream,
                 (bytes[]){env(start_cmd("sleep"))}, 0, 1));
  request("POST", SVC "Connect", stream, env(connect_req(sel_pid(PID_NEW))));
  nghttp2_submit_goaway(g.s, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
  finish("reset_and_goaway", 0);
}

/* Processes that end in odd ways, input that waits, output that waits. */
static void seeds_processes(void) {
  static char big[5001];
  start_spec sp;
  bytes b;
  int i;

  one("start_bg", 0, "POST", SVC "Start", stream, env(start_cmd("bg")));
  memset(&sp, 0, sizeof(sp));
  sp.cmd = "bg";
  sp.cols = 80;
  sp.rows = 25;
  one("start_bg_pty", 0, "POST", SVC "Start", stream, env(start_req(&sp)));

  memset(big, 'i', sizeof(big) - 1);
  begin();
  request("POST", SVC "Start", stream, env(start_cmd("noin")));
  request("POST", SVC "SendInput", unary,
          send_input_req(sel_pid(PID_NEW), 1, "lost\n"));
  finish("send_input_closed", 0);
  begin();
  request("POST", SVC "Start", stream, env(start_cmd("sleep")));
  request("POST", SVC "SendInput", unary,
          send_input_req(sel_pid(PID_NEW), 1, big));
  finish("send_input_waits", 0);
  begin();
  request("POST", SVC "SendInput", unary,
          send_input_req(sel_pid(PID_WEB), 1, big));
  request("POST", SVC "SendInput", unary,
          send_input_req(sel_pid(PID_TTY), 2, big));
  finish("send_input_big", CHUNK_512);

  /* The pids go round: the fifth Start gets the ended process's pid. */
  begin();
  for (i = 0; i < 5; i++) {
    request("POST", SVC "Start", stream, env(start_cmd("true")));
  }
  request("POST", SVC "Connect", stream, env(connect_req(sel_pid(PID_OLD))));
  finish("pid_reuse", CHUNK_512);

  /* No window for the answers: the echo of cat piles up on the Start
     stream until its process is paused; the window comes at the end. */
  begin_window(0);
  request("POST", SVC "Start", stream, env(start_cmd("cat")));
  memset(big, 'e', 900);
  big[900] = '\0';
  b = si_start(sel_pid(PID_NEW));
  for (i = 0; i < 8; i++) {
    b = cat(b, si_data(1, big));
  }
  request("POST", SVC "StreamInput", stream, b);
  for (i = 0; i < 40; i++) {
    nghttp2_submit_ping(g.s, NGHTTP2_FLAG_NONE, NULL);
  }
  nghttp2_submit_window_update(g.s, NGHTTP2_FLAG_NONE, 1, 1 << 20);
  finish("backpressure", F_SMALL | CHUNK_512);
}

/* ---- HTTP/1.1 ---------------------------------------------------------------
 */

static bytes text(const char *s) { return raw(s, strlen(s)); }

/* A request with Content-Length; |extra| is more header lines. */
static bytes h1(const char *method, const char *path, const char *ctype,
                const char *extra, bytes body) {
  char head[1024];

  snprintf(head, sizeof(head),
           "%s %s HTTP/1.1\r\nHost: sandbox\r\n%s%s%sContent-Length: "
           "%zu\r\n%s\r\n",
           method, path, ctype != NULL ? "Content-Type: " : "",
           ctype != NULL ? ctype : "", ctype != NULL ? "\r\n" : "", body.len,
           extra != NULL ? extra : "");
  return cat(text(head), body);
}

/* The same, its body chunked |step| bytes at a time, with trailers. */
static bytes h1_chunked(const char *path, const char *ctype, bytes body,
                        size_t step) {
  char head[512];
  bytes r;
  size_t off;

  snprintf(head, sizeof(head),
           "POST %s HTTP/1.1\r\nHost: sandbox\r\nContent-Type: %s\r\n"
           "Transfer-Encoding: chunked\r\n\r\n",
           path, ctype);
  r = text(head);
  for (off = 0; off < body.len; off += step) {
    size_t k = body.len - off < step ? body.len - off : step;
    char size[32];

    snprintf(size, sizeof(size), "%zx%s\r\n", k, off == 0 ? ";x=y" : "");
    r = cat(r, text(size));
    r = cat(r, raw(body.p + off, k));
    r = cat(r, text("\r\n"));
  }
  free(body.p);
  return cat(r, text("0\r\nX-Trailer: 1\r\n\r\n"));
}

static void bytes_seed(const char *name, uint8_t flags, bytes b) {
  char path[4096];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", outdir, name);
  f = fopen(path, "wb");
  if (f == NULL || fwrite(&flags, 1, 1, f) != 1 ||
      fwrite(&clock_step, 1, 1, f) != 1 ||
      (b.len > 0 && fwrite(b.p, 1, b.len, f) != b.len) || fclose(f) != 0) {
    die(path);
  }
  free(b.p);
}

#define UNARY_CT "application/proto"
#define STREAM_CT "application/connect+proto"
#define HEALTH "GET /health HTTP/1.1\r\nHost: sandbox\r\n\r\n"

static void seeds_http1_calls(void) {
  char big[1500];
  start_spec sp;
  static const char *const sh_args[] = {"-c", "echo hi", NULL};

  bytes_seed("h1_list", 0,
             cat(h1("POST", SVC "List", UNARY_CT, NULL, none()), text(HEALTH)));
  bytes_seed("h1_list_gzip", 0,
             h1("POST", SVC "List", UNARY_CT,
                "Content-Encoding: gzip\r\nAccept-Encoding: gzip\r\n",
                gzip(none())));
  bytes_seed(
      "h1_start_true", 0,
      cat(cat(h1("POST", SVC "Start", STREAM_CT,
                 "Connect-Protocol-Version: 1\r\n", env(start_cmd("true"))),
              h1("POST", SVC "List", UNARY_CT, NULL, none())),
          text(HEALTH)));
  memset(&sp, 0, sizeof(sp));
  sp.cmd = "cat";
  sp.tag = "h1";
  sp.args = sh_args;
  bytes_seed("h1_start_cat", 0,
             cat(h1("POST", SVC "Start", STREAM_CT,
                    "Keepalive-Ping-Interval: 1\r\nConnect-Timeout-Ms: "
                    "5000\r\n",
                    env(start_req(&sp))),
                 h1("POST", SVC "SendInput", UNARY_CT, NULL,
                    send_input_req(sel_tag("h1"), 1, "x"))));
  bytes_seed("h1_start_leave", F_LEAVE,
             h1("POST", SVC "Start", STREAM_CT, NULL, env(start_req(&sp))));
  bytes_seed("h1_start_stop", F_STOP,
             cat(h1("POST", SVC "Start", STREAM_CT, NULL, env(start_req(&sp))),
                 text(HEALTH)));
  bytes_seed("h1_start_chunk7", CHUNK_7,
             h1("POST", SVC "Start", STREAM_CT, NULL, env(start_cmd("false"))));
  bytes_seed("h1_connect_web", F_SNDBUF,
             h1("POST", SVC "Connect", STREAM_CT, NULL,
                env(connect_req(sel_pid(PID_WEB)))));
  bytes_seed(
      "h1_stream_input", 0,
      h1_chunked(SVC "StreamInput", STREAM_CT,
                 cat(cat(si_start(sel_pid(PID_WEB)), si_data(1, "hello\n")),
                     cat(si_keepalive(), si_data(1, "again\n"))),
                 5));
  bytes_seed("h1_stream_input_tty", F_SMALL | CHUNK_64,
             h1_chunked(SVC "StreamInput", STREAM_CT,
                        cat(si_start(sel_tag("tty")),
                            cat(si_data(2, "0123456789abcdef0123456789"),
                                si_data(2, "0123456789abcdef0123456789"))),
                        512));
  bytes_seed("h1_signal_chunked", 0,
             h1_chunked(SVC "SendSignal", UNARY_CT,
                        signal_req(sel_pid(PID_WEB), 9), 2));
  bytes_seed("h1_close_stdin", CHUNK_64,
             cat(h1("POST", SVC "CloseStdin", UNARY_CT, NULL,
                    close_stdin_req(sel_tag("web"))),
                 h1("POST", SVC "Update", UNARY_CT, NULL,
                    update_req(sel_tag("tty"), 100, 40))));
  bytes_seed(
      "h1_token", F_TOKEN,
      cat(h1("POST", SVC "List", UNARY_CT, NULL, none()),
          h1("POST", SVC "List", UNARY_CT, "X-Access-Token: tok\r\n", none())));
  memset(big, 'z', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  bytes_seed("h1_too_big", F_SMALL,
             cat(h1("POST", SVC "SendInput", UNARY_CT, NULL,
                    send_input_req(sel_pid(PID_WEB), 1, big)),
                 text(HEALTH)));
  bytes_seed("h1_early_answer", 0,
             cat(h1("POST", "/nope", UNARY_CT, NULL, text("0123456789")),
                 text(HEALTH)));
  bytes_seed("h1_expect_wait", 0,
             text("POST " SVC "SendSignal HTTP/1.1\r\nHost: x\r\n"
                  "Content-Type: application/proto\r\nContent-Length: 9\r\n"
                  "Expect: 100-continue\r\n\r\n"));
  {
    bytes body = env(start_cmd("true"));
    char head[256];

    snprintf(head, sizeof(head),
             "POST " SVC "Start HTTP/1.0\r\nContent-Type: "
             "application/connect+proto\r\nContent-Length: %zu\r\n\r\n",
             body.len);
    bytes_seed("h1_http10_stream", 0, cat(text(head), body));
  }
  {
    bytes many = none();
    int i;

    /* More answers than a small socket buffer holds, in one go. */
    for (i = 0; i < 90; i++) {
      many = cat(many, h1("POST", SVC "List", UNARY_CT, NULL, none()));
    }
    bytes_seed("h1_pipeline_many", F_SNDBUF, many);
  }
  bytes_seed("h1_expect", 0,
             h1("POST", SVC "SendSignal", UNARY_CT, "Expect: 100-continue\r\n",
                signal_req(sel_pid(PID_OLD), 15)));
}

static void seeds_http1(void) {
  bytes many = text("GET /health HTTP/1.1\r\nHost: x\r\n");
  int i;

  raw_seed("http1_health", 0, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  raw_seed("http1_post", 0,
           "POST /process.Process/List HTTP/1.1\r\nHost: x\r\n"
           "Content-Length: 0\r\n\r\n");
  raw_seed("http1_partial", CHUNK_7, "GET /health HTTP/1.1\r\nHost");
  raw_seed("preface_short", CHUNK_7, "PRI * HTTP/2.0\r\n\r\nSM");
  raw_seed("preface_2", 0, "PR");
  raw_seed("preface_bad", 0, "PRI * HTTP/1.1\r\n\r\nXX\r\n\r\n");
  raw_seed("h1_head", 0,
           "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
           "HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n"
           "HEAD /process.Process/List HTTP/1.1\r\nHost: x\r\n\r\n");
  raw_seed("h1_http10", 0,
           "POST /process.Process/List HTTP/1.0\r\nConnection: keep-alive"
           "\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n"
           "GET /health HTTP/1.0\r\n\r\nGET /health HTTP/1.0\r\n\r\n");
  raw_seed("h1_absolute", 0,
           "GET http://sandbox:49983/health?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
           "GET https://sandbox?x HTTP/1.1\r\nHost: x\r\n\r\n");
  raw_seed("h1_upgrade", 0,
           "GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, "
           "HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQ"
           "\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  raw_seed("h1_connection_list", 0,
           "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nConnection: "
           "keep-alive, X-Drop\r\nX-Drop: 1\r\nTE: trailers\r\nContent-Type: "
           "application/proto\r\nContent-Length: 0\r\nX-Obs: a\r\n b\r\n\r\n");
  raw_seed("h1_no_host", 0, "GET /health HTTP/1.1\r\n\r\n");
  raw_seed("h1_two_hosts", 0,
           "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  raw_seed("h1_bad_chunk", 0,
           "POST /process.Process/List HTTP/1.1\r\nHost: x\r\n"
           "Transfer-Encoding: chunked\r\n\r\n1\r\nab\r\n");
  raw_seed("h1_cl_te", 0,
           "POST /process.Process/List HTTP/1.1\r\nHost: x\r\n"
           "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  raw_seed("h1_version", 0, "GET /health HTTP/2.0\r\nHost: x\r\n\r\n");
  raw_seed("h1_methods", 0, "FOO /health HTTP/1.1\r\nHost: x\r\n\r\n");
  raw_seed("h1_put", 0,
           "PUT /health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab");
  raw_seed("h1_connect", 0, "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n");
  raw_seed("h1_expect_bad", 0,
           "POST /process.Process/List HTTP/1.1\r\nHost: x\r\n"
           "Expect: nope\r\nContent-Length: 1\r\n\r\nx");
  raw_seed("h1_garbage", CHUNK_7, "\r\n\r\n\x01\x02\x03 / HTTP/1.1\r\n\r\n");
  for (i = 0; i < 110; i++) {
    char line[32];

    snprintf(line, sizeof(line), "X-%d: v\r\n", i);
    many = cat(many, text(line));
  }
  bytes_seed("h1_many_headers", 0, cat(many, text("\r\n")));
  {
    char url[8300];

    memset(url, 'u', sizeof(url) - 1);
    url[0] = '/';
    url[sizeof(url) - 1] = '\0';
    bytes_seed("h1_long_url", 0,
               cat(cat(text("GET "), text(url)),
                   text(" HTTP/1.1\r\nHost: x\r\n\r\n")));
  }
  seeds_http1_calls();
}

/* ---- fuzz_files' HTTP/2 seeds ------------------------------------------- */

static const char *const octet[] = {"content-type", "application/octet-stream",
                                    NULL};

static bytes zeros(size_t n) {
  uint8_t *p = calloc(1, n);
  bytes b;
  if (p == NULL) {
    die("out of memory");
  }
  b = raw(p, n);
  free(p);
  return b;
}

static void seeds_files(void) {
  static const char *const gz_hdrs[] = {"content-type",
                                        "application/octet-stream",
                                        "content-encoding", "gzip", NULL};
  static const char *const mp[] = {"content-type",
                                    "multipart/form-data; boundary=XyZ", NULL};
  static const char *const tok[] = {"content-type", "application/octet-stream",
                                    "x-access-token", "tok", NULL};
  static const char *const bad_tok[] = {"x-access-token", "nope", NULL};
  static const char two_parts[] =
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"/tmp/m/one.txt\"\r\nContent-Type: application/octet-stream"
      "\r\n\r\none\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"/tmp/m/two.bin\"\r\n\r\n\x00\x01two\r\n--XyZ--\r\n";
  bytes body;

  begin();
  request("POST", "/files?path=/tmp/d/a.txt", octet, text("hello over h2\n"));
  request("GET", "/files?path=/tmp/d/a.txt", NULL, none());
  request("HEAD", "/files?path=/tmp/d/a.txt", NULL, none());
  finish("h2_raw_up_then_get", 0);

  begin();
  body = raw(two_parts, sizeof(two_parts) - 1);
  request_ex("POST", "/files", mp, &body, 7, 1); /* 7-byte DATA frames */
  request("GET", "/files?path=/tmp/m/two.bin", NULL, none());
  finish("h2_multipart_frames", 0);

  begin();
  request("POST", "/files?path=/tmp/g.txt", gz_hdrs,
          gzip(text("gzip'd over h2, gzip'd over h2, gzip'd over h2\n")));
  request("POST", "/files?path=/tmp/full.bin", gz_hdrs, gzip(zeros(2u << 20)));
  finish("h2_gzip_and_full_disk", 0);

  begin();
  request("GET", "/files?path=/tmp/none", NULL, none());
  request("GET", "/files?path=/tmp", NULL, none());
  request("POST", "/files?path=~/x/y.txt&username=user", octet, text("hi"));
  request("POST", "/files?path=/tmp/u&username=nosuch", octet, text("u"));
  request("DELETE", "/files?path=/tmp/none", NULL, none());
  finish("h2_errors", F_ROOT);

  begin();
  request("POST", "/files?path=/tmp/t.txt", tok, text("t"));
  request("GET", "/files?path=/tmp/t.txt", bad_tok, none());
  request("GET", "/files?path=/tmp/t.txt&signature=v1_x&"
                 "signature_expiration=1",
          NULL, none());
  finish("h2_token", F_TOKEN);

  /* An upload the client gives up on mid-body, then one that goes on. */
  begin();
  body = text("never ends");
  {
    int32_t id = request_ex("POST", "/files?path=/tmp/cut.txt", octet, &body,
                            0, 0);
    rst(id);
  }
  request("POST", "/files?path=/tmp/after.txt", octet, text("after"));
  finish("h2_upload_reset", CHUNK_64);
}

/* A slow client on a moving clock: the timeouts of the core (header,
   body, idle) and conch serve's own timers (keepalives, deadlines) fire
   between its pieces. */
static void seeds_timed(void) {
  static const char *const ka[] = {"content-type", "application/connect+proto",
                                   "keepalive-ping-interval", "1", NULL};
  static const char *const dl[] = {"content-type", "application/connect+proto",
                                   "connect-timeout-ms", "50", NULL};

  clock_step = STEP_1S;
  raw_seed(
      "timed_h1_slow_headers", CHUNK_7,
      "GET /health HTTP/1.1\r\nHost: x\r\nX-A: aaaaaaaaaaaaaaaaaaaaaa\r\n"
      "X-B: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\r\n\r\n");
  one("timed_keepalive", CHUNK_64, "POST", SVC "Start", ka,
      env(start_cmd("sleep")));
  clock_step = STEP_10MS;
  one("timed_deadline", CHUNK_7, "POST", SVC "Start", dl,
      env(start_cmd("sleep")));
  clock_step = STEP_30S;
  raw_seed("timed_h1_slow_body", CHUNK_64,
           "POST /process.Process/List HTTP/1.1\r\nHost: x\r\n"
           "Content-Type: application/proto\r\nContent-Length: 400\r\n\r\n"
           "0123456789012345678901234567890123456789012345678901234567890123"
           "0123456789012345678901234567890123456789012345678901234567890123"
           "0123456789012345678901234567890123456789012345678901234567890123");
  one("timed_h2_slow", CHUNK_64, "POST", SVC "List", unary, none());
  raw_seed("timed_h1_idle", F_LEAVE, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  clock_step = 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--files") == 0) {
    outdir = argv[2];
    conch__gzip_init(&gz, conch_mem_default());
    seeds_files();
    conch__gzip_clear(&gz);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: serve_seeds [--files] DIR\n");
    return 2;
  }
  outdir = argv[1];
  conch__gzip_init(&gz, conch_mem_default());
  seeds_start();
  seeds_connect();
  seeds_unary();
  seeds_stream_input();
  seeds_http();
  seeds_headers();
  seeds_bodies();
  seeds_session();
  seeds_processes();
  seeds_http1();
  seeds_timed();
  conch__gzip_clear(&gz);
  return 0;
}
