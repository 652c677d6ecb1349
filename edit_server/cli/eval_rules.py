"""``edit-server eval rules``: the model-free next-edit candidates judged on replay cases offline — no model, no
server, seconds (issue 25).

What the server shows for a next edit while the model's rewrites are never shown (the shipped tiers' ``edit``
threshold is ∞) is the best of the rules' candidates (`edit_server.nextedit.rules.RULES`). Judging a change
to a rule through `edit-server eval replay` takes tens of minutes a run and tells only the served total; here
each case goes through the same functions the server calls — `nextedit.rules.rule_candidate` per rule, the candidate
filter (`candidates.reject_reason`), the gate and `select.edit_results` over the rules on in the settings'
order — and is judged like `evals.next_edit` (the cases of `edit-server eval replay REPOS --build-only`):

* **served**: the suggestion the server would show (its region: the server's default "lines" window, the
  cases' own), judged per case into ``results.jsonl`` and summarised as `evals.next_edit.summarize` does;
* **per rule** (every rule, on or off): its candidate right / wrong in a next-edit case, shown in a quiet one,
  taken out by the filter (per reason) or hidden by the gate, and none.

With ``--rewrites DIR`` (an `edit-server eval next-edit` run on the same cases: a GPU window's job writes one)
the model's own rewrite joins the candidates as the server offers it — its score the gate's (the geometric mean
of its changed tokens' confidences), held against the model's ``edit`` show threshold (``--edit-threshold``; ∞,
the shipped tiers', by default) — and the report sweeps that threshold: what an adapter adds to the rules as
served, at each threshold, without a replay through the server.

The server also has the document's syntax tree (a rule's candidate that introduces a syntax error ranks below
one that does not) — the same parser runs here, so the pick is the server's; what this cannot see is the
model's own rewrite unless given (skipped, as the server skips it at an infinite threshold) and timing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from edit_server.core.history import Hunk
from edit_server.core.requests import EditBuilt, EditRequest, Suggestion
from edit_server.core.settings import Settings
from edit_server.nextedit import serve as nextedit
from edit_server.nextedit.rules import RULES, rule_candidate
from edit_server.selectivity import candidates, echo_edit
from edit_server.selectivity.select import Candidate, Output, edit_results, select
from edit_server.selectivity.thresholds import MODEL_ORIGINS
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW, EditPrompt
from engine.textdiff import line_span
from evals.cases import diff_path
from evals.next_edit import diffs, judge, judge_jump, read_cases, summarize

OUTCOMES = ("right", "wrong", "quiet_shown", "hidden", "rejected", "none")
SWEEP = (float("inf"), 0.99, 0.95, 0.9, 0.8, 0.7, 0.5, 0.0)  # the model's ``edit`` thresholds the report tries
Rewrite = tuple[str, float]  # a model's rewrite of a case's region and its gate score


def settings_for(rules: Sequence[str] | None = None, calibration: str = "", locator: str = "", carry: bool = True,
                 jumps: bool = True) -> Settings:
    """The server's default settings with only the rules ``rules`` on (`RULES` keys; None: the defaults'; the
    server ranks them in its own order), and the gate's calibration (`thresholds.gate_threshold`: "" as the
    server — its default file when this machine has one, else the model's thresholds, else ``gate.threshold``;
    ``off``: ``gate.threshold`` for every kind; else a file), the location model (``locator``: a file, "" the
    shipped one, "off" none: the rules' fixed scores) and whether edits are carried (``carry``) and offered
    elsewhere in the file (``jumps``)."""
    s = Settings()
    nxt = msgspec.structs.replace(s.next_edit, locator=locator, carry_edit=carry, jumps=jumps)
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
    # each hunk under the file its diff names (the server keeps each document's hunks apart; the rules read the
    # cursor's document's), the case's file for a diff without a header
    hunks = [Hunk(diff_path(d) or path, d, float(i), False) for i, d in enumerate(case.get("history") or [])]
    req = EditRequest(f"file:///{path}", path, text, 0, cursor, hunks)
    prompt = EditPrompt(text[:ra], text[ra:rb], text[rb:], cursor - ra, path, tuple(case.get("history") or ()))
    return req, EditBuilt(prompt, ra, rb)


@dataclass(frozen=True)
class Prepared:
    """A case as the server sees it — its request and region — and every rule's candidate, computed once: the
    served pick, each rule's own outcome and every threshold of the sweep read them."""

    case: dict[str, Any]
    req: EditRequest
    built: EditBuilt
    rules: dict[str, Candidate | None]

    @property
    def region(self) -> str:
        return self.req.text[self.built.region_start:self.built.region_end]


def prepare(case: dict[str, Any]) -> Prepared:
    req, built = request_of(case)
    return Prepared(case, req, built, {origin: rule_candidate(origin, req, built) for origin in RULES})


def rule_outcome(p: Prepared, origin: str, settings: Settings) -> str:
    """One rule's candidate on its own: one of `OUTCOMES` (``rejected:REASON`` for the filter)."""
    cand, req, built = p.rules[origin], p.req, p.built
    if cand is None:
        return "none"
    why = candidates.reject_reason(req.text, req.offset, req.path, built.region_start, p.region, cand.new,
                                   req.history)
    if why:
        return f"rejected:{why}"
    sug, _ = select(Output("edit", req.path, req.text, built.region_start, built.region_end, cand.new,
                           cand.confidences, cursor=req.offset, history=req.history, origin=origin), settings)
    if sug is None:
        return "none"
    if not sug.show:
        return "hidden"
    j = judge(p.case, built.region_start, built.region_end, sug.text)
    if not p.case.get("expected"):
        return "quiet_shown" if j["shown"] else "none"
    return "right" if j["exact"] else "wrong"


def read_rewrites(path: Path) -> dict[str, Rewrite]:
    """Case id -> the model's shown rewrite and its score, from an `eval next-edit` run (its directory or its
    ``results.jsonl``); a case whose rewrite changed nothing, or failed, has none."""
    src = path / "results.jsonl" if path.is_dir() else path
    out = {}
    for i, r in enumerate(_records(src)):
        if "id" not in r:
            raise ValueError(f"{src}: record {i + 1} has no id")
        if r.get("shown") and isinstance(r.get("new"), str):
            out[str(r["id"])] = (r["new"], float(r.get("score") or 0.0))
    return out


def _records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a run's ``results.jsonl``."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def served(p: Prepared, settings: Settings, rewrite: Rewrite | None = None,
           edit_threshold: float = float("inf")) -> tuple[Suggestion | None, dict[str, Any]]:
    """The server's pick among the model's rewrite (``rewrite``; none: the region unchanged, as when the model
    is skipped) and the rules' candidates — the suggestion shown (None: nothing shown) — and its judgement."""
    cands = [Candidate(rewrite[0], [rewrite[1]], None) if rewrite else Candidate(p.region, [], None)]
    rules = [c for c in (p.rules[o] for o in settings.next_edit.rules()) if c is not None]
    loc = nextedit.load_locator(settings.next_edit.locator)
    if loc is not None:  # every rule's candidate and the carried edits on the location model's scale
        rules = nextedit.located(p.req, p.built, rules, loc, settings.next_edit.carry_edit, settings.next_edit.jumps)
    cands += rules
    model = {"edit": edit_threshold, f"edit:{echo_edit.ORIGIN}": edit_threshold, **nextedit.thresholds(settings)}
    i, sug, _ = edit_results(p.req, p.built, cands, settings, model)
    shown = sug if sug is not None and sug.show else None
    b = p.built
    if shown is None:
        return None, {**judge(p.case, b.region_start, b.region_end, p.region), "jump": False}
    span = cands[i].span
    if span is None:
        return shown, {**judge(p.case, b.region_start, b.region_end, shown.text), "jump": False}
    # a jump target is judged as shown (right only where it makes the region's truth: never) and apart,
    # against the hunks pending elsewhere in the file
    return shown, {**judge(p.case, *span, shown.text), "jump": True, "jump_right": judge_jump(p.case, *span, shown.text)}


def sweep(prepared: Sequence[Prepared], settings: Settings, rewrites: dict[str, Rewrite],
          thresholds: Sequence[float] = SWEEP) -> list[dict[str, Any]]:
    """Served next edits per threshold of the model's rewrites: exact, no-edit correct, precision, and what
    the model's own rewrites add (shown / right)."""
    rows = []
    for t in thresholds:
        recs = []
        for p in prepared:
            sug, j = served(p, settings, rewrites.get(p.case["id"]), t)
            recs.append({**j, "category": p.case.get("meta", {}).get("category"),
                         "model": sug is not None and sug.origin in (*MODEL_ORIGINS, echo_edit.ORIGIN)})
        s = summarize(recs)
        rows.append({"threshold": t, "next_edit_exact": s["next_edit_exact"],
                     "no_edit_correct": s["no_edit_correct"]["all"], "precision": s["precision_when_shown"],
                     "shown": sum(bool(r["shown"]) for r in recs),
                     "model_shown": sum(bool(r["model"]) for r in recs),
                     "model_right": sum(bool(r["model"] and r.get("exact")) for r in recs)})
    return rows


def run(cases: Sequence[dict[str, Any]], settings: Settings, out: Path,
        progress: Callable[[Iterable[dict[str, Any]]], Iterable[dict[str, Any]]] = iter,
        rewrites: dict[str, Rewrite] | None = None, edit_threshold: float = float("inf")) -> dict[str, Any]:
    """Every case served by the rules on (and the model's rewrite, from ``rewrites``, gated at
    ``edit_threshold``) and judged per rule; ``out/results.jsonl`` (one record per case, the served
    suggestion's diff and the truth's where shown) and ``out/report.json`` (with ``rewrites``: the sweep)."""
    out.mkdir(parents=True, exist_ok=True)
    order = settings.next_edit.rules()
    per_rule: dict[str, Counter[str]] = {name: Counter() for name in RULES}
    recs = []
    prepared = []
    with open(out / "results.jsonl", "w", encoding="utf-8") as f:
        for case in progress(cases):
            p = prepare(case)
            prepared.append(p)
            sug, judged = served(p, settings, (rewrites or {}).get(case["id"]), edit_threshold)
            meta = case.get("meta", {})
            rec: dict[str, Any] = {"id": case["id"], "category": meta.get("category"), "repo": meta.get("repo"),
                                   "origin": sug.origin if sug else None, "score": sug.score if sug else None,
                                   **judged}
            if rec["shown"] and sug is not None:
                rec.update(diffs(case, p.built.region_start, p.built.region_end, sug.text))
            rec["rules"] = {name: rule_outcome(p, name, settings) for name in RULES}
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
              "jumps": {"shown": sum(bool(r.get("jump")) for r in recs),
                        "right": sum(bool(r.get("jump_right")) for r in recs)},
              "right_by_origin": dict(Counter(r["origin"] for r in recs if r.get("exact"))),
              "rules": {name: dict(c) for name, c in per_rule.items()},
              "settings": {"gate_threshold": settings.gate.threshold, "calibration": settings.gate.calibration,
                           "edit_threshold": edit_threshold, "rewrites": len(rewrites) if rewrites else None}}
    if rewrites:
        report["sweep"] = sweep(prepared, settings, rewrites)
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
             f"shown {pct(s['precision_when_shown'])}; shown by origin: {by or 'none'}; jumps shown "
             f"{report['jumps']['shown']} ({report['jumps']['right']} make a pending hunk elsewhere exactly)",
             "| rule | on | right | wrong | shown in a quiet case | hidden by the gate | filtered out (reasons) |",
             "|---|---|---|---|---|---|---|"]
    for name, c in report["rules"].items():
        reasons = ", ".join(f"{k.split(':', 1)[1]} {v}" for k, v in sorted(c.items()) if k.startswith("rejected:"))
        lines.append(f"| {name} | {'yes' if name in report['served_rules'] else 'no'} | {c.get('right', 0)} | "
                     f"{c.get('wrong', 0)} | {c.get('quiet_shown', 0)} | {c.get('hidden', 0)} | "
                     f"{c.get('rejected', 0)}{f' ({reasons})' if reasons else ''} |")
    if report.get("sweep"):
        lines += ["", f"with the model's rewrites ({report['settings']['rewrites']} shown by the model) at each "
                      "threshold of its `edit` kind:",
                  "| threshold | next-edit exact | no-edit correct | precision when shown | shown | the model's shown / right |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['threshold']} | {pct(r['next_edit_exact'])} | {pct(r['no_edit_correct'])} | "
                  f"{pct(r['precision'])} | {r['shown']} | {r['model_shown']} / {r['model_right']} |"
                  for r in report["sweep"]]
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
    ru.add_argument("--calibration", default="",
                    help="the gate's calibration: a file, or off (gate.threshold for every kind); default as the "
                         "server: its default file when present, else the model's thresholds")
    ru.add_argument("--locator", default="", metavar="FILE",
                    help="the next-edit location model (default: the shipped one; off: the rules' fixed scores)")
    ru.add_argument("--no-carry", action="store_true", help="no carried edits (the rules' candidates only)")
    ru.add_argument("--no-jumps", action="store_true", help="no carried edits outside the editable region")
    ru.add_argument("--rewrites", type=Path, default=None, metavar="DIR",
                    help="an `eval next-edit` run on the same cases: the model's rewrites join the candidates")
    ru.add_argument("--edit-threshold", type=float, default=float("inf"),
                    help="the show threshold of the model's rewrites (default inf, the shipped tiers'); the "
                         "report also sweeps it")
    ru.add_argument("--out", type=Path, default=Path("runs/eval/rules"), help="report directory")
    ru.add_argument("--limit", type=int, default=0, help="only the first N cases")
    ru.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    ru.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from evals.cli_common import progress_bar

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        cases = read_cases(args.cases)
        settings = settings_for(args.rule, args.calibration, args.locator, not args.no_carry, not args.no_jumps)
        rewrites = read_rewrites(args.rewrites) if args.rewrites else None
    except (ValueError, FileNotFoundError) as e:
        print(f"edit-server eval rules: error: {e}", file=sys.stderr)
        return 1
    report = run(cases[:args.limit] if args.limit else cases, settings, args.out, progress_bar(args, "rules"),
                 rewrites, args.edit_threshold)
    print(format_report(report, f"next edits from the rules ({args.cases})"))
    print(f"report: {args.out / 'report.json'}")
    return 0
