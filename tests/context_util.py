"""Helpers of the context-builder tests: a history hunk as the builder reads it, the byte-level tokenizer,
and a small two-module workspace (``lib/util.py`` + ``main.py``) with a builder over it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edit_server.context import ContextBuilder, ContextOptions
from edit_server.core.settings import MAX_CONTEXT_BUDGET, Settings
from engine.tokenizer import Tokenizer

TOK = Tokenizer.byte_level()


def options(**kw: Any) -> ContextOptions:
    """The builder's options for the default settings and a 32,768-token budget, ``kw`` replaced."""
    return dataclasses.replace(ContextOptions.from_settings(Settings(), MAX_CONTEXT_BUDGET), **kw)


@dataclass
class Hunk:
    path: str
    diff: str
    timestamp: float
    open: bool = False


def two_module_workspace(root: Path, util: str, main_text: str, tokenizer: Any = None
                         ) -> tuple[ContextBuilder, Path]:
    """``root/lib/util.py`` (``util``) and ``root/main.py`` (``main_text``, open in the builder); no git."""
    (root / "lib").mkdir()
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "util.py").write_text(util)
    main = root / "main.py"
    main.write_text(main_text)
    return ContextBuilder([root], tokenizer or TOK, options(git=False)), main


class MergingTokenizer:
    """Byte-level, but "\\n" followed by ``follow`` becomes one token: counts are not additive per line
    (like GPT-2-style BPE merging a newline with the next line's indentation)."""

    def __init__(self, follow: str = " ") -> None:
        self.special = TOK.special
        self.nl = TOK.encode("\n")[0]
        self.follow = {TOK.encode(ch)[0] for ch in follow}
        self.merged = TOK.vocab_size + 1

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for t in TOK.encode(text):
            if t in self.follow and out and out[-1] in (self.nl, self.merged):
                out[-1] = self.merged
            else:
                out.append(t)
        return out

    def decode(self, ids: list[int]) -> str:
        return TOK.decode([i for i in ids if i != self.merged])


HELPER_UTIL = "def helper(a, b):\n    return a * b\n\n\nclass Thing:\n    def grow(self, k):\n        return k\n"


def helper_calls(n: int = 60) -> str:
    """A ``main.py`` of ``n`` small functions calling ``HELPER_UTIL``'s helper and Thing."""
    return "from lib.util import helper, Thing\n" + "".join(
        f"\n\ndef f{i}(x):\n    y = helper(x, {i})\n    return Thing(y).grow({i})\n" for i in range(n))


def indexed_workspace(root: Path, tokenizer: Any = None) -> tuple[ContextBuilder, str, str]:
    """``two_module_workspace`` over ``HELPER_UTIL`` + ``helper_calls()``, opened and indexed: (builder,
    main.py's path, its text)."""
    text = helper_calls()
    b, main = two_module_workspace(root, HELPER_UTIL, text, tokenizer=tokenizer)
    b.update_document(str(main), text, 1)
    b.build_fim(str(main), text, 10, [], budget=700)  # schedules indexing
    assert b.wait_idle()
    return b, str(main), text
