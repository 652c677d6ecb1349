"""Edit history: didChange events coalesced into hunks, rendered as unified diffs.

Zed-style: edits to the same file within ``near_lines`` lines of the current hunk and less than
``pause_s`` apart extend it; anything else starts a new hunk. A hunk whose text returns to where it
started (undo) disappears. Kept per workspace in a bounded ring, across files.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from edit_server.core.documents import EditEvent
from engine.textdiff import line_span, unified_diff


@dataclass(frozen=True)
class Hunk:
    path: str
    diff: str
    timestamp: float
    open: bool  # still being typed (the most recent hunk, no pause since)


CONTEXT_LINES = 3


def _line_window(text: str, start: int, end: int, context: int) -> tuple[int, int]:
    """[start, end) widened to whole lines plus ``context`` lines each side (char offsets)."""
    return line_span(text, start, context, 0)[0], line_span(text, end, 0, context)[1]


@dataclass
class _Open:
    """One hunk. ``before`` / ``after`` are references to whole documents (no copies); they are equal
    outside [start, len - tail), so the diff only ever looks at that span and a few lines around it."""

    path: str
    before: str  # document before the hunk's first edit
    after: str  # document after its latest edit
    lo: int  # first changed line (in ``after``)
    hi: int  # last changed line (in ``after``)
    started: float
    last: float
    start: int = 0  # first changed character (same in both)
    tail: int = 0  # length of the common suffix
    diff_cache: str | None = field(default=None)

    def diff(self) -> str:
        if self.diff_cache is None:
            b0, b1 = _line_window(self.before, self.start, len(self.before) - self.tail, CONTEXT_LINES)
            a1 = len(self.after) - (len(self.before) - b1)  # same suffix: same window end
            first = self.before.count("\n", 0, b0)
            self.diff_cache = unified_diff(self.path, self.before[b0:b1], self.after[b0:a1],
                                           context=CONTEXT_LINES, first_line=first)
        return self.diff_cache


class EditHistory:
    def __init__(self, capacity: int = 32, near_lines: int = 8, pause_s: float = 1.0,
                 max_diff_bytes: int = 6 * 1024) -> None:
        self.near_lines = near_lines
        self.pause_s = pause_s
        self.max_diff_bytes = max_diff_bytes
        self._hunks: deque[_Open] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._hunks)

    def clear(self) -> None:
        self._hunks.clear()

    def _last_for(self, path: str) -> _Open | None:
        for h in reversed(self._hunks):
            if h.path == path:
                return h
        return None

    def record(self, ev: EditEvent) -> None:
        if ev.old == ev.new:
            return
        line = ev.before.count("\n", 0, ev.start)
        old_end = line + ev.old.count("\n")
        new_end = line + ev.new.count("\n")
        delta = new_end - old_end
        last = self._hunks[-1] if self._hunks else None
        if (last is not None and last.path == ev.path and last.after == ev.before
                and self.pause_s > 0 and ev.time - last.last <= self.pause_s
                and line <= last.hi + self.near_lines and old_end >= last.lo - self.near_lines):
            last.after = ev.after
            last.start = min(last.start, ev.start)
            last.tail = min(last.tail, len(ev.after) - ev.start - len(ev.new))
            last.hi = max(last.hi + (delta if line <= last.hi else 0), new_end)
            last.lo = min(last.lo, line)
            last.last = ev.time
            last.diff_cache = None
            if last.after == last.before:  # typed and deleted again: nothing happened
                self._hunks.pop()
            return
        prev = self._last_for(ev.path)
        if prev is not None and prev.after == ev.before and ev.after == prev.before:
            self._hunks.remove(prev)  # undo of the previous hunk in this file
            return
        self._hunks.append(_Open(ev.path, ev.before, ev.after, line, new_end, ev.time, ev.time,
                                 ev.start, len(ev.after) - ev.start - len(ev.new)))

    def recent(self, n: int = 6, now: float | None = None,
               cursor: tuple[str, int] | None = None) -> list[Hunk]:
        """The ``n`` most recent hunks, oldest first; diffs larger than the limit are dropped.

        ``open`` marks the hunk still being typed: with ``cursor`` = (path, line), the hunk of that file
        whose changed lines contain the cursor line; without it, the latest hunk if no pause since.
        """
        out: list[Hunk] = []
        last = self._hunks[-1] if self._hunks else None
        for h in reversed(self._hunks):
            if len(out) >= n:
                break
            d = h.diff()
            if not d or len(d.encode()) > self.max_diff_bytes:
                continue
            if cursor is not None:
                is_open = h.path == cursor[0] and h.lo <= cursor[1] <= h.hi
            else:
                is_open = h is last and (now is None or now - h.last <= self.pause_s)
            out.append(Hunk(h.path, d, h.last, is_open))
        out.reverse()
        return out
