"""Open documents: line starts kept up to date around each edit (never rescanned per keystroke), the
changed span of a full-text sync found without a loop per character — a 20 MB document's keystroke
cost only the string copy (issue: hardening, big inputs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lsprotocol import types as lsp

from edit_server.core import documents
from edit_server.core.documents import DocumentStore, line_starts
from edit_server.lsp import convert
from engine import textdiff
from engine.textdiff import changed_span, common_ends

PIECE = st.sampled_from(["a", "b", "\r", "\n", "\r\n", "é", "😀", ""])
TEXT = st.lists(PIECE, max_size=30).map("".join)


def naive_ends(a: str, b: str) -> tuple[int, int]:
    p, n = 0, min(len(a), len(b))
    while p < n and a[p] == b[p]:
        p += 1
    s = 0
    while s < n - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    return p, s


@settings(max_examples=300, deadline=None)
@given(TEXT, st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), TEXT, st.booleans()), max_size=12))
def test_line_starts_follow_every_edit(text: str, edits: list[tuple[float, float, str, bool]]) -> None:
    docs = DocumentStore()
    doc = docs.open("u", "", text, 1)
    assert doc.line_starts() == line_starts(text)
    for x, y, new, full in edits:
        a, b = sorted((int(x * len(doc.text)), int(y * len(doc.text))))
        if full:  # a full-text sync, applied as its changed span
            docs.replace_all("u", doc.text[:a] + new + doc.text[b:])
        else:
            docs.apply("u", a, b, new)
        assert doc.line_starts() == line_starts(doc.text), repr(doc.text)


@pytest.mark.parametrize("block", [1, 3, 1 << 14])
@settings(max_examples=200, deadline=None)
@given(a=st.text("ab\n", max_size=40), b=st.text("ab\n", max_size=40))
def test_common_ends_match_a_character_loop(block: int, a: str, b: str) -> None:
    old = textdiff._BLOCK
    textdiff._BLOCK = block  # block boundaries inside short texts
    try:
        assert common_ends(a, b) == naive_ends(a, b)
        p, s = naive_ends(a, b)
        assert changed_span(a, b) == (p, len(a) - s, len(b) - s)  # the span infer_edit and the evals use
    finally:
        textdiff._BLOCK = old


def test_keystrokes_never_rescan_the_document(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ("x = 1\r\n" * 50_000) + "tail\n"
    docs = DocumentStore()
    doc = docs.open("u", "", text, 1)
    calls: list[int] = []
    real = documents.line_starts
    monkeypatch.setattr(documents, "line_starts", lambda t: calls.append(len(t)) or real(t))
    monkeypatch.setattr(convert, "line_starts", lambda t: pytest.fail("a whole-document line scan"))
    for i in range(200):  # typing at the end of line 40,000, as the LSP handler applies it
        pos = lsp.Position(line=40_000, character=5 + i)
        a, b = convert.range_to_offsets(doc.text, lsp.Range(start=pos, end=pos), doc.line_starts())
        docs.apply("u", a, b, "y")
    docs.replace_all("u", doc.text.replace("tail", "TAIL"))
    assert calls == [len(text)]  # the index was built once, on first use
    assert doc.line_starts() == real(doc.text)
    assert doc.text.splitlines()[40_000] == "x = 1" + "y" * 200


def test_the_server_keeps_one_copy_of_each_document() -> None:
    """pygls's own workspace copy is not kept: it cost a whole-document pass per keystroke."""
    import io
    import json

    from edit_server.lsp.server import build

    def frame(obj: dict) -> bytes:
        body = json.dumps(obj).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    uri = "file:///tmp/edit-server-docs/a.py"
    state = {"command": "editServer.documentState", "arguments": [{"uri": uri}]}
    msgs = [{"id": 1, "method": "initialize", "params": {"capabilities": {}, "initializationOptions": {
                "feedbackDb": ":memory:", "model": "tiny-random", "device": "cpu"}}},
            {"method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": "a = 1\r\nb = 2\n"}}},
            {"method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
                {"range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 5}}, "text": "3\r"}]}},
            {"id": 2, "method": "workspace/executeCommand", "params": state},
            {"id": 3, "method": "shutdown"}, {"method": "exit"}]
    out = io.BytesIO()
    ls = build()
    assert ls.serve(io.BytesIO(b"".join(frame({"jsonrpc": "2.0", **m}) for m in msgs)), out) == 0
    assert ls.protocol.workspace.text_documents == {}
    replies = [json.loads(part.split(b"\r\n\r\n", 1)[1]) for part in out.getvalue().split(b"Content-Length")[1:]]
    [doc] = [r["result"] for r in replies if r.get("id") == 2]
    assert doc["version"] == 2 and doc["length"] == len("a = 1\r\nb = 3\r\n")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab\n", max_size=40), st.data())
def test_the_history_line_window_is_two_line_spans(text: str, data: st.DataObject) -> None:
    """The edit history's window of lines around an edit ([start, end) widened to whole lines plus ``context``
    lines each side) is `engine.textdiff.line_span` at each end — the loop it replaced, kept here as the
    reference."""
    from edit_server.core.history import _line_window

    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    context = data.draw(st.integers(0, 3))
    a = text.rfind("\n", 0, start) + 1
    for _ in range(context):
        if a == 0:
            break
        a = text.rfind("\n", 0, a - 1) + 1
    b = end
    for _ in range(context + 1):
        nl = text.find("\n", b)
        if nl < 0:
            b = len(text)
            break
        b = nl + 1
    assert _line_window(text, start, end, context) == (a, b)
