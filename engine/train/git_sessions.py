"""Training examples from git edit sessions (`engine/git_history.py`): replay a session up to a hunk, the
cursor where it left it; target = the editable region with every pending hunk in it applied, or unchanged
(a no-edit example). Sources: pre-extracted ``.jsonl.gz`` files (the GPU pack's), repositories, bundles."""

from __future__ import annotations

import random

from engine.git_history import (  # noqa: F401 - load_git_sources: the trainer's entry point, re-exported
    GitSession,
    load_git_sources,
    states_of,
)
from engine.git_replay import cursor_after, near_ks, pending_in_region
from engine.templates import EDIT_DIFF_CHARS, EDIT_HISTORY, EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span
from engine.tokens import TokenizerLike
from engine.train.tasks import Budget, Example

# of the session examples, the share whose region is exactly the server's (``nextEdit.region`` "lines": all of
# EDIT_REGION_ABOVE / _BELOW); the rest draw smaller ones. Drawn uniformly, the server's shape would be one
# draw of 6 × 7, too rare to learn
SERVED_REGION_SHARE = 0.5


def session_example(tok: TokenizerLike, s: GitSession, rng: random.Random, budget: Budget,
                    k: int | None = None, reach_next: bool = False, layout: str | None = None) -> Example | None:
    """Apply the first ``k`` steps (history), cursor after the k-th; target = the region around the
    cursor with every pending step inside it applied (unchanged: a no-edit example). ``reach_next``: the
    region reaches the line where the next step starts."""
    from engine.textdiff import unified_diff
    from engine.train.tasks_edit import render_edit_example

    if not s.steps:
        return None
    states = states_of(s)
    k = k if k is not None else rng.randint(1, len(s.steps))
    current, final = states[k], states[-1]
    cursor = cursor_after(current, s.steps[k - 1])
    served = rng.random() < SERVED_REGION_SHARE
    ra, rb = line_span(current, cursor, *((EDIT_REGION_ABOVE, EDIT_REGION_BELOW) if served else
                                          (rng.randint(1, EDIT_REGION_ABOVE), rng.randint(2, EDIT_REGION_BELOW))))
    if reach_next and k < len(s.steps):
        nxt = s.steps[k][0]
        ra = min(ra, current.rfind("\n", 0, nxt) + 1)
        rb = max(rb, nxt + 1 if nxt < len(current) else nxt)
        nl = current.find("\n", rb - 1) if rb > 0 else -1
        rb = len(current) if nl < 0 else max(rb, nl + 1)
    ra, rb, new_region = pending_in_region(current, final, ra, rb)
    first = max(0, k - EDIT_HISTORY)  # the last EDIT_HISTORY steps, as the server shows them
    history = tuple(d[:EDIT_DIFF_CHARS] for d in (unified_diff(s.path, x, y) for x, y in
                                                  zip(states[first:k], states[first + 1:k + 1], strict=True)) if d)
    label = "git" if new_region != current[ra:rb] else "noedit:git"
    return render_edit_example(tok, current, ra, rb, new_region, cursor - ra, s.path, history, budget, rng, label,
                               layout)


def git_example(tok: TokenizerLike, s: GitSession, rng: random.Random, budget: Budget,
                noedit_share: float | None = None, layout: str | None = None) -> Example | None:
    """A session example: with probability 1 - ``noedit_share`` (default: the budget's ``git_noedit_share``)
    after a hunk whose next one is near the cursor, else after any hunk (after most hunks the next one is
    elsewhere: a no-edit region)."""
    k = None
    if rng.random() >= (budget.git_noedit_share if noedit_share is None else noedit_share):
        ks = near_ks(s)
        if not ks:
            return None  # the caller draws another session
        k = rng.choice(ks)
    return session_example(tok, s, rng, budget, k=k, reach_next=k is not None, layout=layout)
