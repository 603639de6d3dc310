/* The calls test_server_uv.c, test_server_event.c and test_server_drive.c
   make to a server that an event loop (an adapter's, or the I/O hooks')
   drives on a thread of its own: per protocol a
   unary call, a server stream and a deadline the server's timer ends (so
   the listener, the connections and the timer all run on the loop).
   Include after <cmocka.h> and "svc.h". */
#ifndef CONCH_TEST_LOOP_CALLS_H
#define CONCH_TEST_LOOP_CALLS_H

static void loop_calls(const char *url, const char *text) {
  size_t len = strlen(text);
  for (int proto = 0; proto < 3; proto++) {
    conch_client_opts *o;
    conch_client *c;
    Conchtest__V1__Request req = CONCHTEST__V1__REQUEST__INIT;
    conch_call_opts co = CONCH_CALL_OPTS_INIT;
    conch_call_opts slow = CONCH_CALL_OPTS_INIT;
    ProtobufCMessage *out = NULL;
    conch_call *call;
    conch_status st;
    int n = 0, rv;

    assert_int_equal(conch_client_opts_new(&o), 0);
    assert_int_equal(conch_client_opts_set_protocol(o, (conch_protocol)proto),
                     0);
    assert_int_equal(conch_client_new(&c, url, o), 0);
    conch_client_opts_free(o);
    req.payload.data = (uint8_t *)text;
    req.payload.len = len;
    conch_status_init(&st);
    /* A loop that does not drive the server fails here, not in a hang. */
    slow.timeout_ms = 20000;
    rv = conch_unary_sync(c, &m_unary, &slow, &req.base, &out, &st, NULL,
                          NULL);
    if (rv != 0) {
      fail_msg("unary over the loop: %s", conch_status_message(&st));
    }
    assert_int_equal(((Conchtest__V1__Response *)out)->payload.len, len);
    assert_memory_equal(((Conchtest__V1__Response *)out)->payload.data, text,
                        len);
    conch_message_free(c, out);
    req.response_count = 3;
    assert_int_equal(
        conch_call_start(c, &m_sstream, &slow, NULL, NULL, &call), 0);
    assert_int_equal(conch_call_send_sync(call, &req.base), 0);
    while ((rv = conch_call_recv_sync(call, &out)) == 0) {
      n++;
      conch_message_free(c, out);
    }
    assert_int_equal(rv, CONCH_ERR_EOF);
    assert_int_equal(n, 3);
    conch_call_free(call);
    /* The server's deadline runs on the loop's timer. */
    req.delay_ms = 1;
    co.timeout_ms = 100;
    co.deadline_grace_ms = 30000;
    assert_int_equal(
        conch_unary_sync(c, &m_unary, &co, &req.base, &out, &st, NULL, NULL),
        CONCH_ERR_RPC);
    assert_int_equal(st.code, CONCH_CODE_DEADLINE_EXCEEDED);
    assert_int_equal(st.origin, CONCH_ORIGIN_SERVER);
    conch_status_clear(&st);
    conch_client_free(c);
  }
}

#endif
