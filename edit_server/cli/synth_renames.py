"""Rename sessions made from real files: the next edits a user expects after renaming a local name, which
commit histories hardly show (a commit's rename is one hunk, its uses already done).

From each case's file (the training repositories' replay cases, `edit-server eval replay --build-only`),
a function-local name with uses in its function is renamed, as a user would, in one place:

* **at its declaration** (``resp, err := …`` → ``res, err := …``): the truth renames its uses in the
  editable region (`engine.templates` region, as the replays' truth);
* **at a use** (the tail ``Ok(config)`` → ``Ok(settings)``): the truth renames the declaration it
  referred to and its other uses in the region;
* **everywhere in its function at once** where another function binds the same name: nothing is due
  (the other function's name is its own), the quiet case a rule's repeat across scopes gets wrong.

The new name is another identifier of the same repository's files that this file does not use, in the
old name's style. Uses are found by the document's bindings (`edit_server.nextedit.bindings`), in code
only (not in strings or comments). Each case keeps its source case's repository (``meta.repo``) so that a
fit's folds stay whole repositories; ``meta.synthetic`` names the kind.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from edit_server.nextedit import bindings as binding
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff

Case = dict[str, Any]  # a case as `evals.next_edit.read_cases` reads it
KINDS = ("declaration", "use", "done")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,24}")
_KEYWORDS = frozenset("self cls this super None True False nil null undefined true false return async await "
                      "def class fn func let mut const var type impl struct enum pub use mod match".split())


def _style(name: str) -> str:
    return "upper" if name.isupper() else "camel" if name[:1].isupper() else "lower"


def _uses(binds: binding.Bindings, name: str, site: binding.Binding) -> list[tuple[int, int]]:
    """Where ``name`` is used referring to ``site`` (the innermost binding visible there)."""
    out = []
    for r, c in binds.refs(name):
        vis = binds.visible(name, r, c)
        if vis and max(vis, key=lambda v: (v.scope[0], v.start)) == site:
            out.append((r, c))
    return out


def _rename_at(text: str, places: Sequence[tuple[int, int]], old: str, new: str) -> str:
    lines = text.split("\n")
    for r, c in sorted(places, reverse=True):
        if lines[r][c:c + len(old)] == old:
            lines[r] = lines[r][:c] + new + lines[r][c + len(old):]
    return "\n".join(lines)


def _case(src: Case, kind: str, before: str, after: str, truth: Sequence[tuple[int, int]], at: tuple[int, int],
          old: str, new: str) -> Case | None:
    """The case: ``after`` is the file once the user's edit is made (cursor after ``new`` at ``at``), the
    truth the rest of the rename inside the region (``truth``: the places still saying ``old``)."""
    path = src["path"]
    lines = after.split("\n")
    row, col = at
    cursor = sum(len(x) + 1 for x in lines[:row]) + col + len(new)
    ra, rb = line_span(after, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    r0, r1 = after.count("\n", 0, ra), after.count("\n", 0, rb)
    inside = [(r, c) for r, c in truth if r0 <= r < max(r1, r0 + 1)]
    expected = None
    if kind != "done":
        if not inside:
            return None
        done = _rename_at(after, inside, old, new)
        expected = [{"path": path, "start": ra, "end": rb, "text": done[ra:len(done) - (len(after) - rb)]}]
    meta = {"repo": src["meta"].get("repo", ""), "category": "next-edit" if expected else "done",
            "synthetic": f"rename-{kind}", "source": src["id"], "pending": []}
    return {"id": f"{src['id']}:rename-{kind}:{old}", "kind": "edit", "language": src.get("language", ""),
            "path": path, "files": {path: after}, "cursor": {"path": path, "offset": cursor},
            "expected": expected, "history": [unified_diff(path, before, after)], "meta": meta}


def from_case(src: Case, rng: random.Random, names: Sequence[str]) -> list[Case]:
    """One rename session of each kind this case's file allows."""
    path = src["path"]
    text = src["files"].get(path, "")
    binds = binding.of(text, path) if text else None
    if binds is None:
        return []
    words = set(re.findall(r"\w+", text))
    out: list[Case] = []
    sites = [(n, s) for n in binds.names() for s in binds.sites(n)
             if s.scope != binding.MODULE and _NAME.fullmatch(n) and n not in _KEYWORDS]
    rng.shuffle(sites)
    want = list(KINDS)
    for old, site in sites:
        if not want:
            break
        uses = [u for u in _uses(binds, old, site) if u[0] != site.row]
        if not uses:
            continue
        pool = [m for m in names if _style(m) == _style(old) and m not in words and m != old]
        if not pool:
            continue
        new = rng.choice(pool)
        kind = want[0]
        decl = (site.row, site.col)
        if kind == "declaration":
            after = _rename_at(text, [decl], old, new)
            case = _case(src, kind, text, after, uses, decl, old, new)
        elif kind == "use":
            last = uses[-1]
            if sum(r == last[0] for r, _ in uses) > 1:
                continue
            after = _rename_at(text, [last], old, new)
            case = _case(src, kind, text, after, [decl, *uses[:-1]], last, old, new)
        else:
            if not [s for s in binds.sites(old) if s.scope != site.scope]:
                continue
            after = _rename_at(text, [decl, *uses], old, new)
            r, c = uses[-1]
            shift = sum(1 for q, d in [decl, *uses] if q == r and d < c) * (len(new) - len(old))
            case = _case(src, kind, text, after, [], (r, c + shift), old, new)
        if case is not None:
            out.append(case)
            want.remove(kind)
    return out


def synthesize(cases: Sequence[Case], n: int, seed: int = 0) -> list[Case]:
    """Up to ``n`` rename sessions from ``cases``' files (a file at most once; kinds in turn)."""
    rng = random.Random(seed)
    by_repo: dict[str, set[str]] = {}
    for c in cases:
        for t in c["files"].values():
            by_repo.setdefault(str(c["meta"].get("repo", "")), set()).update(_NAME.findall(t))
    order = list(cases)
    rng.shuffle(order)
    seen: set[tuple[str, str]] = set()
    out: list[Case] = []
    for c in order:
        if len(out) >= n:
            break
        key = (str(c["meta"].get("repo", "")), c["path"])
        if key in seen or c["meta"].get("synthetic"):
            continue
        seen.add(key)
        names = sorted(by_repo.get(key[0], set()) - _KEYWORDS)
        out.extend(from_case(c, rng, names)[: n - len(out)])
    return out


def summary(cases: Sequence[Case]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for c in cases:
        k = str(c["meta"].get("synthetic"))
        kinds[k] = kinds.get(k, 0) + 1
    return {"cases": len(cases), "kinds": kinds}
