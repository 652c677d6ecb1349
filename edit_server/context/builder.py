"""ContextBuilder: (workspace, document, cursor, edit history) → FimPrompt / EditPrompt, in budget.

Threading: ``update_document``/``close_document`` are cheap (incremental reparse) and may run on the
event loop; ``build_fim``/``build_edit`` are meant to be called from a worker thread (they take a few
ms). Workspace indexing and git run in this builder's own background thread; builds read snapshots.

Budget (tokens of the rendered prompt, ``render_fim``/``render_edit`` ids): a build's ``budget``, else
``options.budget`` (the server's: ``contextBudget`` or its auto value, serving/contexts.auto_budget). Fixed
parts first (header, special tokens, the editable region), then the cursor window gets at least
``shares.window`` of the rest; history, definitions, imports, git, open files get their share plus what
earlier sources left; what is still left extends the window. A next edit's prompt has its own shares
(``edit_shares``: the history first, as the model is trained). Counts are exact for newline-additive
tokenizers; otherwise the prompt is rendered once and trimmed until it fits.

Fail closed: unusable workspace roots are dropped and reported in ``degraded``; with none left (of
some given), or with ``ContextOptions.current_only``, only the current document (redacted) and its
own history are sent. A source that raises is dropped from that build (``report.failed``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from edit_server.context import collect
from edit_server.context import sources as src
from edit_server.context.budget import OVERHEAD_EDIT, OVERHEAD_FIM, TokenCounter
from edit_server.context.fit import fit
from edit_server.context.options import BuildReport, ContextOptions, EditBuilt, FimBuild
from edit_server.context.quick import QUICK_MAX, QUICK_MIN, QuickPrompts, Served
from edit_server.context.secrets import rules_for
from edit_server.context.sticky import STICKY_GROW, Others, StickyFim, copy_reports, others_key
from edit_server.context.syntax import Document
from edit_server.context.window import (
    LineCosts,
    Window,
    expand,
    fim_window,
    fim_window_between,
    line_region,
    long_lines,
    region_lines,
    region_text,
)
from edit_server.context.workspace import Workspace
from engine.templates import EditPrompt, FimPrompt, Section, fim_specials, render_edit, render_fim
from engine.tokens import TokenizerLike

log = logging.getLogger(__name__)


class ContextBuilder(Workspace):
    def __init__(self, roots: Sequence[Path], tokenizer: TokenizerLike | None, options: ContextOptions) -> None:
        self.tokenizer = tokenizer
        self.counter = TokenCounter(tokenizer)
        self._sticky: dict[str, StickyFim] = {}  # path -> its last full FIM build (context.sticky)
        self._quick = QuickPrompts()  # the served heads quick prompts after a jump reuse (context.quick)
        self.is_fallback = False  # only the current document, whatever the roots (``fallback``)
        super().__init__(roots, options)

    def update_options(self, options: ContextOptions | None = None, **changes: object) -> None:
        with self._lock:
            self._sticky.clear()  # new exclusions / budget / caps: no build from before them is reused
            self._quick.clear()
        super().update_options(options, **changes)

    def close_document(self, path: str) -> None:
        with self._lock:
            self._sticky.pop(path, None)
            self._quick.clear(path)
        super().close_document(path)

    def files_changed(self, changes: Sequence[tuple[str, bool]]) -> None:
        with self._lock:
            self._sticky.clear()  # a sticky build's sections may come from a changed file
            self._quick.clear()
        super().files_changed(changes)

    def set_roots(self, roots: Sequence[Path], removed: Sequence[Path] = ()) -> None:
        if self.is_fallback:
            return  # it reads no file at all: nothing to follow
        with self._lock:
            self._sticky.clear()  # sections read from the old roots are not reused
            self._quick.clear()
        super().set_roots(roots, removed)

    @classmethod
    def fallback(cls, tokenizer: TokenizerLike | None, options: ContextOptions,
                 reason: str = "context builder unavailable") -> ContextBuilder:
        """A builder that sends only the current document, redacted (for when the full one fails)."""
        opts = dataclasses.replace(options, current_only=True, index_workspace=False, git=False)
        b = cls([], tokenizer, opts)
        b.degraded, b.is_fallback = f"{reason}: context limited to the current document", True
        return b

    def _line_costs(self, doc: Document) -> LineCosts:
        c = self._costs.get(doc.path)
        if c is None or not c.fresh(doc) and not c.update(doc):
            m = self.options.max_line_chars
            cache = self._redact_caches.setdefault((rules_for(doc.path), m), {})
            if len(cache) > 200_000:
                cache.clear()
            c = self._costs[doc.path] = LineCosts(doc, self.counter, cache, m)
        return c

    def _budget(self, budget: int | None) -> int:
        return budget if budget is not None else self.options.budget

    @property
    def _counting(self) -> str:
        c = self.counter
        return "estimate" if c.tokenizer is None else "lines" if c.exact else \
            "blocks" if c.exact_text else "render"

    # ---- builds ------------------------------------------------------------------------
    def _sources(self, doc: Document, *, fim: bool, history: Sequence[src.HunkLike], avail: int,
                 carry: int, visible: tuple[int, int], offset: int, rep: BuildReport,
                 reuse: StickyFim | None = None, max_history: int | None = None,
                 ) -> tuple[list[Section], tuple[str, ...], int] | None:
        """Sections, history and the tokens left. ``reuse``: the sections of the document's sticky FIM
        build instead of collecting them (history stays fresh); they may take more than their shares
        here (the tokens left is then negative: the caller shrinks the window). ``max_history``: at most
        this many diffs (default: the options' ``max_history``)."""
        view = self._view()
        row = doc.line_of(offset)
        ready: list[bool] = []
        gens: dict[str, Callable[[], Iterator[Section]]] = {
            "definitions": lambda: collect.definitions(view, doc, row, visible),
            "imports": lambda: collect.imports(view, doc),
            "git": lambda: collect.git(view, doc, ready),
            "open_files": lambda: collect.open_files(view, doc),
        }
        picked: dict[str, list[Section]] = {}
        hist: tuple[str, ...] = ()
        seen: set[tuple[str, str]] = set()
        for name, share in (self.options.shares if fim else self.options.edit_shares).order():
            r = src.SourceReport(name, allowed=int(avail * share) + carry)
            if name == "history":
                hist = src.fill_history(self.counter, history, doc.path, fim=fim,
                                        allowed_path=lambda p: self._allowed(p, view.doc_text(p)),
                                        display=self.display, clean=self._clean, rep=r,
                                        max_items=self.options.max_history if max_history is None else max_history,
                                        max_chars=self.options.max_diff_chars,
                                        only_current=self.current_only)
            elif reuse is not None:
                kept = next((x for x in reuse.sources if x.name == name), None)
                if kept is not None:
                    r.used, r.items, r.dropped = kept.used, list(kept.items), kept.dropped
            elif not self.current_only:
                picked[name] = src.fill(self.counter, src.dedupe(_guarded(name, gens[name], rep), seen), r)
            carry = r.allowed - r.used
            rep.sources.append(r)
        rep.git_ready = bool(ready and ready[0])
        if reuse is not None:
            return list(reuse.sections), hist, carry
        # farthest from the cursor first: stable, low-priority context leads (KV-cache friendly)
        order = ["open_files", "git", "imports", "definitions"]
        return [s for k in order for s in picked.get(k, [])], hist, carry

    def _too_big(self, kind: str, path: str, text: str, budget: int | None) -> BuildReport | None:
        """A report for a document too large to look at (checked before any parse or split)."""
        if len(text) <= self.options.max_doc_chars:
            return None
        rep = BuildReport(kind, self.display(path), self._budget(budget), counting=self._counting,
                          degraded=self.degraded)
        rep.blocked = f"document larger than {self.options.max_doc_chars} characters"
        rep.excluded = {path: rep.blocked}
        return rep

    def build_fim(self, path: str, text: str, offset: int, history: Sequence[src.HunkLike] = (),
                  budget: int | None = None) -> FimBuild:
        t0 = time.perf_counter()
        offset = max(0, min(offset, len(text)))
        big = self._too_big("fim", path, text, budget)
        if big is not None:
            return FimBuild(FimPrompt("", "", big.path, layout=self.options.layout), big)  # type: ignore[arg-type]
        with self._lock:
            self.exclusions.start_recording()
            doc = self._doc(path, text)
            rel = self.display(path)
            rep = BuildReport("fim", rel, self._budget(budget), exact=self.counter.tokenizer is not None,
                              counting=self._counting, degraded=self.degraded)
            rep.fixed = 1 + self.counter.count_text(f"{rel}\n") + OVERHEAD_FIM
            avail = rep.budget - rep.fixed
            if avail < 0:
                raise ValueError(f"context budget {rep.budget} is smaller than the prompt's fixed part ({rep.fixed})")
            reason = self.exclusions.reason(path, text=text)
            if reason:
                rep.blocked, rep.total = reason, rep.fixed
                rep.excluded = {path: reason}
                self.exclusions.stop_recording()
                return FimBuild(FimPrompt("", "", rel, layout=self.options.layout), rep)  # type: ignore[arg-type]
            w_share = int(avail * self.options.shares.window)
            costs = self._line_costs(doc)
            self._maybe_extract(doc, costs)
            key = others_key(history, path)
            old = self._sticky_build(path)
            git_diff = self._git_diff(path)
            got = old.miss(text, offset, len(doc.lines), key, rep.budget, git_diff,
                           self.options.sticky_ttl_s) if old else "no build kept"
            bounds = None if isinstance(got, str) else got
            win = bounds and fim_window_between(doc, offset, *bounds, self.counter, costs)
            grown = win.tokens - old.base if win else 0  # tokens typed into the window since its build
            rep.sticky_miss = got if isinstance(got, str) else "" if grown <= old.spare else \
                f"window outgrew its room: {grown} > {old.spare} tokens"
            reserve = 0
            if win and not rep.sticky_miss:  # typing inside the last window: only the cursor moves
                sections, hist = list(old.sections), old.hist
                rep.sources, rep.sticky = old.reports(), True
            else:
                old = None
                win = fim_window(doc, offset, w_share, self.counter, costs, self.options.prefix_ratio)
                got = self._sources(doc, fim=True, history=history, avail=avail, carry=w_share - win.tokens,
                                    offset=offset, rep=rep, visible=(win.start_line, win.end_line))
                assert got is not None
                sections, hist, left = got
                if win.start_line > 0 or win.end_line < len(doc.lines):  # cut by the budget
                    # leave STICKY_GROW tokens to type into: the next keystrokes keep this build (sticky)
                    # instead of overflowing it and re-collecting the sources (a ~1K-token re-prefill)
                    room = win.tokens + max(0, left)
                    grow = min(STICKY_GROW, room // 8) if self.options.sticky_ttl_s > 0 else 0
                    target, reserve = max(1, room - grow), grow
                    if target != win.tokens:
                        win = fim_window(doc, offset, target, self.counter, costs, self.options.prefix_ratio)

            def make(w: Window) -> FimPrompt:
                return FimPrompt(w.before, w.after, rel, hist, tuple(sections), self.options.layout)  # type: ignore[arg-type]

            prompt = make(win)
            rep.fixed -= OVERHEAD_FIM - fim_specials(prompt)  # no line rest behind the prefix: no marker
            self._finish(rep, win, sections)
            if old is not None:
                rep.excluded = dict(old.excluded)
            if self.tokenizer is not None and not self.counter.exact:
                prompt, win = fit(self.counter, self.tokenizer, rep, prompt, win, make, lambda n: fim_window(
                    doc, offset, n, self.counter, costs, self.options.prefix_ratio), render_fim, costs,
                    reserve=reserve, grow=old is None)
            if self.settled and (old is None or (win.start_line, win.end_line) != bounds):
                self._keep_sticky(path, doc, win, key, rep, tuple(sections), hist, git_diff)
            rep.ms = (time.perf_counter() - t0) * 1e3
            return FimBuild(prompt, rep)

    def served_fim(self, path: str, build: FimBuild) -> None:
        """``build`` (this builder's) is the FIM prompt an answer was computed from: its sections and history
        are what the prefix cache holds for the document, which a quick prompt reuses."""
        if build.report.blocked or self.options.sticky_ttl_s <= 0:
            return
        with self._lock:
            self._quick.served(path, build.prompt, build.report.budget, build.report.sources)

    def forget_served(self) -> None:
        """The engine forgot its cached prompts (``clearHistory``): no served head is reused."""
        with self._lock:
            self._quick.clear()

    def quick_fim(self, path: str, text: str, offset: int, tokens: int, history: Sequence[src.HunkLike] = (),
                  budget: int | None = None, head: FimBuild | None = None) -> FimBuild | None:
        """A first prompt after a jump (`edit_server.context.quick`): the sections and history last served for
        the document (or ``head``'s: this builder's full build, whose start a prefetch may have computed)
        and a window of about ``tokens`` tokens around the cursor; None when nothing fresh was served for it
        at this budget, or the document gives no context now."""
        offset = max(0, min(offset, len(text)))
        if self._too_big("fim", path, text, budget) is not None:
            return None
        with self._lock:
            kept = self._quick.head(path, self._budget(budget), self.options.sticky_ttl_s) if head is None else \
                None if head.report.blocked else Served.of(head.prompt, head.report.budget, head.report.sources)
            if kept is None or self.exclusions.reason(path, text=text):
                return None
            self.exclusions.start_recording()
            doc = self._doc(path, text)
            rel = self.display(path)
            rep = BuildReport("fim", rel, kept.budget, exact=self.counter.tokenizer is not None,
                              counting=self._counting, degraded=self.degraded, quick=True)
            rep.sources = copy_reports(kept.sources)
            costs = self._line_costs(doc)
            key, git_diff = others_key(history, path), self._git_diff(path)
            old = self._quick.window(path, kept.sections, kept.history)
            got = old.miss(text, offset, len(doc.lines), key, kept.budget, git_diff,
                           self.options.sticky_ttl_s) if old else "no quick window"
            tokens = max(QUICK_MIN, min(QUICK_MAX, tokens))
            win = None if isinstance(got, str) else fim_window_between(doc, offset, *got, self.counter, costs)
            rep.sticky_miss = got if isinstance(got, str) else ""
            if win is None or win.tokens > 2 * tokens:  # a new window (or typing doubled the old one)
                win = fim_window(doc, offset, tokens, self.counter, costs, self.options.prefix_ratio)
                self._quick.keep(path, _kept_window(doc, win, kept.budget, key, kept.sections, kept.history,
                                                    [], {}, 0, git_diff))
            prompt = FimPrompt(win.before, win.after, rel, kept.history, kept.sections, self.options.layout)  # type: ignore[arg-type]
            rep.fixed = 1 + self.counter.count_text(f"{rel}\n") + fim_specials(prompt)
            rep.sticky = not rep.sticky_miss
            self._finish(rep, win, list(kept.sections))
            return FimBuild(prompt, rep)

    def _keep_sticky(self, path: str, doc: Document, win: Window, key: Others,
                     rep: BuildReport, sections: tuple[Section, ...], hist: tuple[str, ...],
                     git_diff: str | None) -> None:
        if self.options.sticky_ttl_s <= 0:
            return
        self._sticky[path] = _kept_window(doc, win, rep.budget, key, sections, hist, copy_reports(rep.sources),
                                          dict(rep.excluded), rep.budget - rep.total, git_diff)

    def _sticky_build(self, path: str) -> StickyFim | None:
        return self._sticky.get(path) if self.options.sticky_ttl_s > 0 else None

    def _shared_sections(self, path: str, history: Sequence[src.HunkLike], budget: int) -> StickyFim | None:
        """The document's sticky FIM build when its sections may serve a next edit too: same budget,
        other files' history and git diff, still young. The edit prompt then starts with the FIM
        prompt's sections, so the engine reuses their KV (engine.decoding.blocks.take_slot)."""
        old = self._sticky_build(path)
        if old is None or not old.fresh(budget, others_key(history, path), self._git_diff(path),
                                        self.options.sticky_ttl_s):
            return None
        return old

    def settle(self, path: str, text: str, timeout: float = 60.0) -> bool:
        """Do now what a build of ``path`` would leave to the background thread (index the document's
        definitions, refresh its git diff) and wait until all background work is done: the next build of
        this text sees every source as it is, whatever the timing (``settleContext``, eval runs).
        False: the work did not finish within ``timeout``."""
        if len(text) > self.options.max_doc_chars:
            return self.wait_idle(timeout)
        ctx = self.git_for(Path(path))
        if ctx is not None:
            self._submit(ctx.refresh, Path(path))
        for _ in range(2):  # again once an extraction of an older version (under way) is done
            with self._lock:
                doc = self._doc(path, text)
                self._maybe_extract(doc, self._line_costs(doc), now=True)
            if not self.wait_idle(timeout):
                return False
        return True

    def _git_diff(self, path: str) -> str | None:
        """The file's last computed uncommitted diff; a stale one (saved since) is refreshed in the
        background — a sticky build is reused only while this stays the same."""
        ctx = self.git_for(Path(path))
        if ctx is None:
            return None
        if ctx.stale(Path(path)):
            self._submit(ctx.refresh, Path(path))
        return ctx.diff(Path(path))

    def build_edit(self, path: str, text: str, offset: int, history: Sequence[src.HunkLike] = (),
                   budget: int | None = None, max_history: int | None = None) -> EditBuilt:
        """``max_history``: diffs at most (default: the options' ``max_history``; the server passes the
        model's trained count, serving/contexts.edit_history)."""
        t0 = time.perf_counter()
        offset = max(0, min(offset, len(text)))
        o = self.options
        big = self._too_big("edit", path, text, budget)
        if big is not None:
            return EditBuilt(EditPrompt("", "", "", 0, big.path), offset, offset, big)
        with self._lock:
            self.exclusions.start_recording()
            doc = self._doc(path, text)
            rel = self.display(path)
            rep = BuildReport("edit", rel, self._budget(budget), exact=self.counter.tokenizer is not None,
                              counting=self._counting, degraded=self.degraded)
            head = 1 + self.counter.count_text(f"{rel}\n") + OVERHEAD_EDIT
            reason = self.exclusions.reason(path, text=text)
            costs = self._line_costs(doc)
            line = doc.line_of(offset)
            if not reason and long_lines(costs, doc, line, line + 1):
                reason = f"the cursor line is longer than {o.max_line_chars} characters"
            lo, hi = (line, line + 1) if reason else self._region(doc, offset)
            far = long_lines(costs, doc, lo, hi)  # a long line is cut in the prompt: keep it out of the region
            lo = max([lo, *(r + 1 for r in far if r < line)])
            hi = min([hi, *(r for r in far if r > line)])
            region = region_text(doc, offset, lo, hi, costs)
            if not reason and head + self._region_cost(region) > rep.budget:
                lo, hi = line, line + 1
                region = region_text(doc, offset, lo, hi, costs)
            rep.fixed = head + self._region_cost(region)
            avail = rep.budget - rep.fixed
            if avail < 0 and not reason:
                raise ValueError(f"context budget {rep.budget} is smaller than the prompt's fixed part ({rep.fixed})")
            rep.region_lines, rep.redacted_region = (lo, hi), region.redacted
            if not reason and region.redacted:  # a rewrite would destroy the secret line
                reason = "secret in the editable region"
            if reason:
                rep.blocked, rep.total, rep.excluded = reason, head, {path: reason}
                self.exclusions.stop_recording()
                return EditBuilt(EditPrompt("", "", "", 0, rel), offset, offset, rep)
            self._maybe_extract(doc, costs)
            w_share = int(avail * o.edit_shares.window)

            def window(n: int) -> Window:
                s, e, tp, ts = expand(doc, offset, lo, hi, n, costs, o.prefix_ratio)
                return Window("".join(costs.lines[s:lo]), "".join(costs.lines[hi:e]), s, e, tp + ts, lo, hi)

            win = window(w_share)
            sources = functools.partial(self._sources, doc, fim=False, history=history, avail=avail,
                                        carry=w_share - win.tokens, offset=offset,
                                        visible=(win.start_line, win.end_line), rep=rep, max_history=max_history)
            shared = self._shared_sections(path, history, rep.budget)
            got = sources(reuse=shared) if shared is not None else None
            if got is not None and win.tokens + got[2] < w_share // 2:  # they would squeeze the window
                got = None
            rep.sticky = got is not None  # the FIM prompt's sections: the engine seeds this prompt's KV from it
            if got is None:
                rep.sources = []
                got = sources()
                assert got is not None
            sections, hist, left = got
            if left < 0 or left > 0 and (win.start_line > 0 or win.end_line < len(doc.lines)):
                win = window(win.tokens + left)

            def make(w: Window) -> EditPrompt:
                return EditPrompt(w.before, region.text, w.after, region.cursor, rel, hist, tuple(sections))

            prompt = make(win)
            self._finish(rep, win, sections)
            if shared is not None and rep.sticky:
                rep.excluded.update(shared.excluded)
            if self.tokenizer is not None and not self.counter.exact:
                prompt, win = fit(self.counter, self.tokenizer, rep, prompt, win, make, window, render_edit, costs)
            rep.ms = (time.perf_counter() - t0) * 1e3
            return EditBuilt(prompt, region.start, region.end, rep)

    def _region(self, doc: Document, offset: int) -> tuple[int, int]:
        """The editable region in lines (``edit_region``: "lines", else the syntax node around the cursor)."""
        o = self.options
        if o.edit_region == "lines":
            return line_region(doc, offset)
        return region_lines(doc, offset, o.region_min_lines, o.region_max_lines)

    def _region_cost(self, region) -> int:
        return self.counter.count_text(region.text[: region.cursor]) + \
            self.counter.count_text(region.text[region.cursor:])

    def _finish(self, rep: BuildReport, win: Window, sections: list[Section]) -> None:
        rep.window.used = win.tokens
        rep.window.allowed = rep.budget - rep.fixed - sum(r.used for r in rep.sources)
        rep.window_lines = (win.start_line, win.end_line)
        rep.total = rep.fixed + win.tokens + sum(r.used for r in rep.sources)
        rep.excluded = self.exclusions.stop_recording()


def _kept_window(doc: Document, win: Window, budget: int, key: Others, sections: tuple[Section, ...],
                 hist: tuple[str, ...], sources: list[src.SourceReport], excluded: dict[str, str], spare: int,
                 git_diff: str | None) -> StickyFim:
    """A window's lines kept while the user types inside them: the text before its first line and from its
    end line on, with what the prompt around it was built from."""
    starts, n = doc.line_starts, len(doc.lines)
    tail = doc.text[starts[win.end_line]:] if win.end_line < n else ""
    return StickyFim(budget, doc.text[:starts[win.start_line]], tail, win.start_line, n - win.end_line, key,
                     sections, hist, sources, excluded, win.tokens, spare, git_diff)


def _guarded(name: str, gen: Callable[[], Iterator[Section]], rep: BuildReport) -> Iterator[Section]:
    """The source's sections until it fails; a failure drops the rest of it from this build."""
    try:
        yield from gen()
    except Exception as e:  # a broken file or repository must not break the build
        rep.failed[name] = type(e).__name__
        log.warning("context source %s failed: %s", name, type(e).__name__)


def open_builder(roots: Sequence[Path], tokenizer: TokenizerLike | None, options: ContextOptions) -> ContextBuilder:
    """A context builder that never raises: the full one, else ``ContextBuilder.fallback`` (current
    document only, redacted) with ``degraded`` saying why — never a context without exclusions."""
    try:
        return ContextBuilder(roots, tokenizer, options)
    except Exception as e:
        log.warning("context builder failed (%s); current document only", type(e).__name__)
        try:
            return ContextBuilder.fallback(tokenizer, options, f"context builder failed ({type(e).__name__})")
        except Exception as e2:  # the tokenizer itself: estimate token counts instead
            return ContextBuilder.fallback(None, options, f"context builder failed ({type(e2).__name__})")
