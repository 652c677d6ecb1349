"""Next-edit cases from real histories, replayed the way training sees them (`engine/git_history.py`).

A session (one file's hunks over one or a few consecutive commits, top to bottom) is replayed up to hunk
``k``: the file is the text the first ``k`` hunks left, the history the last of those hunks (the runner
replays them as ``didChange``s), the cursor where hunk ``k`` left it. The truth is what is pending in the
lines around the cursor (``above`` lines above it, ``below`` below — about the server's editable region):

* **next-edit**: a pending hunk touches those lines: the truth is that window with every pending hunk in
  it applied (one edit; exact = the file after the suggestion equals the file after the truth);
* **elsewhere**: hunks are pending, none near the cursor: the right answer is silence;
* **done**: the session's last hunk was just typed: nothing is left, silence again.

Every case also names the hunks still pending anywhere in the file (``meta.pending``: current-text offsets
and new text): a suggestion outside the editable region (a jump target) is judged against those.

Whole repositories are the unit of the held-out split (the training config names the others).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from engine.git_history import ExtractReport, GitSession, extract_source, states_of
from engine.git_replay import cursor_after, near_ks, pending_hunks, pending_in_region
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff
from evals.cases import Case, Cursor, Edit, language_of
from evals.workspace import repo_name

CATEGORIES = ("next-edit", "elsewhere", "done")
MAX_PENDING = 20  # pending hunks kept in a case's meta (where a jump elsewhere in the file is judged)


@dataclass
class SessionReplayOptions:
    cases: int = 60  # per repository
    seed: int = 0
    shares: tuple[float, float, float] = (0.5, 0.25, 0.25)  # next-edit, elsewhere, done
    above: int = EDIT_REGION_ABOVE  # the truth: every pending hunk in these lines around the cursor's
    below: int = EDIT_REGION_BELOW
    history: int = 5  # hunks replayed before the request
    max_file_chars: int = 100_000


def session_case(s: GitSession, k: int, states: list[str], opts: SessionReplayOptions) -> Case:
    """The case after hunk ``k`` of ``s`` (its category from what is pending near the cursor)."""
    current, final = states[k], states[-1]
    cursor = cursor_after(current, s.steps[k - 1])
    wa, wb = line_span(current, cursor, opts.above, opts.below)
    ra, rb, new_region = pending_in_region(current, final, wa, wb)
    pending = new_region != current[ra:rb]
    category = "next-edit" if pending else "done" if k == len(s.steps) else "elsewhere"
    history = [d for d in (unified_diff(s.path, states[i], states[i + 1])
                           for i in range(max(0, k - opts.history), k)) if d]
    commit = s.commits[s.commit_of[k - 1]] if s.commit_of else s.commits[-1]
    still = [{"start": a, "end": b, "text": t} for a, b, t in pending_hunks(current, final)][:MAX_PENDING]
    return Case(id=f"{s.repo}:{s.commits[0][:10]}:{s.path}:{k}", kind="edit", language=language_of(s.path),
                path=s.path, files={s.path: current}, cursor=Cursor(s.path, cursor),
                expected=[Edit(s.path, ra, rb, new_region)] if pending else None, history=history,
                meta={"repo": s.repo, "commit": commit, "category": category, "k": k, "steps": len(s.steps),
                      "pending": still})


def session_cases(src: Path, opts: SessionReplayOptions, report: ExtractReport | None = None) -> list[Case]:
    """``opts.cases`` cases from one repository (directory or bundle): sessions drawn at random (one case
    each), categories filled to ``opts.shares``."""
    sessions = extract_source(src, report, trim=False)
    rng = random.Random(f"{opts.seed}:{repo_name(src)}")
    want = [round(opts.cases * x) for x in opts.shares]
    want[0] += opts.cases - sum(want)
    need = dict(zip(CATEGORIES, want, strict=True))
    order = list(range(len(sessions)))
    rng.shuffle(order)
    out: list[Case] = []
    for i in order:
        if not any(need.values()):
            break
        s = sessions[i]
        if len(s.base) > opts.max_file_chars or not s.steps:
            continue
        states = states_of(s)
        near = near_ks(s, states, opts.above, opts.below)
        far = [k for k in range(1, len(s.steps)) if k not in near]
        tries = [k for cat, ks in (("next-edit", near), ("elsewhere", far), ("done", [len(s.steps)]))
                 if need[cat] and ks for k in [rng.choice(ks)]]
        rng.shuffle(tries)
        for k in tries:
            case = session_case(s, k, states, opts)
            cat = str(case.meta["category"])
            if need[cat]:
                need[cat] -= 1
                out.append(case)
                break
    return out
