"""Candidate sections per source for one build (definitions, imports, git, open files).

The collectors see the builder only through ``SourceView``: what they may read (the index, the open
documents, exclusion checks, redaction) and two caches they may fill. Every text they yield has been
redacted and its lines capped (``view.clean`` / ``view.cap``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from edit_server.context.gitctx import GitContext
from edit_server.context.imports import import_strings, resolve
from edit_server.context.languages import same_family
from edit_server.context.symbols import SymbolIndex, identifiers_near
from edit_server.context.syntax import Document
from engine.templates import Section

MAX_AMBIGUOUS = 8
SNIPPET_RADIUS = 12
SNIPPET_HEAD = 24


@dataclass(frozen=True)
class SourceView:
    """What the source collectors need of a ``ContextBuilder`` for one build."""

    index: SymbolIndex
    docs: Mapping[str, Document]  # open documents by path
    recency: Mapping[str, int]  # path -> last update tick (larger: more recent)
    roots: Sequence[Path]
    max_definitions: int
    max_line: int | None
    allowed: Callable[[str | Path, str | None], bool]  # (path, text if open) -> may enter a prompt
    display: Callable[[str | Path], str]  # workspace-relative path shown in prompts
    read_head: Callable[[Path, int], str | None]  # first lines of an allowed file, redacted
    clean: Callable[[str, str, bool], str]  # (text, path, is a diff) -> redacted, lines capped
    cap: Callable[[str], str]  # lines capped (text already redacted)
    snippet: Callable[[Document, int, int], str]  # lines [lo, hi) of an open document, redacted, capped
    git_for: Callable[[Path], GitContext | None]
    submit: Callable[..., None]  # run in the builder's background thread
    outlines: dict[str, tuple[int, str | None]]  # cache: path -> (index generation, outline)
    imports: dict[tuple[str, tuple[str, ...]], list[Path]]  # cache: (path, import strings) -> files

    def doc_text(self, path: str) -> str | None:
        doc = self.docs.get(path)
        return doc.text if doc is not None else None


def outline(v: SourceView, path: Path, head: int = 40) -> str | None:
    """Definition first lines of an indexed file (else its first ``head`` lines), redacted."""
    key = str(path)
    hit = v.outlines.get(key)
    if hit is not None and hit[0] == v.index.generation:
        return hit[1]
    text = _outline(v, path, head)
    v.outlines[key] = (v.index.generation, text)
    return text


def _outline(v: SourceView, path: Path, head: int) -> str | None:
    if not v.allowed(path, None):
        return None
    defs = v.index.in_file(str(path))
    if defs:
        seen: list[str] = []
        for d in sorted(defs, key=lambda d: d.start_line):
            first = d.text.splitlines(keepends=True)[0]
            if first not in seen:
                seen.append(first)
        return v.cap("".join(seen))
    return v.read_head(path, head)


def definitions(v: SourceView, doc: Document, row: int, visible: tuple[int, int]) -> Iterator[Section]:
    """Definitions of the identifiers used near the cursor: this file, then the files it imports,
    then its directory, then elsewhere; names defined in many places far away (ambiguous) are skipped."""
    seen: set[tuple[str, int]] = set()
    here = os.path.dirname(doc.path)
    imported = {str(p) for p in import_paths(v, doc)}
    n = 0
    for name in identifiers_near(doc.lang, doc.tree, doc.lines, row):
        defs = [d for d in v.index.lookup(name) if same_family(d.path, doc.lang)]
        if not defs:
            continue
        ranked = sorted(defs, key=lambda d: (d.path != doc.path, d.path not in imported,
                                             os.path.dirname(d.path) != here, d.path, d.start_line))
        best = ranked[0].path
        if len(defs) > MAX_AMBIGUOUS and best != doc.path and best not in imported and \
                os.path.dirname(best) != here:
            continue
        for d in ranked[:2]:
            if d.path == doc.path and visible[0] <= d.start_line and d.end_line < visible[1]:
                continue  # already in the window
            if (d.path, d.start_line) in seen or not v.allowed(d.path, v.doc_text(d.path)):
                continue
            seen.add((d.path, d.start_line))
            n += 1
            yield Section("definition", v.display(d.path), v.cap(d.text))
        if n >= v.max_definitions:
            return


def import_paths(v: SourceView, doc: Document) -> list[Path]:
    """Workspace files this document imports (cached by its import strings)."""
    if doc.tree is None or doc.lang is None:
        return []
    mods = import_strings(doc.lang, doc.tree)
    key = (doc.path, tuple(mods))
    targets = v.imports.get(key)
    if targets is None:
        here = Path(doc.path)
        targets = v.imports[key] = [p for m in mods for p in resolve(doc.lang, m, here, list(v.roots))
                                    if p.resolve() != here.resolve()]
    return targets


def imports(v: SourceView, doc: Document) -> Iterator[Section]:
    if doc.tree is None or doc.lang is None:
        return
    for p in import_paths(v, doc):
        text = outline(v, p)
        if text:
            yield Section("import", v.display(p), text)


def git(v: SourceView, doc: Document, report_ready: list[bool]) -> Iterator[Section]:
    path = Path(doc.path)
    ctx = v.git_for(path)
    if ctx is None:
        return
    report_ready.append(ctx.ready)
    if ctx.stale(path):  # saved since? refresh in the background; this build uses the snapshot
        v.submit(ctx.refresh, path)
    diff = ctx.diff(path)
    if diff:
        yield Section("git_diff", v.display(path), v.clean(diff, doc.path, True))
    me = str(ctx.top / ctx.rel(path))
    for p, _n in ctx.cochanged(path, 3):
        if str(p) != me and (text := outline(v, p)):
            yield Section("cochange", v.display(p), text)
    for p in ctx.recent_files(6):
        if str(p) != me and (text := outline(v, p)):
            yield Section("recent", v.display(p), text)


def open_files(v: SourceView, doc: Document) -> Iterator[Section]:
    others = sorted((p for p in v.docs if p != doc.path), key=lambda p: -v.recency.get(p, 0))
    for p in others:
        other = v.docs.get(p)
        if other is None or not v.allowed(p, other.text):
            continue
        line = other.line_of(other.last_edit) if other.last_edit is not None else None
        lo = 0 if line is None else max(0, line - SNIPPET_RADIUS)
        hi = min(len(other.lines), SNIPPET_HEAD if line is None else lo + 2 * SNIPPET_RADIUS)
        text = v.snippet(other, lo, hi)
        if text.strip():
            yield Section("open_file", v.display(p), text)
