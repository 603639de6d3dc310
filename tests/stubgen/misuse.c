/* Misuse of the generated stubs must not compile.  Built with -DCASE=n by
   the stubgen/misuse_* tests, each expected to fail; CASE 0 is the same
   code used rightly and must compile, so the failures come from the
   misuse and not from the file. */
#include "stubgen.conch.h"
#include "stubgen/nested/v1/nested.conch.h"

void misuse(conch_client *c, Echo__ClientStream_Call cs, Echo__Unary_Call u,
            Echo__ServerStream_Call ss);

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

#if CASE == 0
  h.on_message = on_pong;
  echo__client_stream_send(cs, &ping);
  echo__unary_start(c, NULL, &ping, &h, &u);
  echo__server_stream_recv(ss, &resp);
  echo__unary_sync(c, NULL, &ping, &resp, NULL, NULL, NULL);
  echo__client_stream_close_and_recv_sync(cs, &resp);
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
#endif
  (void)h;
  (void)c;
  (void)cs;
  (void)u;
  (void)ss;
  (void)resp;
}
