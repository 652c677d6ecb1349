"""A GPU window's plan (here, before it): every device command in order with its carry, the seconds it is
expected to take and the window time it starts and ends at, from the budget (the device tool's
``budget_left_s``), the kind, the pack's uploads and the kind's speed (`recipe.throughput`). ``gpu_recipe plan``
prints it (`format_plan`); `recipe.base_window` plans a parted base's window with the same machinery."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.train.recipe import UPLOAD_LIMIT, MiB
from engine.train.recipe.throughput import LOAD_S, load_seconds, seconds_per_step


@dataclass
class Costs:
    """Seconds of each part of a window. Estimates unless marked: the 2026-11-26 H200 window held the
    machine 652 s for 601 s of commands (3 calls), so start + 3 transfers + 2 gaps took ≈ 51 s. Two Qwen
    windows (H200): the first call's start + its 63 MiB upload took 30 s and 35 s of lease; each
    further 63 MiB upload call, issued at once, 7-10 s of lease for a 3-6 s command."""
    machine_start_s: float = 35.0  # the first call's start (measured 30-35 s with its upload on an H200)
    gap_s: float = 8.0  # a reply → the next call (the caller's turn, prepared calls: 4-6 s); ≤ 30 s or the machine goes back
    upload_mib_s: float = 25.0  # transfer of the working tree + carry, per command
    fetch_s: float = 5.0  # files back from $OUT (≤ 64 MiB)
    receive_s: float = 3.0  # a receive of boot or base parts (copy + verify)
    install_base_s: float = 8.0  # the last base part: join + verify + decompress 98 MB (19 s on the 2-core CPU)
    start_s: float = 3.0  # start / resume (+ restore: join a 30 MB checkpoint) + launching the bench
    bench_s: float = 90.0  # the detached `bench` (engine.train.recipe.bench_gpu engine): random weights, both shapes
    load_s: float = LOAD_S
    export_s: float = 8.0  # the last step's validation + checkpoint + adapter export
    eval_s: float = 60.0  # HumanEval-infilling on the GPU (single-line, then multi-line), time-capped
    latency_s: float = 30.0  # engine.train.recipe.bench_gpu latency: the trained default, single-line + next edit
    collect_s: float = 4.0  # the final collect (checkpoint parts, status, logs, bench files)
    margin_s: float = 30.0  # unplanned slack kept back
    give_back_s: float = 5.0
    poll_max_s: float = 560.0  # one poll command (≤ 10 minutes a command, with room to spare)
    kto_min_s: float = 150.0  # a KTO slot shorter than this is not worth its data step
    train_min_s: float = 120.0
    train_full_s: float = 500.0  # ≈ 30M tokens on an H200: KTO shares a window only beyond this


@dataclass
class Step:
    what: str
    command: str
    carry: list[str] = field(default_factory=list)
    upload_bytes: int = 0
    seconds: float = 0.0
    start_s: float = 0.0  # window time when the command starts on the machine
    end_s: float = 0.0  # window time when its reply is back
    timeout_s: int = 600


def pack_uploads(pack_dir: Path) -> list[dict[str, Any]] | None:
    """The uploads of an existing pack (bytes and files per upload), from its manifest."""
    man = pack_dir / "up1" / "manifest.json"
    if not man.is_file():
        return None
    m = json.loads(man.read_text())
    ups: list[dict[str, Any]] = [{"carry": str(pack_dir / f"up{u}"), "bytes": 0, "files": set()}
                                 for u in range(1, m["uploads"] + 1)]
    for e in m["files"]:
        for p in e["parts"]:
            ups[p["upload"] - 1]["bytes"] += p["size"]
            ups[p["upload"] - 1]["files"].add(e["name"])
    return [{**u, "files": sorted(u["files"])} for u in ups]


def estimate_uploads(tree: int, boot: int = 3_000_000, base_xz: int = 90_400_000,
                     limit: int = UPLOAD_LIMIT, margin: int = MiB) -> list[dict[str, Any]]:
    """What `pack` would cut (boot first and whole, then the base) for a working tree of ``tree`` bytes."""
    cap = limit - tree - margin
    if cap < boot:
        raise ValueError(f"the working tree ({tree / MiB:.1f} MiB) leaves no room for the boot bundle")
    return fill_uploads(boot, base_xz, "base.gguf.xz", cap, "runs/gpu-pack")


def fill_uploads(boot: int, size: int, name: str, room: int, pack: str) -> list[dict[str, Any]]:
    """Uploads of ``room`` bytes each: the boot bundle first and whole, then ``size`` bytes of ``name``
    in the room left (its parts spread over as many uploads as it takes)."""
    ups: list[dict[str, Any]] = [{"bytes": boot, "files": ["boot.tar.xz"]}]
    left, free = size, room - boot
    while left > 0:
        if free <= 0:
            ups.append({"bytes": 0, "files": []})
            free = room
        n = min(left, free)
        ups[-1]["bytes"] += n
        ups[-1]["files"] = sorted(set(ups[-1]["files"]) | {name})
        left, free = left - n, free - n
    return [{"carry": f"{pack}/up{i}", **u} for i, u in enumerate(ups, 1)]


def plan_window(budget_s: float, kind: str, uploads: list[dict[str, Any]], tree: int, *,
                resume_from: str | None = None, resume_carry: int = 0, parts: tuple[str, ...] = (
                    "train", "bench", "latency"), costs: Costs | None = None,
                table: dict[str, Any] | None = None, py: str = "python3 -m engine.train.gpu_recipe",
                model: str | None = None, config: dict[str, Any] | None = None,
                kto_adapter: tuple[str, int] | None = None) -> dict[str, Any]:
    """Every device command of a window in order, with its carry, upload bytes and expected seconds.

    ``parts``: what the window does, most important first (``train``, ``bench``, ``latency``, ``kto``);
    what does not fit is dropped from the end and named in ``dropped``. ``kto_adapter``: (a carried
    adapter's path without suffix, its bytes) that KTO aligns when the window does not train (a parted
    base's shipped adapter sits the window's tree out: the KTO command carries a copy). Raises ValueError
    when even training does not fit."""
    c = costs or Costs()
    if model and c.load_s == LOAD_S:
        c = replace(c, load_s=load_seconds(model))
    per_step, estimate = seconds_per_step(kind, table, model=model, config=config)
    cfg = config or {}
    tokens_per_step = round(34_271 * int(cfg.get("batch_size", 16)) * int(cfg.get("grad_accum", 2))
                            * int(cfg.get("seq_len", 1024)) / (32 * 1024))  # SmolLM2's measured, scaled
    want = list(parts)
    while True:
        try:
            short = 0.0  # the extra poll commands' own costs come out of training: replan until it fits
            for _ in range(6):
                out = _plan(budget_s, kind, uploads, tree, resume_from, resume_carry, want, c, py, per_step,
                            tokens_per_step=tokens_per_step, short=short, kto_adapter=kto_adapter)
                if out["total_s"] <= budget_s - c.margin_s + 1e-6 or not out["train_end_s"]:
                    break
                short += out["total_s"] - (budget_s - c.margin_s)
            if out["total_s"] > budget_s - c.margin_s + 1e-6:
                raise _NoRoom
            if "kto" in want and "train" in want and out["train_s"] < c.train_full_s:
                raise _NoRoom  # training progress first: KTO only beside a full training slot
        except _NoRoom:
            if len(want) <= 1 or want[-1] == "train":
                raise ValueError(f"a {budget_s:.0f} s window on {kind} has no room for training "
                                 f"(at least {c.train_min_s:.0f} s) after its uploads") from None
            want.pop()
            continue
        out.update(kind=kind, s_per_step=round(per_step, 3), s_per_step_estimate=estimate, parts=want,
                   dropped=[p for p in parts if p not in want], model=model or "base", costs=c.__dict__)
        return out


class _NoRoom(Exception):
    pass


def _plan(budget: float, kind: str, uploads: list[dict[str, Any]], tree: int, resume_from: str | None,
          resume_carry: int, parts: list[str], c: Costs, py: str, per_step: float,
          tokens_per_step: int = 34_271, short: float = 0.0,
          kto_adapter: tuple[str, int] | None = None) -> dict[str, Any]:
    steps: list[Step] = []
    t = c.machine_start_s

    def add(s: Step, first: bool = False) -> Step:
        nonlocal t
        if not first:
            t += c.gap_s
        t += s.upload_bytes / MiB / c.upload_mib_s
        s.start_s = t
        t += s.seconds
        s.end_s = t
        steps.append(s)
        return s

    train, kto = "train" in parts, "kto" in parts
    bench, latency = "bench" in parts, "latency" in parts and train
    # the tail after training: export, eval, latency (inside the job), the final collect + fetch,
    # then the KTO command, the margin and the give-back
    kto_s = c.kto_min_s if kto else 0.0
    tail = ((c.export_s + c.eval_s + (c.latency_s if latency else 0.0)) if train else 0.0) + c.collect_s \
        + c.fetch_s + (c.gap_s + tree / MiB / c.upload_mib_s + kto_s + c.fetch_s if kto and train else 0.0) \
        + c.margin_s + c.gap_s + c.give_back_s
    train_end = budget - tail - short
    w0 = round(c.machine_start_s + (tree + uploads[0]["bytes"] + resume_carry) / MiB / c.upload_mib_s)
    win = f"--window-start now-{w0} --budget-s {budget:.0f} --train-end-s {train_end:.0f} --eval-s " \
          f"{c.eval_s:.0f}" + (f" --latency-s {c.latency_s:.0f}" if latency else " --latency-s 0")
    carried = bool(resume_from and resume_carry)
    if not train:
        launch = ""
    elif resume_from and not carried:  # the kept checkpoint is in the working tree: extend it at once
        launch = f" && {py} resume --from {resume_from} --extend {win}"
    else:
        launch = f" && {py} start {win}"
    # a carried checkpoint rides with the latest upload that has room for it (else a command of its own
    # before the last); `restore` puts it under the job, which reads it only once the base is complete
    restore_cmd = f"{py} restore --from {resume_from} --extend" if carried and train else ""
    ride = next((i for i in range(len(uploads) - 1, 0, -1)
                 if tree + uploads[i]["bytes"] + resume_carry <= UPLOAD_LIMIT), None) if restore_cmd else None
    if bench:  # the bench runs while the base uploads: no longer than that (≥ 60 s: the 7B shape needs it)
        up_s = sum(c.gap_s + (tree + u["bytes"]) / MiB / c.upload_mib_s + c.receive_s for u in uploads[1:])
        c = replace(c, bench_s=max(60.0, min(c.bench_s, up_s + c.install_base_s)))
    bench_cmd = f" && {py} bench --budget-s {c.bench_s:.0f}" if bench else ""
    for i, u in enumerate(uploads):
        last = i == len(uploads) - 1
        if restore_cmd and ride is None and last:
            add(Step("the kept checkpoint: restored under the waiting job (warm restart)", restore_cmd,
                     [str(resume_from)], tree + resume_carry, c.start_s))
        rides = restore_cmd and i == ride
        carry = [u["carry"]] + ([str(resume_from)] if rides else [])
        up_bytes = tree + u["bytes"] + (resume_carry if rides else 0)
        if up_bytes > UPLOAD_LIMIT:
            raise ValueError(f"command {i + 1} would upload {up_bytes / MiB:.1f} MiB > {UPLOAD_LIMIT / MiB:.0f} "
                             "MiB (pack again with --tree-bytes set to the tree + what it carries)")
        has_base = any(f != "boot.tar.xz" for f in u["files"])  # base.gguf.xz, or a tied-output copy
        secs = c.receive_s + (c.install_base_s if last and has_base else 0.0)
        if i == 0:
            cmd = f"{py} receive {u['carry']}{launch}{bench_cmd}"
            secs += c.start_s
            what = "boot bundle" + (" + base part" if has_base else "") + \
                (": receive, launch the job (corpus builds)" if train else "") + \
                ("; bench engine runs detached" if bench else "")
        else:
            cmd = f"{py} receive {u['carry']}"
            what = f"base part {i + 1}/{len(uploads)}" + (": the base is complete" if last else "")
            if rides:
                cmd, what, secs = f"{restore_cmd} && {cmd}", f"kept checkpoint (warm restart) + {what}", \
                    secs + c.start_s
        add(Step(what, cmd, carry, up_bytes, secs), first=i == 0)
    base_at = t
    train_s, n_steps = 0.0, 0
    if train:
        train_start = max(base_at, steps[0].start_s + (c.bench_s if bench else 0.0)) + c.load_s
        train_s = train_end - train_start
        if train_s < c.train_min_s:
            raise _NoRoom
        n_steps = int(train_s / per_step)
        done = train_end + c.export_s + c.eval_s + (c.latency_s if latency else 0.0)
        # poll until the job is done; split into ≤ poll_max_s commands, the first riding on the last upload
        last = steps[-1]
        wait = done - last.start_s - last.seconds
        first_wait = min(c.poll_max_s - last.seconds, max(0.0, wait))
        last.command += f" && {py} poll --wait {first_wait:.0f} --to $OUT"
        last.what += "; poll: the job trains, collecting each checkpoint"
        last.seconds += first_wait + c.collect_s
        last.end_s = last.start_s + last.seconds + c.fetch_s
        t = last.end_s
        wait -= first_wait
        n_more = -int(-wait // c.poll_max_s) if wait > 1 else 0
        for _ in range(n_more):  # balanced: no stub command for a few seconds' remainder
            add(Step("poll: training → export → eval → latency; collect",
                     f"{py} poll --wait {wait / n_more:.0f} --to $OUT", [], tree, wait / n_more + c.collect_s + c.fetch_s))
    elif bench:
        add(Step("collect the bench report", f"{py} poll --wait {c.bench_s:.0f} --to $OUT", [], tree,
                 c.bench_s + c.collect_s + c.fetch_s))
    if kto:
        carried = kto_adapter if not train else None  # after training KTO aligns the run's own adapter
        adapter = "run" if train else carried[0] if carried else "shipped"
        extra = carried[1] if carried else 0
        room = budget - t - c.margin_s - c.gap_s - c.give_back_s - extra / MiB / c.upload_mib_s
        per_cmd = c.gap_s + tree / MiB / c.upload_mib_s + c.collect_s + c.fetch_s
        n_cmd = max(1, -int(-room // (c.poll_max_s + per_cmd)))
        # the KTO job's own time; short of the minimum the plan overruns and training is shortened
        kto_s = max(c.kto_min_s, room - n_cmd * per_cmd)
        first = f"{py} align-start --adapter {adapter} --set {kto_sets(kto_s)} && "
        for k in range(n_cmd):
            w = kto_s / n_cmd
            add(Step(f"KTO on the {adapter} adapter: self-play → align kto → calibration (reward gate vs "
                     "confidence gate)" if k == 0 else "KTO: poll + collect",
                     f"{first if k == 0 else ''}{py} align-poll --wait {w:.0f} --to $OUT",
                     [str(Path(carried[0]).parent)] if carried and k == 0 else [],
                     tree + (extra if k == 0 else 0), w + c.collect_s + c.fetch_s))
    add(Step("give the machine back (device tool: give_back)", "give_back", [], 0, c.give_back_s))
    total = t
    gaps = [round(b.start_s - a.end_s - b.upload_bytes / MiB / c.upload_mib_s, 1)
            for a, b in zip(steps, steps[1:], strict=False)]
    return {"budget_s": budget, "tree_bytes": tree, "total_s": round(total, 1), "spare_s": round(budget - total, 1),
            "train_end_s": round(train_end, 1) if train else None, "train_s": round(train_s, 1),
            "steps": n_steps, "tokens": n_steps * tokens_per_step, "max_gap_s": max(gaps) if gaps else 0.0,
            "commands": [s.__dict__ for s in steps]}


# a self-play sample on an H200 (measured in a KTO window, `align data` included: 0.11 s each; the
# `bench_gpu latency` rows overestimate it several times over)
SELFPLAY_S = 0.13
KTO_STEP_S = 0.18  # a KTO step of 16 on an H200, rank 8 on the top 8 layers (measured in a KTO window)
KTO_PASSES = 3  # more passes over a window's few hundred examples overfit (docs/QUALITY.md)


def kto_sets(seconds: float) -> str:
    """`align-start --set` values that fit the KTO stage into ``seconds`` (self-play ≈ `SELFPLAY_S` a sample,
    a KTO step of 16 ≈ `KTO_STEP_S`, model loads ≈ 20 s; then `align measure`: the reward gate's precision vs
    the confidence gate's at equal coverage on held-out HumanEval + self-play). The steps stop at
    `KTO_PASSES` passes over the examples self-play makes (about one per sample), so the time left goes to
    more self-play, not to more passes over the same examples."""
    usable = max(0.0, seconds - 40)
    selfplay = int(max(48, usable * 0.5 / (1.25 * SELFPLAY_S)))  # half the time: training + held-out samples
    held = max(16, selfplay // 4)
    steps = int(max(10, min(usable * 0.2 / KTO_STEP_S, KTO_PASSES * selfplay / 16)))
    measure = int(min(50, max(10, usable * 0.1 / 0.6)))  # HumanEval tasks for the gate report (≈ 0.6 s each)
    return (f"selfplay={selfplay} heldout_selfplay={held} kto.steps={steps} kto.save-every={max(5, steps // 4)} "
            f"kto.eval-every={max(5, steps // 2)} kto.max-minutes={max(1.0, usable * 0.4 / 60):.1f} "
            f"measure_limit={measure}")


def format_plan(p: dict[str, Any]) -> str:
    est = ""
    if p["s_per_step_estimate"]:
        est = ", an estimate" + (": SmolLM2's measured s/step x training FLOPs per step" if p.get("model")
                                 not in (None, "base") else "")
    c = p.get("costs") or {}
    lines = [f"window: {p['budget_s']:.0f} s on {p['kind']}, model {p.get('model', 'base')} ({p['s_per_step']} "
             f"s/step{est}); working tree {p['tree_bytes'] / MiB:.1f} MiB",
             f"assumed: uploads at {c.get('upload_mib_s', 25):.0f} MiB/s, machine start "
             f"{c.get('machine_start_s', 60):.0f} s, {c.get('gap_s', 15):.0f} s between a reply and the next "
             f"call, model load + step-0 validation {c.get('load_s', LOAD_S):.0f} s",
             f"parts: {', '.join(p['parts'])}" + (f"  (dropped: {', '.join(p['dropped'])})" if p["dropped"] else ""),
             "", f"{'#':>2} {'start':>6} {'secs':>6} {'end':>6} {'up MiB':>7}  command"]
    for i, s in enumerate(p["commands"], 1):
        lines.append(f"{i:>2} {s['start_s']:>6.0f} {s['seconds']:>6.0f} {s['end_s']:>6.0f} "
                     f"{s['upload_bytes'] / MiB:>7.1f}  {s['what']}")
        if s["command"] != "give_back":
            lines.append(f"{'':>30}run(command=\"{s['command']}\", carry={s['carry']}, timeout_s={s['timeout_s']})")
    lines += ["", f"total {p['total_s']:.0f} s of {p['budget_s']:.0f} (spare {p['spare_s']:.0f} s, the margin not "
              f"counted); longest idle gap {p['max_gap_s']:.0f} s (the machine goes back after 30 s)"]
    if p["train_end_s"]:
        lines.append(f"training: until {p['train_end_s']:.0f} s into the window, ≈ {p['train_s']:.0f} s = "
                     f"{p['steps']} steps ≈ {p['tokens'] / 1e6:.1f}M tokens")
    return "\n".join(lines)
