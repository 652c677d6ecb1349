"""Attention kernels and the masks of the block-diffusion layouts.

`attend` runs flash-attn when it imports (CUDA, no mask), else PyTorch SDPA. Without a mask SDPA
can pick its flash / memory-efficient kernel, so the hot path (a canvas block over a cached
context) passes none. The path in use is logged once and reported by `attention_path()`.

Masks are boolean, ``True`` = may attend, shaped ``(T, S)`` (queries × keys); callers add batch
and head dims as ``mask[None, None]``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.cpu import gemm as cpu_gemm

log = logging.getLogger(__name__)

_flash: Any = None
_flash_tried = False
_logged: set[str] = set()


def _flash_fn() -> Any:
    global _flash, _flash_tried
    if not _flash_tried:
        _flash_tried = True
        try:
            from flash_attn import flash_attn_func  # type: ignore[import-not-found]

            _flash = flash_attn_func
        except Exception:  # not installed / no CUDA build: SDPA it is
            _flash = None
    return _flash


def attention_path(device: torch.device | str) -> str:
    """Human-readable name of the kernel used for unmasked attention on ``device``."""
    dev = torch.device(device)
    if dev.type == "cuda" and _flash_fn() is not None:
        return "flash-attn"
    return f"torch-sdpa ({dev.type})"


def _log_once(path: str) -> None:
    if path not in _logged:
        _logged.add(path)
        log.info("attention path: %s", path)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
    """q: (B, nh, T, hs); k, v: (B, nkv, S, hs) with nh % nkv == 0 (GQA). Returns (B, nh, T, hs).

    ``is_causal`` with S > T (a cached prefix before the queries' own keys): query i sees keys
    ``<= S - T + i`` (causal aligned at the bottom right, what a KV cache means). Prefill-sized calls
    on a CPU (``ONEDNN_T``+ queries) run their GEMMs through oneDNN where `engine.cpu.gemm` found that
    exact and faster."""
    if (cpu_gemm.ENABLED and is_causal and mask is None and q.shape[2] >= ONEDNN_T and q.device.type == "cpu"
            and q.dtype == torch.float32 and _cpu_flash is not None):
        with cpu_gemm.onednn():
            return _causal_aligned(q, k, v)
    return _attend(q, k, v, mask, is_causal)


# queries from which oneDNN's fp32 GEMMs beat MKL's in CPU attention over 2,048 keys (AMD EPYC Zen 5,
# 9 heads: 1.32x at 256, 1.05x at 128, 0.55x at 8; docs/PERFORMANCE.md)
ONEDNN_T = 256
# oneDNN keeps memory for every GEMM shape it has run (~7 MB each; 60 prefills of random lengths: +540 MB):
# the flash kernel's blocks (256 queries x 512 keys from 768 queries on) only ever see lengths that are
# multiples of these
ALIGN_Q, ALIGN_K = 256, 512


def _pad(x: Tensor, n: int, front: int = 0) -> Tensor:
    """``x`` (B, H, L, D) placed at row ``front`` of ``n`` zero rows."""
    out = x.new_zeros(x.shape[0], x.shape[1], n, x.shape[3])
    out[:, :, front:front + x.shape[2]] = x
    return out


def _causal_aligned(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Bottom-right causal attention of T queries over S = P + T keys (P cached) as CPU flash calls whose
    lengths are multiples of `ALIGN_Q` / `ALIGN_K` (for oneDNN: a bounded set of GEMM shapes). The
    cached keys up to a multiple of ALIGN_K, P', go unmasked; the rest, r = P - P' keys and the T new
    ones, run causal behind r zero queries (query r + i sees local keys <= r + i, i.e. global keys <= P + i)
    with zero rows padding the end (causal: no real query sees them); the two parts are merged by their
    log-sum-exps. Zero queries and padded rows are computed and dropped."""
    T, S = q.shape[2], k.shape[2]
    P = S - T
    Pa = P // ALIGN_K * ALIGN_K
    r = P - Pa
    k, v = _heads_of(q, k, v)
    L = -(-(r + T) // ALIGN_Q) * ALIGN_Q
    o2, l2 = _cpu_flash(_pad(q, L, r), _pad(k[:, :, Pa:], L), _pad(v[:, :, Pa:], L), 0.0, True)
    if Pa == 0:
        return o2[:, :, r:r + T]
    o1, l1 = _cpu_flash(_pad(q, -(-T // ALIGN_Q) * ALIGN_Q), k[:, :, :Pa], v[:, :, :Pa], 0.0, False)
    return _merge(o1[:, :, :T], l1[:, :, :T], o2[:, :, r:r + T], l2[:, :, r:r + T])


def _heads_of(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """K / V repeated to q's heads (GQA) for the CPU flash kernel, which has no grouped heads."""
    if k.shape[1] == q.shape[1]:
        return k, v
    rep = q.shape[1] // k.shape[1]
    return k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)


def _merge(o1: Tensor, l1: Tensor, o2: Tensor, l2: Tensor) -> Tensor:
    """Attention over two disjoint key sets from each one's output and log-sum-exp (B, H, T)."""
    lse = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - lse).unsqueeze(-1).to(o1.dtype) + o2 * torch.exp(l2 - lse).unsqueeze(-1).to(o2.dtype)


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
    if is_causal and mask is None and k.shape[2] > q.shape[2]:
        return _causal_after_prefix(q, k, v)
    if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and q.shape[2] <= SMALL_T \
            and k.shape[2] >= LONG_S and not is_causal:
        return _small_queries(q, k, v, mask)
    fa = _flash_fn() if q.is_cuda and mask is None and q.dtype in (torch.float16, torch.bfloat16) else None
    if fa is not None and (not is_causal or q.shape[2] == k.shape[2]):
        _log_once("flash-attn")
        out = fa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=is_causal)
        return out.transpose(1, 2)
    _log_once(f"torch-sdpa ({q.device.type})")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                          enable_gqa=k.shape[1] != q.shape[1])


SMALL_T, LONG_S = 64, 256  # decode steps (a window / block of the canvas) over a cache on a CPU: _small_queries


def _small_queries(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """A few queries over a long bf16 / fp16 KV cache on a CPU: two grouped matmuls (each KV head's
    query heads stacked, no repeated K / V), in fp32. PyTorch's CPU SDPA takes a slow path for
    half-precision K / V here: one layer's decode step over 2,048 cached keys 0.83 ms vs 0.22 ms, and
    closer to the fp32 result (9 heads, 3 KV heads; docs/PERFORMANCE.md)."""
    B, nh, T, hs = q.shape
    nkv, S = k.shape[1], k.shape[2]
    rep = nh // nkv
    qg = q.reshape(B, nkv, rep * T, hs).float()  # heads h = g * rep + r share KV head g (repeat_interleave)
    scores = torch.matmul(qg, k.float().transpose(-1, -2)) * (hs ** -0.5)  # (B, nkv, rep*T, S), fp32
    if mask is not None:
        m = mask.expand(B, nh, T, S).reshape(B, nkv, rep * T, S)
        scores = scores.masked_fill(~m, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v.float()).reshape(B, nh, T, hs).to(q.dtype)


_cpu_flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _causal_after_prefix(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention of T new queries over S = P + T keys (P cached). On a CPU as two flash calls
    merged by their log-sum-exps — the cached keys without a mask, the new ones causal (the kernel
    skips the masked half) — instead of one call with an explicit (T, S) mask, which computes every
    query-key pair: 1.3x at T = 1,000, P = 600 (docs/PERFORMANCE.md). Elsewhere: SDPA with the mask."""
    T, S = q.shape[2], k.shape[2]
    P = S - T
    if q.device.type != "cpu" or _cpu_flash is None or q.dtype not in (torch.float32, torch.bfloat16):
        mask = causal_mask(T, P, q.device)[None, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1])
    _log_once("torch-sdpa (cpu, causal over a cached prefix: two flash calls)")
    k, v = _heads_of(q, k, v)
    o1, l1 = _cpu_flash(q, k[:, :, :P], v[:, :, :P], 0.0, False)
    o2, l2 = _cpu_flash(q, k[:, :, P:], v[:, :, P:], 0.0, True)
    return _merge(o1, l1, o2, l2)


# ---- masks ---------------------------------------------------------------------------------
def causal_mask(t: int, offset: int = 0, device: torch.device | str = "cpu") -> Tensor:
    """(t, offset + t): query i (logical position offset + i) sees keys <= offset + i."""
    q = torch.arange(t, device=device)[:, None] + offset
    k = torch.arange(offset + t, device=device)[None, :]
    return k <= q


def block_causal_mask(n_prompt: int, canvas: int, block_size: int,
                      device: torch.device | str = "cpu") -> Tensor:
    """(L, L), L = n_prompt + canvas: prompt causal; a canvas block sees the prompt, earlier
    blocks and all of its own block (the inference layout, clean or noisy blocks alike)."""
    n = n_prompt + canvas
    idx = torch.arange(n, device=device)
    # group id: prompt tokens each their own (causal), canvas tokens share one per block
    blk = torch.where(idx < n_prompt, idx, n_prompt + (idx - n_prompt) // block_size * block_size)
    end = torch.where(idx < n_prompt, idx, torch.clamp(blk + block_size - 1, max=n - 1))
    return idx[None, :] <= end[:, None]


def absolute_block_mask(t: int, block: int, offset: int = 0, device: torch.device | str = "cpu") -> Tensor:
    """(t, offset + t) inference mask of block-diffusion models whose blocks tile the *whole*
    sequence from position 0, prompt included (SDAR, Fast-dLLM v2, LLaDA2.0): the query at absolute
    position p sees every key before the end of its block, ``k < (p // block + 1) * block`` — prompt
    tokens of one block attend to each other both ways, and the prompt's last, partial block is
    completed by the first canvas tokens."""
    q = torch.arange(t, device=device)[:, None] + offset
    k = torch.arange(offset + t, device=device)[None, :]
    return (k // block) <= (q // block)


def bd3lm_layout(n_prompt: int, canvas: int, block_size: int,
                 device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Training layout [prompt, x0 canvas (clean), xt canvas (noisy)] → (mask (L, L), positions (L,)).

    x0 block b sees prompt + x0 blocks <= b; xt block b sees prompt + x0 blocks < b + its own xt
    block; xt reuses the canvas' logical positions. Shifted logits: the j = 0 prediction of xt
    block b is read from x0 block b-1's last position (or the prompt's last) — see
    `bd3lm_logit_index`.
    """
    n, c = n_prompt, canvas
    top = block_causal_mask(n, c, block_size, device)  # prompt + x0
    L = n + 2 * c
    mask = torch.zeros(L, L, dtype=torch.bool, device=device)
    mask[: n + c, : n + c] = top
    ci = torch.arange(c, device=device)
    blk = ci // block_size
    mask[n + c:, :n] = True
    mask[n + c:, n: n + c] = blk[None, :] < blk[:, None]  # earlier clean blocks
    mask[n + c:, n + c:] = blk[None, :] == blk[:, None]  # own noisy block
    pos = torch.cat([torch.arange(n + c, device=device), torch.arange(n, n + c, device=device)])
    return mask, pos


def bd3lm_logit_index(n_prompt: int, canvas: int, block_size: int, shifted: bool = True,
                      device: torch.device | str = "cpu") -> Tensor:
    """(canvas,) index into the BD3-LM sequence of the output that predicts canvas token j."""
    n, c = n_prompt, canvas
    j = torch.arange(c, device=device)
    xt = n + c + j
    if not shifted:
        return xt
    first = (j % block_size) == 0
    prev_clean = torch.where(j == 0, torch.full_like(j, n - 1), n + j - 1)
    return torch.where(first, prev_clean, xt - 1)
