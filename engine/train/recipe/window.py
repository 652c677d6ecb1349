"""A GPU window on the machine: its clock, the schedule that fits it, warm restarts.

A window is the device time one session gets (15 minutes today: the machine's start, every upload, every
idle gap and every command count). Its clock starts when the first device command is asked for; the
machine cannot see that moment, so the first command passes ``--window-start now-S`` (S = the plan's
estimate of the machine's start + the first upload) and `start`/`resume` write ``WORK/window.json``::

    {"start": epoch s, "budget_s": 900, "train_end_s": 760, "eval_s": 60, "latency_s": 30, "kind": "...",
     "extend_from": 900}

The job trains until ``start + train_end_s`` (`TrainConfig.deadline`), with ``steps`` fitted to that
deadline from the kind's recorded seconds per step (``throughput.json``; refitted by the trainer at the end
of warmup from the speed it measures), then exports, evaluates and measures latency inside the rest.
``max_minutes`` in a window counts from the window's start, not the trainer's, and caps it only when asked
(``--set max_minutes=…``) or when the window has no ``train_end_s`` (the recipe's own value is a backstop).

A window continuing a kept checkpoint (``resume --extend``) is a *warm restart*: the checkpoint's config,
data stream (the example RNG continues), corpus recipe and optimizer state, with a new warmup + cosine over
the new steps (``schedule_start`` = the checkpoint's step) and the recipe's current task mix — so every
window adds its tokens to the last instead of starting over.

The plan of a window (each device command with its carry and expected seconds) is `recipe.plan`; the kinds'
speeds are `recipe.throughput`.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from engine.train.recipe.throughput import load_seconds, seconds_per_step

WINDOW = "window.json"
# what a warm restart takes from the recipe's config (the rest is the checkpoint's: shapes, LoRA, seed, ...)
EXTEND_KEYS = ("mix", "max_canvas", "max_edit_canvas", "sections_share", "fim_layout", "val_examples", "save_every", "save_minutes", "label",
               "max_minutes", "ckpt_moments", "edit_emphasis", "git_noedit_share")
WARM_RESTART = {"warmup": 30, "lr": 5e-4, "embed_lr": 1e-3, "min_lr_ratio": 0.1}


# ---- the window's clock (GPU side) ---------------------------------------------------------------
def parse_start(spec: str, now: float | None = None) -> float:
    """``now``, ``now-75`` (seconds before now) or an epoch time."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"now(?:-(\d+(?:\.\d+)?))?", spec.strip())
    if m:
        return now - float(m.group(1) or 0)
    return float(spec)


def write_window(work: Path, **fields_: Any) -> dict[str, Any]:
    """Merge ``fields_`` into ``WORK/window.json`` (the first write of a window sets its start)."""
    p = Path(work) / WINDOW
    old = read_window(work) or {}
    w = {**old, **{k: v for k, v in fields_.items() if v is not None}}
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(w, indent=1))
    os.replace(tmp, p)
    return w


def read_window(work: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(work) / WINDOW).read_text())
    except (OSError, ValueError):
        return None


def train_deadline(win: dict[str, Any], max_minutes: float = 0.0) -> float:
    """Epoch time by which training ends: the plan's ``train_end_s``, or ``max_minutes`` after the window's
    start (whichever is earlier)."""
    ends = []
    if win.get("train_end_s"):
        ends.append(win["start"] + float(win["train_end_s"]))
    if max_minutes > 0:
        ends.append(win["start"] + max_minutes * 60)
    return min(ends) if ends else 0.0


def window_config(d: dict[str, Any], win: dict[str, Any] | None, *, step: int, kind: str,
                  recipe_config: dict[str, Any], restart: bool, now: float | None = None,
                  table: dict[str, Any] | None = None, sets: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trainer's config in a window: deadline + fitted steps (and, on ``restart``, the warm restart).

    ``d``: the config as the job has it (the recipe's, or the checkpoint's); ``step``: the checkpoint's
    step (0 for a fresh run); ``sets``: `start --set` overrides, applied after the warm restart's."""
    d = dict(d)
    if restart:  # the recipe's mix and budget (not the old window's max_minutes), new rates, new schedule
        d.update({k: recipe_config[k] for k in EXTEND_KEYS if k in recipe_config})
        d.update(WARM_RESTART, schedule_start=step, strict_resume=False)
    d.update(sets or {})
    if not win:
        return d
    # the plan's train_end_s rules a window; the config's max_minutes is a backstop for a window without one
    # (a fixed max_minutes ends training long before a plan's train_end_s, wasting the window); an explicit
    # `--set max_minutes=…` still caps it
    asked = (sets or {}).get("max_minutes")
    cap = float(asked) if asked is not None else 0.0 if win.get("train_end_s") else float(d.get("max_minutes") or 0)
    deadline = train_deadline(win, cap)
    if not deadline:
        return d
    now = time.time() if now is None else now
    per_step, _ = seconds_per_step(kind, table, model=d.get("model"), config=d)
    fresh = step == 0 or restart
    d.update(deadline=deadline, max_minutes=0.0)
    if fresh:  # a new schedule: as many steps as fit (refitted at the end of warmup)
        n = max(1, int((deadline - now - load_seconds(d.get("model"))) / per_step))
        warm = int(d.get("warmup") or 0)
        d.update(steps=step + max(n, warm + 1), fit_deadline=True)
        d["val_every"] = max(1, n // 2 + 1)  # one validation midway, one at the end
    return d
