"""A next edit's candidates as the server offers them: the rules' region rewrites and the carried edits
(`propose`), each scored by the location model (`locator`) — the one scale they are shown or hidden on.

`located` is what the pipeline and ``edit-server eval rules`` both call, so the offline judge serves what
the server serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.core.settings import Settings
from edit_server.nextedit import locator as locating
from edit_server.nextedit.propose import COMPLETE, ORIGIN, Proposal, propose
from edit_server.nextedit.rules import rule_candidate
from edit_server.selectivity.select import Candidate


def proposals(req: EditRequest, built: EditBuilt, rules: Sequence[Candidate], carry: bool = True,
              jumps: bool = True) -> list[Proposal]:
    """The rules' candidates and (with ``carry``) the carried edits for the request, with their features."""
    props = propose(req.text, req.path, req.offset, built.region_start, built.region_end, req.history,
                    [(c.origin, c.new) for c in rules], jumps=jumps)
    return [p for p in props if carry or p.origin not in (ORIGIN, COMPLETE)]


def located(req: EditRequest, built: EditBuilt, rules: Sequence[Candidate], loc: locating.Locator,
            carry: bool = True, jumps: bool = True) -> list[Candidate]:
    """The candidates scored by ``loc``: each proposal's probability is its confidence (a jump names its
    own span)."""
    return [Candidate(p.new, [loc.probability(p.feats)], None, p.origin, span=(p.start, p.end) if p.jump else None)
            for p in proposals(req, built, rules, carry, jumps)]


log = logging.getLogger(__name__)


def load_locator(where: str = "") -> locating.Locator | None:
    """The location model the settings name ("": the shipped one); None (logged once per file) when it
    cannot be read, or with "off": the rules then keep their fixed scores and nothing is carried (fail
    closed)."""
    if where == "off":
        return None
    try:
        return locating.load(where or None)
    except ValueError as e:
        if where not in _WARNED:
            _WARNED.add(where)
            log.warning("next-edit location model not used: %s", e)
        return None


_WARNED: set[str] = set()


def rule_candidates(req: EditRequest, built: EditBuilt, settings: Settings) -> list[Candidate]:
    """The model-free candidates as the server offers them: the rules on in the settings and the carried
    edits, scored by the location model (without one: the rules' own candidates and fixed scores)."""
    nxt = settings.next_edit
    rules = [c for origin in nxt.rules() if (c := rule_candidate(origin, req, built)) is not None]
    loc = load_locator(nxt.locator)
    if loc is None:
        return rules
    return located(req, built, rules, loc, carry=nxt.carry_edit, jumps=nxt.jumps)


@dataclass(frozen=True)
class OpenDocument:
    """Another document the editor has open: where a carried edit may be due next."""

    uri: str
    path: str
    text: str
    version: int


@dataclass(frozen=True)
class Elsewhere:
    """A carried edit in another open document: ``doc.text[start:end]`` → ``new``, its probability."""

    doc: OpenDocument
    start: int
    end: int
    new: str
    probability: float


CARRY = ORIGIN  # a carried edit's origin (gate kind ``edit:carry``)
MAX_OTHER_CHARS = 400_000  # another document larger than this is not searched


def other_documents(req: EditRequest, docs: Iterable[OpenDocument], settings: Settings) -> Elsewhere | None:
    """The likeliest carried edit in another open document (its first place from the top), or None: what
    the server offers as a jump into that file when nothing in the cursor's document is worth showing."""
    nxt = settings.next_edit
    loc = load_locator(nxt.locator)
    if loc is None or not (nxt.carry_edit and nxt.jumps) or not req.history:
        return None
    best: Elsewhere | None = None
    for doc in docs:
        if doc.path == req.path or not doc.path or len(doc.text) > MAX_OTHER_CHARS:
            continue
        for p in propose(doc.text, doc.path, 0, 0, 0, req.history, region=False):
            q = loc.probability(p.feats)
            if best is None or q > best.probability:
                best = Elsewhere(doc, p.start, p.end, p.new, q)
    return best


def thresholds(settings: Settings) -> dict[str, float]:
    """The show thresholds of the kinds the location model scores ({} without one)."""
    loc = load_locator(settings.next_edit.locator)
    return loc.thresholds() if loc is not None else {}
