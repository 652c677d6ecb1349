"""Prefill ahead of a request, and what a request's prefill would cost now.

After the cursor moves, the next completion's prompt shares little with what the prefix cache holds
(the file window moved), and on a CPU its prefill is most of the wait (~2 ms a token on two cores).
`plan` says how many of a prompt's tokens no slot of its document holds and what computing them
would take at the rate this engine measured (`PrefillRate`); `prefetch` computes them while the
server is idle, into the document's own ``#ahead`` slot, in forwards that grow from 32 to 256 tokens,
stopping within a layer when its abort signal is set (a keystroke arrives) and keeping the forwards it
finished. A request copies
the shared prefix from that slot (`engine.decoding.blocks.cached_slot`: the best sibling slot), so
prefetching never evicts the prompt the last answers were computed from.

Block-causal models aligned at the canvas only (our adapters): an absolutely aligned prompt reuses
whole blocks and a bidirectional model recomputes its prompt at every block.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch

from engine.api import InfillCall
from engine.calls import call_request
from engine.decoding.blocks import document_slot
from engine.templates import FimPrompt
from engine.textdiff import common_prefix
from engine.types import AbortSignal, PrefillPlan

if TYPE_CHECKING:
    from typing import Protocol

    from engine.decoding.steps import PrefillHook, StepRunner

    class Prefetcher(StepRunner, Protocol):
        """The engine as a prefetch uses it: the step interface, its request lock, prefill hook and rate."""

        lock: threading.RLock
        prefill_hook: PrefillHook | None
        rate: PrefillRate

AHEAD = "#ahead"  # the slot key suffix prefetched prompts go to (beside "#fim" / "#edit")
# prompt tokens of a prefetch's first forward; each finished forward doubles it up to MAX_CHUNK (longer forwards
# cost less a token). An abort stops a forward between layers, losing that forward's work: short first forwards
# still finish in the gaps between keystrokes
CHUNK = 32
MAX_CHUNK = 256
MIN_TOKENS = 32  # prefills this long or longer teach the rate


class Stopped(Exception):
    """Raised before a layer runs when the prefetch's abort signal is set."""


@contextmanager
def stoppable(model: torch.nn.Module, abort: AbortSignal | None) -> Iterator[None]:
    """Every decoder layer of ``model`` checks ``abort`` before it runs (`Stopped`): an aborted forward ends
    within one layer, so a request waits a layer's time, not a forward's."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if abort is None or layers is None:
        yield
        return

    def check(_module: torch.nn.Module, _args: object) -> None:
        if abort.aborted:
            raise Stopped

    hooks = [layer.register_forward_pre_hook(check) for layer in layers]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


class PrefillRate:
    """Running estimates of what a prefill costs on this machine: milliseconds a forward costs by itself
    and a recomputed prompt token adds (exponential moving averages of the engine's own prefills,
    seeded per device until the first ones are measured)."""

    ALPHA = 0.3

    def __init__(self, device: torch.device) -> None:
        cpu = device.type == "cpu"
        self.forward_ms = 50.0 if cpu else 15.0  # seeds: a 2-core CPU / a GPU forward of the 0.5B model
        self.token_ms = 2.5 if cpu else 0.05
        self._lock = threading.Lock()

    def estimate(self, tokens: int) -> float:
        return 0.0 if tokens <= 0 else self.forward_ms + tokens * self.token_ms

    def observe(self, tokens: int, ms: float, forwards: int = 1) -> None:
        """A prefill that computed ``tokens`` prompt tokens in ``forwards`` forwards and ``ms``."""
        if tokens <= 0:  # nothing recomputed: no forward ran
            return
        with self._lock:
            if tokens == 1:  # a one-token forward: what the fixed part costs
                self.forward_ms += self.ALPHA * (ms / max(1, forwards) - self.forward_ms)
            elif tokens >= MIN_TOKENS:
                per = max(0.0, ms - forwards * self.forward_ms) / tokens
                self.token_ms += self.ALPHA * (per - self.token_ms)


def supported(eng: Prefetcher) -> bool:
    return eng.args.attention == "block_causal" and eng.args.block_align == "canvas" and eng.prefill_hook is None


def prompt_ids(eng: Prefetcher, prompt: FimPrompt) -> list[int]:
    """The tokens a single-line infill of ``prompt`` prefills (the format's, healing included)."""
    return list(call_request(eng, InfillCall(prompt, single_line=True)).prompt_tokens)


def held(eng: Prefetcher, ids: list[int], cache_key: str) -> int:
    """The longest prefix of ``ids`` any slot of the document holds."""
    best = eng.cache.best(cache_key + "#", ids)
    return best[1] if best is not None else 0


def plan(eng: Prefetcher, prompt: FimPrompt, cache_key: str) -> PrefillPlan | None:
    if not supported(eng):
        return None
    ids = prompt_ids(eng, prompt)
    have = min(held(eng, ids, cache_key), max(0, len(ids) - 1))  # the last token is always recomputed
    todo = len(ids) - have
    return PrefillPlan(len(ids), todo, eng.rate.estimate(todo))


@torch.no_grad()
def prefetch(eng: Prefetcher, prompt: FimPrompt, cache_key: str, abort: AbortSignal | None = None,
             chunk: int = CHUNK, max_chunk: int = MAX_CHUNK) -> int:
    """Compute the KV of ``prompt``'s tokens the document's slots lack into its ``#ahead`` slot; the
    number of tokens computed (0: nothing to do or not supported)."""
    if not supported(eng):
        return 0
    with eng.lock:
        ids = prompt_ids(eng, prompt)
        key = cache_key + AHEAD
        slot = document_slot(eng, key, cache_key, ids, len(ids) + eng.block_size, min_gain=1)
        done = common_prefix(slot.tokens, ids)
        try:
            start, t = done, torch.tensor([ids], device=eng.device)
            with stoppable(eng.model, abort):
                while done < len(ids) and not (abort is not None and abort.aborted):
                    end = min(len(ids), done + chunk)
                    t0 = time.perf_counter()
                    slot.kv.length = done
                    try:
                        eng.model(t[:, done:end], offset=done, cache=slot.kv, is_causal=end - done > 1,
                                  logits_slice=slice(0, 0))
                    except Stopped:
                        break  # this forward's positions are not committed: ``done`` stays
                    eng.rate.observe(end - done, (time.perf_counter() - t0) * 1e3)
                    done, chunk = end, min(max_chunk, 2 * chunk)
            return done - start
        finally:  # what was computed stays: the KV of ids[:done] (a failed forward: up to the one before)
            slot.kv.length = done
            slot.tokens, slot.last_hidden, slot.heal_from = ids[:done], None, None
            eng.cache.put(key, slot)
