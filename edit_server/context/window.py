"""The cursor window (FIM prefix/suffix) and the editable region (next edit), cut along syntax.

A window grows line by line around the cursor within its token budget (prefix first, ``ratio`` of
it), then its cut points snap inward to the nearest syntactic unit boundary (start of a top-level
item, class member or statement of an enclosing block), so no unit is cut in half except those that
contain the cursor. Without a grammar, blank lines are the boundaries. All lines pass through the
secret redaction (``secrets.py``; private-key blocks across lines too) and are cut to ``max_line``
characters before they are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edit_server.context.budget import TokenCounter
from edit_server.context.secrets import cap, pem_rows, redact_line, redact_lines, split_redacted, whole_line
from edit_server.context.syntax import Document
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW


@dataclass(frozen=True)
class Window:
    before: str  # text before the cursor (FIM prefix) / before the region (edit)
    after: str  # text after the cursor / after the region
    start_line: int  # first line of ``before``
    end_line: int  # line after the last line of ``after`` (exclusive)
    tokens: int  # per-line token sum of before + after
    lo: int = 0  # ``before`` = lines[start_line:lo] + pre
    hi: int = 0  # ``after`` = suf + lines[hi:end_line]
    pre: str = ""
    suf: str = ""


def _boundaries(doc: Document, offset: int, lo: int, hi: int) -> tuple[set[int], set[int]]:
    if doc.tree is not None:
        return doc.unit_rows(offset)
    lines = doc.lines  # line-based: paragraphs separated by blank lines
    starts = {i for i in range(max(1, lo - 400), lo + 1) if not lines[i - 1].strip()}
    ends = {i for i in range(hi - 1, min(len(lines) - 1, hi + 400)) if not lines[i + 1].strip()}
    return starts | {0}, ends | {len(lines) - 1}


class LineCosts:
    """Redacted (and length-capped) lines of one document version and the prefix sums of their token
    counts, so a window of any size is two binary searches. Updated incrementally from
    ``Document.change``. ``cache``: line -> redacted line, for this file type and ``max_line``."""

    def __init__(self, doc: Document, counter: TokenCounter, cache: dict[str, str],
                 max_line: int | None = None) -> None:
        self.counter, self.cache, self.max_line, self.path = counter, cache, max_line, doc.path
        self.version, self.text_len = doc.version, len(doc.text)
        self.pem = pem_rows(doc.lines) if "PRIVATE KEY" in doc.text or "PuTTY" in doc.text else set()
        self.lines = self._redact(doc.lines)
        for i in self.pem:  # key material: the whole line goes
            self.lines[i] = cap(whole_line(doc.lines[i]), max_line)
        self.costs = np.fromiter((counter.count(x) for x in self.lines), dtype=np.int64, count=len(self.lines))
        self._sum()

    def _redact(self, lines: list[str]) -> list[str]:
        cache = self.cache
        missing = list(dict.fromkeys(line for line in lines if line not in cache))
        if len(missing) > 4:  # one scan of them all (a document just opened)
            for line, red in zip(missing, redact_lines(missing, self.path, self.max_line, blocks=False), strict=True):
                cache[line] = red
        else:
            for line in missing:
                cache[line] = redact_line(line, self.path, self.max_line)
        return [cache[line] for line in lines]

    def _sum(self) -> None:
        self.sums = np.zeros(len(self.costs) + 1, dtype=np.int64)
        np.cumsum(self.costs, out=self.sums[1:])
        self._blocks: tuple[list[int], np.ndarray, np.ndarray] | None = None

    # ---- exact counts for block-additive tokenizers (see budget.BLOCK_SPLIT) -----------------
    def blocks(self) -> tuple[list[int], np.ndarray, np.ndarray]:
        """(block start lines, block index per line, prefix sums of block token counts)."""
        if self._blocks is None:
            lines, starts, n = self.lines, [0], len(self.lines)
            for i in range(1, n):  # the line form of budget.BLOCK_SPLIT
                first = lines[i][:1]
                if first and not first.isspace() and len(lines[i - 1]) >= 2 or \
                        lines[i] == "\n" and i + 1 < n and lines[i + 1][:1] and not lines[i + 1][:1].isspace():
                    starts.append(i)
            bounds = [*starts, len(lines)]
            count = self.counter.count
            costs = np.fromiter((count("".join(lines[a:b])) for a, b in zip(bounds, bounds[1:], strict=False)),
                                dtype=np.int64, count=len(starts))
            sums = np.zeros(len(starts) + 1, dtype=np.int64)
            np.cumsum(costs, out=sums[1:])
            index = np.zeros(len(lines), dtype=np.int64)
            index[starts[1:]] = 1
            self._blocks = (bounds, np.cumsum(index), sums)
        return self._blocks

    def exact(self, a: int, b: int, head: str = "", tail: str = "") -> int:
        """Exact tokens of ``head + lines[a:b] + tail`` encoded as one string (block sums)."""
        if a >= b:
            return self.counter.count_text(head + tail)
        bounds, index, sums = self.blocks()
        ka, kb = int(index[a]), int(index[b - 1])
        count, lines = self.counter.count, self.lines
        if kb > ka and lines[bounds[kb]] == "\n" and bounds[kb] + 1 >= b and not tail[:1].strip():
            kb -= 1  # a "\n" | "\ndef" boundary holds only with the "def" in the string
        if ka == kb:
            return count(head + "".join(lines[a:b]) + tail)
        first = count(head + "".join(lines[a:bounds[ka + 1]]))
        last = count("".join(lines[bounds[kb]:b]) + tail)
        return first + int(sums[kb] - sums[ka + 1]) + last

    def fresh(self, doc: Document) -> bool:
        return self.version == doc.version and self.text_len == len(doc.text)

    def update(self, doc: Document) -> bool:
        """Replay the document's line changes since this version; False: rebuild needed."""
        todo = [c for c in doc.changes if c[0] >= self.version]
        if not todo or todo[0][0] != self.version or self.pem or "PRIVATE KEY" in doc.text or "PuTTY" in doc.text:
            return False  # (a private-key block: its rows are found again over the whole document)
        lo, hi = -1, -1  # changed span, in the numbering after each change
        for _, a, b, nb in todo:
            if lo < 0:
                lo, hi = a, nb
                continue
            mapped = hi + (nb - b) if hi >= b else (nb if hi > a else hi)
            lo, hi = min(lo, a), max(mapped, nb)
        hi_old = hi - (len(doc.lines) - len(self.lines))
        if not 0 <= lo <= hi_old <= len(self.lines) or hi > len(doc.lines):
            return False
        mid = self._redact(doc.lines[lo:hi])
        new = np.fromiter((self.counter.count(x) for x in mid), dtype=np.int64, count=len(mid))
        self.lines = self.lines[:lo] + mid + self.lines[hi_old:]
        self.costs = np.concatenate([self.costs[:lo], new, self.costs[hi_old:]])
        self._sum()
        self.version, self.text_len = doc.version, len(doc.text)
        return True

    def cost(self, a: int, b: int) -> int:
        return int(self.sums[b] - self.sums[a])


def expand(doc: Document, offset: int, lo: int, hi: int, budget: int, costs: LineCosts,
           ratio: float = 0.75) -> tuple[int, int, int, int]:
    """Grow [lo, hi) to [s, e) within ``budget`` tokens; returns (s, e, tokens_before, tokens_after)."""
    P, n = costs.sums, len(costs.lines)
    budget = max(0, budget)
    s = int(np.searchsorted(P[: lo + 1], P[lo] - int(budget * ratio), "left"))
    used_p = int(P[lo] - P[s])
    e = hi + int(np.searchsorted(P[hi:], P[hi] + budget - used_p, "right")) - 1
    used_s = int(P[e] - P[hi])
    if e == n and s > 0:  # the suffix hit the end: the prefix takes the rest
        s = int(np.searchsorted(P[: lo + 1], P[lo] - (budget - used_s), "left"))
        used_p = int(P[lo] - P[s])
    if s > 0 or e < n:
        starts, ends = _boundaries(doc, offset, lo, hi)
        if s > 0:
            snap = [r for r in starts if s <= r <= lo]
            if snap:
                s = min(snap)
                used_p = int(P[lo] - P[s])
        if e < n:
            snap = [r + 1 for r in ends if hi <= r + 1 <= e]
            if snap:
                e = max(snap)
                used_s = int(P[e] - P[hi])
    return s, e, used_p, used_s


def _trim_line_parts(pre: str, suf: str, budget: int, counter: TokenCounter) -> tuple[str, str]:
    """Shorten the cursor line's two halves (a very long line) until they fit."""
    while pre or suf:
        if counter.count(pre) + counter.count(suf) <= budget:
            break
        if len(suf) >= len(pre):
            suf = suf[: len(suf) // 2]
        else:
            pre = pre[len(pre) - len(pre) // 2:]
    return pre, suf


def fim_window(doc: Document, offset: int, budget: int, counter: TokenCounter,
               costs: LineCosts, ratio: float = 0.75) -> Window:
    line = doc.line_of(offset)
    col = offset - doc.line_starts[line]
    text = doc.lines[line]
    half = None if costs.max_line is None else max(1, costs.max_line // 2)
    pre, suf = split_redacted(text, col, doc.path, whole=line in costs.pem, max_half=half)
    pre, suf = _trim_line_parts(pre, suf, budget, counter)
    base = counter.count(pre) + counter.count(suf)
    s, e, tp, ts = expand(doc, offset, line, line + 1, budget - base, costs, ratio)
    return _window(line, pre, suf, s, e, costs, tp + ts + base)


def fim_window_between(doc: Document, offset: int, s: int, e: int, counter: TokenCounter,
                       costs: LineCosts) -> Window:
    """The FIM window over the given lines [s, e) (the cursor's line among them): a sticky build's
    window keeps its first and last line while the user types (edit_server.context.sticky)."""
    line = doc.line_of(offset)
    col = offset - doc.line_starts[line]
    half = None if costs.max_line is None else max(1, costs.max_line // 2)
    pre, suf = split_redacted(doc.lines[line], col, doc.path, whole=line in costs.pem, max_half=half)
    tokens = costs.cost(s, line) + costs.cost(line + 1, e) + counter.count(pre) + counter.count(suf)
    return _window(line, pre, suf, s, e, costs, tokens)


def _window(line: int, pre: str, suf: str, s: int, e: int, costs: LineCosts, tokens: int) -> Window:
    before = "".join(costs.lines[s:line]) + pre
    after = suf + "".join(costs.lines[line + 1:e])
    return Window(before, after, s, e, tokens, line, line + 1, pre, suf)


def region_lines(doc: Document, offset: int, min_lines: int = 4, max_lines: int = 20) -> tuple[int, int]:
    """Editable region [start, end) in lines: the largest syntax node around the cursor spanning at
    most ``max_lines`` lines (statement, block, small function), padded to ``min_lines``."""
    line = doc.line_of(offset)
    n = len(doc.lines)
    lo, hi = line, line + 1
    node = doc.node_at(offset)
    while node is not None and node.parent is not None:  # never the whole file
        start, end = node.start_point[0], node.end_point[0]
        if node.end_point[1] == 0 and end > start:
            end -= 1
        if end - start + 1 > max_lines:
            break
        lo, hi = min(lo, start), max(hi, end + 1)
        node = node.parent
    if doc.tree is None:  # line-based: the paragraph around the cursor (blank-line delimited)
        lines, half = doc.lines, max_lines // 2
        lo = line
        while lo > 0 and line - lo < half and lines[lo - 1].strip():
            lo -= 1
        hi = line + 1
        while hi < n and hi - line < half and lines[hi].strip():
            hi += 1
    n_eff = _lines_in(doc, line)
    hi = min(hi, n_eff)
    while hi - lo < min_lines and (lo > 0 or hi < n_eff):
        if hi < n_eff:
            hi += 1
        if hi - lo < min_lines and lo > 0:
            lo -= 1
    return lo, hi


def _lines_in(doc: Document, line: int) -> int:
    """Lines a region may reach: the empty "line" after a final newline adds nothing (unless the cursor is
    on it)."""
    n = len(doc.lines)
    return max(n - 1 if n > 1 and doc.lines[-1] == "" else n, line + 1)


def line_region(doc: Document, offset: int, above: int = EDIT_REGION_ABOVE, below: int = EDIT_REGION_BELOW
                ) -> tuple[int, int]:
    """Editable region [start, end) in lines: ``above`` lines above the cursor's line and ``below`` below it
    (fewer at the file's ends) — the region the model is trained on and the replays' truth is taken in."""
    line = doc.line_of(offset)
    return max(0, line - above), min(line + below + 1, _lines_in(doc, line))


@dataclass(frozen=True)
class Region:
    start: int  # char offsets of the region in the document
    end: int
    text: str  # redacted region text
    cursor: int  # cursor offset inside ``text``
    redacted: bool


def region_text(doc: Document, offset: int, lo: int, hi: int, costs: LineCosts | None = None) -> Region:
    """The editable region: redacted like the window; ``redacted`` when that changed any of it (a
    rewrite would then destroy the secret, or the cut part of a long line)."""
    if costs is None:
        costs = LineCosts(doc, TokenCounter(None), {})
    start = doc.line_starts[lo]
    end = doc.line_starts[hi] if hi < len(doc.line_starts) else len(doc.text)
    line = doc.line_of(offset)
    ls = doc.line_starts[line]
    mid_pre, mid_suf = split_redacted(doc.lines[line], offset - ls, doc.path, whole=line in costs.pem)
    pre = "".join(costs.lines[lo:line]) + mid_pre
    suf = mid_suf + "".join(costs.lines[line + 1:hi])
    return Region(start, end, pre + suf, len(pre), pre + suf != doc.text[start:end])


def long_lines(costs: LineCosts, doc: Document, lo: int, hi: int) -> list[int]:
    """Rows in [lo, hi) longer than the line cap."""
    m = costs.max_line
    return [] if m is None else [i for i in range(lo, hi) if len(doc.lines[i].rstrip("\r\n")) > m]
