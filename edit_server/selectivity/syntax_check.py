"""The gate's "syntax errors introduced" rule: does applying a suggestion add a tree-sitter ERROR / MISSING node?

A window of whole lines around the change (``CONTEXT`` lines each side, widened to lines that start at column 0
so it rarely opens mid-construct) is parsed before the change, the tree is edited and re-parsed incrementally
after it, and the error nodes of both parses are compared. An error of the new parse counts when:

* it is new — no error of the same kind (ERROR, or MISSING of the same token) starts at the mapped position
  in the old parse, nor (inside a replaced range) has the same text: errors already there before the
  suggestion, wherever they shift to, never count;
* it is the suggestion's: a FIM insertion's error must *start inside the inserted text*; an edit's must
  touch a changed range (a deletion that breaks the code is an edit's fault too);
* for FIM, the insertion is not an *unfinished block/statement at the end of a line*: when the insertion
  ends its line (only blanks after it) and closing what it left open — its unclosed brackets and string,
  optionally after a missing operand and/or a statement's ``;`` — leaves no new error in it, it is the
  start of what the user types next (``x = foo(`` / ``y = [1, 2`` / ``let q = bar(`` / ``x = 1 +`` at the
  end of a line, ``if (x) {`` whose block is not written yet), not a broken suggestion. A closer with no
  opener (``foo(a, b))``, ``x = )``) is never unfinished. Block openers (``if x:``, ``def f(a, b):``,
  ``for i in range(n):``) parse without an error in the grammars here; an unclosed bracket that the rest of
  the line closes has no error at all.

Languages without a grammar (`edit_server.context.languages`), and windows over ``MAX_WINDOW_BYTES``
(minified one-line files), skip the rule. Cost: see tests/test_syntax_check.py (measured on a 2,000-line file).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from tree_sitter import Node, Parser, Tree

from edit_server.context import languages

CONTEXT = 40  # lines of the window on each side of the change (then widened to a column-0 line)
WIDEN = 80  # how far at most the window is widened to reach a column-0 line
MAX_WINDOW_BYTES = 256 * 1024

_local = threading.local()  # parsers are not thread-safe: one per thread and language


@dataclass(frozen=True)
class SyntaxError_:
    """An error node: ``kind`` "ERROR" or "MISSING <token>", byte range in its parse."""

    kind: str
    start: int
    end: int
    text: bytes


def _parser(lang: str) -> Parser:
    cache = getattr(_local, "parsers", None)
    if cache is None:
        cache = _local.parsers = {}
    if lang not in cache:
        cache[lang] = languages.parser(lang)
    return cache[lang]


def errors(root: Node, data: bytes) -> list[SyntaxError_]:
    """The ERROR and MISSING nodes under ``root`` (only subtrees that hold one are walked)."""
    out: list[SyntaxError_] = []
    stack = [root]
    while stack:
        n = stack.pop()
        if n.is_missing:
            out.append(SyntaxError_(f"MISSING {n.type}", n.start_byte, n.end_byte, b""))
        elif n.is_error:
            out.append(SyntaxError_("ERROR", n.start_byte, n.end_byte, data[n.start_byte:n.end_byte]))
        stack.extend(c for c in reversed(n.children) if c.has_error or c.is_missing)
    return out


def _line_start(text: str, offset: int) -> int:
    return text.rfind("\n", 0, offset) + 1


def _window(text: str, lo: int, hi: int) -> tuple[int, int]:
    """Char range of whole lines around [lo, hi): CONTEXT lines each side, widened to column-0 lines."""
    a = _line_start(text, lo)
    for _ in range(CONTEXT):
        if a == 0:
            break
        a = _line_start(text, a - 1)
    for _ in range(WIDEN):  # back to a line that starts a top-level unit
        if a == 0 or (text[a:a + 1].strip() and text[a] not in ")]}"):
            break
        a = _line_start(text, a - 1)
    b = text.find("\n", hi)
    for _ in range(CONTEXT):
        if b < 0:
            break
        b = text.find("\n", b + 1)
    for _ in range(WIDEN):  # on to the line before the next top-level unit
        if b < 0 or (text[b + 1:b + 2].strip() and text[b + 1] not in ")]}"):
            break
        b = text.find("\n", b + 1)
    return a, len(text) if b < 0 else b + 1


def _point(data: bytes, offset: int) -> tuple[int, int]:
    row = data.count(b"\n", 0, offset)
    return row, offset - (data.rfind(b"\n", 0, offset) + 1)


_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _closers(line: str, lang: str) -> str | None:
    """What closes the brackets and string ``line`` leaves open (innermost first); None when it closes
    something it never opened (then no continuation makes it right)."""
    stack: list[str] = []
    quote = ""
    comment = "#" if lang == "python" else "--" if lang == "lua" else "//"
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if line.startswith(quote, i):
                i, quote = i + len(quote), ""
                continue
        elif line.startswith(comment, i):
            break
        elif line.startswith(('"""', "'''"), i) and lang == "python":
            quote, i = line[i:i + 3], i + 3
            continue
        elif c in "\"'`":
            quote = c
        elif c in _PAIRS:
            stack.append(_PAIRS[c])
        elif c in ")]}" and (not stack or stack.pop() != c):
            return None
        i += 1
    return quote + "".join(reversed(stack))


@dataclass
class _Parsed:
    before: bytes
    tree: Tree
    errors: list[SyntaxError_]


def _apply(before: bytes, edits: list[tuple[int, int, bytes]]) -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """The window after byte ``edits`` (old start, old end, new bytes) and their spans (old start, old end,
    new start, new end)."""
    parts, spans = [], []
    pos = shift = 0
    for s_b, e_b, nb in edits:
        parts += [before[pos:s_b], nb]
        spans.append((s_b, e_b, s_b + shift, s_b + shift + len(nb)))
        pos, shift = e_b, shift + len(nb) - (e_b - s_b)
    return b"".join([*parts, before[pos:]]), spans


def _fresh(old: _Parsed, after: bytes, spans: list[tuple[int, int, int, int]], parser: Parser
           ) -> list[SyntaxError_]:
    """Errors of ``after`` that the old window did not have (mapped through ``spans``); ``after`` is parsed
    incrementally from a copy of the old tree."""
    tree = old.tree.copy()
    for s_b, e_b, _ns, ne in reversed(spans):  # later edits first: earlier offsets stay valid
        tree.edit(s_b, e_b, ne, _point(old.before, s_b), _point(old.before, e_b), _point(after, ne))
    new = errors(parser.parse(after, tree).root_node, after)

    def mapped(p: int) -> int:
        d = 0
        for s_b, e_b, ns, ne in spans:
            if p < s_b:
                break
            if p < e_b:
                return ns  # inside a replaced range: its new start
            d = ne - e_b
        return p + d

    known = {(x.kind, mapped(x.start)) for x in old.errors}
    replaced = {(x.kind, x.text) for x in old.errors for s_b, e_b, _, _ in spans if x.start < e_b and x.end > s_b}
    return [x for x in new if (x.kind, x.start) not in known and (x.kind, x.text) not in replaced]


def _own(x: SyntaxError_, spans: list[tuple[int, int, int, int]], fim: bool) -> bool:
    return any((ns <= x.start < ne) if fim else (x.start <= ne and x.end >= ns) for _, _, ns, ne in spans)


def introduced(path: str, text: str, edits: Sequence[tuple[int, int, str]], *, fim: bool) -> str | None:
    """Why applying ``edits`` — (start, end, new text), char offsets into ``text``, sorted, not overlapping —
    introduces a syntax error ("syntax error introduced: line N: …"), or None (none, or no grammar)."""
    spec = languages.spec_for(path)
    if spec is None or not edits:
        return None
    wa, wb = _window(text, edits[0][0], edits[-1][1])
    old_w = text[wa:wb]
    before = old_w.encode("utf-8")
    if len(before) > MAX_WINDOW_BYTES:
        return None
    byte_edits = []
    for s, e, new in edits:
        s_b = len(old_w[:s - wa].encode("utf-8"))
        byte_edits.append((s_b, s_b + len(text[s:e].encode("utf-8")), new.encode("utf-8")))
    parser = _parser(spec.name)
    tree = parser.parse(before)
    old = _Parsed(before, tree, errors(tree.root_node, before))
    after, spans = _apply(before, byte_edits)
    bad = [x for x in _fresh(old, after, spans, parser) if _own(x, spans, fim)]
    if bad and fim and len(spans) == 1 and _unfinished(old, byte_edits[0], after, spans[0], spec.name, parser):
        return None
    if not bad:
        return None
    x = bad[0]
    line = text.count("\n", 0, wa) + after.count(b"\n", 0, x.start) + 1
    shown = x.text.split(b"\n", 1)[0][:40].decode("utf-8", "replace")
    what = x.kind if x.kind != "ERROR" else f"unexpected {shown!r}"
    return f"syntax error introduced: line {line}: {what}"


def _unfinished(old: _Parsed, edit: tuple[int, int, bytes], after: bytes, span: tuple[int, int, int, int],
                lang: str, parser: Parser) -> bool:
    """A line-ending insertion whose errors all go once what it left open is closed (see the module doc)."""
    s_b, e_b, nb = edit
    ne = span[3]
    nl = after.find(b"\n", ne)
    if after[ne:len(after) if nl < 0 else nl].strip():
        return False  # mid-line: the rest of the line is there, nothing is left for the user to type
    line_start = after.rfind(b"\n", 0, span[2]) + 1
    close = _closers(after[line_start:ne].decode("utf-8", "replace"), lang)
    if close is None:
        return False
    for extra in (close, close + ";", " x" + close, " x" + close + ";"):
        if not extra:
            continue
        cand, spans = _apply(old.before, [(s_b, e_b, nb + extra.encode("utf-8"))])
        if not [x for x in _fresh(old, cand, spans, parser) if _own(x, spans, True)]:
            return True
    return False
