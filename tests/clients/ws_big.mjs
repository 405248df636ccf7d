// Usage: node --experimental-websocket ws_big.mjs URL TRIES BYTES
//
// Opens TRIES WebSockets to URL with Node's own WebSocket, one after the other; each sends one
// binary message of BYTES and prints how the connection closed: `CODE clean` or `CODE unclean`.
const [url, tries, bytes] = process.argv.slice(2);

function once() {
  return new Promise((resolve) => {
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => ws.send(new Uint8Array(Number(bytes)));
    ws.onerror = () => {};
    ws.onclose = (e) => resolve(`${e.code} ${e.wasClean ? "clean" : "unclean"}`);
  });
}

for (let i = 0; i < Number(tries); i++) {
  console.log(await once());
}
