// Jobs: state, schedule in words, next fire times, counters, filter by state, actions.

import { api } from "../api.js";
import { h, on, replace } from "../dom.js";
import { instant, relative, schedule, zoneLabel } from "../format.js";
import { Pager, badge, jobActions, jobLink, pooled, runLink } from "./common.js";

const STATES = ["", "ACTIVE", "PAUSED", "CANCELLED", "COMPLETED"];
const PAGE_SIZE = 20;

function counters(summary) {
  if (!summary) return "—";
  const c = summary.counters;
  // How runs ended (manual and backfilled ones too; a redriven run counts each time it ends).
  return h(
    "span",
    { class: "counters", title: `succeeded ${c.succeeded}, dead ${c.dead}, missed ${c.missed}, skipped (overlap) ${c.overlapSkipped}, cancelled ${c.cancelled}` },
    h("span", { class: "count ok" }, `✓ ${c.succeeded}`),
    h("span", { class: "count dead" }, `✗ ${c.dead}`),
    c.missed + c.overlapSkipped ? h("span", { class: "count missed" }, `skipped ${c.missed + c.overlapSkipped}`) : null,
  );
}

function nextFire(job, summary, now) {
  const times = summary ? summary.nextFireTimes.slice(0, 3) : job.nextRunAt ? [job.nextRunAt] : [];
  if (!times.length) return h("span", { class: "muted" }, "none");
  // The time of day (in the zone shown) and how soon; the whole instants of the next three in its title.
  return h("span", { title: times.map(instant).join("\n"), "data-test": "next-fire" }, `${instant(times[0]).slice(11)} (${relative(times[0], now)})`);
}

/** The job's latest run due by now: its state and when it was scheduled, linked to it. */
function lastRun(summary, now) {
  const last = summary && summary.lastRuns.length ? summary.lastRuns[0] : null;
  if (!last) return h("span", { class: "muted" }, "none yet");
  return h("span", { "data-test": "last-run", "data-state": last.state, title: instant(last.scheduledFor) },
    badge(last.state), " ", runLink(last.runKey, relative(last.scheduledFor, now)));
}

export function jobsPage(root, params, ctx) {
  const pager = new Pager();
  let state = params.get("state") || "";
  const filter = h("select", { name: "state", "aria-label": "filter by state", "data-test": "state-filter" },
    STATES.map((value) => {
      const option = h("option", { value }, value || "all states");
      option.selected = value === state;
      return option;
    }));
  on(filter, "change", () => {
    state = filter.value;
    pager.reset();
    ctx.go(state ? `#/jobs?state=${state}` : "#/jobs");
  });
  const body = h("div", { class: "list" }, h("p", { class: "muted" }, "loading…"));
  replace(root, h("div", { class: "page-head" }, h("h1", null, "Jobs"), h("label", null, "Show ", filter)), body);

  async function refresh() {
    const page = await api.listJobs({ state: state || undefined, cursor: pager.cursor, limit: PAGE_SIZE });
    pager.seen(page);
    const summaries = await pooled(page.items, 4, (job) => api.summary(job.jobId));
    const now = ctx.now();
    const rows = page.items.map((job, index) =>
      h("tr", { "data-job-id": job.jobId, "data-state": job.state },
        h("td", { class: "name" }, jobLink(job.jobId, job.name), h("span", { class: "muted small", title: job.jobId }, ` ${job.type}`)),
        h("td", null, badge(job.state)),
        h("td", { class: "schedule", title: schedule(job) }, schedule(job)),
        h("td", null, job.state === "ACTIVE" ? nextFire(job, summaries[index], now) : h("span", { class: "muted" }, "—")),
        h("td", null, lastRun(summaries[index], now)),
        h("td", null, counters(summaries[index])),
        h("td", { class: "num" }, String(job.version)),
        h("td", null, jobActions(job, ctx, refresh)),
      ));
    replace(body,
      page.items.length
        ? h("table", { class: "grid-table compact", "data-test": "jobs" },
          h("thead", null, h("tr", null, ["Job", "State", "Schedule", `Next fire (${zoneLabel()})`, "Last run", "Outcomes", "Version", ""].map((t) => h("th", null, t)))),
          h("tbody", null, rows))
        : h("p", { class: "muted" }, state ? `No ${state} jobs.` : "No jobs yet: create one with the API or the CLI (jobsched jobs create …)."),
      pager.controls(refresh, "jobs"));
  }
  return { refresh };
}
