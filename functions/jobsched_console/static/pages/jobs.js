// Jobs: state, schedule in words, next fire times, counters, filter by state, actions.

import { api } from "../api.js";
import { h, on, replace } from "../dom.js";
import { instant, relative, schedule } from "../format.js";
import { Pager, badge, jobActions, jobLink, pooled } from "./common.js";

const STATES = ["", "ACTIVE", "PAUSED", "CANCELLED", "COMPLETED"];
const PAGE_SIZE = 20;

function counters(summary) {
  if (!summary) return "—";
  const c = summary.counters;
  return h(
    "span",
    { class: "counters" },
    h("span", { class: "count ok", title: "succeeded" }, `✓ ${c.succeeded}`),
    h("span", { class: "count dead", title: "dead" }, `✗ ${c.dead}`),
    h("span", { class: "count missed", title: "missed (not run: paused or too late)" }, `missed ${c.missed}`),
    h("span", { class: "count skipped", title: "skipped: the previous run was still going" }, `overlap ${c.overlapSkipped}`),
    h("span", { class: "count cancelled", title: "cancelled" }, `cancelled ${c.cancelled}`),
  );
}

function fireTimes(job, summary, now) {
  const times = summary ? summary.nextFireTimes.slice(0, 3) : job.nextRunAt ? [job.nextRunAt] : [];
  if (!times.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "times" }, times.map((time) => h("li", { title: instant(time) }, `${instant(time)} (${relative(time, now)})`)));
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
        h("td", null, jobLink(job.jobId, job.name), h("div", { class: "muted small" }, job.jobId, " · ", job.type)),
        h("td", null, badge(job.state)),
        h("td", null, schedule(job)),
        h("td", null, job.state === "ACTIVE" ? fireTimes(job, summaries[index], now) : h("span", { class: "muted" }, "—")),
        h("td", null, counters(summaries[index]), h("div", { class: "muted small" }, `${job.runsCreated} runs made`)),
        h("td", { class: "num" }, String(job.version)),
        h("td", null, jobActions(job, ctx, refresh)),
      ));
    replace(body,
      page.items.length
        ? h("table", { class: "grid-table", "data-test": "jobs" },
          h("thead", null, h("tr", null, ["Job", "State", "Schedule", "Next fire times (UTC)", "Counters", "Version", ""].map((t) => h("th", null, t)))),
          h("tbody", null, rows))
        : h("p", { class: "muted" }, state ? `No ${state} jobs.` : "No jobs yet: create one with the API or the CLI (jobsched jobs create …)."),
      pager.controls(refresh, "jobs"));
  }
  return { refresh };
}
