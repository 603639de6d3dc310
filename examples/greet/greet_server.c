/* greet_server: serves greet.v1.Greeter with libconch's server core
   (conch/server.h), for the greet client next to it.

     greet_server ADDR        e.g. greet_server 127.0.0.1:8080
                                   greet_server unix:/tmp/greet.sock

   Connect, gRPC and gRPC-Web, proto and JSON, all on one h2c listener.
   The methods come from the generated stubs (conch_method); the handlers
   are written by hand, as protoc-gen-conch does not make server stubs yet.
   SIGINT or SIGTERM shuts down gracefully: calls in flight finish. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/conch.h>
#include <conch/server.h>

#include "greet/v1/greet.conch.h"

static volatile sig_atomic_t stopping;

static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

/* Both methods take one request; the answer goes out as it arrives. */
static void on_call(conch_rpc *rpc, void *user_data) {
  (void)rpc;
  (void)user_data;
}

static void on_message(conch_rpc *rpc, const ProtobufCMessage *msg,
                       void *user_data) {
  const Greet__V1__GreetRequest *req = (const Greet__V1__GreetRequest *)msg;
  Greet__V1__GreetResponse resp = GREET__V1__GREET_RESPONSE__INIT;
  int many = conch_rpc_method(rpc)->kind == CONCH_STREAM_SERVER;
  char text[256];
  conch_status st;
  (void)user_data;

  if (req->name == NULL || req->name[0] == '\0') {
    conch_status_init(&st);
    st.code = CONCH_CODE_INVALID_ARGUMENT;
    st.message = "name is required";
    conch_rpc_finish(rpc, &st); /* copied: a borrowed message is fine */
    return;
  }
  for (int i = 0; i < (many ? 3 : 1); i++) {
    snprintf(text, sizeof(text), "%s, %s!",
             i == 0 ? "Hello" : (i == 1 ? "Hi again" : "Bye"), req->name);
    resp.greeting = text;
    if (conch_rpc_send(rpc, &resp.base) != 0) {
      conch_status_init(&st);
      st.code = CONCH_CODE_INTERNAL;
      conch_rpc_finish(rpc, &st);
      return;
    }
  }
  conch_rpc_finish(rpc, NULL);
}

int main(int argc, char **argv) {
  const conch_server_handler h = {on_call, on_message, NULL, NULL, NULL};
  conch_server *s;
  int rv;

  if (argc != 2) {
    fprintf(stderr, "usage: %s HOST:PORT | unix:PATH\n", argv[0]);
    return 2;
  }
  if (conch_server_new(&s, NULL) != 0) {
    return 1;
  }
  rv = conch_server_add_method(s, &greet__v1__greeter__greet__method, &h, NULL);
  if (rv == 0) {
    rv = conch_server_add_method(s, &greet__v1__greeter__greet_many__method,
                                 &h, NULL);
  }
  if (rv == 0) {
    rv = conch_server_listen(s, argv[1]);
  }
  if (rv != 0) {
    fprintf(stderr, "greet_server: %s\n", conch_strerror(rv));
    conch_server_free(s);
    return 1;
  }
  if (conch_server_port(s) != 0) {
    printf("listening on port %d\n", conch_server_port(s));
    fflush(stdout);
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  while (!stopping || !conch_server_idle(s)) {
    if (stopping == 1) {
      conch_server_shutdown(s);
      stopping = 2;
    }
    rv = conch_server_run(s, 200); /* a signal also ends the poll early */
    if (rv != 0) {
      fprintf(stderr, "greet_server: %s\n", conch_strerror(rv));
      break;
    }
  }
  conch_server_free(s);
  return rv != 0;
}
