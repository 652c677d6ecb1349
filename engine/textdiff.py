"""Unified diffs of edits: the one renderer used by the server's edit history and by training."""

from __future__ import annotations

import difflib


def unified_diff(path: str, old: str, new: str, *, context: int = 3) -> str:
    """`--- a/path` / `+++ b/path` unified diff of two texts ("" when equal).

    Lines keep their newlines; a missing final newline is marked like git does, so the diff is exact.
    """
    if old == new:
        return ""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    out: list[str] = []
    for line in difflib.unified_diff(a, b, f"a/{path}", f"b/{path}", n=context):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)
