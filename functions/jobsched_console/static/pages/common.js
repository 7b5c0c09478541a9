// What the pages share: paging with the API's cursors, state badges, the job actions
// (If-Match on the version shown) and a small worker pool for per-row requests.

import { api, explain } from "../api.js";
import { button, h, link, on } from "../dom.js";

export function badge(state) {
  return h("span", { class: `badge state-${state}`, "data-state": state }, state);
}

export function jobHash(jobId) {
  return `#/jobs/${encodeURIComponent(jobId)}`;
}

export function runHash(runKey) {
  return `#/runs/${encodeURIComponent(runKey)}`;
}

/** A link to the job, labelled with its name when known; its id is then the tooltip. */
export function jobLink(jobId, label) {
  const node = link(jobHash(jobId), label || jobId);
  if (label && label !== jobId) node.setAttribute("title", jobId);
  return node;
}

export function runLink(runKey, label) {
  return link(runHash(runKey), label || runKey);
}

/** Pages through a listing: the cursors of the pages before the one shown, so "newer" goes
 *  back and a refresh re-reads the page shown with its own cursor. */
export class Pager {
  constructor() {
    this.reset();
  }

  reset() {
    this.previous = [];
    this.cursor = undefined;
    this.next = null;
  }

  seen(page) {
    this.next = page && page.nextCursor ? page.nextCursor : null;
  }

  controls(reload, label = "items") {
    const older = button(`Next ${label} →`, async () => {
      this.previous.push(this.cursor);
      this.cursor = this.next;
      await reload();
    }, { "data-test": "next-page", disabled: !this.next });
    const newer = button(`← Previous ${label}`, async () => {
      this.cursor = this.previous.pop();
      await reload();
    }, { "data-test": "previous-page", disabled: !this.previous.length });
    const where = this.previous.length ? `page ${this.previous.length + 1}` : "first page";
    return h("div", { class: "pager" }, newer, h("span", { class: "muted" }, where), older);
  }
}

/** Calls `work(item)` for every item, at most `width` at a time; failures become null. */
export async function pooled(items, width, work) {
  const results = new Array(items.length).fill(null);
  let next = 0;
  async function lane() {
    while (next < items.length) {
      const index = next++;
      try {
        results[index] = await work(items[index]);
      } catch {
        results[index] = null;
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, lane));
  return results;
}

/** Reads each job of `jobIds` (once, however many runs name it), at most 4 at a time, into
 *  `into` (job id → job); a job that cannot be read is left out (its id is shown). */
export async function loadJobs(jobIds, into) {
  const unique = [...new Set(jobIds)];
  const found = await pooled(unique, 4, (jobId) => api.getJob(jobId));
  unique.forEach((jobId, index) => found[index] && into.set(jobId, found[index]));
}

/** A button that asks again before it acts: the first click arms it for a few seconds. */
export function confirmButton(label, confirmLabel, action, attributes = {}) {
  let armed = null;
  const node = button(label, async () => {
    if (!armed) {
      node.textContent = confirmLabel;
      node.classList.add("armed");
      armed = setTimeout(() => {
        armed = null;
        node.textContent = label;
        node.classList.remove("armed");
      }, 5000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    node.textContent = label;
    node.classList.remove("armed");
    await action();
  }, attributes);
  return node;
}

/** Pause / resume, trigger now and cancel for one job, each with If-Match on the version
 *  shown: if someone else changed the job since, the API answers 412 and nothing happens. */
export function jobActions(job, ctx, after) {
  const act = (name, verb, call) => async () => {
    try {
      const changed = await call(job.jobId, job.version);
      ctx.notice(`${verb} "${job.name}": now ${changed.state}, version ${changed.version}.`, "ok");
    } catch (error) {
      ctx.notice(explain(error, { action: name, version: job.version }), error.status === 412 ? "conflict" : "error");
    }
    await after();
  };
  const buttons = [];
  if (job.state === "ACTIVE") {
    buttons.push(button("Pause", act("paused", "Paused", api.pause), { "data-test": "pause" }));
  }
  if (job.state === "PAUSED") {
    buttons.push(button("Resume", act("resumed", "Resumed", api.resume), { "data-test": "resume" }));
  }
  if (job.state === "ACTIVE" || job.state === "PAUSED") {
    buttons.push(
      button("Trigger now", async () => {
        try {
          const run = await api.trigger(job.jobId);
          ctx.notice(`Triggered "${job.name}": run `, "ok", runLink(run.runKey));
        } catch (error) {
          ctx.notice(explain(error, { action: "triggered" }), "error");
        }
        await after();
      }, { "data-test": "trigger" }),
      confirmButton("Cancel", "Really cancel?", act("cancelled", "Cancelled", api.cancelJob), {
        "data-test": "cancel",
        class: "danger",
      }),
    );
  }
  return h("span", { class: "actions", "data-job-id": job.jobId }, buttons);
}

/** A text filter bound to `filters[name]`: on change it is trimmed, stored, and `go()` runs
 *  (the page's address takes the filters, so a link shows the same). */
export function filterInput(filters, name, label, go) {
  const input = h("input", { type: "text", name, placeholder: label, "aria-label": label, "data-test": `filter-${name}`, spellcheck: "false" });
  input.value = filters[name];
  on(input, "change", () => {
    filters[name] = input.value.trim();
    go();
  });
  return input;
}

/** A choice among `options` ([value, text] pairs) bound to `filters[name]`, as filterInput. */
export function filterSelect(filters, name, options, label, go) {
  const node = h("select", { name, "aria-label": label, "data-test": `filter-${name}` }, options.map(([value, text]) => {
    const option = h("option", { value }, text);
    option.selected = value === filters[name];
    return option;
  }));
  on(node, "change", () => {
    filters[name] = node.value;
    go();
  });
  return node;
}
