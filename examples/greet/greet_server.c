/* greet_server: serves greet.v1.Greeter with libconch's server core
   (conch/server.h), for the greet client next to it.

     greet_server ADDR        e.g. greet_server 127.0.0.1:8080
                                   greet_server unix:/tmp/greet.sock

   Connect, gRPC and gRPC-Web, proto and JSON, all on one h2c listener.
   The handlers are typed, through the server stubs protoc-gen-conch
   generates (greet.conch.h: Greet__V1__Greeter_Handlers and
   greet__v1__greeter__register()).  SIGINT or SIGTERM shuts down
   gracefully: calls in flight finish. */
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

/* The greeting number |i| for |name|. */
static void greeting(char *text, size_t size, int i, const char *name) {
  snprintf(text, size, "%s, %s!",
           i == 0 ? "Hello" : (i == 1 ? "Hi again" : "Bye"), name);
}

/* A request without a name ends its call with invalid_argument. */
static int lacks_name(const Greet__V1__GreetRequest *req, conch_status *st) {
  if (req->name != NULL && req->name[0] != '\0') {
    return 0;
  }
  conch_status_init(st);
  st->code = CONCH_CODE_INVALID_ARGUMENT;
  st->message = "name is required"; /* copied by the finish */
  return 1;
}

static void greet(Greet__V1__Greeter__Greet_Rpc rpc,
                  const Greet__V1__GreetRequest *req, void *user_data) {
  Greet__V1__GreetResponse resp = GREET__V1__GREET_RESPONSE__INIT;
  char text[256];
  conch_status st;
  (void)user_data;

  if (lacks_name(req, &st)) {
    greet__v1__greeter__greet_rpc_finish(rpc, &st);
    return;
  }
  greeting(text, sizeof(text), 0, req->name);
  resp.greeting = text;
  if (greet__v1__greeter__greet_rpc_send(rpc, &resp) != 0) {
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    greet__v1__greeter__greet_rpc_finish(rpc, &st);
    return;
  }
  greet__v1__greeter__greet_rpc_finish(rpc, NULL);
}

/* Three greetings; each fits the send buffer, so none waits. */
static void greet_many(Greet__V1__Greeter__GreetMany_Rpc rpc,
                       const Greet__V1__GreetRequest *req, void *user_data) {
  Greet__V1__GreetResponse resp = GREET__V1__GREET_RESPONSE__INIT;
  char text[256];
  conch_status st;
  (void)user_data;

  if (lacks_name(req, &st)) {
    greet__v1__greeter__greet_many_rpc_finish(rpc, &st);
    return;
  }
  for (int i = 0; i < 3; i++) {
    greeting(text, sizeof(text), i, req->name);
    resp.greeting = text;
    if (greet__v1__greeter__greet_many_rpc_send(rpc, &resp) != 0) {
      conch_status_init(&st);
      st.code = CONCH_CODE_INTERNAL;
      greet__v1__greeter__greet_many_rpc_finish(rpc, &st);
      return;
    }
  }
  greet__v1__greeter__greet_many_rpc_finish(rpc, NULL);
}

int main(int argc, char **argv) {
  /* Static: the server retains the table until it is freed. */
  static const Greet__V1__Greeter_Handlers h = {
      .greet = {.on_request = greet},
      .greet_many = {.on_request = greet_many},
  };
  conch_server *s;
  int rv;

  if (argc != 2) {
    fprintf(stderr, "usage: %s HOST:PORT | unix:PATH\n", argv[0]);
    return 2;
  }
  if (conch_server_new(&s, NULL) != 0) {
    return 1;
  }
  rv = greet__v1__greeter__register(s, &h);
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
