"""Unified diffs of edits: the one renderer used by the server's edit history and by training."""

from __future__ import annotations

import difflib
import re

_HUNK = re.compile(r"([-+])(\d+)")


def unified_diff(path: str, old: str, new: str, *, context: int = 3, first_line: int = 0) -> str:
    """`--- a/path` / `+++ b/path` unified diff of two texts ("" when equal).

    Lines keep their newlines; a missing final newline is marked like git does, so the diff is exact.
    ``first_line``: ``old``/``new`` are windows of larger texts starting at this (0-based) line; hunk
    headers are numbered for the whole texts.
    """
    if old == new:
        return ""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    out: list[str] = []
    for line in difflib.unified_diff(a, b, f"a/{path}", f"b/{path}", n=context):
        if first_line and line.startswith("@@ "):
            line = _HUNK.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + first_line}", line)
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


def changed_span(old: str, new: str) -> tuple[int, int, int]:
    """The smallest span turning ``old`` into ``new``: (start, end in ``old``, end in ``new``)."""
    n = min(len(old), len(new))
    p = 0
    while p < n and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    return p, len(old) - s, len(new) - s
