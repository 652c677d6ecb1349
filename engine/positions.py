"""Line starts and LSP positions (line, UTF-16 character) ↔ character offsets: plain text arithmetic, shared by the
server's document store and wire conversions (`edit_server.core.documents`, `edit_server.lsp.convert`) and the one
LSP client (`evals.lsp_client`), which sits below the server and so cannot import it.

LSP positions count UTF-16 code units per line; Python strings index code points."""

from __future__ import annotations

import re

EOL = re.compile(r"\r\n|\r|\n")  # LSP line breaks


def line_starts(text: str) -> list[int]:
    """Offsets where each line starts (LSP line breaks: \\n, \\r\\n, \\r)."""
    return [0, *(m.end() for m in EOL.finditer(text))]


def line_end(text: str, starts: list[int], line: int) -> int:
    """Offset of the end of ``line`` excluding its line break."""
    if line + 1 < len(starts):
        end = starts[line + 1]
        if text[end - 2 : end] == "\r\n":
            return end - 2
        return end - 1
    return len(text)


def utf16_len(s: str) -> int:
    """UTF-16 code units of ``s`` (a lone surrogate counts one), without a loop per character."""
    return len(s) if s.isascii() else len(s.encode("utf-16-le", "surrogatepass")) // 2


def position_to_offset(text: str, line: int, character: int, starts: list[int] | None = None) -> int:
    """Offset of an LSP (line, UTF-16 character) position; clamped to the document / line end."""
    starts = starts if starts is not None else line_starts(text)
    if line < 0:
        return 0
    if line >= len(starts):
        return len(text)
    start, end = starts[line], line_end(text, starts, line)
    units = 0
    for i in range(start, end):
        if units >= character:
            return i
        units += 2 if ord(text[i]) > 0xFFFF else 1
    return end


def offset_to_position(text: str, offset: int, starts: list[int] | None = None) -> tuple[int, int]:
    """(line, UTF-16 character) of a character offset."""
    starts = starts if starts is not None else line_starts(text)
    offset = max(0, min(offset, len(text)))
    lo, hi = 0, len(starts) - 1
    while lo < hi:  # last line start <= offset
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo, utf16_len(text[starts[lo] : offset])
