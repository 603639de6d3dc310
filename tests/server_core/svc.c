/* conchtest.v1.TestService on the server core (svc.h).  A broken
   expectation in a handler aborts: handlers run on the server thread. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc.h"

#define SVC_OK(c)                                                              \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                  \
      abort();                                                                 \
    }                                                                          \
  } while (0)
#define SVC_EQ(a, b) SVC_OK((long long)(a) == (long long)(b))

#define SVC "/conchtest.v1.TestService/"

/* Marked free of side effects, so that Connect GET reaches it. */
const conch_method m_unary = {
    SVC "Unary", CONCH_STREAM_UNARY, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_NO_SIDE_EFFECTS};
const conch_method m_sstream = {
    SVC "ServerStream", CONCH_STREAM_SERVER,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
const conch_method m_cstream = {
    SVC "ClientStream", CONCH_STREAM_CLIENT,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};
const conch_method m_bidi = {
    SVC "Bidi", CONCH_STREAM_BIDI, &conchtest__v1__request__descriptor,
    &conchtest__v1__response__descriptor, CONCH_IDEMPOTENCY_UNKNOWN};
/* Raw (no descriptors): bytes in, the same bytes out, as a bidi stream. */
const conch_method m_raw = {"/conchtest.v1.Raw/Echo", CONCH_STREAM_BIDI, NULL,
                            NULL, CONCH_IDEMPOTENCY_UNKNOWN};
const conch_method m_unimpl = {
    SVC "Unimplemented", CONCH_STREAM_UNARY,
    &conchtest__v1__request__descriptor, &conchtest__v1__response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};




/* Per call: what the service accumulates (ClientStream, Bidi). */
typedef struct call_state {
  uint32_t count;
  uint64_t bytes;
  int held;
  Conchtest__V1__Request *req; /* ServerStream: the request, copied */
  uint32_t next;               /* ServerStream: the next response */
} call_state;

static fixture *fx_of(conch_rpc *rpc) { return conch_rpc_user_data(rpc); }

static void add_headers(conch_metadata *md, Conchtest__V1__Header **h,
                        size_t n) {
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < h[i]->n_values; j++) {
      conch_metadata_add(md, h[i]->name, h[i]->values[j].data,
                         h[i]->values[j].len);
    }
  }
}

static void finish_error(conch_rpc *rpc, const Conchtest__V1__ErrorSpec *e) {
  conch_status st;
  conch_error_detail d[4];

  conch_status_init(&st);
  st.code = (conch_code)e->code;
  st.message = e->message;
  for (size_t i = 0; i < e->n_details && i < 4; i++) {
    d[i].type_url = e->details[i]->type;
    d[i].value = e->details[i]->value.data;
    d[i].len = e->details[i]->value.len;
  }
  st.details = e->n_details > 0 ? d : NULL;
  st.ndetails = e->n_details < 4 ? e->n_details : 4;
  SVC_EQ(conch_rpc_finish(rpc, &st), 0);
}

static void hold(conch_rpc *rpc) {
  fixture *fx = fx_of(rpc);
  call_state *cs = conch_rpc_data(rpc);
  for (int i = 0; i < MAX_HELD; i++) {
    if (fx->held_rpc[i] == NULL) {
      fx->held_rpc[i] = rpc;
      cs->held = 1;
      atomic_fetch_add(&fx->held, 1);
      return;
    }
  }
  SVC_OK(!"too many held calls");
}

static void unhold(conch_rpc *rpc) {
  fixture *fx = fx_of(rpc);
  for (int i = 0; i < MAX_HELD; i++) {
    if (fx->held_rpc[i] == rpc) {
      fx->held_rpc[i] = NULL;
      atomic_fetch_sub(&fx->held, 1);
    }
  }
}

static void on_call(conch_rpc *rpc, void *ud) {
  call_state *cs = calloc(1, sizeof(*cs));
  fixture *fx = ud;
  atomic_fetch_add(&fx->ncalls, 1);
  SVC_OK(cs);
  conch_rpc_set_data(rpc, cs);
}

static void done(conch_rpc *rpc) {
  call_state *cs = conch_rpc_data(rpc);
  if (cs->req != NULL) {
    protobuf_c_message_free_unpacked(&cs->req->base, NULL);
  }
  free(cs);
}

/* A send failed (only under a failing allocator): the call ends. */
static void send_failed(conch_rpc *rpc) {
  conch_status st;
  conch_status_init(&st);
  st.code = CONCH_CODE_INTERNAL;
  done(rpc);
  SVC_EQ(conch_rpc_finish(rpc, &st), 0);
}

/* Returns 0, or non-zero when the send failed and the call was ended. */
static int respond(conch_rpc *rpc, const Conchtest__V1__Request *req,
                    uint32_t index) {
  Conchtest__V1__Response resp = CONCHTEST__V1__RESPONSE__INIT;
  const conch_metadata *rh = conch_rpc_request_headers(rpc);
  const char *echo = conch_metadata_get(rh, "x-echo", NULL);
  Conchtest__V1__Header h = CONCHTEST__V1__HEADER__INIT;
  Conchtest__V1__Header *hp = &h;
  ProtobufCBinaryData v;
  uint8_t *big = NULL;

  resp.index = index;
  resp.payload = req->payload;
  if (req->response_size > 0) {
    big = malloc(req->response_size);
    SVC_OK(big);
    for (uint32_t i = 0; i < req->response_size; i++) {
      big[i] = (uint8_t)(i * 7);
    }
    resp.payload.data = big;
    resp.payload.len = req->response_size;
  }
  resp.timeout_ms = conch_rpc_timeout_ms(rpc);
  if (echo != NULL && index == 0) {
    h.name = "x-echo";
    v.data = (uint8_t *)echo;
    v.len = strlen(echo);
    h.n_values = 1;
    h.values = &v;
    resp.n_request_headers = 1;
    resp.request_headers = &hp;
  }
  int rv = conch_rpc_send(rpc, &resp.base);
  free(big);
  if (rv == CONCH_ERR_AGAIN) {
    atomic_fetch_add(&fx_of(rpc)->again, 1);
    return rv;
  }
  if (rv != 0) {
    SVC_OK(fx_of(rpc)->tolerant);
    send_failed(rpc);
  }
  return rv;
}

static void on_raw(conch_rpc *rpc, const uint8_t *p, size_t n, void *ud) {
  (void)ud;
  SVC_EQ(conch_rpc_send(rpc, NULL), CONCH_ERR_INVALID);
  int rv = conch_rpc_send_raw(rpc, p, n);
  if (rv != 0) {
    SVC_OK(fx_of(rpc)->tolerant);
    send_failed(rpc);
  }
}

/* Sends ServerStream's responses while the send buffer takes them; the
   rest follows on_send_ready. */
static void pump(conch_rpc *rpc) {
  call_state *cs = conch_rpc_data(rpc);
  const Conchtest__V1__Request *req = cs->req;

  while (cs->next < req->response_count) {
    int rv = respond(rpc, req, cs->next);
    if (rv == CONCH_ERR_AGAIN) {
      return;
    }
    if (rv != 0) {
      return; /* ended */
    }
    cs->next++;
  }
  if (req->error != NULL) {
    Conchtest__V1__ErrorSpec *e = req->error;
    cs->req = NULL; /* |e| lives in it: free after the finish */
    done(rpc);
    finish_error(rpc, e);
    protobuf_c_message_free_unpacked(&((Conchtest__V1__Request *)req)->base,
                                     NULL);
  } else {
    done(rpc);
    SVC_EQ(conch_rpc_finish(rpc, NULL), 0);
  }
}

static void on_send_ready(conch_rpc *rpc, void *ud) {
  (void)ud;
  pump(rpc);
}

/* A private copy of |msg|, for use after its handler returns. */
static Conchtest__V1__Request *copy_req(const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint8_t *b = malloc(n + 1);
  Conchtest__V1__Request *r;
  SVC_OK(b);
  protobuf_c_message_pack(msg, b);
  r = conchtest__v1__request__unpack(NULL, n, b);
  free(b);
  SVC_OK(r);
  return r;
}

/* Unary and ServerStream: everything happens on the one request. */
static void on_message_once(conch_rpc *rpc, const ProtobufCMessage *msg,
                            void *ud) {
  const Conchtest__V1__Request *req = (const Conchtest__V1__Request *)msg;
  int stream = conch_rpc_method(rpc)->kind == CONCH_STREAM_SERVER;
  uint32_t n = stream ? req->response_count : 1;
  (void)ud;

  add_headers(conch_rpc_response_headers(rpc), req->response_headers,
              req->n_response_headers);
  add_headers(conch_rpc_response_trailers(rpc), req->response_trailers,
              req->n_response_trailers);
  if (conch_rpc_peer_cert_subject(rpc) != NULL) {
    size_t der_len = 0;
    char num[24];
    (void)conch_rpc_peer_cert_der(rpc, &der_len);
    snprintf(num, sizeof(num), "%zu", der_len);
    conch_metadata_add(conch_rpc_response_headers(rpc), "x-peer-subject",
                       conch_rpc_peer_cert_subject(rpc),
                       strlen(conch_rpc_peer_cert_subject(rpc)));
    conch_metadata_add(conch_rpc_response_headers(rpc), "x-peer-der-len",
                       num, strlen(num));
  }
  if (req->delay_ms > 0) { /* held until canceled or released */
    if (stream) {
      if (respond(rpc, req, 0) != 0) {
        return;
      }
    }
    hold(rpc);
    return;
  }
  if (req->error != NULL && !stream) {
    done(rpc); /* |rpc| is not ours after the finish */
    finish_error(rpc, req->error);
    return;
  }
  if (stream) {
    ((call_state *)conch_rpc_data(rpc))->req = copy_req(msg);
    pump(rpc);
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    if (respond(rpc, req, i) != 0) {
      return;
    }
  }
  done(rpc);
  if (req->error != NULL) {
    finish_error(rpc, req->error);
  } else {
    SVC_EQ(conch_rpc_finish(rpc, NULL), 0);
  }
}

static void on_cstream_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                               void *ud) {
  const Conchtest__V1__Request *req = (const Conchtest__V1__Request *)msg;
  call_state *cs = conch_rpc_data(rpc);
  (void)ud;
  cs->count++;
  cs->bytes += req->payload.len;
  if (cs->count == 1 && req->delay_ms > 0) { /* no more until released */
    SVC_EQ(conch_rpc_pause(rpc), 0);
    hold(rpc);
  }
}

static void on_cstream_half_close(conch_rpc *rpc, void *ud) {
  Conchtest__V1__Response resp = CONCHTEST__V1__RESPONSE__INIT;
  call_state *cs = conch_rpc_data(rpc);
  (void)ud;
  resp.message_count = cs->count;
  resp.total_bytes = cs->bytes;
  if (conch_rpc_send(rpc, &resp.base) != 0) {
    SVC_OK(fx_of(rpc)->tolerant);
    send_failed(rpc);
    return;
  }
  SVC_EQ(conch_rpc_send(rpc, &resp.base), CONCH_ERR_STATE);
  done(rpc);
  SVC_EQ(conch_rpc_finish(rpc, NULL), 0);
}

static void on_bidi_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                            void *ud) {
  const Conchtest__V1__Request *req = (const Conchtest__V1__Request *)msg;
  call_state *cs = conch_rpc_data(rpc);
  (void)ud;
  if (req->error != NULL) {
    done(rpc);
    finish_error(rpc, req->error);
    return;
  }
  (void)respond(rpc, req, cs->count++);
}

static void on_bidi_half_close(conch_rpc *rpc, void *ud) {
  (void)ud;
  done(rpc);
  SVC_EQ(conch_rpc_finish(rpc, NULL), 0);
}

static void on_cancel(conch_rpc *rpc, const conch_status *st, void *ud) {
  fixture *fx = fx_of(rpc);
  (void)ud;
  unhold(rpc);
  atomic_store(&fx->last_cancel_code, (int)st->code);
  atomic_fetch_add(&fx->cancels, 1);
  SVC_EQ(conch_rpc_finish(rpc, NULL), CONCH_ERR_STATE);
  done(rpc);
}

static void release_held(fixture *fx) {
  for (int i = 0; i < MAX_HELD; i++) {
    conch_rpc *rpc = fx->held_rpc[i];
    if (rpc != NULL && conch_rpc_method(rpc)->kind == CONCH_STREAM_CLIENT) {
      call_state *cs = conch_rpc_data(rpc);
      unhold(rpc);
      SVC_EQ(cs->count, 1); /* nothing was delivered while paused */
      SVC_EQ(conch_rpc_resume(rpc), 0);
      continue;
    }
    if (rpc != NULL) {
      Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
      unhold(rpc);
      req.payload.data = (uint8_t *)"late";
      req.payload.len = 4;
      if (respond(rpc, &req,
                  conch_rpc_method(rpc)->kind == CONCH_STREAM_SERVER) != 0) {
        continue;
      }
      done(rpc);
      SVC_EQ(conch_rpc_finish(rpc, NULL), 0);
    }
  }
}

static void *server_thread(void *arg) {
  fixture *fx = arg;
  while (!atomic_load(&fx->stop)) {
    int rv = conch_server_run(fx->s, 20);
    SVC_EQ(rv, 0);
    if (atomic_load(&fx->shutdown_req) && !atomic_load(&fx->shutdown_done)) {
      SVC_EQ(conch_server_shutdown(fx->s), 0);
      atomic_store(&fx->shutdown_done, 1);
    }
    if (atomic_exchange(&fx->release, 0)) {
      release_held(fx);
    }
    atomic_store(&fx->idle, conch_server_idle(fx->s));
    atomic_store(&fx->calls_live, (int)conch_server_calls(fx->s));
  }
  return NULL;
}

/* Returns 0, or what failed (the fixture is then cleaned up). */
static int try_start(fixture *fx, conch_server_opts *opts, int use_unix,
                     int health) {
  const conch_server_handler once = {on_call, on_message_once, NULL, NULL,
                                     on_cancel, on_send_ready};
  const conch_server_handler cstream = {on_call, on_cstream_message, NULL,
                                        on_cstream_half_close, on_cancel};
  const conch_server_handler bidi = {on_call, on_bidi_message, NULL,
                                     on_bidi_half_close, on_cancel};
  int tolerant = fx->tolerant;
  static atomic_int nsock;
  char addr[128];
  int rv;

  memset(fx, 0, sizeof(*fx));
  fx->tolerant = tolerant;
  fx->health = health;
  rv = conch_server_new(&fx->s, opts);
  if (rv != 0) {
    return rv;
  }
  if (health) {
    SVC_EQ(conch_server_add_health(fx->s), 0);
  }
  const conch_server_handler raw = {on_call, NULL, on_raw, on_bidi_half_close,
                                    on_cancel, NULL};
  rv = conch_server_add_method(fx->s, &m_unary, &once, fx);
  if (rv == 0) {
    rv = conch_server_add_method(fx->s, &m_raw, &raw, fx);
  }
  if (rv == 0) {
    rv = conch_server_add_method(fx->s, &m_sstream, &once, fx);
  }
  if (rv == 0) {
    rv = conch_server_add_method(fx->s, &m_cstream, &cstream, fx);
  }
  if (rv == 0) {
    rv = conch_server_add_method(fx->s, &m_bidi, &bidi, fx);
  }
  if (rv == 0) {
    SVC_EQ(conch_server_add_method(fx->s, &m_bidi, &bidi, fx),
           CONCH_ERR_INVALID);
    if (use_unix) {
      int k = atomic_fetch_add(&nsock, 1);
      if (k == 0) {
        snprintf(fx->sock, sizeof(fx->sock), "/tmp/conch-srvcore-%d.sock",
                 (int)getpid());
      } else {
        snprintf(fx->sock, sizeof(fx->sock), "/tmp/conch-srvcore-%d-%d.sock",
                 (int)getpid(), k);
      }
      snprintf(fx->url, sizeof(fx->url), "unix:%s", fx->sock);
      snprintf(addr, sizeof(addr), "unix:%s", fx->sock);
      rv = conch_server_listen(fx->s, addr);
    } else {
      rv = conch_server_listen(fx->s, "127.0.0.1:0");
      snprintf(fx->url, sizeof(fx->url), "http://127.0.0.1:%d",
               conch_server_port(fx->s));
    }
  }
  if (rv != 0) {
    conch_server_free(fx->s);
    fx->s = NULL;
    return rv;
  }
  SVC_EQ(pthread_create(&fx->thread, NULL, server_thread, fx), 0);
  return 0;
}

int fx_try_start(fixture *fx, conch_server_opts *opts, int use_unix) {
  return try_start(fx, opts, use_unix, 0);
}

void fx_start(fixture *fx, conch_server_opts *opts, int use_unix) {
  fx->tolerant = 0;
  SVC_EQ(try_start(fx, opts, use_unix, 0), 0);
}

void fx_start_health(fixture *fx, conch_server_opts *opts, int use_unix) {
  fx->tolerant = 0;
  SVC_EQ(try_start(fx, opts, use_unix, 1), 0);
}

void fx_pause(fixture *fx) {
  atomic_store(&fx->stop, 1);
  pthread_join(fx->thread, NULL);
}

void fx_resume(fixture *fx) {
  atomic_store(&fx->stop, 0);
  SVC_EQ(pthread_create(&fx->thread, NULL, server_thread, fx), 0);
}

void fx_stop(fixture *fx) {
  atomic_store(&fx->stop, 1);
  pthread_join(fx->thread, NULL);
  conch_server_free(fx->s);
  if (fx->sock[0] != '\0') {
    unlink(fx->sock);
  }
}

static int xr_compress(void *ud, int level, const uint8_t *in, size_t len,
                       conch_compress_out *out) {
  int rv = conch_compress_out_write(out, "XR", 2);
  (void)level;
  if (ud != NULL) {
    atomic_fetch_add(&((svc_xr_count *)ud)->comp, 1);
  }
  for (size_t i = len; i > 0 && rv == 0; i--) {
    uint8_t b = (uint8_t)(in[i - 1] ^ 0x5a);
    rv = conch_compress_out_write(out, &b, 1);
  }
  return rv;
}

static int xr_decompress(void *ud, const uint8_t *in, size_t len,
                         conch_compress_out *out) {
  int rv = 0;
  if (ud != NULL) {
    atomic_fetch_add(&((svc_xr_count *)ud)->decomp, 1);
  }
  if (len < 2 || memcmp(in, "XR", 2) != 0) {
    return CONCH_ERR_COMPRESSION;
  }
  for (size_t i = len; i > 2 && rv == 0; i--) {
    uint8_t b = (uint8_t)(in[i - 1] ^ 0x5a);
    rv = conch_compress_out_write(out, &b, 1);
  }
  return rv;
}

conch_compressor svc_xr_compressor(svc_xr_count *count) {
  conch_compressor xr = CONCH_COMPRESSOR_INIT;
  xr.name = "x-rev";
  xr.compress = xr_compress;
  xr.decompress = xr_decompress;
  xr.user_data = count;
  return xr;
}

int svc_make_cert(char *dir, const char *san, char *cert, char *key,
                  size_t cap) {
  char cmd[1024];
  if (mkdtemp(dir) == NULL) {
    return -1;
  }
  snprintf(cert, cap, "%s/cert.pem", dir);
  snprintf(key, cap, "%s/key.pem", dir);
  snprintf(cmd, sizeof(cmd),
           "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
           "-nodes -days 2 -subj /CN=localhost -addext subjectAltName=%s "
           "-keyout %s -out %s >/dev/null 2>&1",
           san, key, cert);
  return system(cmd) == 0 ? 0 : -1;
}
