"""Token counting for the budget: the engine's tokenizer, cached per chunk (line / block / section).

Three modes, chosen by probing the tokenizer at start-up:

* ``additive``: counts add up per line (the byte-level test tokenizer): everything is per-line sums.
* ``chunk_additive``: counts add up across a boundary before a line that starts with a
  non-space character when the previous line is not blank (GPT-2/Llama-style byte-level BPE, e.g.
  SmolLM2: its pre-tokenizer merges "\n" with following indentation or blank lines, but never across
  "x\n" | "def"). ``count_text`` then sums cached counts of such blocks: exact, and a keystroke only
  re-encodes the block being edited. Windows are planned with per-line counts, then measured exactly.
* otherwise the builder renders the final prompt once and trims it until it fits.

Without a tokenizer, a cheap estimate (UTF-8 bytes / 3, rounded up, per line) is used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from engine.tokens import TokenizerLike

_PROBES = ("def f(x):\n", "    return x\n", "\n", "\n\n", "  \n", "\tif (a) {\n", "}\n", "é漢字 ok\n",
           "x = 1  # c\n", "    \n", "        y\n", "// comment\n")


_ENDS = ("x = 1\n\n"[:-1], "):\n\n", "x = 1\n\n\n"[:-1], "x = 1\n", "):\n", "  }\n", "# c\n", "é\n", "a,\n", "1\n", "    return x\n\n\nfoo()\n", "\"\"\"\n")
_STARTS = ("def f(x):\n    pass\n", "}", "x", "#", "@d\n", "(", "1", "é", ")", '"s"', "+a", "class A:\n\n  b\n",
           "-", "\\", "<div>", "\ndef f", "\n}", "\n# c\n")
# block boundaries: before a non-space line start that follows a non-blank line, or before the last
# newline of a blank run that precedes one ("x\n" | "def", "x\n\n" | "\ndef")
BLOCK_SPLIT = re.compile(r"(?<=[^\n]\n)(?=\S)|(?<=\n)(?=\n\S)")


def estimate(text: str) -> int:
    return -(-len(text.encode("utf-8")) // 3)


@dataclass
class TokenCounter:
    tokenizer: TokenizerLike | None = None
    max_cache: int = 200_000

    def __post_init__(self) -> None:
        self._cache: dict[str, int] = {}
        self.additive = self.tokenizer is None or self._probe_additive()
        self.chunk_additive = self.additive or self._probe_blocks()

    def _probe_blocks(self) -> bool:
        tok = self.tokenizer
        assert tok is not None
        pairs = [(a, b) for a in _ENDS for b in _STARTS
                 if len(a) in {m.start() for m in BLOCK_SPLIT.finditer(a + b)}]  # the junction is a boundary
        return all(tok.encode(a + b) == tok.encode(a) + tok.encode(b) for a, b in pairs)

    def _probe_additive(self) -> bool:
        tok = self.tokenizer
        assert tok is not None
        for a in _PROBES:
            for b in _PROBES:
                if tok.encode(a + b) != tok.encode(a) + tok.encode(b):
                    return False
        return True

    @property
    def exact(self) -> bool:
        """Per-line sums are exact token counts."""
        return self.tokenizer is not None and self.additive

    @property
    def exact_text(self) -> bool:
        """``count_text`` is exact (per line or per block)."""
        return self.tokenizer is not None and self.chunk_additive

    def count(self, text: str) -> int:
        if not text:
            return 0
        n = self._cache.get(text)
        if n is None:
            if len(self._cache) >= self.max_cache:
                self._cache.clear()
            n = len(self.tokenizer.encode(text)) if self.tokenizer is not None else estimate(text)
            self._cache[text] = n
        return n

    def count_lines(self, lines: Iterable[str]) -> int:
        c = self._cache
        total = 0
        for line in lines:
            n = c.get(line)
            total += n if n is not None else self.count(line)
        return total

    def count_text(self, text: str) -> int:
        """Tokens of a piece as the templates encode it (one ``encode`` call)."""
        if self.exact or self.tokenizer is None:
            return self.count_lines(text.splitlines(keepends=True))
        if self.chunk_additive:
            return self.count_lines(BLOCK_SPLIT.split(text))
        return self.count(text) if len(text) < 4096 else len(self.tokenizer.encode(text))

    def fit_lines(self, lines: list[str], budget: int) -> int:
        """How many leading ``lines`` fit in ``budget`` tokens (per-line sums)."""
        total = 0
        for i, line in enumerate(lines):
            total += self.count(line)
            if total > budget:
                return i
        return len(lines)


@dataclass(frozen=True)
class Shares:
    """Fractions of the total budget per source, in priority order. The cursor window is first:
    it always gets at least its share, and whatever the other sources leave unused."""

    window: float = 0.5
    history: float = 0.15
    definitions: float = 0.15
    imports: float = 0.05
    git: float = 0.1
    open_files: float = 0.05

    def order(self) -> list[tuple[str, float]]:
        return [("history", self.history), ("definitions", self.definitions), ("imports", self.imports),
                ("git", self.git), ("open_files", self.open_files)]


# A next edit's prompt: the recent edits are what it is about, and training puts every one of them (the trained
# count, engine.templates.EDIT_HISTORY) in before the file around the region fills what is left — no other files
# (engine/train/tasks_edit.render_edit_example). With FIM's shares a 1,024-token CPU prompt held 1 of a case's 3
# diffs, often none (docs/QUALITY.md); here history comes first, what it leaves goes to the others.
EDIT_SHARES = Shares(window=0.4, history=0.5, definitions=0.06, imports=0.02, git=0.01, open_files=0.01)

OVERHEAD_FIM = 4  # fim_prefix, fim_suffix, fim_middle + spml's cursor marker (reserved; released without a rest)
OVERHEAD_EDIT = 6  # fim_suffix, fim_prefix, region_start, cursor, region_end, fim_middle
