"""config.json → `ModelArgs`, and checkpoint tensor names → the internal (HF Llama) layout, per
architecture. Every diffusion model's regime (attention, logit shift, block size) is set here from
its published modeling / generation code (see docs/MODELS.md for the sources).

| architecture | shapes | regime |
|---|---|---|
| LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM | as named | block-causal (our adapters) |
| DreamModel (Dream, Dream-Coder, DreamOn, DiffuCoder) | Qwen2 | bidirectional, shifted |
| Fast_dLLM_QwenForCausalLM (Fast-dLLM v2) | Qwen2 | block-causal (32), shifted |
| SDARForCausalLM (SDAR) | Qwen3 | block-causal (4), unshifted |
| CoDALanguageModel (CoDA) | Qwen3 | bidirectional, shifted |
| LLaDAModelLM (LLaDA) | Llama, own names | bidirectional, unshifted |
| LLaDAMoEModelLM (LLaDA-MoE) | OLMoE-like MoE, q/k norm | bidirectional, unshifted |
| LLaDA2MoeModelLM (LLaDA2.0) | BailingMoeV2: fused qkv, partial RoPE, sigmoid group routing | block-causal (32), unshifted |
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.config import ModelArgs
from engine.loading.common import CheckpointError, tensor_renamer

State = dict[str, torch.Tensor]


class Config:
    """config.json with field access that names the missing field."""

    def __init__(self, path: Path | None = None, d: dict[str, Any] | None = None) -> None:
        self.path = path
        if d is not None:
            self.d = d
            return
        assert path is not None
        try:
            self.d = json.loads(path.read_text())
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


def _llama_like(cfg: Config, *, qkv_bias: bool, tie_default: bool, o_bias: bool = False,
                qk_norm: bool = False) -> ModelArgs:
    heads = int(cfg.req("num_attention_heads"))
    dim = int(cfg.req("hidden_size"))
    theta, scaling = _rope(cfg)
    if cfg.get("mlp_bias", False):
        raise CheckpointError("config.json: mlp_bias=true is not supported")
    hd = cfg.get("head_dim")
    return ModelArgs(
        vocab_size=int(cfg.req("vocab_size")), dim=dim, n_layers=int(cfg.req("num_hidden_layers")),
        n_heads=heads, n_kv_heads=int(cfg.get("num_key_value_heads", heads)),
        intermediate_size=int(cfg.req("intermediate_size")), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta, rope_scaling=scaling,
        max_seq_len=int(cfg.get("max_position_embeddings", 8192)), qkv_bias=qkv_bias, o_bias=o_bias,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", tie_default)),
        head_size=None if hd in (None, dim // heads) else int(hd), qk_norm=qk_norm,
    )


def _regime(args: ModelArgs, attention: str, shifted: bool, block: int | None = None) -> ModelArgs:
    """Published regime; block-diffusion models (a ``block``) tile the sequence from position 0."""
    args.attention, args.shifted_logits = attention, shifted  # type: ignore[assignment]
    if block is not None:
        args.block_size, args.block_align = block, "absolute"
    return args


def _args_llama(cfg: Config) -> ModelArgs:
    bias = bool(cfg.get("attention_bias", False))
    return _llama_like(cfg, qkv_bias=bias, o_bias=bias, tie_default=False)


def _args_qwen2(cfg: Config) -> ModelArgs:
    return _llama_like(cfg, qkv_bias=True, tie_default=False)


def _args_qwen3(cfg: Config) -> ModelArgs:
    bias = bool(cfg.get("attention_bias", False))
    return _llama_like(cfg, qkv_bias=bias, o_bias=bias, tie_default=False, qk_norm=True)


def _args_dream(cfg: Config) -> ModelArgs:
    return _regime(_args_qwen2(cfg), "bidirectional", True)


def _args_fast_dllm(cfg: Config) -> ModelArgs:
    return _regime(_args_qwen2(cfg), "block_causal", True, int(cfg.get("bd_size", 32)))


def _args_sdar(cfg: Config) -> ModelArgs:
    return _regime(_args_qwen3(cfg), "block_causal", False, int(cfg.get("block_size", 4)))


def _args_coda(cfg: Config) -> ModelArgs:
    return _regime(_args_qwen3(cfg), "bidirectional", True)


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


def _partial_rope(cfg: Config, head_dim: int) -> int | None:
    if cfg.get("rotary_dim"):
        r = int(cfg.get("rotary_dim"))
    else:
        f = float(cfg.get("partial_rotary_factor", 1.0))
        r = int(head_dim * f) if f > 0 else head_dim
    return None if r == head_dim else r


def _args_llada_moe(cfg: Config) -> ModelArgs:
    """LLaDA-MoE (modeling_lladamoe.py): OLMoE layout, softmax router whose top-k weights are not
    renormalised (the published block fixes norm_topk_prob=False), optional expert bias added to the
    probabilities, optional shared expert, dense layers where moe_layer_freq is 0."""
    heads, dim = int(cfg.req("num_attention_heads")), int(cfg.req("hidden_size"))
    theta, scaling = _rope(cfg)
    freq = list(cfg.get("moe_layer_freq") or [])
    n_layers = int(cfg.req("num_hidden_layers"))
    return ModelArgs(
        vocab_size=int(cfg.req("vocab_size")), dim=dim, n_layers=n_layers, n_heads=heads,
        n_kv_heads=int(cfg.get("num_key_value_heads", heads)),
        intermediate_size=int(cfg.get("dense_intermediate_size", 0) or 0),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-5)), rope_theta=theta, rope_scaling=scaling,
        max_seq_len=int(cfg.get("max_position_embeddings", 4096)),
        qkv_bias=bool(cfg.get("attention_bias", False)), o_bias=bool(cfg.get("attention_bias", False)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), qk_norm=bool(cfg.get("qk_layernorm", False)),
        rotary_dim=_partial_rope(cfg, dim // heads), clip_qkv=cfg.get("clip_qkv"),
        n_experts=int(cfg.req("num_experts")), n_experts_per_tok=int(cfg.req("num_experts_per_tok")),
        moe_intermediate_size=int(cfg.req("expert_intermediate_size")),
        shared_expert_size=int(cfg.get("shared_expert_intermediate_size", 0) or 0),
        moe_router="softmax", moe_norm_topk=False, moe_expert_bias=bool(cfg.get("moe_router_enable_expert_bias")),
        dense_layers=tuple(i for i in range(n_layers) if i < len(freq) and freq[i] == 0),
        attention="bidirectional", shifted_logits=False,
    )


def _args_llada2(cfg: Config) -> ModelArgs:
    """LLaDA2.0 (modeling_llada2_moe.py, BailingMoeV2): fused query_key_value, per-head q/k norm,
    partial RoPE, sigmoid router with expert bias, group-limited top-k, routed scaling, shared experts,
    the first ``first_k_dense_replace`` layers dense; block diffusion (32) with unshifted logits."""
    heads, dim = int(cfg.req("num_attention_heads")), int(cfg.req("hidden_size"))
    hd = int(cfg.get("head_dim") or dim // heads)
    theta, scaling = _rope(cfg)
    n_experts = int(cfg.get("num_experts") or 0)
    return ModelArgs(
        vocab_size=int(cfg.req("vocab_size")), dim=dim, n_layers=int(cfg.req("num_hidden_layers")),
        n_heads=heads, n_kv_heads=int(cfg.get("num_key_value_heads", heads)),
        intermediate_size=int(cfg.req("intermediate_size")), norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta, rope_scaling=scaling, max_seq_len=int(cfg.get("max_position_embeddings", 32768)),
        qkv_bias=bool(cfg.get("use_qkv_bias", False)), o_bias=bool(cfg.get("use_bias", False)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)), head_size=None if hd == dim // heads else hd,
        qk_norm=bool(cfg.get("use_qk_norm", False)), rotary_dim=_partial_rope(cfg, hd),
        n_experts=n_experts, n_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
        shared_expert_size=int(cfg.get("moe_intermediate_size") or 0) * int(cfg.get("num_shared_experts") or 0),
        moe_router="sigmoid", moe_norm_topk=True, moe_expert_bias=n_experts > 0,
        moe_routed_scale=float(cfg.get("routed_scaling_factor", 1.0)),
        moe_n_group=int(cfg.get("n_group", 1)), moe_topk_group=int(cfg.get("topk_group", 1)),
        dense_layers=tuple(range(int(cfg.get("first_k_dense_replace", 0)))),
        attention="block_causal", shifted_logits=False, block_size=32, block_align="absolute",
    )


# ---- tensor names ------------------------------------------------------------------------------
def _renamer(fn: Callable[[str], str]) -> Callable[[State, ModelArgs], tuple[State, dict[str, str]]]:
    def convert(raw: State, args: ModelArgs) -> tuple[State, dict[str, str]]:
        out: State = {}
        names: dict[str, str] = {}
        for k, v in raw.items():
            if k.endswith("rotary_emb.inv_freq"):
                continue
            out[fn(k)] = v
            names[fn(k)] = k
        return out, names
    return convert


def _same_name(name: str) -> str:
    return name


_LLADA_LAYER = re.compile(r"model\.transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)$")
_LLADA_LAYER_NAMES = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "attn_out": "self_attn.o_proj", "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
    "ff_out": "mlp.down_proj", "attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm",
}
_LLADA_GLOBAL = {"model.transformer.wte.weight": "model.embed_tokens.weight",
                 "model.transformer.ln_f.weight": "model.norm.weight",
                 "model.transformer.ff_out.weight": "lm_head.weight"}


_llada = tensor_renamer(_LLADA_GLOBAL, _LLADA_LAYER, _LLADA_LAYER_NAMES)


def llada_name(name: str) -> str:
    """LLaDA tensor name -> internal name (unknown names are kept, then reported by validation)."""
    return _llada(name) or name


def llada_moe_name(name: str) -> str:
    """LLaDA-MoE keeps the shared expert beside the MLP (``layers.N.shared_expert``)."""
    return re.sub(r"^(model\.layers\.\d+)\.shared_expert\.", r"\1.mlp.shared_expert.", name)


_LLADA2 = [(re.compile(r"^model\.word_embeddings\."), "model.embed_tokens."),
           (re.compile(r"\.attention\.dense\."), ".self_attn.o_proj."),
           (re.compile(r"\.attention\.query_layernorm\."), ".self_attn.q_norm."),
           (re.compile(r"\.attention\.key_layernorm\."), ".self_attn.k_norm."),
           (re.compile(r"\.mlp\.gate\.expert_bias$"), ".mlp.expert_bias"),
           (re.compile(r"\.mlp\.shared_experts\."), ".mlp.shared_expert.")]


def _convert_llada2(raw: State, args: ModelArgs) -> tuple[State, dict[str, str]]:
    """Rename, split the fused ``query_key_value`` rows [q heads | k heads | v heads]."""
    out: State = {}
    names: dict[str, str] = {}
    q, kv = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
    for k, v in raw.items():
        if k.endswith("rotary_emb.inv_freq"):
            continue
        m = re.match(r"^(model\.layers\.\d+)\.attention\.query_key_value\.(weight|bias)$", k)
        if m:
            if v.shape[0] != q + 2 * kv:
                raise CheckpointError(f"{k}: {v.shape[0]} rows, expected {q + 2 * kv} from the config")
            for part, t in zip(("q_proj", "k_proj", "v_proj"), v.split([q, kv, kv]), strict=True):
                new = f"{m.group(1)}.self_attn.{part}.{m.group(2)}"
                out[new], names[new] = t, k
            continue
        new = k
        for pat, rep in _LLADA2:
            new = pat.sub(rep, new)
        out[new], names[new] = v, k
    for i in range(args.n_layers):  # a checkpoint saved without the (zero-initialised) routing bias
        key = f"model.layers.{i}.mlp.expert_bias"
        if args.is_moe_layer(i) and key not in out:
            out[key] = torch.zeros(args.n_experts)
    return out, names


@dataclass(frozen=True)
class Arch:
    to_args: Callable[[Config], ModelArgs]
    convert: Callable[[State, ModelArgs], tuple[State, dict[str, str]]]
    needs_mask: bool  # a diffusion model: its mask token must be known (config or tokenizer)


ARCHITECTURES: dict[str, Arch] = {
    "LlamaForCausalLM": Arch(_args_llama, _renamer(_same_name), False),
    "Qwen2ForCausalLM": Arch(_args_qwen2, _renamer(_same_name), False),
    "Qwen3ForCausalLM": Arch(_args_qwen3, _renamer(_same_name), False),
    "DreamModel": Arch(_args_dream, _renamer(_same_name), True),
    "Fast_dLLM_QwenForCausalLM": Arch(_args_fast_dllm, _renamer(_same_name), True),
    "SDARForCausalLM": Arch(_args_sdar, _renamer(_same_name), True),
    "CoDALanguageModel": Arch(_args_coda, _renamer(_same_name), True),
    "LLaDAModelLM": Arch(_args_llada, _renamer(llada_name), True),
    "LLaDAMoEModelLM": Arch(_args_llada_moe, _renamer(llada_moe_name), True),
    "LLaDA2MoeModelLM": Arch(_args_llada2, _convert_llada2, True),
}
_MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "dream": "DreamModel", "llada": "LLaDAModelLM", "sdar": "SDARForCausalLM",
                "lladamoe": "LLaDAMoEModelLM", "llada2_moe": "LLaDA2MoeModelLM",
                "fast_dllm_qwen": "Fast_dLLM_QwenForCausalLM", "coda": "CoDALanguageModel"}


def architecture(cfg: Config) -> str:
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else _MODEL_TYPES.get(str(cfg.get("model_type", "")).lower())
    if arch is None:
        raise CheckpointError("config.json: missing field 'architectures' (and no known 'model_type')")
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"config.json: unsupported architecture {arch!r}; supported: "
                              f"{', '.join(ARCHITECTURES)}")
    return arch


def args_from_dict(d: dict[str, Any]) -> tuple[ModelArgs, str]:
    cfg = Config(d=d)
    arch = architecture(cfg)
    args = ARCHITECTURES[arch].to_args(cfg)
    for key in ("attention", "shifted_logits", "block_size"):  # our own exports record the regime
        if cfg.get(key) is not None:
            setattr(args, key, cfg.get(key))
    return args, arch


def args_from_config(path: Path) -> tuple[ModelArgs, str]:
    return args_from_dict(Config(path).d)
