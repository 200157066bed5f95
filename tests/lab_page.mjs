// lab_page.mjs - plays every level of the lab page (web/lab/) in headless Chromium, through
// the page's own buttons, and checks the books after each (tests/lab.sh runs it).
//
//   node tests/lab_page.mjs BASE_URL [SCREENSHOT.png]
//
// Chromium is Debian's, driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
// fds 3 and 4, messages separated by NUL), so nothing is downloaded and no port is opened.
// For each level it plays the winning moves on the rung that has the flaw, then the same
// moves on the rung that fixes it; the flawed rung must be won (the books or the answers show
// the flaw), the fixed one must refuse (the page says why, the books are exact). Any
// JavaScript error on the page (an exception, console.error, or the page's own count) fails
// the run. Prints one line per play, "ok" or "FAIL", and exits 1 on any FAIL.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const base = process.argv[2];
const screenshot = process.argv[3] || "";
if (!base) {
  console.error("usage: node tests/lab_page.mjs BASE_URL [SCREENSHOT.png]");
  process.exit(2);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- the DevTools protocol over a pipe ----

const profile = mkdtempSync(join(tmpdir(), "stock-lab-chromium."));
const chrome = spawn("chromium", [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--disable-dev-shm-usage", "--remote-debugging-pipe", "--window-size=1280,1000",
  `--user-data-dir=${profile}`, "about:blank",
], { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
const toChrome = chrome.stdio[3], fromChrome = chrome.stdio[4];
let nextId = 1, buffer = "";
const pending = new Map();
const jsErrors = [];

fromChrome.on("data", (chunk) => {
  buffer += chunk.toString("utf8");
  let i;
  while ((i = buffer.indexOf("\0")) >= 0) {
    const msg = JSON.parse(buffer.slice(0, i));
    buffer = buffer.slice(i + 1);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(JSON.stringify(msg.error)));
      else resolve(msg.result);
    } else if (msg.method === "Runtime.exceptionThrown") {
      jsErrors.push(msg.params.exceptionDetails.exception?.description || msg.params.exceptionDetails.text);
    } else if (msg.method === "Runtime.consoleAPICalled" && msg.params.type === "error") {
      jsErrors.push("console.error: " + msg.params.args.map((a) => a.value ?? a.description).join(" "));
    }
  }
});

function send(method, params = {}, sessionId) {
  const id = nextId++;
  const msg = { id, method, params };
  if (sessionId) msg.sessionId = sessionId;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    toChrome.write(JSON.stringify(msg) + "\0");
  });
}

let session;
async function evaluate(expression) {
  const r = await send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, session);
  if (r.exceptionDetails) throw new Error("evaluate: " + expression + ": " + r.exceptionDetails.text);
  return r.result.value;
}

async function until(what, expression, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await evaluate(expression)) return;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(50);
  }
}

const idle = () => until("the page to be idle", "document.body.dataset.busy === '0'");
const click = (id) => evaluate(`(() => { const b = document.getElementById(${JSON.stringify(id)});
  if (!b || b.disabled) throw new Error("button ${id} missing or disabled"); b.click(); return true; })()`);
const lane = (n, field) => evaluate(`document.getElementById("lane-${n}").dataset.${field}`);

// ---- the moves, as a learner would make them ----

const moves = {
  send: async (n) => { await click("send-" + n); await idle(); },
  // B in some levels cannot answer until A commits: send it and go on.
  sendAndGo: async (n) => { await click("send-" + n); await until(n + " sent", `document.getElementById("lane-${n}").dataset.phase !== "idle"`); await sleep(300); },
  stepTo: async (n, point) => {
    for (let i = 0; i < 8; i++) {
      await until(n + " to hold or answer", `["held", "done", "died"].includes(document.getElementById("lane-${n}").dataset.phase)`);
      if ((await lane(n, "phase")) === "held" && (await lane(n, "point")) === point) return;
      await click("step-" + n);
      await idle();
    }
    throw new Error(`${n} never held at ${point}`);
  },
  step: async (n) => { await click("step-" + n); await idle(); },
  stepAndGo: async (n) => { await click("step-" + n); await sleep(150); },
  lease: async () => { await click("wait-lease"); await until("the lease wait", "!document.getElementById('wait-lease').disabled"); },
  // A step still under way (a stopped process) ends first; then on to the answer.
  finish: async (n) => {
    await until(n + " to hold or answer", `["held", "done", "died"].includes(document.getElementById("lane-${n}").dataset.phase)`);
    if ((await lane(n, "phase")) === "held") { await click("finish-" + n); await idle(); }
  },
};

// Each level: the winning moves on its flawed rung, then the same on each fix listed.
const plays = [
  { level: "lease", flawed: "setnx-ttl", fixes: ["redis"],
    moves: [["send", "A"], ["stepTo", "A", "checked"], ["lease"], ["sendAndGo", "B"], ["finish", "A"]] },
  { level: "gap", flawed: "owner-get-del", fixes: ["redis"],
    moves: [["send", "A"], ["stepTo", "A", "release"], ["lease"], ["send", "B"], ["finish", "A"],
            ["send", "C"], ["finish", "B"]] },
  { level: "nested", flawed: "owner-lua", fixes: ["redis"],
    moves: [["send", "A"], ["finish", "A"]] },
  { level: "gc", flawed: "redis-nofence", fixes: ["redis"],
    moves: [["send", "A"], ["stepTo", "A", "checked"], ["stepAndGo", "A"], ["lease"], ["sendAndGo", "B"], ["finish", "A"]] },
  { level: "txinside", flawed: "tx-inside", fixes: ["pg-for-update"],
    moves: [["send", "A"], ["stepTo", "A", "checked"], ["sendAndGo", "B"], ["finish", "A"]] },
  // A cached read held after its miss read the table; a sale; the read stepped on; a second
  // cached read. cache-aside's cache then says the stock before the sale; cache-rwlock's sale
  // waits for the read's read side, and its delete comes after the read's write.
  { level: "cache", flawed: "cache-aside", fixes: ["cache-rwlock"],
    moves: [["send", "A"], ["sendAndGo", "B"], ["finish", "A"], ["finish", "B"], ["send", "C"]] },
  // Two carts in opposite orders (goods G1 then G2, G2 then G1), each pausing between its two
  // locks: B sent while A pauses. multi-naive deadlocks them; redis sells both, one after the other.
  { level: "deadlock", flawed: "multi-naive", fixes: ["redis"],
    moves: [["sendAndGo", "A"], ["sendAndGo", "B"]] },
  // Last: it ends svc-1's process (the lab's watcher starts it again; the page waits for it).
  { level: "crash", flawed: "setnx", fixes: ["redis"],
    moves: [["send", "A"], ["stepTo", "A", "read"], ["step", "A"], ["lease"], ["send", "B"]] },
];

async function play(level, rung, list, shot) {
  await send("Page.navigate", { url: `${base}/lab/?level=${level}&rung=${rung}` }, session);
  await until("the page", "document.readyState === 'complete' && !!document.getElementById('start')");
  if (process.env.LAB_DEBUG) console.log("loaded", Date.now() % 100000);
  await click("start");
  await until("the level to start", "document.body.dataset.verdict === 'playing' && document.body.dataset.busy === '0'", 40000);
  if (process.env.LAB_DEBUG) console.log("started", Date.now() % 100000);
  for (const [what, ...args] of list) await moves[what](...args);
  if (process.env.LAB_DEBUG) console.log("moved", Date.now() % 100000);
  await until("a verdict", "['won','won-on-fix','refused','over'].includes(document.body.dataset.verdict) && document.body.dataset.busy === '0'", 30000);
  const verdict = await evaluate("document.body.dataset.verdict");
  // The goods: "G" or, for a cart level, "G1 and G2" (G2 = G1 + 1); the books of each.
  const ids = (await evaluate(`document.getElementById("goods").textContent`)).split(" and ");
  const all = [];
  for (const id of ids)
    all.push(JSON.parse(await evaluate(`fetch("/replica/3/api/stock/${id}").then(r => r.text())`)));
  const books = all[0];
  books.others = all.slice(1);
  const text = await evaluate("document.getElementById('verdict').textContent");
  const errors = Number(await evaluate("document.body.dataset.errors"));
  if (process.env.LAB_DEBUG) console.log(await evaluate("document.getElementById('log').innerText"));
  if (shot) {
    const png = await send("Page.captureScreenshot", { format: "png" }, session);
    writeFileSync(shot, Buffer.from(png.data, "base64"));
  }
  return { verdict, books, text, errors };
}

let failed = 0;
function report(ok, line) {
  console.log((ok ? "ok   " : "FAIL ") + line);
  if (!ok) failed++;
}

try {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  ({ sessionId: session } = await send("Target.attachToTarget", { targetId, flatten: true }));
  await send("Runtime.enable", {}, session);
  await send("Page.enable", {}, session);
  const only = (process.env.LAB_LEVELS || "").split(",").filter(Boolean);
  for (const p of plays) {
    if (only.length && !only.includes(p.level)) continue;
    for (const rung of [p.flawed, ...p.fixes]) {
      const flawed = rung === p.flawed;
      const t0 = Date.now();
      let r;
      try {
        r = await play(p.level, rung, p.moves, flawed && p.level === "lease" ? screenshot : "");
      } catch (e) {
        report(false, `${p.level} on ${rung}: ${e.message}`);
        try { console.log(await evaluate("document.getElementById('log').innerText")); } catch (e2) { /* no page */ }
        continue;
      }
      const b = r.books, every = [b, ...b.others];
      const books = every.map((g) => `sold ${g.sold}, taken ${g.initial - g.stock}, oversold ${g.oversold}`).join("; ");
      let ok;
      if (flawed) {
        // The flaw shown: oversold, or (crash, nested) nothing sold where a sale was due.
        // The deadlock: both carts refused (the page's check), both goods' books unchanged.
        const shown = p.level === "deadlock"
          ? every.length === 2 && every.every((g) => g.sold === 0 && g.stock === g.initial && g.oversold === 0)
          : p.level === "crash" || p.level === "nested" ? b.sold === 0 && b.oversold === 0
          // The cache: the books exact (one sale), the lie in what C read (the page's check).
          : p.level === "cache" ? b.sold === 1 && b.oversold === 0 : b.oversold > 0;
        ok = r.verdict === "won" && shown && r.errors === 0;
      } else {
        ok = r.verdict === "refused" && every.every((g) => g.oversold === 0) && r.errors === 0 &&
          /No order of these moves wins/.test(r.text);
        // The same moves on the fix sell both carts: each goods sold 2 units (one per cart).
        if (p.level === "deadlock")
          ok = ok && every.length === 2 && every.every((g) => g.sold === 2 && g.initial - g.stock === 2);
      }
      report(ok, `${p.level} on ${rung}: ${r.verdict}; books: ${books}; ${((Date.now() - t0) / 1000).toFixed(1)} s` +
        (r.errors ? `; ${r.errors} page errors` : ""));
    }
  }
  report(jsErrors.length === 0, `no JavaScript error during the run${jsErrors.length ? ": " + jsErrors.slice(0, 3).join(" | ") : ""}`);
} catch (e) {
  report(false, "the browser run: " + e.message);
} finally {
  try { await Promise.race([send("Browser.close"), sleep(2000)]); } catch (e) { /* gone */ }
  const exited = new Promise((r) => chrome.once("exit", r));
  chrome.kill();
  await Promise.race([exited, sleep(5000)]);
  try { rmSync(profile, { recursive: true, force: true, maxRetries: 5 }); } catch (e) { /* left in tmp */ }
}
process.exit(failed ? 1 : 0);
