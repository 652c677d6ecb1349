"""The real `edit-server --model tiny-random --device cpu` over stdio: whatever the random model produces
must come back well-formed, and applying edits keeps client and server in sync. Twice: with the model as
it is (no test factory; its random bytes are mostly not UTF-8, so little or nothing may show) and with its
output folded into printable ASCII (``printable``: the same prompts and steps, each token mapped to a
printable one), where a suggestion and edits must come back, so the round trip's checks run on real items."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from edit_server.lsp.convert import position_to_offset
from tests.e2e.lsp_helpers import change, config, inline, inline_edit, open_doc, start, uri

pytestmark = pytest.mark.e2e


@pytest_lsp.fixture(config=config())
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=config("printable"))
async def printable_client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


def _offset(text: str, line: int, ch: int) -> int:  # the random model may emit any characters
    return position_to_offset(text, line, ch)


async def _round_trip(client: LanguageClient) -> tuple[list, int, list]:
    """Type, ask for a completion, apply whatever edits come back (twice), ask again at the very end.
    Returns (the first completion's items, the edits applied, the last completion's items)."""
    await start(client)
    u = uri("tiny.py")
    text = "def area(w, h):\n    return w * w\n\nprint(area(2, 3))\n"
    open_doc(client, u, text)
    version = 1
    # typed on the line the next edits are asked on: a rewrite of a line the user typed on and left is
    # never shown (edit_server.selectivity.candidates)
    for i, ch in enumerate("  # "):
        change(client, u, version + 1, 1, 16 + i, 1, 16 + i, ch)
        text = text[: _offset(text, 1, 16 + i)] + ch + text[_offset(text, 1, 16 + i):]
        version += 1
    res = await inline(client, u, 1, 20)
    items = [] if res is None else (res.items if isinstance(res, lsp.InlineCompletionList) else res)
    # the random model is deterministic (greedy): record what it gives, then check every part of it
    assert len(items) <= 1
    assert all(it.insert_text.strip() for it in items)
    assert all(it.range.start == lsp.Position(line=1, character=20) for it in items)
    assert all(it.command.arguments[0]["version"] == version for it in items)
    applied = 0
    for _ in range(2):  # apply whatever edits come back, twice; ranges must stay inside the document
        out = await inline_edit(client, u, version, 1, 12)
        spans = [(_offset(text, e.range.start.line, e.range.start.character),
                  _offset(text, e.range.end.line, e.range.end.character), e.text, e.range, e.textDocument.version)
                 for e in out.edits]
        assert all(0 <= a <= b <= len(text) and v == version and "\r" not in t for a, b, t, _r, v in spans)
        for a, b, t, r, _v in sorted(spans, key=lambda s: s[0], reverse=True):
            version += 1
            change(client, u, version, r.start.line, r.start.character, r.end.line, r.end.character, t)
            text = text[:a] + t + text[b:]
            applied += 1
    # the document the server holds is the one we hold: an edit at the very end lands where we expect
    end_line = text.count("\n")
    end_ch = len(text) - (text.rfind("\n") + 1)
    change(client, u, version + 1, end_line, end_ch, end_line, end_ch, "# end\n")
    text += "# end\n"
    res = await inline(client, u, end_line + 1, 0)
    later = [] if res is None else (res.items if isinstance(res, lsp.InlineCompletionList) else res)
    assert all(it.command.arguments[0]["version"] == version + 1 for it in later)
    # the random weights emit bytes that are not UTF-8: the tokenizer drops them, so the round trip may
    # well be empty; whatever comes back never carries U+FFFD (tests/test_utf8_output.py)
    assert all("\ufffd" not in it.insert_text for it in items + later), (items, later)
    return items, applied, later


async def test_real_tiny_random_round_trip(client: LanguageClient) -> None:
    items, _applied, later = await _round_trip(client)
    assert len(items) <= 1 and len(later) <= 1  # random bytes: whatever decodes, or nothing


async def test_printable_tiny_random_round_trip(printable_client: LanguageClient) -> None:
    """Printable output: the checks in `_round_trip` run on a real suggestion and real edits."""
    items, applied, later = await _round_trip(printable_client)
    assert len(items) == 1 and len(later) == 1 and applied >= 1, (items, applied, later)
