"""Load a local Hugging Face-style checkpoint directory (config.json + safetensors + tokenizer).

Architectures and their regimes: `engine.loading.archs` (Llama, Qwen2, Qwen3, Dream / Dream-Coder /
DreamOn / DiffuCoder, Fast-dLLM v2, SDAR, CoDA, LLaDA, LLaDA-MoE, LLaDA2.0). A model the registry
knows by name (`engine.registry`) may refine the regime (Open-dCoder ships a plain
``Qwen2ForCausalLM`` config but is a bidirectional diffusion model). Weights come from safetensors
only (one file, several files, or a ``model.safetensors.index.json`` shard map); pickles are refused.
The mask token comes from ``config.json`` (``mask_token_id``), else ``tokenizer_config.json``
(``mask_token``), else the registry's token text — never from a literal id.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.checkpoint import LoadedCheckpoint
from engine.loading.archs import ARCHITECTURES, Config, architecture, llada_name  # noqa: F401 (re-exports)
from engine.loading.common import CheckpointError, finish, make_tokenizer
from engine.loading.hf_tokenizer import chat_template, load_tokenizer, token_text, tokenizer_config

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
_MISSING = object()


def read_safetensors(root: Path, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """All tensors of the directory's safetensors files, checked against the shard index if any."""
    index = root / INDEX
    if index.is_file():
        try:
            weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise CheckpointError(f"{INDEX}: unreadable shard index ({e!r})") from None
        shards: dict[str, list[str]] = {}
        for tensor, shard in weight_map.items():
            shards.setdefault(shard, []).append(tensor)
    else:
        files = sorted(root.glob("*.safetensors"))
        if not files:
            pickles = sorted(p.name for pat in PICKLES for p in root.glob(pat))
            if pickles:
                raise CheckpointError(f"{root}: only pickle weights ({', '.join(pickles)}); refusing to "
                                      "unpickle — convert the checkpoint to safetensors")
            raise CheckpointError(f"{root}: no *.safetensors weights found")
        shards = {f.name: [] for f in files}
    state: dict[str, torch.Tensor] = {}
    for shard, listed in shards.items():
        path = root / shard
        if not path.is_file():
            raise CheckpointError(f"{shard}: shard missing (listed in {INDEX})")
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = set(f.keys())
                for name in listed:
                    if name not in keys:
                        raise CheckpointError(f"{shard}: tensor {name!r} missing (listed in index)")
                for name in listed or sorted(keys):
                    t = f.get_tensor(name)
                    state[name] = t.to(dtype) if dtype is not None else t
        except CheckpointError:
            raise
        except Exception as e:  # truncated or corrupt file
            raise CheckpointError(f"{shard}: unreadable safetensors file ({e})") from None
    return state


def _eos_token(root: Path, cfg: Config, hf: Any) -> str:
    """tokenizer_config.json's ``eos_token`` (as transformers does), else config's ``eos_token_id``."""
    eos_id = cfg.get("eos_token_id")
    if isinstance(eos_id, list):
        eos_id = eos_id[0] if eos_id else None
    tc_path = root / "tokenizer_config.json"
    if tc_path.is_file():
        eos = json.loads(tc_path.read_text()).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        if eos:
            if eos_id is not None and hf.token_to_id(str(eos)) != int(eos_id):
                log.warning("tokenizer_config.json eos_token %r (id %s) differs from config.json "
                            "eos_token_id %s; using the tokenizer's", eos, hf.token_to_id(str(eos)), eos_id)
            return str(eos)
    if eos_id is None:
        raise CheckpointError("config.json: missing field 'eos_token_id' (and no eos_token in "
                              "tokenizer_config.json)")
    text = hf.id_to_token(int(eos_id))
    if text is None:
        raise CheckpointError(f"config.json: eos_token_id {eos_id} is not in tokenizer.json")
    return text


def _mask_id(cfg: Config, tc: dict[str, Any], hf: Any, registry_text: str | None) -> int | None:
    if cfg.get("mask_token_id") is not None:
        return int(cfg.get("mask_token_id"))
    for text in (token_text(tc.get("mask_token")), registry_text):
        if text and hf.token_to_id(text) is not None:
            return int(hf.token_to_id(text))
    return None


def load_hf(root: str | Path, dtype: torch.dtype | None = None, *, hub_id: str | None = None) -> LoadedCheckpoint:
    """``hub_id``: the model's hub name, to apply its registry entry (regime, mask token)."""
    from engine.registry import lookup

    root = Path(root)
    cfg = Config(root / "config.json")
    arch = architecture(cfg)
    spec = ARCHITECTURES[arch]
    args = spec.to_args(cfg)
    for key in ("attention", "shifted_logits", "block_size"):  # our own exports record the dLLM regime
        if cfg.get(key) is not None:
            setattr(args, key, cfg.get(key))
    entry = lookup(hub_id or "") or lookup(str(cfg.get("_name_or_path", ""))) or lookup(root.name)
    if entry is not None and entry.architecture != arch:
        entry = None
    if entry is not None:
        args.attention, args.shifted_logits = entry.attention, entry.shifted_logits  # type: ignore[assignment]
        args.block_size, args.block_align = entry.block_size, entry.block_align
    state, names = spec.convert(read_safetensors(root, dtype), args)
    hf = load_tokenizer(root)
    tc = tokenizer_config(root)
    mask_id = _mask_id(cfg, tc, hf, entry.mask_token if entry else None)
    if mask_id is None and (spec.needs_mask or args.attention == "bidirectional" and entry is not None):
        raise CheckpointError(f"{root}: {arch} is a diffusion model but its mask token is unknown (no "
                              "mask_token_id in config.json, no mask_token in tokenizer_config.json)")
    tokenizer = make_tokenizer(hf, eos_token=_eos_token(root, cfg, hf), source="tokenizer.json",
                               mask_id=mask_id, config_ids=cfg.get("special_tokens"))
    finish(args, state, tokenizer, root.name, names)
    meta: dict[str, Any] = {"source": str(root), "format": "hf", "architecture": arch,
                            "bos_token": token_text(tc.get("bos_token")), "chat_template": chat_template(root, tc)}
    if entry is not None:
        meta["registry"] = entry.name
    return LoadedCheckpoint(args=args, state_dict=state, tokenizer=tokenizer,
                            name=str(cfg.get("_name_or_path") or root.name), meta=meta)
