// Calls grpc.testing.TestService/UnaryCall through Node's own xDS client
// (@grpc/grpc-js-xds): xds:///<argv[2]>, argv[3] calls, one at a time.
// The bootstrap comes from GRPC_XDS_BOOTSTRAP_CONFIG. Prints
// {"hosts": {"<hostname>": n}}, or {"error": "..."} at the first failed
// call, on one line, then stays connected until its stdin ends (so that the
// test can look at the control plane's view of it) and exits.
'use strict';
const grpc = require('@grpc/grpc-js');
require('@grpc/grpc-js-xds').register();

const [target, count] = [process.argv[2], Number(process.argv[3])];

// hostname is field 6 of grpc.testing.SimpleResponse; the request is an
// empty SimpleRequest, so no .proto is needed.
function hostname(buf) {
  let i = 0;
  const varint = () => {
    let v = 0, shift = 0, b;
    do { b = buf[i++]; v += (b & 0x7f) * 2 ** shift; shift += 7; } while (b & 0x80);
    return v;
  };
  while (i < buf.length) {
    const tag = varint(), field = Math.floor(tag / 8), wire = tag % 8;
    if (wire === 0) { varint(); continue; }
    if (wire !== 2) throw new Error(`unexpected wire type ${wire}`);
    const n = varint();
    if (field === 6) return buf.subarray(i, i + n).toString();
    i += n;
  }
  return '';
}

// Exit explicitly: the shared xDS client would keep the process alive.
function report(result) {
  console.log(JSON.stringify(result));
  process.stdin.on('end', () => process.exit(0)).resume();
}

const client = new grpc.Client(`xds:///${target}`, grpc.credentials.createInsecure());
const hosts = {};
function call(left) {
  if (left === 0) {
    report({ hosts });
    return;
  }
  client.makeUnaryRequest('/grpc.testing.TestService/UnaryCall', () => Buffer.alloc(0), b => b, {},
    new grpc.Metadata({ waitForReady: true }), { deadline: Date.now() + 10000 }, (err, res) => {
      if (err) {
        report({ error: `call ${count - left + 1}: ${err.message}` });
        return;
      }
      const h = hostname(res);
      hosts[h] = (hosts[h] || 0) + 1;
      call(left - 1);
    });
}
call(count);
