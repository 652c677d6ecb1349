"""Window decoding for block-causal models: compute only the positions a step can use.

The trained layout denoises a whole 32-token block per step. On a CPU a step over T positions costs
about as much as T / 3 autoregressive steps (docs/PERFORMANCE.md), so when the model unmasks about
one token per step most of that work is wasted. Window mode instead keeps

* a *decided prefix* of the canvas, committed to the KV cache as it grows (clean tokens, causal —
  the commit of a finished block in the trained layout, one token at a time), and
* a *window* of ``W`` positions after it: the first is predicted from the last committed token's
  hidden state (shifted logits — no forward position needed), the others from the ``W - 1`` masked
  inputs that follow it (bidirectional among themselves, as a noisy block).

Each step decides the window's first position (plus every other one above the threshold), so a
step costs ``pending + W - 1`` positions and ``W = 1`` is exactly autoregressive decoding. The
adaptive policy halves ``W`` after a step that unmasked one token and doubles it when every window
position was confident. At ``W = 1``, prompt lookup drafts (the tokens that followed the last
n-gram where it occurs in the prompt or output) are verified in the same forward, causally: greedy
output is identical to plain ``W = 1`` decoding, but a copied span costs one forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from engine.decoding.graphs import pow2

if TYPE_CHECKING:
    from engine.caches.prefix import KVCache
    from engine.decoding.steps import DecodeJob, StepRunner

NGRAM = (3, 2)  # prompt-lookup match lengths, longest first


# ---- prompt lookup -------------------------------------------------------------------------------
class Lookup:
    """Drafts from the prompt and the output so far: after the latest earlier occurrence of the
    sequence's last n tokens, the tokens that followed it.

    A rewrite mostly copies its ``aligned`` source (the editable region) in order, so drafts come from
    there first: the region's start before any output, then what follows the first occurrence of the
    output's last n tokens past the point the previous draft came from (the latest occurrence
    anywhere would often be the output's own previous line). Offline on 80 held-out replay cases (ideal
    rewrites of click + ky sessions), this cut the verify forwards 2,260 → 1,857 at 8 drafts per forward
    (docs/PERFORMANCE.md)."""

    def __init__(self, prompt: list[int], aligned: list[int] | None = None) -> None:
        self.seq: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}  # n-gram -> end of its latest occurrence
        self.push(prompt)
        self.start = len(prompt)  # the output so far is ``seq[start:]``
        self.aligned = aligned or []
        self.at = 0  # where in ``aligned`` the last aligned draft came from
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> ends of its occurrences in ``aligned``
        for n in NGRAM:
            for end in range(n, len(self.aligned)):
                self.ends.setdefault(tuple(self.aligned[end - n:end]), []).append(end)

    def push(self, ids: list[int]) -> None:
        """Append ``ids``; every n-gram ending before the new last token is indexed (the tail's own
        n-gram would only point at itself)."""
        s, old = self.seq, len(self.seq)
        s.extend(ids)
        for end in range(max(1, old), len(s)):
            for n in NGRAM:
                if end >= n:
                    self.index[tuple(s[end - n:end])] = end

    def draft(self, k: int) -> list[int]:
        s = self.seq
        if self.aligned:
            written = len(s) - self.start
            if not written:
                return self.aligned[:k]
            for n in NGRAM:
                if written >= n:
                    end = next((e for e in self.ends.get(tuple(s[-n:]), ()) if e > self.at), None)
                    if end is not None:
                        self.at = end
                        return self.aligned[end:end + k]
        for n in NGRAM:
            end = self.index.get(tuple(s[-n:])) if len(s) >= n else None
            if end is not None:
                return s[end:end + k]
        return []


def rewrite_source(prompt: list[int], region_start: int, region_end: int, cursor: int) -> list[int] | None:
    """The editable region's tokens (the cursor mark left out) when ``prompt`` is a rewrite's, else None."""
    try:
        a = len(prompt) - 1 - prompt[::-1].index(region_start)
        b = prompt.index(region_end, a)
    except ValueError:
        return None
    return [t for t in prompt[a + 1:b] if t != cursor]


# ---- the loop ------------------------------------------------------------------------------------
def step_mask(ctx: int, pending: int, window: int, device: torch.device) -> Tensor | None:
    """(T, S) mask: pending tokens causal, window inputs see everything (None when not needed)."""
    t = pending + window
    if pending <= 1 and window == 0 or pending == 0:
        return None
    q = torch.arange(t, device=device)
    lim = torch.where(q < pending, ctx + q + 1, torch.full_like(q, ctx + t))
    return torch.arange(ctx + t, device=device)[None, :] < lim[:, None]


class WindowDecoder:
    """Decodes one job of `engine.Engine` in window mode (see the module docstring)."""

    def __init__(self, eng: StepRunner, job: DecodeJob) -> None:
        self.eng, self.j = eng, job
        den = job.den
        cfg = den.cfg
        self.shifted = eng.args.shifted_logits
        wmax = cfg.window_max or eng.block_size
        if den.spec.single_line:
            wmax = min(wmax, cfg.single_line_window)
        self.adaptive = cfg.window == "adaptive"
        self.wmax = max(1, wmax if self.adaptive else min(int(cfg.window or 1), wmax))  # type: ignore[arg-type]
        self.w = min(self.wmax, 2) if self.adaptive else self.wmax
        greedy = cfg.temperature <= 0 and cfg.strategy == "threshold"
        self.spec_k = int(cfg.speculate or 0) if greedy and self.shifted else 0
        if den.spec.single_line:
            self.spec_k = min(self.spec_k, cfg.single_line_speculate)
        sp = eng.tokenizer.special
        region = rewrite_source(job.prompt, sp.region_start, sp.region_end, sp.cursor) if self.spec_k else None
        self.lookup = Lookup(job.prompt, region) if self.spec_k else None
        self.stats = {"positions": 0.0, "drafted": 0.0, "accepted": 0.0, "forwards": 0.0}
        self.committed = 0  # canvas positions whose KV is in the cache
        # on CUDA (engine.decoding.graphs) the steps run captured over a one-row arena holding a copy of the
        # prompt's KV: a width-1 step of a 0.5B model is launch-bound eager (20-60 ms on an H200); the
        # decoded tokens' KV never goes back to the job's slot (released at the prompt's length anyway)
        self.graphs = eng.graphs
        assert job.kv is not None
        self.kv: KVCache = job.kv
        if self.graphs is not None:
            widest = pow2(max(self.wmax, self.spec_k + 1) + max(self.wmax, 1))
            self.kv = self.graphs.arena([(job.kv, job.ctx)], job.ctx + den.spec.length + widest + 1)

    def _model(self, ids: list[int], causal: int) -> Tensor:
        """Hidden states (T, dim) of ``ids`` at the job's context: the first ``causal`` of them attend
        causally, the rest (window inputs) to everything up to the last. Their KV is written from the
        context on; committing is the caller's ``j.ctx``."""
        j, eng = self.j, self.eng
        self.kv.length = j.ctx
        t = torch.tensor([ids], device=eng.device)
        h = None
        if self.graphs is not None:
            h = self.graphs.step(self.kv, t, [j.ctx], [j.ctx + len(ids)], [causal], bucket=True)
        if h is None:
            mask = step_mask(j.ctx, causal, len(ids) - causal, eng.device)
            h = eng.model(t, offset=j.ctx, cache=self.kv, mask=mask, logits_slice=slice(0, 0))
        j.forwards += 1
        self.stats["forwards"] += 1
        self.stats["positions"] += len(ids)
        return h[0]

    def forward(self, ids: list[int], pending: int) -> Tensor:
        """Run ``ids`` (``pending`` clean tokens, then window inputs) over the cache at the job's
        context; commits the pending ones. Returns hidden states (T, dim)."""
        j = self.j
        h = self._model(ids, pending)
        if pending:
            j.last_hidden = h[pending - 1]
            j.ctx += pending
            self.kv.length = j.ctx
        return h[pending:]

    def run(self) -> None:
        j, den = self.j, self.j.den
        while not den.finished:
            if j.abort is not None and j.abort.aborted:
                den.abort()
                break
            start = den.prefix
            pending = den.canvas[self.committed:start]
            draft = self._draft() if self.w == 1 else []
            if draft:
                self._speculate(pending, draft)
            else:
                self._window_step(pending, start)
            if self.lookup is not None:
                self.lookup.push(den.canvas[start:den.prefix])
            give_up = den.cfg.give_up
            if give_up is not None and not den.finished and give_up(den.conf[:den.prefix],
                                                                   den.needed - den.prefix):
                den.finish = "gave_up"
        j.timings.update({f"decode_{k}": v for k, v in self.stats.items()})

    def _window_step(self, pending: list[int], start: int) -> None:
        j, den, eng = self.j, self.j.den, self.eng
        den.set_window(start, start + self.w)
        lo, hi = den.block_range()
        n_in = max(0, hi - lo - 1) if self.shifted else hi - lo
        ids = pending + den.canvas[lo:lo + n_in]
        hw = self.forward(ids, len(pending)) if ids else None
        self.committed = start
        cand = den.candidates()
        if self.shifted:
            assert j.last_hidden is not None
            hs = torch.stack([j.last_hidden if c == 0 else hw[c - 1] for c in cand])  # type: ignore[index]
        else:
            assert hw is not None
            hs = hw[cand]
        n = den.step(eng.model.logits(hs[None])[0], cand, force_first=True)
        eng.emit(j, n)
        if self.adaptive:
            if n <= 1 and self.w > 1:
                self.w = max(1, self.w // 2)
            elif den.confident >= len(cand):
                self.w = min(self.wmax, self.w * 2)

    def _draft(self) -> list[int]:
        if self.lookup is None:
            return []
        room = self.j.den.needed - self.j.den.prefix - 1
        draft = self.lookup.draft(min(self.spec_k, room)) if room > 0 else []
        if self.j.den.spec.single_line:  # what follows the line's end is cut: never verify it
            nl = self.eng.newline_ids
            end = next((i + 1 for i, t in enumerate(draft) if t in nl), len(draft))
            draft = draft[:end]
        return draft

    def _speculate(self, pending: list[int], draft: list[int]) -> None:
        """Verify ``draft`` (for the positions after the window's first) in one causal forward."""
        j, den, eng = self.j, self.j.den, self.eng
        start = den.prefix
        ids = pending + draft
        r = len(pending)
        h = self._model(ids, len(ids))
        self.stats["drafted"] += len(draft)
        prev = j.last_hidden if r == 0 else h[r - 1]
        hs = torch.cat([prev[None], h[r:]])  # predicts start .. start + len(draft)
        logits = eng.model.logits(hs[None])[0]
        sup = torch.tensor(den.suppress, device=logits.device)
        best = logits.float().index_fill(1, sup, float("-inf")).argmax(-1).tolist()
        a = 1
        while a <= len(draft) and draft[a - 1] == best[a - 1]:
            a += 1
        a = min(a, den.needed - start)
        den.set_window(start, start + a)
        n = den.step(logits[:a], list(range(a)), take_all=True)
        eng.emit(j, n)
        self.stats["accepted"] += a - 1
        # the accepted draft tokens' KV is exact (causal): commit them with the pending ones
        keep = r + a - 1
        if keep:
            j.last_hidden = h[keep - 1]
            j.ctx += keep
        self.kv.length = j.ctx
        self.committed = start + a - 1
