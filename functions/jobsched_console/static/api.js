// The HTTP API, as curl calls it: same paths, same headers. The key (local mode) is kept in
// sessionStorage and sent as x-api-key; it never goes into a URL. Behind `jobsched console`
// the local proxy signs the calls and no key is needed.

const KEY_ITEM = "jobsched.apiKey";

export class ApiError extends Error {
  constructor(status, body) {
    const data = body && typeof body === "object" ? body : {};
    const message = data.message || data.Message || (typeof body === "string" && body) || `HTTP ${status}`;
    super(String(message));
    this.status = status;
    this.body = data;
    this.code = String(data.code || (status === 0 ? "unreachable" : `http_${status}`));
    this.errors = Array.isArray(data.errors) ? data.errors : [];
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export function setApiKey(key) {
  sessionStorage.setItem(KEY_ITEM, key);
}

export function forgetApiKey() {
  sessionStorage.removeItem(KEY_ITEM);
}

const unauthenticatedListeners = [];

/** Called with the error whenever the API answers 401 (no key, or a wrong one). */
export function onUnauthenticated(listener) {
  unauthenticatedListeners.push(listener);
}

export async function call(method, path, { body, query, ifMatch } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  const headers = { accept: "application/json" };
  const key = apiKey();
  if (key) headers["x-api-key"] = key;
  if (body !== undefined) headers["content-type"] = "application/json";
  if (ifMatch !== undefined && ifMatch !== null) headers["if-match"] = `"${ifMatch}"`;
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
    });
  } catch (error) {
    throw new ApiError(0, { message: `the API cannot be reached (${error.message})` });
  }
  const raw = await response.text();
  let data = null;
  if (raw) {
    try {
      data = JSON.parse(raw);
    } catch {
      data = raw;
    }
  }
  if (!response.ok) {
    const error = new ApiError(response.status, data);
    if (response.status === 401) unauthenticatedListeners.forEach((listener) => listener(error));
    throw error;
  }
  return data;
}

const segment = encodeURIComponent; // run keys carry ':' and '@'

export const api = {
  listJobs: ({ state, cursor, limit } = {}) => call("GET", "/v1/jobs", { query: { state, cursor, limit } }),
  getJob: (jobId) => call("GET", `/v1/jobs/${segment(jobId)}`),
  summary: (jobId) => call("GET", `/v1/jobs/${segment(jobId)}/summary`),
  createJob: (body) => call("POST", "/v1/jobs", { body }),
  pause: (jobId, version) => call("POST", `/v1/jobs/${segment(jobId)}/pause`, { ifMatch: version }),
  resume: (jobId, version) => call("POST", `/v1/jobs/${segment(jobId)}/resume`, { ifMatch: version }),
  cancelJob: (jobId, version) => call("DELETE", `/v1/jobs/${segment(jobId)}`, { ifMatch: version }),
  trigger: (jobId) => call("POST", `/v1/jobs/${segment(jobId)}/trigger`),
  listRuns: (jobId, { cursor, limit, view } = {}) =>
    call("GET", `/v1/jobs/${segment(jobId)}/runs`, { query: { cursor, limit, view } }),
  listAllRuns: (query = {}) => call("GET", "/v1/runs", { query }),
  getRun: (runKey) => call("GET", `/v1/runs/${segment(runKey)}`),
  redrive: (runKey, reason) =>
    call("POST", `/v1/runs/${segment(runKey)}/redrive`, { body: reason ? { reason } : {} }),
  // body: {reason, dryRun, runKeys} or {reason, dryRun, jobId, errorClass, since, until, cursor}
  bulkDeadLetters: (action, body) => call("POST", `/v1/dead-letters/${action}`, { body }),
  cancelRun: (runKey) => call("POST", `/v1/runs/${segment(runKey)}/cancel`),
  deadLetters: ({ cursor, limit } = {}) => call("GET", "/v1/dead-letters", { query: { cursor, limit } }),
};

/** What a person should read for a failed call, once: "Not <action>: " and the API's
 *  message (with any field error it does not already name), or for a 412 what it means that
 *  the version moved. */
export function explain(error, { action, version } = {}) {
  if (!(error instanceof ApiError)) return String(error && error.message ? error.message : error);
  if (error.status === 412) {
    const current = error.body.currentVersion;
    return (
      `Not ${action || "done"}: someone else changed this job since you loaded it ` +
      `(you saw version ${version ?? "?"}${current !== undefined ? `, it is now version ${current}` : ""}). ` +
      "The page has been refreshed with the current job; look at it again and retry if it still applies."
    );
  }
  // The API's message already names each field and rule; a rule it does not name is added.
  const details = error.errors.map((item) => `${item.field}: ${item.rule}`).filter((text) => !error.message.includes(text));
  const message = `${error.message}${details.length ? ` (${details.join("; ")})` : ""}`;
  return action ? `Not ${action}: ${message}` : message;
}
