"""The remote backend end to end: the real LSP server (stdio) with ``remote.url`` pointing at a real
``edit-server http`` process on a free loopback port. Both run the tiny-random engine (folded to
printable ASCII, greedy), so the remote suggestion must equal the local one for the same document and
cursor — the prompt the LSP server built crossed the wire intact. Then: a remote that is down falls
back to the local model with a status naming the failure; a next edit goes through the remote too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from tests.conftest import ROOT
from tests.e2e.lsp_helpers import _get, config, inline, open_doc, options, start, uri, wait_state
from tests.remote_fake import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

TEXT = "def add(a, b):\n    return \n\n\nprint(add(1, 2))\n"
CURSOR = (1, 11)  # after "return "


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def remote() -> Iterator[str]:
    """A real `edit-server http` process (printable tiny-random engine) on a free port."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
               EDIT_SERVER_ENGINE_FACTORY="tests.e2e.fake_engines:printable")
    proc = subprocess.Popen([sys.executable, "-m", "edit_server", "http", "--port", str(port), "--model",
                             "tiny-random", "--device", "cpu", "--set", "feedbackDb=:memory:"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/ready", timeout=2) as r:
                    if json.loads(r.read()).get("ready"):
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.1)
        else:
            pytest.fail("edit-server http never became ready")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest_lsp.fixture(config=config("printable"), scope="module")
async def client(lsp_client: LanguageClient):
    await start(lsp_client, options(maxTokens=24))
    yield lsp_client
    await lsp_client.shutdown_session()


def _configure(client: LanguageClient, **kw: Any) -> None:
    client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(
        settings={"editServer": options(maxTokens=24, **kw)}))


async def _suggest(client: LanguageClient, name: str) -> str:
    u = uri(name)
    open_doc(client, u, TEXT)
    try:
        res = await inline(client, u, *CURSOR)
    finally:
        client.text_document_did_close(lsp.DidCloseTextDocumentParams(
            text_document=lsp.TextDocumentIdentifier(uri=u)))
    assert isinstance(res, lsp.InlineCompletionList) and len(res.items) == 1
    return str(res.items[0].insert_text)


def _route_calls(url: str) -> float:
    key = 'edit_server_http_requests_total{route="/v1/engine/complete",status="200"}'
    from edit_server.http.metrics import parse_text

    return parse_text(_metrics(url)).get(key, 0.0)


async def _ready_after(client: LanguageClient, n: int, naming: str) -> None:
    """Wait for a "ready" status sent after the first ``n`` statuses whose message names ``naming``
    (the reloaded engine: the old one's "ready" after its last request may come first)."""
    import asyncio

    for _ in range(3000):
        if any(_get(s, "state") == "ready" and naming in str(_get(s, "message"))
               for s in client.statuses[n:]):  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.02)
    pytest.fail("no ready status after the reload")


async def test_remote_suggestion_equals_the_local_one(client: LanguageClient, remote: str) -> None:
    local = await _suggest(client, "remote_same.py")
    n = len(client.statuses)  # type: ignore[attr-defined]
    _configure(client, remote={"url": remote})
    await _ready_after(client, n, remote)
    assert any(remote in str(_get(s, "message")) for s in client.statuses[n:])  # type: ignore[attr-defined]
    before = _route_calls(remote)
    got = await _suggest(client, "remote_same.py")
    assert _route_calls(remote) > before, "the suggestion did not come from the remote"
    assert got == local and got.strip()


async def test_next_edit_through_the_remote(client: LanguageClient, remote: str) -> None:
    n = len(client.statuses)  # type: ignore[attr-defined]
    _configure(client, remote={"url": remote, "timeoutMs": 30000})  # a different remote: reloads
    await _ready_after(client, n, remote)
    before = _route_calls(remote)
    u = uri("remote_edit.py")
    open_doc(client, u, TEXT)
    await client.protocol.send_request_async("textDocument/copilotInlineEdit", {
        "textDocument": {"uri": u, "version": 1}, "position": {"line": 1, "character": 11}})
    assert _route_calls(remote) > before


async def test_a_remote_that_is_down_falls_back_to_local_with_a_status(client: LanguageClient) -> None:
    n = len(client.statuses)  # type: ignore[attr-defined]
    dead = f"http://127.0.0.1:{free_port()}"
    _configure(client, remote={"url": dead, "connectTimeoutMs": 500, "retryS": 0})
    await _ready_after(client, n, dead)
    local_text = await _suggest(client, "remote_down.py")
    assert local_text.strip()  # the local model answered
    await wait_state(client, "degraded")
    msgs = [str(_get(s, "message")) for s in client.statuses[n:]  # type: ignore[attr-defined]
            if _get(s, "state") == "degraded"]
    assert any("unreachable" in m and "local model" in m and "127.0.0.1" in m for m in msgs), msgs
