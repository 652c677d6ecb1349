"""`edit-server eval cases` / `eval replay`: edit cases (a JSONL file, or built from git histories) run through
the real server, optionally each inside its repository's snapshot (docs/EVAL_FORMAT.md, docs/QUALITY.md)."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from evals.cli_common import init_options, print_summary, progress_bar


def _run_case_list(args: argparse.Namespace, cases: list, config: dict[str, Any],
                   bad: list[tuple[str, str]] = ()) -> int:
    from evals.report import write_cases
    from evals.runners import CaseRunner, error_record
    from evals.runners import run_cases as run_all
    from evals.store import ResultStore
    from evals.workspace import Snapshots

    store = ResultStore(args.out, config, fresh=args.fresh)
    for case_id, reason in bad:  # cases that could not even be read: reported, the run goes on
        print(f"edit-server eval: bad case {case_id}: {reason}", file=sys.stderr)
        if not store.done(case_id):
            store.add(error_record(case_id, reason))
    with tempfile.TemporaryDirectory(prefix="eval-ws-") as ws:
        sources = _workspace_sources(args)
        snapshots = Snapshots(sources, Path(ws) / "snapshots") if sources else None
        runner = CaseRunner(model=args.model, device=args.device, root=Path(ws) / "cases",
                            log_path=args.out / "server.log", gate=not args.no_gate,
                            threshold=args.gate_threshold, timeout=args.timeout,
                            restart_every=args.restart_every, init_extra=init_options(args),
                            workspace=snapshots)
        try:
            run_all(cases, store, runner, progress_bar(args, "cases"))
        finally:
            if snapshots is not None:
                snapshots.close()
    records = [store.records[c.id] for c in cases if store.done(c.id)]
    records += [store.records[i] for i, _ in bad if store.done(i) and i not in {c.id for c in cases}]
    summary = write_cases(args.out, config, records)
    print_summary(f"edit cases ({config['source']})", summary, args.out)
    return 0


def _workspace_sources(args: argparse.Namespace) -> list[Path]:
    """The repositories whose snapshots surround the cases (``replay --workspace``: the replayed ones;
    ``cases --workspace-repo``: the ones named), none without."""
    if getattr(args, "workspace", False):
        return list(args.repo)
    return list(getattr(args, "workspace_repo", None) or [])


def server_config(args: argparse.Namespace, source: str) -> dict[str, Any]:
    from engine import options
    from engine.tiers import EMBEDDED_SPECS

    adapter = options.env().adapter  # --model default with another adapter (engine/default.py)
    return {"kind": "cases", "source": source, "model": args.model, "device": args.device,
            "gate": not args.no_gate, "gate_threshold": args.gate_threshold, "seed": args.seed,
            "init": init_options(args),  # not --limit: a larger limit resumes the same cases
            **({"workspace": sorted(str(s) for s in _workspace_sources(args))} if _workspace_sources(args) else {}),
            **({"adapter": adapter} if adapter and args.model in EMBEDDED_SPECS else {})}


def run_cases(args: argparse.Namespace) -> int:
    from evals.cases import read_cases

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    bad: list[tuple[str, str]] = []
    cases = read_cases(args.file, bad)[: args.limit]
    return _run_case_list(args, cases, server_config(args, str(args.file)), bad)


def replay_cases(args: argparse.Namespace) -> list:
    """Every repository's cases, in the order given (a repository that cannot be read: a clear error)."""
    from evals.replay import ReplayOptions, build_cases
    from evals.replay_sessions import SessionReplayOptions, session_cases

    cases: list[list] = []
    for repo in args.repo:
        if not repo.exists():
            raise FileNotFoundError(f"{repo}: no such repository or bundle")
        if args.mode == "sessions":
            from engine.git_history import ExtractReport

            rep = ExtractReport()
            got = session_cases(repo, SessionReplayOptions(cases=args.cases_per_repo, seed=args.seed), rep)
            print(f"{repo.name}: {rep.sessions} sessions from {rep.commits} commits; file changes "
                  f"{json.dumps(rep.as_dict()['file_changes'])}", file=sys.stderr)
        else:
            opts = ReplayOptions(commits=args.commits, seed=args.seed, rev=args.rev,
                                 fim_per_commit=args.fim_per_commit, next_per_commit=args.next_per_commit,
                                 quiet_per_commit=args.quiet_per_commit)
            skipped: list[tuple[str, str]] = []
            got = build_cases(repo, opts, skipped)
            for sha, reason in skipped:
                print(f"edit-server eval: commit {sha[:12]} skipped: {reason}", file=sys.stderr)
        cases.append(got)
    # round robin over the repositories: a run cut short (--limit, a time limit) still covers each of them
    return [c for row in itertools.zip_longest(*cases) for c in row if c is not None]


def run_replay(args: argparse.Namespace) -> int:
    from evals.cases import write_cases

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cases = replay_cases(args)[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    n = write_cases(args.out / "cases.jsonl", cases)
    cats: dict[str, int] = {}
    for c in cases:
        cats[str(c.meta.get("category"))] = cats.get(str(c.meta.get("category")), 0) + 1
    names = " ".join(str(r) for r in args.repo)
    print(f"{n} cases from {names} ({json.dumps(cats)}) -> {args.out / 'cases.jsonl'}")
    if args.build_only:
        return 0
    what = f"cases/repo={args.cases_per_repo}" if args.mode == "sessions" else f"{args.rev} commits={args.commits}"
    config = server_config(args, f"replay {args.mode} {' '.join(r.name for r in args.repo)} {what}")
    return _run_case_list(args, cases, config)
