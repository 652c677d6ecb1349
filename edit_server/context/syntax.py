"""Documents with incrementally updated tree-sitter trees.

Edits (``Document.apply``) come in one of two forms, applied in order like LSP ``contentChanges``:

* ``(start_offset, old_text, new_text)`` — character offsets into the text *before* that edit;
* ``(start_byte, old_end_byte, new_end_byte, start_point, old_end_point, new_end_point)`` — tree-sitter's
  own ``InputEdit`` fields (bytes of UTF-8, points as (row, byte column)); the final text is given.

Each edit is fed to ``tree.edit`` and the new text is reparsed with the old tree, so tree-sitter only
re-lexes the changed ranges. If the 3-tuple edits do not reproduce the final text, the tree is
reparsed from scratch (never a wrong tree).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from tree_sitter import Node, Parser, Tree

from edit_server.context import languages

Edit = tuple  # (start, old_text, new_text) or tree-sitter's 6-tuple


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
    tree: Tree | None = None
    last_edit: int | None = None  # char offset of the latest edit (for "recently edited" snippets)
    reparsed_fully: int = 0  # how many times ``apply`` had to fall back to a full parse
    _parser: Parser | None = field(default=None, repr=False)
    _lines: list[str] | None = field(default=None, repr=False)
    _starts: list[int] | None = field(default=None, repr=False)
    _root_rows: tuple[int, set[int], set[int]] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str, text: str, version: int = 0) -> Document:
        spec = languages.spec_for(path)
        doc = cls(path, text, version, spec.name if spec else None)
        if doc.lang:
            doc._parser = languages.parser(doc.lang)
            doc.tree = doc._parser.parse(text.encode("utf-8"))
        return doc

    # ---- updates ---------------------------------------------------------------------------
    def apply(self, text: str, version: int, edits: Sequence[Edit] | None = None) -> None:
        old = self.text
        self.text, self.version, self._lines, self._starts = text, version, None, None
        self._root_rows = None
        if edits:
            self.last_edit = edits[-1][0] if len(edits[-1]) == 3 else None
        if self.tree is None or self._parser is None:
            return
        if not edits:
            self.tree = self._parser.parse(text.encode("utf-8"))
            self.reparsed_fully += 1
            return
        tree, cur = self.tree, old
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
        if cur is not None and len(edits[0]) == 3 and cur != text:
            cur = None
        if cur is None:  # edits did not describe the change: parse from scratch
            self.tree = self._parser.parse(text.encode("utf-8"))
            self.reparsed_fully += 1
        else:
            self.tree = self._parser.parse(text.encode("utf-8"), tree)

    # ---- lines -----------------------------------------------------------------------------
    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self.text.splitlines(keepends=True) or [""]
            if self.text.endswith("\n"):
                self._lines.append("")
        return self._lines

    @property
    def line_starts(self) -> list[int]:
        if self._starts is None:
            starts, pos = [], 0
            for line in self.lines:
                starts.append(pos)
                pos += len(line)
            self._starts = starts
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
