"""Context sections in training prompts: what the server puts before the file in a real workspace.

The server's prompts carry sections (`engine.templates.Section`, rendered ``<file_sep>path\\ntext`` before the
file's header): definitions of the names used near the cursor, found in the files it imports or its directory,
and the other open documents (`edit_server.context.collect`). An adapter trained without them never saw one,
and through the server their effect on such an adapter varied by file, for better and worse (docs/QUALITY.md). `Neighbours` draws such sections for a corpus
document from the files of its own directory: a definition whose name the document uses (else any), or the
head of a file (an open document) — plain text, no parsing, so it runs on the GPU image.
"""

from __future__ import annotations

import posixpath
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from engine.templates import Section
from engine.tokens import TokenizerLike

# a top-level definition in Python, Go, JS / TS: its name is group 1
_DEF = re.compile(r"^(?:async\s+def|def|class|func(?:\s*\([^)]*\))?|(?:export\s+)?(?:default\s+)?"
                  r"(?:async\s+)?(?:function\*?|class|interface|type|const))\s+([A-Za-z_]\w*)", re.M)
_NAME = re.compile(r"[A-Za-z_]\w*")
MAX_SECTIONS = 3  # per prompt
DEF_LINES = 40  # a definition's lines kept (the server caps its sections too)
HEAD_LINES = 24  # an open document's head (`edit_server.context.collect.SNIPPET_HEAD`)
DEFINITION_SHARE = 0.7  # of the sections: definitions; the rest, open documents' heads
MIN_LINES = 3  # a section cut to fit keeps at least this many lines


class DocLike(Protocol):
    path: str
    text: str


def _lines(text: str, start: int, n: int) -> str:
    return "".join(text[start:].splitlines(keepends=True)[:n])


def rendered_tokens(tok: TokenizerLike, s: Section) -> int:
    """Tokens ``s`` takes in a prompt (`engine.templates`: the separator, its path line, its text)."""
    return 1 + len(tok.encode(f"{s.path}\n{s.text}"))


def fit(tok: TokenizerLike, s: Section, room: int, min_lines: int = MIN_LINES) -> Section | None:
    """``s`` cut to its first whole lines that fit ``room`` tokens (the server's sections are cut to their
    share of the budget too), or None when fewer than ``min_lines`` (or all of it, when shorter) would."""
    got = fit_counted(tok, s, room, min_lines)
    return None if got is None else got[0]


def fit_counted(tok: TokenizerLike, s: Section, room: int, min_lines: int = MIN_LINES) -> tuple[Section, int] | None:
    """`fit`, with the tokens the fitted section takes (counted once)."""
    lines = s.text.splitlines(keepends=True)
    n = len(lines)
    while n:
        cut = s if n == len(lines) else Section(s.kind, s.path, "".join(lines[:n]))
        used = rendered_tokens(tok, cut)
        if used <= room:
            return (cut, used) if n >= min(min_lines, len(lines)) else None
        n = n * 3 // 4 if n > 8 else n - 1  # long sections shrink fast, the last lines one by one
    return None


class Neighbours:
    """The corpus documents by directory, and the top-level definitions of each."""

    def __init__(self, docs: Sequence[DocLike]) -> None:
        self.docs = docs
        self.by_dir: dict[str, list[int]] = defaultdict(list)
        for i, d in enumerate(docs):
            self.by_dir[posixpath.dirname(d.path)].append(i)
        self._defs: dict[int, list[tuple[str, int]]] = {}
        self._names: dict[int, frozenset[str]] = {}

    def defs(self, j: int) -> list[tuple[str, int]]:
        """(name, offset) of document ``j``'s top-level definitions (computed once)."""
        if j not in self._defs:
            self._defs[j] = [(m.group(1), m.start()) for m in _DEF.finditer(self.docs[j].text)]
        return self._defs[j]

    def draw(self, i: int, tok: TokenizerLike, rng: random.Random, max_tokens: int) -> tuple[Section, ...]:
        """Up to `MAX_SECTIONS` sections for document ``i`` from other files of its directory, within
        ``max_tokens`` (as rendered: the separator, the path line and the text); () when it has no neighbour."""
        d = self.docs[i]
        peers = [j for j in self.by_dir.get(posixpath.dirname(d.path), []) if j != i]
        if not peers or max_tokens <= 0:
            return ()
        if i not in self._names:
            self._names[i] = frozenset(_NAME.findall(d.text))
        used = self._names[i]
        out: list[Section] = []
        room = max_tokens
        for j in rng.sample(peers, min(len(peers), rng.randint(1, MAX_SECTIONS))):
            s = self._section(j, used, rng)
            got = None if s is None else fit_counted(tok, s, room)
            if got is None:
                continue
            out.append(got[0])
            room -= got[1]
        return tuple(out)

    def _section(self, j: int, used: frozenset[str], rng: random.Random) -> Section | None:
        other = self.docs[j]
        defs = self.defs(j)
        if defs and rng.random() < DEFINITION_SHARE:
            named = [x for x in defs if x[0] in used]
            _, at = rng.choice(named or defs)
            end = next((o for _, o in defs if o > at), len(other.text))  # up to the next definition
            text = _lines(other.text[:end], at, DEF_LINES)
            kind = "definition"
        else:
            text = _lines(other.text, 0, HEAD_LINES)
            kind = "open_file"
        return Section(kind, other.path, text) if text.strip() else None
