"""What the engine worker thread is asked and answers: a suggestion :class:`Job` and its :class:`Outcome`, and
the commands queued in order with the jobs (load a model, new settings, a document closed, the engine's cache
forgotten, new workspace folders, files changed on disk, a settle barrier, where the cursor rests, stop)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_server.core.requests import Built, EditRequest, FimRequest
from edit_server.core.settings import Settings
from engine.api import EngineAPI
from engine.types import AbortSignal, GenerateResult, StepCallback

StatusFn = Callable[[str, str], None]  # (state: loading|ready|busy|degraded|error, message)
ProgressFn = Callable[[int, int, str], None]  # (done bytes, total bytes, message) while a model downloads


@dataclass
class Job:
    """One suggestion request. ``built`` = a prompt the client already built (HTTP front end): the
    context builder is skipped."""

    key: str  # document URI (supersede / prefix-cache key)
    req: FimRequest | EditRequest
    settings: Settings
    built: Built | None = None
    abort: AbortSignal = field(default_factory=AbortSignal)
    future: Future = field(default_factory=Future)
    queued_at: float = field(default_factory=time.monotonic)
    on_step: StepCallback | None = None  # per denoising step, on the worker thread (HTTP "diffusing")
    single_line: bool | None = None  # FIM: the caller's one-line decision (None: from the document)
    gated: bool = True  # False: the caller decides what to show (the engine route): the model always runs

    @property
    def kind(self) -> str:
        return "fim" if isinstance(self.req, FimRequest) else "edit"


@dataclass(frozen=True)
class Load:
    spec: str
    device: str
    settings: Settings
    engine: EngineAPI | None = None  # already loaded (embedding, tests): used instead of loading spec


@dataclass(frozen=True)
class Configure:
    settings: Settings


@dataclass(frozen=True)
class CloseDocument:
    path: str
    key: str = ""  # the document's engine cache key (its URI)


@dataclass(frozen=True)
class Forget:
    """Drop the engine's cached prompt state of every document (``clearHistory``)."""


@dataclass(frozen=True)
class SetRoots:
    roots: tuple[Path, ...]
    removed: tuple[Path, ...] = ()


@dataclass(frozen=True)
class FilesChanged:
    changes: tuple[tuple[str, bool], ...]  # (path, deleted)


@dataclass(frozen=True)
class Settle:
    """Answered (True: done in time) once everything queued before it ran and the context builder's
    background work — indexing a workspace folder — is done."""
    done: Future
    timeout: float


@dataclass(frozen=True)
class Rest:
    """The cursor rests at ``req.offset``: prefill the completion prompt there while nothing else runs
    (`edit_server.serving.ahead`)."""
    key: str  # the document's engine cache key (its URI)
    req: FimRequest


@dataclass(frozen=True)
class Stop:
    pass


Message = Job | Load | Configure | CloseDocument | Forget | SetRoots | FilesChanged | Settle | Rest | Stop


@dataclass
class Outcome:
    """What the worker hands back: the prompt/region used and the engine result."""

    built: Built
    result: GenerateResult
    batch: int = 1
    reward: Any = None  # engine.reward.Reward of the KTO-aligned model, when one is loaded
    # a next edit's sampled alternatives (setting nextEdit.candidates > 1): (result, reward) each
    alternatives: list[tuple[GenerateResult, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.result.text

    @property
    def confidences(self) -> list[float]:
        return list(self.result.confidences)
