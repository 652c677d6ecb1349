"""Numbers of `edit-server bench lsp` (edit_server.cli.bench_lsp): per-kind percentiles, the AR ratio, the table."""

from __future__ import annotations

import statistics
from typing import Any

from edit_server.cli.bench_common import overrides_text

KINDS = ("load", "cold", "jump", "single-line", "empty-line", "end-of-line", "next-edit")
GOALS_MS = {"load": (3000, None), "cold": (2000, None), "single-line": (300, 800),
            "empty-line": (1000, 2000), "next-edit": (1500, 3000)}  # issue 14, 2-core CPU


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))], 1)


def summarize(samples: list[Any], calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per kind: requests sent, answered (a suggestion came back) and their latency; of the answers
    while a line is retyped (``judged``), how many type exactly what the typist was about to (``right``) or a
    correct start of it (``partly``); the latency of
    the request after a burst's last keystroke (settle); the model calls' steps and recomputed
    prompt tokens (from the server's log)."""
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        got = [s for s in samples if s.kind == kind]
        shown = [s.ms for s in got if s.shown]
        settle = [s.ms for s in got if s.final]
        mine = [c for k, c in calls if k == kind]
        rec = [float(c["prompt_tokens"] - c["cached_tokens"]) for c in mine]
        kinds[kind] = {
            "n": len(got), "answered": len(shown), "settled": len(settle), "model_calls": len(mine),
            "judged": sum(s.right is not None for s in got), "right": sum(s.right is True for s in got),
            "partly": sum(s.right is False and (s.saved or 0) > 0 for s in got),  # a correct start, not all
            "p50_ms": _pct(settle, 0.5), "p95_ms": _pct(settle, 0.95),
            "answered_p50_ms": _pct(shown, 0.5), "answered_p95_ms": _pct(shown, 0.95),
            "steps_mean": round(statistics.mean(c["steps"] for c in mine), 1) if mine else None,
            "recomputed_mean": round(statistics.mean(rec), 1) if rec else None,
            "recomputed_p50": _pct(rec, 0.5),
            "prompt_tokens_mean": round(statistics.mean(c["prompt_tokens"] for c in mine)) if mine else None,
            "prefill_ms_p50": _pct([float(c["prefill_ms"]) for c in mine], 0.5),
            "decode_ms_p50": _pct([float(c["decode_ms"]) for c in mine], 0.5),
            "tokens_per_forward": round(sum(c.get("tokens", 0) for c in mine) / max(1, sum(c["forwards"] for c in mine)),
                                        2) if mine else None,
            "finish": {f: sum(1 for c in mine if c["finish"] == f) for f in sorted({c["finish"] for c in mine})},
        }
    typing = sorted(float(c["prompt_tokens"] - c["cached_tokens"]) for k, c in calls
                    if k in ("single-line", "end-of-line"))
    return {"kinds": kinds, "keystrokes": {
        "requests": sum(1 for s in samples if s.kind in ("single-line", "end-of-line")),
        "model_calls": len(typing), "recomputed_p50": _pct(typing, 0.5), "recomputed_p95": _pct(typing, 0.95),
        "recomputed_max": typing[-1] if typing else None}}


def ratios(main: dict[str, Any], ar: dict[str, Any]) -> dict[str, float | None]:
    """AR p50 / main p50 per kind (> 1: the main decoding is faster)."""
    out: dict[str, float | None] = {}
    for k in KINDS:
        a, m = ar["kinds"][k]["p50_ms"], main["kinds"][k]["p50_ms"]
        out[k] = round(a / m, 2) if a and m else None
    return out


def _v(x: Any) -> str:
    return "-" if x is None else str(x)


def format_table(r: dict[str, Any]) -> str:
    runs = [(n, r[n]) for n in r.get("runs", ["main", "ar"]) if r.get(n)]
    lines = [f"edit-server bench lsp: model {r['model']} on {r['device']}, {r['machine'].get('cpu', '?')} "
             f"({r['machine'].get('cpu_count')} cores), files {', '.join(r['main']['files'])}, "
             f"{r['settings']['typing_ms']:.0f} ms per keystroke, gate {'on' if r['settings'].get('gate') else 'off'}"
             + overrides_text(r["machine"]) + "".join(f"; --set {kv}" for kv in r["settings"].get("set") or ()),
             "",
             "time to an answer after the user stops typing, ms (each burst's last request; awaited requests)",
             f"{'kind':<13}{'goal p50/p95':>14}" + "".join(f"{n + ' p50':>11}{n + ' p95':>11}" for n, _ in runs)
             + (f"{'AR/main':>9}" if r.get("ratio") else "")]
    for k in KINDS:
        g = GOALS_MS.get(k)
        goal = f"{g[0]}/{g[1] or '-'}" if g else "-"
        row = f"{k:<13}{goal:>14}" + "".join(f"{_v(x['kinds'][k]['p50_ms']):>11}{_v(x['kinds'][k]['p95_ms']):>11}"
                                            for _, x in runs)
        if r.get("ratio"):
            row += f"{_v(r['ratio'].get(k)):>9}"
        lines.append(row)
    for name, run in runs:
        lines += ["", f"{name} ({run['decode']}, adapter {run.get('adapter', 'shipped')}): per kind",
                  f"{'kind':<13}{'sent':>6}{'shown':>7}{'right+part':>11}{'shown p50':>11}{'calls':>7}{'steps':>7}{'recomp p50':>12}"
                  f"{'prefill p50':>13}{'decode p50':>12}{'tok/fwd':>9}  finish"]
        for k in KINDS:
            x = run["kinds"][k]
            right = f"{x['right']}+{x.get('partly', 0)}/{x['judged']}" if x.get("judged") else "-"
            lines.append(f"{k:<13}{x['n']:>6}{x['answered']:>7}{right:>11}{_v(x['answered_p50_ms']):>11}{x['model_calls']:>7}"
                         f"{_v(x['steps_mean']):>7}{_v(x['recomputed_p50']):>12}{_v(x['prefill_ms_p50']):>13}"
                         f"{_v(x['decode_ms_p50']):>12}{_v(x.get('tokens_per_forward')):>9}  "
                         + " ".join(f"{f} {n}" for f, n in (x.get("finish") or {}).items()))
        ks, mem = run["keystrokes"], run["memory"]
        lines.append(f"keystrokes: {ks['requests']} requests, {ks['model_calls']} model calls, prompt tokens "
                     f"recomputed per call p50 {ks['recomputed_p50']} / p95 {ks['recomputed_p95']} / max "
                     f"{ks['recomputed_max']}; server RSS {mem.get('rss_mb', 0):.0f} MB (peak "
                     f"{mem.get('peak_rss_mb', 0):.0f} MB)")
    lines += [f"wall {r['wall_s']} s", ""]
    return "\n".join(lines)
