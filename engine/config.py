"""Model hyper-parameters (`ModelArgs`) and named presets.

The internal parameter layout follows Hugging Face Llama names (``model.layers.N.self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm``, ``model.norm``, ``lm_head``), so Llama/Qwen2/Dream state
dicts load as they are and other formats (GGUF, LLaDA) are mapped onto it by `engine.loading`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Attention = Literal["block_causal", "bidirectional"]


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
    special_tokens: dict[str, int] = field(default_factory=dict)  # role -> id (engine.tokens)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelArgs:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


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
