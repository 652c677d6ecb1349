"""LoRA adapters: modules, trainable-parameter selection, adapter save/load/merge.

Adapter format (``NAME.safetensors`` + ``NAME.json``): tensors ``{param}.lora_A`` (r × in) and
``{param}.lora_B`` (out × r) for linear weights, where ``param`` is the HF name of the weight
(``model.layers.0.self_attn.q_proj.weight``); merged as ``W += (alpha / r) · B @ A``. Norm weights are stored
whole under their own names (they replace the base's). ``added_tokens.embed`` (n_new × dim) holds the
embedding rows of the special tokens appended after the base vocab (ids in the JSON's ``special_tokens``),
plus ``added_tokens.lm_head`` when the head is untied. Nothing is pickled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from engine.loading.adapter import AdapterError, load_adapter, merge_adapter

__all__ = ["AdapterError", "load_adapter", "merge_adapter"]

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRALinear(nn.Module):
    """y = base(x) + (alpha / r) · x Aᵀ Bᵀ, base frozen; B starts at zero (no change at init)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.rank, self.alpha = rank, alpha
        self.scale = alpha / rank
        dt, dev = base.weight.dtype, base.weight.device
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=dt, device=dev))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=dt, device=dev))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)

    @property
    def weight(self) -> Tensor:  # so code reading `.weight` (dtype, device) keeps working
        return self.base.weight

    def forward(self, x: Tensor) -> Tensor:
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            self.base.weight += (self.lora_B @ self.lora_A) * self.scale
        return self.base


def apply_lora(model: nn.Module, rank: int, alpha: float,
               targets: Iterable[str] = DEFAULT_TARGETS) -> dict[str, LoRALinear]:
    """Wrap every target linear in place; returns {weight param name: module}."""
    targets = tuple(targets)
    found: dict[str, LoRALinear] = {}
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if child_name in targets and isinstance(child, nn.Linear):
                lora = LoRALinear(child, rank, alpha)
                setattr(mod, child_name, lora)
                found[f"{name}.{child_name}.weight" if name else f"{child_name}.weight"] = lora
    if not found:
        raise AdapterError(f"no linear layers named {targets} found")
    return found


def merge_lora(model: nn.Module) -> None:
    """Replace every LoRALinear by its merged base linear (in place)."""
    for _name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if isinstance(child, LoRALinear):
                setattr(mod, child_name, child.merged())


def mark_trainable(model: nn.Module, base_vocab: int) -> list[dict[str, Any]]:
    """Freeze all but LoRA, norms and the new embedding rows; returns optimizer param groups."""
    lora, norms, embed = [], [], []
    for name, p in model.named_parameters():
        if ".lora_" in name:
            lora.append(p)
        elif name.endswith("norm.weight"):
            p.requires_grad_(True)
            norms.append(p)
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            p.requires_grad_(True)
            rows = torch.zeros(p.shape[0], 1, dtype=p.dtype, device=p.device)
            rows[base_vocab:] = 1
            p.register_hook(lambda g, rows=rows: g * rows)  # only the added tokens' rows learn
            embed.append(p)
        else:
            p.requires_grad_(False)
    return [{"params": lora, "weight_decay": 0.01}, {"params": norms, "weight_decay": 0.0},
            {"params": embed, "weight_decay": 0.0}]


def adapter_tensors(model: nn.Module, base_vocab: int) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, LoRALinear):
            out[f"{name}.weight.lora_A"] = mod.lora_A.detach().float().cpu().contiguous()
            out[f"{name}.weight.lora_B"] = mod.lora_B.detach().float().cpu().contiguous()
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            out[name] = p.detach().float().cpu().contiguous()
    emb = dict(model.named_parameters())["model.embed_tokens.weight"]
    out["added_tokens.embed"] = emb[base_vocab:].detach().float().cpu().contiguous()
    head = dict(model.named_parameters()).get("lm_head.weight")
    if head is not None:
        out["added_tokens.lm_head"] = head[base_vocab:].detach().float().cpu().contiguous()
    return out


def save_adapter(path: Path, model: nn.Module, base_vocab: int, meta: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``path``.safetensors + ``path``.json (``path`` without suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    st, js = path.with_suffix(".safetensors"), path.with_suffix(".json")
    save_file(adapter_tensors(model, base_vocab), str(st))
    js.write_text(json.dumps(meta, indent=1, sort_keys=True))
    return st, js
