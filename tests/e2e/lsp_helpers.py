"""Shared helpers for the stdio end-to-end tests (real server subprocess via pytest-lsp)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, make_test_lsp_client

from tests.conftest import ROOT, scratch_dir

WORK = Path(scratch_dir("edit-server-e2e-"))  # workspace root: small, not a git repo
SERVER = [sys.executable, "-m", "edit_server", "--model", "tiny-random", "--device", "cpu"]
STATUS = "$/editServer/status"


def config(engine: str | None = None) -> ClientServerConfig:
    """``engine``: None = the real tiny-random engine; "slow" / "scripted" = tests/e2e/fake_engines.py."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    if engine:
        env["EDIT_SERVER_ENGINE_FACTORY"] = f"tests.e2e.fake_engines:{engine}"
    else:
        env.pop("EDIT_SERVER_ENGINE_FACTORY", None)

    def factory() -> LanguageClient:
        client = make_test_lsp_client()
        client.statuses = []  # type: ignore[attr-defined]
        client.copilot_statuses = []  # type: ignore[attr-defined]

        @client.feature(STATUS)
        def _status(c: LanguageClient, params: Any) -> None:
            c.statuses.append(params)  # type: ignore[attr-defined]

        @client.feature("didChangeStatus")
        def _copilot(c: LanguageClient, params: Any) -> None:
            c.copilot_statuses.append(params)  # type: ignore[attr-defined]

        return client

    return ClientServerConfig(server_command=SERVER, client_factory=factory, server_env=env)


def options(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "tiny-random", "device": "cpu", "feedbackDb": ":memory:",
                            "gate": {"enabled": False}}
    base.update(kw)
    return base


async def start(client: LanguageClient, init: dict[str, Any] | None = None, wait: bool = True
                ) -> lsp.InitializeResult:
    res = await client.initialize_session(lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(general=lsp.GeneralClientCapabilities(
            position_encodings=[lsp.PositionEncodingKind.Utf8, lsp.PositionEncodingKind.Utf16])),
        root_uri=WORK.as_uri(), initialization_options=init if init is not None else options()))
    if wait:
        await wait_state(client, "ready")
    return res


async def wait_state(client: LanguageClient, state: str, timeout: float = 60.0) -> None:
    async def poll() -> None:
        while not any(_get(s, "state") == state for s in client.statuses):  # type: ignore[attr-defined]
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout)


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def uri(name: str) -> str:
    return (WORK / name).as_uri()


def open_doc(client: LanguageClient, u: str, text: str, version: int = 1) -> None:
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=u, language_id="python", version=version, text=text)))


def change(client: LanguageClient, u: str, version: int, line: int, ch: int, end_line: int, end_ch: int,
           text: str) -> None:
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=u, version=version),
        content_changes=[lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(line=line, character=ch),
                            end=lsp.Position(line=end_line, character=end_ch)), text=text)]))


async def inline(client: LanguageClient, u: str, line: int, ch: int, invoked: bool = True
                 ) -> lsp.InlineCompletionList | list | None:
    kind = lsp.InlineCompletionTriggerKind.Invoked if invoked else lsp.InlineCompletionTriggerKind.Automatic
    return await client.text_document_inline_completion_async(lsp.InlineCompletionParams(
        text_document=lsp.TextDocumentIdentifier(uri=u), position=lsp.Position(line=line, character=ch),
        context=lsp.InlineCompletionContext(trigger_kind=kind)))


async def inline_edit(client: LanguageClient, u: str, version: int, line: int, ch: int) -> Any:
    return await client.protocol.send_request_async("textDocument/copilotInlineEdit", {
        "textDocument": {"uri": u, "version": version}, "position": {"line": line, "character": ch}})


async def raw_request(client: LanguageClient, method: str, params: Any) -> Any:
    """Send a request with arbitrary (possibly invalid) JSON params, bypassing client-side typing."""
    import uuid
    from concurrent.futures import Future

    msg_id = str(uuid.uuid4())
    fut: Future = Future()
    client.protocol._request_futures[msg_id] = fut
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return await asyncio.wait_for(asyncio.wrap_future(fut), 30)
