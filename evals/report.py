"""Reports: ``report.json`` (every case), ``summary.md``, plots (matplotlib Agg)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evals.metrics import breakdown, gate_sweep, gate_view, summarize_cases, summarize_humaneval


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def _table(rows: dict[str, dict[str, Any]], cols: Sequence[str]) -> str:
    lines = ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
    return "\n".join(lines)


def _pyplot() -> Any:
    """matplotlib's pyplot (Agg), or None where it is not installed: the report is written without plots."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_latency(records: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    plt = _pyplot()
    if plt is None:
        return

    lat = [r["latency_ms"] for r in records if r.get("latency_ms") is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(lat, bins=min(40, max(5, len(lat) // 2)) if lat else 5, color="#4477aa")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("requests")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_sweep(sweep: list[dict[str, float]], path: Path, title: str) -> None:
    plt = _pyplot()
    if plt is None:
        return

    fig, ax = plt.subplots(figsize=(5, 4))
    if sweep:
        ax.plot([s["coverage"] for s in sweep], [s["precision"] for s in sweep], marker=".")
    else:
        ax.text(0.5, 0.5, "no scored suggestions", ha="center", va="center")
    ax.set_xlabel("coverage (shown / cases)")
    ax.set_ylabel("precision (accepted / shown)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_humaneval(out: Path, config: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    summary = summarize_humaneval(records)
    (out / "report.json").write_text(json.dumps({"config": config, "summary": summary,
                                                 "cases": records}, indent=1, sort_keys=True))
    cols = ["n", "pass@1", "exact_match", "timeouts", "tokens_per_forward", "mean_steps",
            "latency_ms_p50", "latency_ms_p95", "errors"]
    md = [f"# HumanEval-infilling {config.get('split')} ({config.get('runner')})", "",
          f"model `{config.get('model')}`, device `{config.get('device')}`, steps mode "
          f"`{config.get('steps_mode')}`, seed {config.get('seed')}", "",
          _table({config.get("split", "all"): summary}, cols), "", "![latency](latency.png)", ""]
    (out / "summary.md").write_text("\n".join(md))
    _plot_latency(records, out / "latency.png", f"HumanEval {config.get('split')} latency")
    return summary


def write_cases(out: Path, config: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    summary = summarize_cases(records)
    by_lang, by_cat = breakdown(records, "language"), breakdown(records, "category")
    by_repo = breakdown(records, "repo") if any(r.get("repo") for r in records) else {}
    sweep = gate_sweep(records)
    gated: dict[str, Any] = {}
    if not config.get("gate"):  # a gate-off run: the gate's / the candidate filter's view of the suggestions
        t = config.get("gate_threshold")
        t = 0.5 if t is None else float(t)
        for name, thr, cand in (("gate", t, False), ("candidate filter", None, True),
                                ("candidate filter + gate", t, True)):
            if cand and not any("candidate" in r for r in records):
                continue
            view = gate_view(records, thr, cand)
            gated[name] = {"threshold": thr, "summary": summarize_cases(view),
                           "by_category": breakdown(view, "category"),
                           "by_repo": breakdown(view, "repo") if by_repo else {}}
    (out / "report.json").write_text(json.dumps({
        "config": config, "summary": summary, "by_language": by_lang, "by_category": by_cat,
        "by_repo": by_repo, "gated": gated, "gate_sweep": sweep, "cases": records}, indent=1, sort_keys=True))
    cols = ["n", "shown_rate", "accept_rate", "partial_mean", "line_f1_mean", "precision_when_shown",
            "no_edit_correct", "latency_ms_p50", "latency_ms_p95", "errors", "bad_cases"]
    md = [f"# Edit cases ({config.get('source')})", "",
          f"model `{config.get('model')}`"
          f"{' (adapter `' + str(config['adapter']) + '`)' if config.get('adapter') else ''}, "
          f"device `{config.get('device')}`, gate "
          f"{'on' if config.get('gate') else 'off (baseline)'}", "",
          _table({"all": summary}, cols), "", "## By category", "", _table(by_cat, cols), "",
          "## By language", "", _table(by_lang, cols), ""]
    if by_repo:
        md += ["## By repository", "", _table(by_repo, cols), ""]
    for name, g in gated.items():
        how = f"score ≥ {g['threshold']}, no syntax error introduced" if g["threshold"] is not None else \
            "retype / undo / just-left lines hidden"
        md += [f"## With the {name} ({how})", "", _table({"all": g["summary"], **g["by_category"]}, cols), ""]
        if g["by_repo"]:
            md += [_table(g["by_repo"], cols), ""]
    md += ["![latency](latency.png) ![precision vs coverage](precision_coverage.png)", ""]
    bad = [r for r in records if r.get("bad_case")]
    if bad:
        md += ["## Bad cases (not run)", "", *(f"- `{r['id']}`: {r['error']}" for r in bad), ""]
    (out / "summary.md").write_text("\n".join(md))
    _plot_latency(records, out / "latency.png", "request latency")
    _plot_sweep(sweep, out / "precision_coverage.png", "gate threshold sweep")
    return summary
