"""Llama / Qwen2-family transformer for (block) diffusion decoding, in the style of gpt-fast.

Parameter names are Hugging Face Llama names, so Llama / Qwen2 / Dream state dicts load with
``strict=True``. Attention regime (``args.attention``) and logit convention
(``args.shifted_logits``) come from `ModelArgs`; the *mask* is the caller's business: forward
takes an explicit boolean mask and explicit position ids (training's BD3-LM layout), or
``is_causal``, or nothing (full attention), and optionally a `KVCache` to read/write.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.attention import attend
from engine.cache import KVCache
from engine.config import ModelArgs


# ---- RoPE ----------------------------------------------------------------------------------
def rope_inv_freq(args: ModelArgs, seq_len: int | None = None) -> tuple[Tensor, float]:
    """Inverse frequencies (hs/2,) and the cos/sin scale, honouring HF-style ``rope_scaling``."""
    hs = args.head_dim
    base = args.rope_theta
    sc = dict(args.rope_scaling or {})
    kind = sc.get("rope_type", sc.get("type", "default"))
    factor = float(sc.get("factor", 1.0))
    if kind == "dynamic" and seq_len is not None and seq_len > args.max_seq_len:
        base = base * ((factor * seq_len / args.max_seq_len) - (factor - 1)) ** (hs / (hs - 2))
    inv = 1.0 / (base ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    if kind == "linear":
        inv = inv / factor
    elif kind == "llama3":
        old = float(sc.get("original_max_position_embeddings", 8192))
        lo_f, hi_f = float(sc.get("low_freq_factor", 1.0)), float(sc.get("high_freq_factor", 4.0))
        lo_wl, hi_wl = old / lo_f, old / hi_f
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo_f) / (hi_f - lo_f)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        inv = torch.where(medium, smoothed, scaled)
    elif kind not in ("default", "dynamic"):
        raise ValueError(f"rope_scaling type {kind!r} is not supported (linear, dynamic, llama3)")
    return inv, 1.0


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: (B, nh, T, hs); cos/sin: (B, 1, T, hs). HF 'rotate_half' convention."""
    x1, x2 = x.chunk(2, dim=-1)
    rot = torch.cat((-x2, x1), dim=-1)
    return (x * cos + rot * sin).to(x.dtype)


# ---- blocks ----------------------------------------------------------------------------------
class Linear(nn.Linear):
    """nn.Linear without its (slow, discarded) default init: weights come from a checkpoint or
    `Transformer.init_random`."""

    def reset_parameters(self) -> None:
        pass


class Embedding(nn.Embedding):
    def reset_parameters(self) -> None:
        pass


# ---- layers --------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        hs = args.head_dim
        self.n_heads, self.n_kv, self.hs = args.n_heads, args.n_kv_heads, hs
        self.q_proj = Linear(args.dim, args.n_heads * hs, bias=args.qkv_bias)
        self.k_proj = Linear(args.dim, args.n_kv_heads * hs, bias=args.qkv_bias)
        self.v_proj = Linear(args.dim, args.n_kv_heads * hs, bias=args.qkv_bias)
        self.o_proj = Linear(args.n_heads * hs, args.dim, bias=args.o_bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, is_causal: bool,
                cache: KVCache | None, layer: int, offset: int | Sequence[int]) -> Tensor:
        B, T, _ = x.shape  # (B, T, dim)
        q = self.q_proj(x).view(B, T, self.n_heads, self.hs).transpose(1, 2)  # (B, nh, T, hs)
        k = self.k_proj(x).view(B, T, self.n_kv, self.hs).transpose(1, 2)  # (B, nkv, T, hs)
        v = self.v_proj(x).view(B, T, self.n_kv, self.hs).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.write(layer, k, v, offset)  # (B, nkv, S, hs): cached prefix + these
        y = attend(q, k, v, mask=mask, is_causal=is_causal)  # (B, nh, T, hs)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.hs))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.gate_proj = Linear(args.dim, args.intermediate_size, bias=False)
        self.up_proj = Linear(args.dim, args.intermediate_size, bias=False)
        self.down_proj = Linear(args.intermediate_size, args.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = RMSNorm(args.dim, args.norm_eps)
        self.post_attention_layernorm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, is_causal: bool,
                cache: KVCache | None, layer: int, offset: int | Sequence[int]) -> Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, is_causal, cache, layer, offset)
        return h + self.mlp(self.post_attention_layernorm(h))


class Backbone(nn.Module):
    """Holds the ``model.*`` parameters (HF layout)."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.embed_tokens = Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, *, init: bool = True) -> None:
        """``init=False`` leaves weights uninitialised (fast; a state dict is loaded next)."""
        super().__init__()
        self.args = args
        self.model = Backbone(args)
        self.lm_head: nn.Linear | None = None
        if not args.tie_embeddings:
            self.lm_head = Linear(args.dim, args.vocab_size, bias=False)
        self._rope_len = 0
        self._cos: Tensor | None = None
        self._sin: Tensor | None = None
        if init:
            self.init_random(0)

    # ---- helpers ---------------------------------------------------------------------------
    def init_random(self, seed: int = 0, std: float = 0.02) -> Transformer:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.normal_(0.0, std, generator=g)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
        return self

    def _rope(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        need = int(positions.max().item()) + 1 if positions.numel() else 1
        dev = positions.device
        if self._cos is None or need > self._rope_len or self._cos.device != dev:
            n = max(need, min(self.args.max_seq_len, 4096), self._rope_len)
            inv, scale = rope_inv_freq(self.args, n)
            t = torch.arange(n, dtype=torch.float32)
            freqs = torch.outer(t, inv)
            emb = torch.cat((freqs, freqs), dim=-1)  # (n, hs)
            self._cos, self._sin = (emb.cos() * scale).to(dev), (emb.sin() * scale).to(dev)
            self._rope_len = n
        assert self._sin is not None
        return self._cos[positions], self._sin[positions]  # (B, T, hs)

    def output_weight(self) -> Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def logits(self, h: Tensor) -> Tensor:
        """Final norm + LM head over hidden states (B, T, dim) → (B, T, V)."""
        return F.linear(self.model.norm(h), self.output_weight())

    # ---- forward ---------------------------------------------------------------------------
    def forward(self, ids: Tensor, positions: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, cache: KVCache | None = None,
                offset: int | Sequence[int] = 0, logits_slice: slice | None = None) -> Tensor:
        """ids: (B, T). positions: (B, T) or (T,) logical positions (default offset + arange).
        mask: bool, broadcastable to (B, nh, T, S), True = attend; None with ``is_causal`` =
        causal, None otherwise = full attention. With ``cache``, keys/values of these tokens are
        written at ``offset`` (per row, or one int) and queries attend to the cache's first
        ``offset + T`` positions. Returns logits (B, T', V) for ``logits_slice`` of T (default
        all); ``logits_slice=slice(0, 0)`` returns hidden states instead (B, T, dim)."""
        B, T = ids.shape
        if positions is None:
            offs = torch.as_tensor(offset if not isinstance(offset, int) else [offset] * B)
            positions = offs.to(ids.device)[:, None] + torch.arange(T, device=ids.device)[None, :]
        if positions.dim() == 1:
            positions = positions[None, :].expand(B, T)
        cos, sin = self._rope(positions)
        dt = self.model.embed_tokens.weight.dtype
        cos, sin = cos[:, None].to(dt), sin[:, None].to(dt)  # (B, 1, T, hs)
        if mask is not None and mask.dim() == 2:
            mask = mask[None, None]
        x = self.model.embed_tokens(ids)  # (B, T, dim)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, is_causal, cache, i, offset)
        if logits_slice is not None and logits_slice == slice(0, 0):
            return x
        if logits_slice is not None:
            x = x[:, logits_slice]
        return self.logits(x)
