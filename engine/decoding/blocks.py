"""Block-causal decoding in the trained block layout: every step computes a whole canvas block.

`prefill` commits the prompt to the document's prefix-cache slot; `decode_blocks` denoises several
requests batched into one forward per step. Two block alignments (``ModelArgs.block_align``):

* ``canvas`` (our adapters): a causal prompt, then blocks starting at the canvas;
* ``absolute`` (SDAR, Fast-dLLM v2, LLaDA2.0): blocks tile the whole sequence from position 0, as
  their generation code does — the prompt's whole blocks are prefilled under
  `engine.attention.absolute_block_mask` (bidirectional inside a block), the prompt's last partial
  block (``lead``) is recomputed with the first canvas block, which is partial (`OffsetDenoiser`),
  and is committed with it. A cached prefix is reused in whole blocks only.

Bidirectional models decode in `engine.decoding.bidir`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from engine.attention import absolute_block_mask
from engine.caches.prefix import KVCache, Slot
from engine.decoding.sampler import Denoiser
from engine.textdiff import common_prefix

if TYPE_CHECKING:
    from engine.decoding.steps import DecodeJob, StepRunner


class OffsetDenoiser(Denoiser):
    """Blocks of ``block_size`` counted from ``offset`` positions before the canvas: block 0 is the
    rest of the prompt's last partial block (``block_size - offset`` positions)."""

    def __init__(self, *a: Any, offset: int = 0, **kw: Any) -> None:
        self.offset = offset
        super().__init__(*a, **kw)

    @property
    def n_blocks(self) -> int:
        return -(-(self.spec.length + self.offset) // self.block_size)

    def block_range(self, b: int | None = None) -> tuple[int, int]:
        if b is None and self.window is not None:
            return self.window
        b = self.block if b is None else b
        s = max(0, b * self.block_size - self.offset)
        return s, min((b + 1) * self.block_size - self.offset, self.spec.length)


# ---- prefill ---------------------------------------------------------------------------------
def prefill(eng: StepRunner, j: DecodeJob, chunk: int = 2048) -> None:
    """Commit the prompt (its whole blocks when aligned absolutely) to the KV cache, reusing the
    longest cached prefix of the same document (in whole blocks when aligned absolutely)."""
    t0 = time.perf_counter()
    n, B = len(j.prompt), eng.block_size
    absolute = eng.args.block_align == "absolute"
    base = n - n % B if absolute else n  # prompt tokens committed here
    j.base, j.lead = base, list(j.prompt[base:])
    slot = eng.take_slot(j, n + j.den.spec.length + B)
    lcp = common_prefix(slot.tokens, j.prompt[:base])
    healed = slot.heal_from  # the prompt a healed one started from (a keystroke inside the same word)
    last = None
    if lcp == base == len(slot.tokens) and (base == 0 or slot.last_hidden is not None):
        reuse, last = base, slot.last_hidden
    elif healed is not None and lcp == base and healed[0] == j.prompt[:base]:
        reuse, last = base, healed[1]  # its KV is the slot's up to there, its hidden state kept
    else:  # recompute at least the last token (canvas) / block (absolute): its hidden state is needed
        reuse = min(lcp, base - 1)
        reuse = max(0, reuse // B * B) if absolute else reuse
    kv = slot.kv
    if reuse < base:
        ids = torch.tensor([j.prompt[:base]], device=eng.device)
        chunk = max(B, chunk // B * B)
        for s in range(reuse, base, chunk):
            e = min(base, s + chunk)
            kv.length = s
            if absolute:
                mask, causal = absolute_block_mask(e - s, B, s, eng.device), False
            else:
                mask, causal = None, e - s > 1  # causal over the cached prefix (engine.attention.attend)
            h = eng.model(ids[:, s:e], offset=s, cache=kv, mask=mask, is_causal=causal, logits_slice=slice(0, 0))
            j.forwards += 1
        last = h[0, -1]
    kv.length = base
    slot.tokens, slot.last_hidden = list(j.prompt[:base]), last
    j.slot, j.kv, j.ctx, j.last_hidden, j.cached = slot, kv, base, last, reuse
    j.timings["prefill_ms"] = (time.perf_counter() - t0) * 1e3


DONOR_MIN = 16  # tokens another slot must share beyond this one's before its KV is copied


def cached_slot(eng: StepRunner, j: DecodeJob, need: int) -> Slot:
    """The job's slot (per document and prompt kind), seeded from the document's other slot when that
    one shares a longer token prefix with the prompt (a next edit after typing: the FIM prompt's
    context sections, which the edit prompt shares)."""
    return document_slot(eng, eng.slot_key(j), j.cache_key, j.prompt, need)


def document_slot(eng: StepRunner, key: str | None, document: str | None, tokens: Sequence[int], need: int,
                  min_gain: int = DONOR_MIN) -> Slot:
    """The cache slot ``key`` (taken out of the cache, room for ``need`` positions; a new one if there is
    none), seeded from the ``document``'s slot sharing the longest prefix with ``tokens`` when that is at
    least ``min_gain`` tokens longer than what the slot shares."""
    slot = eng.cache.take(key) if key else None
    if slot is not None:
        slot.kv.ensure(need)
    else:
        slot = Slot([], KVCache.for_model(eng.args, 1, need, eng.kv_dtype, eng.device))
    donor = eng.cache.best(document + "#", tokens) if document else None
    if donor is not None and donor[1] >= common_prefix(slot.tokens, tokens) + min_gain:
        slot.seed(*donor)
    return slot


# ---- decoding --------------------------------------------------------------------------------


def decode_blocks(eng: StepRunner, jobs: list[DecodeJob]) -> None:
    """Denoise all jobs' canvases; one batched forward per step.

    A finished block is committed inside the next step's forward: its clean tokens go in
    front of the next (noisy) block, attending to the context and themselves, while the noisy
    block attends to the context, the clean block and itself (exactly the block-causal rule).
    Only that first step of a block needs a mask; the others run mask-free."""
    mask_id = eng.tokenizer.special.mask
    graphs = eng.graphs  # engine.decoding.graphs: captured steps over a pooled arena
    cap = max(j.ctx + len(j.lead) + j.den.spec.length for j in jobs) + 2 * eng.block_size
    if graphs is not None:
        kv = graphs.arena([(j.kv, j.ctx) for j in jobs], cap)
    elif len(jobs) == 1:
        kv = jobs[0].kv
        assert kv is not None
    else:
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
            if graphs is not None:
                kv = graphs.arena([(kv.row(r), live[r].ctx) for r in still], cap)
            elif len(still) == 1:
                kv = kv.row(still[0])
            else:
                idx = torch.tensor(still, device=eng.device)
                kv = KVCache._from([t.index_select(0, idx) for t in kv.k],
                                   [t.index_select(0, idx) for t in kv.v], 0)
            live = [live[r] for r in still]
        single = len(live) == 1
        pre = [pending.pop(id(j), []) for j in live]
        leads = [j.lead if j.den.block == 0 else [] for j in live]  # absolute: the prompt's partial block
        blocks = [p + d + j.den.block_ids() for p, d, j in zip(pre, leads, live, strict=True)]
        pres = [len(p) for p in pre]
        width = max(len(b) for b in blocks)
        ids = torch.tensor([b + [mask_id] * (width - len(b)) for b in blocks], device=eng.device)
        offs = [j.ctx for j in live]
        if single:
            kv.length = offs[0]
        h = None  # inside a block: the captured step (keys < context + own block)
        if graphs is not None and not any(pres):
            h = graphs.step(kv, ids, offs, [o + len(b) for o, b in zip(offs, blocks, strict=True)])
        if h is None and single and not pres[0]:  # the hot path: B tokens over the cache, no mask
            h = eng.model(ids, offset=offs[0], cache=kv, logits_slice=slice(0, 0))
        elif h is None:
            dev = eng.device
            q = torch.arange(width, device=dev)
            o, pr = torch.tensor(offs, device=dev), torch.tensor(pres, device=dev)
            ln = torch.tensor([len(b) for b in blocks], device=dev)
            lim = torch.where(q[None, :] < pr[:, None], (o + pr)[:, None], (o + ln)[:, None])
            keys = torch.arange(max(offs) + width, device=dev)
            mask = (keys[None, None, :] < lim[:, :, None])[:, None]  # (N, 1, T, S)
            h = eng.model(ids, offset=offs[0] if single else offs, cache=kv, mask=mask,
                           logits_slice=slice(0, 0))
        items = []
        for r, j in enumerate(live):
            if pres[r]:  # the clean block is now part of the context
                j.last_hidden = h[r, pres[r] - 1]
                j.ctx += pres[r]
            j.forwards += 1
            j.timings["decode_positions"] = j.timings.get("decode_positions", 0.0) + len(blocks[r])
            c0 = pres[r] + len(leads[r])  # the canvas block's first row
            items.append((j, h[r, c0:], h[r, c0 - 1] if leads[r] else j.last_hidden))
        eng.step(items)  # one LM-head matmul for every row
        for r, j in enumerate(live):
            if not j.den.finished and j.den.block_done():
                s, e = j.den.block_range()
                clean = leads[r] + j.den.canvas[s:e]
                if j.den.next_block():
                    pending[id(j)] = clean
