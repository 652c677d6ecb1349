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
const calls = { commands: [], decorations: new Map(), shownDocs: [] };
let changeListener, activeEditorListener;
const settings = { "nextEdit.auto": false }; // the rest: the extension's defaults
const editors = new Map(); // uri → editor, for showTextDocument
const vscodeStub = {
  Position, Range, Selection,
  ThemeColor: class { constructor(id) { this.id = id; } },
  MarkdownString: class { constructor() { this.value = ""; } appendCodeblock(c) { this.value += c; return this; } },
  Disposable: class { constructor(f) { this.dispose = f || (() => {}); } },
  Uri: { parse: (s) => ({ toString: () => s }) },
  TextEditorRevealType: { InCenterIfOutsideViewport: 2 },
  window: {
    activeTextEditor: undefined,
    createTextEditorDecorationType: (o) => ({ options: o, dispose() {} }),
    onDidChangeActiveTextEditor: (l) => { activeEditorListener = l; return { dispose() {} }; },
    onDidChangeTextEditorSelection: () => ({ dispose() {} }),
    showTextDocument: async (doc) => {
      calls.shownDocs.push(doc.uri.toString());
      const ed = editors.get(doc.uri.toString()) || makeEditor(doc);
      vscodeStub.window.activeTextEditor = ed;
      activeEditorListener && activeEditorListener(ed); // VS Code tells it like any editor switch
      return ed;
    },
  },
  workspace: {
    textDocuments: [],
    openTextDocument: async (uri) => vscodeStub.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString()),
    onDidChangeTextDocument: (l) => { changeListener = l; return { dispose() {} }; },
    getConfiguration: () => ({ get: (k, d) => (k in settings ? settings[k] : d) }),
  },
  commands: { executeCommand: async (...a) => { calls.commands.push(a); } },
};
const stub = new Proxy(vscodeStub, { get: (t, k) => (k in t ? t[k] : class {}) });
const load = Module._load;
Module._load = function (request, ...rest) { return request === "vscode" ? stub : load.call(this, request, ...rest); };

function makeDoc(text, uri = "file:///ws/calc.py") {
  const doc = {
    text, version: 1, languageId: "python", uri: { toString: () => uri },
    get lineCount() { return doc.text.split("\n").length; },
    lineAt(n) { const l = doc.text.split("\n")[n]; return { text: l, range: new Range(n, 0, n, l.length) }; },
    offsetAt(p) { const ls = doc.text.split("\n"); let o = 0; for (let i = 0; i < p.line; i++) o += ls[i].length + 1; return o + p.character; },
    positionAt(o) { const before = doc.text.slice(0, o).split("\n"); return new Position(before.length - 1, before[before.length - 1].length); },
    getText(r) { return doc.text.slice(doc.offsetAt(r.start), doc.offsetAt(r.end)); },
  };
  return doc;
}
function makeEditor(doc) {
  const editor = {
    document: doc, selection: new Selection(new Position(1, 11), new Position(1, 11)), decos: new Map(),
    setDecorations(type, ranges) { calls.decorations.set(type, ranges); editor.decos.set(type, ranges); },
    revealRange() {},
    async edit(cb) {
      cb({ replace(r, t) { const a = doc.offsetAt(r.start), b = doc.offsetAt(r.end); doc.text = doc.text.slice(0, a) + t + doc.text.slice(b); } });
      doc.version += 1;
      changeListener && changeListener({ document: doc, contentChanges: [{}] });
      return true;
    },
  };
  editors.set(doc.uri.toString(), editor);
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
  let replies = [{ edits: [edit] }]; // the server's next answers to copilotInlineEdit, then no edit
  const lc = {
    sendRequest: async (method, params) => {
      const name = typeof method === "string" ? method : method.method;
      sent.push([name, params]);
      if (name === "workspace/executeCommand") {
        timeline.push(["accept", doc.text]);
        await new Promise((r) => setTimeout(r, 5)); // the server answers once the accept is stored
      }
      return typeof method === "string" ? (replies.shift() || { edits: [] }) : null;
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
  // chain: the accept asked for the next edit at once, where it left the cursor, for the accepted text
  assert.strictEqual(await ctl.chain, false, "the chain's request answered (no edit)");
  const asks = sent.filter((s) => s[0] === "textDocument/copilotInlineEdit");
  assert.strictEqual(asks.length, 2);
  assert.deepStrictEqual(asks[1][1], { textDocument: { uri: "file:///ws/calc.py", version: 2 }, position: { line: 3, character: 6 } });

  // a stale reply (document changed while waiting) is not shown
  const send0 = lc.sendRequest;
  lc.sendRequest = async () => { doc.version += 1; return { edits: [edit] }; };
  assert.strictEqual(await ctl.request(editor), false, "stale reply dropped");
  assert.strictEqual(await ctl.accept(), false, "nothing to accept");
  lc.sendRequest = send0;

  await jumps(ext, ctl, lc, sent, (r) => { replies = r; });
  ctl.dispose();
  console.log("vscode smoke: ok");
}

// Jump targets and chains: a far edit / one in another document shows a marker after the cursor's line;
// accepting goes there (cursor, editor) and draws it; accepting again applies it and asks for the next.
async function jumps(ext, ctl, lc, sent, setReplies) {
  const A = "file:///ws/a.py", B = "file:///ws/other.py";
  // the client's own test of "far": more than 8 lines below, 6 above, or another document
  const at = (line, extra = {}) => ({ text: "", range: { start: { line, character: 0 }, end: { line, character: 0 } }, textDocument: { uri: A, version: 1 }, ...extra });
  assert.deepStrictEqual([58, 59, 44, 43].map((l) => ext.isJump(at(l), A, 50)), [false, true, false, true]);
  assert.strictEqual(ext.isJump(at(50, { jump: true }), A, 50), true);
  assert.strictEqual(ext.isJump(at(50, { textDocument: { uri: B, version: 1 } }), A, 50), true);
  assert.strictEqual(ext.jumpLabel(at(119), A), "  ⇥ next edit: L120");
  assert.strictEqual(ext.jumpLabel(at(11, { textDocument: { uri: B, version: 1 } }), A), "  ⇥ next edit: other.py:12");

  const aLines = Array.from({ length: 130 }, (_, i) => `v${i} = ${i}`);
  aLines[119] = "old = 1";
  const bLines = Array.from({ length: 20 }, (_, i) => `w${i} = ${i}`);
  bLines[11] = "y = old";
  const docA = makeDoc(aLines.join("\n") + "\n", A), docB = makeDoc(bLines.join("\n") + "\n", B);
  vscodeStub.workspace.textDocuments = [docA, docB];
  const edA = makeEditor(docA);
  editors.delete(B); // other.py has no editor yet: the jump opens one
  edA.selection = new Selection(new Position(0, 0), new Position(0, 0));
  vscodeStub.window.activeTextEditor = edA;
  const reply = (uri, l0, c0, l1, c1, text, extra = {}) => ({ edits: [{
    text, range: { start: { line: l0, character: c0 }, end: { line: l1, character: c1 } },
    textDocument: { uri, version: 1 }, command: { title: "accept", command: "editServer.accept", arguments: [{ id: text }] }, ...extra }] });
  const decos = (ed) => [...ed.decos.values()].filter((d) => d.length);
  const markerOf = (ed) => decos(ed).filter((d) => d[0].renderOptions && d[0].renderOptions.after.contentText.includes("⇥"));
  const nbsp = (t) => t.replace(/ /g, "\u00a0");
  const context = (key) => { const c = calls.commands.filter((x) => x[0] === "setContext" && x[1] === key); return c.length ? c[c.length - 1][2] : undefined; };
  const shows = () => sent.filter((x) => x[0] === "textDocument/didShowInlineEdit").length;
  const asks = () => sent.filter((x) => x[0] === "textDocument/copilotInlineEdit");

  // 1) 119 lines below, no flag: only the marker, after the cursor's line
  setReplies([reply(A, 119, 0, 119, 3, "new")]);
  let shows0 = shows();
  assert.strictEqual(await ctl.request(edA), true, "far edit shown as a marker");
  let m = markerOf(edA);
  assert.strictEqual(m.length, 1);
  assert.deepStrictEqual([m[0][0].range.start, m[0][0].range.end], [new Position(0, 6), new Position(0, 6)]); // end of "v0 = 0"
  assert.strictEqual(m[0][0].renderOptions.after.contentText, nbsp("  ⇥ next edit: L120"));
  assert.strictEqual(decos(edA).length, 1, "the edit itself is not drawn");
  assert.strictEqual(shows(), shows0 + 1, "didShowInlineEdit for the marker");
  assert.strictEqual(context("editServer.jumpShown"), true);
  assert.strictEqual(context("editServer.editShown"), true); // Escape dismisses it
  // 2) accept (Tab / Alt+Enter) jumps: cursor on the edit, drawn there, not applied
  assert.strictEqual(await ctl.accept(), false, "jumped, not accepted");
  assert.deepStrictEqual(edA.selection.active, new Position(119, 0));
  assert.strictEqual(markerOf(edA).length, 0);
  const del = decos(edA).find((d) => !d[0].renderOptions), ins = decos(edA).find((d) => d[0].renderOptions);
  assert.ok(del && ins, "drawn in place after the jump");
  assert.deepStrictEqual([del[0].range.start, del[0].range.end], [new Position(119, 0), new Position(119, 3)]);
  assert.strictEqual(ins[0].renderOptions.after.contentText, "new");
  assert.strictEqual(docA.lineAt(119).text, "old = 1");
  assert.strictEqual(context("editServer.jumpShown"), true, "Tab accepts the edit it led to");
  assert.strictEqual(shows(), shows0 + 1, "no second didShowInlineEdit");
  // 3) accept again: applied; the chain asks at once at the new cursor → an edit in other.py (no flag)
  setReplies([reply(B, 11, 4, 11, 7, "new")]);
  assert.strictEqual(await ctl.accept(), true, "accepted");
  assert.strictEqual(docA.lineAt(119).text, "new = 1");
  assert.strictEqual(await ctl.chain, true, "chain: next edit shown");
  assert.deepStrictEqual(asks()[asks().length - 1][1], { textDocument: { uri: A, version: 2 }, position: { line: 119, character: 3 } });
  m = markerOf(edA);
  assert.strictEqual(m.length, 1);
  assert.strictEqual(m[0][0].renderOptions.after.contentText, nbsp("  ⇥ next edit: other.py:12"));
  assert.strictEqual(m[0][0].range.start.line, 119);
  // 4) accept: other.py opened in an editor, cursor on the edit, drawn there
  assert.strictEqual(await ctl.accept(), false, "jumped to other.py");
  assert.deepStrictEqual(calls.shownDocs, [B]);
  const edB = editors.get(B);
  assert.ok(edB && vscodeStub.window.activeTextEditor === edB);
  assert.deepStrictEqual(edB.selection.active, new Position(11, 4));
  assert.strictEqual(decos(edA).length, 0, "nothing left in a.py");
  assert.ok(decos(edB).some((d) => d[0].renderOptions && d[0].renderOptions.after.contentText === "new"));
  // 5) accept in other.py; the chain asks there (nothing more)
  assert.strictEqual(await ctl.accept(), true, "accepted in other.py");
  assert.strictEqual(docB.lineAt(11).text, "y = new");
  assert.strictEqual(await ctl.chain, false);
  assert.deepStrictEqual(asks()[asks().length - 1][1], { textDocument: { uri: B, version: 2 }, position: { line: 11, character: 7 } });
  // 6) a flagged jump one line below is a marker too; dismiss (Escape) drops it, nothing moves
  setReplies([reply(B, 12, 0, 12, 8, "w12 = 13", { jump: true })]);
  assert.strictEqual(await ctl.request(edB), true);
  assert.strictEqual(markerOf(edB)[0][0].renderOptions.after.contentText, nbsp("  ⇥ next edit: L13"));
  assert.strictEqual(decos(edB).length, 1);
  ctl.dismiss();
  assert.strictEqual(decos(edB).length, 0);
  assert.deepStrictEqual(edB.selection.active, new Position(11, 7));
  assert.strictEqual(context("editServer.jumpShown"), false);
  // 7) a near edit is drawn in place as before; with nextEdit.chain = false accepting asks nothing more
  settings["nextEdit.chain"] = false;
  ctl.chain = undefined;
  setReplies([reply(B, 11, 4, 11, 7, "newer")]);
  assert.strictEqual(await ctl.request(edB), true);
  assert.strictEqual(markerOf(edB).length, 0);
  assert.strictEqual(context("editServer.jumpShown"), false, "Tab keeps its meaning for near edits");
  const n = asks().length;
  assert.strictEqual(await ctl.accept(), true);
  assert.strictEqual(docB.lineAt(11).text, "y = newer");
  await new Promise((r) => setTimeout(r, 20));
  assert.strictEqual(ctl.chain, undefined);
  assert.strictEqual(asks().length, n, "no request after the accept");
  delete settings["nextEdit.chain"];

  // 8) where the cursor rests: after a move to another line with the text unchanged (a jump), once it stayed
  // there cursorRestMs; typing (a new version) and moves inside the line send nothing
  settings.cursorRestMs = 10;
  const rested = [];
  const rest = new ext.CursorRest((uri, position) => rested.push([uri, position]));
  const docR = makeDoc("a = 1\nb = 2\nc = 3\nd = 4\n", "file:///ws/rest.py");
  const edR = makeEditor(docR);
  vscodeStub.window.activeTextEditor = edR;
  const wait = () => new Promise((r) => setTimeout(r, 40));
  const moveTo = (line, ch) => { edR.selection = new Selection(new Position(line, ch), new Position(line, ch)); rest.moved(edR); };
  moveTo(1, 2);
  await wait();
  assert.deepStrictEqual(rested, [["file:///ws/rest.py", { line: 1, character: 2 }]]);
  moveTo(1, 4); // the same line
  docR.version += 1;
  moveTo(2, 0); // typing (Enter): the text changed
  await wait();
  assert.strictEqual(rested.length, 1);
  moveTo(0, 1); // two jumps in a row: only where it stays
  moveTo(3, 3);
  await wait();
  assert.deepStrictEqual(rested.slice(1), [["file:///ws/rest.py", { line: 3, character: 3 }]]);
  settings.cursorRestMs = 0; // off
  moveTo(0, 0);
  await wait();
  assert.strictEqual(rested.length, 2);
  rest.dispose();
  delete settings.cursorRestMs;
}
main().catch((e) => { console.error(e); process.exit(1); });
