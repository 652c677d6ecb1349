"""With the gate on and a model that scores low, nothing shows: `$/editServer/status` says why (the
``hidden`` field the Neovim plugin and the VS Code extension put in their status line), and clears it
once a suggestion shows again."""

from __future__ import annotations

import pytest

from tests.e2e.raw_client import RawServer
from tests.e2e.test_editor_clients import ready_session

pytestmark = pytest.mark.e2e

URI = "file:///tmp/edit-server-hidden/a.py"


def _inline(s: RawServer, rid: int) -> dict:
    return s.request(rid, "textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}})


def _hidden(s: RawServer, since: int) -> str:
    """The ``hidden`` of the first status update after ``s.seen[since]`` (replies consume messages)."""
    is_hidden = lambda m: m.get("method") == "$/editServer/status" and "hidden" in m["params"]  # noqa: E731
    seen = [m for m in s.seen[since:] if is_hidden(m)]
    msg = seen[0] if seen else s.wait_for(is_hidden, 30)
    assert msg["params"]["state"] in ("ready", "busy")
    return msg["params"]["hidden"]


def test_status_says_why_a_suggestion_is_hidden() -> None:
    s = RawServer()  # scripted engine: FIM "a + b" with confidence 0.8
    try:
        ready_session(s, gate={"enabled": True, "threshold": 0.9, "calibration": "off"})
        s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": "def f(a, b):\n    return \n"}}})
        mark = len(s.seen)
        assert _inline(s, 1)["result"] is None  # hidden by the gate
        assert _hidden(s, mark) == "fim hidden by the gate: score 0.80 < 0.90"
        assert _inline(s, 2)["result"] is None
        s.send({"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration",
                "params": {"settings": {"gate": {"threshold": 0.5}}}})
        mark = len(s.seen)
        assert _inline(s, 3)["result"]["items"][0]["insertText"] == "a + b"
        assert _hidden(s, mark) == ""  # shown again: the reason is cleared (once; not repeated while unchanged)
        hidden_updates = [m for m in s.seen if m.get("method") == "$/editServer/status" and "hidden" in m["params"]]
        assert len(hidden_updates) == 2
        # the same confident "a + b" after "x = [1]" would be a syntax error: the rule hides it, and says so
        s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": "def f(a, b):\n    x = [1]\n"}]}})
        mark = len(s.seen)
        assert _inline(s, 4)["result"] is None
        assert _hidden(s, mark) == "fim hidden: syntax error introduced: line 2: unexpected 'a'"
    finally:
        assert "error" not in s.request("bye", "shutdown")
        s.send({"jsonrpc": "2.0", "method": "exit"})
        s.close()


def test_tiny_random_with_the_gate_on_says_why_nothing_shows() -> None:
    """The real tiny-random engine (no test factory): its random weights emit no valid text, so nothing
    shows — the status says so instead of staying silent."""
    from tests.e2e.raw_client import ENV

    s = RawServer(env={k: v for k, v in ENV.items() if k != "EDIT_SERVER_ENGINE_FACTORY"})
    try:
        ready_session(s, gate={"enabled": True})
        s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI, "languageId": "python", "version": 1, "text": "def f(a, b):\n    return \n"}}})
        mark = len(s.seen)
        assert _inline(s, 1)["result"] is None
        assert _hidden(s, mark) == "no fim: model output empty after filtering"
    finally:
        assert "error" not in s.request("bye", "shutdown")
        s.send({"jsonrpc": "2.0", "method": "exit"})
        s.close()
