"""`edit-server eval table DIR`: one Markdown table of every report under DIR (for docs/QUALITY.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evals.report import _fmt

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
