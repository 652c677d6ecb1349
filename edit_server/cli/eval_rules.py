"""``edit-server eval rules``: the model-free next-edit candidates judged on replay cases offline — no model, no
server, seconds (issue 25).

What the server shows for a next edit while the model's rewrites are never shown (the shipped tiers' ``edit``
threshold is ∞) is the best of the rules' candidates (`edit_server.selectivity.select.RULES`). Judging a change
to a rule through `edit-server eval replay` takes tens of minutes a run and tells only the served total; here
each case goes through the same functions the server calls — `select.rule_candidate` per rule, the candidate
filter (`candidates.reject_reason`), the gate and `select.edit_results` over the rules on in the settings'
order — and is judged like `evals.next_edit` (the cases of `edit-server eval replay REPOS --build-only`):

* **served**: the suggestion the server would show (its region: the server's default "lines" window, the
  cases' own), judged per case into ``results.jsonl`` and summarised as `evals.next_edit.summarize` does;
* **per rule** (every rule, on or off): its candidate right / wrong in a next-edit case, shown in a quiet one,
  taken out by the filter (per reason) or hidden by the gate, and none.

The server also has the document's syntax tree (a rule's candidate that introduces a syntax error ranks below
one that does not) — the same parser runs here, so the pick is the server's; what this cannot see is the
model's own rewrite (skipped, as the server skips it at an infinite threshold) and timing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from edit_server.core.history import Hunk
from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.core.settings import Settings
from edit_server.selectivity import candidates
from edit_server.selectivity.select import RULES, Candidate, Output, edit_results, rule_candidate, select
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW, EditPrompt
from engine.textdiff import line_span
from evals.next_edit import diffs, judge, summarize

OUTCOMES = ("right", "wrong", "quiet_shown", "hidden", "rejected", "none")


def settings_for(rules: Sequence[str] | None = None, calibration: str = "off") -> Settings:
    """The server's default settings with only the rules ``rules`` on (`RULES` keys; None: the defaults'; the
    server ranks them in its own order), and the gate's calibration file (``off``: the rules' built-in scores against
    ``gate.threshold``, whatever file this machine holds)."""
    s = Settings()
    nxt = s.next_edit
    if rules is not None:
        unknown = sorted(set(rules) - set(RULES))
        if unknown:
            raise ValueError(f"unknown rule {', '.join(unknown)} (rules: {', '.join(RULES)})")
        nxt = msgspec.structs.replace(nxt, **{f"{name}_edit": name in rules for name in RULES})
    return msgspec.structs.replace(s, next_edit=nxt, gate=msgspec.structs.replace(s.gate, calibration=calibration))


def request_of(case: dict[str, Any]) -> tuple[EditRequest, EditBuilt]:
    """The server's request and built region for a case (the default "lines" region; the rules read only
    the document, the region and the history, so the prompt holds no context sections)."""
    path = case["path"]
    text = case["files"][path]
    cursor = int(case["cursor"]["offset"])
    ra, rb = line_span(text, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    hunks = [Hunk(diff_path(d, path), d, float(i), False) for i, d in enumerate(case.get("history") or [])]
    req = EditRequest(f"file:///{path}", path, text, 0, cursor, hunks)
    prompt = EditPrompt(text[:ra], text[ra:rb], text[rb:], cursor - ra, path, tuple(case.get("history") or ()))
    return req, EditBuilt(prompt, ra, rb)


def diff_path(diff: str, default: str) -> str:
    """The file a history diff changed (its ``+++ b/PATH`` header; ``default`` without one): the server keeps
    each document's hunks apart, and the rules read the cursor's document's."""
    for line in diff.splitlines()[:3]:
        if line.startswith("+++ "):
            name = line[4:].split("\t", 1)[0].strip()
            return name[2:] if name.startswith("b/") else name
    return default


def rule_outcome(case: dict[str, Any], req: EditRequest, built: EditBuilt, origin: str,
                 settings: Settings) -> str:
    """One rule's candidate on its own: one of `OUTCOMES` (``rejected:REASON`` for the filter)."""
    cand = rule_candidate(origin, req, built)
    if cand is None:
        return "none"
    region = req.text[built.region_start:built.region_end]
    why = candidates.reject_reason(req.text, req.offset, req.path, built.region_start, region, cand.new, req.history)
    if why:
        return f"rejected:{why}"
    sug, _ = select(Output("edit", req.path, req.text, built.region_start, built.region_end, cand.new,
                           cand.confidences, cursor=req.offset, history=req.history, origin=origin), settings)
    if sug is None:
        return "none"
    if not sug.show:
        return "hidden"
    j = judge(case, built.region_start, built.region_end, sug.text)
    if not case.get("expected"):
        return "quiet_shown" if j["shown"] else "none"
    return "right" if j["exact"] else "wrong"


def run(cases: Sequence[dict[str, Any]], settings: Settings, out: Path,
        progress: Callable[[Iterable[dict[str, Any]]], Iterable[dict[str, Any]]] = iter) -> dict[str, Any]:
    """Every case served by the rules on and judged per rule; ``out/results.jsonl`` (one record per case,
    the served suggestion's diff and the truth's where shown) and ``out/report.json``."""
    out.mkdir(parents=True, exist_ok=True)
    order = settings.next_edit.rules()
    per_rule: dict[str, Counter[str]] = {name: Counter() for name in RULES}
    recs = []
    with open(out / "results.jsonl", "w", encoding="utf-8") as f:
        for case in progress(cases):
            req, built = request_of(case)
            ra, rb = built.region_start, built.region_end
            region = req.text[ra:rb]
            cands = [Candidate(region, [], None)]  # the model's rewrite, skipped: the region unchanged
            cands += [c for c in (rule_candidate(o, req, built) for o in order) if c is not None]
            _, sug, _ = edit_results(req, built, cands, settings)
            shown = sug is not None and sug.show
            meta = case.get("meta", {})
            rec: dict[str, Any] = {"id": case["id"], "category": meta.get("category"), "repo": meta.get("repo"),
                                   "origin": sug.origin if shown else None,
                                   "score": sug.score if shown else None}
            rec.update(judge(case, ra, rb, sug.text if shown else region))
            if rec["shown"]:
                rec.update(diffs(case, ra, rb, sug.text))
            rec["rules"] = {name: rule_outcome(case, req, built, name, settings) for name in RULES}
            for name, what in rec["rules"].items():
                per_rule[name][what.split(":", 1)[0]] += 1
                if what.startswith("rejected:"):
                    per_rule[name][what] += 1
            recs.append(rec)
            f.write(json.dumps(rec) + "\n")
    summary = summarize(recs)
    summary.pop("latency_ms_p50"), summary.pop("latency_ms_p95"), summary.pop("tokens_per_step")
    origins = Counter(r["origin"] for r in recs if r["shown"])
    report = {"summary": summary, "served_rules": order, "shown_by_origin": dict(origins),
              "right_by_origin": dict(Counter(r["origin"] for r in recs if r.get("exact"))),
              "rules": {name: dict(c) for name, c in per_rule.items()},
              "settings": {"gate_threshold": settings.gate.threshold, "calibration": settings.gate.calibration}}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def format_report(report: dict[str, Any], title: str) -> str:
    """The served row and one row per rule (Markdown)."""
    s = report["summary"]
    n_next = s["counts"]["next-edit"]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    right = report["right_by_origin"]
    by = ", ".join(f"{o} {n} ({right.get(o, 0)} right)" for o, n in sorted(report["shown_by_origin"].items()))
    lines = [f"{title}: {s['n']} cases {s['counts']}; served ({'+'.join(report['served_rules']) or 'no rules'}): "
             f"next-edit exact {pct(s['next_edit_exact'])} ({sum(right.values())} of {n_next}), line F1 "
             f"{s['next_edit_f1'] or 0:.3f}, no-edit correct {pct(s['no_edit_correct']['all'])}, precision when "
             f"shown {pct(s['precision_when_shown'])}; shown by origin: {by or 'none'}",
             "| rule | on | right | wrong | shown in a quiet case | hidden by the gate | filtered out (reasons) |",
             "|---|---|---|---|---|---|---|"]
    for name, c in report["rules"].items():
        reasons = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in sorted(c.items()) if k.startswith("rejected:"))
        lines.append(f"| {name} | {'yes' if name in report['served_rules'] else 'no'} | {c.get('right', 0)} | "
                     f"{c.get('wrong', 0)} | {c.get('quiet_shown', 0)} | {c.get('hidden', 0)} | "
                     f"{c.get('rejected', 0)}{f' ({reasons})' if reasons else ''} |")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    """``eval rules`` (added to ``edit-server eval``'s commands: it runs the serving code, which
    ``python -m evals`` on a bare GPU image does not have)."""
    ru = sub.add_parser("rules", help="the model-free next-edit candidates judged on replay cases offline, per "
                                      "rule and as served (no model, no server: seconds)")
    ru.add_argument("cases", type=Path, help="cases.jsonl[.gz] (`eval replay REPOS --build-only`) or its directory")
    ru.add_argument("--rule", action="append", default=None, metavar="NAME",
                    help=f"serve with only these rules on (repeatable: {', '.join(RULES)}; default: the settings' "
                         "defaults)")
    ru.add_argument("--calibration", default="off",
                    help="the gate's calibration file (default off: the rules' scores against gate.threshold)")
    ru.add_argument("--out", type=Path, default=Path("runs/eval/rules"), help="report directory")
    ru.add_argument("--limit", type=int, default=0, help="only the first N cases")
    ru.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    ru.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evals.cli_common import progress_bar
    from evals.next_edit import read_cases

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        cases = read_cases(args.cases)
        settings = settings_for(args.rule, args.calibration)
    except (ValueError, FileNotFoundError) as e:
        print(f"edit-server eval rules: error: {e}", file=sys.stderr)
        return 1
    report = run(cases[:args.limit] if args.limit else cases, settings, args.out, progress_bar(args, "rules"))
    print(format_report(report, f"next edits from the rules ({args.cases})"))
    print(f"report: {args.out / 'report.json'}")
    return 0
