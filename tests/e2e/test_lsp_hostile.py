"""Hostile and careless clients over raw stdio: bad frames, message order, bad params, signals.
Each of these failed before the server had its own framing and protocol rules (issue: hardening)."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.e2e.raw_client import ENV, RawServer, frame

pytestmark = pytest.mark.e2e
TEXT = "def add(a, b):\n    return \n"
URI = "file:///tmp/edit-server-hostile/h.py"


def _open(s: RawServer, text: str = TEXT) -> None:
    s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": URI, "languageId": "python", "version": 1, "text": text}}})


def _inline(s: RawServer, rid: Any, line: int = 1, ch: int = 11) -> dict[str, Any]:
    return s.request(rid, "textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": line, "character": ch}, "context": {"triggerKind": 1}})


BAD_FRAMES = [
    b"Content-Length: 1000000000000000\r\n\r\n{}",  # over the cap: no allocation, answered, skipped
    b"Content-Length: 1e15\r\n\r\n",
    b"Content-Length: -5\r\n\r\n",
    b"Content-Length: 0\r\n\r\n",
    b"Content-Type: application/json\r\n\r\n",  # no length at all
    b"Garbage header without colon\r\n\r\n",
    b"Content-Length: 12\r\n\r\nnot json!!!!",
    b"Content-Length: 2\r\n\r\n[]",  # valid JSON, not a message
    b"X-Long: " + b"x" * 100_000 + b"\r\n\r\n",
]


def test_bad_frames_are_answered_and_the_server_keeps_reading() -> None:
    s = RawServer()
    try:
        s.initialize()
        for i, bad in enumerate(BAD_FRAMES):
            s.send(bad)
            err = s.wait_for(lambda m: "error" in m and m.get("id") is None, timeout=90)
            assert err["error"]["code"] in (-32700, -32600), (i, err)
            _open(s)
            res = _inline(s, f"after-{i}")  # still reading, still in sync
            assert res["result"]["items"][0]["insertText"] == "a + b", (i, res)
        # lowercase header name and bare \n line ends are accepted
        body = frame({"jsonrpc": "2.0", "id": "lf", "method": "shutdown"}).split(b"\r\n\r\n", 1)[1]
        s.send(b"content-length: %d\n\n" % len(body) + body)
        assert s.response("lf")["result"] is None
        s.send({"jsonrpc": "2.0", "method": "exit"})
        assert s.close() == 0
    finally:
        s.proc.kill()


def test_a_request_glued_to_an_over_cap_body_is_still_answered() -> None:
    """A real body over the cap (one long JSON line, no line end) is drained, not kept; the request
    right behind it is found at the end of the drained line and answered (it was lost before)."""
    s = RawServer()
    try:
        s.initialize(limits={"maxMessageBytes": 65536})
        _open(s)
        big = frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI + "big", "languageId": "python", "version": 1, "text": "y" * 100_000}}})
        state = {"command": "editServer.documentState", "arguments": [{"uri": URI}]}
        s.send(big + b"".join(frame({"jsonrpc": "2.0", "id": i, "method": "workspace/executeCommand", "params": state})
                              for i in ("glued", "next")))
        assert s.response("glued")["result"]["version"] == 1
        assert s.response("next")["result"]["version"] == 1
        errors = [m for m in s.seen if m.get("id") is None and "error" in m]
        assert len(errors) == 1 and "outside 1..65536" in errors[0]["error"]["message"], errors
    finally:
        s.proc.kill()


def test_message_order_rules_and_exit_status() -> None:
    s = RawServer()
    try:
        early = s.request(1, "textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}, "context": {"triggerKind": 1}})
        assert early["error"]["code"] == -32002  # before initialize
        assert s.request(9, "shutdown")["error"]["code"] == -32002  # shutdown too (LSP)
        s.initialize()
        again = s.request(2, "initialize", {"capabilities": {}})
        assert again["error"]["code"] == -32600 and "already initialized" in again["error"]["message"]
        _open(s)
        assert _inline(s, 3)["result"]["items"][0]["insertText"] == "a + b"  # completions still alive
        assert s.request(4, "shutdown")["result"] is None
        late = _inline(s, 5)
        assert late["error"]["code"] == -32600 and "shutting down" in late["error"]["message"]
        s.send({"jsonrpc": "2.0", "method": "exit"})
        assert s.close() == 0
    finally:
        s.proc.kill()
    s = RawServer()
    try:
        s.initialize()
        s.send({"jsonrpc": "2.0", "method": "exit"})  # exit without shutdown: status 1 (LSP)
        assert s.close() == 1
    finally:
        s.proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_the_server_while_stdin_stays_open(sig: int) -> None:
    s = RawServer()
    try:
        s.initialize()
        t0 = time.monotonic()
        s.proc.send_signal(sig)
        assert s.close() == 128 + sig and time.monotonic() - t0 < 5
    finally:
        s.proc.kill()


def test_nested_message_lookalikes_and_non_string_text() -> None:
    s = RawServer()
    try:
        s.initialize()
        _open(s)
        nested = {"jsonrpc": "2.0", "id": 99, "method": "textDocument/copilotInlineEdit",
                  "params": {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}}
        s.send({"jsonrpc": "2.0", "id": 7, "method": "workspace/executeCommand",
                "params": {"command": "editServer.accept", "arguments": [{"id": "x", "payload": nested}]}})
        s.response(7)
        assert _inline(s, 8)["result"]["items"]
        assert not [m for m in s.seen if m.get("id") == 99]  # the nested object was never a message
        # a non-string text is rejected and the document keeps its last good text
        s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": URI, "version": 2}, "contentChanges": [{"text": None}]}})
        s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": URI, "languageId": "python", "version": 3, "text": 12345}}})
        s.wait_for(lambda m: m.get("method") == "window/logMessage" and "rejected" in m["params"]["message"])
        res = _inline(s, 9)
        item = res["result"]["items"][0]  # positions resolve against the intact text: (1, 11) exists
        assert item["range"]["start"] == {"line": 1, "character": 11}
        assert item["command"]["arguments"][0]["version"] == 1
    finally:
        s.proc.kill()


def test_a_nul_workspace_folder_reports_degraded_and_keeps_serving_the_document() -> None:
    """Fail closed: a workspace folder URI with %00 gives a degraded status (not ready) naming why; the
    current document still gets suggestions (redacted: tests/test_server_pipeline.py)."""
    s = RawServer()
    try:
        s.request("init", "initialize", {"capabilities": {}, "initializationOptions": {
            "feedbackDb": ":memory:", "gate": {"enabled": False}},
            "workspaceFolders": [{"uri": "file:///tmp/edit-server-hostile%00evil", "name": "w"}]})
        s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        st = s.wait_for(lambda m: m.get("method") == "$/editServer/status"
                        and m["params"]["state"] in ("ready", "degraded", "error"))
        assert st["params"]["state"] == "degraded", st
        assert "control characters" in st["params"]["message"] and "current document" in st["params"]["message"]
        _open(s, "KEY = 'AKIA" + "IOSFODNN7EXAMPLE'\n" + TEXT)
        assert _inline(s, 1, line=2)["result"]["items"][0]["insertText"] == "a + b"
    finally:
        s.proc.kill()


def test_a_resting_cursor_is_prefilled_and_bad_rest_params_are_dropped() -> None:
    """``$/editServer/cursorRest`` (a notification): bad params are logged and dropped, the server reads on;
    a good one has the real engine prefill the completion prompt there while it is idle."""
    env = {k: v for k, v in ENV.items() if k != "EDIT_SERVER_ENGINE_FACTORY"}  # the real (tiny) engine
    s = RawServer("--log-level", "INFO", env=env)
    try:
        s.initialize()
        _open(s)
        for bad in (None, {"textDocument": {"uri": URI}}, {"textDocument": {"uri": URI},
                                                            "position": {"line": -1, "character": 0}}):
            s.send({"jsonrpc": "2.0", "method": "$/editServer/cursorRest", "params": bad})
        s.send({"jsonrpc": "2.0", "method": "$/editServer/cursorRest",
                "params": {"textDocument": {"uri": URI}, "position": {"line": 1, "character": 11}}})
        t0 = time.monotonic()
        while b"prompt tokens prefilled ahead" not in s.stderr and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        assert b"prompt tokens prefilled ahead" in s.stderr
        assert s.stderr.count(b"$/editServer/cursorRest dropped") == 3
        assert "result" in _inline(s, 5)  # still serving
        assert not [m for m in s.seen if "error" in m]  # a notification is never answered, not even an error
    finally:
        s.proc.kill()
