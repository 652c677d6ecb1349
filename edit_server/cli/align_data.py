"""`edit-server align data`: desirable / undesirable (prompt, completion) records for KTO.

Sources:
- the feedback store: suggestions with a known outcome and a stored prompt + output (schema v2,
  `feedback.py`): accepted / partially accepted → desirable; rejected (typed over, replaced) and
  expired (dismissed) → undesirable;
- eval reports: ``eval humaneval-infill`` (execution pass or exact match → desirable, else
  undesirable; the canonical middle of a failed task is added as desirable) and ``eval cases`` /
  ``eval replay`` (accepted → desirable, else undesirable; the case's truth is added as desirable);
- self-play on a training corpus (`engine.train.kto.selfplay`): the current model's samples on FIM /
  next-edit / no-edit tasks with a known truth, labelled by exact match.

The split is by group (file / repository / HumanEval problem): ``--heldout-eval DIR`` keeps a whole
run out of training, the corpus' validation files are held out, the rest by a stable hash. Record
format and writer: `engine.train.kto.records` (imported lazily: serving never imports engine.train).
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

from edit_server.cli.align_common import NEGATIVE, POSITIVE, edit_prompt, problem_of
from engine.templates import DEFAULT_FIM_LAYOUT

log = logging.getLogger(__name__)


def _record(**kw: Any) -> Any:
    from engine.train.kto.records import Record

    return Record(**kw)


# ---- feedback store -----------------------------------------------------------------------------
def from_feedback(db: str | Path) -> tuple[list[Any], dict[str, int]]:
    """Records of decided suggestions that have a stored prompt; stats of what was skipped."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        events = con.execute("SELECT suggestion, kind, event, uri FROM events ORDER BY rowid").fetchall()
        try:
            texts = {r[0]: r[1:] for r in con.execute(
                "SELECT suggestion, prompt, completion, shown_text FROM suggestion_text")}
        except sqlite3.OperationalError:  # a v1 store: outcomes only, no text
            texts = {}
    finally:
        con.close()
    label: dict[str, tuple[str, str, bool]] = {}
    for sid, kind, event, uri in events:
        if event in POSITIVE or event in NEGATIVE:
            prev = label.get(sid)
            label[sid] = (kind, uri or "", event in POSITIVE or (prev is not None and prev[2]))
    out, stats = [], {"decided": len(label), "no_text": 0}
    for sid, (kind, uri, ok) in label.items():
        if sid not in texts:
            stats["no_text"] += 1
            continue
        prompt, completion, shown = texts[sid]
        p = json.loads(prompt)
        rec_kind = "fim" if kind == "fim" else ("noedit" if completion == p.get("region") else "edit")
        out.append(_record(id=f"feedback:{sid}", source="feedback", kind=rec_kind, label=ok,
                           group=f"file:{uri or p.get('path', '?')}", prompt=p, completion=completion,
                           meta={"shown_text": shown}))
    return out, stats


# ---- eval reports -------------------------------------------------------------------------------
def _results(run: Path) -> list[dict[str, Any]]:
    path = run / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not an eval report directory")
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _config(run: Path) -> dict[str, Any]:
    for name in ("config.json", "report.json"):
        p = run / name
        if p.is_file():
            d = json.loads(p.read_text())
            return d.get("config", d) if name == "report.json" else d
    return {}


def from_humaneval(run: Path, config: dict[str, Any], truth: bool = True) -> list[Any]:
    from evals.datasets import load_humaneval

    split = config.get("split", "single-line")
    tasks = {t.task_id: t for t in load_humaneval(split)}
    out = []
    for r in _results(run):
        t = tasks.get(r["id"])
        if t is None or r.get("error"):
            continue
        middle = r.get("middle", "")
        if split in ("single-line", "multi-line") and middle.endswith("\n"):
            middle = middle[:-1]  # the harness adds the line end a single-line decode stops before
        prompt = {"type": "fim", "prefix": t.prompt, "suffix": t.suffix, "path": f"{t.entry_point}.py",
                  "history": [], "sections": [], "layout": DEFAULT_FIM_LAYOUT}
        ok = bool(r.get("passed") or r.get("exact"))
        base = dict(kind="fim", group=f"humaneval:{problem_of(t.task_id)}", prompt=prompt)
        out.append(_record(id=f"humaneval:{r['id']}", source="humaneval", label=ok, completion=middle,
                           meta={"score": r.get("mean_confidence")}, **base))
        if truth and not ok:
            out.append(_record(id=f"humaneval-truth:{r['id']}", source="humaneval-truth", label=True,
                               completion=t.canonical_solution.rstrip("\n"), **base))
    return out


def from_cases(run: Path, config: dict[str, Any], truth: bool = True) -> list[Any]:
    """Records of an ``eval cases`` / ``eval replay`` run (prompts rebuilt from the cases: the file
    around the cursor and the history; the server's extra context sections are not in the report)."""
    from evals.cases import Edit, apply_edits, read_cases

    src = run / "cases.jsonl"
    if not src.is_file():
        src = Path(str(config.get("source", "")))
    if not src.is_file():
        raise FileNotFoundError(f"{run}: no cases.jsonl and no readable config source")
    cases = {c.id: c for c in read_cases(src)}
    out = []
    for r in _results(run):
        c = cases.get(r["id"])
        if c is None or not r.get("suggestion"):
            continue
        text, off = c.files[c.path], c.cursor.offset
        repo = str(c.meta.get("repo", run.name))
        base: dict[str, Any] = {"group": f"repo:{repo}:{c.path}"}
        sugg = [Edit(*e) for e in r["suggestion"]]
        if c.kind == "fim":
            if len(sugg) != 1 or sugg[0].path != c.path or sugg[0].start != off:
                continue
            prompt = {"type": "fim", "prefix": text[:off], "suffix": text[off:], "path": c.path,
                      "history": list(c.history), "sections": [], "layout": DEFAULT_FIM_LAYOUT}
            comp = sugg[0].text
            good = (c.expected or [None])[0]
            truth_text = good.text if good is not None and good.start == good.end == off else None
            kind = "fim"
        else:
            prompt, s, e = edit_prompt(text, off, c.path, list(c.history))
            inside = [x for x in sugg if x.path == c.path and s <= x.start <= x.end <= e]
            if len(inside) != len(sugg):
                continue
            region = prompt["region"]
            comp = apply_edits(region, [Edit(c.path, x.start - s, x.end - s, x.text) for x in inside])
            exp = c.expected or []
            truth_text = region if c.expected is None else (
                apply_edits(region, [Edit(c.path, x.start - s, x.end - s, x.text) for x in exp])
                if all(x.path == c.path and s <= x.start <= x.end <= e for x in exp) else None)
            kind = "noedit" if c.expected is None else "edit"
        ok = bool(r.get("accepted")) and not r.get("quiet_case")
        out.append(_record(id=f"eval:{run.name}:{c.id}", source="eval", kind=kind, label=ok, prompt=prompt,
                           completion=comp, meta={"score": r.get("score")}, **base))
        if truth and not ok and truth_text is not None:
            out.append(_record(id=f"eval-truth:{run.name}:{c.id}", source="eval-truth", kind=kind, label=True,
                               prompt=prompt, completion=truth_text, **base))
    return out


def from_eval(run: str | Path, truth: bool = True) -> list[Any]:
    run = Path(run)
    config = _config(run)
    if config.get("kind") == "humaneval-infill":
        return from_humaneval(run, config, truth)
    return from_cases(run, config, truth)


# ---- CLI ----------------------------------------------------------------------------------------
def register_cli(a: argparse._SubParsersAction) -> None:
    d = a.add_parser("data", help="build KTO desirable/undesirable records (feedback, evals, self-play)")
    d.add_argument("--out", type=Path, required=True, help="data directory (train/heldout JSONL)")
    d.add_argument("--feedback", action="append", default=[], metavar="DB", help="feedback sqlite store")
    d.add_argument("--eval", action="append", default=[], metavar="DIR", help="eval report dir (split by group)")
    d.add_argument("--heldout-eval", action="append", default=[], metavar="DIR",
                   help="eval report dir kept entirely out of training (evaluation data)")
    d.add_argument("--selfplay", type=int, default=0, metavar="N", help="self-play samples on --corpus")
    d.add_argument("--corpus", type=Path, help="`edit-server train corpus` directory for self-play")
    d.add_argument("--heldout-selfplay", type=int, default=None, metavar="N",
                   help="of the self-play samples, how many on the corpus' held-out files (default 25 %%)")
    d.add_argument("--model", default="smollm2-bd3", help="model that plays (default: the embedded model)")
    d.add_argument("--device", default="auto")
    d.add_argument("--threads", type=int, default=0)
    d.add_argument("--heldout-fraction", type=float, default=0.2, help="groups held out by hash")
    d.add_argument("--no-truth", action="store_true", help="do not add known truths as desirable")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=run_data)


def selfplay_records(args: argparse.Namespace, eng: Any = None) -> list[Any]:
    import torch

    from engine.train.corpus import Corpus
    from engine.train.kto.selfplay import SelfPlayConfig, self_play

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.corpus is None:
        raise SystemExit("--selfplay needs --corpus DIR")
    if eng is None:
        from engine import Engine

        eng = Engine.load(args.model, device=args.device)
    corpus = Corpus(args.corpus)
    n_held = args.heldout_selfplay if args.heldout_selfplay is not None else args.selfplay // 4
    prog = (lambda it: it) if args.no_progress else _tqdm
    out = []
    for split, docs, n in (("train", corpus.docs("train"), args.selfplay - n_held),
                           ("heldout", corpus.docs("val"), n_held)):
        cfg = SelfPlayConfig(n=max(0, n), truth=not args.no_truth, seed=args.seed + (split == "heldout"))
        out += self_play(eng, docs, split, cfg, prog)
    return out


def _tqdm(it: Any) -> Any:
    from tqdm import tqdm

    return tqdm(it, file=sys.stderr, desc="self-play", dynamic_ncols=True)


def build(args: argparse.Namespace, eng: Any = None) -> tuple[list[Any], dict[str, Any]]:
    from engine.train.kto.records import assign_splits

    records: list[Any] = []
    info: dict[str, Any] = {"feedback": {}, "eval": [], "heldout_eval": []}
    for db in args.feedback:
        recs, stats = from_feedback(db)
        records += recs
        info["feedback"][str(db)] = stats
    for run in args.eval:
        records += from_eval(run, not args.no_truth)
        info["eval"].append(str(run))
    for run in args.heldout_eval:
        for r in from_eval(run, not args.no_truth):
            r.split = "heldout"
            records.append(r)
        info["heldout_eval"].append(str(run))
    if args.selfplay:
        records += selfplay_records(args, eng)
        info["selfplay"] = {"n": args.selfplay, "corpus": str(args.corpus), "model": args.model}
    assign_splits(records, args.heldout_fraction)
    return records, info


def print_counts(summary: dict[str, Any]) -> None:
    print(f"{'split':8} {'kind':7} {'desirable':>10} {'undesirable':>12}")
    for split, kinds in sorted(summary["counts"].items()):
        for kind, c in sorted(kinds.items()):
            if kind != "sources":
                print(f"{split:8} {kind:7} {c['desirable']:10d} {c['undesirable']:12d}")
        print(f"{split:8} sources {json.dumps(kinds.get('sources', {}), sort_keys=True)}")
    print(f"groups: {summary['groups']}")


def run_data(args: argparse.Namespace) -> int:
    from engine.train.kto.records import write_set

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    records, info = build(args)
    if not records:
        print("no records: give --feedback, --eval/--heldout-eval or --selfplay N --corpus DIR", file=sys.stderr)
        return 1
    summary = write_set(args.out, records, info)
    print_counts(summary)
    print(f"wrote {args.out}")
    return 0
