"""CPU fast path for dense Llama-family models: fused layers, weight-only int8 (module replacement).

On a 2-core CPU a decode step is one to a few positions: the matmuls are memory-bound (all weights
are read for one token) and the ~60 small ops per layer cost as much again. `convert` swaps, at
load time and in place, each decoder layer of an `engine.model.Transformer` for a `FastLayer` with

* one fused q|k|v and one fused gate|up projection (5 matmuls per layer instead of 7);
* weights stored as int8 with one scale per output row (weight-only: activations stay float).
  Up to ``SMALL`` positions run ``aten._weight_int8pack_mm`` (bf16 activations, int8 weights: a
  quarter of the fp32 bytes); more positions (wide decode steps, prefill) run the int8 x int8 GEMM
  (``INT8_GEMM``), or, without it, dequantize the layer's weight to fp32 for the fp32 GEMM;
* keys / values in bf16 (``KV_DTYPE``: at 2K tokens of context the fp32 cache is read in full by
  every step, as many bytes as the int8 weights);
* fused RMSNorm (``F.rms_norm``) and RoPE as one complex multiply: the q/k rows are permuted at
  load time to interleaved pairs, which leaves every q·k product unchanged (the KV cache holds the
  permuted keys; all forwards of the model use the same layers);

and the embedding / tied LM head share one int8 matrix (rows dequantized on lookup). Measured on
the project's CPU: docs/PERFORMANCE.md. Models with q/k norms, partial RoPE, clipping or experts
are left as they are (`supported`).
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine import options
from engine.attention import attend

KV_DTYPE = torch.bfloat16
# positions per forward up to which the weight-only int8 kernel runs (1-3: width-1 decode steps, whose
# quality int8 activations cost); more (wider decode windows, drafts, prefill) go through the int8 x int8
# GEMM (INT8_GEMM): faster per layer at 8-16 positions, same HumanEval random-span results
# (docs/PERFORMANCE.md). $EDIT_SERVER_INT8_SMALL overrides (16: the weight-only kernel up to 16 positions)
SMALL = options.env().small_positions
FORMAT = "edit-server-fastcpu-int8/1"
GEMM_ENV = options.INT8_GEMM  # 1 (default where supported) / 0


def _int8_gemm() -> bool:
    """Prefill (more than `SMALL` positions) as int8 × int8 GEMMs with dynamically quantised
    activations, one scale per token (PyTorch's x86 / fbgemm quantised engine, VNNI): 1.3× (2K
    tokens, attention-bound) to 1.8× (512) the fp32 prefill on the project's 2-core CPU, HumanEval
    pass@1 unchanged (docs/PERFORMANCE.md). Decode steps of up to `SMALL` (3) positions keep the
    weight-only kernel (bf16 activations): int8 activations in every step cost single-line pass@1
    (3.0 → 2.0 %, measured); wider steps use the GEMM (random-span pass@1 unchanged, measured).
    ``$EDIT_SERVER_INT8_GEMM=0`` or a build without that engine: dequantize + fp32 GEMM."""
    if options.env().int8_gemm_off:
        return False
    return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))


INT8_GEMM = _int8_gemm()


def _vnni() -> bool:
    probe = getattr(torch.cpu, "_is_vnni_supported", None)
    return bool(probe()) if probe is not None else False


# Without VNNI the engine multiplies u8 x s8 pairs into a saturating int16 (vpmaddubsw), so full 8-bit
# activations overflow (a 0.19 relative error per row on an AVX2-only CPU); 7-bit activations
# (fbgemm's reduce_range) cannot, and the GEMM stays ~2.5x faster there than dequantize + fp32.
REDUCE_RANGE = not _vnni()


def supported(model: nn.Module) -> bool:
    a = model.args  # type: ignore[attr-defined]
    return (not a.qk_norm and a.clip_qkv is None and a.n_experts == 0 and a.rope_dim == a.head_dim
            and not a.o_bias and type(model).__name__ == "Transformer")


# ---- int8 weights --------------------------------------------------------------------------------
def quantize(w: Tensor) -> tuple[Tensor, Tensor]:
    """(N, K) float → int8 (N, K) and fp32 scales (N,), symmetric per output row."""
    w = w.detach().float()
    scale = (w.abs().amax(1) / 127.0).clamp_min(1e-12)
    return torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8).contiguous(), scale


# ---- int4 weights for narrow decode steps ----------------------------------------------------------
INT4_GROUP = 32  # input columns per int4 scale / zero (64: top-1 agreement with int8 0.90 instead of 0.95)
_INT4_MM = getattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu", None)
# whether the narrow steps running now read the int4 copy: the engine turns it on per batch of requests
# (`int4_steps`: none, single-line ones or all, $EDIT_SERVER_INT4); everything else reads the int8 weights
_INT4_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("fastcpu_int4_on", default=False)


@contextlib.contextmanager
def int4_steps(on: bool = True) -> Iterator[None]:
    """Inside: narrow steps of layers with an int4 copy (`attach_int4`) read it (``on``) or not."""
    token = _INT4_ON.set(on)
    try:
        yield
    finally:
        _INT4_ON.reset(token)


def int4_available() -> bool:
    return _INT4_MM is not None and hasattr(torch, "_convert_weight_to_int4pack_for_cpu")


def pack_int4(w: Tensor, group: int = INT4_GROUP) -> tuple[Tensor, Tensor]:
    """(N, K) float → PyTorch's CPU int4 layout: the packed weight and (K / group, N, 2) bf16 scales and
    zero points, asymmetric per group of ``group`` input columns (w ≈ (q - 8) · scale + zero)."""
    w = w.detach().float()
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    q = torch.round((g - lo) / scale).clamp_(0, 15).to(torch.int32).reshape(n, k)
    zero = lo + scale * 8
    sz = torch.cat([scale, zero], -1).transpose(0, 1).contiguous().to(torch.bfloat16)  # (K/group, N, 2)
    return torch._convert_weight_to_int4pack_for_cpu(q, 1), sz


class Int8Linear(nn.Module):
    def __init__(self, q: Tensor, scale: Tensor, bias: Tensor | None = None) -> None:
        super().__init__()
        self.register_buffer("q", q)
        self.register_buffer("scale", scale.float())
        self.register_buffer("scale_bf16", scale.to(torch.bfloat16))
        self.bias = None if bias is None else nn.Parameter(bias.float(), requires_grad=False)
        self._packed: Any = None  # the int8 GEMM's prepacked weight (built on first use)
        self.int4: tuple[Tensor, Tensor, int] | None = None  # `attach_int4`: not in the state dict

    def attach_int4(self, group: int = INT4_GROUP) -> bool:
        """Keep an int4 copy of these int8 weights for steps of up to `SMALL` positions (half the bytes a
        memory-bound decode step reads); wider steps and prefill keep the int8 kernels. False when the
        kernel is missing, the rows do not split into groups or their number is not a multiple of 16 (the
        kernel's layout; e.g. a vocabulary of another size)."""
        if not int4_available() or self.q.shape[1] % group or self.q.shape[0] % 16:
            return False
        packed, sz = pack_int4(self.dequantized(), group)
        self.int4 = (packed, sz, group)
        return True

    @classmethod
    def from_weight(cls, w: Tensor, bias: Tensor | None = None) -> Int8Linear:
        return cls(*quantize(w), bias)

    @classmethod
    def empty(cls, n: int, k: int, bias: bool = False) -> Int8Linear:
        """Shapes only (a state dict is loaded next, e.g. from the merged-model cache)."""
        return cls(torch.empty(n, k, dtype=torch.int8), torch.empty(n), torch.empty(n) if bias else None)

    def dequantized(self) -> Tensor:
        return torch.mul(self.q, self.scale[:, None])

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if x2.shape[0] <= SMALL:
            if self.int4 is not None and _INT4_ON.get():
                packed, sz, group = self.int4
                y = _INT4_MM(x2.to(torch.bfloat16), packed, group, sz).float()  # type: ignore[misc]
            else:
                y = torch.ops.aten._weight_int8pack_mm(x2.to(torch.bfloat16), self.q, self.scale_bf16).float()
            if self.bias is not None:
                y = y + self.bias
        elif INT8_GEMM:  # rows scaled to max |x| = 1 first: the engine's per-tensor scale acts per token
            xf = x2.float()
            s = torch.maximum(xf.amax(1, keepdim=True), xf.amin(1, keepdim=True).neg_()).clamp_min_(1e-12)
            y = torch.ops.quantized.linear_dynamic(xf * s.reciprocal(), self.prepacked(), REDUCE_RANGE).mul_(s)
            if self.bias is not None:
                y = y + self.bias
        else:
            y = F.linear(x2.float(), self.dequantized(), self.bias)
        return y.view(*shape[:-1], y.shape[-1])

    def prepacked(self) -> Any:
        """The weight as the quantised engine's packed int8 matrix (the same int8 rows and scales)."""
        if self._packed is None:
            n = self.q.shape[0]
            with warnings.catch_warnings():  # quantised tensors are deprecated; the kernels are not
                warnings.simplefilter("ignore", UserWarning)
                qw = torch._make_per_channel_quantized_tensor(self.q, self.scale.double(),
                                                              torch.zeros(n, dtype=torch.long), 0)
            self._packed = torch.ops.quantized.linear_prepack(qw, None)  # bias after the row scale
        return self._packed


class Int8Embedding(nn.Module):
    """Token rows of an int8 matrix (also the tied LM head)."""

    def __init__(self, lin: Int8Linear) -> None:
        super().__init__()
        self.lin = lin
        self.weight = torch.empty(0)  # dtype / device probe for code that reads ``.weight.dtype``

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.lin.q).float() * self.lin.scale[ids].unsqueeze(-1)


# ---- layers --------------------------------------------------------------------------------------
def _interleave(w: Tensor, n_heads: int, hs: int) -> Tensor:
    """Rows of a q/k projection from HF's half-split RoPE layout to interleaved pairs."""
    return w.view(n_heads, 2, hs // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


class _Rope:
    """cos / sin of one forward (B, 1, T, hs, HF half-split) → one complex factor, computed by the
    first layer and reused by the others (the same ``cos`` object; holding it keeps it unique)."""

    def __init__(self) -> None:
        self._cos: Tensor | None = None
        self._f: Tensor | None = None

    def apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """x: (B, T, H, hs) with interleaved pairs → rotated, same shape."""
        if cos is not self._cos or self._f is None:
            half = cos.shape[-1] // 2
            c, s = cos[:, 0, :, :half].float(), sin[:, 0, :, :half].float()  # (B, T, hs/2)
            self._f, self._cos = torch.complex(c, s)[:, :, None], cos  # (B, T, 1, hs/2)
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * self._f).reshape(x.shape).to(x.dtype)


class FastLayer(nn.Module):
    def __init__(self, args: Any, rope: _Rope) -> None:
        """Shapes only; `from_layer` fills it from a float decoder layer."""
        super().__init__()
        self.nh, self.nkv, self.hs = args.n_heads, args.n_kv_heads, args.head_dim
        self.dim, self.eps, self.inter = args.dim, args.norm_eps, args.intermediate_size
        d, hs = args.dim, self.hs
        self.qkv = Int8Linear.empty((self.nh + 2 * self.nkv) * hs, d, args.qkv_bias)
        self.o = Int8Linear.empty(d, self.nh * hs)
        self.gate_up = Int8Linear.empty(2 * self.inter, d)
        self.down = Int8Linear.empty(d, self.inter)
        self.w_in = nn.Parameter(torch.empty(d), requires_grad=False)
        self.w_post = nn.Parameter(torch.empty(d), requires_grad=False)
        self.rope = rope

    @classmethod
    def from_layer(cls, layer: nn.Module, args: Any, rope: _Rope) -> FastLayer:
        at, mlp = layer.self_attn, layer.mlp
        self = cls(args, rope)
        nh, nkv, hs = self.nh, self.nkv, self.hs
        wq, wk = _interleave(at.q_proj.weight, nh, hs), _interleave(at.k_proj.weight, nkv, hs)
        bias = None
        if at.q_proj.bias is not None:
            bias = torch.cat([_interleave(at.q_proj.bias, nh, hs), _interleave(at.k_proj.bias, nkv, hs),
                              at.v_proj.bias])
        self.qkv = Int8Linear.from_weight(torch.cat([wq, wk, at.v_proj.weight]), bias)
        self.o = Int8Linear.from_weight(at.o_proj.weight)
        self.gate_up = Int8Linear.from_weight(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        self.down = Int8Linear.from_weight(mlp.down_proj.weight)
        self.w_in.data = layer.input_layernorm.weight.detach().float().clone()
        self.w_post.data = layer.post_attention_layernorm.weight.detach().float().clone()
        return self

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, is_causal: bool,
                cache: Any, layer: int, offset: Any) -> Tensor:
        B, T, _ = x.shape  # (B, T, dim)
        nh, nkv, hs = self.nh, self.nkv, self.hs
        qkv = self.qkv(F.rms_norm(x, (self.dim,), self.w_in, self.eps))  # (B, T, (nh + 2 nkv) hs)
        qk = self.rope.apply(qkv[..., :(nh + nkv) * hs].reshape(B, T, nh + nkv, hs), cos, sin)
        q = qk[:, :, :nh].transpose(1, 2)  # (B, nh, T, hs)
        k = qk[:, :, nh:].transpose(1, 2)  # (B, nkv, T, hs)
        v = qkv[..., (nh + nkv) * hs:].reshape(B, T, nkv, hs).transpose(1, 2)
        if cache is not None:
            k, v = cache.write(layer, k, v, offset)  # (B, nkv, S, hs), the cache's dtype (bf16)
        if T > SMALL:  # prefill: compute-bound, and fp32 attention is the faster kernel here
            k, v = k.float(), v.float()
        y = attend(q.to(k.dtype), k, v.to(k.dtype), mask=mask, is_causal=is_causal)  # (B, nh, T, hs)
        h = x + self.o(y.transpose(1, 2).reshape(B, T, nh * hs))
        gu = self.gate_up(F.rms_norm(h, (self.dim,), self.w_post, self.eps))
        return h + self.down(F.silu(gu[..., :self.inter]) * gu[..., self.inter:])


def convert(model: nn.Module) -> nn.Module:
    """Swap ``model``'s layers, embedding and LM head for the int8 fast path (in place)."""
    if not supported(model) or getattr(model, "fast_cpu", None):
        return model
    m: Any = model
    layers, rope = m.model.layers, _Rope()
    for i in range(len(layers)):
        layers[i] = FastLayer.from_layer(layers[i], m.args, rope)
    head = Int8Linear.from_weight(m.output_weight())
    embed = None if m.lm_head is None else Int8Linear.from_weight(m.model.embed_tokens.weight)
    return _finish(m, head, embed)


def _int4_layers(model: nn.Module) -> Iterator[tuple[str, Int8Linear]]:
    """The matrices with an int4 copy: every fast layer's MLP, then the LM head (`_finish`'s, tied to the
    embedding or not)."""
    for i, layer in enumerate(getattr(getattr(model, "model", None), "layers", [])):
        if isinstance(layer, FastLayer):
            yield f"layers.{i}.gate_up", layer.gate_up
            yield f"layers.{i}.down", layer.down
    head = getattr(model, "head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if not isinstance(head, Int8Linear) and isinstance(embed, Int8Embedding):
        head = embed.lin
    if isinstance(head, Int8Linear):
        yield "head", head


def attach_int4(model: nn.Module, group: int = INT4_GROUP, packed: dict[str, Tensor] | None = None) -> int:
    """Give every fast layer's MLP (gate|up, down: ~88 % of a layer's bytes in Qwen2.5-Coder-0.5B) and the LM
    head (152K × 896 in Qwen2.5-Coder-0.5B: 28 % of a forward's int8 bytes; one position 15.5 → 5.3 ms) an
    int4 copy for narrow decode steps (`Int8Linear.attach_int4`, read inside `int4_steps`); returns how many
    matrices got one. Attention stays int8, and the embedding's lookups read the int8 rows. ``packed``: a copy
    `int4_state` saved for these weights (the merged-model cache keeps one: packing costs seconds at every
    load); a matrix it lacks, or holds in another shape, is packed again."""
    n = 0
    for name, lin in _int4_layers(model):
        p, sz = (packed or {}).get(f"{name}.int4"), (packed or {}).get(f"{name}.int4_sz")
        k, rows = lin.q.shape[1], lin.q.shape[0]
        if (p is not None and sz is not None and _INT4_MM is not None and p.shape == (rows, k // 2)
                and sz.shape == (k // group, rows, 2)):
            lin.int4 = (p, sz, group)
            n += 1
        else:
            n += lin.attach_int4(group)
    return n


def int4_state(model: nn.Module) -> dict[str, Tensor]:
    """The int4 copies `attach_int4` made, by matrix (what ``packed`` takes back)."""
    out: dict[str, Tensor] = {}
    for name, lin in _int4_layers(model):
        if lin.int4 is not None:
            out[f"{name}.int4"], out[f"{name}.int4_sz"] = lin.int4[0], lin.int4[1]
    return out


def skeleton(args: Any) -> nn.Module:
    """The converted model's structure without data (``load_state_dict(..., assign=True)`` next)."""
    from engine.model import Transformer

    with torch.device("meta"):
        m: Any = Transformer(args, init=False)
    rope = _Rope()
    for i in range(len(m.model.layers)):
        m.model.layers[i] = FastLayer(args, rope)
    m.model.norm.weight = nn.Parameter(torch.empty(args.dim), requires_grad=False)
    head = Int8Linear.empty(args.vocab_size, args.dim)
    embed = None if args.tie_embeddings else Int8Linear.empty(args.vocab_size, args.dim)
    return _finish(m, head, embed)


def _finish(m: Any, head: Int8Linear, embed: Int8Linear | None) -> nn.Module:
    m.lm_head = None  # the int8 head below replaces it (output_weight is not used any more)
    m.model.embed_tokens = Int8Embedding(head if embed is None else embed)
    if embed is not None:
        m.head = head  # registered, so the state dict holds it
    norm = m.model.norm

    def logits(h: Tensor) -> Tensor:
        return head(norm(h))

    m.logits = logits
    m.fast_cpu = FORMAT
    return m
