"""Batched decoding of bidirectional models (Dream / DiffuCoder / Open-dCoder / LLaDA / CoDA).

Every request's sequence is ``before + canvas + after`` (``after``: the suffix of in-place
infilling, as the published infilling code lays it out); several requests run as one batch,
right-padded, with a key-padding mask and their own positions (0 .. len - 1, unchanged by padding),
so each result is the one the request gives alone.

A step is one of two kinds per request:

* **full**: the whole sequence (every step without ``approx_cache``; at each block start with it;
  every step of a DreamOn canvas, whose length changes). With ``approx_cache`` its keys / values
  are kept in the batch's cache (one row per request).
* **block** (Fast-dLLM dual cache, ``approx_cache`` inside a block): only the current block's
  tokens, over the stale cached keys / values of everything else.

All requests needing a full step run as one batched forward, all the others as one batched block
forward: one forward per step when requests are in the same phase, two when some start a block
while others are inside one (and one more per other block width: a request's shorter last block).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from engine.caches.prefix import KVCache
from engine.decoding.expand import ExpandCanvas

if TYPE_CHECKING:
    from engine.decoding.steps import DecodeJob, StepItem, StepRunner


def _length(j: DecodeJob) -> int:
    return len(j.prompt) + len(j.den.canvas) + len(j.after)


def _key_mask(lengths: list[int], width: int, device: torch.device) -> Tensor | None:
    """(R, 1, 1, width) True where a key is real (None when no row is padded)."""
    if all(n == width for n in lengths):
        return None
    lim = torch.tensor(lengths, device=device)
    return (torch.arange(width, device=device)[None, :] < lim[:, None])[:, None, None, :]


def _gather(kv: KVCache, rows: list[int]) -> KVCache:
    idx = torch.tensor(rows, device=kv.k[0].device)
    return KVCache._from([t.index_select(0, idx) for t in kv.k], [t.index_select(0, idx) for t in kv.v], kv.length)


class _Batch:
    """The dual cache of the fixed-length requests: row ``rows[id(job)]`` of ``kv``."""

    def __init__(self, eng: StepRunner, jobs: list[DecodeJob]) -> None:
        self.eng = eng
        fixed = [j for j in jobs if not isinstance(j.den, ExpandCanvas)] if eng.approx_cache else []
        self.rows = {id(j): r for r, j in enumerate(fixed)}
        self.graphs = eng.graphs  # engine.decoding.graphs: block steps captured, over an arena
        self.cap = max((_length(j) for j in fixed), default=0)
        self.kv: KVCache | None = None
        if fixed and self.graphs is not None:
            self.kv = self.graphs.arena([], self.cap, rows=len(fixed))
        elif fixed:
            self.kv = KVCache.for_model(eng.args, len(fixed), self.cap, eng.dtype, eng.device)

    def shrink(self, live: list[DecodeJob]) -> None:
        """Drop the rows of finished requests (one copy, then less work per step)."""
        keep = [j for j in live if id(j) in self.rows]
        if self.kv is None or len(keep) == self.kv.batch:
            return
        if keep and self.graphs is not None:
            self.kv = self.graphs.arena([(self.kv.row(self.rows[id(j)]), _length(j)) for j in keep], self.cap)
        else:
            self.kv = _gather(self.kv, [self.rows[id(j)] for j in keep]) if keep else None
        self.rows = {id(j): r for r, j in enumerate(keep)}


def decode_bidirectional(eng: StepRunner, jobs: list[DecodeJob]) -> None:
    """Denoise every job's canvas; one batched forward per step and phase (module docstring)."""
    batch = _Batch(eng, jobs)
    for j in jobs:
        j.seen = -1  # block of the last full step (dual cache)
        j.prev = None  # hidden state before the block, from that step (shifted logits)
    while True:
        for j in jobs:
            if not j.den.finished and j.abort is not None and j.abort.aborted:
                j.den.abort()
        live = [j for j in jobs if not j.den.finished]
        if not live:
            return
        batch.shrink(live)
        full = [j for j in live if id(j) not in batch.rows or j.seen != j.den.block]
        part = [j for j in live if id(j) in batch.rows and j.seen == j.den.block]
        if full:
            _full_step(eng, batch, full)
        if part:
            _block_step(eng, batch, part)


def _full_step(eng: StepRunner, batch: _Batch, js: list[DecodeJob]) -> None:
    seqs = [j.prompt + j.den.canvas + j.after for j in js]
    lengths = [len(s) for s in seqs]
    width = max(lengths)
    pad = eng.tokenizer.special.mask
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=eng.device)
    cache = None
    if any(id(j) in batch.rows for j in js):
        cache = KVCache.for_model(eng.args, len(js), width, eng.dtype, eng.device)
    h = eng.model(ids, mask=_key_mask(lengths, width, eng.device), cache=cache, logits_slice=slice(0, 0))
    items = []
    for r, j in enumerate(js):
        j.forwards += 1
        j.timings["decode_positions"] = j.timings.get("decode_positions", 0.0) + lengths[r]
        n = len(j.prompt)
        if isinstance(j.den, ExpandCanvas):
            shift = 1 if eng.args.shifted_logits else 0
            pos = [n + p - shift for p in j.den.masked()]
            j.den.step(eng.model.logits(h[r, pos][None])[0])
            eng.emit(j, 1)
            continue
        if cache is not None and batch.kv is not None and id(j) in batch.rows:
            row, m = batch.rows[id(j)], lengths[r]
            for dst, src in ((batch.kv.k, cache.k), (batch.kv.v, cache.v)):
                for d, s in zip(dst, src, strict=True):
                    d[row, :, :m] = s[r, :, :m]
        s, e = j.den.block_range()
        j.seen, j.prev = j.den.block, h[r, n + s - 1]
        items.append((j, h[r, n + s: n + e], j.prev))
    _advance(eng, items)


def _block_step(eng: StepRunner, batch: _Batch, js: list[DecodeJob]) -> None:
    """One batched forward per block width (a request's last block may be shorter): padding a
    shorter block would write over the stale keys / values right after it, which it attends to."""
    widths = [len(j.den.block_ids()) for j in js]
    for w in sorted(set(widths), reverse=True):
        _block_forward(eng, batch, [j for j, x in zip(js, widths, strict=True) if x == w])


def _block_forward(eng: StepRunner, batch: _Batch, js: list[DecodeJob]) -> None:
    assert batch.kv is not None
    rows = [batch.rows[id(j)] for j in js]
    kv = batch.kv if rows == list(range(batch.kv.batch)) else _gather(batch.kv, rows)
    lengths = [_length(j) for j in js]
    kv.length = max(lengths)
    offs = [len(j.prompt) + j.den.block_range()[0] for j in js]
    ids = torch.tensor([j.den.block_ids() for j in js], device=eng.device)
    h = batch.graphs.step(kv, ids, offs, lengths) if batch.graphs is not None else None
    if h is None:
        h = eng.model(ids, offset=offs[0] if len(js) == 1 else offs, cache=kv,
                      mask=_key_mask(lengths, kv.length, eng.device), logits_slice=slice(0, 0))
    for j in js:
        j.forwards += 1
        j.timings["decode_positions"] = j.timings.get("decode_positions", 0.0) + ids.shape[1]
    _advance(eng, [(j, h[r], j.prev) for r, j in enumerate(js)])


def _advance(eng: StepRunner, items: list[StepItem]) -> None:
    """One denoising step of each job (one LM-head matmul for all), then on to the next block."""
    if not items:
        return
    eng.step(items)
    for j, _, _ in items:
        if not j.den.finished and j.den.block_done():
            j.den.next_block()
