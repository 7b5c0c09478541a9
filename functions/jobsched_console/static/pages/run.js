// One run: its fields, result, attempts and every transition (actor, fence, attempt, error).

import { api, explain } from "../api.js";
import { awsConsoleLink, button, h, replace } from "../dom.js";
import { instant, json, parseInstant, span } from "../format.js";
import { badge, confirmButton, jobLink } from "./common.js";

const OPEN = new Set(["PENDING", "QUEUED", "LEASED", "RETRY_WAIT"]);

// Claims that ended before the effect and gave their attempt back: the next claim has the
// same attempt number.
const NOT_COUNTED = new Map([
  ["held", "held: its job was paused before the effect"],
  ["skipped", "skipped: the job's resume decided this occurrence does not run"],
]);

/** An attempt's outcome; one with no outcome is running only while it has no end. */
export function attemptState(attempt) {
  if (attempt.outcome) return attempt.outcome;
  return attempt.endedAt ? "ended" : "running";
}

function fields(pairs) {
  return h("dl", { class: "fields" }, pairs.filter(([, value]) => value !== undefined && value !== null && value !== "")
    .map(([name, value]) => [h("dt", null, name), h("dd", null, value)]));
}

/** A transition's trace: a link to its page on the AWS console when the API gave one (a
 * deployed stack), else its id, else nothing (local mode). */
function traceCell(t) {
  if (!t.traceId) return "";
  const label = () => h("code", { class: "small" }, t.traceId);
  return awsConsoleLink(t.traceUrl, { "data-test": "trace-link" }, label()) || label();
}

function duration(from, to) {
  if (!from || !to) return "—";
  return span((parseInstant(to) - parseInstant(from)) / 1000);
}

export function runPage(root, params, ctx) {
  const runKey = params.get("key");
  const reason = h("input", { type: "text", name: "reason", placeholder: "why (recorded on the run)", maxlength: 500, "data-test": "redrive-reason" });
  const head = h("div", { class: "page-head" }, h("h1", null, "Run"));
  const body = h("div", null, h("p", { class: "muted" }, "loading…"));
  replace(root, head, body);

  async function refresh() {
    const run = await api.getRun(runKey);
    const actions = [];
    if (run.state === "DEAD") {
      actions.push(reason, button("Redrive", async () => {
        try {
          const again = await api.redrive(run.runKey, reason.value.trim() || undefined);
          reason.value = "";
          ctx.notice(`Redriven: the run is ${again.state} again (redrive ${again.redrives}).`, "ok");
        } catch (error) {
          ctx.notice(explain(error, { action: "redriven" }), "error");
        }
        await refresh();
      }, { "data-test": "redrive" }));
    }
    if (OPEN.has(run.state)) {
      actions.push(confirmButton("Cancel run", "Really cancel the run?", async () => {
        try {
          await api.cancelRun(run.runKey);
          ctx.notice("Run cancelled.", "ok");
        } catch (error) {
          ctx.notice(explain(error, { action: "cancelled" }), "error");
        }
        await refresh();
      }, { class: "danger", "data-test": "cancel-run" }));
    }
    replace(head, h("h1", null, "Run ", h("code", null, run.runKey)), badge(run.state), h("span", { class: "actions" }, actions));
    replace(body,
      h("section", { class: "card" },
        run.waitingFor ? h("p", { class: "waiting", "data-test": "waiting-for" }, `Waiting: ${run.waitingFor}`) : null,
        fields([
          ["Job", jobLink(run.jobId)],
          ["Trigger", run.trigger],
          ["Scheduled for", instant(run.scheduledFor)],
          ["Due at", instant(run.dueAt)],
          ["Attempt", String(run.attempt)],
          ["Fence", String(run.fence)],
          ["Redrives", String(run.redrives)],
          ["Job version", String(run.definitionVersion)],
          ["Priority", run.priority],
          ["Reason", run.reason],
          ["Blocked by", run.blockedBy],
          ["Skipped", run.skippedCount ? `${run.skippedCount} occurrences through ${instant(run.skippedThrough)}` : null],
          ["Last error", run.lastErrorClass ? `${run.lastErrorClass}: ${run.lastErrorMessage || ""}` : null],
          ["Lease expires", run.leaseExpiresAt ? instant(run.leaseExpiresAt) : null],
          ["Created", instant(run.createdAt)],
          ["Updated", instant(run.updatedAt)],
          ["Finished", run.finishedAt ? instant(run.finishedAt) : null],
        ]),
        h("h2", null, "Result"),
        run.result === null || run.result === undefined
          ? h("p", { class: "muted" }, run.state === "SUCCEEDED" ? "none returned" : "none yet")
          : h("pre", { class: "result", "data-test": "result" }, JSON.stringify(run.result, null, 2))),
      h("section", { class: "card" },
        h("h2", null, "Attempts"),
        run.attempts.length
          ? h("table", { class: "grid-table", "data-test": "attempts" },
            h("thead", null, h("tr", null, ["Claim", "Attempt", "Fence", "Started", "Ended", "Took", "Outcome", "Error"].map((t) => h("th", null, t)))),
            h("tbody", null, run.attempts.map((a, index) => h("tr", { "data-state": attemptState(a) },
              h("td", { class: "num" }, `#${index + 1}`),
              h("td", { class: "num" }, NOT_COUNTED.has(a.outcome) ? h("span", { class: "muted", title: NOT_COUNTED.get(a.outcome) }, `${a.attempt} (not counted)`) : String(a.attempt)),
              h("td", { class: "num" }, String(a.fence)),
              h("td", null, instant(a.startedAt)),
              h("td", null, a.endedAt ? instant(a.endedAt) : attemptState(a)),
              h("td", { class: "num" }, duration(a.startedAt, a.endedAt)),
              h("td", null, badge(attemptState(a)), NOT_COUNTED.has(a.outcome) ? h("div", { class: "muted small" }, NOT_COUNTED.get(a.outcome)) : null),
              h("td", null, a.errorClass || "")))))
          : h("p", { class: "muted" }, "No attempt has started.")),
      h("section", { class: "card" },
        h("h2", null, "Transitions"),
        run.historyDropped ? h("p", { class: "muted" }, `${run.historyDropped} earlier transitions were left out to keep the run within its size limit.`) : null,
        h("table", { class: "grid-table", "data-test": "transitions" },
          h("thead", null, h("tr", null, ["At", "Actor", "From → to", "Fence", "Attempt", "Error", "Reason", "Trace"].map((t) => h("th", null, t)))),
          h("tbody", null, run.transitions.map((t) => h("tr", null,
            h("td", null, instant(t.at)),
            h("td", null, h("code", null, t.actor)),
            h("td", null, t.from ? badge(t.from) : h("span", { class: "muted" }, "created"), " → ", badge(t.to)),
            h("td", { class: "num" }, String(t.fence)),
            h("td", { class: "num" }, String(t.attempt)),
            h("td", { class: "detail" }, t.errorClass ? `${t.errorClass}: ${t.errorMessage || ""}` : ""),
            h("td", { class: "detail" }, t.reason || ""),
            h("td", null, traceCell(t))))))));
  }
  return { refresh };
}
