"""Open documents: text and version per URI, edits applied as character offsets."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Document:
    uri: str
    path: str  # filesystem path ("" when the URI is not a file)
    text: str
    version: int
    language_id: str = ""


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
        return EditEvent(doc.path, start, end, before[start:end], new,
                         time.monotonic() if now is None else now, before, doc.text)

    def replace_all(self, uri: str, text: str, now: float | None = None) -> EditEvent:
        """Full-text sync, recorded as the minimal changed span."""
        old = self._docs[uri].text
        a, n = 0, min(len(old), len(text))
        while a < n and old[a] == text[a]:
            a += 1
        b = 0
        while b < n - a and old[len(old) - 1 - b] == text[len(text) - 1 - b]:
            b += 1
        return self.apply(uri, a, len(old) - b, text[a : len(text) - b], now)

    def set_version(self, uri: str, version: int) -> None:
        self._docs[uri].version = version
