// Usage: node --experimental-websocket ws_deflate.mjs URL
//
// Node's own WebSocket (undici) against an echo endpoint: prints the extensions it agreed on,
// then sends a long text, a compressible binary message, an incompressible one and a short
// text, and prints `echo ok N` once each came back unchanged (or what differed).
const [url] = process.argv.slice(2);
const ws = new WebSocket(url);
ws.binaryType = "arraybuffer";
const text = JSON.stringify(
  Array.from({ length: 200 }, (_, i) => ({ id: i, user: `member-${i}`, text: "hello, room" })),
);
const binary = new Uint8Array(60_000).map((_, i) => i % 7);
const noise = new Uint8Array(20_000).map(() => Math.floor(Math.random() * 256));
const sent = [text, binary, noise, "short"];
const same = (a, b) => {
  if (typeof a === "string") return a === b;
  const x = new Uint8Array(b);
  return x.length === a.length && x.every((v, i) => v === a[i]);
};
let next = 0;
ws.onopen = () => {
  console.log(`extensions: ${ws.extensions}`);
  for (const m of sent) ws.send(m);
};
ws.onmessage = (e) => {
  if (!same(sent[next], e.data)) {
    console.log(`echo ${next} differs`);
    process.exit(1);
  }
  next += 1;
  if (next === sent.length) {
    console.log(`echo ok ${next}`);
    ws.close(1000);
  }
};
ws.onclose = (e) => console.log(`close ${e.code}`);
