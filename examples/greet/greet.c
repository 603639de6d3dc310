/* greet: calls greet.v1.Greeter through the stubs that protoc-gen-conch
   made from proto/greet/v1/greet.proto.

     greet URL NAME        e.g. greet http://127.0.0.1:8080 world

   A unary call, blocking, then a server stream read message by message. */
#include <stdio.h>

#include <conch/conch.h>

#include "greet/v1/greet.conch.h"

/* Prints why |rv| ended a call, with the RPC's status when there is one. */
static void report(const char *what, int rv, const conch_status *st) {
  if (rv == CONCH_ERR_RPC && st != NULL) {
    fprintf(stderr, "%s: %s: %s\n", what, conch_code_name(st->code),
            conch_status_message(st));
  } else {
    fprintf(stderr, "%s: %s\n", what, conch_strerror(rv));
  }
}

static int greet(conch_client *client, const Greet__V1__GreetRequest *req) {
  Greet__V1__GreetResponse *resp;
  conch_status st;
  int rv;

  conch_status_init(&st);
  rv =
      greet__v1__greeter__greet_sync(client, NULL, req, &resp, &st, NULL, NULL);
  if (rv != 0) {
    report("Greet", rv, &st);
  } else {
    printf("%s\n", resp->greeting);
    conch_message_free(client, &resp->base); /* responses are ours */
  }
  conch_status_clear(&st);
  return rv;
}

static int greet_many(conch_client *client,
                      const Greet__V1__GreetRequest *req) {
  Greet__V1__Greeter__GreetMany_Call call;
  Greet__V1__GreetResponse *resp;
  int rv;

  /* No handler: pull mode, read with _recv_sync(). */
  rv = greet__v1__greeter__greet_many_start(client, NULL, req, NULL, &call);
  if (rv != 0) {
    report("GreetMany", rv, NULL);
    return rv;
  }
  for (;;) {
    rv = greet__v1__greeter__greet_many_recv_sync(call, &resp);
    if (rv != 0) {
      break;
    }
    printf("%s\n", resp->greeting);
    conch_message_free(client, &resp->base);
  }
  if (rv == CONCH_ERR_EOF) {
    rv = 0; /* the stream ended with an OK status */
  } else {
    report("GreetMany", rv, conch_call_status(call.base));
  }
  conch_call_free(call.base);
  return rv;
}

int main(int argc, char **argv) {
  Greet__V1__GreetRequest req = GREET__V1__GREET_REQUEST__INIT;
  conch_client *client;
  int rv;

  if (argc != 3) {
    fprintf(stderr, "usage: %s URL NAME\n", argv[0]);
    return 2;
  }
  rv = conch_client_new(&client, argv[1], NULL);
  if (rv != 0) {
    report(argv[1], rv, NULL);
    return 1;
  }
  req.name = argv[2];
  rv = greet(client, &req);
  if (rv == 0) {
    rv = greet_many(client, &req);
  }
  conch_client_free(client);
  return rv == 0 ? 0 : 1;
}
