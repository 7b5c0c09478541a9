// One job: its fields, upcoming fire times, counters, the timeline of recent runs and the
// runs table (paged with the API's cursors).

import { api } from "../api.js";
import { h, replace } from "../dom.js";
import { instant, json, parseInstant, relative, schedule, seconds, skipReason, span, zoneLabel } from "../format.js";
import { timeline } from "../timeline.js";
import { Pager, badge, jobActions, pooled, runHash, runLink } from "./common.js";

const TIMELINE_RUNS = 30;
const PAGE_SIZE = 20;
const UPCOMING_RUNS = 20; // runs made ahead of their instant, shown folded under the history
const TERMINAL = new Set(["SUCCEEDED", "DEAD", "SKIPPED", "CANCELLED"]);

function fields(pairs) {
  return h("dl", { class: "fields" }, pairs.filter(([, value]) => value !== undefined && value !== null && value !== "")
    .map(([name, value]) => [h("dt", null, name), h("dd", null, value)]));
}

function target(job) {
  if (!job.target) return `Python handler for type ${job.type}`;
  const t = job.target;
  if (t.kind === "http") return `HTTP ${t.method || "POST"} ${t.url}`;
  return `${t.kind} ${json(t)}`;
}

/** The job's upcoming fire times as lines of its schedule's preview (`upcomingFireTimes`:
 *  the occurrences its exclusions take off among them too, each with why); where the answer
 *  has none of those, its `nextFireTimes` (a completed job's runs made ahead) as fire times. */
function fireTimes(job) {
  if ((job.upcomingFireTimes || []).length) return job.upcomingFireTimes;
  return (job.nextFireTimes || []).map((at) => ({ at, fires: true, reason: null }));
}

function fireTime(line, now) {
  const when = `${instant(line.at)} (${relative(line.at, now)})`;
  if (!line.fires) {
    return h("li", { class: "excluded" },
      h("s", null, when), " ", h("span", { class: "reason" }, `not fired: ${line.reason || "excluded"}`));
  }
  return h("li", { class: "fires" }, when, line.reason ? h("div", { class: "reason muted small" }, line.reason) : null);
}

/** Run details (with attempts) by run key. A detail is reused only while it shows a finished
 *  run in the state, redrive and update the list shows (instants are whole seconds, so a run
 *  can move twice within one updatedAt): a finished run is read once. */
class DetailCache {
  constructor() {
    this.entries = new Map();
  }

  fresh(run) {
    const detail = this.entries.get(run.runKey);
    return Boolean(detail) && TERMINAL.has(run.state) && detail.state === run.state
      && detail.redrives === run.redrives && detail.updatedAt === run.updatedAt;
  }

  async load(runs) {
    const stale = runs.filter((run) => !this.fresh(run));
    const details = await pooled(stale, 4, (run) => api.getRun(run.runKey));
    stale.forEach((run, index) => {
      if (details[index]) this.entries.set(run.runKey, details[index]);
    });
    return new Map(runs.map((run) => [run.runKey, this.entries.get(run.runKey)]));
  }
}

function runRow(run, detail) {
  const started = detail && detail.attempts.length ? detail.attempts[0].startedAt : null;
  const lateness = started ? (parseInstant(started) - parseInstant(run.scheduledFor)) / 1000 : null;
  const outcome = run.state === "SUCCEEDED" ? json(run.result)
    : run.lastErrorClass ? `${run.lastErrorClass}: ${run.lastErrorMessage || ""}`
      : run.waitingFor || skipReason(run) || run.reason || "";
  return h("tr", { "data-run-key": run.runKey, "data-state": run.state },
    h("td", null, runLink(run.runKey, instant(run.scheduledFor)), h("div", { class: "muted small" }, run.trigger)),
    h("td", null, badge(run.state)),
    h("td", null, started ? instant(started) : "—"),
    h("td", { class: "num" }, lateness === null ? "—" : `+${span(lateness)}`),
    h("td", { class: "num" }, String(run.attempt)),
    h("td", { class: "num" }, String(run.redrives)),
    h("td", null, run.finishedAt ? instant(run.finishedAt) : "—"),
    h("td", { class: "detail" }, outcome));
}

export function jobPage(root, params, ctx) {
  const jobId = params.get("id");
  const pager = new Pager();
  const cache = new DetailCache();
  const head = h("div", { class: "page-head" }, h("h1", null, "Job"));
  const about = h("section", { class: "card" });
  const chart = h("section", { class: "card" }, h("h2", null, "Timeline"), h("p", { class: "muted" }, "loading…"));
  const runs = h("section", { class: "card" }, h("h2", null, "Runs"));
  replace(root, head, about, chart, runs);

  async function refresh() {
    const [job, summary, recent, listed, upcoming] = await Promise.all([
      api.getJob(jobId),
      api.summary(jobId),
      api.listRuns(jobId, { limit: TIMELINE_RUNS }),
      api.listRuns(jobId, { cursor: pager.cursor, limit: PAGE_SIZE }),
      api.listRuns(jobId, { view: "upcoming", limit: UPCOMING_RUNS }),
    ]);
    pager.seen(listed);
    const now = ctx.now();
    const due = recent.items; // the API's default view: runs due by now, newest first
    const shown = new Map([...due, ...listed.items].map((run) => [run.runKey, run]));
    const details = await cache.load([...shown.values()]);

    replace(head, h("h1", null, job.name), badge(job.state), h("span", { class: "muted" }, `version ${job.version}`),
      jobActions(job, ctx, refresh));
    const c = summary.counters;
    replace(about,
      h("div", { class: "columns" },
        fields([
          ["Job id", job.jobId],
          ["Type", job.type],
          ["Schedule", schedule(job)],
          ["Target", target(job)],
          ["Priority", job.priority],
          ["Attempts", `${job.maxAttempts} (retry from ${job.retry.baseSeconds}s, at most ${job.retry.capSeconds}s apart)`],
          ["Missed runs", `${job.missedRuns}, within ${seconds(job.catchUpWindow)}`],
          ["Overlap", job.overlap],
          ["Timeout", seconds(job.timeoutSeconds)],
          ["Payload", job.payload === null || job.payload === undefined ? "" : json(job.payload)],
          ["Created", instant(job.createdAt)],
          ["Updated", instant(job.updatedAt)],
        ]),
        h("div", null,
          h("h2", null, `Upcoming fire times (${zoneLabel()})`),
          fireTimes(job).length
            ? h("ul", { class: "times", "data-test": "fire-times" }, fireTimes(job).map((line) => fireTime(line, now)))
            : h("p", { class: "muted" }, job.state === "ACTIVE" ? "none: the schedule has ended" : `none while ${job.state}`),
          h("h2", null, "Counters"),
          h("p", { class: "muted small" }, "How runs ended, manual and backfilled ones too; a redriven run counts each time it ends."),
          fields([
            ["Scheduled runs made", String(job.runsCreated)],
            ["Succeeded", String(c.succeeded)],
            ["Dead", String(c.dead)],
            ["Missed", String(c.missed)],
            ["Skipped (overlap)", String(c.overlapSkipped)],
            ["Excluded (not run)", String(c.excluded ?? 0)],
            ["Cancelled", String(c.cancelled)],
          ]))));
    replace(chart,
      h("h2", null, `Timeline of the last ${due.length} runs`),
      timeline(due, details, now, (runKey) => ctx.go(runHash(runKey))));
    replace(runs,
      h("h2", null, "Runs due (newest first)"),
      listed.items.length
        ? h("table", { class: "grid-table", "data-test": "runs" },
          h("thead", null, h("tr", null, [`Scheduled for (${zoneLabel()})`, "State", "Started", "Late", "Attempt", "Redrives", "Finished", "Result or error"].map((t) => h("th", null, t)))),
          h("tbody", null, listed.items.map((run) => runRow(run, details.get(run.runKey)))))
        : h("p", { class: "muted" }, "No runs due yet."),
      pager.controls(refresh, "runs"),
      upcoming.items.length
        ? h("details", { class: "upcoming", "data-test": "upcoming" },
          h("summary", null, `Upcoming: ${upcoming.items.length}${upcoming.nextCursor ? "+" : ""} runs made ahead of their time`),
          h("table", { class: "grid-table" },
            h("thead", null, h("tr", null, [`Scheduled for (${zoneLabel()})`, "State", "Trigger"].map((t) => h("th", null, t)))),
            h("tbody", null, upcoming.items.map((run) => h("tr", { "data-run-key": run.runKey },
              h("td", null, runLink(run.runKey, instant(run.scheduledFor)), ` (${relative(run.scheduledFor, now)})`),
              h("td", null, badge(run.state)),
              h("td", null, run.trigger))))))
        : null);
  }
  return { refresh, title: () => jobId };
}
