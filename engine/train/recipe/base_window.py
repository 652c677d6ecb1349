"""`plan --base qwen2.5-coder-0.5b`: a whole GPU window that trains a parted base's block-diffusion adapter.

The same window machinery as SmolLM2's (`recipe.window.plan_window`: the clock, uploads, polls, the
30 s rule, the margin), with what differs for a parted base:

- the base goes up as its tied-output copy (`recipe.base_parts`: 346 MB for Qwen2.5-Coder-0.5B),
  uncompressed, after the boot bundle, in upload folders cut to the room the *window's* tree leaves;
- the tree is lighter for the window: `HOLD` (the kept SmolLM2 checkpoint and the shipped SmolLM2
  adapter, 40 MB that a Qwen window never reads) moves out before the first command and back after the
  last — the plan prints both commands, and every command's upload is checked against 64 MiB with the
  tree as it will be;
- training starts fresh (no kept Qwen checkpoint yet) with ``steps`` fitted from the kind's seconds per
  step of *this* config: measured once a window has recorded it (`gpu_recipe keep` / `record` →
  ``throughput.json``' ``models``), until then SmolLM2's measured H200 speed scaled by training FLOPs per
  step (`window.flops_ratio`), labelled an estimate; the trainer refits the steps to the deadline at the
  end of warmup from the speed it measures, and the job writes that speed to ``run/throughput.json``;
- what comes back must fit one command: the checkpoint's parts + manifest + status.json + job.log ≤ 8
  files and ≤ 64 MiB (`collect_fits`).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.train.recipe import BACK_FILES, BACK_TOTAL, COLLECT_PART, ROOT, MiB
from engine.train.recipe.base_parts import HOLD, hold_commands, window_tree_bytes
from engine.train.recipe.window import Costs, fill_uploads, format_plan, pack_uploads, plan_window

PACK = "runs/gpu-pack-qwen"
BOOT_ESTIMATE = 4_000_000  # code + HumanEval data + the 151,936-token tokenizer.json, xz (before a pack)
COLLECT_EXTRA = ("manifest.json", "status.json", "job.log")
# the last upload's receive: join 346 MB, sha256 of every part and of the whole, the GGUF header, the move
# (60 s on the shared 2-core VM at load ~8; SmolLM2's 98 MB xz took 19-28 s there and is planned at 8 s)
INSTALL_S = 25.0


def q8_0_bytes(rows: int, cols: int) -> int:
    """Bytes of a Q8_0 tensor: blocks of 32 values in 34 bytes (an fp16 scale + 32 int8)."""
    return rows * cols // 32 * 34


def tied_size(name: str) -> tuple[int, bool]:
    """(bytes of the tied-output copy, measured?): the cached copy's size, else the pinned file's less a
    Q8_0 output of the preset's shape."""
    from engine.config import preset
    from engine.loading.base import default_cache_dir, parted_base
    from engine.loading.tied import tied_name

    spec = parted_base(name)
    p = default_cache_dir() / tied_name(spec)
    if p.is_file():
        return p.stat().st_size, True
    a = preset(name)
    return spec.size - q8_0_bytes(a.vocab_size, a.dim), False


def estimate_base_uploads(name: str, tree: int, room: int) -> list[dict[str, Any]]:
    """What `pack` would cut for ``name`` (boot first, then the tied base) when no pack exists yet."""
    size, _ = tied_size(name)
    from engine.loading.base import parted_base
    from engine.loading.tied import tied_name

    return fill_uploads(BOOT_ESTIMATE, size, tied_name(parted_base(name)), room, PACK)


def collect_fits(config: dict[str, Any]) -> dict[str, Any]:
    """The final collect of ``config``'s checkpoint: parts, files and bytes against what comes back from one
    command (≤ 8 files, ≤ 64 MiB). Raises ValueError when it does not fit."""
    from engine.train.recipe.collect import checkpoint_bytes

    ck = checkpoint_bytes(config)
    parts = max(1, math.ceil(ck / COLLECT_PART))
    files = parts + len(COLLECT_EXTRA)
    total = ck + 1 * MiB  # the manifest, status.json and the log tail (≤ 200 KB)
    out = {"checkpoint_bytes": ck, "parts": parts, "files": files, "bytes": total}
    if files > BACK_FILES or total > BACK_TOTAL:
        raise ValueError(f"the checkpoint ({ck / MiB:.1f} MiB: {parts} parts + {len(COLLECT_EXTRA)} files) does "
                         f"not come back from one command (≤ {BACK_FILES} files, ≤ {BACK_TOTAL / MiB:.0f} MiB): "
                         "lower the LoRA rank")
    return out


def base_window(name: str, budget_s: float, kind: str, *, pack: Path | None = None, tree: int | None = None,
                parts: tuple[str, ...] = ("train", "bench", "latency"), costs: Costs | None = None,
                config: Path | dict[str, Any] | None = None, table: dict[str, Any] | None = None,
                hold: tuple[str, ...] = HOLD) -> dict[str, Any]:
    """The window for parted base ``name``: `plan_window`'s commands, plus what to do here before and after."""
    from engine.train.recipe.pack import capacity

    cfg = config if isinstance(config, dict) else json.loads(Path(config).read_text()) if config else {}
    if cfg and str(cfg.get("model", "")).lower() != name:
        raise ValueError(f"the config trains {cfg.get('model')!r}, not {name!r}")
    pack_dir = Path(pack) if pack is not None else ROOT / PACK
    tree = window_tree_bytes(hold=hold) if tree is None else tree
    room = capacity(tree)
    uploads = pack_uploads(pack_dir)
    packed = uploads is not None
    if uploads:
        rel = pack_dir.relative_to(ROOT) if pack_dir.is_absolute() and pack_dir.is_relative_to(ROOT) else pack_dir
        uploads = [{**u, "carry": f"{rel}/up{i}"} for i, u in enumerate(uploads, 1)]
    else:
        uploads = estimate_base_uploads(name, tree, room)
    c = costs or Costs()
    if c.install_base_s == Costs.install_base_s:
        c = replace(c, install_base_s=INSTALL_S)
    plan = plan_window(budget_s, kind, uploads, tree, resume_from=None, parts=parts, costs=c, table=table,
                       model=name, config=cfg)
    before, after = hold_commands(hold)
    size, measured = tied_size(name)
    cfg_rel = "engine/train/configs/gpu_qwen05b_bd3.json"
    plan.update(
        base=name, packed=packed, base_bytes=size, base_bytes_measured=measured, capacity=room,
        collect=collect_fits(cfg) if cfg else None,
        here_before=[f"python -m engine.train.gpu_recipe pack --config {cfg_rel} --out {PACK} --max-files 12000 "
                     "--eval-split single-line multi-line --eval-limit 100   # boot + the tied base, cut for "
                     "the window's tree",
                     f"python -m engine.train.gpu_recipe plan --base {name} --budget-s {budget_s:.0f} --kind {kind}"
                     "   # again: the plan from the pack",
                     before + "   # the window's tree: without the SmolLM2 checkpoint and adapter"],
        here_after=[after + "   # the moved paths back (also when the window failed)",
                    "python -m engine.train.gpu_recipe keep <files_at> --to runs/qwen-ckpt   # not committable: "
                    "> 50 MB; also records the measured s/step in throughput.json",
                    "python -m engine.train.gpu_recipe export runs/qwen-ckpt --to runs/qwen-adapter/default",
                    "EDIT_SERVER_ADAPTER=runs/qwen-adapter/default python -m evals humaneval-infill --model default "
                    "--device cpu --split single-line --limit 100"],
    )
    return plan


def format_base_window(p: dict[str, Any]) -> str:
    lines = [f"base {p['base']}: tied-output copy {p['base_bytes'] / 1e6:.1f} MB"
             f"{'' if p['base_bytes_measured'] else ' (estimated: no copy cached yet)'}; "
             f"{'from the pack' if p['packed'] else 'no pack yet: uploads estimated'}; "
             f"room per upload {p['capacity'] / MiB:.1f} MiB beside the tree", ""]
    lines += ["here, before the window:"] + [f"  {c}" for c in p["here_before"]] + [""]
    lines.append(format_plan(p))
    if p.get("collect"):
        c = p["collect"]
        lines.append(f"collect: checkpoint {c['checkpoint_bytes'] / MiB:.1f} MiB = {c['parts']} parts + "
                     f"{len(COLLECT_EXTRA)} files = {c['files']} files, {c['bytes'] / MiB:.1f} MiB (one command "
                     f"returns ≤ {BACK_FILES} files, ≤ {BACK_TOTAL / MiB:.0f} MiB)")
    lines += ["", "here, after the window:"] + [f"  {c}" for c in p["here_after"]]
    return "\n".join(lines)
