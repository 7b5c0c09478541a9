// Dead letters: every DEAD run of the tenant, newest first; redrive one with a reason, or
// cancel the job that keeps producing them.

import { api, explain } from "../api.js";
import { button, h, on, replace } from "../dom.js";
import { instant } from "../format.js";
import { Pager, confirmButton, jobLink, pooled, runLink } from "./common.js";

const PAGE_SIZE = 25;

export function deadPage(root, params, ctx) {
  const pager = new Pager();
  const reasons = new Map(); // run key → the reason typed so far, kept across refreshes
  const jobs = new Map(); // job id → the job (its name and version), read once per refresh
  const body = h("div", null, h("p", { class: "muted" }, "loading…"));
  replace(root, h("div", { class: "page-head" }, h("h1", null, "Dead letters")), body);

  function reasonInput(runKey) {
    const input = h("input", {
      type: "text", name: "reason", placeholder: "reason for the redrive", maxlength: 500,
      "aria-label": `reason for redriving ${runKey}`, "data-test": "redrive-reason",
    });
    input.value = reasons.get(runKey) || "";
    on(input, "input", () => reasons.set(runKey, input.value));
    return input;
  }

  async function refresh() {
    // A refresh must not take the text from under someone typing a reason.
    const focused = document.activeElement;
    const typing = focused && focused.dataset && focused.dataset.test === "redrive-reason" ? focused.closest("tr")?.dataset.runKey : null;
    const page = await api.deadLetters({ cursor: pager.cursor, limit: PAGE_SIZE });
    pager.seen(page);
    const jobIds = [...new Set(page.items.map((run) => run.jobId))];
    const found = await pooled(jobIds, 4, (jobId) => api.getJob(jobId));
    jobIds.forEach((jobId, index) => found[index] && jobs.set(jobId, found[index]));
    const rows = page.items.map((run) => {
      const job = jobs.get(run.jobId);
      const input = reasonInput(run.runKey);
      const redrive = button("Redrive", async () => {
        try {
          const again = await api.redrive(run.runKey, input.value.trim() || undefined);
          reasons.delete(run.runKey);
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
      return h("tr", { "data-run-key": run.runKey },
        h("td", null, runLink(run.runKey, instant(run.scheduledFor)), h("div", { class: "muted small" }, run.trigger)),
        h("td", null, jobLink(run.jobId, job ? job.name : run.jobId)),
        h("td", { class: "num" }, String(run.attempt)),
        h("td", { class: "num" }, String(run.redrives)),
        h("td", { class: "detail" }, run.lastErrorClass ? `${run.lastErrorClass}: ${run.lastErrorMessage || ""}` : run.reason || ""),
        h("td", null, run.finishedAt ? instant(run.finishedAt) : instant(run.updatedAt)),
        h("td", { class: "redrive" }, input, redrive, cancelJob));
    });
    replace(body,
      page.items.length
        ? h("table", { class: "grid-table", "data-test": "dead-letters" },
          h("thead", null, h("tr", null, ["Scheduled for (UTC)", "Job", "Attempts", "Redrives", "Last error", "Died", ""].map((t) => h("th", null, t)))),
          h("tbody", null, rows))
        : h("p", { class: "muted" }, "No dead letters."),
      pager.controls(refresh, "dead letters"));
    if (typing) {
      const again = [...body.querySelectorAll("tr")].find((row) => row.dataset.runKey === typing);
      const input = again && again.querySelector("input");
      if (input) {
        input.focus();
        input.setSelectionRange(input.value.length, input.value.length);
      }
    }
  }
  return { refresh };
}
