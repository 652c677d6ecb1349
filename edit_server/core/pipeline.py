"""Request -> context -> engine -> gate, on plain offsets (no LSP types).

The server builds a :class:`FimRequest` / :class:`EditRequest` on the event loop; the worker thread
calls :meth:`Pipeline.fim_prompt` / :meth:`Pipeline.edit_prompt` (context building) and the engine;
:meth:`Pipeline.fim_result` / :meth:`Pipeline.edit_result` post-process with the gate.
"""

from __future__ import annotations

import difflib
import fnmatch
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from edit_server.core.history import Hunk
from edit_server.core.settings import Settings
from edit_server.selectivity import gate
from engine.templates import EditPrompt, FimPrompt

log = logging.getLogger(__name__)


@dataclass
class FimRequest:
    uri: str
    path: str
    text: str
    version: int
    offset: int
    invoked: bool = True
    history: list[Hunk] = field(default_factory=list)


@dataclass
class EditRequest:
    uri: str
    path: str
    text: str
    version: int
    offset: int
    history: list[Hunk] = field(default_factory=list)


@dataclass
class Suggestion:
    id: str
    kind: str  # "fim" | "edit"
    text: str
    start: int
    end: int
    score: float
    show: bool
    reason: str = "ok"


@dataclass(frozen=True)
class TextEdit:
    start: int  # offsets into the request's document text
    end: int
    text: str


@dataclass
class EditBuilt:
    prompt: EditPrompt
    region_start: int
    region_end: int


_CALIBRATION: dict[tuple[str, float], dict[str, float]] = {}


def gate_threshold(settings: Settings, kind: str) -> float:
    """The show threshold for ``kind``: the calibrated one (`edit-server align gate`) when a
    calibration file is configured or in its default place, else ``gate.threshold``."""
    from edit_server.selectivity.align import default_calibration_path, load_thresholds

    where = settings.gate.calibration
    if where == "off":
        return settings.gate.threshold
    path = Path(where) if where else default_calibration_path()
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return settings.gate.threshold
    if key not in _CALIBRATION:
        try:
            _CALIBRATION[key] = load_thresholds(path)
        except ValueError:
            log.warning("ignoring gate calibration", exc_info=True)
            _CALIBRATION[key] = {}
    return _CALIBRATION[key].get(kind, settings.gate.threshold)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def skip_reason(req: FimRequest, settings: Settings) -> str | None:
    """Why an inline completion request should not reach the model (None = go ahead)."""
    if not settings.inline_completion.enabled:
        return "disabled"
    line_start = req.text.rfind("\n", 0, req.offset) + 1
    line_end = req.text.find("\n", req.offset)
    line_end = len(req.text) if line_end < 0 else line_end
    if not req.invoked and not gate.should_auto_trigger(
            req.text[line_start:req.offset], req.text[req.offset:line_end], settings.auto_trigger_max_right):
        return "auto-trigger rule"
    return None


def is_single_line(req: FimRequest) -> bool:
    line_end = req.text.find("\n", req.offset)
    return gate.single_line_mode(req.text[req.offset : len(req.text) if line_end < 0 else line_end])


CPU_AUTO_BUDGET = 2048  # cold prefill of 2K tokens takes seconds on a laptop CPU (REFERENCE §8)
CANVAS_RESERVE = 512  # room left in the model's context for the canvas (FIM middle / rewritten region)


def auto_budget(settings: Settings, eng: Any) -> int:
    """Prompt-token budget: the setting, or (0 = auto) the model's context capped at 32,768 on a GPU
    and at 2,048 on a CPU, minus room for the canvas."""
    args = getattr(eng, "args", None)
    ctx = min(getattr(args, "max_seq_len", 8192) or 8192, 32768)
    if not settings.context_budget:
        device = str((getattr(eng, "info", None) or {}).get("device", "cpu"))
        if not device.startswith("cuda"):
            ctx = min(ctx, CPU_AUTO_BUDGET + CANVAS_RESERVE)
        return max(256, ctx - CANVAS_RESERVE)
    return settings.context_budget


class SimpleContext:
    """Prefix/suffix window used until (or when) the context builder is unavailable."""

    def __init__(self, settings: Settings, budget: int = CPU_AUTO_BUDGET) -> None:
        self.settings = settings
        self.budget = budget

    def update_document(self, path: str, text: str, version: int, edits: Any = None) -> None:
        pass

    def close_document(self, path: str) -> None:
        pass

    def blocked(self, path: str) -> bool:
        p = PurePath(path)
        return any(p.match(g) or fnmatch.fnmatch(path, g) for g in self.settings.exclude)

    def fim(self, req: FimRequest) -> FimPrompt | None:
        if self.blocked(req.path):
            return None
        chars = self.budget * 3  # ~3 characters per token
        pre = req.text[max(0, req.offset - int(chars * 0.75)) : req.offset]
        suf = req.text[req.offset : req.offset + int(chars * 0.25)]
        diffs = tuple(h.diff for h in req.history)
        return FimPrompt(pre, suf, path=_rel(req.path), history=diffs)

    def edit(self, req: EditRequest) -> EditBuilt | None:
        if self.blocked(req.path):
            return None
        text, off = req.text, req.offset
        line = text.count("\n", 0, off)
        lines = text.split("\n")
        lo = max(0, line - self.settings.edit_lines_before)
        hi = min(len(lines), line + self.settings.edit_lines_after + 1)
        start = sum(len(ln) + 1 for ln in lines[:lo])
        end = min(len(text), sum(len(ln) + 1 for ln in lines[:hi]))
        chars = self.budget * 3
        prompt = EditPrompt(text[max(0, start - int(chars * 0.6)) : start], text[start:end],
                            text[end : end + int(chars * 0.3)], off - start, path=_rel(req.path),
                            history=tuple(h.diff for h in req.history))
        return EditBuilt(prompt, start, end)


class BuilderContext:
    """Adapter over ``edit_server.context.ContextBuilder`` (syntax-aware windows, sources, exclusions).

    Returns None when the builder blocks the file (excluded / secret): no model call then.
    """

    def __init__(self, builder: Any, settings: Settings, budget: int) -> None:
        self.builder = builder
        self.settings = settings
        self.budget = budget

    def update_document(self, path: str, text: str, version: int, edits: Any = None) -> None:
        self.builder.update_document(path, text, version)

    def close_document(self, path: str) -> None:
        self.builder.close_document(path)

    def fim(self, req: FimRequest) -> FimPrompt | None:
        self.update_document(req.path, req.text, req.version)
        b = self.builder.build_fim(req.path, req.text, req.offset, req.history,
                                   budget=self.budget)
        return None if b.report.blocked else b.prompt

    def edit(self, req: EditRequest) -> EditBuilt | None:
        self.update_document(req.path, req.text, req.version)
        b = self.builder.build_edit(req.path, req.text, req.offset, req.history,
                                    budget=self.budget)
        if b.report.blocked:
            return None
        return EditBuilt(b.prompt, b.region_start, b.region_end)


def make_context(settings: Settings, roots: list[Path], eng: Any) -> SimpleContext | BuilderContext:
    """The context builder (syntax-aware, exact token budget), else the simple window."""
    budget = auto_budget(settings, eng)
    tokenizer = getattr(eng, "tokenizer", None)
    try:
        from edit_server.context import ContextBuilder, ContextOptions
    except ImportError:
        return SimpleContext(settings, budget)
    try:
        opts = ContextOptions(exclude=tuple(settings.exclude), model_context=budget)
        return BuilderContext(ContextBuilder(roots, tokenizer, opts), settings, budget)
    except Exception:  # a broken builder must not take the server down
        log.exception("context builder unavailable; using the simple window")
        return SimpleContext(settings, budget)


def _rel(path: str) -> str:
    return Path(path).name if path else "untitled"


def fim_result(req: FimRequest, prompt: FimPrompt, text: str, confidences: list[float],
               settings: Settings) -> Suggestion | None:
    single = is_single_line(req)
    line_end = req.text.find("\n", req.offset)
    cleaned = gate.clean_fim(text, req.text[: req.offset], req.text[req.offset :]
                             if line_end >= 0 else req.text[req.offset :], single)
    d = gate.decide(cleaned, confidences, settings.gate.enabled, gate_threshold(settings, "fim"))
    if not cleaned:
        return None
    return Suggestion(new_id(), "fim", cleaned, req.offset, req.offset, d.score, d.show, d.reason)


def diff_edits(old: str, new: str, base: int) -> list[TextEdit]:
    """Minimal edits turning ``old`` into ``new`` (line hunks, refined to characters), at ``base``."""
    if old == new:
        return []
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    starts = [0]
    for ln in a:
        starts.append(starts[-1] + len(ln))
    edits: list[TextEdit] = []
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        s, e = starts[i1], starts[i2]
        o, n = old[s:e], "".join(b[j1:j2])
        # refine to the changed characters inside the hunk
        p = 0
        while p < min(len(o), len(n)) and o[p] == n[p]:
            p += 1
        q = 0
        while q < min(len(o), len(n)) - p and o[len(o) - 1 - q] == n[len(n) - 1 - q]:
            q += 1
        edits.append(TextEdit(base + s + p, base + e - q, n[p : len(n) - q]))
    return edits


def edit_result(req: EditRequest, built: EditBuilt, new_region: str, confidences: list[float],
                settings: Settings) -> tuple[Suggestion | None, list[TextEdit]]:
    old_region = req.text[built.region_start : built.region_end]
    new_region = gate.clean_edit(old_region, new_region)
    edits = diff_edits(old_region, new_region, built.region_start)
    if not edits:
        return None, []
    d = gate.decide(new_region, confidences, settings.gate.enabled, gate_threshold(settings, "edit"))
    sug = Suggestion(new_id(), "edit", new_region, built.region_start, built.region_end, d.score, d.show,
                     d.reason)
    return sug, edits
