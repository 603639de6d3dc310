// Every compression conch speaks, for connect-node peers, each from code
// nobody here wrote: gzip and br are connect-node's own (Node's zlib),
// deflate is Node's zlib (zlib format, RFC 1950), zstd is @mongodb-js/zstd
// (libzstd), and snappy is the snappy package's frame-format Compressor and
// Decompressor (the Rust snap crate).  "x-xor" is a toy for conch's
// registered-compression API: a 0x5a marker byte, then every byte XOR 0x5a.
import * as zlib from "node:zlib";
import { promisify } from "node:util";

import { Code, ConnectError } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip } from "@connectrpc/connect-node";
import * as zstd from "@mongodb-js/zstd";
import { Compressor, Decompressor } from "snappy";

const deflate = promisify(zlib.deflate);
const inflate = promisify(zlib.inflate);

function u8(buf) {
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

// The decoded size is checked after the fact: a test peer may hold a bomb.
function capped(out, readMaxBytes) {
  if (out.byteLength > readMaxBytes) {
    throw new ConnectError(
      `message larger than ${readMaxBytes} bytes once decompressed`,
      Code.ResourceExhausted,
    );
  }
  return u8(out);
}

function invalid(name, e) {
  return new ConnectError(`invalid ${name} data: ${e.message ?? e}`,
    Code.InvalidArgument);
}

export const compressionDeflate = {
  name: "deflate",
  async compress(bytes) {
    return u8(await deflate(bytes));
  },
  async decompress(bytes, readMaxBytes) {
    if (bytes.length === 0) return new Uint8Array(0);
    try {
      return capped(await inflate(bytes, { maxOutputLength: readMaxBytes + 1 }),
        readMaxBytes);
    } catch (e) {
      if (e instanceof ConnectError) throw e;
      if (e.code === "ERR_BUFFER_TOO_LARGE") {
        throw new ConnectError("message too large", Code.ResourceExhausted);
      }
      throw invalid("deflate", e);
    }
  },
};

export const compressionZstd = {
  name: "zstd",
  async compress(bytes) {
    return u8(await zstd.compress(Buffer.from(bytes), 3));
  },
  async decompress(bytes, readMaxBytes) {
    if (bytes.length === 0) return new Uint8Array(0);
    let out;
    try {
      out = await zstd.decompress(Buffer.from(bytes));
    } catch (e) {
      throw invalid("zstd", e);
    }
    return capped(out, readMaxBytes);
  },
};

export const compressionSnappy = {
  name: "snappy",
  async compress(bytes) {
    const c = new Compressor();
    const head = c.update(bytes);
    const tail = await c.finish();
    return u8(Buffer.concat([head, tail]));
  },
  async decompress(bytes, readMaxBytes) {
    if (bytes.length === 0) return new Uint8Array(0);
    let out;
    try {
      const d = new Decompressor();
      const head = d.update(bytes);
      const tail = await d.finish();
      out = Buffer.concat([head, tail]);
    } catch (e) {
      throw invalid("snappy", e);
    }
    return capped(out, readMaxBytes);
  },
};

export const compressionXor = {
  name: "x-xor",
  async compress(bytes) {
    const out = new Uint8Array(bytes.length + 1);
    out[0] = 0x5a;
    for (let i = 0; i < bytes.length; i++) out[i + 1] = bytes[i] ^ 0x5a;
    return out;
  },
  async decompress(bytes, readMaxBytes) {
    if (bytes.length === 0) return new Uint8Array(0);
    if (bytes[0] !== 0x5a) throw invalid("x-xor", "no marker");
    const out = new Uint8Array(bytes.length - 1);
    for (let i = 1; i < bytes.length; i++) out[i - 1] = bytes[i] ^ 0x5a;
    return capped(out, readMaxBytes);
  },
};

// Server side: every one, gzip first (what a client without preferences
// gets, as before).
export const allCompressions = [
  compressionGzip,
  compressionBrotli,
  compressionZstd,
  compressionDeflate,
  compressionSnappy,
  compressionXor,
];
