/*
 * common.js - what the live page (web/index.html, served at /live/) and the lab
 * (web/lab/index.html, at /lab/, which loads this file from /live/) share, loaded before each
 * page's own script:
 *   $(id)            the element of that id;
 *   the error count  every error of the page itself (an uncaught one, an unhandled rejection,
 *                    what it reports to the console) is counted, shown in #errors and set as
 *                    data-errors on #errors and on <body>: the browser tests read it, and a
 *                    page that works counts none;
 *   the lock's figures  holder, hold count, lease left, fencing token: made here, into each
 *                    element marked data-lock-figures, so that the ids both pages' scripts
 *                    (and the tests) read are the same on both.
 */
"use strict";

function $(id) { return document.getElementById(id); }

let pageErrors = 0;

function countError() {
  pageErrors++;
  document.body.dataset.errors = String(pageErrors);
  $("errors").dataset.errors = String(pageErrors);
  $("errors").textContent = pageErrors + " error(s) on this page";
}
window.addEventListener("error", countError);
window.addEventListener("unhandledrejection", countError);
/* What the page itself reports to the console counts too. */
const consoleError = console.error.bind(console);
console.error = (...args) => { countError(); consoleError(...args); };

/* [label, id] of each figure of the lock, in the order shown. */
const LOCK_FIGURES = [
  ["holder", "holder"], ["hold count", "hold-count"], ["lease left", "ttl"],
  ["fencing token", "fence"],
];

for (const box of document.querySelectorAll("[data-lock-figures]")) {
  for (const [label, id] of LOCK_FIGURES) {
    const row = document.createElement("div");
    const name = document.createElement("span");
    const value = document.createElement("span");
    name.className = "label";
    name.textContent = label;
    value.id = id;
    value.textContent = "-";
    row.append(name, value);
    box.append(row);
  }
}
