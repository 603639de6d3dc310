// connect-node's server under tools/bench/compare_server.sh, answering as
// conch-bench-server does.  A benchmark peer, not a test.
//
//   node tools/bench/node_bench_server.mjs LIST_FILE
//
// LIST_FILE holds the canned ListResponse (conch-bench-server
// --write-list).  Serves Connect, gRPC and gRPC-Web on 127.0.0.1 (h2c,
// prior knowledge; a free port, printed as "LISTENING <port>"):
//   - process.Process/List: the canned response, decoded once, serialized
//     by connect-node for every call;
//   - process.Process/Start: one StartEvent, then the stream stays open and
//     idle until the client cancels it.
// The packages are the test peers' (tests/node_modules): they are imported
// by path, since Node looks for packages beside this file only.
import * as fs from "node:fs";
import * as http2 from "node:http2";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const top = new URL("../../", import.meta.url);
const require = createRequire(new URL("tests/api/node/server.mjs", top));
// The ESM build of a package the test peers have (the CJS one would be a
// second copy of @bufbuild/protobuf beside the generated code's).
const esm = (name) =>
  import(pathToFileURL(require.resolve(name).replace("/dist/cjs/", "/dist/esm/")));

const { fromBinary } = await esm("@bufbuild/protobuf");
const { connectNodeAdapter } = await esm("@connectrpc/connect-node");
const { Process, ListResponseSchema } = await import(
  new URL("tests/api/node/gen/process/process_pb.js", top)
);

const list = fromBinary(ListResponseSchema, fs.readFileSync(process.argv[2]));

const handler = connectNodeAdapter({
  routes(router) {
    router.service(Process, {
      list() {
        return list;
      },
      async *start(_req, ctx) {
        yield { event: { event: { case: "start", value: { pid: 4242 } } } };
        await new Promise((resolve) => {
          if (ctx.signal.aborted) resolve();
          ctx.signal.addEventListener("abort", resolve, { once: true });
        });
      },
    });
  },
});

const server = http2.createServer(handler);
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => process.exit(0));
}
