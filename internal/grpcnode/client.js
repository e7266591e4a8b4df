'use strict';
// A grpc-node xDS client for the bridge's end-to-end tests, driven by the
// Go test over stdin/stdout (package grpcnode). It has no proto toolchain:
// it calls grpc.testing.TestService/UnaryCall with raw bytes, sending an
// empty SimpleRequest (zero bytes) and reading only SimpleResponse's
// server_id (field 4) from the answer.
//
// The xDS bootstrap comes from GRPC_XDS_BOOTSTRAP, exactly as
// `consul-xds-bridge bootstrap -grpc` prints it.
//
// Protocol: one JSON object per line each way.
//   in:  {"id": 1, "target": "xds:///echo", "metadata": {"k": "v"},
//         "timeout_ms": 5000, "wait_for_ready": true}
//   out: {"id": 1, "server_id": "echo-1"}
//     or {"id": 1, "code": 14, "details": "..."}
// Calls run concurrently; answers carry the id they belong to. A line
// {"ready": true} is written first, once grpc-js-xds is registered.

const grpc = require('@grpc/grpc-js');
require('@grpc/grpc-js-xds').register();
const readline = require('readline');

const identity = (b) => b;
const TestService = grpc.makeGenericClientConstructor({
  UnaryCall: {
    path: '/grpc.testing.TestService/UnaryCall',
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
}, 'TestService');

// One channel per target, kept for the life of the process, as an
// application would.
const clients = new Map();
function client(target) {
  let c = clients.get(target);
  if (!c) {
    c = new TestService(target, grpc.credentials.createInsecure());
    clients.set(target, c);
  }
  return c;
}

function varint(buf, pos) {
  let v = 0;
  let mul = 1;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++];
    v += (b & 0x7f) * mul;
    if ((b & 0x80) === 0) return [v, pos];
    mul *= 128;
  }
}

// serverId reads field 4 (string) of a SimpleResponse, skipping the rest.
function serverId(buf) {
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = varint(buf, pos);
    const field = Math.floor(key / 8);
    switch (key & 7) {
      case 0: [, pos] = varint(buf, pos); break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2: {
        let len;
        [len, pos] = varint(buf, pos);
        if (field === 4) return buf.toString('utf8', pos, pos + len);
        pos += len;
        break;
      }
      default: throw new Error(`unexpected wire type ${key & 7}`);
    }
  }
  return '';
}

function answer(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    answer({ id: -1, code: grpc.status.INTERNAL, details: `bad request line: ${e.message}` });
    return;
  }
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(req.metadata || {})) md.set(k, v);
  const options = {
    deadline: Date.now() + (req.timeout_ms || 5000),
    waitForReady: !!req.wait_for_ready,
  };
  client(req.target).UnaryCall(Buffer.alloc(0), md, options, (err, resp) => {
    if (err) {
      answer({ id: req.id, code: err.code, details: err.details || err.message });
      return;
    }
    try {
      answer({ id: req.id, server_id: serverId(resp) });
    } catch (e) {
      answer({ id: req.id, code: grpc.status.INTERNAL, details: `bad response: ${e.message}` });
    }
  });
}).on('close', () => {
  for (const c of clients.values()) c.close();
  process.exit(0);
});

answer({ ready: true });
