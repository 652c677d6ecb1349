"""Request -> engine prompt through the context builder (syntax-aware, every source, exact token budget).

The builder fails closed: when it cannot use the workspace it sends only the current document, secrets
redacted, and says why in ``degraded`` (the server reports a degraded status). None = the file must not
reach the model (excluded / too large / secret in the editable region): no model call then.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from edit_server.context import ContextBuilder, ContextOptions, open_builder
from edit_server.context.options import SETTINGS_FIELDS, BuildReport, FimBuild
from edit_server.core.requests import EditBuilt, EditRequest, FimRequest
from edit_server.core.settings import MAX_CONTEXT_BUDGET, MIN_CONTEXT_BUDGET, Settings
from engine.api import EngineAPI
from engine.templates import EditPrompt, FimPrompt
from engine.tokens import TokenizerLike
from engine.types import EngineInfo

log = logging.getLogger(__name__)

# a CPU's prompt: a jump to a new site prefills it whole, and the keystrokes typed behind the jump wait for it.
# More context writes better completions (with no time budget), but on a 2-core CPU 2,048 tokens double the
# jump's prefill and answer fewer keystrokes in time (docs/QUALITY.md and docs/PERFORMANCE.md). A GPU gets the
# model's context.
CPU_AUTO_BUDGET = 1024
CPU_MULTILINE_BUDGET_MS = 1200  # the empty-line goal: p50 1 s / p95 2 s on a 2-core CPU (docs/PERFORMANCE.md)
GPU_MULTILINE_BUDGET_MS = 2000
# a single line while typing: past this its decoding stops and nothing is shown (a line cut short is not a
# suggestion). On the 2-core CPU every right or partly right suggestion of `bench lsp --gate` came within
# 300 ms; those past 500 ms were long wrong lines (docs/PERFORMANCE.md). An H200 at width 1 is slower than
# that at its p95 (bench_gpu latency), so more room there until its window steps are made cheaper.
CPU_SINGLE_LINE_BUDGET_MS = 600
GPU_SINGLE_LINE_BUDGET_MS = 1000
CPU_AUTO_MAX_LINES = 4  # a multi-line completion on a CPU: ~1 s of decoding (docs/PERFORMANCE.md)
CANVAS_RESERVE = 512  # room left in the model's context for the canvas (FIM middle / rewritten region)


def auto_budget(settings: Settings, engine: EngineAPI | None) -> int:
    """Prompt-token budget: the setting, or (0 = auto) the model's context capped at 32,768 on a GPU
    and at 1,024 on a CPU (a remote backend counts as a GPU), minus room for the canvas."""
    if settings.context_budget:
        return settings.context_budget
    max_len = getattr(getattr(engine, "args", None), "max_seq_len", None) or 8192
    ctx = min(max_len, MAX_CONTEXT_BUDGET)
    if on_cpu(engine):
        ctx = min(ctx, CPU_AUTO_BUDGET + CANVAS_RESERVE)
    return max(MIN_CONTEXT_BUDGET, ctx - CANVAS_RESERVE)


def on_cpu(engine: EngineAPI | None) -> bool:
    """The engine computes on this machine without CUDA (CPU, or MPS: a laptop) and not on a remote
    backend (whose GPU counts as one)."""
    info = EngineInfo.of(getattr(engine, "info", None))
    return not (info.device or "cpu").startswith("cuda") and not info.remote


def max_lines(settings: Settings, engine: EngineAPI | None) -> int | None:
    """Lines of a multi-line completion: the setting, or (0 = auto) 4 on a CPU and no cap elsewhere."""
    if settings.max_lines:
        return settings.max_lines
    return CPU_AUTO_MAX_LINES if on_cpu(engine) else None


def completion_budget_ms(settings: Settings, engine: EngineAPI | None, single_line: bool) -> int:
    """ms a completion may take: ``singleLineBudgetMs`` / ``multilineBudgetMs``, or (0 = auto) 600 / 1,200 on
    a CPU, 1,000 / 2,000 elsewhere. Past it a multi-line completion answers with its finished lines, a single
    line with nothing."""
    if single_line:
        return settings.single_line_budget_ms or (
            CPU_SINGLE_LINE_BUDGET_MS if on_cpu(engine) else GPU_SINGLE_LINE_BUDGET_MS)
    return settings.multiline_budget_ms or (CPU_MULTILINE_BUDGET_MS if on_cpu(engine) else GPU_MULTILINE_BUDGET_MS)


def edit_history(settings: Settings, engine: EngineAPI | None) -> int:
    """Diffs a next-edit prompt shows: ``historySize``, but no more than the model was trained with (the
    engine's ``edit_history``: the adapter's metadata; our trainer renders `engine.templates.EDIT_HISTORY`).
    A prompt with more than its training showed is out of distribution, and every extra diff is re-prefilled
    with each next edit (the history changes with every edit)."""
    trained = EngineInfo.of(getattr(engine, "info", None)).edit_history
    return min(settings.history_size, int(trained)) if trained else settings.history_size


def context_options(settings: Settings, engine: EngineAPI | None) -> ContextOptions:
    """The builder's options from the one settings struct, with the budget resolved for ``engine``:
    what the server, ``edit-server context`` and ``edit-server bench context`` use."""
    return ContextOptions.from_settings(settings, auto_budget(settings, engine))


class BuilderContext:
    """The context builder (edit_server.context): syntax-aware windows, sources, exclusions, budget."""

    def __init__(self, builder: ContextBuilder, settings: Settings, budget: int, edit_history: int) -> None:
        self.builder = builder
        self.settings = settings
        self.budget = budget
        self.edit_history = edit_history  # diffs in a next-edit prompt (`edit_history`)

    @property
    def degraded(self) -> str | None:
        return self.builder.degraded

    def configure(self, settings: Settings, engine: EngineAPI | None) -> None:
        """didChangeConfiguration: exclusions, line / document caps, history and budget apply at once (the
        builder's own tuning, e.g. a fallback builder's current-document-only mode, stays)."""
        new, old = context_options(settings, engine), self.builder.options
        changes = {f: getattr(new, f) for f in SETTINGS_FIELDS if getattr(new, f) != getattr(old, f)}
        if changes:
            self.builder.update_options(**changes)
        self.settings, self.budget = settings, new.budget
        self.edit_history = edit_history(settings, engine)

    def update_document(self, path: str, text: str, version: int) -> None:
        self.builder.update_document(path, text, version)

    def close_document(self, path: str) -> None:
        self.builder.close_document(path)

    def wait_idle(self, timeout: float) -> bool:
        return self.builder.wait_idle(timeout)

    def files_changed(self, changes: list[tuple[str, bool]]) -> None:
        self.builder.files_changed(changes)

    def set_roots(self, roots: list[Path], removed: list[Path]) -> None:
        self.builder.set_roots(roots, removed)

    def _settle(self, path: str, text: str) -> None:
        """``settleContext`` (eval runs): the build sees the workspace with no background work pending."""
        if self.settings.settle_context and not self.builder.settle(path, text):
            log.warning("context: background work still pending after the settle timeout")

    def fim(self, req: FimRequest) -> FimPrompt | None:
        b = self.fim_build(req)
        return None if b is None else b.prompt

    def fim_build(self, req: FimRequest) -> FimBuild | None:
        """The full FIM build for ``req`` (None: the context blocked the file)."""
        self.update_document(req.path, req.text, req.version)
        self._settle(req.path, req.text)
        b = self.builder.build_fim(req.path, req.text, req.offset, req.history, budget=self.budget)
        _log_build(b.report, b.prompt)
        return None if b.report.blocked else b

    def quick_fim(self, req: FimRequest, tokens: int, head: FimBuild | None = None) -> FimPrompt | None:
        """A quick prompt after a jump (`edit_server.context.quick`; ``head``: the full build's sections and
        history instead of the served ones), or None."""
        b = self.builder.quick_fim(req.path, req.text, req.offset, tokens, req.history, budget=self.budget,
                                   head=head)
        if b is not None:
            _log_build(b.report, b.prompt)
        return None if b is None else b.prompt

    def forget_served(self) -> None:
        self.builder.forget_served()

    def served(self, req: FimRequest, build: FimBuild) -> None:
        """``build`` is the prompt answered for ``req``'s document (what a quick prompt reuses)."""
        self.builder.served_fim(req.path, build)

    def edit(self, req: EditRequest) -> EditBuilt | None:
        self.update_document(req.path, req.text, req.version)
        self._settle(req.path, req.text)
        b = self.builder.build_edit(req.path, req.text, req.offset, req.history, budget=self.budget,
                                    max_history=self.edit_history)
        _log_build(b.report, b.prompt)
        if b.report.blocked:
            return None
        return EditBuilt(b.prompt, b.region_start, b.region_end)


def _log_build(r: BuildReport, prompt: FimPrompt | EditPrompt | None = None) -> None:
    """One INFO line per context build: sizes, lines and reuse only (never text); at DEBUG, a digest of
    the prompt and of each of its parts (`prompt_digest`: hashes, never text), to compare runs."""
    if log.isEnabledFor(logging.INFO):
        log.info("context %s%s: %d of %d tokens (fixed %d, window %d, lines %d-%d, sources %d), sticky %s%s, %.1f ms",
                 r.kind, " (quick)" if r.quick else "", r.total, r.budget, r.fixed, r.window.used, *r.window_lines,
                 sum(x.used for x in r.sources), r.sticky, f" ({r.sticky_miss})" if r.sticky_miss else "", r.ms)
    if prompt is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("context %s digest %s; sources %s", r.kind, prompt_digest(prompt),
                  " ".join(f"{x.name}={x.used}" for x in r.sources))


def _h(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).hexdigest()[:10]


def prompt_digest(prompt: FimPrompt | EditPrompt) -> str:
    """``<whole> (<part>=<hash> ...)``: sha256 prefixes of a prompt and of its parts (file text around the
    cursor, region, history, each section kind), so two runs that built different prompts show which part
    differs — without a character of the text."""
    kinds: dict[str, list[tuple[str, str]]] = {}
    for s in prompt.sections:
        kinds.setdefault(s.kind, []).append((s.path, s.text))
    if isinstance(prompt, FimPrompt):
        file = {"prefix": _h(prompt.prefix), "suffix": _h(prompt.suffix)}
    else:
        file = {"before": _h(prompt.before), "region": _h(prompt.region, prompt.cursor), "after": _h(prompt.after)}
    parts = {**file, "history": f"{len(prompt.history)}:{_h(prompt.history)}",
             **{k: f"{len(v)}:{_h(v)}" for k, v in kinds.items()}}
    whole = _h(prompt.path, tuple(parts.items()), getattr(prompt, "layout", ""))
    return f"{whole} ({' '.join(f'{k}={v}' for k, v in parts.items())})"


Context = BuilderContext


def make_context(settings: Settings, roots: list[Path], engine: EngineAPI | None,
                 tokenizer: TokenizerLike | None = None) -> Context:
    """The context builder over ``roots`` (never raises: it degrades to the current document), counting
    with the engine's tokenizer (``tokenizer``: another, for ``edit-server context`` without a model)."""
    opts = context_options(settings, engine)
    tok = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)  # none: estimated counts
    return BuilderContext(open_builder(roots, tok, opts), settings, opts.budget, edit_history(settings, engine))
