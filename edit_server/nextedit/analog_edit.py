"""The "same change on a similar line" next-edit candidate: no model (pure functions).

Real histories often make one change on several lines that look alike without sharing one substring the
repeated edit (`repeat_edit`) could swap: ``@attr.s(slots=True)`` → ``@attr.s(slots=True, hash=True)`` on the
next class, ``>> is_prime(37)`` → ``>>> is_prime(37)`` on the next doctest line,
``buf.WriteString(fmt.Sprintf("…", x))`` → ``fmt.Fprintf(buf, "…", x)`` with another format string,
``p.__annotations__`` → ``p.converter.__annotations__`` in another expression. `candidate` carries the last
edit's changes over, token by token, to the region's lines that look like a line it changed, or returns None.

* the last hunk of the document's history gives the changed line pairs (`changed_pairs`): a run of removed
  lines followed by as many added lines (blank lines aside) pairs them in order; a run of uneven length is
  a rewrite and gives none; indentation-only changes and pairs less than `MIN_SIMILARITY` alike (a line
  replaced, not changed) do not count;
* a region line is a target of a pair when it was not written by that edit, is not already the pair's new
  line, and its tokens are at least `MIN_SIMILARITY` alike with the pair's old line (`difflib` ratio);
* `transfer`: every change the pair makes (a token-level `difflib` opcode of old → new; tokens are words,
  runs of whitespace and single other characters) must find its place in the target — the tokens it
  replaces, and the token on each side of it (or the line's start / end), matched in the alignment of old
  with target, contiguous; an insertion of at most `MAX_INSERT` non-space tokens, between neighbours matched
  next to each other and with the nearest non-space tokens around it matched — else nothing is transferred
  to that line (all or nothing per line);
* only the region changes: text outside ``[start, end)`` is never touched.

Its score for the gate is `SCORE`, a fixed prior just under the repeated edit's (`select.pick` prefers a
plain repeat when both rewrite the region); gated as its own kind (``edit:analog``, `thresholds.gate_kind`).
Rules and thresholds chosen on the training repositories' sessions (docs/QUALITY.md), never on the held-out
ones.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from edit_server.selectivity.candidates import HunkLike, diff_body, diff_lines, tokens

SCORE = 0.94  # the candidate's score (`gate.score` of its confidences); the repeated edit's is 0.95
MIN_SIMILARITY = 0.5  # token ratio of a target line with the pair's old line
MAX_INSERT = 3  # non-space tokens one inserted change may hold (a longer one is new code, not a pattern)
MAX_PAIRS = 12  # changed line pairs of one edit looked at (a bigger edit is a rewrite, not a pattern)
def _ratio(a: Sequence[str], b: Sequence[str]) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _pair_run(rem: list[str], add: list[str]) -> list[tuple[str, str]]:
    """The changed line pairs of one run of removed lines followed by added ones: paired in order when
    the run has as many of each (blank lines aside), else none (lines rewritten, not changed alike)."""
    rem = [a for a in rem if a.strip()]
    add = [b for b in add if b.strip()]
    if len(rem) != len(add):
        return []
    return [(a, b) for a, b in zip(rem, add, strict=True)
            if a.strip() != b.strip() and _ratio(tokens(a), tokens(b)) >= MIN_SIMILARITY]


def changed_pairs(diff: str) -> list[tuple[str, str]]:
    """The (old, new) line pairs a unified diff changes (see the module's doc), in order."""
    pairs: list[tuple[str, str]] = []
    rem: list[str] = []
    add: list[str] = []
    for tag, body in [*diff_body(diff), (" ", "")]:
        if tag == "-" and not add:
            rem.append(body)
            continue
        if tag == "+":
            add.append(body)
            continue
        if rem and add:
            pairs += _pair_run(rem, add)
        rem, add = ([body], []) if tag == "-" else ([], [])
    return pairs


def _side(a: list[str], i: int, t: list[str], k: int, where: dict[int, int]) -> str | None:
    """How a change's neighbour in old (token ``i``) fits target token ``k``: "match" (aligned with it, or
    both are the line's edge), "alike" (both words, or both not: ``C(object)`` / ``TestSplitWhat(object)``)
    or None."""
    edge_a, edge_t = not 0 <= i < len(a), not 0 <= k < len(t)
    if edge_a or edge_t:
        return "match" if edge_a and edge_t else None
    if where.get(i) == k:
        return "match"
    return "alike" if a[i][0].isalnum() == t[k][0].isalnum() and not a[i].isspace() else None


def _solid(a: list[str], i: int, where: dict[int, int]) -> bool:
    """Whether the nearest non-space tokens on each side of old position ``i`` (or the line's edges) are
    matched in the target: an insertion is placed by what it stands between, not by a space."""
    before = next((j for j in range(i - 1, -1, -1) if not a[j].isspace()), None)
    after = next((j for j in range(i, len(a)) if not a[j].isspace()), None)
    return all(j is None or j in where for j in (before, after))


def transfer(old: str, new: str, target: str) -> str | None:
    """``target`` with every token-level change of ``old`` → ``new`` made at its place, or None when one of
    them has no place there (or nothing changes)."""
    a, b, t = tokens(old), tokens(new), tokens(target)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not ops:
        return None
    where: dict[int, int] = {}  # old token -> target token, where the alignment matched them
    for i, k, n in difflib.SequenceMatcher(None, a, t, autojunk=False).get_matching_blocks():
        where.update((i + d, k + d) for d in range(n))
    edits = []
    for _, i1, i2, j1, j2 in ops:
        if i2 > i1:  # tokens replaced or deleted: matched, contiguous, and one side's neighbour matched too
            k1 = where.get(i1)
            if k1 is None or any(where.get(i) != k1 + (i - i1) for i in range(i1, i2)):
                return None
            k2 = k1 + (i2 - i1)
            sides = [_side(a, i1 - 1, t, k1 - 1, where), _side(a, i2, t, k2, where)]
            if None in sides or "match" not in sides:
                return None
        else:  # an insertion: short, both neighbours matched, next to each other, and the words around too
            if sum(not x.isspace() for x in b[j1:j2]) > MAX_INSERT:
                return None
            left = where.get(i1 - 1) if i1 > 0 else -1  # the token before it, or the line's start
            right = where.get(i1) if i1 < len(a) else len(t)  # the token after it, or the line's end
            if left is None or right is None or right != left + 1 or not _solid(a, i1, where):
                return None
            k1 = k2 = right
        edits.append((k1, k2, b[j1:j2]))
    out = list(t)
    for k1, k2, repl in sorted(edits, reverse=True):
        out[k1:k2] = repl
    result = "".join(out)
    return result if result != target else None


def candidate(text: str, start: int, end: int, path: str, history: Sequence[HunkLike]) -> str | None:
    """The region ``text[start:end]`` with the last edit of ``path`` carried over to its look-alike lines,
    or None."""
    last = next((h for h in reversed(history) if h.path == path), None)
    if last is None:
        return None
    pairs = changed_pairs(last.diff)
    if not pairs or len(pairs) > MAX_PAIRS:
        return None
    written = diff_lines(last.diff)[2]
    news = {b.strip() for _, b in pairs}
    base = text.count("\n", 0, start)
    lines = text[start:end].splitlines(keepends=True)
    toks = [(tokens(a), a, b) for a, b in pairs]
    changed = False
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if base + i in written or not body.strip() or body.strip() in news:
            continue
        tb = tokens(body)
        best: tuple[float, str] | None = None
        for ta, a, b in toks:
            r = _ratio(ta, tb)
            if r < MIN_SIMILARITY or best is not None and r <= best[0]:
                continue
            moved = transfer(a, b, body)
            if moved is not None:
                best = (r, moved)
        if best is not None:
            lines[i] = best[1] + line[len(body):]
            changed = True
    return "".join(lines) if changed else None
