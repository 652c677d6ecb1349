"""`edit-server align measure`: before vs after KTO alignment, confidence gate vs KTO gate.

On a held-out HumanEval-infilling sample (problems that no training record comes from): the model
before alignment (reference) and after (`AlignedEngine`) generate each middle; pass@1 is the sandboxed
execution check (`evals.humaneval.score`). Each output gets both scores — the geometric-mean token
confidence and the aligned model's length-normalised implicit reward — and each gate is compared at
equal coverage (show the top c % by its score): precision of the shown suggestions, plus AUROC.
Optionally the same on the data set's held-out self-play outputs (label = exact match). The reward's
cost is measured against the generation it gates (same request, cached prompt).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from edit_server.selectivity import gate


def problem_of(task_id: str) -> str:
    """``SingleLineInfilling/HumanEval/12/L3`` → ``HumanEval/12`` (all splits share the problems)."""
    parts = task_id.split("/")
    return "/".join(parts[1:3]) if len(parts) >= 3 else task_id


def register_cli(a: argparse._SubParsersAction) -> None:
    m = a.add_parser("measure", help="before/after KTO and confidence vs KTO gate on held-out data")
    m.add_argument("--adapter", type=Path, required=True, help="KTO adapter (path without suffix)")
    m.add_argument("--data", type=Path, default=None, help="`align data` dir: its training groups are "
                   "excluded from the HumanEval sample; its held-out self-play outputs are scored too")
    m.add_argument("--model", default="default")
    m.add_argument("--device", default="auto")
    m.add_argument("--threads", type=int, default=0)
    m.add_argument("--split", default="single-line")
    m.add_argument("--limit", type=int, default=50, help="HumanEval tasks (seeded sample)")
    m.add_argument("--seed", type=int, default=7)
    m.add_argument("--max-tokens", type=int, default=32)
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


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    fmt = lambda v: "–" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


# ---- run ------------------------------------------------------------------------------------------
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
        middle = fix_middle(args.split, res.text)
        checked = score(t, middle, Limits(timeout_s=10.0, cpu_s=11))
        item = {"id": t.task_id, "middle": middle, "ok": bool(checked["passed"]), "exact": checked["exact"],
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
             if f"humaneval:{problem_of(t.task_id)}" not in trained][: args.limit]
    eng = Engine.load(args.model, device=args.device, fast_cpu=False)
    before = _humaneval(eng, tasks, args, None, prog)
    aligned = AlignedEngine.from_engine(eng, args.adapter)
    scorer = RewardScorer(aligned)
    for item in prog(before):  # the aligned model's reward on the reference's outputs
        item["reward"] = scorer.score_text(item["prompt"], item["text"]).score
    after = _humaneval(aligned, tasks, args, scorer, prog)
    rows = [{"set": f"HumanEval {args.split}, before (reference)", "pass@1": _mean(before, "ok"),
             "exact": _mean(before, "exact")},
            {"set": f"HumanEval {args.split}, after (KTO)", "pass@1": _mean(after, "ok"),
             "exact": _mean(after, "exact")}]
    from edit_server.selectivity.kto_gate import calibration_for

    cal = calibration_for(args.adapter)
    th = {"confidence": 0.5, "reward": cal.thresholds.get("fim") if cal else None}
    gates = gate_rows("HumanEval, reference outputs", before, args.coverage, th)
    gates += gate_rows("HumanEval, aligned outputs", after, args.coverage, th)
    if args.data is not None:
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
    gen = sum(x["gen_ms"] for x in after) / max(1, len(after))
    rew = sum(x["reward_ms"] for x in after) / max(1, len(after))
    cost = {"generation_ms_mean": gen, "reward_ms_mean": rew, "ratio": rew / gen if gen else None,
            "cached": sum(bool(x.get("cached")) for x in after), "n": len(after)}
    args.out.mkdir(parents=True, exist_ok=True)
    keep = [{k: v for k, v in x.items() if k != "prompt"} for x in before + after]
    (args.out / "measure.json").write_text(json.dumps({"quality": rows, "gates": gates, "cost": cost,
                                                       "items": keep, "tasks": [t.task_id for t in tasks]},
                                                      indent=1))
    md = "\n\n".join([markdown(rows), markdown(gates),
                      f"reward cost: {rew:.0f} ms vs generation {gen:.0f} ms = {cost['ratio']:.1%} "
                      f"({cost['cached']}/{cost['n']} on the cached prompt)"])
    (args.out / "measure.md").write_text(md + "\n")
    print(md)
    return 0


def _mean(items: list[dict[str, Any]], key: str) -> float | None:
    return sum(bool(x[key]) for x in items) / len(items) if items else None


def _tqdm(it: Any) -> Any:
    from tqdm import tqdm

    return tqdm(it, file=sys.stderr, desc="measure", dynamic_ncols=True)
