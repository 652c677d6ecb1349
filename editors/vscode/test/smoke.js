// Runs the compiled extension's next-edit logic under a stub `vscode` module (VS Code itself can't be
// fetched here): `npm run compile && node test/smoke.js`. Exits non-zero on the first failed check.
"use strict";
const Module = require("module");
const assert = require("assert");
const path = require("path");

class Position { constructor(line, character) { this.line = line; this.character = character; } }
class Range {
  constructor(a, b, c, d) {
    if (a instanceof Position) { this.start = a; this.end = b; } else { this.start = new Position(a, b); this.end = new Position(c, d); }
  }
  get isEmpty() { return this.start.line === this.end.line && this.start.character === this.end.character; }
}
class Selection extends Range { constructor(anchor, active) { super(anchor, active); this.anchor = anchor; this.active = active; } }
const calls = { commands: [], decorations: new Map() };
let changeListener;
const vscodeStub = {
  Position, Range, Selection,
  ThemeColor: class { constructor(id) { this.id = id; } },
  MarkdownString: class { constructor() { this.value = ""; } appendCodeblock(c) { this.value += c; return this; } },
  Disposable: class { constructor(f) { this.dispose = f || (() => {}); } },
  window: {
    createTextEditorDecorationType: (o) => ({ options: o, dispose() {} }),
    onDidChangeActiveTextEditor: () => ({ dispose() {} }),
  },
  workspace: {
    onDidChangeTextDocument: (l) => { changeListener = l; return { dispose() {} }; },
    getConfiguration: () => ({ get: (k, d) => (k === "nextEdit.auto" ? false : d) }),
  },
  commands: { executeCommand: async (...a) => { calls.commands.push(a); } },
};
const stub = new Proxy(vscodeStub, { get: (t, k) => (k in t ? t[k] : class {}) });
const load = Module._load;
Module._load = function (request, ...rest) { return request === "vscode" ? stub : load.call(this, request, ...rest); };

function makeDoc(text) {
  const doc = {
    text, version: 1, languageId: "python", uri: { toString: () => "file:///ws/calc.py" },
    offsetAt(p) { const ls = doc.text.split("\n"); let o = 0; for (let i = 0; i < p.line; i++) o += ls[i].length + 1; return o + p.character; },
    positionAt(o) { const before = doc.text.slice(0, o).split("\n"); return new Position(before.length - 1, before[before.length - 1].length); },
    getText(r) { return doc.text.slice(doc.offsetAt(r.start), doc.offsetAt(r.end)); },
  };
  return doc;
}
function makeEditor(doc) {
  const editor = {
    document: doc, selection: new Selection(new Position(1, 11), new Position(1, 11)),
    setDecorations(type, ranges) { calls.decorations.set(type, ranges); },
    async edit(cb) {
      cb({ replace(r, t) { const a = doc.offsetAt(r.start), b = doc.offsetAt(r.end); doc.text = doc.text.slice(0, a) + t + doc.text.slice(b); } });
      doc.version += 1;
      changeListener && changeListener({ document: doc, contentChanges: [{}] });
      return true;
    },
  };
  return editor;
}

async function main() {
  const ext = require(path.join(__dirname, "..", "out", "extension.js"));
  // settings the user set (any scope) → nested initializationOptions; defaults and client-only keys stay out
  const pkg = require(path.join(__dirname, "..", "package.json"));
  const keys = ext.settingKeys(pkg);
  assert.ok(keys.includes("gate.threshold") && keys.includes("limits.maxLineChars") && keys.includes("command"));
  const set = { model: { globalValue: "tiny-random" }, "gate.enabled": { workspaceValue: false },
    "gate.threshold": { globalValue: 0.5, workspaceFolderValue: 0.3 }, "limits.maxLineChars": { globalValue: 500 },
    exclude: { workspaceValue: ["**/*.log"] }, command: { globalValue: ["/x/edit-server"] }, "nextEdit.delayMs": { globalValue: 9 } };
  const cfg = { inspect: (k) => ({ key: k, defaultValue: 1, ...(set[k] || {}) }) };
  assert.deepStrictEqual(ext.initializationOptions(cfg, keys), {
    model: "tiny-random", gate: { enabled: false, threshold: 0.3 }, exclude: ["**/*.log"], limits: { maxLineChars: 500 } });
  // status bar: the state, and why the last suggestion was hidden (kept across later status updates)
  assert.strictEqual(ext.statusBar({ state: "ready", message: "idle" }, "").text, "$(sparkle) edit-server");
  const hid = ext.statusBar({ state: "ready", message: "idle" }, "fim hidden by the gate: score 0.08 < 0.50");
  assert.strictEqual(hid.text, "$(eye-closed) edit-server");
  assert.ok(hid.tooltip.startsWith("fim hidden by the gate: score 0.08 < 0.50") && hid.tooltip.includes("gate.enabled"));
  assert.strictEqual(ext.statusBar({ state: "error", message: "boom" }, "x").text, "$(error) edit-server");
  assert.ok(ext.statusBar({ state: "ready" }, "no fim: model output empty after filtering").tooltip.includes("tiny-random"));

  const sent = [];
  const timeline = []; // what the server would see, in order
  const edit = {
    text: "x = 42", range: { start: { line: 3, character: 0 }, end: { line: 3, character: 5 } },
    textDocument: { uri: "file:///ws/calc.py", version: 1 },
    command: { title: "accept", command: "editServer.accept", arguments: [{ id: "e1", kind: "edit", score: 0.8 }] },
  };
  const lc = {
    sendRequest: async (method, params) => {
      const name = typeof method === "string" ? method : method.method;
      sent.push([name, params]);
      if (name === "workspace/executeCommand") {
        timeline.push(["accept", doc.text]);
        await new Promise((r) => setTimeout(r, 5)); // the server answers once the accept is stored
      }
      return typeof method === "string" ? { edits: [edit] } : null;
    },
    sendNotification: async (method, params) => { sent.push([method, params]); },
    code2ProtocolConverter: { asPosition: (p) => ({ line: p.line, character: p.character }) },
    protocol2CodeConverter: { asRange: (r) => new Range(r.start.line, r.start.character, r.end.line, r.end.character) },
    debug() {},
  };
  const doc = makeDoc("def add(a, b):\n    return a + b\n\nx = 1\n");
  const editor = makeEditor(doc);
  const edit0 = editor.edit.bind(editor);
  editor.edit = async (cb) => { const ok = await edit0(cb); timeline.push(["change", doc.text]); return ok; };
  const ctl = new ext.NextEditController(lc);
  assert.strictEqual(await ctl.request(editor), true, "edit shown");
  assert.deepStrictEqual(sent[0], ["textDocument/copilotInlineEdit", { textDocument: { uri: "file:///ws/calc.py", version: 1 }, position: { line: 1, character: 11 } }]);
  assert.strictEqual(sent[1][0], "textDocument/didShowInlineEdit");
  const decos = [...calls.decorations.values()];
  const del = decos.find((d) => d.length && !d[0].renderOptions);
  const ins = decos.find((d) => d.length && d[0].renderOptions);
  assert.ok(del && ins, "a deletion and an insertion decoration");
  assert.deepStrictEqual([del[0].range.start, del[0].range.end], [new Position(3, 4), new Position(3, 5)]); // "1"
  assert.strictEqual(ins[0].renderOptions.after.contentText, "42");
  assert.ok(calls.commands.some((c) => c[0] === "setContext" && c[1] === "editServer.editShown" && c[2] === true));

  assert.strictEqual(await ctl.accept(), true, "accepted");
  assert.strictEqual(doc.text, "def add(a, b):\n    return a + b\n\nx = 42\n");
  assert.deepStrictEqual(editor.selection.active, new Position(3, 6));
  const exec = sent.find((s) => s[0] === "workspace/executeCommand");
  assert.ok(exec && exec[1].command === "editServer.accept" && exec[1].arguments[0].id === "e1");
  // the accept reached the server (and was answered) before the document changed: else it is logged
  // as typed over (rejected) first — tests/e2e/test_editor_clients.py checks that on the feedback store
  assert.deepStrictEqual(timeline.map((t) => t[0]), ["accept", "change"]);
  assert.strictEqual(timeline[0][1], "def add(a, b):\n    return a + b\n\nx = 1\n");
  assert.ok([...calls.decorations.values()].every((d) => d.length === 0), "decorations cleared");

  // a stale reply (document changed while waiting) is not shown
  lc.sendRequest = async () => { doc.version += 1; return { edits: [edit] }; };
  assert.strictEqual(await ctl.request(editor), false, "stale reply dropped");
  assert.strictEqual(await ctl.accept(), false, "nothing to accept");
  ctl.dispose();
  console.log("vscode smoke: ok");
}
main().catch((e) => { console.error(e); process.exit(1); });
