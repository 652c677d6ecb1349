"""A rename over the real stdio server: its other use in the editable region comes back as the next edit, and
once that is taken the far use comes back as a jump target (``jump: true``) — a chain of one-place
suggestions, with no model work (the scripted engine changes nothing here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edit_server.nextedit import locator, propose
from tests.e2e.raw_client import RawServer
from tests.e2e.test_editor_clients import ready_session

pytestmark = pytest.mark.e2e

URI = "file:///tmp/edit-server-carry/area.py"
# the parameter's far use is in its own function: a module-level ``size`` would be another name
TEXT = "def area(size):\n    total = size * 2\n" + "\n" * 30 + "    return total + size\n"


def _model(path: Path) -> str:
    """A location model that shows every carried edit (the plumbing under test, not the shipped fit)."""
    n = len(propose.FEATURES)
    m = locator.Locator(propose.FEATURES, (0.0,) * n, (1.0,) * n, (0.0,) * n, 3.0, 0.5, {})
    path.write_text(json.dumps(m.to_json()))
    return str(path)


def _change(s: RawServer, version: int, line: int, a: int, b: int, text: str) -> None:
    s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": URI, "version": version},
        "contentChanges": [{"range": {"start": {"line": line, "character": a}, "end": {"line": line, "character": b}},
                            "text": text}]}})


def _next(s: RawServer, rid: int, version: int, line: int, ch: int) -> list[dict]:
    res = s.request(rid, "textDocument/copilotInlineEdit", {
        "textDocument": {"uri": URI, "version": version}, "position": {"line": line, "character": ch}})
    assert "error" not in res, res
    return res["result"]["edits"]


def test_a_rename_is_carried_then_offered_as_a_jump(tmp_path: Path) -> None:
    s = RawServer()
    try:
        ready_session(s, gate={"enabled": True}, debounceMs=0, historyPauseMs=0,
                      nextEdit={"locator": _model(tmp_path / "loc.json")})
        s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": TEXT}}})
        _change(s, 2, 0, 9, 13, "dim")  # def area(size) -> def area(dim)
        edits = _next(s, 1, 2, 0, 12)
        assert [(e["range"]["start"]["line"], e["text"]) for e in edits] == [(1, "dim")]
        assert "jump" not in edits[0] and edits[0]["textDocument"] == {"uri": URI, "version": 2}
        _change(s, 3, 1, 12, 16, "dim")  # the user takes it
        edits = _next(s, 2, 3, 1, 15)
        assert [(e["range"]["start"]["line"], e["text"], e.get("jump")) for e in edits] == [(32, "dim", True)]
        # the jump's command names its own kind for the feedback store
        assert edits[0]["command"]["arguments"][0]["kind"] == "edit"
    finally:
        assert "error" not in s.request("bye", "shutdown")
        s.send({"jsonrpc": "2.0", "method": "exit"})
        s.close()


def test_a_rename_with_no_use_left_here_jumps_to_another_open_file(tmp_path: Path) -> None:
    other = "file:///tmp/edit-server-carry/main.py"
    s = RawServer()
    try:
        ready_session(s, gate={"enabled": True}, debounceMs=0, historyPauseMs=0,
                      nextEdit={"locator": _model(tmp_path / "loc.json")})
        for uri, text in ((URI, "class Store:\n    def get_user(self, uid):\n        return uid\n"),
                          (other, "from area import Store\n\nstore = Store()\nprint(store.get_user(7))\n")):
            s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": text}}})
        _change(s, 2, 1, 8, 16, "find_user")  # def get_user -> def find_user
        edits = _next(s, 1, 2, 1, 17)
        assert [(e["textDocument"]["uri"], e["range"]["start"]["line"], e["text"], e.get("jump")) for e in edits] == [
            (other, 3, "find", True)]
        assert edits[0]["textDocument"]["version"] == 1
    finally:
        assert "error" not in s.request("bye", "shutdown")
        s.send({"jsonrpc": "2.0", "method": "exit"})
        s.close()
