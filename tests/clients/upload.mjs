// Usage: node upload.mjs URL TRIES BYTES MODE
//
// Sends TRIES uploads of BYTES to URL with Node's own clients, one after the other, and prints
// one line per try: the status the client saw, or `error CODE` when it saw none. MODE is
// `fetch` (a buffer with Content-Length), `stream` (fetch with a chunked ReadableStream body)
// or `http` (node:http with Content-Length, written in 64 KiB pieces).
import http from "node:http";

const [url, tries, bytes, mode] = process.argv.slice(2);
const size = Number(bytes);
const piece = new Uint8Array(64 * 1024).fill(120);

function stream() {
  let sent = 0;
  return new ReadableStream({
    pull(controller) {
      if (sent >= size) {
        controller.close();
        return;
      }
      controller.enqueue(piece);
      sent += piece.length;
    },
  });
}

function viaHttp() {
  return new Promise((resolve) => {
    const req = http.request(url, {
      method: "POST",
      headers: { "content-length": size },
    });
    req.on("response", (res) => {
      res.resume();
      res.on("end", () => resolve(String(res.statusCode)));
    });
    req.on("error", (e) => resolve(`error ${e.code ?? e.message}`));
    let sent = 0;
    const write = () => {
      while (sent < size) {
        sent += piece.length;
        if (!req.write(piece)) {
          req.once("drain", write);
          return;
        }
      }
      req.end();
    };
    write();
  });
}

async function once() {
  try {
    if (mode === "http") return await viaHttp();
    const init =
      mode === "stream"
        ? { method: "POST", body: stream(), duplex: "half" }
        : { method: "POST", body: new Uint8Array(size) };
    const res = await fetch(url, init);
    await res.arrayBuffer();
    return String(res.status);
  } catch (e) {
    return `error ${e.cause?.code ?? e.code ?? e.message}`;
  }
}

for (let i = 0; i < Number(tries); i++) {
  console.log(await once());
}
