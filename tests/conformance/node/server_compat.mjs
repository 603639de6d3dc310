// ServerCompatRequest/ServerCompatResponse, encoded by hand for
// server_runner.mjs and runner.mjs --server-bin (the scalar fields;
// the field numbers are those of proto/conformance/v1/server_compat.proto).

function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

export function compatRequest({ protocol, httpVersion, useTls,
  clientTlsCert, messageReceiveLimit }) {
  const b = [0x08, ...varint(protocol), 0x10, ...varint(httpVersion)];
  if (useTls) b.push(0x20, 1);
  if (clientTlsCert) {
    const c = Buffer.from(clientTlsCert);
    b.push(0x2a, ...varint(c.length), ...c);
  }
  if (messageReceiveLimit) b.push(0x30, ...varint(messageReceiveLimit));
  const len = Buffer.alloc(4);
  len.writeUInt32BE(b.length);
  return Buffer.concat([len, Buffer.from(b)]);
}

export function parseCompatResponse(buf) {
  const out = { host: "", port: 0, pemCert: null };
  let i = 0;
  const readVarint = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const c = buf[i++];
      v += (c & 0x7f) * 2 ** shift;
      if ((c & 0x80) === 0) return v;
      shift += 7;
    }
  };
  while (i < buf.length) {
    const key = readVarint();
    const field = key >>> 3;
    const wire = key & 7;
    if (wire === 0) {
      const v = readVarint();
      if (field === 2) out.port = v;
    } else if (wire === 2) {
      const n = readVarint();
      const s = buf.subarray(i, i + n);
      i += n;
      if (field === 1) out.host = s.toString("utf8");
      if (field === 3) out.pemCert = s.toString("utf8");
    } else {
      throw new Error(`unexpected wire type ${wire}`);
    }
  }
  return out;
}

