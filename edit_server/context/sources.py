"""Context sources other than the cursor window, and filling them into their token allowance.

Each source yields candidate ``Section``s in its own relevance order; ``fill`` keeps those that fit
(truncating one to whole lines when worthwhile). Costs are exactly what the templates encode:
``[file_sep] + encode(f"{path}\\n{text}")`` per section, ``[edit_history] + encode(diff)`` for diffs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from edit_server.context.budget import TokenCounter
from engine.templates import Section


class HunkLike(Protocol):
    path: str
    diff: str
    timestamp: float
    open: bool


@dataclass
class SourceReport:
    name: str
    allowed: int = 0
    used: int = 0
    items: list[tuple[str, str, int]] = field(default_factory=list)  # (kind, path, tokens)
    dropped: int = 0  # candidates that did not fit


def section_cost(counter: TokenCounter, s: Section) -> int:
    return 1 + counter.count_text(f"{s.path}\n{s.text}")


def diff_text(d: str) -> str:
    return d if d.endswith("\n") else d + "\n"


def _truncate(counter: TokenCounter, s: Section, room: int, min_lines: int = 3) -> Section | None:
    lines = s.text.splitlines(keepends=True)
    keep = counter.fit_lines(lines, room - 1 - counter.count_text(f"{s.path}\n") - 2)
    if keep < min_lines:
        return None
    t = Section(s.kind, s.path, "".join(lines[:keep]) + "...\n")
    return t if section_cost(counter, t) <= room else None


def fill(counter: TokenCounter, candidates: Iterable[Section], rep: SourceReport,
         limit: int = 1000) -> list[Section]:
    out: list[Section] = []
    for s in candidates:
        if len(out) >= limit:
            break
        room = rep.allowed - rep.used
        if room <= 8:
            rep.dropped += 1
            break
        cost = section_cost(counter, s)
        if cost > room:
            t = _truncate(counter, s, room)
            if t is None:
                rep.dropped += 1
                continue
            s, cost = t, section_cost(counter, t)
        out.append(s)
        rep.used += cost
        rep.items.append((s.kind, s.path, cost))
    return out


def fill_history(counter: TokenCounter, hunks: Sequence[HunkLike], current: str, *, fim: bool,
                 allowed_path: Callable[[str], bool], display: Callable[[str], str],
                 clean: Callable[[str, str], str], rep: SourceReport, max_items: int = 8,
                 max_chars: int = 6000, only_current: bool = False) -> tuple[str, ...]:
    """Recent diffs: this file first (newest first), then other files (unless ``only_current``); the
    open hunk of this file is left out for FIM (it is in the prefix). ``clean(diff, path)`` redacts a
    diff. Returned oldest first, as the templates expect."""
    mine = [h for h in hunks if same_path(h.path, current)]
    others = [] if only_current else [h for h in hunks if not same_path(h.path, current)]
    ordered = sorted(mine, key=lambda h: -h.timestamp) + sorted(others, key=lambda h: -h.timestamp)
    chosen: list[tuple[float, str]] = []
    for h in ordered:
        if len(chosen) >= max_items:
            break
        if (fim and h.open and same_path(h.path, current)) or not h.diff or len(h.diff) > max_chars:
            continue
        if not allowed_path(h.path):
            rep.dropped += 1
            continue
        d = diff_text(clean(relabel(h.diff, h.path, display(h.path)), h.path))
        cost = counter.count_text(d) + (0 if chosen else 1)
        if rep.used + cost > rep.allowed:
            rep.dropped += 1
            continue
        rep.used += cost
        rep.items.append(("history", display(h.path), cost))
        chosen.append((h.timestamp, d))
    chosen.sort(key=lambda t: t[0])
    return tuple(d for _, d in chosen)


def relabel(diff: str, path: str, shown: str) -> str:
    """``diff`` with ``shown`` (the workspace-relative path prompts show, as training renders its diffs) in
    its ``--- a/`` / ``+++ b/`` header instead of the document's own path (absolute: the user's home, an
    eval's temporary directory)."""
    head = f"--- a/{path}\n+++ b/{path}\n"
    if path == shown or not diff.startswith(head):
        return diff
    return f"--- a/{shown}\n+++ b/{shown}\n{diff[len(head):]}"


def same_path(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def dedupe(sections: Iterator[Section], seen: set[tuple[str, str]]) -> Iterator[Section]:
    for s in sections:
        key = (s.path, s.text[:200])
        if key not in seen:
            seen.add(key)
            yield s
