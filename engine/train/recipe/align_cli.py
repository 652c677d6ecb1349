"""The alignment stage's commands of ``python -m engine.train.gpu_recipe`` (``align-*``: KTO after training,
or on a shipped adapter; the stage itself is `engine.train.recipe.align`, docs/TRAINING.md "Alignment stage").
`parsers` adds the subcommands, `run` runs one and returns its JSON-able answer."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from engine.train.recipe import COLLECT_PART, MiB


def plan(a: argparse.Namespace) -> dict[str, Any]:
    """``--config`` (default configs/gpu_kto.json) with ``--set key=value`` (``kto.FLAG=value`` for an
    `align kto` flag, e.g. ``kto.steps=400``)."""
    from engine.train.cli import parse_overrides

    plan = json.loads(a.config.read_text())
    for k, v in parse_overrides(a.set).items():
        if k.startswith("kto."):
            plan.setdefault("kto", {})[k[4:]] = v
        else:
            plan[k] = v
    return plan


def run_poll(a: argparse.Namespace) -> dict[str, Any]:
    from engine.train.recipe import align

    t0, last, collected = time.time(), 0.0, None
    while True:
        st = align.status(a.work)
        if a.to and (st["ckpt_step"], st["phase"]) != collected:
            align.collect(a.work, a.to)
            collected = (st["ckpt_step"], st["phase"])
        if time.time() - last >= a.every:
            print(json.dumps(st), flush=True)
            last = time.time()
        if not st["running"] or time.time() - t0 >= a.wait:
            break
        time.sleep(min(2.0, max(0.1, a.wait - (time.time() - t0))))
    return align.collect(a.work, a.to) if a.to else align.status(a.work)


def parsers(sub: argparse._SubParsersAction, work: Any) -> None:
    from engine.train.recipe.align import CONFIG as ALIGN_CONFIG

    s = work(sub.add_parser("align-start", help="launch the detached alignment job (GPU)"))
    s.add_argument("--config", type=Path, default=ALIGN_CONFIG)
    s.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    s.add_argument("--adapter", default="",
                   help='"run", "shipped" or a path (default: the run\'s, else shipped)')
    work(sub.add_parser("align-status", help="one JSON line"))
    work(sub.add_parser("align-stop", help="checkpoint now; align kto then saves and calibrates"))
    q = work(sub.add_parser("align-poll", help="stay busy --wait s, collecting to --to"))
    q.add_argument("--wait", type=float, default=240.0)
    q.add_argument("--every", type=float, default=30.0)
    q.add_argument("--to", type=Path)
    c = work(sub.add_parser("align-collect", help="alignment state in parts + status into --to"))
    c.add_argument("--to", type=Path, required=True)
    c.add_argument("--part-mib", type=float, default=COLLECT_PART / MiB)
    u = work(sub.add_parser("align-resume",
                            help="unpack a collected alignment into the work dir, then start"))
    u.add_argument("--from", dest="src", type=Path, required=True)
    x = sub.add_parser("align-export", help="the aligned adapter + calibration of a finished collect (here)")
    x.add_argument("src", type=Path)
    x.add_argument("--to", type=Path, required=True, help="adapter path without suffix")
    work(sub.add_parser("align-job", help=argparse.SUPPRESS))


def run(a: argparse.Namespace) -> Any:
    from engine.train.recipe import align

    if a.stage == "align-start":
        return align.start(a.work, plan(a), adapter=a.adapter)
    if a.stage == "align-status":
        return align.status(a.work)
    if a.stage == "align-stop":
        return align.stop(a.work)
    if a.stage == "align-poll":
        return run_poll(a)
    if a.stage == "align-collect":
        return align.collect(a.work, a.to, part_bytes=int(a.part_mib * MiB))
    if a.stage == "align-resume":
        return align.resume(a.src, a.work)
    return align.export(a.src, a.to)
