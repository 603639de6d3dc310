// Prints vectors.json: proto3 JSON as protobuf-es (@bufbuild/protobuf 2.x,
// a peer nobody here wrote) reads and writes it, for tests/unit/test_pbjson.c.
//
//   node vectors.mjs DESCRIPTOR_SET > vectors.json     (gen.sh runs this)
//
// Each case is a JSON text parsed with fromJsonString(..., {
// ignoreUnknownFields: true, registry }) (connect-go's codec discards
// unknown fields and unknown enum names too; the registry, of every type in
// the descriptor set, resolves Any).  Recorded: whether protobuf-es accepted it,
// the binary form of the result (hex) and its canonical JSON (toJsonString
// with default options, which connect-es uses).
//
// Where protobuf-es and protojson (protobuf-go, which connect-go and so envd
// use) disagree, the case carries what protojson does and why:
//   expect_ok     protojson's verdict when it differs from protobuf-es's
//   expect_canon  protojson's canonical JSON when it differs
//   map_order     protobuf-es keeps a map's insertion order (JavaScript puts
//                 integer-like keys first); protojson sorts keys, so the
//                 test compares such cases as JSON values, not as text
//   member_order  set on every case with an Any: protojson writes "@type"
//                 first, protobuf-es last; compared as JSON values too
//   lossy         our output reads back as another message (as protojson's
//                 does)
//   bin_differs   protobuf-es's binary form is not what protojson makes of
//                 the case (the test does not compare it)
// Our codec follows protojson.  The packages come from tests/server/node
// (the workspace of tests: npm ci there).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(
  path.join(here, "../../server/node/package.json"),
);
const pb = require("@bufbuild/protobuf");
const wkt = require("@bufbuild/protobuf/wkt");
const pbVersion = JSON.parse(readFileSync(path.join(
  path.dirname(require.resolve("@bufbuild/protobuf")), "../../package.json"),
  "utf8")).version;

const set = pb.fromBinary(
  wkt.FileDescriptorSetSchema,
  readFileSync(process.argv[2]),
);
const registry = pb.createFileRegistry(set);

const S = "pbjsontest.Scalars";
const R = "pbjsontest.Repeats";
const M = "pbjsontest.Maps";
const O = "pbjsontest.Oneofs";
const P2 = "pbjsontest2.P2";
const W = "pbjsontest.Wkt";
const BAD_PATH = { expect_ok: false,
  note: "protojson: each path must be a dotted identifier" };

// [type, json text, overrides?]
const cases = [
  // ---- process.proto, as the E2B SDKs and envd send it --------------------
  ["process.StartRequest",
    '{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],' +
    '"envs":{"A":"b","PATH":"/usr/bin"},"cwd":"/home/user"},"stdin":false}'],
  ["process.StartRequest",
    '{"process":{"cmd":"/bin/bash","args":["-i","-l"],"envs":{"TERM":' +
    '"xterm-256color","LANG":"C.UTF-8"}},"pty":{"size":{"cols":80,' +
    '"rows":24}},"tag":"t1","stdin":true}', { map_order: true }],
  ["process.StartRequest", '{"process":{"cmd":"x","cwd":""},"tag":""}'],
  ["process.StartRequest", '{"process":{"cmd":"x","envs":{}},"pty":{}}'],
  ["process.StartRequest", '{"process":{"cmd":"x","envs":{"A":1}}}'],
  ["process.StartRequest", '{"process":{"cmd":"x","args":"y"}}'],
  ["process.StartRequest", '{"stdin":"yes"}'],
  ["process.StartRequest", '{"process":{"cmd":"é ☺ 😀 \\u00e9 \\ud83d\\ude00"}}'],
  ["process.StartResponse", '{"event":{"start":{"pid":42}}}'],
  ["process.StartResponse", '{"event":{"data":{"stdout":"aGVsbG8K"}}}'],
  ["process.StartResponse", '{"event":{"data":{"stderr":""}}}'],
  ["process.StartResponse", '{"event":{"data":{"pty":"AA=="}}}'],
  ["process.StartResponse",
    '{"event":{"end":{"exitCode":-1,"exited":false,"status":' +
    '"signal: killed","error":"signal: killed"}}}'],
  ["process.StartResponse",
    '{"event":{"end":{"exited":true,"status":"exit status 0"}}}'],
  ["process.StartResponse", '{"event":{"keepalive":{}}}'],
  ["process.StartResponse", '{"event":{}}'],
  ["process.ConnectResponse", '{"event":{"end":{"exit_code":127,' +
    '"exited":true,"status":"exit status 127","error":""}}}'],
  ["process.ConnectRequest", '{"process":{"pid":123}}'],
  ["process.ConnectRequest", '{"process":{"tag":"abc"}}'],
  ["process.ConnectRequest", '{"process":{}}'],
  ["process.ConnectRequest", '{"process":{"pid":0}}'],
  ["process.ConnectRequest", '{"process":{"pid":-1}}'],
  ["process.ConnectRequest", '{"process":{"pid":1,"tag":"x"}}'],
  ["process.ConnectRequest", '{"process":{"pid":null,"tag":"x"}}'],
  ["process.ConnectRequest", '{"process":"x"}'],
  ["process.ListRequest", "{}"],
  ["process.ListRequest", '{"unknown":[1,{"a":null}],"x":"y"}'],
  ["process.ListResponse",
    '{"processes":[{"config":{"cmd":"sleep","args":["30"],"envs":' +
    '{"B":"2","A":"1"}},"pid":7,"tag":"x"},{"config":{"cmd":"true"},' +
    '"pid":8}]}', { map_order: true }],
  ["process.SendSignalRequest", '{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}'],
  ["process.SendSignalRequest", '{"signal":15}'],
  ["process.SendSignalRequest", '{"signal":"SIGNAL_UNSPECIFIED"}'],
  ["process.SendSignalRequest", '{"signal":7}'],
  ["process.SendSignalRequest", '{"signal":"SIGBOGUS"}'],
  ["process.SendSignalRequest", '{"signal":"15"}'],
  ["process.SendInputRequest", '{"process":{"pid":5},"input":{"stdin":"YWJj"}}'],
  ["process.SendInputRequest", '{"input":{"pty":"-_8"}}'],
  ["process.SendInputRequest", '{"input":{}}'],
  ["process.StreamInputRequest", '{"start":{"process":{"pid":5}}}'],
  ["process.StreamInputRequest", '{"data":{"input":{"stdin":"YQ"}}}'],
  ["process.StreamInputRequest", '{"keepalive":{}}'],
  ["process.StreamInputRequest", '{"keepalive":{},"start":{}}'],
  ["process.UpdateRequest",
    '{"process":{"pid":5},"pty":{"size":{"cols":100,"rows":40}}}'],
  ["process.CloseStdinRequest", '{"process":{"tag":"t"}}'],

  // ---- scalars --------------------------------------------------------------
  [S, '{"i32":-5,"i64":"-9007199254740993","u32":4294967295,' +
    '"u64":"18446744073709551615","s32":-2147483648,' +
    '"s64":"-9223372036854775808","f32":1,"f64":"9223372036854775808",' +
    '"sf32":-1,"sf64":"123","fl":0.5,"db":0.1,"b":true,' +
    '"s":"h\\u00e9llo \\"q\\" \\\\ \\n\\t\\u0001\\u001f\\u007f ☺ 😀 /",' +
    '"by":"AAEC/w==","color":"COLOR_RED","child":{"i32":1},' +
    '"snakeCaseName":"x","name2x":3,"Leading":"l"}'],
  [S, '{"snake_case_name":"y","name_2x":4,"_leading":"z"}'],
  [S, '{"i32":"12","u32":"7","fl":"1.5","db":"-2.5e-3","i64":12}'],
  [S, '{"i32":1e3}'],
  [S, '{"i32":-1E+2,"u32":"1e2"}'],
  [S, '{"i64":"1.5e1"}', { expect_ok: true, expect_canon: '{"i64":"15"}',
    note: "protojson takes exact exponent forms in 64-bit strings too" }],
  [S, '{"u32":"100e-2"}'],
  [S, '{"i32":1.0,"u64":"0.0"}', { expect_ok: true, expect_canon: '{"i32":1}',
    note: "protojson takes exact fraction forms in 64-bit strings too" }],
  [S, '{"i64":"-0","u64":"1234567890123456789e-9"}'],
  [S, '{"u64":"1234567890123456789000e-3"}', { expect_ok: true,
    expect_canon: '{"u64":"1234567890123456789"}',
    note: "exact: protojson shifts the digits" }],
  [S, '{"i64":9007199254740991}'],
  [S, '{"s64":"9223372036854775807","sf64":-9223372036854775808}'],
  [S, '{"f64":"18446744073709551615","u64":"1.8446744073709551615e19"}',
    { expect_ok: true, expect_canon:
      '{"u64":"18446744073709551615","f64":"18446744073709551615"}',
    note: "exact: protojson shifts the digits" }],
  [S, '{"fl":"NaN","db":"Infinity"}'],
  [S, '{"fl":"-Infinity","db":"NaN"}'],
  [S, '{"db":"-Infinity","fl":"Infinity"}'],
  [S, '{"db":1e21}'],
  [S, '{"db":1e20}'],
  [S, '{"db":1.5e-7}'],
  [S, '{"db":0.000001}'],
  [S, '{"db":0.0000012345}'],
  [S, '{"db":123456789.125}'],
  [S, '{"db":5e-324}'],
  [S, '{"db":1.7976931348623157e308}'],
  [S, '{"db":-12345678901234567890}'],
  [S, '{"db":"1e-400"}'],
  [S, '{"fl":0.1}', { expect_canon: '{"fl":0.1}' }],
  [S, '{"fl":3.4028234663852886e38}', { expect_canon: '{"fl":3.4028235e+38}' }],
  [S, '{"fl":1e-45}', { expect_canon: '{"fl":1e-45}' }],
  [S, '{"fl":-2.25,"db":-2.25}'],
  [S, '{"fl":16777216,"db":9007199254740992}'],
  [S, '{"fl":1e21}', { expect_canon: '{"fl":1e+21}' }],
  [S, '{"by":"-_8"}'],
  [S, '{"by":"+/8="}'],
  [S, '{"by":"YQ"}'],
  [S, '{"by":"YWI"}'],
  [S, '{"by":""}'],
  [S, '{"color":2}'],
  [S, '{"color":99}'],
  [S, '{"color":-7}'],
  [S, '{"color":"COLOR_NEGATIVE"}'],
  [S, '{"color":-1}'],
  [S, '{"color":"NOPE"}'],
  [S, '{"color":"COLOR_UNSPECIFIED"}'],
  [S, '{"i32":null,"s":null,"child":null,"color":null,"by":null,"fl":null}'],
  [S, '{"zzz":1,"i32":2,"nested":{"a":[1,2,{"b":null}]}}'],
  [S, '{"zzz":123456789012345678901234567890,"i32":2}'],
  [S, '{"child":{"child":{"child":{"i32":1,"s":"deep"}}}}'],
  [S, '{"s":"","b":false,"i32":0,"i64":"0","fl":0,"db":0.0,"by":"","color":0}'],
  [S, '{"child":{}}'],
  // Rejected.
  [S, '{"i32":1.5}'],
  [S, '{"i32":"abc"}'],
  [S, '{"i32":2147483648}'],
  [S, '{"i32":-2147483649}'],
  [S, '{"u32":-1}'],
  [S, '{"u32":4294967296}'],
  [S, '{"i64":"9223372036854775808"}'],
  [S, '{"u64":"-1"}'],
  [S, '{"u64":"18446744073709551616"}'],
  [S, '{"i64":"1e19"}'],
  [S, '{"i32":"1.5e0"}'],
  [S, '{"b":"true"}'],
  [S, '{"b":1}'],
  [S, '{"s":1}'],
  [S, '{"s":["a"]}'],
  [S, '{"by":"!!"}'],
  [S, '{"by":"Y"}'],
  [S, '{"by":"YQ="}', { expect_ok: false,
    note: "Go decodes len % 4 != 0 without padding, so '=' is invalid" }],
  [S, '{"by":1}'],
  [S, '{"child":[]}'],
  [S, '{"child":1}'],
  [S, '{"child":"x"}'],
  [S, '{"color":true}'],
  [S, '{"color":1.5}'],
  [S, '{"color":2147483648}'],
  [S, '{"fl":"1e39"}'],
  [S, '{"fl":1e39}'],
  [S, '{"db":"1e309"}'],
  [S, '{"fl":"nan"}'],
  [S, '{"fl":"inf"}'],
  [S, '{"db":true}'],
  [S, '{"db":"0x10"}', { expect_ok: false, note: "not JSON number syntax" }],
  [S, '{"i32":"0x10"}', { expect_ok: false, note: "not JSON number syntax" }],
  [S, '{"i32":" 1"}'],
  [S, '{"i32":"1 "}'],
  [S, '{"i32":""}'],
  [S, '{"i32":"+1"}', { expect_ok: false, note: "not JSON number syntax" }],
  [S, '{"i32":"01"}', { expect_ok: false,
    note: "JSON number syntax has no leading zeros; protojson refuses" }],
  [S, '{"i32":"1."}', { expect_ok: false, note: "not JSON number syntax" }],
  [S, '{"i32":".5"}'],
  [S, '{"i32":1,"i32":2}', { expect_ok: false,
    note: "protojson: duplicate field; JSON.parse keeps the last" }],
  [S, '{"snakeCaseName":"a","snake_case_name":"b"}', { expect_ok: false,
    note: "protojson: duplicate field (json and proto name)" }],
  [S, "[]"],
  [S, '"x"'],
  [S, "null"],
  [S, ""],
  [S, "{"],
  [S, '{"i32":1}x'],
  [S, "{'a':1}"],

  // ---- repeated ---------------------------------------------------------------
  [R, '{"i32":[1,-2,"3"],"i64":["1",2,"-3"],"u32":[0,4294967295],' +
    '"u64":["18446744073709551615",0],"s64":[-1],' +
    '"fl":[0.5,"NaN","-Infinity",0],"db":[1e-7,0],"b":[true,false],' +
    '"s":["a",""],"by":["","AQ=="],' +
    '"color":["COLOR_RED",7,"BOGUS","COLOR_GREEN",0],' +
    '"msg":[{},{"i32":1},{"s":"x"}]}'],
  [R, '{"color":["BOGUS"]}'],
  [R, '{"i32":[],"msg":[],"s":null}'],
  [R, '{"i32":[null]}'],
  [R, '{"i32":1}'],
  [R, '{"i32":{}}'],
  [R, '{"msg":[1]}'],
  [R, '{"msg":[null]}'],
  [R, '{"s":["a",1]}'],
  [R, '{"by":["@"]}'],

  // ---- maps -------------------------------------------------------------------
  [M, '{"ss":{"b":"2","a":"1","":"empty","é":"x","Z":"z"}}',
    { map_order: true }],
  [M, '{"is":{"-1":"neg","0":"zero","10":"ten","2":"two"}}',
    { map_order: true }],
  [M, '{"ll":{"9223372036854775807":"-9223372036854775808",' +
    '"-9223372036854775808":"1"}}', { map_order: true }],
  [M, '{"ub":{"4294967295":"AQI=","0":""}}', { map_order: true }],
  [M, '{"bc":{"true":"COLOR_RED","false":2}}', { map_order: true }],
  [M, '{"sm":{"k":{"i32":1},"e":{}}}', { map_order: true }],
  [M, '{"sd":{"-5":"NaN","3":1.5}}', { map_order: true }],
  [M, '{"fb":{"7":true,"0":false}}', { map_order: true }],
  [M, '{"uf":{"18446744073709551615":0.5}}'],
  [M, '{"nested":{"-1":{"ss":{"x":"y"}},"3":{}}}', { map_order: true }],
  [M, '{"ss":{"":""}}'],
  [M, '{"ss":{}}'],
  [M, '{"bc":{"true":"BOGUS","false":"COLOR_GREEN"}}'],
  [M, '{"is":{"+1":"x"}}', { expect_ok: true, expect_canon: '{"is":{"1":"x"}}',
    note: "protojson reads int keys with strconv.ParseInt, which takes a sign" }],
  [M, '{"is":{"007":"x"}}', { expect_ok: true, expect_canon: '{"is":{"7":"x"}}',
    note: "strconv.ParseInt takes leading zeros" }],
  [M, '{"is":{"x":"y"}}'],
  [M, '{"is":{"2147483648":"x"}}'],
  [M, '{"is":{"1.0":"x"}}', { expect_ok: false,
    note: "protojson reads int keys with strconv.ParseInt" }],
  [M, '{"is":{"":"x"}}'],
  [M, '{"ub":{"-1":""}}'],
  [M, '{"bc":{"yes":1}}'],
  [M, '{"bc":{"True":1}}'],
  [M, '{"ss":{"a":null}}'],
  [M, '{"ss":{"a":1}}'],
  [M, '{"ss":[]}'],
  [M, '{"sm":{"a":null}}'],
  [M, '{"sm":{"a":1}}'],

  // ---- oneofs and proto3 optional ---------------------------------------------
  [O, '{"num":0}'],
  [O, '{"str":""}'],
  [O, '{"msg":{}}'],
  [O, '{"raw":""}'],
  [O, '{"color":"COLOR_UNSPECIFIED"}'],
  [O, '{"dbl":0}'],
  [O, '{"dbl":"NaN"}'],
  [O, '{"optI32":0,"optS":"","optMsg":{},"optColor":0,"optDb":0,' +
    '"optB":false,"optBy":"","optI64":"0"}'],
  [O, '{"opt_i32":5,"opt_s":"s"}'],
  [O, '{"optColor":"BOGUS"}'],
  [O, '{"num":null,"str":"x"}'],
  [O, '{"num":1,"optI32":2}'],
  [O, '{"num":1,"str":"x"}'],
  [O, '{"msg":{},"raw":"AA=="}'],
  [O, '{"color":"BOGUS","num":1}', { expect_ok: false,
    note: "protojson marks the oneof set even when it drops an unknown " +
      "enum name" }],
  [O, '{"num":1,"num":2}', { expect_ok: false, note: "duplicate field" }],

  // ---- proto2 ------------------------------------------------------------------
  [P2, '{"r":1}'],
  [P2, '{"r":0,"a":0,"s":"dflt","d":1.5}'],
  [P2, '{"r":1,"mode":"MODE_B","d":2.5,"m":{"a":1},"child":{"r":2},' +
    '"by":"AA==","ri":[1,2]}'],
  [P2, '{"r":1,"m":{"z":0,"a":-1}}', { map_order: true }],
  [P2, "{}", { expect_ok: false, note: "required field r missing" }],
  [P2, '{"r":1,"child":{}}', { expect_ok: false,
    note: "required field r missing in child" }],

  // ---- well-known types ----------------------------------------------------
  // Timestamp
  [W, '{"ts":"1970-01-01T00:00:00Z"}'],
  [W, '{"ts":"2024-02-29T12:34:56.5Z"}'],
  [W, '{"ts":"2024-02-29T12:34:56.123456Z"}'],
  [W, '{"ts":"2024-02-29T12:34:56.123456789Z"}'],
  [W, '{"ts":"2024-02-29T12:34:56.120000001Z"}'],
  [W, '{"ts":"2024-02-29T12:34:56.000Z"}'],
  [W, '{"ts":"0001-01-01T00:00:00Z"}'],
  [W, '{"ts":"9999-12-31T23:59:59.999999999Z"}'],
  [W, '{"ts":"1970-01-01T01:00:00+01:00"}'],
  [W, '{"ts":"1969-12-31T23:59:59.999-00:30"}'],
  [W, '{"ts":"2000-01-01T00:00:00.5+05:30"}'],
  [W, '{"ts":"0001-01-01T00:30:00+00:30"}'],
  [W, '{"ts":"9999-12-31T22:59:59-01:00"}'],
  [W, '{"ts":null}'],
  [W, '{"ts":"0000-12-31T23:59:59Z"}'],
  [W, '{"ts":"0001-01-01T00:00:00+00:01"}'],
  [W, '{"ts":"9999-12-31T23:59:59-01:00"}'],
  [W, '{"ts":"10000-01-01T00:00:00Z"}'],
  [W, '{"ts":"2023-02-29T00:00:00Z"}', { expect_ok: false,
    note: "Go's time.Parse checks the day of the month; Date rolls over" }],
  [W, '{"ts":"2024-04-31T00:00:00Z"}', { expect_ok: false,
    note: "Go's time.Parse checks the day of the month; Date rolls over" }],
  [W, '{"ts":"2024-13-01T00:00:00Z"}'],
  [W, '{"ts":"2024-01-01T24:00:00Z"}', { expect_ok: false,
    note: "Go's time.Parse takes hours 0-23 only" }],
  [W, '{"ts":"2024-01-01T00:60:00Z"}'],
  [W, '{"ts":"2024-01-01T00:00:60Z"}'],
  [W, '{"ts":"2024-01-01t00:00:00Z"}'],
  [W, '{"ts":"2024-01-01T00:00:00z"}'],
  [W, '{"ts":"2024-01-01T00:00:00"}'],
  [W, '{"ts":"2024-01-01 00:00:00Z"}'],
  [W, '{"ts":"2024-01-01T00:00:00.Z"}'],
  [W, '{"ts":"2024-01-01T00:00:00.1234567891Z"}'],
  [W, '{"ts":"2024-01-01T00:00:00+0100"}'],
  [W, '{"ts":"2024-01-01T00:00:00+24:00"}'],
  [W, '{"ts":"2024-1-01T00:00:00Z"}'],
  [W, '{"ts":""}'],
  [W, '{"ts":1}'],
  [W, '{"ts":{"seconds":1}}'],
  // Duration
  [W, '{"dur":"0s"}'],
  [W, '{"dur":"1s"}'],
  [W, '{"dur":"-1s"}'],
  [W, '{"dur":"1.5s"}'],
  [W, '{"dur":"-1.5s"}'],
  [W, '{"dur":"0.000000001s"}'],
  [W, '{"dur":"-0.5s"}'],
  [W, '{"dur":"1.000s"}'],
  [W, '{"dur":"1.010s"}'],
  [W, '{"dur":"1.000001s"}'],
  [W, '{"dur":"1.123456780s"}'],
  [W, '{"dur":"315576000000s"}'],
  [W, '{"dur":"-315576000000.999999999s"}'],
  [W, '{"dur":"-0s"}'],
  [W, '{"dur":"+1s"}', { expect_ok: true, expect_canon: '{"dur":"1s"}',
    note: "protojson's parseDuration takes a '+'" }],
  [W, '{"dur":".5s"}', { expect_ok: true, expect_canon: '{"dur":"0.500s"}',
    note: "protojson's parseDuration takes a missing integer part" }],
  [W, '{"dur":"1.s"}', { expect_ok: true, expect_canon: '{"dur":"1s"}',
    note: "protojson's parseDuration takes an empty fraction" }],
  [W, '{"dur":"01s"}', { expect_ok: false,
    note: "protojson's parseDuration refuses leading zeros" }],
  [W, '{"dur":"1.0000000001s"}'],
  [W, '{"dur":"315576000001s"}'],
  [W, '{"dur":"-315576000001s"}'],
  [W, '{"dur":"99999999999999999999s"}'],
  [W, '{"dur":"1"}'],
  [W, '{"dur":"1S"}'],
  [W, '{"dur":"1.5e3s"}'],
  [W, '{"dur":"-s"}'],
  [W, '{"dur":"s"}'],
  [W, '{"dur":" 1s"}'],
  [W, '{"dur":"1s "}', { expect_ok: false,
    note: "protojson: the last byte must be 's' (protobuf-es's pattern is " +
      "not anchored at the end)" }],
  [W, '{"dur":1}'],
  [W, '{"durs":["1s","0s","-0.001s"]}'],
  // Wrappers
  [W, '{"dbl":0,"flt":0,"i64":"0","u64":"0","i32":0,"u32":0,"bo":false,' +
    '"str":"","by":""}'],
  [W, '{"dbl":"NaN","flt":"-Infinity","i64":"-9223372036854775808",' +
    '"u64":"18446744073709551615","i32":-2147483648,"u32":4294967295,' +
    '"bo":true,"str":"x\\u00e9","by":"AQ=="}'],
  [W, '{"i64":5,"u64":"7","dbl":"1.5","flt":0.1,"i32":"3"}', {
    expect_canon: '{"dbl":1.5,"flt":0.1,"i64":"5","u64":"7","i32":3}',
    note: "protojson writes a FloatValue as a float; protobuf-es as a double" }],
  [W, '{"dbl":null,"i32":null,"str":null}'],
  [W, '{"i32s":[1,0,-1]}'],
  [W, '{"i32s":[1,null]}'],
  [W, '{"i32":"x"}'],
  [W, '{"i32":1.5}'],
  [W, '{"u32":-1}'],
  [W, '{"bo":"true"}'],
  [W, '{"i32":{"value":1}}'],
  [W, '{"str":1}'],
  [W, '{"by":"!"}'],
  // Struct, Value, ListValue, NullValue
  [W, '{"st":{"a":1,"b":"s","c":true,"d":null,"e":[1,"x",null,{"f":[]}],' +
    '"g":{"h":{}},"i":-2.5e-8,"j":false}}', { map_order: true }],
  [W, '{"st":{}}'],
  [W, '{"st":{"z":1,"a":2,"m":3}}', { map_order: true }],
  [W, '{"st":null}'],
  [W, '{"val":null}'],
  [W, '{"val":1.5}'],
  [W, '{"val":"NaN"}'],
  [W, '{"val":[]}'],
  [W, '{"val":{}}'],
  [W, '{"val":false}'],
  [W, '{"val":12345678901234567890}'],
  [W, '{"val":1e300}'],
  [W, '{"val":{"a":[{"b":null}]}}'],
  [W, '{"lv":[1,[2,[3]],{"a":null},null,"s",true]}'],
  [W, '{"lv":[]}'],
  [W, '{"lv":null}'],
  [W, '{"vals":[null,1,"a",[],{}]}'],
  [W, '{"vals":[]}'],
  [W, '{"vals":null}', { expect_ok: false,
    note: "protojson: null for a repeated google.protobuf.Value is an error" }],
  [W, '{"vmap":{"a":null,"b":{"c":1},"c":[]}}', { map_order: true }],
  [W, '{"vmap":null}'],
  [W, '{"nv":null}'],
  [W, '{"nv":"NULL_VALUE"}'],
  [W, '{"nv":0}'],
  [W, '{"nv":"BOGUS"}'],
  [W, '{"oNull":null}'],
  [W, '{"oVal":null}'],
  [W, '{"oTs":null}'],
  [W, '{"oVal":{"a":1}}'],
  [W, '{"oVal":null,"oNull":null}'],
  [W, '{"oTs":null,"oNull":null}', { expect_ok: true,
    expect_canon: '{"oNull":null}',
    note: "protojson skips a null member (not Value or NullValue) before " +
      "it checks the oneof" }],
  [W, '{"optNull":null}'],
  [W, '{"optNull":"NULL_VALUE"}'],
  [W, '{"nulls":[null,"NULL_VALUE",0]}'],
  [W, '{"st":[]}'],
  [W, '{"st":1}'],
  [W, '{"st":"x"}'],
  [W, '{"lv":{}}'],
  [W, '{"st":{"a":1,"a":2}}', { expect_ok: false,
    note: "protojson: duplicate key; JSON.parse keeps the last" }],
  [W, '{"nv":1}', { lossy: true, note: "protojson writes any NullValue " +
    "as null, which reads back as 0: not the same message" }],
  [W, '{"nv":{}}'],
  // FieldMask
  [W, '{"fm":"a,fooBar,x.yZ"}'],
  [W, '{"fm":""}'],
  [W, '{"fm":"a.b.c"}'],
  [W, '{"fm":"fooBar2"}'],
  [W, '{"fm":"FooBar"}'],
  [W, '{"fm":" a,b "}', { expect_canon: '{"fm":"a,b"}', bin_differs: true,
    note: "protojson trims white space around the string" }],
  [W, '{"fm":"a, b"}', BAD_PATH],
  [W, '{"fm":"foo_bar"}'],
  [W, '{"fm":"a,,b"}', BAD_PATH],
  [W, '{"fm":"a,"}', BAD_PATH],
  [W, '{"fm":"1a"}', BAD_PATH],
  [W, '{"fm":"a..b"}', BAD_PATH],
  [W, '{"fm":"a-b"}', BAD_PATH],
  [W, '{"fm":["a"]}'],
  // Empty
  [W, '{"empty":{}}'],
  [W, '{"empty":{"x":1}}'],
  [W, '{"empty":1}'],
  [W, '{"empty":null}'],
  // Any
  [W, '{"any":{}}'],
  [W, '{"any":null}'],
  [W, '{"any":{"@type":"type.googleapis.com/pbjsontest.Scalars","i32":5,' +
    '"s":"x","color":"COLOR_RED"}}'],
  [W, '{"any":{"s":"x","@type":"type.googleapis.com/pbjsontest.Scalars"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/pbjsontest.Scalars"}}'],
  [W, '{"any":{"@type":"example.com/a/b/pbjsontest.Scalars","i32":1}}', {
    expect_canon: '{"any":{"@type":"example.com/a/b/pbjsontest.Scalars","i32":1}}',
    bin_differs: true, note: "protobuf-es rewrites the type URL; protojson " +
      "keeps it" }],
  [W, '{"any":{"@type":"pbjsontest.Scalars","i32":1}}', {
    expect_canon: '{"any":{"@type":"pbjsontest.Scalars","i32":1}}',
    bin_differs: true, note: "protobuf-es rewrites the type URL; protojson " +
      "keeps it" }],
  [W, '{"any":{"@type":"type.googleapis.com/pbjsontest.Scalars","i32":1,' +
    '"bogus":2}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Timestamp",' +
    '"value":"2020-01-01T00:00:00.100Z"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Duration",' +
    '"value":"-1.5s"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Int32Value",' +
    '"value":0}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Int64Value",' +
    '"value":"-5"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.StringValue",' +
    '"value":"s"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.BytesValue",' +
    '"value":"AAE="}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Struct",' +
    '"value":{"a":[1,null]}}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Value",' +
    '"value":null}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Value",' +
    '"value":{"x":"y"}}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.ListValue",' +
    '"value":[]}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.FieldMask",' +
    '"value":"a.bC,d"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Empty",' +
    '"value":{}}}', {
    expect_canon: '{"any":{"@type":"type.googleapis.com/google.protobuf.Empty",' +
      '"value":{}}}',
    note: "protojson writes the value of an Empty" }],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Empty"}}',
    {
    expect_canon: '{"any":{"@type":"type.googleapis.com/google.protobuf.Empty",' +
      '"value":{}}}',
    note: "protojson writes the value of an Empty" }],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Any",' +
    '"value":{"@type":"type.googleapis.com/pbjsontest.Scalars","i32":1}}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Any",' +
    '"value":{"@type":"type.googleapis.com/google.protobuf.Any",' +
    '"value":{"@type":"type.googleapis.com/google.protobuf.BoolValue",' +
    '"value":true}}}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Any",' +
    '"value":{}}}'],
  [W, '{"any":{"@type":"type.googleapis.com/pbjsontest.Wkt",' +
    '"ts":"1970-01-01T00:00:01Z","val":null,"any":{"@type":' +
    '"type.googleapis.com/google.protobuf.Duration","value":"1s"}}}'],
  [W, '{"anys":[{"@type":"type.googleapis.com/google.protobuf.BoolValue",' +
    '"value":false},{},{"@type":"type.googleapis.com/pbjsontest.Maps",' +
    '"ss":{"k":"v"}}]}'],
  [W, '{"any":{"@type":"type.googleapis.com/nope.Nope"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/"}}'],
  [W, '{"any":{"@type":1}}'],
  [W, '{"any":{"@type":""}}'],
  [W, '{"any":{"@type":null}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Timestamp"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Timestamp",' +
    '"value":1}}'],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Int32Value",' +
    '"value":null}}', { expect_ok: false,
    note: "protojson: null is no int32" }],
  [W, '{"any":{"@type":"type.googleapis.com/google.protobuf.Empty",' +
    '"value":1}}', { expect_ok: false,
    note: "protojson: an Empty is an object" }],
  [W, '{"any":{"@type":"type.googleapis.com/pbjsontest.Scalars",' +
    '"i32":"x"}}'],
  [W, '{"any":{"@type":"type.googleapis.com/pbjsontest.Scalars",' +
    '"@type":"type.googleapis.com/pbjsontest.Scalars"}}', { expect_ok: false,
    note: "protojson: duplicate @type" }],
  [W, '{"any":{"i32":1}}', { expect_ok: true, expect_canon: '{"any":{}}',
    note: "protojson with DiscardUnknown reads an Any without @type as " +
      "empty" }],
  [W, '{"any":[]}'],
  [W, '{"tmap":{"b":"1970-01-01T00:00:00Z","a":"2000-01-01T00:00:00.001Z"}}',
    { map_order: true }],
  [W, '{"tmap":{"a":null}}'],
  [W, '{"child":{"child":{"ts":"1970-01-01T00:00:00Z","val":null}}}'],
  // As the top-level message.
  ["google.protobuf.Timestamp", '"1970-01-01T00:00:00.000000001Z"'],
  ["google.protobuf.Timestamp", '{}'],
  ["google.protobuf.Duration", '"1.5s"'],
  ["google.protobuf.Int64Value", '"12"'],
  ["google.protobuf.Int64Value", 'null', { expect_ok: false,
    note: "protojson: null is no int64" }],
  ["google.protobuf.BoolValue", 'false'],
  ["google.protobuf.Value", 'null'],
  ["google.protobuf.Value", '[1,"a",{"b":null}]'],
  ["google.protobuf.Struct", '{"a":{"b":[]}}'],
  ["google.protobuf.Struct", '[]'],
  ["google.protobuf.ListValue", '[null,[]]'],
  ["google.protobuf.FieldMask", '"a,bC"'],
  ["google.protobuf.Empty", '{}'],
  ["google.protobuf.Any",
    '{"@type":"type.googleapis.com/google.protobuf.Value","value":1}'],
  ["google.protobuf.Any", '{}'],
];

const hex = (b) => Buffer.from(b).toString("hex");
const vectors = [];
for (const [typeName, json, extra = {}] of cases) {
  const desc = registry.getMessage(typeName);
  if (!desc) throw new Error(`no message ${typeName}`);
  const v = { type: typeName, json };
  try {
    const msg = pb.fromJsonString(desc, json,
      { ignoreUnknownFields: true, registry });
    const bin = pb.toBinary(desc, msg);
    // The canonical form of what the binary holds, as a reader sees it.
    v.ok = true;
    v.bin = hex(bin);
    v.canon = pb.toJsonString(desc, pb.fromBinary(desc, bin), { registry });
  } catch (e) {
    v.ok = false;
    v.es_error = String(e.message ?? e);
  }
  // protojson writes "@type" first, protobuf-es last.
  if (json.includes('"@type"')) v.member_order = true;
  Object.assign(v, extra);
  vectors.push(v);
}

process.stdout.write(JSON.stringify({
  generator: `tests/unit/pbjson/vectors.mjs, @bufbuild/protobuf ${pbVersion}`,
  vectors,
}, null, 1) + "\n");
