"""Training checkpoints: ONE safetensors file per checkpoint, nothing pickled.

``OUT/ckpt/step-NNNNNN.safetensors`` holds

    adapter/{name}            the trainable weights in the adapter format (`lora.adapter_tensors`, fp32)
    optim/{i}/{exp_avg,...}   AdamW state per parameter index; for the embedding only the added rows
                              (the base rows' moments are exactly zero: their gradient is masked); the
                              moments in ``ckpt_moments``' dtype (fp32, or bf16: training keeps fp32 in
                              memory and resuming casts them back), ``step`` as it is
    rng/noise, rng/torch      torch.Generator / global RNG states (uint8), rng/cuda when on CUDA

and, as the header's metadata ``train_state`` (JSON): format, step, the whole config, optimizer param
groups, the example stream's ``random.Random`` state, the loss history and validation curve, tokens and
seconds so far, the corpus digest and the adapter JSON as of this step. ``OUT/ckpt/latest.json`` names
the newest complete file (written after it, atomically), so a kill at any moment leaves a loadable
checkpoint. Resuming restores all of it: step, data order, LR schedule and RNG continue exactly.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from engine.train.lora import adapter_tensors

FORMAT = "edit-server-train-ckpt/1"
MOMENT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # TrainConfig.ckpt_moments
META_KEY = "train_state"
LATEST = "latest.json"


def rng_to_json(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_from_json(state: list[Any]) -> tuple[Any, ...]:
    return (state[0], tuple(state[1]), state[2])


def optimizer_tensors(opt: torch.optim.Optimizer, base_vocab: int, moments: str = "float32") -> tuple[
        dict[str, torch.Tensor], dict[str, int], list[dict]]:
    """(tensors, rows_from per param index, JSON param groups) of an AdamW state, its moments (floating
    tensors with dim > 0; never ``step``) cast to ``moments`` (a `MOMENT_DTYPES` name)."""
    if moments not in MOMENT_DTYPES:
        raise ValueError(f"ckpt_moments: {moments!r} is not one of {', '.join(MOMENT_DTYPES)}")
    to = MOMENT_DTYPES[moments]
    sd = opt.state_dict()
    params = [p for g in opt.param_groups for p in g["params"]]
    tensors: dict[str, torch.Tensor] = {}
    rows: dict[str, int] = {}
    for i, st in sd["state"].items():
        big = params[i].dim() == 2 and params[i].shape[0] > base_vocab and _is_embedding(params[i], opt)
        cut = base_vocab if big and all(
            not torch.is_tensor(v) or v.dim() == 0 or not v[:base_vocab].any() for v in st.values()) else 0
        if cut:
            rows[str(i)] = cut
        for k, v in st.items():
            if torch.is_tensor(v):
                v = v[cut:] if cut and v.dim() else v
                if k != "step" and v.dim() and v.is_floating_point():
                    v = v.to(to)
                tensors[f"optim/{i}/{k}"] = v.detach().cpu().contiguous()
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, rows, groups


def _is_embedding(p: torch.Tensor, opt: torch.optim.Optimizer) -> bool:
    return any(p is q for q in opt.param_groups[-1]["params"])  # the added-rows group is the last one


def save_checkpoint(d: Path, model: nn.Module, opt: torch.optim.Optimizer, base_vocab: int,
                    state: dict[str, Any], rngs: dict[str, torch.Tensor], *, keep: int = 2,
                    moments: str = "float32") -> Path:
    """Write ``d/step-NNNNNN.safetensors`` (tmp + rename), then ``d/latest.json``; prune old ones.
    ``moments``: the AdamW moments' dtype in the file (recorded as the state's ``ckpt_moments``)."""
    d.mkdir(parents=True, exist_ok=True)
    tensors = {f"adapter/{k}": v for k, v in adapter_tensors(model, base_vocab).items()}
    optim, rows, groups = optimizer_tensors(opt, base_vocab, moments)
    tensors.update(optim)
    tensors.update({f"rng/{k}": v.cpu().contiguous() for k, v in rngs.items()})
    step = int(state["step"])
    meta = {**state, "format": FORMAT, "param_groups": groups, "optim_rows": rows, "base_vocab": base_vocab,
            "ckpt_moments": moments}
    path = d / f"step-{step:06d}.safetensors"
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={META_KEY: json.dumps(meta)})
    os.replace(tmp, path)
    write_json_atomic(d / LATEST, {"file": path.name, "step": step})
    for old in sorted(d.glob("step-*.safetensors"))[:-keep]:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def latest_checkpoint(d: Path) -> Path | None:
    """The newest complete checkpoint in ``d`` (per latest.json, else the highest step file)."""
    try:
        name = json.loads((d / LATEST).read_text())["file"]
        if (d / name).is_file():
            return d / name
    except (OSError, ValueError, KeyError):
        pass
    found = sorted(d.glob("step-*.safetensors")) if d.is_dir() else []
    return found[-1] if found else None


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, state) of one checkpoint file; a clear error for anything else."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if META_KEY not in meta:
            raise ValueError(f"{path}: not a training checkpoint (no '{META_KEY}' metadata)")
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    state = json.loads(meta[META_KEY])
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}: checkpoint format {state.get('format')!r}, expected {FORMAT!r}")
    return tensors, state


def read_state(path: Path) -> dict[str, Any]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if META_KEY not in meta:
        raise ValueError(f"{path}: not a training checkpoint (no '{META_KEY}' metadata)")
    return json.loads(meta[META_KEY])


def adapter_part(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("adapter/")}


def load_into(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Copy the adapter tensors of a checkpoint into a model wrapped with `apply_lora`."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for key, t in adapter_part(tensors).items():
            if key.endswith((".lora_A", ".lora_B")):
                params[key.replace(".weight.lora_", ".lora_")].copy_(t)
            elif key in ("added_tokens.embed", "added_tokens.lm_head"):
                w = params["model.embed_tokens.weight" if key.endswith("embed") else "lm_head.weight"]
                w[w.shape[0] - t.shape[0]:] = t.to(w.dtype)
            elif key in params:
                params[key].copy_(t)
            else:
                raise ValueError(f"checkpoint tensor {key!r} matches no parameter of the model")


def restore(path: Path, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[dict[str, Any],
                                                                            dict[str, torch.Tensor]]:
    """Load weights and optimizer state (moments stored in bf16 come back in the parameter's dtype, fp32);
    returns (state JSON, rng tensors)."""
    tensors, state = read_checkpoint(path)
    load_into(model, tensors)
    params = [p for g in opt.param_groups for p in g["params"]]
    st: dict[int, dict[str, Any]] = {}
    for key, v in tensors.items():
        if not key.startswith("optim/"):
            continue
        _, i, k = key.split("/", 2)
        cut = int(state["optim_rows"].get(i, 0))
        p = params[int(i)]
        if k != "step" and v.dim() and v.is_floating_point() and p.is_floating_point():
            v = v.to(p.dtype)  # explicit (Optimizer.load_state_dict casts too): fp32 moments in memory
        if cut and v.dim():
            full = torch.zeros(p.shape, dtype=v.dtype)
            full[cut:] = v
            v = full
        st.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": st, "param_groups": state["param_groups"]})
    rngs = {k.split("/", 1)[1]: v for k, v in tensors.items() if k.startswith("rng/")}
    return state, rngs


# ---- resuming safely ---------------------------------------------------------------------------
# config fields that decide the trajectory (data order, noise, schedule, shapes): a resume that changes
# one of them is not a continuation (``strict_resume=false`` allows it, e.g. to extend ``steps``)
TRAJECTORY = ("model", "seq_len", "block_size", "max_canvas", "max_edit_canvas", "sections_share", "chars_per_token", "batch_size", "grad_accum",
              "steps", "lr", "embed_lr", "warmup", "min_lr_ratio", "rank", "alpha", "targets", "seed", "mix",
              "git_repos", "schedule_start", "edit_emphasis", "git_noedit_share")


def corpus_info(corpus: Any) -> dict[str, Any]:
    idx = corpus.index
    return {"digest": idx.get("digest"), "docs": idx.get("docs"), "tokens": idx.get("tokens")}


def check_resumable(cfg: Any, state: dict[str, Any], corpus: Any) -> None:
    """Raise if resuming ``state`` with ``cfg`` on ``corpus`` would not continue the same run."""
    if not getattr(cfg, "strict_resume", True):
        return
    old = state["config"]
    changed = [k for k in TRAJECTORY if k in old and old[k] != getattr(cfg, k)]
    if changed:
        diff = ", ".join(f"{k}: {old[k]!r} -> {getattr(cfg, k)!r}" for k in changed)
        raise ValueError(f"resume would change the run ({diff}); use the checkpoint's config "
                         "or set strict_resume=false")
    want, have = (state.get("corpus") or {}).get("digest"), corpus_info(corpus)["digest"]
    if want and have and want != have:
        raise ValueError(f"resume on a different corpus (digest {have[:12]} != checkpoint's {want[:12]}): "
                         "the data order would not continue; rebuild it from the same sources and options "
                         "or set strict_resume=false")


# ---- live state for pollers ----------------------------------------------------------------------
class Progress:
    """A live progress file (the trainer's ``out/progress.json``, KTO's ``OUT.progress.json``): step, loss,
    ETA, newest checkpoint and the caller's own fields, rewritten atomically at most once a second — what
    the GPU recipe's ``status`` / ``align-status`` read while a job runs detached."""

    def __init__(self, path: Path, steps: int, start: int, ckpt_step: int | None = None) -> None:
        self.path, self.steps, self.start = path, steps, start
        self.ckpt_step = ckpt_step
        self._last = 0.0
        path.parent.mkdir(parents=True, exist_ok=True)

    def update(self, history: list[dict[str, Any]], elapsed: float, extra: dict[str, Any], *,
               force: bool = False) -> None:
        """``history``: the step records (``step``, ``loss``); ``extra``: fields to add (the last record's
        own, a validation figure, tokens/s)."""
        import time

        now = time.time()
        if not force and now - self._last < 1.0:
            return
        self._last = now
        step = history[-1]["step"] if history else self.start
        tail = history[-10:]
        rate = (step - self.start) / elapsed if elapsed > 0 else 0.0
        write_json_atomic(self.path, {
            "step": step, "steps": self.steps, "loss": tail[-1]["loss"] if tail else None,
            "loss_avg10": sum(h["loss"] for h in tail) / len(tail) if tail else None, **extra,
            "steps_per_s": round(rate, 4), "eta_s": round((self.steps - step) / rate) if rate > 0 else None,
            "ckpt_step": self.ckpt_step, "time": now})
