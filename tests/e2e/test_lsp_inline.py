"""End to end over stdio (scripted engine = real tiny-random steps + a fixed output): inline completion,
copilotInlineEdit, UTF-16 positions, the still-valid suggestion cache, feedback, invalid params."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient

from tests.e2e.lsp_helpers import (
    change,
    config,
    inline,
    inline_edit,
    open_doc,
    raw_request,
    start,
    uri,
    wait_state,
)

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@pytest_lsp.fixture(config=config("scripted"), scope="module")
async def client(lsp_client: LanguageClient):
    lsp_client.init_result = await start(lsp_client)  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()
    assert lsp_client._server.returncode == 0  # clean shutdown/exit


def _items(result: Any) -> list[lsp.InlineCompletionItem]:
    if result is None:
        return []
    return list(result.items if isinstance(result, lsp.InlineCompletionList) else result)


async def test_capabilities(client: LanguageClient) -> None:
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert caps.inline_completion_provider is not None
    assert caps.position_encoding == lsp.PositionEncodingKind.Utf16  # even though the client prefers utf-8
    assert caps.text_document_sync.change == lsp.TextDocumentSyncKind.Incremental
    assert {"editServer.accept", "editServer.clearHistory"} <= set(caps.execute_command_provider.commands)
    assert [s["state"] if isinstance(s, dict) else s.state for s in client.statuses][-1] == "ready"
    assert client.copilot_statuses and client.copilot_statuses[-1].kind == "Normal"


async def test_completion_after_typing(client: LanguageClient) -> None:
    u = uri("a.py")
    open_doc(client, u, "def add(a, b):\n    \n")
    for i, ch in enumerate("return "):
        change(client, u, 2 + i, 1, 4 + i, 1, 4 + i, ch)
    [item] = _items(await inline(client, u, 1, 11))
    assert item.insert_text == "a + b"
    assert item.range.start == item.range.end == lsp.Position(line=1, character=11)
    assert item.command.command == "editServer.accept"
    arg = item.command.arguments[0]
    assert set(arg) == {"id", "kind", "score", "uri", "version", "origin"} and arg["origin"] == "model"
    assert (arg["kind"], arg["uri"], arg["version"]) == ("fim", u, 8)
    assert arg["score"] == pytest.approx(0.8, abs=1e-3)

    # typing the predicted characters: the cached suggestion is re-based, same id, no model call
    change(client, u, 9, 1, 11, 1, 11, "a ")
    [again] = _items(await inline(client, u, 1, 13))
    assert again.insert_text == "+ b"
    assert again.command.arguments[0]["id"] == arg["id"]
    assert again.range.start == lsp.Position(line=1, character=13)

    # feedback signals are accepted (and never answered with errors)
    client.protocol.notify("textDocument/didShowCompletion", {"item": {
        "insertText": again.insert_text, "command": {"title": "", "command": "editServer.accept",
                                                     "arguments": [again.command.arguments[0]]}}})
    res = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="editServer.accept", arguments=[again.command.arguments[0]]))
    assert res is None


async def test_unicode_positions_utf16(client: LanguageClient) -> None:
    u = uri("u.py")
    # 😀 is 2 UTF-16 units, 中 and 文 one each: the same line mixes both
    open_doc(client, u, 'def area(w, h):\n    s = "😀中文"; return w * w\n')
    # insert "!" right after the emoji (UTF-16 column 10) -> the server's copy must stay in sync
    change(client, u, 2, 1, 10, 1, 10, "!")
    res = await inline_edit(client, u, 2, 1, 28)
    [edit] = res.edits
    assert edit.text == "h"
    # "    s = \"😀!中文\"; return w * " has 28 UTF-16 units (27 code points) before the last "w"
    assert (edit.range.start.line, edit.range.start.character) == (1, 28)
    assert (edit.range.end.line, edit.range.end.character) == (1, 29)
    # inline completion at the end of that line reports a UTF-16 column too
    change(client, u, 3, 1, 29, 1, 30, "")
    [item] = _items(await inline(client, u, 1, 28))
    assert item.range.start == lsp.Position(line=1, character=28)


async def test_inline_edit_applies_consistently(client: LanguageClient) -> None:
    u = uri("b.py")
    text = "def area(w, h):\n    return w * w\n\nprint(area(2, 3))\n"
    open_doc(client, u, text)
    res = await inline_edit(client, u, 1, 1, 12)
    [edit] = res.edits
    assert edit.textDocument.uri == u and edit.textDocument.version == 1
    assert edit.command.command == "editServer.accept" and edit.command.arguments[0].kind == "edit"
    r = edit.range
    change(client, u, 2, r.start.line, r.start.character, r.end.line, r.end.character, edit.text)
    # applied: the region no longer contains "w * w", so the next prediction has nothing to change
    assert (await inline_edit(client, u, 2, 1, 12)).edits == []
    assert await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="editServer.clearHistory")) is None


async def test_invalid_params_get_errors_and_server_keeps_serving(client: LanguageClient) -> None:
    with pytest.raises(JsonRpcInvalidParams):  # no position: pygls alone would never answer
        await raw_request(client, "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri("a.py")}, "context": {"triggerKind": 1}})
    with pytest.raises(JsonRpcInvalidParams):
        await raw_request(client, "textDocument/copilotInlineEdit", {
            "textDocument": {"uri": uri("a.py")}, "position": {"line": "x"}})
    assert (await inline_edit(client, uri("nope.py"), 1, 0, 0)).edits == []
    assert _items(await inline(client, uri("nope.py"), 0, 0)) == []


async def test_model_change_reloads_and_broken_model_is_not_fatal(client: LanguageClient) -> None:
    u = uri("reload.py")
    open_doc(client, u, "def add(a, b):\n    return \n")
    client.statuses.clear()  # type: ignore[attr-defined]
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"editServer": {"model": "/nonexistent/broken.gguf"}}))
    await wait_state(client, "error")
    err = [s for s in client.statuses if s.state == "error"][0]  # type: ignore[attr-defined]
    assert "broken.gguf" in err.message
    assert _items(await inline(client, u, 1, 11)) == []  # no model: empty answer, still serving
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"model": "tiny-random"}))
    await wait_state(client, "ready")
    [item] = _items(await inline(client, u, 1, 11))
    assert item.insert_text == "a + b"
