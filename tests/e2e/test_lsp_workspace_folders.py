"""Workspace folders through the real server: the server advertises change notifications for them, so
context must follow ``workspace/didChangeWorkspaceFolders`` — an added folder's definitions reach prompts,
a removed folder is not read again (its documents get no suggestion, nothing of it enters another's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evals.lsp_client import LspClient, server_command, utf16_position
from tests.e2e.raw_client import ENV

pytestmark = pytest.mark.e2e
TEXT = "from mod import shared_name\n\ny = shared_name(2)\nz = "
USES = "y = shared_name(2)\nz = "  # no import: the definition comes from the workspace index


def test_context_follows_added_and_removed_workspace_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root, mark in ((a, "ALPHA_MARK"), (b, "BETA_MARK")):
        root.mkdir()
        (root / "mod.py").write_text(f"def shared_name(x):\n    return '{mark}'\n")
        (root / "main.py").write_text(TEXT)
    env = dict(ENV, EDIT_SERVER_ENGINE_FACTORY="tests.e2e.fake_engines:sections")

    async def session() -> dict[str, object]:
        client = LspClient(server_command("tiny-random", "cpu", []), env=env, stderr_path=tmp_path / "stderr.log")
        await client.start(a, {"feedbackDb": ":memory:", "gate": {"enabled": False}, "settleContext": True,
                               "debounceMs": 0})
        seen: dict[str, object] = {"capability": client.capabilities.get("workspace", {})}
        try:
            await client.wait_ready(120)

            async def ask(root: Path, version: int) -> str | None:
                uri = (root / "main.py").as_uri()
                await client.notify("textDocument/didOpen", {"textDocument": {
                    "uri": uri, "languageId": "python", "version": version, "text": TEXT}})
                res = await client.request("textDocument/inlineCompletion", {
                    "textDocument": {"uri": uri}, "position": utf16_position(TEXT, len(TEXT)),
                    "context": {"triggerKind": 1}})
                await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
                items = (res or {}).get("items") or []
                return items[0]["insertText"] if items else None

            seen["a"] = await ask(a, 1)
            await client.notify("workspace/didChangeWorkspaceFolders", {"event": {
                "added": [{"uri": b.as_uri(), "name": "b"}], "removed": [{"uri": a.as_uri(), "name": "a"}]}})
            seen["b"] = await ask(b, 1)
            seen["a after removal"] = await ask(a, 2)
            await client.notify("workspace/didChangeWorkspaceFolders", {"event": {
                "added": [{"uri": a.as_uri(), "name": "a"}], "removed": []}})
            seen["both"] = await ask(a, 3)
        finally:
            await client.stop()
        return seen

    seen = asyncio.run(session())
    assert seen["capability"]["workspaceFolders"] == {  # type: ignore[index]
        "supported": True, "changeNotifications": True}
    assert seen["a"] == "ALPHA_MARK"
    assert seen["b"] == "BETA_MARK"
    assert seen["a after removal"] is None  # outside every folder now: no suggestion, nothing read
    assert "ALPHA_MARK" in str(seen["both"])  # its folder added again: read again


def test_files_changed_on_disk_are_read_again(tmp_path: Path) -> None:
    """A client that allows it gets a file watcher registered; a file rewritten on disk (a branch switch)
    gives its new definitions, a deleted one none — the old text is not served from the index."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "mod.py").write_text("def shared_name(x):\n    return 'OLD_MARK'\n")
    env = dict(ENV, EDIT_SERVER_ENGINE_FACTORY="tests.e2e.fake_engines:sections")

    async def session() -> dict[str, object]:
        client = LspClient(server_command("tiny-random", "cpu", []), env=env, stderr_path=tmp_path / "stderr.log")
        await client.start(root, {"feedbackDb": ":memory:", "gate": {"enabled": False}, "settleContext": True,
                                  "debounceMs": 0},
                           workspace_capabilities={"didChangeWatchedFiles": {"dynamicRegistration": True}})
        seen: dict[str, object] = {}
        uri = (root / "main.py").as_uri()
        try:
            await client.wait_ready(120)
            await client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": USES}})

            async def ask() -> str | None:
                res = await client.request("textDocument/inlineCompletion", {
                    "textDocument": {"uri": uri}, "position": utf16_position(USES, len(USES)),
                    "context": {"triggerKind": 1}})
                items = (res or {}).get("items") or []
                return items[0]["insertText"] if items else None

            async def changed(kind: int) -> None:
                await client.notify("workspace/didChangeWatchedFiles", {"changes": [
                    {"uri": (root / "mod.py").as_uri(), "type": kind}]})

            seen["before"] = await ask()
            (root / "mod.py").write_text("def shared_name(x):\n    return 'NEW_MARK'\n")
            await changed(2)  # Changed
            seen["changed"] = await ask()
            (root / "mod.py").unlink()
            await changed(3)  # Deleted
            seen["deleted"] = await ask()
            seen["registered"] = [p for m, p in client.notifications if m == "client/registerCapability"]
        finally:
            await client.stop()
        return seen

    seen = asyncio.run(session())
    [reg] = seen["registered"]  # type: ignore[misc]
    assert reg["registrations"][0]["method"] == "workspace/didChangeWatchedFiles"
    assert seen["before"] == "OLD_MARK"
    assert seen["changed"] == "NEW_MARK"
    assert seen["deleted"] == "none"
