"""Pattern sessions made from real edits: one change made line after line, as a user makes it, its rest the
truth — what a user expects predicted once the same edit has been made twice.

Commits often make one change on several look-alike lines in one hunk (``errors.New(fmt.Sprintf(…))`` →
``fmt.Errorf(…)`` at each error; ``os.path.join(root, "x")`` → ``root / "x"`` at each entry). A replay
sees such a hunk whole: its first line's change never comes before its others. Here every hunk of the
training repositories' histories (their git sessions, `engine.git_history`) is searched for a run of at
least three changed lines that one line's change, carried over token by token
(`edit_server.nextedit.analog_edit.transfer`), makes on each of the others. The session makes the first
two as separate hunks (cursor at the end of the second) and its truth is the rest, where the commit had
it (inside the editable region). The truths are the commit's own lines: where the commit wrote a line
otherwise than the carried change would, the carried change is wrong here.

Each case keeps its repository (``meta.repo``) so that a fit's folds stay whole
repositories; ``meta.synthetic`` is ``pattern``.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from edit_server.nextedit import analog_edit
from engine.git_history import GitSession, extract_source, states_of
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff
from evals.cases import language_of

Case = dict[str, Any]
MIN_LINES = 3  # lines one pattern changes: two made by the user, at least one left to predict
MAX_LINES = 12


def pattern_rows(before: Sequence[str], after: Sequence[str]) -> list[int] | None:
    """The rows a line-for-line change of ``before`` into ``after`` changes, when there are `MIN_LINES` to
    `MAX_LINES` of them and the first one's change, carried over, makes each of the others (else None)."""
    if len(before) != len(after):
        return None
    rows = [r for r, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    if not MIN_LINES <= len(rows) <= MAX_LINES or rows[-1] - rows[0] > 3 * len(rows):
        return None
    a0, b0 = before[rows[0]], after[rows[0]]
    if not a0.strip() or not b0.strip() or a0.strip() == b0.strip():
        return None
    for r in rows[1:]:
        moved = analog_edit.transfer(a0, b0, before[r])
        if moved is None or moved.strip() != after[r].strip() or before[r].strip() == before[rows[0]].strip():
            return None
    return rows


def session(repo: str, ident: str, path: str, before: str, after: str) -> Case | None:
    """The pattern session of one hunk ``before`` → ``after`` of ``path``, or None (not such a pattern)."""
    bl, al = before.split("\n"), after.split("\n")
    if len(bl) != len(al):  # a hunk that also added or removed lines: its one changed run alone
        reps = [op for op in difflib.SequenceMatcher(None, bl, al, autojunk=False).get_opcodes()
                if op[0] == "replace" and op[2] - op[1] == op[4] - op[3]]
        if len(reps) != 1:
            return None
        _, i1, i2, j1, j2 = reps[0]
        bl = al[:j1] + bl[i1:i2] + al[j2:]
    rows = pattern_rows(bl, al)
    if rows is None:
        return None
    first = list(bl)
    first[rows[0]] = al[rows[0]]
    second = list(first)
    second[rows[1]] = al[rows[1]]
    t0, t1, t2 = "\n".join(bl), "\n".join(first), "\n".join(second)
    cursor = sum(len(x) + 1 for x in second[:rows[1]]) + len(second[rows[1]])
    ra, rb = line_span(t2, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    r0, r1 = t2.count("\n", 0, ra), t2.count("\n", 0, rb)
    rest = [r for r in rows[2:] if r0 <= r < r1]
    if not rest:
        return None
    done = list(second)
    for r in rest:
        done[r] = al[r]
    truth = "\n".join(done)
    tail = len(t2) - rb
    return {"id": f"{ident}:pattern", "kind": "edit", "language": language_of(path), "path": path,
            "files": {path: t2}, "cursor": {"path": path, "offset": cursor},
            "expected": [{"path": path, "start": ra, "end": rb, "text": truth[ra:len(truth) - tail]}],
            "history": [unified_diff(path, t0, t1), unified_diff(path, t1, t2)],
            "meta": {"repo": repo, "category": "next-edit", "synthetic": "pattern", "source": ident, "pending": []}}


def from_sessions(sessions: Iterable[GitSession]) -> list[Case]:
    """Every pattern session the git sessions' hunks hold (one per hunk at most)."""
    out: list[Case] = []
    for s in sessions:
        states = states_of(s)
        for k, (a, b, t) in enumerate(s.steps):
            if min(states[k].count("\n", a, b), t.count("\n")) < MIN_LINES - 1:
                continue  # fewer changed lines than a pattern needs
            made = session(s.repo, f"{s.repo}:{s.commits[0][:10]}:{s.path}:{k}", s.path, states[k], states[k + 1])
            if made is not None:
                out.append(made)
    return out


def synthesize(sources: Sequence[Path], per_repo: int, seed: int = 0) -> list[Case]:
    """Up to ``per_repo`` pattern sessions from each repository of ``sources`` (bundles or directories)."""
    out: list[Case] = []
    for src in sources:
        made = from_sessions(extract_source(src, trim=False))
        random.Random(f"{seed}:{src.name}").shuffle(made)
        out += made[:per_repo]
    return out
