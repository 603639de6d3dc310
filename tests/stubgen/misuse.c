/* Misuse of the generated stubs, client (cases 1-8 and, for _async(),
   15-20) and server (9-14; pull mode 21-23; typed sources 24-26), must
   not compile.  Built with -DCASE=n by the stubgen/misuse_* tests,
   each expected to fail; CASE 0 is the same code used rightly and must
   compile, so the failures come from the misuse and not from the file. */
#include "stubgen.conch.h"
#include "stubgen/nested/v1/nested.conch.h"

void misuse(conch_client *c, Echo__ClientStream_Call cs, Echo__Unary_Call u,
            Echo__ServerStream_Call ss);
void server_misuse(conch_server *srv, Echo__Unary_Rpc ur,
                   Echo__ServerStream_Rpc sr);
void pull_misuse(Echo__ClientStream_Rpc cr, Echo__Unary_Rpc ur);

/* Server handlers: the right one for Echo/Unary, and wrong ones. */
static void srv_unary(Echo__Unary_Rpc rpc, const Ping *req, void *user_data) {
  (void)rpc;
  (void)req;
  (void)user_data;
}

static void srv_takes_pong(Echo__Unary_Rpc rpc, const Pong *req,
                           void *user_data) {
  (void)rpc;
  (void)req;
  (void)user_data;
}

static void srv_other_rpc(Echo__ServerStream_Rpc rpc, const Ping *req,
                          void *user_data) {
  (void)rpc;
  (void)req;
  (void)user_data;
}

static void on_ping(Echo__Unary_Call call, const Ping *msg, void *user_data) {
  (void)call;
  (void)msg;
  (void)user_data;
}

static void on_pong(Echo__Unary_Call call, const Pong *msg, void *user_data) {
  (void)call;
  (void)msg;
  (void)user_data;
}

/* _Done callbacks: the right one for Echo/Unary, and one taking a Ping. */
static void done_pong(const Pong *resp, const conch_status *st,
                      const conch_metadata *headers,
                      const conch_metadata *trailers, void *user_data) {
  (void)resp;
  (void)st;
  (void)headers;
  (void)trailers;
  (void)user_data;
}

static void done_ping(const Ping *resp, const conch_status *st,
                      const conch_metadata *headers,
                      const conch_metadata *trailers, void *user_data) {
  (void)resp;
  (void)st;
  (void)headers;
  (void)trailers;
  (void)user_data;
}

/* Server-streaming _async() callbacks: the right ones for
   Echo/ServerStream, and one taking a Ping. */
static void on_pong_msg(const Pong *msg, void *user_data) {
  (void)msg;
  (void)user_data;
}

static void on_ping_msg(const Ping *msg, void *user_data) {
  (void)msg;
  (void)user_data;
}

static void stream_done(const conch_status *st, const conch_metadata *headers,
                        const conch_metadata *trailers, void *user_data) {
  (void)st;
  (void)headers;
  (void)trailers;
  (void)user_data;
}

void misuse(conch_client *c, Echo__ClientStream_Call cs, Echo__Unary_Call u,
            Echo__ServerStream_Call ss) {
  Ping ping = PING__INIT;
  Pong pong = PONG__INIT;
  Pong *resp = NULL;
  Ping *wrong = NULL;
  Echo__Unary_Handler h = {0};
  Echo__ServerStream_Handler sh = {0};
  (void)pong;
  (void)wrong;
  (void)sh;
  (void)on_ping;
  (void)on_pong;
  (void)done_ping;
  (void)done_pong;
  (void)on_pong_msg;
  (void)on_ping_msg;
  (void)stream_done;

#if CASE == 0
  h.on_message = on_pong;
  echo__client_stream_send(cs, &ping);
  echo__unary_start(c, NULL, &ping, &h, &u);
  echo__server_stream_recv(ss, &resp);
  echo__unary_sync(c, NULL, &ping, &resp, NULL, NULL, NULL);
  echo__client_stream_close_and_recv_sync(cs, &resp);
  echo__unary_async(c, NULL, &ping, done_pong, NULL, NULL);
  echo__server_stream_async(c, NULL, &ping, on_pong_msg, stream_done, NULL,
                            NULL);
#elif CASE == 1
  /* A request of the wrong type. */
  echo__client_stream_send(cs, &pong);
#elif CASE == 2
  /* Sending on a unary call: there is no such function. */
  echo__unary_send(u, &ping);
#elif CASE == 3
  /* Receiving through the functions of another method. */
  echo__server_stream_recv(u, &resp);
#elif CASE == 4
  /* A response pointer of the wrong type. */
  echo__unary_sync(c, NULL, &ping, &wrong, NULL, NULL, NULL);
#elif CASE == 5
  /* A handler taking the wrong message type. */
  h.on_message = on_ping;
#elif CASE == 6
  /* The handlers of another method. */
  echo__unary_start(c, NULL, &ping, &sh, &u);
#elif CASE == 7
  /* Half-closing a server-streaming call: it has no requests to end. */
  echo__server_stream_close_send(ss);
#elif CASE == 8
  /* close_and_recv exists for client streaming only. */
  echo__bidi_close_and_recv_sync(cs, &resp);
#elif CASE == 15
  /* A _Done callback taking the wrong response type. */
  echo__unary_async(c, NULL, &ping, done_ping, NULL, NULL);
#elif CASE == 16
  /* _async() exists for unary and server-streaming methods only. */
  echo__bidi_async(c, NULL, &ping, done_pong, NULL, NULL);
#elif CASE == 17
  /* A request of the wrong type. */
  echo__unary_async(c, NULL, &pong, done_pong, NULL, NULL);
#elif CASE == 18
  /* Server streaming: an _OnMessage taking the wrong response type. */
  echo__server_stream_async(c, NULL, &ping, on_ping_msg, stream_done, NULL,
                            NULL);
#elif CASE == 19
  /* Server streaming: a unary _Done (with a response) as the end. */
  echo__server_stream_async(c, NULL, &ping, on_pong_msg, done_pong, NULL,
                            NULL);
#elif CASE == 20
  /* Server streaming: a request of the wrong type. */
  echo__server_stream_async(c, NULL, &pong, on_pong_msg, stream_done, NULL,
                            NULL);
#endif
  (void)h;
  (void)c;
  (void)cs;
  (void)u;
  (void)ss;
  (void)resp;
}

/* Typed sources: the right one for Echo/ServerStream, and wrong ones. */
static const Pong *src_stream(Echo__ServerStream_Rpc rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
  return NULL;
}

static const Ping *src_gives_ping(Echo__ServerStream_Rpc rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
  return NULL;
}

static const Pong *src_bidi(Echo__Bidi_Rpc rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
  return NULL;
}

void server_misuse(conch_server *srv, Echo__Unary_Rpc ur,
                   Echo__ServerStream_Rpc sr) {
  Ping ping = PING__INIT;
  Pong pong = PONG__INIT;
  Echo_Handlers eh = {0};
  Switch__Handlers other = {0};
  (void)ping;
  (void)pong;
  (void)other;
  (void)srv_unary;
  (void)srv_takes_pong;
  (void)srv_other_rpc;
  (void)src_stream;
  (void)src_gives_ping;
  (void)src_bidi;

#if CASE == 0
  eh.unary.on_request = srv_unary;
  eh.server_stream.on_request = srv_other_rpc;
  echo__unary_rpc_send(ur, &pong);
  echo__server_stream_rpc_send(sr, &pong);
  echo__server_stream_rpc_stream(sr, src_stream, NULL);
  echo__server_stream_rpc_wake(sr);
  echo__unary_rpc_finish(ur, NULL);
  echo__register(srv, &eh);
#elif CASE == 9
  /* Server: a response of the wrong type to a typed send. */
  echo__unary_rpc_send(ur, &ping);
#elif CASE == 10
  /* Server: a handler taking the wrong request type in the table. */
  eh.unary.on_request = srv_takes_pong;
#elif CASE == 11
  /* Server: another method's handler in the table. */
  eh.unary.on_request = srv_other_rpc;
#elif CASE == 12
  /* Server: sending through another method's function. */
  echo__unary_rpc_send(sr, &pong);
#elif CASE == 13
  /* Server: a unary entry has no on_message (one request, on_request). */
  eh.unary.on_message = srv_unary;
#elif CASE == 14
  /* Server: another service's table. */
  echo__register(srv, &other);
#elif CASE == 24
  /* Server: a source of responses of the wrong type. */
  echo__server_stream_rpc_stream(sr, src_gives_ping, NULL);
#elif CASE == 25
  /* Server: a unary method has no source (one response). */
  echo__unary_rpc_stream(ur, src_stream, NULL);
#elif CASE == 26
  /* Server: another method's source. */
  echo__server_stream_rpc_stream(sr, src_bidi, NULL);
#endif
  (void)eh;
  (void)srv;
  (void)ur;
  (void)sr;
}

/* Pull-mode handlers: the right one for Echo/ClientStream, and one of
   Echo/Bidi. */
static void srv_cs_ready(Echo__ClientStream_Rpc rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
}

static void srv_bidi_ready(Echo__Bidi_Rpc rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
}

void pull_misuse(Echo__ClientStream_Rpc cr, Echo__Unary_Rpc ur) {
  Echo_Handlers eh = {0};
  Ping *ping = NULL;
  Pong *pong = NULL;
  (void)srv_cs_ready;
  (void)srv_bidi_ready;
  (void)ping;
  (void)pong;
  (void)ur;

#if CASE == 0
  eh.client_stream.on_recv_ready = srv_cs_ready;
  eh.bidi.on_recv_ready = srv_bidi_ready;
  echo__client_stream_rpc_recv(cr, &ping);
#elif CASE == 21
  /* Server, pull mode: taking a request into the wrong type. */
  echo__client_stream_rpc_recv(cr, &pong);
#elif CASE == 22
  /* Server, pull mode: a unary method has no _rpc_recv() (its one request
     comes to on_request). */
  echo__unary_rpc_recv(ur, &ping);
#elif CASE == 23
  /* Server, pull mode: another method's on_recv_ready in the table. */
  eh.client_stream.on_recv_ready = srv_bidi_ready;
#endif
  (void)eh;
  (void)cr;
}
