"""Documents with incrementally updated tree-sitter trees.

Edits (``Document.apply``) come in one of two forms, applied in order like LSP ``contentChanges``:

* ``(start_offset, old_text, new_text)`` — character offsets into the text *before* that edit;
* ``(start_byte, old_end_byte, new_end_byte, start_point, old_end_point, new_end_point)`` — tree-sitter's
  own ``InputEdit`` fields (bytes of UTF-8, points as (row, byte column)); the final text is given.

Each edit is fed to ``tree.edit`` at once; the new text is reparsed with the old tree lazily, on the
next access to ``Document.tree`` (from the build's worker thread), so tree-sitter only re-lexes the
changed ranges and a burst of keystrokes costs one reparse. If the 3-tuple edits do not reproduce the
final text, the tree is reparsed from scratch (never a wrong tree). A text longer than ``max_parse``
characters is never parsed (no tree: line-based logic); it is parsed from scratch once it fits again.
The builder sets ``max_parse`` from ``ContextOptions.max_doc_chars`` (setting ``limits.maxDocumentChars``);
a document opened without one has no cap.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from tree_sitter import Node, Parser, Tree

from edit_server.context import languages
from engine.textdiff import changed_span

Edit = tuple  # (start, old_text, new_text) or tree-sitter's 6-tuple


def infer_edit(old: str, new: str) -> tuple[int, str, str]:
    """One ``(start, old_text, new_text)`` edit turning ``old`` into ``new``."""
    p, end_old, end_new = changed_span(old, new)
    return p, old[p:end_old], new[p:end_new]


def _split(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + [parts[-1]]


def _point(text: str, offset: int) -> tuple[int, int]:
    row = text.count("\n", 0, offset)
    line_start = text.rfind("\n", 0, offset) + 1
    return row, len(text[line_start:offset].encode("utf-8"))


def _advance(point: tuple[int, int], s: str) -> tuple[int, int]:
    nl = s.count("\n")
    if nl:
        return point[0] + nl, len(s[s.rfind("\n") + 1:].encode("utf-8"))
    return point[0], point[1] + len(s.encode("utf-8"))


@dataclass
class Document:
    path: str
    text: str
    version: int = 0
    lang: str | None = None
    last_edit: int | None = None  # char offset of the latest edit (for "recently edited" snippets)
    reparsed_fully: int = 0  # how many updates needed a full parse (not incremental)
    # recent line-level changes: (from version, first line, old end, new end), consecutive versions
    changes: list[tuple[int, int, int, int]] = field(default_factory=list)
    _parser: Parser | None = field(default=None, repr=False)
    _tree: Tree | None = field(default=None, repr=False)
    _dirty: bool = field(default=False, repr=False)  # edits applied to _tree, not reparsed yet
    _full: bool = field(default=False, repr=False)  # the next parse must start from scratch
    _lines: list[str] | None = field(default=None, repr=False)
    _starts: list[int] | None = field(default=None, repr=False)
    _root_rows: tuple[int, set[int], set[int]] | None = field(default=None, repr=False)
    max_parse: int | None = None  # longer texts get no syntax tree (None: no cap)

    @classmethod
    def open(cls, path: str, text: str, version: int = 0, max_parse: int | None = None) -> Document:
        spec = languages.spec_for(path)
        doc = cls(path, text, version, spec.name if spec else None, max_parse=max_parse)
        if doc.lang:
            doc._parser = languages.parser(doc.lang)
            if not doc._too_large(text):  # the size is checked before any parse
                doc._tree = doc._parser.parse(text.encode("utf-8"))
            else:
                doc._dirty = doc._full = True
        return doc

    def _too_large(self, text: str) -> bool:
        return self.max_parse is not None and len(text) > self.max_parse

    # ---- updates ---------------------------------------------------------------------------
    def apply(self, text: str, version: int, edits: Sequence[Edit] | None = None) -> None:
        old, old_version, old_lines, old_starts = self.text, self.version, self._lines, self._starts
        self.text, self.version, self._lines, self._starts = text, version, None, None
        self._root_rows, spliced = None, False
        if edits and len(edits) == 1 and len(edits[0]) == 3 and old_lines is not None:
            if old_starts is None:
                old_starts = list(accumulate(map(len, old_lines), initial=0))[:-1]
            spliced = self._splice_lines(old, old_version, old_lines, old_starts, *edits[0])
        if not spliced:
            self.changes.clear()
        if edits:
            self.last_edit = edits[-1][0] if len(edits[-1]) == 3 else None
        if self._parser is None:
            return
        if self._tree is None or self._too_large(text):  # too large: a full parse once it fits
            self._tree, self._dirty, self._full = None, True, True
            return
        self._dirty = True
        if not edits or self._full:
            self._full = True
            return
        tree, cur = self._tree, old
        for e in edits:
            if len(e) == 6:
                tree.edit(*e)
                continue
            start, old_text, new_text = e
            if cur[start:start + len(old_text)] != old_text:
                cur = None
                break
            sb = len(cur[:start].encode("utf-8"))
            sp = _point(cur, start)
            tree.edit(sb, sb + len(old_text.encode("utf-8")), sb + len(new_text.encode("utf-8")),
                      sp, _advance(sp, old_text), _advance(sp, new_text))
            cur = cur[:start] + new_text + cur[start + len(old_text):]
        if cur is None or len(edits[0]) == 3 and cur != text:
            self._full = True  # the edits did not describe the change: parse from scratch

    @property
    def tree(self) -> Tree | None:
        """The syntax tree of the current text; pending edits are reparsed here, lazily (so
        didChange bursts cost one incremental parse, done by whoever builds next)."""
        if self._dirty and self._parser is not None:
            if self._too_large(self.text):  # never parse an oversized text
                self._tree, self._full = None, True
                return None
            data = self.text.encode("utf-8")
            if self._full or self._tree is None:
                self._tree = self._parser.parse(data)
                self.reparsed_fully += 1
            else:
                self._tree = self._parser.parse(data, self._tree)
            self._dirty = self._full = False
        return self._tree

    def _splice_lines(self, old: str, old_version: int, lines: list[str], starts: list[int],
                      start: int, old_text: str, new_text: str) -> bool:
        """Update the line list for one edit without re-splitting the whole text."""
        if old[start:start + len(old_text)] != old_text or \
                len(old) - len(old_text) + len(new_text) != len(self.text):
            return False
        a = bisect.bisect_right(starts, start) - 1
        b = bisect.bisect_right(starts, start + len(old_text))  # exclusive, old lines
        if b >= len(lines):  # touches the last line: let the full split handle it
            return False
        seg = self.text[starts[a]:starts[b] + len(new_text) - len(old_text)]
        mid = _split(seg)[:-1]  # seg ends with a newline: drop the empty tail
        end_old = start + len(old_text)
        if self.text[:start] != old[:start] or self.text[start + len(new_text):] != old[end_old:]:
            return False
        self._lines = lines[:a] + mid + lines[b:]
        self.changes.append((old_version, a, b, a + len(mid)))
        del self.changes[:-32]
        return True

    @property
    def lines(self) -> list[str]:
        """Lines split on "\n" only (tree-sitter rows), newlines kept; a final "" after a last "\n"."""
        if self._lines is None:
            self._lines = _split(self.text)
        return self._lines

    @property
    def line_starts(self) -> list[int]:
        if self._starts is None:
            self._starts = list(accumulate(map(len, self.lines), initial=0))[:-1]
        return self._starts

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset) - 1

    # ---- syntax ----------------------------------------------------------------------------
    def node_at(self, offset: int) -> Node | None:
        if self.tree is None:
            return None
        line = self.line_of(offset)
        col = len(self.lines[line][: offset - self.line_starts[line]].encode("utf-8"))
        return self.tree.root_node.named_descendant_for_point_range((line, col), (line, col))

    def unit_rows(self, offset: int) -> tuple[set[int], set[int]]:
        """Rows where syntactic units start / end, for the units around ``offset``.

        Units = named children of every ancestor of the node at the cursor (top-level items,
        class members, statements of the enclosing blocks). Cutting a window at these rows never
        splits a unit, except the ones that contain the cursor.
        """
        if self._root_rows is None or self._root_rows[0] != self.version:
            kids = self.tree.root_node.named_children if self.tree is not None else []
            self._root_rows = (self.version, {k.start_point[0] for k in kids}, {k.end_point[0] for k in kids})
        starts, ends = set(self._root_rows[1]), set(self._root_rows[2])
        node = self.node_at(offset)
        while node is not None and node.parent is not None:
            for child in node.named_children:
                starts.add(child.start_point[0])
                ends.add(child.end_point[0])
            starts.add(node.start_point[0])
            ends.add(node.end_point[0])
            node = node.parent
        return starts, ends

    def sexp(self) -> str:
        return str(self.tree.root_node) if self.tree is not None else ""
