// The parts of a conformance runner that decide what to run and whether it
// passed, restated from connectrpc/conformance (internal/app/
// connectconformance: config.go, test_case_library.go, results.go) for our
// runner.mjs:
//
//   parseFeatures()   the features stanza of a config.yaml
//   configCases()     every combination of settings the features allow
//   expandSuites()    test cases × the combinations each suite applies to,
//                     named as the suite names them
//   expectedResult()  what the server's echo makes the right answer
//   checkResult()     a client's ClientResponseResult against that
//
// Suites are plain objects in the shape of the suite's TestSuite YAML
// (camelCase keys, enums by name or number); requests and expectations
// inside them are the proto JSON of ClientCompatRequest and
// ClientResponseResult.
import {
  clone,
  create,
  createRegistry,
  equals,
  fromJson,
} from "@bufbuild/protobuf";
import {
  anyPack,
  anyUnpack,
  file_google_protobuf_any,
  file_google_protobuf_descriptor,
  file_google_protobuf_empty,
  file_google_protobuf_struct,
} from "@bufbuild/protobuf/wkt";

import {
  ClientCompatRequestSchema,
  ClientResponseResultSchema,
  file_conformance_v1_client_compat,
} from "./gen/conformance/v1/client_compat_pb.js";
import {
  CodecSchema,
  CodeSchema,
  CompressionSchema,
  file_conformance_v1_config,
  HTTPVersionSchema,
  ProtocolSchema,
  StreamType,
  StreamTypeSchema,
} from "./gen/conformance/v1/config_pb.js";
import {
  ConformancePayload_RequestInfoSchema,
  ErrorSchema,
  file_conformance_v1_service,
} from "./gen/conformance/v1/service_pb.js";

export const registry = createRegistry(
  file_conformance_v1_config,
  file_conformance_v1_service,
  file_conformance_v1_client_compat,
  file_google_protobuf_any,
  file_google_protobuf_empty,
  file_google_protobuf_struct,
  // Suites may use it in error details.
  file_google_protobuf_descriptor,
);

const SERVICE = "connectrpc.conformance.v1.ConformanceService";
// The deadline a server reports may be this much below the one asked for.
const TIMEOUT_GRACE_MS = 500n;
// What the runner always asks for (test_case_library.go).
const CLIENT_RECEIVE_LIMIT = 1024 * 1024;

function enumNumber(schema, v) {
  if (typeof v === "number") return v;
  const e = schema.values.find((x) => x.name === v);
  if (e === undefined) throw new Error(`${schema.typeName}: no value ${v}`);
  return e.number;
}

function enumName(schema, n) {
  return schema.values.find((x) => x.number === n)?.name ?? String(n);
}

const numbers = (schema, list) =>
  (list ?? []).map((v) => enumNumber(schema, v));

// ---------------------------------------------------------------------------
// Features and config cases (config.go)

// Reads the "features:" stanza of a config.yaml: list-valued keys with
// "- VALUE" items, and "key: true|false" flags.  That is all a features
// file needs; include/exclude cases are not supported here.
export function parseFeatures(text) {
  const features = {};
  let inFeatures = false;
  let list = null;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*$/, "").trimEnd();
    if (line.trim() === "") continue;
    if (/^\S/.test(line)) {
      inFeatures = line === "features:";
      if (!inFeatures && !/^\w+:\s*$/.test(line)) {
        throw new Error(`config: cannot read "${raw}"`);
      }
      list = null;
      continue;
    }
    if (!inFeatures) throw new Error(`config: only features are supported`);
    let m = /^\s+- (\w+)$/.exec(line);
    if (m !== null && list !== null) {
      list.push(m[1]);
      continue;
    }
    m = /^\s+(\w+):\s*(true|false)?$/.exec(line);
    if (m === null) throw new Error(`config: cannot read "${raw}"`);
    if (m[2] === undefined) {
      list = features[m[1]] = [];
    } else {
      features[m[1]] = m[2] === "true";
      list = null;
    }
  }
  return features;
}

// The features with defaults filled in (resolveFeatures()).
function resolveFeatures(f) {
  const r = {
    versions: numbers(HTTPVersionSchema, f.versions),
    protocols: numbers(ProtocolSchema, f.protocols),
    codecs: numbers(CodecSchema, f.codecs),
    compressions: numbers(CompressionSchema, f.compressions),
    streamTypes: numbers(StreamTypeSchema, f.streamTypes),
    h2c: f.supportsH2c ?? true,
    tls: f.supportsTls ?? true,
    clientCerts: f.supportsTlsClientCerts ?? false,
    trailers: f.supportsTrailers ?? true,
    halfDuplexHttp1: f.supportsHalfDuplexBidiOverHttp1 ?? false,
    connectGet: f.supportsConnectGet ?? true,
    receiveLimit: f.supportsMessageReceiveLimit ?? true,
  };
  if (r.versions.length === 0) r.versions = [1, 2];
  const http2 = r.versions.includes(2) || r.versions.includes(3);
  if (r.protocols.length === 0) {
    r.protocols = r.trailers && http2 ? [1, 2, 3] : [1, 3];
  }
  if (r.codecs.length === 0) r.codecs = [1, 2];
  if (r.compressions.length === 0) r.compressions = [1, 2];
  if (r.streamTypes.length === 0) {
    r.streamTypes = http2 ? [1, 2, 3, 4, 5] : r.halfDuplexHttp1 ? [1, 2, 3, 4]
      : [1, 2, 3];
  }
  return r;
}

export function caseKey(c) {
  return [c.version, c.protocol, c.codec, c.compression, c.streamType,
    c.tls, c.clientCerts, c.connectGet, c.connectVersionMode ?? 0,
    c.receiveLimit].join("|");
}

// Every combination the features allow (computeCasesFromFeatures()).
export function configCases(featuresObj) {
  const f = resolveFeatures(featuresObj);
  const cases = new Set();
  const tlsCases = f.tls ? [false, true] : [false];
  const certCases = f.clientCerts ? [false, true] : [false];
  const limitCases = f.receiveLimit ? [false, true] : [false];
  for (const version of f.versions) {
    for (const tls of tlsCases) {
      if (!tls && (version === 3 || (version === 2 && !f.h2c))) continue;
      for (const clientCerts of certCases) {
        if (clientCerts && !tls) continue;
        for (const protocol of f.protocols) {
          if (protocol === 2 && version !== 2) continue;
          const getCases = protocol === 1 && f.connectGet ? [false, true]
            : [false];
          for (const streamType of f.streamTypes) {
            if (streamType === 4 && !f.halfDuplexHttp1 && version === 1) {
              continue;
            }
            if (streamType === 5 && version === 1) continue;
            for (const codec of f.codecs) {
              if (codec === 3) continue;
              for (const compression of f.compressions) {
                for (const connectGet of getCases) {
                  for (const receiveLimit of limitCases) {
                    cases.add(caseKey({ version, protocol, codec, compression,
                      streamType, tls, clientCerts, connectGet,
                      receiveLimit }));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------
// Test cases (test_case_library.go)

const ALL_VERSIONS = [1, 2, 3];
const ALL_PROTOCOLS = [1, 2, 3];
const ALL_CODECS = [1, 2];
const ALL_COMPRESSIONS = [1, 2, 3, 4, 5, 6];
const ALL_STREAM_TYPES = [1, 2, 3, 4, 5];

function methodFor(streamType) {
  switch (streamType) {
    case StreamType.UNARY:
      return "Unary";
    case StreamType.CLIENT_STREAM:
      return "ClientStream";
    case StreamType.SERVER_STREAM:
      return "ServerStream";
    default:
      return "BidiStream";
  }
}

// YAML writes an empty message as a null ("beforeCloseSend:"), which proto
// JSON would read as "absent".
function fixNulls(json) {
  const copy = structuredClone(json);
  if (copy.cancel && "beforeCloseSend" in copy.cancel &&
      copy.cancel.beforeCloseSend === null) {
    copy.cancel.beforeCloseSend = {};
  }
  return copy;
}

// YAML suites may spell keys as in the .proto (snake_case); proto JSON
// accepts both inside messages, but the suite's own keys are read here.
function camelKeys(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) {
    out[k.replace(/_([a-z])/g, (_, c) => c.toUpperCase())] = v;
  }
  return out;
}

// Expands |suites| over the combinations in |cases| (a Set of caseKey()).
// Returns [{name, suite, request, expected, otherCodes, tls, clientCerts}].
export function expandSuites(suites, cases) {
  const out = [];
  const seen = new Set();
  for (const raw of suites) {
    const suite = camelKeys(raw);
    suite.testCases = (suite.testCases ?? []).map(camelKeys);
    if (suite.mode === "TEST_MODE_SERVER") continue;
    const protocols = numbers(ProtocolSchema, suite.relevantProtocols);
    const versions = numbers(HTTPVersionSchema, suite.relevantHttpVersions);
    const codecs = numbers(CodecSchema, suite.relevantCodecs);
    const compressions = numbers(CompressionSchema,
      suite.relevantCompressions);
    const versionMode = suite.connectVersionMode === undefined ? 0
      : suite.connectVersionMode === "CONNECT_VERSION_MODE_REQUIRE" ? 1 : 2;
    const tlsCases = suite.reliesOnTls ? [true] : [true, false];
    for (const protocol of protocols.length ? protocols : ALL_PROTOCOLS) {
      for (const version of versions.length ? versions : ALL_VERSIONS) {
        for (const tls of tlsCases) {
          for (const codec of codecs.length ? codecs : ALL_CODECS) {
            for (const compression of compressions.length ? compressions
              : ALL_COMPRESSIONS) {
              for (const streamType of ALL_STREAM_TYPES) {
                const key = caseKey({ version, protocol, codec, compression,
                  streamType, tls, clientCerts: !!suite.reliesOnTlsClientCerts,
                  connectGet: !!suite.reliesOnConnectGet,
                  connectVersionMode: versionMode,
                  receiveLimit: !!suite.reliesOnMessageReceiveLimit });
                if (!cases.has(key)) continue;
                const prefix = [suite.name];
                if (versions.length !== 1) {
                  prefix.push(`HTTPVersion:${version}`);
                }
                if (protocols.length !== 1) {
                  prefix.push(`Protocol:${enumName(ProtocolSchema, protocol)}`);
                }
                if (codecs.length !== 1) {
                  prefix.push(`Codec:${enumName(CodecSchema, codec)}`);
                }
                if (compressions.length !== 1) {
                  prefix.push(
                    `Compression:${enumName(CompressionSchema, compression)}`);
                }
                if (!suite.reliesOnTls) prefix.push(`TLS:${tls}`);
                for (const tc of suite.testCases) {
                  const st = enumNumber(StreamTypeSchema,
                    tc.request.streamType);
                  if (st !== streamType) continue;
                  const req = fromJson(ClientCompatRequestSchema,
                    fixNulls(tc.request), { registry });
                  const name = [...prefix, req.testName].join("/");
                  if (seen.has(name)) throw new Error(`duplicate case ${name}`);
                  seen.add(name);
                  req.testName = name;
                  if (req.service === undefined) {
                    req.service = SERVICE;
                    req.method = methodFor(st);
                  }
                  req.httpVersion = version;
                  req.protocol = protocol;
                  req.codec = codec;
                  req.compression = compression;
                  req.messageReceiveLimit = CLIENT_RECEIVE_LIMIT;
                  out.push({
                    name,
                    suite: suite.name,
                    request: req,
                    // YAML's empty "expectedResponse:" is a null: an empty
                    // result.
                    expected: tc.expectedResponse === undefined ? undefined
                      : fromJson(ClientResponseResultSchema,
                        tc.expectedResponse ?? {}, { registry }),
                    otherCodes: numbers(CodeSchema, tc.otherAllowedErrorCodes),
                    tls,
                    clientCerts: !!suite.reliesOnTlsClientCerts,
                  });
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Expected results (populateExpectedResponse())

function definitionOf(req) {
  if (req.requestMessages.length === 0) return undefined;
  return anyUnpack(req.requestMessages[0], registry)?.responseDefinition;
}

function requestInfo(req, requests) {
  return create(ConformancePayload_RequestInfoSchema, {
    requestHeaders: req.requestHeaders,
    requests,
    timeoutMs: req.timeoutMs === undefined ? undefined
      : BigInt(req.timeoutMs),
  });
}

// The result the server's echo makes right for |req| (a case's own
// expectation wins when it has one).
export function expectedResult(req, given) {
  if (given !== undefined) return given;
  const def = definitionOf(req);
  const st = req.streamType;
  if (st === StreamType.UNARY || st === StreamType.CLIENT_STREAM) {
    const info = requestInfo(req, req.requestMessages);
    if (def === undefined) {
      return create(ClientResponseResultSchema,
        { payloads: [{ requestInfo: info }] });
    }
    const res = create(ClientResponseResultSchema, {
      responseHeaders: def.responseHeaders,
      responseTrailers: def.responseTrailers,
    });
    if (def.response.case === "error") {
      res.error = clone(ErrorSchema, def.response.value);
      res.error.details.push(anyPack(ConformancePayload_RequestInfoSchema,
        info));
    } else {
      res.payloads = [{
        data: def.response.case === "responseData" ? def.response.value
          : new Uint8Array(0),
        requestInfo: info,
      }];
    }
    return res;
  }
  if (def === undefined) return create(ClientResponseResultSchema, {});
  const res = create(ClientResponseResultSchema, {
    responseHeaders: def.responseHeaders,
    responseTrailers: def.responseTrailers,
  });
  if (def.error !== undefined) {
    res.error = clone(ErrorSchema, def.error);
    if (def.responseData.length === 0) {
      res.error.details.push(anyPack(ConformancePayload_RequestInfoSchema,
        requestInfo(req, req.requestMessages)));
    }
  }
  res.payloads = def.responseData.map((data, i) => {
    let info;
    if (st === StreamType.FULL_DUPLEX_BIDI_STREAM) {
      info = create(ConformancePayload_RequestInfoSchema,
        { requests: [req.requestMessages[i]] });
      if (i === 0) {
        info.requestHeaders = req.requestHeaders;
        info.timeoutMs = req.timeoutMs === undefined ? undefined
          : BigInt(req.timeoutMs);
      }
    } else if (i === 0) {
      info = requestInfo(req, req.requestMessages);
    }
    return { data, requestInfo: info };
  });
  return res;
}

// ---------------------------------------------------------------------------
// Checks (results.go)

// Header values as the runner compares them: split at commas, dropping one
// space that a library may have put next to each comma.
function canonicalValues(values) {
  const out = [];
  for (const v of values) {
    const parts = v.split(",");
    parts.forEach((p, i) => {
      let s = p;
      if (i > 0 && s.startsWith(" ")) s = s.slice(1);
      if (i < parts.length - 1 && s.endsWith(" ")) s = s.slice(0, -1);
      out.push(s);
    });
  }
  return out;
}

function checkHeaders(what, expected, actual) {
  const errs = [];
  const byName = new Map();
  for (const h of actual) byName.set(h.name.toLowerCase(), h.value);
  for (const h of expected) {
    const name = h.name.toLowerCase();
    const got = byName.get(name);
    if (got === undefined) {
      errs.push(`actual ${what} missing "${name}"`);
      continue;
    }
    const a = canonicalValues(h.value);
    const b = canonicalValues(got);
    if (a.length !== b.length || a.some((v, i) => v !== b[i])) {
      errs.push(`${what} has incorrect values for "${name}": expected ` +
        `${JSON.stringify(h.value)}, got ${JSON.stringify(got)}`);
    }
  }
  return errs;
}

function mergeHeaders(a, b) {
  const m = new Map();
  for (const h of a) m.set(h.name.toLowerCase(), [...h.value]);
  for (const h of b) {
    const k = h.name.toLowerCase();
    m.set(k, [...(m.get(k) ?? []), ...h.value]);
  }
  return [...m].map(([name, value]) => ({ name, value }));
}

function anyEquals(a, b) {
  if (a.typeUrl !== b.typeUrl) return false;
  const x = anyUnpack(a, registry);
  const y = anyUnpack(b, registry);
  if (x === undefined || y === undefined) {
    return Buffer.compare(Buffer.from(a.value), Buffer.from(b.value)) === 0;
  }
  return equals(registry.getMessage(x.$typeName), x, y);
}

function checkRequestInfo(expected, actual, first) {
  const errs = [];
  if (first) {
    errs.push(...checkHeaders("request headers",
      expected?.requestHeaders ?? [], actual?.requestHeaders ?? []));
    if (expected?.timeoutMs !== undefined) {
      if (actual?.timeoutMs === undefined) {
        errs.push(`server did not echo back a timeout but one was expected ` +
          `(${expected.timeoutMs} ms)`);
      } else {
        let min = expected.timeoutMs - TIMEOUT_GRACE_MS;
        if (min < 0n) min = 0n;
        if (actual.timeoutMs > expected.timeoutMs || actual.timeoutMs < min) {
          errs.push(`server echoed back a timeout (${actual.timeoutMs} ms) ` +
            `that did not match expected (${expected.timeoutMs} ms)`);
        }
      }
    } else if (actual?.timeoutMs !== undefined) {
      errs.push(`server echoed back a timeout (${actual.timeoutMs} ms) but ` +
        `none was expected`);
    }
  }
  const e = expected?.requests ?? [];
  const a = actual?.requests ?? [];
  if (e.length !== a.length) {
    errs.push(`expecting ${e.length} request messages to be described but ` +
      `instead got ${a.length}`);
  }
  for (let i = 0; i < Math.min(e.length, a.length); i++) {
    if (!anyEquals(e[i], a[i])) {
      errs.push(`request #${i + 1}: did not survive round-trip`);
    }
  }
  return errs;
}

function checkPayloads(expected, actual) {
  const errs = [];
  if (expected.length !== actual.length) {
    errs.push(`expecting ${expected.length} response messages but instead ` +
      `got ${actual.length}`);
  }
  for (let i = 0; i < Math.min(expected.length, actual.length); i++) {
    if (Buffer.compare(Buffer.from(expected[i].data),
      Buffer.from(actual[i].data)) !== 0) {
      errs.push(`response #${i + 1}: expecting data ` +
        `${Buffer.from(expected[i].data).toString("hex")}, got ` +
        `${Buffer.from(actual[i].data).toString("hex")}`);
    }
    errs.push(...checkRequestInfo(expected[i].requestInfo,
      actual[i].requestInfo, i === 0));
  }
  return errs;
}

function describeError(e) {
  return `{code: ${e.code} (${enumName(CodeSchema, e.code)}), message: ` +
    `${JSON.stringify(e.message ?? "")}}`;
}

function checkError(expected, actual, otherCodes) {
  if (expected === undefined && actual === undefined) return [];
  if (expected === undefined) {
    return [`received an unexpected error: ${describeError(actual)}`];
  }
  if (actual === undefined) return ["expecting an error but received none"];
  const errs = [];
  if (expected.code !== actual.code && !otherCodes.includes(actual.code)) {
    errs.push(`actual error ${describeError(actual)} does not match expected ` +
      `code ${[expected.code, ...otherCodes].join(" or ")}`);
  }
  if (expected.message !== undefined && expected.message !== actual.message) {
    errs.push(`actual error ${describeError(actual)} does not match expected ` +
      `message ${JSON.stringify(expected.message)}`);
  }
  if (expected.details.length !== actual.details.length) {
    errs.push(`actual error contain ${actual.details.length} details; ` +
      `expecting ${expected.details.length}`);
  }
  const infoName = ConformancePayload_RequestInfoSchema.typeName;
  for (let i = 0; i < Math.min(expected.details.length,
    actual.details.length); i++) {
    const e = expected.details[i];
    const a = actual.details[i];
    if (e.typeUrl === `type.googleapis.com/${infoName}` &&
      a.typeUrl.endsWith(`/${infoName}`)) {
      const ei = anyUnpack(e, registry);
      let ai;
      try {
        ai = anyUnpack(a, registry);
      } catch (err) {
        errs.push(`unable to unmarshal request info from actual error ` +
          `detail: ${err.message}`);
        continue;
      }
      errs.push(...checkRequestInfo(ei, ai, true));
    } else if (!anyEquals(e, a)) {
      errs.push(`actual error detail #${i + 1} does not match expected ` +
        `error detail (${a.typeUrl} vs ${e.typeUrl})`);
    }
  }
  return errs;
}

// The differences between |actual| and what |tc| expects; empty = pass.
export function checkResult(tc, actual) {
  const exp = tc.expected;
  const errs = [];
  errs.push(...checkError(exp.error, actual.error, tc.otherCodes));
  errs.push(...checkPayloads(exp.payloads, actual.payloads));
  const st = tc.request.streamType;
  if (exp.payloads.length === 0 && exp.error !== undefined &&
    (st === StreamType.UNARY || st === StreamType.CLIENT_STREAM)) {
    // A unary API may hand back all metadata with the error, as headers or
    // as trailers; that passes too.
    const strict = [
      ...checkHeaders("response headers", exp.responseHeaders,
        actual.responseHeaders),
      ...checkHeaders("response trailers", exp.responseTrailers,
        actual.responseTrailers),
    ];
    if (strict.length > 0) {
      const merged = mergeHeaders(exp.responseHeaders, exp.responseTrailers);
      if (checkHeaders("response metadata", merged, actual.responseHeaders)
        .length !== 0 &&
        checkHeaders("response metadata", merged, actual.responseTrailers)
          .length !== 0) {
        errs.push(...strict);
      }
    }
  } else {
    errs.push(...checkHeaders("response headers", exp.responseHeaders,
      actual.responseHeaders));
    errs.push(...checkHeaders("response trailers", exp.responseTrailers,
      actual.responseTrailers));
  }
  return errs;
}
