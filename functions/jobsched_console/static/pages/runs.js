// Runs across jobs (GET /v1/runs): the tenant's runs of every job, newest scheduled first,
// filtered by state chips, job, type, trigger, error class and a time range. The filters
// live in the page's address (#/runs?state=DEAD&since=1h), so a link shows the same runs.

import { api } from "../api.js";
import { h, on, replace } from "../dom.js";
import { instant, relative, skipReason, zoneLabel } from "../format.js";
import { Pager, badge, filterInput, filterSelect, jobLink, loadJobs, runLink } from "./common.js";

const STATES = ["PENDING", "QUEUED", "LEASED", "RETRY_WAIT", "SUCCEEDED", "DEAD", "SKIPPED", "CANCELLED"];
const TRIGGERS = ["", "schedule", "manual", "backfill"];
// "since" as the address keeps it: relative, so a link opened later shows the same window.
const SINCE = [["", "any time"], ["15m", "last 15 minutes"], ["1h", "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"]];
const SECONDS = { m: 60, h: 3600, d: 86400 };
const TEXT_FILTERS = [["jobId", "job id"], ["type", "type"], ["errorClass", "error class"]];
const PAGE_SIZE = 50;

/** "1h" → the instant that long before `now` (RFC 3339, whole seconds); "" → undefined. */
export function sinceInstant(token, now) {
  const match = /^(\d+)([mhd])$/.exec(token || "");
  if (!match) return undefined;
  const at = new Date(now - Number(match[1]) * SECONDS[match[2]] * 1000);
  return `${at.toISOString().slice(0, 19)}Z`;
}

/** The filters as the address keeps them, in a stable order (a link reads the same). */
export function runsHash(filters) {
  const query = new URLSearchParams();
  for (const name of ["state", "jobId", "type", "trigger", "errorClass", "since", "timeField"]) {
    if (filters[name]) query.set(name, filters[name]);
  }
  const text = query.toString();
  return text ? `#/runs?${text}` : "#/runs";
}

export function runsPage(root, params, ctx) {
  const pager = new Pager();
  const jobs = new Map(); // job id → the job, read once per job the page has listed (its name)
  const filters = Object.fromEntries(
    ["state", "jobId", "type", "trigger", "errorClass", "since", "timeField"].map((name) => [name, params.get(name) || ""]),
  );
  const chosen = new Set(filters.state ? filters.state.split(",") : []);
  const go = () => ctx.go(runsHash({ ...filters, state: STATES.filter((s) => chosen.has(s)).join(",") }));

  const chips = h("div", { class: "chips", role: "group", "aria-label": "states" }, STATES.map((state) => {
    const chip = h("button", {
      type: "button", class: `chip state-${state}`, "data-test": `chip-${state}`,
      "aria-pressed": chosen.has(state) ? "true" : "false",
    }, state);
    on(chip, "click", () => {
      if (chosen.has(state)) chosen.delete(state);
      else chosen.add(state);
      go();
    });
    return chip;
  }));
  const inputs = TEXT_FILTERS.map(([name, label]) => filterInput(filters, name, label, go));
  const select = (name, options, label) => filterSelect(filters, name, options, label, go);
  const controls = h("div", { class: "filters" },
    chips,
    inputs,
    select("trigger", TRIGGERS.map((t) => [t, t || "any trigger"]), "trigger"),
    select("since", SINCE, "since"),
    select("timeField", [["", "by scheduled time"], ["finished", "by finish time"]], "time field"),
    h("a", { href: "#/runs", "data-test": "clear-filters" }, "clear"));
  const body = h("div", null, h("p", { class: "muted" }, "loading…"));
  replace(root, h("div", { class: "page-head" }, h("h1", null, "Runs")), controls, body);

  async function refresh() {
    const now = ctx.now();
    const page = await api.listAllRuns({
      state: filters.state || undefined,
      jobId: filters.jobId || undefined,
      type: filters.type || undefined,
      trigger: filters.trigger || undefined,
      errorClass: filters.errorClass || undefined,
      since: sinceInstant(filters.since, now),
      timeField: filters.timeField || undefined,
      cursor: pager.cursor,
      limit: PAGE_SIZE,
    });
    pager.seen(page);
    // A listed run carries its job's id only: one read per job not yet known, none per run.
    await loadJobs(page.items.map((run) => run.jobId).filter((jobId) => !jobs.has(jobId)), jobs);
    const rows = page.items.map((run) => h("tr", { "data-run-key": run.runKey, "data-state": run.state },
      h("td", null, runLink(run.runKey, instant(run.scheduledFor)), h("span", { class: "muted small" }, ` ${relative(run.scheduledFor, now)}`)),
      h("td", null, jobLink(run.jobId, jobs.get(run.jobId)?.name)),
      h("td", null, run.jobType),
      h("td", null, badge(run.state)),
      h("td", null, run.trigger),
      h("td", { class: "num" }, String(run.attempts)),
      h("td", null, run.startedAt ? instant(run.startedAt) : "—"),
      h("td", null, run.finishedAt ? instant(run.finishedAt) : "—"),
      h("td", { class: "detail" }, run.errorClass || skipReason(run) || run.reason || "")));
    const filtered = Object.values(filters).some(Boolean);
    replace(body,
      page.items.length
        ? h("table", { class: "grid-table compact", "data-test": "all-runs" },
          h("thead", null, h("tr", null, [`Scheduled for (${zoneLabel()})`, "Job", "Type", "State", "Trigger", "Attempts", "Started", "Finished", "Error or reason"].map((t) => h("th", null, t)))),
          h("tbody", null, rows))
        : h("p", { class: "muted", "data-test": "no-runs" }, filtered ? "No runs match these filters." : "No runs yet."),
      page.items.length < PAGE_SIZE && page.nextCursor
        ? h("p", { class: "muted small" }, "Fewer runs than a page matched so far: the next page looks further back.")
        : null,
      pager.controls(refresh, "runs"));
  }
  return { refresh };
}
