// Dead letters: every DEAD run of the tenant, newest first, or those the filters keep (job,
// error class, when it died). Redrive one with a reason; select several and redrive or
// dismiss them in one audited request; or redrive all that match, after a dry run has said
// how many that is. A refused run (not DEAD any more, at-most-once) is named, never hidden.

import { api, explain } from "../api.js";
import { button, h, on, replace } from "../dom.js";
import { instant, zoneLabel } from "../format.js";
import { Pager, confirmButton, filterInput, filterSelect, jobLink, loadJobs, runLink } from "./common.js";
import { sinceInstant } from "./runs.js";

const PAGE_SIZE = 25;
const MAX_SELECTED = 100; // what one bulk request by run keys takes
const MAX_DRY_RUN_PAGES = 20; // a dry run counts at most this many pages of 100
const SINCE = [["", "any time"], ["1h", "died in the last hour"], ["24h", "in the last 24 hours"], ["7d", "in the last 7 days"]];

/** "3 refused (2 conflict, 1 effect_may_repeat)", or "" when none was. */
function refusedText(refused) {
  if (!refused.length) return "";
  const codes = new Map();
  for (const item of refused) codes.set(item.code, (codes.get(item.code) || 0) + 1);
  return `${refused.length} refused (${[...codes].map(([code, n]) => `${n} ${code}`).join(", ")})`;
}

export function deadPage(root, params, ctx) {
  const pager = new Pager();
  const reasons = new Map(); // run key → the reason typed so far, kept across refreshes
  const selected = new Set(); // run keys ticked, kept across refreshes and pages
  const jobs = new Map(); // job id → the job (its name and version), read once per refresh
  const filters = { jobId: params.get("jobId") || "", errorClass: params.get("errorClass") || "", since: params.get("since") || "" };
  let plan = null; // the dry run of "redrive all matching", shown until confirmed or dropped

  const go = () => {
    const query = new URLSearchParams(Object.entries(filters).filter(([, value]) => value));
    ctx.go(query.toString() ? `#/dead-letters?${query}` : "#/dead-letters");
  };
  const since = filterSelect(filters, "since", SINCE, "died since", go);
  const bulkReason = h("input", { type: "text", name: "bulk-reason", placeholder: "reason (recorded on each run)", maxlength: 500, "aria-label": "reason for the bulk request", "data-test": "bulk-reason" });
  const bulkArea = h("div", { class: "bulk", "data-test": "bulk" });
  const body = h("div", null, h("p", { class: "muted" }, "loading…"));
  replace(root,
    h("div", { class: "page-head" }, h("h1", null, "Dead letters")),
    h("div", { class: "filters" }, filterInput(filters, "jobId", "job id", go), filterInput(filters, "errorClass", "error class", go), since),
    bulkArea,
    body);

  const reason = () => bulkReason.value.trim() || "from the console";
  const filterBody = (now) => {
    const body = { reason: reason() };
    if (filters.jobId) body.jobId = filters.jobId;
    if (filters.errorClass) body.errorClass = filters.errorClass;
    const from = sinceInstant(filters.since, now);
    if (from) body.since = from;
    return body;
  };

  /** Every page of one filtered bulk request (a dry run stops after MAX_DRY_RUN_PAGES). */
  async function allPages(action, base, dryRun) {
    const outcome = { count: 0, refused: [], requestIds: [], more: false };
    let cursor;
    for (let pages = 0; ; pages += 1) {
      if (dryRun && pages === MAX_DRY_RUN_PAGES) {
        outcome.more = true;
        break;
      }
      const answer = await api.bulkDeadLetters(action, { ...base, dryRun, ...(cursor ? { cursor } : {}) });
      outcome.count += answer.count;
      outcome.refused.push(...answer.refused);
      if (answer.requestId) outcome.requestIds.push(answer.requestId);
      cursor = answer.nextCursor;
      if (!cursor) break;
    }
    return outcome;
  }

  function showBulk() {
    const count = selected.size;
    const parts = [
      bulkReason,
      button(`Redrive selected (${count})`, () => bySelection("redrive"), { "data-test": "redrive-selected", disabled: !count }),
      confirmButton(`Dismiss selected (${count})`, "Really dismiss them?", () => bySelection("cancel"), { class: "danger", "data-test": "dismiss-selected", disabled: !count }),
      button("Redrive all matching…", async () => {
        try {
          const base = filterBody(ctx.now());
          plan = { base, outcome: await allPages("redrive", base, true) };
        } catch (error) {
          ctx.notice(explain(error, { action: "counted" }), "error");
        }
        showBulk();
      }, { "data-test": "redrive-matching" }),
    ];
    if (plan) {
      const { outcome } = plan;
      const total = `${outcome.count}${outcome.more ? "+" : ""}`;
      parts.push(
        h("span", { class: "count", "data-test": "dry-run-count" }, `${total} dead letter${outcome.count === 1 ? "" : "s"} would be redriven`),
        outcome.refused.length ? h("span", { class: "muted" }, refusedText(outcome.refused)) : null,
        button(`Redrive ${total}`, async () => {
          const { base } = plan;
          plan = null;
          try {
            const done = await allPages("redrive", { ...base, reason: reason() }, false);
            const refused = refusedText(done.refused);
            ctx.notice(`Redriven ${done.count} dead letters${refused ? `; ${refused}` : ""} (request ${done.requestIds.join(", ")}).`, done.refused.length ? "conflict" : "ok");
          } catch (error) {
            ctx.notice(explain(error, { action: "redriven" }), "error");
          }
          await afterBulk();
        }, { "data-test": "confirm-redrive", disabled: !outcome.count }),
        button("Never mind", () => {
          plan = null;
          showBulk();
        }, { "data-test": "drop-plan" }),
      );
    }
    replace(bulkArea, parts);
  }

  async function bySelection(action) {
    const runKeys = [...selected].slice(0, MAX_SELECTED);
    if (!runKeys.length) return showBulk(); // nothing ticked: nothing to send
    try {
      const done = await api.bulkDeadLetters(action, { reason: reason(), runKeys });
      const refused = refusedText(done.refused);
      const verb = action === "redrive" ? "Redriven" : "Dismissed";
      ctx.notice(`${verb} ${done.count} dead letters${refused ? `; ${refused}` : ""} (request ${done.requestId}).`, done.refused.length ? "conflict" : "ok");
    } catch (error) {
      ctx.notice(explain(error, { action: action === "redrive" ? "redriven" : "dismissed" }), "error");
    }
    await afterBulk();
  }

  /** After any bulk request, whatever its outcome: nothing stays ticked, the buttons say so. */
  async function afterBulk() {
    selected.clear();
    showBulk();
    await refresh();
  }

  function reasonInput(runKey) {
    const input = h("input", {
      type: "text", name: "reason", placeholder: "reason for the redrive", maxlength: 500,
      "aria-label": `reason for redriving ${runKey}`, "data-test": "redrive-reason",
    });
    input.value = reasons.get(runKey) || "";
    on(input, "input", () => reasons.set(runKey, input.value));
    return input;
  }

  async function listed(now) {
    const filtered = filters.jobId || filters.errorClass || filters.since;
    if (!filtered) return api.deadLetters({ cursor: pager.cursor, limit: PAGE_SIZE });
    // The filters as the bulk request reads them: since bounds when each run died.
    return api.listAllRuns({
      state: "DEAD", jobId: filters.jobId || undefined, errorClass: filters.errorClass || undefined,
      since: sinceInstant(filters.since, now), timeField: filters.since ? "finished" : undefined,
      cursor: pager.cursor, limit: PAGE_SIZE,
    });
  }

  async function refresh() {
    // A refresh must not take the text from under someone typing a reason.
    const focused = document.activeElement;
    const typing = focused && focused.dataset && focused.dataset.test === "redrive-reason" ? focused.closest("tr")?.dataset.runKey : null;
    const page = await listed(ctx.now());
    pager.seen(page);
    await loadJobs(page.items.map((run) => run.jobId), jobs); // each refresh: its state and version
    const rows = page.items.map((run) => {
      const job = jobs.get(run.jobId);
      const input = reasonInput(run.runKey);
      const tick = h("input", { type: "checkbox", name: "selected", "aria-label": `select ${run.runKey}`, "data-test": "select" });
      tick.checked = selected.has(run.runKey);
      on(tick, "change", () => {
        if (tick.checked && selected.size < MAX_SELECTED) selected.add(run.runKey);
        else {
          tick.checked = false;
          selected.delete(run.runKey);
        }
        showBulk();
      });
      const redrive = button("Redrive", async () => {
        try {
          const again = await api.redrive(run.runKey, input.value.trim() || undefined);
          reasons.delete(run.runKey);
          if (selected.delete(run.runKey)) showBulk();
          ctx.notice(`Redriven: run ${run.runKey} is ${again.state} again (redrive ${again.redrives}).`, "ok");
        } catch (error) {
          ctx.notice(explain(error, { action: "redriven" }), "error");
        }
        await refresh();
      }, { "data-test": "redrive" });
      const cancelJob = job && (job.state === "ACTIVE" || job.state === "PAUSED")
        ? confirmButton("Cancel job", "Really cancel the job?", async () => {
          try {
            const cancelled = await api.cancelJob(job.jobId, job.version);
            ctx.notice(`Cancelled job "${job.name}" (version ${cancelled.version}): it makes no more runs.`, "ok");
          } catch (error) {
            ctx.notice(explain(error, { action: "cancelled", version: job.version }), error.status === 412 ? "conflict" : "error");
          }
          await refresh();
        }, { class: "danger", "data-test": "cancel-job" })
        : null;
      // A dead-letter item (RunView) or a listing item (RunSummaryView): their names differ.
      const attempts = run.attempt ?? run.attempts;
      const error = run.lastErrorClass ? `${run.lastErrorClass}: ${run.lastErrorMessage || ""}` : run.errorClass || run.reason || "";
      return h("tr", { "data-run-key": run.runKey },
        h("td", null, tick),
        h("td", null, runLink(run.runKey, instant(run.scheduledFor)), h("div", { class: "muted small" }, run.trigger)),
        h("td", null, jobLink(run.jobId, job ? job.name : run.jobId)),
        h("td", { class: "num" }, String(attempts)),
        h("td", { class: "num" }, String(run.redrives)),
        h("td", { class: "detail" }, error),
        h("td", null, run.finishedAt ? instant(run.finishedAt) : instant(run.updatedAt)),
        h("td", { class: "redrive" }, input, redrive, cancelJob));
    });
    replace(body,
      page.items.length
        ? h("table", { class: "grid-table", "data-test": "dead-letters" },
          h("thead", null, h("tr", null, ["", `Scheduled for (${zoneLabel()})`, "Job", "Attempts", "Redrives", "Last error", "Died", ""].map((t) => h("th", null, t)))),
          h("tbody", null, rows))
        : h("p", { class: "muted" }, "No dead letters."),
      pager.controls(refresh, "dead letters"));
    if (typing) {
      const again = [...body.querySelectorAll("tr")].find((row) => row.dataset.runKey === typing);
      const input = again && again.querySelector("input[data-test=redrive-reason]");
      if (input) {
        input.focus();
        input.setSelectionRange(input.value.length, input.value.length);
      }
    }
  }
  showBulk(); // redrawn when a tick or a dry run changes it, never by the timer (typing)
  return { refresh };
}
