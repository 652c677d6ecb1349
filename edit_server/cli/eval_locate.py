"""``edit-server eval locate``: how well the location model says where the next edit is, and whether one is
due — per language, on replay cases (no model, no server: seconds).

Each case of `edit-server eval replay REPOS --build-only` names the hunks still pending in its file
(``meta.pending``); the next one is the first at or below the cursor's line (a session is replayed top to
bottom), else the nearest above. The server's proposals (`edit_server.nextedit.serve.proposals`: the
rules' region candidates and the carried edits, in the region and elsewhere) are ranked by the location
model's probability; a place is found at rank k when the k-th proposal changes a line of that hunk.

* **top-1 / top-3**: of the cases with a next hunk, the share found at rank 1 / within the first 3;
  ``reach``: found at any rank (what better ranking could gain at most);
* **due**: whether anything is pending at all, told by the best proposal's probability (0 with none) —
  the area under the ROC curve, and the observed share due per probability bin (calibration).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edit_server.nextedit import serve as nextedit

BINS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.01)


def next_hunk(case: dict[str, Any]) -> tuple[int, int] | None:
    """The rows (first, last) of the case's next pending hunk, or None when nothing is pending."""
    text = case["files"][case["path"]]
    cur = text.count("\n", 0, int(case["cursor"]["offset"]))
    rows = []
    for h in (case.get("meta") or {}).get("pending") or []:
        a, b = int(h["start"]), int(h["end"])
        first = text.count("\n", 0, a)
        last = max(first, text.count("\n", 0, b) - (1 if b > a and text[b - 1:b] == "\n" else 0))
        rows.append((first, last))
    if not rows:
        return None
    below = [r for r in rows if r[1] >= cur]
    return min(below) if below else max(rows)


def changed_rows(text: str, start: int, end: int, new: str) -> set[int]:
    """The document rows a rewrite of ``text[start:end]`` as ``new`` touches."""
    import difflib

    base = text.count("\n", 0, start)
    a, b = text[start:end].split("\n"), new.split("\n")
    out: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.update(range(base + i1, base + max(i2, i1 + 1)))
    return out


def auroc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def locate(cases: Sequence[dict[str, Any]], where: str = "") -> dict[str, Any]:
    from edit_server.cli.eval_rules import prepare, settings_for

    loc = nextedit.load_locator(where)
    if loc is None:
        raise ValueError(f"no location model at {where or 'the shipped path'}")
    settings = settings_for(locator=where)
    on = settings.next_edit.rules()
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in cases:
        p = prepare(case)
        rules = [c for o in on if (c := p.rules[o]) is not None]
        props = sorted(nextedit.proposals(p.req, p.built, rules), key=lambda q: -loc.probability(q.feats))
        truth = next_hunk(case)
        rank = None
        if truth is not None:
            want = set(range(truth[0], truth[1] + 1))
            for k, q in enumerate(props, 1):
                if changed_rows(p.req.text, q.start, q.end, q.new) & want:
                    rank = k
                    break
        best = loc.probability(props[0].feats) if props else 0.0
        per[case.get("language") or "?"].append({"due": truth is not None, "rank": rank, "p": best})
    per["all"] = [r for lang in list(per) for r in per[lang]]
    out = {}
    for lang, rs in per.items():
        due = [r for r in rs if r["due"]]
        bins = []
        for lo, hi in zip(BINS, BINS[1:], strict=False):
            b = [r for r in rs if lo <= r["p"] < hi]
            bins.append({"p": [lo, min(hi, 1.0)], "n": len(b), "due": sum(r["due"] for r in b) / len(b) if b else None})
        out[lang] = {"cases": len(rs), "with_next": len(due),
                     "top1": sum(r["rank"] == 1 for r in due) / len(due) if due else None,
                     "top3": sum(bool(r["rank"]) and r["rank"] <= 3 for r in due) / len(due) if due else None,
                     "reach": sum(r["rank"] is not None for r in due) / len(due) if due else None,
                     "due_auroc": auroc([r["p"] for r in due], [r["p"] for r in rs if not r["due"]]),
                     "due_by_p": bins}
    return out


def format_table(rep: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    lines = ["| language | cases | with a next hunk | top-1 | top-3 | reached | due AUROC |", "|---|---|---|---|---|---|---|"]
    for lang in sorted(rep, key=lambda k: (k == "all", k)):
        r = rep[lang]
        au = "-" if r["due_auroc"] is None else f"{r['due_auroc']:.2f}"
        lines.append(f"| {lang} | {r['cases']} | {r['with_next']} | {pct(r['top1'])} | {pct(r['top3'])} | "
                     f"{pct(r['reach'])} | {au} |")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("locate", help="the next-edit location model's top-1 / top-3 accuracy and due calibration "
                                      "per language on replay cases (no model, no server)")
    p.add_argument("cases", type=Path, nargs="+", help="cases.jsonl (`eval replay REPOS --build-only`)")
    p.add_argument("--locator", default="", metavar="FILE", help="the location model (default: the shipped one)")
    p.add_argument("--out", type=Path, default=None, help="write the report (JSON) here")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evals.next_edit import read_cases

    try:
        cases = [c for f in args.cases for c in read_cases(f)]
        rep = locate(cases, args.locator)
    except (ValueError, FileNotFoundError) as e:
        print(f"edit-server eval locate: error: {e}", file=sys.stderr)
        return 1
    print(format_table(rep))
    if args.out:
        args.out.write_text(json.dumps(rep, indent=1))
    return 0
