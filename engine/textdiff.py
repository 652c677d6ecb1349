"""Unified diffs of edits: the one renderer used by the server's edit history and by training."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any

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


_BLOCK = 1 << 14


def _matching(n: int, same: Callable[[int, int], bool]) -> int:
    """How many of the first ``n`` positions match, where ``same(i, k)`` says the ``k`` after the first
    ``i`` do: a block at a time, bisected inside the first differing block (C-speed, no loop per item)."""
    i = 0
    while i < n and same(i, min(_BLOCK, n - i)):
        i += _BLOCK
    if i >= n:
        return n
    lo, hi = 0, min(_BLOCK, n - i) - 1  # matching items in the differing block
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if same(i, mid) else (lo, mid - 1)
    return i + lo


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many items (characters, token ids) ``a`` and ``b`` share from the start (a list and a tuple of the
    same ids share them all: slices of different sequence types never compare equal, so they are listed)."""
    if type(a) is not type(b):
        a, b = list(a), list(b)
    return _matching(min(len(a), len(b)), lambda i, k: a[i:i + k] == b[i:i + k])


def common_ends(a: str, b: str) -> tuple[int, int]:
    """Lengths of the longest common prefix and (not overlapping it) suffix."""
    p = common_prefix(a, b)
    la, lb = len(a), len(b)
    return p, _matching(min(la, lb) - p, lambda i, k: a[la - i - k:la - i] == b[lb - i - k:lb - i])


def changed_span(old: str, new: str) -> tuple[int, int, int]:
    """The smallest span turning ``old`` into ``new``: (start, end in ``old``, end in ``new``)."""
    p, s = common_ends(old, new)
    return p, len(old) - s, len(new) - s


def line_span(text: str, cursor: int, before: int, after: int) -> tuple[int, int]:
    """Char span of whole lines: ``before`` lines above the cursor's line, ``after`` below it."""
    a = text.rfind("\n", 0, cursor) + 1
    for _ in range(before):
        if a == 0:
            break
        a = text.rfind("\n", 0, a - 1) + 1
    nl = text.find("\n", cursor)
    b = len(text) if nl < 0 else nl + 1
    for _ in range(after):
        if b >= len(text):
            break
        nl = text.find("\n", b)
        b = len(text) if nl < 0 else nl + 1
    return a, b
