"""Per-document cache of the last suggestion: reused while the user types what it predicted.

When the text before the anchor and after the cursor are unchanged and the characters typed since the
anchor are a prefix of the suggestion, the rest of the suggestion is still valid: no model call.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class Cached:
    id: str
    text: str  # suggested insertion at ``anchor``
    anchor: int
    before: str  # document text before the anchor when suggested
    after: str  # document text after the anchor when suggested
    score: float
    created: float


class SuggestCache:
    def __init__(self, capacity: int = 64, ttl_s: float = 30.0) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._items: OrderedDict[str, Cached] = OrderedDict()

    def put(self, uri: str, sid: str, text: str, doc_text: str, anchor: int, score: float) -> None:
        self._items[uri] = Cached(sid, text, anchor, doc_text[:anchor], doc_text[anchor:], score,
                                  time.monotonic())
        self._items.move_to_end(uri)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def drop(self, uri: str) -> None:
        self._items.pop(uri, None)

    def peek(self, uri: str) -> Cached | None:
        return self._items.get(uri)

    def lookup(self, uri: str, doc_text: str, cursor: int) -> tuple[Cached, str] | None:
        """(entry, remaining text) if the cached suggestion is still valid at ``cursor``."""
        c = self._items.get(uri)
        if c is None:
            return None
        if time.monotonic() - c.created > self.ttl_s:
            self.drop(uri)
            return None
        if cursor < c.anchor or not doc_text.startswith(c.before) or not doc_text.endswith(c.after):
            return None
        if len(doc_text) - len(c.after) != cursor:  # the cursor must sit right after the typed text
            return None
        typed = doc_text[c.anchor : cursor]
        if not c.text.startswith(typed) or len(typed) >= len(c.text):
            return None
        return c, c.text[len(typed):]

    def still_valid(self, uri: str, doc_text: str) -> bool:
        """Whether the document is consistent with typing (part of) the cached suggestion."""
        c = self._items.get(uri)
        if c is None or not doc_text.startswith(c.before) or not doc_text.endswith(c.after):
            return False
        typed = doc_text[len(c.before) : len(doc_text) - len(c.after)]
        return c.text.startswith(typed)
