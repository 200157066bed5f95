/*
 * live.js - the live page: polls the service five times a second and draws what it says.
 *
 * Sources, all read-only JSON of the service (README: "The live page"):
 *   GET /api/stock/N             the books: initial, stock, sold, orders, oversold
 *   GET /api/lock/N              who holds lock:goods:N in Redis now (owner, count, TTL, token)
 *   GET /api/cache/N             what the product page's cache holds for N (cache:goods:N), a
 *                                look that never fills it: shown beside the stock, red when
 *                                the two differ (a stale cache, docs/course/26-cache-aside.md)
 *   GET /replica/R/api/replica   replica R's own view (nginx routes it to that replica): its
 *                                name, the process id its lock owners start with, its counters
 * The holder is named by matching the owner's process id with a replica's. Nothing is
 * guessed in the browser: every number shown is one the service reported.
 */
"use strict";

const POLL_MS = 200;
const HISTORY = 300; /* points kept: 60 s at 5 a second */
const MAX_REPLICAS = 8;

const state = {
  goods: 1,
  books: [],       /* {t, sold, taken, mode} */
  holders: [],     /* {t, who} */
  seen: new Set(), /* every holder named so far (for the browser test, and the curious) */
  replicas: [],    /* {n, name, pid, last: {t, answers}, rate} */
};

/* $, the page's error count and the lock's figures: common.js. */

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}

async function discoverReplicas() {
  const found = [];
  for (let n = 1; n <= MAX_REPLICAS; n++) {
    try {
      const v = await getJSON("/replica/" + n + "/api/replica");
      if (!v.instance) break;
      found.push({ n, name: v.instance, pid: v.process_id, view: v, rate: 0, last: null });
    } catch (e) {
      break; /* the first replica number nginx does not route ends the list */
    }
  }
  state.replicas = found;
}

function sumValues(o) { return Object.values(o || {}).reduce((a, b) => a + b, 0); }

/* The q-quantile of a cumulative histogram, as "<= bound" text. */
function quantile(wait, q) {
  if (!wait || wait.count === 0) return "-";
  const want = q * wait.count;
  for (let i = 0; i < wait.le.length; i++)
    if (wait.cumulative[i] >= want) return "\u2264 " + fmtSeconds(wait.le[i]);
  return "> " + fmtSeconds(wait.le[wait.le.length - 1]);
}

function fmtSeconds(s) { return s < 1 ? (s * 1000).toFixed(s < 0.001 ? 1 : 0) + " ms" : s + " s"; }

/* The mode that sold most since the last poll, over every replica: labels the chart. */
function modeNow(prev, next) {
  let best = null, bestN = 0;
  if (!prev) return null; /* the first poll has nothing to compare with */
  for (const [mode, outcomes] of Object.entries(next)) {
    const before = prev && prev[mode] ? prev[mode].deducted : 0;
    const n = outcomes.deducted - before;
    if (n > bestN) { best = mode; bestN = n; }
  }
  return best;
}

let lastDeductions = null;

async function poll() {
  const g = state.goods;
  const now = Date.now() / 1000;
  const [books, lock, cache, views] = await Promise.all([
    getJSON("/api/stock/" + g).catch(() => null),
    getJSON("/api/lock/" + g).catch(() => null),
    getJSON("/api/cache/" + g).catch(() => null),
    Promise.all(state.replicas.map((r) =>
      getJSON("/replica/" + r.n + "/api/replica").catch(() => null))),
  ]);

  const all = {};
  views.forEach((v, i) => {
    const r = state.replicas[i];
    if (!v) { r.view = null; return; }
    const answers = sumValues(v.metrics.deduct_answers);
    if (r.last) r.rate = (answers - r.last.answers) / Math.max(now - r.last.t, 0.001);
    r.last = { t: now, answers };
    r.view = v;
    r.pid = v.process_id;
    for (const [mode, outcomes] of Object.entries(v.metrics.deductions)) {
      all[mode] = all[mode] || { deducted: 0 };
      all[mode].deducted += outcomes.deducted;
    }
  });
  const mode = modeNow(lastDeductions, all);
  lastDeductions = all;
  /* How the primary replicates commits, as the first replica that could ask it says. */
  const pg = views.find((v) => v && v.pg_replication && v.pg_replication !== "unknown");
  $("pg-replication").textContent = pg ? pg.pg_replication : "unknown";

  if (books) {
    const taken = books.initial - books.stock;
    state.books.push({ t: now, sold: books.sold, taken, mode });
    if (state.books.length > HISTORY) state.books.shift();
    for (const k of ["initial", "stock", "sold", "orders", "oversold"]) $(k).textContent = books[k];
    $("taken").textContent = taken;
  }
  if (cache) {
    $("cached").textContent = cache.cached ? cache.stock : "-";
    $("cached").dataset.stale = String(!!(cache.cached && books && cache.stock !== books.stock));
  }
  if (lock) {
    const holder = !lock.held ? null
      : (state.replicas.find((r) => r.pid === lock.process_id) || { name: "another process" }).name;
    $("lock-name").textContent = lock.lock;
    $("holder").textContent = holder || "free";
    $("holder").dataset.holder = holder || "";
    $("hold-count").textContent = lock.held ? lock.count : "-";
    $("ttl").textContent = lock.held ? lock.ttl_ms + " ms" : "-";
    $("fence").textContent = lock.fence;
    state.holders.push({ t: now, who: holder });
    if (holder) state.seen.add(holder);
    $("holder").dataset.seen = [...state.seen].join(" ");
    if (state.holders.length > HISTORY) state.holders.shift();
  }
  $("status").textContent = "updated " + new Date().toLocaleTimeString() +
    (mode ? ", selling in mode " + mode : "");
  drawReplicas();
  drawBooks();
  drawStrip();
}

function drawReplicas() {
  const rows = state.replicas.map((r) => {
    const m = r.view ? r.view.metrics : null;
    const a = m ? m.deduct_answers : {};
    return "<tr><td>" + r.name + "</td><td>" + r.rate.toFixed(0) + "</td><td>" + (a["200"] || 0) +
      "</td><td>" + (a["409"] || 0) + "</td><td>" + (a["503"] || 0) + "</td><td>" +
      quantile(m && m.lock_wait, 0.5) + "</td><td>" + quantile(m && m.lock_wait, 0.99) + "</td></tr>";
  });
  $("replica-rows").innerHTML = rows.join("");
}

const SVG = "http://www.w3.org/2000/svg";
function el(name, attrs) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function drawBooks() {
  const svg = $("chart-books");
  svg.replaceChildren();
  const pts = state.books;
  if (pts.length < 2) return;
  /* Counted from the window's first point: what was sold, and what the stock gave up, since. */
  const t0 = pts[0].t, t1 = pts[pts.length - 1].t, s0 = pts[0].sold, k0 = pts[0].taken;
  const top = Math.max(1, ...pts.map((p) => Math.max(p.sold - s0, p.taken - k0)));
  const x = (t) => 600 * (t - t0) / Math.max(t1 - t0, 0.001);
  const y = (v) => 195 - 170 * v / top;
  /* A band per stretch of one mode, labelled. */
  let start = 0;
  for (let i = 1; i <= pts.length; i++) {
    if (i < pts.length && pts[i].mode === pts[start].mode) continue;
    if (pts[start].mode) {
      svg.append(el("rect", { x: x(pts[start].t), y: 0, width: Math.max(x(pts[i - 1].t) - x(pts[start].t), 1),
        height: 200, fill: "#e8edf3" }));
      const label = el("text", { x: x(pts[start].t) + 3, y: 14, "font-size": 12, fill: "#456" });
      label.textContent = pts[start].mode;
      svg.append(label);
    }
    start = i;
  }
  /* The stock's line is drawn wide and pale under the sales' line: where they are one, the
   * red runs inside the blue; oversell pulls the red out of it. */
  for (const [key, color, width] of [["taken", "#9bd", 6], ["sold", "#c33", 2]]) {
    const base = key === "sold" ? s0 : k0;
    const d = pts.map((p, i) => (i ? "L" : "M") + x(p.t).toFixed(1) + "," + y(p[key] - base).toFixed(1)).join("");
    svg.append(el("path", { d, fill: "none", stroke: color, "stroke-width": width, class: "series-" + key,
      "data-points": pts.length }));
  }
}

function drawStrip() {
  const svg = $("strip");
  svg.replaceChildren();
  const pts = state.holders;
  if (pts.length < 2) return;
  const colors = ["#36c", "#c63", "#393", "#939", "#996", "#369", "#c36", "#666"];
  const w = 600 / pts.length;
  pts.forEach((p, i) => {
    if (!p.who) return;
    const k = state.replicas.findIndex((r) => r.name === p.who);
    svg.append(el("rect", { x: i * w, y: 0, width: w + 0.5, height: 30, fill: k >= 0 ? colors[k % 8] : "#aaa" }));
  });
}

/* The last report of loadtest/run (make demo): its Markdown table, as a table, and its chart.
 * Read once at start: a report is written at the end of a run. */
async function showReport() {
  let text;
  try {
    const r = await fetch("/live/results/latest/table-only.md", { cache: "no-store" });
    if (!r.ok) return; /* none yet: the placeholder text stays */
    text = await r.text();
  } catch (e) {
    return;
  }
  const rows = text.split("\n").filter((l) => l.startsWith("|") && !/^\|[-|: ]+\|$/.test(l));
  const cells = (l) => l.slice(1, -1).split("|").map((c) => c.trim());
  const table = document.createElement("table");
  rows.forEach((l, i) => {
    const tr = table.insertRow();
    for (const c of cells(l)) {
      const cell = document.createElement(i === 0 ? "th" : "td");
      cell.textContent = c;
      tr.append(cell);
    }
  });
  $("report").replaceChildren(table);
  const img = $("report-chart");
  img.src = "/live/results/latest/chart.svg";
  img.onload = () => { img.hidden = false; };
  img.onerror = () => { img.hidden = true; };
}

async function main() {
  const fromUrl = Number(new URLSearchParams(location.search).get("goods"));
  if (fromUrl >= 1) { state.goods = fromUrl; $("goods").value = fromUrl; }
  $("goods").addEventListener("change", () => {
    const v = Number($("goods").value);
    if (v >= 1) { state.goods = v; state.books = []; state.holders = []; }
  });
  await discoverReplicas();
  showReport();
  for (;;) {
    const started = Date.now();
    try { await poll(); } catch (e) { console.error(e); }
    await new Promise((r) => setTimeout(r, Math.max(0, POLL_MS - (Date.now() - started))));
  }
}

main();
