// The console: sign-in, hash routing and the refresh loop. Pages render into <main>; each
// returns { refresh } and is refreshed every few seconds while the tab is visible.

import { api, apiKey, explain, forgetApiKey, onUnauthenticated, setApiKey } from "./api.js";
import { replace, h, on } from "./dom.js";
import { instant, setTimeZone, timeZone } from "./format.js";
import { deadPage } from "./pages/dead.js";
import { jobPage } from "./pages/job.js";
import { jobsPage } from "./pages/jobs.js";
import { runPage } from "./pages/run.js";
import { runsPage } from "./pages/runs.js";

const REFRESH_MS = 5000;

const main = document.getElementById("main");
const signIn = document.getElementById("sign-in");
const keyForm = document.getElementById("key-form");
const keyInput = document.getElementById("key");
const keyError = document.getElementById("key-error");
const signOut = document.getElementById("sign-out");
const status = document.getElementById("status");
const notice = document.getElementById("notice");
const zoneToggle = document.getElementById("zone");

const routes = [
  [/^#\/jobs\/([^/?]+)$/, jobPage, ["id"]],
  [/^#\/runs\/([^?]+)$/, runPage, ["key"]],
  [/^#\/runs$/, runsPage, []],
  [/^#\/dead-letters$/, deadPage, []],
  [/^#\/jobs$/, jobsPage, []],
];

let current = null;
let refreshing = false;
let signedIn = false;

const ctx = {
  now: () => Date.now(),
  go(hash) {
    if (window.location.hash === hash) show();
    else window.location.hash = hash;
  },
  /** A message above the page (role=alert), kept until the next one or a dismissal. */
  notice(message, kind = "ok", ...extra) {
    replace(notice, h("span", null, message, ...extra), h("button", { type: "button", class: "dismiss", "aria-label": "dismiss" }, "×"));
    notice.className = `notice ${kind}`;
    notice.dataset.kind = kind;
    notice.hidden = false;
    on(notice.querySelector(".dismiss"), "click", () => { notice.hidden = true; });
  },
};

function route() {
  const hash = window.location.hash || "#/jobs";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  for (const [pattern, page, names] of routes) {
    const match = pattern.exec(path);
    if (match) {
      names.forEach((name, index) => params.set(name, decodeURIComponent(match[index + 1])));
      const section = page === deadPage ? "dead" : page === runsPage || page === runPage ? "runs" : "jobs";
      return { page, params, section };
    }
  }
  return null;
}

async function refresh() {
  if (!current || refreshing || !signedIn) return;
  refreshing = true;
  try {
    await current.refresh();
    status.textContent = `updated ${instant(new Date(Math.floor(Date.now() / 1000) * 1000).toISOString()).slice(11)}`;
    status.classList.remove("stale");
  } catch (error) {
    status.textContent = `not updated: ${explain(error)}`;
    status.classList.add("stale");
  } finally {
    refreshing = false;
  }
}

function show() {
  if (!signedIn) return;
  const target = route();
  if (!target) {
    window.location.hash = "#/jobs";
    return;
  }
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", link.dataset.nav === target.section);
  }
  current = target.page(main, target.params, ctx);
  // "?refresh=off" in the hash: the page is read once and on each action, never by the timer.
  current.auto = target.params.get("refresh") !== "off";
  refreshing = false;
  refresh();
}

function showSignIn(message) {
  signedIn = false;
  current = null;
  main.hidden = true;
  signIn.hidden = false;
  signOut.hidden = true;
  keyError.textContent = message || "";
  keyInput.value = "";
  keyInput.focus();
}

function enter() {
  signedIn = true;
  signIn.hidden = true;
  main.hidden = false;
  signOut.hidden = !apiKey();
  show();
}

/** One call that needs a caller: 401 means a key is wanted (local mode) or refused. */
async function probe() {
  try {
    await api.listJobs({ limit: 1 });
    return null;
  } catch (error) {
    return error;
  }
}

onUnauthenticated(() => {
  if (signedIn) {
    forgetApiKey();
    showSignIn("The API refused the key (401): sign in again.");
  }
});

on(keyForm, "submit", async (event) => {
  event.preventDefault();
  const key = keyInput.value.trim();
  if (!key) return;
  setApiKey(key);
  keyInput.value = "";
  const error = await probe();
  if (error && error.status === 401) {
    forgetApiKey();
    showSignIn("That key was refused (401). Local mode prints its keys when it starts.");
  } else if (error) {
    showSignIn(`The API could not be reached: ${explain(error)}`);
  } else {
    enter();
  }
});

/** The toggle names the zone instants are shown in; a click switches it and redraws. */
function showZone() {
  const local = timeZone() === "local";
  zoneToggle.textContent = local ? "Local time" : "UTC";
  zoneToggle.title = local ? "times in this browser's zone: click for UTC" : "times in UTC: click for this browser's zone";
  zoneToggle.setAttribute("aria-pressed", local ? "true" : "false");
}

on(zoneToggle, "click", () => {
  setTimeZone(timeZone() === "local" ? "utc" : "local");
  showZone();
  show();
});
showZone();

on(signOut, "click", () => {
  forgetApiKey();
  showSignIn("Signed out: the key is forgotten.");
});

window.addEventListener("hashchange", () => {
  notice.hidden = true; // a notice is about the page it was given on
  show();
});
setInterval(() => {
  if (!document.hidden && current && current.auto) refresh();
}, REFRESH_MS);
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});

(async () => {
  const error = await probe();
  if (error && error.status === 401) showSignIn();
  else if (error) {
    showSignIn(`The API could not be reached: ${explain(error)}`);
  } else enter();
})();
