"""`edit-server eval ...`: humaneval-infill, cases, replay (see docs/QUALITY.md, docs/EVAL_FORMAT.md)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.types import SamplerConfig
from evals.cli_cases import run_cases, run_replay
from evals.cli_common import init_options, print_summary, progress_bar
from evals.datasets import MAX_TOKENS, SPLITS, default_data_dir

log = logging.getLogger(__name__)


def _common(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument("--model", default="default", help="tiny-random | default | HF dir | .gguf (default: default)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--out", type=Path, default=Path("runs/eval") / default_out,
                   help=f"report directory; finished cases are cached there (default runs/eval/{default_out})")
    p.add_argument("--limit", type=int, default=None, help="only the first N cases")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fresh", action="store_true", help="ignore cached results in --out")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per server request / start-up")
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar")


def _server(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-gate", action="store_true",
                   help="baseline: initializationOptions gate.enabled=false (scores still returned)")
    p.add_argument("--gate-threshold", type=float, default=None, help="gate.threshold sent to the server")
    p.add_argument("--restart-every", type=int, default=None,
                   help="restart the server every N cases; 0 = one server for all (its edit history "
                        "may carry over between cases); default: one server cleared with "
                        "editServer.clearHistory if it offers that command, else one server per case")
    p.add_argument("--max-tokens", type=int, default=None, help="initializationOptions maxTokens")
    p.add_argument("--context-budget", type=int, default=None, help="initializationOptions contextBudget")
    p.add_argument("--init-option", action="append", default=[], metavar="KEY=JSON",
                   help="extra initializationOptions entry (repeatable; dotted keys nest), "
                        'e.g. historySize=6 or gate.calibration="/path/gate.json"')


def _clean_errors(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Bad input or a server that fails to start: one clear line on stderr and exit code 1."""
    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except Exception as e:
            # an LspError can only come from a runner that imported the LSP client: the engine runner
            # (and the GPU image, which has no pygls/lsprotocol) never imports it
            lsp = sys.modules.get("evals.lsp_client")
            if not isinstance(e, (ValueError, FileNotFoundError)) and not (lsp and isinstance(e, lsp.LspError)):
                raise
            print(f"edit-server eval: error: {e}", file=sys.stderr)
            return 1
    return run


def register(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """``eval`` and its commands; returns its subparsers, where the command on top adds what needs the
    serving code (`edit_server.cli.eval_rules`)."""
    ev = subparsers.add_parser("eval", help="headless evaluations (HumanEval-infilling, replay, cases)")
    sub = ev.add_subparsers(dest="eval_command", metavar="WHAT", required=True)

    he = sub.add_parser("humaneval-infill", help="functional pass@1 on HumanEval-infilling")
    _common(he, "humaneval")
    he.add_argument("--data", type=Path, default=None, help=f"dataset dir (default {default_data_dir()})")
    he.add_argument("--split", choices=list(SPLITS), default="single-line")
    he.add_argument("--via-lsp", action="store_true", help="through the real stdio server (gate off)")
    he.add_argument("--init-option", action="append", default=[], metavar="KEY=JSON",
                    help="--via-lsp: extra initializationOptions entry (repeatable; dotted keys nest), e.g. "
                         "multilineBudgetMs=30000 (a loaded machine's time budget would cut the middles)")
    he.add_argument("--trigger", choices=["invoked", "automatic"], default="invoked",
                    help="--via-lsp: each request as an explicit invoke (the server may answer a block on an "
                         "empty line) or as the editor's automatic trigger while typing (one line unless a block "
                         "is expected there)")
    he.add_argument("--oracle", action="store_true",
                    help="score the canonical solutions (harness sanity check, no model)")
    he.add_argument("--steps-mode", choices=["parallel", "one-per-step"], default="parallel",
                    help="parallel: threshold sampler (τ); one-per-step: one token per forward")
    he.add_argument("--threshold", type=float, default=SamplerConfig.threshold,
                    help="τ of the parallel sampler (default: the engine's, %(default)s)")
    he.add_argument("--window", default=None,
                    help="block | adaptive | N: decoding window (default: the engine's, adaptive on a CPU)")
    he.add_argument("--remask", choices=["off", "confidence"], default="off",
                    help="confidence: remask decided tokens of the current block whose probability fell "
                         "(block mode only, SamplerConfig.remask)")
    he.add_argument("--remask-threshold", type=float, default=0.5)
    he.add_argument("--remask-per-step", type=int, default=2)
    he.add_argument("--remask-budget", type=int, default=8, help="remasks per canvas")
    he.add_argument("--max-tokens", type=int, default=None, help="canvas length (default per split)")
    he.add_argument("--fim-layout", choices=["spml", "spm", "psm"], default=None,
                    help="prompt order of the native format (default: engine.templates' DEFAULT_FIM_LAYOUT)")
    he.add_argument("--workers", type=int, default=2, help="parallel sandboxed checks")
    he.add_argument("--check-timeout", type=float, default=10.0, help="seconds per functional check")
    he.set_defaults(func=_clean_errors(run_humaneval))

    ne = sub.add_parser("next-edit", help="the model's own next-edit rewrites of replay cases, in process (no "
                                          "server; the GPU image's packages suffice)")
    ne.add_argument("cases", type=Path, help="cases.jsonl[.gz] (`eval replay REPOS --build-only`) or its directory")
    ne.add_argument("--model", default="default", help="tiny-random | default | a tier (default: default)")
    ne.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ne.add_argument("--out", type=Path, default=Path("runs/eval/next-edit"), help="report directory")
    ne.add_argument("--limit", type=int, default=0, help="only the first N cases")
    ne.add_argument("--context-lines", type=int, default=60, help="file lines in the prompt on each side of the region")
    ne.add_argument("--history", type=int, default=None, help="diffs in the prompt (default: the model's trained count)")
    ne.add_argument("--budget-s", type=float, default=0.0,
                    help="no new case after this many seconds; the report covers the finished ones (0: none)")
    ne.add_argument("--no-progress", action="store_true", help="no tqdm bar")
    ne.set_defaults(func=_clean_errors(run_next_edit))

    cs = sub.add_parser("cases", help="run a JSONL file of edit cases through the real server")
    cs.add_argument("file", type=Path)
    cs.add_argument("--workspace-repo", type=Path, action="append", default=[], metavar="REPO",
                    help="a repository or bundle the cases were replayed from (repeatable): each case runs "
                         "inside that repository's files as of its commit's parent (evals/workspace.py)")
    _common(cs, "cases")
    _server(cs)
    cs.set_defaults(func=_clean_errors(run_cases))

    rp = sub.add_parser("replay", help="build edit cases from git histories and run them")
    rp.add_argument("repo", type=Path, nargs="+", help="repositories or git bundles (held out from training)")
    _common(rp, "replay")
    _server(rp)
    rp.add_argument("--mode", choices=["sessions", "commits"], default="sessions",
                    help="sessions: next-edit / elsewhere / done cases replayed like training's git sessions "
                         "(evals/replay_sessions.py); commits: fim / next-edit / no-edit cases per commit")
    rp.add_argument("--cases-per-repo", type=int, default=60, help="sessions mode: cases per repository")
    rp.add_argument("--commits", type=int, default=20, help="commits mode: usable commits to replay")
    rp.add_argument("--rev", default="HEAD")
    rp.add_argument("--fim-per-commit", type=int, default=3)
    rp.add_argument("--next-per-commit", type=int, default=3)
    rp.add_argument("--quiet-per-commit", type=int, default=2)
    rp.add_argument("--build-only", action="store_true", help="write <out>/cases.jsonl and stop")
    rp.add_argument("--workspace", action="store_true",
                    help="run each case inside its repository's files as of its commit's parent (the "
                         "server's workspace folder): prompts get other files' context as in an editor")
    rp.set_defaults(func=_clean_errors(run_replay))

    lp = sub.add_parser("layout-prefill", help="re-prefill tokens of consecutive next edits per edit layout")
    lp.add_argument("repo", type=Path, nargs="+", help="repositories or git bundles")
    lp.add_argument("--tokenizer", default="base", help="'base' (SmolLM2's, from the GGUF), 'byte', or a model")
    lp.add_argument("--pairs", type=int, default=60, help="request pairs per repository")
    lp.add_argument("--seed", type=int, default=0)
    lp.set_defaults(func=_clean_errors(run_layout_prefill))

    rr = sub.add_parser("report", help="write a cases run's report again from DIR/results.jsonl + cases.jsonl "
                                       "(figures added since the run: candidate filter, line F1)")
    rr.add_argument("dir", type=Path)
    rr.set_defaults(func=_clean_errors(run_report))

    cp = sub.add_parser("compare", help="two runs of the same cases, case by case: which suggestions and "
                                        "prompts (prompt_digest) differ; exit 1 if any does")
    cp.add_argument("first", type=Path, help="a run's directory (its results.jsonl)")
    cp.add_argument("second", type=Path)
    cp.set_defaults(func=_clean_errors(run_compare))

    tb = sub.add_parser("table", help="one Markdown table of every report.json under DIR")
    tb.add_argument("dir", type=Path)
    tb.add_argument("--replay", action="store_true",
                    help="the next-edit replay table of docs/QUALITY.md (per run: as served, with the gate)")
    tb.set_defaults(func=_clean_errors(run_table))
    return sub


def run_layout_prefill(args: argparse.Namespace) -> int:
    from evals.layout_prefill import PrefillOptions, prompt_pairs, reprefill

    if args.tokenizer == "byte":
        from engine.tokenizer import Tokenizer

        tok = Tokenizer.byte_level()
    else:
        from engine.loading import load_checkpoint

        tok = load_checkpoint(args.tokenizer).tokenizer
    rows = {}
    pairs: list = []
    for repo in args.repo:
        got = prompt_pairs(repo, PrefillOptions(pairs=args.pairs, seed=args.seed))
        rows[repo.name] = reprefill(tok, got)
        pairs += got
    rows["all"] = reprefill(tok, pairs)
    print("| repos | layout | pairs | prompt tokens (mean) | re-prefill mean | re-prefill p50 |\n|---|---|---|---|---|---|")
    for name, by in rows.items():
        for layout, r in by.items():
            print(f"| {name} | {layout} | {r['pairs']} | {r['prompt_tokens_mean']:.0f} | {r['reprefill_mean']:.0f} "
                  f"| {r['reprefill_p50']:.0f} |")
    return 0


def run_report(args: argparse.Namespace) -> int:
    """Re-derive what the records lack from the cases (candidate filter, line F1, syntax rule)."""
    from evals.cases import Edit, judge, read_cases
    from evals.report import write_cases
    from evals.store import ResultStore

    config = json.loads((args.dir / "config.json").read_text())
    store = ResultStore(args.dir, config)
    cases = {c.id: c for c in read_cases(args.dir / "cases.jsonl")}
    records = []
    for rid, r in store.records.items():
        c = cases.get(rid)
        if c is not None and not r.get("bad_case"):
            edits = [Edit(*e) for e in r.get("suggestion", [])]
            r = {**r, "repo": str(c.meta.get("repo", "")), "line_f1": judge(c, edits).line_f1}
            if r["shown"]:
                from evals.runners import serving_view

                view = serving_view(c, edits)
                if r.get("syntax_error") is None:
                    r["syntax_error"] = view["syntax_error"]
                r["candidate"] = view["candidate"]
        records.append(r)
    summary = write_cases(args.dir, config, records)
    print_summary(f"edit cases ({config.get('source')})", summary, args.dir)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from evals.store import compare_runs

    same, diffs = compare_runs(args.first, args.second)
    for case_id, what in diffs:
        print(f"{case_id}: {what}")
    n_sug = sum("suggestion" in w for _, w in diffs)
    n_prompt = sum("prompt" in w for _, w in diffs)
    print(f"{same + len(diffs)} cases in both: {n_sug} suggestions differ, {n_prompt} prompts differ")
    return 1 if diffs else 0


def run_table(args: argparse.Namespace) -> int:
    from evals.table import replay_table, tables

    print(replay_table(args.dir) if getattr(args, "replay", False) else tables(args.dir))
    return 0


def run_next_edit(args: argparse.Namespace) -> int:
    import time

    from engine import Engine
    from evals.next_edit import Options, format_report, read_cases, run

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    t0 = time.monotonic()
    cases = read_cases(args.cases)
    eng = Engine.load(args.model, device=args.device)
    budget = max(1.0, args.budget_s - (time.monotonic() - t0)) if args.budget_s > 0 else 0.0  # loading counts
    opts = Options(context_lines=args.context_lines, history=args.history, limit=args.limit, budget_s=budget)
    report = run(cases, eng, opts, args.out, progress_bar(args, "next-edit"))
    # the loaded model's own name, not the spec: `smollm2-bd3` with $EDIT_SERVER_ADAPTER may be a Qwen adapter
    name = report["model"].get("model") or args.model
    what = report["model"].get("label")
    print(format_report(report, f"next edits in process ({name}{f': {what}' if what and what != name else ''})"))
    print(f"report: {args.out / 'report.json'}")
    return 0


def run_humaneval(args: argparse.Namespace) -> int:
    from evals.datasets import load_humaneval
    from evals.humaneval import Scorer, generate_engine, generate_lsp, sampler_options
    from evals.report import write_humaneval
    from evals.sandbox import Limits
    from evals.store import ResultStore

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    tasks = load_humaneval(args.split, args.data, limit=args.limit)
    runner = "oracle" if args.oracle else "lsp" if args.via_lsp else "engine"
    max_tokens = args.max_tokens or MAX_TOKENS[args.split]
    config = {"kind": "humaneval-infill", "split": args.split, "runner": runner,
              "model": None if args.oracle else args.model, "device": args.device,
              "steps_mode": args.steps_mode, "threshold": args.threshold, "max_tokens": max_tokens,
              "seed": args.seed, "check_timeout": args.check_timeout, "fim_layout": args.fim_layout,
              **({"init": init_options(args)} if args.via_lsp and args.init_option else {}),
              **({"trigger": args.trigger} if args.via_lsp else {})}
    extra = sampler_options(args.window, args.remask, args.remask_threshold, args.remask_per_step,
                            args.remask_budget)
    if extra:
        config["sampler"] = extra
    store = ResultStore(args.out, config, fresh=args.fresh)
    todo = [t for t in tasks if not store.done(t.task_id)]
    limits = Limits(timeout_s=args.check_timeout, cpu_s=int(args.check_timeout) + 1)
    prog = progress_bar(args, f"humaneval {args.split}")
    scorer = Scorer(store, limits, args.workers)
    try:
        if runner == "oracle":
            for t in prog(todo):
                scorer.submit(t, {"id": t.task_id, "middle": t.canonical_solution})
        elif runner == "engine":
            generate_engine(todo, scorer, model=args.model, device=args.device, split=args.split,
                            max_tokens=max_tokens, steps_mode=args.steps_mode,
                            threshold=args.threshold, seed=args.seed, sampler_extra=extra, progress=prog,
                            layout=args.fim_layout)
        elif todo:
            with tempfile.TemporaryDirectory(prefix="eval-ws-") as ws:
                generate_lsp(todo, scorer, model=args.model, device=args.device, split=args.split,
                             root=Path(ws), log_path=args.out / "server.log", timeout=args.timeout,
                             init_extra={**init_options(args), "maxTokens": max_tokens},
                             progress=prog, trigger=args.trigger)
    finally:
        scorer.close()
    records = [store.records[t.task_id] for t in tasks if store.done(t.task_id)]
    summary = write_humaneval(args.out, config, records)
    print_summary(f"HumanEval-infilling {args.split} ({runner})", summary, args.out)
    return 0
