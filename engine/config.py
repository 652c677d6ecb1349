"""Model hyper-parameters (`ModelArgs`) and named presets.

The internal parameter layout follows Hugging Face Llama names (``model.layers.N.self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm``, ``model.norm``, ``lm_head``), so Llama/Qwen2/Dream state
dicts load as they are and other formats (GGUF, LLaDA, LLaDA2) are mapped onto it by
`engine.loading`. Qwen3-style per-head q/k RMSNorm is ``self_attn.q_norm`` / ``k_norm``; a
mixture-of-experts MLP is ``mlp.gate`` (router), ``mlp.experts.E.{gate,up,down}_proj``, optional
``mlp.shared_expert.*`` and ``mlp.expert_bias`` (routing bias).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

Attention = Literal["block_causal", "bidirectional"]
Router = Literal["softmax", "sigmoid"]
BlockAlign = Literal["canvas", "absolute"]


@dataclass
class ModelArgs:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # HF style: {"rope_type": "linear"|"llama3"|..., ...}
    max_seq_len: int = 8192
    qkv_bias: bool = False
    o_bias: bool = False  # Llama attention_bias=True also biases o_proj (Qwen2 does not)
    tie_embeddings: bool = True
    attention: Attention = "block_causal"  # context causal + canvas block bidirectional
    shifted_logits: bool = True  # logits at i-1 predict token i (AR-initialised models)
    block_size: int = 32  # canvas block length (semi-autoregressive decoding)
    block_align: BlockAlign = "canvas"  # canvas: blocks start at the canvas after a causal prompt;
    # absolute: blocks tile the sequence from position 0 (SDAR, Fast-dLLM v2, LLaDA2.0)
    special_tokens: dict[str, int] = field(default_factory=dict)  # role -> id (engine.tokens)
    head_size: int | None = None  # per-head width when it is not dim // n_heads (Qwen3-4B: 128 vs 80)
    qk_norm: bool = False  # per-head RMSNorm of q and k before RoPE (Qwen3, SDAR, CoDA, LLaDA-MoE, LLaDA2)
    rotary_dim: int | None = None  # partial RoPE: only the first rotary_dim dims of a head (LLaDA2: 64 of 128)
    clip_qkv: float | None = None  # clamp q/k/v projections (OLMoE-style LLaDA-MoE option)
    # mixture of experts (n_experts = 0: a dense MLP everywhere)
    n_experts: int = 0
    n_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_size: int = 0  # intermediate width of the always-on shared expert (0 = none)
    moe_router: Router = "softmax"  # softmax (+bias) top-k | sigmoid, bias for selection, group top-k
    moe_norm_topk: bool = False  # renormalise the top-k weights (sigmoid router: when k > 1)
    moe_routed_scale: float = 1.0
    moe_expert_bias: bool = False
    moe_n_group: int = 1
    moe_topk_group: int = 1
    dense_layers: tuple[int, ...] = ()  # layers with a dense MLP (intermediate_size) in an MoE model

    @property
    def head_dim(self) -> int:
        return self.head_size or self.dim // self.n_heads

    @property
    def rope_dim(self) -> int:
        return self.rotary_dim or self.head_dim

    def is_moe_layer(self, i: int) -> bool:
        return self.n_experts > 0 and i not in self.dense_layers

    def param_count(self) -> int:
        """Parameters of this shape (embedding + layers + head)."""
        hd, d = self.head_dim, self.dim
        attn = d * hd * (2 * self.n_heads + 2 * self.n_kv_heads) + 2 * d + (2 * hd if self.qk_norm else 0)
        dense = 3 * d * self.intermediate_size
        moe = (3 * d * self.moe_intermediate_size * self.n_experts + d * self.n_experts
               + 3 * d * self.shared_expert_size)
        layers = sum(attn + (moe if self.is_moe_layer(i) else dense) for i in range(self.n_layers))
        return layers + self.vocab_size * d * (1 if self.tie_embeddings else 2) + d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelArgs:
        known = {f.name for f in fields(cls)}
        args = cls(**{k: v for k, v in d.items() if k in known})
        args.dense_layers = tuple(args.dense_layers)
        return args


PRESETS: dict[str, dict[str, Any]] = {
    # for tests: byte-level vocab (256 + eos + 11 specials = 268)
    "tiny": dict(vocab_size=268, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=128,
                 max_seq_len=4096, block_size=8),
    # the default model's base: SmolLM2-135M (+ 11 special tokens)
    "smollm2-135m": dict(vocab_size=49152 + 11, dim=576, n_layers=30, n_heads=9, n_kv_heads=3,
                         intermediate_size=1536, rope_theta=100000.0, max_seq_len=8192,
                         norm_eps=1e-5, tie_embeddings=True),
    "qwen2.5-coder-0.5b": dict(vocab_size=151936, dim=896, n_layers=24, n_heads=14, n_kv_heads=2,
                               intermediate_size=4864, rope_theta=1e6, max_seq_len=32768,
                               qkv_bias=True, norm_eps=1e-6),
}


def preset(name: str, **overrides: Any) -> ModelArgs:
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return ModelArgs(**{**PRESETS[name], **overrides})
