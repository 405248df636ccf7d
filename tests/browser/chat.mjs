// Two pages of the chat example exchange messages through a real ankh server.
//
// Usage: node chat.mjs http://127.0.0.1:PORT
// Exits 0 when both pages saw each other join and each saw the other's message; prints what
// went wrong and exits 1 otherwise. Uses Debian's chromium (CHROMIUM, default /usr/bin/chromium).
import { chromium } from "playwright-core";

const base = process.argv[2];
if (!base) {
  console.error("usage: node chat.mjs http://127.0.0.1:PORT");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const timeout = 20000;
try {
  const open = async (name) => {
    const page = await (await browser.newContext()).newPage();
    page.setDefaultTimeout(timeout);
    await page.goto(`${base}/chat?room=e2e&name=${name}`);
    await page.waitForSelector("body[data-state=open]");
    return page;
  };
  const logHas = (page, text) =>
    page.waitForFunction((t) => document.getElementById("log").innerText.includes(t), text);
  const say = async (page, text) => {
    await page.fill("#text", text);
    await page.click("#send");
  };

  const alice = await open("alice");
  await logHas(alice, "alice joined");
  const bob = await open("bob");
  await logHas(alice, "bob joined");
  await say(alice, "hello from alice");
  await logHas(bob, "alice: hello from alice");
  await logHas(alice, "alice: hello from alice");
  await say(bob, "hi alice, bob here");
  await logHas(alice, "bob: hi alice, bob here");
  // A long message: over the compression threshold, so it crosses compressed both ways.
  const long = "a long line " + "0123456789".repeat(40);
  await say(bob, long);
  await logHas(alice, "bob: " + long);
  // Chromium offered permessage-deflate and the server accepted: the negotiated extension,
  // as the browser itself reports it, on a socket of the same page.
  const extensions = await alice.evaluate(
    (url) =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(url);
        ws.onopen = () => {
          resolve(ws.extensions);
          ws.close();
        };
        ws.onerror = () => reject(new Error("probe socket failed"));
      }),
    base.replace(/^http/, "ws") + "/chat/ws?room=probe&name=probe",
  );
  console.log("extensions:", extensions);
  if (!extensions.startsWith("permessage-deflate")) {
    throw new Error(`compression not negotiated: ${JSON.stringify(extensions)}`);
  }
  await bob.close();
  await logHas(alice, "bob left");
  console.log("chat ok:", JSON.stringify(await alice.locator("#log").innerText()));
} catch (e) {
  console.error("chat failed:", e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
}
