"""The first messages of the editors in editors/ (Emacs lsp-mode, JetBrains LSP4IJ, Helix, Sublime LSP),
replayed as JSON against the real stdio server (engine scripted: FIM "a + b", edits "w * w" → "w * h").

The ``initialize`` params have the shapes those clients send (written from their public sources:
lsp-mode's ``lsp--client-capabilities`` and initialize call, LSP4IJ's ``ClientCapabilitiesFactory``
serialized by Gson (nulls left out), Helix's ``helix-lsp/src/client.rs``, Sublime LSP's
``get_initialize_params``). Clients that declare ``textDocument.inlineCompletion`` get ghost text only;
the others get completion items built from the same FIM suggestion. Plus the VS Code extension's accept
order, checked on the sqlite feedback store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.raw_client import RawServer

pytestmark = pytest.mark.e2e

TEXT = "def add(a, b):\n    return \n"
LINE, COL = 1, 11  # after "return "
WORK = Path("/tmp/edit-server-editor-clients")
URI = (WORK / "calc.py").as_uri()

SYNC = {"dynamicRegistration": True, "didSave": True, "willSave": True, "willSaveWaitUntil": True}


def emacs(inline: Any) -> dict[str, Any]:
    """lsp-mode 9.x: plists → JSON; :json-false → false; an empty capability alist → null."""
    td: dict[str, Any] = {
        "declaration": {"dynamicRegistration": True, "linkSupport": True},
        "definition": {"dynamicRegistration": True, "linkSupport": True},
        "synchronization": {"willSave": True, "didSave": True, "willSaveWaitUntil": True},
        "completion": {"completionItem": {"snippetSupport": False, "documentationFormat": ["markdown", "plaintext"],
                                          "resolveAdditionalTextEditsSupport": True, "insertReplaceSupport": True,
                                          "deprecatedSupport": True,
                                          "resolveSupport": {"properties": ["documentation", "detail",
                                                                            "additionalTextEdits", "command"]},
                                          "insertTextModeSupport": {"valueSet": [1, 2]}},
                       "contextSupport": True, "dynamicRegistration": True},
        "hover": {"contentFormat": ["markdown", "plaintext"], "dynamicRegistration": True},
        "publishDiagnostics": {"relatedInformation": True, "tagSupport": {"valueSet": [1, 2]},
                               "versionSupport": True},
        "linkedEditingRange": {"dynamicRegistration": True},
        "inlineCompletion": inline,
    }
    return {
        "processId": 4242, "rootPath": str(WORK),
        "clientInfo": {"name": "emacs", "version": "GNU Emacs 29.4 (build 1, x86_64-pc-linux-gnu)"},
        "rootUri": WORK.as_uri(),
        "capabilities": {
            "workspace": {"workspaceEdit": {"documentChanges": True, "resourceOperations": ["create", "rename",
                                                                                           "delete"]},
                          "applyEdit": True, "symbol": {"symbolKind": {"valueSet": list(range(1, 27))}},
                          "executeCommand": {"dynamicRegistration": False}, "workspaceFolders": True,
                          "configuration": True,
                          "fileOperations": {"didCreate": False, "willCreate": False, "didRename": True,
                                             "willRename": True, "didDelete": False, "willDelete": False}},
            "textDocument": td,
            "window": {"workDoneProgress": True, "showDocument": {"support": True}}},
        "initializationOptions": {"model": "tiny-random", "device": "cpu", "gate": {"enabled": False}},
        "workDoneToken": "1",
    }


def lsp4ij() -> dict[str, Any]:
    """LSP4IJ (lsp4j + Gson): general.staleRequestSupport carries only ``cancel`` (its required
    ``retryOnContentModified`` is null, so left out) — strict LSP types reject that."""
    return {
        "processId": 4243, "rootUri": WORK.as_uri(),
        "workspaceFolders": [{"uri": WORK.as_uri(), "name": WORK.name}],
        "clientInfo": {"name": "IntelliJ IDEA", "version": "2025.1"},
        "capabilities": {
            "workspace": {"applyEdit": True, "workspaceEdit": {"documentChanges": True,
                                                               "resourceOperations": ["create", "delete",
                                                                                      "rename"]},
                          "didChangeConfiguration": {"dynamicRegistration": True},
                          "didChangeWatchedFiles": {"dynamicRegistration": True}, "symbol": {},
                          "executeCommand": {"dynamicRegistration": True}, "workspaceFolders": True,
                          "configuration": True, "codeLens": {"refreshSupport": True},
                          "inlayHint": {"refreshSupport": True}, "diagnostics": {"refreshSupport": True}},
            "textDocument": {
                "synchronization": {"willSave": True, "willSaveWaitUntil": True, "didSave": True},
                "completion": {"dynamicRegistration": True,
                               "completionItem": {"snippetSupport": True,
                                                  "documentationFormat": ["markdown", "plaintext"],
                                                  "insertTextModeSupport": {"valueSet": [1, 2]},
                                                  "resolveSupport": {"properties": ["documentation", "detail",
                                                                                    "additionalTextEdits"]},
                                                  "deprecatedSupport": True, "labelDetailsSupport": True},
                               "completionList": {"itemDefaults": ["editRange"]}},
                "hover": {"dynamicRegistration": True, "contentFormat": ["markdown", "plaintext"]},
                "publishDiagnostics": {"relatedInformation": True, "tagSupport": {"valueSet": [1, 2]},
                                       "codeDescriptionSupport": True, "dataSupport": True}},
            "window": {"workDoneProgress": True, "showDocument": {"support": True},
                       "showMessage": {"messageActionItem": {"additionalPropertiesSupport": False}}},
            "general": {"staleRequestSupport": {"cancel": True}, "positionEncodings": ["utf-16"]}},
        "initializationOptions": {"model": "tiny-random", "device": "cpu", "gate": {"enabled": False}},
        "trace": "off",
    }


def helix() -> dict[str, Any]:
    """Helix (lsp-types + serde: None fields left out); languages.toml `config` → initializationOptions."""
    return {
        "processId": 4244, "workspaceFolders": [{"uri": WORK.as_uri(), "name": WORK.name}],
        "rootPath": str(WORK), "rootUri": WORK.as_uri(),
        "initializationOptions": {"model": "tiny-random", "device": "cpu", "gate": {"enabled": False}},
        "capabilities": {
            "workspace": {"configuration": True, "didChangeConfiguration": {"dynamicRegistration": False},
                          "workspaceFolders": True, "applyEdit": True,
                          "symbol": {"dynamicRegistration": False},
                          "executeCommand": {"dynamicRegistration": False},
                          "inlayHint": {"refreshSupport": False},
                          "workspaceEdit": {"documentChanges": True,
                                            "resourceOperations": ["create", "rename", "delete"],
                                            "failureHandling": "abort", "normalizesLineEndings": False},
                          "didChangeWatchedFiles": {"dynamicRegistration": True, "relativePatternSupport": False},
                          "fileOperations": {"willRename": True, "didRename": True}},
            "textDocument": {
                "completion": {"completionItem": {"snippetSupport": True,
                                                  "resolveSupport": {"properties": ["documentation", "detail",
                                                                                    "additionalTextEdits"]},
                                                  "insertReplaceSupport": True, "deprecatedSupport": True,
                                                  "tagSupport": {"valueSet": [1]}},
                               "completionItemKind": {}},
                "hover": {"contentFormat": ["markdown"]},
                "rename": {"dynamicRegistration": False, "prepareSupport": True, "honorsChangeAnnotations": False},
                "formatting": {"dynamicRegistration": False},
                "publishDiagnostics": {"versionSupport": True, "tagSupport": {"valueSet": [1, 2]}},
                "inlayHint": {"dynamicRegistration": False}},
            "window": {"workDoneProgress": True},
            "general": {"positionEncodings": ["utf-8", "utf-32", "utf-16"]}},
        "clientInfo": {"name": "helix", "version": "25.07.1"},
    }


def sublime() -> dict[str, Any]:
    """Sublime Text LSP: rootUri / workspaceFolders may be null (a window without a folder)."""
    return {
        "processId": 4245, "clientInfo": {"name": "Sublime Text LSP", "version": "2.3.0"},
        "rootUri": WORK.as_uri(), "rootPath": str(WORK),
        "workspaceFolders": [{"name": WORK.name, "uri": WORK.as_uri()}],
        "capabilities": {
            "general": {"regularExpressions": {"engine": "ECMAScript"},
                        "markdown": {"parser": "Python-Markdown", "version": "3.2.2"}},
            "textDocument": {
                "synchronization": SYNC,
                "hover": {"dynamicRegistration": True, "contentFormat": ["markdown", "plaintext"]},
                "completion": {"dynamicRegistration": True,
                               "completionItem": {"snippetSupport": True, "deprecatedSupport": True,
                                                  "documentationFormat": ["markdown", "plaintext"],
                                                  "tagSupport": {"valueSet": [1]},
                                                  "resolveSupport": {"properties": ["detail", "documentation",
                                                                                    "additionalTextEdits"]},
                                                  "insertTextModeSupport": {"valueSet": [2]},
                                                  "labelDetailsSupport": True},
                               "completionItemKind": {"valueSet": list(range(1, 26))},
                               "insertTextMode": 2},
                "publishDiagnostics": {"relatedInformation": True, "tagSupport": {"valueSet": [1, 2]},
                                       "versionSupport": True, "codeDescriptionSupport": True,
                                       "dataSupport": True}},
            "workspace": {"applyEdit": True, "didChangeConfiguration": {"dynamicRegistration": True},
                          "executeCommand": {}, "workspaceEdit": {"documentChanges": True,
                                                                  "failureHandling": "abort"},
                          "workspaceFolders": True, "configuration": True},
            "window": {"showDocument": {"support": True}, "workDoneProgress": True,
                       "showMessage": {"messageActionItem": {"additionalPropertiesSupport": True}}}},
        "initializationOptions": {"model": "tiny-random", "device": "cpu", "gate": {"enabled": False}},
    }


def ready_session(s: RawServer, params: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """initialize (``params``, or bare ones with ``options``) + initialized, then wait for the model: the
    ready status may come before the initialize reply (read past while waiting for it)."""
    if params is None:
        params = {"capabilities": {}, "initializationOptions": {"feedbackDb": ":memory:",
                                                                "gate": {"enabled": False}, **options}}
    res = s.request("init", "initialize", params)
    assert "error" not in res, res
    s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    ready = lambda m: m.get("method") == "$/editServer/status" and m["params"]["state"] == "ready"  # noqa: E731
    if not any(ready(m) for m in s.seen):
        s.wait_for(ready, 120)
    return res["result"]["capabilities"]


def _session(params: dict[str, Any], feedback: str = ":memory:") -> tuple[RawServer, dict[str, Any]]:
    WORK.mkdir(parents=True, exist_ok=True)
    params["initializationOptions"]["feedbackDb"] = feedback
    s = RawServer()
    return s, ready_session(s, params)


def _close(s: RawServer) -> None:
    assert "error" not in s.request("bye", "shutdown")
    s.send({"jsonrpc": "2.0", "method": "exit"})
    assert s.close() == 0


def _open(s: RawServer, version: int = 0, text: str = TEXT) -> None:
    s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen",
            "params": {"textDocument": {"uri": URI, "languageId": "python", "version": version, "text": text}}})


def _apply(text: str, rng: dict[str, Any], new: str) -> str:
    lines = text.split("\n")
    def off(p: dict[str, int]) -> int:
        return sum(len(x) + 1 for x in lines[: p["line"]]) + p["character"]
    return text[: off(rng["start"])] + new + text[off(rng["end"]):]


def _check_completion(s: RawServer, caps: dict[str, Any], params: dict[str, Any]) -> None:
    """A client without inline completion: completion items from the FIM suggestion, accept command."""
    assert "completionProvider" in caps and "inlineCompletionProvider" in caps
    res = s.request(1, "textDocument/completion", params)
    assert "error" not in res, res
    items = res["result"]["items"]
    assert res["result"]["isIncomplete"] is True and len(items) == 1
    item = items[0]
    assert item["label"] == "a + b" and item["insertTextFormat"] == 1
    assert _apply(TEXT, item["textEdit"]["range"], item["textEdit"]["newText"]) == "def add(a, b):\n    return a + b\n"
    cmd = item["command"]
    assert cmd["command"] == "editServer.accept" and cmd["arguments"][0]["kind"] == "fim"
    res = s.request(2, "workspace/executeCommand", {"command": cmd["command"], "arguments": cmd["arguments"]})
    assert "error" not in res and res["result"] is None


def test_helix_gets_completion_items() -> None:
    s, caps = _session(helix())
    try:
        assert caps.get("positionEncoding", "utf-16") == "utf-16"  # it offers utf-8 first: we answer utf-16
        s.send({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration",
                "params": {"settings": {"model": "tiny-random", "device": "cpu", "gate": {"enabled": False}}}})
        _open(s)
        _check_completion(s, caps, {"textDocument": {"uri": URI}, "position": {"line": LINE, "character": COL},
                                    "context": {"triggerKind": 1}})
    finally:
        _close(s)


def test_sublime_gets_completion_items() -> None:
    s, caps = _session(sublime())
    try:
        s.send({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {"settings": {}}})
        _open(s)
        _check_completion(s, caps, {"textDocument": {"uri": URI}, "position": {"line": LINE, "character": COL}})
    finally:
        _close(s)


def test_jetbrains_lsp4ij_initializes_and_gets_completion_items() -> None:
    s, caps = _session(lsp4ij())
    try:
        _open(s)
        _check_completion(s, caps, {"textDocument": {"uri": URI}, "position": {"line": LINE, "character": COL},
                                    "context": {"triggerKind": 1}})
    finally:
        _close(s)


@pytest.mark.parametrize("inline", [None, {"dynamicRegistration": False}])
def test_emacs_lsp_mode_gets_inline_completions_only(inline: Any) -> None:
    """lsp-mode declares inlineCompletion (null: its empty capability; an object: editors/emacs adds one)."""
    s, caps = _session(emacs(inline))
    try:
        assert "inlineCompletionProvider" in caps and "completionProvider" not in caps
        assert "editServer.accept" in caps["executeCommandProvider"]["commands"]
        _open(s)
        res = s.request(1, "textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": LINE, "character": COL},
            "context": {"triggerKind": 2}})  # lsp-inline-completion-display, implicit (automatic)
        assert "error" not in res, res
        item = res["result"]["items"][0]
        assert _apply(TEXT, item["range"], item["insertText"]) == "def add(a, b):\n    return a + b\n"
        res = s.request(2, "textDocument/completion", {"textDocument": {"uri": URI},
                                                       "position": {"line": LINE, "character": COL}})
        assert "error" not in res and res["result"] is None  # no duplicate of the ghost text
    finally:
        _close(s)


# ---- VS Code: the extension's accept order, on the feedback store -----------------------------------
W_TEXT = "def area(w, h):\n    return w * w\n"


@pytest.mark.parametrize(("accept_first", "events"), [(True, ["shown", "accepted"]),
                                                      (False, ["shown", "rejected", "accepted"])])
def test_vscode_accept_order_on_the_feedback_store(tmp_path: Path, accept_first: bool, events: list[str]) -> None:
    """editors/vscode NextEditController.accept: didShowInlineEdit, then workspace/executeCommand (awaited),
    then the edit (didChange). The other order — what the extension did before — logs the accepted edit
    as rejected ("typed over") first."""
    db = tmp_path / "feedback.sqlite3"
    s = RawServer()
    try:
        ready_session(s, feedbackDb=str(db))
        WORK.mkdir(parents=True, exist_ok=True)
        _open(s, 1, W_TEXT)
        res = s.request(1, "textDocument/copilotInlineEdit", {"textDocument": {"uri": URI, "version": 1},
                                                              "position": {"line": 1, "character": 10}})
        edit = res["result"]["edits"][0]
        s.send({"jsonrpc": "2.0", "method": "textDocument/didShowInlineEdit", "params": {"item": edit}})
        cmd = edit["command"]
        change = {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [{"range": edit["range"], "rangeLength": 1, "text": edit["text"]}]}}
        if not accept_first:
            s.send(change)
        assert "error" not in s.request(2, "workspace/executeCommand",
                                        {"command": cmd["command"], "arguments": cmd["arguments"]})
        if accept_first:
            s.send(change)
        s.request(3, "workspace/executeCommand", {"command": "editServer.documentState", "arguments": [{"uri": URI}]})
    finally:
        _close(s)
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT event FROM events WHERE kind = 'edit' ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == events
