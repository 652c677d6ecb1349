"""`edit-server align kto` (train + calibrate a KTO adapter) and `edit-server align rollback`.

``align kto --data DIR --out ADAPTER``: KTO on the records of ``align data`` (`engine.train.kto`), then
the reward calibration ``ADAPTER.gate.json``: the aligned model scores the held-out records that are
model outputs, and `align.fit` learns per kind the isotonic map reward → P(desirable) and the lowest
reward reaching the target precision. ``align kto --feedback [DB]``: the local loop — records from
the user's own feedback store (optionally plus self-play), a new version ``kto-vN`` under
`kto_gate.adapters_dir()`, made current when it is done; nothing leaves the machine.
``align rollback [--to vN|none]`` switches the current version back.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from edit_server.cli.align_common import AlignOutcome, fit, save
from edit_server.selectivity import kto_gate

TOP_LAYERS = 8  # = engine.train.kto.trainer.KtoConfig.top_layers (not imported here: no torch at start-up)


def register_cli(a: argparse._SubParsersAction) -> None:
    k = a.add_parser("kto", help="align the model with KTO on desirable/undesirable records")
    k.add_argument("--data", type=Path, help="`align data` directory")
    k.add_argument("--out", type=Path, help="adapter path without suffix (writes .safetensors/.json/.gate.json)")
    k.add_argument("--feedback", nargs="?", const="", default=None, metavar="DB",
                   help="local loop: data from this feedback store (default: the server's), a new "
                        "versioned adapter under --adapters-dir that becomes the current one")
    k.add_argument("--selfplay", type=int, default=0, metavar="N", help="with --feedback: add self-play")
    k.add_argument("--corpus", type=Path, help="with --selfplay: a training corpus directory")
    k.add_argument("--min-records", type=int, default=20, help="with --feedback: fewest usable records")
    k.add_argument("--adapters-dir", type=Path, default=None, help=f"default {kto_gate.adapters_dir()}")
    k.add_argument("--model", default="smollm2-bd3", help="reference model (its adapter merged)")
    k.add_argument("--device", default="auto")
    k.add_argument("--threads", type=int, default=0)
    for name, typ, default in (("steps", int, 60), ("batch-size", int, 4), ("lr", float, 5e-4),
                               ("beta", float, 0.1), ("ratio", float, 1.0), ("rank", int, 8),
                               ("alpha", float, 16.0), ("samples", int, 1), ("max-prompt", int, 256),
                               ("max-canvas", int, 64), ("seed", int, 0), ("eval-every", int, 20),
                               ("save-every", int, 20), ("z0-pairs", int, 0),
                               ("eval-examples", int, 32), ("max-minutes", float, 0.0)):
        k.add_argument(f"--{name}", type=typ, default=default)
    k.add_argument("--top-layers", type=int, default=TOP_LAYERS,
                   help="LoRA on the last N decoder layers only (default %(default)s: the reward's pair then runs "
                        "the layers below once; 0 = every layer)")
    k.add_argument("--keep-last", action="store_true",
                   help="write the last step's adapter (default: the monitored step with the lowest loss on the "
                        "data's held-out split)")
    k.add_argument("--resume", action="store_true", help="continue from ADAPTER.ckpt/")
    k.add_argument("--calibrate-only", action="store_true",
                   help="no training: (re)fit ADAPTER.gate.json of an existing adapter on --data's held-out set")
    k.add_argument("--target-precision", type=float, default=0.6)
    k.add_argument("--min-count", type=int, default=10, help="fewest held-out outcomes per kind to calibrate")
    k.add_argument("--no-progress", action="store_true")
    k.set_defaults(func=run_kto)

    r = a.add_parser("rollback", help="switch the current local KTO adapter back (or off)")
    r.add_argument("--to", default=None, metavar="vN|none", help="default: the previous version")
    r.add_argument("--list", action="store_true", help="only list the versions")
    r.add_argument("--adapters-dir", type=Path, default=None)
    r.set_defaults(func=run_rollback)


def _feedback_data(args: argparse.Namespace, d: Path, name: str) -> Path | None:
    from edit_server.cli.align_data import build
    from edit_server.selectivity.feedback import default_db_path
    from engine.train.kto.records import write_set

    db = args.feedback or str(default_db_path())
    if not Path(db).is_file():
        print(f"{db}: no feedback store", file=sys.stderr)
        return None
    ns = argparse.Namespace(feedback=[db], eval=[], heldout_eval=[], selfplay=args.selfplay, corpus=args.corpus,
                            heldout_selfplay=None, model=args.model, device=args.device, threads=args.threads,
                            heldout_fraction=0.2, no_truth=False, seed=args.seed, no_progress=args.no_progress)
    records, info = build(ns)
    train = [r for r in records if r.split == "train"]
    labels = {r.label for r in train}
    if len(train) < args.min_records or len(labels) < 2:
        print(f"not enough feedback to align yet: {len(train)} training records "
              f"({sum(r.label for r in train)} desirable), need {args.min_records} of both kinds",
              file=sys.stderr)
        return None
    out = d / f"{name}.data"
    write_set(out, records, info)
    return out


def calibrate(adapter: Path, data: Path, *, model: str, device: str, target: float, min_count: int,
              eng: Any = None) -> dict[str, Any]:
    """Score the held-out model outputs with the aligned model; fit and write ADAPTER.gate.json."""
    from engine import Engine
    from engine.loading.stacked import AlignedEngine
    from engine.reward import RewardScorer
    from engine.train.kto.records import gate_kind, prompt_from_dict, read_set

    aligned = AlignedEngine.from_engine(eng or Engine.load(model, device=device, fast_cpu=False), adapter)
    scorer = RewardScorer(aligned)
    outcomes = []
    for rec in read_set(data, "heldout"):
        if rec.source.endswith("-truth"):  # the gate only ever sees model outputs
            continue
        rw = scorer.score_text(prompt_from_dict(rec.prompt), rec.completion)
        outcomes.append(AlignOutcome(rec.id, gate_kind(rec.kind), rw.score, rec.label))
    cal = fit(outcomes, target, min_count)
    if cal:
        save(cal, kto_gate.calibration_path(adapter), target)
    return {"outcomes": len(outcomes), "kinds": {k: {"n": c.n, "threshold": c.threshold, "precision": c.precision,
                                                      "coverage": c.coverage} for k, c in cal.items()}}


def run_kto(args: argparse.Namespace) -> int:
    from engine.train.kto.trainer import KtoConfig, train_kto

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    d = args.adapters_dir or kto_gate.adapters_dir()
    name = None
    if args.feedback is not None:
        name = f"kto-v{max(kto_gate.versions(d), default=0) + 1}"
        data = _feedback_data(args, d, name)
        if data is None:
            return 1
        out = d / name
    elif args.data is None or args.out is None:
        print("align kto needs --data DIR --out ADAPTER (or --feedback)", file=sys.stderr)
        return 2
    else:
        data, out = args.data, args.out
    if args.calibrate_only:
        if name is not None:
            print("--calibrate-only takes --data DIR --out ADAPTER, not --feedback", file=sys.stderr)
            return 2
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        _print_calibration(calibrate(out, Path(data), model=args.model, device=args.device,
                                     target=args.target_precision, min_count=args.min_count), args.min_count)
        return 0
    cfg = KtoConfig(model=args.model, data=str(data), out=str(out), steps=args.steps, batch_size=args.batch_size,
                    lr=args.lr, beta=args.beta, ratio=args.ratio, rank=args.rank, alpha=args.alpha,
                    samples=args.samples, max_prompt=args.max_prompt, max_canvas=args.max_canvas,
                    seed=args.seed, threads=args.threads, device=args.device, eval_every=args.eval_every,
                    save_every=args.save_every, top_layers=args.top_layers, z0_pairs=args.z0_pairs,
                    eval_examples=args.eval_examples, max_minutes=args.max_minutes, keep_best=not args.keep_last)
    summary = train_kto(cfg, resume=args.resume, progress=not args.no_progress)
    cal = calibrate(out, Path(data), model=args.model, device=args.device, target=args.target_precision,
                    min_count=args.min_count)
    summary["calibration"] = cal
    Path(f"{out}.summary.json").write_text(json.dumps(summary, indent=1))
    first, last = summary["monitor"][0], summary["monitor"][-1]
    print(f"KTO {cfg.steps} steps on {summary['desirable']}+ / {summary['undesirable']}- examples "
          f"(lambda_D {summary['lambda'][0]:.3f}, lambda_U {summary['lambda'][1]:.3f}), {summary['seconds']:.0f} s")
    print(f"monitor loss {first['loss']:.4f} -> {last['loss']:.4f}; reward margin "
          f"{first['margin']:.3f} -> {last['margin']:.3f}; z0 {summary['z0']:.4f}")
    print(f"adapter {summary['adapter']}")
    _print_calibration(cal, args.min_count)
    if name is not None:
        kto_gate.set_current(d, name)
        print(f"current adapter: {name} (undo: edit-server align rollback)")
    return 0


def _print_calibration(cal: dict[str, Any], min_count: int) -> None:
    if cal["kinds"]:
        for k, c in cal["kinds"].items():
            print(f"gate {k}: n {c['n']} threshold {c['threshold']:.4f} held-out precision {c['precision']:.3f} "
                  f"coverage {c['coverage']:.3f}")
    else:
        print(f"no reward calibration ({cal['outcomes']} held-out outcomes, need >= {min_count} per kind): "
              "the server keeps the confidence gate for this adapter")


def run_rollback(args: argparse.Namespace) -> int:
    d = args.adapters_dir or kto_gate.adapters_dir()
    have = kto_gate.versions(d)
    cur = kto_gate.current_adapter(d)
    cur_v = int(cur.name.rsplit("v", 1)[1]) if cur is not None else None
    if args.list:
        for v in have:
            print(f"{'*' if v == cur_v else ' '} kto-v{v}")
        print(f"current: {cur.name if cur else 'none (confidence gate)'}")
        return 0
    if args.to is not None:
        to = args.to.lower().removeprefix("kto-").removeprefix("v")
        if to == "none":
            target = None
        elif to.isdigit() and int(to) in have:
            target = int(to)
        else:
            print(f"no adapter {args.to!r} in {d} (have: {', '.join(f'v{v}' for v in have) or 'none'})",
                  file=sys.stderr)
            return 1
    else:
        older = [v for v in have if cur_v is not None and v < cur_v]
        target = older[-1] if older else None
    kto_gate.set_current(d, None if target is None else f"kto-v{target}")
    print(f"current adapter: {'none (confidence gate)' if target is None else f'kto-v{target}'}")
    return 0
