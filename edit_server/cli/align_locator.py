"""``edit-server align locator``: fit the next-edit location model on replay cases of the training
repositories (offline; scikit-learn).

Every case (`edit-server eval replay REPOS --build-only`) is proposed for as the server proposes
(`edit_server.nextedit.serve.proposals`: the rules' region candidates and the carried edits, the candidate
filter applied) and each proposal labelled by the judge: right when the file after it is the file after
the truth, exactly (a quiet case's proposals are all wrong); a jump (outside the region) when it makes one
of the hunks still pending in the file exactly (`evals.next_edit.judge_jump`). A logistic regression over the proposals'
features (`propose.FEATURES`) is fitted with the repositories as groups: each repository's probabilities
come from a model fitted on the others (out of fold), the served pick per case (the likeliest proposal)
is judged at every threshold, and the lowest threshold whose out-of-fold precision reaches the target is
kept; the model refitted on every case goes out with it as JSON (`locator.Locator`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edit_server.nextedit import locator as locating

if TYPE_CHECKING:  # the serving modules are imported where used: `align` runs on a GPU image without msgspec
    from edit_server.nextedit.propose import Proposal

TARGET = 0.7


@dataclass(frozen=True)
class Labelled:
    case: int  # index of its case
    group: str  # its repository
    proposal: Proposal
    right: bool


def label(cases: Sequence[dict[str, Any]], jumps: bool = False, rules: Sequence[str] | None = None) -> list[Labelled]:
    """Every case's proposals that pass the candidate filter, judged (``rules``: the rules on; None: the
    settings' defaults)."""
    from edit_server.cli.eval_rules import prepare, settings_for
    from edit_server.nextedit.serve import proposals
    from edit_server.selectivity.select import Output, select
    from evals.next_edit import judge, judge_jump

    settings = settings_for(rules)
    on = settings.next_edit.rules()
    anything = {k: 0.0 for k in locating.KINDS}  # the gate's other rules still apply: the filter, the syntax
    out = []
    for i, case in enumerate(cases):
        p = prepare(case)
        rules = [c for o in on if (c := p.rules[o]) is not None]
        for prop in proposals(p.req, p.built, rules, jumps=jumps):
            sug, _ = select(Output("edit", p.req.path, p.req.text, prop.start, prop.end, prop.new, [1.0],
                                   cursor=p.req.offset, history=p.req.history, origin=prop.origin), settings, anything)
            if sug is None or not sug.show:
                continue
            if prop.jump:
                right = judge_jump(case, prop.start, prop.end, prop.new)
            else:
                right = bool(case.get("expected")) and bool(judge(case, prop.start, prop.end, prop.new)["exact"])
            out.append(Labelled(i, str(case.get("meta", {}).get("repo", "")), prop, right))
    return out


def matrix(rows: Sequence[Labelled]) -> list[list[float]]:
    from edit_server.nextedit.propose import FEATURES

    return [[r.proposal.feats.get(f, 0.0) for f in FEATURES] for r in rows]


def served(rows: Sequence[Labelled], probs: Sequence[float], cases: Sequence[dict[str, Any]]
           ) -> dict[int, tuple[float, bool]]:
    """Per case (index) the likeliest proposal's probability and whether it is right."""
    best: dict[int, tuple[float, bool]] = {}
    for r, p in zip(rows, probs, strict=True):
        if r.case not in best or p > best[r.case][0]:
            best[r.case] = (p, r.right)
    return best


def curve(best: dict[int, tuple[float, bool]], cases: Sequence[dict[str, Any]],
          thresholds: Sequence[float], real: bool = False) -> list[dict[str, float]]:
    """The served row at each threshold: exact (of the due edits), no-edit correct, precision, shown (with
    ``real``: over the replayed cases alone, the synthetic ones left out)."""
    keep = [i for i, c in enumerate(cases) if not (real and c.get("meta", {}).get("synthetic"))]
    due = sum(bool(cases[i].get("expected")) for i in keep)
    quiet = len(keep) - due
    kept = set(keep)
    out = []
    for t in thresholds:
        shown = [(i, ok) for i, (p, ok) in best.items() if p >= t and i in kept]
        right = sum(ok for _, ok in shown)
        quiet_shown = sum(not cases[i].get("expected") for i, _ in shown)
        out.append({"threshold": t, "shown": len(shown), "right": right,
                    "exact": right / due if due else 0.0,
                    "no_edit_correct": 1 - quiet_shown / quiet if quiet else 1.0,
                    "precision": right / len(shown) if shown else 1.0})
    return out


def fit(rows: Sequence[Labelled], c: float = 1.0) -> tuple[Any, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x = matrix(rows)
    y = [int(r.right) for r in rows]
    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=c, max_iter=2000).fit(scaler.transform(x), y)
    return scaler, model


def out_of_fold(rows: Sequence[Labelled], c: float = 1.0) -> list[float]:
    """Each repository's probabilities from a model fitted on the other repositories."""
    probs = [0.0] * len(rows)
    groups = sorted({r.group for r in rows})
    for g in groups:
        train = [r for r in rows if r.group != g]
        test = [i for i, r in enumerate(rows) if r.group == g]
        if not test:
            continue
        if len({r.right for r in train}) < 2:
            continue
        scaler, model = fit(train, c)
        p = model.predict_proba(scaler.transform(matrix([rows[i] for i in test])))[:, 1]
        for i, v in zip(test, p, strict=True):
            probs[i] = float(v)
    return probs


def choose(points: Sequence[dict[str, float]], target: float, min_shown: int = 10) -> float:
    """The lowest threshold (the most shown) whose out-of-fold precision reaches ``target`` with at least
    ``min_shown`` shown; +inf (show nothing) when none does."""
    ok = [p["threshold"] for p in points if p["shown"] >= min_shown and p["precision"] >= target]
    return min(ok) if ok else math.inf


THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20)) + (0.97, 0.99)


def train(cases: Sequence[dict[str, Any]], target: float = TARGET, c: float = 1.0,
          rules: Sequence[str] | None = None, jumps: bool = True) -> tuple[locating.Locator, dict]:
    rows = label(cases, jumps, rules)
    if len({r.right for r in rows}) < 2:
        raise ValueError("the cases give no right and wrong proposals to fit on")
    oof = out_of_fold(rows, c)
    best = served(rows, oof, cases)
    # the threshold is chosen on the replayed sessions alone: synthetic renames teach what a binding says,
    # they are not the mix of edits a user makes
    points = curve(best, cases, THRESHOLDS, real=True)
    t = choose(points, target)
    scaler, model = fit(rows, c)
    repos = sorted({r.group for r in rows})
    from edit_server.nextedit.propose import FEATURES

    report = {"cases": len(cases), "proposals": len(rows), "right": sum(r.right for r in rows),
              "repositories": repos, "target_precision": target, "threshold": t, "out_of_fold": points,
              "out_of_fold_all": curve(best, cases, THRESHOLDS)}
    loc = locating.Locator(tuple(FEATURES), tuple(float(m) for m in scaler.mean_),
                           tuple(float(s) if s > 0 else 1.0 for s in scaler.scale_),
                           tuple(float(w) for w in model.coef_[0]), float(model.intercept_[0]), t,
                           {"trained_on": repos, "cases": len(cases), "proposals": len(rows),
                            "synthetic": sum(bool(k.get("meta", {}).get("synthetic")) for k in cases),
                            "target_precision": target, "C": c,
                            "out_of_fold_at_threshold": next((p for p in points if p["threshold"] == t), None)})
    return loc, report


def register_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("locator", help="fit the next-edit location model on replay cases of training repositories")
    p.add_argument("cases", type=Path, nargs="+", help="cases.jsonl (`edit-server eval replay REPOS --build-only`)")
    p.add_argument("--out", type=Path, default=locating.SHIPPED, help=f"model JSON (default: {locating.SHIPPED})")
    p.add_argument("--target-precision", type=float, default=TARGET)
    p.add_argument("--c", type=float, default=1.0, help="inverse regularisation strength")
    p.add_argument("--rule", action="append", default=None, metavar="NAME",
                   help="fit with only these rules' candidates (repeatable; default: the settings' defaults)")
    p.add_argument("--no-jumps", action="store_true", help="fit without the carried edits outside the region")
    p.add_argument("--report", type=Path, default=None, help="write the fit's report (JSON) here")
    p.add_argument("--renames", type=int, default=0, metavar="N",
                   help="add N rename sessions made from the cases' own files (edit_server.cli.synth_renames); the "
                        "threshold is still chosen on the replayed cases alone")
    p.add_argument("--completions", type=int, default=0, metavar="N",
                   help="add N started edits made from the cases' own files (edit_server.cli.synth_completions)")
    p.add_argument("--patterns", nargs="+", type=Path, default=[], metavar="REPO",
                   help="add pattern sessions mined from these repositories' histories (bundles or directories; "
                        "edit_server.cli.synth_patterns): one change made on two look-alike lines, the rest due")
    p.add_argument("--patterns-per-repo", type=int, default=40, metavar="N")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evals.next_edit import read_cases

    try:
        cases = [c for f in args.cases for c in read_cases(f)]
        if args.renames:
            from edit_server.cli.synth_renames import summary, synthesize

            made = synthesize(cases, args.renames)
            print(f"synthetic rename sessions: {summary(made)}")
            cases += made
        if args.completions:
            from edit_server.cli import synth_completions

            made = synth_completions.synthesize(cases, args.completions)
            print(f"synthetic started edits: {summary(made)}")
            cases += made
        if args.patterns:
            from edit_server.cli import synth_patterns
            from edit_server.cli.synth_renames import summary

            made = synth_patterns.synthesize(args.patterns, args.patterns_per_repo)
            print(f"synthetic pattern sessions: {summary(made)}")
            cases += made
        loc, report = train(cases, args.target_precision, args.c, args.rule, not args.no_jumps)
    except (ValueError, FileNotFoundError) as e:
        print(f"edit-server align locator: error: {e}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(loc.to_json(), indent=1) + "\n")
    if args.report:
        args.report.write_text(json.dumps(report, indent=1))
    at = report["out_of_fold"]
    print(f"{report['cases']} cases, {report['proposals']} proposals ({report['right']} right) from "
          f"{len(report['repositories'])} repositories; threshold {loc.threshold} for precision "
          f"{args.target_precision:.0%} (out of fold)")
    print("| threshold | shown | right | exact | no-edit correct | precision |")
    print("|---|---|---|---|---|---|")
    for p in at:
        print(f"| {p['threshold']} | {p['shown']} | {p['right']} | {p['exact']:.1%} | {p['no_edit_correct']:.1%} | "
              f"{p['precision']:.1%} |")
    print(f"model: {args.out}")
    return 0
