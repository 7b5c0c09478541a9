// Building the page from data. Every value from the API becomes a text node: nothing here
// parses HTML, so a job named "<img src=x onerror=alert(1)>" shows as those characters.

const SVG_NS = "http://www.w3.org/2000/svg";

// Attributes a caller may set. Event handlers and style are not among them: behaviour is
// attached with addEventListener, looks come from console.css through classes.
const SAFE_ATTRIBUTES = new Set([
  "class", "id", "href", "type", "name", "value", "placeholder", "title", "role", "for",
  "autocomplete", "disabled", "hidden", "colspan", "aria-label", "aria-live", "data-state",
  "data-test", "data-run-key", "data-job-id", "maxlength", "required", "spellcheck", "aria-pressed",
]);

function setAttributes(node, attributes) {
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (!SAFE_ATTRIBUTES.has(name)) throw new Error(`attribute not allowed: ${name}`);
    if (name === "href" && !String(value).startsWith("#")) throw new Error("links stay in the console");
    node.setAttribute(name, value === true ? "" : String(value));
  }
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: h("td", {class: "num"}, value, ...). Strings become text nodes. */
export function h(tag, attributes, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attributes);
  return append(node, children);
}

// The one place a link leaves the console: to the AWS console (a run's X-Ray trace), in a
// new tab that cannot reach back into this one.
const AWS_CONSOLE = /^https:\/\/([a-z0-9-]+\.console\.aws\.amazon\.com|console\.amazonaws\.cn|console\.amazonaws-us-gov\.com)\//;

/** A link to `url` on the AWS console, or null for any other URL. */
export function awsConsoleLink(url, attributes, ...children) {
  if (typeof url !== "string" || !AWS_CONSOLE.test(url)) return null;
  const node = h("a", attributes, ...children);
  node.setAttribute("href", url);
  node.setAttribute("target", "_blank");
  node.setAttribute("rel", "noopener noreferrer");
  return node;
}

/** An SVG element. Its attributes are geometry and classes, set one by one. */
export function s(tag, attributes, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null) continue;
    if (name.startsWith("on") || name === "style" || name === "href") {
      throw new Error(`svg attribute not allowed: ${name}`);
    }
    node.setAttribute(name, String(value));
  }
  return append(node, children);
}

export function text(value) {
  return document.createTextNode(value === undefined || value === null ? "" : String(value));
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function replace(node, ...children) {
  return append(clear(node), children);
}

export function on(node, event, handler) {
  node.addEventListener(event, handler);
  return node;
}

/** A button that runs `action` and is disabled while it runs. */
export function button(label, action, attributes = {}) {
  const node = h("button", { type: "button", ...attributes }, label);
  node.addEventListener("click", async (event) => {
    event.preventDefault();
    if (node.disabled) return;
    node.disabled = true;
    try {
      await action(node);
    } finally {
      node.disabled = false;
    }
  });
  return node;
}

/** A link inside the console (hash routing): link("#/jobs/j_1", name). */
export function link(hash, ...children) {
  return h("a", { href: hash }, ...children);
}

export function table(headers, rows, attributes = {}) {
  return h(
    "table",
    attributes,
    h("thead", null, h("tr", null, headers.map((title) => h("th", null, title)))),
    h("tbody", null, rows),
  );
}
