"""Render the hand-written next-edit cases (``evals/data/next_edit/source/*.py``) into
``evals/data/next_edit/curated.jsonl`` (docs/EVAL_FORMAT.md).

Each source file defines ``CASES``: a list of dicts with

* ``id``, ``category`` (``next-edit/below|above|jump|complete`` or ``no-edit/noise``), ``language``;
* ``files_before``: ``{path: text}`` before the user's edits;
* ``steps``: the user's edits, oldest first, each ``{path, old, new[, occurrence]}`` — replace the exact
  string ``old`` in that file's current text by ``new``; ``occurrence`` (1-based) picks one of several,
  otherwise ``old`` must occur exactly once;
* ``cursor`` (optional): ``{path, after}`` — right after the unique snippet ``after`` of the final text
  (``occurrence`` allowed as above); default: the end of the last step's ``new`` text;
* ``expected``: the truth, applied to the final text: one edit ``{path, old, new[, occurrence]}``, a list
  of them (every change the user will still make in the cursor's editable region, applied together;
  each snippet is located in the final text, so offsets never shift, and the edits must not overlap), or
  ``None`` (silence);
* ``note``: why this is the next edit (or why silence).

Every step becomes one history diff (``engine.textdiff.unified_diff``); ``files`` is the text after all
steps. A missing or ambiguous snippet, an edit that changes nothing or a language that disagrees with the
cursor file's extension stops the build with the case's id.

    python scripts/build_curated_next_edit.py          # write curated.jsonl
    python scripts/build_curated_next_edit.py --check  # exit 1 if curated.jsonl is not what it would write
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.textdiff import unified_diff  # noqa: E402
from evals.cases import Case, Cursor, Edit, dumps, language_of  # noqa: E402

DATA = ROOT / "evals" / "data" / "next_edit"
SOURCE = DATA / "source"
OUT = DATA / "curated.jsonl"
CATEGORIES = ("next-edit/below", "next-edit/above", "next-edit/jump", "next-edit/complete", "no-edit/noise")


class CaseError(ValueError):
    pass


def locate(text: str, snippet: str, occurrence: int | None, where: str) -> int:
    """The offset of ``snippet`` in ``text``: its only occurrence, or the ``occurrence``-th (1-based)."""
    if not snippet:
        raise CaseError(f"{where}: empty snippet")
    starts, i = [], text.find(snippet)
    while i >= 0:
        starts.append(i)
        i = text.find(snippet, i + 1)
    if not starts:
        raise CaseError(f"{where}: snippet not found: {snippet!r}")
    if occurrence is None:
        if len(starts) > 1:
            raise CaseError(f"{where}: snippet is ambiguous ({len(starts)} occurrences): {snippet!r}")
        return starts[0]
    if not 1 <= occurrence <= len(starts):
        raise CaseError(f"{where}: occurrence {occurrence} of {len(starts)}: {snippet!r}")
    return starts[occurrence - 1]


def expected_edits(cid: str, files: dict[str, str], exp: dict[str, Any] | list[dict[str, Any]]) -> list[Edit]:
    """The truth's edits, sorted by (path, start): each snippet located in the final ``files``; none may
    change nothing or overlap another."""
    items = [exp] if isinstance(exp, dict) else list(exp)
    if not items:
        raise CaseError(f"{cid}: expected is an empty list (use None for silence)")
    edits: list[Edit] = []
    for n, item in enumerate(items, 1):
        where = f"{cid}: expected" + (f" {n}" if len(items) > 1 else "")
        path, old, new = item["path"], item["old"], item["new"]
        if path not in files:
            raise CaseError(f"{where}: no file {path!r}")
        if old == new:
            raise CaseError(f"{where}: the edit changes nothing")
        at = locate(files[path], old, item.get("occurrence"), f"{where} ({path})")
        edits.append(Edit(path, at, at + len(old), new))
    edits.sort(key=lambda e: (e.path, e.start, e.end))
    for a, b in zip(edits, edits[1:], strict=False):
        if a.path == b.path and (b.start < a.end or b.start == a.start):
            raise CaseError(f"{cid}: expected edits overlap in {a.path} at offsets {a.start} and {b.start}")
    return edits


def build_case(src: dict[str, Any]) -> Case:
    cid = src["id"]
    category = src["category"]
    if category not in CATEGORIES:
        raise CaseError(f"{cid}: unknown category {category!r}")
    files = dict(src["files_before"])
    history: list[str] = []
    end: tuple[str, int] | None = None
    steps = src["steps"]
    if not 1 <= len(steps) <= 3:
        raise CaseError(f"{cid}: {len(steps)} steps (1 to 3)")
    for n, step in enumerate(steps, 1):
        path, old, new = step["path"], step["old"], step["new"]
        if path not in files:
            raise CaseError(f"{cid}: step {n}: no file {path!r}")
        if old == new:
            raise CaseError(f"{cid}: step {n} changes nothing")
        before = files[path]
        at = locate(before, old, step.get("occurrence"), f"{cid}: step {n} ({path})")
        after = before[:at] + new + before[at + len(old):]
        history.append(unified_diff(path, before, after))
        files[path] = after
        end = (path, at + len(new))
    assert end is not None
    cur = src.get("cursor")
    if cur is None:
        cpath, offset = end
    else:
        cpath = cur["path"]
        if cpath not in files:
            raise CaseError(f"{cid}: cursor: no file {cpath!r}")
        offset = locate(files[cpath], cur["after"], cur.get("occurrence"), f"{cid}: cursor") + len(cur["after"])
    language = language_of(cpath)
    if src["language"] != language:
        raise CaseError(f"{cid}: language {src['language']!r}, but {cpath!r} is {language!r}")
    exp = src["expected"]
    expected: list[Edit] | None = None
    if exp is not None:
        if category.startswith("no-edit/"):
            raise CaseError(f"{cid}: a {category} case must expect None")
        expected = expected_edits(cid, files, exp)
    elif not category.startswith("no-edit/"):
        raise CaseError(f"{cid}: a {category} case needs an expected edit")
    meta: dict[str, str | int | float] = {"category": category, "note": src["note"], "source": "curated"}
    return Case(id=cid, kind="edit", language=language, path=cpath, files=files,
                cursor=Cursor(cpath, offset), expected=expected, history=history, meta=meta)


def source_cases() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(SOURCE.glob("*.py")):
        cases = runpy.run_path(str(f))["CASES"]
        out.extend(cases)
    return out


def build() -> list[Case]:
    cases = [build_case(c) for c in source_cases()]
    seen: set[str] = set()
    for c in cases:
        if c.id in seen:
            raise CaseError(f"duplicate id {c.id!r}")
        seen.add(c.id)
    return cases


def render(cases: list[Case]) -> str:
    return "".join(dumps(c) + "\n" for c in cases)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the built file is not up to date")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    try:
        text = render(build())
    except CaseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is out of date: run python scripts/build_curated_next_edit.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {text.count(chr(10))} cases to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
