"""Hand-written next-edit cases: JavaScript (see scripts/build_curated_next_edit.py for the format)."""

CONTACT_JS = '''const form = document.querySelector("#contact");

function showError(message) {
  const box = document.querySelector("#error");
  box.textContent = message;
  box.hidden = false;
}

function init() {
  const btn = document.querySelector("#send");
  btn.addEventListener("click", async (event) => {
    event.preventDefault();
    btn.disabled = true;
    try {
      await fetch("/api/contact", { method: "POST", body: new FormData(form) });
    } catch (err) {
      showError(err.message);
    } finally {
      btn.disabled = false;
    }
  });
}

init();
'''

STATS_JS = '''function sum(arr) {
  return arr.reduce((acc, x) => acc + x, 0);
}

function mean(arr) {
  if (arr.length === 0) {
    return NaN;
  }
  return sum(arr) / arr.length;
}

function variance(arr) {
  const m = mean(arr);
  return mean(arr.map((x) => (x - m) ** 2));
}

module.exports = { sum, mean, variance };
'''

SERVER_JS = '''const express = require("express");
const morgan = require("morgan");

const app = express();
app.use(morgan("tiny"));
app.use(express.json());

app.get("/health", (req, res) => {
  res.json({ ok: true });
});

const port = Number(process.env.PORT) || 3000;
const host = process.env.HOST || "0.0.0.0";

app.listen(port, host, () => {
  console.log(`listening on http://${host}:${port}`);
});
'''

BUNDLE_JS = '''const fs = require("fs");
const path = require("path");

function build(entries) {
  const outDir = path.resolve("dist");
  fs.mkdirSync(outDir, { recursive: true });
  for (const entry of entries) {
    const source = fs.readFileSync(entry, "utf8");
    const target = path.join(outDir, path.basename(entry));
    fs.writeFileSync(target, source);
  }
  return outDir;
}

module.exports = { build };
'''

TIMER_JS = '''export function startTimer(opts, onExpire) {
  if (typeof onExpire !== "function") {
    throw new TypeError("onExpire must be a function");
  }
  const timeoutMs = Number(opts.timeout) * 1000;
  return setTimeout(onExpire, timeoutMs);
}

export function cancelTimer(handle) {
  clearTimeout(handle);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
'''

UTILS_JS = '''export function slugify(text) {
  return text
    .toLowerCase()
    .normalize("NFKD")
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
}

export function truncate(text, max) {
  return text.length <= max ? text : text.slice(0, max - 1) + "\\u2026";
}

export function capitalize(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

export function wordCount(text) {
  return text.split(/\\s+/).filter(Boolean).length;
}
'''

APP_JS = '''import { slugify, truncate } from "./utils.js";

const posts = [];

export function addPost(title, body) {
  const post = {
    title,
    slug: slugify(title),
    summary: truncate(body, 140),
    createdAt: new Date(),
  };
  posts.push(post);
  return post;
}

export function findPost(slug) {
  return posts.find((p) => p.slug === slug);
}
'''

TODOS_JS = '''const ADD = "todos/add";
const TOGGLE = "todos/toggle";
const REMOVE = "todos/remove";

export const addTodo = (title) => ({ type: ADD, title });
export const toggleTodo = (id) => ({ type: TOGGLE, id });
export const removeTodo = (id) => ({ type: REMOVE, id });

let nextId = 1;

function newTodo(title) {
  return { id: nextId++, title, done: false };
}

export function visible(todos, filter) {
  if (filter === "done") {
    return todos.filter((t) => t.done);
  }
  if (filter === "open") {
    return todos.filter((t) => !t.done);
  }
  return todos;
}

export function todosReducer(state = [], action) {
  switch (action.type) {
    case ADD:
      return [...state, newTodo(action.title)];
    case TOGGLE:
      return state.map((t) => (t.id === action.id ? { ...t, done: !t.done } : t));
    case REMOVE:
      return state.filter((t) => t.id !== action.id);
    default:
      return state;
  }
}
'''

MEMBER_JS = '''export class Member {
  constructor(name, email) {
    this.name = name;
    this.email = email;
    this.joinedAt = new Date();
  }

  get displayName() {
    return `${this.name} <${this.email}>`;
  }

  toJSON() {
    return { name: this.name, email: this.email, joinedAt: this.joinedAt.toISOString() };
  }
}
'''

PERMS_JS = '''const ADMIN_ROLES = ["owner", "admin"];
const WRITE_ROLES = ["owner", "admin", "editor"];
const READ_ROLES = ["owner", "admin", "editor", "viewer"];

function canAdmin(user) {
  return ADMIN_ROLES.indexOf(user.role) !== -1;
}

function canWrite(user) {
  return WRITE_ROLES.indexOf(user.role) !== -1;
}

function canRead(user) {
  return READ_ROLES.indexOf(user.role) !== -1;
}

module.exports = { canAdmin, canWrite, canRead };
'''

SIGNUP_JS = '''function readForm(form) {
  const nameInput = form.querySelector("#name");
  const phoneInput = form.querySelector("#phone");
  return {
    name: nameInput.value.trim(),
    phone: phoneInput.value.trim(),
  };
}

function resetForm(form) {
  for (const input of form.querySelectorAll("input")) {
    input.value = "";
  }
}

export { readForm, resetForm };
'''

GEOM_JS = '''export function distance(a, b) {
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  return Math.hypot(dx, dy);
}

export function midpoint(a, b) {
  return { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 };
}

export function centroid(points) {
}
'''

NOTIFY_JS = '''const MESSAGES = {
  saved: "Your changes have been saved.",
  failed: "Something went wrong, please try again.",
  offline: "You are offline.",
};

export function notify(kind) {
  const text = MESSAGES[kind] ?? MESSAGES.failed;
  const toast = document.createElement("div");
  toast.className = `toast toast-${kind}`;
  toast.textContent = text;
  document.body.appendChild(toast);
  setTimeout(() => toast.remove(), 4000);
}

export function dismissAll() {
  for (const toast of document.querySelectorAll(".toast")) {
    toast.remove();
  }
}
'''

LIST_JS = '''export function renderList(container, items) {
  container.replaceChildren();
  items.forEach((item) => {
    const row = document.createElement("li");
    row.textContent = item.label;
    container.appendChild(row);
  });
}

export function renderTable(table, items) {
  const body = table.tBodies[0];
  body.replaceChildren();
  items.forEach((item) => {
    const row = body.insertRow();
    row.insertCell().textContent = item.label;
    row.insertCell().textContent = String(item.count);
  });
}
'''

CASES = [
    {
        "id": "js-below-rename-button",
        "category": "next-edit/below",
        "language": "javascript",
        "files_before": {"contact.js": CONTACT_JS},
        "steps": [{"path": "contact.js", "old": '  const btn = document.querySelector("#send");',
                   "new": '  const sendButton = document.querySelector("#send");'}],
        "cursor": {"path": "contact.js", "after": "  const sendButton"},
        "expected": [
            {"path": "contact.js", "old": '  btn.addEventListener("click"',
             "new": '  sendButton.addEventListener("click"'},
            {"path": "contact.js", "old": "    btn.disabled = true;",
             "new": "    sendButton.disabled = true;"},
        ],
        "note": "btn renamed to sendButton; in the region its uses are addEventListener and disabled = true (the "
                "disabled = false in finally is more than 8 lines below, a later step)",
    },
    {
        "id": "js-below-rename-param",
        "category": "next-edit/below",
        "language": "javascript",
        "files_before": {"stats.js": STATS_JS},
        "steps": [{"path": "stats.js", "old": "function mean(arr) {", "new": "function mean(values) {"}],
        "cursor": {"path": "stats.js", "after": "function mean(values"},
        "expected": [
            {"path": "stats.js", "old": "  if (arr.length === 0) {", "new": "  if (values.length === 0) {"},
            {"path": "stats.js", "old": "  return sum(arr) / arr.length;",
             "new": "  return sum(values) / values.length;"},
        ],
        "note": "mean's parameter renamed; its remaining uses, the emptiness check and the return, are in the "
                "region; sum and variance have their own arr",
    },
    {
        "id": "js-below-rename-port",
        "category": "next-edit/below",
        "language": "javascript",
        "files_before": {"server.js": SERVER_JS},
        "steps": [{"path": "server.js", "old": "const port = Number(process.env.PORT)",
                   "new": "const httpPort = Number(process.env.PORT)"}],
        "cursor": {"path": "server.js", "after": "const httpPort"},
        "expected": [
            {"path": "server.js", "old": "app.listen(port, host", "new": "app.listen(httpPort, host"},
            {"path": "server.js", "old": "http://${host}:${port}", "new": "http://${host}:${httpPort}"},
        ],
        "note": "port renamed to httpPort; its remaining uses, app.listen and the log line, are in the region",
    },
    {
        "id": "js-above-options-param",
        "category": "next-edit/above",
        "language": "javascript",
        "files_before": {"bundle.js": BUNDLE_JS},
        "steps": [{"path": "bundle.js", "old": '  const outDir = path.resolve("dist");',
                   "new": '  const outDir = path.resolve(options.outDir ?? "dist");'}],
        "cursor": {"path": "bundle.js", "after": 'options.outDir ?? "dist")'},
        "expected": {"path": "bundle.js", "old": "function build(entries) {", "new": "function build(entries, options = {}) {"},
        "note": "the body now reads options, which build does not take; the signature one line above gets an "
                "options parameter defaulting to {}",
    },
    {
        "id": "js-above-rename-at-use",
        "category": "next-edit/above",
        "language": "javascript",
        "files_before": {"timer.js": TIMER_JS},
        "steps": [{"path": "timer.js", "old": "setTimeout(onExpire, timeoutMs);", "new": "setTimeout(onExpire, delayMs);"}],
        "cursor": {"path": "timer.js", "after": "setTimeout(onExpire, delayMs"},
        "expected": {"path": "timer.js", "old": "  const timeoutMs = Number(opts.timeout)",
                     "new": "  const delayMs = Number(opts.timeout)"},
        "note": "renamed at the use; the declaration on the line above still says timeoutMs",
    },
    {
        "id": "js-jump-export-rename-import",
        "category": "next-edit/jump",
        "language": "javascript",
        "files_before": {"utils.js": UTILS_JS, "app.js": APP_JS},
        "steps": [{"path": "utils.js", "old": "export function slugify(text) {", "new": "export function toSlug(text) {"}],
        "cursor": {"path": "utils.js", "after": "export function toSlug"},
        "expected": {"path": "app.js", "old": 'import { slugify, truncate } from "./utils.js";',
                     "new": 'import { toSlug, truncate } from "./utils.js";'},
        "note": "an exported function renamed; app.js imports it by the old name (the import comes first in "
                "reading order, the call in addPost next)",
    },
    {
        "id": "js-jump-action-reducer-case",
        "category": "next-edit/jump",
        "language": "javascript",
        "files_before": {"todos.js": TODOS_JS},
        "steps": [
            {"path": "todos.js", "old": 'const REMOVE = "todos/remove";\n',
             "new": 'const REMOVE = "todos/remove";\nconst CLEAR_DONE = "todos/clearDone";\n'},
            {"path": "todos.js", "old": "export const removeTodo = (id) => ({ type: REMOVE, id });\n",
             "new": "export const removeTodo = (id) => ({ type: REMOVE, id });\n"
                    "export const clearDone = () => ({ type: CLEAR_DONE });\n"},
        ],
        "cursor": {"path": "todos.js", "after": "({ type: CLEAR_DONE })"},
        "expected": {"path": "todos.js", "old": "      return state.filter((t) => t.id !== action.id);\n",
                     "new": "      return state.filter((t) => t.id !== action.id);\n"
                            "    case CLEAR_DONE:\n      return state.filter((t) => !t.done);\n"},
        "note": "a new action type and creator; the reducer's switch, about 25 lines below, needs its case "
                "(before default)",
    },
    {
        "id": "js-complete-constructor-field",
        "category": "next-edit/complete",
        "language": "javascript",
        "files_before": {"member.js": MEMBER_JS},
        "steps": [{"path": "member.js", "old": "  constructor(name, email) {", "new": "  constructor(name, email, role) {"}],
        "cursor": {"path": "member.js", "after": "constructor(name, email, role"},
        "expected": {"path": "member.js", "old": "    this.email = email;\n",
                     "new": "    this.email = email;\n    this.role = role;\n"},
        "note": "a constructor parameter added; like name and email it is stored on this",
    },
    {
        "id": "js-complete-includes-pattern",
        "category": "next-edit/complete",
        "language": "javascript",
        "files_before": {"perms.js": PERMS_JS},
        "steps": [
            {"path": "perms.js", "old": "return ADMIN_ROLES.indexOf(user.role) !== -1;", "new": "return ADMIN_ROLES.includes(user.role);"},
            {"path": "perms.js", "old": "return WRITE_ROLES.indexOf(user.role) !== -1;", "new": "return WRITE_ROLES.includes(user.role);"},
        ],
        "expected": {"path": "perms.js", "old": "return READ_ROLES.indexOf(user.role) !== -1;",
                     "new": "return READ_ROLES.includes(user.role);"},
        "note": "two of three indexOf checks converted to includes; canRead is the last one",
    },
    {
        "id": "js-complete-pasted-input",
        "category": "next-edit/complete",
        "language": "javascript",
        "files_before": {"signup.js": SIGNUP_JS},
        "steps": [
            {"path": "signup.js", "old": '  const phoneInput = form.querySelector("#phone");\n',
             "new": '  const phoneInput = form.querySelector("#phone");\n  const phoneInput = form.querySelector("#phone");\n'},
            {"path": "signup.js", "old": "  const phoneInput", "new": "  const emailInput", "occurrence": 2},
        ],
        "cursor": {"path": "signup.js", "after": "  const emailInput"},
        "expected": [
            {"path": "signup.js", "old": 'emailInput = form.querySelector("#phone");',
             "new": 'emailInput = form.querySelector("#email");'},
            {"path": "signup.js", "old": "    phone: phoneInput.value.trim(),\n",
             "new": "    phone: phoneInput.value.trim(),\n    email: emailInput.value.trim(),\n"},
        ],
        "note": "a pasted line renamed emailInput; like its neighbours (nameInput -> #name) its selector must "
                "become #email, and like them it is read into the returned object (a few lines below)",
    },
    {
        "id": "js-noise-new-function-body",
        "category": "no-edit/noise",
        "language": "javascript",
        "files_before": {"geom.js": GEOM_JS},
        "steps": [{"path": "geom.js", "old": "export function centroid(points) {\n}",
                   "new": "export function centroid(points) {\n  const n = points.length;\n"
                          "  const x = points.reduce((s, p) => s + p.x, 0) / n;\n"
                          "  const y = points.reduce((s, p) => s + p.y, 0) / n;\n  return { x, y };\n}"}],
        "cursor": {"path": "geom.js", "after": "  return { x, y };"},
        "expected": None,
        "note": "a new function body written to its end; nothing else refers to it yet",
    },
    {
        "id": "js-noise-message-text",
        "category": "no-edit/noise",
        "language": "javascript",
        "files_before": {"notify.js": NOTIFY_JS},
        "steps": [{"path": "notify.js", "old": '"You are offline."', "new": '"You are offline. Changes will sync later."'}],
        "cursor": {"path": "notify.js", "after": "Changes will sync later."},
        "expected": None,
        "note": "a user-facing message reworded; a self-contained change",
    },
    {
        "id": "js-noise-rename-one-callback",
        "category": "no-edit/noise",
        "language": "javascript",
        "files_before": {"list.js": LIST_JS},
        "steps": [
            {"path": "list.js", "old": '    const row = document.createElement("li");', "new": '    const li = document.createElement("li");'},
            {"path": "list.js", "old": "    row.textContent = item.label;", "new": "    li.textContent = item.label;"},
            {"path": "list.js", "old": "    container.appendChild(row);", "new": "    container.appendChild(li);"},
        ],
        "cursor": {"path": "list.js", "after": "container.appendChild(li"},
        "expected": None,
        "note": "renderList's row renamed to li at all three uses; renderTable's row is another variable",
    },
]
