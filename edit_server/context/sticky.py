"""Sticky FIM context: while the user types inside the last window, the prompt only grows at the cursor.

The prompt's prefix KV cache (engine) reuses the longest common token prefix of consecutive prompts. A
fresh build per keystroke moves that point far to the left: the window's first and last lines follow
the budget (a longer prefix pushes the suffix's end up), the definitions follow the identifier being
typed (a half-typed name ranks other definitions) and open-file snippets come and go with the carry of
the other sources — each such change re-prefills everything after it (~1,500 tokens of a 2K prompt,
seconds on a CPU). So the last build of a document is kept and reused while

* the document is unchanged before the window's first line and from its end line on,
* the cursor is inside the window's lines,
* the edit history of *other* files has no hunk newer than the build (this file's own edits are in
  the window; an edit elsewhere in it changes the text outside the window or stays visible in it; an
  older hunk that fell out of the recent list as this file's hunks came in stays in the prompt, and
  one that comes back when such a hunk is undone changes nothing: `Others.news`),
* the budget is the same and the window still fits what the build left for it,
* the file's uncommitted git diff is the one the build saw (a save refreshes it),
* and the build is younger than ``ttl_s`` (context sources refresh at least that often).

Then the sections and history are the build's, and the window keeps its first and last line: the
prompt differs from the last one only from the cursor's line on (SPM: only the prefix's end). A jump
outside the window, an edit outside it, a new exclusion (the builder drops every sticky build when its
options change) or an expired build means a full build.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

from edit_server.context import sources as src
from engine.templates import Section

TTL_S = 60.0
# tokens (at most an eighth of its room) a budget-cut window leaves free when it is built, so typing that
# much more keeps the build (the bench's typing outgrew a full window within a line: a full rebuild, new
# sources, a ~1K-token re-prefill)
STICKY_GROW = 128


def copy_reports(reports: Sequence[src.SourceReport]) -> list[src.SourceReport]:
    """Source reports a build may change without touching the kept ones."""
    return [dataclasses.replace(r, items=list(r.items)) for r in reports]


@dataclass(frozen=True)
class Others:
    """What a sticky build depends on in the edit history: the other files' hunks (path, diff,
    timestamp), and the newest hunk of any file the build saw."""

    hunks: tuple[tuple[str, str, float], ...] = ()
    newest: float = float("-inf")

    def news(self, built: Others) -> bool:
        """A hunk of another file the build did not see: a new one, or one that changed since (its
        timestamp moves). One that only fell out of the recent list and came back (this file's newer
        hunk was undone) is older than the build's newest and does not count."""
        seen = {(p, d) for p, d, _ in built.hunks}
        return any((p, d) not in seen and t > built.newest for p, d, t in self.hunks)


def others_key(history: Sequence[src.HunkLike], path: str) -> Others:
    """The part of the edit history a sticky build depends on (`Others`)."""
    return Others(tuple((h.path, h.diff, h.timestamp) for h in history if not src.same_path(h.path, path)),
                  max((h.timestamp for h in history), default=float("-inf")))


@dataclass
class StickyFim:
    budget: int
    head: str  # document text before the window's first line
    tail: str  # document text from the window's end line on
    start_line: int
    tail_lines: int  # lines from the window's end on
    history: Others
    sections: tuple[Section, ...]
    hist: tuple[str, ...]
    sources: list[src.SourceReport]
    excluded: dict[str, str]
    base: int  # the window's tokens at the build (per-line sums, as the sticky window is counted)
    spare: int  # tokens the build left under its budget (exact): what typing may add to the window
    git_diff: str | None  # the file's uncommitted diff the build saw (a save refreshes it)
    created: float = dataclasses.field(default_factory=time.monotonic)

    def stale(self, budget: int, history: Others, git_diff: str | None,
              ttl_s: float = TTL_S, now: float | None = None) -> str | None:
        """Why the build's sections no longer hold (None: same budget, other files' history and git
        diff, still young)."""
        now = time.monotonic() if now is None else now
        if budget != self.budget:
            return "budget"
        if history.news(self.history):  # a hunk that only fell out of the recent list is fine
            return "other files' history"
        if git_diff != self.git_diff:
            return "git diff"
        return "expired" if now - self.created > ttl_s else None

    def fresh(self, budget: int, history: Others, git_diff: str | None,
              ttl_s: float = TTL_S, now: float | None = None) -> bool:
        """The build's sections still hold: same budget, other files' history and git diff, young."""
        return self.stale(budget, history, git_diff, ttl_s, now) is None

    def miss(self, text: str, offset: int, n_lines: int, history: Others, budget: int,
             git_diff: str | None, ttl_s: float = TTL_S, now: float | None = None) -> tuple[int, int] | str:
        """The window's (first line, end line) for a request at ``offset`` of ``text``, or why a full
        build is needed."""
        why = self.stale(budget, history, git_diff, ttl_s, now)
        if why:
            return why
        end = len(text) - len(self.tail)
        if not (text.startswith(self.head) and text.endswith(self.tail) and len(self.head) <= offset):
            return "edit outside the window"
        if self.tail and (offset >= end or text[end - 1] != "\n"):  # the cursor left the window / lines merged
            return "cursor outside the window"
        e = n_lines - self.tail_lines
        return (self.start_line, e) if self.start_line < e else "window closed"

    def reports(self) -> list[src.SourceReport]:
        return copy_reports(self.sources)
