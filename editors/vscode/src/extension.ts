// edit-server for VS Code: starts `edit-server` on stdio through vscode-languageclient 11.
// - inline completions (FIM): LSP 3.18 textDocument/inlineCompletion, wired by the client library;
//   accepting an item runs its `editServer.accept` command on the server (workspace/executeCommand).
// - next edits: textDocument/copilotInlineEdit, rendered here with decorations (deleted text struck
//   through, inserted text shown after it), accepted or dismissed with commands.
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
const CONTEXT_KEY = "editServer.editShown";

interface LspPosition { line: number; character: number }
interface LspRange { start: LspPosition; end: LspPosition }
interface LspCommand { title: string; command: string; arguments?: unknown[] }
interface InlineEdit {
  text: string;
  range: LspRange;
  textDocument: { uri: string; version: number };
  command?: LspCommand;
}
interface InlineEditResult { edits: InlineEdit[] }
interface Status {
  state: "loading" | "ready" | "busy" | "degraded" | "error";
  message?: string;
  hidden?: string; // why the last suggestion was not shown ("" = it was); absent = unchanged
}

/** Settings of the extension itself, not sent to the server. */
export const CLIENT_ONLY = new Set(["command", "nextEdit.auto", "nextEdit.delayMs"]);

let client: LanguageClient | undefined;
let nextEdits: NextEditController | undefined;

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
  private shown: { editor: vscode.TextEditor; edit: InlineEdit; version: number; range: vscode.Range } | undefined;
  private pending: CancellationTokenSource | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(private readonly lc: LanguageClient) {
    this.subscriptions.push(
      vscode.workspace.onDidChangeTextDocument((e) => this.onChange(e)),
      vscode.window.onDidChangeActiveTextEditor(() => this.dismiss()),
    );
  }

  private onChange(e: vscode.TextDocumentChangeEvent): void {
    if (e.contentChanges.length === 0) return;
    if (this.shown && this.shown.editor.document === e.document) this.dismiss();
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
    return this.show(editor, edit, version);
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
    void this.lc.sendNotification(DID_SHOW_INLINE_EDIT, { item: edit });
    return true;
  }

  /** Run the shown edit's command, then apply the edit. The accept goes first (and is awaited): the server
   * reads messages in order, so it records "accepted" before the document change that it would otherwise
   * log as the suggestion being typed over (rejected). */
  async accept(): Promise<boolean> {
    const shown = this.shown;
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
    return true;
  }

  dismiss(): void {
    if (this.shown) {
      this.shown.editor.setDecorations(this.deleted, []);
      this.shown.editor.setDecorations(this.inserted, []);
      this.shown = undefined;
    }
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
  }

  dispose(): void {
    this.pending?.cancel();
    if (this.timer) clearTimeout(this.timer);
    this.dismiss();
    this.deleted.dispose();
    this.inserted.dispose();
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
  context.subscriptions.push(nextEdits);
}

async function stop(): Promise<void> {
  nextEdits?.dispose();
  nextEdits = undefined;
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
