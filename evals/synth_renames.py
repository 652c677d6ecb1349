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

Case = dict[str, Any]  # a case as `evals.next_edit.read_cases` reads it

from edit_server.nextedit import bindings as binding
from edit_server.nextedit.carry import Change, carry
from edit_server.nextedit.repeat_edit import comment_marker, in_comment, in_string, occurrences
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff

KINDS = ("declaration", "use", "done")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,24}")
_KEYWORDS = frozenset("self cls this super None True False nil null undefined true false return async await "
                      "def class fn func let mut const var type impl struct enum pub use mod match".split())


def _code_hits(line: str, name: str, path: str) -> list[int]:
    marker = comment_marker(path)
    return [i for i in occurrences(line, name)
            if not (marker and in_comment(line, i, marker) or in_string(line, i))]


def _style(name: str) -> str:
    return "upper" if name.isupper() else "camel" if name[:1].isupper() else "lower"


def _uses(lines: list[str], binds: binding.Bindings, name: str, site: binding.Binding, path: str) -> list[int]:
    """The rows of ``site``'s scope whose code occurrences of ``name`` refer to ``site`` (its innermost
    visible binding is in ``site``'s scope)."""
    a, b = site.scope
    out = []
    for r in range(max(0, a), min(len(lines) - 1, b) + 1):
        if not _code_hits(lines[r], name, path):
            continue
        vis = binds.visible(name, r)
        if vis and max(v.scope[0] for v in vis) == a:
            out.append(r)
    return out


def _rename_rows(text: str, rows: Sequence[int], old: str, new: str, path: str) -> str:
    lines = text.split("\n")
    ch = Change(old, new, path, 0, "", 1, 1, 1, True, False)
    binds = binding.of(text, path)
    for r in rows:
        lines[r] = carry(lines[r], [ch], path, binds.labels(r) if binds else frozenset())
    return "\n".join(lines)


def _case(src: Case, kind: str, before: str, after: str, truth_rows: Sequence[int], row: int, old: str,
          new: str) -> Case | None:
    """The case: ``after`` is the file once the user's edit is made (cursor after ``new`` on ``row``), the
    truth the rest of the rename inside the region (``truth_rows``)."""
    path = src["path"]
    lines = after.split("\n")
    col = lines[row].find(new)
    if col < 0:
        return None
    cursor = sum(len(x) + 1 for x in lines[:row]) + col + len(new)
    ra, rb = line_span(after, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    r0, r1 = after.count("\n", 0, ra), after.count("\n", 0, rb)
    inside = [r for r in truth_rows if r0 <= r < max(r1, r0 + 1)]
    expected = None
    if kind != "done":
        if not inside:
            return None
        done = _rename_rows(after, inside, old, new, path)
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
    lines = text.split("\n")
    words = set(re.findall(r"\w+", text))
    out: list[Case] = []
    sites = [(n, s) for n in sorted(binds._sites) for s in binds.sites(n)
             if s.scope != binding.MODULE and _NAME.fullmatch(n) and n not in _KEYWORDS]
    rng.shuffle(sites)
    want = list(KINDS)
    for old, site in sites:
        if not want:
            break
        uses = _uses(lines, binds, old, site, path)
        others = [r for r in uses if r != site.row]
        if site.row not in uses or not others or len(_code_hits(lines[site.row], old, path)) != 1:
            continue
        pool = [m for m in names if _style(m) == _style(old) and m not in words and m != old]
        if not pool:
            continue
        new = rng.choice(pool)
        kind = want[0]
        if kind == "declaration":
            after = _rename_rows(text, [site.row], old, new, path)
            case = _case(src, kind, text, after, others, site.row, old, new)
        elif kind == "use":
            row = others[-1]
            if len(_code_hits(lines[row], old, path)) != 1:
                continue
            after = _rename_rows(text, [row], old, new, path)
            case = _case(src, kind, text, after, [r for r in uses if r != row], row, old, new)
        else:
            elsewhere = [s for s in binds.sites(old) if s.scope != site.scope]
            if not elsewhere:
                continue
            after = _rename_rows(text, uses, old, new, path)
            case = _case(src, kind, text, after, [], uses[-1], old, new)
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
