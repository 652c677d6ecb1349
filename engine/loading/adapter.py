"""LoRA adapter files: load (safetensors + JSON, nothing unpickled) and merge into a base state dict.

Serving needs only this (``engine.default`` merges the shipped adapter at load); training writes adapters
with ``engine.train.lora.save_adapter``. Format: see ``engine/train/lora.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor


class AdapterError(ValueError):
    """A broken adapter: the message names the file and the field."""


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
            first = (meta.get("added_rows") or {}).get("first")
            if first is not None:  # every row from the first special id on (Qwen: its own FIM rows and
                rows = list(range(int(first), int(first) + t.shape[0]))  # ours in unused slots, 277 rows)
                if not rows or rows[-1] >= w.shape[0] or any(i not in rows for i in new_ids):
                    raise AdapterError(f"{source}: {key} has {t.shape[0]} rows from added_rows.first={first}, "
                                       f"the base has {w.shape[0]} rows, special_tokens {new_ids}")
            elif t.shape[0] != len(new_ids) or w.shape[0] < new_ids[-1] + 1:
                raise AdapterError(f"{source}: {key} has {t.shape[0]} rows, special_tokens lists "
                                   f"{len(new_ids)} ids, base has {w.shape[0]} rows")
            else:
                rows = new_ids
            w = w.clone()
            w[torch.tensor(rows)] = t.to(w.dtype)
            state[target] = w
        else:
            if key not in state or state[key].shape != t.shape:
                raise AdapterError(f"{source}: tensor {key!r} does not match the base model")
            state[key] = t.to(state[key].dtype)
    return state
