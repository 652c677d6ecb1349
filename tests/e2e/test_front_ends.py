"""One serving path: the LSP server (real, over stdio) and the HTTP front end (in-process app) give the
same suggestion for the same document and cursor — both go through core.Pipeline with the same
tiny-random weights, settings and gate (its output folded to printable ASCII: random weights emit bytes
that are not UTF-8, which the tokenizer drops)."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_lsp
from aiohttp.test_utils import TestClient, TestServer
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from edit_server.core.settings import build_settings
from edit_server.http.app import make_app
from tests.e2e.fake_engines import printable
from tests.e2e.lsp_helpers import config, inline, open_doc, options, start, uri

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

TEXT = "def add(a, b):\n    return \n\n\nprint(add(1, 2))\n"
CURSOR = (1, 11)  # after "return "


@pytest_lsp.fixture(config=config("printable"), scope="module")
async def client(lsp_client: LanguageClient):
    await start(lsp_client, options(maxTokens=24))
    yield lsp_client
    await lsp_client.shutdown_session()


def _offset() -> int:
    line, ch = CURSOR
    return sum(len(x) + 1 for x in TEXT.split("\n")[:line]) + ch


async def test_lsp_and_http_give_the_same_fim_suggestion(client: LanguageClient) -> None:
    u = uri("same.py")
    open_doc(client, u, TEXT)
    res = await inline(client, u, *CURSOR)
    assert isinstance(res, lsp.InlineCompletionList) and len(res.items) == 1
    lsp_text = res.items[0].insert_text
    lsp_score = res.items[0].command.arguments[0]["score"]

    # the same settings object the LSP server built from the same options, through the same function
    settings, bad = build_settings(options(maxTokens=24), {"model": "tiny-random", "device": "cpu"})
    assert bad == []
    off = _offset()
    prompt = f"<|file_sep|>same.py\n<|fim_prefix|>{TEXT[:off]}<|fim_suffix|>{TEXT[off:]}<|fim_middle|>"
    async with TestClient(TestServer(make_app(settings, engine=printable("tiny-random", "cpu")))) as http:
        body: dict[str, Any] = {"model": "m", "prompt": prompt, "max_tokens": 24, "stop": []}
        for _ in range(200):  # the app loads its model in the background: 503 until ready
            r = await http.post("/v1/completions", json=body)
            if r.status != 503:
                break
        assert r.status == 200
        http_text = (await r.json())["choices"][0]["text"]
    assert http_text == lsp_text and lsp_text.strip()
    assert 0.0 <= lsp_score <= 1.0
