"""Request -> engine prompt: the context builder (syntax-aware, every source, exact token budget) or,
when it cannot run, a fail-closed fallback that sends only the current document, secrets redacted.

Both return None when the file must not reach the model (excluded / secret region): no model call then.
"""

from __future__ import annotations

import fnmatch
import logging
from pathlib import Path, PurePath
from typing import Any

from edit_server.context import ContextBuilder, ContextOptions, redact
from edit_server.core.requests import EditBuilt, EditRequest, FimRequest
from edit_server.core.settings import Settings
from engine.templates import EditPrompt, FimPrompt

log = logging.getLogger(__name__)

CPU_AUTO_BUDGET = 2048  # cold prefill of 2K tokens takes seconds on a laptop CPU (docs/PERFORMANCE.md)
GPU_MAX_CONTEXT = 32768
CANVAS_RESERVE = 512  # room left in the model's context for the canvas (FIM middle / rewritten region)


def auto_budget(settings: Settings, engine: Any) -> int:
    """Prompt-token budget: the setting, or (0 = auto) the model's context capped at 32,768 on a GPU
    and at 2,048 on a CPU, minus room for the canvas."""
    if settings.context_budget:
        return settings.context_budget
    max_len = getattr(getattr(engine, "args", None), "max_seq_len", None) or 8192
    ctx = min(max_len, GPU_MAX_CONTEXT)
    if not str((getattr(engine, "info", None) or {}).get("device", "cpu")).startswith("cuda"):
        ctx = min(ctx, CPU_AUTO_BUDGET + CANVAS_RESERVE)
    return max(256, ctx - CANVAS_RESERVE)


def _rel(path: str) -> str:
    return Path(path).name if path else "untitled"


class CurrentDocumentContext:
    """Fail-closed fallback: a prefix/suffix window of the current document only (no other files, no
    other documents' history), every line passed through the secret redaction, excluded globs honoured."""

    def __init__(self, settings: Settings, budget: int, reason: str) -> None:
        self.settings = settings
        self.budget = budget
        self.degraded: str | None = reason

    def configure(self, settings: Settings, budget: int) -> None:
        self.settings, self.budget = settings, budget

    def update_document(self, path: str, text: str, version: int) -> None:
        pass

    def close_document(self, path: str) -> None:
        pass

    def _blocked(self, path: str) -> bool:
        p = PurePath(path)
        return any(p.match(g) or fnmatch.fnmatch(path, g) for g in self.settings.exclude)

    def _history(self, req: FimRequest | EditRequest) -> tuple[str, ...]:
        return tuple(redact(h.diff) for h in req.history if h.path == req.path)

    def fim(self, req: FimRequest) -> FimPrompt | None:
        if self._blocked(req.path):
            return None
        chars = self.budget * 3  # ~3 characters per token
        pre = req.text[max(0, req.offset - int(chars * 0.75)) : req.offset]
        suf = req.text[req.offset : req.offset + int(chars * 0.25)]
        return FimPrompt(redact(pre), redact(suf), path=_rel(req.path), history=self._history(req))

    def edit(self, req: EditRequest) -> EditBuilt | None:
        if self._blocked(req.path):
            return None
        text, off = req.text, req.offset
        line = text.count("\n", 0, off)
        lines = text.split("\n")
        lo = max(0, line - self.settings.edit_lines_before)
        hi = min(len(lines), line + self.settings.edit_lines_after + 1)
        start = sum(len(ln) + 1 for ln in lines[:lo])
        end = min(len(text), sum(len(ln) + 1 for ln in lines[:hi]))
        region = text[start:end]
        if redact(region) != region:  # a secret inside the region the model would rewrite: no call
            return None
        chars = self.budget * 3
        prompt = EditPrompt(redact(text[max(0, start - int(chars * 0.6)) : start]), region,
                            redact(text[end : end + int(chars * 0.3)]), off - start, path=_rel(req.path),
                            history=self._history(req))
        return EditBuilt(prompt, start, end)


class BuilderContext:
    """The context builder (edit_server.context): syntax-aware windows, sources, exclusions, budget."""

    def __init__(self, builder: ContextBuilder, settings: Settings, budget: int) -> None:
        self.builder = builder
        self.settings = settings
        self.budget = budget
        self.degraded: str | None = None

    def configure(self, settings: Settings, budget: int) -> None:
        if tuple(settings.exclude) != tuple(self.settings.exclude):
            self.builder.update_options(exclude=tuple(settings.exclude))
        self.settings, self.budget = settings, budget

    def update_document(self, path: str, text: str, version: int) -> None:
        self.builder.update_document(path, text, version)

    def close_document(self, path: str) -> None:
        self.builder.close_document(path)

    def fim(self, req: FimRequest) -> FimPrompt | None:
        self.update_document(req.path, req.text, req.version)
        b = self.builder.build_fim(req.path, req.text, req.offset, req.history, budget=self.budget)
        return None if b.report.blocked else b.prompt

    def edit(self, req: EditRequest) -> EditBuilt | None:
        self.update_document(req.path, req.text, req.version)
        b = self.builder.build_edit(req.path, req.text, req.offset, req.history, budget=self.budget)
        if b.report.blocked:
            return None
        return EditBuilt(b.prompt, b.region_start, b.region_end)


Context = BuilderContext | CurrentDocumentContext


def make_context(settings: Settings, roots: list[Path], engine: Any) -> Context:
    """The context builder; if it cannot be built, the fail-closed current-document context (the
    caller reports its ``degraded`` reason to the client)."""
    budget = auto_budget(settings, engine)
    try:
        opts = ContextOptions(exclude=tuple(settings.exclude), model_context=budget)
        builder = ContextBuilder(roots, getattr(engine, "tokenizer", None), opts)
    except Exception as e:  # never fall back to fewer exclusions: fall back to less context
        log.exception("context builder unavailable; sending the current document only, redacted")
        return CurrentDocumentContext(settings, budget, f"context builder unavailable ({type(e).__name__}); "
                                      "using the current document only")
    ctx = BuilderContext(builder, settings, budget)
    ctx.degraded = getattr(builder, "degraded", None)
    return ctx
