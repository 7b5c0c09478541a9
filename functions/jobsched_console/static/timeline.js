// The timeline of a job's recent runs: one lane per run, aligned on its scheduled instant
// (x = 0), so how late each run started, how long each attempt took, and which runs were
// retried, skipped, cancelled or died reads at a glance. Drawn with DOM calls, no markup.

import { s } from "./dom.js";
import { instant, parseInstant, span, zoneLabel } from "./format.js";

const LANE = 20;
const TOP = 34;
const LEFT = 170;
const PLOT = 520;
const RIGHT = 300;
const LABEL_CHARS = 44; // what RIGHT holds at the lane font's width
const WIDTH = LEFT + PLOT + RIGHT;
// Seconds after the scheduled instant are drawn on a log scale: a 1 s start and a 5 min
// retry backoff both stay readable. The API's instants are whole seconds.
const MIN_EXTENT = 10;
const TICKS = [0, 1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400];
const OPEN = new Set(["PENDING", "QUEUED", "LEASED", "RETRY_WAIT"]);
const LATE_SECONDS = 5;

function scale(max) {
  const top = Math.log10(1 + Math.max(max, MIN_EXTENT));
  return (secondsAfter) => LEFT + (PLOT * Math.log10(1 + Math.max(secondsAfter, 0))) / top;
}

function tickLabel(value) {
  if (value === 0) return "0";
  if (value < 60) return `${value}s`;
  if (value < 3600) return `${value / 60}m`;
  if (value < 86400) return `${value / 3600}h`;
  return `${value / 86400}d`;
}

/** What one run looks like on its lane: times in seconds after its scheduled instant. */
export function laneOf(run, detail, now) {
  const scheduled = parseInstant(run.scheduledFor);
  const after = (value) => (parseInstant(value) - scheduled) / 1000;
  const open = OPEN.has(run.state);
  // An attempt with no end is running: until now, or (read before the run finished) until then.
  const unended = open ? (now - scheduled) / 1000 : after(run.finishedAt || run.updatedAt);
  const attempts = (detail && Array.isArray(detail.attempts) ? detail.attempts : []).map((attempt) => ({
    attempt: attempt.attempt,
    start: after(attempt.startedAt),
    end: attempt.endedAt ? after(attempt.endedAt) : unended,
    outcome: attempt.outcome || (attempt.endedAt || !open ? "ended" : "running"),
    errorClass: attempt.errorClass,
  }));
  const firstStart = attempts.length ? attempts[0].start : null;
  // Waiting: up to the first start; an open run that has not started waits until now.
  const waitedUntil = firstStart !== null ? firstStart : open ? Math.max((now - scheduled) / 1000, 0) : null;
  const end = Math.max(waitedUntil || 0, ...attempts.map((attempt) => attempt.end));
  return { run, attempts, lateness: firstStart, waitedUntil, end, open };
}

function summary(lane) {
  const { run, attempts, lateness } = lane;
  const parts = [run.state];
  if (lateness !== null) parts.push(`started +${span(lateness)}`);
  // Claims given back before the effect (held by a pause) are drawn, not counted.
  const counted = attempts.filter((attempt) => attempt.outcome !== "held").length;
  if (counted > 1) parts.push(`${counted} attempts`);
  if (run.redrives) parts.push(`${run.redrives} redrive${run.redrives > 1 ? "s" : ""}`);
  if (run.state === "SKIPPED" && run.skippedCount > 1) parts.push(`${run.skippedCount} occurrences`);
  return parts.join(" · ");
}

/** The lane's label, cut to what its column holds; the whole of it is the lane's title. */
function shortSummary(lane) {
  const full = summary(lane);
  return full.length > LABEL_CHARS ? `${full.slice(0, LABEL_CHARS - 1)}…` : full;
}

function legend(y) {
  const items = [
    ["marker scheduled", "scheduled"],
    ["wait", "waiting"],
    ["wait late", `waiting > ${LATE_SECONDS}s`],
    ["attempt outcome-succeeded", "succeeded"],
    ["attempt outcome-failed", "failed, retried"],
    ["attempt outcome-dead", "dead"],
    ["attempt outcome-running", "running"],
    ["attempt outcome-lease_expired", "held or lease expired"],
    ["marker skipped", "skipped / cancelled"],
  ];
  const group = s("g", { class: "legend" });
  let x = 0;
  for (const [kind, label] of items) {
    const swatch = kind.startsWith("marker")
      ? s("circle", { class: kind, cx: x + 6, cy: y - 4, r: 4 })
      : kind.startsWith("wait")
        ? s("line", { class: kind, x1: x, x2: x + 14, y1: y - 4, y2: y - 4 })
        : s("rect", { class: kind, x, y: y - 9, width: 14, height: 10 });
    group.appendChild(swatch);
    group.appendChild(s("text", { x: x + 18, y }, label));
    x += 28 + label.length * 6.6;
  }
  return group;
}

/**
 * runs: the job's runs (newest first); details: Map runKey → the run with its attempts;
 * onOpen(runKey): called when a lane is clicked.
 */
export function timeline(runs, details, now, onOpen) {
  const lanes = runs.map((run) => laneOf(run, details.get(run.runKey), now));
  const max = Math.max(MIN_EXTENT, ...lanes.map((lane) => lane.end));
  const x = scale(max);
  const height = TOP + lanes.length * LANE + 30;
  const svg = s("svg", {
    class: "timeline",
    viewBox: `0 0 ${WIDTH} ${height}`,
    role: "img",
    "aria-label": "recent runs: scheduled instant against start, attempts and outcome",
    "data-test": "timeline",
  });
  svg.appendChild(s("title", null, "Recent runs: each lane starts at the run's scheduled instant"));

  const axis = s("g", { class: "axis" });
  for (const tick of TICKS.filter((value) => value <= max * 1.0001 || value === 0)) {
    axis.appendChild(s("line", { class: "grid", x1: x(tick), x2: x(tick), y1: TOP - 6, y2: height - 26 }));
    axis.appendChild(s("text", { class: "tick", x: x(tick), y: TOP - 10 }, tickLabel(tick)));
  }
  axis.appendChild(s("text", { class: "axis-title", x: LEFT, y: 12 }, "after the scheduled instant (log scale) →"));
  axis.appendChild(s("text", { class: "axis-title", x: 4, y: 12 }, `scheduled for (${zoneLabel()})`));
  svg.appendChild(axis);

  lanes.forEach((lane, index) => {
    const y = TOP + index * LANE;
    const mid = y + LANE / 2;
    const { run } = lane;
    const group = s("g", {
      class: `lane state-${run.state}`,
      "data-run-key": run.runKey,
      "data-state": run.state,
      tabindex: 0,
    });
    group.appendChild(s("title", null, `${run.runKey}\n${summary(lane)}`));
    group.appendChild(s("rect", { class: "lane-bg", x: 0, y, width: WIDTH, height: LANE }));
    group.appendChild(
      s("text", { class: "when", x: 4, y: mid + 4 }, `${instant(run.scheduledFor).slice(5)}${run.trigger === "manual" ? " ▸" : ""}`),
    );
    if (lane.waitedUntil !== null && lane.waitedUntil > 0) {
      const late = lane.waitedUntil > LATE_SECONDS;
      group.appendChild(
        s("line", { class: late ? "wait late" : "wait", x1: x(0), x2: x(lane.waitedUntil), y1: mid, y2: mid }),
      );
    }
    for (const attempt of lane.attempts) {
      // Kept inside the plot: a short attempt at its right edge must not run into the labels.
      const start = Math.min(x(attempt.start), LEFT + PLOT - 6);
      const width = Math.min(Math.max(x(attempt.end) - start, 6), LEFT + PLOT - start);
      const bar = s("rect", {
        class: `attempt outcome-${attempt.outcome}`,
        x: start,
        y: y + 4,
        width,
        height: LANE - 8,
        "data-attempt": attempt.attempt,
      });
      bar.appendChild(
        s("title", null, `attempt ${attempt.attempt}: ${attempt.outcome}${attempt.errorClass ? ` (${attempt.errorClass})` : ""}, started +${span(attempt.start)}, took ${span(attempt.end - attempt.start)}`),
      );
      group.appendChild(bar);
    }
    const skipped = run.state === "SKIPPED" || (run.state === "CANCELLED" && !lane.attempts.length);
    group.appendChild(
      // Just left of zero, its tip on it: a run that started at once still shows its bar.
      s("path", { class: skipped ? "marker skipped" : "marker scheduled", d: `M ${x(0) - 5} ${mid - 5} l 5 5 l -5 5 l -5 -5 z` }),
    );
    group.appendChild(s("text", { class: "outcome", x: LEFT + PLOT + 10, y: mid + 4 }, shortSummary(lane)));
    if (onOpen) {
      group.addEventListener("click", () => onOpen(run.runKey));
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter") onOpen(run.runKey);
      });
    }
    svg.appendChild(group);
  });
  if (!lanes.length) {
    svg.appendChild(s("text", { class: "empty", x: LEFT, y: TOP + 14 }, "no runs yet"));
  }
  svg.appendChild(legend(height - 8));
  return svg;
}
