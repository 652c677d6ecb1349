"""GPU training recipe CLI: ``python -m engine.train.gpu_recipe STAGE`` (see docs/TRAINING.md).

    pack      (here)  code + tokenizer + wheels + data + recipe, and the base, in upload folders (runs/gpu-pack/upN)
    receive   (GPU)   take upload folders' parts; install each file once all its parts are there
    start     (GPU)   the detached job: corpus → wait for the base → train (resumes) → eval → latency;
                      --window-start now-S --budget-s B --train-end-s T: fit the schedule to the window
    bench     (GPU)   detached engine bench on random weights (engine.train.recipe.bench_gpu engine) while the base uploads
    status            one JSON line: phase, step, loss, tokens/s, ETA, newest checkpoint
    poll      (GPU)   keep the machine busy for --wait seconds (status lines), collecting each new checkpoint
    stop      (GPU)   checkpoint + export after the current step; the job then evaluates
    collect   (GPU)   newest checkpoint in ≤ 15 MiB parts + sha256 manifest, status.json, log tail
    keep      (here)  verify collected parts, store them under engine/weights/gpu-ckpt (committable; a parted
                      base's under engine/weights/gpu-ckpt-<base>, e.g. gpu-ckpt-qwen2.5-coder-0.5b)
    restore   (GPU)   verify + join kept/collected parts under the job (which reads them once the base is
                      complete); --extend: the job warm-restarts from them
    resume    (GPU)   verify + join kept/collected parts into a fresh work dir, then start; --extend: a warm
                      restart (new warmup + cosine over the steps this window fits) instead of an exact resume
    plan      (here)  the whole window: each device command, its carry, expected seconds, cumulative time;
                      --base qwen2.5-coder-0.5b: a window that trains that base (its tied-output copy uploaded)
    base-parts (here) a parted base without output.weight, cut into upload folders beside the window's tree
    record    (here)  a collected run's measured seconds per step → recipe/throughput.json (first per kind)
    export    (here)  a checkpoint's adapter → engine/weights/default.{safetensors,json}

The alignment stage (`recipe.align`; KTO after training, or on the shipped adapter):

    align-start    (GPU)   detached: self-play on the corpus + packed feedback/evals → align data → align kto
    align-status           one JSON line: phase, KTO step, loss, reward margin, ETA, data counts, calibration
    align-poll     (GPU)   keep the machine busy --wait seconds, collecting each new KTO checkpoint
    align-stop     (GPU)   checkpoint after the current step; align kto then saves and calibrates
    align-collect  (GPU)   plan + reference + data + KTO checkpoint (+ the aligned adapter and its calibration
                           once done) in ≤ 15 MiB parts + sha256 manifest
    align-resume   (GPU)   verify + unpack a collected folder into a fresh work dir, then align-start
    align-export   (here)  the aligned adapter + reward calibration of a finished collect → PATH.*

Every stage prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine import options
from engine.train.recipe import COLLECT_PART, KEEP_DIR, PACK_DIR, ROOT, UPLOAD_LIMIT, MiB, default_work
from engine.train.recipe.align_cli import parsers as align_parsers
from engine.train.recipe.align_cli import run as run_align

CONFIG = ROOT / "engine" / "train" / "configs" / "gpu_smollm2.json"
QWEN_CONFIG = ROOT / "engine" / "train" / "configs" / "gpu_qwen05b_bd3.json"


def _sets(items: list[str]) -> dict[str, Any]:
    from engine.train.cli import parse_overrides

    return parse_overrides(items)


def humaneval_dir() -> Path:
    """``<shared>/data/humaneval-infilling``, found as `evals.datasets.shared_dir` finds it."""
    return Path(options.env().shared or ROOT.parent / "shared") / "data" / "humaneval-infilling"


HELD_OUT = ("click", "ky")  # the next-edit evaluation's repositories (docs/QUALITY.md): never in git_repos


def heldout_repos() -> tuple[Path, ...]:
    """``<shared>/data/git/{click,ky}.bundle``."""
    return tuple(humaneval_dir().parent / "git" / f"{n}.bundle" for n in HELD_OUT)


def next_edit_repos(repos: list[Path], config: dict[str, Any]) -> list[Path]:
    """The held-out repositories present here; an error when the config trains on one of them."""
    trained = {Path(g).name for g in config.get("git_repos") or []}
    both = sorted(r.name for r in repos if r.name in trained)
    if both:
        raise ValueError(f"--next-edit-repos: {both} in the config's git_repos: a held-out repository is never "
                         f"trained on")
    return [r for r in repos if r.exists()]


def run_pack(a: argparse.Namespace) -> dict[str, Any]:
    from engine.train.recipe.collect import checkpoint_bytes
    from engine.train.recipe.pack import SOURCES, fetch_wheels, pack

    config = {**json.loads(a.config.read_text()), **_sets(a.set)}
    base, base_raw, tree = None, None, a.tree_bytes
    model = str(config.get("model", "base")).strip().lower()
    if model == "base":
        from engine.loading.base import fetch_base
        from engine.train.recipe.base_parts import window_hold, window_tree_bytes

        base = a.gguf or fetch_base()
        if tree is None and window_hold(base=False):  # the parted bases' kept checkpoints: out for the window
            tree = window_tree_bytes(hold=window_hold(base=False))
    elif is_ar_base(model):  # a parted base: its tied-output copy, uncompressed, beside the window's tree
        from engine.train.recipe.base_parts import base_entry, tied_base, window_tree_bytes

        if not config.get("tied_output"):
            raise ValueError(f"{a.config}: tied_output must be true for {model} (the upload drops output.weight)")
        info = tied_base(model, source=a.gguf)
        base, base_raw = Path(info["path"]), base_entry(model, info)
        tree = window_tree_bytes() if tree is None else tree
    wheels = [] if a.no_wheels else fetch_wheels(a.wheels)
    ne = ns = None
    repos = next_edit_repos(a.next_edit_repos if a.next_edit_cases else [], config)
    if repos:
        from engine.train.recipe.git_data import build_heldout_sessions
        from engine.train.recipe.pack import build_next_edit_cases

        ne = build_next_edit_cases(repos, a.out / "cache" / "next-edit-cases.jsonl.gz", a.next_edit_cases)
        ns = build_heldout_sessions(repos, a.out / "cache" / "next-edit-sessions.jsonl.gz")
    opts = {"val_fraction": a.val_fraction, **({"max_files": a.max_files} if a.max_files else {})}
    plan = pack(a.out, config, base=base, wheels=wheels, sources=a.src or list(SOURCES), corpus_options=opts,
                eval_splits=a.eval_split, eval_limit=a.eval_limit, data=humaneval_dir(),
                upload_limit=a.upload_limit, tree=tree, align_feedback=a.align_feedback,
                align_eval=a.align_eval, base_raw=base_raw, next_edit_cases=ne, next_edit_sessions=ns)
    plan["checkpoint_bytes"] = checkpoint_bytes(config)
    plan["next_edit_cases"] = [str(r) for r in repos]
    return plan


def is_ar_base(model: str) -> bool:
    from engine.loading.base import PARTED

    return model.strip().lower() in PARTED


def run_base_parts(a: argparse.Namespace) -> dict[str, Any]:
    from engine.train.recipe.base_parts import base_parts

    return base_parts(a.name, a.out, tree=a.tree_bytes, upload_limit=a.upload_limit)


def run_poll(a: argparse.Namespace) -> dict[str, Any]:
    from engine.train.recipe.collect import collect
    from engine.train.recipe.job import status

    t0 = time.time()
    last, collected = 0.0, None
    while True:
        st = status(a.work)
        if a.to and st["ckpt_step"] != collected:  # each new checkpoint at once: a kill at the time
            collect(a.work, a.to)                   # limit still returns it ($OUT comes back then too)
            collected = st["ckpt_step"]
        if time.time() - last >= a.every:
            print(json.dumps(st), flush=True)
            last = time.time()
        if not (st["running"] or bench_running(a.work)) or time.time() - t0 >= a.wait:
            break
        time.sleep(min(2.0, max(0.1, a.wait - (time.time() - t0))))
    return collect(a.work, a.to) if a.to else status(a.work)


def bench_running(work: Path) -> bool:
    from engine.train.recipe.workdir import alive, read_json

    return alive((read_json(Path(work) / "bench" / "job.json") or {}).get("pid"), b"bench_gpu")


def window_args(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
    g = sp.add_argument_group("window", "the GPU window this job runs in (`plan` prints these)")
    g.add_argument("--window-start", help="the window's start: now-S (S seconds ago) or an epoch time")
    g.add_argument("--budget-s", type=float, help="the window's device time (status' budget_left_s)")
    g.add_argument("--train-end-s", type=float, help="training ends this long after the window's start")
    g.add_argument("--eval-s", type=float, help="seconds for the job's HumanEval sample after training")
    g.add_argument("--latency-s", type=float, help="seconds for the trained default's GPU latency rows")
    return sp


def window_from(a: argparse.Namespace) -> dict[str, Any] | None:
    from engine.train.recipe.window import parse_start

    if not a.window_start:
        return None
    return {"start": parse_start(a.window_start), "budget_s": a.budget_s, "train_end_s": a.train_end_s,
            "eval_s": a.eval_s, "latency_s": a.latency_s}


def run_plan(a: argparse.Namespace) -> dict[str, Any]:
    from engine.train.recipe.base_parts import hold_commands, window_hold, window_tree_bytes
    from engine.train.recipe.pack import tree_bytes
    from engine.train.recipe.plan import Costs, estimate_uploads, format_plan, pack_uploads, plan_window

    if a.base:
        return run_base_plan(a)
    hold = window_hold(base=False)  # the parted bases' kept checkpoints (36 MiB each) sit this window out
    tree = a.tree_bytes if a.tree_bytes is not None else window_tree_bytes(hold=hold) if hold else tree_bytes()
    uploads = pack_uploads(a.pack) or estimate_uploads(tree)
    resume_from, carry, prep = None, 0, ""
    a.resume_from = str(KEEP_DIR) if a.resume_from is None else a.resume_from
    if a.resume_from and Path(a.resume_from).is_dir():
        from engine.train.recipe.collect import verify

        src = Path(verify(Path(a.resume_from))["_dir"]).resolve()  # the newest intact ckpt-NNNNNN
        inside = src.is_relative_to(ROOT)
        resume_from = str(src.relative_to(ROOT)) if inside else str(src)
        if not inside or resume_from.startswith(("runs/", ".devcarry/")):  # not in the tree: carried once
            carry = sum(p.stat().st_size for p in src.iterdir() if p.is_file())
            if not resume_from.startswith(".devcarry/"):
                prep = f"rm -rf .devcarry/resume && mkdir -p .devcarry && cp -r {src} .devcarry/resume"
                resume_from = ".devcarry/resume"
    costs = Costs(**{k: v for k, v in (("bench_s", a.bench_s), ("eval_s", a.eval_s), ("gap_s", a.gap_s))
                     if v is not None})
    plan = plan_window(a.budget_s, a.kind, uploads, tree, resume_from=resume_from, resume_carry=carry,
                       parts=tuple(a.parts.split(",")), costs=costs)
    before, after = hold_commands(hold)
    prep = " && ".join(x for x in (prep, before) if x)
    plan.update(prepare=prep, after=after)
    if not a.json:
        print(("here, first: " + prep + "\n") if prep else "", end="")
        print(format_plan(plan))
        print(("here, after the window: " + after) if after else "", end="\n" if after else "")
        return {}
    return plan


def run_base_plan(a: argparse.Namespace) -> dict[str, Any]:
    """`plan --base NAME`: a window that trains a parted base (its tied-output copy uploaded) from scratch,
    with `HOLD` moved out of the tree for the window (`recipe.base_window`)."""
    from engine.train.recipe.base_window import base_window, format_base_window
    from engine.train.recipe.plan import Costs

    costs = Costs(**{k: v for k, v in (("bench_s", a.bench_s), ("eval_s", a.eval_s), ("gap_s", a.gap_s),
                                        ("upload_mib_s", a.upload_mib_s)) if v is not None})
    plan = base_window(a.base, a.budget_s, a.kind, pack=a.pack if a.pack != PACK_DIR else None,
                       tree=a.tree_bytes, parts=tuple(a.parts.split(",")), costs=costs,
                       config=a.config or QWEN_CONFIG, kept=Path(a.resume_from) if a.resume_from else None,
                       fresh=a.resume_from == "")
    if not a.json:
        print(format_base_window(plan))
        return {}
    return plan


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.train.gpu_recipe", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="stage", required=True)

    def work(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--work", type=Path, default=default_work(), help="work dir (default ~/edit-server-gpu)")
        return sp

    k = sub.add_parser("pack", help="build the upload folders (here)")
    k.add_argument("--out", type=Path, default=PACK_DIR)
    k.add_argument("--config", type=Path, default=CONFIG)
    k.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    k.add_argument("--gguf", type=Path, help="the base GGUF (default: fetched into the cache)")
    k.add_argument("--wheels", type=Path, default=ROOT / ".whl", help="GPU wheels (pip-downloaded if missing)")
    k.add_argument("--no-wheels", action="store_true", help="no tree-sitter on the GPU (no syntax spans)")
    k.add_argument("--src", nargs="*", help="corpus sources (default: stdlib purelib platlib of the GPU's Python)")
    k.add_argument("--max-files", type=int, default=0)
    k.add_argument("--val-fraction", type=float, default=0.02)
    k.add_argument("--eval-split", nargs="*", default=["single-line", "multi-line"])
    k.add_argument("--eval-limit", type=int, default=100)
    k.add_argument("--next-edit-repos", nargs="*", type=Path, default=list(heldout_repos()),
                   help="held-out repositories (bundles) whose next-edit cases the job evaluates in process "
                        "(default: click and ky from the shared data, never trained on)")
    k.add_argument("--next-edit-cases", type=int, default=30, help="cases per repository (0: no next-edit eval)")
    k.add_argument("--upload-limit", type=int, default=UPLOAD_LIMIT)
    k.add_argument("--tree-bytes", type=int, help="working-tree bytes (default: measured with git)")
    k.add_argument("--align-feedback", type=Path, action="append", default=[], metavar="DB",
                   help="a feedback store for the alignment stage's KTO data (its prompts leave this machine)")
    k.add_argument("--align-eval", type=Path, action="append", default=[], metavar="DIR",
                   help="an eval report directory for the alignment stage's KTO data")
    r = work(sub.add_parser("receive", help="take upload folders' parts (GPU)"))
    r.add_argument("dirs", nargs="*", type=Path)
    s = window_args(work(sub.add_parser("start", help="launch the detached job (GPU)")))
    s.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    b = work(sub.add_parser("bench", help="detached engine bench on random weights (GPU)"))
    b.add_argument("--budget-s", type=float, default=90.0)
    b.add_argument("--shapes", default="", help="engine.train.recipe.bench_gpu --shapes (default: its own)")
    b.add_argument("--prompts", default="", help="engine.train.recipe.bench_gpu --prompts (default: its own, 2K and 32K)")
    pl = sub.add_parser("plan", help="print the whole GPU window (here)")
    pl.add_argument("--budget-s", type=float, default=900.0, help="status' budget_left_s")
    pl.add_argument("--kind", default="nvidia-h200", help="status' kind")
    pl.add_argument("--pack", type=Path, default=PACK_DIR)
    pl.add_argument("--tree-bytes", type=int, help="working-tree bytes (default: measured with git)")
    pl.add_argument("--from", dest="resume_from", default=None,
                    help="a kept checkpoint to extend (default engine/weights/gpu-ckpt, with --base "
                    "engine/weights/gpu-ckpt-<base>; '' for a fresh run)")
    pl.add_argument("--parts", default="train,bench,latency",
                    help="most important first: train, bench, latency, kto (dropped from the end if short)")
    pl.add_argument("--base", default="", help="a parted base to train instead (qwen2.5-coder-0.5b): its own window")
    pl.add_argument("--config", type=Path, help="with --base: the training config (default configs/gpu_qwen05b_bd3.json)")
    pl.add_argument("--upload-mib-s", type=float, help="upload speed to plan with (default 25, assumed)")
    pl.add_argument("--bench-s", type=float)
    pl.add_argument("--eval-s", type=float)
    pl.add_argument("--gap-s", type=float)
    pl.add_argument("--json", action="store_true")
    bp = sub.add_parser("base-parts", help="a parted base without output.weight, in upload folders (here)")
    bp.add_argument("name", help="qwen2.5-coder-0.5b")
    bp.add_argument("--out", type=Path, default=ROOT / "runs" / "base-parts")
    bp.add_argument("--tree-bytes", type=int, help="working-tree bytes in the window (default: measured with "
                    "git, less the paths the window moves out)")
    bp.add_argument("--upload-limit", type=int, default=UPLOAD_LIMIT)
    rc = sub.add_parser("record", help="a collected run's seconds per step → recipe/throughput.json (here)")
    rc.add_argument("src", type=Path, help="a collected folder (status.json)")
    rc.add_argument("--force", action="store_true")
    work(sub.add_parser("status", help="one JSON line"))
    q = work(sub.add_parser("poll", help="stay busy --wait s (status lines), then collect to --to"))
    q.add_argument("--wait", type=float, default=240.0)
    q.add_argument("--every", type=float, default=30.0)
    q.add_argument("--to", type=Path)
    work(sub.add_parser("stop", help="checkpoint + export now; the job then evaluates"))
    c = work(sub.add_parser("collect", help="newest checkpoint in parts + status into --to"))
    c.add_argument("--to", type=Path, required=True)
    c.add_argument("--part-mib", type=float, default=COLLECT_PART / MiB)
    e = sub.add_parser("keep", help="verify collected parts and store them (here)")
    e.add_argument("src", type=Path)
    e.add_argument("--to", type=Path, default=None, help="default: engine/weights/gpu-ckpt, or "
                   "engine/weights/gpu-ckpt-<base> for a parted base's run (from the manifest's config)")
    e.add_argument("--force", action="store_true")
    r2 = work(sub.add_parser("restore", help="join kept/collected parts into the work dir, no start (GPU)"))
    r2.add_argument("--from", dest="src", type=Path, default=KEEP_DIR)
    r2.add_argument("--force", action="store_true")
    r2.add_argument("--extend", action="store_true", help="the running job warm-restarts from it")
    u = window_args(work(sub.add_parser("resume", help="join kept/collected parts into the work dir, then start "
                                                      "(GPU)")))
    u.add_argument("--from", dest="src", type=Path, default=KEEP_DIR)
    u.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    u.add_argument("--force", action="store_true")
    u.add_argument("--extend", action="store_true",
                   help="a warm restart from the checkpoint: new warmup + cosine over the steps this window fits")
    x = sub.add_parser("export", help="a checkpoint's adapter → engine/weights/default.* (here)")
    x.add_argument("src", type=Path)
    x.add_argument("--to", type=Path, default=ROOT / "engine" / "weights" / "default")
    j = sub.add_parser("job", help=argparse.SUPPRESS)
    j.add_argument("--work", type=Path, required=True)
    align_parsers(sub, work)
    a = p.parse_args(argv)

    from engine.loading.base import FetchError
    from engine.train.recipe import collect as col
    from engine.train.recipe import job
    from engine.train.recipe.receive import receive
    from engine.train.recipe.workdir import RecipeError

    if a.stage == "job":
        return job.run_job(a.work)
    if a.stage == "align-job":
        from engine.train.recipe.align import run_job

        return run_job(a.work)
    try:
        out: Any
        if a.stage.startswith("align-"):
            out = run_align(a)
        elif a.stage == "pack":
            out = run_pack(a)
        elif a.stage == "receive":
            out = receive(a.work, a.dirs)
        elif a.stage == "start":
            out = job.start(a.work, _sets(a.set), window=window_from(a))
        elif a.stage == "bench":
            extra = [*(["--shapes", a.shapes] if a.shapes else []), *(["--prompts", a.prompts] if a.prompts else [])]
            out = job.start_bench(a.work, a.budget_s, extra=extra)
        elif a.stage == "base-parts":
            out = run_base_parts(a)
        elif a.stage == "plan":
            out = run_plan(a)
            if not out:
                return 0
        elif a.stage == "record":
            out = col.record(a.src, force=a.force)
        elif a.stage == "status":
            out = job.status(a.work)
        elif a.stage == "poll":
            out = run_poll(a)
        elif a.stage == "stop":
            out = job.stop(a.work)
        elif a.stage == "collect":
            out = col.collect(a.work, a.to, part_bytes=int(a.part_mib * MiB))
        elif a.stage == "keep":
            out = col.keep(a.src, a.to, force=a.force)
            if (a.src / "status.json").is_file():  # a kind's first measured speed goes into the table
                out["throughput"] = col.record(a.src)
        elif a.stage == "restore":
            out = col.restore_into(a.src, a.work, force=a.force, extend=a.extend)
        elif a.stage == "resume":
            out = col.resume(a.src, a.work, _sets(a.set), force=a.force, extend=a.extend, window=window_from(a))
        else:
            out = {"adapter": [str(x) for x in col.export(a.src, a.to)]}
    except (RecipeError, col.PartsError, ValueError, OSError, FetchError) as err:
        print(json.dumps({"error": f"{type(err).__name__}: {err}"}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
