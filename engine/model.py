"""Llama / Qwen2 / Qwen3-family transformer (dense or mixture-of-experts MLP) for (block) diffusion
decoding, in the style of gpt-fast.

Parameter names are Hugging Face Llama names, so Llama / Qwen2 / Qwen3 / Dream state dicts load
with ``strict=True``. Attention regime (``args.attention``) and logit convention
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
from engine.caches.prefix import KVCache
from engine.config import ModelArgs


# ---- RoPE ----------------------------------------------------------------------------------
def rope_inv_freq(args: ModelArgs, seq_len: int | None = None) -> tuple[Tensor, float]:
    """Inverse frequencies (hs/2,) and the cos/sin scale, honouring HF-style ``rope_scaling``."""
    hs = args.rope_dim  # partial RoPE rotates only the first rope_dim dims of a head
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
    """x: (B, nh, T, hs); cos/sin: (B, 1, T, r), r <= hs. HF 'rotate_half' convention on the first
    r dims (partial RoPE leaves the rest as they are)."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((apply_rope(x[..., :r], cos, sin), x[..., r:]), dim=-1)
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
        self.q_norm = RMSNorm(hs, args.norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(hs, args.norm_eps) if args.qk_norm else None
        self.clip = args.clip_qkv

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, is_causal: bool,
                cache: KVCache | None, layer: int, offset: int | Sequence[int]) -> Tensor:
        B, T, _ = x.shape  # (B, T, dim)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.clip is not None:
            q, k, v = (t.clamp(-self.clip, self.clip) for t in (q, k, v))
        q = q.view(B, T, self.n_heads, self.hs)  # (B, T, nh, hs)
        k = k.view(B, T, self.n_kv, self.hs)  # (B, T, nkv, hs)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, nh|nkv, T, hs)
        v = v.view(B, T, self.n_kv, self.hs).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.write(layer, k, v, offset)  # (B, nkv, S, hs): cached prefix + these
        y = attend(q, k, v, mask=mask, is_causal=is_causal)  # (B, nh, T, hs)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.hs))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = Linear(dim, hidden, bias=False)
        self.up_proj = Linear(dim, hidden, bias=False)
        self.down_proj = Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Routed experts (+ optional shared expert). Routers (computed in fp32):

    * ``softmax`` (LLaDA-MoE): p = softmax(router logits) (+ expert_bias), top-k of p, weights = those
      values (optionally renormalised);
    * ``sigmoid`` (LLaDA2 / BailingMoeV2, DeepSeek-V3): s = sigmoid(logits); experts chosen by s + bias
      within the ``moe_topk_group`` best groups (group score = sum of its top-2); weights = the chosen
      s, renormalised when k > 1, times ``moe_routed_scale``."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.a = args
        self.gate = Linear(args.dim, args.n_experts, bias=False)
        self.experts = nn.ModuleList(MLP(args.dim, args.moe_intermediate_size) for _ in range(args.n_experts))
        self.shared_expert = MLP(args.dim, args.shared_expert_size) if args.shared_expert_size else None
        if args.moe_expert_bias:
            self.register_buffer("expert_bias", torch.zeros(args.n_experts))
        else:
            self.expert_bias: Tensor | None = None

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x: (N, dim) → expert ids (N, k), weights (N, k) float32."""
        a = self.a
        logits = F.linear(x.float(), self.gate.weight.float())  # (N, E)
        if a.moe_router == "softmax":
            p = logits.softmax(-1)
            if self.expert_bias is not None:
                p = p + self.expert_bias.float()
            w, idx = p.topk(a.n_experts_per_tok, dim=-1)
            if a.moe_norm_topk:
                w = w / w.sum(-1, keepdim=True)
            return idx, w * a.moe_routed_scale
        s = logits.sigmoid()
        sel = s + self.expert_bias.float() if self.expert_bias is not None else s
        if a.moe_n_group > 1:
            g = sel.view(len(x), a.moe_n_group, -1)  # (N, G, E/G)
            top_groups = g.topk(2, dim=-1).values.sum(-1).topk(a.moe_topk_group, dim=-1).indices
            keep = torch.zeros(g.shape[:2], dtype=torch.bool, device=x.device).scatter_(1, top_groups, True)
            sel = sel.masked_fill(~keep.repeat_interleave(g.shape[-1], dim=1), float("-inf"))
        idx = sel.topk(a.n_experts_per_tok, dim=-1).indices
        w = s.gather(1, idx)
        if a.n_experts_per_tok > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * a.moe_routed_scale

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])  # (N, dim)
        idx, w = self.route(h)
        out = torch.zeros_like(h, dtype=torch.float32)
        flat = idx.flatten()
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        token = order // idx.shape[1]
        start = 0
        for e, n in enumerate(counts):  # tokens grouped by expert: one matmul per used expert
            if n:
                sel, rows = order[start:start + n], token[start:start + n]
                y = self.experts[e](h[rows]).float() * w.flatten()[sel, None]
                out.index_add_(0, rows, y)
                start += n
        out = out.to(x.dtype)
        if self.shared_expert is not None:
            out = out + self.shared_expert(h)
        return out.view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, i: int) -> None:
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp: nn.Module = MoE(args) if args.is_moe_layer(i) else MLP(args.dim, args.intermediate_size)
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
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.n_layers))
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
        """Seeded N(0, std) weights, unit norms. On the CPU the stream is the same for every dtype;
        elsewhere the weights are drawn on the parameters' device (fast at 7B scale)."""
        dev = next(self.parameters()).device
        g = torch.Generator(device=dev).manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.normal_(0.0, std, generator=g)
                elif dev.type == "cpu":
                    p.copy_(torch.randn(p.shape, generator=g) * std)
                else:
                    p.normal_(0.0, std, generator=g)
        return self

    def rope_table(self, n: int, device: torch.device | None = None) -> Tensor:
        """Make sure the cos/sin table covers positions < ``n`` (a captured step must not grow it); the
        table's cos tensor: a longer prompt later makes a new one (engine.decoding.graphs recaptures then)."""
        dev = device or next(self.parameters()).device
        self._rope(torch.tensor([max(0, n - 1)], device=dev))
        assert self._cos is not None
        return self._cos

    def rope_current(self) -> Tensor | None:
        """The cos table positions are read from now (None before the first forward)."""
        return self._cos

    def _rope(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        if positions.is_cuda and torch.cuda.is_current_stream_capturing():
            need = 1  # engine.decoding.graphs sized the table before capturing (no host sync in a graph)
        else:
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
