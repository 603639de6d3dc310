// One transfer with the E2B SDK (npm e2b, debug mode: straight to envd at
// E2B_SANDBOX_URL) for tools/bench/files_cp.sh: `up LOCAL REMOTE` writes a
// file from a stream of it, `down REMOTE LOCAL` reads one as a stream into
// a file; neither holds the file in memory.  Prints the seconds it took.
import fs from "node:fs";
import { createRequire } from "node:module";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { pathToFileURL } from "node:url";

process.env.E2B_DEBUG = "true";
delete process.env.E2B_API_KEY;
// The SDK tests/ pins (tests/node_modules), from here.
const tests = new URL("../../tests/", import.meta.url).pathname;
const { Sandbox } = await import(
  pathToFileURL(createRequire(tests).resolve("e2b")).href);
const [dir, a, b] = process.argv.slice(2);
const sbx = await Sandbox.create();
const t0 = process.hrtime.bigint();
if (dir === "up") {
  await sbx.files.write(b, Readable.toWeb(fs.createReadStream(a)),
    { requestTimeoutMs: 0 });
} else {
  const st = await sbx.files.read(a, { format: "stream", requestTimeoutMs: 0 });
  await pipeline(Readable.fromWeb(st), fs.createWriteStream(b));
}
console.log(Number(process.hrtime.bigint() - t0) / 1e9);
