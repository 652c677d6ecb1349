// edit-server for VS Code: starts `edit-server` on stdio through vscode-languageclient 11.
// - inline completions (FIM): LSP 3.18 textDocument/inlineCompletion, wired by the client library;
//   accepting an item runs its `editServer.accept` command on the server (workspace/executeCommand).
// - next edits: textDocument/copilotInlineEdit, rendered here with decorations (deleted text struck
//   through, inserted text shown after it), accepted or dismissed with commands. An edit far from the
//   cursor or in another document (a jump) shows as a marker after the cursor's line instead; accepting
//   goes there first, then accepts. After an accept the next edit is asked for at once (a chain).
import * as vscode from "vscode";
import {
  CancellationTokenSource,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from "vscode-languageclient/node";

const INLINE_EDIT = "textDocument/copilotInlineEdit";
const DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit";
const STATUS = "$/editServer/status";
const CURSOR_REST = "$/editServer/cursorRest";
const CONTEXT_KEY = "editServer.editShown";
/** A jump marker shows, or the edit it led to: Tab goes there, then accepts. */
const JUMP_CONTEXT_KEY = "editServer.jumpShown";
/** An edit starting more than this many lines below / above the cursor is a jump target. */
const JUMP_BELOW = 8;
const JUMP_ABOVE = 6;

interface LspPosition { line: number; character: number }
interface LspRange { start: LspPosition; end: LspPosition }
interface LspCommand { title: string; command: string; arguments?: unknown[] }
interface InlineEdit {
  text: string;
  range: LspRange;
  textDocument: { uri: string; version: number };
  command?: LspCommand;
  jump?: boolean; // away from the cursor (or in another document): shown as a marker to go to
}
interface InlineEditResult { edits: InlineEdit[] }
interface Status {
  state: "loading" | "ready" | "busy" | "degraded" | "error";
  message?: string;
  hidden?: string; // why the last suggestion was not shown ("" = it was); absent = unchanged
}

/** Settings of the extension itself, not sent to the server. */
export const CLIENT_ONLY = new Set(["command", "nextEdit.auto", "nextEdit.delayMs", "nextEdit.chain", "cursorRestMs"]);

let client: LanguageClient | undefined;
let nextEdits: NextEditController | undefined;
let rest: CursorRest | undefined;

/** The server settings the user set (any scope) → nested initializationOptions (camelCase), from the
 * keys package.json contributes (generated from the server's settings struct). Settings left at their
 * default are not sent: the server's defaults, and its command line, apply. */
export function initializationOptions(cfg: vscode.WorkspaceConfiguration, keys: string[]): Record<string, unknown> {
  const opts: Record<string, unknown> = {};
  for (const key of keys) {
    if (CLIENT_ONLY.has(key)) continue;
    const seen = cfg.inspect(key);
    const value = seen && [seen.workspaceFolderLanguageValue, seen.workspaceLanguageValue, seen.globalLanguageValue,
      seen.workspaceFolderValue, seen.workspaceValue, seen.globalValue].find((v) => v !== undefined);
    if (value === undefined || value === null) continue;
    const path = key.split(".");
    let node = opts;
    for (const part of path.slice(0, -1)) node = (node[part] ??= {}) as Record<string, unknown>;
    node[path[path.length - 1]] = value;
  }
  return opts;
}

/** `editServer.*` setting names (without the prefix) that package.json contributes. */
export function settingKeys(packageJSON: { contributes?: { configuration?: { properties?: object } } }): string[] {
  return Object.keys(packageJSON.contributes?.configuration?.properties ?? {})
    .filter((k) => k.startsWith("editServer."))
    .map((k) => k.slice("editServer.".length));
}

function createClient(output: vscode.LogOutputChannel, keys: string[]): LanguageClient {
  const cfg = vscode.workspace.getConfiguration("editServer");
  const [command, ...args] = cfg.get<string[]>("command", ["edit-server"]);
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    initializationOptions: initializationOptions(cfg, keys),
    outputChannel: output,
  };
  return new LanguageClient("editServer", "edit-server", serverOptions, clientOptions);
}

/** Whether `edit`, answered for the cursor on `line` of the document `uri`, is a jump: flagged by the server,
 * in another document, or starting more than JUMP_BELOW lines below / JUMP_ABOVE above the cursor. */
export function isJump(edit: InlineEdit, uri: string, line: number): boolean {
  if (edit.jump === true) return true;
  if (edit.textDocument?.uri && edit.textDocument.uri !== uri) return true;
  const start = edit.range.start.line;
  return start > line + JUMP_BELOW || start < line - JUMP_ABOVE;
}

/** The marker's text: "  ⇥ next edit: L120" (this document) or "  ⇥ next edit: other.py:12". */
export function jumpLabel(edit: InlineEdit, uri: string): string {
  const line = edit.range.start.line + 1;
  const target = edit.textDocument?.uri;
  if (!target || target === uri) return `  ⇥ next edit: L${line}`;
  const name = target.replace(/[?#].*$/, "").split("/").pop() || target;
  let base = name;
  try {
    base = decodeURIComponent(name);
  } catch {
    // keep it encoded
  }
  return `  ⇥ next edit: ${base}:${line}`;
}

interface Shown {
  editor: vscode.TextEditor;
  edit: InlineEdit;
  version: number;
  range: vscode.Range;
  /** a jump target not drawn yet: the target document's version when the reply came (when open) */
  jump?: { version?: number };
}

export class NextEditController implements vscode.Disposable {
  private readonly deleted = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    textDecoration: "line-through",
  });
  private readonly inserted = vscode.window.createTextEditorDecorationType({
    after: {
      color: new vscode.ThemeColor("editorGhostText.foreground"),
      backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
    },
  });
  private readonly marker = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorCodeLens.foreground"), fontStyle: "italic" },
  });
  private shown: Shown | undefined;
  private pending: CancellationTokenSource | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** the document version an accept left when it asked for the next edit itself (no second, delayed ask) */
  private chained: { doc: vscode.TextDocument; version: number } | undefined;
  /** the request an accept made for the next edit (chain), for tests and callers that wait on it */
  chain: Promise<boolean> | undefined;
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(private readonly lc: LanguageClient) {
    this.subscriptions.push(
      vscode.workspace.onDidChangeTextDocument((e) => this.onChange(e)),
      // another editor: drop the suggestion, unless it is the one a jump just went to
      vscode.window.onDidChangeActiveTextEditor((ed) => {
        if (!this.shown || ed?.document !== this.shown.editor.document) this.dismiss();
      }),
    );
  }

  private onChange(e: vscode.TextDocumentChangeEvent): void {
    if (e.contentChanges.length === 0) return;
    // a suggestion made for the text as it is now stays (the change event may come after the reply of the
    // request an accept sent at once)
    if (this.shown && this.shown.editor.document === e.document && this.shown.version !== e.document.version) {
      this.dismiss();
    }
    if (this.chained && this.chained.doc === e.document && this.chained.version === e.document.version) return;
    const cfg = vscode.workspace.getConfiguration("editServer");
    const editor = vscode.window.activeTextEditor;
    if (!cfg.get<boolean>("nextEdit.auto", true) || !editor || editor.document !== e.document) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.request(editor), cfg.get<number>("nextEdit.delayMs", 400));
  }

  /** Ask the server for a next edit at the cursor; newer requests cancel older ones. */
  async request(editor: vscode.TextEditor): Promise<boolean> {
    this.pending?.cancel();
    const source = (this.pending = new CancellationTokenSource());
    const doc = editor.document;
    const version = doc.version;
    const params = {
      textDocument: { uri: doc.uri.toString(), version },
      position: this.lc.code2ProtocolConverter.asPosition(editor.selection.active),
    };
    let result: InlineEditResult | null;
    try {
      result = await this.lc.sendRequest<InlineEditResult | null>(INLINE_EDIT, params, source.token);
    } catch (err) {
      if (!source.token.isCancellationRequested) this.lc.debug(`${INLINE_EDIT} failed: ${String(err)}`);
      return false;
    }
    if (source.token.isCancellationRequested || doc.version !== version) return false;
    const edit = result?.edits?.[0];
    if (!edit) return false;
    const line = params.position.line;
    const shown = isJump(edit, doc.uri.toString(), line)
      ? this.showJump(editor, edit, version, line)
      : this.show(editor, edit, version);
    if (shown) void this.lc.sendNotification(DID_SHOW_INLINE_EDIT, { item: edit });
    return shown;
  }

  /** The document of `uri` when it is open. */
  private openDocument(uri: string): vscode.TextDocument | undefined {
    return vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
  }

  /** A jump target: a marker after the cursor's line; the edit is drawn once the user goes there. */
  private showJump(editor: vscode.TextEditor, edit: InlineEdit, version: number, line: number): boolean {
    this.dismiss();
    const uri = editor.document.uri.toString();
    const target = edit.textDocument?.uri && edit.textDocument.uri !== uri ? this.openDocument(edit.textDocument.uri)
      : editor.document;
    const range = this.lc.protocol2CodeConverter.asRange(edit.range);
    if (target && target.getText(range) === edit.text) return false; // changes nothing
    const at = editor.document.lineAt(Math.min(line, editor.document.lineCount - 1)).range.end;
    editor.setDecorations(this.marker, [{
      range: new vscode.Range(at, at),
      hoverMessage: new vscode.MarkdownString().appendCodeblock(edit.text, editor.document.languageId),
      renderOptions: { after: { contentText: jumpLabel(edit, uri).replace(/ /g, "\u00a0") } },
    }]);
    this.shown = { editor, edit, version, range, jump: { version: target?.version } };
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, true);
    void vscode.commands.executeCommand("setContext", JUMP_CONTEXT_KEY, true);
    return true;
  }

  /** Go to the shown jump target: the cursor moves to the edit's start (opening its document if it is
   * another one) and the edit is drawn there; accepting it is the next step. */
  async jump(): Promise<boolean> {
    const shown = this.shown;
    if (!shown?.jump) return false;
    this.dismiss();
    if (shown.editor.document.version !== shown.version) return false;
    const uri = shown.edit.textDocument?.uri;
    let editor = shown.editor;
    if (uri && uri !== editor.document.uri.toString()) {
      try {
        const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(uri));
        if (shown.jump.version !== undefined && doc.version !== shown.jump.version) return false; // changed since
        editor = await vscode.window.showTextDocument(doc);
      } catch (err) {
        this.lc.debug(`next edit: cannot open ${uri}: ${String(err)}`);
        return false;
      }
    }
    const range = this.lc.protocol2CodeConverter.asRange(shown.edit.range);
    editor.selection = new vscode.Selection(range.start, range.start);
    editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
    if (!this.show(editor, shown.edit, editor.document.version)) return false;
    void vscode.commands.executeCommand("setContext", JUMP_CONTEXT_KEY, true);
    return true;
  }

  private show(editor: vscode.TextEditor, edit: InlineEdit, version: number): boolean {
    this.dismiss();
    const range = this.lc.protocol2CodeConverter.asRange(edit.range);
    const old = editor.document.getText(range);
    if (old === edit.text) return false;
    const doc = editor.document;
    // trim the common prefix/suffix so only the changed part is decorated
    let p = 0;
    while (p < old.length && p < edit.text.length && old[p] === edit.text[p]) p++;
    let s = 0;
    while (s < old.length - p && s < edit.text.length - p && old[old.length - 1 - s] === edit.text[edit.text.length - 1 - s]) s++;
    const base = doc.offsetAt(range.start);
    const delRange = new vscode.Range(doc.positionAt(base + p), doc.positionAt(base + old.length - s));
    const ins = edit.text.slice(p, edit.text.length - s);
    const lines = ins.split("\n");
    const hover = new vscode.MarkdownString().appendCodeblock(edit.text, doc.languageId);
    const label = lines.length > 1 ? `${lines[0]} ⏎ … (+${lines.length - 1} lines)` : lines[0];
    editor.setDecorations(this.deleted, delRange.isEmpty ? [] : [{ range: delRange, hoverMessage: hover }]);
    editor.setDecorations(this.inserted, ins === "" ? [] : [{
      range: new vscode.Range(delRange.end, delRange.end),
      hoverMessage: hover,
      renderOptions: { after: { contentText: label.replace(/ /g, "\u00a0") } },
    }]);
    this.shown = { editor, edit, version, range };
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, true);
    return true;
  }

  /** Run the shown edit's command, then apply the edit. The accept goes first (and is awaited): the server
   * reads messages in order, so it records "accepted" before the document change that it would otherwise
   * log as the suggestion being typed over (rejected). A jump target is gone to first (`jump`) instead;
   * after an accept the next edit is asked for at the new cursor (`editServer.nextEdit.chain`). */
  async accept(): Promise<boolean> {
    const shown = this.shown;
    if (shown?.jump) {
      await this.jump();
      return false;
    }
    this.dismiss();
    if (!shown || shown.editor.document.version !== shown.version) return false;
    const cmd = shown.edit.command;
    if (cmd) {
      try {
        await this.lc.sendRequest(ExecuteCommandRequest.type, { command: cmd.command, arguments: cmd.arguments });
      } catch (err) {
        this.lc.debug(`accept not recorded: ${String(err)}`); // the edit is still the user's to have
      }
      if (shown.editor.document.version !== shown.version) return false; // typed on meanwhile
    }
    const ok = await shown.editor.edit((b) => b.replace(shown.range, shown.edit.text));
    if (!ok) return false;
    const end = shown.editor.document.positionAt(shown.editor.document.offsetAt(shown.range.start) + shown.edit.text.length);
    shown.editor.selection = new vscode.Selection(end, end);
    if (vscode.workspace.getConfiguration("editServer").get<boolean>("nextEdit.chain", true)) {
      if (this.timer) clearTimeout(this.timer);
      this.chained = { doc: shown.editor.document, version: shown.editor.document.version };
      this.chain = this.request(shown.editor);
    }
    return true;
  }

  dismiss(): void {
    if (this.shown) {
      this.shown.editor.setDecorations(this.deleted, []);
      this.shown.editor.setDecorations(this.inserted, []);
      this.shown.editor.setDecorations(this.marker, []);
      this.shown = undefined;
    }
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
    void vscode.commands.executeCommand("setContext", JUMP_CONTEXT_KEY, false);
  }

  dispose(): void {
    this.pending?.cancel();
    if (this.timer) clearTimeout(this.timer);
    this.dismiss();
    this.deleted.dispose();
    this.inserted.dispose();
    this.marker.dispose();
    this.subscriptions.forEach((d) => d.dispose());
  }
}

/** Status bar text and tooltip for a `$/editServer/status` (``hidden``: the last reason kept). */
export function statusBar(s: Status, hidden: string): { text: string; tooltip: string } {
  let text = s.state === "ready" ? "$(sparkle) edit-server" : `$(loading~spin) edit-server: ${s.state}`;
  if (s.state === "error") text = "$(error) edit-server";
  if (s.state === "degraded") text = "$(warning) edit-server: degraded";
  let tooltip = s.message || s.state;
  if (s.state === "ready" && hidden) {
    text = "$(eye-closed) edit-server";
    tooltip = hidden.includes("by the gate")
      ? `${hidden}. A random or untrained model scores low; editServer.gate.enabled = false shows every suggestion.`
      : `${hidden}. Random weights (tiny-random) emit no valid text; use the default or a trained model.`;
  }
  return { text, tooltip };
}

/** Tells the server where the cursor rests a moment after it moves to another line without a text change
 * (a jump, not typing): the server prefills the completion prompt there before the user asks. */
export class CursorRest implements vscode.Disposable {
  private last = new Map<string, { line: number; version: number }>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly subscription: vscode.Disposable;

  constructor(private readonly send: (uri: string, position: LspPosition) => void) {
    this.subscription = vscode.window.onDidChangeTextEditorSelection((e) => this.moved(e.textEditor));
  }

  /** The editor's cursor moved: a new line with the text unchanged starts the timer. */
  moved(editor: vscode.TextEditor): void {
    const delay = vscode.workspace.getConfiguration("editServer").get<number>("cursorRestMs", 150);
    const doc = editor.document;
    const pos = editor.selection.active;
    const key = doc.uri.toString();
    const prev = this.last.get(key);
    this.last.set(key, { line: pos.line, version: doc.version });
    if (delay <= 0 || (prev && (prev.line === pos.line || prev.version !== doc.version))) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const now = vscode.window.activeTextEditor;
      if (now?.document === doc && now.selection.active.line === pos.line) {
        this.send(key, { line: now.selection.active.line, character: now.selection.active.character });
      }
    }, delay);
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.subscription.dispose();
  }
}

async function start(context: vscode.ExtensionContext, output: vscode.LogOutputChannel, bar: vscode.StatusBarItem) {
  client = createClient(output, settingKeys(context.extension.packageJSON));
  let hidden = "";
  client.onNotification(STATUS, (s: Status) => {
    if (typeof s.hidden === "string") hidden = s.hidden;
    const { text, tooltip } = statusBar(s, hidden);
    bar.text = text;
    bar.tooltip = tooltip;
    bar.show();
  });
  await client.start();
  nextEdits = new NextEditController(client);
  const lc = client;
  rest = new CursorRest((uri, position) => void lc.sendNotification(CURSOR_REST, { textDocument: { uri }, position }));
  context.subscriptions.push(nextEdits, rest);
}

async function stop(): Promise<void> {
  nextEdits?.dispose();
  nextEdits = undefined;
  rest?.dispose();
  rest = undefined;
  const c = client;
  client = undefined;
  if (c) await c.stop();
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("edit-server", { log: true });
  const bar = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  bar.text = "$(loading~spin) edit-server";
  bar.show();
  context.subscriptions.push(
    output,
    bar,
    vscode.commands.registerCommand("editServer.nextEdit", async () => {
      const editor = vscode.window.activeTextEditor;
      if (editor && nextEdits && !(await nextEdits.request(editor))) {
        vscode.window.setStatusBarMessage("edit-server: no next edit", 2000);
      }
    }),
    vscode.commands.registerCommand("editServer.acceptEdit", () => nextEdits?.accept()),
    vscode.commands.registerCommand("editServer.dismissEdit", () => nextEdits?.dismiss()),
    vscode.commands.registerCommand("editServer.restart", async () => {
      await stop();
      await start(context, output, bar);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration("editServer") && !e.affectsConfiguration("editServer.nextEdit")) {
        const pick = await vscode.window.showInformationMessage("edit-server settings changed.", "Restart server");
        if (pick) await vscode.commands.executeCommand("editServer.restart");
      }
    }),
  );
  try {
    await start(context, output, bar);
  } catch (err) {
    bar.text = "$(error) edit-server";
    const cmd = vscode.workspace.getConfiguration("editServer").get<string[]>("command", ["edit-server"]);
    void vscode.window.showErrorMessage(`edit-server failed to start (${cmd.join(" ")}): ${String(err)}. ` +
      "Is the server installed and on PATH? Set editServer.command to its full path otherwise.");
  }
}

export function deactivate(): Promise<void> {
  return stop();
}
