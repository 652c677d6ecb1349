"""Where a completion or a rewrite stops re-typing what is already there, or stops being code.

A model that writes real code also writes on past the middle: it re-types the line after the cursor,
the function's own signature and docstring, the lines after the editable region, and (an instruct
base's habit) a markdown fence and a paragraph of prose. Each of these is cut at the start of the first
such line, by the decoder (a stop rule: the rest of the canvas is never computed, `engine.decoding.stops`) and
by the gate (`edit_server.selectivity.gate`: the same functions on the text an engine returned, for
engines that do not stop themselves):

* ``suffix``: a complete line equal to the next non-blank line of the suffix (the middle has ended:
  what follows is already in the document — llama.vim / llama-server cut here too); for a single
  line, the rest of the cursor's line typed out at its end;
* ``repeat``: a line equal to the enclosing ``def`` / ``class`` header, or two consecutive lines that
  the recent prefix holds in the same order (each with at least `REPEAT_MIN_CHARS` characters);
* ``prose``: a markdown fence line, or an English sentence outside a string or comment
  (``This implementation uses …``) in a code file;
* ``region``: a rewrite that has written out the old region's last lines (its end) or runs into the
  text after the region;
* ``budget``: the time budget ran out; multi-line output keeps its finished lines.

`Echo` (engine.types) carries what each rule compares against; `echo_for_fim` / `echo_for_edit` build it
from a prompt.
"""

from __future__ import annotations

import re
import time

from engine.types import Echo, FinishReason

REPEAT_MIN_CHARS = 8  # a copied-run line has at least this many non-space characters
PREFIX_LINES = 80  # recent prefix lines a copied run is looked for in
SUFFIX_LINES = 3  # next non-blank suffix lines kept (the first is the one compared)
ROOM_LINES = 2  # a rewrite may end this many non-blank lines short of the old region and still be "done"
PROSE_EXTENSIONS = (".md", ".markdown", ".rst", ".txt", ".adoc")  # prose is the content there

_FENCE = re.compile(r"^\s*(```|~~~)")
# a sentence: a capitalised word, then 3+ words of letters, ending like a sentence or a colon, no code
# punctuation in it ("This implementation uses a loop.", "Here is the completed function:")
_PROSE = re.compile(r"^\s*[A-Z][a-z']+(?:,? [A-Za-z'][A-Za-z'-]*){3,}[.:!?]?\s*$")
HEADER = re.compile(r"^\s*(?:async\s+def|def|class|fn|func|function|pub\s+fn)\b")
_COMMENT = re.compile(r"^\s*(#|//|--|\*|/\*)")


def _stripped(lines: list[str]) -> list[str]:
    return [ln.strip() for ln in lines if ln.strip()]


def columns(line: str) -> int:
    """Columns of ``line``'s indentation (a tab counts 4): the one measure the stop rules and the gate use."""
    n = 0
    for c in line:
        if c == " ":
            n += 1
        elif c == "\t":
            n += 4
        else:
            break
    return n


def in_string(text: str) -> bool:
    """Whether ``text`` ends inside a triple-quoted string or a ``/* */`` comment (prose belongs there)."""
    if text.rfind("/*") > text.rfind("*/"):
        return True
    return len(re.findall(r'"""|\'\'\'', text)) % 2 == 1


def echo_for_fim(prefix: str, suffix: str, path: str, single_line: bool) -> Echo:
    """What a FIM middle must not re-type: the rest of the cursor's line (single line), the next lines
    of the suffix, the enclosing header and the recent prefix lines."""
    rest, _, after = suffix.partition("\n")
    head_lines = prefix.split("\n")
    line_prefix = head_lines[-1]
    base = columns(line_prefix)
    header = next((ln.strip() for ln in reversed(head_lines[-PREFIX_LINES - 1:-1])
                   if ln.strip() and HEADER.match(ln) and columns(ln) < max(1, base)), "")
    nxt = _stripped(([] if not rest.strip() else [rest]) + after.split("\n", 40)[:40])
    recent = _stripped(head_lines[-PREFIX_LINES - 1:-1])
    return Echo(suffix_lines=tuple(nxt[:SUFFIX_LINES]), line_rest=rest.strip() if single_line else "",
                prefix_pairs=frozenset(zip(recent, recent[1:], strict=False)), header=header,
                line_prefix=line_prefix, code=not path.lower().endswith(PROSE_EXTENSIONS),
                in_string=in_string(prefix[-8000:]))


def echo_for_edit(region: str, after: str, path: str) -> Echo:
    """What a rewrite must not run past: the old region's last two non-blank lines (once the output has
    about as many lines), the text after the region (unless the region holds that line itself)."""
    old = _stripped(region.split("\n"))
    nxt = _stripped(after.split("\n", 40)[:40])[:SUFFIX_LINES]
    if nxt and nxt[0] in old:
        nxt = []
    return Echo(suffix_lines=tuple(nxt), region_tail=tuple(old[-2:]), region_lines=len(old),
                code=not path.lower().endswith(PROSE_EXTENSIONS))


def _is_prose(line: str, inside: bool) -> bool:
    if _FENCE.match(line):
        return True
    return not inside and not _COMMENT.match(line) and bool(_PROSE.match(line))


def echo_cut(text: str, echo: Echo) -> tuple[int, FinishReason] | None:
    """Character offset where ``text`` starts re-typing or stops being code, with its kind; None: not yet.
    Only complete lines are judged (the last may still grow), except the single line's rest."""
    if echo.line_rest and re.search(r"\w", echo.line_rest):
        body = text.split("\n", 1)[0].rstrip()
        if len(body) > len(echo.line_rest) and body.endswith(echo.line_rest):
            return len(body) - len(echo.line_rest), "suffix"
    complete = text.split("\n")[:-1]
    pos, inside = 0, echo.in_string
    prev: tuple[str, int] | None = None  # the last complete non-blank line (stripped) and its offset
    seen = 0  # complete non-blank lines so far
    for i, ln in enumerate(complete):
        s = ln.strip()
        whole = echo.line_prefix + ln if i == 0 else ln
        if s:
            seen += 1
            if echo.code and _is_prose(whole, inside):
                return pos, "prose"
            if echo.suffix_lines and s == echo.suffix_lines[0] and re.search(r"\w", s):
                return pos, "region" if echo.region_tail else "suffix"
            if echo.header and whole.strip() == echo.header:
                return pos, "repeat"
            if prev is not None and min(len(prev[0]), len(s)) >= REPEAT_MIN_CHARS and (prev[0], s) in echo.prefix_pairs:
                return prev[1], "repeat"
            if echo.region_tail and seen >= echo.region_lines - ROOM_LINES and (
                    (prev[0] if prev else None, s) == echo.region_tail if len(echo.region_tail) == 2
                    else (s,) == echo.region_tail):
                return pos + len(ln) + 1, "region"
            prev = (s, pos)
        if whole.count('"""') % 2 or whole.count("'''") % 2:
            inside = not inside
        pos += len(ln) + 1
    return None


def budget_cut(text: str, deadline: float | None, grace: float = 0.0) -> tuple[int, FinishReason] | None:
    """Past ``deadline`` (``time.monotonic()``): keep the finished lines of ``text``. While none of them holds
    code yet, the first one may still finish for ``grace`` seconds more (a multi-line middle whose budget a
    cold prefill spent: its first line rather than nothing)."""
    if deadline is None:
        return None
    now = time.monotonic()
    if now < deadline:
        return None
    cut = text.rfind("\n") + 1
    if text[:cut].strip() or now >= deadline + grace:
        return cut, "budget"
    return None
