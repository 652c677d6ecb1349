"""Tree-sitter spans for SAFIM-like FIM: expressions, statements, blocks, call arguments.

Used directly (the engine never imports ``edit_server``). Grammars come from the per-language wheels.
"""

from __future__ import annotations

import importlib
import random
import re
from dataclasses import dataclass
from functools import cache

try:  # optional: without tree-sitter (e.g. a bare GPU image) there are simply no syntax spans
    import tree_sitter as ts
except ImportError:  # pragma: no cover - depends on the machine
    ts = None  # type: ignore[assignment]

_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
    "java": ("tree_sitter_java", "language"),
    "lua": ("tree_sitter_lua", "language"),
}

# node type → span kind (checked in this order)
_KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("arguments", re.compile(r"^(argument_list|arguments)$")),
    ("block", re.compile(r"^(block|statement_block|compound_statement|body)$")),
    ("statement", re.compile(r"(_statement|^assignment|^expression_statement|_declaration)$")),
    ("expression", re.compile(r"(_expression|^call|^binary_operator|^boolean_operator|^comparison_operator"
                              r"|^attribute|^subscript|^list|^dictionary|^string|^lambda)$")),
]


@dataclass(frozen=True)
class Span:
    start: int  # character offsets into the text
    end: int
    kind: str  # "expression" | "statement" | "block" | "arguments"
    node_type: str


@cache
def parser_for(lang: str) -> ts.Parser | None:
    spec = _GRAMMARS.get(lang)
    if spec is None or ts is None:
        return None
    try:
        mod = importlib.import_module(spec[0])
    except ImportError:
        return None
    return ts.Parser(ts.Language(getattr(mod, spec[1])()))


def _kind(node_type: str) -> str | None:
    for kind, pat in _KINDS:
        if pat.search(node_type):
            return kind
    return None


def syntax_spans(text: str, lang: str, *, max_chars: int = 600, limit: int = 2000) -> list[Span]:
    """Named nodes of the interesting kinds, as character spans (1..max_chars characters)."""
    parser = parser_for(lang)
    if parser is None:
        return []
    data = text.encode()
    tree = parser.parse(data)
    # byte → char offsets (texts are mostly ASCII: fast path)
    ascii_only = len(data) == len(text)
    b2c = None if ascii_only else _byte_to_char(text)
    out: list[Span] = []
    stack = [tree.root_node]
    while stack and len(out) < limit:
        node = stack.pop()
        stack.extend(reversed(node.named_children))
        if not node.is_named or node.has_error:
            continue
        kind = _kind(node.type)
        if kind is None or not 0 < node.end_byte - node.start_byte <= max_chars * 4:
            continue
        s, e = (node.start_byte, node.end_byte) if b2c is None else (b2c[node.start_byte], b2c[node.end_byte])
        if 0 < e - s <= max_chars and text[s:e].strip():
            out.append(Span(s, e, kind, node.type))
    return out


def _byte_to_char(text: str) -> list[int]:
    table: list[int] = []
    for i, ch in enumerate(text):
        table.extend([i] * len(ch.encode()))
    table.append(len(text))
    return table


def random_syntax_span(text: str, lang: str, rng: random.Random, *, max_chars: int = 600) -> Span | None:
    spans = syntax_spans(text, lang, max_chars=max_chars)
    if not spans:
        return None
    kind = rng.choice(sorted({s.kind for s in spans}))  # balance kinds
    return rng.choice([s for s in spans if s.kind == kind])
