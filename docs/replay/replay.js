// replay.js - plays an events file of the course step by step (docs/replay/index.html).
//
// The events are loadtest/timeline's input (its header describes them): the driver's sends,
// answers and faults, each replica's trace of each request (its points), the lock key's and
// the stock row's samples. ROWS (rows.js, made by scripts/docs.sh --write from every committed
// docs/course/timelines/*.events and docs/course/schematics/*.events) holds them; a file
// opened by hand is read the same way. A step is one event that changes something: a send, a
// point, an answer, a fault, the lock changing hands or vanishing, the stock row changing. The
// books after a step are the stock row's: its last sample when the row has samples, else the
// traced commits (a schematic's). At the last step the page also shows the books the run
// reported (the events' "books" line).
//
// ?selftest=1 plays every row to its end and writes, in <pre id="selftest">, one line per row
// ("ok ROW" or "FAIL ROW: why") and a last line "done N rows, N failed, N errors", for
// tests/replay.sh (headless Chromium).
"use strict";

const $ = (id) => document.getElementById(id);
let errors = 0;
window.addEventListener("error", () => { errors++; document.body.dataset.errors = String(errors); });

// ---- reading ----

function parse(text) {
  const r = { mode: "", scenario: "", schematic: "", reset: 100, books: null, reqs: [], byName: {}, events: [], forget: null };
  let seq = 0;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line) continue;
    const f = line.split(/\s+/);
    const ms = Number(f[1]);
    switch (f[0]) {
      case "row": r.mode = f[1]; r.scenario = f[2]; break;
      case "schematic": r.schematic = line.replace(/^schematic\s+/, ""); break;
      case "reset": r.reset = Number(f[1]); break;
      case "books": r.books = { sold: Number(f[1]), taken: Number(f[2]), oversold: Number(f[3]) }; break;
      case "send": {
        const q = { name: f[2], replica: f[3], fault: f[4] === "-" ? "" : f[4] };
        r.reqs.push(q); r.byName[q.name] = q;
        r.events.push({ ms, seq: seq++, kind: "send", name: f[2] });
        break;
      }
      case "answer": r.events.push({ ms, seq: seq++, kind: "answer", name: f[2], status: f[3], error: f[4] }); break;
      case "fault": r.events.push({ ms, seq: seq++, kind: "fault", text: line.replace(/^fault\s+\S+\s+/, "") }); break;
      case "forget": r.forget = ms; r.events.push({ ms, seq: seq++, kind: "forget" }); break;
      case "started": r.events.push({ ms, seq: seq++, kind: "started", name: f[2] }); break;
      case "point":
        r.events.push({ ms, seq: seq++, kind: "point", name: f[2], point: f[3], held: Number(f[4]), stock: f[5], fence: f[6] });
        break;
      case "served": r.events.push({ ms, seq: seq++, kind: "served", name: f[2], status: f[3], outcome: f[4] }); break;
      case "lock": r.events.push({ ms, seq: seq++, kind: "lock", pttl: Number(f[2]), holder: f[3] || "" }); break;
      // another key drawn beside the lock's (Redlock's other nodes, a cart's second goods)
      case "lockn": r.events.push({ ms, seq: seq++, kind: "lock", key: f[2], pttl: Number(f[3]), holder: f[4] || "" }); break;
      case "db": {
        const p = (f[2] || "").split("|");
        r.events.push({ ms, seq: seq++, kind: "db", stock: Number(p[0]), orders: Number(p[1]), lockrow: p[3] || "" });
        break;
      }
      default: break; // order, locklane and what a later version adds: not steps
    }
  }
  r.events.sort((a, b) => a.ms - b.ms || a.seq - b.seq);
  r.sampled = r.events.some((e) => e.kind === "db");
  return r;
}

const POINT = { entered: "takes the lock (enters its section)", begun: "BEGIN", checked: "checks it still holds",
  committed: "COMMIT", release: "gives the lock back", "between-locks": "owns its first lock, asks for its second" };

// The steps of a row: each event that changes something, with the state after it.
function steps(r) {
  const state = { lanes: {}, lock: "no key", keys: {}, stock: r.reset, orders: 0, written: {} };
  for (const q of r.reqs) state.lanes[q.name] = "not sent";
  const out = [];
  const lastLock = {};
  let lastDb = "";
  const lockText = () => [state.lock, ...Object.keys(state.keys).sort().map((k) => k.replace(/-/g, " ") + ": " + state.keys[k])].join("; ");
  const push = (e, text) => out.push({ ms: e.ms, text, lanes: { ...state.lanes }, lock: lockText(), stock: state.stock, orders: state.orders });
  for (const e of r.events) {
    const who = e.name ? e.name + ": " : "";
    if (e.kind === "send") {
      const q = r.byName[e.name];
      state.lanes[e.name] = "sent to svc-" + q.replica;
      push(e, who + "sent to svc-" + q.replica + (q.fault ? " with X-Fault: " + q.fault : ""));
    } else if (e.kind === "started") {
      state.lanes[e.name] = "at its replica";
      push(e, who + "reaches svc-" + r.byName[e.name].replica);
    } else if (e.kind === "point") {
      let t = POINT[e.point] || e.point.replace(/-/g, " ");
      if (e.point === "read") t = "reads the stock: " + e.stock;
      if (e.point === "written") { t = "writes " + e.stock + " (not committed)"; state.written[e.name] = Number(e.stock); }
      if (e.point === "entered" && e.fence !== "-") t += ", token " + e.fence;
      if (e.held > 0) t += ", held there " + e.held + " ms";
      state.lanes[e.name] = t;
      if (e.point === "committed" && !r.sampled && e.name in state.written) {
        if (r.forget === null || e.ms > r.forget) { state.stock = state.written[e.name]; state.orders++; }
      }
      push(e, who + t);
    } else if (e.kind === "served") {
      state.lanes[e.name] = "its replica answers " + e.status;
      push(e, who + "svc-" + r.byName[e.name].replica + " answers " + e.status + " (" + e.outcome + ")");
    } else if (e.kind === "answer") {
      state.lanes[e.name] = e.status === "000" ? "no answer: its replica died" : "answered " + e.status + (e.error !== "-" ? " " + e.error : "");
      push(e, who + state.lanes[e.name]);
    } else if (e.kind === "fault") {
      push(e, /^the driver/.test(e.text) ? e.text : "the driver: " + e.text);
    } else if (e.kind === "forget") {
      state.stock = r.reset; state.orders = 0;
      push(e, "the database forgets every sale before this moment");
    } else if (e.kind === "lock") {
      const now = e.pttl === -2 ? "no key" : "held (" + (e.holder || "?") + ")" + (e.pttl === -1 ? ", no expiry" : "");
      const k = e.key || "";
      if (now !== lastLock[k]) {
        lastLock[k] = now;
        if (k) state.keys[k] = now; else state.lock = now;
        push(e, (k ? "the key of " + k.replace(/-/g, " ") : "the lock key") + ": " + now + (e.pttl > 0 ? ", lease " + e.pttl + " ms left" : ""));
      }
    } else if (e.kind === "db") {
      const now = e.stock + "/" + e.orders + "/" + e.lockrow;
      if (now !== lastDb) {
        lastDb = now; state.stock = e.stock; state.orders = e.orders;
        if (e.lockrow) state.lock = "lock row owned by " + e.lockrow;
        push(e, "the stock row: stock " + e.stock + ", orders " + e.orders + (e.lockrow ? "; lock row: " + e.lockrow : ""));
      }
    }
  }
  return out;
}

// ---- showing ----

let row = null, list = [], at = 0, timer = null;

function books(s, reset) {
  const taken = reset - s.stock;
  return { sold: s.orders, taken, oversold: s.orders - taken };
}

function show() {
  const s = list[at];
  document.body.dataset.step = String(at);
  document.body.dataset.steps = String(list.length);
  $("position").textContent = list.length ? `step ${at + 1} of ${list.length} (${s.ms} ms)` : "no steps";
  const tb = $("lanes");
  tb.textContent = "";
  for (const q of row.reqs) {
    const tr = document.createElement("tr");
    for (const [i, v] of [q.name, "svc-" + q.replica, q.fault || "-", s ? s.lanes[q.name] : ""].entries()) {
      const td = document.createElement("td");
      td.textContent = v;
      if (i === 0) td.className = "lane-" + q.name;
      tr.appendChild(td);
    }
    tb.appendChild(tr);
  }
  $("lock").textContent = s ? s.lock : "-";
  const b = s ? books(s, row.reset) : { sold: 0, taken: 0, oversold: 0 };
  $("books").textContent = `the books: sold ${b.sold}, the stock gave up ${b.taken}, oversold ${b.oversold} (stock ${s ? s.stock : row.reset})`;
  $("books").className = b.oversold > 0 ? "bad" : "";
  $("final").textContent = at === list.length - 1 && row.books
    ? `as the run reported them: sold ${row.books.sold}, taken ${row.books.taken}, oversold ${row.books.oversold}` : "";
  const st = $("steps");
  [...st.children].forEach((d, i) => { d.className = i < at ? "done" : (i === at ? "now" : ""); });
  if (st.children[at]) st.children[at].scrollIntoView({ block: "nearest" });
}

function load(name, text, drawing) {
  row = parse(text);
  list = steps(row);
  at = 0;
  const st = $("steps");
  st.textContent = "";
  for (const s of list) {
    const d = document.createElement("div");
    d.textContent = s.ms + " ms  " + s.text;
    st.appendChild(d);
  }
  $("drawing").textContent = "";
  if (drawing) {
    const img = document.createElement("img");
    img.src = drawing;
    img.alt = name;
    $("drawing").appendChild(img);
  }
  document.body.dataset.row = name;
  show();
}

function go(n) { at = Math.max(0, Math.min(list.length - 1, n)); show(); }

function choose(i) {
  const r = ROWS[i];
  load(r.name, r.events, "../course/" + r.name.replace(/\.events$/, ".svg"));
}

function init() {
  ROWS.forEach((r, i) => {
    const o = document.createElement("option");
    o.value = String(i);
    o.textContent = r.name.replace(/\.events$/, "");
    $("row").appendChild(o);
  });
  $("row").addEventListener("change", () => choose(Number($("row").value)));
  $("first").addEventListener("click", () => go(0));
  $("prev").addEventListener("click", () => go(at - 1));
  $("next").addEventListener("click", () => go(at + 1));
  $("last").addEventListener("click", () => go(list.length - 1));
  $("play").addEventListener("click", () => {
    if (timer) { clearInterval(timer); timer = null; $("play").textContent = "play"; return; }
    $("play").textContent = "pause";
    timer = setInterval(() => {
      if (at >= list.length - 1) { clearInterval(timer); timer = null; $("play").textContent = "play"; return; }
      go(at + 1);
    }, 700);
  });
  $("file").addEventListener("change", () => {
    const f = $("file").files[0];
    if (!f) return;
    const rd = new FileReader();
    rd.onload = () => load(f.name, String(rd.result), "");
    rd.readAsText(f);
  });
  const q = new URLSearchParams(location.search);
  const want = q.get("row");
  const i = Math.max(0, ROWS.findIndex((r) => r.name.includes(want || "\u0000")));
  $("row").value = String(i);
  choose(i);
  if (q.get("selftest")) selftest();
}

// Every row played to its end through the page's own buttons; its books at the end against
// the run's. A row that sells several goods (a cart's) reports the books of all of them,
// while its probe watched one: there the played books must not exceed the reported ones.
function selftest() {
  const lines = [];
  let failed = 0;
  ROWS.forEach((r, i) => {
    try {
      $("row").value = String(i);
      $("row").dispatchEvent(new Event("change"));
      let n = 0;
      $("first").click();
      while (Number(document.body.dataset.step) < list.length - 1 && n++ < 10000) $("next").click();
      if (list.length === 0) throw new Error("no steps");
      if (Number(document.body.dataset.step) !== list.length - 1) throw new Error("did not reach its last step");
      const b = books(list[list.length - 1], row.reset), rep = row.books;
      if (!rep) throw new Error("no books line");
      const carts = row.events.some((e) => e.point === "between-locks") || row.scenario === "deadlock";
      const same = b.sold === rep.sold && b.taken === rep.taken && b.oversold === rep.oversold;
      const within = b.sold <= rep.sold && b.taken <= rep.taken;
      if (!(carts ? within : same))
        throw new Error(`books played sold ${b.sold} taken ${b.taken} oversold ${b.oversold}, reported ${rep.sold} ${rep.taken} ${rep.oversold}`);
      lines.push("ok " + r.name + " (" + list.length + " steps)");
    } catch (e) {
      failed++;
      lines.push("FAIL " + r.name + ": " + e.message);
    }
  });
  lines.push(`done ${ROWS.length} rows, ${failed} failed, ${errors} errors`);
  const pre = document.createElement("pre");
  pre.id = "selftest";
  pre.textContent = lines.join("\n");
  document.body.appendChild(pre);
}

init();
