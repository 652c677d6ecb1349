"""Context builder options, build reports, and the check of workspace roots (fail closed)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edit_server.context import sources as src
from edit_server.context.budget import EDIT_SHARES, Shares
from engine.templates import DEFAULT_FIM_LAYOUT, EditPrompt, FimPrompt

if TYPE_CHECKING:
    from edit_server.core.settings import Settings


# the options that come from the settings struct (core/settings.py ``Settings``) and nowhere else
SETTINGS_FIELDS = ("budget", "exclude", "max_line_chars", "max_doc_chars", "max_history", "edit_region",
                   "current_only")


@dataclass(frozen=True, kw_only=True)
class ContextOptions:
    """The builder's options. Those the user sets (``SETTINGS_FIELDS``) have no default here: build the
    options with :meth:`from_settings`, as the server, ``edit-server context`` and ``bench context`` do;
    the rest are the builder's own tuning."""

    budget: int  # total prompt tokens when a build names none (the server's: serving/contexts.auto_budget)
    exclude: tuple[str, ...]  # exclude globs besides .gitignore and the built-in ones (settings ``exclude``)
    max_line_chars: int | None  # longer lines are cut in every prompt section ("…") (``limits.maxLineChars``)
    max_doc_chars: int  # larger documents: no parse, no context (``limits.maxDocumentChars``)
    max_history: int  # edit-history hunks in a prompt (``historySize``)
    edit_region: str  # a next edit's editable region: "lines" or "syntax" (``nextEdit.region``)
    shares: Shares = field(default_factory=Shares)  # a FIM prompt's
    edit_shares: Shares = EDIT_SHARES  # a next edit's: its history first (budget.EDIT_SHARES)
    prefix_ratio: float = 0.75  # of the window, before the cursor
    max_diff_chars: int = 6000
    max_definitions: int = 12
    region_min_lines: int = 4
    region_max_lines: int = 20
    index_workspace: bool = True
    git: bool = True
    layout: str = DEFAULT_FIM_LAYOUT  # the prompt order the model is trained on (engine.templates)
    current_only: bool = False  # only the current document (and its own history): no other file is read
    # (settings ``otherFiles`` false; a fallback builder's own mode)
    sticky_ttl_s: float = 60.0  # reuse a document's last FIM build while typing inside its window (0 = off)

    @classmethod
    def from_settings(cls, settings: Settings, budget: int, **tuning: Any) -> ContextOptions:
        """The options for ``settings`` (the one settings struct) and a prompt ``budget`` in tokens (the
        resolved one: ``contextBudget``, or its auto value for the engine); ``tuning``: the other fields."""
        return cls(budget=budget, exclude=tuple(settings.exclude), max_line_chars=settings.limits.max_line_chars,
                   max_doc_chars=settings.limits.max_document_chars, max_history=settings.history_size,
                   edit_region=settings.next_edit.region, current_only=not settings.other_files, **tuning)


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
    degraded: str | None = None  # the builder's degraded reason (ContextBuilder.degraded), if any
    failed: dict[str, str] = field(default_factory=dict)  # source -> error type (the source was dropped)
    sticky: bool = False  # the sections, history and window lines of the document's last build (typing)
    sticky_miss: str = ""  # why the document's last build was not reused ("" when it was, or for edits)
    quick: bool = False  # a quick prompt after a jump: the served head, a short window (context.quick)


@dataclass
class FimBuild:
    prompt: FimPrompt
    report: BuildReport


@dataclass
class EditBuilt:
    """An edit prompt and where its region sits in the request's document text; ``report``: the context
    builder's report (``ContextBuilder.build_edit`` sets it; ``None`` where no builder made the prompt, or
    once the pipeline keeps only prompt and region)."""

    prompt: EditPrompt
    region_start: int
    region_end: int
    report: BuildReport | None = None


def check_roots(roots: Sequence[str | os.PathLike[str]]) -> tuple[list[Path], list[str]]:
    """Usable workspace roots (absolute, existing directories, resolved) and one problem per root
    that is not (NUL or control characters, not absolute, missing, unresolvable)."""
    good: list[Path] = []
    problems: list[str] = []
    for r in roots:
        shown = repr(os.fspath(r))[:120]
        s = os.fspath(r)
        if not s or any(ord(c) < 32 or c == "\x7f" for c in s):
            problems.append(f"workspace folder {shown} has control characters")
            continue
        p = Path(s)
        if not p.is_absolute():
            problems.append(f"workspace folder {shown} is not an absolute path")
            continue
        try:
            real = p.resolve()
            ok = real.is_dir()
        except (OSError, RuntimeError, ValueError) as e:
            problems.append(f"workspace folder {shown} cannot be resolved ({type(e).__name__})")
            continue
        if not ok:
            problems.append(f"workspace folder {shown} is not a directory")
            continue
        if real not in good:
            good.append(real)
    return good, problems


def changed_roots(roots: list[Path], added: list[str], removed: list[str]) -> list[Path]:
    """``roots`` without the ``removed`` folders (matched as given or resolved: fail closed) and with the
    ``added`` ones (empty paths — URIs that are no file — are ignored)."""
    def forms(p: str | Path) -> set[str]:
        out = {os.path.normpath(p)}
        try:
            out.add(str(Path(p).resolve()))
        except (OSError, RuntimeError, ValueError):
            pass
        return out

    gone = set().union(*(forms(p) for p in removed if p))
    kept = [r for r in roots if not forms(r) & gone]
    for p in added:
        if p and not any(forms(p) & forms(r) for r in kept):
            kept.append(Path(p))
    return kept
