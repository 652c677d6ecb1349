"""Plain request / suggestion types shared by the pipeline and every front end (no LSP, no HTTP)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from edit_server.context.options import EditBuilt
from edit_server.core.history import Hunk
from engine.templates import FimPrompt


@dataclass
class FimRequest:
    uri: str
    path: str
    text: str
    version: int
    offset: int
    invoked: bool = True
    history: list[Hunk] = field(default_factory=list)
    # an editor's cursor (LSP); False: a prompt an API client built itself, whose own stops and token limit
    # say how far it runs (no "finish the typed line" rule: `select.is_single_line`)
    from_editor: bool = True


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
    prompt_tokens: int = 0  # usage, for front ends that report it (HTTP)
    completion_tokens: int = 0
    finish_reason: str = "stop"  # the engine's: end | length | newline (…) — "length" = cut at max tokens
    threshold: float | None = None  # the show threshold the gate held its score against (None: no gate)
    origin: str = "model"  # a next edit's source: "model", "sampled", or a rule's (`nextedit.rules.RULES`)
    jump: bool = False  # a next edit outside the editable region: the editor offers it as a place to go


@dataclass(frozen=True)
class TextEdit:
    start: int  # offsets into the request's document text
    end: int
    text: str


Built = FimPrompt | EditBuilt


@dataclass
class InlineAnswer:
    """An inline completion and the document state its offsets refer to (re-based when the user typed on)."""

    suggestion: Suggestion
    text: str
    version: int


@dataclass
class EditAnswer:
    suggestion: Suggestion
    edits: list[TextEdit]
    text: str  # the document the edits apply to (the request's, or another open one's for a jump there)
    version: int
    uri: str = ""  # that document ("": the request's)


def new_id() -> str:
    return uuid.uuid4().hex[:12]
