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
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class AdapterError(ValueError):
    pass


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


def load_adapter(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    path = Path(path)
    st, js = path.with_suffix(".safetensors"), path.with_suffix(".json")
    for f in (st, js):
        if not f.is_file():
            raise AdapterError(f"{f}: adapter file not found")
    try:
        meta = json.loads(js.read_text())
    except json.JSONDecodeError as e:
        raise AdapterError(f"{js}: not valid JSON ({e})") from e
    for key in ("lora", "special_tokens"):
        if key not in meta:
            raise AdapterError(f"{js}: missing field {key!r}")
    return load_file(str(st)), meta


def merge_adapter(state: dict[str, Tensor], tensors: dict[str, Tensor], meta: dict[str, Any], *,
                  source: str = "adapter") -> dict[str, Tensor]:
    """Merge adapter ``tensors`` into an HF-layout ``state`` dict (in place; returns it)."""
    lora = meta["lora"]
    scale = float(lora["alpha"]) / float(lora["rank"])
    special = meta["special_tokens"]
    new_ids = sorted(v for k, v in special.items() if k != "eos")
    for key, t in tensors.items():
        if key.endswith(".lora_A"):
            param = key[: -len(".lora_A")]
            b = tensors.get(param + ".lora_B")
            if param not in state or b is None:
                raise AdapterError(f"{source}: tensor {key!r} has no matching base weight / lora_B")
            w = state[param]
            state[param] = (w.float() + scale * (b.float() @ t.float())).to(w.dtype)
        elif key.endswith(".lora_B"):
            continue
        elif key in ("added_tokens.embed", "added_tokens.lm_head"):
            target = "model.embed_tokens.weight" if key.endswith("embed") else "lm_head.weight"
            if target not in state:
                continue
            w = state[target]
            if t.shape[0] != len(new_ids) or w.shape[0] < new_ids[-1] + 1:
                raise AdapterError(f"{source}: {key} has {t.shape[0]} rows, special_tokens lists "
                                   f"{len(new_ids)} ids, base has {w.shape[0]} rows")
            w = w.clone()
            w[torch.tensor(new_ids)] = t.to(w.dtype)
            state[target] = w
        else:
            if key not in state or state[key].shape != t.shape:
                raise AdapterError(f"{source}: tensor {key!r} does not match the base model")
            state[key] = t.to(state[key].dtype)
    return state
