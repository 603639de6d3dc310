/* greet_server: serves greet.v1.Greeter with libconch's server core
   (conch/server.h), for the greet client next to it.

     greet_server [--greetings N] [--by-hand] ADDR
                              e.g. greet_server 127.0.0.1:8080
                                   greet_server unix:/tmp/greet.sock

   Connect, gRPC and gRPC-Web, proto and JSON, all on one h2c listener,
   with the server core's default limits (timeouts, connection and memory
   bounds: see the top of conch/server.h).  The handlers are typed,
   through the server stubs protoc-gen-conch generates (greet.conch.h:
   Greet__V1__Greeter_Handlers and greet__v1__greeter__register()).
   SIGINT or SIGTERM shuts down gracefully: calls in flight finish.

   GreetMany streams N greetings (default 3), in one of the two ways a
   server stream can be sent whatever N is and however slowly the client
   reads:

   - from a source (the default): greet__v1__greeter__greet_many_rpc_stream()
     hands the server a function that returns the next greeting, and the
     server asks it for one whenever the client has taken enough of the
     previous ones.  Nothing is ever refused, and the source ends the
     stream itself.
   - by hand (--by-hand): _rpc_send() until the send buffer is full; it
     then refuses with CONCH_ERR_AGAIN (the greeting was not queued), and
     on_send_ready says when to send that same greeting again.  A handler
     that stopped at CONCH_ERR_AGAIN and finished would have cut the stream
     short: the server then ends the call with internal rather than tell
     the client OK. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/conch.h>
#include <conch/server.h>

#include "greet/v1/greet.conch.h"

static volatile sig_atomic_t stopping;
static unsigned long greetings = 3; /* --greetings */

static void on_signal(int sig) {
  (void)sig;
  stopping = 1;
}

/* The greeting number |i| of |n| for |name|: Hello first, Bye last. */
static void greeting(char *text, size_t size, unsigned long i, unsigned long n,
                     const char *name) {
  if (i == 0) {
    snprintf(text, size, "Hello, %s!", name);
  } else if (i + 1 == n) {
    snprintf(text, size, "Bye, %s!", name);
  } else if (n <= 3) {
    snprintf(text, size, "Hi again, %s!", name);
  } else {
    snprintf(text, size, "Hi again (%lu), %s!", i, name);
  }
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
  greeting(text, sizeof(text), 0, 1, req->name);
  resp.greeting = text;
  if (greet__v1__greeter__greet_rpc_send(rpc, &resp) != 0) {
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    greet__v1__greeter__greet_rpc_finish(rpc, &st);
    return;
  }
  greet__v1__greeter__greet_rpc_finish(rpc, NULL);
}

/* A GreetMany stream: the name, the next greeting, and the response
   being sent (the text lives here until the next one). */
typedef struct many {
  char *name;
  unsigned long next;
  char text[300];
  Greet__V1__GreetResponse resp;
} many;

static many *many_new(Greet__V1__Greeter__GreetMany_Rpc rpc,
                      const Greet__V1__GreetRequest *req) {
  many *m = calloc(1, sizeof(*m));
  size_t n = strlen(req->name);

  if (m == NULL || (m->name = malloc(n + 1)) == NULL) {
    free(m);
    return NULL;
  }
  memcpy(m->name, req->name, n + 1);
  conch_rpc_set_data(rpc.base, m);
  return m;
}

static void many_free(Greet__V1__Greeter__GreetMany_Rpc rpc) {
  many *m = conch_rpc_data(rpc.base);

  if (m != NULL) {
    free(m->name);
    free(m);
    conch_rpc_set_data(rpc.base, NULL);
  }
}

/* The greeting |m->next| as a response, in |m|. */
static const Greet__V1__GreetResponse *many_greeting(many *m) {
  Greet__V1__GreetResponse init = GREET__V1__GREET_RESPONSE__INIT;

  greeting(m->text, sizeof(m->text), m->next, greetings, m->name);
  m->resp = init;
  m->resp.greeting = m->text;
  return &m->resp;
}

/* The client went away, or the call broke a limit: let go of it. */
static void greet_many_cancel(Greet__V1__Greeter__GreetMany_Rpc rpc,
                              const conch_status *status, void *user_data) {
  (void)status;
  (void)user_data;
  many_free(rpc);
}

/* From a source: the server calls this whenever the stream has room. */
static const Greet__V1__GreetResponse *
greet_many_next(Greet__V1__Greeter__GreetMany_Rpc rpc, void *user_data) {
  many *m = user_data;
  const Greet__V1__GreetResponse *resp;

  if (m->next == greetings) {
    many_free(rpc);
    greet__v1__greeter__greet_many_rpc_finish(rpc, NULL); /* the end */
    return NULL;
  }
  resp = many_greeting(m);
  m->next++;
  return resp; /* stays valid until the next call: it lives in |m| */
}

/* By hand: send until the send buffer refuses, and go on in
   on_send_ready with the greeting that was refused. */
static void greet_many_pump(Greet__V1__Greeter__GreetMany_Rpc rpc) {
  many *m = conch_rpc_data(rpc.base);
  conch_status st;

  while (m->next < greetings) {
    int rv = greet__v1__greeter__greet_many_rpc_send(rpc, many_greeting(m));
    if (rv == CONCH_ERR_AGAIN) {
      return; /* not queued: on_send_ready sends greeting m->next again */
    }
    if (rv != 0) {
      many_free(rpc);
      conch_status_init(&st);
      st.code = CONCH_CODE_INTERNAL;
      greet__v1__greeter__greet_many_rpc_finish(rpc, &st);
      return;
    }
    m->next++;
  }
  many_free(rpc);
  greet__v1__greeter__greet_many_rpc_finish(rpc, NULL); /* all were sent */
}

static void greet_many_ready(Greet__V1__Greeter__GreetMany_Rpc rpc,
                             void *user_data) {
  (void)user_data;
  greet_many_pump(rpc);
}

static void greet_many(Greet__V1__Greeter__GreetMany_Rpc rpc,
                       const Greet__V1__GreetRequest *req, void *user_data) {
  int by_hand = user_data != NULL;
  conch_status st;
  many *m;

  if (lacks_name(req, &st)) {
    greet__v1__greeter__greet_many_rpc_finish(rpc, &st);
    return;
  }
  m = many_new(rpc, req);
  if (m == NULL) {
    conch_status_init(&st);
    st.code = CONCH_CODE_RESOURCE_EXHAUSTED;
    greet__v1__greeter__greet_many_rpc_finish(rpc, &st);
    return;
  }
  if (by_hand) {
    greet_many_pump(rpc);
  } else if (greet__v1__greeter__greet_many_rpc_stream(rpc, greet_many_next,
                                                       m) != 0) {
    many_free(rpc);
    conch_status_init(&st);
    st.code = CONCH_CODE_INTERNAL;
    greet__v1__greeter__greet_many_rpc_finish(rpc, &st);
  }
}

int main(int argc, char **argv) {
  /* Static: the server retains the table until it is freed. */
  static Greet__V1__Greeter_Handlers h = {
      .greet = {.on_request = greet},
      .greet_many = {.on_request = greet_many,
                     .on_send_ready = greet_many_ready,
                     .on_cancel = greet_many_cancel},
  };
  static int by_hand;
  conch_server *s;
  int i = 1, rv;

  for (; i < argc - 1; i++) {
    char *end;
    if (strcmp(argv[i], "--by-hand") == 0) {
      h.user_data = &by_hand; /* GreetMany by hand */
    } else if (strcmp(argv[i], "--greetings") == 0 && i + 1 < argc - 1) {
      greetings = strtoul(argv[++i], &end, 10);
      if (*end != '\0' || greetings == 0) {
        fprintf(stderr, "greet_server: --greetings: not a count: %s\n",
                argv[i]);
        return 2;
      }
    } else {
      break;
    }
  }
  if (i != argc - 1) {
    fprintf(stderr,
            "usage: %s [--greetings N] [--by-hand] HOST:PORT | unix:PATH\n",
            argv[0]);
    return 2;
  }
  if (conch_server_new(&s, NULL) != 0) {
    return 1;
  }
  rv = greet__v1__greeter__register(s, &h);
  /* Server reflection (buf curl --reflect, grpcurl) from the descriptors
     the register call added, and gRPC health. */
  if (rv == 0) {
    rv = conch_server_add_reflection(s);
  }
  if (rv == 0) {
    rv = conch_server_health_set(s, "greet.v1.Greeter", CONCH_HEALTH_SERVING);
  }
  if (rv == 0) {
    rv = conch_server_listen(s, argv[i]);
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
