/* The server core's API in a build without the server
   (CONCH_WITH_SERVER=OFF): server.c, server_rpc.c and server_h1.c are not
   compiled, and every function of conch/server.h is here so that code
   written against it (the server half of generated stubs, adapters)
   still links and finds out at run time.  Nothing can make a server:
   conch_server_opts_new() and conch_server_new() return
   CONCH_ERR_UNSUPPORTED with |*out| NULL, as does every other function
   that returns a CONCH_ERR_*; the rest return what they return for NULL.
   tests/install/minimal.sh checks that this file exports every symbol
   the full library does. */
#include <stddef.h>
#include <stdint.h>

#include <conch/interceptor.h>
#include <conch/server.h>

int conch_server_opts_new(conch_server_opts **out) {
  if (out != NULL) {
    *out = NULL;
  }
  return CONCH_ERR_UNSUPPORTED;
}

void conch_server_opts_free(conch_server_opts *opts) { (void)opts; }

int conch_server_opts_set_mem(conch_server_opts *opts, const conch_mem *mem) {
  (void)opts;
  (void)mem;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_recv_limit(conch_server_opts *opts, size_t bytes) {
  (void)opts;
  (void)bytes;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_max_header_list(conch_server_opts *opts,
                                          uint32_t bytes) {
  (void)opts;
  (void)bytes;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_max_streams(conch_server_opts *opts, uint32_t n) {
  (void)opts;
  (void)n;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_send_buffer(conch_server_opts *opts, size_t bytes) {
  (void)opts;
  (void)bytes;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_idle_timeout(conch_server_opts *opts, long ms) {
  (void)opts;
  (void)ms;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_clock(conch_server_opts *opts,
                                int64_t (*now_ms)(void *user_data),
                                void *user_data) {
  (void)opts;
  (void)now_ms;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_drain_timeout(conch_server_opts *opts, long ms) {
  (void)opts;
  (void)ms;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_compression(conch_server_opts *opts,
                                      const char *names) {
  (void)opts;
  (void)names;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_tls(conch_server_opts *opts, const char *cert_file,
                              const char *key_file) {
  (void)opts;
  (void)cert_file;
  (void)key_file;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_tls_pem(conch_server_opts *opts, const char *cert,
                                  size_t cert_len, const char *key,
                                  size_t key_len) {
  (void)opts;
  (void)cert;
  (void)cert_len;
  (void)key;
  (void)key_len;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_tls_client_ca_file(conch_server_opts *opts,
                                             const char *path) {
  (void)opts;
  (void)path;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_tls_client_ca_pem(conch_server_opts *opts,
                                            const char *pem, size_t len) {
  (void)opts;
  (void)pem;
  (void)len;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_tls_client_cert_required(conch_server_opts *opts,
                                                   int required) {
  (void)opts;
  (void)required;
  return CONCH_ERR_UNSUPPORTED;
}

const char *conch_server_opts_tls_error(const conch_server_opts *opts) {
  (void)opts;
  return NULL;
}

int conch_server_opts_set_compress_min_bytes(conch_server_opts *opts,
                                             size_t bytes) {
  (void)opts;
  (void)bytes;
  return CONCH_ERR_UNSUPPORTED;
}

const char *conch_server_request_header(const conch_server_request *req,
                                        const char *name) {
  (void)req;
  (void)name;
  return NULL;
}

int conch_server_opts_set_gate(conch_server_opts *opts,
                               conch_server_gate_fn gate, void *user_data) {
  (void)opts;
  (void)gate;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_accept_filter(conch_server_opts *opts,
                                        conch_server_accept_fn fn,
                                        void *user_data) {
  (void)opts;
  (void)fn;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_max_conns(conch_server_opts *opts, size_t n) {
  (void)opts;
  (void)n;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_header_timeout(conch_server_opts *opts, long ms) {
  (void)opts;
  (void)ms;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_body_timeout(conch_server_opts *opts, long ms) {
  (void)opts;
  (void)ms;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_buffer_limits(conch_server_opts *opts,
                                        size_t per_conn, size_t total) {
  (void)opts;
  (void)per_conn;
  (void)total;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_add_compression(conch_server_opts *opts,
                                      const conch_compressor *comp, int *id) {
  (void)opts;
  (void)comp;
  (void)id;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_opts_set_json_resolver(conch_server_opts *opts,
                                        conch_json_resolver fn,
                                        void *user_data) {
  (void)opts;
  (void)fn;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_new(conch_server **out, const conch_server_opts *opts) {
  if (out != NULL) {
    *out = NULL;
  }
  (void)opts;
  return CONCH_ERR_UNSUPPORTED;
}

void conch_server_free(conch_server *s) { (void)s; }

int conch_server_add_method(conch_server *s, const conch_method *method,
                            const conch_server_handler *handler,
                            void *user_data) {
  (void)s;
  (void)method;
  (void)handler;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_add_route(conch_server *s, const char *path,
                           conch_server_route_fn fn, void *user_data) {
  (void)s;
  (void)path;
  (void)fn;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_listen(conch_server *s, const char *addr) {
  (void)s;
  (void)addr;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_listen_fd(conch_server *s, int fd) {
  (void)s;
  (void)fd;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_port(const conch_server *s) {
  (void)s;
  return 0;
}

int conch_server_adopt(conch_server *s, int handle,
                       const conch_server_transport *t) {
  (void)s;
  (void)handle;
  (void)t;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_shutdown(conch_server *s) {
  (void)s;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_idle(const conch_server *s) {
  (void)s;
  return 0;
}

size_t conch_server_calls(const conch_server *s) {
  (void)s;
  return 0;
}

int conch_server_set_io_hooks(conch_server *s, const conch_io_hooks *hooks) {
  (void)s;
  (void)hooks;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_on_io(conch_server *s, int fd, unsigned events) {
  (void)s;
  (void)fd;
  (void)events;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_on_timer(conch_server *s) {
  (void)s;
  return CONCH_ERR_UNSUPPORTED;
}

size_t conch_server_pollfds(conch_server *s, struct pollfd *fds, size_t nfds) {
  (void)s;
  (void)fds;
  (void)nfds;
  return 0;
}

long conch_server_timeout_ms(conch_server *s) {
  (void)s;
  return -1;
}

int conch_server_process(conch_server *s, const struct pollfd *fds,
                         size_t nfds) {
  (void)s;
  (void)fds;
  (void)nfds;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_run(conch_server *s, long timeout_ms) {
  (void)s;
  (void)timeout_ms;
  return CONCH_ERR_UNSUPPORTED;
}

const conch_method *conch_rpc_method(const conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

conch_protocol conch_rpc_protocol(const conch_rpc *rpc) {
  (void)rpc;
  return CONCH_PROTOCOL_CONNECT;
}

conch_codec conch_rpc_codec(const conch_rpc *rpc) {
  (void)rpc;
  return CONCH_CODEC_PROTO;
}

const conch_metadata *conch_rpc_request_headers(const conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

long conch_rpc_timeout_ms(const conch_rpc *rpc) {
  (void)rpc;
  return -1;
}

unsigned conch_rpc_previous_attempts(const conch_rpc *rpc) {
  (void)rpc;
  return 0;
}

conch_metadata *conch_rpc_response_headers(conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

conch_metadata *conch_rpc_response_trailers(conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

void *conch_rpc_user_data(const conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

void conch_rpc_set_data(conch_rpc *rpc, void *data) {
  (void)rpc;
  (void)data;
}

void *conch_rpc_data(const conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

conch_server *conch_rpc_server(const conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

const char *conch_rpc_peer_cert_subject(const conch_rpc *rpc) {
  (void)rpc;
  return NULL;
}

const uint8_t *conch_rpc_peer_cert_der(const conch_rpc *rpc, size_t *len) {
  (void)rpc;
  (void)len;
  return NULL;
}

int conch_rpc_send(conch_rpc *rpc, const ProtobufCMessage *msg) {
  (void)rpc;
  (void)msg;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_send_raw(conch_rpc *rpc, const void *data, size_t len) {
  (void)rpc;
  (void)data;
  (void)len;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_send_packed(conch_rpc *rpc, const void *data, size_t len) {
  (void)rpc;
  (void)data;
  (void)len;
  return CONCH_ERR_UNSUPPORTED;
}

size_t conch_rpc_queued(const conch_rpc *rpc) {
  (void)rpc;
  return 0;
}

int conch_rpc_recv(conch_rpc *rpc, ProtobufCMessage **msg) {
  (void)rpc;
  (void)msg;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_recv_raw(conch_rpc *rpc, const uint8_t **data, size_t *len) {
  (void)rpc;
  (void)data;
  (void)len;
  return CONCH_ERR_UNSUPPORTED;
}

void conch_server_message_free(conch_server *s, ProtobufCMessage *msg) {
  (void)s;
  (void)msg;
}

int conch_rpc_notify_drained(conch_rpc *rpc, size_t low) {
  (void)rpc;
  (void)low;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_pause(conch_rpc *rpc) {
  (void)rpc;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_resume(conch_rpc *rpc) {
  (void)rpc;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_finish(conch_rpc *rpc, const conch_status *status) {
  (void)rpc;
  (void)status;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_stats_get(const conch_server *s, conch_server_stats *out,
                           size_t size) {
  (void)s;
  (void)out;
  (void)size;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_send_from(conch_rpc *rpc, const conch_rpc_source *src) {
  (void)rpc;
  (void)src;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_wake(conch_rpc *rpc) {
  (void)rpc;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_add_http(conch_server *s, const char *path,
                          const conch_http_handler *handler, void *user_data) {
  (void)s;
  (void)path;
  (void)handler;
  (void)user_data;
  return CONCH_ERR_UNSUPPORTED;
}

const char *conch_http_method(const conch_http *h) {
  (void)h;
  return NULL;
}

const char *conch_http_path(const conch_http *h) {
  (void)h;
  return NULL;
}

const char *conch_http_query(const conch_http *h) {
  (void)h;
  return NULL;
}

const char *conch_http_header(const conch_http *h, const char *name) {
  (void)h;
  (void)name;
  return NULL;
}

size_t conch_http_header_count(const conch_http *h) {
  (void)h;
  return 0;
}

int conch_http_header_at(const conch_http *h, size_t i, const char **name,
                         const char **value, size_t *len) {
  (void)h;
  (void)i;
  (void)name;
  (void)value;
  (void)len;
  return CONCH_ERR_UNSUPPORTED;
}

long conch_http_peer_uid(const conch_http *h) {
  (void)h;
  return -1;
}

conch_server *conch_http_server(const conch_http *h) {
  (void)h;
  return NULL;
}

void *conch_http_user_data(const conch_http *h) {
  (void)h;
  return NULL;
}

void conch_http_set_data(conch_http *h, void *data) {
  (void)h;
  (void)data;
}

void *conch_http_data(const conch_http *h) {
  (void)h;
  return NULL;
}

int conch_http_pause(conch_http *h) {
  (void)h;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_http_resume(conch_http *h) {
  (void)h;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_http_respond(conch_http *h, int status, const char *const *headers,
                       int body) {
  (void)h;
  (void)status;
  (void)headers;
  (void)body;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_http_write(conch_http *h, const void *data, size_t len) {
  (void)h;
  (void)data;
  (void)len;
  return CONCH_ERR_UNSUPPORTED;
}

size_t conch_http_queued(const conch_http *h) {
  (void)h;
  return 0;
}

int conch_http_end(conch_http *h) {
  (void)h;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_add_file(conch_server *s, const conch_file_descriptor *fd) {
  (void)s;
  (void)fd;
  return CONCH_ERR_UNSUPPORTED;
}

const conch_descpool *conch_server_files(const conch_server *s) {
  (void)s;
  return NULL;
}

int conch_server_add_reflection(conch_server *s) {
  (void)s;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_add_health(conch_server *s) {
  (void)s;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_health_set(conch_server *s, const char *service,
                            conch_health_status status) {
  (void)s;
  (void)service;
  (void)status;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_add_interceptor(conch_server *s,
                                 const conch_rpc_interceptor *ic) {
  (void)s;
  (void)ic;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_server_add_service_interceptor(conch_server *s, const char *service,
                                         const conch_rpc_interceptor *ic) {
  (void)s;
  (void)service;
  (void)ic;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_icept_resume(conch_rpc *rpc) {
  (void)rpc;
  return CONCH_ERR_UNSUPPORTED;
}

int conch_rpc_shorten_deadline(conch_rpc *rpc, long timeout_ms) {
  (void)rpc;
  (void)timeout_ms;
  return CONCH_ERR_UNSUPPORTED;
}
