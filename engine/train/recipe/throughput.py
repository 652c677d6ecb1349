"""A GPU kind's training speed: the measured seconds per step of each kind (``throughput.json`` beside this
module, written by `record_throughput` after a window's first measurement), and the estimate for a model not
yet measured (SmolLM2's seconds per step scaled by training FLOPs per step). `window` fits a schedule with it;
`plan` times a window with it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from engine import options

THROUGHPUT = Path(__file__).with_name("throughput.json")


def device_kind(name: str) -> str:
    """``torch.cuda.get_device_name()`` → the device tool's kind (``nvidia-h200``, ``nvidia-h100-x1``)."""
    n = name.lower()
    if "h200" in n:
        return "nvidia-h200"
    if "h100" in n:
        return "nvidia-h100-x1"
    return re.sub(r"[^a-z0-9]+", "-", n).strip("-") or "unknown"


def table_path() -> Path:
    """``throughput.json`` beside this module (``$EDIT_SERVER_GPU_THROUGHPUT``: another table, for tests)."""
    return Path(options.env().gpu_throughput or THROUGHPUT)


def load_throughput(path: Path | None = None) -> dict[str, Any]:
    return json.loads((path or table_path()).read_text())


def seconds_per_step(kind: str, table: dict[str, Any] | None = None, *, model: str | None = None,
                     config: dict[str, Any] | None = None) -> tuple[float, bool]:
    """(s/step, whether it is an estimate) for ``kind``: of the GPU config (SmolLM2), or — ``model``, a
    parted base such as ``qwen2.5-coder-0.5b`` — its own measured entry (``models`` in the table, written
    by `record_throughput` after its first window), else the SmolLM2 entry scaled by training FLOPs per
    step (`flops_ratio`: ``config`` against configs/gpu_smollm2.json), an estimate."""
    t = table or load_throughput()
    e = t["kinds"].get(kind) or t["default"]
    per, est = float(e["s_per_step"]), bool(e.get("estimate", True))
    if not model or model in ("base", "tiny"):
        return per, est
    own = t.get("models", {}).get(model, {}).get("kinds", {}).get(kind)
    if own:
        return float(own["s_per_step"]), bool(own.get("estimate", True))
    return per * flops_ratio(model, config or {}), True


SMOLLM2_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "gpu_smollm2.json"


def train_flops_per_token(a: Any, seq_len: int, max_canvas: int) -> float:
    """≈ training FLOPs per BD3 sequence token of model shape ``a`` (`engine.config.ModelArgs`): 3 × the
    forward (the backward through the activations is ≈ 2 forwards; the frozen base has no weight gradients,
    the LoRA's are small) of the linear layers, the attention over ``seq_len`` and the output head, which
    runs only at canvas positions (≈ half of ``max_canvas`` in ``2 × seq_len``)."""
    hd = a.head_dim
    linear = 2 * a.n_layers * (a.dim * (a.n_heads + 2 * a.n_kv_heads) * hd + a.n_heads * hd * a.dim
                               + 3 * a.dim * a.intermediate_size)
    attn = 4 * a.n_layers * seq_len * a.n_heads * hd
    head = 2 * a.dim * a.vocab_size * max_canvas / (4 * seq_len)
    return 3.0 * (linear + attn + head)


def flops_ratio(model: str, config: dict[str, Any]) -> float:
    """Training FLOPs per step of ``config`` on ``model``'s shape ÷ those of the measured SmolLM2 config."""
    from engine.config import PRESETS, preset

    ref = json.loads(SMOLLM2_CONFIG.read_text())

    def per_step(name: str, c: dict[str, Any]) -> float:
        seq, canvas = int(c.get("seq_len", 1024)), int(c.get("max_canvas", 128))
        seqs = int(c.get("batch_size", 16)) * int(c.get("grad_accum", 1))
        return train_flops_per_token(preset(name), seq, canvas) * seq * seqs

    name = model if model in PRESETS else "smollm2-135m"
    return per_step(name, {**ref, **config}) / per_step("smollm2-135m", ref)


LOAD_S = 15.0  # model load + step-0 validation before the first step (GPU, SmolLM2)
LOAD_S_BY_MODEL = {"qwen2.5-coder-0.5b": 60.0}  # GGUF → 151,936-token tokenizer + dequantize: an estimate


def load_seconds(model: str | None) -> float:
    """Model load + step-0 validation before the first step (SmolLM2 on the H200: 15 s)."""
    return LOAD_S_BY_MODEL.get(str(model or ""), LOAD_S)


def record_throughput(measured: dict[str, Any], path: Path | None = None, *, force: bool = False) -> bool:
    """Write a job's measurement (``run/throughput.json``: kind, s_per_step, tok_s, ...) into the table when
    the kind has no entry or only an estimate (or ``force``). Returns whether it wrote."""
    path = path or table_path()
    t = load_throughput(path)
    kind, model = measured.get("kind"), measured.get("model")
    kinds = t["kinds"] if model in (None, "base", "tiny") else \
        t.setdefault("models", {}).setdefault(model, {}).setdefault("kinds", {})
    old = kinds.get(kind)
    if not kind or not measured.get("s_per_step") or (old and not old.get("estimate", True) and not force):
        return False
    kinds[kind] = {"s_per_step": round(float(measured["s_per_step"]), 4),
                        "tok_s": round(float(measured.get("tok_s") or 0)),
                        "tokens_per_step": round(float(measured.get("tokens_per_step") or 0)),
                        "estimate": False, "measured": measured.get("measured", "")}
    path.write_text(json.dumps(t, indent=1) + "\n")
    return True
