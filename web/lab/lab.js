/*
 * lab.js - the lab page: the learner is the scheduler. Each lane sends a real deduction to
 * one replica (A to svc-1, B to svc-2, C to svc-3, through nginx's /replica/N/api/) with
 * X-Fault: hold-at=POINT,... and an X-Request-Id, then steps it from point to point with
 * POST /replica/N/api/lab/step. A request held at a point holds whatever it holds there (the
 * lock, its open transaction); the clock keeps running, so a lease can run out under it.
 *
 * What the page reads, all JSON of the service (docs/API.md):
 *   GET  /replica/N/api/lab/requests   where lane N's request is held now
 *   POST /replica/N/api/lab/step       let it run to its next point (or its answer)
 *   GET  /replica/3/api/stock/G        the books, after every move and five times a second
 *   GET  /replica/3/api/lock/G         the lock of the redis rungs (lock:goods:G)
 *   GET  /replica/3/api/lab/lock/G?mode=R   the string lock of the first rungs (lock:R:goods:G)
 *   POST /replica/N/api/order          a cart (the deadlock level: goods G and G+1, no hold)
 *   GET  /replica/N/api/stock/G?cached=1&mode=R   a cached read (the cache level), which may
 *                                      hold at cache-miss-read like a deduction at its points
 * (svc-3 answers the panels: svc-1 is the one a level stops or ends.)
 *
 * Levels: one per flaw of the ladder, each with its goal, its moves and the check that the
 * books (or the answers) show the flaw; each can be replayed on a rung that fixes it, where
 * no order of the same moves wins, and the page says why.
 */
"use strict";

const LEASE_MS = 1500;  /* the lab stack's LOCK_FIXED_LEASE_MS and LOCK_LEASE_MS */
const LEASE_WAIT_MS = LEASE_MS + 400;
const STOCK = 100;
const POLL_MS = 250;
const ALL = ["entered", "read", "written", "checked", "committed", "release"];
const TX_INSIDE = ["entered", "read", "written", "release", "checked", "committed"];
const REDIS_LOCKED = new Set(["redis", "redis-nofence", "redis-nowatchdog", "tx-inside"]);
const STRING_LOCKED = new Set(["setnx", "setnx-ttl", "owner-get-del", "owner-lua"]);
/* The deadlock level's pause between a cart's two locks: longer than the learner's gap between
 * "send A" and "send B" (so each holds its first lock before either asks for its second), and
 * shorter than the lab's LOCK_WAIT_MS (1000 ms) less a sale, so that on redis B's wait for A's
 * first lock ends in time and B sells after A. */
const CART_PAUSE_MS = 800;

/* Each level: the rung that has the flaw, the rungs that fix it, the lanes it uses (what each
 * holds at, and the fault it carries), and when it is won. `s` is the page's state, `b` the
 * books. */
const LEVELS = [
  {
    id: "lease", title: "Lease overrun", rung: "setnx-ttl", fixes: ["redis"],
    goal: "Make setnx-ttl sell one unit twice: keep A inside its section until its lease runs out.",
    moves: "send A and step it to read or checked; let the lease run out; send B (it sells); step A to its end.",
    lanes: { A: { holds: ALL }, B: { holds: [], hint: "held at written or later, A keeps its row locked: B's write waits for A's commit (5 s at most, PostgreSQL's statement_timeout)" } },
    won: (s, b) => b.oversold > 0,
    why: "redis renews A's lease while A's process runs (the watchdog): however long A is held, B waits its second and answers lock_timeout, or sells after A; and a lease lost anyway would meet the fencing token at the read, where the sale claims the goods row with it: an older token is refused, a newer one waits for A's commit.",
  },
  {
    id: "crash", title: "Crash", rung: "setnx", fixes: ["redis"],
    goal: "Make setnx wedge the goods: A's process dies holding the lock, and B can never sell.",
    moves: "send A and step it past read (svc-1's process ends there); let the lease run out; send B.",
    lanes: { A: { holds: ALL, fault: "crash-in-section", hint: "stepping A on from read ends svc-1's process (it is started again)" }, B: { holds: [] } },
    won: (s, b) => s.lanes.A.phase === "died" && s.lanes.B.error === "lock_timeout" &&
      s.lanes.B.sentAt - s.lanes.A.diedAt > LEASE_MS,
    why: "redis's lock has a lease that only a live process renews: once A's process is gone, the lease runs out and B takes the lock and sells.",
  },
  {
    id: "gap", title: "Release gap", rung: "owner-get-del", fixes: ["redis"],
    goal: "Make owner-get-del sell one unit twice: let A's release delete B's lock, so that C enters beside B.",
    moves: "send A (it sells, then holds in its release, between its GET and its DEL); let the lease run out; send B (held at read); step A to its end; send C; step B to its end.",
    lanes: { A: { holds: ["release"], hint: "A holds only in its release: its GET has found its own token, its DEL is next" }, B: { holds: ["read"], hint: "B's own lease runs too: step A and send C before it runs out" }, C: { holds: [] } },
    won: (s, b) => b.oversold > 0,
    why: "redis checks the owner and deletes in one step, and A's lease does not run out while A's process runs: B cannot enter while A holds, and A's release never deletes another's lock.",
  },
  {
    id: "nested", title: "Nested", rung: "owner-lua", fixes: ["redis"],
    goal: "Make owner-lua wait for itself: A's section takes its own lock again.",
    moves: "send A (its section calls a helper guarded by the same lock); step A.",
    lanes: { A: { holds: ["entered"], fault: "nested" } },
    won: (s, b) => s.lanes.A.error === "lock_timeout" && b.sold === 0,
    why: "redis's lock is reentrant: the same holder takes it again (its hold count goes to 2 and back), so A sells.",
  },
  {
    id: "gc", title: "GC stop", rung: "redis-nofence", fixes: ["redis", "pg-for-update"],
    goal: "Make redis-nofence sell one unit twice: stop A's whole process past its lease, after its last check.",
    moves: "send A and step it to checked; step A (svc-1's process stops for 5 s, its watchdog too); let the lease run out; send B.",
    lanes: { A: { holds: ALL, fault: "stop-before-commit=5000", hint: "stepping A on from checked stops svc-1's whole process for 5 s: let the lease run out and send B meanwhile" }, B: { holds: [] } },
    won: (s, b) => b.oversold > 0,
    why: "the read claims the goods row with a fencing token (redis): an older token is refused, and a newer one waits for A's commit; or the row's own lock keeps B out until A commits (pg-for-update): B reads what A committed, or is refused.",
  },
  {
    id: "txinside", title: "Commit after release", rung: "tx-inside", fixes: ["pg-for-update", "redis"],
    goal: "Make tx-inside sell one unit twice: let B read while A has given its lock back but not committed.",
    moves: "send A and step it to checked (its lock is already given back); send B; step A to its end.",
    lanes: { A: { holds: TX_INSIDE }, B: { holds: [] } },
    won: (s, b) => b.oversold > 0,
    why: "the lock is given back only after COMMIT (redis), or the row's lock is the transaction's own (pg-for-update): B cannot read before A's sale is committed.",
  },
  {
    id: "cache", title: "Make the cache lie", rung: "cache-aside", fixes: ["cache-rwlock"],
    goal: "Make cache-aside's cache say a stock the table no longer holds: A's cached read misses and reads the table, B sells and deletes the cache entry, then A writes what it read.",
    moves: "send A (a cached read: it misses and holds after reading the table); send B (a sale: it sells and deletes the entry); step A to its end (it writes the stock it read into the cache); send C (a cached read).",
    lanes: {
      A: { holds: ["cache-miss-read"], read: true, hint: "a cached read (GET /api/stock/G?cached=1): held after its miss read the table, before it writes the cache" },
      B: { holds: [] },
      C: { holds: [], read: true, hint: "a cached read: what the product page would show now" },
    },
    won: (s, b) => s.lanes.C.phase === "done" && s.lanes.C.status === 200 && s.lanes.C.stock !== b.stock,
    why: "cache-rwlock: A's miss holds the read side of the goods' read-write lock from its read of the table to its write of the cache, and B's sale takes the write side around its write and its delete: B waits until A has written and let go (or gives up after LOCK_WAIT_MS, selling nothing), so its delete always comes after A's write, and C reads what the table holds.",
  },
  {
    id: "deadlock", title: "Deadlock", rung: "multi-naive", fixes: ["redis"],
    goal: "Make two carts deadlock on multi-naive: A's cart takes G1's lock and waits for G2's, B's takes G2's and waits for G1's, and neither sells.",
    moves: "send A, then send B within " + (CART_PAUSE_MS / 1000) + " s (each pauses that long between its two locks).",
    carts: true,
    lanes: {
      A: { holds: [], cart: [0, 1], fault: "pause-between-locks=" + CART_PAUSE_MS },
      B: { holds: [], cart: [1, 0], fault: "pause-between-locks=" + CART_PAUSE_MS, hint: "send B while A pauses: B must hold G2 before A asks for it" },
    },
    won: (s, b) => s.lanes.A.error === "lock_timeout" && s.lanes.B.error === "lock_timeout" &&
      s.books2 !== null && [b, s.books2].every((g) => g.sold === 0 && g.stock === g.initial),
    why: "redis takes a cart's locks in ascending goods id, whatever order the cart lists them: B also asks for G1 first, waits while A holds it, and takes G1 then G2 once A has sold. No cart holds a higher lock while waiting for a lower one, so no cycle of waits can form.",
  },
];

const LANES = { A: 1, B: 2, C: 3 };

const state = {
  level: LEVELS[0], rung: LEVELS[0].rung, goods: 0, t0: 0, playing: false, run: 0,
  lanes: {}, events: [], leases: [], books: null, books2: null, holders: {}, busy: 0,
  verdict: "idle",
};

/* $, the page's error count and the lock's figures: common.js (web/, served at /live/). */

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => Date.now() - state.t0;

/* One HTTP call; never throws: {status, body} (status 0 when nothing answered). */
async function call(method, path, body, headers) {
  const init = { method, cache: "no-store", headers: Object.assign({}, headers || {}) };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  try {
    const r = await fetch(path, init);
    let json = null;
    try { json = await r.json(); } catch (e) { json = null; }
    return { status: r.status, body: json };
  } catch (e) {
    return { status: 0, body: null };
  }
}

/* Counts an action in flight (the test waits for none). */
async function busy(fn) {
  state.busy++;
  document.body.dataset.busy = String(state.busy);
  try { return await fn(); } finally {
    state.busy--;
    document.body.dataset.busy = String(state.busy);
    render();
    await check();
  }
}

function log(lane, text, kind) {
  const t = now();
  state.events.push({ lane, t, text, kind });
  const li = document.createElement("li");
  li.textContent = (t / 1000).toFixed(2) + " s  " + (lane || "-") + "  " + text;
  $("log").appendChild(li);
  $("log").scrollTop = $("log").scrollHeight; /* the list scrolls, not the page */
  drawTimeline();
}

/* ---- a lane's moves ---- */

function laneCfg(name) { return state.level.lanes[name]; }

async function send(name) {
  const lane = state.lanes[name], cfg = laneCfg(name), run = state.run;
  if (lane.phase !== "idle") return;
  const faults = [];
  if (cfg.holds.length) faults.push("hold-at=" + cfg.holds.join(","));
  if (cfg.fault) faults.push(cfg.fault);
  lane.id = name + "-" + state.goods % 100000 + "-" + run;
  lane.phase = "running";
  lane.sentAt = now();
  render();
  log(name, "sent to svc-" + LANES[name] + (faults.length ? " (X-Fault: " + faults.join(", ") + ")" : ""), "send");
  const headers = { "X-Request-Id": lane.id };
  if (faults.length) headers["X-Fault"] = faults.join(",");
  if (cfg.cart) {
    /* The level's carts hold nowhere (their fault is the pause): each runs to its answer. */
    lane.answer = call("POST", "/replica/" + LANES[name] + "/api/order",
      { items: cfg.cart.map((k) => ({ goods_id: state.goods + k, count: 1 })), mode: state.rung },
      headers).then((r) => answered(name, r, run));
    await busy(() => lane.answer);
    return;
  }
  if (cfg.read) {
    lane.answer = call("GET", "/replica/" + LANES[name] + "/api/stock/" + state.goods +
      "?cached=1&mode=" + state.rung, undefined, headers).then((r) => answered(name, r, run));
    await busy(() => settle(name));
    return;
  }
  lane.answer = call("POST", "/replica/" + LANES[name] + "/api/deduct",
    { goods_id: state.goods, count: 1, mode: state.rung }, headers).then((r) => answered(name, r, run));
  await busy(() => settle(name));
}

/* The answer of lane `name`'s request. A 502 from nginx: its replica's process died. */
async function answered(name, r, run) {
  const lane = state.lanes[name];
  if (run !== state.run) return;
  lane.status = r.status;
  lane.error = r.body && r.body.error ? r.body.error : null;
  if (r.status === 502 || r.status === 0) {
    lane.phase = "died";
    lane.diedAt = now();
    log(name, "svc-" + LANES[name] + "'s process died: no answer", "dead");
  } else if (laneCfg(name).read) {
    lane.phase = "done";
    lane.stock = r.status === 200 && r.body ? r.body.stock : null;
    log(name, r.status === 200
      ? "read " + r.body.stock + " (from the " + (r.body.source === "cache" ? "cache" : "table, now cached") + ")"
      : r.status + " " + lane.error, r.status === 200 ? "ok" : "err");
  } else {
    lane.phase = "done";
    const left = r.status !== 200 ? "" : r.body.items
      ? r.body.items.map((it) => goodsName(it.goods_id) + " " + it.remaining).join(", ")
      : String(r.body.remaining);
    log(name, r.status === 200 ? "sold (200, " + left + " left)" : r.status + " " + lane.error, r.status === 200 ? "ok" : "err");
  }
  render();
  await check();
}

/* Waits until lane `name`'s request holds at a point or has answered (20 s at most). */
async function settle(name) {
  const lane = state.lanes[name], run = state.run;
  for (let i = 0; i < 200 && run === state.run; i++) {
    if (lane.phase === "done" || lane.phase === "died") return;
    const r = await call("GET", "/replica/" + LANES[name] + "/api/lab/requests");
    if (r.status === 200 && r.body) {
      const held = r.body.requests.find((q) => q.id === lane.id);
      if (held) { heldAt(name, held.point); return; }
    }
    await sleep(100);
  }
}

function heldAt(name, point) {
  const lane = state.lanes[name];
  if (lane.phase === "held" && lane.point === point) return;
  lane.phase = "held";
  lane.point = point;
  log(name, "held at " + point, "point");
}

async function step(name) {
  const lane = state.lanes[name];
  if (lane.phase !== "held") return;
  const from = lane.point;
  lane.phase = "running";
  log(name, "stepped on from " + from, "step");
  render();
  await busy(async () => {
    const r = await call("POST", "/replica/" + LANES[name] + "/api/lab/step", { id: lane.id });
    if (r.status === 200 && r.body) {
      if (r.body.point === "done") { await lane.answer; return; }
      if (r.body.point !== "running") { heldAt(name, r.body.point); return; }
      await settle(name);
      return;
    }
    if (r.status === 404) { await settle(name); return; } /* between two points: see where */
    /* The process died under the step (crash) or answered nothing: its answer says which. */
    await Promise.race([lane.answer, sleep(5000)]);
  });
}

/* Steps lane `name` until its request answers. */
async function finish(name) {
  for (let i = 0; i < 12 && state.lanes[name].phase === "held"; i++) await step(name);
}

async function waitLease() {
  const btn = $("wait-lease");
  btn.disabled = true;
  log(null, "waiting " + LEASE_WAIT_MS + " ms: the lease (" + LEASE_MS + " ms) runs out", "wait");
  await busy(async () => {
    const end = Date.now() + LEASE_WAIT_MS;
    while (Date.now() < end) {
      $("clock").textContent = ((end - Date.now()) / 1000).toFixed(1) + " s";
      await sleep(100);
    }
    $("clock").textContent = "";
    state.leases.push(now());
    log(null, "the lease has run out", "lease");
  });
  btn.disabled = !state.playing;
}

/* ---- the level ---- */

function laneNames() { return Object.keys(state.level.lanes); }

async function check() {
  if (!state.playing || state.goods === 0) return;
  const r = await call("GET", "/replica/3/api/stock/" + state.goods);
  if (r.status !== 200 || !r.body) return;
  const b = r.body;
  state.books = b;
  if (state.level.carts) {
    const r2 = await call("GET", "/replica/3/api/stock/" + (state.goods + 1));
    if (r2.status !== 200 || !r2.body) return;
    state.books2 = r2.body;
  }
  showBooks(b, state.level.carts ? state.books2 : null);
  const level = state.level;
  if (state.verdict === "won" || state.verdict === "refused") return;
  if (level.won(state, b)) {
    setVerdict(state.rung === level.rung ? "won" : "won-on-fix",
      state.rung === level.rung ? "Won: " + winText(b) : "The fix was beaten: " + winText(b));
    return;
  }
  const ended = laneNames().every((n) => ["done", "died"].includes(state.lanes[n].phase));
  if (ended && state.busy === 0) {
    if (state.rung !== level.rung)
      setVerdict("refused", "No order of these moves wins on " + state.rung + ": " + level.why +
        " The books: " + booksText(b) + ".");
    else
      setVerdict("over", "Every request has answered and the books are exact (" + booksText(b) +
        "): press start and try another order.");
  }
}

/* The books in a sentence: one goods, or each of a cart level's two. */
function booksText(b) {
  const one = (g) => "sold " + g.sold + ", taken " + (g.initial - g.stock) + ", oversold " + g.oversold;
  if (!state.level.carts || !state.books2) return one(b);
  return "G1 " + one(b) + "; G2 " + one(state.books2);
}

/* A cart level's goods by name: G1 is the page's goods, G2 the next id. */
function goodsName(id) { return id === state.goods ? "G1" : id === state.goods + 1 ? "G2" : String(id); }

function winText(b) {
  if (state.level.id === "crash")
    return "A died holding the lock and B could not sell, a lease and more later: the goods are wedged until someone deletes the key.";
  if (state.level.id === "nested")
    return "A waited for its own lock and answered 503 lock_timeout, selling nothing.";
  if (state.level.id === "cache")
    return "C read " + state.lanes.C.stock + " through the cache, and the table holds " + b.stock +
      ": the cache says a stock that is gone, and will until its entry expires (60 s) or the next sale deletes it.";
  if (state.level.id === "deadlock")
    return "each cart held one lock and waited for the other's, both gave up after LOCK_WAIT_MS and answered 503 lock_timeout: neither sold, though the stock had room for both (" + booksText(b) + ").";
  return "sold " + b.sold + ", taken from the stock " + (b.initial - b.stock) + ": oversold " + b.oversold + ".";
}

function setVerdict(kind, text) {
  state.verdict = kind;
  document.body.dataset.verdict = kind;
  $("verdict").dataset.state = kind;
  $("verdict").textContent = text;
  if (kind !== "playing") log(null, text, "verdict");
}

/* Every replica answers (a crash level's replica may be starting again): 30 s at most. */
async function replicasUp() {
  for (let i = 0; i < 150; i++) {
    const all = await Promise.all([1, 2, 3].map((n) => call("GET", "/replica/" + n + "/api/replica")));
    if (all.every((r) => r.status === 200)) return true;
    $("status").textContent = "waiting for the replicas to answer";
    await sleep(200);
  }
  return false;
}

async function start() {
  state.playing = false;
  state.run++;
  $("start").disabled = true;
  await busy(async () => {
    if (!(await replicasUp())) { $("status").textContent = "a replica does not answer"; return; }
    state.goods = Date.now();
    for (let k = 0; k < (state.level.carts ? 2 : 1); k++) {
      const r = await call("POST", "/replica/3/api/admin/reset", { goods_id: state.goods + k, stock: STOCK });
      if (r.status !== 200) { $("status").textContent = "reset failed: " + r.status; return; }
    }
    state.t0 = Date.now();
    state.events = [];
    state.leases = [];
    state.books = null;
    state.books2 = null;
    state.holders = {};
    $("log").textContent = "";
    state.lanes = {};
    for (const n of laneNames())
      state.lanes[n] = { name: n, phase: "idle", point: null, id: null, status: null, error: null,
        sentAt: null, diedAt: null, answer: null, stock: null };
    buildLanes();
    state.playing = true;
    $("wait-lease").disabled = !!state.level.carts; /* a cart's locks are renewed: no lease runs out */
    $("goods").textContent = String(state.goods) + (state.level.carts ? " and " + (state.goods + 1) : "");
    $("status").textContent = "playing " + state.level.title + " on " + state.rung;
    setVerdict("playing", state.rung === state.level.rung
      ? "Playing: make the flaw happen."
      : "Playing on " + state.rung + ", a rung that fixes this flaw: try to win anyway.");
  });
  $("start").disabled = false;
}

function buildLanes() {
  const box = $("lanes");
  box.textContent = "";
  for (const n of laneNames()) {
    const cfg = laneCfg(n), div = document.createElement("div");
    div.className = "lane";
    div.id = "lane-" + n;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = n + " (svc-" + LANES[n] + ")";
    const st = document.createElement("span");
    st.className = "state";
    st.id = "state-" + n;
    const buttons = document.createElement("span");
    buttons.className = "buttons";
    for (const [what, label, fn] of [["send", "send", send], ["step", "step", step], ["finish", "run to its end", finish]]) {
      const b = document.createElement("button");
      b.id = what + "-" + n;
      b.textContent = label;
      b.addEventListener("click", () => fn(n));
      buttons.appendChild(b);
    }
    div.append(who, st, buttons);
    const hint = document.createElement("span");
    hint.className = "hint";
    hint.textContent = (cfg.cart
      ? "the cart: " + cfg.cart.map((k) => "G" + (k + 1)).join(" then ") + ", pausing " + CART_PAUSE_MS +
        " ms after its first lock; holds nowhere (runs to its answer)"
      : "holds at: " + (cfg.holds.length ? cfg.holds.join(", ") : "nowhere (runs to its answer)")) +
      (cfg.hint ? "; " + cfg.hint : "");
    div.appendChild(hint);
    box.appendChild(div);
  }
  render();
}

function render() {
  for (const n of Object.keys(state.lanes)) {
    const lane = state.lanes[n], el = $("lane-" + n);
    if (!el) continue;
    el.dataset.phase = lane.phase;
    el.dataset.point = lane.point || "";
    el.dataset.error = lane.error || "";
    el.dataset.status = lane.status === null ? "" : String(lane.status);
    let text = lane.phase;
    if (lane.phase === "held") text = "held at " + lane.point;
    if (lane.phase === "done") text = "answered " + lane.status + (lane.error ? " " + lane.error : "");
    if (lane.phase === "died") text = "its process died";
    $("state-" + n).textContent = text;
    $("send-" + n).disabled = !state.playing || lane.phase !== "idle";
    $("step-" + n).disabled = !state.playing || lane.phase !== "held";
    $("finish-" + n).disabled = !state.playing || lane.phase !== "held";
  }
}

/* One goods' figures, or two (a cart level: "G1 / G2"). */
function showBooks(b, b2) {
  const both = (f) => b2 ? f(b) + " / " + f(b2) : String(f(b));
  $("stock").textContent = both((g) => g.stock);
  $("taken").textContent = both((g) => g.initial - g.stock);
  $("sold").textContent = both((g) => g.sold);
  $("oversold").textContent = both((g) => g.oversold);
}

async function poll() {
  if (state.playing && state.goods !== 0) {
    const r = await call("GET", "/replica/3/api/stock/" + state.goods);
    if (r.status === 200 && r.body && !state.level.carts) showBooks(r.body);
    if (state.level.carts) {
      await pollCarts(r);
    } else if (REDIS_LOCKED.has(state.rung)) {
      const l = await call("GET", "/replica/3/api/lock/" + state.goods);
      if (l.status === 200 && l.body) {
        $("lock-name").textContent = l.body.lock;
        $("holder").textContent = l.body.held ? holderName(l.body) : "free";
        $("hold-count").textContent = l.body.held ? l.body.count : "-";
        $("ttl").textContent = l.body.held ? (l.body.ttl_ms >= 0 ? l.body.ttl_ms + " ms" : "none") : "-";
        $("fence").textContent = l.body.fence;
      }
      $("lock-note").textContent = "";
    } else if (STRING_LOCKED.has(state.rung)) {
      const l = await call("GET", "/replica/3/api/lab/lock/" + state.goods + "?mode=" + state.rung);
      if (l.status === 200 && l.body) {
        $("lock-name").textContent = l.body.lock;
        $("holder").textContent = !l.body.held ? "free" : l.body.value === "1" ? "someone (no owner: the value is 1)" : holderName({ owner: l.body.value });
        $("hold-count").textContent = "-";
        $("ttl").textContent = !l.body.held ? "-" : l.body.ttl_ms >= 0 ? l.body.ttl_ms + " ms" : "none: it never expires";
        $("fence").textContent = "-";
      }
      $("lock-note").textContent = "this rung's lock is a plain Redis string (its value is the owner's token, or 1): no hold count, no fencing token.";
    } else {
      $("lock-name").textContent = "(none)";
      for (const id of ["holder", "hold-count", "ttl", "fence"]) $(id).textContent = "-";
      $("lock-note").textContent = "this rung has no lock of its own: PostgreSQL's row lock keeps the sales apart.";
    }
  }
  setTimeout(poll, POLL_MS);
}

/* A cart level: both goods' books and both Redis locks (lock:goods:G1 / lock:goods:G2, the
 * redis rung's locks, which multi-naive takes too); a lock that passes to a lane's replica is
 * marked on that lane's timeline ("lock G1"). */
async function pollCarts(r) {
  const r2 = await call("GET", "/replica/3/api/stock/" + (state.goods + 1));
  if (r.status === 200 && r.body && r2.status === 200 && r2.body) showBooks(r.body, r2.body);
  const locks = await Promise.all([0, 1].map((k) => call("GET", "/replica/3/api/lock/" + (state.goods + k))));
  if (!locks.every((l) => l.status === 200 && l.body)) return;
  const run = state.run;
  const names = locks.map((l) => l.body.held ? holderName(l.body) : "free");
  const both = (f) => locks.map((l) => l.body.held ? f(l.body) : "-").join(" / ");
  $("lock-name").textContent = locks.map((l) => l.body.lock).join(" / ");
  $("holder").textContent = names.join(" / ");
  $("hold-count").textContent = both((l) => l.count);
  $("ttl").textContent = both((l) => l.ttl_ms >= 0 ? l.ttl_ms + " ms" : "none");
  $("fence").textContent = locks.map((l) => l.body.fence).join(" / ");
  $("lock-note").textContent = "G1 / G2: each goods' Redis lock, taken " +
    (state.rung === "redis" ? "in ascending goods id (G1 first) by every cart." : "in the cart's order.");
  if (run !== state.run || !state.playing) return;
  names.forEach((who, k) => {
    const key = "G" + (k + 1);
    if (state.holders[key] === who) return;
    state.holders[key] = who;
    const lane = Object.keys(LANES).find((n) => "svc-" + LANES[n] === who && state.lanes[n]);
    if (lane) log(lane, "holds the lock of " + key, "lock");
  });
}

/* The holder's name: the lane whose replica's process id starts the owner. */
const processIds = {};
function holderName(lock) {
  const pid = (lock.owner || "").split(":")[0];
  for (const n of Object.keys(processIds)) if (processIds[n] === pid) return "svc-" + n;
  return lock.owner;
}
async function learnProcessIds() {
  for (const n of [1, 2, 3]) {
    const r = await call("GET", "/replica/" + n + "/api/replica");
    if (r.status === 200 && r.body) processIds[n] = r.body.process_id;
  }
}

/* ---- the timeline: a lane per replica, a mark per event ---- */

function drawTimeline() {
  const svg = $("timeline"), ns = "http://www.w3.org/2000/svg";
  svg.textContent = "";
  const names = laneNames(), left = 70, width = 810;
  const tmax = Math.max(6000, ...state.events.map((e) => e.t + 1000));
  const x = (t) => left + (t / tmax) * width;
  const y = (n) => 30 + names.indexOf(n) * 50;
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(ns, tag);
    for (const k of Object.keys(attrs)) el.setAttribute(k, attrs[k]);
    if (text) el.textContent = text;
    svg.appendChild(el);
    return el;
  };
  for (const n of names) {
    add("line", { x1: left, x2: left + width, y1: y(n), y2: y(n), stroke: "#ccc" });
    add("text", { x: 5, y: y(n) + 4, "font-size": 12 }, n + " svc-" + LANES[n]);
  }
  for (const t of state.leases)
    add("line", { x1: x(t), x2: x(t), y1: 10, y2: 160, stroke: "#d80", "stroke-dasharray": "4 3" });
  const marks = {}; /* per lane: labels alternate above and below, so close points stay legible */
  for (const e of state.events) {
    if (!e.lane) continue;
    const cx = x(e.t), cy = y(e.lane);
    if (e.kind === "send") add("rect", { x: cx - 4, y: cy - 4, width: 8, height: 8, fill: "#58a" });
    else if (e.kind === "point") {
      add("circle", { cx, cy, r: 4, fill: "#555" });
      marks[e.lane] = (marks[e.lane] || 0) + 1;
      add("text", { x: cx + 3, y: marks[e.lane] % 2 ? cy - 7 : cy + 16, "font-size": 10 }, e.text.replace("held at ", ""));
    } else if (e.kind === "lock") {
      add("circle", { cx, cy, r: 4, fill: "#a5c" });
      marks[e.lane] = (marks[e.lane] || 0) + 1;
      add("text", { x: cx + 3, y: marks[e.lane] % 2 ? cy - 7 : cy + 16, "font-size": 10 }, e.text.replace("holds the ", ""));
    } else if (e.kind === "ok" || e.kind === "err")
      add("path", { d: `M${cx} ${cy - 6}L${cx + 6} ${cy}L${cx} ${cy + 6}L${cx - 6} ${cy}Z`, fill: e.kind === "ok" ? "#2a2" : "#c33" });
    else if (e.kind === "dead") add("text", { x: cx - 5, y: cy + 5, "font-size": 14 }, "\u2716");
  }
  svg.dataset.marks = String(state.events.length);
}

/* ---- wiring ---- */

function chooseLevel(id, rung) {
  state.level = LEVELS.find((l) => l.id === id) || LEVELS[0];
  const sel = $("rung");
  sel.textContent = "";
  for (const r of [state.level.rung, ...state.level.fixes]) {
    const o = document.createElement("option");
    o.value = r;
    o.textContent = r + (r === state.level.rung ? " (the flaw)" : " (a fix)");
    sel.appendChild(o);
  }
  state.rung = rung && [state.level.rung, ...state.level.fixes].includes(rung) ? rung : state.level.rung;
  sel.value = state.rung;
  $("level").value = state.level.id;
  $("title").textContent = state.level.title + " on " + state.rung;
  $("goal").textContent = state.level.goal;
  $("moves").textContent = state.level.moves;
  state.playing = false;
  state.lanes = {};
  state.books2 = null;
  state.holders = {};
  $("lanes").textContent = "";
  $("wait-lease").disabled = true;
  setVerdict("idle", "Press start.");
  state.events = [];
  drawTimeline();
}

function init() {
  for (const l of LEVELS) {
    const o = document.createElement("option");
    o.value = l.id;
    o.textContent = l.title + " (" + l.rung + ")";
    $("level").appendChild(o);
  }
  const q = new URLSearchParams(location.search);
  chooseLevel(q.get("level") || LEVELS[0].id, q.get("rung"));
  $("level").addEventListener("change", () => chooseLevel($("level").value));
  $("rung").addEventListener("change", () => chooseLevel(state.level.id, $("rung").value));
  $("start").addEventListener("click", start);
  $("wait-lease").addEventListener("click", waitLease);
  document.body.dataset.busy = "0";
  learnProcessIds();
  poll();
}

init();
