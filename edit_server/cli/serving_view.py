"""The serving rules' view of a gate-off run: the syntax rule and the candidate filter on its own suggestions,
plugged into evals/ by the `edit-server eval` command (`view`, `evals.runners.set_serving_view`).

What the server's candidate filter (`edit_server/selectivity/candidates.py`) makes of a suggestion, from
the case alone: the case's history replayed through the server's own edit history (`EditHistory`, one hunk
per edit as the runner has the server record them: ``historyPauseMs`` 0), the suggestion taken as a rewrite
of the whole file. Lets a run without the filter report the filter's effect on the very same suggestions."""

from __future__ import annotations

import argparse
from typing import Any

from edit_server.core.documents import EditEvent
from edit_server.core.history import EditHistory
from edit_server.selectivity.candidates import reject_reason
from engine.textdiff import changed_span
from evals.cases import Case, Edit, apply_edits, history_states


def _event(path: str, old: str, new: str) -> EditEvent:
    p, e_old, e_new = changed_span(old, new)
    return EditEvent(path, p, e_old, old[p:e_old], new[p:e_new], 0.0, old, new)


def candidate_reason(case: Case, edits: list[Edit], history_size: int = 6, pause_s: float = 0.0) -> str | None:
    """Why the server's filter would drop this next-edit suggestion (None: kept, or not a next edit).
    ``pause_s``: the server's ``historyPauseMs`` (the runner's 0: one hunk per replayed edit; > 0: edits
    close to each other, sent back to back, are one hunk)."""
    mine = [e for e in edits if e.path == case.cursor.path]
    if case.kind != "edit" or not mine:
        return None
    hist = EditHistory(pause_s=pause_s)
    for path, chain in history_states(case).items():
        for old, new in zip(chain, chain[1:], strict=False):
            hist.record(_event(path, old, new))
    text = case.files[case.cursor.path]
    new_text = apply_edits(text, mine)
    return reject_reason(text, case.cursor.offset, case.cursor.path, 0, text, new_text,
                         hist.recent(history_size))


def syntax_error(case: Case, edits: list[Edit]) -> bool | None:
    """Whether the suggestion introduces a syntax error (the serving gate's rule, `syntax_check`), so a
    gate-off run also tells what the gate would have hidden (False also when there is no grammar)."""
    from edit_server.selectivity import syntax_check

    by_path = [e for e in edits if e.path == case.cursor.path]
    text = case.files.get(case.cursor.path, "")
    if not by_path:
        return None
    spans = sorted((e.start, e.end, e.text) for e in by_path)
    why = syntax_check.introduced(case.cursor.path, text, spans, fim=case.kind == "fim")
    return why is not None


def view(case: Case, edits: list[Edit]) -> dict[str, Any]:
    """Both rules' verdicts on one shown suggestion (what `evals.runners` records)."""
    return {"syntax_error": syntax_error(case, edits), "candidate": candidate_reason(case, edits)}


def register(sub: argparse._SubParsersAction) -> None:
    """``edit-server eval …``: evals' own commands, with the serving rules' view plugged in, and ``eval rules``
    (the rules themselves, `edit_server.cli.eval_rules`) and ``eval locate`` (the location model,
    `edit_server.cli.eval_locate`)."""
    from edit_server.cli import eval_locate, eval_rules
    from evals import cli
    from evals.runners import set_serving_view

    set_serving_view(view)
    commands = cli.register(sub)
    eval_rules.register(commands)
    eval_locate.register(commands)
