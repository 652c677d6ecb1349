"""`plan --base qwen2.5-coder-0.5b`: a whole GPU window that trains a parted base's block-diffusion adapter.

The same window machinery as SmolLM2's (`recipe.plan.plan_window`: the clock, uploads, polls, the
30 s rule, the margin), with what differs for a parted base:

- the base goes up as its tied-output copy (`recipe.base_parts`: 346 MB for Qwen2.5-Coder-0.5B),
  uncompressed, after the boot bundle, in upload folders cut to the room the *window's* tree leaves;
- the tree is lighter for the window: `HOLD` (the kept SmolLM2 checkpoint and the shipped SmolLM2
  adapter, 40 MB that a Qwen window never reads) moves out before the first command and back after the
  last — the plan prints both commands, and every command's upload is checked against 64 MiB with the
  tree as it will be;
- the first window trains fresh; every later one warm-restarts from the kept checkpoint
  (``engine/weights/gpu-ckpt-<base>``, `recipe.keep_dir`: committable since ``ckpt_moments: bfloat16``
  makes Qwen's rank-8 checkpoint 37.5 MB), which is held out of the tree too and carried once as
  ``.devcarry/resume`` (``restore --extend`` under the job: with its own command when no base upload has
  room for it), so the windows compound. ``steps`` are fitted from the kind's seconds per step of *this*
  config: measured once a window has recorded it (`gpu_recipe keep` / `record` →
  ``throughput.json``' ``models``), until then SmolLM2's measured H200 speed scaled by training FLOPs per
  step (`throughput.flops_ratio`), labelled an estimate; the trainer refits the steps to the deadline at the
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

from engine.train.recipe import BACK_FILES, BACK_TOTAL, COLLECT_PART, COMMIT_MAX, ROOT, MiB, keep_dir
from engine.train.recipe.base_parts import HOLD, hold_commands, window_hold, window_tree_bytes
from engine.train.recipe.plan import Costs, fill_uploads, format_plan, pack_uploads, plan_window

PACK = "runs/gpu-pack-qwen"
BOOT_ESTIMATE = 4_000_000  # code + HumanEval data + the 151,936-token tokenizer.json, xz (before a pack)
COLLECT_EXTRA = ("manifest.json", "status.json", "job.log")
# the last upload's receive: join 346 MB, sha256 of every part and of the whole, the GGUF header, the move
# (60 s on the shared 2-core VM at load ~8; SmolLM2's 98 MB xz took 19-28 s there and is planned at 8 s)
INSTALL_S = 25.0
HEADER_SLACK = 1_000_000  # the checkpoint's JSON header (config, loss history, curve) beside its tensors


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


CARRY = ".devcarry/resume"  # the kept checkpoint's copy, carried once (ignored by git: not in the tree)
KTO_CARRY = ".devcarry/adapter"  # the shipped adapter a KTO-only window aligns, carried by its KTO command


def shipped_adapter_of(name: str) -> Path | None:
    """The shipped adapter (path without suffix) of the tier built on parted base ``name``
    (`engine.tiers.SHIPPED`), None when there is none in the tree."""
    from engine.tiers import SHIPPED, shipped_adapter

    spec = next((m for m, s in SHIPPED.items() if s.base == name), None)
    path = shipped_adapter(spec) if spec is not None else None
    return path if path is not None and all(path.with_suffix(x).is_file() for x in (".safetensors", ".json")) \
        else None


def kept_checkpoint(src: Path, name: str) -> dict[str, Any] | None:
    """The intact kept checkpoint of ``name`` in ``src`` (None when ``src`` holds none): its step, folder
    (relative to the repository where it is inside), bytes to carry and config. A damaged one, or one of
    another base, is an error (PartsError / ValueError), not a silent fresh start."""
    from engine.train.recipe.collect import verify

    if not (Path(src) / "manifest.json").is_file() and not any(Path(src).glob("ckpt-*")):
        return None
    m = verify(Path(src))
    d = Path(m["_dir"]).resolve()
    model = str(m.get("config", {}).get("model", "")).strip().lower()
    if model != name:
        raise ValueError(f"{src}: the kept checkpoint trains {model!r}, not {name!r}")
    rel = str(d.relative_to(ROOT)) if d.is_relative_to(ROOT) else str(d)
    return {"dir": rel, "step": int(m["step"]), "bytes": sum(p.stat().st_size for p in d.iterdir() if p.is_file()),
            "checkpoint_bytes": int(m["checkpoint"]["size"]), "config": m.get("config") or {}}


def base_window(name: str, budget_s: float, kind: str, *, pack: Path | None = None, tree: int | None = None,
                parts: tuple[str, ...] = ("train", "bench", "latency"), costs: Costs | None = None,
                config: Path | dict[str, Any] | None = None, table: dict[str, Any] | None = None,
                hold: tuple[str, ...] | None = None, kept: Path | None = None, fresh: bool = False) -> dict[str, Any]:
    """The window for parted base ``name``: `plan_window`'s commands, plus what to do here before and after.

    ``kept`` (default: `keep_dir` of ``name``, ``engine/weights/gpu-ckpt-<name>``): a kept checkpoint there
    makes the window a warm restart from it (``restore --extend`` under the job once the base is complete);
    it is held out of the tree like the other weights (``hold``, default `window_hold`) and carried once as
    ``.devcarry/resume``, so each base upload keeps its room. ``fresh``: ignore it."""
    from engine.train.recipe.collect import checkpoint_bytes
    from engine.train.recipe.pack import capacity

    cfg = config if isinstance(config, dict) else json.loads(Path(config).read_text()) if config else {}
    if cfg and str(cfg.get("model", "")).lower() != name:
        raise ValueError(f"the config trains {cfg.get('model')!r}, not {name!r}")
    src = Path(kept) if kept is not None else keep_dir(name)
    train = "train" in parts
    k = None if fresh or not train else kept_checkpoint(src, name)  # no training: nothing to extend
    hold = window_hold() if hold is None else hold
    # KTO without training aligns this base's shipped adapter: held out of the tree like every shipped
    # parted adapter, a copy rides with the KTO command (`.devcarry/adapter`)
    shipped = shipped_adapter_of(name) if "kto" in parts and not train else None
    kto_adapter = (f"{KTO_CARRY}/{shipped.stem}", sum(shipped.with_suffix(x).stat().st_size
                                                      for x in (".safetensors", ".json"))) if shipped else None
    if k and not k["dir"].startswith(("runs/", ".devcarry/")) and not Path(k["dir"]).is_absolute() \
            and not any(k["dir"] == h or k["dir"].startswith(h + "/") for h in hold):
        hold = (*hold, k["dir"])  # in the tree: out for the window (its copy is carried once)
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
    plan = plan_window(budget_s, kind, uploads, tree, resume_from=CARRY if k else None,
                       resume_carry=k["bytes"] if k else 0, parts=parts, costs=c, table=table, model=name,
                       config=cfg, kto_adapter=kto_adapter)
    before, after = hold_commands(hold)
    size, measured = tied_size(name)
    cfg_rel = "engine/train/configs/gpu_qwen05b_bd3.json"
    # what the window's checkpoint will be: the kept one's shapes with the recipe's moments (a warm restart
    # takes ``ckpt_moments`` from the recipe, `window.EXTEND_KEYS`)
    final = {**k["config"], **{x: cfg[x] for x in ("ckpt_moments",) if x in cfg}} if k else cfg
    ck = checkpoint_bytes(final) if final else 0
    committable = bool(final) and ck + HEADER_SLACK <= COMMIT_MAX
    dest = str(keep_dir(name).relative_to(ROOT)) if committable else "runs/qwen-ckpt"
    prep = [f"rm -rf {CARRY} && mkdir -p {Path(CARRY).parent} && cp -r {k['dir']} {CARRY}   # the kept "
            f"checkpoint (step {k['step']}), carried once: the window warm-restarts from it"] if k else []
    if shipped is not None and "kto" in plan["parts"]:
        rel = shipped.relative_to(ROOT)
        prep.append(f"rm -rf {KTO_CARRY} && mkdir -p {KTO_CARRY} && cp {rel}.safetensors {rel}.json {KTO_CARRY}/"
                    "   # the shipped adapter KTO aligns, carried by the KTO command")
    if train:  # the checkpoint: kept (the next window extends it), exported, evaluated here
        then = [f"python -m engine.train.gpu_recipe keep <files_at> --to {dest}   # "
                + (f"committable ({ck / 1e6:.1f} MB ≤ {COMMIT_MAX / 1e6:.0f} MB): the next window extends it"
                   if committable else f"not committable: > {COMMIT_MAX / 1e6:.0f} MB")
                + "; also records the measured s/step in throughput.json",
                f"python -m engine.train.gpu_recipe export {dest} --to runs/qwen-adapter/default",
                "EDIT_SERVER_ADAPTER=runs/qwen-adapter/default python -m evals humaneval-infill --model default "
                "--device cpu --split single-line --limit 100"]
    else:
        then = ["python -m engine.train.gpu_recipe align-export <files_at> --to runs/kto-gpu/aligned   # the "
                "aligned adapter + its reward calibration (setting gate.kto); the measure is in status.json"]
    plan.update(
        base=name, packed=packed, base_bytes=size, base_bytes_measured=measured, capacity=room,
        collect=collect_fits(final) if final and train else None, kept=({kk: v for kk, v in k.items() if kk != "config"}
                                                           if k else None),
        keep_to=dest, committable=committable, hold=list(hold),
        here_before=[f"python -m engine.train.gpu_recipe pack --config {cfg_rel} --out {PACK} --max-files 12000 "
                     "--eval-split single-line multi-line --eval-limit 100   # boot + the tied base, cut for "
                     "the window's tree",
                     f"python -m engine.train.gpu_recipe plan --base {name} --budget-s {budget_s:.0f} --kind {kind}"
                     "   # again: the plan from the pack",
                     *prep,
                     before + "   # the window's tree: without the SmolLM2 checkpoint and adapter"
                     + (" and the kept checkpoints (carried once instead)" if len(hold) > len(HOLD) else "")],
        here_after=[after + "   # the moved paths back (also when the window failed)", *then],
    )
    return plan


def format_base_window(p: dict[str, Any]) -> str:
    lines = [f"base {p['base']}: tied-output copy {p['base_bytes'] / 1e6:.1f} MB"
             f"{'' if p['base_bytes_measured'] else ' (estimated: no copy cached yet)'}; "
             f"{'from the pack' if p['packed'] else 'no pack yet: uploads estimated'}; "
             f"room per upload {p['capacity'] / MiB:.1f} MiB beside the tree", ""]
    k = p.get("kept")
    if "train" not in p["parts"]:
        lines.append(f"no training in this window (parts: {', '.join(p['parts'])}): a kept checkpoint waits for the next")
    else:
        lines.append(f"warm restart from {k['dir']} (step {k['step']}, {k['bytes'] / MiB:.1f} MiB carried once as "
                     f"{CARRY}): the window extends it" if k else
                     f"first window of this base: training starts fresh (no kept checkpoint in "
                     f"{keep_dir(p['base']).relative_to(ROOT)})")
    lines += [""]
    lines += ["here, before the window:"] + [f"  {c}" for c in p["here_before"]] + [""]
    lines.append(format_plan(p))
    if p.get("collect"):
        c = p["collect"]
        lines.append(f"collect: checkpoint {c['checkpoint_bytes'] / MiB:.1f} MiB = {c['parts']} parts + "
                     f"{len(COLLECT_EXTRA)} files = {c['files']} files, {c['bytes'] / MiB:.1f} MiB (one command "
                     f"returns ≤ {BACK_FILES} files, ≤ {BACK_TOTAL / MiB:.0f} MiB)")
    lines += ["", "here, after the window:"] + [f"  {c}" for c in p["here_after"]]
    return "\n".join(lines)
