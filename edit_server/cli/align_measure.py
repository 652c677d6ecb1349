"""`edit-server align measure`: before vs after KTO alignment, confidence gate vs KTO gate.

Held-out sets: a HumanEval-infilling sample (problems that no training record comes from; pass@1 by the
sandboxed execution check, `evals.humaneval.score`) and edit cases (``--cases FILE``: `eval replay`
histories of a repository not trained on, the next-edit / no-edit fixture cases; judged as `eval cases`
judges, `evals.cases.judge`; cases of a training group are skipped). The model before alignment
(reference) and after (`AlignedEngine`) generate each output, engine-direct (FIM: the file around the
cursor + history, trimmed far from the cursor to ``--max-prompt`` tokens, the server's FIM filters;
next edit: the server's default editable region); the server's extra context sections are not rebuilt.
Each output gets both scores — the geometric-mean token confidence and the aligned model's
length-normalised implicit reward — and each gate is compared at equal coverage (show the top c % of
the set by its own score): coverage, precision of the shown suggestions, accepted-per-shown (mean
accepted share of a shown suggestion: 1 when it is the truth, else the true change's correct prefix
share; 0 in a no-edit case), no-edit correctness, plus AUROC and each gate's deployed rule. Optionally the data set's held-out self-play outputs (label = exact match).
The reward's cost is measured against the generation it gates (same request, cached prompt).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from edit_server.cli.align_common import edit_prompt, problem_of
from edit_server.selectivity import gate


def register_cli(a: argparse._SubParsersAction) -> None:
    m = a.add_parser("measure", help="before/after KTO and confidence vs KTO gate on held-out data")
    m.add_argument("--adapter", type=Path, required=True, help="KTO adapter (path without suffix)")
    m.add_argument("--data", type=Path, default=None, help="`align data` dir: its training groups are "
                   "excluded from the HumanEval sample; its held-out self-play outputs are scored too")
    m.add_argument("--model", default="smollm2-bd3")
    m.add_argument("--device", default="auto")
    m.add_argument("--threads", type=int, default=0)
    m.add_argument("--split", default="single-line")
    m.add_argument("--limit", type=int, default=50, help="HumanEval tasks (seeded sample; 0 = none)")
    m.add_argument("--cases", type=Path, action="append", default=[], metavar="FILE",
                   help="held-out edit cases (`eval replay` cases.jsonl, next-edit fixtures), repeatable")
    m.add_argument("--cases-language", default="", help="only cases of this language (e.g. python)")
    m.add_argument("--cases-limit", type=int, default=0, help="first N cases of each file (0 = all)")
    m.add_argument("--seed", type=int, default=7)
    m.add_argument("--max-tokens", type=int, default=32)
    m.add_argument("--max-prompt", type=int, default=512,
                   help="cases: prompt tokens (the file is trimmed far from the cursor, as `align data` does)")
    m.add_argument("--coverage", type=float, nargs="+", default=[0.5, 0.25])
    m.add_argument("--selfplay-limit", type=int, default=200)
    m.add_argument("--out", type=Path, default=Path("runs/kto-measure"))
    m.add_argument("--no-progress", action="store_true")
    m.set_defaults(func=run_measure)


# ---- metrics --------------------------------------------------------------------------------------
def at_coverage(scores: list[float], labels: list[bool], coverage: float) -> float | None:
    """Precision of the top ``coverage`` share by score (stable: earlier items win ties)."""
    k = round(coverage * len(scores))
    if k == 0:
        return None
    top = sorted(range(len(scores)), key=lambda i: -scores[i])[:k]
    return sum(labels[i] for i in top) / k


def auroc(scores: list[float], labels: list[bool]) -> float | None:
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def gate_rows(name: str, items: list[dict[str, Any]], coverages: list[float],
              thresholds: dict[str, float | None] | None = None) -> list[dict[str, Any]]:
    """Per gate: AUROC, precision at equal coverages, and (``thresholds``: the deployed rule — the
    confidence gate's ``gate.threshold``, the reward calibration's threshold) shown share + precision."""
    labels = [bool(x["ok"]) for x in items]
    rows = []
    for gname, key in (("confidence", "confidence"), ("KTO reward", "reward")):
        scores = [float(x[key]) for x in items]
        row: dict[str, Any] = {"set": name, "gate": gname, "n": len(items),
                               "positives": sum(labels), "auroc": auroc(scores, labels)}
        for c in coverages:
            row[f"precision@{c:.0%}"] = at_coverage(scores, labels, c)
        t = (thresholds or {}).get(key)
        shown = [y for s, y in zip(scores, labels, strict=True) if t is not None and s >= t]
        row["threshold"] = t
        row["shown@threshold"] = len(shown) / len(items) if t is not None and items else None
        row["precision@threshold"] = sum(shown) / len(shown) if shown else None
        rows.append(row)
    return rows


def _top(items: list[dict[str, Any]], key: str, coverage: float) -> set[int]:
    """Indices a gate shows at ``coverage``: the top round(coverage × n) of the items that have a
    suggestion, by ``key`` (stable: earlier items win ties)."""
    k = round(coverage * len(items))
    cand = [i for i, x in enumerate(items) if x.get("has", True)]
    return set(sorted(cand, key=lambda i: -float(items[i][key]))[:k])


def shown_metrics(items: list[dict[str, Any]], shown: set[int]) -> dict[str, float | None]:
    """Coverage, precision of the shown, accepted-per-shown and no-edit correctness when ``shown``
    are the suggestions the gate lets through (items: ``ok``, optional ``share``, ``quiet``)."""
    quiet = [i for i, x in enumerate(items) if x.get("quiet")]
    n = len(shown)
    return {"coverage": n / len(items) if items else None,
            "precision": sum(bool(items[i]["ok"]) for i in shown) / n if n else None,
            "accepted/shown": sum(float(items[i].get("share", items[i]["ok"])) for i in shown) / n if n else None,
            "no-edit correct": sum(i not in shown for i in quiet) / len(quiet) if quiet else None}


def deployed(x: dict[str, Any], confidence: float, reward: float | dict[str, float] | None) -> tuple[bool, bool]:
    """(confidence gate shows, KTO gate shows) ``x`` under the served rules: confidence ≥ ``confidence``;
    reward ≥ the calibrated threshold of its kind, the confidence rule where there is none
    (`kto_gate.decide`)."""
    conf = bool(x.get("has", True)) and float(x["confidence"]) >= confidence
    t = reward.get(x.get("kind", "fim")) if isinstance(reward, dict) else reward
    return conf, (conf if t is None else bool(x.get("has", True)) and float(x["reward"]) >= t)


def coverage_rows(name: str, items: list[dict[str, Any]], coverages: list[float],
                  thresholds: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Confidence gate vs KTO gate at equal coverage, and (``thresholds``: {"confidence": τ, "reward":
    threshold, {kind: threshold} or None}) each at its deployed rule."""
    rows = []
    for g, (gname, key) in enumerate((("confidence", "confidence"), ("KTO reward", "reward"))):
        for c in coverages:
            rows.append({"set": name, "gate": gname, "at": f"coverage {c:.0%}",
                         **shown_metrics(items, _top(items, key, c))})
        if thresholds is not None:
            shown = {i for i, x in enumerate(items)
                     if deployed(x, thresholds["confidence"], thresholds.get("reward"))[g]}
            rows.append({"set": name, "gate": gname, "at": "deployed rule", **shown_metrics(items, shown)})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    fmt = lambda v: "–" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


# ---- run ------------------------------------------------------------------------------------------
def _share(got: str, want: str, exact: bool) -> float:
    """Accepted share of a suggestion: 1 when exact, else its correct prefix of the truth (stripped)."""
    from engine.textdiff import common_prefix

    g, w = got.strip(), want.strip()
    return 1.0 if exact or g == w else (common_prefix(g, w) / len(w) if w else 0.0)


def read_heldout_cases(files: list[Path], trained: set[str], limit: int = 0,
                       language: str = "") -> tuple[list[Any], int]:
    """Cases of ``files`` (of ``language`` when given; the first ``limit`` of each file) whose group
    (``repo:REPO:PATH`` as `align_data.from_cases` names it) is not a training group; returns (cases,
    number skipped as trained on). Without ``files`` nothing is imported: evals.cases needs msgspec, which
    the GPU image lacks (the window's measure passes none; real held-out cases are measured here, after
    it)."""
    out: list[Any] = []
    skipped = 0
    if not files:
        return out, skipped
    from evals.cases import read_cases

    for f in files:
        cases = [c for c in read_cases(f) if not language or c.language == language][: limit or None]
        for c in cases:
            if f"repo:{c.meta.get('repo', f.parent.name)}:{c.path}" in trained:
                skipped += 1
            else:
                out.append(c)
    return out, skipped


def _cases(eng: Any, cases: list[Any], args: argparse.Namespace, scorer: Any, prog: Any) -> list[dict]:
    """Engine-direct run of edit cases: FIM through the server's FIM filters, next edit on the server's
    default editable region; judged as `eval cases` judges them. None: nothing imported (the settings and the
    judge need msgspec, which the GPU image lacks)."""
    if not cases:
        return []
    from edit_server.core.requests import FimRequest
    from edit_server.core.settings import Gate, Settings
    from edit_server.selectivity.select import diff_edits, fim_result, is_single_line
    from engine import EditPrompt, FimPrompt
    from engine.train.kto.records import fit_prompt
    from evals.cases import Edit, judge

    open_gate = Settings(gate=Gate(enabled=False))  # filters only: every gate decides afterwards
    out = []
    for c in prog(cases):
        text, off, key = c.files[c.path], c.cursor.offset, f"measure:case:{c.id}"
        t0 = time.perf_counter()
        prompt: Any
        if c.kind == "fim":
            prompt = FimPrompt(text[:off], text[off:], path=c.path, history=tuple(c.history))
            prompt = fit_prompt(eng.tokenizer, prompt, args.max_prompt) or prompt
            req = FimRequest("measure", c.path, text, 0, off)
            res = eng.infill(prompt, max_tokens=args.max_tokens, single_line=is_single_line(req), cache_key=key)
            sug = fim_result(req, res.text, res.confidences, open_gate)
            edits = [Edit(c.path, off, off, sug.text)] if sug is not None else []
        else:
            d, start, _ = edit_prompt(text, off, c.path, list(c.history))
            prompt = EditPrompt(d["before"], d["region"], d["after"], d["cursor"], path=c.path,
                                history=tuple(c.history))
            prompt = fit_prompt(eng.tokenizer, prompt, args.max_prompt) or prompt  # the region stays whole
            res = eng.rewrite(prompt, cache_key=key)
            new = gate.clean_edit(prompt.region, res.text)
            edits = [Edit(c.path, e.start, e.end, e.text) for e in diff_edits(prompt.region, new, start)]
        gen_ms = (time.perf_counter() - t0) * 1e3
        j = judge(c, edits)
        item = {"id": c.id, "kind": "fim" if c.kind == "fim" else "edit", "quiet": c.expected is None,
                "category": c.meta.get("category", ""), "has": j.shown, "ok": j.accepted,
                "share": j.partial if j.shown else 0.0, "correct": j.correct,
                "confidence": gate.score(res.confidences), "gen_ms": gen_ms, "prompt": prompt, "text": res.text}
        if scorer is not None and res.tokens:
            rw = (scorer.score_fim if c.kind == "fim" else scorer.score_edit)(prompt, res, cache_key=key)
            item.update(reward=rw.score, reward_ms=rw.ms, cached=rw.cached)
        out.append(item)
    return out


def _case_quality(name: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    edit = [x for x in items if not x["quiet"]]
    quiet = [x for x in items if x["quiet"]]
    return {"set": name, "n": len(items), "suggested": _mean(items, "has"),
            "accept rate": _mean(edit, "ok"),
            "partial": sum(x["share"] for x in edit) / len(edit) if edit else None,
            "no-edit correct (no gate)": _mean(quiet, "correct")}


def _humaneval(eng: Any, tasks: list[Any], args: argparse.Namespace, scorer: Any, prog: Any) -> list[dict]:
    from engine import FimPrompt
    from evals.humaneval import fix_middle, score
    from evals.sandbox import Limits

    out = []
    for t in prog(tasks):
        prompt = FimPrompt(t.prompt, t.suffix, path=f"{t.entry_point}.py")
        t0 = time.perf_counter()
        res = eng.infill(prompt, max_tokens=args.max_tokens, single_line=args.split == "single-line",
                         cache_key=f"measure:{t.task_id}")
        gen_ms = (time.perf_counter() - t0) * 1e3
        middle = fix_middle(args.split, res.text, t.prompt)
        checked = score(t, middle, Limits(timeout_s=10.0, cpu_s=11))
        item = {"id": t.task_id, "middle": middle, "ok": bool(checked["passed"]), "exact": checked["exact"],
                "has": bool(middle.strip()), "share": _share(middle, t.canonical_solution, checked["exact"]),
                "confidence": gate.score(res.confidences), "gen_ms": gen_ms, "prompt": prompt,
                "text": res.text}
        if scorer is not None:  # the gate's coupled forward pair on the cached prompt
            rw = scorer.score_fim(prompt, res, cache_key=f"measure:{t.task_id}")
            item.update(reward=rw.score, reward_ms=rw.ms, cached=rw.cached)
        out.append(item)
    return out


def run_measure(args: argparse.Namespace) -> int:
    import torch

    from engine import Engine
    from engine.loading.stacked import AlignedEngine
    from engine.reward import RewardScorer
    from engine.train.kto.records import gate_kind, prompt_from_dict, read_set
    from evals.datasets import load_humaneval

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)
    prog = (lambda it: it) if args.no_progress else _tqdm
    trained = set()
    if args.data is not None:
        trained = {r.group for r in read_set(args.data, "train")}
    tasks = [t for t in load_humaneval(args.split, seed=args.seed)
             if f"humaneval:{problem_of(t.task_id)}" not in trained][: args.limit] if args.limit else []
    cases, skipped = read_heldout_cases(args.cases, trained, args.cases_limit, args.cases_language)
    eng = Engine.load(args.model, device=args.device, fast_cpu=False)
    before = _humaneval(eng, tasks, args, None, prog)
    before_c = _cases(eng, cases, args, None, prog)
    aligned = AlignedEngine.from_engine(eng, args.adapter)
    scorer = RewardScorer(aligned)
    for item in prog(before + [x for x in before_c if x["has"]]):  # the aligned model's reward on the reference's outputs
        item["reward"] = scorer.score_text(item["prompt"], item["text"]).score
    after = _humaneval(aligned, tasks, args, scorer, prog)
    after_c = _cases(aligned, cases, args, scorer, prog)
    from edit_server.selectivity.kto_gate import calibration_for

    cal = calibration_for(args.adapter)
    rows: list[dict[str, Any]] = []
    gates: list[dict[str, Any]] = []
    at_cov: list[dict[str, Any]] = []
    if tasks:
        rows += [{"set": f"HumanEval {args.split}, before (reference)", "n": len(before),
                  "pass@1": _mean(before, "ok"), "exact": _mean(before, "exact")},
                 {"set": f"HumanEval {args.split}, after (KTO)", "n": len(after),
                  "pass@1": _mean(after, "ok"), "exact": _mean(after, "exact")}]
        th = {"confidence": 0.5, "reward": cal.thresholds.get("fim") if cal else None}
        gates += gate_rows("HumanEval, reference outputs", before, args.coverage, th)
        gates += gate_rows("HumanEval, aligned outputs", after, args.coverage, th)
        at_cov += coverage_rows("HumanEval, reference outputs", before, args.coverage, th)
        at_cov += coverage_rows("HumanEval, aligned outputs", after, args.coverage, th)
    if cases:
        for x in before_c + after_c:
            x.setdefault("reward", float("-inf"))  # no output: nothing to show, never in a gate's top
        rows += [_case_quality("cases, before (reference)", before_c), _case_quality("cases, after (KTO)", after_c)]
        th_c = {"confidence": 0.5, "reward": cal.thresholds if cal else None}
        for name, items in (("cases, reference outputs", before_c), ("cases, aligned outputs", after_c)):
            gates += gate_rows(name, [x for x in items if x["has"]], args.coverage)
            at_cov += coverage_rows(name, items, args.coverage, th_c)
    if args.data is not None and args.selfplay_limit:
        held = [r for r in read_set(args.data, "heldout") if r.source == "selfplay"][: args.selfplay_limit]
        sp = [{"ok": r.label, "confidence": float(r.meta.get("score") or 0.0), "kind": gate_kind(r.kind),
               "reward": scorer.score_text(prompt_from_dict(r.prompt), r.completion).score} for r in prog(held)]
        if sp:
            gates += gate_rows("self-play held-out, reference outputs", sp, args.coverage)
            for kind in ("fim", "edit"):  # per gate kind, with its own calibrated threshold
                part = [x for x in sp if x["kind"] == kind]
                if part:
                    t = {"confidence": 0.5, "reward": cal.thresholds.get(kind) if cal else None}
                    gates += gate_rows(f"self-play held-out {kind}", part, args.coverage, t)
    timed = [x for x in after + after_c if "reward_ms" in x]
    cost = reward_cost(timed)
    gen, rew = cost["generation_ms_mean"], cost["reward_ms_mean"]
    cost["by_set"] = {name: reward_cost(part) for name, part in (
        ("HumanEval", [x for x in after if "reward_ms" in x]),
        ("cases fim", [x for x in after_c if "reward_ms" in x and x["kind"] == "fim"]),
        ("cases edit", [x for x in after_c if "reward_ms" in x and x["kind"] == "edit"])) if part}
    args.out.mkdir(parents=True, exist_ok=True)
    keep = [{k: v for k, v in x.items() if k != "prompt"} for x in before + after]
    keep_c = [{k: v for k, v in x.items() if k != "prompt"} for x in before_c + after_c]
    (args.out / "measure.json").write_text(json.dumps(
        {"quality": rows, "gates": gates, "at_coverage": at_cov, "cost": cost, "items": keep, "case_items": keep_c,
         "tasks": [t.task_id for t in tasks], "cases": [c.id for c in cases], "cases_skipped": skipped},
        indent=1))
    ratio = f"{cost['ratio']:.1%}" if cost["ratio"] is not None else "–"
    by_set = "; ".join(f"{k}: {c['reward_ms_mean']:.0f} / {c['generation_ms_mean']:.0f} ms = {c['ratio']:.1%} "
                       f"(median per item {c['ratio_median']:.1%}, n {c['n']})" for k, c in cost["by_set"].items())
    md = "\n\n".join([markdown(rows), markdown(gates), markdown(at_cov),
                      f"reward cost: {rew:.0f} ms vs generation {gen:.0f} ms = {ratio} "
                      f"({cost['cached']}/{cost['n']} on the cached prompt); {by_set}"])
    (args.out / "measure.md").write_text(md + "\n")
    print(md)
    return 0


def reward_cost(timed: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean reward and generation time of the scored outputs, their ratio and the median per-item ratio."""
    import statistics

    gen = sum(x["gen_ms"] for x in timed) / max(1, len(timed))
    rew = sum(x["reward_ms"] for x in timed) / max(1, len(timed))
    per = [x["reward_ms"] / x["gen_ms"] for x in timed if x["gen_ms"] > 0]
    return {"generation_ms_mean": gen, "reward_ms_mean": rew, "ratio": rew / gen if gen else None,
            "ratio_median": statistics.median(per) if per else None,
            "cached": sum(bool(x.get("cached")) for x in timed), "n": len(timed)}


def _mean(items: list[dict[str, Any]], key: str) -> float | None:
    return sum(bool(x[key]) for x in items) / len(items) if items else None


def _tqdm(it: Any) -> Any:
    from tqdm import tqdm

    return tqdm(it, file=sys.stderr, desc="measure", dynamic_ncols=True)
