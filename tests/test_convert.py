"""UTF-16 positions <-> offsets (emoji, CJK, CRLF) and LSP result shapes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edit_server.core.requests import Suggestion, TextEdit
from edit_server.lsp import convert

LINE = 'x = "😀中文🎉" + y\n'


@pytest.mark.parametrize(("text", "line", "char", "offset"), [
    (LINE, 0, 5, 5),  # before the emoji
    (LINE, 0, 7, 6),  # after 😀 (2 UTF-16 units, 1 code point)
    (LINE, 0, 8, 7),  # after 中
    (LINE, 0, 9, 8),  # after 文
    (LINE, 0, 11, 9),  # after 🎉
    (LINE, 0, 99, len(LINE) - 1),  # past the end of the line: clamped to the line end
    (LINE, 5, 0, len(LINE)),  # past the last line: end of document
    ("a\r\nb", 1, 1, 4),  # CRLF is one line break
    ("a\r\nb", 0, 5, 1),
    ("a\rb\nc", 2, 0, 4),  # lone CR breaks lines too
])
def test_position_to_offset(text: str, line: int, char: int, offset: int) -> None:
    assert convert.position_to_offset(text, line, char) == offset


def test_offset_to_position_mixed_line() -> None:
    text = "ab\n" + LINE
    assert convert.offset_to_position(text, 3 + 6) == (1, 7)
    assert convert.offset_to_position(text, 3 + 9) == (1, 11)
    assert convert.offset_to_position(text, len(text)) == (2, 0)


@given(st.text(alphabet=st.sampled_from(list("ab \n😀中\r")), max_size=40), st.data())
def test_roundtrip(text: str, data: st.DataObject) -> None:
    off = data.draw(st.integers(0, len(text)))
    if 0 < off < len(text) and text[off - 1] == "\r" and text[off] == "\n":
        off += 1  # inside a CRLF pair is not a position
    line, ch = convert.offset_to_position(text, off)
    assert convert.position_to_offset(text, line, ch) == off


def test_result_shapes() -> None:
    text = "😀 = 1\n"
    item = convert.inline_item(text, "file:///a.py", 3, 1, Suggestion("id1", "fim", "x", 1, 1, 0.25, True))
    # insertText replaces range: from the cursor (after the emoji: 2 UTF-16 units) to the line end
    assert item.range.start.character == 2 and item.range.end.character == 6 and item.range.end.line == 0
    assert item.insert_text == "x = 1"
    assert item.command.arguments == [{"id": "id1", "kind": "fim", "score": 0.25, "uri": "file:///a.py",
                                       "version": 3, "origin": "model"}]
    e = convert.inline_edit(text, "file:///a.py", 3, TextEdit(4, 5, "2"), "id2", 0.5)
    assert e["range"] == {"start": {"line": 0, "character": 5}, "end": {"line": 0, "character": 6}}
    assert e["textDocument"] == {"uri": "file:///a.py", "version": 3}
    assert e["command"]["arguments"][0]["kind"] == "edit"


@pytest.mark.parametrize(("text", "cursor", "sug", "final"), [
    ("f(, 1)\n", 2, "a + b", "f(a + b, 1)\n"),  # mid-line: the rest of the line follows the suggestion
    ("f(\r\nx", 2, "a", "f(a\r\nx"),  # end of a CRLF line: an empty range at the line end
    ("x = ", 4, "1\ny = 2", "x = 1\ny = 2"),  # end of document, multi-line
    ("g()\n", 2, "a,\n    b", "g(a,\n    b)\n"),  # multi-line before a closer: ")" moves to the last line
    ("é(😀)", 4, "z", "é(😀)z"),  # UTF-16 columns past astral characters
])
def test_inline_item_replaces_to_line_end(text: str, cursor: int, sug: str, final: str) -> None:
    """Applying the item as LSP says (insertText replaces range) gives the document with the
    suggestion inserted at the cursor; the range never spans a line break."""
    item = convert.inline_item(text, "u", 1, cursor, Suggestion("i", "fim", sug, cursor, cursor, 1.0, True))
    a, b = convert.range_to_offsets(text, item.range)
    assert a == cursor and item.range.start.line == item.range.end.line
    assert text[:a] + item.insert_text + text[b:] == final


@pytest.mark.parametrize(("sug", "rest", "out"), [
    ("a + b, 1)", ", 1)", "a + b"),  # the model re-typed the rest of the line: drop it
    ("a + b)", "b)", "a + "),
    ("foo()", ")", "foo()"),  # only closers: may close its own call, kept
    ("x", "x", "x"),  # nothing but the rest: kept (the gate's repeat filter decides)
    ("a\n  b)", "b)", "a\n  b)"),  # multi-line: untouched
    ("a + c", ", 1)", "a + c"),
])
def test_without_line_rest(sug: str, rest: str, out: str) -> None:
    from edit_server.selectivity.select import without_line_rest

    assert without_line_rest(sug, rest) == out
