"""Engine output -> suggestion: the filters, the show/hide gate and the edit diff (pure functions)."""

from __future__ import annotations

import difflib
import re
from typing import Any

from edit_server.core.requests import EditBuilt, EditRequest, FimRequest, Suggestion, TextEdit, new_id
from edit_server.core.settings import Settings
from edit_server.selectivity import candidates, gate, kto_gate, syntax_check
from edit_server.selectivity.thresholds import gate_threshold
from engine.decode import lines_cut


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


def fim_result(req: FimRequest, text: str, confidences: list[float], settings: Settings,
               reward: Any = None, max_lines: int | None = None) -> Suggestion | None:
    """The FIM suggestion from the engine's text (filters, line cap, gate), or None."""
    one = is_single_line(req)
    cut = lines_cut(text, max_lines) if max_lines and not one else None
    if cut is not None:  # engines that do not stop at the cap themselves (remote, fakes)
        text = text[:cut]
    cleaned = gate.clean_fim(text, req.text[: req.offset], req.text[req.offset :], one)
    line_end = req.text.find("\n", req.offset)
    cleaned = without_line_rest(cleaned, req.text[req.offset : len(req.text) if line_end < 0 else line_end])
    if not cleaned:
        return None
    rule = syntax_check.introduced(req.path, req.text, [(req.offset, req.offset, cleaned)], fim=True) \
        if settings.gate.enabled else None
    d = kto_gate.decide("fim", cleaned, confidences, reward, enabled=settings.gate.enabled,
                        threshold=gate_threshold(settings, "fim"),
                        target_precision=settings.gate.kto_target_precision, rule=rule)
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
        p = 0  # refine to the changed characters inside the hunk
        while p < min(len(o), len(n)) and o[p] == n[p]:
            p += 1
        q = 0
        while q < min(len(o), len(n)) - p and o[len(o) - 1 - q] == n[len(n) - 1 - q]:
            q += 1
        edits.append(TextEdit(base + s + p, base + e - q, n[p : len(n) - q]))
    return edits


def edit_result(req: EditRequest, built: EditBuilt, new_region: str, confidences: list[float],
                settings: Settings, reward: Any = None) -> tuple[Suggestion | None, list[TextEdit]]:
    old_region = req.text[built.region_start : built.region_end]
    new_region = gate.clean_edit(old_region, new_region, req.text)
    edits = diff_edits(old_region, new_region, built.region_start)
    if not edits or candidates.reject_reason(req.text, req.offset, req.path, built.region_start, old_region,
                                             new_region, req.history):
        return None, []  # nothing, or a candidate never worth showing (retype, undo, just-left lines)
    rule = syntax_check.introduced(req.path, req.text, [(e.start, e.end, e.text) for e in edits], fim=False) \
        if settings.gate.enabled else None
    d = kto_gate.decide("edit", new_region, confidences, reward, enabled=settings.gate.enabled,
                        threshold=gate_threshold(settings, "edit"),
                        target_precision=settings.gate.kto_target_precision, rule=rule)
    sug = Suggestion(new_id(), "edit", new_region, built.region_start, built.region_end, d.score, d.show,
                     d.reason)
    return sug, edits
