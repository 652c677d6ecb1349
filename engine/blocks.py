"""Decoding in the trained block layout: every step computes a whole canvas block.

`decode_blocks` (block-causal models, several requests batched into one forward per step) and
`decode_bidirectional` (Dream / LLaDA-style full attention with the Fast-dLLM dual cache).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from engine.cache import KVCache


def decode_blocks(eng: Any, jobs: list[Any]) -> None:
    """Denoise all jobs' canvases; one batched forward per step.

    A finished block is committed inside the next step's forward: its clean tokens go in
    front of the next (noisy) block, attending to the context and themselves, while the noisy
    block attends to the context, the clean block and itself (exactly the block-causal rule).
    Only that first step of a block needs a mask; the others run mask-free."""
    mask_id = eng.tokenizer.special.mask
    if len(jobs) == 1:
        kv = jobs[0].kv
        assert kv is not None
    else:
        cap = max(j.ctx + j.den.spec.length for j in jobs) + 2 * eng.block_size
        kv = KVCache.stack([(j.kv, j.ctx) for j in jobs], cap)  # type: ignore[misc]
        kv.length = 0
    live = list(jobs)  # row r of kv belongs to live[r]
    pending: dict[int, list[int]] = {}  # id(job) -> clean block to commit with the next step
    while True:
        for j in live:
            if not j.den.finished and j.abort is not None and j.abort.aborted:
                j.den.abort()
        still = [r for r, j in enumerate(live) if not j.den.finished]
        if not still:
            return
        if len(still) < len(live):  # drop finished rows (one more copy, then less work)
            if len(still) == 1:
                kv = kv.row(still[0])
            else:
                idx = torch.tensor(still, device=eng.device)
                kv = KVCache._from([t.index_select(0, idx) for t in kv.k],
                                   [t.index_select(0, idx) for t in kv.v], 0)
            live = [live[r] for r in still]
        single = len(live) == 1
        pre = [pending.pop(id(j), []) for j in live]
        blocks = [p + j.den.block_ids() for p, j in zip(pre, live, strict=True)]
        pres = [len(p) for p in pre]
        width = max(len(b) for b in blocks)
        ids = torch.tensor([b + [mask_id] * (width - len(b)) for b in blocks], device=eng.device)
        offs = [j.ctx for j in live]
        if single:
            kv.length = offs[0]
        if single and not pres[0]:  # the hot path: B tokens over the cache, no mask
            h = eng.model(ids, offset=offs[0], cache=kv, logits_slice=slice(0, 0))
        else:
            dev = eng.device
            q = torch.arange(width, device=dev)
            o, pr = torch.tensor(offs, device=dev), torch.tensor(pres, device=dev)
            ln = torch.tensor([len(b) for b in blocks], device=dev)
            lim = torch.where(q[None, :] < pr[:, None], (o + pr)[:, None], (o + ln)[:, None])
            keys = torch.arange(max(offs) + width, device=dev)
            mask = (keys[None, None, :] < lim[:, :, None])[:, None]  # (N, 1, T, S)
            h = eng.model(ids, offset=offs[0] if single else offs, cache=kv, mask=mask,
                           logits_slice=slice(0, 0))
        for r, j in enumerate(live):
            if pres[r]:  # the clean block is now part of the context
                j.last_hidden = h[r, pres[r] - 1]
                j.ctx += pres[r]
            j.forwards += 1
            j.timings["decode_positions"] = j.timings.get("decode_positions", 0.0) + len(blocks[r])
            eng._step_logits(j, h[r, pres[r]:], j.last_hidden)
            if not j.den.finished and j.den.block_done():
                s, e = j.den.block_range()
                clean = j.den.canvas[s:e]
                if j.den.next_block():
                    pending[id(j)] = clean


def decode_bidirectional(eng: Any, j: Any) -> None:
    """Bidirectional models (Dream / LLaDA): recompute everything at each block start and, with
    ``eng.approx_cache``, reuse the stale prefix+suffix KV inside a block (Fast-dLLM dual cache)."""
    n = len(j.prompt)
    total = n + j.den.spec.length
    kv = KVCache.for_model(eng.args, 1, total, eng.dtype, eng.device) if eng.approx_cache else None
    fresh, block = True, -1
    prev: Tensor | None = None
    while not j.den.finished:
        if j.abort is not None and j.abort.aborted:
            j.den.abort()
            break
        s, e = j.den.block_range()
        if j.den.block != block or not eng.approx_cache or fresh:
            block, fresh = j.den.block, False
            ids = torch.tensor([j.prompt + j.den.canvas], device=eng.device)
            if kv is not None:
                kv.length = 0
            h = eng.model(ids, cache=kv, logits_slice=slice(0, 0))[0]
            if kv is not None:
                kv.length = total
            prev, hb = h[n + s - 1], h[n + s: n + e]
        else:
            ids = torch.tensor([j.den.block_ids()], device=eng.device)
            hb = eng.model(ids, offset=n + s, cache=kv, logits_slice=slice(0, 0))[0]
        j.forwards += 1
        eng._step_logits(j, hb, prev)
        if not j.den.finished and j.den.block_done():
            j.den.next_block()
