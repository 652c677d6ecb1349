"""Next edits in process: the model's own rewrite of replay cases, without the server (issue 25).

`edit-server eval replay` measures next edits through the real stdio server; the GPU image has neither
the server's packages nor GitPython, so a window could not tell whether its training moved next edits at
all. This runner needs only the engine: the cases are built on the CPU (`edit-server eval replay REPOS
--build-only` writes ``cases.jsonl``; gzip it for the pack) and read here as plain JSON.

Per case (``meta.category``: next-edit / elsewhere / done, `evals.replay_sessions`):

* **region**: the ``above`` lines above the cursor's line and ``below`` below it (6 / 8,
  `engine.templates.EDIT_REGION_ABOVE` / ``_BELOW``: the window the cases' truth is taken in, and the server's
  region with ``nextEdit.region`` "lines", its default);
* **prompt**: at most ``context_lines`` lines of the file on each side, the case's last ``history`` diffs
  (the model's trained count when not given), no other sections, the model's edit layout;
* **judged** like `evals.cases.judge`: *exact* when the file after the rewrite equals the file after the
  truth (whitespace-normalised), *line F1* of the changed lines; a quiet case is right when the rewrite
  changes nothing (whitespace-normalised);
* **score**: the gate's for a rewrite — the geometric mean of the confidences of the tokens that make the
  edit (`GenerateResult.changed`) — so ``precision_coverage`` shows what a show threshold would buy.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.templates import (
    DEFAULT_EDIT_LAYOUT,
    EDIT_DIFF_CHARS,
    EDIT_REGION_ABOVE,
    EDIT_REGION_BELOW,
    EditPrompt,
)
from engine.textdiff import line_span, unified_diff
from engine.types import EngineInfo
from evals.metrics import line_f1, normalize_ws, percentile

CATEGORIES = ("next-edit", "elsewhere", "done")
THRESHOLDS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Options:
    above: int = EDIT_REGION_ABOVE
    below: int = EDIT_REGION_BELOW
    context_lines: int = 60  # file lines shown on each side of the region
    history: int | None = None  # diffs in the prompt (None: the model's trained count)
    limit: int = 0  # first N cases (0 = all)
    budget_s: float = 0.0  # > 0: no new case after this many seconds (the report covers the finished ones)


def read_cases(path: Path) -> list[dict[str, Any]]:
    """Cases of a ``cases.jsonl`` (or ``.jsonl.gz``; a directory: its ``cases.jsonl``) as plain dicts."""
    if path.is_dir():
        path = path / "cases.jsonl"
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for i, r in enumerate(rows):
        missing = [k for k in ("id", "path", "files", "cursor", "meta") if k not in r]
        if missing or r["path"] not in r["files"]:
            raise ValueError(f"{path}: case {i + 1} ({r.get('id', '?')}): missing {missing or ['files[path]']}")
    return rows


def gate_score(confidences: list[float]) -> float:
    """Geometric mean (the serving gate's score of a rewrite's changed tokens); 1.0 for none."""
    if not confidences:
        return 1.0
    return math.exp(sum(math.log(max(c, 1e-9)) for c in confidences) / len(confidences))


def prompt_of(case: dict[str, Any], opts: Options, layout: str, history: int) -> tuple[Any, int, int]:
    """The edit prompt of a case and its region's span in the file."""
    text = case["files"][case["path"]]
    cursor = int(case["cursor"]["offset"])
    ra, rb = line_span(text, cursor, opts.above, opts.below)
    n = opts.context_lines  # whole lines above the region's first, below its last
    pa = line_span(text, ra, n, 0)[0]
    pb = line_span(text, rb, 0, n - 1)[1] if n > 0 else rb
    diffs = tuple(d[:EDIT_DIFF_CHARS] for d in case.get("history", [])[-history:]) if history else ()
    return EditPrompt(text[pa:ra], text[ra:rb], text[rb:pb], cursor - ra, case["path"], diffs,
                      layout=layout), ra, rb


def judge(case: dict[str, Any], ra: int, rb: int, new_region: str) -> dict[str, Any]:
    """exact / line F1 for a next-edit case, right (silence) for a quiet one; ``shown``: the rewrite
    changes the region."""
    path = case["path"]
    text = case["files"][path]
    got = text[:ra] + new_region + text[rb:]
    shown = normalize_ws(new_region) != normalize_ws(text[ra:rb])
    expected = case.get("expected")
    if not expected:
        return {"shown": shown, "right": not shown, "exact": None, "f1": None}
    want = _with_truth(text, path, expected)
    exact = shown and normalize_ws(got) == normalize_ws(want)
    f1 = 1.0 if exact else line_f1({path: text}, {path: got}, {path: want}) if shown else 0.0
    return {"shown": shown, "right": exact, "exact": exact, "f1": f1}


def judge_jump(case: dict[str, Any], start: int, end: int, new: str) -> bool:
    """Whether a suggestion outside the editable region (a jump target: ``text[start:end]`` → ``new``)
    makes exactly one of the hunks still pending in the file (``meta.pending``, `evals.replay_sessions`):
    the file after it equals the file after that hunk, whitespace-normalised."""
    path = case["path"]
    text = case["files"][path]
    got = normalize_ws(text[:start] + new + text[end:])
    for h in (case.get("meta") or {}).get("pending") or []:
        a, b = int(h["start"]), int(h["end"])
        if a <= end and start <= max(b, a) and got == normalize_ws(text[:a] + h["text"] + text[b:]):
            return True
    return False


DIFF_CHARS = 2000  # of each diff kept in a record
NEW_CHARS = 20000  # a shown rewrite up to this long is kept in its record (a region is 15 lines)


def diffs(case: dict[str, Any], ra: int, rb: int, new_region: str) -> dict[str, str]:
    """The rewrite as a unified diff of the region (``diff``) and, for a next-edit case, the truth's
    (``want``), each at most `DIFF_CHARS` characters."""
    path = case["path"]
    text = case["files"][path]
    first = text.count("\n", 0, ra)
    out = {"diff": unified_diff(path, text[ra:rb], new_region, first_line=first)[:DIFF_CHARS]}
    expected = case.get("expected") or []
    if any(e["path"] == path for e in expected):
        out["want"] = unified_diff(path, text, _with_truth(text, path, expected))[:DIFF_CHARS]
    return out


def _with_truth(text: str, path: str, expected: list[dict[str, Any]]) -> str:
    """``text`` (the file at ``path``) with the case's expected edits of that file applied."""
    for e in sorted(expected, key=lambda e: e["start"], reverse=True):
        if e["path"] == path:
            text = text[:e["start"]] + e["text"] + text[e["end"]:]
    return text


def run(cases: list[dict[str, Any]], eng: Any, opts: Options, out: Path,
        progress: Callable[[Iterable], Iterable] = iter) -> dict[str, Any]:
    """Each case through ``eng.rewrite``; ``out/results.jsonl`` (one record per case) and
    ``out/report.json`` (`summarize`). An engine failure is a recorded miss, not a crash."""
    info = EngineInfo.of(getattr(eng, "info", None))
    layout = info.edit_layout or DEFAULT_EDIT_LAYOUT
    history = opts.history if opts.history is not None else int(info.edit_history or 0)
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    t_end = time.monotonic() + opts.budget_s if opts.budget_s > 0 else math.inf
    with open(out / "results.jsonl", "w", encoding="utf-8") as f:
        for case in progress(cases[:opts.limit] if opts.limit else cases):
            if time.monotonic() >= t_end:
                break
            prompt, ra, rb = prompt_of(case, opts, layout, history)
            meta = case.get("meta", {})
            rec: dict[str, Any] = {"id": case["id"], "category": meta.get("category"), "repo": meta.get("repo")}
            t0 = time.perf_counter()
            try:
                res = eng.rewrite(prompt, cache_key=f"next-edit:{case['id']}")
            except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                rec.update(error=f"{type(e).__name__}: {e}", shown=False, right=False,
                           exact=False if case.get("expected") else None, f1=0.0 if case.get("expected") else None)
            else:
                rec.update(judge(case, ra, rb, res.text))
                if rec["shown"]:
                    # what the model changed and what was due (readable without rerunning), and the rewrite
                    # itself (`edit-server eval rules --rewrites` joins it with the rules, as served)
                    rec.update(diffs(case, ra, rb, res.text))
                    if len(res.text) <= NEW_CHARS:
                        rec["new"] = res.text
                rec.update(score=gate_score(list(res.changed or res.confidences)), tokens=len(res.tokens),
                           steps=res.steps, forwards=res.forwards, prompt_tokens=res.prompt_tokens, finish_reason=res.finish_reason)
            rec["latency_ms"] = (time.perf_counter() - t0) * 1000
            recs.append(rec)
            f.write(json.dumps(rec) + "\n")
            f.flush()
    summary = summarize(recs)
    report = {"summary": summary, "options": {**opts.__dict__, "history": history, "layout": layout},
              "model": {k: info.get(k) for k in ("model", "label", "adapter", "device", "dtype") if k in info}}
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


def summarize(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Next-edit exact / line F1, no-edit correct per quiet category, shown rate, precision when shown,
    latency, and precision / coverage per show threshold (right = an exact next edit)."""
    by = {c: [r for r in recs if r.get("category") == c] for c in CATEGORIES}
    # a curated set's categories name their kind first (``next-edit/below``, ``no-edit/noise``)
    nxt = [r for r in recs if str(r.get("category") or "").split("/")[0] == "next-edit"]
    quiet = [r for r in recs if r not in nxt]
    shown = [r for r in recs if r.get("shown")]

    def share(xs: list[Any]) -> float | None:
        return sum(bool(x) for x in xs) / len(xs) if xs else None

    curve = []
    for t in THRESHOLDS:
        s = [r for r in shown if (r.get("score") or 0.0) >= t]
        curve.append({"threshold": t, "shown": len(s), "right": sum(bool(r.get("exact")) for r in s),
                      "precision": share([r.get("exact") for r in s]),
                      "next_edit_exact": sum(bool(r.get("exact")) for r in s) / len(nxt) if nxt else None,
                      "quiet_shown": sum(r not in nxt for r in s)})
    lat = [r["latency_ms"] for r in recs if "latency_ms" in r]
    toks, steps = sum(r.get("tokens", 0) for r in recs), sum(r.get("steps", 0) for r in recs)
    cats = sorted({str(r.get("category")) for r in recs})
    per = {c: {"n": len(rs), "right": sum(bool(r.get("right")) for r in rs), "shown": sum(bool(r.get("shown")) for r in rs),
               "f1": (sum(r.get("f1") or 0.0 for r in rs) / len(rs)) if c.split("/")[0] == "next-edit" else None}
           for c in cats for rs in [[r for r in recs if str(r.get("category")) == c]]}
    return {"n": len(recs), "counts": {c: len(v) for c, v in by.items()}, "by_category": per,
            "errors": sum("error" in r for r in recs),
            "next_edit_exact": share([r.get("exact") for r in nxt]),
            "next_edit_f1": sum(r.get("f1") or 0.0 for r in nxt) / len(nxt) if nxt else None,
            "next_edit_shown": share([r.get("shown") for r in nxt]),
            "no_edit_correct": {c: share([r.get("right") for r in by[c]]) for c in ("elsewhere", "done")}
            | {"all": share([r.get("right") for r in quiet])},
            "shown_rate": share([r.get("shown") for r in recs]),
            "precision_when_shown": share([r.get("exact") for r in shown]),
            "latency_ms_p50": percentile(lat, 50), "latency_ms_p95": percentile(lat, 95),
            "tokens_per_step": toks / steps if steps else None,
            "precision_coverage": curve}


def format_report(report: dict[str, Any], title: str) -> str:
    s = report["summary"]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f} %"

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f}"

    q = s["no_edit_correct"]
    lines = [f"{title}: {s['n']} cases {s['counts']}, errors {s['errors']}",
             f"next-edit exact {pct(s['next_edit_exact'])}, line F1 {s['next_edit_f1'] or 0:.2f}, "
             f"shown {pct(s['next_edit_shown'])}; no-edit correct {pct(q['all'])} (elsewhere {pct(q['elsewhere'])}, "
             f"done {pct(q['done'])}); shown rate {pct(s['shown_rate'])}, precision when shown "
             f"{pct(s['precision_when_shown'])}; latency p50 {ms(s['latency_ms_p50'])} / p95 "
             f"{ms(s['latency_ms_p95'])} ms; tokens/step {s['tokens_per_step'] or 0:.2f}",
             "| show threshold | shown | right | precision | next-edit exact | quiet shown |", "|---|---|---|---|---|---|"]
    lines += [f"| {c['threshold']} | {c['shown']} | {c['right']} | {pct(c['precision'])} | "
              f"{pct(c['next_edit_exact'])} | {c['quiet_shown']} |" for c in s["precision_coverage"]]
    return "\n".join(lines)
