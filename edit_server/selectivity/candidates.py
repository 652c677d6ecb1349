"""Next-edit candidates that are never worth showing, whatever the model's confidence (pure functions).

* **retype**: the rewrite changes nothing but whitespace (the region re-typed unchanged);
* **undo**: it takes back the user's last edit — it removes only lines that edit added, where it added them
  (deleting another copy of a pasted line finishes a move: `move_edit`), and adds only lines it removed;
* **just-left**: it changes a line the user's last edit wrote and the cursor has since left (the user is
  done there: the next edit is elsewhere).

``history`` is the document's edit history, oldest first (`edit_server.core.history.Hunk`: ``path`` and a
unified ``diff`` whose new side is the current text).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


def tokens(line: str) -> list[str]:
    """A line as the rules compare it: words, runs of whitespace, single other characters (joined back,
    the line itself)."""
    return _TOKEN.findall(line)


class HunkLike(Protocol):
    path: str
    diff: str


def _changed(old: str, new: str) -> tuple[Counter[str], Counter[str]]:
    """(removed, added) non-blank lines, stripped."""
    a = [ln.strip() for ln in old.splitlines() if ln.strip()]
    b = [ln.strip() for ln in new.splitlines() if ln.strip()]
    rem: Counter[str] = Counter()
    add: Counter[str] = Counter()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            rem.update(a[i1:i2])
            add.update(b[j1:j2])
    return rem, add


def diff_body(diff: str) -> list[tuple[str, str]]:
    """A unified diff's lines as (tag, body) from its first hunk on: ``"@@"`` with the whole hunk header
    line, else the line's first character (``-`` removed, ``+`` added, `` `` context) and the rest. The file
    header (``--- a/…`` / ``+++ b/…``) is what comes before the first hunk, so a removed ``-- comment`` line
    inside a hunk (``--- comment`` in the diff) is a body line like any other."""
    out: list[tuple[str, str]] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            out.append(("@@", line))
        elif out and line[:1] in ("-", "+", " "):
            out.append((line[:1], line[1:]))
    return out


def diff_lines(diff: str) -> tuple[Counter[str], Counter[str], set[int]]:
    """(removed, added) non-blank lines of a unified diff, stripped, and the 0-based new-side line numbers
    of its added lines."""
    rem: Counter[str] = Counter()
    add: Counter[str] = Counter()
    rows: set[int] = set()
    new_ln = 0
    for tag, body in diff_body(diff):
        if tag == "@@":
            m = _HUNK.match(body)
            if m:
                new_ln = int(m.group(1)) - 1 if m.group(2) != "0" else int(m.group(1))
        elif tag == "+":
            rows.add(new_ln)
            if body.strip():
                add[body.strip()] += 1
            new_ln += 1
        elif tag == "-":
            if body.strip():
                rem[body.strip()] += 1
        else:
            new_ln += 1
    return rem, add, rows


def stranded_blanks(lines: list[str], drop: set[int]) -> set[int]:
    """The blank lines deleting rows ``drop`` (of the region's ``lines``) would leave doubled: lines that stood
    between two blank lines (a block of their own) take one of them with them, as a person deleting them
    would. Both neighbours must be inside the region (what is outside it is not known to be blank)."""
    out: set[int] = set()
    for i in sorted(drop):
        if i - 1 in drop:
            continue  # not a block's first row
        j = i
        while j + 1 in drop:
            j += 1
        if i > 0 and j + 1 < len(lines) and not lines[i - 1].strip() and not lines[j + 1].strip():
            out.add(j + 1)
    return out


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)


def reject_reason(text: str, cursor: int, path: str, region_start: int, old_region: str, new_region: str,
                  history: Sequence[HunkLike]) -> str | None:
    """Why the rewrite ``old_region`` → ``new_region`` (at ``region_start`` in ``text``) is not shown, or
    None."""
    rem, add = _changed(old_region, new_region)
    if not rem and not add:
        return "retype"
    last = next((h for h in reversed(history) if h.path == path), None)
    if last is None:
        return None
    l_rem, l_add, rows = diff_lines(last.diff)
    base = _line_of(text, region_start)
    a = old_region.splitlines()
    gone = _removed_rows(a, new_region.splitlines(), base)
    elsewhere = {r for r in gone - rows if a[r - base].strip()}  # non-blank rows the edit did not write
    if (l_rem or l_add) and not (rem - l_add) and not (add - l_rem) and not (rows and elsewhere):
        return "undo"
    if gone & (rows - {_line_of(text, cursor)}):
        return "just-left"
    return None


def _removed_rows(a: list[str], b: list[str], base: int) -> set[int]:
    """Rows (0-based, in the document; the region's lines ``a`` start at row ``base``) that rewriting them
    as ``b`` replaces or deletes."""
    return {base + i for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag in ("replace", "delete") for i in range(i1, i2)}
