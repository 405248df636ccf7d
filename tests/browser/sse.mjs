// The ticker example's Server-Sent Events in a real browser: an EventSource reads events as
// they come, and each time the server ends the stream it reconnects with Last-Event-ID and the
// ids go on where they stopped.
//
// Usage: node sse.mjs http://127.0.0.1:PORT
// Prints what it saw and exits 0 when every check passed; prints what went wrong and exits 1
// otherwise, or after TOTAL_MS. Uses Debian's chromium (CHROMIUM, default /usr/bin/chromium).
//
// What it prints, for tests/browser.rs to assert on:
//   ids: 1,2,3,4,5,6,7,8,9          the ids of the first 9 events, in order of arrival
//   resumed: 4,5,6,7,8,9            the ids whose data said the request carried Last-Event-ID
//   connections: 1,4,7              the first id of each connection (3 events each)
import { chromium } from "playwright-core";

const base = process.argv[2];
if (!base) {
  console.error("usage: node sse.mjs http://127.0.0.1:PORT");
  process.exit(2);
}

// The whole run, and any one wait in it.
const TOTAL_MS = 20000;
const STEP_MS = 10000;
setTimeout(() => {
  console.error(`sse failed: not done after ${TOTAL_MS} ms`);
  process.exit(1);
}, TOTAL_MS).unref();

// 3 events a connection, 50 ms apart, and a 100 ms reconnection delay: 9 events take three
// connections, the second and third resuming after Last-Event-ID 3 and 6.
const STREAM = "events?count=3&interval_ms=50&retry_ms=100";
const WANT = 9;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const check = (ok, what) => {
  if (!ok) throw new Error(what);
};
try {
  const page = await (await browser.newContext()).newPage();
  page.setDefaultTimeout(STEP_MS);
  await page.goto(`${base}/ticker/`);

  // An EventSource of the test's own, opened by the page (the URL is relative to it: the
  // page is at /ticker/, so this is /ticker/events). It closes after WANT events; a stream that
  // fails for good (a 4xx, say) ends the wait at once.
  const seen = await page.evaluate(
    ({ url, want, timeout }) =>
      new Promise((resolve, reject) => {
        const events = [];
        const connections = [];
        const source = new EventSource(url);
        const fail = (why) => {
          source.close();
          reject(new Error(`${why} after ${JSON.stringify(events)}`));
        };
        const timer = setTimeout(() => fail(`no ${want} events in ${timeout} ms`), timeout);
        // Open fires once per connection, before its first event.
        source.onopen = () => connections.push(events.length);
        source.onerror = () => {
          if (source.readyState === EventSource.CLOSED) fail("the EventSource gave up");
        };
        source.onmessage = (e) => {
          events.push({ id: e.lastEventId, data: JSON.parse(e.data) });
          if (events.length === want) {
            clearTimeout(timer);
            source.close();
            resolve({ events, connections });
          }
        };
      }),
    { url: STREAM, want: WANT, timeout: STEP_MS },
  );
  const ids = seen.events.map((e) => e.id);
  const resumed = seen.events.filter((e) => e.data.resumed).map((e) => e.id);
  const firsts = seen.connections.map((before) => ids[before]);
  console.log("ids:", ids.join(","));
  console.log("resumed:", resumed.join(","));
  console.log("connections:", firsts.join(","));
  check(ids.join(",") === "1,2,3,4,5,6,7,8,9", "the ids are not 1 to 9 in order");
  check(seen.events.every((e) => String(e.data.n) === e.id), "an event's n is not its id");
  check(resumed.join(",") === "4,5,6,7,8,9", "not exactly the events after the first 3 resumed");
  check(firsts.join(",") === "1,4,7", "not three connections of three events");

  // The page itself: its own EventSource fills the list, and it does so at /ticker too (no
  // slash), where a URL relative to the page would miss the mount.
  const listed = async (url) => {
    await page.goto(url);
    await page.waitForFunction(() => document.querySelectorAll("#events li").length > 0);
    return page.locator("#events li").first().innerText();
  };
  console.log("page list:", await listed(`${base}/ticker/`));
  console.log("page list at /ticker:", await listed(`${base}/ticker`));

  // Its chat completion: the answer arrives token by token and ends with `done`.
  await page.fill("#prompt", "what is SSE?");
  await page.click("#send");
  await page.waitForSelector("body[data-answer=done]");
  const answer = await page.locator("#answer").innerText();
  console.log("answer:", answer);
  console.log("answer status:", await page.locator("#answer-status").innerText());
  check(answer.startsWith('You asked: "what is SSE?".'), "the answer does not quote the prompt");
  console.log("sse ok");
} catch (e) {
  console.error("sse failed:", e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
