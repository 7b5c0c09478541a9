// Words for what the API answers: schedules, instants, durations. Pure functions of their
// arguments (the current time is passed in), so they read the same everywhere; instants
// are shown in the zone chosen (timeZone), unless one is passed.

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const DAY_NAMES = { SUN: 0, MON: 1, TUE: 2, WED: 3, THU: 4, FRI: 5, SAT: 6 };

export function seconds(total) {
  let rest = Math.round(Math.abs(total));
  const parts = [];
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
  }
  return parts.join(" ") || "0s";
}

/** A lateness or a length: 0s, 12s, 4m 10s (the API's instants are whole seconds). */
export function span(totalSeconds) {
  return (totalSeconds < 0 ? "-" : "") + seconds(totalSeconds);
}

export function parseInstant(value) {
  if (!value) return null;
  const time = Date.parse(value);
  return Number.isNaN(time) ? null : time;
}

// The zone instants are shown in: "utc" (the API's, the default) or "local" (the browser's),
// chosen with the header's toggle and remembered in localStorage.
const ZONE_ITEM = "jobsched.timeZone";

export function timeZone() {
  try {
    return localStorage.getItem(ZONE_ITEM) === "local" ? "local" : "utc";
  } catch {
    return "utc";
  }
}

export function setTimeZone(zone) {
  localStorage.setItem(ZONE_ITEM, zone === "local" ? "local" : "utc");
}

/** What a column of instants says it is in: "UTC", or "local, UTC+01:00" at `at` (ms). */
export function zoneLabel(zone = timeZone(), at = Date.now()) {
  if (zone !== "local") return "UTC";
  const minutes = -new Date(at).getTimezoneOffset();
  const whole = Math.abs(minutes);
  return `local, UTC${minutes < 0 ? "-" : "+"}${pad(Math.floor(whole / 60))}:${pad(whole % 60)}`;
}

/** 2026-11-02 08:00:21Z in UTC; 2026-11-02 09:00:21 in the browser's zone (`zone` "local"),
 *  the same width, so a column or a lane reads alike in either. */
export function instant(value, zone = timeZone()) {
  const time = parseInstant(value);
  if (time === null) return value ? String(value) : "—";
  const at = new Date(time);
  if (zone === "local") {
    const ms = at.getMilliseconds() ? `.${String(at.getMilliseconds()).padStart(3, "0")}` : "";
    return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}${ms}`;
  }
  const text = at.toISOString();
  const whole = text.endsWith(".000Z") ? `${text.slice(0, 19)}Z` : text;
  return whole.replace("T", " ");
}

// Why a run was SKIPPED, by the reason the run records (as `jobsched runs list` says it).
const SKIP_REASONS = {
  overlap: "an earlier run was still open (overlap)",
  paused: "missed while its job was paused",
  misfire: "missed (missedRuns)",
  expired: "older than the catch-up window",
};

/** A SKIPPED run's reason in words, with how many occurrences its record stands for when
 *  more than one; "" for a run in any other state. */
export function skipReason(run) {
  if (run.state !== "SKIPPED") return "";
  const words = run.reason ? `skipped: ${SKIP_REASONS[run.reason] || run.reason}` : "skipped";
  return run.skippedCount > 1 ? `${words} (${run.skippedCount} occurrences)` : words;
}

/** "in 12s", "3m 4s ago". */
export function relative(value, now) {
  const time = parseInstant(value);
  if (time === null) return "";
  const delta = (time - now) / 1000;
  if (Math.abs(delta) < 1) return "now";
  return delta > 0 ? `in ${seconds(delta)}` : `${seconds(-delta)} ago`;
}

function pad(value) {
  return String(value).padStart(2, "0");
}

function isNumber(field) {
  return /^\d+$/.test(field);
}

function clock(hour, minute, second) {
  return `${pad(hour)}:${pad(minute)}${second && second !== "0" ? `:${pad(second)}` : ""}`;
}

function dayOfWeek(field) {
  const names = field.split(",").map((part) => {
    const upper = part.toUpperCase();
    if (upper === "1-5" || upper === "MON-FRI") return "weekdays";
    const index = upper in DAY_NAMES ? DAY_NAMES[upper] : isNumber(part) ? Number(part) % 7 : null;
    return index === null ? null : DAYS[index];
  });
  return names.includes(null) ? null : names.join(", ");
}

/** Common cron shapes in words; null when the expression says more than these. */
export function cronInWords(expression) {
  const fields = expression.trim().split(/\s+/);
  if (fields.length === 1 && fields[0].startsWith("@")) {
    const words = { "@hourly": "every hour", "@daily": "every day at 00:00", "@midnight": "every day at 00:00",
      "@weekly": "every Sunday at 00:00", "@monthly": "on day 1 of every month at 00:00",
      "@yearly": "every 1 January at 00:00", "@annually": "every 1 January at 00:00" };
    return words[fields[0].toLowerCase()] || null;
  }
  if (fields.length !== 5 && fields.length !== 6) return null;
  const [second, minute, hour, dom, month, dow] = fields.length === 6 ? fields : ["0", ...fields];
  const step = (field) => (field === "*" ? 1 : /^\*\/\d+$/.test(field) ? Number(field.slice(2)) : null);
  if (month !== "*") return null;
  const anyDay = dom === "*" && (dow === "*" || dow === "?");
  if (anyDay && hour === "*" && minute === "*") {
    const every = step(second);
    if (every !== null) return every === 1 ? "every second" : `every ${every} seconds`;
    if (isNumber(second) && fields.length === 5) return "every minute";
  }
  if (anyDay && hour === "*" && isNumber(second)) {
    const every = step(minute);
    if (every !== null) return every === 1 ? "every minute" : `every ${every} minutes`;
    if (isNumber(minute)) return `every hour at :${pad(minute)}${second !== "0" ? `:${pad(second)}` : ""}`;
  }
  if (!isNumber(second) || !isNumber(minute)) return null;
  if (anyDay && hour.startsWith("*/")) return `every ${hour.slice(2)} hours at :${pad(minute)}`;
  if (!isNumber(hour)) return null;
  const at = clock(hour, minute, second);
  if (anyDay) return `every day at ${at}`;
  if (dom === "*" || dom === "?") {
    const days = dayOfWeek(dow);
    return days === null ? null : `every ${days} at ${at}`;
  }
  if (isNumber(dom) && (dow === "*" || dow === "?")) return `on day ${dom} of every month at ${at}`;
  return null;
}

/** 1st, 2nd, 3rd, 4th, 11th, 21st... */
function nth(day) {
  const tens = day % 100 >= 11 && day % 100 <= 13;
  const suffix = tens ? "th" : { 1: "st", 2: "nd", 3: "rd" }[day % 10] || "th";
  return `${day}${suffix}`;
}

const ORDINALS = new Set(["1st", "2nd", "3rd", "4th", "5th", "last"]);

/** A calendar rule (`monthly`, as the API writes it back) in words: "the last business day",
 *  "the business day nearest the 26th", "the 2nd Tuesday"; the rule itself when unknown. */
function monthlyInWords(rule) {
  const single = { "last-day": "the last day", "last-weekday": "the last weekday (Monday to Friday)",
    "first-business-day": "the first business day", "last-business-day": "the last business day" };
  if (rule in single) return single[rule];
  const nearest = /^nearest-business-day (\d+)$/.exec(rule);
  if (nearest) return `the business day nearest the ${nth(Number(nearest[1]))}`;
  const [which, day] = rule.split(" ");
  if (ORDINALS.has(which) && day in DAY_NAMES) return `the ${which} ${DAYS[DAY_NAMES[day]]}`;
  return rule;
}

/** One spec in words: a cron, a rate, a calendar rule (with the calendar its business days
 *  leave out) or a one-time instant; null when it is none of them. */
function specInWords(spec) {
  if (spec.cron) {
    const zone = spec.timeZone || "UTC";
    const phrase = cronInWords(spec.cron);
    return phrase ? `${phrase} ${zone} (cron ${spec.cron})` : `cron ${spec.cron} in ${zone}`;
  }
  if (spec.monthly) {
    const holidays = spec.holidays ? `, holidays from calendar ${spec.holidays}` : "";
    return `monthly on ${monthlyInWords(spec.monthly)} at ${spec.at} ${spec.timeZone || "UTC"} (${spec.monthly}${holidays})`;
  }
  if (spec.every !== null && spec.every !== undefined) return `every ${seconds(spec.every)}`;
  if (spec.runAt) return `once at ${instant(spec.runAt)}`;
  return null;
}

/** One exclusion in words: "cron * * * * SAT,SUN in Europe/London", "2026-12-20 to 2027-01-03 in UTC",
 *  "calendar us-holidays (its days in America/New_York)". */
function exclusionInWords(exclusion) {
  if (exclusion.calendar) return `calendar ${exclusion.calendar} (its days in ${exclusion.timeZone || "UTC"})`;
  if (exclusion.cron) return `cron ${exclusion.cron} in ${exclusion.timeZone || "UTC"}`;
  if (exclusion.startDate) return `${exclusion.startDate} to ${exclusion.endDate} in ${exclusion.timeZone || "UTC"}`;
  return `${instant(exclusion.start)} to ${instant(exclusion.end)}`;
}

/** The schedule in words: "every day at 02:00 (cron 0 2 * * *, Europe/London)"; a union's
 * specs joined by "; and ". */
export function schedule(job) {
  const words = Array.isArray(job.specs) && job.specs.length
    ? job.specs.map((spec) => specInWords(spec) || "?").join("; and ")
    : specInWords(job) || "no schedule";
  const bounds = [];
  for (const exclusion of job.exclude || []) bounds.push(`except ${exclusionInWords(exclusion)}`);
  if (job.startAt) bounds.push(`from ${instant(job.startAt)}`);
  if (job.endAt) bounds.push(`until ${instant(job.endAt)}`);
  if (job.maxRuns) bounds.push(`at most ${job.maxRuns} runs`);
  return bounds.length ? `${words}; ${bounds.join(", ")}` : words;
}

/** The value of a result or payload as one line of JSON. */
export function json(value) {
  if (value === undefined) return "";
  return JSON.stringify(value);
}
