"""The replay of a git edit session (`engine/git_history.py`) at one point: where the last applied hunk left
the cursor, the points where the next hunk starts near it, and the editable region's target — every pending
change that touches it applied, or the region unchanged when nothing is left there (the region's lines around
the cursor: `engine.textdiff.line_span`). Shared by training (`engine/train/git_sessions.py`) and the replay
evaluation (`evals/replay_sessions.py`, `evals/layout_prefill.py`), so both cut sessions alike.
"""

from __future__ import annotations

import difflib

from engine.git_history import GitSession, states_of
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW


def cursor_after(text: str, step: tuple[int, int, str]) -> int:
    """Where a hunk leaves the cursor: the end of its last typed line (its start for a deletion)."""
    a, _, t = step
    cur = a + len(t)
    if t.endswith("\n"):
        cur -= 1
    return max(0, min(cur, len(text)))


def pending_hunks(current: str, final: str) -> list[tuple[int, int, str]]:
    """The line hunks of current → final as (start, end, new text), offsets into ``current``."""
    a = current.splitlines(keepends=True)
    b = final.splitlines(keepends=True)
    starts = [0]
    for ln in a:
        starts.append(starts[-1] + len(ln))
    return [(starts[i1], starts[i2], "".join(b[j1:j2]))
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag != "equal"]


def pending_in_region(current: str, final: str, ra: int, rb: int) -> tuple[int, int, str]:
    """(region start, end, new region): the region of ``current`` with every change of current → final
    that touches it applied (the region grows to whole hunks that cross its edges)."""
    a = current.splitlines(keepends=True)
    b = final.splitlines(keepends=True)
    starts = [0]
    for ln in a:
        starts.append(starts[-1] + len(ln))
    hunks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        s, e = starts[i1], starts[i2]
        if e < ra or s > rb or (s == rb and e > s) or (i1 == i2 and s == rb and rb > ra):
            continue
        hunks.append((s, e, "".join(b[j1:j2])))
    for s, e, _ in hunks:
        ra, rb = min(ra, s), max(rb, e)
    region = current[ra:rb]
    for s, e, t in reversed(hunks):
        region = region[: s - ra] + t + region[e - ra:]
    return ra, rb, region


def near_ks(s: GitSession, states: list[str] | None = None, above: int = EDIT_REGION_ABOVE,
            below: int = EDIT_REGION_BELOW) -> list[int]:
    """The ``k`` (steps applied) after which the next step starts within ``above`` lines above / ``below``
    lines below the cursor: where a next-edit model has something to suggest."""
    states = states or states_of(s)
    out = []
    for k in range(1, len(s.steps)):
        cur = cursor_after(states[k], s.steps[k - 1])
        nxt = s.steps[k][0]
        lo, hi = min(cur, nxt), max(cur, nxt)
        lines = states[k].count("\n", lo, hi)
        if lines <= (above if nxt < cur else below):
            out.append(k)
    return out
