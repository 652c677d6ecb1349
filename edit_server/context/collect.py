"""Candidate sections per source for one build (definitions, imports, git, open files)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from edit_server.context.exclusions import redact
from edit_server.context.imports import import_strings, resolve
from edit_server.context.languages import same_family
from edit_server.context.sources import snippet_around
from edit_server.context.symbols import identifiers_near
from edit_server.context.syntax import Document
from engine.templates import Section

if TYPE_CHECKING:
    from edit_server.context.builder import ContextBuilder

MAX_AMBIGUOUS = 8


def outline(b: ContextBuilder, path: Path, head: int = 40) -> str | None:
    """Definition first lines of an indexed file (else its first ``head`` lines), redacted."""
    key = str(path)
    hit = b._outlines.get(key)
    if hit is not None and hit[0] == b.index.generation:
        return hit[1]
    text = _outline(b, path, head)
    b._outlines[key] = (b.index.generation, text)
    return text


def _outline(b: ContextBuilder, path: Path, head: int) -> str | None:
    if not b._allowed(path):
        return None
    defs = b.index.in_file(str(path))
    if defs:
        seen: list[str] = []
        for d in sorted(defs, key=lambda d: d.start_line):
            first = d.text.splitlines(keepends=True)[0]
            if first not in seen:
                seen.append(first)
        return "".join(seen)
    text = b.exclusions.read(path)
    return None if text is None else "".join(text.splitlines(keepends=True)[:head])


def definitions(b: ContextBuilder, doc: Document, row: int, visible: tuple[int, int]) -> Iterator[Section]:
    """Definitions of the identifiers used near the cursor: this file, then the files it imports,
    then its directory, then elsewhere; names defined in many places far away (ambiguous) are skipped."""
    seen: set[tuple[str, int]] = set()
    here = os.path.dirname(doc.path)
    imported = {str(p) for p in import_paths(b, doc)}
    n = 0
    for name in identifiers_near(doc.lang, doc.tree, doc.lines, row):
        defs = [d for d in b.index.lookup(name) if same_family(d.path, doc.lang)]
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
            if (d.path, d.start_line) in seen or not b._allowed(d.path, b._doc_text(d.path)):
                continue
            seen.add((d.path, d.start_line))
            n += 1
            yield Section("definition", b.display(d.path), d.text)
        if n >= b.options.max_definitions:
            return


def import_paths(b: ContextBuilder, doc: Document) -> list[Path]:
    """Workspace files this document imports (cached by its import strings)."""
    if doc.tree is None or doc.lang is None:
        return []
    mods = import_strings(doc.lang, doc.tree)
    key = (doc.path, tuple(mods))
    targets = b._imports.get(key)
    if targets is None:
        here = Path(doc.path)
        targets = b._imports[key] = [p for m in mods for p in resolve(doc.lang, m, here, b.roots)
                                     if p.resolve() != here.resolve()]
    return targets


def imports(b: ContextBuilder, doc: Document) -> Iterator[Section]:
    if doc.tree is None or doc.lang is None:
        return
    for p in import_paths(b, doc):
        text = outline(b, p)
        if text:
            yield Section("import", b.display(p), text)


def git(b: ContextBuilder, doc: Document, report_ready: list[bool]) -> Iterator[Section]:
    path = Path(doc.path)
    ctx = b.git_for(path)
    if ctx is None:
        return
    report_ready.append(ctx.ready)
    if ctx.stale(path):  # saved since? refresh in the background; this build uses the snapshot
        b._submit(ctx.refresh, path)
    diff = ctx.diff(path)
    if diff:
        yield Section("git_diff", b.display(path), redact(diff))
    me = str(ctx.top / ctx.rel(path))
    for p, _n in ctx.cochanged(path, 3):
        if str(p) != me and (text := outline(b, p)):
            yield Section("cochange", b.display(p), text)
    for p in ctx.recent_files(6):
        if str(p) != me and (text := outline(b, p)):
            yield Section("recent", b.display(p), text)


def open_files(b: ContextBuilder, doc: Document) -> Iterator[Section]:
    others = sorted((p for p in b.docs if p != doc.path), key=lambda p: -b._touched.get(p, 0))
    for p in others:
        other = b.docs.get(p)
        if other is None or not b._allowed(p, other.text):
            continue
        line = other.line_of(other.last_edit) if other.last_edit is not None else None
        text = redact(snippet_around(other.text, line))
        if text.strip():
            yield Section("open_file", b.display(p), text)
