"""Aggregate per-case records into the numbers reports show."""

from __future__ import annotations

import difflib
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any


def normalize_ws(text: str) -> str:
    """Whitespace-normalised text: trailing spaces per line dropped, blank lines dropped."""
    return "\n".join(ln.rstrip() for ln in text.splitlines() if ln.strip())


def changed_lines(old: str, new: str) -> Counter[tuple[str, str]]:
    """The lines a change removes (``-``) and adds (``+``), whitespace-stripped, blank lines left out."""
    a = [ln.strip() for ln in old.splitlines() if ln.strip()]
    b = [ln.strip() for ln in new.splitlines() if ln.strip()]
    out: Counter[tuple[str, str]] = Counter()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.update(("-", x) for x in a[i1:i2])
            out.update(("+", x) for x in b[j1:j2])
    return out


def line_f1(files: dict[str, str], got: dict[str, str], want: dict[str, str]) -> float:
    """Line-level F1 of the diff: the suggestion's removed/added lines against the true change's."""
    g: Counter[tuple[str, str, str]] = Counter()
    w: Counter[tuple[str, str, str]] = Counter()
    for p, old in files.items():
        g.update({(p, *k): v for k, v in changed_lines(old, got.get(p, old)).items()})
        w.update({(p, *k): v for k, v in changed_lines(old, want.get(p, old)).items()})
    hit = sum((g & w).values())
    if not hit:
        return 0.0
    prec, rec = hit / sum(g.values()), hit / sum(w.values())
    return 2 * prec * rec / (prec + rec)


def percentile(xs: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def summarize_humaneval(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """pass@1 and friends; a task whose check could not run (status "error") counts as failed."""
    lat = [r["latency_ms"] for r in records if r.get("latency_ms") is not None]
    tpf = [r["tokens_per_forward"] for r in records if r.get("tokens_per_forward") is not None]
    return {
        "n": len(records),
        "pass@1": _rate(sum(bool(r.get("passed")) for r in records), len(records)),
        "exact_match": _rate(sum(bool(r.get("exact")) for r in records), len(records)),
        "timeouts": sum(r.get("status") == "timeout" for r in records),
        "tokens_per_forward": _mean(tpf),
        "mean_tokens": _mean([r["tokens"] for r in records if r.get("tokens") is not None]),
        "mean_steps": _mean([r["steps"] for r in records if r.get("steps") is not None]),
        "latency_ms_p50": percentile(lat, 50),
        "latency_ms_p95": percentile(lat, 95),
        "errors": sum(bool(r.get("error")) for r in records),
        "shown_rate": _rate(sum(bool(r.get("shown")) for r in records), len(records))
        if any("shown" in r for r in records) else None,  # via LSP only
        **({"mean_remasked": _mean([r["remasked"] for r in records if "remasked" in r])}
           if any("remasked" in r for r in records) else {}),  # SamplerConfig.remask on
    }


def summarize_cases(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Shown-rate, accept rate, precision when shown, no-edit correctness, latency. Bad cases (that
    could not be run: ``bad_case``) are counted apart, not in the rates."""
    bad = sum(bool(r.get("bad_case")) for r in records)
    records = [r for r in records if not r.get("bad_case")]
    edit = [r for r in records if not r["quiet_case"]]
    quiet = [r for r in records if r["quiet_case"]]
    shown = [r for r in records if r["shown"]]
    lat = [r["latency_ms"] for r in records if r.get("latency_ms") is not None]
    return {
        "n": len(records), "edit_cases": len(edit), "quiet_cases": len(quiet),
        "shown_rate": _rate(len(shown), len(records)),
        "accept_rate": _rate(sum(r["accepted"] for r in edit), len(edit)),
        "partial_mean": _mean([r["partial"] for r in edit]),
        "line_f1_mean": _mean([r.get("line_f1", 0.0) for r in edit]),
        "precision_when_shown": _rate(sum(r["accepted"] for r in shown), len(shown)),
        "no_edit_correct": _rate(sum(r["correct"] for r in quiet), len(quiet)),
        "latency_ms_p50": percentile(lat, 50),
        "latency_ms_p95": percentile(lat, 95),
        "errors": sum(bool(r.get("error")) for r in records),
        "bad_cases": bad,
    }


def breakdown(records: Sequence[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[str(r.get(key))].append(r)
    return {k: summarize_cases(v) for k, v in sorted(groups.items())}


def gate_sweep(records: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """Precision vs coverage as a show threshold on the server's ``score`` sweeps upwards.

    At threshold t a suggestion is shown iff it was shown and ``score >= t``. coverage = shown / all
    cases; precision = accepted / shown (suggestions in quiet cases count as wrong). Suggestions
    without a score are left out of the sweep.
    """
    scored = [r for r in records if r["shown"] and r.get("score") is not None]
    n = len(records)
    if not scored or not n:
        return []
    out = []
    for t in sorted({float(r["score"]) for r in scored}):
        kept = [r for r in scored if r["score"] >= t]
        out.append({"threshold": t, "coverage": len(kept) / n,
                    "precision": sum(r["accepted"] for r in kept) / len(kept),
                    "shown": float(len(kept))})
    return out


def gate_view(records: Sequence[dict[str, Any]], threshold: float | None,
              candidates: bool = False) -> list[dict[str, Any]]:
    """The records of a gate-off run as the confidence gate would have left them: a suggestion stays shown
    iff its score reaches ``threshold`` and it introduces no syntax error (``syntax_error``, the gate's
    rule); ``threshold`` None: no gate. ``candidates``: also hidden when the server's candidate filter
    drops it (``candidate``, `edit_server.cli.serving_view`, plugged in by `edit-server eval`). A hidden suggestion is a miss for an edit case and
    a correct silence for a quiet one."""
    out = []
    for r in records:
        keep = bool(r.get("shown")) and (threshold is None or r.get("score") is not None
                                         and r["score"] >= threshold and not r.get("syntax_error"))
        keep = keep and not (candidates and r.get("candidate"))
        if r.get("shown") and not keep:
            r = {**r, "shown": False, "accepted": False, "partial": 0.0, "line_f1": 0.0,
                 "correct": bool(r.get("quiet_case"))}
        out.append(r)
    return out
