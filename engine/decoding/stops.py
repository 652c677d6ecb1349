"""Stop rules: where an output stops, one definition for the decoder (the denoiser's stop rule,
`scope_rule`) and the output selection (the gate's loop cut, the line cap): the cursor's scope, a line
cap, a loop the prompt does not hold, a single line that outgrows the code around it; and (`engine.decoding.echo`)
a middle that re-types what is there or turns to prose, a rewrite past its region, the time budget."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from engine.decoding.echo import HEADER, PREFIX_LINES, budget_cut, columns, echo_cut
from engine.types import Echo, FinishReason


def empty_line_scope(prefix: str) -> int:
    """``base`` of `scope_cut` for a cursor on an empty line, where nothing typed says how deep the block
    is: one column past the enclosing ``def`` / ``class`` header (the nearest header above that is less
    indented than the last non-blank line, or is that line), so a middle may dedent within the function
    but never runs on past it (an instruct base's ``# Test the function …`` / ``def check_function():``
    after a function's last line); 0 (nothing is cut) outside any header."""
    lines = prefix.split("\n")[:-1][-PREFIX_LINES:]
    prev = next((ln for ln in reversed(lines) if ln.strip()), None)
    if prev is None:
        return 0
    limit = columns(prev)
    for ln in reversed(lines):
        if ln.strip() and HEADER.match(ln) and (columns(ln) < limit or ln is prev):
            return columns(ln) + 1
    return 0


def scope_cut(text: str, base: int) -> int | None:
    """Character offset where a multi-line completion leaves the cursor's block: the start of the
    first non-blank line after the first that is indented less than ``base`` columns or follows
    two blank lines (the gate's cut, ``selectivity.gate``); None while it has not."""
    pos = text.find("\n")
    blanks = 0
    while pos >= 0:
        start = pos + 1
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip():
            if columns(line) < base or blanks >= 2:
                return start
            blanks = 0
        elif end >= 0:
            blanks += 1
        pos = end
    return None


def lines_cut(text: str, max_lines: int) -> int | None:
    """Character offset after the ``max_lines``-th line's newline (the output's last line ends there);
    None while the text has fewer line ends."""
    pos = -1
    for _ in range(max_lines):
        pos = text.find("\n", pos + 1)
        if pos < 0:
            return None
    return pos


# a multi-line middle whose prefill left it less than this to decode (a cold prompt) and that has no line of
# code finished at its deadline gets this long more for its first line — one line late rather than nothing
# (docs/QUALITY.md); a warm middle had its time (the typing bench's end-of-line p95 stays)
FIRST_LINE_GRACE_S = 0.6
# a unit of 1-40 characters repeated 4+ times in a row
_LOOP = re.compile(r"(.{1,40}?)\1{3,}", re.DOTALL)
LOOP_MIN_CHARS = 16  # an inline loop spans at least this many characters
LOOP_WORD_CHARS = 2  # ... and its unit holds this many word characters (not "----", "0, ", "aaaa")
LOOP_LINES = 3  # the same non-blank line this many times in a row


def loop_cut(text: str, reference: str = "") -> int | None:
    """Character offset after the first occurrence of the earliest loop in ``text`` that ``reference``
    (the code the model was shown: the prompt, the old region) does not contain, or None.

    A loop is the same non-blank line `LOOP_LINES` times in a row (complete lines: the last may still
    grow), or a unit of 1-40 characters with `LOOP_WORD_CHARS`+ word characters repeated 4+ times over
    `LOOP_MIN_CHARS`+ characters ("cfg: Config, cfg: Config, ...", "self.self.self.self."). Separators,
    runs of one character and number lists are code, not loops; so is any repetition the reference
    holds. The gate cuts a completion there (`selectivity.gate`) and the decoder stops there
    (`scope_rule`): what follows a loop is never shown."""
    cuts: list[int] = []
    lines, pos, run = text.split("\n")[:-1], 0, 0
    for i, ln in enumerate(lines):
        run = run + 1 if i and ln.strip() and ln == lines[i - 1] else 1
        if run == LOOP_LINES and (ln + "\n") * LOOP_LINES not in reference:
            first = pos - (LOOP_LINES - 1) * (len(ln) + 1)
            cuts.append(first + len(ln) + 1)
            break
        pos += len(ln) + 1
    for m in _LOOP.finditer(text):
        unit = m.group(1)
        if (len(m.group(0)) >= LOOP_MIN_CHARS and sum(c.isalnum() or c == "_" for c in unit) >= LOOP_WORD_CHARS
                and m.group(0) not in reference):
            cuts.append(m.start() + len(unit))
            break
    return min(cuts) if cuts else None


def text_stop(text: str, scope: int | None, max_lines: int | None, loops: str | None = None,
              max_chars: int | None = None, echo: Echo | None = None, deadline: float | None = None,
              grace: float = 0.0) -> tuple[int, FinishReason] | None:
    """The earliest of the scope cut, the line cap, (``loops``: the reference text) a loop, the character
    cap, a re-typed or prose line (``echo``: `engine.decoding.echo.echo_cut`) and the time budget
    (``deadline``: the finished lines; ``grace``: how long past it a first line may still finish), with its
    kind; None: none reached."""
    long = max_chars if max_chars is not None and len(text) > max_chars else None
    cuts: list[tuple[int, FinishReason]]
    cuts = [(c, k) for c, k in ((None if scope is None else scope_cut(text, scope), "scope"),
                                (None if not max_lines else lines_cut(text, max_lines), "scope"),
                                (None if loops is None else loop_cut(text, loops), "loop"),
                                (long, "long")) if c is not None]
    for extra in (None if echo is None else echo_cut(text, echo), budget_cut(text, deadline, grace)):
        if extra is not None:
            cuts.append(extra)
    return min(cuts) if cuts else None


def scope_rule(decode: Callable[[list[int]], str], base: int | None, max_lines: int | None = None,
               loops: str | None = None, max_chars: int | None = None, echo: Echo | None = None,
               deadline: float | None = None, decode_budget_s: float | None = None
               ) -> Callable[[list[int]], tuple[int, FinishReason, int] | None] | None:
    """Denoiser stop rule: (tokens to keep so the text reaches the scope cut, the line cap, the first
    loop, ``max_chars`` characters, a re-typed / prose line or the budget's last finished line, its kind,
    the cut's character offset in their text), or None; no rule when nothing is asked for. ``loops``: stop
    at loops that this reference text (the prompt's) does not hold. ``decode_budget_s``: a budget that
    starts when the rule is first asked (the first decoded token: the prefill is not counted); a single line
    ends there, a multi-line middle (``deadline``) keeps its finished lines, or — when its first decoded token
    came later than `FIRST_LINE_GRACE_S` before the deadline (a cold prefill spent the budget) — finishes its
    first one within that grace."""
    if base is None and not max_lines and loops is None and max_chars is None and echo is None \
            and deadline is None and decode_budget_s is None:
        return None
    first: list[float] = []

    def until() -> float | None:
        if not first:
            first.append(time.monotonic())
        if decode_budget_s is None:
            return deadline
        end = first[0] + decode_budget_s
        return end if deadline is None else min(end, deadline)

    def grace() -> float:
        """A multi-line middle whose prefill left it less than the grace to decode (a cold prompt) may
        finish its first line past the deadline; a warm one had its time."""
        late = deadline is not None and decode_budget_s is None and first[0] > deadline - FIRST_LINE_GRACE_S
        return FIRST_LINE_GRACE_S if late else 0.0

    def rule(ids: list[int]) -> tuple[int, FinishReason, int] | None:
        stop = text_stop(decode(ids), base, max_lines, loops, max_chars, echo, until(), grace())
        if stop is None:
            return None
        cut, kind = stop
        if cut <= 0:
            return 0, kind, 0
        lo, hi = 1, len(ids)  # smallest k whose text covers the cut
        while lo < hi:
            mid = (lo + hi) // 2
            if len(decode(ids[:mid])) >= cut:
                hi = mid
            else:
                lo = mid + 1
        return lo, kind, cut
    return rule
