"""Carry the last edits to the places they name: the token-level old → new changes of the recent hunks
(a rename, a changed type, a removed generic, a renamed field) applied where the old tokens still occur
(pure functions, no model).

`changes` reads every changed line pair of the recent hunks (a run of removed lines and the added lines
after it, paired in order or by likeness) into token replacements (`Change`: ``old`` → ``new`` with where
it came from); `targets` finds the document's lines that still hold a change's ``old`` at token
boundaries; `carry` rewrites a span with one change (or a hunk's changes together) at every such
occurrence. Which of the candidates is worth showing is the location model's call (`locator`): these
functions propose, they do not decide.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from edit_server.nextedit.repeat_edit import comment_marker, in_comment, in_string, is_value, occurrences
from edit_server.selectivity.candidates import HunkLike, diff_body, tokens

MAX_HUNKS = 5  # recent hunks read (the history the server keeps per document is about this long)
MIN_OLD = 2  # characters of a change's old text: one-letter names are everywhere
PAIR_LIKENESS = 0.6  # a removed and an added line pair only when this alike (difflib ratio)
MAX_OPS = 2  # a line pair that changes more places than this was rewritten, not renamed
_IDENT = re.compile(r"\w+")
_ALIGNED = re.compile(r"(:?)( {2,})(?=\S)")  # a name padded to the next column
_WORDY = re.compile(r"[A-Za-z_]")
_MEMBER = (".", "->", "::")
_KEYWORDS = frozenset("if elif else for while return and or not in is case def fn func function let const var new "
                      "await async yield throw raise import from use package".split())
_PROSE = re.compile(r"^\s*(?:[*#/]+\s*)?[A-Za-z][\w'`,;]*(?:\s+[\w'`(),;:.-]+){3,}\s*$")
_DECL = re.compile(r"\b(def|class|fn|func|function|let|const|var|type|struct|enum|interface|impl|trait|"
                   r"pub|static|async|export|import|from|use|package|#define|typedef|using)\b")


@dataclass(frozen=True)
class Change:
    """One token replacement the history made: ``old`` → ``new`` on ``source`` (the line before), in the
    hunk ``age`` hunks back (0: the newest) of ``path``."""

    old: str
    new: str
    path: str
    age: int
    source: str  # the removed line it was read from
    pairs: int  # changed line pairs of its hunk that make it
    hunk_pairs: int  # changed line pairs of its hunk
    hunk_changes: int  # distinct changes its hunk makes
    clean: bool  # the hunk only replaced lines (no line added or removed)
    in_comment: bool  # it was made inside a line comment

    @property
    def key(self) -> tuple[str, str]:
        return self.old, self.new


def line_pairs(diff: str) -> tuple[list[tuple[str, str]], bool]:
    """The (removed, added) line pairs of a unified diff, and whether every changed line is in a pair."""
    out: list[tuple[str, str]] = []
    rem: list[str] = []
    add: list[str] = []
    clean = True

    def flush() -> None:
        nonlocal clean
        if len(rem) == len(add):
            out.extend((a, b) for a, b in zip(rem, add, strict=True) if _alike(a, b))
        else:
            clean = False
            if rem and add:
                used: set[int] = set()
                for a in rem:
                    scored = [(difflib.SequenceMatcher(None, a, b, autojunk=False).ratio(), j)
                              for j, b in enumerate(add) if j not in used]
                    if scored and (best := max(scored))[0] >= PAIR_LIKENESS:
                        used.add(best[1])
                        out.append((a, add[best[1]]))
        rem.clear()
        add.clear()

    for tag, body in diff_body(diff):
        if tag == "-":
            if add:
                flush()
            rem.append(body)
        elif tag == "+":
            add.append(body)
        else:
            flush()
    flush()
    return out, clean


def _alike(a: str, b: str) -> bool:
    return difflib.SequenceMatcher(None, a.strip(), b.strip(), autojunk=False).ratio() >= PAIR_LIKENESS


def token_changes(a: str, b: str) -> list[tuple[str, str]]:
    """The token-level changes that turn line ``a`` into ``b``, each as (old text, new text) to make where
    the old text occurs again: a replacement of names (each side holds a letter: a changed operator or
    bracket is no rename) as it is and with the member access before it (``self.options`` →
    ``self._original_options``); an insertion or a deletion with the token it leans on (``handlers`` →
    ``value.handlers``, ``()`` → ``(mod: ModuleType)``), a deleted qualifier alone (``typing.`` → ``""``).
    None when the pair changes more than `MAX_OPS` places, and none inside a string (a message, a value)."""
    ta, tb = tokens(a), tokens(b)
    ops = [op for op in difflib.SequenceMatcher(a=ta, b=tb, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len({("".join(ta[i1:i2]), "".join(tb[j1:j2])) for _, i1, i2, j1, j2 in ops}) > MAX_OPS:
        return []
    out: list[tuple[str, str]] = []

    def near(i: int, step: int) -> str:
        """The text from position ``i`` of ``ta`` to the next token that is not whitespace (``step`` 0: after,
        with it; -1: before, from it), "" at the line's end."""
        j = i + step
        while 0 <= j < len(ta) and ta[j].isspace():
            j += 1 if step == 0 else -1
        if not 0 <= j < len(ta):
            return ""
        return "".join(ta[i:j + 1]) if step == 0 else "".join(ta[j:i])

    for tag, i1, i2, j1, j2 in ops:
        o, n = "".join(ta[i1:i2]), "".join(tb[j1:j2])
        if in_string(a, len("".join(ta[:i1]))):
            continue
        left, right = near(i1, -1), near(i2, 0)
        if tag == "replace":
            o, n = o.strip(), n.strip()
            if o and n and o != n and _WORDY.search(n) and (_WORDY.search(o) or is_value(o)):
                out.append((o, n))
                if left in _MEMBER and i1 >= 2 and _WORDY.search(ta[i1 - 2]):
                    out.append((ta[i1 - 2] + left + o, ta[i1 - 2] + left + n))
        elif tag == "insert" and _WORDY.search(n):
            if right and _WORDY.search(right):
                out.append((right, n + right))
                lead = "".join(ta[max(0, i1 - 2):i1])
                if i1 >= 2 and ta[i1 - 1].isspace() and not ta[i1 - 2].isspace():
                    out.append((lead + right, lead + n + right))
            if left and _WORDY.search(left) and left.strip() not in _KEYWORDS:
                out.append((left, left + n))
            if left and right and not (_WORDY.search(left) or _WORDY.search(right)):
                out.append((left + right, left + n + right))
        elif tag == "delete" and _WORDY.search(o):
            if right and _WORDY.search(right):
                out.append((o + right, right))
            if left and _WORDY.search(left):
                out.append((left + o, left))
            if o.rstrip().endswith(tuple(_MEMBER)):
                out.append((o.strip(), ""))
            if left and right and not (_WORDY.search(left) or _WORDY.search(right)):
                out.append((left + o + right, left + right))
    return [(x, y) for x, y in dict.fromkeys(out) if x.strip() and x != y]


def changes(history: Sequence[HunkLike], max_hunks: int = MAX_HUNKS) -> list[Change]:
    """Every change the last ``max_hunks`` hunks made (of any file), newest first; one per (old, new) —
    its newest hunk's."""
    out: list[Change] = []
    seen: set[tuple[str, str]] = set()
    for age, h in enumerate(list(reversed(history))[:max_hunks]):
        pairs, clean = line_pairs(h.diff)
        marker = comment_marker(h.path)
        found: dict[tuple[str, str], tuple[int, str, bool]] = {}
        for a, b in pairs:
            for o, n in dict.fromkeys(token_changes(a, b)):
                i = a.find(o)
                commented = bool(marker) and i >= 0 and in_comment(a, i, marker or "#")
                count, src, com = found.get((o, n), (0, a, commented))
                found[(o, n)] = (count + 1, src, com and commented)
        for (o, n), (count, src, com) in found.items():
            # a one-letter name is kept only as a rename (its places then follow its binding: `propose`)
            short = len(o.strip()) < MIN_OLD and not (_IDENT.fullmatch(o) and _IDENT.fullmatch(n))
            if (o, n) in seen or short:
                continue
            seen.add((o, n))
            out.append(Change(o, n, h.path, age, src, count, len(pairs), len(found), clean, com))
    return out


def written_rows(history: Sequence[HunkLike], path: str, max_hunks: int = MAX_HUNKS) -> set[int]:
    """The rows (0-based, in the current text) the recent hunks of ``path`` wrote, as far as later hunks
    left them where they were (each diff's new side names its own rows)."""
    from edit_server.selectivity.candidates import diff_lines

    rows: set[int] = set()
    for h in list(reversed(history))[:max_hunks]:
        if h.path == path:
            rows |= diff_lines(h.diff)[2]
    return rows


def targets(text: str, change: Change, path: str, skip_rows: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """The rows of ``text`` that hold ``change.old`` at a token boundary in code (in comments too when the
    change was made in one), outside ``skip_rows`` (the lines the edits just wrote)."""
    marker = comment_marker(path)
    rows = []
    for row, line in enumerate(text.split("\n")):
        if row in skip_rows or change.old not in line:
            continue
        if not change.in_comment and _PROSE.match(line):
            continue  # a docstring's or a comment block's sentence: a name in prose is not code
        hits = [i for i in occurrences(line, change.old)
                if change.in_comment or not (marker and in_comment(line, i, marker) or in_string(line, i))]
        if hits:
            rows.append(row)
    return rows


def carry(line: str, subs: Sequence[Change], path: str, labels: frozenset[int] = frozenset()) -> str:
    """``line`` with each change of ``subs`` made at every occurrence of its old text (in code only, unless
    the change was made in a comment; not at ``labels``, the columns of keyword arguments' names); the line
    itself when none applies."""
    marker = comment_marker(path)
    for c in subs:
        out, at = [], 0
        for i in occurrences(line, c.old):
            if i < at or i in labels or not c.in_comment and (
                    marker and in_comment(line, i, marker) or in_string(line, i)):
                continue
            out += [line[at:i], c.new]
            at = i + len(c.old)
            pad = _ALIGNED.match(line, at)
            if pad:  # a column of aligned values (gofmt): the value stays where it was
                width = max(1, len(pad.group(2)) - (len(c.new) - len(c.old)))
                out.append(pad.group(1) + " " * width)
                at = pad.end()
        if out:
            line = "".join(out) + line[at:]
            labels = frozenset()  # columns of the line as it was
    return line


def replace_at(line: str, i: int, old: str, new: str) -> str:
    """``line`` with ``old`` at column ``i`` replaced by ``new``, a column of aligned values after it kept
    (``Addr:        *addr`` → ``ListenAddr:  *addr``)."""
    end = i + len(old)
    pad = _ALIGNED.match(line, end)
    if pad is None:
        return line[:i] + new + line[end:]
    width = max(1, len(pad.group(2)) - (len(new) - len(old)))
    return line[:i] + new + pad.group(1) + " " * width + line[pad.end():]


def declares(line: str, old: str) -> bool:
    """Whether ``line`` declares or imports ``old`` (a keyword such as ``def`` / ``fn`` / ``let`` before it):
    a renamed declaration has uses to follow it."""
    i = line.find(old)
    return i >= 0 and bool(_DECL.search(line[:i]))


def value_change(c: Change) -> bool:
    """A changed literal (``True`` → ``False``, ``10`` → ``20``): a choice for that place."""
    return is_value(c.old) or is_value(c.new) or c.old[:1] in "\"'`" or c.new[:1] in "\"'`"
