"""The gate's "syntax errors introduced" rule: does applying a suggestion add a tree-sitter ERROR / MISSING node?

A window of whole lines around the change (``CONTEXT`` lines each side, widened to lines that start at column 0;
a window whose parse looks cut mid-construct — an error on its first line or running to its end, e.g. inside a
long docstring — is widened ×4, then to the whole document) is parsed before the change, the tree is edited
and re-parsed incrementally after it, and the error nodes of both parses are compared. An error of the new
parse counts when:

* it is new — no error of the same kind (ERROR, or MISSING of the same token) starts at the mapped position
  in the old parse, nor (inside a replaced range) has the same text: errors already there before the
  suggestion, wherever they shift to, never count;
* it is the suggestion's: a FIM insertion's error starts inside the inserted text — or earlier on the
  insertion's own line and runs into it (``return )``, ``y = a)``: tree-sitter's ERROR starts at the
  statement); an edit's error touches a changed range (a deletion that breaks the code is the edit's fault),
  and within ``NEAR`` lines of an error already there (a line the user is half-way through, which
  tree-sitter regroups around the change) only when the number of errors near the change grows;
* for FIM, the insertion is not an *unfinished block/statement at the end of a line*: when the insertion
  ends its line (only blanks after it) and closing what it left open — its string and the brackets still
  open since the window's start, optionally after a missing operand, then a statement's ``;`` / ``:`` or a
  list's ``,``; or dropping a last word that is (the start of) a keyword (``raise E fr``, ``d`` + ``ef``) —
  leaves no new error in it, it is the start of what the user types next (``x = foo(`` / ``y = [1, 2`` /
  ``let q = bar(`` / ``x = 1 +`` / ``if x`` at the end of a line, ``if (x) {`` whose block is not written
  yet), not a broken suggestion. A closer with no opener (``foo(a, b))``, ``x = )``) is never unfinished.
  Block openers (``if x:``, ``def f(a, b):``, ``for i in range(n):``) parse without an error in the grammars
  here; an unclosed bracket that the rest of the line closes has no error at all.

Measured on 779 partial-line completions of real code (stdlib files, a line cut at a random column, a random
part of its rest inserted at the end of the line: legitimate, unfinished) none is flagged; of the same insertions
with a stray closer / ``= = 1`` appended, 42 % are (tests/test_syntax_check.py runs the same on this project's
sources). Next edits: 288 renames within a region next to a half-typed line (stdlib files): none flagged but 6
whose rename broke a string prefix (``f"`` → ``f_2"``: really broken); the same regions with `` )`` appended to
the changed line: 70 % caught. Languages without a grammar (`edit_server.context.languages`), and windows
over ``MAX_WINDOW_BYTES`` (minified one-line files), skip the rule. Cost: see tests/test_syntax_check.py (a
2,000-line file).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from tree_sitter import Node, Parser, Tree

from edit_server.context import languages

CONTEXT = 40  # lines of the window on each side of the change (then widened to a column-0 line)
WIDEN = 80  # how far at most the window is widened to reach a column-0 line
MAX_WINDOW_BYTES = 256 * 1024
NEAR = 5  # an edit within this many lines of an error already there: compare error counts (`_regrouped`)

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


def _window(text: str, lo: int, hi: int, context: int = 0) -> tuple[int, int]:
    """Char range of whole lines around [lo, hi): ``context`` lines each side (default CONTEXT), widened to
    column-0 lines."""
    context = context or CONTEXT
    a = _line_start(text, lo)
    for _ in range(context):
        if a == 0:
            break
        a = _line_start(text, a - 1)
    for _ in range(WIDEN):  # back to a line that starts a top-level unit
        if a == 0 or (text[a:a + 1].strip() and text[a] not in ")]}"):
            break
        a = _line_start(text, a - 1)
    b = text.find("\n", hi)
    for _ in range(context):
        if b < 0:
            break
        b = text.find("\n", b + 1)
    for _ in range(WIDEN):  # on to the line before the next top-level unit
        if b < 0 or (text[b + 1:b + 2].strip() and text[b + 1] not in ")]}"):
            break
        b = text.find("\n", b + 1)
    return a, len(text) if b < 0 else b + 1


def _cut_open(root: Node, data: bytes, whole: bool) -> bool:
    """Does the window's parse look cut mid-construct (an error at its first line or running to its end, e.g. a
    docstring the window opens or closes)? Never for the whole document."""
    if whole or not root.has_error:
        return False
    first = data.find(b"\n") + 1 or len(data)
    end = len(data.rstrip())
    return any(x.start < first or x.end >= end for x in errors(root, data))


def _point(data: bytes, offset: int) -> tuple[int, int]:
    row = data.count(b"\n", 0, offset)
    return row, offset - (data.rfind(b"\n", 0, offset) + 1)


_PAIRS = {"(": ")", "[": "]", "{": "}"}
_TOKENS = {lang: re.compile(r'\\.|"""|\'\'\'|["\'`]|[()\[\]{}]|\n|' + re.escape(c))
           for lang, c in (("python", "#"), ("lua", "--"), ("", "//"))}


def _closers(prefix: str, inserted: str, lang: str) -> tuple[str, str] | None:
    """(the string quote, the brackets) that close what ``prefix + inserted`` leaves open, innermost first;
    None when ``inserted`` closes something that was never opened (no continuation makes that right).
    ``prefix`` (the window up to the insertion: it starts at a top-level line) is read leniently."""
    tokens = _TOKENS.get(lang, _TOKENS[""])
    stack: list[str] = []
    quote, fstring, fdepth = "", False, 0
    comment = "#" if lang == "python" else "--" if lang == "lua" else "//"
    text, start = prefix + inserted, len(prefix)
    in_comment = False
    for m in tokens.finditer(text):
        t = m.group()
        if in_comment:
            in_comment = t != "\n"
        elif quote:
            if t == quote or (t == "\n" and len(quote) == 1 and quote != "`"):
                quote, fdepth = "", 0  # a one-line string ends at the line's end (unterminated: tree-sitter's error)
            elif fstring and t in "{}":  # an f-string's replacement fields ({{ / }} escapes cancel out)
                fdepth += 1 if t == "{" else -1
        elif t == comment:
            in_comment = True
        elif t in ('"""', "'''", '"', "'", "`"):
            quote = t if lang == "python" or len(t) == 1 else t[0]
            fstring = lang == "python" and re.search(r"(?<![\w])[rRbB]?[fF][rR]?$", text[:m.start()]) is not None
        elif t in _PAIRS:
            stack.append(_PAIRS[t])
        elif t in ")]}":
            if stack and stack[-1] == t:
                stack.pop()
            elif m.start() >= start:
                return None
    return ("}" * max(0, fdepth) + quote if quote else quote), "".join(reversed(stack))


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


SAME_LINE = True  # FIM: also a new error that starts earlier on the insertion's line and runs into it (False:
#                   only errors that start inside the insertion: 25 % of the stray-closer cases above caught, not 42 %)


def _near(data: bytes, lo: int, hi: int, lines: int = NEAR) -> tuple[int, int]:
    """Byte range of ``lines`` whole lines before ``lo`` to ``lines`` after ``hi``."""
    for _ in range(lines + 1):
        lo = data.rfind(b"\n", 0, max(0, lo - 1)) + 1 if lo > 0 else 0
    for _ in range(lines + 1):
        nl = data.find(b"\n", hi + 1)
        hi = len(data) if nl < 0 else nl
    return lo, hi


def _regrouped(old: _Parsed, after: bytes, spans: list[tuple[int, int, int, int]], parser: Parser) -> bool:
    """An edit next to an error that was already there (a line the user is half-way through): tree-sitter
    may regroup that error around the change, so there it is the number of errors near the change that
    must not grow."""
    lo, hi = _near(old.before, spans[0][0], spans[-1][1])
    before = [x for x in old.errors if x.start <= hi and x.end >= lo]
    if not before:
        return False
    nlo, nhi = _near(after, spans[0][2], spans[-1][3])
    tree = old.tree.copy()
    for s_b, e_b, _ns, ne in reversed(spans):
        tree.edit(s_b, e_b, ne, _point(old.before, s_b), _point(old.before, e_b), _point(after, ne))
    now = [x for x in errors(parser.parse(after, tree).root_node, after) if x.start <= nhi and x.end >= nlo]
    return len(now) <= len(before)


def _own(x: SyntaxError_, spans: list[tuple[int, int, int, int]], fim: bool, after: bytes) -> bool:
    """Is the (new) error the suggestion's? FIM: it starts inside the inserted text — or earlier on the same
    line and runs into it (``return )``: tree-sitter's ERROR starts at ``return``); an edit: it touches a
    changed range."""
    for _, _, ns, ne in spans:
        if not fim:
            if x.start <= ne and x.end >= ns:
                return True
        elif ns <= x.start < ne or (SAME_LINE and x.start < ns < x.end
                                    and x.start >= after.rfind(b"\n", 0, ns) + 1):
            return True
    return False


def introduced(path: str, text: str, edits: Sequence[tuple[int, int, str]], *, fim: bool) -> str | None:
    """Why applying ``edits`` — (start, end, new text), char offsets into ``text``, sorted, not overlapping —
    introduces a syntax error ("syntax error introduced: line N: …"), or None (none, or no grammar)."""
    spec = languages.spec_for(path)
    if spec is None or not edits:
        return None
    parser = _parser(spec.name)
    context = CONTEXT
    while True:  # a window that opens or closes mid-construct is widened (x4, then the whole document)
        wa, wb = _window(text, edits[0][0], edits[-1][1], context)
        old_w = text[wa:wb]
        before = old_w.encode("utf-8")
        if len(before) > MAX_WINDOW_BYTES:
            return None
        tree = parser.parse(before)
        whole = wa == 0 and wb == len(text)
        if not _cut_open(tree.root_node, before, whole):
            break
        context = context * 4 if context < 4 * CONTEXT else len(text)
    byte_edits = []
    for s, e, new in edits:
        s_b = len(old_w[:s - wa].encode("utf-8"))
        byte_edits.append((s_b, s_b + len(text[s:e].encode("utf-8")), new.encode("utf-8")))
    old = _Parsed(before, tree, errors(tree.root_node, before))
    after, spans = _apply(before, byte_edits)
    bad = [x for x in _fresh(old, after, spans, parser) if _own(x, spans, fim, after)]
    if bad and fim and len(spans) == 1 and _unfinished(old, byte_edits[0], after, spans[0], spec.name, parser):
        return None
    if bad and not fim and _regrouped(old, after, spans, parser):
        return None
    if not bad:
        return None
    x = bad[0]
    line = text.count("\n", 0, wa) + after.count(b"\n", 0, x.start) + 1
    shown = x.text.split(b"\n", 1)[0][:40].decode("utf-8", "replace")
    what = x.kind if x.kind != "ERROR" else f"unexpected {shown!r}"
    return f"syntax error introduced: line {line}: {what}"


@functools.cache
def _keywords(lang: str) -> frozenset[str]:
    """The grammar's keywords: its anonymous node kinds that are words (``def``, ``from``, ``return`` …)."""
    language = languages.language(lang)
    return frozenset(k for i in range(language.node_kind_count)
                     if not language.node_kind_is_named(i) and (k := language.node_kind_for_id(i) or "").isidentifier()
                     and "_" not in k)


def _keyword_prefix(lang: str, word: str) -> bool:
    """Is ``word`` (the line's last word) a keyword or the start of one — a word the user is still typing?"""
    return any(k.startswith(word) for k in _keywords(lang))


def _unfinished(old: _Parsed, edit: tuple[int, int, bytes], after: bytes, span: tuple[int, int, int, int],
                lang: str, parser: Parser) -> bool:
    """A line-ending insertion whose errors all go once what it left open is closed (see the module doc)."""
    s_b, e_b, nb = edit
    ne = span[3]
    nl = after.find(b"\n", ne)
    if after[ne:len(after) if nl < 0 else nl].strip():
        return False  # mid-line: the rest of the line is there, nothing is left for the user to type
    bases = [nb]
    word = re.search(rb"\w+$", old.before[:s_b].rsplit(b"\n", 1)[-1] + nb)
    if word and len(word.group()) > 0 and _keyword_prefix(lang, word.group().decode("utf-8", "replace")):
        w = word.group().decode("utf-8", "replace")
        cut = nb[:max(0, len(nb) - len(word.group()))]
        bases.append(cut)  # ``raise E fr`` / ``d`` + ``ef``: the user's
        typed = max(0, len(word.group()) - len(nb))  # characters of the word before the insertion
        bases += [cut + k[typed:].encode() for k in sorted(_keywords(lang)) if k.startswith(w) and k != w][:2]
    for base in bases:
        close = _closers(old.before[:s_b].decode("utf-8", "replace"), base.decode("utf-8", "replace"), lang)
        if close is None:
            continue
        quote, brackets = close
        tails = [quote + op + tail for op in ("", " x") for tail in
                 (brackets, brackets + ";", brackets + ":", ",")]
        for extra in dict.fromkeys([""] + tails if base != nb else tails):
            cand, spans = _apply(old.before, [(s_b, e_b, base + extra.encode("utf-8"))])
            if not [x for x in _fresh(old, cand, spans, parser) if _own(x, spans, True, cand)]:
                return True
    return False
