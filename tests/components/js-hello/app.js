// A wasi:http/proxy hello world in JavaScript: StarlingMonkey's fetch event, as a service
// worker would write it. Built into a component by build.mjs.
addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (url.pathname === "/" || url.pathname === "") {
    event.respondWith(
      new Response("hello from javascript\n", { headers: { "content-type": "text/plain" } }),
    );
  } else {
    event.respondWith(new Response("not found\n", { status: 404 }));
  }
});
