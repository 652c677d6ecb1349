"""Quick FIM prompts: the first answers after the cursor jumps, before the full prompt is computed.

A jump out of the sticky window (`edit_server.context.sticky`) means a full build: new file window, new
definitions. The prefix KV cache holds only what the new prompt shares with the last one — the part
before the file window at best — so on a CPU the first answer at the new place waits for ~1,000 tokens
of prefill (~2 s on two cores). A quick prompt instead keeps the sections and history of the FIM
prompt the document's last answer was computed from, byte for byte (their KV is in the document's
cache slot), and puts a short window of the file around the cursor behind them: only that window is
computed. Its lines stay put while the user types inside them, as a sticky build's do, so the next
keystrokes recompute only the cursor's line. The full build's prompt is prefilled while the server is
idle (`edit_server.serving.ahead`) and served as soon as the cache holds it.

What is kept here is cleared with the sticky builds (new options, changed files or roots, a closed
document): a quick prompt never carries a section read under exclusions that no longer hold.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from edit_server.context import sources as src
from edit_server.context.sticky import StickyFim, copy_reports
from engine.templates import FimPrompt, Section

QUICK_MIN = 48  # tokens a quick window always has (a few lines around the cursor)
QUICK_MAX = 384  # ... and never more (past that it is no quicker than a full build's window)
WINDOWS = 2  # quick windows kept per document: behind the served head and behind the full build's


@dataclass
class Served:
    """The head (sections, history) of the last FIM prompt answered for a document, at its budget."""

    sections: tuple[Section, ...]
    history: tuple[str, ...]
    budget: int
    sources: list[src.SourceReport]
    created: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, prompt: FimPrompt, budget: int, sources: list[src.SourceReport]) -> Served:
        return cls(tuple(prompt.sections), tuple(prompt.history), budget, copy_reports(sources))


class QuickPrompts:
    """Per document: the served head, and the quick window's lines while the user types inside them."""

    def __init__(self) -> None:
        self._served: dict[str, Served] = {}
        self._windows: dict[str, list[StickyFim]] = {}  # per head (served / the full build's), newest last

    def served(self, path: str, prompt: FimPrompt, budget: int, sources: list[src.SourceReport]) -> None:
        """``prompt`` was answered for ``path``: its head is what a quick prompt reuses (a quick prompt's own
        head is the same one, which keeps its age)."""
        sections, history = tuple(prompt.sections), tuple(prompt.history)
        old = self._served.get(path)
        if old is not None and (old.sections, old.history, old.budget) == (sections, history, budget):
            return
        self._served[path] = Served.of(prompt, budget, sources)
        self._windows.pop(path, None)  # a new head: the next quick window is built behind it

    def head(self, path: str, budget: int, ttl_s: float) -> Served | None:
        """The served head when it is still worth reusing: same budget, younger than ``ttl_s``."""
        h = self._served.get(path)
        if h is None or h.budget != budget or ttl_s <= 0 or time.monotonic() - h.created > ttl_s:
            return None
        return h

    def window(self, path: str, sections: tuple[Section, ...], history: tuple[str, ...]) -> StickyFim | None:
        """The quick window kept behind this head (its lines, while the user types inside them)."""
        return next((w for w in self._windows.get(path, []) if (w.sections, w.hist) == (sections, history)), None)

    def keep(self, path: str, win: StickyFim) -> None:
        kept = [w for w in self._windows.get(path, []) if (w.sections, w.hist) != (win.sections, win.hist)]
        self._windows[path] = [*kept[-(WINDOWS - 1):], win]

    def clear(self, path: str | None = None) -> None:
        if path is None:
            self._served.clear()
            self._windows.clear()
        else:
            self._served.pop(path, None)
            self._windows.pop(path, None)
