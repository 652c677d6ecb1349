"""End to end over stdio with a slow engine: supersede, $/cancelRequest, configuration changes,
requests before the model is ready, shutdown/exit."""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import Future
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.e2e.lsp_helpers import config, inline, open_doc, options, start, uri, wait_state

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]
TEXT = "def add(a, b):\n    return \n"


@pytest_lsp.fixture(config=config("slow"), scope="module")
async def client(lsp_client: LanguageClient):
    # invalid values fall back to their defaults with one warning naming the keys
    await start(lsp_client, options(maxTokens=32, contextBudget="lots", gate={"threshold": 7}), wait=False)
    yield
    await lsp_client.shutdown_session()
    assert lsp_client._server.returncode == 0


async def _timed(coro: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = await coro
    return out, time.perf_counter() - t0


def _send(client: LanguageClient, u: str, msg_id: str) -> Future:
    fut: Future = Future()
    client.protocol._request_futures[msg_id] = fut
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/inlineCompletion",
                                "params": {"textDocument": {"uri": u}, "position": {"line": 1, "character": 11},
                                           "context": {"triggerKind": 1}}})
    return fut


async def test_before_ready_answers_empty_fast_and_bad_settings_warn(client: LanguageClient) -> None:
    u = uri("early.py")
    open_doc(client, u, TEXT)
    out, dt = await _timed(inline(client, u, 1, 11))
    if not any(s.state == "ready" for s in client.statuses):  # type: ignore[attr-defined]
        assert out is None and dt < 2.0
    await wait_state(client, "ready")
    assert any(s.state == "loading" for s in client.statuses)  # type: ignore[attr-defined]
    [msg] = [m for m in client.messages if "edit-server settings" in m.message]
    assert "contextBudget" in msg.message and "gate.threshold" in msg.message
    assert msg.type == lsp.MessageType.Warning


async def test_newer_request_supersedes_older(client: LanguageClient) -> None:
    await wait_state(client, "ready")
    u = uri("sup.py")
    open_doc(client, u, TEXT)
    _, full = await _timed(inline(client, u, 1, 11))  # one whole generation (~32 slow steps)
    assert full > 1.0
    t0 = time.perf_counter()
    first = asyncio.wrap_future(_send(client, u, str(uuid.uuid4())))
    await asyncio.sleep(0.3)
    second = asyncio.wrap_future(_send(client, u, str(uuid.uuid4())))
    await first
    t_first = time.perf_counter() - t0
    await second
    t_second = time.perf_counter() - t0
    assert t_first < full * 0.7, "the superseded request should stop early"
    assert t_second < 0.3 + full * 1.5, "the newer request should not wait for the older one"


async def test_cancel_request_aborts_engine_work(client: LanguageClient) -> None:
    await wait_state(client, "ready")
    u = uri("cancel.py")
    open_doc(client, u, TEXT)
    _, full = await _timed(inline(client, u, 1, 11))
    msg_id = str(uuid.uuid4())
    fut = asyncio.wrap_future(_send(client, u, msg_id))
    await asyncio.sleep(0.3)
    client.protocol.notify("$/cancelRequest", lsp.CancelParams(id=msg_id))
    t0 = time.perf_counter()
    with pytest.raises(Exception) as err:  # RequestCancelled (-32800)
        await fut
    assert "cancel" in str(err.value).lower()
    # the worker is free again quickly: the next request is not queued behind the cancelled one
    other = uri("cancel2.py")
    open_doc(client, other, TEXT)
    _, dt = await _timed(inline(client, other, 1, 11))
    assert time.perf_counter() - t0 < full * 1.6
    assert dt < full * 1.5


async def test_configuration_change_takes_effect(client: LanguageClient) -> None:
    await wait_state(client, "ready")
    u = uri("cfg.py")
    open_doc(client, u, TEXT)
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"editServer": {"inlineCompletion": {"enabled": False}}}))
    out, dt = await _timed(inline(client, u, 1, 11))
    assert out is None and dt < 1.0  # disabled: no model call at all
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"inlineCompletion": {"enabled": True}, "maxTokens": 8}))
    _, dt8 = await _timed(inline(client, u, 1, 11))
    assert 0.2 < dt8 < 2.5  # 8 tokens at ~1 step each (plus prefill) instead of 32


async def test_debounce_drops_the_older_request(client: LanguageClient) -> None:
    await wait_state(client, "ready")
    u = uri("deb.py")
    open_doc(client, u, TEXT)
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"debounceMs": 400, "maxTokens": 8}))
    t0 = time.perf_counter()
    first = asyncio.wrap_future(_send(client, u, str(uuid.uuid4())))
    await asyncio.sleep(0.1)
    second = asyncio.wrap_future(_send(client, u, str(uuid.uuid4())))
    assert await first is None  # superseded while debouncing: no model call
    t_first = time.perf_counter() - t0
    await second
    assert t_first < 1.0
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings={"debounceMs": 0}))
