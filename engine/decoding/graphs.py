"""CUDA graphs for the fixed-shape denoising step.

Inside a block, a step is the same forward again and again: ``R`` rows of ``T`` canvas tokens over
a cached context, no clean tokens to commit. On a GPU at 7B that forward is a few hundred small
kernels, and launching them from Python costs about as much as running them, so the step is
captured once as a CUDA graph and replayed (vLLM / SGLang / gpt-fast do the same).

A graph replays fixed addresses and shapes, so the step runs over an **arena**: a pooled KV
buffer of ``R`` rows (a power of two ≥ the live requests) × ``C`` positions (a power of two ≥ the
longest row's context + canvas, at least `CAP_MIN`). A decode copies each request's cached prompt
KV into its arena row once (`StepGraphs.arena`: ~1 ms for 32K tokens at 7B on an H100), and the
captured step then

* writes the block's keys / values at per-row positions given as a tensor (``scatter_``, not a
  Python slice), and
* attends over all ``C`` arena positions with a key mask ``key < lim[row]`` built inside the graph
  (``lim`` = the row's context + its block: exactly the keys the eager step sees).

A graph also reads the model's rope table at its capture-time address: a longer prompt that grows the table
(a new tensor; the old one freed) makes every captured step stale, so they are dropped and captured again
(replaying them read freed memory — wrong positions, or an illegal memory access).

Rows beyond the live requests are padding (they write into their own unused rows). Steps that
commit a finished block (a causal mask over clean + noisy tokens) run eagerly on a view of the
same arena. Mixture-of-experts layers sync on the host (tokens per expert) and cannot be captured:
those models decode eagerly. ``capture=False`` runs the identical static step without capturing
(the CPU tests check it equals the eager step); ``$EDIT_SERVER_CUDA_GRAPHS`` (0/1) overrides the
default (on for dense models on CUDA).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from engine import options
from engine.caches.prefix import KVCache

log = logging.getLogger(__name__)

ENV = options.CUDA_GRAPHS
CAP_MIN = 1024  # smallest arena (positions)
MAX_ARENAS = 4  # arenas kept (LRU); each holds its graphs


def want_graphs(flag: bool | None, device: torch.device, args: Any) -> bool:
    """CUDA graphs: ``flag``, else ``$EDIT_SERVER_CUDA_GRAPHS``, else on for dense models on CUDA."""
    if device.type != "cuda" or args.n_experts:
        return False
    if flag is not None:
        return flag
    env = options.env().graphs
    return env if env is not None else True


def pow2(n: int, lo: int = 1) -> int:
    p = lo
    while p < n:
        p *= 2
    return p


class _ScatterKV:
    """The KV-cache interface of `engine.model.Attention` for a static step: keys / values land at
    the tensor positions ``pos`` (R, T) and the whole arena is attended to (the mask limits it)."""

    def __init__(self, kv: KVCache, pos: Tensor) -> None:
        self.kv, self.pos = kv, pos

    def write(self, layer: int, k: Tensor, v: Tensor, offset: object) -> tuple[Tensor, Tensor]:
        kb, vb = self.kv.k[layer], self.kv.v[layer]
        idx = self.pos[:, None, :, None].expand(k.shape)
        kb.scatter_(2, idx, k.to(kb.dtype))
        vb.scatter_(2, idx, v.to(vb.dtype))
        return kb, vb


@dataclass
class _Step:
    """Static inputs / output of one (rows, capacity, width) step, and its graph when captured."""
    ids: Tensor  # (R, T)
    pos: Tensor  # (R, T)
    lim: Tensor  # (R,)
    causal: Tensor  # (R,): the row's first ``causal`` tokens see keys up to their own position
    out: Tensor | None = None  # (R, T, dim)
    graph: Any = None  # torch.cuda.CUDAGraph


class StepGraphs:
    """Arenas and captured steps of one model (see the module docstring)."""

    def __init__(self, model: Any, kv_dtype: torch.dtype, device: torch.device, *,
                 capture: bool = True, max_arenas: int = MAX_ARENAS) -> None:
        self.model, self.kv_dtype, self.device = model, kv_dtype, device
        self.capture = capture and device.type == "cuda"
        self.max_arenas = max_arenas
        self.arenas: OrderedDict[tuple[int, int], KVCache] = OrderedDict()
        self.steps: dict[tuple[int, int, int], _Step] = {}
        self.pool: Any = torch.cuda.graph_pool_handle() if self.capture else None
        self.rope: Tensor | None = None  # the rope table the captured steps read (the model's, at capture)
        self.stats = {"captured": 0, "replayed": 0, "arena_copies": 0, "stale_dropped": 0, "pools": 1 if self.capture else 0}

    # ---- arenas ------------------------------------------------------------------------------
    def arena(self, parts: Sequence[tuple[KVCache, int]], need: int, rows: int | None = None) -> KVCache:
        """A view of ``rows`` (default ``len(parts)``) rows of a pooled arena holding ≥ ``need``
        positions; row i holds the first n_i positions of batch-1 (or row-view) cache i. Sources may
        be rows of the same arena (dropping finished rows): they are copied in ascending order,
        never overwritten first."""
        live = len(parts) if rows is None else rows
        rows, cap = pow2(live), pow2(need, CAP_MIN)
        key = (rows, cap)
        kv = self.arenas.pop(key, None)
        if kv is None:
            while len(self.arenas) >= self.max_arenas:
                self._evict(next(iter(self.arenas)))
            a = self.model.args
            kv = KVCache(a.n_layers, rows, a.n_kv_heads, a.head_dim, cap, self.kv_dtype, self.device)
        self.arenas[key] = kv
        for i, (src, n) in enumerate(parts):
            if n and src.k[0][0].data_ptr() != kv.k[0][i].data_ptr():
                for dst, old in ((kv.k, src.k), (kv.v, src.v)):
                    for d, o in zip(dst, old, strict=True):
                        d[i, :, :n] = o[0, :, :n]
                self.stats["arena_copies"] += 1
        return KVCache._from([t[:live] for t in kv.k], [t[:live] for t in kv.v], 0)

    def _evict(self, key: tuple[int, int]) -> None:
        self.arenas.pop(key)
        for k in [k for k in self.steps if k[:2] == key]:
            del self.steps[k]
        self._fresh_pool_if_empty()

    def _fresh_pool_if_empty(self) -> None:
        """A private pool whose graphs are all destroyed has a use count of 0 while blocks allocated in it
        may still live, and capturing into it again trips the caching allocator's ``use_count > 0``
        assert (on an H200 every capture after the rope table regrew failed so, and the engine ran
        uncaptured; vLLM hit the same with a reused global pool). Later captures take a
        new pool; the old one is freed with its last block."""
        if self.capture and not any(st.graph is not None for st in self.steps.values()):
            self.pool = torch.cuda.graph_pool_handle()
            self.stats["pools"] += 1

    def _find(self, kv: KVCache) -> tuple[tuple[int, int], KVCache] | None:
        ptr = kv.k[0].data_ptr()
        for key, arena in self.arenas.items():
            if arena.k[0].data_ptr() == ptr:
                return key, arena
        return None

    # ---- the step ----------------------------------------------------------------------------
    def step(self, kv: KVCache, ids: Tensor, offsets: Sequence[int], limits: Sequence[int],
             causal: Sequence[int] | None = None, *, bucket: bool = False) -> Tensor | None:
        """Hidden states (N, T, dim) of ``ids`` (N, T) written at ``offsets`` (per row) and attending
        to keys ``< limits`` (per row) of ``kv``, an arena view; None when ``kv`` is not one. ``causal``
        (per row): its first that many tokens attend causally instead (keys up to their own position —
        window decoding's committed tokens and verified drafts). ``bucket``: the width padded to a power
        of two (pads after the tokens, seen by none of them; their keys land past the limits and are
        overwritten before anything attends to them), so steps of varying width share a few graphs."""
        found = self._find(kv)
        if found is None or kv.batch != ids.shape[0]:
            return None
        (rows, cap), arena = found
        if self.steps and self.model.rope_current() is not self.rope:
            self._drop_stale()
        n, width = ids.shape
        t = pow2(width) if bucket else width
        if t > width:
            ids = torch.cat([ids, ids[:, -1:].expand(n, t - width)], dim=1)
        if max(offsets) + t > cap:
            return None  # the pads would write past the arena
        key = (rows, cap, t)
        st = self.steps.get(key)
        fresh = st is None
        if st is None:
            table = self.model.rope_table(cap)  # sized before capturing: no host sync inside a graph
            if table is not self.rope:  # this capacity grew it: the steps captured before read the old one
                self._drop_stale()
                self.rope = table
            st = self.steps[key] = _Step(
                ids=torch.zeros(rows, t, dtype=torch.long, device=self.device),
                pos=torch.arange(t, device=self.device).repeat(rows, 1),
                lim=torch.full((rows,), t, dtype=torch.long, device=self.device),
                causal=torch.zeros(rows, dtype=torch.long, device=self.device))
        st.ids[:n].copy_(ids)
        # one host-to-device copy a step: each row's positions, key limit and causal tokens
        per_row = torch.tensor([list(limits), list(causal) if causal is not None else [0] * n], dtype=torch.long)
        host = torch.cat([torch.tensor(list(offsets), dtype=torch.long)[:, None] + torch.arange(t)[None, :],
                          per_row.T], dim=1).to(self.device, non_blocking=True)
        st.pos[:n].copy_(host[:, :t])
        st.lim[:n].copy_(host[:, t])
        st.causal[:n].copy_(host[:, t + 1])
        if not self.capture:
            st.out = self._forward(arena, st, cap)
        elif fresh:
            try:
                self._capture(arena, st, cap)
                self.stats["captured"] += 1
            except RuntimeError as e:  # e.g. an op that syncs with the host: the same step, never captured
                log.warning("capturing the decode step failed (%s): steps run uncaptured from now on", e)
                self.capture = False
                st.graph = None
                st.out = self._forward(arena, st, cap)
        else:
            st.graph.replay()
        self.stats["replayed"] += 1
        assert st.out is not None
        return st.out[:n, :width].clone()

    def _drop_stale(self) -> None:
        """The model's rope table was regrown since the steps were captured: their graphs read the old one."""
        if not self.steps:
            return
        log.info("rope table regrown: %d captured decode steps dropped (captured again on use)", len(self.steps))
        self.stats["stale_dropped"] += len(self.steps)
        self.steps.clear()
        self._fresh_pool_if_empty()

    def _forward(self, arena: KVCache, st: _Step, cap: int) -> Tensor:
        keys = torch.arange(cap, device=self.device)
        q = torch.arange(st.ids.shape[1], device=self.device)
        lim = torch.where(q[None, :] < st.causal[:, None], st.pos + 1, st.lim[:, None])  # (R, T)
        mask = (keys[None, None, :] < lim[:, :, None])[:, None]  # (R, 1, T, C)
        return self.model(st.ids, positions=st.pos, mask=mask, cache=_ScatterKV(arena, st.pos),
                          logits_slice=slice(0, 0))

    def _capture(self, arena: KVCache, st: _Step, cap: int) -> None:
        """Warm up on a side stream (allocator, kernel choice), then capture; the warm-up and the
        capture write the same keys / values the step itself writes, so running them is harmless."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(arena, st, cap)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            st.out = self._forward(arena, st, cap)
        st.graph = graph
        graph.replay()
        log.info("captured the decode step: %d rows x %d tokens over %d positions", *st.ids.shape, cap)

    def info(self) -> dict[str, Any]:
        return {"arenas": [f"{r}x{c}" for r, c in self.arenas], "steps": len(self.steps), **self.stats}
