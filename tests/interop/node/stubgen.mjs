// The services of protoc-gen-conch's test protos (tests/stubgen/proto),
// served next to conchtest.v1.TestService by server.mjs so that the
// generated stubs can be called end to end (tests/stubgen/test_stubgen.c).
//
// Behaviour (the comments of the .proto files say the same):
// * Echo.Unary / Put: Pong{text, method, httpMethod}; Ping.failCode (1..16)
//   ends any Echo or Switch call with that code and Ping.text as message,
//   after the responses.
// * Echo.ServerStream, Switch.Fetch: Ping.count responses, index 0, 1, ...
// * Echo.ClientStream: text = the request texts joined by ",", seen = their
//   number.  Switch.Gather: seen = the sum of Struct.int, text = the texts
//   joined.
// * Echo.Bidi, Switch.Put: one Pong per request, at once: text, index.
// * Echo.Lookup: Deeper{level: request.deeper.level + 1}.
// * Every Switch method answers with its own .proto name in Pong.method.
// * Deep and Static: see stubgen/nested/v1/nested.proto.
// * greet.v1.Greeter, the service of examples/greet (run by the stubgen
//   tests): Greet answers "Hello, <name>!", GreetMany three greetings.
import { Code, ConnectError } from "@connectrpc/connect";

import { Echo, Switch } from "./gen/stubgen_pb.js";
import { Deep, Static } from "./gen/stubgen/nested/v1/nested_pb.js";
import { Greeter } from "./gen/greet/v1/greet_pb.js";

function fail(ping) {
  if (ping.failCode >= 1 && ping.failCode <= 16) {
    throw new ConnectError(ping.text, ping.failCode);
  }
  if (ping.failCode !== 0) {
    throw new ConnectError(`bad fail_code ${ping.failCode}`, Code.Internal);
  }
}

function pong(ping, ctx, extra) {
  return {
    text: ping.text,
    method: ctx.method.name,
    httpMethod: ctx.requestMethod,
    ...extra,
  };
}

// A unary Ping -> Pong method.
async function unary(ping, ctx) {
  fail(ping);
  return pong(ping, ctx, {});
}

async function* serverStream(ping, ctx) {
  for (let i = 0; i < ping.count; i++) {
    yield pong(ping, ctx, { index: i });
  }
  fail(ping);
}

async function* bidi(pings, ctx) {
  let index = 0;
  for await (const p of pings) {
    fail(p);
    yield pong(p, ctx, { index: index++, seen: index });
  }
}

const echo = {
  unary,
  put: unary,
  serverStream,
  async clientStream(pings, ctx) {
    const texts = [];
    for await (const p of pings) {
      fail(p);
      texts.push(p.text);
    }
    return { text: texts.join(","), seen: texts.length,
      method: ctx.method.name, httpMethod: ctx.requestMethod };
  },
  bidi,
  async lookup(inner) {
    return { level: (inner.deeper?.level ?? 0) + 1 };
  },
};

const sw = {
  get: unary,
  getSync: unary,
  fetch: serverStream,
  fetchRecv: unary,
  put: bidi,
  putSend: unary,
  methods: unary,
  get_Thing: unary,
  getThing: unary,
  async gather(structs, ctx) {
    const texts = [];
    let sum = 0;
    for await (const s of structs) {
      texts.push(s.text);
      sum += s.int;
    }
    return { text: texts.join(","), seen: sum, method: ctx.method.name,
      httpMethod: ctx.requestMethod };
  },
};

const deep = {
  async unary(inner) {
    return { middle: { inner }, count: 1 };
  },
  async *serverStream(outer) {
    const text = outer.middle?.inner?.text ?? "";
    for (let i = 0; i < outer.count; i++) {
      yield { text: `${text}${i}`, register: i };
    }
  },
  async clientStream(pings) {
    const texts = [];
    for await (const p of pings) texts.push(p.text);
    return { inner: { text: texts.join(","), register: texts.length } };
  },
  async *bidi(inners) {
    let index = 0;
    for await (const inner of inners) {
      yield { text: inner.text, index: index++ };
    }
  },
};

const statik = {
  async mirror(outer) {
    return outer;
  },
};

const greeter = {
  async greet(req) {
    return { greeting: `Hello, ${req.name}!` };
  },
  async *greetMany(req) {
    for (const word of ["Hello", "Hi", "Good day"]) {
      yield { greeting: `${word}, ${req.name}!` };
    }
  },
};

// Adds the services to a connect router.
export function stubgenRoutes(router) {
  router.service(Echo, echo);
  router.service(Switch, sw);
  router.service(Deep, deep);
  router.service(Static, statik);
  router.service(Greeter, greeter);
}
