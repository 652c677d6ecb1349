"""Open documents: text and version per URI, edits applied as character offsets.

Nothing here is linear in the document per keystroke beyond copying its string: line starts are kept
up to date around each edit, and a full-text sync finds its changed span by comparing blocks."""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

from engine.positions import EOL, line_starts
from engine.textdiff import common_ends


def shift_starts(starts: list[int], new_text: str, start: int, end: int, delta: int) -> list[int]:
    """Line starts after [start, end) of a text with line starts ``starts`` became ``new_text``'s
    [start, end + delta): only the lines around the edit are scanned again (a line break right
    before or after it may join into or split from a \\r\\n)."""
    k = max(0, bisect.bisect_left(starts, start) - 1)  # the last line start before the edit (or 0)
    j = bisect.bisect_left(starts, end + 1)  # the first one after it, not next to it
    stop = starts[j] + delta if j < len(starts) else len(new_text)
    out = starts[: k + 1]
    out += [m.end() for m in EOL.finditer(new_text, starts[k], stop)]
    out += starts[j + 1:] if not delta else [x + delta for x in starts[j + 1:]]
    return out


@dataclass
class Document:
    uri: str
    path: str  # filesystem path ("" when the URI is not a file)
    text: str
    version: int
    language_id: str = ""
    _starts: list[int] | None = field(default=None, repr=False, compare=False)

    def line_starts(self) -> list[int]:
        """Offsets where each line of ``text`` starts (kept up to date by the store's edits)."""
        if self._starts is None:
            self._starts = line_starts(self.text)
        return self._starts


@dataclass(frozen=True)
class EditEvent:
    """One text change: ``old`` at [start, end) of ``before`` replaced by ``new``."""

    path: str
    start: int
    end: int
    old: str
    new: str
    time: float
    before: str  # whole document before the change
    after: str  # whole document after the change


class DocumentStore:
    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}

    def open(self, uri: str, path: str, text: str, version: int, language_id: str = "") -> Document:
        doc = Document(uri, path, text, version, language_id)
        self._docs[uri] = doc
        return doc

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def __iter__(self):
        return iter(list(self._docs.values()))

    def apply(self, uri: str, start: int, end: int, new: str, now: float | None = None) -> EditEvent:
        """Replace [start, end) with ``new`` (offsets clamped); returns the edit event."""
        doc = self._docs[uri]
        before = doc.text
        start = max(0, min(start, len(before)))
        end = max(start, min(end, len(before)))
        doc.text = before[:start] + new + before[end:]
        if doc._starts is not None:
            doc._starts = shift_starts(doc._starts, doc.text, start, end, len(new) - (end - start))
        return EditEvent(doc.path, start, end, before[start:end], new,
                         time.monotonic() if now is None else now, before, doc.text)

    def replace_all(self, uri: str, text: str, now: float | None = None) -> EditEvent:
        """Full-text sync, recorded as the minimal changed span."""
        old = self._docs[uri].text
        a, b = common_ends(old, text)
        return self.apply(uri, a, len(old) - b, text[a : len(text) - b], now)

    def set_version(self, uri: str, version: int) -> None:
        self._docs[uri].version = version
