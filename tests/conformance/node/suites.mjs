// The suites runner.mjs runs in CI: our own test cases, modelled on the
// client-relevant suites of connectrpc/conformance
// (internal/app/connectconformance/testsuites/data/*.yaml) and written in
// the same TestSuite shape, so that the runner treats both alike.  Each
// suite is expanded over protocol × TLS × compression as its relevant*
// fields and config.yaml allow (lib.mjs).
//
//   Basic                 every shape, headers and trailers both ways
//   Errors                every code from unary and server-stream calls,
//                         errors with metadata and with details, unicode
//   Duplicate Metadata    repeated header and trailer values, every shape
//   Timeouts              deadline_exceeded in every shape
//   Deadline Propagation  the deadline the server sees
//   Client Cancellation   every cancel mode for every shape
//   Request Delay         request_delay_ms between streamed sends
//   Receive Limit         a response over message_receive_limit
//   TLS Client Certs      a client certificate the server requires
//   Unexpected Responses  raw HTTP responses: status mapping, Connect error
//                         bodies, gRPC and gRPC-Web trailers
//
// The expected result of a case without expectedResponse is derived from
// its requests, as the suite does (expectedResult() in lib.mjs).

const T = "type.googleapis.com/connectrpc.conformance.v1.";
const DATA = "dGVzdCByZXNwb25zZQ=="; // "test response"
const HDRS = [{ name: "X-Conformance-Test", value: ["Value1", "Value2"] }];
const RESP_HDRS = [{ name: "x-custom-header", value: ["foo"] }];
const RESP_TRLS = [{ name: "x-custom-trailer", value: ["bing"] }];
const DUP_HDRS = [{ name: "x-custom-header", value: ["foo", "bar", "baz"] }];
const DUP_TRLS = [{ name: "x-custom-trailer", value: ["bing", "quux"] }];
const UNICODE = "\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\n";

const UNARY = "STREAM_TYPE_UNARY";
const CLIENT = "STREAM_TYPE_CLIENT_STREAM";
const SERVER = "STREAM_TYPE_SERVER_STREAM";
const HALF = "STREAM_TYPE_HALF_DUPLEX_BIDI_STREAM";
const FULL = "STREAM_TYPE_FULL_DUPLEX_BIDI_STREAM";

const unaryReq = (def) => ({ "@type": `${T}UnaryRequest`,
  responseDefinition: def });
const serverReq = (def) => ({ "@type": `${T}ServerStreamRequest`,
  responseDefinition: def });
const clientReq = (def) => ({ "@type": `${T}ClientStreamRequest`,
  responseDefinition: def });
const clientData = () => ({ "@type": `${T}ClientStreamRequest`,
  requestData: DATA });
const bidiReq = (def, fullDuplex) => ({ "@type": `${T}BidiStreamRequest`,
  responseDefinition: def, ...(fullDuplex ? { fullDuplex } : {}) });
const bidiData = () => ({ "@type": `${T}BidiStreamRequest`,
  requestData: DATA });

// One case: |messages| for |streamType|, with |more| merged into the
// request (requestHeaders, timeoutMs, cancel, ...) and |expected| as its
// expectedResponse when given.
function tc(testName, streamType, messages, more = {}, expected, other) {
  const c = { request: { testName, streamType, requestMessages: messages,
    ...more } };
  if (expected !== undefined) c.expectedResponse = expected;
  if (other !== undefined) c.otherAllowedErrorCodes = other;
  return c;
}

// The same definition sent to every shape: unary-like shapes take a unary
// definition, streams a stream one.
// A full-duplex call whose definition has no data sends one request only:
// the server stops reading at the first request it has nothing for.
function everyShape(name, { unary, stream, headers }) {
  const h = headers ? { requestHeaders: headers } : {};
  const fullDuplex = (stream.responseData ?? []).length > 0
    ? [bidiReq(stream, true), bidiData()] : [bidiReq(stream, true)];
  return [
    tc(`unary/${name}`, UNARY, [unaryReq(unary)], h),
    tc(`client-stream/${name}`, CLIENT, [clientReq(unary), clientData()], h),
    tc(`server-stream/${name}`, SERVER, [serverReq(stream)], h),
    tc(`bidi-stream/half-duplex/${name}`, HALF,
      [bidiReq(stream), bidiData()], h),
    tc(`bidi-stream/full-duplex/${name}`, FULL, fullDuplex, h),
  ];
}

// ---------------------------------------------------------------------------

const basic = {
  name: "Basic",
  testCases: [
    ...everyShape("success", {
      headers: HDRS,
      unary: { responseHeaders: RESP_HDRS, responseData: DATA,
        responseTrailers: RESP_TRLS },
      stream: { responseHeaders: RESP_HDRS, responseData: [DATA, DATA],
        responseTrailers: RESP_TRLS },
    }),
    tc("server-stream/no-responses", SERVER, [serverReq({
      responseHeaders: RESP_HDRS, responseTrailers: RESP_TRLS })],
    { requestHeaders: HDRS }),
    tc("bidi-stream/half-duplex/no-responses", HALF, [bidiReq({
      responseHeaders: RESP_HDRS, responseTrailers: RESP_TRLS })],
    { requestHeaders: HDRS }),
    // A definition-less request: the server only echoes.
    tc("unary/no-definition", UNARY, [{ "@type": `${T}UnaryRequest`,
      requestData: DATA }], { requestHeaders: HDRS }),
    tc("client-stream/three-requests", CLIENT, [clientReq({
      responseData: DATA }), clientData(), clientData()]),
    tc("server-stream/empty-responses", SERVER, [serverReq({
      responseData: ["", ""] })]),
    // The third response follows the half-close and echoes nothing.
    tc("bidi-stream/full-duplex/more-responses-than-requests", FULL, [
      bidiReq({ responseData: [DATA, DATA, DATA] }, true), bidiData()], {}, {
      payloads: [
        { data: DATA, requestInfo: { requests: [
          bidiReq({ responseData: [DATA, DATA, DATA] }, true)] } },
        { data: DATA, requestInfo: { requests: [bidiData()] } },
        { data: DATA },
      ] }),
    tc("unimplemented", UNARY, [{ "@type": `${T}UnimplementedRequest` }], {
      service: "connectrpc.conformance.v1.ConformanceService",
      method: "Unimplemented" }, { error: { code: "CODE_UNIMPLEMENTED" } }),
  ],
};

// ---------------------------------------------------------------------------

const CODES = [
  ["canceled", "CODE_CANCELED"],
  ["unknown", "CODE_UNKNOWN"],
  ["invalid-argument", "CODE_INVALID_ARGUMENT"],
  ["deadline-exceeded", "CODE_DEADLINE_EXCEEDED"],
  ["not-found", "CODE_NOT_FOUND"],
  ["already-exists", "CODE_ALREADY_EXISTS"],
  ["permission-denied", "CODE_PERMISSION_DENIED"],
  ["resource-exhausted", "CODE_RESOURCE_EXHAUSTED"],
  ["failed-precondition", "CODE_FAILED_PRECONDITION"],
  ["aborted", "CODE_ABORTED"],
  ["out-of-range", "CODE_OUT_OF_RANGE"],
  ["unimplemented", "CODE_UNIMPLEMENTED"],
  ["internal", "CODE_INTERNAL"],
  ["unavailable", "CODE_UNAVAILABLE"],
  ["data-loss", "CODE_DATA_LOSS"],
  ["unauthenticated", "CODE_UNAUTHENTICATED"],
];

// An error detail of our own, besides the RequestInfo the server appends.
const DETAIL = { "@type": `${T}Header`, name: "detail", value: ["one", "two"] };

const errors = {
  name: "Errors",
  testCases: [
    ...CODES.map(([n, code]) => tc(`unary/${n}`, UNARY, [unaryReq({
      error: { code, message: n.replace(/-/g, " ") } })])),
    ...CODES.map(([n, code]) => tc(`server-stream/${n}`, SERVER, [serverReq({
      error: { code, message: n.replace(/-/g, " ") } })])),
    ...everyShape("error-with-metadata", {
      unary: { responseHeaders: RESP_HDRS, responseTrailers: RESP_TRLS,
        error: { code: "CODE_UNAUTHENTICATED", message: "no entry" } },
      stream: { responseHeaders: RESP_HDRS, responseTrailers: RESP_TRLS,
        error: { code: "CODE_UNAUTHENTICATED", message: "no entry" } },
    }),
    ...everyShape("error-with-details", {
      headers: HDRS,
      unary: { error: { code: "CODE_FAILED_PRECONDITION", message: "details",
        details: [DETAIL] } },
      stream: { error: { code: "CODE_FAILED_PRECONDITION", message: "details",
        details: [DETAIL] } },
    }),
    tc("unary/unicode-error-message", UNARY, [unaryReq({ error: {
      code: "CODE_INTERNAL",
      message: UNICODE,
    } })]),
    tc("server-stream/unicode-error-message", SERVER, [serverReq({ error: {
      code: "CODE_INTERNAL",
      message: UNICODE,
    } })]),
    tc("server-stream/error-with-responses", SERVER, [serverReq({
      responseHeaders: RESP_HDRS, responseData: [DATA, DATA],
      error: { code: "CODE_INTERNAL", message: "after two" },
      responseTrailers: RESP_TRLS })], { requestHeaders: HDRS }),
    tc("client-stream/error-one-request", CLIENT, [clientReq({ error: {
      code: "CODE_INTERNAL", message: "one request" } })]),
    tc("client-stream/error-multiple-requests", CLIENT, [clientReq({ error: {
      code: "CODE_INTERNAL", message: "two requests" } }), clientData()]),
    tc("bidi-stream/full-duplex/error-with-responses", FULL, [bidiReq({
      responseHeaders: RESP_HDRS, responseData: [DATA, DATA],
      error: { code: "CODE_INTERNAL", message: "full" },
      responseTrailers: RESP_TRLS }, true), bidiData()],
    { requestHeaders: HDRS }),
    tc("bidi-stream/full-duplex/error-no-responses", FULL, [bidiReq({
      responseHeaders: RESP_HDRS,
      error: { code: "CODE_INTERNAL", message: "full, none" },
      responseTrailers: RESP_TRLS }, true)], { requestHeaders: HDRS }),
    tc("bidi-stream/half-duplex/error-with-responses", HALF, [bidiReq({
      responseHeaders: RESP_HDRS, responseData: [DATA, DATA],
      error: { code: "CODE_INTERNAL", message: "half" },
      responseTrailers: RESP_TRLS }), bidiData()], { requestHeaders: HDRS }),
  ],
};

// ---------------------------------------------------------------------------

const duplicateMetadata = {
  name: "Duplicate Metadata",
  testCases: [
    ...everyShape("success", {
      headers: HDRS,
      unary: { responseHeaders: DUP_HDRS, responseData: DATA,
        responseTrailers: DUP_TRLS },
      stream: { responseHeaders: DUP_HDRS, responseData: [DATA, DATA],
        responseTrailers: DUP_TRLS },
    }),
    ...everyShape("error", {
      headers: HDRS,
      unary: { responseHeaders: DUP_HDRS, responseTrailers: DUP_TRLS,
        error: { code: "CODE_INTERNAL", message: "failed" } },
      stream: { responseHeaders: DUP_HDRS, responseTrailers: DUP_TRLS,
        responseData: [DATA], error: { code: "CODE_INTERNAL",
          message: "failed" } },
    }),
    tc("server-stream/error-with-no-responses", SERVER, [serverReq({
      responseHeaders: DUP_HDRS, responseTrailers: DUP_TRLS,
      error: { code: "CODE_INTERNAL", message: "none" } })],
    { requestHeaders: HDRS }),
  ],
};

// ---------------------------------------------------------------------------

const deadline = { code: "CODE_DEADLINE_EXCEEDED" };

const timeouts = {
  name: "Timeouts",
  testCases: [
    tc("unary", UNARY, [unaryReq({ responseData: DATA,
      responseDelayMs: 1500 })], { timeoutMs: 200 }, { error: deadline }),
    tc("client-stream", CLIENT, [clientReq({ responseData: DATA,
      responseDelayMs: 1500 }), clientData()], { timeoutMs: 200 },
    { error: deadline }),
    tc("server-stream", SERVER, [serverReq({ responseData: [DATA, DATA],
      responseDelayMs: 1500 })], { timeoutMs: 200 }, { error: deadline }),
    tc("bidi-stream/half-duplex", HALF, [bidiReq({ responseData: [DATA, DATA],
      responseDelayMs: 1500 }), bidiData()], { timeoutMs: 200 },
    { error: deadline }),
    tc("bidi-stream/full-duplex", FULL, [bidiReq({
      responseData: [DATA, DATA], responseDelayMs: 1500 }, true), bidiData()],
    { timeoutMs: 200 }, { error: deadline }),
    // The deadline passes between two streamed sends.
    tc("client-stream/while-sending", CLIENT, [clientReq({
      responseData: DATA }), clientData(), clientData()],
    { timeoutMs: 200, requestDelayMs: 150 }, { error: deadline }),
  ],
};

const deadlinePropagation = {
  name: "Deadline Propagation",
  testCases: [
    tc("unary/success", UNARY, [unaryReq({ responseData: DATA })],
      { timeoutMs: 2000 }),
    tc("client-stream/success", CLIENT, [clientReq({ responseData: DATA }),
      clientData()], { timeoutMs: 2000 }),
    tc("server-stream/success", SERVER, [serverReq({
      responseData: [DATA, DATA] })], { timeoutMs: 2000 }),
    tc("bidi-stream/full-duplex/success", FULL, [bidiReq({
      responseData: [DATA, DATA] }, true), bidiData()], { timeoutMs: 2000 }),
    tc("bidi-stream/half-duplex/success", HALF, [bidiReq({
      responseData: [DATA, DATA] }), bidiData()], { timeoutMs: 2000 }),
  ],
};

// ---------------------------------------------------------------------------

const canceled = { code: "CODE_CANCELED" };
const afterClose = { cancel: { afterCloseSendMs: 5 } };
const beforeClose = { cancel: { beforeCloseSend: {} } };
const afterOne = { cancel: { afterNumResponses: 1 } };
const full = (def) => bidiReq(def, true);
const payload = (msg) => ({ data: DATA, requestInfo: { requests: [msg] } });

function cancellation() {
  const ssAfter = serverReq({ responseDelayMs: 200,
    responseData: [DATA, DATA] });
  const fdAfter = full({ responseDelayMs: 200, responseData: [DATA, DATA] });
  const fdBefore = full({ responseData: [DATA, DATA] });
  const fdClose = full({ responseDelayMs: 200,
    responseData: [DATA, DATA, DATA] });
  const hdAfter = bidiReq({ responseDelayMs: 200,
    responseData: [DATA, DATA] });
  return {
    name: "Client Cancellation",
    mode: "TEST_MODE_CLIENT",
    testCases: [
      tc("unary/cancel-after-close-send", UNARY, [unaryReq({
        responseDelayMs: 200, responseHeaders: RESP_HDRS, responseData: DATA,
        responseTrailers: RESP_TRLS })], afterClose, { error: canceled }),
      tc("unary/cancel-at-once", UNARY, [unaryReq({ responseDelayMs: 200,
        responseData: DATA })], { cancel: {} }, { error: canceled }),
      tc("client-stream/cancel-before-close-send", CLIENT, [clientReq({
        responseData: DATA }), clientData()], beforeClose,
      { error: canceled }),
      tc("client-stream/cancel-after-close-send", CLIENT, [clientReq({
        responseDelayMs: 200, responseData: DATA }), clientData()],
      afterClose, { error: canceled }),
      tc("server-stream/cancel-after-close-send", SERVER, [serverReq({
        responseDelayMs: 200, responseData: [DATA, DATA] })], afterClose,
      { error: canceled }),
      tc("server-stream/cancel-after-responses", SERVER, [ssAfter], afterOne,
        { payloads: [payload(ssAfter)], error: canceled }),
      tc("bidi-stream/full-duplex/cancel-after-responses", FULL,
        [fdAfter, bidiData()], afterOne,
        { payloads: [payload(fdAfter)], error: canceled }),
      tc("bidi-stream/full-duplex/cancel-before-close-send", FULL,
        [fdBefore, bidiData()], beforeClose,
        { payloads: [payload(fdBefore), payload(bidiData())],
          error: canceled }),
      tc("bidi-stream/full-duplex/cancel-after-close-send", FULL,
        [fdClose, bidiData()], afterClose,
        { payloads: [payload(fdClose), payload(bidiData())],
          error: canceled }),
      tc("bidi-stream/half-duplex/cancel-after-responses", HALF,
        [hdAfter, bidiData()], afterOne, { payloads: [{ data: DATA,
          requestInfo: { requests: [hdAfter, bidiData()] } }],
        error: canceled }),
      tc("bidi-stream/half-duplex/cancel-before-close-send", HALF, [bidiReq({
        responseData: [DATA, DATA] }), bidiData()], beforeClose,
      { error: canceled }),
      tc("bidi-stream/half-duplex/cancel-after-close-send", HALF, [bidiReq({
        responseDelayMs: 200, responseData: [DATA, DATA] }), bidiData()],
      afterClose, { error: canceled }),
    ],
  };
}

// ---------------------------------------------------------------------------

const requestDelay = {
  name: "Request Delay",
  mode: "TEST_MODE_CLIENT",
  testCases: [
    tc("client-stream", CLIENT, [clientReq({ responseData: DATA }),
      clientData(), clientData()], { requestDelayMs: 50, timeoutMs: 2000 }),
    tc("bidi-stream/full-duplex", FULL, [full({
      responseData: [DATA, DATA, DATA] }), bidiData(), bidiData()],
    { requestDelayMs: 50, timeoutMs: 2000 }),
    tc("bidi-stream/half-duplex", HALF, [bidiReq({
      responseData: [DATA] }), bidiData(), bidiData()],
    { requestDelayMs: 50, timeoutMs: 2000 }),
  ],
};

// 1 MiB + 1 byte of data: the payload alone is over the 1 MiB limit the
// runner always sets.  (A first response also echoes its request, which
// holds the same data, so the first response is the one over the limit.)
const BIG = Buffer.alloc(1024 * 1024 + 1, 0x61).toString("base64");
const exhausted = { error: { code: "CODE_RESOURCE_EXHAUSTED" } };

const receiveLimit = {
  name: "Receive Limit",
  mode: "TEST_MODE_CLIENT",
  reliesOnMessageReceiveLimit: true,
  testCases: [
    tc("unary", UNARY, [unaryReq({ responseData: BIG })], {}, exhausted),
    tc("server-stream", SERVER, [serverReq({ responseData: [BIG] })], {},
      exhausted),
    tc("bidi-stream/full-duplex", FULL, [full({ responseData: [BIG] })], {},
      exhausted),
  ],
};

const tlsClientCerts = {
  name: "TLS Client Certs",
  reliesOnTls: true,
  reliesOnTlsClientCerts: true,
  testCases: [
    tc("client-stream", CLIENT, [clientReq({ responseHeaders: RESP_HDRS,
      responseData: DATA, responseTrailers: RESP_TRLS }), clientData()],
    { requestHeaders: HDRS }),
    tc("unary", UNARY, [unaryReq({ responseData: DATA })]),
  ],
};

// ---------------------------------------------------------------------------
// Raw responses: the server writes exactly what the definition says.

const raw = (r) => unaryReq({ rawResponse: r });
const rawStream = (r) => serverReq({ rawResponse: r });
const hdr = (name, ...value) => ({ name, value });

function statusCases() {
  const map = [[400, "CODE_INTERNAL"], [401, "CODE_UNAUTHENTICATED"],
    [403, "CODE_PERMISSION_DENIED"], [404, "CODE_UNIMPLEMENTED"],
    [409, "CODE_UNKNOWN"], [429, "CODE_UNAVAILABLE"], [431, "CODE_UNKNOWN"],
    [502, "CODE_UNAVAILABLE"], [503, "CODE_UNAVAILABLE"],
    [504, "CODE_UNAVAILABLE"], [418, "CODE_UNKNOWN"]];
  return map.map(([status, code]) => tc(`http-status/${status}`, UNARY,
    [raw({ statusCode: status })], {}, { error: { code } }));
}

const unexpected = {
  name: "Unexpected Responses",
  mode: "TEST_MODE_CLIENT",
  relevantCompressions: ["COMPRESSION_IDENTITY"],
  testCases: statusCases(),
};

const errorJson = (obj) => ({ unary: { text: JSON.stringify(obj) } });
const endStream = (obj) => ({ flags: 2,
  payload: { text: JSON.stringify(obj) } });

const connectUnexpected = {
  name: "Connect Unexpected Responses",
  mode: "TEST_MODE_CLIENT",
  // Raw responses in the proto codec, as upstream (relevantCodecs).
  relevantCodecs: ["CODEC_PROTO"],
  relevantProtocols: ["PROTOCOL_CONNECT"],
  relevantCompressions: ["COMPRESSION_IDENTITY"],
  testCases: [
    tc("unary/error-body-without-code", UNARY, [raw({ statusCode: 429,
      headers: [hdr("content-type", "application/json")],
      ...errorJson({ message: "no code" }) })], {},
    { error: { code: "CODE_UNAVAILABLE", message: "no code" } }),
    tc("unary/code-beats-status", UNARY, [raw({ statusCode: 422,
      headers: [hdr("content-type", "application/json")],
      ...errorJson({ code: "out_of_range", message: "range",
        details: [{ type: "connectrpc.conformance.v1.Header",
          value: "CgNrZXk", debug: "ignored" }] }) })], {},
    { error: { code: "CODE_OUT_OF_RANGE", message: "range",
      details: [{ "@type": `${T}Header`, name: "key" }] } }),
    tc("unary/empty-body-with-trailer", UNARY, [raw({
      headers: [hdr("content-type", "application/proto"),
        hdr("trailer-x-custom-trailer", "bing")],
      ...{ unary: { binary: "" } } })], {},
    { payloads: [{}], responseTrailers: RESP_TRLS }),
    tc("server-stream/null-error-is-success", SERVER, [rawStream({
      headers: [hdr("content-type", "application/connect+proto")],
      ...{ stream: { items: [endStream({ error: null,
        metadata: { "x-custom-trailer": ["bing"] } })] } } })], {},
    { responseTrailers: RESP_TRLS }),
    tc("server-stream/end-stream-without-code", SERVER, [rawStream({
      headers: [hdr("content-type", "application/connect+proto")],
      ...{ stream: { items: [endStream({ error: { message: "x" } })] } },
    })], {}, { error: { code: "CODE_UNKNOWN" } }),
    tc("server-stream/missing-end-stream", SERVER, [rawStream({
      headers: [hdr("content-type", "application/connect+proto")],
      ...{ stream: { items: [{ flags: 0, payload: { binary: "" } }] } },
    })], {}, { payloads: [{}], error: { code: "CODE_INTERNAL" } },
    ["CODE_UNKNOWN"]),
    tc("unary/unknown-content-encoding", UNARY, [raw({
      headers: [hdr("content-type", "application/proto"),
        hdr("content-encoding", "foo")],
      ...{ unary: { binary: "" } } })], {},
    { error: { code: "CODE_INTERNAL" } }),
  ],
};

const grpcTrailer = (status, msg) => [hdr("grpc-status", status),
  hdr("grpc-message", msg)];

const grpcUnexpected = {
  name: "gRPC Unexpected Responses",
  mode: "TEST_MODE_CLIENT",
  // Raw responses in the proto codec, as upstream (relevantCodecs).
  relevantCodecs: ["CODEC_PROTO"],
  relevantProtocols: ["PROTOCOL_GRPC"],
  relevantCompressions: ["COMPRESSION_IDENTITY"],
  testCases: [
    tc("trailers-only", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc"),
        ...grpcTrailer("9", "error"), hdr("x-custom-trailer", "bing")] })], {},
    { error: { code: "CODE_FAILED_PRECONDITION", message: "error" },
      responseTrailers: RESP_TRLS }),
    tc("trailers-at-end", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc"),
        hdr("x-custom-header", "foo")],
      trailers: [...grpcTrailer("9", "error"),
        hdr("x-custom-trailer", "bing", "quux")] })], {},
    { error: { code: "CODE_FAILED_PRECONDITION", message: "error" },
      responseHeaders: RESP_HDRS,
      responseTrailers: [hdr("x-custom-trailer", "bing", "quux")] }),
    tc("header-status-overridden", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc"),
        hdr("grpc-status", "8")],
      trailers: grpcTrailer("9", "trailer wins") })], {},
    { error: { code: "CODE_FAILED_PRECONDITION", message: "trailer wins" } }),
    tc("no-status-in-trailers", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc")],
      trailers: [hdr("x-custom-trailer", "bing")] })], {},
    { error: { code: "CODE_UNKNOWN" } }, ["CODE_INTERNAL"]),
    tc("two-messages-for-unary", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc")],
      ...{ stream: { items: [{ flags: 0, payload: { binary: "" } },
        { flags: 0, payload: { binary: "" } }] } },
      trailers: [hdr("grpc-status", "0")] })], {},
    { error: { code: "CODE_UNIMPLEMENTED" } }),
    tc("unknown-encoding", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc"),
        hdr("grpc-encoding", "foo")],
      ...{ stream: { items: [{ flags: 1, payload: { binary: "" } }] } },
      trailers: [hdr("grpc-status", "0")] })], {},
    { error: { code: "CODE_INTERNAL" } }),
  ],
};

const webTrailers = (text, flags = 128) => ({ flags, payload: { text } });

const grpcWebUnexpected = {
  name: "gRPC-Web Unexpected Responses",
  mode: "TEST_MODE_CLIENT",
  // Raw responses in the proto codec, as upstream (relevantCodecs).
  relevantCodecs: ["CODEC_PROTO"],
  relevantProtocols: ["PROTOCOL_GRPC_WEB"],
  testCases: [
    tc("trailers-in-body/mixed-case", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc-web"),
        hdr("x-custom-header", "foo")],
      ...{ stream: { items: [webTrailers(
        "Grpc-Status: 9\r\ngRPC-Message: error\r\nx-Custom-Trailer: bing\r\n",
      )] } } })], {},
    { responseHeaders: RESP_HDRS, responseTrailers: RESP_TRLS,
      error: { code: "CODE_FAILED_PRECONDITION", message: "error" } }),
    tc("trailers-only", SERVER, [rawStream({
      headers: [hdr("content-type", "application/grpc-web+proto"),
        ...grpcTrailer("9", "error"), hdr("x-custom-trailer", "bing")] })], {},
    { responseTrailers: RESP_TRLS,
      error: { code: "CODE_FAILED_PRECONDITION", message: "error" } }),
    tc("missing-status", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc-web")],
      ...{ stream: { items: [webTrailers("x-custom-trailer: bing\r\n")] } },
    })], {}, { error: { code: "CODE_UNKNOWN" } }, ["CODE_INTERNAL"]),
  ],
};

// The trailers frame itself compressed (flag 0x81), in each compression's
// own runs (upstream has gzip only).
const COMPRESSED = [["COMPRESSION_GZIP", "gzip"], ["COMPRESSION_BR", "br"],
  ["COMPRESSION_ZSTD", "zstd"], ["COMPRESSION_DEFLATE", "deflate"],
  ["COMPRESSION_SNAPPY", "snappy"]];

const grpcWebCompressed = COMPRESSED.map(([comp, name]) => ({
  name: `gRPC-Web Compressed Trailers, ${name}`,
  mode: "TEST_MODE_CLIENT",
  // Raw responses in the proto codec, as upstream (relevantCodecs).
  relevantCodecs: ["CODEC_PROTO"],
  relevantProtocols: ["PROTOCOL_GRPC_WEB"],
  relevantCompressions: [comp],
  testCases: [
    tc("trailers-compressed", UNARY, [raw({
      headers: [hdr("content-type", "application/grpc-web"),
        hdr("grpc-encoding", name)],
      ...{ stream: { items: [{ flags: 129, payload: {
        text: "grpc-status: 9\r\ngrpc-message: error\r\n",
        compression: comp } }] } } })], {},
    { error: { code: "CODE_FAILED_PRECONDITION", message: "error" } }),
  ],
}));

// connect_with_get.yaml: IdempotentUnary as an HTTP GET (server.mjs checks
// the method against x-expect-http-method and reports the query).
const connectWithGet = {
  name: "Connect with GET",
  relevantProtocols: ["PROTOCOL_CONNECT"],
  relevantCompressions: ["COMPRESSION_IDENTITY"],
  relevantCodecs: ["CODEC_JSON", "CODEC_PROTO"],
  reliesOnConnectGet: true,
  testCases: [
    tc("success", UNARY, [{ "@type": `${T}IdempotentUnaryRequest`,
      responseDefinition: { responseHeaders: RESP_HDRS, responseData: DATA,
        responseTrailers: RESP_TRLS } }], {
      service: "connectrpc.conformance.v1.ConformanceService",
      method: "IdempotentUnary", useGetHttpMethod: true,
      requestHeaders: HDRS }),
  ],
};

// Ours: the same over each compression, which puts compression=<name> in
// the query.
const connectWithGetCompressed = {
  ...connectWithGet,
  name: "Connect with GET, compressed",
  relevantCompressions: COMPRESSED.map(([comp]) => comp),
};

export const suites = [
  basic,
  connectWithGet,
  connectWithGetCompressed,
  errors,
  duplicateMetadata,
  timeouts,
  deadlinePropagation,
  cancellation(),
  requestDelay,
  receiveLimit,
  tlsClientCerts,
  unexpected,
  connectUnexpected,
  grpcUnexpected,
  grpcWebUnexpected,
  ...grpcWebCompressed,
];
