// A wasi:http/proxy component in JavaScript: StarlingMonkey's fetch event, as a service
// worker would write it. Built into a component by build.mjs.
//
// - `/`: hello world
// - `/lines?n=N&ms=M[&gate=ADDR]`: N lines (`line I\n`), M ms apart, as a ReadableStream
//   body that the engine writes as it is pulled; with `gate`, after the first line it waits
//   for `fetch("http://ADDR/")` to answer (the tests open it only after reading that line)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function lines(url) {
  const n = Number(url.searchParams.get("n") ?? "3");
  const ms = Number(url.searchParams.get("ms") ?? "0");
  const gate = url.searchParams.get("gate");
  const encoder = new TextEncoder();
  let i = 0;
  const body = new ReadableStream({
    async pull(controller) {
      if (i >= n) {
        controller.close();
        return;
      }
      if (i > 0 && ms > 0) {
        await sleep(ms);
      }
      controller.enqueue(encoder.encode(`line ${i}\n`));
      i += 1;
      if (i === 1 && gate) {
        const opened = await fetch(`http://${gate}/`);
        await opened.text();
      }
    },
  });
  return new Response(body, { headers: { "content-type": "text/plain" } });
}

addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (url.pathname === "/" || url.pathname === "") {
    event.respondWith(
      new Response("hello from javascript\n", { headers: { "content-type": "text/plain" } }),
    );
  } else if (url.pathname === "/lines") {
    event.respondWith(lines(url));
  } else {
    event.respondWith(new Response("not found\n", { status: 404 }));
  }
});
