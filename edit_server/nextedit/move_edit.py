"""The "finish the move" next-edit candidate: no model (pure functions).

When the user's last edit of the document pasted one or two lines that still stand once more elsewhere in
the editable region — a line moved by copy-then-delete, an import or a statement re-placed, an entry
re-sorted in a list — deleting that other copy is a likely next edit. `candidate` returns the region
without it, or None.

* the last hunk of the document's history must be a pure insertion (only blank lines removed) of one or
  two non-blank lines, one block of rows, each at least `MIN_CHARS` characters without indentation (a
  ``}`` or ``return`` is too common to mean a move);
* each pasted line must have exactly one other copy in the region (compared without surrounding
  whitespace), on a row the edit did not write — none or several: no candidate;
* only those rows go, and a copy that stood alone between two blank lines takes one of them with it
  (`candidates.stranded_blanks`); text outside ``[start, end)`` is never touched.

Chosen on the training repositories' sessions, never on the held-out ones (the blank line a person deletes
with the copy was most of its wrong answers before it was taken too; docs/QUALITY.md). Its score for the gate is `SCORE`, a fixed prior like the
repeated edit's; it is gated as its own kind (``edit:move``, `thresholds.gate_kind`).
"""

from __future__ import annotations

from collections.abc import Sequence

from edit_server.selectivity.candidates import HunkLike, diff_lines, stranded_blanks

SCORE = 0.95  # the candidate's score (`gate.score` of its confidences)
MIN_CHARS = 6  # characters of a pasted line (stripped) for it to count as a move
MAX_LINES = 2  # non-blank lines the paste may hold


def pasted_lines(diff: str) -> tuple[list[str], set[int]] | None:
    """The non-blank lines (stripped) a pure insertion of at most `MAX_LINES` of them added, and the
    0-based new-side rows it wrote; None when the diff is anything else."""
    rem, add, rows = diff_lines(diff)
    if rem or not rows or max(rows) - min(rows) + 1 != len(rows):  # removed text, or several places
        return None
    lines = list(add.elements())
    if not 1 <= len(lines) <= MAX_LINES or any(len(s) < MIN_CHARS for s in lines):
        return None
    return lines, rows


def candidate(text: str, start: int, end: int, path: str, history: Sequence[HunkLike]) -> str | None:
    """The region ``text[start:end]`` without the other copy of the lines the last edit of ``path``
    pasted, or None."""
    last = next((h for h in reversed(history) if h.path == path), None)
    got = pasted_lines(last.diff) if last is not None else None
    if got is None:
        return None
    pasted, rows = got
    lines = text[start:end].splitlines(keepends=True)
    base = text.count("\n", 0, start)
    drop: set[int] = set()
    for s in pasted:
        hits = [i for i, ln in enumerate(lines) if base + i not in rows and ln.strip() == s]
        if len(hits) != 1:
            return None
        drop.add(hits[0])
    if len(drop) != len(pasted):  # two pasted lines, one copy
        return None
    return "".join(ln for i, ln in enumerate(lines) if i not in drop | stranded_blanks(lines, drop))
