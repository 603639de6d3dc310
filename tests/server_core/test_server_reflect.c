/* Server reflection and gRPC health of the server core
   (conch_server_add_reflection(), conch_server_add_health(),
   conch_server_health_set()), with conch's own client as the peer over
   Connect (proto and JSON), gRPC and gRPC-Web:

   - the descriptor pool: files by name, symbols of every kind, closures;
   - reflection v1 and v1alpha on one stream each: list_services,
     file_by_filename, file_containing_symbol (the bytes are the embedded
     descriptor, imports after the file), not_found errors for unknown
     files and symbols while the stream goes on;
   - health: Check (SERVING, not_found), List, Watch seeing a change set
     on the server and the shutdown (NOT_SERVING, then unavailable).

   The server runs on a thread of its own (svc.c); it is paused to change
   a status on its thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <conch/descriptor.h>

#include "grpc/health/v1/health.conch.h"
#include "grpc/reflection/v1/reflection.conch.h"
#include "process/process.conch.h"
#include "svc.h"

typedef Grpc__Reflection__V1__ServerReflectionRequest refl_req;
typedef Grpc__Reflection__V1__ServerReflectionResponse refl_resp;

static const conch_method m_refl_v1alpha = {
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    CONCH_STREAM_BIDI,
    &grpc__reflection__v1__server_reflection_request__descriptor,
    &grpc__reflection__v1__server_reflection_response__descriptor,
    CONCH_IDEMPOTENCY_UNKNOWN};

typedef struct variant {
  conch_protocol proto;
  conch_codec codec;
  const char *name;
} variant;

static const variant variants[] = {
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_PROTO, "connect/proto"},
    {CONCH_PROTOCOL_CONNECT, CONCH_CODEC_JSON, "connect/json"},
    {CONCH_PROTOCOL_GRPC, CONCH_CODEC_PROTO, "grpc/proto"},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_PROTO, "grpc-web/proto"},
    {CONCH_PROTOCOL_GRPC_WEB, CONCH_CODEC_JSON, "grpc-web/json"},
};
#define NVARIANTS (sizeof(variants) / sizeof(variants[0]))

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof(*fx));
  fx_start(fx, NULL, 0);
  fx_pause(fx);
  assert_int_equal(conch_server_add_reflection(fx->s), 0);
  assert_int_equal(conch_server_add_reflection(fx->s), 0); /* once */
  assert_int_equal(
      conch_server_add_file(fx->s, &conch_file_process_2fprocess_2eproto), 0);
  assert_int_equal(conch_server_health_set(fx->s, "process.Process",
                                           CONCH_HEALTH_SERVING),
                   0);
  assert_int_equal(conch_server_health_set(fx->s, "x", CONCH_HEALTH_SERVICE_UNKNOWN),
                   CONCH_ERR_INVALID);
  assert_int_equal(conch_server_health_set(fx->s, NULL, CONCH_HEALTH_SERVING),
                   CONCH_ERR_INVALID);
  fx_resume(fx);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  fx_stop(fx);
  free(fx);
  return 0;
}

static conch_client *client_for(const fixture *fx, const variant *v) {
  conch_client_opts *o;
  conch_client *c;
  assert_int_equal(conch_client_opts_new(&o), 0);
  assert_int_equal(conch_client_opts_set_protocol(o, v->proto), 0);
  assert_int_equal(conch_client_opts_set_codec(o, v->codec), 0);
  assert_int_equal(conch_client_new(&c, fx->url, o), 0);
  conch_client_opts_free(o);
  return c;
}

/* ---- The pool ------------------------------------------------------------ */

static void test_pool(void **state) {
  fixture *fx = *state;
  const conch_descpool *p;
  conch_descpool *own;
  conch_symbol_kind kind = 0;
  const conch_file_descriptor *hf =
      &conch_file_grpc_2fhealth_2fv1_2fhealth_2eproto;
  static const uint8_t junk[] = {0x0a, 0x7f, 'x'};
  static const conch_file_descriptor bad = {"bad.proto", junk, sizeof(junk),
                                            NULL};

  fx_pause(fx);
  p = conch_server_files(fx->s);
  assert_non_null(p);
  assert_ptr_equal(conch_descpool_file(p, "process/process.proto"),
                   &conch_file_process_2fprocess_2eproto);
  assert_ptr_equal(conch_descpool_file(p, "grpc/health/v1/health.proto"), hf);
  assert_null(conch_descpool_file(p, "nope.proto"));
  assert_ptr_equal(conch_descpool_symbol(p, "grpc.health.v1.Health", &kind),
                   hf);
  assert_int_equal(kind, CONCH_SYMBOL_SERVICE);
  assert_ptr_equal(
      conch_descpool_symbol(p, ".grpc.health.v1.Health.Watch", &kind), hf);
  assert_int_equal(kind, CONCH_SYMBOL_METHOD);
  assert_ptr_equal(conch_descpool_symbol(
                       p, "grpc.health.v1.HealthCheckResponse.ServingStatus",
                       &kind),
                   hf);
  assert_int_equal(kind, CONCH_SYMBOL_ENUM);
  /* Enum values live in the enum's parent scope. */
  assert_ptr_equal(conch_descpool_symbol(
                       p, "grpc.health.v1.HealthCheckResponse.NOT_SERVING",
                       &kind),
                   hf);
  assert_int_equal(kind, CONCH_SYMBOL_ENUM_VALUE);
  assert_ptr_equal(
      conch_descpool_symbol(p, "grpc.health.v1.HealthCheckRequest.service",
                            &kind),
      hf);
  assert_int_equal(kind, CONCH_SYMBOL_FIELD);
  /* A map's entry is a nested message. */
  assert_ptr_equal(
      conch_descpool_symbol(
          p, "grpc.health.v1.HealthListResponse.StatusesEntry", &kind),
      hf);
  assert_int_equal(kind, CONCH_SYMBOL_MESSAGE);
  assert_non_null(conch_descpool_symbol(p, "process.StartRequest", NULL));
  assert_null(conch_descpool_symbol(p, "grpc.health.v1", NULL));
  assert_null(conch_descpool_symbol(p, "grpc.health.v1.Nope", NULL));
  assert_int_equal(conch_descpool_extension_numbers(
                       p, "grpc.health.v1.HealthCheckRequest", NULL, 0),
                   0);
  assert_null(conch_descpool_extension(p, "grpc.health.v1.HealthCheckRequest",
                                       100));
  fx_resume(fx);

  /* A pool of one's own: bad bytes are refused, nothing added. */
  assert_int_equal(conch_descpool_new(&own, NULL), 0);
  assert_int_equal(conch_descpool_add(own, &bad), CONCH_ERR_INVALID);
  assert_int_equal(conch_descpool_n_files(own), 0);
  assert_int_equal(conch_descpool_add(own, hf), 0);
  assert_int_equal(conch_descpool_add(own, hf), 0); /* there already */
  assert_int_equal(conch_descpool_n_files(own), 1);
  assert_ptr_equal(conch_descpool_file_at(own, 0), hf);
  assert_null(conch_descpool_file_at(own, 1));
  assert_int_equal(conch_descpool_add(NULL, hf), CONCH_ERR_INVALID);
  assert_int_equal(conch_descpool_add(own, NULL), CONCH_ERR_INVALID);
  conch_descpool_free(own);
}

/* ---- Reflection ---------------------------------------------------------- */

/* Sends |req| on |call| and takes its response. */
static refl_resp *ask(conch_call *call, const refl_req *req) {
  ProtobufCMessage *m = NULL;
  assert_int_equal(conch_call_send_sync(call, &req->base), 0);
  assert_int_equal(conch_call_recv_sync(call, &m), 0);
  return (refl_resp *)m;
}

static int has_service(const refl_resp *r, const char *name) {
  size_t i;
  for (i = 0; i < r->list_services_response->n_service; i++) {
    if (strcmp(r->list_services_response->service[i]->name, name) == 0) {
      return 1;
    }
  }
  return 0;
}

static void expect_files(const refl_resp *r, const conch_file_descriptor *fd) {
  const Grpc__Reflection__V1__FileDescriptorResponse *f;
  assert_int_equal(
      r->message_response_case,
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE);
  f = r->file_descriptor_response;
  assert_true(f->n_file_descriptor_proto >= 1);
  /* The file asked for first, byte for byte the embedded one. */
  assert_int_equal(f->file_descriptor_proto[0].len, fd->len);
  assert_memory_equal(f->file_descriptor_proto[0].data, fd->data, fd->len);
}

static void expect_error(const refl_resp *r, int code) {
  assert_int_equal(
      r->message_response_case,
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE);
  assert_int_equal(r->error_response->error_code, code);
  assert_non_null(strstr(r->error_response->error_message, "not found"));
}

static void reflect_once(fixture *fx, const variant *v, const conch_method *m) {
  conch_client *c = client_for(fx, v);
  conch_call *call;
  refl_req req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
  refl_resp *r;
  ProtobufCMessage *end = NULL;

  assert_int_equal(conch_call_start(c, m, NULL, NULL, NULL, &call), 0);

  req.host = (char *)"example";
  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES;
  req.list_services = (char *)"*";
  r = ask(call, &req);
  assert_int_equal(
      r->message_response_case,
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE);
  assert_string_equal(r->valid_host, "example");
  assert_non_null(r->original_request);
  assert_int_equal(r->original_request->message_request_case,
                   req.message_request_case);
  assert_true(has_service(r, "conchtest.v1.TestService"));
  assert_true(has_service(r, "grpc.reflection.v1.ServerReflection"));
  assert_true(has_service(r, "grpc.health.v1.Health"));
  assert_false(has_service(r, "grpc.reflection.v1alpha.ServerReflection"));
  conch_message_free(c, &r->base);

  req.host = (char *)"";
  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
  req.file_by_filename = (char *)"process/process.proto";
  r = ask(call, &req);
  expect_files(r, &conch_file_process_2fprocess_2eproto);
  conch_message_free(c, &r->base);

  req.file_by_filename = (char *)"nope/nope.proto";
  r = ask(call, &req);
  expect_error(r, CONCH_CODE_NOT_FOUND);
  conch_message_free(c, &r->base);

  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
  req.file_containing_symbol = (char *)"grpc.health.v1.Health.Watch";
  r = ask(call, &req);
  expect_files(r, &conch_file_grpc_2fhealth_2fv1_2fhealth_2eproto);
  conch_message_free(c, &r->base);

  req.file_containing_symbol = (char *)"process.Process";
  r = ask(call, &req);
  expect_files(r, &conch_file_process_2fprocess_2eproto);
  conch_message_free(c, &r->base);

  req.file_containing_symbol = (char *)"no.Such";
  r = ask(call, &req);
  expect_error(r, CONCH_CODE_NOT_FOUND);
  conch_message_free(c, &r->base);

  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE;
  req.all_extension_numbers_of_type = (char *)"process.StartRequest";
  r = ask(call, &req);
  assert_int_equal(
      r->message_response_case,
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE);
  assert_string_equal(r->all_extension_numbers_response->base_type_name,
                      "process.StartRequest");
  assert_int_equal(r->all_extension_numbers_response->n_extension_number, 0);
  conch_message_free(c, &r->base);

  req.all_extension_numbers_of_type = (char *)"process.Nope";
  r = ask(call, &req);
  expect_error(r, CONCH_CODE_NOT_FOUND);
  conch_message_free(c, &r->base);

  /* A request that asks nothing. */
  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST__NOT_SET;
  r = ask(call, &req);
  assert_int_equal(
      r->message_response_case,
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE);
  assert_int_equal(r->error_response->error_code, CONCH_CODE_INVALID_ARGUMENT);
  conch_message_free(c, &r->base);

  assert_int_equal(conch_call_close_send(call), 0);
  assert_int_equal(conch_call_recv_sync(call, &end), CONCH_ERR_EOF);
  assert_int_equal(conch_call_status(call)->code, CONCH_CODE_OK);
  conch_call_free(call);
  conch_client_free(c);
}

static void test_reflection(void **state) {
  size_t i;
  for (i = 0; i < NVARIANTS; i++) {
    print_message("%s\n", variants[i].name);
    reflect_once(*state,
                 &variants[i],
                 &grpc__reflection__v1__server_reflection__server_reflection_info__method);
    reflect_once(*state, &variants[i], &m_refl_v1alpha);
  }
}

/* Many requests sent before any response is read: every response comes,
   in order (the server queues them and pauses the requests). */
static void test_reflection_pipelined(void **state) {
  conch_client *c = client_for(*state, &variants[2]);
  conch_call *call;
  refl_req req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
  ProtobufCMessage *m = NULL;
  int i, n = 200;

  assert_int_equal(
      conch_call_start(
          c, &grpc__reflection__v1__server_reflection__server_reflection_info__method,
          NULL, NULL, NULL, &call),
      0);
  req.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
  for (i = 0; i < n; i++) {
    req.file_containing_symbol =
        i % 2 ? (char *)"grpc.health.v1.Health" : (char *)"process.Process";
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  }
  assert_int_equal(conch_call_close_send(call), 0);
  for (i = 0; i < n; i++) {
    assert_int_equal(conch_call_recv_sync(call, &m), 0);
    expect_files((refl_resp *)m,
                 i % 2 ? &conch_file_grpc_2fhealth_2fv1_2fhealth_2eproto
                       : &conch_file_process_2fprocess_2eproto);
    conch_message_free(c, m);
  }
  assert_int_equal(conch_call_recv_sync(call, &m), CONCH_ERR_EOF);
  assert_int_equal(conch_call_status(call)->code, CONCH_CODE_OK);
  conch_call_free(call);
  conch_client_free(c);
}

/* ---- Health -------------------------------------------------------------- */

static void test_check_and_list(void **state) {
  size_t i;
  for (i = 0; i < NVARIANTS; i++) {
    conch_client *c = client_for(*state, &variants[i]);
    Grpc__Health__V1__HealthCheckRequest req =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthListRequest lreq =
        GRPC__HEALTH__V1__HEALTH_LIST_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *resp = NULL;
    Grpc__Health__V1__HealthListResponse *list = NULL;
    conch_status st;
    size_t k, found = 0;

    print_message("%s\n", variants[i].name);
    conch_status_init(&st);
    req.service = (char *)"process.Process";
    assert_int_equal(grpc__health__v1__health__check_sync(c, NULL, &req, &resp,
                                                          &st, NULL, NULL),
                     0);
    assert_int_equal(resp->status,
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    conch_message_free(c, &resp->base);
    req.service = (char *)"";
    assert_int_equal(grpc__health__v1__health__check_sync(c, NULL, &req, &resp,
                                                          &st, NULL, NULL),
                     0);
    assert_int_equal(resp->status,
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    conch_message_free(c, &resp->base);
    req.service = (char *)"no.Such";
    assert_int_equal(grpc__health__v1__health__check_sync(c, NULL, &req, &resp,
                                                          &st, NULL, NULL),
                     CONCH_ERR_RPC);
    assert_null(resp);
    assert_int_equal(st.code, CONCH_CODE_NOT_FOUND);
    conch_status_clear(&st);

    assert_int_equal(
        grpc__health__v1__health__list_sync(c, NULL, &lreq, &list, &st, NULL, NULL), 0);
    for (k = 0; k < list->n_statuses; k++) {
      if (strcmp(list->statuses[k]->key, "process.Process") == 0 ||
          strcmp(list->statuses[k]->key, "") == 0) {
        assert_int_equal(list->statuses[k]->value->status,
                         GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
        found++;
      }
    }
    assert_int_equal(found, 2);
    conch_message_free(c, &list->base);
    conch_status_clear(&st);
    conch_client_free(c);
  }
}

static conch_call *watch(conch_client *c, const char *service) {
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  conch_call *call;
  req.service = (char *)service;
  assert_int_equal(conch_call_start(c, &grpc__health__v1__health__watch__method,
                                    NULL, NULL, NULL, &call),
                   0);
  /* The one request of a server stream also ends the requests. */
  assert_int_equal(conch_call_send_sync(call, &req.base), 0);
  return call;
}

static int next_status(conch_client *c, conch_call *call) {
  ProtobufCMessage *m = NULL;
  int st;
  assert_int_equal(conch_call_recv_sync(call, &m), 0);
  st = (int)((Grpc__Health__V1__HealthCheckResponse *)m)->status;
  conch_message_free(c, m);
  return st;
}

static void set_status(fixture *fx, const char *svc, conch_health_status st) {
  fx_pause(fx);
  assert_int_equal(conch_server_health_set(fx->s, svc, st), 0);
  fx_resume(fx);
}

/* Runs last: it shuts the server down. */
static void test_watch(void **state) {
  fixture *fx = *state;
  conch_client *c[NVARIANTS];
  conch_call *w[NVARIANTS], *later[NVARIANTS];
  ProtobufCMessage *m = NULL;
  size_t i;

  for (i = 0; i < NVARIANTS; i++) {
    c[i] = client_for(fx, &variants[i]);
    w[i] = watch(c[i], "process.Process");
    later[i] = watch(c[i], "later.Svc");
    assert_int_equal(next_status(c[i], w[i]),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    assert_int_equal(
        next_status(c[i], later[i]),
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN);
  }
  set_status(fx, "process.Process", CONCH_HEALTH_NOT_SERVING);
  set_status(fx, "later.Svc", CONCH_HEALTH_SERVING);
  for (i = 0; i < NVARIANTS; i++) {
    assert_int_equal(next_status(c[i], w[i]),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    assert_int_equal(next_status(c[i], later[i]),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  }
  set_status(fx, "process.Process", CONCH_HEALTH_SERVING);
  for (i = 0; i < NVARIANTS; i++) {
    assert_int_equal(next_status(c[i], w[i]),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  }
  /* The shutdown: NOT_SERVING for each, then the streams end. */
  atomic_store(&fx->shutdown_req, 1);
  for (i = 0; i < NVARIANTS; i++) {
    print_message("%s\n", variants[i].name);
    assert_int_equal(next_status(c[i], w[i]),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    assert_int_equal(conch_call_recv_sync(w[i], &m), CONCH_ERR_RPC);
    assert_int_equal(conch_call_status(w[i])->code, CONCH_CODE_UNAVAILABLE);
    assert_int_equal(next_status(c[i], later[i]),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    assert_int_equal(conch_call_recv_sync(later[i], &m), CONCH_ERR_RPC);
    assert_int_equal(conch_call_status(later[i])->code, CONCH_CODE_UNAVAILABLE);
    conch_call_free(w[i]);
    conch_call_free(later[i]);
    conch_client_free(c[i]);
  }
  /* Nothing holds the drain up. */
  for (i = 0; i < 3000 && !atomic_load(&fx->idle); i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  assert_true(atomic_load(&fx->idle));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_reflection),
      cmocka_unit_test(test_reflection_pipelined),
      cmocka_unit_test(test_check_and_list),
      cmocka_unit_test(test_watch),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
