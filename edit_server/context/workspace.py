"""The builder's workspace side: open documents, exclusions, the symbol index, git, the background
thread, redaction caches, and the ``SourceView`` the collectors get. ``ContextBuilder`` adds builds."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from edit_server.context import collect
from edit_server.context.exclusions import Exclusions
from edit_server.context.gitctx import GitContext
from edit_server.context.options import ContextOptions, check_roots
from edit_server.context.secret_scan import all_rules
from edit_server.context.secrets import FileRules, cap, redact, redact_line, redact_window
from edit_server.context.symbols import SymbolIndex, extract
from edit_server.context.syntax import Document, Edit, infer_edit
from edit_server.context.window import LineCosts

log = logging.getLogger(__name__)
IGNORE_FILES = frozenset({".gitignore", ".ignore", ".gitattributes"})  # a change may exclude any file
RESCAN_AFTER = 64  # files changed at once (a branch switch) past which the workspace is rescanned instead
EXTRACT_IDLE_S = 1.0  # re-index an open document's definitions once typing pauses this long
CACHE_ITEMS = 2048  # cleaned section texts kept


class Workspace:
    def __init__(self, roots: Sequence[Path], options: ContextOptions) -> None:
        self.options = options
        self.roots, problems = check_roots(roots)
        self.degraded: str | None = "; ".join(problems) or None
        self.current_only = self.options.current_only or bool(problems and not self.roots)
        if self.current_only and problems:
            self.degraded = f"{self.degraded}: context limited to the current document"
        self.removed: list[Path] = []  # workspace folders the editor removed (``set_roots``)
        self.exclusions = self._new_exclusions()
        self.index = SymbolIndex()
        self.docs: dict[str, Document] = {}
        self._touched: dict[str, int] = {}  # path -> update tick (recency of open files)
        self._tick = 0
        self._redact_caches: dict[tuple[FileRules, int | None], dict[str, str]] = {}
        self._clean_cache: dict[tuple[str, str, bool], str] = {}
        self._snippets: dict[tuple[str, int, int, int], str] = {}
        self._costs: dict[str, LineCosts] = {}
        self._display: dict[str, str] = {}
        self._extracting: set[str] = set()
        self._outlines: dict[str, tuple[int, str | None]] = {}
        self._imports: dict[tuple[str, tuple[str, ...]], list[Path]] = {}
        self._git: dict[Path, GitContext | None] = {}
        self._doc_defs: dict[str, int] = {}  # path -> version whose definitions are indexed
        self._updated_at: dict[str, float] = {}
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="context-bg")
        self._pending: list[Future] = []
        self._submit(all_rules)  # load the secret rules off the first build's path
        if problems:
            log.warning("context builder degraded: %s", self.degraded)
        if self.options.index_workspace and self.roots and not self.current_only:
            self._submit(self._scan)

    def update_options(self, options: ContextOptions | None = None, **changes: object) -> None:
        """Replace the options at run time (``workspace/didChangeConfiguration``): ``options`` and/or
        single fields, e.g. ``update_options(exclude=("**/*.sql",))``. Cached exclusion answers,
        outlines and redacted lines are dropped as needed; the workspace is re-indexed (mtime-based)
        when the exclude globs change."""
        with self._lock:
            old = self.options
            new = dataclasses.replace(options or old, **changes)  # type: ignore[arg-type]
            if new.current_only and not old.current_only:
                self.current_only = True
            elif not new.current_only and old.current_only and self.roots:
                self.current_only = False
            self.options = new
            if new.exclude != old.exclude:
                self.exclusions.set_globs(new.exclude)
                self._outlines.clear()
            if new.max_line_chars != old.max_line_chars:
                self.exclusions.max_line = new.max_line_chars
                self._costs.clear()
                self._clean_cache.clear()
                self._snippets.clear()
                self._outlines.clear()
            if new.git != old.git:
                self._git.clear()
            if new.max_doc_chars != old.max_doc_chars:
                for doc in self.docs.values():
                    doc.max_parse = new.max_doc_chars
            reindex = (new.exclude != old.exclude or new.index_workspace and not old.index_workspace
                       or old.current_only and not new.current_only)  # other files may be read again
        if reindex and new.index_workspace and self.roots and not self.current_only:
            self._submit(self._scan)

    def set_roots(self, roots: Sequence[Path], removed: Sequence[Path] = ()) -> None:
        """Replace the workspace folders at run time (``workspace/didChangeWorkspaceFolders``). Fail
        closed: from the next build on, no file outside the new roots is read, nor any file of a folder
        in ``removed`` (also once no folder is left, when documents anywhere may give context — a lone
        file's editor; the folders removed before stay removed until added again); the exclusions' answers,
        the symbol index, git contexts, outlines and import resolutions of the old roots are dropped
        (the index is rebuilt by a background scan of the new roots; open documents' definitions are
        extracted again)."""
        with self._lock:
            good, problems = check_roots(roots)
            gone, _ = check_roots(removed)  # a folder deleted since has nothing left to read
            self.removed = [r for r in dict.fromkeys([*self.removed, *gone]) if r not in good and r.is_dir()]
            self.roots = good
            self.degraded = "; ".join(problems) or None
            self.current_only = self.options.current_only or bool(problems and not good)
            if self.current_only and problems:
                self.degraded = f"{self.degraded}: context limited to the current document"
            self._reread()
            self._display.clear()  # paths are shown relative to the roots
        if problems:
            log.warning("workspace folders: %s", self.degraded)
        if self.options.index_workspace and good and not self.current_only:
            self._submit(self._scan)

    def files_changed(self, changes: Sequence[tuple[str, bool]]) -> None:
        """Files or folders created, changed or deleted on disk, ``(path, deleted)`` (LSP
        ``workspace/didChangeWatchedFiles``: a branch switch, a formatter, another tool). Their exclusion
        answers and indexed definitions are renewed in the background — a deleted file's definitions
        leave the index now; a changed ignore file or git state renews every answer and rebuilds the
        index, so a file that became ignored is not read again. Open documents keep the editor's text."""
        index: list[Path] = []
        rebuild = rescan = False
        with self._lock:
            for path, deleted in changes:
                p = Path(path)
                if ".git" in p.parts:  # git's own files (its index, refs, objects) are never read
                    rebuild |= p.as_posix().endswith(".git/info/exclude")
                    continue
                rebuild |= p.name in IGNORE_FILES
                self.exclusions.forget(path)
                if deleted:
                    self.index.remove_under(path)
                    real = _resolved(p)
                    if real != path:  # the index names files under the resolved roots
                        self.index.remove_under(real)
                elif path not in self.docs:
                    rescan |= p.is_dir()
                    index.append(p)
            if rebuild:
                self._reread()
            else:
                self._outlines.clear()
                self._imports.clear()
        if self.current_only or not self.options.index_workspace:
            return
        if rebuild or rescan or len(index) > RESCAN_AFTER:  # one listing + mtimes, not a git call per file
            self._submit(self._scan)
        else:
            for p in index:
                self._submit(self._index_one, p)

    def _new_exclusions(self) -> Exclusions:
        return Exclusions(self.roots, self.options.exclude, max_line=self.options.max_line_chars,
                          removed=self.removed)

    def _reread(self) -> None:
        """Forget what was read from the workspace (under the lock): exclusion answers, the symbol index
        (rebuilt by a scan; a scan still running fills the old one), open documents' indexed definitions,
        git contexts, outlines and import resolutions."""
        self.exclusions = self._new_exclusions()
        self.index = SymbolIndex()
        self._doc_defs.clear()
        self._git.clear()
        self._outlines.clear()
        self._imports.clear()

    def _index_one(self, path: Path) -> None:
        if path.is_file() and self.exclusions.allowed(path):
            self.index.index_file(path)
        else:  # gone again, or excluded now
            self.index.remove_file(str(path))

    # ---- background --------------------------------------------------------------------
    def _submit(self, fn: Callable[..., object], *args: object) -> None:
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(fn, *args))

    def _scan(self) -> None:
        try:
            with self._lock:
                skip = set(self.docs)
            self.index.scan(self.roots, self.exclusions, skip=skip)
        except Exception as e:
            log.warning("workspace indexing failed: %s", type(e).__name__)

    @property
    def settled(self) -> bool:
        """No background indexing / git work is pending (a build now sees every source)."""
        return all(f.done() for f in self._pending)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait for background indexing / git work (tests, CLI, ``settle``), work queued meanwhile too."""
        end = time.monotonic() + timeout
        while True:
            waiting = [f for f in list(self._pending) if not f.done()]
            if not waiting:
                return True
            for f in waiting:
                try:
                    f.result(timeout=max(0.0, end - time.monotonic()))
                except TimeoutError:
                    return False
                except Exception:  # noqa: BLE001 - the task failed (and logged why): it is done
                    pass

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def git_for(self, path: Path) -> GitContext | None:
        if not self.options.git or self.current_only:
            return None
        root = self.exclusions.root_of(path)
        if root is None:
            return None
        if root not in self._git:
            repo = self.exclusions.repo(root)
            self._git[root] = GitContext(repo) if repo is not None else None
        return self._git[root]

    def refresh_git(self, path: str | Path) -> None:
        ctx = self.git_for(Path(path))
        if ctx is not None:
            self._submit(ctx.refresh, Path(path))

    # ---- documents ---------------------------------------------------------------------
    def update_document(self, path: str, text: str, version: int,
                        edits: Sequence[Edit] | None = None) -> None:
        """Open or update a document; ``edits`` as in ``syntax.Document.apply`` (incremental). Without
        edits, the changed span is inferred (common prefix / suffix), so the reparse stays incremental.
        A document over ``max_doc_chars`` is kept without a syntax tree (it gives no context)."""
        with self._lock:
            doc = self.docs.get(path)
            if doc is None:
                self.docs[path] = Document.open(path, text, version, max_parse=self.options.max_doc_chars)
                self.exclusions.forget(path)
                self.refresh_git(path)
            elif text == doc.text:
                doc.version = version  # nothing changed (e.g. the same text re-sent with a request)
                return
            else:
                doc.apply(text, version, edits if edits else [infer_edit(doc.text, text)])
            self._tick += 1
            self._touched[path] = self._tick
            self._updated_at[path] = time.monotonic()

    def close_document(self, path: str) -> None:
        with self._lock:
            self.docs.pop(path, None)
            self._touched.pop(path, None)
            self._doc_defs.pop(path, None)
            self._costs.pop(path, None)
            self._updated_at.pop(path, None)
        try:
            is_file = not self.current_only and Path(path).is_file()
        except (OSError, ValueError):
            is_file = False
        if is_file:
            self._submit(self.index.index_file, Path(path))
        else:
            self.index.remove_file(path)

    def _doc(self, path: str, text: str) -> Document:
        doc = self.docs.get(path)
        if doc is None or doc.text != text:
            self.update_document(path, text, (doc.version + 1) if doc else 0)
            doc = self.docs[path]
        return doc

    def _maybe_extract(self, doc: Document, costs: LineCosts, now: bool = False) -> None:
        """Re-index an open document's definitions once typing pauses (off the build path); ``now``:
        whatever the pause (``settle``)."""
        done = self._doc_defs.get(doc.path)
        idle = now or time.monotonic() - self._updated_at.get(doc.path, 0.0) > EXTRACT_IDLE_S
        if doc.tree is not None and doc.path not in self._extracting and not self.current_only and (
                done is None or done != doc.version and idle):
            self._extracting.add(doc.path)
            self._doc_defs[doc.path] = doc.version
            self._submit(self._extract, doc.path, doc.lang, doc.tree.copy(), doc.text, list(costs.lines))

    def _extract(self, path: str, lang: str, tree, text: str, redacted: list[str]) -> None:
        try:
            self.index.set_file(path, extract(lang, tree, text, path, redacted=redacted))
        except Exception as e:
            log.warning("indexing an open document failed: %s", type(e).__name__)
        finally:
            self._extracting.discard(path)

    def display(self, path: str | Path) -> str:
        """Workspace-relative path shown in prompts (cached, redacted: a key in a file name too)."""
        key = str(path)
        if key not in self._display:
            self._display[key] = redact_line(self._relative(Path(path)))
        return self._display[key]

    def _relative(self, p: Path) -> str:
        try:
            real = p.resolve()
            for r in self.roots:
                if real == r or r in real.parents:
                    return real.relative_to(r).as_posix()
        except (OSError, RuntimeError, ValueError):
            pass
        return p.name

    def _allowed(self, path: str | Path, text: str | None = None) -> bool:
        return self.exclusions.reason(path, text=text) is None

    def _clean(self, text: str, path: str, diff: bool = False) -> str:
        key = (text, path, diff)
        hit = self._clean_cache.get(key)
        if hit is None:
            if len(self._clean_cache) > CACHE_ITEMS:
                self._clean_cache.clear()
            hit = self._clean_cache[key] = redact(text, path, self.options.max_line_chars, diff=diff)
        return hit

    def _cap(self, text: str) -> str:
        m = self.options.max_line_chars
        if m is None or len(text) <= m:
            return text
        return "".join(cap(line, m) for line in text.splitlines(keepends=True))

    def _snippet(self, doc: Document, lo: int, hi: int) -> str:
        key = (doc.path, doc.version, lo, hi)
        hit = self._snippets.get(key)
        if hit is None:
            if len(self._snippets) > CACHE_ITEMS:
                self._snippets.clear()
            hit = self._snippets[key] = "".join(redact_window(doc.lines, lo, hi, doc.path,
                                                              self.options.max_line_chars))
        return hit

    def _view(self) -> collect.SourceView:
        return collect.SourceView(
            index=self.index, docs=self.docs, recency=self._touched, roots=self.roots,
            max_definitions=self.options.max_definitions, max_line=self.options.max_line_chars,
            allowed=self._allowed, display=self.display,
            read_head=lambda p, n: self.exclusions.read(p, head=n), clean=self._clean, cap=self._cap,
            snippet=self._snippet, git_for=self.git_for, submit=self._submit, outlines=self._outlines,
            imports=self._imports)


def _resolved(p: Path) -> str:
    try:
        return str(p.resolve())
    except (OSError, RuntimeError, ValueError):
        return str(p)
