"""ContextBuilder: (workspace, document, cursor, edit history) → FimPrompt / EditPrompt, in budget.

Threading: ``update_document``/``close_document`` are cheap (incremental reparse) and may run on the
event loop; ``build_fim``/``build_edit`` are meant to be called from a worker thread (they take a few
ms). Workspace indexing and git run in this builder's own background thread; builds read snapshots.

Budget (tokens of the rendered prompt, ``render_fim``/``render_edit`` ids): default the model's
context capped at 32,768 (callers pass ``budget`` = context - canvas). Fixed parts first (header,
special tokens, the editable region), then the cursor window gets at least ``shares.window`` of the
rest; history, definitions, imports, git, open files get their share plus what earlier sources left;
what is still left extends the window. Counts are exact for newline-additive tokenizers; otherwise
the prompt is rendered once and trimmed until it fits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from edit_server.context import sources as src
from edit_server.context.budget import OVERHEAD_EDIT, OVERHEAD_FIM, Shares, TokenCounter
from edit_server.context.exclusions import Exclusions
from edit_server.context.fit import fit
from edit_server.context.gitctx import GitContext
from edit_server.context.symbols import SymbolIndex, extract
from edit_server.context.syntax import Document, Edit, infer_edit
from edit_server.context.window import LineCosts, Window, expand, fim_window, region_lines, region_text
from engine.templates import EditPrompt, FimPrompt, Section, render_edit, render_fim
from engine.tokens import TokenizerLike

log = logging.getLogger(__name__)
MAX_BUDGET = 32_768
EXTRACT_IDLE_S = 1.0  # re-index an open document's definitions once typing pauses this long


@dataclass(frozen=True)
class ContextOptions:
    budget: int | None = None  # total prompt tokens (None: min(model_context, 32768))
    model_context: int | None = None
    shares: Shares = field(default_factory=Shares)
    prefix_ratio: float = 0.75  # of the window, before the cursor
    exclude: tuple[str, ...] = ()  # extra exclude globs
    max_history: int = 8
    max_diff_chars: int = 6000
    max_definitions: int = 12
    region_min_lines: int = 4
    region_max_lines: int = 20
    index_workspace: bool = True
    git: bool = True
    layout: str = "spm"


@dataclass
class BuildReport:
    kind: str
    path: str
    budget: int
    total: int = 0  # tokens of the rendered prompt
    exact: bool = True  # counts come from the tokenizer (not an estimate)
    counting: str = "lines"  # "lines" (additive per line) | "blocks" | "render" | "estimate"
    fixed: int = 0  # header + special tokens (+ region for edit)
    window: src.SourceReport = field(default_factory=lambda: src.SourceReport("window"))
    sources: list[src.SourceReport] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)  # path -> reason
    blocked: str | None = None  # why the current file itself gave no context
    window_lines: tuple[int, int] = (0, 0)
    region_lines: tuple[int, int] | None = None
    redacted_region: bool = False
    git_ready: bool = False
    verified_by_render: bool = False  # counting == "render" and the prompt was rendered
    ms: float = 0.0


@dataclass
class FimBuild:
    prompt: FimPrompt
    report: BuildReport


@dataclass
class EditBuild:
    prompt: EditPrompt
    region_start: int
    region_end: int
    report: BuildReport


class ContextBuilder:
    def __init__(self, roots: Sequence[Path], tokenizer: TokenizerLike | None,
                 options: ContextOptions | None = None) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.tokenizer = tokenizer
        self.options = options or ContextOptions()
        self.counter = TokenCounter(tokenizer)
        self.exclusions = Exclusions(self.roots, self.options.exclude)
        self.index = SymbolIndex()
        self.docs: dict[str, Document] = {}
        self._touched: dict[str, int] = {}  # path -> update tick (recency of open files)
        self._tick = 0
        self._redact_cache: dict[str, str] = {}
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
        if self.options.index_workspace and self.roots:
            self._submit(self._scan)

    # ---- background --------------------------------------------------------------------
    def _submit(self, fn, *args) -> None:
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(fn, *args))

    def _scan(self) -> None:
        try:
            with self._lock:
                skip = set(self.docs)
            self.index.scan(self.roots, self.exclusions, skip=skip)
        except Exception as e:
            log.warning("workspace indexing failed: %s", e)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait for background indexing / git work (tests, CLI)."""
        end = time.monotonic() + timeout
        for f in list(self._pending):
            try:
                f.result(timeout=max(0.0, end - time.monotonic()))
            except Exception:
                return False
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def git_for(self, path: Path) -> GitContext | None:
        root = self.exclusions.root_of(path)
        if root is None or not self.options.git:
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
        edits, the changed span is inferred (common prefix / suffix), so the reparse stays incremental."""
        with self._lock:
            doc = self.docs.get(path)
            if doc is None:
                self.docs[path] = Document.open(path, text, version)
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
        if Path(path).is_file():
            self._submit(self.index.index_file, Path(path))
        else:
            self.index.remove_file(path)

    def _doc(self, path: str, text: str) -> Document:
        doc = self.docs.get(path)
        if doc is None or doc.text != text:
            self.update_document(path, text, (doc.version + 1) if doc else 0)
            doc = self.docs[path]
        done = self._doc_defs.get(path)
        idle = time.monotonic() - self._updated_at.get(path, 0.0) > EXTRACT_IDLE_S
        if doc.tree is not None and path not in self._extracting and (
                done is None or done != doc.version and idle):
            self._extracting.add(path)
            self._doc_defs[path] = doc.version
            self._submit(self._extract, path, doc.lang, doc.tree.copy(), doc.text)
        return doc

    def _extract(self, path: str, lang: str, tree, text: str) -> None:
        """Re-index an open document's definitions off the build path (on a tree snapshot)."""
        try:
            self.index.set_file(path, extract(lang, tree, text, path))
        finally:
            self._extracting.discard(path)

    def _line_costs(self, doc: Document) -> LineCosts:
        c = self._costs.get(doc.path)
        if c is None or not c.fresh(doc) and not c.update(doc):
            if len(self._redact_cache) > 200_000:
                self._redact_cache.clear()
            c = self._costs[doc.path] = LineCosts(doc, self.counter, self._redact_cache)
        return c

    def display(self, path: str | Path) -> str:
        """Workspace-relative path shown in prompts (cached)."""
        key = str(path)
        if key not in self._display:
            self._display[key] = self._relative(Path(path))
        return self._display[key]

    def _relative(self, p: Path) -> str:
        try:
            real = p.resolve()
            for r in self.roots:
                if real == r or r in real.parents:
                    return real.relative_to(r).as_posix()
        except OSError:
            pass
        return p.name

    def _allowed(self, path: str | Path, text: str | None = None) -> bool:
        return self.exclusions.reason(path, text=text) is None

    def _budget(self, budget: int | None) -> int:
        if budget is not None:
            return budget
        if self.options.budget is not None:
            return self.options.budget
        return min(self.options.model_context or MAX_BUDGET, MAX_BUDGET)

    @property
    def _counting(self) -> str:
        c = self.counter
        return "estimate" if c.tokenizer is None else "lines" if c.exact else \
            "blocks" if c.exact_text else "render"

    def _doc_text(self, path: str) -> str | None:
        doc = self.docs.get(path)
        return doc.text if doc is not None else None

    # ---- builds ------------------------------------------------------------------------
    def _sources(self, doc: Document, *, fim: bool, history: Sequence[src.HunkLike], avail: int,
                 carry: int, visible: tuple[int, int], offset: int,
                 rep: BuildReport) -> tuple[list[Section], tuple[str, ...], int]:
        from edit_server.context import collect

        sh = self.options.shares
        row = doc.line_of(offset)
        ready: list[bool] = []
        gens = {
            "definitions": lambda: collect.definitions(self, doc, row, visible),
            "imports": lambda: collect.imports(self, doc),
            "git": lambda: collect.git(self, doc, ready),
            "open_files": lambda: collect.open_files(self, doc),
        }
        picked: dict[str, list[Section]] = {}
        hist: tuple[str, ...] = ()
        seen: set[tuple[str, str]] = set()
        for name, share in sh.order():
            r = src.SourceReport(name, allowed=int(avail * share) + carry)
            if name == "history":
                hist = src.fill_history(self.counter, history, doc.path, fim=fim,
                                        allowed_path=lambda p: self._allowed(p, self._doc_text(p)),
                                        display=self.display, rep=r, max_items=self.options.max_history,
                                        max_chars=self.options.max_diff_chars)
            else:
                picked[name] = src.fill(self.counter, src.dedupe(gens[name](), seen), r)
            carry = r.allowed - r.used
            rep.sources.append(r)
        rep.git_ready = bool(ready and ready[0])
        # farthest from the cursor first: stable, low-priority context leads (KV-cache friendly)
        order = ["open_files", "git", "imports", "definitions"]
        return [s for k in order for s in picked.get(k, [])], hist, carry

    def build_fim(self, path: str, text: str, offset: int, history: Sequence[src.HunkLike] = (),
                  budget: int | None = None) -> FimBuild:
        t0 = time.perf_counter()
        offset = max(0, min(offset, len(text)))
        with self._lock:
            self.exclusions.start_recording()
            doc = self._doc(path, text)
            rel = self.display(path)
            rep = BuildReport("fim", rel, self._budget(budget), exact=self.counter.tokenizer is not None,
                              counting=self._counting)
            rep.fixed = 1 + self.counter.count_text(f"{rel}\n") + OVERHEAD_FIM
            avail = rep.budget - rep.fixed
            if avail < 0:
                raise ValueError(f"context budget {rep.budget} is smaller than the prompt's fixed part ({rep.fixed})")
            reason = self.exclusions.reason(path, text=text)
            if reason:
                rep.blocked, rep.total = reason, rep.fixed
                rep.excluded = {path: reason}
                return FimBuild(FimPrompt("", "", rel, layout=self.options.layout), rep)  # type: ignore[arg-type]
            w_share = int(avail * self.options.shares.window)
            costs = self._line_costs(doc)
            win = fim_window(doc, offset, w_share, self.counter, costs, self.options.prefix_ratio)
            sections, hist, left = self._sources(doc, fim=True, history=history, avail=avail,
                                                 carry=w_share - win.tokens, offset=offset, rep=rep,
                                                 visible=(win.start_line, win.end_line))
            if left > 0 and (win.start_line > 0 or win.end_line < len(doc.lines)):
                win = fim_window(doc, offset, win.tokens + left, self.counter, costs, self.options.prefix_ratio)

            def make(w: Window) -> FimPrompt:
                return FimPrompt(w.before, w.after, rel, hist, tuple(sections), self.options.layout)  # type: ignore[arg-type]

            prompt = make(win)
            self._finish(rep, win, sections, doc, offset)
            if self.tokenizer is not None and not self.counter.exact:
                prompt, win = fit(self.counter, self.tokenizer, rep, prompt, win, make, lambda n: fim_window(
                    doc, offset, n, self.counter, costs, self.options.prefix_ratio), render_fim, costs)
            rep.ms = (time.perf_counter() - t0) * 1e3
            return FimBuild(prompt, rep)

    def build_edit(self, path: str, text: str, offset: int, history: Sequence[src.HunkLike] = (),
                   budget: int | None = None) -> EditBuild:
        t0 = time.perf_counter()
        offset = max(0, min(offset, len(text)))
        o = self.options
        with self._lock:
            self.exclusions.start_recording()
            doc = self._doc(path, text)
            rel = self.display(path)
            rep = BuildReport("edit", rel, self._budget(budget), exact=self.counter.tokenizer is not None,
                              counting=self._counting)
            head = 1 + self.counter.count_text(f"{rel}\n") + OVERHEAD_EDIT
            reason = self.exclusions.reason(path, text=text)
            line = doc.line_of(offset)
            lo, hi = (line, line + 1) if reason else region_lines(doc, offset, o.region_min_lines, o.region_max_lines)
            region = region_text(doc, offset, lo, hi)
            if not reason and head + self._region_cost(region) > rep.budget:
                lo, hi = line, line + 1
                region = region_text(doc, offset, lo, hi)
            rep.fixed = head + self._region_cost(region)
            avail = rep.budget - rep.fixed
            if avail < 0:
                raise ValueError(f"context budget {rep.budget} is smaller than the prompt's fixed part ({rep.fixed})")
            rep.region_lines, rep.redacted_region = (lo, hi), region.redacted
            if not reason and region.redacted:  # a rewrite would destroy the secret line
                reason = "secret in the editable region"
            if reason:
                rep.blocked, rep.total, rep.excluded = reason, head, {path: reason}
                return EditBuild(EditPrompt("", "", "", 0, rel), offset, offset, rep)
            w_share = int(avail * o.shares.window)
            costs = self._line_costs(doc)

            def window(n: int) -> Window:
                s, e, tp, ts = expand(doc, offset, lo, hi, n, costs, o.prefix_ratio)
                return Window("".join(costs.lines[s:lo]), "".join(costs.lines[hi:e]), s, e, tp + ts, lo, hi)

            win = window(w_share)
            sections, hist, left = self._sources(doc, fim=False, history=history, avail=avail,
                                                 carry=w_share - win.tokens, offset=offset, rep=rep,
                                                 visible=(win.start_line, win.end_line))
            if left > 0 and (win.start_line > 0 or win.end_line < len(doc.lines)):
                win = window(win.tokens + left)

            def make(w: Window) -> EditPrompt:
                return EditPrompt(w.before, region.text, w.after, region.cursor, rel, hist, tuple(sections))

            prompt = make(win)
            self._finish(rep, win, sections, doc, offset)
            if self.tokenizer is not None and not self.counter.exact:
                prompt, win = fit(self.counter, self.tokenizer, rep, prompt, win, make, window, render_edit, costs)
            rep.ms = (time.perf_counter() - t0) * 1e3
            return EditBuild(prompt, region.start, region.end, rep)

    def _region_cost(self, region) -> int:
        return self.counter.count_text(region.text[: region.cursor]) + \
            self.counter.count_text(region.text[region.cursor:])

    def _finish(self, rep: BuildReport, win: Window, sections: list[Section], doc: Document, offset: int) -> None:
        rep.window.used = win.tokens
        rep.window.allowed = rep.budget - rep.fixed - sum(r.used for r in rep.sources)
        rep.window_lines = (win.start_line, win.end_line)
        rep.total = rep.fixed + win.tokens + sum(r.used for r in rep.sources)
        rep.excluded = self.exclusions.stop_recording()
