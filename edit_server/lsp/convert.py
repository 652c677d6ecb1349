"""LSP wire conversions: UTF-16 positions <-> character offsets (the arithmetic: `engine.positions`), results ->
LSP types.

LSP positions count UTF-16 code units per line; Python strings index code points. Everything behind
this module works on code-point offsets into the document text.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types as lsp
from pygls.uris import to_fs_path

from engine.positions import line_starts, offset_to_position, position_to_offset, utf16_len  # noqa: F401 (re-exported)


def uri_path(uri: str) -> str:
    """The file system path of a ``file:`` URI, "" for any other."""
    return to_fs_path(uri) or ""


def to_position(text: str, offset: int, starts: list[int] | None = None) -> lsp.Position:
    line, ch = offset_to_position(text, offset, starts)
    return lsp.Position(line=line, character=ch)


def to_range(text: str, start: int, end: int) -> lsp.Range:
    starts = line_starts(text)
    return lsp.Range(start=to_position(text, start, starts), end=to_position(text, end, starts))


def range_to_offsets(text: str, rng: lsp.Range, starts: list[int] | None = None) -> tuple[int, int]:
    starts = starts if starts is not None else line_starts(text)
    a = position_to_offset(text, rng.start.line, rng.start.character, starts)
    b = position_to_offset(text, rng.end.line, rng.end.character, starts)
    return (a, b) if a <= b else (b, a)


def accept_command(sid: str, kind: str, score: float, uri: str, version: int, origin: str = "model") -> lsp.Command:
    """``origin``: who wrote a next edit ("model", "sampled", "echo", "repeat", "analog", "move", "import"), for clients and evals that calibrate
    each source apart (`edit-server align gate`)."""
    return lsp.Command(
        title="Accept suggestion",
        command="editServer.accept",
        arguments=[{"id": sid, "kind": kind, "score": round(float(score), 4), "uri": uri,
                    "version": version, "origin": origin}],
    )


def line_rest_end(text: str, offset: int) -> int:
    """Offset of the end of the line ``offset`` is on (before its line break)."""
    ends = [i for i in (text.find("\n", offset), text.find("\r", offset)) if i >= 0]
    return min(ends) if ends else len(text)


def inline_item(text: str, uri: str, version: int, cursor: int, sug: Any) -> lsp.InlineCompletionItem:
    """An inline completion item for ``sug.text`` inserted at the cursor. LSP: ``insertText`` replaces
    ``range``; the range runs from the cursor to the end of its line and the insert text carries the
    rest of that line after the suggestion, so clients that draw the item over the range (Neovim's
    overlay, lsp-mode) show the final line, never the suggestion drawn over the code right of the
    cursor."""
    end = line_rest_end(text, cursor)
    return lsp.InlineCompletionItem(
        insert_text=sug.text + text[cursor:end],
        range=to_range(text, cursor, end),
        command=accept_command(sug.id, "fim", sug.score, uri, version),
    )


def completion_item(text: str, uri: str, version: int, cursor: int, sug: Any) -> lsp.CompletionItem:
    """The FIM suggestion as a completion item, for clients without inline completion (Helix, Sublime,
    LSP4IJ): a ``textEdit`` from the start of the word before the cursor (clients filter items by that
    word) to the cursor, whose new text is that word + the suggestion; a one-line range, as LSP asks."""
    start = cursor
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    new = text[start:cursor] + sug.text
    first, _, more = new.partition("\n")
    label = first.strip() or new.strip()
    return lsp.CompletionItem(
        label=(label[:77] + "…" if len(label) > 78 else label) + (" …" if more.strip() else ""),
        kind=lsp.CompletionItemKind.Snippet,
        detail="edit-server",
        documentation=lsp.MarkupContent(kind=lsp.MarkupKind.PlainText, value=new) if more.strip() else None,
        filter_text=first,
        sort_text="0",
        preselect=True,
        insert_text_format=lsp.InsertTextFormat.PlainText,
        text_edit=lsp.TextEdit(range=to_range(text, start, cursor), new_text=new),
        command=accept_command(sug.id, "fim", sug.score, uri, version),
    )


def inline_edit(text: str, uri: str, version: int, edit: Any, sid: str, score: float,
                origin: str = "model", jump: bool = False) -> dict[str, Any]:
    """One Copilot-style `copilotInlineEdit` edit (plain JSON); ``jump``: away from the cursor's lines (the
    editor shows a marker and a key to go there, `editors/`)."""
    rng = to_range(text, edit.start, edit.end)
    cmd = accept_command(sid, "edit", score, uri, version, origin)
    return {
        "text": edit.text,
        "textDocument": {"uri": uri, "version": version},
        "range": {"start": {"line": rng.start.line, "character": rng.start.character},
                  "end": {"line": rng.end.line, "character": rng.end.character}},
        "command": {"title": cmd.title, "command": cmd.command, "arguments": cmd.arguments},
        **({"jump": True} if jump else {}),
    }
