"""Planted secrets through the real server: after a session over documents full of secrets (every format
of tests/test_secrets_planted.py, in the open document and a neighbour), no secret byte is in the log —
not even at DEBUG, where whole messages are logged — nor in the feedback store."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from pathlib import Path

import pytest

from evals.lsp_client import LspClient, server_command, utf16_position
from tests.e2e.raw_client import ENV
from tests.test_secrets_planted import EXTS, _leaks, formats, planted

pytestmark = pytest.mark.e2e


def test_no_secret_in_logs_or_feedback_store(tmp_path: Path) -> None:
    fmts = formats(random.Random(7))
    root = tmp_path / "ws"
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "app.py").write_text(planted("py", fmts, "neighbour"))
    doc = planted("py", fmts, "open") + "\n\ndef total(a, b):\n    return \n"
    (root / "main.py").write_text(doc)
    log, db = tmp_path / "server.log", tmp_path / "feedback.sqlite3"

    async def session() -> None:
        cmd = server_command("tiny-random", "cpu", ["--log-level", "DEBUG", "--log-file", str(log)])
        client = LspClient(cmd, env=ENV, stderr_path=tmp_path / "stderr.log")  # scripted engine: "a + b"
        await client.start(root, {"feedbackDb": str(db), "gate": {"enabled": False}})
        try:
            await client.wait_ready(120)
            uri = (root / "main.py").as_uri()
            await client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": doc}})
            end = len(doc) - 1
            res = await client.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": utf16_position(doc, end), "context": {"triggerKind": 1}})
            item = res["items"][0]
            await client.request("workspace/executeCommand", {"command": "editServer.accept",
                                                              "arguments": item["command"]["arguments"]})
            await client.request("textDocument/copilotInlineEdit", {
                "textDocument": {"uri": uri, "version": 1}, "position": utf16_position(doc, end)})
        finally:
            await client.stop()

    asyncio.run(session())
    logged = log.read_bytes()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("feedback.sqlite3*"))  # with -wal / -journal
    assert b"textDocument/didOpen" in logged and len(logged) > len(doc)  # DEBUG logged whole messages
    with sqlite3.connect(db) as con:  # the store did keep the session's prompts: the zero below means something
        prompts = [p for (p,) in con.execute("SELECT prompt FROM suggestion_text")]
    assert prompts and all("def total(a, b)" in p for p in prompts) and any("helper_open" in p for p in prompts)
    assert any("[REDACTED]" in p for p in prompts)
    leaks = [(fmt, part) for fmt, _n, _v, parts in fmts for part in parts
             if part.encode() in logged or part.encode() in stored]
    assert leaks == []


@pytest.mark.parametrize("level", ["DEBUG", "INFO"])
def test_log_records_pass_the_redaction(tmp_path: Path, level: str) -> None:
    """Defence in depth: whatever a record carries (a message dump at DEBUG), secrets are cut."""
    import argparse
    import logging

    from edit_server.cli.logs import setup_logging

    fmts = formats(random.Random(11))
    log = tmp_path / "x.log"
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging(argparse.Namespace(log_file=str(log), log_level=level))
        for ext in (*EXTS, "env"):  # a document of any type, quoted in a JSON dump (pygls's "Sending data"),
            body = planted(ext, fmts, f"dump_{ext}")  # a dict's repr, or as it is
            logging.getLogger("pygls.protocol.json_rpc").warning("Sending data: %s", json.dumps({"text": body}))
            logging.getLogger("pygls.protocol.json_rpc").warning("Received %s", {"text": body})
            logging.getLogger("edit_server.x").warning("plain %s", body)
        for h in root.handlers:
            h.flush()
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    text = log.read_text()
    assert all(f"dump_{ext}" in text for ext in (*EXTS, "env")) and "[REDACTED]" in text
    assert [(f, part) for f, _n, _v, parts in fmts for part in parts if part in text] == []
    assert _leaks([text], [p for *_, parts in fmts for p in parts]) == []  # not even a 10-character piece


def test_info_logs_carry_sizes_and_timings_not_text(tmp_path: Path) -> None:
    """At INFO a session's log has one line per model call (sizes, timings) and no document or
    suggestion text — not even from a rejected change or a message that does not parse."""
    from tests.e2e.raw_client import RawServer

    log = tmp_path / "info.log"
    s = RawServer("--log-level", "INFO", "--log-file", str(log))
    try:
        s.initialize()
        uri = (tmp_path / "m.py").as_uri()
        text = "def zebra_marker_fn(a, b):\n    return \n"
        s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}}})
        res = s.request(1, "textDocument/inlineCompletion", {"textDocument": {"uri": uri},
                        "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}})
        assert res["result"]["items"][0]["insertText"] == "a + b"
        s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {
            "uri": uri, "version": 2}, "contentChanges": [{"text": ["zebra_marker_change"]}]}})
        s.request(2, "textDocument/copilotInlineEdit", {"textDocument": {"uri": uri, "version": 1},
                                                        "position": {"line": 1, "character": 11}})
        s.request(3, "textDocument/inlineCompletion", {"textDocument": {"uri": uri, "zebra_marker_param": 1}})
        assert s.request(4, "shutdown")["result"] is None
        s.send({"jsonrpc": "2.0", "method": "exit"})
        assert s.close() == 0
    finally:
        s.proc.kill()
    logged = log.read_text()
    assert "fim" in logged and "prompt tokens" in logged and "decode" in logged  # one line per model call
    assert "zebra" not in logged and "a + b" not in logged, logged[-2000:]
