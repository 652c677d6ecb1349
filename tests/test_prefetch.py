"""Prefill ahead (engine.decoding.ahead): what a prompt's prefill would cost now, computing it while idle into
the document's own slot a chunk at a time, stopping when aborted, and requests reusing it exactly."""

from __future__ import annotations

import pytest
import torch

from engine import Engine
from engine.decoding import ahead
from engine.templates import FimPrompt
from engine.types import AbortSignal

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CODE = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(12))


@pytest.fixture
def eng() -> Engine:
    return Engine.load("tiny-random", device="cpu")


def _prompt(cut: int = 200) -> FimPrompt:
    return FimPrompt(CODE[:cut], CODE[cut:cut + 120], "m.py")


class AbortAfter(AbortSignal):
    """Aborted once it has been asked ``n`` times (the prefetch asks before each chunk)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    @property
    def aborted(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_a_prefetched_prompt_is_served_from_the_cache_with_the_same_answer(eng: Engine) -> None:
    p = _prompt()
    cold = eng.infill(p, max_tokens=8, single_line=True, cache_key="cold")
    plan = eng.prefill_plan(p, "d")
    assert plan is not None and plan.tokens == cold.prompt_tokens == plan.uncached
    assert plan.ms == pytest.approx(eng.rate.forward_ms + plan.tokens * eng.rate.token_ms)
    assert eng.prefetch(p, "d") == plan.tokens
    assert "d#ahead" in eng.cache and "d#fim" not in eng.cache  # its own slot: the served one stays
    after = eng.prefill_plan(p, "d")
    assert after is not None and after.uncached == 1  # the last token is always recomputed
    assert eng.prefetch(p, "d") == 0  # nothing left to do
    warm = eng.infill(p, max_tokens=8, single_line=True, cache_key="d")
    assert warm.cached_tokens == warm.prompt_tokens - 1
    assert warm.tokens == cold.tokens and warm.text == cold.text


def test_an_aborted_prefetch_keeps_what_it_computed_and_resumes(eng: Engine) -> None:
    p = _prompt()
    n = eng.prefill_plan(p, "d").tokens  # type: ignore[union-attr]
    layers = eng.args.n_layers  # the signal is read before each forward and before each of its layers
    assert n > 4 * 16
    two = 2 * (1 + layers)
    assert ahead.prefetch(eng, p, "d", AbortAfter(two), chunk=16, max_chunk=16) == 32  # aborted between forwards
    left = eng.prefill_plan(p, "d")
    assert left is not None and left.uncached == n - 32
    # aborted inside the next forward (before its second layer): that forward's 16 tokens are not kept
    assert ahead.prefetch(eng, p, "d", AbortAfter(1 + 1), chunk=16, max_chunk=16) == 0
    assert eng.prefill_plan(p, "d").uncached == n - 32  # type: ignore[union-attr]
    gone = AbortSignal()
    gone.abort()
    assert ahead.prefetch(eng, p, "d", gone) == 0
    assert ahead.prefetch(eng, p, "d", chunk=16) == n - 32  # 16, 32, 64, … tokens a forward
    assert eng.prefill_plan(p, "d").uncached == 1  # type: ignore[union-attr]
    cold = eng.infill(p, max_tokens=8, single_line=True, cache_key="cold")
    warm = eng.infill(p, max_tokens=8, single_line=True, cache_key="d")
    assert warm.cached_tokens == warm.prompt_tokens - 1 and warm.tokens == cold.tokens  # the pieces add up
    assert not any(layer._forward_pre_hooks for layer in eng.model.model.layers)  # requests run unhooked


def test_a_jump_prefetch_starts_from_the_documents_served_prompt(eng: Engine) -> None:
    """The full prompt after a move shares its head with what was served: only the rest is computed."""
    eng.infill(_prompt(200), max_tokens=4, single_line=True, cache_key="d")
    moved = _prompt(260)
    plan = eng.prefill_plan(moved, "d")
    assert plan is not None and 0 < plan.uncached < plan.tokens
    assert eng.prefetch(moved, "d") == plan.uncached


def test_the_rate_learns_from_measured_prefills() -> None:
    r = ahead.PrefillRate(torch.device("cpu"))
    r.observe(0, 1000.0)  # nothing computed: nothing learned
    assert (r.forward_ms, r.token_ms) == (50.0, 2.5)
    for _ in range(40):
        r.observe(1, 20.0)
    assert r.forward_ms == pytest.approx(20.0, rel=1e-3)
    for _ in range(40):
        r.observe(100, 20.0 + 100 * 4.0)
    assert r.token_ms == pytest.approx(4.0, rel=1e-3)
    assert r.estimate(0) == 0.0 and r.estimate(10) == pytest.approx(60.0, rel=1e-3)
    r.observe(8, 1e6)  # too short a prefill to say what a token costs
    assert r.token_ms == pytest.approx(4.0, rel=1e-3)
