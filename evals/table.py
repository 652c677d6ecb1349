"""`edit-server eval table DIR`: one Markdown table of every report under DIR (for docs/QUALITY.md);
``--replay``: the next-edit replay table of docs/QUALITY.md's issue-25 section, per run (`replay_table`), with
who wrote what was shown (the model or one of the server's rules: `origin_line`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evals.report import _fmt
from evals.store import read_records

HE_COLS = ["n", "pass@1", "exact_match", "tokens_per_forward", "latency_ms_p50", "latency_ms_p95"]
CASE_COLS = ["n", "shown_rate", "accept_rate", "partial_mean", "precision_when_shown",
             "no_edit_correct", "latency_ms_p50", "latency_ms_p95"]


def tables(root: Path) -> str:
    he: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    cs: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    for rep in sorted(root.glob("*/report.json")):
        d = json.loads(rep.read_text())
        cfg, summ = d.get("config", {}), d.get("summary", {})
        (he if cfg.get("kind") == "humaneval-infill" else cs).append((rep.parent.name, cfg, summ))
    out: list[str] = []
    if he:
        out += ["| run | split | runner | model | steps | " + " | ".join(HE_COLS) + " |",
                "|---" * (5 + len(HE_COLS)) + "|"]
        for name, cfg, s in he:
            out.append(f"| {name} | {cfg.get('split')} | {cfg.get('runner')} | {cfg.get('model')} | "
                       f"{cfg.get('steps_mode')} | " + " | ".join(_fmt(s.get(c)) for c in HE_COLS) + " |")
        out.append("")
    if cs:
        out += ["| run | model | gate | " + " | ".join(CASE_COLS) + " |", "|---" * (3 + len(CASE_COLS)) + "|"]
        for name, cfg, s in cs:
            out.append(f"| {name} | {cfg.get('model')} | {'on' if cfg.get('gate') else 'off'} | "
                       + " | ".join(_fmt(s.get(c)) for c in CASE_COLS) + " |")
        out.append("")
    return "\n".join(out)


REPLAY_HEAD = ("| variant | n | next-edit exact | next-edit line F1 | next-edit shown | no-edit correct: elsewhere "
               "| no-edit correct: done | no-edit correct: all | shown rate | precision when shown |\n"
               "|---|---|---|---|---|---|---|---|---|---|")


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def replay_row(variant: str, summary: dict[str, Any], by_category: dict[str, Any]) -> str:
    """One row of the replay table: next-edit exact / line F1 / shown, no-edit correct per quiet kind."""
    ne = by_category.get("next-edit", {})
    exact = f"{_pct(ne.get('accept_rate'))} ({round((ne.get('accept_rate') or 0) * ne.get('n', 0))}/{ne.get('n', 0)})"
    f1 = "–" if ne.get("line_f1_mean") is None else f"{ne['line_f1_mean']:.2f}"
    return (f"| {variant} | {summary.get('n')} | {exact} | {f1} | {_pct(ne.get('shown_rate'))} | "
            f"{_pct(by_category.get('elsewhere', {}).get('no_edit_correct'))} | "
            f"{_pct(by_category.get('done', {}).get('no_edit_correct'))} | {_pct(summary.get('no_edit_correct'))} | "
            f"{_pct(summary.get('shown_rate'))} | {_pct(summary.get('precision_when_shown'))} |")


def origin_line(results: Path) -> str | None:
    """Who wrote the shown suggestions of a replay run (``results.jsonl``: each record's ``origin``, the
    server's `select.Candidate.origin`): ``shown by origin: repeat 6 (3 right, 1 in quiet cases); …`` —
    None without records or shown ones."""
    if not results.is_file():
        return None
    counts: dict[str, list[int]] = {}
    for r in read_records(results).values():
        if r.get("shown"):
            c = counts.setdefault(str(r.get("origin") or "unknown"), [0, 0, 0])
            c[0] += 1
            c[1] += bool(r.get("accepted"))
            c[2] += bool(r.get("quiet_case"))
    if not counts:
        return None
    parts = [f"{o} {n} ({right} right, {quiet} in quiet cases)"
             for o, (n, right, quiet) in sorted(counts.items(), key=lambda kv: -kv[1][0])]
    return "shown by origin: " + "; ".join(parts)


def replay_table(root: Path) -> str:
    """Per replay run under ``root`` (or ``root`` itself): its rows as served (gate off: every suggestion
    the server's selection kept) and with the gate's view (score ≥ threshold, no syntax error)."""
    reps = [root / "report.json"] if (root / "report.json").is_file() else sorted(root.glob("*/report.json"))
    out: list[str] = []
    for rep in reps:
        d = json.loads(rep.read_text())
        cfg = d.get("config", {})
        lat = d.get("summary", {})
        out += [f"{rep.parent.name}: {cfg.get('source')}", "", REPLAY_HEAD]
        gate = "gate on" if cfg.get("gate") else "gate off (every suggestion)"
        out.append(replay_row(gate, d.get("summary", {}), d.get("by_category", {})))
        g = d.get("gated", {}).get("gate")
        if g:
            out.append(replay_row(f"gate (score ≥ {g['threshold']}, no syntax error)", g["summary"],
                                  g["by_category"]))
        origins = origin_line(rep.parent / "results.jsonl")
        out += ["", f"latency p50 {lat.get('latency_ms_p50') or 0:,.0f} ms, p95 {lat.get('latency_ms_p95') or 0:,.0f} ms",
                *([origins] if origins else []), ""]
    return "\n".join(out)
