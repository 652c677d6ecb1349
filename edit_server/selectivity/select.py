"""Output selection: engine output -> suggestion, one stage for both kinds (pure functions).

`select` takes an `Output` (what the engine wrote for a span of the document: the cursor for a FIM
completion, the editable region for a next edit) through cut -> clean -> diff (-> the candidate filter for
rewrites, `candidates`) -> syntax check -> decide:
the line cap (engines that do not stop there themselves), the gate's filters (`gate.clean_fim` /
`gate.clean_edit`), the edits against the document, the syntax errors they would introduce
(`syntax_check`), and the show/hide decision (`kto_gate.decide`: the implicit reward when there is one,
else the confidence score against the calibrated threshold). `fim_result` / `edit_result` state the two
kinds' requests as an `Output`. Before the engine runs, `skip_reason` says whether to ask at all, and
`rewrite_hidden` whether a next edit's model rewrite could be shown at all.

A next edit may have several candidates for one region (`Candidate`: the model's rewrite, sampled
alternatives, the model-free rules' — settings ``nextEdit.candidates``, ``nextEdit.repeatEdit`` /
``analogEdit`` / ``moveEdit`` / ``importEdit``): `pick`
takes each through the same stage and keeps the best — shown by the gate first, then without a syntax
error introduced, then the highest score (the first candidate on ties) — or none. The ranking is the same
with the gate off (the syntax check then only ranks), so a gate-off run shows the candidate the gate
would have decided on. A model rewrite whose every change the recent history made is gated as its own
kind, ``edit:echo`` (`echo_edit`), against its own threshold."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from edit_server.core.requests import EditBuilt, EditRequest, FimRequest, Suggestion, TextEdit, new_id
from edit_server.core.settings import Settings
from edit_server.selectivity import candidates, echo_edit, gate, kto_gate, syntax_check
from edit_server.selectivity.thresholds import MODEL_ORIGINS, gate_kind, gate_threshold, model_thresholds
from engine.decoding.stops import lines_cut
from engine.types import EngineInfo


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


def rewrite_hidden(settings: Settings, info: EngineInfo | None, aligned: bool) -> bool:
    """Whether a next edit's model rewrite could never be shown: the gate is on, no aligned adapter's
    reward decides (``aligned``: a reward scorer is loaded), and the show thresholds of the model's rewrites
    are infinite — the free ones' (``edit``) and those that echo the recent edits (``edit:echo``,
    `echo_edit`): the model's own ``show_thresholds`` (``info``: the engine's) or the user's calibration.
    Then the model is not asked: the rules' candidates (`nextedit.rules.RULES`) need only the region."""
    if not settings.gate.enabled or aligned:
        return False
    model = model_thresholds(info)
    return all(gate_threshold(settings, gate_kind("edit", origin), model) == float("inf")
               for origin in ("model", echo_edit.ORIGIN))


def is_single_line(req: FimRequest, multiline: str = "auto") -> bool:
    """One line (mid-line; and with ``multiline`` "auto" where no block is expected: `gate.block_expected`)
    or several (``multiline`` "never": always one). With "auto" an invoked request on a blank line may run
    over several lines (the user asked for code there); one at the end of a line the user is typing
    finishes that line, unless it opens a block — as an automatic trigger does, so what the user gets there
    does not hang on how much of a run-on the device had time to decode (docs/QUALITY.md). An
    API client's own prompt (not ``from_editor``) runs on as an invoked request always did."""
    line_start = req.text.rfind("\n", 0, req.offset) + 1
    line_end = req.text.find("\n", req.offset)
    if multiline == "never" or gate.single_line_mode(req.text[req.offset : len(req.text) if line_end < 0 else line_end]):
        return True
    typed = req.from_editor and bool(req.text[line_start:req.offset].strip())
    if multiline == "always" or (req.invoked and not typed):
        return False
    return not gate.block_expected(req.text[: req.offset], req.text[req.offset :])


def without_line_rest(suggestion: str, line_rest: str) -> str:
    """A one-line suggestion that ends by re-typing the rest of the cursor's line (``a + b, 1)`` before
    ``, 1)``) without that rest: a FIM suggestion is an insertion at the cursor (front ends show it with
    the rest of the line after it). Only when the rest has a word character: ``foo()`` before ``)`` may
    close a call of its own."""
    rest = line_rest.strip()
    if "\n" in suggestion or not re.search(r"\w", rest):
        return suggestion
    body = suggestion.rstrip()
    if len(body) > len(rest) and body.endswith(rest):
        body = body[: -len(rest)]
        return body if body.strip() else ""
    return suggestion


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
        p = 0  # refine to the changed characters inside the hunk
        while p < min(len(o), len(n)) and o[p] == n[p]:
            p += 1
        q = 0
        while q < min(len(o), len(n)) - p and o[len(o) - 1 - q] == n[len(n) - 1 - q]:
            q += 1
        edits.append(TextEdit(base + s + p, base + e - q, n[p : len(n) - q]))
    return edits


@dataclass(frozen=True)
class Output:
    """What the engine wrote (``new``, its per-token ``confidences``, the aligned model's ``reward``) for
    ``document[start:end]`` (FIM: the cursor, ``start == end``; edit: the editable region)."""

    kind: Literal["fim", "edit"]
    path: str
    document: str
    start: int
    end: int
    new: str
    confidences: list[float]
    reward: Any = None
    single_line: bool = False  # FIM: a single-line completion
    max_lines: int | None = None  # FIM: the line cap of a multi-line one
    cursor: int = 0  # edit: the cursor's offset in the document
    history: Any = ()  # edit: the document's recent hunks (`candidates.reject_reason`)
    origin: str = "model"  # who wrote ``new``: the model ("model", "sampled") or a rule ("repeat")


def cut(o: Output) -> str:
    """The line cap, for engines that do not stop at it themselves (remote, fakes)."""
    c = lines_cut(o.new, o.max_lines) if o.kind == "fim" and o.max_lines and not o.single_line else None
    return o.new if c is None else o.new[:c]


def clean(o: Output, new: str) -> str:
    """The gate's filters: FIM trims what the document already holds around the cursor; an edit whose
    region fell into a loop keeps the old region."""
    doc = o.document
    if o.kind == "edit":
        return gate.clean_edit(doc[o.start:o.end], new, doc)
    cleaned = gate.clean_fim(new, doc[:o.start], doc[o.start:], o.single_line, o.path)
    line_end = doc.find("\n", o.start)
    return without_line_rest(cleaned, doc[o.start:len(doc) if line_end < 0 else line_end])


def diff(o: Output, new: str) -> list[TextEdit]:
    """The edits ``new`` makes to the document (FIM: one insertion at the cursor, none when empty)."""
    if o.kind == "fim":
        return [TextEdit(o.start, o.start, new)] if new else []
    return diff_edits(o.document[o.start:o.end], new, o.start)


def _select(o: Output, settings: Settings, model: Mapping[str, float] | None = None, rank: bool = False
            ) -> tuple[Suggestion | None, list[TextEdit], str | None]:
    """`select`, and the syntax rule's verdict (checked when the gate is on, or to ``rank``)."""
    new = clean(o, cut(o))
    edits = diff(o, new)
    if not edits or o.kind == "edit" and candidates.reject_reason(
            o.document, o.cursor, o.path, o.start, o.document[o.start:o.end], new, o.history):
        return None, [], None  # nothing, or a rewrite never worth showing (re-typed, an undo, lines just left)
    enabled = settings.gate.enabled
    rule = syntax_check.introduced(o.path, o.document, [(e.start, e.end, e.text) for e in edits],
                                   fim=o.kind == "fim") if enabled or rank else None
    origin = o.origin  # the model's rewrite that carries on the user's recent edits is gated apart
    if o.kind == "edit" and origin in MODEL_ORIGINS and echo_edit.echoes(o.document[o.start:o.end], new, o.history):
        origin = echo_edit.ORIGIN
    threshold = gate_threshold(settings, gate_kind(o.kind, origin), model)
    d = kto_gate.decide(o.kind, new, o.confidences, o.reward, enabled=enabled, threshold=threshold,
                        target_precision=settings.gate.kto_target_precision, rule=rule if enabled else None)
    return Suggestion(new_id(), o.kind, new, o.start, o.end, d.score, d.show, d.reason,
                      threshold=threshold if enabled else None, origin=origin), edits, rule


def select(o: Output, settings: Settings, model: Mapping[str, float] | None = None
           ) -> tuple[Suggestion | None, list[TextEdit]]:
    """The suggestion (shown or hidden, with the reason) and its edits; (None, []) when nothing changes.
    ``model``: the model's own show thresholds (`thresholds.model_thresholds`)."""
    sug, edits, _ = _select(o, settings, model)
    return sug, edits


def pick(outputs: Sequence[Output], settings: Settings, model: Mapping[str, float] | None = None
         ) -> tuple[int, Suggestion | None, list[TextEdit]]:
    """The best of several outputs for one span (its index, suggestion and edits): each through `select`,
    ranked shown first, then no syntax error introduced, then score; ``(-1, None, [])`` when none is left."""
    if len(outputs) == 1:
        sug, edits = select(outputs[0], settings, model)
        return (0 if sug is not None else -1), sug, edits
    best: tuple[tuple[bool, bool, float], int, Suggestion, list[TextEdit]] | None = None
    for i, o in enumerate(outputs):
        sug, edits, rule = _select(o, settings, model, rank=True)
        if sug is None:
            continue
        key = (sug.show, rule is None, sug.score)
        if best is None or key > best[0]:
            best = (key, i, sug, edits)
    return (-1, None, []) if best is None else best[1:]  # type: ignore[return-value]


def fim_result(req: FimRequest, text: str, confidences: list[float], settings: Settings,
               reward: Any = None, max_lines: int | None = None,
               model: Mapping[str, float] | None = None) -> Suggestion | None:
    """The FIM suggestion from the engine's text, or None."""
    return select(Output("fim", req.path, req.text, req.offset, req.offset, text, confidences, reward,
                         is_single_line(req, settings.multiline), max_lines), settings, model)[0]


@dataclass(frozen=True)
class Candidate:
    """One rewrite of a next edit's region: the model's (``origin`` "model", or "sampled" for an
    alternative; its confidences and reward) or a model-free candidate's (`edit_server.nextedit`: a rule's —
    "repeat", "analog", "move", "import" — or a carried edit, "carry"; scored by the location model)."""

    new: str
    confidences: list[float]
    reward: Any = None
    origin: str = "model"
    span: tuple[int, int] | None = None  # the lines it rewrites when not the region (a jump target)


def edit_result(req: EditRequest, built: EditBuilt, new_region: str, confidences: list[float],
                settings: Settings, reward: Any = None, model: Mapping[str, float] | None = None
                ) -> tuple[Suggestion | None, list[TextEdit]]:
    """The next edit from the engine's new region, and its edits."""
    return edit_results(req, built, [Candidate(new_region, confidences, reward)], settings, model)[1:]


def edit_results(req: EditRequest, built: EditBuilt, cands: Sequence[Candidate], settings: Settings,
                 model: Mapping[str, float] | None = None) -> tuple[int, Suggestion | None, list[TextEdit]]:
    """The next edit `pick` makes of the candidates for the region (the index of the one taken, -1 when
    none), and its edits. ``model``: the model's own show thresholds (`thresholds.model_thresholds`)."""
    return pick([Output("edit", req.path, req.text, *(c.span or (built.region_start, built.region_end)), c.new,
                        c.confidences, c.reward, cursor=req.offset, history=req.history, origin=c.origin)
                 for c in cands], settings, model)

