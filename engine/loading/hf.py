"""Load a local Hugging Face-style checkpoint directory (config.json + safetensors + tokenizer.json).

Architectures: ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` (QKV bias), ``DreamModel`` (Qwen2 shapes,
bidirectional, shifted logits, ``mask_token_id``) and ``LLaDAModelLM`` (its own tensor names, renamed
here; bidirectional, unshifted logits, ``mask_token_id``). Weights come from safetensors only (one
file, several files, or a ``model.safetensors.index.json`` shard map); pickles are refused.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.checkpoint import LoadedCheckpoint
from engine.config import ModelArgs
from engine.loading.common import CheckpointError, finish, make_tokenizer

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
_MISSING = object()


class Config:
    """config.json with field access that names the missing field."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.d: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            raise CheckpointError(f"{path}: config.json not found") from None
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{path}: invalid JSON ({e})") from None

    def req(self, key: str) -> Any:
        if self.d.get(key) is None:
            raise CheckpointError(f"config.json: missing field {key!r}")
        return self.d[key]

    def get(self, key: str, default: Any = None) -> Any:
        v = self.d.get(key)
        return default if v is None else v


def _rope(cfg: Config) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from ``rope_theta``/``rope_scaling`` (v4) or ``rope_parameters`` (v5)."""
    params = cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta", params.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or {k: v for k, v in params.items() if k != "rope_theta"}
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    return theta, (dict(scaling, rope_type=kind) if kind not in (None, "default") else None)


def _llama_like(cfg: Config, *, qkv_bias: bool, tie_default: bool) -> ModelArgs:
    heads = int(cfg.req("num_attention_heads"))
    dim = int(cfg.req("hidden_size"))
    theta, scaling = _rope(cfg)
    if cfg.get("head_dim") not in (None, dim // heads):
        raise CheckpointError(f"config.json: head_dim {cfg.get('head_dim')} != hidden_size / "
                              f"num_attention_heads ({dim // heads}) is not supported")
    if cfg.get("mlp_bias", False):
        raise CheckpointError("config.json: mlp_bias=true is not supported")
    return ModelArgs(
        vocab_size=int(cfg.req("vocab_size")), dim=dim, n_layers=int(cfg.req("num_hidden_layers")),
        n_heads=heads, n_kv_heads=int(cfg.get("num_key_value_heads", heads)),
        intermediate_size=int(cfg.req("intermediate_size")), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta, rope_scaling=scaling,
        max_seq_len=int(cfg.get("max_position_embeddings", 8192)), qkv_bias=qkv_bias,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", tie_default)),
    )


def _args_llama(cfg: Config) -> ModelArgs:
    return _llama_like(cfg, qkv_bias=bool(cfg.get("attention_bias", False)), tie_default=False)


def _args_qwen2(cfg: Config) -> ModelArgs:
    return _llama_like(cfg, qkv_bias=True, tie_default=False)


def _args_dream(cfg: Config) -> ModelArgs:
    args = _args_qwen2(cfg)
    args.attention, args.shifted_logits = "bidirectional", True
    return args


def _args_llada(cfg: Config) -> ModelArgs:
    heads = int(cfg.req("n_heads"))
    dim = int(cfg.req("d_model"))
    theta, scaling = _rope(cfg)
    mlp = cfg.get("mlp_hidden_size") or int(cfg.req("mlp_ratio")) * dim
    return ModelArgs(
        vocab_size=int(cfg.get("embedding_size") or cfg.req("vocab_size")), dim=dim,
        n_layers=int(cfg.req("n_layers")), n_heads=heads, n_kv_heads=int(cfg.get("n_kv_heads", heads)),
        intermediate_size=int(mlp), norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        rope_theta=theta, rope_scaling=scaling, max_seq_len=int(cfg.get("max_sequence_length", 4096)),
        qkv_bias=bool(cfg.get("include_qkv_bias", False) or cfg.get("include_bias", False)),
        tie_embeddings=bool(cfg.get("weight_tying", False)),
        attention="bidirectional", shifted_logits=False,
    )


_LLADA_LAYER = re.compile(r"model\.transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)$")
_LLADA_LAYER_NAMES = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "attn_out": "self_attn.o_proj", "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
    "ff_out": "mlp.down_proj", "attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm",
}
_LLADA_GLOBAL = {"model.transformer.wte.weight": "model.embed_tokens.weight",
                 "model.transformer.ln_f.weight": "model.norm.weight",
                 "model.transformer.ff_out.weight": "lm_head.weight"}


def llada_name(name: str) -> str:
    """LLaDA tensor name -> internal name (unknown names are kept, then reported by validation)."""
    if name in _LLADA_GLOBAL:
        return _LLADA_GLOBAL[name]
    m = _LLADA_LAYER.match(name)
    if m and m.group(2) in _LLADA_LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LLADA_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    return name


def _same_name(name: str) -> str:
    return name


# architecture -> (config mapper, tensor renamer, uses mask_token_id)
ARCHITECTURES: dict[str, tuple[Callable[[Config], ModelArgs], Callable[[str], str], bool]] = {
    "LlamaForCausalLM": (_args_llama, _same_name, False),
    "Qwen2ForCausalLM": (_args_qwen2, _same_name, False),
    "DreamModel": (_args_dream, _same_name, True),
    "LLaDAModelLM": (_args_llada, llada_name, True),
}
_MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "dream": "DreamModel",
                "llada": "LLaDAModelLM"}


def architecture(cfg: Config) -> str:
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else _MODEL_TYPES.get(str(cfg.get("model_type", "")).lower())
    if arch is None:
        raise CheckpointError("config.json: missing field 'architectures' (and no known 'model_type')")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"config.json: unsupported architecture {arch!r}; supported: "
                              f"{', '.join(ARCHITECTURES)}")
    return arch


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


def load_hf(root: str | Path, dtype: torch.dtype | None = None) -> LoadedCheckpoint:
    from tokenizers import Tokenizer as HFTokenizer

    root = Path(root)
    cfg = Config(root / "config.json")
    arch = architecture(cfg)
    to_args, rename, has_mask = ARCHITECTURES[arch]
    args = to_args(cfg)
    for key in ("attention", "shifted_logits", "block_size"):  # our own exports record the dLLM regime
        if cfg.get(key) is not None:
            setattr(args, key, cfg.get(key))
    raw = read_safetensors(root, dtype)
    state: dict[str, torch.Tensor] = {}
    names: dict[str, str] = {}
    for k, v in raw.items():
        if k.endswith("rotary_emb.inv_freq"):
            continue
        state[rename(k)] = v
        names[rename(k)] = k
    tok_path = root / "tokenizer.json"
    if not tok_path.is_file():
        raise CheckpointError(f"{tok_path}: tokenizer.json not found")
    hf = HFTokenizer.from_file(str(tok_path))
    mask_id = cfg.req("mask_token_id") if has_mask else cfg.get("mask_token_id")  # exports record it
    tokenizer = make_tokenizer(hf, eos_token=_eos_token(root, cfg, hf), source="tokenizer.json",
                               mask_id=None if mask_id is None else int(mask_id), config_ids=cfg.get("special_tokens"))
    finish(args, state, tokenizer, root.name, names)
    return LoadedCheckpoint(args=args, state_dict=state, tokenizer=tokenizer,
                            name=str(cfg.get("_name_or_path") or root.name),
                            meta={"source": str(root), "format": "hf", "architecture": arch})
