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


def two_module_workspace(root: Path, util: str, main_text: str) -> tuple[ContextBuilder, Path]:
    """``root/lib/util.py`` (``util``) and ``root/main.py`` (``main_text``, open in the builder); no git."""
    (root / "lib").mkdir()
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "util.py").write_text(util)
    main = root / "main.py"
    main.write_text(main_text)
    return ContextBuilder([root], TOK, options(git=False)), main
