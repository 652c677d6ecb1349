"""The KTO-aligned model's implicit reward of a suggestion, for the show/hide gate (serving side).

r = log π_θ(y|x) − log π_ref(y|x), each log-likelihood estimated by the masked-diffusion ELBO
(−Σ over masked canvas tokens of CE / t) with the **same** noisy canvas for both, so the mask noise
cancels. The policy is the reference plus a stacked LoRA active from the prompt's last token on
(`engine.loading.stacked`), so the prompt rows are shared: after a generation the scorer reuses the
engine's cached prompt KV and runs the coupled pair over ``[last prompt token, clean canvas blocks,
noisy canvas]`` as one two-row forward (reference row: LoRA × 0, policy row: LoRA on) — no second
prefill, the weights are read once, the engine's cache is only read; with a LoRA on the top layers only
(``--top-layers``) the layers below it run once for both rows (`forked_forward`). The gate's score is
``(r − z0) / n`` with z0 the KL reference point the trainer estimated and n the completion tokens + eom.

`draw_noise` is the one noise definition: the KTO trainer (`engine.train.kto.elbo`) imports it, so
training's r and the gate's r are the same estimator (tests check they agree).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.attention import bd3lm_layout, bd3lm_logit_index
from engine.caches.prefix import KVCache
from engine.loading.stacked import AlignedEngine
from engine.templates import EditPrompt, FimPrompt, render_trained
from engine.types import GenerateResult

T_MIN = 0.1  # mask rates are drawn from U(t_min, 1): bounded 1/t weights (lower-variance rewards)


@dataclass
class Reward:
    r: float  # log π_θ(y|x) − log π_ref(y|x), ELBO estimates with shared masks
    z0: float  # the trainer's KL reference point (adapter JSON)
    n_tokens: int  # completion tokens + eom
    logp_policy: float
    logp_ref: float
    ms: float  # wall time of the forward pair (+ prefill when no cached prompt was found)
    cached: bool  # the generation's prompt KV was reused
    adapter: str = ""

    @property
    def score(self) -> float:
        """Length-normalised implicit reward (r − z0) / n: the gate's raw score."""
        return (self.r - self.z0) / max(1, self.n_tokens)


def canvas_for(completion: list[int], eom: int, pad: int, block_size: int, pad_to_block: bool = False
               ) -> list[int]:
    """The scored canvas: completion ids and one eom (a short last block: the forward pair stays
    small), or with ``pad_to_block`` pads up to a whole number of blocks (adapters that say so)."""
    n = len(completion) + 1
    c = -(-n // block_size) * block_size if pad_to_block else n
    return [*completion, eom] + [pad] * (c - n)


def draw_noise(c: int, block_size: int, gen: torch.Generator, t_min: float = T_MIN) -> tuple[Tensor, Tensor]:
    """(masked (c,) bool, weight (c,) = 1/t where masked): per block t ~ U(t_min, 1), each token masked
    with probability t, at least one per block."""
    nb = -(-c // block_size)
    t = t_min + (1 - t_min) * torch.rand(nb, generator=gen)
    t_pos = t.repeat_interleave(block_size)[:c]
    masked = torch.rand(c, generator=gen) < t_pos
    for b in range(nb):
        lo, hi = b * block_size, min(c, (b + 1) * block_size)
        if not masked[lo:hi].any():
            masked[lo + int(torch.randint(hi - lo, (1,), generator=gen))] = True
    return masked, masked.float() / t_pos


def tail_layout(canvas: int, block_size: int, shifted: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The BD3-LM layout of ``[last prompt token, x0 blocks but the last, xt]`` (the prompt's other
    rows come from a KV cache). Returns (keep (T,) indices into the full 1 + 2c layout, mask (T, T)
    among the tail rows, positions (T,) relative to the last prompt token, logit index (c,) into the
    tail rows)."""
    c, bs = canvas, block_size
    mask, pos = bd3lm_layout(1, c, bs)
    c0 = (c - 1) // bs * bs  # the last (possibly partial) clean block is seen by no noisy block
    keep = torch.cat([torch.arange(1 + c0), torch.arange(1 + c, 1 + 2 * c)])
    where = torch.full((1 + 2 * c,), -1, dtype=torch.long)
    where[keep] = torch.arange(keep.numel())
    idx = where[bd3lm_logit_index(1, c, bs, shifted=shifted)]
    assert bool((idx >= 0).all())
    return keep, mask[keep][:, keep], pos[keep], idx


def masked_logp(model: Any, hidden: Tensor, index: Tensor, targets: Tensor, weights: Tensor) -> Tensor:
    """−Σ_j w_j · CE_j over the canvas (per row): hidden (B, L, dim), index/targets/weights (B, C)."""
    h = torch.gather(hidden, 1, index[..., None].expand(-1, -1, hidden.shape[-1]))
    logits = model.logits(h).float()
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(weights)
    return -(ce * weights).sum(-1)


class RewardScorer:
    """Implicit reward of the aligned model (`AlignedEngine`) for a (prompt, completion)."""

    def __init__(self, eng: AlignedEngine, *, seed: int = 0) -> None:
        self.eng = eng
        meta = eng.kto_meta
        self.z0 = float(meta.get("z0", 0.0))
        elbo = meta.get("elbo") or {}
        self.t_min = float(elbo.get("t_min", T_MIN))
        self.pad_to_block = bool(elbo.get("pad_to_block", True))  # adapters before the flag padded
        self.seed = seed
        self._buf: KVCache | None = None  # the two-row KV of the pair, reused across calls
        # decoder layers below the LoRA's lowest one compute the same thing for both rows: run them once
        layers = (meta.get("lora") or {}).get("layers")
        self.fork = min(layers) if layers else 0

    # ---- convenience -------------------------------------------------------------------------
    def score_fim(self, prompt: FimPrompt, result: GenerateResult, cache_key: str | None = None) -> Reward:
        """``result``'s tokens after the prompt that generated them: where the engine healed the prompt's last
        piece (`engine.decoding.heal`), the layout without it and the tokens the model chose for it (the
        engine's cached slot; the trainer's layout otherwise)."""
        ids = (self.eng.format.fim(prompt).before + result.lead_tokens if result.lead_tokens
               else self.render(prompt))
        return self.score_ids(ids, result.tokens, cache_key)

    def score_edit(self, prompt: EditPrompt, result: GenerateResult, cache_key: str | None = None) -> Reward:
        return self.score_ids(self.render(prompt), result.tokens, cache_key)

    def score_text(self, prompt: FimPrompt | EditPrompt, completion: str) -> Reward:
        return self.score_ids(self.render(prompt), self.eng.tokenizer.encode(completion))

    def render(self, prompt: FimPrompt | EditPrompt) -> list[int]:
        """The prompt's ids in the order the model was trained on and generates from (the adapter's
        ``fim_layout`` / ``edit_layout``), as the KTO trainer renders its examples."""
        meta = self.eng.meta
        return render_trained(self.eng.tokenizer, prompt, meta.get("fim_layout"), meta.get("edit_layout"))

    # ---- the forward pair --------------------------------------------------------------------
    @torch.no_grad()
    def score_ids(self, prompt: list[int], completion: list[int], cache_key: str | None = None) -> Reward:
        eng = self.eng
        sp = eng.tokenizer.special
        bs = eng.block_size
        cur = eng.tokenizer.special.cursor
        target = canvas_for([t for t in completion if t != cur], sp.eom, sp.pad, bs, self.pad_to_block)
        gen = torch.Generator().manual_seed(self.seed)
        masked, weight = draw_noise(len(target), bs, gen, self.t_min)
        with eng.lock:
            t0 = time.perf_counter()
            found = eng.cache.best(cache_key, prompt) if cache_key else None  # the engine's slot, in place
            slot = found[0] if found is not None and found[0].tokens == list(prompt) else None
            kv = slot.kv if slot is not None else self._prefill(prompt)
            lp_ref, lp_pol = self._pair(kv, prompt, target, masked, weight)
            cached = slot is not None
            ms = (time.perf_counter() - t0) * 1e3
        return Reward(lp_pol - lp_ref, self.z0, len(completion) + 1, lp_pol, lp_ref, ms, cached, eng.adapter)

    def _prefill(self, prompt: list[int]) -> KVCache:
        """Reference KV of every prompt token but the last (no cached generation to reuse)."""
        eng = self.eng
        n = len(prompt)
        kv = KVCache.for_model(eng.args, 1, n + 1, getattr(eng, "kv_dtype", eng.dtype), eng.device)
        ids = torch.tensor([prompt], device=eng.device)
        with eng.lora.use(False):
            for s in range(0, n - 1, 512):
                e = min(n - 1, s + 512)
                kv.length = s
                eng.model(ids[:, s:e], offset=s, cache=kv, is_causal=e - s > 1,
                          logits_slice=slice(0, 0))
        kv.length = n
        return kv

    def _pair(self, kv: KVCache, prompt: list[int], target: list[int], masked: Tensor,
              weight: Tensor) -> tuple[float, float]:
        """One batched forward: row 0 the reference (LoRA × 0), row 1 the policy, same noisy canvas,
        over a two-row copy of the prompt KV (weights are read once; the engine's cache is untouched)."""
        eng = self.eng
        dev = eng.device
        n, c, bs = len(prompt), len(target), eng.block_size
        keep, tmask, tpos, index = tail_layout(c, bs, eng.args.shifted_logits)
        tgt = torch.tensor(target)
        xt = torch.where(masked, torch.full_like(tgt, eng.tokenizer.special.mask), tgt)
        full = torch.cat([torch.tensor([prompt[-1]]), tgt, xt])
        T = keep.numel()
        ids = full[keep][None].expand(2, T).to(dev)
        mask = torch.cat([torch.ones(T, n - 1, dtype=torch.bool), tmask], 1)[None, None].to(dev)
        pos = (tpos + n - 1)[None].expand(2, T).to(dev)
        pair = self._pair_cache(kv, n - 1, n - 1 + T)
        rows = torch.tensor([0.0, 1.0], device=dev).view(2, 1, 1)
        with eng.lora.use(True, rows):
            if self.fork:
                h = forked_forward(eng.model, ids[:1], pos[:1], mask, pair, n - 1, self.fork)
            else:
                h = eng.model(ids, positions=pos, mask=mask, cache=pair, offset=n - 1, logits_slice=slice(0, 0))
        lp = masked_logp(eng.model, h, index[None].expand(2, -1).to(dev), tgt[None].expand(2, -1).to(dev),
                         weight[None].expand(2, -1).to(dev))
        return float(lp[0]), float(lp[1])

    def _pair_cache(self, kv: KVCache, n: int, need: int) -> KVCache:
        """A two-row cache holding the first ``n`` positions of ``kv`` in both rows (buffer reused)."""
        buf = self._buf
        if buf is None or buf.capacity < need or buf.k[0].dtype != kv.k[0].dtype:
            buf = self._buf = KVCache.for_model(self.eng.args, 2, need, kv.k[0].dtype, kv.k[0].device)
        for dst, src in ((buf.k, kv.k), (buf.v, kv.v)):
            for i, (d, t) in enumerate(zip(dst, src, strict=True)):
                d[: 1 if i < self.fork else 2, :, :n] = t[:1, :, :n]  # forked layers: row 0 only
        buf.length = n
        return buf


def forked_forward(model: Any, ids: Tensor, positions: Tensor, mask: Tensor, cache: KVCache, offset: int,
                   fork: int) -> Tensor:
    """`Transformer.forward` (hidden states) of one row (ids, positions (1, T)) through the layers below
    ``fork`` — with row 0 of the two-row ``cache`` — then of two copies of it through the rest: the
    reference and the policy row differ only from the stacked LoRA's lowest layer on. Returns (2, T, dim)."""
    cos, sin = model._rope(positions)
    dt = model.model.embed_tokens.weight.dtype
    cos, sin = cos[:, None].to(dt), sin[:, None].to(dt)  # (1, 1, T, hs)
    x = model.model.embed_tokens(ids)  # (1, T, dim)
    one = cache.row(0)
    for i, layer in enumerate(model.model.layers):
        if i == fork:
            x = x.expand(2, -1, -1).contiguous()  # (2, T, dim)
        x = layer(x, cos, sin, mask, False, one if i < fork else cache, i, offset)
    return x
