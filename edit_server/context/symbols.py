"""A small incremental definition index: name → definitions, from tree-sitter definition queries.

Workspace files are indexed in a background thread (``SymbolIndex.scan``: only files whose mtime
changed are reparsed); open documents replace their file's entries from their live tree, once per
document version. Snippets are redacted at index time (the whole file at once, so a private-key
block is seen whole) and only allowed files are indexed.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tree_sitter import QueryCursor, Tree

from edit_server.context import languages
from edit_server.context.exclusions import Exclusions
from edit_server.context.secrets import redact_lines


@dataclass(frozen=True)
class Definition:
    name: str
    path: str
    start_line: int
    end_line: int  # inclusive
    kind: str  # node type
    text: str  # snippet: the first ``max_lines`` lines of the definition (redacted)


def extract(lang: str, tree: Tree, text: str, path: str, max_lines: int = 12,
            redacted: list[str] | None = None) -> list[Definition]:
    """Definitions with their snippets, redacted: ``redacted`` = the file's redacted rows (newlines
    kept, as ``Document.lines``), else the whole file is redacted here (private-key blocks too)."""
    defs_q = languages.queries(lang)[0]
    if redacted is None:
        rows = text.split("\n")  # tree-sitter rows: only \n ends a line
        redacted = redact_lines([r + "\n" for r in rows[:-1]] + rows[-1:], path)
    lines = [r[:-1] if r.endswith("\n") else r for r in redacted]
    out: list[Definition] = []
    for _, caps in QueryCursor(defs_q).matches(tree.root_node):
        node, name = caps.get("def", [None])[0], caps.get("name", [None])[0]
        if node is None or name is None or name.text is None:
            continue
        ident = re.split(r"[.:]", name.text.decode("utf-8", "replace"))[-1]
        start, end = node.start_point[0], node.end_point[0]
        snippet = [x + "\n" for x in lines[start:min(end + 1, start + max_lines)]]
        if end + 1 > start + max_lines:
            indent = re.match(r"[ \t]*", snippet[-1]).group(0) if snippet else ""
            snippet.append(f"{indent}...\n")
        out.append(Definition(ident, path, start, end, node.type, "".join(snippet)))
    return out


def identifiers_near(lang: str | None, tree: Tree | None, lines: list[str], row: int,
                     above: int = 30, below: int = 10) -> list[str]:
    """Identifier names used near ``row``, nearest first, then in text order (deduplicated). The order is
    the text's own: tree-sitter hands the captures back in no fixed order (it varied from call to call on
    the same tree), and the prompt's definitions follow this order."""
    lo, hi = max(0, row - above), min(len(lines), row + below + 1)
    found: list[tuple[int, int, int, str]] = []
    if lang is not None and tree is not None:
        cur = QueryCursor(languages.queries(lang)[2])
        cur.set_point_range((lo, 0), (hi, 0))
        for node in cur.captures(tree.root_node).get("id", []):
            if node.text:
                r, c = node.start_point
                found.append((abs(r - row), r, c, node.text.decode("utf-8", "replace")))
    else:
        for i in range(lo, hi):
            for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]{2,}", lines[i]):
                found.append((abs(i - row), i, m.start(), m.group(0)))
    found.sort()
    seen: dict[str, None] = {}
    for *_, name in found:
        seen.setdefault(name, None)
    return list(seen)


class SymbolIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_name: dict[str, list[Definition]] = {}
        self.by_path: dict[str, list[Definition]] = {}
        self._mtimes: dict[str, float] = {}
        self.files_indexed = 0
        self.generation = 0  # bumped on every change (callers cache derived text by it)

    def set_file(self, path: str, defs: list[Definition]) -> None:
        with self._lock:
            for d in self.by_path.pop(path, []):
                lst = self.by_name.get(d.name)
                if lst is not None:
                    self.by_name[d.name] = [x for x in lst if x.path != path]
            self.by_path[path] = defs
            self.generation += 1
            for d in defs:
                self.by_name.setdefault(d.name, []).append(d)

    def remove_file(self, path: str) -> None:
        self.set_file(path, [])
        with self._lock:
            self.by_path.pop(path, None)

    def remove_under(self, path: str) -> None:
        """Forget ``path``'s definitions, or every file's under it (a deleted folder)."""
        prefix = path.rstrip("/\\") + os.sep
        with self._lock:
            gone = [p for p in self.by_path if p == path or p.startswith(prefix)]
        for p in gone:
            self.remove_file(p)
            self._mtimes.pop(p, None)

    def lookup(self, name: str) -> list[Definition]:
        with self._lock:
            return list(self.by_name.get(name, ()))

    def in_file(self, path: str) -> list[Definition]:
        with self._lock:
            return list(self.by_path.get(path, ()))

    def index_file(self, path: Path) -> bool:
        spec = languages.spec_for(path)
        if spec is None:
            return False
        try:
            mtime = os.stat(path).st_mtime
            if self._mtimes.get(str(path)) == mtime:
                return False
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False
        tree = languages.parser(spec.name).parse(text.encode("utf-8"))
        self.set_file(str(path), extract(spec.name, tree, text, str(path)))
        self._mtimes[str(path)] = mtime
        self.files_indexed += 1
        return True

    def scan(self, roots: Iterable[Path], exclusions: Exclusions, skip: set[str] | None = None) -> int:
        """Index every allowed, known-language workspace file whose mtime changed; returns count."""
        n = 0
        for root in roots:
            for f in exclusions.workspace_files(root):
                if skip and str(f) in skip or languages.spec_for(f) is None:
                    continue
                if exclusions.allowed(f, assume_not_ignored=True) and self.index_file(f):
                    n += 1
        return n
