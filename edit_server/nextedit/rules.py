"""The model-free next-edit rules, one typed interface: each proposes a rewrite of the editable region from
the document and its recent edits (`Rule`), with a fixed prior score for when no location model scores it.

* ``repeat`` (`repeat_edit`): the last in-line substitution repeated at its other occurrences;
* ``analog`` (`analog_edit`): the last edit's token changes carried to the region's look-alike lines;
* ``move`` (`move_edit`): the other copy of just-pasted lines deleted;
* ``import`` (`import_edit`): a name a new import binds taken out of the old import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.nextedit import analog_edit, import_edit, move_edit, repeat_edit
from edit_server.selectivity.candidates import HunkLike
from edit_server.selectivity.select import Candidate


class Rule(Protocol):
    """What a rule module is: its fixed score and its candidate for ``text[start:end]``."""

    SCORE: float

    def candidate(self, text: str, start: int, end: int, path: str, history: Sequence[HunkLike]) -> str | None: ...


RULES: dict[str, Rule] = {"repeat": repeat_edit, "analog": analog_edit, "move": move_edit,  # type: ignore[dict-item]
                          "import": import_edit}


def rule_candidate(origin: str, req: EditRequest, built: EditBuilt) -> Candidate | None:
    """A model-free rule's candidate for the region (``origin``: a key of `RULES`), or None."""
    rule = RULES[origin]
    new = rule.candidate(req.text, built.region_start, built.region_end, req.path, req.history)
    return None if new is None else Candidate(new, [rule.SCORE], None, origin)
